"""Synthetic cluster snapshots (``segment-webhook gen-cluster``).

Writes what ``kubectl get nodes,pods -A -o yaml`` plus ``kubectl get topologies -o yaml`` would
give for a GPU cluster laid out zone > block > rack > node with the four level labels of
``cluster-topology`` (DESIGN.md, ``shared/examples/topology.yaml``). Deterministic for a seed.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from webhook.kube import core, kai_scheduler

ZONE = core.ZONE
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = core.HOSTNAME
LEVELS = (ZONE, BLOCK, RACK, HOST)
#: cores and GiB of memory per GPU on a generated node (a DGX-like 8-GPU node: 128 cores, 2 TiB).
CPU_PER_GPU = 16
MEM_GIB_PER_GPU = 256
#: ``status.allocatable["ephemeral-storage"]`` of every generated node, in bytes, written as a
#: kubelet writes it (a plain integer). A kubelet always reports it: the capacity of the file
#: system of its root directory less ``--eviction-hard nodefs.available`` (10 % by default,
#: kubelet configuration reference). The file system is a DGX H100's OS drive, 2 × 1.92 TB NVMe
#: M.2 in RAID 1 (NVIDIA DGX H100 user guide, "Hardware Overview"): 1.92e12 × 0.9 bytes. Fixed
#: per node, whatever ``--gpus``.
EPHEMERAL_STORAGE_BYTES = 1_728_000_000_000
#: Most nodes one snapshot may hold (``--zones × --blocks × --racks × --nodes``); the time and
#: size of the largest are in the README ("gen-cluster").
MAX_NODES = 100_000
#: Most GPUs per node (``--gpus``); real GPU nodes have 1-16.
MAX_GPUS_PER_NODE = 64
#: Most GPUs in the whole snapshot (nodes × ``--gpus``); bounds the number of bound pods generated.
MAX_TOTAL_GPUS = 1_000_000


def topology_object(name: str = "cluster-topology", levels: tuple[str, ...] = LEVELS) -> dict[str, Any]:
    """The ``kai.scheduler/v1alpha1`` Topology of the generated clusters (zone > block > rack >
    hostname, or a preset's ``levels``)."""
    return {"apiVersion": kai_scheduler.TOPOLOGY_API_VERSION, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}


# ------------------------------------------------------------------ provider label presets (DESIGN.md §12)
# ``--labels eks|gke|oci|nebius|topograph``: the labels a node of that provider or tool carries, the
# topology keys of DESIGN.md §12's table and the attribute labels beside them (instance
# type, GPU product, arch, ...) that must never become levels. The generator's zone > block > rack >
# node layout maps onto each provider's levels; a level between block and rack groups two racks.
# Every value is unique across the cluster (a digest of the node's path), so the levels nest.

def _digest(text: str, width: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:width]


def _ip(index: int) -> tuple[int, int, int]:
    """Three octets of a private address for node ``index`` (``10.<a>.<b>.<c>``)."""
    return index >> 16, (index >> 8) & 255, index & 255


def _zone_letter(zone: int) -> str:
    return chr(ord("a") + zone) if zone < 26 else f"z{zone}"


def _eks(z: int, b: int, r: int, n: int, i: int) -> tuple[str, dict[str, str]]:
    a, c, d = _ip(i)
    name = f"ip-10-{a}-{c}-{d}.ec2.internal"
    zone = f"us-east-1{_zone_letter(z)}"
    return name, {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "p5.48xlarge",
        "beta.kubernetes.io/os": "linux", "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": "gpu-p5", "failure-domain.beta.kubernetes.io/region": "us-east-1",
        "failure-domain.beta.kubernetes.io/zone": zone, "k8s.io/cloud-provider-aws": _digest("cluster", 32),
        "kubernetes.io/arch": "amd64", HOST: name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge", "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "topology.ebs.csi.aws.com/zone": zone,
        "topology.k8s.aws/network-node-layer-1": "nn-" + _digest(f"eks-l1/{z}/{b}", 17),
        "topology.k8s.aws/network-node-layer-2": "nn-" + _digest(f"eks-l2/{z}/{b}/{r // 2}", 17),
        "topology.k8s.aws/network-node-layer-3": "nn-" + _digest(f"eks-l3/{z}/{b}/{r}", 17),
        "topology.k8s.aws/zone-id": f"use1-az{z + 1}", "topology.kubernetes.io/region": "us-east-1",
        ZONE: zone,
    }


#: GKE's node name suffix: four characters of [0-9a-z].
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _gke_suffix(index: int) -> str:
    """A node name suffix of four base-36 characters, distinct for every ``index`` (a digest's four
    hex characters repeat within a few hundred nodes): ``index`` times a number prime to 36, modulo
    36**4, written in base 36; wider past 36**4 nodes."""
    width = 4
    while index >= 36 ** width:
        width += 1
    value = index * 1_000_003 % 36 ** width
    digits = []
    for _ in range(width):
        value, digit = divmod(value, 36)
        digits.append(_BASE36[digit])
    return "".join(reversed(digits))


def _gke(z: int, b: int, r: int, n: int, i: int) -> tuple[str, dict[str, str]]:
    name = f"gke-train-a3-pool-{_digest(f'gke/{z}/{b}', 8)}-{_gke_suffix(i)}"
    return name, {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "a3-highgpu-8g",
        "beta.kubernetes.io/os": "linux", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/gke-boot-disk": "pd-balanced", "cloud.google.com/gke-container-runtime": "containerd",
        "cloud.google.com/gke-nodepool": "a3-pool", "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/machine-family": "a3",
        "cloud.google.com/gce-topology-block": _digest(f"gke-block/{z}/{b}", 32),
        "cloud.google.com/gce-topology-subblock": _digest(f"gke-subblock/{z}/{b}/{r}", 32),
        "cloud.google.com/gce-topology-host": _digest(f"gke-host/{z}/{b}/{r}/{n // 2}", 32),
        "failure-domain.beta.kubernetes.io/zone": f"us-central1-{_zone_letter(z)}",
        "kubernetes.io/arch": "amd64", HOST: name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "a3-highgpu-8g", "nvidia.com/gpu.present": "true",
        "topology.gke.io/zone": f"us-central1-{_zone_letter(z)}", "topology.kubernetes.io/region": "us-central1",
        ZONE: f"us-central1-{_zone_letter(z)}",
    }


def _oci(z: int, b: int, r: int, n: int, i: int) -> tuple[str, dict[str, str]]:
    a, c, d = _ip(i)
    name = f"10.{a}.{c}.{d}"  # OKE names nodes by IP; kubernetes.io/hostname is the instance's host name
    return name, {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "BM.GPU.H100.8",
        "beta.kubernetes.io/os": "linux", "displayName": f"oke-gpu-{_digest(f'oci/{i}', 10)}",
        "hostname": f"oke-gpu-{_digest(f'oci/{i}', 10)}", "internal_addr": name,
        "kubernetes.io/arch": "amd64", HOST: f"oke-gpu-{_digest(f'oci/{i}', 10)}", "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "BM.GPU.H100.8", "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "oci.oraclecloud.com/fault-domain": f"FAULT-DOMAIN-{(i % 3) + 1}",
        "oci.oraclecloud.com/rdma.hpc_island_id": _digest(f"oci-island/{z}/{b}", 12),
        "oci.oraclecloud.com/rdma.network_block_id": _digest(f"oci-network-block/{z}/{b}/{r // 2}", 12),
        "oci.oraclecloud.com/rdma.local_block_id": _digest(f"oci-local-block/{z}/{b}/{r}", 12),
        "topology.kubernetes.io/region": "us-ashburn-1", ZONE: f"US-ASHBURN-AD-{z + 1}",
    }


def _nebius(z: int, b: int, r: int, n: int, i: int) -> tuple[str, dict[str, str]]:
    name = f"computeinstance-e00{_digest(f'nebius/{i}', 17)}"
    return name, {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "gpu-h200-sxm",
        "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", HOST: name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gpu-h200-sxm", "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H200", "nebius.com/node-group-id": "mk8snodegroup-e00gpu",
        "topology.nebius.com/gpu-cluster-id": "computegpucluster-e00" + _digest(f"nebius-cluster/{z}/{b}", 17),
        "topology.nebius.com/tier-2": _digest(f"nebius-tier-2/{z}/{b}/{r // 2}", 16),
        "topology.nebius.com/tier-1": _digest(f"nebius-tier-1/{z}/{b}/{r}", 16),
        "topology.kubernetes.io/region": "eu-north1", ZONE: f"eu-north1-{_zone_letter(z)}",
    }


def _topograph(z: int, b: int, r: int, n: int, i: int) -> tuple[str, dict[str, str]]:
    # an on-premises GB200 cluster labelled by topograph >= 1.0 after an upgrade: the older
    # network.topology.nvidia.com/* keys are still on the nodes (aliases of the new ones)
    name = f"gb200-{i:05d}"
    clique_uuid = _digest(f"topograph/{z}/{b}/{r}/{n // 2}", 32)
    uuid = f"{clique_uuid[:8]}-{clique_uuid[8:12]}-{clique_uuid[12:16]}-{clique_uuid[16:20]}-{clique_uuid[20:]}"
    return name, {
        "accelerator.topograph.run/domain": _digest(f"topograph/{z}/{b}/{r}/{n // 2}", 12),
        "fabric.topograph.run/tier-3": f"core-{z}",
        "fabric.topograph.run/tier-2": f"spine-{z}-{b}",
        "fabric.topograph.run/tier-1": f"agg-{z}-{b}-{r // 2}",
        "fabric.topograph.run/tier-0": f"leaf-{z}-{b}-{r}",
        "kubernetes.io/arch": "arm64", HOST: name, "kubernetes.io/os": "linux",
        "network.topology.nvidia.com/core": f"sw-core-{z}-{b}",
        "network.topology.nvidia.com/spine": f"sw-spine-{z}-{b}-{r // 2}",
        "network.topology.nvidia.com/leaf": f"sw-leaf-{z}-{b}-{r}",
        "network.topology.nvidia.com/accelerator": f"nvl-{z}-{b}-{r}-{n // 2}",
        "nvidia.com/gpu.clique": f"{uuid}.{32766 - (n // 2) % 7}", "nvidia.com/gpu.machine": "GB200-NVL72",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-GB200",
    }


#: ``--labels`` presets: the node name and labels of node ``i`` at zone ``z``, block ``b``, rack ``r``,
#: position ``n``, and the Topology levels those labels support (broadest first).
PRESETS = {
    "eks": (_eks, (ZONE, "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
                   "topology.k8s.aws/network-node-layer-3", HOST)),
    "gke": (_gke, (ZONE, "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                   "cloud.google.com/gce-topology-host", HOST)),
    "oci": (_oci, (ZONE, "oci.oraclecloud.com/rdma.hpc_island_id", "oci.oraclecloud.com/rdma.network_block_id",
                   "oci.oraclecloud.com/rdma.local_block_id", HOST)),
    "nebius": (_nebius, (ZONE, "topology.nebius.com/gpu-cluster-id", "topology.nebius.com/tier-2",
                         "topology.nebius.com/tier-1", HOST)),
    "topograph": (_topograph, ("fabric.topograph.run/tier-3", "fabric.topograph.run/tier-2",
                               "fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0",
                               "accelerator.topograph.run/domain", HOST)),
}


def generate(zones: int, blocks: int, racks: int, nodes: int, gpus: int, fill: float = 0.3, seed: int = 0,
             labels: str | None = None) -> dict[str, Any]:
    """A ``kind: List`` of Nodes, bound Pods and the Topology.

    ``blocks`` per zone, ``racks`` per block, ``nodes`` per rack, ``gpus`` per node. Each node
    has allocatable ``cpu = 16·gpus``, ``memory = 256Gi·gpus``, ``ephemeral-storage`` =
    :data:`EPHEMERAL_STORAGE_BYTES`, ``nvidia.com/gpu = gpus``, ``pods = 110``. Bound ``Running`` pods of 1, 2, 4 or 8 GPUs (with proportional cpu/memory)
    take ``fill`` (0..1) of all GPUs, on random nodes. Raises ``ValueError`` (naming the flag and
    the limit) for counts < 1, ``fill`` outside [0, 1], more than :data:`MAX_NODES` nodes, more
    than :data:`MAX_GPUS_PER_NODE` GPUs per node or more than :data:`MAX_TOTAL_GPUS` GPUs, before
    anything is allocated. ``labels``: ``None`` (zone > block > rack > hostname with the keys of
    ``cluster-topology``, as always) or a key of :data:`PRESETS` (a provider's node names and labels,
    and a Topology ``cluster-topology`` of that provider's levels); another value raises ``ValueError``.
    """
    _check_arguments(zones, blocks, racks, nodes, gpus, fill, labels)
    items = _nodes(zones, blocks, racks, nodes, gpus, labels)
    names = [item["metadata"]["name"] for item in items]
    items += _bound_pods(names, gpus, fill, random.Random(seed))
    items.append(topology_object() if labels is None else topology_object(levels=PRESETS[labels][1]))
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _check_arguments(zones: int, blocks: int, racks: int, nodes: int, gpus: int, fill: float,
                     labels: str | None) -> None:
    """:func:`generate`'s checks of its arguments, before anything is allocated: ``ValueError``
    naming the flag and the limit."""
    if labels is not None and labels not in PRESETS:
        raise ValueError(f"--labels {labels!r} is not one of {', '.join(PRESETS)}")
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


def _nodes(zones: int, blocks: int, racks: int, nodes: int, gpus: int, labels: str | None) -> list[dict[str, Any]]:
    """The Node objects of :func:`generate`, zone by zone, block, rack and node in order."""
    wz, wb, wr, wn = (len(str(x - 1)) for x in (zones, blocks, racks, nodes))
    items: list[dict[str, Any]] = []
    names: list[str] = []
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for n in range(nodes):
                    if labels is None:
                        zs, bs, rs, ns = f"{z:0{wz}d}", f"{b:0{wb}d}", f"{r:0{wr}d}", f"{n:0{wn}d}"
                        name = f"node-{zs}-{bs}-{rs}-{ns}"
                        node_labels = {ZONE: f"zone-{zs}", BLOCK: f"block-{zs}-{bs}", RACK: f"rack-{zs}-{bs}-{rs}",
                                       HOST: name, "nvidia.com/gpu.present": "true"}
                    else:
                        name, node_labels = PRESETS[labels][0](z, b, r, n, len(names))
                    names.append(name)
                    items.append({
                        "apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": node_labels},
                        "spec": {},
                        "status": {
                            "allocatable": {"cpu": str(CPU_PER_GPU * gpus), "memory": f"{MEM_GIB_PER_GPU * gpus}Gi",
                                            "ephemeral-storage": str(EPHEMERAL_STORAGE_BYTES),
                                            "nvidia.com/gpu": str(gpus), "pods": "110"},
                            "conditions": [{"type": "Ready", "status": "True"}],
                        },
                    })
    return items


def _bound_pods(names: list[str], gpus: int, fill: float, rng: random.Random) -> list[dict[str, Any]]:
    """:func:`generate`'s bound ``Running`` pods of 1, 2, 4 or 8 GPUs on random nodes of ``names``
    (``gpus`` each), taking ``fill`` of all GPUs (given up after 10,000 draws that do not fit)."""
    items: list[dict[str, Any]] = []
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
    return items
