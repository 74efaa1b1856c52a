"""The controller's release of a gated pod (DESIGN.md §9, KEP-3838): the one patch that removes the
``segments.dev/placement`` gate and pins the pod to its node. The gate is written at pod CREATE by
:mod:`webhook.admission.gate`; whether a pod carries it is :func:`webhook.kube.pods.is_gated`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission.patching import pointer
from webhook.kube.core import HOSTNAME
from webhook.kube.segments_dev import GATE


def release_patch(pod: Mapping[str, Any], node: str) -> list[dict[str, Any]]:
    """The ONE patch that releases a gated pod to ``node`` (DESIGN.md §9, KEP-3838).

    A ``test`` of the gate's position (so a gate list that changed meanwhile fails the patch
    instead of removing another gate), the ``remove`` of the gate, and the ``add`` of
    ``spec.nodeSelector[kubernetes.io/hostname] = node`` (the whole map when absent). KEP-3838
    allows exactly these changes on a gated pod: removing gates and adding node-selector entries
    (never changing or removing one). Raises ``ValueError`` when the pod is not gated, or
    already selects another host (that entry cannot change while gated).
    """
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, (dict, Mapping)) else None
    position = next((i for i, g in enumerate(gates or []) if isinstance(g, (dict, Mapping)) and g.get("name") == GATE), None)
    if position is None or not isinstance(spec, (dict, Mapping)):
        raise ValueError(f"pod has no {GATE} scheduling gate")
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"/spec/schedulingGates/{position}/name", "value": GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{position}"},
    ]
    selector = spec.get("nodeSelector")
    if isinstance(selector, (dict, Mapping)):
        current = selector.get(HOSTNAME)
        if current is not None and current != node:
            raise ValueError(f"pod already selects {HOSTNAME}={current}, not {node}")
        if current is None:
            ops.append({"op": "add", "path": pointer(("spec", "nodeSelector", HOSTNAME)), "value": node})
    else:
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME: node}})
    return ops
