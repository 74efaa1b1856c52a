"""As installed with cert-manager (issue 35 items 2 and 3): the chart's DEFAULT certificate mode.

Marker ``node``: ``up --kubelet --with cert-manager`` (hack/node.py, hack/cert_manager.py: cert-manager
v1.21.2's controller and cainjector, no cert-manager webhook), then ``helm install`` of
deploy/helm/segment-webhook with ``certificates.mode`` left at its default, ``cert-manager``
(values.yaml). Checked literally: cert-manager issues the CA and the serving Certificate (Ready),
the cainjector writes the serving Secret's ``ca.crt`` into both webhook configurations' caBundle,
the webhook pods go Ready and serve the Secret's certificate, and a denial reaches kubectl through
the Service exactly as ``segment-webhook review`` prints it. Then the renewal fault: under a
bounded load of creates (PyTorchJobs admitted and denied, worker pods labelled and warned) the
serving Certificate is renewed the way ``cmctl renew`` does it (condition ``Issuing=True``, reason
``ManuallyTriggered``, on its status), and the pods must serve the new certificate (a new serial
number) with no create failed that would have passed, no denial lost and no failed handshake in
kube-apiserver's log.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import cert_manager  # noqa: E402  (hack/cert_manager.py)
import node as node_tool  # noqa: E402  (hack/node.py)
from tests.cluster.test_node import TOPOLOGY_FILE, _webhook_pods  # noqa: E402
from tests.support.cluster_support import ADMIN_FLAGS, DEPLOY_FLAGS, Kubectl, review, wait_for, write_manifest  # noqa: E402
from tests.support.node_support import (  # noqa: E402
    CHART,
    DENIED_RULE,
    NAMESPACE,
    SHARED_CRDS,
    Load,
    import_webhook_image,
    start_node_cluster,
)
from tests.support.node_support import helm as _helm  # noqa: E402
from tests.unit.admission.test_core_rules import MESSAGES, TRIGGERS  # noqa: E402

pytestmark = pytest.mark.node

#: The chart's cert-manager objects (templates/certificates.yaml).
SERVING = "segment-webhook-serving"
SERVING_SECRET = "segment-webhook-tls"
CA_CERTIFICATE = "segment-webhook-ca"
#: What ``cmctl renew`` writes (cert-manager cmd/ctl renew: the Issuing condition on the status).
RENEW_REASON = "ManuallyTriggered"


@pytest.fixture(scope="module")
def cm_cluster(tmp_path_factory):
    """``up DIR --kubelet --with cert-manager``; stopped at the end."""
    cluster = start_node_cluster(tmp_path_factory, "node-cm", ("cert-manager",))
    yield cluster
    cluster.stop_all()


@pytest.fixture(scope="module")
def kubectl(cm_cluster) -> Kubectl:
    return Kubectl(cm_cluster)


@pytest.fixture(scope="module")
def installed(cm_cluster, kubectl) -> float:
    """``helm install --wait`` of the chart in its default certificate mode (cert-manager) with the
    locally built image; returns its seconds."""
    tag = import_webhook_image(cm_cluster)
    for crd in sorted(SHARED_CRDS.glob("*.yaml")):
        kubectl.ok("apply", "--server-side", "-f", str(crd))
    cm_cluster.wait_for_crds()
    kubectl.ok("apply", "-f", str(TOPOLOGY_FILE))
    repository, image_tag = tag.rsplit(":", 1)
    extra = []
    for index, (name, value) in enumerate(sorted(node_tool.in_cluster_env(cm_cluster.state["node"]["gateway"]).items())):
        extra += ["--set-string", f"webhook.extraEnv[{index}].name={name}",
                  "--set-string", f"webhook.extraEnv[{index}].value={value}"]
    started = time.monotonic()
    _helm(cm_cluster, "install", "segment-webhook", str(CHART), "--namespace", "default", "--wait", "--timeout", "10m",
          "--set", f"image.repository={repository}", "--set", f"image.tag={image_tag}",
          "--set", "image.pullPolicy=Never", *extra)
    return time.monotonic() - started


def _secret(kubectl, name: str) -> dict[str, bytes]:
    data = kubectl.get("secret", name, namespace=NAMESPACE)["data"]
    return {key: base64.b64decode(value) for key, value in data.items()}


def _served_certificate(address: str, ca_pem: bytes) -> x509.Certificate:
    """The certificate the server at ``address``:8443 presents, verified against ``ca_pem`` for the
    Service's DNS name (as kube-apiserver verifies it)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection((address, 8443), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=f"segment-webhook.{NAMESPACE}.svc") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _served_serials(kubectl, ca_pem: bytes) -> dict[str, int]:
    return {p["metadata"]["name"]: _served_certificate(p["status"]["podIP"], ca_pem).serial_number
            for p in _webhook_pods(kubectl)}


def test_cert_manager_issues_the_certificate_and_injects_the_ca(cm_cluster, kubectl, installed, tmp_path, capsys):
    for name in (CA_CERTIFICATE, SERVING):
        assert cert_manager.certificate_ready(cm_cluster, NAMESPACE, name), kubectl.ok(
            "get", "certificate", "-n", NAMESPACE, "-o", "yaml")
    certificates = kubectl.ok("get", "certificates", "-n", NAMESPACE)
    secret = _secret(kubectl, SERVING_SECRET)
    serving = x509.load_pem_x509_certificate(secret["tls.crt"])
    ca = x509.load_pem_x509_certificate(secret["ca.crt"])
    # templates/certificates.yaml: CN segment-webhook.<ns>.svc, the four Service names, issued by the CA Certificate
    assert serving.subject.rfc4514_string() == f"CN=segment-webhook.{NAMESPACE}.svc"
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["segment-webhook", f"segment-webhook.{NAMESPACE}", f"segment-webhook.{NAMESPACE}.svc",
                     f"segment-webhook.{NAMESPACE}.svc.cluster.local"]
    assert ca.subject.rfc4514_string() == "CN=segment-webhook-ca"
    assert serving.issuer == ca.subject
    # values.yaml certificates.certManager.duration: 2160h
    assert serving.not_valid_after_utc - serving.not_valid_before_utc == datetime.timedelta(hours=2160)

    # the cainjector filled both configurations' caBundle with the serving Secret's ca.crt
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        configuration = kubectl.get(kind, "segment-webhook")
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{SERVING}"
        for hook in configuration["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == secret["ca.crt"]
            assert hook["clientConfig"]["service"]["name"] == "segment-webhook" and "url" not in hook["clientConfig"]

    # the pods are Ready and serve the Secret's certificate, verified against the injected CA
    pods = _webhook_pods(kubectl)
    assert len(pods) == 2
    for pod in pods:
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    assert set(_served_serials(kubectl, secret["ca.crt"]).values()) == {serving.serial_number}
    wide = kubectl.ok("get", "pods", "-n", NAMESPACE, "-o", "wide")

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
    with capsys.disabled():
        print(f"\nnode+cert-manager: up --kubelet --with cert-manager in {cm_cluster.state['test_up_seconds']} s; "
              f"helm install --wait (certificates.mode cert-manager, the default) in {installed:.1f} s; serving "
              f"serial {serving.serial_number:x}\n{wide}\n{certificates}\nkubectl create -f {DENIED_RULE}.yaml:\n"
              f"{real.stderr.strip()}")


class MixedLoad(Load):
    """test_node's :class:`Load` (a PyTorchJob admitted, the README's denied one, in turn) with
    worker pods between them: one that the pod webhook labels ``segment-index`` (worker 5,
    segment-size 4: index 1, DESIGN.md §7) and one with a segment-size that is not a number
    (admitted with a warning and no label: pods are never denied). A pod stored without the
    webhook's answer counts as ``review lost``."""

    def __init__(self, cluster) -> None:
        super().__init__(cluster)
        self.counts.update({"pod labelled": 0, "pod warned": 0, "review lost": 0})
        self.step = 0

    @staticmethod
    def pod(segment_size: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "load-worker-5", "namespace": "default",
                             "labels": {"training.kubeflow.org/job-name": "load",
                                        "training.kubeflow.org/replica-type": "worker",
                                        "training.kubeflow.org/replica-index": "5"},
                             "annotations": {"kai.scheduler/topology": "cluster-topology",
                                             "kai.scheduler/segment-size": segment_size}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}}

    def send_pod(self, obj: dict) -> tuple[int, dict, str]:
        connection = self.http.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=self.context)
        try:
            connection.request("POST", "/api/v1/namespaces/default/pods?dryRun=All", body=json.dumps(obj),
                               headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
            return response.status, json.loads(body) if body.startswith("{") else {}, response.getheader("Warning") or ""
        finally:
            connection.close()

    def run(self) -> None:
        while not self.stop.is_set():
            kind = self.step % 4
            self.step += 1
            if kind < 2:  # the jobs, as Load sends them
                self.send_job(kind == 0)
            else:
                labelled = kind == 2
                try:
                    status, body, warning = self.send_pod(self.pod("4" if labelled else "four"))
                except OSError as error:
                    status, body, warning = 0, {"message": str(error)}, ""
                self.counts["sent"] += 1
                labels = (body.get("metadata") or {}).get("labels") or {}
                if status == 201 and labelled and labels.get("kai.scheduler/segment-index") == "1":
                    self.counts["pod labelled"] += 1
                elif status == 201 and not labelled and "not an int32" in warning:
                    self.counts["pod warned"] += 1
                elif status == 201:
                    self.counts["review lost"] += 1
                else:
                    self.counts["good refused"] += 1
                    if len(self.unexpected) < 5:
                        self.unexpected.append(f"pod {status}: {str(body.get('message'))[:300]}")
            time.sleep(0.05)


#: kube-apiserver's words for a webhook call that failed in TLS (client-go/net/http errors).
TLS_FAILURES = ("x509:", "tls:", "handshake", "certificate signed by unknown authority", "bad certificate")


def _webhook_pod_logs(cm_cluster) -> list[Path]:
    root = Path(cm_cluster.state["node"]["dir"]) / "pod-logs"
    return sorted(root.glob(f"{NAMESPACE}_segment-webhook-*/webhook/*.log"))


def test_a_certificate_renewal_under_load_fails_no_handshake(cm_cluster, kubectl, installed, capsys):
    """Issue 35 item 3: cert-manager renews the serving certificate during the load; the pods
    reload it from the mounted Secret (docs/tasks/operations.md) and serve the new one; nothing fails."""
    before = _secret(kubectl, SERVING_SECRET)
    old_serial = x509.load_pem_x509_certificate(before["tls.crt"]).serial_number
    assert set(_served_serials(kubectl, before["ca.crt"]).values()) == {old_serial}
    apiserver_log = cm_cluster.log_path("kube-apiserver")
    apiserver_offset = apiserver_log.stat().st_size
    pod_offsets = {path: path.stat().st_size for path in _webhook_pod_logs(cm_cluster)}
    certificate = kubectl.get("certificate", SERVING, namespace=NAMESPACE)
    revision = certificate["status"].get("revision")
    with MixedLoad(cm_cluster) as load:
        time.sleep(3)
        started = time.monotonic()
        condition = {"type": "Issuing", "status": "True", "reason": RENEW_REASON,
                     "message": "Certificate re-issuance manually triggered",
                     "lastTransitionTime": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "observedGeneration": certificate["metadata"]["generation"]}
        kubectl.ok("patch", "certificate", SERVING, "-n", NAMESPACE, "--subresource=status", "--type=json",
                   "-p", json.dumps([{"op": "add", "path": "/status/conditions/-", "value": condition}]))

        def renewed() -> dict[str, bytes] | None:
            secret = _secret(kubectl, SERVING_SECRET)
            return secret if x509.load_pem_x509_certificate(secret["tls.crt"]).serial_number != old_serial else None

        after = wait_for("cert-manager wrote a new serving certificate", renewed, timeout=180)
        issued = time.monotonic() - started
        new_serial = x509.load_pem_x509_certificate(after["tls.crt"]).serial_number
        wait_for("cert-manager's Certificate Ready again", lambda: cert_manager.certificate_ready(
            cm_cluster, NAMESPACE, SERVING), timeout=120)
        wait_for("both pods serving the new certificate", lambda: set(
            _served_serials(kubectl, after["ca.crt"]).values()) == {new_serial}, timeout=300)
        switched = time.monotonic() - started
        time.sleep(5)
    ready = kubectl.ok("get", "certificate", SERVING, "-n", NAMESPACE)
    new_revision = kubectl.get("certificate", SERVING, namespace=NAMESPACE)["status"].get("revision")
    apiserver_lines = apiserver_log.read_text(errors="replace")[apiserver_offset:].splitlines()
    webhook_failures = [line for line in apiserver_lines if "failed calling webhook" in line.lower()
                        or "failed to call webhook" in line.lower()]
    tls_failures = [line for line in webhook_failures if any(word in line for word in TLS_FAILURES)]
    serve_lines = [line for path in _webhook_pod_logs(cm_cluster)
                   for line in path.read_text(errors="replace")[pod_offsets.get(path, 0):].splitlines()]
    reloads = [line for line in serve_lines if "serving certificate reloaded" in line]
    serve_tls = [line for line in serve_lines if "handshake" in line or "still serving the previous certificate" in line]
    # the CA did not change, so caBundle stays what it was (no injection needed for the renewal)
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        for hook in kubectl.get(kind, "segment-webhook")["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == after["ca.crt"] == before["ca.crt"]
    with capsys.disabled():
        print(f"\nnode+cert-manager: renewal ({RENEW_REASON}) under load: revision {revision} -> {new_revision}, "
              f"serial {old_serial:x} -> {new_serial:x}; new Secret after {issued:.0f} s, both pods serving it after "
              f"{switched:.0f} s; {load.counts}; unexpected: {load.unexpected}; kube-apiserver: "
              f"{len(webhook_failures)} failed webhook calls, {len(tls_failures)} of them TLS; serve: {len(reloads)} "
              f"reloads logged, {len(serve_tls)} handshake/certificate warnings\n{ready}")
    assert new_revision == revision + 1
    assert load.counts["good refused"] == 0 and load.counts["denial lost"] == 0 and load.counts["other"] == 0, \
        load.unexpected
    assert load.counts["review lost"] == 0
    assert tls_failures == [] and serve_tls == [], (tls_failures[:3], serve_tls[:3])
    assert load.counts["admitted"] > 0 and load.counts["denied"] > 0 and load.counts["pod labelled"] > 0
    assert load.counts["pod warned"] > 0
