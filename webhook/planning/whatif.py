"""What-if and second opinion (DESIGN.md §13): does a workload fit now, and if not, which smallest
changes make it fit, each verified by placing the changed workload with the exact engine on the
same snapshot.

Entry point: :func:`what_if` ``(workload, snapshot, occupants, ...) -> WhatIf``.

Verdict (the second opinion on a gang another scheduler left pending): ``fits`` (a placement
exists on today's free capacity: shown), ``waiting-for-capacity`` (it fits on the empty cluster:
which resource in which domain, :func:`webhook.placement.shortfall.shortfall`) or ``never-fits``
(not even on the empty cluster).

Changes tried when it does not fit (each one a new manifest, :mod:`webhook.planning.edits`, that
goes through the webhook and the engine exactly as ``place`` takes it, so a value the kind does
not allow is denied there and dropped), in rank order — the workload's own constraints are kept
before they are weakened, and a smaller change of a kind before a larger one:

1. ``segment-size``: the nearest sizes below and above the current one that fit (at most
   :data:`SIZE_TRIES` sizes tried; sizes larger than the roomiest segment-level domain can hold now
   are skipped);
2. ``free-nodes``: the fewest busy nodes to free, with the pods and gangs on them
   (:mod:`webhook.planning.freeing`);
3. ``replicas``: fewer replicas for elastic kinds — a LeaderWorkerSet's ``spec.replicas`` (each
   group is its own gang) and a PyTorchJob with ``spec.elasticPolicy`` (workers above
   ``minReplicas`` dropped from the highest replica index);
4. ``segment-required``: the segment required level one level broader, then the same level made
   preferred;
5. ``workload-required``: the workload required level one level broader (or none), then made
   preferred.

Pure: no I/O, no kubernetes import.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.registry import gang_key
from webhook.admission.workload_api import pod_maps
from webhook.kube import kai_scheduler, kubeflow_org
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.demand import slots
from webhook.placement.engine import place, shared_domain
from webhook.placement.model import Gang, Placement, PlacementError
from webhook.placement.shortfall import NEVER_FITS, Shortfall, shortfall
from webhook.planning import edits
from webhook.planning.expand import Expansion, expand
from webhook.planning.freeing import Occupant, Shape, fewest_nodes_to_free
from webhook.planning.pipeline import admission_context, result_document
from webhook.planning.snapshot import Snapshot
from webhook.text.messages import quote
from webhook.topology.objects import StaticTopologyCatalog, Topology

FITS = "fits"
WAITING = "waiting-for-capacity"
NEVER = NEVER_FITS
DENIED = "denied"
#: Most segment sizes one what-if expands and places.
SIZE_TRIES = 12
#: Rank of each kind of change (module docstring): the first number of :attr:`Change.rank`.
KIND_RANK = {"segment-size": 1, "free-nodes": 2, "replicas": 3, "segment-required": 4, "workload-required": 5}


@dataclass(frozen=True)
class Change:
    """One change to the workload or the cluster. ``kind``: a key of :data:`KIND_RANK`; ``key``:
    the annotation or field changed (``"nodes"`` for ``free-nodes``); ``before`` / ``after``: its
    values (``None`` = not set); ``text``: one line; ``rank``: sort key (smaller = smaller
    change); for ``free-nodes``: ``nodes``, the ``pods`` on them, their ``gangs`` and ``proven``
    (the number of nodes is proven the fewest)."""

    kind: str
    key: str
    before: Any
    after: Any
    text: str
    rank: tuple[float, ...]
    nodes: tuple[str, ...] = ()
    pods: tuple[str, ...] = ()
    gangs: tuple[str, ...] = ()
    proven: bool | None = None

    def document(self) -> dict[str, Any]:
        """The change as JSON: ``kind``, ``key``, ``from``, ``to``, ``text`` (and ``nodes``,
        ``pods``, ``gangs``, ``proven`` for ``free-nodes``)."""
        doc: dict[str, Any] = {"kind": self.kind, "key": self.key, "from": self.before, "to": self.after,
                               "text": self.text}
        if self.kind == "free-nodes":
            doc.update(nodes=list(self.nodes), pods=list(self.pods), gangs=list(self.gangs), proven=self.proven)
        return doc


#: Where a change was verified: on today's free capacity, or on the empty cluster (every node
#: free), searched only when no change fits today (:func:`what_if`).
NOW = "now"
EMPTY = "empty-cluster"


@dataclass
class Verified:
    """A change and the placement the engine found with it (``placement.placed`` is true);
    ``on``: :data:`NOW` or :data:`EMPTY`, the capacity it was placed on."""

    change: Change
    placement: Placement
    manifest: dict[str, Any] | None = None
    on: str = NOW

    def document(self) -> dict[str, Any]:
        """``{"change": {...}, "fits": true, "on": "now"|"empty-cluster", "placement": <place -o json
        document>}``."""
        return {"change": self.change.document(), "fits": True, "on": self.on,
                "placement": result_document(self.placement, None)}


@dataclass
class WhatIf:
    """The answer of :func:`what_if`. ``fits``: placed as is; ``verdict``: :data:`FITS`,
    :data:`WAITING`, :data:`NEVER` or :data:`DENIED`; ``placement``: the engine's answer as is;
    ``reason``: why it does not fit now (``None`` when it fits); ``waiting_for``: resource, level and
    domain a waiting workload waits for; ``changes``: verified changes in rank order;
    ``no_change``: why nothing within the search bound fits (``None`` when a change fits or it fits);
    ``warnings``: the webhook's warnings for the workload as is. ``empty_reason``: for
    :data:`NEVER`, the engine's reason on the empty cluster (``reason`` is today's).
    ``pods``: the expanded pods' keys (``namespace/name``) and ``gangs`` their gang keys
    (:func:`webhook.admission.kinds.registry.gang_key`), so a caller can tell whether the dump holds
    them pending (a second opinion)."""

    fits: bool
    verdict: str
    placement: Placement
    reason: str | None = None
    waiting_for: dict[str, str] | None = None
    changes: list[Verified] = field(default_factory=list)
    no_change: str | None = None
    warnings: list[str] = field(default_factory=list)
    empty_reason: str | None = None
    pods: list[str] = field(default_factory=list)
    gangs: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 fits as is, 1 does not (with or without changes)."""
        return 0 if self.fits else 1

    def document(self) -> dict[str, Any]:
        """``{"fits", "verdict", "placement", "reason", "empty_reason", "waiting_for", "changes",
        "no_change"}``."""
        return {"fits": self.fits, "verdict": self.verdict,
                "placement": result_document(self.placement, self.reason), "reason": self.reason,
                "empty_reason": self.empty_reason, "waiting_for": self.waiting_for,
                "changes": [v.document() for v in self.changes], "no_change": self.no_change}


@dataclass
class Planner:
    """The fixed part of one what-if: the admission context ``place`` uses and the cluster index
    every candidate is placed on (its ``free`` is restored after each placement)."""

    catalog: StaticTopologyCatalog
    settings: AdmissionSettings
    user: str
    groups: list[str]
    runtimes: list[Mapping[str, Any]]
    index: ClusterIndex | None = None
    #: gang keys (:func:`webhook.admission.kinds.registry.gang_key`) to place; ``None`` = every gang of
    #: the workload. The advisory controller sets it to the pending gang, so that the workload's
    #: other gangs, running where they are (charged in the snapshot), are not placed a second time.
    only: frozenset[str] | None = None

    def expand(self, workload: Mapping[str, Any]) -> Expansion:
        """:func:`webhook.planning.expand.expand` in this context (only the gangs of :attr:`only`
        when set): :meth:`restrict` of :meth:`expand_all`."""
        return self.restrict(self.expand_all(workload))

    def expand_all(self, workload: Mapping[str, Any]) -> Expansion:
        """:func:`webhook.planning.expand.expand` in this context, every gang of ``workload``
        (:attr:`only` not applied). Raises as that function."""
        return expand(workload, self.catalog, self.settings, user=self.user, groups=self.groups,
                      runtimes=self.runtimes)

    def restrict(self, exp: Expansion) -> Expansion:
        """``exp`` with only the gangs of :attr:`only` and their pods: a new :class:`Expansion`
        (``exp`` itself unchanged, so that a memo of it can be restricted again); ``exp`` when
        :attr:`only` is ``None`` or the webhook denied it."""
        if self.only is None or exp.denied:
            return exp
        keys_of = {}
        for pod in exp.pods:
            meta = pod.get("metadata") or {}
            namespace = str(meta.get("namespace") or "default")
            labels, annotations = pod_maps(pod)
            keys_of[f"{namespace}/{meta.get('name')}"] = gang_key(namespace, labels, annotations)
        gangs = [g for g in exp.gangs if any(keys_of.get(p.key) in self.only for p in g.pods)]
        kept = {p.key for g in gangs for p in g.pods}
        pods = [pod for pod in exp.pods
                if f"{(pod.get('metadata') or {}).get('namespace') or 'default'}/"
                   f"{(pod.get('metadata') or {}).get('name')}" in kept]
        return replace(exp, gangs=gangs, pods=pods)

    def place_gangs(self, gangs: Sequence[Gang], index: ClusterIndex | None = None) -> Placement:
        """Every gang placed in order, each charged before the next (as ``place``), or the first
        one's failure; ``index.free`` restored."""
        index = index or self.index
        assert index is not None
        saved = index.free.copy()
        merged = Placement(placed=True)
        try:
            for gang in gangs:
                res = place(index, gang)
                merged.exact &= res.exact
                if not res.placed:
                    name = f"{gang.name}: " if len(gangs) > 1 else ""
                    return Placement(placed=False, reason=name + (res.reason or ""), exact=merged.exact)
                index.commit(res, gang.pods)
                merged.assignments.update(res.assignments)
                merged.segments.extend(res.segments)
        finally:
            index.free[:] = saved
        if merged.assignments:
            merged.workload_level, merged.workload_domain = shared_domain(index, list(merged.assignments.values()))
        return merged

    def try_manifest(self, manifest: dict[str, Any]) -> tuple[Placement, Expansion] | None:
        """The placement of an edited manifest, or ``None`` when the webhook denies it or it
        names another topology than the index's."""
        exp = self.expand(manifest)
        if exp.denied or self.index is None or not any(g.pods for g in exp.gangs):
            return None
        if exp.topology != (self.index.topology.name if self.index.topology else None):
            return None
        try:
            return self.place_gangs(exp.gangs), exp
        except PlacementError:
            return None


def planner_for(snapshot: Snapshot, *, user: str = "kubectl-user", groups: Sequence[str] = (),
                platform_users: Sequence[str] = (), platform_groups: Sequence[str] = (),
                default_topology: str | None = None, runtimes: Sequence[Mapping[str, Any]] = (),
                target: str = "kai") -> Planner:
    """The admission context of :func:`webhook.planning.pipeline.place_workload` (the snapshot's
    topologies, else the embedded default; the default topology chosen as ``place`` chooses it;
    ``target`` as ``place --target``: the webhook's ``--target``, which decides the targets a
    ``segments.dev/target`` label may name). Raises :class:`PlacementError` naming
    ``--default-topology`` when it is not a loaded topology."""
    catalog, settings = admission_context(snapshot, platform_users, platform_groups, default_topology, target=target)
    return Planner(catalog, settings, user, list(groups), list(runtimes))


def what_if(workload: dict[str, Any], snapshot: Snapshot, occupants: Mapping[str, list[Occupant]],
            planner: Planner, *, search_waiting: bool = True,
            index_for: Callable[[str | None, Topology | None], ClusterIndex] | None = None,
            expansion: Expansion | None = None) -> WhatIf:
    """Place ``workload`` on ``snapshot``; when it does not fit, classify it and search the
    changes of the module docstring. ``occupants``: node → pods on it
    (:func:`webhook.planning.freeing.read_occupants` of the same dump). ``search_waiting``: False
    leaves out the change search of a :data:`WAITING` workload (its verdict and ``waiting_for`` are
    the same; the advisory controller's line names no change for it). ``index_for(topology name,
    topology)``: the cluster index of ``snapshot`` for that topology, owned by this call (the
    advisory controller passes a copy of its ledger's, charged as the snapshot; default: built
    from ``snapshot.nodes``). ``expansion``: :meth:`Planner.expand` of ``workload`` in
    ``planner``'s context (restricted to :attr:`Planner.only`), made earlier and not changed since
    (the advisory controller's memo of an owner it advises again as capacity moves); default:
    expanded here. Raises
    :class:`~webhook.planning.expand.ExpandError` and :class:`PlacementError` for bad input, as
    ``place`` does."""
    exp = expansion if expansion is not None else planner.expand(workload)
    if exp.denied:
        return WhatIf(False, DENIED, Placement(placed=False), f"denied by the webhook: {exp.message}",
                      warnings=exp.warnings)
    if not any(g.pods for g in exp.gangs):
        named = exp.generated_name or (workload.get("metadata") or {}).get("name")
        raise PlacementError(f"{workload.get('kind')} {quote(named)} creates no "
                             "pods: nothing to place; fix: give it the pods it should run")
    topo = planner.catalog.get(exp.topology) if exp.topology else None
    if exp.topology and topo is None:
        raise PlacementError(f"topology {quote(exp.topology)} is not in the snapshot; known: "
                             f"{', '.join(planner.catalog.names()) or 'none'}")
    planner.index = index_for(exp.topology, topo) if index_for is not None else ClusterIndex(snapshot.nodes, topo)
    base = planner.place_gangs(exp.gangs)
    pods, gangs = _pods_and_gangs(exp)
    if base.placed:
        return WhatIf(True, FITS, base, warnings=exp.warnings, pods=pods, gangs=gangs)
    short = _classify(planner, exp.gangs)
    result = WhatIf(False, NEVER if short.kind == NEVER_FITS else WAITING, base, base.reason, warnings=exp.warnings,
                    pods=pods, gangs=gangs)
    if short.kind == NEVER_FITS:
        result.empty_reason = short.empty_reason
    else:
        result.waiting_for = {"resource": short.resource, "level": short.level, "domain": short.domain,
                              "text": short.text}
        if not search_waiting:
            return result
    found: list[Verified] = []
    found += _size_changes(planner, workload, exp)
    found += _free_changes(planner, exp, occupants)
    found += _replica_changes(planner, workload, exp)
    found += _level_changes(planner, workload, exp)
    if not found and short.kind == NEVER_FITS:  # none fits today, nor as is on the empty cluster:
        index = planner.index  # the changes that fit once every node is free (the verdict then: waiting)
        saved = index.free.copy()
        index.free[:] = index.alloc
        try:
            found += _size_changes(planner, workload, exp)
            found += _replica_changes(planner, workload, exp)
            found += _level_changes(planner, workload, exp)
            for verified in found:
                verified.on = EMPTY
            if not found:
                result.no_change = _why_nothing(planner, exp, short.text, "with every node free")
        finally:
            index.free[:] = saved
    elif not found:
        result.no_change = _why_nothing(planner, exp, short.text, "on today's free capacity")
    result.changes = sorted(found, key=lambda v: v.change.rank)
    return result


#: Most segments and nodes per segment one second-opinion line names (an Event holds 1,024 characters).
SEGMENTS_SHOWN = 8
NODES_SHOWN = 4
CHANGES_SHOWN = 3


def waiting_text(result: WhatIf) -> str:
    """What a :data:`WAITING` workload waits for: ``"<resource> in <level> <domain> (room for M of
    N pods like <pod> there now; it fits when those nodes are free)"`` (the shortfall's text without
    its engine reason); ``""`` when not waiting."""
    if not result.waiting_for:
        return ""
    return result.waiting_for["text"].split("; engine: ")[0].removeprefix("waiting for capacity: ")


def _shown(items: Sequence[str], most: int) -> str:
    extra = len(items) - most
    return ", ".join(items[:most]) + (f" and {extra} more" if extra > 0 else "")


def second_opinion(result: WhatIf) -> str:
    """The second opinion on a pending gang in one line (DESIGN.md §13), from the what-if's own
    verdict and placements (the one home of this text: ``controller --advise`` writes it as an Event
    and in ``segments.dev/gang-state``):

    * :data:`FITS`: ``"fits now on free capacity: segment 0 -> <level>=<domain> (<nodes>); ..."``
      (a gang without segments: ``"gang -> <level>=<domain> (<nodes>)"``), the engine's placement;
    * :data:`WAITING`: ``"waiting for capacity: <resource> in <level> <domain> (...)"``;
    * :data:`NEVER`: ``"can never fit, not even with every node free: <the verified changes>"``
      (or why no change fits);
    * :data:`DENIED`: ``"denied by the webhook: ..."``.

    At most :data:`SEGMENTS_SHOWN` segments, :data:`NODES_SHOWN` nodes each and
    :data:`CHANGES_SHOWN` changes are named (the rest counted)."""
    if result.verdict == FITS:
        placement = result.placement
        parts = []
        for seg in sorted(placement.segments, key=lambda s: (s.group, s.index)):
            nodes = sorted({placement.assignments[p] for p in seg.pods if p in placement.assignments})
            parts.append(f"segment {seg.index} -> {seg.level}={seg.domain} ({_shown(nodes, NODES_SHOWN)})")
        if not parts:
            nodes = sorted(set(placement.assignments.values()))
            where = f"{placement.workload_level}={placement.workload_domain}" if placement.workload_level else "cluster"
            parts.append(f"gang -> {where} ({_shown(nodes, NODES_SHOWN)})")
        extra = len(parts) - SEGMENTS_SHOWN
        return ("fits now on free capacity: " + "; ".join(parts[:SEGMENTS_SHOWN])
                + (f"; and {extra} more segments" if extra > 0 else ""))
    if result.verdict == WAITING:
        return f"waiting for capacity: {waiting_text(result)}"
    if result.verdict == NEVER:
        if result.changes:
            where = "" if result.changes[0].on == NOW else " (once every node is free)"
            texts = [f"{n}. {v.change.text}" for n, v in enumerate(result.changes, 1)]
            return (f"can never fit, not even with every node free; smallest changes that fit{where}: "
                    + "; ".join(texts[:CHANGES_SHOWN])
                    + (f"; and {len(texts) - CHANGES_SHOWN} more" if len(texts) > CHANGES_SHOWN else ""))
        return f"can never fit, not even with every node free; no change within the search bound fits: {result.no_change}"
    return result.reason or result.verdict


def _pods_and_gangs(exp: Expansion) -> tuple[list[str], list[str]]:
    """The expanded pods' ``namespace/name`` keys and their distinct gang keys (in first-seen order)."""
    pods: list[str] = []
    gangs: list[str] = []
    for pod in exp.pods:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        pods.append(f"{namespace}/{meta.get('name')}")
        labels, annotations = pod_maps(pod)
        key = gang_key(namespace, labels, annotations)
        if key is not None and key not in gangs:
            gangs.append(key)
    return pods, gangs


def _classify(planner: Planner, gangs: Sequence[Gang]) -> Shortfall:
    """:func:`webhook.placement.shortfall.shortfall` of the first gang that does not fit after the
    ones before it, with those charged (as ``place`` charges them); ``index.free`` restored."""
    index = planner.index
    assert index is not None
    saved = index.free.copy()
    try:
        for gang in gangs:
            res = place(index, gang)
            if not res.placed:
                return shortfall(index, gang, res, place)
            index.commit(res, gang.pods)
    finally:
        index.free[:] = saved
    raise PlacementError("every gang fits one by one, but not together: no gang to classify")


def _segment_size(exp: Expansion) -> tuple[int, int] | None:
    """``(resolved segment size, most segmented pods of one gang)``, or ``None`` when unsegmented."""
    sizes = {int(ann[kai_scheduler.SEGMENT_SIZE]) for pod in exp.pods
             for ann in [(pod.get("metadata") or {}).get("annotations") or {}]
             if ((pod.get("metadata") or {}).get("labels") or {}).get(kai_scheduler.SEGMENT_INDEX) is not None
             and str(ann.get(kai_scheduler.SEGMENT_SIZE, "")).isdigit()}
    segmented = max((sum(1 for p in g.pods if p.segment is not None) for g in exp.gangs), default=0)
    if len(sizes) != 1 or not segmented:
        return None
    return sizes.pop(), segmented


def _largest_segment_now(planner: Planner, exp: Expansion) -> int:
    """Most pods of the gang's main shape one domain of its segment required level holds now
    (an upper bound on any segment size that can fit now)."""
    index = planner.index
    assert index is not None
    gang = exp.gangs[0]
    depth = index.depth_of(gang.segment_required) if gang.segment_required else 0
    pod = next(p for p in gang.pods if p.segment is not None)
    q = index.req_vector(pod)
    if q is None or index.n == 0:
        return 0
    per_node = slots(index.free, q, index.eligible(pod))
    return int(np.add.reduceat(per_node, index.starts[depth or 0]).max())


def _size_changes(planner: Planner, workload: dict[str, Any], exp: Expansion) -> list[Verified]:
    """The nearest fitting segment sizes below and above the current one (module docstring)."""
    found = _segment_size(exp)
    if found is None:
        return []
    size, segmented = found
    largest = _largest_segment_now(planner, exp)
    order = sorted((s for s in range(2, segmented + 1) if s != size and s <= max(largest, 1)),
                   key=lambda s: (abs(s - size), s))
    out: list[Verified] = []
    done_below = done_above = False
    for tried, new in enumerate(order):
        if tried >= SIZE_TRIES or (done_below and done_above):
            break
        if (new < size and done_below) or (new > size and done_above):
            continue
        manifest = edits.with_segment_size(workload, kai_scheduler.SEGMENT_SIZE, size, new)
        outcome = planner.try_manifest(manifest)
        resolved = _segment_size(outcome[1]) if outcome is not None else None
        if outcome is None or not outcome[0].placed or resolved is None or resolved[0] != new:
            continue
        done_below |= new < size
        done_above |= new > size
        text = f"{kai_scheduler.SEGMENT_SIZE}: {new} (was {size})"
        change = Change("segment-size", kai_scheduler.SEGMENT_SIZE, size, new, text,
                        (KIND_RANK["segment-size"], abs(new - size) / size, new))
        out.append(Verified(change, outcome[0], manifest))
    return out


def _main_shape(planner: Planner, exp: Expansion) -> Shape:
    """The counting shape of :mod:`webhook.planning.freeing` for the expanded workload."""
    index = planner.index
    assert index is not None
    pods = [p for g in exp.gangs for p in g.pods]
    gang = exp.gangs[0]
    counts = Counter(tuple(sorted(p.requests.items())) for p in pods)
    common = counts.most_common(1)[0][0]
    main = next(p for p in pods if tuple(sorted(p.requests.items())) == common)
    sizes = _segment_size(exp)
    size = sizes[0] if sizes else 1
    segments = sum(len({p.segment for p in g.pods if p.segment is not None}) for g in exp.gangs) or len(pods)
    workload_depth = index.depth_of(gang.workload_required) or 0
    segment_depth = (index.depth_of(gang.segment_required) or workload_depth) if sizes else index.node_depth
    uniform = len(exp.gangs) == 1 and all((p.requests, p.tolerations, p.node_selector, p.node_affinity)
                                          == (main.requests, main.tolerations, main.node_selector, main.node_affinity)
                                          for p in pods)
    return Shape(main, len(pods), segments, size, workload_depth, max(segment_depth, workload_depth), uniform)


def _free_changes(planner: Planner, exp: Expansion, occupants: Mapping[str, list[Occupant]]) -> list[Verified]:
    """The fewest nodes to free (:func:`webhook.planning.freeing.fewest_nodes_to_free`)."""
    index = planner.index
    assert index is not None
    freed = fewest_nodes_to_free(index, _main_shape(planner, exp), lambda ix: planner.place_gangs(exp.gangs, ix))
    if freed is None:
        return []
    pods = [o for n in freed.nodes for o in occupants.get(n, [])]
    gangs = sorted({o.gang for o in pods if o.gang})
    proof = "the fewest" if freed.proven else f"found by the search; at least {freed.lower_bound} needed"
    text = (f"free {len(freed.nodes)} node{'s' if len(freed.nodes) != 1 else ''} ({', '.join(freed.nodes)}; "
            f"{proof}): remove {len(pods)} pod{'s' if len(pods) != 1 else ''}"
            + (f" of {', '.join(gangs)}" if gangs else ""))
    change = Change("free-nodes", "nodes", 0, len(freed.nodes), text,
                    (KIND_RANK["free-nodes"], len(freed.nodes) / max(1, len(freed.placement.assignments))),
                    tuple(freed.nodes), tuple(o.pod for o in pods), tuple(gangs), freed.proven)
    return [Verified(change, freed.placement)]


def _replica_changes(planner: Planner, workload: dict[str, Any], exp: Expansion) -> list[Verified]:
    """Fewer replicas for the elastic kinds (module docstring)."""
    kind = workload.get("kind")
    spec = workload.get("spec") if isinstance(workload.get("spec"), dict) else {}
    if kind == "LeaderWorkerSet" and len(exp.gangs) > 1:
        placed = _groups_that_fit(planner, exp.gangs)
        if placed < 1:
            return []
        manifest = edits.with_spec_value(workload, "replicas", placed)
        outcome = planner.try_manifest(manifest)
        if outcome is None or not outcome[0].placed:
            return []
        text = f"spec.replicas: {placed} (was {len(exp.gangs)}; each replica is its own gang)"
        change = Change("replicas", "spec.replicas", len(exp.gangs), placed, text,
                        (KIND_RANK["replicas"], 1 - placed / len(exp.gangs)))
        return [Verified(change, outcome[0], manifest)]
    elastic = spec.get("elasticPolicy") if isinstance(spec, dict) else None
    if kind != "PyTorchJob" or not isinstance(elastic, dict) or len(exp.gangs) != 1:
        return []
    return _fewer_workers(planner, exp, elastic)


def _groups_that_fit(planner: Planner, gangs: Sequence[Gang]) -> int:
    index = planner.index
    assert index is not None
    saved = index.free.copy()
    count = 0
    try:
        for gang in gangs:
            res = place(index, gang)
            if not res.placed:
                break
            index.commit(res, gang.pods)
            count += 1
    finally:
        index.free[:] = saved
    return count


def _fewer_workers(planner: Planner, exp: Expansion, elastic: Mapping[str, Any]) -> list[Verified]:
    """The most workers (at least ``elasticPolicy.minReplicas``, default 1) that fit, the highest
    replica indexes dropped first (the training operator scales an elastic job that way)."""
    index_of = {}
    for pod in exp.pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if str(labels.get(kubeflow_org.KF_REPLICA_TYPE, "")).lower() == "worker" and str(labels.get(kubeflow_org.KF_REPLICA_INDEX, "")).isdigit():
            index_of[f"{meta.get('namespace')}/{meta.get('name')}"] = int(labels[kubeflow_org.KF_REPLICA_INDEX])
    workers = len(index_of)
    low = elastic.get("minReplicas", 1)
    low = low if isinstance(low, int) and not isinstance(low, bool) and low >= 1 else 1
    gang = exp.gangs[0]

    def with_workers(count: int) -> Gang:
        return replace(gang, pods=[p for p in gang.pods if index_of.get(p.key, -1) < count])

    best: tuple[int, Placement] | None = None
    high = workers - 1
    while low <= high:  # more workers never fit where fewer do not: bisect
        middle = (low + high + 1) // 2
        res = planner.place_gangs([with_workers(middle)])
        if res.placed:
            best, low = (middle, res), middle + 1
        else:
            high = middle - 1
    if best is None:
        return []
    text = f"Worker replicas: {best[0]} (was {workers}; spec.elasticPolicy.minReplicas allows it)"
    change = Change("replicas", "Worker replicas", workers, best[0], text, (KIND_RANK["replicas"], 1 - best[0] / workers))
    return [Verified(change, best[1])]


def _level_changes(planner: Planner, workload: dict[str, Any], exp: Expansion) -> list[Verified]:
    """A required level one level broader, then made preferred (segment first, then workload)."""
    index = planner.index
    assert index is not None
    gang = exp.gangs[0]
    out: list[Verified] = []
    scopes = (("segment-required", kai_scheduler.SEGMENT_REQUIRED, kai_scheduler.SEGMENT_PREFERRED, gang.segment_required),
              ("workload-required", kai_scheduler.TOPOLOGY_REQUIRED, kai_scheduler.TOPOLOGY_PREFERRED, gang.workload_required))
    for kind, key, preferred, level in scopes:
        if not level:
            continue
        depth = index.depth_of(level) or 1
        broader = index.levels[depth - 2] if depth >= 2 else None
        tries: list[tuple[dict[str, Any], str | None, float, str]] = []
        if broader is not None:
            tries.append((edits.with_annotation(workload, key, broader), broader, 1.0,
                          f"{key}: {broader} (was {level})"))
        elif kind == "workload-required":
            tries.append((edits.with_annotation(workload, key, None), None, 1.0, f"no {key} (was {level})"))
        tries.append((edits.with_preferred_for_required(workload, key, preferred), f"preferred {level}", 1.5,
                      f"{key} made {preferred}: {level} (a soft constraint)"))
        for manifest, after, steps, text in tries:
            outcome = planner.try_manifest(manifest)
            if outcome is not None and outcome[0].placed:
                out.append(Verified(Change(kind, key, level, after, text, (KIND_RANK[kind], steps)), outcome[0], manifest))
                break
    return out


def _why_nothing(planner: Planner, exp: Expansion, short_text: str, where: str) -> str:
    """Why no change within the bound fits, on the index's capacity (:func:`what_if` calls it with
    every node free): the engine's reason with every required level dropped (a resource no domain
    has), else the classification's text. ``where``: the capacity the index holds, said in the text."""
    index = planner.index
    assert index is not None
    loose = [replace(g, workload_required=None, segment_required=None) for g in exp.gangs]
    res = planner.place_gangs(loose)
    if not res.placed:
        return f"not even without any required level, {where}: {res.reason}"
    return f"only dropping every required level would fit; the binding constraint: {short_text}"
