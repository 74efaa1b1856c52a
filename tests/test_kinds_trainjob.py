"""TrainJob (trainer.kubeflow.org/v1alpha1) through the webhook (DESIGN.md §3b, §9).

Facts (issue 18, the TrainJob CRD in ../shared/crds): a TrainJob's pods are the pods of the JobSet
its runtime builds (``numNodes`` = parallelism of the trainer Job ``node``, replicas 1); the
TrainJob's own annotations are not copied to that JobSet; ``spec.runtimePatches`` is a list keyed
by ``manager`` that may set the pod template metadata of a replicatedJob; the node rank is the
completion index.
"""

from __future__ import annotations

from pathlib import Path

import jsonpatch
import pytest
import yaml
from conftest import SEG_REQ, SIZE, TOPO, WL_REQ, make_request

from webhook.core.settings import AdmissionSettings
from webhook.core.review import review
from webhook.core.topology import StaticTopologyCatalog, Topology

MANIFESTS = Path(__file__).resolve().parent / "manifests"
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


def test_place_says_a_trainjob_cannot_be_expanded(tmp_path, capsys):
    from webhook.cli import main

    path = tmp_path / "tj.yaml"
    path.write_text(yaml.safe_dump(trainjob()))
    cluster = tmp_path / "c.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "2", "--nodes", "2", "-o", str(cluster)]) == 0
    assert main(["place", "-f", str(path), "--cluster", str(cluster)]) == 2
    assert "spec.runtimeRef: a TrainJob's pod templates are its runtime's" in capsys.readouterr().err
