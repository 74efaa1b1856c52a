"""The operators make the pods (marker ``cluster``; DESIGN.md §3, §3b, §4, §7, §9, §11).

One local control plane per flag set (module-scoped, parametrized): ``up DIR --webhook`` ("plain")
and ``up DIR --webhook --gate-pods --controller`` ("gated", plus ``nodes`` with a
``segment-webhook gen-cluster`` dump of 1 zone, 2 blocks, 4 racks of 4 nodes of 8 GPUs). Each test
starts its operator on first use (``hack/operators.py``: training-operator v1.8.1, JobSet v0.8.2,
Trainer v2.0.0, KubeRay v1.5.0 with ``RayMultiHostIndexing`` on), applies segmented workloads of
several sizes (a partial last segment where the kind allows one) with the segment keys on the
worker template and on the workload root (DESIGN.md §4), waits for the operator's pods, and checks:

* the operator's own index labels give each group's pods the indexes ``0..N-1`` once each
  (DESIGN.md §3b's formula), and ``kai.scheduler/segment-index`` = index // S;
* every pod's ``segment-index`` and ``subgroup-name`` equal what ``segment-webhook review`` gives
  for the pod as the operator created it (our labels and gate taken off);
* gated: every pod is bound, each segment on nodes of one rack (the node labels say so), no node
  over its allocatable GPUs;
* the operator's status as far as it goes without kubelets (no pod ever runs here).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import cluster_support
from tests.support.cluster_support import (
    ADMIN_FLAGS,
    DEPLOY_FLAGS,
    EXAMPLES,
    REPO,
    Kubectl,
    local_cluster,
    write_manifest,
)

pytestmark = pytest.mark.cluster

SEGMENT_INDEX = "kai.scheduler/segment-index"
SUBGROUP = "kai.scheduler/subgroup-name"
TOPOLOGY = "kai.scheduler/topology"
SEGMENT_SIZE = "kai.scheduler/segment-size"
SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
GATE = "segments.dev/placement"
GPU = "nvidia.com/gpu"
RACK = "cloud.provider.com/topology-rack"
HOSTNAME = "kubernetes.io/hostname"
GPUS_PER_POD = 2
LAYOUT = ("--zones", "1", "--blocks", "2", "--racks", "4", "--nodes", "4", "--fill", "0")
NODE_COUNT = 32


@dataclass
class Plane:
    """One control plane of the module: its cluster, kubectl, mode and the operators started."""

    cluster: Any
    kube: Kubectl
    gated: bool
    started: set[str] = field(default_factory=set)
    timings: dict[str, float] = field(default_factory=dict)

    def operator(self, name: str) -> None:
        """Start ``name`` (and what it requires) unless running; fail the test if it cannot."""
        import operators

        for needed in operators.ordered([name]):
            if needed in self.started:
                continue
            started = time.monotonic()
            try:
                operators.start(self.cluster, needed)
            except local_cluster.ClusterError as error:
                pytest.fail(f"{needed} did not start: {error}", pytrace=False)
            self.timings[needed] = time.monotonic() - started
            self.started.add(needed)


def binaries_built() -> bool:
    return local_cluster.built() and all(local_cluster.upstream_binary(name).is_file()
                                         for name in ("training-operator", "jobset", "trainer", "kuberay"))


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "gated"])
def plane(request, tmp_path_factory) -> Iterator[Plane]:
    if os.environ.get("CI") != "true" and not binaries_built():
        pytest.skip("operators: binaries not built (hack/local-cluster.sh build)")
    gated = request.param
    directory = tmp_path_factory.mktemp("operators-gated" if gated else "operators-plain")
    timings: dict[str, float] = {}
    started = time.monotonic()
    try:
        cluster = local_cluster.up(directory / "cluster", webhook=True, gate_pods=gated, controller=gated)
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane did not start: {error}", pytrace=False)
    try:
        kube = Kubectl(cluster)
        kube.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
        kube.wait_for_webhook_topology("cluster-topology")
        if gated:
            nodes = directory / "nodes.yaml"
            result = subprocess.run([sys.executable, "-m", "webhook.cli", "gen-cluster", *LAYOUT, "-o", str(nodes)],
                                    capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
            assert result.returncode == 0, result.stderr
            assert cluster.register_nodes(nodes) == NODE_COUNT
        timings["control plane"] = time.monotonic() - started
        yield Plane(cluster, kube, gated, timings=timings)
    finally:
        cluster.stop_all()
        print(f"\noperators ({'gated' if gated else 'plain'}): seconds to start: "
              + ", ".join(f"{name} {seconds:.0f}" for name, seconds in timings.items()))


# ---------------------------------------------------------------------------------------- helpers

wait_for = functools.partial(cluster_support.wait_for, timeout=240, interval=2.0)


def pods_of(kube: Kubectl, namespace: str) -> list[dict]:
    return json.loads(kube.ok("get", "pods", "-n", namespace, "-o", "json"))["items"]


def create(kube: Kubectl, tmp_path: Path, obj: dict) -> dict:
    """``kubectl create`` of ``obj``; returns the stored object (fails the test when refused)."""
    path = write_manifest(tmp_path, f"{obj['kind'].lower()}-{obj['metadata']['name']}", obj)
    return json.loads(kube.ok("create", "-f", str(path), "-o", "json"))


def namespace(kube: Kubectl, name: str) -> str:
    kube("create", "namespace", name)
    return name


def keys(size: int) -> dict[str, str]:
    """The segment keys of DESIGN.md §2: topology, segment size, one rack per segment."""
    return {TOPOLOGY: "cluster-topology", SEGMENT_SIZE: str(size), SEGMENT_REQUIRED: RACK}


def gpu_container(name: str) -> dict:
    return {"name": name, "image": "busybox", "resources": {"limits": {GPU: str(GPUS_PER_POD)}}}


def as_created(pod: dict) -> dict:
    """The pod as its operator created it: the labels our pod webhook writes (``segment-index``,
    and ``subgroup-name`` beside it; a Master's ``subgroup-name: master`` comes from its template,
    where the workload webhook wrote it, DESIGN.md §2) and our scheduling gate taken off, the status
    and server-set fields dropped."""
    metadata = {key: value for key, value in pod["metadata"].items()
                if key in ("name", "namespace", "labels", "annotations", "ownerReferences", "generateName")}
    labels = metadata.get("labels") or {}
    ours = (SEGMENT_INDEX, SUBGROUP) if SEGMENT_INDEX in labels else ()
    metadata["labels"] = {k: v for k, v in labels.items() if k not in ours}
    spec = copy.deepcopy(pod["spec"])
    gates = [gate for gate in spec.get("schedulingGates") or [] if gate["name"] != GATE]
    spec.pop("schedulingGates", None)
    if gates:
        spec["schedulingGates"] = gates
    for key in ("nodeName", "nodeSelector", "affinity"):  # the controller's release writes these
        spec.pop(key, None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def reviewed_labels(plane: Plane, tmp_path: Path, pods: list[dict]) -> dict[str, dict]:
    """``segment-webhook review`` (one process, every pod) of the pods as created: name -> labels."""
    path = tmp_path / f"as-created-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump_all([as_created(pod) for pod in pods], sort_keys=False))
    flags = ["--gate-pods"] if plane.gated else []
    result = subprocess.run([sys.executable, "-m", "webhook.cli", "review", "-f", str(path), "-o", "yaml",
                             "--topology-file", str(EXAMPLES / "topology.yaml"), *DEPLOY_FLAGS, *ADMIN_FLAGS, *flags],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert result.returncode == 0, result.stderr
    return {doc["metadata"]["name"]: doc["metadata"].get("labels") or {}
            for doc in yaml.safe_load_all(result.stdout) if doc}


#: (group, index) of a segmented pod from its operator's labels (None: the pod is not segmented).
IndexOf = Callable[[dict], "tuple[str, int] | None"]


def check_pods(plane: Plane, tmp_path: Path, pods: list[dict], index_of: IndexOf,
               groups: dict[str, tuple[int, int]]) -> dict[str, int]:
    """The checks of the module docstring; ``groups``: group -> (N pods, segment size S).
    Returns counts for the report."""
    by_group: dict[str, list[int]] = defaultdict(list)
    reviewed = reviewed_labels(plane, tmp_path, pods)
    mismatched = []
    for pod in pods:
        name, labels = pod["metadata"]["name"], pod["metadata"]["labels"]
        expected = reviewed[name]
        if (labels.get(SEGMENT_INDEX), labels.get(SUBGROUP)) != (expected.get(SEGMENT_INDEX), expected.get(SUBGROUP)):
            mismatched.append((name, labels.get(SEGMENT_INDEX), labels.get(SUBGROUP),
                               expected.get(SEGMENT_INDEX), expected.get(SUBGROUP)))
        found = index_of(labels)
        if found is None:
            assert SEGMENT_INDEX not in labels, f"{name}: not segmented but labelled {labels[SEGMENT_INDEX]}"
            continue
        group, index = found
        by_group[group].append(index)
        assert labels.get(SEGMENT_INDEX) == str(index // groups[group][1]), (name, group, index, labels)
    assert mismatched == [], "pods whose labels differ from review's (name, ours, review's): " + repr(mismatched)
    for group, (count, _size) in groups.items():
        assert sorted(by_group[group]) == list(range(count)), (group, sorted(by_group[group]))
    figures = {"pods": len(pods), "segmented": sum(len(v) for v in by_group.values())}
    if plane.gated:
        figures.update(check_bound(plane, pods, index_of))
    return figures


def check_bound(plane: Plane, pods: list[dict], index_of: IndexOf) -> dict[str, int]:
    """Gated: each segment on one rack by the node labels, no node over its allocatable GPUs
    (counting every bound pod of the cluster)."""
    nodes = {n["metadata"]["name"]: n for n in json.loads(plane.kube.ok("get", "nodes", "-o", "json"))["items"]}
    racks: dict[tuple, set[str]] = defaultdict(set)
    for pod in pods:
        found = index_of(pod["metadata"]["labels"])
        if found is not None:
            segment = (pod["metadata"]["namespace"], found[0], pod["metadata"]["labels"][SEGMENT_INDEX])
            racks[segment].add(nodes[pod["spec"]["nodeName"]]["metadata"]["labels"][RACK])
    split = {segment: sorted(names) for segment, names in racks.items() if len(names) != 1}
    assert split == {}, f"segments over more than one rack: {split}"
    used: Counter = Counter()
    every = json.loads(plane.kube.ok("get", "pods", "-A", "-o", "json"))["items"]
    for pod in every:
        if pod["spec"].get("nodeName") in nodes:
            for container in pod["spec"]["containers"]:
                used[pod["spec"]["nodeName"]] += int(container.get("resources", {}).get("limits", {}).get(GPU, 0))
    over = {node: gpus for node, gpus in used.items()
            if gpus > int(nodes[node]["status"]["allocatable"][GPU])}
    assert over == {}, f"nodes over their allocatable GPUs: {over}"
    return {"segments": len(racks), "nodes used": len(used)}


def operator_pods(plane: Plane, ns: str, expected: int, timeout: float = 300) -> list[dict]:
    """Wait for ``expected`` pods in ``ns`` (gated: all bound); return them."""
    def ready() -> list[dict] | None:
        pods = pods_of(plane.kube, ns)
        if len(pods) != expected:
            return None
        if plane.gated and not all(pod["spec"].get("nodeName") for pod in pods):
            return None
        return pods
    return wait_for(f"{expected} pods in {ns}{' bound' if plane.gated else ''}", ready, timeout=timeout)


def report(capsys, plane: Plane, text: str) -> None:
    with capsys.disabled():
        print(f"\noperators ({'gated' if plane.gated else 'plain'}): {text}")


# ------------------------------------------------------------------------------- training-operator

def pytorchjob(name: str, workers: int, size: int, on_root: bool) -> dict:
    """A PyTorchJob: 1 Master, ``workers`` Workers of 2 GPUs; the segment keys on the root or on
    the Worker template (DESIGN.md §4)."""
    worker: dict = {"spec": {"containers": [gpu_container("pytorch")]}}
    job: dict = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
                 "spec": {"pytorchReplicaSpecs": {
                     "Master": {"replicas": 1,
                                "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}},
                     "Worker": {"replicas": workers, "template": worker}}}}
    if on_root:
        job["metadata"]["annotations"] = keys(size)
    else:
        worker["metadata"] = {"annotations": keys(size)}
    return job


def pytorchjob_index(labels: dict) -> tuple[str, int] | None:
    """DESIGN.md §3b/§7: Worker ``training.kubeflow.org/replica-index``; the Master is not segmented."""
    if labels.get("training.kubeflow.org/replica-type") != "worker":
        return None
    return labels["training.kubeflow.org/job-name"], int(labels["training.kubeflow.org/replica-index"])


def test_training_operator_pytorchjob_pods(plane, tmp_path, capsys):
    """training-operator v1.8.1: 10 Workers in segments of 4 (keys on the Worker template: {0-3}
    {4-7} {8,9}) and 5 Workers in segments of 2 (keys on the root: {0,1} {2,3} {4}); the Worker
    subgroup is ``worker-<segment>``, the Master's ``master``."""
    plane.operator("training-operator")
    ns = namespace(plane.kube, "op-pytorchjob")
    shapes = {"pt-template": (10, 4, False), "pt-root": (5, 2, True)}
    for name, (workers, size, on_root) in shapes.items():
        job = pytorchjob(name, workers, size, on_root)
        job["metadata"]["namespace"] = ns
        create(plane.kube, tmp_path, job)
    pods = operator_pods(plane, ns, sum(workers + 1 for workers, _, _ in shapes.values()))
    figures = check_pods(plane, tmp_path, pods, pytorchjob_index,
                         {name: (workers, size) for name, (workers, size, _) in shapes.items()})
    # DESIGN.md §2: Master ``master``, gated or not (the gang annotations go beside the label:
    # test_cluster_operators_units.py::test_gated_master_template_keeps_subgroup_name).
    master_subgroup = "master"
    for pod in pods:
        labels = pod["metadata"]["labels"]
        found = pytorchjob_index(labels)
        expected = master_subgroup if found is None else f"worker-{found[1] // shapes[found[0]][1]}"
        assert labels.get(SUBGROUP) == expected, pod["metadata"]["name"]
        segment_size = None if found is None else str(shapes[found[0]][1])
        assert (pod["metadata"].get("annotations") or {}).get(SEGMENT_SIZE) == segment_size, pod["metadata"]["name"]
    conditions = {name: pytorchjob_conditions(plane, ns, name) for name in shapes}
    report(capsys, plane, f"training-operator v1.8.1 made {figures['pods']} pods of 2 PyTorchJobs; "
                          f"{figures['segmented']} Workers' labels = review's and i // S; status conditions "
                          f"{conditions} (Running needs a kubelet)" + gated_text(figures))


def pytorchjob_conditions(plane: Plane, ns: str, name: str) -> dict[str, str]:
    """The PyTorchJob's conditions once ``Created=True`` (waited for up to 60 s). training-operator
    v1.8.1 sets ``Created`` once, in its create handler; when the status update carrying it gets a
    409 Conflict (another writer of the PyTorchJob in between: gated, the controller's gang-state
    annotation), the condition is never written again. Then the 409 must be in its log, and the
    conditions are returned as they are (reported)."""
    def read() -> dict[str, str]:
        stored = plane.kube.get("pytorchjob", name, ns)
        return {c["type"]: c["status"] for c in stored.get("status", {}).get("conditions") or []}
    deadline = time.monotonic() + 60
    while read().get("Created") != "True" and time.monotonic() < deadline:
        time.sleep(2)
    found = read()
    if found.get("Created") != "True":
        log = plane.cluster.log_path("training-operator").read_text(errors="replace")
        conflict = f'pytorchjobs.kubeflow.org \\"{name}\\": the object has been modified'
        assert plane.gated and conflict in log, (name, found)
        found["Created"] = "lost to a 409 Conflict"
    return found


def gated_text(figures: dict[str, int]) -> str:
    if "segments" not in figures:
        return ""
    return (f"; every pod bound, {figures['segments']} segments each on one rack, "
            f"{figures['nodes used']} nodes in use cluster-wide, none over its GPUs")


# ------------------------------------------------------------------------------------------ JobSet

def jobset(name: str, replicas: int, parallelism: int, size: int, on_root: bool) -> dict:
    """A JobSet with one replicatedJob ``workers`` of ``replicas`` Indexed Jobs of ``parallelism``
    pods of 2 GPUs; the segment keys on the root or on the pod template (DESIGN.md §3b, §4)."""
    pod_template: dict = {"spec": {"restartPolicy": "Never", "containers": [gpu_container("worker")]}}
    obj: dict = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
                 "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": {
                     "parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                     "backoffLimit": 0, "template": pod_template}}}]}}
    if on_root:
        obj["metadata"]["annotations"] = keys(size)
    else:
        pod_template["metadata"] = {"annotations": keys(size)}
    return obj


def jobset_index(parallelism: dict[str, int]) -> IndexOf:
    """DESIGN.md §3b: ``job-index × parallelism + job-completion-index`` (label, else annotation)."""
    def index(labels: dict) -> tuple[str, int] | None:
        name = labels.get("jobset.sigs.k8s.io/jobset-name")
        if name not in parallelism:
            return None
        completion = labels.get("batch.kubernetes.io/job-completion-index")
        assert completion is not None, labels  # the Job controller labels every Indexed Job pod
        group = f"{name}/{labels['jobset.sigs.k8s.io/replicatedjob-name']}"
        return group, int(labels["jobset.sigs.k8s.io/job-index"]) * parallelism[name] + int(completion)
    return index


def test_jobset_pods(plane, tmp_path, capsys):
    """JobSet v0.8.2 (and kube-controller-manager's Job controller): 3 Jobs × parallelism 2 in
    segments of 2 (keys on the template; S = parallelism: one Job, one segment) and 1 Job ×
    parallelism 5 in segments of 2 (keys on the root: {0,1} {2,3} {4}, straddling no Job)."""
    plane.operator("jobset")
    ns = namespace(plane.kube, "op-jobset")
    shapes = {"js-template": (3, 2, 2, False), "js-root": (1, 5, 2, True)}
    for name, (replicas, parallelism, size, on_root) in shapes.items():
        obj = jobset(name, replicas, parallelism, size, on_root)
        obj["metadata"]["namespace"] = ns
        create(plane.kube, tmp_path, obj)
    pods = operator_pods(plane, ns, sum(r * p for r, p, _, _ in shapes.values()))
    index_of = jobset_index({name: shape[1] for name, shape in shapes.items()})
    figures = check_pods(plane, tmp_path, pods, index_of,
                         {f"{name}/workers": (r * p, s) for name, (r, p, s, _) in shapes.items()})
    assert all(SUBGROUP not in pod["metadata"]["labels"] for pod in pods)  # DESIGN.md §3b: never for JobSet
    statuses = {}
    for name, (replicas, _p, _s, _r) in shapes.items():
        jobs = json.loads(plane.kube.ok("get", "jobs", "-n", ns, "-l", f"jobset.sigs.k8s.io/jobset-name={name}",
                                        "-o", "json"))["items"]
        assert len(jobs) == replicas, name
        statuses[name] = plane.kube.get("jobset", name, ns).get("status", {}).get("replicatedJobsStatus")
    report(capsys, plane, f"JobSet v0.8.2 made {figures['pods']} pods of 2 JobSets; labels = review's and "
                          f"(job-index × parallelism + completion-index) // S; replicatedJobsStatus {statuses}"
                          + gated_text(figures))


# ----------------------------------------------------------------------------------------- Trainer

def trainjob(name: str, nodes: int, annotations: dict[str, str], spec_annotations: dict[str, str]) -> dict:
    """A TrainJob of the ``torch-distributed`` ClusterTrainingRuntime: ``nodes`` nodes of 2 GPUs."""
    obj: dict = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "metadata": {"name": name, "annotations": annotations},
                 "spec": {"runtimeRef": {"name": "torch-distributed"},
                          "trainer": {"numNodes": nodes, "resourcesPerNode": {"limits": {GPU: str(GPUS_PER_POD)}}}}}
    if spec_annotations:
        obj["spec"]["annotations"] = spec_annotations
    return obj


def trainer_crd_fields() -> set[str]:
    """The ``spec`` fields of Trainer v2.0.0's TrainJob CRD as the module ships it."""
    source = local_cluster.upstream_source("trainer")
    crd = yaml.safe_load((source / "manifests" / "base" / "crds" / "trainer.kubeflow.org_trainjobs.yaml").read_text())
    return set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def torch_with_initializer() -> dict:
    """``torch-distributed`` (Trainer v2.0.0 ``manifests/base/runtimes/torch_distributed.yaml``) with a
    ``dataset-initializer`` replicatedJob first, labelled as Trainer's initializer runtimes label theirs
    (``trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer``), without ``dependsOn`` so its
    trainer pods are made here too (no kubelet: no Job ever completes)."""
    def rjob(name: str, ancestor: str) -> dict:
        return {"name": name, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}},
            "spec": {"template": {"spec": {"containers": [{"name": name, "image": "busybox"}]}}}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-with-initializer"},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                     "template": {"spec": {"replicatedJobs": [rjob("dataset-initializer", "dataset-initializer"),
                                                              rjob("node", "trainer")]}}}}


def trainer_index(nodes: dict[str, int]) -> IndexOf:
    """The trainer pods' index (the ``node`` replicatedJob: job-index 0, completion index = node rank);
    an initializer pod is not segmented (None)."""
    def index(labels: dict) -> tuple[str, int] | None:
        name = labels.get("jobset.sigs.k8s.io/jobset-name")
        if name not in nodes or labels.get("jobset.sigs.k8s.io/replicatedjob-name") != "node":
            return None
        return f"{name}/node", int(labels["batch.kubernetes.io/job-completion-index"])
    return index


def test_trainer_trainjob_pods(plane, tmp_path, capsys):
    """Trainer v2.0.0 (its JobSet of one Job ``node`` × parallelism numNodes): the keys on the
    TrainJob root as users write them (DESIGN.md §3b, amended in issue 37). v2.0.0's TrainJob has no
    ``spec.runtimePatches`` (the apiserver prunes the webhook's entry) but copies ``spec.annotations``
    onto the JobSet root, where the webhook writes the resolved keys with
    ``segments.dev/trainer-job: node``: ``tj-root``'s 5 pods {0,1} {2,3} {4}; ``tj-init`` (a runtime
    with a ``dataset-initializer`` replicatedJob) 4 trainer pods {0,1} {2,3} and an initializer pod with
    no segment key and no gate; ``tj-spec`` (the keys written in ``spec.annotations`` by the user) as
    before. Gated: every trainer pod bound, each segment in one rack."""
    plane.operator("trainer")
    ns = namespace(plane.kube, "op-trainjob")
    assert "runtimePatches" not in trainer_crd_fields()
    create(plane.kube, tmp_path, torch_with_initializer())
    init = trainjob("tj-init", 4, keys(2), {})
    init["spec"]["runtimeRef"]["name"] = "torch-with-initializer"
    stored = {name: create(plane.kube, tmp_path, dict(obj, metadata=dict(obj["metadata"], namespace=ns)))
              for name, obj in (("tj-root", trainjob("tj-root", 5, keys(2), {})),
                                ("tj-spec", trainjob("tj-spec", 5, {}, keys(2))), ("tj-init", init))}
    assert "runtimePatches" not in stored["tj-root"]["spec"]  # pruned by v2.0.0's schema
    assert stored["tj-root"]["spec"]["annotations"] == {**keys(2), "segments.dev/trainer-job": "node"}
    assert plane.kube.get("jobset", "tj-root", ns)["metadata"]["annotations"] == {
        **keys(2), "segments.dev/trainer-job": "node"}
    pods = operator_pods(plane, ns, 15)
    initializers = [p for p in pods if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
                    == "dataset-initializer"]
    assert [p["metadata"]["name"].rsplit("-", 1)[0] for p in initializers] == ["tj-init-dataset-initializer-0-0"]
    assert [SEGMENT_INDEX in p["metadata"]["labels"] for p in initializers] == [False]
    assert [sorted(k for k in p["metadata"].get("annotations") or {} if k.startswith(("kai.scheduler/", "segments.dev/")))
            for p in initializers] == [[]]
    trainers = [p for p in pods if p not in initializers]
    figures = check_pods(plane, tmp_path, trainers, trainer_index({"tj-root": 5, "tj-spec": 5, "tj-init": 4}),
                         {"tj-root/node": (5, 2), "tj-spec/node": (5, 2), "tj-init/node": (4, 2)})
    assert figures["segmented"] == 14
    status = plane.kube.get("trainjob", "tj-root", ns).get("status", {})
    owner = plane.kube.get("jobset", "tj-root", ns)["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("TrainJob", "tj-root")
    report(capsys, plane, f"Trainer v2.0.0 made 3 JobSets, {len(pods)} pods; runtimePatches pruned, spec.annotations "
                          f"copied to the JobSet root: {figures['segmented']} trainer pods labelled as review and "
                          f"(completion-index) // 2, the initializer pod unsegmented; TrainJob status {status}"
                          + gated_text(figures))


# ----------------------------------------------------------------------------------------- KubeRay

def raycluster(name: str, group: str, replicas: int, hosts: int, size: int, on_root: bool) -> dict:
    """A RayCluster: a head (no GPU) and worker group ``group`` of ``replicas`` × ``hosts`` pods of
    2 GPUs; the segment keys on the root or on the group's template (DESIGN.md §3b, §4)."""
    template: dict = {"spec": {"containers": [gpu_container("ray-worker")]}}
    obj: dict = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
                 "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                              {"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}},
                          "workerGroupSpecs": [{"groupName": group, "replicas": replicas, "minReplicas": replicas,
                                                "maxReplicas": replicas, "numOfHosts": hosts, "rayStartParams": {},
                                                "template": template}]}}
    if on_root:
        obj["metadata"]["annotations"] = keys(size)
    else:
        template["metadata"] = {"annotations": keys(size)}
    return obj


def ray_index(hosts: dict[str, int]) -> IndexOf:
    """DESIGN.md §3b: ``worker-group-replica-index × numOfHosts + replica-host-index`` (0 when
    numOfHosts = 1); the head is not segmented."""
    def index(labels: dict) -> tuple[str, int] | None:
        if labels.get("ray.io/node-type") != "worker":
            return None
        group = f"{labels['ray.io/cluster']}/{labels['ray.io/group']}"
        replica = int(labels["ray.io/worker-group-replica-index"])
        return group, replica * hosts[group] + int(labels.get("ray.io/replica-host-index", "0"))
    return index


def test_kuberay_raycluster_pods(plane, tmp_path, capsys):
    """KubeRay v1.5.0 (``RayMultiHostIndexing`` on): 5 single-host replicas in segments of 2 (keys
    on the template: {0,1} {2,3} {4}) and 2 replicas of 2 hosts in segments of 2 (keys on the
    root: one replica, one segment)."""
    plane.operator("kuberay")
    ns = namespace(plane.kube, "op-ray")
    shapes = {"ray-template": ("gpu", 5, 1, 2, False), "ray-root": ("multi", 2, 2, 2, True)}
    for name, (group, replicas, hosts, size, on_root) in shapes.items():
        obj = raycluster(name, group, replicas, hosts, size, on_root)
        obj["metadata"]["namespace"] = ns
        create(plane.kube, tmp_path, obj)
    expected = sum(1 + replicas * hosts for _, replicas, hosts, _, _ in shapes.values())
    pods = operator_pods(plane, ns, expected)
    hosts_of = {f"{name}/{group}": h for name, (group, _r, h, _s, _o) in shapes.items()}
    figures = check_pods(plane, tmp_path, pods, ray_index(hosts_of),
                         {f"{name}/{group}": (r * h, s) for name, (group, r, h, s, _o) in shapes.items()})
    assert all(SUBGROUP not in pod["metadata"]["labels"] for pod in pods)  # DESIGN.md §3b: never for Ray
    desired = {name: plane.kube.get("raycluster", name, ns).get("status", {}).get("desiredWorkerReplicas")
               for name in shapes}
    assert desired == {name: r * h for name, (_g, r, h, _s, _o) in shapes.items()}
    states = {name: plane.kube.get("raycluster", name, ns).get("status", {}).get("state") for name in shapes}
    report(capsys, plane, f"KubeRay v1.5.0 made {figures['pods']} pods of 2 RayClusters; labels = review's and "
                          f"(replica-index × numOfHosts + host-index) // S; desiredWorkerReplicas {desired}, "
                          f"state {states} (ready needs running pods)" + gated_text(figures))
