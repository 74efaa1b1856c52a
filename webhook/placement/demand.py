"""Reading the gang (before phase 1): pod classes and placement units.

State built here and read by every phase:

* **pod class**: pods with the same request row and the same eligibility (selector, affinity,
  tolerations) are interchangeable; each class keeps its request row ``q``, its eligible-node
  mask and its ``slots`` per node (how many of its pods fit on each node's free capacity).
* **main segments**: the most common kind of segment — ``S`` pods of one class. They are
  counted, not searched: with identical pods, a domain whose nodes hold ``T`` pods of the class
  holds ``T // S`` segments (segments may share nodes), which phase 3 uses exactly.
* **special units**: everything else — a partial last segment, a segment holding a leader or
  pods of another class, and single pods outside segments (PyTorchJob Master, LWS leader under
  LeaderExcluded). Phase 3 searches their nodes.
* an unsegmented gang is handled as segments of one pod (``pseudo``): its most common class
  becomes the main class, other pods special units.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.model import Gang, PodRequest

#: Most pods of one class counted per node: far above any gang, small enough that a sum over
#: 2**20 nodes fits in int64 (a node reporting ``nvidia.com/gpu: 1e30`` would overflow the sums).
SLOT_CAP = 1 << 40


def slots(free: np.ndarray, q: np.ndarray, elig: np.ndarray) -> np.ndarray:
    """Pods of request row ``q`` that fit on each row of ``free`` (0 where not eligible, at most
    :data:`SLOT_CAP`). Only requested resources count: an over-committed resource the pod does
    not ask for does not block it (as in kube-scheduler)."""
    cols = np.flatnonzero(q > 0)
    if len(cols) == 0:
        s = np.full(free.shape[0], SLOT_CAP, dtype=np.int64)
    else:
        s = np.minimum((free[:, cols] // q[cols]).min(axis=1), SLOT_CAP)
    return np.where(elig, np.maximum(s, 0), 0)


def fits(free: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Rows of ``free`` where one pod of request row ``q`` fits (requested resources only)."""
    cols = np.flatnonzero(q > 0)
    if len(cols) == 0:
        return np.ones(free.shape[0], dtype=bool)
    rows: np.ndarray = np.all(free[:, cols] >= q[cols], axis=1)
    return rows


@dataclass
class PodClass:
    """Interchangeable pods: request row ``q``, eligible-node mask ``elig``, ``slots`` per node,
    ``pods``: the class's pods in gang order (a Master that requests what the workers do is in
    their class; explanations count each role apart, :func:`webhook.placement.explain._who`)."""

    q: np.ndarray
    elig: np.ndarray
    slots: np.ndarray
    pods: list[PodRequest] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many pods of the gang are in the class."""
        return len(self.pods)

    @property
    def example(self) -> PodRequest:
        """The class's first pod (named in explanations)."""
        return self.pods[0]


@dataclass
class Unit:
    """A special unit: ``segment`` (``sid`` set; its pods must share the segment required
    level) or a single ``loose`` pod (``sid`` is ``None``). ``pods`` / ``classes`` in search
    order (largest request first)."""

    sid: tuple[int, int] | None
    pods: list[PodRequest]
    classes: list[int]

    @property
    def is_segment(self) -> bool:
        return self.sid is not None


@dataclass
class Demand:
    """The gang as phases 1–3 see it (see the module docstring)."""

    classes: list[PodClass]
    main_class: int | None
    size: int
    main: list[tuple[tuple[int, int], list[PodRequest]]]
    specials: list[Unit]
    pseudo: bool
    total: np.ndarray
    class_of: dict[str, int] = field(default_factory=dict)

    @property
    def n_segments(self) -> int:
        """Segments the segment vector counts (0 for an unsegmented gang)."""
        if self.pseudo:
            return 0
        return len(self.main) + sum(1 for u in self.specials if u.is_segment)


def read_gang(index: ClusterIndex, gang: Gang) -> Demand:
    """Split ``gang`` into classes, main segments and special units (requests must be known to
    the index: the caller checks :meth:`ClusterIndex.req_vector` first)."""
    keys: dict[tuple[Any, ...], int] = {}
    classes: list[PodClass] = []
    class_of: dict[str, int] = {}
    for p in gang.pods:
        sig = (tuple(sorted((r, v) for r, v in p.requests.items() if v > 0)), p.tolerations, p.node_selector,
               p.node_affinity)
        c = keys.get(sig)
        if c is None:
            c = keys[sig] = len(classes)
            q = index.req_vector(p)
            if q is None:
                raise ValueError(f"pod {p.key} requests a resource no node has (check req_vector first)")
            elig = index.eligible(p)
            classes.append(PodClass(q=q, elig=elig, slots=slots(index.free, q, elig)))
        classes[c].pods.append(p)
        class_of[p.key] = c
    total = sum((cl.q * cl.count for cl in classes), np.zeros(len(index.resources), dtype=np.int64))

    def order(pods: list[PodRequest]) -> list[PodRequest]:
        return sorted(pods, key=lambda p: (-int(classes[class_of[p.key]].q.sum()), class_of[p.key]))

    segments: dict[tuple[int, int], list[PodRequest]] = {}
    loose: list[PodRequest] = []
    for p in gang.pods:
        (segments.setdefault(p.segment, []) if p.segment is not None else loose).append(p)
    if segments:
        sizes = Counter(len(v) for v in segments.values())
        size = max(sizes, key=lambda s: (sizes[s] * s, s))
        uniform = Counter(class_of[v[0].key] for v in segments.values()
                          if len(v) == size and len({class_of[p.key] for p in v}) == 1)
        main_class = max(uniform, key=lambda c: (uniform[c], -c)) if uniform else None
        main, specials = [], []
        for sid in sorted(segments):
            pods = segments[sid]
            if main_class is not None and len(pods) == size and all(class_of[p.key] == main_class for p in pods):
                main.append((sid, pods))
            else:
                specials.append(Unit(sid, order(pods), [class_of[p.key] for p in order(pods)]))
        specials += [Unit(None, [p], [class_of[p.key]]) for p in loose]
        return Demand(classes, main_class, size, main, _search_order(specials, classes), False, total, class_of)
    counts = Counter(class_of[p.key] for p in loose)
    main_class = max(counts, key=lambda c: (counts[c], -c)) if counts else None
    main = [((0, i), [p]) for i, p in enumerate(p for p in loose if class_of[p.key] == main_class)]
    specials = [Unit(None, [p], [class_of[p.key]]) for p in loose if class_of[p.key] != main_class]
    return Demand(classes, main_class, 1, main, _search_order(specials, classes), True, total, class_of)


def _search_order(units: list[Unit], classes: list[PodClass]) -> list[Unit]:
    """Segments first, then loose pods; larger demand first (fails early in the search)."""
    return sorted(units, key=lambda u: (not u.is_segment, -sum(int(classes[c].q.sum()) for c in u.classes),
                                        u.sid or (0, 0), u.pods[0].key))
