"""Phase 2 — choose the level and domains.

The workload depth is tried from its preferred depth up to its required depth (DESIGN.md §8:
"the workload at its lowest reachable level"; :func:`webhook.placement.engine.place` runs that
loop). For one depth, this phase keeps the workload domains that can hold the **whole demand**
— every class of pod its own count, every resource its total, the main segments at the
segment required depth, each special unit somewhere — and ranks them by an upper bound of the
objective. There is no cap on how many domains are kept: phase 3 searches them in rank order
and stops only when the best placement found is at least the bound of the next domain
(branch and bound), so no domain that could hold a better placement is skipped.

State: a list of :class:`Candidate` per workload depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.count import DomainCounts, Levels, reduce_ranges
from webhook.placement.demand import Demand


@dataclass
class Candidate:
    """One workload domain worth searching. ``bound``: no placement inside it scores higher on
    the objective keys ``(segment vector, -workload packing, -segment packing)``; ``leftover``:
    main-class slots left after the main segments (best fit: smaller first)."""

    domain: int
    bound: tuple[Any, ...]
    leftover: int


def vector_bound(demand: Demand, levels: Levels, main_segments: dict[int, int], special_fit: list[dict[int, bool]]) -> tuple[Any, ...]:
    """Upper bound of the segment vector ``(n(p), …, n(r+1))``: main segments counted by capacity,
    every special segment that fits alone at a depth counted there."""
    n_seg, n_main = demand.n_segments, len(demand.main)
    out = []
    for depth in levels.ladder[:-1]:
        specials = sum(1 for u, f in zip(demand.specials, special_fit) if u.is_segment and f.get(depth, False))
        out.append(min(n_seg, min(n_main, main_segments[depth]) + specials))
    return tuple(out)


def packing_bounds(index: ClusterIndex, demand: Demand, levels: Levels, domain: int, vector: tuple[Any, ...]) -> tuple[int, int]:
    """Lower bounds of the packing keys in one workload domain: workload packing (wp-domains
    used beyond the first, when ``wd < wp``: at least as many as the main pods need by
    capacity, and at least 2) and segment packing (each segment not meeting at ``p`` spans at
    least two ``p``-domains)."""
    wpack = 0
    if levels.wd < levels.wp:
        wpack = 1
        if demand.main_class is not None:
            a, b = index.domain_range(levels.wd, domain)
            starts = index.starts[levels.wp]
            lo, hi = int(index.dom[levels.wp][a]), int(index.dom[levels.wp][b - 1]) + 1
            caps = np.sort(reduce_ranges(demand.classes[demand.main_class].slots[a:b], starts[lo:hi] - a))[::-1]
            need = len(demand.main) * demand.size
            k = int(np.searchsorted(np.cumsum(caps), need)) + 1
            wpack = max(wpack, k - 1)
    spack = demand.n_segments - vector[0] if vector else 0
    return wpack, spack


def choose_domains(index: ClusterIndex, demand: Demand, levels: Levels, counts: DomainCounts) -> list[Candidate]:
    """Phase 2 for one workload depth: the workload domains that can hold the whole demand,
    best bound first (ties: least leftover main slots, then domain name order)."""
    ok = np.ones(counts.n_domains, dtype=bool)
    for c, cl in enumerate(demand.classes):
        ok &= counts.class_slots[c] >= cl.count
    need = demand.total.astype(np.float64)
    cols = np.flatnonzero(need > 0)
    if len(cols):
        ok &= (counts.free[:, cols] * (1 + 1e-9) >= need[cols]).all(axis=1)
    ok &= counts.main_segments[levels.r] >= len(demand.main)
    for unit, fits_at in zip(demand.specials, counts.special_fits):
        ok &= fits_at[levels.r if unit.is_segment else levels.wd]
    out = []
    n_main = len(demand.main)
    for w in map(int, np.flatnonzero(ok)):
        main_at = {d: int(counts.main_segments[d][w]) for d in levels.ladder}
        special_at = [{d: bool(f[w]) for d, f in fits.items()} for fits in counts.special_fits]
        vector = vector_bound(demand, levels, main_at, special_at)
        # a placement below the vector bound scores lower whatever its packing; one at it packs
        # at least as badly as packing_lower_bound says
        wpack = packing_lower_bound(index, demand, levels, w, vector)
        spack = (demand.n_segments - vector[0]) * spread_per_segment(index, demand, levels, w) if vector else 0
        out.append(Candidate(w, (vector, -wpack, -spack), int(counts.main_slots[w]) - n_main * demand.size))
    out.sort(key=lambda c: (tuple(-v for v in c.bound[0]), -c.bound[1], -c.bound[2], c.leftover, c.domain))
    return out


def packing_lower_bound(index: ClusterIndex, demand: Demand, levels: Levels, domain: int, vector: tuple[Any, ...]) -> int:
    """Workload packing lower bound for placements in ``domain`` whose segment vector is
    ``vector`` (the optimum): beside :func:`packing_bounds`' capacity bound, the segments meeting
    at a depth ``L >= wp`` lie inside single ``wp``-domains, so at least as many ``wp``-domains
    as it takes (largest first) to hold ``n(L)`` main segments at ``L`` are used — counting main
    segments only, special segments meeting there need room too."""
    base = packing_bounds(index, demand, levels, domain, vector)[0]
    if levels.wd >= levels.wp or demand.main_class is None or demand.pseudo:
        return base
    a, b = index.domain_range(levels.wd, domain)
    s = demand.classes[demand.main_class].slots[a:b]
    wp_lo, wp_hi = int(index.dom[levels.wp][a]), int(index.dom[levels.wp][b - 1]) + 1
    wp_starts = index.starts[levels.wp][wp_lo:wp_hi] - a
    specials = sum(1 for u in demand.specials if u.is_segment)
    for depth, count in zip(levels.ladder, tuple(vector) + (demand.n_segments,)):  # all meet at r
        if depth < levels.wp:
            continue
        lo, hi = int(index.dom[depth][a]), int(index.dom[depth][b - 1]) + 1
        per_domain = reduce_ranges(s, index.starts[depth][lo:hi] - a) // demand.size
        # the wp-domain of each depth-domain, then the segments each wp-domain can hold at depth
        owner = index.dom[levels.wp][index.starts[depth][lo:hi]] - wp_lo
        per_wp = np.bincount(owner, weights=per_domain.astype(np.float64), minlength=len(wp_starts))
        need = max(0, count - specials)
        k = int(np.searchsorted(np.cumsum(np.sort(per_wp)[::-1]), need - 0.5)) + 1 if need else 1
        base = max(base, k - 1)
    return base


def spread_per_segment(index: ClusterIndex, demand: Demand, levels: Levels, domain: int) -> int:
    """Segment packing lower bound per segment that does not meet at ``p``, in ``domain``: it
    spans at least ``max(2, ceil(k / m))`` ``p``-domains, ``k`` the fewest main-class pods of
    any segment and ``m`` the most main-class pods one ``p``-domain of ``domain`` holds (on the
    snapshot's free capacity, which placing pods only lowers); the count beyond the first."""
    if demand.main_class is None or levels.p <= levels.r:
        return 1
    a, b = index.domain_range(levels.wd, domain)
    lo, hi = int(index.dom[levels.p][a]), int(index.dom[levels.p][b - 1]) + 1
    most = int(reduce_ranges(demand.classes[demand.main_class].slots[a:b], index.starts[levels.p][lo:hi] - a).max())
    fewest = min([demand.size] * bool(demand.main) + [sum(1 for c in u.classes if c == demand.main_class)
                                                      for u in demand.specials if u.is_segment])
    if most <= 0 or fewest <= 0:
        return 1
    return max(2, -(-fewest // most)) - 1
