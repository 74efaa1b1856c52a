"""The flow shared by the workload kinds (PyTorchJob, LeaderWorkerSet, DistributedWorkload).

A kind module provides ``analyse(obj, request, catalog, settings, decision) -> Plan | None``; this
module runs it on CREATE and UPDATE, applies the opt-in and misspelled-key rules (DESIGN.md §5),
enforces the UPDATE immutability rule (§5, comparing like with like) and turns the :class:`Plan`
into a JSONPatch (:func:`build_patch`: owned keys on the worker PodTemplateSpec, the workload
root, further templates such as the LWS leader template, and spec fields such as LWS
``subGroupSize``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Mapping
from typing import Any

from webhook.core import gating, keys, rules
from webhook.core.automatic import Defaults, update_defaults
from webhook.core.constraints import check_annotation_keys, mentions_placement_keys, opted_in
from webhook.core.decision import AdmissionSettings, Decision
from webhook.core.messages import UNSET, key_field
from webhook.core.patching import PatchBuilder
from webhook.core.reading import AnnotationMap, check_object_meta
from webhook.core.resolution import Resolution
from webhook.core.rules import check_unchanged, malformed
from webhook.core.segments import parse_plain_decimal
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
    ``kai.scheduler/subgroup-name: master`` (DESIGN.md §2, §7). It is written on the template,
    not by the pod handler, because a Master pod carries no segment size of its own.
    ``templates``: every PodTemplateSpec annotation map of the object (for the opt-in and
    misspelled-key rules); ``always_ours``: the kind is this project's own (native), so the
    opt-in rule does not apply.
    ``overwritten_inputs``: segment inputs the patch sets to the resolved value (LWS
    ``subGroupSize`` and root ``segment-size``, DESIGN.md §3); a different value there on UPDATE
    is not a change, since the patch puts the resolved value back.
    """

    resolution: Resolution
    root: AnnotationMap
    worker: AnnotationMap | None
    other_templates: list[tuple[AnnotationMap, dict[str, str]]] = field(default_factory=list)
    suspended: bool = False
    master: AnnotationMap | None = None
    templates: list[AnnotationMap] = field(default_factory=list)
    always_ours: bool = False
    overwritten_inputs: frozenset[str] = frozenset()
    #: pods per gang and further templates of the gang (LWS leader), for ``--gate-pods`` (§9)
    gang_size: int | None = None
    gang_templates: list[AnnotationMap] = field(default_factory=list)
    #: a kind whose segmented templates are resolved each on its own (JobSet: one per
    #: replicatedJob, DESIGN.md §3b): ``(name, plan)`` per unit; the object's own plan then carries
    #: no resolution of its own, and UPDATE compares each unit with the stored unit of that name
    units: list[tuple[str, "Plan"]] = field(default_factory=list)
    #: further RFC 6902 operations of the patch, after the template entries (TrainJob: its own
    #: ``spec.runtimePatches`` entry, DESIGN.md §3b)
    extra_ops: list[dict] = field(default_factory=list)

    def annotation_maps(self) -> list[AnnotationMap]:
        """The root's and every template's annotation map (those of every unit included)."""
        maps = [self.root] + [m for m in (self.worker, self.master) if m is not None]
        maps += [t for t, _ in self.other_templates] + self.templates
        for _, unit in self.units:
            maps += unit.annotation_maps()
        unique: dict[str, AnnotationMap] = {}
        for amap in maps:
            unique.setdefault(amap.field, amap)
        return list(unique.values())

    def segment_inputs(self) -> dict[str, Any]:
        """Every segment input the object states, by field path: the topology name, segment size
        and segment levels on the root and on the worker template, and the spec's segment size
        (LWS ``subGroupSize``, native ``workersPerSegment``)."""
        out: dict[str, Any] = {}
        for amap in (self.root, self.worker):
            if amap is not None:
                for key in (keys.SEGMENT_SIZE, keys.TOPOLOGY, keys.SEGMENT_REQUIRED, keys.SEGMENT_PREFERRED):
                    if key in amap.values:
                        out[key_field(amap.field, key)] = amap.values[key]
        res = self.resolution
        if res.spec_size is not None and res.spec_size_field:
            out[res.spec_size_field] = res.spec_size
        return out

    def owned_keys(self) -> tuple[dict[str, str], dict[str, str]]:
        """(worker template keys, root keys) this plan makes the webhook own (DESIGN.md §2)."""
        return self.resolution.worker_keys(), self.resolution.root_keys(self.root)


#: ``analyse(obj, request, catalog, settings, decision, *, defaults=Defaults.AS_CREATE) -> Plan | None``
Analyse = Callable[..., "Plan | None"]


def _check_immutable(kind: str, plan: Plan, old_plan: Plan, decision: Decision) -> None:
    """§5 "UPDATE compares like with like": the segment inputs each side resolves (the size the
    object asks for, not whether it still fits the replicas: a scale that makes it too large is
    the size rule's). A side whose value is denied already (not an integer) is not compared. A
    stored object whose size was written but is not valid (``"abc"``, a string
    ``workersPerSegment``) resolves none, and the message says what it had."""
    denied = {v.field for v in decision.violations}
    owner = plan.worker.field if plan.worker is not None else plan.root.field
    old_view = old_plan.resolution.segment_view()
    defaults_only = _automatic_only(plan)
    # No topology name on the stored object: no segments were in force there (§5 "Segments
    # without a topology"), so automatic defaults the UPDATE adds change nothing in force.
    none_in_force = old_plan.resolution.topology_name is None
    size_changed = False
    for (what, key, field_path, new), (_, _, old_field, old) in zip(plan.resolution.segment_view(), old_view):
        if field_path in denied or ((size_changed or none_in_force) and what in defaults_only):
            continue  # an automatic default follows the segment size, denied already
        if what == "segment size" and new is UNSET and plan.resolution.size_raw is not None:
            continue  # asked for, but not an integer: denied by its own rule
        path = field_path or old_field or key_field(owner, key)
        shown, old_written = None, UNSET
        if what == "segment size":  # as written: "4" for an annotation, 4 for a spec field
            shown = (UNSET if new is UNSET else plan.resolution.size_raw,
                     UNSET if old is UNSET else old_plan.resolution.size_raw)
            if old is UNSET and old_plan.resolution.size_raw is not None:
                old_written = old_plan.resolution.size_raw
        unchanged = check_unchanged(decision, what, path, new, old, kind, shown=shown, old_written=old_written)
        size_changed = size_changed or (what == "segment size" and not unchanged)


def _automatic_only(plan: Plan) -> set[str]:
    """The segment inputs of :meth:`Resolution.segment_view` that ``plan`` has from the automatic
    defaults alone (§6: the topology name, the segment preferred level), not from the user."""
    res = plan.resolution
    written = any(amap is not None and keys.TOPOLOGY in amap.values for amap in (plan.root, plan.worker))
    out = set()
    if res.topology_name is not None and not written:
        out.add("topology name")
    if res.seg_preferred is None and res.auto_segment_preferred is not None:
        out.add("segment preferred level")
    return out


def _refix_scale_below_size(kind: str, plan: Plan, old_plan: Plan, decision: Decision) -> None:
    """§5: an UPDATE that keeps the segment size but scales the replicas below it is denied by
    the size rule; its fix must not suggest another segment size (that would be an immutable
    change, denied in turn). Re-record that violation, in place, with the UPDATE fix of
    :func:`webhook.core.rules.scale_fix`."""
    res, inp = plan.resolution, plan.resolution.inputs
    if inp is None or inp.pods is None or res.requested_size is None or res.size_field is None:
        return
    if res.requested_size != old_plan.resolution.requested_size:
        return
    for position, violation in enumerate(decision.violations):
        if violation.rule != "segment-size-exceeds-replicas" or f"({inp.pods_field})" not in violation.message:
            continue  # another rule, or another unit's pods (JobSet replicatedJobs)
        again = Decision(kind=kind)
        rules.check_size_within_pods(again, res.requested_size, res.size_field, res.size_raw, res.size_origin,
                                     inp.pods, inp.pods_field, inp.pods_noun, update_of=kind)
        decision.violations[position:position + 1] = again.violations


def _check_inputs(kind: str, plan: Plan, old_plan: Plan, decision: Decision) -> None:
    """Deny (``immutable-field``) a segment input present in both objects that resolves to another
    value (a segment size compared as its number: ``"04"`` and ``"4"`` are the same), unless that
    field was denied already or the patch overwrites it with the resolved value.
    Catches changes the resolved view cannot see: a root key shadowed by the template. A removed
    input is not a change here: the resolved view decides."""
    denied = {v.field for v in decision.violations}
    old_inputs = old_plan.segment_inputs()
    for path, new in plan.segment_inputs().items():
        if path in denied or path in plan.overwritten_inputs or path not in old_inputs:
            continue
        if _resolved_input(path, new) == _resolved_input(path, old_inputs[path]):
            continue  # like with like: "04" and "4" are both segment size 4
        check_unchanged(decision, "segment setting", path, new, old_inputs[path], kind)


def _resolved_input(path: str, value: Any) -> Any:
    """What one segment input resolves to, for :func:`_check_inputs`: a segment-size annotation
    that is a plain decimal integer is its number (``"04"`` → 4); every other value as written."""
    if path.endswith(key_field("", keys.SEGMENT_SIZE)):
        size = parse_plain_decimal(value)
        if size is not None:
            return size
    return value


def template_entries(plan: Plan) -> list[tuple[tuple[str, ...], str, dict[str, str]]]:
    """Every map entry the workload patch sets, as ``(container parts, "annotations" | "labels",
    entries)``: the root annotations, the worker template's owned keys, further templates (LWS
    leader) and the Master template's ``subgroup-name`` label. One place to hook further template
    keys into."""
    res = plan.resolution
    out: list[tuple[tuple[str, ...], str, dict[str, str]]] = [((), "annotations", res.root_keys(plan.root))]
    if plan.worker is not None:
        out.append((plan.worker.container, "annotations", res.worker_keys()))
    for template, wanted in plan.other_templates:
        out.append((template.container, "annotations", wanted))
    if plan.master is not None and res.segmented:
        out.append((plan.master.container, "labels", {keys.SUBGROUP_NAME: "master"}))
    for _, unit in plan.units:
        out.extend(template_entries(unit))
    return out


def gang_entries(plan: Plan) -> list[tuple[tuple[str, ...], str, dict[str, str]]]:
    """``--gate-pods`` (DESIGN.md §9): the gang facts (:func:`webhook.core.gating.gang_template_annotations`)
    on every template of the gang, when the workload is segmented or has a workload placement level."""
    if plan.units:
        return [entry for _, unit in plan.units for entry in gang_entries(unit)]
    res = plan.resolution
    required = res.wl_required.value if res.wl_required else None
    preferred = res.wl_preferred.value if res.wl_preferred else res.auto_workload_preferred
    if not plan.gang_size or not (res.segmented or required or preferred):
        return []
    wanted = gating.gang_template_annotations(plan.gang_size, res.topology_name, required, preferred)
    return [(t.container, "annotations", wanted) for t in (plan.worker, plan.master, *plan.gang_templates) if t is not None]


def build_patch(obj: Mapping[str, Any], plan: Plan, extra: list | tuple = ()) -> list[dict]:
    """The RFC 6902 patch of one admitted workload: :func:`template_entries` (and ``extra``
    entries of the same shape) and the spec fields of ``plan.resolution.spec_updates`` (LWS
    ``subGroupSize``)."""
    builder = PatchBuilder(obj)
    for container, map_name, entries in [*template_entries(plan), *extra]:
        builder.set_entries(container, map_name, entries)
    for part in [plan] + [unit for _, unit in plan.units]:
        for parts, value in part.resolution.spec_updates:
            builder.set_value(parts, value)
    return builder.build() + plan.extra_ops


def _pairs(plan: Plan, old_plan: Plan) -> list[tuple[Plan, Plan]]:
    """What UPDATE compares: the object's plan with the stored one, or, for a kind of units
    (JobSet), each unit with the stored unit of the same name (a unit the stored object lacks has
    nothing to compare with)."""
    if not plan.units:
        return [(plan, old_plan)]
    old_units = dict(old_plan.units)
    return [(unit, old_units[name]) for name, unit in plan.units if name in old_units]


def plan_is_ours(kind: str, obj: Mapping[str, Any]) -> bool:
    """Opt-in for an object too malformed to analyse: the native kind always, another kind when
    it mentions a placement key anywhere (:func:`mentions_placement_keys`)."""
    return kind == "DistributedWorkload" or mentions_placement_keys(obj)


def review_workload(kind: str, analyse: Analyse, request: Mapping[str, Any], catalog: TopologyCatalog,
                    settings: AdmissionSettings, *, mutate: bool) -> Decision:
    """Admit a workload request (DESIGN.md §4–§6).

    CREATE / UPDATE of the main resource: analyse, validate, and (``mutate``) patch.

    * Misspelled keys (§5) are denied on every workload, whatever else it carries.
    * Opt-in (§5): a PyTorchJob or LWS whose maps carry no placement key (and, on UPDATE, whose
      stored object carries none either) is not the webhook's: allowed, empty patch, no warning.
    * UPDATE compares what each side asks for (:func:`_check_immutable`, :func:`_check_inputs`)
      unless either object is a suspended PyTorchJob. Automatic defaults (§6) follow
      :func:`webhook.core.automatic.update_defaults`.

    DELETE, CONNECT and sub-resources (``status``, ``scale``): allowed, empty patch.
    """
    decision = Decision(kind=kind)
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE") or request.get("subResource"):
        return decision
    obj = request.get("object")
    if not isinstance(obj, (dict, Mapping)):
        malformed(decision, "request.object", obj if obj is not None else UNSET, f"a {kind} object")
        return decision
    old_plan = None
    defaults = Defaults.AS_CREATE
    old = request.get("oldObject") if operation == "UPDATE" else None
    if isinstance(old, (dict, Mapping)):
        # The stored object's own problems are not this request's: scratch decisions.
        old_plan = analyse(old, request, catalog, settings, Decision(kind=kind), defaults=Defaults.OFF)
        old_with_defaults = analyse(old, request, catalog, settings, Decision(kind=kind), defaults=Defaults.ANY_REQUESTER)
        defaults = update_defaults(old_plan, old_with_defaults)
    scratch = Decision(kind=kind)
    check_object_meta(obj, scratch)
    plan = analyse(obj, request, catalog, settings, scratch, defaults=defaults)
    if plan is None:  # malformed: 400 denials naming the fields, if the object is meant to be ours
        return scratch if plan_is_ours(kind, obj) else decision
    maps = plan.annotation_maps()
    check_annotation_keys(maps, decision)
    ours = plan.always_ours or opted_in(maps) or (
        old_plan is not None and opted_in(old_plan.annotation_maps()))
    if not ours:
        return decision
    if scratch.warnings:
        decision.warnings.extend(w for w in scratch.warnings if w not in decision.warnings)
    decision.violations.extend(scratch.violations)
    if old_plan is not None and not (plan.suspended or old_plan.suspended):
        for new_part, old_part in _pairs(plan, old_plan):
            _refix_scale_below_size(kind, new_part, old_part, decision)
            _check_immutable(kind, new_part, old_part, decision)
            _check_inputs(kind, new_part, old_part, decision)
        if plan.units:  # a root key all units inherit is reported once
            unique: dict[tuple[str, str, str], Any] = {}
            for violation in decision.violations:
                unique.setdefault((violation.rule, violation.field, violation.message), violation)
            decision.violations[:] = list(unique.values())
    if decision.allowed and mutate:
        gang = gang_entries(plan) if settings.gate_pods and operation == "CREATE" else []  # §9
        decision.patch = build_patch(obj, plan, gang)
    return decision


def warn_ignored_segment_keys(template: AnnotationMap | None, why: str, decision: Decision) -> None:
    """Warn (DESIGN.md §5) about user segment keys on a template that is never segmented
    (PyTorchJob / native Master): they are ignored and never written by the webhook."""
    if template is None:
        return
    for key in keys.SEGMENT_KEYS:
        if key in template.values:
            decision.warn(f"{key} on {why} ignored (never segmented)")
