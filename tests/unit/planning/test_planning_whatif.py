"""``place --what-if`` (DESIGN.md §13): the smallest changes that make a workload fit, each verified
by the engine, and the second opinion (fits / waiting for capacity / can never fit)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from webhook.cli import main

RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
SIZE = "kai.scheduler/segment-size"


def job(workers: int = 64, size: int = 8, gpus: int = 1, elastic: dict | None = None) -> dict:
    """A PyTorchJob of ``workers`` one-GPU workers in segments of ``size`` at rack level."""
    spec: dict = {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {
        "metadata": {"annotations": {"kai.scheduler/topology": "cluster-topology", SIZE: str(size),
                                     "kai.scheduler/segment-topology-required-placement": RACK}},
        "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest",
                                 "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}
    if elastic:
        spec["elasticPolicy"] = elastic
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train64", "namespace": "team-a"},
            "spec": spec}


def write(path, obj) -> str:
    path.write_text(yaml.safe_dump(obj))
    return str(path)


@pytest.fixture(scope="module")
def racks_of_four(tmp_path_factory) -> str:
    """2 blocks × 8 racks × 4 nodes of 1 GPU, all free: a rack holds 4 pods, never 8."""
    path = tmp_path_factory.mktemp("wi") / "racks.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "2", "--racks", "8", "--nodes", "4", "--gpus", "1",
                 "--fill", "0", "-o", str(path)]) == 0
    return str(path)


def other_pod(k: int, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"other-{k}-worker-0", "namespace": "team-b",
                         "labels": {"training.kubeflow.org/job-name": f"other-{k}",
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": "0"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Running"}}


@pytest.fixture(scope="module")
def ten_of_sixteen_busy(tmp_path_factory) -> tuple[str, dict]:
    """1 block × 4 racks × 4 nodes of 8 GPUs; the first 10 nodes (by name) each run one 8-GPU pod of
    its own job: 48 GPUs free, 64 needed, every node one whole segment of 8."""
    from webhook.planning.gencluster import generate

    doc = generate(1, 1, 4, 4, 8, fill=0.0)
    names = sorted(i["metadata"]["name"] for i in doc["items"] if i["kind"] == "Node")
    doc["items"] += [other_pod(k, name) for k, name in enumerate(names[:10])]
    path = tmp_path_factory.mktemp("wi") / "busy.yaml"
    return write(path, doc), doc


def what_if(tmp_path, capsys, workload: dict, cluster: str) -> tuple[int, dict]:
    code = main(["place", "-f", write(tmp_path / "job.yaml", workload), "--cluster", cluster, "--what-if", "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_size_4_is_the_first_change_when_8_never_fits_a_rack(racks_of_four, tmp_path, capsys):
    code, doc = what_if(tmp_path, capsys, job(size=8), racks_of_four)
    assert code == 1 and doc["fits"] is False and doc["verdict"] == "never-fits"
    first = doc["changes"][0]
    assert first["fits"] is True
    assert {k: first["change"][k] for k in ("kind", "key", "from", "to")} == \
        {"kind": "segment-size", "key": SIZE, "from": 8, "to": 4}
    assert first["placement"]["placed"] is True and len(first["placement"]["assignments"]) == 64
    assert [s["level"] for s in first["placement"]["segments"]] == [RACK] * 16
    # the next one keeps size 8 and relaxes the segment level one step (a block holds 32 GPUs)
    second = doc["changes"][1]["change"]
    assert {k: second[k] for k in ("kind", "from", "to")} == {"kind": "segment-required", "from": RACK, "to": BLOCK}
    # plain `place` of the changed workload fits; the unchanged one does not
    assert main(["place", "-f", write(tmp_path / "four.yaml", job(size=4)), "--cluster", racks_of_four]) == 0
    assert main(["place", "-f", write(tmp_path / "eight.yaml", job(size=8)), "--cluster", racks_of_four]) == 1


def test_freeing_two_nodes_is_the_first_change_and_names_their_pods(ten_of_sixteen_busy, tmp_path, capsys):
    path, doc = ten_of_sixteen_busy
    code, result = what_if(tmp_path, capsys, job(size=8), path)
    assert code == 1 and result["verdict"] == "waiting-for-capacity"
    assert result["waiting_for"]["resource"] == "nvidia.com/gpu"
    first = result["changes"][0]["change"]
    assert first["kind"] == "free-nodes" and first["to"] == 2 and first["proven"] is True
    assert len(first["nodes"]) == 2
    busy = {p["spec"]["nodeName"]: p for p in doc["items"] if p["kind"] == "Pod"}
    assert set(first["nodes"]) <= set(busy)
    assert sorted(first["pods"]) == sorted(f"team-b/{busy[n]['metadata']['name']}" for n in first["nodes"])
    assert sorted(first["gangs"]) == sorted(f"team-b/{busy[n]['metadata']['labels']['training.kubeflow.org/job-name']}"
                                            for n in first["nodes"])
    # no segment size or level change can help: 48 free GPUs for 64 pods
    assert [c["change"]["kind"] for c in result["changes"]] == ["free-nodes"]
    # with those two pods gone, plain `place` fits
    freed = copy.deepcopy(doc)
    freed["items"] = [i for i in freed["items"] if not (i["kind"] == "Pod" and i["spec"]["nodeName"] in first["nodes"])]
    assert main(["place", "-f", write(tmp_path / "job.yaml", job(size=8)), "--cluster",
                 write(tmp_path / "freed.yaml", freed)]) == 0


def test_a_workload_that_fits_exits_0_with_its_placement(racks_of_four, tmp_path, capsys):
    code, doc = what_if(tmp_path, capsys, job(size=4), racks_of_four)
    assert code == 0 and doc["fits"] is True and doc["verdict"] == "fits" and doc["changes"] == []
    assert len(doc["placement"]["assignments"]) == 64
    assert main(["place", "-f", str(tmp_path / "job.yaml"), "--cluster", racks_of_four, "--what-if"]) == 0
    assert capsys.readouterr().out.startswith("fits on today's free capacity")
    assert main(["place", "-f", str(tmp_path / "job.yaml"), "--cluster", racks_of_four, "--what-if", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == doc


def test_nothing_fits_says_which_resource(racks_of_four, tmp_path, capsys):
    code, doc = what_if(tmp_path, capsys, job(workers=64, size=8, gpus=2), racks_of_four)
    assert code == 1 and doc["verdict"] == "never-fits" and doc["changes"] == []
    assert doc["no_change"].startswith("not even without any required level, with every node free: ")
    assert "nvidia.com/gpu" in doc["no_change"]
    assert main(["place", "-f", str(tmp_path / "job.yaml"), "--cluster", racks_of_four, "--what-if"]) == 1
    assert "no change within the search bound fits: not even without any required level, with every node free" in capsys.readouterr().out


def test_an_elastic_job_gets_fewer_workers(ten_of_sixteen_busy, tmp_path, capsys):
    path, _ = ten_of_sixteen_busy
    code, doc = what_if(tmp_path, capsys, job(size=8, elastic={"minReplicas": 8, "maxReplicas": 64}), path)
    assert code == 1
    replicas = [c for c in doc["changes"] if c["change"]["kind"] == "replicas"]
    assert [(c["change"]["from"], c["change"]["to"]) for c in replicas] == [(64, 48)]  # 6 free nodes × 8 GPUs
    assert len(replicas[0]["placement"]["assignments"]) == 48


def test_what_if_bad_input_exits_2(racks_of_four, tmp_path, capsys):
    path = write(tmp_path / "job.yaml", job())
    assert main(["place", "-f", path, "--cluster", racks_of_four, "--what-if", "--svg", str(tmp_path / "x.svg")]) == 2
    assert "--svg draws one placement and does not go with --what-if" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Deployment\nmetadata: {name: d}\n")
    assert main(["place", "-f", str(bad), "--cluster", racks_of_four, "--what-if"]) == 2
    assert 'kind "Deployment" is not supported' in capsys.readouterr().err


def test_a_leaderworkerset_gets_fewer_replicas(ten_of_sixteen_busy, tmp_path, capsys):
    """8 groups of 8 one-GPU pods (segments of 4 at rack) on 48 free GPUs: 6 groups fit; freeing
    2 nodes (16 GPUs) fits all 8."""
    path, _ = ten_of_sixteen_busy
    lws: dict = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "lws"},
                 "spec": {"replicas": 8, "leaderWorkerTemplate": {
                     "size": 8, "subGroupPolicy": {"subGroupSize": 4, "subGroupPolicyType": "LeaderWorker"},
                     "leaderTemplate": {"spec": {"containers": [{"name": "l", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
                     "workerTemplate": {"metadata": {"annotations": {
                         "kai.scheduler/topology": "cluster-topology",
                         "kai.scheduler/segment-topology-required-placement": RACK}},
                         "spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}
    code, doc = what_if(tmp_path, capsys, lws, path)
    assert code == 1 and doc["verdict"] == "waiting-for-capacity"
    kinds = [(c["change"]["kind"], c["change"]["from"], c["change"]["to"]) for c in doc["changes"]]
    assert kinds == [("free-nodes", 0, 2), ("replicas", 8, 6)]
    assert len(doc["changes"][1]["placement"]["assignments"]) == 48
    lws["spec"]["replicas"] = 6
    assert main(["place", "-f", write(tmp_path / "six.yaml", lws), "--cluster", path]) == 0


def test_a_denied_workload_exits_1_without_changes(racks_of_four, tmp_path, capsys):
    denied = job()
    denied["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SIZE] = "4x"
    code, doc = what_if(tmp_path, capsys, denied, racks_of_four)
    assert code == 1 and doc["verdict"] == "denied" and doc["changes"] == []
    assert doc["reason"].startswith("denied by the webhook: ") and SIZE in doc["reason"]


@pytest.mark.parametrize("case", range(25))
def test_nodes_to_free_against_every_subset(case):
    """On 8-node clusters with random bound GPUs: the answer places the gang, never frees fewer
    nodes than the fewest found by trying every subset of busy nodes, and equals it when proven."""
    import itertools
    import random

    from tests.support.placement_helpers import CLUSTER_TOPOLOGY, GPU, node, workers
    from webhook.placement.cluster_index import ClusterIndex
    from webhook.placement.engine import Gang, place
    from webhook.planning.freeing import Shape, fewest_nodes_to_free

    rng = random.Random(7000 + case)
    nodes = [node(f"r{r}-{i}", "z0", "b0", f"r{r}", **{GPU: 4000}) for r in range(2) for i in range(4)]
    for n in nodes:
        n.free[GPU] = 1000 * rng.choice([0, 0, 1, 2, 4])
    size = rng.choice([2, 4])
    pods = rng.choice([8, 12, 16])
    gang = Gang(workers(pods, size), segment_required=RACK)
    index = ClusterIndex(nodes, CLUSTER_TOPOLOGY)
    shape = Shape(gang.pods[0], pods, -(-pods // size), size, 0, index.depth_of(RACK) or 0)
    freed = fewest_nodes_to_free(index, shape, lambda ix: place(ix, gang))
    busy = [i for i in range(index.n) if index.free[i, index.col[GPU]] < index.alloc[i, index.col[GPU]]]
    saved = index.free.copy()
    fewest = None
    for count in range(len(busy) + 1):
        for subset in itertools.combinations(busy, count):
            index.free[:] = saved
            for i in subset:
                index.free[i] = index.alloc[i]
            if place(index, gang).placed:
                fewest = count
                break
        if fewest is not None:
            break
    index.free[:] = saved
    if fewest is None or fewest == 0:
        assert freed is None or fewest == 0
        return
    assert freed is not None and freed.placement.placed
    assert len(freed.nodes) >= fewest
    if freed.proven:
        assert len(freed.nodes) == fewest
    assert len(freed.nodes) == fewest  # on these instances the search also finds the fewest when not proven
    for name in freed.nodes:  # the freed nodes hold the placement's extra pods
        assert name in [index.node_names[i] for i in busy]
