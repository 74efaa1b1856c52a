"""``segment-webhook place ... --what-if``: does the workload fit now, the second opinion on a gang
another scheduler left pending, and the smallest verified changes that make it fit (DESIGN.md §13).

Reads the same inputs as ``place`` (every ``-f``, ``--cluster``, ``--topology-file`` and resolution
flag), runs :func:`webhook.planning.whatif.what_if` and prints a table, JSON or YAML. Exit 0 fits
as is, 1 does not fit (with or without changes) or denied, 2 bad input.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from webhook.admission.kinds.registry import gang_key
from webhook.admission.workload_api import pod_maps
from webhook.cli.flags import UsageError, error
from webhook.cli.output import write_output
from webhook.kube.nodes import SnapshotError
from webhook.kube.pods import is_pod, is_terminated, occupied_node, pod_ref
from webhook.placement.model import PlacementError
from webhook.planning.expand import ExpandError
from webhook.planning.freeing import Occupant, read_occupants
from webhook.planning.manifests import ManifestError
from webhook.planning.snapshot import Snapshot, build_snapshot, no_nodes_message, read_located
from webhook.planning.whatif import DENIED, EMPTY, FITS, NEVER, WhatIf, planner_for, waiting_text, what_if

VERDICT_TEXT = {
    FITS: "fits on today's free capacity: a placement exists",
    "waiting-for-capacity": "does not fit now, waiting for capacity",
    NEVER: "can never fit on this cluster, not even with every node free",
    DENIED: "denied by the webhook",
}


def load_cluster(paths: list[str], topology_paths: list[str]
                 ) -> tuple[Snapshot, dict[str, list[Occupant]], list[tuple[str, str | None]]]:
    """The snapshot of the ``--cluster`` dumps, who holds each node, and the pending pods (no node
    held, not terminated: ``(namespace/name, gang key or None)``), from one read of the files.
    Raises :class:`SnapshotError` as ``place`` does (including a dump without a Node)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        located = read_located(paths, topology_paths)
        snapshot = build_snapshot(located)
        occupants = read_occupants(obj for _, _, obj in located)
        pending = pending_pods(obj for _, _, obj in located)
    finally:
        if enabled:
            gc.enable()
    if paths and not snapshot.nodes:
        raise SnapshotError(no_nodes_message(paths))
    return snapshot, occupants, pending


def pending_pods(objects: Iterable[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """The Pods of ``objects`` that hold no node and are not terminated (pending, gated or not), as
    ``(namespace/name, gang key)`` (:func:`webhook.admission.kinds.registry.gang_key`; ``None`` when the
    pod names no gang). Malformed fields read as absent."""
    out: list[tuple[str, str | None]] = []
    for obj in objects:
        if not is_pod(obj) or is_terminated(obj) or occupied_node(obj):
            continue
        namespace, name = pod_ref(obj)
        labels, annotations = pod_maps(obj)
        out.append((f"{namespace}/{name}", gang_key(namespace, labels, annotations)))
    return out


def pending_of(result: WhatIf, pending: list[tuple[str, str | None]]) -> int:
    """How many of the dump's ``pending`` pods are the workload's: the same ``namespace/name`` as
    an expanded pod, or the same gang key (pods of a Job or JobSet have random name suffixes)."""
    pods, gangs = set(result.pods), set(result.gangs)
    return sum(1 for key, gang in pending if key in pods or (gang is not None and gang in gangs))


def summary(doc: dict[str, Any]) -> str:
    """One line for a placement document (:func:`webhook.planning.pipeline.result_document`):
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


def render(result: WhatIf, pending: int = 0) -> str:
    """The ``-o table`` text of a what-if. ``pending``: how many of the workload's pods the dump
    holds pending (:func:`pending_of`): only then does a ``fits`` verdict say that the scheduler
    that left them pending missed the placement."""
    doc = result.document()
    lines = [VERDICT_TEXT.get(result.verdict, result.verdict)]
    if result.fits:
        if pending:
            lines[0] += (f" ({pending} of its pods {'is' if pending == 1 else 'are'} pending in the dump: the "
                         "scheduler that left them pending missed this placement)")
        lines.append("  " + summary(doc["placement"]))
        return "\n".join(lines) + "\n"
    if result.waiting_for:
        lines[0] += f": {waiting_text(result)}"
    if result.verdict == DENIED:
        lines.append(f"  engine: {result.reason}")
        return "\n".join(lines) + "\n"
    if result.empty_reason:
        lines.append(f"  engine, with every node free: {result.empty_reason}")
    elif result.reason:
        lines.append(f"  engine, on today's free capacity: {result.reason}")
    if result.changes:
        if doc["changes"][0]["on"] == EMPTY:
            lines.append("no change fits on today's free capacity; smallest changes that fit once every node is free, "
                         "each verified by placing the changed workload on this cluster with every node free "
                         "(then it waits for capacity):")
        else:
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
        snapshot, occupants, pending = load_cluster(args.cluster, args.topology_file or [])
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
    waiting = pending_of(result, pending)
    doc = {**result.document(), "pending_pods": waiting}
    if args.output == "json":
        text = json.dumps(doc, indent=2) + "\n"
    elif args.output == "yaml":
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    else:
        text = render(result, waiting)
    return write_output(text, "place") or result.exit_code
