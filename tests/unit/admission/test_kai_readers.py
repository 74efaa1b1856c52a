"""Classes A-E of "no reader drops what we wrote" (DESIGN.md §4.5), through ``review``, ``place`` and
``controller --once``, and the KAI oracle (tests/support/kai_oracle.py) on hand-built cases.

The manifests are tests/data/manifests/kai-reader-class-*.yaml; each names what KAI d5bc503 does with it.
Expected values are stated from DESIGN.md §4.5 and KAI's source (the oracle's docstrings name the
files), never copied from the webhook's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonpatch
import pytest
import yaml

from tests.conftest import REPO, make_request
from tests.support import kai_oracle
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.cli import main
from webhook.topology.objects import default_catalog

MANIFESTS = REPO / "tests" / "data" / "manifests"
CATALOG = default_catalog()
PLAIN = AdmissionSettings()
TOPO, REQ, PREF = "kai.scheduler/topology", "kai.scheduler/topology-required-placement", \
    "kai.scheduler/topology-preferred-placement"
ZONE, BLOCK, RACK, HOST = ("topology.kubernetes.io/zone", "cloud.provider.com/topology-block",
                           "cloud.provider.com/topology-rack", "kubernetes.io/hostname")


def manifest(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text(encoding="utf-8"))


def admit(obj: dict):
    decision = review(make_request(obj), CATALOG, PLAIN)
    patched = jsonpatch.apply_patch(obj, decision.patch) if decision.allowed and decision.patch else obj
    return decision, patched


# ----------------------------------------------------------------------------- class A
def test_a_workload_level_gets_the_templates_topology_name_on_the_root():
    decision, patched = admit(manifest("kai-reader-class-a-pytorchjob.yaml"))
    assert decision.allowed and decision.warnings == []
    # KAI reads the PodGroup's topology from the top owner alone: the root now names it
    assert patched["metadata"]["annotations"] == {REQ: BLOCK, TOPO: "cluster-topology"}
    assert kai_oracle.root_constraint(patched) == kai_oracle.Constraint("cluster-topology", BLOCK, "")


def test_a_workload_level_without_any_topology_is_denied_naming_the_root_first():
    decision, _ = admit(manifest("kai-reader-class-a-no-topology.yaml"))
    assert [v.rule for v in decision.violations] == ["placement-without-topology"]
    assert decision.message == (
        'metadata.annotations["kai.scheduler/topology-required-placement"] = "cloud.provider.com/topology-block": '
        "a placement level needs a topology name (rule placement-without-topology); fix: set kai.scheduler/topology "
        '(e.g. "cluster-topology") in metadata.annotations or '
        "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations.")


def test_a_root_that_names_its_topology_is_left_alone():
    obj = manifest("kai-reader-class-a-pytorchjob.yaml")
    obj["metadata"]["annotations"][TOPO] = "cluster-topology"
    decision, patched = admit(obj)
    assert decision.allowed
    assert patched["metadata"]["annotations"] == {REQ: BLOCK, TOPO: "cluster-topology"}
    assert not [op for op in decision.patch if op["path"].startswith("/metadata/annotations")]


# ----------------------------------------------------------------------------- class B
def test_b_native_workload_is_one_flat_gang_its_pods_get_no_subgroup_name():
    decision, patched = admit(manifest("kai-reader-class-b-distributedworkload.yaml"))
    assert decision.allowed
    assert decision.warnings == ["KAI flattens pods DistributedWorkload owns: segments (size 4, required level) not enforced; --gate-pods does"]
    template_ann = patched["spec"]["worker"]["template"]["metadata"]["annotations"]
    assert template_ann["segments.dev/kai-flat-gang"] == "true"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "class-b-worker-5", "namespace": "team-a", "annotations": dict(template_ann),
                        "labels": {"training.kubeflow.org/replica-type": "worker",
                                   "training.kubeflow.org/replica-index": "5",
                                   "training.kubeflow.org/job-name": "class-b"}},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    answer = review(make_request(pod), CATALOG, PLAIN)
    labelled = jsonpatch.apply_patch(pod, answer.patch)
    # worker 5 of segments of 4: segment 1; no subgroup-name (KAI's default grouper has no subgroups)
    assert {k: v for k, v in labelled["metadata"]["labels"].items() if k.startswith("kai.scheduler/")} == {
        "kai.scheduler/segment-index": "1"}
    group = kai_oracle.derive(patched, [labelled])
    assert group.error is None and group.subgroups == {} and group.rejected == {}


def test_pytorchjob_pods_keep_their_subgroup_names():
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "j-worker-5", "namespace": "team-a",
                        "annotations": {TOPO: "cluster-topology", "kai.scheduler/segment-size": "4"},
                        "labels": {"training.kubeflow.org/replica-type": "worker",
                                   "training.kubeflow.org/replica-index": "5", "training.kubeflow.org/job-name": "j"}},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    labelled = jsonpatch.apply_patch(pod, review(make_request(pod), CATALOG, PLAIN).patch)
    assert labelled["metadata"]["labels"]["kai.scheduler/subgroup-name"] == "worker-1"


# ----------------------------------------------------------------------------- classes C, D
def test_c_ray_group_level_without_topology_on_that_template_is_denied():
    decision, _ = admit(manifest("kai-reader-class-c-raycluster-no-topology.yaml"))
    assert [(v.rule, v.field) for v in decision.violations] == [
        ("template-level-without-topology",
         'spec.workerGroupSpecs[0].template.metadata.annotations["kai.scheduler/topology-required-placement"]')]
    assert "fix: set kai.scheduler/topology in spec.workerGroupSpecs[0].template.metadata.annotations too, or move " \
           "the level to metadata.annotations." in decision.message


def test_c_ray_group_level_with_topology_is_what_kai_enforces_on_the_whole_group():
    obj = manifest("kai-reader-class-c-raycluster-with-topology.yaml")
    decision, patched = admit(obj)
    assert decision.allowed
    assert "workload required level cloud.provider.com/topology-block on worker group gpu: KAI enforces it on the " \
           "whole group" in decision.warnings
    assert not [w for w in decision.warnings if "ignored" in w]
    group = kai_oracle.derive(patched, [])
    assert group.subgroups["gpu"].constraint == kai_oracle.Constraint("cluster-topology", BLOCK, "")


def test_c_the_topology_the_webhook_copies_onto_the_template_counts():
    # root topology, group segmented: the webhook writes the topology on the group template, so
    # KAI reads the level with it: allowed with the warning, not denied
    obj = manifest("kai-reader-class-c-raycluster-with-topology.yaml")
    ann = obj["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"]
    obj["metadata"]["annotations"] = {TOPO: ann.pop(TOPO)}
    decision, patched = admit(obj)
    assert decision.allowed
    assert patched["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"][TOPO] == "cluster-topology"
    assert kai_oracle.derive(patched, []).error is None


def test_d_ray_head_level_without_topology_is_denied():
    decision, _ = admit(manifest("kai-reader-class-d-ray-head.yaml"))
    assert [(v.rule, v.field) for v in decision.violations] == [
        ("template-level-without-topology",
         'spec.headGroupSpec.template.metadata.annotations["kai.scheduler/topology-preferred-placement"]')]


# ----------------------------------------------------------------------------- class E
def test_e_a_user_per_job_level_other_than_the_segments_is_denied():
    decision, _ = admit(manifest("kai-reader-class-e-jobset-user-keys.yaml"))
    assert [(v.rule, v.field) for v in decision.violations] == [
        ("per-job-level-differs",
         'spec.replicatedJobs[0].template.metadata.annotations["kai.scheduler/topology-preferred-placement"]')]


def test_e_a_user_per_job_required_level_is_never_replaced_silently():
    obj = manifest("kai-reader-class-e-jobset-user-keys.yaml")
    obj["spec"]["replicatedJobs"][0]["template"]["metadata"]["annotations"] = {REQ: ZONE}
    decision, _ = admit(obj)
    assert [v.rule for v in decision.violations] == ["per-job-level-differs"]
    assert 'fix: remove it, or set it to "cloud.provider.com/topology-rack".' in decision.message


def test_e_per_job_levels_are_exactly_the_segments():
    decision, patched = admit(manifest("kai-reader-class-e-jobset-same-keys.yaml"))
    assert decision.allowed
    assert patched["spec"]["replicatedJobs"][0]["template"]["metadata"]["annotations"] == {
        REQ: RACK, TOPO: "cluster-topology"}
    group = kai_oracle.derive(patched, [])
    assert {sg.constraint for name, sg in group.subgroups.items() if name != "workers"} == {
        kai_oracle.Constraint("cluster-topology", RACK, "")}


# ----------------------------------------------------------------------------- our engine (item 3)
@pytest.fixture(scope="module")
def trainjob_case(tmp_path_factory):
    """The issue's TrainJob: root required rack, placed with its runtime on the gen-cluster of the issue."""
    where = tmp_path_factory.mktemp("trainjob")
    cluster = where / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "2", "--blocks", "2", "--racks", "4", "--nodes", "8", "--gpus", "8",
                 "--fill", "0.1", "--seed", "1", "-o", str(cluster)]) == 0
    trainjob = manifest("trainjob-torch.yaml")
    trainjob["metadata"]["annotations"][REQ] = RACK
    path = where / "trainjob.yaml"
    path.write_text(yaml.safe_dump(trainjob), encoding="utf-8")
    return str(cluster), str(path), str(MANIFESTS / "clustertrainingruntime-torch.yaml")


def test_place_says_a_trainjob_root_level_can_never_fit(trainjob_case, capfd):
    cluster, trainjob, runtime = trainjob_case
    # 16 nodes of 8 GPUs, 8 GPUs each: no rack of 8 nodes holds them (DESIGN.md §8)
    assert main(["place", "-f", trainjob, "-f", runtime, "--cluster", cluster]) == 1
    assert "not placed: can never fit" in capfd.readouterr().out


def test_controller_once_takes_the_runtime_as_place_does(trainjob_case):
    cluster, trainjob, runtime = trainjob_case
    # a process of its own: the controller writes to the sys.stdout it was imported with
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "controller", "--once", "--snapshot", cluster,
                           "-f", trainjob, "-f", runtime], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    assert [d["gang"] for d in docs if "gang" in d] == ["team-a/llama-ft/*"]  # root level: the whole JobSet is the gang
    assert all("can never fit" in d["waiting"] for d in docs if "gang" in d)


def test_place_keeps_a_jobset_root_level_across_its_replicated_jobs(trainjob_case, capfd):
    # KAI makes one PodGroup of the whole JobSet (jobset_grouper.go), so the root's required rack
    # holds for both replicatedJobs together: 2 Jobs of 4 pods, one rack of 8 nodes
    cluster, _, _ = trainjob_case
    jobset = manifest("jobset-workers.yaml")
    jobset["metadata"]["annotations"][REQ] = RACK
    first = jobset["spec"]["replicatedJobs"][0]
    first["replicas"] = 1
    jobset["spec"]["replicatedJobs"].append({**first, "name": "second"})
    path = Path(cluster).parent / "jobset-two.yaml"
    path.write_text(yaml.safe_dump(jobset), encoding="utf-8")
    assert main(["place", "-f", str(path), "--cluster", cluster, "-o", "json"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert result["workload"]["level"] == RACK
    assert len({node.rsplit("-", 1)[0] for node in result["assignments"].values()}) == 1  # node-<z>-<b>-<r>-<n>


# ----------------------------------------------------------------------------- the oracle itself
def _pod(name: str, labels: dict, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations or {}}}


def test_oracle_pytorchjob_segments_are_worker_leaves_with_the_template_levels():
    job = {"kind": "PyTorchJob", "metadata": {"annotations": {REQ: ZONE}},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": {}},
               "Worker": {"replicas": 6, "template": {"metadata": {"annotations": {
                   TOPO: "t", "kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": RACK}}}}}}}
    pods = [_pod("m", {"training.kubeflow.org/replica-type": "master"})] + [
        _pod(f"w{i}", {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": str(i)})
        for i in range(6)]
    group = kai_oracle.derive(job, pods)
    assert group.constraint == kai_oracle.Constraint("", ZONE, "")  # no topology on the root: not effective
    assert not group.constraint.effective
    assert sorted(group.subgroups) == ["master", "worker", "worker-0", "worker-1"]
    assert group.subgroups["worker-1"].pods == ["w4", "w5"]
    assert group.subgroups["worker-0"].constraint == kai_oracle.Constraint("t", RACK, "")


def test_oracle_ray_level_without_template_topology_is_an_error_and_jobset_reads_the_job_template():
    ray = {"kind": "RayCluster", "metadata": {"annotations": {TOPO: "t"}},
           "spec": {"headGroupSpec": {"template": {"metadata": {"annotations": {PREF: RACK}}}}, "workerGroupSpecs": []}}
    assert "headGroupSpec" in (kai_oracle.derive(ray, []).error or "")
    jobset = {"kind": "JobSet", "metadata": {"annotations": {TOPO: "t"}},
              "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"metadata": {"annotations": {
                  REQ: RACK}}}}]}}
    # the Job template names no topology: KAI drops the per-Job level (no constraint on the leaves)
    group = kai_oracle.derive(jobset, [_pod("p", {"jobset.sigs.k8s.io/replicatedjob-name": "w",
                                                   "jobset.sigs.k8s.io/job-index": "1"})])
    assert group.subgroups["w-replica-1"].constraint is None and group.subgroups["w-replica-1"].pods == ["p"]


def test_oracle_trainjob_annotations_reach_its_jobset_and_a_flat_group_rejects_subgroup_labels():
    trainjob = {"kind": "TrainJob", "metadata": {"annotations": {TOPO: "t", REQ: RACK}}}
    jobset = {"kind": "JobSet", "metadata": {"annotations": {}}, "spec": {"replicatedJobs": [{"name": "node"}]}}
    assert kai_oracle.derive(trainjob, [], jobset=jobset).constraint == kai_oracle.Constraint("t", RACK, "")
    native = {"kind": "DistributedWorkload", "metadata": {"annotations": {}}}
    group = kai_oracle.derive(native, [_pod("w0", {"kai.scheduler/subgroup-name": "worker-0"})])
    assert list(group.rejected) == ["w0"]
