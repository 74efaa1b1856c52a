"""The ``workload-api`` target's objects (DESIGN.md §9b): a gang of segments as Kubernetes 1.37's
Workload API objects.

Field names from k8s.io/api v0.37.2: ``scheduling/v1beta1`` ``Workload`` (``spec.compositePodGroupTemplates``:
``name``, ``schedulingPolicy.gang.minGroupCount``, ``schedulingConstraints.topology[].key``,
``podGroupTemplates``) and ``PodGroup`` (``spec.parentCompositePodGroupName``, ``spec.workloadRef``
{``workloadName``, ``templateName``}, ``spec.schedulingPolicy.gang.minCount``,
``spec.schedulingConstraints.topology[].key``); ``scheduling/v1alpha3`` ``CompositePodGroup``
(``spec.workloadRef`` required, ``spec.schedulingPolicy.gang.minGroupCount``,
``spec.schedulingConstraints.topology``); ``core/v1`` ``PodSpec.schedulingGroup.podGroupName``. A
child PodGroup with a parent needs ``workloadRef`` (``+k8s:dependentRequired("workloadRef")``), so
each gang gets a Workload too. Topology constraints are required only, one key each.

Pure: plain dicts, no client. One gang: a CompositePodGroup ``<gang>`` (the workload required level)
with one child PodGroup ``<gang>-segment-<k>`` per segment (``minCount`` = its pods, the segment
required level) and, for pods outside segments (a Master, an excluded leader), one child
``<gang>-other`` without a topology constraint.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

WORKLOAD_VERSION = "scheduling.k8s.io/v1beta1"
COMPOSITE_VERSION = "scheduling.k8s.io/v1alpha3"
GANG_TEMPLATE, SEGMENT_TEMPLATE, OTHER_TEMPLATE = "gang", "segment", "other"


def gang_object_name(gang_key: str) -> str:
    """A DNS-subdomain name for the gang ``<namespace>/<name>[/<part>…]``: the parts after the
    namespace, lower-cased, joined by ``-`` (``team-a/llama/0`` → ``llama-0``)."""
    parts = gang_key.split("/")[1:] or [gang_key]
    name = "-".join(parts).lower()
    return re.sub(r"[^a-z0-9.-]", "-", name).strip("-.")[:200] or "gang"


def podgroup_name(gang: str, segment: int | None) -> str:
    """The child PodGroup of segment ``segment`` of ``gang`` (``None``: the pods outside segments)."""
    return f"{gang}-{OTHER_TEMPLATE}" if segment is None else f"{gang}-{SEGMENT_TEMPLATE}-{segment}"


def _constraints(level: str | None) -> dict[str, Any]:
    return {"schedulingConstraints": {"topology": [{"key": level}]}} if level else {}


def gang_objects(namespace: str, gang: str, segment_sizes: Sequence[int], others: int,
                 workload_level: str | None, segment_level: str | None) -> list[dict[str, Any]]:
    """The Workload, CompositePodGroup and child PodGroups of one gang.

    ``segment_sizes``: pods per segment, by segment index; ``others``: pods outside segments;
    ``workload_level`` / ``segment_level``: the required levels (node-label keys) or ``None``.
    Returns the objects in creation order (Workload, CompositePodGroup, PodGroups)."""
    children = len(segment_sizes) + (1 if others else 0)
    group_templates = []
    if segment_sizes:
        group_templates.append({"name": SEGMENT_TEMPLATE,
                                "schedulingPolicy": {"gang": {"minCount": max(segment_sizes)}},
                                **_constraints(segment_level)})
    if others:
        group_templates.append({"name": OTHER_TEMPLATE, "schedulingPolicy": {"gang": {"minCount": others}}})
    def policy() -> dict[str, Any]:
        return {"gang": {"minGroupCount": children}}

    workload = {"apiVersion": WORKLOAD_VERSION, "kind": "Workload", "metadata": {"name": gang, "namespace": namespace},
                "spec": {"compositePodGroupTemplates": [{"name": GANG_TEMPLATE, "schedulingPolicy": policy(),
                                                         **_constraints(workload_level),
                                                         "podGroupTemplates": group_templates}]}}
    composite = {"apiVersion": COMPOSITE_VERSION, "kind": "CompositePodGroup",
                 "metadata": {"name": gang, "namespace": namespace},
                 "spec": {"workloadRef": {"workloadName": gang, "templateName": GANG_TEMPLATE},
                          "schedulingPolicy": policy(), **_constraints(workload_level)}}
    groups = [_podgroup(namespace, gang, index, size, SEGMENT_TEMPLATE, segment_level)
              for index, size in enumerate(segment_sizes)]
    if others:
        groups.append(_podgroup(namespace, gang, None, others, OTHER_TEMPLATE, None))
    return [workload, composite, *groups]


def _podgroup(namespace: str, gang: str, segment: int | None, pods: int, template: str,
              level: str | None) -> dict[str, Any]:
    return {"apiVersion": WORKLOAD_VERSION, "kind": "PodGroup",
            "metadata": {"name": podgroup_name(gang, segment), "namespace": namespace},
            "spec": {"parentCompositePodGroupName": gang,
                     "workloadRef": {"workloadName": gang, "templateName": template},
                     "schedulingPolicy": {"gang": {"minCount": pods}}, **_constraints(level)}}


def pod_operations(podgroup: str) -> list[dict[str, Any]]:
    """The RFC 6902 operation that points a pod at its PodGroup at CREATE (``spec.schedulingGroup``
    is immutable afterwards)."""
    return [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": podgroup}}]
