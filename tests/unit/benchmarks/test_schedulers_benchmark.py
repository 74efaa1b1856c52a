"""The pure parts of benchmarks/schedulers.py (issue 26 part 4): the placement check every bound pod
of the side-by-side run goes through, the gang count, the cluster layout and the ratio column.
Inputs are hand-made Pod and Node objects; the expected sentences are written out."""

from __future__ import annotations

import sys
from fractions import Fraction

import pytest

from tests.support import paths

sys.path.insert(0, str(paths.REPO / "benchmarks"))

import schedulers

RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"


def node(name: str, rack: str | None, block: str | None, gpus: str = "8", pods: str = "110") -> dict:
    labels = {"kubernetes.io/hostname": name}
    if rack:
        labels[RACK] = rack
    if block:
        labels[BLOCK] = block
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "128", "pods": pods}}}


def pod(job: str | None, index: str | None, node_name: str | None, gpus: str = "4") -> dict:
    labels = {}
    if job is not None:
        labels["batch.kubernetes.io/job-name"] = job
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = index
    spec: dict = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": f"{job}-{index}", "namespace": "default", "labels": labels}, "spec": spec}


#: block-1: rack-a (a1, a2), rack-b (b1, b2); block-2: rack-c (c1, c2). 8 GPUs each.
NODES = [node("a1", "rack-a", "block-1"), node("a2", "rack-a", "block-1"),
         node("b1", "rack-b", "block-1"), node("b2", "rack-b", "block-1"),
         node("c1", "rack-c", "block-2"), node("c2", "rack-c", "block-2")]


def test_a_gang_of_two_segments_each_in_one_rack_within_one_block_has_no_violation():
    # segments of 2: ranks 0, 1 in rack-a; ranks 2, 3 in rack-b; two pods of 4 GPUs on a1 (8 of 8)
    pods = [pod("g", "0", "a1"), pod("g", "1", "a1"), pod("g", "2", "b1"), pod("g", "3", "b2")]
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == []


def test_a_segment_across_two_racks_is_a_violation():
    pods = [pod("g", "0", "a1"), pod("g", "1", "b1"), pod("g", "2", "b2"), pod("g", "3", "b2")]
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == [
        f"gang default/g segment 0 spans 2 {RACK} domains: rack-a, rack-b"]


def test_a_gang_across_two_blocks_is_a_violation_even_with_every_segment_in_one_rack():
    pods = [pod("g", "0", "a1"), pod("g", "1", "a2"), pod("g", "2", "c1"), pod("g", "3", "c2")]
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == [
        f"gang default/g spans 2 {BLOCK} domains: block-1, block-2"]


def test_two_gangs_in_different_blocks_are_each_fine():
    pods = [pod("g", "0", "a1"), pod("g", "1", "a2"), pod("h", "0", "c1"), pod("h", "1", "c2")]
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == []


def test_a_node_asked_more_gpus_than_it_has_is_over_committed():
    # three pods of 4 GPUs on a1 (8 GPUs): 12 asked
    pods = [pod("g", "0", "a1"), pod("g", "1", "a1"), pod("h", "0", "a1")]
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == [
        "node a1 is over-committed: its bound pods ask 12 nvidia.com/gpu, it has 8"]


def test_the_pod_count_of_a_node_is_a_resource_too():
    nodes = [node("p1", "rack-a", "block-1", gpus="8", pods="1")]
    pods = [pod("g", "0", "p1", gpus="1"), pod("g", "1", "p1", gpus="1")]
    assert schedulers.verify_placement(pods, nodes, segment_size=2) == [
        "node p1 is over-committed: its bound pods ask 2 pods, it has 1"]


def test_a_resource_the_node_does_not_list_counts_as_none():
    pods = [pod("g", "0", "a1")]
    pods[0]["spec"]["containers"][0]["resources"]["requests"] = {"example.com/fpga": "1"}
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == [
        "node a1 is over-committed: its bound pods ask 1 example.com/fpga, it has 0"]


def test_unbound_pods_are_not_checked():
    pods = [pod("g", "0", "a1"), pod("g", "1", None), pod(None, None, None)]
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == []


def test_a_bound_pod_on_an_unknown_node_or_without_its_labels_is_a_violation():
    pods = [pod("g", "0", "zz"), pod("g", None, "a1"), pod(None, "1", "a2"), pod("g", "x", "b1")]
    reason = "has no readable batch.kubernetes.io/job-name / batch.kubernetes.io/job-completion-index label"
    assert schedulers.verify_placement(pods, NODES, segment_size=2) == [
        f"pod default/None-1 {reason}",
        "pod default/g-0 is bound to node zz, which is not in the cluster",
        f"pod default/g-None {reason}",
        f"pod default/g-x {reason}",
    ]


def test_a_node_without_the_rack_label_breaks_the_segment_it_holds_part_of():
    nodes = NODES + [node("n1", None, "block-1")]
    pods = [pod("g", "0", "a1"), pod("g", "1", "n1")]
    assert schedulers.verify_placement(pods, nodes, segment_size=2) == [
        f"gang default/g segment 0 spans 2 {RACK} domains: <n1: no {RACK}>, rack-a"]


def test_pod_requests_take_requests_over_limits_and_the_largest_init_container():
    spec = {"containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "2"}, "requests": {"cpu": "500m"}}},
        {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "8"}}}]}
    assert schedulers.pod_requests({"spec": spec}) == {
        "nvidia.com/gpu": Fraction(4), "cpu": Fraction(8), "memory": Fraction(2 ** 30), "pods": Fraction(1)}


def test_gangs_placed_counts_only_gangs_with_every_pod_bound():
    pods = [pod("g", "0", "a1"), pod("g", "1", "a2"), pod("h", "0", "c1"), pod("h", "1", None)]
    assert schedulers.gangs_placed(pods, pods_per_gang=2) == 1
    assert schedulers.gangs_placed(pods, pods_per_gang=1) == 2


def test_the_layout_of_the_issue_and_of_the_smoke_run():
    assert schedulers.Shape().layout() == (4, 16, 16)  # 1,024 nodes: 4 blocks of 16 racks of 16
    assert schedulers.Shape(nodes=64, rack_nodes=8, racks_per_block=4).layout() == (2, 4, 8)
    assert schedulers.Shape(nodes=32, rack_nodes=16).layout() == (1, 2, 16)  # fewer racks than a block
    with pytest.raises(ValueError, match="--nodes 100 is not a whole number of racks of 16 nodes"):
        schedulers.Shape(nodes=100).layout()
    with pytest.raises(ValueError, match="in blocks of 4 racks"):
        schedulers.Shape(nodes=80, rack_nodes=16, racks_per_block=4).layout()  # 5 racks


def test_ratio_to_gate():
    assert schedulers.ratio(3.0, 1.5) == "2.00x"
    assert schedulers.ratio(float("nan"), 1.0) == "-"
    assert schedulers.ratio(1.0, 0.0) == "-"


def test_the_table_has_a_row_per_target_with_its_ratios():
    gate = schedulers.Result("gate", 2, 16, gangs_placed=2, pods_bound=32, last_created_to_last_bound=1.0,
                             first_created_to_last_bound=2.0, submitted_to_last_bound=4.0, ended="all bound")
    kueue = schedulers.Result("kueue", 2, 16, gangs_placed=1, pods_bound=16, last_created_to_last_bound=3.0,
                              first_created_to_last_bound=5.0, submitted_to_last_bound=10.0,
                              violations=["node a1 is over-committed: its bound pods ask 12 nvidia.com/gpu, it has 8"])
    lines = schedulers.table([gate, kueue]).splitlines()
    assert lines[2].split() == ["gate", "2/2", "32/32", "1.00", "s", "2.00", "s", "4.00", "s", "1.00x", "/", "1.00x", "0"]
    assert lines[3].split() == ["kueue", "1/2", "16/32", "3.00", "s", "5.00", "s", "10.00", "s", "3.00x", "/", "2.50x",
                                "1"]
    assert "  violation: node a1 is over-committed: its bound pods ask 12 nvidia.com/gpu, it has 8" in lines


def test_the_kueue_job_is_labelled_for_its_queue_and_states_its_segments():
    shape = schedulers.Shape(pods=8, segment=4)
    job = schedulers.indexed_job("gang-000", shape, "kueue")
    assert job["metadata"]["labels"] == {"segments.dev/target": "kueue", "kueue.x-k8s.io/queue-name": "user-queue"}
    assert job["spec"]["completions"] == 8
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": RACK}
