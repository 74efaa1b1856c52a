"""Targets: one resolved segment spec, compiled to each scheduler's own form (DESIGN.md §9b).

The resolution of §3-§5 is target-free; this module is the pure compile step run after it, on the
:class:`~webhook.admission.kinds._workload.Plan` of one admitted workload. What it returns is more
template entries for the workload's JSONPatch (the ``kai.scheduler/*`` keys stay: they are the
pod handler's inputs, §7) and, offline, the objects a target needs.

* ``kai``: the ``kai.scheduler/*`` keys of §2-§3 only (the default; nothing is added).
* ``kueue``: Kueue Topology-Aware Scheduling annotations on the PodTemplateSpec Kueue makes the
  segmented PodSet (sigs.k8s.io/kueue v0.17.0 ``apis/kueue/v1beta2/topology_types.go``): the segment
  required level and size as ``podset-slice-required-topology`` + ``podset-slice-size``, the
  workload level as ``podset-required-topology`` (else ``podset-preferred-topology``). Kueue
  assigns pods to slices by their rank (``pkg/controller/tas/topology_ungater.go``
  ``readRanksForLabels``: the integration's pod index label, minus ``pod-index-offset``) over the
  domains of the assignment sorted by level values (``pkg/cache/scheduler/tas_flavor_snapshot.go``
  ``buildAssignment``), each slice-level domain holding whole slices: slice = rank // size. A PodSet
  whose count the slice size does not divide is admitted with ``count // size`` slices and its
  remaining pods stay gated forever (kueue #15277): denied here.
* ``workload-api``: Kubernetes 1.37's Workload API (k8s.io/api v0.37.2 ``scheduling/v1beta1`` Workload
  and PodGroup, ``scheduling/v1alpha3`` CompositePodGroup, ``core/v1`` ``PodSpec.schedulingGroup``):
  see :mod:`webhook.admission.workload_api`.
* ``gate``: this project's scheduling gate and controller (§9); the templates get the gang facts.

How the target is chosen: the workload's ``segments.dev/target`` label (``metadata.labels`` of the
root), else the serve's ``--target`` (:attr:`AdmissionSettings.target`; ``--gate-pods`` alone
means ``gate``). The target is also written on the segmented templates as the annotation ``segments.dev/target``
(``kueue``; ``workload-api``, with the gang facts on every template of the gang,
:mod:`webhook.admission.kinds._workload`; ``kai`` only under ``--gate-pods``; never ``gate``), so the pod
handler (which reads the pod alone) knows it: a pod whose annotation names another target than
``gate`` is never gated by ``--gate-pods``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from webhook.admission.config import AdmissionSettings
from webhook.admission.resolution import Resolution
from webhook.admission.rules import (
    check_target_key_spelling,
    check_target_known,
    check_target_not_annotation,
    deny_target_cannot_express,
)
from webhook.admission.segments import divisors, lws_segment
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say
from webhook.admission.workload_plan import Plan
from webhook.kube import kai_scheduler
from webhook.kube.kueue import (
    KUEUE_PREFERRED,
    KUEUE_REQUIRED,
    KUEUE_SLICE_REQUIRED,
    KUEUE_SLICE_SIZE,
    KUEUE_TAS_KEYS,
    KUEUE_UNCONSTRAINED,
)
from webhook.kube.segments_dev import TARGET_KEY
from webhook.text.messages import key_field, plural, quote

KAI, KUEUE, WORKLOAD_API, GATE = "kai", "kueue", "workload-api", "gate"
#: Every target, in the order messages list them.
TARGETS: tuple[str, ...] = (KAI, KUEUE, WORKLOAD_API, GATE)


#: The first Kueue release whose ``TASPartialSlices`` feature gate is on by default: a PodSet whose
#: count the slice size does not divide gets a partial last slice (the highest ranks) in one domain
#: of the slice level, for a single slice layer (kubernetes-sigs/kueue #15640 "TAS: place a partial
#: PodSet slice"; before it, the remaining pods stay gated forever, #15277).
KUEUE_PARTIAL_SLICES = (0, 20)

#: A template entry of the workload patch: (JSON Pointer parts of the owner of ``metadata``,
#: ``"annotations"`` | ``"labels"``, entries), as :func:`webhook.admission.kinds._workload.template_entries`.
Entry = tuple[tuple[str, ...], str, dict[str, str]]


def default_target(settings: AdmissionSettings) -> str:
    """The target of a workload without a ``segments.dev/target`` label: ``settings.target``,
    except that ``--gate-pods`` with the default ``kai`` means ``gate`` (DESIGN.md §9, §9b)."""
    if settings.gate_pods and settings.target == KAI:
        return GATE
    return settings.target


def served_targets(settings: AdmissionSettings) -> tuple[str, ...]:
    """The targets a workload label may choose under ``settings``: ``gate`` only when the serve
    gates pods (the pod handler adds the gate at pod CREATE, §9); ``workload-api`` only when it is
    the serve's own target (the controller that creates its objects runs with it)."""
    out = [KAI, KUEUE]
    if default_target(settings) == WORKLOAD_API:
        out.append(WORKLOAD_API)
    if settings.gate_pods:
        out.append(GATE)
    return tuple(out)


def chosen_target(obj: Mapping[str, Any], settings: AdmissionSettings, decision: Decision) -> str | None:
    """The target of workload ``obj``: its ``metadata.labels["segments.dev/target"]``, else
    :func:`default_target`. Returns ``None`` after recording a ``target-unknown`` denial when the
    label names no target :func:`served_targets` lists, or a ``target-as-annotation`` denial when
    the root carries the key as an annotation (a choice that would be ignored), or a
    ``target-key-misspelled`` denial when a root label or annotation key misspells it."""
    # run on every workload review: None is tested by identity, dict before the Mapping ABC
    meta = obj.get("metadata")
    if meta is None or not isinstance(meta, (dict, Mapping)):
        meta = {}
    labels, annotations = meta.get("labels"), meta.get("annotations")
    spelled = [check_target_key_spelling(decision, field, keys, TARGET_KEY)
               for field, keys in (("metadata.labels", labels), ("metadata.annotations", annotations))
               if keys is not None and isinstance(keys, (dict, Mapping))]
    if not all(spelled):
        return None
    if (annotations is not None and isinstance(annotations, (dict, Mapping))
            and not check_target_not_annotation(decision, annotations, TARGET_KEY)):
        return None
    value = labels.get(TARGET_KEY) if labels is not None and isinstance(labels, (dict, Mapping)) else None
    if value is None:
        return default_target(settings)
    field = key_field("metadata.labels", TARGET_KEY)
    if not check_target_known(decision, field, value, served_targets(settings)):
        return None
    return str(value)


def compile_workload(kind: str, obj: Mapping[str, Any], plan: Plan, settings: AdmissionSettings,
                     decision: Decision) -> tuple[str | None, list[Entry]]:
    """Compile ``plan`` (one admitted workload of ``kind``) to its target. Returns ``(target,
    entries)``: the target chosen (``None`` when the label was denied) and the template entries the
    patch adds for it; denials (``target-cannot-express``) and warnings (``target-cannot-express``,
    naming the target) are recorded in ``decision``. ``kai`` and ``gate`` add no entry here (the
    gang facts of ``gate`` are :func:`webhook.admission.kinds._workload.gang_entries`)."""
    target = chosen_target(obj, settings, decision)
    # the mark the pod handler reads: every target but gate (whose pods --gate-pods gates) and but
    # kai when no pod is gated anyway
    if target is None or target == GATE or (target == KAI and not settings.gate_pods):
        return target, []
    parts: list[tuple[str | None, Plan]] = [(name, unit) for name, unit in plan.units] or [(None, plan)]
    entries: list[Entry] = []
    for name, unit in parts:
        if target == KUEUE:
            entries += kueue_entries(kind, obj, unit, name, decision, settings)
        elif unit.worker is not None and (unit.resolution.segmented or _workload_level(unit)[0] is not None):
            entries.append((unit.worker.container, "annotations", {TARGET_KEY: target}))
    if target == KUEUE and plan.units:
        _kueue_groups_apart(kind, plan, decision)
    if target == WORKLOAD_API:
        for _, unit in parts:
            _workload_api_checks(unit, decision)
    return target, entries


def _kueue_groups_apart(kind: str, plan: Plan, decision: Decision) -> None:
    """DESIGN.md §2, §9b: a root workload level binds every group of a kind of units (JobSet
    replicatedJobs, Ray worker groups and head; KAI makes one PodGroup of the object). Kueue makes
    each group its own PodSet and holds each to the level alone (sigs.k8s.io/kueue v0.17.0: the
    PodSet grouping of ``podset-group-name`` excludes slice keys), and gives the Ray head no level
    at all: both warned, naming the groups (``target-cannot-express``)."""
    root_level = next((plan.root.get(key) for key in kai_scheduler.WORKLOAD_PLACEMENT_KEYS if plan.root.get(key) is not None),
                      None)
    if root_level is None or not plan.units:
        return
    level = plan.units[0][1].resolution.node_label(root_level.value)
    groups = [name for name, unit in plan.units if unit.gang_size != 0]
    noun = "replicatedJob" if kind == "JobSet" else "worker group"
    if len(groups) > 1:
        say(decision, "target-cannot-express", target=KUEUE,
            what=f"{level} holds each {noun} alone, not {', '.join(groups)} together")
    if plan.ungated is not None:
        say(decision, "target-cannot-express", target=KUEUE,
            what=f"{plan.ungated} is its own PodSet, not held in the workers' {level} domain")


def _workload_level(unit: Plan) -> tuple[str | None, str | None]:
    """The workload level of ``unit``: (required, preferred; the user's, else the automatic one),
    each as its node label (:meth:`Resolution.node_label`: Kueue and the Workload API know no KAI
    level alias)."""
    return unit.resolution.workload_labels()


class KueuePodSet(NamedTuple):
    """The PodSet Kueue slices, as its integration builds it (sigs.k8s.io/kueue v0.17.0
    ``pkg/controller/jobs/*``): ``pods`` pods; ``ranked``: its pods carry an index label Kueue
    orders them by (else Kueue assigns gated pods to domains in list order); ``slices``: for each
    of our segmented pods (our index order), the Kueue slice it gets (``None``: the pod is not in
    this PodSet); ``problem``: why Kueue cannot slice it as we segment it (a denial), or ``None``."""

    pods: int
    ranked: bool
    slices: tuple[int | None, ...] = ()
    problem: str | None = None


def kueue_podset(kind: str, obj: Mapping[str, Any], unit: Plan, size: int) -> KueuePodSet | None:
    """The :class:`KueuePodSet` of ``unit`` (segment size ``size``), or ``None`` when Kueue has no
    integration for ``kind`` (v0.17.0 ``pkg/controller/jobs``: no DistributedWorkload)."""
    res = unit.resolution
    pods = res.inputs.pods if res.inputs is not None else None
    if kind == "DistributedWorkload" or pods is None:
        return None
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    if kind == "LeaderWorkerSet":
        return _kueue_lws(unit, size)
    if kind == "MPIJob" and spec.get("runLauncherAsWorker") is True:
        return KueuePodSet(pods - 1, True, problem="the launcher that runs as a worker is its own PodSet, "
                                                  "so Kueue's worker ranks are not our segment indices")
    ranked = kind not in ("RayCluster", "RayJob", "RayService")  # KubeRay groups: no PodIndexLabel
    return KueuePodSet(pods, ranked, tuple(i // size for i in range(pods)))


def _kueue_lws(unit: Plan, size: int) -> KueuePodSet | None:
    """LWS: with a ``leaderTemplate`` the leader is its own PodSet and the workers' rank is
    ``worker-index - 1`` (Kueue's LWS webhook writes ``pod-index-offset: 1``); without one the group
    is one PodSet ranked by ``worker-index``. ``slices`` lists every pod of a group, leader first."""
    group = unit.resolution.inputs.lws_group if unit.resolution.inputs is not None else None
    if group is None or group.size is None:
        return None
    own_leader = bool(unit.gang_templates)
    count = group.size - 1 if own_leader else group.size
    slices = tuple(None if own_leader and w == 0 else (w - 1 if own_leader else w) // size for w in range(group.size))
    problem = None
    if count % size == 0 and not lws_kueue_matches(group.size, size, group.policy, own_leader):
        problem = f"Kueue slices the {count} worker pods by worker-index, which is not how {group.policy} segments them"
    return KueuePodSet(count, True, slices, problem)


def kueue_version_text(version: tuple[int, int]) -> str:
    """``v0.17``: how messages name a Kueue version (:attr:`AdmissionSettings.kueue_version`)."""
    return f"v{version[0]}.{version[1]}"


def other_targets(settings: AdmissionSettings, than: str = KUEUE) -> str:
    """The targets a denial's fix may suggest instead of ``than``: the ones a workload label may
    choose under ``settings`` (:func:`served_targets`; ``gate`` only under ``--gate-pods``, so a fix
    never names a target the same webhook then denies), e.g. ``"target kai or gate"``."""
    return "target " + " or ".join(t for t in served_targets(settings) if t != than)


def kueue_entries(kind: str, obj: Mapping[str, Any], unit: Plan, name: str | None,
                  decision: Decision, settings: AdmissionSettings | None = None) -> list[Entry]:
    """The Kueue TAS annotations of one unit (module docstring), with the target's denials and
    warnings recorded in ``decision``, every one of them (DESIGN.md §5: all errors of one object in
    one message). ``name``: the unit's name (JobSet replicatedJob, Ray group); ``settings``: the
    served targets named in fixes and the Kueue version (:attr:`AdmissionSettings.kueue_version`;
    ``None``: the defaults)."""
    settings = settings if settings is not None else AdmissionSettings()
    res = unit.resolution
    required, preferred = _workload_level(unit)
    wanted: dict[str, str] = {}
    if required is not None:
        wanted[KUEUE_REQUIRED] = required
        if preferred is not None and preferred != required:
            say(decision, "target-cannot-express", target=KUEUE,
                what=f"workload preferred {preferred}: dropped (a PodSet takes required or preferred)")
    elif preferred is not None:
        wanted[KUEUE_PREFERRED] = preferred
    if res.segmented:
        wanted.update(_kueue_slices(kind, obj, unit, decision, settings))
    where = unit.worker
    if where is None and (wanted or res.segmented):
        # TrainJob: its trainer template is a runtimePatches entry Kueue reads through the runtime
        deny_target_cannot_express(decision, KUEUE, "kind", kind,
                                   f"{kind}'s pod template is not one Kueue reads PodSet annotations from",
                                   f"choose {other_targets(settings)} for this kind")
    if not wanted or where is None:
        return []
    kept = _users_own_podset_level(unit, where.values, wanted) or _kueues_own_unconstrained(obj, where.container,
                                                                                             where.values, wanted)
    _check_user_kueue_keys(where.field, where.values, wanted, decision, kept)
    _kueue_other_podsets(kind, unit, required or preferred, decision)
    return [(where.container, "annotations", {**wanted, TARGET_KEY: KUEUE})]


def _kueue_slices(kind: str, obj: Mapping[str, Any], unit: Plan, decision: Decision,
                  settings: AdmissionSettings) -> dict[str, str]:
    """The slice annotations of a segmented unit, or ``{}`` after a denial (every one recorded)
    or when only a preferred segment level is set (Kueue slices are required only: warned)."""
    res = unit.resolution
    size = res.size_in_force
    assert size is not None  # segmented
    level_field = res.seg_required.field if res.seg_required else (
        res.size.field if res.size is not None else f"metadata.labels[{TARGET_KEY}]")
    podset = kueue_podset(kind, obj, unit, size)
    version = kueue_version_text(settings.kueue_version)
    if podset is None:
        deny_target_cannot_express(decision, KUEUE, level_field, size,
                                   f"Kueue {version} has no integration for {kind}, so nothing would admit it",
                                   f"choose {other_targets(settings)} for this kind")
        return {}
    denied = False
    if podset.problem is not None:
        deny_target_cannot_express(decision, KUEUE, level_field, size, podset.problem,
                                   f"choose {other_targets(settings)} for this workload")
        denied = True
    elif podset.pods % size:
        denied = not _kueue_partial_slice(podset.pods, size, res, level_field, decision, settings)
    segment_required, preferred = res.segment_labels()
    if segment_required is None:
        if preferred is not None:
            say(decision, "target-cannot-express", target=KUEUE,
                what=f"segment preferred {preferred}: not enforced (Kueue slices are required only)")
        return {}
    if preferred is not None and preferred != segment_required:
        say(decision, "target-cannot-express", target=KUEUE,
            what=f"segment preferred {preferred}: dropped (Kueue slices are required only)")
    if not _slice_within_podset(unit, decision) or denied:
        return {}
    if not podset.ranked:
        say(decision, "target-cannot-express", target=KUEUE,
            what=f"{kind} pods carry no index Kueue ranks by: its slices are not our segment-index labels")
    elif any(kueue_slice is None for kueue_slice in podset.slices):
        say(decision, "target-cannot-express", target=KUEUE,
            what="the LWS leader is its own PodSet: Kueue does not hold it in segment 0's domain")
    return {KUEUE_SLICE_REQUIRED: segment_required, KUEUE_SLICE_SIZE: str(size)}


def _kueue_partial_slice(pods: int, size: int, res: Resolution, level_field: str, decision: Decision,
                         settings: AdmissionSettings) -> bool:
    """A PodSet of ``pods`` pods that slices of ``size`` do not divide (DESIGN.md §9b): before
    Kueue v0.20 (:data:`KUEUE_PARTIAL_SLICES`) its last pods stay gated forever (kueue #15277),
    denied, the message saying for which versions; from v0.20 Kueue places the last slice partial
    (``TASPartialSlices``, on by default), admitted with a warning naming that gate. Returns True
    when admitted."""
    rest = pods % size
    version = settings.kueue_version
    if version >= KUEUE_PARTIAL_SLICES:
        say(decision, "kueue-partial-slice", rest=rest, pods=plural(rest, "pod"), version=kueue_version_text(version))
        return True
    fits = divisors(pods, most=pods)
    deny_target_cannot_express(
        decision, KUEUE, res.size.field if res.size is not None else level_field,
        res.size.raw if res.size is not None else size,
        f"Kueue's PodSet has {pods} pods and slices of {size} leave {plural(rest, 'pod')} gated forever on Kueue "
        f"before v0.20 (kueue #15277; --kueue-version is {version[0]}.{version[1]})",
        f"a segment size dividing {pods} ({', '.join(map(str, fits)) or 'none above 1'}), "
        f"or {other_targets(settings)}, or --kueue-version 0.20 on Kueue v0.20+")
    return False


def _slice_within_podset(unit: Plan, decision: Decision) -> bool:
    """Kueue refuses a slice level broader than the PodSet's level (``findTopologyAssignment``:
    "podset slice topology ... is above the podset topology") and the workload then never admits:
    denied when the topology is known. §5 already denies this against a required workload level
    (``segment-required-broader-than-workload``, not said twice); here the preferred one counts."""
    res = unit.resolution
    required, preferred = _workload_level(unit)
    level = required or preferred
    topology = res.topology
    if level is None or topology is None or res.segment_required is None:
        return True
    if required is not None:  # §5's own rule: denied there already, or nested
        return True
    if not topology.has_level(level) or not topology.has_level(res.segment_required):
        return True
    if topology.depth(res.segment_required) >= topology.depth(level):
        return True
    assert res.seg_required is not None
    deny_target_cannot_express(decision, KUEUE, res.seg_required.field, res.segment_required,
                               f"Kueue never admits a slice level broader than the PodSet's level {quote(level)}",
                               "narrow the segment level or widen the workload level")
    return False


def _users_own_podset_level(unit: Plan, values: Mapping[str, str], wanted: Mapping[str, str]) -> str | None:
    """The PodSet-level key (``podset-required-topology`` or ``-preferred-``) the user wrote on the
    template as Kueue's own samples do, kept as it is when the segment keys give no workload level
    (the webhook writes none then, so nothing disagrees) and its value is a level (node label) of
    the topology no narrower than the segment level (Kueue: "podset slice topology ... is
    above the podset topology" never admits). ``None``: no such key, or it is not one to keep."""
    if KUEUE_REQUIRED in wanted or KUEUE_PREFERRED in wanted:
        return None
    keys_written = [key for key in (KUEUE_REQUIRED, KUEUE_PREFERRED) if key in values]
    topology, segment = unit.resolution.topology, unit.resolution.segment_required
    if len(keys_written) != 1 or topology is None:
        return None
    level = values[keys_written[0]]
    if level not in topology.levels:  # Kueue reads node labels, never a KAI alias
        return None
    if segment is not None and topology.has_level(segment) and topology.depth(segment) < topology.depth(level):
        return None
    return keys_written[0]


#: The scheduling gate Kueue adds to a PodSet's template when it starts a job it admitted with a
#: topology assignment (kueue v0.17 ``apis/kueue/v1beta2/topology_types.go`` TopologySchedulingGate).
KUEUE_TOPOLOGY_GATE = "kueue.x-k8s.io/topology"


def _template_at(obj: Mapping[str, Any], container: Sequence[str]) -> Mapping[str, Any]:
    """The object at JSON Pointer parts ``container`` of ``obj`` (a PodTemplateSpec), ``{}`` when absent."""
    node: Any = obj
    for part in container:
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return node if isinstance(node, Mapping) else {}


def _kueues_own_unconstrained(obj: Mapping[str, Any], container: Sequence[str], values: Mapping[str, str],
                              wanted: Mapping[str, str]) -> str | None:
    """``podset-unconstrained-topology`` when Kueue itself wrote it: when Kueue starts a job it
    admitted with a topology assignment whose PodSet asked for slices only (no required, preferred or
    unconstrained level: the segment keys give no workload level, so the webhook wrote none), it
    writes ``"true"`` on the template together with its ``kueue.x-k8s.io/topology`` scheduling gate
    (kueue v0.17 ``pkg/podset/podset.go`` ``FromAssignment``: "for implicit TAS we inject the
    unconstrained topology"), and Kueue itself reads a slice-only request as unconstrained
    (``pkg/cache/scheduler/tas_flavor_snapshot.go`` ``isSliceTopologyOnlyRequest``). Denying that
    UPDATE left the admitted job suspended forever (issue 36: the trace's 3 gangs without a gang
    level). Written by a user at CREATE (no gate), the key still disagrees: Kueue would then read
    the PodSet's level as the lowest one, below the slices, and never admit. ``None`` otherwise."""
    if KUEUE_REQUIRED in wanted or KUEUE_PREFERRED in wanted or values.get(KUEUE_UNCONSTRAINED) != "true":
        return None
    spec = _template_at(obj, container).get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    names = {g.get("name") for g in gates if isinstance(g, Mapping)} if isinstance(gates, list) else set()
    return KUEUE_UNCONSTRAINED if KUEUE_TOPOLOGY_GATE in names else None


def _check_user_kueue_keys(field: str, values: Mapping[str, str], wanted: Mapping[str, str],
                           decision: Decision, kept: str | None = None) -> None:
    """A Kueue TAS annotation the user wrote on the template must say what the webhook writes
    (DESIGN.md §4.5: never overwritten, never silently doubled; Kueue also reads a present key
    whatever its value, so ``"false"`` counts). ``kept``: the user's own PodSet-level key that
    :func:`_users_own_podset_level` keeps, or Kueue's own :func:`_kueues_own_unconstrained`."""
    for key in KUEUE_TAS_KEYS:
        if key != kept and key in values and values[key] != wanted.get(key):
            fix = f"remove it (the webhook writes {key}={wanted[key]})" if key in wanted else \
                "remove it: the segment keys decide Kueue's topology under target kueue"
            deny_target_cannot_express(decision, KUEUE, f"{field}[{key}]", values[key],
                                       "a Kueue topology annotation that disagrees with the resolved segments", fix)


def _kueue_other_podsets(kind: str, unit: Plan, level: str | None, decision: Decision) -> None:
    """Kueue holds each PodSet to its level on its own; a Master / leader / launcher PodSet is not
    held in the workers' domain (``podset-group-name``, which would, excludes slices): warned."""
    if level is None:
        return
    others = {"PyTorchJob": ("Master", unit.master), "DistributedWorkload": ("master", unit.master),
              "LeaderWorkerSet": ("leader", unit.gang_templates[0] if unit.gang_templates else None),
              "MPIJob": ("Launcher", unit.templates[0] if unit.templates else None)}
    role, other = others.get(kind, ("", None))
    if other is not None:
        say(decision, "target-cannot-express", target=KUEUE,
            what=f"the {role} is its own PodSet, not held in the workers' {level} domain")


def _workload_api_checks(unit: Plan, decision: Decision) -> None:
    """What the Workload API cannot express (k8s.io/api v0.37.2: ``TopologyConstraint`` has only a
    required ``key``): preferred levels are warned about."""
    res = unit.resolution
    required, preferred = _workload_level(unit)
    if preferred is not None and preferred != required:
        say(decision, "target-cannot-express", target=WORKLOAD_API,
            what=f"workload preferred {preferred}: not enforced (required constraints only)")
    seg_required, seg_preferred = res.segment_labels()
    if res.segmented and seg_preferred is not None and seg_preferred != seg_required:
        say(decision, "target-cannot-express", target=WORKLOAD_API,
            what=f"segment preferred {seg_preferred}: not enforced (required constraints only)")


def target_annotations(pods: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """The target's annotations on admitted pod manifests, for ``place --target``: for each distinct
    set of Kueue / ``segments.dev/target`` annotations, the pods that carry it (``"pod-a, pod-b"`` →
    annotations), in pod order. Pods without any are left out."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for pod in pods:
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping):
            meta = {}
        annotations = meta.get("annotations")
        if not isinstance(annotations, Mapping):
            annotations = {}
        wanted = tuple(sorted((k, str(v)) for k, v in annotations.items() if k in KUEUE_TAS_KEYS or k == TARGET_KEY))
        if wanted:
            groups.setdefault(wanted, []).append(str(meta.get("name", "")))
    return {", ".join(names): dict(entries) for entries, names in groups.items()}


def lws_kueue_matches(group_size: int, size: int, policy: str, own_leader: bool) -> bool:
    """True when Kueue's slice of every LWS worker equals our segment (DESIGN.md §7 ``lws_segment``):
    for tests and docs. ``own_leader``: the LWS has a ``leaderTemplate``."""
    for worker in range(1, group_size):
        ours = lws_segment(worker, group_size, size, policy)
        theirs = (worker - 1 if own_leader else worker) // size
        if ours != theirs:
            return False
    return True


__all__ = ["TARGETS", "TARGET_KEY", "KUEUE_REQUIRED", "KUEUE_PREFERRED", "KUEUE_SLICE_REQUIRED", "KUEUE_SLICE_SIZE",
           "chosen_target", "compile_workload", "default_target", "served_targets", "kueue_entries", "kueue_podset",
           ]
