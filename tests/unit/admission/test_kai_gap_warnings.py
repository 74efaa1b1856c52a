"""A warning that KAI does not enforce something is given only where KAI is the reader.

DESIGN.md §4.5 (each reader's gaps are named for that reader), §9b (the target decides the reader):
``kai-does-not-enforce``, ``kai-flat-gang`` and ``lws-leader-ready-segments`` name what KAI's
pod-grouper cannot do, so they appear when the object's resolved target is ``kai`` (the serve's
default, or the label ``segments.dev/target: kai``) and never under ``gate``, ``workload-api`` or
``kueue``, whose readers enforce the segments or warn for themselves (new-user trial F4: an
Indexed Job reviewed with ``--target workload-api`` was told KAI does not enforce its segments).
"""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import REPO, SIZE, TOPO, load_example, make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.planning.manifests import load_topology_files

MANIFESTS = REPO / "tests" / "data" / "manifests"
CATALOG = load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")])
KAI = AdmissionSettings()
GATING = AdmissionSettings(gate_pods=True)
WORKLOAD_API = AdmissionSettings(target="workload-api")
KUEUE = AdmissionSettings(target="kueue")

JOB_TEXT = "KAI makes one PodGroup of a Job, no subgroups: it does not enforce these Job segments; --gate-pods does"
MPI_TEXT = "KAI keeps MPIJob PodGroups flat: it does not enforce these MPIJob segments; --gate-pods does"
DW_TEXT = "KAI flattens pods DistributedWorkload owns: segments (size 4, required level) not enforced; --gate-pods does"
RAY_TEXT = "KAI groups Ray pods by worker group: it does not enforce these RayCluster segments; --gate-pods does"
JOBSET_TEXT = ("KAI enforces JobSet segments only of size = parallelism (4): it does not enforce these JobSet "
               "segments; --gate-pods does")
TRAINJOB_TEXT = "KAI enforces only size = numNodes (16): it does not enforce these TrainJob segments; --gate-pods does"
LWS_TEXT = "startupPolicy LeaderReady: KAI cannot group the lone leader into a segment; use startupPolicy: LeaderCreated"


def indexed_job() -> dict:
    """An Indexed batch/v1 Job of 8 pods in segments of 4 (trial F4's job.yaml)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a", "annotations": {TOPO: "cluster-topology"}},
            "spec": {"completionMode": "Indexed", "completions": 8, "parallelism": 8,
                     "template": {"metadata": {"annotations": {SIZE: "4"}},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "i"}]}}}}


def manifest(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text(encoding="utf-8"))


def mpijob() -> dict:
    return manifest("mpijob-launcher-as-worker.yaml")


def jobset_size_8() -> dict:
    """jobset-workers.yaml (parallelism 4) in segments of 8: two Jobs a segment, which KAI does not enforce."""
    obj = manifest("jobset-workers.yaml")
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"][SIZE] = "8"
    return obj


def lws_leader_ready() -> dict:
    obj = load_example("lws-segmented.yaml")
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"][SIZE] = "2"
    obj["spec"]["startupPolicy"] = "LeaderReady"
    return obj


def labelled(obj: dict, target: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("labels", {})["segments.dev/target"] = target
    return obj


def warnings_of(obj: dict, settings: AdmissionSettings) -> list[str]:
    decision = review(make_request(obj), CATALOG, settings)
    assert decision.allowed, decision.message
    return decision.warnings


CASES = {
    "job": (indexed_job, JOB_TEXT),
    "mpijob": (mpijob, MPI_TEXT),
    "distributedworkload": (lambda: manifest("kai-reader-class-b-distributedworkload.yaml"), DW_TEXT),
    "raycluster": (lambda: manifest("raycluster-multihost.yaml"), RAY_TEXT),
    "jobset": (jobset_size_8, JOBSET_TEXT),
    "trainjob": (lambda: manifest("trainjob-torch.yaml"), TRAINJOB_TEXT),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_under_target_kai_the_kai_gap_is_named(case):
    make, text = CASES[case]
    assert text in warnings_of(make(), KAI)
    # the label kai under a gating serve chooses KAI as the reader again
    assert text in warnings_of(labelled(make(), "kai"), GATING)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("how", ["serve --gate-pods", "label gate", "serve --target workload-api"])
def test_under_gate_and_workload_api_no_kai_gap_is_named(case, how):
    make, text = CASES[case]
    obj, settings = {"serve --gate-pods": (make(), GATING), "label gate": (labelled(make(), "gate"), GATING),
                     "serve --target workload-api": (make(), WORKLOAD_API)}[how]
    warnings = warnings_of(obj, settings)
    assert text not in warnings
    assert not [w for w in warnings if "--gate-pods does" in w]


@pytest.mark.parametrize("settings", [KUEUE, KAI], ids=["serve --target kueue", "label kueue"])
def test_under_kueue_the_job_gets_no_kai_gap(settings):
    obj = indexed_job() if settings is KUEUE else labelled(indexed_job(), "kueue")
    assert JOB_TEXT not in warnings_of(obj, settings)


def test_under_kueue_its_own_target_warnings_stay():
    """A preferred segment level Kueue cannot express: its warning names target kueue, kept."""
    obj = labelled(indexed_job(), "kueue")
    obj["spec"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-topology-preferred-placement"] = \
        "topology.kubernetes.io/zone"
    assert warnings_of(obj, KAI) == ["target kueue: segment preferred topology.kubernetes.io/zone: not enforced "
                                     "(Kueue slices are required only)"]
    ray = labelled(manifest("raycluster-multihost.yaml"), "kueue")
    assert warnings_of(ray, KAI) == ["target kueue: RayCluster pods carry no index Kueue ranks by: its slices are not "
                                     "our segment-index labels"]


def test_lws_leader_ready_is_a_kai_gap_warning_under_kai_only():
    assert LWS_TEXT in warnings_of(lws_leader_ready(), KAI)
    assert LWS_TEXT not in warnings_of(labelled(lws_leader_ready(), "kueue"), KAI)
