"""Placement engine benchmark (issues 3 and 8): engine decision time per gang family, the whole
``place`` command on a realistic cluster dump against the bare parse of the same file, and a
trace comparison.

    python benchmarks/placement.py            # full: sizes x families, 10,000-node dump (YAML + JSON), trace
    python benchmarks/placement.py --quick    # fewer repetitions, 32,768 nodes only, JSON dump only, short trace

Part 1 runs each size and gang family in its own subprocess (so peak memory is per case). The
cluster is a ``gen-cluster`` snapshot (4 levels: zone > block > rack > node, 8 GPUs per node,
30% of GPUs taken by bound pods). Families: ``identical`` — worker pods of 4 GPUs in segments
of 8, segment preferred = rack, workload preferred = block; ``leader+tail`` — the same with a
leader pod of other requests (CPU and memory only) and its own node selector inside segment 0
(LWS LeaderWorker) and a partial last segment of 5; ``master+tail, rack required`` — a
PyTorchJob-like Master outside segments, a partial last segment, segment required = rack;
``jobset``, ``ray multi-host``, ``mpi launcher-as-worker`` — the §3b kinds (issue 18), expanded
through the webhook as ``place`` expands them (:func:`kind_gang`).
Decision time = one ``engine.place`` call on a built ``ClusterIndex`` (parsing and the index
build are reported apart); ``exact`` = the engine proved its answer optimal
(``Placement.exact``, DESIGN.md §8).

Part 2 writes a realistic ``kubectl get nodes,pods -A`` dump — full node status (conditions,
images, addresses, nodeInfo), two bound pods per node with full specs and statuses — as JSON and
as YAML, and times the whole ``place`` command in-process (reading, snapshot, expansion through
the webhook, placement, output) beside ``json.load`` / ``yaml.load(CSafeLoader)`` of the same file.

Part 3 replays 1,000 arriving workloads with departures on a 1,024-node cluster and compares this
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
from webhook.planning.gencluster import BLOCK, RACK, generate, topology_object
from webhook.planning.snapshot import snapshot_from_objects
from webhook.topology.objects import Topology

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
    for k, nd in enumerate(snap.nodes):  # the last node of every rack may host a leader (family leader+tail)
        if k % n == n - 1:
            nd.labels["pool"] = "leader"
    index = ClusterIndex(snap.nodes, TOPO)
    return index, time.perf_counter() - t0


FAMILIES = ("identical", "leader+tail", "master+tail, rack required", "jobset", "ray multi-host", "mpi launcher-as-worker")
#: the §3b kinds (issue 18): their gangs are made the way ``place`` makes them, through the kind's
#: expansion and the webhook (webhook.planning.expand), so the pods carry the index arithmetic of
#: their kind: JobSet ``job-index × parallelism + completion-index`` (parallelism 8 = S),
#: Ray ``replica × numOfHosts + host`` (numOfHosts 4, S = 8), MPIJob's launcher-as-worker at 0
KIND_FAMILIES = FAMILIES[3:]


def _template(gpus: int = 4, annotations: dict | None = None) -> dict:
    """A pod template whose pods request what :func:`worker` requests."""
    limits = {"nvidia.com/gpu": str(gpus), "cpu": str(gpus * 16), "memory": f"{gpus * 256}Gi"}
    return {"metadata": {"annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": limits, "requests": limits}}]}}


def kind_gang(family: str, pods: int) -> Gang:
    """The gang of a §3b family: ``pods`` pods (rounded down to whole Jobs / replicas), segments of 8
    preferred in a rack, the workload preferred in a block, expanded and admitted as ``place`` does."""
    from webhook.admission.config import AdmissionSettings
    from webhook.planning.expand import expand
    from webhook.topology.objects import StaticTopologyCatalog

    seg = {"kai.scheduler/segment-size": "8", "kai.scheduler/segment-topology-preferred-placement": RACK}
    root = {"kai.scheduler/topology": TOPO.name, "kai.scheduler/topology-preferred-placement": BLOCK}
    meta = {"name": "job", "namespace": "bench", "annotations": root}
    if family == "jobset":
        obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": {"replicatedJobs": [
            {"name": "workers", "replicas": pods // 8,
             "template": {"spec": {"parallelism": 8, "completions": 8, "template": _template(annotations=seg)}}}]}}
    elif family == "ray multi-host":
        obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": {
            "headGroupSpec": {"template": _template(0)},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": pods // 4, "numOfHosts": 4,
                                  "template": _template(annotations=seg)}]}}
    else:
        obj = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": meta, "spec": {
            "runLauncherAsWorker": True, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": _template()},
                "Worker": {"replicas": pods - 1, "template": _template(annotations=seg)}}}}
    exp = expand(obj, StaticTopologyCatalog([TOPO]), AdmissionSettings())
    assert not exp.denied and len(exp.gangs) == 1, exp.message
    return exp.gangs[0]


def family_gang(family: str, pods: int) -> Gang:
    """The gang of one benchmark family (see the module docstring), ``pods`` pods in all."""
    if family in KIND_FAMILIES:
        return kind_gang(family, pods)
    if family == "identical":
        return make_gang("job", pods)
    if family == "leader+tail":
        gang = make_gang("job", pods - 1 - (3 if pods % 8 == 0 else 0))  # a tail of 5 when pods % 8 == 0
        leader = PodRequest("bench/job-leader", {"cpu": 32_000, "memory": 64 * GIB, "pods": 1000}, segment=(0, 0),
                            role="leader", node_selector=(("pool", "leader"),))
        gang.pods.insert(0, leader)
        return gang
    gang = make_gang("job", pods - 1 - (3 if pods % 8 == 0 else 0), seg_req=RACK)
    gang.pods.insert(0, PodRequest("bench/job-master-0", {"cpu": 8_000, "memory": 32 * GIB, "pods": 1000}, role="master"))
    return gang


def one_size(nodes: int, pods: int, reps: int, family: str = "identical") -> dict:
    index, build = build_index(nodes)
    gang = family_gang(family, pods)
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
    return {"nodes": nodes, "pods": pods, "family": family, "placed": res.placed, "exact": res.exact, "median_ms": 1000 * statistics.median(times),
            "p99_ms": 1000 * times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))],
            "decision_peak_mib": peak / 2**20, "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "build_s": build, "reps": reps, "segment_levels": levels, "workload_level": (res.workload_level or "-").split("/")[-1]}


# --- part 2: the whole place command on a realistic dump ----------------------------------------

def realistic_dump(n_nodes: int, pods_per_node: int = 2, seed: int = 3) -> dict:
    """A ``kind: List`` shaped like ``kubectl get nodes,pods -A -o json`` of a GPU cluster: nodes with
    full status (addresses, allocatable, capacity, conditions, 20 images, nodeInfo), the four
    cluster-topology labels (8 nodes per rack, 16 racks per block, 4 blocks per zone), and
    ``pods_per_node`` bound Running pods per node with full specs and statuses."""
    rng = random.Random(seed)
    images = [{"names": [f"registry.example.com/team-{i}/image-{i}@sha256:{'%064x' % rng.getrandbits(256)}",
                         f"registry.example.com/team-{i}/image-{i}:v1.{i}.0"], "sizeBytes": rng.randint(10**7, 10**10)}
              for i in range(20)]
    items = []
    per_rack, per_block, per_zone = 8, 16 * 8, 4 * 16 * 8
    for k in range(n_nodes):
        name = f"gpu-node-{k:05d}"
        zone, block, rack = f"zone-{k // per_zone}", f"block-{k // per_block}", f"rack-{k // per_rack}"
        ts = "2026-11-30T12:00:00Z"
        labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "kubernetes.io/os": "linux", "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "p5.48xlarge",
                  "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": zone,
                  "cloud.provider.com/topology-block": block, "cloud.provider.com/topology-rack": rack,
                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "nvidia.com/cuda.driver.major": "550",
                  "nvidia.com/gpu.memory": "81559", "feature.node.kubernetes.io/pci-10de.present": "true",
                  "node-role.kubernetes.io/worker": ""}
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "uid": "%032x" % rng.getrandbits(128), "resourceVersion": str(rng.randint(1, 10**9)),
            "creationTimestamp": ts, "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                            "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{rng.getrandbits(64):016x}"}),
                            "nfd.node.kubernetes.io/feature-labels": ",".join(f"cpu-cpuid.F{i}" for i in range(30))}},
            "spec": {"podCIDR": f"10.{k // 256 % 256}.{k % 256}.0/24", "podCIDRs": [f"10.{k // 256 % 256}.{k % 256}.0/24"],
                     "providerID": f"aws:///us-east-1a/i-{rng.getrandbits(64):016x}"},
            "status": {
                "addresses": [{"type": "InternalIP", "address": f"10.1.{k // 256 % 256}.{k % 256}"},
                              {"type": "Hostname", "address": name}, {"type": "InternalDNS", "address": f"{name}.ec2.internal"}],
                "allocatable": {"cpu": "191450m", "ephemeral-storage": "27845546346", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                                "memory": "2035784956Ki", "nvidia.com/gpu": "8", "pods": "110"},
                "capacity": {"cpu": "192", "ephemeral-storage": "30416368Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                             "memory": "2047512316Ki", "nvidia.com/gpu": "8", "pods": "110"},
                "conditions": [{"type": t, "status": "False" if t != "Ready" else "True", "lastHeartbeatTime": ts,
                                "lastTransitionTime": ts, "reason": f"Kubelet{t}", "message": f"kubelet reports {t} as expected on this node"}
                               for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "images": images,
                "nodeInfo": {"architecture": "amd64", "bootID": "%032x" % rng.getrandbits(128), "containerRuntimeVersion": "containerd://1.7.11",
                             "kernelVersion": "5.10.205-195.804.amzn2.x86_64", "kubeProxyVersion": "v1.29.0", "kubeletVersion": "v1.29.0",
                             "machineID": "%032x" % rng.getrandbits(128), "operatingSystem": "linux", "osImage": "Amazon Linux 2",
                             "systemUUID": "%032x" % rng.getrandbits(128)}}})
        for j in range(pods_per_node):
            gpus = rng.choice([1, 2, 4])
            pname = f"train-{k}-{j}"
            items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": pname, "namespace": f"team-{k % 17}", "uid": "%032x" % rng.getrandbits(128), "creationTimestamp": ts,
                "labels": {"app": "trainer", "job-name": f"job-{k}", "training.kubeflow.org/replica-type": "worker"},
                "annotations": {"kubectl.kubernetes.io/default-container": "trainer"},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": f"job-{k}", "uid": "%032x" % rng.getrandbits(128),
                                     "controller": True, "blockOwnerDeletion": True}]},
                "spec": {"nodeName": name, "serviceAccountName": "default", "restartPolicy": "OnFailure", "dnsPolicy": "ClusterFirst",
                         "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30, "priority": 0,
                         "containers": [{"name": "trainer", "image": images[j]["names"][1], "imagePullPolicy": "IfNotPresent",
                                         "command": ["torchrun", "--nproc-per-node", str(gpus), "train.py"],
                                         "env": [{"name": f"VAR_{e}", "value": f"value-{e}"} for e in range(8)],
                                         "resources": {"requests": {"cpu": f"{gpus * 16}", "memory": f"{gpus * 200}Gi", "nvidia.com/gpu": str(gpus)},
                                                       "limits": {"nvidia.com/gpu": str(gpus)}},
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}]}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{k}"}},
                                     {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
                         "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                                         {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
                "status": {"phase": "Running", "hostIP": f"10.1.{k // 256 % 256}.{k % 256}", "podIP": f"10.{k // 256 % 256}.{k % 256}.{j + 2}",
                           "qosClass": "Burstable", "startTime": ts,
                           "conditions": [{"type": t, "status": "True", "lastTransitionTime": ts} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                           "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0, "started": True, "image": images[j]["names"][1],
                                                  "imageID": images[j]["names"][0], "containerID": "containerd://%064x" % rng.getrandbits(256),
                                                  "state": {"running": {"startedAt": ts}}}]}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


DUMP_WORKLOAD = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: bench
  annotations: {kai.scheduler/topology-preferred-placement: cloud.provider.com/topology-block}
spec:
  pytorchReplicaSpecs:
    Master:
      template:
        spec: {containers: [{name: c, resources: {requests: {cpu: "8", memory: 32Gi}}}]}
    Worker:
      replicas: 512
      template:
        metadata:
          annotations:
            kai.scheduler/topology: cluster-topology
            kai.scheduler/segment-size: "8"
            kai.scheduler/segment-topology-required-placement: cloud.provider.com/topology-rack
        spec: {containers: [{name: c, resources: {requests: {cpu: "16", memory: 200Gi, nvidia.com/gpu: "2"}}}]}
"""


def dump_case(what: str, path: str, workload: str, topology: str) -> dict:
    """One timing in a fresh process: ``parse`` (json.load / yaml.load with CSafeLoader of
    ``path``) or ``place`` (the whole command, in-process, output discarded)."""
    import io

    import yaml

    t0 = time.perf_counter()
    if what == "parse":
        with open(path, encoding="utf-8") as fh:
            if path.endswith(".json"):
                json.load(fh)
            else:  # the text, as place reads it (libyaml on a file object reads in small chunks, ~2x slower)
                yaml.load(fh.read(), Loader=yaml.CSafeLoader)
        code = 0
    else:
        from webhook.cli import main as cli_main

        out, sys.stdout = sys.stdout, io.StringIO()
        try:
            code = cli_main(["place", "-f", workload, "--cluster", path, "--topology-file", topology, "-o", "json"])
        finally:
            sys.stdout = out
    return {"seconds": time.perf_counter() - t0, "exit": code, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def dump_figures(nodes: int, formats: tuple[str, ...]) -> list[dict]:
    """Write the realistic dump in each format to a temporary directory and time parse and place
    (each in its own subprocess), printing one line per format."""
    import tempfile

    import yaml

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        doc = realistic_dump(nodes)
        workload, topology = os.path.join(tmp, "job.yaml"), os.path.join(tmp, "topology.yaml")
        with open(workload, "w", encoding="utf-8") as fh:
            fh.write(DUMP_WORKLOAD)
        with open(topology, "w", encoding="utf-8") as fh:
            yaml.safe_dump(topology_object(), fh)
        for fmt in formats:
            path = os.path.join(tmp, f"cluster.{fmt}")
            with open(path, "w", encoding="utf-8") as fh:
                if fmt == "json":
                    json.dump(doc, fh)
                else:
                    yaml.dump(doc, fh, Dumper=yaml.CSafeDumper, sort_keys=False)
            size = os.path.getsize(path)
            figures = {}
            for what in ("parse", "place"):
                cp = subprocess.run([sys.executable, __file__, "--dump-case", what, path, workload, topology],
                                    capture_output=True, text=True, check=True)
                figures[what] = json.loads(cp.stdout.strip().splitlines()[-1])
            row = {"format": fmt, "nodes": nodes, "pods": nodes * 2, "mb": size / 1e6,
                   "parse_s": figures["parse"]["seconds"], "place_s": figures["place"]["seconds"],
                   "place_exit": figures["place"]["exit"], "ratio": figures["place"]["seconds"] / figures["parse"]["seconds"]}
            rows.append(row)
            bare = "json.load" if fmt == "json" else "yaml.load(text, CSafeLoader)"
            print(f"{fmt:<5} {size / 1e6:>7.0f} MB  {bare:<23} {row['parse_s']:>7.2f} s   place {row['place_s']:>7.2f} s "
                  f"(exit {row['place_exit']})   place / parse {row['ratio']:.2f}", flush=True)
    return rows


# --- baselines for the trace ---------------------------------------------------------------

def _assign_fill(index: ClusterIndex, gang: Gang, order: np.ndarray, free: np.ndarray) -> Placement:
    q = index.req_vector(gang.pods[0])
    cols = np.flatnonzero(q > 0)
    slots = np.where(index.eligibility.base_ok[order], (free[order][:, cols] // q[cols]).min(axis=1), 0).clip(0)
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
    s = np.where(index.eligibility.base_ok, (index.free[:, cols] // q[cols]).min(axis=1), 0).clip(0)
    need = len(gang.pods)
    for d in range(index.node_depth, -1, -1):
        agg = np.add.reduceat(s, index.starts[d])
        ok = np.flatnonzero(agg >= need)
        if len(ok):
            j = ok[np.lexsort([ok, -agg[ok]])[0]]
            break
    else:
        return Placement(placed=False, reason="no room")
    a = int(index.starts[d][j])
    b = int(index.starts[d][j + 1]) if j + 1 < len(index.starts[d]) else index.n
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
    ap.add_argument("--quick", action="store_true",
                    help="fewer repetitions, 32,768 nodes only, the JSON dump only, a 300-job trace")
    ap.add_argument("--trace-only", action="store_true", help="run only the trace comparison")
    ap.add_argument("--engine-only", action="store_true", help="run only part 1 (engine decision times)")
    ap.add_argument("--dump-only", action="store_true", help="run only part 2 (place on a realistic dump)")
    ap.add_argument("--dump-nodes", type=int, default=10_000, help="nodes of the realistic dump (default 10,000)")
    ap.add_argument("--one", nargs=3, metavar=("NODES", "PODS", "FAMILY"), help=argparse.SUPPRESS)
    ap.add_argument("--dump-case", nargs=4, metavar=("WHAT", "PATH", "WORKLOAD", "TOPOLOGY"), help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_size(int(args.one[0]), int(args.one[1]), args.reps, args.one[2])))
        return 0
    if args.dump_case:
        print(json.dumps(dump_case(*args.dump_case)))
        return 0
    n_jobs = 300 if args.quick else 1000
    if args.trace_only:
        _print_trace(n_jobs, trace(n_jobs))
        return 0
    everything = not (args.engine_only or args.dump_only)
    rows, dumps, tr = [], [], None
    if everything or args.engine_only:
        reps = 11 if args.quick else 41
        print("part 1: engine decision time (one place() call; gen-cluster snapshot, 30% of GPUs bound)")
        print(f"{'nodes':>6} {'pods':>5} {'family':<27} {'placed':>6} {'exact':>5} {'median ms':>10} {'p99 ms':>8} "
              f"{'peak MiB':>9} {'RSS MiB':>8}  segment levels / workload level")
        sizes = [(32768, 4096)] if args.quick else [(n, p) for n in (512, 4096, 32768) for p in (64, 512, 4096)]
        for nodes, pods in sizes:
            for family in FAMILIES:
                r = 5 if nodes == 32768 and args.quick else reps
                cp = subprocess.run([sys.executable, __file__, "--one", str(nodes), str(pods), family, "--reps", str(r)],
                                    capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                row = json.loads(cp.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"{nodes:>6} {pods:>5} {family:<27} {str(row['placed']):>6} {str(row['exact']):>5} "
                      f"{row['median_ms']:>10.1f} {row['p99_ms']:>8.1f} {row['decision_peak_mib']:>9.1f} "
                      f"{row['max_rss_mib']:>8.0f}  {row['segment_levels']} / {row['workload_level']}", flush=True)
        exact = sum(1 for r in rows if r["exact"])
        print(f"exact (proven optimal) in {exact} of {len(rows)} cases")
    if everything or args.dump_only:
        print(f"\npart 2: the whole place command on a realistic {args.dump_nodes:,}-node dump "
              f"({2 * args.dump_nodes:,} bound pods), beside the bare parse of the same file")
        dumps = dump_figures(args.dump_nodes, ("json",) if args.quick else ("json", "yaml"))
    if everything:
        tr = trace(n_jobs)
        _print_trace(n_jobs, tr)
    if args.json:
        print(json.dumps({"sizes": rows, "dumps": dumps, "trace": tr}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
