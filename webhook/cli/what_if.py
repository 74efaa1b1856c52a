"""``segment-webhook place ... --what-if``: does the workload fit now, the second opinion on a gang
another scheduler left pending, and the smallest verified changes that make it fit (DESIGN.md §13).

Reads the same inputs as ``place`` (every ``-f``, ``--cluster``, ``--topology-file`` and resolution
flag), runs :func:`webhook.placement.whatif.what_if` and prints a table, JSON or YAML. Exit 0 fits
as is, 1 does not fit (with or without changes) or denied, 2 bad input.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from typing import Any

import yaml

from webhook.cli.flags import UsageError, error
from webhook.cli.output import write_output
from webhook.manifests import ManifestError
from webhook.placement.expand import ExpandError
from webhook.placement.freeing import Occupant, read_occupants
from webhook.placement.model import PlacementError
from webhook.placement.snapshot import Snapshot, SnapshotError, build_snapshot, read_located
from webhook.placement.whatif import DENIED, FITS, NEVER, WhatIf, planner_for, what_if

VERDICT_TEXT = {
    FITS: "fits on today's free capacity: a placement exists (for a gang another scheduler left pending: it missed this one)",
    "waiting-for-capacity": "does not fit now, waiting for capacity",
    NEVER: "can never fit on this cluster, not even with every node free",
    DENIED: "denied by the webhook",
}


def load_cluster(paths: list[str], topology_paths: list[str]) -> tuple[Snapshot, dict[str, list[Occupant]]]:
    """The snapshot of the ``--cluster`` dumps and who holds each node, from one read of the files.
    Raises :class:`SnapshotError` as ``place`` does (including a dump without a Node)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        located = read_located(paths, topology_paths)
        snapshot = build_snapshot(located)
        occupants = read_occupants(obj for _, _, obj in located)
    finally:
        if enabled:
            gc.enable()
    if paths and not snapshot.nodes:
        raise SnapshotError(f"{', '.join(paths)}: no Node objects (dump them with `kubectl get nodes -o yaml`)")
    return snapshot, occupants


def summary(doc: dict[str, Any]) -> str:
    """One line for a placement document (:func:`webhook.placement.pipeline.result_document`):
    pods, nodes, where the workload meets, segments per level."""
    nodes = len(set(doc["assignments"].values()))
    by_level: dict[str, int] = {}
    for seg in doc["segments"]:
        by_level[seg["level"]] = by_level.get(seg["level"], 0) + 1
    segments = ", ".join(f"{n} at {level}" for level, n in by_level.items()) or "no segments"
    workload = doc["workload"] or {"level": "cluster", "domain": "cluster"}
    where = "spans the whole cluster" if workload["level"] == "cluster" else \
        f"meets at {workload['level']}={workload['domain']}"
    return (f"placed: {len(doc['assignments'])} pods on {nodes} node{'s' if nodes != 1 else ''}; "
            f"workload {where}; segments: {segments}")


def render(result: WhatIf) -> str:
    """The ``-o table`` text of a what-if."""
    doc = result.document()
    lines = [VERDICT_TEXT.get(result.verdict, result.verdict)]
    if result.fits:
        lines.append("  " + summary(doc["placement"]))
        return "\n".join(lines) + "\n"
    if result.waiting_for:
        lines[0] += f": {result.waiting_for['text'].split('; engine: ')[0].removeprefix('waiting for capacity: ')}"
    if result.reason:
        lines.append(f"  engine: {result.reason}")
    if result.verdict == DENIED:
        return "\n".join(lines) + "\n"
    if result.changes:
        lines.append("smallest changes that fit, each verified by placing the changed workload on this snapshot:")
        for number, verified in enumerate(doc["changes"], 1):
            lines.append(f"  {number}. {verified['change']['text']}")
            lines.append(f"     {summary(verified['placement'])}")
    else:
        lines.append(f"no change within the search bound fits: {result.no_change}")
    return "\n".join(lines) + "\n"


def run_what_if(args: argparse.Namespace) -> int:
    """``place --what-if``: exit 0 fits as is, 1 does not fit or denied, 2 bad input."""
    from webhook.cli.workload_files import load_workload

    given = None
    try:
        if args.svg:
            raise UsageError("--svg draws one placement and does not go with --what-if; fix: leave out --svg, "
                             "or run place without --what-if")
        snapshot, occupants = load_cluster(args.cluster, args.topology_file or [])
        given = load_workload(args.filename)
        planner = planner_for(snapshot, user=args.user, groups=args.group,
                              platform_users=args.platform_user or [], platform_groups=args.platform_group or [],
                              default_topology=args.default_topology, runtimes=given.runtimes)
        result = what_if(given.workload, snapshot, occupants, planner)
    except (SnapshotError, ManifestError, PlacementError, UsageError) as exc:
        return error("place", str(exc))
    except ExpandError as exc:
        where = given.source_of(exc.runtime) if given is not None else ""
        return error("place", f"{where}: {exc}" if where else str(exc))
    for warning in result.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    if args.output == "json":
        text = json.dumps(result.document(), indent=2) + "\n"
    elif args.output == "yaml":
        text = yaml.safe_dump(result.document(), sort_keys=False, allow_unicode=True)
    else:
        text = render(result)
    return write_output(text, "place") or result.exit_code
