"""LWS segments (DESIGN.md §3 "One answer for every reader", §2, §5, §7), each case with its
literal answer: LWS, KAI and the webhook give one segment answer (subGroupSize set to the resolved
size, sizes LWS would reject denied); subgroup-name is KAI's leaf subgroup; the too-many-segments
fix names the smallest size LWS accepts; segments are counted as the pod index rule assigns them."""

from __future__ import annotations

import pytest

from tests.conftest import POLICY, SIZE, TOPO, load_example
from tests.support.admission_helpers import LWT, lws, lws_example, run
from webhook.admission.kinds.pod import segment_labels

SGS = f"{LWT}.subGroupPolicy.subGroupSize"


# ------------------------------------------------------------------ one answer for LWS, KAI and the webhook

def test_lws_r8_annotation_4_subgroupsize_2_sets_subgroupsize_to_4(example_catalog):
    obj = lws(size=8, sub_size=2, worker_ann={TOPO: "cluster-topology", SIZE: "4"})
    decision = run(obj, example_catalog)
    assert decision.allowed
    assert decision.warnings == ["subGroupSize 2 set to 4 (kai.scheduler/segment-size wins)"]
    assert decision.patch == [
        {"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/metadata/annotations/kai.scheduler~1segment-leader-policy",
         "value": "LeaderWorker"},
        {"op": "replace", "path": "/spec/leaderWorkerTemplate/subGroupPolicy/subGroupSize", "value": 4},
    ]


def test_lws_differing_root_annotation_is_set_to_the_resolved_size(example_catalog):
    obj = lws(size=8, worker_ann={TOPO: "cluster-topology", SIZE: "4"}, root_ann={SIZE: "2"})
    decision = run(obj, example_catalog)
    assert decision.warnings == ['root kai.scheduler/segment-size="2" set to "4" (workerTemplate wins)']
    assert {"op": "replace", "path": "/metadata/annotations/kai.scheduler~1segment-size", "value": "4"} in decision.patch


def test_lws_size_lws_would_reject_for_subgroupsize_is_denied(example_catalog):
    decision = run(lws(size=8, sub_size=2, worker_ann={TOPO: "cluster-topology", SIZE: "3"}), example_catalog)
    assert [v.rule for v in decision.violations] == ["lws-subgroup-size-divisibility"]


def test_lws_without_subgroupsize_keeps_a_partial_last_segment(example_catalog):
    # no subGroupSize: LWS labels no subgroups and KAI reads the annotation: nothing to disagree with
    decision = run(lws(size=8, worker_ann={TOPO: "cluster-topology", SIZE: "3"}), example_catalog)
    assert decision.allowed and decision.warnings == ["size 8 / segment size 3: last segment has 2 pods"]


# ------------------------------------------------------------------ subgroup-name = KAI's leaf subgroup

def lws_pod_labels(worker_index, group_size, size, policy):
    annotations = {TOPO: "cluster-topology", SIZE: str(size), POLICY: policy,
                   "leaderworkerset.sigs.k8s.io/size": str(group_size)}
    labels = {"leaderworkerset.sigs.k8s.io/name": "l", "leaderworkerset.sigs.k8s.io/worker-index": str(worker_index)}
    return segment_labels(labels, annotations)[0].get("kai.scheduler/subgroup-name")


def test_leader_worker_subgroup_names_are_leader_workers_then_segments():
    # R=8, S=4, LeaderWorker: segment 0 = {L,1,2,3} (KAI: leader + workers under segment-0), segment 1 = {4..7}
    assert [lws_pod_labels(w, 8, 4, "LeaderWorker") for w in range(8)] == [
        "leader", "workers", "workers", "workers", "segment-1", "segment-1", "segment-1", "segment-1"]


def test_leader_excluded_subgroup_names_are_leader_then_segments():
    assert [lws_pod_labels(w, 5, 2, "LeaderExcluded") for w in range(5)] == [
        "leader", "segment-0", "segment-0", "segment-1", "segment-1"]


# ------------------------------------------------------------------ the too-many-segments fix names a size LWS accepts

@pytest.mark.parametrize("size, count, fix_size", [
    (30011, 15005, 5),          # 4 makes few enough segments, but 30011 % 4 and 30010 % 4 are not 0
    (50021, 25010, 10),         # 6 is not accepted: 50021 = 43 * 1163, 50020 = 2^2 * 5 * 41 * 61
    (2147483647, 1073741823, 215481),  # prime; 2^31 - 2 = 2 * 3^2 * 7 * 11 * 31 * 151 * 331
])
def test_lws_too_many_segments_fix_names_the_smallest_size_lws_accepts(example_catalog, size, count, fix_size):
    d = run(lws_example(size), example_catalog)
    assert (d.allowed, d.code) == (False, 403)
    assert d.message == (
        f"{SGS} = 2: {size} pods per group make {count} segments, more than 10000 (rule too-many-segments); "
        f"fix: use a segment size of {fix_size} (the smallest that divides size {size} or size - 1 = {size - 1}, "
        "as LWS requires of subGroupSize, and makes at most 10000 segments).")
    # the size the fix names is admitted
    assert run(lws_example(size, sub_size=fix_size), example_catalog).allowed


def test_the_size_the_old_fix_named_is_denied_by_lws_divisibility(example_catalog):
    d = run(lws_example(30011, sub_size=4), example_catalog)
    assert [v.rule for v in d.violations] == ["lws-subgroup-size-divisibility"]


def test_lws_leader_excluded_too_many_segments_fix_divides_size_minus_1(example_catalog):
    # size - 1 = 30010 = 2 * 5 * 3001: 4 would make 7503 segments but LeaderExcluded needs a divisor
    d = run(lws_example(30011, policy="LeaderExcluded"), example_catalog)
    assert d.message == (
        f"{SGS} = 2: 30010 workers per group (leader excluded) make 15005 segments, more than 10000 "
        "(rule too-many-segments); fix: use a segment size of 5 (the smallest that divides size - 1 = 30010, "
        "as LeaderExcluded requires, and makes at most 10000 segments).")
    assert run(lws_example(30011, sub_size=5, policy="LeaderExcluded"), example_catalog).allowed


def test_lws_annotation_without_subgroupsize_gets_the_smallest_size(example_catalog):
    # no subGroupPolicy: LWS validates nothing, so any size that makes <= 10000 segments will do
    obj = load_example("lws-segmented.yaml")
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = 30011
    del lwt["subGroupPolicy"]
    lwt["workerTemplate"]["metadata"]["annotations"][SIZE] = "2"
    d = run(obj, example_catalog)
    assert d.message == (
        f'{LWT}.workerTemplate.metadata.annotations["kai.scheduler/segment-size"] = "2": 30011 pods per group '
        "make 15005 segments, more than 10000 (rule too-many-segments); fix: use a segment size of at least 4.")
    lwt["workerTemplate"]["metadata"]["annotations"][SIZE] = "4"
    assert run(obj, example_catalog).allowed


# ------------------------------------------------------------------ segments counted like the pod index rule

def test_lws_20001_pods_in_segments_of_2_make_exactly_10000_segments(example_catalog):
    # (R-1) % S == 0 and R % S != 0: the leader joins segment 0, {L,1,2} {3,4} ... {19999,20000}
    d = run(lws_example(20001), example_catalog)
    assert d.allowed, d.message
    assert d.violations == []


def test_lws_20003_pods_in_segments_of_2_are_10001_segments(example_catalog):
    d = run(lws_example(20003), example_catalog)
    assert d.message.startswith(f"{SGS} = 2: 20003 pods per group make 10001 segments, more than 10000 "
                                "(rule too-many-segments)")


def test_last_pod_of_20001_is_in_segment_9999():
    from webhook.admission.kinds.pod import segment_labels

    labels, warnings = segment_labels(
        {"leaderworkerset.sigs.k8s.io/worker-index": "20000", "leaderworkerset.sigs.k8s.io/name": "l"},
        {TOPO: "cluster-topology", SIZE: "2", "leaderworkerset.sigs.k8s.io/size": "20001"})
    assert (labels["kai.scheduler/segment-index"], warnings) == ("9999", [])
