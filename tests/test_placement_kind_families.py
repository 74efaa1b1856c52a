"""The §3b gang families of ``benchmarks/placement.py`` (issue 18): made through the kinds'
expansion and the webhook, with the index arithmetic of DESIGN.md §3b, and placed by the engine."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "placement.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("placement_bench", BENCH)
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
    counts = {}
    for p in gang.pods:
        counts[p.segment[1]] = counts.get(p.segment[1], 0) + 1
    assert counts == segments
    row = bench.one_size(512, 16, 1, family)
    assert row["placed"] and row["segment_levels"] == {"topology-rack": 2}
