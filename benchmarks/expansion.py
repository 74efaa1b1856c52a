"""``place``'s expansion benchmark: a workload → its pods, each admitted through the webhook and its
JSONPatch applied (:func:`webhook.planning.expand.expand`), the step whose time grows with the pod
count (100,000 pods is the most ``place`` expands).

    python benchmarks/expansion.py                      # 100,000 native workers, best of 3
    python benchmarks/expansion.py --pods 10000 --repeat 5

Prints, per run, the wall and CPU seconds of ``expand`` and pods per second, then the best. To
compare two versions of the code, run the script in each checkout on the same machine, one after
the other (``PYTHONPATH=<checkout> python benchmarks/expansion.py``), and read the figures side by
side; the README ("Checks and figures") keeps the last comparison.
"""

from __future__ import annotations

import argparse
import copy
import gc
import time

from webhook.admission.config import AdmissionSettings
from webhook.planning.expand import expand
from webhook.topology.objects import StaticTopologyCatalog, Topology

TOPOLOGY = Topology("cluster-topology", ("topology.kubernetes.io/zone", "cloud.provider.com/topology-block",
                                         "cloud.provider.com/topology-rack", "kubernetes.io/hostname"))


def workload(pods: int, per_segment: int = 100) -> dict:
    """A native DistributedWorkload of ``pods`` 8-GPU workers, segments of ``per_segment`` in a rack."""
    return {"apiVersion": "segments.dev/v1alpha1", "kind": "DistributedWorkload",
            "metadata": {"name": "bench", "namespace": "team-a",
                         "annotations": {"kai.scheduler/topology": "cluster-topology"}},
            "spec": {"framework": "PyTorch", "workers": pods, "workersPerSegment": per_segment,
                     "worker": {"template": {
                         "metadata": {"annotations": {
                             "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-rack"}},
                         "spec": {"containers": [{"name": "trainer", "image": "registry.example.com/train:1",
                                                  "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000, help="workers of the workload (default 100,000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported (default 3)")
    args = parser.parse_args(argv)
    catalog, settings = StaticTopologyCatalog([TOPOLOGY]), AdmissionSettings()
    obj = workload(args.pods)
    best = None
    for run in range(args.repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        exp = expand(copy.deepcopy(obj), catalog, settings)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert not exp.denied and len(exp.pods) == args.pods, exp.message
        print(f"run {run + 1}: expand {args.pods} pods: {wall:.2f} s wall, {cpu:.2f} s CPU, {args.pods / wall:,.0f} pods/s")
        best = wall if best is None else min(best, wall)
        del exp
    print(f"best: {best:.2f} s wall, {args.pods / best:,.0f} pods/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
