"""LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``) admission (DESIGN.md §3–§5).

Each group of ``spec.leaderWorkerTemplate.size`` pods (R, default 1, leader included) is
segmented. Segment size: the ``kai.scheduler/segment-size`` annotation of the ``workerTemplate``
(root value inherited) beats ``subGroupPolicy.subGroupSize`` (warning "subGroupSize overridden"
when they differ). Leader policy: ``subGroupPolicy.subGroupPolicyType`` (``LeaderWorker``, the
upstream default, or ``LeaderExcluded``), written on the templates as
``kai.scheduler/segment-leader-policy``. Automatic placement never applies to LWS (seed, §6).

Leader template decision (documented here, as the contract leaves it open for LeaderExcluded):

* LeaderWorker with an explicit ``leaderTemplate``: the leader is in segment 0, so the leader
  template receives exactly the worker template's owned keys. User values there that differ from
  the worker template's get a warning and are overwritten (the worker template wins, §5).
* LeaderExcluded with an explicit ``leaderTemplate``: the leader template receives NO segment
  keys (no segment size, no segment placement levels) but does receive
  ``kai.scheduler/segment-leader-policy: LeaderExcluded`` and the topology name, so the pod
  handler can tell from the leader pod alone that it is excluded (``subgroup-name: leader``).
  User segment keys there get a warning ("ignored") and are left in place (never removed).
* No ``leaderTemplate``: LWS builds the leader from the ``workerTemplate``, so the leader pod
  carries the worker keys and the policy; the pod handler recognises it by worker index 0.

One answer for every reader (DESIGN.md §3): KAI's pod-grouper reads ``subGroupSize`` first,
then the root annotation, then the workerTemplate annotation; LWS labels ``subgroup-index`` from
``subGroupSize``. When the annotation wins, the patch sets ``subGroupSize`` (when present) and a
differing root ``kai.scheduler/segment-size`` to the resolved size, with a warning; a size LWS
would reject for ``subGroupSize`` is denied (``lws-subgroup-size-divisibility``).

Segment counts are per group (the LWS gang); the 10,000-segment limit applies per group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission.config import AdmissionSettings
from webhook.admission.constraints import resolve
from webhook.admission.kinds._workload import CREATE, UpdateContext, review_workload
from webhook.admission.kinds.description import (
    ControllerPod,
    KindDescription,
    PodCap,
    PodRules,
    ShapeError,
    lenient_count,
    name_and_namespace,
    pod_int,
    pod_template,
    replicas,
    shown,
)
from webhook.admission.reading import AnnotationMap, get_int, get_mapping, read_annotations
from webhook.admission.resolution import (
    ORIGIN_ANNOTATION,
    KindSizeRule,
    LwsGroup,
    Resolution,
    SegmentInputs,
    SegmentSize,
    SpecSizeField,
)
from webhook.admission.rules import (
    check_leader_excluded_divisibility,
    check_lws_accepts_subgroup_size,
    check_lws_startup_policy,
    malformed,
)
from webhook.admission.segments import lws_segment, lws_segmented_pods, lws_subgroup_name
from webhook.admission.targets import chosen_target
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say, text
from webhook.admission.workload_plan import NO_READER_EDITS, Plan, ReaderEdits
from webhook.kube import kai_scheduler, leaderworkerset_sigs
from webhook.text.messages import plural, quote
from webhook.topology.objects import TopologyCatalog

KIND = "LeaderWorkerSet"
GROUP = "leaderworkerset.x-k8s.io"
LWT = "spec.leaderWorkerTemplate"
SGP = f"{LWT}.subGroupPolicy"
SUB_GROUP_SIZE_PARTS = ("spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupSize")


def _leader_plan(leader: AnnotationMap, res: Resolution | None, policy: str, decision: Decision) -> dict[str, str]:
    """Owned keys for the leaderTemplate and the warnings about its user values; ``res``: the
    resolution when segments are in force, else ``None``."""
    worker_keys = res.worker_keys() if res is not None else {}
    if not worker_keys or res is None:
        for key in kai_scheduler.SEGMENT_KEYS:
            if key in leader.values:
                say(decision, "lws-leader-template-key-unsegmented", key=key)
        return {}
    if policy == kai_scheduler.POLICY_LEADER_WORKER:
        for key in (kai_scheduler.TOPOLOGY,) + kai_scheduler.SEGMENT_KEYS:
            if key in leader.values and leader.values[key] != worker_keys.get(key):
                say(decision, "lws-leader-template-differs", key=key)
        return worker_keys
    for key in kai_scheduler.SEGMENT_KEYS:
        if key in leader.values:
            say(decision, "lws-leader-excluded-segment-key", key=key)
    wanted = {kai_scheduler.SEGMENT_LEADER_POLICY: policy}
    if res.topology_name is not None:
        if kai_scheduler.TOPOLOGY in leader.values and leader.values[kai_scheduler.TOPOLOGY] != res.topology_name:
            say(decision, "lws-leader-template-differs", key=kai_scheduler.TOPOLOGY)
        wanted = {kai_scheduler.TOPOLOGY: res.topology_name, **wanted}
    return wanted


def _size_rule(group_size: int, excluded: bool, sub_size: int | None) -> KindSizeRule:
    """The LWS rules of DESIGN.md §3 and §5 on a valid segment size (run by
    :func:`webhook.admission.constraints.resolve` after the range rules): under LeaderExcluded, size - 1
    splits into whole segments; when the object sets ``subGroupSize``, the size is one LWS accepts
    for it (the patch writes it there); otherwise a partial last segment of a group is a warning.
    Returns True when the size passes them."""

    def lws_accepts(size: SegmentSize, decision: Decision) -> bool:
        valid = size.valid
        if valid is None:  # never: resolve asks a size rule only about a valid size
            return True
        if excluded:
            return check_leader_excluded_divisibility(decision, valid, size.field, size.raw, group_size, f"{LWT}.size")
        if sub_size is not None:
            return check_lws_accepts_subgroup_size(decision, valid, size.field, size.raw, group_size, sub_size)
        if group_size % valid and (group_size - 1) % valid:
            say(decision, "lws-partial-group", group_size=group_size, size=valid, rest=plural(group_size % valid, "pod"))
        return True

    return lws_accepts


def _one_answer(res: Resolution, root: AnnotationMap, sub_size: int | None, decision: Decision) -> ReaderEdits:
    """DESIGN.md §3 "One answer for every reader": when segments are in force from the annotation,
    make ``subGroupSize`` and the root annotation say the resolved size (with a warning where they
    said another). Returns the edits, :data:`NO_READER_EDITS` when there are none."""
    if not res.segmented or res.size is None or res.size.origin != ORIGIN_ANNOTATION:
        return NO_READER_EDITS
    size = res.size_in_force
    overwritten = set()
    spec_values: tuple[tuple[tuple[str, ...], Any], ...] = ()
    root_annotations: dict[str, str] = {}
    if sub_size is not None:
        overwritten.add(f"{SGP}.subGroupSize")
        if sub_size != size:
            spec_values = ((SUB_GROUP_SIZE_PARTS, size),)
            say(decision, "lws-subgroup-size-set", sub_group_size=sub_size, size=size)
    root_size = root.get(kai_scheduler.SEGMENT_SIZE)
    if root_size is not None and root_size.field != res.size.field:
        overwritten.add(root_size.field)
        if root_size.value != str(size):
            root_annotations[kai_scheduler.SEGMENT_SIZE] = str(size)
            say(decision, "lws-root-size-set", value=quote(root_size.value), size=quote(str(size)))
    elif root_size is not None and root_size.value != str(size):  # the root value is the one in force: canonical
        root_annotations[kai_scheduler.SEGMENT_SIZE] = str(size)
    return ReaderEdits(spec_values=spec_values, root_annotations=root_annotations,
                       overwritten_inputs=frozenset(overwritten))


def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
            settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
    """Read, resolve and validate one LeaderWorkerSet object (adds the LWS size rules of DESIGN.md
    §3 and §5, and the reader edits of §3). Returns ``None`` when too malformed to resolve.
    ``update``: the request's :class:`UpdateContext`; automatic placement never applies to LWS (§6)."""
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    lwt = get_mapping(spec, "leaderWorkerTemplate", "spec", decision, required=True) if spec is not None else None
    if root is None or spec is None or lwt is None:
        return None
    group_size = get_int(lwt, "size", LWT, decision, default=1, minimum=1)
    policy = kai_scheduler.POLICY_LEADER_WORKER
    sub_size = written_size = None  # subGroupSize as read (an int) and as written
    sgp = get_mapping(lwt, "subGroupPolicy", LWT, decision)
    if sgp is not None:
        ptype = sgp.get("subGroupPolicyType")
        if ptype is not None and ptype not in kai_scheduler.LEADER_POLICIES:
            malformed(decision, f"{SGP}.subGroupPolicyType", ptype, "one of LeaderWorker, LeaderExcluded")
        elif ptype is not None:
            policy = ptype
        written_size = sgp.get("subGroupSize")
        sub_size = get_int(sgp, "subGroupSize", SGP, decision, default=None)
    wt = get_mapping(lwt, "workerTemplate", LWT, decision, required=True)
    worker = read_annotations(wt, f"{LWT}.workerTemplate", ("spec", "leaderWorkerTemplate", "workerTemplate"), decision) if wt is not None else None
    lt = get_mapping(lwt, "leaderTemplate", LWT, decision)
    leader = read_annotations(lt, f"{LWT}.leaderTemplate", ("spec", "leaderWorkerTemplate", "leaderTemplate"), decision) if lt is not None else None
    if worker is None or (lt is not None and leader is None):
        return None
    pods = lws_segmented_pods(group_size, policy) if group_size is not None else None
    excluded = policy == kai_scheduler.POLICY_LEADER_EXCLUDED
    inputs = SegmentInputs(
        kind=KIND,
        root=root,
        worker=worker,
        pods=pods,
        pods_field=f"{LWT}.size" + (" - 1" if excluded else ""),
        pods_noun="workers per group (leader excluded)" if excluded else "pods per group",
        spec_size=SpecSizeField.stated(f"{SGP}.subGroupSize", written_size, sub_size, wins=False),
        lws_group=LwsGroup(size=group_size, policy=policy, policy_field=f"{SGP}.subGroupPolicyType",
                           validates_size=sub_size is not None),
        automatic=False,
        warn_partial=False,
        extra_worker_keys={kai_scheduler.SEGMENT_LEADER_POLICY: policy},
        size_rule=_size_rule(group_size, excluded, sub_size) if group_size is not None else None,
        running_size=update.running_size(),
    )
    res = resolve(inputs, catalog, settings, decision)
    edits = _one_answer(res, root, sub_size, decision) if group_size is not None else NO_READER_EDITS
    # An LWS whose object is denied for any reason has no segments in force for what follows (the
    # startup-policy rule, the leaderTemplate's keys and warnings); its reader edits stand, so an
    # UPDATE does not count an input the patch would overwrite as a change.
    segmented = res.segmented and decision.allowed
    if segmented and res.size_in_force is not None:  # segmented: a size is in force
        target = chosen_target(obj, settings, Decision(kind=KIND))  # its own denials: compile_workload's
        check_lws_startup_policy(decision, spec.get("startupPolicy"), res.size_in_force, target)  # §3b
        current = worker.values.get(kai_scheduler.SEGMENT_LEADER_POLICY)
        if current is not None and current != policy:
            say(decision, "lws-leader-policy-replaced", value=quote(current), policy=policy)
    plan = Plan(resolution=res, root=root, worker=worker, reader_edits=edits,
                templates=[leader] if leader is not None else [],
                gang_size=group_size, gang_templates=[leader] if leader is not None else [])  # one gang per group, §9
    if leader is not None:
        wanted = _leader_plan(leader, res if segmented else None, policy, decision)
        if wanted:
            plan.other_templates.append((leader, wanted))
    return plan


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit a LeaderWorkerSet AdmissionReview ``request`` (CREATE/UPDATE; others allowed
    unchanged). Writes the resolved keys and the leader policy on the workerTemplate and, as
    described in the module docstring, on the leaderTemplate."""
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)


# ----------------------------------------------------------------------------- the description
class LeaderWorkerSetPods(PodRules):
    """Pods of an LWS group (DESIGN.md §7): ``leaderworkerset.sigs.k8s.io/worker-index`` (0 = the
    leader), the group size R from the pod annotation ``leaderworkerset.sigs.k8s.io/size``, the
    leader policy from ``kai.scheduler/segment-leader-policy``, else LWS's ``subgroup-policy-type``,
    else LeaderWorker; a segment size from LWS's ``subgroup-size`` when the pod has no
    ``kai.scheduler/segment-size``. Subgroup names are KAI's leaf subgroups (``leader``,
    ``workers``, ``segment-<k>``; KAI d5bc503 ``lws_grouper.go``). Gang: one per group,
    ``<namespace>/<leaderworkerset.sigs.k8s.io/name>/<group-index>`` (§9)."""

    name = "leaderworkerset"
    size_fallback = leaderworkerset_sigs.LWS_SUBGROUP_SIZE
    gang_size_fallback = leaderworkerset_sigs.LWS_SIZE
    gang_label_text = f"{leaderworkerset_sigs.LWS_NAME} + group-index"

    def owns(self, labels: Mapping[str, str]) -> bool:
        """A pod labelled with an LWS worker index or LWS name."""
        return leaderworkerset_sigs.LWS_WORKER_INDEX in labels or leaderworkerset_sigs.LWS_NAME in labels

    @staticmethod
    def _policy(annotations: Mapping[str, str]) -> str:
        return annotations.get(kai_scheduler.SEGMENT_LEADER_POLICY) or annotations.get(leaderworkerset_sigs.LWS_SUBGROUP_POLICY_TYPE) \
            or kai_scheduler.POLICY_LEADER_WORKER

    def unsized(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, str]:
        """An excluded leader carries no segment size (its template gets no segment keys, DESIGN.md
        §2) but is still named ``leader`` (§7)."""
        policy = self._policy(annotations)
        if policy == kai_scheduler.POLICY_LEADER_EXCLUDED and labels.get(leaderworkerset_sigs.LWS_WORKER_INDEX) == "0":
            return {kai_scheduler.SUBGROUP_NAME: lws_subgroup_name(None, leader=True, policy=policy)}
        return {}

    def segment(self, labels: Mapping[str, str], annotations: Mapping[str, str], size: int) -> tuple[dict[str, str], list[str]]:
        """The segment of worker ``w`` of a group of R (:func:`webhook.admission.segments.lws_segment`)."""
        policy = self._policy(annotations)
        if policy not in kai_scheduler.LEADER_POLICIES:
            return {}, [text("pod-leader-policy-unknown", policy=quote(policy))]
        raw_w = labels.get(leaderworkerset_sigs.LWS_WORKER_INDEX)
        worker = pod_int(raw_w)
        if worker is None:
            return {}, [text("pod-label-unreadable", label=leaderworkerset_sigs.LWS_WORKER_INDEX, shown=shown(raw_w),
                             expected="missing or not an int32")]
        if worker == 0:
            segment = None if policy == kai_scheduler.POLICY_LEADER_EXCLUDED else 0
        else:
            raw_r = annotations.get(leaderworkerset_sigs.LWS_SIZE)
            group = pod_int(raw_r)
            if group is None or group < 1:
                return {}, [text("pod-annotation-unreadable", annotation=leaderworkerset_sigs.LWS_SIZE, shown=shown(raw_r),
                                 expected="missing or not an int32")]
            if worker >= group:
                return {}, [text("pod-index-out-of-range", index=f"worker-index {worker}",
                                 problem=f"outside a group of {group} pods")]
            segment = lws_segment(worker, group, size, policy)
        name = lws_subgroup_name(segment, leader=worker == 0, policy=policy)
        if segment is None:
            return {kai_scheduler.SUBGROUP_NAME: name}, []
        return {kai_scheduler.SEGMENT_INDEX: str(segment), kai_scheduler.SUBGROUP_NAME: name}, []

    def claims_gang(self, labels: Mapping[str, str]) -> bool:
        """A non-empty ``leaderworkerset.sigs.k8s.io/name``."""
        return bool(labels.get(leaderworkerset_sigs.LWS_NAME))

    def gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<lws>/<group-index>``; ``None`` without a decimal group index."""
        group = labels.get(leaderworkerset_sigs.LWS_GROUP_INDEX)
        return f"{namespace}/{labels[leaderworkerset_sigs.LWS_NAME]}/{group}" if group and group.isdigit() else None

    def role(self, labels: Mapping[str, str]) -> str | None:
        """``leader`` for worker index 0, else ``worker``."""
        if labels.get(leaderworkerset_sigs.LWS_WORKER_INDEX) is not None:
            return "leader" if labels.get(leaderworkerset_sigs.LWS_WORKER_INDEX) == "0" else "worker"
        return None

    def segment_group(self, labels: Mapping[str, str]) -> int:
        """The LWS group index (segments are numbered per group). Raises ``ValueError`` when it is
        not a whole number."""
        return int(labels.get(leaderworkerset_sigs.LWS_GROUP_INDEX) or 0)


LWS_PODS = LeaderWorkerSetPods()


def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
    """``spec.replicas`` × ``spec.leaderWorkerTemplate.size`` as written, for ``place``'s cap."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None
    lwt = spec.get("leaderWorkerTemplate")
    size = lenient_count(lwt.get("size")) if isinstance(lwt, Mapping) else 0
    return lenient_count(spec.get("replicas")) * size, f"spec.replicas × {LWT}.size"


def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
    """The pods of an LWS, group by group: the leader ``<lws>-<g>`` (from the leaderTemplate, else
    the workerTemplate), then workers ``<lws>-<g>-<w>``; labels ``leaderworkerset.sigs.k8s.io/name``,
    ``group-index``, ``worker-index``; annotations ``size`` and, when ``subGroupPolicy.subGroupSize``
    is set, ``subgroup-size`` (all pods) and ``subgroup-policy-type`` (the leader), as the LWS
    controller writes them. Raises :class:`ShapeError` naming the field."""
    name, _ = name_and_namespace(obj)
    spec = obj.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate")
    if not isinstance(lwt, Mapping):
        raise ShapeError(f"{LWT}: missing or not an object")
    count = replicas(spec.get("replicas"), "spec.replicas")
    size = replicas(lwt.get("size"), f"{LWT}.size")
    if size < 1:
        raise ShapeError(f"{LWT}.size: must be at least 1")
    cap(count * size, f"spec.replicas × {LWT}.size")
    worker_path = f"{LWT}.workerTemplate"
    worker = pod_template(lwt.get("workerTemplate"), worker_path)
    leader, leader_path = worker, worker_path
    if lwt.get("leaderTemplate"):
        leader_path = f"{LWT}.leaderTemplate"
        leader = pod_template(lwt["leaderTemplate"], leader_path)
    sgp = lwt.get("subGroupPolicy")
    common = {leaderworkerset_sigs.LWS_SIZE: str(size)}
    leader_extra = {}
    if isinstance(sgp, Mapping) and sgp.get("subGroupSize") is not None:
        common[leaderworkerset_sigs.LWS_SUBGROUP_SIZE] = str(sgp.get("subGroupSize"))
        leader_extra[leaderworkerset_sigs.LWS_SUBGROUP_POLICY_TYPE] = str(sgp.get("subGroupPolicyType") or kai_scheduler.POLICY_LEADER_WORKER)
    out = []
    for g in range(count):
        base = {leaderworkerset_sigs.LWS_NAME: name, leaderworkerset_sigs.LWS_GROUP_INDEX: str(g)}
        out.append(ControllerPod(g, f"{name}-{g}", leader, leader_path, {**base, leaderworkerset_sigs.LWS_WORKER_INDEX: "0"},
                                 {**common, **leader_extra}))
        for w in range(1, size):
            out.append(ControllerPod(g, f"{name}-{g}-{w}", worker, worker_path, {**base, leaderworkerset_sigs.LWS_WORKER_INDEX: str(w)},
                                     common))
    return out


DESCRIPTION = KindDescription(
    group=GROUP, version="v1", kind=KIND, resource="leaderworkersets", review=review,
    expected_pods=expected_pods, controller_pods=controller_pods, pods=LWS_PODS, per_group=True,
    kai="one PodGroup per group; segments as subgroups leader/workers under segment-0, segment-<k> (KAI d5bc503 "
        "lws_grouper.go)",
)
