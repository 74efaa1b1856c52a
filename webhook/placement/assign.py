"""Phase 3 — assign pods inside one workload domain.

A depth-first branch and bound over the **special units** (:mod:`webhook.placement.demand`),
pod by pod; at every leaf the **main segments** are placed by counting, which is exact for
identical pods: with ``T(D)`` main-class slots in a domain ``D``, the most main segments
meeting at depth ``L`` or deeper is ``min(n_main, Σ_D T(D) // S)`` for every ``L`` at once
(fill the deepest domains first; what is left of a domain at depth ``L`` is all its parent
can add). So the search is exact for the objective keys whenever it completes.

Per-search state (:class:`Search`): ``free`` (the domain's nodes, changed as pods are placed
and undone on backtrack), ``main_slots`` per node, ``main_total[L]`` per ``L``-domain and
``main_capacity[L]`` (the sums above, kept up to date in O(levels) per pod), the nodes and
the shared depth of every special unit placed so far, the incumbent (best key and
assignment) and the work budget.

Order of the children (the first leaf is the engine's greedy answer; the rest only prove or
improve it): a pod of a segment goes next to the segment's first pod (deepest shared domain
first); otherwise to the node that costs the main segments the least, deepest level first,
then the tightest node (best fit), then node order. Nodes that are indistinguishable for
the rest of the search (same parent domain, same free capacity, same eligibility) are tried
once. The bound: each unplaced special segment counted at every depth, the main segments at
their current capacity; a branch whose bound is not above the incumbent is cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from webhook.placement.choose import spread_per_segment
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.count import Levels, reduce_ranges
from webhook.placement.demand import SLOT_CAP, Demand, fits, slots
from webhook.placement.model import PodRequest

#: Search steps a domain still gets once the shared budget is spent (enough for the first leaf).
GREEDY_WORK = 256
#: Cost of one search step beyond its per-node work, in node units (Python overhead of a step).
STEP_OVERHEAD = 200
#: Placements (leaves) still evaluated to improve packing once the segment vector reached its
#: bound: packing is not proven by this search (see :func:`webhook.placement.engine.place`).
PACKING_LEAVES = 8


@dataclass
class Budget:
    """Search work left, in node·steps (each search step costs the nodes of its domain).
    ``exhausted`` is set once a search stopped because of it."""

    work: int
    exhausted: bool = False


@dataclass
class SearchResult:
    """Phase 3 result for one workload domain: ``key`` and ``assignment`` (pod key → node
    position in the index) of the best placement found, ``None`` when none; ``complete``:
    the search ended without the budget cutting it (so ``key`` is optimal in the domain)."""

    key: tuple[Any, ...] | None = None
    assignment: dict[str, int] | None = None
    complete: bool = True


def objective_keys(index: ClusterIndex, demand: Demand, levels: Levels, assignment: dict[str, int]) -> tuple[Any, ...]:
    """``(segment vector, -workload packing, -segment packing)`` of a full assignment
    (DESIGN.md §8 order; the workload depth is the caller's). Segment vector: ``n(L)`` for ``L``
    in ``p … r+1``, the segments whose pods share a domain of depth ``L`` or deeper. Workload
    packing: ``wp``-domains used beyond the first, when ``wd < wp``. Segment packing: over the
    segments not meeting at ``p``, the ``p``-domains each uses beyond its first."""
    ladder = levels.ladder
    groups: list[np.ndarray] = []  # node positions of segments, one 2-D array per segment size
    if not demand.pseudo:
        if demand.main:
            groups.append(np.array([[assignment[p.key] for p in pods] for _, pods in demand.main], dtype=np.int64))
        groups += [np.array([[assignment[p.key] for p in unit.pods]], dtype=np.int64)
                   for unit in demand.specials if unit.is_segment]
    depths, spack = [], 0
    for nodes in groups:
        depth = np.zeros(len(nodes), dtype=np.int64)
        for d in range(1, index.n_depths):  # domains nest: the deepest depth where a row agrees
            ids = index.dom[d][nodes]
            depth = np.where((ids == ids[:, :1]).all(axis=1), d, depth)
        depths.append(depth)
        if len(ladder) > 1:
            spread = np.sort(index.dom[levels.p][nodes], axis=1)
            spack += int(((spread[:, 1:] != spread[:, :-1]).sum(axis=1) * (depth < levels.p)).sum())
    every = np.concatenate(depths) if depths else np.zeros(0, dtype=np.int64)
    vector = tuple(int((every >= depth).sum()) for depth in ladder[:-1])
    wpack = 0
    if levels.wd < levels.wp:
        wpack = len(np.unique(index.dom[levels.wp][np.fromiter(assignment.values(), dtype=np.int64)])) - 1
    return vector, -wpack, -spack


class Search:
    """The branch and bound of one workload domain (see the module docstring)."""

    def __init__(self, index: ClusterIndex, demand: Demand, levels: Levels, domain: int,
                 incumbent: tuple[Any, ...] | None, bound: tuple[Any, ...], budget: Budget, first_leaf: bool = False):
        self.index, self.demand, self.levels, self.budget = index, demand, levels, budget
        a, b = index.domain_range(levels.wd, domain)
        self.first, self.size = a, b - a
        self.free = index.free[a:b].copy()
        self.local = [index.dom[d][a:b] - index.dom[d][a] for d in range(index.n_depths)]
        self.local_starts = []
        for d in range(index.n_depths):
            lo, hi = int(index.dom[d][a]), int(index.dom[d][b - 1]) + 1
            self.local_starts.append(index.starts[d][lo:hi] - a)
        self.elig = [c.elig[a:b] for c in demand.classes]
        signature = np.zeros(self.size, dtype=np.int64)
        for e in self.elig:
            signature = (signature * 1_000_003 + e) % (1 << 61)
        self.signature = signature
        self.n_main = len(demand.main)
        self.n_segments = demand.n_segments
        self.S = demand.size
        self.main_q: np.ndarray | None = None
        if demand.main_class is not None:
            mc = demand.classes[demand.main_class]
            self.main_q, self.main_elig = mc.q, self.elig[demand.main_class]
            self.main_cols = np.flatnonzero(mc.q > 0)
            self.main_slots = slots(self.free, mc.q, self.main_elig)
        else:
            self.main_slots = np.zeros(self.size, dtype=np.int64)
        self.main_total = {d: reduce_ranges(self.main_slots, self.local_starts[d]) for d in levels.ladder}
        self.main_capacity = {d: int((t // self.S).sum()) for d, t in self.main_total.items()}
        self.special_main_pods = [sum(1 for c in unit.classes if c == demand.main_class) for unit in demand.specials]
        self.steps = [(u, pod, c) for u, unit in enumerate(demand.specials) for pod, c in zip(unit.pods, unit.classes)]
        self.unit_nodes: list[list[int]] = [[] for _ in demand.specials]
        self.unit_depth = [index.n_depths for _ in demand.specials]  # shared depth so far (n_depths: none placed)
        self.placed: list[int] = []
        self.best_key = incumbent
        self.best: dict[str, int] | None = None
        self.root_bound = bound
        self.wpack_bound = -bound[1]
        self.spread = spread_per_segment(index, demand, levels, domain)
        self.done = False
        self.aborted = False
        self.first_leaf = first_leaf
        # an incumbent at the vector bound already: only PACKING_LEAVES more placements for packing
        self.packing_leaves: int | None = PACKING_LEAVES if incumbent is not None and incumbent[0] >= bound[0] else None

    # -- state changes ------------------------------------------------------------------------
    def _node_main_slots(self, n: int) -> int:
        if self.main_q is None or not self.main_elig[n]:
            return 0
        if len(self.main_cols) == 0:
            return SLOT_CAP
        v = int((self.free[n, self.main_cols] // self.main_q[self.main_cols]).min())
        return max(0, min(v, SLOT_CAP))

    def _apply(self, u: int, c: int, n: int) -> tuple[Any, ...]:
        q = self.demand.classes[c].q
        self.free[n] -= q
        old = int(self.main_slots[n])
        new = self._node_main_slots(n)
        changes = []
        if new != old:
            self.main_slots[n] = new
            for d, total in self.main_total.items():
                dom = int(self.local[d][n])
                before = int(total[dom])
                total[dom] = before - (old - new)
                self.main_capacity[d] += int(total[dom]) // self.S - before // self.S
                changes.append((d, dom, before))
        nodes = self.unit_nodes[u]
        depth_before = self.unit_depth[u]
        if nodes:
            self.unit_depth[u] = min(depth_before, self._shared_with(n, nodes[0]))
        else:
            self.unit_depth[u] = self.index.node_depth
        nodes.append(n)
        return (u, c, n, old, changes, depth_before)

    def _undo(self, record: tuple[Any, ...]) -> None:
        u, c, n, old, changes, depth_before = record
        self.free[n] += self.demand.classes[c].q
        if changes:
            for d, dom, before in reversed(changes):
                total = self.main_total[d]
                self.main_capacity[d] += before // self.S - int(total[dom]) // self.S
                total[dom] = before
            self.main_slots[n] = old
        self.unit_nodes[u].pop()
        self.unit_depth[u] = depth_before

    def _shared_with(self, n: int, anchor: int) -> int:
        for d in range(self.index.node_depth, 0, -1):
            if self.local[d][n] == self.local[d][anchor]:
                return d
        return 0

    # -- bound ---------------------------------------------------------------------------------
    def bound(self) -> tuple[Any, ...] | None:
        """Upper bound of the keys below this search node; ``None`` when the main segments no
        longer fit at the segment required depth. ``n(L)`` is at most the started special
        segments already sharing depth ``L`` plus, for the rest, both the count bound (main
        segments by capacity, every unstarted special counted) and the room bound (each
        ``L``-domain holding as many of the remaining segments as its main-class slots allow,
        smallest first)."""
        if self.main_capacity.get(self.levels.r, 0) < self.n_main:
            return None
        started, sizes = [], [self.S] * self.n_main
        for u, unit in enumerate(self.demand.specials):
            if not unit.is_segment:
                continue
            if self.unit_nodes[u]:
                started.append(self.unit_depth[u])
            else:
                sizes.append(self.special_main_pods[u])
        unstarted = len(sizes) - self.n_main
        cumulative = np.cumsum(sorted(sizes)) if sizes else np.zeros(0, dtype=np.int64)
        vector = []
        for depth in self.levels.ladder[:-1]:
            by_count = min(self.n_main, self.main_capacity[depth]) + unstarted
            by_room = int(np.searchsorted(cumulative, self.main_total[depth], side="right").sum()) if sizes else 0
            met = sum(1 for d in started if d >= depth)
            vector.append(min(self.n_segments, met + min(by_count, by_room)))
        spack = (self.n_segments - vector[0]) * self.spread if vector else 0
        return tuple(vector), -self.wpack_bound, -spack

    # -- children ------------------------------------------------------------------------------
    def children(self, i: int) -> list[int]:
        u, pod, c = self.steps[i]
        unit = self.demand.specials[u]
        cls = self.demand.classes[c]
        mask = self.elig[c] & fits(self.free, cls.q)
        nodes = self.unit_nodes[u]
        anchor = nodes[0] if (unit.is_segment and nodes) else None
        if anchor is not None and self.levels.r > self.levels.wd:
            mask &= self.local[self.levels.r] == self.local[self.levels.r][anchor]
        if i > 0 and self.steps[i - 1][0] == u and self.steps[i - 1][2] == c:
            mask[: nodes[-1]] = False  # identical pods of one unit: nodes in non-decreasing order
        idx = np.flatnonzero(mask)
        if len(idx) <= 1:
            few: list[int] = idx.tolist()
            return few
        keys: list[np.ndarray] = [idx]
        after = self.free[idx] - cls.q
        keys.append(slots(after, cls.q, self.elig[c][idx]))  # tightest first (best fit)
        if self.levels.wd < self.levels.wp:  # packing: wp-domains already used, then the roomiest
            wp_local = self.local[self.levels.wp]
            wp_dom = wp_local[idx]
            d = max(self.levels.r, self.levels.wp) if self.levels.r >= self.levels.wp else None
            if d is not None and d in self.main_total:  # the measure phase 3's main placement ranks wp-domains by
                owner = wp_local[self.local_starts[d]]
                keys.append(-np.bincount(owner, weights=(self.main_total[d] // self.S).astype(np.float64))[wp_dom])
            else:
                keys.append(-reduce_ranges(self.main_slots, self.local_starts[self.levels.wp])[wp_dom])
            used = [wp_local[n] for nodes_of in self.unit_nodes for n in nodes_of]
            keys.append(~np.isin(wp_dom, used) if used else np.zeros(len(idx), dtype=bool))
        if self.main_q is not None:
            new = slots(after, self.main_q, self.main_elig[idx])
            delta = self.main_slots[idx] - new
            for d in reversed(self.levels.ladder):  # shallowest first: the deepest loss is the primary key
                total = self.main_total[d][self.local[d][idx]]
                keys.append(total // self.S - (total - delta) // self.S)
        if anchor is not None:
            shared = np.zeros(len(idx), dtype=np.int64)
            for d in range(1, self.index.n_depths):
                shared = np.where(self.local[d][idx] == self.local[d][anchor], d, shared)
            keys.append(-shared)
        elif unit.is_segment and len(unit.pods) > 1:
            rest = sum(1 for cc in unit.classes if cc == c)
            keys.append(-np.minimum(slots(self.free[idx], cls.q, self.elig[c][idx]), rest))
        order = idx[np.lexsort(keys)]
        here = np.isin(order, nodes) if nodes else np.zeros(len(order), dtype=bool)
        rows = np.column_stack([self.local[self.index.node_depth - 1][order], self.signature[order], here,
                                self.free[order]])
        _, first = np.unique(rows, axis=0, return_index=True)
        children: list[int] = order[np.sort(first)].tolist()
        return children

    # -- search --------------------------------------------------------------------------------
    def run(self) -> SearchResult:
        self._dfs(0)
        if self.best is None:
            return SearchResult(None, None, not self.aborted)
        return SearchResult(self.best_key, self.best, not self.aborted)

    def _dfs(self, i: int) -> None:
        if self.budget.work <= 0:
            self.aborted = self.budget.exhausted = self.done = True
            return
        self.budget.work -= self.size + STEP_OVERHEAD
        bound = self.bound()
        if bound is None or (self.best_key is not None and bound <= self.best_key):
            return
        if i == len(self.steps):
            self._leaf(bound)
            return
        u, _, c = self.steps[i]
        for n in self.children(i):
            record = self._apply(u, c, n)
            self._dfs(i + 1)
            self._undo(record)
            if self.done:
                return

    def _leaf(self, bound: tuple[Any, ...]) -> None:
        if self.packing_leaves is not None:
            self.packing_leaves -= 1
            if self.packing_leaves < 0:
                self.done = True  # the vector is at its bound; packing had PACKING_LEAVES more tries
                return
        self.budget.work -= self.size + len(self.demand.main) * self.S  # main segments placed and scored
        assignment = {}
        for u, unit in enumerate(self.demand.specials):
            for pod, n in zip(unit.pods, self.unit_nodes[u]):
                assignment[pod.key] = self.first + n
        main = place_main_segments(self.main_slots, list(self.demand.main), self.levels, self.S, self.local,
                                   self.local_starts, self.unit_nodes, self.first)
        if main is None:
            return
        assignment.update(main)
        key = objective_keys(self.index, self.demand, self.levels, assignment)
        if self.best_key is None or key > self.best_key:
            self.best_key, self.best = key, assignment
            if key >= self.root_bound or self.first_leaf:
                self.done = True
            elif key[0] == self.root_bound[0] and self.packing_leaves is None:
                self.packing_leaves = PACKING_LEAVES



def assign_pods(index: ClusterIndex, demand: Demand, levels: Levels, domain: int, bound: tuple[Any, ...],
                incumbent: tuple[Any, ...] | None, budget: Budget, *, first_leaf: bool = False) -> SearchResult:
    """Phase 3 for one workload domain: the best placement whose keys beat ``incumbent``
    (``None``: any placement), searched as the module docstring says, within ``budget``.
    ``first_leaf``: stop at the first placement found (the greedy answer; ``complete`` is then
    ``False`` unless it meets ``bound``). Once the shared budget is spent, a domain still gets
    :data:`GREEDY_WORK` steps for its greedy answer."""
    first, end = index.domain_range(levels.wd, domain)
    shared = budget
    if budget.exhausted or first_leaf:  # a greedy answer: at most GREEDY_WORK steps, charged to the budget
        budget = Budget(work=GREEDY_WORK * (end - first + STEP_OVERHEAD))
    start = budget.work
    search = Search(index, demand, levels, domain, incumbent, bound, budget, first_leaf)
    outcome = search.run()
    if budget is not shared:
        shared.work -= start - budget.work
    if first_leaf and not (outcome.key is not None and outcome.key >= bound):
        outcome.complete = False
    return outcome


def place_main_segments(slots_now: np.ndarray, need: list[tuple[tuple[int, int], list[PodRequest]]], levels: Levels,
                        S: int, local: list[np.ndarray], local_starts: list[np.ndarray], used: list[list[int]],
                        first: int) -> dict[str, int] | None:
    """Main segments on what the special units left: deepest depth first; at each depth the
    domains that take the most of the remaining segments, then the tightest; inside a domain
    nodes grouped by preferred-level domain (fewest domains per segment), most slots first.

    ``slots_now``: main-class slots per node of the workload domain (:attr:`Search.main_slots`),
    ``need``: the main segments (:attr:`Demand.main`, consumed), ``S`` the segment size, ``local`` /
    ``local_starts``: the domain's per-depth domain ids and starts (:class:`Search`), ``used``: the
    nodes the special units took (their wp-domains are packed first), ``first``: the domain's
    first node. Returns pod key -> node, or ``None`` when the segments do not all fit."""
    s = slots_now.copy()
    out: dict[str, int] = {}
    packing = levels.wd < levels.wp
    touched = set()
    if packing:
        wp_local = local[levels.wp]
        touched = {int(wp_local[n]) for nodes in used for n in nodes}
    for depth in levels.ladder:
        if not need:
            break
        starts = local_starts[depth]
        total = reduce_ranges(s, starts)
        room = total // S
        cand = np.flatnonzero(room > 0)
        if len(cand) == 0:
            continue
        take = np.minimum(room[cand], len(need))
        keys = [cand, total[cand] - take * S, -take]
        if packing and levels.wp <= depth:  # wp-domains already used, then those holding the most segments here
            owner = local[levels.wp][starts]
            wp_room = np.bincount(owner, weights=room.astype(np.float64))
            wp_dom = owner[cand]
            keys += [wp_dom, -wp_room[wp_dom], ~np.isin(wp_dom, list(touched))]  # one wp-domain at a time
        ranked = cand[np.lexsort(keys)]
        room_ranked = room[ranked]
        before = np.cumsum(room_ranked) - room_ranked
        segments = np.clip(len(need) - before, 0, room_ranked)  # segments each domain takes, in rank order
        chosen = segments > 0
        ranked, segments = ranked[chosen], segments[chosen]
        # the nodes of the chosen domains, domain by domain in rank order, best node first inside
        rank_of = np.full(len(starts), len(ranked), dtype=np.int64)
        rank_of[ranked] = np.arange(len(ranked))
        dom_of = local[depth]
        nodes = np.flatnonzero(rank_of[dom_of] < len(ranked))
        node_keys = [nodes, -s[nodes]]
        if levels.p > depth:
            p_dom = local[levels.p][nodes]
            p_cap = reduce_ranges(s, local_starts[levels.p])[p_dom]
            node_keys += [p_dom, -p_cap]
        if packing and levels.wp > depth:
            wp_dom = local[levels.wp][nodes]
            wp_cap = reduce_ranges(s, local_starts[levels.wp])[wp_dom]
            node_keys += [wp_dom, -wp_cap, ~np.isin(wp_dom, list(touched))]
        node_keys.append(rank_of[dom_of[nodes]])
        order = nodes[np.lexsort(node_keys)]
        room_in = s[order]
        group = rank_of[dom_of[order]]
        cumulative = np.cumsum(room_in)
        group_start = np.r_[0, np.flatnonzero(group[1:] != group[:-1]) + 1]
        offset = np.repeat(cumulative[group_start] - room_in[group_start], np.diff(np.r_[group_start, len(order)]))
        wanted = (segments * S)[group]
        take = np.clip(wanted - (cumulative - offset - room_in), 0, room_in)
        s[order] -= take
        sequence = (np.repeat(order, take) + first).tolist()
        if packing:
            touched.update(local[levels.wp][order[take > 0]].tolist())
        placed = int(segments.sum())
        for j in range(placed):
            _, pods = need[j]
            for p, n in zip(pods, sequence[j * S:(j + 1) * S]):
                out[p.key] = n
        del need[:placed]
    if need:
        return None
    return out
