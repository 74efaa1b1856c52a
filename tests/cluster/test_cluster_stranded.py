"""A stranded gang recovered on the real control plane (marker ``cluster``; DESIGN.md §9, amended in
issue 37; docs/decisions/stranded-gang-recovery.md).

``hack/local-cluster.sh up DIR --webhook --gate-pods --controller`` (the controller under deploy/'s
ServiceAccount and RBAC), 1 zone, 1 block, 2 racks of 2 nodes of 8 GPUs. An Indexed Job of 4 pods of
2 GPUs, segments of 4 in one rack (kube-controller-manager's Job controller makes and remakes its
pods). The race of the issue is made certain: kube-scheduler is paused (SIGSTOP: it runs without
leader election here) while the controller releases the gang, and a pod that no gate holds is bound
by its ``nodeName`` onto the node index 3 was pinned to, taking the GPUs left there but 2 GPUs for
each other pod pinned there. kube-scheduler, resumed, binds 3 pods and reports the fourth pinned to
that node ``Unschedulable`` (which of them it leaves out is its choice). What must hold:

* the controller deletes the stranded pod, the Job controller creates its index again, the webhook
  gates it and the controller places it next to the 3 bound pods: all 4 indexes bound;
* the segment on the nodes of one rack (the Nodes' labels say so), no node over its allocatable GPUs
  counting every bound pod of the cluster, the intruder included;
* the Job shows the recovery: a ``GangStranded`` Event and, at the end, ``segments.dev/gang-state``
  saying the replacement was released.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster.test_cluster_consumers import create, pods_of, wait_for
from tests.support.cluster_support import Kubectl, gated_plane

pytestmark = pytest.mark.cluster

LAYOUT = ("--zones", "1", "--blocks", "1", "--racks", "2", "--nodes", "2", "--gpus", "8", "--fill", "0")
NAMESPACE = "stranded"
RACK = "cloud.provider.com/topology-rack"
GPU = "nvidia.com/gpu"
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with gated_plane(tmp_path_factory.mktemp("stranded"), "stranded gang", LAYOUT, NAMESPACE, 4) as (cluster, kubectl):
        yield cluster, kubectl


def indexed_job() -> dict:
    """4 pods of 2 GPUs, one segment of 4 in one rack (DESIGN.md §2 keys on the pod template)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NAMESPACE},
            "spec": {"completionMode": "Indexed", "parallelism": 4, "completions": 4, "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": "cluster-topology",
                                             "kai.scheduler/segment-size": "4",
                                             "kai.scheduler/segment-topology-required-placement": RACK}},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "c", "image": "busybox", "resources": {"limits": {GPU: "2"}}}]}}}}


def job_pods(kube: Kubectl) -> list[dict]:
    return [p for p in pods_of(kube, NAMESPACE) if (p["metadata"].get("labels") or {}).get("job-name") == "train"
            and not p["metadata"].get("deletionTimestamp")]


def pinned(pod: dict) -> str | None:
    return (pod["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname")


def scheduler(cluster, sig: int) -> None:
    """Pause or resume the kube-scheduler this test's control plane started."""
    os.kill(int((Path(cluster.dir) / "pids" / "kube-scheduler.pid").read_text()), sig)


def test_a_stranded_gang_is_bound_in_full_afterwards(plane, tmp_path, capsys):
    cluster, kube = plane
    scheduler(cluster, signal.SIGSTOP)
    try:
        create(kube, tmp_path, indexed_job())
        released = wait_for("4 pods released (ungated, pinned)", lambda: (lambda pods: pods if len(pods) == 4 and all(
            pinned(p) and not p["spec"].get("schedulingGates") for p in pods) else None)(job_pods(kube)), timeout=120)
        by_index = {p["metadata"]["labels"][INDEX]: p for p in released}
        victim = by_index["3"]
        full = pinned(victim)
        beside = sum(1 for p in released if pinned(p) == full and p is not victim)
        intruder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder", "namespace": NAMESPACE},
                    "spec": {"nodeName": full, "containers": [
                        {"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(8 - 2 * beside)}}}]}}
        create(kube, tmp_path, intruder)  # no gate holds it: bound where the released index 3 was pinned
    finally:
        scheduler(cluster, signal.SIGCONT)
    first = {p["metadata"]["uid"]: p for p in released}
    final = wait_for("4 indexes bound, one of them made again", lambda: (lambda pods: pods if len(pods) == 4 and all(
        p["spec"].get("nodeName") for p in pods) and set(first) - {p["metadata"]["uid"] for p in pods} else None)(
        job_pods(kube)), timeout=240)
    nodes = {n["metadata"]["name"]: n for n in json.loads(kube.ok("get", "nodes", "-o", "json"))["items"]}
    assert sorted(p["metadata"]["labels"][INDEX] for p in final) == ["0", "1", "2", "3"]
    [gone] = [first[uid] for uid in set(first) - {p["metadata"]["uid"] for p in final}]
    assert pinned(gone) == full  # the pod left out was one pinned where the intruder went
    again = next(p for p in final if p["metadata"]["labels"][INDEX] == gone["metadata"]["labels"][INDEX])
    assert again["spec"]["nodeName"] != full
    assert len({nodes[p["spec"]["nodeName"]]["metadata"]["labels"][RACK] for p in final}) == 1
    used: Counter = Counter()
    for pod in json.loads(kube.ok("get", "pods", "-A", "-o", "json"))["items"]:
        if pod["spec"].get("nodeName") in nodes and not pod["metadata"].get("deletionTimestamp"):
            used[pod["spec"]["nodeName"]] += sum(int(c.get("resources", {}).get("limits", {}).get(GPU, 0))
                                                 for c in pod["spec"]["containers"])
    assert {n: g for n, g in used.items() if g > int(nodes[n]["status"]["allocatable"][GPU])} == {}
    events = json.loads(kube.ok("get", "events", "-n", NAMESPACE, "-o", "json"))["items"]
    on_job = [(e["reason"], e["message"]) for e in events if e["involvedObject"]["kind"] == "Job"]
    stranded = [m for r, m in on_job if r == "GangStranded"]
    assert stranded and stranded[0].startswith(
        f"gang {NAMESPACE}/train: stranded: pod {gone['metadata']['name']} released to node {full} "
        "no longer fits there (")
    assert stranded[0].endswith(f"3 of 4 pods bound; deleted {gone['metadata']['name']} so that its controller "
                                "creates it again, to be placed again around the bound pods")
    state = wait_for("the Job's gang-state says released", lambda: (lambda v: v if v and "released 1 pod" in v
                     else None)(kube.get("job", "train", NAMESPACE)["metadata"].get("annotations", {})
                                .get("segments.dev/gang-state")), timeout=60)
    assert state.startswith(f"gang {NAMESPACE}/train: released 1 pod to ")
    with capsys.disabled():
        print(f"\nstranded: {gone['metadata']['name']} pinned to {full}, intruder of {8 - 2 * beside} GPUs bound there; "
              f"Events on the Job: {on_job}; gang-state: {state}; final nodes: "
              + ", ".join(f"{p['metadata']['labels'][INDEX]}={p['spec']['nodeName']}" for p in final))
