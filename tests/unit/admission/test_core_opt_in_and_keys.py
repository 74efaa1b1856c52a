"""Which objects are the webhook's and which keys it reads (DESIGN.md §5 "Opt-in", "Misspelled keys",
segments without a topology), each case with its literal answer: upstream-valid objects without a
kai.scheduler key are left alone; misspelled keys are denied, KAI's own keys never flagged, other
unknown kai.scheduler/ keys warned; segments without a topology warn and write nothing."""

from __future__ import annotations

import pytest

from tests.conftest import SEG_REQ, SIZE, TOPO
from tests.support.admission_helpers import LWT, W_ANN, lws, run, tp4
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.pod import segment_labels

RACK = "cloud.provider.com/topology-rack"


# ------------------------------------------------------------------ opt-in

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


# ------------------------------------------------------------------ misspelled and unknown keys

@pytest.mark.parametrize("typo, meant", [
    ("kai.scheduler/segment-topology-required-placment", "kai.scheduler/segment-topology-required-placement"),
    ("kai.scheduler/topology-require-placement", "kai.scheduler/topology-required-placement"),
    ("kai.schedular/topology", "kai.scheduler/topology"),
    ("kai.scheduler/segment-sise", "kai.scheduler/segment-size"),
    # letter case: KAI reads the lowercase key only (new-user trial, 2026-12-07)
    ("KAI.SCHEDULER/SEGMENT-TOPOLOGY-REQUIRED-PLACEMENT", "kai.scheduler/segment-topology-required-placement"),
    ("Kai.Scheduler/Segment-Size", "kai.scheduler/segment-size"),
    ("KAI.SCHEDULER/SEGMENT-TOPOLOGY-REQUIRED", "kai.scheduler/segment-topology-required-placement"),
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




def test_many_unknown_kai_keys_are_summarised_not_warned_one_by_one(example_catalog):
    obj = tp4()
    obj["metadata"]["annotations"] = {f"kai.scheduler/x-{i}": "v" for i in range(50)}
    decision = run(obj, example_catalog)
    assert decision.warnings == ["unknown key kai.scheduler/x-0 ignored: KAI does not read it",
                                 "unknown key kai.scheduler/x-1 ignored: KAI does not read it",
                                 "unknown key kai.scheduler/x-2 ignored: KAI does not read it",
                                 "47 more unknown kai.scheduler/ keys in metadata.annotations ignored"]


# ------------------------------------------------------------------ segments without a topology

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
