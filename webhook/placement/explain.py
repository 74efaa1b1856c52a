"""Explain — why a gang was not placed (DESIGN.md §8 "Infeasible: say why, per level").

Two kinds of reasons, both true statements about the snapshot:

* a pod role no node can take at all: which of its selectors / affinity / tolerations
  excluded the nodes (:meth:`EligibilityIndex.why_excluded`), or, when eligible nodes exist
  but none has room for even one such pod, the resource that is short;
* per workload level tried: how many domains there are, how many could hold the whole demand
  (phase 2) and were searched (phase 3), and for the best domain how many segments fit at the
  segment required level and the binding resource there;
* then, for each pod role whose eligibility its own constraints restrict, on how many nodes it
  may run and which constraint restricted it (:func:`restricted_roles`), so a shortage caused
  by a selector or an affinity is not reported as a resource shortage alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.count import DomainCounts, Levels
from webhook.placement.demand import SLOT_CAP, Demand, PodClass
from webhook.placement.model import PodRequest


def _who(cls: PodClass) -> str:
    """The pods of a class, counted per role: ``pod ns/j-master-0 (master)``, ``16 pods like
    ns/j-worker-0 (worker)``, or for a class of several roles ``11 pods: ns/j-master-0 (master)
    and 10 like ns/j-worker-0 (worker)``."""
    def one(pod: PodRequest) -> str:
        return f"{pod.key} ({pod.role})" if pod.role else pod.key

    roles: dict[str, list[Any]] = {}  # role -> [count, first pod], in gang order
    for pod in cls.pods:
        roles.setdefault(pod.role, [0, pod])[0] += 1
    if len(roles) <= 1:
        return f"pod {one(cls.example)}" if cls.count == 1 else f"{cls.count} pods like {one(cls.example)}"
    parts = [one(pod) if count == 1 else f"{count} like {one(pod)}" for count, pod in roles.values()]
    return f"{cls.count} pods: {', '.join(parts[:-1])} and {parts[-1]}"


def _segment_sizes(demand: Demand) -> str:
    """``segments of 4 pods``, or with a partial last segment ``segments of 4 pods (the last of 2)``."""
    others = sorted(len(u.pods) for u in demand.specials if u.is_segment and len(u.pods) != demand.size)
    text = f"segments of {demand.size} pods"
    if len(others) == 1:
        return f"{text} (the last of {others[0]})"
    if others:
        return f"{text} ({', '.join(f'one of {n}' for n in others)})"
    return text


def binding_resource(index: ClusterIndex, cls: PodClass, first: int, end: int) -> str:
    """The requested resource that admits the fewest pods of ``cls`` on nodes ``first:end``."""
    elig = cls.elig[first:end]
    if not elig.any():
        return "no eligible node"
    best, name = None, "pods"
    for c in np.flatnonzero(cls.q > 0):
        total = int(np.where(elig, np.minimum(np.maximum(index.free[first:end, c], 0) // cls.q[c], SLOT_CAP), 0).sum())
        if best is None or total < best:
            best, name = total, index.resources[c]
    return name


def excluded_roles(index: ClusterIndex, demand: Demand) -> str | None:
    """Reason text for pod classes that fit on no node at all, ``None`` when every class has
    room somewhere."""
    reasons = []
    for cls in demand.classes:
        if not cls.elig.any():
            reasons.append(f"{_who(cls)} can go to no node: {index.eligibility.why_excluded(cls.example)}")
        elif not cls.slots.any():
            reasons.append(f"{_who(cls)}: no room for one on any of the {int(cls.elig.sum())} eligible node(s) "
                           f"(binding resource: {binding_resource(index, cls, 0, index.n)})")
    return "; ".join(reasons) or None


def restricted_roles(index: ClusterIndex, demand: Demand) -> str | None:
    """For an infeasible gang, each pod role whose own constraints (nodeSelector, required node
    affinity, tolerations) leave only part of the ready nodes, with how many and which constraint
    restricted it, e.g. ``16 pods like ns/job-worker-0 (worker) are eligible on only 4 of 8 ready
    node(s), restricted by: required node affinity (gen Gt [4]) matches 4 of 8 ready node(s)``
    (the constraint text is :meth:`EligibilityIndex.why_excluded`'s). ``None`` when no
    role is restricted (nodes only cordoned or NotReady restrict every role alike)."""
    eligibility = index.eligibility
    ready = int(eligibility.base_ok.sum())
    parts, said = [], set()
    for cls in demand.classes:
        eligible = int(cls.elig.sum())
        if not 0 < eligible < ready:
            continue
        why = eligibility.why_excluded(cls.example)
        key = (cls.example.role, why)
        if key in said:  # several request shapes of one role, restricted alike: name it once
            continue
        said.add(key)
        verb = "is" if cls.count == 1 else "are"
        parts.append(f"{_who(cls)} {verb} eligible on only {eligible} of {ready} ready node(s), restricted by: {why}")
    return "; ".join(parts) or None


def explain_level(index: ClusterIndex, demand: Demand, levels: Levels, counts: DomainCounts,
                  candidates: int, searched: int) -> str:
    """One level's reason, e.g. ``workload level cloud.provider.com/topology-rack: 2 domain(s),
    0 with room for the whole demand; the best (r-a) holds 1 of 3 segments at segment level
    cloud.provider.com/topology-rack (binding resource: nvidia.com/gpu)``."""
    wd, r = levels.wd, levels.r
    text = f"workload level {index.level_name(wd)}: {counts.n_domains} domain(s), {candidates} with room for the whole demand"
    if candidates:
        text += f"; {searched} searched, none holds every pod at once"
        return text
    n_main = len(demand.main)
    seg_fit = np.minimum(counts.main_segments[r], n_main)
    for unit, fits in zip(demand.specials, counts.special_fits):
        if unit.is_segment:
            seg_fit = seg_fit + fits[r]
    main = demand.main_class if demand.main_class is not None else demand.specials[0].classes[0]
    cls = demand.classes[main]
    pods_fit = np.minimum(counts.class_slots[main], cls.count)
    best = int(np.lexsort([np.arange(counts.n_domains), -pods_fit, -seg_fit])[0])
    first, end = index.domain_range(wd, best)
    name = index.names[wd][best]
    if demand.n_segments:
        held = min(int(seg_fit[best]), demand.n_segments)
        if demand.main_class is not None:  # and no more than the main-class pods there can fill, smallest first
            sizes = sorted([demand.size] * n_main + [sum(1 for c in u.classes if c == main)
                                                     for u in demand.specials if u.is_segment])
            room = int(counts.class_slots[main][best])
            held = min(held, int(np.searchsorted(np.cumsum(sizes), room, side="right")))
        text += (f"; the best ({name}) holds {held} of {demand.n_segments} {_segment_sizes(demand)} at segment level "
                 f"{index.level_name(r)}")
    else:
        text += f"; the best ({name}) holds {int(pods_fit[best])} of {cls.count} pods like {cls.example.key}"
    text += f" (binding resource: {binding_resource(index, cls, first, end)})"
    short = [_who(c) for i, c in enumerate(demand.classes) if counts.class_slots[i][best] < c.count]
    if short:
        text += f"; not enough room there for {', '.join(short)}"
    return text
