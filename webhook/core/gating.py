"""Scheduling gate at pod CREATE and the gang facts every pod carries (DESIGN.md §9).

With ``serve --gate-pods`` (``AdmissionSettings.gate_pods``):

* **Workload CREATE** writes, on every PodTemplateSpec of the gang (PyTorchJob Master + Worker,
  LWS leader + worker, native master + worker), the annotation ``segments.dev/gang-size`` (the
  number of pods of one gang: PyTorchJob Master + Worker replicas; LWS ``size``, one gang per
  group; native master + workers) and the workload's own placement (the resolved topology name
  and workload required / preferred levels) under ``segments.dev/`` keys. They are this project's
  keys, not KAI's: the workload-level ``kai.scheduler/*`` keys belong on the workload root, and a
  copy of them on a template would be read back as a misplaced user key. The controller reads a
  gang from its pods alone, so every pod must carry these facts.
* **Pod CREATE** appends ``{name: segments.dev/placement}`` to ``spec.schedulingGates`` of a pod
  that the webhook segments or that carries a gang key of this module (gates can only be added at
  CREATE, KEP-3838), when the pod's gang can be known: a gang key (:func:`webhook.core.kinds.registry.gang_key`) and a gang
  size (:func:`gang_size`). A pod whose gang cannot be known is NOT gated (nothing could ever
  release it) and gets a warning instead. Adding the gate is idempotent.

Gang key (DESIGN.md §9): ``<namespace>/<training.kubeflow.org/job-name>`` (PyTorchJob, native),
``<namespace>/<leaderworkerset.sigs.k8s.io/name>/<group-index>`` (LWS, one gang per group); a pod
annotated ``segments.dev/gang-scope: workload`` (JobSet / TrainJob, Ray with a workload level on the
root) is in its whole object's gang, ``<namespace>/<jobset-or-cluster-name>/*``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core import keys
from webhook.core.keys import HOSTNAME
from webhook.core.messages import quote
from webhook.core.patching import pointer
from webhook.core.warning_rules import text

#: The scheduling gate the webhook adds and the controller removes (DESIGN.md §9).
GATE = "segments.dev/placement"
#: Pod template / pod annotation: number of pods of the pod's gang.
GANG_SIZE = "segments.dev/gang-size"
#: Pod template / pod annotations: the workload's topology name and workload-level levels.
GANG_TOPOLOGY = "segments.dev/topology"
GANG_REQUIRED = "segments.dev/topology-required-placement"
GANG_PREFERRED = "segments.dev/topology-preferred-placement"
#: Pod template / pod annotation: the segment required level as a node label, written beside the
#: gang facts only when the template's ``kai.scheduler/segment-topology-required-placement`` names
#: it by a KAI level alias (the Workload API objects need the node label; DESIGN.md §5).
GANG_SEGMENT_REQUIRED = "segments.dev/segment-topology-required-placement"
#: Pod template / pod annotation: ``workload`` when the gang is the whole object (a JobSet or Ray
#: cluster whose root sets a workload level: KAI makes one PodGroup of it, DESIGN.md §4.5, §9)
GANG_SCOPE = "segments.dev/gang-scope"
#: The value of :data:`GANG_SCOPE` that makes the whole object one gang.
WHOLE_WORKLOAD = "workload"
#: Every annotation this module writes on templates; a pod carrying one belongs to a gang.
GANG_KEYS = (GANG_SIZE, GANG_TOPOLOGY, GANG_REQUIRED, GANG_PREFERRED, GANG_SCOPE, GANG_SEGMENT_REQUIRED)


def gang_template_annotations(size: int, topology: str | None, required: str | None,
                              preferred: str | None, *, whole_workload: bool = False,
                              segment_label: str | None = None) -> dict[str, str]:
    """The annotations written on each PodTemplateSpec of a gang at workload CREATE.

    ``size``: pods per gang (>= 1); ``topology`` / ``required`` / ``preferred``: the workload's
    resolved topology name and workload required / preferred level, or ``None``;
    ``whole_workload``: the gang is the whole object (``segments.dev/gang-scope: workload``);
    ``segment_label``: the segment required level's node label when the template names it by an
    alias (:data:`GANG_SEGMENT_REQUIRED`), else ``None``.
    Returns ``{"segments.dev/gang-size": "<size>", ...}`` with only the keys that have a value.
    """
    out = {GANG_SIZE: str(size)}
    if whole_workload:
        out[GANG_SCOPE] = WHOLE_WORKLOAD
    for key, value in ((GANG_TOPOLOGY, topology), (GANG_REQUIRED, required), (GANG_PREFERRED, preferred),
                       (GANG_SEGMENT_REQUIRED, segment_label)):
        if value is not None:
            out[key] = value
    return out


def gang_size(annotations: Mapping[str, str], fallbacks: Sequence[str] = ()) -> int | None:
    """Pods in the pod's gang: ``segments.dev/gang-size``, else the first of ``fallbacks`` (pod
    annotations a kind's controller writes; :func:`webhook.core.kinds.registry.gang_size_keys`:
    LWS's ``leaderworkerset.sigs.k8s.io/size``, one gang per LWS group); ``None`` when none is a
    plain decimal integer >= 1."""
    for key in (GANG_SIZE, *fallbacks):
        raw = annotations.get(key)
        if isinstance(raw, str) and raw.isdigit() and raw.isascii() and len(raw) <= 10 and int(raw) >= 1:
            return int(raw)
    return None


def wants_gate(labels: Mapping[str, str], annotations: Mapping[str, str], segment_labels: Mapping[str, str]) -> bool:
    """True when a pod is the webhook's to gate: it gets (or has) a segment index, or it carries a
    gang annotation of this module (written from a workload the webhook placed)."""
    return (keys.SEGMENT_INDEX in segment_labels or keys.SEGMENT_INDEX in labels
            or any(k in annotations for k in GANG_KEYS))


def gate_operations(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations that add the gate to ``pod.spec.schedulingGates`` (append; the list is
    created when absent). Empty when the gate is already there or ``spec`` is not an object."""
    spec = pod.get("spec")
    if not isinstance(spec, (dict, Mapping)):
        return []
    gates = spec.get("schedulingGates")
    if isinstance(gates, list):
        if any(isinstance(g, (dict, Mapping)) and g.get("name") == GATE for g in gates):
            return []
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]


def gate_pod(pod: Mapping[str, Any], namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str],
             segment_labels: Mapping[str, str], *, gang: str | None, size_keys: Sequence[str],
             gang_labels: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The pod CREATE hook: ``(operations, warnings)``.

    ``pod``: the admitted Pod object; ``namespace``: the request's namespace (a pod's own
    ``metadata.namespace`` may be empty at CREATE); ``labels`` / ``annotations``: its maps;
    ``segment_labels``: the labels the pod handler adds; ``gang``: the pod's gang key (``None``
    when unknown), ``size_keys``: the gang-size fallbacks and ``gang_labels``: the gang labels
    to name, all from the kind descriptions (:mod:`webhook.core.kinds.registry`). Operations
    gate the pod (:func:`gate_operations`) when :func:`wants_gate` and its gang is known; a pod
    the webhook would gate but whose gang key or size is unknown gets a warning and no gate.
    """
    if not wants_gate(labels, annotations, segment_labels):
        return [], []
    if gang is None:
        return [], [text("not-gated-no-gang-key", gang_labels=gang_labels)]
    if gang_size(annotations, size_keys) is None:
        written = annotations.get(GANG_SIZE)
        if written is not None:
            return [], [text("not-gated-bad-gang-size", value=quote(written))]
        return [], [text("not-gated-no-gang-size")]
    spec = pod.get("spec")
    node_name = spec.get("nodeName") if isinstance(spec, (dict, Mapping)) else None
    if node_name:
        # KEP-3838: a pod created with spec.nodeName may not carry scheduling gates (the API server
        # rejects it); it is bound already, so there is nothing to hand off.
        return [], [text("not-gated-node-name", node=quote(node_name))]
    return gate_operations(pod), []


def is_gated(pod: Mapping[str, Any]) -> bool:
    """True when ``pod.spec.schedulingGates`` holds the webhook's gate."""
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, (dict, Mapping)) else None
    return isinstance(gates, list) and any(isinstance(g, (dict, Mapping)) and g.get("name") == GATE for g in gates)


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
