"""PyTorchJob (``kubeflow.org/v1``, Kubeflow training-operator) admission (DESIGN.md §3–§6).

Segmented pods: the Worker replicas (``spec.pytorchReplicaSpecs.Worker.replicas``, default 1 as
in the training-operator). The Master is never segmented: segment keys on its template get a
warning and are left alone. Automatic segment placement (§6) applies when the requester is a
configured platform identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core import automatic
from webhook.core.automatic import Defaults
from webhook.core.constraints import resolve
from webhook.core.decision import AdmissionSettings, Decision
from webhook.core.kinds._workload import Plan, review_workload, warn_ignored_segment_keys
from webhook.core.reading import INT32_MAX, get_int, get_mapping, read_annotations, read_string_map
from webhook.core.resolution import SegmentInputs
from webhook.core.rules import malformed
from webhook.core.topology import TopologyCatalog

KIND = "PyTorchJob"
GROUP = "kubeflow.org"
SPECS = "pytorchReplicaSpecs"


def _replica_key(specs: Mapping[str, Any], name: str) -> str | None:
    """The key of replica type ``name`` (exact first, then case-insensitive)."""
    if name in specs:
        return name
    for key in specs:
        if isinstance(key, str) and key.lower() == name.lower():
            return key
    return None


def _template_annotations(specs: Mapping[str, Any], rkey: str, decision: Decision, *, worker: bool):
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
            settings: AdmissionSettings, decision: Decision, *, defaults: Defaults = Defaults.AS_CREATE) -> Plan | None:
    """Read, resolve and validate one PyTorchJob object. Returns ``None`` when it is too
    malformed to resolve (400 denials already recorded in ``decision``)."""
    root = read_annotations(obj, "", (), decision)
    spec = get_mapping(obj, "spec", "", decision, required=True)
    specs = get_mapping(spec, SPECS, "spec", decision, required=True) if spec is not None else None
    if root is None or specs is None:
        return None
    worker = None
    master = None
    replicas = None
    wkey = _replica_key(specs, "Worker")
    if wkey is not None:
        worker, replicas = _template_annotations(specs, wkey, decision, worker=True)
        if worker is None:
            return None
    mkey = _replica_key(specs, "Master")
    if mkey is not None:
        master, _ = _template_annotations(specs, mkey, decision, worker=False)
        if master is None:
            return None
        warn_ignored_segment_keys(master, "the Master template", decision)
    run_policy = spec.get("runPolicy")
    suspended = isinstance(run_policy, (dict, Mapping)) and run_policy.get("suspend") is True
    inputs = SegmentInputs(
        kind=KIND,
        root=root,
        worker=worker,
        pods=replicas,
        pods_field=f"spec.{SPECS}.{wkey or 'Worker'}.replicas",
        pods_noun="Worker replicas",
        automatic=automatic.applies(KIND, request, settings, defaults),
    )
    others = []
    for rkey in specs:
        if rkey not in (wkey, mkey) and isinstance(specs[rkey], (dict, Mapping)) and isinstance(specs[rkey].get("template"), Mapping):
            other, _ = _template_annotations(specs, rkey, Decision(kind=KIND), worker=False)
            if other is not None:
                others.append(other)
    masters = specs[mkey].get("replicas", 1) if mkey is not None else 0  # gang size, §9
    # An int32 like every replicas field (the CRD's schema, checked by kube-apiserver after
    # admission); anything else (a string, 123456789012345694) makes no gang to gate.
    gang = replicas + masters if isinstance(replicas, int) and type(masters) is int and 0 <= masters <= INT32_MAX \
        else None
    return Plan(resolution=resolve(inputs, catalog, settings, decision), root=root, worker=worker,
                suspended=suspended, master=master, templates=others, gang_size=gang)


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit a PyTorchJob AdmissionReview ``request`` (CREATE/UPDATE; others allowed unchanged).
    Writes the resolved keys on the Worker template (DESIGN.md §2). Never raises for JSON input
    that :func:`webhook.core.kinds.dispatch` passes in."""
    return review_workload(KIND, analyse, request, catalog, settings, mutate=mutate)
