"""Issue 7 reproductions 1-6, each with its literal expected answer (DESIGN.md §2, §3, §5).

1. upstream-valid objects without a kai.scheduler key are not the webhook's (§5 "Opt-in");
2. misspelled keys are denied, KAI's own keys never flagged (§5 "Misspelled keys");
3. scaling is judged by the size rule, not as an immutable change (§5 "UPDATE compares like with like");
4. segments without a topology: a warning, no segment keys, no pod labels (§5);
5. LWS, KAI and the webhook give one segment answer (§3 "One answer for every reader");
6. subgroup-name is KAI's leaf subgroup (§2).
"""

from __future__ import annotations

import jsonpatch
import pytest
from conftest import POLICY, SEG_REQ, SIZE, TOPO, load_example, make_request

from webhook.core.settings import AdmissionSettings
from webhook.core.kinds.pod import segment_labels
from webhook.core.review import review

PLAIN = AdmissionSettings()
AUTO = AdmissionSettings(default_topology="cluster-topology")
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
W_ANN = "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations"
LWT = "spec.leaderWorkerTemplate"


def lws(size=5, sub_size=None, worker_ann=None, root_ann=None, policy=None):
    """A LeaderWorkerSet as a user writes it (no leaderTemplate)."""
    lwt = {"size": size, "workerTemplate": {"metadata": {"annotations": dict(worker_ann or {})},
                                            "spec": {"containers": [{"name": "w", "image": "i"}]}}}
    if sub_size is not None:
        lwt["subGroupPolicy"] = {"subGroupSize": sub_size}
        if policy:
            lwt["subGroupPolicy"]["subGroupPolicyType"] = policy
    meta = {"name": "l", "namespace": "default"}
    if root_ann is not None:
        meta["annotations"] = dict(root_ann)
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"leaderWorkerTemplate": lwt}}


def tp4(replicas=16):
    obj = load_example("pytorchjob-tp4.yaml")
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    return obj


def run(obj, catalog, settings=PLAIN, operation="CREATE", old=None):
    return review(make_request(obj, operation, old=old), catalog, settings)


def created(obj, catalog, settings=PLAIN):
    decision = run(obj, catalog, settings)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(obj, decision.patch)


# ------------------------------------------------------------------ 1. opt-in

@pytest.mark.parametrize("sub_size, size", [(1, 5), (2, 4), (5, 5)])
def test_lws_without_kai_keys_is_allowed_unchanged_whatever_its_subgroupsize(sub_size, size, example_catalog):
    decision = run(lws(size=size, sub_size=sub_size), example_catalog)
    assert (decision.allowed, decision.patch, decision.warnings) == (True, [], [])


def test_pytorchjob_without_kai_keys_is_allowed_unchanged(example_catalog):
    obj = tp4()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] = {"team": "a"}
    decision = run(obj, example_catalog, AdmissionSettings(platform_users=frozenset({"kubectl-user"}),
                                                             default_topology="cluster-topology"))
    assert (decision.allowed, decision.patch, decision.warnings) == (True, [], [])


def test_kai_queue_label_and_keys_kai_reads_do_not_opt_in(example_catalog):
    # KAI's own keys (queue, preemptibility) are on every KAI workload; they ask for no segments
    obj = lws(size=5, sub_size=1, root_ann={"kai.scheduler/preemptibility": "preemptible"})
    obj["metadata"]["labels"] = {"kai.scheduler/queue": "team-a"}
    decision = run(obj, example_catalog)
    assert (decision.allowed, decision.patch, decision.warnings) == (True, [], [])


def test_malformed_object_without_kai_keys_is_not_ours(example_catalog):
    obj = tp4()
    obj["spec"]["pytorchReplicaSpecs"] = "oops"  # the only kai keys lived in the templates
    decision = run(obj, example_catalog)
    assert (decision.allowed, decision.patch) == (True, [])


def test_lws_with_kai_keys_and_subgroupsize_1_names_subgroupsize_in_the_fix(example_catalog):
    decision = run(lws(size=5, sub_size=1, worker_ann={TOPO: "cluster-topology"}), example_catalog)
    assert decision.message == (
        f"{LWT}.subGroupPolicy.subGroupSize = 1: a segment needs more than 1 pod (KAI's pod-grouper reads "
        f"subGroupSize as the segment size and rejects 1) (rule segment-size-too-small); "
        f"fix: set a segment size of at least 2 (or remove {LWT}.subGroupPolicy for no segments).")


# ------------------------------------------------------------------ 2. misspelled keys

@pytest.mark.parametrize("typo, meant", [
    ("kai.scheduler/segment-topology-required-placment", "kai.scheduler/segment-topology-required-placement"),
    ("kai.scheduler/topology-require-placement", "kai.scheduler/topology-required-placement"),
    ("kai.schedular/topology", "kai.scheduler/topology"),
    ("kai.scheduler/segment-sise", "kai.scheduler/segment-size"),
])
def test_misspelled_key_is_denied_naming_key_resembled_key_and_fix(typo, meant, example_catalog):
    obj = tp4()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][typo] = RACK
    decision = run(obj, example_catalog)
    assert decision.code == 403
    assert decision.message == (
        f'{W_ANN}["{typo}"] = "{RACK}": not a key KAI reads but close to {meant}, so this constraint would be lost '
        f"(rule misspelled-key); fix: rename the key to {meant}.")


def test_misspelled_key_alone_on_an_lws_root_is_denied(example_catalog):
    # a misspelled hard constraint never vanishes, even when it is the object's only placement key
    decision = run(lws(root_ann={"kai.scheduler/topology-required-placment": "topology.kubernetes.io/zone"}),
                   example_catalog)
    assert [v.rule for v in decision.violations] == ["misspelled-key"]
    assert decision.violations[0].field == 'metadata.annotations["kai.scheduler/topology-required-placment"]'


@pytest.mark.parametrize("key", [
    # keys KAI reads (kai-scheduler/KAI-Scheduler d5bc503), DESIGN.md §5
    "kai.scheduler/queue", "kai.scheduler/node-pool", "kai.scheduler/preemptibility", "kai.scheduler/preemption-delay",
    "kai.scheduler/task-priority", "kai.scheduler/batch-min-member", "kai.scheduler/skip-podgrouper",
    "kai.scheduler/top-owner-metadata", "kai.scheduler/staleness-grace-period", "kai.scheduler/last-start-timestamp",
    "kai.scheduler/subgroup-name",
])
def test_keys_kai_reads_are_never_flagged(key, example_catalog):
    obj = tp4()
    obj["metadata"]["annotations"] = {key: "x"}
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][key] = "x"
    decision = run(obj, example_catalog)
    assert decision.allowed and decision.warnings == []


def test_other_unknown_kai_key_is_a_warning_naming_it(example_catalog):
    obj = tp4()
    obj["metadata"]["annotations"] = {"kai.scheduler/gang-timeout": "5m"}
    decision = run(obj, example_catalog)
    assert decision.allowed and decision.warnings == ["unknown key kai.scheduler/gang-timeout ignored: KAI does not read it"]


# ------------------------------------------------------------------ 3. scaling is not an immutable change

def test_pytorchjob_scaled_from_16_to_2_workers_meets_only_the_size_rule(example_catalog):
    decision = run(tp4(2), example_catalog, operation="UPDATE", old=created(tp4(16), example_catalog))
    assert decision.message == (
        f'{W_ANN}["kai.scheduler/segment-size"] = "4": the segment size exceeds the 2 Worker replicas '
        "(spec.pytorchReplicaSpecs.Worker.replicas) (rule segment-size-exceeds-replicas); "
        "fix: keep spec.pytorchReplicaSpecs.Worker.replicas at least 4 (a running workload keeps its segment "
        "size 4), or suspend the job (spec.runPolicy.suspend: true) to change the segment size, or delete "
        "and recreate the workload.")  # not "use a segment size of 2": that UPDATE is denied as immutable


def test_pytorchjob_scaled_from_16_to_8_workers_is_allowed(example_catalog):
    decision = run(tp4(8), example_catalog, operation="UPDATE", old=created(tp4(16), example_catalog))
    assert decision.allowed and decision.warnings == []


def test_lws_size_5_to_1_meets_only_the_size_rule(example_catalog):
    ann = {TOPO: "cluster-topology", SIZE: "2"}
    decision = run(lws(size=1, worker_ann=ann), example_catalog, operation="UPDATE",
                   old=created(lws(size=5, worker_ann=ann), example_catalog))
    assert decision.message == (
        f'{LWT}.workerTemplate.metadata.annotations["kai.scheduler/segment-size"] = "2": the segment size exceeds '
        f"the 1 pod per group ({LWT}.size) (rule segment-size-exceeds-replicas); fix: set {LWT}.size to 2 or another "
        "multiple of 2 (or a multiple plus 1) (a running workload keeps its segment size 2), or delete "
        "and recreate the workload.")
    assert "null" not in decision.message and "None" not in decision.message


def test_native_workload_from_32_to_4_workers_meets_only_the_size_rule(example_catalog):
    stored = created(load_example("distributedworkload-native.yaml"), example_catalog, AUTO)
    new = load_example("distributedworkload-native.yaml")
    new["spec"]["workers"] = 4
    decision = run(new, example_catalog, AUTO, operation="UPDATE", old=stored)
    assert decision.message == (
        "spec.workersPerSegment = 8: the segment size exceeds the 4 workers (spec.workers) "
        "(rule segment-size-exceeds-replicas); fix: keep spec.workers at least 8 (a running workload keeps its "
        "segment size 8), or delete and recreate the workload.")


def test_removing_the_segment_size_of_a_running_job_says_removed_not_null(example_catalog):
    new = tp4()
    del new["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SIZE]
    decision = run(new, example_catalog, operation="UPDATE", old=created(tp4(), example_catalog))
    assert decision.message == (
        f'{W_ANN}["kai.scheduler/segment-size"] is not set: the segment size of an existing workload cannot be '
        'removed (was "4") (rule immutable-field); fix: restore the old value, or delete and recreate the workload '
        "(or suspend it first: spec.runPolicy.suspend: true).")


# ------------------------------------------------------------------ 4. segments without a topology

def test_segments_without_a_topology_warn_write_nothing_and_label_no_pod(example_catalog):
    obj = tp4()
    ann = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    del ann[TOPO], ann[SEG_REQ]
    decision = run(obj, example_catalog)
    assert (decision.allowed, decision.patch) == (True, [])
    assert decision.warnings == ["kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for segments; "
                                 "set it in metadata.annotations"]
    # the pod carries the user's segment-size (never removed) but no topology: no segment label
    pod_labels, _ = segment_labels({"training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": "5"}, dict(ann))
    assert pod_labels == {}


def test_lws_segments_without_topology_leave_subgroupsize_alone(example_catalog):
    decision = run(lws(size=8, sub_size=2, worker_ann={SIZE: "4"}), example_catalog)
    assert (decision.allowed, decision.patch) == (True, [])


# ------------------------------------------------------------------ 5. one answer for LWS, KAI and the webhook

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


# ------------------------------------------------------------------ 6. subgroup-name = KAI's leaf subgroup

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


def test_many_unknown_kai_keys_are_summarised_not_warned_one_by_one(example_catalog):
    obj = tp4()
    obj["metadata"]["annotations"] = {f"kai.scheduler/x-{i}": "v" for i in range(50)}
    decision = run(obj, example_catalog)
    assert decision.warnings == ["unknown key kai.scheduler/x-0 ignored: KAI does not read it",
                                 "unknown key kai.scheduler/x-1 ignored: KAI does not read it",
                                 "unknown key kai.scheduler/x-2 ignored: KAI does not read it",
                                 "47 more unknown kai.scheduler/ keys in metadata.annotations ignored"]
