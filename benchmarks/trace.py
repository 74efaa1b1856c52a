"""A job trace over time on KWOK nodes, through each scheduler in turn (issue 36, part 2): this
project's gate and controller, Kueue's Topology-Aware Scheduling and kube-scheduler's Workload API
place the same seeded trace of gangs that arrive, run for their duration and finish.

    python3 benchmarks/trace.py                                   # CI size: 128 nodes, 16 gangs, about a minute each
    python3 benchmarks/trace.py --zones 2 --blocks 5 --racks 25 --nodes 20 --jobs 300 \\
        --arrivals 600 --min-duration 30 --max-duration 600      # 5,000 nodes
    python3 benchmarks/trace.py --targets gate --seed 7 --work DIR

**The cluster**: ``segment-webhook gen-cluster --zones Z --blocks B --racks R --nodes N --gpus 8
--fill 0`` (zone > block > rack > node), registered as KWOK nodes (``hack/local-cluster.sh up
--with kwok``, hack/kwok.py) on each target's own control plane (``schedulers.start_target``).
KWOK makes a bound pod Running at once and Succeeded after the pod's
``pod-complete.stage.kwok.x-k8s.io/delay`` (the job's duration).

**The trace** (:func:`make_trace`, seeded): ``--jobs`` Indexed Jobs (batch/v1). Arrivals: a
Poisson process over ``--arrivals`` seconds. Gang size (pods): a power of two from 4 to a quarter
of the cluster's nodes, drawn with weight ``size**-1.2`` (a heavy tail of small jobs, as published
GPU-cluster traces show: most jobs are small, most GPU time is in the few large ones); the trace
always holds one "hero" job of a quarter of the cluster (KAI's scale scenarios). GPUs per pod: 8
(a whole node) from 16 pods up, else 4 or 8. Segment size: a power of two from 2 to what one rack
holds (and at most the gang), required in a rack. Gang level: the narrowest level (rack, block,
zone) that holds the gang, required (50%), preferred (30%) or none (20%). Duration: log-uniform
between ``--min-duration`` and ``--max-duration`` seconds. ``--time-scale`` says how many trace
seconds one real second stands for (default 60: a real second is a trace minute); only the
GPU-hours are given in trace time.

**Per target**, one run: the Jobs are created at their arrival times (labelled for the target as
``schedulers.indexed_job`` labels them); a pod watch records when each pod is created, bound,
Running and finished, and keeps every pod's latest state; every ``--sample`` seconds the pod
states are copied (a snapshot of that moment). The run ends when every gang has finished, or
``--timeout`` seconds after the last arrival, or ``--idle`` seconds with no pod change. Then:

* GPU-hours used / available: the GPUs of each pod times its bound -> finished (or end) time,
  over all GPUs times the makespan (both in trace hours);
* gang wait p50 / p99: Job created -> its last pod bound (nearest rank), placed gangs only;
* makespan: first Job created -> last pod finished (or the end of the run);
* gangs never placed, each explained: the engine's verdict on the final snapshot (``waiting for
  capacity: ...`` when it does not fit there; ``fits on free capacity`` when it does) and the
  target's own word (the first unbound pod's PodScheduled message, or the Job's suspension);
* segments split across racks and gangs split across their level's domains, for required levels
  (must be 0) and preferred ones (allowed);
* nodes over-booked: a node whose bound, unfinished pods together ask more than its allocatable at
  any moment the watch saw (must be 0);
* pending: under ``kueue`` and ``workload-api``, from the moment the target's scheduler refused
  the gang (:func:`refusals`, the condition's ``lastTransitionTime``): Kueue's Workload
  ``QuotaReserved=False`` (reason ``Pending``, e.g. "... allows to fit only N out of M pod(s)"),
  kube-scheduler's ``PodScheduled=False`` reason ``Unschedulable`` on every pod of the gang;
  until a pod of it is bound or the refusal is gone (Kueue admitted it). Under ``gate`` (ours), from
  when the controller has the gang in hand (:func:`in_hand`: its last pod created);
* greedy misses: gangs pending at a snapshot where ``place`` (the engine on that snapshot's free
  capacity) finds a placement, and still pending with a placement found at the first snapshot
  ``--grace`` seconds later (the target had that long to act);
* with ``--advise`` (``controller --advise`` beside ``kueue`` and ``workload-api``): of the greedy
  misses, how many the advisor named ("fits now" Event on the Job while pending), how many within
  2 s, and the p50 / p99 time from the refusal (or from the pod finish that made the refused gang
  fit) to that Event; "fits now" said of a gang that did not fit; Events before the gang's
  refusal; and one ``kubectl describe job`` of a gang the advisor wrote on while it was still
  pending (printed, and kept as ``WORK/<target>/describe.txt``). The latencies twice: as the
  benchmark's watches saw the writes (refusal times have whole seconds), and ``audited``, from
  kube-apiserver's audit log (``WORK/<target>/cluster/logs/audit.log``, microseconds): the
  refusal's (or the freeing pod finish's) status write received -> the advisor's Event write
  complete (:func:`audit_times`, :func:`exact_latencies`); a miss already called "fits now" before
  it could first be named counts 0 s in both;
* CPU per gang: CPU seconds (user + system, /proc) of the webhook and the controller (ours for
  gate and workload-api, Kueue's manager for kueue) over the run, divided by the gangs, and of
  kube-scheduler and KWOK for reference.

Figures only; the exit status is 1 only when a control plane could not be started.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import http.client
import json
import math
import os
import random
import shutil
import ssl
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import kwok  # noqa: E402  (hack/kwok.py)
import local_cluster  # noqa: E402
import schedulers  # noqa: E402
from webhook.controller.advisory import kueue_pending_since, kueue_workload_pending  # noqa: E402
from webhook.kube.pods import is_terminated, occupied_node, pod_requests_milli  # noqa: E402
from webhook.kube.quantity import parse_quantity  # noqa: E402
from webhook.planning.pipeline import place_workload  # noqa: E402
from webhook.planning.snapshot import Snapshot, snapshot_from_objects  # noqa: E402

TARGETS = schedulers.TARGETS
GPU = schedulers.GPU
GPUS_PER_NODE = 8
ZONE = "topology.kubernetes.io/zone"
BLOCK = schedulers.BLOCK
RACK = schedulers.RACK
#: Gang levels, narrowest first (the rack is also every segment's level).
LEVELS = (RACK, BLOCK, ZONE)
JOB_NAME = schedulers.JOB_NAME
COMPLETION_INDEX = schedulers.COMPLETION_INDEX
RUN_LABEL = schedulers.RUN_LABEL
RUN_VALUE = "trace"
NAMESPACE = schedulers.NAMESPACE
TOPOLOGY_NAME = "cluster-topology"
#: The targets ``--advise`` runs the advisory controller beside (another scheduler places their gangs).
ADVISED_TARGETS = ("kueue", "workload-api")


@dataclass(frozen=True)
class Cluster:
    """The generated cluster: ``zones`` x ``blocks`` (per zone) x ``racks`` (per block) x
    ``nodes`` (per rack) nodes of :data:`GPUS_PER_NODE` GPUs."""

    zones: int = 1
    blocks: int = 2
    racks: int = 4
    nodes: int = 16

    @property
    def node_count(self) -> int:
        return self.zones * self.blocks * self.racks * self.nodes

    def level_nodes(self, level: str) -> int:
        """Nodes in one domain of ``level`` (one of :data:`LEVELS`)."""
        return {RACK: self.nodes, BLOCK: self.nodes * self.racks, ZONE: self.nodes * self.racks * self.blocks}[level]


@dataclass(frozen=True)
class TraceJob:
    """One gang of the trace: ``pods`` pods of ``gpus`` GPUs in segments of ``segment`` (required
    in a rack), the gang at ``gang_level`` (``None``: no level) ``required`` or preferred;
    created ``arrival`` s after the start, each pod running ``duration`` s."""

    name: str
    arrival: float
    pods: int
    gpus: int
    segment: int
    gang_level: str | None
    required: bool
    duration: float

    @property
    def gpu_count(self) -> int:
        return self.pods * self.gpus


@dataclass(frozen=True)
class TraceShape:
    """What a trace is made of (:func:`make_trace`); seconds are real seconds."""

    jobs: int = 16
    arrivals: float = 12.0
    min_duration: float = 3.0
    max_duration: float = 12.0
    seed: int = 0


# ------------------------------------------------------------------------------- the trace
def make_trace(cluster: Cluster, shape: TraceShape) -> list[TraceJob]:
    """The seeded trace (module docstring), sorted by arrival; the same ``cluster`` and ``shape``
    give the same jobs. Raises ValueError when the cluster has fewer than 16 nodes (a quarter of
    it must hold a gang of 4) or racks of fewer than 2 nodes."""
    if cluster.node_count < 16 or cluster.nodes < 2:
        raise ValueError(f"the trace needs at least 16 nodes in racks of at least 2 (got {cluster.node_count} "
                         f"nodes in racks of {cluster.nodes})")
    rng = random.Random(shape.seed)
    largest = 2 ** int(math.log2(cluster.node_count // 4))
    sizes = [2 ** k for k in range(2, int(math.log2(largest)) + 1)]
    weights = [size ** -1.2 for size in sizes]
    hero_at = rng.randrange(shape.jobs)
    clock, jobs = 0.0, []
    for index in range(shape.jobs):
        if index:
            clock += rng.expovariate(shape.jobs / shape.arrivals)
        pods = largest if index == hero_at else rng.choices(sizes, weights)[0]
        gpus = GPUS_PER_NODE if pods >= 16 else rng.choice((4, GPUS_PER_NODE))
        rack_pods = cluster.nodes * (GPUS_PER_NODE // gpus)
        segments = [2 ** k for k in range(1, int(math.log2(min(pods, rack_pods))) + 1)]
        segment = rng.choice(segments)
        needed = pods * gpus / GPUS_PER_NODE
        level = next((lv for lv in LEVELS if cluster.level_nodes(lv) >= needed), None)
        mode = rng.choices(("required", "preferred", "none"), (5, 3, 2))[0]
        if index == hero_at:
            mode = "required"
        duration = shape.min_duration * (shape.max_duration / shape.min_duration) ** rng.random()
        jobs.append(TraceJob(f"trace-{index:04d}", round(clock, 3), pods, gpus, segment,
                             level if mode != "none" else None, mode == "required", round(duration, 3)))
    return jobs


def offered_load(jobs: list[TraceJob], cluster: Cluster, arrivals: float) -> float:
    """GPU-seconds the trace asks for over the GPU-seconds of the arrival window."""
    return sum(j.gpu_count * j.duration for j in jobs) / (cluster.node_count * GPUS_PER_NODE * arrivals)


def job_manifest(job: TraceJob, target: str | None) -> dict[str, Any]:
    """The Indexed Job of ``job``, labelled for ``target`` as ``schedulers.indexed_job`` labels
    (``None``: no target label, as ``place`` reads it), its pods carrying KWOK's delay annotation."""
    labels: dict[str, str] = {}
    if target is not None:
        labels["segments.dev/target"] = target
        if target == "kueue":
            labels["kueue.x-k8s.io/queue-name"] = local_cluster.KUEUE_LOCAL_QUEUE
    annotations = {"kai.scheduler/topology": TOPOLOGY_NAME}
    if job.gang_level is not None:
        kind = "required" if job.required else "preferred"
        annotations[f"kai.scheduler/topology-{kind}-placement"] = job.gang_level
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job.name, "namespace": NAMESPACE, "labels": labels, "annotations": annotations},
            "spec": {"completionMode": "Indexed", "completions": job.pods, "parallelism": job.pods,
                     "template": {"metadata": {
                         "labels": {RUN_LABEL: RUN_VALUE},
                         "annotations": {"kai.scheduler/segment-size": str(job.segment),
                                         "kai.scheduler/segment-topology-required-placement": RACK,
                                         kwok.DELAY_ANNOTATION: f"{round(job.duration * 1000)}ms"}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "w", "image": "registry.k8s.io/pause:3.10",
                             "resources": {"limits": {GPU: str(job.gpus)}}}]}}}}


# ------------------------------------------------------------------------------- the pure checks
def splits(jobs: list[TraceJob], pods: list[Mapping[str, Any]], node_labels: Mapping[str, Mapping[str, str]]
           ) -> tuple[list[str], list[str]]:
    """``(required, preferred)``: the segments and gangs of ``jobs`` whose pods (every pod of
    ``pods`` with a ``spec.nodeName``, finished or not) sit in more than one domain of their level,
    one sentence each. A segment (``completion index // segment``) is required in a rack; a gang at
    its ``gang_level`` required or preferred. A node without the level's label counts as its own
    domain."""
    by_name = {j.name: j for j in jobs}
    segment_domains: dict[tuple[str, int], set[str]] = defaultdict(set)
    gang_domains: dict[str, set[str]] = defaultdict(set)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        labels = pod["metadata"].get("labels") or {}
        job = by_name.get(labels.get(JOB_NAME, ""))
        if not node or job is None:
            continue
        here = node_labels.get(node, {})
        segment_domains[(job.name, int(labels.get(COMPLETION_INDEX, 0)) // job.segment)].add(here.get(RACK, f"<{node}>"))
        if job.gang_level:
            gang_domains[job.name].add(here.get(job.gang_level, f"<{node}>"))
    required, preferred = [], []
    for (name, segment), domains in sorted(segment_domains.items()):
        if len(domains) > 1:
            required.append(f"{name} segment {segment} spans {len(domains)} racks: {', '.join(sorted(domains))}")
    for name, domains in sorted(gang_domains.items()):
        if len(domains) > 1:
            job = by_name[name]
            text = f"{name} spans {len(domains)} {job.gang_level} domains: {', '.join(sorted(domains))}"
            (required if job.required else preferred).append(text)
    return required, preferred


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in (0, 1]); ``nan`` for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


class Occupancy:
    """The bound, unfinished pods of each node as a watch sees them, and every moment a node's
    pods ask more than its allocatable (``over``: node -> first sentence)."""

    def __init__(self, nodes: list[Mapping[str, Any]]):
        self.allocatable = {n["metadata"]["name"]: {r: parse_quantity(v) for r, v in
                                                    ((n.get("status") or {}).get("allocatable") or {}).items()}
                            for n in nodes}
        self.on_node: dict[str, dict[str, dict[str, Fraction]]] = defaultdict(dict)
        self.where: dict[str, str] = {}
        self.over: dict[str, str] = {}

    def update(self, pod: Mapping[str, Any], deleted: bool = False) -> None:
        """Take the pod's new state: bound and not finished -> on its node (checked); else off it."""
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        holds = bool(node) and not deleted and not is_terminated(pod)
        previous = self.where.pop(name, None)
        if previous is not None:
            self.on_node[previous].pop(name, None)
        if not holds:
            return
        self.where[name] = node
        self.on_node[node][name] = schedulers.pod_requests(pod)
        asked: dict[str, Fraction] = defaultdict(Fraction)
        for requests in self.on_node[node].values():
            for resource, value in requests.items():
                asked[resource] += value
        for resource, value in asked.items():
            has = self.allocatable.get(node, {}).get(resource, Fraction(0))
            if value > has and node not in self.over:
                self.over[node] = (f"node {node}: its {len(self.on_node[node])} bound pods ask {float(value):g} "
                                   f"{resource}, it has {float(has):g}")


# ------------------------------------------------------------------------------- the watch
@dataclass
class PodTimes:
    created: float
    bound: float | None = None
    running: float | None = None
    finished: float | None = None
    #: the ``lastTransitionTime`` (monotonic) of the first PodScheduled=False reason Unschedulable seen
    refused: float | None = None


def stream(cluster: local_cluster.LocalCluster, path: str | Callable[[], str], kind: str, observe,
           stopping: threading.Event, ready: threading.Event, *,
           on_event: Callable[[Mapping[str, Any]], None] | None = None,
           on_drop: Callable[[], None] | None = None) -> None:
    """Watch ``path`` on the cluster's apiserver until ``stopping`` is set: ``observe(type, object)``
    for each ADDED / MODIFIED / DELETED event of ``kind``, or, with ``on_event``, every event as it
    comes (BOOKMARKs and ERRORs too; an answer other than 200, e.g. 410 for a version already
    compacted, is given to it as an ``ERROR`` event); ``ready`` set once a watch is open. A dropped
    watch is opened again (``on_drop()`` called first), on ``path()`` when ``path`` is callable (a
    caller that keeps the last resourceVersion resumes there; otherwise ADDED events repeat:
    observers are idempotent)."""
    context = ssl.create_default_context(cafile=str(cluster.dir / "pki" / "ca.crt"))
    while not stopping.is_set():
        connection = http.client.HTTPSConnection("127.0.0.1", cluster.state["ports"]["kube-apiserver"],
                                                 context=context, timeout=3600)
        try:
            connection.request("GET", path() if callable(path) else path,
                               headers={"Authorization": f"Bearer {cluster.state['admin_token']}"})
            response = connection.getresponse()
            if response.status != 200:
                if on_event is not None:
                    on_event({"type": "ERROR", "object": {"code": response.status}})
                raise http.client.HTTPException(f"watch: {response.status}")
            ready.set()
            while not stopping.is_set():
                line = response.readline()
                if not line:
                    break
                event = json.loads(line)
                if on_event is not None:
                    on_event(event)
                elif event.get("type") in ("ADDED", "MODIFIED", "DELETED") and event["object"].get("kind") == kind:
                    observe(event["type"], event["object"])
        except (OSError, http.client.HTTPException, ValueError):
            time.sleep(0.5)  # a dropped watch: watch again
        finally:
            connection.close()
        if not stopping.is_set() and on_drop is not None:
            on_drop()


class TraceWatch(threading.Thread):
    """Watches the trace's pods: per pod its :class:`PodTimes` (monotonic, first seen), its latest
    object (``latest``) and the :class:`Occupancy`; ``samples`` gets ``(time, {name: pod})`` every
    ``sample`` seconds once :meth:`start_sampling` is called."""

    def __init__(self, cluster: local_cluster.LocalCluster, nodes: list[Mapping[str, Any]], sample: float):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.times: dict[str, PodTimes] = {}
        self.latest: dict[str, Mapping[str, Any]] = {}
        self.occupancy = Occupancy(nodes)
        self.lock = threading.Lock()
        self.last_change = time.monotonic()
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.sample = sample
        self.samples: list[tuple[float, dict[str, Mapping[str, Any]]]] = []
        #: the resourceVersion of the last event seen (``None``: the next watch lists every pod)
        self.resource_version: str | None = None
        #: watches that ended before the run did (the apiserver closes a watcher it cannot feed
        #: fast enough: "Forcing pods watcher close due to unresponsiveness")
        self.drops = 0
        #: target kueue (:meth:`watch_workloads`): Job name -> its Kueue Workload as last seen, and
        #: a copy per sample (``workload_samples[i]`` beside ``samples[i]``)
        self.workloads: dict[str, Mapping[str, Any]] = {}
        #: target kueue: Job name -> when its Workload was first seen refused (:func:`refusals`)
        self.kueue_refused: dict[str, float] = {}
        #: target kueue: Job name -> when this watch first saw its Workload refused (monotonic,
        #: sub-second: the refusal happened at most this late, and before the second after the
        #: condition's whole-second ``lastTransitionTime``)
        self.kueue_refused_seen: dict[str, float] = {}
        #: ``time.monotonic() - time.time()``: API times (wall clock) to the watch's monotonic times
        self.offset = time.monotonic() - time.time()
        self.workload_samples: list[dict[str, Mapping[str, Any]]] = []
        #: target kueue: Workload name -> its Job's name, every Workload seen (deleted ones too)
        self.workload_jobs: dict[str, str] = {}

    def observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        now, name = time.monotonic(), pod["metadata"]["name"]
        with self.lock:
            times = self.times.get(name)
            if times is None:
                times = self.times[name] = PodTimes(now)
                self.last_change = now
            if kind == "DELETED":
                self.latest.pop(name, None)
                self.occupancy.update(pod, deleted=True)
                return
            self.latest[name] = pod
            self.occupancy.update(pod)
            phase = (pod.get("status") or {}).get("phase")
            if times.refused is None:
                times.refused = _pod_refused_at(pod, self.offset)
            if times.bound is None and (pod.get("spec") or {}).get("nodeName"):
                times.bound = self.last_change = now
            if times.running is None and phase == "Running":
                times.running = self.last_change = now
            if times.finished is None and phase in ("Succeeded", "Failed"):
                times.finished = self.last_change = now

    def watch_path(self) -> str:
        """The watch request: the trace's pods with bookmarks, from :attr:`resource_version` when
        one is known, so that a dropped watch resumes where it stopped. Without it, each new watch
        replays every pod as ADDED: at 5,000 nodes under load average 14, that replay on a busy
        apiserver got the watch closed again within seconds, 20 times in 3 min."""
        path = (f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&allowWatchBookmarks=true"
                f"&labelSelector={RUN_LABEL}%3D{RUN_VALUE}")
        return path + (f"&resourceVersion={self.resource_version}" if self.resource_version else "")

    def handle(self, event: Mapping[str, Any]) -> None:
        """One watch event: a pod's ADDED, MODIFIED or DELETED is observed; its (or a BOOKMARK's)
        resourceVersion is kept; an ERROR (410 Expired: the version left the apiserver's window)
        forgets the version, so the next watch starts from every pod's current state."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            self.resource_version = None
            return
        if kind in ("ADDED", "MODIFIED", "DELETED") and obj.get("kind") == "Pod":
            self.observe(kind, obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version

    def run(self) -> None:
        stream(self.cluster, self.watch_path, "Pod", self.observe, self.stopping, self.ready,
               on_event=self.handle, on_drop=self._dropped)

    def _dropped(self) -> None:
        self.drops += 1

    def on_workload(self, kind: str, workload: Mapping[str, Any]) -> None:
        """A Kueue Workload's event: kept by its controlling owner's name (the trace's Job)."""
        owners = [r for r in (workload["metadata"].get("ownerReferences") or []) if r.get("controller")]
        if not owners:
            return
        with self.lock:
            job = str(owners[0]["name"])
            self.workload_jobs[str(workload["metadata"]["name"])] = job
            if kind == "DELETED":
                self.workloads.pop(job, None)
                return
            self.workloads[job] = workload
            if job not in self.kueue_refused and kueue_workload_pending(workload):
                at = monotonic_of(kueue_pending_since(workload), self.offset)
                if at is not None:
                    self.kueue_refused[job] = at
                    self.kueue_refused_seen[job] = time.monotonic()

    def watch_workloads(self) -> threading.Event:
        """Watch the namespace's Kueue Workloads (target kueue) until the run stops; returns the
        Event set once the watch is open."""
        ready = threading.Event()
        threading.Thread(target=stream, args=(self.cluster, f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/"
                                              "workloads?watch=1", "Workload", self.on_workload, self.stopping, ready),
                         daemon=True).start()
        return ready

    def start_sampling(self) -> None:
        def loop() -> None:
            while not self.stopping.wait(self.sample):
                with self.lock:
                    self.samples.append((time.monotonic(), dict(self.latest)))
                    self.workload_samples.append(dict(self.workloads))

        threading.Thread(target=loop, daemon=True).start()


# ------------------------------------------------------------------------------- CPU
def cpu_seconds(cluster: local_cluster.LocalCluster, component: str) -> float:
    """CPU seconds (user + system, with reaped children) of every process in the process group
    of ``component`` (``DIR/pids/<component>.pid`` leads it); ``nan`` when it is not running."""
    pid_file = cluster.dir / "pids" / f"{component}.pid"
    if not pid_file.is_file():
        return float("nan")
    group = int(pid_file.read_text())
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp (field 5 of stat; fields[0] is field 3, the state)
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime (fields 14-17)
    return total / ticks


def controller_components(target: str, cluster: local_cluster.LocalCluster) -> list[str]:
    """The components counted as ``target``'s controller."""
    if target == "kueue":
        return ["kueue-manager"]
    return list(cluster.state.get("controller", {}).get("replicas", []))


# ------------------------------------------------------------------------------- greedy misses
class Snapshots:
    """Engine snapshots of the sampled moments: the nodes parsed once, each sample's occupying
    pods charged to a copy (as ``place --cluster`` charges a dump: bound or pinned, not finished)."""

    def __init__(self, dump_objects: list[Mapping[str, Any]]):
        self.base = snapshot_from_objects([o for o in dump_objects if o.get("kind") in ("Node", "Topology")])
        self.cache: tuple[int, Snapshot] | None = None

    def at(self, key: int, pods: Mapping[str, Mapping[str, Any]]) -> Snapshot:
        if self.cache is not None and self.cache[0] == key:
            return self.cache[1]
        nodes = {n.name: replace(n, free=dict(n.free)) for n in self.base.nodes}
        for pod in pods.values():
            node = nodes.get(occupied_node(pod) or "")
            if node is None:
                continue
            for resource, value in pod_requests_milli(pod.get("spec") or {}).items():
                node.free[resource] = node.free.get(resource, 0) - value
        snapshot = Snapshot(nodes=list(nodes.values()), topologies=self.base.topologies)
        self.cache = (key, snapshot)
        return snapshot


def in_hand(target: str, jobs: list[TraceJob], submitted: Mapping[str, float], times: Mapping[str, PodTimes],
            pods: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """When ``target`` could first act on each gang: ``kueue`` admits a Job's Workload before any
    pod exists, so from the Job's create; ``gate`` and ``workload-api`` act on a complete gang, so
    from when its last pod was first seen (a gang whose pods never all existed is left out)."""
    if target == "kueue":
        return dict(submitted)
    created: dict[str, list[float]] = defaultdict(list)
    for name, pod in pods.items():
        created[(pod["metadata"].get("labels") or {}).get(JOB_NAME, "")].append(times[name].created)
    return {j.name: max(created[j.name]) for j in jobs if len(created.get(j.name, ())) >= j.pods}


#: kube-scheduler's ``PodScheduled=False`` reason for a pod it tried and could not place (k8s.io/api
#: core/v1 ``PodReasonUnschedulable``; kubernetes v1.37.2 ``pkg/scheduler/schedule_one.go``
#: ``handleSchedulingFailure``, which a pod group's failed cycle calls for each of its pods).
UNSCHEDULABLE = "Unschedulable"
#: The targets whose refusal the benchmark reads (:func:`refusals`); under ``gate`` (this project's
#: own controller) a gang is pending from when it is in hand (:func:`in_hand`).
REFUSING_TARGETS = ("kueue", "workload-api")


def monotonic_of(stamp: str, offset: float) -> float | None:
    """The monotonic time of RFC 3339 ``stamp`` (an API time, whole seconds), ``offset`` being
    ``time.monotonic() - time.time()``; ``None`` for no or a malformed stamp."""
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() + offset
    except (AttributeError, ValueError):
        return None


def _pod_refused_at(pod: Mapping[str, Any], offset: float) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                and condition.get("reason") == UNSCHEDULABLE):
            return monotonic_of(str(condition.get("lastTransitionTime") or ""), offset)
    return None


def refusals(target: str, jobs: list[TraceJob], pods: Mapping[str, Mapping[str, Any]],
             workloads: Mapping[str, Mapping[str, Any]], offset: float) -> dict[str, float]:
    """The gangs ``target``'s scheduler has refused at one moment (``pods``, ``workloads``: that
    moment's objects; ``workloads``: Job name -> its Kueue Workload), each with when it refused
    (monotonic, from the condition's ``lastTransitionTime``: whole seconds, so up to 1 s early).
    No pod of a refused gang holds a node or has finished.

    * ``kueue``: the Job's Workload is pending as the advisory controller reads it
      (:func:`webhook.controller.advisory.kueue_workload_pending`: no admission, ``QuotaReserved``
      ``False``, which Kueue v0.17's scheduler sets with reason ``Pending`` and its message, e.g.
      "couldn't assign flavors ... allows to fit only", when it cannot admit: ``pkg/scheduler/
      scheduler.go`` ``requeueAndUpdate``, ``pkg/workload/workload.go``
      ``UnsetQuotaReservationWithCondition``); since the condition's ``lastTransitionTime``.
    * ``workload-api``: every pod of the gang exists and has ``PodScheduled=False`` reason
      ``Unschedulable`` (:data:`UNSCHEDULABLE`; the PodGroup's ``PodGroupInitiallyScheduled=False``
      ``Unschedulable`` is written in the same cycle, ``schedule_one_podgroup.go``); since the latest
      of the pods' ``lastTransitionTime``.
    * any other target: ``{}`` (no other scheduler refuses)."""
    by_job: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    busy: set[str] = set()
    for pod in pods.values():
        job = (pod["metadata"].get("labels") or {}).get(JOB_NAME, "")
        if is_terminated(pod) or occupied_node(pod):
            busy.add(job)
        else:
            by_job[job].append(pod)
    out: dict[str, float] = {}
    for job in jobs:
        if job.name in busy:
            continue
        if target == "kueue":
            workload = workloads.get(job.name)
            if workload is not None and kueue_workload_pending(workload):
                at = monotonic_of(kueue_pending_since(workload), offset)
                if at is not None:
                    out[job.name] = at
        elif target == "workload-api" and len(by_job.get(job.name, ())) >= job.pods:
            marks = [_pod_refused_at(pod, offset) for pod in by_job[job.name]]
            if all(m is not None for m in marks):
                out[job.name] = max(m for m in marks if m is not None)
    return out


def first_refusals(target: str, jobs: list[TraceJob], times: Mapping[str, PodTimes],
                   pods: Mapping[str, Mapping[str, Any]], kueue_refused: Mapping[str, float]) -> dict[str, float]:
    """Job name -> when ``target`` first refused the gang, from every event the watches saw (not
    only the samples: a refusal undone within a second still counts), as :func:`refusals` reads
    one: ``kueue``, ``kueue_refused`` (the watch's first pending time of each Job's Workload);
    ``workload-api``, the latest first ``Unschedulable`` time of the gang's pods
    (:attr:`PodTimes.refused`) once every pod of it had one, before any was bound; else ``{}``."""
    if target == "kueue":
        return dict(kueue_refused)
    if target != "workload-api":
        return {}
    of_job: dict[str, list[PodTimes]] = defaultdict(list)
    for name, pod in pods.items():
        if name in times:
            of_job[(pod["metadata"].get("labels") or {}).get(JOB_NAME, "")].append(times[name])
    out = {}
    for job in jobs:
        marks = of_job.get(job.name, [])
        if len(marks) >= job.pods and all(t.refused is not None for t in marks):
            at = max(t.refused for t in marks if t.refused is not None)
            if all(t.bound is None or t.bound > at for t in marks):
                out[job.name] = at
    return out


def fits(job: TraceJob, snapshot: Snapshot) -> bool:
    """Whether the engine places ``job`` on ``snapshot``'s free capacity (``place``, no target)."""
    return place_workload(job_manifest(job, None), snapshot).placed


@dataclass(frozen=True)
class Miss:
    """One greedy miss: the gang was pending from ``pending`` (monotonic: :func:`refusals`' time,
    or :func:`in_hand`'s), ``place`` first found its placement at the sample of ``found``, and
    ``after`` is the sample before it when the gang had been tried there and did not fit (the
    placement then appeared when a pod finished in between; ``None``: it fitted when first tried)."""

    pending: float
    found: float
    after: float | None

    @property
    def waited(self) -> float:
        """Seconds the gang had been pending when its placement was found."""
        return round(self.found - self.pending, 3)


def greedy_misses(jobs: list[TraceJob], ready: Mapping[str, float], samples: list[tuple[float, dict]],
                  snapshots: Snapshots, grace: float, budget: float,
                  refused: Sequence[Mapping[str, float]] | None = None) -> tuple[dict[str, Miss], str]:
    """The greedy misses (module docstring): job name -> its first :class:`Miss`. A job is pending
    at a sample while none of its pods is bound, pinned or finished and, with ``refused`` (one map
    per sample, :func:`refusals`), while its target's scheduler has refused it (since the map's
    time); without it, from ``ready`` on (:func:`in_hand`; a job missing never was). It is a miss
    when ``place`` finds its placement at a sample and again at the first sample ``grace`` s later
    while it is still pending. Free capacity only grows when a pod finishes, so a job that did not
    fit is tried again only after one has. Stops after ``budget`` seconds of engine work; returns
    also how far it got."""
    started = time.monotonic()
    candidate: dict[str, tuple[float, float | None]] = {}
    tried_at: dict[str, int] = {}
    missed: dict[str, Miss] = {}
    previous: float | None = None
    for key, (moment, pods) in enumerate(samples):
        if time.monotonic() - started > budget:
            return missed, f"stopped after {budget:g} s of engine work at snapshot {key} of {len(samples)}"
        in_flight, finished = set(), 0
        for pod in pods.values():
            done = is_terminated(pod)
            finished += done
            if done or occupied_node(pod):
                in_flight.add((pod["metadata"].get("labels") or {}).get(JOB_NAME))
        since = refused[key] if refused is not None else ready
        for job in jobs:
            created = since.get(job.name)
            if job.name in missed or created is None or created > moment or job.name in in_flight:
                candidate.pop(job.name, None)
                continue
            if job.name in candidate and moment >= candidate[job.name][0] + grace:
                if fits(job, snapshots.at(key, pods)):
                    found, after = candidate[job.name]
                    missed[job.name] = Miss(created, found, after)
                else:
                    del candidate[job.name]
                    tried_at[job.name] = finished
            elif job.name not in candidate and tried_at.get(job.name) != finished:
                if fits(job, snapshots.at(key, pods)):
                    candidate[job.name] = (moment, previous if job.name in tried_at else None)
                else:
                    tried_at[job.name] = finished
        previous = moment
    return missed, f"all {len(samples)} snapshots"


# ------------------------------------------------------------------------------- the advisory controller
#: The component name of ``segment-webhook controller --advise`` (``--advise``).
ADVISOR = "segment-webhook-advisor"
ADVISORY_OVERLAY = REPO / "deploy" / "overlays" / "advisory"
ADVISORY_RBAC = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def start_advisor(cluster: local_cluster.LocalCluster) -> None:
    """``segment-webhook controller --advise`` beside the target, as deploy/overlays/advisory runs
    it: that overlay's controller RBAC applied (its ServiceAccount, ClusterRole with Kueue's
    ``workloads`` get/list/watch, Lease Role), a token of its ServiceAccount, the Deployment's args
    plus ``--kubeconfig`` and a loopback ``--metrics-port``; waits for ``/metrics``. Raises
    ClusterError when it does not start."""
    docs = [d for d in local_cluster.yaml.safe_load_all(cluster.kubectl("kustomize", str(ADVISORY_OVERLAY)).stdout) if d]
    cluster.apply([d for d in docs if d["kind"] in ADVISORY_RBAC
                   and (d["kind"] == "Namespace" or d["metadata"]["name"].startswith("segment-webhook-controller"))])
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "segment-webhook-controller")
    pod = deployment["spec"]["template"]["spec"]
    namespace = deployment["metadata"]["namespace"]
    token = cluster.kubectl("create", "token", pod["serviceAccountName"], "-n", namespace, "--duration", "24h").stdout.strip()
    (cluster.dir / "advisor").mkdir(parents=True, exist_ok=True)
    kubeconfig = cluster.dir / "advisor" / "kubeconfig"
    local_cluster.write_kubeconfig(kubeconfig, f"https://127.0.0.1:{cluster.state['ports']['kube-apiserver']}",
                                   cluster.dir / "pki" / "ca.crt", pod["serviceAccountName"], token)
    port = local_cluster.free_port()
    args = local_cluster.replace_flags(pod["containers"][0]["args"], {"--metrics-port": str(port)})
    env = dict(os.environ, PYTHONPATH=str(REPO), POD_NAME=ADVISOR, POD_NAMESPACE=namespace)
    process = cluster.start(ADVISOR, [sys.executable, "-m", "webhook.cli", *args, "--kubeconfig", str(kubeconfig)],
                            env=env)
    cluster.wait_until(ADVISOR, process, lambda: local_cluster._http_ok(port, "/metrics"), "serving /metrics")


class AdvisoryWatch:
    """What the advisory controller wrote and when: ``events``, one ``(time, job, reason, message)``
    per SecondOpinion* Event on a trace Job as the benchmark's watch first saw it (monotonic; the
    Event's own ``firstTimestamp`` has whole seconds), ADDED or MODIFIED with a higher ``count``."""

    def __init__(self, cluster: local_cluster.LocalCluster):
        self.events: list[tuple[float, str, str, str]] = []
        self._counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.ready = [threading.Event()]
        threading.Thread(target=stream, args=(cluster, f"/api/v1/namespaces/{NAMESPACE}/events?watch=1", "Event",
                                              self.on_event, self.stopping, self.ready[0]), daemon=True).start()

    def on_event(self, kind: str, event: Mapping[str, Any]) -> None:
        involved = event.get("involvedObject") or {}
        reason = str(event.get("reason") or "")
        if kind == "DELETED" or not reason.startswith("SecondOpinion") or involved.get("kind") != "Job":
            return
        name, count = event["metadata"]["name"], int(event.get("count") or 1)
        with self.lock:
            if self._counts.get(name, 0) >= count:
                return
            self._counts[name] = count
            self.events.append((time.monotonic(), str(involved.get("name")), reason, str(event.get("message") or "")))


FITS_REASON = "SecondOpinionFitsNow"
#: The bound of issue 36: every greedy miss named within this many seconds (p99).
NAME_WITHIN = 2.0


def bound_at_moment(at: float, times: Mapping[str, PodTimes], pods: Mapping[str, Mapping[str, Any]]
                    ) -> dict[str, Mapping[str, Any]]:
    """The pods that held a node at monotonic time ``at`` as the watch timed them (bound at or
    before it, not finished by then), each as a running pod on its node: the cluster's occupancy at
    that moment, between two samples."""
    out: dict[str, Mapping[str, Any]] = {}
    for name, pod in pods.items():
        t = times.get(name)
        node = (pod.get("spec") or {}).get("nodeName")
        if t is None or t.bound is None or not node or t.bound > at or (t.finished is not None and t.finished <= at):
            continue
        out[name] = {**pod, "status": {"phase": "Running"}}
    return out


def placeable_since(miss: Miss, times: Mapping[str, PodTimes]) -> float:
    """When the gang of ``miss`` could first have been named: its refusal when it fitted as first
    tried; else the first pod finish the watch saw after the sample where it did not fit (free
    capacity grows only then), not before its refusal. The earliest such moment: latencies from it
    are upper bounds."""
    if miss.after is None:
        return miss.pending
    freed = [t.finished for t in times.values() if t.finished is not None and miss.after < t.finished <= miss.found]
    return max(miss.pending, min(freed) if freed else miss.after)


@dataclass
class AuditTimes:
    """What kube-apiserver's audit log (``hack/local_cluster.py`` :data:`~local_cluster.AUDIT_POLICY`)
    says of a run, each time monotonic and to the microsecond (the objects' own condition times have
    whole seconds; the benchmark's watches see a write some time after it happened):

    * ``refused``: job -> when its target first refused the gang: the ``requestReceivedTimestamp``
      of Kueue's first accepted write of the Job's Workload status with ``QuotaReserved`` ``False``
      (Kueue v0.17 ``UnsetQuotaReservationWithCondition``, reason ``Pending``); under the Workload
      API, the latest of the gang's pods' first accepted kube-scheduler status write with
      ``PodScheduled`` ``False`` reason ``Unschedulable``, once every pod of the gang has one;
    * ``finished``: pod -> the ``requestReceivedTimestamp`` of KWOK's accepted status write that made
      it ``Succeeded`` or ``Failed`` (the moment its capacity was freed, at the earliest);
    * ``events``: ``(time, job, reason)`` per accepted write (create, or a count again) of a
      SecondOpinion* Event on a Job by this project's controller, at its ``stageTimestamp`` (the
      write complete, at the latest).

    Latencies from ``refused`` or ``finished`` to ``events`` are upper bounds to within the time a
    write takes, with no whole-second rounding."""

    refused: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    events: list[tuple[float, str, str]] = field(default_factory=list)


def _conditions_in(body: Any) -> list[Mapping[str, Any]]:
    status = body.get("status") if isinstance(body, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in conditions if isinstance(c, Mapping)] if isinstance(conditions, list) else []


def audit_times(events: Sequence[Mapping[str, Any]], offset: float, workload_jobs: Mapping[str, str],
                pod_jobs: Mapping[str, str], jobs: Sequence[TraceJob]) -> AuditTimes:
    """:class:`AuditTimes` from ``events`` (:func:`local_cluster.audit_events`); ``offset``:
    ``time.monotonic() - time.time()``; ``workload_jobs``: Kueue Workload name -> its Job's name;
    ``pod_jobs``: pod name -> its Job's name (the ``batch.kubernetes.io/job-name`` label); ``jobs``:
    the trace (a gang's pod count). Writes answered with a code of 300 or more are left out."""
    out = AuditTimes()
    unschedulable: dict[str, float] = {}
    names: dict[str, tuple[str, str]] = {}
    sizes = {job.name: job.pods for job in jobs}
    for event in sorted(events, key=lambda e: str(e.get("stageTimestamp") or "")):
        if int((event.get("responseStatus") or {}).get("code") or 0) >= 300:
            continue
        ref = event.get("objectRef") or {}
        body = event.get("requestObject")
        received = monotonic_of(str(event.get("requestReceivedTimestamp") or ""), offset)
        done = monotonic_of(str(event.get("stageTimestamp") or ""), offset)
        resource, subresource, name = ref.get("resource"), ref.get("subresource"), str(ref.get("name") or "")
        if resource == "workloads" and subresource == "status" and received is not None:
            job = workload_jobs.get(name)
            if job is not None and job not in out.refused and any(
                    c.get("type") == "QuotaReserved" and c.get("status") == "False" for c in _conditions_in(body)):
                out.refused[job] = received
        elif resource == "pods" and subresource == "status" and received is not None:
            phase = (body.get("status") or {}).get("phase") if isinstance(body, Mapping) else None
            if phase in ("Succeeded", "Failed"):
                out.finished.setdefault(name, received)
            if name not in unschedulable and any(
                    c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == UNSCHEDULABLE
                    for c in _conditions_in(body)):
                unschedulable[name] = received
        elif resource == "events" and done is not None:
            if event.get("verb") == "create" and isinstance(body, Mapping):
                involved = body.get("involvedObject") or {}
                reason = str(body.get("reason") or "")
                made = ((event.get("responseObject") or {}).get("metadata") or {}).get("name")
                if involved.get("kind") != "Job" or not reason.startswith("SecondOpinion"):
                    continue
                if made:
                    names[str(made)] = (str(involved.get("name")), reason)
                out.events.append((done, str(involved.get("name")), reason))
            elif name in names:
                out.events.append((done, *names[name]))
    of_job: dict[str, list[float]] = defaultdict(list)
    for pod, at in unschedulable.items():
        if pod in pod_jobs:
            of_job[pod_jobs[pod]].append(at)
    for job, marks in of_job.items():
        if job not in out.refused and len(marks) >= sizes.get(job, 1 << 30):
            out.refused[job] = max(marks)
    return out


def exact_latencies(misses: Mapping[str, Miss], audit: AuditTimes, times: Mapping[str, PodTimes],
                    bound_at: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """Per greedy miss, seconds from when the gang could first have been named to the advisor's
    "fits now" Event, all from ``audit`` (:class:`AuditTimes`): from its refusal when it fitted as
    first tried (``Miss.after`` is ``None``), else from the earliest audited finish of the pods the
    watch saw finish between the sample where it did not fit and the one where it did (not before
    the refusal); 0 when the advisor's last Event before that said "fits now" already; to the first
    "fits now" write at or after it, before the watch saw a pod of the gang bound. Returns the
    latencies and the misses with no such figure, each with why."""
    of_job: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for at, job, reason in sorted(audit.events):
        of_job[job].append((at, reason))
    out: dict[str, float] = {}
    left: list[str] = []
    for job, miss in misses.items():
        refused = audit.refused.get(job)
        if refused is None:
            left.append(f"{job}: no refusal in the audit log")
            continue
        start = refused
        if miss.after is not None:
            freed = [audit.finished[pod] for pod, t in times.items()
                     if t.finished is not None and miss.after < t.finished <= miss.found and pod in audit.finished]
            start = max(refused, min(freed)) if freed else max(refused, placeable_since(miss, times))
        said = of_job.get(job, [])
        before = [reason for at, reason in said if refused <= at < start]
        if before and before[-1] == FITS_REASON:
            out[job] = 0.0
            continue
        after = [at for at, reason in said
                 if reason == FITS_REASON and at >= start and at < bound_at.get(job, float("inf"))]
        if after:
            out[job] = after[0] - start
        else:
            left.append(f"{job}: no 'fits now' write in the audit log after +{start - refused:.2f} s")
    return out, left


def advisory_figures(jobs: list[TraceJob], watch: AdvisoryWatch, refused_since: Mapping[str, float],
                     misses: Mapping[str, Miss], samples: list[tuple[float, dict]],
                     snapshots: Snapshots, bound_at: Mapping[str, float], times: Mapping[str, PodTimes],
                     pods: Mapping[str, Mapping[str, Any]],
                     refused_seen: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The advisory controller's figures (module docstring, ``--advise``), all from the target's
    refusal (:func:`refusals`; ``refused_since``: job -> its first refusal, monotonic, from the
    condition's whole-second time; ``refused_seen``: job -> when the benchmark's watch first saw
    that refusal, where known (Kueue's Workloads)):

    * ``found``: the greedy misses (``misses``: refused gangs ``place`` found a placement for);
      ``named``: those with a "fits now" Event while pending (the advisor's last Event before the
      gang was placeable, if "fits now", or its first "fits now" after, before the gang's first pod
      was bound); ``to_name``: per named miss, seconds from :func:`placeable_since` (its refusal
      when it fitted then) to that Event (0 when the last Event before already said "fits now");
      ``within``: how many of them in at most :data:`NAME_WITHIN` s; ``to_name_low``: the same
      latencies from the latest moment the refusal can have happened (the watch's sight of it, at
      most the second after its whole-second condition time), lower bounds where ``to_name`` are
      upper bounds (a latency from a pod finish is exact in both);
    * ``to_event``: per refused gang, seconds from its first refusal to the advisor's first Event
      on it after that (``advised``: how many got one); ``early``: Events on a gang before its
      target first refused it, one sentence each (the advisor calls a gang pending only once its
      scheduler refused it);
    * ``false_fits``: "fits now" Events on a gang with no pod bound that ``place`` finds no placement
      for on the occupancy at the moment the Event was seen (:func:`bound_at_moment`), nor on the
      sampled snapshot before or after it (the controller decided a little before its Event arrived;
      capacity moves in between), each a sentence; ``late``: "fits now" Events received after a
      pod of the gang was bound."""
    by_name = {j.name: j for j in jobs}
    with watch.lock:
        events = sorted(watch.events)
    of_job: dict[str, list[tuple[float, str]]] = defaultdict(list)
    first_event: dict[str, float] = {}
    false_fits: list[str] = []
    early: list[str] = []
    late = 0
    moments = [moment for moment, _ in samples]
    start = moments[0] if moments else 0.0
    for number, (at, job, reason, message) in enumerate(events):
        if job not in by_name:
            continue
        of_job[job].append((at, reason))
        since = refused_since.get(job)
        if since is None or at < since:
            early.append(f"{job}: {reason} at +{at - start:.1f} s, "
                         + (f"refused at +{since - start:.1f} s" if since is not None else "never refused"))
        elif since is not None:
            first_event.setdefault(job, at)
        if reason != FITS_REASON:
            continue
        if job in bound_at and bound_at[job] <= at:
            late += 1
            continue
        index = max(0, next((i for i, m in enumerate(moments) if m > at), len(moments)) - 1)
        around = [i for i in (index, index + 1) if i < len(samples)]
        if not fits(by_name[job], snapshots.at(-2 - number, bound_at_moment(at, times, pods))) and \
                not any(fits(by_name[job], snapshots.at(i, samples[i][1])) for i in around):
            false_fits.append(f"{job} at +{at - start:.1f} s: {message[:160]}")
    to_name: dict[str, float] = {}
    to_name_low: dict[str, float] = {}
    for job, miss in misses.items():
        placeable = placeable_since(miss, times)
        said = of_job.get(job, [])
        before = [reason for at, reason in said if miss.pending <= at < placeable]
        if before and before[-1] == FITS_REASON:
            to_name[job] = to_name_low[job] = 0.0
            continue
        after = [at for at, reason in said if reason == FITS_REASON and at >= placeable
                 and at < bound_at.get(job, float("inf"))]
        if after:
            to_name[job] = after[0] - placeable
            latest = placeable
            if placeable == miss.pending and refused_seen and job in refused_seen:
                latest = max(placeable, min(refused_seen[job], placeable + 1.0))
            to_name_low[job] = max(0.0, after[0] - latest)
    return {"found": len(misses), "named": len(to_name), "to_name": list(to_name.values()),
            "to_name_low": list(to_name_low.values()),
            "within": sum(1 for v in to_name.values() if v <= NAME_WITHIN), "refused": len(refused_since),
            "advised": len(first_event), "to_event": [first_event[j] - refused_since[j] for j in first_event],
            "false_fits": false_fits, "early": early, "late": late, "events": len(events),
            "unnamed": sorted(set(misses) - set(to_name))}


# ------------------------------------------------------------------------------- one target
@dataclass
class Result:
    """The figures of one target (seconds are real seconds; GPU-hours in trace hours)."""

    target: str
    gangs: int
    placed: int = 0
    waits: list[float] = field(default_factory=list)
    makespan: float = float("nan")
    gpu_hours_used: float = float("nan")
    gpu_hours_available: float = float("nan")
    never_placed: dict[str, str] = field(default_factory=dict)
    split_required: list[str] = field(default_factory=list)
    split_preferred: list[str] = field(default_factory=list)
    over_booked: dict[str, str] = field(default_factory=dict)
    misses: dict[str, Miss] = field(default_factory=dict)
    #: kueue, workload-api: job -> when its target first refused it (:func:`refusals`, monotonic)
    refused: dict[str, float] = field(default_factory=dict)
    miss_scope: str = ""
    cpu: dict[str, float] = field(default_factory=dict)
    up_seconds: float = float("nan")
    register_seconds: float = float("nan")
    ended: str = ""
    error: str = ""
    advisory: dict[str, Any] = field(default_factory=dict)
    #: components of the control plane that exited during the run -> why (:func:`exited_components`)
    exited: dict[str, str] = field(default_factory=dict)

    @property
    def explained(self) -> int:
        """Gangs never placed whose explanation names a reason."""
        return sum(1 for text in self.never_placed.values() if text)

    def cpu_per_gang(self, role: str) -> float:
        return self.cpu.get(role, float("nan")) / self.gangs if self.gangs else float("nan")


class Describer:
    """``kubectl describe job`` of one gang the advisory controller has written on while the gang
    is still pending (``--advise``): the first Job with a "fits now" Event (else any SecondOpinion
    Event) and no pod bound, :data:`DESCRIBE_AFTER` s after that Event, in a thread of its own
    (:meth:`maybe_capture`, called from the run's loop); ``text`` holds what it printed, headed by
    when and why."""

    def __init__(self, cluster: local_cluster.LocalCluster):
        self.cluster = cluster
        self.started = False
        self.text = ""

    def capture(self, job: str, when: str) -> None:
        answer = self.cluster.kubectl("describe", "job", job, "-n", NAMESPACE, check=False)
        self.text = f"# kubectl describe job {job} -n {NAMESPACE}   ({when})\n" + (answer.stdout or answer.stderr)

    def maybe_capture(self, advisory: AdvisoryWatch, watch: TraceWatch, now: float) -> None:
        with advisory.lock:
            events = sorted(advisory.events)
        ready = [(at, job, reason) for at, job, reason, _ in events if now - at >= DESCRIBE_AFTER]
        if not ready:
            return
        with watch.lock:
            bound = {(p["metadata"].get("labels") or {}).get(JOB_NAME) for p in watch.latest.values()
                     if occupied_node(p) or is_terminated(p)}
        waiting = [(reason != FITS_REASON, at, job) for at, job, reason in ready if job not in bound]
        if not waiting:
            return
        _, at, job = min(waiting)
        self.started = True
        threading.Thread(target=self.capture, args=(job, f"during the run, {now - at:.1f} s after the advisor's "
                                                         "first Event on it, no pod of it bound"),
                         daemon=True).start()


#: Seconds after the advisor's Event before :class:`Describer` describes the Job (its Events listed).
DESCRIBE_AFTER = 2.0


def submit_all(api: local_cluster.ApiClient, jobs: list[TraceJob], target: str, started: float,
               submitted: dict[str, float], errors: list[str]) -> threading.Thread:
    """Create each Job at ``started`` + its arrival (4 clients, so a slow create delays no other);
    ``submitted[name]`` = the monotonic time its create was sent. Returns the running thread."""
    def create(job: TraceJob) -> None:
        try:
            api.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job_manifest(job, target))
        except (local_cluster.ClusterError, OSError, http.client.HTTPException) as error:
            errors.append(f"{job.name}: {error}")

    def loop() -> None:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for job in jobs:
                delay = started + job.arrival - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                submitted[job.name] = time.monotonic()
                pool.submit(create, job)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def explain(job: TraceJob, snapshot: Snapshot, pods: list[Mapping[str, Any]],
            api: local_cluster.ApiClient) -> str:
    """Why ``job`` was never placed: the engine's verdict on ``snapshot`` and the target's own
    word (the first unbound pod's PodScheduled message or scheduling gates; a Job with no pod: its
    ``suspend``). ``""`` (unexplained) when the engine places it there and the target says nothing."""
    result = place_workload(job_manifest(job, None), snapshot)
    engine = ("fits on free capacity at the end" if result.placed
              else f"waiting for capacity: {result.document.get('reason')}")
    target_word = ""
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                target_word = f"pod {pod['metadata']['name']}: {condition.get('message', '')}"
                break
        if not target_word and (pod.get("spec") or {}).get("schedulingGates"):
            gates = ", ".join(g["name"] for g in pod["spec"]["schedulingGates"])
            target_word = f"pod {pod['metadata']['name']} gated by {gates}"
        if target_word:
            break
    if not pods:
        try:
            stored = api.request("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job.name}")
            target_word = f"Job has no pod (suspend: {stored['spec'].get('suspend', False)})"
        except local_cluster.ClusterError as error:
            target_word = f"Job not readable: {error}"
    if result.placed and not target_word:
        return ""  # it fits and the target says nothing: unexplained
    return f"{engine}; {target_word}" if target_word else engine


def measure(target: str, cluster: local_cluster.LocalCluster, jobs: list[TraceJob], dump_objects: list[dict],
            args: argparse.Namespace, result: Result) -> None:
    """Run the trace on the running ``cluster`` of ``target``; fill ``result``."""
    nodes = [o for o in dump_objects if o.get("kind") == "Node"]
    node_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    gpus_total = len(nodes) * GPUS_PER_NODE
    api = local_cluster.ApiClient(cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"], workers=4)
    watch = TraceWatch(cluster, nodes, args.sample)
    watch.start()
    watch.ready.wait(30)
    roles = {"webhook": ["segment-webhook"], "controller": controller_components(target, cluster),
             "kube-scheduler": ["kube-scheduler"], "kwok": [kwok.COMPONENT]}
    if target == "kueue":
        watch.watch_workloads().wait(30)
    advising = ADVISOR in cluster.state.get("components", [])
    advisory = None
    describer = Describer(cluster)
    if advising:
        roles["advisor"] = [ADVISOR]
        advisory = AdvisoryWatch(cluster)
        for opened in advisory.ready:
            opened.wait(30)
    cpu_before = {role: sum(cpu_seconds(cluster, c) for c in names) for role, names in roles.items()}
    submitted: dict[str, float] = {}
    errors: list[str] = []
    started = watch.last_change = time.monotonic()
    watch.start_sampling()
    submitter = submit_all(api, jobs, target, started, submitted, errors)
    size = {j.name: j.pods for j in jobs}
    deadline = started + jobs[-1].arrival + args.timeout
    while True:
        time.sleep(0.5)
        with watch.lock:
            finished: dict[str, int] = defaultdict(int)
            for pod in watch.latest.values():
                if is_terminated(pod):
                    finished[(pod["metadata"].get("labels") or {}).get(JOB_NAME, "")] += 1
        done = sum(1 for j in jobs if finished.get(j.name, 0) >= size[j.name])
        now = time.monotonic()
        if advisory is not None and not describer.started:
            describer.maybe_capture(advisory, watch, now)
        if done == len(jobs) and not submitter.is_alive():
            result.ended = "every gang finished"
            break
        if now > deadline:
            result.ended = f"timeout {args.timeout:g} s after the last arrival ({done}/{len(jobs)} gangs finished)"
            break
        if now - watch.last_change > args.idle and not submitter.is_alive():
            result.ended = f"nothing changed for {args.idle:g} s ({done}/{len(jobs)} gangs finished)"
            break
    ended = time.monotonic()
    if watch.drops:
        result.ended += f"; the pod watch resumed {watch.drops} times"
    result.cpu = {role: sum(cpu_seconds(cluster, c) for c in names) - cpu_before[role] for role, names in roles.items()}
    watch.stopping.set()
    with watch.lock:
        times = dict(watch.times)
        latest = dict(watch.latest)
        samples = list(watch.samples)
        workload_samples = list(watch.workload_samples)
        kueue_refused = dict(watch.kueue_refused)
        kueue_refused_seen = dict(watch.kueue_refused_seen)
        workload_jobs = dict(watch.workload_jobs)
        workload_samples += [{}] * (len(samples) - len(workload_samples))
        result.over_booked = dict(watch.occupancy.over)
    pods_of: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for pod in latest.values():
        pods_of[(pod["metadata"].get("labels") or {}).get(JOB_NAME, "")].append(pod)
    scale = args.time_scale / 3600
    finish_times = [t.finished for t in times.values() if t.finished is not None]
    result.makespan = (max(finish_times) if finish_times else ended) - started
    if result.ended != "every gang finished":
        result.makespan = ended - started
    gpus_of = {j.name: j.gpus for j in jobs}
    used = 0.0
    for name, pod in latest.items():
        t = times[name]
        if t.bound is not None:
            job = (pod["metadata"].get("labels") or {}).get(JOB_NAME, "")
            used += gpus_of.get(job, 0) * ((t.finished or ended) - t.bound)
    result.gpu_hours_used = used * scale
    result.gpu_hours_available = gpus_total * result.makespan * scale
    snapshots = Snapshots(dump_objects)
    final = snapshots.at(-1, latest)
    for job in jobs:
        bound = [times[p["metadata"]["name"]].bound for p in pods_of.get(job.name, [])]
        if len(bound) >= job.pods and all(b is not None for b in bound):
            result.placed += 1
            result.waits.append(max(b for b in bound if b is not None) - submitted.get(job.name, started))
        else:
            result.never_placed[job.name] = explain(job, final, pods_of.get(job.name, []), api)
    result.split_required, result.split_preferred = splits(jobs, list(latest.values()), node_labels)
    ready = in_hand(target, jobs, submitted, times, latest)
    refused = ([refusals(target, jobs, pods, workloads, watch.offset) for (_, pods), workloads
                in zip(samples, workload_samples)] if target in REFUSING_TARGETS else None)
    result.refused = first_refusals(target, jobs, times, latest, kueue_refused)
    result.misses, result.miss_scope = greedy_misses(jobs, ready, samples, snapshots, args.grace, args.miss_budget,
                                                     refused)
    if advisory is not None:
        advisory.stopping.set()
        bound_at = {job: min(b) for job, pods in pods_of.items()
                    if (b := [t for p in pods if (t := times[p["metadata"]["name"]].bound) is not None])}
        result.advisory = advisory_figures(jobs, advisory, result.refused, result.misses, samples, snapshots,
                                           bound_at, times, latest, kueue_refused_seen)
        audit = audit_times(local_cluster.audit_events(cluster.dir), watch.offset, workload_jobs,
                            {name: (pod["metadata"].get("labels") or {}).get(JOB_NAME, "")
                             for name, pod in latest.items()}, jobs)
        exact, left = exact_latencies(result.misses, audit, times, bound_at)
        result.advisory.update(to_name_exact=list(exact.values()), exact_left=left,
                               within_exact=sum(1 for v in exact.values() if v <= NAME_WITHIN))
        if not describer.text:  # none seen pending during the run: an advised Job now, as describe shows it
            with advisory.lock:
                said = [job for _, job, _, _ in sorted(advisory.events)]
            if said:
                describer.capture(next((j for j in said if j in result.misses), said[0]), "after the run")
        result.advisory["describe"] = describer.text
        if describer.text:
            (cluster.dir.parent / "describe.txt").write_text(describer.text)
    if errors:
        result.error = f"{len(errors)} Job creates failed, e.g. {errors[0]}"


def panic_summary(log_text: str) -> str:
    """What a Go program's log says of the panic that ended it: the last ``panic: ...`` line and
    the frame that raised it (the first source line after the last ``runtime/panic.go`` frame of
    the first stack), e.g. ``panic: runtime error: invalid memory address or nil pointer
    dereference at k8s.io/kubernetes@v1.37.2/pkg/scheduler/schedule_one_podgroup.go:1430``;
    ``"exited (no panic in its log)"`` when the log has none."""
    lines = log_text.splitlines()
    message = next((line.strip() for line in reversed(lines) if line.startswith("panic: ")), "")
    if not message:
        return "exited (no panic in its log)"
    frame = ""
    after_panic = False
    for line in lines:
        text = line.strip()
        if text.startswith("runtime/panic.go:"):
            after_panic = True
        elif after_panic and ".go:" in text and not text.startswith("runtime/"):
            frame = text.split(" +0x")[0]
            after_panic = False
        elif frame and text.startswith("panic: "):
            break
    return f"{message} at {frame}" if frame else message


def exited_components(cluster: local_cluster.LocalCluster) -> dict[str, str]:
    """The control plane's components (``up``'s pid files) that are no longer running, each with
    :func:`panic_summary` of its log: a scheduler that crashed leaves every later gang pending
    with nothing said, which the table must not call unexplained in silence."""
    gone = {}
    for component in cluster.state.get("components", []):
        pid_file = cluster.dir / "pids" / f"{component}.pid"
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
        if not local_cluster.process_alive(pid):
            log = cluster.dir / "logs" / f"{component}.log"
            gone[component] = panic_summary(log.read_text(errors="replace")) if log.is_file() else "exited"
    return gone


def run_target(target: str, jobs: list[TraceJob], dump: Path, work: Path, args: argparse.Namespace) -> Result:
    """``target``'s whole turn: its control plane with KWOK up, the dump's Topology and KWOK
    nodes (Kueue's queues for ``kueue``), the trace measured, the control plane down."""
    result = Result(target, len(jobs))
    started = time.monotonic()
    try:
        cluster = schedulers.start_target(target, work / target / "cluster", upstream=("kwok",))
    except local_cluster.ClusterError as error:
        result.error = str(error).splitlines()[0]
        return result
    result.up_seconds = time.monotonic() - started
    try:
        objects = local_cluster.read_objects(dump)
        topology = next(o for o in objects if o.get("kind") == "Topology")
        cluster.kubectl("apply", "-f", "-", input_text=json.dumps(topology))
        schedulers.wait_for_webhook_topology(cluster, job_manifest(jobs[0], target))
        registering = time.monotonic()
        kwok.register_nodes(cluster, dump)
        result.register_seconds = time.monotonic() - registering
        if target == "kueue":
            local_cluster.kueue_queues(cluster, dump)
        if args.advise and target in ADVISED_TARGETS:
            start_advisor(cluster)
        time.sleep(5)  # the controllers' informers (ours, Kueue's) learn the nodes and queues
        measure(target, cluster, jobs, objects, args, result)
    except (local_cluster.ClusterError, OSError) as error:
        result.error = str(error).splitlines()[0] if str(error) else type(error).__name__
    finally:
        result.exited = exited_components(cluster)
        cluster.stop_all()
    return result


# ------------------------------------------------------------------------------- the table
def table(results: list[Result], time_scale: float) -> str:
    """One row per target, the ratios to ``gate``'s row, then per target how the run ended, its
    gangs never placed with their explanation and any broken invariant (the first 5 of each)."""
    ratio = schedulers.ratio
    header = (f"{'target':<13} {'placed':>9} {'GPU-h used/avail':>22} {'wait p50':>9} {'wait p99':>9} "
              f"{'makespan':>9} {'split req':>9} {'split pref':>10} {'over-booked':>11} {'greedy misses':>13} "
              f"{'webhook CPU/gang':>16} {'ctrl CPU/gang':>13} {'sched CPU/gang':>14} {'kwok CPU/gang':>13}")
    rows = [header, "-" * len(header)]
    for r in results:
        p50, p99 = percentile(r.waits, 0.5), percentile(r.waits, 0.99)
        share = r.gpu_hours_used / r.gpu_hours_available if r.gpu_hours_available else float("nan")
        rows.append(f"{r.target:<13} {f'{r.placed}/{r.gangs}':>9} "
                    f"{f'{r.gpu_hours_used:.1f}/{r.gpu_hours_available:.1f} ({share:.0%})':>22} "
                    f"{p50:>7.2f} s {p99:>7.2f} s {r.makespan:>7.1f} s {len(r.split_required):>9} "
                    f"{len(r.split_preferred):>10} {len(r.over_booked):>11} {len(r.misses):>13} "
                    f"{r.cpu_per_gang('webhook'):>14.3f} s {r.cpu_per_gang('controller'):>11.3f} s "
                    f"{r.cpu_per_gang('kube-scheduler'):>12.3f} s {r.cpu_per_gang('kwok'):>11.3f} s")
    base = next((r for r in results if r.target == "gate"), None)
    if base is not None:
        rows.append("ratios to gate (wait p50, wait p99, makespan, GPU share used, webhook + controller CPU per gang):")
        for r in results:
            share = r.gpu_hours_used / r.gpu_hours_available if r.gpu_hours_available else float("nan")
            base_share = base.gpu_hours_used / base.gpu_hours_available if base.gpu_hours_available else float("nan")
            ours = r.cpu.get("webhook", float("nan")) + r.cpu.get("controller", float("nan"))
            base_ours = base.cpu.get("webhook", float("nan")) + base.cpu.get("controller", float("nan"))
            rows.append(f"  {r.target:<13} {ratio(percentile(r.waits, 0.5), percentile(base.waits, 0.5))} "
                        f"{ratio(percentile(r.waits, 0.99), percentile(base.waits, 0.99))} "
                        f"{ratio(r.makespan, base.makespan)} {ratio(share, base_share)} {ratio(ours, base_ours)}")
    rows.append(f"(times in real seconds; GPU-hours in trace hours, {time_scale:g} trace seconds a real second; "
                "wait: Job created -> its last pod bound)")
    for r in results:
        rows.append(f"{r.target}: up {r.up_seconds:.1f} s, {r.register_seconds:.1f} s to register the KWOK nodes; "
                    f"ended: {r.ended or '-'}; greedy misses over {r.miss_scope or '-'}"
                    + (f"; error: {r.error}" if r.error else ""))
        for component, why in r.exited.items():
            rows.append(f"  EXITED during the run: {component}: {why}")
        if r.target in REFUSING_TARGETS:
            rows.append(f"  refused by {r.target}'s scheduler: {len(r.refused)} gangs (pending: from the refusal's "
                        "condition time; a greedy miss: refused while place finds a placement)")
        if r.advisory:
            a = r.advisory
            rows.append(f"  advisory (controller --advise): {a['advised']} of {a['refused']} refused gangs got an Event, "
                        f"refusal -> first Event p50 {percentile(a['to_event'], 0.5):.2f} s, "
                        f"p99 {percentile(a['to_event'], 0.99):.2f} s; {a['events']} Events, {len(a['early'])} before "
                        f"the gang's refusal, {a['late']} 'fits' after the gang bound; "
                        f"advisor CPU/gang {r.cpu_per_gang('advisor'):.3f} s")
            rows.extend(f"  Event before refusal: {item}" for item in a["early"][:5])
            rows.extend(f"  false fits: {item}" for item in a["false_fits"][:5])
            if a["unnamed"]:
                rows.append(f"  misses not named: {', '.join(a['unnamed'][:10])}")
            if a.get("describe"):
                rows.append(f"  kubectl describe of an advised Job ({r.target}):")
                rows.extend(f"    {line}" for line in a["describe"].rstrip().splitlines())
        for label, items in (("never placed", [f"{k}: {v or 'UNEXPLAINED (fits at the end; the target says nothing)'}"
                                               for k, v in r.never_placed.items()]),
                             ("split (required)", r.split_required), ("over-booked", list(r.over_booked.values())),
                             ("greedy miss", [f"{k} (pending {v.waited:.1f} s when a placement was found)"
                                              for k, v in r.misses.items()])):
            rows.extend(f"  {label}: {item}" for item in items[:5])
            if len(items) > 5:
                rows.append(f"  ... and {len(items) - 5} more {label}")
    advised = [r for r in results if r.advisory]
    if advised:
        rows.append("")
        rows.append(advisory_table(advised))
    return "\n".join(rows)


def advisory_table(results: list[Result]) -> str:
    """The advisory controller's row per advised target (``--advise``): greedy misses found, named,
    named within :data:`NAME_WITHIN` s, the p50 / p99 latency (refusal, or the capacity that made the
    gang fit, -> "fits now" Event) and "fits now" said of a gang that did not fit."""
    header = (f"{'advisory':<13} {'misses found':>12} {'named':>6} {f'within {NAME_WITHIN:g} s':>10} "
              f"{'p50':>8} {'p99':>8} {'p99 low':>8} {'audited':>8} {f'within {NAME_WITHIN:g} s':>10} "
              f"{'p50':>8} {'p99':>8} {'false fits':>10}")
    rows = [header, "-" * len(header)]
    for r in results:
        a = r.advisory
        exact = a.get("to_name_exact", [])
        rows.append(f"{r.target:<13} {a['found']:>12} {a['named']:>6} {a['within']:>10} "
                    f"{percentile(a['to_name'], 0.5):>6.2f} s {percentile(a['to_name'], 0.99):>6.2f} s "
                    f"{percentile(a.get('to_name_low', []), 0.99):>6.2f} s {len(exact):>8} "
                    f"{a.get('within_exact', 0):>10} {percentile(exact, 0.5):>6.2f} s {percentile(exact, 0.99):>6.2f} s "
                    f"{len(a['false_fits']):>10}")
    rows.append("(latency: from the target's refusal, or from the pod finish that made the refused gang fit, to "
                "the advisor's 'fits now' Event. The first three: times as the benchmark's watches saw them, "
                "refusals from their whole-second condition times (upper bounds by up to 1 s; 'p99 low' from the "
                "latest moment the refusal can have happened: a lower bound). 'audited': the misses timed from "
                "kube-apiserver's audit log (microseconds: the refusal's or finish's status write received -> "
                "the Event's write complete), with how many within the bound, p50 and p99)")
    for r in results:
        for line in r.advisory.get("exact_left", [])[:5]:
            rows.append(f"  {r.target}: not audited: {line}")
    return "\n".join(rows)


def describe_trace(jobs: list[TraceJob], cluster: Cluster, shape: TraceShape) -> str:
    """One paragraph: the trace's shape (sizes, levels, durations, offered load)."""
    sizes: dict[int, int] = defaultdict(int)
    for job in jobs:
        sizes[job.pods] += 1
    modes = defaultdict(int)
    for job in jobs:
        modes["none" if job.gang_level is None else ("required" if job.required else "preferred")] += 1
    return (f"trace seed {shape.seed}: {len(jobs)} gangs over {jobs[-1].arrival:.1f} s; pods per gang "
            + ", ".join(f"{size}: {count}" for size, count in sorted(sizes.items()))
            + f"; gang level required {modes['required']}, preferred {modes['preferred']}, none {modes['none']}; "
            f"durations {min(j.duration for j in jobs):.1f} to {max(j.duration for j in jobs):.1f} s; offered load "
            f"{offered_load(jobs, cluster, max(shape.arrivals, 1e-9)):.2f} of the GPUs over the arrival window")


def run(cluster: Cluster, shape: TraceShape, targets: list[str], work: Path, args: argparse.Namespace,
        out=None) -> list[Result]:
    """Generate the dump and the trace once, run every target in turn, print the table to ``out``
    (default: standard output at call time); return the results."""
    out = out or sys.stdout
    dump = work / "nodes.yaml"
    schedulers.cli("gen-cluster", "--zones", str(cluster.zones), "--blocks", str(cluster.blocks), "--racks",
                   str(cluster.racks), "--nodes", str(cluster.nodes), "--gpus", str(GPUS_PER_NODE), "--fill", "0",
                   "-o", str(dump))
    jobs = make_trace(cluster, shape)
    start_load = schedulers.load()
    print(f"trace benchmark: {cluster.node_count} KWOK nodes ({cluster.zones} x {cluster.blocks} x {cluster.racks} x "
          f"{cluster.nodes} zones x blocks x racks x nodes, {GPUS_PER_NODE} GPUs each); {os.cpu_count()} CPUs, "
          f"load average {start_load} at start", file=out)
    print(describe_trace(jobs, cluster, shape), file=out, flush=True)
    results = []
    try:
        for target in targets:
            result = run_target(target, jobs, dump, work, args)
            results.append(result)
            print(f"{target}: {result.placed}/{len(jobs)} placed, makespan {result.makespan:.1f} s, "
                  f"{len(result.split_required)} required splits, {len(result.over_booked)} over-booked, "
                  f"{len(result.misses)} greedy misses ({result.ended or result.error}); "
                  f"load average {schedulers.load()}", file=out, flush=True)
    except KeyboardInterrupt:  # stopped (SIGINT): the targets that ended are still reported
        print(f"interrupted after {len(results)} of {len(targets)} targets", file=out, flush=True)
    print("\n" + table(results, args.time_scale), file=out)
    print(f"load average (1, 5, 15 min): {start_load} at start, {schedulers.load()} at end", file=out, flush=True)
    return results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Cluster()
    trace = TraceShape()
    p.add_argument("--zones", type=int, default=defaults.zones)
    p.add_argument("--blocks", type=int, default=defaults.blocks, help="blocks per zone")
    p.add_argument("--racks", type=int, default=defaults.racks, help="racks per block")
    p.add_argument("--nodes", type=int, default=defaults.nodes, help="nodes per rack")
    p.add_argument("--jobs", type=int, default=trace.jobs, help="gangs in the trace")
    p.add_argument("--arrivals", type=float, default=trace.arrivals, help="seconds over which the gangs arrive")
    p.add_argument("--min-duration", type=float, default=trace.min_duration, help="seconds a gang's pods run, least")
    p.add_argument("--max-duration", type=float, default=trace.max_duration, help="seconds a gang's pods run, most")
    p.add_argument("--seed", type=int, default=trace.seed)
    p.add_argument("--time-scale", type=float, default=60, help="trace seconds one real second stands for "
                                                               "(GPU-hours only)")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated, of " + ", ".join(TARGETS))
    p.add_argument("--timeout", type=float, default=300, help="seconds after the last arrival before giving up")
    p.add_argument("--idle", type=float, default=60, help="stop after this many seconds with no pod change")
    p.add_argument("--sample", type=float, default=1.0, help="seconds between pod-state snapshots")
    p.add_argument("--grace", type=float, default=3.0, help="seconds a target has to act on a placement "
                                                            "before its pending gang counts as a greedy miss")
    p.add_argument("--miss-budget", type=float, default=600, help="seconds of engine work the greedy-miss count may "
                                                                  "take per target")
    p.add_argument("--advise", action="store_true",
                   help="run `segment-webhook controller --advise` (deploy/overlays/advisory) beside the "
                        + " and ".join(ADVISED_TARGETS) + " targets and report the greedy misses it names, "
                        "and how fast: as watched, and 'audited' from kube-apiserver's audit log (microseconds)")
    p.add_argument("--work", type=Path, help="keep the dump and each control plane's logs here, the audit log "
                                             "as WORK/<target>/cluster/logs/audit.log "
                                             "(default: a temporary directory, removed)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        p.error(f"--targets: unknown {', '.join(unknown)} (known: {', '.join(TARGETS)})")
    if args.min_duration <= 0 or args.max_duration < args.min_duration:
        p.error(f"--min-duration {args.min_duration:g} / --max-duration {args.max_duration:g}: need 0 < min <= max")
    if args.jobs < 1 or args.arrivals <= 0:
        p.error(f"--jobs {args.jobs} / --arrivals {args.arrivals:g}: need at least one job over a positive window")
    cluster = Cluster(args.zones, args.blocks, args.racks, args.nodes)
    shape = TraceShape(args.jobs, args.arrivals, args.min_duration, args.max_duration, args.seed)
    try:
        make_trace(cluster, shape)
    except ValueError as error:
        p.error(str(error))
    work = args.work or Path(tempfile.mkdtemp(prefix="trace-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = run(cluster, shape, targets, work.resolve(), args)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if any(r.error and r.up_seconds != r.up_seconds for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
