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
  CREATE, KEP-3838), when the pod's gang can be known: a gang key (:func:`webhook.admission.kinds.registry.gang_key`) and a gang
  size (:func:`webhook.kube.pods.gang_size`). A pod whose gang cannot be known is NOT gated (nothing could ever
  release it) and gets a warning instead. Adding the gate is idempotent.

Gang key (DESIGN.md §9): ``<namespace>/<training.kubeflow.org/job-name>`` (PyTorchJob, native),
``<namespace>/<leaderworkerset.sigs.k8s.io/name>/<group-index>`` (LWS, one gang per group); a pod
annotated ``segments.dev/gang-scope: workload`` (JobSet / TrainJob, Ray with a workload level on the
root) is in its whole object's gang, ``<namespace>/<jobset-or-cluster-name>/*``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.admission.warning_rules import text
from webhook.kube import kai_scheduler
from webhook.kube.pods import gang_size
from webhook.kube.segments_dev import (
    GANG_KEYS,
    GANG_PREFERRED,
    GANG_REQUIRED,
    GANG_SCOPE,
    GANG_SEGMENT_REQUIRED,
    GANG_SIZE,
    GANG_TOPOLOGY,
    GATE,
    WHOLE_WORKLOAD,
)
from webhook.text.messages import quote


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


def wants_gate(labels: Mapping[str, str], annotations: Mapping[str, str], segment_labels: Mapping[str, str]) -> bool:
    """True when a pod is the webhook's to gate: it gets (or has) a segment index, or it carries a
    gang annotation of this module (written from a workload the webhook placed)."""
    return (kai_scheduler.SEGMENT_INDEX in segment_labels or kai_scheduler.SEGMENT_INDEX in labels
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
    to name, all from the kind descriptions (:mod:`webhook.admission.kinds.registry`). Operations
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
