"""As installed (issue 35, DESIGN.md §11): a real node and the Helm chart on it.

Marker ``node`` (``.ci/run`` runs ``-m node`` after the cluster suite): ``up --kubelet`` adds a
node run by a real kubelet with containerd, runc and the CNI bridge plugin (hack/node.py). The
image ``hack/image.sh build`` makes (built here when podman lacks it) and the pause image built
from hack/go/pause are imported into containerd (no registry is reachable). Checked literally:
the Node is Ready; a plain pod runs to completion; ``helm install`` of deploy/helm/segment-webhook
(self-signed certificates, the controller on) runs the webhook pods non-root with a read-only
root filesystem (as the kernel sees their processes) and Ready by their probes; kube-apiserver
calls them through the chart's Service (endpoint routing: the webhook configurations name the
Service, no url); a denial reaches kubectl exactly as ``segment-webhook review`` prints it; the
controller pod holds its Lease; ``down`` leaves no process, mount, namespace or interface.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import node as node_tool  # noqa: E402  (hack/node.py)
from tests.support import node_support  # noqa: E402
from tests.support.cluster_support import ADMIN_FLAGS, DEPLOY_FLAGS, EXAMPLES, review, wait_for, write_manifest  # noqa: E402
from tests.support.node_support import DENIED_RULE, NAMESPACE, Load, helm_install  # noqa: E402
from tests.unit.admission.test_core_rules import MESSAGES, TRIGGERS  # noqa: E402

pytestmark = pytest.mark.node

TOPOLOGY_FILE = EXAMPLES / "topology.yaml"

# this module's control plane and node, the kubectl and the imported image (tests/support/node_support.py)
node_cluster, kubectl, webhook_image = node_support.node_cluster, node_support.kubectl, node_support.webhook_image


def test_the_node_is_ready_and_runs_a_pod_to_completion(node_cluster, kubectl, webhook_image, capsys):
    state = node_cluster.state["node"]
    node = kubectl.get("node", "local-node-0", namespace="default")
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert not [t for t in node["spec"].get("taints") or [] if t["key"] == "node.kubernetes.io/not-ready"]
    # k8s.io/kubernetes v1.37.2 (hack/go/kubelet), Debian bookworm's containerd 1.6.20
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6.20")
    assert {a["type"]: a["address"] for a in node["status"]["addresses"]}["InternalIP"] == state["gateway"]
    subnet = ipaddress.ip_network(state["subnet"])
    assert isinstance(subnet, ipaddress.IPv4Network) and subnet.subnet_of(ipaddress.IPv4Network("10.244.0.0/16"))

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runs-to-completion", "namespace": "default"},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": webhook_image, "imagePullPolicy": "Never",
               "command": ["python3", "-c", "print('done')"]}]}}
    kubectl.ok("create", "-f", "-", input_text=json.dumps(pod))
    finished = wait_for("pod runs-to-completion Succeeded", lambda: (
        lambda p: p if p["status"].get("phase") in ("Succeeded", "Failed") else None)(
        kubectl.get("pod", "runs-to-completion")), timeout=300)
    assert finished["status"]["phase"] == "Succeeded", finished["status"]
    assert finished["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert finished["spec"]["nodeName"] == "local-node-0"
    assert ipaddress.ip_address(finished["status"]["podIP"]) in subnet
    with capsys.disabled():
        print(f"\nnode: up --kubelet in {node_cluster.state['test_up_seconds']} s (node {state['seconds']} s of it); "
              f"pod runs-to-completion Succeeded at {finished['status']['podIP']} in {state['subnet']} on {state['bridge']}")


def _process_facts(node_dir: Path, container_id: str) -> tuple[str, str]:
    """(the Uid line of /proc/PID/status, the mount options of its root) of a container's process."""
    pid = node_tool.ctr(node_dir, "tasks", "list").stdout
    row = next(line.split() for line in pid.splitlines() if line.split()[:1] == [container_id])
    proc = Path("/proc") / row[1]
    uid = next(line for line in (proc / "status").read_text().splitlines() if line.startswith("Uid:"))
    root = next(line.split() for line in (proc / "mountinfo").read_text().splitlines() if line.split()[4] == "/")
    return " ".join(uid.split()[1:]), root[5]


def test_helm_install_runs_the_webhook_behind_its_service(node_cluster, kubectl, webhook_image, tmp_path, capsys):
    state = node_cluster.state["node"]
    node_dir = Path(state["dir"])
    installed = helm_install(node_cluster, kubectl, webhook_image, tmp_path / "certs", TOPOLOGY_FILE)
    wide = kubectl.ok("get", "pods", "-n", NAMESPACE, "-o", "wide")

    pods = json.loads(kubectl.ok("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    webhooks = [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component") == "admission-webhook"]
    controllers = [p for p in pods if p["metadata"]["name"].startswith("segment-webhook-controller-")]
    assert len(webhooks) == 2 and len(controllers) == 2, wide
    for pod in webhooks:
        assert pod["status"]["phase"] == "Running"
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        container = pod["spec"]["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["runAsNonRoot"] is True
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(state["subnet"])
        # as the kernel sees the container's process: uid 65532 (real, effective, saved, fs), root read-only
        container_id = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
        uid, root_options = _process_facts(node_dir, container_id)
        assert uid == "65532 65532 65532 65532"
        assert root_options.split(",")[0] == "ro"

    # the Service's endpoints are the webhook pods; the configurations name the Service, no url
    slices = json.loads(kubectl.ok("get", "endpointslices", "-n", NAMESPACE, "-l",
                                   "kubernetes.io/service-name=segment-webhook", "-o", "json"))["items"]
    endpoints = sorted(address for s in slices for e in s.get("endpoints") or [] for address in e["addresses"])
    assert endpoints == sorted(p["status"]["podIP"] for p in webhooks)
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        configuration = kubectl.get(kind, "segment-webhook")
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"]["service"] == {"name": "segment-webhook", "namespace": NAMESPACE,
                                                       "path": hook["clientConfig"]["service"]["path"], "port": 443}
            assert "url" not in hook["clientConfig"]

    # a denial through the Service, as kubectl prints it = as review prints it
    obj, old, *_settings = TRIGGERS[DENIED_RULE]()
    assert old is None
    obj["metadata"]["namespace"] = "default"
    path = write_manifest(tmp_path, DENIED_RULE, obj)
    real = kubectl("create", "-f", str(path))
    offline = review("-f", str(path), "--topology-file", str(TOPOLOGY_FILE), *DEPLOY_FLAGS, *ADMIN_FLAGS)
    assert real.returncode == 1 and offline.returncode == 1, (real.stderr, offline.stderr)
    assert real.stderr.strip() == offline.stderr.strip()
    assert real.stderr.strip().endswith(MESSAGES[DENIED_RULE])

    # the controller runs as a pod under its ServiceAccount and holds its Lease
    for pod in controllers:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["serviceAccountName"] == "segment-webhook-controller"
    names = {p["metadata"]["name"] for p in controllers}

    def lease_holder() -> str | None:
        found = kubectl("get", "lease", "segment-webhook-controller", "-n", NAMESPACE, "-o", "json")
        holder = json.loads(found.stdout)["spec"].get("holderIdentity") if found.returncode == 0 else None
        return holder if holder in names else None

    holder = wait_for("the controller's Lease held by a controller pod", lease_holder, timeout=120)
    time.sleep(10)  # the controller exited within seconds of its start when it could not keep its metrics
    now = json.loads(kubectl.ok("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=controller",
                                "-o", "json"))["items"]
    restarts = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"] for p in now}
    assert restarts == dict.fromkeys(names, 0)
    with capsys.disabled():
        print(f"\nnode: helm install --wait of the chart (self-signed, controller on) in {installed:.1f} s; "
              f"Lease held by {holder}\n{wide}\nkubectl create -f {DENIED_RULE}.yaml:\n{real.stderr.strip()}")


def _webhook_pods(kubectl) -> list[dict]:
    pods = json.loads(kubectl.ok("get", "pods", "-n", NAMESPACE, "-l",
                                 "app.kubernetes.io/component=admission-webhook", "-o", "json"))["items"]
    return [p for p in pods if "deletionTimestamp" not in p["metadata"]]


def test_a_rollout_restart_loses_no_review(node_cluster, kubectl, capsys):
    """Issue 35 item 3, DESIGN.md §10: `kubectl rollout restart` of the webhook under load: no
    create that would pass fails, no denial is lost, nothing else comes back."""
    before = {p["metadata"]["name"] for p in _webhook_pods(kubectl)}
    assert len(before) == 2
    with Load(node_cluster) as load:
        time.sleep(3)
        started = time.monotonic()
        kubectl.ok("rollout", "restart", "deployment/segment-webhook", "-n", NAMESPACE)
        kubectl.ok("rollout", "status", "deployment/segment-webhook", "-n", NAMESPACE, "--timeout", "600s", timeout=660)
        wait_for("the old webhook pods gone", lambda: not before & {
            p["metadata"]["name"] for p in json.loads(kubectl.ok("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]},
            timeout=180)
        rolled = time.monotonic() - started
        time.sleep(3)
    after = {p["metadata"]["name"] for p in _webhook_pods(kubectl)}
    assert after and not after & before
    with capsys.disabled():
        print(f"\nnode: rollout restart under load ({rolled:.0f} s until the old pods were gone): {load.counts}; "
              f"unexpected: {load.unexpected}")
    assert load.counts["good refused"] == 0 and load.counts["denial lost"] == 0 and load.counts["other"] == 0, \
        load.unexpected
    assert load.counts["admitted"] > 0 and load.counts["denied"] > 0


def test_a_killed_webhook_pod_is_what_the_failure_policy_says(node_cluster, kubectl, capsys):
    """Issue 35 item 3: SIGKILL of one webhook container's process under load. docs/tasks/operations.md:
    failurePolicy Fail, two replicas; what kube-apiserver could not deliver is a refused create,
    never an admitted bad one. Counts are printed; a lost denial fails the test."""
    node_dir = Path(node_cluster.state["node"]["dir"])
    victim = _webhook_pods(kubectl)[0]
    container_id = victim["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    rows = node_tool.ctr(node_dir, "tasks", "list").stdout.splitlines()
    pid = int(next(line.split()[1] for line in rows if line.split()[:1] == [container_id]))
    with Load(node_cluster) as load:
        time.sleep(3)
        os.kill(pid, 9)
        killed = time.monotonic()
        restarted = wait_for("the killed container restarted and Ready", lambda: (
            lambda p: p if p["status"]["containerStatuses"][0]["restartCount"] >= 1 and
            p["status"]["containerStatuses"][0].get("ready") else None)(
            kubectl.get("pod", victim["metadata"]["name"], namespace=NAMESPACE)), timeout=180)
        back = time.monotonic() - killed
        time.sleep(3)
    with capsys.disabled():
        print(f"\nnode: webhook container SIGKILLed under load, Ready again after {back:.0f} s "
              f"(restartCount {restarted['status']['containerStatuses'][0]['restartCount']}): {load.counts}; "
              f"unexpected: {load.unexpected}")
    assert load.counts["denial lost"] == 0
    assert load.counts["admitted"] > 0 and load.counts["denied"] > 0


def test_down_removes_everything_the_node_made(node_cluster):
    state = node_cluster.state["node"]
    node_dir = Path(state["dir"])
    assert node_tool.shim_pids(node_dir), "no shim of this node's containerd was running before down"
    left = node_cluster.stop_all()
    assert left == []
    assert node_tool.shim_pids(node_dir) == []
    assert node_tool.mounts_under(node_dir) == []
    assert subprocess.run(["ip", "link", "show", state["bridge"]], capture_output=True).returncode != 0
    assert [n for n in state["netns"] if Path(n).exists()] == []
    assert node_cluster.state["components"] == []
