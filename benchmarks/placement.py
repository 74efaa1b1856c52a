"""Placement engine benchmark (issue 3): decision time and peak memory, and a trace comparison.

    python benchmarks/placement.py            # full: 512 / 4,096 / 32,768 nodes x 64 / 512 / 4,096 pods
    python benchmarks/placement.py --quick    # fewer repetitions, shorter trace

Part 1 runs each size in its own subprocess (so peak memory is per size). The cluster is a
``gen-cluster`` snapshot (4 levels: zone > block > rack > node, 8 GPUs per node, 30% of GPUs
taken by bound pods); the gang is a PyTorchJob-like set of worker pods of 4 GPUs in segments of
8, segment preferred = rack, workload preferred = block. Decision time = one ``engine.place``
call on a built ``ClusterIndex`` (snapshot parsing and index build are reported apart).
Peak memory: ``tracemalloc`` peak during one decision, and the subprocess's max RSS.

Part 2 replays 1,000 arriving workloads with departures on a 1,024-node cluster and compares this
engine with first-fit and a Kueue-TAS-style greedy (see ``README.md ("Placement engine")`` for definitions).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc

import numpy as np

from webhook.placement.engine import ClusterIndex, Gang, Placement, PodRequest, place
from webhook.placement.gencluster import BLOCK, RACK, generate, topology_object
from webhook.core.topology import Topology
from webhook.placement.snapshot import snapshot_from_objects

LAYOUTS = {512: (2, 4, 8, 8), 4096: (4, 8, 16, 8), 32768: (8, 16, 32, 8), 1024: (4, 4, 8, 8)}
GIB = 2**30 * 1000
TOPO = Topology.from_object(topology_object())


def worker(key: str, gpus: int = 4) -> dict:
    return {"nvidia.com/gpu": gpus * 1000, "cpu": gpus * 16_000, "memory": gpus * 256 * GIB, "pods": 1000}


def make_gang(name: str, pods: int, seg: int = 8, gpus: int = 4, seg_pref=RACK, wl_pref=BLOCK, seg_req=None) -> Gang:
    req = worker(name, gpus)
    return Gang([PodRequest(f"bench/{name}-worker-{i}", req, segment=(0, i // seg)) for i in range(pods)],
                workload_preferred=wl_pref, segment_preferred=seg_pref, segment_required=seg_req, name=name)


def build_index(nodes: int, fill: float = 0.3, seed: int = 1) -> tuple[ClusterIndex, float]:
    z, b, r, n = LAYOUTS[nodes]
    t0 = time.perf_counter()
    snap = snapshot_from_objects(generate(z, b, r, n, 8, fill, seed)["items"])
    index = ClusterIndex(snap.nodes, TOPO)
    return index, time.perf_counter() - t0


def one_size(nodes: int, pods: int, reps: int) -> dict:
    index, build = build_index(nodes)
    gang = make_gang("job", pods)
    times = []
    res = place(index, gang)  # warm-up
    for _ in range(reps):
        t0 = time.perf_counter()
        res = place(index, gang)
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    place(index, gang)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    times.sort()
    levels = {}
    for s in res.segments:
        levels[s.level.split("/")[-1]] = levels.get(s.level.split("/")[-1], 0) + 1
    return {"nodes": nodes, "pods": pods, "placed": res.placed, "median_ms": 1000 * statistics.median(times),
            "p99_ms": 1000 * times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))],
            "decision_peak_mib": peak / 2**20, "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "build_s": build, "reps": reps, "segment_levels": levels, "workload_level": (res.workload_level or "-").split("/")[-1]}


# --- baselines for the trace ---------------------------------------------------------------

def _assign_fill(index: ClusterIndex, gang: Gang, order: np.ndarray, free: np.ndarray) -> Placement:
    q = index.req_vector(gang.pods[0])
    cols = np.flatnonzero(q > 0)
    slots = np.where(index.base_ok[order], (free[order][:, cols] // q[cols]).min(axis=1), 0).clip(0)
    if slots.sum() < len(gang.pods):
        return Placement(placed=False, reason="no room")
    assign, k = {}, 0
    for pos, s in zip(order, slots):
        for _ in range(int(s)):
            if k == len(gang.pods):
                break
            assign[gang.pods[k].key] = index.node_names[pos]
            k += 1
        if k == len(gang.pods):
            break
    return Placement(placed=True, assignments=assign)


def first_fit(index: ClusterIndex, gang: Gang) -> Placement:
    """Pods in order onto nodes in name order, as many per node as fit; gang all-or-nothing."""
    return _assign_fill(index, gang, np.arange(index.n), index.free)


def kueue_greedy(index: ClusterIndex, gang: Gang) -> Placement:
    """Kueue-TAS-style: the lowest level whose some domain fits the whole workload (by pod slots),
    pick among those the domain with the most free slots, then descend greedily into the child
    domains with the most free capacity and fill their nodes. Segments are not known to it."""
    q = index.req_vector(gang.pods[0])
    cols = np.flatnonzero(q > 0)
    s = np.where(index.base_ok, (index.free[:, cols] // q[cols]).min(axis=1), 0).clip(0)
    need = len(gang.pods)
    for d in range(index.node_depth, -1, -1):
        agg = np.add.reduceat(s, index.starts[d])
        ok = np.flatnonzero(agg >= need)
        if len(ok):
            j = ok[np.lexsort([ok, -agg[ok]])[0]]
            break
    else:
        return Placement(placed=False, reason="no room")
    a = int(index.starts[d][j]); b = int(index.starts[d][j + 1]) if j + 1 < len(index.starts[d]) else index.n
    # greedy by domain with most free capacity at every level below d
    keys = [np.arange(a, b), -s[a:b]]
    for dd in range(index.node_depth - 1, d, -1):
        aggd = np.add.reduceat(s, index.starts[dd])
        keys.append(-aggd[index.dom[dd][a:b]])
    order = a + np.lexsort(keys)
    return _assign_fill(index, gang, order, index.free)


def stranded(index: ClusterIndex, seg: int = 8, gpus: int = 4) -> float:
    """Share of free GPUs that cannot serve a typical segment in its rack: the GPU remainder on
    each node (free % per-pod GPUs) plus all free GPUs of racks whose pod slots < segment size."""
    col = index.col["nvidia.com/gpu"]
    free = np.maximum(index.free[:, col] // 1000, 0)
    tot = free.sum()
    if tot == 0:
        return 0.0
    slots = free // gpus
    rack_depth = index.levels.index(RACK) + 1
    rs = np.add.reduceat(slots, index.starts[rack_depth])
    usable = np.where(rs >= seg, rs * gpus, 0).sum()
    return float(tot - usable) / float(tot)


def breaks_required(index: ClusterIndex, gang: Gang, p: Placement) -> bool:
    """True when a (baseline's) placement puts a segment outside one domain of its required level."""
    if not gang.segment_required:
        return False
    d = index.levels.index(gang.segment_required) + 1
    segs: dict = {}
    for pod in gang.pods:
        segs.setdefault(pod.segment, []).append(index.node_pos[p.assignments[pod.key]])
    return any(len(set(index.dom[d][nodes].tolist())) > 1 for nodes in segs.values())


def trace(n_jobs: int, seed: int = 7) -> dict:
    """Replay ``n_jobs`` arrivals (one per step) with departures on 1,024 nodes, per policy.

    Workloads: 8-128 worker pods of 4 or 8 GPUs in segments of 8, running 20-120 steps; half
    require their segments in one rack (``segment required = rack``), the other half only prefer
    it; all prefer the workload in one block. A job that cannot be placed is rejected (no queue).
    A baseline placement that breaks a required level is rejected too (the baselines do not know
    segments). Figures: jobs placed, share of segments whose pods share a rack, ``stranded`` = mean
    share of the cluster's GPUs that were free when a job was rejected, ``fragmented`` = mean share
    of free GPUs in racks that cannot take one more segment of 8 eight-GPU pods.
    """
    rng = random.Random(seed)
    jobs = []
    for i in range(n_jobs):
        pods = rng.choice([8, 8, 16, 16, 32, 64, 128])
        jobs.append((f"j{i}", pods, rng.choice([4, 8]), rng.randint(20, 120), rng.random() < 0.5))
    out = {}
    for name, policy in (("engine", place), ("first-fit", first_fit), ("kueue-greedy", kueue_greedy)):
        index, _ = build_index(1024, fill=0.0)
        total_gpu = int(index.alloc[:, index.col["nvidia.com/gpu"]].sum())
        running: list[tuple[int, Placement, Gang]] = []
        placed = segs = segs_rack = broke = 0
        frag, strand = [], []
        t_dec = []
        rack_depth = index.levels.index(RACK) + 1
        for t, (jn, pods, gpus, dur, hard) in enumerate(jobs):
            still = []
            for end, p, g in running:
                if end <= t:
                    index.release(p, g.pods)
                else:
                    still.append((end, p, g))
            running = still
            gang = make_gang(jn, pods, gpus=gpus, seg_req=RACK if hard else None)
            t0 = time.perf_counter()
            p = policy(index, gang)
            t_dec.append(time.perf_counter() - t0)
            if p.placed and policy is not place and breaks_required(index, gang, p):
                broke += 1
                p = Placement(placed=False, reason="breaks the segment required level")
            if p.placed:
                placed += 1
                index.commit(p, gang.pods)
                running.append((t + dur, p, gang))
                for k in range(pods // 8):
                    nodes = [index.node_pos[p.assignments[f"bench/{jn}-worker-{i}"]] for i in range(8 * k, 8 * k + 8)]
                    segs += 1
                    ids = index.dom[rack_depth][nodes]
                    segs_rack += int((ids == ids[0]).all())
            else:
                free_gpu = int(np.maximum(index.free[:, index.col["nvidia.com/gpu"]], 0).sum())
                strand.append(free_gpu / total_gpu)
            frag.append(stranded(index, seg=8, gpus=8))
        out[name] = {"jobs_placed": placed, "segments": segs, "rack_or_lower_share": segs_rack / max(1, segs),
                     "rejected_for_breaking_required": broke,
                     "stranded_share_mean": statistics.mean(strand) if strand else 0.0,
                     "fragmented_share_mean": statistics.mean(frag),
                     "median_decision_ms": 1000 * statistics.median(t_dec)}
    return out


def _print_trace(n_jobs: int, tr: dict) -> None:
    print(f"\ntrace: {n_jobs} arriving workloads (8-128 pods of 4 or 8 GPUs, segments of 8, half rack-required, "
          f"20-120 steps) on 1,024 nodes")
    print(f"{'policy':<14} {'jobs placed':>11} {'broke req.':>10} {'segments':>9} {'rack-or-lower':>14} "
          f"{'stranded':>9} {'fragmented':>11} {'median ms':>10}")
    for name, v in tr.items():
        print(f"{name:<14} {v['jobs_placed']:>11} {v['rejected_for_breaking_required']:>10} {v['segments']:>9} "
              f"{v['rack_or_lower_share']:>14.1%} {v['stranded_share_mean']:>9.1%} {v['fragmented_share_mean']:>11.1%} "
              f"{v['median_decision_ms']:>10.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and a 300-job trace")
    ap.add_argument("--trace-only", action="store_true", help="run only the trace comparison")
    ap.add_argument("--one", nargs=2, type=int, metavar=("NODES", "PODS"), help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one[0], args.one[1], args.reps)))
        return 0
    reps = 11 if args.quick else 41
    rows = []
    if args.trace_only:
        n_jobs = 300 if args.quick else 1000
        tr = trace(n_jobs)
        _print_trace(n_jobs, tr)
        return 0
    print(f"{'nodes':>6} {'pods':>5} {'placed':>6} {'median ms':>10} {'p99 ms':>8} {'peak MiB':>9} {'RSS MiB':>8} {'build s':>8}  segment levels / workload level")
    for nodes in (512, 4096, 32768):
        for pods in (64, 512, 4096):
            r = 5 if args.quick and nodes == 32768 else reps
            cp = subprocess.run([sys.executable, __file__, "--one", str(nodes), str(pods), "--reps", str(r)],
                                capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            row = json.loads(cp.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{nodes:>6} {pods:>5} {str(row['placed']):>6} {row['median_ms']:>10.1f} {row['p99_ms']:>8.1f} "
                  f"{row['decision_peak_mib']:>9.1f} {row['max_rss_mib']:>8.0f} {row['build_s']:>8.1f}  "
                  f"{row['segment_levels']} / {row['workload_level']}", flush=True)
    n_jobs = 300 if args.quick else 1000
    tr = trace(n_jobs)
    _print_trace(n_jobs, tr)
    if args.json:
        print(json.dumps({"sizes": rows, "trace": tr}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
