"""The advisory controller's second opinion (DESIGN.md §13, issue 36): for a gang another scheduler
(Kueue, the Workload API's kube-scheduler, KAI) leaves pending, what ``place --what-if`` says on the
same snapshot, written as one Event and the ``segments.dev/gang-state`` line on the gang's top owner.
No gate, no binding, no pod patch: only reads, Events and the owner's annotation.

Pure (no kubernetes import): :mod:`webhook.controller.runner` runs it live on its cache, and
``controller --once --advise --snapshot DUMP`` (:func:`advise_objects`) on a dump — one code path.

Rules:

* **Pending elsewhere** (:func:`pending_elsewhere`): a live pod (not terminated, not being deleted)
  that holds no node (no ``spec.nodeName``, not pinned by ``nodeSelector[kubernetes.io/hostname]``),
  is not held by this webhook's own gate (``segments.dev/placement``: the gating controller's), and
  is held by another scheduler: Kueue's admission gate (``kueue.x-k8s.io/admission``: not admitted),
  or its condition ``PodScheduled`` is ``False`` for another reason than ``SchedulingGated``
  (kube-scheduler with the Workload API, KAI: ``Unschedulable``; a gated pod's condition only
  repeats its gate). Kueue's TAS gate (``kueue.x-k8s.io/topology``) is not "pending": Kueue
  admitted the gang with a topology assignment and its TopologyUngater releases the pods within
  moments (beside a live Kueue, counting it gave every admitted gang a "fits now" Event, issue 36).
* **A pending gang** (:func:`pending_gangs`): the pods of one gang key
  (:func:`webhook.gating.decision.gang_key_of`, from the pods' labels) that all exist and are
  all pending elsewhere. "All exist": as many live pods as their ``segments.dev/gang-size`` (written
  under target ``gate``); pods without it (targets ``kueue``, ``kai``) are counted against the pods
  the owner's expansion makes for the gang (:func:`advise` gives ``None`` while some are missing).
  A gang with a member bound is not pending (a half-bound gang is its scheduler's business).
* **The verdict** (:func:`advise`): :func:`webhook.planning.whatif.what_if` of the gang's top owner
  workload as stored, restricted to that gang (:attr:`webhook.planning.whatif.Planner.only`: the
  owner's other gangs stay where they run, charged in the snapshot), on the snapshot every bound or
  pinned pod is charged to; its line is :func:`webhook.planning.whatif.second_opinion` (the one
  home of the text). "Fits" is said only when the engine placed the gang on that snapshot. The
  owner is admitted under the target its ``segments.dev/target`` label names
  (:func:`admission_target`, as ``place --target``): the webhook admitted it so, and a what-if
  under the default ``kai`` would deny a ``workload-api`` or ``gate`` label as ``target-unknown``
  (beside a live Workload API every refused gang got "denied by the webhook", issue 36).
* **Kueue's pending Workloads** (:func:`kueue_workload_pending`): under Kueue a Job, JobSet,
  PyTorchJob... stays suspended, without pods, until its ``workloads.kueue.x-k8s.io`` is admitted,
  so its gang is read from the Workload instead of pods: a Workload Kueue tried and did not admit
  (no ``status.admission``; condition ``QuotaReserved`` ``False``, which Kueue's scheduler sets with
  its reason when it cannot admit, ``pkg/scheduler/scheduler.go``: "couldn't assign flavors ...
  allows to fit only N out of M"), not finished, not deactivated (``spec.active: false``) and not
  being deleted. A Workload Kueue has not tried yet (no such condition) gets no opinion: most are
  admitted within milliseconds, and an opinion on each would be noise. Its gangs are those of its owner (the
  ``ownerReferences`` entry with ``controller: true``, climbed to the top owner) as ``place``
  expands the owner as stored (one home: :func:`advise` on each gang, with no live-pod count);
  Kueue's podSets are the owner's replicas and carry nothing the owner does not (kueue
  ``pkg/controller/jobframework``: the podSets are built from the job's pod templates).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from webhook.admission.kinds import registry
from webhook.admission.targets import KAI, TARGETS
from webhook.gating.decision import gang_key_of
from webhook.gating.reconcile import EventSpec, ObjectRef, OwnerPatch, TopOwner, controller_owner, owner_patch
from webhook.kube.kueue import KUEUE_GROUP
from webhook.kube.pods import gang_size, is_deleting, is_gated, is_pod, is_terminated, occupied_node, pod_ref
from webhook.kube.segments_dev import GANG_STATE, TARGET_KEY
from webhook.kube.shapes import Pod
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.model import PlacementError
from webhook.planning.expand import ExpandError, Expansion
from webhook.planning.freeing import Occupant
from webhook.planning.snapshot import Snapshot
from webhook.planning.whatif import DENIED, FITS, NEVER, WAITING, Planner, planner_for, second_opinion, what_if
from webhook.topology.objects import Topology

__all__ = ["ADVICE_REASONS", "ERROR", "KUEUE_GATES", "KUEUE_WORKLOAD_VERSION", "Advice", "Expansions",
           "admission_target", "advice_documents", "advice_writes", "advise", "advise_owner", "gang_keys", "is_kueue_workload",
           "kueue_pending_since", "kueue_workload_pending", "kueue_workload_word", "owner_of_objects",
           "pending_elsewhere", "pending_gangs", "ref_of"]

#: Kueue's scheduling gate of a pod not admitted yet (pod group integration); its TAS gate
#: ``kueue.x-k8s.io/topology`` (admitted, waiting for the TopologyUngater) is not one.
#: kubernetes-sigs/kueue ``pkg/controller/constants``.
KUEUE_GATES = ("kueue.x-k8s.io/admission",)
#: kube-scheduler's ``PodScheduled=False`` reason for a pod that still has a scheduling gate: the
#: gate's owner decides, not kube-scheduler (k8s.io/api core/v1 ``PodReasonSchedulingGated``).
SCHEDULING_GATED = "SchedulingGated"
#: The Workload version read (v1beta2: the storage version of kueue v0.17,
#: ``apis/kueue/v1beta2/workload_types.go``, ``+kubebuilder:storageversion``).
KUEUE_WORKLOAD_VERSION = "v1beta2"
#: The verdict of a gang whose second opinion could not be formed (owner not expandable).
ERROR = "error"
#: Event reason and type per verdict.
ADVICE_REASONS: dict[str, tuple[str, str]] = {
    FITS: ("SecondOpinionFitsNow", "Warning"),
    WAITING: ("SecondOpinionWaitingForCapacity", "Normal"),
    NEVER: ("SecondOpinionNeverFits", "Warning"),
    DENIED: ("SecondOpinionDenied", "Warning"),
    ERROR: ("SecondOpinionError", "Warning"),
}


def _gates(pod: Pod) -> list[str]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    return [str(g.get("name")) for g in gates if isinstance(g, Mapping)] if isinstance(gates, list) else []


def pending_elsewhere(pod: Pod) -> bool:
    """True when ``pod`` is pending under another scheduler (module docstring). Never raises."""
    if is_terminated(pod) or is_deleting(pod) or occupied_node(pod) is not None or is_gated(pod):
        return False
    if any(name in KUEUE_GATES for name in _gates(pod)):
        return True
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return any(isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") != SCHEDULING_GATED for c in (conditions if isinstance(conditions, list) else []))


def _size(pod: Pod) -> int | None:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    strings = {k: v for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(annotations, Mapping) else {}
    return gang_size(strings, registry.gang_size_keys())


def pending_gangs(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    """Gang key → its live pods, for every gang that is complete and wholly pending elsewhere
    (module docstring), sorted by key; the pods sorted by ``(namespace, name)``."""
    gangs: dict[str, list[Pod]] = {}
    for pod in pods:
        if not isinstance(pod, Mapping) or is_terminated(pod) or is_deleting(pod):
            continue
        key = gang_key_of(pod)
        if key is not None:
            gangs.setdefault(key, []).append(pod)
    out = {}
    for key in sorted(gangs):
        members = sorted(gangs[key], key=pod_ref)
        sizes = {s for s in map(_size, members) if s is not None}
        if len(sizes) > 1 or (sizes and len(members) != sizes.pop()):
            continue
        if all(map(pending_elsewhere, members)):
            out[key] = members
    return out


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return {str(c.get("type")): c for c in (conditions if isinstance(conditions, list) else [])
            if isinstance(c, Mapping)}


def is_kueue_workload(obj: Mapping[str, Any]) -> bool:
    """True for a ``kueue.x-k8s.io`` ``Workload`` (any version; not the Workload API's
    ``scheduling.k8s.io`` Workload of the same kind)."""
    return obj.get("kind") == "Workload" and str(obj.get("apiVersion") or "").startswith(KUEUE_GROUP + "/")


def kueue_workload_pending(workload: Mapping[str, Any]) -> bool:
    """True when Kueue tried ``workload`` and did not admit it (module docstring): no
    ``status.admission``, condition ``QuotaReserved`` ``False``, neither ``Finished`` nor
    ``Admitted`` ``True``, ``spec.active`` not ``false``, not being deleted. kueue v0.17
    ``apis/kueue/v1beta2/workload_types.go`` (``WorkloadQuotaReserved``, ``WorkloadAdmitted``,
    ``WorkloadFinished``; ``spec.active``). Never raises."""
    if not is_kueue_workload(workload) or is_deleting(workload):
        return False
    spec = workload.get("spec")
    if isinstance(spec, Mapping) and spec.get("active") is False:
        return False
    status = workload.get("status")
    if isinstance(status, Mapping) and status.get("admission"):
        return False
    conditions = _conditions(workload)
    if any(conditions.get(kind, {}).get("status") == "True" for kind in ("Admitted", "Finished")):
        return False
    return conditions.get("QuotaReserved", {}).get("status") == "False"


def kueue_pending_since(workload: Mapping[str, Any]) -> str:
    """When ``workload`` became pending (RFC 3339, seconds): the ``lastTransitionTime`` of its
    ``QuotaReserved=False`` condition (Kueue's first "cannot admit", and again after an eviction),
    else its ``creationTimestamp``; ``""`` when neither is there."""
    reserved = _conditions(workload).get("QuotaReserved", {})
    if reserved.get("status") == "False" and reserved.get("lastTransitionTime"):
        return str(reserved["lastTransitionTime"])
    meta = workload.get("metadata")
    return str(meta.get("creationTimestamp") or "") if isinstance(meta, Mapping) else ""


def kueue_workload_word(workload: Mapping[str, Any]) -> str:
    """Kueue's own word on a pending ``workload``: the message of its ``QuotaReserved=False`` (or
    ``Pending``) condition, e.g. ``couldn't assign flavors to pod set main: topology "t" allows to
    fit only 2 out of 16 pod(s)``; ``""`` when it says none."""
    conditions = _conditions(workload)
    for kind in ("QuotaReserved", "Pending"):
        condition = conditions.get(kind, {})
        if condition.get("status") == ("False" if kind == "QuotaReserved" else "True") and condition.get("message"):
            return str(condition["message"])
    return ""


@dataclass(frozen=True)
class Advice:
    """The second opinion on one pending gang: ``verdict`` (:data:`~webhook.planning.whatif.FITS`,
    ``WAITING``, ``NEVER``, ``DENIED`` or :data:`ERROR`) and ``line``, ``"gang <key>: <text>"`` with
    the text of :func:`webhook.planning.whatif.second_opinion`."""

    gang: str
    verdict: str
    line: str


_T = TypeVar("_T")


def gang_keys(exp: Expansion) -> list[str]:
    """The sorted gang keys (:func:`gang_key_of`) of the pods of ``exp``."""
    return sorted({key for key in map(gang_key_of, filter(is_pod, exp.pods)) if key is not None})


class Expansions:
    """A bounded memo of owner expansions (:meth:`webhook.planning.whatif.Planner.expand_all`) for
    the advisory controller, which advises a pending gang again each time capacity moves (at 5,000
    nodes a 1,024-pod owner took about 0.35 s to expand, its placement a tenth of that: issue 36).

    Keyed by the owner's content as stored (:meth:`key`): every field but
    ``metadata.resourceVersion``, ``metadata.managedFields`` and this controller's own
    ``segments.dev/gang-state`` annotation, which it rewrites on the owner as the capacity moves
    (a key with the resourceVersion would miss after each such write); and by the whole admission
    context of the planner (settings, user, groups and every topology of its catalog: a Topology
    edited or added is a new key). Not memoized: an owner without ``metadata.uid`` (a dump's
    object) and a planner given training runtimes (a TrainJob's runtime can change under the same
    TrainJob). At most ``max_pods`` pods are kept over all entries, the least recently used dropped
    first. Thread-safe. An expansion that raises is not kept."""

    def __init__(self, max_pods: int = 20_000) -> None:
        self.max_pods = max_pods
        self._entries: OrderedDict[Hashable, Expansion] = OrderedDict()
        self._derived: dict[Hashable, dict[Hashable, Any]] = {}  # memo key -> what is kept beside it
        self._pods = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(owner: Mapping[str, Any], planner: Planner) -> Hashable | None:
        """The memo key of ``owner`` in ``planner``'s context (class docstring); ``None`` when it
        is not memoized."""
        meta = owner.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if not isinstance(uid, str) or not uid or planner.runtimes:
            return None
        assert isinstance(meta, Mapping)
        kept = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields", "annotations")}
        annotations = meta.get("annotations")
        if isinstance(annotations, Mapping) and (others := {k: v for k, v in annotations.items() if k != GANG_STATE}):
            kept["annotations"] = others  # an owner whose only annotation is ours keys as one without any
        content = json.dumps({**owner, "metadata": kept}, sort_keys=True, default=str)
        catalog = tuple(planner.catalog.get(name) for name in planner.catalog.names())
        return uid, content, planner.settings, planner.user, tuple(planner.groups), catalog

    def restricted(self, owner: Mapping[str, Any], planner: Planner) -> Expansion:
        """:meth:`Planner.expand` of ``owner`` (restricted to ``planner.only``), the restriction
        kept with the expansion. Shared: never change it. Raises as ``expand_all``."""
        key = self.key(owner, planner)
        exp = self._expand(key, owner, planner)
        if key is None or planner.only is None:
            return planner.restrict(exp)
        return self._derive(key, ("only", planner.only), lambda: planner.restrict(exp))

    def gang_keys(self, owner: Mapping[str, Any], planner: Planner) -> list[str]:
        """The sorted gang keys of the pods ``owner`` makes (:func:`gang_key_of`), kept with the
        expansion. Raises as ``expand_all``."""
        key = self.key(owner, planner)
        exp = self._expand(key, owner, planner)
        return gang_keys(exp) if key is None else self._derive(key, ("keys",), lambda: gang_keys(exp))

    def _expand(self, key: Hashable | None, owner: Mapping[str, Any], planner: Planner) -> Expansion:
        if key is None:
            return planner.expand_all(dict(owner))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found
        exp = planner.expand_all(dict(owner))
        with self._lock:
            self.misses += 1
            if key not in self._entries and len(exp.pods) <= self.max_pods:
                self._entries[key] = exp
                self._pods += len(exp.pods)
                while self._pods > self.max_pods:
                    dropped_key, dropped = self._entries.popitem(last=False)
                    self._derived.pop(dropped_key, None)
                    self._pods -= len(dropped.pods)
        return exp

    def _derive(self, key: Hashable, name: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()`` kept as ``name`` beside the expansion of ``key`` while that is kept."""
        with self._lock:
            kept = self._derived.get(key)
            if kept is not None and name in kept:
                return cast(_T, kept[name])
        value = compute()
        with self._lock:
            if key in self._entries:
                self._derived.setdefault(key, {})[name] = value
        return value

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def admission_target(owner: Mapping[str, Any]) -> str:
    """The target the what-if admits ``owner`` (a workload as stored) under: the value of its
    ``metadata.labels["segments.dev/target"]`` when that names a target
    (:data:`webhook.admission.targets.TARGETS`), else ``kai`` (``place``'s default; a label naming
    no target is then denied with the webhook's own ``target-unknown`` reason). Never raises."""
    meta = owner.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(TARGET_KEY) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and value in TARGETS else KAI


def advise(key: str, owner: Mapping[str, Any], snapshot: Snapshot, occupants: Mapping[str, list[Occupant]],
           default_topology: str | None = None, runtimes: Sequence[Mapping[str, Any]] = (),
           live_pods: int | None = None,
           index_for: Callable[[str | None, Topology | None], ClusterIndex] | None = None,
           expansions: Expansions | None = None) -> Advice | None:
    """The second opinion on gang ``key`` (module docstring): ``owner``, its top owner workload as
    stored; ``snapshot``, the cluster with every bound or pinned pod charged (the gang's own pods,
    pending, are not); ``occupants``: node → pods on it (for the what-if's "free nodes" change);
    ``live_pods``: how many pods of the gang exist (``None``: not checked); ``index_for``: as
    :func:`webhook.planning.whatif.what_if` (the live controller's copy of its ledger's index);
    ``expansions``: the memo of the owner's expansion (:class:`Expansions`; default: expanded
    anew, as ``place``). Returns ``None`` when
    fewer exist than the owner makes for the gang (not pending under a scheduler: not all created).
    Never raises for bad input: an owner the what-if cannot expand gives :data:`ERROR` with why."""
    try:
        planner = planner_for(snapshot, default_topology=default_topology, runtimes=runtimes,
                              target=admission_target(owner))
        planner.only = frozenset({key})
        base = expansions.restricted(owner, planner) if expansions is not None else None
        result = what_if(dict(owner), snapshot, occupants, planner, search_waiting=False, index_for=index_for,
                         expansion=base)
    except (ExpandError, PlacementError) as exc:
        return Advice(key, ERROR, f"gang {key}: no second opinion: {exc}")
    if live_pods is not None and result.verdict != DENIED and live_pods < len(result.pods):
        return None
    return Advice(key, result.verdict, f"gang {key}: {second_opinion(result)}")


def advise_owner(owner: Mapping[str, Any], snapshot: Snapshot, occupants: Mapping[str, list[Occupant]],
                 default_topology: str | None = None, runtimes: Sequence[Mapping[str, Any]] = (),
                 index_for: Callable[[str | None, Topology | None], ClusterIndex] | None = None,
                 expansions: Expansions | None = None) -> list[Advice]:
    """The second opinion on every gang of ``owner`` (a top owner workload as stored whose Kueue
    Workload is pending: no pod of it exists, so no live-pod count), by gang key; one
    :data:`ERROR` advice keyed by the owner's ``namespace/name`` when it cannot be expanded.
    Arguments as :func:`advise`. Never raises for bad input."""
    try:
        planner = planner_for(snapshot, default_topology=default_topology, runtimes=runtimes,
                              target=admission_target(owner))
        keys = expansions.gang_keys(owner, planner) if expansions is not None else \
            gang_keys(planner.expand_all(dict(owner)))
    except (ExpandError, PlacementError) as exc:
        ref = ref_of(owner)
        return [Advice(f"{ref.namespace}/{ref.name}", ERROR, f"{ref.kind} {ref.namespace}/{ref.name}: "
                                                              f"no second opinion: {exc}")]
    out = []
    for key in keys:
        advice = advise(key, owner, snapshot, occupants, default_topology, runtimes, None, index_for, expansions)
        if advice is not None:
            out.append(advice)
    return out


def advice_writes(advice: Advice, owner: TopOwner, siblings: Mapping[str, str]) -> tuple[EventSpec, OwnerPatch | None]:
    """The Event on ``owner`` and the patch of its ``segments.dev/gang-state`` (``None`` when it
    shows the line already) for ``advice``; ``siblings``: the lines of the owner's other gangs."""
    reason, kind = ADVICE_REASONS[advice.verdict]
    event = EventSpec(owner.ref, kind, reason, advice.line[:1024])
    return event, owner_patch(owner, {**siblings, advice.gang: advice.line}, owner.annotation)


def ref_of(obj: Mapping[str, Any]) -> ObjectRef:
    """The :class:`ObjectRef` of an object as read (``apiVersion``, ``kind``, ``metadata``)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    meta = meta if isinstance(meta, Mapping) else {}
    return ObjectRef(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), str(meta.get("namespace") or ""),
                     str(meta.get("name") or ""), str(meta.get("uid") or ""))


def owner_of_objects(workload: Mapping[str, Any]) -> TopOwner | None:
    """``workload`` (a registry kind, as in a dump) as a :class:`TopOwner`, ``None`` for another kind."""
    description = registry.BY_KIND.get(str(workload.get("kind") or ""))
    if description is None:
        return None
    meta = workload.get("metadata") if isinstance(workload.get("metadata"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = annotations.get(GANG_STATE) if isinstance(annotations, Mapping) else None
    return TopOwner(ref_of(workload), description.resource, workload, value if isinstance(value, str) else None)


def _gangs_of(workload: Mapping[str, Any], snapshot: Snapshot, default_topology: str | None,
              runtimes: Sequence[Mapping[str, Any]]) -> set[str]:
    """The gang keys of the pods ``workload`` makes (as ``place`` expands it); empty when it cannot
    be expanded."""
    try:
        exp = planner_for(snapshot, default_topology=default_topology, runtimes=runtimes,
                          target=admission_target(workload)).expand(workload)
    except (ExpandError, PlacementError):
        return set()
    return set(gang_keys(exp))


def _dump_top_owner(obj: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]]) -> TopOwner | None:
    """The top owner of ``obj`` among ``workloads`` (a dump's objects): its controller owner,
    climbed while the owner has one of its own in the dump, by ``(kind, namespace, name)``;
    ``None`` when its first owner is not there or is no registry kind."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    namespace = str((meta or {}).get("namespace") or "")
    by_name = {(str(w.get("kind") or ""), namespace, str((w.get("metadata") or {}).get("name") or "")): w
               for w in workloads if str((w.get("metadata") or {}).get("namespace") or "") == namespace}
    found: TopOwner | None = None
    current = controller_owner(obj)
    for _ in range(8):
        if current is None:
            break
        stored = by_name.get((str(current.get("kind")), namespace, str(current.get("name"))))
        if stored is None:
            break
        found = owner_of_objects(stored) or found
        current = controller_owner(stored)
    return found


def advice_documents(pods: Sequence[Pod], workloads: Sequence[Mapping[str, Any]], snapshot: Snapshot,
                     occupants: Mapping[str, list[Occupant]], default_topology: str | None = None,
                     runtimes: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """``controller --once --advise``: what the advisory controller would write for every pending
    gang of ``pods`` (:func:`pending_gangs`), then for every gang of each pending Kueue Workload of
    ``workloads`` (:func:`kueue_workload_pending`), one document each, by gang key: ``{gang, owner
    ("Kind namespace/name"), verdict, event: {type, reason, message}, annotation}`` (the owner's
    ``segments.dev/gang-state`` after it; ``None`` when it says that already); a Kueue Workload's
    documents also hold ``kueue: {workload ("namespace/name"), says (Kueue's own word:
    :func:`kueue_workload_word`)}``. The owner is the workload of ``workloads`` (the dump's,
    ``-f``'s) whose pods carry the gang key, or the Kueue Workload's top owner there; a gang without
    one gets ``{gang, owner: None, verdict: "error", message}`` (the live controller reads the owner
    from the API server)."""
    pending = pending_gangs(pods)
    owners: dict[str, TopOwner] = {}
    for workload in workloads:
        owner = owner_of_objects(workload)
        if owner is None:
            continue
        for key in _gangs_of(dict(workload), snapshot, default_topology, runtimes):
            owners.setdefault(key, owner)
    docs: list[dict[str, Any]] = []
    lines: dict[tuple[str, str, str], dict[str, str]] = {}  # owner (kind, ns, name) -> gang -> line

    def document(advice: Advice, found: TopOwner) -> dict[str, Any]:
        where = (found.ref.kind, found.ref.namespace, found.ref.name)
        siblings = lines.setdefault(where, {})
        event, patch = advice_writes(advice, found, siblings)
        siblings[advice.gang] = advice.line
        return {"gang": advice.gang, "owner": f"{found.ref.kind} {found.ref.namespace}/{found.ref.name}",
                "verdict": advice.verdict,
                "event": {"type": event.type, "reason": event.reason, "message": event.message},
                "annotation": {GANG_STATE: patch.value} if patch is not None else None}

    for key in pending:
        # an owner the webhook denies makes no pods to key it by: the pods' controller owner then,
        # as the live advisor reads it (the line says the webhook's denial)
        found = owners.get(key) or _dump_top_owner(pending[key][0], workloads)
        if found is None:
            docs.append({"gang": key, "owner": None, "verdict": ERROR,
                         "message": f"gang {key}: no workload of this gang in the input; dump it with the pods "
                                    "(kubectl get nodes,pods,<kind> -A -o yaml) or add it with -f"})
            continue
        advice = advise(key, found.obj, snapshot, occupants, default_topology, runtimes, len(pending[key]))
        if advice is not None:
            docs.append(document(advice, found))
    for queued in workloads:
        if not kueue_workload_pending(queued):
            continue
        ref = ref_of(queued)
        kueue = {"workload": f"{ref.namespace}/{ref.name}", "says": kueue_workload_word(queued)}
        top = _dump_top_owner(queued, workloads)
        if top is None:
            docs.append({"gang": None, "owner": None, "verdict": ERROR, "kueue": kueue,
                         "message": f"Kueue Workload {ref.namespace}/{ref.name}: its owner is not in the input; "
                                    "dump it with the Workloads (kubectl get nodes,pods,workloads,<kind> -A -o yaml) "
                                    "or add it with -f"})
            continue
        for advice in advise_owner(top.obj, snapshot, occupants, default_topology, runtimes):
            if advice.gang not in pending:
                docs.append(document(advice, top) | {"kueue": kueue})
    return docs
