"""The JobSet Kubeflow Trainer builds for a TrainJob from its runtime (DESIGN.md §3b, §8), for ``place``.

A TrainJob holds no pod template: its pods are those of the JobSet the Trainer builds from the
``ClusterTrainingRuntime`` / ``TrainingRuntime`` its ``spec.runtimeRef`` names. ``place`` reads that
runtime as one more document (:func:`find_runtime`) and builds the JobSet (:func:`jobset_for`), which
it then expands as any JobSet (:mod:`webhook.admission.kinds.jobset`).

The rules followed, read from kubeflow/trainer at commit 8c0f505 (the commit of the CRDs in
``shared/crds``):

* name and namespace: the TrainJob's; labels and annotations: the runtime's
  ``spec.template.metadata`` ones, then each ``spec.runtimePatches[*].trainingRuntimeSpec.template.metadata``
  one over them (``pkg/runtime/core/trainingruntime.go`` ``newRuntimeInfo``);
* spec: the runtime's ``spec.template.spec`` with each ``runtimePatches`` entry's
  ``trainingRuntimeSpec.template.spec`` merged over it in list order, as a strategic merge patch
  (``mergeRuntimePatches``): objects merge member by member, ``null`` removes a member, the lists
  the Kubernetes types key (``replicatedJobs``, ``containers``, ``initContainers``, ``volumes``,
  ``imagePullSecrets``, ``schedulingGates``, ``env``, ``volumeMounts``, ``ports``, ``claims``)
  merge item by item on their key, every other list (``tolerations``, ``nodeSelectorTerms``)
  is replaced; the replicatedJobs keep the runtime's order;
* pod counts (``newRuntimeInfo``, then each ML policy plugin's ``EnforceMLPolicy``, then the JobSet
  plugin's ``syncParallelCount``): a replicatedJob runs ``max(parallelism, 1)`` pods (default 1);
  the one whose Job template is labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``
  runs the runtime's ``spec.mlPolicy.numNodes`` (default 1) when the runtime has an ``mlPolicy``,
  and ``spec.trainer.numNodes`` when the TrainJob sets it; under an MPI policy it is the
  replicatedJob named ``node`` instead, with ``numNodes - 1`` pods (at least 1) when
  ``mlPolicy.mpi.runLauncherAsNode`` is true. Each replicatedJob's ``parallelism`` and
  ``completions`` are set to its count;
* the trainer and initializer replicatedJobs (ancestor ``trainer``, ``dataset-initializer``,
  ``model-initializer``) get ``replicas: 1`` (``plugins/jobset/builder.go``);
* the container named ``node`` of the trainer replicatedJob (or of ``node`` under MPI with
  ``runLauncherAsNode``) gets ``spec.trainer.resourcesPerNode`` merged over its resources, limits
  and requests key by key, and ``spec.trainer.image`` / ``command`` / ``args`` when set.

Not modelled, as they do not change where pods may go: environment variables, volumes, ports and
commands the ML plugins add, and the pod labels and annotations a gang-scheduling plugin
(``podGroupPolicy``) adds. A runtime using the Flux policy, which rewrites its Jobs, is built as
written.

Errors raise :class:`~webhook.admission.kinds.description.ShapeError` naming the document and field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from webhook.admission.kinds.description import ShapeError
from webhook.text.messages import quote

#: an item of :func:`split_runtimes`
T = TypeVar("T")

GROUP = "trainer.kubeflow.org"
TRAINJOB = "TrainJob"
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME = "TrainingRuntime"
RUNTIME_KINDS = (CLUSTER_RUNTIME, NAMESPACED_RUNTIME)
#: the Job template label that says which TrainJob step a replicatedJob runs (Trainer ``constants.go``)
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
INITIALIZER_ANCESTORS = ("dataset-initializer", "model-initializer")
#: the trainer container and, under MPI, the trainer replicatedJob (Trainer ``constants.Node``)
NODE = "node"
RJOBS = "replicatedJobs"

#: list member → the key its items merge on in a strategic merge patch (the ``patchMergeKey`` of
#: the JobSet, Job and Pod types); other lists are replaced whole
MERGE_KEYS = {RJOBS: "name", "containers": "name", "initContainers": "name", "volumes": "name",
              "imagePullSecrets": "name", "schedulingGates": "name", "env": "name", "volumeMounts": "mountPath",
              "ports": "containerPort", "claims": "name"}

HOW_TO_PASS = ("pass the runtime as another document: `place -f trainjob.yaml -f runtime.yaml` (or both in one "
               "file), from `kubectl get clustertrainingruntime NAME -o yaml` or `kubectl get trainingruntime NAME "
               "-n NAMESPACE -o yaml`")


@dataclass(frozen=True)
class RuntimeRef:
    """What a TrainJob's ``spec.runtimeRef`` names: ``kind`` (``ClusterTrainingRuntime`` by
    default, as the CRD defaults it), ``name``, and ``namespace`` (the TrainJob's for a
    ``TrainingRuntime``, ``None`` for a cluster-scoped one)."""

    kind: str
    name: str
    namespace: str | None

    def __str__(self) -> str:
        return f"{self.kind} {self.name}" + (f" in namespace {self.namespace}" if self.namespace else "")


def runtime_label(runtime: Mapping[str, Any]) -> str:
    """How every message names ``runtime``: ``<kind> <metadata.name>`` (``ClusterTrainingRuntime
    torch-distributed``). A :class:`ShapeError` of :func:`jobset_for` about a field of the runtime
    itself starts with this label and ``": "``; one about a field of the TrainJob starts with that
    field (``spec.runtimePatches[0]...``), so a caller that read the two from different files names
    the right one (:func:`webhook.planning.expand.expand`)."""
    return f"{runtime.get('kind')} {(runtime.get('metadata') or {}).get('name')}"


def is_runtime(obj: Mapping[str, Any]) -> bool:
    """True when ``obj`` is a ``ClusterTrainingRuntime`` or ``TrainingRuntime`` (``trainer.kubeflow.org``)."""
    api = obj.get("apiVersion")
    return obj.get("kind") in RUNTIME_KINDS and isinstance(api, str) and api.split("/")[0] == GROUP


def split_runtimes(objects: Sequence[T]) -> tuple[list[T], list[Mapping[str, Any]]]:
    """The ``-f`` documents of ``place`` and ``controller --once`` split into the workloads and
    the training runtimes given with them (:func:`is_runtime`), in order. ``objects``: the
    documents, each a mapping or a tuple whose last item is the mapping (``(location, object)``).
    Returns ``(workloads, runtimes)``: the workload items as given, the runtime objects."""
    workloads: list[T] = []
    runtimes: list[Mapping[str, Any]] = []
    for item in objects:
        obj = item[-1] if isinstance(item, tuple) else item
        if isinstance(obj, Mapping) and is_runtime(obj):
            runtimes.append(obj)
        else:
            workloads.append(item)
    return workloads, runtimes


def runtime_ref(trainjob: Mapping[str, Any]) -> RuntimeRef:
    """The runtime ``trainjob`` names (``spec.runtimeRef``; ``apiGroup`` defaults to
    ``trainer.kubeflow.org``, ``kind`` to ``ClusterTrainingRuntime``, per the TrainJob CRD).
    Raises :class:`ShapeError` naming the field when it is missing or names something else."""
    spec = trainjob.get("spec")
    ref = spec.get("runtimeRef") if isinstance(spec, Mapping) else None
    if not isinstance(ref, Mapping):
        raise ShapeError("spec.runtimeRef: missing or not an object; it names the TrainJob's runtime")
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise ShapeError(f"spec.runtimeRef.name: {quote(name)} is not a runtime name")
    group = ref.get("apiGroup", GROUP)
    if group != GROUP:
        raise ShapeError(f"spec.runtimeRef.apiGroup: {quote(group)} is not {GROUP}, the only runtime group place builds")
    kind = ref.get("kind", CLUSTER_RUNTIME)
    if kind not in RUNTIME_KINDS:
        raise ShapeError(f"spec.runtimeRef.kind: {quote(kind)} is not one of {', '.join(RUNTIME_KINDS)}")
    namespace = None
    if kind == NAMESPACED_RUNTIME:
        namespace = (trainjob.get("metadata") or {}).get("namespace") or "default"
    return RuntimeRef(kind, name, namespace)


def find_runtime(trainjob: Mapping[str, Any], runtimes: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The runtime of ``runtimes`` that ``trainjob``'s ``spec.runtimeRef`` names (kind, name and, for
    a ``TrainingRuntime``, the TrainJob's namespace; a runtime document without a namespace is
    taken to be in ``default``, as kubectl creates it). Raises :class:`ShapeError` when none or
    several match, saying what was given and how to pass the runtime (:data:`HOW_TO_PASS`)."""
    ref = runtime_ref(trainjob)

    def namespace_of(obj: Mapping[str, Any]) -> str | None:
        return ((obj.get("metadata") or {}).get("namespace") or "default") if obj.get("kind") == NAMESPACED_RUNTIME else None

    found = [r for r in runtimes if r.get("kind") == ref.kind and (r.get("metadata") or {}).get("name") == ref.name
             and namespace_of(r) == ref.namespace]
    if len(found) > 1:
        raise ShapeError(f"spec.runtimeRef: {len(found)} documents are the {ref}; give it once")
    if not found:
        given = ", ".join(runtime_label(r) for r in runtimes) or "none"
        raise ShapeError(f"spec.runtimeRef: a TrainJob's pod templates are its runtime's, the {ref}, which is not among "
                         f"the documents given (runtimes given: {given}); fix: {HOW_TO_PASS}")
    return found[0]


def merge_patch(base: Any, patch: Any) -> Any:
    """``patch`` merged over ``base`` as a strategic merge patch of the JobSet spec (see the module
    docstring: objects merge, ``None`` removes, :data:`MERGE_KEYS` lists merge on their key, other
    lists and scalars are replaced). Returns a new value; neither argument is changed."""
    if not isinstance(patch, Mapping) or not isinstance(base, Mapping):
        return copy.deepcopy(patch)
    out = {k: copy.deepcopy(v) for k, v in base.items()}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_keyed_list(out[key], value, MERGE_KEYS[key])
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_keyed_list(base: list[Any], patch: list[Any], key: str) -> list[Any]:
    """Items of ``patch`` merged into the item of ``base`` with the same ``key``, appended when none has it."""
    out = list(base)
    for item in patch:
        at = next((i for i, old in enumerate(out) if isinstance(old, Mapping) and isinstance(item, Mapping)
                   and key in item and old.get(key) == item[key]), None)
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = merge_patch(out[at], item)
    return out


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` when an object, ``{}`` when absent; raises :class:`ShapeError` naming ``where`` otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ShapeError(f"{where}: expected an object")
    return value


def _count(value: Any, where: str, default: int = 1) -> int:
    """A pod count as the Trainer reads it (an int32, ``default`` when absent); raises :class:`ShapeError`."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ShapeError(f"{where}: {quote(value)} is not a non-negative integer")
    return value


def jobset_for(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet (``jobset.x-k8s.io/v1alpha2``) the Trainer builds for ``trainjob`` from ``runtime``
    (its admitted object: the webhook's own ``runtimePatches`` entry included), by the rules of the
    module docstring. Returns a new object. Raises :class:`ShapeError` naming the document
    (:func:`runtime_label` for the runtime's fields) and field: a runtime without ``spec.template.spec.replicatedJobs``, a ``runtimePatches`` entry
    naming a replicatedJob the runtime lacks, or a malformed count."""
    where = runtime_label(runtime)
    rspec = _mapping(runtime.get("spec"), f"{where}: spec")
    template = _mapping(rspec.get("template"), f"{where}: spec.template")
    meta = _mapping(template.get("metadata"), f"{where}: spec.template.metadata")
    spec = copy.deepcopy(dict(_mapping(template.get("spec"), f"{where}: spec.template.spec")))
    if not isinstance(spec.get(RJOBS), list) or not spec[RJOBS]:
        raise ShapeError(f"{where}: spec.template.spec.{RJOBS}: missing or empty; the runtime has no Jobs to run")
    names = [rj.get("name") if isinstance(rj, Mapping) else None for rj in spec[RJOBS]]
    labels = dict(_mapping(meta.get("labels"), f"{where}: spec.template.metadata.labels"))
    annotations = dict(_mapping(meta.get("annotations"), f"{where}: spec.template.metadata.annotations"))
    tspec = _mapping(trainjob.get("spec"), "spec")
    patches = tspec.get("runtimePatches") or []
    if not isinstance(patches, list):
        raise ShapeError("spec.runtimePatches: expected a list of RuntimePatch objects")
    for i, entry in enumerate(patches):
        at = f"spec.runtimePatches[{i}].trainingRuntimeSpec.template"
        patch = _mapping(_mapping(_mapping(entry, f"spec.runtimePatches[{i}]").get("trainingRuntimeSpec"),
                                  f"spec.runtimePatches[{i}].trainingRuntimeSpec").get("template"), at)
        pmeta = _mapping(patch.get("metadata"), f"{at}.metadata")
        labels.update(_mapping(pmeta.get("labels"), f"{at}.metadata.labels"))
        annotations.update(_mapping(pmeta.get("annotations"), f"{at}.metadata.annotations"))
        pspec = _mapping(patch.get("spec"), f"{at}.spec")
        for rj in pspec.get(RJOBS) or []:
            target = rj.get("name") if isinstance(rj, Mapping) else None
            if target not in names:
                manager = entry.get("manager")
                raise ShapeError(f"{at}.spec.{RJOBS}[name={target}] (manager {manager}): the {where} has no "
                                 f"replicatedJob {quote(target)} (it has {', '.join(map(str, names))}); fix: name one "
                                 "of its replicatedJobs (for the webhook's entry: the TrainJob annotation "
                                 "segments.dev/trainer-job)")
        if pspec:
            spec = merge_patch(spec, pspec)
    _set_counts(spec, rspec, tspec, where)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": trainjob["metadata"]["name"],
                         "namespace": trainjob["metadata"].get("namespace", "default"),
                         "labels": labels, "annotations": annotations},
            "spec": spec}


def _set_counts(spec: dict[str, Any], rspec: Mapping[str, Any], tspec: Mapping[str, Any], where: str) -> None:
    """Pod counts, replicas and the trainer's resources on the merged JobSet ``spec`` (in place)."""
    policy = _mapping(rspec.get("mlPolicy"), f"{where}: spec.mlPolicy") if rspec.get("mlPolicy") is not None else None
    mpi = _mapping(policy.get("mpi"), f"{where}: spec.mlPolicy.mpi") if policy and policy.get("mpi") is not None else None
    launcher_as_node = bool(mpi and mpi.get("runLauncherAsNode") is True)
    trainer = _mapping(tspec.get("trainer"), "spec.trainer")
    num_nodes = trainer.get("numNodes")
    if num_nodes is not None:
        num_nodes = _count(num_nodes, "spec.trainer.numNodes")
    for k, rj in enumerate(spec[RJOBS]):
        at = f"{where}: spec.template.spec.{RJOBS}[{k}]"
        if not isinstance(rj, MutableMapping):  # the merged spec: dicts (copies), or the user's non-object
            raise ShapeError(f"{at}: expected a ReplicatedJob object")
        job = rj.setdefault("template", {})
        job_spec = job.setdefault("spec", {}) if isinstance(job, dict) else None
        if not isinstance(job_spec, dict):
            raise ShapeError(f"{at}.template.spec: expected a JobSpec object")
        ancestor = _mapping(_mapping(job.get("metadata"), f"{at}.template.metadata").get("labels"),
                            f"{at}.template.metadata.labels").get(ANCESTOR)
        count = _count(job_spec.get("parallelism"), f"{at}.template.spec.parallelism")
        is_trainer = ancestor == TRAINER_ANCESTOR and policy is not None
        if is_trainer and policy is not None:
            count = _count(policy.get("numNodes"), f"{where}: spec.mlPolicy.numNodes")
        if num_nodes is not None:
            if mpi is not None and rj.get("name") == NODE:
                count = max(num_nodes - 1, 1) if launcher_as_node else num_nodes
            elif mpi is None and ancestor == TRAINER_ANCESTOR:
                count = num_nodes
        count = max(count, 1)
        job_spec["parallelism"] = job_spec["completions"] = count
        if ancestor == TRAINER_ANCESTOR or ancestor in INITIALIZER_ANCESTORS:
            rj["replicas"] = 1
        if ancestor == TRAINER_ANCESTOR or (launcher_as_node and rj.get("name") == NODE):
            _set_trainer_container(job_spec, trainer, at, resources=is_trainer or launcher_as_node,
                                   image=ancestor == TRAINER_ANCESTOR)


def _set_trainer_container(job_spec: dict[str, Any], trainer: Mapping[str, Any], at: str, *, resources: bool, image: bool) -> None:
    """On the container named ``node`` of the Job spec ``job_spec`` (in place): ``spec.trainer``'s
    resourcesPerNode merged key by key when ``resources``, its image, command and args when ``image``."""
    pod_spec = _mapping(_mapping(job_spec.get("template"), f"{at}.template.spec.template").get("spec"),
                        f"{at}.template.spec.template.spec")
    for container in pod_spec.get("containers") or []:
        if isinstance(container, dict) and container.get("name") == NODE:
            per_node = trainer.get("resourcesPerNode")
            if resources and per_node is not None:
                container["resources"] = merge_patch(_mapping(container.get("resources"), f"{at} container node resources"),
                                                     _mapping(per_node, "spec.trainer.resourcesPerNode"))
            for field in ("image", "command", "args"):
                if image and trainer.get(field) is not None:
                    container[field] = copy.deepcopy(trainer[field])
            return
