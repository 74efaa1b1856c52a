"""Certificate generation (`segment-webhook certs`, webhook.http.certs): brief item 4."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import stat
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook.http import certs


def _load(path):
    with open(path, "rb") as fh:
        return x509.load_pem_x509_certificate(fh.read())


def _sans(cert):
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [str(i) for i in ext.get_values_for_type(x509.IPAddress)]


@pytest.fixture(scope="module")
def default_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("certs") / "out"
    proc = subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out


def test_default_files_and_modes(default_dir):
    assert sorted(os.listdir(default_dir)) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE(os.stat(default_dir / "tls.key").st_mode) == 0o600


def test_default_sans_cover_service_names(default_dir):
    dns, ips = _sans(_load(default_dir / "tls.crt"))
    assert dns == [
        "segment-webhook",
        "segment-webhook.segment-webhook-system",
        "segment-webhook.segment-webhook-system.svc",
        "segment-webhook.segment-webhook-system.svc.cluster.local",
        "localhost",
    ]
    assert ips == ["127.0.0.1"]


def test_serving_cert_is_issued_by_ca_and_is_server_only(default_dir):
    ca = _load(default_dir / "ca.crt")
    cert = _load(default_dir / "tls.crt")
    cert.verify_directly_issued_by(ca)  # raises if the signature or issuer is wrong
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_key_matches_certificate(default_dir):
    key = serialization.load_pem_private_key((default_dir / "tls.key").read_bytes(), password=None)
    cert = _load(default_dir / "tls.crt")
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_custom_service_namespace_and_days(tmp_path):
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    bundle = certs.generate("hook", "ops", 30, now=now)
    cert = x509.load_pem_x509_certificate(bundle.cert_pem)
    dns, ips = _sans(cert)
    assert dns == ["hook", "hook.ops", "hook.ops.svc", "hook.ops.svc.cluster.local", "localhost"]
    assert cert.not_valid_after_utc == dt.datetime(2026, 1, 31, tzinfo=dt.timezone.utc)
    assert cert.not_valid_before_utc == dt.datetime(2025, 12, 31, 23, 55, tzinfo=dt.timezone.utc)
    assert ipaddress.ip_address("127.0.0.1") in [ipaddress.ip_address(i) for i in ips]


def test_write_replaces_existing_pair(tmp_path):
    first = certs.write_certificates(certs.generate(), str(tmp_path))
    before = certs.certificate_fingerprint(open(first["cert"], "rb").read())
    certs.write_certificates(certs.generate(), str(tmp_path))
    after = certs.certificate_fingerprint(open(first["cert"], "rb").read())
    assert before != after
    assert sorted(os.listdir(tmp_path)) == ["ca.crt", "tls.crt", "tls.key"]  # no temp files left


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"service": "Bad_Name"}, "--service"),
        ({"namespace": "-ns"}, "--namespace"),
        ({"service": ""}, "--service"),
        ({"days": 0}, "--days"),
        ({"days": 3651}, "--days"),
    ],
)
def test_bad_arguments_name_the_flag(kwargs, flag):
    with pytest.raises(certs.CertificateError) as info:
        certs.generate(**kwargs)
    assert flag in str(info.value)


def test_cli_bad_service_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(tmp_path / "x"),
                           "--service", "UPPER"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--service 'UPPER'" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_cli_reads_environment(tmp_path):
    env = dict(os.environ, SEGMENT_WEBHOOK_SERVICE="envhook", SEGMENT_WEBHOOK_NAMESPACE="envns")
    out = tmp_path / "e"
    proc = subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(out)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    dns, _ = _sans(_load(out / "tls.crt"))
    assert "envhook.envns.svc" in dns
