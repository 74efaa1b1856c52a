"""The engine's choice among placements that fit (DESIGN.md §8: the search and its objective), on
hand-built racks of the zone > block > rack > hostname topology, with literal results: a partial
last segment shares a rack with a full one, no fixed cap on the domains tried, a leader packed
exactly with its segment, preferred packing in the fewest racks."""

from __future__ import annotations

import pytest

from tests.support.placement_helpers import (
    BLOCK,
    CLUSTER_TOPOLOGY,
    GPU,
    RACK,
    node,
    racks_of_one_gpu_nodes,
    racks_of_segments,
    workers,
)
from webhook.placement.engine import ClusterIndex, Gang, PodRequest, place


# Partial last segment (DESIGN.md §7's 10/4 example): the tail must share a rack with a full segment.
@pytest.mark.parametrize("sizes, expected", [
    ({"ra": 6, "rb": 4}, {0: "ra", 1: "rb", 2: "ra"}),
    ({"ra": 4, "rb": 6}, {0: "ra", 1: "rb", 2: "rb"}),
    ({"ra": 7, "rb": 5}, {0: "ra", 1: "rb", 2: "ra"}),
    ({"ra": 6, "rb": 4, "rc": 1}, {0: "ra", 1: "rb", 2: "ra"}),
])
def test_partial_last_segment_shares_a_rack(sizes, expected):
    res = place(racks_of_one_gpu_nodes(sizes), Gang(workers(10, 4, cpu=1000), segment_required=RACK))
    assert res.placed and res.exact and res.reason is None
    assert racks_of_segments(res) == expected
    assert [s.pods for s in res.segments][2] == ["ns/job-worker-8", "ns/job-worker-9"]


def test_partial_last_segment_with_a_master():
    pods = [PodRequest("ns/job-master-0", {GPU: 1000, "cpu": 4000, "pods": 1000}, role="master")] + workers(10, 4, cpu=1000)
    res = place(racks_of_one_gpu_nodes({"ra": 6, "rb": 4, "rc": 1}), Gang(pods, segment_required=RACK))
    assert res.placed and res.exact
    assert racks_of_segments(res) == {0: "ra", 1: "rb", 2: "ra"}
    assert res.assignments["ns/job-master-0"] == "rc-0"  # the only node left for it


# No fixed cap on the domains tried.
def test_the_one_rack_that_fits_among_101():
    sizes = {f"r{i:03d}": 10 for i in range(100)} | {"r100": 12}
    index = racks_of_one_gpu_nodes(sizes)
    res = place(index, Gang(workers(11, 4, cpu=1000), workload_required=RACK))
    assert res.placed and res.exact
    assert (res.workload_level, res.workload_domain) == (RACK, "r100")
    assert {n.rsplit("-", 1)[0] for n in res.assignments.values()} == {"r100"}
    res = place(index, Gang(workers(13, 4, cpu=1000), workload_required=RACK))
    assert not res.placed and res.exact
    assert res.reason == ("workload level cloud.provider.com/topology-rack: 101 domain(s), 0 with room for the whole "
                          "demand; the best (r100) holds 3 of 4 segments of 4 pods (the last of 1) at segment level "
                          "cloud.provider.com/topology-rack (binding resource: nvidia.com/gpu); not enough room there "
                          "for 13 pods like ns/job-worker-0 (worker)")


@pytest.mark.parametrize("racks", [64, 65, 200])
def test_lws_leader_selecting_a_pool_only_in_the_last_rack(racks):
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


# The leader inside segment 0: found whatever the node names' order.
@pytest.mark.parametrize("big, small", [("n-a", "n-b"), ("n-b", "n-a")])
def test_leader_and_workers_of_one_segment_packed_exactly(big, small):
    nodes = [node(big, "z0", "b0", "r0", cpu=3000), node(small, "z0", "b0", "r0", cpu=2500)]
    index = ClusterIndex(nodes, CLUSTER_TOPOLOGY)
    pods = [PodRequest("ns/lws-0", {"cpu": 2500, "pods": 1000}, segment=(0, 0), role="leader"),
            PodRequest("ns/lws-0-1", {"cpu": 1500, "pods": 1000}, segment=(0, 0), role="worker"),
            PodRequest("ns/lws-0-2", {"cpu": 1500, "pods": 1000}, segment=(0, 0), role="worker")]
    res = place(index, Gang(pods, segment_required=RACK))
    assert res.placed and res.exact
    assert res.assignments == {"ns/lws-0": small, "ns/lws-0-1": big, "ns/lws-0-2": big}


# Preferred packing: the fewest racks when the workload cannot meet in one.
def test_preferred_rack_uses_the_fewest_racks():
    frees = {"ra-0": ("ra", 2), "ra-1": ("ra", 1), "ra-2": ("ra", 1), "rb-0": ("rb", 2), "rc-0": ("rc", 2)}
    nodes = []
    for name, (rack, gpus) in frees.items():
        nodes.append(node(name, "z0", "b0", rack, **{GPU: gpus * 1000, "cpu": 8000}))
    res = place(ClusterIndex(nodes, CLUSTER_TOPOLOGY), Gang(workers(5, None, cpu=1000), workload_preferred=RACK))
    assert res.placed and res.exact
    used = sorted(n.split("-")[0] for n in res.assignments.values())
    assert used == ["ra", "ra", "ra", "ra", "rb"]
    assert res.objective == (2, (), 1, 0)  # met at block (depth 2), 2 racks (packing 1)
    assert (res.workload_level, res.workload_domain) == (BLOCK, "b0")
