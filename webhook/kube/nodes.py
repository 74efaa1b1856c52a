"""Reading a Node object: :class:`Node` (what the engine and the controller know of a node) and
:func:`parse_node`, the one reader of a Node dict (a ``kubectl get nodes -o yaml`` dump or the live
API), whose :class:`SnapshotError` names the file (when given), the node and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from webhook.errors import SegmentWebhookError
from webhook.kube.quantity import QuantityError, allocatable_milli
from webhook.kube.shapes import Node as NodeObject
from webhook.text.messages import json_type, quote

#: ``pods`` allocatable assumed when a node does not report one (kubelet ``--max-pods`` default).
DEFAULT_MAX_PODS = 110

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class SnapshotError(SegmentWebhookError, ValueError):
    """Bad snapshot input; the message names the file, the object and the field."""


@dataclass
class Node:
    """One node of the snapshot.

    ``allocatable`` / ``free``: integer milli-units per resource name (``cpu`` 1 core = 1000,
    ``memory`` 1 byte = 1000, ``pods`` 1 pod = 1000). ``free`` may be negative (over-committed).
    ``taints``: the node's ``NoSchedule``/``NoExecute`` taints as ``(key, value, effect)``.
    """

    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    free: dict[str, int]
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[tuple[str, str, str], ...] = ()
    source: str = ""


def is_node(obj: Mapping[str, Any]) -> TypeGuard[NodeObject]:
    """True for an object of ``kind: Node`` (a document of a file): read as a
    :class:`~webhook.kube.shapes.Node` from then on, its fields checked by :func:`parse_node`."""
    return obj.get("kind") == "Node"


def object_error(source: str, obj: str, msg: str) -> SnapshotError:
    """``<source>: <object>: <problem>`` (no ``<source>: `` when ``source`` is empty: the live
    controller's objects come from the API, not from a file)."""
    return SnapshotError(f"{source}: {obj}: {msg}" if source else f"{obj}: {msg}")


def object_name(obj: Mapping[str, Any], source: str, here: str, kind: str) -> tuple[str, str]:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(name, str) or not name:
        where = f"{source}: {here}: " if source else ""
        got = "" if name is None or name == "" else f" (metadata.name = {quote(name)} is {json_type(name)}, not a string)"
        raise SnapshotError(f"{where}{kind} has no metadata.name{got}")
    ns = meta.get("namespace")
    return name, ns if isinstance(ns, str) else ""


def string_labels(labels: Mapping[str, Any], what: str, source: str) -> dict[str, str]:
    """``metadata.labels`` as read: every key and value must be a string (Kubernetes label values
    are strings; ``null``, ``7`` or ``true`` unquoted in YAML are not). Never ``str()`` a value: a
    ``null`` would become a domain named ``None``, and a YAML alias bomb would be expanded."""
    for key, value in labels.items():
        if not isinstance(key, str):
            raise object_error(source, what, f"metadata.labels has the key {quote(key)}, which is {json_type(key)}: label keys "
                                      "are strings; fix: quote the key")
        if not isinstance(value, str):
            raise object_error(source, what, f'metadata.labels["{key}"] = {quote(value)}: a label value must be a string, '
                                      f"not {json_type(value)}; fix: quote the value (\"{key}\": \"...\") or remove the label")
    return dict(labels)


def _condition_status_problem(value: Any) -> str:
    """Why ``value`` is no ConditionStatus (k8s.io/api core/v1: the string "True", "False" or
    "Unknown") and its fix: the YAML boolean it most likely stands for, quoted."""
    if isinstance(value, bool):
        word = "True" if value else "False"
        return (f'must be the string "True", "False" or "Unknown" (a ConditionStatus), not a boolean; '
                f'fix: write status: "{word}", quoted (unquoted {str(value).lower()} is a YAML boolean)')
    if isinstance(value, str):
        return ('must be "True", "False" or "Unknown" (a ConditionStatus; letter case counts); '
                'fix: write one of them')
    return (f'must be the string "True", "False" or "Unknown" (a ConditionStatus), not {json_type(value)}; '
            'fix: write one of them, quoted')


def parse_node(obj: NodeObject, source: str = "", here: str = "") -> Node:
    """One Node object as the engine reads it. Raises :class:`SnapshotError` naming the node
    and the field (and ``source``, the file, when given: the live controller passes none)."""
    name, _ = object_name(obj, source, here, "Node")
    what = f"Node {quote(name)}"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping):
        raise object_error(source, what, f"metadata.labels must be an object, not {json_type(labels)}")
    labels = string_labels(labels, what, source)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    for part, section in (("spec", spec), ("status", status)):
        if not isinstance(section, Mapping):
            raise object_error(source, what, f"{part} must be an object, not {json_type(section)}")
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        raise object_error(source, what, f"spec.unschedulable = {quote(unschedulable)}: must be a boolean, not "
                                  f"{json_type(unschedulable)}; fix: write unschedulable: true or false, unquoted")
    alloc_raw = status.get("allocatable")
    if alloc_raw is None:
        alloc_raw = status.get("capacity")
    if not isinstance(alloc_raw, Mapping):
        got = "" if alloc_raw is None else f" (it is {json_type(alloc_raw)}, not an object)"
        raise object_error(source, what, f"status.allocatable is missing{got} (dump nodes with `kubectl get nodes -o yaml`)")
    alloc: dict[str, int] = {}
    for res, raw in alloc_raw.items():
        try:
            alloc[str(res)] = allocatable_milli(raw)
        except QuantityError as exc:
            raise object_error(source, what, f"status.allocatable[{res}]: {exc}") from None
    alloc.setdefault("pods", DEFAULT_MAX_PODS * 1000)
    ready = True
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise object_error(source, what, f"status.conditions must be an array, not {json_type(conditions)}")
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            value = cond.get("status")
            if value not in ("True", "False", "Unknown"):
                # a hand-edited dump's `status: true` (a YAML boolean) would leave the node out in silence
                raise object_error(source, what, f"status.conditions[Ready].status = {quote(value)}: "
                                          + _condition_status_problem(value))
            ready = value == "True"
    taints: list[tuple[str, str, str]] = []
    raw_taints = spec.get("taints") or []
    if not isinstance(raw_taints, list):
        raise object_error(source, what, f"spec.taints must be an array, not {json_type(raw_taints)}")
    for j, t in enumerate(raw_taints):
        if not isinstance(t, Mapping) or not isinstance(t.get("key"), str):
            raise object_error(source, what, f"spec.taints[{j}]: a taint needs a key")
        value = t.get("value")
        if value is not None and not isinstance(value, str):
            raise object_error(source, what, f"spec.taints[{j}].value = {quote(value)}: a taint value must be a string, not "
                                      f"{json_type(value)}; fix: quote it")
        if t.get("effect") in _BLOCKING_EFFECTS:
            taints.append((t["key"], value or "", t["effect"]))
    return Node(
        name=name,
        labels=labels,
        allocatable=alloc,
        free=dict(alloc),
        unschedulable=bool(unschedulable),
        ready=ready,
        taints=tuple(taints),
        source=source,
    )
