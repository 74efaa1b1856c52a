"""hack/local_cluster.py's Kueue objects for a node dump (DESIGN.md §9b, §11), without a cluster.

Shapes from sigs.k8s.io/kueue v0.17.0 ``apis/kueue/v1beta2``: ResourceFlavor ``spec.nodeLabels`` (at
least one when ``spec.topologyName`` is set, ``resourceflavor_types.go``), Topology
``spec.levels[].nodeLabel``, ClusterQueue ``spec.resourceGroups[].coveredResources`` / ``flavors[]``
with ``resources[].nominalQuota``, LocalQueue ``spec.clusterQueue``.
"""

from __future__ import annotations

import sys

import yaml

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402


class Recorder:
    """Stands in for LocalCluster: records what would be applied."""

    def __init__(self):
        self.applied: list[dict] = []

    def apply(self, docs):
        self.applied.extend(docs)


def node(name, rack, block):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"cloud.provider.com/topology-block": block,
                                                  "cloud.provider.com/topology-rack": rack,
                                                  "kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"}},
            "status": {"allocatable": {"cpu": "128", "memory": "2Gi", "nvidia.com/gpu": "8", "pods": "110"}}}


def test_kueue_objects_for_the_nodes_of_a_dump(tmp_path):
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
                "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-block"},
                                    {"nodeLabel": "cloud.provider.com/topology-rack"},
                                    {"nodeLabel": "kubernetes.io/hostname"}]}}
    dump = tmp_path / "nodes.yaml"
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        node("n0", "r0", "b0"), node("n1", "r1", "b0"), topology]}))
    recorder = Recorder()
    assert local_cluster.kueue_queues(recorder, dump) == ["t"]  # type: ignore[arg-type]  # a recorder stands in for LocalCluster
    assert recorder.applied == [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
         "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-block"},
                             {"nodeLabel": "cloud.provider.com/topology-rack"},
                             {"nodeLabel": "kubernetes.io/hostname"}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "t"},
         "spec": {"nodeLabels": {"nvidia.com/gpu.present": "true"}, "topologyName": "t"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cluster-queue"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
             "flavors": [{"name": "t", "resources": [{"name": "cpu", "nominalQuota": "256"},
                                                     {"name": "memory", "nominalQuota": str(4 * 2**30)},
                                                     {"name": "nvidia.com/gpu", "nominalQuota": "16"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "user-queue", "namespace": "default"}, "spec": {"clusterQueue": "cluster-queue"}},
    ]


def test_kueue_keeps_only_its_own_and_the_job_webhooks():
    assert local_cluster._kueue_webhook_kept({"rules": [{"apiGroups": ["batch"], "resources": ["jobs"]}]})
    assert local_cluster._kueue_webhook_kept({"rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"]}]})
    assert not local_cluster._kueue_webhook_kept({"rules": [{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"]}]})
    assert not local_cluster._kueue_webhook_kept({"rules": [{"apiGroups": [""], "resources": ["pods"]}]})


def test_workload_api_flags_only_when_asked():
    assert local_cluster.workload_api_args("kube-apiserver", {}) == []
    assert local_cluster.workload_api_args("kube-apiserver", {"workload_api": True}) == [
        "--feature-gates", "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true",
        "--runtime-config", "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"]
    assert local_cluster.workload_api_args("kube-scheduler", {"workload_api": True}) == [
        "--feature-gates", "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true"]


class InferringRecorder(Recorder):
    """A Recorder that runs this checkout's `segment-webhook` as LocalCluster.segment_webhook does."""

    def segment_webhook(self, *args):
        import subprocess

        result = subprocess.run([sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True,
                                cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=True)
        return result.stdout


def test_kueue_objects_for_gen_clusters_nodes_without_a_topology(tmp_path):
    """Issue 37: `nodes` under Kueue on gen-cluster's nodes, without the dump's Topology, failed with
    "no Topology: no node carries a topology label that makes a level" (one zone). The inferred
    Topology is the embedded default's levels under the zone (a one-domain level is left out), and
    the ClusterQueue covers ephemeral-storage, which gen-cluster's nodes report (1728000000000 each)."""
    from webhook.planning.gencluster import generate

    doc = generate(1, 2, 2, 2, 8, fill=0.0)  # 1 zone, 2 blocks of 2 racks of 2 nodes
    doc["items"] = [item for item in doc["items"] if item["kind"] == "Node"]
    dump = tmp_path / "nodes.yaml"
    dump.write_text(yaml.safe_dump(doc))
    recorder = InferringRecorder()
    assert local_cluster.kueue_queues(recorder, dump) == ["cluster-topology"]  # type: ignore[arg-type]  # a recorder stands in for LocalCluster
    assert recorder.applied[0] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "cluster-topology"},
        "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-block"},
                            {"nodeLabel": "cloud.provider.com/topology-rack"},
                            {"nodeLabel": "kubernetes.io/hostname"}]}}
    queue = recorder.applied[2]["spec"]["resourceGroups"][0]
    assert queue["coveredResources"] == ["cpu", "ephemeral-storage", "memory", "nvidia.com/gpu"]
    assert {"name": "ephemeral-storage", "nominalQuota": str(8 * 1_728_000_000_000)} in queue["flavors"][0]["resources"]
