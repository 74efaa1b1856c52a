"""UPDATE (DESIGN.md §5 "UPDATE compares like with like"), each case with its literal answer:
scaling is judged by the size rule, not as an immutable change, and its fix does not read as a
change of the unchanged size; each side is compared as it resolves ("04" is "4"), and an invalid
stored value is named as such; a reinvoked webhook (UPDATE onto its own output) changes nothing."""

from __future__ import annotations

import copy

import jsonpatch

from tests.conftest import SIZE, TOPO, load_example
from tests.support.admission_helpers import AUTO, LWT, W_ANN, created, lws, lws_example, run, tp4

SGS = f"{LWT}.subGroupPolicy.subGroupSize"
W_SIZE = f'{W_ANN}["kai.scheduler/segment-size"]'


# ------------------------------------------------------------------ scaling is not an immutable change

def test_pytorchjob_scaled_from_16_to_2_workers_meets_only_the_size_rule(example_catalog):
    decision = run(tp4(2), example_catalog, operation="UPDATE", old=created(tp4(16), example_catalog))
    assert decision.message == (
        f'{W_ANN}["kai.scheduler/segment-size"] = "4": the segment size exceeds the 2 Worker replicas '
        "(spec.pytorchReplicaSpecs.Worker.replicas) (rule segment-size-exceeds-replicas); "
        "fix: keep spec.pytorchReplicaSpecs.Worker.replicas at least 4 (a running workload keeps its segment "
        "size 4), or suspend the job (spec.runPolicy.suspend: true) to change the segment size, or delete "
        "and recreate the workload.")  # not "use a segment size of 2": that UPDATE is denied as immutable


def test_pytorchjob_scaled_from_16_to_8_workers_is_allowed(example_catalog):
    decision = run(tp4(8), example_catalog, operation="UPDATE", old=created(tp4(16), example_catalog))
    assert decision.allowed and decision.warnings == []


def test_lws_size_5_to_1_meets_only_the_size_rule(example_catalog):
    ann = {TOPO: "cluster-topology", SIZE: "2"}
    decision = run(lws(size=1, worker_ann=ann), example_catalog, operation="UPDATE",
                   old=created(lws(size=5, worker_ann=ann), example_catalog))
    assert decision.message == (
        f'{LWT}.workerTemplate.metadata.annotations["kai.scheduler/segment-size"] = "2": the segment size exceeds '
        f"the 1 pod per group ({LWT}.size) (rule segment-size-exceeds-replicas); fix: set {LWT}.size to 2 or another "
        "multiple of 2 (or a multiple plus 1) (a running workload keeps its segment size 2), or delete "
        "and recreate the workload.")
    assert "null" not in decision.message and "None" not in decision.message


def test_native_workload_from_32_to_4_workers_meets_only_the_size_rule(example_catalog):
    stored = created(load_example("distributedworkload-native.yaml"), example_catalog, AUTO)
    new = load_example("distributedworkload-native.yaml")
    new["spec"]["workers"] = 4
    decision = run(new, example_catalog, AUTO, operation="UPDATE", old=stored)
    assert decision.message == (
        "spec.workersPerSegment = 8: the segment size exceeds the 4 workers (spec.workers) "
        "(rule segment-size-exceeds-replicas); fix: keep spec.workers at least 8 (a running workload keeps its "
        "segment size 8), or delete and recreate the workload.")


def test_removing_the_segment_size_of_a_running_job_says_removed_not_null(example_catalog):
    new = tp4()
    del new["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SIZE]
    decision = run(new, example_catalog, operation="UPDATE", old=created(tp4(), example_catalog))
    assert decision.message == (
        f'{W_ANN}["kai.scheduler/segment-size"] is not set: the segment size of an existing workload cannot be '
        'removed (was "4") (rule immutable-field); fix: restore the old value, or delete and recreate the workload '
        "(or suspend it first: spec.runPolicy.suspend: true).")


# ------------------------------------------------------------------ UPDATE compares like with like

def test_update_from_04_to_4_is_no_change(example_catalog):
    assert run(tp4(size="4"), example_catalog, operation="UPDATE", old=tp4(size="04")).allowed
    d = run(tp4(size="04"), example_catalog, operation="UPDATE", old=tp4(size="4"))
    assert d.allowed and d.warnings == ['kai.scheduler/segment-size="04" written as "4"']


def test_update_from_04_to_8_is_a_change_shown_as_written(example_catalog):
    d = run(tp4(size="8"), example_catalog, operation="UPDATE", old=tp4(size="04"))
    assert [v.rule for v in d.violations] == ["immutable-field"]
    assert 'cannot change (was "04")' in d.message


def test_update_from_an_invalid_size_says_what_it_had(example_catalog):
    d = run(tp4(size="4"), example_catalog, operation="UPDATE", old=tp4(size="abc"))
    assert d.message == (
        f'{W_SIZE} = "4": the segment size of an existing workload cannot be added (it had "abc", not a valid '
        "segment size, so none was in force) (rule immutable-field); fix: remove it (the stored workload has no "
        "segment size in force), or delete and recreate the workload (or suspend it first: "
        "spec.runPolicy.suspend: true).")
    removed = tp4()
    del removed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SIZE]
    assert run(removed, example_catalog, operation="UPDATE", old=tp4(size="abc")).allowed  # the fix is admitted


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


# ------------------------------------------------------------------ nothing unchanged reads as changed

def _review_update(capsys, tmp_path, name, edit):
    import yaml

    from tests.conftest import EXAMPLES
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


# ------------------------------------------------------------------ a reinvocation changes nothing

def test_native_root_size_beaten_by_workers_per_segment_is_idempotent(example_catalog):
    # §3: workersPerSegment wins, a disagreeing annotation gets a warning; the reinvocation (which
    # sees the template value the webhook wrote) must not deny the root value it only warned about
    obj = load_example("distributedworkload-native.yaml")
    obj["metadata"]["annotations"] = {SIZE: "-1"}
    first = run(obj, example_catalog, AUTO)
    assert first.allowed and first.warnings == ['kai.scheduler/segment-size="-1" disagrees with workersPerSegment=8; '
                                                "overwritten", 'KAI flattens pods DistributedWorkload owns: segments (size 8, preferred level) not enforced; --gate-pods does']
    again = run(jsonpatch.apply_patch(obj, first.patch), example_catalog, AUTO)
    assert (again.allowed, again.patch) == (True, [])
    assert again.warnings == ['root kai.scheduler/segment-size="-1" ignored: workersPerSegment=8 wins', 'KAI flattens pods DistributedWorkload owns: segments (size 8, preferred level) not enforced; --gate-pods does']
