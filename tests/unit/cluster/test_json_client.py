"""The one client module of the controller's single requests (webhook/cluster/api_server.py,
``JsonClient``; issue 38 item 3) and the one back-off ledger shared with the work queue
(webhook/controller/workqueue.py). The requests go to fake generated-API methods: no server, no
waits. The values are the documented ones: 10 s connect and 30 s read timeouts
(docs/tasks/operations.md), the outage lines of ``ApiServerReachability``, the back-offs of
docs/concepts/gating.md (a gang: 1 s doubling to 60 s; the informers: 0.5 s doubling to 30 s) and of
the release patch (50 ms doubling to 1 s, webhook/controller/patches.py)."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from webhook.cluster.api_server import ApiServerReachability, Backoff, JsonClient
from webhook.controller.cache import INFORMER_BACKOFF_INITIAL, INFORMER_BACKOFF_MAX
from webhook.controller.settings import ControllerSettings
from webhook.controller.workqueue import ExponentialRateLimiter, WorkQueue

URL = "https://127.0.0.1:1"
LOGGER = "webhook.cluster.api_server"


class Body:
    """An unparsed answer (``_preload_content=False``): its bytes and whether it was released."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.released = False

    def release_conn(self) -> None:
        self.released = True


class Method:
    """A generated API method: records each call's arguments, then answers or raises the next of
    ``outcomes`` (bytes: a body; an exception: raised)."""

    def __init__(self, *outcomes: bytes | BaseException) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[tuple[object, ...], dict[str, object]]] = []
        self.bodies: list[Body] = []

    def __call__(self, *args: object, **kwargs: object) -> Body:
        self.calls.append((args, kwargs))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        self.bodies.append(Body(outcome))
        return self.bodies[-1]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def json_client(clock: Clock | None = None) -> JsonClient:
    configuration = k8s_client.Configuration()
    configuration.host = URL
    return JsonClient(k8s_client.ApiClient(configuration), ApiServerReachability(URL, clock=clock or Clock()))


def refused() -> ConnectionRefusedError:
    return ConnectionRefusedError(111, "Connection refused")


def test_a_request_is_sent_unparsed_with_the_documented_timeouts_and_its_answer_read_as_json():
    method = Method(b'{"kind": "Pod", "metadata": {"name": "p-0"}}')
    answer = json_client().send("read pod team-a/p-0", method, "p-0", "team-a")
    assert method.calls == [(("p-0", "team-a"), {"_preload_content": False, "_request_timeout": (10.0, 30.0)})]
    assert answer.body == {"kind": "Pod", "metadata": {"name": "p-0"}}
    assert (answer.refusal, answer.error, answer.status, answer.unreachable) == (None, None, None, False)
    assert method.bodies[0].released  # the connection goes back to the pool read


def test_a_timeout_and_keyword_arguments_are_passed_as_given():
    method = Method(b"{}")
    json_client().send("give up Lease ns/l", method, "l", "ns", timeout=(10.0, 5.0),
                       _content_type="application/merge-patch+json")
    assert method.calls == [(("l", "ns"), {"_preload_content": False, "_request_timeout": (10.0, 5.0),
                                            "_content_type": "application/merge-patch+json"})]


def test_an_answer_that_is_not_an_object_is_an_empty_object():
    assert json_client().send("delete pod a/b", Method(b"[1, 2]"), "b", "a").body == {}


def test_an_http_error_is_a_refusal_with_its_status_and_reason():
    answer = json_client().send("patch pod a/b", Method(ApiException(status=409, reason="Conflict")), "b", "a")
    assert answer.refusal is not None and (answer.refusal.status, answer.refusal.reason) == (409, "Conflict")
    assert (answer.status, answer.body, answer.error, answer.unreachable) == (409, None, None, False)


def test_a_body_that_is_not_json_is_an_error_for_the_caller_and_not_an_outage(caplog):
    method = Method(b"<html>")
    client = json_client()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        answer = client.send("read pod a/b", method, "b", "a")
    assert isinstance(answer.error, ValueError)
    assert (answer.body, answer.refusal, answer.unreachable) == (None, None, False)
    assert method.bodies[0].released
    assert client.reachability.reason is None
    assert caplog.records == []


def test_an_outage_is_one_warning_then_debug_lines_then_one_info_line_when_answered(caplog):
    clock = Clock()
    client = json_client(clock)
    method = Method(refused(), refused(), refused(), b"{}")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        answers = [client.send("read pod team-a/p-0", method, "p-0", "team-a") for _ in range(3)]
        assert client.reachability.reason == f"API server {URL} unreachable: connection refused"
        clock.now += 12.0
        last = client.send("read pod team-a/p-0", method, "p-0", "team-a")
    assert [a.unreachable for a in answers] == [True, True, True]
    assert last.body == {}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"API server {URL} unreachable: connection refused (read pod team-a/p-0); retrying with back-off"),
        ("DEBUG", f"read pod team-a/p-0: API server {URL} unreachable: connection refused"),
        ("DEBUG", f"read pod team-a/p-0: API server {URL} unreachable: connection refused"),
        ("INFO", f"API server {URL} answers again (read pod team-a/p-0) after 12.0 s unreachable "
                 "(3 failed requests; last cause: connection refused)"),
    ]
    assert client.reachability.reason is None


def test_a_refusal_ends_an_outage_too(caplog):
    client = json_client()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        client.send("read pod a/b", Method(refused()), "b", "a")
        client.send("read pod a/b", Method(ApiException(status=404, reason="Not Found")), "b", "a")
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert client.reachability.reason is None


def no_jitter_delays(backoff: Backoff, n: int) -> list[float]:
    return [round(backoff.next_delay(), 6) for _ in range(n)]


@pytest.mark.parametrize("initial, maximum, expected", [
    # the release patch's back-off (webhook/controller/patches.py): 50 ms doubling to 1 s
    (0.05, 1.0, [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]),
    # the requests' default (docs/tasks/operations.md): 0.2 s doubling to 30 s
    (0.2, 30.0, [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]),
])
def test_the_request_back_off_doubles_to_its_cap(initial, maximum, expected):
    assert no_jitter_delays(Backoff(initial=initial, maximum=maximum, jitter=0.0), len(expected)) == expected


def test_the_informer_back_off_is_half_a_second_doubling_to_30_s():
    assert (INFORMER_BACKOFF_INITIAL, INFORMER_BACKOFF_MAX) == (0.5, 30.0)  # docs/concepts/gating.md
    backoff = Backoff(initial=INFORMER_BACKOFF_INITIAL, maximum=INFORMER_BACKOFF_MAX, jitter=0.0)
    assert no_jitter_delays(backoff, 8) == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_the_gang_back_off_and_its_deadline_are_one_ledger_with_the_work_queue():
    """A gang's back-off (docs/concepts/gating.md: 1 s doubling to 60 s) counts in the queue's rate limiter
    and its deadline is kept there, not in a second ledger; one ``forget`` resets both."""
    settings = ControllerSettings(identity="c-1")
    assert (settings.retry_initial, settings.retry_max) == (1.0, 60.0)
    clock = Clock()
    ledger = ExponentialRateLimiter(settings.retry_initial, settings.retry_max, clock=clock)
    queue = WorkQueue(ledger, clock=clock)
    assert ledger.not_before("team-a/g") is None
    delays = []
    for _ in range(8):
        delays.append(ledger.defer("team-a/g"))
        assert ledger.not_before("team-a/g") == clock.now + delays[-1]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert queue.add_rate_limited("team-a/g") == 60.0  # the queue's retries count in the same ledger
    assert ledger.failures("team-a/g") == 9
    queue.forget("team-a/g")
    assert (ledger.failures("team-a/g"), ledger.not_before("team-a/g")) == (0, None)
    assert ledger.defer("team-a/g") == 1.0


def test_a_rate_limited_retry_sets_no_deadline():
    """Only a decision that backs off (``defer``) holds the gang's changes back; a retry after a
    refused patch (``when``, through ``add_rate_limited``) only delays that retry."""
    clock = Clock()
    ledger = ExponentialRateLimiter(1.0, 60.0, clock=clock)
    WorkQueue(ledger, clock=clock).add_rate_limited("team-a/g")
    assert (ledger.failures("team-a/g"), ledger.not_before("team-a/g")) == (1, None)
