"""MPIJob (``kubeflow.org/v2beta1``, kubeflow/mpi-operator) admission and description (DESIGN.md §3b).

Segmented pods: the ``Worker`` replicas (``spec.mpiReplicaSpecs.Worker.replicas``, default 0 as in
mpi-operator's ``setDefaultsTypeWorker``) and, when ``spec.runLauncherAsWorker`` is true, the
launcher, which is hostfile position 0 (the workers are 1..N then). Segment keys are read from the
Worker template (root inherited); a launcher-as-worker's template receives the same keys (it is in
segment 0), user values there that differ get a warning and the Worker's win. A launcher that is not
a worker is never segmented (segment keys on its template: a warning, left alone).

Pods (mpi-operator v0.8 ``mpi_job_controller.go``): labels ``training.kubeflow.org/job-role:
launcher|worker``, ``job-name``, ``operator-name: mpi-operator`` and ``replica-index`` (workers; the
launcher only under ``runLauncherAsWorker``, as ``"0"``). Segment ``replica-index // S``. KAI's
pod-grouper keeps MPIJob PodGroups flat, so the webhook never writes ``subgroup-name`` on them, and
every segmented MPIJob gets the ``kai-does-not-enforce`` warning. Gang (§9): the segmented pods,
``<namespace>/<training.kubeflow.org/job-name>``; a launcher that is not a worker is not in it.
Automatic placement (§6) never applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission.config import AdmissionSettings
from webhook.admission.constraints import resolve
from webhook.admission.kinds._workload import (
    CREATE,
    UpdateContext,
    replica_key,
    review_workload,
    warn_ignored_segment_keys,
)
from webhook.admission.kinds.description import (
    ControllerPod,
    KindDescription,
    PodCap,
    PodRules,
    ShapeError,
    name_and_namespace,
    pod_int,
    pod_template,
    replica_spec_count,
    replicas,
    shown,
)
from webhook.admission.reading import AnnotationMap, get_int, get_mapping, read_annotations
from webhook.admission.resolution import SegmentInputs
from webhook.admission.rules import malformed
from webhook.admission.segments import training_segment
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say, text
from webhook.admission.workload_plan import Plan
from webhook.kube import core, kai_scheduler, kubeflow_org
from webhook.topology.objects import TopologyCatalog

KIND = "MPIJob"
GROUP = "kubeflow.org"
VERSION = "v2beta1"
SPECS = "mpiReplicaSpecs"
OPERATOR = "mpi-operator"
ROLE_LAUNCHER, ROLE_WORKER = "launcher", "worker"


def _replica(specs: Mapping[str, Any], rkey: str, default: int,
             decision: Decision) -> tuple[AnnotationMap | None, int | None]:
    """(annotations of the replica type's PodTemplateSpec, its replicas), ``(None, None)`` when
    malformed (400 recorded)."""
    field = f"spec.{SPECS}.{rkey}"
    rspec = specs[rkey]
    if not isinstance(rspec, (dict, Mapping)):
        malformed(decision, field, rspec, "a ReplicaSpec object")
        return None, None
    count = get_int(rspec, "replicas", field, decision, default=default)
    template = get_mapping(rspec, "template", field, decision, required=True)
    if template is None:
        return None, count
    return read_annotations(template, f"{field}.template", ("spec", SPECS, rkey, "template"), decision), count


def _launcher_keys(launcher: AnnotationMap, worker_keys: dict[str, str], decision: Decision) -> dict[str, str]:
    """The keys a launcher-as-worker's template receives (the Worker's: it is in segment 0), and
    warnings about user values there that differ (the Worker template wins)."""
    for key in (kai_scheduler.TOPOLOGY,) + kai_scheduler.SEGMENT_KEYS:
        if key in launcher.values and launcher.values[key] != worker_keys.get(key):
            say(decision, "mpijob-launcher-template-differs", key=key)
    return worker_keys


def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
            settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
    """Read, resolve and validate one MPIJob object. Returns ``None`` when too malformed to
    resolve (400 denials recorded in ``decision``). ``update``: the request's
    :class:`UpdateContext`; automatic placement never applies to MPIJob (§6)."""
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    specs = get_mapping(spec, SPECS, "spec", decision, required=True) if spec is not None else None
    if root is None or spec is None or specs is None:
        return None
    as_worker = spec.get("runLauncherAsWorker")
    if as_worker is not None and not isinstance(as_worker, bool):
        malformed(decision, "spec.runLauncherAsWorker", as_worker, "a boolean")
        return None
    as_worker = bool(as_worker)
    worker: AnnotationMap | None = None
    launcher: AnnotationMap | None = None
    workers: int | None = 0
    wkey = replica_key(specs, "Worker")
    if wkey is not None:
        worker, workers = _replica(specs, wkey, 0, decision)
        if worker is None:
            return None
    lkey = replica_key(specs, "Launcher")
    if lkey is not None:
        launcher, _ = _replica(specs, lkey, 1, decision)
        if launcher is None:
            return None
        if not as_worker:
            warn_ignored_segment_keys(launcher, "the Launcher template (runLauncherAsWorker is false)", decision)
    counted_launcher = launcher if as_worker else None  # runs as a worker: one of the gang's pods
    launcher_counts = counted_launcher is not None
    pods = workers + 1 if isinstance(workers, int) and launcher_counts else workers
    inputs = SegmentInputs(
        kind=KIND, root=root, worker=worker, pods=pods,
        pods_field=f"spec.{SPECS}.{wkey or 'Worker'}.replicas",
        pods_noun="MPI workers (the launcher included)" if launcher_counts else "Worker replicas",
        running_size=update.running_size(),
    )
    res = resolve(inputs, catalog, settings, decision)
    if res.segmented:
        say(decision, "kai-does-not-enforce", kind=KIND, why="keeps MPIJob PodGroups flat")  # §3b
    plan = Plan(resolution=res, root=root, worker=worker, templates=[launcher] if launcher is not None else [],
                gang_size=pods if isinstance(pods, int) else None,
                gang_templates=[counted_launcher] if counted_launcher is not None else [])
    if counted_launcher is not None and res.segmented:
        plan.other_templates.append((counted_launcher, _launcher_keys(counted_launcher, res.worker_keys(), decision)))
    return plan


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit an MPIJob AdmissionReview ``request`` (CREATE/UPDATE; others allowed unchanged):
    the resolved keys on the Worker template (and a launcher-as-worker's), never
    ``subgroup-name`` (DESIGN.md §3b)."""
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)


# ----------------------------------------------------------------------------- the description
class MPIJobPods(PodRules):
    """Pods of mpi-operator v2beta1: ``training.kubeflow.org/job-role`` (``launcher`` | ``worker``)
    and ``replica-index`` (the hostfile position; the launcher carries ``"0"`` only under
    ``runLauncherAsWorker``). Segment ``replica-index // S``, no ``subgroup-name`` (KAI keeps the
    PodGroup flat, DESIGN.md §3b). Gang: ``<namespace>/<job-name>`` for a worker or a launcher with
    a replica index; a launcher without one is in no gang (§9)."""

    name = "mpi-operator"
    gang_label_text = f"label {kubeflow_org.KF_JOB_NAME}; a launcher that is not a worker is in no gang"

    def owns(self, labels: Mapping[str, str]) -> bool:
        """A pod labelled ``training.kubeflow.org/job-role`` (only mpi-operator writes it)."""
        return kubeflow_org.KF_JOB_ROLE in labels

    def segment(self, labels: Mapping[str, str], annotations: Mapping[str, str], size: int) -> tuple[dict[str, str], list[str]]:
        """Segment ``replica-index // size`` of a worker or launcher-as-worker."""
        role = labels.get(kubeflow_org.KF_JOB_ROLE)
        if role not in (ROLE_LAUNCHER, ROLE_WORKER):
            return {}, [text("pod-label-unreadable", label=kubeflow_org.KF_JOB_ROLE, shown=shown(role), expected="is not launcher/worker")]
        raw_i = labels.get(kubeflow_org.KF_REPLICA_INDEX)
        index = pod_int(raw_i)
        if index is None:
            return {}, [text("pod-label-unreadable", label=kubeflow_org.KF_REPLICA_INDEX, shown=shown(raw_i),
                             expected="missing or not an int32")]
        return {kai_scheduler.SEGMENT_INDEX: str(training_segment(index, size))}, []

    def claims_gang(self, labels: Mapping[str, str]) -> bool:
        """An mpi-operator pod with a job name."""
        return bool(labels.get(kubeflow_org.KF_JOB_NAME)) and kubeflow_org.KF_JOB_ROLE in labels

    def gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<job-name>`` for a worker or a launcher-as-worker, else ``None``."""
        if labels.get(kubeflow_org.KF_JOB_ROLE) == ROLE_WORKER or kubeflow_org.KF_REPLICA_INDEX in labels:
            return f"{namespace}/{labels[kubeflow_org.KF_JOB_NAME]}"
        return None

    def role(self, labels: Mapping[str, str]) -> str | None:
        """``launcher`` or ``worker``."""
        return labels.get(kubeflow_org.KF_JOB_ROLE) or None


MPI_PODS = MPIJobPods()


def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
    """Launcher (default 1) + Worker (default 0) replicas as written, for ``place``'s cap."""
    return replica_spec_count(obj, SPECS, (("Launcher", 1), ("Worker", 0)))


def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
    """The pods mpi-operator creates: the launcher (a Job's pod, named ``<job>-launcher`` here
    without the Job's random suffix; ``replica-index: "0"`` under ``runLauncherAsWorker``), then
    the workers ``<job>-worker-<i>`` (``replica-index`` i, or i + 1 under ``runLauncherAsWorker``).
    Raises :class:`ShapeError` naming the field."""
    name, _ = name_and_namespace(obj)
    spec = obj.get("spec") or {}
    specs = spec.get(SPECS)
    if not isinstance(specs, Mapping):
        raise ShapeError(f"spec.{SPECS}: missing or not an object")
    as_worker = spec.get("runLauncherAsWorker") is True
    out = []
    base = {kubeflow_org.KF_OPERATOR_NAME: OPERATOR, kubeflow_org.KF_JOB_NAME: name}
    fields = []
    for rtype, default in (("Launcher", 1), ("Worker", 0)):
        key = replica_key(specs, rtype)  # as admission reads it: "worker" is the Worker type
        if key is None:
            continue
        rs = specs[key]
        if not isinstance(rs, Mapping):
            raise ShapeError(f"spec.{SPECS}.{key}: expected an object")
        fields.append(f"spec.{SPECS}.{key}.replicas")
        count = replicas(rs.get("replicas"), fields[-1], default)
        cap(count, fields[-1])
        path = f"spec.{SPECS}.{key}.template"
        tmpl = pod_template(rs.get("template"), path)
        for i in range(count):
            if rtype == "Launcher":
                labels = {**base, kubeflow_org.KF_JOB_ROLE: ROLE_LAUNCHER, core.JOB_NAME: f"{name}-launcher",
                          core.BATCH_JOB_NAME: f"{name}-launcher"}
                if as_worker:
                    labels[kubeflow_org.KF_REPLICA_INDEX] = "0"
                pod_name = f"{name}-launcher" if count == 1 else f"{name}-launcher-{i}"
            else:
                labels = {**base, kubeflow_org.KF_JOB_ROLE: ROLE_WORKER, kubeflow_org.KF_REPLICA_INDEX: str(i + 1 if as_worker else i)}
                pod_name = f"{name}-worker-{i}"
            out.append(ControllerPod(0, pod_name, tmpl, path, labels, {}))
    cap(len(out), " + ".join(fields))
    return out


DESCRIPTION = KindDescription(
    group=GROUP, version=VERSION, kind=KIND, resource="mpijobs", review=review,
    expected_pods=expected_pods, controller_pods=controller_pods, pods=MPI_PODS,
    kai="one flat PodGroup per job (KAI d5bc503 mpi grouper): segments not enforced, no subgroup-name",
)
