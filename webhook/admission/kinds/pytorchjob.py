"""PyTorchJob (``kubeflow.org/v1``, Kubeflow training-operator) admission (DESIGN.md §3–§6).

Segmented pods: the Worker replicas (``spec.pytorchReplicaSpecs.Worker.replicas``, default 1 as
in the training-operator). The Master is never segmented: segment keys on its template get a
warning and are left alone. Automatic segment placement (§6) applies when the requester is a
configured platform identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission import automatic
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
from webhook.admission.reading import AnnotationMap, get_int, get_mapping, read_annotations, read_string_map
from webhook.admission.resolution import SegmentInputs
from webhook.admission.rules import INT32_MAX, malformed
from webhook.admission.segments import training_segment, training_subgroup_name
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import text
from webhook.admission.workload_plan import Plan
from webhook.kube import kai_scheduler, kubeflow_org, segments_dev
from webhook.topology.objects import TopologyCatalog

KIND = "PyTorchJob"
GROUP = "kubeflow.org"
SPECS = "pytorchReplicaSpecs"


def _template_annotations(specs: Mapping[str, Any], rkey: str, decision: Decision, *,
                          worker: bool) -> tuple[AnnotationMap | None, int | None]:
    """(annotations of the replica type's PodTemplateSpec, Worker replicas). The Master
    template's labels are validated too: they receive ``kai.scheduler/subgroup-name``."""
    field = f"spec.{SPECS}.{rkey}"
    rspec = specs[rkey]
    if not isinstance(rspec, (dict, Mapping)):
        malformed(decision, field, rspec, "a ReplicaSpec object")
        return None, None
    replicas = get_int(rspec, "replicas", field, decision, default=1) if worker else None
    template = get_mapping(rspec, "template", field, decision, required=True)
    if template is None:
        return None, replicas
    if not worker and read_string_map(template, f"{field}.template", "labels", decision) is None:
        return None, replicas
    return read_annotations(template, f"{field}.template", ("spec", SPECS, rkey, "template"), decision), replicas


def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
            settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
    """Read, resolve and validate one PyTorchJob object. Returns ``None`` when it is too
    malformed to resolve (400 denials already recorded in ``decision``)."""
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    specs = get_mapping(spec, SPECS, "spec", decision, required=True) if spec is not None else None
    if root is None or spec is None or specs is None:
        return None
    worker = None
    master = None
    replicas = None
    wkey = replica_key(specs, "Worker")
    if wkey is not None:
        worker, replicas = _template_annotations(specs, wkey, decision, worker=True)
        if worker is None:
            return None
    mkey = replica_key(specs, "Master")
    if mkey is not None:
        master, _ = _template_annotations(specs, mkey, decision, worker=False)
        if master is None:
            return None
        warn_ignored_segment_keys(master, "the Master template", decision)
    run_policy = spec.get("runPolicy")
    suspended = run_policy is not None and isinstance(run_policy, (dict, Mapping)) and run_policy.get("suspend") is True
    inputs = SegmentInputs(
        kind=KIND,
        root=root,
        worker=worker,
        pods=replicas,
        pods_field=f"spec.{SPECS}.{wkey or 'Worker'}.replicas",
        pods_noun="Worker replicas",
        automatic=automatic.applies(KIND, request, settings, update.defaults),
        running_size=update.running_size(suspended=suspended),
    )
    others = []
    for rkey in specs:
        if rkey not in (wkey, mkey) and isinstance(specs[rkey], (dict, Mapping)) and isinstance(specs[rkey].get("template"), Mapping):
            other, _ = _template_annotations(specs, rkey, Decision(kind=KIND), worker=False)
            if other is not None:
                others.append(other)
                # a replica type the webhook does not segment (e.g. "Workers"): its segment keys say so
                warn_ignored_segment_keys(other, f"replica type {rkey} (not Worker)", decision)
    masters = specs[mkey].get("replicas", 1) if mkey is not None else 0  # gang size, §9
    # An int32 like every replicas field (the CRD's schema, checked by kube-apiserver after
    # admission); anything else (a string, 123456789012345694) makes no gang to gate.
    gang = replicas + masters if isinstance(replicas, int) and type(masters) is int and 0 <= masters <= INT32_MAX \
        else None
    return Plan(resolution=resolve(inputs, catalog, settings, decision), root=root, worker=worker,
                suspended=suspended, master=master, templates=others, gang_size=gang,
                elastic=_elastic(spec, replicas))


def _elastic(spec: Mapping[str, Any], replicas: int | None) -> tuple[str, int, int] | None:
    """The Worker count range of an elastic PyTorchJob (``spec.elasticPolicy.minReplicas`` /
    ``maxReplicas``, training-operator v1; either defaults to the Worker replicas), or ``None``
    when it has no elasticPolicy or the range is one count. Values that are not integers are left
    to the training operator's own validation (no range)."""
    policy = spec.get("elasticPolicy")
    if policy is None or not isinstance(policy, (dict, Mapping)) or not isinstance(replicas, int):
        return None
    low, high = policy.get("minReplicas", replicas), policy.get("maxReplicas", replicas)
    if type(low) is not int or type(high) is not int or not 0 <= low < high:
        return None
    return "Worker replicas", low, high


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit a PyTorchJob AdmissionReview ``request`` (CREATE/UPDATE; others allowed unchanged).
    Writes the resolved keys on the Worker template (DESIGN.md §2). Never raises for JSON input
    that :func:`webhook.admission.kinds.dispatch` passes in."""
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)


# ----------------------------------------------------------------------------- the description
class TrainingOperatorPods(PodRules):
    """Pods of the Kubeflow training operator (PyTorchJob) and of the native kind, which labels its
    pods the same way (DESIGN.md §7): ``training.kubeflow.org/replica-type`` (``worker`` /
    ``master``, any case) and ``replica-index``; segment ``i // S``, subgroup ``worker-<k>``
    (KAI's PyTorchJob grouper) or ``master``. Gang: ``<namespace>/<training.kubeflow.org/job-name>``
    (§9). The fallback family: a pod no other family owns is read by these rules."""

    name = "training-operator"
    gang_label_text = f"label {kubeflow_org.KF_JOB_NAME}"

    def owns(self, labels: Mapping[str, str]) -> bool:
        """Every pod (the fallback, checked last)."""
        return True

    def segment(self, labels: Mapping[str, str], annotations: Mapping[str, str], size: int) -> tuple[dict[str, str], list[str]]:
        """Master: ``subgroup-name: master``; worker ``i``: segment ``i // size`` (DESIGN.md §7).
        A pod whose template carries ``segments.dev/kai-flat-gang: "true"`` (native kind, §4.5)
        gets its segment index only, never ``subgroup-name``."""
        rtype = labels.get(kubeflow_org.KF_REPLICA_TYPE)
        role = rtype.lower() if isinstance(rtype, str) else None
        flat = annotations.get(segments_dev.KAI_FLAT_GANG) == "true"  # KAI makes one flat PodGroup (§4.5)
        if role == "master":
            return ({} if flat else {kai_scheduler.SUBGROUP_NAME: training_subgroup_name(None)}), []
        if role != "worker" and rtype is None and not labels.get(kubeflow_org.KF_JOB_NAME):
            # no Kubeflow label at all: the fallback family is not this pod's (a Deployment's pod)
            return {}, [text("pod-of-no-segmented-kind")]
        if role != "worker":
            return {}, [text("pod-label-unreadable", label=kubeflow_org.KF_REPLICA_TYPE, shown=shown(rtype),
                             expected="is missing or not worker/master")]
        raw_i = labels.get(kubeflow_org.KF_REPLICA_INDEX)
        index = pod_int(raw_i)
        if index is None:
            return {}, [text("pod-label-unreadable", label=kubeflow_org.KF_REPLICA_INDEX, shown=shown(raw_i),
                             expected="missing or not an int32")]
        segment = training_segment(index, size)
        if flat:
            return {kai_scheduler.SEGMENT_INDEX: str(segment)}, []
        return {kai_scheduler.SEGMENT_INDEX: str(segment), kai_scheduler.SUBGROUP_NAME: training_subgroup_name(segment)}, []

    def claims_gang(self, labels: Mapping[str, str]) -> bool:
        """A non-empty ``training.kubeflow.org/job-name``."""
        return bool(labels.get(kubeflow_org.KF_JOB_NAME))

    def gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<job-name>``: one gang per job (Master + Workers, DESIGN.md §9)."""
        return f"{namespace}/{labels[kubeflow_org.KF_JOB_NAME]}"

    def role(self, labels: Mapping[str, str]) -> str | None:
        """The replica type as labelled (``master``, ``worker``)."""
        rtype = labels.get(kubeflow_org.KF_REPLICA_TYPE)
        return str(rtype) if rtype else None


TRAINING_PODS = TrainingOperatorPods()


def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
    """Master + Worker replicas as written (default 1 each), for ``place``'s cap."""
    return replica_spec_count(obj, SPECS, (("Master", 1), ("Worker", 1)))


def training_operator_pods(obj: Mapping[str, Any], parts: list[tuple[str, int, dict[str, Any], str]], fields: list[str],
                           operator: str, cap: PodCap) -> list[ControllerPod]:
    """The pods the training operator creates for ``parts`` (``(replica type, count, template,
    template path)``): ``<job>-<type>-<i>``, labelled ``training.kubeflow.org/replica-type`` (lower
    case), ``replica-index``, ``job-name`` and ``operator-name: <operator>`` (training-operator
    v1.9 ``pkg/controller.v1/common``). Shared with the native kind, which names its pods alike."""
    name, ns = name_and_namespace(obj)
    cap(sum(count for _, count, _, _ in parts), " + ".join(fields))  # also after the webhook's patch
    out = []
    for rtype, count, tmpl, path in parts:
        for i in range(count):
            labels = {kubeflow_org.KF_REPLICA_TYPE: rtype, kubeflow_org.KF_REPLICA_INDEX: str(i),
                      kubeflow_org.KF_JOB_NAME: name, kubeflow_org.KF_OPERATOR_NAME: operator}
            out.append(ControllerPod(0, f"{name}-{rtype}-{i}", tmpl, path, labels, {}))
    return out


def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
    """The pods of a PyTorchJob: the Master, then the Workers (:func:`training_operator_pods`).
    Raises :class:`ShapeError` naming the field."""
    spec = obj.get("spec") or {}
    specs = spec.get(SPECS)
    if not isinstance(specs, Mapping):
        raise ShapeError(f"spec.{SPECS}: missing or not an object")
    parts, fields = [], []
    for rtype in ("Master", "Worker"):
        key = replica_key(specs, rtype)  # as admission reads it: "worker" is the Worker type
        if key is not None:
            rs = specs[key]
            if not isinstance(rs, Mapping):
                raise ShapeError(f"spec.{SPECS}.{key}: expected an object")
            fields.append(f"spec.{SPECS}.{key}.replicas")
            count = replicas(rs.get("replicas"), fields[-1])
            cap(count, fields[-1])  # before the template is copied
            path = f"spec.{SPECS}.{key}.template"
            parts.append((rtype.lower(), count, pod_template(rs.get("template"), path), path))
    return training_operator_pods(obj, parts, fields, "pytorchjob-controller", cap)


DESCRIPTION = KindDescription(
    group=GROUP, version="v1", kind=KIND, resource="pytorchjobs", review=review,
    expected_pods=expected_pods, controller_pods=controller_pods, pods=TRAINING_PODS,
    kai="one PodGroup per job with subgroups master and worker-<k> (KAI d5bc503 pytorch grouper)",
)
