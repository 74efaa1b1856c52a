"""JobSet (jobset.x-k8s.io/v1alpha2) through the webhook (DESIGN.md §3b, §7, §9).

Facts from jobset (``pkg/controllers/jobset_controller.go``, ``labelAndAnnotateObject``;
``pkg/util/placement``: Job name ``<jobset>-<replicatedJob>-<jobIndex>``): pods carry
``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index`` as labels and annotations;
the Job controller adds ``batch.kubernetes.io/job-completion-index``. A pod's index is
``job-index × parallelism + completion-index`` (DESIGN.md §3b, as Kueue ranks JobSet pods).
"""

from __future__ import annotations

import jsonpatch
import pytest
import yaml

from tests.conftest import SEG_PREF, SEG_REQ, SIZE, TOPO, WL_PREF, WL_REQ, make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.gating.decision import decide
from webhook.planning.expand import expand
from webhook.topology.objects import StaticTopologyCatalog, Topology

MANIFESTS = paths.DATA / "manifests"
ZONE, BLOCK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-block"
RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
TOPOLOGY = Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))
CATALOG = StaticTopologyCatalog([TOPOLOGY])
GATING = AdmissionSettings(gate_pods=True)
PAR = "segments.dev/job-parallelism"
P0 = "spec.replicatedJobs[0]"
NOT_ENFORCED = ("KAI enforces JobSet segments only of size = parallelism (4): it does not enforce these JobSet "
                "segments; --gate-pods does")


def jobset(size="4", replicas=4, parallelism=4, extra_rjob=False):
    obj = yaml.safe_load((MANIFESTS / "jobset-workers.yaml").read_text())
    rj = obj["spec"]["replicatedJobs"][0]
    rj["replicas"] = replicas
    rj["template"]["spec"]["parallelism"] = rj["template"]["spec"]["completions"] = parallelism
    rj["template"]["spec"]["template"]["metadata"]["annotations"][SIZE] = size
    if extra_rjob:  # a driver Job without keys of its own: not segmented unless the root says so
        obj["spec"]["replicatedJobs"].insert(0, {"name": "driver", "replicas": 1, "template": {"spec": {
            "parallelism": 1, "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "d", "image": "i"}]}}}}})
    return obj


def run(obj, settings=AdmissionSettings(), **kw):
    return review(make_request(obj, **kw), CATALOG, settings)


def patched(obj, d):
    return jsonpatch.apply_patch(obj, d.patch)


def pod_ann(obj, k=0):
    return obj["spec"]["replicatedJobs"][k]["template"]["spec"]["template"].get("metadata", {}).get("annotations", {})


def job_ann(obj, k=0):
    return obj["spec"]["replicatedJobs"][k]["template"].get("metadata", {}).get("annotations", {})


def test_size_equal_to_parallelism_gets_kais_per_job_keys_and_no_warning():
    d = run(jobset())
    assert d.allowed and d.warnings == []
    out = patched(jobset(), d)
    assert pod_ann(out) == {SIZE: "4", SEG_REQ: RACK, TOPO: "cluster-topology", PAR: "4"}
    # one Job = one segment: KAI's Job-level keys carry the segment levels (§3b)
    assert job_ann(out) == {TOPO: "cluster-topology", WL_REQ: RACK}
    assert "subgroup-name" not in str(out)


def test_per_job_keys_carry_the_preferred_segment_level_too():
    obj = jobset()
    pod_ann(obj)[SEG_PREF] = HOST
    out = patched(obj, run(obj))
    assert job_ann(out) == {TOPO: "cluster-topology", WL_REQ: RACK, WL_PREF: HOST}


@pytest.mark.parametrize("size, warnings", [
    ("8", [NOT_ENFORCED]),  # two Jobs per segment: KAI does not enforce it
    ("2", [NOT_ENFORCED]),  # two segments per Job
    ("6", ["16 pods of replicatedJob workers / segment size 6: last segment has 4 pods",
           "replicatedJob workers: segment size 6 and parallelism 4 do not divide each other; segments straddle Jobs",
           NOT_ENFORCED]),
])
def test_other_sizes_get_no_per_job_keys_and_the_warnings(size, warnings):
    d = run(jobset(size=size))
    assert d.allowed and d.warnings == warnings
    out = patched(jobset(size=size), d)
    assert job_ann(out) == {} and pod_ann(out)[PAR] == "4"


def test_segment_size_above_replicas_times_parallelism_is_denied_naming_the_count():
    d = run(jobset(size="17"))
    assert [v.rule for v in d.violations] == ["segment-size-exceeds-replicas"]
    assert d.message == (f'{P0}.template.spec.template.metadata.annotations["kai.scheduler/segment-size"] = "17": '
                         "the segment size exceeds the 16 pods of replicatedJob workers "
                         f"({P0}.replicas × parallelism) (rule segment-size-exceeds-replicas); fix: use a segment size "
                         f"between 2 and 16, or raise {P0}.replicas × parallelism to at least 17.")


def test_each_replicated_job_is_resolved_on_its_own():
    obj = jobset(extra_rjob=True)
    d = run(obj)
    out = patched(obj, d)
    assert d.allowed and pod_ann(out, 0) == {} and job_ann(out, 0) == {}  # the driver has no size
    assert pod_ann(out, 1)[SIZE] == "4"


def test_a_root_segment_size_applies_to_every_replicated_job():
    obj = jobset(extra_rjob=True)
    obj["metadata"]["annotations"][SIZE] = "4"
    d = run(obj)
    assert [v.rule for v in d.violations] == ["segment-size-exceeds-replicas"]
    assert d.violations[0].field == 'metadata.annotations["kai.scheduler/segment-size"]'
    assert "exceeds the 1 pods of replicatedJob driver" in d.message or "exceeds the 1 pod" in d.message


def test_replicated_jobs_not_a_list_is_a_400():
    obj = jobset()
    obj["spec"]["replicatedJobs"] = {"name": "x"}
    d = run(obj)
    assert d.code == 400 and d.violations[0].field == "spec.replicatedJobs"


def test_update_of_the_segment_size_is_immutable_and_named_per_replicated_job():
    stored = patched(jobset(), run(jobset()))
    d = run(jobset(size="8"), operation="UPDATE", old=stored)
    assert [v.rule for v in d.violations] == ["immutable-field"]
    assert d.violations[0].field == f'{P0}.template.spec.template.metadata.annotations["kai.scheduler/segment-size"]'


def pod(job_index, completion, as_label=True, annotations=None):
    labels = {"jobset.sigs.k8s.io/jobset-name": "llm", "jobset.sigs.k8s.io/replicatedjob-name": "workers",
              "jobset.sigs.k8s.io/job-index": str(job_index)}
    ann = dict(annotations if annotations is not None else {TOPO: "cluster-topology", SIZE: "8", PAR: "4"})
    ann["jobset.sigs.k8s.io/job-index"] = str(job_index)
    (labels if as_label else ann)["batch.kubernetes.io/job-completion-index"] = str(completion)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"llm-workers-{job_index}-{completion}-x7k2q", "namespace": "team-a",
                         "labels": labels, "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.mark.parametrize("job_index, completion, as_label, segment", [
    (0, 0, True, "0"), (1, 3, True, "0"), (2, 0, True, "1"), (3, 3, False, "1"),  # i = j*4 + c; S = 8
])
def test_pod_index_is_job_index_times_parallelism_plus_completion_index(job_index, completion, as_label, segment):
    d = run(pod(job_index, completion, as_label))
    labels = patched(pod(job_index, completion, as_label), d)["metadata"]["labels"]
    assert d.warnings == [] and labels["kai.scheduler/segment-index"] == segment
    assert "kai.scheduler/subgroup-name" not in labels


def test_a_pod_without_parallelism_is_warned_never_denied():
    d = run(pod(1, 0, annotations={TOPO: "cluster-topology", SIZE: "8"}))
    assert d.allowed and d.patch == []
    assert d.warnings == ["pod annotation segments.dev/job-parallelism missing or not an int32 >= 1; no segment label"]


def test_expansion_names_and_labels_pods_as_jobset_and_the_job_controller_do():
    exp = expand(jobset(replicas=2, parallelism=2, size="2"), CATALOG, AdmissionSettings())
    names = [p["metadata"]["name"] for p in exp.pods]
    assert names == ["llm-workers-0-0", "llm-workers-0-1", "llm-workers-1-0", "llm-workers-1-1"]
    last = exp.pods[-1]["metadata"]
    assert last["labels"]["jobset.sigs.k8s.io/job-index"] == "1"
    assert last["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert last["labels"]["batch.kubernetes.io/job-name"] == "llm-workers-1"
    assert last["annotations"]["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert [p["metadata"]["labels"]["kai.scheduler/segment-index"] for p in exp.pods] == ["0", "0", "1", "1"]


def nodes(racks=4, per_rack=4):
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"r{r}-n{i}", "labels": {ZONE: "z", BLOCK: "b", RACK: f"r{r}", HOST: f"r{r}-n{i}"}},
             "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}
            for r in range(racks) for i in range(per_rack)]


def test_gate_mode_gang_is_one_replicated_job_and_the_controller_releases_it():
    obj = jobset(size="8", extra_rjob=True)
    d = run(obj, GATING)
    out = patched(obj, d)
    assert pod_ann(out, 1)["segments.dev/gang-size"] == "16" and "segments.dev/gang-size" not in pod_ann(out, 0)
    exp = expand(obj, CATALOG, GATING)
    driver = [p for p in exp.pods if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "driver"]
    assert len(driver) == 1 and "schedulingGates" not in driver[0]["spec"]
    result = decide(nodes(racks=3, per_rack=8), exp.pods, [TOPOLOGY])  # a segment of 8 pods x 8 GPUs fills a rack
    assert result.waiting == [] and [p.gang for p in result.placed] == ["team-a/llm/workers"]
    assert len(result.releases) == 16
    node_of = {r.name: r.node for r in result.releases}
    racks: dict[str, set[str]] = {}
    for p in exp.pods:
        seg = p["metadata"]["labels"].get("kai.scheduler/segment-index")
        if seg is not None:
            racks.setdefault(seg, set()).add(node_of[p["metadata"]["name"]].split("-")[0])
    assert sorted(racks) == ["0", "1"] and all(len(r) == 1 for r in racks.values())
