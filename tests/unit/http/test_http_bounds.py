"""Bounded answers (docs/concepts/admission.md "Every rejection a user can meet"): a review with 50,000 violations
gets a message under 4 KiB, not a 14.5 MB denial. ``Decision.message`` lists at most 20 violations in full and counts every violation by
rule; warnings and the uid are bounded; the whole AdmissionReview answer is at most 64 KiB.

The limits are the README's: message well under 4 KiB, answer <= 64 KiB, the first 20 in full.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from webhook.admission.config import AdmissionSettings
from webhook.admission.verdict import Decision
from webhook.http import envelope
from webhook.http.app import create_app
from webhook.http.metrics import ReviewMetrics
from webhook.topology.objects import default_catalog

KIB = 1024
WORKER_ANNOTATIONS = {
    "kai.scheduler/topology": "cluster-topology",
    "kai.scheduler/segment-size": "4",
    "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-rack",
}


@pytest.fixture(autouse=True)
def _single_process_metrics(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


def pytorchjob_review(worker_annotations: dict, uid: str = "uid-50k") -> dict:
    """CREATE of a 16-worker PyTorchJob whose Worker template carries ``worker_annotations``."""
    template = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}
    job = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "big", "namespace": "team-a"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": template},
            "Worker": {"replicas": 16, "template": {"metadata": {"annotations": worker_annotations}, **template}},
        }},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "operation": "CREATE", "namespace": "team-a", "userInfo": {"username": "alice"}, "object": job}}


def post(review_fn=None, body=None):
    app = create_app(default_catalog(), AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()),
                     review_fn=review_fn)
    return app.test_client().post("/mutate", data=body if isinstance(body, (bytes, str)) else json.dumps(body),
                                  content_type="application/json")


def test_50000_integer_annotations_are_denied_by_the_core_with_a_bounded_answer_counting_every_violation():
    """The core's answer (``envelope.handle``, as ``segment-webhook review`` runs it); over HTTP the
    same review is answered from its size alone (below)."""
    annotations: dict[str, object] = dict(WORKER_ANNOTATIONS)
    annotations.update({f"example.com/a{i}": i for i in range(50_000)})  # integers: not strings
    outcome = envelope.handle(json.dumps(pytorchjob_review(annotations)).encode(), default_catalog(),
                              AdmissionSettings())
    assert outcome.http_status == 200
    assert len(json.dumps(outcome.body, separators=(",", ":"))) <= 64 * KIB
    body: Mapping[str, Any] = outcome.body  # an AdmissionReview (http_status 200)
    answer = body["response"]
    assert answer["uid"] == "uid-50k" and answer["allowed"] is False
    assert answer["status"]["code"] == 400
    message = answer["status"]["message"]
    assert len(message.encode()) < 4 * KIB
    assert message.startswith("50000 problems: (1) ")
    # the first ones in full, naming field and value; every violation counted under its rule id
    assert 'annotations["example.com/a0"] = 0: must be a string' in message
    assert message.endswith("; all 50000 by rule: malformed-object ×50000")
    listed = message.count("(rule malformed-object)")
    assert 1 <= listed <= 20
    assert f"… and {50_000 - listed} more;" in message


def decision_with(violations: list[tuple[str, str]]) -> Decision:
    decision = Decision(kind="PyTorchJob")
    for rule, text in violations:
        decision.deny(rule, "spec", text)
    return decision


def test_message_lists_at_most_20_violations_then_counts_all_by_rule():
    decision = decision_with([("rule-a", f"problem {i}") for i in range(25)] + [("rule-b", "other")] * 5)
    assert decision.message == (
        "30 problems: " + " ".join(f"({i + 1}) problem {i}" for i in range(20))
        + " … and 10 more; all 30 by rule: rule-a ×25, rule-b ×5")


def test_message_of_a_few_violations_lists_them_all_without_a_tail():
    assert decision_with([("a", "first"), ("b", "second")]).message == "2 problems: (1) first (2) second"
    assert decision_with([("a", "only")]).message == "only"


def test_long_violation_messages_are_clipped_and_the_message_stays_under_4_kib():
    decision = decision_with([("rule-a", "x" * 10_000)] * 30)
    message = decision.message
    assert len(message.encode()) < 4 * KIB
    assert message.startswith("30 problems: (1) " + "x" * 100)
    assert message.endswith("; all 30 by rule: rule-a ×30")
    one = decision_with([("rule-a", "y" * 10_000)]).message
    assert len(one) < 4 * KIB and one.endswith("…")


def test_warnings_are_bounded_to_20_with_a_count_of_the_rest():
    decision = Decision(kind="PyTorchJob")
    for i in range(50):
        decision.warn(f"warning number {i}")
    answer = post(review_fn=lambda *a, **k: decision, body=pytorchjob_review(dict(WORKER_ANNOTATIONS))).get_json()
    warnings = answer["response"]["warnings"]
    assert warnings == [f"warning number {i}" for i in range(19)] + ["… and 31 more warnings"]


def test_a_patch_too_large_for_the_answer_is_denied_not_sent():
    decision = Decision(kind="PyTorchJob", patch=[
        {"op": "add", "path": f"/metadata/annotations/example.com~1k{i}", "value": "v" * 100} for i in range(2000)])
    resp = post(review_fn=lambda *a, **k: decision, body=pytorchjob_review(dict(WORKER_ANNOTATIONS)))
    assert resp.status_code == 200 and len(resp.data) <= 64 * KIB
    answer = resp.get_json()["response"]
    assert answer["allowed"] is False and "patch" not in answer
    assert answer["status"]["code"] == 500
    assert "JSONPatch of 2000 operations" in answer["status"]["message"]
    assert "65536-byte answer limit" in answer["status"]["message"]


def test_uid_longer_than_128_characters_is_not_echoed():
    resp = post(body=pytorchjob_review(dict(WORKER_ANNOTATIONS), uid="u" * 100_000))
    assert resp.status_code == 400
    assert len(resp.data) < 4 * KIB
    assert resp.get_json()["field"] == "request.uid"


def test_malformed_review_echoing_a_huge_value_is_clipped():
    review = pytorchjob_review(dict(WORKER_ANNOTATIONS))
    review["apiVersion"] = "v" * 1_000_000
    outcome = envelope.handle(json.dumps(review), default_catalog(), AdmissionSettings())
    body: Mapping[str, Any] = outcome.body  # an AdmissionReview: the uid is readable
    assert body["response"]["status"]["code"] == 400
    assert len(json.dumps(body)) <= 64 * KIB
    assert body["response"]["status"]["message"].startswith("malformed AdmissionReview: apiVersion is ")


# ------------------------------------------------------------------ answered from its size alone (docs/tasks/operations.md "Serving")
# kube-apiserver: the annotations of one object total at most 256 KiB = 262,144 bytes of keys and
# values (k8s.io/apimachinery ValidateAnnotationsSize: TotalAnnotationSizeLimitB = 256 * (1 << 10);
# "if totalSize > TotalAnnotationSizeLimitB" → Too long).

def pod_review(annotations: dict, uid: str = "uid-pod") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "team-a", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations},
                   "spec": {"containers": [{"name": "c", "image": "i"}]}}}}


class Recorder:
    """A review function that records that it ran and allows."""

    def __init__(self):
        self.calls = 0

    def __call__(self, request, catalog, settings, *, mutate=True):
        self.calls += 1
        return Decision(kind="Pod")


OVERSIZED_DENIAL = (
    "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations = 1127926: bytes of keys and values, over "
    "kube-apiserver's 262144-byte (256 KiB) limit: Kubernetes refuses every pod of this template, and the placement "
    "keys were not reviewed (rule annotations-too-large); fix: remove annotations from "
    "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations until they total at most 262144 bytes.")


def test_an_opted_in_50000_annotation_review_is_denied_from_its_size_alone():
    """It carries placement keys (DESIGN.md §5 "Opt-in"): its pods could never be created and its
    keys are not reviewed, so it is denied, not stored as if they had been (new-user trial)."""
    annotations: dict[str, object] = dict(WORKER_ANNOTATIONS)
    annotations.update({f"example.com/a{i}": i for i in range(50_000)})  # integers: not strings
    recorder = Recorder()
    answer = post(recorder, pytorchjob_review(annotations)).get_json()["response"]
    assert recorder.calls == 0
    assert answer == {"uid": "uid-50k", "allowed": False,
                      "status": {"code": 403, "reason": "Forbidden", "message": OVERSIZED_DENIAL}}
    # 1,127,926 = the three segment keys (38 + 27 + 81 bytes) + 50,000 keys "example.com/aN" (13 bytes + the
    # digits of N) + 50,000 values (the digits of N): 146 + 50,000 × 13 + 2 × 238,890 digits of 0..49,999
    assert 146 + 50_000 * 13 + 2 * sum(len(str(i)) for i in range(50_000)) == 1127926


def test_a_placement_key_on_the_root_opts_the_oversized_template_in():
    annotations = {f"example.com/a{i}": i for i in range(50_000)}
    review = pytorchjob_review(annotations)
    review["request"]["object"]["metadata"]["annotations"] = {"kai.scheduler/topology": "cluster-topology"}
    answer = post(Recorder(), review).get_json()["response"]
    assert answer["allowed"] is False and "(rule annotations-too-large)" in answer["status"]["message"]


def test_an_oversized_review_without_a_placement_key_is_allowed_unpatched_with_a_warning():
    """Not opted in (no key of DESIGN.md §2 anywhere; a kai.scheduler/ key that is not one does not
    opt in either): never denied, answered from its size alone."""
    annotations: dict[str, object] = {f"example.com/a{i}": i for i in range(50_000)}
    annotations["kai.scheduler/queue"] = "team-a"
    recorder = Recorder()
    answer = post(recorder, pytorchjob_review(annotations)).get_json()["response"]
    assert recorder.calls == 0
    assert answer == {"uid": "uid-50k", "allowed": True, "warnings": [
        "…Worker.template.metadata.annotations: 1127805 bytes > 262144, Kubernetes' limit; not reviewed: "
        "remove annotations"]}
    # the 50,000 example.com keys and values (1,127,780 bytes) + "kai.scheduler/queue" (19) + "team-a" (6)
    assert 50_000 * 13 + 2 * sum(len(str(i)) for i in range(50_000)) + 19 + 6 == 1127805


@pytest.mark.parametrize("value_bytes, reviewed", [(262144 - 15, True), (262145 - 15, False)])
def test_the_limit_is_262144_bytes_of_keys_and_values(value_bytes, reviewed):
    """Key ``example.com/big`` (15 bytes) plus its value: 262,144 bytes is kube-apiserver's limit and
    is reviewed; one byte more is answered from its size."""
    recorder = Recorder()
    answer = post(recorder, pod_review({"example.com/big": "x" * value_bytes})).get_json()["response"]
    assert recorder.calls == (1 if reviewed else 0)
    assert answer["allowed"] is True
    if not reviewed:
        assert answer["warnings"] == ["metadata.annotations: 262145 bytes > 262144, Kubernetes' limit; not reviewed: "
                                      "remove annotations"]


def test_annotation_bytes_are_utf8_bytes_not_characters():
    """'é' is 2 bytes in UTF-8: 15 + 2 × 131,065 = 262,145 bytes in 131,080 characters."""
    recorder = Recorder()
    answer = post(recorder, pod_review({"example.com/big": "é" * 131_065})).get_json()["response"]
    assert recorder.calls == 0
    assert answer["warnings"][0].startswith("metadata.annotations: 262145 bytes > 262144")


def test_nested_templates_are_measured_and_named_by_their_path():
    from webhook.http.bounds import oversized_annotations

    big = {"example.com/big": "x" * 262_200}
    jobset = {"metadata": {"name": "js"}, "spec": {"replicatedJobs": [
        {"name": "a", "template": {"spec": {"template": {"metadata": {"annotations": {"k": "v"}}}}}},
        {"name": "b", "template": {"spec": {"template": {"metadata": {"annotations": big}}}}},
    ]}}
    assert oversized_annotations(jobset) == ("spec.replicatedJobs[1].template.spec.template.metadata.annotations",
                                             15 + 262_200)
    assert oversized_annotations({"metadata": {"annotations": {"k": "v"}}, "spec": {"x": [1, [2, {"y": None}]]}}) is None


def test_a_large_review_runs_apart_and_a_small_one_does_not():
    """Bodies over 32 KiB go to the server's run_apart (webhook.http.wsgi_extensions.RUN_APART)."""
    ran_apart = []

    def run_apart(function, *args):
        ran_apart.append(getattr(function, "func", function))  # the review, bound to its arguments
        return function(*args)

    app = create_app(default_catalog(), AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()),
                     review_fn=Recorder())
    client = app.test_client()
    for annotations in ({"example.com/a": "x"}, {"example.com/a": "x" * 40_000}):
        resp = client.post("/mutate", data=json.dumps(pod_review(annotations)), content_type="application/json",
                           environ_base={"segment_webhook.run_apart": run_apart})
        assert resp.get_json()["response"]["allowed"] is True
    from webhook.http import envelope

    assert ran_apart == [envelope.handle]


# ------------------------------------------------------------------ the work bound (issue 37 item 9)
# docs/decisions/review-work-bound.md: at most 10,000 entries in one map or items in one list,
# 256 members that carry a `template` in one map or list, 200,000 entries and items in all.

OPT_IN = {"kai.scheduler/topology": "cluster-topology"}


def labelled_pod_review(count: int, annotations: dict, operation: str = "CREATE") -> dict:
    review = pod_review(annotations)
    review["request"]["operation"] = operation
    review["request"]["object"]["metadata"]["labels"] = {f"example.com/label-{i}": "v" for i in range(count)}
    return review


LABELS_DENIAL = (
    "metadata.labels = 50000: that many entries, over this webhook's limit of 10000 per map or list, a bound on the work of "
    "one review; the object was not reviewed, its placement keys included (rule too-many-items); fix: keep "
    "metadata.labels at most 10000 entries.")


def test_an_opted_in_pod_with_50000_labels_is_denied_from_the_count_alone():
    """The hostile pod of issue 37: 50,000 small labels, far under the 3 MiB body limit."""
    recorder = Recorder()
    answer = post(recorder, labelled_pod_review(50_000, OPT_IN)).get_json()["response"]
    assert recorder.calls == 0
    assert answer == {"uid": "uid-pod", "allowed": False,
                      "status": {"code": 403, "reason": "Forbidden", "message": LABELS_DENIAL}}


def test_a_pod_with_50000_labels_and_no_placement_key_is_allowed_unreviewed_with_a_warning():
    """Never deny what did not opt in: no patch, the core not run, one warning."""
    recorder = Recorder()
    answer = post(recorder, labelled_pod_review(50_000, {"example.com/a": "b"})).get_json()["response"]
    assert recorder.calls == 0
    assert answer == {"uid": "uid-pod", "allowed": True, "warnings": [
        "metadata.labels: 50000 entries > 10000, this webhook's limit; not reviewed: remove some"]}


@pytest.mark.parametrize("count, reviewed", [(10_000, True), (10_001, False)])
def test_the_limit_is_10000_entries_in_one_map(count, reviewed):
    recorder = Recorder()
    answer = post(recorder, labelled_pod_review(count, OPT_IN)).get_json()["response"]
    assert recorder.calls == (1 if reviewed else 0)
    assert answer["allowed"] is reviewed


def test_managed_fields_written_by_kube_apiserver_are_not_counted():
    """The real kube-apiserver sends metadata.managedFields, whose fieldsV1 mirrors every label set
    (10,001 labels: a 10,002-entry map there). The cluster test found the denial named that path
    while `review` named the labels; kube-apiserver's own field is not counted."""
    review = labelled_pod_review(10_000, OPT_IN)
    labels = review["request"]["object"]["metadata"]["labels"]
    review["request"]["object"]["metadata"]["managedFields"] = [{
        "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, **{f"f:{key}": {} for key in labels}}}}}]
    recorder = Recorder()
    answer = post(recorder, review).get_json()["response"]
    assert recorder.calls == 1 and answer["allowed"] is True
    labels["example.com/label-10000"] = "v"
    answer = post(Recorder(), review).get_json()["response"]
    assert answer["status"]["message"] == LABELS_DENIAL.replace("50000", "10001")


def test_the_old_object_of_an_update_is_not_counted():
    """An UPDATE that brings a stored object back under the limits must pass."""
    review = labelled_pod_review(3, OPT_IN, operation="UPDATE")
    review["request"]["oldObject"] = labelled_pod_review(50_000, OPT_IN)["request"]["object"]
    recorder = Recorder()
    assert post(recorder, review).get_json()["response"]["allowed"] is True
    assert recorder.calls == 1


def jobset_review(groups: int) -> dict:
    """A JobSet whose root opts in, with ``groups`` replicatedJobs (each a Job template)."""
    jobs = [{"name": f"r{i}", "replicas": 1, "template": {"spec": {"parallelism": 4, "completions": 4, "template": {
        "spec": {"containers": [{"name": "c", "image": "i"}]}}}}} for i in range(groups)]
    job = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
           "metadata": {"name": "js", "namespace": "team-a", "annotations": OPT_IN}, "spec": {"replicatedJobs": jobs}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "uid-js", "kind": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
        "operation": "CREATE", "namespace": "team-a", "userInfo": {"username": "alice"}, "object": job}}


@pytest.mark.parametrize("groups, reviewed", [(256, True), (257, False)])
def test_the_limit_is_256_groups_in_one_list(groups, reviewed):
    recorder = Recorder()
    answer = post(recorder, jobset_review(groups)).get_json()["response"]
    assert recorder.calls == (1 if reviewed else 0)
    if not reviewed:
        assert answer["status"]["message"] == (
            "spec.replicatedJobs = 257: that many members that carry a pod template, over this webhook's limit of 256 per map "
            "or list, a bound on the work of one review; the object was not reviewed, its placement keys included "
            "(rule too-many-items); fix: keep spec.replicatedJobs at most 256 groups.")


def test_the_limit_is_200000_entries_and_items_in_all():
    """21 lists of 10,000 items each (each within the per-list limit). The walk counts the root's 4
    keys, then its metadata (walked first: 2 keys, name and annotations; the annotations' 1 entry),
    spec's 21 keys, then one list after the other, and passes 200,000 at the 20th list:
    4 + 2 + 1 + 21 + 20 × 10,000 = 200,028."""
    review = pod_review(OPT_IN)
    obj = review["request"]["object"]
    obj["spec"] = {f"l{i}": [0] * 10_000 for i in range(21)}
    assert len(obj) == 4  # apiVersion, kind, metadata, spec
    recorder = Recorder()
    answer = post(recorder, review).get_json()["response"]
    assert recorder.calls == 0
    assert answer["status"]["message"] == (
        "request.object = 200028: that many entries and items of all its maps and lists, over this webhook's limit of 200000, "
        "a bound on the work of one review; the object was not reviewed, its placement keys included (rule "
        "too-many-items); fix: remove fields until the object holds at most 200000 entries and items.")


def test_a_body_with_fewer_than_256_commas_is_not_walked():
    from webhook.http.bounds import needs_bounds

    assert needs_bounds(b"," * 255) is False
    assert needs_bounds(b"," * 256) is True
    assert needs_bounds(b" " * (256 * 1024 + 1)) is True  # the size bound's body


def test_segment_webhook_review_answers_the_same(tmp_path, capsys):
    """``segment-webhook review -f`` runs the core behind the same bounds: exit 1, the same denial."""
    from webhook.cli import main

    path = tmp_path / "pod.json"
    path.write_text(json.dumps(labelled_pod_review(50_000, OPT_IN)["request"]["object"]), encoding="utf-8")
    assert main(["review", "-f", str(path)]) == 1
    assert LABELS_DENIAL in capsys.readouterr().out
