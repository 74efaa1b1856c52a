"""``segment-webhook capacity`` (DESIGN.md §13): segments and gangs of a shape per domain, checked
against an exact reference (OR-Tools CP-SAT) on small random clusters, and literal cases."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from ortools.sat.python import cp_model

from tests.support.placement_helpers import BLOCK, CLUSTER_TOPOLOGY, GPU, HOST, RACK, ZONE
from webhook.cli import main
from webhook.kube.nodes import Node
from webhook.placement.cluster_index import ClusterIndex
from webhook.planning.capacity import CapacityError, GangShape, capacity, most_gangs, parse_shape

SEED = 20261204


def node(name: str, block: str, rack: str, gpus_free: int, cpu_free: int) -> Node:
    labels = {ZONE: "z0", BLOCK: block, RACK: rack, HOST: name}
    alloc = {GPU: 8000, "cpu": 64000, "pods": 110_000}
    free = {GPU: gpus_free * 1000, "cpu": cpu_free, "pods": 110_000}
    return Node(name=name, labels=labels, allocatable=alloc, free=free)


def random_cluster(rng: random.Random) -> list[Node]:
    nodes = []
    for b in range(2):
        for r in range(rng.randint(1, 3)):
            for n in range(rng.randint(1, 4)):
                nodes.append(node(f"b{b}-r{r}-n{n}", f"b{b}", f"b{b}-r{r}", rng.randint(0, 8),
                                  rng.choice([64000, 24000, 8000])))
    return nodes


def cpsat_segments(nodes: list[Node], size: int, request: dict[str, int]) -> int:
    """Most segments of ``size`` pods (each pod ``request``) on ``nodes``, segments may share nodes."""
    model = cp_model.CpModel()
    upper = sum(n.free[GPU] // request[GPU] for n in nodes) // size + 1
    x = [[model.new_int_var(0, size, f"x{s}_{i}") for i in range(len(nodes))] for s in range(upper)]
    z = [model.new_bool_var(f"z{s}") for s in range(upper)]
    for s in range(upper):
        model.add(sum(x[s]) == size * z[s])
    for i, n in enumerate(nodes):
        for resource, amount in request.items():
            model.add(sum(x[s][i] for s in range(upper)) * amount <= n.free[resource])
    model.maximize(sum(z))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(model) == cp_model.OPTIMAL
    return int(solver.objective_value)


def cpsat_gangs(nodes: list[Node], pods: int, size: int, request: dict[str, int]) -> int:
    """Most gangs of ``pods`` pods in segments of ``size`` (last one partial), each segment in one rack."""
    racks = sorted({n.labels[RACK] for n in nodes})
    sizes = [size] * (pods // size) + ([pods % size] if pods % size else [])
    upper = sum(n.free[GPU] // request[GPU] for n in nodes) // pods + 1
    model = cp_model.CpModel()
    g = [model.new_bool_var(f"g{k}") for k in range(upper)]
    load: list[list[cp_model.IntVar]] = [[] for _ in nodes]
    for k in range(upper):
        for j, seg in enumerate(sizes):
            y = [model.new_bool_var(f"y{k}_{j}_{r}") for r in racks]
            model.add(sum(y) == g[k])
            for i, n in enumerate(nodes):
                x = model.new_int_var(0, seg, f"x{k}_{j}_{i}")
                model.add(x <= seg * y[racks.index(n.labels[RACK])])
                load[i].append(x)
            model.add(sum(load[i][-1] for i in range(len(nodes))) == seg * g[k])
    for i, n in enumerate(nodes):
        for resource, amount in request.items():
            model.add(sum(load[i]) * amount <= n.free[resource])
    model.maximize(sum(g))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 30
    assert solver.solve(model) == cp_model.OPTIMAL
    return int(solver.objective_value)


@pytest.mark.parametrize("case", range(40))
def test_segments_per_rack_are_cpsat_maximum(case):
    rng = random.Random(SEED + case)
    nodes = random_cluster(rng)
    size = rng.randint(2, 5)
    request = {GPU: rng.choice([1000, 2000]), "cpu": rng.choice([4000, 8000, 16000])}
    shape = GangShape(size * 2 + rng.randint(0, size - 1), size, request, RACK, BLOCK)
    report = capacity(ClusterIndex(nodes, CLUSTER_TOPOLOGY), shape)
    for row in report.levels[RACK]:
        members = [n for n in nodes if n.labels[RACK] == row.domain]
        assert row.segments == cpsat_segments(members, size, {**request, "pods": 1000}), row.domain


@pytest.mark.parametrize("case", range(15))
def test_gangs_per_block_are_cpsat_maximum(case):
    rng = random.Random(SEED + 1000 + case)
    nodes = random_cluster(rng)
    size = rng.randint(2, 4)
    request = {GPU: 1000, "cpu": 4000}
    pods = size * rng.randint(1, 2) + rng.randint(0, size - 1)
    report = capacity(ClusterIndex(nodes, CLUSTER_TOPOLOGY), GangShape(pods, size, request, RACK, BLOCK))
    for row in report.levels[BLOCK]:
        members = [n for n in nodes if n.labels[BLOCK] == row.domain]
        assert row.gangs == cpsat_gangs(members, pods, size, {**request, "pods": 1000}), row.domain


def test_literal_rack_counts_and_stranded_capacity():
    # rack a: three nodes with 3 free GPUs each; rack b: one node with 8
    nodes = [node("a-0", "b0", "a", 3, 64000), node("a-1", "b0", "a", 3, 64000), node("a-2", "b0", "a", 3, 64000),
             node("b-0", "b0", "b", 8, 64000)]
    index = ClusterIndex(nodes, CLUSTER_TOPOLOGY)
    one_gpu = capacity(index, GangShape(6, 4, {GPU: 1000}, RACK, BLOCK))
    racks = {row.domain: row for row in one_gpu.levels[RACK]}
    assert (racks["a"].segments, racks["a"].stranded[GPU]) == (2, 1000)  # 9 GPUs: 2 segments of 4, 1 left
    assert (racks["b"].segments, racks["b"].stranded[GPU]) == (2, 0)
    # gangs of 6 = a segment of 4 and one of 2: rack a holds 4+2 (and 2 more slots), rack b 4+2 (+2): 2 gangs...
    # ...and the leftover 3 + 2 slots hold no third gang's 4-pod segment
    assert one_gpu.levels[BLOCK][0].gangs == 2
    assert one_gpu.cluster.segments == 4 and one_gpu.cluster.gangs == 2
    two_gpus = capacity(index, GangShape(4, 4, {GPU: 2000}, RACK, BLOCK))
    racks = {row.domain: row for row in two_gpus.levels[RACK]}
    assert (racks["a"].segments, racks["a"].stranded[GPU]) == (0, 9000)  # one 2-GPU pod per node: 3 < 4
    assert (racks["b"].segments, racks["b"].stranded[GPU]) == (1, 0)


def test_most_gangs_literal():
    assert most_gangs(np.array([8, 8, 8, 8]), 10, 4) == 3  # 4+4+2 per gang, 32 slots: 3 gangs (30 pods)
    assert most_gangs(np.array([5, 5, 5]), 5, 4) == 3
    assert most_gangs(np.array([3, 3, 3]), 8, 4) == 0  # no bin holds a segment of 4
    assert most_gangs(np.array([16]), 16, 8) == 1


@pytest.mark.parametrize("text, message", [
    ("pods=8,segmnt-size=4,nvidia.com/gpu=1", '--shape key "segmnt-size" is neither a field'),
    ("pods=8,nvidia.com/gpu=1", "--shape needs segment-size=<positive integer>"),
    ("pods=8,segment-size=4", "--shape requests no resource"),
    ("pods=8,segment-size=4,nvidia.com/gpu=lots", "--shape nvidia.com/gpu: "),
    ("pods=8,segment-size", '--shape part "segment-size" is not KEY=VALUE'),
    ("pods=32,pods=16,segment-size=8,nvidia.com/gpu=1", '--shape gives pods twice ("32", then "16")'),
    ("pods=32,segment-size=8,nvidia.com/gpu=1,nvidia.com/gpu=2", '--shape gives nvidia.com/gpu twice ("1", then "2")'),
    # new-user trial: counted silently before (place expands at most 100000 pods: planning/expand.py MAX_PODS)
    ("pods=2147483648,segment-size=8,nvidia.com/gpu=1", "--shape pods=2147483648: more than the 100000 pods"),
    ("pods=8,segment-size=200000,nvidia.com/gpu=1", "--shape segment-size=200000: more than the 100000 pods"),
    ("pods=8,segment-size=8,nvidia.com/gpu=999999999999999999999999",
     "--shape nvidia.com/gpu=999999999999999999999999: more than any node can have"),
])
def test_bad_shapes_name_the_part(text, message):
    with pytest.raises(CapacityError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_shape(text)


def test_shape_errors_on_the_topology():
    index = ClusterIndex([node("a-0", "b0", "a", 8, 64000)], CLUSTER_TOPOLOGY)
    with pytest.raises(CapacityError, match='segment-level "rack" is not a level of topology cluster-topology'):
        capacity(index, GangShape(8, 4, {GPU: 1000}, "rack"))
    with pytest.raises(CapacityError, match="is broader than workload-level"):
        capacity(index, GangShape(8, 4, {GPU: 1000}, BLOCK, RACK))
    with pytest.raises(CapacityError, match='has "example.com/tpu"'):
        capacity(index, GangShape(8, 4, {"example.com/tpu": 1000}))


def test_capacity_cli_json_and_table(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "2", "--racks", "2", "--nodes", "4", "--gpus", "8",
                 "--fill", "0", "-o", str(path)]) == 0
    shape = f"pods=32,segment-size=8,nvidia.com/gpu=1,segment-level={RACK},workload-level={BLOCK}"
    assert main(["capacity", "--cluster", str(path), "--shape", shape, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # every rack: 4 nodes x 8 GPUs = 32 GPUs = 4 segments of 8; a block of 2 racks: 64 GPUs = 2 gangs of 32
    assert [d["segments"] for d in doc["levels"][2]["domains"]] == [4, 4, 4, 4]
    assert [d["gangs"] for d in doc["levels"][1]["domains"]] == [2, 2]
    assert doc["cluster"]["gangs"] == 4 and doc["cluster"]["free"] == {GPU: 64 * 2}
    assert main(["capacity", "--cluster", str(path), "--shape", shape]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["LEVEL", "DOMAIN", "NODES"]
    assert table[2].split() == ["cluster", "cluster", "16", "128", "16", "4", "0"]
    assert main(["capacity", "--cluster", str(path), "--shape", shape, "--topology", "nope"]) == 2
    assert ('--topology "nope" is not loaded; loaded: cluster-topology; fix: name one of them, or add the Topology '
            'with --topology-file') in capsys.readouterr().err


def test_several_topologies_need_topology(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "1", "--nodes", "2", "--gpus", "8",
                 "--fill", "0", "-o", str(path)]) == 0
    second = tmp_path / "t.yaml"
    second.write_text("apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: racks-only}\n"
                      f"spec: {{levels: [{{nodeLabel: {RACK}}}]}}\n")
    shape = "pods=4,segment-size=2,nvidia.com/gpu=1"
    assert main(["capacity", "--cluster", str(path), "--topology-file", str(second), "--shape", shape]) == 2
    assert "several Topologies are loaded (cluster-topology, racks-only); fix: name one with --topology" in \
        capsys.readouterr().err
    assert main(["capacity", "--cluster", str(path), "--topology-file", str(second), "--shape", shape,
                 "--topology", "racks-only", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [lv["level"] for lv in doc["levels"]] == [RACK] and doc["cluster"]["segments"] == 8


def test_the_guides_capacity_example_prints_what_planning_md_shows(tmp_path, capsys):
    """docs/concepts/planning.md's capacity example: its two commands, run as written, print its
    table line for line (a new-user trial found the old table from another cluster: 3 gangs of 32
    one-GPU pods in 48 free GPUs). Expected by hand from the table: racks of 7, 16, 16 and 9 free
    GPUs hold 0 + 2 + 2 + 1 = 5 segments of 8, so 1 gang of 4 segments; 7 + 1 GPUs stranded."""
    from tests.support import paths

    doc = (paths.REPO / "docs" / "concepts" / "planning.md").read_text()
    gen = "$ segment-webhook gen-cluster --zones 1 --blocks 1 --racks 4 --nodes 4 --gpus 4 --fill 0.25 --seed 1 -o cluster.yaml\n"
    block = doc[doc.index(gen):].split("```")[0]
    command, shown = block.split("\n", 3)[1:3], block.split("\n", 3)[3]
    shape = command[1].split("--shape ")[1]
    cluster = tmp_path / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "4", "--nodes", "4", "--gpus", "4",
                 "--fill", "0.25", "--seed", "1", "-o", str(cluster)]) == 0
    capsys.readouterr()
    assert main(["capacity", "--cluster", str(cluster), "--shape", shape]) == 0
    printed = capsys.readouterr()
    assert printed.out + printed.err == shown
    assert "cluster                            cluster                      16                   48         5      1         8" in shown


def test_a_dump_without_a_topology_is_read_with_the_embedded_default_as_place_reads_it(capsys):
    """A new-user trial: `capacity` refused docs/examples/advisory-cluster.yaml ("no Topology in the
    --cluster dumps") where `place` and `controller --once` read it with the embedded default
    cluster-topology. Expected by hand: racks r0, r1, r2 of two one-GPU nodes, n-r0-0 busy: 1 + 2 + 2
    = 5 free GPUs; segments of 2 fit in r1 and r2 (2 segments), 1 gang of 4 pods; 1 GPU stranded."""
    from tests.support import paths

    dump = str(paths.REPO / "docs" / "examples" / "advisory-cluster.yaml")
    assert main(["capacity", "--cluster", dump, "--shape",
                 f"pods=4,segment-size=2,{GPU}=1,segment-level={RACK}"]) == 0
    out = capsys.readouterr().out
    assert "topology cluster-topology" in out
    assert "cluster                            cluster                       6                    5         2      1         1" in out


def test_capacity_f_prints_the_webhooks_warnings_and_names_the_file(tmp_path, capsys):
    """A second new-user trial: `capacity -f` of a DistributedWorkload with `workerPerSegment: 8`
    counted gangs of one 32-pod segment with nothing on stderr (place and review warn); and its kind
    errors left out the file's name."""
    from tests.support import paths

    dump = str(paths.REPO / "docs" / "examples" / "advisory-cluster.yaml")
    typo = tmp_path / "dw.yaml"
    typo.write_text((paths.SHARED / "examples" / "distributedworkload-native.yaml").read_text()
                    .replace("workersPerSegment: 8", "workerPerSegment: 8"))
    assert main(["capacity", "--cluster", dump, "-f", str(typo)]) == 0
    assert ("Warning: DistributedWorkload llama-tp8: unknown field spec.workerPerSegment=8: did you mean "
            "spec.workersPerSegment? rename it; the API server drops it\n") in capsys.readouterr().err
    kind = tmp_path / "k.yaml"
    kind.write_text("apiVersion: kubeflow.org/v1\nkind: PyTorchJobb\nmetadata: {name: x}\n")
    assert main(["capacity", "--cluster", dump, "-f", str(kind)]) == 2
    assert capsys.readouterr().err.startswith(f'segment-webhook capacity: error: {kind}: kind "PyTorchJobb" is not '
                                              "supported (did you mean PyTorchJob?)")
