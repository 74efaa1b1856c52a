"""``segment-webhook place`` and ``segment-webhook gen-cluster`` (issue 3 §4).

Exit codes (``webhook.cli``): 0 placed / written, 1 not placed or denied by the webhook,
2 bad input (the message names the file, the object and the field).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

import yaml

from webhook.core.decision import AdmissionSettings
from webhook.core.topology import StaticTopologyCatalog, default_catalog
from webhook.placement.engine import ClusterIndex, Placement, PlacementError, place, shared_domain
from webhook.placement.expand import ExpandError, expand
from webhook.placement.snapshot import SnapshotError, load_snapshot, parse_documents


def register(subparsers) -> None:
    """Add the ``place`` and ``gen-cluster`` sub-commands to an argparse sub-parser set."""
    p = subparsers.add_parser("place", help="place a workload on a cluster snapshot (dry run of the scheduler)",
                              description="Expand a workload into its pods, pass them through the webhook and place "
                                          "them on a cluster snapshot. Exit 0 placed, 1 not placed/denied, 2 bad input.")
    p.add_argument("-f", "--filename", required=True, metavar="WORKLOAD", help="PyTorchJob, LeaderWorkerSet or DistributedWorkload manifest")
    p.add_argument("--cluster", action="append", required=True, metavar="FILE",
                   help="kubectl get nodes/pods/topologies -o yaml|json output (repeatable)")
    p.add_argument("--topology-file", action="append", default=[], metavar="F", help="extra Topology objects (repeatable)")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.add_argument("--svg", metavar="FILE", help="write an SVG drawing of the placement")
    p.add_argument("--user", default="kubectl-user", help="request.userInfo.username the webhook sees (default: kubectl-user)")
    p.add_argument("--group", action="append", default=[], help="request.userInfo.groups entry (repeatable)")
    p.add_argument("--platform-user", action="append", default=[], help="identity that gets automatic placement (repeatable)")
    p.add_argument("--platform-group", action="append", default=[], help="group that gets automatic placement (repeatable)")
    p.set_defaults(func=run_place)

    g = subparsers.add_parser("gen-cluster", help="write a synthetic cluster snapshot (Nodes, Pods, Topology)")
    g.add_argument("--zones", type=int, default=2)
    g.add_argument("--blocks", type=int, default=2, help="blocks per zone")
    g.add_argument("--racks", type=int, default=4, help="racks per block")
    g.add_argument("--nodes", type=int, default=4, help="nodes per rack")
    g.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    g.add_argument("--fill", type=float, default=0.3, help="share of GPUs taken by bound pods (0..1)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    g.set_defaults(func=run_gen_cluster)


def _err(command: str, msg: str) -> int:
    """Print ``segment-webhook <command>: error: <msg>`` (the prefix ``review``, ``serve`` and
    ``certs`` use) to stderr; return exit code 2."""
    print(f"segment-webhook {command}: error: {msg}", file=sys.stderr)
    return 2


def run_gen_cluster(args: argparse.Namespace) -> int:
    """Write a synthetic snapshot; exit 2 on bad arguments or an unwritable file."""
    from webhook.placement.gencluster import generate

    try:
        doc = generate(args.zones, args.blocks, args.racks, args.nodes, args.gpus, args.fill, args.seed)
    except ValueError as exc:
        return _err("gen-cluster", str(exc))
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(doc, Dumper=dumper, sort_keys=False, default_flow_style=False)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            return _err("gen-cluster", f"{args.output}: cannot write: {exc.strerror}")
    else:
        sys.stdout.write(text)
    return 0


def _load_workload(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror}") from None
    docs = [d for d in parse_documents(text, path) if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise SnapshotError(f"{path}: expected exactly one workload object, found {len(docs)} documents")
    return docs[0]


def place_workload(workload: dict, snapshot, *, user: str = "kubectl-user", groups=(), platform_users=(),
                   platform_groups=()) -> dict[str, Any]:
    """Expand, admit and place ``workload`` on ``snapshot``; the engine of ``place``.

    Returns ``{"exit": 0|1, "result": <json dict>, "index": ClusterIndex|None, "placement": Placement|None,
    "warnings": [...]}``. Raises :class:`ExpandError`, :class:`PlacementError` for bad input.
    Topology catalog: the snapshot's topologies, or the embedded default when it has none;
    ``default_topology`` is the only topology when exactly one is loaded.
    """
    fallback = default_catalog()
    topologies = snapshot.topologies or [fallback.get(name) for name in fallback.names()]
    catalog = StaticTopologyCatalog(topologies)
    settings = AdmissionSettings(platform_users=frozenset(platform_users), platform_groups=frozenset(platform_groups),
                                 default_topology=topologies[0].name if len(topologies) == 1 else None)
    exp = expand(workload, catalog, settings, user=user, groups=list(groups))
    if exp.denied:
        return {"exit": 1, "result": _json(None, None, f"denied by the webhook: {exp.message}"),
                "index": None, "placement": None, "warnings": exp.warnings}
    topo = catalog.get(exp.topology) if exp.topology else None
    if exp.topology and topo is None:
        raise PlacementError(f"topology {exp.topology!r} is not in the snapshot; known: {catalog.names()}")
    index = ClusterIndex(snapshot.nodes, topo)
    saved = index.free.copy()
    merged = Placement(placed=True)
    reasons = []
    for gang in exp.gangs:
        res = place(index, gang)
        if not res.placed:
            reasons.append(f"{gang.name}: {res.reason}" if len(exp.gangs) > 1 else res.reason)
            break
        index.commit(res, gang.pods)
        merged.assignments.update(res.assignments)
        merged.segments.extend(res.segments)
    index.free[:] = saved
    if reasons:
        return {"exit": 1, "result": _json(None, None, "not placed: " + reasons[0]), "index": index,
                "placement": Placement(placed=False, reason=reasons[0]), "warnings": exp.warnings}
    if merged.assignments:
        merged.workload_level, merged.workload_domain = shared_domain(index, list(merged.assignments.values()))
    result = _json(merged, index, None)
    if workload.get("kind") == "LeaderWorkerSet":  # segments are numbered per LWS group (replica)
        for seg, res in zip(merged.segments, result["segments"]):
            res["group"] = seg.group
    return {"exit": 0, "result": result, "index": index, "placement": merged,
            "warnings": exp.warnings}


def _natural(text: str) -> tuple:
    """Sort key that orders ``worker-2`` before ``worker-10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _json(p: Placement | None, index, reason: str | None) -> dict:
    if p is None:
        return {"placed": False, "assignments": {}, "segments": [], "workload": None, "reason": reason}
    segs = []
    for s in p.segments:
        segs.append({"index": s.index, "domain": s.domain, "level": s.level, "pods": s.pods})
    return {"placed": True, "assignments": dict(sorted(p.assignments.items(), key=lambda kv: _natural(kv[0]))), "segments": segs,
            "workload": {"domain": p.workload_domain, "level": p.workload_level}, "reason": None}


def _table(result: dict, placement: Placement | None) -> str:
    if not result["placed"]:
        return result["reason"] + "\n"
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
    nodes = len(set(result["assignments"].values()))
    summary = ", ".join(f"{n} at {lv}" for lv, n in by_level.items()) or "no segments"
    lines.append("")
    wl = result["workload"]
    where = "spans the whole cluster" if wl["level"] == "cluster" else f"meets at {wl['level']}={wl['domain']}"
    lines.append(f"placed: {len(result['assignments'])} pods on {nodes} node{'s' if nodes != 1 else ''}; "
                 f"workload {where}; segments: {summary}")
    return "\n".join(lines) + "\n"


def run_place(args: argparse.Namespace) -> int:
    """The ``place`` command: exit 0 placed, 1 not placed or denied, 2 bad input."""
    try:
        snapshot = load_snapshot(args.cluster, args.topology_file)
        workload = _load_workload(args.filename)
        out = place_workload(workload, snapshot, user=args.user, groups=args.group,
                             platform_users=args.platform_user, platform_groups=args.platform_group)
    except (SnapshotError, PlacementError) as exc:
        return _err("place", str(exc))
    except ExpandError as exc:  # a problem of the workload file: name it
        return _err("place", f"{args.filename}: {exc}")
    for w in out["warnings"]:
        print(f"Warning: {w}", file=sys.stderr)  # as kubectl and `review` print them
    result = out["result"]
    if args.output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(result, sort_keys=False))
    else:
        sys.stdout.write(_table(result, out["placement"]))
    if args.svg:
        from webhook.placement.svg import render

        p = out["placement"] or Placement(placed=False, reason=result["reason"])
        if out["index"] is not None:
            svg = render(out["index"], p, title=f"{workload['kind']} {workload['metadata'].get('name')}")
            try:
                with open(args.svg, "w", encoding="utf-8") as fh:
                    fh.write(svg)
            except OSError as exc:
                return _err("place", f"{args.svg}: cannot write: {exc.strerror}")
    return out["exit"]
