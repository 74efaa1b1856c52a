"""Workload validation and resolution (DESIGN.md §3–§6) through webhook.admission.review.

Rule ids, field paths, codes and resolved values are stated literally from DESIGN.md and the
task's decisions.
"""

from __future__ import annotations

import jsonpatch
import pytest

from tests.conftest import POLICY, SEG_PREF, SEG_REQ, SIZE, TOPO, WL_PREF, WL_REQ, UnsyncedCatalog, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.topology.objects import StaticTopologyCatalog, Topology

ZONE = "topology.kubernetes.io/zone"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
LEVELS_TEXT = "topology.kubernetes.io/zone, cloud.provider.com/topology-block, cloud.provider.com/topology-rack, kubernetes.io/hostname"

W_ANN = 'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations'
W_SIZE = f'{W_ANN}["kai.scheduler/segment-size"]'
PLAIN = AdmissionSettings()
PLATFORM = AdmissionSettings(platform_users=frozenset({"system:serviceaccount:runai:workload-controller"}),
                             platform_groups=frozenset({"runai:platform"}), default_topology="cluster-topology")
PLATFORM_USER = "system:serviceaccount:runai:workload-controller"


def pytorchjob(worker=None, root=None, replicas=16, master=None, suspend=None):
    worker_tmpl: dict = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}
    if worker is not None:
        worker_tmpl["metadata"] = {"annotations": dict(worker)}
    # The Master template already carries the label the webhook gives it when the job is
    # segmented (tested in test_core_examples.py), so these tests see only the Worker's patch.
    master_tmpl: dict = {"metadata": {"labels": {"kai.scheduler/subgroup-name": "master"}},
                         "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}
    if master is not None:
        master_tmpl["metadata"]["annotations"] = dict(master)
    obj: dict = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                 "metadata": {"name": "job", "namespace": "team-a"},
                 "spec": {"pytorchReplicaSpecs": {
                     "Master": {"replicas": 1, "template": master_tmpl},
                     "Worker": {"replicas": replicas, "template": worker_tmpl}}}}
    if root is not None:
        obj["metadata"]["annotations"] = dict(root)
    if suspend is not None:
        obj["spec"]["runPolicy"] = {"suspend": suspend}
    return obj


def lws(worker=None, root=None, size=5, sub_size=None, policy=None, leader=None, leader_template=True):
    obj: dict = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                 "metadata": {"name": "lws", "namespace": "team-a"},
                 "spec": {"replicas": 1, "leaderWorkerTemplate": {
                     "size": size,
                     "workerTemplate": {"spec": {"containers": [{"name": "w", "image": "i"}]}}}}}
    lwt = obj["spec"]["leaderWorkerTemplate"]
    if worker is not None:
        lwt["workerTemplate"]["metadata"] = {"annotations": dict(worker)}
    if leader_template:
        lwt["leaderTemplate"] = {"spec": {"containers": [{"name": "l", "image": "i"}]}}
        if leader is not None:
            lwt["leaderTemplate"]["metadata"] = {"annotations": dict(leader)}
    if sub_size is not None or policy is not None:
        lwt["subGroupPolicy"] = {}
        if sub_size is not None:
            lwt["subGroupPolicy"]["subGroupSize"] = sub_size
        if policy is not None:
            lwt["subGroupPolicy"]["subGroupPolicyType"] = policy
    if root is not None:
        obj["metadata"]["annotations"] = dict(root)
    return obj


def native(workers=32, per_segment=8, framework="PyTorch", worker=None, root=None):
    obj: dict = {"apiVersion": "segments.dev/v1alpha1", "kind": "DistributedWorkload",
                 "metadata": {"name": "dw", "namespace": "team-a"},
                 "spec": {"framework": framework, "workers": workers,
                          "worker": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}
    if per_segment is not None:
        obj["spec"]["workersPerSegment"] = per_segment
    if worker is not None:
        obj["spec"]["worker"]["template"]["metadata"] = {"annotations": dict(worker)}
    if root is not None:
        obj["metadata"]["annotations"] = dict(root)
    return obj


def run(obj, catalog, settings=PLAIN, **kw):
    return review(make_request(obj, **kw), catalog, settings)


def rules(decision):
    return [v.rule for v in decision.violations]


def patched(obj, decision):
    return jsonpatch.JsonPatch(decision.patch).apply(obj, in_place=False)


# ----------------------------------------------------------------------------- segment size

@pytest.mark.parametrize("value", ["4x", "-1", "1e3", " 4", ""])
def test_segment_size_not_plain_integer_is_denied(value, example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: value}), example_catalog)
    assert not d.allowed and d.code == 403
    assert rules(d) == ["segment-size-not-integer"]
    v = d.violations[0]
    assert v.field == W_SIZE
    assert W_SIZE in d.message
    assert f'= "{value}"' in d.message  # the value is quoted, so " 4" and "" are visible
    assert "segment-size-not-integer" in d.message and "fix:" in d.message
    assert d.patch == []


@pytest.mark.parametrize("value", ["1", "0"])
def test_segment_size_at_most_1_is_denied(value, example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: value}), example_catalog)
    assert rules(d) == ["segment-size-too-small"]
    assert d.violations[0].field == W_SIZE


def test_segment_size_above_workers_is_denied(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "5"}, replicas=4), example_catalog)
    assert rules(d) == ["segment-size-exceeds-replicas"]
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in d.message and "4 Worker replicas" in d.message


def test_segment_size_equal_to_workers_is_allowed(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, replicas=4), example_catalog)
    assert d.allowed and d.warnings == []


def test_worker_replicas_default_to_1(example_catalog):
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "2"})
    del obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    assert rules(run(obj, example_catalog)) == ["segment-size-exceeds-replicas"]


def test_more_than_10000_segments_is_denied(example_catalog):
    assert rules(run(pytorchjob({TOPO: "cluster-topology", SIZE: "2"}, replicas=20001), example_catalog)) == ["too-many-segments"]
    assert run(pytorchjob({TOPO: "cluster-topology", SIZE: "2"}, replicas=20000), example_catalog).allowed


def test_partial_last_segment_is_a_warning(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, replicas=10), example_catalog)
    assert d.allowed
    assert d.warnings == ["10 Worker replicas / segment size 4: last segment has 2 pods"]


def test_root_segment_size_is_inherited(example_catalog):
    d = run(pytorchjob(worker={}, root={TOPO: "cluster-topology", SIZE: "4"}), example_catalog)
    assert d.allowed
    assert patched(pytorchjob(worker={}, root={TOPO: "cluster-topology", SIZE: "4"}), d)[
        "spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] == {TOPO: "cluster-topology", SIZE: "4"}


def test_template_segment_size_beats_root(example_catalog):
    obj = pytorchjob({SIZE: "4"}, root={TOPO: "cluster-topology", SIZE: "8"})
    ann = patched(obj, run(obj, example_catalog))["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert ann[SIZE] == "4"


def test_leading_zero_size_is_canonicalised(example_catalog):
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "04"})
    d = run(obj, example_catalog)
    assert d.patch == [{"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/template/metadata/annotations/kai.scheduler~1segment-size", "value": "4"}]


def test_not_segmented_gives_empty_patch(example_catalog):
    d = run(pytorchjob(root={TOPO: "cluster-topology", WL_REQ: ZONE}), example_catalog)
    assert d.allowed and d.patch == [] and d.warnings == []


def test_segment_levels_without_size_warn(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SEG_REQ: RACK}), example_catalog)
    assert d.allowed and d.patch == []
    assert d.warnings == ["segment placement ignored: no kai.scheduler/segment-size is set"]


# ----------------------------------------------------------------------------- topology and levels

def test_placement_without_topology_is_denied(example_catalog):
    d = run(pytorchjob({SIZE: "4", SEG_REQ: RACK}), example_catalog)
    assert rules(d) == ["placement-without-topology"]
    assert d.violations[0].field == f'{W_ANN}["{SEG_REQ}"]'
    assert 'set kai.scheduler/topology' in d.message and "metadata.annotations" in d.message


def test_workload_placement_without_topology_is_denied(example_catalog):
    d = run(pytorchjob(root={WL_REQ: ZONE}), example_catalog)
    assert rules(d) == ["placement-without-topology"]
    assert d.violations[0].field == 'metadata.annotations["kai.scheduler/topology-required-placement"]'


def test_invalid_level_is_denied(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: "not a label!"}), example_catalog)
    assert rules(d) == ["invalid-level"]
    assert '"not a label!"' in d.message


def test_unknown_level_lists_the_topology_levels(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: "example.com/pod-slice"}), example_catalog)
    assert rules(d) == ["unknown-level"]
    assert LEVELS_TEXT in d.message


def test_unknown_topology_is_denied_when_synced(example_catalog):
    d = run(pytorchjob({TOPO: "other-topology", SIZE: "4", SEG_REQ: RACK}), example_catalog)
    assert rules(d) == ["unknown-topology"]
    assert d.violations[0].field == f'{W_ANN}["kai.scheduler/topology"]'
    assert "use one of: cluster-topology" in d.message


def test_unknown_topology_is_allowed_with_warning_when_not_synced():
    d = run(pytorchjob({TOPO: "other-topology", SIZE: "4", SEG_REQ: "example.com/pod-slice"}), UnsyncedCatalog())
    assert d.allowed
    assert d.warnings == ['topology "other-topology" not loaded yet; levels not checked']


def test_not_synced_still_checks_label_key_syntax():
    d = run(pytorchjob({TOPO: "other-topology", SIZE: "4", SEG_REQ: "Bad Level"}), UnsyncedCatalog())
    assert rules(d) == ["invalid-level"]


def test_not_synced_but_known_topology_checks_levels():
    catalog = UnsyncedCatalog((Topology("cluster-topology", (ZONE, RACK, HOST)),))
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: BLOCK}), catalog)
    assert rules(d) == ["unknown-level"]


def test_invalid_topology_name_is_denied(example_catalog):
    d = run(pytorchjob({TOPO: "", SIZE: "4"}), example_catalog)
    assert rules(d) == ["invalid-topology-name"]


TWO_TOPOLOGIES = StaticTopologyCatalog((Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST)),
                                        Topology("other", ("x.io/a", "x.io/b"))))


def test_template_topology_beats_root():
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK}, root={TOPO: "other"})
    d = run(obj, TWO_TOPOLOGIES)
    # the seed: "If it is set in both places, the segment-based (PodTemplate) value takes precedence"
    assert d.allowed and d.patch == []
    assert d.warnings == ['root kai.scheduler/topology="other" overridden by template']


def test_overridden_root_topology_must_still_exist(example_catalog):
    # a root name that the template overrides is still the user's input: a typo is denied, not dropped
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, root={TOPO: "nope"}), example_catalog)
    assert rules(d) == ["unknown-topology"]
    assert d.violations[0].field == 'metadata.annotations["kai.scheduler/topology"]'
    assert "use one of: cluster-topology" in d.message


def test_workload_level_of_another_topology_than_the_segments_is_denied():
    obj = pytorchjob({TOPO: "other", SIZE: "4", SEG_REQ: "x.io/b"}, root={TOPO: "cluster-topology", WL_REQ: ZONE})
    d = run(obj, TWO_TOPOLOGIES)
    assert rules(d) == ["conflicting-topology"]
    assert d.violations[0].field == 'metadata.annotations["kai.scheduler/topology-required-placement"]'
    assert '"cluster-topology"' in d.message and '"other"' in d.message


@pytest.mark.parametrize("req, pref, ok", [(RACK, ZONE, False), (RACK, BLOCK, False), (RACK, RACK, True), (RACK, HOST, True)])
def test_segment_preferred_broader_than_required(req, pref, ok, example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: req, SEG_PREF: pref}), example_catalog)
    assert d.allowed is ok
    if not ok:
        assert rules(d) == ["preferred-broader-than-required"]
        assert d.violations[0].field == f'{W_ANN}["{SEG_PREF}"]'


def test_workload_preferred_broader_than_required(example_catalog):
    d = run(pytorchjob(root={TOPO: "cluster-topology", WL_REQ: RACK, WL_PREF: ZONE}), example_catalog)
    assert rules(d) == ["preferred-broader-than-required"]
    assert d.violations[0].field == 'metadata.annotations["kai.scheduler/topology-preferred-placement"]'


def test_segment_required_broader_than_workload_required(example_catalog):
    d = run(pytorchjob({SIZE: "4", SEG_REQ: ZONE}, root={TOPO: "cluster-topology", WL_REQ: RACK}), example_catalog)
    assert rules(d) == ["segment-required-broader-than-workload"]
    assert d.violations[0].field == f'{W_ANN}["{SEG_REQ}"]'


def test_all_errors_are_reported_together(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4x", SEG_REQ: "example.com/x"},
                       root={WL_REQ: "bad key!"}), example_catalog)
    assert sorted(rules(d)) == ["invalid-level", "segment-size-not-integer", "unknown-level"]
    assert d.message.startswith("3 problems: (1) ")


# ----------------------------------------------------------------------------- malformed objects

@pytest.mark.parametrize("mutate, field", [
    (lambda o: o.__setitem__("spec", "oops"), "spec"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].__setitem__("replicas", "16"), "spec.pytorchReplicaSpecs.Worker.replicas"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].__setitem__("replicas", True), "spec.pytorchReplicaSpecs.Worker.replicas"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].__setitem__("replicas", -1), "spec.pytorchReplicaSpecs.Worker.replicas"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].__setitem__("template", []), "spec.pytorchReplicaSpecs.Worker.template"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"].__setitem__("annotations", ["x"]), W_ANN),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"].__setitem__(SIZE, 4), W_SIZE),
    (lambda o: o["metadata"].__setitem__("annotations", {TOPO: None}), 'metadata.annotations["kai.scheduler/topology"]'),
    (lambda o: o.__setitem__("metadata", 7), "metadata"),
    (lambda o: o["spec"].__setitem__("pytorchReplicaSpecs", None), "spec.pytorchReplicaSpecs"),
])
def test_malformed_pytorchjob_is_400_naming_the_field(mutate, field, example_catalog):
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, root={WL_REQ: ZONE})
    mutate(obj)
    d = run(obj, example_catalog)
    assert not d.allowed and d.code == 400
    assert "malformed-object" in rules(d)
    assert field in [v.field for v in d.violations]


def test_object_not_a_mapping_is_400(example_catalog):
    req = make_request(pytorchjob())
    req["object"] = "nope"
    d = review(req, example_catalog, PLAIN)
    assert d.code == 400 and rules(d) == ["malformed-object"]


# ----------------------------------------------------------------------------- automatic mode (§6)

def test_automatic_pytorchjob_for_platform_user(example_catalog):
    obj = pytorchjob({SIZE: "4"})
    d = run(obj, example_catalog, PLATFORM, user=PLATFORM_USER)
    out = patched(obj, d)
    assert out["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] == {
        SIZE: "4", TOPO: "cluster-topology", SEG_PREF: HOST}
    assert out["metadata"]["annotations"] == {TOPO: "cluster-topology", WL_PREF: HOST}


def test_automatic_pytorchjob_for_platform_group(example_catalog):
    obj = pytorchjob({SIZE: "4"})
    d = run(obj, example_catalog, PLATFORM, user="bob", groups=["runai:platform"])
    assert patched(obj, d)["metadata"]["annotations"][WL_PREF] == HOST


def test_no_automatic_placement_for_kubectl_users(example_catalog):
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "4"})
    d = run(obj, example_catalog, PLATFORM, user="alice", groups=["system:authenticated"])
    assert d.allowed and d.patch == []


def test_kubectl_user_without_topology_has_no_default(example_catalog):
    d = run(pytorchjob({SIZE: "4"}), example_catalog, PLATFORM, user="alice")
    assert d.allowed
    assert d.patch == []


def test_automatic_respects_user_segment_scope(example_catalog):
    obj = pytorchjob({SIZE: "4", SEG_REQ: RACK})
    out = patched(obj, run(obj, example_catalog, PLATFORM, user=PLATFORM_USER))
    ann = out["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert ann == {SIZE: "4", SEG_REQ: RACK, TOPO: "cluster-topology"}  # no automatic segment preferred
    assert out["metadata"]["annotations"][WL_PREF] == HOST


def test_automatic_respects_user_workload_scope(example_catalog):
    obj = pytorchjob({SIZE: "4"}, root={TOPO: "cluster-topology", WL_REQ: ZONE})
    out = patched(obj, run(obj, example_catalog, PLATFORM, user=PLATFORM_USER))
    assert out["metadata"]["annotations"] == {TOPO: "cluster-topology", WL_REQ: ZONE}
    assert out["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SEG_PREF] == HOST


def test_automatic_needs_a_resolved_segment_size(example_catalog):
    d = run(pytorchjob({}), example_catalog, PLATFORM, user=PLATFORM_USER)
    assert d.allowed and d.patch == []


def test_automatic_never_applies_to_lws(example_catalog):
    obj = lws({SIZE: "2"}, root={TOPO: "cluster-topology"})
    out = patched(obj, run(obj, example_catalog, PLATFORM, user=PLATFORM_USER))
    assert out["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"] == {
        SIZE: "2", TOPO: "cluster-topology", POLICY: "LeaderWorker"}
    assert WL_PREF not in out["metadata"]["annotations"]


def test_automatic_without_any_topology_warns(example_catalog):
    d = run(native(), example_catalog, PLAIN)
    assert d.allowed
    assert "automatic segment placement skipped: no kai.scheduler/topology and no default topology" in d.warnings


def test_automatic_with_missing_default_topology_warns(example_catalog):
    d = run(native(), example_catalog, AdmissionSettings(default_topology="nope"))
    assert d.allowed
    assert d.warnings == ['automatic segment placement skipped: default topology "nope" not found',
                          "kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for segments; "
                          "set it in metadata.annotations"]
    assert d.patch == []  # DESIGN.md §5 "Segments without a topology": no segment keys written


# ----------------------------------------------------------------------------- UPDATE (§5)

def test_update_changing_segment_size_is_denied(example_catalog):
    old = pytorchjob({TOPO: "cluster-topology", SIZE: "4"})
    new = pytorchjob({TOPO: "cluster-topology", SIZE: "8"})
    d = run(new, example_catalog, operation="UPDATE", old=old)
    assert rules(d) == ["immutable-field"]
    assert d.violations[0].field == W_SIZE
    assert 'was "4"' in d.message


def test_update_changing_topology_or_levels_is_denied(example_catalog):
    old = pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK})
    new = pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: BLOCK})
    assert rules(run(new, example_catalog, operation="UPDATE", old=old)) == ["immutable-field"]
    new2 = pytorchjob({SIZE: "4", SEG_REQ: RACK}, root={TOPO: "cluster-topology"})
    assert run(new2, example_catalog, operation="UPDATE", old=old).allowed  # same resolved name
    new3 = pytorchjob({SIZE: "4", SEG_REQ: RACK})
    assert "immutable-field" in rules(run(new3, example_catalog, operation="UPDATE", old=old))


def test_update_adding_segments_to_existing_workload_is_denied(example_catalog):
    old = pytorchjob({TOPO: "cluster-topology"})
    new = pytorchjob({TOPO: "cluster-topology", SIZE: "4"})
    assert rules(run(new, example_catalog, operation="UPDATE", old=old)) == ["immutable-field"]


def test_update_of_suspended_pytorchjob_is_allowed(example_catalog):
    old = pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, suspend=True)
    new = pytorchjob({TOPO: "cluster-topology", SIZE: "8"}, suspend=True)
    d = run(new, example_catalog, operation="UPDATE", old=old)
    assert d.allowed and d.patch == []


def test_update_of_other_fields_is_allowed(example_catalog):
    old = pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, replicas=16)
    new = pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, replicas=20)
    d = run(new, example_catalog, operation="UPDATE", old=old)
    assert d.allowed and d.patch == []


def test_update_lws_segment_size_is_denied(example_catalog):
    old = lws({TOPO: "cluster-topology"}, sub_size=2)
    new = lws({TOPO: "cluster-topology", SIZE: "4"}, sub_size=2, size=8)
    d = run(new, example_catalog, operation="UPDATE", old=old)
    assert rules(d) == ["immutable-field"]


def test_status_subresource_and_delete_are_ignored(example_catalog):
    bad = pytorchjob({SIZE: "4x"})
    assert run(bad, example_catalog, operation="UPDATE", old=bad, sub_resource="status").allowed
    assert review(make_request(None, operation="DELETE", old=bad), example_catalog, PLAIN).allowed


# ----------------------------------------------------------------------------- PyTorchJob Master

def test_master_segment_keys_are_ignored_with_warning(example_catalog):
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, master={SIZE: "2", SEG_REQ: RACK})
    d = run(obj, example_catalog)
    assert d.allowed and d.patch == []
    assert d.warnings == [f"{SIZE} on the Master template ignored (never segmented)",
                          f"{SEG_REQ} on the Master template ignored (never segmented)"]


def test_pytorchjob_without_worker_ignores_root_segment_size(example_catalog):
    obj = pytorchjob(root={TOPO: "cluster-topology", SIZE: "4"})
    del obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    d = run(obj, example_catalog)
    assert d.allowed and d.patch == []
    assert d.warnings == [f"PyTorchJob has no worker template: {SIZE} ignored"]


# ----------------------------------------------------------------------------- LeaderWorkerSet

LWS_W = "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations"


def lws_ann(obj, decision, template="workerTemplate"):
    return patched(obj, decision)["spec"]["leaderWorkerTemplate"][template]["metadata"]["annotations"]


def test_lws_annotation_overrides_subgroup_size(example_catalog):
    obj = lws({TOPO: "cluster-topology", SIZE: "4"}, size=8, sub_size=2)
    d = run(obj, example_catalog)
    assert d.allowed
    assert d.warnings == ["subGroupSize 2 set to 4 (kai.scheduler/segment-size wins)"]
    assert lws_ann(obj, d)[SIZE] == "4"
    assert patched(obj, d)["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupSize"] == 4


def test_lws_leader_excluded_divisibility(example_catalog):
    d = run(lws({TOPO: "cluster-topology"}, size=6, sub_size=2, policy="LeaderExcluded"), example_catalog)
    assert rules(d) == ["lws-leader-excluded-divisibility"]
    assert d.violations[0].field == "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"


def test_lws_leader_excluded_exceeds_size_minus_1(example_catalog):
    d = run(lws({TOPO: "cluster-topology", SIZE: "5"}, size=5, policy="LeaderExcluded"), example_catalog)
    assert rules(d) == ["segment-size-exceeds-replicas"]
    assert d.violations[0].field == f'{LWS_W}["kai.scheduler/segment-size"]'


def test_lws_leader_worker_size_is_the_limit(example_catalog):
    assert run(lws({TOPO: "cluster-topology", SIZE: "5"}, size=5), example_catalog).allowed
    assert rules(run(lws({TOPO: "cluster-topology", SIZE: "6"}, size=5), example_catalog)) == ["segment-size-exceeds-replicas"]


def test_lws_leader_excluded_leader_template_gets_policy_and_topology_only(example_catalog):
    obj = lws({TOPO: "cluster-topology", SEG_REQ: RACK}, size=5, sub_size=2, policy="LeaderExcluded")
    d = run(obj, example_catalog)
    assert d.allowed
    assert lws_ann(obj, d) == {TOPO: "cluster-topology", SEG_REQ: RACK, SIZE: "2", POLICY: "LeaderExcluded"}
    assert lws_ann(obj, d, "leaderTemplate") == {TOPO: "cluster-topology", POLICY: "LeaderExcluded"}


def test_lws_leader_excluded_user_segment_keys_on_leader_warn(example_catalog):
    obj = lws({TOPO: "cluster-topology"}, size=5, sub_size=2, policy="LeaderExcluded", leader={SIZE: "2"})
    d = run(obj, example_catalog)
    assert d.allowed
    assert d.warnings == [f"{SIZE} on the leaderTemplate ignored: leader excluded from segments"]
    assert lws_ann(obj, d, "leaderTemplate") == {SIZE: "2", TOPO: "cluster-topology", POLICY: "LeaderExcluded"}


def test_lws_leader_values_differing_from_worker_warn_and_are_overwritten(example_catalog):
    obj = lws({TOPO: "cluster-topology", SEG_REQ: RACK}, size=5, sub_size=2, leader={SEG_REQ: ZONE})
    d = run(obj, example_catalog)
    assert d.allowed
    assert d.warnings == [f"leaderTemplate {SEG_REQ} differs from workerTemplate; worker value wins"]
    assert lws_ann(obj, d, "leaderTemplate")[SEG_REQ] == RACK


def test_lws_without_leader_template(example_catalog):
    obj = lws({TOPO: "cluster-topology"}, size=4, sub_size=2, leader_template=False)
    d = run(obj, example_catalog)
    assert "leaderTemplate" not in patched(obj, d)["spec"]["leaderWorkerTemplate"]
    assert lws_ann(obj, d) == {TOPO: "cluster-topology", SIZE: "2", POLICY: "LeaderWorker"}


LEADER_READY_WARNING = ("startupPolicy LeaderReady: KAI cannot group the lone leader into a segment; "
                        "use startupPolicy: LeaderCreated")


def test_lws_leader_ready_with_segments_warns_without_gate_pods(example_catalog):
    # DESIGN.md §3b: the leader is created alone, KAI cannot group it; a warning naming LeaderCreated
    obj = lws({TOPO: "cluster-topology"}, size=5, sub_size=2)
    obj["spec"]["startupPolicy"] = "LeaderReady"
    d = run(obj, example_catalog)
    assert d.allowed and d.warnings == [LEADER_READY_WARNING]
    assert lws_ann(obj, d)[SIZE] == "2"


def test_lws_leader_ready_with_segments_is_denied_under_gate_pods(example_catalog):
    obj = lws({TOPO: "cluster-topology"}, size=5, sub_size=2)
    obj["spec"]["startupPolicy"] = "LeaderReady"
    d = run(obj, example_catalog, AdmissionSettings(gate_pods=True))
    assert rules(d) == ["lws-leader-ready-segments"] and d.code == 403
    assert d.violations[0].field == "spec.startupPolicy"
    assert d.message.startswith('spec.startupPolicy = "LeaderReady": ')
    assert "fix: set spec.startupPolicy: LeaderCreated" in d.message


GATE_DEADLOCK = ('spec.startupPolicy = "LeaderReady": under LeaderReady the leader is created alone: KAI cannot '
                 'group it into a segment of 2 and, with --gate-pods, its gang never completes (the workers wait '
                 'for the gated leader) (rule lws-leader-ready-segments); fix: set spec.startupPolicy: LeaderCreated '
                 '(the LWS default), or remove the segment keys.')
WLAPI_DEADLOCK = ('spec.startupPolicy = "LeaderReady": under LeaderReady the leader is created alone: KAI cannot '
                  'group it into a segment of 2 and, with target workload-api, its gang never completes '
                  '(kube-scheduler holds the leader until its PodGroup and the gang\'s pods exist; the workers wait '
                  'for the leader) (rule lws-leader-ready-segments); fix: set spec.startupPolicy: LeaderCreated '
                  '(the LWS default), or remove the segment keys.')
GATE_PODS = AdmissionSettings(gate_pods=True)
WLAPI_GATE_PODS = AdmissionSettings(target="workload-api", gate_pods=True)  # deploy/overlays/with-controller


@pytest.mark.parametrize(("settings", "label", "denial"), [
    (GATE_PODS, None, GATE_DEADLOCK),  # --gate-pods alone: target gate
    (GATE_PODS, "gate", GATE_DEADLOCK),
    (WLAPI_GATE_PODS, "gate", GATE_DEADLOCK),
    (GATE_PODS, "kueue", None),  # a kueue pod is never gated (§9b): Kueue admits the leader alone
    (GATE_PODS, "kai", None),
    (WLAPI_GATE_PODS, "kueue", None),
    # the serve's target workload-api: never gated, but kube-scheduler holds the lone leader (its
    # PodGroup is made once every pod of the gang exists, gangscheduling PreEnqueue): the same deadlock
    (WLAPI_GATE_PODS, None, WLAPI_DEADLOCK),
    (AdmissionSettings(target="workload-api"), None, WLAPI_DEADLOCK),
])
def test_lws_leader_ready_is_denied_only_under_a_target_whose_gang_waits_for_every_pod(
        settings, label, denial, example_catalog):
    """DESIGN.md §3b, §9b: the denial follows the object's resolved target, not ``--gate-pods``; the
    warning that KAI cannot group the lone leader is given under target kai only (under kueue,
    Kueue admits the leader alone and KAI is not the reader)."""
    obj = lws({TOPO: "cluster-topology"}, size=5, sub_size=2)
    obj["spec"]["startupPolicy"] = "LeaderReady"
    if label is not None:
        obj["metadata"]["labels"] = {"segments.dev/target": label}
    d = run(obj, example_catalog, settings)
    if denial is None:
        assert d.allowed and d.warnings == ([LEADER_READY_WARNING] if label == "kai" else [])
    else:
        assert rules(d) == ["lws-leader-ready-segments"] and d.code == 403
        assert d.message == denial


@pytest.mark.parametrize("startup", ["LeaderCreated", None])
def test_lws_leader_created_or_default_gets_no_startup_warning(startup, example_catalog):
    obj = lws({TOPO: "cluster-topology"}, size=5, sub_size=2)
    if startup:
        obj["spec"]["startupPolicy"] = startup
    d = run(obj, example_catalog, AdmissionSettings(gate_pods=True))
    assert d.allowed and d.warnings == []


def test_lws_leader_ready_without_segments_is_left_alone(example_catalog):
    # not the webhook's (opt-in, DESIGN.md §5): no key, no warning, whatever its startupPolicy
    obj = lws(size=5, sub_size=1)
    obj["spec"]["startupPolicy"] = "LeaderReady"
    d = run(obj, example_catalog, AdmissionSettings(gate_pods=True))
    assert d.allowed and d.warnings == [] and d.patch == []


def test_lws_unknown_policy_type_is_400(example_catalog):
    d = run(lws({TOPO: "cluster-topology"}, sub_size=2, policy="Sideways"), example_catalog)
    assert d.code == 400
    assert d.violations[0].field == "spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType"


def test_lws_without_segments_gives_empty_patch(example_catalog):
    d = run(lws({TOPO: "cluster-topology"}), example_catalog)
    assert d.allowed and d.patch == []


def test_lws_partial_segment_warns(example_catalog):
    # no subGroupSize: LWS labels no subgroups, KAI and the webhook both read the annotation
    d = run(lws({TOPO: "cluster-topology", SIZE: "4"}, size=7), example_catalog)
    assert d.allowed and d.warnings == ["size 7 / segment size 4: last segment has 3 pods"]


@pytest.mark.parametrize("kwargs", [
    {"size": 5, "sub_size": 2, "policy": "LeaderExcluded"},
    {"size": 5, "sub_size": 2, "leader": {SEG_REQ: ZONE}},
    {"size": 8, "sub_size": 2, "leader_template": False},
])
def test_lws_idempotent(kwargs, example_catalog):
    obj = lws({TOPO: "cluster-topology", SEG_REQ: RACK}, **kwargs)
    once = patched(obj, run(obj, example_catalog))
    assert run(once, example_catalog).patch == []


# ----------------------------------------------------------------------------- native kind

def test_native_framework_other_than_pytorch_is_denied(example_catalog):
    d = run(native(framework="TensorFlow"), example_catalog, PLATFORM)
    assert "native-framework-unsupported" in rules(d)
    assert d.violations[0].field == "spec.workersPerSegment"


def test_native_other_framework_without_segments_is_allowed(example_catalog):
    d = run(native(framework="JAX", per_segment=None), example_catalog, PLATFORM)
    assert d.allowed and d.patch == []


def test_native_disagreeing_annotation_is_overwritten(example_catalog):
    obj = native(worker={SIZE: "4"})
    d = run(obj, example_catalog, PLATFORM)
    assert d.allowed
    assert 'kai.scheduler/segment-size="4" disagrees with workersPerSegment=8; overwritten' in d.warnings
    assert patched(obj, d)["spec"]["worker"]["template"]["metadata"]["annotations"][SIZE] == "8"


def test_native_workers_per_segment_above_workers(example_catalog):
    d = run(native(workers=4, per_segment=8), example_catalog, PLATFORM)
    assert rules(d) == ["segment-size-exceeds-replicas"]
    assert d.violations[0].field == "spec.workersPerSegment"


def test_native_bad_framework_is_400(example_catalog):
    d = run(native(framework="Torch"), example_catalog, PLATFORM)
    assert d.code == 400 and d.violations[0].field == "spec.framework"


def test_native_user_segment_keys_win(example_catalog):
    obj = native(worker={SEG_PREF: RACK}, root={TOPO: "cluster-topology"})
    out = patched(obj, run(obj, example_catalog, PLATFORM))
    assert out["spec"]["worker"]["template"]["metadata"]["annotations"] == {
        SEG_PREF: RACK, TOPO: "cluster-topology", SIZE: "8", "segments.dev/kai-flat-gang": "true"}
    assert out["metadata"]["annotations"] == {TOPO: "cluster-topology", WL_PREF: HOST}


# ----------------------------------------------------------------------------- dispatch

def test_other_kinds_are_allowed_unchanged(example_catalog):
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"annotations": {SIZE: "4x"}}}
    d = run(obj, example_catalog)
    assert d.allowed and d.patch == [] and d.kind == "Deployment"


def test_dispatch_falls_back_to_object_api_version(example_catalog):
    req = make_request(pytorchjob({TOPO: "cluster-topology", SIZE: "4x"}))
    del req["kind"]
    assert rules(review(req, example_catalog, PLAIN)) == ["segment-size-not-integer"]


def test_request_kind_group_decides(example_catalog):
    obj = pytorchjob({SIZE: "4x"})
    req = make_request(obj)
    req["kind"] = {"group": "example.com", "version": "v1", "kind": "PyTorchJob"}
    assert review(req, example_catalog, PLAIN).allowed


def test_automatic_with_unsynced_unknown_topology_warns_and_writes_no_levels():
    obj = native(worker={TOPO: "cluster-topology"})
    d = run(obj, UnsyncedCatalog(), PLATFORM)
    assert d.allowed
    assert d.warnings == ['topology "cluster-topology" not loaded yet; levels not checked',
                          'automatic segment placement skipped: topology "cluster-topology" not loaded yet',
                          'KAI flattens pods DistributedWorkload owns: segments (size 8) not enforced; --gate-pods does']
    assert patched(obj, d)["spec"]["worker"]["template"]["metadata"]["annotations"] == {
        TOPO: "cluster-topology", SIZE: "8", "segments.dev/kai-flat-gang": "true"}


def test_update_with_the_unpatched_native_manifest_is_allowed(example_catalog):
    obj = native()
    stored = patched(obj, run(obj, example_catalog, PLATFORM))
    d = run(native(), example_catalog, PLATFORM, operation="UPDATE", old=stored)
    assert d.allowed
    assert patched(native(), d) == stored  # the same keys are written again


def test_update_ignores_a_malformed_old_object(example_catalog):
    new = pytorchjob({TOPO: "cluster-topology", SIZE: "4"})
    d = run(new, example_catalog, operation="UPDATE", old={"spec": "garbage"})
    assert d.allowed and d.patch == []


def test_validate_only_reports_the_same_violations(example_catalog):
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "4x"})
    d = review(make_request(obj), example_catalog, PLAIN, mutate=False)
    assert rules(d) == ["segment-size-not-integer"] and d.patch == []


# ----------------------------------------------------------------------------- found in review

def test_malformed_master_template_labels_are_a_400_naming_the_field(example_catalog):
    job = pytorchjob({TOPO: "cluster-topology", SIZE: "4"})
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"] = "oops"
    d = run(job, example_catalog)
    assert d.code == 400 and rules(d) == ["malformed-object"]
    assert d.violations[0].field == "spec.pytorchReplicaSpecs.Master.template.metadata.labels"


def test_malformed_native_master_labels_are_a_400_naming_the_field(example_catalog):
    obj = native()
    obj["spec"]["master"] = {"template": {"metadata": {"labels": []}, "spec": {"containers": []}}}
    d = run(obj, example_catalog, PLATFORM)
    assert d.code == 400 and rules(d) == ["malformed-object"]
    assert d.violations[0].field == "spec.master.template.metadata.labels"


def test_platform_update_of_a_kubectl_created_job_adds_no_defaults(example_catalog):
    # DESIGN.md §5/§6: automatic defaults must not change the constraint of a running workload
    stored = patched(pytorchjob({SIZE: "4"}, root={TOPO: "cluster-topology"}),
                     run(pytorchjob({SIZE: "4"}, root={TOPO: "cluster-topology"}), example_catalog))
    new = jsonpatch.JsonPatch([{"op": "add", "path": "/metadata/labels", "value": {"edited": "yes"}}]).apply(stored)
    d = run(new, example_catalog, PLATFORM, operation="UPDATE", old=stored, user=PLATFORM_USER)
    assert d.allowed and d.patch == []


def test_update_that_drops_the_defaults_gets_them_back(example_catalog):
    # kubectl replace / server-side apply of the original manifest by the platform
    created = run(pytorchjob({SIZE: "4"}), example_catalog, PLATFORM, user=PLATFORM_USER)
    stored = patched(pytorchjob({SIZE: "4"}), created)
    d = run(pytorchjob({SIZE: "4"}), example_catalog, PLATFORM, operation="UPDATE", old=stored, user=PLATFORM_USER)
    assert d.allowed
    assert patched(pytorchjob({SIZE: "4"}), d) == stored


def test_native_created_before_its_topology_was_known_resolves_as_create_on_update(example_catalog):
    # DESIGN.md §5 "UPDATE resolves exactly as CREATE, automatic mode and the default topology
    # included": the stored object had no topology, so no segments were in force (KAI ignored
    # them); the defaults a CREATE now writes change no constraint in force.
    stored = patched(native(), run(native(), UnsyncedCatalog(()), PLATFORM))
    assert "annotations" not in stored["metadata"]  # automatic placement was skipped (warning)
    created = patched(native(), run(native(), example_catalog, PLATFORM))
    d = run(stored, example_catalog, PLATFORM, operation="UPDATE", old=stored)
    assert d.allowed and d.warnings == ['KAI flattens pods DistributedWorkload owns: segments (size 8, preferred level) not enforced; --gate-pods does']
    assert patched(stored, d) == created


def test_native_replace_scaling_32_to_16_with_a_default_topology_writes_the_create_keys(example_catalog):
    # issue 18 item 6: `kubectl replace` of the created manifest, 32 -> 16 workers, --default-topology
    # with two topologies; UPDATE writes what CREATE wrote (was: "segment-size ignored: KAI needs
    # kai.scheduler/topology", no keys)
    two = StaticTopologyCatalog([example_catalog.get(n) for n in example_catalog.names()]
                                + [Topology("gpu-fabric", (BLOCK, HOST))])
    settings = AdmissionSettings(default_topology="cluster-topology")
    for stored in (native(workers=32), patched(native(workers=32), run(native(workers=32), two, settings))):
        d = run(native(workers=16), two, settings, operation="UPDATE", old=stored)
        assert d.allowed and d.warnings == ['KAI flattens pods DistributedWorkload owns: segments (size 8, preferred level) not enforced; --gate-pods does']
        out = patched(native(workers=16), d)
        assert out["metadata"]["annotations"] == {TOPO: "cluster-topology", WL_PREF: HOST}
        assert out["spec"]["worker"]["template"]["metadata"]["annotations"] == {
            TOPO: "cluster-topology", SIZE: "8", SEG_PREF: HOST, "segments.dev/kai-flat-gang": "true"}


def test_lws_leader_policy_is_immutable(example_catalog):
    stored = patched(lws({TOPO: "cluster-topology"}, sub_size=2, policy="LeaderWorker"),
                     run(lws({TOPO: "cluster-topology"}, sub_size=2, policy="LeaderWorker"), example_catalog))
    new = lws({TOPO: "cluster-topology"}, sub_size=2, policy="LeaderExcluded")
    d = run(new, example_catalog, operation="UPDATE", old=stored)
    assert rules(d) == ["immutable-field"]
    assert d.violations[0].field == "spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType"
    assert 'was "LeaderWorker"' in d.message


def test_immutable_size_is_shown_as_written(example_catalog):
    stored = patched(native(per_segment=8), run(native(per_segment=8), example_catalog))
    d = run(native(per_segment=4), example_catalog, operation="UPDATE", old=stored)
    assert rules(d) == ["immutable-field"]
    assert d.message.startswith("spec.workersPerSegment = 4: the segment size of an existing workload cannot change (was 8)")


def test_changes_are_allowed_while_resuming_a_suspended_job(example_catalog):
    stored = patched(pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, suspend=True),
                     run(pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, suspend=True), example_catalog))
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "8"}, suspend=False), example_catalog,
            operation="UPDATE", old=stored)
    assert d.allowed


def test_lws_size_beyond_int32_is_a_400():
    d = run(lws({TOPO: "cluster-topology"}, size=2**31, sub_size=2), StaticTopologyCatalog(()))
    assert d.code == 400
    assert d.violations[0].field == "spec.leaderWorkerTemplate.size"


def test_leader_excluded_fix_lists_at_most_8_divisors(example_catalog):
    # size - 1 = 2**31 - 2 = 2 * 3**2 * 7 * 11 * 31 * 151 * 331: the 8 smallest divisors >= 2
    d = run(lws({TOPO: "cluster-topology"}, size=2**31 - 1, sub_size=300_000, policy="LeaderExcluded"), example_catalog)
    assert rules(d) == ["lws-leader-excluded-divisibility"]
    assert "(2, 3, 6, 7, 9, 11, 14, 18)" in d.message


def test_invalid_root_values_shadowed_by_the_template_are_denied_not_dropped(example_catalog):
    obj = pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK},
                     root={TOPO: "Bad Name", SIZE: "4x", SEG_REQ: "rack!"})
    d = run(obj, example_catalog)
    assert sorted(rules(d)) == ["invalid-level", "invalid-topology-name", "segment-size-not-integer"]
    assert {v.field for v in d.violations} == {
        'metadata.annotations["kai.scheduler/topology"]', 'metadata.annotations["kai.scheduler/segment-size"]',
        'metadata.annotations["kai.scheduler/segment-topology-required-placement"]'}


def test_valid_root_values_shadowed_by_the_template_warn(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK}, root={SIZE: "8", SEG_REQ: BLOCK}),
            example_catalog)
    assert d.allowed
    assert d.warnings == ['root kai.scheduler/segment-size="8" overridden by template',
                          'root kai.scheduler/segment-topology-required-placement="cloud.provider.com/topology-block" '
                          'overridden by template']


def test_5000_digit_segment_size_exceeds_the_replicas(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "9" * 5000}), example_catalog)
    assert rules(d) == ["segment-size-exceeds-replicas"]


def test_fix_hint_for_fewer_than_2_workers(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "2"}, replicas=0), example_catalog)
    assert rules(d) == ["segment-size-exceeds-replicas"]
    assert d.message.endswith("fix: raise spec.pytorchReplicaSpecs.Worker.replicas to at least 2 (the segment size), "
                              "or remove kai.scheduler/segment-size for no segments.")
    # 1 worker with segment size 4: raising the replicas to 2 would be denied again
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, replicas=1), example_catalog)
    assert d.message.endswith("fix: raise spec.pytorchReplicaSpecs.Worker.replicas to at least 4 (the segment size), "
                              "or remove kai.scheduler/segment-size for no segments.")


def test_leading_zero_size_is_written_canonically_with_a_warning(example_catalog):
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "04"}), example_catalog)
    assert d.warnings == ['kai.scheduler/segment-size="04" written as "4"']


def test_topology_file_with_an_invalid_object_name_is_rejected():
    from webhook.topology.objects import TopologyError, load_topology_text

    with pytest.raises(TopologyError, match="Topology metadata.name \"Bad_Name\" is not a Kubernetes object name"):
        load_topology_text("kind: Topology\nmetadata: {name: Bad_Name}\nspec: {levels: [{nodeLabel: a.io/b}]}\n")


# ----------------------------------------------------------------------------- UPDATE, second review

def stored_after_create(obj, catalog, settings=PLAIN, **kw):
    return patched(obj, run(obj, catalog, settings, **kw))


def test_changed_root_size_shadowed_by_the_written_template_is_denied(example_catalog):
    # kubectl apply keeps the keys the webhook wrote on the template; the user edits the root
    stored = stored_after_create(pytorchjob(root={TOPO: "cluster-topology", SIZE: "4"}), example_catalog)
    new = jsonpatch.JsonPatch([{"op": "replace", "path": "/metadata/annotations/kai.scheduler~1segment-size",
                                "value": "8"}]).apply(stored)
    d = run(new, example_catalog, operation="UPDATE", old=stored)
    assert rules(d) == ["immutable-field"]
    assert d.violations[0].field == 'metadata.annotations["kai.scheduler/segment-size"]'
    assert 'cannot change (was "4")' in d.message


def test_changed_lws_subgroupsize_beaten_by_the_written_annotation_is_set_back(example_catalog):
    # DESIGN.md §3: the annotation written at CREATE wins, so the patch puts subGroupSize back to it
    stored = stored_after_create(lws({TOPO: "cluster-topology"}, size=9, sub_size=2), example_catalog)
    new = jsonpatch.JsonPatch([{"op": "replace", "path": "/spec/leaderWorkerTemplate/subGroupPolicy/subGroupSize",
                                "value": 4}]).apply(stored)
    d = run(new, example_catalog, operation="UPDATE", old=stored)
    assert d.allowed and d.warnings == ["subGroupSize 4 set to 2 (kai.scheduler/segment-size wins)"]
    assert d.patch == [{"op": "replace", "path": "/spec/leaderWorkerTemplate/subGroupPolicy/subGroupSize", "value": 2}]


def test_kubectl_replace_of_a_platform_created_job_gets_its_defaults_back(example_catalog):
    # created by the platform (automatic placement), then replaced by a kubectl user with the
    # original manifest: the stored object carried every default, so they come back
    stored = stored_after_create(pytorchjob({SIZE: "4"}), example_catalog, PLATFORM, user=PLATFORM_USER)
    d = run(pytorchjob({SIZE: "4"}), example_catalog, PLATFORM, operation="UPDATE", old=stored, user="alice")
    assert d.allowed, d.message
    assert patched(pytorchjob({SIZE: "4"}), d) == stored


def test_kubectl_user_adding_segments_while_suspended_gets_no_defaults(example_catalog):
    old = pytorchjob({TOPO: "cluster-topology"}, suspend=True)
    d = run(pytorchjob({TOPO: "cluster-topology", SIZE: "4"}, suspend=True), example_catalog, PLATFORM,
            operation="UPDATE", old=old, user="alice")
    assert d.allowed and SEG_PREF not in str(d.patch)


def test_native_framework_fix_names_the_annotation_when_that_is_the_source(example_catalog):
    d = run(native(per_segment=None, framework="MPI", worker={SIZE: "8"}), example_catalog)
    assert rules(d) == ["native-framework-unsupported"]
    assert d.message.endswith("fix: remove kai.scheduler/segment-size, or use framework PyTorch.")


def test_native_without_workers_is_400_workers_required(example_catalog):
    # deploy/crds/segments.dev_distributedworkloads.yaml: spec.required lists workers (no default).
    obj = native()
    del obj["spec"]["workers"]
    d = run(obj, example_catalog, PLATFORM)
    assert (d.code, rules(d)) == (400, ["malformed-object"])
    assert d.message == ("spec.workers is not set: spec.workers is required by the DistributedWorkload CRD "
                         "(rule malformed-object); fix: set spec.workers to the number of worker pods, e.g. 8.")


@pytest.mark.parametrize("settings", [PLAIN, PLATFORM])
def test_native_lower_case_framework_is_400_without_warnings(example_catalog, settings):
    d = run(native(framework="pytorch"), example_catalog, settings)
    assert (d.code, d.warnings) == (400, [])
    assert d.message == ('spec.framework = "pytorch": must be one of PyTorch, TensorFlow, MPI, XGBoost, JAX '
                         '(case-sensitive) (rule malformed-object); fix: write "PyTorch".')


# ------------------------------------------------------- UPDATE scaled below an unchanged segment size

def _update(new, old, settings=PLATFORM, catalog=None):
    return review(make_request(new, operation="UPDATE", old=old), catalog, settings)


def test_pytorchjob_scaled_below_its_segment_size_gets_a_fix_the_webhook_admits(example_catalog):
    keys_ = {TOPO: "cluster-topology", SIZE: "4"}
    old = pytorchjob(worker=keys_, replicas=16)
    d = _update(pytorchjob(worker=keys_, replicas=2), old, PLAIN, example_catalog)
    assert rules(d) == ["segment-size-exceeds-replicas"]
    assert d.message == (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "4": '
        "the segment size exceeds the 2 Worker replicas (spec.pytorchReplicaSpecs.Worker.replicas) "
        "(rule segment-size-exceeds-replicas); fix: keep spec.pytorchReplicaSpecs.Worker.replicas at least 4 "
        "(a running workload keeps its segment size 4), or suspend the job "
        "(spec.runPolicy.suspend: true) to change the segment size, or delete and recreate the workload.")
    # every option of the fix is admitted
    assert _update(pytorchjob(worker=keys_, replicas=4), old, PLAIN, example_catalog).allowed
    suspended = pytorchjob(worker={TOPO: "cluster-topology", SIZE: "2"}, replicas=2, suspend=True)
    assert _update(suspended, old, PLAIN, example_catalog).allowed
    # the old fix ("use a segment size of 2") is what the webhook denies as immutable
    assert rules(_update(pytorchjob(worker={TOPO: "cluster-topology", SIZE: "2"}, replicas=2), old, PLAIN,
                         example_catalog)) == ["immutable-field"]


def test_pytorchjob_suspended_scale_keeps_the_create_fix(example_catalog):
    keys_ = {TOPO: "cluster-topology", SIZE: "4"}
    d = _update(pytorchjob(worker=keys_, replicas=2, suspend=True), pytorchjob(worker=keys_), PLAIN, example_catalog)
    assert d.message.endswith("fix: use a segment size of 2, or raise spec.pytorchReplicaSpecs.Worker.replicas to at least 4.")


def test_native_scaled_below_its_segment_size(example_catalog):
    d = _update(native(workers=4), native(workers=32), PLATFORM, example_catalog)
    assert d.message == (
        "spec.workersPerSegment = 8: the segment size exceeds the 4 workers (spec.workers) "
        "(rule segment-size-exceeds-replicas); fix: keep spec.workers at least 8 (a running workload keeps its "
        "segment size 8), or delete and recreate the workload.")
    assert _update(native(workers=8), native(workers=32), PLATFORM, example_catalog).allowed


@pytest.mark.parametrize("policy, new_size, fix, admitted", [
    ("LeaderWorker", 2, "set spec.leaderWorkerTemplate.size to 4 or another multiple of 4 (or a multiple plus 1)",
     [4, 8, 5]),
    ("LeaderExcluded", 3, "set spec.leaderWorkerTemplate.size to 5 or another multiple of 4 plus 1", [5, 9]),
])
def test_lws_scaled_below_its_segment_size(example_catalog, policy, new_size, fix, admitted):
    worker = {TOPO: "cluster-topology", SEG_REQ: RACK}
    old = lws(worker=worker, size=9, sub_size=4, policy=policy)
    d = _update(lws(worker=worker, size=new_size, sub_size=4, policy=policy), old, PLAIN, example_catalog)
    assert rules(d) == ["segment-size-exceeds-replicas"]
    assert d.message.endswith(f"fix: {fix} (a running workload keeps its segment size 4), "
                              "or delete and recreate the workload.")
    for size in admitted:
        assert _update(lws(worker=worker, size=size, sub_size=4, policy=policy), old, PLAIN, example_catalog).allowed


@pytest.mark.parametrize("text, message", [
    ("apiVersion: kai.scheduler/v1\nkind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: a.io/b}]}\n",
     'Topology apiVersion "kai.scheduler/v1" is not one KAI serves; fix: apiVersion: kai.scheduler/v1alpha1'),
    ("kind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: null}]}\n",
     'Topology "t": spec.levels[0].nodeLabel null is not a valid label key; fix: write the node label key of this '
     'level, e.g. topology.kubernetes.io/zone (an optional DNS prefix and /, then a name of at most 63 characters)'),
    ("kind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: a.io/b}, {nodeLabel: a.io/b}]}\n",
     'Topology "t": spec.levels[1].nodeLabel "a.io/b" is listed twice (also spec.levels[0]); fix: list each node '
     'label once, from the broadest level to the narrowest: remove one of them'),
    ("- 1\n- 2\n", "expected a Kubernetes object, got [1, 2]"),
])
def test_topology_errors_show_values_as_json(text, message):
    from webhook.topology.objects import TopologyError, load_topology_text

    with pytest.raises(TopologyError) as raised:
        load_topology_text(text, "t.yaml")
    assert str(raised.value) == f"t.yaml: {message}"


def test_topology_text_reads_timestamps_as_text_as_kubectl_does():
    # the second YAML reader of the package (the embedded default, load_topology_text) reads an
    # unquoted date as its text, as webhook.planning.manifests and kubectl's go-yaml do, not as a datetime
    from webhook.topology.objects import load_topology_text

    text = "kind: Topology\nmetadata: {name: 2024-01-01}\nspec: {levels: [{nodeLabel: 2024-01-02}]}\n"
    [topology] = load_topology_text(text, "t.yaml")
    assert (topology.name, topology.levels) == ("2024-01-01", ("2024-01-02",))
