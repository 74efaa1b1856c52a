"""DistributedWorkload (``segments.dev/v1alpha1``, this project's native kind) admission
(DESIGN.md §3–§6).

Fields: ``spec.framework`` (``PyTorch`` | ``TensorFlow`` | ``MPI`` | ``XGBoost`` | ``JAX``,
required), ``spec.workers`` (segmented pods, required by the CRD: absent → 400), ``spec.workersPerSegment`` (segment
size; beats a disagreeing ``kai.scheduler/segment-size`` annotation, which gets a warning and is
overwritten), ``spec.worker.template`` (required), optional ``spec.master.template`` (never
segmented). Segments are supported for ``PyTorch`` only (seed; rule
``native-framework-unsupported``). Automatic segment placement (§6) always applies (to
``PyTorch`` workloads, the only ones that can be segmented). When
``workersPerSegment`` is absent, a ``kai.scheduler/segment-size`` annotation on the worker
template (root inherited) is honoured, as for the other kinds. A field the CRD schema does not
define (:data:`SCHEMA_FIELDS`; ``spec.workerPerSegment``) gets warning ``unknown-field``: the API
server drops it, so the constraint it was meant to state would be lost in silence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeAlias

from webhook.admission import automatic
from webhook.admission.config import AdmissionSettings
from webhook.admission.constraints import resolve
from webhook.admission.kinds._workload import CREATE, UpdateContext, review_workload, warn_ignored_segment_keys
from webhook.admission.kinds.description import (
    ControllerPod,
    KindDescription,
    PodCap,
    lenient_count,
    pod_template,
    replicas,
)
from webhook.admission.kinds.pytorchjob import TRAINING_PODS, training_operator_pods
from webhook.admission.reading import AnnotationMap, get_int, get_mapping, read_annotations, read_string_map
from webhook.admission.resolution import Resolution, SegmentInputs, SpecSizeField
from webhook.admission.rules import check_native_framework, malformed, violate
from webhook.admission.verdict import MAX_WARNING_CHARS, Decision
from webhook.admission.warning_rules import WARNINGS, say
from webhook.admission.workload_plan import Plan
from webhook.kube import kai_scheduler, segments_dev
from webhook.text.messages import UNSET, closest, join_field, key_field, key_text, quote
from webhook.topology.objects import TopologyCatalog

KIND = "DistributedWorkload"
GROUP = "segments.dev"
FRAMEWORKS = ("PyTorch", "TensorFlow", "MPI", "XGBoost", "JAX")
SEGMENT_FRAMEWORKS = ("PyTorch",)

#: The fields of a DistributedWorkload as a tree: field name → the fields of its object, or ``None``
#: where no further field is checked.
FieldTree: TypeAlias = Mapping[str, "FieldTree | None"]
_TEMPLATE_FIELDS: FieldTree = {"metadata": None, "spec": None}
_REPLICA_FIELDS: FieldTree = {"template": _TEMPLATE_FIELDS}
#: The fields the DistributedWorkload CRD schema defines (deploy/crds/segments.dev_distributedworkloads.yaml,
#: ``openAPIV3Schema``): the one list of them in the code. ``None`` where the schema defines no
#: further field to check: a scalar, ``metadata`` (ObjectMeta, the API server's own), and an object
#: with ``x-kubernetes-preserve-unknown-fields`` (a template's ``metadata`` and ``spec``, ``status``).
#: Every other field is dropped by the API server (structural-schema pruning); rule ``unknown-field``
#: warns about it. tests/unit/admission/test_unknown_fields.py derives this tree from the CRD file.
SCHEMA_FIELDS: FieldTree = {
    "apiVersion": None,
    "kind": None,
    "metadata": None,
    "spec": {"framework": None, "workers": None, "workersPerSegment": None,
             "worker": _REPLICA_FIELDS, "master": _REPLICA_FIELDS},
    "status": None,
}
#: At most this many ``unknown-field`` warnings per object (the first by field path): as many as an
#: AdmissionResponse shows (webhook.http.envelope), so the work stays bounded.
MAX_UNKNOWN_FIELDS = 20
#: A field name written as ``parent.name`` in a path; any other as ``parent["name"]``.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _template(spec: Mapping[str, Any], role: str, decision: Decision, *, required: bool) -> AnnotationMap | None:
    """Annotations of ``spec.<role>.template`` (``None`` when absent or malformed; a malformed
    or missing required template is denied with 400 naming the field)."""
    holder = get_mapping(spec, role, "spec", decision, required=required)
    if holder is None:
        return None
    template = get_mapping(holder, "template", f"spec.{role}", decision, required=True)
    if template is None:
        return None
    if role == "master" and read_string_map(template, f"spec.{role}.template", "labels", decision) is None:
        return None  # the master template's labels are validated as every template's are
    return read_annotations(template, f"spec.{role}.template", ("spec", role, "template"), decision)


def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
            settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
    """Read, resolve and validate one DistributedWorkload object. Returns ``None`` when it is
    too malformed to resolve (400 denials already recorded)."""
    warn_unknown_fields(obj, decision)
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    if root is None or spec is None:
        return None
    framework = spec.get("framework")
    if framework not in FRAMEWORKS:
        spelled = next((name for name in FRAMEWORKS if isinstance(framework, str) and name.lower() == framework.lower()), None)
        if spelled is not None:  # "pytorch": the CRD's enum is case-sensitive
            violate(decision, "malformed-object", "spec.framework", framework,
                    "must be one of " + ", ".join(FRAMEWORKS) + " (case-sensitive)", f'write "{spelled}"')
        else:
            malformed(decision, "spec.framework", framework if "framework" in spec else UNSET, "one of " + ", ".join(FRAMEWORKS))
    if spec.get("workers") is None:  # required by deploy/crds (spec.required), no default
        violate(decision, "malformed-object", "spec.workers", UNSET if "workers" not in spec else None,
                "spec.workers is required by the DistributedWorkload CRD",
                "set spec.workers to the number of worker pods, e.g. 8")
        workers = None
    else:
        workers = get_int(spec, "workers", "spec", decision, default=None)
    per_segment = get_int(spec, "workersPerSegment", "spec", decision, default=None)
    worker = _template(spec, "worker", decision, required=True)
    master = _template(spec, "master", decision, required=False)
    warn_ignored_segment_keys(master, "the master template", decision)
    if worker is None or (spec.get("master") is not None and master is None):
        return None
    if framework not in FRAMEWORKS or workers is None:
        # 400 already recorded; without a framework or a worker count there is nothing to resolve
        # (no spurious "exceeds the 1 worker" denial, no "segment-size ignored" warning).
        return None
    supported = framework in SEGMENT_FRAMEWORKS
    if framework in FRAMEWORKS and not supported:
        size_src = worker.get(kai_scheduler.SEGMENT_SIZE) or root.get(kai_scheduler.SEGMENT_SIZE)
        if per_segment is not None:
            check_native_framework(decision, framework, "spec.workersPerSegment", per_segment, "workersPerSegment")
        elif size_src is not None:
            check_native_framework(decision, framework, size_src.field, size_src.value, kai_scheduler.SEGMENT_SIZE)
    inputs = SegmentInputs(
        kind=KIND,
        root=root,
        worker=worker,
        pods=workers,
        pods_field="spec.workers",
        pods_noun="workers",
        spec_size=SpecSizeField.stated("spec.workersPerSegment", spec.get("workersPerSegment"), per_segment, wins=True),
        automatic=automatic.applies(KIND, request, settings, update.defaults, supported=supported),
        running_size=update.running_size(),
        extra_worker_keys={segments_dev.KAI_FLAT_GANG: "true"},
    )
    gang = workers + (master is not None) if isinstance(workers, int) else None  # gang size, §9
    resolution = resolve(inputs, catalog, settings, decision)
    if resolution.segmented:
        _warn_flat_gang(resolution, decision)
    return Plan(resolution=resolution, root=root, worker=worker, master=master,
                always_ours=True, gang_size=gang, kai_subgroups=False)


def _unknown_fields(obj: Mapping[Any, Any], fields: FieldTree, path: str,
                    found: list[tuple[str, Any, str, FieldTree, str]]) -> None:
    """Append to ``found`` each field of ``obj`` (at ``path``) that ``fields`` does not define, as
    ``(field path, value, name, the defined fields beside it, path)``, and walk into the defined
    ones that ``fields`` details. A value of the wrong type is not walked into (its own rule says so)."""
    for key, value in obj.items():
        name = key_text(key)
        field = join_field(path, name) if _PLAIN_NAME.fullmatch(name) else key_field(path, name)
        if isinstance(key, str) and key in fields:
            inner = fields[key]
            if inner is not None and isinstance(value, Mapping):
                _unknown_fields(value, inner, field, found)
        else:
            found.append((field, value, name, fields, path))


def warn_unknown_fields(obj: Mapping[str, Any], decision: Decision) -> None:
    """DESIGN.md §5 "a misspelled hard constraint must never vanish silently": warn
    (``unknown-field``) about each field of ``obj`` the CRD schema does not define
    (:data:`SCHEMA_FIELDS`), by field path, naming the defined field it is close to (``did you
    mean spec.workersPerSegment?``). A warning, not a denial: the API server drops (prunes) such a
    field before any webhook sees the object, so in a cluster it is never there; ``review`` and
    ``place`` of a file read it as written. At most :data:`MAX_UNKNOWN_FIELDS`, in field path order;
    the value is shortened so the text fits in one warning."""
    found: list[tuple[str, Any, str, FieldTree, str]] = []
    _unknown_fields(obj, SCHEMA_FIELDS, "", found)
    found.sort(key=lambda entry: entry[0])
    template = WARNINGS["unknown-field"]
    for field, value, name, fields, path in found[:MAX_UNKNOWN_FIELDS]:
        close = closest(name, fields)
        fix = f"did you mean {join_field(path, close)}? rename it" if close is not None else "remove it"
        room = MAX_WARNING_CHARS - len(template.text(field=field, value="", fix=fix))
        say(decision, "unknown-field", field=field, value=quote(value, max(room, 12)), fix=fix)


def _warn_flat_gang(resolution: Resolution, decision: Decision) -> None:
    """DESIGN.md §4.5: KAI d5bc503 has no pod-grouper plugin for ``segments.dev``
    (``pkg/podgrouper/podgrouper/hub/hub.go``), so its default grouper
    (``plugins/defaultgrouper/default_grouper.go``) makes one flat PodGroup without subgroups: the
    segment size and segment levels in force are named as not enforced by KAI (the workload levels
    are read from the root and are enforced)."""
    levels = [scope for scope, level in (("required", resolution.segment_required),
                                         ("preferred", resolution.segment_preferred)) if level is not None]
    named = f"size {resolution.size_in_force}"
    if levels:
        named += ", both levels" if len(levels) > 1 else f", {levels[0]} level"
    # "pods it owns": a pod whose owner chain does not reach the DistributedWorkload (a child without
    # an ownerReference) is grouped by its own top owner, and KAI does enforce its segments there
    # (issue 37); short, so the fix is never clipped (at most 120 characters)
    say(decision, "kai-flat-gang", kind=KIND, constraints=named)


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit a DistributedWorkload AdmissionReview ``request`` (CREATE/UPDATE; others allowed
    unchanged). Writes the resolved keys on ``spec.worker.template`` and, under automatic
    placement, the workload preferred level on the root."""
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)


# ----------------------------------------------------------------------------- the description
def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
    """The master (0 or 1) + ``spec.workers`` as written, for ``place``'s cap."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None
    master = spec.get("master") is not None
    return lenient_count(spec.get("workers")) + master, "spec.master + spec.workers" if master else "spec.workers"


def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
    """The pods of a DistributedWorkload: the master (when ``spec.master``), then ``spec.workers``
    workers, named and labelled as the training operator names them (operator name
    ``distributedworkload-controller``; DESIGN.md §3, §7). Raises :class:`ShapeError`."""
    spec = obj.get("spec") or {}
    parts, fields = [], []
    if spec.get("master") is not None:
        m = spec["master"]
        fields.append("spec.master")  # one pod
        parts.append(("master", 1, pod_template(m.get("template") if isinstance(m, Mapping) else None,
                                                "spec.master.template"), "spec.master.template"))
    w = spec.get("worker")
    fields.append("spec.workers")
    workers = replicas(spec.get("workers"), "spec.workers")
    cap(workers, "spec.workers")
    parts.append(("worker", workers, pod_template(w.get("template") if isinstance(w, Mapping) else None,
                                                  "spec.worker.template"), "spec.worker.template"))
    return training_operator_pods(obj, parts, fields, "distributedworkload-controller", cap)


DESCRIPTION = KindDescription(
    group=GROUP, version="v1alpha1", kind=KIND, resource="distributedworkloads", review=review,
    expected_pods=expected_pods, controller_pods=controller_pods, pods=TRAINING_PODS,
    kai="one flat PodGroup (KAI d5bc503 has no grouper for segments.dev): no subgroup-name, segments not enforced",
)
