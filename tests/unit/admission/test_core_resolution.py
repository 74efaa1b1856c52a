"""The resolution of one workload is built once and never changed (docs/concepts/ARCHITECTURE.md, "The flow
of one review").

A kind reads its object into one immutable ``SegmentInputs`` (a size stated by a spec field is one
``SpecSizeField``, an LWS group's shape one ``LwsGroup``); ``constraints.resolve`` returns an
immutable ``Resolution`` with a ``SegmentSize`` value object; what a kind adds after it (the LWS
"one answer for every reader" edits, DESIGN.md §3) is its own result; an UPDATE analyses the
stored object once and ``check_update`` returns its violations.
"""

from __future__ import annotations

import pytest

from tests.conftest import SIZE, load_example, make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds import distributedworkload, leaderworkerset, pytorchjob
from webhook.admission.kinds._workload import CREATE, check_update
from webhook.admission.resolution import LwsGroup, SegmentSize, SpecSizeField
from webhook.admission.review import review
from webhook.admission.verdict import Decision
from webhook.admission.workload_plan import NO_READER_EDITS, ReaderEdits
from webhook.planning.manifests import load_topology_files

CATALOG = load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")])
PLAIN = AdmissionSettings()
WORKER_SIZE = 'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"]'  # README
SUB_GROUP_SIZE = "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"


def tp4(size: str = "4", workers: int = 16) -> dict:
    obj = load_example("pytorchjob-tp4.yaml")
    worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = workers
    worker["template"]["metadata"]["annotations"][SIZE] = size
    return obj


def analysed(module, obj):
    decision = Decision(kind=module.KIND)
    plan = module.analyse(obj, make_request(obj), CATALOG, PLAIN, decision, update=CREATE)
    return plan, decision


def test_the_segment_size_is_one_value_object_with_where_and_how_it_was_written():
    plan, decision = analysed(pytorchjob, tp4(size="04"))
    assert plan.resolution.size == SegmentSize(raw="04", field=WORKER_SIZE, origin="annotation", requested=4, valid=4)
    assert plan.resolution.size_in_force == 4
    assert decision.warnings == ['kai.scheduler/segment-size="04" written as "4"']


def test_a_size_too_large_is_requested_but_not_valid_nor_in_force():
    plan, decision = analysed(pytorchjob, tp4(size="32"))
    assert (plan.resolution.size.requested, plan.resolution.size.valid, plan.resolution.size_in_force) == (32, None, None)
    assert [v.rule for v in decision.violations] == ["segment-size-exceeds-replicas"]


def test_the_resolution_cannot_be_changed_after_it_is_built():
    plan, _ = analysed(pytorchjob, tp4())
    with pytest.raises(AttributeError):
        plan.resolution.size_in_force = None
    with pytest.raises(AttributeError):
        plan.resolution.size.valid = 2


def test_the_inputs_cannot_be_changed_after_they_are_built():
    plan, _ = analysed(pytorchjob, tp4())
    inputs = plan.resolution.inputs
    with pytest.raises(AttributeError):
        inputs.pods = 2
    assert (inputs.spec_size, inputs.lws_group) == (None, None)  # a PyTorchJob has neither


def test_a_spec_field_size_and_the_lws_group_are_one_value_each():
    plan, _ = analysed(leaderworkerset, load_example("lws-segmented.yaml"))  # size 5, subGroupSize 2
    inputs = plan.resolution.inputs
    assert inputs.spec_size == SpecSizeField(field=SUB_GROUP_SIZE, written=2, value=2, wins=False)
    assert inputs.lws_group == LwsGroup(size=5, policy="LeaderWorker",
                                        policy_field="spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType",
                                        validates_size=True)
    native, _ = analysed(distributedworkload, load_example("distributedworkload-native.yaml"))
    assert native.resolution.inputs.spec_size == SpecSizeField(field="spec.workersPerSegment", written=8, value=8,
                                                               wins=True)
    assert native.resolution.inputs.lws_group is None


def test_a_spec_field_its_reader_denied_is_kept_as_written():
    obj = load_example("lws-segmented.yaml")
    obj["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupSize"] = "2"
    plan, decision = analysed(leaderworkerset, obj)
    assert plan.resolution.inputs.spec_size == SpecSizeField(field=SUB_GROUP_SIZE, written="2", value=None, wins=False)
    assert plan.resolution.inputs.lws_group.validates_size is False
    assert [v.rule for v in decision.violations] == ["malformed-object"]
    del obj["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupSize"]
    plan, _ = analysed(leaderworkerset, obj)
    assert plan.resolution.inputs.spec_size is None  # not written: no spec-field size at all


def test_the_lws_one_answer_edits_are_their_own_result():
    obj = load_example("lws-segmented.yaml")  # size 5, subGroupSize 2
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"][SIZE] = "4"
    plan, decision = analysed(leaderworkerset, obj)
    assert plan.reader_edits == ReaderEdits(
        spec_values=((("spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupSize"), 4),),
        root_annotations={}, overwritten_inputs=frozenset({SUB_GROUP_SIZE}))
    assert plan.resolution.size_in_force == 4
    assert decision.warnings == ["subGroupSize 2 set to 4 (kai.scheduler/segment-size wins)"]


def test_a_kind_without_reader_edits_has_none():
    plan, _ = analysed(pytorchjob, tp4())
    assert plan.reader_edits is NO_READER_EDITS


def test_check_update_returns_the_violations_and_records_nothing():
    stored, _ = analysed(pytorchjob, tp4(size="4"))
    new, _ = analysed(pytorchjob, tp4(size="8"))
    violations = check_update(stored, new, kind="PyTorchJob")
    assert [(v.rule, v.field) for v in violations] == [("immutable-field", WORKER_SIZE)]
    assert violations[0].message == (
        f'{WORKER_SIZE} = "8": the segment size of an existing workload cannot change (was "4") '
        "(rule immutable-field); fix: restore the old value, or delete and recreate the workload "
        "(or suspend it first: spec.runPolicy.suspend: true).")
    assert check_update(stored, new, kind="PyTorchJob", denied_fields=[WORKER_SIZE]) == []
    assert check_update(stored, stored, kind="PyTorchJob") == []


def test_an_update_analyses_the_stored_object_once(monkeypatch):
    calls = []
    original = pytorchjob.analyse

    def counting(obj, *args, **kwargs):
        calls.append(obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])
        return original(obj, *args, **kwargs)

    monkeypatch.setattr(pytorchjob, "analyse", counting)
    stored = review(make_request(tp4()), CATALOG, PLAIN)
    assert stored.allowed
    calls.clear()
    decision = review(make_request(tp4(workers=32), "UPDATE", old=tp4()), CATALOG, PLAIN)
    assert decision.allowed, decision.message
    assert calls == [16, 32]  # the stored object once, then the new one


def test_scaling_a_running_job_below_its_size_gets_the_update_fix_in_place():
    # §5: the size rule's fix on an UPDATE that keeps the size names only changes the webhook
    # admits; the violation is recorded so by the analysis itself, in its place among the others
    decision = review(make_request(tp4(workers=2), "UPDATE", old=tp4()), CATALOG, PLAIN)
    assert [v.rule for v in decision.violations] == ["segment-size-exceeds-replicas"]
    assert decision.message == (
        f'{WORKER_SIZE} = "4": the segment size exceeds the 2 Worker replicas '
        "(spec.pytorchReplicaSpecs.Worker.replicas) (rule segment-size-exceeds-replicas); fix: keep "
        "spec.pytorchReplicaSpecs.Worker.replicas at least 4 (a running workload keeps its segment size 4), or "
        "suspend the job (spec.runPolicy.suspend: true) to change the segment size, or delete and recreate the "
        "workload.")
