"""kube-scheduler's Workload API places our segments, with OUR webhook and controller (marker
``cluster``; DESIGN.md §9b, §11).

A local control plane of its own, ``hack/local-cluster.sh up DIR --workload-api --controller --with lws``
(:func:`local_cluster.up_workload_api`: GenericWorkload, TopologyAwareWorkloadScheduling and
CompositePodGroup on; scheduling.k8s.io v1beta1 and v1alpha3 served; ``serve --target workload-api``
and the with-controller overlay's controllers; the LWS and JobSet controllers), with the nodes of a
``segment-webhook gen-cluster`` dump (1 zone, 2 blocks, 2 racks of 4 nodes, 8 GPUs each).

Nothing is made by hand but the workloads: the Job, LWS and JobSet controllers make the pods,
our pod webhook names each pod's PodGroup (``spec.schedulingGroup.podGroupName``), our controller
makes each gang's Workload, CompositePodGroup and child PodGroups, owned by the workload, and
kube-scheduler binds every pod. Checked against the node labels, not against our output: each
segment (the pod's own index: Job completion index // 4; LWS worker index by DESIGN.md §7) in one
rack, each gang in one block. Deleting the workload deletes the objects (kube-controller-manager's
garbage collector; its PodGroup protection keeps a PodGroup while a pod that names it is not
terminated, and no kubelet runs here, so the test deletes the pods as a kubelet would).
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.cluster.test_cluster_kueue import BLOCK, NODE_COUNT, PODS, RACK, SIZE, gen_cluster, indexed_job
from tests.support.cluster_support import EXAMPLES, Kubectl, local_cluster, wait_for, write_manifest

pytestmark = pytest.mark.cluster

SCHEDULING = ("workloads.scheduling.k8s.io", "compositepodgroups.scheduling.k8s.io", "podgroups.scheduling.k8s.io")
GPU = {"limits": {"nvidia.com/gpu": "8"}}


@pytest.fixture(scope="module")
def workload_api(tmp_path_factory):
    """``up_workload_api`` with LWS and JobSet, the example Topology and the nodes of the dump."""
    if os.environ.get("CI") != "true" and not (local_cluster.built() and all(
            local_cluster.upstream_binary(name).is_file() for name in ("lws", "jobset"))):
        pytest.skip("workload api: binaries not built (hack/local-cluster.sh build)")
    directory = tmp_path_factory.mktemp("workload-api")
    try:
        cluster = local_cluster.up_workload_api(directory / "cluster", upstream=("lws", "jobset"))
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane with the Workload API did not start: {error}", pytrace=False)
    try:
        kubectl = Kubectl(cluster)
        kubectl.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
        kubectl.wait_for_webhook_topology("cluster-topology")
        assert cluster.register_nodes(gen_cluster(directory / "nodes.yaml")) == NODE_COUNT
        yield kubectl
    finally:
        cluster.stop_all()


def node_labels(kubectl: Kubectl) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in json.loads(kubectl.ok("get", "nodes", "-o", "json"))["items"]}


def bound_pods(kubectl: Kubectl, selector: str, count: int) -> list[dict]:
    def all_bound():
        pods = json.loads(kubectl.ok("get", "pods", "-n", "default", "-l", selector, "-o", "json"))["items"]
        return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None

    return wait_for(f"kube-scheduler to bind the {count} pods of {selector}", all_bound, timeout=90)


def our_objects(kubectl: Kubectl, gang: str) -> dict[str, dict]:
    """The Workload API objects of gang ``gang`` by ``kind/name``."""
    found = {}
    for resource in SCHEDULING:
        for obj in json.loads(kubectl.ok("get", resource, "-n", "default", "-o", "json",
                                                 "--show-managed-fields"))["items"]:
            if obj["metadata"]["name"] == gang or obj["metadata"]["name"].startswith(f"{gang}-"):
                found[f"{obj['kind']}/{obj['metadata']['name']}"] = obj
    return found


def check_placement(pods: list[dict], segment_of, nodes: dict[str, dict[str, str]]) -> dict[str, set[str]]:
    """Each segment in one rack, the gang in one block, one pod per node; the racks per PodGroup."""
    racks: dict[str, set[str]] = {}
    for pod in pods:
        group = pod["spec"]["schedulingGroup"]["podGroupName"]
        assert group == segment_of(pod), pod["metadata"]["name"]
        racks.setdefault(group, set()).add(nodes[pod["spec"]["nodeName"]][RACK])
    assert all(len(found) == 1 for found in racks.values()), racks
    assert len({nodes[p["spec"]["nodeName"]][BLOCK] for p in pods}) == 1
    assert len({p["spec"]["nodeName"] for p in pods}) == len(pods)
    return racks


def delete_and_collect(kubectl: Kubectl, resource: str, name: str, selector: str, gang: str) -> None:
    """Delete the workload, then its pods at once (as their kubelet would once stopped): the garbage
    collector deletes our objects with it."""
    kubectl.ok("delete", resource, name, "-n", "default", "--wait=false")

    def pods_gone() -> bool:
        if not json.loads(kubectl.ok("get", "pods", "-n", "default", "-l", selector, "-o", "json"))["items"]:
            return True
        kubectl.ok("delete", "pods", "-n", "default", "-l", selector, "--force", "--grace-period=0", "--wait=false")
        return False

    wait_for(f"the pods of {name} to be deleted", pods_gone, timeout=60)
    wait_for(f"the garbage collector to delete the objects of {gang}", lambda: our_objects(kubectl, gang) == {},
             timeout=60)


def test_an_indexed_job_is_grouped_by_our_webhook_and_controller(workload_api, tmp_path):
    kubectl = workload_api
    job = indexed_job("wl")
    job["metadata"]["labels"] = {"segments.dev/target": "workload-api"}
    # one node of block-0-0 taken: that block has 7 free nodes, no room for two full racks; block-0-1 has
    container = job["spec"]["template"]["spec"]["containers"][0]
    blocker = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker", "namespace": "default"},
               "spec": {"nodeName": "node-0-0-0-0", "containers": [container], "restartPolicy": "Never"}}
    kubectl.ok("create", "-f", str(write_manifest(tmp_path, "blocker.yaml", blocker)))
    stored = json.loads(kubectl.ok("create", "-f", str(write_manifest(tmp_path, "job.yaml", job)), "-o", "json"))
    pods = bound_pods(kubectl, "job-name=wl", PODS)
    nodes = node_labels(kubectl)
    index = "batch.kubernetes.io/job-completion-index"
    racks = check_placement(pods, lambda p: f"wl-segment-{int(p['metadata']['labels'][index]) // SIZE}", nodes)
    assert sorted(racks) == ["wl-segment-0", "wl-segment-1"]
    assert {nodes[p["spec"]["nodeName"]][BLOCK] for p in pods} == {"block-0-1"}  # the only block that fits
    assert not [p for p in pods if p["spec"].get("schedulingGates")]
    objects = our_objects(kubectl, "wl")
    assert sorted(objects) == ["CompositePodGroup/wl", "PodGroup/wl-segment-0", "PodGroup/wl-segment-1", "Workload/wl"]
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "wl", "uid": stored["metadata"]["uid"]}]
    for obj in objects.values():
        assert obj["metadata"]["ownerReferences"] == owner
        assert any(m["manager"].startswith("segment-webhook") for m in obj["metadata"]["managedFields"])
    assert objects["PodGroup/wl-segment-1"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": SIZE}}
    for group in ("wl-segment-0", "wl-segment-1"):  # scheduled as a group, by kube-scheduler's own account
        conditions = objects[f"PodGroup/{group}"].get("status", {}).get("conditions") or []
        assert any(c["type"] == "PodGroupInitiallyScheduled" and c["status"] == "True" for c in conditions), conditions
    delete_and_collect(kubectl, "job", "wl", "job-name=wl", "wl")
    kubectl.ok("delete", "pod", "blocker", "-n", "default", "--force", "--grace-period=0")


def test_an_lws_group_is_grouped_with_its_leader_in_segment_0(workload_api, tmp_path):
    """LWS size 5, segments of 2, LeaderWorker with a leaderTemplate: {leader, 1, 2} {3, 4}
    (DESIGN.md §7: the leader is an extra pod of segment 0), in racks, the group in one block."""
    kubectl = workload_api
    lws = yaml.safe_load((EXAMPLES / "lws-segmented.yaml").read_text())
    lws["metadata"].update(name="lw", namespace="default", labels={"segments.dev/target": "workload-api"},
                           annotations={"kai.scheduler/topology": "cluster-topology",
                                        "kai.scheduler/topology-required-placement": BLOCK})
    template = lws["spec"]["leaderWorkerTemplate"]
    for part in ("leaderTemplate", "workerTemplate"):
        template[part]["spec"]["containers"][0]["resources"] = GPU
    template["workerTemplate"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = "2"
    kubectl.ok("create", "-f", str(write_manifest(tmp_path, "lws.yaml", lws)))
    pods = bound_pods(kubectl, "leaderworkerset.sigs.k8s.io/name=lw", 5)
    worker = "leaderworkerset.sigs.k8s.io/worker-index"
    expected = {0: 0, 1: 0, 2: 0, 3: 1, 4: 1}  # worker index -> segment (DESIGN.md §7, R=5, S=2)
    racks = check_placement(pods, lambda p: f"lw-0-segment-{expected[int(p['metadata']['labels'][worker])]}",
                            node_labels(kubectl))
    assert sorted(racks) == ["lw-0-segment-0", "lw-0-segment-1"]
    objects = our_objects(kubectl, "lw-0")
    assert [objects[f"PodGroup/lw-0-segment-{k}"]["spec"]["schedulingPolicy"]["gang"]["minCount"] for k in (0, 1)] == [3, 2]
    assert {obj["metadata"]["ownerReferences"][0]["kind"] for obj in objects.values()} == {"LeaderWorkerSet"}
    delete_and_collect(kubectl, "leaderworkerset", "lw", "leaderworkerset.sigs.k8s.io/name=lw", "lw-0")


def test_a_whole_jobset_gang_gives_each_replicated_job_its_own_podgroups(workload_api, tmp_path):
    """JobSet wj: replicatedJobs a and b (1 Job x 4 pods each), segments of 4 by rack, a root block
    level: one gang of the whole JobSet (``segments.dev/gang-scope: workload``, key ``default/wj/*``,
    DESIGN.md §4.5). Each replicatedJob numbers its segments from 0, so each has its own PodGroup
    (``<gang>-<replicatedJob>-segment-0``, minCount 4): the two take the two racks of one block.
    One PodGroup for both (minCount 8 in a rack of 4 nodes) would never be placed."""
    kubectl = workload_api
    gang = "wj-84b213e4f9"  # "default/wj/*" is no DNS name: its parts, "-", sha256("default/wj/*")[:10]

    def replicated_job(name: str) -> dict:
        return {"name": name, "replicas": 1, "template": {"spec": {
            "parallelism": SIZE, "completions": SIZE, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"metadata": {"annotations": {"kai.scheduler/segment-size": str(SIZE),
                                                      "kai.scheduler/segment-topology-required-placement": RACK}},
                         "spec": {"restartPolicy": "Never", "containers": [
                             {"name": "w", "image": "registry.k8s.io/pause:3.10", "resources": GPU}]}}}}}

    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "wj", "namespace": "default", "labels": {"segments.dev/target": "workload-api"},
                           "annotations": {"kai.scheduler/topology": "cluster-topology",
                                           "kai.scheduler/topology-required-placement": BLOCK}},
              "spec": {"replicatedJobs": [replicated_job("a"), replicated_job("b")]}}
    stored = json.loads(kubectl.ok("create", "-f", str(write_manifest(tmp_path, "jobset.yaml", jobset)), "-o", "json"))
    selector = "jobset.sigs.k8s.io/jobset-name=wj"
    pods = bound_pods(kubectl, selector, 2 * SIZE)
    racks = check_placement(pods, lambda p: f"{gang}-{p['metadata']['labels']['jobset.sigs.k8s.io/replicatedjob-name']}"
                                            f"-segment-{int(p['metadata']['labels']['batch.kubernetes.io/job-completion-index']) // SIZE}",
                            node_labels(kubectl))
    assert sorted(racks) == [f"{gang}-a-segment-0", f"{gang}-b-segment-0"]
    assert len(set().union(*racks.values())) == 2  # the two PodGroups in two racks
    objects = our_objects(kubectl, gang)
    assert sorted(objects) == [f"CompositePodGroup/{gang}", f"PodGroup/{gang}-a-segment-0",
                               f"PodGroup/{gang}-b-segment-0", f"Workload/{gang}"]
    assert objects[f"CompositePodGroup/{gang}"]["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    for rjob in ("a", "b"):
        assert objects[f"PodGroup/{gang}-{rjob}-segment-0"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": SIZE}}
    owner = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "wj", "uid": stored["metadata"]["uid"]}]
    assert all(obj["metadata"]["ownerReferences"] == owner for obj in objects.values())
    delete_and_collect(kubectl, "jobset", "wj", selector, gang)
