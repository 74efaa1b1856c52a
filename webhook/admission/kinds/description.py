"""What a workload kind is, said once: :class:`KindDescription` and :class:`PodRules`
(docs/concepts/ARCHITECTURE.md "Contracts between the pieces").

Each kind module (``pytorchjob``, ``leaderworkerset``, ``distributedworkload``) ends with one
``DESCRIPTION``: its API group, version and kind, its admission handler (which reads its pod
templates, their annotations and its replica counts: DESIGN.md §3), the pods its controller
creates from it (names, labels, the template each is made from: what ``place`` expands, §8), and
its :class:`PodRules`: how one of its pods is recognised, indexed and labelled at pod CREATE (§7),
the gang it belongs to (§9), and how KAI's pod-grouper groups it. Admission
(:mod:`webhook.admission.kinds`), the pod handler (:mod:`webhook.admission.kinds.pod`), ``place``'s
expansion (:mod:`webhook.planning.expand`) and the controller's gang logic
(:mod:`webhook.gating.decision`) all read a kind through :mod:`webhook.admission.kinds.registry`;
no other module reads a kind's spec fields (``tests/unit/project/test_layout.py`` fences it). Adding a kind
means adding one such description (and its tests).

Nothing here raises for a pod: the pod rules return warnings (pods are created by controllers; a
denial would stall them, DESIGN.md §7). The expansion raises :class:`ShapeError` naming the field
of a manifest it cannot expand.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.admission.rules import INT32_MAX
from webhook.admission.segments import parse_plain_decimal
from webhook.admission.types import AdmissionHandler
from webhook.errors import SegmentWebhookError
from webhook.text.messages import quote


class ShapeError(SegmentWebhookError, ValueError):
    """A workload manifest that cannot be expanded into pods; the message names the field
    (``spec.pytorchReplicaSpecs.Worker: expected an object``)."""


@dataclass(frozen=True)
class ControllerPod:
    """One pod as the kind's controller would create it (DESIGN.md §8: "expanded into its pods
    exactly as the training operator / LWS controller name and label them").

    ``group``: the gang it belongs to within the workload (LWS replica group; 0 for a kind with one
    gang); ``name``: the pod's name; ``template``: the PodTemplateSpec it is made from (shared by
    the pods of that template, copied once); ``path``: that template's field path in the workload
    (for messages); ``labels`` / ``annotations``: what the controller adds to the template's.
    """

    group: int
    name: str
    template: Mapping[str, Any]
    path: str
    labels: dict[str, str]
    annotations: dict[str, str]


#: ``cap(total, where)``: raises when a workload would expand into more than ``place`` expands
PodCap = Callable[[int, str], None]


class PodRules:
    """How the pods of one family of kinds are read at pod CREATE and by the controller.

    A family is a set of pod labels a controller writes: the training operator's (PyTorchJob and the
    native kind), LWS's. Subclasses override what differs; every method reads the pod's own labels
    and annotations (string maps) and never raises.

    ``size_fallback``: a pod annotation read as the segment size when ``kai.scheduler/segment-size``
    is absent (LWS ``subgroup-size``); ``gang_size_fallback``: a pod annotation read as the gang size
    when ``segments.dev/gang-size`` is absent (LWS ``size``); ``gang_label_text``: the labels of
    the gang key, for the "not gated" warning.
    """

    name = "pods"
    size_fallback: str | None = None
    gang_size_fallback: str | None = None
    gang_label_text = ""

    def owns(self, labels: Mapping[str, str]) -> bool:
        """True when a pod with these labels is of this family (checked in registry order)."""
        raise NotImplementedError

    def unsized(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, str]:
        """Labels of a pod that names a topology but carries no segment size (an LWS leader
        excluded from segments is still named ``leader``, DESIGN.md §7). Default: none."""
        return {}

    def segment(self, labels: Mapping[str, str], annotations: Mapping[str, str], size: int) -> tuple[dict[str, str], list[str]]:
        """``(labels to write, warnings)`` for a pod that names a topology and a valid segment
        ``size`` (>= 1): its segment index and, where KAI does not write it itself, its subgroup name
        (DESIGN.md §2, §7). A missing or garbled index gives ``({}, [warning])``."""
        raise NotImplementedError

    def claims_gang(self, labels: Mapping[str, str]) -> bool:
        """True when these labels name this family's gang (checked in registry order)."""
        raise NotImplementedError

    def gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """The pod's gang (DESIGN.md §9) when :meth:`claims_gang`, or ``None`` when it cannot be known."""
        raise NotImplementedError

    def workload_gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """The gang of a pod annotated ``segments.dev/gang-scope: workload``: its whole object's
        (``<namespace>/<object>/*``; the ``*`` is no group's name, so the key never meets a
        per-group key or another family's), or ``None`` for a family without whole-object gangs
        (the default) or a pod that is in none (a Ray head)."""
        return None

    def role(self, labels: Mapping[str, str]) -> str | None:
        """The role explanations name the pod by (``master``, ``worker``, ``leader``), or ``None``
        when these labels say none."""
        return None

    def replica(self, labels: Mapping[str, str]) -> str | None:
        """The unit a pod is created and deleted with, which a segment must keep whole (a KubeRay
        multi-host replica), or ``None`` when the pod is its own unit."""
        return None

    def segment_group(self, labels: Mapping[str, str]) -> int:
        """The gang within the workload whose segments the pod's index counts in (LWS group; 0)."""
        return 0


@dataclass(frozen=True)
class KindDescription:
    """One workload kind, said once.

    ``group`` / ``version`` / ``kind``: the API the webhook is registered for.
    ``review(request, catalog, settings, *, mutate) -> Decision``: the admission handler (CREATE /
    UPDATE; reads the pod templates, where their annotations are, the replica counts).
    ``expected_pods(obj) -> (count, fields) | None``: the pods a manifest as written asks for,
    read leniently (malformed counts count 0; ``None`` when it has no readable spec), for
    ``place``'s cap before the webhook sees it.
    ``controller_pods(obj, cap) -> list[ControllerPod]``: the pods its controller creates from the
    (admitted) object, in creation order; ``cap`` is called before a template is copied. Raises
    :class:`ShapeError` naming the field.
    ``pods``: the :class:`PodRules` of its pods. ``per_group``: the workload has one gang per group
    (LWS), which ``place`` names and numbers.
    ``kai``: how KAI's pod-grouper groups it (for docs and messages). ``resource``: its plural
    resource name, as ``deploy/`` registers the webhook for it. ``one_podgroup``: KAI makes one
    PodGroup of every group of the object (JobSet, Ray; not LWS, whose PodGroup is one group), so
    a root workload level holds across the groups (DESIGN.md §4.5).
    """

    group: str
    version: str
    kind: str
    resource: str
    review: AdmissionHandler
    expected_pods: Callable[[Mapping[str, Any]], tuple[int, str] | None]
    controller_pods: Callable[[Mapping[str, Any], PodCap], list[ControllerPod]]
    pods: PodRules
    per_group: bool = False
    kai: str = ""
    one_podgroup: bool = False


# ----------------------------------------------------------------------------- shared readers
def pod_int(raw: object) -> int | None:
    """A pod label/annotation as a plain decimal int32 (0..2**31-1), else ``None``. The bound
    keeps every label the pod handler writes short (Kubernetes label values: at most 63 characters)."""
    value = parse_plain_decimal(raw)
    return value if value is not None and value <= INT32_MAX else None


def shown(raw: object) -> str:
    """``="value"`` for a message, or nothing when the label/annotation is absent."""
    return "" if raw is None else f"={quote(raw)}"


def lenient_count(value: Any, default: int = 1) -> int:
    """A replica count as written, for :attr:`KindDescription.expected_pods`: ``default`` when
    absent, the value when a positive integer, else 0 (the full expansion names a bad field)."""
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def replica_spec_count(obj: Mapping[str, Any], field: str,
                       defaults: tuple[tuple[str, int], ...]) -> tuple[int, str] | None:
    """The pods a map of replica specs asks for as written (``spec.<field>.<type>.replicas``, each
    ``type`` of ``defaults`` with its default count), for :attr:`KindDescription.expected_pods`:
    ``(total, "spec.<field>.A.replicas + ...")``, or ``None`` when ``spec.<field>`` is not a map.
    Shared by PyTorchJob (``pytorchReplicaSpecs``) and MPIJob (``mpiReplicaSpecs``)."""
    spec = obj.get("spec")
    specs = spec.get(field) if isinstance(spec, Mapping) else None
    if not isinstance(specs, Mapping):
        return None
    fields, total = [], 0
    for replica_type, default in defaults:
        replica_spec = specs.get(replica_type)
        if isinstance(replica_spec, Mapping):
            fields.append(f"spec.{field}.{replica_type}.replicas")
            total += lenient_count(replica_spec.get("replicas"), default)
    return total, " + ".join(fields)


def replicas(value: Any, where: str, default: int = 1) -> int:
    """A replica count for the expansion: ``default`` when absent, else a non-negative integer;
    raises :class:`ShapeError` naming ``where`` otherwise."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ShapeError(f"{where}: {quote(value)} is not a non-negative integer")
    return value


def pod_template(spec_part: Any, where: str) -> dict[str, Any]:
    """A copy of the PodTemplateSpec ``spec_part`` found at field ``where``; raises
    :class:`ShapeError` when it is not an object, its metadata is not an object or it has no spec."""
    if not isinstance(spec_part, Mapping):
        raise ShapeError(f"{where}: expected a PodTemplateSpec object")
    tmpl = copy.deepcopy(dict(spec_part))
    meta = tmpl.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ShapeError(f"{where}.metadata: expected an object")
    if not isinstance(tmpl.get("spec"), Mapping):
        raise ShapeError(f"{where}.spec: the pod template has no spec")
    return tmpl


def name_and_namespace(obj: Mapping[str, Any]) -> tuple[str, str]:
    """``(metadata.name, metadata.namespace or "default")`` of an object ``place`` expands."""
    meta = obj["metadata"]
    return meta["name"], meta.get("namespace", "default")
