"""Synthetic cluster snapshots (``segment-webhook gen-cluster``).

Writes what ``kubectl get nodes,pods -A -o yaml`` plus ``kubectl get topologies -o yaml`` would
give for a GPU cluster laid out zone > block > rack > node with the four level labels of
``cluster-topology`` (DESIGN.md, ``shared/examples/topology.yaml``). Deterministic for a seed.
"""

from __future__ import annotations

import random

ZONE = "topology.kubernetes.io/zone"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
LEVELS = (ZONE, BLOCK, RACK, HOST)
#: cores and GiB of memory per GPU on a generated node (a DGX-like 8-GPU node: 128 cores, 2 TiB).
CPU_PER_GPU = 16
MEM_GIB_PER_GPU = 256
#: Most nodes one snapshot may hold (``--zones × --blocks × --racks × --nodes``). The benchmarks use
#: 32,768; 100,000 nodes at 8 GPUs and ``--fill 1`` take about 50 s and 2.5 GB to write.
MAX_NODES = 100_000
#: Most GPUs per node (``--gpus``); real GPU nodes have 1-16.
MAX_GPUS_PER_NODE = 64
#: Most GPUs in the whole snapshot (nodes × ``--gpus``); bounds the number of bound pods generated.
MAX_TOTAL_GPUS = 1_000_000


def topology_object(name: str = "cluster-topology") -> dict:
    """The ``kai.scheduler/v1alpha1`` Topology of the generated clusters (zone > block > rack > hostname)."""
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": lv} for lv in LEVELS]}}


def generate(zones: int, blocks: int, racks: int, nodes: int, gpus: int, fill: float = 0.3, seed: int = 0) -> dict:
    """A ``kind: List`` of Nodes, bound Pods and the Topology.

    ``blocks`` per zone, ``racks`` per block, ``nodes`` per rack, ``gpus`` per node. Each node
    has allocatable ``cpu = 16·gpus``, ``memory = 256Gi·gpus``, ``nvidia.com/gpu = gpus``,
    ``pods = 110``. Bound ``Running`` pods of 1, 2, 4 or 8 GPUs (with proportional cpu/memory)
    take ``fill`` (0..1) of all GPUs, on random nodes. Raises ``ValueError`` (naming the flag and
    the limit) for counts < 1, ``fill`` outside [0, 1], more than :data:`MAX_NODES` nodes, more
    than :data:`MAX_GPUS_PER_NODE` GPUs per node or more than :data:`MAX_TOTAL_GPUS` GPUs, before
    anything is allocated.
    """
    for label, v in (("--zones", zones), ("--blocks", blocks), ("--racks", racks), ("--nodes", nodes), ("--gpus", gpus)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    if gpus > MAX_GPUS_PER_NODE:
        raise ValueError(f"--gpus {gpus} is more than the limit of {MAX_GPUS_PER_NODE} GPUs per node")
    total = zones * blocks * racks * nodes
    if total > MAX_NODES:
        raise ValueError(f"--zones × --blocks × --racks × --nodes = {zones}×{blocks}×{racks}×{nodes} = {total:,} nodes "
                         f"is more than the limit of {MAX_NODES:,} nodes")
    if total * gpus > MAX_TOTAL_GPUS:
        raise ValueError(f"{total:,} nodes × --gpus {gpus} = {total * gpus:,} GPUs is more than the limit of "
                         f"{MAX_TOTAL_GPUS:,} GPUs")
    if not 0 <= fill <= 1:
        raise ValueError(f"--fill must be between 0 and 1, got {fill!r}")
    rng = random.Random(seed)
    wz, wb, wr, wn = (len(str(x - 1)) for x in (zones, blocks, racks, nodes))
    items: list[dict] = []
    names = []
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for n in range(nodes):
                    zs, bs, rs, ns = f"{z:0{wz}d}", f"{b:0{wb}d}", f"{r:0{wr}d}", f"{n:0{wn}d}"
                    name = f"node-{zs}-{bs}-{rs}-{ns}"
                    names.append(name)
                    items.append({
                        "apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": {
                            ZONE: f"zone-{zs}", BLOCK: f"block-{zs}-{bs}", RACK: f"rack-{zs}-{bs}-{rs}", HOST: name,
                            "nvidia.com/gpu.present": "true"}},
                        "spec": {},
                        "status": {
                            "allocatable": {"cpu": str(CPU_PER_GPU * gpus), "memory": f"{MEM_GIB_PER_GPU * gpus}Gi",
                                            "nvidia.com/gpu": str(gpus), "pods": "110"},
                            "conditions": [{"type": "Ready", "status": "True"}],
                        },
                    })
    free = [gpus] * len(names)
    target = int(round(fill * gpus * len(names)))
    used = 0
    sizes = [s for s in (8, 4, 2, 1) if s <= gpus]
    i = 0
    misses = 0
    while used < target and misses < 10_000:
        size = min(rng.choice(sizes), target - used)
        k = rng.randrange(len(names))
        if free[k] < size:
            misses += 1
            continue
        free[k] -= size
        used += size
        items.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"busy-{i}", "namespace": "other-team"},
            "spec": {"nodeName": names[k], "containers": [{"name": "train", "image": "trainer:1", "resources": {
                "requests": {"cpu": str(CPU_PER_GPU * size), "memory": f"{MEM_GIB_PER_GPU * size}Gi"},
                "limits": {"nvidia.com/gpu": str(size)}}}]},
            "status": {"phase": "Running"},
        })
        i += 1
    items.append(topology_object())
    return {"apiVersion": "v1", "kind": "List", "items": items}
