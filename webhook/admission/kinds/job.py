"""batch/v1 Job (Indexed) admission and description (DESIGN.md §3b, §9b).

The simplest workload Kueue admits (sigs.k8s.io/kueue v0.17.0 ``pkg/controller/jobs/job``: one
PodSet, the pod template, ranked by ``batch.kubernetes.io/job-completion-index``) and one the
control plane runs alone (the Job controller is in kube-controller-manager). Segmented pods: the
``spec.completions`` completion indices of an Indexed Job; keys read from
``spec.template.metadata.annotations`` (root inherited). A pod's index is its
``batch.kubernetes.io/job-completion-index`` label (annotation before Kubernetes 1.28), segment
``index // S``. A segmented Job must be Indexed (no other Job gives its pods an index) with
``parallelism = completions`` (else a segment's pods never run together): rule
``job-segments-need-indexed``.

KAI's pod-grouper makes one PodGroup of a Job without subgroups, so it does not enforce its
segments (warning ``kai-does-not-enforce``); the webhook never writes ``subgroup-name``.
Gang (§9): ``<namespace>/<batch.kubernetes.io/job-name>``. Automatic placement (§6) never applies.
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
from webhook.admission.reading import get_int, get_mapping, read_annotations
from webhook.admission.resolution import SegmentInputs
from webhook.admission.rules import check_job_indexed
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say, text
from webhook.admission.workload_plan import Plan
from webhook.kube import core, kai_scheduler
from webhook.topology.objects import TopologyCatalog

KIND = "Job"
GROUP = "batch"
VERSION = "v1"
INDEXED = "Indexed"


def _job_problem(mode: Any, parallelism: Any, completions: Any) -> str | None:
    """Why a segmented Job cannot be segmented (``job-segments-need-indexed``), or ``None``."""
    if mode != INDEXED:
        return "only an Indexed Job gives its pods the completion index segments are counted by"
    if isinstance(parallelism, int) and isinstance(completions, int) and parallelism != completions:
        return f"parallelism {parallelism} ≠ completions {completions}: a segment's pods would not all run at once"
    return None


def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
            settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
    """Read, resolve and validate one Job. Returns ``None`` when too malformed to resolve (400
    denials recorded). ``update``: the request's :class:`UpdateContext` (automatic placement never
    applies to a Job)."""
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    if root is None or spec is None:
        return None
    template = get_mapping(spec, "template", "spec", decision, required=True)
    if template is None:
        return None
    worker = read_annotations(template, "spec.template", ("spec", "template"), decision)
    if worker is None:
        return None
    parallelism = get_int(spec, "parallelism", "spec", decision, default=1)
    completions = get_int(spec, "completions", "spec", decision, default=parallelism)
    mode = spec.get("completionMode", "NonIndexed")
    pods = completions if isinstance(completions, int) else None
    inputs = SegmentInputs(kind=KIND, root=root, worker=worker, pods=pods, pods_field="spec.completions",
                           pods_noun="completions", running_size=update.running_size())
    res = resolve(inputs, catalog, settings, decision)
    if res.segmented:
        problem = _job_problem(mode, parallelism, completions)
        field = "spec.completionMode" if mode != INDEXED else "spec.parallelism"
        if check_job_indexed(decision, field, mode if mode != INDEXED else parallelism, problem):
            say(decision, "kai-does-not-enforce", kind=KIND, why="makes one PodGroup of a Job, no subgroups")
    return Plan(resolution=res, root=root, worker=worker, gang_size=pods)


#: Controllers whose Jobs are reviewed through their owner (DESIGN.md §3b: a JobSet's, and so a
#: TrainJob's, Jobs carry the keys the webhook wrote on the JobSet; reviewing them again as Jobs
#: would count a Job's ``parallelism`` pods as the whole workload).
OWNER_REVIEWED = frozenset({("jobset.x-k8s.io", "JobSet")})


def owned_by_a_reviewed_kind(obj: Any) -> bool:
    """Whether ``obj``'s controller ``ownerReference`` (``controller: true``) is a kind of
    :data:`OWNER_REVIEWED`, matched by API group (any version) and kind."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    references = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    if not isinstance(references, list):
        return False
    for reference in references:
        if not isinstance(reference, Mapping) or reference.get("controller") is not True:
            continue
        api_version = reference.get("apiVersion")
        group = api_version.split("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""
        if (group, reference.get("kind")) in OWNER_REVIEWED:
            return True
    return False


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *,
           mutate: bool = True) -> Decision:
    """Admit a Job AdmissionReview ``request`` (CREATE/UPDATE; others allowed unchanged): the
    resolved keys on ``spec.template`` (DESIGN.md §2), the target's keys (§9b). A Job whose
    controller is a JobSet (:func:`owned_by_a_reviewed_kind`) was reviewed as part of its owner:
    allowed, empty patch."""
    if owned_by_a_reviewed_kind(request.get("object")):
        return Decision(kind=KIND)
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)


# ----------------------------------------------------------------------------- the description
class IndexedJobPods(PodRules):
    """Pods of an Indexed Job: index ``batch.kubernetes.io/job-completion-index`` (label, else the
    annotation of the same name), segment ``index // S``, no ``subgroup-name``. Gang: one Job."""

    name = "job"
    gang_label_text = f"label {core.BATCH_JOB_NAME}"

    def owns(self, labels: Mapping[str, str]) -> bool:
        """A pod labelled ``batch.kubernetes.io/job-name`` (JobSet and MPIJob pods are classified
        before, by their own families)."""
        return core.BATCH_JOB_NAME in labels

    def segment(self, labels: Mapping[str, str], annotations: Mapping[str, str],
                size: int) -> tuple[dict[str, str], list[str]]:
        """Segment ``completion-index // size``."""
        raw = labels.get(core.JOB_COMPLETION_INDEX, annotations.get(core.JOB_COMPLETION_INDEX))
        index = pod_int(raw)
        if index is None:
            return {}, [text("pod-label-unreadable", label=core.JOB_COMPLETION_INDEX, shown=shown(raw),
                             expected="missing or not an int32")]
        return {kai_scheduler.SEGMENT_INDEX: str(index // size)}, []

    def claims_gang(self, labels: Mapping[str, str]) -> bool:
        """A non-empty ``batch.kubernetes.io/job-name``."""
        return bool(labels.get(core.BATCH_JOB_NAME))

    def gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<job-name>``: one gang per Job."""
        return f"{namespace}/{labels[core.BATCH_JOB_NAME]}"

    def role(self, labels: Mapping[str, str]) -> str | None:
        """``worker``: every pod of a Job does the same work."""
        return "worker"


JOB_PODS = IndexedJobPods()


def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
    """``completions`` as written (default ``parallelism``, default 1), for ``place``'s cap."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None
    parallelism = lenient_count(spec.get("parallelism", 1))
    return lenient_count(spec.get("completions", parallelism)), "spec.completions"


def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
    """The pods the Job controller creates for an Indexed Job: ``<job>-<i>-<random>`` (named here
    ``<job>-<i>``), labelled ``batch.kubernetes.io/job-name``, ``job-name`` and
    ``batch.kubernetes.io/job-completion-index: i`` (also an annotation). Raises
    :class:`ShapeError` naming the field."""
    name, _ = name_and_namespace(obj)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ShapeError("spec: expected a JobSpec object")
    parallelism = replicas(spec.get("parallelism", 1), "spec.parallelism")
    count = replicas(spec.get("completions", parallelism), "spec.completions")
    cap(count, "spec.completions")
    tmpl = pod_template(spec.get("template"), "spec.template")
    out = []
    for i in range(count):
        labels = {core.BATCH_JOB_NAME: name, core.JOB_NAME: name, core.JOB_COMPLETION_INDEX: str(i)}
        out.append(ControllerPod(0, f"{name}-{i}", tmpl, "spec.template", labels,
                                 {core.JOB_COMPLETION_INDEX: str(i)}))
    return out


DESCRIPTION = KindDescription(
    group=GROUP, version=VERSION, kind=KIND, resource="jobs", review=review,
    expected_pods=expected_pods, controller_pods=controller_pods, pods=JOB_PODS,
    kai="one PodGroup per Job without subgroups (KAI d5bc503 default grouper): segments not enforced",
)
