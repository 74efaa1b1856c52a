"""Resolve and validate one workload's topology / segment keys (DESIGN.md §4–§6): the orchestrator.

The kind handlers (``webhook.admission.kinds.*``) read their object's shape into a
:class:`~webhook.admission.resolution.SegmentInputs`; :func:`resolve` runs, in order, the resolution of
:mod:`webhook.admission.resolution` (§4), the checks of :mod:`webhook.admission.rules` (§5) and the
automatic mode of :mod:`webhook.admission.automatic` (§6), recording every violation of the object in
the :class:`Decision` so they are reported together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission import automatic, rules
from webhook.admission.config import AdmissionSettings
from webhook.admission.reading import AnnotationMap, Sourced
from webhook.admission.resolution import (
    PlacementKeys,
    Resolution,
    SegmentInputs,
    SegmentSize,
    resolve_keys,
    resolve_size,
    topology_source_field,
)
from webhook.admission.segments import parse_plain_decimal
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say
from webhook.kube import kai_scheduler, segments_dev
from webhook.text.messages import plural, quote
from webhook.topology.objects import Topology, TopologyCatalog


def _misspelled(key: str, *annotation_maps: AnnotationMap | None) -> bool:
    """True when one of ``annotation_maps`` holds a key that misspells ``key`` (the misspelled-key
    rule's own test, :func:`webhook.admission.rules.resembled_placement_key`)."""
    for annotations in annotation_maps:
        for written in annotations.values if annotations is not None else ():
            if written != key and rules.resembled_placement_key(written) == key:
                return True
    return False


def resolve(inp: SegmentInputs, catalog: TopologyCatalog, settings: AdmissionSettings, decision: Decision) -> Resolution:
    """Resolve and validate one workload's keys (DESIGN.md §4, §5, §6), and the kind's own size
    rule (``inp.size_rule``) last.

    Records every violation of §5 and the warnings in ``decision``. Never raises for validated
    annotation maps. Returns the frozen :class:`Resolution`; its ``size_in_force`` is ``None`` when
    the object is not segmented, is denied, or names no topology (§5 "Segments without a
    topology": a warning, no segment keys written).
    """
    root, worker = inp.root, inp.worker
    placement = resolve_keys(root, worker, decision, template_levels_read=inp.template_levels_read)
    topology_source, seg_required, seg_preferred, wl_required, wl_preferred = placement
    asked_size = resolve_size(root, worker, inp.spec_size, decision)
    size = valid = requested = None
    if asked_size is not None:
        raw, field_path, origin, requested = asked_size
        if worker is None:  # no template to segment
            say(decision, "no-worker-template", kind=inp.kind)
        else:
            valid = _checked_size(inp, raw, field_path, origin, requested, decision)
        size = SegmentSize._make((raw, field_path, origin, requested, valid))
    elif (seg_required or seg_preferred) and not _misspelled(kai_scheduler.SEGMENT_SIZE, root, worker):
        # a misspelled segment-size is denied (rule misspelled-key); "no size is set" would contradict it
        say(decision, "segment-levels-without-size")

    # §6 keys on the size the object asks for, so a scale that makes it too large (denied by the
    # size rule) does not also look like the automatic defaults being removed (§5 like with like).
    asked = requested if requested is not None and requested > 1 and worker is not None else None
    name, auto = automatic.default_topology(inp.automatic, asked, topology_source.value if topology_source else None,
                                            settings, catalog, decision)
    topology, conflict = _check_topology(root.get(kai_scheduler.TOPOLOGY), topology_source, wl_required, wl_preferred, catalog,
                                         decision)
    if worker is not None:
        _check_shadowed_root_keys(root, worker, inp, topology, conflict, decision)
    if topology is None and topology_source is None and name is not None:
        topology = catalog.get(name)  # the automatic default, checked to exist
    _check_levels(inp, placement, name, topology, conflict, decision)
    auto_segment, auto_workload = automatic.level_defaults(auto, topology, name, catalog.synced, root, worker, decision)

    in_force = valid
    if in_force is not None and name is None:
        say(decision, "segments-without-topology")
        in_force = None
    if valid is not None and size is not None and inp.size_rule is not None and not inp.size_rule(size, decision):
        in_force = None
    group = inp.lws_group
    return Resolution._make((  # in field order (see Resolution; positional: cheaper than 15 keywords)
        size,  # size
        in_force,  # size_in_force
        name,  # topology_name
        topology_source_field(worker, topology_source),  # topology_field
        topology,  # topology
        topology_source is None and name is not None,  # topology_is_default
        seg_required,  # seg_required
        seg_preferred,  # seg_preferred
        wl_required,  # wl_required
        wl_preferred,  # wl_preferred
        auto_segment,  # auto_segment_preferred
        auto_workload,  # auto_workload_preferred
        group.policy if group is not None else None,  # leader_policy
        group.policy_field if group is not None else None,  # leader_policy_field
        inp,  # inputs
    ))


def _checked_size(inp: SegmentInputs, raw: Any, field_path: str, origin: str, requested: int | None,
                  decision: Decision) -> int | None:
    """The ``requested`` size (written ``raw`` at ``field_path``; ``origin`` as
    :attr:`SegmentSize.origin`) of an object with a worker template when it passes the range rules
    of §5, else ``None``. On an UPDATE that keeps a running workload's size (``inp.running_size``),
    the size rule's fix names only changes the webhook admits (§5 "UPDATE compares like with
    like")."""
    if requested is None:
        return None
    args = (decision, requested, field_path, raw)
    if not rules.check_size_at_least_2(*args, origin):
        return None
    pods, pods_noun, running_size = inp.pods, inp.pods_noun, inp.running_size
    if pods is None:
        return requested
    update_of = inp.kind if running_size is not None and running_size == requested else None
    groups = inp.groups if field_path.startswith("metadata.annotations[") else None
    if not rules.check_size_within_pods(*args, origin, pods, inp.pods_field, pods_noun, update_of=update_of,
                                        groups=groups):
        return None
    group = inp.lws_group
    if group is None:
        counted = rules.check_segment_count(*args, pods, pods_noun)
    else:
        counted = rules.check_segment_count(*args, pods, pods_noun, group_size=group.size, policy=group.policy,
                                            lws_validates=group.validates_size)
    if not counted:
        return None
    if inp.warn_partial and pods % requested:
        say(decision, "partial-last-segment", pods=f"{pods} {pods_noun}", size=requested, rest=plural(pods % requested, "pod"))
    return requested


def _check_topology_name(source: Sourced, catalog: TopologyCatalog, decision: Decision) -> Topology | None:
    """§5: a topology name is an object name and known to a synced catalog."""
    if not rules.check_topology_name_syntax(decision, source.field, source.value, catalog.names):
        return None
    topology = catalog.get(source.value)
    if topology is None:
        rules.check_topology_known(decision, source.field, source.value, False, catalog.synced, catalog.names,
                                   crd_missing=catalog.crd_missing)  # §10
    return topology


def _check_topology(root_topology: Sourced | None, source: Sourced | None, wl_required: Sourced | None,
                    wl_preferred: Sourced | None, catalog: TopologyCatalog,
                    decision: Decision) -> tuple[Topology | None, bool]:
    """The resolved topology name (``source``: template, else root), the root's name
    (``root_topology``) when the template overrides it (still checked, §5) and the
    ``conflicting-topology`` rule with the workload levels (``wl_*``). Returns
    ``(topology or None, conflict)``."""
    topology = _check_topology_name(source, catalog, decision) if source is not None else None
    conflict = False
    if root_topology is not None and source is not None and root_topology.value != source.value:
        conflict = True
        _check_topology_name(root_topology, catalog, decision)
        workload_levels = [(s.field, s.value) for s in (wl_required, wl_preferred) if s is not None]
        rules.check_one_topology(decision, workload_levels, root_topology.value, (source.field, source.value))
    return topology, conflict


def _check_shadowed_root_keys(root: AnnotationMap, worker: AnnotationMap, inp: SegmentInputs, topology: Topology | None,
                              topology_conflict: bool, decision: Decision) -> None:
    """Root segment keys that the worker template overrides (§4.2) are still the user's input, so
    nothing is dropped silently: an invalid root value is denied like an effective one, a valid but
    different one gets a warning (LWS: the root size is set to the resolved one, §3, and warned
    about there; native: ``workersPerSegment`` is the size, so a root size is only warned about).
    ``root`` / ``worker``: ``inp.root`` / ``inp.worker`` (not ``None``), as :func:`resolve` read them."""
    for key in kai_scheduler.SEGMENT_KEYS:
        if key not in root.values or key not in worker.values or root.values[key] == worker.values[key]:
            continue
        shadowed, winner = root.get(key), worker.get(key)
        if shadowed is None or winner is None:  # both present: checked above
            continue
        if key == kai_scheduler.SEGMENT_SIZE:
            spec = inp.spec_size
            if spec is not None and spec.wins and spec.value is not None:
                # native: the spec field is the size, annotations are only warned about (§3), also
                # when the webhook's own template value shadows the root one (a reinvocation)
                say(decision, "root-key-ignored-spec-wins", key=key, value=quote(shadowed.value),
                    spec_field=spec.name, spec_size=spec.value)
                continue
            if not rules.check_size_is_integer(decision, shadowed.field, shadowed.value,
                                               parse_plain_decimal(shadowed.value), winner=winner.value):
                continue
            if inp.kind == "LeaderWorkerSet":
                continue
        elif not _check_level(shadowed, None if topology_conflict else topology, decision):
            continue
        say(decision, "root-key-overridden", key=key, value=quote(shadowed.value))
    topo_root, topo_worker = root.values.get(kai_scheduler.TOPOLOGY), worker.values.get(kai_scheduler.TOPOLOGY)
    if topo_root is not None and topo_worker is not None and topo_root != topo_worker:
        say(decision, "root-key-overridden", key=kai_scheduler.TOPOLOGY, value=quote(topo_root))


def _check_level(level: Sourced, topology: Topology | None, decision: Decision) -> bool:
    """§5: a level is a label key and, when the topology is known, one of its levels (or an alias of one)."""
    if not rules.check_level_syntax(decision, level.field, level.value, topology):
        return False
    return topology is None or rules.check_level_in_topology(decision, level.field, level.value, topology)


def _check_levels(inp: SegmentInputs, placement: PlacementKeys, topology_name: str | None, topology: Topology | None,
                  conflict: bool, decision: Decision) -> None:
    """§5: placement levels need a topology name, are levels of it, and nest (preferred within
    required of the same scope; segment required within workload required)."""
    _, seg_required, seg_preferred, wl_required, wl_preferred = placement
    scoped = [(s, scope) for s, scope in ((wl_required, "workload"), (wl_preferred, "workload"),
                                          (seg_required, "segment"), (seg_preferred, "segment"))
              if s is not None and not (conflict and scope == "workload")]  # conflicting: denied already
    if not scoped:
        return
    if topology_name is None:  # the rule's inputs are built only when it can be violated
        # metadata.annotations first: KAI reads the workload levels' topology there alone, and
        # every template inherits it (§4.5)
        where = f"metadata.annotations or {inp.worker.field}" if inp.worker is not None else "metadata.annotations"
        rules.check_placement_has_topology(decision, [(s.field, s.value) for s, _ in scoped], None, where)
        for level, _ in scoped:
            _check_level(level, None, decision)
        return
    valid = [level for level, _ in scoped if _check_level(level, topology, decision)]
    if topology is None:
        return  # unknown topology: the levels cannot be compared

    def comparable(first: Sourced, second: Sourced) -> bool:
        return first in valid and second in valid

    for required, preferred in ((wl_required, wl_preferred), (seg_required, seg_preferred)):
        if required is not None and preferred is not None and comparable(required, preferred):
            rules.check_preferred_within_required(decision, (preferred.field, preferred.value),
                                                  (required.field, required.value), topology.depth)
    if seg_required is not None and wl_required is not None and comparable(seg_required, wl_required):
        rules.check_segment_within_workload(decision, (seg_required.field, seg_required.value),
                                            (wl_required.field, wl_required.value), topology.depth)


def check_annotation_keys(maps: list[AnnotationMap], decision: Decision) -> None:
    """§5 "Misspelled keys" on every annotation map of a workload (root and pod templates)."""
    for amap in maps:
        rules.check_key_spelling(decision, amap.field, amap.values)


def check_label_keys(obj: Mapping[str, Any], maps: list[AnnotationMap],
                     decision: Decision) -> list[tuple[str, Mapping[str, Any]]]:
    """§5: no placement key is written as a label beside any annotation map of a workload (the
    labels of the same metadata, found by the map's container path).

    Returns the pod templates' label maps that carry ``segments.dev/target``, as
    ``(labels field, labels)``, for :func:`check_template_target_labels` (each map's labels are
    found once per review)."""
    with_target: list[tuple[str, Mapping[str, Any]]] = []
    for amap in maps:
        meta = _metadata_at(obj, amap.container)
        labels = meta.get("labels") if meta is not None else None
        if labels is None or not isinstance(labels, (dict, Mapping)):
            continue
        labels_field = amap.field[: -len("annotations")] + "labels"
        if not labels.keys().isdisjoint(kai_scheduler.PLACEMENT_KEYS):
            rules.check_placement_keys_not_labels(decision, labels_field, labels, amap.field)
        if amap.container and segments_dev.TARGET_KEY in labels:  # the root's label is the target (targets.py)
            with_target.append((labels_field, labels))
    return with_target


def check_template_target_labels(templates_with_target: list[tuple[str, Mapping[str, Any]]],
                                 decision: Decision) -> None:
    """DESIGN.md §9b: no pod template of an opted-in workload carries the ``segments.dev/target``
    label, which only the root's labels set (rule ``target-label-on-template``).
    ``templates_with_target``: what :func:`check_label_keys` returned for the same object."""
    for labels_field, labels in templates_with_target:
        rules.check_target_not_on_template(decision, labels_field, labels, segments_dev.TARGET_KEY)


def _metadata_at(obj: Mapping[str, Any], container: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The ``metadata`` mapping of the object at ``container`` (JSON Pointer parts; list items by
    index) inside ``obj``, or ``None`` when a step is missing or of another type. Runs on every
    workload review: a path of present keys is walked by subscripts alone, any other step by
    :func:`_owner_at`; ``None`` is tested by identity and ``dict`` before the ``Mapping`` ABC,
    whose ``isinstance`` is a Python-level call."""
    owner: Any = obj
    try:  # the usual path, mappings all the way: subscripts (each as ``.get`` of a present key)
        for part in container:
            owner = owner[part]
    except (KeyError, TypeError, IndexError):  # a missing key, a list item, another type: step by step
        owner = _owner_at(obj, container)
    meta = owner.get("metadata") if owner is not None and isinstance(owner, (dict, Mapping)) else None
    return meta if meta is not None and isinstance(meta, (dict, Mapping)) else None


def _owner_at(obj: Mapping[str, Any], container: tuple[str, ...]) -> object:
    """The object at ``container`` inside ``obj`` (list items by index), or ``None``."""
    owner: object = obj
    for part in container:
        if owner is None:
            return None
        if isinstance(owner, (dict, Mapping)):
            owner = owner.get(part)
        elif isinstance(owner, list) and part.isdigit() and int(part) < len(owner):
            owner = owner[int(part)]
        else:
            return None
    return owner


def mentions_placement_keys(obj: object) -> bool:
    """True when any mapping key anywhere in ``obj`` (parsed JSON) is an opt-in key or misspells a
    placement key. Decides opt-in for an object too malformed to read its annotation maps: such an
    object is only denied (400) when it was meant to be the webhook's."""
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, Mapping)):
            for key, value in node.items():
                if isinstance(key, str) and (key in kai_scheduler.OPT_IN_KEYS or rules.resembled_placement_key(key)):
                    return True
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return False


def opted_in(maps: list[AnnotationMap]) -> bool:
    """§5 "Opt-in": True when any map carries a placement key of §2 or the leader policy the
    webhook writes (:data:`webhook.kube.kai_scheduler.OPT_IN_KEYS`). A loop, not ``any`` over a generator:
    run on every workload review, and the cheaper of the two."""
    for amap in maps:
        if amap.has_any(*kai_scheduler.OPT_IN_KEYS):
            return True
    return False
