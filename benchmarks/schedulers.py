"""Three schedulers side by side on one generated cluster (issue 26, part 4): this project's gate
and controller, Kueue's Topology-Aware Scheduling, and kube-scheduler's Workload API, each placing
the same gangs (segments in one rack, the gang in one block) on the nodes of one
``segment-webhook gen-cluster`` dump.

    python3 benchmarks/schedulers.py                     # 1,024 nodes, 100 gangs of 16 pods in segments of 4
    python3 benchmarks/schedulers.py --nodes 64 --gangs 4 --rack-nodes 8 --racks-per-block 4
    python3 benchmarks/schedulers.py --targets gate,kueue --timeout 300 --work DIR

The cluster: ``--nodes`` nodes of 8 GPUs (``--fill 0``) in racks of ``--rack-nodes`` nodes, blocks
of ``--racks-per-block`` racks, one zone; the same file for every target. The gangs: ``--gangs``
Indexed Jobs (batch/v1) of ``--pods`` pods asking ``--gpus-per-pod`` GPUs each (default 4: two
pods per node), ``kai.scheduler/segment-size: --segment`` with the segment required in a rack and
the Job required in a block. For each target in turn, its own local control plane
(``hack/local_cluster.py up``) with the dump's nodes registered:

* ``gate``: ``up --webhook --gate-pods --controller``; the Jobs labelled ``segments.dev/target:
  gate``; the Job controller creates the pods, our webhook gates them, our controller places each
  complete gang and releases it, kube-scheduler binds;
* ``kueue``: ``up --webhook --with kueue``, Kueue's Topology, ResourceFlavor, ClusterQueue and
  LocalQueue made for the dump (``local_cluster.kueue_queues``, as ``tests/cluster/test_cluster_kueue.py``);
  the Jobs labelled for the LocalQueue and ``segments.dev/target: kueue``; Kueue admits,
  the Job controller creates the pods, Kueue ungates them with its assignment, kube-scheduler binds;
* ``workload-api``: ``up --workload-api --controller`` (``local_cluster.up_workload_api``: our webhook
  serving ``--target workload-api``); the Jobs labelled ``segments.dev/target: workload-api``; the Job
  controller creates the pods, our pod webhook names each pod's segment PodGroup at CREATE, our
  controller creates each complete gang's Workload, CompositePodGroup and PodGroups, kube-scheduler
  places the groups and binds.

A watch on the pods records when each was first seen (created) and first seen bound. When every pod
is bound, or ``--timeout`` seconds after the submissions, or ``--idle`` seconds pass with no pod
created or bound, the pods and nodes are read and every bound pod is checked by
:func:`verify_placement`. Printed: one line per target as it ends, then the table (target, gangs
placed, pods bound, last pod created -> last pod bound, first pod created -> last pod bound, first
object submitted -> last pod bound, ratios to gate, violations) and the load average at start and end.
Figures only; the exit status is 1 only when a control plane could not be started.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))
sys.path.insert(0, str(REPO))

import local_cluster  # noqa: E402
from webhook.kube.quantity import parse_quantity  # noqa: E402

TARGETS = ("gate", "kueue", "workload-api")
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
JOB_NAME = "batch.kubernetes.io/job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: The label every benchmark pod carries (the watch's selector).
RUN_LABEL = "bench.segments.dev/run"
NAMESPACE = "default"
TOPOLOGY = REPO.parent / "shared" / "examples" / "topology.yaml"


@dataclass(frozen=True)
class Shape:
    """What one run places: the cluster (``nodes`` in racks of ``rack_nodes``, blocks of
    ``racks_per_block`` racks) and the gangs (``gangs`` Jobs of ``pods`` pods in segments of
    ``segment``, ``gpus_per_pod`` GPUs each)."""

    nodes: int = 1024
    gangs: int = 100
    pods: int = 16
    segment: int = 4
    rack_nodes: int = 16
    racks_per_block: int = 16
    gpus_per_pod: int = 4

    def layout(self) -> tuple[int, int, int]:
        """(blocks, racks per block, nodes per rack) of the generated cluster (one zone). Raises
        ValueError when ``nodes`` is not a whole number of racks and blocks."""
        racks, left = divmod(self.nodes, self.rack_nodes)
        per_block = min(racks, self.racks_per_block)
        if left or racks == 0 or racks % per_block:
            raise ValueError(f"--nodes {self.nodes} is not a whole number of racks of {self.rack_nodes} nodes "
                             f"in blocks of {self.racks_per_block} racks")
        return racks // per_block, per_block, self.rack_nodes


# ------------------------------------------------------------------------------- the pure check
def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """What ``pod`` asks of its node, by resource: per container its ``requests``, a resource
    with only a limit counting the limit (the API server's defaulting); the containers summed,
    the largest init container's ask where it is more; plus ``pods: 1``. (Kubernetes
    ``resourcehelper.PodRequests`` without overhead and sidecars.)"""
    spec = pod.get("spec") or {}

    def asked(container: Mapping[str, Any]) -> dict[str, Fraction]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: parse_quantity(value) for name, value in merged.items()}

    total: dict[str, Fraction] = defaultdict(Fraction)
    for container in spec.get("containers") or []:
        for name, value in asked(container).items():
            total[name] += value
    for container in spec.get("initContainers") or []:
        for name, value in asked(container).items():
            total[name] = max(total[name], value)
    total["pods"] += 1
    return dict(total)


def verify_placement(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]], segment_size: int,
                     segment_level: str = RACK, gang_level: str = BLOCK, gang_label: str = JOB_NAME,
                     index_label: str = COMPLETION_INDEX) -> list[str]:
    """The rule breaks among the bound pods of ``pods`` (Pod objects; those without
    ``spec.nodeName`` are ignored) on ``nodes`` (Node objects), one sentence each, sorted; ``[]``
    when there is none.

    A pod belongs to gang ``<namespace>/<labels[gang_label]>``, segment
    ``int(labels[index_label]) // segment_size`` (DESIGN.md §3b). Breaks: a bound pod without a
    readable gang or index label; a pod bound to a node not in ``nodes``; a segment whose pods are
    on nodes of more than one ``segment_level`` value (or a node without that label); a gang whose
    pods are on nodes of more than one ``gang_level`` value (or without it); a node whose bound
    pods together ask more of a resource than its ``status.allocatable`` (:func:`pod_requests`;
    a resource it does not list counts as 0)."""
    nodes = list(nodes)
    labels_of = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    allocatable = {n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or {} for n in nodes}
    breaks: list[str] = []
    segment_domains: dict[tuple[str, int], set[str]] = defaultdict(set)
    gang_domains: dict[str, set[str]] = defaultdict(set)
    used: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        metadata = pod["metadata"]
        name = f"{metadata.get('namespace', '')}/{metadata['name']}"
        if node not in labels_of:
            breaks.append(f"pod {name} is bound to node {node}, which is not in the cluster")
            continue
        for resource, value in pod_requests(pod).items():
            used[node][resource] += value
        labels = metadata.get("labels") or {}
        gang, raw_index = labels.get(gang_label), labels.get(index_label)
        if not gang or raw_index is None or not str(raw_index).isdigit():
            breaks.append(f"pod {name} has no readable {gang_label} / {index_label} label")
            continue
        gang_key = f"{metadata.get('namespace', '')}/{gang}"
        node_labels = labels_of[node]
        segment = int(raw_index) // segment_size
        segment_domains[(gang_key, segment)].add(node_labels.get(segment_level, f"<{node}: no {segment_level}>"))
        gang_domains[gang_key].add(node_labels.get(gang_level, f"<{node}: no {gang_level}>"))
    for (gang_key, segment), domains in segment_domains.items():
        if len(domains) > 1:
            breaks.append(f"gang {gang_key} segment {segment} spans {len(domains)} {segment_level} domains: "
                          f"{', '.join(sorted(domains))}")
    for gang_key, domains in gang_domains.items():
        if len(domains) > 1:
            breaks.append(f"gang {gang_key} spans {len(domains)} {gang_level} domains: {', '.join(sorted(domains))}")
    for node, asks in used.items():
        for resource, value in asks.items():
            has = parse_quantity(allocatable[node].get(resource, "0"))
            if value > has:
                breaks.append(f"node {node} is over-committed: its bound pods ask {float(value):g} {resource}, "
                              f"it has {float(has):g}")
    return sorted(breaks)


def gangs_placed(pods: Iterable[Mapping[str, Any]], pods_per_gang: int, gang_label: str = JOB_NAME) -> int:
    """How many gangs (``<namespace>/<labels[gang_label]>``) have ``pods_per_gang`` bound pods."""
    bound: dict[str, int] = defaultdict(int)
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName"):
            metadata = pod["metadata"]
            bound[f"{metadata.get('namespace', '')}/{(metadata.get('labels') or {}).get(gang_label)}"] += 1
    return sum(1 for count in bound.values() if count >= pods_per_gang)


# ------------------------------------------------------------------------------- the workloads
def indexed_job(name: str, shape: Shape, target: str) -> dict[str, Any]:
    """The Indexed Job of one gang, labelled for ``target`` (Kueue's LocalQueue too for ``kueue``)."""
    labels = {"segments.dev/target": target}
    if target == "kueue":
        labels["kueue.x-k8s.io/queue-name"] = local_cluster.KUEUE_LOCAL_QUEUE
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels,
                         "annotations": {"kai.scheduler/topology": "cluster-topology",
                                         "kai.scheduler/topology-required-placement": BLOCK}},
            "spec": {"completionMode": "Indexed", "completions": shape.pods, "parallelism": shape.pods,
                     "template": {"metadata": {
                         "labels": {RUN_LABEL: "schedulers"},
                         "annotations": {"kai.scheduler/segment-size": str(shape.segment),
                                         "kai.scheduler/segment-topology-required-placement": RACK}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "w", "image": "registry.k8s.io/pause:3.10",
                             "resources": {"limits": {GPU: str(shape.gpus_per_pod)}}}]}}}}


def cli(*args: str) -> str:
    """This checkout's ``segment-webhook``; its stdout (CalledProcessError on failure)."""
    return subprocess.run([sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600).stdout


def gen_cluster(shape: Shape, path: Path) -> Path:
    """``segment-webhook gen-cluster`` of ``shape``'s layout into ``path`` (8 GPUs a node, none taken)."""
    blocks, racks, nodes = shape.layout()
    cli("gen-cluster", "--zones", "1", "--blocks", str(blocks), "--racks", str(racks), "--nodes", str(nodes),
        "--gpus", str(GPUS_PER_NODE), "--fill", "0", "-o", str(path))
    return path


Submission = Any  # a callable taking the ApiClient and submitting every gang


def submit_jobs(shape: Shape, target: str, names: list[str]) -> Submission:
    """The submission of every target: the gangs' Indexed Jobs, created by 8 clients; the Job
    controller makes the pods."""
    jobs = [indexed_job(name, shape, target) for name in names]

    def submit(api: local_cluster.ApiClient) -> None:
        api.map(lambda job: api.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job), jobs)

    return submit


# ------------------------------------------------------------------------------- the control planes
class PodWatch(threading.Thread):
    """Watches the benchmark's pods (label :data:`RUN_LABEL`) in :data:`NAMESPACE`: ``created[name]``
    / ``bound[name]`` = the monotonic time the pod was first seen / first seen with a nodeName;
    ``last_change`` = the time of the latest of these."""

    def __init__(self, cluster: local_cluster.LocalCluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.last_change = time.monotonic()
        self.ready = threading.Event()
        self.stopping = threading.Event()

    def observe(self, pod: Mapping[str, Any]) -> None:
        now, name = time.monotonic(), pod["metadata"]["name"]
        if name not in self.created:
            self.created[name] = self.last_change = now
        if (pod.get("spec") or {}).get("nodeName") and name not in self.bound:
            self.bound[name] = self.last_change = now

    def run(self) -> None:
        context = ssl.create_default_context(cafile=str(self.cluster.dir / "pki" / "ca.crt"))
        path = f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&labelSelector={RUN_LABEL}"
        while not self.stopping.is_set():
            connection = http.client.HTTPSConnection("127.0.0.1", self.cluster.state["ports"]["kube-apiserver"],
                                                     context=context, timeout=900)
            try:
                token = self.cluster.state["admin_token"]
                connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
                response = connection.getresponse()
                self.ready.set()
                while not self.stopping.is_set():
                    line = response.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    if event.get("type") in ("ADDED", "MODIFIED") and event.get("object", {}).get("kind") == "Pod":
                        self.observe(event["object"])
            except (OSError, http.client.HTTPException):
                time.sleep(0.5)  # the control plane stopping, or a dropped watch: watch again
            finally:
                connection.close()


def start_target(target: str, directory: Path, upstream: tuple[str, ...] = ()) -> local_cluster.LocalCluster:
    """``up`` the control plane of ``target`` in ``directory``, with the upstream programs
    ``upstream`` too (``("kwok",)`` for benchmarks/trace.py); ClusterError when it fails."""
    if target == "gate":
        return local_cluster.up(directory, webhook=True, gate_pods=True, controller=True, upstream=upstream)
    if target == "kueue":
        return local_cluster.up(directory, webhook=True, gate_pods=False, upstream=("kueue", *upstream))
    return local_cluster.up_workload_api(directory, upstream=upstream)


def wait_for_webhook_topology(cluster: local_cluster.LocalCluster, probe: dict[str, Any], timeout: float = 60) -> None:
    """Wait until 10 server-side dry-run creates of ``probe`` in a row are accepted (every serve
    worker's catalog knows the Topology). Raises ClusterError after ``timeout`` s."""
    deadline, agreeing = time.monotonic() + timeout, 0
    while agreeing < 10:
        if time.monotonic() > deadline:
            raise local_cluster.ClusterError(f"the webhook did not accept Job {probe['metadata']['name']} "
                                             f"in {timeout} s")
        accepted = cluster.kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(probe),
                                   check=False).returncode == 0
        agreeing = agreeing + 1 if accepted else 0
        time.sleep(0.1)


def prepare_target(target: str, cluster: local_cluster.LocalCluster, shape: Shape, dump: Path) -> float:
    """The dump's Topology (where a webhook reads it), its nodes and, for ``kueue``, Kueue's queues;
    returns the seconds node registration took."""
    topology = next(o for o in local_cluster.read_objects(dump) if o.get("kind") == "Topology")
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(topology))
    wait_for_webhook_topology(cluster, indexed_job("probe", shape, target))
    started = time.monotonic()
    cluster.register_nodes(dump)
    registered = time.monotonic() - started
    if target == "kueue":
        local_cluster.kueue_queues(cluster, dump)
    time.sleep(5)  # the controllers' informers (ours, Kueue's) learn the nodes and queues
    return registered


# ------------------------------------------------------------------------------- one run
@dataclass
class Result:
    """The figures of one target (seconds; ``nan`` when no pod was bound)."""

    target: str
    gangs: int
    pods: int
    gangs_placed: int = 0
    pods_bound: int = 0
    last_created_to_last_bound: float = float("nan")
    first_created_to_last_bound: float = float("nan")
    submitted_to_last_bound: float = float("nan")
    violations: list[str] = field(default_factory=list)
    up_seconds: float = float("nan")
    register_seconds: float = float("nan")
    ended: str = ""
    error: str = ""


def wait_until_bound(watch: PodWatch, expected: int, timeout: float, idle: float) -> str:
    """Wait until ``expected`` pods are bound, ``timeout`` s pass, or ``idle`` s pass with no pod
    created or bound; returns which (``all bound``, ``timeout``, ``idle``)."""
    deadline = time.monotonic() + timeout
    while len(watch.bound) < expected:
        now = time.monotonic()
        if now > deadline:
            return f"timeout {timeout:g} s"
        if now - watch.last_change > idle:
            return f"nothing created or bound for {idle:g} s"
        time.sleep(0.2)
    return "all bound"


def measure(target: str, cluster: local_cluster.LocalCluster, shape: Shape, dump: Path, work: Path,
            timeout: float, idle: float, result: Result) -> None:
    """Submit the gangs to the running ``cluster`` of ``target``, wait, read and verify; fills ``result``."""
    names = [f"gang-{index:03d}" for index in range(shape.gangs)]
    submission = submit_jobs(shape, target, names)
    api = local_cluster.ApiClient(cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"], workers=8)
    watch = PodWatch(cluster)
    watch.start()
    watch.ready.wait(30)
    submitted = watch.last_change = time.monotonic()
    submission(api)
    result.ended = wait_until_bound(watch, shape.gangs * shape.pods, timeout, idle)
    watch.stopping.set()
    pods = api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={RUN_LABEL}")["items"]
    nodes = api.request("GET", "/api/v1/nodes")["items"]
    result.violations = verify_placement(pods, nodes, shape.segment)
    result.gangs_placed = gangs_placed(pods, shape.pods)
    result.pods_bound = sum(1 for pod in pods if pod["spec"].get("nodeName"))
    if watch.bound:
        last_bound = max(watch.bound.values())
        result.last_created_to_last_bound = last_bound - max(watch.created.values())
        result.first_created_to_last_bound = last_bound - min(watch.created.values())
        result.submitted_to_last_bound = last_bound - submitted


def run_target(target: str, shape: Shape, dump: Path, work: Path, timeout: float, idle: float) -> Result:
    """``target``'s whole turn: its control plane up, prepared, measured, down. A control plane
    that cannot start gives a Result with ``error``."""
    result = Result(target, shape.gangs, shape.pods)
    directory = work / target
    started = time.monotonic()
    try:
        cluster = start_target(target, directory / "cluster")
    except local_cluster.ClusterError as error:
        result.error = str(error).splitlines()[0]
        return result
    result.up_seconds = time.monotonic() - started
    try:
        result.register_seconds = prepare_target(target, cluster, shape, dump)
        measure(target, cluster, shape, dump, directory, timeout, idle, result)
    except (local_cluster.ClusterError, subprocess.CalledProcessError, OSError) as error:
        result.error = str(error).splitlines()[0] if str(error) else type(error).__name__
    finally:
        cluster.stop_all()
    return result


def ratio(value: float, base: float) -> str:
    """``value / base`` as ``1.23x``; ``-`` when either is not a positive finite number."""
    if not (value == value and base == base) or base <= 0:
        return "-"
    return f"{value / base:.2f}x"


def table(results: list[Result]) -> str:
    """The side-by-side table (one row per target, ratios to the ``gate`` row when there is one),
    then each target's violations (the first 5), how its wait ended and its errors."""
    base = next((r for r in results if r.target == "gate"), None)
    header = (f"{'target':<13} {'gangs placed':>12} {'pods bound':>10} {'last created->last bound':>25} "
              f"{'first created->last bound':>26} {'submitted->last bound':>22} {'ratio to gate':>18} {'violations':>10}")
    rows = [header, "-" * len(header)]
    for r in results:
        ratios = "-" if base is None else (f"{ratio(r.last_created_to_last_bound, base.last_created_to_last_bound)} / "
                                           f"{ratio(r.submitted_to_last_bound, base.submitted_to_last_bound)}")
        rows.append(f"{r.target:<13} {f'{r.gangs_placed}/{r.gangs}':>12} {f'{r.pods_bound}/{r.gangs * r.pods}':>10} "
                    f"{r.last_created_to_last_bound:>23.2f} s {r.first_created_to_last_bound:>24.2f} s "
                    f"{r.submitted_to_last_bound:>20.2f} s {ratios:>18} {len(r.violations):>10}")
    rows.append("(ratio to gate: last created->last bound / submitted->last bound)")
    for r in results:
        rows.append(f"{r.target}: up {r.up_seconds:.1f} s, {r.register_seconds:.1f} s to register the nodes; "
                    f"waiting ended: {r.ended or '-'}" + (f"; error: {r.error}" if r.error else ""))
        rows.extend(f"  violation: {v}" for v in r.violations[:5])
        if len(r.violations) > 5:
            rows.append(f"  ... and {len(r.violations) - 5} more")
    return "\n".join(rows)


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def run(shape: Shape, targets: list[str], work: Path, timeout: float, idle: float, out=None) -> list[Result]:
    """Generate the dump once, run every target in turn on it, print the table to ``out`` (default:
    standard output at call time); return the results."""
    out = out or sys.stdout
    dump = gen_cluster(shape, work / "nodes.yaml")
    start_load = load()
    print(f"schedulers benchmark: {shape.nodes} nodes ({' x '.join(map(str, shape.layout()))} blocks x racks x nodes, "
          f"{GPUS_PER_NODE} GPUs each), {shape.gangs} gangs of {shape.pods} pods of {shape.gpus_per_pod} GPUs in "
          f"segments of {shape.segment} per rack, each gang in one block; {os.cpu_count()} CPUs, load average "
          f"{start_load} at start", file=out, flush=True)
    results = []
    for target in targets:
        result = run_target(target, shape, dump, work, timeout, idle)
        results.append(result)
        print(f"{target}: {result.gangs_placed}/{shape.gangs} gangs placed, {result.pods_bound} pods bound, "
              f"last created -> last bound {result.last_created_to_last_bound:.2f} s, {len(result.violations)} "
              f"violations ({result.ended or result.error}); load average {load()}", file=out, flush=True)
    print("\n" + table(results), file=out)
    print(f"load average (1, 5, 15 min): {start_load} at start, {load()} at end", file=out, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--gangs", type=int, default=100)
    parser.add_argument("--pods", type=int, default=16, help="pods per gang")
    parser.add_argument("--segment", type=int, default=4, help="pods per segment (one rack)")
    parser.add_argument("--rack-nodes", type=int, default=16, help="nodes per rack")
    parser.add_argument("--racks-per-block", type=int, default=16)
    parser.add_argument("--gpus-per-pod", type=int, default=4, help="of the 8 of a node")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated, of " + ", ".join(TARGETS))
    parser.add_argument("--timeout", type=float, default=600, help="seconds a target may take after submitting")
    parser.add_argument("--idle", type=float, default=90, help="stop waiting after this many seconds with no pod "
                                                               "created or bound")
    parser.add_argument("--work", type=Path, help="keep the dump and each control plane's logs here "
                                                  "(default: a temporary directory, removed)")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"--targets: unknown {', '.join(unknown)} (known: {', '.join(TARGETS)})")
    shape = Shape(args.nodes, args.gangs, args.pods, args.segment, args.rack_nodes, args.racks_per_block,
                  args.gpus_per_pod)
    try:
        shape.layout()
    except ValueError as error:
        parser.error(str(error))
    work = args.work or Path(tempfile.mkdtemp(prefix="schedulers-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = run(shape, targets, work.resolve(), args.timeout, args.idle)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if any(r.error and r.up_seconds != r.up_seconds for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
