"""Greedy miss: kube-scheduler's CompositePodGroup placement on a tight instance where a placement
exists (DESIGN.md §9b, §13 "second opinion"). Prints the figures; asserts nothing.

The instance: one block of 2 racks x 4 nodes (8 GPUs each), one node of the second rack taken by a
bound pod; a PyTorchJob of 1 Master + 6 Workers (8 GPUs each) in segments of 4 per rack, the whole
job in one block, compiled by ``segment-webhook place --target workload-api`` into a Workload, a
CompositePodGroup and PodGroups ``g-segment-0`` (4 pods), ``g-segment-1`` (2) and ``g-other`` (the
Master). ``place`` finds the placement (segment 0 in the free rack, segment 1 and the Master in the
other). Each trial creates the objects, the Master pod first, then the Workers, on
``local-cluster.sh up --workload-api`` (kube-scheduler v1.37.2), waits ``--wait`` seconds and counts
the gang as placed (all 7 bound) or left pending; then deletes the gang's pods and objects.

    python3 benchmarks/targets_greedy_miss.py --trials 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402

JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
       "metadata": {"name": "g", "namespace": "default", "labels": {"segments.dev/target": "workload-api"},
                    "annotations": {"kai.scheduler/topology": "cluster-topology",
                                    "kai.scheduler/topology-required-placement": "cloud.provider.com/topology-block"}},
       "spec": {"pytorchReplicaSpecs": {
           "Master": {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
           "Worker": {"replicas": 6, "template": {
               "metadata": {"annotations": {"kai.scheduler/segment-size": "4",
                                            "kai.scheduler/segment-topology-required-placement":
                                                "cloud.provider.com/topology-rack"}},
               "spec": {"containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}}
BLOCKED_NODE = "node-0-0-1-0"


def cli(*args: str) -> str:
    """This checkout's ``segment-webhook``; its stdout."""
    result = subprocess.run([sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300, check=True)
    return result.stdout


def pod(name: str, group: str | None, node: str | None = None, label: str = "gang") -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                  "restartPolicy": "Never"}
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": {"bench": label}}, "spec": spec}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--wait", type=float, default=60.0, help="seconds a trial waits for the gang to bind")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="greedy-miss-"))
    nodes = work / "nodes.yaml"
    cli("gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "2", "--nodes", "4", "--fill", "0", "-o", str(nodes))
    snapshot = yaml.safe_load(nodes.read_text())
    blocker = pod("blocker", None, BLOCKED_NODE, label="blocker")
    blocker["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "8"}
    snapshot["items"].append({**blocker, "status": {"phase": "Running"}})
    (work / "snapshot.yaml").write_text(yaml.safe_dump(snapshot))
    (work / "job.yaml").write_text(yaml.safe_dump(JOB))
    placed = json.loads(cli("place", "-f", str(work / "job.yaml"), "--cluster", str(work / "snapshot.yaml"),
                            "--target", "workload-api", "-o", "json"))
    print(f"place (our engine): placed={placed['placed']}; " + "; ".join(
        f"segment {s['index']} in {s['domain']}" for s in placed["segments"]))
    objects = placed["target"]["objects"]
    cluster = local_cluster.up(work / "cluster", webhook=False, gate_pods=False, workload_api=True)
    pending = 0
    try:
        kubectl = [str(cluster.bin / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]

        def k(*a: str, data: dict | None = None, check: bool = True) -> str:
            return subprocess.run(kubectl + list(a), input=json.dumps(data) if data else None, capture_output=True,
                                  text=True, timeout=120, check=check).stdout

        cluster.register_nodes(nodes)
        k("create", "-f", "-", data=blocker)
        for trial in range(args.trials):
            for obj in objects:
                k("create", "-f", "-", data=obj)
            k("create", "-f", "-", data=pod("g-master-0", "g-other"))
            time.sleep(1)
            for i in range(6):
                k("create", "-f", "-", data=pod(f"g-worker-{i}", f"g-segment-{i // 4}"))
            deadline, bound = time.monotonic() + args.wait, 0
            while time.monotonic() < deadline and bound < 7:
                time.sleep(2)
                bound = sum(1 for p in json.loads(k("get", "pods", "-l", "bench=gang", "-o", "json"))["items"]
                            if p["spec"].get("nodeName"))
            event = k("get", "events", "--field-selector", "involvedObject.name=g-worker-0", "-o",
                      "jsonpath={.items[-1:].message}", check=False)
            pending += bound < 7
            print(f"trial {trial}: {bound}/7 pods bound; g-worker-0's last event: {event[:240]}", flush=True)
            k("delete", "pods", "-l", "bench=gang", "--wait=true", "--grace-period=0", "--force", check=False)
            for obj in reversed(objects):
                k("delete", f"{obj['kind'].lower()}s.{obj['apiVersion'].split('/')[0]}", obj["metadata"]["name"],
                  "--wait=true", check=False)
    finally:
        cluster.stop_all()
    print(f"\ngangs left pending by kube-scheduler: {pending} of {args.trials} (a placement exists: place above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
