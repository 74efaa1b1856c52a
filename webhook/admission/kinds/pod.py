"""Pod CREATE: stamp the segment index and subgroup name on the pod (DESIGN.md §7).

Inputs come from the pod alone (its labels and annotations, copied from the PodTemplateSpec the
workload handler patched, plus the labels the training-operator / LWS controller set):

* only pods that carry ``kai.scheduler/topology`` are the webhook's (DESIGN.md §5: "Opt-in", and
  "Segments without a topology", which KAI ignores); others get an empty patch (a warning when
  they carry a segment size);
* segment size S: annotation ``kai.scheduler/segment-size``, else LWS's
  ``leaderworkerset.sigs.k8s.io/subgroup-size``; a pod with neither gets an empty patch;
* LWS pods (label ``leaderworkerset.sigs.k8s.io/worker-index`` or ``.../name`` present): worker
  index w from ``worker-index`` (0 = leader), group size R from annotation
  ``leaderworkerset.sigs.k8s.io/size``, policy from ``kai.scheduler/segment-leader-policy``, else
  ``leaderworkerset.sigs.k8s.io/subgroup-policy-type``, else ``LeaderWorker``;
* other pods (PyTorchJob and native): ``training.kubeflow.org/replica-type`` (``worker`` /
  ``master``, case-insensitive) and ``training.kubeflow.org/replica-index``.

Written labels: ``kai.scheduler/segment-index`` and ``kai.scheduler/subgroup-name``, the leaf
subgroup KAI's pod-grouper assigns (DESIGN.md §2): ``master`` / ``worker-<k>``; LWS ``leader``,
``workers`` (the other pods of segment 0 under LeaderWorker) or ``segment-<k>``.
:func:`build_pod_patch` builds the patch (one place to hook further pod changes into). A pod whose inputs are missing or garbled
gets no segment label and a warning, never a denial (pods are created by controllers; a denial
would stall them). Master pods of a segmented workload inherit ``kai.scheduler/subgroup-name:
master`` from their PodTemplateSpec, which the workload handler labels (``_workload.Plan.master``);
a Master pod that carries a segment size itself is labelled here too.
Under target ``workload-api`` (a webhook serving it, and a pod annotated ``segments.dev/target:
workload-api``) the pod also gets ``spec.schedulingGroup.podGroupName``, its segment's PodGroup
(:func:`webhook.admission.workload_api.group_pod`, DESIGN.md §9b), and never a scheduling gate.
UPDATE, DELETE and CONNECT: allowed, empty patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission import gate, workload_api
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.description import pod_int
from webhook.admission.kinds.registry import (
    SIZE_FALLBACKS,
    gang_key,
    gang_labels_text,
    gang_size_keys,
    pod_rules,
    whole_gang_group,
)
from webhook.admission.patching import PatchBuilder
from webhook.admission.reading import check_object_meta, read_string_map
from webhook.admission.rules import malformed
from webhook.admission.targets import GATE, WORKLOAD_API, default_target
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import text as warning_text
from webhook.kube import kai_scheduler, ray_io
from webhook.kube.segments_dev import TARGET_KEY
from webhook.text.messages import UNSET, quote
from webhook.topology.objects import TopologyCatalog

KIND = "Pod"
GROUP = ""


def segment_labels(labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The segment labels one pod should carry, and warnings (DESIGN.md §7).

    ``labels`` / ``annotations``: the pod's maps (string values). Returns
    ``({"kai.scheduler/segment-index": "<k>", "kai.scheduler/subgroup-name": "<name>"}, [])``
    for a segmented pod, ``({"kai.scheduler/subgroup-name": "master" | "leader"}, [])`` for a
    Master pod or an excluded LWS leader, ``({}, [])`` for a pod without a segment size, and
    ``({}, [warning])`` when an input is missing or garbled. Never raises. What is read per kind
    (index labels, group size, leader policy) is the pod family's
    (:func:`webhook.admission.kinds.registry.pod_rules`).
    """
    size_key = next((k for k in _SIZE_KEYS if k in annotations), _SIZE_KEYS[-1])
    raw_size = annotations.get(size_key)
    if kai_scheduler.TOPOLOGY not in annotations:
        # Not the webhook's (DESIGN.md §5 "Opt-in"), or segments without a topology, which KAI
        # ignores ("Segments without a topology"): no segment label.
        if kai_scheduler.SEGMENT_SIZE in annotations:
            return {}, [warning_text("pod-size-without-topology")]
        return {}, []
    rules = pod_rules(labels)
    if raw_size is None:
        return rules.unsized(labels, annotations), []
    size = pod_int(raw_size)
    if size is None or size < 1:
        return {}, [warning_text("pod-size-not-int", key=size_key, value=quote(raw_size))]
    return rules.segment(labels, annotations, size)


#: Annotations read as the segment size: the webhook's key, then the families' own (LWS subgroup-size).
_SIZE_KEYS = (kai_scheduler.SEGMENT_SIZE,) + SIZE_FALLBACKS


def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Admit a Pod AdmissionReview ``request``: CREATE gets the labels of
    :func:`segment_labels` as a JSONPatch (``metadata.labels`` added whole when missing);
    every other operation is allowed with an empty patch. A pod whose ``metadata``,
    ``labels`` or ``annotations`` are not maps of strings is denied with 400 naming the field."""
    decision = Decision(kind=KIND)
    if request.get("operation") != "CREATE" or request.get("subResource"):
        return decision
    pod = request.get("object")
    if not isinstance(pod, (dict, Mapping)):
        malformed(decision, "request.object", pod if pod is not None else UNSET, "a Pod object")
        return decision
    labels = read_string_map(pod, "", "labels", decision)
    annotations = read_string_map(pod, "", "annotations", decision)
    meta_ok = check_object_meta(pod, decision)
    if labels is None or annotations is None or not meta_ok:
        return decision
    wanted, warnings = segment_labels(labels, annotations)
    gate_ops: list[dict[str, Any]] = []
    if settings.gate_pods and annotations.get(TARGET_KEY, GATE) == GATE:  # DESIGN.md §9; §9b: another target's pod is not ours to gate
        namespace = request.get("namespace") or pod.get("metadata", {}).get("namespace") or ""
        gate_ops, gate_warnings = gate.gate_pod(pod, str(namespace), labels, annotations, wanted,
                                                  gang=gang_key(str(namespace), labels, annotations),
                                                  size_keys=gang_size_keys(), gang_labels=gang_labels_text(labels))
        warnings = warnings + gate_warnings
    group_ops: list[dict[str, Any]] = []
    if annotations.get(TARGET_KEY) == WORKLOAD_API and default_target(settings) == WORKLOAD_API:  # §9b
        namespace = request.get("namespace") or pod.get("metadata", {}).get("namespace") or ""
        group_ops, group_warnings = workload_api.group_pod(
            pod, gang_key(str(namespace), labels, annotations),
            wanted.get(kai_scheduler.SEGMENT_INDEX, labels.get(kai_scheduler.SEGMENT_INDEX)), gang_labels_text(labels),
            whole_gang_group(labels, annotations))
        warnings = warnings + group_warnings
    env_ops = env_operations(pod, annotations) if settings.segment_env and _segment_member(wanted, warnings) else []
    for text in warnings:
        decision.warn(text)
    if (wanted or gate_ops or group_ops or env_ops) and mutate:
        decision.patch = build_pod_patch(pod, wanted) + gate_ops + group_ops + env_ops
    return decision


#: The environment variables of ``--segment-env`` (DESIGN.md §3b "Segment facts in the pod").
ENV_INDEX, ENV_SIZE = "KAI_SEGMENT_INDEX", "KAI_SEGMENT_SIZE"


def _segment_member(wanted: Mapping[str, str], warnings: list[str]) -> bool:
    """True when the pod is a member of a segment: it gets its segment index now, or it is a pod
    without index labels whose segment the controller forms and labels at release (§3b)."""
    return kai_scheduler.SEGMENT_INDEX in wanted or any(w == warning_text("pod-without-index", label=k) for w in warnings
                                                 for k in _INDEX_LABELS)


#: index labels whose absence the pod rules report with the ``pod-without-index`` warning
_INDEX_LABELS = (ray_io.RAY_REPLICA_INDEX,)


def env_operations(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """RFC 6902 operations giving every container of ``pod`` (``spec.containers``; init containers
    run before the pod is placed and get none) ``KAI_SEGMENT_INDEX`` (downward API ``fieldRef`` on
    ``metadata.labels['kai.scheduler/segment-index']``, so a label written at release works too)
    and ``KAI_SEGMENT_SIZE`` (the pod's ``kai.scheduler/segment-size``, as written). A name a
    container sets already is never changed; a container that is not an object, or whose ``env`` is
    not a list, is left alone (kube-apiserver rejects it)."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, (dict, Mapping)) else None
    if not isinstance(containers, list):
        return []
    wanted = [(ENV_INDEX, {"name": ENV_INDEX, "valueFrom": {"fieldRef": {
                  "fieldPath": f"metadata.labels['{kai_scheduler.SEGMENT_INDEX}']"}}}),
              (ENV_SIZE, {"name": ENV_SIZE, "value": str(annotations.get(kai_scheduler.SEGMENT_SIZE, ""))})]
    ops: list[dict[str, Any]] = []
    for i, container in enumerate(containers):
        if not isinstance(container, (dict, Mapping)):
            continue
        env = container.get("env")
        if env is None:
            ops.append({"op": "add", "path": f"/spec/containers/{i}/env", "value": [var for _, var in wanted]})
            continue
        if not isinstance(env, list):
            continue
        names = {e.get("name") for e in env if isinstance(e, (dict, Mapping))}
        ops += [{"op": "add", "path": f"/spec/containers/{i}/env/-", "value": var} for name, var in wanted
                if name not in names]
    return ops


def build_pod_patch(pod: Mapping[str, Any], labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The RFC 6902 patch of one admitted pod: the segment ``labels`` (``metadata.labels`` added
    whole when missing). One place to hook further pod changes into."""
    builder = PatchBuilder(pod)
    builder.set_entries((), "labels", labels)
    return builder.build()
