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
from typing import Any

import pytest
import yaml

from tests.support import paths
from webhook.controller.advisory import (
    Expansions,
    advice_documents,
    advise,
    kueue_pending_since,
    kueue_workload_pending,
    kueue_workload_word,
    pending_elsewhere,
    pending_gangs,
)
from webhook.planning.freeing import read_occupants
from webhook.planning.snapshot import snapshot_from_objects
from webhook.planning.whatif import planner_for

RACK = "cloud.provider.com/topology-rack"
GPU = "nvidia.com/gpu"


def node(name: str, rack: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z0",
                                                  "cloud.provider.com/topology-block": "b0", RACK: rack,
                                                  "kubernetes.io/hostname": name}},
            "status": {"allocatable": {GPU: "1", "cpu": "8", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


#: Any: objects as the informers hand them (JSON, not yet typed as webhook.kube.shapes.Node)
NODES: list[Any] = [node(f"n-{rack}-{i}", rack) for rack in ("r0", "r1", "r2") for i in range(2)]


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


def worker(i: int, size: int, gates: list[str] | tuple[str, ...] | None = ("kueue.x-k8s.io/admission",), **spec) -> Any:
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


def busy(name: str, on: str) -> Any:
    """A running pod of another team taking the one GPU of node ``on``."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "other"},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": {GPU: "1"}}}]},
            "status": {"phase": "Running"}}


def advice(size: int, extra: list[Any], pods: list[Any] | None = None) -> list[dict]:
    pods = pods if pods is not None else [worker(i, size) for i in range(4)]
    objects = NODES + extra + pods
    return advice_documents(pods, [job(size)], snapshot_from_objects(NODES + extra), read_occupants(objects))


# ----------------------------------------------------------------------------- which pods are pending elsewhere
@pytest.mark.parametrize("pod, pending", [
    (worker(0, 2), True),  # Kueue: not admitted
    (worker(0, 2, ["kueue.x-k8s.io/topology"]), False),  # Kueue TAS: admitted, its ungater releases it
    (worker(0, 2, None, nodeName=None) | {"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}, True),  # kube-scheduler, KAI
    (worker(0, 2, None), False),  # not reported unschedulable yet: no other scheduler holds it
    # Kueue's TAS gate as kube-scheduler reports it: the gate's owner decides (live Kueue, issue 36)
    (worker(0, 2, ["kueue.x-k8s.io/topology"]) | {"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}}, False),
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


UNSCHEDULABLE = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                    "reason": "Unschedulable"}]}


@pytest.mark.parametrize("target", ["workload-api", "gate", "kueue"])
def test_an_owner_labelled_for_another_target_is_advised_under_that_target(target):
    """Issue 36: beside kube-scheduler's Workload API, the owner carries ``segments.dev/target:
    workload-api``; a what-if under the default kai denied it (``target-unknown``: kai serves kai and
    kueue) and every refused gang got "denied by the webhook". Admitted under its label's target, it
    gets the engine's verdict: n-r0-0 busy, the segments fit on r1 and r2."""
    owner = job(2)
    owner["metadata"]["labels"]["segments.dev/target"] = target
    pods = [worker(i, 2, None) | {"status": UNSCHEDULABLE} for i in range(4)]
    [doc] = advice_documents(pods, [owner], snapshot_from_objects(NODES + [busy("b0", "n-r0-0")]), {})
    assert (doc["verdict"], doc["event"]["reason"]) == ("fits", "SecondOpinionFitsNow")
    assert doc["event"]["message"] == ("gang ml/train: fits now on free capacity: "
                                       "segment 0 -> cloud.provider.com/topology-rack=r1 (n-r1-0, n-r1-1); "
                                       "segment 1 -> cloud.provider.com/topology-rack=r2 (n-r2-0, n-r2-1)")


def test_a_label_naming_no_target_is_still_denied_with_the_webhooks_reason():
    owner = job(2)
    owner["metadata"]["labels"]["segments.dev/target"] = "volcano"
    found = advise("ml/train", owner, snapshot_from_objects(NODES), {}, live_pods=4)
    assert found is not None and found.verdict == "denied"
    assert 'metadata.labels["segments.dev/target"] = "volcano": not a target this webhook serves (kai, kueue)' \
        in found.line


def test_a_gang_not_all_created_gets_no_advice():
    """3 of the 4 workers exist (no gang-size under target kueue: the owner's expansion counts)."""
    assert advice(2, [], [worker(i, 2) for i in range(3)]) == []


def test_a_gang_without_its_owner_in_the_input_says_so():
    pods = [worker(i, 2) for i in range(4)]
    docs = advice_documents(pods, [], snapshot_from_objects(NODES), {})
    assert docs == [{"gang": "ml/train", "owner": None, "verdict": "error", "message":
                     "gang ml/train: no workload of this gang in the input; dump it with the pods "
                     "(kubectl get nodes,pods,<kind> -A -o yaml) or add it with -f"}]


def lws_pod(group: int, worker: int, **spec) -> Any:
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


# ----------------------------------------------------------------------------- the memo of expansions
def test_a_memoized_expansion_gives_the_same_advice_and_is_reused_as_capacity_moves():
    """The live advisor advises a gang again each time capacity moves (issue 36); its memo of the
    owner's expansion must change no verdict or line (the lines of the fresh what-if, literally as
    above), and an owner rewritten only in its resourceVersion and this controller's own
    ``segments.dev/gang-state`` annotation is the same entry."""
    memo = Expansions()
    fits_line = ("gang ml/train: fits now on free capacity: "
                 "segment 0 -> cloud.provider.com/topology-rack=r1 (n-r1-0, n-r1-1); "
                 "segment 1 -> cloud.provider.com/topology-rack=r2 (n-r2-0, n-r2-1)")
    waiting_line = ("gang ml/train: waiting for capacity: nvidia.com/gpu in cloud.provider.com/topology-rack r2 "
                    "(room for 2 of 4 pods like ml/train-worker-0 there now; it fits when those nodes are free)")
    owner = job(2) | {"metadata": {**job(2)["metadata"], "resourceVersion": "7"}}
    first = advise("ml/train", owner, snapshot_from_objects(NODES + [busy("b0", "n-r0-0")]), {}, expansions=memo)
    assert first is not None and (first.verdict, first.line) == ("fits", fits_line)
    assert (memo.misses, memo.hits, len(memo)) == (1, 0, 1)
    written = owner | {"metadata": {**owner["metadata"], "resourceVersion": "8",
                                    "annotations": {"segments.dev/gang-state": fits_line}}}
    again = advise("ml/train", written, snapshot_from_objects(NODES + [busy("b0", "n-r0-0"), busy("b1", "n-r1-0")]),
                   {}, expansions=memo)
    assert again is not None and (again.verdict, again.line) == ("waiting-for-capacity", waiting_line)
    assert (memo.misses, memo.hits, len(memo)) == (1, 1, 1)


def test_an_owner_edited_by_its_user_is_expanded_again():
    """A change to anything the webhook reads (here the segment size: 4 does not fit a rack of 2
    GPUs) is a new memo entry, never the old expansion; an owner without a uid is not memoized."""
    memo = Expansions()
    snapshot = snapshot_from_objects(NODES)
    first = advise("ml/train", job(2), snapshot, {}, expansions=memo)
    assert first is not None and first.verdict == "fits"
    edited = advise("ml/train", job(4), snapshot, {}, expansions=memo)
    assert edited is not None and edited.verdict == "never-fits"
    assert (memo.misses, memo.hits, len(memo)) == (2, 0, 2)
    no_uid = job(2) | {"metadata": {k: v for k, v in job(2)["metadata"].items() if k != "uid"}}
    unkept = advise("ml/train", no_uid, snapshot, {}, expansions=memo)
    assert unkept is not None and unkept.verdict == "fits"
    assert (memo.misses, memo.hits, len(memo)) == (2, 0, 2)


def test_the_restriction_and_the_gang_keys_are_kept_beside_the_expansion():
    """What each re-advice recomputed over every pod of the owner (the gang keys, the restriction
    to the gang) is kept with the expansion, the same objects while it is kept, and dropped with it."""
    memo = Expansions(max_pods=4)
    planner = planner_for(snapshot_from_objects(NODES))
    planner.only = frozenset({"ml/train"})
    first = memo.restricted(job(2), planner)
    assert memo.restricted(job(2), planner) is first
    assert [p["metadata"]["name"] for p in first.pods] == [f"train-worker-{i}" for i in range(4)]
    assert memo.gang_keys(job(2), planner) == ["ml/train"]
    assert (memo.misses, memo.hits) == (1, 2)
    other = job(2) | {"metadata": {**job(2)["metadata"], "uid": "uid-other"}}
    memo.restricted(other, planner)  # 4 more pods: the first owner's expansion is dropped, and what it kept
    assert memo.restricted(job(2), planner) is not first


def test_the_memo_keeps_at_most_its_pods_dropping_the_least_recently_used():
    """``max_pods`` bounds the pods kept over all entries (4 per owner here)."""
    memo = Expansions(max_pods=8)
    snapshot = snapshot_from_objects(NODES)
    owners = [job(2) | {"metadata": {**job(2)["metadata"], "uid": f"uid-{k}"}} for k in range(3)]
    for owner in owners[:2]:
        advise("ml/train", owner, snapshot, {}, expansions=memo)
    advise("ml/train", owners[0], snapshot, {}, expansions=memo)  # owner 0 used last
    advise("ml/train", owners[2], snapshot, {}, expansions=memo)  # drops owner 1
    assert (memo.misses, memo.hits, len(memo)) == (3, 1, 2)
    advise("ml/train", owners[0], snapshot, {}, expansions=memo)
    assert memo.hits == 2


# ----------------------------------------------------------------------------- controller --once --advise
ADVISORY_EXAMPLE = paths.REPO / "docs" / "examples" / "advisory-cluster.yaml"


def test_the_docs_example_is_this_modules_cluster_and_prints_what_planning_md_shows():
    """docs/examples/advisory-cluster.yaml is the dump built here (NODES, one busy node, ml/train
    and its four gated workers); docs/concepts/planning.md shows its output line for line."""
    assert yaml.safe_load(ADVISORY_EXAMPLE.read_text()) == {
        "apiVersion": "v1", "kind": "List", "items": NODES + [busy("b0", "n-r0-0"), job(2)] + [worker(i, 2) for i in range(4)]}
    run = subprocess.run([sys.executable, "-m", "webhook.cli", "controller", "--once", "--advise", "--snapshot",
                          "docs/examples/advisory-cluster.yaml"], capture_output=True, text=True, check=False,
                         cwd=paths.REPO)
    assert run.returncode == 0, run.stderr
    doc = (paths.REPO / "docs" / "concepts" / "planning.md").read_text()
    command = "$ segment-webhook controller --once --advise --snapshot docs/examples/advisory-cluster.yaml\n"
    shown = doc[doc.index(command) + len(command):].split("```")[0]
    assert shown == run.stdout + run.stderr


def test_once_advise_prints_what_it_would_write(tmp_path):
    dump = ADVISORY_EXAMPLE
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


def test_once_advise_says_the_webhooks_denial_of_an_owner_given_with_f_and_refuses_another_kind(tmp_path):
    """New-user trial: an owner given with ``-f`` that the webhook denies (a misspelled key) got
    "no workload of this gang in the input ... or add it with -f"; a ConfigMap given with ``-f``
    was ignored, exit 0. The denied owner is found by the pods' controller owner, as the live
    advisor finds it, and its line is the webhook's denial; another kind is bad input (exit 2), as
    for ``controller --once -f`` and ``place -f``."""
    dump = tmp_path / "cluster.yaml"
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": NODES + [worker(i, 2) for i in range(4)]}))
    typo = job(2)
    annotations = typo["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    annotations["kai.scheduler/segment-sise"] = annotations.pop("kai.scheduler/segment-size")
    owner = tmp_path / "owner.yaml"
    owner.write_text(yaml.safe_dump(typo))
    run = subprocess.run([sys.executable, "-m", "webhook.cli", "controller", "--once", "--advise", "--snapshot",
                          str(dump), "-f", str(owner), "-o", "json"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    [doc] = json.loads(run.stdout)
    assert (doc["gang"], doc["owner"], doc["verdict"], doc["event"]["reason"]) == (
        "ml/train", "PyTorchJob ml/train", "denied", "SecondOpinionDenied")
    assert "kai.scheduler/segment-sise" in doc["event"]["message"], doc["event"]["message"]
    config_map = tmp_path / "cm.yaml"
    config_map.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}))
    run = subprocess.run([sys.executable, "-m", "webhook.cli", "controller", "--once", "--advise", "--snapshot",
                          str(dump), "-f", str(config_map)], capture_output=True, text=True, check=False)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"segment-webhook controller: error: {config_map}: ") and "ConfigMap" in run.stderr


# ----------------------------------------------------------------------------- the live advisory controller
def test_live_advisory_controller_writes_the_event_and_the_annotation_and_patches_no_pod():
    """The AdvisoryController against the loopback API server of tests/support/kube_apiserver.py: the
    fits-now gang above gets one Event and the annotation on its PyTorchJob; no pod is patched."""
    import time

    from kubernetes import client as k8s_client

    from tests.support.kube_apiserver import KubeApiServer
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


# ----------------------------------------------------------------------------- Kueue's pending Workloads
def suspended_job() -> dict:
    """Job ml/train (4 pods of 1 GPU, segments of 2 in a rack, no gang level) as stored under target
    kueue: the webhook's slice annotations on the template, suspended by Kueue, no pod."""
    template_annotations = {"kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-size": "2",
                            "kai.scheduler/segment-topology-required-placement": RACK,
                            "kueue.x-k8s.io/podset-slice-required-topology": RACK,
                            "kueue.x-k8s.io/podset-slice-size": "2", "segments.dev/target": "kueue"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-job",
                         "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "segments.dev/target": "kueue"},
                         "annotations": {"kai.scheduler/topology": "cluster-topology"}},
            "spec": {"suspend": True, "completionMode": "Indexed", "completions": 4, "parallelism": 4,
                     "template": {"metadata": {"annotations": template_annotations},
                                  "spec": {"restartPolicy": "Never", "containers": [
                                      {"name": "w", "image": "i", "resources": {"limits": {GPU: "1"}}}]}}}}


#: Kueue's word when TAS finds no room (kueue v0.17 pkg/scheduler/flavorassigner/flavorassigner.go
#: "couldn't assign flavors to pod set", pkg/cache/scheduler/tas_flavor_snapshot.go "allows to fit only").
KUEUE_SAYS = ("couldn't assign flavors to pod set main: topology \"cluster-topology\" allows to fit only "
              "1 out of 2 slice(s)")


def kueue_workload(status: dict | None = None, **spec) -> dict:
    """The kueue.x-k8s.io/v1beta2 Workload Kueue's Job integration makes for ``suspended_job()``
    (apis/kueue/v1beta2/workload_types.go: one PodSet ``main`` of count 4, its template the Job's,
    the topologyRequest built from the slice annotations), pending by default."""
    job_ = suspended_job()
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "job-train-3f2a1", "namespace": "ml", "creationTimestamp": "2026-12-07T07:00:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                              "uid": "uid-job", "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"active": True, "queueName": "user-queue", "priority": 0, "podSets": [
                {"name": "main", "count": 4, "template": job_["spec"]["template"],
                 "topologyRequest": {"podIndexLabel": "batch.kubernetes.io/job-completion-index",
                                     "podSetSliceRequiredTopology": RACK, "podSetSliceSize": 2}}], **spec},
            "status": status if status is not None else {"conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": KUEUE_SAYS,
                 "lastTransitionTime": "2026-12-07T07:00:01Z"}]}}


ADMITTED = {"admission": {"clusterQueue": "cluster-queue", "podSetAssignments": [{"name": "main", "count": 4}]},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                           {"type": "Admitted", "status": "True", "reason": "Admitted"}]}


@pytest.mark.parametrize("workload, pending", [
    (kueue_workload(), True),  # QuotaReserved False: Kueue's "couldn't assign flavors"
    (kueue_workload({}), False),  # Kueue has not tried it yet: most are admitted within milliseconds
    (kueue_workload(ADMITTED), False),
    (kueue_workload({"conditions": [{"type": "QuotaReserved", "status": "True"}]}), False),  # admission checks
    (kueue_workload({"conditions": [{"type": "Finished", "status": "True"}]}), False),
    (kueue_workload(active=False), False),  # deactivated
    (kueue_workload() | {"apiVersion": "scheduling.k8s.io/v1alpha2"}, False),  # the Workload API's kind
])
def test_kueue_workload_pending(workload, pending):
    assert kueue_workload_pending(workload) is pending


def test_kueue_pending_since_and_word():
    assert kueue_pending_since(kueue_workload()) == "2026-12-07T07:00:01Z"
    assert kueue_pending_since(kueue_workload({})) == "2026-12-07T07:00:00Z"
    assert kueue_workload_word(kueue_workload()) == KUEUE_SAYS
    assert kueue_workload_word(kueue_workload({})) == ""


def test_a_pending_kueue_workload_gets_the_second_opinion_on_its_job():
    """No pod exists (Kueue keeps the Job suspended): the gang is the Job's, as place expands it.
    n-r0-0 busy: r1 and r2 each hold a segment of 2, so it fits now although Kueue says 1 of 2."""
    extra = [busy("b0", "n-r0-0")]
    docs = advice_documents([], [kueue_workload(), suspended_job()], snapshot_from_objects(NODES + extra), {})
    line = ("gang ml/train: fits now on free capacity: "
            "segment 0 -> cloud.provider.com/topology-rack=r1 (n-r1-0, n-r1-1); "
            "segment 1 -> cloud.provider.com/topology-rack=r2 (n-r2-0, n-r2-1)")
    assert docs == [{"gang": "ml/train", "owner": "Job ml/train", "verdict": "fits",
                     "event": {"type": "Warning", "reason": "SecondOpinionFitsNow", "message": line},
                     "annotation": {"segments.dev/gang-state": line},
                     "kueue": {"workload": "ml/job-train-3f2a1", "says": KUEUE_SAYS}}]


def test_a_pending_kueue_workload_waiting_and_admitted():
    """n-r0-0 and n-r1-0 busy: only r2 holds a segment: waiting (never "fits"); admitted: no advice."""
    extra = [busy("b0", "n-r0-0"), busy("b1", "n-r1-0")]
    snapshot = snapshot_from_objects(NODES + extra)
    [doc] = advice_documents([], [kueue_workload(), suspended_job()], snapshot, {})
    assert (doc["verdict"], doc["event"]["message"]) == ("waiting-for-capacity", (
        "gang ml/train: waiting for capacity: nvidia.com/gpu in cloud.provider.com/topology-rack r2 "
        "(room for 2 of 4 pods like ml/train-0 there now; it fits when those nodes are free)"))
    assert advice_documents([], [kueue_workload(ADMITTED), suspended_job()], snapshot, {}) == []


def test_a_pending_kueue_workload_without_its_owner_says_so():
    [doc] = advice_documents([], [kueue_workload()], snapshot_from_objects(NODES), {})
    assert doc == {"gang": None, "owner": None, "verdict": "error",
                   "kueue": {"workload": "ml/job-train-3f2a1", "says": KUEUE_SAYS},
                   "message": "Kueue Workload ml/job-train-3f2a1: its owner is not in the input; dump it with the "
                              "Workloads (kubectl get nodes,pods,workloads,<kind> -A -o yaml) or add it with -f"}


# ----------------------------------------------------------------------------- the live step on a Kueue Workload
class Recorded:
    """The advisor's writers, recorded: Events and owner annotation lines."""

    def __init__(self) -> None:
        self.events: list = []
        self.lines: list[str] = []

    def record(self, event) -> None:
        self.events.append(event)

    def write(self, key, owner, line) -> None:
        self.lines.append(line)


class Queued(list):
    """The keys a cache queued, in order; ``first``: those it queued at the head of the queue."""

    def __init__(self) -> None:
        super().__init__()
        self.first: list[str] = []

    def add(self, keys, first: bool) -> None:
        keys = list(keys)
        self.extend(keys)
        if first:
            self.first.extend(keys)


def kueue_advisor(extra: list[Any]):
    """An Advisor on an AdvisoryCache fed by hand (no API server): NODES and ``extra`` pods charged,
    the Job of ``suspended_job()`` as every Workload's top owner, the embedded cluster-topology."""
    import threading

    from kubernetes import client as k8s_client

    from webhook.cluster.api_server import ApiServerReachability
    from webhook.controller.advisor import Advisor
    from webhook.controller.cache import AdvisoryCache
    from webhook.controller.gang_metrics import Metrics
    from webhook.controller.settings import ControllerSettings
    from webhook.gating.reconcile import TopOwner
    from webhook.planning.snapshot import Snapshot
    from webhook.topology.objects import Topology

    cfg = k8s_client.Configuration()
    cfg.host = "https://127.0.0.1:1"
    queued = Queued()
    cache = AdvisoryCache(k8s_client.ApiClient(cfg), ApiServerReachability(cfg.host), threading.Event(),
                          queued.add, lambda: None, lambda key: None)
    for n in NODES:
        cache.on_node("ADDED", n)
    for p in extra:
        cache.on_pod("ADDED", p)
    owner = TopOwner(advisory_ref(suspended_job()), "jobs", suspended_job(), None)

    class Owners:
        def top_owner(self, obj):
            return owner

    written = Recorded()
    advisor = Advisor(cache, Owners(), written, written,  # type: ignore[arg-type]
                      ControllerSettings(identity="t", lease_namespace="ns", advise=True), Metrics())
    topology = Topology("cluster-topology", ("topology.kubernetes.io/zone", "cloud.provider.com/topology-block", RACK,
                                             "kubernetes.io/hostname"))
    advisor.snapshot = lambda: Snapshot(topologies=[topology])  # type: ignore[method-assign]
    return advisor, cache, queued, written


def advisory_ref(obj):
    from webhook.controller.advisory import ref_of

    return ref_of(obj)


def test_live_a_pending_kueue_workload_gets_one_event_however_often_it_is_queued():
    """The Workload is queued as ``kueue/ml/job-train-3f2a1``; its gang ml/train fits (n-r0-0 busy).
    One Event and one line. A pod landing on a node queues the advised gang key and the Workload
    again: nothing new is written (issue 36: the pod step used to clear the gang's verdict, and
    the next pass wrote another Event). Admitted, the Workload is forgotten."""
    advisor, cache, queued, written = kueue_advisor([busy("b0", "n-r0-0")])
    cache.on_workload("ADDED", kueue_workload())
    assert queued[-1] == "kueue/ml/job-train-3f2a1"
    advisor.advise("kueue/ml/job-train-3f2a1")
    line = ("gang ml/train: fits now on free capacity: "
            "segment 0 -> cloud.provider.com/topology-rack=r1 (n-r1-0, n-r1-1); "
            "segment 1 -> cloud.provider.com/topology-rack=r2 (n-r2-0, n-r2-1)")
    assert [(e.reason, e.message) for e in written.events] == [("SecondOpinionFitsNow", line)]
    assert written.lines == [line]
    queued.clear()
    cache.on_pod("ADDED", busy("b9", "n-r0-0") | {"metadata": {"name": "b9", "namespace": "other"}})
    assert sorted(queued) == ["kueue/ml/job-train-3f2a1", "ml/train"]
    for key in queued:
        advisor.advise(key)
    advisor.advise("kueue/ml/job-train-3f2a1")
    assert len(written.events) == 1 and written.lines == [line]
    cache.on_workload("MODIFIED", kueue_workload(ADMITTED))
    assert cache.kueue_pending == {} and cache.kueue_gangs == {} and "ml/train" not in cache.advised


def test_a_new_pending_gang_is_queued_first_and_the_opinions_kept_current_behind_it():
    """Issue 36 (every miss named within 2 s at 5,000 nodes): a pod of a gang not advised yet, and a
    Workload newly pending, go to the head of the work queue; the same Workload again, a pod of a
    gang advised already, and every advised gang requeued because a pod landed on a node, behind."""
    advisor, cache, queued, _ = kueue_advisor([])
    cache.on_pod("ADDED", worker(0, 2))  # held by Kueue's admission gate; ml/train not advised yet
    cache.on_workload("ADDED", kueue_workload())
    cache.on_workload("MODIFIED", kueue_workload())
    assert list(queued) == ["ml/train"] + ["kueue/ml/job-train-3f2a1"] * 2
    assert queued.first == ["ml/train", "kueue/ml/job-train-3f2a1"]
    advisor.advise("kueue/ml/job-train-3f2a1")  # ml/train advised now
    queued.clear()
    queued.first.clear()
    cache.on_pod("ADDED", worker(1, 2))
    cache.on_pod("ADDED", busy("b9", "n-r0-0"))  # lands on a node: the advised keys again
    assert queued.first == [] and sorted(queued) == ["kueue/ml/job-train-3f2a1", "ml/train", "ml/train"]
