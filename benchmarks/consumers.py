"""Gangs released by the controller and bound by the real kube-scheduler (issue 17): how long
from a gang's last pod created to its last pod bound, and the controller's CPU per gang.

    python benchmarks/consumers.py                                 # 200 gangs of 16 on 4,096 nodes
    python benchmarks/consumers.py --gangs 20 --nodes 512          # smaller
    python benchmarks/consumers.py --gap 1                         # one gang a second, not a burst
    python benchmarks/consumers.py --dir DIR                       # on a running `up DIR --controller`
                                                                   # whose nodes are already registered

Without ``--dir`` it starts ``hack/local-cluster.sh up DIR --controller`` (gating on, two
controller replicas) in a temporary directory, registers ``--nodes`` nodes of 8 GPUs in racks of
``--rack`` (``segment-webhook gen-cluster``: blocks of 16 racks, one zone) and applies the example
Topology. Each gang is a PyTorchJob of ``--pods`` Workers asking 8 GPUs each (one node each),
segments of 4 required in one rack, created through the webhook; then its pods, named and labelled
as the training operator makes them, created by ``--concurrency`` clients, one gang after the
other (``--gap`` seconds apart). A watch records when each pod is released (gate gone) and bound. Printed: p50 / p99 / max
of (last pod bound - last pod created) per gang, p50 / p99 of (last pod released - last pod
created), the controller replicas' CPU seconds per gang, double bookings (nodes whose
bound pods ask more GPUs than the node has, plus pods never bound), and release patches the
apiserver refused (the controllers' ``segment_controller_patch_errors_total``). Figures only; the
exit status is 1 only when the run could not be made.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402

GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
TOPOLOGY = REPO.parent / "shared" / "examples" / "topology.yaml"
RACKS_PER_BLOCK = 16


def register(cluster: local_cluster.LocalCluster, nodes: int, rack: int, work: Path) -> int:
    """Register ``nodes`` nodes (racks of ``rack``, blocks of 16 racks) made by gen-cluster."""
    racks = max(1, nodes // rack)
    blocks, per_block = max(1, racks // RACKS_PER_BLOCK), min(racks, RACKS_PER_BLOCK)
    dump = work / "nodes.yaml"
    subprocess.run([sys.executable, "-m", "webhook.cli", "gen-cluster", "--zones", "1", "--blocks", str(blocks),
                    "--racks", str(per_block), "--nodes", str(rack), "--gpus", str(GPUS_PER_NODE), "--fill", "0",
                    "-o", str(dump)], check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    return cluster.register_nodes(dump)


def job(name: str, namespace: str, workers: int) -> dict:
    """A PyTorchJob of ``workers`` Workers of 8 GPUs, segments of 4 in one rack (no Master)."""
    template = {"metadata": {"annotations": {
        "kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-size": "4",
        "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-rack"}},
        "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest",
                                 "resources": {"limits": {GPU: str(GPUS_PER_NODE)}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": template}}}}


def operator_pods(stored: dict) -> list[dict]:
    """The Worker pods Kubeflow's training operator makes of a stored PyTorchJob:
    ``<job>-worker-<i>``, labels ``training.kubeflow.org/*``, the stored template, owned by the job."""
    name, namespace = stored["metadata"]["name"], stored["metadata"]["namespace"]
    spec = stored["spec"]["pytorchReplicaSpecs"]["Worker"]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name, "uid": stored["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    pods = []
    for index in range(spec["replicas"]):
        metadata = copy.deepcopy(spec["template"].get("metadata", {}))
        metadata.update(name=f"{name}-worker-{index}", namespace=namespace, ownerReferences=[owner])
        metadata.setdefault("labels", {}).update({
            "training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": str(index)})
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(spec["template"]["spec"])})
    return pods


class BindWatch(threading.Thread):
    """Watches the pods of ``namespace``: ``released[name]`` / ``bound[name]`` = monotonic time
    the pod was first seen without a scheduling gate / with a nodeName."""

    def __init__(self, cluster: local_cluster.LocalCluster, namespace: str):
        super().__init__(daemon=True)
        self.cluster, self.namespace = cluster, namespace
        self.bound: dict[str, float] = {}
        self.released: dict[str, float] = {}
        self.ready = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        context = ssl.create_default_context(cafile=str(self.cluster.dir / "pki" / "ca.crt"))
        while not self.stopping.is_set():
            connection = http.client.HTTPSConnection("127.0.0.1", self.cluster.state["ports"]["kube-apiserver"],
                                                     context=context, timeout=600)
            try:
                connection.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?watch=1",
                                   headers={"Authorization": f"Bearer {self.cluster.state['admin_token']}"})
                response = connection.getresponse()
                self.ready.set()
                while not self.stopping.is_set():
                    line = response.readline()
                    if not line:
                        break
                    pod = json.loads(line).get("object", {})
                    if pod.get("kind") != "Pod":
                        continue
                    if not pod["spec"].get("schedulingGates"):
                        self.released.setdefault(pod["metadata"]["name"], time.monotonic())
                    if pod["spec"].get("nodeName"):
                        self.bound.setdefault(pod["metadata"]["name"], time.monotonic())
            except (OSError, http.client.HTTPException):
                time.sleep(0.5)  # the control plane stopping, or a dropped watch: watch again
            finally:
                connection.close()


def cpu_seconds(cluster: local_cluster.LocalCluster) -> float:
    """utime + stime of the controller replicas (``/proc/<pid>/stat``), seconds."""
    total = 0.0
    for name in cluster.state["controller"]["replicas"]:
        pid_file = cluster.dir / "pids" / f"{name}.pid"
        if pid_file.is_file():
            fields = Path(f"/proc/{pid_file.read_text().strip()}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def patch_errors(cluster: local_cluster.LocalCluster) -> Counter:
    """The running controller replicas' ``segment_controller_patch_errors_total``, by HTTP status."""
    by_code: Counter = Counter()
    for name in cluster.state["controller"]["replicas"]:
        if name not in cluster.state["components"]:
            continue
        connection = http.client.HTTPConnection("127.0.0.1", cluster.state["ports"][name], timeout=5)
        connection.request("GET", "/metrics")
        for line in connection.getresponse().read().decode().splitlines():
            if line.startswith("segment_controller_patch_errors_total"):
                code = line.split('code="', 1)[1].split('"', 1)[0] if 'code="' in line else "?"
                by_code[code] += float(line.rsplit(" ", 1)[1])
        connection.close()
    return by_code


def run(cluster: local_cluster.LocalCluster, gangs: int, pods: int, concurrency: int = 8,
        namespace: str = "bench", timeout: float = 600, gap: float = 0.0) -> dict:
    """Create ``gangs`` gangs of ``pods`` pods (``gap`` seconds between two gangs; 0: as fast as
    the clients go), wait until bound (or ``timeout`` s after the last create); return the
    figures (see the module docstring)."""
    api = local_cluster.ApiClient(cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"], concurrency)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, expect=(201, 409))
    watch = BindWatch(cluster, namespace)
    watch.start()
    watch.ready.wait(30)
    cpu_before, errors_before = cpu_seconds(cluster), patch_errors(cluster)
    last_created: dict[str, float] = {}
    members: dict[str, list[str]] = {}
    started = time.monotonic()
    for index in range(gangs):
        name = f"gang-{index}"
        stored = api.request("POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs", job(name, namespace, pods))
        gang_pods = operator_pods(stored)
        api.map(lambda pod: api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod), gang_pods)
        last_created[name] = time.monotonic()
        members[name] = [p["metadata"]["name"] for p in gang_pods]
        if gap:
            time.sleep(gap)
    created_seconds = time.monotonic() - started
    expected = gangs * pods
    deadline = time.monotonic() + timeout
    while len(watch.bound) < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    cpu = cpu_seconds(cluster) - cpu_before
    watch.stopping.set()
    latencies = sorted(max(watch.bound[p] for p in names) - last_created[gang]
                       for gang, names in members.items() if all(p in watch.bound for p in names))
    releases = sorted(max(watch.released[p] for p in names) - last_created[gang]
                      for gang, names in members.items() if all(p in watch.released for p in names))
    listed = api.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    nodes = {n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU, 0))
             for n in api.request("GET", "/api/v1/nodes")["items"]}
    used: Counter = Counter()
    for pod in listed:
        if pod["spec"].get("nodeName"):
            used[pod["spec"]["nodeName"]] += sum(int(c.get("resources", {}).get("limits", {}).get(GPU, 0))
                                                 for c in pod["spec"]["containers"])
    return {"gangs": gangs, "pods": pods, "nodes": len(nodes), "gap": gap, "created_seconds": created_seconds,
            "gangs_bound": len(latencies), "pods_bound": len(watch.bound),
            "p50": statistics.median(latencies) if latencies else float("nan"),
            "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan"),
            "max": latencies[-1] if latencies else float("nan"),
            "release_p50": statistics.median(releases) if releases else float("nan"),
            "release_p99": releases[min(len(releases) - 1, int(0.99 * len(releases)))] if releases else float("nan"),
            "cpu_per_gang": cpu / gangs,
            "double_bookings": sum(1 for node, gpus in used.items() if gpus > nodes.get(node, 0)),
            "never_bound": expected - len(watch.bound),
            "rejected_patches": sum((patch_errors(cluster) - errors_before).values()),
            "rejected_by_code": dict(patch_errors(cluster) - errors_before)}


def report(figures: dict) -> str:
    return (f"{figures['gangs']} gangs of {figures['pods']} pods on {figures['nodes']} nodes "
            f"(created in {figures['created_seconds']:.1f} s, {figures['gap']:g} s between gangs): last pod created -> last pod bound "
            f"p50 {figures['p50']:.2f} s, p99 {figures['p99']:.2f} s, max {figures['max']:.2f} s "
            f"({figures['gangs_bound']} gangs bound; last pod created -> last pod released p50 "
            f"{figures['release_p50']:.2f} s, p99 {figures['release_p99']:.2f} s); controller CPU {figures['cpu_per_gang'] * 1000:.0f} ms per gang; "
            f"{figures['double_bookings']} double bookings, {figures['never_bound']} pods never bound, "
            f"{figures['rejected_patches']:.0f} rejected patches"
            + (f" (by HTTP status: {figures['rejected_by_code']})" if figures["rejected_patches"] else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="a running `hack/local-cluster.sh up DIR --controller` with nodes")
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--pods", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--rack", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between two gangs (default 0: a burst)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--logs", type=Path, help="copy the control plane's logs here before stopping it")
    args = parser.parse_args()

    def measure(cluster: local_cluster.LocalCluster) -> None:
        figures = run(cluster, args.gangs, args.pods, args.concurrency, gap=args.gap)
        print(report(figures))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")

    if args.dir:
        measure(local_cluster.LocalCluster(args.dir))
        return 0
    with tempfile.TemporaryDirectory(prefix="consumers-bench-") as directory:
        try:
            cluster = local_cluster.up(Path(directory) / "cluster", webhook=True, gate_pods=True, controller=True)
        except local_cluster.ClusterError as error:
            print(error, file=sys.stderr)
            return 1
        try:
            cluster.kubectl("apply", "-f", str(TOPOLOGY))
            started = time.monotonic()
            count = register(cluster, args.nodes, args.rack, Path(directory))
            print(f"registered {count} nodes in {time.monotonic() - started:.1f} s", flush=True)
            time.sleep(5)  # the webhook's and the controllers' caches learn the Topology and the nodes
            measure(cluster)
        finally:
            if args.logs:
                shutil.copytree(cluster.dir / "logs", args.logs, dirs_exist_ok=True)
            cluster.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
