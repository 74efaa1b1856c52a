"""The webhook as deployed, on the real kube-apiserver (marker ``cluster``; DESIGN.md §7, §9, §10, §11).

* pods created the way the training operator and the LWS controller create them get the labels
  ``segment-webhook review`` gives them, and under ``--gate-pods`` the scheduling gate, which the
  real apiserver accepts at CREATE (KEP-3838);
* §10: without the Topology CRD the webhook is ready and a workload naming a topology is denied
  with the §10 message; a Topology applied is accepted within seconds; deleting it brings the
  denial back;
* RBAC: ``serve`` runs with a token of deploy/'s ServiceAccount; that is what lets it watch
  Topologies, and it cannot list Secrets;
* the webhook down: what its configurations still let through, and what they block.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.conftest import load_example
from tests.support.cluster_support import ADMIN_FLAGS, DEPLOY_FLAGS, EXAMPLES, review, write_manifest

pytestmark = pytest.mark.cluster

SEGMENT_INDEX = "kai.scheduler/segment-index"
SUBGROUP = "kai.scheduler/subgroup-name"
GATE = "segments.dev/placement"
TOPOLOGY_CRD = "topologies.kai.scheduler"


@pytest.fixture(scope="module")
def topology(kubectl):
    kubectl.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
    kubectl.wait_for_webhook_topology("cluster-topology")


def stored_workload(kubectl, tmp_path, obj: dict, namespace: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    kubectl("create", "namespace", namespace)
    return json.loads(kubectl.ok("create", "-f", str(write_manifest(tmp_path, "workload", obj)), "-o", "json"))


def training_operator_pods(job: dict) -> list[dict]:
    """The pods Kubeflow's training-operator creates for a PyTorchJob: ``<job>-<type>-<i>``,
    labels ``training.kubeflow.org/{job-name,operator-name,replica-type,replica-index}``, the
    template's metadata and spec."""
    pods = []
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    for replica_type, spec in job["spec"]["pytorchReplicaSpecs"].items():
        template = spec["template"]
        for index in range(spec.get("replicas", 1)):
            metadata = copy.deepcopy(template.get("metadata", {}))
            metadata.update(name=f"{name}-{replica_type.lower()}-{index}", namespace=namespace)
            metadata.setdefault("labels", {}).update({
                "training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": replica_type.lower(),
                "training.kubeflow.org/replica-index": str(index)})
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                         "spec": copy.deepcopy(template["spec"])})
    return pods


def lws_pods(lws: dict) -> list[dict]:
    """The pods of group 0 as the LWS controller creates them (leader ``<lws>-0``, workers
    ``<lws>-0-<w>``): labels ``leaderworkerset.sigs.k8s.io/{name,group-index,worker-index}``,
    annotations ``…/size`` and, with a subGroupPolicy, ``…/subgroup-size`` (and on the leader
    ``…/subgroup-policy-type``)."""
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    template_spec = lws["spec"]["leaderWorkerTemplate"]
    size = template_spec["size"]
    policy = template_spec.get("subGroupPolicy") or {}
    pods = []
    for worker_index in range(size):
        template = template_spec.get("leaderTemplate") if worker_index == 0 else None
        template = copy.deepcopy(template or template_spec["workerTemplate"])
        metadata = template.get("metadata", {})
        metadata.update(name=name + "-0" + (f"-{worker_index}" if worker_index else ""), namespace=namespace)
        metadata.setdefault("labels", {}).update({
            "leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker_index)})
        annotations = metadata.setdefault("annotations", {})
        annotations["leaderworkerset.sigs.k8s.io/size"] = str(size)
        if "subGroupSize" in policy:
            annotations["leaderworkerset.sigs.k8s.io/subgroup-size"] = str(policy["subGroupSize"])
            if worker_index == 0:
                annotations["leaderworkerset.sigs.k8s.io/subgroup-policy-type"] = policy.get(
                    "subGroupPolicyType", "LeaderWorker")
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
    return pods


def create_pods_and_compare(kubectl, tmp_path, pods: list[dict], *review_flags: str) -> list[dict]:
    """Create each pod with kubectl; its labels and scheduling gates are those review gives."""
    stored = []
    for pod in pods:
        path = write_manifest(tmp_path, pod["metadata"]["name"], pod)
        offline = review("-f", str(path), "-o", "yaml", "--topology-file", str(EXAMPLES / "topology.yaml"),
                         *DEPLOY_FLAGS, *ADMIN_FLAGS, *review_flags)
        assert offline.returncode == 0, offline.stderr
        expected = yaml.safe_load(offline.stdout)
        real = kubectl("create", "-f", str(path), "-o", "json")
        assert real.returncode == 0, real.stderr
        created = json.loads(real.stdout)
        name = pod["metadata"]["name"]
        assert created["metadata"].get("labels") == expected["metadata"].get("labels"), name
        assert created["spec"].get("schedulingGates") == expected["spec"].get("schedulingGates"), name
        stored.append(created)
    return stored


def test_training_operator_and_lws_pods_get_their_labels(kubectl, topology, tmp_path, capsys):
    job = stored_workload(kubectl, tmp_path, load_example("pytorchjob-tp4.yaml"), "pods-pytorchjob")
    job_pods = create_pods_and_compare(kubectl, tmp_path, training_operator_pods(job))
    workers = [p for p in job_pods if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"]
    # DESIGN.md §7: worker i is in segment i // 4; KAI's leaf subgroup is worker-<k>
    assert [p["metadata"]["labels"][SEGMENT_INDEX] for p in workers] == [str(i // 4) for i in range(len(workers))]
    lws = stored_workload(kubectl, tmp_path, load_example("lws-segmented.yaml"), "pods-lws")
    group = create_pods_and_compare(kubectl, tmp_path, lws_pods(lws))
    # DESIGN.md §7 example R=5, S=2, LeaderWorker: {L,1,2} {3,4}
    assert [p["metadata"]["labels"][SEGMENT_INDEX] for p in group] == ["0", "0", "0", "1", "1"]
    with capsys.disabled():
        print(f"\ncluster: {len(job_pods) + len(group)} operator-made pods labelled as segment-webhook review labels them")


def test_gated_pods_are_accepted_by_the_apiserver(cluster, kubectl, topology, tmp_path):
    """``serve --gate-pods`` (DESIGN.md §9): the gate is added at CREATE and the real apiserver
    stores it; a pod that already names its node (spec.nodeName) is never gated."""
    cluster.run_webhook(gate_pods=True)
    try:
        job = load_example("pytorchjob-tp4.yaml")
        job["metadata"]["name"] = "gated"
        stored = stored_workload(kubectl, tmp_path, job, "pods-gated")
        pods = create_pods_and_compare(kubectl, tmp_path, training_operator_pods(stored), "--gate-pods")
        assert all(p["spec"]["schedulingGates"] == [{"name": GATE}] for p in pods)
        pinned = copy.deepcopy(training_operator_pods(stored)[0])
        pinned["metadata"]["name"] = "gated-pinned"
        pinned["spec"]["nodeName"] = "node-a"
        created = json.loads(kubectl.ok("create", "-f", str(write_manifest(tmp_path, "pinned", pinned)), "-o", "json"))
        assert "schedulingGates" not in created["spec"]
    finally:
        cluster.run_webhook(gate_pods=False)


def test_without_the_topology_crd_the_webhook_is_ready_and_says_how_to_install_it(cluster, kubectl, topology, capsys):
    """DESIGN.md §10 for real: delete the CRD, the webhook stays ready and denies with the install
    text; the CRD and a Topology applied are accepted within seconds; deleting the Topology denies again."""
    crd_file = EXAMPLES.parent / "crds" / "kai.scheduler_topologies.yaml"
    kubectl.ok("delete", "crd", TOPOLOGY_CRD, "--wait=true")
    try:
        kubectl.wait_for_webhook_topology("cluster-topology", present=False)
        assert cluster.https_ok(cluster.state["ports"]["segment-webhook"], "/readyz")
        denied = kubectl.dry_run_names_topology("cluster-topology")
        assert "no Topology exists: the cluster has no Topology CRD (topologies.kai.scheduler)" in denied.stderr
        assert "fix: install the CRD" in denied.stderr
        # pods are unaffected
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        assert kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(pod)).returncode == 0
    finally:
        kubectl.ok("apply", "--server-side", "-f", str(crd_file))
        kubectl.ok("wait", "--for", "condition=Established", f"crd/{TOPOLOGY_CRD}", "--timeout", "60s")
        kubectl.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
    learned = kubectl.wait_for_webhook_topology("cluster-topology")
    kubectl.ok("delete", "topology", "cluster-topology")
    forgot = kubectl.wait_for_webhook_topology("cluster-topology", present=False)
    denied = kubectl.dry_run_names_topology("cluster-topology")
    assert '"cluster-topology": no Topology has this name (rule unknown-topology)' in denied.stderr
    kubectl.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
    kubectl.wait_for_webhook_topology("cluster-topology")
    with capsys.disabled():
        print(f"\ncluster: §10 Topology CRD re-created: accepted after {learned:.1f} s; Topology deleted: "
              f"denied after {forgot:.1f} s")


def test_serve_runs_with_the_service_account_of_deploy(cluster, kubectl):
    """The kubeconfig serve uses holds a token of deploy/'s ServiceAccount: it may watch
    Topologies (the tests above depend on it) and may not list Secrets."""
    webhook_kubeconfig = cluster.dir / "webhook" / "kubeconfig"
    identity = json.loads(kubectl.ok("auth", "whoami", "-o", "json", kubeconfig=webhook_kubeconfig))
    assert identity["status"]["userInfo"]["username"] == \
        "system:serviceaccount:segment-webhook-system:segment-webhook"
    assert kubectl.ok("auth", "can-i", "watch", "topologies.kai.scheduler", kubeconfig=webhook_kubeconfig).strip() == "yes"
    secrets = kubectl("get", "secrets", "-A", kubeconfig=webhook_kubeconfig)
    assert secrets.returncode == 1 and "Forbidden" in secrets.stderr
    assert kubectl("auth", "can-i", "list", "secrets", kubeconfig=webhook_kubeconfig).stdout.strip() == "no"


def test_with_the_webhook_down_only_opted_in_objects_are_blocked(cluster, kubectl, topology, tmp_path, capsys):
    """failurePolicy Fail with matchConditions (docs/tasks/operations.md "Failure policy"), with serve stopped."""
    kubectl("create", "namespace", "outage")
    tp4 = load_example("pytorchjob-tp4.yaml")
    tp4["metadata"]["namespace"] = "outage"
    finalized = copy.deepcopy(tp4)
    finalized["metadata"].update(name="finalized", finalizers=["example.com/keep"])
    kubectl.ok("create", "-f", str(write_manifest(tmp_path, "finalized", finalized)))
    cluster.stop_component("segment-webhook")
    try:
        allowed, blocked = {}, {}
        plain = copy.deepcopy(tp4)
        plain["metadata"]["name"] = "no-keys"
        for template in plain["spec"]["pytorchReplicaSpecs"].values():
            template["template"].get("metadata", {}).pop("annotations", None)
        allowed["PyTorchJob without kai.scheduler keys"] = kubectl(
            "create", "-f", str(write_manifest(tmp_path, "plain", plain)))
        lws = load_example("lws-segmented.yaml")
        lws["metadata"].update(name="lws-no-keys", namespace="outage")
        lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"].pop("annotations")
        allowed["LWS without kai.scheduler keys (subGroupSize 2)"] = kubectl(
            "create", "-f", str(write_manifest(tmp_path, "lws", lws)))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "outage",
                                                                "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
        allowed["a Pod that no training operator made"] = kubectl(
            "create", "-f", str(write_manifest(tmp_path, "web", pod)))
        system_pod = copy.deepcopy(training_operator_pods({**tp4, "metadata": {"name": "sys", "namespace": "kube-system"}})[1])
        allowed["a training pod in kube-system"] = kubectl(
            "create", "-f", str(write_manifest(tmp_path, "system", system_pod)))
        kubectl.ok("delete", "pytorchjob", "finalized", "-n", "outage", "--wait=false")
        allowed["removing the finalizer of a PyTorchJob being deleted"] = kubectl(
            "patch", "pytorchjob", "finalized", "-n", "outage", "--type=json",
            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
        blocked["PyTorchJob with segment keys"] = kubectl("create", "-f", str(write_manifest(tmp_path, "tp4", tp4)))
        typo = copy.deepcopy(plain)
        typo["metadata"].update(name="typo", annotations={"kai.schedular/topology": "cluster-topology"})
        blocked["PyTorchJob with a misspelled key"] = kubectl(
            "create", "-f", str(write_manifest(tmp_path, "typo", typo)))
        worker_pod = training_operator_pods({**tp4, "metadata": {"name": "w", "namespace": "outage"}})[1]
        blocked["a worker pod of the training operator"] = kubectl(
            "create", "-f", str(write_manifest(tmp_path, "worker", worker_pod)))
        for what, result in allowed.items():
            assert result.returncode == 0, f"{what} was blocked by the webhook outage: {result.stderr}"
        for what, result in blocked.items():
            assert result.returncode == 1 and "failed calling webhook" in result.stderr, f"{what}: {result.stderr}"
    finally:
        cluster.run_webhook(gate_pods=False)
    with capsys.disabled():
        print(f"\ncluster: webhook down: {len(allowed)} kinds of change still go through, {len(blocked)} are blocked")


def test_a_malformed_workload_is_named_by_the_webhook_not_by_cel(kubectl, topology, tmp_path):
    """The workload condition type-checks what it reads (new-user trial: ``pytorchReplicaSpecs: [1, 2]``
    with a placement key got kube-apiserver's 'expression … resulted in error: index out of bounds')."""
    job = load_example("pytorchjob-tp4.yaml")
    job["metadata"].update(name="malformed", annotations={"kai.scheduler/topology": "cluster-topology"})
    job["spec"]["pytorchReplicaSpecs"] = [1, 2]
    real = kubectl("create", "-f", str(write_manifest(tmp_path, "malformed", job)))
    assert real.returncode == 1
    assert "spec.pytorchReplicaSpecs = [1, 2]" in real.stderr and "(rule malformed-object)" in real.stderr
    assert "expression" not in real.stderr
