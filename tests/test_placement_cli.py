"""`segment-webhook place` / `gen-cluster`: exit codes, output shapes, SVG, determinism."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import EXAMPLES, load_example
from webhook.cli import main



@pytest.fixture(scope="module")
def gen_cluster(tmp_path_factory):
    path = tmp_path_factory.mktemp("gc") / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "2", "--blocks", "2", "--racks", "2", "--nodes", "4", "--gpus", "8",
                 "--fill", "0.25", "--seed", "3", "-o", str(path)]) == 0
    return str(path)


def test_gen_cluster_shape_and_determinism(gen_cluster, tmp_path):
    again = tmp_path / "again.yaml"
    assert main(["gen-cluster", "--zones", "2", "--blocks", "2", "--racks", "2", "--nodes", "4", "--gpus", "8",
                 "--fill", "0.25", "--seed", "3", "-o", str(again)]) == 0
    text = open(gen_cluster).read()
    assert again.read_text() == text
    doc = yaml.safe_load(text)
    kinds = [i["kind"] for i in doc["items"]]
    assert doc["kind"] == "List" and kinds.count("Node") == 32 and kinds.count("Topology") == 1
    gpus = sum(int(c["resources"]["limits"]["nvidia.com/gpu"]) for i in doc["items"] if i["kind"] == "Pod"
               for c in i["spec"]["containers"])
    assert gpus == 64  # 25% of 32 nodes x 8 GPUs
    node = next(i for i in doc["items"] if i["kind"] == "Node")
    assert node["metadata"]["labels"] == {
        "topology.kubernetes.io/zone": "zone-0", "cloud.provider.com/topology-block": "block-0-0",
        "cloud.provider.com/topology-rack": "rack-0-0-0", "kubernetes.io/hostname": "node-0-0-0-0",
        "nvidia.com/gpu.present": "true"}
    assert node["status"]["allocatable"] == {"cpu": "128", "memory": "2048Gi", "nvidia.com/gpu": "8", "pods": "110"}
    assert main(["gen-cluster", "--zones", "0"]) == 2


def test_place_table_json_yaml_svg(gen_cluster, tmp_path, capsys):
    native = load_example("distributedworkload-native.yaml")
    native["spec"]["worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 2
    wl = str(tmp_path / "native.yaml")
    (tmp_path / "native.yaml").write_text(yaml.safe_dump(native))
    svg = tmp_path / "p.svg"
    assert main(["place", "-f", wl, "--cluster", gen_cluster, "--svg", str(svg)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["SEGMENT", "PODS", "LEVEL", "DOMAIN", "NODES"]
    assert "placed: 32 pods on " in table
    root = ET.fromstring(svg.read_text())
    assert root.tag.endswith("svg")
    assert "team-a/llama-tp8-worker-0" in svg.read_text()
    assert main(["place", "-f", wl, "--cluster", gen_cluster, "-o", "json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) == {"placed", "assignments", "segments", "workload", "reason"}
    assert set(res["segments"][0]) == {"index", "domain", "level", "pods"}
    assert [s["index"] for s in res["segments"]] == [0, 1, 2, 3]
    assert len(res["assignments"]) == 32
    assert main(["place", "-f", wl, "--cluster", gen_cluster, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == res


def test_denied_workload_exit_1(gen_cluster, tmp_path, capsys):
    job = load_example("pytorchjob-tp4.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = "4x"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["place", "-f", str(path), "--cluster", gen_cluster, "-o", "json"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["placed"] is False and res["reason"].startswith("denied by the webhook: ")
    assert "kai.scheduler/segment-size" in res["reason"]


@pytest.mark.parametrize("content, needle", [
    ("kind: Deployment\nmetadata: {name: d}\n", "kind 'Deployment' is not supported"),
    ("a: 1\n---\nb: 2\n", "expected exactly one workload object"),
    ("kind: PyTorchJob\nmetadata: {name: j}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: 2, template: "
     "{spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}}}}}\n",
     "spec.containers[0].resources.requests[cpu]"),
    ("kind: PyTorchJob\nmetadata: {name: j}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: 2000000000, template: "
     "{spec: {containers: [{name: c}]}}}}}\n",
     "replicas: 2000000000 pods is more than the 100000 this command expands"),
])
def test_bad_workload_exit_2(gen_cluster, tmp_path, capsys, content, needle):
    path = tmp_path / "w.yaml"
    path.write_text(content)
    assert main(["place", "-f", str(path), "--cluster", gen_cluster]) == 2
    assert needle in capsys.readouterr().err


def test_bad_cluster_exit_2(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text("kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: many}}\n")
    assert main(["place", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--cluster", str(bad)]) == 2
    assert f"{bad}: Node 'n1': status.allocatable[cpu]" in capsys.readouterr().err
