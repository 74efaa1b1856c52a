"""The controller's decision, as a pure function (DESIGN.md §9): cluster state in, patches out.

:func:`decide_gang` decides ONE gang on a :class:`~webhook.placement.occupancy.CapacityLedger`:
one :class:`Release` per gated pod when the engine places it (charged to the ledger as assumed
before it returns), or one :class:`Waiting` saying why not. The live controller
(:mod:`webhook.controller.runner`) runs it per gang from its work queue; :func:`decide` (``segment-webhook
controller --once --snapshot``) builds the ledger of a dump (:func:`ledger_of`) and runs it for
every gang in turn — one code path. No kubernetes or Flask import here (tests/unit/project/test_layout.py).

Rules:

* **Gang** (:func:`webhook.admission.kinds.registry.gang_key`, from each kind's description): the pods
  of one namespace sharing a gang key;
  a gang is considered when at least one of its pods carries the ``segments.dev/placement`` gate.
  Its size is the pods' ``segments.dev/gang-size`` (else LWS's ``size`` annotation).
* **Complete**: exactly ``size`` live pods (not ``Succeeded``/``Failed``, not being deleted),
  each either gated or already placed (bound, or pinned by ``nodeSelector[kubernetes.io/hostname]``:
  a release that a failed patch, a restart or another controller left half done). Otherwise the
  gang waits (``incomplete``, or ``invalid`` with the reason).
* **Used capacity**: :func:`webhook.kube.pods.occupied_node` — every live pod with
  ``spec.nodeName`` AND every live pod that is not bound, not gated by this webhook and pinned by
  ``nodeSelector[kubernetes.io/hostname]`` (released, whoever released it: kube-scheduler can
  only put it there) is charged to its node, as ``place --cluster`` charges it. Pods a gang
  releases are charged as soon as it is placed, so two gangs decided on one ledger never share
  capacity.
* **Can never fit / waiting for capacity**: an unplaced gang is tried on the empty cluster
  (:mod:`webhook.placement.shortfall`): ``never-fits`` with the smallest change that fits, or
  ``infeasible`` naming the resource and domain it waits for.
* **Placement**: the engine (:func:`webhook.placement.engine.place`) on that state, with every pod
  of the gang (already placed members are fixed to their node: a bound one by its ``nodeName``, a
  released one by its node selector; :func:`webhook.placement.eligibility.pod_request`). In
  :func:`decide`, gangs that were half released go first, then gangs in order of their last pod's
  creation.
* **Release** (KEP-3838): per gated pod ONE patch, :func:`webhook.gating.release.release_patch`; for
  a gang whose pods have no index labels (KubeRay before 1.6, DESIGN.md §3b) the controller forms
  the segments (:func:`_formed_segments`) and the patch also adds ``kai.scheduler/segment-index``.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, TypeVar

from webhook.admission.kinds import registry
from webhook.admission.kinds.registry import pod_role
from webhook.gating.release import release_patch
from webhook.kube import core, kai_scheduler, segments_dev
from webhook.kube.nodes import Node, SnapshotError, parse_node
from webhook.kube.pods import (
    gang_size,
    is_deleting,
    is_gated,
    is_terminated,
    occupied_node,
    pod_ref,
    pod_requests_milli,
)
from webhook.kube.quantity import QuantityError
from webhook.kube.shapes import Node as NodeObject
from webhook.kube.shapes import Pod
from webhook.placement.eligibility import pod_request
from webhook.placement.engine import Gang, PlacementError, PodRequest, place
from webhook.placement.occupancy import CapacityLedger
from webhook.placement.shortfall import NEVER_FITS, shortfall
from webhook.text.messages import quote
from webhook.topology.objects import Topology

INCOMPLETE = "incomplete"
#: the engine found no placement now, but the gang fits when its nodes are free: waiting for capacity
INFEASIBLE = "infeasible"
INVALID = "invalid"
#: :data:`INFEASIBLE` even on the empty cluster (every node free): waiting cannot help
__all__ = ["INCOMPLETE", "INFEASIBLE", "INVALID", "NEVER_FITS", "STRANDED", "GangDecision", "ParseCache", "PassResult",
           "Placed", "Release", "StrandedDecision", "StrandedPod", "Waiting", "decide", "decide_gang",
           "decide_stranded", "gang_key_of", "ledger_of", "pod_ref", "stranded_pod"]


@dataclass(frozen=True)
class Release:
    """One pod to release: ``patch`` is the RFC 6902 operation list to send (JSON patch)."""

    namespace: str
    name: str
    node: str
    patch: list[Any]
    gang: str


@dataclass(frozen=True)
class Waiting:
    """A gang left gated. ``kind``: ``incomplete`` (not every pod exists yet), ``infeasible`` (the
    engine found no placement now but would on the empty cluster: ``reason`` starts "waiting for
    capacity:" and names the resource and domain, then the engine's per-level reason; or its
    topology is not known), ``never-fits`` (no placement even with every node free: ``reason``
    starts "can never fit" and ends with the smallest change that fits, also in ``change``; see
    :mod:`webhook.placement.shortfall`) or ``invalid`` (the gang's pods disagree or are malformed;
    ``reason`` says how). ``pods``: ``(namespace, name)`` of its gated pods, which receive the
    Event."""

    gang: str
    kind: str
    reason: str
    pods: tuple[tuple[str, str], ...]
    change: str = ""


@dataclass(frozen=True)
class Placed:
    """A gang placed in this pass: its key, its pods' count, the latest ``creationTimestamp``
    among them (RFC 3339 text, ``""`` when unknown; the metric "seconds from the last pod's
    creation to release"), and the domain all its pods share (``level=domain``)."""

    gang: str
    pods: int
    last_created: str
    domain: str


@dataclass
class PassResult:
    """The outcome of one :func:`decide` call."""

    releases: list[Release] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    placed: list[Placed] = field(default_factory=list)
    #: objects left out as malformed (one line each: which object, what is wrong, e.g.
    #: ``Node "n0": status.allocatable[cpu]: ...``); the live controller logs them, the dry run
    #: (``controller --once``) exits 2 naming them
    skipped: list[str] = field(default_factory=list)


_Key = TypeVar("_Key")  # what ParseCache keeps an object's value under (name, resourceVersion)
_Value = TypeVar("_Value")  # the parsed value (or its problem text)
_Obj = TypeVar("_Obj", bound=Mapping[str, Any])  # the object parsed (a Node's dict, a Pod)


class ParseCache:
    """Parsed nodes and pod requests kept between passes, keyed by the object's name and
    ``metadata.resourceVersion``. The live controller keeps one so a pass does not re-read every
    node and bound pod; ``decide`` never changes a cached value (it charges copies). Entries of
    objects not seen in a pass are dropped. An object without a resourceVersion is kept for the
    pass only, by identity (a gang member charged to its node is not parsed again to be placed).
    ``add_node``/``add_requests`` take what another reader already parsed (``controller --once``:
    the dump's check, :func:`webhook.planning.snapshot.build_snapshot`), for the next pass."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[str, str], Node | str] = {}
        self.requests: dict[tuple[str, str, str], dict[str, int] | str] = {}
        self._seen_nodes: set[tuple[str, str]] = set()
        self._seen_requests: set[tuple[str, str, str]] = set()
        # this pass's objects without a resourceVersion: id -> (object, value); the object is held
        # so that its id is not reused by another object while the entry lives
        self._pass_nodes: dict[int, tuple[NodeObject, Node | str]] = {}
        self._pass_requests: dict[int, tuple[Pod, dict[str, int] | str]] = {}

    @staticmethod
    def _node_key(obj: NodeObject) -> tuple[str, str] | None:
        key = (str(_meta(obj).get("name") or ""), str(_meta(obj).get("resourceVersion") or ""))
        return key if key[1] else None

    @staticmethod
    def _requests_key(pod: Pod) -> tuple[str, str, str] | None:
        namespace, name = pod_ref(pod)
        key = (namespace, name, str(_meta(pod).get("resourceVersion") or ""))
        return key if key[2] else None

    @staticmethod
    def _lookup(obj: _Obj, key: _Key | None, kept: dict[_Key, _Value], seen: set[_Key],
                this_pass: dict[int, tuple[_Obj, _Value]], parse: Callable[[_Obj], _Value]) -> _Value:
        """The value cached for ``obj`` (``parse(obj)`` on a miss): in ``kept`` under ``key`` (marked
        ``seen`` in this pass), or, for an object without a resourceVersion (``key`` None), in
        ``this_pass`` by identity."""
        if key is None:
            entry = this_pass.get(id(obj))
            if entry is None or entry[0] is not obj:
                entry = this_pass[id(obj)] = (obj, parse(obj))
            return entry[1]
        seen.add(key)
        if key not in kept:
            kept[key] = parse(obj)
        return kept[key]

    def node(self, obj: NodeObject, parse: Callable[[NodeObject], Node | str]) -> Node | str:
        """The parsed Node (or its problem text) of ``obj``; ``parse(obj)`` on a miss."""
        return self._lookup(obj, self._node_key(obj), self.nodes, self._seen_nodes, self._pass_nodes, parse)

    def pod_requests(self, pod: Pod) -> dict[str, int] | str:
        """The requests in milli-units (or the problem text) of a bound or pinned ``pod``."""
        return self._lookup(pod, self._requests_key(pod), self.requests, self._seen_requests, self._pass_requests,
                            _requests_or_error)

    @staticmethod
    def _store(obj: _Obj, key: _Key | None, kept: dict[_Key, _Value], seen: set[_Key],
               this_pass: dict[int, tuple[_Obj, _Value]], value: _Value) -> None:
        """Cache ``value`` for ``obj`` where :meth:`_lookup` finds it."""
        if key is None:
            this_pass[id(obj)] = (obj, value)
        else:
            seen.add(key)
            kept[key] = value

    def add_node(self, obj: NodeObject, node: Node) -> None:
        """``node``, parsed from ``obj`` elsewhere (uncharged; never changed afterwards)."""
        self._store(obj, self._node_key(obj), self.nodes, self._seen_nodes, self._pass_nodes, node)

    def add_requests(self, pod: Pod, requests: dict[str, int]) -> None:
        """``requests`` of ``pod`` (:func:`webhook.kube.pods.pod_requests_milli`),
        computed elsewhere (never changed afterwards)."""
        self._store(pod, self._requests_key(pod), self.requests, self._seen_requests, self._pass_requests, requests)

    def end_pass(self) -> None:
        self.nodes = {k: v for k, v in self.nodes.items() if k in self._seen_nodes}
        self.requests = {k: v for k, v in self.requests.items() if k in self._seen_requests}
        self._seen_nodes, self._seen_requests = set(), set()
        self._pass_nodes, self._pass_requests = {}, {}


def _requests_or_error(pod: Pod) -> dict[str, int] | str:
    """A pod's requests in milli-units (``pods: 1000`` included), or the error text."""
    try:
        return pod_requests_milli(_spec(pod), "spec")
    except QuantityError as exc:
        return f"Pod {'/'.join(pod_ref(pod))}: {exc}"


# ----------------------------------------------------------------------------- pod helpers
def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _string_map(value: Any) -> dict[str, str]:
    """The string entries of a labels/annotations map (the API only holds strings; a dump's
    ``null`` or number is left out, never turned into ``"None"`` or expanded by ``str()``)."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def gang_key_of(pod: Pod) -> str | None:
    """The gang key of a pod dict (:func:`webhook.admission.kinds.registry.gang_key` on its namespace,
    labels and annotations), ``None`` for a pod of no gang."""
    namespace, _ = pod_ref(pod)
    return registry.gang_key(namespace, _string_map(_meta(pod).get("labels")),
                             _string_map(_meta(pod).get("annotations")))


# ----------------------------------------------------------------------------- gangs
@dataclass
class _Gang:
    key: str
    members: list[Pod] = field(default_factory=list)

    @property
    def gated(self) -> list[Pod]:
        return [p for p in self.members if is_gated(p)]

    @property
    def last_created(self) -> str:
        return max((str(_meta(p).get("creationTimestamp") or "") for p in self.members), default="")


def _group(pods: Iterable[Pod]) -> dict[str, _Gang]:
    """Gangs that hold at least one gated pod, with every live, not-deleting member."""
    gangs: dict[str, _Gang] = {}
    for pod in pods:
        if is_terminated(pod) or is_deleting(pod):
            continue
        key = gang_key_of(pod)
        if key is not None:
            gangs.setdefault(key, _Gang(key)).members.append(pod)
    return {k: g for k, g in gangs.items() if g.gated}


def _check_gang(gang: _Gang) -> Waiting | None:
    """Why the gang cannot be placed now, or ``None`` when it is complete."""
    refs = tuple(sorted(pod_ref(p) for p in gang.gated))
    fallbacks = registry.gang_size_keys()
    read = {gang_size(_string_map(_meta(p).get("annotations")), fallbacks) for p in gang.members}
    sizes = {size for size in read if size is not None}  # a pod without a valid size follows the others
    if len(sizes) != 1:
        why = f"pods disagree on {segments_dev.GANG_SIZE}: {', '.join(quote(str(s)) for s in sorted(sizes))}" if len(sizes) > 1 \
            else f"no pod carries a valid {segments_dev.GANG_SIZE}"
        return Waiting(gang.key, INVALID, why, refs)
    size = sizes.pop()
    count = len(gang.members)
    if count < size:
        return Waiting(gang.key, INCOMPLETE, f"{count} of {size} pods exist", refs)
    if count > size:
        return Waiting(gang.key, INVALID, f"{count} live pods carry this gang key but {segments_dev.GANG_SIZE} is {size}", refs)
    loose = sorted(pod_ref(p)[1] for p in gang.members if not is_gated(p) and occupied_node(p) is None)
    if loose:
        return Waiting(gang.key, INVALID, f"pod {loose[0]} of the gang is neither gated nor placed "
                                          f"(its gate was removed by someone else); release it or delete the gang", refs)
    return None


def _formed_segments(members: Sequence[Pod]) -> dict[tuple[str, str], int]:
    """DESIGN.md §3b "Pods without an index": when no member of a gang carries
    ``kai.scheduler/segment-index`` but they all name a topology and one segment size S (KubeRay
    before 1.6: no index labels), the controller forms the segments itself at placement time: the
    members' replicas (a KubeRay multi-host replica, :func:`webhook.admission.kinds.registry.replica_of`,
    kept whole; else each pod), in order of their first pod's name, fill segments of S pods.
    Returns ``{(namespace, name): segment}``, empty when the gang has its indices (or no size)."""
    sizes = set()
    for pod in members:
        labels = _string_map(_meta(pod).get("labels"))
        ann = _string_map(_meta(pod).get("annotations"))
        if kai_scheduler.SEGMENT_INDEX in labels or kai_scheduler.TOPOLOGY not in ann:
            return {}
        sizes.add(ann.get(kai_scheduler.SEGMENT_SIZE))
    if len(sizes) != 1 or not (size := next(iter(sizes))) or not size.isdigit() or int(size) < 2:
        return {}
    units: dict[str, list[tuple[str, str]]] = {}
    for pod in sorted(members, key=pod_ref):
        ref = pod_ref(pod)
        units.setdefault(registry.replica_of(_string_map(_meta(pod).get("labels"))) or "/".join(ref), []).append(ref)
    formed, segment, filled = {}, 0, 0
    for unit in sorted(units.values()):
        if filled and filled + len(unit) > int(size):
            segment, filled = segment + 1, 0
        for ref in unit:
            formed[ref] = segment
        filled += len(unit)
    return formed


def _segment_groups(members: Sequence[Pod]) -> dict[tuple[str, str], int]:
    """For a whole-object gang (members annotated ``segments.dev/gang-scope: workload``: a JobSet's
    replicatedJobs, a Ray cluster's worker groups, DESIGN.md §4.5): ``{(namespace, name): k}``, ``k``
    the position of the pod's group (its role: replicatedJob or worker group name) in name order,
    so that segment ``i`` of one group and segment ``i`` of another stay apart (as ``place`` keeps
    them, :func:`webhook.planning.expand.one_podgroup`). Empty for any other gang (group 0)."""
    if not any(_string_map(_meta(p).get("annotations")).get(segments_dev.GANG_SCOPE) == segments_dev.WHOLE_WORKLOAD
               for p in members):
        return {}
    roles = {}
    for pod in members:
        labels = _string_map(_meta(pod).get("labels"))
        roles[pod_ref(pod)] = registry.pod_rules(labels).role(labels) or ""
    order = {role: k for k, role in enumerate(sorted(set(roles.values())))}
    return {ref: order[role] for ref, role in roles.items()}


def _pod_request(pod: Pod, cache: ParseCache, formed: Mapping[tuple[str, str], int] | None = None,
                 group: int = 0) -> PodRequest:
    """The engine's view of one pod: :func:`webhook.placement.eligibility.pod_request` (the one
    reader ``place`` uses too: a bound member is pinned to its ``nodeName``, a released member by
    its own ``nodeSelector``), with its requests from ``cache`` and its segment from
    ``kai.scheduler/segment-index`` (or ``formed``: the segments the controller formed for a gang
    without index labels, :func:`_formed_segments`). Raises ``ValueError`` naming the pod."""
    namespace, name = pod_ref(pod)
    labels = _string_map(_meta(pod).get("labels"))
    requests = cache.pod_requests(pod)
    if isinstance(requests, str):
        raise ValueError(requests)
    if formed and (namespace, name) in formed:
        labels = {**labels, kai_scheduler.SEGMENT_INDEX: str(formed[(namespace, name)])}
    raw_segment = labels.get(kai_scheduler.SEGMENT_INDEX)
    segment = None
    if raw_segment is not None:
        if not raw_segment.isdigit():
            raise ValueError(f'Pod {namespace}/{name}: metadata.labels["{kai_scheduler.SEGMENT_INDEX}"] = {quote(raw_segment)} '
                             "is not a whole number (the webhook writes 0, 1, ...)")
        segment = (group, int(raw_segment))
    request = pod_request(pod, requests, segment, pod_role(labels))  # raises PlacementError (a ValueError)
    return replace(request, key=f"{namespace}/{name}")


def _gang_constraints(gang: _Gang, default_topology: str | None,
                      formed: Mapping[tuple[str, str], int] | None = None) -> tuple[str | None, dict[str, str | None]]:
    """(topology name, engine keyword arguments) from the members' annotations (a member of
    ``formed`` counts as segmented)."""
    topology = required = preferred = seg_required = seg_preferred = None
    for pod in sorted(gang.members, key=pod_ref):
        ann = _string_map(_meta(pod).get("annotations"))
        labels = _string_map(_meta(pod).get("labels"))
        if formed and pod_ref(pod) in formed:
            labels = {**labels, kai_scheduler.SEGMENT_INDEX: str(formed[pod_ref(pod)])}
        topology = topology or ann.get(segments_dev.GANG_TOPOLOGY)
        required = required or ann.get(segments_dev.GANG_REQUIRED)
        preferred = preferred or ann.get(segments_dev.GANG_PREFERRED)
        if kai_scheduler.SEGMENT_INDEX in labels:
            topology = topology or ann.get(kai_scheduler.TOPOLOGY)
            seg_required = seg_required or ann.get(kai_scheduler.SEGMENT_REQUIRED)
            seg_preferred = seg_preferred or ann.get(kai_scheduler.SEGMENT_PREFERRED)
    return topology or default_topology, {
        "workload_required": required, "workload_preferred": preferred,
        "segment_required": seg_required, "segment_preferred": seg_preferred,
    }


# ----------------------------------------------------------------------------- capacity
def _parse_node(obj: NodeObject) -> Node | str:
    """One node as the engine reads it (:func:`webhook.kube.nodes.parse_node`), or the
    error text (``Node "n0": status.allocatable[cpu]: ...``)."""
    try:
        return parse_node(obj)
    except SnapshotError as exc:
        return str(exc)


def ledger_of(nodes: Iterable[NodeObject], pods: Iterable[Pod], skipped: list[str],
              cache: ParseCache) -> CapacityLedger:
    """The :class:`CapacityLedger` of a cluster state: every well-formed node, every pod charged
    where it is (:func:`webhook.kube.pods.occupied_node`). A malformed node, or the bad
    request of a pod that occupies a node, adds one line to ``skipped`` and is left out."""
    parsed = []
    for obj in nodes:
        node = cache.node(obj, _parse_node)
        if isinstance(node, str):
            skipped.append(node)
        else:
            parsed.append(node)
    ledger = CapacityLedger(parsed)
    for pod in pods:
        node_name = occupied_node(pod)
        if node_name is None:
            continue
        requests = cache.pod_requests(pod)
        if isinstance(requests, str):
            skipped.append(requests)
            continue
        ledger.observe(pod_ref(pod), node_name, requests)
    return ledger


@dataclass(frozen=True)
class GangDecision:
    """What :func:`decide_gang` decided for one gang: ``releases`` (one per gated pod, when it
    was placed; their capacity is already assumed in the ledger), ``placed`` (when placed),
    ``waiting`` (when left gated), or none of them (no gated pod: nothing to do)."""

    gang: str
    releases: tuple[Release, ...] = ()
    placed: Placed | None = None
    waiting: Waiting | None = None
    #: ``((namespace, name), node, requests in milli-units)`` per release: the capacity it takes
    charges: tuple[tuple[tuple[str, str], str, dict[str, int]], ...] = ()


def decide_gang(key: str, pods: Iterable[Pod], ledger: CapacityLedger,
                catalog: Mapping[str, Topology], default_topology: str | None, cache: ParseCache, *,
                assume: bool = True) -> GangDecision:
    """Decide one gang (DESIGN.md §9): the per-gang step of :func:`decide` and of the live
    controller's reconcile (one code path).

    ``key``: the gang key; ``pods``: the pods carrying it (terminated and deleting ones are left
    out here); ``ledger``: the capacity every other pod holds (this gang's placed members
    included: they are given back while the gang is placed, then taken again); ``catalog``: known
    Topologies by name. When placed, every gated pod's release is charged to the ledger as
    assumed (:meth:`CapacityLedger.assume`) before this returns, so the next gang decided on the
    same ledger never takes the same capacity; with ``assume=False`` the ledger is left as it was
    found and the caller charges :attr:`GangDecision.charges` itself (the live controller's pure
    reconcile, :mod:`webhook.gating.reconcile`). Never raises for malformed pods: they make
    the gang ``invalid``.
    """
    gang = _Gang(key, [p for p in pods if not is_terminated(p) and not is_deleting(p)])
    if not gang.gated:
        return GangDecision(key)
    why = _check_gang(gang)
    if why is not None:
        return GangDecision(key, waiting=why)
    refs = tuple(sorted(pod_ref(p) for p in gang.gated))
    members = sorted(gang.members, key=pod_ref)
    formed = _formed_segments(members)
    try:
        groups = _segment_groups(members)
        requests = [_pod_request(p, cache, formed, groups.get(pod_ref(p), 0)) for p in members]
    except ValueError as exc:
        return GangDecision(key, waiting=Waiting(key, INVALID, str(exc), refs))
    topology_name, constraints = _gang_constraints(gang, default_topology, formed)
    topology = catalog.get(topology_name) if topology_name else None
    if topology_name and topology is None:
        known = ", ".join(quote(n) for n in sorted(catalog)) or "none"
        return GangDecision(key, waiting=Waiting(key, INFEASIBLE, f"topology {quote(topology_name)} is not known "
                                                                  f"(known: {known})", refs))
    index = ledger.index(topology_name, topology)
    # members already placed are part of the gang: give their capacity back while it is placed
    fixed = [c for c in (ledger.charged(pod_ref(p)) for p in members if occupied_node(p) is not None) if c]
    ledger.give_back(fixed, -1)
    engine_gang = Gang(pods=requests, name=key, **constraints)
    try:
        placement = place(index, engine_gang)
        if not placement.placed:
            short = shortfall(index, engine_gang, placement, place)
            return GangDecision(key, waiting=Waiting(key, NEVER_FITS if short.kind == NEVER_FITS else INFEASIBLE,
                                                     short.text, refs, short.change))
    except PlacementError as exc:
        return GangDecision(key, waiting=Waiting(key, INVALID, str(exc), refs))
    finally:
        ledger.give_back(fixed, 1)
    releases = []
    try:
        for pod in members:
            if is_gated(pod):
                namespace, name = pod_ref(pod)
                node = placement.assignments[f"{namespace}/{name}"]
                patch = release_patch(pod, node)
                if (namespace, name) in formed:  # the segment the controller formed, labelled with the release
                    patch.append({"op": "add", "path": "/metadata/labels/" + kai_scheduler.SEGMENT_INDEX.replace("/", "~1"),
                                  "value": str(formed[(namespace, name)])})
                releases.append(Release(namespace, name, node, patch, key))
    except ValueError as exc:  # a gated pod that selects another host than the engine chose
        return GangDecision(key, waiting=Waiting(key, INVALID, f"pod {namespace}/{name}: {exc}", refs))
    by_key = {r.key: r for r in requests}
    charges = tuple(((r.namespace, r.name), r.node, dict(by_key[f"{r.namespace}/{r.name}"].requests)) for r in releases)
    if assume:
        for ref, node, milli in charges:
            ledger.assume(ref, node, milli)
    domain = f"{placement.workload_level}={placement.workload_domain}"
    return GangDecision(key, tuple(releases), Placed(key, len(members), gang.last_created, domain), charges=charges)


# ----------------------------------------------------------------------------- stranded pods
#: A released gang with a pod that kube-scheduler cannot bind where it was pinned (DESIGN.md §9)
STRANDED = "stranded"


@dataclass(frozen=True)
class StrandedPod:
    """A released pod of a gang that cannot bind where the controller pinned it: not gated, not
    bound, pinned by ``nodeSelector[kubernetes.io/hostname]`` to ``node``, and its condition
    ``PodScheduled`` is ``False`` with reason ``Unschedulable`` (kube-scheduler's
    ``message``, e.g. "0/48 nodes are available: 1 Insufficient nvidia.com/gpu, 47 node(s)
    didn't match Pod's node affinity/selector"), since ``since`` (RFC 3339, the condition's
    ``lastTransitionTime``). ``uid``: the pod's, for a delete that cannot hit its replacement;
    ``recreated``: it has a controller owner (``ownerReferences[].controller``), which creates it
    again when it is deleted."""

    namespace: str
    name: str
    uid: str
    node: str
    message: str
    since: str
    recreated: bool


def stranded_pod(pod: Pod) -> StrandedPod | None:
    """``pod`` as a :class:`StrandedPod`, ``None`` when it is not one (gated, bound, terminated,
    being deleted, pinned nowhere, or not reported ``Unschedulable``). Never raises."""
    if is_gated(pod) or is_terminated(pod) or is_deleting(pod) or _spec(pod).get("nodeName"):
        return None
    selector = _spec(pod).get("nodeSelector")
    node = selector.get(core.HOSTNAME) if isinstance(selector, Mapping) else None
    if not isinstance(node, str) or not node:
        return None
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if (isinstance(condition, Mapping) and condition.get("type") == "PodScheduled"
                and condition.get("status") == "False" and condition.get("reason") == "Unschedulable"):
            namespace, name = pod_ref(pod)
            owners = _meta(pod).get("ownerReferences")
            recreated = any(isinstance(o, Mapping) and o.get("controller") is True
                            for o in (owners if isinstance(owners, list) else []))
            return StrandedPod(namespace, name, str(_meta(pod).get("uid") or ""), node,
                               str(condition.get("message") or ""), str(condition.get("lastTransitionTime") or ""),
                               recreated)
    return None


@dataclass(frozen=True)
class StrandedDecision:
    """What to do about a gang's stranded pods (:func:`decide_stranded`): ``delete`` the ones due
    whose controller creates them again (their replacements are gated at CREATE by the webhook and
    placed again around the members already bound: the gang's usual path); ``kept``: the ones due
    that nothing would create again (reported, never deleted); ``line``: what the owner shows
    (``""`` while every stranded pod is in its grace); ``wait``: seconds until the next one is due
    (``None`` when none waits)."""

    delete: tuple[StrandedPod, ...] = ()
    kept: tuple[StrandedPod, ...] = ()
    line: str = ""
    wait: float | None = None


def decide_stranded(pods: Iterable[Pod], now: float, grace: float) -> StrandedDecision | None:
    """DESIGN.md §9 (amended, issue 37): a pod the gate does not hold can be bound onto a node
    between the controller's decision and its release's bind; the released pod pinned there then
    waits forever, its gang half bound. A released pod cannot be moved (no gate: its spec is
    immutable but for gates, KEP-3838), so the recovery is to delete it: its controller creates it
    again, the webhook gates the new pod, and the controller places it with the bound members fixed
    where they are (:func:`decide_gang`), charged on the ledger as every bound pod is: nothing is
    booked twice. A pod is due once it has been ``Unschedulable`` for ``grace`` seconds (``now``:
    seconds since the epoch); a pod no controller would create again is only reported.

    ``pods``: the gang's pods. Returns ``None`` when none is stranded."""
    live = [p for p in pods if not is_terminated(p) and not is_deleting(p)]
    found = sorted((s for s in map(stranded_pod, live) if s is not None), key=lambda s: (s.namespace, s.name))
    if not found:
        return None
    due, waits = [], []
    for pod in found:
        since = _epoch(pod.since)
        left = 0.0 if since is None else since + grace - now
        if left > 0:
            waits.append(left)
        else:
            due.append(pod)
    wait = min(waits) if waits else None
    if not due:
        return StrandedDecision(wait=wait)
    delete = tuple(p for p in due if p.recreated)
    kept = tuple(p for p in due if not p.recreated)
    bound = sum(1 for p in live if _spec(p).get("nodeName"))
    parts = [f"pod {p.name} released to node {p.node} no longer fits there"
             + (f" ({p.message})" if p.message else "") for p in due]
    line = f"stranded: {'; '.join(parts)}; {bound} of {len(live)} pods bound"
    if delete:
        names = ", ".join(p.name for p in delete)
        line += f"; deleted {names} so that its controller creates it again, to be placed again around the bound pods"
    if kept:
        names = ", ".join(p.name for p in kept)
        line += (f"; {names} has no controller to create it again: delete it, and create it again without "
                 "the node selector")
    return StrandedDecision(delete, kept, line, wait)


def _epoch(text: str) -> float | None:
    """RFC 3339 ``YYYY-MM-DDTHH:MM:SSZ`` in seconds since the epoch, ``None`` when unreadable."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


# ----------------------------------------------------------------------------- the pass
def _objects(items: Iterable[Any]) -> list[Any]:
    """The items that are objects (mappings), still untyped (each is read as what its caller says)."""
    return [item for item in items if isinstance(item, Mapping)]


def decide(nodes: Iterable[Any], pods: Iterable[Any], topologies: Iterable[Topology], *,
           default_topology: str | None = None, skip: Container[str] = (), cache: ParseCache | None = None) -> PassResult:
    """Every gang of a cluster state, decided one after the other on one ledger (DESIGN.md §9):
    ``controller --once``'s pass, built from :func:`ledger_of` and :func:`decide_gang`, the
    steps the live controller runs per gang.

    ``nodes`` / ``pods``: Node and Pod objects as dicts (``kind`` may be absent, as in list
    items; typed ``Any``, as read from a file or an expansion, and read as
    :class:`~webhook.kube.shapes.Node` s and :class:`~webhook.kube.shapes.Pod` s, each field
    checked by its reader); ``topologies``: the known :class:`Topology` objects; ``default_topology``: the
    topology of a gang whose pods name none (``None``: place by nodes alone); ``skip``: gang keys
    not to attempt (their pods are still charged where placed); ``cache``: a :class:`ParseCache`
    (a fresh one by default). Returns a :class:`PassResult`: ``releases`` for every gated pod of
    every gang placed (one KEP-3838 patch each), ``waiting`` for every gang left gated (sorted by
    gang key), ``placed`` per placed gang, ``skipped`` malformed objects. Gangs that were half
    released go first, then gangs in order of their last pod's creation. Never raises for
    malformed objects: they are skipped or reported as an ``invalid`` gang.
    """
    pods = _objects(pods)
    result = PassResult()
    cache = cache if cache is not None else ParseCache()
    ledger = ledger_of(_objects(nodes), pods, result.skipped, cache)
    catalog = {t.name: t for t in topologies}
    ready = []
    for key, gang in _group(pods).items():
        if key not in skip:
            half_released = len(gang.gated) < len(gang.members)
            ready.append((not half_released, gang.last_created, key, gang))
    ready.sort(key=lambda item: item[:3])
    for _, _, key, gang in ready:
        decision = decide_gang(key, gang.members, ledger, catalog, default_topology, cache)
        result.releases.extend(decision.releases)
        if decision.placed is not None:
            result.placed.append(decision.placed)
        if decision.waiting is not None:
            result.waiting.append(decision.waiting)
    result.waiting.sort(key=lambda w: w.gang)
    cache.end_pass()
    return result
