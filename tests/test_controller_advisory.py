"""The advisory controller (issue 36 item 3, DESIGN.md §13 "Second opinion"): for a gang another
scheduler leaves pending, one Event and ``segments.dev/gang-state`` on its top owner with what
``place --what-if`` says on the same snapshot.

The cluster: zone z0, block b0, racks r0, r1, r2 of two nodes ``n-<rack>-<i>`` with one GPU each
(cluster-topology, the embedded default). The gang: PyTorchJob ml/train, 4 one-GPU workers in
segments of 2 at rack level, its pods as the webhook stamps them (DESIGN.md §2, §7), held by
Kueue's admission gate. Expected lines are stated from the cluster: a rack holds one segment of 2.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from webhook.controller.advisory import advice_documents, pending_elsewhere, pending_gangs
from webhook.planning.freeing import read_occupants
from webhook.planning.snapshot import snapshot_from_objects

RACK = "cloud.provider.com/topology-rack"
GPU = "nvidia.com/gpu"


def node(name: str, rack: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z0",
                                                  "cloud.provider.com/topology-block": "b0", RACK: rack,
                                                  "kubernetes.io/hostname": name}},
            "status": {"allocatable": {GPU: "1", "cpu": "8", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


NODES = [node(f"n-{rack}-{i}", rack) for rack in ("r0", "r1", "r2") for i in range(2)]


def job(size: int) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-train",
                         "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4, "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": "cluster-topology",
                                             "kai.scheduler/segment-size": str(size),
                                             "kai.scheduler/segment-topology-required-placement": RACK}},
                "spec": {"containers": [{"name": "pytorch", "image": "pytorch",
                                         "resources": {"limits": {GPU: "1"}}}]}}}}}}


def worker(i: int, size: int, gates: list[str] | tuple[str, ...] | None = ("kueue.x-k8s.io/admission",), **spec) -> dict:
    """Worker ``i`` of ml/train as the training operator creates it and the webhook stamps it."""
    pod: dict = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"train-worker-{i}", "namespace": "ml",
                              "labels": {"training.kubeflow.org/job-name": "train",
                                         "training.kubeflow.org/replica-type": "worker",
                                         "training.kubeflow.org/replica-index": str(i),
                                         "kai.scheduler/segment-index": str(i // size)},
                              "annotations": {"kai.scheduler/topology": "cluster-topology",
                                              "kai.scheduler/segment-size": str(size),
                                              "kai.scheduler/segment-topology-required-placement": RACK},
                              "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train",
                                                   "uid": "uid-train", "controller": True}]},
                 "spec": {"containers": [{"name": "pytorch", "image": "pytorch",
                                          "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}}], **spec},
                 "status": {"phase": "Pending"}}
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return pod


def busy(name: str, on: str) -> dict:
    """A running pod of another team taking the one GPU of node ``on``."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "other"},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": {GPU: "1"}}}]},
            "status": {"phase": "Running"}}


def advice(size: int, extra: list[dict], pods: list[dict] | None = None) -> list[dict]:
    pods = pods if pods is not None else [worker(i, size) for i in range(4)]
    objects = NODES + extra + pods
    return advice_documents(pods, [job(size)], snapshot_from_objects(NODES + extra), read_occupants(objects))


# ----------------------------------------------------------------------------- which pods are pending elsewhere
@pytest.mark.parametrize("pod, pending", [
    (worker(0, 2), True),  # Kueue: not admitted
    (worker(0, 2, ["kueue.x-k8s.io/topology"]), True),  # Kueue TAS: admitted, not ungated yet
    (worker(0, 2, None, nodeName=None) | {"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}, True),  # kube-scheduler, KAI
    (worker(0, 2, None), False),  # not reported unschedulable yet: no other scheduler holds it
    (worker(0, 2, ["segments.dev/placement"]), False),  # our own gate: the gating controller's gang
    (worker(0, 2, None, nodeName="n-r0-0"), False),  # bound
    (worker(0, 2, None, nodeSelector={"kubernetes.io/hostname": "n-r0-0"}), False),  # pinned (released)
])
def test_pending_elsewhere(pod, pending):
    assert pending_elsewhere(pod) is pending


def test_a_gang_with_one_pod_bound_is_not_pending():
    pods = [worker(i, 2) for i in range(3)] + [worker(3, 2, None, nodeName="n-r2-1")]
    assert pending_gangs(pods) == {}
    assert list(pending_gangs([worker(i, 2) for i in range(4)])) == ["ml/train"]


# ----------------------------------------------------------------------------- the three verdicts, literally
def test_fits_now_names_each_segment_its_rack_and_nodes():
    """n-r0-0 busy: r0 has room for 1 pod, r1 and r2 for a segment of 2 each: the gang fits."""
    [doc] = advice(2, [busy("b0", "n-r0-0")])
    line = ("gang ml/train: fits now on free capacity: "
            "segment 0 -> cloud.provider.com/topology-rack=r1 (n-r1-0, n-r1-1); "
            "segment 1 -> cloud.provider.com/topology-rack=r2 (n-r2-0, n-r2-1)")
    assert doc == {"gang": "ml/train", "owner": "PyTorchJob ml/train", "verdict": "fits",
                   "event": {"type": "Warning", "reason": "SecondOpinionFitsNow", "message": line},
                   "annotation": {"segments.dev/gang-state": line}}


def test_waiting_for_capacity_names_the_resource_and_the_domain():
    """n-r0-0 and n-r1-0 busy: only r2 holds a segment of 2: it fits once those nodes are free."""
    [doc] = advice(2, [busy("b0", "n-r0-0"), busy("b1", "n-r1-0")])
    assert doc["verdict"] == "waiting-for-capacity"
    assert doc["event"]["reason"] == "SecondOpinionWaitingForCapacity"
    assert doc["event"]["type"] == "Normal"
    assert doc["event"]["message"] == (
        "gang ml/train: waiting for capacity: nvidia.com/gpu in cloud.provider.com/topology-rack r2 "
        "(room for 2 of 4 pods like ml/train-worker-0 there now; it fits when those nodes are free)")


def test_can_never_fit_names_the_what_if_changes():
    """Segments of 4 at rack: a rack has 2 GPUs. Segments of 2 fit; so does the block level."""
    [doc] = advice(4, [], [worker(i, 4) for i in range(4)])
    assert doc["verdict"] == "never-fits"
    assert doc["event"] == {"type": "Warning", "reason": "SecondOpinionNeverFits", "message": (
        "gang ml/train: can never fit, not even with every node free; smallest changes that fit: "
        "1. kai.scheduler/segment-size: 2 (was 4); "
        "2. kai.scheduler/segment-topology-required-placement: cloud.provider.com/topology-block "
        "(was cloud.provider.com/topology-rack)")}


def test_no_fits_when_the_engine_finds_none():
    """Every rack holds at most one free GPU: never "fits" (the verdict is the engine's)."""
    docs = advice(2, [busy("b0", "n-r0-0"), busy("b1", "n-r1-0"), busy("b2", "n-r2-0")])
    assert [d["verdict"] for d in docs] == ["waiting-for-capacity"]


def test_a_gang_not_all_created_gets_no_advice():
    """3 of the 4 workers exist (no gang-size under target kueue: the owner's expansion counts)."""
    assert advice(2, [], [worker(i, 2) for i in range(3)]) == []


def test_a_gang_without_its_owner_in_the_input_says_so():
    pods = [worker(i, 2) for i in range(4)]
    docs = advice_documents(pods, [], snapshot_from_objects(NODES), {})
    assert docs == [{"gang": "ml/train", "owner": None, "verdict": "error", "message":
                     "gang ml/train: no workload of this gang in the input; dump it with the pods "
                     "(kubectl get nodes,pods,<kind> -A -o yaml) or add it with -f"}]


def lws_pod(group: int, worker: int, **spec) -> dict:
    """Pod ``worker`` of group ``group`` of LeaderWorkerSet ml/serve (size 2, one segment of 2 at
    rack per group) as LWS creates it and the webhook stamps it."""
    annotations = {"kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-size": "2",
                   "kai.scheduler/segment-topology-required-placement": RACK, "leaderworkerset.sigs.k8s.io/size": "2"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"serve-{group}" + (f"-{worker}" if worker else ""), "namespace": "ml",
                         "labels": {"leaderworkerset.sigs.k8s.io/name": "serve",
                                    "leaderworkerset.sigs.k8s.io/group-index": str(group),
                                    "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
                                    "kai.scheduler/segment-index": "0"},
                         "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {GPU: "1"}}}], **spec},
            "status": {"phase": "Running" if spec.get("nodeName") else "Pending"}}


LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
       "metadata": {"name": "serve", "namespace": "ml", "uid": "uid-serve"},
       "spec": {"replicas": 2, "leaderWorkerTemplate": {
           "size": 2, "subGroupPolicy": {"subGroupSize": 2, "subGroupPolicyType": "LeaderWorker"},
           **{f"{role}Template": {"metadata": {"annotations": {
               "kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-topology-required-placement": RACK}},
               "spec": {"containers": [{"name": role, "image": "i", "resources": {"limits": {GPU: "1"}}}]}}
              for role in ("leader", "worker")}}}}


def test_the_owners_running_gang_stays_where_it_runs():
    """LWS ml/serve: group 0 runs on rack r1, n-r0-0 is busy, group 1 is held by Kueue. Group 1 fits
    on r2. Placing the whole LWS again would find no room for group 0 and group 1 together (r1's
    pods charged, r0 has one free GPU) and say "waiting": the what-if is restricted to the gang."""
    running = [lws_pod(0, 0, nodeName="n-r1-0"), lws_pod(0, 1, nodeName="n-r1-1")]
    pending = [lws_pod(1, 0, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]),
               lws_pod(1, 1, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])]
    extra = [busy("b0", "n-r0-0")] + running
    docs = advice_documents(running + pending, [LWS], snapshot_from_objects(NODES + extra), {})
    assert [(d["gang"], d["verdict"], d["event"]["message"]) for d in docs] == [
        ("ml/serve/1", "fits", "gang ml/serve/1: fits now on free capacity: "
                               "segment 0 -> cloud.provider.com/topology-rack=r2 (n-r2-0, n-r2-1)")]


# ----------------------------------------------------------------------------- controller --once --advise
def test_once_advise_prints_what_it_would_write(tmp_path):
    dump = tmp_path / "cluster.yaml"
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                    "items": NODES + [busy("b0", "n-r0-0"), job(2)] + [worker(i, 2) for i in range(4)]}))
    run = subprocess.run([sys.executable, "-m", "webhook.cli", "controller", "--once", "--advise", "--snapshot",
                          str(dump), "-o", "json"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    [doc] = json.loads(run.stdout)
    assert doc["event"]["message"].startswith("gang ml/train: fits now on free capacity: segment 0 -> "
                                              "cloud.provider.com/topology-rack=r1 (n-r1-0, n-r1-1)")
    assert "1 pending gang" in run.stderr
    # the same snapshot through place --what-if: the same verdict
    workload = tmp_path / "job.yaml"
    workload.write_text(yaml.safe_dump(job(2)))
    what_if = subprocess.run([sys.executable, "-m", "webhook.cli", "place", "-f", str(workload), "--cluster", str(dump),
                              "--what-if", "-o", "json"], capture_output=True, text=True, check=False)
    assert json.loads(what_if.stdout)["verdict"] == "fits"


# ----------------------------------------------------------------------------- the live advisory controller
def test_live_advisory_controller_writes_the_event_and_the_annotation_and_patches_no_pod():
    """The AdvisoryController against the loopback API server of tests/kube_apiserver.py: the
    fits-now gang above gets one Event and the annotation on its PyTorchJob; no pod is patched."""
    import time

    from kubernetes import client as k8s_client

    from kube_apiserver import KubeApiServer
    from webhook.controller.advisor import AdvisoryController
    from webhook.controller.settings import ControllerSettings

    server = KubeApiServer(bind_after=0.2).start()
    ctl = None
    try:
        server.create("topologies", {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                                     "metadata": {"name": "cluster-topology"},
                                     "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"},
                                                         {"nodeLabel": "cloud.provider.com/topology-block"},
                                                         {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}})
        for n in NODES:
            server.create("nodes", n)
        server.create("pods", busy("b0", "n-r0-0"))
        owner = server.create("pytorchjobs", job(2))
        cfg = k8s_client.Configuration()
        cfg.host = server.url
        settings = ControllerSettings(identity="advisor", lease_namespace="segment-webhook", advise=True)
        ctl = AdvisoryController(k8s_client.ApiClient(cfg), settings, elect=False).start()
        for i in range(4):
            pod = worker(i, 2)
            pod["metadata"]["ownerReferences"][0]["uid"] = owner["metadata"]["uid"]
            server.create("pods", pod)
        line = ("gang ml/train: fits now on free capacity: "
                "segment 0 -> cloud.provider.com/topology-rack=r1 (n-r1-0, n-r1-1); "
                "segment 1 -> cloud.provider.com/topology-rack=r2 (n-r2-0, n-r2-1)")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stored = server.get("pytorchjobs", "ml", "train") or {}
            if (stored.get("metadata", {}).get("annotations") or {}).get("segments.dev/gang-state") == line:
                break
            time.sleep(0.05)
        assert (stored["metadata"].get("annotations") or {}).get("segments.dev/gang-state") == line
        events = [e for e in server.list("events") if e["involvedObject"]["kind"] == "PyTorchJob"]
        assert [(e["type"], e["reason"], e["message"]) for e in events] == [("Warning", "SecondOpinionFitsNow", line)]
        assert server.patch_log == []  # the JSON patches of pods (a release): none
        assert all(p["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
                   for p in server.list("pods") if p["metadata"]["namespace"] == "ml")
    finally:
        if ctl is not None:
            ctl.stop()
        server.close()
