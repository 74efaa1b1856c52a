"""Engine unit tests on hand-built clusters (no admission core involved)."""

from __future__ import annotations

import pytest

from tests.support.placement_helpers import BLOCK, CLUSTER_TOPOLOGY, GPU, RACK, ZONE, node, workers
from webhook.placement.engine import ClusterIndex, Gang, PlacementError, PodRequest, place


def cluster(gpus_per_rack: dict[str, list[int]]):
    """Racks named ``r-<zone><block><rack>``; each entry lists free GPUs per node (8 allocatable)."""
    nodes = []
    for rack, frees in gpus_per_rack.items():
        z, b = rack[2], rack[2:4]
        for i, free in enumerate(frees):
            n = node(f"n-{rack[2:]}-{i}", f"z{z}", f"b{b}", rack, **{GPU: 8000, "cpu": 64000})
            n.free[GPU] = free * 1000
            nodes.append(n)
    return ClusterIndex(nodes, CLUSTER_TOPOLOGY)


def test_unknown_level_is_an_error_listing_levels():
    idx = cluster({"r-000": [8]})
    with pytest.raises(PlacementError, match="not a level of topology cluster-topology; levels: .*topology-rack"):
        place(idx, Gang(workers(2, 2, gpus=4, prefix="w", role=""), segment_required="example.com/row"))


def test_workload_preferred_rack_escalates_to_block():
    # no rack has 16 GPUs free for 4 pods of 4 GPUs; block b00 has 8 + 8 = 16
    idx = cluster({"r-000": [8, 0], "r-001": [8, 0], "r-010": [4, 4], "r-011": [4, 0]})
    res = place(idx, Gang(workers(4, 2, gpus=4, prefix="w", role=""), workload_preferred=RACK, segment_preferred=RACK))
    assert res.placed
    assert (res.workload_level, res.workload_domain) == (BLOCK, "b00")
    # workload at depth 2 (block); both segments within one rack; the workload uses 2 racks (packing 1)
    assert res.objective == (2, (2,), 1, 0)
    assert [(s.level, s.domain) for s in res.segments] == [("kubernetes.io/hostname", "n-000-0"),
                                                           ("kubernetes.io/hostname", "n-001-0")]


def test_workload_required_zone_not_broken():
    idx = cluster({"r-000": [8], "r-100": [8, 8]})
    res = place(idx, Gang(workers(4, 2, gpus=4, prefix="w", role=""), workload_required=ZONE))
    assert res.placed and (res.workload_level, res.workload_domain) == (RACK, "r-100")  # deepest shared
    assert set(res.assignments.values()) == {"n-100-0", "n-100-1"}
    res = place(idx, Gang(workers(6, 2, gpus=4, prefix="w", role=""), workload_required=ZONE))
    assert not res.placed
    assert res.reason == ("workload level topology.kubernetes.io/zone: 2 domain(s), 0 with room for the whole "
                          "demand; the best (z1) holds 2 of 3 segments of 2 pods at segment level "
                          "topology.kubernetes.io/zone (binding resource: nvidia.com/gpu); not enough room there "
                          "for 6 pods like ns/w-0")


def test_heterogeneous_segment_stays_in_required_rack():
    idx = cluster({"r-000": [8, 2], "r-001": [8, 8]})
    leader = PodRequest("ns/leader", {GPU: 6000, "pods": 1000}, segment=(0, 0))
    pods = [leader] + workers(4, 2, gpus=4, prefix="w", role="")  # segment 0 = leader + w-0 + w-1, segment 1 = w-2, w-3
    res = place(idx, Gang(pods, segment_required=RACK))
    assert res.placed
    racks = {s.index: {res.assignments[p][2:5] for p in s.pods} for s in res.segments}
    assert all(len(v) == 1 for v in racks.values())
    used: dict[str, int] = {}
    for p in pods:
        used[res.assignments[p.key]] = used.get(res.assignments[p.key], 0) + p.requests[GPU]
    free = {n.name: n.free[GPU] for n in idx.nodes}
    assert all(v <= free[n] for n, v in used.items())


def test_resource_no_node_has():
    idx = cluster({"r-000": [8]})
    res = place(idx, Gang([PodRequest("ns/p", {"example.com/fpga": 1000, "pods": 1000})]))
    assert not res.placed and res.reason == "pod ns/p requests example.com/fpga, which no node in the topology has"


def test_overcommitted_resource_not_requested_does_not_block():
    idx = cluster({"r-000": [8, 8]})
    first = idx.nodes[0]
    idx.free[0, idx.col["cpu"]] = -500  # bound pods over-commit cpu on n-000-0
    res = place(idx, Gang([PodRequest("ns/master", {GPU: 8000, "pods": 1000})] + workers(2, 2, gpus=4, prefix="w", role="")))
    assert res.placed
    assert res.assignments["ns/master"] == first.name  # asks no cpu: the over-commit does not matter
    res = place(idx, Gang([PodRequest("ns/m", {"cpu": 1000, "pods": 1000})]))
    assert res.assignments["ns/m"] == "n-000-1"


def test_huge_allocatable_on_many_nodes_does_not_overflow_slot_sums():
    """3,000 nodes reporting 1e30 of everything (clamped to 2**62 milli): the per-node slots used to
    sum past int64 and the gang was reported as holding a negative number of segments."""
    from webhook.kube.quantity import MAX_MILLI

    nodes = [node(f"n{i:04d}", "z", "b", "r", cpu=MAX_MILLI, pods=MAX_MILLI, **{GPU: MAX_MILLI}) for i in range(3000)]
    idx = ClusterIndex(nodes, CLUSTER_TOPOLOGY)
    pods = [PodRequest(f"ns/w-{i}", {"cpu": 1, "pods": 1000}, segment=(0, i // 2)) for i in range(4)]
    res = place(idx, Gang(pods, segment_required=RACK))
    assert res.placed and res.reason is None
    assert set(res.assignments.values()) == {"n0000"}
    assert [(s.level, s.domain) for s in res.segments] == [("kubernetes.io/hostname", "n0000")] * 2


def test_a_webhook_patch_that_does_not_apply_is_named(monkeypatch):
    # expand applies the webhook's JSONPatch with jsonpatch; one that cannot apply (here: an add
    # under a missing parent) is an ExpandError naming the object, never a traceback
    from types import SimpleNamespace

    import webhook.admission.review
    from webhook.admission.config import AdmissionSettings
    from webhook.planning.expand import ExpandError, expand
    from webhook.topology.objects import default_catalog

    bad = SimpleNamespace(allowed=True, warnings=[], message="",  # what expand reads of a Decision
                          patch=[{"op": "add", "path": "/metadata/missing/x", "value": "1"}])
    monkeypatch.setattr(webhook.admission.review, "review", lambda *args, **kwargs: bad)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}}}}
    with pytest.raises(ExpandError, match="the webhook's patch for PyTorchJob j does not apply: "):
        expand(job, default_catalog(), AdmissionSettings())


def test_failed_placement_svg_holds_its_whole_reason():
    """The 'not placed' drawing used to be 600 px wide with the reason on one line: long reasons
    were cut off. Each wrapped line must fit in the drawing's width."""
    import xml.etree.ElementTree as ET

    from webhook.placement.engine import Placement
    from webhook.planning.svg import REASON_CHAR_WIDTH, render

    reason = "workload level cloud.provider.com/topology-rack: 101 domain(s), 0 with room for the whole demand; " * 4
    svg = render(cluster({"r-000": [8]}), Placement(placed=False, reason=reason), title="PyTorchJob j")
    root = ET.fromstring(svg)
    width = int(root.get("width", ""))
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text and t.text != "PyTorchJob j"]
    assert " ".join(texts) == ("not placed: " + reason).strip()
    assert len(texts) == 5
    assert all(10 + len(t) * REASON_CHAR_WIDTH <= width for t in texts)


def test_reason_counts_the_partial_last_segment_and_each_role_of_a_class():
    # 10 workers in segments of 4 (the last of 2) and a Master that requests what a worker does:
    # one pod class of 11 pods, 1 master and 10 workers, on racks of 6 and 4 one-GPU nodes
    idx = cluster({"r-000": [1] * 6, "r-001": [1] * 4})
    master = PodRequest("ns/j-master-0", {GPU: 1000, "pods": 1000}, role="master")
    pods = [master] + [PodRequest(f"ns/j-worker-{i}", {GPU: 1000, "pods": 1000}, segment=(0, i // 4), role="worker")
                       for i in range(10)]
    res = place(idx, Gang(pods, segment_required=RACK))
    assert not res.placed
    assert res.reason == ("workload level cluster: 1 domain(s), 0 with room for the whole demand; the best (cluster) "
                          "holds 3 of 3 segments of 4 pods (the last of 2) at segment level "
                          "cloud.provider.com/topology-rack (binding resource: nvidia.com/gpu); not enough room there "
                          "for 11 pods: ns/j-master-0 (master) and 10 like ns/j-worker-0 (worker)")


def test_a_pod_with_spec_node_name_is_pinned_to_that_node():
    # spec.nodeName bypasses kube-scheduler: the pod runs on that node or nowhere.
    from webhook.placement.eligibility import pinned_to_node, pod_request

    pin = ("metadata.name", "In", ("n1",))
    spec = {"nodeName": "n1", "containers": [{"name": "c"}]}
    assert pod_request({"metadata": {"name": "p"}, "spec": spec}, {}).node_affinity == (((), (pin,)),)
    zone_a = ((("topology.kubernetes.io/zone", "In", ("a",)),), ())
    assert pinned_to_node((zone_a, ((), ())), "n1") == (
        ((("topology.kubernetes.io/zone", "In", ("a",)),), (pin,)), ((), ()))  # an empty term stays empty
    with pytest.raises(PlacementError, match=r'Pod p: spec.nodeName = 7: must be a node name \(a string\)'):
        pod_request({"metadata": {"name": "p"}, "spec": {"nodeName": 7}}, {})
    assert pod_request({"metadata": {"name": "p"}, "spec": {"nodeName": ""}}, {}).node_affinity is None


def test_shared_depths_of_many_groups_in_one_pass():
    """Depths of cluster-topology (zone > block > rack > hostname) plus the node: 0 cluster, 1 zone,
    2 block, 3 rack, 4 hostname, 5 node. Nodes sorted by label path: n-000-0, n-000-1 (rack r-000), n-001-0 (r-001,
    same block b00), n-100-0 (zone 1)."""
    idx = cluster({"r-000": [8, 8], "r-001": [8], "r-100": [8]})
    pos = {name: i for i, name in enumerate(idx.node_names)}
    groups = [[pos["n-000-0"]], [pos["n-000-0"], pos["n-000-1"]], [pos["n-000-1"], pos["n-001-0"]],
              [pos["n-000-0"], pos["n-100-0"]], [pos["n-001-0"], pos["n-001-0"]]]
    assert idx.shared_depths(groups) == [5, 3, 2, 0, 5]
    assert idx.shared_depths(groups) == [idx.shared_depth(g) for g in groups]
    assert idx.shared_depths([]) == []
    with pytest.raises(ValueError, match="a group holds no node position"):
        idx.shared_depths([[0], []])


def test_verify_names_a_pod_placed_with_a_resource_no_node_has():
    from webhook.placement.verify import PlacementBug, verify
    idx = cluster({"r-000": [8]})
    pod = PodRequest("ns/w-0", {"example.com/fpga": 1000, "pods": 1000})
    with pytest.raises(PlacementBug, match="placed ns/w-0, which asks for a resource no node has"):
        verify(idx, Gang([pod]), {"ns/w-0": 0}, 0, 0)
    fits = PodRequest("ns/w-1", {GPU: 8000, "pods": 1000})
    verify(idx, Gang([fits]), {"ns/w-1": 0}, 0, 0)  # 8 GPUs on the node's 8 free: no bug
    with pytest.raises(PlacementBug, match="broke the capacity of n-000-0 on nvidia.com/gpu"):
        verify(idx, Gang([fits, PodRequest("ns/w-2", {GPU: 1000, "pods": 1000})]), {"ns/w-1": 0, "ns/w-2": 0}, 0, 0)
