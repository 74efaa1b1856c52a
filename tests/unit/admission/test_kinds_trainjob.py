"""TrainJob (trainer.kubeflow.org/v1alpha1) through the webhook (DESIGN.md §3b, §9).

Facts (issue 18, the TrainJob CRD in ../shared/crds): a TrainJob's pods are the pods of the JobSet
its runtime builds (``numNodes`` = parallelism of the trainer Job ``node``, replicas 1); the
TrainJob's own annotations are not copied to that JobSet; ``spec.runtimePatches`` is a list keyed
by ``manager`` that may set the pod template metadata of a replicatedJob; the node rank is the
completion index.
"""

from __future__ import annotations

import jsonpatch
import pytest
import yaml

from tests.conftest import SEG_REQ, SIZE, TOPO, WL_REQ, make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.topology.objects import StaticTopologyCatalog, Topology

MANIFESTS = paths.DATA / "manifests"
RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
TOPOLOGY = Topology("cluster-topology", ("topology.kubernetes.io/zone", "cloud.provider.com/topology-block", RACK, HOST))
CATALOG = StaticTopologyCatalog([TOPOLOGY])
MANAGER = "segments.dev/segment-webhook"
NOT_ENFORCED = "KAI enforces only size = numNodes (16): it does not enforce these TrainJob segments; --gate-pods does"


def trainjob(size="4", nodes=16):
    obj = yaml.safe_load((MANIFESTS / "trainjob-torch.yaml").read_text())
    obj["metadata"]["annotations"][SIZE] = size
    obj["spec"]["trainer"]["numNodes"] = nodes
    return obj


def run(obj, settings=AdmissionSettings(), **kw):
    return review(make_request(obj, **kw), CATALOG, settings)


def own_entry(obj):
    (entry,) = [e for e in obj["spec"].get("runtimePatches", []) if e["manager"] == MANAGER]
    (rjob,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return rjob


def test_the_keys_go_into_the_webhooks_own_runtime_patches_entry_on_the_trainer_job():
    d = run(trainjob())
    assert d.allowed and d.warnings == [NOT_ENFORCED]
    out = jsonpatch.apply_patch(trainjob(), d.patch)
    rjob = own_entry(out)
    assert rjob["name"] == "node"
    assert rjob["template"] == {"spec": {"template": {"metadata": {"annotations": {
        TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK, "segments.dev/job-parallelism": "16"}}}}}
    assert out["metadata"] == trainjob()["metadata"]  # the root is left as written
    assert "subgroup-name" not in str(out)


def test_size_equal_to_num_nodes_gets_kais_per_job_keys():
    d = run(trainjob(size="16"))
    assert d.allowed and d.warnings == []
    assert own_entry(jsonpatch.apply_patch(trainjob(size="16"), d.patch))["template"]["metadata"] == {
        "annotations": {TOPO: "cluster-topology", WL_REQ: RACK}}


def test_other_entries_are_kept_and_a_named_trainer_job_is_used():
    obj = trainjob()
    obj["metadata"]["annotations"]["segments.dev/trainer-job"] = "trainer"
    other = {"manager": "kueue.x-k8s.io/kueue", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"a": "b"}}}}}
    obj["spec"]["runtimePatches"] = [other]
    out = jsonpatch.apply_patch(obj, run(obj).patch)
    assert out["spec"]["runtimePatches"][0] == other
    assert own_entry(out)["name"] == "trainer"


def test_re_review_of_the_admitted_object_is_an_empty_patch():
    out = jsonpatch.apply_patch(trainjob(), run(trainjob()).patch)
    assert run(out).patch == []
    assert run(out, operation="UPDATE", old=out).patch == []


def test_re_review_of_what_each_trainer_schema_stored_is_an_empty_patch():
    """DESIGN.md §11 (re-review of a stored object: empty patch) on both Trainer schemas: v2.2+
    prunes spec.annotations and keeps runtimePatches; v2.0/v2.1 prune runtimePatches and keep
    spec.annotations (the cluster test on the v2.2+ CRD of ../shared/crds found the webhook
    re-adding spec.annotations at every re-review)."""
    admitted = jsonpatch.apply_patch(trainjob(), run(trainjob()).patch)
    assert set(admitted["spec"]) >= {"annotations", "runtimePatches"}
    v2_2 = {**admitted, "spec": {k: v for k, v in admitted["spec"].items() if k != "annotations"}}
    v2_0 = {**admitted, "spec": {k: v for k, v in admitted["spec"].items() if k != "runtimePatches"}}
    for stored in (v2_2, v2_0):
        assert run(stored).patch == []
        assert run(stored, operation="UPDATE", old=stored).patch == []
    # before: the v2.2+ object got spec.annotations added again, the v2.0 one runtimePatches


def test_segment_size_above_num_nodes_is_denied_naming_it():
    d = run(trainjob(size="17"))
    assert [v.rule for v in d.violations] == ["segment-size-exceeds-replicas"]
    assert d.message.startswith('metadata.annotations["kai.scheduler/segment-size"] = "17": the segment size exceeds '
                                "the 16 trainer nodes (spec.trainer.numNodes)")


def test_without_num_nodes_the_size_is_not_checked_and_a_warning_says_so():
    obj = trainjob()
    del obj["spec"]["trainer"]["numNodes"]
    d = run(obj)
    assert d.allowed
    assert "spec.trainer.numNodes not set: the runtime's node count decides; segment size not checked" in d.warnings


def test_update_of_the_segment_size_is_immutable():
    stored = jsonpatch.apply_patch(trainjob(), run(trainjob()).patch)
    d = run(trainjob(size="8"), operation="UPDATE", old=stored)
    assert [v.rule for v in d.violations] == ["immutable-field"]
    assert d.violations[0].field == 'metadata.annotations["kai.scheduler/segment-size"]'


def test_gate_mode_writes_the_gang_facts_at_create_and_keeps_them_on_update():
    d = run(trainjob(size="16"), AdmissionSettings(gate_pods=True))
    out = jsonpatch.apply_patch(trainjob(size="16"), d.patch)
    ann = own_entry(out)["template"]["spec"]["template"]["metadata"]["annotations"]
    assert ann["segments.dev/gang-size"] == "16"
    assert run(out, AdmissionSettings(gate_pods=True), operation="UPDATE", old=out).patch == []


def test_pods_of_the_trainjob_are_indexed_as_jobset_pods_by_node_rank():
    # the pod of node rank 9 of the TrainJob's JobSet (job-index 0), template annotations from the entry
    labels = {"jobset.sigs.k8s.io/jobset-name": "llama-ft", "jobset.sigs.k8s.io/replicatedjob-name": "node",
              "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": "9"}
    out = jsonpatch.apply_patch(trainjob(), run(trainjob()).patch)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "llama-ft-node-0-9-abcde", "namespace": "team-a", "labels": labels,
                        "annotations": own_entry(out)["template"]["spec"]["template"]["metadata"]["annotations"]},
           "spec": {"containers": [{"name": "node", "image": "i"}]}}
    d = run(pod)
    assert jsonpatch.apply_patch(pod, d.patch)["metadata"]["labels"]["kai.scheduler/segment-index"] == "2"  # 9 // 4


def test_a_trainjob_without_placement_keys_is_not_the_webhooks():
    obj = trainjob()
    del obj["metadata"]["annotations"]
    d = run(obj)
    assert d.allowed and d.patch == [] and d.warnings == []


# ------------------------------------------------------------------------- place: the Trainer's JobSet
# Rules (kubeflow/trainer 8c0f505, the commit of ../shared/crds): the JobSet is named as the TrainJob;
# the trainer replicatedJob (Job template labelled trainjob-ancestor-step: trainer) runs numNodes pods
# (parallelism = completions = numNodes, replicas 1); resourcesPerNode is merged over the resources of
# its container `node`; runtimePatches merge over the runtime's JobSet spec (lists keyed by name merge,
# tolerations are replaced). Its pods are JobSet pods: <jobset>-<rjob>-<job-index>-<completion-index>.
RUNTIME = MANIFESTS / "clustertrainingruntime-torch.yaml"
GPU = "nvidia.com/gpu"


def runtime():
    return yaml.safe_load(RUNTIME.read_text())


@pytest.fixture
def rack_cluster(tmp_path):
    """1 zone, 1 block, 4 racks of 4 nodes of 8 GPUs, nothing bound: 16 nodes."""
    from webhook.cli import main

    path = tmp_path / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "4", "--nodes", "4", "--gpus", "8",
                 "--fill", "0", "-o", str(path)]) == 0
    return str(path)


def place(capsys, *files, cluster, extra=()):
    import json

    from webhook.cli import main

    args = ["place", "--cluster", cluster, "-o", "json", *extra]
    for f in files:
        args += ["-f", str(f)]
    code = main(args)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else None), err


def write(tmp_path, name, *objects):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(objects)))
    return path


def test_place_without_the_runtime_exits_2_saying_how_to_pass_it(tmp_path, capsys, rack_cluster):
    code, _, err = place(capsys, write(tmp_path, "tj.yaml", trainjob()), cluster=rack_cluster)
    assert code == 2
    assert "spec.runtimeRef: a TrainJob's pod templates are its runtime's, the ClusterTrainingRuntime " \
           "torch-distributed, which is not among the documents given (runtimes given: none)" in err
    assert "pass the runtime as another document: `place -f trainjob.yaml -f runtime.yaml`" in err


@pytest.mark.parametrize("same_file", [True, False])
def test_place_builds_the_trainers_jobset_and_places_each_segment_of_4_node_ranks_in_a_rack(
        tmp_path, capsys, rack_cluster, same_file):
    files = ([write(tmp_path, "both.yaml", trainjob(), runtime())] if same_file
             else [MANIFESTS / "trainjob-torch.yaml", RUNTIME])
    code, res, err = place(capsys, *files, cluster=rack_cluster)
    assert code == 0, err
    # 16 pods of Job llama-ft-node-0 (replicas 1, parallelism = numNodes 16), each taking a whole
    # node (resourcesPerNode: 8 GPUs), node rank c in segment c // 4, each segment in one rack
    assert sorted(res["assignments"]) == sorted(f"team-a/llama-ft-node-0-{c}" for c in range(16))
    assert len(set(res["assignments"].values())) == 16
    assert [s["pods"] for s in res["segments"]] == [[f"team-a/llama-ft-node-0-{c}" for c in range(4 * k, 4 * k + 4)]
                                                    for k in range(4)]
    assert [s["level"] for s in res["segments"]] == [RACK] * 4
    assert len({s["domain"] for s in res["segments"]}) == 4
    for s in res["segments"]:
        assert {res["assignments"][p].rsplit("-", 1)[0] for p in s["pods"]} == {s["domain"].replace("rack", "node")}
    assert f"Warning: TrainJob llama-ft: {NOT_ENFORCED}" in err


def expansion(obj, rt, settings=AdmissionSettings()):
    from webhook.planning.expand import expand

    return expand(obj, CATALOG, settings, runtimes=[rt])


def test_the_expanded_pods_are_jobset_pods_with_the_trainjobs_resources_and_segment_labels():
    exp = expansion(trainjob(), runtime())
    assert exp.expanded_kind == "JobSet" and len(exp.pods) == 16
    pod = exp.pods[9]
    assert pod["metadata"]["name"] == "llama-ft-node-0-9" and pod["metadata"]["namespace"] == "team-a"
    labels = pod["metadata"]["labels"]
    assert {k: labels[k] for k in ("jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name",
                                   "jobset.sigs.k8s.io/job-index", "batch.kubernetes.io/job-completion-index",
                                   "kai.scheduler/segment-index")} == {
        "jobset.sigs.k8s.io/jobset-name": "llama-ft", "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": "9",
        "kai.scheduler/segment-index": "2"}
    assert "kai.scheduler/subgroup-name" not in labels
    (container,) = pod["spec"]["containers"]
    # the runtime's requests, the TrainJob's resourcesPerNode limits merged over them
    assert container["resources"] == {"requests": {"cpu": "16", "memory": "64Gi"}, "limits": {GPU: 8}}
    assert pod["metadata"]["annotations"]["segments.dev/job-parallelism"] == "16"


def test_the_jobset_takes_num_nodes_from_the_runtime_when_the_trainjob_has_none():
    from webhook.admission.kinds.trainingruntime import jobset_for

    obj = trainjob()
    del obj["spec"]["trainer"]["numNodes"]
    rt = runtime()
    rt["spec"]["mlPolicy"]["numNodes"] = 3
    (rjob,) = jobset_for(obj, rt)["spec"]["replicatedJobs"]
    assert (rjob["replicas"], rjob["template"]["spec"]["parallelism"], rjob["template"]["spec"]["completions"]) == (1, 3, 3)


def test_under_mpi_with_the_launcher_as_a_node_the_node_job_runs_num_nodes_minus_one():
    from webhook.admission.kinds.trainingruntime import jobset_for

    rt = runtime()
    rt["spec"]["mlPolicy"] = {"numNodes": 1, "mpi": {"runLauncherAsNode": True}}
    launcher = {"name": "launcher", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}}
    rt["spec"]["template"]["spec"]["replicatedJobs"].insert(0, launcher)
    js = jobset_for(trainjob(nodes=5), rt)
    assert [(rj["name"], rj["template"]["spec"]["parallelism"]) for rj in js["spec"]["replicatedJobs"]] == [
        ("launcher", 1), ("node", 4)]


def test_runtime_patches_merge_over_the_runtime_as_the_trainer_merges_them():
    from webhook.admission.kinds.trainingruntime import jobset_for

    rt = runtime()
    pod_spec = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod_spec["tolerations"] = [{"key": "a", "operator": "Exists"}]
    pod_spec["nodeSelector"] = {"pool": "gpu"}
    obj = trainjob()
    obj["spec"]["runtimePatches"] = [{"manager": "kueue.x-k8s.io/kueue", "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"zone": "z1"}, "tolerations": [{"key": "b", "operator": "Exists"}],
            "containers": [{"name": "node", "resources": {"requests": {"cpu": "4"}}}]}}}}}]}}}}]
    js = jobset_for(obj, rt)
    assert js["metadata"]["labels"] == {"team": "a"}
    spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "gpu", "zone": "z1"}  # maps merge
    assert spec["tolerations"] == [{"key": "b", "operator": "Exists"}]  # an atomic list is replaced
    (container,) = spec["containers"]  # containers merge by name
    assert container["image"] == "registry.example.com/train/torch:2.5"
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "64Gi"}, "limits": {GPU: 8}}


def test_an_initializer_job_gets_one_replica_and_its_own_gang():
    rt = runtime()
    init = {"name": "dataset-initializer", "replicas": 3, "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "i"}]}}}}}
    rt["spec"]["template"]["spec"]["replicatedJobs"].insert(0, init)
    exp = expansion(trainjob(), rt)
    assert [len(g.pods) for g in exp.gangs] == [1, 16]
    assert exp.pods[0]["metadata"]["name"] == "llama-ft-dataset-initializer-0-0"


@pytest.mark.parametrize("change, needle", [
    (lambda tj, rt: rt["metadata"].update(name="other"),
     "the ClusterTrainingRuntime torch-distributed, which is not among the documents given (runtimes given: "
     "ClusterTrainingRuntime other)"),
    (lambda tj, rt: tj["spec"]["runtimeRef"].update(kind="TrainingRuntime"),
     "the TrainingRuntime torch-distributed in namespace team-a, which is not among the documents given"),
    (lambda tj, rt: tj["metadata"]["annotations"].update({"segments.dev/trainer-job": "trainer"}),
     "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[name=trainer] (manager "
     "segments.dev/segment-webhook): the ClusterTrainingRuntime torch-distributed has no replicatedJob \"trainer\" "
     "(it has node)"),
    (lambda tj, rt: tj["spec"]["runtimeRef"].update(apiGroup="example.com"),
     'spec.runtimeRef.apiGroup: "example.com" is not trainer.kubeflow.org'),
    (lambda tj, rt: rt["spec"]["template"]["spec"].update(replicatedJobs=[]),
     "ClusterTrainingRuntime torch-distributed: spec.template.spec.replicatedJobs: missing or empty"),
])
def test_place_names_a_runtime_it_cannot_use(tmp_path, capsys, rack_cluster, change, needle):
    tj, rt = trainjob(), runtime()
    change(tj, rt)
    code, _, err = place(capsys, write(tmp_path, "both.yaml", tj, rt), cluster=rack_cluster)
    assert code == 2
    assert needle in err


def test_a_namespaced_runtime_is_found_in_the_trainjobs_namespace(tmp_path, capsys, rack_cluster):
    tj, rt = trainjob(), runtime()
    tj["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    rt["kind"] = "TrainingRuntime"
    rt["metadata"]["namespace"] = "team-a"
    code, res, err = place(capsys, write(tmp_path, "both.yaml", tj, rt), cluster=rack_cluster)
    assert code == 0, err
    assert len(res["assignments"]) == 16


def test_a_runtime_given_with_another_kind_is_bad_input(tmp_path, capsys, rack_cluster):
    job = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
           "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"parallelism": 2, "template": {
               "spec": {"containers": [{"name": "c"}]}}}}}]}}
    code, _, err = place(capsys, write(tmp_path, "both.yaml", job, runtime()), cluster=rack_cluster)
    assert code == 2
    assert ("ClusterTrainingRuntime torch-distributed: a training runtime is read only with a TrainJob, and the "
            "workload is a JobSet; fix: leave the runtime out") in err


def test_merge_patch_follows_strategic_merge_for_the_fields_a_runtime_patch_may_set():
    from webhook.admission.kinds.trainingruntime import merge_patch

    base = {"nodeSelector": {"a": "1", "b": "2"}, "tolerations": [{"key": "x"}],
            "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}], "serviceAccountName": "s"}
    patch = {"nodeSelector": {"b": None, "c": "3"},  # null removes a member
             "tolerations": [{"key": "y"}],  # not keyed: replaced
             "containers": [{"name": "node", "env": [{"name": "B", "value": "2"}]},  # keyed: merged by name
                            {"name": "sidecar", "image": "s"}],  # a new name: appended
             "serviceAccountName": "t"}
    assert merge_patch(base, patch) == {
        "nodeSelector": {"a": "1", "c": "3"}, "tolerations": [{"key": "y"}],
        "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                       {"name": "sidecar", "image": "s"}],
        "serviceAccountName": "t"}
    assert base["nodeSelector"] == {"a": "1", "b": "2"}  # the inputs are not changed


# ------------------------------------------------------------------ errors name the file and the document
# (new-user trial: `place -f trainjob.yaml -f runtime.yaml` named the TrainJob's file for an error in
# the runtime, and listed two workloads of two files as "document 1" and "document 1")

def _without(err):
    """stderr without the webhook's warnings."""
    return "".join(line for line in err.splitlines(keepends=True) if not line.startswith("Warning: "))


def _broken_pod_template(tj, rt):
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["tolerations"] = "x"


@pytest.mark.parametrize("change, in_runtime, message", [
    (lambda tj, rt: rt["spec"]["template"]["spec"].update(replicatedJobs=[]), True,
     "ClusterTrainingRuntime torch-distributed: spec.template.spec.replicatedJobs: missing or empty; the runtime "
     "has no Jobs to run"),
    (_broken_pod_template, True,
     "Pod llama-ft-node-0-0: ClusterTrainingRuntime torch-distributed: spec.template.spec.replicatedJobs[0].template."
     "spec.template.spec.tolerations must be an array of objects, not a string"),
    (lambda tj, rt: rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"].pop("template"), True,
     "ClusterTrainingRuntime torch-distributed: spec.template.spec.replicatedJobs[0].template.spec.template.spec: "
     "the pod template has no spec"),
    (lambda tj, rt: tj["metadata"]["annotations"].update({"segments.dev/trainer-job": "trainer"}), False,
     "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[name=trainer] (manager "
     "segments.dev/segment-webhook): the ClusterTrainingRuntime torch-distributed has no replicatedJob \"trainer\" "
     "(it has node); fix: name one of its replicatedJobs (for the webhook's entry: the TrainJob annotation "
     "segments.dev/trainer-job)"),
    # merged over the runtime's container, but written in the TrainJob: its field, its file
    (lambda tj, rt: tj["spec"]["trainer"]["resourcesPerNode"]["limits"].update({"nvidia.com/gpu": "lots"}), False,
     'spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: "lots" is not a Kubernetes quantity (examples: '
     '"500m", "2", "64Gi", "1e3"); fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, Ti) and no spaces'),
])
def test_an_error_names_the_file_and_document_of_the_object_it_is_in(tmp_path, capsys, rack_cluster, change,
                                                                       in_runtime, message):
    tj, rt = trainjob(), runtime()
    change(tj, rt)
    tj_path, rt_path = write(tmp_path, "tj.yaml", tj), write(tmp_path, "rt.yaml", rt)
    code, _, err = place(capsys, tj_path, rt_path, cluster=rack_cluster)
    assert code == 2
    assert _without(err) == f"segment-webhook place: error: {rt_path if in_runtime else tj_path}: document 1: {message}\n"
    both = write(tmp_path, "both.yaml", tj, rt)  # one file: the document tells them apart
    code, _, err = place(capsys, both, cluster=rack_cluster)
    assert code == 2
    assert _without(err) == f"segment-webhook place: error: {both}: document {2 if in_runtime else 1}: {message}\n"


def test_two_workloads_of_two_files_are_each_named_by_file_and_document(tmp_path, capsys, rack_cluster):
    job = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"}, "spec": {}}
    tj_path, other = write(tmp_path, "tj.yaml", trainjob()), write(tmp_path, "other.yaml", runtime(), job)
    code, _, err = place(capsys, tj_path, other, cluster=rack_cluster)
    assert code == 2
    assert err == (f"segment-webhook place: error: {tj_path}, {other}: expected exactly one workload object, found 2 "
                   f"({tj_path}: document 1: TrainJob llama-ft; {other}: document 2: JobSet js); fix: give one "
                   "workload (a PyTorchJob, LeaderWorkerSet, JobSet, ... with its training runtime for a TrainJob) "
                   "per command\n")



# ------------------------------------------------------------------ Trainer v2.0.0 / v2.1: spec.annotations
# kubeflow/trainer v2.0.0 pkg/apis/trainer/v1alpha1/trainjob_types.go: TrainJobSpec has `annotations`
# ("Annotations to apply for the derivative JobSet and Jobs") and no `runtimePatches` (added in v2.2.0,
# where `annotations` is gone); pkg/runtime/core/trainingruntime.go newRuntimeInfo copies
# spec.annotations over the runtime's template annotations, and plugins/jobset Build sets them as the
# JobSet's metadata.annotations. kube-apiserver prunes the field a version's schema lacks.
TRAINER_JOB = "segments.dev/trainer-job"


def test_the_keys_also_go_into_spec_annotations_for_trainer_v2_0_naming_the_trainer_job():
    d = run(trainjob())
    out = jsonpatch.apply_patch(trainjob(), d.patch)
    assert out["spec"]["annotations"] == {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK, TRAINER_JOB: "node"}
    assert {"op": "add", "path": "/spec/annotations",
            "value": {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK, TRAINER_JOB: "node"}} in d.patch


def test_a_workload_level_on_the_root_goes_into_spec_annotations_too():
    obj = trainjob()
    obj["metadata"]["annotations"][WL_REQ] = "cloud.provider.com/topology-block"
    out = jsonpatch.apply_patch(obj, run(obj).patch)
    assert out["spec"]["annotations"] == {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK,
                                          WL_REQ: "cloud.provider.com/topology-block", TRAINER_JOB: "node"}


def test_the_users_own_spec_annotations_are_kept_and_a_differing_key_is_denied():
    obj = trainjob()
    obj["spec"]["annotations"] = {"team": "ml"}
    out = jsonpatch.apply_patch(obj, run(obj).patch)
    assert out["spec"]["annotations"] == {"team": "ml", TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK,
                                          TRAINER_JOB: "node"}
    obj["spec"]["annotations"] = {SIZE: "8"}
    d = run(obj)
    assert [v.rule for v in d.violations] == ["trainjob-spec-annotation-differs"]
    assert d.message.startswith('spec.annotations["kai.scheduler/segment-size"] = "8": the TrainJob\'s '
                                'metadata.annotations resolve it to "4"')


def test_spec_annotations_once_written_are_the_webhooks_and_follow_the_root():
    stored = jsonpatch.apply_patch(trainjob(), run(trainjob()).patch)
    assert run(stored).patch == []
    unsegmented = jsonpatch.apply_patch(stored, [])
    del unsegmented["metadata"]["annotations"][SIZE]
    del unsegmented["metadata"]["annotations"][SEG_REQ]
    out = jsonpatch.apply_patch(unsegmented, run(unsegmented).patch)
    assert out["spec"]["annotations"] == {}
    assert "runtimePatches" not in out["spec"] or out["spec"]["runtimePatches"] == []


def trainer_v2_0_jobset(root_annotations, num_nodes=16):
    """The JobSet Trainer v2.0.0 builds for llama-ft from the torchtune-llama3.2-1b runtime
    (manifests/base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml at v2.0.0: dataset-initializer,
    model-initializer, node): metadata.annotations = the TrainJob's spec.annotations; the trainer Job
    runs numNodes pods (parallelism = completions), each initializer 1."""
    def rjob(name, ancestor, pods):
        return {"name": name, "replicas": 1, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}},
            "spec": {"parallelism": pods, "completions": pods, "template": {
                "spec": {"containers": [{"name": name, "image": "i"}]}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llama-ft", "namespace": "team-a", "annotations": root_annotations},
            "spec": {"replicatedJobs": [rjob("dataset-initializer", "dataset-initializer", 1),
                                        rjob("model-initializer", "model-initializer", 1),
                                        rjob("node", "trainer", num_nodes)]}}


def pod_annotations(jobset, k):
    return jobset["spec"]["replicatedJobs"][k]["template"]["spec"]["template"].get("metadata", {}).get("annotations")


@pytest.mark.parametrize("gate", [False, True])
def test_trainer_v2_0s_jobset_segments_the_trainer_job_alone(gate):
    settings = AdmissionSettings(gate_pods=gate)
    spec_annotations = jsonpatch.apply_patch(trainjob(), run(trainjob(), settings).patch)["spec"]["annotations"]
    jobset = trainer_v2_0_jobset(spec_annotations)
    d = run(jobset, settings)
    assert d.allowed, d.message
    out = jsonpatch.apply_patch(jobset, d.patch)
    assert pod_annotations(out, 0) is None and pod_annotations(out, 1) is None  # the initializers: nothing
    gang = {"segments.dev/gang-size": "16", "segments.dev/topology": "cluster-topology"} if gate else {}
    assert pod_annotations(out, 2) == {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK,
                                       "segments.dev/job-parallelism": "16", **gang}
    assert out["metadata"] == jobset["metadata"]


def test_without_the_trainer_job_key_every_replicated_job_inherits_the_root():
    """What the keys in spec.annotations did before (the user's own, no trainer-job): the
    initializers of 1 pod are segmented too, and a size of 4 exceeds them."""
    d = run(trainer_v2_0_jobset({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK}))
    assert [v.rule for v in d.violations] == ["segment-size-exceeds-replicas", "segment-size-exceeds-replicas"]


def test_a_trainer_job_the_jobset_lacks_is_denied_naming_its_replicated_jobs():
    d = run(trainer_v2_0_jobset({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK, TRAINER_JOB: "trainer"}))
    assert [v.rule for v in d.violations] == ["trainer-job-not-found"]
    assert d.message.startswith('metadata.annotations["segments.dev/trainer-job"] = "trainer": the root\'s segment '
                                "keys belong to that replicatedJob alone, and this JobSet has none of that name "
                                "(its replicatedJob names: dataset-initializer, model-initializer, node)")
