"""The snapshot's nodes of one topology as arrays (the engine's view of the cluster).

Depths. A topology with levels ``l1 … lk`` (broadest first) gives ``k + 2`` depths: 0 is the
whole cluster (one domain), ``1 … k`` the topology levels, ``k + 1`` the node itself (the
implicit lowest domain, DESIGN.md §8). Nodes are sorted by their label path then name, so every
domain is a contiguous range of nodes and domain ids ascend with domain names (the deterministic
tie-break of DESIGN.md §8).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, overload

import numpy as np

from webhook.kube.core import HOSTNAME
from webhook.kube.nodes import Node
from webhook.placement.eligibility import EligibilityIndex
from webhook.placement.model import Placement, PlacementError, PodRequest
from webhook.text.messages import quote
from webhook.topology.objects import Topology


class ClusterIndex:
    """The snapshot's nodes of one topology, as arrays the engine works on.

    ``nodes``: :class:`Node` objects inside the topology (nodes missing a level label are
    dropped and counted in ``outside``). ``free``: ``(n_nodes, n_resources)`` int64 milli-units,
    mutable (``commit`` / ``release`` change it). ``dom[d]``: domain id of every node at depth
    ``d``; ``starts[d]``: first node of every domain; ``names[d]``: domain display names.
    Build cost is O(nodes · levels) Python; placement itself is vectorised.
    """

    def __init__(self, nodes: Iterable[Node], topology: Topology | None, extra_resources: Iterable[str] = ()):
        self.topology = topology
        self.levels: tuple[str, ...] = topology.levels if topology else ()
        inside, self.outside = [], 0
        for n in nodes:
            if all(lv in n.labels for lv in self.levels):
                inside.append(n)
            else:
                self.outside += 1
        inside.sort(key=lambda n: tuple(n.labels[lv] for lv in self.levels) + (n.name,))
        self.nodes: list[Node] = inside
        self.node_names = [n.name for n in inside]
        self.node_pos = {name: i for i, name in enumerate(self.node_names)}
        count = len(inside)
        self.n = count
        self.node_depth = len(self.levels) + 1
        self.n_depths = len(self.levels) + 2
        self.resources = sorted({r for n in inside for r in n.allocatable} | {r for n in inside for r in n.free}
                                | set(extra_resources) | {"pods"})
        self.col = {r: i for i, r in enumerate(self.resources)}
        self.free = np.zeros((count, len(self.resources)), dtype=np.int64)
        self.alloc = np.zeros((count, len(self.resources)), dtype=np.int64)
        for i, n in enumerate(inside):
            for r, v in n.free.items():
                self.free[i, self.col[r]] = v
            for r, v in n.allocatable.items():
                self.alloc[i, self.col[r]] = v
        base_ok = np.array([n.ready and not n.unschedulable for n in inside], dtype=bool)
        signatures: dict[tuple[Any, ...], int] = {}
        taint_sig = np.array([signatures.setdefault(n.taints, len(signatures)) for n in inside], dtype=np.int32)
        self.eligibility = EligibilityIndex([n.labels for n in inside], self.node_names, base_ok,
                                            taint_sig, list(signatures))
        self.dom: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.names: list[list[str]] = []
        for d in range(self.n_depths):
            if d == 0:
                ids, names = np.zeros(count, dtype=np.int64), ["cluster"]
            elif d == self.node_depth:
                ids, names = np.arange(count, dtype=np.int64), list(self.node_names)
            else:
                ids, names, prev, cur = np.zeros(count, dtype=np.int64), [], None, -1
                for i, n in enumerate(inside):
                    path = tuple(n.labels[lv] for lv in self.levels[:d])
                    if path != prev:
                        cur += 1
                        names.append(path[-1])
                        prev = path
                    ids[i] = cur
            self.dom.append(ids)
            starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if count else np.zeros(0, dtype=np.int64)
            self.starts.append(starts.astype(np.int64))
            self.names.append(names if count else [])

    @overload
    def depth_of(self, level: str) -> int: ...
    @overload
    def depth_of(self, level: None) -> None: ...
    @overload
    def depth_of(self, level: str | None) -> int | None: ...

    def depth_of(self, level: str | None) -> int | None:
        """Depth of a level label key or its alias (KAI's ``spec.levels[].alias``,
        :meth:`Topology.label_of`) (1 = broadest), ``None`` for ``None``.
        Raises :class:`PlacementError` for a key the topology does not have."""
        if level is None:
            return None
        if self.topology is not None:
            level = self.topology.label_of(level)
        if level not in self.levels:
            raise PlacementError(f"level {quote(level)} is not a level of topology "
                                 f"{self.topology.name if self.topology else '(none)'}; levels: "
                                 f"{', '.join(self.levels) or 'none'}")
        return self.levels.index(level) + 1

    def level_name(self, depth: int) -> str:
        """Label key of a depth; ``"cluster"`` for 0, ``"node"`` for the implicit node depth."""
        if depth == 0:
            return "cluster"
        if depth == self.node_depth:
            return "node"
        return self.levels[depth - 1]

    def domain_range(self, depth: int, domain: int) -> tuple[int, int]:
        """``(first, end)`` node positions of one domain."""
        starts = self.starts[depth]
        return int(starts[domain]), int(starts[domain + 1]) if domain + 1 < len(starts) else self.n

    def eligible(self, pod: PodRequest) -> np.ndarray:
        """Nodes the pod may go to (:mod:`webhook.placement.eligibility`), before capacity."""
        return self.eligibility.mask(pod)

    def req_vector(self, pod: PodRequest) -> np.ndarray | None:
        """Request as a row over ``resources``; ``None`` if it asks for a resource no node has."""
        q = np.zeros(len(self.resources), dtype=np.int64)
        for r, v in pod.requests.items():
            if v <= 0:
                continue
            c = self.col.get(r)
            if c is None:
                return None
            q[c] = v
        return q

    def commit(self, placement: Placement, pods: Sequence[PodRequest]) -> None:
        """Charge a placement's pods to ``free`` (traces, multi-group workloads)."""
        by_key = {p.key: p for p in pods}
        for key, node in placement.assignments.items():
            self.free[self.node_pos[node]] -= self.req_vector(by_key[key])

    def release(self, placement: Placement, pods: Sequence[PodRequest]) -> None:
        """Undo :meth:`commit` (a departing workload)."""
        by_key = {p.key: p for p in pods}
        for key, node in placement.assignments.items():
            self.free[self.node_pos[node]] += self.req_vector(by_key[key])

    def shared_depth(self, positions: Sequence[int]) -> int:
        """Deepest depth whose domain holds every node position in ``positions`` (0 = none)."""
        arr = np.asarray(positions, dtype=np.int64)
        for d in range(self.n_depths - 1, 0, -1):
            ids = self.dom[d][arr]
            if (ids == ids[0]).all():
                return d
        return 0

    def shared_depths(self, groups: Sequence[Sequence[int]]) -> list[int]:
        """:meth:`shared_depth` of each group of node positions, in one pass per depth (a gang of
        512 segments is 5 array operations, not 2,560). Raises ValueError for an empty group."""
        if not groups:
            return []
        sizes = np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups))
        if not sizes.all():
            raise ValueError("shared_depths: a group holds no node position")
        flat = np.fromiter((n for g in groups for n in g), dtype=np.int64, count=int(sizes.sum()))
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        out = np.zeros(len(groups), dtype=np.int64)
        found = np.zeros(len(groups), dtype=bool)
        for d in range(self.n_depths - 1, 0, -1):
            ids = self.dom[d][flat]
            same = np.maximum.reduceat(ids, starts) == np.minimum.reduceat(ids, starts)
            out[same & ~found] = d
            found |= same
            if found.all():
                break
        return [int(d) for d in out]

    def display_depth(self, depth: int) -> int:
        """A shared node is reported at the hostname level when the topology's lowest level is it."""
        if depth == self.node_depth and self.levels and self.levels[-1] == HOSTNAME:
            return depth - 1
        return depth
