"""Advisory controller benchmark (issue 36 item 3, DESIGN.md §13): seconds from a pending gang's
reconcile to its second opinion, on the dump of ``benchmarks/placement.py`` (``realistic_dump``:
8 GPUs per node, two bound pods of 1, 2 or 4 GPUs per node, 8 nodes per rack), 5,000 nodes by
default.

    python benchmarks/advisory.py                   # 5,000 nodes, 40 gangs
    python benchmarks/advisory.py --nodes 1000 --gangs 10

Each gang is timed as the live advisory controller handles it (:class:`webhook.controller.advisor.
Advisor`): a copy of the capacity ledger's cluster index (``CapacityLedger.index_copy``) and
:func:`webhook.controller.advisory.advise` (the what-if of the gang's PyTorchJob, restricted to the
gang; no change search for a gang waiting for capacity). The ledger and its index are built once
(the live controller keeps them current from its informers: its index is charged incrementally).
The gangs cycle through shapes that fit now, wait for capacity and never fit; the figures printed
are per verdict and overall: p50, p99 and max seconds, for the first advice of each gang (its
owner expanded) and for the next one (``again``: the live controller advises a pending gang again
each time capacity moves, its owner's expansion then taken from the advisor's memo,
:class:`webhook.controller.advisory.Expansions`). Not included: the informer delay (a watch event
reaches the cache in milliseconds) and the Event and annotation writes (two requests).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from placement import realistic_dump
from webhook.controller.advisory import Expansions, advise
from webhook.gating.decision import ParseCache, ledger_of
from webhook.planning.gencluster import LEVELS
from webhook.planning.snapshot import Snapshot
from webhook.topology.objects import Topology

RACK = "cloud.provider.com/topology-rack"

#: (workers, segment size, GPUs per worker): fits now, fits now, waiting for capacity (no node is
#: empty: 8-GPU workers), never fits (a segment of 128 one-GPU pods; a rack has 64 GPUs)
SHAPES = [(64, 8, 1), (256, 8, 2), (64, 8, 8), (128, 128, 1)]


def job(k: int, workers: int, size: int, gpus: int) -> dict[str, Any]:
    """PyTorchJob ``bench/gang-<k>``: ``workers`` workers of ``gpus`` GPUs, segments of ``size`` at rack."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": f"gang-{k}", "namespace": "bench", "uid": f"uid-{k}"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": "cluster-topology",
                                             "kai.scheduler/segment-size": str(size),
                                             "kai.scheduler/segment-topology-required-placement": RACK}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {
                    "cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi", "nvidia.com/gpu": str(gpus)}}}]}}}}}}


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5_000, help="nodes of the dump (default 5,000)")
    ap.add_argument("--gangs", type=int, default=40, help="pending gangs advised, one after the other (default 40)")
    args = ap.parse_args()
    dump = realistic_dump(args.nodes)["items"]
    nodes = [o for o in dump if o["kind"] == "Node"]
    pods = [o for o in dump if o["kind"] == "Pod"]
    start = time.perf_counter()
    skipped: list[str] = []
    ledger = ledger_of(nodes, pods, skipped, ParseCache())
    topology = Topology("cluster-topology", tuple(LEVELS))
    ledger.index(topology.name, topology)
    print(f"{args.nodes:,} nodes, {len(pods):,} bound pods; ledger and index built in {time.perf_counter() - start:.2f} s "
          f"(once, not in the figures); load average {os.getloadavg()[0]:.1f}", flush=True)
    times: dict[str, list[float]] = {}
    again: dict[str, list[float]] = {}
    memo = Expansions()
    for k in range(args.gangs):
        workers, size, gpus = SHAPES[k % len(SHAPES)]
        owner = job(k, workers, size, gpus)
        lines = []
        for figures in (times, again):
            gc.collect()
            start = time.perf_counter()
            advice = advise(f"bench/gang-{k}", owner, Snapshot(topologies=[topology]), {},
                            index_for=ledger.index_copy, expansions=memo)
            elapsed = time.perf_counter() - start
            assert advice is not None
            lines.append(advice.line)
            figures.setdefault(advice.verdict, []).append(elapsed)
            figures.setdefault("all", []).append(elapsed)
        assert lines[0] == lines[1], lines  # the memo changes no line
        if k < len(SHAPES):
            print(f"  {workers} x {gpus} GPU, segments of {size}: {times['all'][-1]:.2f} s, again {again['all'][-1]:.2f} s"
                  f"  {lines[0][:120]}", flush=True)
    print(f"{'verdict':<22} {'gangs':>5} {'p50 s':>7} {'p99 s':>7} {'max s':>7}   {'again p50':>9} {'p99':>7} {'max':>7}")
    for verdict, values in sorted(times.items(), key=lambda kv: kv[0] == "all"):
        second = again[verdict]
        print(f"{verdict:<22} {len(values):>5} {statistics.median(values):>7.2f} {quantile(values, 0.99):>7.2f} "
              f"{max(values):>7.2f}   {statistics.median(second):>9.3f} {quantile(second, 0.99):>7.3f} {max(second):>7.3f}")
    print(f"memo: {memo.misses} expansions, {memo.hits} taken from the memo; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
