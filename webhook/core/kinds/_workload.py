"""The flow shared by the workload kinds (PyTorchJob, LeaderWorkerSet, DistributedWorkload).

A kind module provides ``analyse(obj, request, catalog, settings, decision) -> Plan | None``; this
module runs it on CREATE and UPDATE, enforces the UPDATE immutability rule (DESIGN.md §5) and
turns the :class:`Plan` into a JSONPatch (DESIGN.md §2: owned keys on the worker PodTemplateSpec,
the workload root and, for LWS, the leader template).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping
from typing import Any

from webhook.core import keys
from webhook.core.constraints import AnnotationMap, Resolution, deny, deny_malformed, key_field, quote
from webhook.core.decision import AdmissionSettings, Decision
from webhook.core.patching import PatchBuilder
from webhook.core.topology import TopologyCatalog


@dataclass
class Plan:
    """What one workload object resolves to.

    ``resolution``: the resolved keys; ``root`` / ``worker``: the annotation maps of the workload
    root and the worker PodTemplateSpec (``worker`` is ``None`` without a worker template);
    ``other_templates``: further templates and the owned keys they receive (LWS leaderTemplate);
    ``suspended``: PyTorchJob ``spec.runPolicy.suspend`` is true. An UPDATE may change the
    segment keys when the old or the new object is suspended: either no pods exist (old
    suspended) or the operator deletes them now (new suspended), so no running pod keeps a stale
    constraint.
    ``master``: the annotation map of a never-segmented Master PodTemplateSpec (PyTorchJob,
    native), or ``None``. When the workload is segmented, that template receives the label
    ``kai.scheduler/subgroup-name: master`` (DESIGN.md §2, §7: Master pods are named ``master``
    and get no index). It is written on the template, not by the pod handler, because a Master
    pod carries no segment size of its own to tell it belongs to a segmented job.
    """

    resolution: Resolution
    root: AnnotationMap
    worker: AnnotationMap | None
    other_templates: list[tuple[AnnotationMap, dict[str, str]]] = field(default_factory=list)
    suspended: bool = False
    master: AnnotationMap | None = None

    def segment_inputs(self) -> dict[str, Any]:
        """Every segment input the object states, by field path: the topology name, segment size
        and segment levels on the root and on the worker template, and the spec's segment size
        (LWS ``subGroupSize``, native ``workersPerSegment``)."""
        out: dict[str, Any] = {}
        for amap in (self.root, self.worker):
            if amap is not None:
                for key in _IMMUTABLE_KEYS[:4]:
                    if key in amap.values:
                        out[key_field(amap.field, key)] = amap.values[key]
        res = self.resolution
        if res.spec_size is not None and res.spec_size_field:
            out[res.spec_size_field] = res.spec_size
        return out

    def owned_keys(self) -> tuple[dict[str, str], dict[str, str]]:
        """(worker template keys, root keys) this plan makes the webhook own (DESIGN.md §2)."""
        return self.resolution.worker_keys(), self.resolution.root_keys(self.root)


class Defaults(enum.Enum):
    """When a kind handler applies automatic placement (DESIGN.md §6) while analysing an object."""

    #: never: the object's explicit keys only (the stored object of an UPDATE)
    OFF = "off"
    #: as on CREATE: the native kind always, a PyTorchJob when the requester is a platform identity
    AS_CREATE = "as-create"
    #: whoever sends the request (UPDATE of a workload that carries all its defaults already, so a
    #: kubectl user's `replace` that drops them gets them back as the platform's would)
    ANY_REQUESTER = "any-requester"


#: ``analyse(obj, request, catalog, settings, decision, *, defaults=Defaults.AS_CREATE) -> Plan | None``
Analyse = Callable[..., "Plan | None"]

_IMMUTABLE_NAMES = ("segment size", "topology name", "segment required level", "segment preferred level",
                    "segment leader policy")
_IMMUTABLE_KEYS = (keys.SEGMENT_SIZE, keys.TOPOLOGY, keys.SEGMENT_REQUIRED, keys.SEGMENT_PREFERRED,
                   keys.SEGMENT_LEADER_POLICY)


def _changed_field(plan: Plan, position: int) -> str:
    res = plan.resolution
    sourced = (None, None, res.seg_required, res.seg_preferred, None)[position]
    if position == 0 and res.size_field:
        return res.size_field
    if position == 1 and res.topology_field:
        return res.topology_field
    if position == 4 and res.leader_policy_field:
        return res.leader_policy_field
    if sourced is not None:
        return sourced.field
    owner = plan.worker.field if plan.worker is not None else plan.root.field
    return key_field(owner, _IMMUTABLE_KEYS[position])


def _check_immutable(kind: str, plan: Plan, old_plan: Plan, decision: Decision) -> None:
    new_view = plan.resolution.immutable_view()
    old_view = old_plan.resolution.immutable_view()
    for i, (new, old) in enumerate(zip(new_view, old_view)):
        if new == old:
            continue
        fix = "restore the old value, or delete and recreate the workload"
        if kind == "PyTorchJob":
            fix += " (or suspend it first: spec.runPolicy.suspend: true)"
        if i == 0:  # show the size as written (annotation string or spec integer)
            new, old = plan.resolution.size_raw, old_plan.resolution.size_raw
        deny(decision, "immutable-field", _changed_field(plan, i), new,
             f"the {_IMMUTABLE_NAMES[i]} of an existing workload cannot change (was {quote(old)})", fix)


def _check_inputs(kind: str, plan: Plan, old_plan: Plan, decision: Decision) -> None:
    """Deny (``immutable-field``) a segment input present in both objects with another value,
    unless that field was denied already. Catches changes the resolved view cannot see: a root
    key shadowed by the template, or ``subGroupSize`` beaten by the annotation (LWS would then
    label subgroups of the new size while the webhook keeps the old one). A removed input is not
    a change here: the resolved view decides (an update that drops keys gets them re-resolved)."""
    denied = {v.field for v in decision.violations}
    old_inputs = old_plan.segment_inputs()
    for path, new in plan.segment_inputs().items():
        if path in denied or path not in old_inputs or old_inputs[path] == new:
            continue
        fix = "restore the old value, or delete and recreate the workload"
        if kind == "PyTorchJob":
            fix += " (or suspend it first: spec.runPolicy.suspend: true)"
        deny(decision, "immutable-field", path, new,
             f"a segment setting of an existing workload cannot change (was {quote(old_inputs[path])})", fix)


def review_workload(kind: str, analyse: Analyse, request: Mapping[str, Any], catalog: TopologyCatalog,
                    settings: AdmissionSettings, *, mutate: bool) -> Decision:
    """Admit a workload request (DESIGN.md §4–§6).

    CREATE / UPDATE of the main resource: analyse, validate, and (``mutate``) patch.

    UPDATE compares the new object's resolved segment size, topology name, segment levels and
    leader policy with the stored ``oldObject``'s and denies a change (``immutable-field``,
    §5) unless either object is a suspended PyTorchJob. The stored object's constraint is its
    explicit keys (CREATE wrote every default out). Automatic defaults (§6) are applied on
    UPDATE only when the stored object already carries them all, whoever sends the update, so
    that an update that drops them (``kubectl replace``, server-side apply) gets them back, while
    an update of a workload created without them (e.g. by kubectl, or while the Topology was not
    loaded) never adds them to a running workload. Besides the resolved values, a segment input
    that is present in both objects with different values is denied too (:func:`_check_inputs`),
    even when a template value shadows it: otherwise a changed root key or ``subGroupSize``
    would be silently ignored.
    DELETE, CONNECT and sub-resources (``status``, ``scale``): allowed, empty patch.
    """
    decision = Decision(kind=kind)
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE") or request.get("subResource"):
        return decision
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        deny_malformed(decision, "request.object", obj, f"a {kind} object")
        return decision
    old_plan = None
    defaults = Defaults.AS_CREATE
    old = request.get("oldObject") if operation == "UPDATE" else None
    if isinstance(old, Mapping):
        # The stored object's own problems are not this request's: scratch decisions.
        old_plan = analyse(old, request, catalog, settings, Decision(kind=kind), defaults=Defaults.OFF)
        old_with_defaults = analyse(old, request, catalog, settings, Decision(kind=kind),
                                    defaults=Defaults.ANY_REQUESTER)
        if old_plan is None or not old_plan.resolution.segmented:
            defaults = Defaults.AS_CREATE  # no segments yet: adding them (while suspended) is like a CREATE
        elif old_with_defaults is not None and old_plan.owned_keys() == old_with_defaults.owned_keys():
            defaults = Defaults.ANY_REQUESTER
        else:
            defaults = Defaults.OFF
    plan = analyse(obj, request, catalog, settings, decision, defaults=defaults)
    if plan is None:
        return decision
    if old_plan is not None and not (plan.suspended or old_plan.suspended):
        _check_immutable(kind, plan, old_plan, decision)
        _check_inputs(kind, plan, old_plan, decision)
    if not decision.allowed or not mutate:
        return decision
    builder = PatchBuilder(obj)
    builder.set_entries((), "annotations", plan.resolution.root_keys(plan.root))
    if plan.worker is not None:
        builder.set_entries(plan.worker.container, "annotations", plan.resolution.worker_keys())
    for template, wanted in plan.other_templates:
        builder.set_entries(template.container, "annotations", wanted)
    if plan.master is not None and plan.resolution.segmented:
        builder.set_entries(plan.master.container, "labels", {keys.SUBGROUP_NAME: "master"})
    decision.patch = builder.build()
    return decision


def warn_ignored_segment_keys(template: AnnotationMap | None, why: str, decision: Decision) -> None:
    """Warn (DESIGN.md §5) about user segment keys on a template that is never segmented
    (PyTorchJob / native Master): they are ignored and never written by the webhook."""
    if template is None:
        return
    for key in keys.SEGMENT_KEYS:
        if key in template.values:
            decision.warn(f"{key} on {why} ignored (never segmented)")
