"""Helpers shared by the placement tests: hand-built clusters and independent checks."""

from __future__ import annotations

from webhook.kube.nodes import Node
from webhook.placement.engine import ClusterIndex, PodRequest
from webhook.topology.objects import Topology

ZONE = "topology.kubernetes.io/zone"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
CLUSTER_TOPOLOGY = Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))
GPU = "nvidia.com/gpu"


def node(name: str, zone: str, block: str, rack: str, **alloc) -> Node:
    """A Ready node with the four cluster-topology labels; ``alloc`` in milli-units."""
    labels = {ZONE: zone, BLOCK: block, RACK: rack, HOST: name}
    a = dict(alloc)
    a.setdefault("pods", 110_000)
    return Node(name=name, labels=labels, allocatable=a, free=dict(a))


def shared_level(nodes_by_name: dict, names: list[str], levels: tuple[str, ...]) -> int:
    """Deepest topology depth (1 = broadest level, 0 = none) whose label all ``names`` share."""
    depth = 0
    for i, lv in enumerate(levels, 1):
        if len({nodes_by_name[n].labels[lv] for n in names}) == 1:
            depth = i
        else:
            break
    return depth


def racks_of_one_gpu_nodes(sizes: dict[str, int], **extra) -> ClusterIndex:
    """Racks named by ``sizes`` keys (rack → node count) in zone z0 / block b0; nodes
    ``<rack>-<i>`` with 1 GPU and 8 CPUs (``extra``: more allocatable, milli-units)."""
    nodes = [node(f"{rack}-{i}", "z0", "b0", rack, **{GPU: 1000, "cpu": 8000}, **extra)
             for rack, count in sizes.items() for i in range(count)]
    return ClusterIndex(nodes, CLUSTER_TOPOLOGY)


def workers(count: int, size: int | None, *, gpus: int = 1, cpu: int = 0, prefix: str = "job-worker",
            role: str = "worker") -> list[PodRequest]:
    """``count`` identical worker pods ``ns/<prefix>-<i>``, pod ``i`` in segment ``(0, i // size)``
    (none when ``size`` is ``None``), each requesting ``gpus`` GPUs, ``cpu`` milli-CPU when given,
    and one pod slot; ``role`` as :class:`PodRequest` reads it (``""``: none)."""
    requests = {GPU: gpus * 1000, **({"cpu": cpu} if cpu else {}), "pods": 1000}
    return [PodRequest(f"ns/{prefix}-{i}", dict(requests), segment=(0, i // size) if size else None, role=role)
            for i in range(count)]


def racks_of_segments(res) -> dict[int, str]:
    """Segment index → the one rack holding all its pods, for nodes named ``<rack>-<i>``
    (fails the test when a segment spans racks)."""
    out = {}
    for s in res.segments:
        racks = {res.assignments[p].rsplit("-", 1)[0] for p in s.pods}
        assert len(racks) == 1, f"segment {s.index} spans racks {racks}"
        out[s.index] = racks.pop()
    return out
