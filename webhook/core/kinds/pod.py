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
UPDATE, DELETE and CONNECT: allowed, empty patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core import gating, keys
from webhook.core.messages import UNSET, quote
from webhook.core.reading import INT32_MAX, check_object_meta, read_string_map
from webhook.core.rules import malformed
from webhook.core.decision import AdmissionSettings, Decision
from webhook.core.patching import PatchBuilder
from webhook.core.segments import (
    lws_segment,
    lws_subgroup_name,
    parse_plain_decimal,
    training_segment,
    training_subgroup_name,
)
from webhook.core.topology import TopologyCatalog

KIND = "Pod"
GROUP = ""


def _pod_int(raw: object) -> int | None:
    """A pod label/annotation as a plain decimal int32 (0..2**31-1), else ``None``. The bound
    keeps every label this handler writes short (Kubernetes label values: at most 63 characters)."""
    value = parse_plain_decimal(raw)
    return value if value is not None and value <= INT32_MAX else None


def _shown(raw: object) -> str:
    """``="value"`` for a message, or nothing when the label/annotation is absent."""
    return "" if raw is None else f"={quote(raw)}"


def segment_labels(labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The segment labels one pod should carry, and warnings (DESIGN.md §7).

    ``labels`` / ``annotations``: the pod's maps (string values). Returns
    ``({"kai.scheduler/segment-index": "<k>", "kai.scheduler/subgroup-name": "<name>"}, [])``
    for a segmented pod, ``({"kai.scheduler/subgroup-name": "master" | "leader"}, [])`` for a
    Master pod or an excluded LWS leader, ``({}, [])`` for a pod without a segment size, and
    ``({}, [warning])`` when an input is missing or garbled. Never raises.
    """
    size_key = keys.SEGMENT_SIZE if keys.SEGMENT_SIZE in annotations else keys.LWS_SUBGROUP_SIZE
    raw_size = annotations.get(size_key)
    is_lws = keys.LWS_WORKER_INDEX in labels or keys.LWS_NAME in labels
    policy = annotations.get(keys.SEGMENT_LEADER_POLICY) or annotations.get(keys.LWS_SUBGROUP_POLICY_TYPE) or keys.POLICY_LEADER_WORKER
    if keys.TOPOLOGY not in annotations:
        # Not the webhook's (DESIGN.md §5 "Opt-in"), or segments without a topology, which KAI
        # ignores ("Segments without a topology"): no segment label.
        if keys.SEGMENT_SIZE in annotations:
            return {}, [f"pod has {keys.SEGMENT_SIZE} but no {keys.TOPOLOGY}; no segment label"]
        return {}, []
    if raw_size is None:
        # An excluded LWS leader carries no segment size (its template gets no segment keys,
        # DESIGN.md §2) but is still named `leader` (§7).
        if is_lws and policy == keys.POLICY_LEADER_EXCLUDED and labels.get(keys.LWS_WORKER_INDEX) == "0":
            return {keys.SUBGROUP_NAME: lws_subgroup_name(None, leader=True, policy=policy)}, []
        return {}, []
    size = _pod_int(raw_size)
    if size is None or size < 1:
        return {}, [f"pod {size_key}={quote(raw_size)} is not an int32 >= 1; no segment label"]

    if is_lws:
        if policy not in keys.LEADER_POLICIES:
            return {}, [f"pod leader policy {quote(policy)} unknown; no segment label"]
        raw_w = labels.get(keys.LWS_WORKER_INDEX)
        worker = _pod_int(raw_w)
        if worker is None:
            return {}, [f"pod label {keys.LWS_WORKER_INDEX}{_shown(raw_w)} missing or not an int32; no segment label"]
        if worker == 0:
            segment = None if policy == keys.POLICY_LEADER_EXCLUDED else 0
        else:
            raw_r = annotations.get(keys.LWS_SIZE)
            group = _pod_int(raw_r)
            if group is None or group < 1:
                return {}, [f"pod annotation {keys.LWS_SIZE}{_shown(raw_r)} missing or not an int32; no segment label"]
            if worker >= group:
                return {}, [f"pod worker-index {worker} is outside a group of {group} pods; no segment label"]
            segment = lws_segment(worker, group, size, policy)
        name = lws_subgroup_name(segment, leader=worker == 0, policy=policy)
        if segment is None:
            return {keys.SUBGROUP_NAME: name}, []
        return {keys.SEGMENT_INDEX: str(segment), keys.SUBGROUP_NAME: name}, []

    rtype = labels.get(keys.KF_REPLICA_TYPE)
    role = rtype.lower() if isinstance(rtype, str) else None
    if role == "master":
        return {keys.SUBGROUP_NAME: training_subgroup_name(None)}, []
    if role != "worker":
        return {}, [f"pod label {keys.KF_REPLICA_TYPE}{_shown(rtype)} is missing or not worker/master; no segment label"]
    raw_i = labels.get(keys.KF_REPLICA_INDEX)
    index = _pod_int(raw_i)
    if index is None:
        return {}, [f"pod label {keys.KF_REPLICA_INDEX}{_shown(raw_i)} missing or not an int32; no segment label"]
    segment = training_segment(index, size)
    return {keys.SEGMENT_INDEX: str(segment), keys.SUBGROUP_NAME: training_subgroup_name(segment)}, []


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
    gate_ops: list[dict] = []
    if settings.gate_pods:  # DESIGN.md §9
        namespace = request.get("namespace") or pod.get("metadata", {}).get("namespace") or ""
        gate_ops, gate_warnings = gating.gate_pod(pod, str(namespace), labels, annotations, wanted)
        warnings = warnings + gate_warnings
    for text in warnings:
        decision.warn(text)
    if (wanted or gate_ops) and mutate:
        decision.patch = build_pod_patch(pod, wanted) + gate_ops
    return decision


def build_pod_patch(pod: Mapping[str, Any], labels: Mapping[str, str]) -> list[dict]:
    """The RFC 6902 patch of one admitted pod: the segment ``labels`` (``metadata.labels`` added
    whole when missing). One place to hook further pod changes into."""
    builder = PatchBuilder(pod)
    builder.set_entries((), "labels", labels)
    return builder.build()
