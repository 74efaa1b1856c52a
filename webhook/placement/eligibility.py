"""Node eligibility per pod (DESIGN.md §8): which nodes a pod may go to, and why not.

The rules are the kube-scheduler filters a gated pod meets (source: Kubernetes
``component-helpers/scheduling/corev1`` — ``nodeaffinity.NodeSelector``, ``ToleratesTaint``):

* cordoned (``spec.unschedulable``) and NotReady nodes are never eligible;
* every ``NoSchedule`` / ``NoExecute`` taint must be tolerated (an empty key with ``Exists``
  tolerates everything, an empty effect matches every effect, the operator defaults to ``Equal``);
* ``nodeSelector``: every pair must equal the node's label;
* required node affinity (``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``):
  the terms are ORed, the requirements of one term ANDed; a term without requirements matches no
  node; ``In`` / ``NotIn`` / ``Exists`` / ``DoesNotExist`` / ``Gt`` / ``Lt`` on labels (``Gt``/``Lt``
  compare integers; a label that is not an integer does not match), and ``matchFields`` on
  ``metadata.name`` (``In`` / ``NotIn``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from webhook.placement.model import PlacementError, PodRequest
from webhook.text.messages import json_type, quote

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
#: ``None`` as a 0-d object array: compared element by element with a label column (absent labels are ``None``)
_NONE = np.array(None, dtype=object)


def freeze(value: Any) -> Any:
    """Hashable, order-independent copy of parsed YAML/JSON (mappings become sorted pairs)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def tolerates(tolerations: Sequence[Any], taint: tuple[str, str, str]) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint`` for frozen tolerations and a ``(key, value, effect)`` taint."""
    key, value, effect = taint
    for frozen in tolerations:
        t = dict(frozen)
        if t.get("effect") and t.get("effect") != effect:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") != key:
            continue
        if op == "Exists" or str(t.get("value") or "") == value:
            return True
    return False


def _requirements(raw: Any, where: str, fields: bool) -> tuple[Any, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PlacementError(f"{where}: expected an array of requirements, not {json_type(raw)}")
    out = []
    allowed = FIELD_OPERATORS if fields else LABEL_OPERATORS
    for i, req in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(req, Mapping) or not isinstance(req.get("key"), str):
            raise PlacementError(f"{here}: a requirement needs a key")
        op = req.get("operator")
        if op not in allowed:
            raise PlacementError(f"{here}.operator: {quote(op)} is not one of {', '.join(allowed)} "
                                 f"(Kubernetes NodeSelectorRequirement); fix: use one of them")
        values = req.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            bad = values if not isinstance(values, list) else next(v for v in values if not isinstance(v, str))
            raise PlacementError(f"{here}.values: expected an array of strings, found {quote(bad)} ({json_type(bad)}); "
                                 "fix: quote the values")
        values = tuple(values)
        if op in ("Exists", "DoesNotExist") and values:
            raise PlacementError(f"{here}.values: must be empty for operator {op}")
        if op in ("In", "NotIn") and not values:
            raise PlacementError(f"{here}.values: operator {op} needs at least one value")
        if op in ("Gt", "Lt"):
            if len(values) != 1:
                raise PlacementError(f"{here}.values: operator {op} needs exactly one integer value")
            try:
                int(values[0])
            except ValueError:
                raise PlacementError(f"{here}.values: {quote(values[0])} is not an integer (operator {op})") from None
        if fields and req["key"] != "metadata.name":
            raise PlacementError(f"{here}.key: {quote(req['key'])}: matchFields supports only metadata.name")
        out.append((req["key"], op, values))
    return tuple(out)


def required_node_affinity(spec: Mapping[str, Any], where: str = "spec") -> tuple[Any, ...] | None:
    """The pod's required node affinity as frozen terms (see :class:`PodRequest`), ``None`` when
    it has none. Raises :class:`PlacementError` naming the field for a malformed term."""
    aff = spec.get("affinity")
    if not isinstance(aff, Mapping):
        return None
    na = aff.get("nodeAffinity")
    if not isinstance(na, Mapping):
        return None
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is None:
        return None
    base = f"{where}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if not isinstance(req, Mapping) or not isinstance(req.get("nodeSelectorTerms"), list):
        raise PlacementError(f"{base}.nodeSelectorTerms: expected an array of terms")
    terms = []
    for i, term in enumerate(req["nodeSelectorTerms"]):
        here = f"{base}.nodeSelectorTerms[{i}]"
        if not isinstance(term, Mapping):
            raise PlacementError(f"{here}: expected an object")
        terms.append((_requirements(term.get("matchExpressions"), f"{here}.matchExpressions", False),
                      _requirements(term.get("matchFields"), f"{here}.matchFields", True)))
    return tuple(terms)


def pinned_to_node(affinity: tuple[Any, ...] | None, node_name: str) -> tuple[Any, ...]:
    """``affinity`` (frozen terms, or ``None``) ANDed with "this node only": a pod whose
    ``spec.nodeName`` is set bypasses kube-scheduler and runs on that node or not at all, so the
    engine may only count it there (as the requirement ``matchFields metadata.name In
    [node_name]`` in every term)."""
    pin = ("metadata.name", "In", (node_name,))
    if affinity is None:
        return (((), (pin,)),)
    # an empty term matches no node (Kubernetes), and stays empty
    return tuple((exprs, tuple(fields) + (pin,)) if (exprs or fields) else (exprs, fields) for exprs, fields in affinity)


def pod_request(pod: Mapping[str, Any], requests: Mapping[str, int], segment: tuple[int, int] | None = None,
                role: str = "", spec_path: str = "spec") -> PodRequest:
    """A :class:`PodRequest` from a Pod manifest (``metadata``, ``spec``) and its requests in
    milli-units. Raises :class:`PlacementError` naming the pod and the field for malformed
    tolerations, ``nodeSelector`` or node affinity; ``spec_path`` is where the pod's spec was
    written (``spec.pytorchReplicaSpecs.Worker.template.spec`` for a pod of a workload's
    template, so the message points at the line to fix)."""
    meta = pod.get("metadata") or {}
    name = f"Pod {meta.get('name')}"
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        got = json_type(tolerations) if not isinstance(tolerations, list) else \
            f"an array holding {json_type(next(t for t in tolerations if not isinstance(t, Mapping)))}"
        raise PlacementError(f"{name}: {spec_path}.tolerations must be an array of objects, not {got}")
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise PlacementError(f"{name}: {spec_path}.nodeSelector must be an object, not {json_type(selector)}")
    for k, v in selector.items():
        if not isinstance(k, str) or not isinstance(v, str):
            bad = k if not isinstance(k, str) else v
            raise PlacementError(f"{name}: {spec_path}.nodeSelector[{quote(k)}] = {quote(v)}: keys and values must be "
                                 f"strings, not {json_type(bad)}; fix: quote them")
    try:
        affinity = required_node_affinity(spec, spec_path)
    except PlacementError as exc:
        raise PlacementError(f"{name}: {exc}") from None
    node_name = spec.get("nodeName")
    if node_name is not None and node_name != "":
        if not isinstance(node_name, str):
            raise PlacementError(f"{name}: {spec_path}.nodeName = {quote(node_name)}: must be a node name (a string)")
        affinity = pinned_to_node(affinity, node_name)
    return PodRequest(key=f"{meta.get('namespace', 'default')}/{meta.get('name')}", requests=dict(requests),
                      segment=segment, tolerations=freeze(tolerations),
                      node_selector=tuple(sorted(selector.items())),
                      node_affinity=affinity, role=role)


class EligibilityIndex:
    """Label columns of the index's nodes, to evaluate selectors for every node at once.

    ``labels``: one dict per node (index order); ``names``: node names; ``base_ok``: Ready and
    schedulable; ``taint_sig`` / ``taint_sigs``: each node's taint set as an id into the list of
    distinct taint sets.
    """

    def __init__(self, labels: Sequence[Mapping[str, str]], names: Sequence[str], base_ok: np.ndarray,
                 taint_sig: np.ndarray, taint_sigs: list[tuple[Any, ...]]):
        self.labels = labels
        self.names = np.array(names, dtype=object)
        self.base_ok = base_ok
        self.taint_sig = taint_sig
        self.taint_sigs = taint_sigs
        self._columns: dict[str, np.ndarray] = {}
        self._cache: dict[tuple[Any, ...], np.ndarray] = {}

    def column(self, key: str) -> np.ndarray:
        """Label ``key`` of every node (``None`` where absent), as an object array."""
        col = self._columns.get(key)
        if col is None:
            col = np.array([lab.get(key) for lab in self.labels] + [None], dtype=object)[:-1]
            self._columns[key] = col
        return col

    def _expression(self, key: str, op: str, values: tuple[Any, ...], fields: bool) -> np.ndarray:
        col = self.names if fields else self.column(key)
        present: np.ndarray = np.not_equal(col, _NONE)
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return ~present
        if op in ("In", "NotIn"):
            hit: np.ndarray = np.isin(col, np.array(values, dtype=object)) & present
            return hit if op == "In" else ~hit
        bound = int(values[0])
        out = np.zeros(len(col), dtype=bool)
        for i in np.flatnonzero(present):
            try:
                v = int(col[i])
            except ValueError:
                continue
            out[i] = v > bound if op == "Gt" else v < bound
        return out

    def affinity_mask(self, terms: tuple[Any, ...]) -> np.ndarray:
        """Nodes matching a frozen NodeSelectorTerms list (terms ORed, requirements ANDed)."""
        n = len(self.labels)
        out = np.zeros(n, dtype=bool)
        for exprs, fields in terms:
            if not exprs and not fields:
                continue  # an empty term matches no node
            m = np.ones(n, dtype=bool)
            for key, op, values in exprs:
                m &= self._expression(key, op, values, False)
            for key, op, values in fields:
                m &= self._expression(key, op, values, True)
            out |= m
        return out

    def selector_mask(self, selector: tuple[Any, ...]) -> np.ndarray:
        m = np.ones(len(self.labels), dtype=bool)
        for key, value in selector:
            m &= np.equal(self.column(key), value)
        return m

    def taint_mask(self, tolerations: tuple[Any, ...]) -> np.ndarray:
        ok = np.array([all(tolerates(tolerations, t) for t in sig) for sig in self.taint_sigs] or [True], dtype=bool)
        return ok[self.taint_sig] if len(self.taint_sig) else np.zeros(0, dtype=bool)

    def mask(self, pod: PodRequest) -> np.ndarray:
        """Boolean array over nodes: where ``pod`` may go (before capacity)."""
        key = (pod.tolerations, pod.node_selector, pod.node_affinity)
        m = self._cache.get(key)
        if m is None:
            m = self.base_ok & self.taint_mask(pod.tolerations) & self.selector_mask(pod.node_selector)
            if pod.node_affinity is not None:
                m &= self.affinity_mask(pod.node_affinity)
            self._cache[key] = m
        return m

    def why_excluded(self, pod: PodRequest) -> str:
        """For a pod no node admits: which of its constraints excluded the nodes, e.g.
        ``nodeSelector pool=cpu matches no node``; each constraint is named with the number of
        nodes it leaves on its own."""
        n = len(self.labels)
        parts = []
        ready = int(self.base_ok.sum())
        if ready == 0:
            return f"all {n} node(s) are cordoned or NotReady"
        if pod.node_selector:
            sel = self.selector_mask(pod.node_selector) & self.base_ok
            text = ",".join(f"{k}={v}" for k, v in pod.node_selector)
            parts.append(f"nodeSelector {text} matches {int(sel.sum())} of {ready} ready node(s)")
        if pod.node_affinity is not None:
            aff = self.affinity_mask(pod.node_affinity) & self.base_ok
            parts.append(f"required node affinity ({describe_affinity(pod.node_affinity)}) matches "
                         f"{int(aff.sum())} of {ready} ready node(s)")
        taints = self.taint_mask(pod.tolerations) & self.base_ok
        if int(taints.sum()) < ready:
            blocked = sorted({f"{k}={v}:{e}" if v else f"{k}:{e}" for sig, ok in zip(self.taint_sigs, [
                all(tolerates(pod.tolerations, t) for t in s) for s in self.taint_sigs]) if not ok for k, v, e in sig
                if not tolerates(pod.tolerations, (k, v, e))})
            parts.append(f"untolerated taint(s) {', '.join(blocked[:3])} leave {int(taints.sum())} of {ready} ready node(s)")
        if n > ready:
            parts.append(f"{n - ready} node(s) cordoned or NotReady")
        return "; ".join(parts) if parts else "no node is eligible"


def describe_affinity(terms: tuple[Any, ...]) -> str:
    """Short text of frozen NodeSelectorTerms: ``gpu-type In [a100] or metadata.name NotIn [n1]``."""
    out = []
    for exprs, fields in terms:
        reqs = [f"{k} {op}" + (f" [{', '.join(v)}]" if v else "") for k, op, v in exprs + fields]
        out.append(" and ".join(reqs) or "(empty term)")
    return " or ".join(out) or "no terms"
