"""TrainJob (``trainer.kubeflow.org/v1alpha1``, Kubeflow Trainer) admission and description (DESIGN.md §3b).

A TrainJob runs as the JobSet its runtime builds: the trainer replicatedJob (``node`` unless the
root annotation ``segments.dev/trainer-job`` names another) has ``replicas: 1`` and
``parallelism = spec.trainer.numNodes``, so its pods are JobSet pods (``job-index`` 0,
``job-completion-index`` = the node rank, ``PET_NODE_RANK``) and are indexed, labelled and ganged by
the JobSet rules (:mod:`webhook.admission.kinds.jobset`). Segmented pods: ``N = spec.trainer.numNodes``.

The keys are read from the TrainJob root only: the Trainer does not copy a TrainJob's annotations to
its JobSet, and the TrainJob has no pod template of its own. So the webhook writes the resolved keys
where the Trainer applies them: its own ``spec.runtimePatches`` entry (``manager:
segments.dev/segment-webhook``; the CRD keys the list by ``manager``), on the trainer replicatedJob's
pod template (``trainingRuntimeSpec.template.spec.replicatedJobs[name].template.spec.template``),
with ``segments.dev/job-parallelism`` (= numNodes) and, under ``--gate-pods``, the gang facts (§9).
When ``S == numNodes`` (one Job = one segment, which KAI enforces) the replicatedJob's own template
metadata gets KAI's per-Job keys, as for a JobSet; otherwise the ``kai-does-not-enforce`` warning.
Without ``numNodes`` the runtime decides the node count, which the webhook cannot see: the size is
not checked against it (a warning says so). ``subgroup-name`` is never written. Automatic placement
(§6) never applies. ``place`` expands a TrainJob given its runtime as another document: it builds
the JobSet the Trainer would (:mod:`webhook.admission.kinds.trainingruntime`) and expands that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission import gate
from webhook.admission.config import AdmissionSettings
from webhook.admission.constraints import resolve
from webhook.admission.kinds._workload import CREATE, UpdateContext, review_workload
from webhook.admission.kinds.description import ControllerPod, KindDescription, PodCap, ShapeError
from webhook.admission.kinds.jobset import JOBSET_PODS
from webhook.admission.kinds.trainingruntime import HOW_TO_PASS, runtime_ref
from webhook.admission.patching import pointer
from webhook.admission.reading import AnnotationMap, get_int, get_mapping, read_annotations
from webhook.admission.resolution import Resolution, SegmentInputs
from webhook.admission.rules import check_trainjob_spec_annotation, malformed
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say
from webhook.admission.workload_plan import Plan
from webhook.kube import kai_scheduler, segments_dev
from webhook.kube.segments_dev import JOB_PARALLELISM, MANAGER, TRAINER_JOB
from webhook.text.messages import key_field
from webhook.topology.objects import TopologyCatalog

KIND = "TrainJob"
GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
DEFAULT_TRAINER_JOB = "node"


def _own_entry(spec: Mapping[str, Any], decision: Decision) -> tuple[int | None, Any]:
    """``(position, entry)`` of the webhook's ``runtimePatches`` entry (``(None, None)`` when absent);
    a ``runtimePatches`` that is not a list is a 400 (``(None, False)``)."""
    patches = spec.get("runtimePatches")
    if patches is None:
        return None, None
    if not isinstance(patches, list):
        malformed(decision, "spec.runtimePatches", patches, "a list of RuntimePatch objects")
        return None, False
    for i, entry in enumerate(patches):
        if isinstance(entry, (dict, Mapping)) and entry.get("manager") == MANAGER:
            return i, entry
    return None, None


def _entry_pod_annotations(entry: Any, rjob: str) -> dict[str, str]:
    """The pod template annotations the webhook's entry set on ``rjob`` (empty when none)."""
    node: Any = entry
    for part in ("trainingRuntimeSpec", "template", "spec", "replicatedJobs"):
        node = node.get(part) if isinstance(node, Mapping) else None
    for item in node if isinstance(node, list) else []:
        if isinstance(item, Mapping) and item.get("name") == rjob:
            for part in ("template", "spec", "template", "metadata", "annotations"):
                item = item.get(part) if isinstance(item, Mapping) else None
            return {k: v for k, v in item.items() if isinstance(v, str)} if isinstance(item, Mapping) else {}
    return {}


def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
            settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
    """Read, resolve and validate one TrainJob; the patch is its own ``runtimePatches`` entry
    (``Plan.extra_ops``). Returns ``None`` when too malformed to resolve (400 recorded)."""
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    if root is None or spec is None:
        return None
    trainer = get_mapping(spec, "trainer", "spec", decision)
    if trainer is None and not decision.allowed:
        return None
    nodes = get_int(trainer, "numNodes", "spec.trainer", decision, default=None) if trainer is not None else None
    position, entry = _own_entry(spec, decision)
    if entry is False or not decision.allowed:
        return None
    rjob = root.values.get(TRAINER_JOB) or DEFAULT_TRAINER_JOB
    where = f'spec.runtimePatches[manager={MANAGER}].trainingRuntimeSpec.template.spec.replicatedJobs[name={rjob}]'
    # the keys resolve from the root; the map they are written to is the webhook's own entry
    worker = AnnotationMap(f"{where}.template.spec.template.metadata.annotations", (),
                           _entry_pod_annotations(entry, rjob) if entry else {})
    inputs = SegmentInputs(kind=KIND, root=root, worker=AnnotationMap(worker.field, (), {}), pods=nodes,
                           pods_field="spec.trainer.numNodes", pods_noun="trainer nodes",
                           running_size=update.running_size())
    res = resolve(inputs, catalog, settings, decision)
    pod_keys: dict[str, str] = {}
    job_keys: dict[str, str] = {}
    if res.segmented:
        pod_keys = res.worker_keys()
        if nodes is None:
            say(decision, "trainjob-num-nodes-unset")
        else:
            pod_keys[JOB_PARALLELISM] = str(nodes)
        if nodes is not None and res.size_in_force == nodes:  # one Job = one segment: KAI's per-Job keys (§3b)
            if res.topology_name is not None:  # always: a size in force has a topology name (§5)
                job_keys[kai_scheduler.TOPOLOGY] = res.topology_name
            if res.segment_required is not None:
                job_keys[kai_scheduler.TOPOLOGY_REQUIRED] = res.segment_required
            if res.segment_preferred is not None:
                job_keys[kai_scheduler.TOPOLOGY_PREFERRED] = res.segment_preferred
        else:
            say(decision, "kai-does-not-enforce", kind=KIND, why=f"enforces only size = numNodes ({nodes})"
                                      if nodes is not None else "enforces only size = numNodes")
    wl_required = res.wl_required.value if res.wl_required else None
    wl_preferred = res.wl_preferred.value if res.wl_preferred else None
    gang = {}
    if request.get("operation") != "CREATE":  # gang facts are written at CREATE (§9) and kept after
        gang = {k: v for k, v in worker.values.items() if k in segments_dev.GANG_KEYS}
    elif settings.gate_pods and nodes and (res.segmented or wl_required or wl_preferred):
        # a root workload level: the JobSet's whole gang (DESIGN.md §4.5); its initializer Jobs get no
        # gang facts, so they are never in it
        gang = gate.gang_template_annotations(nodes, res.topology_name, wl_required, wl_preferred,
                                                whole_workload=bool(wl_required or wl_preferred))
    plan = Plan(resolution=res, root=root, worker=None, templates=[worker], gang_size=None)
    copied = _spec_annotations(res, rjob, wl_required, wl_preferred)
    spec_ops = _spec_annotation_ops(spec, copied, decision)
    if spec_ops is None:  # spec.annotations is not a map (400 recorded)
        return None
    entry_ops = _entry_ops(spec, position, entry, rjob, {**pod_keys, **gang}, job_keys)
    # A stored TrainJob shows its Trainer's schema: the webhook's runtimePatches entry kept and
    # spec.annotations pruned (v2.2+), or spec.annotations kept and runtimePatches pruned (v2.0,
    # v2.1). Its re-review writes only the carrier that schema keeps, so it is an empty patch
    # (DESIGN.md §11) instead of re-adding what kube-apiserver prunes again.
    annotations = spec.get("annotations")
    if entry is not None and not (isinstance(annotations, Mapping) and TRAINER_JOB in annotations):
        spec_ops = []
    elif entry is None and spec.get("runtimePatches") is None and isinstance(annotations, Mapping) \
            and TRAINER_JOB in annotations:
        entry_ops = []
    plan.extra_ops = entry_ops + spec_ops
    return plan


#: the keys the webhook may write into ``spec.annotations`` (:func:`_spec_annotations`)
SPEC_ANNOTATION_KEYS = (TRAINER_JOB, kai_scheduler.TOPOLOGY, kai_scheduler.SEGMENT_SIZE, kai_scheduler.SEGMENT_REQUIRED, kai_scheduler.SEGMENT_PREFERRED,
                        kai_scheduler.TOPOLOGY_REQUIRED, kai_scheduler.TOPOLOGY_PREFERRED)


def _spec_annotations(res: Resolution, rjob: str, wl_required: str | None, wl_preferred: str | None) -> dict[str, str]:
    """What ``spec.annotations`` must carry for Trainer v2.0/v2.1 (DESIGN.md §3b): the resolved
    topology name, segment size and levels and the workload levels, as JobSet root keys, with
    :data:`TRAINER_JOB` naming the trainer replicatedJob, so the JobSet rule segments that
    replicatedJob alone (:mod:`webhook.admission.kinds.jobset`). Empty when nothing is in force."""
    out: dict[str, str] = {}
    if res.segmented:
        out.update({k: v for k, v in res.worker_keys().items() if k in SPEC_ANNOTATION_KEYS})
    if wl_required is not None:
        out[kai_scheduler.TOPOLOGY_REQUIRED] = wl_required
    if wl_preferred is not None:
        out[kai_scheduler.TOPOLOGY_PREFERRED] = wl_preferred
    if out and res.topology_name is not None:
        out.setdefault(kai_scheduler.TOPOLOGY, res.topology_name)
    if out:
        out[TRAINER_JOB] = rjob
    return out


def _spec_annotation_ops(spec: Mapping[str, Any], wanted: dict[str, str], decision: Decision) -> list[dict[str, Any]] | None:
    """RFC 6902 operations that make ``spec.annotations`` carry ``wanted``. Trainer v2.0.0 and v2.1
    copy ``spec.annotations`` onto the JobSet root (``pkg/runtime/core/trainingruntime.go``
    ``newRuntimeInfo``); from v2.2 the field is gone and kube-apiserver prunes it, as it prunes
    ``spec.runtimePatches`` before v2.2: each Trainer applies one of the two. The entries are the
    webhook's once :data:`TRAINER_JOB` is among them (replaced, or removed when nothing is in
    force); before that, a user value that differs is denied (``trainjob-spec-annotation-differs``).
    ``None`` when ``spec.annotations`` is not a map (400 recorded)."""
    current = spec.get("annotations")
    if current is not None and not isinstance(current, Mapping):
        malformed(decision, "spec.annotations", current, "a map of string keys and values")
        return None
    current = current or {}
    owned = TRAINER_JOB in current
    if not owned:
        agreed = [check_trainjob_spec_annotation(decision, key_field("spec.annotations", key), current[key], value)
                  for key, value in wanted.items() if key in current]
        if not all(agreed):
            return []
    if not wanted and not owned:
        return []
    if not current:
        return [{"op": "add", "path": "/spec/annotations", "value": wanted}]
    ops: list[dict[str, Any]] = []
    for key in SPEC_ANNOTATION_KEYS:
        path = pointer(["spec", "annotations", key])
        if key in wanted and key not in current:
            ops.append({"op": "add", "path": path, "value": wanted[key]})
        elif key in wanted and current[key] != wanted[key]:
            ops.append({"op": "replace", "path": path, "value": wanted[key]})
        elif key not in wanted and key in current and owned:
            ops.append({"op": "remove", "path": path})
    return ops


def _entry_ops(spec: Mapping[str, Any], position: int | None, entry: Any, rjob: str, pod_keys: dict[str, str],
               job_keys: dict[str, str]) -> list[dict[str, Any]]:
    """RFC 6902 operations that make the webhook's ``runtimePatches`` entry say ``pod_keys`` (and
    ``job_keys`` on the replicatedJob's template): added when missing, replaced when different,
    removed when the object is no longer segmented, nothing when equal."""
    if not pod_keys and not job_keys:
        return [{"op": "remove", "path": f"/spec/runtimePatches/{position}"}] if entry else []
    template: dict[str, Any] = {"spec": {"template": {"metadata": {"annotations": pod_keys}}}}
    if job_keys:
        template = {"metadata": {"annotations": job_keys}, **template}
    wanted = {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": rjob, "template": template}]}}}}
    if entry == wanted:
        return []
    if position is not None:
        return [{"op": "replace", "path": f"/spec/runtimePatches/{position}", "value": wanted}]
    if spec.get("runtimePatches") is None:
        return [{"op": "add", "path": "/spec/runtimePatches", "value": [wanted]}]
    return [{"op": "add", "path": "/spec/runtimePatches/-", "value": wanted}]


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit a TrainJob AdmissionReview ``request`` (CREATE/UPDATE; others allowed unchanged): the
    resolved keys in the webhook's own ``spec.runtimePatches`` entry, never ``subgroup-name``
    (DESIGN.md §3b)."""
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)


def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
    """Not known from the TrainJob alone (its pods are its runtime's): ``None``."""
    return None


def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
    """A TrainJob's pods are made from its runtime's JobSet, which the TrainJob alone does not hold
    (``place`` builds it when given the runtime: :func:`webhook.admission.kinds.trainingruntime.jobset_for`):
    always raises :class:`ShapeError` saying how to pass the runtime."""
    raise ShapeError(f"spec.runtimeRef: a TrainJob's pod templates are its runtime's, the {runtime_ref(obj)}, "
                     f"which was not given; fix: {HOW_TO_PASS}")


DESCRIPTION = KindDescription(
    group=GROUP, version=VERSION, kind=KIND, resource="trainjobs", review=review,
    expected_pods=expected_pods, controller_pods=controller_pods, pods=JOBSET_PODS,
    kai="as its JobSet: one subgroup per Job (the trainer Job node-replica-0): enforced only when S == numNodes",
)
