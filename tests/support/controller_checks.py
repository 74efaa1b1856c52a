"""Independent checks of the controller's output (DESIGN.md §9), shared by the controller tests.

Nothing here calls the engine or the controller: a release is re-checked from the node labels,
the node allocatable and the pod requests alone.

* :func:`kep3838_violations`: a patch on a gated pod may only remove scheduling gates and add
  ``spec.nodeSelector`` entries (KEP-3838, "Pod scheduling readiness": "mutable fields of a
  gated pod": removing gates, adding node-selector entries / affinity terms); ours must remove
  exactly the ``segments.dev/placement`` gate and add exactly ``kubernetes.io/hostname``.
* :func:`capacity_violations`: no node holds more than its allocatable (bound pods plus unbound
  live pods pinned by ``nodeSelector[kubernetes.io/hostname]``).
* :func:`shared_label_violations`: pods that must share a domain carry one label value.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Sequence

import jsonpatch

GATE = "segments.dev/placement"
HOSTNAME = "kubernetes.io/hostname"
_SUFFIX = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9}


def quantity_milli(text) -> int:
    """Milli-units of the simple quantities the tests use: ``"2"``, ``"500m"``, ``"8Gi"``, ``4``."""
    text = str(text)
    if text.endswith("m"):
        return int(text[:-1])
    for suffix in ("Ki", "Mi", "Gi", "k", "M", "G"):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * _SUFFIX[suffix] * 1000
    return int(text) * 1000


def kep3838_violations(before: dict, patch: list) -> list[str]:
    """What in ``patch`` breaks the KEP-3838 rule for a gated pod (empty list: none)."""
    problems = []
    gates = (before.get("spec") or {}).get("schedulingGates") or []
    if not any(g.get("name") == GATE for g in gates):
        problems.append("patched pod was not gated by segments.dev/placement")
    try:
        after = jsonpatch.apply_patch(copy.deepcopy(before), patch)
    except Exception as exc:  # noqa: BLE001
        return problems + [f"patch does not apply: {exc}"]
    a_spec, b_spec = dict(after.get("spec") or {}), dict(before.get("spec") or {})
    want_gates = [g for g in gates if g.get("name") != GATE]
    if (a_spec.pop("schedulingGates", None) or []) != want_gates:
        problems.append("schedulingGates changed other than removing segments.dev/placement")
    b_sel = b_spec.pop("nodeSelector", None) or {}
    a_sel = a_spec.pop("nodeSelector", None) or {}
    b_spec.pop("schedulingGates", None)
    added = {k: v for k, v in a_sel.items() if k not in b_sel}
    if any(a_sel.get(k) != v for k, v in b_sel.items()):
        problems.append("an existing nodeSelector entry changed or vanished")
    if list(added) != [HOSTNAME] and not (HOSTNAME in b_sel and not added):
        problems.append(f"nodeSelector gained {sorted(added)}, not exactly {HOSTNAME}")
    if a_spec != b_spec:
        problems.append("spec fields other than schedulingGates/nodeSelector changed")
    if {k: v for k, v in after.items() if k != "spec"} != {k: v for k, v in before.items() if k != "spec"}:
        problems.append("fields outside spec changed")
    return problems


def pod_requests(pod: dict) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, value in merged.items():
            total[name] += quantity_milli(value)
    total["pods"] += 1000
    return dict(total)


def node_of(pod: dict) -> str | None:
    spec = pod.get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME)


def capacity_violations(nodes: list[dict], pods: list[dict]) -> list[str]:
    """Nodes whose live, placed pods request more than the node's allocatable."""
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        gated = any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])
        node = (pod.get("spec") or {}).get("nodeName") or (None if gated else node_of(pod))
        if node:
            for name, value in pod_requests(pod).items():
                used[node][name] += value
    problems = []
    for node in nodes:
        name = node["metadata"]["name"]
        alloc = {k: quantity_milli(v) for k, v in node["status"]["allocatable"].items()}
        for resource, value in used.get(name, {}).items():
            if value > alloc.get(resource, 0):
                problems.append(f"{name}: {resource} {value} > {alloc.get(resource, 0)}")
    return problems


def shared_label_violations(nodes: list[dict], node_names: Sequence[str | None], label: str, what: str) -> list[str]:
    """``[]`` when every node in ``node_names`` carries the same value of ``label``; a pod on no node
    (``None``, as :func:`node_of` answers for it) is a violation."""
    if None in node_names:
        return [f"{what} has {node_names.count(None)} pod(s) on no node"]
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    values = {labels[name].get(label) for name in node_names if name is not None}
    return [] if len(values) == 1 and None not in values else [f"{what} spans {label}={sorted(map(str, values))}"]
