"""RayCluster / RayJob / RayService (ray.io/v1) through the webhook (DESIGN.md §3b, §7, §9).

Facts from KubeRay (``ray-operator/controllers/ray/common/pod.go`` ``DefaultWorkerPodTemplate`` and
``labelPod``; ``utils/constant.go``): worker pods carry ``ray.io/cluster``, ``ray.io/node-type:
worker``, ``ray.io/group``; with RayMultiHostIndexing (KubeRay >= 1.6)
``ray.io/worker-group-replica-index`` and, for ``numOfHosts > 1``, ``ray.io/replica-host-index`` and
``ray.io/worker-group-replica-name``. CRD defaults: ``replicas`` 0, ``numOfHosts`` 1. A multi-host
replica is created and deleted whole.
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest
import yaml

from tests.conftest import SEG_REQ, SIZE, TOPO, make_request
from tests.support import paths
from tests.support.controller_checks import kep3838_violations
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.gating.decision import decide
from webhook.planning.expand import expand
from webhook.topology.objects import StaticTopologyCatalog, Topology

MANIFESTS = paths.DATA / "manifests"
ZONE, BLOCK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-block"
RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
TOPOLOGY = Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))
CATALOG = StaticTopologyCatalog([TOPOLOGY])
GATING = AdmissionSettings(gate_pods=True)
HOSTS = "segments.dev/num-of-hosts"
G0 = "spec.workerGroupSpecs[0]"
NOT_ENFORCED = "KAI groups Ray pods by worker group: it does not enforce these {} segments; --gate-pods does"
NO_INDEX = ("pod has no ray.io/worker-group-replica-index (KubeRay < 1.6?): no segment label; --gate-pods forms "
            "segments at placement")


def raycluster(size="4", replicas=4, hosts=2):
    obj = yaml.safe_load((MANIFESTS / "raycluster-multihost.yaml").read_text())
    group = obj["spec"]["workerGroupSpecs"][0]
    group["replicas"], group["numOfHosts"] = replicas, hosts
    group["template"]["metadata"]["annotations"][SIZE] = size
    return obj


def wrapped(kind):
    """The sample's cluster spec inside a RayJob (spec.rayClusterSpec) or RayService (spec.rayClusterConfig)."""
    member = {"RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}[kind]
    obj = raycluster()
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": obj["metadata"], "spec": {member: obj["spec"]}}


def run(obj, settings=AdmissionSettings(), **kw):
    return review(make_request(obj, **kw), CATALOG, settings)


def group_ann(cluster_spec):
    return cluster_spec["workerGroupSpecs"][0]["template"]["metadata"]["annotations"]


def test_raycluster_gets_the_keys_and_num_of_hosts_and_the_kai_warning():
    d = run(raycluster())
    assert d.allowed and d.warnings == [NOT_ENFORCED.format("RayCluster")]
    out = jsonpatch.apply_patch(raycluster(), d.patch)
    assert group_ann(out["spec"]) == {SIZE: "4", SEG_REQ: RACK, TOPO: "cluster-topology", HOSTS: "2"}
    assert "subgroup-name" not in str(out)


@pytest.mark.parametrize("kind, member", [("RayJob", "rayClusterSpec"), ("RayService", "rayClusterConfig")])
def test_rayjob_and_rayservice_are_read_through_their_cluster_spec(kind, member):
    d = run(wrapped(kind))
    assert d.allowed and d.warnings == [NOT_ENFORCED.format(kind)]
    out = jsonpatch.apply_patch(wrapped(kind), d.patch)
    assert group_ann(out["spec"][member])[HOSTS] == "2"
    bad = wrapped(kind)
    group_ann(bad["spec"][member])[SIZE] = "3"
    d = run(bad)
    assert [v.rule for v in d.violations] == ["ray-segment-splits-replica"]
    assert d.violations[0].field == f'spec.{member}.workerGroupSpecs[0].template.metadata.annotations["{SIZE}"]'


def test_a_rayjob_on_an_existing_cluster_has_nothing_to_segment():
    obj = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j", "annotations": {TOPO: "cluster-topology"}},
           "spec": {"entrypoint": "python x.py", "clusterSelector": {"ray.io/cluster": "nvl72"}}}
    d = run(obj)
    assert d.allowed and d.patch == []


def test_a_segment_that_would_split_a_multi_host_replica_is_denied():
    d = run(raycluster(size="3"))
    assert [v.rule for v in d.violations] == ["ray-segment-splits-replica"]
    assert d.message == (f'{G0}.template.metadata.annotations["kai.scheduler/segment-size"] = "3": a segment of 3 pods '
                         f"would split a replica of 2 hosts ({G0}.numOfHosts), which KubeRay creates and deletes whole "
                         f"(rule ray-segment-splits-replica); fix: use a multiple of 2 (e.g. 2 or 4), or change "
                         f"{G0}.numOfHosts.")


def test_replicas_default_to_0():
    obj = raycluster()
    del obj["spec"]["workerGroupSpecs"][0]["replicas"]
    d = run(obj)
    assert [v.rule for v in d.violations] == ["segment-size-exceeds-replicas"]
    assert f"exceeds the 0 pods of worker group gpu ({G0}.replicas × numOfHosts)" in d.message


def pod(replica, host=None, hosts="2", size="4", node_type="worker"):
    labels = {"ray.io/cluster": "nvl72", "ray.io/node-type": node_type, "ray.io/group": "gpu"}
    if replica is not None:
        labels["ray.io/worker-group-replica-index"] = str(replica)
    if host is not None:
        labels["ray.io/replica-host-index"] = str(host)
        labels["ray.io/worker-group-replica-name"] = f"gpu-{replica}"
    ann = {TOPO: "cluster-topology", SIZE: size, SEG_REQ: RACK, HOSTS: hosts}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"nvl72-gpu-worker-{replica}-{host}", "namespace": "team-a", "labels": labels,
                         "annotations": ann}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.mark.parametrize("replica, host, hosts, segment", [
    (0, 0, "2", "0"), (1, 1, "2", "0"), (2, 0, "2", "1"), (3, 1, "2", "1"),  # i = r*2 + h; S = 4
    (5, None, "1", "1"),  # numOfHosts 1: host index 0, no host label
])
def test_pod_index_is_replica_index_times_num_of_hosts_plus_host_index(replica, host, hosts, segment):
    d = run(pod(replica, host, hosts))
    labels = jsonpatch.apply_patch(pod(replica, host, hosts), d.patch)["metadata"]["labels"]
    assert d.warnings == [] and labels["kai.scheduler/segment-index"] == segment
    assert "kai.scheduler/subgroup-name" not in labels


def test_a_pod_without_index_labels_is_warned_never_denied():
    d = run(pod(None))
    assert d.allowed and d.patch == [] and d.warnings == [NO_INDEX]


def test_the_head_is_never_segmented_nor_gated():
    head = pod(None, node_type="head")
    head["metadata"]["annotations"]["segments.dev/gang-size"] = "8"
    d = run(head, GATING)
    assert d.allowed and d.patch == [] and d.warnings == ["not gated: no gang key (ray.io/cluster + ray.io/group)"]


def test_expansion_names_and_labels_workers_as_kuberay_does():
    exp = expand(raycluster(replicas=2, hosts=2), CATALOG, AdmissionSettings())
    assert [p["metadata"]["name"] for p in exp.pods] == ["nvl72-gpu-worker-0-0", "nvl72-gpu-worker-0-1",
                                                        "nvl72-gpu-worker-1-0", "nvl72-gpu-worker-1-1"]
    labels = exp.pods[3]["metadata"]["labels"]
    assert {k: labels[k] for k in ("ray.io/cluster", "ray.io/node-type", "ray.io/group", "ray.io/worker-group-replica-index",
                                   "ray.io/replica-host-index", "ray.io/worker-group-replica-name")} == {
        "ray.io/cluster": "nvl72", "ray.io/node-type": "worker", "ray.io/group": "gpu",
        "ray.io/worker-group-replica-index": "1", "ray.io/replica-host-index": "1",
        "ray.io/worker-group-replica-name": "gpu-1"}
    assert [p["metadata"]["labels"]["kai.scheduler/segment-index"] for p in exp.pods] == ["0", "0", "0", "0"]


def nodes(racks=3, per_rack=4):
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"r{r}-n{i}", "labels": {ZONE: "z", BLOCK: "b", RACK: f"r{r}", HOST: f"r{r}-n{i}"}},
             "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}
            for r in range(racks) for i in range(per_rack)]


def racks_of_segments(pods, releases, index_of):
    node_of = {r.name: r.node for r in releases}
    out: dict[object, set[str]] = {}
    for p in pods:
        out.setdefault(index_of(p), set()).add(node_of[p["metadata"]["name"]].split("-")[0])
    return out


def test_controller_releases_a_ray_group_with_index_labels():
    exp = expand(raycluster(), CATALOG, GATING)
    assert all(p["metadata"]["annotations"]["segments.dev/gang-size"] == "8" for p in exp.pods)
    result = decide(nodes(), exp.pods, [TOPOLOGY])
    assert result.waiting == [] and [p.gang for p in result.placed] == ["team-a/nvl72/gpu"]
    racks = racks_of_segments(exp.pods, result.releases, lambda p: p["metadata"]["labels"]["kai.scheduler/segment-index"])
    assert sorted(racks) == ["0", "1"] and all(len(r) == 1 for r in racks.values())


def test_controller_forms_the_segments_of_a_ray_group_without_index_labels():
    # KubeRay < 1.6: no replica/host index; the multi-host replica still has its name. DESIGN.md §3b:
    # the controller forms segments of whole replicas and writes the segment index in the release patch.
    pods = expand(raycluster(), CATALOG, GATING).pods
    old_kuberay = []
    for p in pods:
        p = copy.deepcopy(p)
        labels = p["metadata"]["labels"]
        del labels["ray.io/worker-group-replica-index"], labels["ray.io/replica-host-index"]
        del labels["kai.scheduler/segment-index"]
        old_kuberay.append(p)
    result = decide(nodes(), old_kuberay, [TOPOLOGY])
    assert result.waiting == [] and len(result.releases) == 8
    by_name = {p["metadata"]["name"]: p for p in old_kuberay}
    segment_of = {}
    for r in result.releases:
        before = by_name[r.name]
        after = jsonpatch.apply_patch(before, r.patch)
        # the release is KEP-3838's (gate removed, hostname added) plus the segment label
        assert kep3838_violations(before, [op for op in r.patch if not op["path"].startswith("/metadata")]) == []
        assert [op for op in r.patch if op["path"].startswith("/metadata")] == [
            {"op": "add", "path": "/metadata/labels/kai.scheduler~1segment-index",
             "value": after["metadata"]["labels"]["kai.scheduler/segment-index"]}]
        segment_of[r.name] = after["metadata"]["labels"]["kai.scheduler/segment-index"]
    # whole replicas together: both hosts of a replica share a segment; 2 replicas (4 pods) per segment
    for replica in range(4):
        assert segment_of[f"nvl72-gpu-worker-{replica}-0"] == segment_of[f"nvl72-gpu-worker-{replica}-1"]
    assert sorted(segment_of.values()) == ["0"] * 4 + ["1"] * 4
    racks = racks_of_segments(old_kuberay, result.releases, lambda p: segment_of[p["metadata"]["name"]])
    assert all(len(r) == 1 for r in racks.values())
