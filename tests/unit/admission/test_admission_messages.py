"""Admission answers that misled a user (issue 37, "Answers that mislead" and "Tried as a new user"),
each with its input and the exact text expected."""

from __future__ import annotations

from tests.conftest import make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.admission.verdict import Decision
from webhook.topology.objects import default_catalog

CATALOG = default_catalog()
PLAIN = AdmissionSettings()
TOPO, SIZE = "kai.scheduler/topology", "kai.scheduler/segment-size"
SEG_REQ = "kai.scheduler/segment-topology-required-placement"
RACK = "cloud.provider.com/topology-rack"


def pytorchjob(worker_meta: dict, spec: bool = True) -> dict:
    obj: dict = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "lab", "namespace": "a"}}
    if spec:
        obj["spec"] = {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}},
            "Worker": {"replicas": 8, "template": {"metadata": worker_meta,
                                                   "spec": {"containers": [{"name": "w", "image": "i"}]}}}}}
    return obj


def test_a_pytorchjob_without_spec_that_opted_in_is_denied_and_one_that_did_not_is_left_alone():
    obj = pytorchjob({}, spec=False)
    assert review(make_request(obj), CATALOG, PLAIN).allowed  # no key: not the webhook's (§5 opt-in)
    obj["metadata"]["annotations"] = {TOPO: "cluster-topology", SIZE: "4"}
    d = review(make_request(obj), CATALOG, PLAIN)
    assert d.message == ("spec is not set: must be an object (it is required) (rule malformed-object); fix: send an "
                         "object (it is required) at spec.")
    assert d.code == 400


def test_a_label_denial_comes_without_the_warning_that_the_key_is_missing():
    # before: "Warning: kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology ..." then the
    # denial "move it to ...annotations[kai.scheduler/topology]"
    d = review(make_request(pytorchjob({"labels": {TOPO: "cluster-topology"}, "annotations": {SIZE: "4"}})),
               CATALOG, PLAIN)
    assert d.warnings == []
    assert [v.rule for v in d.violations] == ["placement-key-as-label"]
    d = review(make_request(pytorchjob({"labels": {SIZE: "4"}, "annotations": {TOPO: "cluster-topology",
                                                                               SEG_REQ: RACK}})), CATALOG, PLAIN)
    assert d.warnings == []  # before: "segment placement ignored: no kai.scheduler/segment-size is set"
    assert [v.rule for v in d.violations] == ["placement-key-as-label"]


def _job(name: str, replicas: int, parallelism: int) -> dict:
    return {"name": name, "replicas": replicas, "template": {"spec": {
        "parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}}


def jobset(*jobs: dict, root: dict | None = None) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "a", "annotations": root or {}},
            "spec": {"replicatedJobs": list(jobs)}}


def test_one_job_has_no_segments_straddling_jobs():
    obj = jobset(_job("workers", 1, 4), root={TOPO: "cluster-topology", SIZE: "3"})
    d = review(make_request(obj), CATALOG, PLAIN)
    assert d.allowed
    assert d.warnings == ["4 pods of replicatedJob workers / segment size 3: last segment has 1 pod",
                          "KAI enforces JobSet segments only of size = parallelism (4): it does not enforce these "
                          "JobSet segments; --gate-pods does"]


def test_a_jobset_root_size_denial_names_the_usual_fix_and_one_pod_in_the_singular():
    obj = jobset(_job("driver", 1, 1), _job("workers", 2, 4), root={TOPO: "cluster-topology", SIZE: "4"})
    d = review(make_request(obj), CATALOG, PLAIN)
    assert d.message == (
        'metadata.annotations["kai.scheduler/segment-size"] = "4": the segment size exceeds the 1 pod of '
        "replicatedJob driver (spec.replicatedJobs[0].replicas × parallelism) (rule segment-size-exceeds-replicas); "
        "fix: set kai.scheduler/segment-size on the pod templates of the replicatedJobs to segment instead of "
        "metadata.annotations (every one inherits it), or raise spec.replicatedJobs[0].replicas × parallelism to "
        "at least 4 (the segment size), or remove kai.scheduler/segment-size for no segments.")


def test_a_long_warning_is_cut_between_words():
    decision = Decision(kind="Job")
    decision.warn(("word " * 30).strip())  # 149 characters; the 120th is a space
    assert decision.warnings == [("word " * 24).strip() + "…"]  # 119 + 1
    decision = Decision(kind="Job")
    decision.warn("ab " + ("word " * 30).strip())  # the 120th character is inside a word
    assert decision.warnings == ["ab " + ("word " * 23).strip() + "…"]  # 117 + 1: never "wo…"
    decision = Decision(kind="Job")
    decision.warn("x" * 130)  # no space to cut at: cut at 119
    assert decision.warnings == ["x" * 119 + "…"]


def test_the_kai_flat_gang_warning_keeps_its_fix_at_its_longest():
    # before: "KAI makes DistributedWorkload one flat gang: segment size 10000 and segment required/preferred
    # levels not enforced; --gate-pods…" (cut at 120, the fix lost); and it said all of the object's pods
    # lose their segments, while KAI enforces them on pods whose owner chain does not reach it
    from tests.conftest import load_example

    obj = load_example("distributedworkload-native.yaml")
    obj["spec"]["workers"], obj["spec"]["workersPerSegment"] = 20000, 10000
    obj["spec"]["worker"]["template"]["metadata"] = {"annotations": {
        SEG_REQ: "cloud.provider.com/topology-block", "kai.scheduler/segment-topology-preferred-placement": RACK}}
    obj["metadata"]["annotations"] = {TOPO: "cluster-topology"}
    d = review(make_request(obj), CATALOG, PLAIN)
    assert d.allowed, d.message
    assert d.warnings == ["KAI flattens pods DistributedWorkload owns: segments (size 10000, both levels) not enforced; "
                          "--gate-pods does"]


def elastic_pytorchjob() -> dict:
    obj = pytorchjob({"annotations": {SIZE: "2"}})
    obj["metadata"]["annotations"] = {TOPO: "cluster-topology"}
    del obj["spec"]["pytorchReplicaSpecs"]["Master"]
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    obj["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d"}
    return obj


PARTIAL = "Worker replicas may scale 1-3: a count segment size 2 does not divide gives a partial last segment"


def test_an_elastic_pytorchjob_is_told_of_partial_segments_and_what_each_target_does():
    # before: admitted with no warning at all
    said = {}
    for target in ("kai", "gate", "workload-api", "kueue"):
        settings = AdmissionSettings(target=target, gate_pods=target == "gate")
        d = review(make_request(elastic_pytorchjob()), CATALOG, settings)
        assert d.allowed, d.message
        said[target] = d.warnings
    assert said == {
        "kai": [PARTIAL, "scaled, KAI holds segments within minReplicas whole; later ones are elastic (MinMember 0), may run "
                         "partly"],
        "gate": [PARTIAL, "scaled, --gate-pods gangs the 2 pods written at CREATE: another count waits or is refused"],
        "workload-api": [PARTIAL, "scaled, target workload-api gangs the 2 pods written at CREATE: another count waits or "
                                  "is refused"],
        "kueue": [PARTIAL, "scaled, target kueue slices the count Kueue admits; a partial last slice is refused (gated) by "
                           "Kueue v0.17"],
    }


def test_an_autoscaled_ray_group_is_told_of_partial_segments():
    from tests.unit.admission.test_kinds_ray import raycluster

    obj = raycluster(size="4")
    obj["spec"]["enableInTreeAutoscaling"] = True
    group = obj["spec"]["workerGroupSpecs"][0]
    group["minReplicas"], group["maxReplicas"] = 1, 3
    d = review(make_request(obj), CATALOG, AdmissionSettings(target="gate", gate_pods=True))
    assert d.allowed, d.message
    # pods = replicas × numOfHosts (2): 1-3 replicas are 2-6 pods
    assert d.warnings[:2] == ["worker group gpu may scale 2-6: a count segment size 4 does not divide gives a "
                              "partial last segment",
                              "scaled, --gate-pods gangs the 8 pods written at CREATE: another count waits or is refused"]


def test_a_key_with_one_word_left_out_is_a_misspelling_not_an_unknown_key():
    # trial 2026-12-07: "kai.scheduler/segment-topology-required" (no "-placement") was only warned
    # "unknown key ... ignored" and the object admitted with segments but no segment level.
    for written in ("kai.scheduler/segment-topology-required", "kai.scheduler/segment-required-placement",
                    "kai.scheduler/segment_topology_required"):
        d = review(make_request(pytorchjob({"annotations": {TOPO: "cluster-topology", SIZE: "4", written: RACK}})),
                   CATALOG, PLAIN)
        assert not d.allowed, written
        assert d.message == (
            f'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["{written}"] = '
            '"cloud.provider.com/topology-rack": not a key KAI reads but close to '
            "kai.scheduler/segment-topology-required-placement, so this constraint would be lost "
            "(rule misspelled-key); fix: rename the key to kai.scheduler/segment-topology-required-placement.")
    d = review(make_request(pytorchjob({"annotations": {TOPO: "cluster-topology", SIZE: "4",
                                                        "kai.scheduler/topology-required": "topology.kubernetes.io/zone"}})),
               CATALOG, PLAIN)
    assert [v.rule for v in d.violations] == ["misspelled-key"]
    assert "rename the key to kai.scheduler/topology-required-placement." in d.message


def test_a_kai_key_two_words_away_or_of_one_shared_word_stays_a_warning():
    for written in ("kai.scheduler/segment-foo", "kai.scheduler/topology-name", "kai.scheduler/queue-name"):
        d = review(make_request(pytorchjob({"annotations": {TOPO: "cluster-topology", SIZE: "4", written: "x"}})),
                   CATALOG, PLAIN)
        assert d.allowed, (written, d.message)
        assert any(written in w for w in d.warnings), d.warnings
