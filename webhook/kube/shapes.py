"""The shapes of the Kubernetes objects this project reads, as :class:`typing.TypedDict` s: the
fields read of a Pod, a Node, an ``ownerReferences`` entry, a Lease (``coordination.k8s.io/v1``)
and a KAI Topology (``kai.scheduler/v1alpha1``), in the API's JSON names.

Every class is ``total=False``: an object as the API server sends it omits empty fields (Go's
``omitempty``), so each key may be missing and is read with ``.get``. Value types are the API's
(k8s.io/api v0.37 ``core/v1``, ``coordination/v1``; KAI-Scheduler ``pkg/apis/kai/v1alpha1``); a
quantity (``resources.requests``, ``status.allocatable``) is ``str | int | float``: the API server
writes strings, a hand-written manifest or dump may hold bare numbers, and the readers accept both
(:mod:`webhook.kube.quantity`). Only the fields the code reads are named; an object carries more,
which the readers ignore. The readers still check each value they read (a dump given to the CLI is
not validated by an API server): these types say what a field is, not that it was checked.

Pure: no I/O, no Kubernetes client (docs/decisions/typed-kubernetes-boundary.md).
"""

from __future__ import annotations

from typing import TypedDict

#: A resource quantity as found in an object (``"500m"``, ``"16Gi"``; ``2`` in a hand-written file).
Quantity = str | int | float


class OwnerReference(TypedDict, total=False):
    """One ``metadata.ownerReferences`` entry (``meta/v1.OwnerReference``)."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    """``metadata`` as read (``meta/v1.ObjectMeta``); timestamps are RFC 3339 strings."""

    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]


class ResourceRequirements(TypedDict, total=False):
    """A container's ``resources`` (``core/v1.ResourceRequirements``): quantities by resource name."""

    requests: dict[str, Quantity]
    limits: dict[str, Quantity]


class Container(TypedDict, total=False):
    """One entry of ``spec.containers`` / ``spec.initContainers`` (``core/v1.Container``);
    ``restartPolicy: Always`` marks a sidecar (restartable init container)."""

    name: str
    resources: ResourceRequirements
    restartPolicy: str


class PodSchedulingGate(TypedDict, total=False):
    """One ``spec.schedulingGates`` entry (``core/v1.PodSchedulingGate``, KEP-3838)."""

    name: str


class PodSpec(TypedDict, total=False):
    """``spec`` of a Pod as read (``core/v1.PodSpec``): where it runs or is pinned, its gates, its
    containers' requests and its overhead. ``affinity`` is read by the admission rules only as a
    whole (passed through, never interpreted here)."""

    nodeName: str
    nodeSelector: dict[str, str]
    schedulingGates: list[PodSchedulingGate]
    containers: list[Container]
    initContainers: list[Container]
    overhead: dict[str, Quantity]
    affinity: dict[str, object]


class PodCondition(TypedDict, total=False):
    """One ``status.conditions`` entry of a Pod (``core/v1.PodCondition``)."""

    type: str
    status: str
    reason: str
    message: str


class PodStatus(TypedDict, total=False):
    """``status`` of a Pod as read: its phase (``Pending``, ``Running``, ``Succeeded``, ``Failed``)
    and conditions (``PodScheduled`` ``Unschedulable``)."""

    phase: str
    conditions: list[PodCondition]


class Pod(TypedDict, total=False):
    """A Pod (``core/v1.Pod``) as this project reads it."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class Taint(TypedDict, total=False):
    """One ``spec.taints`` entry of a Node (``core/v1.Taint``); ``effect`` one of ``NoSchedule``,
    ``PreferNoSchedule``, ``NoExecute``."""

    key: str
    value: str
    effect: str


class NodeSpec(TypedDict, total=False):
    """``spec`` of a Node as read: cordoned or not, and its taints."""

    unschedulable: bool
    taints: list[Taint]


class NodeCondition(TypedDict, total=False):
    """One ``status.conditions`` entry of a Node; the ``Ready`` one is read (``status`` ``"True"``)."""

    type: str
    status: str


class NodeStatus(TypedDict, total=False):
    """``status`` of a Node as read: ``allocatable`` (else ``capacity``) quantities and conditions."""

    allocatable: dict[str, Quantity]
    capacity: dict[str, Quantity]
    conditions: list[NodeCondition]


class Node(TypedDict, total=False):
    """A Node (``core/v1.Node``) as this project reads it: its labels (the topology), its
    allocatable resources, whether it is schedulable, ready and tainted."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: NodeSpec
    status: NodeStatus


class LeaseSpec(TypedDict, total=False):
    """``spec`` of a Lease (``coordination/v1.LeaseSpec``) as the election reads and writes it:
    the holder, the lease's length in seconds and the times it was taken and renewed (RFC 3339
    with microseconds)."""

    holderIdentity: str
    leaseDurationSeconds: int
    acquireTime: str
    renewTime: str
    leaseTransitions: int


class Lease(TypedDict, total=False):
    """A Lease (``coordination.k8s.io/v1``)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: LeaseSpec


class TopologyLevel(TypedDict, total=False):
    """One ``spec.levels`` entry of a KAI Topology: the node label of the level and an optional
    alias (``kai.scheduler/v1alpha1`` ``TopologyLevel``)."""

    nodeLabel: str
    alias: str


class TopologySpec(TypedDict, total=False):
    """``spec`` of a KAI Topology: its levels, highest first."""

    levels: list[TopologyLevel]


class Topology(TypedDict, total=False):
    """A KAI Topology object (``kai.scheduler/v1alpha1``, kind ``Topology``). List items may omit
    ``apiVersion`` and ``kind``."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: TopologySpec
