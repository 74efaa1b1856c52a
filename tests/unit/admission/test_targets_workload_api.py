"""Target ``workload-api`` end to end, without a cluster (DESIGN.md §9b).

Upstream facts (k8s.io/api v0.37.2, k8s.io/kubernetes v1.37.2):
- ``core/v1`` ``PodSpec.schedulingGroup`` (``PodSchedulingGroup``) with the one member
  ``podGroupName``, "a DNS subdomain" (``pkg/apis/core/validation``: ``ValidatePodGroupName =
  NameIsDNSSubdomain``: at most 253 characters); "the group object referenced by this field may not
  exist at the time the Pod is created"; immutable;
- Workload, CompositePodGroup and PodGroup names are DNS subdomains too
  (``pkg/apis/scheduling/validation``).

The webhook: workload CREATE writes the gang facts and ``segments.dev/target: workload-api`` on
every template of the gang; pod CREATE sets ``spec.schedulingGroup.podGroupName`` to
``<gang>-segment-<k>`` (``<gang>-other`` outside segments) and never gates. The controller:
``reconcile_groups`` gives the Workload, CompositePodGroup and child PodGroups once every pod of
the gang exists, each owned by the gang's top owner.
"""

from __future__ import annotations

import re
from collections import Counter

import jsonpatch

from tests.conftest import SEG_REQ, SIZE, TOPO, WL_REQ, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.admission.workload_api import GANG_NAME_MAX, gang_object_name, podgroup_name, same_shape
from webhook.controller.podgroups import reconcile_groups
from webhook.gating.reconcile import ObjectRef
from webhook.topology.objects import StaticTopologyCatalog, Topology

ZONE, BLOCK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-block"
RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
CATALOG = StaticTopologyCatalog([Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))])
WLAPI = AdmissionSettings(target="workload-api")
TARGET = "segments.dev/target"
GANG_SIZE = "segments.dev/gang-size"
GANG_REQUIRED = "segments.dev/topology-required-placement"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


# ------------------------------------------------------------------------------------ names
def test_gang_names_are_the_gang_keys_parts():
    assert gang_object_name("team-a/llama") == "llama"
    assert gang_object_name("team-a/lws/3") == "lws-3"
    assert podgroup_name("lws-3", 0) == "lws-3-segment-0"
    assert podgroup_name("llama", None) == "llama-other"


def test_a_long_gang_name_is_cut_with_a_sha256_suffix():
    import re

    name = gang_object_name("team-a/" + "x" * 300)
    # 234 = 253 - len("-segment-") - 10 digits of a segment index; the suffix is sha256("team-a/xxx…")[:10]
    assert GANG_NAME_MAX == 234
    assert name == "x" * 223 + "-f0f7bcb2fe"
    assert len(name) == 234
    longest_child = podgroup_name(name, 2**31 - 1)
    assert len(longest_child) == 253 and re.fullmatch(DNS_SUBDOMAIN, longest_child)
    # a name that is no DNS subdomain (upper case, "_", a JobSet whole-object key's "*") is rewritten, suffixed
    assert gang_object_name("team-a/Job_Name/*") == "job-name-3bbb9656f1"
    assert gang_object_name("team-a/" + "x" * 234) == "x" * 234  # fits: kept


# ------------------------------------------------------------------------------------ workload CREATE
def pytorchjob(workers=6):
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "llama", "namespace": "team-a", "labels": {TARGET: "workload-api"},
                         "annotations": {TOPO: "cluster-topology", WL_REQ: BLOCK}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}},
                "Worker": {"replicas": workers, "template": {
                    "metadata": {"annotations": {SIZE: "4", SEG_REQ: RACK}},
                    "spec": {"containers": [{"name": "w", "image": "i"}]}}}}}}


def test_every_template_of_the_gang_carries_the_target_and_the_gang_facts():
    obj = pytorchjob()
    decision = review(make_request(obj), CATALOG, WLAPI)
    assert decision.allowed, decision.message
    admitted = jsonpatch.apply_patch(obj, decision.patch)
    specs = admitted["spec"]["pytorchReplicaSpecs"]
    master = specs["Master"]["template"]["metadata"]["annotations"]
    worker = specs["Worker"]["template"]["metadata"]["annotations"]
    facts = {TARGET: "workload-api", GANG_SIZE: "7", GANG_REQUIRED: BLOCK, "segments.dev/topology": "cluster-topology"}
    assert {k: master[k] for k in facts} == facts
    assert {k: worker[k] for k in facts} == facts


# ------------------------------------------------------------------------------------ pod CREATE
def worker_pod(index, annotations=None, spec=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"llama-worker-{index}", "namespace": "team-a",
                         "labels": {"training.kubeflow.org/job-name": "llama",
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": str(index)},
                         "annotations": annotations if annotations is not None else {
                             TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK, TARGET: "workload-api",
                             GANG_SIZE: "7", GANG_REQUIRED: BLOCK}},
            "spec": spec or {"containers": [{"name": "w", "image": "i"}]}}


def master_pod():
    pod = worker_pod(0, {TARGET: "workload-api", GANG_SIZE: "7", GANG_REQUIRED: BLOCK})
    pod["metadata"]["name"] = "llama-master-0"
    pod["metadata"]["labels"]["training.kubeflow.org/replica-type"] = "master"
    return pod


def pod_ops(pod, settings=WLAPI):
    decision = review(make_request(pod), CATALOG, settings)
    assert decision.allowed
    return {op["path"]: op["value"] for op in decision.patch}, decision.warnings


def test_a_worker_pod_names_its_segments_podgroup_and_is_never_gated():
    for settings in (WLAPI, AdmissionSettings(target="workload-api", gate_pods=True)):
        ops, warnings = pod_ops(worker_pod(5), settings)
        assert ops["/spec/schedulingGroup"] == {"podGroupName": "llama-segment-1"}  # replica 5 // 4
        assert ops["/metadata/labels/kai.scheduler~1segment-index"] == "1"
        assert not [p for p in ops if p.startswith("/spec/schedulingGates")]
        assert warnings == []


def test_the_master_names_the_other_podgroup():
    ops, _ = pod_ops(master_pod())
    assert ops["/spec/schedulingGroup"] == {"podGroupName": "llama-other"}


def test_only_a_webhook_serving_workload_api_sets_the_field():
    ops, _ = pod_ops(worker_pod(5), AdmissionSettings())
    assert "/spec/schedulingGroup" not in ops
    unmarked = worker_pod(5, {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK})
    ops, _ = pod_ops(unmarked)
    assert "/spec/schedulingGroup" not in ops and ops["/metadata/labels/kai.scheduler~1segment-index"] == "1"


def test_a_pod_naming_another_podgroup_keeps_it_with_a_warning():
    pod = worker_pod(5, spec={"containers": [{"name": "w", "image": "i"}],
                              "schedulingGroup": {"podGroupName": "mine"}})
    ops, warnings = pod_ops(pod)
    assert "/spec/schedulingGroup" not in ops
    assert warnings == ['spec.schedulingGroup.podGroupName "mine" kept; its segment\'s PodGroup is "llama-segment-1"']
    same = worker_pod(5, spec={"containers": [{"name": "w", "image": "i"}],
                               "schedulingGroup": {"podGroupName": "llama-segment-1"}})
    assert pod_ops(same) == ({"/metadata/labels/kai.scheduler~1segment-index": "1",
                              "/metadata/labels/kai.scheduler~1subgroup-name": "worker-1"}, [])


def test_a_pod_without_its_gang_labels_gets_no_podgroup_and_a_warning():
    pod = worker_pod(5)
    del pod["metadata"]["labels"]["training.kubeflow.org/job-name"]
    ops, warnings = pod_ops(pod)
    assert "/spec/schedulingGroup" not in ops
    assert warnings == ["no PodGroup: no gang key (label training.kubeflow.org/job-name, or "
                        "leaderworkerset.sigs.k8s.io/name + group-index)"]


# ------------------------------------------------------------------------------------ controller
def admitted_pods():
    """The 7 pods of ``pytorchjob()`` as the webhook admits them."""
    out = []
    for pod in [master_pod()] + [worker_pod(i) for i in range(6)]:
        decision = review(make_request(pod), CATALOG, WLAPI)
        out.append(jsonpatch.apply_patch(pod, decision.patch))
    return out


OWNER = ObjectRef("kubeflow.org/v1", "PyTorchJob", "team-a", "llama", "uid-1")


def test_the_controller_waits_for_every_pod_of_the_gang():
    decision = reconcile_groups("team-a/llama", admitted_pods()[:5], OWNER)
    assert decision.create == () and decision.waiting == "5 of 7 pods exist" and decision.problem == ""


def test_the_controller_creates_the_gangs_objects_owned_by_its_workload():
    decision = reconcile_groups("team-a/llama", admitted_pods(), OWNER)
    owner = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama", "uid": "uid-1"}]
    assert [(o["kind"], o["metadata"]["name"], o["metadata"]["ownerReferences"]) for o in decision.create] == [
        ("Workload", "llama", owner), ("CompositePodGroup", "llama", owner),
        ("PodGroup", "llama-segment-0", owner), ("PodGroup", "llama-segment-1", owner), ("PodGroup", "llama-other", owner)]
    composite, seg0, seg1, other = decision.create[1:]
    assert composite["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 3}}
    assert composite["spec"]["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}
    assert [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in (seg0, seg1, other)] == [4, 2, 1]
    assert seg1["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    assert "schedulingConstraints" not in other["spec"]
    # every pod's podGroupName is one of the children made
    names = {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in admitted_pods()}
    assert names == {"llama-segment-0", "llama-segment-1", "llama-other"}


def test_terminated_pods_and_pods_of_another_target_do_not_count():
    pods = admitted_pods()
    pods[3]["status"] = {"phase": "Failed"}
    assert reconcile_groups("team-a/llama", pods, OWNER).waiting == "6 of 7 pods exist"
    assert reconcile_groups("team-a/llama", [worker_pod(1, {GANG_SIZE: "1"})], OWNER).waiting == "no live pod"


def test_pods_that_disagree_on_the_gang_size_are_a_problem():
    pods = admitted_pods()
    pods[0]["metadata"]["annotations"][GANG_SIZE] = "8"
    decision = reconcile_groups("team-a/llama", pods, OWNER)
    assert decision.create == () and decision.problem == "its pods state 2 gang sizes (segments.dev/gang-size), need exactly one"


def test_an_existing_object_of_the_same_spec_is_the_same_shape():
    wanted = reconcile_groups("team-a/llama", admitted_pods(), OWNER).create[2]
    stored = {**wanted, "spec": {**wanted["spec"], "schedulingPolicy": {"gang": {"minCount": 4}}, "priority": 0}}
    assert same_shape(wanted, stored)  # a field the API server defaults is not a difference
    changed = {**wanted, "spec": {**wanted["spec"], "schedulingPolicy": {"gang": {"minCount": 3}}}}
    assert not same_shape(wanted, changed)


# ------------------------------------------------------------------------------------ the live controller
def test_the_live_controller_creates_the_objects_and_keeps_an_existing_one(caplog):
    """The runner on a loopback API server (tests/support/kube_apiserver.py): the gang's 7 pods arrive, owned
    by their PyTorchJob; a PodGroup of another spec exists already: it is kept (AlreadyExists,
    ``podgroup-kept`` logged), the others are created, each owned by the PyTorchJob."""
    import logging
    import time

    from tests.support.kube_apiserver import KubeApiServer
    from tests.unit.controller.test_controller_live import api_client
    from webhook.controller.runner import Controller, ControllerSettings

    server = KubeApiServer().start()
    controller = None
    try:
        job = server.create("pytorchjobs", {"metadata": {"name": "llama", "namespace": "team-a"}, "spec": {}})
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama",
                 "uid": job["metadata"]["uid"], "controller": True}
        theirs = {"metadata": {"name": "llama-segment-1", "namespace": "team-a"},
                  "spec": {"schedulingPolicy": {"gang": {"minCount": 9}}}}
        server.create("podgroups", theirs)
        caplog.set_level(logging.INFO, logger="webhook.controller")
        controller = Controller(api_client(server, "c-1"), ControllerSettings(identity="c-1", lease_namespace="x"),
                                elect=False).start()
        for pod in admitted_pods():
            pod["metadata"]["ownerReferences"] = [owner]
            server.create("pods", pod)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(server.list("podgroups")) < 3:
            time.sleep(0.05)
        names = {(r, o["metadata"]["name"]) for r in ("workloads", "compositepodgroups", "podgroups")
                 for o in server.list(r)}
        assert names == {("workloads", "llama"), ("compositepodgroups", "llama"), ("podgroups", "llama-segment-0"),
                         ("podgroups", "llama-segment-1"), ("podgroups", "llama-other")}
        made = [o for r in ("workloads", "compositepodgroups", "podgroups") for o in server.list(r)
                if o["metadata"]["name"] != "llama-segment-1"]
        assert all(o["metadata"]["ownerReferences"] == [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                         "name": "llama", "uid": job["metadata"]["uid"]}] for o in made)
        kept = server.get("podgroups", "team-a", "llama-segment-1")
        assert kept is not None
        assert kept["spec"]["schedulingPolicy"] == {"gang": {"minCount": 9}}
        assert any("podgroup-kept: PodGroup team-a/llama-segment-1" in r.getMessage() for r in caplog.records)
        assert not any(p["spec"].get("schedulingGates") for p in server.list("pods"))
    finally:
        if controller is not None:
            controller.stop()
        server.close()


def test_an_object_of_a_deleted_workload_of_the_same_name_is_stale():
    """A PodGroup owned by another uid (the old workload, not collected yet) is not ours to keep:
    ``stale``, tried again later; one without owner or of the same owner is kept."""
    from tests.support.kube_apiserver import KubeApiServer
    from tests.unit.controller.test_controller_live import api_client
    from webhook.cluster.api_server import ApiServerReachability, JsonClient
    from webhook.controller.workload_objects import CREATED, KEPT, STALE, WorkloadObjectWriter

    server = KubeApiServer().start()
    try:
        api = api_client(server, "c-1")
        writer = WorkloadObjectWriter(JsonClient(api, ApiServerReachability(api.configuration.host)))
        wanted = reconcile_groups("team-a/llama", admitted_pods(), OWNER).create[2]
        old_owner = {**wanted["metadata"]["ownerReferences"][0], "uid": "uid-0"}
        server.create("podgroups", {**wanted, "metadata": {**wanted["metadata"], "ownerReferences": [old_owner]}})
        assert writer.create(wanted) == STALE
        server.delete("podgroups", "team-a", "llama-segment-0")
        assert writer.create(wanted) == CREATED
        assert writer.create(wanted) == KEPT
    finally:
        server.close()


# ------------------------------------------------------------------------------- whole-object gangs
# A root workload level on a JobSet or a Ray object makes the whole object one gang
# (``segments.dev/gang-scope: workload``, DESIGN.md §4.5, key ``<namespace>/<name>/*``), and each
# replicatedJob / worker group numbers its segments from 0: the names keep the groups apart.
LLM = "llm-f1313e60d4"  # gang_object_name("team-a/llm/*"): "*" is not DNS, sha256("team-a/llm/*")[:10]
NVL72 = "nvl72-e6e479fabc"  # gang_object_name("team-a/nvl72/*")


def test_the_segments_of_each_group_of_a_whole_object_gang_have_their_own_names():
    assert gang_object_name("team-a/llm/*") == LLM
    assert podgroup_name(LLM, 0, "big") == "llm-f1313e60d4-big-segment-0"
    assert podgroup_name(LLM, 0, "small") == "llm-f1313e60d4-small-segment-0"
    assert podgroup_name(LLM, None, "big") == "llm-f1313e60d4-other"  # outside segments: one child
    # a Ray group name that is no DNS label: made DNS-safe by the same function, sha256("<gang>/<group>")
    assert podgroup_name(NVL72, 2, "GPU_a") == "nvl72-e6e479fabc-gpu-a-cb3bc1e2fc-segment-2"
    longest = podgroup_name("g" * GANG_NAME_MAX, 2**31 - 1, "w" * 63)
    assert len(longest) <= 253 and re.fullmatch(DNS_SUBDOMAIN, longest)


def _two_group_objects():
    """JobSet llm (replicatedJob big: 2 Jobs x 4 pods, small: 1 x 4) and RayCluster nvl72 (worker group
    gpu: 3 replicas x 2 hosts, cpu: 2 x 1), each group segmented by rack, root level: one gang each."""
    from tests.unit.gating.test_gate_whole_workload import jobset, raycluster

    js = jobset()
    for rjob in js["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["metadata"]["annotations"] = {SIZE: "4", SEG_REQ: RACK}
    ray = raycluster()
    for group in ray["spec"]["workerGroupSpecs"]:
        group["template"]["metadata"] = {"annotations": {SIZE: "2", SEG_REQ: RACK}}
    return js, ray


def _placed_objects(tmp_path, obj, capsys):
    """``place --target workload-api -o json``'s objects, on 2 zones x 4 racks x 4 nodes of 8 GPUs."""
    import json

    import yaml

    from webhook.cli import main

    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    assert main(["gen-cluster", "--zones", "2", "--blocks", "1", "--racks", "4", "--nodes", "4", "--gpus", "8",
                 "--fill", "0", "-o", str(cluster)]) == 0
    workload.write_text(yaml.safe_dump(obj))
    capsys.readouterr()
    assert main(["place", "-f", str(workload), "--cluster", str(cluster), "--target", "workload-api",
                 "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)["target"]["objects"]


def _admitted_pods(obj):
    """The pods the object's controller creates, as the webhook serving workload-api admits them."""
    from webhook.planning.expand import expand

    return expand(obj, StaticTopologyCatalog([Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))]), WLAPI).pods


def _children(objects):
    return {o["metadata"]["name"]: o["spec"]["schedulingPolicy"]["gang"]["minCount"]
            for o in objects if o["kind"] == "PodGroup"}


def test_a_jobset_gang_of_two_replicated_jobs_has_a_podgroup_per_job_and_segment(tmp_path, capsys):
    js, _ = _two_group_objects()
    objects = _placed_objects(tmp_path, js, capsys)
    assert _children(objects) == {"llm-f1313e60d4-big-segment-0": 4, "llm-f1313e60d4-big-segment-1": 4,
                                  "llm-f1313e60d4-small-segment-0": 4}
    assert objects[1]["kind"] == "CompositePodGroup" and objects[1]["metadata"]["name"] == LLM
    assert objects[1]["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 3}}
    pods = _admitted_pods(js)
    names = {p["metadata"]["name"]: p["spec"]["schedulingGroup"]["podGroupName"] for p in pods}
    assert names["llm-big-1-3"] == "llm-f1313e60d4-big-segment-1"  # Job 1 of big, completion 3: index 7 // 4
    assert names["llm-small-0-0"] == "llm-f1313e60d4-small-segment-0"
    assert sorted(Counter(names.values()).items()) == sorted(_children(objects).items())
    decided = reconcile_groups("team-a/llm/*", pods, OWNER)  # the controller names alike
    assert [o["metadata"]["name"] for o in decided.create] == [o["metadata"]["name"] for o in objects]


def test_a_ray_gang_of_two_worker_groups_has_a_podgroup_per_group_and_segment(tmp_path, capsys):
    _, ray = _two_group_objects()
    objects = _placed_objects(tmp_path, ray, capsys)
    assert _children(objects) == {"nvl72-e6e479fabc-cpu-segment-0": 2, "nvl72-e6e479fabc-gpu-segment-0": 2,
                                  "nvl72-e6e479fabc-gpu-segment-1": 2, "nvl72-e6e479fabc-gpu-segment-2": 2}
    pods = [p for p in _admitted_pods(ray) if p["metadata"]["labels"].get("ray.io/node-type") != "head"]
    names = Counter(p["spec"]["schedulingGroup"]["podGroupName"] for p in pods)
    assert sorted(names.items()) == sorted(_children(objects).items())
    decided = reconcile_groups("team-a/nvl72/*", pods, OWNER)
    assert [o["metadata"]["name"] for o in decided.create] == [o["metadata"]["name"] for o in objects]
