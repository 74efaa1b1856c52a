"""Every registered warning (webhook/admission/warning_rules.py) is given by a real review.

Each example below is a manifest (or pod) through ``webhook.admission.review.review`` and the exact text
the user reads, written out literally: the templates of the registry are checked against what a
review says, never against themselves. The README's table "Every warning a user can meet" lists the
same ids (tests/unit/admission/test_core_rules.py).
"""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import POLICY, REPO, SEG_REQ, SIZE, TOPO, WL_REQ, UnsyncedCatalog, load_example, make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.admission.warning_rules import WARNINGS
from webhook.planning.manifests import load_topology_files

MANIFESTS = REPO / "tests" / "data" / "manifests"
ZONE, RACK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-rack"
CATALOG = load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")])
UNSYNCED = UnsyncedCatalog()
PLAIN = AdmissionSettings()
GATING = AdmissionSettings(gate_pods=True)
WORKLOAD_API = AdmissionSettings(target="workload-api")
WORKER_ANN = "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations"


def manifest(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text(encoding="utf-8"))


def pytorchjob(workers: int = 16, root: dict | None = None, master: dict | None = None, drop=(),
               worker: dict[str, str] | None = None) -> dict:
    """The README's ``pytorchjob-tp4.yaml`` with Worker annotations ``worker`` added (``drop``: removed)."""
    obj = load_example("pytorchjob-tp4.yaml")
    specs = obj["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    annotations = specs["Worker"]["template"]["metadata"]["annotations"]
    annotations.update(worker or {})
    for key in drop:
        del annotations[key]
    if root:
        obj["metadata"]["annotations"] = dict(root)
    if master:
        specs["Master"]["template"]["metadata"] = {"annotations": dict(master)}
    return obj


def master_only() -> dict:
    obj = pytorchjob(root={TOPO: "cluster-topology", SIZE: "4"})
    del obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    return obj


def native(root: dict | None = None, worker: dict[str, str] | None = None) -> dict:
    obj = load_example("distributedworkload-native.yaml")
    if root is not None:
        obj["metadata"]["annotations"] = dict(root)
    if worker:
        obj["spec"]["worker"]["template"]["metadata"] = {"annotations": dict(worker)}
    return obj


def native_misspelled_spec_field() -> dict:
    """The native sample with ``workersPerSegment`` written ``workerPerSegment``."""
    obj = native()
    obj["spec"]["workerPerSegment"] = obj["spec"].pop("workersPerSegment")
    return obj


def misspelled_worker_annotations() -> dict:
    """The README's ``pytorchjob-tp4.yaml`` with the Worker template's ``annotations`` written
    ``annotation`` (a second new-user trial: allowed in silence, every segment key lost)."""
    obj = load_example("pytorchjob-tp4.yaml")
    meta = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    meta["annotation"] = meta.pop("annotations")
    return obj


def lws(size: int = 5, sub_group: dict | None = None, leader: dict | None = None, root: dict | None = None,
        startup: str | None = None, worker: dict[str, str] | None = None) -> dict:
    """The README's ``lws-segmented.yaml`` (``sub_group``: the subGroupPolicy, ``{}`` removes it)."""
    obj = load_example("lws-segmented.yaml")
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = size
    if sub_group is not None:
        if sub_group:
            lwt["subGroupPolicy"] = sub_group
        else:
            del lwt["subGroupPolicy"]
    lwt["workerTemplate"]["metadata"]["annotations"].update(worker or {})
    if leader is not None:
        lwt["leaderTemplate"]["metadata"] = {"annotations": dict(leader)}
    if root is not None:
        obj["metadata"]["annotations"] = dict(root)
    if startup is not None:
        obj["spec"]["startupPolicy"] = startup
    return obj


def mpijob_launcher_differs() -> dict:
    obj = manifest("mpijob-launcher-as-worker.yaml")
    obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] = {"annotations": {SEG_REQ: ZONE}}
    return obj


def jobset_size_6() -> dict:
    obj = manifest("jobset-workers.yaml")
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"][SIZE] = "6"
    return obj


def trainjob_without_nodes() -> dict:
    obj = manifest("trainjob-torch.yaml")
    del obj["spec"]["trainer"]["numNodes"]
    return obj


def pod(labels: dict, annotations: dict, node_name: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "i"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p-0", "namespace": "team-a", "labels": labels, "annotations": annotations},
            "spec": spec}


SEGMENTED = {TOPO: "cluster-topology", SIZE: "4"}
TRAINING_WORKER = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "1",
                   "training.kubeflow.org/job-name": "job"}
LWS_WORKER = {"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": "0",
              "leaderworkerset.sigs.k8s.io/worker-index": "2"}
RAY_WORKER = {"ray.io/cluster": "nvl72", "ray.io/node-type": "worker", "ray.io/group": "gpu"}

def _grouped_pod(podgroup: str) -> dict:
    """A worker pod of target workload-api that names a PodGroup of its own."""
    made = pod(TRAINING_WORKER, {**SEGMENTED, "segments.dev/target": "workload-api", "segments.dev/gang-size": "4"})
    made["spec"]["schedulingGroup"] = {"podGroupName": podgroup}
    return made


def _elastic() -> dict:
    from tests.unit.admission.test_admission_messages import elastic_pytorchjob

    return elastic_pytorchjob()


def _kueue_pytorchjob_10_workers() -> dict:
    obj = pytorchjob(workers=10)
    obj["metadata"].setdefault("labels", {})["segments.dev/target"] = "kueue"
    return obj


def _kueue_ray() -> dict:
    from tests.unit.admission.test_kinds_ray import raycluster

    obj = raycluster(size="4")
    obj["metadata"].setdefault("labels", {})["segments.dev/target"] = "kueue"
    group = obj["spec"]["workerGroupSpecs"][0]
    group["template"]["metadata"]["annotations"]["kai.scheduler/segment-topology-required-placement"] = \
        "cloud.provider.com/topology-rack"
    return obj


#: warning id → (object, settings, catalog) and the text the user reads.
EXAMPLES = {
    "workload-key-on-template": (lambda: (pytorchjob(worker={WL_REQ: ZONE}), PLAIN, CATALOG),
                                 "kai.scheduler/topology-required-placement on the worker template is ignored; "
                                 "set it in metadata.annotations"),
    "segment-levels-without-size": (lambda: (pytorchjob(drop=[SIZE]), PLAIN, CATALOG),
                                    "segment placement ignored: no kai.scheduler/segment-size is set"),
    "segments-without-topology": (lambda: (pytorchjob(drop=[TOPO, SEG_REQ]), PLAIN, CATALOG),
                                  "kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for "
                                  "segments; set it in metadata.annotations"),
    "no-worker-template": (lambda: (master_only(), PLAIN, CATALOG),
                           "PyTorchJob has no worker template: kai.scheduler/segment-size ignored"),
    "partial-last-segment": (lambda: (pytorchjob(workers=10), PLAIN, CATALOG),
                             "10 Worker replicas / segment size 4: last segment has 2 pods"),
    "segment-size-not-canonical": (lambda: (pytorchjob(worker={SIZE: "04"}), PLAIN, CATALOG),
                                   'kai.scheduler/segment-size="04" written as "4"'),
    "segment-size-disagrees-with-spec": (lambda: (native(worker={SIZE: "4"}), PLAIN, CATALOG),
                                         'kai.scheduler/segment-size="4" disagrees with workersPerSegment=8; '
                                         "overwritten"),
    # DESIGN.md §4.5: KAI d5bc503 has no pod-grouper plugin for segments.dev (hub/hub.go)
    "kai-flat-gang": (lambda: (manifest("kai-reader-class-b-distributedworkload.yaml"), PLAIN, CATALOG),
                      "KAI flattens pods DistributedWorkload owns: segments (size 4, required level) not enforced; --gate-pods does"),
    # DESIGN.md §4.5: KAI's Ray grouper makes a group template's level that group's constraint
    "kai-template-level-whole-group": (lambda: (manifest("kai-reader-class-c-raycluster-with-topology.yaml"), PLAIN,
                                                CATALOG),
                                       "workload required level cloud.provider.com/topology-block on worker group "
                                       "gpu: KAI enforces it on the whole group"),
    "root-key-ignored-spec-wins": (lambda: (native(root={SIZE: "2"}, worker={SIZE: "4"}), PLAIN, CATALOG),
                                   'root kai.scheduler/segment-size="2" ignored: workersPerSegment=8 wins'),
    "root-key-overridden": (lambda: (pytorchjob(root={SIZE: "8"}), PLAIN, CATALOG),
                            'root kai.scheduler/segment-size="8" overridden by template'),
    "topology-not-loaded": (lambda: (pytorchjob(), PLAIN, UNSYNCED),
                            'topology "cluster-topology" not loaded yet; levels not checked'),
    "unknown-kai-key": (lambda: (pytorchjob(worker={"kai.scheduler/gang-timeout": "5m"}), PLAIN, CATALOG),
                        "unknown key kai.scheduler/gang-timeout ignored: KAI does not read it"),
    "more-unknown-kai-keys": (lambda: (pytorchjob(worker={f"kai.scheduler/x{i}": "1" for i in range(5)}), PLAIN, CATALOG),
                              f"2 more unknown kai.scheduler/ keys in {WORKER_ANN} ignored"),
    "segment-key-on-unsegmented-template": (lambda: (pytorchjob(master={SIZE: "4"}), PLAIN, CATALOG),
                                            "kai.scheduler/segment-size on the Master template ignored "
                                            "(never segmented)"),
    # new-user trial: a misspelled spec field is dropped by the API server, its constraint with it
    "misspelled-field": (lambda: (misspelled_worker_annotations(), PLAIN, CATALOG),
                         "spec.pytorchReplicaSpecs.Worker.template.metadata.annotation: did you mean annotations? "
                         "the API server drops it"),
    "unknown-field": (lambda: (native_misspelled_spec_field(), PLAIN, CATALOG),
                      "unknown field spec.workerPerSegment=8: did you mean spec.workersPerSegment? rename it; "
                      "the API server drops it"),
    "automatic-no-topology": (lambda: (native(), PLAIN, CATALOG),
                              "automatic segment placement skipped: no kai.scheduler/topology and no default "
                              "topology"),
    "automatic-default-topology-missing": (lambda: (native(), AdmissionSettings(default_topology="gpu-fabric"),
                                                    CATALOG),
                                           'automatic segment placement skipped: default topology "gpu-fabric" '
                                           "not found"),
    "automatic-topology-not-loaded": (lambda: (native(root={TOPO: "cluster-topology"}), PLAIN, UNSYNCED),
                                      'automatic segment placement skipped: topology "cluster-topology" not '
                                      "loaded yet"),
    "lws-partial-group": (lambda: (lws(sub_group={}, worker={SIZE: "3"}), PLAIN, CATALOG),
                          "size 5 / segment size 3: last segment has 2 pods"),
    "lws-subgroup-size-set": (lambda: (lws(worker={SIZE: "4"}), PLAIN, CATALOG),
                              "subGroupSize 2 set to 4 (kai.scheduler/segment-size wins)"),
    "lws-root-size-set": (lambda: (lws(size=8, root={SIZE: "2"}, worker={SIZE: "4"}), PLAIN, CATALOG),
                          'root kai.scheduler/segment-size="2" set to "4" (workerTemplate wins)'),
    "lws-leader-policy-replaced": (lambda: (lws(worker={POLICY: "LeaderExcluded"}), PLAIN, CATALOG),
                                   'kai.scheduler/segment-leader-policy="LeaderExcluded" replaced by '
                                   "subGroupPolicyType LeaderWorker"),
    "lws-leader-template-key-unsegmented": (lambda: (lws(sub_group={}, leader={SEG_REQ: RACK}), PLAIN, CATALOG),
                                            "kai.scheduler/segment-topology-required-placement on the "
                                            "leaderTemplate ignored: the workerTemplate decides segments"),
    "lws-leader-template-differs": (lambda: (lws(leader={SEG_REQ: ZONE}), PLAIN, CATALOG),
                                    "leaderTemplate kai.scheduler/segment-topology-required-placement differs from "
                                    "workerTemplate; worker value wins"),
    "lws-leader-excluded-segment-key": (lambda: (lws(sub_group={"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"},
                                                     leader={SEG_REQ: RACK}), PLAIN, CATALOG),
                                        "kai.scheduler/segment-topology-required-placement on the leaderTemplate "
                                        "ignored: leader excluded from segments"),
    "lws-leader-ready-segments": (lambda: (lws(startup="LeaderReady"), PLAIN, CATALOG),
                                  "startupPolicy LeaderReady: KAI cannot group the lone leader into a segment; "
                                  "use startupPolicy: LeaderCreated"),
    "kai-does-not-enforce": (lambda: (manifest("mpijob-launcher-as-worker.yaml"), PLAIN, CATALOG),
                             "KAI keeps MPIJob PodGroups flat: it does not enforce these MPIJob segments; "
                             "--gate-pods does"),
    "jobset-segments-straddle-jobs": (lambda: (jobset_size_6(), PLAIN, CATALOG),
                                      "replicatedJob workers: segment size 6 and parallelism 4 do not divide each "
                                      "other; segments straddle Jobs"),
    "target-cannot-express": (lambda: (_kueue_ray(), PLAIN, CATALOG),
                              "target kueue: RayCluster pods carry no index Kueue ranks by: its slices are not our "
                              "segment-index labels"),
    # issue 37: segments that may scale (test_admission_messages.py has every target)
    "elastic-partial-segment": (lambda: (_elastic(), PLAIN, CATALOG),
                                "Worker replicas may scale 1-3: a count segment size 2 does not divide gives a "
                                "partial last segment"),
    "elastic-segments-target": (lambda: (_elastic(), GATING, CATALOG),
                                "scaled, --gate-pods gangs the 2 pods written at CREATE: another count waits or is refused"),
    "kueue-partial-slice": (lambda: (_kueue_pytorchjob_10_workers(), AdmissionSettings(kueue_version=(0, 20)), CATALOG),
                            "target kueue: last slice of 2 pods placed partial by Kueue v0.20 (gate "
                            "TASPartialSlices, on by default)"),
    "mpijob-launcher-template-differs": (lambda: (mpijob_launcher_differs(), PLAIN, CATALOG),
                                         "Launcher template kai.scheduler/segment-topology-required-placement "
                                         "differs from the Worker template; Worker value wins"),
    "trainjob-num-nodes-unset": (lambda: (trainjob_without_nodes(), PLAIN, CATALOG),
                                 "spec.trainer.numNodes not set: the runtime's node count decides; segment size "
                                 "not checked"),
    "pod-size-without-topology": (lambda: (pod(TRAINING_WORKER, {SIZE: "4"}), PLAIN, CATALOG),
                                  "pod has kai.scheduler/segment-size but no kai.scheduler/topology; no segment "
                                  "label"),
    "pod-size-not-int": (lambda: (pod(TRAINING_WORKER, {TOPO: "cluster-topology", SIZE: "x"}), PLAIN, CATALOG),
                         'pod kai.scheduler/segment-size="x" is not an int32 >= 1; no segment label'),
    "pod-label-unreadable": (lambda: (pod({**TRAINING_WORKER, "training.kubeflow.org/replica-index": "one"},
                                          SEGMENTED), PLAIN, CATALOG),
                             'pod label training.kubeflow.org/replica-index="one" missing or not an int32; '
                             "no segment label"),
    # issue 37: a Deployment's pod was told about a Kubeflow label
    "pod-of-no-segmented-kind": (lambda: (pod({"app": "web", "pod-template-hash": "5d8f"}, SEGMENTED), PLAIN, CATALOG),
                                 "pod segment size ignored: no index label of a kind the webhook segments (Job, "
                                 "JobSet, LWS, Ray, Kubeflow)"),
    "pod-annotation-unreadable": (lambda: (pod(LWS_WORKER, SEGMENTED), PLAIN, CATALOG),
                                  "pod annotation leaderworkerset.sigs.k8s.io/size missing or not an int32; "
                                  "no segment label"),
    "pod-leader-policy-unknown": (lambda: (pod(LWS_WORKER, {**SEGMENTED, POLICY: "Leaderless"}), PLAIN, CATALOG),
                                  'pod leader policy "Leaderless" unknown; no segment label'),
    "pod-index-out-of-range": (lambda: (pod({**LWS_WORKER, "leaderworkerset.sigs.k8s.io/worker-index": "7"},
                                            {**SEGMENTED, "leaderworkerset.sigs.k8s.io/size": "4"}), PLAIN, CATALOG),
                               "pod worker-index 7 is outside a group of 4 pods; no segment label"),
    "pod-without-index": (lambda: (pod(RAY_WORKER, {**SEGMENTED, "segments.dev/num-of-hosts": "2"}), PLAIN, CATALOG),
                          "pod has no ray.io/worker-group-replica-index (KubeRay < 1.6?): no segment label; "
                          "--gate-pods forms segments at placement"),
    "not-gated-no-gang-key": (lambda: (pod({k: v for k, v in TRAINING_WORKER.items()
                                            if k != "training.kubeflow.org/job-name"}, SEGMENTED), GATING, CATALOG),
                              "not gated: no gang key (label training.kubeflow.org/job-name, or "
                              "leaderworkerset.sigs.k8s.io/name + group-index)"),
    "not-gated-bad-gang-size": (lambda: (pod(TRAINING_WORKER, {**SEGMENTED, "segments.dev/gang-size": "x"}),
                                         GATING, CATALOG),
                                'not gated: segments.dev/gang-size="x" is not a whole number of pods >= 1'),
    "not-gated-no-gang-size": (lambda: (pod(TRAINING_WORKER, SEGMENTED), GATING, CATALOG),
                               "not gated: no segments.dev/gang-size (workload created before --gate-pods?)"),
    "not-gated-node-name": (lambda: (pod(TRAINING_WORKER, {**SEGMENTED, "segments.dev/gang-size": "17"}, "node-1"),
                                     GATING, CATALOG),
                            'not gated: spec.nodeName "node-1" is set (the pod bypasses the scheduler)'),
    # DESIGN.md §9b: target workload-api at pod CREATE
    "not-grouped-no-gang-key": (lambda: (pod({k: v for k, v in TRAINING_WORKER.items()
                                              if k != "training.kubeflow.org/job-name"},
                                             {**SEGMENTED, "segments.dev/target": "workload-api"}), WORKLOAD_API, CATALOG),
                                "no PodGroup: no gang key (label training.kubeflow.org/job-name, or "
                                "leaderworkerset.sigs.k8s.io/name + group-index)"),
    "podgroup-name-kept": (lambda: (_grouped_pod("theirs"), WORKLOAD_API, CATALOG),
                           'spec.schedulingGroup.podGroupName "theirs" kept; its segment\'s PodGroup is "job-segment-0"'),
    # DESIGN.md §9, docs/concepts/kai-readers.md "Gate mode": a root workload level gangs a JobSet / Ray cluster whole
    "gate-head-not-gated": (lambda: (ray_root_level(), GATING, CATALOG),
                            "--gate-pods does not gate the Ray head: cloud.provider.com/topology-block binds the worker "
                            "groups only"),
    "gate-per-group-gangs": (lambda: (jobset_two_segment_levels(), GATING, CATALOG),
                             "--gate-pods gangs JobSet per group (segment levels differ): topology.kubernetes.io/zone "
                             "holds in each only"),
}


def ray_root_level() -> dict:
    obj = manifest("raycluster-multihost.yaml")
    obj["metadata"]["annotations"][WL_REQ] = "cloud.provider.com/topology-block"
    return obj


def jobset_two_segment_levels() -> dict:
    """jobset-workers.yaml (segments of 4 per rack) with a root zone and a second replicatedJob whose
    segments are per host."""
    import copy

    obj = manifest("jobset-workers.yaml")
    obj["metadata"]["annotations"][WL_REQ] = ZONE
    second = copy.deepcopy(obj["spec"]["replicatedJobs"][0])
    second["name"] = "eval"
    second["template"]["spec"]["template"]["metadata"]["annotations"][SEG_REQ] = "kubernetes.io/hostname"
    obj["spec"]["replicatedJobs"].append(second)
    return obj


def test_every_registered_warning_has_an_example():
    assert sorted(EXAMPLES) == sorted(WARNINGS)


@pytest.mark.parametrize("warning_id", sorted(EXAMPLES))
def test_each_warning_is_what_a_review_of_its_example_says(warning_id):
    make, expected = EXAMPLES[warning_id]
    obj, settings, catalog = make()
    decision = review(make_request(obj), catalog, settings)
    assert decision.allowed, decision.message
    assert expected in decision.warnings
    assert len(expected) <= 120  # DESIGN.md §5: a warning is at most 120 characters, so never clipped


def test_a_warning_longer_than_120_characters_is_clipped_by_the_decision():
    obj = pytorchjob(worker={f"kai.scheduler/x{i}": "1" for i in range(5)})
    obj["spec"]["pytorchReplicaSpecs"]["Worker-" + "w" * 60] = obj["spec"]["pytorchReplicaSpecs"].pop("Worker")
    decision = review(make_request(obj), CATALOG, PLAIN)
    long = [w for w in decision.warnings if w.startswith("2 more unknown")]
    assert len(long) == 1 and len(long[0]) == 120 and long[0].endswith("…")


def test_the_default_topology_of_the_missing_default_example_is_unknown_to_the_catalog():
    # the automatic-default-topology-missing example relies on it
    assert CATALOG.get("gpu-fabric") is None and CATALOG.names() == ["cluster-topology"]


def test_a_misspelled_segment_size_is_denied_without_saying_no_size_is_set():
    """The misspelled-key denial names the key; "segment placement ignored: no
    kai.scheduler/segment-size is set" beside it would contradict it (new-user trial)."""
    obj = pytorchjob(drop=[SIZE], worker={"kai.scheduler/segmnet-size": "4"})
    decision = review(make_request(obj), CATALOG, PLAIN)
    assert not decision.allowed and [v.rule for v in decision.violations] == ["misspelled-key"]
    assert "segment placement ignored: no kai.scheduler/segment-size is set" not in decision.warnings
    # without the misspelling the warning is given (its registered example, above)
    decision = review(make_request(pytorchjob(drop=[SIZE])), CATALOG, PLAIN)
    assert "segment placement ignored: no kai.scheduler/segment-size is set" in decision.warnings


def test_segment_keys_on_a_replica_type_that_is_not_worker_are_said_to_be_ignored():
    # pytorchjob-tp4.yaml with its Worker replica type written "Workers": nothing is segmented, and
    # the two segment keys on it are named (new-user trial, issue 38: it was admitted in silence)
    job = load_example("pytorchjob-tp4.yaml")
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Workers"] = specs.pop("Worker")
    decision = review(make_request(job), CATALOG, AdmissionSettings())
    assert decision.allowed
    assert decision.warnings == [
        "kai.scheduler/segment-size on replica type Workers (not Worker) ignored (never segmented)",
        "kai.scheduler/segment-topology-required-placement on replica type Workers (not Worker) ignored (never segmented)",
    ]
