"""`segment-webhook place` / `gen-cluster`: exit codes, output shapes, SVG, determinism."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from tests.conftest import EXAMPLES, load_example
from webhook.cli import main

#: the fix of a file that cannot be read (webhook/planning/manifests.py read_text)
READ_FIX = "; fix: give the path of a readable YAML or JSON file, or - to read standard input"
#: the fix of a workload over the pod cap (webhook/planning/expand.py MAX_PODS)
CAP_FIX = "; fix: fewer replicas, or `segment-webhook capacity --shape` to count gangs of a shape"


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
    assert node["status"]["allocatable"] == {"cpu": "128", "memory": "2048Gi", "ephemeral-storage": "1728000000000",
                                             "nvidia.com/gpu": "8", "pods": "110"}
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
    assert set(res) == {"placed", "assignments", "segments", "workload", "reason", "exact"}
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
    ("kind: Deployment\nmetadata: {name: d}\n", 'kind "Deployment" is not supported; use one of PyTorchJob, '),
    ("kind: PyTorchJobb\nmetadata: {name: d}\n", 'kind "PyTorchJobb" is not supported (did you mean PyTorchJob?); use one of'),
    ("kind: leaderworkersett\nmetadata: {name: d}\n",
     'kind "leaderworkersett" is not supported (did you mean LeaderWorkerSet?); use one of'),
    # the webhook is registered for kubeflow.org's PyTorchJob only (deploy/base/webhooks.yaml); `review` says so too
    ("apiVersion: kubeflow.com/v1\nkind: PyTorchJob\nmetadata: {name: d}\n",
     'apiVersion "kubeflow.com/v1": PyTorchJob is handled in the API group "kubeflow.org" only (the webhook never '
     "sees another group's PyTorchJob); fix: apiVersion: kubeflow.org/v1"),
    ("a: 1\n---\nb: 2\n", "document 1: object has no kind"),
    ("kind: PyTorchJob\nmetadata: {name: a}\n---\nkind: PyTorchJob\nmetadata: {name: b}\n",
     "expected exactly one workload object, found 2"),
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
    assert capsys.readouterr().err == (f'segment-webhook place: error: {bad}: Node "n1": status.allocatable[cpu]: '
                                       '"many" is not a Kubernetes quantity (examples: "500m", "2", "64Gi", "1e3"); fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, Ti) and no spaces\n')


# --- bounds and bad input: exit 2 naming the file and the field, before the work -------------------

@pytest.mark.parametrize("argv, message", [
    (["--zones", "100", "--blocks", "100", "--racks", "100", "--nodes", "100", "--gpus", "8"],
     "--zones × --blocks × --racks × --nodes = 100×100×100×100 = 100,000,000 nodes is more than the limit of "
     "100,000 nodes"),
    (["--zones", "1", "--blocks", "1", "--racks", "1", "--nodes", "1", "--gpus", "1000000"],
     "--gpus 1000000 is more than the limit of 64 GPUs per node"),
    (["--zones", "10", "--blocks", "10", "--racks", "10", "--nodes", "100", "--gpus", "16"],
     "100,000 nodes × --gpus 16 = 1,600,000 GPUs is more than the limit of 1,000,000 GPUs"),
    (["--zones", "0"], "--zones must be a positive integer, got 0"),
])
def test_gen_cluster_bounds_exit_2_before_allocating(tmp_path, capsys, argv, message):
    out = tmp_path / "x.yaml"
    assert main(["gen-cluster", *argv, "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"segment-webhook gen-cluster: error: {message}\n"
    assert not out.exists()


def test_gen_cluster_at_the_node_limit_is_accepted():
    from webhook.planning.gencluster import MAX_NODES, generate

    assert MAX_NODES == 100_000
    with pytest.raises(ValueError, match="100,001 nodes is more than the limit of 100,000 nodes"):
        generate(1, 1, 1, 100_001, 8)
    doc = generate(1, 1, 1, 64, 64, fill=0.0)  # the largest --gpus is fine
    assert doc["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] == "64"


NO_NODES = ("no Node objects; fix: dump the cluster with `kubectl get nodes,pods -A -o yaml` "
            "(the nodes, and the pods that say what is already taken)")


@pytest.mark.parametrize("content", ["", "kind: List\nitems: []\n", "---\n---\n",
                                     "kind: Pod\nmetadata: {name: p}\nspec: {nodeName: n1, containers: []}\n"])
def test_place_cluster_without_nodes_exit_2(tmp_path, capsys, content):
    empty = tmp_path / "empty.yaml"
    empty.write_text(content)
    assert main(["place", "-f", str(EXAMPLES / "distributedworkload-native.yaml"), "--cluster", str(empty)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"segment-webhook place: error: {empty}: {NO_NODES}\n"


def test_place_no_nodes_in_any_cluster_file_names_them_all(tmp_path, capsys, gen_cluster):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("")
    b.write_text("kind: List\nitems: []\n")
    assert main(["place", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--cluster", str(a), "--cluster", str(b)]) == 2
    assert capsys.readouterr().err == f"segment-webhook place: error: {a}, {b}: {NO_NODES}\n"
    # one empty file next to a file with nodes is fine
    assert main(["place", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--cluster", str(a), "--cluster", gen_cluster,
                 "-o", "json"]) in (0, 1)
    assert capsys.readouterr().err == ""


def test_place_and_gen_cluster_error_prefix(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    assert main(["place", "-f", str(missing), "--cluster", str(missing)]) == 2
    assert capsys.readouterr().err == f"segment-webhook place: error: {missing}: cannot read: No such file or directory" + READ_FIX + "\n"
    assert main(["gen-cluster", "--zones", "1", "-o", str(tmp_path / "no-such-dir" / "c.yaml")]) == 2
    assert capsys.readouterr().err == (f"segment-webhook gen-cluster: error: {tmp_path / 'no-such-dir' / 'c.yaml'}: "
                                       "cannot write: No such file or directory\n")


def test_place_workload_syntax_error_names_file_line_column_and_fix(gen_cluster, tmp_path, capsys):
    # new-user trial: the message quoted PyYAML's internals ("while scanning a simple key", "<unicode string>")
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: j\n spec: {}\n")
    assert main(["place", "-f", str(path), "--cluster", gen_cluster]) == 2
    assert capsys.readouterr().err == (
        f"segment-webhook place: error: {path}: line 5, column 2: not valid YAML: did not find expected key (in the "
        "mapping that starts at line 1, column 1)\n"
        "fix: check the indentation and quoting at line 5: the keys of one mapping start in the same column, the "
        "items ('- ') of one list too, and a value holding ': ' or ' #' is quoted\n")


@pytest.mark.parametrize("argv, leftover", [
    (["place", "--bogus", "-f", "w.yaml", "--cluster", "c.yaml"], "--bogus"),
    (["place", "-f", "w.yaml", "--cluster", "c.yaml", "--bogus", "extra"], "--bogus extra"),
])
def test_an_unknown_flag_is_the_sub_commands_error_with_its_usage(capsys, argv, leftover):
    # new-user trial: argparse printed the top-level usage and "segment-webhook: error: ..."
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("usage: segment-webhook place [-h] -f FILE --cluster FILE")
    assert err.endswith(f"segment-webhook place: error: unrecognized arguments: {leftover}\n")


NOT_AN_OBJECT_FIX = "; fix: give Kubernetes objects, each a mapping with apiVersion, kind and metadata (is this the right file?)"


def _bad_cluster(tmp_path, what):
    if what == "directory":
        return tmp_path, (f"{tmp_path}: cannot read: Is a directory; fix: give one file (or - for stdin), e.g. cat "
                          f"{tmp_path}/*.yaml | segment-webhook ... -f - (a directory is not read as kubectl -f DIR "
                          "reads it)")
    path = tmp_path / "c.yaml"
    if what == "binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
        return path, (f"{path}: not UTF-8 text: byte 0xff at line 1, column 9 (invalid start byte)\n"
                      "fix: give a YAML or JSON manifest saved as UTF-8 (is this a binary file, or text saved as "
                      "Latin-1 or UTF-16?)")
    if what == "nul":
        path.write_bytes(b"a\x00b: c\n")
        return path, (f"{path}: line 1, column 2: not valid YAML: character #x0000: control characters are not "
                      "allowed\nfix: remove the character at line 1, column 2; a manifest is text (is this a binary "
                      "file?)")
    if what == "scalar":
        path.write_text("hello\n")
        return path, f'{path}: document 1: expected a Kubernetes object, got a string "hello"' + NOT_AN_OBJECT_FIX
    if what == "number":
        path.write_text("42\n")
        return path, f"{path}: document 1: expected a Kubernetes object, got a number 42" + NOT_AN_OBJECT_FIX
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["directory", "binary", "nul", "scalar", "number"])
def test_place_unusable_cluster_file_exit_2(tmp_path, capsys, what):
    path, message = _bad_cluster(tmp_path, what)
    assert main(["place", "-f", str(EXAMPLES / "distributedworkload-native.yaml"), "--cluster", str(path)]) == 2
    assert capsys.readouterr().err == f"segment-webhook place: error: {message}\n"


def _huge_node_yaml(tmp_path, n_nodes=1, **alloc):
    items = []
    for i in range(n_nodes):
        items.append({"kind": "Node", "metadata": {"name": f"n{i}", "labels": {
            "topology.kubernetes.io/zone": "z", "cloud.provider.com/topology-block": "b",
            "cloud.provider.com/topology-rack": "r", "kubernetes.io/hostname": f"n{i}"}},
            "status": {"allocatable": alloc or {"cpu": "1e30", "memory": "1e30", "nvidia.com/gpu": 1e30, "pods": "1e30"}}})
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": items}))
    return str(path)


def test_place_node_with_huge_allocatable(tmp_path, capsys):
    huge = _huge_node_yaml(tmp_path)
    assert main(["place", "-f", str(EXAMPLES / "distributedworkload-native.yaml"), "--cluster", huge]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "placed: 32 pods on 1 node; workload meets at kubernetes.io/hostname=n0; segments: 4 at kubernetes.io/hostname")


def test_place_bound_pods_far_over_allocatable_not_placed(tmp_path, capsys):
    """Bound pods requesting 1e30 cpu each used to overflow int64 (OverflowError traceback)."""
    items = [{"kind": "Node", "metadata": {"name": "n0", "labels": {
        "topology.kubernetes.io/zone": "z", "cloud.provider.com/topology-block": "b",
        "cloud.provider.com/topology-rack": "r", "kubernetes.io/hostname": "n0"}},
        "status": {"allocatable": {"cpu": "1", "nvidia.com/gpu": "8"}}}]
    items += [{"kind": "Pod", "metadata": {"name": f"p{i}"}, "spec": {"nodeName": "n0", "containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1e30"}}}]}, "status": {"phase": "Running"}} for i in range(4)]
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump({"kind": "List", "items": items}))
    job = tmp_path / "job.yaml"
    job.write_text("kind: PyTorchJob\nmetadata: {name: t}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: 4, template: "
                   "{metadata: {annotations: {kai.scheduler/topology: cluster-topology, kai.scheduler/segment-size: '2'}}, "
                   "spec: {containers: [{name: c, resources: "
                   "{requests: {cpu: 1m}}}]}}}}}\n")
    assert main(["place", "-f", str(job), "--cluster", str(cluster)]) == 1
    assert capsys.readouterr().out == (
        "not placed: 4 pods like default/t-worker-0 (worker): no room for one on any of the 1 eligible node(s) "
        "(binding resource: cpu)\n")


def _dw(tmp_path, workers, per_segment, master=False):
    dw = load_example("distributedworkload-native.yaml")
    dw["spec"]["workers"] = workers
    dw["spec"]["workersPerSegment"] = per_segment
    if master:
        dw["spec"]["master"] = {"template": dw["spec"]["worker"]["template"]}
    path = tmp_path / "dw.yaml"
    path.write_text(yaml.safe_dump(dw))
    return str(path)


@pytest.mark.parametrize("workers, per_segment, master, field", [
    (100_001, 100, False, "spec.workers: 100001"),
    (100_001, 8, False, "spec.workers: 100001"),  # the cap comes before the webhook's too-many-segments denial
    (100_000, 100, True, "spec.master + spec.workers: 100001"),
    (2_000_000_000, 1000, False, "spec.workers: 2000000000"),
])
def test_place_workload_over_pod_cap_exit_2_quickly(tmp_path, capsys, workers, per_segment, master, field):
    wl = _dw(tmp_path, workers, per_segment, master)
    assert main(["place", "-f", wl, "--cluster", _huge_node_yaml(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"segment-webhook place: error: {wl}: {field} pods is more than the 100000 this command expands" + CAP_FIX + "\n")


@pytest.mark.parametrize("content, field", [
    ("kind: PyTorchJob\nmetadata: {name: j}\nspec: {pytorchReplicaSpecs: {Master: {replicas: 1, template: {spec: "
     "{containers: [{name: c}]}}}, Worker: {replicas: 100000, template: {spec: {containers: [{name: c}]}}}}}\n",
     "spec.pytorchReplicaSpecs.Master.replicas + spec.pytorchReplicaSpecs.Worker.replicas: 100001"),
    ("kind: LeaderWorkerSet\nmetadata: {name: l}\nspec: {replicas: 7, leaderWorkerTemplate: {size: 14286, "
     "workerTemplate: {spec: {containers: [{name: c}]}}}}\n",
     "spec.replicas × spec.leaderWorkerTemplate.size: 100002"),
])
def test_place_pod_cap_names_the_fields(tmp_path, capsys, content, field):
    path = tmp_path / "w.yaml"
    path.write_text(content)
    assert main(["place", "-f", str(path), "--cluster", _huge_node_yaml(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"segment-webhook place: error: {path}: {field} pods is more than the 100000 this command expands" + CAP_FIX + "\n")


@pytest.mark.slow
def test_place_100000_workers_at_the_cap(tmp_path, capsys):
    """The largest workload the command expands: 100,000 pods, each through the webhook (its
    time is measured by benchmarks/placement.py, never asserted here). A big input: under
    ``-m slow`` (docs/decisions/default-suite-time.md); the refusals just over the cap stay in the
    default run."""
    wl = _dw(tmp_path, 100_000, 100)
    assert main(["place", "-f", wl, "--cluster", _huge_node_yaml(tmp_path), "-o", "json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["assignments"]) == 100_000 and len(res["segments"]) == 1000
    assert res["workload"] == {"domain": "n0", "level": "kubernetes.io/hostname"}


def test_place_number_over_4300_digits_is_bad_input(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text("kind: PyTorchJob\nmetadata: {name: j}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: "
                    + "9" * 5000 + "}}}\n")
    assert main(["place", "-f", str(path), "--cluster", _huge_node_yaml(tmp_path)]) == 2
    assert capsys.readouterr().err == f"segment-webhook place: error: {path}: a number has more than 4300 digits\n"


@pytest.mark.parametrize("content", ["", yaml.safe_dump(load_example("pytorchjob-tp4.yaml"))])
def test_topology_file_without_a_topology_exits_2(gen_cluster, tmp_path, capsys, content):
    # An empty file or one holding a PyTorchJob is bad input, as `review`/`serve --topology-file` say.
    path = tmp_path / "topo.yaml"
    path.write_text(content)
    code = main(["place", "-f", f"{EXAMPLES}/distributedworkload-native.yaml", "--cluster", gen_cluster,
                 "--topology-file", str(path)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (f"segment-webhook place: error: --topology-file: no kai.scheduler/v1alpha1 Topology object in {path}; "
                   "fix: give a file holding `kind: Topology` (`kubectl get topologies.kai.scheduler -o yaml`)\n")


def _job_with_worker_spec(tmp_path, **worker_spec):
    job = load_example("pytorchjob-tp4.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(worker_spec)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, job["metadata"]["name"]


@pytest.mark.parametrize("worker_spec, message", [
    ({"tolerations": {"key": "a"}},
     "spec.pytorchReplicaSpecs.Worker.template.spec.tolerations must be an array of objects, not an object"),
    ({"nodeSelector": ["a"]},
     "spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector must be an object, not an array"),
    ({"nodeSelector": {"pool": 5}},
     'spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector["pool"] = 5: keys and values must be strings, '
     "not a number; fix: quote them"),
    ({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "-1"}}}]},
     'spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.requests[nvidia.com/gpu]: "-1" is '
     "negative: Kubernetes API validation rejects negative requests, limits, overhead and allocatable (quantities "
     "must be non-negative); fix: use 0 or more"),
])
def test_template_errors_name_the_template_path(gen_cluster, tmp_path, capsys, worker_spec, message):
    # the pod named is one the expansion makes; the path is the field to fix in the file
    path, name = _job_with_worker_spec(tmp_path, **worker_spec)
    assert main(["place", "-f", str(path), "--cluster", gen_cluster]) == 2
    assert capsys.readouterr().err == f"segment-webhook place: error: {path}: Pod {name}-worker-0: {message}\n"


def test_bound_pod_with_a_negative_request_is_bad_input(tmp_path, capsys):
    # it used to free capacity: "-3" GPUs on a 1-GPU node made room for 4 more
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump({"kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "n0"}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}},
        {"kind": "Pod", "metadata": {"name": "neg", "namespace": "default"},
         "spec": {"nodeName": "n0", "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "-3"}}}]}},
    ]}))
    assert main(["place", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--cluster", str(cluster)]) == 2
    assert capsys.readouterr().err == (
        f'segment-webhook place: error: {cluster}: Pod default/neg: spec.containers[0].resources.requests[nvidia.com/gpu]: '
        '"-3" is negative: Kubernetes API validation rejects negative requests, limits, overhead and allocatable '
        "(quantities must be non-negative); fix: use 0 or more\n")


def test_a_workload_in_a_list_of_one_is_placed_and_a_workload_without_pods_is_bad_input(gen_cluster, tmp_path, capsys):
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "l"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}}}}
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [job]}))
    assert main(["place", "-f", str(listed), "--cluster", gen_cluster]) == 0  # as controller -f reads it
    assert "placed: 2 pods on " in capsys.readouterr().out
    empty = tmp_path / "empty.yaml"
    empty.write_text(yaml.safe_dump({**job, "spec": {"pytorchReplicaSpecs": {}}}))
    assert main(["place", "-f", str(empty), "--cluster", gen_cluster]) == 2
    assert capsys.readouterr().err == (
        f'segment-webhook place: error: {empty}: PyTorchJob "l" creates no pods (no replica type with replicas, '
        "no group, no workers): nothing to place; fix: give it the pods it should run\n")


# --- place takes serve's and review's resolution flags and says each warning once ---------------

GPU_FABRIC = ("apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: gpu-fabric}\n"
              "spec: {levels: [{nodeLabel: cloud.provider.com/topology-rack}, {nodeLabel: kubernetes.io/hostname}]}\n")


def test_place_takes_the_resolution_flags_of_serve_and_review(gen_cluster, tmp_path, capsys):
    # with two Topologies, --default-topology decides automatic mode (DESIGN.md §6) as in serve
    fabric = tmp_path / "fabric.yaml"
    fabric.write_text(GPU_FABRIC)
    native = load_example("distributedworkload-native.yaml")
    native["spec"]["worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 2
    wl = tmp_path / "native.yaml"
    wl.write_text(yaml.safe_dump(native))
    base = ["place", "-f", str(wl), "--cluster", gen_cluster, "--topology-file", str(fabric), "-o", "json"]
    assert main(base) == 0  # two topologies, no default: automatic placement skipped
    captured = capsys.readouterr()
    assert json.loads(captured.out)["segments"] == []
    assert captured.err == ("Warning: DistributedWorkload llama-tp8: automatic segment placement skipped: "
                            "no kai.scheduler/topology and no default topology\n"
                            "Warning: DistributedWorkload llama-tp8: kai.scheduler/segment-size ignored: KAI needs "
                            "kai.scheduler/topology for segments; set it in metadata.annotations\n")
    assert main(base + ["--default-topology", "cluster-topology"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["segments"]) == 4 and {len(s["pods"]) for s in res["segments"]} == {8}
    assert main(base + ["--default-topology", "nope"]) == 2
    assert capsys.readouterr().err == ('segment-webhook place: error: --default-topology "nope" is not a loaded '
                                       "topology; loaded: cluster-topology, gpu-fabric\n")


def test_place_prints_each_distinct_warning_once_with_its_count(gen_cluster, tmp_path, capsys):
    # one line per distinct warning, not one per pod
    job = tmp_path / "job.yaml"
    job.write_text("kind: PyTorchJob\nmetadata: {name: t}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: 16, template: "
                   "{metadata: {annotations: {kai.scheduler/segment-size: '4'}}, "
                   "spec: {containers: [{name: c, resources: {requests: {cpu: 1m}}}]}}}}}\n")
    assert main(["place", "-f", str(job), "--cluster", gen_cluster]) == 0
    assert capsys.readouterr().err == (
        "Warning: PyTorchJob t: kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for segments; "
        "set it in metadata.annotations\n"
        "Warning: 16 Pods (t-worker-0 …): pod has kai.scheduler/segment-size but no kai.scheduler/topology; "
        "no segment label\n")


@pytest.mark.parametrize("where", ["missing-dir", "directory"])
def test_an_svg_path_that_cannot_be_written_is_named_before_the_placement(gen_cluster, tmp_path, capsys, where):
    # new-user trial: the whole placement table was printed, then "x.svg: cannot write" without --svg
    svg = tmp_path / "no-such-dir" / "x.svg" if where == "missing-dir" else tmp_path
    reason = "No such file or directory" if where == "missing-dir" else "Is a directory"
    assert main(["place", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--cluster", gen_cluster,
                 "--svg", str(svg)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"segment-webhook place: error: --svg {svg}: cannot write: {reason}; fix: give a file in an "
                   "existing directory you can write to (e.g. --svg placement.svg)\n")


def test_a_resource_quantity_that_is_not_a_quantity_gets_a_fix(tmp_path, capsys):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "many", "pods": "110"}}}
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump(node))
    assert main(["place", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--cluster", str(cluster)]) == 2
    assert capsys.readouterr().err == (
        f'segment-webhook place: error: {cluster}: Node "n1": status.allocatable[cpu]: "many" is not a Kubernetes '
        'quantity (examples: "500m", "2", "64Gi", "1e3"); fix: write a number with an optional suffix '
        "(m, k, M, G, Ki, Mi, Gi, Ti) and no spaces\n")
