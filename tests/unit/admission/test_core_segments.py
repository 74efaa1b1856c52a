"""Segment index arithmetic (webhook.admission.segments) against DESIGN.md §7 and LWS upstream."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.segments import (
    lws_accepted_sizes,
    lws_segment,
    lws_segment_count,
    lws_segmented_pods,
    lws_subgroup_name,
    parse_plain_decimal,
    segment_count,
    smallest_size_within,
    training_segment,
    training_subgroup_name,
)

LW, LE = "LeaderWorker", "LeaderExcluded"


@pytest.mark.parametrize("text, expected", [
    ("4", 4), ("0", 0), ("4\n", None), ("16", 16), ("04", 4), ("10000", 10000),
    ("4x", None), ("-1", None), ("+4", None), ("1e3", None), (" 4", None), ("4 ", None), ("", None),
    ("4.0", None), ("\u0664", None), ("0x10", None), ("1_000", None),
    (4, None), (None, None), (True, None), (4.0, None),
])
def test_parse_plain_decimal(text, expected):
    assert parse_plain_decimal(text) == expected


def test_training_10_workers_segment_size_4():
    # DESIGN.md §7: 10 workers, S=4 → {0-3} {4-7} {8-9}
    assert [training_segment(i, 4) for i in range(10)] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]


def test_training_seed_pod_replica_index_5_is_segment_1():
    assert training_segment(5, 4) == 1
    assert training_subgroup_name(1) == "worker-1"
    assert training_subgroup_name(None) == "master"


def test_training_16_workers_make_4_segments():
    assert segment_count(16, 4) == 4
    assert sorted({training_segment(i, 4) for i in range(16)}) == [0, 1, 2, 3]
    assert segment_count(10, 4) == 3


def groups(group_size, size, policy):
    """Render an LWS group as DESIGN.md §7 writes it: lists of members, 'L' for the leader."""
    out: dict[int | None, list] = {}
    for w in range(group_size):
        out.setdefault(lws_segment(w, group_size, size, policy), []).append("L" if w == 0 else w)
    return out


def test_lws_r5_s2_leader_worker():
    assert groups(5, 2, LW) == {0: ["L", 1, 2], 1: [3, 4]}


def test_lws_r4_s2():
    assert groups(4, 2, LW) == {0: ["L", 1], 1: [2, 3]}


def test_lws_r9_s4():
    assert groups(9, 4, LW) == {0: ["L", 1, 2, 3, 4], 1: [5, 6, 7, 8]}


def test_lws_r5_s2_leader_excluded():
    assert groups(5, 2, LE) == {None: ["L"], 0: [1, 2], 1: [3, 4]}
    assert lws_subgroup_name(None) == "leader"
    assert lws_subgroup_name(1) == "segment-1"


def test_lws_segmented_pods():
    assert lws_segmented_pods(5, LW) == 5
    assert lws_segmented_pods(5, LE) == 4


@pytest.mark.parametrize("call", [
    lambda: training_segment(-1, 4),
    lambda: training_segment(0, 0),
    lambda: lws_segment(5, 5, 2, LW),
    lambda: lws_segment(1, 5, 2, "Other"),
    lambda: lws_segment(1, 0, 2, LW),
    lambda: segment_count(4, 0),
])
def test_bad_arguments_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


def lws_subgroup_index_oracle(pod_count: int, subgroup_size: int, worker_index: int, policy: str) -> str | None:
    """LWS's own ``leaderworkerset.sigs.k8s.io/subgroup-index`` label, re-encoded independently
    from the LWS pod webhook (kubernetes-sigs/lws pkg/webhooks/pod_webhook.go):

    * leader pod: label "0", except under subGroupPolicyType LeaderExcluded (no label);
    * worker pod: ``getSubGroupIndex``: if (podCount-1) % subGroupSize == 0 and
      podCount % subGroupSize != 0 → (workerIndex-1)/subGroupSize, else workerIndex/subGroupSize
      (Go integer division; operands are non-negative here).
    """
    if worker_index == 0:
        return None if policy == LE else "0"
    if (pod_count - 1) % subgroup_size == 0 and pod_count % subgroup_size != 0:
        return str(int((worker_index - 1) / subgroup_size))
    return str(int(worker_index / subgroup_size))


@st.composite
def lws_groups(draw):
    """LWS-valid groups: subGroupSize <= size; LeaderExcluded needs (size-1) % subGroupSize == 0."""
    policy = draw(st.sampled_from([LW, LE]))
    size = draw(st.integers(min_value=2, max_value=64))
    if policy == LE:
        divisors = [s for s in range(2, size) if (size - 1) % s == 0]
        if not divisors:
            policy = LW
        else:
            return size, draw(st.sampled_from(divisors)), policy
    return size, draw(st.integers(min_value=2, max_value=size)), policy


@settings(max_examples=300, deadline=None)
@given(lws_groups())
def test_lws_segment_equals_lws_subgroup_index(group):
    size, sub, policy = group
    for w in range(size):
        ours = lws_segment(w, size, sub, policy)
        assert (None if ours is None else str(ours)) == lws_subgroup_index_oracle(size, sub, w, policy)


@pytest.mark.parametrize("value, expected", [
    ("0" * 5000, 0),                 # leading zeros: Python would refuse to convert 5,000 digits
    ("0" * 4990 + "42", 42),
    ("9" * 5000, 10**18),            # saturates (denied later by the range rules)
    ("1" + "0" * 18, 10**18),
    ("999999999999999999", 999999999999999999),
])
def test_parse_plain_decimal_long_strings(value, expected):
    assert parse_plain_decimal(value) == expected


# ------------------------------------------------------------- segment counts and the too-many-segments fix

def test_lws_segment_count_follows_the_index_rule():
    assert lws_segment_count(5, 2) == 2            # {L,1,2} {3,4}
    assert lws_segment_count(4, 2) == 2            # {L,1} {2,3}
    assert lws_segment_count(9, 4) == 2            # {L,1,2,3,4} {5..8}
    assert lws_segment_count(5, 2, LE) == 2        # L alone, {1,2} {3,4}
    assert lws_segment_count(20001, 2) == 10000    # not ceil(20001 / 2) = 10001
    assert lws_segment_count(1, 2, LE) == 0


def lws_subgroup_count_oracle(pod_count: int, subgroup_size: int, policy: str) -> int:
    """How many subgroups LWS itself makes of one group: the distinct ``subgroup-index`` labels
    its pod webhook gives the group's pods (:func:`lws_subgroup_index_oracle`, not the module
    under test). DESIGN.md §3: LWS's subgroups, KAI's and the webhook's segments are the same."""
    labels = {lws_subgroup_index_oracle(pod_count, subgroup_size, w, policy) for w in range(pod_count)}
    return len(labels - {None})


@pytest.mark.parametrize("group_size, size, policy, expected", [
    (5, 2, LW, 2), (4, 2, LW, 2), (9, 4, LW, 2), (5, 2, LE, 2), (20001, 2, LW, 10000), (1, 2, LE, 0),
    (7, 4, LW, 2),  # 7 % 4 = 3, 6 % 4 = 2: no extra leader, {L,1,2,3} {4,5,6}
])
def test_the_lws_count_oracle_literally(group_size, size, policy, expected):
    assert lws_subgroup_count_oracle(group_size, size, policy) == expected


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=200), st.integers(min_value=1, max_value=50), st.sampled_from([LW, LE]))
def test_lws_segment_count_is_the_number_of_lws_subgroups(group_size, size, policy):
    assert lws_segment_count(group_size, size, policy) == lws_subgroup_count_oracle(group_size, size, policy)


def test_lws_accepted_sizes():
    assert lws_accepted_sizes(30011) == [2, 5, 10, 3001, 6002, 15005, 30010, 30011]
    assert lws_accepted_sizes(30011, at_least=4, most=2) == [5, 10]
    assert lws_accepted_sizes(30011, leader_excluded=True, at_least=3001) == [3001, 6002, 15005, 30010]
    assert lws_accepted_sizes(2) == [2]


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=2, max_value=400), st.sampled_from([LW, LE]), st.booleans(),
       st.sampled_from([1, 2, 3, 7, 10]))
def test_smallest_size_within_is_the_smallest_size_the_rules_admit(group_size, policy, validates, most):
    # the oracle is LWS's (DESIGN.md §5: the leader is not segmented under LeaderExcluded; LWS's
    # subGroupSize validation; segments counted as LWS's subgroups), not webhook.admission.segments
    pods = group_size - 1 if policy == LE else group_size

    def admitted(s):
        if policy == LE and (group_size - 1) % s:
            return False
        if policy == LW and validates and group_size % s and (group_size - 1) % s:
            return False
        return lws_subgroup_count_oracle(group_size, s, policy) <= most

    expected = next((s for s in range(2, pods + 1) if admitted(s)), None)
    assert smallest_size_within(most, pods, group_size=group_size, policy=policy, lws_validates=validates) == expected


def test_smallest_size_within_literal_answers():
    assert smallest_size_within(10000, 30000) == 3                  # training kinds: ceil(pods / 10000)
    assert smallest_size_within(10000, 30011, group_size=30011, lws_validates=True) == 5
    assert smallest_size_within(10000, 50021, group_size=50021, lws_validates=True) == 10
    assert smallest_size_within(10000, 2**31 - 1, group_size=2**31 - 1, lws_validates=True) == 215481
    assert smallest_size_within(10000, 30011, group_size=30011) == 4
