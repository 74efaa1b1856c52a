"""The training operators ``local-cluster.sh up DIR --with NAMES`` runs against the local control
plane: Kubeflow training-operator (PyTorchJob), Kubeflow Trainer (TrainJob), JobSet and KubeRay.

Each is built by ``local_cluster.build_upstream`` from its Go module under ``hack/go/<name>``
(go.mod and go.sum only). At ``up`` its CRDs, RBAC and webhook configurations are rendered by
``kubectl kustomize`` from the module's own manifests in the Go module cache (never copied into
this repository), its Deployment, Service and webhook Secret are left out, and the manager runs as a
local process under a token of its ServiceAccount, with leader election off, metrics off, the
health probe on loopback and its webhooks registered by ``clientConfig.url`` on 127.0.0.1 with a
serving certificate made here.

Two certificate schemes are met:

* JobSet (``config.jobset.x-k8s.io/v1alpha1`` Configuration, as LWS): internal certificate
  management off, ``webhook.host/port/certDir`` set; the certificate comes from
  ``webhook.http.certs``.
* training-operator v1.8.1 and Trainer v2.0.0: ``cert-controller``'s rotator is always on. It keeps
  the Secret it finds when its CA verifies for the CA name (``training-operator-ca``,
  ``kubeflow-trainer-ca``) and its serving certificate for ``<service>.<namespace>.svc``, and it
  waits for ``tls.crt`` in the fixed directory ``/tmp/k8s-webhook-server/serving-certs`` (a mounted
  Secret in the pod). So :func:`rotator_bundle` makes such a CA (with the CA name as its DNS name)
  and a serving certificate for both that DNS name and 127.0.0.1, the Secret is created before the
  manager starts, and the files are written where the rotator and controller-runtime look
  (``$TMPDIR/k8s-webhook-server/serving-certs``, TMPDIR per operator; the fixed path only needs to
  exist). Their webhook servers bind every interface (no host flag in v1.8.1 / v2.0.0), on a free
  port.
* KubeRay v1.5.0 registers no webhook unless ``ENABLE_WEBHOOKS=true`` (its default
  ``config/default`` has none): none is run. Its ``RayMultiHostIndexing`` feature gate (alpha, off
  by default) is turned on so worker pods carry ``ray.io/worker-group-replica-index`` (DESIGN.md
  §3b); ``KUBERAY_FEATURE_GATES`` overrides the value.
"""

from __future__ import annotations

import base64
import datetime as _dt
import ipaddress
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from local_cluster import LocalCluster

WEBHOOK_KINDS = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
#: What ``up`` never applies from an operator's manifests: no kubelet runs the Deployment, the
#: Services would point at no pod, the Secret is made here.
NOT_APPLIED = {"Deployment", "Service", "Secret"} | WEBHOOK_KINDS
#: Where cert-controller's rotator (training-operator v1.8.1 pkg/cert, Trainer v2.0.0
#: pkg/util/cert) waits for the mounted Secret's tls.crt.
ROTATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
#: The order operators start in: Trainer creates JobSets, so JobSet's CRD and webhooks come first.
START_ORDER = ("jobset", "training-operator", "trainer", "kuberay")
#: ``--with`` names another one needs running.
REQUIRES = {"trainer": ("jobset",)}


@dataclass(frozen=True)
class RotatorCerts:
    """cert-controller's Secret layout for one operator: ``secret`` (namespace, name), the CA's
    DNS name ``ca_name`` and the serving ``service`` (``<service>.<namespace>.svc``)."""

    namespace: str
    secret: str
    ca_name: str
    service: str


def ordered(names: list[str]) -> list[str]:
    """``names`` with what they require added (:data:`REQUIRES`), operators in :data:`START_ORDER`,
    others (e.g. ``lws``) first in their given order."""
    wanted = list(dict.fromkeys(names))
    for name in list(wanted):
        wanted += [needed for needed in REQUIRES.get(name, ()) if needed not in wanted]
    others = [name for name in wanted if name not in START_ORDER]
    return others + [name for name in START_ORDER if name in wanted]


def rotator_bundle(ca_name: str, dns_name: str, days: int = 365) -> dict[str, bytes]:
    """A CA whose certificate names ``ca_name`` as its DNS subjectAltName and a serving certificate
    for ``dns_name`` and 127.0.0.1 signed by it: the four Secret keys ``ca.crt``, ``ca.key``,
    ``tls.crt``, ``tls.key`` (PEM; ECDSA P-256; valid from 5 minutes ago for ``days`` days, beyond
    the rotator's 90-day lookahead). Source of the checks it must pass: cert-controller
    pkg/rotator ``ValidCert`` (v0.10.1, v0.12.0)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = _dt.datetime.now(_dt.timezone.utc)
    start, end = now - _dt.timedelta(minutes=5), now + _dt.timedelta(days=days)

    def pem_key(key: rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_subject).issuer_name(ca_subject)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
               .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)]))
            .issuer_name(ca_subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return {"ca.crt": ca_cert.public_bytes(serialization.Encoding.PEM), "ca.key": pem_key(ca_key),
            "tls.crt": cert.public_bytes(serialization.Encoding.PEM), "tls.key": pem_key(key)}


def render(cluster: "LocalCluster", source: Path, resources: list[str] | None = None,
           namespace: str | None = None) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of ``source`` (a kustomization directory in the module cache); with
    ``resources`` (paths relative to ``source``), of a kustomization listing them (and setting
    ``namespace``) over a writable copy of ``source`` in ``DIR/operators`` (kustomize refuses
    absolute resource paths). Returns the documents."""
    if resources is not None:
        copy = cluster.dir / "operators" / source.name
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(source, copy)
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        local = copy / "local"
        local.mkdir()
        body: dict[str, Any] = {"resources": [f"../{resource}" for resource in resources]}
        if namespace:
            body["namespace"] = namespace
        (local / "kustomization.yaml").write_text(yaml.safe_dump(body))
        source = local
    return [doc for doc in yaml.safe_load_all(cluster.kubectl("kustomize", str(source)).stdout) if doc]


def install(cluster: "LocalCluster", docs: list[dict[str, Any]], crds: set[str] | None = None) -> None:
    """Apply ``docs`` but :data:`NOT_APPLIED` (and CRDs not named in ``crds`` when given), the
    namespaces they use first; wait for the CRDs."""
    namespaces = sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")})
    for namespace in namespaces:
        cluster.kubectl("create", "namespace", namespace, check=False)
    chosen = [d for d in docs if d["kind"] not in NOT_APPLIED
              and (crds is None or d["kind"] != "CustomResourceDefinition" or d["metadata"]["name"] in crds)]
    cluster.apply(chosen)
    cluster.wait_for_crds()


def account_kubeconfig(cluster: "LocalCluster", docs: list[dict[str, Any]], workdir: Path) -> Path:
    """A kubeconfig holding a 24 h token of the (first) ServiceAccount of ``docs``."""
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    name, namespace = account["metadata"]["name"], account["metadata"]["namespace"]
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration", "24h").stdout.strip()
    from local_cluster import write_kubeconfig

    path = workdir / "kubeconfig"
    write_kubeconfig(path, f"https://127.0.0.1:{cluster.state['ports']['kube-apiserver']}",
                     cluster.dir / "pki" / "ca.crt", name, token)
    return path


def webhooks_by_url(docs: list[dict[str, Any]], port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The webhook configurations of ``docs`` with each ``clientConfig.service`` replaced by
    ``https://127.0.0.1:<port><path>`` and ``caBundle`` = ``ca_pem``; cert-manager's
    inject annotation dropped."""
    configurations = [d for d in docs if d["kind"] in WEBHOOK_KINDS]
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            service = hook["clientConfig"].pop("service", {})
            hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service.get('path', '/')}"
            hook["clientConfig"]["caBundle"] = base64.b64encode(ca_pem).decode()
        (configuration["metadata"].get("annotations") or {}).pop("cert-manager.io/inject-ca-from", None)
    return configurations


def run_manager(cluster: "LocalCluster", name: str, argv: list[str], env: dict[str, str],
                probe_port: int, webhook_port: int | None) -> None:
    """Start the manager process ``name`` and wait for its ``/readyz`` (and webhook port)."""
    from local_cluster import _http_ok, port_open

    process = cluster.start(name, argv, env=dict(os.environ, **env))
    cluster.wait_until(name, process, lambda: _http_ok(probe_port, "/readyz"), "ready (/readyz)")
    if webhook_port is not None:
        cluster.wait_until(name, process, lambda: port_open(webhook_port), "serving its webhooks")


def start_with_rotator(cluster: "LocalCluster", name: str, docs: list[dict[str, Any]], certs: RotatorCerts,
                       argv: Callable[[int, int], list[str]], env: dict[str, str]) -> None:
    """Install ``docs`` (as :func:`install`), create the rotator's Secret from
    :func:`rotator_bundle`, write the serving files, apply the webhook configurations by url and
    run ``argv(probe_port, webhook_port)`` (see the module docstring)."""
    from local_cluster import free_port

    workdir = cluster.dir / name
    serving = workdir / "tmp" / "k8s-webhook-server" / "serving-certs"
    serving.mkdir(parents=True, exist_ok=True)
    bundle = rotator_bundle(certs.ca_name, f"{certs.service}.{certs.namespace}.svc")
    for file_name in ("tls.crt", "tls.key"):
        (serving / file_name).write_bytes(bundle[file_name])
    ROTATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
    if not (ROTATOR_CERT_DIR / "tls.crt").is_file():  # only its existence is checked
        (ROTATOR_CERT_DIR / "tls.crt").write_bytes(bundle["tls.crt"])
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": certs.secret, "namespace": certs.namespace},
              "data": {key: base64.b64encode(value).decode() for key, value in bundle.items()}}
    cluster.apply([secret])
    kubeconfig = account_kubeconfig(cluster, docs, workdir)
    probe_port = cluster.state["ports"][name] = free_port()
    webhook_port = cluster.state["ports"][f"{name}-webhook"] = free_port()
    cluster.save()
    cluster.apply(webhooks_by_url(docs, webhook_port, bundle["ca.crt"]))
    run_manager(cluster, name, argv(probe_port, webhook_port),
                dict(env, KUBECONFIG=str(kubeconfig), TMPDIR=str(workdir / "tmp")), probe_port, webhook_port)


def start_training_operator(cluster: "LocalCluster", binary: Path, source: Path) -> None:
    """training-operator v1.8.1 (``cmd/training-operator.v1``) with only the PyTorchJob scheme:
    its ``manifests/overlays/standalone`` (namespace ``kubeflow``), of whose CRDs only
    ``pytorchjobs.kubeflow.org`` is applied (its MPIJob CRD is ``kubeflow.org/v1`` and would replace
    mpi-operator's ``v2beta1`` one of the same name)."""
    docs = render(cluster, source / "manifests" / "overlays" / "standalone")
    install(cluster, docs, crds={"pytorchjobs.kubeflow.org"})
    certs = RotatorCerts("kubeflow", "training-operator-webhook-cert", "training-operator-ca", "training-operator")
    start_with_rotator(cluster, "training-operator", docs, certs, lambda probe, webhook: [
        str(binary), "--enable-scheme", "pytorchjob", "--leader-elect=false", "--metrics-bind-address", "0",
        "--health-probe-bind-address", f"127.0.0.1:{probe}", "--webhook-server-port", str(webhook)],
        {"MY_POD_NAMESPACE": certs.namespace})


def start_trainer(cluster: "LocalCluster", binary: Path, source: Path) -> None:
    """Kubeflow Trainer v2.0.0 (``cmd/trainer-controller-manager``): ``manifests/base/{crds,
    manager,rbac,webhook}`` in namespace ``kubeflow-system`` (its ``overlays/manager`` also pulls
    JobSet's release manifests from a URL; JobSet runs from its own module instead), and the
    ``torch-distributed`` ClusterTrainingRuntime of ``manifests/base/runtimes``."""
    docs = render(cluster, source / "manifests", ["base/crds", "base/manager", "base/rbac", "base/webhook"],
                  namespace="kubeflow-system")
    install(cluster, docs)
    certs = RotatorCerts("kubeflow-system", "kubeflow-trainer-webhook-cert", "kubeflow-trainer-ca",
                         "kubeflow-trainer-controller-manager")
    start_with_rotator(cluster, "trainer", docs, certs, lambda probe, webhook: [
        str(binary), "--metrics-bind-address", "0", "--health-probe-bind-address", f"127.0.0.1:{probe}",
        "--webhook-server-port", str(webhook)], {})
    runtime = source / "manifests" / "base" / "runtimes" / "torch_distributed.yaml"
    cluster.kubectl("apply", "--server-side", "-f", str(runtime))


def start_jobset(cluster: "LocalCluster", binary: Path, source: Path) -> None:
    """JobSet (the version Trainer v2.0.0 requires) as its ``config/default`` deploys it, with a
    Configuration as LWS's (internal cert management off, webhook on loopback)."""
    from local_cluster import free_port
    from webhook.http import certs

    docs = render(cluster, source / "config" / "default")
    install(cluster, docs)
    namespace = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["namespace"]
    workdir = cluster.dir / "jobset"
    (workdir / "certs").mkdir(parents=True, exist_ok=True)
    bundle = certs.generate("jobset-webhook-service", namespace)
    (workdir / "certs" / "tls.crt").write_bytes(bundle.cert_pem)
    (workdir / "certs" / "tls.key").write_bytes(bundle.key_pem)
    kubeconfig = account_kubeconfig(cluster, docs, workdir)
    webhook_port = cluster.state["ports"]["jobset-webhook"] = free_port()
    probe_port = cluster.state["ports"]["jobset-manager"] = free_port()
    cluster.save()
    configuration = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(workdir / "certs")},
        "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(configuration, sort_keys=False))
    run_manager(cluster, "jobset-manager", [str(binary), "--config", str(workdir / "config.yaml")],
                {"KUBECONFIG": str(kubeconfig)}, probe_port, webhook_port)
    cluster.apply(webhooks_by_url(docs, webhook_port, bundle.ca_pem))


def start_kuberay(cluster: "LocalCluster", binary: Path, source: Path) -> None:
    """KubeRay's ray-operator v1.5.0 as its ``config/default`` deploys it (CRDs, RBAC; namespace
    ``default``), no webhook (see the module docstring), ``RayMultiHostIndexing`` on."""
    from local_cluster import free_port

    docs = render(cluster, source / "config" / "default")
    install(cluster, docs)
    workdir = cluster.dir / "kuberay"
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = account_kubeconfig(cluster, docs, workdir)
    probe_port = cluster.state["ports"]["ray-operator"] = free_port()
    cluster.save()
    gates = os.environ.get("KUBERAY_FEATURE_GATES", "RayMultiHostIndexing=true")
    run_manager(cluster, "ray-operator", [
        str(binary), "--enable-leader-election=false", "--metrics-addr", "0",
        "--health-probe-bind-address", f"127.0.0.1:{probe_port}", "--feature-gates", gates,
        "--log-stdout-encoder", "console"], {"KUBECONFIG": str(kubeconfig)}, probe_port, None)


#: ``--with`` name -> its starter ``(cluster, built binary, module source directory)``.
STARTERS: dict[str, Callable[["LocalCluster", Path, Path], None]] = {
    "training-operator": start_training_operator,
    "trainer": start_trainer,
    "jobset": start_jobset,
    "kuberay": start_kuberay,
}


def start(cluster: "LocalCluster", name: str) -> None:
    """Build (or reuse) and start operator ``name`` of :data:`STARTERS` against ``cluster``.
    Raises local_cluster.ClusterError (build, render, apply or start failed; the message names it)."""
    from local_cluster import REPO, build_upstream, upstream_source

    sys.path.insert(0, str(REPO))
    try:
        STARTERS[name](cluster, build_upstream(name), upstream_source(name))
    except subprocess.TimeoutExpired as error:
        from local_cluster import ClusterError

        raise ClusterError(f"{name}: {error}") from None
