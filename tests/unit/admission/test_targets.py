"""Targets (DESIGN.md §9b): one segment spec compiled to kai, kueue, workload-api and gate.

Kueue facts, from sigs.k8s.io/kueue v0.17.0:
- annotation names: ``apis/kueue/v1beta2/topology_types.go`` (``podset-required-topology``,
  ``podset-preferred-topology``, ``podset-slice-required-topology``, ``podset-slice-size``);
- one of required / preferred / unconstrained per PodSet, a present key counts whatever its value
  (``pkg/controller/jobframework/tas_validation.go`` ``ValidateTASPodSetRequest``);
- a slice level above the PodSet level is refused at scheduling (``pkg/cache/scheduler/
  tas_flavor_snapshot.go`` ``findTopologyAssignment``: "podset slice topology ... is above the
  podset topology"), and a count the slice size does not divide leaves the rest gated (#15277);
- PodSets and their pod index labels (``pkg/controller/jobs``): batch Job one PodSet ranked by
  ``batch.kubernetes.io/job-completion-index``; PyTorchJob one PodSet per replica type ranked by
  ``training.kubeflow.org/replica-index``; LWS with a leaderTemplate a leader PodSet (1) and a
  worker PodSet (size - 1, ``pod-index-offset: 1``); KubeRay worker groups without an index label.
"""

from __future__ import annotations

import jsonpatch
import pytest

from tests.conftest import SEG_PREF, SEG_REQ, SIZE, TOPO, WL_PREF, WL_REQ, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.admission.targets import default_target, served_targets
from webhook.topology.objects import StaticTopologyCatalog, Topology

ZONE, BLOCK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-block"
RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
CATALOG = StaticTopologyCatalog([Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))])
KUEUE = AdmissionSettings(target="kueue")
K_REQ, K_PREF = "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"
K_SLICE, K_SIZE = "kueue.x-k8s.io/podset-slice-required-topology", "kueue.x-k8s.io/podset-slice-size"
TARGET = "segments.dev/target"


def job(completions=8, parallelism=None, size="4", seg_req=RACK, wl_req=BLOCK, labels=None, mode="Indexed", **tmpl):
    annotations = {SIZE: size, **tmpl}
    if seg_req:
        annotations[SEG_REQ] = seg_req
    root = {TOPO: "cluster-topology"}
    if wl_req:
        root[WL_REQ] = wl_req
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "seg", "namespace": "default", "labels": labels or {}, "annotations": root},
            "spec": {"completionMode": mode, "completions": completions,
                     "parallelism": completions if parallelism is None else parallelism,
                     "template": {"metadata": {"annotations": annotations},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "i"}]}}}}


def run(obj, settings=KUEUE, **kw):
    return review(make_request(obj, **kw), CATALOG, settings)


def template_annotations(obj, decision, *path):
    admitted = jsonpatch.apply_patch(obj, decision.patch)
    node = admitted
    for part in path:
        node = node[part]
    return node.get("metadata", {}).get("annotations", {})


def test_kueue_job_gets_the_podset_and_slice_annotations():
    obj = job()
    d = run(obj)
    assert d.allowed, d.message
    got = template_annotations(obj, d, "spec", "template")
    assert {k: v for k, v in got.items() if k.startswith("kueue.x-k8s.io/") or k == TARGET} == {
        K_REQ: BLOCK, K_SLICE: RACK, K_SIZE: "4", TARGET: "kueue"}
    # the kai.scheduler keys stay: the pod handler reads them (§7)
    assert got[SIZE] == "4" and got[TOPO] == "cluster-topology" and got[SEG_REQ] == RACK


def test_kai_target_writes_no_kueue_key():
    obj = job()
    d = run(obj, AdmissionSettings())
    got = template_annotations(obj, d, "spec", "template")
    assert not [k for k in got if k.startswith("kueue.x-k8s.io/") or k == TARGET]


def test_workload_label_overrides_the_serve_target():
    obj = job(labels={TARGET: "kueue"})
    d = run(obj, AdmissionSettings())
    assert template_annotations(obj, d, "spec", "template")[K_SLICE] == RACK
    obj = job(labels={TARGET: "kai"})
    d = run(obj, KUEUE)
    assert K_SLICE not in template_annotations(obj, d, "spec", "template")


def test_partial_last_segment_is_denied_under_kueue_and_warned_under_kai():
    d = run(job(completions=10))
    assert [v.rule for v in d.violations] == ["target-cannot-express"]
    # issue 37: the versions it is for; the fix names only targets this webhook serves (no --gate-pods: not gate)
    assert d.message == (
        'spec.template.metadata.annotations["kai.scheduler/segment-size"] = "4": target kueue: Kueue\'s PodSet '
        "has 10 pods and slices of 4 leave 2 pods gated forever on Kueue before v0.20 (kueue #15277; "
        "--kueue-version is 0.17) (rule target-cannot-express); fix: a segment size dividing 10 (2, 5, 10), or "
        "target kai, or --kueue-version 0.20 on Kueue v0.20+.")
    d = run(job(completions=10), AdmissionSettings())
    assert d.allowed and "10 completions / segment size 4: last segment has 2 pods" in d.warnings


def test_preferred_segment_level_only_is_warned_and_not_sliced():
    obj = job(seg_req=None, **{SEG_PREF: RACK})
    d = run(obj)
    assert d.allowed
    assert f"target kueue: segment preferred {RACK}: not enforced (Kueue slices are required only)" in d.warnings
    got = template_annotations(obj, d, "spec", "template")
    assert K_SLICE not in got and K_SIZE not in got and got[K_REQ] == BLOCK


def test_workload_preferred_level_becomes_podset_preferred():
    obj = job(wl_req=None)
    obj["metadata"]["annotations"][WL_PREF] = BLOCK
    d = run(obj)
    got = template_annotations(obj, d, "spec", "template")
    assert got[K_PREF] == BLOCK and K_REQ not in got and got[K_SLICE] == RACK


def test_slice_level_broader_than_the_preferred_podset_level_is_denied():
    obj = job(wl_req=None, seg_req=BLOCK)
    obj["metadata"]["annotations"][WL_PREF] = RACK
    d = run(obj)
    assert [v.rule for v in d.violations] == ["target-cannot-express"]
    assert "Kueue never admits a slice level broader than the PodSet's level" in d.message


@pytest.mark.parametrize("key,value", [(K_REQ, ZONE), ("kueue.x-k8s.io/podset-unconstrained-topology", "false")])
def test_user_kueue_annotation_that_disagrees_is_denied(key, value):
    d = run(job(**{key: value}))
    assert [v.rule for v in d.violations] == ["target-cannot-express"]
    assert f'spec.template.metadata.annotations["{key}"]' in d.message or key in d.message


def test_user_kueue_annotation_that_agrees_is_kept():
    d = run(job(**{K_SLICE: RACK, K_SIZE: "4"}))
    assert d.allowed, d.message


K_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"


def kueue_started(stored: dict, gate: bool = True) -> dict:
    """``stored`` (a suspended Job as admitted under target kueue) as Kueue's job reconciler sends it
    when it starts the job after admitting its Workload with a topology assignment whose PodSet asked
    for slices only: kueue v0.17 ``pkg/podset/podset.go`` ``FromAssignment`` merges the annotation
    ``podset-unconstrained-topology: "true"``, the ``kueue.x-k8s.io/topology`` scheduling gate and the
    flavor's node labels into the template, and ``spec.suspend`` becomes false."""
    import copy

    started = copy.deepcopy(stored)
    template = started["spec"]["template"]
    template["metadata"]["annotations"][K_UNCONSTRAINED] = "true"
    template["spec"]["nodeSelector"] = {"node-group": "gpu"}
    if gate:
        template["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    started["spec"]["suspend"] = False
    return started


def test_kueue_starting_an_admitted_slice_only_job_is_allowed():
    """Issue 36: the trace's 3 Jobs with a segment level and no gang level were admitted by Kueue
    and never started: the webhook denied Kueue's own UPDATE (rule target-cannot-express) and the
    Job stayed suspended. The webhook writes only the slice keys for them (no PodSet level)."""
    obj = job(wl_req=None)
    obj["spec"]["suspend"] = True
    created = run(obj)
    assert created.allowed, created.message
    stored = jsonpatch.apply_patch(obj, created.patch)
    assert {k: v for k, v in stored["spec"]["template"]["metadata"]["annotations"].items()
            if k.startswith("kueue.x-k8s.io/")} == {K_SLICE: RACK, K_SIZE: "4"}
    started = kueue_started(stored)
    d = run(started, operation="UPDATE", old=stored, user="system:serviceaccount:kueue-system:kueue-controller-manager")
    assert d.allowed, d.message
    assert K_UNCONSTRAINED in template_annotations(started, d, "spec", "template")
    # without Kueue's gate it is a user's key, and it still disagrees: Kueue would read the PodSet
    # level as the lowest one, below the slices, and never admit
    user = run(kueue_started(stored, gate=False), operation="UPDATE", old=stored)
    assert [v.rule for v in user.violations] == ["target-cannot-express"]
    assert f"annotations[{K_UNCONSTRAINED}] = \"true\"" in user.message
    # with a gang level the webhook writes podset-required-topology: Kueue injects nothing, and
    # the key, if there, disagrees
    levelled = jsonpatch.apply_patch(job(), run(job()).patch)
    assert [v.rule for v in run(kueue_started(levelled), operation="UPDATE", old=levelled).violations] == [
        "target-cannot-express"]


def test_unknown_target_label_is_denied_and_gate_needs_gate_pods():
    d = run(job(labels={TARGET: "volcano"}))
    assert [v.rule for v in d.violations] == ["target-unknown"]
    assert "not a target this webhook serves (kai, kueue)" in d.message
    assert [v.rule for v in run(job(labels={TARGET: "gate"})).violations] == ["target-unknown"]
    assert run(job(labels={TARGET: "gate"}), AdmissionSettings(gate_pods=True)).allowed


def test_default_and_served_targets():
    assert default_target(AdmissionSettings()) == "kai"
    assert default_target(AdmissionSettings(gate_pods=True)) == "gate"
    assert default_target(KUEUE) == "kueue"
    assert served_targets(AdmissionSettings()) == ("kai", "kueue")
    assert served_targets(AdmissionSettings(target="workload-api")) == ("kai", "kueue", "workload-api")


def pytorchjob(workers=8, size="4", master=True):
    specs = {"Worker": {"replicas": workers, "template": {
        "metadata": {"annotations": {SIZE: size, SEG_REQ: RACK}}, "spec": {"containers": [{"name": "w", "image": "i"}]}}}}
    if master:
        specs["Master"] = {"replicas": 1, "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "default",
                         "annotations": {TOPO: "cluster-topology", WL_REQ: BLOCK}},
            "spec": {"pytorchReplicaSpecs": specs}}


def test_pytorchjob_worker_podset_is_sliced_and_the_master_warned():
    obj = pytorchjob()
    d = run(obj)
    got = template_annotations(obj, d, "spec", "pytorchReplicaSpecs", "Worker", "template")
    assert (got[K_REQ], got[K_SLICE], got[K_SIZE]) == (BLOCK, RACK, "4")
    assert f"target kueue: the Master is its own PodSet, not held in the workers' {BLOCK} domain" in d.warnings
    master = template_annotations(obj, d, "spec", "pytorchReplicaSpecs", "Master", "template")
    assert K_REQ not in master


def lws(size=5, s="2", policy=None, leader_template=True):
    lwt = {"size": size, "workerTemplate": {"metadata": {"annotations": {SIZE: s, SEG_REQ: RACK}},
                                            "spec": {"containers": [{"name": "w", "image": "i"}]}}}
    if policy:
        lwt["subGroupPolicy"] = {"subGroupPolicyType": policy}
    if leader_template:
        lwt["leaderTemplate"] = {"spec": {"containers": [{"name": "l", "image": "i"}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws", "namespace": "default", "annotations": {TOPO: "cluster-topology"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": lwt}}


def test_lws_leader_worker_with_leader_template():
    # R=5, S=2: ours {L,1,2} {3,4}; Kueue's worker PodSet (4 pods, rank w-1) slices {1,2} {3,4}
    d = run(lws())
    assert d.allowed, d.message
    assert "target kueue: the LWS leader is its own PodSet: Kueue does not hold it in segment 0's domain" in d.warnings
    # R=4, S=2: the worker PodSet has 3 pods: a partial slice
    d = run(lws(size=4))
    assert [v.rule for v in d.violations] == ["target-cannot-express"]
    assert "Kueue's PodSet has 3 pods" in d.message


def test_lws_without_leader_template_is_one_podset():
    # R=4, S=2, no leaderTemplate: one PodSet of 4 ranked by worker-index: {L,1} {2,3} as ours
    d = run(lws(size=4, leader_template=False))
    assert d.allowed, d.message
    assert not [w for w in d.warnings if w.startswith("target kueue")]


def test_distributedworkload_has_no_kueue_integration(load_example):
    d = run(load_example("distributedworkload-native.yaml"),
            AdmissionSettings(target="kueue", default_topology="cluster-topology"))
    assert "target-cannot-express" in [v.rule for v in d.violations]
    assert "Kueue v0.17 has no integration for DistributedWorkload" in d.message


def test_non_indexed_or_waves_job_is_denied_whatever_the_target():
    for settings in (AdmissionSettings(), KUEUE):
        d = run(job(mode="NonIndexed"), settings)
        assert [v.rule for v in d.violations] == ["job-segments-need-indexed"]
        d = run(job(completions=8, parallelism=4), settings)
        assert [v.rule for v in d.violations] == ["job-segments-need-indexed"]
        assert "parallelism 4 ≠ completions 8" in d.message


def test_workload_api_warns_about_preferred_levels():
    obj = job(seg_req=None, **{SEG_PREF: RACK})
    d = run(obj, AdmissionSettings(target="workload-api"))
    assert d.allowed
    assert f"target workload-api: segment preferred {RACK}: not enforced (required constraints only)" in d.warnings
    assert template_annotations(obj, d, "spec", "template")[TARGET] == "workload-api"


def pod(annotations, index="5"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "seg-5", "namespace": "default", "annotations": annotations,
                         "labels": {"batch.kubernetes.io/job-name": "seg", "job-name": "seg",
                                    "batch.kubernetes.io/job-completion-index": index}},
            "spec": {"containers": [{"name": "w", "image": "i"}]}}


def test_job_pod_segment_index_and_gate_by_target():
    template = {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK, "segments.dev/gang-size": "8"}
    gating = AdmissionSettings(gate_pods=True)
    d = review(make_request(pod(template)), CATALOG, gating)
    ops = {op["path"]: op["value"] for op in d.patch}
    assert ops["/metadata/labels/kai.scheduler~1segment-index"] == "1"  # completion index 5 // 4
    assert any(p.startswith("/spec/schedulingGates") for p in ops)
    d = review(make_request(pod({**template, TARGET: "kueue"})), CATALOG, gating)
    assert not [op for op in d.patch if op["path"].startswith("/spec/schedulingGates")]
    assert {op["path"]: op["value"] for op in d.patch}["/metadata/labels/kai.scheduler~1segment-index"] == "1"


def test_workload_api_objects_of_a_gang_with_a_partial_segment_and_a_master():
    from webhook.admission.workload_api import gang_object_name, gang_objects, pod_operations

    assert gang_object_name("team-a/llama/0") == "llama-0"
    workload, composite, *groups = gang_objects("team-a", "llama", [4, 4, 2], 1, BLOCK, RACK)
    assert workload == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "llama", "namespace": "team-a"},
        "spec": {"compositePodGroupTemplates": [{
            "name": "gang", "schedulingPolicy": {"gang": {"minGroupCount": 4}},
            "schedulingConstraints": {"topology": [{"key": BLOCK}]},
            "podGroupTemplates": [
                {"name": "segment", "schedulingPolicy": {"gang": {"minCount": 4}},
                 "schedulingConstraints": {"topology": [{"key": RACK}]}},
                {"name": "other", "schedulingPolicy": {"gang": {"minCount": 1}}}]}]}}
    assert composite == {
        "apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
        "metadata": {"name": "llama", "namespace": "team-a"},
        "spec": {"workloadRef": {"workloadName": "llama", "templateName": "gang"},
                 "schedulingPolicy": {"gang": {"minGroupCount": 4}},
                 "schedulingConstraints": {"topology": [{"key": BLOCK}]}}}
    assert [(g["metadata"]["name"], g["spec"]["schedulingPolicy"]["gang"]["minCount"],
             g["spec"].get("schedulingConstraints")) for g in groups] == [
        ("llama-segment-0", 4, {"topology": [{"key": RACK}]}),
        ("llama-segment-1", 4, {"topology": [{"key": RACK}]}),
        ("llama-segment-2", 2, {"topology": [{"key": RACK}]}),
        ("llama-other", 1, None)]
    assert all(g["spec"]["parentCompositePodGroupName"] == "llama" for g in groups)
    assert groups[0]["spec"]["workloadRef"] == {"workloadName": "llama", "templateName": "segment"}
    assert pod_operations("llama-segment-1") == [
        {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "llama-segment-1"}}]


def _owned(obj, api_version, kind, controller=True):
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": "owner",
                                           "uid": "u-1", "controller": controller}]
    return obj


def test_a_job_of_a_jobset_is_reviewed_through_its_jobset():
    """A JobSet's Job carries the keys written on the JobSet (DESIGN.md §3b); its parallelism (2)
    is one Job of the JobSet, not the workload: never denied as 'segment size 4 > 2 completions'."""
    child = _owned(job(completions=2), "jobset.x-k8s.io/v1alpha2", "JobSet")
    decision = run(child, settings=AdmissionSettings())
    assert decision.allowed and decision.patch == [] and decision.warnings == []


def test_a_job_owned_by_another_controller_is_still_reviewed():
    """A CronJob's Job (or a JobSet reference that is not the controller) is the webhook's own."""
    for child in (_owned(job(completions=2), "batch/v1", "CronJob"),
                  _owned(job(completions=2), "jobset.x-k8s.io/v1alpha2", "JobSet", controller=False)):
        decision = run(child, settings=AdmissionSettings())
        assert not decision.allowed
        assert "kai.scheduler/segment-size" in decision.message
