"""Pod CREATE segment labels (DESIGN.md §7) through webhook.admission.review."""

from __future__ import annotations

import jsonpatch
import pytest
from hypothesis import given, settings

from tests.conftest import make_request
from tests.unit.admission.test_core_segments import lws_groups, lws_subgroup_index_oracle
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.pod import segment_labels
from webhook.admission.review import review
from webhook.topology.objects import StaticTopologyCatalog

INDEX = "kai.scheduler/segment-index"
NAME = "kai.scheduler/subgroup-name"
SIZE = "kai.scheduler/segment-size"
POLICY = "kai.scheduler/segment-leader-policy"
RTYPE = "training.kubeflow.org/replica-type"
RINDEX = "training.kubeflow.org/replica-index"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_W = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_R = "leaderworkerset.sigs.k8s.io/size"
LWS_SUB = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_TYPE = "leaderworkerset.sigs.k8s.io/subgroup-policy-type"

CATALOG = StaticTopologyCatalog()
PLAIN = AdmissionSettings()


TOPO = "kai.scheduler/topology"


def pod(labels=None, annotations=None, topology="cluster-topology"):
    """A pod; a pod with annotations carries the topology its template got (DESIGN.md §2), unless
    ``topology`` is None."""
    meta: dict = {"name": "p-0", "namespace": "team-a"}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
        if topology is not None:
            meta["annotations"].setdefault(TOPO, topology)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}}


def admit(obj, operation="CREATE"):
    d = review(make_request(obj, operation=operation, old=obj if operation == "UPDATE" else None), CATALOG, PLAIN)
    assert d.allowed, d.message
    return d, jsonpatch.JsonPatch(d.patch).apply(obj, in_place=False)


def worker_pod(i, size="4"):
    return pod({RTYPE: "worker", RINDEX: str(i), "training.kubeflow.org/job-name": "job"}, {SIZE: size})


def test_training_worker_pods_10_workers_size_4():
    got = [admit(worker_pod(i))[1]["metadata"]["labels"][INDEX] for i in range(10)]
    assert got == ["0", "0", "0", "0", "1", "1", "1", "1", "2", "2"]


def test_training_worker_patch_is_add_of_two_labels():
    d, _ = admit(worker_pod(5))
    assert d.patch == [
        {"op": "add", "path": "/metadata/labels/kai.scheduler~1segment-index", "value": "1"},
        {"op": "add", "path": "/metadata/labels/kai.scheduler~1subgroup-name", "value": "worker-1"},
    ]


def test_pod_without_labels_warns_and_is_allowed():
    # no replica type and no LWS labels: the pod's role is unknown → warning, no label, no denial
    d, _ = admit(pod(None, {SIZE: "4"}))
    assert d.patch == []
    # issue 37: not worded for Kubeflow when the pod carries no Kubeflow label at all
    assert d.warnings == ["pod segment size ignored: no index label of a kind the webhook segments (Job, JobSet, LWS, "
                          "Ray, Kubeflow)"]
    bare = pod(None, {SIZE: "4"})
    bare["metadata"]["labels"] = None
    d, _ = admit(bare)
    assert d.patch == [] and len(d.warnings) == 1


def test_replica_type_is_case_insensitive():
    _, out = admit(pod({RTYPE: "Worker", RINDEX: "8"}, {SIZE: "4"}))
    assert out["metadata"]["labels"][NAME] == "worker-2"


def test_master_pod_with_segment_size_is_master_without_index():
    _, out = admit(pod({RTYPE: "master", RINDEX: "0"}, {SIZE: "4"}))
    assert out["metadata"]["labels"][NAME] == "master"
    assert INDEX not in out["metadata"]["labels"]


def test_pod_without_segment_size_gets_empty_patch():
    d, _ = admit(pod({RTYPE: "worker", RINDEX: "3"}, {"kai.scheduler/topology": "cluster-topology"}))
    assert d.patch == [] and d.warnings == []


@pytest.mark.parametrize("labels", [{RTYPE: "worker"}, {RTYPE: "worker", RINDEX: "x5"}, {RTYPE: "worker", RINDEX: "-1"}])
def test_missing_or_garbled_index_warns_and_is_allowed(labels):
    d, _ = admit(pod(labels, {SIZE: "4"}))
    assert d.patch == []
    assert len(d.warnings) == 1 and "no segment label" in d.warnings[0] and RINDEX in d.warnings[0]


def test_garbled_segment_size_warns():
    d, _ = admit(pod({RTYPE: "worker", RINDEX: "1"}, {SIZE: "4x"}))
    assert d.patch == []
    assert d.warnings == ['pod kai.scheduler/segment-size="4x" is not an int32 >= 1; no segment label']


def test_stale_label_is_replaced_and_user_labels_kept():
    _, out = admit(pod({RTYPE: "worker", RINDEX: "5", INDEX: "9", "team": "a"}, {SIZE: "4"}))
    assert out["metadata"]["labels"] == {RTYPE: "worker", RINDEX: "5", INDEX: "1", NAME: "worker-1", "team": "a"}


def test_already_labelled_pod_gives_empty_patch():
    d, _ = admit(pod({RTYPE: "worker", RINDEX: "5", INDEX: "1", NAME: "worker-1"}, {SIZE: "4"}))
    assert d.patch == []


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_other_operations_give_empty_patch(operation):
    obj = worker_pod(5)
    d = review(make_request(obj, operation=operation, old=obj), CATALOG, PLAIN)
    assert d.allowed and d.patch == [] and d.warnings == []


def lws_pod(w, annotations):
    return pod({LWS_NAME: "lws", LWS_W: str(w), "leaderworkerset.sigs.k8s.io/group-index": "0"}, annotations)


def lws_result(w, annotations):
    labels = admit(lws_pod(w, annotations))[1]["metadata"]["labels"]
    return labels.get(INDEX), labels.get(NAME)


def test_lws_leader_worker_r5_s2():
    ann = {SIZE: "2", POLICY: "LeaderWorker", LWS_R: "5"}
    # subgroup names: KAI's leaf subgroups (DESIGN.md §2): `leader` and `workers` in segment 0
    assert [lws_result(w, ann) for w in range(5)] == [
        ("0", "leader"), ("0", "workers"), ("0", "workers"), ("1", "segment-1"), ("1", "segment-1")]


def test_lws_leader_excluded_r5_s2():
    ann = {SIZE: "2", POLICY: "LeaderExcluded", LWS_R: "5"}
    assert [lws_result(w, ann) for w in range(5)] == [
        (None, "leader"), ("0", "segment-0"), ("0", "segment-0"), ("1", "segment-1"), ("1", "segment-1")]


def test_lws_falls_back_to_lws_annotations():
    ann = {LWS_SUB: "2", LWS_TYPE: "LeaderExcluded", LWS_R: "5"}
    assert lws_result(0, ann) == (None, "leader")
    assert lws_result(3, ann) == ("1", "segment-1")


def test_lws_kai_segment_size_beats_subgroup_size():
    ann = {SIZE: "4", LWS_SUB: "2", LWS_R: "9"}
    # R=9, S=4 → {L,1,2,3,4} {5..8}
    assert [lws_result(w, ann)[0] for w in range(9)] == ["0", "0", "0", "0", "0", "1", "1", "1", "1"]


def test_lws_r4_s2_default_policy():
    ann = {SIZE: "2", LWS_R: "4"}
    assert [lws_result(w, ann)[0] for w in range(4)] == ["0", "0", "1", "1"]


def test_lws_worker_without_size_annotation_warns():
    d, _ = admit(lws_pod(2, {SIZE: "2"}))
    assert d.patch == [] and d.warnings == ['pod annotation leaderworkerset.sigs.k8s.io/size missing or not an int32; no segment label']


def test_lws_pod_without_worker_index_warns():
    d, _ = admit(pod({LWS_NAME: "lws"}, {SIZE: "2", LWS_R: "4"}))
    assert d.patch == [] and len(d.warnings) == 1 and LWS_W in d.warnings[0]


def test_lws_worker_index_outside_group_warns():
    d, _ = admit(lws_pod(7, {SIZE: "2", LWS_R: "4"}))
    assert d.patch == [] and d.warnings == ["pod worker-index 7 is outside a group of 4 pods; no segment label"]


def test_malformed_pod_annotations_are_400():
    d = review(make_request(pod({RTYPE: "worker"}, {SIZE: 4})), CATALOG, PLAIN)
    assert d.code == 400 and d.violations[0].field == 'metadata.annotations["kai.scheduler/segment-size"]'


def test_segment_labels_pure_function():
    assert segment_labels({RTYPE: "worker", RINDEX: "5"}, {SIZE: "4", TOPO: "t"}) == ({INDEX: "1", NAME: "worker-1"}, [])
    assert segment_labels({}, {}) == ({}, [])


def test_pod_with_segment_size_but_no_topology_gets_no_label():
    # DESIGN.md §5 "Segments without a topology": KAI ignores such segments, so no segment label
    assert segment_labels({RTYPE: "worker", RINDEX: "5"}, {SIZE: "4"}) == (
        {}, ["pod has kai.scheduler/segment-size but no kai.scheduler/topology; no segment label"])


def test_pod_of_an_lws_that_did_not_opt_in_gets_no_label():
    # DESIGN.md §5 "Opt-in": LWS's own subgroup-size alone does not make the pod the webhook's
    assert segment_labels({LWS_NAME: "lws", LWS_W: "1"}, {LWS_SUB: "2", LWS_R: "4"}) == ({}, [])


@settings(max_examples=150, deadline=None)
@given(lws_groups())
def test_lws_pod_label_equals_lws_subgroup_index(group):
    """End to end through the pod handler: with kai.scheduler/segment-size == subGroupSize, the
    webhook's segment-index equals LWS's own subgroup-index label (oracle in test_core_segments)."""
    size, sub, policy = group
    for w in range(size):
        ann = {SIZE: str(sub), LWS_SUB: str(sub), LWS_R: str(size), LWS_TYPE: policy, POLICY: policy, TOPO: "t"}
        labels, warnings = segment_labels({LWS_NAME: "lws", LWS_W: str(w)}, ann)
        assert warnings == []
        assert labels.get(INDEX) == lws_subgroup_index_oracle(size, sub, w, policy)


def test_leader_excluded_leader_without_a_segment_size_is_named_leader():
    # DESIGN.md §2: under LeaderExcluded the leaderTemplate gets no segment keys; §7: the leader
    # is named `leader`. LWS without subGroupSize adds no subgroup-size annotation either.
    leader = pod(labels={"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/worker-index": "0"},
                 annotations={"kai.scheduler/segment-leader-policy": "LeaderExcluded", TOPO: "cluster-topology",
                              "leaderworkerset.sigs.k8s.io/size": "5"})
    _, patched_pod = admit(leader)
    assert patched_pod["metadata"]["labels"] == {
        "leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/worker-index": "0",
        "kai.scheduler/subgroup-name": "leader"}


def test_huge_index_label_gets_no_overlong_segment_label():
    # a 70-digit index would make a label value over Kubernetes' 63 characters
    d, _ = admit(pod({RTYPE: "worker", RINDEX: "9" * 70}, {SIZE: "4"}))
    assert d.patch == []
    assert len(d.warnings) == 1 and len(d.warnings[0]) <= 120  # DESIGN.md §5: warnings <= 120 characters (cut at a word)
    assert d.warnings[0].startswith('pod label training.kubeflow.org/replica-index="9999')


def test_5000_digit_segment_size_is_a_warning_not_an_error():
    d, _ = admit(pod({RTYPE: "worker", RINDEX: "1"}, {SIZE: "9" * 5000}))
    assert d.patch == [] and len(d.warnings) == 1
