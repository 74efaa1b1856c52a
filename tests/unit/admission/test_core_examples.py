"""The seed / DESIGN.md examples (shared/examples), end to end through webhook.admission.review.

Expected values are the literal ones of the seed and DESIGN.md §2–§7.
"""

from __future__ import annotations

import jsonpatch
import pytest

from tests.conftest import POLICY, SEG_PREF, SEG_REQ, SIZE, TOPO, WL_PREF, WL_REQ, load_example, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review

RACK = "cloud.provider.com/topology-rack"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"

PLAIN = AdmissionSettings()
AUTO = AdmissionSettings(default_topology="cluster-topology")

EXAMPLES = [
    ("pytorchjob-tp4.yaml", PLAIN),
    ("pytorchjob-zone-and-rack.yaml", PLAIN),
    ("lws-segmented.yaml", PLAIN),
    ("distributedworkload-native.yaml", AUTO),
]


def admit(obj, catalog, settings=PLAIN, **kw):
    decision = review(make_request(obj, **kw), catalog, settings)
    assert decision.allowed, decision.message
    return decision, jsonpatch.JsonPatch(decision.patch).apply(obj, in_place=False)


def pod_labels(annotations, labels, catalog):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": dict(labels), "annotations": dict(annotations)}}
    decision = review(make_request(pod), catalog, PLAIN)
    assert decision.allowed
    return jsonpatch.JsonPatch(decision.patch).apply(pod)["metadata"]["labels"]


def worker_annotations(obj):
    return obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]


def test_pytorchjob_tp4(example_catalog):
    decision, patched = admit(load_example("pytorchjob-tp4.yaml"), example_catalog)
    # Everything is already explicit on the Worker template; the only addition is the Master
    # template's subgroup label (DESIGN.md §2: Master pods are named `master`).
    assert decision.patch == [{
        "op": "add",
        "path": "/spec/pytorchReplicaSpecs/Master/template/metadata",
        "value": {"labels": {"kai.scheduler/subgroup-name": "master"}},
    }]
    assert decision.warnings == []
    assert worker_annotations(patched) == {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK}
    assert patched["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"] == {
        "labels": {"kai.scheduler/subgroup-name": "master"}}


def test_pytorchjob_tp4_pods_make_4_segments_of_4(example_catalog):
    _, patched = admit(load_example("pytorchjob-tp4.yaml"), example_catalog)
    ann = worker_annotations(patched)
    members: dict[str, list[int]] = {}
    for i in range(16):
        labels = pod_labels(ann, {"training.kubeflow.org/replica-type": "worker",
                                  "training.kubeflow.org/replica-index": str(i)}, example_catalog)
        members.setdefault(labels["kai.scheduler/segment-index"], []).append(i)
    assert members == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7], "2": [8, 9, 10, 11], "3": [12, 13, 14, 15]}


def test_pytorchjob_tp4_worker_pod_replica_index_5(example_catalog):
    _, patched = admit(load_example("pytorchjob-tp4.yaml"), example_catalog)
    labels = pod_labels(worker_annotations(patched), {"training.kubeflow.org/replica-type": "worker",
                                                      "training.kubeflow.org/replica-index": "5"}, example_catalog)
    assert labels["kai.scheduler/segment-index"] == "1"
    assert labels["kai.scheduler/subgroup-name"] == "worker-1"


def test_pytorchjob_zone_and_rack_inherits_root_topology(example_catalog):
    decision, patched = admit(load_example("pytorchjob-zone-and-rack.yaml"), example_catalog)
    assert decision.patch == [{"op": "add",
                               "path": "/spec/pytorchReplicaSpecs/Worker/template/metadata/annotations/kai.scheduler~1topology",
                               "value": "cluster-topology"},
                              {"op": "add",
                               "path": "/spec/pytorchReplicaSpecs/Master/template/metadata",
                               "value": {"labels": {"kai.scheduler/subgroup-name": "master"}}}]
    assert worker_annotations(patched) == {SIZE: "4", SEG_REQ: RACK, TOPO: "cluster-topology"}
    assert patched["metadata"]["annotations"] == {TOPO: "cluster-topology", WL_REQ: ZONE}


def test_lws_segmented(example_catalog):
    decision, patched = admit(load_example("lws-segmented.yaml"), example_catalog)
    lwt = patched["spec"]["leaderWorkerTemplate"]
    expected = {TOPO: "cluster-topology", SIZE: "2", SEG_REQ: RACK, POLICY: "LeaderWorker"}
    assert lwt["workerTemplate"]["metadata"]["annotations"] == expected
    # LeaderWorker: the leader is in segment 0, so the explicit leaderTemplate gets the same keys.
    assert lwt["leaderTemplate"]["metadata"]["annotations"] == expected
    assert lwt["subGroupPolicy"] == {"subGroupSize": 2, "subGroupPolicyType": "LeaderWorker"}


def test_lws_segmented_pods(example_catalog):
    _, patched = admit(load_example("lws-segmented.yaml"), example_catalog)
    lwt = patched["spec"]["leaderWorkerTemplate"]
    got = {}
    for w in range(5):
        template = lwt["leaderTemplate"] if w == 0 else lwt["workerTemplate"]
        ann = dict(template["metadata"]["annotations"], **{"leaderworkerset.sigs.k8s.io/size": "5"})
        labels = pod_labels(ann, {"leaderworkerset.sigs.k8s.io/name": "lws-segmented",
                                  "leaderworkerset.sigs.k8s.io/worker-index": str(w)}, example_catalog)
        got[w] = (labels["kai.scheduler/segment-index"], labels["kai.scheduler/subgroup-name"])
    # R=5, S=2, LeaderWorker → {L,1,2} {3,4}; subgroup names are KAI's leaf subgroups (DESIGN.md §2):
    # in segment 0 the leader is `leader` and the other pods `workers`
    assert got == {0: ("0", "leader"), 1: ("0", "workers"), 2: ("0", "workers"),
                   3: ("1", "segment-1"), 4: ("1", "segment-1")}


def test_native_automatic(example_catalog):
    decision, patched = admit(load_example("distributedworkload-native.yaml"), example_catalog, AUTO)
    # DESIGN.md §4.5: KAI d5bc503 has no pod-grouper for segments.dev (one flat PodGroup), so the
    # template is marked flat (its pods get no subgroup-name) and the user is told
    assert patched["spec"]["worker"]["template"]["metadata"]["annotations"] == {
        SIZE: "8", TOPO: "cluster-topology", SEG_PREF: HOST, "segments.dev/kai-flat-gang": "true"}
    assert decision.warnings == [
        "KAI flattens pods DistributedWorkload owns: segments (size 8, preferred level) not enforced; --gate-pods does"]
    assert patched["metadata"]["annotations"][WL_PREF] == HOST
    assert patched["metadata"]["annotations"] == {WL_PREF: HOST, TOPO: "cluster-topology"}
    assert patched["spec"]["workersPerSegment"] == 8


def test_native_without_default_topology_skips_automatic_placement(example_catalog):
    decision, patched = admit(load_example("distributedworkload-native.yaml"), example_catalog, PLAIN)
    # no topology anywhere: segments without a topology (DESIGN.md §5) write no segment keys
    assert decision.patch == []
    assert decision.warnings == [
        "automatic segment placement skipped: no kai.scheduler/topology and no default topology",
        "kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for segments; set it in metadata.annotations"]


@pytest.mark.parametrize("name, settings", EXAMPLES)
def test_examples_are_idempotent(name, settings, example_catalog):
    _, patched = admit(load_example(name), example_catalog, settings)
    again = review(make_request(patched), example_catalog, settings)
    assert again.allowed and again.patch == []
    update = review(make_request(patched, operation="UPDATE", old=patched), example_catalog, settings)
    assert update.allowed and update.patch == []


@pytest.mark.parametrize("name, settings", EXAMPLES)
def test_examples_validate_only_gives_no_patch(name, settings, example_catalog):
    decision = review(make_request(load_example(name)), example_catalog, settings, mutate=False)
    assert decision.allowed and decision.patch == []


def test_unsegmented_pytorchjob_master_template_is_untouched(example_catalog):
    job = load_example("pytorchjob-tp4.yaml")
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"]
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SEG_REQ]
    decision, patched = admit(job, example_catalog)
    assert decision.patch == []
    assert "metadata" not in patched["spec"]["pytorchReplicaSpecs"]["Master"]["template"]


def test_native_master_template_gets_no_subgroup_label(example_catalog):
    # DESIGN.md §4.5: KAI's default grouper makes one flat PodGroup for segments.dev (no subgroup
    # `master` exists), so a `subgroup-name: master` label would name a subgroup KAI lacks
    workload = load_example("distributedworkload-native.yaml")
    workload["spec"]["master"] = {"template": {"metadata": {"labels": {"team": "a"}}, "spec": {"containers": []}}}
    _, patched = admit(workload, example_catalog, AUTO)
    assert patched["spec"]["master"]["template"]["metadata"]["labels"] == {"team": "a"}


def test_master_pod_of_segmented_job_keeps_master_label(example_catalog):
    labels = {"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0",
              "kai.scheduler/subgroup-name": "master"}
    assert pod_labels({}, labels, example_catalog) == labels
