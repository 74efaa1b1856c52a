"""``segment-webhook capacity``: how many gangs and segments of one shape fit now, per domain of each
topology level, and the capacity stranded for that shape (DESIGN.md §13). The counting is
:func:`webhook.planning.capacity.capacity`'s; this module reads the files and prints.

Exit 0 report written, 1 the ``-f`` workload is denied by the webhook (as ``place``), 2 bad input
(the message names the flag, file or field).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

import yaml

from webhook.cli.flags import UsageError, error
from webhook.cli.output import write_output
from webhook.errors import EXIT_DENIED, SegmentWebhookError
from webhook.kube.core import HOSTNAME
from webhook.kube.nodes import SnapshotError
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.model import PlacementError
from webhook.planning.capacity import CapacityError, GangShape, capacity, parse_shape, report_document
from webhook.planning.expand import ExpandError, Expansion
from webhook.planning.manifests import ManifestError
from webhook.planning.snapshot import Snapshot, load_snapshot, topologies_or_default
from webhook.text.messages import quote


def register(subparsers: Any) -> None:
    """Add ``capacity`` to the ``segment-webhook`` command line."""
    p = subparsers.add_parser(
        "capacity", help="how many gangs and segments of a shape fit now, per domain (DESIGN.md §13)",
        description="For each domain of each level of a Topology: how many gangs and how many segments of one "
                    "shape fit now at once (computed exactly from the snapshot's free capacity), the free capacity "
                    "and what is stranded for that shape. Exit 0 written, 1 the -f workload is denied by the webhook, "
                    "2 bad input.")
    p.add_argument("--cluster", action="append", required=True, metavar="FILE",
                   help="kubectl get nodes,pods[,topologies] -A -o yaml|json output (repeatable)")
    p.add_argument("--topology-file", action="append", default=[], metavar="FILE",
                   help="Topology objects, when the dump has none (repeatable)")
    p.add_argument("--topology", metavar="NAME", help="the Topology to count on (default: the only one loaded)")
    shape = p.add_mutually_exclusive_group(required=True)
    shape.add_argument("--shape", metavar="SHAPE",
                       help="pods=N,segment-size=S,<resource>=<quantity>[,...][,segment-level=KEY][,workload-level=KEY] "
                            "(e.g. pods=32,segment-size=8,nvidia.com/gpu=1,segment-level=cloud.provider.com/topology-rack)")
    shape.add_argument("-f", "--filename", metavar="FILE",
                       help="a workload manifest that stands for the shape: its pod count, segment size, levels and "
                            "the requests of its most common pod, as the webhook resolves them")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table",
                   help="table: one line per domain above the nodes (default); json/yaml: every domain, nodes included, "
                        "with free and stranded capacity")
    p.add_argument("--per-node", action="store_true",
                   help="the table also gets one line per node (the kubernetes.io/hostname level); by default it "
                        "sums up per domain of the broader levels")
    p.set_defaults(func=run)


class WorkloadDenied(SegmentWebhookError):
    """The ``-f`` workload is one the webhook denies: exit 1, as ``place`` (the message is the
    webhook's)."""

    exit_code = EXIT_DENIED


def shape_of(exp: Expansion, source: str) -> GangShape:
    """The shape a workload manifest stands for: its first gang's pod count, resolved segment size
    (the gang's size when unsegmented), levels, and the requests of its most common pod. Raises
    :class:`WorkloadDenied` when the webhook denied it."""
    if exp.denied:
        raise WorkloadDenied(f"{source}: denied by the webhook: {exp.message}")
    gang = exp.gangs[0]
    counts: Counter[tuple[tuple[str, int], ...]] = Counter(tuple(sorted(p.requests.items())) for p in gang.pods)
    requests = dict(counts.most_common(1)[0][0])
    per_segment = Counter(p.segment for p in gang.pods if p.segment is not None)
    size = max(per_segment.values()) if per_segment else len(gang.pods)
    return GangShape(len(gang.pods), size, requests, gang.segment_required, gang.workload_required)


def _index(snapshot: Snapshot, name: str | None) -> ClusterIndex:
    """The cluster index of Topology ``name`` (``None``: the only one loaded). A dump without a
    Topology is read with the embedded default catalog, as ``place`` and ``controller --once`` read
    it (:func:`webhook.planning.pipeline.place_workload`)."""
    topologies = topologies_or_default(snapshot)
    names = [t.name for t in topologies]
    if name is None:
        if len(names) > 1:
            raise UsageError(f"several Topologies are loaded ({', '.join(names)}); fix: name one with --topology")
        name = names[0]
    topo = next((t for t in topologies if t.name == name), None)
    if topo is None:
        raise UsageError(f"--topology {quote(name)} is not loaded; loaded: {', '.join(names)}; "
                         "fix: name one of them, or add the Topology with --topology-file")
    return ClusterIndex(snapshot.nodes, topo)


def _shape(args: argparse.Namespace, snapshot: Snapshot) -> tuple[GangShape, str | None]:
    if args.shape is not None:
        return parse_shape(args.shape), args.topology
    from webhook.cli.workload_files import load_workload
    from webhook.planning.whatif import planner_for

    given = load_workload(args.filename)
    planner = planner_for(snapshot, runtimes=given.runtimes)
    try:
        exp = planner.expand(given.workload)
    except ExpandError as exc:  # a problem of the workload's file, or of its runtime's: name it, as place does
        raise ExpandError(f"{given.source_of(exc.runtime)}: {exc}") from None
    for warning in exp.warnings:  # the webhook's warnings (and the name used), each once, as place prints them
        print(f"Warning: {warning}", file=sys.stderr)
    return shape_of(exp, given.source), args.topology or exp.topology


def render(doc: dict[str, Any], per_node: bool = False) -> str:
    """The ``-o table`` text: the shape, then one line per domain (broadest level first). The node
    level (``kubernetes.io/hostname``, one line per node) only with ``per_node``; without it a
    last line says how many node lines were left out and how to show them."""
    shape = doc["shape"]
    resource = doc["resources"][0]
    lines = [f"shape: {shape['pods']} pods per gang, segments of {shape['segment_size']} at "
             f"{shape['segment_level'] or 'any level'}, gang at {shape['workload_level'] or 'any level'}; "
             f"topology {doc['topology']}",
             f"{'LEVEL':<34} {'DOMAIN':<24} {'NODES':>6} {'FREE ' + resource:>20} {'SEGMENTS':>9} {'GANGS':>6} "
             f"{'STRANDED':>9}"]
    levels = [lv for lv in doc["levels"] if per_node or lv["level"] != HOSTNAME]
    rows = [("cluster", doc["cluster"])] + [(lv["level"], d) for lv in levels for d in lv["domains"]]
    for level, d in rows:
        lines.append(f"{level:<34} {d['domain']:<24} {d['nodes']:>6} {d['free'][resource]:>20} {d['segments']:>9} "
                     f"{d['gangs']:>6} {d['stranded'][resource]:>9}")
    lines.append(f"STRANDED: free {resource} on eligible nodes that no segment of this shape can use")
    left_out = sum(len(lv["domains"]) for lv in doc["levels"] if lv not in levels)
    if left_out:
        lines.append(f"{left_out} node line{'s' if left_out != 1 else ''} ({HOSTNAME}) left out; --per-node shows them")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """The ``capacity`` command: exit 0 written, 1 the ``-f`` workload denied, 2 bad input."""
    try:
        snapshot = load_snapshot(args.cluster, args.topology_file)
        shape, topology = _shape(args, snapshot)
        report = capacity(_index(snapshot, topology), shape)
    except WorkloadDenied as exc:  # exit 1, as place
        return error("capacity", exc)
    except (SnapshotError, ManifestError, PlacementError, CapacityError, UsageError, ExpandError) as exc:
        return error("capacity", str(exc))
    doc = report_document(report)
    if args.output == "json":
        text = json.dumps(doc, indent=2) + "\n"
    elif args.output == "yaml":
        text = yaml.safe_dump(doc, sort_keys=False)
    else:
        text = render(doc, args.per_node)
    return write_output(text, "capacity")

