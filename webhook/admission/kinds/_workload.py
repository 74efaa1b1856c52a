"""The flow shared by the workload kinds (PyTorchJob, LeaderWorkerSet, DistributedWorkload).

A kind module provides ``analyse(obj, request, catalog, settings, decision) -> Plan | None``; this
module runs it on CREATE and UPDATE, applies the opt-in and misspelled-key rules (DESIGN.md §5),
enforces the UPDATE immutability rule (§5, comparing like with like) and turns the :class:`Plan`
into a JSONPatch (:func:`build_patch`: owned keys on the worker PodTemplateSpec, the workload
root, further templates such as the LWS leader template, and spec fields such as LWS
``subGroupSize``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.admission import gate
from webhook.admission.automatic import Defaults, update_defaults
from webhook.admission.config import AdmissionSettings
from webhook.admission.constraints import (
    check_annotation_keys,
    check_label_keys,
    check_template_target_labels,
    mentions_placement_keys,
    opted_in,
)
from webhook.admission.patching import PatchBuilder
from webhook.admission.reading import AnnotationMap, check_object_meta
from webhook.admission.rules import check_placement_has_topology, check_unchanged, malformed
from webhook.admission.segments import parse_plain_decimal
from webhook.admission.targets import (
    GATE,
    KAI,
    KUEUE,
    KUEUE_PARTIAL_SLICES,
    WORKLOAD_API,
    chosen_target,
    compile_workload,
    kueue_version_text,
)
from webhook.admission.verdict import Decision, Violation
from webhook.admission.warning_rules import WARNINGS, say
from webhook.admission.workload_plan import Plan
from webhook.kube import kai_scheduler
from webhook.kube.segments_dev import TARGET_KEY
from webhook.text.messages import UNSET, key_field
from webhook.topology.objects import TopologyCatalog


@dataclass(frozen=True)
class UpdateContext:
    """What the analysis of an object needs to know about the request it is part of.

    ``defaults``: when automatic placement applies (§6; :func:`webhook.admission.automatic.update_defaults`
    on UPDATE); ``stored``: on UPDATE, the stored object's plan as it is written (no defaults
    added), else ``None``.
    """

    defaults: Defaults = Defaults.AS_CREATE
    stored: Plan | None = None

    def running_size(self, unit: str | None = None, *, suspended: bool = False) -> int | None:
        """The segment size the stored object asks for, when this request updates a running
        workload (§5: neither the stored nor the new object is suspended, ``suspended`` being the
        new one's); ``unit``: the unit's name in a kind of units (JobSet replicatedJob, Ray group).
        ``None`` on CREATE, for a unit the stored object lacks, or while suspended."""
        stored = self.stored
        if stored is None or stored.suspended or suspended:
            return None
        if unit is not None:
            stored = dict(stored.units).get(unit)
        return stored.resolution.requested_size if stored is not None else None


#: The context of a CREATE (and of a stored object's own analysis: :data:`STORED`).
CREATE = UpdateContext()
#: How the stored object of an UPDATE is analysed: once, with every default automatic mode would
#: add, so :func:`webhook.admission.automatic.update_defaults` can tell whether it carries them all.
STORED = UpdateContext(defaults=Defaults.ANY_REQUESTER)


class Analyse(Protocol):
    """A workload kind's analysis (one per kind module): read, resolve and validate ``obj``,
    recording violations and warnings in ``decision``. Returns the :class:`Plan`, or ``None`` when
    the object is too malformed to resolve (400 denials recorded)."""

    def __call__(self, obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
                 settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None: ...


def check_update(stored: Plan, new: Plan, *, kind: str, denied_fields: Iterable[str] = ()) -> list[Violation]:
    """§5 "UPDATE compares like with like": the ``immutable-field`` violations of an UPDATE of a
    running workload, from the ``stored`` object's plan as written (:meth:`Plan.without_defaults`)
    and the ``new`` one's; for a kind of units (JobSet), each unit with the stored unit of the same
    name. ``denied_fields``: field paths denied already by the new object's analysis (a value
    denied there is not compared again). Returns the violations, in order; records nothing.

    Two comparisons per pair: what each side resolves (:meth:`Resolution.segment_view`: the size
    asked for, not whether it still fits the replicas, a scale below the size is the size rule's),
    then every segment input both sides state (:meth:`Plan.segment_inputs`), which catches a root
    key the template shadows. (The size rule's UPDATE fix is given by the new object's analysis
    itself: :meth:`UpdateContext.running_size`.)"""
    found = Decision(kind=kind)
    denied = set(denied_fields)
    for new_part, old_part in _pairs(new, stored):
        _compare_resolved(kind, new_part, old_part, denied, found)
        denied.update(v.field for v in found.violations)
        _compare_inputs(kind, new_part, old_part, denied, found)
        denied.update(v.field for v in found.violations)
    return found.violations


def _compare_resolved(kind: str, plan: Plan, old_plan: Plan, denied: set[str], found: Decision) -> None:
    """The resolved view of each side (:meth:`Resolution.segment_view`). A side whose value is
    denied already (not an integer) is not compared. A stored object whose size was written but is
    not valid (``"abc"``, a string ``workersPerSegment``) resolves none, and the message says what
    it had."""
    owner = plan.worker.field if plan.worker is not None else plan.root.field
    new_res, old_res = plan.resolution, old_plan.resolution
    defaults_only = _automatic_only(plan)
    # No topology name on the stored object: no segments were in force there (§5 "Segments
    # without a topology"), so automatic defaults the UPDATE adds change nothing in force.
    none_in_force = old_res.topology_name is None
    size_changed = False
    for (what, key, field_path, new), (_, _, old_field, old) in zip(new_res.segment_view(), old_res.segment_view()):
        if field_path in denied or ((size_changed or none_in_force) and what in defaults_only):
            continue  # an automatic default follows the segment size, denied already
        if what == "segment size" and new is UNSET and new_res.size is not None:
            continue  # asked for, but not an integer: denied by its own rule
        path = field_path or old_field or key_field(owner, key)
        shown, old_written = None, UNSET
        if what == "segment size":  # as written: "4" for an annotation, 4 for a spec field
            shown = (UNSET if new is UNSET or new_res.size is None else new_res.size.raw,
                     UNSET if old is UNSET or old_res.size is None else old_res.size.raw)
            if old is UNSET and old_res.size is not None:
                old_written = old_res.size.raw
        unchanged = check_unchanged(found, what, path, new, old, kind, shown=shown, old_written=old_written)
        size_changed = size_changed or (what == "segment size" and not unchanged)


def _automatic_only(plan: Plan) -> set[str]:
    """The segment inputs of :meth:`Resolution.segment_view` that ``plan`` has from the automatic
    defaults alone (§6: the topology name, the segment preferred level), not from the user."""
    res = plan.resolution
    written = any(amap is not None and kai_scheduler.TOPOLOGY in amap.values for amap in (plan.root, plan.worker))
    out = set()
    if res.topology_name is not None and not written:
        out.add("topology name")
    if res.seg_preferred is None and res.auto_segment_preferred is not None:
        out.add("segment preferred level")
    return out


def _compare_inputs(kind: str, plan: Plan, old_plan: Plan, denied: set[str], found: Decision) -> None:
    """Deny (``immutable-field``) a segment input present in both objects that resolves to another
    value (a segment size compared as its number: ``"04"`` and ``"4"`` are the same), unless that
    field was denied already or the patch overwrites it with the resolved value. A removed input is
    not a change here: the resolved view decides."""
    old_inputs = old_plan.segment_inputs()
    overwritten = plan.reader_edits.overwritten_inputs
    for path, new in plan.segment_inputs().items():
        if path in denied or path in overwritten or path not in old_inputs:
            continue
        if _resolved_input(path, new) == _resolved_input(path, old_inputs[path]):
            continue  # like with like: "04" and "4" are both segment size 4
        if not check_unchanged(found, "segment setting", path, new, old_inputs[path], kind):
            denied.add(path)


def _resolved_input(path: str, value: Any) -> Any:
    """What one segment input resolves to, for :func:`_compare_inputs`: a segment-size annotation
    that is a plain decimal integer is its number (``"04"`` → 4); every other value as written."""
    if path.endswith(key_field("", kai_scheduler.SEGMENT_SIZE)):
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
    out: list[tuple[tuple[str, ...], str, dict[str, str]]] = [((), "annotations", plan.root_keys())]
    if plan.worker is not None:
        out.append((plan.worker.container, "annotations", res.worker_keys()))
    for template, wanted in plan.other_templates:
        out.append((template.container, "annotations", wanted))
    if plan.master is not None and res.segmented and plan.kai_subgroups:
        out.append((plan.master.container, "labels", {kai_scheduler.SUBGROUP_NAME: "master"}))
    for _, unit in plan.units:
        out.extend(template_entries(unit))
    return out


def gang_entries(plan: Plan, decision: Decision | None = None,
                 target: str = GATE) -> list[tuple[tuple[str, ...], str, dict[str, str]]]:
    """``--gate-pods`` (DESIGN.md §9) and target ``workload-api`` (§9b): the gang facts
    (:func:`webhook.gating.release.gang_template_annotations`) on every template of the gang, when the
    workload is segmented or has a workload placement level. A kind of units gets one gang per unit,
    or one gang of the whole object when :func:`_whole_workload_entries` says so; ``decision``
    receives the warnings, naming ``target``, where a root workload level is not held across groups."""
    if plan.units:
        whole = _whole_workload_entries(plan, decision, target)
        if whole is not None:
            return whole
        return [entry for _, unit in plan.units for entry in gang_entries(unit)]
    return _unit_entries(plan, plan.gang_size, whole_workload=False)


def _unit_entries(plan: Plan, size: int | None, *, whole_workload: bool) -> list[tuple[tuple[str, ...], str, dict[str, str]]]:
    """The gang facts of one plan (or unit) for a gang of ``size`` pods; empty when ``size`` is
    unknown or 0, or the plan is neither segmented nor has a workload level."""
    res = plan.resolution
    required, preferred = res.workload_labels()  # node labels: the controller's input
    if not size or not plan.gang_size or not (res.segmented or required or preferred):
        return []
    segment_label = res.segment_labels()[0]
    wanted = gate.gang_template_annotations(size, res.topology_name, required, preferred,
                                              whole_workload=whole_workload,
                                              segment_label=segment_label if segment_label != res.segment_required else None)
    return [(t.container, "annotations", wanted) for t in (plan.worker, plan.master, *plan.gang_templates) if t is not None]


def _whole_workload_entries(plan: Plan, decision: Decision | None,
                            target: str = GATE) -> list[tuple[tuple[str, ...], str, dict[str, str]]] | None:
    """DESIGN.md §4.5 and §9 for a kind KAI makes one PodGroup of (``plan.one_podgroup``: JobSet,
    Ray; KAI d5bc503 ``plugins/jobset/jobset_grouper.go``, ``plugins/ray/ray_grouper.go``): when
    the root sets a workload level, every unit's templates get ``segments.dev/gang-scope: workload``
    and ``segments.dev/gang-size`` = the pods of all units, so the controller places the whole
    object as one gang and the level holds across its groups. ``None`` (one gang per unit) when
    the root sets no level, or when the units differ in topology name or segment levels (one gang
    cannot say both: warning ``gate-per-group-gangs``). A never-gated template (the Ray head) gets
    the warning ``gate-head-not-gated``. Both name ``target`` (``gate``: ``--gate-pods``; ``workload-api``)."""
    who = "--gate-pods" if target == GATE else f"target {target}"
    root_level = next((plan.root.get(key) for key in kai_scheduler.WORKLOAD_PLACEMENT_KEYS if plan.root.get(key) is not None), None)
    if not plan.one_podgroup or root_level is None:
        return None
    units = [unit for _, unit in plan.units if unit.gang_size]
    kind = decision.kind if decision is not None else "object"
    topologies = {unit.resolution.topology_name for unit in units}
    segment_levels = {u.resolution.segment_labels() for u in units if u.resolution.segmented}
    if len(topologies) > 1 or len(segment_levels) > 1:
        if decision is not None:
            why = "topology names differ" if len(topologies) > 1 else "segment levels differ"
            say(decision, "gate-per-group-gangs", who=who, kind=kind, why=why, level=root_level.value)
        return None
    if plan.ungated is not None and decision is not None:
        say(decision, "gate-head-not-gated", who=who, verb="gate" if target == GATE else "hold",
            template=plan.ungated, level=root_level.value)
    total = sum(unit.gang_size or 0 for unit in units)
    return [entry for unit in units for entry in _unit_entries(unit, total, whole_workload=True)]


def build_patch(obj: Mapping[str, Any], plan: Plan, extra: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """The RFC 6902 patch of one admitted workload: :func:`template_entries` (and ``extra``
    entries of the same shape) and the spec fields of ``plan.reader_edits`` (LWS ``subGroupSize``)."""
    builder = PatchBuilder(obj)
    for container, map_name, entries in [*template_entries(plan), *extra]:
        builder.set_entries(container, map_name, entries)
    for part in [plan] + [unit for _, unit in plan.units]:
        for parts, value in part.reader_edits.spec_values:
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
    * UPDATE compares what each side asks for (:func:`check_update`) unless either object is a
      suspended PyTorchJob. Automatic defaults (§6) follow
      :func:`webhook.admission.automatic.update_defaults`.
    * A warning that KAI does not enforce something (:attr:`Decision.kai_gaps`) is kept only when
      the object's target (:func:`chosen_target`) is ``kai`` (DESIGN.md §4.5, §9b).

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
    stored = None
    update = CREATE
    old = request.get("oldObject") if operation == "UPDATE" else None
    if old is not None and isinstance(old, (dict, Mapping)):
        # The stored object's own problems are not this request's: a scratch decision. Analysed
        # once, with every default automatic mode would add; what it says by itself is that plan
        # without them.
        stored_with_defaults = analyse(old, request, catalog, settings, Decision(kind=kind), update=STORED)
        stored = stored_with_defaults.without_defaults() if stored_with_defaults is not None else None
        update = UpdateContext(defaults=update_defaults(stored, stored_with_defaults), stored=stored)
    scratch = Decision(kind=kind)
    check_object_meta(obj, scratch)
    plan = analyse(obj, request, catalog, settings, scratch, update=update)
    if plan is None:  # malformed: 400 denials naming the fields, if the object is meant to be ours
        return scratch if plan_is_ours(kind, obj) else decision
    maps = plan.annotation_maps()
    check_annotation_keys(maps, decision)
    templates_with_target = check_label_keys(obj, maps, decision)
    if plan.resolution.inputs is None:  # a kind of units, or none to resolve: the root's own levels (§4.5)
        _check_root_levels_of_units(plan, scratch)
    ours = plan.always_ours or opted_in(maps) or (
        stored is not None and opted_in(stored.annotation_maps()))
    if not ours:  # never denied; a misspelled metadata or annotations that would have opted in is said
        decision.warnings.extend(w for w in scratch.lost_opt_ins if w not in decision.warnings)
        return decision
    if scratch.warnings:  # a KAI reader gap only where KAI is the reader (§4.5, §9b)
        kai_reads = chosen_target(obj, settings, Decision(kind=kind)) == KAI  # its denials: compile_workload's
        decision.warnings.extend(w for w in scratch.warnings
                                 if w not in decision.warnings and (kai_reads or w not in scratch.kai_gaps))
    decision.violations.extend(scratch.violations)
    check_template_target_labels(templates_with_target, decision)
    _drop_warnings_a_label_denial_contradicts(decision)
    if stored is not None and not (plan.suspended or stored.suspended):
        decision.violations.extend(check_update(stored, plan, kind=kind,
                                                denied_fields=[v.field for v in decision.violations]))
        if plan.units:  # a root key all units inherit is reported once
            unique: dict[tuple[str, str, str], Any] = {}
            for violation in decision.violations:
                unique.setdefault((violation.rule, violation.field, violation.message), violation)
            decision.violations[:] = list(unique.values())
    target, target_ops = compile_workload(kind, obj, plan, settings, decision)  # §9b, after resolution
    if target is not None and decision.allowed:
        for part in [plan] + [unit for _, unit in plan.units]:
            _warn_elastic(kind, part, target, settings, decision)
    gang = gang_entries(plan, decision) if target == GATE and operation == "CREATE" and decision.allowed else []  # §9
    if target == WORKLOAD_API and operation == "CREATE" and decision.allowed:  # §9b: the controller's inputs
        gang = [(where, entry, {**values, TARGET_KEY: WORKLOAD_API})
                for where, entry, values in gang_entries(plan, decision, WORKLOAD_API)]
    if decision.allowed and mutate:
        decision.patch = build_patch(obj, plan, [*gang, *target_ops])
    return decision


def _warn_elastic(kind: str, plan: Plan, target: str, settings: AdmissionSettings, decision: Decision) -> None:
    """Issue 37: segmented pods that may scale (:attr:`Plan.elastic`) to a count the segment size
    does not divide get a partial last segment (``elastic-partial-segment``), and what the chosen
    ``target`` does with a count other than the one admitted (``elastic-segments-target``): KAI
    (PyTorchJob grouper, KAI d5bc503 ``plugins/kubeflow/pytorch/pytorch_grouper.go``) requires the
    segments within ``minReplicas`` whole and makes the later ones elastic (``MinAvailable`` 0);
    the gate and the Workload API gang the pod count written at CREATE (another count waits or is
    refused, :mod:`webhook.gating.decision`); Kueue slices the count it admits, a partial last
    slice by its version's rule (:data:`webhook.admission.targets.KUEUE_PARTIAL_SLICES`)."""
    size, elastic = plan.resolution.size_in_force, plan.elastic
    if size is None or elastic is None:
        return
    what, low, high = elastic  # low < high and size >= 2: some count in between is not whole segments
    say(decision, "elastic-partial-segment", what=what, low=low, high=high, size=size)
    if target == KAI and kind == "PyTorchJob":
        say(decision, "elastic-segments-target", who="KAI",
            what="holds segments within minReplicas whole; later ones are elastic (MinMember 0), may run partly")
    elif target in (GATE, WORKLOAD_API):
        who = "--gate-pods" if target == GATE else f"target {target}"
        say(decision, "elastic-segments-target", who=who,
            what=f"gangs the {plan.gang_size} pods written at CREATE: another count waits or is refused")
    elif target == KUEUE:
        version = settings.kueue_version
        tail = "placed partial" if version >= KUEUE_PARTIAL_SLICES else "refused (gated)"
        say(decision, "elastic-segments-target", who="target kueue",
            what=f"slices the count Kueue admits; a partial last slice is {tail} by Kueue "
                 f"{kueue_version_text(version)}")


#: Warnings that say a key is missing, by the key: said of an object that writes the key as a label,
#: they contradict its ``placement-key-as-label`` denial ("move it to annotations").
_MISSING_KEY_WARNINGS = {kai_scheduler.TOPOLOGY: "segments-without-topology", kai_scheduler.SEGMENT_SIZE: "segment-levels-without-size"}


def _drop_warnings_a_label_denial_contradicts(decision: Decision) -> None:
    """Issue 37: a denial never comes with a warning that contradicts it. An object denied for a
    placement key written as a label (``placement-key-as-label``) is not also told that the key is
    missing (``segments-without-topology``, ``segment-levels-without-size``)."""
    if not decision.violations or not decision.warnings:
        return
    for key, warning_id in _MISSING_KEY_WARNINGS.items():
        suffix = key_field("", key)
        if any(v.rule == "placement-key-as-label" and v.field.endswith(suffix) for v in decision.violations):
            said = WARNINGS[warning_id].text()
            decision.warnings[:] = [w for w in decision.warnings if w != said]


def _check_root_levels_of_units(plan: Plan, decision: Decision) -> None:
    """DESIGN.md §4.5 for a kind of units (JobSet, Ray; or an object with nothing to resolve):
    KAI reads the workload levels with the root's own topology name only
    (``plugins/defaultgrouper/default_grouper.go``, KAI d5bc503). Each unit resolves the name the
    root gets (:meth:`Resolution.root_keys`); when the root names none and the units resolve no
    name, or several, the root's levels cannot be honoured: denied (``placement-without-topology``)
    with the fix naming ``metadata.annotations``."""
    root = plan.root
    if kai_scheduler.TOPOLOGY in root.values:
        return
    levels = [level for level in (root.get(key) for key in kai_scheduler.WORKLOAD_PLACEMENT_KEYS) if level is not None]
    if not levels:
        return
    names = {name for _, unit in plan.units if (name := unit.root_keys().get(kai_scheduler.TOPOLOGY)) is not None}
    if len(names) == 1:
        return
    if not plan.units:
        where = "metadata.annotations"
    elif names:
        where = "metadata.annotations (the templates name " + " and ".join(sorted(names)) + ")"
    else:
        return  # each unit has denied the levels itself (placement-without-topology)
    check_placement_has_topology(decision, [(level.field, level.value) for level in levels], None, where)


def warn_ignored_segment_keys(template: AnnotationMap | None, why: str, decision: Decision) -> None:
    """Warn (DESIGN.md §5) about user segment keys on a template that is never segmented
    (PyTorchJob / native Master): they are ignored and never written by the webhook."""
    if template is None:
        return
    for key in kai_scheduler.SEGMENT_KEYS:
        if key in template.values:
            say(decision, "segment-key-on-unsegmented-template", key=key, template=why)


def replica_key(specs: Mapping[str, Any], name: str) -> str | None:
    """The key of replica type ``name`` in a training-operator ``*ReplicaSpecs`` map (exact first,
    then case-insensitive, as admission reads it: ``worker`` is the Worker replica type); ``None``
    when there is none. Admission and the pod expansion (``place``, ``controller --once``) both
    read replica types through this, so they never disagree on which pods a job has."""
    if name in specs:
        return name
    return next((k for k in specs if isinstance(k, str) and k.lower() == name.lower()), None)
