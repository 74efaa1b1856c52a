"""A root workload level binds every group of a workload under every target (DESIGN.md §2, §9b;
issue 37 item 2): held (one gang across the groups) or warned, naming the target and the groups.

- ``gate`` and ``workload-api``: a JobSet / Ray root level makes the whole object one gang
  (``segments.dev/gang-scope: workload``, gang size = the pods of all groups): held. Where one gang
  cannot say it (groups differ in segment levels) and for the Ray head (never in the gang): warned.
- ``kueue``: each replicatedJob / worker group is its own PodSet, held to the level alone (Kueue
  v0.17.0's ``podset-group-name`` excludes slice keys), and the Ray head gets no level: warned.
"""

from __future__ import annotations

import jsonpatch

from tests.conftest import make_request
from tests.unit.gating.test_gate_whole_workload import CATALOG, RACK, jobset, pod_annotations, raycluster
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review

KUEUE = AdmissionSettings(target="kueue")
WORKLOAD_API = AdmissionSettings(target="workload-api")
GATE = AdmissionSettings(target="gate", gate_pods=True)


def test_kueue_names_the_replicated_jobs_a_jobset_root_level_does_not_hold_together():
    # before: admitted with no warning, each replicatedJob in its own zone
    d = review(make_request(jobset()), CATALOG, KUEUE)
    assert d.allowed, d.message
    assert d.warnings == ["target kueue: topology.kubernetes.io/zone holds each replicatedJob alone, not big, small "
                          "together"]


def test_kueue_names_the_ray_worker_groups_and_the_head():
    # before: admitted with no warning; the head got nothing
    d = review(make_request(raycluster()), CATALOG, KUEUE)
    assert d.allowed, d.message
    assert d.warnings == [
        "target kueue: cloud.provider.com/topology-block holds each worker group alone, not gpu, cpu together",
        "target kueue: the Ray head is its own PodSet, not held in the workers' cloud.provider.com/topology-block "
        "domain"]


def test_kueue_jobset_of_one_replicated_job_is_held_and_not_warned():
    obj = jobset()
    del obj["spec"]["replicatedJobs"][1]
    d = review(make_request(obj), CATALOG, KUEUE)
    assert d.allowed and d.warnings == []


def test_workload_api_holds_a_jobset_root_level_as_one_gang():
    obj = jobset()
    d = review(make_request(obj), CATALOG, WORKLOAD_API)
    assert d.allowed and d.warnings == []
    out = jsonpatch.apply_patch(obj, d.patch)
    for k in (0, 1):  # 8 + 4 pods, one gang of the whole JobSet
        assert pod_annotations(out, k)["segments.dev/gang-size"] == "12"
        assert pod_annotations(out, k)["segments.dev/gang-scope"] == "workload"


def test_workload_api_names_the_ray_head_it_does_not_hold():
    # before: nothing said (the head gets no PodGroup)
    d = review(make_request(raycluster()), CATALOG, WORKLOAD_API)
    assert d.allowed
    assert d.warnings == ["target workload-api does not hold the Ray head: cloud.provider.com/topology-block binds "
                          "the worker groups only"]


def test_workload_api_names_per_group_gangs():
    # before: nothing said under workload-api (gate said it)
    d = review(make_request(jobset(second_segment=RACK)), CATALOG, WORKLOAD_API)
    assert d.allowed and d.warnings == []  # one segment level among the units: still one gang
    obj = jobset(second_segment=RACK)
    first = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"]
    first.update({"kai.scheduler/segment-size": "4",
                  "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-block"})
    d = review(make_request(obj), CATALOG, WORKLOAD_API)
    assert d.warnings == ["target workload-api gangs JobSet per group (segment levels differ): "
                          "topology.kubernetes.io/zone holds in each only"]
    d = review(make_request(obj), CATALOG, GATE)
    assert d.warnings == ["--gate-pods gangs JobSet per group (segment levels differ): "
                          "topology.kubernetes.io/zone holds in each only"]
