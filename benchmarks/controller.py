"""Controller pass benchmark (DESIGN.md §9): the cost of one ``decide`` pass, beside the engine alone.

    python benchmarks/controller.py            # 512 and 4,096 nodes, 50 gangs of 9 pods
    python benchmarks/controller.py --quick    # 512 nodes only, fewer repetitions

Cluster: ``gen-cluster`` snapshots (zone > block > rack > node, 8 GPUs per node, 30 % of GPUs taken
by bound pods). Gangs: PyTorchJobs of 8 workers x 4 GPUs in segments of 4 per rack, one zone, plus a
Master, passed through the webhook with ``--gate-pods`` (so they arrive gated).

Printed per size, median of the repetitions:

* ``idle pass``: ``decide`` with every gang one pod short (nothing to place): what each pod event
  costs while gangs fill up (snapshot reading and charging only); in brackets with a warm
  ``ParseCache``, as the live controller keeps (objects carry resourceVersions there);
* ``full pass``: ``decide`` placing all 50 gangs at once;
* ``engine only``: ``engine.place`` for the same 50 gangs on a prebuilt index (the baseline), and the
  ratio full pass / engine only (the controller's own overhead);
* ``reconcile per gang``: what the live controller does per complete gang —
  ``decide_gang`` on its warm ledger (built before the clock starts, as its informers keep it) —
  beside the engine's own time per gang.
"""

from __future__ import annotations

import argparse
import statistics
import time

from webhook.admission.config import AdmissionSettings
from webhook.gating.decision import ParseCache, decide, decide_gang, gang_key_of, ledger_of
from webhook.placement.engine import ClusterIndex, place
from webhook.planning.expand import expand
from webhook.planning.gencluster import generate, topology_object
from webhook.planning.snapshot import snapshot_from_objects
from webhook.topology.objects import StaticTopologyCatalog, Topology

TOPO = Topology.from_object(topology_object())
LAYOUTS = {512: (2, 4, 8, 8), 4096: (4, 8, 16, 8)}


def job(name: str) -> dict:
    worker = {"metadata": {"annotations": {"kai.scheduler/segment-size": "4",
                                           "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-rack"}},
              "spec": {"containers": [{"name": "w", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}
    master = {"spec": {"containers": [{"name": "m", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "bench", "annotations": {
                "kai.scheduler/topology": "cluster-topology",
                "kai.scheduler/topology-required-placement": "topology.kubernetes.io/zone"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": master},
                                             "Worker": {"replicas": 8, "template": worker}}}}


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run(size: int, repeat: int) -> None:
    doc = generate(*LAYOUTS[size], gpus=8, fill=0.3, seed=0)
    for i, obj in enumerate(doc["items"]):  # as the API server sends them
        obj["metadata"]["resourceVersion"] = str(i + 1)
    nodes = [o for o in doc["items"] if o["kind"] == "Node"]
    bound = [o for o in doc["items"] if o["kind"] == "Pod"]
    catalog = StaticTopologyCatalog([TOPO])
    settings = AdmissionSettings(gate_pods=True)
    expansions = [expand(job(f"job-{g:02d}"), catalog, settings) for g in range(50)]
    for e in expansions:
        for i, pod in enumerate(e.pods):
            pod["metadata"]["resourceVersion"] = f"9{i}"
    gated = [p for e in expansions for p in e.pods]
    short = [p for e in expansions for p in e.pods[:-1]]
    idle = timed(lambda: decide(nodes, bound + short, [TOPO]), repeat)
    cache = ParseCache()
    decide(nodes, bound + short, [TOPO], cache=cache)
    idle_cached = timed(lambda: decide(nodes, bound + short, [TOPO], cache=cache), repeat)
    result = decide(nodes, bound + gated, [TOPO])
    full = timed(lambda: decide(nodes, bound + gated, [TOPO]), repeat)

    def engine_only():
        index = ClusterIndex(snapshot_from_objects(nodes + bound).nodes, TOPO)
        start = time.perf_counter()
        for e in expansions:
            placement = place(index, e.gangs[0])
            if placement.placed:
                index.commit(placement, e.gangs[0].pods)
        return time.perf_counter() - start

    engine = statistics.median(engine_only() for _ in range(repeat))

    def reconciles():
        """The live controller's path: a warm ledger (kept by its informers), one decide_gang per
        gang (each charging its releases as assumed), the index built once before the clock starts."""
        ledger = ledger_of(nodes, bound, [], ParseCache())
        ledger.index(TOPO.name, TOPO)
        start = time.perf_counter()
        for e in expansions:
            decide_gang(gang_key_of(e.pods[0]), e.pods, ledger, {TOPO.name: TOPO}, None, ParseCache())
        return (time.perf_counter() - start) / len(expansions)

    reconcile = statistics.median(reconciles() for _ in range(repeat))
    print(f"{size:>5} nodes, {len(bound):>5} bound pods, 50 gangs x 9 pods ({len(result.releases)} released): "
          f"idle pass {idle * 1000:6.1f} ms ({idle_cached * 1000:5.1f} ms with the live ParseCache) | full pass {full * 1000:7.1f} ms | engine only {engine * 1000:7.1f} ms "
          f"| full / engine {full / engine:5.1f}x | reconcile per gang {reconcile * 1000:6.2f} ms "
          f"(engine per gang {engine / len(expansions) * 1000:6.2f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for size in ([512] if args.quick else [512, 4096]):
        run(size, 3 if args.quick else 7)


if __name__ == "__main__":
    main()
