"""``segment-webhook topology export``: a Topology and the nodes' labels as Volcano HyperNodes or a
Slurm ``topology.yaml`` (DESIGN.md §13). The rules are :mod:`webhook.topology.export`'s; this
module reads the files (as ``topology check`` does), prints the objects on stdout and the §12
findings (the dropped nodes named) on stderr.

Exit 0 written, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from webhook.cli.flags import error
from webhook.cli.output import write_output
from webhook.topology import export as topology_export
from webhook.topology import infer as topology_infer


def add_export_parser(sub: Any) -> None:
    """Add ``export`` to the ``topology`` sub-commands."""
    export = sub.add_parser(
        "export", help="write the Topology as Volcano HyperNodes or a Slurm topology.yaml",
        description="Write a Topology and the nodes' labels as Volcano HyperNodes (topology.volcano.sh/v1alpha1: "
                    "one per domain, tier 1 = the narrowest level) or a Slurm topology.yaml (tree or block plugin). "
                    "Nodes that lack a level label are left out and named on stderr, with the other DESIGN.md §12 "
                    "findings. Exit 0 written, 2 bad input.")
    export.add_argument("-f", "--filename", required=True, metavar="TOPOLOGY", help="file with Topology objects")
    export.add_argument("--nodes", required=True, metavar="NODES", help="kubectl get nodes -o yaml|json output")
    export.add_argument("--format", required=True, choices=("volcano", "slurm"), help="volcano or slurm")
    export.add_argument("--topology", metavar="NAME", help="which Topology of the file (default: the only one)")
    export.add_argument("--members", choices=("name", "labels"),
                        help="volcano only: tier-1 HyperNode members by exact node name (default) or by one label "
                             "selector")
    export.add_argument("--plugin", choices=("tree", "block"),
                        help="slurm only: the topology/tree (default) or topology/block form")
    export.add_argument("--block-level", metavar="KEY", help="slurm block only: the level whose domains are the "
                                                              "blocks (default: the narrowest level)")
    export.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="format (default: yaml)")
    export.set_defaults(func=run_export)


def _render(documents: Any, output: str, volcano: bool) -> str:
    if output == "json":
        doc = {"apiVersion": "v1", "kind": "List", "items": documents} if volcano else documents
        return json.dumps(doc, indent=2) + "\n"
    if volcano:
        return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)
    return yaml.safe_dump(documents, sort_keys=False)


def format_flag_problem(args: argparse.Namespace) -> str | None:
    """The message for a flag of one ``--format`` given with the other (it would be ignored), or
    ``None``: ``--plugin`` and ``--block-level`` are Slurm's, ``--members`` Volcano's; ``--block-level``
    also needs ``--plugin block``."""
    if args.format == "volcano":
        for flag, value in (("--plugin", args.plugin), ("--block-level", args.block_level)):
            if value is not None:
                return (f"{flag} {value}: {flag} is for --format slurm, and Volcano HyperNodes have no such setting "
                        "(their tiers are the Topology's levels, tier 1 the narrowest); fix: leave out "
                        f"{flag}, or use --format slurm")
    else:
        if args.members is not None:
            return (f"--members {args.members}: --members is for --format volcano (how a tier-1 HyperNode names its "
                    "nodes); a Slurm topology.yaml always lists node names; fix: leave out --members, or use "
                    "--format volcano")
        if args.block_level is not None and args.plugin != "block":
            return (f"--block-level {args.block_level}: --block-level is for the topology/block plugin, and the "
                    f"plugin is {args.plugin or 'tree (the default)'}; fix: add --plugin block, or leave out "
                    "--block-level")
    return None


def run_export(args: argparse.Namespace) -> int:
    """``topology export``: exit 0 written, 2 bad input (also a flag of the other ``--format``:
    :func:`format_flag_problem`)."""
    from webhook.cli.topology_inputs import InputError, collector_paused, read_nodes, read_topologies

    problem = format_flag_problem(args)
    if problem:
        return error("topology export", problem)
    with collector_paused():
        try:
            topologies = read_topologies(args.filename)
            nodes = read_nodes(args.nodes)
            names = [t.name for t in topologies]
            if args.topology is None and len(topologies) > 1:
                raise InputError(f"{args.filename} holds several Topologies ({', '.join(names)}); "
                                 "fix: name one with --topology")
            chosen = next((t for t in topologies if args.topology in (None, t.name)), None)
            if chosen is None:
                raise InputError(f"--topology {args.topology} is not in {args.filename}; it holds {', '.join(names)}")
            export = topology_export.domains_of(chosen.name, chosen.levels, nodes)
            if args.format == "volcano":
                documents: Any = topology_export.volcano_hypernodes(export, members=args.members or "name")
            else:
                documents = topology_export.slurm_topology(export, plugin=args.plugin or "tree",
                                                           block_level=args.block_level)
        except (InputError, topology_export.ExportError) as exc:
            return error("topology export", exc)
    written = write_output(_render(documents, args.output, args.format == "volcano"), "topology export")
    for finding in export.findings:
        print(finding.text(), file=sys.stderr)
    if export.dropped:
        print(f"left out: {len(export.dropped)} node{'s' if len(export.dropped) != 1 else ''} without every level "
              f"of Topology {chosen.name}: {topology_infer.names_text(export.dropped)}", file=sys.stderr)
    return written
