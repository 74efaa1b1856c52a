"""Cluster snapshot input (DESIGN.md §8).

Reads what a user dumps from a real cluster — ``kubectl get nodes -o yaml``,
``kubectl get pods -A -o yaml``, ``kubectl get topologies.kai.scheduler -o yaml`` — as YAML or
JSON, a ``List`` or a stream of objects, from one or several files. Free capacity per node is
``status.allocatable`` minus the requests of every pod that occupies it, for every resource
including the ``pods`` count: bound pods (``spec.nodeName``) and pods released to it but not bound
yet, not ``Succeeded``/``Failed`` (:func:`webhook.placement.occupancy.occupied_node`, the rule the
controller charges by).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Protocol

from webhook import manifests
from webhook.core.messages import json_type, quote
from webhook.core.topology import Topology, TopologyError, defined_twice
from webhook.errors import SegmentWebhookError
from webhook.placement.model import Node as Node  # the snapshot's nodes (their home: model)
from webhook.placement.occupancy import occupied_node
from webhook.placement.quantity import (
    MAX_MILLI,
    QuantityError,
    allocatable_milli,
    exact_milli,
    non_negative_quantity,
    to_milli,
)

#: ``pods`` allocatable assumed when a node does not report one (kubelet ``--max-pods`` default).
DEFAULT_MAX_PODS = 110
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class SnapshotError(SegmentWebhookError, ValueError):
    """Bad snapshot input; the message names the file, the object and the field."""


@dataclass
class Snapshot:
    """Nodes (sorted by name), topologies, and the count of bound pods that were charged."""

    nodes: list[Node] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    bound_pods: int = 0


def _fail(source: str, obj: str, msg: str) -> SnapshotError:
    """``<source>: <object>: <problem>`` (no ``<source>: `` when ``source`` is empty: the live
    controller's objects come from the API, not from a file)."""
    return SnapshotError(f"{source}: {obj}: {msg}" if source else f"{obj}: {msg}")


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


def _name_of(obj: Mapping[str, Any], source: str, here: str, kind: str) -> tuple[str, str]:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(name, str) or not name:
        where = f"{source}: {here}: " if source else ""
        got = "" if name is None or name == "" else f" (metadata.name = {quote(name)} is {json_type(name)}, not a string)"
        raise SnapshotError(f"{where}{kind} has no metadata.name{got}")
    ns = meta.get("namespace")
    return name, ns if isinstance(ns, str) else ""


def _string_labels(labels: Mapping[str, Any], what: str, source: str) -> dict[str, str]:
    """``metadata.labels`` as read: every key and value must be a string (Kubernetes label values
    are strings; ``null``, ``7`` or ``true`` unquoted in YAML are not). Never ``str()`` a value: a
    ``null`` would become a domain named ``None``, and a YAML alias bomb would be expanded."""
    for key, value in labels.items():
        if not isinstance(key, str):
            raise _fail(source, what, f"metadata.labels has the key {quote(key)}, which is {json_type(key)}: label keys "
                                      "are strings; fix: quote the key")
        if not isinstance(value, str):
            raise _fail(source, what, f'metadata.labels["{key}"] = {quote(value)}: a label value must be a string, '
                                      f"not {json_type(value)}; fix: quote the value (\"{key}\": \"...\") or remove the label")
    return dict(labels)


def parse_node(obj: Mapping[str, Any], source: str = "", here: str = "") -> Node:
    """One Node object as the engine reads it. Raises :class:`SnapshotError` naming the node
    and the field (and ``source``, the file, when given: the live controller passes none)."""
    name, _ = _name_of(obj, source, here, "Node")
    what = f"Node {quote(name)}"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping):
        raise _fail(source, what, f"metadata.labels must be an object, not {json_type(labels)}")
    labels = _string_labels(labels, what, source)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    for part, value in (("spec", spec), ("status", status)):
        if not isinstance(value, Mapping):
            raise _fail(source, what, f"{part} must be an object, not {json_type(value)}")
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        raise _fail(source, what, f"spec.unschedulable = {quote(unschedulable)}: must be a boolean, not "
                                  f"{json_type(unschedulable)}; fix: write unschedulable: true or false, unquoted")
    alloc_raw = status.get("allocatable")
    if alloc_raw is None:
        alloc_raw = status.get("capacity")
    if not isinstance(alloc_raw, Mapping):
        got = "" if alloc_raw is None else f" (it is {json_type(alloc_raw)}, not an object)"
        raise _fail(source, what, f"status.allocatable is missing{got} (dump nodes with `kubectl get nodes -o yaml`)")
    alloc: dict[str, int] = {}
    for res, raw in alloc_raw.items():
        try:
            alloc[str(res)] = allocatable_milli(raw)
        except QuantityError as exc:
            raise _fail(source, what, f"status.allocatable[{res}]: {exc}") from None
    alloc.setdefault("pods", DEFAULT_MAX_PODS * 1000)
    ready = True
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise _fail(source, what, f"status.conditions must be an array, not {json_type(conditions)}")
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = []
    raw_taints = spec.get("taints") or []
    if not isinstance(raw_taints, list):
        raise _fail(source, what, f"spec.taints must be an array, not {json_type(raw_taints)}")
    for j, t in enumerate(raw_taints):
        if not isinstance(t, Mapping) or not isinstance(t.get("key"), str):
            raise _fail(source, what, f"spec.taints[{j}]: a taint needs a key")
        value = t.get("value")
        if value is not None and not isinstance(value, str):
            raise _fail(source, what, f"spec.taints[{j}].value = {quote(value)}: a taint value must be a string, not "
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


def snapshot_problems(problems: list[str]) -> SnapshotError:
    """One error for every problem of the input: the problem itself when there is one, else a
    count and one indented line each (every malformed object is named, none silently dropped)."""
    if len(problems) == 1:
        return SnapshotError(problems[0])
    return SnapshotError(f"{len(problems)} problems in the input (a truncated or hand-edited dump? "
                         "dump it again with `kubectl get nodes,pods -A -o yaml`):\n  " + "\n  ".join(problems))


class ParsedSink(Protocol):
    """Receives what :func:`build_snapshot` parsed, so a later reader of the same objects does not
    parse them again (:class:`webhook.controller.decision.ParseCache`, for ``controller --once``)."""

    def add_node(self, obj: Mapping[str, Any], node: Node) -> None: ...

    def add_requests(self, pod: Mapping[str, Any], requests: dict[str, int]) -> None: ...


def build_snapshot(objects: Iterable[tuple[str, str, Mapping[str, Any]]], parsed: ParsedSink | None = None) -> Snapshot:
    """Build a :class:`Snapshot` from ``(source, location, object)`` triples.

    Nodes, Pods and Topologies are used; other kinds are ignored. A node listed twice, two
    different Topologies of one name, a bad quantity, a malformed Node, bound Pod or Topology →
    :class:`SnapshotError` naming file and object; every problem of the input is reported
    (:func:`snapshot_problems`), not only the first. Pods bound to nodes that are not in the
    snapshot are ignored (their node is not a candidate anyway). ``parsed``, when given, receives
    every Node parsed (before any pod is charged to it: a copy, uncharged) and the requests of
    every bound pod (:func:`pod_requests_milli`; the values are shared, never to be changed).
    """
    problems: list[str] = []
    nodes: dict[str, Node] = {}
    node_where: dict[str, str] = {}
    pods: list[tuple[str, str, Mapping[str, Any]]] = []
    topologies: dict[str, Topology] = {}
    topology_where: dict[str, str] = {}
    for source, here, obj in objects:
        kind = obj.get("kind")
        if kind == "Node":
            try:
                node = parse_node(obj, source, here)
            except SnapshotError as exc:
                problems.append(str(exc))
                continue
            if node.name in nodes:
                problems.append(f"{source}: {here}: Node {quote(node.name)} is listed twice (also at "
                                f"{node_where[node.name]}); node names are unique in a cluster; fix: keep one of them")
                continue
            nodes[node.name] = node
            node_where[node.name] = f"{source}: {here}"
            if parsed is not None:
                parsed.add_node(obj, replace(node, free=dict(node.free)))
        elif kind == "Pod":
            pods.append((source, here, obj))
        elif kind == "Topology":
            try:
                topo = Topology.from_object(obj)
            except TopologyError as exc:
                problems.append(f"{source}: {here}: {exc}")
                continue
            if topo.name in topologies and topologies[topo.name] != topo:
                problems.append(f"{source}: {here}: "
                                + defined_twice(topologies[topo.name], topology_where[topo.name], topo))
                continue
            topologies.setdefault(topo.name, topo)
            topology_where.setdefault(topo.name, f"{source}: {here}")
    bound = _charge_pods(pods, nodes, parsed, problems)
    if problems:
        raise snapshot_problems(problems)
    return Snapshot(
        nodes=[nodes[k] for k in sorted(nodes)],
        topologies=[topologies[k] for k in sorted(topologies)],
        bound_pods=bound,
    )


def _charge_pods(pods: list[tuple[str, str, Mapping[str, Any]]], nodes: dict[str, Node], parsed: ParsedSink | None,
                 problems: list[str]) -> int:
    """Charge each pod that occupies a node of ``nodes`` (:func:`occupied_node`) to its node's
    ``free`` (clamped to :data:`MAX_MILLI`); problems are appended to ``problems``. Returns the
    number of pods charged. :func:`build_snapshot`'s second pass."""
    bound = 0
    for source, here, obj in pods:
        try:
            name, ns = _name_of(obj, source, here, "Pod")
        except SnapshotError as exc:
            problems.append(str(exc))
            continue
        what = f"Pod {ns + '/' if ns else ''}{name}"
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            problems.append(str(_fail(source, what, "spec is missing" if spec is None else
                                      f"spec must be an object, not {json_type(spec)}")))
            continue
        node_name = occupied_node(obj)  # bound, or released and pinned (the controller counts it the same)
        if node_name is None:
            continue
        try:
            req = pod_requests_milli(spec, "spec")
        except QuantityError as exc:
            problems.append(str(_fail(source, what, str(exc))))
            continue
        if parsed is not None:
            parsed.add_requests(obj, req)
        node = nodes.get(node_name) if isinstance(node_name, str) else None
        if node is None:
            continue
        bound += 1
        for res, v in req.items():
            # clamped like every quantity, so huge requests on one node stay within int64
            node.free[res] = max(-MAX_MILLI, node.free.get(res, 0) - v)
    return bound


def no_topology_message(path: str) -> str:
    """The error for a ``--topology-file`` holding no Topology (empty, or another kind): the
    wording of ``review``/``serve`` (:func:`webhook.cli.flags.static_topologies`)."""
    return f"--topology-file: no kai.scheduler/v1alpha1 Topology object in {path}"


def load_snapshot(paths: Iterable[str], topology_paths: Iterable[str] = ()) -> Snapshot:
    """Read ``--cluster`` files (and ``--topology-file`` files) into a :class:`Snapshot`.

    Raises :class:`SnapshotError` for unreadable files, bad YAML/JSON, bad objects, a
    ``--topology-file`` without a Topology (:func:`no_topology_message`) and when no
    ``--cluster`` file holds a Node (``empty.yaml: no Node objects …``); the message names the
    file, the object and the field (the CLI prints it and exits 2). JSON dumps
    (``kubectl get … -o json``) are read with :mod:`json`, the fast path
    (:mod:`webhook.manifests`; figures in the README). The cyclic garbage collector is paused
    while the dump's millions of objects are built (they hold no cycles, so its passes over
    them are wasted work).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_snapshot(paths, topology_paths)
    finally:
        if enabled:
            gc.enable()


def read_located(paths: Iterable[str], topology_paths: Iterable[str] = ()) -> list[tuple[str, str, Mapping[str, Any]]]:
    """The ``(file, location, object)`` triples of ``--topology-file`` files (their Topologies
    only, first: they are named first) and of cluster dumps ``paths`` (every object), the input of
    :func:`build_snapshot` for ``place --cluster`` and ``controller --once --snapshot``. Raises
    :class:`SnapshotError` naming the file for an unreadable or unparsable file and for a
    ``--topology-file`` without a Topology (:func:`no_topology_message`)."""
    objects: list[tuple[str, str, Mapping[str, Any]]] = []
    try:
        for path in topology_paths:
            found = [(path, here, obj) for here, obj in manifests.load_objects(path) if obj.get("kind") == "Topology"]
            if not found:  # empty, or another kind: bad input, as for review and serve
                raise SnapshotError(no_topology_message(path))
            objects.extend(found)
        for path in paths:
            # a cluster dump: JSON read without the duplicate-key hook (the fast path, README)
            objects.extend((path, here, obj) for here, obj in manifests.load_objects(path, json_duplicates=False))
    except manifests.ManifestError as exc:
        raise SnapshotError(str(exc)) from None
    return objects


def _load_snapshot(paths: Iterable[str], topology_paths: Iterable[str]) -> Snapshot:
    paths = list(paths)
    snapshot = build_snapshot(read_located(paths, topology_paths))
    if paths and not snapshot.nodes:
        # an empty dump (or only pods/topologies) is bad input, not a cluster where nothing fits
        raise SnapshotError(f"{', '.join(paths)}: no Node objects (dump them with `kubectl get nodes -o yaml`)")
    return snapshot


def snapshot_from_objects(objs: Iterable[Mapping[str, Any]], source: str = "<objects>") -> Snapshot:
    """Build a :class:`Snapshot` from in-memory objects (tests, benchmarks, ``gen-cluster``)."""
    try:
        located = list(manifests.flatten(list(objs), source))
    except manifests.ManifestError as exc:
        raise SnapshotError(str(exc)) from None
    return build_snapshot((source, here, obj) for here, obj in located)
