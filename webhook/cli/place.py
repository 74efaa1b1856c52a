"""``segment-webhook place``: place a workload on a cluster snapshot (dry run of the scheduler).

Reads the files (:mod:`webhook.planning.manifests`, :func:`webhook.planning.snapshot.load_snapshot`),
runs :func:`webhook.planning.pipeline.place_workload` and renders its result as a table, JSON,
YAML and optionally SVG. Exit codes: 0 placed, 1 not placed or denied by the webhook, 2 bad input
(the message names the file, the object and the field).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from webhook.cli.flags import UsageError, add_target_flag, add_topology_flags, check_writable_file, error
from webhook.cli.output import write_output
from webhook.cli.workload_files import load_workload
from webhook.kube.nodes import SnapshotError
from webhook.placement.engine import Placement, PlacementError
from webhook.planning.expand import ExpandError
from webhook.planning.manifests import ManifestError
from webhook.planning.pipeline import place_workload
from webhook.planning.snapshot import load_snapshot


def register(subparsers: Any) -> None:
    """Add ``place`` to the ``segment-webhook`` command line."""
    p = subparsers.add_parser("place", help="place a workload on a cluster snapshot (dry run of the scheduler)",
                              description="Expand a workload into its pods, pass them through the webhook and place "
                                          "them on a cluster snapshot. Exit 0 placed, 1 not placed/denied, 2 bad input.")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="the workload manifest (one object of a kind the webhook admits); repeatable: a TrainJob's "
                        "ClusterTrainingRuntime / TrainingRuntime may be in the same file or another -f")
    p.add_argument("--cluster", action="append", required=True, metavar="FILE",
                   help="kubectl get nodes/pods/topologies -o yaml|json output (repeatable)")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table",
                   help="table: one line per segment and a summary (default); json/yaml: the placement result "
                        "(placed, assignments, segments, workload, reason)")
    p.add_argument("--svg", metavar="FILE", help="write an SVG drawing of the placement")
    p.add_argument("--user", default="kubectl-user", help="request.userInfo.username the webhook sees (default: kubectl-user)")
    p.add_argument("--group", action="append", default=[], help="request.userInfo.groups entry (repeatable)")
    p.add_argument("--what-if", action="store_true",
                   help="when it does not fit: fits / waiting for capacity / can never fit (a second opinion on a "
                        "pending gang), and the smallest changes that fit, each verified by the engine "
                        "(docs/concepts/planning.md); exit 0 fits as is, 1 does not")
    add_topology_flags(p, env=False)  # the resolution flags of `serve` and `review`
    add_target_flag(p)
    p.set_defaults(func=run)


def render_table(result: dict[str, Any]) -> str:
    """The ``-o table`` text of a result document (:func:`webhook.planning.pipeline.result_document`)."""
    if not result["placed"]:
        unproven = " (search budget reached: not proven)" if result.get("exact") is False else ""
        reason: str = result["reason"]
        return reason + unproven + "\n"
    lines = [f"{'SEGMENT':<8} {'PODS':>4}  {'LEVEL':<34} {'DOMAIN':<20} NODES"]
    for s in result["segments"]:
        nodes = sorted({result["assignments"][p] for p in s["pods"]})
        seg = f"{s.get('group', 0)}/{s['index']}" if "group" in s else str(s["index"])
        lines.append(f"{seg:<8} {len(s['pods']):>4}  {s['level']:<34} {s['domain']:<20} {','.join(nodes)}")
    in_seg = {p for s in result["segments"] for p in s["pods"]}
    for pod, node in result["assignments"].items():
        if pod not in in_seg:
            lines.append(f"{'-':<8} {1:>4}  {'(no segment)':<34} {'':<20} {node}  ({pod})")
    by_level: dict[str, int] = {}
    for s in result["segments"]:
        by_level[s["level"]] = by_level.get(s["level"], 0) + 1
    node_count = len(set(result["assignments"].values()))
    summary = ", ".join(f"{n} at {lv}" for lv, n in by_level.items()) or "no segments"
    lines.append("")
    wl = result["workload"]
    where = "spans the whole cluster" if wl["level"] == "cluster" else f"meets at {wl['level']}={wl['domain']}"
    lines.append(f"placed: {len(result['assignments'])} pods on {node_count} node{'s' if node_count != 1 else ''}; "
                 f"workload {where}; segments: {summary}")
    target = result.get("target")
    if target:
        for pods, annotations in target["annotations"].items():
            shown = ", ".join(f"{key}={value}" for key, value in annotations.items())
            lines.append(f"target {target['name']} ({pods}): {shown}")
    if result.get("exact") is False:
        lines.append("best placement found within the search budget, not proven optimal (DESIGN.md §8 \"Exact\")")
    return "\n".join(lines) + "\n"


#: The fix of an ``--svg`` file that cannot be written.
SVG_FIX = "give a file in an existing directory you can write to (e.g. --svg placement.svg)"


def run(args: argparse.Namespace) -> int:
    """The ``place`` command: exit 0 placed, 1 not placed or denied, 2 bad input."""
    if getattr(args, "what_if", False):
        from webhook.cli.what_if import run_what_if

        return run_what_if(args)
    try:
        if args.svg:
            check_writable_file(args.svg, "--svg", SVG_FIX)
        snapshot = load_snapshot(args.cluster, args.topology_file or [])
        given = load_workload(args.filename)
        workload = given.workload
        out = place_workload(workload, snapshot, user=args.user, groups=args.group,
                             platform_users=args.platform_user or [], platform_groups=args.platform_group or [],
                             default_topology=args.default_topology, runtimes=given.runtimes,
                             target=args.target, kueue_version=args.kueue_version)
    except (SnapshotError, ManifestError, PlacementError, UsageError) as exc:
        return error("place", str(exc))
    except ExpandError as exc:  # a problem of the workload's file, or of its runtime's: name it
        return error("place", f"{given.source_of(exc.runtime)}: {exc}")
    for w in out.warnings:  # each distinct warning once, with its count
        print(f"Warning: {w}", file=sys.stderr)  # as kubectl and `review` print them
    result = out.document
    if args.output == "json":
        text = json.dumps(result, indent=2) + "\n"
    elif args.output == "yaml":
        text = yaml.safe_dump(result, sort_keys=False, allow_unicode=True)
    else:
        text = render_table(result)
    written = write_output(text, "place")
    if written:
        return written
    if args.svg:
        from webhook.planning.svg import render

        p = out.placement or Placement(placed=False, reason=result["reason"])
        if out.index is not None:
            svg = render(out.index, p, title=f"{workload['kind']} {workload['metadata'].get('name')}")
            try:
                with open(args.svg, "w", encoding="utf-8") as fh:
                    fh.write(svg)
            except OSError as exc:
                return error("place", f"--svg {args.svg}: cannot write: {exc.strerror}; fix: {SVG_FIX}")
    return out.exit_code
