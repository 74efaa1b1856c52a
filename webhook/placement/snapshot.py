"""Cluster snapshot input (issue 3 §1, DESIGN.md §8).

Reads what a user dumps from a real cluster — ``kubectl get nodes -o yaml``,
``kubectl get pods -A -o yaml``, ``kubectl get topologies.kai.scheduler -o yaml`` — as YAML or
JSON, a ``List`` or a stream of objects, from one or several files. Free capacity per node is
``status.allocatable`` minus the requests of bound pods (``spec.nodeName`` set) that are not
``Succeeded``/``Failed``, for every resource including the ``pods`` count.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from fractions import Fraction
from collections.abc import Iterable, Mapping

from webhook import manifests
from webhook.core.topology import Topology, TopologyError
from webhook.placement.quantity import MAX_MILLI, QuantityError, exact_milli, parse_quantity, quantity_milli, to_milli

#: ``pods`` allocatable assumed when a node does not report one (kubelet ``--max-pods`` default).
DEFAULT_MAX_PODS = 110
_TERMINAL_PHASES = ("Succeeded", "Failed")
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class SnapshotError(ValueError):
    """Bad snapshot input; the message names the file, the object and the field."""


@dataclass
class Node:
    """One node of the snapshot.

    ``allocatable`` / ``free``: integer milli-units per resource name (``cpu`` 1 core = 1000,
    ``memory`` 1 byte = 1000, ``pods`` 1 pod = 1000). ``free`` may be negative (over-committed).
    ``taints``: the node's ``NoSchedule``/``NoExecute`` taints as ``(key, value, effect)``.
    """

    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    free: dict[str, int]
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[tuple[str, str, str], ...] = ()
    source: str = ""


@dataclass
class Snapshot:
    """Nodes (sorted by name), topologies, and the count of bound pods that were charged."""

    nodes: list[Node] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    bound_pods: int = 0


def _fail(source: str, obj: str, msg: str) -> SnapshotError:
    return SnapshotError(f"{source}: {obj}: {msg}")


def _requests_of(container: Mapping, where: str) -> dict[str, Fraction]:
    """A container's effective requests: ``requests``, and a ``limits`` entry with no request
    counts as the request (Kubernetes defaulting)."""
    if not isinstance(container, Mapping):
        raise QuantityError(f"{where}: expected a container object")
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        raise QuantityError(f"{where}.resources: expected an object")
    out: dict[str, Fraction] = {}
    for part in ("limits", "requests"):  # requests override limits
        values = res.get(part) or {}
        if not isinstance(values, Mapping):
            raise QuantityError(f"{where}.resources.{part}: expected an object")
        for name, raw in values.items():
            try:
                out[str(name)] = parse_quantity(raw)
            except QuantityError as exc:
                raise QuantityError(f"{where}.resources.{part}[{name}]: {exc}") from None
    return out


def pod_requests(spec: Mapping, where: str = "spec") -> dict[str, Fraction]:
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
            total[str(k)] = total.get(str(k), Fraction(0)) + parse_quantity(raw)
        except QuantityError as exc:
            raise QuantityError(f"{where}.overhead[{k}]: {exc}") from None
    return total


def pod_requests_milli(spec: Mapping, where: str = "spec") -> dict[str, int]:
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
                if milli is None:
                    return None
                out[name] = out.get(name, 0) + milli
    except QuantityError:
        return None
    out = {str(k): max(-MAX_MILLI, min(MAX_MILLI, v)) for k, v in out.items()}
    out["pods"] = 1000
    return out


def _name_of(obj: Mapping, source: str, here: str, kind: str) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise SnapshotError(f"{source}: {here}: {kind} has no metadata.name")
    ns = meta.get("namespace")
    return meta["name"], ns if isinstance(ns, str) else ""


def _parse_node(obj: Mapping, source: str, here: str) -> Node:
    name, _ = _name_of(obj, source, here, "Node")
    what = f"Node {name!r}"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping):
        raise _fail(source, what, "metadata.labels must be an object")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise _fail(source, what, "spec and status must be objects")
    alloc_raw = status.get("allocatable")
    if alloc_raw is None:
        alloc_raw = status.get("capacity")
    if not isinstance(alloc_raw, Mapping):
        raise _fail(source, what, "status.allocatable is missing (dump nodes with `kubectl get nodes -o yaml`)")
    alloc: dict[str, int] = {}
    for res, raw in alloc_raw.items():
        try:
            alloc[str(res)] = quantity_milli(raw, round_up=False)
        except QuantityError as exc:
            raise _fail(source, what, f"status.allocatable[{res}]: {exc}") from None
    alloc.setdefault("pods", DEFAULT_MAX_PODS * 1000)
    ready = True
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise _fail(source, what, "status.conditions must be a list")
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = []
    raw_taints = spec.get("taints") or []
    if not isinstance(raw_taints, list):
        raise _fail(source, what, "spec.taints must be a list")
    for j, t in enumerate(raw_taints):
        if not isinstance(t, Mapping) or not isinstance(t.get("key"), str):
            raise _fail(source, what, f"spec.taints[{j}]: a taint needs a key")
        if t.get("effect") in _BLOCKING_EFFECTS:
            taints.append((t["key"], str(t.get("value") or ""), t["effect"]))
    return Node(
        name=name,
        labels={str(k): str(v) for k, v in labels.items()},
        allocatable=alloc,
        free=dict(alloc),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        taints=tuple(taints),
        source=source,
    )


def build_snapshot(objects: Iterable[tuple[str, str, Mapping]], extra_topologies: Iterable[Topology] = ()) -> Snapshot:
    """Build a :class:`Snapshot` from ``(source, location, object)`` triples.

    Nodes, Pods and Topologies are used; other kinds are ignored. A node listed twice, a bad
    quantity, a malformed Topology → :class:`SnapshotError` naming file and object. Pods bound to
    nodes that are not in the snapshot are ignored (their node is not a candidate anyway).
    """
    nodes: dict[str, Node] = {}
    pods: list[tuple[str, str, Mapping]] = []
    topologies: dict[str, Topology] = {t.name: t for t in extra_topologies}
    for source, here, obj in objects:
        kind = obj.get("kind")
        if kind == "Node":
            node = _parse_node(obj, source, here)
            if node.name in nodes:
                raise _fail(source, f"Node {node.name!r}", f"listed twice (also in {nodes[node.name].source})")
            nodes[node.name] = node
        elif kind == "Pod":
            pods.append((source, here, obj))
        elif kind == "Topology":
            try:
                topo = Topology.from_object(obj)
            except TopologyError as exc:
                raise SnapshotError(f"{source}: {here}: {exc}") from None
            topologies[topo.name] = topo
    bound = 0
    for source, here, obj in pods:
        name, ns = _name_of(obj, source, here, "Pod")
        what = f"Pod {ns + '/' if ns else ''}{name}"
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            raise _fail(source, what, "spec is missing")
        node_name = spec.get("nodeName")
        phase = (obj.get("status") or {}).get("phase") if isinstance(obj.get("status"), Mapping) else None
        if not node_name or phase in _TERMINAL_PHASES:
            continue
        try:
            req = pod_requests_milli(spec, "spec")
        except QuantityError as exc:
            raise _fail(source, what, str(exc)) from None
        node = nodes.get(node_name)
        if node is None:
            continue
        bound += 1
        for res, v in req.items():
            # clamped like every quantity, so huge requests on one node stay within int64
            node.free[res] = max(-MAX_MILLI, node.free.get(res, 0) - v)
    return Snapshot(
        nodes=[nodes[k] for k in sorted(nodes)],
        topologies=[topologies[k] for k in sorted(topologies)],
        bound_pods=bound,
    )


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
    (``kubectl get … -o json``) are read with :mod:`json`, several times faster than YAML
    (:mod:`webhook.manifests`). The cyclic garbage collector is paused while the dump's
    millions of objects are built (they hold no cycles; the collector's passes over them
    cost about as much as the JSON parse itself).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_snapshot(paths, topology_paths)
    finally:
        if enabled:
            gc.enable()


def _load_snapshot(paths: Iterable[str], topology_paths: Iterable[str]) -> Snapshot:
    objects: list[tuple[str, str, Mapping]] = []
    extra: list[Topology] = []
    try:
        for path in topology_paths:
            found = len(extra)
            for here, obj in manifests.load_objects(path):
                if obj.get("kind") == "Topology":
                    try:
                        extra.append(Topology.from_object(obj))
                    except TopologyError as exc:
                        raise SnapshotError(f"{path}: {here}: {exc}") from None
            if len(extra) == found:  # empty, or another kind: bad input, as for review and serve
                raise SnapshotError(no_topology_message(path))
        paths = list(paths)
        for path in paths:
            # a cluster dump: JSON read without the duplicate-key hook (the fast path, README)
            objects.extend((path, here, obj) for here, obj in manifests.load_objects(path, json_duplicates=False))
    except manifests.ManifestError as exc:
        raise SnapshotError(str(exc)) from None
    snapshot = build_snapshot(objects, extra)
    if paths and not snapshot.nodes:
        # an empty dump (or only pods/topologies) is bad input, not a cluster where nothing fits
        raise SnapshotError(f"{', '.join(paths)}: no Node objects (dump them with `kubectl get nodes -o yaml`)")
    return snapshot


def snapshot_from_objects(objs: Iterable[Mapping], source: str = "<objects>") -> Snapshot:
    """Build a :class:`Snapshot` from in-memory objects (tests, benchmarks, ``gen-cluster``)."""
    try:
        located = list(manifests.flatten(list(objs), source))
    except manifests.ManifestError as exc:
        raise SnapshotError(str(exc)) from None
    return build_snapshot((source, here, obj) for here, obj in located)
