"""Certificate generation (`segment-webhook certs`, webhook.http.certs; DESIGN.md §10 certificate rotation)."""

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
    assert sorted(os.listdir(default_dir)) == ["ca-bundle.crt", "ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert stat.S_IMODE(os.stat(default_dir / "tls.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(default_dir / "ca.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(default_dir).st_mode) == 0o700
    # One CA so far: the caBundle is that CA.
    assert (default_dir / "ca-bundle.crt").read_bytes() == (default_dir / "ca.crt").read_bytes()


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
    assert key.public_key() == cert.public_key()


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
    assert sorted(os.listdir(tmp_path)) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]  # no temp files left


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


# ------------------------------------------------------------------ CA kept across runs (DESIGN.md §10)

SERVICE_DNS = "segment-webhook.segment-webhook-system.svc"  # the name kube-apiserver dials


def _cli_certs(out, *extra):
    return subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=60)


def _pems(data: bytes) -> list[bytes]:
    return [b"-----BEGIN CERTIFICATE-----" + part for part in data.split(b"-----BEGIN CERTIFICATE-----")[1:]]


def _verify_serving(cert_pem: bytes, trusted_pem: bytes) -> None:
    """Verify like a TLS client of the Service: chain to a CA in ``trusted_pem`` (a caBundle)
    and the name ``segment-webhook.segment-webhook-system.svc``. Raises on failure."""
    from cryptography.x509 import DNSName
    from cryptography.x509.verification import PolicyBuilder, Store

    store = Store([x509.load_pem_x509_certificate(p) for p in _pems(trusted_pem)])
    verifier = PolicyBuilder().store(store).build_server_verifier(DNSName(SERVICE_DNS))
    verifier.verify(x509.load_pem_x509_certificate(cert_pem), [])


def test_certs_run_twice_keeps_the_ca_and_the_new_certificate_verifies_against_it(tmp_path):
    out = tmp_path / "certs"
    assert _cli_certs(out).returncode == 0
    ca_before, ca_key_before = (out / "ca.crt").read_bytes(), (out / "ca.key").read_bytes()
    tls_before = (out / "tls.crt").read_bytes()

    second = _cli_certs(out)
    assert second.returncode == 0, second.stderr
    assert "kept the CA in" in second.stdout
    assert (out / "ca.crt").read_bytes() == ca_before
    assert (out / "ca.key").read_bytes() == ca_key_before
    assert (out / "ca-bundle.crt").read_bytes() == ca_before
    tls_after = (out / "tls.crt").read_bytes()
    assert tls_after != tls_before  # a new serving certificate ...
    _verify_serving(tls_after, ca_before)  # ... that the unchanged caBundle trusts
    _verify_serving(tls_before, ca_before)  # and so do pods still serving the old one
    key = serialization.load_pem_private_key((out / "tls.key").read_bytes(), password=None)
    assert key.public_key() == x509.load_pem_x509_certificate(tls_after).public_key()


def test_new_ca_bundles_old_and_new_until_the_next_run(tmp_path):
    out = tmp_path / "certs"
    assert _cli_certs(out).returncode == 0
    old_ca, old_tls = (out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes()

    rotated = _cli_certs(out, "--new-ca")
    assert rotated.returncode == 0, rotated.stderr
    new_ca, new_tls = (out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes()
    assert new_ca != old_ca
    bundle = (out / "ca-bundle.crt").read_bytes()
    assert _pems(bundle) == [new_ca, old_ca]  # new CA first, then the one it replaces
    # During the rollout the caBundle trusts pods of both CAs; the new CA alone does not trust old pods.
    _verify_serving(new_tls, bundle)
    _verify_serving(old_tls, bundle)
    from cryptography.x509.verification import VerificationError

    with pytest.raises(VerificationError):
        _verify_serving(old_tls, new_ca)

    # After the rollout: a run without --new-ca keeps the new CA and drops the old one.
    assert _cli_certs(out).returncode == 0
    assert (out / "ca.crt").read_bytes() == new_ca
    assert (out / "ca-bundle.crt").read_bytes() == new_ca
    _verify_serving((out / "tls.crt").read_bytes(), new_ca)


def test_a_ca_without_its_key_needs_new_ca(tmp_path):
    """A directory written by an older `certs` (ca.crt, no ca.key): a plain run refuses and says
    what to do; --new-ca makes a CA and bundles the old ca.crt with it."""
    out = tmp_path / "certs"
    old = certs.generate()
    certs.write_certificates(old, str(out))
    os.unlink(out / "ca.key")  # as an older `serve` or `certs` left the directory
    assert sorted(os.listdir(out)) == ["ca.crt", "tls.crt", "tls.key"]
    refused = _cli_certs(out)
    assert refused.returncode == 2
    assert refused.stderr == (
        f"segment-webhook certs: error: {out}/ca.crt has no ca.key beside it (certificates that an older "
        "`segment-webhook serve` generated for itself, or an older `segment-webhook certs`, did not keep the CA "
        "key), so that CA cannot sign a new serving certificate: run with --new-ca (ca-bundle.crt then carries "
        "the old and the new CA for the rollout), or write to another --out directory\n")
    assert (out / "ca.crt").read_bytes() == old.ca_pem  # nothing written
    assert _cli_certs(out, "--new-ca").returncode == 0
    assert _pems((out / "ca-bundle.crt").read_bytes()) == [(out / "ca.crt").read_bytes(), old.ca_pem]


def test_a_kept_ca_that_expires_first_is_refused(tmp_path):
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    first = certs.renew(str(tmp_path), days=365, now=start)
    certs.write_certificates(first, str(tmp_path))
    ca = x509.load_pem_x509_certificate(first.ca_pem)
    assert ca.not_valid_after_utc == dt.datetime(2035, 12, 30, tzinfo=dt.timezone.utc)  # 3650 days
    late = dt.datetime(2035, 6, 1, tzinfo=dt.timezone.utc)
    with pytest.raises(certs.CertificateError) as info:
        certs.renew(str(tmp_path), days=365, now=late)
    assert str(info.value) == (f"the CA in {tmp_path}/ca.crt expires on 2035-12-30, before a 365-day serving "
                               "certificate would: run with --new-ca (see the README: changing the CA), or lower --days")
    assert certs.renew(str(tmp_path), days=180, now=late).reused_ca is True


def test_a_ca_key_that_does_not_match_is_refused(tmp_path):
    certs.write_certificates(certs.renew(str(tmp_path)), str(tmp_path))
    other = certs.renew(str(tmp_path / "other"))
    (tmp_path / "ca.key").write_bytes(other.ca_key_pem)
    with pytest.raises(certs.CertificateError) as info:
        certs.renew(str(tmp_path))
    assert str(info.value) == (f"{tmp_path}/ca.key is not the key of {tmp_path}/ca.crt: restore the pair, "
                               "or run with --new-ca")


def _ed25519_ca(out, key_pem: bytes) -> None:
    """An Ed25519 CA certificate (self-signed, CA:TRUE) in ``out/ca.crt`` and ``key_pem`` in ``out/ca.key``."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "ed25519 ca")])
    start = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(start).not_valid_after(start + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, None))
    out.mkdir(parents=True, exist_ok=True)
    (out / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "ca.key").write_bytes(key_pem or key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))


@pytest.mark.parametrize("key", ["ec", "ed25519"])
def test_an_ed25519_ca_is_refused_as_not_the_key_of_the_ca(tmp_path, key):
    # the CA the webhook makes is ECDSA P-256: an Ed25519 CA (with an ECDSA key or its own) is refused
    # with the same words as any other key that is not the CA's (it once raised AttributeError)
    key_pem = certs.renew(str(tmp_path / "other")).ca_key_pem if key == "ec" else b""
    assert key_pem is not None  # renew() keeps the CA key in the bundle
    _ed25519_ca(tmp_path, key_pem)
    with pytest.raises(certs.CertificateError) as info:
        certs.renew(str(tmp_path))
    assert str(info.value) == (f"{tmp_path}/ca.key is not the key of {tmp_path}/ca.crt: restore the pair, "
                               "or run with --new-ca")


def test_certs_after_serve_generated_its_own_reuses_that_ca(tmp_path):
    """`serve` with an empty --cert-dir writes certs.generate() there: the CA key is kept (0600), so a
    later `certs --out` on that directory signs with the same CA (the caBundle stays valid)."""
    out = tmp_path / "certs"
    served = certs.generate()
    certs.write_certificates(served, str(out))
    assert sorted(os.listdir(out)) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert stat.S_IMODE(os.stat(out / "ca.key").st_mode) == 0o600
    renewed = _cli_certs(out)
    assert renewed.returncode == 0, renewed.stderr
    assert (out / "ca.crt").read_bytes() == served.ca_pem
    _verify_serving((out / "tls.crt").read_bytes(), served.ca_pem)
