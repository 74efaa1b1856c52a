"""The real node and the installed chart of the ``node`` tests (issue 35; DESIGN.md §11).

Shared by ``tests/cluster/test_node.py`` (the install, rollouts, a killed webhook pod) and
``tests/cluster/test_node_faults.py`` (kube-apiserver stopped, the controller's leader deleted). Each
module that requests :func:`node_cluster` gets its own control plane and node (module scope):
``up DIR --kubelet`` (hack/node.py), the image imported into the node's containerd
(:func:`webhook_image`), and :func:`helm_install` installs deploy/helm/segment-webhook on it as
the README says (self-signed certificates, the locally built image, ``pullPolicy: Never``) with the
two ``extraEnv`` variables that point the pods' in-cluster configuration at the node's relay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import image as image_tool  # noqa: E402  (hack/image.py)
import local_cluster  # noqa: E402  (hack/local_cluster.py)
import node as node_tool  # noqa: E402  (hack/node.py)
from tests.support.cluster_support import EXAMPLES, Kubectl, wait_for  # noqa: E402
from tests.unit.admission.test_core_rules import MESSAGES, TRIGGERS  # noqa: E402

CHART = REPO / "deploy" / "helm" / "segment-webhook"
NAMESPACE = "segment-webhook-system"
SHARED_CRDS = paths.SHARED / "crds"
#: The controller's Lease (the chart: --lease-namespace is the pod's namespace) and its timings
#: (webhook/cli/controller.py's defaults, which the chart keeps), seconds.
LEASE_NAME = "segment-webhook-controller"
LEASE_DURATION, RETRY_PERIOD = 15, 2
#: The README's denial sent through the Service (a CREATE, denied without --gate-pods).
DENIED_RULE = "segment-size-exceeds-replicas"


def ci() -> bool:
    return os.environ.get("CI") == "true"


def start_node_cluster(tmp_path_factory, name: str, upstream: tuple[str, ...] = ()) -> local_cluster.LocalCluster:
    """``up DIR --kubelet [--with UPSTREAM]`` (no --webhook: the chart installs it) for a module's
    fixture, in a fresh directory named ``name``; skipped (failed in CI) when a program is not built
    or a Debian tool is missing; its ``up`` seconds in ``state["test_up_seconds"]``."""
    needed = ("kubelet", *upstream)
    if not ci() and not (local_cluster.built() and all(local_cluster.upstream_binary(n).is_file() for n in needed)):
        pytest.skip(f"node suite: {', '.join(needed)} or the control plane not built (hack/local-cluster.sh build)")
    missing = [tool for tool in ("containerd", "ctr", "runc", "podman") if shutil.which(tool) is None]
    if missing:
        message = f"node suite: {', '.join(missing)} not installed (apt-get install -y containerd runc " \
                  "containernetworking-plugins podman)"
        if ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    directory = tmp_path_factory.mktemp(name) / "cluster"
    started = time.monotonic()
    try:
        cluster = local_cluster.up(directory, webhook=False, gate_pods=False, kubelet=True, upstream=upstream)
    except local_cluster.ClusterError as error:
        pytest.fail(f"up --kubelet{' --with ' + ','.join(upstream) if upstream else ''} failed: {error}", pytrace=False)
    cluster.state["test_up_seconds"] = round(time.monotonic() - started, 1)
    return cluster


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory):
    """``up DIR --kubelet``; stopped at the end."""
    cluster = start_node_cluster(tmp_path_factory, "node")
    yield cluster
    cluster.stop_all()


@pytest.fixture(scope="module")
def kubectl(node_cluster) -> Kubectl:
    return Kubectl(node_cluster)


def import_webhook_image(cluster: local_cluster.LocalCluster) -> str:
    """The image ``hack/image.sh build`` makes (built when podman lacks it), imported into the
    cluster's node; ``SEGMENT_WEBHOOK_NODE_IMAGE`` names another tag of podman's storage instead (a
    build of a work tree beside the shared tag). Returns the tag."""
    tag = os.environ.get("SEGMENT_WEBHOOK_NODE_IMAGE") or image_tool.image_tag()
    if not image_tool.podman_has_image(tag):
        image_tool.build()
    node_tool.import_podman_image(Path(cluster.state["node"]["dir"]), tag)
    return tag


@pytest.fixture(scope="module")
def webhook_image(node_cluster) -> str:
    """:func:`import_webhook_image` into the module's node."""
    return import_webhook_image(node_cluster)


def helm(node_cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The built helm against ``node_cluster`` (its own cache and config under the cluster's DIR)."""
    home = node_cluster.dir / "helm-home"
    env = dict(os.environ, HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
               HELM_DATA_HOME=str(home / "data"))
    done = subprocess.run([str(local_cluster.upstream_binary("helm")), "--kubeconfig", str(node_cluster.kubeconfig),
                           *args], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
    return done


def helm_install(node_cluster, kubectl: Kubectl, webhook_image: str, certs: Path, topology_file: Path,
                 *extra_sets: str) -> float:
    """The shared CRDs and ``topology_file`` applied, then ``helm install --wait`` of the chart
    (self-signed certificates written by ``segment-webhook certs --out certs``, the controller on,
    the relay's ``extraEnv`` for the webhook and the controller, ``extra_sets`` appended).
    Returns the seconds ``helm install`` took."""
    state = node_cluster.state["node"]
    for crd in sorted(SHARED_CRDS.glob("*.yaml")):
        kubectl.ok("apply", "--server-side", "-f", str(crd))
    node_cluster.wait_for_crds()
    kubectl.ok("apply", "-f", str(topology_file))
    node_cluster.segment_webhook("certs", "--out", str(certs))
    repository, tag = webhook_image.rsplit(":", 1)
    env = node_tool.in_cluster_env(state["gateway"])
    extra = []
    for part in ("webhook", "controller"):
        for index, (name, value) in enumerate(sorted(env.items())):
            extra += ["--set-string", f"{part}.extraEnv[{index}].name={name}",
                      "--set-string", f"{part}.extraEnv[{index}].value={value}"]
    started = time.monotonic()
    helm(node_cluster, "install", "segment-webhook", str(CHART), "--namespace", "default", "--wait", "--timeout", "10m",
         "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
         "--set", "certificates.mode=self-signed",
         "--set-file", f"certificates.selfSigned.caBundle={certs / 'ca-bundle.crt'}",
         "--set-file", f"certificates.selfSigned.tlsCrt={certs / 'tls.crt'}",
         "--set-file", f"certificates.selfSigned.tlsKey={certs / 'tls.key'}",
         "--set", "controller.enabled=true", *extra, *extra_sets)
    return time.monotonic() - started


class Load:
    """A bounded load of server-side dry-run creates through kube-apiserver (admin token), good and
    bad in turn: a PyTorchJob of ../shared/examples that the webhook admits (201) and the README's
    ``segment-size-exceeds-replicas`` example it denies (403 with the README's message). Counts
    what each answer was; ``unexpected`` keeps the first answers that were neither."""

    def __init__(self, cluster) -> None:
        import http.client
        import ssl
        import threading

        import yaml

        self.port, self.token = cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"]
        self.good = yaml.safe_load((EXAMPLES / "pytorchjob-tp4.yaml").read_text())
        self.good["metadata"]["namespace"] = "default"
        self.bad = TRIGGERS[DENIED_RULE]()[0]
        self.bad["metadata"]["namespace"] = "default"
        self.counts = {"sent": 0, "admitted": 0, "denied": 0, "good refused": 0, "denial lost": 0, "other": 0}
        self.unexpected: list[str] = []
        #: every answer: (time.monotonic() when it came, good or bad sent, HTTP status or 0, message)
        self.answers: list[tuple[float, bool, int, str]] = []
        self.stop = threading.Event()
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # our own kube-apiserver on loopback
        self.http = http.client
        self.thread = threading.Thread(target=self.run, daemon=True)

    def send(self, obj: dict) -> tuple[int, str]:
        connection = self.http.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=self.context)
        try:
            connection.request("POST", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs?dryRun=All",
                               body=json.dumps(obj), headers={"Authorization": f"Bearer {self.token}",
                                                              "Content-Type": "application/json"})
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
            return response.status, (json.loads(body).get("message", "") if body.startswith("{") else body)
        finally:
            connection.close()

    def send_job(self, good: bool) -> None:
        """Send the good or the bad PyTorchJob once and count the answer: admitted (201), denied
        with the expected rule (403), a good one refused, a denial lost, or other."""
        try:
            status, message = self.send(self.good if good else self.bad)
        except OSError as error:
            status, message = 0, str(error)
        self.counts["sent"] += 1
        self.answers.append((time.monotonic(), good, status, message))
        if good and status == 201:
            self.counts["admitted"] += 1
        elif not good and status == 403 and message.endswith(MESSAGES[DENIED_RULE]):
            self.counts["denied"] += 1
        elif good:
            self.counts["good refused"] += 1
        elif status == 201:
            self.counts["denial lost"] += 1
        else:
            self.counts["other"] += 1
        if (good and status != 201) or (not good and status != 403):
            if len(self.unexpected) < 5:
                self.unexpected.append(f"{status}: {message[:300]}")

    def run(self) -> None:
        good = True
        while not self.stop.is_set():
            self.send_job(good)
            good = not good
            time.sleep(0.05)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)


def create_namespace(kubectl: Kubectl, name: str, timeout: float = 60) -> None:
    """``kubectl create namespace name``, then wait until its ``default`` ServiceAccount exists:
    kube-controller-manager's serviceaccount controller makes it a moment after the namespace, and
    until then kube-apiserver's ServiceAccount admission refuses every pod created there
    (``error looking up service account NS/default``: a `.ci/run` failed on that race)."""
    kubectl.ok("create", "namespace", name)
    wait_for(f"ServiceAccount {name}/default",
             lambda: kubectl("get", "serviceaccount", "default", "-n", name).returncode == 0, timeout=timeout,
             interval=0.2)


def pods(kubectl: Kubectl, component: str) -> list[dict]:
    """The chart's pods of ``component`` (``admission-webhook`` or ``controller``), not terminating."""
    items = json.loads(kubectl.ok("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}",
                                  "-o", "json"))["items"]
    return [p for p in items if "deletionTimestamp" not in p["metadata"]]


def lease(kubectl: Kubectl) -> dict | None:
    """The controller's Lease object, or None when it cannot be read."""
    found = kubectl("get", "lease", LEASE_NAME, "-n", NAMESPACE, "-o", "json")
    return json.loads(found.stdout) if found.returncode == 0 else None


def container_log(node_cluster, pod: dict) -> str:
    """Every log line the node's kubelet kept of ``pod``'s containers (CRI format, all restarts):
    ``kubectl logs`` needs a kubelet client certificate kube-apiserver does not have here, so the
    files under the kubelet's pod log directory are read."""
    base = Path(node_cluster.state["node"]["dir"]) / "pod-logs"
    meta = pod["metadata"]
    folder = base / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
    return "".join(path.read_text(errors="replace") for path in sorted(folder.glob("*/*.log")))
