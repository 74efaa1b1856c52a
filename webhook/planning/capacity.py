"""Capacity for a shape (DESIGN.md §13): per domain of each topology level, how many gangs and how
many segments of one shape fit now at once, and the capacity stranded for that shape.

A :class:`GangShape` is ``pods`` identical pods per gang, cut into segments of ``segment_size``
(the last one partial when ``pods`` is not a multiple), each pod requesting ``requests``; every
segment in one domain of ``segment_level``, every gang in one domain of ``workload_level`` (either
may be ``None``: no such constraint). Pods are eligible on Ready, schedulable nodes without a taint
they do not tolerate (the shape has no selector or toleration: :mod:`webhook.placement.eligibility`).

Computed, not estimated (pods of one shape are interchangeable, and segments may share nodes, as
in the engine's counting phase, :mod:`webhook.placement.count`):

* a node holds ``slots`` pods (:func:`webhook.placement.demand.slots` of its free capacity);
* a segment-level domain with ``T`` slots holds any set of segments whose pods add up to at most
  ``T``, so it holds ``T // S`` segments of ``S`` pods;
* segments of a domain ``D``: the sum over the segment-level domains inside ``D`` (or ``T(D) // S``
  when ``D`` is narrower than the segment level);
* gangs of ``D``: the sum over the workload-level domains inside ``D`` of the most gangs whose
  segments (``pods // S`` of ``S`` pods and one of ``pods % S``) pack into its segment-level
  domains — a two-size bin packing solved exactly (:func:`most_gangs`);
* stranded: free capacity of eligible nodes in ``D`` (per requested resource) that the most
  segments of ``D`` leave unused, and that the most gangs leave unused.

Pure (numpy); no kubernetes import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from webhook.errors import SegmentWebhookError
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.count import reduce_ranges
from webhook.placement.demand import slots
from webhook.placement.model import PodRequest
from webhook.planning.expand import MAX_PODS
from webhook.text.messages import quote

#: The largest request one ``--shape`` resource may ask, in milli-units (2**53: far above any node,
#: and every count stays exact in the engine's int64 arrays).
MAX_REQUEST_MILLI = 2**53


class CapacityError(SegmentWebhookError, ValueError):
    """A shape that cannot be counted (a level the topology does not have, a segment level broader
    than the workload level, a resource no node has); the message names the field and the fix."""


@dataclass(frozen=True)
class GangShape:
    """The shape counted (module docstring). ``requests``: integer milli-units per resource
    (``pods: 1000`` is added when absent)."""

    pods: int
    segment_size: int
    requests: Mapping[str, int]
    segment_level: str | None = None
    workload_level: str | None = None

    def document(self) -> dict[str, Any]:
        """The shape as JSON (requests in milli-units)."""
        return {"pods": self.pods, "segment_size": self.segment_size, "requests_milli": dict(self.requests),
                "segment_level": self.segment_level, "workload_level": self.workload_level}


@dataclass
class DomainCapacity:
    """One domain: ``level`` (label key, ``"cluster"`` for the whole cluster), ``domain`` (its
    value), ``parent`` (the enclosing domain's value, ``""`` at the broadest level), ``nodes``,
    ``free`` / ``stranded`` / ``stranded_for_gangs`` (milli-units per requested resource, eligible
    nodes only), ``segments`` and ``gangs`` (how many fit now at once)."""

    level: str
    domain: str
    parent: str
    nodes: int
    segments: int
    gangs: int
    free: dict[str, int] = field(default_factory=dict)
    stranded: dict[str, int] = field(default_factory=dict)
    stranded_for_gangs: dict[str, int] = field(default_factory=dict)


def most_gangs(bins: np.ndarray, pods: int, size: int) -> int:
    """Most gangs of ``pods`` pods in segments of ``size`` (``pods // size`` full ones and one of
    ``pods % size``) that pack into ``bins`` (pod slots per segment-level domain), each segment
    inside one bin. Exact: a binary search on the count, each count checked by a dynamic program
    over the bins (most partial segments placed for each number of full segments placed)."""
    if pods <= 0 or size <= 0:
        return 0
    bins = np.asarray(bins, dtype=np.int64)
    full, rest = divmod(pods, size)
    if rest == 0:
        return int((bins // size).sum()) // full
    if full == 0:
        return int((bins // rest).sum())
    high = int(bins.sum()) // pods
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        if _packs(bins, middle * full, middle, size, rest):
            low = middle
        else:
            high = middle - 1
    return low


def _packs(bins: np.ndarray, full_needed: int, rest_needed: int, size: int, rest: int) -> bool:
    """Whether ``full_needed`` segments of ``size`` and ``rest_needed`` of ``rest`` pack into ``bins``.
    ``best[a]``: most partial segments placed so far with ``a`` full ones placed (``a`` capped at
    ``full_needed``; -1 = not reachable)."""
    best = np.full(full_needed + 1, -1, dtype=np.int64)
    best[0] = 0
    positions = np.arange(full_needed + 1)
    for capacity in (int(c) for c in bins):
        new = np.full(full_needed + 1, -1, dtype=np.int64)
        reachable = best >= 0
        for placed in range(min(capacity // size, full_needed) + 1):
            extra = (capacity - placed * size) // rest
            targets = np.minimum(full_needed, positions + placed)
            np.maximum.at(new, targets[reachable], best[reachable] + extra)
        best = new
        if best[full_needed] >= rest_needed:
            return True
    return bool(best[full_needed] >= rest_needed)


@dataclass
class CapacityReport:
    """:func:`capacity` of one shape on one topology: ``shape``, ``topology`` (name), ``cluster``
    (the whole cluster as one domain), ``levels`` (label key → its domains, broadest level first)
    and ``resources`` (the shape's requested resources, the keys of every ``free`` map)."""

    shape: GangShape
    topology: str
    cluster: DomainCapacity
    levels: dict[str, list[DomainCapacity]]
    resources: list[str]


def _depth(index: ClusterIndex, level: str | None, what: str) -> int | None:
    if level is None:
        return None
    if level not in index.levels:
        raise CapacityError(f"{what} {quote(level)} is not a level of topology "
                            f"{index.topology.name if index.topology else '(none)'}; levels: "
                            f"{', '.join(index.levels) or 'none'}; fix: name one of them")
    return index.levels.index(level) + 1


def check_shape(index: ClusterIndex, shape: GangShape) -> tuple[int, int]:
    """``(workload depth, segment depth)`` of ``shape`` on ``index`` (0 = the whole cluster).
    Raises :class:`CapacityError` for a level the topology lacks, a segment level broader than the
    workload level (DESIGN.md §5), a size or pod count below 1, a resource no node has."""
    if shape.pods < 1 or shape.segment_size < 1:
        raise CapacityError(f"pods {shape.pods} and segment-size {shape.segment_size} must be positive integers")
    if shape.segment_size > shape.pods:
        raise CapacityError(f"segment-size {shape.segment_size} is larger than the gang's {shape.pods} pods "
                            "(DESIGN.md §5); fix: a segment size of at most pods")
    workload = _depth(index, shape.workload_level, "workload-level") or 0
    segment = _depth(index, shape.segment_level, "segment-level")
    segment = workload if segment is None else segment
    if segment < workload:
        raise CapacityError(f"segment-level {shape.segment_level} is broader than workload-level "
                            f"{shape.workload_level} (DESIGN.md §5, likely swapped); fix: swap them")
    missing = [r for r, v in shape.requests.items() if v > 0 and r not in index.col]
    if missing:
        raise CapacityError(f"no node of topology {index.topology.name if index.topology else '(none)'} has "
                            f"{quote(missing[0])}; fix: request a resource the nodes report in status.allocatable")
    return workload, segment


def capacity(index: ClusterIndex, shape: GangShape) -> CapacityReport:
    """Per domain of each level of ``index``'s topology (and the whole cluster): segments and
    gangs of ``shape`` that fit at once, free and stranded capacity (module docstring). Raises
    :class:`CapacityError` (:func:`check_shape`)."""
    workload, segment = check_shape(index, shape)
    requests = dict(shape.requests)
    requests.setdefault("pods", 1000)
    pod = PodRequest("capacity/shape", requests)
    q = index.req_vector(pod)
    assert q is not None
    eligible = index.eligible(pod)
    per_node = slots(index.free, q, eligible)
    resources = [r for r in index.resources if q[index.col[r]] > 0 and r != "pods"] or ["pods"]
    free = np.where(eligible[:, None], np.maximum(index.free, 0), 0)
    seg_totals = reduce_ranges(per_node, index.starts[segment])
    seg_of_node = index.dom[segment]
    levels: dict[str, list[DomainCapacity]] = {}
    cluster = None
    for depth in range(len(index.levels) + 1):
        rows = []
        level = index.level_name(depth)
        for domain in range(len(index.starts[depth]) if index.n else 0):
            first, end = index.domain_range(depth, domain)
            rows.append(_domain(index, shape, q, free, per_node, seg_totals, seg_of_node, resources,
                                depth, domain, first, end, workload, segment))
        if depth == 0:
            cluster = rows[0] if rows else DomainCapacity("cluster", "cluster", "", 0, 0, 0)
        else:
            levels[level] = rows
    assert cluster is not None
    return CapacityReport(shape, index.topology.name if index.topology else "", cluster, levels, resources)


def _domain(index: ClusterIndex, shape: GangShape, q: np.ndarray, free: np.ndarray, per_node: np.ndarray,
            seg_totals: np.ndarray, seg_of_node: np.ndarray, resources: list[str], depth: int, domain: int,
            first: int, end: int, workload: int, segment: int) -> DomainCapacity:
    """One row of :func:`capacity`."""
    size = shape.segment_size
    if depth <= segment:  # the segment-level domains inside this one, whole
        bins = seg_totals[int(seg_of_node[first]):int(seg_of_node[end - 1]) + 1]
    else:
        bins = np.array([int(per_node[first:end].sum())], dtype=np.int64)
    segments = int((bins // size).sum())
    if depth <= workload:  # gangs per workload-level domain inside this one
        gangs = 0
        for inner in range(int(index.dom[workload][first]), int(index.dom[workload][end - 1]) + 1):
            w_first, w_end = index.domain_range(workload, inner)
            w_bins = seg_totals[int(seg_of_node[w_first]):int(seg_of_node[w_end - 1]) + 1]
            gangs += most_gangs(w_bins, shape.pods, size)
    else:
        gangs = most_gangs(bins, shape.pods, size)
    parent = index.names[depth - 1][int(index.dom[depth - 1][first])] if depth > 1 else ""
    row = DomainCapacity(index.level_name(depth), index.names[depth][domain], parent, end - first, segments, gangs)
    for name in resources:
        column = index.col[name]
        total = int(free[first:end, column].sum())
        row.free[name] = total
        row.stranded[name] = total - segments * size * int(q[column])
        row.stranded_for_gangs[name] = total - gangs * shape.pods * int(q[column])
    return row


def report_document(report: CapacityReport) -> dict[str, Any]:
    """The report as JSON: ``shape``, ``topology``, ``resources``, ``cluster`` and ``levels``
    (``[{"level", "domains": [...]}]``, broadest first); resource values in the resource's units
    (GPUs, cores, bytes: milli-units / 1000)."""
    def units(values: dict[str, int]) -> dict[str, float | int]:
        return {k: (v // 1000 if v % 1000 == 0 else v / 1000) for k, v in values.items()}

    def row(d: DomainCapacity) -> dict[str, Any]:
        return {"domain": d.domain, "parent": d.parent, "nodes": d.nodes, "segments": d.segments, "gangs": d.gangs,
                "free": units(d.free), "stranded": units(d.stranded), "stranded_for_gangs": units(d.stranded_for_gangs)}

    return {"shape": report.shape.document(), "topology": report.topology, "resources": report.resources,
            "cluster": row(report.cluster),
            "levels": [{"level": level, "domains": [row(d) for d in rows]} for level, rows in report.levels.items()]}


#: The fields of ``--shape`` besides resource requests.
SHAPE_FIELDS = ("pods", "segment-size", "segment-level", "workload-level")
#: Resource names without a ``/`` that ``--shape`` takes as requests (Kubernetes' own resources).
PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")


def parse_shape(text: str) -> GangShape:
    """``pods=64,segment-size=8,nvidia.com/gpu=1,cpu=8,segment-level=KEY,workload-level=KEY`` →
    :class:`GangShape`. Every key that is not one of :data:`SHAPE_FIELDS` is a resource request (a
    Kubernetes quantity): a name with a ``/`` (``nvidia.com/gpu``), one of :data:`PLAIN_RESOURCES` or
    ``hugepages-*``. A key given twice is an error (not last-wins). Raises :class:`CapacityError`
    naming the part, the rule and the fix, also for ``segment-size=1`` with more than 1 pod (rule
    ``segment-size-too-small``; ``segment-size`` = ``pods`` is a gang without segments) and a
    fractional request of a whole-unit resource (:func:`~webhook.kube.quantity.is_integer_resource`)."""
    from webhook.kube.quantity import QuantityError, is_integer_resource, non_negative_quantity, to_milli

    fields: dict[str, str] = {}
    requests: dict[str, int] = {}
    example = "pods=64,segment-size=8,nvidia.com/gpu=1,segment-level=<label key>"
    seen: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise CapacityError(f"--shape part {quote(part)} is not KEY=VALUE; fix: e.g. {example}")
        if key in seen:
            raise CapacityError(f"--shape gives {key} twice ({quote(seen[key])}, then {quote(value)}); "
                                f"fix: give each key once, e.g. {example}")
        seen[key] = value
        if key in SHAPE_FIELDS:
            fields[key] = value
        elif "/" in key or key in PLAIN_RESOURCES or key.startswith("hugepages-"):
            try:
                quantity = non_negative_quantity(value)
            except QuantityError as exc:
                raise CapacityError(f"--shape {key}: {exc}") from None
            if is_integer_resource(key) and quantity.denominator != 1:
                raise CapacityError(f"--shape {key}={value}: {key} is counted in whole units (an extended resource: "
                                    f"kube-apiserver denies a request that is not an integer); fix: request a whole "
                                    f"number, e.g. {key}=1")
            requests[key] = to_milli(quantity, round_up=True)
            if requests[key] > MAX_REQUEST_MILLI:
                raise CapacityError(f"--shape {key}={value}: more than any node can have (at most {MAX_REQUEST_MILLI // 1000} "
                                    f"units are counted); fix: request what one pod asks, e.g. {key}=1")
        else:
            raise CapacityError(f"--shape key {quote(key)} is neither a field ({', '.join(SHAPE_FIELDS)}) nor a "
                                f"resource (a name with a '/', or {', '.join(PLAIN_RESOURCES)}); fix: e.g. {example}")
    numbers = {}
    for name in ("pods", "segment-size"):
        raw = fields.get(name)
        if raw is None or not raw.isdigit() or int(raw) < 1:
            raise CapacityError(f"--shape needs {name}=<positive integer>" + (f", got {quote(raw)}" if raw else "")
                                + f"; fix: e.g. {example}")
        numbers[name] = int(raw)
        if numbers[name] > MAX_PODS:
            raise CapacityError(f"--shape {name}={raw}: more than the {MAX_PODS} pods `place` expands (one gang of "
                                f"this shape); fix: e.g. {example}")
    if numbers["segment-size"] == 1 and numbers["pods"] > 1:
        raise CapacityError(f"--shape segment-size=1: a segment needs more than 1 pod (rule segment-size-too-small, "
                            f"DESIGN.md §5: the webhook denies it); fix: segment-size=2 or more, or "
                            f"segment-size={numbers['pods']} (the pods count) for a gang without segments")
    if not any(v > 0 for k, v in requests.items() if k != "pods"):
        raise CapacityError(f"--shape requests no resource; fix: name one, e.g. nvidia.com/gpu=1 ({example})")
    return GangShape(numbers["pods"], numbers["segment-size"], requests, fields.get("segment-level"),
                     fields.get("workload-level"))
