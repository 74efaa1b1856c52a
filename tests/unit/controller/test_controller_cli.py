"""``segment-webhook controller --once --snapshot DUMP -o yaml`` (DESIGN.md §9): the live
controller's decision on a ``kubectl get nodes,pods -A -o yaml`` dump, without a cluster."""

from __future__ import annotations

import copy
import io

import pytest
import yaml

from tests.support import paths
from tests.unit.gating.test_controller_decision import cluster, gang_pods, pytorchjob
from webhook.controller.main import run_once

TOPOLOGY_OBJECT: dict = {
    "apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "cluster-topology"},
    "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"}, {"nodeLabel": "cloud.provider.com/topology-block"},
                        {"nodeLabel": "cloud.provider.com/topology-rack"}, {"nodeLabel": "kubernetes.io/hostname"}]},
}


def dump(tmp_path, objects, name="dump.yaml"):
    """A file shaped like ``kubectl get nodes,pods -A -o yaml``: one ``List``."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def once(snapshot_paths, topology_paths, default_topology, output, workload_paths=(), advise=False):
    out, err = io.StringIO(), io.StringIO()
    code = run_once(snapshot_paths, topology_paths, default_topology, output, workload_paths, out=out, err=err,
                    advise=advise)
    return code, out.getvalue(), err.getvalue()


def test_released_pods_and_waiting_gangs_are_yaml_documents(tmp_path):
    complete = gang_pods(pytorchjob("job-a"))
    incomplete = gang_pods(pytorchjob("job-b"))[:9]
    path = dump(tmp_path, cluster() + complete + incomplete + [TOPOLOGY_OBJECT])
    code, out, err = once([path], [], None, "yaml")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert len(docs) == 18
    released = docs[:17]
    assert all(list(d) == ["namespace", "name", "node", "patch"] for d in released)
    assert sorted(d["name"] for d in released) == sorted(p["metadata"]["name"] for p in complete)
    master = next(d for d in released if d["name"] == "job-a-master-0")
    assert master["patch"] == [
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "segments.dev/placement"},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": master["node"]}},
    ]
    assert docs[17] == {"gang": "team-a/job-b", "waiting": "9 of 17 pods exist"}
    assert err == "controller --once: released 17 pods of 1 gang; 1 gang left gated\n"


def test_topology_file_and_workload_flags(tmp_path):
    nodes = dump(tmp_path, cluster(), "nodes.yaml")
    topo = dump(tmp_path, [TOPOLOGY_OBJECT], "topology.yaml")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(pytorchjob("job-c")))
    code, out, err = once([nodes], [topo], None, "yaml", workload_paths=[str(job)])
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert len(docs) == 17 and {d["name"] for d in docs} >= {"job-c-master-0", "job-c-worker-15"}


def test_bad_input_exits_2_naming_the_file(tmp_path):
    code, out, err = once([str(tmp_path / "missing.yaml")], [], None, "yaml")
    assert (code, out) == (2, "")
    assert err.startswith("segment-webhook controller: error: ") and "missing.yaml: cannot read" in err
    empty = dump(tmp_path, [])
    code, _, err = once([empty], [], None, "yaml")
    assert code == 2 and "no Node objects" in err


def test_a_denied_workload_exits_1(tmp_path):
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = "4x"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    code, out, err = once([dump(tmp_path, cluster())], [], None, "yaml", workload_paths=[str(path)])
    assert (code, out) == (1, "")
    assert "denied by the webhook" in err and "4x" in err


def test_the_command_line_runs_the_dry_run(tmp_path):
    """`segment-webhook controller --once --snapshot DUMP -o yaml` in a process of its own."""
    import subprocess
    import sys

    path = dump(tmp_path, cluster() + gang_pods(pytorchjob("job-a"))[:3] + [TOPOLOGY_OBJECT])
    out = subprocess.run([sys.executable, "-m", "webhook.cli", "controller", "--once", "--snapshot", path, "-o", "yaml"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert list(yaml.safe_load_all(out.stdout)) == [{"gang": "team-a/job-a", "waiting": "3 of 17 pods exist"}]
    usage = subprocess.run([sys.executable, "-m", "webhook.cli", "controller", "--once"],
                           capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2
    assert usage.stderr == "segment-webhook controller: error: --once needs --snapshot DUMP (kubectl get nodes,pods -A -o yaml)\n"


def test_empty_or_wrong_workload_and_topology_files_exit_2(tmp_path):
    # As `place -f empty.yaml` and `place/review --topology-file empty.yaml` do: bad input, exit 2.
    nodes = dump(tmp_path, cluster(), "nodes.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, out, err = once([nodes], [], None, "yaml", workload_paths=[str(empty)])
    assert (code, out) == (2, "")
    assert err == f"segment-webhook controller: error: {empty}: expected at least one workload object, found none\n"
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(pytorchjob("job-c")))
    for wrong in (str(empty), str(job)):
        code, out, err = once([nodes], [wrong], None, "yaml")
        assert (code, out) == (2, "")
        assert err == ("segment-webhook controller: error: --topology-file: "
                       f"no kai.scheduler/v1alpha1 Topology object in {wrong}; fix: give a file holding "
                       "`kind: Topology` (`kubectl get topologies.kai.scheduler -o yaml`)\n")


def test_dry_run_on_a_dump_with_malformed_objects_exits_2_naming_every_one(tmp_path):
    # the live controller leaves such objects out and logs them; the dry run must not plan on part
    # of the cluster (a truncated dump) and names every problem, as place --cluster does
    bad_node = copy.deepcopy(cluster()[0])
    bad_node["metadata"]["name"] = "bad"
    bad_node["status"]["allocatable"]["cpu"] = "NaN"
    nodes = cluster()
    path = dump(tmp_path, nodes + [nodes[1], bad_node, {"apiVersion": "v1", "kind": "Pod",
                                                        "metadata": {"name": "p", "namespace": "team-a"}}]
                + gang_pods(pytorchjob("job-a")) + [TOPOLOGY_OBJECT])
    code, out, err = once([path], [], None, "yaml")
    assert (code, out) == (2, "")
    assert err == (
        "segment-webhook controller: error: 3 problems in the input (a truncated or hand-edited dump? dump it again "
        "with `kubectl get nodes,pods -A -o yaml`):\n"
        f'  {path}: document 1.items[8]: Node "zone-a-r1-n2" is listed twice (also at {path}: document 1.items[1]); '
        "node names are unique in a cluster; fix: keep one of them\n"
        f'  {path}: Node "bad": status.allocatable[cpu]: "NaN" is not a Kubernetes quantity (examples: "500m", "2", '
        '"64Gi", "1e3"); fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, Ti) and no spaces\n'
        f"  {path}: Pod team-a/p: spec is missing\n")


def test_dry_run_names_a_negative_request_of_a_bound_pod(tmp_path):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "neg", "namespace": "team-a"},
           "spec": {"nodeName": "zone-a-r1-n1",
                    "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "-3"}}}]}}
    path = dump(tmp_path, cluster() + [pod])
    code, out, err = once([path], [], None, "yaml")
    assert (code, out) == (2, "")
    assert err == (f"segment-webhook controller: error: {path}: Pod team-a/neg: spec.containers[0].resources."
                   'requests[nvidia.com/gpu]: "-3" is negative: Kubernetes API validation rejects negative requests, '
                   "limits, overhead and allocatable (quantities must be non-negative); fix: use 0 or more\n")


def test_dry_run_names_a_pinned_pod_with_a_bad_request(tmp_path):
    # released earlier (pinned by nodeSelector, not bound yet): charged like a bound pod by the one
    # ledger rule (webhook/placement/occupancy.py), so the dump's check names it with its file
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pinned", "namespace": "team-a"},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": "zone-a-r1-n1"},
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}
    path = dump(tmp_path, cluster() + [pod])
    code, out, err = once([path], [], None, "yaml")
    assert (code, out) == (2, "")
    assert err == (f"segment-webhook controller: error: {path}: Pod team-a/pinned: spec.containers[0].resources."
                   'requests[cpu]: "lots" is not a Kubernetes quantity (examples: "500m", "2", "64Gi", "1e3"); fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, Ti) and no spaces\n')


def test_dry_run_parses_each_node_and_pod_once(tmp_path, monkeypatch):
    # the dump's check (build_snapshot) hands its parses to decide() through the ParseCache
    from webhook.gating import decision
    from webhook.planning import snapshot
    parsed_nodes, parsed_specs = [], []
    real_node, real_requests = vars(snapshot)["parse_node"], vars(snapshot)["pod_requests_milli"]  # the names it calls

    def count_node(obj, *args, **kwargs):
        parsed_nodes.append(obj["metadata"]["name"])
        return real_node(obj, *args, **kwargs)

    def count_requests(spec, *args, **kwargs):
        parsed_specs.append(id(spec))
        return real_requests(spec, *args, **kwargs)

    for module in (snapshot, decision):
        monkeypatch.setattr(module, "parse_node", count_node)
        monkeypatch.setattr(module, "pod_requests_milli", count_requests)
    bound = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "running", "namespace": "team-a"},
             "spec": {"nodeName": "zone-a-r1-n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    nodes = cluster()
    path = dump(tmp_path, nodes + [bound] + gang_pods(pytorchjob("job-a")) + [TOPOLOGY_OBJECT])
    code, out, err = once([path], [], None, "yaml")
    assert code == 0, err
    assert len(list(yaml.safe_load_all(out))) == 17
    assert sorted(parsed_nodes) == sorted(n["metadata"]["name"] for n in nodes)
    assert len(parsed_specs) == len(set(parsed_specs)) == 1 + 17  # the bound pod, then each gang member


def test_topology_errors_name_the_file_once(tmp_path):
    # as place says it: file, document, then the Topology's own message (no repeated prefix)
    nodes = dump(tmp_path, cluster(), "nodes.yaml")
    topo = tmp_path / "topo_empty.json"
    topo.write_text('{"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"}, '
                    '"spec": {"levels": []}}')
    code, out, err = once([nodes], [str(topo)], None, "yaml")
    assert (code, out) == (2, "")
    assert err == f"segment-webhook controller: error: {topo}: document 1: Topology \"t\": spec.levels must be a non-empty list\n"


def test_two_topologies_of_one_name_are_bad_input(tmp_path):
    other = copy.deepcopy(TOPOLOGY_OBJECT)
    other["spec"]["levels"] = [{"nodeLabel": "kubernetes.io/hostname"}]
    path = dump(tmp_path, cluster() + [TOPOLOGY_OBJECT, other])
    code, out, err = once([path], [], None, "yaml")
    assert (code, out) == (2, "")
    assert err == (f'segment-webhook controller: error: {path}: document 1.items[9]: Topology "cluster-topology" is '
                   f"defined twice with different levels or aliases (also at {path}: document 1.items[8]: topology.kubernetes.io/zone, "
                   "cloud.provider.com/topology-block, cloud.provider.com/topology-rack, kubernetes.io/hostname; here: "
                   "kubernetes.io/hostname); fix: keep one of them or rename one\n")


def test_raw_api_node_list_items_without_kind(tmp_path):
    import json

    nodes = [{k: v for k, v in n.items() if k != "kind"} for n in cluster()]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}))
    pods = dump(tmp_path, gang_pods(pytorchjob("job-a"))[:3] + [TOPOLOGY_OBJECT], "pods.yaml")
    code, out, err = once([str(path), pods], [], None, "yaml")
    assert code == 0, err
    assert list(yaml.safe_load_all(out)) == [{"gang": "team-a/job-a", "waiting": "3 of 17 pods exist"}]


# ----------------------------------------------------------------------------- the §3b kinds (issue 18)

def _gpu_nodes(racks=3, per_rack=8):
    """3 racks × 8 nodes of 8 GPUs: a segment of 8 pods of 8 GPUs fills one rack."""
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"r{r}-n{i}", "labels": {
                 "topology.kubernetes.io/zone": "z", "cloud.provider.com/topology-block": "b",
                 "cloud.provider.com/topology-rack": f"r{r}", "kubernetes.io/hostname": f"r{r}-n{i}"}},
             "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}
            for r in range(racks) for i in range(per_rack)]


def _kind_pods(kind):
    """The gated pods of one sample of ``kind``, made through the webhook with --gate-pods."""
    from webhook.admission.config import AdmissionSettings
    from webhook.planning.expand import expand
    from webhook.topology.objects import StaticTopologyCatalog, Topology

    if kind == "MPIJob":
        from tests.unit.admission.test_kinds_mpijob import mpijob as make
        obj = make()
    elif kind == "JobSet":
        from tests.unit.admission.test_kinds_jobset import jobset
        obj = jobset(size="8")
    else:
        from tests.unit.admission.test_kinds_ray import raycluster
        obj = raycluster()
    topology = Topology("cluster-topology", tuple(level["nodeLabel"] for level in TOPOLOGY_OBJECT["spec"]["levels"]))
    exp = expand(obj, StaticTopologyCatalog([topology]), AdmissionSettings(gate_pods=True))
    assert not exp.denied, exp.message
    return exp.pods


def _rack(node):
    return node.split("-")[0]


@pytest.mark.parametrize("kind, gang, pods, size", [
    ("MPIJob", "team-a/nccl-tests", 16, 4),  # 15 workers + the launcher-as-worker
    ("JobSet", "team-a/llm/workers", 16, 8),
    ("RayCluster", "team-a/nvl72/gpu", 8, 4),
])
def test_controller_once_releases_a_gang_of_each_new_kind(tmp_path, kind, gang, pods, size):
    gated = _kind_pods(kind)
    code, out, err = once([dump(tmp_path, _gpu_nodes() + gated + [TOPOLOGY_OBJECT])], [], None, "yaml")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert len(docs) == pods and all(list(d) == ["namespace", "name", "node", "patch"] for d in docs)
    segment = {p["metadata"]["name"]: p["metadata"]["labels"]["kai.scheduler/segment-index"] for p in gated}
    racks: dict[str, set[str]] = {}
    for d in docs:
        racks.setdefault(segment[d["name"]], set()).add(_rack(d["node"]))
    assert len(racks) == pods // size and all(len(r) == 1 for r in racks.values())


def test_controller_once_forms_and_labels_the_segments_of_a_ray_group_without_index_labels(tmp_path):
    # DESIGN.md §3b: KubeRay < 1.6 gives no index; the release patch writes kai.scheduler/segment-index
    gated = copy.deepcopy(_kind_pods("RayCluster"))
    for p in gated:
        for key in ("ray.io/worker-group-replica-index", "ray.io/replica-host-index", "kai.scheduler/segment-index"):
            del p["metadata"]["labels"][key]
    code, out, err = once([dump(tmp_path, _gpu_nodes() + gated + [TOPOLOGY_OBJECT])], [], None, "yaml")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert len(docs) == 8
    labelled: dict[str, set[str]] = {}
    for d in docs:
        (op,) = [op for op in d["patch"] if op["path"].startswith("/metadata")]
        assert op["op"] == "add" and op["path"] == "/metadata/labels/kai.scheduler~1segment-index"
        labelled.setdefault(op["value"], set()).add(d["name"].rsplit("-", 1)[0])  # the replica: <cluster>-gpu-worker-<r>
    assert sorted(labelled) == ["0", "1"] and all(len(replicas) == 2 for replicas in labelled.values())


def test_controller_once_releases_the_trainer_gang_of_a_trainjob(tmp_path):
    # The TrainJob's pods are its runtime's JobSet's (replicatedJob node, job-index 0, completion index =
    # node rank) with the template annotations of the webhook's runtimePatches entry; an initializer Job's
    # pod of the same JobSet is never in the trainer's gang (DESIGN.md §9).
    import jsonpatch

    from tests.conftest import make_request
    from tests.unit.admission.test_kinds_trainjob import CATALOG, own_entry, trainjob
    from webhook.admission.config import AdmissionSettings
    from webhook.admission.review import review

    gating = AdmissionSettings(gate_pods=True)
    admitted = jsonpatch.apply_patch(trainjob(size="8"), review(make_request(trainjob(size="8")), CATALOG, gating).patch)
    annotations = own_entry(admitted)["template"]["spec"]["template"]["metadata"]["annotations"]
    pods = []
    for rjob, rank, ann in [("dataset-initializer", 0, {})] + [("node", r, annotations) for r in range(16)]:
        labels = {"jobset.sigs.k8s.io/jobset-name": "llama-ft", "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                  "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(rank)}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"llama-ft-{rjob}-0-{rank}", "namespace": "team-a", "labels": labels,
                            "annotations": dict(ann)},
               "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
        pods.append(jsonpatch.apply_patch(pod, review(make_request(pod), CATALOG, gating).patch))
    assert "schedulingGates" not in pods[0]["spec"]  # the initializer is not gated
    code, out, err = once([dump(tmp_path, _gpu_nodes() + pods + [TOPOLOGY_OBJECT])], [], None, "yaml")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert sorted(d["name"] for d in docs) == sorted(f"llama-ft-node-0-{r}" for r in range(16))
    segment = {p["metadata"]["name"]: p["metadata"]["labels"].get("kai.scheduler/segment-index") for p in pods}
    racks: dict[str, set[str]] = {}
    for d in docs:
        racks.setdefault(segment[d["name"]], set()).add(_rack(d["node"]))
    assert sorted(racks) == ["0", "1"] and all(len(r) == 1 for r in racks.values())


NEVER_FITS_TEXT = (
    "can never fit, not even on the empty cluster (every node free); smallest change that fits: "
    "kai.scheduler/segment-size: 4 (was 8; a cloud.provider.com/topology-rack domain holds at most 4 such pods); "
    "engine: workload level topology.kubernetes.io/zone: 1 domain(s), 0 with room for the whole demand; the best "
    "(zone-a) holds 0 of 1 segments of 8 pods at segment level cloud.provider.com/topology-rack (binding resource: "
    "nvidia.com/gpu)")


def test_place_and_the_dry_run_say_can_never_fit_with_the_smallest_change(tmp_path, capsys):
    """Issue 17 item 3's example: a segment of 8 eight-GPU workers required in one rack, on racks of
    4 nodes of 8 GPUs (2 racks: 64 GPUs, so the gang's 64 GPUs exist, but no rack holds 8 such
    workers): both commands say "can never fit" and name segment size 4."""
    from tests.unit.gating.test_controller_decision import segment_of_8_eight_gpu_workers
    from webhook.cli import main

    nodes = dump(tmp_path, cluster(racks=2, per_rack=4, gpus=8) + [TOPOLOGY_OBJECT])
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(segment_of_8_eight_gpu_workers()))
    assert main(["place", "-f", str(job), "--cluster", nodes]) == 1
    assert capsys.readouterr().out == f"not placed: {NEVER_FITS_TEXT}\n"
    code, out, err = once([nodes], [], None, "yaml", workload_paths=[str(job)])
    assert (code, err) == (0, "controller --once: released 0 pods of 0 gangs; 1 gang left gated\n")
    assert list(yaml.safe_load_all(out)) == [{"gang": "team-a/job-a", "waiting": NEVER_FITS_TEXT}]


def test_a_bad_workload_of_a_file_of_several_is_named_by_its_document(tmp_path):
    # as `place -f`: with more than one workload object, the document tells which one
    bad = pytorchjob("job-d")
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = "x"
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([pytorchjob("job-c"), bad]))
    code, out, err = once([dump(tmp_path, cluster())], [], None, "yaml", workload_paths=[str(path)])
    assert (code, out) == (2, "")
    assert err == (f"segment-webhook controller: error: {path}: document 2: Pod job-d-worker-0: "
                   "spec.pytorchReplicaSpecs.Worker.template.spec.tolerations must be an array of objects, not a string\n")


def test_the_controller_keeps_its_metrics_in_memory_whatever_the_image_sets(tmp_path):
    """Issue 35, found on a real kubelet: the image sets PROMETHEUS_MULTIPROC_DIR for serve's
    workers; the controller's pod has no volume there (read-only root filesystem) and it exited with
    `OSError: [Errno 30] Read-only file system`. The controller drops the variable before
    prometheus_client is imported; its metrics still count."""
    import os
    import subprocess
    import sys

    missing = tmp_path / "no-such-dir"  # as unwritable as the pod's read-only root
    script = ("from webhook.cli.controller import single_process_metrics\n"
              "import sys\n"
              "if sys.argv[1] == 'fixed':\n"
              "    single_process_metrics()\n"
              "from webhook.controller.gang_metrics import Metrics\n"
              "from prometheus_client import generate_latest\n"
              "m = Metrics(); m.placed.inc()\n"
              "print([l for l in generate_latest(m.registry).decode().splitlines()"
              " if l.startswith('segment_controller_gangs_placed_total')][0])\n")
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(missing), PYTHONPATH=str(paths.REPO))
    broken = subprocess.run([sys.executable, "-c", script, "as-before"], capture_output=True, text=True, env=env, timeout=60)
    assert broken.returncode == 1 and "FileNotFoundError" in broken.stderr
    fixed = subprocess.run([sys.executable, "-c", script, "fixed"], capture_output=True, text=True, env=env, timeout=60)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.strip() == "segment_controller_gangs_placed_total 1.0"
