"""Phase 1 — count what fits per domain.

For one workload depth ``wd`` (see :class:`Levels`), every domain ``W`` of that depth gets the
counts phase 2 prunes and ranks with, all computed on the whole cluster at once (numpy):

* ``class_slots[c][W]``: pods of class ``c`` that fit in ``W`` (each class alone);
* ``main_segments[L][W]``: main segments that fit in ``W`` meeting at depth ``L`` — the sum over
  the ``L``-domains ``D`` inside ``W`` of ``T(D) // S``, ``T(D)`` the main-class slots of ``D``;
* ``special_fits[u][L][W]``: whether special unit ``u`` alone fits in some ``L``-domain of ``W``
  (every class of the unit has enough slots there; necessary, not sufficient);
* ``free[W]``: free capacity per resource (float) on nodes where at least one pod of the gang may go.

These are upper bounds (each unit counted alone), which is what makes the pruning of phase 2
safe: a domain failing one of them cannot hold the gang.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.demand import Demand


@dataclass
class Levels:
    """The depths one attempt works with. ``wd``: workload depth tried (every pod in one domain of
    it); ``wp``: workload preferred depth (packing counts its domains); ``r`` / ``p``: segment
    required / preferred depth inside a workload domain (``max(sr, wd)``, ``max(sp, wd)``);
    ``ladder``: ``p, p-1, …, r`` — deepest first, the depths the segment vector counts."""

    wd: int
    wp: int
    r: int
    p: int

    @property
    def ladder(self) -> list[int]:
        return list(range(self.p, self.r - 1, -1))


@dataclass
class DomainCounts:
    """Phase 1 state for one workload depth (arrays indexed by workload domain ``W``)."""

    n_domains: int
    class_slots: list[np.ndarray]
    main_segments: dict[int, np.ndarray]
    main_slots: np.ndarray
    special_fits: list[dict[int, np.ndarray]]
    free: np.ndarray


def reduce_ranges(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over consecutive ranges beginning at ``starts`` (exact integers)."""
    if len(values) == 0:
        return np.zeros(len(starts), dtype=np.int64)
    return np.add.reduceat(values, starts)


def count_per_domain(index: ClusterIndex, demand: Demand, levels: Levels) -> DomainCounts:
    """Phase 1 for workload depth ``levels.wd`` (see the module docstring)."""
    wd = levels.wd
    w_starts = index.starts[wd]
    n_w = len(w_starts)
    class_slots = [reduce_ranges(c.slots, w_starts) for c in demand.classes]

    def to_w(per_domain: np.ndarray, depth: int) -> np.ndarray:
        # the depth-domains inside each W are consecutive, starting at the domain of W's first node
        return reduce_ranges(per_domain, index.dom[depth][w_starts])

    main_segments: dict[int, np.ndarray] = {}
    if demand.main_class is not None:
        s = demand.classes[demand.main_class].slots
        main_slots = class_slots[demand.main_class]
        for depth in levels.ladder:
            main_segments[depth] = to_w(reduce_ranges(s, index.starts[depth]) // demand.size, depth)
    else:
        main_slots = np.zeros(n_w, dtype=np.int64)
        for depth in levels.ladder:
            main_segments[depth] = np.zeros(n_w, dtype=np.int64)
    per_depth_class: dict[tuple[int, int], np.ndarray] = {}
    special_fits = []
    for unit in demand.specials:
        need = Counter(unit.classes)
        fits_at: dict[int, np.ndarray] = {}
        for depth in (levels.ladder if unit.is_segment else [wd]):
            ok: np.ndarray | None = None
            for c, k in need.items():
                key = (depth, c)
                if key not in per_depth_class:
                    per_depth_class[key] = reduce_ranges(demand.classes[c].slots, index.starts[depth])
                here = per_depth_class[key] >= k
                ok = here if ok is None else ok & here
            if ok is not None:  # always: a special unit has pods
                fits_at[depth] = to_w(ok.astype(np.int64), depth) > 0
        special_fits.append(fits_at)
    anywhere = np.zeros(index.n, dtype=bool)
    for pod_class in demand.classes:
        anywhere |= pod_class.elig
    free = np.zeros((n_w, len(index.resources)), dtype=np.float64)
    if index.n:  # float sums: milli-byte memory over 32k nodes passes int64 (a necessary check only)
        usable = np.where(anywhere[:, None], np.maximum(index.free, 0), 0).astype(np.float64)
        free = np.add.reduceat(usable, w_starts, axis=0)
    return DomainCounts(n_w, class_slots, main_segments, main_slots, special_fits, free)
