"""batch/v1 Job (Indexed) through the webhook, on the guide's samples (docs/concepts/kinds/job.md;
DESIGN.md §3b, §9b; webhook/admission/kinds/job.py).

Facts from Kubernetes (pkg/controller/job, 1.28+): an Indexed Job's pods carry their completion
index as the label ``batch.kubernetes.io/job-completion-index`` and the Job's name as
``batch.kubernetes.io/job-name``. KAI's pod-grouper makes one PodGroup of a Job, without subgroups.
"""

from __future__ import annotations

import jsonpatch
import yaml

from tests.conftest import make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.topology.objects import StaticTopologyCatalog, Topology

MANIFESTS = paths.DATA / "manifests"
ZONE, BLOCK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-block"
RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
CATALOG = StaticTopologyCatalog([Topology("cluster-topology", (ZONE, BLOCK, RACK, HOST))])
KAI_WARNING = "KAI makes one PodGroup of a Job, no subgroups: it does not enforce these Job segments; --gate-pods does"


def sample(name):
    return yaml.safe_load((MANIFESTS / name).read_text())


def test_the_guides_job_inherits_the_root_topology_on_its_template_and_is_warned_kai_does_not_enforce():
    job = sample("job-indexed.yaml")
    decision = review(make_request(job), CATALOG, AdmissionSettings())
    assert decision.allowed and decision.warnings == [KAI_WARNING]
    admitted = jsonpatch.apply_patch(job, decision.patch)
    assert admitted["spec"]["template"]["metadata"]["annotations"] == {
        "kai.scheduler/segment-size": "4",
        "kai.scheduler/segment-topology-required-placement": RACK,
        "kai.scheduler/topology": "cluster-topology",
    }


def test_the_guides_pod_of_completion_index_9_is_in_segment_2():
    pod = sample("job-indexed-pod.yaml")
    decision = review(make_request(pod), CATALOG, AdmissionSettings())
    admitted = jsonpatch.apply_patch(pod, decision.patch)
    assert admitted["metadata"]["labels"]["kai.scheduler/segment-index"] == "2"  # 9 // 4
    assert "kai.scheduler/subgroup-name" not in admitted["metadata"]["labels"]


def test_under_gate_pods_the_template_carries_the_gang_facts():
    job = sample("job-indexed.yaml")
    decision = review(make_request(job), CATALOG, AdmissionSettings(gate_pods=True))
    annotations = jsonpatch.apply_patch(job, decision.patch)["spec"]["template"]["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("segments.dev/")} == {
        "segments.dev/gang-size": "16",
        "segments.dev/topology": "cluster-topology",
        "segments.dev/topology-required-placement": BLOCK,
    }
