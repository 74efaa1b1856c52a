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
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))

import image as image_tool  # noqa: E402  (hack/image.py)
import local_cluster  # noqa: E402  (hack/local_cluster.py)
import node as node_tool  # noqa: E402  (hack/node.py)
from cluster_support import ADMIN_FLAGS, DEPLOY_FLAGS, EXAMPLES, Kubectl, review, wait_for, write_manifest  # noqa: E402
from test_core_rules import MESSAGES, TRIGGERS  # noqa: E402

pytestmark = pytest.mark.node

CHART = REPO / "deploy" / "helm" / "segment-webhook"
NAMESPACE = "segment-webhook-system"
SHARED_CRDS = REPO.parent / "shared" / "crds"
TOPOLOGY_FILE = EXAMPLES / "topology.yaml"
#: The README's denial sent through the Service (a CREATE, denied without --gate-pods).
DENIED_RULE = "segment-size-exceeds-replicas"


def _ci() -> bool:
    return os.environ.get("CI") == "true"


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory):
    """``up DIR --kubelet`` (no --webhook: the chart installs it); stopped at the end."""
    if not _ci() and not (local_cluster.built() and local_cluster.upstream_binary("kubelet").is_file()):
        pytest.skip("node suite: kubelet or control plane not built (hack/local-cluster.sh build)")
    missing = [tool for tool in ("containerd", "ctr", "runc", "podman") if shutil.which(tool) is None]
    if missing:
        message = f"node suite: {', '.join(missing)} not installed (apt-get install -y containerd runc " \
                  "containernetworking-plugins podman)"
        if _ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    directory = tmp_path_factory.mktemp("node") / "cluster"
    started = time.monotonic()
    try:
        cluster = local_cluster.up(directory, webhook=False, gate_pods=False, kubelet=True)
    except local_cluster.ClusterError as error:
        pytest.fail(f"up --kubelet failed: {error}", pytrace=False)
    cluster.state["test_up_seconds"] = round(time.monotonic() - started, 1)
    yield cluster
    cluster.stop_all()


@pytest.fixture(scope="module")
def kubectl(node_cluster) -> Kubectl:
    return Kubectl(node_cluster)


@pytest.fixture(scope="module")
def webhook_image(node_cluster) -> str:
    """The image ``hack/image.sh build`` makes (built when podman lacks it), imported into the node."""
    tag = image_tool.image_tag()
    if not image_tool.podman_has_image(tag):
        image_tool.build()
    node_tool.import_podman_image(Path(node_cluster.state["node"]["dir"]), tag)
    return tag


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
    assert subnet.subnet_of(ipaddress.ip_network("10.244.0.0/16"))

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


def _helm(node_cluster, *args: str) -> subprocess.CompletedProcess[str]:
    home = node_cluster.dir / "helm-home"
    env = dict(os.environ, HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
               HELM_DATA_HOME=str(home / "data"))
    done = subprocess.run([str(local_cluster.upstream_binary("helm")), "--kubeconfig", str(node_cluster.kubeconfig),
                           *args], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
    return done


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
    for crd in sorted(SHARED_CRDS.glob("*.yaml")):
        kubectl.ok("apply", "--server-side", "-f", str(crd))
    node_cluster.wait_for_crds()
    kubectl.ok("apply", "-f", str(TOPOLOGY_FILE))
    certs = tmp_path / "certs"
    node_cluster.segment_webhook("certs", "--out", str(certs))
    repository, tag = webhook_image.rsplit(":", 1)
    env = node_tool.in_cluster_env(state["gateway"])
    extra = []
    for part in ("webhook", "controller"):
        for index, (name, value) in enumerate(sorted(env.items())):
            extra += ["--set-string", f"{part}.extraEnv[{index}].name={name}",
                      "--set-string", f"{part}.extraEnv[{index}].value={value}"]
    started = time.monotonic()
    _helm(node_cluster, "install", "segment-webhook", str(CHART), "--namespace", "default", "--wait", "--timeout", "10m",
          "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
          "--set", "certificates.mode=self-signed",
          "--set-file", f"certificates.selfSigned.caBundle={certs / 'ca-bundle.crt'}",
          "--set-file", f"certificates.selfSigned.tlsCrt={certs / 'tls.crt'}",
          "--set-file", f"certificates.selfSigned.tlsKey={certs / 'tls.key'}",
          "--set", "controller.enabled=true", *extra)
    installed = time.monotonic() - started
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
    holder = wait_for("the controller's Lease held by a controller pod", lambda: (
        lambda lease: lease["spec"].get("holderIdentity") if lease["spec"].get("holderIdentity") in
        {p["metadata"]["name"] for p in controllers} else None)(
        kubectl.get("lease", "segment-webhook-controller", namespace=NAMESPACE)), timeout=120)
    with capsys.disabled():
        print(f"\nnode: helm install --wait of the chart (self-signed, controller on) in {installed:.1f} s; "
              f"Lease held by {holder}\n{wide}\nkubectl create -f {DENIED_RULE}.yaml:\n{real.stderr.strip()}")


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
