"""An oracle of KAI Scheduler's pod-grouper, written from its source (not from this project's output).

Source followed: kai-scheduler/KAI-Scheduler at commit d5bc503 (``fix: propagate Kubernetes client
arguments (#2027)``), read with ``git show``; no code copied. Files:

* ``pkg/podgrouper/pod_controller.go``: ``PodReconciler.Reconcile`` and
  ``assignPodToGroupAndSubGroup`` (a pod's ``kai.scheduler/subgroup-name`` label is set only when
  the PodGroup has a subgroup listing the pod; otherwise the label the pod carries stays).
* ``pkg/podgrouper/podgrouper/hub/hub.go``: which grouper serves which top-owner kind (no entry for
  ``segments.dev``: the default grouper; TrainJob: the skip-top-owner grouper).
* ``pkg/podgrouper/podgrouper/plugins/defaultgrouper/default_grouper.go``: the PodGroup's topology
  constraint is the top owner's own ``kai.scheduler/topology``, ``topology-required-placement``,
  ``topology-preferred-placement`` annotations.
* ``plugins/kubeflow/distributed_common.go``, ``plugins/kubeflow/pytorch/pytorch_grouper.go``,
  ``plugins/kubeflow/mpi/mpi-grouper.go``, ``plugins/leaderworkerset/lws_grouper.go``,
  ``plugins/jobset/jobset_grouper.go``, ``plugins/ray/ray_grouper.go`` (+ ``raycluster_grouper.go``,
  ``rayjob_grouper.go``), ``plugins/skiptopowner/skiptopowner.go``.
* ``pkg/scheduler/api/podgroup_info/subgroup_info/factory.go``: the scheduler uses the PodGroup's
  topology constraint only when its topology name is not empty.

The oracle answers, for an admitted top-owner object and the pods its operator creates, which
PodGroup KAI derives (:class:`PodGroup`: its topology constraint, its subgroups with their
constraints and pods), whether the grouper errors on every pod (``error``: no PodGroup), and which
pods the scheduler never schedules (``rejected``: a pod whose subgroup-name names a subgroup the
PodGroup lacks). Only what bears on placement constraints is modelled (no queues, priorities,
minAvailable beyond what the subgroup sizes need).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KAI_COMMIT = "d5bc503"

TOPOLOGY = "kai.scheduler/topology"
REQUIRED = "kai.scheduler/topology-required-placement"
PREFERRED = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE = "kai.scheduler/segment-size"
SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
SUBGROUP = "kai.scheduler/subgroup-name"


class GrouperError(Exception):
    """The pod-grouper returns an error for every pod: no PodGroup is made, no pod is scheduled."""


@dataclass(frozen=True)
class Constraint:
    """A topology constraint as KAI stores it (``TopologyConstraintMetadata``): empty strings for unset."""

    topology: str = ""
    required: str = ""
    preferred: str = ""

    @property
    def effective(self) -> bool:
        """True when the scheduler enforces it: a topology name and at least one level
        (``subgroup_info/factory.go`` ignores a constraint without a topology name)."""
        return bool(self.topology) and bool(self.required or self.preferred)


@dataclass
class SubGroup:
    """One subgroup: ``parent`` (``None`` at the top), its ``constraint`` (``None``: none of its
    own) and the names of the pods it lists."""

    name: str
    parent: str | None = None
    constraint: Constraint | None = None
    pods: list[str] = field(default_factory=list)


@dataclass
class PodGroup:
    """What KAI derives for one top owner and its pods. ``error``: the grouper's error text (every
    pod), else ``None``. ``subgroup_of``: pod name → the subgroup-name label the pod ends with.
    ``rejected``: pod name → why the scheduler never schedules it."""

    constraint: Constraint = Constraint()
    subgroups: dict[str, SubGroup] = field(default_factory=dict)
    error: str | None = None
    subgroup_of: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)

    def constraints_of(self, pod: str) -> list[Constraint]:
        """The effective constraints on ``pod``'s subgroup and its parents, leaf first."""
        out: list[Constraint] = []
        name: str | None = self.subgroup_of.get(pod)
        while name is not None and name in self.subgroups:
            group = self.subgroups[name]
            if group.constraint is not None and group.constraint.effective:
                out.append(group.constraint)
            name = group.parent
        return out

    def members(self, subgroup: str) -> set[str]:
        """The pods of ``subgroup`` and of every subgroup below it."""
        out = set(self.subgroups[subgroup].pods) if subgroup in self.subgroups else set()
        for group in self.subgroups.values():
            if group.parent == subgroup:
                out |= self.members(group.name)
        return out


def _ann(obj: Mapping[str, Any] | None) -> dict[str, str]:
    meta = (obj or {}).get("metadata") or {}
    return dict(meta.get("annotations") or {})


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(((obj.get("metadata") or {}).get("labels")) or {})


def _dig(obj: Any, *path: str) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def _atoi(text: str) -> int:
    """Go ``strconv.Atoi``: optional sign and ASCII digits, else an error."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise GrouperError(f"invalid integer {text!r}")
    return int(text)


def root_constraint(top_owner: Mapping[str, Any]) -> Constraint:
    """The PodGroup's constraint: the top owner's own annotations (``default_grouper.go``
    ``GetPodGroupMetadata``, KAI d5bc503)."""
    ann = _ann(top_owner)
    return Constraint(ann.get(TOPOLOGY, ""), ann.get(REQUIRED, ""), ann.get(PREFERRED, ""))


# ----------------------------------------------------------------------------- PyTorchJob
def pytorch_subgroups(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[str, SubGroup]:
    """``plugins/kubeflow/pytorch/pytorch_grouper.go`` (d5bc503) ``buildSubGroups``: ``master`` when
    a Master spec has replicas (absent replicas count 0 there); ``worker`` (Worker replicas default
    1), split into ``worker-<i // S>`` leaves under it when the segment size S is set (pod
    annotation, else the Worker template's). A segment leaf's constraint: topology from the pod,
    else the Worker template, else the top owner; levels from the pod, else the Worker template
    (``getSegmentTopologyConstraints``; never the root). Also ``distributed_common.go``
    ``calcJobNumOfPods``: without ``runPolicy.schedulingPolicy.minAvailable`` every replica spec
    needs replicas > 0, else the grouper errors."""
    specs = _dig(job, "spec", "pytorchReplicaSpecs") or {}
    if _dig(job, "spec", "runPolicy", "schedulingPolicy", "minAvailable") is None:
        for name, spec in specs.items():
            if not (isinstance(spec, Mapping) and spec.get("replicas")):
                raise GrouperError(f"the job doesn't allow for 0 {name} pods")
    groups: dict[str, SubGroup] = {}
    if "Master" in specs and (specs["Master"].get("replicas") or 0) > 0:
        groups["master"] = SubGroup("master")
    if "Worker" not in specs:
        return groups
    worker = specs["Worker"]
    workers = worker.get("replicas", 1)
    template_ann = _ann(worker.get("template"))
    for pod in pods:
        role = _labels(pod).get("training.kubeflow.org/replica-type")
        ann = _ann(pod)
        size_text = ann.get(SEGMENT_SIZE) or template_ann.get(SEGMENT_SIZE) or ""
        if role == "master":
            if "master" in groups:
                groups["master"].pods.append(pod["metadata"]["name"])
            continue
        if role != "worker":
            continue
        groups.setdefault("worker", SubGroup("worker"))
        if not size_text:
            groups["worker"].pods.append(pod["metadata"]["name"])
            continue
        size = _atoi(size_text)
        if size <= 0:
            raise GrouperError("segment size needs to be a positive integer")
        segments = -(-workers // size)
        if segments > 10000:
            raise GrouperError("too many segments")
        topology = ann.get(TOPOLOGY) or template_ann.get(TOPOLOGY) or _ann(job).get(TOPOLOGY, "")
        required = ann.get(SEGMENT_REQUIRED) or template_ann.get(SEGMENT_REQUIRED, "")
        preferred = ann.get(SEGMENT_PREFERRED) or template_ann.get(SEGMENT_PREFERRED, "")
        constraint = Constraint(topology, required, preferred) if topology and (required or preferred) else None
        for k in range(segments):
            groups.setdefault(f"worker-{k}", SubGroup(f"worker-{k}", "worker", constraint))
        index = _atoi(_labels(pod).get("training.kubeflow.org/replica-index", "x"))
        groups[f"worker-{index // size}"].pods.append(pod["metadata"]["name"])
    return groups


# ----------------------------------------------------------------------------- LeaderWorkerSet
def lws_subgroups(lws: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[str, SubGroup]:
    """``plugins/leaderworkerset/lws_grouper.go`` (d5bc503), for startupPolicy LeaderCreated (the
    group size R = ``leaderWorkerTemplate.size``). Segment size: ``subGroupPolicy.subGroupSize``,
    else the root annotation, else the workerTemplate's (``getSegmentSize``): S <= 1 or S > R is an
    error. Without a size: ``leader`` and ``workers``. With one: ``segment-<k>`` subgroups carrying
    the segment constraint (topology: pod, workerTemplate, root; levels: pod, workerTemplate); a
    worker w is in segment ``(w-1) // S`` when ``(R-1) % S == 0`` else ``w // S``. LeaderWorker:
    ``leader`` and ``workers`` leaves under ``segment-0``; LeaderExcluded: a top ``leader``
    subgroup ((R-1) % S != 0 is an error)."""
    lwt = _dig(lws, "spec", "leaderWorkerTemplate") or {}
    size = lwt.get("size")
    if not isinstance(size, int) or size <= 0:
        raise GrouperError("invalid leaderWorkerTemplate.size")
    if (_dig(lws, "spec", "startupPolicy") or "LeaderCreated") != "LeaderCreated":
        raise GrouperError("only startupPolicy LeaderCreated is modelled")
    policy_spec = lwt.get("subGroupPolicy") or {}
    worker_ann = _ann(lwt.get("workerTemplate"))
    seg: int | None = policy_spec.get("subGroupSize")
    if seg is None:
        for ann in (_ann(lws), worker_ann):
            if SEGMENT_SIZE in ann:
                seg = _atoi(ann[SEGMENT_SIZE])
                break
    groups: dict[str, SubGroup] = {}
    if seg is None:
        groups["leader"] = SubGroup("leader")
        if size > 1:
            groups["workers"] = SubGroup("workers")
        for pod in pods:
            leader = _labels(pod).get("leaderworkerset.sigs.k8s.io/worker-index") == "0"
            groups["leader" if leader else "workers"].pods.append(pod["metadata"]["name"])
        return groups
    if seg <= 1 or seg > size:
        raise GrouperError(f"segmentSize {seg} is not valid for replicasSize {size}")
    policy = policy_spec.get("subGroupPolicyType", "LeaderWorker")
    divisible = (size - 1) % seg == 0

    def segment_of(w: int) -> int:
        return 0 if w == 0 else ((w - 1) // seg if divisible else w // seg)

    for pod in pods:
        ann = _ann(pod)
        topology = ann.get(TOPOLOGY) or worker_ann.get(TOPOLOGY) or _ann(lws).get(TOPOLOGY, "")
        required = ann.get(SEGMENT_REQUIRED) or worker_ann.get(SEGMENT_REQUIRED, "")
        preferred = ann.get(SEGMENT_PREFERRED) or worker_ann.get(SEGMENT_PREFERRED, "")
        constraint = Constraint(topology, required, preferred) if topology and (required or preferred) else None
        for k in range(segment_of(size - 1) + 1):
            groups.setdefault(f"segment-{k}", SubGroup(f"segment-{k}", None, constraint))
        w = int(_labels(pod)["leaderworkerset.sigs.k8s.io/worker-index"])
        name = pod["metadata"]["name"]
        if policy == "LeaderExcluded":
            if not divisible:
                raise GrouperError("LeaderExcluded needs (size - 1) % segment size == 0")
            groups.setdefault("leader", SubGroup("leader"))
            groups["leader" if w == 0 else f"segment-{segment_of(w)}"].pods.append(name)
            continue
        groups.setdefault("leader", SubGroup("leader", "segment-0"))
        groups.setdefault("workers", SubGroup("workers", "segment-0"))
        target = "leader" if w == 0 else ("workers" if segment_of(w) == 0 else f"segment-{segment_of(w)}")
        groups[target].pods.append(name)
    return groups


# ----------------------------------------------------------------------------- JobSet
def jobset_subgroups(jobset: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[str, SubGroup]:
    """``plugins/jobset/jobset_grouper.go`` (d5bc503) ``buildSubGroups``: per replicatedJob a parent
    subgroup (its name) and one leaf ``<name>-replica-<i>`` per Job (replicas default 1), whose
    constraint is read from ``replicatedJobs[k].template.metadata.annotations`` alone (topology and
    levels; none without a topology name or without a level: ``singleReplicaSubGroupTopology``).
    A pod goes to the leaf its ``replicatedjob-name`` and ``job-index`` labels name; a pod
    without them is an error."""
    groups: dict[str, SubGroup] = {}
    rjobs = _dig(jobset, "spec", "replicatedJobs") or []
    if not rjobs:
        raise GrouperError("jobset has no replicatedJobs")
    for rj in rjobs:
        name = rj.get("name")
        ann = _ann(rj.get("template"))
        topology, required, preferred = ann.get(TOPOLOGY, ""), ann.get(REQUIRED, ""), ann.get(PREFERRED, "")
        constraint = Constraint(topology, required, preferred) if topology and (required or preferred) else None
        groups[name] = SubGroup(name)
        for i in range(rj.get("replicas", 1)):
            groups[f"{name}-replica-{i}"] = SubGroup(f"{name}-replica-{i}", name, constraint)
    for pod in pods:
        labels = _labels(pod)
        leaf = f"{labels.get('jobset.sigs.k8s.io/replicatedjob-name')}-replica-{labels.get('jobset.sigs.k8s.io/job-index')}"
        if leaf not in groups:
            raise GrouperError(f"leaf subgroup {leaf} not found")
        groups[leaf].pods.append(pod["metadata"]["name"])
    return groups


def trainjob_top_owner(trainjob: Mapping[str, Any], jobset: Mapping[str, Any]) -> dict[str, Any]:
    """``plugins/skiptopowner/skiptopowner.go`` (d5bc503): a TrainJob is skipped; its JobSet is
    grouped, with each TrainJob annotation (and label) the JobSet lacks copied down
    (``propagateMetadataDownChain``). Returns the JobSet as the JobSet grouper sees it."""
    out = dict(jobset)
    meta = dict(out.get("metadata") or {})
    ann = dict(meta.get("annotations") or {})
    for key, value in _ann(trainjob).items():
        ann.setdefault(key, value)
    meta["annotations"] = ann
    out["metadata"] = meta
    return out


# ----------------------------------------------------------------------------- Ray
def _template_constraint(spec: Mapping[str, Any], where: str) -> Constraint | None:
    """``ray_grouper.go`` ``getTemplateTopologyConstraints``: the group template's own topology and
    levels; no level: none; a level without a topology name: an error (every pod)."""
    ann = _ann(spec.get("template"))
    topology, required, preferred = ann.get(TOPOLOGY, ""), ann.get(REQUIRED, ""), ann.get(PREFERRED, "")
    if not required and not preferred:
        return None
    if not topology:
        raise GrouperError(f"topology annotation is required for {where} when topology placement annotations are set")
    return Constraint(topology, required, preferred)


def ray_subgroups(cluster: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[str, SubGroup]:
    """``plugins/ray/ray_grouper.go`` (d5bc503) ``calcJobNumOfPodsAndSubGroups`` on the RayCluster
    (``cluster``: an object whose ``spec`` is the RayCluster spec; for a RayJob the RayCluster
    KubeRay made from ``rayClusterSpec``): ``headgroup`` and one subgroup per worker group that
    has replicas or minReplicas (suspended groups skipped), each with its template's constraint. A
    pod goes to the subgroup its ``ray.io/group`` label names."""
    spec = cluster.get("spec") or {}
    groups = {"headgroup": SubGroup("headgroup", None, _template_constraint(spec.get("headGroupSpec") or {},
                                                                           "headGroupSpec"))}
    for index, group in enumerate(spec.get("workerGroupSpecs") or []):
        if group.get("suspended") or (not group.get("replicas") and not group.get("minReplicas")):
            continue
        name = group.get("groupName") or f"worker-group-{index}"
        groups[name] = SubGroup(name, None, _template_constraint(group, f"workerGroupSpecs.{name}"))
    for pod in pods:
        group_name = _labels(pod).get("ray.io/group")
        if group_name in groups:
            groups[group_name].pods.append(pod["metadata"]["name"])
    return groups


# ----------------------------------------------------------------------------- MPIJob
def mpi_check(job: Mapping[str, Any]) -> None:
    """``plugins/kubeflow/mpi/mpi-grouper.go`` (d5bc503): the Kubeflow distributed grouper with
    ``Launcher`` and ``Worker`` mandatory, each with replicas > 0 (``calcJobNumOfPods``), unless
    ``runPolicy.schedulingPolicy.minAvailable`` is set. One flat PodGroup."""
    if _dig(job, "spec", "runPolicy", "schedulingPolicy", "minAvailable") is not None:
        return
    specs = _dig(job, "spec", "mpiReplicaSpecs") or {}
    for name in ("Launcher", "Worker"):
        if name not in specs:
            raise GrouperError(f"the job doesn't have a {name} replica spec which is required")
    for name, spec in specs.items():
        if not (isinstance(spec, Mapping) and spec.get("replicas")):
            raise GrouperError(f"the job doesn't allow for 0 {name} pods")


# ----------------------------------------------------------------------------- the entry point
def derive(top_owner: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *,
           jobset: Mapping[str, Any] | None = None) -> PodGroup:
    """The PodGroup KAI derives for ``top_owner`` (the admitted object) and its ``pods`` (as their
    operator creates them, admitted). ``jobset``: for a TrainJob, the JobSet the Trainer builds.
    The grouper is chosen as ``hub/hub.go`` chooses it; kinds with no plugin (``segments.dev``)
    get the default grouper. Pod assignment and rejection: ``pod_controller.go``
    ``assignPodToGroupAndSubGroup`` (a pod KAI lists in a subgroup gets that name; any other pod
    keeps the label it has, and a label naming a subgroup the PodGroup lacks is never scheduled)."""
    kind = top_owner.get("kind")
    owner = top_owner
    try:
        if kind == "TrainJob":
            if jobset is None:
                raise ValueError("a TrainJob needs its JobSet")
            owner = trainjob_top_owner(top_owner, jobset)
            subgroups = jobset_subgroups(owner, pods)
        elif kind == "PyTorchJob":
            subgroups = pytorch_subgroups(owner, pods)
        elif kind == "LeaderWorkerSet":
            subgroups = lws_subgroups(owner, pods)
        elif kind == "JobSet":
            subgroups = jobset_subgroups(owner, pods)
        elif kind in ("RayCluster", "RayJob", "RayService"):
            cluster_spec = {"RayCluster": _dig(owner, "spec"), "RayJob": _dig(owner, "spec", "rayClusterSpec"),
                            "RayService": _dig(owner, "spec", "rayClusterConfig")}[kind] or {}
            subgroups = ray_subgroups({"spec": cluster_spec}, pods)
        elif kind == "MPIJob":
            mpi_check(owner)
            subgroups = {}
        else:  # no plugin: the default grouper (DistributedWorkload of segments.dev among them)
            subgroups = {}
    except GrouperError as exc:
        return PodGroup(constraint=root_constraint(owner), error=str(exc))
    group = PodGroup(constraint=root_constraint(owner), subgroups=subgroups)
    listed = {pod: sg.name for sg in subgroups.values() for pod in sg.pods}
    for pod in pods:
        name = pod["metadata"]["name"]
        label = listed.get(name, _labels(pod).get(SUBGROUP))
        if label is None:
            continue
        group.subgroup_of[name] = label
        if label not in subgroups:
            group.rejected[name] = f"subgroup-name {label} names no subgroup of the PodGroup"
    return group
