"""MPIJob (kubeflow.org/v2beta1) through the webhook (DESIGN.md §3b, §7, §9): the sample manifest,
its denials and warnings, pod CREATE of pods built as mpi-operator builds them, gate mode.

Facts from mpi-operator v0.8 (``pkg/controller/mpi_job_controller.go``): pods are labelled
``training.kubeflow.org/job-role: launcher|worker``, ``job-name``, ``operator-name: mpi-operator``
and ``replica-index`` (workers i, or i + 1 under ``runLauncherAsWorker``, when the launcher is
``"0"``); Worker replicas default to 0. KAI keeps MPIJob PodGroups flat.
"""

from __future__ import annotations

import jsonpatch
import pytest
import yaml

from tests.conftest import SEG_REQ, SIZE, TOPO, make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.gating.decision import decide
from webhook.planning.expand import expand
from webhook.topology.objects import StaticTopologyCatalog, Topology

MANIFESTS = paths.DATA / "manifests"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
TOPOLOGY = Topology("cluster-topology", ("topology.kubernetes.io/zone", "cloud.provider.com/topology-block", RACK, HOST))
CATALOG = StaticTopologyCatalog([TOPOLOGY])
GATING = AdmissionSettings(gate_pods=True)
KAI_WARNING = "KAI keeps MPIJob PodGroups flat: it does not enforce these MPIJob segments; --gate-pods does"
W = "spec.mpiReplicaSpecs.Worker.template.metadata.annotations"
GANG = "segments.dev/gang-size"


def mpijob(launcher_as_worker=True, workers=15):
    obj = yaml.safe_load((MANIFESTS / "mpijob-launcher-as-worker.yaml").read_text())
    obj["spec"]["runLauncherAsWorker"] = launcher_as_worker
    obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = workers
    return obj


def run(obj, settings=AdmissionSettings(), **kw):
    return review(make_request(obj, **kw), CATALOG, settings)


def patched(obj, decision):
    return jsonpatch.apply_patch(obj, decision.patch)


def template_ann(obj, rtype):
    return obj["spec"]["mpiReplicaSpecs"][rtype]["template"].get("metadata", {}).get("annotations", {})


WORKER_KEYS = {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK}


def test_sample_writes_the_worker_keys_on_the_launcher_as_worker_and_warns_kai_does_not_enforce():
    d = run(mpijob())
    assert d.allowed and d.warnings == [KAI_WARNING]
    out = patched(mpijob(), d)
    assert template_ann(out, "Worker") == WORKER_KEYS
    assert template_ann(out, "Launcher") == WORKER_KEYS  # hostfile position 0: segment 0
    assert "kai.scheduler/subgroup-name" not in str(out)  # KAI keeps MPIJob PodGroups flat (§3b)


def test_a_launcher_that_is_not_a_worker_gets_no_keys():
    obj = mpijob(launcher_as_worker=False, workers=16)
    d = run(obj)
    out = patched(obj, d)
    assert d.allowed and d.warnings == [KAI_WARNING]
    assert template_ann(out, "Launcher") == {}
    assert template_ann(out, "Worker") == WORKER_KEYS


def test_segment_keys_on_a_launcher_that_is_not_a_worker_are_warned_and_left():
    obj = mpijob(launcher_as_worker=False, workers=16)
    obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] = {"annotations": {SIZE: "2"}}
    d = run(obj)
    assert d.allowed
    assert d.warnings == ["kai.scheduler/segment-size on the Launcher template (runLauncherAsWorker is false) ignored "
                          "(never segmented)", KAI_WARNING]
    assert template_ann(patched(obj, d), "Launcher") == {SIZE: "2"}


def test_segment_size_above_workers_plus_launcher_is_denied_naming_the_count():
    obj = mpijob(workers=15)
    obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SIZE] = "17"
    d = run(obj)
    assert [v.rule for v in d.violations] == ["segment-size-exceeds-replicas"]
    assert d.message.startswith(f'{W}["kai.scheduler/segment-size"] = "17": the segment size exceeds the 16 MPI workers '
                                "(the launcher included) (spec.mpiReplicaSpecs.Worker.replicas)")
    assert "fix: " in d.message


def test_worker_replicas_default_to_0():
    obj = mpijob()
    del obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    d = run(obj)  # 0 workers + the launcher: 1 pod < 4
    assert [v.rule for v in d.violations] == ["segment-size-exceeds-replicas"]


def test_run_launcher_as_worker_not_a_boolean_is_a_400():
    obj = mpijob()
    obj["spec"]["runLauncherAsWorker"] = "yes"
    d = run(obj)
    assert d.code == 400 and d.violations[0].field == "spec.runLauncherAsWorker"


def test_without_placement_keys_an_mpijob_is_not_the_webhooks():
    obj = mpijob()
    del obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
    d = run(obj)
    assert d.allowed and d.patch == [] and d.warnings == []


def pod(role, index, annotations=WORKER_KEYS, job="nccl-tests"):
    labels = {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": job,
              "training.kubeflow.org/job-role": role}
    if index is not None:
        labels["training.kubeflow.org/replica-index"] = str(index)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-{role}-{index}", "namespace": "team-a", "labels": labels,
                         "annotations": dict(annotations)},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.mark.parametrize("role, index, segment", [
    ("launcher", 0, "0"), ("worker", 1, "0"), ("worker", 3, "0"), ("worker", 4, "1"), ("worker", 15, "3")])
def test_pod_create_stamps_replica_index_div_size_and_no_subgroup_name(role, index, segment):
    d = run(pod(role, index))
    out = patched(pod(role, index), d)
    assert d.warnings == []
    assert out["metadata"]["labels"]["kai.scheduler/segment-index"] == segment
    assert "kai.scheduler/subgroup-name" not in out["metadata"]["labels"]


def test_a_launcher_without_keys_gets_nothing():
    d = run(pod("launcher", None, annotations={}))
    assert d.patch == [] and d.warnings == []


def test_a_worker_without_replica_index_is_warned_never_denied():
    d = run(pod("worker", None))
    assert d.allowed and d.patch == []
    assert d.warnings == ["pod label training.kubeflow.org/replica-index missing or not an int32; no segment label"]


def test_expansion_names_and_labels_pods_as_mpi_operator_does():
    exp = expand(mpijob(workers=3), CATALOG, AdmissionSettings())
    labels = {p["metadata"]["name"]: p["metadata"]["labels"] for p in exp.pods}
    assert list(labels) == ["nccl-tests-launcher", "nccl-tests-worker-0", "nccl-tests-worker-1", "nccl-tests-worker-2"]
    assert labels["nccl-tests-launcher"]["training.kubeflow.org/replica-index"] == "0"
    assert labels["nccl-tests-launcher"]["training.kubeflow.org/job-role"] == "launcher"
    assert [labels[f"nccl-tests-worker-{i}"]["training.kubeflow.org/replica-index"] for i in range(3)] == ["1", "2", "3"]
    assert all(v["training.kubeflow.org/operator-name"] == "mpi-operator" for v in labels.values())


def test_gate_mode_writes_the_gang_size_and_gates_workers_and_launcher_as_worker():
    d = run(mpijob(), GATING)
    out = patched(mpijob(), d)
    assert template_ann(out, "Worker")[GANG] == "16" and template_ann(out, "Launcher")[GANG] == "16"
    exp = expand(mpijob(), CATALOG, GATING)
    assert len(exp.pods) == 16
    assert all(p["spec"]["schedulingGates"] == [{"name": "segments.dev/placement"}] for p in exp.pods)


def test_a_launcher_that_is_not_a_worker_is_not_gated_nor_in_the_gang():
    exp = expand(mpijob(launcher_as_worker=False, workers=8), CATALOG, GATING)
    launcher = next(p for p in exp.pods if p["metadata"]["name"] == "nccl-tests-launcher")
    assert "schedulingGates" not in launcher["spec"]
    assert template_ann(exp.workload, "Worker")[GANG] == "8"


def nodes(racks=4, per_rack=4):
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"r{r}-n{i}", "labels": {"topology.kubernetes.io/zone": "z",
                                                           "cloud.provider.com/topology-block": "b",
                                                           RACK: f"r{r}", HOST: f"r{r}-n{i}"}},
             "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}
            for r in range(racks) for i in range(per_rack)]


@pytest.mark.parametrize("as_worker, workers", [(True, 15), (False, 16)])
def test_controller_releases_the_mpijob_gang_each_segment_in_one_rack(as_worker, workers):
    exp = expand(mpijob(launcher_as_worker=as_worker, workers=workers), CATALOG, GATING)
    result = decide(nodes(), exp.pods, [TOPOLOGY])
    assert result.waiting == [] and [p.gang for p in result.placed] == ["team-a/nccl-tests"]
    assert len(result.releases) == 16  # the segmented pods; a launcher that is not a worker is not gated
    node_of = {r.name: r.node for r in result.releases}
    by_segment: dict[str, set[str]] = {}
    for p in exp.pods:
        seg = p["metadata"]["labels"].get("kai.scheduler/segment-index")
        if seg is not None:
            by_segment.setdefault(seg, set()).add(node_of[p["metadata"]["name"]].split("-")[0])
    assert sorted(by_segment) == ["0", "1", "2", "3"] and all(len(racks) == 1 for racks in by_segment.values())


def test_a_lower_case_worker_replica_type_is_expanded_as_admission_reads_it():
    # admission reads replica types case-insensitively (kinds/_workload.replica_key); the expansion
    # must too, or place/what-if/controller --once lose the workers (new-user trial, issue 38)
    job = mpijob(workers=3)
    specs = job["spec"]["mpiReplicaSpecs"]
    specs["worker"] = specs.pop("Worker")
    exp = expand(job, CATALOG, AdmissionSettings())
    assert [p["metadata"]["name"] for p in exp.pods] == [
        "nccl-tests-launcher", "nccl-tests-worker-0", "nccl-tests-worker-1", "nccl-tests-worker-2"]
