"""``segment-webhook gen-cluster``: write a synthetic cluster snapshot (Nodes, Pods, Topology)
made by :func:`webhook.planning.gencluster.generate`. Exit 0 written, 2 bad flag or unwritable file.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from webhook.cli.flags import error
from webhook.cli.output import write_output


def register(subparsers: Any) -> None:
    """Add ``gen-cluster`` to the ``segment-webhook`` command line."""
    g = subparsers.add_parser(
        "gen-cluster", help="write a synthetic cluster snapshot (Nodes, Pods, Topology)",
        description="Write a kind: List of Nodes labelled zone > block > rack > hostname, bound Running pods "
                    "taking --fill of the GPUs, and the Topology 'cluster-topology', for place --cluster.")
    g.add_argument("--zones", type=int, default=2, help="zones (topology.kubernetes.io/zone) (default: %(default)s)")
    g.add_argument("--blocks", type=int, default=2, help="blocks per zone (default: %(default)s)")
    g.add_argument("--racks", type=int, default=4, help="racks per block (default: %(default)s)")
    g.add_argument("--nodes", type=int, default=4, help="nodes per rack (default: %(default)s)")
    g.add_argument("--gpus", type=int, default=8, help="GPUs per node (default: %(default)s)")
    g.add_argument("--fill", type=float, default=0.3, help="share of GPUs taken by bound pods (0..1) (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="random seed of the bound pods' sizes and nodes (default: %(default)s)")
    g.add_argument("--labels", choices=("eks", "gke", "oci", "nebius", "topograph"), default=None,
                   help="label the nodes as that provider or tool does (its topology keys, node names and attribute "
                        "labels such as instance type and GPU product) and write a Topology of its levels; "
                        "default: zone/block/rack keys of cluster-topology")
    g.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    g.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write a synthetic snapshot; exit 2 on bad arguments or an unwritable file."""
    from webhook.planning.gencluster import generate

    try:
        doc = generate(args.zones, args.blocks, args.racks, args.nodes, args.gpus, args.fill, args.seed, labels=args.labels)
    except ValueError as exc:
        return error("gen-cluster", str(exc))
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(doc, Dumper=dumper, sort_keys=False, default_flow_style=False)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            return error("gen-cluster", f"{args.output}: cannot write: {exc.strerror}")
        return 0
    return write_output(text, "gen-cluster")
