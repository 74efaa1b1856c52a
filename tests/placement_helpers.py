"""Helpers shared by the placement tests: hand-built clusters and independent checks."""

from __future__ import annotations

from webhook.core.topology import Topology
from webhook.placement.snapshot import Node

ZONE = "topology.kubernetes.io/zone"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
CLUSTER_TOPOLOGY = Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))


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
