"""The controller's decision for target ``workload-api`` (DESIGN.md §9b), as a pure function: a gang's
pods in, the Workload API objects to create out. No I/O: the runner creates them through
:mod:`webhook.controller.workload_objects`.

* **Which gangs.** A pod whose annotation ``segments.dev/target`` is ``workload-api`` (written on
  every template of the gang at workload CREATE by a webhook serving that target,
  :mod:`webhook.admission.targets`) belongs to a gang whose objects this controller creates; its pods
  are never gated, the pod handler points each at its PodGroup at CREATE
  (:func:`webhook.admission.workload_api.group_pod`).
* **When.** Once every pod of the gang exists (``segments.dev/gang-size`` live pods): the child
  PodGroups' ``minCount`` is the count of each segment's pods
  (:func:`webhook.admission.workload_api.gang_shape`, the same function ``place --target workload-api``
  prints with). kube-scheduler holds a pod whose PodGroup does not exist yet (``PreEnqueue`` of
  k8s.io/kubernetes v1.37.2 ``pkg/scheduler/framework/plugins/gangscheduling``) and looks again when
  a PodGroup or CompositePodGroup is added.
* **Owner.** Every object carries one ``ownerReferences`` entry naming the gang's top owner workload
  (:mod:`webhook.controller.owners`), so the garbage collector deletes them with it; without a
  readable owner the objects are created without one (and the runner says so).
* **Immutable.** A PodGroup's and a CompositePodGroup's spec cannot change after creation
  (k8s.io/api v0.37.2 ``+k8s:immutable``); an object that exists already is kept as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webhook.admission.kinds import registry
from webhook.admission.targets import WORKLOAD_API
from webhook.admission.workload_api import gang_shape, pod_maps
from webhook.gating.reconcile import ObjectRef
from webhook.kube.pods import is_deleting, is_terminated, pod_ref
from webhook.kube.segments_dev import TARGET_KEY
from webhook.kube.shapes import Pod

__all__ = ["GroupsDecision", "is_grouped_pod", "owner_reference", "reconcile_groups"]


@dataclass(frozen=True)
class GroupsDecision:
    """What :func:`reconcile_groups` decided for one gang: ``create``, the objects in creation order
    (Workload, CompositePodGroup, child PodGroups), each with its owner; or none, with ``waiting``
    (not every pod exists yet: ``"3 of 8 pods exist"``) or ``problem`` (the pods disagree: never)."""

    gang: str
    create: tuple[dict[str, Any], ...] = ()
    waiting: str = ""
    problem: str = ""


def is_grouped_pod(pod: Pod) -> bool:
    """True when ``pod`` carries ``segments.dev/target: workload-api``."""
    return pod_maps(pod)[1].get(TARGET_KEY) == WORKLOAD_API


def owner_reference(owner: ObjectRef) -> dict[str, str]:
    """The ``ownerReferences`` entry naming ``owner`` (no ``controller``, no ``blockOwnerDeletion``:
    the garbage collector deletes the dependents after their owner, which is all that is needed)."""
    return {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid}


def reconcile_groups(gang_key: str, pods: Sequence[Pod], owner: ObjectRef | None) -> GroupsDecision:
    """Decide gang ``gang_key`` (``<namespace>/<name>[/<part>]``) from its ``pods`` (dicts as the
    informer holds them; terminated and deleting ones are left out, and so are pods without the
    target annotation) and its top ``owner`` (``None``: not readable). Returns a
    :class:`GroupsDecision`; never raises."""
    live = sorted((p for p in pods if is_grouped_pod(p) and not is_terminated(p) and not is_deleting(p)),
                  key=pod_ref)
    if not live:
        return GroupsDecision(gang_key, waiting="no live pod")
    namespace = pod_ref(live[0])[0] or gang_key.split("/")[0]
    shape = gang_shape(namespace, gang_key, live, registry.gang_size_keys(), registry.whole_gang_group)
    if shape.objects is None:
        return GroupsDecision(gang_key, waiting=shape.waiting, problem=shape.problem)
    objects = []
    for obj in shape.objects:
        if owner is not None:
            obj["metadata"]["ownerReferences"] = [owner_reference(owner)]
        objects.append(obj)
    return GroupsDecision(gang_key, tuple(objects))
