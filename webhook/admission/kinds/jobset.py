"""JobSet (``jobset.x-k8s.io/v1alpha2``, kubernetes-sigs/jobset) admission and description (DESIGN.md §3b).

Each replicatedJob is segmented on its own (a unit of :class:`~webhook.admission.kinds._workload.Plan`):
``N = replicas × parallelism`` pods (``replicas`` default 1, the Job's ``parallelism`` default 1),
keys read from ``spec.replicatedJobs[k].template.spec.template.metadata.annotations`` (root
inherited). A pod's index is ``job-index × parallelism + completion-index``: JobSet labels (and
annotates) its pods ``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``
(jobset ``pkg/controllers/jobset_controller.go`` ``labelAndAnnotateObject``), the Job controller
gives an Indexed Job's pods ``batch.kubernetes.io/job-completion-index`` (annotation since
Kubernetes 1.24, label since 1.28), and the webhook writes the replicatedJob's ``parallelism`` on
the pod template (``segments.dev/job-parallelism``), since no pod carries it.

KAI's pod-grouper splits a JobSet into one subgroup per Job (``<replicatedJob>-replica-<job-index>``)
and overwrites ``kai.scheduler/subgroup-name``, so the webhook never writes that label. KAI enforces a
segment only when ``S == parallelism`` (one Job = one segment): then the Job template
(``spec.replicatedJobs[k].template.metadata.annotations``) also gets KAI's per-Job keys, the
topology and the segment levels as ``topology-required-placement`` / ``topology-preferred-placement``.
Any other segment size gets the ``kai-does-not-enforce`` warning, and when neither divides the other
the ``jobset-segments-straddle-jobs`` warning. Gang (§9): one replicatedJob,
``<namespace>/<jobset-name>/<replicatedjob-name>``; with a workload level on the root, the whole
JobSet, ``<namespace>/<jobset-name>/*`` (KAI makes one PodGroup of it, §4.5). Automatic placement (§6) never applies.

A TrainJob's JobSet: a root ``segments.dev/trainer-job`` (the webhook writes it with the resolved keys
into the TrainJob's ``spec.annotations``, which Trainer v2.0/v2.1 copy onto the JobSet root,
``pkg/runtime/core/trainingruntime.go`` ``newRuntimeInfo``) scopes the root's keys to the replicatedJob
it names: the others (``dataset-initializer``, ``model-initializer``) inherit nothing and are in no
gang. Naming no replicatedJob of the JobSet is denied (``trainer-job-not-found``).
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
from webhook.admission.resolution import Resolution, SegmentInputs
from webhook.admission.rules import (
    check_per_job_level,
    check_template_level_has_topology,
    check_trainer_job_found,
    malformed,
)
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say, text
from webhook.admission.workload_plan import Plan
from webhook.kube import core, jobset_sigs, kai_scheduler
from webhook.kube.segments_dev import JOB_PARALLELISM, TRAINER_JOB
from webhook.text.messages import UNSET
from webhook.topology.objects import TopologyCatalog

KIND = "JobSet"
GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
RJOBS = "replicatedJobs"


def _unit(root: AnnotationMap, rj: Any, k: int, catalog: TopologyCatalog, settings: AdmissionSettings,
          decision: Decision, update: UpdateContext) -> tuple[str, Plan] | None:
    """Read, resolve and validate replicatedJob ``k``; ``None`` when malformed (400 recorded)."""
    field = f"spec.{RJOBS}[{k}]"
    if not isinstance(rj, (dict, Mapping)):
        malformed(decision, field, rj, "a ReplicatedJob object")
        return None
    name = rj.get("name")
    if not isinstance(name, str) or not name:
        malformed(decision, f"{field}.name", UNSET if name is None else name, "the replicatedJob's name (a string)")
        return None
    count = get_int(rj, "replicas", field, decision, default=1)
    job = get_mapping(rj, "template", field, decision, required=True)
    if job is None:
        return None
    job_container = ("spec", RJOBS, str(k), "template")
    job_meta = read_annotations(job, f"{field}.template", job_container, decision)
    job_spec = get_mapping(job, "spec", f"{field}.template", decision, required=True)
    if job_meta is None or job_spec is None:
        return None
    parallelism = get_int(job_spec, "parallelism", f"{field}.template.spec", decision, default=1)
    pod = get_mapping(job_spec, "template", f"{field}.template.spec", decision, required=True)
    if pod is None:
        return None
    worker = read_annotations(pod, f"{field}.template.spec.template", job_container + ("spec", "template"), decision)
    if worker is None:
        return None
    pods = count * parallelism if isinstance(count, int) and isinstance(parallelism, int) else None
    whole_jobs = isinstance(parallelism, int) and parallelism >= 1
    inputs = SegmentInputs(kind=KIND, root=root, worker=worker, pods=pods, pods_field=f"{field}.replicas × parallelism",
                           pods_noun=f"pods of replicatedJob {name}", running_size=update.running_size(name),
                           extra_worker_keys={JOB_PARALLELISM: str(parallelism)} if whole_jobs else {},
                           groups="replicatedJobs")
    res = resolve(inputs, catalog, settings, decision)
    unit = Plan(resolution=res, root=root, worker=worker, templates=[job_meta], gang_size=pods)
    per_job_segment = res.segmented and whole_jobs and res.size_in_force == parallelism
    if not per_job_segment:
        _check_user_per_job_levels(job_meta, decision)
    size = res.size_in_force
    if size is not None and parallelism is not None and whole_jobs:
        if size == parallelism:  # one Job = one segment: KAI's per-Job keys (§3b)
            per_job: dict[str, str] = {}
            if res.topology_name is not None:  # always: a size in force has a topology name (§5)
                per_job[kai_scheduler.TOPOLOGY] = res.topology_name
            if res.segment_required is not None:
                per_job[kai_scheduler.TOPOLOGY_REQUIRED] = res.segment_required
            if res.segment_preferred is not None:
                per_job[kai_scheduler.TOPOLOGY_PREFERRED] = res.segment_preferred
            agreed = True
            for key, segment_key in PER_JOB_KEYS.items():  # §4.5: a user per-Job value is never replaced silently
                written = job_meta.get(key)
                if written is not None and key != kai_scheduler.TOPOLOGY and per_job.get(key) is not None \
                        and res.node_label(written.value) == res.node_label(per_job[key]):
                    per_job[key] = written.value  # the same level, by its KAI alias or its node label: kept
                elif written is not None:
                    agreed = check_per_job_level(decision, written.field, written.value, per_job.get(key),
                                                 segment_key) and agreed
            if agreed:
                unit.other_templates.append((job_meta, per_job))
        else:
            if count != 1 and parallelism % size and size % parallelism:  # one Job: nothing to straddle
                say(decision, "jobset-segments-straddle-jobs", replicated_job=name, size=size, parallelism=parallelism)
            say(decision, "kai-does-not-enforce", kind=KIND, why=f"enforces JobSet segments only of size = parallelism ({parallelism})")
    return name, unit


#: KAI's per-Job keys on ``replicatedJobs[k].template.metadata.annotations`` (KAI d5bc503
#: ``pkg/podgrouper/podgrouper/plugins/jobset/jobset_grouper.go``, ``singleReplicaSubGroupTopology``)
#: → the pod template key whose resolved value the webhook writes there
PER_JOB_KEYS = {kai_scheduler.TOPOLOGY: kai_scheduler.TOPOLOGY, kai_scheduler.TOPOLOGY_REQUIRED: kai_scheduler.SEGMENT_REQUIRED,
                kai_scheduler.TOPOLOGY_PREFERRED: kai_scheduler.SEGMENT_PREFERRED}


def _check_user_per_job_levels(job_meta: AnnotationMap, decision: Decision) -> None:
    """DESIGN.md §4.5: the user's own per-Job levels on a Job template the webhook does not write
    (segment size other than ``parallelism``, or no segments). KAI's JobSet grouper reads them
    with the topology name of that Job template alone and drops them silently without one: denied
    (``template-level-without-topology``); with one, KAI enforces them on each Job."""
    has_topology = kai_scheduler.TOPOLOGY in job_meta.values
    for key in kai_scheduler.WORKLOAD_PLACEMENT_KEYS:
        level = job_meta.get(key)
        if level is not None:
            check_template_level_has_topology(decision, level.field, level.value, has_topology, job_meta.field,
                                              "KAI's JobSet grouper drops the level silently")


def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
            settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
    """Read, resolve and validate one JobSet: one unit per replicatedJob. Returns ``None`` when
    too malformed to resolve (400 denials recorded). ``update``: the request's
    :class:`UpdateContext`; automatic placement never applies to JobSet (§6)."""
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    if root is None or spec is None:
        return None
    rjobs = spec.get(RJOBS)
    if not isinstance(rjobs, list):
        malformed(decision, f"spec.{RJOBS}", UNSET if rjobs is None else rjobs, "a list of ReplicatedJob objects")
        return None
    scope = root.get(TRAINER_JOB)
    if scope is not None and not check_trainer_job_found(
            decision, scope.field, scope.value, [rj["name"] for rj in rjobs if isinstance(rj, Mapping)
                                                 and isinstance(rj.get("name"), str)]):
        return None
    units = []
    for k, rj in enumerate(rjobs):
        # a TrainJob's JobSet (DESIGN.md §3b): the root's keys are the trainer replicatedJob's alone;
        # the others (initializers) inherit nothing and are in no gang
        in_scope = scope is None or (isinstance(rj, Mapping) and rj.get("name") == scope.value)
        unit = _unit(root if in_scope else AnnotationMap(root.field, root.container, {}), rj, k, catalog, settings,
                     decision, update)
        if unit is None:
            return None
        if not in_scope:
            unit[1].gang_size = None
        units.append(unit)
    return Plan(resolution=Resolution(), root=root, worker=None, units=units, one_podgroup=True)


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit a JobSet AdmissionReview ``request`` (CREATE/UPDATE; others allowed unchanged): the
    resolved keys and ``segments.dev/job-parallelism`` on each segmented replicatedJob's pod
    template, KAI's per-Job keys when ``S == parallelism``, never ``subgroup-name`` (§3b)."""
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)


# ----------------------------------------------------------------------------- the description
class JobSetPods(PodRules):
    """Pods of a JobSet's Jobs: index ``job-index × parallelism + completion-index`` (labels, else
    the annotations of the same names; ``parallelism`` from the webhook's pod template annotation),
    segment ``index // S``, no ``subgroup-name`` (KAI writes its own). Gang: one replicatedJob."""

    name = "jobset"
    gang_label_text = f"{jobset_sigs.JOBSET_NAME} + replicatedjob-name"

    def owns(self, labels: Mapping[str, str]) -> bool:
        """A pod labelled ``jobset.sigs.k8s.io/jobset-name``."""
        return jobset_sigs.JOBSET_NAME in labels

    def segment(self, labels: Mapping[str, str], annotations: Mapping[str, str], size: int) -> tuple[dict[str, str], list[str]]:
        """Segment ``(job-index × parallelism + completion-index) // size``."""
        values: dict[str, int] = {}
        for key in (jobset_sigs.JOBSET_JOB_INDEX, core.JOB_COMPLETION_INDEX):
            raw = labels.get(key, annotations.get(key))
            value = pod_int(raw)
            if value is None:
                return {}, [text("pod-label-unreadable", label=key, shown=shown(raw), expected="missing or not an int32")]
            values[key] = value
        raw_p = annotations.get(JOB_PARALLELISM)
        parallelism = pod_int(raw_p)
        if parallelism is None or parallelism < 1:
            return {}, [text("pod-annotation-unreadable", annotation=JOB_PARALLELISM, shown=shown(raw_p),
                             expected="missing or not an int32 >= 1")]
        completion = values[core.JOB_COMPLETION_INDEX]
        if completion >= parallelism:
            return {}, [text("pod-index-out-of-range", index=f"completion index {completion}",
                             problem=f"not below parallelism {parallelism}")]
        index = values[jobset_sigs.JOBSET_JOB_INDEX] * parallelism + completion
        return {kai_scheduler.SEGMENT_INDEX: str(index // size)}, []

    def claims_gang(self, labels: Mapping[str, str]) -> bool:
        """A non-empty ``jobset.sigs.k8s.io/jobset-name``."""
        return bool(labels.get(jobset_sigs.JOBSET_NAME))

    def gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<jobset>/<replicatedJob>``; ``None`` without a replicatedjob-name."""
        rjob = labels.get(jobset_sigs.JOBSET_RJOB_NAME)
        return f"{namespace}/{labels[jobset_sigs.JOBSET_NAME]}/{rjob}" if rjob else None

    def workload_gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<jobset>/*``: every replicatedJob in one gang (DESIGN.md §4.5, §9)."""
        return f"{namespace}/{labels[jobset_sigs.JOBSET_NAME]}/*"

    def role(self, labels: Mapping[str, str]) -> str | None:
        """The replicatedJob's name."""
        return labels.get(jobset_sigs.JOBSET_RJOB_NAME) or None


JOBSET_PODS = JobSetPods()


def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
    """Σ replicas × parallelism as written, for ``place``'s cap."""
    spec = obj.get("spec")
    rjobs = spec.get(RJOBS) if isinstance(spec, Mapping) else None
    if not isinstance(rjobs, list):
        return None
    total = 0
    for rj in rjobs:
        if isinstance(rj, Mapping):
            job = rj.get("template")
            job_spec = job.get("spec") if isinstance(job, Mapping) else None
            parallelism = lenient_count(job_spec.get("parallelism")) if isinstance(job_spec, Mapping) else 0
            total += lenient_count(rj.get("replicas")) * parallelism
    return total, f"Σ spec.{RJOBS}[*].replicas × parallelism"


def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
    """The pods of a JobSet: per replicatedJob ``k`` (gang ``k``) and Job ``j``, the Job
    ``<jobset>-<rjob>-<j>`` (jobset ``GenJobName``) runs ``parallelism`` pods, named here
    ``<job>-<c>`` (the Job controller adds a random suffix), labelled and annotated with the JobSet
    keys and ``batch.kubernetes.io/job-completion-index: c``. Raises :class:`ShapeError`."""
    name, _ = name_and_namespace(obj)
    spec = obj.get("spec") or {}
    rjobs = spec.get(RJOBS)
    if not isinstance(rjobs, list):
        raise ShapeError(f"spec.{RJOBS}: missing or not a list")
    out = []
    global_index = 0
    for k, rj in enumerate(rjobs):
        field = f"spec.{RJOBS}[{k}]"
        if not isinstance(rj, Mapping) or not isinstance(rj.get("name"), str):
            raise ShapeError(f"{field}: expected a ReplicatedJob object with a name")
        job = rj.get("template")
        job_spec = job.get("spec") if isinstance(job, Mapping) else None
        if not isinstance(job_spec, Mapping):
            raise ShapeError(f"{field}.template.spec: expected a JobSpec object")
        count = replicas(rj.get("replicas"), f"{field}.replicas")
        parallelism = replicas(job_spec.get("parallelism"), f"{field}.template.spec.parallelism")
        cap(count * parallelism, f"{field}.replicas × parallelism")
        path = f"{field}.template.spec.template"
        tmpl = pod_template(job_spec.get("template"), path)
        for j in range(count):
            job_name = f"{name}-{rj['name']}-{j}"
            jobset = {jobset_sigs.JOBSET_NAME: name, jobset_sigs.JOBSET_RJOB_NAME: rj["name"], jobset_sigs.JOBSET_JOB_INDEX: str(j),
                      jobset_sigs.JOBSET_JOB_GLOBAL_INDEX: str(global_index), jobset_sigs.JOBSET_RJOB_REPLICAS: str(count)}
            for c in range(parallelism):
                labels = {**jobset, core.JOB_COMPLETION_INDEX: str(c), core.BATCH_JOB_NAME: job_name,
                          core.JOB_NAME: job_name}
                out.append(ControllerPod(k, f"{job_name}-{c}", tmpl, path, labels,
                                         {**jobset, core.JOB_COMPLETION_INDEX: str(c)}))
            global_index += 1
        cap(len(out), f"Σ spec.{RJOBS}[*].replicas × parallelism")
    return out


DESCRIPTION = KindDescription(
    group=GROUP, version=VERSION, kind=KIND, resource="jobsets", review=review,
    expected_pods=expected_pods, controller_pods=controller_pods, pods=JOBSET_PODS, per_group=True, one_podgroup=True,
    kai="one PodGroup, one subgroup per Job (<replicatedJob>-replica-<job-index>, KAI d5bc503 jobset grouper): "
        "segments enforced only when S == parallelism",
)
