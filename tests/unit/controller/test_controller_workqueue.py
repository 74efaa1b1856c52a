"""The controller's work queue (webhook/controller/workqueue.py): the guarantees of client-go's
``workqueue`` that controller-runtime reconcilers rely on, checked with a fake clock (no waits)."""

from __future__ import annotations

import pytest

from webhook.controller.workqueue import ExponentialRateLimiter, ShutDown, WorkQueue


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def queue(base=1.0, maximum=60.0):
    clock = FakeClock()
    return WorkQueue(ExponentialRateLimiter(base, maximum), clock=clock), clock


def test_a_key_added_twice_is_handed_out_once():
    q, _ = queue()
    q.add("ns/a")
    q.add("ns/b")
    q.add("ns/a")
    assert [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)] == ["ns/a", "ns/b", None]


def test_keys_added_first_go_ahead_of_the_others_in_the_order_they_came():
    """The advisory controller's new pending gangs: the earliest refused is advised first (a burst
    of refusals must not make the first one wait for all that came after it, issue 36)."""
    q, _ = queue()
    for key in ("ns/a", "ns/b", "ns/c"):
        q.add(key)
    q.add("ns/new", first=True)  # a new key: ahead of a, b and c
    q.add("ns/c", first=True)  # waiting already: moved ahead of the others, behind ns/new; queued once
    q.add("ns/c")
    q.add("ns/new", first=True)  # added first again: keeps its place
    assert [q.get(timeout=0) for _ in range(6)] == ["ns/new", "ns/c", "ns/a", "ns/b", None, None]


def test_a_key_added_first_while_processed_is_queued_first_when_done():
    q, _ = queue()
    q.add("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/b")
    q.add("ns/a", first=True)  # its scheduler refused it again while a worker advised it
    assert len(q) == 1
    q.done("ns/a")
    assert [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)] == ["ns/a", "ns/b", None]


def test_a_key_added_while_processed_is_handed_out_again_after_done_only():
    q, _ = queue()
    q.add("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a")  # a change while a worker reconciles it
    assert q.get(timeout=0) is None  # never to a second worker at the same time
    q.done("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a")
    assert q.idle()


def test_add_after_waits_for_the_clock_and_the_earliest_delay_wins():
    q, clock = queue()
    q.add_after("ns/a", 10)
    q.add_after("ns/a", 3)
    assert q.get(timeout=0) is None
    clock.now += 3
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a")
    clock.now += 10  # the superseded 10 s delay does not hand it out again
    assert q.get(timeout=0) is None
    assert q.idle()


def test_rate_limiter_doubles_per_failure_up_to_the_maximum_and_forget_resets():
    # client-go ItemExponentialFailureRateLimiter: base * 2^failures, capped
    limiter = ExponentialRateLimiter(1.0, 60.0)
    assert [limiter.when("g") for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert limiter.when("other") == 1  # per key
    limiter.forget("g")
    assert limiter.when("g") == 1


def test_add_rate_limited_delays_by_the_keys_back_off():
    q, clock = queue(base=2.0)
    assert q.add_rate_limited("ns/a") == 2.0
    clock.now += 1.9
    assert q.get(timeout=0) is None
    clock.now += 0.1
    assert q.get(timeout=0) == "ns/a"


def test_shut_down_wakes_getters_and_ignores_later_adds():
    q, _ = queue()
    q.shut_down()
    q.add("ns/a")
    with pytest.raises(ShutDown):
        q.get()


@pytest.mark.parametrize("base, maximum", [(0, 1), (2, 1), (-1, 5)])
def test_rate_limiter_rejects_bad_bounds(base, maximum):
    with pytest.raises(ValueError, match="need 0 < base <= maximum"):
        ExponentialRateLimiter(base, maximum)
