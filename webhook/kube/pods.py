"""Reading a Pod object: the one home of the questions asked of a pod whatever reads it (the
admission handlers, the snapshot, the engine's ledger, the controller): who it is, whether it is
terminated or being deleted, which node it holds, whether it carries this webhook's scheduling gate,
its gang size, its effective requests.

Pods are plain JSON dicts (as the API server sends them), typed as
:class:`webhook.kube.shapes.Pod`; every reader tolerates malformed fields (they read as absent)
except the requests, which raise :class:`~webhook.kube.quantity.QuantityError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, TypeGuard

from webhook.kube.core import HOSTNAME
from webhook.kube.quantity import MAX_MILLI, QuantityError, exact_milli, non_negative_quantity, to_milli
from webhook.kube.segments_dev import GANG_SIZE, GATE
from webhook.kube.shapes import ObjectMeta, Pod, PodSpec

#: Pod phases whose pods hold no capacity (kube-scheduler skips them too).
TERMINAL_PHASES = ("Succeeded", "Failed")

#: A pod's ``(namespace, name)``.
PodRef = tuple[str, str]


def _section(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}


def is_pod(obj: Mapping[str, Any]) -> TypeGuard[Pod]:
    """True for an object of ``kind: Pod`` (a document of a file, an item of a list that names its
    kind): read as a :class:`~webhook.kube.shapes.Pod` from then on, its fields still checked by
    each reader."""
    return obj.get("kind") == "Pod"


def _meta(pod: Pod) -> ObjectMeta:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(pod: Pod) -> PodSpec:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def pod_ref(pod: Pod) -> PodRef:
    """``(namespace, name)`` of a pod dict (empty strings when missing)."""
    meta = _meta(pod)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def is_terminated(pod: Pod) -> bool:
    """True for a pod in phase ``Succeeded`` or ``Failed`` (it holds no capacity)."""
    status = pod.get("status")
    return isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES


def is_deleting(obj: Mapping[str, Any]) -> bool:
    """True when ``metadata.deletionTimestamp`` is set (a pod still holds its node meanwhile); any
    object (a pod, a Kueue Workload)."""
    return bool(_section(obj, "metadata").get("deletionTimestamp"))


def occupied_node(pod: Pod) -> str | None:
    """The node ``pod`` holds capacity on (module docstring): ``spec.nodeName``; else, when the
    pod is not gated by this webhook, ``spec.nodeSelector[kubernetes.io/hostname]``; ``None``
    for a terminated pod, a gated pod and a pod pinned nowhere. Never raises (malformed fields
    read as absent)."""
    if is_terminated(pod):
        return None
    spec = _spec(pod)
    node = spec.get("nodeName")
    if isinstance(node, str) and node:
        return node
    if is_gated(pod):
        return None
    selector = spec.get("nodeSelector")
    pinned = selector.get(HOSTNAME) if isinstance(selector, Mapping) else None
    return pinned if isinstance(pinned, str) and pinned else None


def is_gated(pod: Pod) -> bool:
    """True when ``pod.spec.schedulingGates`` holds the webhook's gate."""
    gates = _spec(pod).get("schedulingGates")
    return isinstance(gates, list) and any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates)


def gang_size(annotations: Mapping[str, str], fallbacks: Sequence[str] = ()) -> int | None:
    """Pods in the pod's gang: ``segments.dev/gang-size``, else the first of ``fallbacks`` (pod
    annotations a kind's controller writes; :func:`webhook.admission.kinds.registry.gang_size_keys`:
    LWS's ``leaderworkerset.sigs.k8s.io/size``, one gang per LWS group); ``None`` when none is a
    plain decimal integer >= 1."""
    for key in (GANG_SIZE, *fallbacks):
        raw = annotations.get(key)
        if isinstance(raw, str) and raw.isdigit() and raw.isascii() and len(raw) <= 10 and int(raw) >= 1:
            return int(raw)
    return None


def _requests_of(container: Mapping[str, Any], where: str) -> dict[str, Fraction]:
    """A container's effective requests (:func:`resource_requirements` of its ``resources``)."""
    if not isinstance(container, Mapping):
        raise QuantityError(f"{where}: expected a container object")
    return resource_requirements(container.get("resources") or {}, f"{where}.resources")


def resource_requirements(resources: Any, where: str) -> dict[str, Fraction]:
    """The effective requests of a ``ResourceRequirements`` object ``resources`` found at the field
    path ``where``: ``requests``, and a ``limits`` entry with no request counts as the request
    (Kubernetes defaulting). Returns exact :class:`Fraction` values per resource. Raises
    :class:`QuantityError` naming the field (``<where>.limits[nvidia.com/gpu]: "lots" is not a
    Kubernetes quantity ...``, ``<where>: expected an object``)."""
    if not isinstance(resources, Mapping):
        raise QuantityError(f"{where}: expected an object")
    out: dict[str, Fraction] = {}
    for part in ("limits", "requests"):  # requests override limits
        values = resources.get(part) or {}
        if not isinstance(values, Mapping):
            raise QuantityError(f"{where}.{part}: expected an object")
        for name, raw in values.items():
            try:
                out[str(name)] = non_negative_quantity(raw)
            except QuantityError as exc:
                raise QuantityError(f"{where}.{part}[{name}]: {exc}") from None
    return out


def pod_requests(spec: Mapping[str, Any], where: str = "spec") -> dict[str, Fraction]:
    """Effective requests of a pod (a ``PodSpec`` dict), by the Kubernetes scheduler's rule.

    Sum of ``containers`` requests (a limit without a request counts as the request); each
    regular init container needs its own request plus the sidecars started before it; restartable
    init containers (``restartPolicy: Always``, sidecars) add to the running sum; the result is the
    max of the init peak and (containers + sidecars), plus ``overhead``. Returns exact
    :class:`Fraction` values per resource (no ``pods`` entry). Raises :class:`QuantityError` with
    the field path (``spec.containers[0].resources.requests[cpu]``) on a bad quantity.
    Source: Kubernetes ``resourcehelper.PodRequests`` (k8s.io/component-helpers).
    """
    if not isinstance(spec, Mapping):
        raise QuantityError(f"{where}: expected a PodSpec object")
    total: dict[str, Fraction] = {}
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise QuantityError(f"{where}.containers: expected a list")
    for i, c in enumerate(containers):
        for k, v in _requests_of(c, f"{where}.containers[{i}]").items():
            total[k] = total.get(k, Fraction(0)) + v
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    inits = spec.get("initContainers") or []
    if not isinstance(inits, list):
        raise QuantityError(f"{where}.initContainers: expected a list")
    for i, c in enumerate(inits):
        req = _requests_of(c, f"{where}.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, Fraction(0)) + v
            need = dict(sidecars)
        else:
            need = dict(sidecars)
            for k, v in req.items():
                need[k] = need.get(k, Fraction(0)) + v
        for k, v in need.items():
            init_peak[k] = max(init_peak.get(k, Fraction(0)), v)
    for k, v in sidecars.items():
        total[k] = total.get(k, Fraction(0)) + v
    for k, v in init_peak.items():
        total[k] = max(total.get(k, Fraction(0)), v)
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        raise QuantityError(f"{where}.overhead: expected an object")
    for k, raw in overhead.items():
        try:
            total[str(k)] = total.get(str(k), Fraction(0)) + non_negative_quantity(raw)
        except QuantityError as exc:
            raise QuantityError(f"{where}.overhead[{k}]: {exc}") from None
    return total


def pod_requests_milli(spec: Mapping[str, Any], where: str = "spec") -> dict[str, int]:
    """:func:`pod_requests` in integer milli-units (rounded up), plus ``pods: 1000`` (one pod).

    Fast path for the common pod (containers only, every quantity a whole number of milli-units,
    as in a 20,000-pod cluster dump): plain integer sums, the same result as the exact rule."""
    fast = _plain_requests_milli(spec)
    if fast is not None:
        return fast
    out = {k: to_milli(v, round_up=True) for k, v in pod_requests(spec, where).items()}
    out["pods"] = 1000
    return out


def _plain_requests_milli(spec: object) -> dict[str, int] | None:
    """Integer sums of the containers' requests (a limit without a request counts), or ``None``
    when the pod needs the full rule (init containers, overhead, a fractional milli-value, or
    anything malformed, which the full rule reports)."""
    if not isinstance(spec, Mapping) or spec.get("initContainers") or spec.get("overhead"):
        return None
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        return None
    out: dict[str, int] = {}
    try:
        for c in containers:
            res = c.get("resources") if isinstance(c, Mapping) else None
            if not res:
                if isinstance(c, Mapping) and res in (None, {}):
                    continue
                return None
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
                return None
            for name, raw in (requests.items() if not limits else {**limits, **requests}.items()):
                if not isinstance(raw, str):
                    return None
                milli = exact_milli(raw)
                if milli is None or milli < 0:  # the full rule says what is wrong with a negative one
                    return None
                out[name] = out.get(name, 0) + milli
    except QuantityError:
        return None
    out = {str(k): max(-MAX_MILLI, min(MAX_MILLI, v)) for k, v in out.items()}
    out["pods"] = 1000
    return out
