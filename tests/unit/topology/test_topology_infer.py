"""Topology from the nodes (DESIGN.md §12): webhook.topology.infer on dumps in each provider's
shape, labels that mislead (a key whose meaning depends on the hardware, labels on some nodes only,
placeholders, repeated or conflicting values), every §12 finding of ``check``, and a property test
on random nested label trees. Expected levels are written out literally from the provider table
(docs/concepts/topology.md "Topology from the nodes")."""

from __future__ import annotations

import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.planning.gencluster import generate
from webhook.topology.infer import NodeLabelError, NodeLabels, check, infer, node_labels_of

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
L1, L2, L3, L4 = (f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3, 4))
CLIQUE = "nvidia.com/gpu.clique"
INSTANCE = "node.kubernetes.io/instance-type"
ATTRIBUTES = {INSTANCE, "beta.kubernetes.io/instance-type", "nvidia.com/gpu.product", "kubernetes.io/arch",
              "kubernetes.io/os", "cloud.google.com/gke-accelerator", "cloud.google.com/machine-family",
              "cloud.google.com/gke-tpu-topology", "topology.kubernetes.io/region", "nvidia.com/gpu.machine",
              "oci.oraclecloud.com/fault-domain", "failure-domain.beta.kubernetes.io/zone"}


def preset_nodes(preset: str, zones=2, blocks=2, racks=4, nodes=4) -> list[NodeLabels]:
    doc = generate(zones, blocks, racks, nodes, 8, 0.0, 0, labels=preset)
    return [node_labels_of(item) for item in doc["items"] if item["kind"] == "Node"]


def kinds(findings) -> list[str]:
    return sorted(f.kind for f in findings)


def relabeled(node: NodeLabels, changes: dict[str, str | None]) -> NodeLabels:
    """``node`` with its labels changed: a key set to a value, or removed where ``changes`` has None."""
    labels = {**node.labels, **changes}
    return NodeLabels(node.name, {k: v for k, v in labels.items() if v is not None})


# ------------------------------------------------------------------ each provider family's order

PRESET_LEVELS = {
    "eks": [ZONE, L1, L2, L3, HOST],
    "gke": [ZONE, "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
            "cloud.google.com/gce-topology-host", HOST],
    "oci": [ZONE, "oci.oraclecloud.com/rdma.hpc_island_id", "oci.oraclecloud.com/rdma.network_block_id",
            "oci.oraclecloud.com/rdma.local_block_id", HOST],
    "nebius": [ZONE, "topology.nebius.com/gpu-cluster-id", "topology.nebius.com/tier-2",
               "topology.nebius.com/tier-1", HOST],
    "topograph": ["fabric.topograph.run/tier-3", "fabric.topograph.run/tier-2", "fabric.topograph.run/tier-1",
                  "fabric.topograph.run/tier-0", "accelerator.topograph.run/domain", HOST],
}


@pytest.mark.parametrize("preset", sorted(PRESET_LEVELS))
def test_infer_recovers_each_presets_order_and_no_attribute_label_becomes_a_level(preset):
    nodes = preset_nodes(preset)
    assert ATTRIBUTES & {k for n in nodes for k in n.labels}  # the attribute labels are there
    result = infer(nodes)
    assert [list(t.levels) for t in result.topologies] == [PRESET_LEVELS[preset]]
    assert not ATTRIBUTES & set(result.candidates)
    topo = result.topologies[0]
    assert topo.name == "cluster-topology" and topo.kept == 64
    # 2 zones x 2 blocks x 4 racks x 4 nodes: 2, 4, (8 or 16), 16|32, 64 domains
    assert [s.domains for s in topo.stats][0] == 2 and topo.stats[-1].domains == 64
    assert (topo.stats[0].smallest, topo.stats[0].median, topo.stats[0].largest) == (32, 32, 32)
    assert topo.findings == []


def test_eks_domains_and_nodes_per_domain():
    topo = infer(preset_nodes("eks")).topologies[0]
    assert [(s.key, s.domains, s.smallest, s.median, s.largest) for s in topo.stats] == [
        (ZONE, 2, 32, 32, 32), (L1, 4, 16, 16, 16), (L2, 8, 8, 8, 8), (L3, 16, 4, 4, 4), (HOST, 64, 1, 1, 1)]


def test_older_topograph_keys_left_after_an_upgrade_are_aliases_of_the_new_ones():
    result = infer(preset_nodes("topograph"))
    aliases = {f.level: set(f.values) for f in result.findings if f.kind == "aliases"}
    assert aliases == {
        "fabric.topograph.run/tier-2": {"network.topology.nvidia.com/core"},
        "fabric.topograph.run/tier-1": {"network.topology.nvidia.com/spine"},
        "fabric.topograph.run/tier-0": {"network.topology.nvidia.com/leaf"},
        "accelerator.topograph.run/domain": {"network.topology.nvidia.com/accelerator", CLIQUE},
    }


def test_coreweave_family_order():
    nodes = []
    for fabric in range(2):
        for pod in range(2):
            for leaf in range(2):
                for rack in range(2):
                    for n in range(2):
                        name = f"cw-{fabric}{pod}{leaf}{rack}{n}"
                        nodes.append(NodeLabels(name, {
                            "ib.coreweave.cloud/fabric": f"fab{fabric}", "ib.coreweave.cloud/superpod": f"sp{fabric}{pod}",
                            "ib.coreweave.cloud/leafgroup": f"lg{fabric}{pod}{leaf}",
                            "node.coreweave.cloud/rack": f"rk{fabric}{pod}{leaf}{rack}",
                            "gpu.nvidia.com/class": "H100_NVLINK_80GB", "node.coreweave.cloud/cpu": "intel-xeon-v4",
                            HOST: name}))
    assert [list(t.levels) for t in infer(nodes).topologies] == [[
        "ib.coreweave.cloud/fabric", "ib.coreweave.cloud/superpod", "ib.coreweave.cloud/leafgroup",
        "node.coreweave.cloud/rack", HOST]]


def test_gke_tpu_shape_is_never_a_level():
    nodes = [NodeLabels(f"tpu-{i}", {"cloud.google.com/gke-tpu-topology": f"{2 + i % 2}x4",
                                     "cloud.google.com/gce-topology-block": f"b{i // 4}", HOST: f"tpu-{i}"})
             for i in range(8)]
    result = infer(nodes)
    assert [list(t.levels) for t in result.topologies] == [["cloud.google.com/gce-topology-block", HOST]]
    assert "cloud.google.com/gke-tpu-topology" not in result.candidates


# ------------------------------------------------------------------ labels that mislead

def eks_node(name, hw, path, clique=None):
    """An EKS node: ``path`` = (zone, layer-1, layer-2, layer-3[, layer-4]) group numbers."""
    labels = {INSTANCE: hw, HOST: name, ZONE: f"us-east-1{'ab'[path[0]]}", "kubernetes.io/arch": "amd64"}
    for layer in range(1, len(path)):
        labels[f"topology.k8s.aws/network-node-layer-{layer}"] = f"nn-{hw[:3]}-{layer}-{path[layer]}"
    if clique:
        labels[CLIQUE] = clique
    return NodeLabels(name, labels)


def mixed_eks():
    """80 p5.48xlarge nodes (3 layers) and 64 p6e-gb200.36xlarge nodes (4 layers, gpu.clique)."""
    nodes = [eks_node(f"p5-{i:02d}", "p5.48xlarge", (i // 40, i // 20, i // 10, i // 2)) for i in range(80)]
    nodes += [eks_node(f"gb-{i:02d}", "p6e-gb200.36xlarge", (i // 32, i // 16, i // 8, i // 4, i // 2),
                       clique=f"8a4c1f2e-0000-4000-8000-{i // 4:012d}.{i // 2 % 2}") for i in range(64)]
    return nodes


def test_eks_layer_3_means_different_things_by_instance_type_one_topology_each():
    result = infer(mixed_eks())
    assert [(t.name, list(t.levels)) for t in result.topologies] == [
        ("cluster-topology-p5-48xlarge", [ZONE, L1, L2, L3, HOST]),
        ("cluster-topology-p6e-gb200-36xlarge", [ZONE, L1, L2, L3, L4, HOST]),
    ]
    found = {f.kind: f for f in result.findings}
    assert found["key-meaning-differs"].level == L3
    assert "cluster-topology-p6e-gb200-36xlarge" in found["key-meaning-differs"].message
    assert L4 in found["node-groups"].message and "p5.48xlarge (80)" in found["node-groups"].message
    # gpu.clique (<clusterUUID>.<cliqueId>) splits the GB200 nodes as layer-4 does: an alias
    assert [(f.level, f.values) for f in result.findings if f.kind == "aliases"] == [(L4, (CLIQUE,))]
    assert all(t.findings == [] for t in result.topologies)


def test_label_on_only_some_nodes_of_one_hardware_is_reported_not_a_level():
    nodes = preset_nodes("nebius", zones=1, blocks=2, racks=4, nodes=2)
    for i, node in enumerate(nodes[:3]):  # tier-0 on 3 of 16 nodes of the same hardware
        nodes[i] = relabeled(node, {"topology.nebius.com/tier-0": f"t0-{node.name}"})
    result = infer(nodes)
    assert [list(t.levels) for t in result.topologies] == [[
        "topology.nebius.com/gpu-cluster-id", "topology.nebius.com/tier-2", "topology.nebius.com/tier-1", HOST]]
    few = [f for f in result.findings if f.kind == "key-on-few-nodes"]
    assert [(f.level, f.nodes) for f in few] == [("topology.nebius.com/tier-0", tuple(sorted(n.name for n in nodes[:3])))]
    single = [f for f in result.findings if f.kind == "single-domain-level"]
    assert [(f.level, f.values) for f in single] == [(ZONE, ("eu-north1-a",))]


def test_hostname_that_differs_from_the_node_name_is_reported_and_kept_last():
    result = infer(preset_nodes("oci"))
    assert result.topologies[0].levels[-1] == HOST
    differs = [f for f in result.findings if f.kind == "hostname-differs-from-node-name"]
    assert len(differs) == 1 and len(differs[0].nodes) == 64 and "10.0.0.0 has " in differs[0].message


def test_repeated_hostname_values_are_found():
    nodes = [NodeLabels(f"n{i}", {"example.com/rack": f"r{i // 2}", HOST: "same" if i < 2 else f"h{i}"})
             for i in range(4)]
    findings = check(["example.com/rack", HOST], nodes)
    assert [(f.kind, f.values, f.nodes) for f in findings] == [("hostname-not-unique", ("same",), ("n0", "n1"))]


def test_clique_id_without_its_cluster_uuid_repeats_and_is_left_out():
    """GB200 clique ids repeat across NVL72 domains when only the id part is used: that key does not
    nest and goes; nvidia.com/gpu.clique (<clusterUUID>.<cliqueId>) is kept."""
    nodes = []
    for rack in range(4):
        for n in range(4):
            name = f"gb-{rack}-{n}"
            nodes.append(NodeLabels(name, {
                "fabric.topograph.run/tier-0": f"leaf-{rack // 2}", "example.com/rack": f"rack-{rack}",
                CLIQUE: f"0f1e2d3c-aaaa-4bbb-8ccc-00000000000{rack}.{n // 2}", "example.com/clique-id": str(n // 2),
                HOST: name}))
    result = infer(nodes, extra_keys=["example.com/rack", "example.com/clique-id"])
    assert [list(t.levels) for t in result.topologies] == [[
        "fabric.topograph.run/tier-0", "example.com/rack", CLIQUE, HOST]]
    not_nested = [f for f in result.findings if f.kind == "keys-do-not-nest"]
    assert {f.level for f in not_nested} == {"example.com/clique-id / example.com/rack",
                                             "fabric.topograph.run/tier-0 / example.com/clique-id"}
    assert all("example.com/clique-id is left out" in f.message for f in not_nested)
    assert '"0" under "rack-0": 2 nodes, "rack-1": 2 nodes' in " ".join(f.message for f in not_nested)


def test_two_keys_that_only_conflict_with_each_other_are_both_left_out_never_ordered():
    nodes = []
    for block in "ab":
        for rack in (1, 2):
            for n in range(2):
                name = f"{block}{rack}{n}"
                nodes.append(NodeLabels(name, {"example.com/block": block, "example.com/rack": f"r{rack}", HOST: name}))
    nodes += [NodeLabels("c10", {"example.com/block": "c", "example.com/rack": "r3", HOST: "c10"})]
    result = infer(nodes, extra_keys=["example.com/block", "example.com/rack"])
    assert [list(t.levels) for t in result.topologies] == []  # only hostname would be left
    finding = next(f for f in result.findings if f.kind == "keys-do-not-nest")
    assert finding.level == "example.com/block / example.com/rack"
    assert "example.com/block and example.com/rack are left out" in finding.message
    assert '"r1" under "a": 2 nodes, "b": 2 nodes' in finding.message
    assert "no-topology-labels" in kinds(result.findings)


def test_placeholder_values_count_as_missing_and_the_nodes_are_named_dropped():
    nodes = preset_nodes("eks", zones=1, blocks=2, racks=4, nodes=2)
    nodes[0] = relabeled(nodes[0], {L3: "no-imds-data"})
    nodes[5] = relabeled(nodes[5], {L3: "Unknown"})
    nodes[9] = relabeled(nodes[9], {L2: None})
    result = infer(nodes)
    assert [list(t.levels) for t in result.topologies] == [[L1, L2, L3, HOST]]
    placeholders = sorted((f.level, f.values, f.nodes) for f in result.findings if f.kind == "placeholder-value")
    assert placeholders == [(L3, ("Unknown",), (nodes[5].name,)), (L3, ("no-imds-data",), (nodes[0].name,))]
    dropped = {f.level: f.nodes for f in result.topologies[0].findings if f.kind == "dropped-nodes"}
    assert dropped == {L2: (nodes[9].name,), L3: tuple(sorted([nodes[0].name, nodes[5].name]))}
    assert result.topologies[0].kept == 13


def test_hardware_without_any_topology_label_gets_no_topology_and_is_named():
    nodes = preset_nodes("eks", zones=1, blocks=2, racks=4, nodes=2)
    nodes += [NodeLabels(f"cpu-{i}", {INSTANCE: "m5.xlarge", HOST: f"cpu-{i}", ZONE: "us-east-1a"}) for i in range(3)]
    result = infer(nodes)
    assert [(t.name, list(t.levels)) for t in result.topologies] == [("cluster-topology", [L1, L2, L3, HOST])]
    none = [f for f in result.findings if f.kind == "no-topology-labels"]
    assert len(none) == 1 and none[0].nodes == ("cpu-0", "cpu-1", "cpu-2")


def test_node_labels_of_names_the_bad_field():
    with pytest.raises(NodeLabelError, match=r'Node "n1": metadata.labels\["a"\] = 7: a label value must be a string'):
        node_labels_of({"metadata": {"name": "n1", "labels": {"a": 7}}})
    with pytest.raises(NodeLabelError, match="Node has no metadata.name"):
        node_labels_of({"metadata": {}})
    assert node_labels_of({"metadata": {"name": "n"}}) == NodeLabels("n", {})


# ------------------------------------------------------------------ check: every §12 finding

def default_nodes(**kw) -> list[NodeLabels]:
    doc = generate(kw.get("zones", 2), 2, 2, 2, 8, 0.0, 0)
    return [node_labels_of(item) for item in doc["items"] if item["kind"] == "Node"]


BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
CLEAN = [ZONE, BLOCK, RACK, HOST]


def test_check_clean_topology_has_no_findings():
    assert check(CLEAN, default_nodes()) == []


def test_check_levels_out_of_order():
    findings = check([ZONE, RACK, BLOCK, HOST], default_nodes())
    assert [(f.kind, f.level) for f in findings] == [("levels-out-of-order", f"{RACK} / {BLOCK}")]
    assert f"fix: order spec.levels by nesting: {ZONE}, {BLOCK}, {RACK}, {HOST}" in findings[0].text()


def test_check_hostname_not_last():
    findings = check([ZONE, HOST, BLOCK], default_nodes())
    assert ("levels-out-of-order", HOST) in [(f.kind, f.level) for f in findings]


def test_check_values_under_two_parents():
    nodes = default_nodes()
    # rack-00-01-0 → "rack-0": racks of different blocks share a value
    nodes = [relabeled(node, {RACK: "rack-" + node.labels[RACK][-1]}) for node in nodes]
    findings = [f for f in check(CLEAN, nodes) if f.kind == "values-under-two-parents"]
    assert [(f.level, f.values) for f in findings] == [(RACK, ("rack-0", "rack-1"))]
    assert len(findings[0].nodes) == 16
    assert ('"rack-0" under "block-0-0": 2 nodes, "block-0-1": 2 nodes, "block-1-0": 2 nodes, "block-1-1": 2 nodes'
            in findings[0].message)


def test_check_duplicate_level():
    nodes = default_nodes()
    nodes = [relabeled(node, {"example.com/block": node.labels[BLOCK].upper()}) for node in nodes]
    findings = check([ZONE, BLOCK, "example.com/block", RACK, HOST], nodes)
    assert [(f.kind, f.values) for f in findings] == [("duplicate-level", (BLOCK, "example.com/block"))]


def test_check_single_domain_level():
    findings = check(CLEAN, default_nodes(zones=1))
    assert [(f.kind, f.level, f.values) for f in findings] == [("single-domain-level", ZONE, ("zone-0",))]


def test_check_placeholder_values_and_dropped_nodes():
    nodes = default_nodes()
    nodes[3] = relabeled(nodes[3], {RACK: "none"})
    nodes[7] = relabeled(nodes[7], {BLOCK: None})
    findings = check(CLEAN, nodes)
    assert [(f.kind, f.level, f.values, f.nodes) for f in findings] == [
        ("placeholder-value", RACK, ("none",), ("node-0-0-1-1",)),
        ("dropped-nodes", BLOCK, (), ("node-0-1-1-1",)),
        ("dropped-nodes", RACK, (), ("node-0-0-1-1",)),
    ]
    assert all(f.fix for f in findings)


def test_check_label_no_node_carries_drops_every_node():
    findings = check([ZONE, "example.com/rack", HOST], default_nodes())
    assert [(f.kind, f.level, len(f.nodes)) for f in findings] == [("dropped-nodes", "example.com/rack", 16)]


def test_check_kai_dot_joined_domain_ids_collide():
    rows = [("n1", "a.b", "c"), ("n1b", "a.b", "c"), ("n2", "a", "b.c"), ("n3", "d", "e"), ("n4", "d", "f")]
    nodes = [NodeLabels(name, {"example.com/block": block, "example.com/rack": rack, HOST: name})
             for name, block, rack in rows]
    findings = check(["example.com/block", "example.com/rack", HOST], nodes)
    assert [(f.kind, f.level, f.values, f.nodes) for f in findings] == [
        ("domain-path-collision", "example.com/rack", ("a.b.c",), ("n1", "n1b", "n2"))]
    assert "fix: " in findings[0].text()


# ------------------------------------------------------------------ property: random label trees

PLACEHOLDERS = ("", "unknown", "none", "no-imds-data", "UNKNOWN")


@st.composite
def label_trees(draw):
    depth = draw(st.integers(1, 4))
    branching = [draw(st.integers(2, 3)) for _ in range(depth)]
    leaf_size = draw(st.integers(3, 4))
    names = draw(st.lists(st.text(string.ascii_lowercase, min_size=3, max_size=6), min_size=depth, max_size=depth,
                          unique=True))
    keys = [f"example.com/{n}" for n in names]
    aliased = draw(st.lists(st.booleans(), min_size=depth, max_size=depth))
    nodes = []
    paths: list[tuple[int, ...]] = [()]
    for width in branching:
        paths = [p + (i,) for p in paths for i in range(width)]
    for leaf in paths:
        for n in range(leaf_size):
            name = "node-" + "-".join(map(str, leaf)) + f"-{n}"
            labels = {HOST: name, INSTANCE: "gpu.large", "kubernetes.io/arch": "amd64"}
            for level, key in enumerate(keys):
                value = f"v{level}-" + "-".join(map(str, leaf[: level + 1]))
                labels[key] = value
                if aliased[level]:
                    labels[key + "-alias"] = value.upper() + "x"
            nodes.append(NodeLabels(name, labels))
    # at most one planted problem per leaf domain (every domain keeps nodes with every label)
    problems = {}
    for leaf_at in range(len(paths)):
        kind = draw(st.sampled_from(("none", "none", "missing", "placeholder")))
        if kind == "none":
            continue
        position = leaf_at * leaf_size + draw(st.integers(0, leaf_size - 1))
        key = draw(st.sampled_from(keys))
        if kind == "missing":
            nodes[position] = relabeled(nodes[position], {key: None})
            problems[nodes[position].name] = (key, None)
        else:
            value = draw(st.sampled_from(PLACEHOLDERS))
            nodes[position] = relabeled(nodes[position], {key: value})
            problems[nodes[position].name] = (key, value)
    order = draw(st.permutations(range(len(nodes))))
    return keys, aliased, [nodes[i] for i in order], problems


@settings(max_examples=int(os.environ.get("TOPOLOGY_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(label_trees())
def test_infer_recovers_random_trees_and_reports_every_planted_problem(tree):
    keys, aliased, nodes, problems = tree
    extra = keys + [k + "-alias" for k, a in zip(keys, aliased) if a]
    result = infer(nodes, extra_keys=extra)
    assert [list(t.levels) for t in result.topologies] == [keys + [HOST]]
    # aliases: each planted one named, the tree's key kept
    assert sorted((f.level, f.values) for f in result.findings if f.kind == "aliases") == \
        sorted((k, (k + "-alias",)) for k, a in zip(keys, aliased) if a)
    # placeholders: every planted value named with its node
    planted = sorted((key, value, name) for name, (key, value) in problems.items() if value is not None)
    reported = sorted((f.level, v, n) for f in result.findings if f.kind == "placeholder-value"
                      for v in f.values for n in f.nodes)
    assert reported == planted
    # every node with a missing or placeholder level label is named as dropped, at its key
    dropped = sorted((f.level, n) for f in result.topologies[0].findings if f.kind == "dropped-nodes" for n in f.nodes)
    assert dropped == sorted((key, name) for name, (key, _) in problems.items())
    assert result.topologies[0].kept == len(nodes) - len(problems)
    assert not {"keys-do-not-nest", "single-domain-level", "key-on-few-nodes"} & set(kinds(result.findings))


# ------------------------------------------------------------------ a CPU system pool; what check accepts

def cpu_pool(count=4) -> list[NodeLabels]:
    """An EKS system node group of m5.xlarge nodes in two zones, with no network-node-layer labels."""
    return [NodeLabels(f"ip-10-200-0-{i}.ec2.internal",
                       {HOST: f"ip-10-200-0-{i}.ec2.internal", INSTANCE: "m5.xlarge",
                        ZONE: "us-east-1a" if i % 2 == 0 else "us-east-1b"}) for i in range(count)]


def test_a_zone_only_node_group_gets_no_topology_and_the_gpu_topology_keeps_its_name():
    result = infer(preset_nodes("eks") + cpu_pool(), name="eks-p5")
    assert [(t.name, list(t.levels)) for t in result.topologies] == [("eks-p5", [ZONE, L1, L2, L3, HOST])]
    assert kinds(result.findings) == ["zone-only-group"]
    (found,) = result.findings
    assert found.level == ZONE and found.nodes == tuple(f"ip-10-200-0-{i}.ec2.internal" for i in range(4))
    assert "m5.xlarge (4)" in found.message


def test_a_cluster_labelled_only_by_zone_still_gets_its_zone_topology():
    result = infer(cpu_pool(), name="system")
    assert [(t.name, list(t.levels)) for t in result.topologies] == [("system", [ZONE, HOST])]


STRUCTURAL_KINDS = {"levels-out-of-order", "values-under-two-parents", "duplicate-level", "single-domain-level",
                    "domain-path-collision", "hostname-not-unique"}


def random_nodes(rng, count: int) -> list[NodeLabels]:
    """Nodes with EKS layer keys and a zone, each label present with probability 0.85 and drawn from
    three values (so keys straddle, split alike or have one value on some subsets), some with an
    instance type (node groups)."""
    nodes = []
    for index in range(count):
        labels = {HOST: f"n{index}"}
        for key in (ZONE, L1, L2, L3):
            if rng.random() < 0.85:
                labels[key] = rng.choice("abc")
        if rng.random() < 0.3:
            labels[INSTANCE] = rng.choice(["p5.48xlarge", "p4d.24xlarge"])
        nodes.append(NodeLabels(f"n{index}", labels))
    return nodes


def test_infer_never_writes_a_topology_that_check_rejects_on_the_same_nodes():
    # check reads the nodes that carry every level; infer relates keys pairwise on the nodes that
    # carry both: on these random dumps the two differ, and infer leaves such levels out (reported)
    import random

    rng = random.Random(20261204)
    left_out = 0
    for _ in range(300):
        nodes = random_nodes(rng, rng.randint(3, 12))
        result = infer(nodes)
        left_out += sum(1 for f in result.findings if f.kind == "level-left-out")
        for topo in result.topologies:
            rejected = [f.text() for f in check(topo.levels, nodes, topo.name) if f.kind in STRUCTURAL_KINDS]
            assert rejected == [], (topo.levels, [(n.name, n.labels) for n in nodes])
    assert left_out > 0  # the dumps do reach the case


def test_check_never_advises_the_order_the_topology_already_has():
    # two nodes share the hostname "h" under different racks: each rack value lies under one
    # hostname value, yet rack > hostname is the only order; the problem is the repeated hostname
    rack = "example.com/rack"
    nodes = [NodeLabels("n1", {rack: "a", HOST: "h"}), NodeLabels("n2", {rack: "b", HOST: "h"}),
             NodeLabels("n3", {rack: "c", HOST: "g"})]
    found = check([rack, HOST], nodes)
    assert kinds(found) == ["hostname-not-unique"]
    assert found[0].nodes == ("n1", "n2")
    # infer leaves the hostname level out rather than write what check rejects, and says so
    result = infer(nodes, [rack])
    assert [list(t.levels) for t in result.topologies] == [[rack]]
    assert "level-left-out" in kinds(result.findings)
    assert check(result.topologies[0].levels, nodes) == []
