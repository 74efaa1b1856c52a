"""Cluster snapshot input (DESIGN.md §8).

Reads what a user dumps from a real cluster — ``kubectl get nodes -o yaml``,
``kubectl get pods -A -o yaml``, ``kubectl get topologies.kai.scheduler -o yaml`` — as YAML or
JSON, a ``List`` or a stream of objects, from one or several files. Free capacity per node is
``status.allocatable`` minus the requests of every pod that occupies it, for every resource
including the ``pods`` count: bound pods (``spec.nodeName``) and pods released to it but not bound
yet, not ``Succeeded``/``Failed`` (:func:`webhook.kube.pods.occupied_node`, the rule the
controller charges by).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from webhook.kube.nodes import Node, SnapshotError, is_node, object_error, object_name, parse_node
from webhook.kube.pods import is_pod, occupied_node, pod_requests_milli
from webhook.kube.quantity import (
    MAX_MILLI,
    QuantityError,
)
from webhook.kube.shapes import Node as NodeObject
from webhook.kube.shapes import Pod
from webhook.planning import manifests
from webhook.text.messages import closest, json_type, quote
from webhook.topology.objects import Topology, TopologyError, defined_twice


@dataclass
class Snapshot:
    """Nodes (sorted by name), topologies, and the count of bound pods that were charged."""

    nodes: list[Node] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    bound_pods: int = 0


def snapshot_problems(problems: list[str]) -> SnapshotError:
    """One error for every problem of the input: the problem itself when there is one, else a
    count and one indented line each (every malformed object is named, none silently dropped)."""
    if len(problems) == 1:
        return SnapshotError(problems[0])
    return SnapshotError(f"{len(problems)} problems in the input (a truncated or hand-edited dump? "
                         "dump it again with `kubectl get nodes,pods -A -o yaml`):\n  " + "\n  ".join(problems))


class ParsedSink(Protocol):
    """Receives what :func:`build_snapshot` parsed, so a later reader of the same objects does not
    parse them again (:class:`webhook.gating.decision.ParseCache`, for ``controller --once``)."""

    def add_node(self, obj: NodeObject, node: Node) -> None: ...

    def add_requests(self, pod: Pod, requests: dict[str, int]) -> None: ...


#: The kinds a snapshot reads; any other kind is ignored, one a likely misspelling of these is an error.
SNAPSHOT_KINDS = ("Node", "Pod", "Topology")


def workload_kind_variant(kind: str) -> str | None:
    """The handled workload kind ``kind`` is a case or plural variant of (``PytorchJob``,
    ``PyTorchJobs`` -> ``PyTorchJob``), else ``None``. Only such variants: a dump holds many kinds
    of its own, and a looser match would take a Service for a RayService."""
    from webhook.admission.kinds.registry import BY_KIND

    lowered = kind.lower()
    return next((known for known in BY_KIND if known != kind and lowered in (known.lower(), known.lower() + "s")),
                None)


def build_snapshot(objects: Iterable[tuple[str, str, Mapping[str, Any]]], parsed: ParsedSink | None = None) -> Snapshot:
    """Build a :class:`Snapshot` from ``(source, location, object)`` triples.

    Nodes, Pods and Topologies are used; other kinds are ignored, but a likely misspelling of one
    (:data:`SNAPSHOT_KINDS`, ``Podd``) is a problem. A node listed twice, two
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
    pods: list[tuple[str, str, Pod]] = []
    topologies: dict[str, Topology] = {}
    topology_where: dict[str, str] = {}
    for source, here, obj in objects:
        kind = obj.get("kind")
        if is_node(obj):  # kind == "Node"
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
        elif is_pod(obj):  # kind == "Pod"
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
        elif isinstance(kind, str) and (near := closest(kind, SNAPSHOT_KINDS)) is not None:
            # a hand-edited `kind: Podd` would free its node in silence (other kinds are ignored)
            problems.append(f"{source}: {here}: kind {quote(kind)} is none of the kinds a snapshot reads "
                            f"({', '.join(SNAPSHOT_KINDS)}), so the object would be ignored; did you mean {near}? "
                            f"fix: write kind: {near}, or remove the object")
        elif isinstance(kind, str) and (near := workload_kind_variant(kind)) is not None:
            # `controller --once` would say the gang's owner is missing from the input
            problems.append(f"{source}: {here}: kind {quote(kind)} is no kind the webhook handles; did you mean "
                            f"{near}? (kinds are case-sensitive); fix: write kind: {near}")
    bound = _charge_pods(pods, nodes, parsed, problems)
    if problems:
        raise snapshot_problems(problems)
    return Snapshot(
        nodes=[nodes[k] for k in sorted(nodes)],
        topologies=[topologies[k] for k in sorted(topologies)],
        bound_pods=bound,
    )


def _charge_pods(pods: list[tuple[str, str, Pod]], nodes: dict[str, Node], parsed: ParsedSink | None,
                 problems: list[str]) -> int:
    """Charge each pod that occupies a node of ``nodes`` (:func:`occupied_node`) to its node's
    ``free`` (clamped to :data:`MAX_MILLI`); problems are appended to ``problems``. Returns the
    number of pods charged. :func:`build_snapshot`'s second pass."""
    bound = 0
    for source, here, obj in pods:
        try:
            name, ns = object_name(obj, source, here, "Pod")
        except SnapshotError as exc:
            problems.append(str(exc))
            continue
        what = f"Pod {ns + '/' if ns else ''}{name}"
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            problems.append(str(object_error(source, what, "spec is missing" if spec is None else
                                      f"spec must be an object, not {json_type(spec)}")))
            continue
        node_name = occupied_node(obj)  # bound, or released and pinned (the controller counts it the same)
        if node_name is None:
            continue
        try:
            req = pod_requests_milli(spec, "spec")
        except QuantityError as exc:
            problems.append(str(object_error(source, what, str(exc))))
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
    return (f"--topology-file: no kai.scheduler/v1alpha1 Topology object in {path}; fix: give a file holding "
            "`kind: Topology` (`kubectl get topologies.kai.scheduler -o yaml`)")


def load_snapshot(paths: Iterable[str], topology_paths: Iterable[str] = ()) -> Snapshot:
    """Read ``--cluster`` files (and ``--topology-file`` files) into a :class:`Snapshot`.

    Raises :class:`SnapshotError` for unreadable files, bad YAML/JSON, bad objects, a
    ``--topology-file`` without a Topology (:func:`no_topology_message`) and when no
    ``--cluster`` file holds a Node (``empty.yaml: no Node objects …``); the message names the
    file, the object and the field (the CLI prints it and exits 2). JSON dumps
    (``kubectl get … -o json``) are read with :mod:`json`, the fast path
    (:mod:`webhook.planning.manifests`; figures in the README). The cyclic garbage collector is paused
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


def topologies_or_default(snapshot: Snapshot) -> list[Topology]:
    """The snapshot's Topologies (``--topology-file`` included), else the embedded default catalog's:
    how ``place``, ``capacity`` and ``controller --once`` read a dump without a Topology."""
    from webhook.topology.objects import catalog_topologies, default_catalog

    return snapshot.topologies or catalog_topologies(default_catalog())


def no_nodes_message(paths: Iterable[str]) -> str:
    """The error of a cluster dump without a Node (empty, or only pods or Topologies): bad input for
    every command that places on it (``place``, ``capacity``, ``controller --once``), not a cluster
    where nothing fits. The fix dumps the pods too: without them every node is taken as empty."""
    return (f"{', '.join(paths)}: no Node objects; fix: dump the cluster with `kubectl get nodes,pods -A -o yaml` "
            "(the nodes, and the pods that say what is already taken)")


def _load_snapshot(paths: Iterable[str], topology_paths: Iterable[str]) -> Snapshot:
    paths = list(paths)
    snapshot = build_snapshot(read_located(paths, topology_paths))
    if paths and not snapshot.nodes:
        # an empty dump (or only pods/topologies) is bad input, not a cluster where nothing fits
        raise SnapshotError(no_nodes_message(paths))
    return snapshot


def snapshot_from_objects(objs: Iterable[Mapping[str, Any]], source: str = "<objects>") -> Snapshot:
    """Build a :class:`Snapshot` from in-memory objects (tests, benchmarks, ``gen-cluster``)."""
    try:
        located = list(manifests.flatten(list(objs), source))
    except manifests.ManifestError as exc:
        raise SnapshotError(str(exc)) from None
    return build_snapshot((source, here, obj) for here, obj in located)
