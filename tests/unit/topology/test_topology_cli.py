"""``segment-webhook topology infer|check`` (DESIGN.md §12): output shapes, exit codes (0 / 1 / 2), every
§12 finding kind making ``check`` exit 1, ``gen-cluster --labels`` presets, the controller's log of
the findings once per Topology change, and a smoke run of benchmarks/topology.py."""

from __future__ import annotations

import copy
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import paths
from webhook.cli import main

ROOT = paths.REPO
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
EKS_LEVELS = [ZONE, "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
              "topology.k8s.aws/network-node-layer-3", HOST]


def gen(tmp_path, *flags, name="cluster.yaml", per_rack=2) -> Path:
    out = tmp_path / name
    assert main(["gen-cluster", "--zones", "2", "--blocks", "2", "--racks", "4", "--nodes", str(per_rack), "--fill", "0",
                 *flags, "-o", str(out)]) == 0
    return out


def write(tmp_path, name, doc) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(doc if isinstance(doc, list) else [doc], sort_keys=False))
    return path


def topology(levels, name="cluster-topology", api="kai.scheduler/v1alpha1"):
    return {"apiVersion": api, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": key} for key in levels]}}


def nodes_of(path: Path) -> list[dict]:
    """The Node items of a gen-cluster List (read with libyaml's loader where PyYAML has it: the
    pure-Python one takes seconds on a 1,024-node file)."""
    with path.open(encoding="utf-8") as fh:
        doc = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return [item for item in doc["items"] if item["kind"] == "Node"]


# ------------------------------------------------------------------ gen-cluster --labels

def test_gen_cluster_default_is_unchanged_by_the_presets(tmp_path):
    """The default output stays as before (other tests and the docs rely on it byte for byte)."""
    text = gen(tmp_path).read_text()
    assert "cloud.provider.com/topology-block: block-0-0" in text and "node-0-0-0-0" in text
    assert "instance-type" not in text


@pytest.mark.parametrize("preset, key", [("eks", "topology.k8s.aws/network-node-layer-3"),
                                         ("gke", "cloud.google.com/gce-topology-subblock"),
                                         ("oci", "oci.oraclecloud.com/rdma.local_block_id"),
                                         ("nebius", "topology.nebius.com/tier-1"),
                                         ("topograph", "fabric.topograph.run/tier-0")])
def test_gen_cluster_presets_label_nodes_and_write_their_topology(tmp_path, preset, key):
    doc = yaml.safe_load(gen(tmp_path, "--labels", preset).read_text())
    nodes = [i for i in doc["items"] if i["kind"] == "Node"]
    assert len(nodes) == 32 and all(key in n["metadata"]["labels"] for n in nodes)
    assert all("nvidia.com/gpu.product" in n["metadata"]["labels"] or preset == "gke" for n in nodes)
    topo = [i for i in doc["items"] if i["kind"] == "Topology"]
    assert len(topo) == 1 and key in [lv["nodeLabel"] for lv in topo[0]["spec"]["levels"]]


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["gke"])
def test_gen_cluster_presets_name_every_node_once_and_infer_reads_the_file(tmp_path, capsys, preset):
    # the new-user trial's shape: 1 zone x 4 blocks x 16 racks x 16 nodes = 1,024 nodes, one block
    # holding 256 of them (GKE's four-character suffix repeated from about 1,000 nodes on). A big
    # input: under -m slow (docs/decisions/default-suite-time.md).
    out = tmp_path / "cluster.yaml"
    assert main(["gen-cluster", "--labels", preset, "--zones", "1", "--blocks", "4", "--racks", "16",
                 "--nodes", "16", "-o", str(out)]) == 0
    nodes = nodes_of(out)
    names = [n["metadata"]["name"] for n in nodes]
    hostnames = [n["metadata"]["labels"][HOST] for n in nodes]
    assert len(names) == 1024 and len(set(names)) == 1024 and len(set(hostnames)) == 1024
    capsys.readouterr()
    assert main(["topology", "infer", "-f", str(out)]) == 0


def test_gen_cluster_unknown_preset_is_bad_usage(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["gen-cluster", "--labels", "azure"])
    assert exc.value.code == 2 and "invalid choice: 'azure'" in capsys.readouterr().err


# ------------------------------------------------------------------ infer

def test_infer_writes_the_kai_topology_on_stdout_and_the_report_on_stderr(tmp_path, capsys):
    dump = gen(tmp_path, "--labels", "eks")
    assert main(["topology", "infer", "-f", str(dump)]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out) == topology(EKS_LEVELS)
    assert "topology infer: 32 nodes read" in err
    assert "topology.k8s.aws/network-node-layer-1        4  8 / 8 / 8" in err
    assert "0 findings" in err


def test_infer_kueue_json_with_a_name(tmp_path, capsys):
    dump = gen(tmp_path, "--labels", "gke")
    assert main(["topology", "infer", "-f", str(dump), "-o", "json", "--kind", "kueue", "--name", "gpu"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["apiVersion"] == "kueue.x-k8s.io/v1beta2" and doc["metadata"] == {"name": "gpu"}
    assert doc["spec"]["levels"][-1] == {"nodeLabel": HOST}


def test_infer_one_topology_per_node_group_as_a_yaml_stream(tmp_path, capsys):
    nodes = nodes_of(gen(tmp_path, "--labels", "eks", per_rack=4))
    for index, node in enumerate(nodes[:24]):  # a 4-layer instance type: layer-4 (2 nodes) below layer-3 (4)
        labels = node["metadata"]["labels"]
        labels["node.kubernetes.io/instance-type"] = "p6e-gb200.36xlarge"
        labels["topology.k8s.aws/network-node-layer-4"] = f"nn4-{index // 2}"
    dump = write(tmp_path, "mixed.yaml", {"apiVersion": "v1", "kind": "List", "items": nodes})
    assert main(["topology", "infer", "-f", str(dump)]) == 0
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    assert [d["metadata"]["name"] for d in docs] == ["cluster-topology-p5-48xlarge", "cluster-topology-p6e-gb200-36xlarge"]
    assert [lv["nodeLabel"] for lv in docs[1]["spec"]["levels"]][-2:] == ["topology.k8s.aws/network-node-layer-4", HOST]
    assert "node-groups:" in err and "key-meaning-differs: level topology.k8s.aws/network-node-layer-3" in err


def test_infer_names_placeholders_and_dropped_nodes(tmp_path, capsys):
    nodes = nodes_of(gen(tmp_path, "--labels", "eks"))
    nodes[0]["metadata"]["labels"]["topology.k8s.aws/network-node-layer-3"] = "no-imds-data"
    dump = write(tmp_path, "nodes.yaml", {"apiVersion": "v1", "kind": "List", "items": nodes})
    assert main(["topology", "infer", "-f", str(dump)]) == 0
    err = capsys.readouterr().err
    name = nodes[0]["metadata"]["name"]
    assert f'placeholder-value: level topology.k8s.aws/network-node-layer-3: value "no-imds-data" on 1 node counts as missing: {name}' in err
    assert "dropped-nodes: Topology cluster-topology: level topology.k8s.aws/network-node-layer-3: 1 node of 32" in err


def test_infer_label_flag_adds_a_candidate_key(tmp_path, capsys):
    dump = gen(tmp_path)  # the default keys are not a known provider's
    assert main(["topology", "infer", "-f", str(dump), "--label", BLOCK, "--label", RACK]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == topology([ZONE, BLOCK, RACK, HOST])


def test_infer_without_topology_labels_exits_1(tmp_path, capsys):
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": {HOST: f"n{i}"}}}
             for i in range(3)]
    dump = write(tmp_path, "nodes.yaml", {"apiVersion": "v1", "kind": "List", "items": nodes})
    assert main(["topology", "infer", "-f", str(dump)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no Topology:" in err and "no-topology-labels" in err


@pytest.mark.parametrize("content, message", [
    ("", "no Node objects"),
    ("kind: Node\nmetadata:\n  name: n1\n  labels:\n    a: 7\n",
     'document 1: Node "n1": metadata.labels["a"] = 7: a label value must be a string'),
    ("kind: Node\nmetadata: {}\n", "document 1: Node has no metadata.name"),
    ("kind: Node\nmetadata: {name: n1}\n---\nkind: Node\nmetadata: {name: n1}\n", 'Node "n1" is listed twice'),
    ("a: [\n", "nodes.yaml: line 2, column 1: not valid YAML: did not find expected node content\n"
                "fix: give the value expected at line 2, column 1, and close every [ or { opened before it\n"),
])
def test_infer_bad_input_exits_2_naming_the_file(tmp_path, capsys, content, message):
    path = tmp_path / "nodes.yaml"
    path.write_text(content)
    assert main(["topology", "infer", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"segment-webhook topology infer: error: {path}") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, command", [
    (["topology", "infer", "-f", "nodes.yaml", "--bogus"], "topology infer"),
    (["topology", "check", "-f", "t.yaml", "--nodes", "nodes.yaml", "--bogus"], "topology check"),
    (["topology", "--bogus", "infer", "-f", "nodes.yaml"], "topology"),
])
def test_an_unknown_flag_is_the_nested_sub_commands_error_with_its_usage(capsys, argv, command):
    # new-user trial: argparse printed the top-level usage and "segment-webhook: error: ..."
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith(f"usage: segment-webhook {command} [-h]")
    assert err.endswith(f"segment-webhook {command}: error: unrecognized arguments: --bogus\n")


def test_infer_missing_file_and_bad_flags_exit_2(tmp_path, capsys):
    assert main(["topology", "infer", "-f", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml: cannot read: No such file or directory" in capsys.readouterr().err
    for argv in (["--label", "not a key!"], ["--name", "Bad_Name"], ["--kind", "volcano"], []):
        with pytest.raises(SystemExit) as exc:
            main(["topology", "infer", *(["-f", "x.yaml"] if argv else []), *argv])
        assert exc.value.code == 2
    capsys.readouterr()


def test_infer_against_an_api_server_that_is_not_there_names_it_the_cause_and_the_fix(tmp_path, capsys):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    assert main(["topology", "infer", "--kubeconfig", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"segment-webhook topology infer: error: --kubeconfig {config}: cannot list nodes: the API server "
        f"https://127.0.0.1:{port} is unreachable: connection refused; fix: check that the cluster is up and that the "
        "kubeconfig's server and credentials are this cluster's (kubectl --kubeconfig FILE get nodes)\n")


def test_infer_kubeconfig_that_cannot_be_loaded_exits_2(tmp_path, capsys):
    bad = tmp_path / "kubeconfig"
    bad.write_text("just text\n")
    assert main(["topology", "infer", "--kubeconfig", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("segment-webhook topology infer: error: --kubeconfig: cannot load kubeconfig") and "Traceback" not in err


def test_infer_lists_the_nodes_of_a_cluster(tmp_path, capsys):
    """The list answer's items carry no kind, as a real kube-apiserver's NodeList items (the fake server
    strips apiVersion and kind from list items): each item is a Node all the same."""
    from tests.support.kube_apiserver import KubeApiServer

    server = KubeApiServer().start()
    try:
        for node in nodes_of(gen(tmp_path, "--labels", "eks")):
            server.create("nodes", node)
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": server.url}}],
            "users": [{"name": "t", "user": {"token": "x"}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
        assert main(["topology", "infer", "--kubeconfig", str(config)]) == 0
    finally:
        server.close()
    assert yaml.safe_load(capsys.readouterr().out) == topology(EKS_LEVELS)


# ------------------------------------------------------------------ check

def check(tmp_path, capsys, levels, nodes, *extra):
    topo = write(tmp_path, "topology.yaml", topology(levels))
    dump = write(tmp_path, "nodes.yaml", {"apiVersion": "v1", "kind": "List", "items": nodes})
    code = main(["topology", "check", "-f", str(topo), "--nodes", str(dump), *extra])
    return code, capsys.readouterr()


def test_check_clean_topology_exits_0(tmp_path, capsys):
    dump = gen(tmp_path, "--labels", "eks")
    assert main(["topology", "check", "-f", str(dump), "--nodes", str(dump)]) == 0
    assert capsys.readouterr().out == "0 findings for Topology cluster-topology on 32 nodes\n"


def test_check_accepts_a_kueue_topology(tmp_path, capsys):
    dump = gen(tmp_path)
    topo = write(tmp_path, "kueue.yaml", topology([ZONE, BLOCK, RACK, HOST], api="kueue.x-k8s.io/v1beta1"))
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(dump)]) == 0
    capsys.readouterr()


def relabel(nodes, key, change):
    nodes = copy.deepcopy(nodes)
    for node in nodes:
        labels = node["metadata"]["labels"]
        labels[key] = change(node["metadata"]["name"], labels.get(key))
    return nodes


@pytest.mark.parametrize("case", ["order", "two-parents", "duplicate", "single-domain", "placeholder", "dropped",
                                  "collision"])
def test_check_each_finding_kind_exits_1_with_a_fix(tmp_path, capsys, case):
    nodes = nodes_of(gen(tmp_path))
    levels = [ZONE, BLOCK, RACK, HOST]
    if case == "order":
        levels, expected = [ZONE, RACK, BLOCK, HOST], f"levels-out-of-order: Topology cluster-topology: level {RACK} / {BLOCK}"
    elif case == "two-parents":
        nodes = relabel(nodes, RACK, lambda name, value: "rack-" + value[-1])
        expected = f"values-under-two-parents: Topology cluster-topology: level {RACK}: 4 values"
    elif case == "duplicate":
        nodes = relabel(nodes, "example.com/block", lambda name, value: name[5:8])
        levels, expected = [ZONE, BLOCK, "example.com/block", RACK, HOST], \
            f"duplicate-level: Topology cluster-topology: level {BLOCK} / example.com/block"
    elif case == "single-domain":
        nodes = relabel(nodes, ZONE, lambda name, value: "us-east-1a")
        expected = f'single-domain-level: Topology cluster-topology: level {ZONE}: all 32 kept nodes share one value "us-east-1a"'
    elif case == "placeholder":
        nodes[5]["metadata"]["labels"][RACK] = "unknown"
        expected = f'placeholder-value: Topology cluster-topology: level {RACK}: value "unknown" on 1 node counts as missing'
    elif case == "dropped":
        del nodes[9]["metadata"]["labels"][BLOCK]
        expected = (f"dropped-nodes: Topology cluster-topology: level {BLOCK}: 1 node of 32 lacks this label or carries a "
                    "placeholder, so KAI and Kueue leave them out of this Topology without a word: node-0-1-0-1")
    else:
        nodes = relabel(nodes, BLOCK, lambda name, value: {"node-0-0-0-0": "a.b", "node-0-0-0-1": "a.b"}.get(name, value))
        nodes = relabel(nodes, RACK, lambda name, value: {"node-0-0-0-0": "c", "node-0-0-0-1": "c",
                                                          "node-0-0-1-0": "b.c", "node-0-0-1-1": "b.c"}.get(name, value))
        nodes = relabel(nodes, BLOCK, lambda name, value: {"node-0-0-1-0": "a", "node-0-0-1-1": "a"}.get(name, value))
        expected = (f'domain-path-collision: Topology cluster-topology: level {RACK}: KAI joins a node\'s level values '
                    "with '.' into one domain id, and 2 different paths give \"zone-0.a.b.c\"")
    code, captured = check(tmp_path, capsys, levels, nodes)
    assert code == 1, captured.out
    assert expected in captured.out
    block = captured.out.split(expected)[1]
    assert block.split("\n")[1].startswith("  fix: ")
    assert captured.out.endswith("for Topology cluster-topology on 32 nodes\n")


def test_check_json_names_every_node(tmp_path, capsys):
    nodes = nodes_of(gen(tmp_path))
    code, captured = check(tmp_path, capsys, [ZONE, "example.com/rack", HOST], nodes, "-o", "json")
    doc = json.loads(captured.out)
    assert code == 1 and doc["nodes"] == 32
    assert [(f["kind"], f["level"], len(f["nodes"])) for f in doc["findings"]] == [("dropped-nodes", "example.com/rack", 32)]


@pytest.mark.parametrize("setup, message", [
    (lambda tmp: (tmp / "nodes.yaml", tmp / "nodes.yaml"), "no Topology object"),
    (lambda tmp: (write(tmp, "t.yaml", topology([])), tmp / "nodes.yaml"), "spec.levels must be a non-empty list"),
    (lambda tmp: (write(tmp, "t.yaml", topology([ZONE])), tmp / "absent.yaml"), "absent.yaml: cannot read"),
])
def test_check_bad_input_exits_2(tmp_path, capsys, setup, message):
    write(tmp_path, "nodes.yaml", {"apiVersion": "v1", "kind": "List", "items": nodes_of(gen(tmp_path))})
    topo, nodes = setup(tmp_path)
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(nodes)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("segment-webhook topology check: error: ") and message in err and "Traceback" not in err


# ------------------------------------------------------------------ the controller logs the findings

def test_controller_logs_topology_findings_once_per_topology_change(caplog):
    from tests.support.kube_apiserver import KubeApiServer
    from tests.unit.controller.test_controller_live import api_client, eventually
    from webhook.controller.runner import Controller, ControllerSettings

    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"n{i}", "labels": {ZONE: f"z{i // 4}", RACK: f"r{i // 2}", HOST: f"n{i}"}},
              "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}} for i in range(8)]
    server = KubeApiServer().start()
    caplog.set_level(logging.WARNING, logger="webhook.controller.runner")
    ctl = None
    try:
        for node in nodes:
            server.create("nodes", node)
        server.create("topologies", topology([RACK, ZONE, HOST], name="wrong-order"))
        ctl = Controller(api_client(server, "c-1"), ControllerSettings(identity="c-1", resync=0.05),
                         elect=False).start()

        def lines():
            return [r.getMessage() for r in caplog.records if "Topology wrong-order" in r.getMessage()]

        eventually(lambda: len(lines()) == 1, "one finding logged")
        assert lines()[0].startswith(f"levels-out-of-order: Topology wrong-order: level {RACK} / {ZONE}")
        assert "; fix: order spec.levels by nesting" in lines()[0]
        for _ in range(3):  # what every resync and reconcile runs
            ctl.log_topology_findings()
        assert len(lines()) == 1  # not again while the Topology is unchanged
        changed = server.get("topologies", None, "wrong-order")
        assert changed is not None
        changed["spec"]["levels"] = [{"nodeLabel": ZONE}, {"nodeLabel": "example.com/missing"}, {"nodeLabel": HOST}]
        server.update("topologies", changed, check_rv=False)
        eventually(lambda: any("dropped-nodes: Topology wrong-order" in line for line in lines()), "checked again")
    finally:
        if ctl is not None:
            ctl.stop()
        server.close()


# ------------------------------------------------------------------ benchmark smoke test

def test_benchmark_script_runs_on_a_small_dump():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "topology.py"), "--nodes", "64", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "format     parse     infer     check  infer/parse  check/parse" in out.stdout
    assert out.stdout.count("\njson ") == 1 and out.stdout.count("\nyaml ") == 1 and "worst ratio" in out.stdout


#: What `topology infer -f` writes for `gen-cluster --labels eks` (2 zones x 2 blocks x 4 racks x 4
#: nodes of p5.48xlarge; EKS's layer-1 is a block, layer-2 two racks, layer-3 a rack): DESIGN.md §12's
#: order and figures, written out (docs/concepts/topology.md shows the same run).
EKS_REPORT = """topology infer: 64 nodes read; candidate keys: kubernetes.io/hostname, topology.k8s.aws/network-node-layer-1, \
topology.k8s.aws/network-node-layer-2, topology.k8s.aws/network-node-layer-3, topology.kubernetes.io/zone

Topology cluster-topology: topology.kubernetes.io/zone, topology.k8s.aws/network-node-layer-1, \
topology.k8s.aws/network-node-layer-2, topology.k8s.aws/network-node-layer-3, kubernetes.io/hostname
  inferred from p5.48xlarge (64); 64 nodes carry every level
  LEVEL                                  DOMAINS  NODES PER DOMAIN (min/median/max)  ALIASES
  topology.kubernetes.io/zone                  2  32 / 32 / 32
  topology.k8s.aws/network-node-layer-1        4  16 / 16 / 16
  topology.k8s.aws/network-node-layer-2        8  8 / 8 / 8
  topology.k8s.aws/network-node-layer-3       16  4 / 4 / 4
  kubernetes.io/hostname                      64  1 / 1 / 1

0 findings
"""


def test_infer_and_check_print_the_documented_eks_run(tmp_path, capsys):
    dump = tmp_path / "eks.yaml"
    assert main(["gen-cluster", "--labels", "eks", "-o", str(dump)]) == 0
    capsys.readouterr()
    assert main(["topology", "infer", "-f", str(dump)]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out) == topology(EKS_LEVELS) and err == EKS_REPORT
    (tmp_path / "eks-topology.yaml").write_text(out)
    assert main(["topology", "check", "-f", str(tmp_path / "eks-topology.yaml"), "--nodes", str(dump)]) == 0
    assert capsys.readouterr().out == "0 findings for Topology cluster-topology on 64 nodes\n"


# ------------------------------------------------------------------ a mixed cluster: infer, then check with --selector

def mixed_cluster(tmp_path) -> Path:
    """The eks preset (32 p5.48xlarge nodes, two zones) and a CPU system pool of 4 m5.xlarge nodes
    in the same two zones, without network-node-layer labels."""
    nodes = nodes_of(gen(tmp_path, "--labels", "eks"))
    for index in range(4):
        name = f"ip-10-200-0-{index}.ec2.internal"
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            HOST: name, "node.kubernetes.io/instance-type": "m5.xlarge",
            ZONE: "us-east-1a" if index % 2 == 0 else "us-east-1b"}}})
    return write(tmp_path, "mixed.yaml", {"apiVersion": "v1", "kind": "List", "items": nodes})


def test_infer_on_a_cluster_with_a_cpu_pool_writes_one_topology_with_the_given_name(tmp_path, capsys):
    dump = mixed_cluster(tmp_path)
    assert main(["topology", "infer", "-f", str(dump), "--name", "eks-p5"]) == 0
    out, err = capsys.readouterr()
    assert list(yaml.safe_load_all(out)) == [topology(EKS_LEVELS, name="eks-p5")]
    assert "zone-only-group: level topology.kubernetes.io/zone: 4 nodes (m5.xlarge (4))" in err
    assert "key-meaning-differs" not in err and "node-groups" not in err
    # the report names the selector of the nodes the Topology holds; check with it is clean
    selector = f"--selector '{','.join(EKS_LEVELS)}'"
    assert selector in err
    (tmp_path / "eks-p5.yaml").write_text(out)
    assert main(["topology", "check", "-f", str(tmp_path / "eks-p5.yaml"), "--nodes", str(dump),
                 "--selector", ",".join(EKS_LEVELS)]) == 0
    assert capsys.readouterr().out == "0 findings for Topology eks-p5 on 32 nodes\n"


@pytest.mark.parametrize("selector, count", [
    ("node.kubernetes.io/instance-type=p5.48xlarge", 32),
    ("node.kubernetes.io/instance-type==p5.48xlarge", 32),
    ("node.kubernetes.io/instance-type in (p5.48xlarge, p4d.24xlarge)", 32),
    ("node.kubernetes.io/instance-type!=m5.xlarge", 32),
    ("node.kubernetes.io/instance-type notin (m5.xlarge)", 32),
    ("topology.k8s.aws/network-node-layer-1", 32),
    (f"!topology.k8s.aws/network-node-layer-1,{ZONE}=us-east-1a", 2),
])
def test_check_selector_checks_only_the_matching_nodes(tmp_path, capsys, selector, count):
    dump = mixed_cluster(tmp_path)
    topo = write(tmp_path, "topology.yaml", topology(EKS_LEVELS))
    code = main(["topology", "check", "-f", str(topo), "--nodes", str(dump), "--selector", selector])
    out = capsys.readouterr().out
    assert out.endswith(f"on {count} nodes\n")
    # the CPU nodes lack the layer keys: dropped-nodes (exit 1) only when they are selected
    assert code == (1 if count == 2 else 0)


def test_check_without_a_selector_reports_the_cpu_nodes_as_dropped(tmp_path, capsys):
    dump = mixed_cluster(tmp_path)
    topo = write(tmp_path, "topology.yaml", topology(EKS_LEVELS))
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(dump)]) == 1
    assert "dropped-nodes: Topology cluster-topology: level topology.k8s.aws/network-node-layer-1: 4 nodes of 36" \
        in capsys.readouterr().out


@pytest.mark.parametrize("selector, message", [
    ("a b", "'a b' is not a label key"),
    ("", "empty selector"),
    ("x=y", "--selector matches none of the 36 nodes of"),
])
def test_check_bad_selector_exits_2(tmp_path, capsys, selector, message):
    dump = mixed_cluster(tmp_path)
    topo = write(tmp_path, "topology.yaml", topology(EKS_LEVELS))
    try:
        code: int | str | None = main(["topology", "check", "-f", str(topo), "--nodes", str(dump), "--selector", selector])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and message in capsys.readouterr().err


def test_check_topology_checks_only_the_named_topology(tmp_path, capsys):
    # a file infer wrote for two hardware groups: each Topology is meant for its own nodes, so the
    # CPU pool's Topology (zone and host only) must not be held against the p5 nodes' layers, nor
    # the p5 Topology against the CPU nodes (which lack its layer keys: dropped-nodes)
    dump = mixed_cluster(tmp_path)
    topo = write(tmp_path, "two.yaml", [topology(EKS_LEVELS, name="eks-p5"), topology([ZONE, HOST], name="eks-m5")])
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(dump), "--topology", "eks-p5",
                 "--selector", ",".join(EKS_LEVELS)]) == 0
    assert capsys.readouterr().out == "0 findings for Topology eks-p5 on 32 nodes\n"
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(dump), "--topology", "eks-p5"]) == 1
    assert "dropped-nodes: Topology eks-p5: level topology.k8s.aws/network-node-layer-1: 4 nodes of 36" \
        in capsys.readouterr().out


def test_check_topology_naming_no_topology_of_the_file_exits_2(tmp_path, capsys):
    dump = mixed_cluster(tmp_path)
    topo = write(tmp_path, "two.yaml", [topology(EKS_LEVELS, name="eks-p5"), topology([ZONE, HOST], name="eks-m5")])
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(dump), "--topology", "eks-p4"]) == 2
    assert (f"--topology eks-p4: {topo} holds no Topology of that name (it holds eks-p5, eks-m5); fix: name one of "
            "them, or leave --topology out to check them all") in capsys.readouterr().err


def test_check_refuses_two_different_topologies_of_one_name_as_place_does(tmp_path, capsys):
    dump = mixed_cluster(tmp_path)
    topo = write(tmp_path, "two.yaml", [topology(EKS_LEVELS, name="t"), topology([ZONE, HOST], name="t")])
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(dump)]) == 2
    err = capsys.readouterr().err
    assert f'{topo}: document 2: Topology "t" is defined twice with different levels or aliases (also at {topo}: ' \
           "document 1: " in err
    assert err.rstrip().endswith("fix: keep one of them or rename one")


def test_check_reads_the_same_topology_given_twice_once(tmp_path, capsys):
    dump = mixed_cluster(tmp_path)
    topo = write(tmp_path, "twice.yaml", [topology(EKS_LEVELS, name="t"), topology(EKS_LEVELS, name="t")])
    assert main(["topology", "check", "-f", str(topo), "--nodes", str(dump), "--selector", ",".join(EKS_LEVELS)]) == 0
    assert capsys.readouterr().out == "0 findings for Topology t on 32 nodes\n"
