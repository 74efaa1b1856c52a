"""Real Kueue places our segments (marker ``cluster``; DESIGN.md §9b, §11).

A local control plane of its own, started as ``hack/local-cluster.sh up DIR --webhook --with kueue``
(Kueue v0.17.0's manager built from hack/go/kueue, Topology-Aware Scheduling on) plus the nodes of a
``segment-webhook gen-cluster`` dump (1 zone, 2 blocks, 2 racks of 4 nodes, 8 GPUs each: 16 nodes)
and the Kueue Topology, ResourceFlavor, ClusterQueue and LocalQueue made for them.

A batch/v1 Indexed Job of 8 pods asking 8 GPUs each (one node each), labelled for the LocalQueue and
``segments.dev/target: kueue``, with segments of 4 in one rack and the workload in one block: the
webhook writes Kueue's PodSet annotations, Kueue admits the Workload, ungates the pods with the
nodes of its assignment, kube-scheduler binds them (no kubelets: binding is the proof). Checked
against the node labels: every segment (``kai.scheduler/segment-index``, our pod webhook) in one
rack, the Job in one block; and Kueue's slice of each pod is our segment: Kueue assigns a pod the
domain of its rank (``batch.kubernetes.io/job-completion-index``) in the Workload's topology
assignment (``pkg/controller/tas/topology_ungater.go``), slice ``rank // podset-slice-size``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster_support import EXAMPLES, REPO, Kubectl, local_cluster, wait_for, write_manifest

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"
RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
INDEX = "batch.kubernetes.io/job-completion-index"
SEGMENT_INDEX = "kai.scheduler/segment-index"
LAYOUT = ("--zones", "1", "--blocks", "2", "--racks", "2", "--nodes", "4", "--fill", "0")
NODE_COUNT = 1 * 2 * 2 * 4
PODS, SIZE = 8, 4


def gen_cluster(path: Path) -> Path:
    """``segment-webhook gen-cluster`` (this checkout) into ``path``."""
    result = subprocess.run([sys.executable, "-m", "webhook.cli", "gen-cluster", *LAYOUT, "-o", str(path)],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def kueue(tmp_path_factory):
    """``up --webhook --with kueue``, the example Topology, the nodes and Kueue's queues."""
    if os.environ.get("CI") != "true" and not (local_cluster.built()
                                               and local_cluster.upstream_binary("kueue").is_file()):
        pytest.skip("kueue: binaries not built (hack/local-cluster.sh build)")
    directory = tmp_path_factory.mktemp("kueue")
    try:
        cluster = local_cluster.up(directory / "cluster", webhook=True, gate_pods=False, upstream=("kueue",))
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane with Kueue did not start: {error}", pytrace=False)
    try:
        kubectl = Kubectl(cluster)
        kubectl.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
        kubectl.wait_for_webhook_topology("cluster-topology")
        dump = gen_cluster(directory / "nodes.yaml")
        assert cluster.register_nodes(dump) == NODE_COUNT
        assert local_cluster.kueue_queues(cluster, dump) == ["cluster-topology"]
        yield cluster
    finally:
        cluster.stop_all()




def indexed_job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kueue.x-k8s.io/queue-name": local_cluster.KUEUE_LOCAL_QUEUE,
                                    "segments.dev/target": "kueue"},
                         "annotations": {"kai.scheduler/topology": "cluster-topology",
                                         "kai.scheduler/topology-required-placement": BLOCK}},
            "spec": {"completionMode": "Indexed", "completions": PODS, "parallelism": PODS,
                     "template": {"metadata": {"annotations": {
                         "kai.scheduler/segment-size": str(SIZE),
                         "kai.scheduler/segment-topology-required-placement": RACK}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "w", "image": "registry.k8s.io/pause:3.10",
                             "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}


def assignment_domains(assignment: dict) -> list[tuple[list[str], int]]:
    """The (level values, pod count) of a v1beta2 ``TopologyAssignment`` in order (Kueue
    ``pkg/util/tas/tas_assignment.go`` ``InternalSeqFrom``: per slice, ``domainCount`` domains,
    each level's value universal or prefix + root + suffix, counts universal or individual)."""
    out = []
    for piece in assignment["slices"]:
        for i in range(piece["domainCount"]):
            values = []
            for level in piece["valuesPerLevel"]:
                if "universal" in level:
                    values.append(level["universal"])
                else:
                    individual = level["individual"]
                    values.append(individual.get("prefix", "") + individual["roots"][i] + individual.get("suffix", ""))
            counts = piece["podCounts"]
            out.append((values, counts["universal"] if "universal" in counts else counts["individual"][i]))
    return out


def test_kueue_admits_and_kube_scheduler_binds_each_segment_in_one_rack(kueue, tmp_path):
    kubectl = Kubectl(kueue)
    kubectl.ok("create", "-f", str(write_manifest(tmp_path, "job.yaml", indexed_job("seg"))))
    stored = kubectl.get("job", "seg")
    annotations = stored["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-slice-required-topology"] == RACK
    assert annotations["kueue.x-k8s.io/podset-slice-size"] == str(SIZE)
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == BLOCK

    def admitted():
        items = json.loads(kubectl.ok("get", "workloads.kueue.x-k8s.io", "-n", "default", "-o", "json"))["items"]
        return next((w for w in items if (w.get("status") or {}).get("admission")), None)

    workload = wait_for("Kueue to admit the Job's Workload", admitted)
    assignment = workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    rank_to_host = [values[-1] for values, count in assignment_domains(assignment) for _ in range(count)]
    assert assignment["levels"][-1] == HOSTNAME and len(rank_to_host) == PODS

    def all_bound():
        pods = json.loads(kubectl.ok("get", "pods", "-n", "default", "-l", "batch.kubernetes.io/job-name=seg",
                                     "-o", "json"))["items"]
        return pods if len(pods) == PODS and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for("kube-scheduler to bind all 8 pods", all_bound)
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"]
             for n in json.loads(kubectl.ok("get", "nodes", "-o", "json"))["items"]}
    racks_of_segment: dict[int, set[str]] = {}
    for pod in pods:
        rank = int(pod["metadata"]["labels"][INDEX])
        segment = int(pod["metadata"]["labels"][SEGMENT_INDEX])
        node = pod["spec"]["nodeName"]
        assert segment == rank // SIZE  # our segment index (DESIGN.md §3b)
        assert node == rank_to_host[rank]  # Kueue placed the pod by its rank: its slice is rank // size
        assert not pod["spec"].get("schedulingGates")
        racks_of_segment.setdefault(segment, set()).add(nodes[node][RACK])
    assert sorted(racks_of_segment) == [0, 1]
    assert all(len(racks) == 1 for racks in racks_of_segment.values()), racks_of_segment
    assert len({nodes[p["spec"]["nodeName"]][BLOCK] for p in pods}) == 1
    assert len({p["spec"]["nodeName"] for p in pods}) == PODS  # 8 GPUs each: one pod per node


def test_a_partial_last_segment_never_reaches_kueue(kueue, tmp_path):
    job = indexed_job("partial")
    job["spec"]["completions"] = job["spec"]["parallelism"] = 6
    result = Kubectl(kueue)("create", "-f", str(write_manifest(tmp_path, "partial.yaml", job)))
    assert result.returncode == 1
    assert "target kueue: Kueue's PodSet has 6 pods and slices of 4 leave 2 pods gated forever" in result.stderr
