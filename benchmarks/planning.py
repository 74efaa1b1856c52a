"""Planning benchmark (DESIGN.md §13): what-if and capacity on the 10,000-node dump that
``benchmarks/placement.py`` writes, each timed against one plain ``place`` of the same workload on
the same loaded snapshot, printed as a ratio.

    python benchmarks/planning.py              # 10,000 nodes, 3 repetitions (median)
    python benchmarks/planning.py --nodes 2000 --reps 1

The dump (``realistic_dump``: 8 GPUs per node, two bound pods of 1, 2 or 4 GPUs per node, 8 nodes
per rack) is written as JSON and loaded once (snapshot and occupants; the load time is printed
apart). Each question is timed in-process from the parsed snapshot: a plain ``place`` is
:func:`webhook.planning.pipeline.place_workload` (expansion through the webhook, the cluster
index, the engine); a what-if is :func:`webhook.planning.whatif.what_if` (the same, then the
verified changes); capacity is building the index and :func:`webhook.planning.capacity.capacity`.

Questions:

* ``fits``: 512 workers of 2 GPUs, segments of 8 at rack (fits as is: the what-if stops there);
* ``size``: 128 one-GPU workers in one segment of 128 at rack (a rack has 64 GPUs: never fits; the
  what-if searches segment sizes and levels);
* ``free``: 64 eight-GPU workers in segments of 8 at rack (no node is empty: waiting for capacity;
  the what-if searches nodes to free);
* ``capacity``: gangs of 64 one-GPU pods, segments of 8 at rack, gang at block.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from placement import realistic_dump
from webhook.cli.what_if import load_cluster
from webhook.placement.cluster_index import ClusterIndex
from webhook.planning.capacity import capacity, parse_shape
from webhook.planning.gencluster import topology_object
from webhook.planning.pipeline import place_workload
from webhook.planning.whatif import planner_for, what_if

RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"


def job(workers: int, size: int, gpus: int) -> dict[str, Any]:
    """A PyTorchJob of ``workers`` workers of ``gpus`` GPUs, segments of ``size`` at rack."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": f"bench-{workers}-{size}-{gpus}"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": "cluster-topology",
                                             "kai.scheduler/segment-size": str(size),
                                             "kai.scheduler/segment-topology-required-placement": RACK}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {
                    "cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi", "nvidia.com/gpu": str(gpus)}}}]}}}}}}


QUESTIONS = {"fits": job(512, 8, 2), "size": job(128, 128, 1), "free": job(64, 8, 8)}
SHAPE = f"pods=64,segment-size=8,nvidia.com/gpu=1,segment-level={RACK},workload-level={BLOCK}"


Result = TypeVar("Result")


def timed(function: Callable[[], Result], reps: int) -> tuple[float, Result]:
    """Median seconds of ``reps`` calls of ``function`` (a collection before each) and its last result."""
    times = []
    for _ in range(max(1, reps)):
        gc.collect()
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000, help="nodes of the dump (default 10,000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per figure; the median is printed (default 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dump, topo = os.path.join(tmp, "cluster.json"), os.path.join(tmp, "topology.yaml")
        with open(dump, "w", encoding="utf-8") as fh:
            json.dump(realistic_dump(args.nodes), fh)
        with open(topo, "w", encoding="utf-8") as fh:
            yaml.safe_dump(topology_object(), fh)
        start = time.perf_counter()
        snapshot, occupants = load_cluster([dump], [topo])
        print(f"dump: {args.nodes:,} nodes, {os.path.getsize(dump) / 1e6:.0f} MB JSON; snapshot + occupants loaded in "
              f"{time.perf_counter() - start:.2f} s (not in the figures below)", flush=True)
    print(f"{'question':<10} {'plain place':>12} {'what-if':>10} {'ratio':>7}  verdict / changes")
    for name, workload in QUESTIONS.items():
        plain, placed = timed(partial(place_workload, workload, snapshot), args.reps)
        asked, result = timed(partial(what_if, workload, snapshot, occupants, planner_for(snapshot)), args.reps)
        changes = "; ".join(v.change.text for v in result.changes)[:150] or (result.no_change or "")[:150]
        print(f"{name:<10} {plain:>10.3f} s {asked:>8.3f} s {asked / plain:>7.1f}  {result.verdict}"
              f"{' (place exit ' + str(placed.exit_code) + ')'}: {changes}", flush=True)
    plain, _ = timed(lambda: place_workload(job(64, 8, 1), snapshot), args.reps)
    topology = snapshot.topologies[0]
    asked, report = timed(lambda: capacity(ClusterIndex(snapshot.nodes, topology), parse_shape(SHAPE)), args.reps)
    rows = sum(len(domains) for domains in report.levels.values()) + 1
    print(f"{'capacity':<10} {plain:>10.3f} s {asked:>8.3f} s {asked / plain:>7.1f}  {rows:,} domains; cluster: "
          f"{report.cluster.segments:,} segments, {report.cluster.gangs:,} gangs of 64", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
