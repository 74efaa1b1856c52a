"""hack/operators.py without a control plane: pins, start order, the cert-controller Secret, the
webhook configurations by url (the cluster runs are in test_cluster_operators.py)."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import sys

import yaml
from cryptography import x509

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402
import operators  # noqa: E402


def test_operators_are_pinned_to_the_versions_the_proxy_serves():
    # issue text and `go list -m -versions` / `go mod download -json` of 2026-12-04
    upstream = local_cluster.UPSTREAM
    pins = {name: local_cluster.module_version(upstream[name].module_dir, upstream[name].module)
            for name in operators.STARTERS}
    assert pins == {"training-operator": "v1.8.1", "jobset": "v0.8.2", "trainer": "v2.0.0", "kuberay": "v1.5.0"}
    # Trainer v2.0.0's go.mod requires sigs.k8s.io/jobset v0.8.2
    assert "sigs.k8s.io/jobset v0.8.2" in (local_cluster.GO_MODULES / "trainer" / "go.mod").read_text()


def test_each_operator_has_its_own_cache_key():
    digests = {name: local_cluster.pins_digest((local_cluster.UPSTREAM[name].module_dir,))
               for name in [*operators.STARTERS, "lws"]}
    assert len(set(digests.values())) == len(digests) == 5
    assert set(operators.STARTERS) <= set(local_cluster.UPSTREAM)


def test_trainer_brings_jobset_and_jobset_starts_first():
    assert operators.ordered(["trainer"]) == ["jobset", "trainer"]
    assert operators.ordered(["kuberay", "trainer", "lws", "jobset"]) == ["lws", "jobset", "trainer", "kuberay"]
    assert operators.ordered(["training-operator"]) == ["training-operator"]


def test_rotator_bundle_passes_cert_controllers_checks():
    """cert-controller ValidCert: the CA verifies for the CA name, the serving certificate for
    ``<service>.<namespace>.svc``, 90 days ahead; kube-apiserver dials 127.0.0.1 (IP SAN)."""
    bundle = operators.rotator_bundle("training-operator-ca", "training-operator.kubeflow.svc")
    ca = x509.load_pem_x509_certificate(bundle["ca.crt"])
    cert = x509.load_pem_x509_certificate(bundle["tls.crt"])
    ca_names = ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ca_names.get_values_for_type(x509.DNSName) == ["training-operator-ca"]
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["training-operator.kubeflow.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    cert.verify_directly_issued_by(ca)
    ahead = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=91)
    assert cert.not_valid_after_utc > ahead and ca.not_valid_after_utc > ahead
    assert sorted(bundle) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    # buildArtifactsFromSecret parses ca.key with x509.ParsePKCS1PrivateKey
    assert bundle["ca.key"].startswith(b"-----BEGIN RSA PRIVATE KEY-----")


def test_webhooks_are_pointed_at_loopback_by_url():
    docs: list[dict] = [{"kind": "ValidatingWebhookConfiguration",
             "metadata": {"name": "v", "annotations": {"cert-manager.io/inject-ca-from": "ns/cert"}},
             "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "s", "namespace": "n",
                                                                    "path": "/validate-x"}}}]},
            {"kind": "Deployment", "metadata": {"name": "d"}}]
    [configuration] = operators.webhooks_by_url(docs, 4443, b"PEM")
    assert configuration["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:4443/validate-x",
                                                            "caBundle": base64.b64encode(b"PEM").decode()}
    assert configuration["metadata"]["annotations"] == {}


def test_gated_master_template_keeps_subgroup_name(tmp_path):
    """DESIGN.md §2: the Master's pods carry ``kai.scheduler/subgroup-name: master`` (the workload
    webhook writes it on the Master template), with or without ``--gate-pods`` (§9 adds the gang
    annotations beside it)."""
    import json
    import os
    import subprocess

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "pt", "namespace": "default",
                        "annotations": {"kai.scheduler/topology": "cluster-topology",
                                        "kai.scheduler/segment-size": "2"}},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "b"}]}}},
               "Worker": {"replicas": 4, "template": {"spec": {"containers": [{"name": "pytorch", "image": "b"}]}}}}}}
    path = tmp_path / "pt.json"
    path.write_text(json.dumps(job))
    topologies = paths.SHARED / "examples" / "topology.yaml"
    result = subprocess.run([sys.executable, "-m", "webhook.cli", "review", "-f", str(path), "-o", "yaml",
                             "--gate-pods", "--topology-file", str(topologies)],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert result.returncode == 0, result.stderr
    admitted = yaml.safe_load(result.stdout)  # the object with the webhook's JSONPatch applied
    master = admitted["spec"]["pytorchReplicaSpecs"]["Master"]["template"].get("metadata") or {}
    assert (master.get("annotations") or {}).get("segments.dev/gang-size") == "5"
    assert (master.get("labels") or {}).get("kai.scheduler/subgroup-name") == "master"
