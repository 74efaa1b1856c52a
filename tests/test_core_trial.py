"""New-user trial of ``segment-webhook review``: each finding with its literal expected answer.

1. LWS ``too-many-segments`` names the smallest size LWS accepts (DESIGN.md §3, §5);
2. LWS segments are counted as the pod index rule assigns them (§7: the leader may join segment 0);
3. UPDATE compares what each side resolves, and says what an invalid stored value was (§5);
4. the scale-below-segment-size fix does not read as a change of the unchanged size (§5);
5. a manifest's own fields are named, never the AdmissionReview envelope;
6. YAML values that are not JSON (bytes, sets, .nan/.inf) never reach a message as Python reprs (timestamps are
   read as their text, as kubectl reads them).
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest
from conftest import SIZE, TOPO, load_example, make_request

from webhook.core.settings import AdmissionSettings
from webhook.core.review import review

PLAIN = AdmissionSettings()
AUTO = AdmissionSettings(default_topology="cluster-topology")
LWT = "spec.leaderWorkerTemplate"
SGS = f"{LWT}.subGroupPolicy.subGroupSize"
W_SIZE = 'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"]'


def run(obj, catalog, settings=PLAIN, operation="CREATE", old=None):
    return review(make_request(obj, operation, old=old), catalog, settings)


def lws_example(size, sub_size=2, policy="LeaderWorker"):
    obj = load_example("lws-segmented.yaml")
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = size
    lwt["subGroupPolicy"] = {"subGroupSize": sub_size, "subGroupPolicyType": policy}
    return obj


def tp4(size="4"):
    obj = load_example("pytorchjob-tp4.yaml")
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SIZE] = size
    return obj


# ------------------------------------------------------------------ 1. the LWS fix names a size LWS accepts

@pytest.mark.parametrize("size, count, fix_size", [
    (30011, 15005, 5),          # 4 makes few enough segments, but 30011 % 4 and 30010 % 4 are not 0
    (50021, 25010, 10),         # 6 is not accepted: 50021 = 43 * 1163, 50020 = 2^2 * 5 * 41 * 61
    (2147483647, 1073741823, 215481),  # prime; 2^31 - 2 = 2 * 3^2 * 7 * 11 * 31 * 151 * 331
])
def test_lws_too_many_segments_fix_names_the_smallest_size_lws_accepts(example_catalog, size, count, fix_size):
    d = run(lws_example(size), example_catalog)
    assert (d.allowed, d.code) == (False, 403)
    assert d.message == (
        f"{SGS} = 2: {size} pods per group make {count} segments, more than 10000 (rule too-many-segments); "
        f"fix: use a segment size of {fix_size} (the smallest that divides size {size} or size - 1 = {size - 1}, "
        "as LWS requires of subGroupSize, and makes at most 10000 segments).")
    # the size the fix names is admitted
    assert run(lws_example(size, sub_size=fix_size), example_catalog).allowed


def test_the_size_the_old_fix_named_is_denied_by_lws_divisibility(example_catalog):
    d = run(lws_example(30011, sub_size=4), example_catalog)
    assert [v.rule for v in d.violations] == ["lws-subgroup-size-divisibility"]


def test_lws_leader_excluded_too_many_segments_fix_divides_size_minus_1(example_catalog):
    # size - 1 = 30010 = 2 * 5 * 3001: 4 would make 7503 segments but LeaderExcluded needs a divisor
    d = run(lws_example(30011, policy="LeaderExcluded"), example_catalog)
    assert d.message == (
        f"{SGS} = 2: 30010 workers per group (leader excluded) make 15005 segments, more than 10000 "
        "(rule too-many-segments); fix: use a segment size of 5 (the smallest that divides size - 1 = 30010, "
        "as LeaderExcluded requires, and makes at most 10000 segments).")
    assert run(lws_example(30011, sub_size=5, policy="LeaderExcluded"), example_catalog).allowed


def test_lws_annotation_without_subgroupsize_gets_the_smallest_size(example_catalog):
    # no subGroupPolicy: LWS validates nothing, so any size that makes <= 10000 segments will do
    obj = load_example("lws-segmented.yaml")
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = 30011
    del lwt["subGroupPolicy"]
    lwt["workerTemplate"]["metadata"]["annotations"][SIZE] = "2"
    d = run(obj, example_catalog)
    assert d.message == (
        f'{LWT}.workerTemplate.metadata.annotations["kai.scheduler/segment-size"] = "2": 30011 pods per group '
        "make 15005 segments, more than 10000 (rule too-many-segments); fix: use a segment size of at least 4.")
    lwt["workerTemplate"]["metadata"]["annotations"][SIZE] = "4"
    assert run(obj, example_catalog).allowed


# ------------------------------------------------------------------ 2. segments counted like the pod index rule

def test_lws_20001_pods_in_segments_of_2_make_exactly_10000_segments(example_catalog):
    # (R-1) % S == 0 and R % S != 0: the leader joins segment 0, {L,1,2} {3,4} ... {19999,20000}
    d = run(lws_example(20001), example_catalog)
    assert d.allowed, d.message
    assert d.violations == []


def test_lws_20003_pods_in_segments_of_2_are_10001_segments(example_catalog):
    d = run(lws_example(20003), example_catalog)
    assert d.message.startswith(f"{SGS} = 2: 20003 pods per group make 10001 segments, more than 10000 "
                                "(rule too-many-segments)")


def test_last_pod_of_20001_is_in_segment_9999():
    from webhook.core.kinds.pod import segment_labels

    labels, warnings = segment_labels(
        {"leaderworkerset.sigs.k8s.io/worker-index": "20000", "leaderworkerset.sigs.k8s.io/name": "l"},
        {TOPO: "cluster-topology", SIZE: "2", "leaderworkerset.sigs.k8s.io/size": "20001"})
    assert (labels["kai.scheduler/segment-index"], warnings) == ("9999", [])


# ------------------------------------------------------------------ 3. UPDATE compares like with like

def test_update_from_04_to_4_is_no_change(example_catalog):
    assert run(tp4("4"), example_catalog, operation="UPDATE", old=tp4("04")).allowed
    d = run(tp4("04"), example_catalog, operation="UPDATE", old=tp4("4"))
    assert d.allowed and d.warnings == ['kai.scheduler/segment-size="04" written as "4"']


def test_update_from_04_to_8_is_a_change_shown_as_written(example_catalog):
    d = run(tp4("8"), example_catalog, operation="UPDATE", old=tp4("04"))
    assert [v.rule for v in d.violations] == ["immutable-field"]
    assert 'cannot change (was "04")' in d.message


def test_update_from_an_invalid_size_says_what_it_had(example_catalog):
    d = run(tp4("4"), example_catalog, operation="UPDATE", old=tp4("abc"))
    assert d.message == (
        f'{W_SIZE} = "4": the segment size of an existing workload cannot be added (it had "abc", not a valid '
        "segment size, so none was in force) (rule immutable-field); fix: remove it (the stored workload has no "
        "segment size in force), or delete and recreate the workload (or suspend it first: "
        "spec.runPolicy.suspend: true).")
    removed = tp4()
    del removed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SIZE]
    assert run(removed, example_catalog, operation="UPDATE", old=tp4("abc")).allowed  # the fix is admitted


def test_update_of_a_native_workload_whose_stored_workers_per_segment_is_a_string(example_catalog):
    new = load_example("distributedworkload-native.yaml")
    old = copy.deepcopy(new)
    old["spec"]["workersPerSegment"] = "8"
    d = run(new, example_catalog, AUTO, operation="UPDATE", old=old)
    # one problem: the automatic topology and preferred level follow the size, the user wrote neither
    assert d.message == (
        'spec.workersPerSegment = 8: the segment size of an existing workload cannot be added (it had "8", not a '
        "valid segment size, so none was in force) (rule immutable-field); fix: remove it (the stored workload "
        "has no segment size in force), or delete and recreate the workload.")
    # the new side's own string is a 400, not also a "removed" size
    d = run(old, example_catalog, AUTO, operation="UPDATE", old=new)
    assert (d.code, [v.rule for v in d.violations]) == (400, ["malformed-object"])


def test_lws_update_with_an_invalid_stored_subgroupsize(example_catalog):
    new = lws_example(5)
    old = copy.deepcopy(new)
    old["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupSize"] = "2"
    d = run(new, example_catalog, operation="UPDATE", old=old)
    assert d.message.startswith(f'{SGS} = 2: the segment size of an existing workload cannot be added (it had "2", '
                                "not a valid segment size, so none was in force)")


# ------------------------------------------------------------------ 4. nothing unchanged reads as changed

def _review_update(capsys, tmp_path, name, edit):
    from conftest import EXAMPLES
    import yaml

    from webhook.cli import main

    new = load_example(name)
    edit(new)
    path = tmp_path / "new.yaml"
    path.write_text(yaml.safe_dump(new))
    code = main(["review", "-f", str(path), "--operation", "UPDATE", "--old", str(EXAMPLES / name)])
    err = capsys.readouterr().err
    assert code == 1
    return err.split("denied the request: ", 1)[1].strip()


def _set(*parts_and_value):
    *parts, value = parts_and_value

    def edit(obj):
        node = obj
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    return edit


def test_review_pytorchjob_16_to_2_workers(capsys, tmp_path):
    message = _review_update(capsys, tmp_path, "pytorchjob-tp4.yaml",
                             _set("spec", "pytorchReplicaSpecs", "Worker", "replicas", 2))
    assert message == (
        f'{W_SIZE} = "4": the segment size exceeds the 2 Worker replicas (spec.pytorchReplicaSpecs.Worker.replicas) '
        "(rule segment-size-exceeds-replicas); fix: keep spec.pytorchReplicaSpecs.Worker.replicas at least 4 "
        "(a running workload keeps its segment size 4), or suspend the job (spec.runPolicy.suspend: true) to change "
        "the segment size, or delete and recreate the workload.")


def test_review_lws_size_5_to_1(capsys, tmp_path):
    message = _review_update(capsys, tmp_path, "lws-segmented.yaml", _set("spec", "leaderWorkerTemplate", "size", 1))
    assert message == (
        f"{SGS} = 2: the segment size exceeds the 1 pod per group ({LWT}.size) (rule segment-size-exceeds-replicas); "
        f"fix: set {LWT}.size to 2 or another multiple of 2 (or a multiple plus 1) (a running workload keeps its "
        "segment size 2), or delete and recreate the workload.")


def test_review_native_32_to_4_workers(capsys, tmp_path):
    message = _review_update(capsys, tmp_path, "distributedworkload-native.yaml", _set("spec", "workers", 4))
    assert message == (
        "spec.workersPerSegment = 8: the segment size exceeds the 4 workers (spec.workers) "
        "(rule segment-size-exceeds-replicas); fix: keep spec.workers at least 8 (a running workload keeps its "
        "segment size 8), or delete and recreate the workload.")


# ------------------------------------------------------------------ 5. the manifest's own fields are named

NS_DENIAL = ('metadata.namespace = ["a"]: the object\'s namespace must be a string (rule malformed-object); '
             "fix: write one namespace name, e.g. metadata.namespace: team-a.")


def test_a_namespace_that_is_a_list_is_named_as_metadata_namespace(example_catalog):
    from webhook.core.admission import build_request

    obj = tp4()
    obj["metadata"]["namespace"] = ["a"]
    assert build_request(obj)["namespace"] == "default"  # the envelope stays well-formed
    d = run(obj, example_catalog)
    assert (d.allowed, d.code, d.message) == (False, 400, NS_DENIAL)


def test_a_pod_namespace_that_is_a_list_is_named_as_metadata_namespace(example_catalog):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ["a"]},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    d = run(pod, example_catalog)
    assert (d.allowed, d.code, d.message) == (False, 400, NS_DENIAL)


def test_review_cli_names_metadata_namespace_not_the_envelope(capsys, tmp_path):
    import yaml

    from webhook.cli import main

    obj = tp4()
    obj["metadata"]["namespace"] = ["a"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    assert main(["review", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith("denied the request: " + NS_DENIAL)
    assert "AdmissionReview" not in err and "request.namespace" not in err


@pytest.mark.parametrize("obj, problem", [
    ({"apiVersion": 1, "kind": "PyTorchJob"}, "apiVersion is 1, must be a string group/version (e.g. kubeflow.org/v1)"),
    ({"kind": "PyTorchJob"}, "apiVersion is missing"),
    ({"apiVersion": None, "kind": "PyTorchJob"}, "apiVersion is null, must be a string group/version (e.g. kubeflow.org/v1)"),
    ({"apiVersion": "v1", "kind": ["Pod"]}, 'kind is ["Pod"], must be a string kind name (e.g. PyTorchJob)'),
    ({"apiVersion": "v1", "kind": True}, "kind is true, must be a string kind name (e.g. PyTorchJob)"),
    ({"apiVersion": "v1", "kind": "Pod"}, None),
])
def test_manifest_problem_says_what_the_field_is(obj, problem):
    from webhook.core.admission import manifest_problem

    assert manifest_problem(obj) == problem


# ------------------------------------------------------------------ 6. no Python repr in a message

def _with_root_annotation(key, value):
    obj = tp4()
    obj["metadata"]["annotations"] = {TOPO: "cluster-topology", key: value}
    return obj


@pytest.mark.parametrize("value, shown", [
    (b"hi", "aGk= (YAML binary)"),
    ({"b", "a"}, '{"a": null, "b": null} (YAML set)'),
    (float("nan"), ".nan (YAML float)"),
    (float("-inf"), "-.inf (YAML float)"),
    ([b"x", None, True], '["eA==", null, true]'),
    ({1: "a", None: True}, '{"1": "a", "null": true}'),
    (4, "4"),
])
def test_non_json_annotation_values_are_shown_as_json_or_by_yaml_type(example_catalog, value, shown):
    d = run(_with_root_annotation("created", value), example_catalog)
    assert (d.code, d.message) == (400, (
        f'metadata.annotations["created"] = {shown}: must be a string (quote it in YAML) (rule malformed-object); '
        'fix: send a string (quote it in YAML) at metadata.annotations["created"].'))
    for python in ("datetime.", "b'", "None", "True", "nan)", "{'"):
        assert python not in d.message


@pytest.mark.parametrize("key, text", [(7, "7"), (True, "true")])  # YAML ``7: x``, ``yes: x``
def test_a_non_string_annotation_key_is_named_as_the_key(example_catalog, key, text):
    d = run(_with_root_annotation(key, "x"), example_catalog)
    assert d.message == (
        f'metadata.annotations["{text}"] = {text}: must be a string key (quote the key in YAML) '
        f'(rule malformed-object); fix: send a string key (quote the key in YAML) at metadata.annotations["{text}"].')


def test_quote_never_falls_back_to_a_python_repr():
    from webhook.core.messages import quote

    assert quote(object()) == "a value that is not JSON"
    assert quote((1, "a")) == '[1, "a"]'
    assert quote("x" * 100) == '"' + "x" * 56 + "..."


def test_a_request_that_is_not_an_object_is_shown_as_json_not_a_python_type_name():
    from webhook.core.topology import StaticTopologyCatalog

    d = review([1, 2], StaticTopologyCatalog(()), PLAIN)
    assert (d.code, d.message) == (400, "request = [1, 2]: must be an AdmissionReview v1 request object "
                                        "(rule malformed-object); fix: send an AdmissionReview v1 request object at request.")


# ------------------------------------------------------------------ found by the property suite meanwhile

def test_native_root_size_beaten_by_workers_per_segment_is_idempotent(example_catalog):
    # §3: workersPerSegment wins, a disagreeing annotation gets a warning; the reinvocation (which
    # sees the template value the webhook wrote) must not deny the root value it only warned about
    obj = load_example("distributedworkload-native.yaml")
    obj["metadata"]["annotations"] = {SIZE: "-1"}
    first = run(obj, example_catalog, AUTO)
    assert first.allowed and first.warnings == ['kai.scheduler/segment-size="-1" disagrees with workersPerSegment=8; '
                                                "overwritten"]
    again = run(jsonpatch.apply_patch(obj, first.patch), example_catalog, AUTO)
    assert (again.allowed, again.patch) == (True, [])
    assert again.warnings == ['root kai.scheduler/segment-size="-1" ignored: workersPerSegment=8 wins']
