"""The placement engine (DESIGN.md §8): place one gang of pods on a cluster snapshot.

Depths. A topology with levels ``l1 … lk`` (broadest first) gives ``k + 2`` depths: 0 is the
whole cluster (one domain), ``1 … k`` the topology levels, ``k + 1`` the node itself (the
implicit lowest domain, DESIGN.md §8). Nodes are sorted by their label path then name, so every
domain is a contiguous range of nodes and domain ids ascend with domain names (the deterministic
tie-break).

Objective, in order (DESIGN.md §8; the precise definition of "most segments at their lowest
levels" is this project's, documented in README.md ("Placement engine")):

1. every required constraint (workload: all pods in one domain of the required level; segment:
   all pods of one segment in one domain of the segment required level) and every node's capacity;
2. the workload at the deepest level between its preferred and required levels;
3. the segment vector, maximised lexicographically: ``(n(p), n(p-1), …, n(r+1))`` where ``n(L)``
   is the number of segments whose pods share a domain of depth ``>= L``, ``p``/``r`` the segment
   preferred/required depths;
4. best fit: the least free capacity (in worker slots) left in the chosen workload domain; at each
   segment level, segments go first to the domains that can take the most of the remaining
   segments, then to the tightest (fewest free slots left over); a single extra pod goes where it
   costs the fewest segment slots;
5. domain name order.

Method (complete for identical worker pods, see README.md ("Placement engine")): per node, ``slots`` = how many
worker pods fit (min over resources of free // request); a domain of depth L holds
``floor(sum(slots) / S)`` segments of S pods at level L, since segments may share nodes; the
number of segments a workload domain W can hold at level L is the sum of that over the
L-domains in W. Segments are then placed greedily, deepest level first, which is
lexicographically optimal for identical pods. One extra pod (PyTorchJob Master, LWS leader under
LeaderExcluded) is placed exactly by evaluating, for every node, how much its presence lowers
those counts; further extra pods, partial last segments and heterogeneous segments are placed by
a greedy pass with branch-and-bound over workload domains, and the result is always verified.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from webhook.core.topology import Topology
from webhook.placement.snapshot import Node

HOSTNAME = "kubernetes.io/hostname"
#: Workload domains fully evaluated per workload level before taking the best found.
MAX_ATTEMPTS = 64


class PlacementError(ValueError):
    """The gang itself is malformed for placement (e.g. a level the topology does not have)."""


@dataclass(frozen=True)
class PodRequest:
    """One pod to place.

    ``key``: ``"<namespace>/<name>"``. ``requests``: integer milli-units per resource, including
    ``pods: 1000``. ``segment``: ``(group, index)`` for a segment pod (group is the LWS replica,
    0 otherwise), ``None`` for a pod outside segments (PyTorchJob Master, LWS leader under
    LeaderExcluded, any pod of an unsegmented workload). ``tolerations`` / ``node_selector``:
    from the PodSpec, used to exclude nodes the pod cannot go to.
    """

    key: str
    requests: Mapping[str, int]
    segment: tuple[int, int] | None = None
    subgroup: str | None = None
    tolerations: tuple = ()
    node_selector: tuple = ()


@dataclass
class Gang:
    """All pods that must be placed together, and the placement keys (label keys or ``None``)."""

    pods: list[PodRequest]
    workload_required: str | None = None
    workload_preferred: str | None = None
    segment_required: str | None = None
    segment_preferred: str | None = None
    name: str = ""


@dataclass
class SegmentResult:
    """Where one segment went: the deepest domain shared by its pods, and its level (label key,
    ``"node"`` for the implicit node level, ``"cluster"`` for none)."""

    group: int
    index: int
    domain: str
    level: str
    depth: int
    pods: list[str]


@dataclass
class Placement:
    """The engine's answer. ``assignments``: pod key → node name (empty when not placed).
    ``workload_level``/``workload_domain``: the deepest level all pods share.
    ``reason``: why not placed (per level), ``None`` when placed.
    ``objective``: ``(workload depth, segment vector)`` as defined in the module docstring."""

    placed: bool
    assignments: dict[str, str] = field(default_factory=dict)
    segments: list[SegmentResult] = field(default_factory=list)
    workload_domain: str | None = None
    workload_level: str | None = None
    workload_depth: int | None = None
    reason: str | None = None
    objective: tuple = ()


def _tolerates(tolerations: Sequence[Mapping], taint: tuple[str, str, str]) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint``: empty key + Exists matches every taint; an empty
    effect matches every effect; operator defaults to Equal."""
    key, value, effect = taint
    for t in tolerations:
        t = dict(t)
        if t.get("effect") and t.get("effect") != effect:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") != key:
            continue
        if op == "Exists" or str(t.get("value") or "") == value:
            return True
    return False


class ClusterIndex:
    """The snapshot's nodes of one topology, as arrays the engine works on.

    ``nodes``: :class:`Node` objects; nodes missing a level label are outside the topology and
    dropped (counted in ``outside``). ``free``: ``(n_nodes, n_resources)`` int64 milli-units,
    mutable (``commit``/``release`` change it). Build cost is O(n · levels) Python; placement
    itself is vectorised.
    """

    def __init__(self, nodes: Iterable[Node], topology: Topology | None, extra_resources: Iterable[str] = ()):
        self.topology = topology
        self.levels: tuple[str, ...] = topology.levels if topology else ()
        k = len(self.levels)
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
        N = len(inside)
        self.n = N
        self.node_depth = k + 1
        self.n_depths = k + 2
        resources = sorted({r for n in inside for r in n.allocatable} | {r for n in inside for r in n.free} | set(extra_resources) | {"pods"})
        self.resources = resources
        self.col = {r: i for i, r in enumerate(resources)}
        self.free = np.zeros((N, len(resources)), dtype=np.int64)
        self.alloc = np.zeros((N, len(resources)), dtype=np.int64)
        for i, n in enumerate(inside):
            for r, v in n.free.items():
                self.free[i, self.col[r]] = v
            for r, v in n.allocatable.items():
                self.alloc[i, self.col[r]] = v
        self.base_ok = np.array([n.ready and not n.unschedulable for n in inside], dtype=bool)
        sigs: dict[tuple, int] = {}
        self.taint_sig = np.array([sigs.setdefault(n.taints, len(sigs)) for n in inside], dtype=np.int32)
        self.taint_sigs = list(sigs)
        # domains per depth: ids, start offsets, display names, full paths
        self.dom: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.names: list[list[str]] = []
        for d in range(self.n_depths):
            if d == 0:
                ids = np.zeros(N, dtype=np.int64)
                names = ["cluster"]
            elif d == self.node_depth:
                ids = np.arange(N, dtype=np.int64)
                names = list(self.node_names)
            else:
                ids = np.zeros(N, dtype=np.int64)
                names = []
                prev = None
                cur = -1
                for i, n in enumerate(inside):
                    path = tuple(n.labels[lv] for lv in self.levels[:d])
                    if path != prev:
                        cur += 1
                        names.append(path[-1])
                        prev = path
                    ids[i] = cur
            self.dom.append(ids)
            if N:
                st = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
            else:
                st = np.zeros(0, dtype=np.int64)
            self.starts.append(st.astype(np.int64))
            self.names.append(names if N else [])
        self._elig_cache: dict[tuple, np.ndarray] = {}

    # -- helpers ------------------------------------------------------------------------------
    def depth_of(self, level: str | None) -> int | None:
        """Depth of a level label key (1 = broadest), ``None`` for ``None``.
        Raises :class:`PlacementError` for a key the topology does not have."""
        if level is None:
            return None
        if level not in self.levels:
            raise PlacementError(f"level {level!r} is not a level of topology "
                                 f"{self.topology.name if self.topology else '(none)'}; levels: {list(self.levels)}")
        return self.levels.index(level) + 1

    def level_name(self, depth: int) -> str:
        """Label key of a depth; ``"cluster"`` for 0, ``"node"`` for the implicit node depth."""
        if depth == 0:
            return "cluster"
        if depth == self.node_depth:
            return "node"
        return self.levels[depth - 1]

    def eligible(self, pod: PodRequest) -> np.ndarray:
        """Nodes the pod may go to: Ready, schedulable, every NoSchedule/NoExecute taint
        tolerated, ``nodeSelector`` matched (Kubernetes scheduler filters)."""
        key = (pod.tolerations, pod.node_selector)
        m = self._elig_cache.get(key)
        if m is None:
            ok_sig = np.array([all(_tolerates(pod.tolerations, t) for t in sig) for sig in self.taint_sigs] or [True], dtype=bool)
            m = self.base_ok & ok_sig[self.taint_sig] if self.n else self.base_ok.copy()
            if pod.node_selector:
                sel = dict(pod.node_selector)
                m = m & np.array([all(n.labels.get(k) == v for k, v in sel.items()) for n in self.nodes], dtype=bool)
            self._elig_cache[key] = m
        return m

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
        """Charge a placement's pods to ``free`` (used by traces and multi-group workloads)."""
        by_key = {p.key: p for p in pods}
        for key, node in placement.assignments.items():
            q = self.req_vector(by_key[key])
            self.free[self.node_pos[node]] -= q

    def release(self, placement: Placement, pods: Sequence[PodRequest]) -> None:
        """Undo :meth:`commit` (a departing workload)."""
        by_key = {p.key: p for p in pods}
        for key, node in placement.assignments.items():
            q = self.req_vector(by_key[key])
            self.free[self.node_pos[node]] += q


#: Most worker slots counted per node: far above any gang, small enough that a sum over 2**20 nodes
#: fits in int64 (a node reporting ``nvidia.com/gpu: 1e30`` would otherwise overflow the sums).
_SLOT_CAP = 1 << 40


def _slots(free: np.ndarray, q: np.ndarray, elig: np.ndarray) -> np.ndarray:
    """Pods of request ``q`` that fit on each row of ``free`` (0 where not eligible), at most
    :data:`_SLOT_CAP` per node so sums over many nodes with huge allocatable stay within int64."""
    cols = np.flatnonzero(q > 0)
    if len(cols) == 0:
        s = np.full(free.shape[0], _SLOT_CAP, dtype=np.int64)
    else:
        s = np.minimum((free[:, cols] // q[cols]).min(axis=1), _SLOT_CAP)
    s = np.maximum(s, 0)
    return np.where(elig, s, 0)


def _fits(free: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Rows of ``free`` where one pod of request ``q`` fits; only requested resources are checked
    (an over-committed resource the pod does not ask for does not block it, as in the scheduler)."""
    cols = np.flatnonzero(q > 0)
    if len(cols) == 0:
        return np.ones(free.shape[0], dtype=bool)
    return (free[:, cols] >= q[cols]).all(axis=1)


def _signature(p: PodRequest) -> tuple:
    return (tuple(sorted(p.requests.items())), p.tolerations, p.node_selector)


@dataclass
class _Plan:
    """The gang split into main segments (identical pods, size S), special segments and loose pods."""

    main: list[tuple[tuple[int, int], list[PodRequest]]]
    S: int
    q: np.ndarray | None
    main_proto: PodRequest | None
    special: list[tuple[tuple[int, int], list[PodRequest]]]
    loose: list[PodRequest]
    pseudo: bool  # main "segments" are size-1 units of an unsegmented workload


def _split(gang: Gang, index: ClusterIndex) -> _Plan:
    segs: dict[tuple[int, int], list[PodRequest]] = {}
    loose: list[PodRequest] = []
    for p in gang.pods:
        if p.segment is None:
            loose.append(p)
        else:
            segs.setdefault(p.segment, []).append(p)
    if segs:
        sizes = Counter(len(v) for v in segs.values())
        S = max(sizes, key=lambda s: (sizes[s] * s, s))
        classes = Counter(_signature(p) for v in segs.values() if len(v) == S for p in v)
        main_sig = max(classes, key=lambda c: (classes[c], c))
        main, special = [], []
        for sid in sorted(segs):
            pods = segs[sid]
            if len(pods) == S and all(_signature(p) == main_sig for p in pods):
                main.append((sid, pods))
            else:
                special.append((sid, pods))
        proto = main[0][1][0] if main else None
        pseudo = False
    else:
        classes = Counter(_signature(p) for p in loose)
        main, special, proto, S, pseudo = [], [], None, 1, True
        if classes:
            main_sig = max(classes, key=lambda c: (classes[c], c))
            rest = []
            for p in loose:
                if _signature(p) == main_sig:
                    main.append(((0, len(main)), [p]))
                else:
                    rest.append(p)
            loose = rest
            proto = main[0][1][0]
    q = index.req_vector(proto) if proto is not None else None
    return _Plan(main=main, S=S, q=q, main_proto=proto, special=special, loose=loose, pseudo=pseudo)


def _reduce(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(values, starts)


def _local_starts(ids: np.ndarray) -> np.ndarray:
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])


class _Failure(Exception):
    pass


def place(index: ClusterIndex, gang: Gang) -> Placement:
    """Place one gang on the cluster ``index`` (its ``free`` is not changed; see
    :meth:`ClusterIndex.commit`).

    Returns a :class:`Placement`: ``placed=True`` with every pod assigned, or ``placed=False``
    with no assignment and a ``reason`` that names, per workload level tried, the number of
    domains, how many segments fit in the best one and the binding resource (DESIGN.md §8).
    Raises :class:`PlacementError` when a level key is not in the topology.
    Never breaks a required constraint or a node's capacity: the result is verified.
    """
    if not gang.pods:
        return Placement(placed=True, reason=None, objective=(0, ()))
    wr = index.depth_of(gang.workload_required) or 0
    wp = index.depth_of(gang.workload_preferred)
    wp = wr if wp is None else max(wp, wr)
    sr = index.depth_of(gang.segment_required) or 0
    sp = index.depth_of(gang.segment_preferred)
    sp = sr if sp is None else max(sp, sr)
    plan = _split(gang, index)
    if plan.pseudo:
        sr = sp = 0
    reasons = []
    if index.n == 0:
        return Placement(placed=False, reason=f"no node carries every level label of topology "
                         f"{index.topology.name if index.topology else '(none)'} ({index.outside} nodes outside)")
    for p in gang.pods:
        if index.req_vector(p) is None:
            missing = [r for r, v in p.requests.items() if v > 0 and r not in index.col]
            return Placement(placed=False, reason=f"pod {p.key} requests {missing[0]}, which no node in the topology has")
    for wd in range(wp, wr - 1, -1):
        result, why = _place_at(index, gang, plan, wd, sr, sp)
        if result is not None:
            result.objective = (wd,) + result.objective
            return result
        reasons.append(why)
    return Placement(placed=False, reason="; ".join(reasons))


def _place_at(index: ClusterIndex, gang: Gang, plan: _Plan, wd: int, sr: int, sp: int):
    """Try every workload domain of depth ``wd``; returns ``(Placement | None, reason)``."""
    S = plan.S
    nmain = len(plan.main)
    nspecial = len(plan.special)
    r_eff, p_eff = max(sr, wd), max(sp, wd)
    Ls = list(range(p_eff, r_eff - 1, -1))  # deepest first
    startsW = index.starts[wd]
    nW = len(startsW)
    Wof = index.dom[wd]
    if nmain:
        elig_main = index.eligible(plan.main_proto)
        s = _slots(index.free, plan.q, elig_main)
        slotsW = _reduce(s, startsW)
        caps, aggs, cs = [], [], []
        for L in Ls:
            if L <= wd:
                agg = slotsW
                c = agg // S
                capW = c
            else:
                agg = _reduce(s, index.starts[L])
                c = agg // S
                capW = _reduce(c, index.dom[L][startsW])
            caps.append(capW)
            aggs.append(agg)
            cs.append(c)
    else:
        s = np.zeros(index.n, dtype=np.int64)
        slotsW = _reduce(s, startsW)
        caps = [np.zeros(nW, dtype=np.int64) for _ in Ls]
    first_loose = plan.loose[0] if plan.loose else None
    if first_loose is not None:
        ql = index.req_vector(first_loose)
        fits = index.eligible(first_loose) & _fits(index.free, ql)
        if nmain:
            s2 = _slots(index.free - ql, plan.q, elig_main)
            delta = np.where(fits, s - s2, 0)
            vn = []
            for i, L in enumerate(Ls):
                if L <= wd:
                    dn = Wof
                else:
                    dn = index.dom[L]
                agg, c = aggs[i], cs[i]
                loss = c[dn] - (agg[dn] - delta) // S
                vn.append(np.minimum(nmain, caps[i][Wof] - loss))
                if i == 0:
                    loss_deep = loss
            feas_n = fits & (vn[-1] >= nmain)
            leftover_n = slotsW[Wof] - delta - nmain * S
        else:
            delta = np.zeros(index.n, dtype=np.int64)
            loss_deep = delta
            vn = [np.zeros(index.n, dtype=np.int64) for _ in Ls]
            feas_n = fits
            leftover_n = slotsW[Wof]
        # best node per W: lexsort keys, last key is primary
        keys = [np.arange(index.n), delta, leftover_n, loss_deep] + [-v for v in reversed(vn[:-1])] + [~feas_n, Wof]
        order = np.lexsort(keys)
        Ws_sorted = Wof[order]
        firsts = order[np.r_[True, Ws_sorted[1:] != Ws_sorted[:-1]]]
        bestW = np.full(nW, -1, dtype=np.int64)
        bestW[Wof[firsts]] = firsts
        has = bestW >= 0
        feasW = np.zeros(nW, dtype=bool)
        feasW[has] = feas_n[bestW[has]]
        vecW = [np.where(has, v[np.maximum(bestW, 0)], 0) for v in vn]
        leftW = np.where(has, leftover_n[np.maximum(bestW, 0)], 0)
    else:
        vecW = [np.minimum(nmain, c) for c in caps]
        feasW = (caps[-1] >= nmain) if nmain else np.ones(nW, dtype=bool)
        leftW = slotsW - nmain * S
    feas_idx = np.flatnonzero(feasW)
    if len(feas_idx) == 0:
        return None, _why(index, plan, wd, Ls, vecW if first_loose is not None else caps, slotsW, first_loose)
    keys = [feas_idx, leftW[feas_idx]] + [-(v[feas_idx]) for v in reversed(vecW[:-1])]
    ranked = feas_idx[np.lexsort(keys)]
    best = None
    attempts = 0
    for j in ranked:
        bound = tuple(int(v[j]) + nspecial for v in vecW[:-1])
        if best is not None and best[0] >= bound:
            break
        attempts += 1
        if attempts > MAX_ATTEMPTS:
            break
        res = _attempt(index, gang, plan, wd, int(j), Ls)
        if res is None:
            continue
        vec, left, assign = res
        if best is None or (vec, -left) > (best[0], -best[1]):
            best = (vec, left, assign, int(j))
    if best is None:
        return None, _why(index, plan, wd, Ls, vecW if first_loose is not None else caps, slotsW, first_loose,
                          attempted=attempts)
    vec, left, assign, j = best
    return _result(index, gang, plan, assign, vec), ""


def _attempt(index: ClusterIndex, gang: Gang, plan: _Plan, wd: int, j: int, Ls: list[int]):
    """Full placement inside workload domain ``j`` of depth ``wd``: loose pods, then special
    segments, then main segments greedily (deepest level first, tightest domains first)."""
    a = int(index.starts[wd][j])
    b = int(index.starts[wd][j + 1]) if j + 1 < len(index.starts[wd]) else index.n
    free = index.free[a:b].copy()
    m = b - a
    S = plan.S
    assign: dict[str, int] = {}
    doms = [index.dom[L][a:b] for L in Ls]
    loc_starts = [_local_starts(dd) if L > wd else np.zeros(1, dtype=np.int64) for dd, L in zip(doms, Ls)]
    elig_main = index.eligible(plan.main_proto)[a:b] if plan.main else None
    nmain = len(plan.main)
    # 1. loose pods: exact best node by the loss in main-segment counts
    for p in plan.loose:
        ql = index.req_vector(p)
        fits = index.eligible(p)[a:b] & _fits(free, ql)
        if not fits.any():
            return None
        if nmain:
            s = _slots(free, plan.q, elig_main)
            s2 = _slots(free - ql, plan.q, elig_main)
            delta = np.where(fits, s - s2, 0)
            keys = [np.arange(m), delta]
            capped = []
            for L, st in zip(reversed(Ls), reversed(loc_starts)):
                agg = _reduce(s, st)
                ids = np.repeat(np.arange(len(st)), np.diff(np.r_[st, m]))
                c = agg // S
                loss = c[ids] - (agg[ids] - delta) // S
                capped.append(-np.minimum(nmain, int(c.sum()) - loss))
            keys.append(loss)  # uncapped loss at the deepest level: keep whole segments intact
            keys.extend(capped)
            keys.append(~fits)
            n = int(np.lexsort(keys)[0])
        else:
            own = _slots(free, ql, index.eligible(p)[a:b])
            n = int(np.lexsort([np.arange(m), own, ~fits])[0])
        free[n] -= ql
        assign[p.key] = n
    # 2. special segments (partial, heterogeneous): first domain, deepest level first, that fits
    for sid, pods in sorted(plan.special, key=lambda x: -len(x[1])):
        placed = False
        qs = [(index.req_vector(p), index.eligible(p)[a:b], p) for p in pods]
        qs.sort(key=lambda t: tuple(-t[0]))
        for L, dd, st in zip(Ls, doms, loc_starts):
            ends = np.r_[st[1:], m]
            sm = _slots(free, plan.q, elig_main) if nmain else np.zeros(m, dtype=np.int64)
            agg = _reduce(sm, st)
            for d in np.lexsort([np.arange(len(st)), agg]):
                u, v = int(st[d]), int(ends[d])
                trial = free[u:v].copy()
                local = {}
                ok = True
                for q, el, p in qs:
                    fit = el[u:v] & _fits(trial, q)
                    if not fit.any():
                        ok = False
                        break
                    n = int(np.flatnonzero(fit)[0])
                    trial[n] -= q
                    local[p.key] = u + n
                if ok:
                    free[u:v] = trial
                    assign.update(local)
                    placed = True
                    break
            if placed:
                break
        if not placed:
            return None
    # 3. main segments, deepest level first
    need = list(plan.main)
    q = plan.q
    for L, dd, st in zip(Ls, doms, loc_starts):
        if not need:
            break
        s = _slots(free, q, elig_main)
        ends = np.r_[st[1:], m]
        agg = _reduce(s, st)
        c = agg // S
        cand = np.flatnonzero(c > 0)
        if len(cand) == 0:
            continue
        # domains that absorb most of the remaining segments first, then the tightest fit
        take = np.minimum(c[cand], len(need))
        order = cand[np.lexsort([cand, agg[cand] - take * S, -take])]
        for d in order:
            if not need:
                break
            u, v = int(st[d]), int(ends[d])
            take = min(int(c[d]), len(need))
            sl = s[u:v].copy()
            node_order = np.lexsort([np.arange(v - u), -sl])
            ptr = 0
            for _ in range(take):
                sid, pods = need.pop(0)
                k = 0
                while k < S:
                    while sl[node_order[ptr]] == 0:
                        ptr += 1
                    nn = int(node_order[ptr])
                    cnt = min(int(sl[nn]), S - k)
                    for p in pods[k:k + cnt]:
                        assign[p.key] = u + nn
                    free[u + nn] -= q * cnt
                    sl[nn] -= cnt
                    k += cnt
    if need:
        return None
    # 4. verify capacity on every touched node for every requested resource
    touched = np.array(sorted(set(assign.values())), dtype=np.int64)
    used_cols = np.zeros(free.shape[1], dtype=bool)
    for req in {tuple(sorted(p.requests.items())) for p in gang.pods}:
        used_cols |= index.req_vector(PodRequest("", dict(req))) > 0
    if len(touched) and (free[np.ix_(touched, np.flatnonzero(used_cols))] < 0).any():
        raise AssertionError("placement engine broke a node's capacity (bug)")
    glob = {k: a + v for k, v in assign.items()}
    vec = _segment_vector(index, plan, glob, Ls)
    left = int(_slots(free, q, elig_main).sum()) if nmain else 0
    return vec, left, glob


def _shared_depth(index: ClusterIndex, nodes: Sequence[int]) -> int:
    arr = np.asarray(nodes, dtype=np.int64)
    for d in range(index.n_depths - 1, 0, -1):
        ids = index.dom[d][arr]
        if (ids == ids[0]).all():
            return d
    return 0


def _segment_vector(index: ClusterIndex, plan: _Plan, assign: Mapping[str, int], Ls: list[int]) -> tuple:
    if plan.pseudo:
        return tuple(0 for _ in Ls[:-1])
    depths = []
    for sid, pods in plan.main + plan.special:
        depths.append(_shared_depth(index, [assign[p.key] for p in pods]))
    return tuple(sum(1 for d in depths if d >= L) for L in Ls[:-1])


def _display_depth(index: ClusterIndex, d: int) -> int:
    # a shared node is reported as the hostname level when the topology's lowest level is it
    if d == index.node_depth and index.levels and index.levels[-1] == HOSTNAME:
        return d - 1
    return d


def _result(index: ClusterIndex, gang: Gang, plan: _Plan, assign: Mapping[str, int], vec: tuple) -> Placement:
    assignments = {p.key: index.node_names[assign[p.key]] for p in gang.pods}
    segments = []
    if not plan.pseudo:
        for sid, pods in sorted(plan.main + plan.special):
            nodes = [assign[p.key] for p in pods]
            d = _display_depth(index, _shared_depth(index, nodes))
            dom_id = int(index.dom[d][nodes[0]])
            segments.append(SegmentResult(group=sid[0], index=sid[1], domain=index.names[d][dom_id],
                                          level=index.level_name(d), depth=d, pods=[p.key for p in pods]))
    all_nodes = list(assign.values())
    wd = _display_depth(index, _shared_depth(index, all_nodes))
    return Placement(placed=True, assignments=assignments, segments=segments,
                     workload_domain=index.names[wd][int(index.dom[wd][all_nodes[0]])],
                     workload_level=index.level_name(wd), workload_depth=wd, objective=(vec,))


def _binding_resource(index: ClusterIndex, plan: _Plan, a: int, b: int) -> str:
    """The resource that limits worker slots most in nodes ``a:b``."""
    if plan.q is None:
        return "none"
    elig = index.eligible(plan.main_proto)[a:b]
    best, name = None, "pods"
    for c in np.flatnonzero(plan.q > 0):
        tot = int(np.where(elig, np.minimum(np.maximum(index.free[a:b, c], 0) // plan.q[c], _SLOT_CAP), 0).sum())
        if best is None or tot < best:
            best, name = tot, index.resources[c]
    if not elig.any():
        return "no eligible node (unschedulable, NotReady, untolerated taint or nodeSelector)"
    return name


def _why(index: ClusterIndex, plan: _Plan, wd: int, Ls, caps, slotsW, first_loose, attempted: int = 0) -> str:
    lvl = index.level_name(wd)
    nW = len(index.starts[wd])
    if plan.main:
        j = int(np.lexsort([np.arange(nW), -slotsW, -caps[-1]])[0])
        a = int(index.starts[wd][j]); b = int(index.starts[wd][j + 1]) if j + 1 < nW else index.n
        unit = "pods" if plan.pseudo else f"segments of {plan.S} pods"
        at = "" if plan.pseudo else f" at segment level {index.level_name(Ls[-1])}"
        if first_loose is not None:
            at += f" beside pod {first_loose.key}"
        msg = (f"workload level {lvl}: {nW} domain(s); the best ({index.names[wd][j]}) holds "
               f"{int(caps[-1][j])} of {len(plan.main)} {unit}{at} (binding resource: {_binding_resource(index, plan, a, b)})")
    else:
        msg = f"workload level {lvl}: {nW} domain(s)"
    if first_loose is not None:
        ql = index.req_vector(first_loose)
        fits = index.eligible(first_loose) & _fits(index.free, ql)
        if not fits.any():
            msg += f"; pod {first_loose.key} fits no eligible node"
    if attempted:
        msg += f"; {attempted} domain(s) with enough worker slots could not also hold the other pods"
    return msg


def shared_domain(index: ClusterIndex, node_names: Sequence[str]) -> tuple[str, str]:
    """``(level, domain name)`` of the deepest domain holding every node in ``node_names``
    (level ``"cluster"`` when they share none; the hostname level for one node)."""
    d = _display_depth(index, _shared_depth(index, [index.node_pos[n] for n in node_names]))
    return index.level_name(d), index.names[d][int(index.dom[d][index.node_pos[node_names[0]]])]
