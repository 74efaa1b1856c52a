"""``segment-webhook topology export`` (DESIGN.md §13): Volcano HyperNodes that validate against
Volcano's own CRD (tests/data/crds, unmodified, tests/data/crds/SOURCES.md) and a Slurm topology.yaml that
follows topology.yaml(5) (SchedMD/slurm ``doc/man/man5/topology.yaml.5``, commit 0b755e6c)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import yaml

from tests.support import paths
from tests.unit.admission.test_crd_schemas import to_json_schema
from webhook.cli import main

CRD = paths.DATA / "crds" / "topology.volcano.sh_hypernodes.yaml"
RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
ZONE = "topology.kubernetes.io/zone"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> tuple[str, list[dict]]:
    """gen-cluster: 2 zones × 2 blocks × 2 racks × 4 nodes; two more nodes lack the rack label."""
    folder = tmp_path_factory.mktemp("export")
    path = folder / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "2", "--blocks", "2", "--racks", "2", "--nodes", "4", "--fill", "0",
                 "-o", str(path)]) == 0
    doc = yaml.safe_load(path.read_text())
    for name in ("stray-a", "stray-b"):
        doc["items"].append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            ZONE: "zone-0", BLOCK: "block-0-0", "kubernetes.io/hostname": name}}, "status": {"allocatable": {"cpu": "8"}}})
    path.write_text(yaml.safe_dump(doc))
    return str(path), doc["items"]


@pytest.fixture(scope="module")
def hypernode_schema():
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["group"] == "topology.volcano.sh" and crd["spec"]["names"]["kind"] == "HyperNode"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    return version["schema"]["openAPIV3Schema"]


def cel_rules(schema: dict, path: tuple[str, ...]) -> list[str]:
    node = schema
    for part in path:
        node = node["items"] if part == "[]" else node["properties"][part]
    return [rule["rule"] for rule in node.get("x-kubernetes-validations", [])]


def cel_holds(rule: str, value: dict) -> bool:
    import celpy  # cel-python, a test extra
    env = celpy.Environment()
    return bool(env.program(env.compile(rule)).evaluate({"self": celpy.json_to_cel(value)}))


def export(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["topology", "export", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("members", ["name", "labels"])
def test_volcano_hypernodes_validate_against_volcanos_crd(cluster, hypernode_schema, capsys, members):
    path, items = cluster
    code, out, err = export(capsys, "-f", path, "--nodes", path, "--format", "volcano", "--members", members)
    assert code == 0
    hypernodes = list(yaml.safe_load_all(out))
    validator = jsonschema.Draft7Validator(to_json_schema(hypernode_schema))
    selector_rules = cel_rules(hypernode_schema, ("spec", "members", "[]", "selector"))
    assert len(selector_rules) == 2  # Volcano's "exactly one of exactMatch / regexMatch / labelMatch"
    for hn in hypernodes:
        assert list(validator.iter_errors(hn)) == [], hn["metadata"]["name"]
        assert hn["apiVersion"] == "topology.volcano.sh/v1alpha1" and hn["kind"] == "HyperNode"
        assert DNS_SUBDOMAIN.match(hn["metadata"]["name"]) and len(hn["metadata"]["name"]) <= 63
        for member in hn["spec"]["members"]:
            assert all(cel_holds(rule, member["selector"]) for rule in selector_rules)
    tiers: dict[int, list[dict]] = {}
    for hn in hypernodes:
        tiers.setdefault(hn["spec"]["tier"], []).append(hn)
    assert {tier: len(v) for tier, v in tiers.items()} == {1: 8, 2: 4, 3: 2}  # racks, blocks, zones
    names = {hn["metadata"]["name"] for hn in hypernodes}
    assert len(names) == 14
    for hn in tiers[2] + tiers[3]:
        assert all(m["type"] == "HyperNode" and m["selector"]["exactMatch"]["name"] in names for m in hn["spec"]["members"])
        assert len(hn["spec"]["members"]) == 2
    rack = next(hn for hn in tiers[1] if hn["metadata"]["annotations"]["segments.dev/domain"] == "zone-0/block-0-0/rack-0-0-0")
    if members == "name":
        assert [m["selector"]["exactMatch"]["name"] for m in rack["spec"]["members"]] == \
            ["node-0-0-0-0", "node-0-0-0-1", "node-0-0-0-2", "node-0-0-0-3"]
    else:
        assert rack["spec"]["members"] == [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {
            ZONE: "zone-0", BLOCK: "block-0-0", RACK: "rack-0-0-0"}}}}]
    members_named = [m["selector"]["exactMatch"]["name"] for hn in tiers[1] for m in hn["spec"]["members"]
                     if "exactMatch" in m["selector"]]
    assert "stray-a" not in members_named
    assert "left out: 2 nodes without every level of Topology cluster-topology: stray-a, stray-b" in err


def test_the_schema_check_can_fail(hypernode_schema):
    validator = jsonschema.Draft7Validator(to_json_schema(hypernode_schema))
    bad = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "x"},
           "spec": {"tier": "1", "members": [{"type": "Rack", "selector": {"exactMatch": {"name": "n"}}}]}}
    assert len(list(validator.iter_errors(bad))) == 2  # tier is not an integer; type is not Node/HyperNode
    rules = cel_rules(hypernode_schema, ("spec", "members", "[]", "selector"))
    assert not all(cel_holds(rule, {"exactMatch": {"name": "a"}, "regexMatch": {"pattern": "b"}}) for rule in rules)


def parse_slurm(text: str) -> list[dict]:
    """Read a topology.yaml as topology.yaml(5) describes it, failing on what it forbids: a list
    of topologies, ``topology`` first, exactly one of block / flat / tree; tree: unique switch
    names of at most 64 characters, ``children`` naming defined switches or ``nodes``; block:
    ``block_sizes`` each a power of two times the previous, every block holding at least the
    first (the planning base block size), unique block names."""
    doc = yaml.safe_load(text)
    assert isinstance(doc, list) and doc
    for topo in doc:
        assert next(iter(topo)) == "topology"
        assert sum(key in topo for key in ("block", "flat", "tree")) == 1
        if "tree" in topo:
            switches = topo["tree"]["switches"]
            names = [s["switch"] for s in switches]
            assert len(names) == len(set(names)) and all(len(n) <= 64 for n in names)
            for s in switches:
                assert ("children" in s) != ("nodes" in s)
                if "children" in s:
                    assert set(s["children"].split(",")) <= set(names)
        if "block" in topo:
            sizes = topo["block"]["block_sizes"]
            assert all(isinstance(b, int) and b > 0 for b in sizes)
            assert all(later % earlier == 0 and (later // earlier) & (later // earlier - 1) == 0 and later > earlier
                       for earlier, later in zip(sizes, sizes[1:]))
            blocks = topo["block"]["blocks"]
            assert len({b["block"] for b in blocks}) == len(blocks)
            assert all(len(b["nodes"].split(",")) >= sizes[0] for b in blocks)
    return doc


def test_slurm_tree_parses_and_connects_every_kept_node_once(cluster, capsys):
    path, items = cluster
    code, out, err = export(capsys, "-f", path, "--nodes", path, "--format", "slurm")
    assert code == 0
    (topo,) = parse_slurm(out)
    assert topo["topology"] == "cluster-topology" and topo["cluster_default"] is True
    switches = {s["switch"]: s for s in topo["tree"]["switches"]}
    leaves = [s for s in switches.values() if "nodes" in s]
    assert len(leaves) == 8 and len(switches) == 1 + 2 + 4 + 8  # root over the 2 zones
    placed = [n for s in leaves for n in s["nodes"].split(",")]
    kept = sorted(i["metadata"]["name"] for i in items if i["kind"] == "Node" and not i["metadata"]["name"].startswith("stray"))
    assert sorted(placed) == kept  # each kept node under exactly one leaf switch
    reached, todo = set(), ["root"]  # the tree is connected from the root
    while todo:
        name = todo.pop()
        reached.add(name)
        todo += switches[name].get("children", "").split(",") if "children" in switches[name] else []
    assert reached == set(switches)
    assert "stray-a, stray-b" in err


def test_slurm_block_form(cluster, capsys):
    path, _ = cluster
    code, out, _ = export(capsys, "-f", path, "--nodes", path, "--format", "slurm", "--plugin", "block")
    assert code == 0
    (topo,) = parse_slurm(out)
    assert topo["block"]["block_sizes"] == [4]
    assert len(topo["block"]["blocks"]) == 8
    code, out, _ = export(capsys, "-f", path, "--nodes", path, "--format", "slurm", "--plugin", "block",
                          "--block-level", BLOCK, "-o", "json")
    assert code == 0
    (topo,) = json.loads(out)
    assert topo["block"]["block_sizes"] == [8] and len(topo["block"]["blocks"]) == 4


def test_one_value_under_two_parents_makes_two_named_domains(tmp_path, capsys):
    nodes = {"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": f"n{b}{i}", "labels": {BLOCK: f"b{b}", RACK: f"rack-{i}"}}}
        for b in range(2) for i in range(2)]}  # rack-0 and rack-1 in both blocks
    topo = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}]}}
    (tmp_path / "n.yaml").write_text(yaml.safe_dump(nodes))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(topo))
    code, out, err = export(capsys, "-f", str(tmp_path / "t.yaml"), "--nodes", str(tmp_path / "n.yaml"), "--format", "volcano")
    assert code == 0
    racks = [hn for hn in yaml.safe_load_all(out) if hn["spec"]["tier"] == 1]
    assert len(racks) == 4 and len({hn["metadata"]["name"] for hn in racks}) == 4
    assert [[m["selector"]["exactMatch"]["name"] for m in hn["spec"]["members"]] for hn in racks] == \
        [["n00"], ["n01"], ["n10"], ["n11"]]
    assert "values-under-two-parents" in err


def test_export_bad_input_exit_2(cluster, tmp_path, capsys):
    path, _ = cluster
    code, _, err = export(capsys, "-f", path, "--nodes", path, "--format", "slurm", "--plugin", "block",
                          "--block-level", "example.com/pod")
    assert code == 2 and "--block-level example.com/pod is not a level of Topology cluster-topology" in err
    only_hosts = tmp_path / "t.yaml"
    only_hosts.write_text("apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: h}\n"
                          "spec: {levels: [{nodeLabel: kubernetes.io/hostname}]}\n")
    code, _, err = export(capsys, "-f", str(only_hosts), "--nodes", path, "--format", "volcano")
    assert code == 2 and "has no level besides kubernetes.io/hostname" in err
