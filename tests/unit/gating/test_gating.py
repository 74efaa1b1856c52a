"""`--gate-pods` (DESIGN.md §9): workload CREATE writes the gang facts on every pod template of the
gang, pod CREATE appends the `segments.dev/placement` scheduling gate; the release patch."""

from __future__ import annotations

import jsonpatch
import pytest

from tests.conftest import WL_REQ, load_example, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.registry import gang_key
from webhook.admission.review import review
from webhook.gating.release import release_patch

GATING = AdmissionSettings(gate_pods=True)
PLAIN = AdmissionSettings()
GATE = {"name": "segments.dev/placement"}
SIZE_KEY = "segments.dev/gang-size"


def admitted(obj, catalog, settings=GATING, operation="CREATE", user="kubectl-user"):
    d = review(make_request(obj, operation=operation, old=obj if operation == "UPDATE" else None, user=user),
               catalog, settings)
    assert d.allowed, d.message
    return d, jsonpatch.JsonPatch(d.patch).apply(obj, in_place=False)


def template_annotations(template):
    return template.get("metadata", {}).get("annotations", {})


def test_pytorchjob_create_writes_gang_facts_on_master_and_worker_templates(example_catalog):
    _, job = admitted(load_example("pytorchjob-zone-and-rack.yaml"), example_catalog)
    specs = job["spec"]["pytorchReplicaSpecs"]
    expected = {"segments.dev/gang-size": "17",  # Master 1 + Worker 16
                "segments.dev/topology": "cluster-topology",
                "segments.dev/topology-required-placement": "topology.kubernetes.io/zone"}
    for rtype in ("Master", "Worker"):
        got = {k: v for k, v in template_annotations(specs[rtype]["template"]).items() if k.startswith("segments.dev/")}
        assert got == expected, rtype
    # the workload-level kai key stays on the root only
    assert WL_REQ not in template_annotations(specs["Worker"]["template"])


def test_without_gate_pods_nothing_is_written(example_catalog):
    _, job = admitted(load_example("pytorchjob-zone-and-rack.yaml"), example_catalog, settings=PLAIN)
    for rtype in ("Master", "Worker"):
        assert SIZE_KEY not in template_annotations(job["spec"]["pytorchReplicaSpecs"][rtype]["template"])


def test_update_writes_no_gang_facts(example_catalog):
    d, _ = admitted(load_example("pytorchjob-zone-and-rack.yaml"), example_catalog, operation="UPDATE")
    assert not any("segments.dev" in op["path"] for op in d.patch)


def test_lws_gang_is_one_group_of_size_pods(example_catalog):
    _, lws = admitted(load_example("lws-segmented.yaml"), example_catalog)
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert template_annotations(lwt["workerTemplate"])[SIZE_KEY] == "5"
    assert template_annotations(lwt["leaderTemplate"])[SIZE_KEY] == "5"


def test_native_gang_is_workers_plus_master(example_catalog):
    obj = load_example("distributedworkload-native.yaml")  # names no topology: the default's
    settings = AdmissionSettings(gate_pods=True, default_topology="cluster-topology")
    _, native = admitted(obj, example_catalog, settings=settings)
    assert template_annotations(native["spec"]["worker"]["template"])[SIZE_KEY] == "32"
    obj["spec"]["master"] = {"template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}
    _, native = admitted(obj, example_catalog, settings=settings)
    assert template_annotations(native["spec"]["worker"]["template"])[SIZE_KEY] == "33"
    assert template_annotations(native["spec"]["master"]["template"])[SIZE_KEY] == "33"


def test_unsegmented_workload_without_placement_keys_is_not_a_gang(example_catalog):
    obj = load_example("pytorchjob-zone-and-rack.yaml")
    obj["metadata"]["annotations"] = {}
    del obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    d, _ = admitted(obj, example_catalog)
    assert d.patch == []


def pod(labels, ann, gates=None):
    spec = {"containers": [{"name": "c", "image": "i"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "job-worker-5", "namespace": "team-a", "labels": labels, "annotations": ann},
            "spec": spec}


WORKER_LABELS = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "5",
                 "training.kubeflow.org/job-name": "job"}
WORKER_ANN = {"kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-size": "4", SIZE_KEY: "9"}


def test_segmented_pod_is_gated_with_its_labels(example_catalog):
    d, out = admitted(pod(WORKER_LABELS, WORKER_ANN), example_catalog)
    assert out["spec"]["schedulingGates"] == [GATE]
    assert out["metadata"]["labels"]["kai.scheduler/segment-index"] == "1"
    assert d.patch[-1] == {"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}


def test_gate_is_appended_to_existing_gates_and_idempotent(example_catalog):
    _, out = admitted(pod(WORKER_LABELS, WORKER_ANN, gates=[{"name": "other.io/wait"}]), example_catalog)
    assert out["spec"]["schedulingGates"] == [{"name": "other.io/wait"}, GATE]
    d, again = admitted(out, example_catalog)
    assert d.patch == [] and again == out


def test_master_pod_with_gang_facts_only_is_gated(example_catalog):
    labels = {"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0",
              "training.kubeflow.org/job-name": "job", "kai.scheduler/subgroup-name": "master"}
    _, out = admitted(pod(labels, {SIZE_KEY: "9"}), example_catalog)
    assert out["spec"]["schedulingGates"] == [GATE]


def test_pod_without_gang_size_is_not_gated_and_warned(example_catalog):
    d, out = admitted(pod(WORKER_LABELS, {"kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-size": "4"}), example_catalog)
    assert "schedulingGates" not in out["spec"]
    assert d.warnings == ["not gated: no segments.dev/gang-size (workload created before --gate-pods?)"]


@pytest.mark.parametrize("size", ["0", "-1", "abc"])
def test_pod_with_an_invalid_gang_size_is_not_gated_and_the_value_is_named(example_catalog, size):
    d, out = admitted(pod(WORKER_LABELS, {**WORKER_ANN, SIZE_KEY: size}), example_catalog)
    assert "schedulingGates" not in out["spec"]
    assert d.warnings == [f'not gated: segments.dev/gang-size="{size}" is not a whole number of pods >= 1']


def test_pod_created_with_a_node_name_is_not_gated(example_catalog):
    # KEP-3838: the API server rejects a pod created with spec.nodeName and scheduling gates.
    bound = pod(WORKER_LABELS, WORKER_ANN)
    bound["spec"]["nodeName"] = "node-1"
    d, out = admitted(bound, example_catalog)
    assert "schedulingGates" not in out["spec"]
    assert out["metadata"]["labels"]["kai.scheduler/segment-index"] == "1"
    assert d.warnings == ['not gated: spec.nodeName "node-1" is set (the pod bypasses the scheduler)']


def test_plain_pod_is_untouched(example_catalog):
    d, _ = admitted(pod({"app": "web"}, {}), example_catalog)
    assert d.patch == [] and d.warnings == []


def test_gating_off_never_gates(example_catalog):
    _, out = admitted(pod(WORKER_LABELS, WORKER_ANN), example_catalog, settings=PLAIN)
    assert "schedulingGates" not in out["spec"]


def test_lws_pod_gang_size_comes_from_lws_size():
    labels = {"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": "2",
              "leaderworkerset.sigs.k8s.io/worker-index": "3"}
    obj = pod(labels, {"leaderworkerset.sigs.k8s.io/size": "5", "kai.scheduler/segment-size": "2", "kai.scheduler/topology": "t"})
    from webhook.topology.objects import StaticTopologyCatalog
    _, out = admitted(obj, StaticTopologyCatalog())
    assert out["spec"]["schedulingGates"] == [GATE]


@pytest.mark.parametrize("labels, expected", [
    ({"training.kubeflow.org/job-name": "job"}, "team-a/job"),
    ({"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": "3"}, "team-a/lws/3"),
    ({"leaderworkerset.sigs.k8s.io/name": "lws"}, None),
    ({"app": "web"}, None),
])
def test_gang_key(labels, expected):
    assert gang_key("team-a", labels) == expected


def test_release_patch_removes_the_gate_and_adds_the_node_selector_map():
    gated = pod(WORKER_LABELS, WORKER_ANN, gates=[{"name": "other.io/wait"}, GATE])
    ops = release_patch(gated, "node-7")
    assert ops == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "segments.dev/placement"},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": "node-7"}},
    ]
    out = jsonpatch.apply_patch(gated, ops)
    assert out["spec"]["schedulingGates"] == [{"name": "other.io/wait"}]


def test_release_patch_adds_one_entry_to_an_existing_selector():
    gated = pod(WORKER_LABELS, WORKER_ANN, gates=[GATE])
    gated["spec"]["nodeSelector"] = {"gpu": "h100"}
    ops = release_patch(gated, "node-7")
    assert ops[2] == {"op": "add", "path": "/spec/nodeSelector/kubernetes.io~1hostname", "value": "node-7"}
    gated["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "node-8"
    with pytest.raises(ValueError, match="already selects kubernetes.io/hostname=node-8"):
        release_patch(gated, "node-7")


@pytest.mark.parametrize("value, expected", [("true", True), ("1", True), ("False", False), ("off", False), ("", False)])
def test_serve_gate_pods_flag_and_variable(value, expected):
    from webhook.cli import build_parser, flags

    args = flags.apply_env(build_parser().parse_args(["serve"]), {"SEGMENT_WEBHOOK_GATE_PODS": value})
    assert args.gate_pods is expected
    assert flags.apply_env(build_parser().parse_args(["serve", "--gate-pods"]), {}).gate_pods is True


def test_serve_gate_pods_variable_that_is_not_a_boolean():
    from webhook.cli import build_parser, flags

    with pytest.raises(flags.UsageError, match="SEGMENT_WEBHOOK_GATE_PODS='maybe': 'maybe' is not true or false"):
        flags.apply_env(build_parser().parse_args(["serve"]), {"SEGMENT_WEBHOOK_GATE_PODS": "maybe"})


def test_review_gate_pods_shows_the_gate(tmp_path, capsys):
    import yaml

    from webhook.cli import main

    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod(WORKER_LABELS, WORKER_ANN)))
    assert main(["review", "-f", str(path), "--gate-pods", "-o", "yaml"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["spec"]["schedulingGates"] == [GATE]
    assert main(["review", "-f", str(path), "-o", "yaml"]) == 0
    assert "schedulingGates" not in yaml.safe_load(capsys.readouterr().out)["spec"]



@pytest.mark.parametrize("masters", [123456789012345678, 2**31, -1, "1"])
def test_a_master_replicas_outside_int32_makes_no_gang(example_catalog, masters):
    """Trial: Master replicas 123456789012345678 wrote gang-size 123456789012345694 (a gang that
    never completes). The PyTorchJob CRD's replicas is an int32 >= 0; anything else: no gang facts."""
    job = load_example("pytorchjob-zone-and-rack.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = masters
    _, patched = admitted(job, example_catalog)
    for rtype in ("Master", "Worker"):
        assert SIZE_KEY not in template_annotations(patched["spec"]["pytorchReplicaSpecs"][rtype]["template"])


def test_the_largest_int32_master_replicas_still_makes_a_gang(example_catalog):
    job = load_example("pytorchjob-zone-and-rack.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2**31 - 1
    _, patched = admitted(job, example_catalog)
    assert template_annotations(patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])[SIZE_KEY] == str(2**31 - 1 + 16)
