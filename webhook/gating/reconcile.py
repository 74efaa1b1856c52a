"""The controller's reconcile of one gang, as a pure function (DESIGN.md §9): a view of the cache in,
a :class:`Result` out — the patches to send, the Events to write, the state to show on the gang's
top owner, when to look again. No I/O: the runner (:mod:`webhook.controller.runner`) sends what it
says.

The shape of controller-runtime's ``reconcile.Reconciler`` (``pkg/reconcile/reconcile.go`` at
``86a0d40e``:
``Reconcile(ctx, Request) (Result, error)`` with ``Result.RequeueAfter``), with the writes a Go
reconciler makes itself returned as data instead, so that a test states a whole reconcile as one
literal :class:`Result`.

**The state a user sees** (DESIGN.md §9, last bullet). One line per gang, on the gang's top owner
workload (the object at the top of its pods' controller ``ownerReferences``: PyTorchJob,
LeaderWorkerSet, JobSet / TrainJob, RayCluster / RayJob, MPIJob, DistributedWorkload), as an Event
and in the annotation :data:`GANG_STATE` (an annotation, not a status condition: the CRDs' status
subresources belong to their operators, and a merge patch of ``metadata.annotations`` works for
every kind). A gang whose top owner could not be read gets its Event on one pod (the first gated
one by name) and no annotation. The lines:

* ``GangIncomplete`` (Normal): "waiting for N more pods (M of S exist): <names>" — the names the
  owner's operator gives them (:attr:`webhook.admission.kinds.description.KindDescription.controller_pods`
  of the owner as read), when the owner was read; written once the gang has stayed incomplete for
  ``incomplete_grace`` seconds after its newest pod was created (an operator creating the pods one
  by one is not reported);
* ``PlacementInfeasible`` (Warning): "waiting for capacity: <resource> in <level> <domain> ..."
  (:mod:`webhook.placement.shortfall`);
* ``PlacementNeverFits`` (Warning): "can never fit ... <the smallest change that fits>";
* ``GangInvalid`` (Warning): why the pods disagree or are malformed;
* ``GangReleased`` (Normal): "released N pods to <level>=<domain>", written once every release
  patch was accepted.

Events are deduplicated and counted by the runner's recorder (:mod:`webhook.controller.events`),
so the same line reported again raises the Event's ``count``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from webhook.admission.kinds import registry
from webhook.errors import SegmentWebhookError
from webhook.gating.decision import (
    INCOMPLETE,
    INFEASIBLE,
    INVALID,
    NEVER_FITS,
    STRANDED,
    ParseCache,
    Placed,
    Release,
    StrandedPod,
    Waiting,
    decide_gang,
    decide_stranded,
    pod_ref,
)
from webhook.kube.pods import gang_size, is_deleting, is_gated, is_terminated
from webhook.kube.segments_dev import GANG_STATE
from webhook.kube.shapes import OwnerReference, Pod
from webhook.placement.occupancy import CapacityLedger
from webhook.topology.objects import Topology

__all__ = ["EVENT_REASONS", "GANG_STATE", "RELEASED", "EventSpec", "GangView", "ObjectRef", "OwnerPatch", "controller_owner",
           "Result", "TopOwner", "expected_pod_names", "expected_pods", "missing_pod_names", "owner_annotation",
           "owner_patch", "reconcile"]

#: The state of a gang whose release patches were all accepted.
RELEASED = "released"
#: Event reason and type per gang state.
EVENT_REASONS: dict[str, tuple[str, str]] = {
    INCOMPLETE: ("GangIncomplete", "Normal"),
    INFEASIBLE: ("PlacementInfeasible", "Warning"),
    NEVER_FITS: ("PlacementNeverFits", "Warning"),
    INVALID: ("GangInvalid", "Warning"),
    RELEASED: ("GangReleased", "Normal"),
    STRANDED: ("GangStranded", "Warning"),
}
#: Missing pods named in one line at most; the rest are counted.
NAMES_SHOWN = 8


@dataclass(frozen=True)
class ObjectRef:
    """An Event's ``involvedObject``: ``api_version`` (``kubeflow.org/v1``), ``kind``, ``namespace``,
    ``name``, ``uid`` (``kubectl describe`` selects Events by all of them)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class TopOwner:
    """A gang's top owner workload as read from the API server: ``ref``, ``resource`` (its plural,
    ``pytorchjobs``), ``obj`` (the object as read) and ``annotation`` (its :data:`GANG_STATE` as
    read, ``None`` when absent)."""

    ref: ObjectRef
    resource: str
    obj: Mapping[str, Any]
    annotation: str | None = None


@dataclass(frozen=True)
class EventSpec:
    """One Event to write: on ``target``, of ``type`` (``Normal`` / ``Warning``), ``reason`` and
    one-line ``message``."""

    target: ObjectRef
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class OwnerPatch:
    """Set :data:`GANG_STATE` on the owner ``target`` (plural ``resource``) to ``value``."""

    target: ObjectRef
    resource: str
    value: str


@dataclass(frozen=True)
class GangView:
    """What :func:`reconcile` reads, taken from the cache under its lock.

    ``pods``: the gang's pods (dicts as the informer holds them). ``ledger``: the capacity every pod
    holds (left as found). ``catalog``: Topologies by name. ``default_topology``: for gangs whose
    pods name none. ``parse_cache``: parsed nodes and requests. ``owner``: the gang's
    :class:`TopOwner`, ``None`` when it could not be read. ``siblings``: state lines of the other
    gangs of that owner, by gang key (an LWS has one gang per group). ``now``: seconds since the
    epoch (UTC). ``incomplete_grace``: seconds an incomplete gang waits before it is reported.
    ``stranded_grace``: seconds a released pod stays ``Unschedulable`` on its node before it is
    deleted to be placed again (:func:`webhook.gating.decision.decide_stranded`).
    """

    pods: Sequence[Pod]
    ledger: CapacityLedger
    catalog: Mapping[str, Topology]
    default_topology: str | None
    parse_cache: ParseCache
    owner: TopOwner | None = None
    siblings: Mapping[str, str] = field(default_factory=dict)
    now: float = 0.0
    incomplete_grace: float = 0.0
    stranded_grace: float = 0.0


@dataclass(frozen=True)
class Result:
    """What one reconcile decided (controller-runtime's ``reconcile.Result`` plus the writes).

    ``releases``: one KEP-3838 patch per gated pod (sent first). ``charges``: the capacity the
    releases take, for the runner to charge as assumed before sending. ``events``: Events to write
    and ``owner_patch``: the owner's new :data:`GANG_STATE`, both once every release was accepted.
    ``state``: this gang's state line (``""``: nothing to show, e.g. in the incomplete grace).
    ``kind``: the state (``incomplete``, ``infeasible``, ``never-fits``, ``invalid``,
    ``released``; ``""`` when the gang has no gated pod). ``requeue_after``: seconds until the
    gang is reconciled again (``None``: when something changes). ``backoff``: the next attempt
    waits for the gang's exponential back-off (waiting for capacity or never fitting).
    ``waiting`` / ``placed``: the decision's, for the metrics and the log. ``deletions``: stranded
    pods to delete (sent first, each with its uid as precondition) so that their controllers create
    them again, gated (kind ``stranded``).
    """

    gang: str
    kind: str = ""
    state: str = ""
    releases: tuple[Release, ...] = ()
    charges: tuple[tuple[tuple[str, str], str, dict[str, int]], ...] = ()
    events: tuple[EventSpec, ...] = ()
    owner_patch: OwnerPatch | None = None
    requeue_after: float | None = None
    backoff: bool = False
    waiting: Waiting | None = None
    placed: Placed | None = None
    deletions: tuple[StrandedPod, ...] = ()


def reconcile(gang_key: str, view: GangView) -> Result:
    """Reconcile one gang (module docstring): decide it (:func:`webhook.gating.decision.decide_gang`,
    the step ``controller --once`` runs, without charging the ledger) and say what to write.

    ``gang_key``: ``<namespace>/<job>`` (:func:`webhook.gating.decision.gang_key_of`);
    ``view``: a :class:`GangView`. Returns a :class:`Result`; never raises for malformed pods
    (they make the gang ``invalid``) and never changes ``view``.
    """
    stranded = decide_stranded(view.pods, view.now, view.stranded_grace)
    if stranded is not None and stranded.line:
        return _with_writes(Result(gang_key, STRANDED, f"gang {gang_key}: {stranded.line}",
                                   requeue_after=stranded.wait, deletions=stranded.delete), view)
    decision = decide_gang(gang_key, view.pods, view.ledger, view.catalog, view.default_topology,
                           view.parse_cache, assume=False)
    if stranded is not None and decision.placed is None and decision.waiting is None:
        return Result(gang_key, requeue_after=stranded.wait)  # a stranded pod in its grace
    if decision.placed is not None:
        placed = decision.placed
        noun = "pod" if len(decision.releases) == 1 else "pods"
        line = f"gang {gang_key}: released {len(decision.releases)} {noun} to {placed.domain}"
        return _with_writes(Result(gang_key, RELEASED, line, decision.releases, decision.charges, placed=placed),
                            view)
    waiting = decision.waiting
    if waiting is None:
        return Result(gang_key)
    if waiting.kind == INCOMPLETE:
        wait = _grace_left(view)
        if wait > 0:
            return Result(gang_key, INCOMPLETE, requeue_after=wait, waiting=waiting)
        line = f"gang {gang_key}: {_missing_text(gang_key, view)}"
    else:
        line = f"gang {gang_key}: {waiting.reason}"
    return _with_writes(Result(gang_key, waiting.kind, line, backoff=waiting.kind in (INFEASIBLE, NEVER_FITS),
                               waiting=waiting), view)


def _with_writes(result: Result, view: GangView) -> Result:
    """``result`` with its Event (on the owner, else on one pod) and the owner's annotation."""
    reason, kind = EVENT_REASONS[result.kind]
    owner = view.owner
    target = owner.ref if owner is not None else _event_pod(view.pods)
    events = (EventSpec(target, kind, reason, result.state[:1024]),) if target is not None else ()
    patch = owner_patch(owner, {**view.siblings, result.gang: result.state}, owner.annotation) if owner else None
    return replace(result, events=events, owner_patch=patch)


def owner_patch(owner: TopOwner, states: Mapping[str, str], current: str | None) -> OwnerPatch | None:
    """The patch that makes ``owner``'s :data:`GANG_STATE` show ``states`` (every gang of that owner:
    gang key → line, :func:`owner_annotation`), ``None`` when ``current`` (its value now) says that
    already. The runner calls it again when it writes, with the lines of every gang of the owner
    recorded by then, so gangs reconciled at once never drop each other's line."""
    value = owner_annotation(states)
    return OwnerPatch(owner.ref, owner.resource, value) if value != current else None


def owner_annotation(states: Mapping[str, str]) -> str:
    """The :data:`GANG_STATE` value of an owner whose gangs have ``states`` (gang key → line): the
    lines sorted by gang, joined by ``"; "`` (every line names its gang)."""
    return "; ".join(states[key] for key in sorted(states) if states[key])


def _event_pod(pods: Sequence[Pod]) -> ObjectRef | None:
    """The one pod that carries the gang's Event when its owner could not be read: the first
    gated pod by (namespace, name), else (a released gang) the first pod."""
    live = sorted((p for p in pods if not is_terminated(p) and not is_deleting(p)), key=pod_ref)
    gated = [p for p in live if is_gated(p)]
    candidates = gated or live
    if not candidates:
        return None
    chosen = candidates[0]
    meta = chosen.get("metadata") or {}
    namespace, name = pod_ref(chosen)
    return ObjectRef("v1", "Pod", namespace, name, str(meta.get("uid") or ""))


def _created(pod: Pod) -> float | None:
    """A pod's ``metadata.creationTimestamp`` in seconds since the epoch, ``None`` when unreadable."""
    text = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _grace_left(view: GangView) -> float:
    """Seconds left of the incomplete grace after the gang's newest pod was created (0: report now)."""
    created = [t for t in (_created(p) for p in view.pods) if t is not None]
    if not created or view.incomplete_grace <= 0:
        return 0.0
    return max(0.0, max(created) + view.incomplete_grace - view.now)


def _missing_text(gang_key: str, view: GangView) -> str:
    """"waiting for N more pods (M of S exist)", with the missing pods' names when the owner was read."""
    live = [p for p in view.pods if not is_terminated(p) and not is_deleting(p)]
    sizes = {gang_size(_strings((p.get("metadata") or {}).get("annotations")), registry.gang_size_keys())
             for p in live}
    size = max((s for s in sizes if s is not None), default=len(live))
    missing = size - len(live)
    noun = "pod" if missing == 1 else "pods"
    text = f"waiting for {missing} more {noun} ({len(live)} of {size} exist)"
    expected = expected_pods(gang_key, view.owner.obj, view.owner.ref.kind) if view.owner is not None else None
    if expected:
        names = missing_pod_names(expected, live)
        if names:
            shown = ", ".join(names[:NAMES_SHOWN])
            more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
            text += f": {shown}{more}"
    return text


def missing_pod_names(expected: Sequence[tuple[str, Mapping[str, str]]], live: Sequence[Pod]) -> list[str]:
    """The names of the ``expected`` pods (``(name, labels the operator gives that pod)``, in
    creation order, from :func:`expected_pods`) that no ``live`` pod is, in that order.

    A live pod is an expected pod when it has its name, or, for an operator that adds a generated
    suffix (the Job controller: ``<job>-<index>-<random>``, so a JobSet's and a TrainJob's pods
    too; KubeRay's workers), when it carries every label that operator gives that pod alone (its
    index: ``batch.kubernetes.io/job-completion-index``...) — a label set two expected pods share
    identifies neither. Each live pod is one expected pod at most. So a Job blocked at 4 of its 8
    indexes names the 4 indexes missing (``<job>-4`` ... ``<job>-7``: the names the operator gives
    them, without the generated suffix), never pods that exist."""
    counts: dict[frozenset[tuple[str, str]], int] = {}
    for _, labels in expected:
        counts[frozenset(labels.items())] = counts.get(frozenset(labels.items()), 0) + 1
    present = {pod_ref(p)[1] for p in live}
    free = [_strings((p.get("metadata") or {}).get("labels")) for p in live
            if pod_ref(p)[1] not in {name for name, _ in expected}]
    missing = []
    for name, labels in expected:
        if name in present:
            continue
        identity = frozenset(labels.items())
        if identity and counts[identity] == 1:
            found = next((i for i, have in enumerate(free) if identity.issubset(have.items())), None)
            if found is not None:
                free.pop(found)
                continue
        missing.append(name)
    return missing


def expected_pod_names(gang_key: str, owner: Mapping[str, Any], kind: str) -> list[str] | None:
    """The names the operator of ``owner`` (a workload of ``kind`` as read) gives the pods of gang
    ``gang_key``, in creation order (:attr:`webhook.admission.kinds.description.KindDescription.controller_pods`),
    or ``None`` when the kind is not one of the registry's or its spec cannot be expanded."""
    expected = expected_pods(gang_key, owner, kind)
    return [name for name, _ in expected] if expected is not None else None


def expected_pods(gang_key: str, owner: Mapping[str, Any], kind: str) -> list[tuple[str, dict[str, str]]] | None:
    """``(name, labels)`` of each pod the operator of ``owner`` makes for gang ``gang_key``, in
    creation order: the name it gives the pod (without a generated suffix) and the labels it adds
    to that pod alone (its index; the template's labels are not among them); ``None`` as
    :func:`expected_pod_names`."""
    description = registry.BY_KIND.get(kind)
    if description is None:
        return None
    namespace = str((owner.get("metadata") or {}).get("namespace") or "")
    try:
        made = description.controller_pods(owner, _no_cap)
    except (SegmentWebhookError, ValueError, KeyError, TypeError):
        return None
    out = []
    for pod in made:
        template_meta = pod.template.get("metadata") if isinstance(pod.template, Mapping) else None
        labels = {**_strings((template_meta or {}).get("labels")), **pod.labels}
        annotations = {**_strings((template_meta or {}).get("annotations")), **_strings(pod.annotations)}
        if registry.gang_key(namespace, labels, annotations) == gang_key:
            out.append((pod.name, dict(pod.labels)))
    return out or None


def _no_cap(total: int, where: str) -> None:
    """The pod cap of :attr:`~webhook.admission.kinds.description.KindDescription.controller_pods`: none
    here (the workload exists; its operator creates its pods whatever their count)."""


def _strings(value: Any) -> dict[str, str]:
    """The string entries of a labels/annotations map."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def controller_owner(obj: Mapping[str, Any]) -> OwnerReference | None:
    """The ``ownerReferences`` entry of ``obj`` with ``controller: true`` (and a kind and a name),
    ``None`` when none."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    entries: list[OwnerReference] = refs if isinstance(refs, list) else []
    for ref in entries:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return ref
    return None
