"""The fewest nodes to free so that a workload fits (DESIGN.md §13 "What-if").

Who holds each node comes from the same dump as the snapshot (:func:`read_occupants`, charged by
:func:`webhook.kube.pods.occupied_node`, the rule every capacity reader uses). The search
(:func:`fewest_nodes_to_free`) works per domain of the workload's required level (the whole
cluster without one):

1. greedily pick the busy nodes of the domain whose freeing adds the most segments of the main pod
   shape at the segment required level (then the most pods of it), until the counts say the gang
   could fit (a necessary condition);
2. verify with the exact engine (``place_all``) on the snapshot with those nodes free (every
   resource of each node back to its allocatable), adding the next best node while it does not
   fit (at most :data:`EXTRA_NODES` more);
3. drop every node whose freeing the verified placement does not need (each drop verified again).

The answer is verified; it is *proven* the fewest when the workload is one gang of identical pods
and its size equals a lower bound: the smallest ``k`` for which the ``k`` largest slot gains of
some domain cover the pods missing there.

Pure (numpy); no kubernetes import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from webhook.admission.kinds.registry import gang_key
from webhook.kube.pods import is_pod, occupied_node, pod_ref
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.demand import slots
from webhook.placement.model import Placement, PodRequest

#: Nodes a verification may add beyond the greedy count before the domain is given up.
EXTRA_NODES = 4
#: Most domains of the required level whose greedy answer is verified.
DOMAIN_TRIES = 8
#: Most nodes one answer may free.
MAX_NODES = 64


@dataclass(frozen=True)
class Occupant:
    """A pod holding capacity on ``node``: ``pod`` (``namespace/name``) and the ``gang`` it belongs
    to (DESIGN.md §9 gang key, else its first owner as ``Kind/name``, else ``""``)."""

    pod: str
    gang: str
    node: str


def _owner(meta: Mapping[str, Any]) -> str:
    owners = meta.get("ownerReferences")
    if isinstance(owners, list) and owners and isinstance(owners[0], Mapping):
        return f"{owners[0].get('kind', '')}/{owners[0].get('name', '')}"
    return ""


def read_occupants(objects: Iterable[Mapping[str, Any]]) -> dict[str, list[Occupant]]:
    """Node name → the pods that hold capacity on it, from the Pod objects among ``objects``
    (other kinds skipped; malformed fields read as absent, never raise)."""
    out: dict[str, list[Occupant]] = {}
    for obj in objects:
        if not is_pod(obj):
            continue
        node = occupied_node(obj)
        if not node:
            continue
        namespace, name = pod_ref(obj)
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        labels = meta.get("labels")
        labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        annotations = meta.get("annotations")
        annotations = {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, Mapping) else {}
        gang = gang_key(namespace, labels, annotations) or _owner(meta)
        out.setdefault(node, []).append(Occupant(f"{namespace}/{name}", gang, node))
    return out


@dataclass(frozen=True)
class Shape:
    """What the counting step needs: the main pod, the pods and segments the workload needs,
    the segment size and the depths (required workload depth, segment required depth).
    ``uniform``: one gang whose pods all request and may go where the main pod does (the lower
    bound is only a bound then)."""

    pod: PodRequest
    pods: int
    segments: int
    size: int
    workload_depth: int
    segment_depth: int
    uniform: bool = True


@dataclass
class Freed:
    """The answer: ``nodes`` to free (names), ``placement`` (verified, with them free),
    ``proven`` (their number equals the lower bound), ``lower_bound``."""

    nodes: list[str]
    placement: Placement
    proven: bool
    lower_bound: int


def _greedy(index: ClusterIndex, shape: Shape, first: int, end: int, gain: np.ndarray,
            now: np.ndarray) -> list[int]:
    """Busy nodes of ``first:end`` in greedy order (most segments added, then most pods), as many
    as the counts need, or all busy ones when even they are not enough."""
    seg_ids = index.dom[shape.segment_depth][first:end]
    seg_ids = seg_ids - seg_ids.min()
    totals = np.bincount(seg_ids, weights=now[first:end], minlength=int(seg_ids.max()) + 1).astype(np.int64)
    local_gain = gain[first:end].copy()
    chosen: list[int] = []
    count = int((totals // shape.size).sum())
    while count < shape.segments and len(chosen) < MAX_NODES:
        busy = np.flatnonzero(local_gain > 0)
        if not len(busy):
            break
        delta = (totals[seg_ids[busy]] + local_gain[busy]) // shape.size - totals[seg_ids[busy]] // shape.size
        best = int(busy[np.lexsort((-local_gain[busy], -delta))[0]])
        chosen.append(first + best)
        totals[seg_ids[best]] += local_gain[best]
        count += int(delta[np.flatnonzero(busy == best)[0]])
        local_gain[best] = 0
    return chosen


def _lower_bound(shape: Shape, gain: np.ndarray, now: np.ndarray, first: int, end: int) -> int:
    missing = shape.pods - int(now[first:end].sum())
    if missing <= 0:
        return 1
    cumulative = np.cumsum(np.sort(gain[first:end])[::-1])
    reach = np.flatnonzero(cumulative >= missing)
    return int(reach[0]) + 1 if len(reach) else MAX_NODES + 1


def fewest_nodes_to_free(index: ClusterIndex, shape: Shape,
                         place_all: Callable[[ClusterIndex], Placement]) -> Freed | None:
    """The fewest busy nodes whose freeing makes ``place_all(index)`` place the workload (module
    docstring), or ``None`` when no answer within :data:`MAX_NODES` nodes was verified. ``index.free``
    is restored before returning."""
    q = index.req_vector(shape.pod)
    if q is None or index.n == 0:
        return None
    elig = index.eligible(shape.pod)
    now = slots(index.free, q, elig)
    gain = np.maximum(slots(index.alloc, q, elig) - now, 0)
    starts = index.starts[shape.workload_depth]
    plans = []
    bound = MAX_NODES + 1
    for domain in range(len(starts)):
        first, end = index.domain_range(shape.workload_depth, domain)
        lower = _lower_bound(shape, gain, now, first, end)
        bound = min(bound, lower)
        chosen = _greedy(index, shape, first, end, gain, now)
        if chosen:
            plans.append((len(chosen), domain, lower, chosen, first, end))
    plans.sort(key=lambda plan: plan[:2])
    saved = index.free.copy()
    best: Freed | None = None
    try:
        for rank, (_, _, _, chosen, first, end) in enumerate(plans[:DOMAIN_TRIES]):
            if best is not None and len(best.nodes) <= min(plan[2] for plan in plans[rank:]):
                break  # no domain left can need fewer nodes
            found = _verify(index, saved, chosen, gain, first, end, place_all)
            if found is not None and (best is None or len(found[0]) < len(best.nodes)):
                best = Freed([index.node_names[i] for i in found[0]], found[1], False, bound)
    finally:
        index.free[:] = saved
    if best is not None:
        best.proven = shape.uniform and len(best.nodes) == bound
    return best


def _verify(index: ClusterIndex, saved: np.ndarray, chosen: list[int], gain: np.ndarray, first: int, end: int,
            place_all: Callable[[ClusterIndex], Placement]) -> tuple[list[int], Placement] | None:
    """``(nodes, placement)`` once the engine places the workload with ``chosen`` (plus at most
    :data:`EXTRA_NODES` more by gain) free, pruned of nodes it does not need; ``None`` if never."""
    def attempt(nodes: list[int]) -> Placement:
        index.free[:] = saved
        for i in nodes:
            index.free[i] = index.alloc[i]
        return place_all(index)

    nodes = list(chosen)
    extra = [first + int(i) for i in np.argsort(-gain[first:end], kind="stable") if gain[first + int(i)] > 0
             and first + int(i) not in nodes][:EXTRA_NODES]
    placement = attempt(nodes)
    while not placement.placed and extra:
        nodes.append(extra.pop(0))
        placement = attempt(nodes)
    if not placement.placed:
        return None
    for i in reversed(list(nodes)):
        fewer = [n for n in nodes if n != i]
        trial = attempt(fewer)
        if trial.placed:
            nodes, placement = fewer, trial
    return nodes, placement
