"""What the ``topology`` commands read: the Nodes of a ``kubectl get nodes`` dump or of a cluster
(``--kubeconfig``), and the KAI / Kueue Topology objects of a file, each problem an
:class:`InputError` naming the file, object and field (exit 2). ``topology infer|check``
(:mod:`webhook.cli.topology`) and ``topology export`` (:mod:`webhook.cli.topology_export`) both
read through it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from webhook.errors import SegmentWebhookError
from webhook.kube import kueue
from webhook.kube.kai_scheduler import TOPOLOGY_API_VERSION
from webhook.planning.manifests import ManifestError, load_objects
from webhook.text.messages import quote
from webhook.topology import infer as topology_infer
from webhook.topology.objects import TOPOLOGY_KIND, Topology, TopologyError, defined_twice

#: Node names of one file shown in the error listing its malformed Nodes.
SHOWN_PROBLEMS = 20


class InputError(SegmentWebhookError, ValueError):
    """Unusable input (file, cluster); the message names the file, object and field (exit 2)."""


def nodes_from_objects(objects: Iterable[tuple[str, Mapping[str, Any]]], source: str) -> list[topology_infer.NodeLabels]:
    """The Nodes of ``(location, object)`` pairs (other kinds skipped). Raises :class:`InputError`
    naming ``source``, the location and the field for every malformed Node and for a name listed
    twice, and when there is no Node at all."""
    nodes: list[topology_infer.NodeLabels] = []
    where: dict[str, str] = {}
    problems: list[str] = []
    for here, obj in objects:
        if obj.get("kind") != "Node":
            continue
        try:
            node = topology_infer.node_labels_of(obj)
        except topology_infer.NodeLabelError as exc:
            problems.append(f"{source}: {here}: {exc}")
            continue
        if node.name in where:
            problems.append(f"{source}: {here}: Node {quote(node.name)} is listed twice (also at {where[node.name]}); "
                            "fix: keep one of them")
            continue
        where[node.name] = here
        nodes.append(node)
    if len(problems) == 1:
        raise InputError(problems[0])
    if problems:
        shown = problems[:SHOWN_PROBLEMS]
        more = f"\n  (and {len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
        raise InputError(f"{len(problems)} problems in the nodes (dump them again with `kubectl get nodes -o yaml`):"
                         "\n  " + "\n  ".join(shown) + more)
    if not nodes:
        raise InputError(f"{source}: no Node objects (dump them with `kubectl get nodes -o yaml`)")
    return nodes


def read_nodes(path: str) -> list[topology_infer.NodeLabels]:
    """The nodes of a ``kubectl get nodes`` dump. Raises :class:`InputError`."""
    try:
        objects = load_objects(path, json_duplicates=False)  # a cluster dump: the fast JSON path
    except ManifestError as exc:
        raise InputError(str(exc)) from None
    return nodes_from_objects(objects, path)


def list_cluster_nodes(kubeconfig: str) -> list[topology_infer.NodeLabels]:
    """The nodes of the cluster of ``kubeconfig`` (paged lists of 500). Raises :class:`InputError`
    naming the kubeconfig when it cannot be loaded or the list fails."""
    from kubernetes import client as k8s_client
    from kubernetes.client.exceptions import ApiException

    from webhook.cluster.api_server import read_json, transport_cause
    from webhook.cluster.kubeconfig import KubeconfigError, api_client_from_kubeconfig

    try:
        api = k8s_client.CoreV1Api(api_client_from_kubeconfig(kubeconfig))
    except KubeconfigError as exc:
        raise InputError(f"--kubeconfig: {exc}") from None
    items: list[Mapping[str, Any]] = []
    token = None
    try:
        while True:
            # _preload_content=False: the client returns urllib3's response, not a V1NodeList
            body = read_json(api.list_node(limit=500, _continue=token, _preload_content=False, _request_timeout=(10, 60)))
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                break
    except Exception as exc:  # noqa: BLE001 - connection refused, TLS, timeouts: say so, no traceback
        cause = transport_cause(exc)
        if cause is not None:  # no answer: the API server, why, and the fix
            raise InputError(f"--kubeconfig {kubeconfig}: cannot list nodes: the API server "
                             f"{api.api_client.configuration.host} is unreachable: {cause}; fix: check that the "
                             "cluster is up and that the kubeconfig's server and credentials are this cluster's "
                             "(kubectl --kubeconfig FILE get nodes)") from None
        if isinstance(exc, ApiException):
            raise InputError(f"--kubeconfig {kubeconfig}: listing nodes answered HTTP {exc.status} {exc.reason}") from None
        raise InputError(f"--kubeconfig {kubeconfig}: cannot list nodes: {exc}") from None
    # the items of a NodeList carry no apiVersion and no kind (the list's TypeMeta says Node)
    return nodes_from_objects(((f"items[{i}]", {**obj, "kind": obj.get("kind") or "Node"})
                               for i, obj in enumerate(items) if isinstance(obj, Mapping)),
                              f"cluster of {kubeconfig}")


def _normalised(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A Topology object as KAI's (Kueue's ``kueue.x-k8s.io/*`` Topology has the same fields), or
    ``None`` for another kind."""
    if obj.get("kind") != TOPOLOGY_KIND:
        return None
    api = obj.get("apiVersion")
    if isinstance(api, str) and api.split("/")[0] == kueue.KUEUE_GROUP:
        return {**obj, "apiVersion": TOPOLOGY_API_VERSION}
    return obj


def read_topologies(path: str) -> list[Topology]:
    """The KAI and Kueue Topology objects of ``path``. Raises :class:`InputError` naming the file
    and the object for a malformed Topology, for two Topologies of one name that differ (as
    ``place`` and ``controller --once`` refuse them), and when there is none; the same Topology
    given twice is read once."""
    try:
        objects = load_objects(path)
    except ManifestError as exc:
        raise InputError(str(exc)) from None
    found: list[Topology] = []
    where: dict[str, tuple[Topology, str]] = {}
    for here, obj in objects:
        topo = _normalised(obj)
        if topo is None:
            continue
        try:
            parsed = Topology.from_object(topo)
        except TopologyError as exc:
            raise InputError(f"{path}: {here}: {exc}") from None
        first = where.get(parsed.name)
        if first is not None:
            if first[0] != parsed:  # as place, capacity and controller --once read the same file
                raise InputError(f"{path}: {here}: {defined_twice(first[0], f'{path}: {first[1]}', parsed)}")
            continue  # the same Topology twice is one Topology
        where[parsed.name] = (parsed, here)
        found.append(parsed)
    if not found:
        raise InputError(f"{path}: no Topology object ({TOPOLOGY_API_VERSION} or {kueue.KUEUE_GROUP}); "
                         "fix: name the file that holds the Topology with -f, the nodes with --nodes")
    return found


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a dump's objects are built and read (they hold no
    cycles; its passes over a 10,000-node dump cost about as much as the parse, as for ``place``)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
