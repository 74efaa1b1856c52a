"""The placement engine (DESIGN.md §8): place one gang of pods on a cluster snapshot.

Entry point: :func:`place` ``(index, gang) -> Placement``. Inputs: a :class:`ClusterIndex`
(the snapshot's nodes of one topology, :mod:`webhook.placement.cluster_index`) and a
:class:`Gang` of :class:`PodRequest` (build one from admitted Pod manifests with
:func:`webhook.planning.expand.gang_from_pods`).

Objective, in DESIGN.md §8 order, primary first (``Placement.objective`` holds the keys):

1. every required constraint — all pods in one domain of the workload required level, the
   pods of each segment in one domain of the segment required level, node eligibility per pod
   (:mod:`webhook.placement.eligibility`), every node's capacity;
2. the workload at its lowest reachable level: the deepest workload depth ``wd`` between its
   preferred and required depths;
3. the most segments at their lowest levels: the segment vector ``(n(p), n(p-1), …, n(r+1))``,
   maximised lexicographically, ``n(L)`` the number of segments whose pods share a domain of
   depth ``>= L``, ``p`` / ``r`` the segment preferred / required depths (at least ``wd``);
4. preferred packing: the fewest workload-preferred-level domains used (when ``wd`` is above
   the preferred level), then the fewest segment-preferred-level domains per segment that
   does not meet at its preferred level;
5. best fit: the tightest workload domain (least main-pod room left), and inside it the
   greedy order of phase 3 (tightest nodes, most-filled domains first) — a tie-break, not
   proven optimal;
6. domain name order.

How (the way Kueue's ``findTopologyAssignment`` is laid out, phases named):

* read the gang (:mod:`~webhook.placement.demand`): pod classes, main segments, special units;
* **phase 1 — count what fits per domain** (:mod:`~webhook.placement.count`);
* **phase 2 — choose the level and domains** (:mod:`~webhook.placement.choose`): workload
  depths from preferred to required; per depth the domains that can hold the whole demand,
  ranked by an upper bound of the keys — no cap on their number;
* **phase 3 — assign pods** (:mod:`~webhook.placement.assign`): the greedy answer of the
  :data:`PROBES` best-ranked domains gives a first incumbent; then branch and bound over the
  special units, main segments counted exactly, domains searched in rank order until the best
  found is at least the next domain's bound;
* **verify** (:mod:`~webhook.placement.verify`): an independent check of the hard rules;
* **explain** (:mod:`~webhook.placement.explain`): the per-level reason when nothing fits.

``Placement.exact`` is ``True`` when the answer is proven optimal for keys 1–4 (or proven
infeasible): every search completed, which proves keys 1–3, and both packing keys meet their
lower bounds (phase 3 packs the main segments greedily, so packing is proven only there). The
searches share :data:`WORK_BUDGET`; once it is spent each remaining domain only gets its greedy
first answer, and the result says ``exact: False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook.placement.assign import Budget, assign_pods
from webhook.placement.choose import choose_domains, packing_lower_bound, spread_per_segment
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.count import Levels, count_per_domain
from webhook.placement.demand import Demand, read_gang
from webhook.placement.explain import excluded_roles, explain_level, restricted_roles
from webhook.placement.model import HOSTNAME, Gang, Placement, PlacementError, PodRequest, SegmentResult
from webhook.placement.verify import verify

__all__ = ["ClusterIndex", "Gang", "HOSTNAME", "Placement", "PlacementError", "PodRequest", "SegmentResult",
           "WORK_BUDGET", "place", "shared_domain"]

#: Search work shared by the phase-3 searches of one :func:`place` call, in node·steps (a step
#: in a domain of ``m`` nodes costs ``m`` plus :data:`~webhook.placement.assign.STEP_OVERHEAD`); its
#: time is in the README ("Algorithm"). Greedy probes may take a quarter of it.
WORK_BUDGET = 400_000
#: Workload domains whose greedy answer is taken first, as the incumbent of the branch and bound.
PROBES = 8


def place(index: ClusterIndex, gang: Gang, *, budget: int = WORK_BUDGET) -> Placement:
    """Place every pod of ``gang`` on ``index`` or none (DESIGN.md §8).

    Returns a :class:`Placement`: ``placed``, ``assignments`` (pod key → node name),
    ``segments``, the workload's shared level and domain, ``objective`` = ``(workload depth,
    segment vector, workload packing, segment packing)``, ``exact`` and, when not placed,
    ``reason``. ``index.free`` is not changed (see :meth:`ClusterIndex.commit`). Raises
    :class:`PlacementError` for a level the topology does not have.
    """
    if not gang.pods:
        return Placement(placed=True, objective=(0, (), 0, 0))
    wr = index.depth_of(gang.workload_required) or 0
    wp = index.depth_of(gang.workload_preferred)
    wp = wr if wp is None else max(wp, wr)
    sr = index.depth_of(gang.segment_required) or 0
    sp = index.depth_of(gang.segment_preferred)
    sp = sr if sp is None else max(sp, sr)
    if index.n == 0:
        return Placement(placed=False, reason=f"no node carries every level label of topology "
                         f"{index.topology.name if index.topology else '(none)'} ({index.outside} nodes outside)")
    for p in gang.pods:
        if index.req_vector(p) is None:
            missing = [r for r, v in p.requests.items() if v > 0 and r not in index.col]
            return Placement(placed=False, reason=f"pod {p.key} requests {missing[0]}, which no node in the topology has")
    demand = read_gang(index, gang)
    if demand.pseudo:
        sr = sp = 0
    excluded = excluded_roles(index, demand)
    if excluded:
        return Placement(placed=False, reason=excluded)
    work = Budget(budget)
    exact = True
    reasons = []
    for wd in range(wp, wr - 1, -1):
        levels = Levels(wd=wd, wp=wp, r=max(sr, wd), p=max(sp, wd))
        counts = count_per_domain(index, demand, levels)
        candidates = choose_domains(index, demand, levels, counts)
        best_key: tuple[Any, ...] | None = None
        best: dict[str, int] | None = None
        best_domain: int | None = None
        for cand in candidates[:PROBES]:  # greedy answers of the best-ranked domains: a first incumbent
            if best_key is not None and (best_key >= cand.bound or work.work < budget * 3 // 4):
                break  # no better probe possible, or a quarter of the budget spent on probes
            outcome = assign_pods(index, demand, levels, cand.domain, cand.bound, best_key, work, first_leaf=True)
            if outcome.key is not None and (best_key is None or outcome.key > best_key):
                best_key, best, best_domain = outcome.key, outcome.assignment, cand.domain
        searched = 0
        for cand in candidates:
            if best_key is not None and best_key >= cand.bound:
                break  # no later domain can beat the best found
            searched += 1
            outcome = assign_pods(index, demand, levels, cand.domain, cand.bound, best_key, work)
            exact &= outcome.complete
            if outcome.key is not None and (best_key is None or outcome.key > best_key):
                best_key, best, best_domain = outcome.key, outcome.assignment, cand.domain
        if best is not None and best_key is not None and best_domain is not None:  # found together
            verify(index, gang, best, wr, sr)
            vector, wpack, spack = best_key
            # the vector is proven by a complete search; packing only where it meets its lower bound
            spread = spread_per_segment(index, demand, levels, best_domain)
            exact &= (-wpack == packing_lower_bound(index, demand, levels, best_domain, vector)
                      and -spack == ((demand.n_segments - vector[0]) * spread if vector else 0))
            return _result(index, gang, demand, best, (wd, vector, -wpack, -spack), exact)
        reasons.append(explain_level(index, demand, levels, counts, len(candidates), searched))
    restricted = restricted_roles(index, demand)
    if restricted:
        reasons.append(restricted)
    return Placement(placed=False, reason="; ".join(reasons), exact=exact)


def _result(index: ClusterIndex, gang: Gang, demand: Demand, assignment: dict[str, int], objective: tuple[Any, ...], exact: bool) -> Placement:
    segments = []
    if not demand.pseudo:
        by_sid: dict[tuple[Any, ...], list[PodRequest]] = {}
        for p in gang.pods:
            if p.segment is not None:
                by_sid.setdefault(p.segment, []).append(p)
        order = sorted(by_sid)
        groups = [[assignment[p.key] for p in by_sid[sid]] for sid in order]
        for sid, nodes, shared in zip(order, groups, index.shared_depths(groups)):
            d = index.display_depth(shared)
            segments.append(SegmentResult(group=sid[0], index=sid[1], domain=index.names[d][int(index.dom[d][nodes[0]])],
                                          level=index.level_name(d), pods=[p.key for p in by_sid[sid]]))
    positions = list(assignment.values())
    wd = index.display_depth(index.shared_depth(positions))
    return Placement(placed=True, assignments={p.key: index.node_names[assignment[p.key]] for p in gang.pods},
                     segments=segments, workload_domain=index.names[wd][int(index.dom[wd][positions[0]])],
                     workload_level=index.level_name(wd), objective=objective, exact=exact)


def shared_domain(index: ClusterIndex, node_names: Sequence[str]) -> tuple[str, str]:
    """``(level, domain name)`` of the deepest domain holding every node in ``node_names``
    (level ``"cluster"`` when they share none; the hostname level for one node)."""
    positions = [index.node_pos[n] for n in node_names]
    d = index.display_depth(index.shared_depth(positions))
    return index.level_name(d), index.names[d][int(index.dom[d][positions[0]])]
