"""The local control plane for the ``cluster`` tests (DESIGN.md §11): ONE per pytest run (and one
more, module-scoped, in ``test_cluster_consumers.py``, which needs ``--controller --with lws``).

``hack/local_cluster.py`` builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kubectl from their Go modules and starts them on loopback, with ``segment-webhook serve`` run as
``deploy/`` runs it and registered by ``deploy/``'s webhook configurations. In CI (``CI=true``) a
missing or failed build fails the tests; elsewhere the suite is skipped with one line when the
binaries are not built yet (``hack/local-cluster.sh build``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402  (hack/local_cluster.py)

EXAMPLES = paths.SHARED / "examples"
#: What deploy/base/deployment.yaml gives serve (SEGMENT_WEBHOOK_* env); `review` reads no
#: environment, so the tests pass the same values as flags.
DEPLOY_FLAGS = ("--default-topology", "cluster-topology",
                "--platform-user", "system:serviceaccount:platform-system:workload-controller",
                "--platform-group", "platform:workload-submitters")
#: The admin kubeconfig's identity (hack/local_cluster.py token file): `review` builds the same
#: userInfo, so automatic placement is decided alike.
ADMIN_FLAGS = ("--user", "admin", "--group", "system:masters")


def start_cluster(tmp_dir: Path) -> local_cluster.LocalCluster:
    """``up tmp_dir --webhook`` (building first only in CI); pytest.skip outside CI without binaries."""
    in_ci = os.environ.get("CI") == "true"
    if not in_ci and not local_cluster.built():
        pytest.skip("cluster suite: control-plane binaries not built (hack/local-cluster.sh build; ~25 min once)")
    try:
        return local_cluster.up(tmp_dir, webhook=True, gate_pods=False)
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane did not start: {error}", pytrace=False)


class Kubectl:
    """The real kubectl against the local cluster; every call returns the CompletedProcess."""

    def __init__(self, cluster: local_cluster.LocalCluster):
        self.cluster = cluster

    def __call__(self, *args: str, input_text: str | None = None, kubeconfig: Path | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.cluster.bin / "kubectl"), "--kubeconfig", str(kubeconfig or self.cluster.kubeconfig), *args],
            input=input_text, capture_output=True, text=True, timeout=timeout)

    def ok(self, *args: str, **kwargs) -> str:
        result = self(*args, **kwargs)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def get(self, kind: str, name: str, namespace: str = "default") -> dict:
        return json.loads(self.ok("get", kind, name, "-n", namespace, "-o", "json"))

    def dry_run_names_topology(self, topology: str) -> subprocess.CompletedProcess:
        """A server-side dry-run create of a PyTorchJob whose Worker names ``topology``."""
        job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
               "metadata": {"name": "topology-probe", "namespace": "default"},
               "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {
                   "metadata": {"annotations": {"kai.scheduler/topology": topology}},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}}
        return self("create", "--dry-run=server", "-f", "-", input_text=json.dumps(job))

    def wait_for_webhook_topology(self, topology: str, present: bool = True, timeout: float = 30) -> float:
        """Wait until every serve worker's live catalog knows (or, ``present=False``, no longer
        knows) ``topology``: 10 dry runs in a row agree (gunicorn spreads them over the workers).
        Returns the seconds waited; fails the test after ``timeout``."""
        started = time.monotonic()
        agreeing = 0
        while time.monotonic() - started < timeout:
            accepted = self.dry_run_names_topology(topology).returncode == 0
            agreeing = agreeing + 1 if accepted == present else 0
            if agreeing >= 10:
                return time.monotonic() - started
            time.sleep(0.1)
        pytest.fail(f"the webhook did not {'learn' if present else 'forget'} Topology {topology!r} in {timeout} s")


def wait_for(what: str, predicate, timeout: float = 240, interval: float = 1.0):
    """Poll ``predicate()`` every ``interval`` seconds until it returns something truthy (returned);
    fail the test after ``timeout`` seconds, naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def review(*args: str) -> subprocess.CompletedProcess:
    """``segment-webhook review`` of this checkout (a new process, as a user runs it)."""
    return subprocess.run([sys.executable, "-m", "webhook.cli", "review", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)


def response_patch(review_json: str) -> list[dict]:
    """The JSONPatch of a ``review -o json`` AdmissionReview answer (``[]`` when none)."""
    response = json.loads(review_json)["response"]
    if "patch" not in response:
        return []
    return json.loads(base64.b64decode(response["patch"]))


def write_manifest(directory: Path, name: str, obj: dict) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


@contextlib.contextmanager
def gated_plane(directory: Path, what: str, layout: tuple[str, ...], namespace: str, nodes: int):
    """A local control plane with the webhook (``--gate-pods``), the gang controller, the shared
    examples' Topology and ``nodes`` gen-cluster nodes of ``layout`` registered, and ``namespace``
    made: yields ``(cluster, kubectl)``, stops everything after. Skips outside CI when the binaries
    are not built; a plane that does not start fails the test naming ``what``."""
    from tests.cluster.test_cluster_consumers import gen_cluster

    if os.environ.get("CI") != "true" and not local_cluster.built():
        pytest.skip(f"{what}: binaries not built (hack/local-cluster.sh build)")
    try:
        cluster = local_cluster.up(directory / "cluster", webhook=True, gate_pods=True, controller=True)
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane with the controller did not start: {error}", pytrace=False)
    try:
        kubectl = Kubectl(cluster)
        kubectl.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
        kubectl.wait_for_webhook_topology("cluster-topology")
        assert cluster.register_nodes(gen_cluster(directory / "nodes.yaml", *layout)) == nodes
        kubectl.ok("create", "namespace", namespace)
        yield cluster, kubectl
    finally:
        cluster.stop_all()
