"""Issue 37, the offline commands: ``metadata.generateName`` read as kube-apiserver reads it,
``gen-cluster``'s ``ephemeral-storage``, ``topology infer`` on the project's own labels, and the
answers that misled (what-if, capacity, controller --once, topology export). Every expected
value is written out here, with where it comes from."""

from __future__ import annotations

import json

import pytest
import yaml

from webhook.cli import main

#: A Job as ``kubectl create`` users write it: no name, a generateName. 8 one-GPU pods in segments
#: of 4 on one rack of the embedded Topology (webhook/data/topology.yaml).
JOB_GENERATE_NAME = """\
apiVersion: batch/v1
kind: Job
metadata:
  generateName: train-
  annotations:
    kai.scheduler/topology: cluster-topology
    kai.scheduler/segment-size: "4"
    kai.scheduler/segment-topology-required-placement: cloud.provider.com/topology-rack
spec:
  completions: 8
  parallelism: 8
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: w
        image: busybox
        resources:
          limits:
            nvidia.com/gpu: 1
"""

#: The name kube-apiserver's rule gives it here: "train-" and 5 characters of
#: "bcdfghjklmnpqrstvwxz2456789" (k8s.io/apimachinery pkg/util/rand), picked from
#: `printf 'Job/default/train-' | sha256sum` = 28 14 d1 fd 45 ...: 0x28=40 -> 40 % 27 = 13 -> "r",
#: 0x14=20 -> "2", 0xd1=209 -> 209 % 27 = 20 -> "2", 0xfd=253 -> 253 % 27 = 10 -> "n",
#: 0x45=69 -> 69 % 27 = 15 -> "t".
GENERATED = "train-r22nt"


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory):
    path = tmp_path_factory.mktemp("gc") / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "2", "--nodes", "2", "--gpus", "8",
                 "--fill", "0", "-o", str(path)]) == 0
    return str(path)


def test_place_names_a_generate_name_workload_and_says_so(small_cluster, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(JOB_GENERATE_NAME)
    assert main(["place", "-f", str(job), "--cluster", small_cluster, "-o", "json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert sorted(result["assignments"]) == [f"default/{GENERATED}-{i}" for i in range(8)]
    assert (f'Warning: Job {GENERATED}: metadata.name made from metadata.generateName "train-" (kube-apiserver '
            "appends 5 random characters; here they come from a hash, the same on every run; set metadata.name "
            "to choose it)\n") in captured.err
    assert "metadata.name is missing" not in captured.err


def test_place_of_a_denied_generate_name_workload_is_the_denial_exit_1(small_cluster, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(JOB_GENERATE_NAME.replace('segment-size: "4"', 'segment-size: "0"'))
    assert main(["place", "-f", str(job), "--cluster", small_cluster]) == 1
    assert capsys.readouterr().out == (
        'denied by the webhook: metadata.annotations["kai.scheduler/segment-size"] = "0": a segment needs more '
        "than 1 pod (rule segment-size-too-small); fix: set a segment size of at least 2 (or remove "
        "kai.scheduler/segment-size for no segments).\n")
    assert main(["place", "-f", str(job), "--cluster", small_cluster, "--what-if"]) == 1
    assert capsys.readouterr().out.startswith("denied by the webhook\n")


def test_capacity_and_controller_once_take_a_generate_name_workload(small_cluster, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(JOB_GENERATE_NAME)
    assert main(["capacity", "--cluster", small_cluster, "-f", str(job)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("shape: 8 pods per gang, segments of 4 at cloud.provider.com/topology-rack")
    assert f"Job {GENERATED}: metadata.name made from metadata.generateName" in captured.err
    assert main(["controller", "--once", "--snapshot", small_cluster, "-f", str(job), "-o", "json"]) == 0
    captured = capsys.readouterr()
    assert sorted(d["name"] for d in json.loads(captured.out)) == [f"{GENERATED}-{i}" for i in range(8)]
    assert f"Job {GENERATED}: metadata.name made from metadata.generateName" in captured.err


def test_capacity_of_a_denied_generate_name_workload_is_the_denial_exit_1(small_cluster, tmp_path, capsys):
    """Before: "metadata.name is missing", exit 2 (and a denial was exit 2 too)."""
    job = tmp_path / "job.yaml"
    job.write_text(JOB_GENERATE_NAME.replace('segment-size: "4"', 'segment-size: "0"'))
    assert main(["capacity", "--cluster", small_cluster, "-f", str(job)]) == 1
    assert capsys.readouterr().err.endswith(
        f'segment-webhook capacity: error: {job}: denied by the webhook: metadata.annotations["kai.scheduler/segment-size"] '
        '= "0": a segment needs more than 1 pod (rule segment-size-too-small); fix: set a segment size of at least 2 '
        "(or remove kai.scheduler/segment-size for no segments).\n")


@pytest.mark.parametrize("metadata, message", [
    ("{}", "metadata.name: an object needs a name (rule name-or-generate-name, as kube-apiserver: "
           '"name or generateName is required"); fix: set metadata.name (e.g. train) or metadata.generateName '
           "(e.g. train-) to a non-empty string"),
    ('{generateName: ""}', 'metadata.generateName = "": an object needs a name'),
    ("{generateName: 7}", "metadata.generateName = 7: an object needs a name"),
])
def test_place_without_name_or_generate_name_is_bad_input(small_cluster, tmp_path, capsys, metadata, message):
    job = tmp_path / "job.yaml"
    job.write_text(JOB_GENERATE_NAME.replace("metadata:\n  generateName: train-\n  annotations:",
                                             f"metadata: {metadata}\nx:"))
    assert main(["place", "-f", str(job), "--cluster", small_cluster]) == 2
    assert message in capsys.readouterr().err


def test_a_long_generate_name_is_cut_to_58_characters(small_cluster, tmp_path, capsys):
    """kube-apiserver: ``maxGeneratedNameLength = 63 - 5``; the name is 63 characters."""
    prefix = "a" * 70
    job = tmp_path / "job.yaml"
    job.write_text(JOB_GENERATE_NAME.replace("generateName: train-", f"generateName: {prefix}")
                   .replace("completions: 8\n  parallelism: 8", "completions: 4\n  parallelism: 4"))
    main(["place", "-f", str(job), "--cluster", small_cluster, "-o", "json"])
    names = list(json.loads(capsys.readouterr().out)["assignments"])
    assert len(names) == 4
    assert all(n.startswith("default/" + "a" * 58) and len(n.split("/")[1].split("-")[0]) == 63 for n in names)
    assert "a" * 59 not in names[0]


@pytest.mark.parametrize("output, stdout", [("yaml", ""), ("json", "[]\n")])
def test_controller_once_with_no_gated_pod_says_so_on_stderr(small_cluster, capsys, output, stdout):
    """Before: nothing at all on either stream for yaml (issue 37). Stdout stays the documents."""
    assert main(["controller", "--once", "--snapshot", small_cluster, "-o", output]) == 0
    captured = capsys.readouterr()
    assert captured.out == stdout
    assert captured.err == ("controller --once: no gated gang in the snapshot, nothing to release (pods the webhook "
                            "gated carry spec.schedulingGates[segments.dev/placement])\n")


# ------------------------------------------------------------------ gen-cluster ephemeral-storage (item 5)

def _job_requesting_storage(tmp_path, storage: str, pods: int = 2):
    job = tmp_path / "storage-job.yaml"
    job.write_text(f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: cache}}
spec:
  completions: {pods}
  parallelism: {pods}
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: w
        image: vllm/vllm-openai
        resources:
          requests: {{ephemeral-storage: {storage}, nvidia.com/gpu: "1"}}
          limits: {{ephemeral-storage: {storage}, nvidia.com/gpu: "1"}}
""")
    return str(job)


def test_gen_cluster_nodes_report_ephemeral_storage(small_cluster):
    """1.92 TB (DGX H100 OS drive) less the kubelet's 10 % nodefs.available eviction threshold."""
    with open(small_cluster, encoding="utf-8") as fh:
        nodes = [i for i in yaml.safe_load(fh)["items"] if i["kind"] == "Node"]
    assert len(nodes) == 4
    assert {n["status"]["allocatable"]["ephemeral-storage"] for n in nodes} == {"1728000000000"}


def test_a_pod_requesting_ephemeral_storage_fits_on_gen_cluster_up_to_its_allocatable(small_cluster, tmp_path, capsys):
    """Before: "can never fit" for any ephemeral-storage request (no node reported any)."""
    assert main(["place", "-f", _job_requesting_storage(tmp_path, "500Gi"), "--cluster", small_cluster, "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["assignments"]) == 2
    # 1728000000000 bytes is room for one pod of 1T (1e12) per node, not two: 2 pods on 2 nodes
    assert main(["place", "-f", _job_requesting_storage(tmp_path, "1T"), "--cluster", small_cluster, "-o", "json"]) == 0
    assert len(set(json.loads(capsys.readouterr().out)["assignments"].values())) == 2
    # 1729G is 1e9 bytes over a node's allocatable: never fits
    assert main(["place", "-f", _job_requesting_storage(tmp_path, "1729G"), "--cluster", small_cluster]) == 1
    assert "ephemeral-storage" in capsys.readouterr().out


def test_bound_pods_ephemeral_storage_is_charged(tmp_path, capsys):
    """A bound pod requesting 1T leaves 728000000000 bytes on its node: a second 1T pod goes elsewhere."""
    cluster = tmp_path / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "1", "--nodes", "1", "--gpus", "8",
                 "--fill", "0", "-o", str(cluster)]) == 0
    doc = yaml.safe_load(cluster.read_text(encoding="utf-8"))
    doc["items"].append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": "x"},
                         "spec": {"nodeName": "node-0-0-0-0", "containers": [
                             {"name": "c", "resources": {"requests": {"ephemeral-storage": "1T"}}}]},
                         "status": {"phase": "Running"}})
    cluster.write_text(yaml.safe_dump(doc), encoding="utf-8")
    capsys.readouterr()
    assert main(["place", "-f", _job_requesting_storage(tmp_path, "1T", pods=1), "--cluster", str(cluster)]) == 1
    assert main(["place", "-f", _job_requesting_storage(tmp_path, "700G", pods=1), "--cluster", str(cluster)]) == 0


# ------------------------------------------------------------------ topology infer on gen-cluster output (item 3)

GEN_CLUSTER_TOPOLOGY = """\
apiVersion: {api}
kind: Topology
metadata:
  name: cluster-topology
spec:
  levels:
  - nodeLabel: topology.kubernetes.io/zone
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: cloud.provider.com/topology-rack
  - nodeLabel: kubernetes.io/hostname
"""


@pytest.mark.parametrize("kind, api", [("kai", "kai.scheduler/v1alpha1"), ("kueue", "kueue.x-k8s.io/v1beta2")])
def test_topology_infer_on_gen_cluster_default_output_gives_its_topology(tmp_path, capsys, kind, api):
    """Before: zone > hostname only on the default output (block and rack were no candidates), and
    "no Topology: no node carries a topology label that makes a level" with one zone (whose zone
    level has one domain, so it is left out, docs/concepts/topology.md). The nodes only, without
    gen-cluster's Topology, as `local-cluster.sh nodes` under Kueue reads a dump."""
    one_zone = GEN_CLUSTER_TOPOLOGY.replace("  - nodeLabel: topology.kubernetes.io/zone\n", "")
    for zones, expected in (("2", GEN_CLUSTER_TOPOLOGY), ("1", one_zone)):
        cluster = tmp_path / f"cluster-{zones}.yaml"
        assert main(["gen-cluster", "--zones", zones, "-o", str(cluster)]) == 0
        doc = yaml.safe_load(cluster.read_text(encoding="utf-8"))
        doc["items"] = [item for item in doc["items"] if item["kind"] == "Node"]
        cluster.write_text(yaml.safe_dump(doc), encoding="utf-8")
        capsys.readouterr()
        assert main(["topology", "infer", "-f", str(cluster), "--kind", kind]) == 0
        assert capsys.readouterr().out == expected.format(api=api)


# ------------------------------------------------------------------ place --what-if answers (item 7)

def _busy_cluster(tmp_path, busy_nodes: int, pending: list[dict] | None = None) -> str:
    """4 nodes of 8 GPUs in one rack; the first ``busy_nodes`` (by name) each run an 8-GPU pod."""
    path = tmp_path / "busy.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "1", "--nodes", "4", "--gpus", "8",
                 "--fill", "0", "-o", str(path)]) == 0
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    names = sorted(i["metadata"]["name"] for i in doc["items"] if i["kind"] == "Node")
    doc["items"] += [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"other-{k}", "namespace": "team-b"},
                      "spec": {"nodeName": node, "containers": [
                          {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                      "status": {"phase": "Running"}} for k, node in enumerate(names[:busy_nodes])]
    doc["items"] += pending or []
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


def _elastic(tmp_path, workers: int) -> str:
    """An elastic PyTorchJob (minReplicas 1) of ``workers`` 8-GPU workers, no segments."""
    path = tmp_path / "elastic.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "elastic", "namespace": "team-a"},
        "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": workers}, "pytorchReplicaSpecs": {"Worker": {
            "replicas": workers, "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": "cluster-topology"}},
                "spec": {"containers": [{"name": "pytorch", "image": "p",
                                         "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}}))
    return str(path)


def test_never_fits_gives_the_empty_cluster_reason_and_the_replicas_that_fit_there(tmp_path, capsys):
    """6 workers of 8 GPUs on 4 nodes of 8 GPUs, every node busy. Before: the engine line said "no room
    for one on any of the 4 eligible node(s)" (today's capacity) and "no change within the search
    bound fits". The empty cluster holds 4 of the 6 workers: 4 workers, one per node."""
    cluster = _busy_cluster(tmp_path, busy_nodes=4)
    assert main(["place", "-f", _elastic(tmp_path, 6), "--cluster", cluster, "--what-if"]) == 1
    assert capsys.readouterr().out == (
        "can never fit on this cluster, not even with every node free\n"
        "  engine, with every node free: workload level cluster: 1 domain(s), 0 with room for the whole demand; "
        "the best (cluster) holds 4 of 6 pods like team-a/elastic-worker-0 (binding resource: nvidia.com/gpu); "
        "not enough room there for 6 pods like team-a/elastic-worker-0 (worker)\n"
        "no change fits on today's free capacity; smallest changes that fit once every node is free, each verified "
        "by placing the changed workload on this cluster with every node free (then it waits for capacity):\n"
        "  1. Worker replicas: 4 (was 6; spec.elasticPolicy.minReplicas allows it)\n"
        "     placed: 4 pods on 4 nodes; workload meets at cloud.provider.com/topology-rack=rack-0-0-0; "
        "segments: no segments\n")
    assert main(["place", "-f", _elastic(tmp_path, 6), "--cluster", cluster, "--what-if", "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(c["change"]["to"], c["on"]) for c in doc["changes"]] == [(4, "empty-cluster")]
    assert doc["reason"] == "6 pods like team-a/elastic-worker-0 (worker): no room for one on any of the 4 " \
                            "eligible node(s) (binding resource: nvidia.com/gpu)"


def test_fits_says_a_scheduler_missed_it_only_when_the_dump_holds_its_pods_pending(tmp_path, capsys):
    """Before: every "fits" said "(for a gang another scheduler left pending: it missed this one)"."""
    job = _elastic(tmp_path, 2)
    assert main(["place", "-f", job, "--cluster", _busy_cluster(tmp_path, busy_nodes=1), "--what-if"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "fits on today's free capacity: a placement exists"
    pending = [{"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"elastic-worker-{i}", "namespace": "team-a",
                             "labels": {"training.kubeflow.org/job-name": "elastic"}},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                "status": {"phase": "Pending"}} for i in range(2)]
    cluster = _busy_cluster(tmp_path, busy_nodes=1, pending=pending)
    assert main(["place", "-f", job, "--cluster", cluster, "--what-if"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "fits on today's free capacity: a placement exists (2 of its pods are pending in the dump: the scheduler "
        "that left them pending missed this placement)")
    assert main(["place", "-f", job, "--cluster", cluster, "--what-if", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["pending_pods"] == 2


# ------------------------------------------------------------------ capacity (item 7)

@pytest.mark.parametrize("shape, message", [
    ("pods=8,segment-size=1,nvidia.com/gpu=1",
     "segment-webhook capacity: error: --shape segment-size=1: a segment needs more than 1 pod (rule "
     "segment-size-too-small, DESIGN.md §5: the webhook denies it); fix: segment-size=2 or more, or segment-size=8 "
     "(the pods count) for a gang without segments\n"),
    ("pods=8,segment-size=4,nvidia.com/gpu=0.5",
     "segment-webhook capacity: error: --shape nvidia.com/gpu=0.5: nvidia.com/gpu is counted in whole units (an "
     "extended resource: kube-apiserver denies a request that is not an integer); fix: request a whole number, "
     "e.g. nvidia.com/gpu=1\n"),
    ("pods=8,segment-size=4,example.com/fpga=1500m",
     "segment-webhook capacity: error: --shape example.com/fpga=1500m: example.com/fpga is counted in whole units"),
])
def test_capacity_shape_denies_segment_size_1_and_fractional_gpus(small_cluster, capsys, shape, message):
    """Before: both were counted (exit 0)."""
    assert main(["capacity", "--cluster", small_cluster, "--shape", shape]) == 2
    assert capsys.readouterr().err.startswith(message)


@pytest.mark.parametrize("shape", ["pods=1,segment-size=1,nvidia.com/gpu=1", "pods=8,segment-size=4,cpu=0.5",
                                   "pods=8,segment-size=4,nvidia.com/gpu=2,memory=1.5Gi"])
def test_capacity_shape_still_takes_one_pod_gangs_and_fractional_cpu(small_cluster, capsys, shape):
    assert main(["capacity", "--cluster", small_cluster, "--shape", shape]) == 0


def test_capacity_table_sums_up_per_domain_and_shows_nodes_on_request(small_cluster, capsys):
    """small_cluster: 1 zone > 1 block > 2 racks > 2 nodes of 8 free GPUs. Before: one row per node
    always (4 node rows here, 128 for the README's cluster)."""
    shape = "pods=4,segment-size=2,nvidia.com/gpu=8,segment-level=cloud.provider.com/topology-rack"
    assert main(["capacity", "--cluster", small_cluster, "--shape", shape]) == 0
    def row(level: str, domain: str, nodes: object, free: object, segments: object, gangs: object,
            stranded: object) -> str:
        return f"{level:<34} {domain:<24} {nodes:>6} {free:>20} {segments:>9} {gangs:>6} {stranded:>9}"

    # a rack: 2 nodes x 8 GPUs = 2 pods of 8 GPUs = 1 segment of 2; a gang (2 segments) needs both racks
    assert capsys.readouterr().out == "\n".join([
        "shape: 4 pods per gang, segments of 2 at cloud.provider.com/topology-rack, gang at any level; "
        "topology cluster-topology",
        row("LEVEL", "DOMAIN", "NODES", "FREE nvidia.com/gpu", "SEGMENTS", "GANGS", "STRANDED"),
        row("cluster", "cluster", 4, 32, 2, 1, 0),
        row("topology.kubernetes.io/zone", "zone-0", 4, 32, 2, 1, 0),
        row("cloud.provider.com/topology-block", "block-0-0", 4, 32, 2, 1, 0),
        row("cloud.provider.com/topology-rack", "rack-0-0-0", 2, 16, 1, 0, 0),
        row("cloud.provider.com/topology-rack", "rack-0-0-1", 2, 16, 1, 0, 0),
        "STRANDED: free nvidia.com/gpu on eligible nodes that no segment of this shape can use",
        "4 node lines (kubernetes.io/hostname) left out; --per-node shows them",
    ]) + "\n"
    assert main(["capacity", "--cluster", small_cluster, "--shape", shape, "--per-node"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("kubernetes.io/hostname")] == \
        ["node-0-0-0-0", "node-0-0-0-1", "node-0-0-1-0", "node-0-0-1-1"]
    assert lines[-1] == "STRANDED: free nvidia.com/gpu on eligible nodes that no segment of this shape can use"


# ------------------------------------------------------------------ topology export flags (item 7)

TOPOLOGY_FILE = GEN_CLUSTER_TOPOLOGY.format(api="kai.scheduler/v1alpha1")


@pytest.mark.parametrize("flags, message", [
    (["--format", "volcano", "--plugin", "block"],
     "segment-webhook topology export: error: --plugin block: --plugin is for --format slurm, and Volcano HyperNodes "
     "have no such setting (their tiers are the Topology's levels, tier 1 the narrowest); fix: leave out --plugin, "
     "or use --format slurm\n"),
    (["--format", "volcano", "--block-level", "cloud.provider.com/topology-rack"],
     "segment-webhook topology export: error: --block-level cloud.provider.com/topology-rack: --block-level is for "
     "--format slurm"),
    (["--format", "slurm", "--members", "labels"],
     "segment-webhook topology export: error: --members labels: --members is for --format volcano"),
    (["--format", "slurm", "--block-level", "cloud.provider.com/topology-rack"],
     "segment-webhook topology export: error: --block-level cloud.provider.com/topology-rack: --block-level is for "
     "the topology/block plugin, and the plugin is tree (the default); fix: add --plugin block, or leave out "
     "--block-level\n"),
])
def test_topology_export_refuses_a_flag_of_the_other_format(small_cluster, tmp_path, capsys, flags, message):
    """Before: `--format volcano --plugin block` printed the same HyperNodes as without it, exit 0."""
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY_FILE, encoding="utf-8")
    assert main(["topology", "export", "-f", str(topology), "--nodes", small_cluster, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(message)


def test_topology_export_takes_each_formats_own_flags(small_cluster, tmp_path, capsys):
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY_FILE, encoding="utf-8")
    for flags in (["--format", "volcano", "--members", "labels"],
                  ["--format", "slurm", "--plugin", "block", "--block-level", "cloud.provider.com/topology-rack"]):
        assert main(["topology", "export", "-f", str(topology), "--nodes", small_cluster, *flags]) == 0
    capsys.readouterr()


# ------------------------------------------------------------------ small ones (item 5)

def test_the_files_the_readme_tour_writes_are_ignored_by_git():
    """Before: bad.yaml, eks.yaml and eks-topology.yaml were left untracked in the tree after the tour."""
    import re
    import subprocess

    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    written = set()
    for line in readme.splitlines():
        if line.startswith(("$ segment-webhook", "$ sed")):
            written |= set(re.findall(r"(?:-o|>|--svg) ([\w./-]+\.(?:yaml|json|svg))", line.split("#")[0]))
    assert written == {"bad.yaml", "cluster.yaml", "eks.yaml", "eks-topology.yaml"}
    for name in sorted(written) + ["placement.svg", "nodes.yaml", "dump.yaml", "mixed-topologies.yaml"]:
        assert subprocess.run(["git", "check-ignore", "-q", name], cwd=REPO).returncode == 0, name


def test_the_metrics_reference_lists_the_controllers_metrics():
    """Before: docs/reference/metrics.md listed only serve's three metrics. The controller's eight
    (webhook/controller/gang_metrics.py, DESIGN.md §9), as Prometheus exposes them."""
    from tests.conftest import REPO

    text = (REPO / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    section = text.split("## Controller", 1)[1]
    for row in ("| `segment_controller_gangs_waiting` | gauge | kind |",
                "| `segment_controller_gangs_placed_total` | counter | — |",
                "| `segment_controller_gangs_infeasible` | gauge | — |",
                "| `segment_controller_gangs_never_fit` | gauge | — |",
                "| `segment_controller_release_seconds` | histogram | — |",
                "| `segment_controller_patch_errors_total` | counter | code |",
                "| `segment_controller_leader` | gauge | — |",
                "| `segment_controller_passes_total` | counter | — |"):
        assert row in section, row
    assert "- `kind`: `incomplete`, `infeasible`, `never-fits`, `invalid`" in section
