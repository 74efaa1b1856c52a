"""kube-scheduler's Workload API places our segments (marker ``cluster``; DESIGN.md §9b, §11).

A local control plane of its own, ``hack/local-cluster.sh up DIR --workload-api`` (GenericWorkload,
TopologyAwareWorkloadScheduling and CompositePodGroup on; scheduling.k8s.io v1beta1 and v1alpha3
served), with the nodes of a ``segment-webhook gen-cluster`` dump (1 zone, 2 blocks, 2 racks of 4
nodes, 8 GPUs each). The objects are the ones ``segment-webhook place --target workload-api``
compiles for an Indexed Job of 8 pods in segments of 4 (rack) within one block: a Workload, a
CompositePodGroup and two child PodGroups, created as they are printed; then 8 pods of 8 GPUs each,
each naming its segment's PodGroup in ``spec.schedulingGroup.podGroupName``. kube-scheduler binds
every pod, each segment within one rack and the gang within one block, checked against the node
labels; with one node of the first block taken, only the second block fits the gang. (The
webhook's controller that would create these objects itself is not built.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_support import REPO, Kubectl, local_cluster, write_manifest
from test_cluster_kueue import BLOCK, NODE_COUNT, PODS, RACK, SIZE, gen_cluster, indexed_job, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def workload_api(tmp_path_factory):
    """``up --workload-api`` and the nodes of the dump."""
    if os.environ.get("CI") != "true" and not local_cluster.built():
        pytest.skip("workload api: binaries not built (hack/local-cluster.sh build)")
    directory = tmp_path_factory.mktemp("workload-api")
    try:
        cluster = local_cluster.up(directory / "cluster", webhook=False, gate_pods=False, workload_api=True)
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane with the Workload API did not start: {error}", pytrace=False)
    try:
        dump = gen_cluster(directory / "nodes.yaml")
        assert cluster.register_nodes(dump) == NODE_COUNT
        yield cluster, dump
    finally:
        cluster.stop_all()


def compiled(job_path: Path, dump: Path) -> dict:
    """``segment-webhook place --target workload-api -o json`` of this checkout."""
    result = subprocess.run([sys.executable, "-m", "webhook.cli", "place", "-f", str(job_path), "--cluster", str(dump),
                             "--target", "workload-api", "-o", "json"],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_kube_scheduler_binds_each_segment_podgroup_in_one_rack(workload_api, tmp_path):
    cluster, dump = workload_api
    kubectl = Kubectl(cluster)
    job = indexed_job("wl")
    job["metadata"]["labels"] = {"segments.dev/target": "workload-api"}
    objects = compiled(write_manifest(tmp_path, "job.yaml", job), dump)["target"]["objects"]
    assert [o["kind"] for o in objects] == ["Workload", "CompositePodGroup", "PodGroup", "PodGroup"]
    for obj in objects:  # as compiled, in order
        kubectl.ok("create", "-f", str(write_manifest(tmp_path, f"{obj['metadata']['name']}-{obj['kind']}.yaml", obj)))
    container = job["spec"]["template"]["spec"]["containers"][0]
    # one node of block-0-0 taken: that block has 7 free nodes, no room for two full racks; block-0-1 has
    blocker = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker", "namespace": "default"},
               "spec": {"nodeName": "node-0-0-0-0", "containers": [container], "restartPolicy": "Never"}}
    kubectl.ok("create", "-f", str(write_manifest(tmp_path, "blocker.yaml", blocker)))
    for rank in range(PODS):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"wl-{rank}", "namespace": "default", "labels": {"app": "wl"}},
               "spec": {"containers": [container], "restartPolicy": "Never",
                        "schedulingGroup": {"podGroupName": f"wl-segment-{rank // SIZE}"}}}
        kubectl.ok("create", "-f", str(write_manifest(tmp_path, f"pod-{rank}.yaml", pod)))

    def all_bound():
        pods = json.loads(kubectl.ok("get", "pods", "-n", "default", "-l", "app=wl", "-o", "json"))["items"]
        return pods if len(pods) == PODS and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for("kube-scheduler to bind the 8 pods of the CompositePodGroup", all_bound, timeout=300)
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"]
             for n in json.loads(kubectl.ok("get", "nodes", "-o", "json"))["items"]}
    racks: dict[str, set[str]] = {}
    for pod in pods:
        assert pod["spec"]["schedulingGroup"]["podGroupName"] == f"wl-segment-{int(pod['metadata']['name'][3:]) // SIZE}"
        racks.setdefault(pod["spec"]["schedulingGroup"]["podGroupName"], set()).add(nodes[pod["spec"]["nodeName"]][RACK])
    assert sorted(racks) == ["wl-segment-0", "wl-segment-1"]
    assert all(len(found) == 1 for found in racks.values()), racks
    assert {nodes[p["spec"]["nodeName"]][BLOCK] for p in pods} == {"block-0-1"}  # the only block that fits
    assert len({p["spec"]["nodeName"] for p in pods}) == PODS
    for group in ("wl-segment-0", "wl-segment-1"):  # scheduled as a group, by kube-scheduler's own account
        status = json.loads(kubectl.ok("get", "podgroups.scheduling.k8s.io", group, "-o", "json")).get("status") or {}
        assert any(c["type"] == "PodGroupInitiallyScheduled" and c["status"] == "True"
                   for c in status.get("conditions") or []), status
