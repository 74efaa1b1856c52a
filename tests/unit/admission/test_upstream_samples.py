"""Upstream sample manifests as users paste them, with segment keys added (issue 37, "Done when").

Each file in ``tests/data/upstream_samples/`` is written here after one project's published sample at
its current release (the file's header names the repository, path, tag and commit, and the keys
added). Each goes through ``segment-webhook review`` exactly as the CLI runs it; the expected answer
is written out from DESIGN.md (section cited at each assertion), not taken from the code's output.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import yaml

from tests.support import paths
from tests.unit.admission.test_crd_schemas import _crd_schemas, errors
from webhook.cli import main

SAMPLES = paths.DATA / "upstream_samples"
TOPO = "kai.scheduler/topology"
SEG = "kai.scheduler/segment-size"
SEG_REQ = "kai.scheduler/segment-topology-required-placement"
WL_REQ = "kai.scheduler/topology-required-placement"
POLICY = "kai.scheduler/segment-leader-policy"
SUBGROUP = "kai.scheduler/subgroup-name"
GANG = "segments.dev/gang-size"
PARALLELISM = "segments.dev/job-parallelism"
SLICE_TOPO = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
RACK = "cloud.provider.com/topology-rack"


def review(capsys: Any, name: str, *flags: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Run ``segment-webhook review -f <sample> <flags>`` twice, as a user would: the JSON
    AdmissionReview response (allowed, warnings, status) and ``-o yaml`` (the patched object).
    Returns (exit code, response, patched object); the object is {} when denied."""
    path = str(SAMPLES / name)
    code = main(["review", "-f", path, *flags])
    out, _ = capsys.readouterr()
    response = json.loads(out)["response"]
    # §5: every AdmissionResponse warning is at most 120 characters
    assert all(len(w) <= 120 for w in response.get("warnings", [])), response["warnings"]
    obj: dict[str, Any] = {}
    if response["allowed"]:
        assert main(["review", "-f", path, *flags, "-o", "yaml"]) == 0
        obj = yaml.safe_load(capsys.readouterr()[0])
    return code, response, obj


def ann(template: dict[str, Any]) -> dict[str, str]:
    return dict((template.get("metadata") or {}).get("annotations") or {})


def labels(template: dict[str, Any]) -> dict[str, str]:
    return dict((template.get("metadata") or {}).get("labels") or {})


def denial(response: dict[str, Any]) -> str:
    assert response["allowed"] is False
    assert response["status"]["code"] == 403  # DESIGN.md §5: policy denials are 403
    return str(response["status"]["message"])


# ----------------------------------------------------------------- KAI docs/topology/segments.md

def test_kai_pytorchjob_tp4_as_documented_is_admitted_with_its_keys(capsys: Any) -> None:
    code, response, job = review(capsys, "kai_pytorchjob_tp4.yaml")
    assert (code, response["allowed"], response.get("warnings")) == (0, True, None)
    specs = job["spec"]["pytorchReplicaSpecs"]
    # §2/§4: the Worker template already carries every key; nothing changed, nothing added
    assert ann(specs["Worker"]["template"]) == {TOPO: "cluster-topology", SEG: "4", SEG_REQ: RACK}
    # §3: the Master is never segmented; §2: its subgroup is KAI's leaf name `master`
    assert ann(specs["Master"]["template"]) == {}
    assert labels(specs["Master"]["template"]) == {SUBGROUP: "master"}


def test_kai_pytorchjob_tp4_gate_pods_gang_is_master_plus_16_workers(capsys: Any) -> None:
    code, response, job = review(capsys, "kai_pytorchjob_tp4.yaml", "--gate-pods")
    assert (code, response.get("warnings")) == (0, None)
    specs = job["spec"]["pytorchReplicaSpecs"]
    # §9: PyTorchJob gang = Master + Workers = 1 + 16
    assert ann(specs["Master"]["template"])[GANG] == "17"
    assert ann(specs["Worker"]["template"])[GANG] == "17"
    assert ann(specs["Worker"]["template"])[SEG] == "4"


def test_kai_pytorchjob_tp4_kueue_slices_of_4_per_rack(capsys: Any) -> None:
    code, response, job = review(capsys, "kai_pytorchjob_tp4.yaml", "--target", "kueue")
    assert (code, response.get("warnings")) == (0, None)
    worker = ann(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    # §9b: segment level and size as podset-slice-required-topology + podset-slice-size (16 % 4 == 0)
    assert (worker[SLICE_TOPO], worker[SLICE_SIZE]) == (RACK, "4")
    assert SLICE_TOPO not in ann(job["spec"]["pytorchReplicaSpecs"]["Master"]["template"])


# ------------------------------------------------- Kueue site/static/examples/tas/sample-job-required

def test_kueue_tas_job_kai_warns_one_podgroup(capsys: Any) -> None:
    code, response, job = review(capsys, "kueue_tas_job_segment_keys.yaml")
    assert code == 0
    # §4.5: what KAI really does with it (one PodGroup for a Job) is said, naming gate mode
    assert response["warnings"] == [
        "KAI makes one PodGroup of a Job, no subgroups: it does not enforce these Job segments; --gate-pods does"]
    # §4.1/§2: every pod carries its full constraint: the root topology name on the template
    assert ann(job["spec"]["template"])[TOPO] == "cluster-topology"


def test_kueue_tas_job_gate_gang_10(capsys: Any) -> None:
    code, response, job = review(capsys, "kueue_tas_job_segment_keys.yaml", "--gate-pods")
    assert (code, response.get("warnings")) == (0, None)
    # §9: gang = parallelism 10 (an Indexed Job with parallelism = completions)
    assert ann(job["spec"]["template"])[GANG] == "10"


def test_kueue_tas_job_kueue_rack_podset_host_slices_of_5(capsys: Any) -> None:
    code, response, job = review(capsys, "kueue_tas_job_segment_keys.yaml", "--target", "kueue")
    assert (code, response.get("warnings")) == (0, None)
    pod = ann(job["spec"]["template"])
    # §9b: workload level -> podset-required-topology; segment level and size -> slice keys;
    # the same three annotations Kueue's own sample and TAS docs use (10 % 5 == 0: no partial slice)
    assert (pod["kueue.x-k8s.io/podset-required-topology"], pod[SLICE_TOPO], pod[SLICE_SIZE]) == (
        RACK, "kubernetes.io/hostname", "5")


def test_kueue_tas_job_as_kueue_writes_it_keeps_its_podset_level_and_gets_host_slices_of_5(capsys: Any) -> None:
    # Kueue's sample keeps its own podset-required-topology (rack) and the segment keys give no
    # workload level: nothing disagrees, so it stays, and §9b's slice keys are added below it
    # (before: denied "a Kueue topology annotation that disagrees with the resolved segments").
    code, response, job = review(capsys, "kueue_tas_job_required.yaml", "--target", "kueue")
    assert (code, response.get("warnings")) == (0, None)
    pod = ann(job["spec"]["template"])
    assert (pod["kueue.x-k8s.io/podset-required-topology"], pod[SLICE_TOPO], pod[SLICE_SIZE]) == (
        RACK, "kubernetes.io/hostname", "5")


# ------------------------------------------------- training-operator examples/pytorch/simple.yaml

def test_training_operator_simple_one_worker_cannot_hold_segments_of_2(capsys: Any) -> None:
    for flags in ((), ("--gate-pods",), ("--target", "kueue")):
        code, response, _ = review(capsys, "training_operator_pytorchjob_simple.yaml", *flags)
        message = denial(response)
        assert code == 1
        # §5: segment size > replica count (PyTorchJob: Worker replicas = 1) -> deny, naming
        # field, value, rule and fix
        assert message.startswith(
            'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "2": ')
        assert "(rule segment-size-exceeds-replicas)" in message
        assert "raise spec.pytorchReplicaSpecs.Worker.replicas to at least 2" in message


def test_training_operator_elastic_echo_says_what_scaling_does_per_target(capsys: Any) -> None:
    first = "Worker replicas may scale 1-2: a count segment size 2 does not divide gives a partial last segment"
    # §3b/§5: a partial last segment is allowed with a warning; issue 37: an elastic PyTorchJob
    # (elasticPolicy min 1, max 2) says what each target does with a count S does not divide
    # (KAI docs/topology/segments.md "Elasticity": segments beyond MinMember get MinMember 0)
    expected = {
        (): "scaled, KAI holds segments within minReplicas whole; later ones are elastic (MinMember 0), may run partly",
        ("--gate-pods",): "scaled, --gate-pods gangs the 2 pods written at CREATE: another count waits or is refused",
        ("--target", "kueue"): "scaled, target kueue slices the count Kueue admits; a partial last slice is refused"
                               " (gated) by Kueue v0.17",
    }
    for flags, warning in expected.items():
        code, response, job = review(capsys, "training_operator_pytorchjob_elastic_echo.yaml", *flags)
        assert (code, response["warnings"]) == (0, [first, warning]), flags
    # §9: no Master in this sample: the gang is the 2 workers
    assert ann(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])[SLICE_SIZE] == "2"
    _, _, gated = review(capsys, "training_operator_pytorchjob_elastic_echo.yaml", "--gate-pods")
    assert ann(gated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])[GANG] == "2"


# ----------------------------------------------------- LWS config/samples/leaderworkerset_v1_...

def test_lws_sample_without_keys_is_not_the_webhooks(capsys: Any) -> None:
    for flags in ((), ("--gate-pods",), ("--target", "kueue")):
        code, response, _ = review(capsys, "lws_sample_as_shipped.yaml", *flags)
        # §5 opt-in: no kai.scheduler/* key -> allowed, empty patch, no warning
        assert (code, response["allowed"]) == (0, True)
        assert "patch" not in response and "warnings" not in response


def test_lws_sample_segments_of_2_leader_in_segment_0(capsys: Any) -> None:
    code, response, lws = review(capsys, "lws_sample_segmented.yaml")
    assert (code, response.get("warnings")) == (0, None)
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    # §2: the leader policy is written; with no subGroupPolicy the LWS is LeaderWorker (size 4 % 2 == 0)
    assert ann(tmpl["workerTemplate"]) == {
        TOPO: "cluster-topology", SEG: "2", SEG_REQ: RACK, POLICY: "LeaderWorker"}
    # no leaderTemplate in the sample: the leader uses the workerTemplate, none is invented
    assert "leaderTemplate" not in tmpl


def test_lws_sample_gate_gang_is_one_group_of_4(capsys: Any) -> None:
    code, _, lws = review(capsys, "lws_sample_segmented.yaml", "--gate-pods")
    assert code == 0
    # §9: LWS gang = `size` per group
    assert ann(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])[GANG] == "4"


def test_lws_sample_kueue_slices_of_2(capsys: Any) -> None:
    code, response, lws = review(capsys, "lws_sample_segmented.yaml", "--target", "kueue")
    assert (code, response.get("warnings")) == (0, None)
    worker = ann(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    # §9b; with no leaderTemplate Kueue makes one PodSet of `size` 4 pods indexed by worker-index
    # (kueue v0.19.2 leaderworkerset_reconciler.go podSets), so slices {0,1},{2,3} = segments 0, 1
    assert (worker[SLICE_TOPO], worker[SLICE_SIZE]) == (RACK, "2")


def test_kai_lws_segment_size_wins_over_subgroupsize(capsys: Any) -> None:
    code, response, lws = review(capsys, "kai_lws_leaderworker_size_wins.yaml")
    assert code == 0
    # §3 "One answer for every reader": subGroupSize present and differing -> set to the resolved
    # size, with this warning; 5 % 4 != 0 but (5 - 1) % 4 == 0, so LWS accepts 4
    assert response["warnings"] == ["subGroupSize 2 set to 4 (kai.scheduler/segment-size wins)"]
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["subGroupPolicy"] == {"subGroupSize": 4, "subGroupPolicyType": "LeaderWorker"}
    keys = {TOPO: "cluster-topology", SEG: "4", SEG_REQ: RACK, POLICY: "LeaderWorker"}
    # §2: under LeaderWorker an explicit leaderTemplate receives the same segment keys
    assert ann(tmpl["workerTemplate"]) == keys
    assert ann(tmpl["leaderTemplate"]) == keys


def test_kai_lws_segment_size_wins_gate_gang_5(capsys: Any) -> None:
    code, _, lws = review(capsys, "kai_lws_leaderworker_size_wins.yaml", "--gate-pods")
    assert code == 0
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    # §9: LWS gang = `size` (5) per group, on the leader and the worker templates
    assert (ann(tmpl["leaderTemplate"])[GANG], ann(tmpl["workerTemplate"])[GANG]) == ("5", "5")


def test_kai_lws_segment_size_wins_kueue_names_the_leader(capsys: Any) -> None:
    code, response, lws = review(capsys, "kai_lws_leaderworker_size_wins.yaml", "--target", "kueue")
    assert code == 0
    # §9b: a leader Kueue places as its own PodSet (kueue v0.19.2 podSets: leaderTemplate set ->
    # leader PodSet of 1 + worker PodSet of size - 1) is named in a warning naming the target
    assert response["warnings"] == [
        "subGroupSize 2 set to 4 (kai.scheduler/segment-size wins)",
        "target kueue: the LWS leader is its own PodSet: Kueue does not hold it in segment 0's domain"]
    worker = ann(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    # §7 R=5, S=4: {L,1,2,3,4}; the 4 workers are one slice of 4
    assert (worker[SLICE_TOPO], worker[SLICE_SIZE]) == (RACK, "4")


# -------------------------------------------------- JobSet site/static/examples/pytorch/cnn-mnist

def test_jobset_mnist_segments_of_2_kai_warns_it_does_not_enforce_them(capsys: Any) -> None:
    code, response, js = review(capsys, "jobset_pytorch_mnist.yaml")
    assert code == 0
    # §3b: KAI enforces a JobSet segment only when S == parallelism; every other case is warned,
    # naming gate mode
    assert response["warnings"] == [
        "KAI enforces JobSet segments only of size = parallelism (4): it does not enforce these JobSet"
        " segments; --gate-pods does"]
    job = js["spec"]["replicatedJobs"][0]["template"]
    # §3b: the parallelism the pod index needs is written on the pod template
    assert ann(job["spec"]["template"])[PARALLELISM] == "4"
    # S != parallelism: no per-Job KAI keys
    assert ann(job) == {}


def test_jobset_mnist_segments_of_2_gate_pods_no_warning_gang_4(capsys: Any) -> None:
    code, response, js = review(capsys, "jobset_pytorch_mnist.yaml", "--gate-pods")
    assert (code, response.get("warnings")) == (0, None)
    # §9: a JobSet gang is one replicatedJob: replicas 1 x parallelism 4
    assert ann(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])[GANG] == "4"


def test_jobset_mnist_segments_of_2_kueue_slices(capsys: Any) -> None:
    code, response, js = review(capsys, "jobset_pytorch_mnist.yaml", "--target", "kueue")
    assert (code, response.get("warnings")) == (0, None)
    pod = ann(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    assert (pod[SLICE_TOPO], pod[SLICE_SIZE]) == (RACK, "2")  # §9b


def test_jobset_mnist_one_job_per_segment_gets_kais_per_job_keys(capsys: Any) -> None:
    code, response, js = review(capsys, "jobset_pytorch_mnist_one_job_per_segment.yaml")
    assert (code, response.get("warnings")) == (0, None)
    # §3b: S == parallelism (4): KAI's per-Job keys on replicatedJobs[0].template.metadata.annotations,
    # the workload level = the segment level; no warning
    assert ann(js["spec"]["replicatedJobs"][0]["template"]) == {TOPO: "cluster-topology", WL_REQ: RACK}


def test_jobset_paralleljobs_zone_kai_reads_the_root_level(capsys: Any) -> None:
    code, response, js = review(capsys, "jobset_paralleljobs_zone.yaml")
    assert code == 0
    # §3b: S=2 != parallelism 4 -> KAI does not enforce the segments; the root zone is KAI's
    # PodGroup level from the top owner (§4.5), nothing to warn about it
    assert response["warnings"] == [
        "KAI enforces JobSet segments only of size = parallelism (4): it does not enforce these JobSet"
        " segments; --gate-pods does"]
    workers = ann(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    # §4.1 inheritance + §2: the resolved topology name on the segmented template
    assert (workers[TOPO], workers[SEG], workers[SEG_REQ]) == ("cluster-topology", "2", RACK)


def test_jobset_paralleljobs_zone_is_one_gang_under_gate_and_workload_api(capsys: Any) -> None:
    for flags in (("--gate-pods",), ("--target", "workload-api")):
        code, response, js = review(capsys, "jobset_paralleljobs_zone.yaml", *flags)
        assert (code, response.get("warnings")) == (0, None), flags
        # §9b: a root workload level binds every group: held as one gang across workers (4) and
        # driver (1), so both templates carry gang size 5
        for k in (0, 1):
            pod = ann(js["spec"]["replicatedJobs"][k]["template"]["spec"]["template"])
            assert (pod[GANG], pod["segments.dev/topology-required-placement"]) == (
                "5", "topology.kubernetes.io/zone"), (flags, k)


def test_jobset_paralleljobs_zone_kueue_names_the_groups_it_does_not_bind(capsys: Any) -> None:
    code, response, js = review(capsys, "jobset_paralleljobs_zone.yaml", "--target", "kueue")
    assert code == 0
    # §9b: Kueue places each replicatedJob (PodSet) in its own domain: the warning names the
    # target and the groups
    assert response["warnings"] == [
        "target kueue: topology.kubernetes.io/zone holds each replicatedJob alone, not workers, driver together"]
    workers = ann(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    driver = ann(js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"])
    assert (workers["kueue.x-k8s.io/podset-required-topology"], workers[SLICE_TOPO], workers[SLICE_SIZE]) == (
        "topology.kubernetes.io/zone", RACK, "2")
    assert driver["kueue.x-k8s.io/podset-required-topology"] == "topology.kubernetes.io/zone"
    assert SLICE_TOPO not in driver


# -------------------------------------------------------- Trainer v2 examples/yaml/01-multi-node

def test_trainjob_multi_node_root_keys_reach_the_node_job(capsys: Any) -> None:
    code, response, tj = review(capsys, "trainer_trainjob_multi_node.yaml")
    assert (code, response.get("warnings")) == (0, None)
    # §3b TrainJob: through the webhook's own runtimePatches entry ...
    (patch,) = tj["spec"]["runtimePatches"]
    assert patch["manager"] == "segments.dev/segment-webhook"
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    pod = ann(node["template"]["spec"]["template"])
    assert (pod[TOPO], pod[SEG], pod[SEG_REQ], pod[PARALLELISM]) == ("cluster-topology", "3", RACK, "3")
    # S == parallelism == numNodes 3: KAI's per-Job keys (as JobSet, §3b)
    assert ann(node["template"]) == {TOPO: "cluster-topology", WL_REQ: RACK}
    # ... and through spec.annotations (Trainer v2.0.0), scoped to the trainer job `node`
    assert tj["spec"]["annotations"] == {
        TOPO: "cluster-topology", SEG: "3", SEG_REQ: RACK, "segments.dev/trainer-job": "node"}


def test_trainjob_multi_node_gate_gang_is_the_3_nodes(capsys: Any) -> None:
    code, _, tj = review(capsys, "trainer_trainjob_multi_node.yaml", "--gate-pods")
    assert code == 0
    node = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    # §9: the gang is the trainer replicatedJob: numNodes 3
    assert ann(node["template"]["spec"]["template"])[GANG] == "3"


def test_trainjob_multi_node_kueue_cannot_read_it(capsys: Any) -> None:
    code, response, _ = review(capsys, "trainer_trainjob_multi_node.yaml", "--target", "kueue")
    # issue 37 ("Kueue cannot read a TrainJob's template") and §9b: a constraint a target cannot
    # express is denied, never admitted to wait
    assert code == 1
    assert "(rule target-cannot-express)" in denial(response)


# ------------------------------------------- KubeRay ray-operator/config/samples/ray-cluster.sample

def test_raycluster_sample_one_worker_cannot_hold_segments_of_2(capsys: Any) -> None:
    for flags in ((), ("--gate-pods",), ("--target", "kueue")):
        code, response, _ = review(capsys, "kuberay_raycluster_sample.yaml", *flags)
        message = denial(response)
        assert code == 1
        # §3b N = replicas x numOfHosts = 1 x 1; §5 segment size > replica count -> deny
        assert message.startswith(
            'spec.workerGroupSpecs[0].template.metadata.annotations["kai.scheduler/segment-size"] = "2": ')
        assert "(rule segment-size-exceeds-replicas)" in message


def test_raycluster_zone_kai_is_silent(capsys: Any) -> None:
    code, response, _ = review(capsys, "kuberay_raycluster_zone.yaml")
    # §4.5: KAI reads the PodGroup level from the top owner (head and workers): nothing lost
    assert (code, response["allowed"], response.get("warnings")) == (0, True, None)


def test_raycluster_zone_every_other_target_names_the_head(capsys: Any) -> None:
    # §9b: the Ray head group is placed apart (not gated; its own PodSet): the warning names the
    # target and the head
    expected = {
        ("--gate-pods",): "--gate-pods does not gate the Ray head: topology.kubernetes.io/zone binds the worker groups only",
        ("--target", "kueue"): "target kueue: the Ray head is its own PodSet, not held in the workers'"
                               " topology.kubernetes.io/zone domain",
        ("--target", "workload-api"): "target workload-api does not hold the Ray head: topology.kubernetes.io/zone"
                                      " binds the worker groups only",
    }
    for flags, warning in expected.items():
        code, response, _ = review(capsys, "kuberay_raycluster_zone.yaml", *flags)
        assert (code, response["warnings"]) == (0, [warning]), flags


# ------------------------------------------------------ mpi-operator examples/v2beta1/pi/pi.yaml

def test_mpijob_pi_kai_warns_flat_podgroups(capsys: Any) -> None:
    code, response, mpi = review(capsys, "mpi_operator_mpijob_pi.yaml")
    assert code == 0
    # §3b: KAI keeps flat PodGroups for MPIJob: warned, naming gate mode; no subgroup-name written
    assert response["warnings"] == [
        "KAI keeps MPIJob PodGroups flat: it does not enforce these MPIJob segments; --gate-pods does"]
    specs = mpi["spec"]["mpiReplicaSpecs"]
    assert ann(specs["Worker"]["template"]) == {TOPO: "cluster-topology", SEG: "2", SEG_REQ: RACK}
    assert SUBGROUP not in labels(specs["Worker"]["template"])


def test_mpijob_pi_gate_gang_is_the_2_workers_launcher_not_gated(capsys: Any) -> None:
    code, response, mpi = review(capsys, "mpi_operator_mpijob_pi.yaml", "--gate-pods")
    assert (code, response.get("warnings")) == (0, None)
    specs = mpi["spec"]["mpiReplicaSpecs"]
    # §9: an MPIJob's gang is its segmented pods (2 workers); a launcher that is not a worker is not gated
    assert ann(specs["Worker"]["template"])[GANG] == "2"
    assert GANG not in ann(specs["Launcher"]["template"])


def test_mpijob_pi_kueue_one_slice_of_2(capsys: Any) -> None:
    code, response, mpi = review(capsys, "mpi_operator_mpijob_pi.yaml", "--target", "kueue")
    assert (code, response.get("warnings")) == (0, None)
    worker = ann(mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"])
    assert (worker[SLICE_TOPO], worker[SLICE_SIZE]) == (RACK, "2")  # §9b


def test_every_sample_names_its_source() -> None:
    for path in sorted(SAMPLES.rglob("*.yaml")):
        head = path.read_text().split("apiVersion:")[0]
        assert "Source:" in head and "commit" in head and "Keys added" in head, path


def test_every_sample_and_its_admitted_form_fit_the_upstream_crds(capsys: Any) -> None:
    """Each corpus file of a CRD kind validates against the upstream CRD in shared/crds (what a
    user pastes is upstream-valid), and so does the object the webhook admits (default target).
    Mapping of the schemas: tests/unit/admission/test_crd_schemas.py (structural schema -> JSON Schema, unknown
    fields fail instead of being pruned, defaults not applied)."""
    # KubeRay v1.7.0's sample omits minReplicas/maxReplicas, which the CRD marks required with a
    # default (0 / 2147483647): kube-apiserver applies the default before validating, this check does not
    ray_defaulted = ["spec/workerGroupSpecs/0: 'maxReplicas' is a required property",
                     "spec/workerGroupSpecs/0: 'minReplicas' is a required property"]
    # §3b TrainJob: spec.annotations is the Trainer v2.0/v2.1 path; current Trainer (the CRD here,
    # v2.2+) has runtimePatches instead and kube-apiserver prunes spec.annotations
    trainjob_pruned = ["spec: Additional properties are not allowed ('annotations' was unexpected)"]
    schemas = _crd_schemas()
    checked = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        schema = schemas.get((obj["apiVersion"], obj["kind"]))
        if schema is None:  # batch/v1 Job
            continue
        validator = jsonschema.Draft7Validator(schema)
        expected_input = ray_defaulted if obj["kind"] == "RayCluster" else []
        assert errors(validator, obj) == expected_input, path.name
        code, _, admitted = review(capsys, path.name)
        if code == 0:
            expected_admitted = trainjob_pruned if obj["kind"] == "TrainJob" else expected_input
            assert errors(validator, admitted) == expected_admitted, path.name
        checked.append(obj["kind"])
    assert sorted(set(checked)) == ["JobSet", "LeaderWorkerSet", "MPIJob", "PyTorchJob", "RayCluster", "TrainJob"]
