"""DESIGN.md §11, first bullet, on the real kube-apiserver and kubectl (marker ``cluster``).

Every sample manifest and every denied manifest of the test suite is created with the real kubectl
and compared with ``segment-webhook review`` of the same file: the stored object carries exactly
the values review's patch writes, re-reviewing the stored object gives an empty patch, a denial
reaches kubectl's stderr as review prints it, every warning as a ``Warning:`` line, and an UPDATE
through ``kubectl replace`` and ``kubectl apply`` gives what ``review --operation UPDATE`` gives.
The counts are printed (``-s`` shows them; CI's log keeps them).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonpatch
import jsonpointer
import pytest
import yaml

from tests.conftest import SIZE, load_example
from tests.support import paths
from tests.support.cluster_support import ADMIN_FLAGS, DEPLOY_FLAGS, EXAMPLES, response_patch, review, write_manifest
from tests.unit.admission.test_core_rules import MESSAGES, TRIGGERS

pytestmark = pytest.mark.cluster

TOPOLOGY_FILE = EXAMPLES / "topology.yaml"
#: The second Topology of the README's conflicting-topology row (test_core_rules.GPU_FABRIC).
GPU_FABRIC = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "gpu-fabric"},
              "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-rack"},
                                  {"nodeLabel": "kubernetes.io/hostname"}]}}
SAMPLES = ("pytorchjob-tp4.yaml", "pytorchjob-zone-and-rack.yaml", "lws-segmented.yaml",
           "distributedworkload-native.yaml")
#: Server-set metadata that a re-review must not care about (and kubectl replace needs gone).
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def warning_examples() -> dict[str, dict]:
    """The README's 'allowed with a warning' rows that a PyTorchJob or LWS sample shows."""
    tp4 = load_example("pytorchjob-tp4.yaml")
    partial = copy.deepcopy(tp4)
    partial["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 10
    master_size = copy.deepcopy(tp4)
    master_size["spec"]["pytorchReplicaSpecs"]["Master"]["template"].setdefault("metadata", {}).setdefault(
        "annotations", {})[SIZE] = "4"
    lws = load_example("lws-segmented.yaml")
    lws["spec"]["leaderWorkerTemplate"]["size"] = 8
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"][SIZE] = "4"
    unknown_key = copy.deepcopy(tp4)
    unknown_key["metadata"].setdefault("annotations", {})["kai.scheduler/gang-timeout"] = "5m"
    return {"partial-last-segment": partial, "master-segment-size": master_size, "lws-subgroupsize-set": lws,
            "unknown-kai-key": unknown_key}


@pytest.fixture(scope="module")
def topologies(kubectl):
    """cluster-topology (shared/examples) in the cluster; the same file for review."""
    kubectl.ok("apply", "-f", str(TOPOLOGY_FILE))
    kubectl.wait_for_webhook_topology("cluster-topology")
    return TOPOLOGY_FILE


@pytest.fixture
def with_gpu_fabric(kubectl, topologies, tmp_path):
    """gpu-fabric in the cluster as well, for the README's conflicting-topology row; the file with
    both Topologies for review. Deleted afterwards (the README's other messages list one name)."""
    path = tmp_path / "both-topologies.yaml"
    path.write_text(TOPOLOGY_FILE.read_text() + "\n---\n" + yaml.safe_dump(GPU_FABRIC))
    kubectl.ok("apply", "-f", str(path))
    kubectl.wait_for_webhook_topology("gpu-fabric")
    yield path
    kubectl.ok("delete", "topology", "gpu-fabric")
    kubectl.wait_for_webhook_topology("gpu-fabric", present=False)


def review_flags(topologies: Path) -> tuple[str, ...]:
    return ("--topology-file", str(topologies), *DEPLOY_FLAGS, *ADMIN_FLAGS)


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Warning: ")]


def strip_server_fields(obj: dict) -> dict:
    clean = copy.deepcopy(obj)
    for field in SERVER_FIELDS:
        clean["metadata"].pop(field, None)
    clean.pop("status", None)
    return clean


def namespaced(kubectl, obj: dict, namespace: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    kubectl("create", "namespace", namespace)  # exists already: fine
    return obj


def assert_written_values_stored(patch: list[dict], reviewed: dict, stored: dict, what: str,
                                 pruned: tuple[str, ...] = ()) -> int:
    """Each value review's patch writes is in the stored object at the same place, but for the
    ``pruned`` paths, which the CRD under test lacks (absent when stored); returns the count."""
    for operation in patch:
        pointer = operation["path"]
        if pointer in pruned:
            assert jsonpointer.resolve_pointer(stored, pointer, None) is None, f"{what}: {pointer} was not pruned"
            continue
        if operation["op"] == "remove":
            assert jsonpointer.resolve_pointer(stored, pointer, None) is None, f"{what}: {pointer} not removed"
            continue
        expected = jsonpointer.resolve_pointer(reviewed, pointer)
        actual = jsonpointer.resolve_pointer(stored, pointer, "<absent>")
        if isinstance(expected, dict) and isinstance(actual, dict):
            # a whole map added (e.g. annotations): every key written is stored as written
            assert {key: actual.get(key, "<absent>") for key in expected} == expected, f"{what}: {pointer}"
        else:
            assert actual == expected, f"{what}: {pointer}: stored {actual!r}, review wrote {expected!r}"
    return len(patch)


def create_and_compare(kubectl, tmp_path: Path, topologies: Path, name: str, obj: dict,
                       pruned: tuple[str, ...] = ()) -> dict:
    """kubectl create vs review of one manifest; returns the stored object. ``pruned``: paths the
    patch writes that the CRD under test lacks (:func:`assert_written_values_stored`)."""
    path = write_manifest(tmp_path, name, obj)
    answer = review("-f", str(path), "-o", "json", *review_flags(topologies))
    assert answer.returncode == 0, f"{name}: review denied it: {answer.stderr}"
    patch = response_patch(answer.stdout)
    reviewed = jsonpatch.apply_patch(obj, patch)
    created = kubectl("create", "-f", str(path), "-o", "json")
    assert created.returncode == 0, f"{name}: kubectl create failed: {created.stderr}"
    assert warnings_of(created.stderr) == warnings_of(answer.stderr), name
    stored = json.loads(created.stdout)
    assert patch, f"{name}: review wrote nothing (every sample opts in)"
    assert_written_values_stored(patch, reviewed, stored, name, pruned)
    # re-review of the stored object: CREATE and UPDATE (stored -> stored) give an empty patch
    stored_path = write_manifest(tmp_path, f"{name}-stored", strip_server_fields(stored))
    for extra in ((), ("--operation", "UPDATE", "--old", str(stored_path))):
        again = review("-f", str(stored_path), "-o", "json", *extra, *review_flags(topologies))
        assert again.returncode == 0, f"{name}: re-review denied: {again.stderr}"
        assert response_patch(again.stdout) == [], f"{name}: re-review {extra or 'CREATE'} patched the stored object"
    return stored


def test_samples_are_stored_as_review_shows(kubectl, topologies, tmp_path, capsys):
    compared = 0
    for sample in SAMPLES:
        obj = namespaced(kubectl, load_example(sample), "samples")
        obj["metadata"]["name"] = Path(sample).stem  # two samples share a name
        create_and_compare(kubectl, tmp_path, topologies, Path(sample).stem, obj)
        compared += 1
    for name, obj in warning_examples().items():
        obj = namespaced(kubectl, obj, "samples")
        obj["metadata"]["name"] = name
        create_and_compare(kubectl, tmp_path, topologies, name, obj)
        compared += 1
    with capsys.disabled():
        print(f"\ncluster: {compared} sample manifests created with kubectl agree with segment-webhook review "
              f"(stored values, warnings, empty re-review)")
    assert compared == len(SAMPLES) + 4


def gated_rules() -> set[str]:
    """Rules whose README example is denied only under ``--gate-pods`` (a third trigger item)."""
    return {rule_id for rule_id, trigger in TRIGGERS.items() if len(trigger()) == 3 and trigger()[2].gate_pods}


def denial_agrees(kubectl, topologies: Path, tmp_path: Path, rule_id: str, *flags: str) -> None:
    """Create (or, with a stored object, replace) the rule's README example with kubectl and
    with review (``flags`` added): the same exit status and stderr, ending in the README's message."""
    obj, old, *_settings = TRIGGERS[rule_id]()
    namespace = f"denied-{rule_id}"[:63]
    obj = namespaced(kubectl, obj, namespace)
    path = write_manifest(tmp_path, rule_id, obj)
    if old is None:
        real = kubectl("create", "-f", str(path))
        offline = review("-f", str(path), *review_flags(topologies), *flags)
    else:
        old = namespaced(kubectl, old, namespace)
        old_path = write_manifest(tmp_path, f"{rule_id}-old", old)
        stored = json.loads(kubectl.ok("create", "-f", str(old_path), "-o", "json"))
        stored_path = write_manifest(tmp_path, f"{rule_id}-stored", strip_server_fields(stored))
        real = kubectl("replace", "-f", str(path))
        offline = review("-f", str(path), "--operation", "UPDATE", "--old", str(stored_path),
                         *review_flags(topologies), *flags)
    assert real.returncode == 1 and offline.returncode == 1, f"{rule_id}: {real.stderr} / {offline.stderr}"
    assert real.stderr.strip() == offline.stderr.strip(), rule_id
    assert real.stderr.strip().endswith(MESSAGES[rule_id]), rule_id


def test_conflicting_topology_denial_with_a_second_topology(kubectl, with_gpu_fabric, tmp_path):
    denial_agrees(kubectl, with_gpu_fabric, tmp_path, "conflicting-topology")


MANIFESTS = paths.DATA / "manifests"
#: The DESIGN.md §3b kinds' sample workloads (tests/data/manifests; their CRDs from ../shared/crds).
NEW_KIND_SAMPLES = ("jobset-workers.yaml", "mpijob-launcher-as-worker.yaml", "raycluster-multihost.yaml",
                    "trainjob-torch.yaml")
#: Pods as JobSet + the Job controller, mpi-operator and KubeRay create them.
NEW_KIND_PODS = ("jobset-worker-pod.yaml", "mpijob-worker-pod.yaml", "raycluster-worker-pod.yaml")


def ray_wrapped(kind: str) -> dict:
    """The RayCluster sample inside a RayJob (spec.rayClusterSpec) or RayService (spec.rayClusterConfig)."""
    cluster = yaml.safe_load((MANIFESTS / "raycluster-multihost.yaml").read_text())
    field = {"RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}[kind]
    return {"apiVersion": "ray.io/v1", "kind": kind,
            "metadata": {"name": f"nvl72-{kind.lower()}", "namespace": "team-a",
                         "annotations": cluster["metadata"]["annotations"]},
            "spec": {field: cluster["spec"]}}


def test_new_kinds_are_stored_as_review_shows(kubectl, topologies, tmp_path, capsys):
    """One object of each DESIGN.md §3b kind (and a RayJob around the Ray sample; ../shared/crds has
    no RayService CRD, so no RayService), and a pod of each as its controller makes it: kubectl on
    the real apiserver equals review."""
    kubectl("create", "namespace", "team-a")
    compared = []
    for sample in NEW_KIND_SAMPLES:
        obj = yaml.safe_load((MANIFESTS / sample).read_text())
        # ../shared/crds' TrainJob is Trainer v2.2+'s: runtimePatches, no spec.annotations (which the
        # webhook writes too, for v2.0/v2.1: docs/decisions/trainjob-both-fields.md)
        pruned = ("/spec/annotations",) if obj["kind"] == "TrainJob" else ()
        create_and_compare(kubectl, tmp_path, topologies, Path(sample).stem, obj, pruned)
        compared.append(obj["kind"])
    for kind in ("RayJob",):
        create_and_compare(kubectl, tmp_path, topologies, kind.lower(), ray_wrapped(kind))
        compared.append(kind)
    for sample in NEW_KIND_PODS:
        path = MANIFESTS / sample
        offline = review("-f", str(path), "-o", "yaml", *review_flags(topologies))
        assert offline.returncode == 0, offline.stderr
        real = kubectl("create", "-f", str(path), "-o", "json")
        assert real.returncode == 0, real.stderr
        expected, created = yaml.safe_load(offline.stdout), json.loads(real.stdout)
        assert created["metadata"]["labels"] == expected["metadata"]["labels"], sample
        assert "kai.scheduler/segment-index" in created["metadata"]["labels"], sample
        assert "kai.scheduler/subgroup-name" not in created["metadata"]["labels"], sample  # DESIGN.md §3b
        assert warnings_of(real.stderr) == warnings_of(offline.stderr), sample
        compared.append(f"{created['metadata']['name']} (Pod)")
    with capsys.disabled():
        print(f"\ncluster: {len(compared)} objects of the §3b kinds agree with segment-webhook review: "
              f"{', '.join(compared)}")


def test_denials_under_gate_pods(cluster, kubectl, topologies, tmp_path):
    """The rules that deny only under ``serve --gate-pods`` (LWS LeaderReady with segments, §3b)."""
    assert gated_rules() == {"lws-leader-ready-segments"}
    cluster.run_webhook(gate_pods=True)
    try:
        for rule_id in sorted(gated_rules()):
            denial_agrees(kubectl, topologies, tmp_path, rule_id, "--gate-pods")
    finally:
        cluster.run_webhook(gate_pods=False)


def test_every_denial_reaches_kubectl_as_review_prints_it(kubectl, topologies, tmp_path, capsys):
    """Each rule's README example (tests/unit/admission/test_core_rules.py TRIGGERS): kubectl's stderr is review's
    (conflicting-topology, which needs a second Topology, and the --gate-pods rules in the tests above)."""
    agreed = ["conflicting-topology", *sorted(gated_rules())]
    # trainjob-spec-annotation-differs is about Trainer v2.0/v2.1's spec.annotations; ../shared/crds'
    # TrainJob is v2.2+'s, which has no such field: kubectl's strict decoding refuses it before
    # admission, so the rule cannot be reached on this cluster (it is reached on a v2.0 CRD).
    unreachable = {"trainjob-spec-annotation-differs"}
    for rule_id in sorted(unreachable):
        obj, *_ = TRIGGERS[rule_id]()
        obj = namespaced(kubectl, obj, f"denied-{rule_id}"[:63])
        real = kubectl("create", "-f", str(write_manifest(tmp_path, rule_id, obj)))
        assert real.returncode == 1 and 'strict decoding error: unknown field "spec.annotations"' in real.stderr, \
            real.stderr
        agreed.append(rule_id)
    for rule_id in sorted(set(TRIGGERS) - set(agreed)):
        denial_agrees(kubectl, topologies, tmp_path, rule_id)
        agreed.append(rule_id)
    with capsys.disabled():
        print(f"\ncluster: {len(agreed)} denied manifests: kubectl's error equals segment-webhook review's "
              f"({', '.join(sorted(agreed))})")
    assert len(agreed) == len(TRIGGERS)


def scaled(obj: dict, kind: str, replicas: int) -> dict:
    obj = copy.deepcopy(obj)
    if kind == "PyTorchJob":
        obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    elif kind == "LeaderWorkerSet":
        obj["spec"]["leaderWorkerTemplate"]["size"] = replicas
    else:
        obj["spec"]["workers"] = replicas
    return obj


@pytest.mark.parametrize("verb", ["replace", "apply"])
@pytest.mark.parametrize("sample, replicas", [
    ("pytorchjob-tp4.yaml", 8),
    ("lws-segmented.yaml", 3),
    ("distributedworkload-native.yaml", 16),
])
def test_update_through_kubectl_is_what_review_update_gives(kubectl, topologies, tmp_path, verb, sample, replicas):
    """Scale each kind with ``kubectl replace`` / ``kubectl apply`` of the edited manifest: the
    stored object and the warnings are those of ``review --operation UPDATE --old <stored>``."""
    manifest = namespaced(kubectl, load_example(sample), f"update-{verb}")
    kind = manifest["kind"]
    path = write_manifest(tmp_path, "created", manifest)
    first = kubectl("apply" if verb == "apply" else "create", "-f", str(path), "-o", "json")
    assert first.returncode == 0, first.stderr
    stored = json.loads(first.stdout)
    stored_path = write_manifest(tmp_path, "stored", strip_server_fields(stored))
    edited = scaled(manifest, kind, replicas)
    edited_path = write_manifest(tmp_path, "edited", edited)
    # What the apiserver hands the webhook: replace sends the file; apply merges it into the stored object.
    sent = edited if verb == "replace" else scaled(strip_server_fields(stored), kind, replicas)
    sent_path = write_manifest(tmp_path, "sent", sent)
    offline = review("-f", str(sent_path), "--operation", "UPDATE", "--old", str(stored_path), "-o", "json",
                     *review_flags(topologies))
    real = kubectl(verb, "-f", str(edited_path), "-o", "json")
    assert (real.returncode == 0) == (offline.returncode == 0), f"{real.stderr} / {offline.stderr}"
    assert warnings_of(real.stderr) == warnings_of(offline.stderr)
    if offline.returncode != 0:
        return
    updated = json.loads(real.stdout)
    patch = response_patch(offline.stdout)
    assert_written_values_stored(patch, jsonpatch.apply_patch(sent, patch), updated, f"{kind} {verb}")
    # every key the webhook wrote at CREATE is still there after the update
    create_patch = response_patch(review("-f", str(path), "-o", "json", *review_flags(topologies)).stdout)
    assert_written_values_stored([op for op in create_patch if "annotations" in op["path"]],
                                 jsonpatch.apply_patch(manifest, create_patch), updated, f"{kind} {verb} keeps keys")
