"""CA and serving certificate generation for the webhook's TLS endpoint (``cryptography``).

kube-apiserver calls an admission webhook over HTTPS only, and verifies the serving certificate
against the ``caBundle`` of the ``MutatingWebhookConfiguration``. :func:`generate` makes a fresh
self-signed CA and a serving certificate signed by it whose subjectAltNames cover every name the
apiserver (and a local test) may use for the Service:
``NAME``, ``NAME.NS``, ``NAME.NS.svc``, ``NAME.NS.svc.cluster.local``, ``localhost``, ``127.0.0.1``.

Files written by :func:`write_certificates` (the layout of a ``kubernetes.io/tls`` Secret plus
the CA): ``ca.crt`` (PEM, 0644, goes into ``caBundle``), ``tls.crt`` (PEM, 0644), ``tls.key``
(PEM PKCS#8, mode 0600). The CA's private key is not kept: a new run makes a new CA, and the
``caBundle`` must be updated with the new ``ca.crt``.

Keys are ECDSA P-256 (supported by kube-apiserver and every TLS 1.2+ client; fast to generate).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import tempfile
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_SERVICE = "segment-webhook"
DEFAULT_NAMESPACE = "segment-webhook-system"
DEFAULT_DAYS = 365

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"

#: Clock-skew allowance: certificates are valid from this long before "now".
_BACKDATE = _dt.timedelta(minutes=5)


class CertificateError(ValueError):
    """Bad input to certificate generation (names the argument) or an unwritable directory."""


@dataclass(frozen=True)
class CertificateBundle:
    """PEM bytes of one generated CA + serving certificate.

    ``ca_pem``: the CA certificate; ``cert_pem``: the serving certificate; ``key_pem``: the
    serving certificate's private key (unencrypted PKCS#8). ``dns_names`` / ``ip_addresses``:
    the subjectAltNames of the serving certificate, in order.
    """

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The DNS subjectAltNames for a Service (kube-apiserver dials ``NAME.NS.svc``; the other
    forms cover in-cluster clients and local runs).

    Returns ``(NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local, "localhost")``.
    Raises :class:`CertificateError` naming ``--service`` / ``--namespace`` when a value is not a
    DNS-1123 label (the Kubernetes rule for Service and Namespace names).
    """
    for flag, value in (("--service", service), ("--namespace", namespace)):
        if not _is_dns_label(value):
            raise CertificateError(
                f"{flag} {value!r} is not a valid Kubernetes name: use at most 63 lower-case "
                "letters, digits and '-', starting and ending with a letter or digit"
            )
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
    )


def _is_dns_label(value: object) -> bool:
    if not isinstance(value, str) or not 1 <= len(value) <= 63:
        return False
    if not (value[0].isalnum() and value[-1].isalnum()):
        return False
    return all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in value)


def generate(
    service: str = DEFAULT_SERVICE,
    namespace: str = DEFAULT_NAMESPACE,
    days: int = DEFAULT_DAYS,
    *,
    now: _dt.datetime | None = None,
) -> CertificateBundle:
    """Make a new CA and a serving certificate for ``service`` in ``namespace``.

    ``days``: validity of both certificates, in days (1..3650). ``now``: the issuing time
    (UTC; default the current time), certificates are valid from ``now - 5 min``.
    Raises :class:`CertificateError` for a bad name or ``days`` (message names the flag).
    """
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise CertificateError(f"--days {days!r} must be a whole number of days from 1 to 3650")
    dns_names = service_dns_names(service, namespace)
    ips = ("127.0.0.1",)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    not_before = now - _BACKDATE
    not_after = now + _dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "segment-webhook"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"segment-webhook CA for {service}.{namespace}"),
    ])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName(
        [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(san, critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return CertificateBundle(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        dns_names=dns_names,
        ip_addresses=ips,
    )


def _atomic_write(directory: str, name: str, data: bytes, mode: int) -> None:
    """Write ``directory/name`` via a temporary file + ``os.replace`` so a reader (the running
    server reloading its certificate) never sees a half-written file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_certificates(bundle: CertificateBundle, out_dir: str) -> dict[str, str]:
    """Write ``ca.crt``, ``tls.crt`` (0644) and ``tls.key`` (0600) into ``out_dir`` (created if
    missing, mode 0700). The key is written before the certificate so that a server reloading
    on a change of ``tls.crt`` finds a matching pair.

    Returns ``{"ca": path, "cert": path, "key": path}``. Raises :class:`CertificateError` when
    the directory cannot be created or written (message names the path).
    """
    try:
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        _atomic_write(out_dir, KEY_FILE, bundle.key_pem, 0o600)
        _atomic_write(out_dir, CERT_FILE, bundle.cert_pem, 0o644)
        _atomic_write(out_dir, CA_FILE, bundle.ca_pem, 0o644)
    except OSError as exc:
        raise CertificateError(f"cannot write certificates to {out_dir!r}: {exc.strerror or exc}") from exc
    return {
        "ca": os.path.join(out_dir, CA_FILE),
        "cert": os.path.join(out_dir, CERT_FILE),
        "key": os.path.join(out_dir, KEY_FILE),
    }


def certificate_fingerprint(pem: bytes) -> str:
    """SHA-256 fingerprint (lower-case hex, no separators) of a PEM certificate."""
    return x509.load_pem_x509_certificate(pem).fingerprint(hashes.SHA256()).hex()
