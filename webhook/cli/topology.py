"""``segment-webhook topology infer|check``: a Topology from the nodes' labels, and a Topology held
against the nodes (DESIGN.md §12). The rules are :mod:`webhook.core.topology_infer`'s;
this module reads the files (:mod:`webhook.manifests`) or, with ``--kubeconfig``, lists the
cluster's nodes, and prints.

``infer``: the Topology object(s) on stdout (YAML or JSON), the report on stderr; exit 0 written,
1 no Topology (no node carries a topology label that makes a level), 2 bad usage or input.
``check``: the findings on stdout; exit 0 clean, 1 any finding, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml

from webhook.cli.flags import error, topology_name
from webhook.cli.output import write_output
from webhook.core import topology_infer
from webhook.core.messages import quote
from webhook.core.topology import TOPOLOGY_API_VERSION, TOPOLOGY_KIND, Topology, TopologyError, is_valid_label_key
from webhook.errors import SegmentWebhookError
from webhook.manifests import ManifestError, load_objects

#: Node names of one file shown in the error listing its malformed Nodes.
SHOWN_PROBLEMS = 20


class InputError(SegmentWebhookError, ValueError):
    """Unusable input (file, cluster); the message names the file, object and field (exit 2)."""


def label_key(text: str) -> str:
    """An argparse ``type``: a Kubernetes label key (``[prefix/]name``)."""
    if not is_valid_label_key(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a label key ([prefix/]name, e.g. example.com/rack)")
    return text


def register(subparsers: Any) -> None:
    """Add ``topology`` (with ``infer`` and ``check``) to the ``segment-webhook`` command line."""
    topo = subparsers.add_parser(
        "topology", help="infer a Topology from the nodes' labels, or check one against the nodes",
        description="infer: the Topology the node labels support (DESIGN.md §12), with a report on stderr. "
                    "check: the §12 findings of a Topology on the nodes; exit 1 on any.")
    sub = topo.add_subparsers(dest="topology_command", metavar="{infer,check,export}")
    sub.required = True
    infer = sub.add_parser(
        "infer", help="write the Topology (or one per node group) that the node labels support",
        description="Read nodes (kubectl get nodes -o yaml|json, or the cluster with --kubeconfig) and print the "
                    "Topology their labels support on stdout, the report (levels, domains, nodes per domain, "
                    "aliases, keys that do not nest, dropped nodes, placeholder values, node groups) on stderr. "
                    "Exit 0 written, 1 no Topology, 2 bad input.")
    source = infer.add_mutually_exclusive_group(required=True)
    source.add_argument("-f", "--filename", metavar="NODES", help="kubectl get nodes -o yaml|json output ('-' = stdin)")
    source.add_argument("--kubeconfig", metavar="PATH", help="list the nodes of this kubeconfig's cluster")
    infer.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="format (default: yaml)")
    infer.add_argument("--label", action="append", default=[], type=label_key, metavar="KEY",
                       help="a node label key to consider besides the known provider keys (repeatable)")
    infer.add_argument("--name", type=topology_name, default=topology_infer.DEFAULT_NAME,
                       help="Topology name; several node groups get NAME-<hardware> (default: %(default)s)")
    infer.add_argument("--kind", choices=("kai", "kueue"), default="kai",
                       help="kai: kai.scheduler/v1alpha1 (default); kueue: kueue.x-k8s.io/v1beta2")
    infer.set_defaults(func=run_infer)
    check = sub.add_parser(
        "check", help="hold a Topology against the nodes: exit 1 on any finding",
        description="Report, for each Topology in TOPOLOGY (KAI's or Kueue's), the DESIGN.md §12 findings on the "
                    "nodes: levels out of order, values under two parents, duplicate or single-domain levels, "
                    "placeholder values, dropped nodes, KAI's '.'-joined domain ids that collide. Exit 0 clean, "
                    "1 findings, 2 bad input.")
    check.add_argument("-f", "--filename", required=True, metavar="TOPOLOGY", help="file with Topology objects")
    check.add_argument("--nodes", required=True, metavar="NODES", help="kubectl get nodes -o yaml|json output")
    check.add_argument("-o", "--output", choices=("text", "json"), default="text",
                       help="text: one finding per line with its fix (default); json: every value and node named")
    check.add_argument("-l", "--selector", type=node_selector, metavar="SELECTOR",
                       help="check only the nodes whose labels match, as kubectl's -l: comma-separated key=value, "
                            "key!=value, key, !key, key in (a,b), key notin (a,b) (e.g. "
                            "node.kubernetes.io/instance-type=p5.48xlarge, or the levels `topology infer` names)")
    check.set_defaults(func=run_check)
    from webhook.cli.topology_export import add_export_parser

    add_export_parser(sub)  # topology export (DESIGN.md §13)


# ------------------------------------------------------------------------------------- selector

#: One requirement of a label selector: ``(key, operator, values)``; operators ``in``, ``notin``,
#: ``exists``, ``!`` (does not exist). ``key=value`` is ``in`` one value, ``key!=value`` ``notin``.
Requirement = tuple[str, str, frozenset[str]]
_SET_REQUIREMENT = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^()]*)\)\s*$")


def _split_requirements(text: str) -> list[str]:
    """``text`` cut at the commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current.append(char)
    parts.append("".join(current))
    return parts


def _requirement(part: str) -> Requirement:
    """One requirement of a selector (kubectl's label selector syntax). Raises
    :class:`argparse.ArgumentTypeError` naming the part and the accepted forms."""
    text = part.strip()
    found = _SET_REQUIREMENT.match(text)
    if found:
        key, operator, values = found.group(1), found.group(2), {v.strip() for v in found.group(3).split(",")}
    elif "!=" in text:
        key, value = (piece.strip() for piece in text.split("!=", 1))
        operator, values = "notin", {value}
    elif "=" in text:
        key, value = (piece.strip() for piece in text.replace("==", "=", 1).split("=", 1))
        operator, values = "in", {value}
    elif text.startswith("!"):
        key, operator, values = text[1:].strip(), "!", set()
    else:
        key, operator, values = text, "exists", set()
    if not is_valid_label_key(key):
        raise argparse.ArgumentTypeError(
            f"{part.strip()!r}: {key!r} is not a label key; a selector is comma-separated key=value, key!=value, "
            "key, !key, key in (a,b) or key notin (a,b)")
    return key, operator, frozenset(values)


def node_selector(text: str) -> tuple[Requirement, ...]:
    """An argparse ``type``: a label selector (``--selector``) as its requirements, all of which a
    node's labels must meet. Raises :class:`argparse.ArgumentTypeError` for an empty or malformed one."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty selector; e.g. node.kubernetes.io/instance-type=p5.48xlarge")
    return tuple(_requirement(part) for part in _split_requirements(text))


def selected(labels: Mapping[str, str], requirements: Iterable[Requirement]) -> bool:
    """Whether ``labels`` meet every requirement (a missing key meets ``notin`` and ``!``)."""
    for key, operator, values in requirements:
        value = labels.get(key)
        if operator == "exists" and value is None:
            return False
        if operator == "!" and value is not None:
            return False
        if operator == "in" and value not in values:
            return False
        if operator == "notin" and value in values:
            return False
    return True


# ------------------------------------------------------------------------------------- reading

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
    from kubernetes.client.rest import ApiException

    from webhook.cluster.api_server import transport_cause
    from webhook.cluster.kubeconfig import KubeconfigError, api_client_from_kubeconfig

    try:
        api = k8s_client.CoreV1Api(api_client_from_kubeconfig(kubeconfig))
    except KubeconfigError as exc:
        raise InputError(f"--kubeconfig: {exc}") from None
    items: list[Mapping[str, Any]] = []
    token = None
    try:
        while True:
            response = api.list_node(limit=500, _continue=token, _preload_content=False, _request_timeout=(10, 60))
            try:
                body = json.loads(response.data)
            finally:
                response.release_conn()
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
    if isinstance(api, str) and api.split("/")[0] == topology_infer.KUEUE_GROUP:
        return {**obj, "apiVersion": TOPOLOGY_API_VERSION}
    return obj


def read_topologies(path: str) -> list[Topology]:
    """The KAI and Kueue Topology objects of ``path``. Raises :class:`InputError` naming the file
    and the object for a malformed Topology, and when there is none."""
    try:
        objects = load_objects(path)
    except ManifestError as exc:
        raise InputError(str(exc)) from None
    found = []
    for here, obj in objects:
        topo = _normalised(obj)
        if topo is None:
            continue
        try:
            found.append(Topology.from_object(topo))
        except TopologyError as exc:
            raise InputError(f"{path}: {here}: {exc}") from None
    if not found:
        raise InputError(f"{path}: no Topology object ({TOPOLOGY_API_VERSION} or {topology_infer.KUEUE_GROUP}); "
                         "fix: name the file that holds the Topology with -f, the nodes with --nodes")
    return found


# ------------------------------------------------------------------------------------- commands

def _dump(documents: list[dict[str, Any]], output: str) -> str:
    if output == "json":
        doc = documents[0] if len(documents) == 1 else {"apiVersion": "v1", "kind": "List", "items": documents}
        return json.dumps(doc, indent=2) + "\n"
    return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=len(documents) > 1)


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


def run_infer(args: argparse.Namespace) -> int:
    """``topology infer``: exit 0 written, 1 no Topology, 2 bad input."""
    with collector_paused():
        try:
            nodes = read_nodes(args.filename) if args.filename else list_cluster_nodes(args.kubeconfig)
        except InputError as exc:
            return error("topology infer", exc)
        result = topology_infer.infer(nodes, args.label, args.name)
    report = topology_infer.render_report(result)
    if not result.topologies:
        print(report, end="", file=sys.stderr)
        return 1
    documents = [topology_infer.topology_object(t.name, t.levels, args.kind) for t in result.topologies]
    written = write_output(_dump(documents, args.output), "topology infer")
    print(report, end="", file=sys.stderr)
    return written


def run_check(args: argparse.Namespace) -> int:
    """``topology check``: exit 0 clean, 1 any finding, 2 bad input."""
    with collector_paused():
        try:
            topologies = read_topologies(args.filename)
            nodes = read_nodes(args.nodes)
            if args.selector:
                read = len(nodes)
                nodes = [node for node in nodes if selected(node.labels, args.selector)]
                if not nodes:
                    raise InputError(f"--selector matches none of the {read:,} nodes of {args.nodes}; fix: check the "
                                     "keys and values (kubectl get nodes --show-labels)")
        except InputError as exc:
            return error("topology check", exc)
        findings = [f for topo in topologies for f in topology_infer.check(topo.levels, nodes, topo.name)]
    if args.output == "json":
        text = json.dumps({"topologies": [t.name for t in topologies], "nodes": len(nodes),
                           "findings": [f.document() for f in findings]}, indent=2) + "\n"
    else:
        lines = [f.text() for f in findings]
        names = ", ".join(t.name for t in topologies)
        lines.append(f"{len(findings)} finding{'' if len(findings) == 1 else 's'} for Topology {names} on "
                     f"{len(nodes):,} node{'' if len(nodes) == 1 else 's'}")
        text = "\n".join(lines) + "\n"
    written = write_output(text, "topology check")
    return written or (1 if findings else 0)
