"""Why a gang the engine could not place is not placed: "can never fit" or "waiting for capacity"
(DESIGN.md §8 "Infeasible: say why", §9 infeasible gangs).

* **Can never fit**: the gang does not fit even when every node of the topology is free (the
  engine run on ``ClusterIndex.alloc`` instead of ``free``). Waiting cannot help; the text gives
  the engine's reason on the empty cluster and the smallest change to the workload that would fit
  there: the largest segment size (``kai.scheduler/segment-size``) whose segments fit a domain of
  the segment required level (at least 2: a segment of 1 is denied), else the narrowest broader
  segment required level, else the narrowest broader workload required level.
* **Waiting for capacity**: it would fit on the empty cluster; the text names the resource and the
  domain it waits for — the domain of the required level (the workload's, else the segment's,
  else the whole cluster) with room for the most pods of the gang's most common shape now, and the
  requested resource that admits the fewest of them there.

Pure (numpy only); no kubernetes import.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from webhook.kube import kai_scheduler
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.model import Gang, Placement, PlacementError, PodRequest

NEVER_FITS = "never-fits"
WAITING_FOR_CAPACITY = "waiting-for-capacity"


#: :func:`webhook.placement.engine.place` as this module calls it (passed in: this module is below the engine)
PlaceFunction = Callable[[ClusterIndex, Gang], Placement]

@dataclass(frozen=True)
class Shortfall:
    """The answer of :func:`shortfall`. ``kind``: :data:`NEVER_FITS` or
    :data:`WAITING_FOR_CAPACITY`. ``text``: one line for Events, logs and ``place``.
    ``change``: the smallest fitting change (``"kai.scheduler/segment-size: 4 (was 8)"``; empty when
    none was found or when waiting). ``resource`` / ``level`` / ``domain``: what a waiting gang
    waits for (empty for :data:`NEVER_FITS`). ``empty_reason``: for :data:`NEVER_FITS`, the
    engine's reason on the empty cluster (every node free), not on today's free capacity."""

    kind: str
    text: str
    change: str = ""
    resource: str = ""
    level: str = ""
    domain: str = ""
    empty_reason: str = ""


def place_on_empty(index: ClusterIndex, gang: Gang, place: PlaceFunction) -> Placement:
    """``place(index, gang)`` with every node free (``free`` set to ``alloc`` for the call and
    restored after, also on error). ``place``: :func:`webhook.placement.engine.place` (passed in
    to keep this module below the engine)."""
    saved = index.free.copy()
    index.free[:] = index.alloc
    try:
        return place(index, gang)
    finally:
        index.free[:] = saved


def shortfall(index: ClusterIndex, gang: Gang, placement: Placement, place: PlaceFunction) -> Shortfall:
    """Classify an unplaced gang (``placement.placed`` False, from ``place(index, gang)``).

    Returns a :class:`Shortfall`. ``place``: the engine's ``place`` function. Raises
    :class:`PlacementError` only as ``place`` does (a level the topology does not have).
    """
    empty = place_on_empty(index, gang, place)
    if not empty.placed:
        change = _smallest_change(index, gang, place)
        text = "can never fit, not even on the empty cluster (every node free); "
        text += f"smallest change that fits: {change}" if change else \
            "no smaller segment size or broader required level would fit either (the engine's reason says what binds)"
        text += f"; engine: {empty.reason}"
        return Shortfall(NEVER_FITS, text, change, empty_reason=empty.reason or "")
    resource, level, domain, fit, need = _waited_for(index, gang)
    where = "the cluster" if level == "cluster" else f"{level} {domain}"
    text = (f"waiting for capacity: {resource} in {where} (room for {fit} of {need} pods like "
            f"{_shape(gang).key} there now; it fits when those nodes are free); engine: {placement.reason}")
    return Shortfall(WAITING_FOR_CAPACITY, text, resource=resource, level=level, domain=domain)


def _shape(gang: Gang) -> PodRequest:
    """The gang's most common pod shape (requests and node constraints), first in gang order on ties."""
    def key(p: PodRequest) -> tuple[Any, ...]:
        return tuple(sorted(p.requests.items())), p.tolerations, p.node_selector, p.node_affinity

    counts = Counter(key(p) for p in gang.pods)
    best = max(counts.values())
    return next(p for p in gang.pods if counts[key(p)] == best)


def _slots(index: ClusterIndex, pod: PodRequest, capacity: np.ndarray) -> np.ndarray:
    """Per node: how many pods like ``pod`` fit in ``capacity`` (0 where it is not eligible)."""
    q = index.req_vector(pod)
    if q is None:
        return np.zeros(index.n, dtype=np.int64)
    cols = np.flatnonzero(q > 0)
    if not len(cols):
        return np.where(index.eligible(pod), 1 << 30, 0)
    per = (np.maximum(capacity[:, cols], 0) // q[cols]).min(axis=1)
    return np.where(index.eligible(pod), per, 0)


def _required_depth(index: ClusterIndex, gang: Gang) -> int:
    """Depth the gang waits at: the workload required level, else the segment's, else the cluster."""
    for level in (gang.workload_required, gang.segment_required):
        depth = index.depth_of(level)
        if depth is not None:
            return depth
    return 0


def _waited_for(index: ClusterIndex, gang: Gang) -> tuple[str, str, str, int, int]:
    """``(resource, level, domain, pods that fit there now, pods of that shape)``."""
    pod = _shape(gang)
    need = sum(1 for p in gang.pods if (p.requests, p.tolerations, p.node_selector, p.node_affinity)
               == (pod.requests, pod.tolerations, pod.node_selector, pod.node_affinity))
    depth = _required_depth(index, gang)
    slots = _slots(index, pod, index.free)
    starts = index.starts[depth]
    per_domain = np.add.reduceat(slots, starts) if len(starts) else np.zeros(1, dtype=np.int64)
    best = int(np.argmax(per_domain))  # first (name order) of the roomiest
    first, end = index.domain_range(depth, best) if len(starts) else (0, 0)
    q = index.req_vector(pod)
    eligible = index.eligible(pod)[first:end]
    resource, fewest = "pods", None
    request = q if q is not None else np.zeros(0, dtype=np.int64)  # None: a resource no node has
    for col in np.flatnonzero(request > 0):
        room = int(np.where(eligible, np.maximum(index.free[first:end, col], 0) // request[col], 0).sum())
        if fewest is None or room < fewest:
            resource, fewest = index.resources[col], room
    level = index.level_name(depth)
    domain = index.names[depth][best] if len(starts) else "cluster"
    return resource, level, domain, min(int(per_domain[best]), need), need


def _smallest_change(index: ClusterIndex, gang: Gang, place: PlaceFunction) -> str:
    """The smallest change that fits on the empty cluster (module docstring), or ``""``."""
    sizes = Counter(p.segment for p in gang.pods if p.segment is not None)
    if sizes and gang.segment_required:
        size = max(sizes.values())
        depth = index.depth_of(gang.segment_required)
        slots = _slots(index, _shape(gang), index.alloc)
        largest = int(np.add.reduceat(slots, index.starts[depth]).max()) if index.n else 0
        # a segment has at least 2 pods (DESIGN.md §5, rule segment-size-too-small): never advise 1
        for smaller in range(min(size - 1, largest), 1, -1):
            if place_on_empty(index, _resegmented(gang, smaller), place).placed:
                return f"{kai_scheduler.SEGMENT_SIZE}: {smaller} (was {size}; a {gang.segment_required} domain holds " \
                       f"at most {largest} such {'pod' if largest == 1 else 'pods'})"
        # no segment size of 2 or more fits a domain of the segment level: a broader segment level
        # ... never broader than the workload's required level (a segment lies within the workload's domain)
        outermost = index.depth_of(gang.workload_required) or 1
        for broader in range(depth - 1, outermost - 1, -1):
            level = index.levels[broader - 1]
            try:
                fits = place_on_empty(index, replace(gang, segment_required=level, segment_preferred=None),
                                      place).placed
            except PlacementError:
                continue
            if fits:
                return f"{kai_scheduler.SEGMENT_REQUIRED}: {level} (was {gang.segment_required}; a " \
                       f"{gang.segment_required} domain holds at most {largest} such " \
                       f"{'pod' if largest == 1 else 'pods'}, less than a segment of 2)"
    if gang.workload_required:
        depth = index.depth_of(gang.workload_required)
        for broader in range(depth - 1, -1, -1):
            wl_level = index.levels[broader - 1] if broader else None
            try:
                fits = place_on_empty(index, replace(gang, workload_required=wl_level,
                                                     workload_preferred=None), place).placed
            except PlacementError:
                continue
            if fits:
                return f"{kai_scheduler.TOPOLOGY_REQUIRED}: {wl_level} (was {gang.workload_required})" if wl_level else \
                    f"no {kai_scheduler.TOPOLOGY_REQUIRED} (was {gang.workload_required})"
    return ""


def _resegmented(gang: Gang, size: int) -> Gang:
    """``gang`` with its segmented pods, in segment then key order, cut into segments of ``size``."""
    segmented = sorted(((p.segment, p) for p in gang.pods if p.segment is not None), key=lambda sp: (sp[0], sp[1].key))
    new = {p.key: (segment[0], i // size) for i, (segment, p) in enumerate(segmented)}
    return replace(gang, pods=[replace(p, segment=new[p.key]) if p.key in new else p for p in gang.pods])
