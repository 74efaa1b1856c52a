"""Literal placements of the seed's examples (shared/examples) on small hand-built clusters,
through the full path: workload → pods → webhook (review) → engine → `place` output."""

from __future__ import annotations

import json

import yaml

from tests.conftest import EXAMPLES, load_example
from webhook.cli import main

ZONE = "topology.kubernetes.io/zone"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"


def cluster_file(tmp_path, layout, name="cluster.yaml", **alloc):
    """``layout``: {zone: {block: {rack: n_nodes}}}; nodes named node-<rack suffix><i>.
    ``alloc``: allocatable per node (Kubernetes quantity strings); a per-rack override may be
    given as layout value (n_nodes, {allocatable})."""
    items = []
    for zone, blocks in layout.items():
        for block, racks in blocks.items():
            for rack, spec in racks.items():
                n, extra = spec if isinstance(spec, tuple) else (spec, {})
                for i in range(n):
                    node = f"node-{rack.split('-', 1)[1]}{i}"
                    a = {"cpu": "8", "memory": "32Gi", "pods": "3", **alloc, **extra}
                    items.append({"apiVersion": "v1", "kind": "Node",
                                  "metadata": {"name": node, "labels": {ZONE: zone, BLOCK: block, RACK: rack, HOST: node}},
                                  "status": {"allocatable": a, "conditions": [{"type": "Ready", "status": "True"}]}})
    items.append(yaml.safe_load((EXAMPLES / "topology.yaml").read_text()))
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def run_place(capsys, workload_path, cluster, *extra):
    code = main(["place", "-f", str(workload_path), "--cluster", cluster, "-o", "json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out)


# C1: 2 zones x 2 blocks x 2 racks x 2 nodes, 3 pods per node: a rack holds one 4-pod segment.
C1 = {f"zone-{z}": {f"block-{z}{b}": {f"rack-{z}{b}{r}": 2 for r in range(2)} for b in range(2)} for z in "ab"}
# C2: zone-a is small (2 racks of 2 nodes x 2 pods), zone-b has 4 racks of 2 nodes x 3 pods.
C2 = {"zone-a": {"block-a0": {"rack-a00": (2, {"pods": "2"}), "rack-a01": (2, {"pods": "2"})}},
      "zone-b": {"block-b0": {"rack-b00": 2, "rack-b01": 2}, "block-b1": {"rack-b10": 2, "rack-b11": 2}}}
# C3: racks of 3 single-pod nodes: no rack holds a 4-pod segment, a block (2 racks) holds one.
C3 = {f"zone-{z}": {f"block-{z}{b}": {f"rack-{z}{b}{r}": (3, {"pods": "1"}) for r in range(2)} for b in range(2)} for z in "ab"}


def test_pytorchjob_tp4_each_segment_in_one_rack(tmp_path, capsys):
    code, res = run_place(capsys, EXAMPLES / "pytorchjob-tp4.yaml", cluster_file(tmp_path, C1))
    assert code == 0
    assert res["placed"] is True and res["reason"] is None
    assert [(s["index"], s["level"], s["domain"]) for s in res["segments"]] == [
        (0, RACK, "rack-a00"), (1, RACK, "rack-a01"), (2, RACK, "rack-a10"), (3, RACK, "rack-a11")]
    assert res["segments"][0]["pods"] == [f"default/pytorch-tp4-worker-{i}" for i in range(4)]
    assert res["segments"][3]["pods"] == [f"default/pytorch-tp4-worker-{i}" for i in range(12, 16)]
    assert res["assignments"]["default/pytorch-tp4-master-0"] == "node-a000"
    assert len(res["assignments"]) == 17
    for s in res["segments"]:  # every pod of a segment is on a node of the segment's rack
        assert {res["assignments"][p][len("node-"):len("node-") + 3] for p in s["pods"]} == {s["domain"][len("rack-"):]}


def test_without_workload_constraint_segments_span_zones(tmp_path, capsys):
    code, res = run_place(capsys, EXAMPLES / "pytorchjob-tp4.yaml", cluster_file(tmp_path, C2))
    assert code == 0
    assert [s["domain"] for s in res["segments"]] == ["rack-a00", "rack-a01", "rack-b00", "rack-b01"]
    assert res["workload"] == {"domain": "cluster", "level": "cluster"}


def test_zone_and_rack_whole_job_in_one_zone(tmp_path, capsys):
    code, res = run_place(capsys, EXAMPLES / "pytorchjob-zone-and-rack.yaml", cluster_file(tmp_path, C2))
    assert code == 0
    assert res["workload"] == {"domain": "zone-b", "level": ZONE}
    assert [(s["level"], s["domain"]) for s in res["segments"]] == [
        (RACK, "rack-b00"), (RACK, "rack-b01"), (RACK, "rack-b10"), (RACK, "rack-b11")]
    assert res["assignments"]["default/pytorch-tp4-master-0"] == "node-b000"
    assert all(node.startswith("node-b") for node in res["assignments"].values())


def _tp4_with(tmp_path, **annotations):
    job = load_example("pytorchjob-tp4.yaml")
    ann = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    ann.pop("kai.scheduler/segment-topology-required-placement")
    ann.update(annotations)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_segment_escalates_to_block_when_rack_only_preferred(tmp_path, capsys):
    job = _tp4_with(tmp_path, **{"kai.scheduler/segment-topology-preferred-placement": RACK})
    code, res = run_place(capsys, job, cluster_file(tmp_path, C3))
    assert code == 0
    assert [(s["level"], s["domain"]) for s in res["segments"]] == [
        (BLOCK, "block-a0"), (BLOCK, "block-a1"), (BLOCK, "block-b0"), (BLOCK, "block-b1")]


def test_segment_not_placed_when_rack_required(tmp_path, capsys):
    job = _tp4_with(tmp_path, **{"kai.scheduler/segment-topology-required-placement": RACK})
    code, res = run_place(capsys, job, cluster_file(tmp_path, C3))
    assert code == 1
    assert res["placed"] is False and res["assignments"] == {}
    assert "0 of 4 segments of 4 pods at segment level cloud.provider.com/topology-rack" in res["reason"]
    assert "binding resource: pods" in res["reason"]


def test_lws_leader_joins_segment_zero(tmp_path, capsys):
    code, res = run_place(capsys, EXAMPLES / "lws-segmented.yaml", cluster_file(tmp_path, C1))
    assert code == 0
    # DESIGN.md §7: R=5, S=2, LeaderWorker -> {L,1,2} {3,4}
    assert [s["pods"] for s in res["segments"]] == [
        ["default/lws-segmented-0", "default/lws-segmented-0-1", "default/lws-segmented-0-2"],
        ["default/lws-segmented-0-3", "default/lws-segmented-0-4"]]
    for s in res["segments"]:  # required rack: each segment inside one rack
        assert len({res["assignments"][p][:len("node-") + 3] for p in s["pods"]}) == 1


def test_native_workload_segments_of_8_in_racks(tmp_path, capsys):
    gpu = {"nvidia.com/gpu": "8", "cpu": "128", "memory": "1Ti", "pods": "110"}
    layout = {"zone-a": {f"block-a{b}": {f"rack-a{b}{r}": 8 for r in range(2)} for b in range(2)}}
    code, res = run_place(capsys, EXAMPLES / "distributedworkload-native.yaml", cluster_file(tmp_path, layout, **gpu))
    assert code == 0
    # automatic mode (DESIGN.md §6): preferred = hostname; 8-GPU pods, one per node -> escalate to rack
    assert [(s["index"], s["level"], s["domain"]) for s in res["segments"]] == [
        (0, RACK, "rack-a00"), (1, RACK, "rack-a01"), (2, RACK, "rack-a10"), (3, RACK, "rack-a11")]
    assert res["workload"] == {"domain": "zone-a", "level": ZONE}
    assert res["segments"][1]["pods"] == [f"team-a/llama-tp8-worker-{i}" for i in range(8, 16)]


def test_lws_two_groups_leader_excluded(tmp_path, capsys):
    lws = load_example("lws-segmented.yaml")
    lws["spec"]["replicas"] = 2
    lws["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupPolicyType"] = "LeaderExcluded"
    path = tmp_path / "lws.yaml"
    path.write_text(yaml.safe_dump(lws))
    code, res = run_place(capsys, path, cluster_file(tmp_path, C1))
    assert code == 0
    # DESIGN.md §7: R=5, S=2, LeaderExcluded -> L alone, {1,2} {3,4}; one gang per LWS group
    assert [(s["group"], s["index"], s["pods"]) for s in res["segments"]] == [
        (0, 0, ["default/lws-segmented-0-1", "default/lws-segmented-0-2"]),
        (0, 1, ["default/lws-segmented-0-3", "default/lws-segmented-0-4"]),
        (1, 0, ["default/lws-segmented-1-1", "default/lws-segmented-1-2"]),
        (1, 1, ["default/lws-segmented-1-3", "default/lws-segmented-1-4"])]
    assert len(res["assignments"]) == 10
    assert {"default/lws-segmented-0", "default/lws-segmented-1"} <= set(res["assignments"])


def test_partial_last_segment_keeps_its_rack(tmp_path, capsys):
    job = load_example("pytorchjob-tp4.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 10
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    code, res = run_place(capsys, path, cluster_file(tmp_path, C1))
    assert code == 0
    # 10 workers, S=4 -> {0-3} {4-7} {8-9} (DESIGN.md §7), each inside one rack (required)
    assert [len(s["pods"]) for s in res["segments"]] == [4, 4, 2]
    assert all(s["level"] in (RACK, HOST) for s in res["segments"])
    for s in res["segments"]:
        assert len({res["assignments"][p][:len("node-") + 3] for p in s["pods"]}) == 1
