"""The side-by-side scheduler benchmark, small (marker ``cluster``; benchmarks/schedulers.py, issue 26
part 4): 64 ``gen-cluster`` nodes (2 blocks of 4 racks of 8 nodes, 8 GPUs each), 4 Indexed Jobs of
16 pods of 4 GPUs in segments of 4 per rack, each Job in one block, placed by this project's gate
and controller, by Kueue, and by kube-scheduler's Workload API, one control plane after the other.
Every target must place the 4 gangs with no violation of :func:`schedulers.verify_placement`
(the cluster has room for 8 such gangs); the times are printed, not asserted."""

from __future__ import annotations

import os
import sys

import pytest

from tests.support import paths
from tests.support.cluster_support import local_cluster

sys.path.insert(0, str(paths.REPO / "benchmarks"))

import schedulers

pytestmark = pytest.mark.cluster


def test_gate_kueue_and_the_workload_api_each_place_four_gangs_on_64_nodes(tmp_path, capsys):
    if os.environ.get("CI") != "true" and not (local_cluster.built()
                                               and local_cluster.upstream_binary("kueue").is_file()):
        pytest.skip("schedulers benchmark: binaries not built (hack/local-cluster.sh build)")
    shape = schedulers.Shape(nodes=64, gangs=4, pods=16, segment=4, rack_nodes=8, racks_per_block=4)
    with capsys.disabled():
        print()
        results = schedulers.run(shape, list(schedulers.TARGETS), tmp_path, timeout=120, idle=60)
    assert [r.target for r in results] == ["gate", "kueue", "workload-api"]
    for result in results:
        assert result.error == "", (result.target, result.error)
        assert result.violations == [], (result.target, result.violations)
        assert (result.target, result.gangs_placed, result.pods_bound) == (result.target, 4, 64), result.ended
