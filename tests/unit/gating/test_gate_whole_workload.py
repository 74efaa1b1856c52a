"""Gate mode honours a root workload level of a JobSet / TrainJob / Ray cluster over the whole object
(DESIGN.md §4.5, §9; docs/concepts/kai-readers.md "Gate mode"): KAI d5bc503 makes one PodGroup of the whole
object (``plugins/jobset/jobset_grouper.go``, ``plugins/ray/ray_grouper.go``), so the gate gangs it
as one: ``segments.dev/gang-scope: workload``, ``segments.dev/gang-size`` = the pods of all groups,
gang key ``<namespace>/<name>/*``."""

from __future__ import annotations

import copy
import io

import jsonpatch
import yaml

from tests.conftest import make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.registry import gang_key
from webhook.admission.review import review
from webhook.cli import main
from webhook.controller.main import run_once
from webhook.topology.objects import StaticTopologyCatalog, Topology

ZONE, BLOCK, RACK, HOST = ("topology.kubernetes.io/zone", "cloud.provider.com/topology-block",
                           "cloud.provider.com/topology-rack", "kubernetes.io/hostname")
CATALOG = StaticTopologyCatalog([Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))])
GATING = AdmissionSettings(gate_pods=True)
WL_REQ = "kai.scheduler/topology-required-placement"
SIZE, SCOPE = "segments.dev/gang-size", "segments.dev/gang-scope"


def _job(name, replicas, parallelism, segment=None):
    annotations = {} if segment is None else {"kai.scheduler/segment-size": "4",
                                              "kai.scheduler/segment-topology-required-placement": segment}
    return {"name": name, "replicas": replicas, "template": {"spec": {
        "parallelism": parallelism, "completions": parallelism,
        "template": {"metadata": {"annotations": annotations}, "spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}


def jobset(level=ZONE, second_segment=None):
    """JobSet llm: replicatedJob big (2 Jobs × 4 pods) and small (1 Job × 4 pods), 8 GPUs a pod."""
    root = {"kai.scheduler/topology": "cluster-topology"}
    if level:
        root[WL_REQ] = level
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llm", "namespace": "team-a", "annotations": root},
            "spec": {"replicatedJobs": [_job("big", 2, 4), _job("small", 1, 4, second_segment)]}}


def raycluster(level=BLOCK):
    """RayCluster nvl72: head + worker groups gpu (3 × 2 hosts) and cpu (2 × 1 host)."""
    root = {"kai.scheduler/topology": "cluster-topology", WL_REQ: level}
    worker = {"spec": {"containers": [{"name": "w", "image": "i"}]}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "nvl72", "namespace": "team-a", "annotations": root},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "i"}]}}},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": 3, "numOfHosts": 2, "template": worker},
                                          {"groupName": "cpu", "replicas": 2, "template": copy.deepcopy(worker)}]}}


def admitted(obj):
    decision = review(make_request(obj), CATALOG, GATING)
    assert decision.allowed, decision.violations
    return jsonpatch.apply_patch(obj, decision.patch), decision.warnings


def pod_annotations(js, k):
    return js["spec"]["replicatedJobs"][k]["template"]["spec"]["template"]["metadata"]["annotations"]


def test_a_jobset_root_level_makes_the_whole_jobset_one_gang():
    out, warnings = admitted(jobset())
    for k in (0, 1):  # 8 + 4 pods
        assert pod_annotations(out, k)[SIZE] == "12"
        assert pod_annotations(out, k)[SCOPE] == "workload"
    assert warnings == []
    labels = {"jobset.sigs.k8s.io/jobset-name": "llm", "jobset.sigs.k8s.io/replicatedjob-name": "small"}
    assert gang_key("team-a", labels, pod_annotations(out, 1)) == "team-a/llm/*"


def test_without_a_root_level_each_replicated_job_stays_its_own_gang():
    obj = jobset(level=None)
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"] = {
        "kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": RACK}
    out, _ = admitted(obj)
    assert pod_annotations(out, 0)[SIZE] == "8" and SCOPE not in pod_annotations(out, 0)
    assert SIZE not in pod_annotations(out, 1)  # neither segmented nor a workload level: not gated
    labels = {"jobset.sigs.k8s.io/jobset-name": "llm", "jobset.sigs.k8s.io/replicatedjob-name": "big"}
    assert gang_key("team-a", labels, pod_annotations(out, 0)) == "team-a/llm/big"


def test_groups_with_different_segment_levels_stay_per_group_and_gate_mode_says_so():
    obj = jobset(second_segment=HOST)
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"] = {
        "kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": RACK}
    out, warnings = admitted(obj)
    assert (pod_annotations(out, 0)[SIZE], pod_annotations(out, 1)[SIZE]) == ("8", "4")
    assert SCOPE not in pod_annotations(out, 0)
    assert ("--gate-pods gangs JobSet per group (segment levels differ): topology.kubernetes.io/zone "
            "holds in each only") in warnings


def test_a_ray_root_level_gangs_every_worker_group_but_not_the_head():
    out, warnings = admitted(raycluster())
    groups = out["spec"]["workerGroupSpecs"]
    assert [g["template"]["metadata"]["annotations"][SIZE] for g in groups] == ["8", "8"]  # 3 × 2 + 2 × 1
    assert all(g["template"]["metadata"]["annotations"][SCOPE] == "workload" for g in groups)
    assert "metadata" not in out["spec"]["headGroupSpec"]["template"]
    worker = {"ray.io/cluster": "nvl72", "ray.io/node-type": "worker", "ray.io/group": "cpu"}
    head = {"ray.io/cluster": "nvl72", "ray.io/node-type": "head", "ray.io/group": "headgroup"}
    annotations = groups[1]["template"]["metadata"]["annotations"]
    assert gang_key("team-a", worker, annotations) == "team-a/nvl72/*"
    assert gang_key("team-a", head, annotations) is None
    assert ("--gate-pods does not gate the Ray head: cloud.provider.com/topology-block binds "
            "the worker groups only") in warnings


def test_a_trainjob_root_level_gangs_its_trainer_alone():
    from tests.unit.admission.test_kinds_trainjob import own_entry, trainjob

    obj = trainjob(size="8")
    obj["metadata"]["annotations"][WL_REQ] = ZONE
    out, _ = admitted(obj)
    annotations = own_entry(out)["template"]["spec"]["template"]["metadata"]["annotations"]
    assert (annotations[SIZE], annotations[SCOPE]) == ("16", "workload")  # numNodes 16
    trainer = {"jobset.sigs.k8s.io/jobset-name": "llama-ft", "jobset.sigs.k8s.io/replicatedjob-name": "node"}
    initializer = {**trainer, "jobset.sigs.k8s.io/replicatedjob-name": "dataset-initializer"}
    assert gang_key("team-a", trainer, annotations) == "team-a/llama-ft/*"
    assert gang_key("team-a", initializer, {}) == "team-a/llama-ft/dataset-initializer"


# ----------------------------------------------------------------------------- controller --once

def _cluster(tmp_path, nodes_per_rack, busy_in_zone_1, racks=2):
    """gen-cluster: 2 zones × 1 block × ``racks`` racks × ``nodes_per_rack`` nodes of 8 GPUs, empty; then
    ``busy_in_zone_1`` nodes of zone-1 taken whole by a bound pod."""
    path = tmp_path / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "2", "--blocks", "1", "--racks", str(racks), "--nodes", str(nodes_per_rack),
                 "--gpus", "8", "--fill", "0", "-o", str(path)]) == 0
    doc = yaml.safe_load(path.read_text())
    nodes = [o for o in doc["items"] if o["kind"] == "Node"]
    zone_1 = [n["metadata"]["name"] for n in nodes if n["metadata"]["labels"][ZONE] == "zone-1"]
    for k, node in enumerate(zone_1[:busy_in_zone_1]):
        doc["items"].append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"busy-{k}", "namespace": "other"},
                             "spec": {"nodeName": node, "containers": [
                                 {"name": "c", "image": "i", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
                             "status": {"phase": "Running"}})
    path.write_text(yaml.safe_dump(doc))
    return str(path), {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}


def _once(tmp_path, cluster, obj):
    workload = tmp_path / "jobset.yaml"
    workload.write_text(yaml.safe_dump(obj))
    out, err = io.StringIO(), io.StringIO()
    code = run_once([cluster], [], None, "yaml", [str(workload)], out=out, err=err)
    assert code == 0, err.getvalue()
    return list(yaml.safe_load_all(out.getvalue()))


def test_controller_once_keeps_the_whole_jobset_in_one_zone(tmp_path):
    # zone-0: 12 free nodes, zone-1: 8 free. One gang of 12 fits only zone-0.
    cluster, labels = _cluster(tmp_path, nodes_per_rack=6, busy_in_zone_1=4)
    docs = _once(tmp_path, cluster, jobset())
    releases = [d for d in docs if "node" in d]
    assert len(releases) == 12 and not [d for d in docs if "waiting" in d]
    for d in releases:
        (selector,) = [op["value"] for op in d["patch"] if op["path"] == "/spec/nodeSelector"]
        assert labels[selector[HOST]][ZONE] == "zone-0"
    assert len({d["node"] for d in releases}) == 12


def test_controller_once_per_group_gangs_would_split_the_jobset_across_zones(tmp_path):
    # the premise of the test above: the same cluster, the root level moved onto each Job's own
    # gang (what the gate did before: one gang per replicatedJob) spreads the JobSet over both zones
    cluster, labels = _cluster(tmp_path, nodes_per_rack=6, busy_in_zone_1=4)
    obj = jobset(level=None)
    for rj in obj["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["metadata"]["annotations"] = {
            "kai.scheduler/segment-size": str(rj["replicas"] * 4), "kai.scheduler/segment-topology-required-placement": ZONE}
    docs = _once(tmp_path, cluster, obj)
    zones = {labels[d["node"]][ZONE] for d in docs if "node" in d}
    assert len([d for d in docs if "node" in d]) == 12 and zones == {"zone-0", "zone-1"}


def test_controller_once_reports_a_jobset_that_never_fits_as_one_gang_and_releases_nothing(tmp_path):
    # 8 free nodes per zone: 8 + 4 pods fit per replicatedJob, never 12 in one zone
    cluster, _ = _cluster(tmp_path, nodes_per_rack=4, busy_in_zone_1=0)
    docs = _once(tmp_path, cluster, jobset())
    assert [d for d in docs if "node" in d] == []
    (waiting,) = docs
    assert waiting["gang"] == "team-a/llm/*"
    assert waiting["waiting"].startswith("can never fit")


def test_controller_once_keeps_the_segments_of_each_replicated_job_apart(tmp_path):
    # both replicatedJobs in segments of 4 pods per rack: big has segments 0 and 1, small segment 0.
    # zone-0: 3 racks of 4 free nodes. Merging big's segment 0 with small's (8 pods) would fit no rack.
    cluster, labels = _cluster(tmp_path, nodes_per_rack=4, busy_in_zone_1=4, racks=3)
    obj = jobset()
    for rj in obj["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["metadata"]["annotations"] = {
            "kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": RACK}
    docs = _once(tmp_path, cluster, obj)
    releases = [d for d in docs if "node" in d]
    assert len(releases) == 12, docs
    racks: dict[tuple[str, str], set[str]] = {}
    for d in releases:  # pod names <jobset>-<rjob>-<job>-<c>: job j of 4 pods is segment j
        rjob, job = d["name"].split("-")[1:3]
        racks.setdefault((rjob, job), set()).add(labels[d["node"]][RACK])
    assert sorted(racks) == [("big", "0"), ("big", "1"), ("small", "0")]
    assert all(len(r) == 1 for r in racks.values()) and len(set.union(*racks.values())) == 3
    assert {labels[d["node"]][ZONE] for d in releases} == {"zone-0"}


def test_controller_once_places_every_ray_worker_group_in_one_block(tmp_path):
    # 1 zone, blocks block-0-0 (3 of 8 nodes taken) and block-0-1 (8 free); 8 workers of 8 GPUs
    path = tmp_path / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "2", "--racks", "2", "--nodes", "4", "--gpus", "8",
                 "--fill", "0", "-o", str(path)]) == 0
    doc = yaml.safe_load(path.read_text())
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in doc["items"] if o["kind"] == "Node"}
    for k, node in enumerate(n for n in labels if labels[n][BLOCK] == "block-0-0"):
        if k < 3:
            doc["items"].append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"busy-{k}", "namespace": "o"},
                                 "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", "resources": {
                                     "requests": {"nvidia.com/gpu": "8"}}}]}, "status": {"phase": "Running"}})
    path.write_text(yaml.safe_dump(doc))
    obj = raycluster()
    for group in obj["spec"]["workerGroupSpecs"]:
        group["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    docs = _once(tmp_path, str(path), obj)
    releases = [d for d in docs if "node" in d]
    assert len(releases) == 8 and not any("head" in d["name"] for d in releases)
    assert {labels[d["node"]][BLOCK] for d in releases} == {"block-0-1"}
