"""The six reproductions of issue 8 (bug reports of KAI, Kueue and Volcano replayed against the
engine), with the zone > block > rack > hostname topology, as tests with literal results."""

from __future__ import annotations

import pytest

from webhook.placement.engine import ClusterIndex, Gang, PodRequest, place

from placement_helpers import BLOCK, CLUSTER_TOPOLOGY, HOST, RACK, ZONE, node

GPU = "nvidia.com/gpu"


def racks_of_one_gpu_nodes(sizes: dict[str, int], **extra) -> ClusterIndex:
    """Racks named by ``sizes`` keys in zone z0 / block b0; nodes ``<rack>-<i>`` with 1 GPU."""
    nodes = [node(f"{rack}-{i}", "z0", "b0", rack, **{GPU: 1000, "cpu": 8000}, **extra)
             for rack, count in sizes.items() for i in range(count)]
    return ClusterIndex(nodes, CLUSTER_TOPOLOGY)


def workers(count: int, size: int | None, gpus: int = 1, prefix: str = "job-worker") -> list[PodRequest]:
    return [PodRequest(f"ns/{prefix}-{i}", {GPU: gpus * 1000, "cpu": 1000, "pods": 1000},
                       segment=(0, i // size) if size else None, role="worker") for i in range(count)]


def racks_of_segments(res) -> dict[int, str]:
    """segment index → the one rack holding all its pods (fails if a segment spans racks)."""
    out = {}
    for s in res.segments:
        racks = {res.assignments[p].rsplit("-", 1)[0] for p in s.pods}
        assert len(racks) == 1, f"segment {s.index} spans racks {racks}"
        out[s.index] = racks.pop()
    return out


# 1. Partial last segment (DESIGN.md §7's 10/4 example): the tail must share a rack with a full segment.
@pytest.mark.parametrize("sizes, expected", [
    ({"ra": 6, "rb": 4}, {0: "ra", 1: "rb", 2: "ra"}),
    ({"ra": 4, "rb": 6}, {0: "ra", 1: "rb", 2: "rb"}),
    ({"ra": 7, "rb": 5}, {0: "ra", 1: "rb", 2: "ra"}),
    ({"ra": 6, "rb": 4, "rc": 1}, {0: "ra", 1: "rb", 2: "ra"}),
])
def test_1_partial_last_segment_shares_a_rack(sizes, expected):
    res = place(racks_of_one_gpu_nodes(sizes), Gang(workers(10, 4), segment_required=RACK))
    assert res.placed and res.exact and res.reason is None
    assert racks_of_segments(res) == expected
    assert [s.pods for s in res.segments][2] == ["ns/job-worker-8", "ns/job-worker-9"]


def test_1_partial_last_segment_with_a_master():
    pods = [PodRequest("ns/job-master-0", {GPU: 1000, "cpu": 4000, "pods": 1000}, role="master")] + workers(10, 4)
    res = place(racks_of_one_gpu_nodes({"ra": 6, "rb": 4, "rc": 1}), Gang(pods, segment_required=RACK))
    assert res.placed and res.exact
    assert racks_of_segments(res) == {0: "ra", 1: "rb", 2: "ra"}
    assert res.assignments["ns/job-master-0"] == "rc-0"  # the only node left for it


# 2. No fixed cap on the domains tried.
def test_2_the_one_rack_that_fits_among_101():
    sizes = {f"r{i:03d}": 10 for i in range(100)} | {"r100": 12}
    index = racks_of_one_gpu_nodes(sizes)
    res = place(index, Gang(workers(11, 4), workload_required=RACK))
    assert res.placed and res.exact
    assert (res.workload_level, res.workload_domain) == (RACK, "r100")
    assert {n.rsplit("-", 1)[0] for n in res.assignments.values()} == {"r100"}
    res = place(index, Gang(workers(13, 4), workload_required=RACK))
    assert not res.placed and res.exact
    assert res.reason == ("workload level cloud.provider.com/topology-rack: 101 domain(s), 0 with room for the whole "
                          "demand; the best (r100) holds 3 of 4 segments of 4 pods (the last of 1) at segment level "
                          "cloud.provider.com/topology-rack (binding resource: nvidia.com/gpu); not enough room there "
                          "for 13 pods like ns/job-worker-0 (worker)")


@pytest.mark.parametrize("racks", [64, 65, 200])
def test_2_lws_leader_selecting_a_pool_only_in_the_last_rack(racks):
    nodes = [node(f"r{r:03d}-{i}", "z0", "b0", f"r{r:03d}", **{GPU: 1000, "cpu": 8000}) for r in range(racks) for i in range(4)]
    cpu_node = node(f"r{racks - 1:03d}-cpu", "z0", "b0", f"r{racks - 1:03d}", cpu=32000)
    cpu_node.labels["pool"] = "cpu"
    index = ClusterIndex(nodes + [cpu_node], CLUSTER_TOPOLOGY)
    # LWS size 5, subGroupSize 2, LeaderWorker: segments {L,1,2} {3,4} (DESIGN.md §7)
    leader = PodRequest("ns/lws-0", {"cpu": 4000, "pods": 1000}, segment=(0, 0), node_selector=(("pool", "cpu"),),
                        role="leader")
    pods = [leader] + [PodRequest(f"ns/lws-0-{w}", {GPU: 1000, "cpu": 1000, "pods": 1000}, segment=(0, (w - 1) // 2),
                                  role="worker") for w in range(1, 5)]
    res = place(index, Gang(pods, workload_required=RACK, segment_required=RACK))
    assert res.placed and res.exact
    assert res.assignments["ns/lws-0"] == f"r{racks - 1:03d}-cpu"
    assert (res.workload_level, res.workload_domain) == (RACK, f"r{racks - 1:03d}")


# 3. The leader inside segment 0: found whatever the node names' order.
@pytest.mark.parametrize("big, small", [("n-a", "n-b"), ("n-b", "n-a")])
def test_3_leader_and_workers_of_one_segment_packed_exactly(big, small):
    nodes = [node(big, "z0", "b0", "r0", cpu=3000), node(small, "z0", "b0", "r0", cpu=2500)]
    index = ClusterIndex(nodes, CLUSTER_TOPOLOGY)
    pods = [PodRequest("ns/lws-0", {"cpu": 2500, "pods": 1000}, segment=(0, 0), role="leader"),
            PodRequest("ns/lws-0-1", {"cpu": 1500, "pods": 1000}, segment=(0, 0), role="worker"),
            PodRequest("ns/lws-0-2", {"cpu": 1500, "pods": 1000}, segment=(0, 0), role="worker")]
    res = place(index, Gang(pods, segment_required=RACK))
    assert res.placed and res.exact
    assert res.assignments == {"ns/lws-0": small, "ns/lws-0-1": big, "ns/lws-0-2": big}


# 4. Preferred packing: the fewest racks when the workload cannot meet in one.
def test_4_preferred_rack_uses_the_fewest_racks():
    frees = {"ra-0": ("ra", 2), "ra-1": ("ra", 1), "ra-2": ("ra", 1), "rb-0": ("rb", 2), "rc-0": ("rc", 2)}
    nodes = []
    for name, (rack, gpus) in frees.items():
        nodes.append(node(name, "z0", "b0", rack, **{GPU: gpus * 1000, "cpu": 8000}))
    res = place(ClusterIndex(nodes, CLUSTER_TOPOLOGY), Gang(workers(5, None), workload_preferred=RACK))
    assert res.placed and res.exact
    used = sorted(n.split("-")[0] for n in res.assignments.values())
    assert used == ["ra", "ra", "ra", "ra", "rb"]
    assert res.objective == (2, (), 1, 0)  # met at block (depth 2), 2 racks (packing 1)
    assert (res.workload_level, res.workload_domain) == (BLOCK, "b0")


# 5. Required node affinity, per pod.
def affinity(*terms) -> tuple:
    """Frozen nodeSelectorTerms: each term a list of (key, operator, values) label expressions,
    or ("metadata.name", operator, values) as a field."""
    out = []
    for term in terms:
        exprs = tuple((k, op, tuple(v)) for k, op, v in term if k != "metadata.name")
        fields = tuple((k, op, tuple(v)) for k, op, v in term if k == "metadata.name")
        out.append((exprs, fields))
    return tuple(out)


def gpu_cluster() -> ClusterIndex:
    spec = [("h-0", "h100", "2"), ("h-1", "h100", "4"), ("a-0", "a100", "8"), ("a-1", "a100", None)]
    nodes = []
    for name, kind, gen in spec:
        n = node(name, "z0", "b0", "r0", **{GPU: 8000, "cpu": 64000})
        n.labels["gpu-type"] = kind
        if gen is not None:
            n.labels["gen"] = gen
        nodes.append(n)
    return ClusterIndex(nodes, CLUSTER_TOPOLOGY)


@pytest.mark.parametrize("terms, allowed", [
    ([[("gpu-type", "In", ["a100"])]], {"a-0", "a-1"}),
    ([[("gpu-type", "NotIn", ["a100"])]], {"h-0", "h-1"}),
    ([[("gen", "Exists", [])]], {"h-0", "h-1", "a-0"}),
    ([[("gen", "DoesNotExist", [])]], {"a-1"}),
    ([[("gen", "Gt", ["3"])]], {"h-1", "a-0"}),
    ([[("gen", "Lt", ["3"])]], {"h-0"}),
    ([[("gpu-type", "In", ["h100"]), ("gen", "Gt", ["2"])]], {"h-1"}),            # ANDed
    ([[("gen", "Lt", ["3"])], [("gen", "DoesNotExist", [])]], {"h-0", "a-1"}),    # ORed
    ([[("metadata.name", "In", ["a-1", "h-0"])]], {"a-1", "h-0"}),
    ([[("metadata.name", "NotIn", ["a-1", "h-0"])]], {"a-0", "h-1"}),
    ([[], [("metadata.name", "In", ["h-1"])]], {"h-1"}),                           # an empty term matches nothing
])
def test_5_required_node_affinity_operators(terms, allowed):
    pods = [PodRequest(f"ns/w-{i}", {GPU: 8000, "pods": 1000}, node_affinity=affinity(*terms)) for i in range(len(allowed))]
    res = place(gpu_cluster(), Gang(pods))
    assert res.placed
    assert set(res.assignments.values()) == allowed  # 8 GPUs each: one pod per allowed node, none elsewhere


def test_5_affinity_matching_no_node_is_named():
    pods = [PodRequest("ns/job-worker-0", {GPU: 1000, "pods": 1000}, role="worker",
                       node_affinity=affinity([("gpu-type", "In", ["b200"])])),
            PodRequest("ns/job-master-0", {"cpu": 1000, "pods": 1000}, role="master", node_selector=(("pool", "cpu"),))]
    res = place(gpu_cluster(), Gang(pods))
    assert not res.placed and res.exact
    assert res.reason == ("pod ns/job-worker-0 (worker) can go to no node: required node affinity (gpu-type In [b200]) "
                          "matches 0 of 4 ready node(s); pod ns/job-master-0 (master) can go to no node: nodeSelector "
                          "pool=cpu matches 0 of 4 ready node(s)")


def test_5_untolerated_taint_is_named():
    index = gpu_cluster()
    for n in index.nodes:
        n.taints = (("dedicated", "training", "NoSchedule"),)
    index = ClusterIndex(index.nodes, CLUSTER_TOPOLOGY)
    res = place(index, Gang([PodRequest("ns/p", {GPU: 1000, "pods": 1000})]))
    assert res.reason == ("pod ns/p can go to no node: untolerated taint(s) dedicated=training:NoSchedule leave 0 of 4 "
                          "ready node(s)")
    tol = ((("effect", "NoSchedule"), ("key", "dedicated"), ("operator", "Equal"), ("value", "training")),)
    assert place(index, Gang([PodRequest("ns/p", {GPU: 1000, "pods": 1000}, tolerations=tol)])).placed


def test_5_workers_with_a100_affinity_never_on_h100():
    index = gpu_cluster()
    pods = [PodRequest(f"ns/w-{i}", {GPU: 4000, "pods": 1000}, segment=(0, i // 2),
                       node_affinity=affinity([("gpu-type", "In", ["a100"])])) for i in range(4)]
    res = place(index, Gang(pods, segment_preferred=HOST))
    assert res.placed
    assert sorted(res.assignments.values()) == ["a-0", "a-0", "a-1", "a-1"]
    pods.append(PodRequest("ns/w-4", {GPU: 4000, "pods": 1000}, segment=(0, 2),
                           node_affinity=affinity([("gpu-type", "In", ["a100"])])))
    assert not place(index, Gang(pods)).placed


# 6. Real dumps: JSON read by the JSON parser whatever the file name; only placement's fields kept.
KUBECTL_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "gpu-1", "uid": "u", "labels": {ZONE: "z0", BLOCK: "b0", RACK: "r0", HOST: "gpu-1"},
                 "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
    "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "dedicated", "value": "train", "effect": "NoSchedule"},
                                                  {"key": "soft", "effect": "PreferNoSchedule"}]},
    "status": {"addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
               "allocatable": {"cpu": "191450m", "memory": "2035784956Ki", "nvidia.com/gpu": "8", "pods": "110"},
               "capacity": {"cpu": "192", "memory": "2047512316Ki", "nvidia.com/gpu": "8", "pods": "110"},
               "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
               "images": [{"names": ["registry.example.com/trainer:1"], "sizeBytes": 123}],
               "nodeInfo": {"kubeletVersion": "v1.29.0"}}}
KUBECTL_POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": "t"},
    "spec": {"nodeName": "gpu-1", "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "16", "memory": "200Gi"}, "limits": {"nvidia.com/gpu": "2"}}},
        {"name": "b", "resources": {"requests": {"cpu": "500m"}}}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_6_json_dump_read_as_json_whatever_its_name(tmp_path, monkeypatch):
    import gc
    import json

    import yaml

    from webhook.placement.snapshot import load_snapshot

    path = tmp_path / "cluster.yaml"  # JSON text under a YAML name
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [KUBECTL_NODE, KUBECTL_POD]}))

    def no_yaml(*args, **kwargs):
        raise AssertionError("a JSON dump went through the YAML parser")

    monkeypatch.setattr(yaml, "load_all", no_yaml)
    snap = load_snapshot([str(path)])
    assert gc.isenabled()  # paused only while the dump is built
    (n,) = snap.nodes
    assert (n.name, n.ready, n.unschedulable, n.taints) == ("gpu-1", True, False, (("dedicated", "train", "NoSchedule"),))
    assert n.allocatable == {"cpu": 191_450, "memory": 2035784956 * 1024 * 1000, "nvidia.com/gpu": 8000, "pods": 110_000}
    # 16 + 0.5 cores, 200Gi, 2 GPUs (a limit without a request), one pod
    assert n.free == {"cpu": 191_450 - 16_500, "memory": (2035784956 * 1024 - 200 * 2**30) * 1000,
                      "nvidia.com/gpu": 6000, "pods": 109_000}
    assert snap.bound_pods == 1


def test_6_pod_requests_fast_path_agrees_with_the_exact_rule():
    from webhook.placement.snapshot import pod_requests, pod_requests_milli
    from webhook.placement.quantity import to_milli

    specs = [KUBECTL_POD["spec"],
             {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "250m"}}}]},
             {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1n"}}}]},  # not whole milli: exact rule
             {"containers": [{"name": "a"}], "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]},
             {"containers": [{"name": "a", "resources": {"requests": {"cpu": 2}}}]}]
    expected = [{"cpu": 16_500, "memory": 200 * 2**30 * 1000, "nvidia.com/gpu": 2000, "pods": 1000},
                {"cpu": 250, "memory": 2**30 * 1000, "pods": 1000},
                {"cpu": 1, "pods": 1000},
                {"cpu": 2000, "pods": 1000},
                {"cpu": 2000, "pods": 1000}]
    for spec, want in zip(specs, expected):
        assert pod_requests_milli(spec) == want
        exact = {k: to_milli(v, round_up=True) for k, v in pod_requests(spec).items()}
        assert exact == {k: v for k, v in want.items() if k != "pods"}


def test_5_infeasible_under_required_affinity_names_the_restricted_role():
    # gen labels 2, 4, 8, none: `gen Gt 3` leaves h-1 and a-0; three 8-GPU workers cannot fit on two
    # nodes. The reason says so beside the binding resource; the unrestricted master is not named.
    pods = [PodRequest(f"ns/job-worker-{i}", {GPU: 8000, "pods": 1000}, role="worker",
                       node_affinity=affinity([("gen", "Gt", ["3"])])) for i in range(3)]
    pods.append(PodRequest("ns/job-master-0", {"cpu": 1000, "pods": 1000}, role="master"))
    res = place(gpu_cluster(), Gang(pods))
    assert not res.placed and res.exact
    assert res.reason == ("workload level cluster: 1 domain(s), 0 with room for the whole demand; the best (cluster) "
                          "holds 2 of 3 pods like ns/job-worker-0 (binding resource: nvidia.com/gpu); not enough room "
                          "there for 3 pods like ns/job-worker-0 (worker); 3 pods like ns/job-worker-0 (worker) are "
                          "eligible on only 2 of 4 ready node(s), restricted by: required node affinity (gen Gt [3]) "
                          "matches 2 of 4 ready node(s)")
