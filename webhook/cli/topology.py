"""``segment-webhook topology infer|check``: a Topology from the nodes' labels, and a Topology held
against the nodes (DESIGN.md §12). The rules are :mod:`webhook.topology.infer`'s;
this module reads the files (:mod:`webhook.planning.manifests`) or, with ``--kubeconfig``, lists the
cluster's nodes, and prints.

``infer``: the Topology object(s) on stdout (YAML or JSON), the report on stderr; exit 0 written,
1 no Topology (no node carries a topology label that makes a level), 2 bad usage or input.
``check``: the findings on stdout; exit 0 clean, 1 any finding, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from webhook.cli.flags import error, topology_name
from webhook.cli.output import write_output
from webhook.cli.topology_inputs import InputError, collector_paused, list_cluster_nodes, read_nodes, read_topologies
from webhook.kube.core import is_valid_label_key
from webhook.topology import infer as topology_infer
from webhook.topology.objects import Topology


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
    check.add_argument("--topology", metavar="NAME",
                       help="check only the Topology of this name in TOPOLOGY (a file `topology infer` wrote may "
                            "hold one Topology per hardware group, each meant for its own nodes)")
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


# ------------------------------------------------------------------------------------- commands

def _dump(documents: list[dict[str, Any]], output: str) -> str:
    if output == "json":
        doc = documents[0] if len(documents) == 1 else {"apiVersion": "v1", "kind": "List", "items": documents}
        return json.dumps(doc, indent=2) + "\n"
    return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=len(documents) > 1)


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


def _named(topologies: Sequence[Topology], name: str, filename: str) -> list[Topology]:
    """The Topology called ``name`` among ``topologies`` (read from ``filename``), as a one-item
    list. Raises :class:`InputError` naming the names there are when none is called so."""
    chosen = [topo for topo in topologies if topo.name == name]
    if not chosen:
        names = ", ".join(topo.name for topo in topologies)
        raise InputError(f"--topology {name}: {filename} holds no Topology of that name (it holds {names}); "
                         "fix: name one of them, or leave --topology out to check them all")
    return chosen


def run_check(args: argparse.Namespace) -> int:
    """``topology check``: exit 0 clean, 1 any finding, 2 bad input."""
    with collector_paused():
        try:
            topologies = read_topologies(args.filename)
            if args.topology is not None:
                topologies = _named(topologies, args.topology, args.filename)
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
