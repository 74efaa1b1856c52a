"""The §3b gang families of ``benchmarks/placement.py`` (DESIGN.md §3b, §9): made through the kinds'
expansion and the webhook, with the index arithmetic of DESIGN.md §3b, and placed by the engine."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support import paths

BENCH = paths.REPO / "benchmarks" / "placement.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("placement_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family, first, segments", [
    # JobSet: job j, completion c -> index 8j + c, S = 8: one Job per segment
    ("jobset", ["bench/job-workers-0-0", "bench/job-workers-0-1"], {0: 8, 1: 8}),
    # Ray: replica r, host h -> 4r + h, S = 8: two whole replicas per segment
    ("ray multi-host", ["bench/job-gpu-worker-0-0", "bench/job-gpu-worker-0-1"], {0: 8, 1: 8}),
    # MPIJob launcher-as-worker: the launcher is position 0, worker i position i + 1
    ("mpi launcher-as-worker", ["bench/job-launcher", "bench/job-worker-0"], {0: 8, 1: 8}),
])
def test_kind_families_have_their_kinds_segments_and_are_placed(bench, family, first, segments):
    gang = bench.kind_gang(family, 16)
    assert [p.key for p in gang.pods[:2]] == first
    counts: dict[int, int] = {}
    for p in gang.pods:
        counts[p.segment[1]] = counts.get(p.segment[1], 0) + 1
    assert counts == segments
    row = bench.one_size(512, 16, 1, family)
    assert row["placed"] and row["segment_levels"] == {"topology-rack": 2}


def test_a_trainjobs_gang_is_a_one_job_jobset_gang():
    """Why the CP-SAT comparison (tests/unit/placement/test_placement_solver.py) has no TrainJob family: the gang
    ``place`` builds for a TrainJob (through the JobSet the Trainer builds from its runtime) is, pod
    for pod, the gang of a JobSet with one Job of ``parallelism = numNodes`` (DESIGN.md §3b: index =
    completion index = node rank, segment ``rank // S``), which the ``jobset`` family draws (one Job
    when parallelism >= S) and, for any pod count and a partial last segment, the ``pytorch``
    family's workers without a Master (index ``i``, segment ``i // S``)."""
    import copy

    import yaml

    from webhook.admission.config import AdmissionSettings
    from webhook.planning.expand import expand
    from webhook.topology.objects import StaticTopologyCatalog, Topology

    manifests = paths.DATA / "manifests"
    trainjob = yaml.safe_load((manifests / "trainjob-torch.yaml").read_text())
    trainjob["spec"]["trainer"]["numNodes"] = 14  # segments of 4: 4, 4, 4 and a partial 2
    runtime = yaml.safe_load((manifests / "clustertrainingruntime-torch.yaml").read_text())
    catalog = StaticTopologyCatalog([Topology("cluster-topology", (
        "topology.kubernetes.io/zone", "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack",
        "kubernetes.io/hostname"))])
    from_trainjob = expand(trainjob, catalog, AdmissionSettings(), runtimes=[runtime])
    # the same pods written as a JobSet by hand: one replicatedJob `node` of 14 pods, the keys on its template
    template = copy.deepcopy(runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    template["metadata"] = {"annotations": dict(trainjob["metadata"]["annotations"])}
    template["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": 8}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "llama-ft", "namespace": "team-a"},
              "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                  "parallelism": 14, "completions": 14, "template": template}}}]}}
    by_hand = expand(jobset, catalog, AdmissionSettings())
    (gang,), (expected,) = from_trainjob.gangs, by_hand.gangs
    assert [p.segment for p in gang.pods] == [(0, c // 4) for c in range(14)]
    assert gang.pods == expected.pods
    assert (gang.segment_required, gang.segment_preferred) == ("cloud.provider.com/topology-rack", None)
