"""CA and serving certificate generation for the webhook's TLS endpoint (``cryptography``).

kube-apiserver calls an admission webhook over HTTPS only, and verifies the serving certificate
against the ``caBundle`` of the ``MutatingWebhookConfiguration``. The serving certificate's
subjectAltNames cover every name the apiserver (and a local test) may use for the Service:
``NAME``, ``NAME.NS``, ``NAME.NS.svc``, ``NAME.NS.svc.cluster.local``, ``localhost``, ``127.0.0.1``.

Two entry points:

* :func:`generate`: a new CA and a serving certificate; ``serve`` uses it for a local
  ``--cert-dir`` that holds nothing (the CA key is kept as ``ca.key``, so ``certs`` can renew).
* :func:`renew` (``segment-webhook certs``): **reuses the CA found in the output directory**
  (``ca.crt`` + ``ca.key``) and signs a new serving certificate with it, so the ``caBundle`` stays
  the same and a rollout never meets a certificate its apiserver does not trust (DESIGN.md §10).
  With ``new_ca`` it makes a new CA; the CA it replaces stays in ``ca-bundle.crt`` (new CA first,
  then the old one) until the next run without ``new_ca``, so a ``caBundle`` taken from
  ``ca-bundle.crt`` trusts old and new pods during the rollout.

Files written by :func:`write_certificates` (the layout of a ``kubernetes.io/tls`` Secret plus
the CA): ``ca.crt`` (PEM, 0644), ``tls.crt`` (PEM, 0644), ``tls.key`` (PEM PKCS#8, 0600); from
:func:`renew` and :func:`generate` also ``ca.key`` (PEM PKCS#8, 0600: keep it private, it signs every
future serving certificate); from :func:`renew` ``ca-bundle.crt`` (PEM, 0644: what goes into ``caBundle``).

Keys are ECDSA P-256 (supported by kube-apiserver and every TLS 1.2+ client; fast to generate).
A new CA is valid for :data:`CA_DAYS` days, a serving certificate for ``days``.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import tempfile
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.errors import SegmentWebhookError

DEFAULT_SERVICE = "segment-webhook"
DEFAULT_NAMESPACE = "segment-webhook-system"
DEFAULT_DAYS = 365

CA_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"
CA_BUNDLE_FILE = "ca-bundle.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"

#: Validity of a new CA in days (10 years): it outlives many serving certificates, which
#: :func:`renew` signs with it.
CA_DAYS = 3650

#: Clock-skew allowance: certificates are valid from this long before "now".
_BACKDATE = _dt.timedelta(minutes=5)


class CertificateError(SegmentWebhookError, ValueError):
    """Bad input to certificate generation (names the argument) or an unwritable directory."""


@dataclass(frozen=True)
class CertificateBundle:
    """PEM bytes of one generated CA + serving certificate.

    ``ca_pem``: the CA certificate; ``cert_pem``: the serving certificate; ``key_pem``: the
    serving certificate's private key (unencrypted PKCS#8). ``dns_names`` / ``ip_addresses``:
    the subjectAltNames of the serving certificate, in order. ``ca_key_pem``: the CA's private
    key when it is to be kept (:func:`renew`), else None. ``ca_bundle_pem``: the CA certificates
    for ``caBundle`` (this CA, then a CA it replaced), or None (then only ``ca_pem``).
    ``reused_ca``: True when the CA was loaded, not made.
    """

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    ca_key_pem: bytes | None = None
    ca_bundle_pem: bytes | None = None
    reused_ca: bool = False


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


def _check_days(days: object) -> None:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise CertificateError(f"--days {days!r} must be a whole number of days from 1 to 3650")


def _new_ca(service: str, namespace: str, now: _dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA (valid from ``now - 5 min`` for :data:`CA_DAYS` days) and its key."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "segment-webhook"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"segment-webhook CA for {service}.{namespace}"),
    ])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_cert, ca_key


def _issue(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, service: str, namespace: str,
           days: int, now: _dt.datetime) -> CertificateBundle:
    """A serving certificate for the Service, signed by the CA (valid from ``now - 5 min`` for
    ``days`` days). Returns a bundle without the CA key."""
    dns_names = service_dns_names(service, namespace)
    ips = ("127.0.0.1",)
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName(
        [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    )
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _dt.timedelta(days=days))
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


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def generate(
    service: str = DEFAULT_SERVICE,
    namespace: str = DEFAULT_NAMESPACE,
    days: int = DEFAULT_DAYS,
    *,
    now: _dt.datetime | None = None,
) -> CertificateBundle:
    """Make a new CA and a serving certificate for ``service`` in ``namespace``; the bundle keeps
    the CA key (``ca_key_pem``), so :func:`write_certificates` writes ``ca.key`` (0600) beside
    ``ca.crt`` and a later ``segment-webhook certs --out`` on the same directory reuses that CA.

    ``days``: validity of the serving certificate, in days (1..3650); the CA is valid for
    :data:`CA_DAYS`. ``now``: the issuing time (UTC; default the current time), certificates are
    valid from ``now - 5 min``. Raises :class:`CertificateError` for a bad name or ``days``
    (message names the flag).
    """
    _check_days(days)
    service_dns_names(service, namespace)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    ca_cert, ca_key = _new_ca(service, namespace, now)
    return replace(_issue(ca_cert, ca_key, service, namespace, days, now), ca_key_pem=_key_pem(ca_key))


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CertificateError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _load_ca(out_dir: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    """The CA kept in ``out_dir`` (``ca.crt`` + ``ca.key``), or None when neither file exists.
    Raises :class:`CertificateError` naming the file and the fix when only one exists, they do
    not load or match, or the certificate is not a CA."""
    ca_path, key_path = os.path.join(out_dir, CA_FILE), os.path.join(out_dir, CA_KEY_FILE)
    ca_pem, key_pem = _read(ca_path), _read(key_path)
    if ca_pem is None and key_pem is None:
        return None
    if key_pem is None:
        raise CertificateError(
            f"{ca_path} has no {CA_KEY_FILE} beside it (certificates that an older `segment-webhook serve` "
            "generated for itself, or an older `segment-webhook certs`, did not keep the CA key), so that CA cannot "
            "sign a new serving certificate: run with --new-ca (ca-bundle.crt then carries the old and the new CA "
            "for the rollout), or write to another --out directory")
    if ca_pem is None:
        raise CertificateError(f"{key_path} has no {CA_FILE} beside it: restore {CA_FILE}, or run with --new-ca")
    try:
        ca_cert = x509.load_pem_x509_certificate(ca_pem)
        ca_key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"cannot load the CA in {out_dir} ({CA_FILE}, {CA_KEY_FILE}): {exc}; "
                               "restore them, or run with --new-ca") from exc
    try:
        is_ca = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise CertificateError(f"{ca_path} is not a CA certificate: restore the CA, or run with --new-ca")
    cert_key = ca_cert.public_key()  # any algorithm (Ed25519 has no public_numbers): only ECDSA can match
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or not isinstance(cert_key, ec.EllipticCurvePublicKey) or \
            ca_key.public_key().public_numbers() != cert_key.public_numbers():
        raise CertificateError(f"{key_path} is not the key of {ca_path}: restore the pair, or run with --new-ca")
    return ca_cert, ca_key


def renew(
    out_dir: str,
    service: str = DEFAULT_SERVICE,
    namespace: str = DEFAULT_NAMESPACE,
    days: int = DEFAULT_DAYS,
    *,
    new_ca: bool = False,
    now: _dt.datetime | None = None,
) -> CertificateBundle:
    """What ``segment-webhook certs --out out_dir`` writes (DESIGN.md §10): a new serving
    certificate signed by the CA kept in ``out_dir`` (``reused_ca`` True), or by a new CA when
    there is none or ``new_ca`` is set. The bundle keeps the CA key (``ca_key_pem``).

    ``ca_bundle_pem``: the CA; after ``new_ca``, the new CA followed by the ``ca.crt`` it
    replaces (so kube-apiserver trusts pods of either CA while they roll). A later run without
    ``new_ca`` writes the CA alone again: run it only after that rollout has finished.

    Raises :class:`CertificateError` for a bad name or ``days``, a CA in ``out_dir`` that cannot
    be used (see the message for the fix, usually ``--new-ca``), or a kept CA that expires before
    the new serving certificate would.
    """
    _check_days(days)
    service_dns_names(service, namespace)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    old_ca_pem = _read(os.path.join(out_dir, CA_FILE)) if new_ca else None
    loaded = None if new_ca else _load_ca(out_dir)
    if loaded is not None:
        ca_cert, ca_key = loaded
        expires = ca_cert.not_valid_after_utc
        if expires < now + _dt.timedelta(days=days):
            raise CertificateError(
                f"the CA in {os.path.join(out_dir, CA_FILE)} expires on {expires:%Y-%m-%d}, before a {days}-day "
                "serving certificate would: run with --new-ca (see the README: changing the CA), or lower --days")
    else:
        ca_cert, ca_key = _new_ca(service, namespace, now)
    issued = _issue(ca_cert, ca_key, service, namespace, days, now)
    bundle_pem = issued.ca_pem
    if old_ca_pem and old_ca_pem.strip() != issued.ca_pem.strip():
        bundle_pem = issued.ca_pem + old_ca_pem if old_ca_pem.endswith(b"\n") else issued.ca_pem + old_ca_pem + b"\n"
    return CertificateBundle(
        ca_pem=issued.ca_pem, cert_pem=issued.cert_pem, key_pem=issued.key_pem,
        dns_names=issued.dns_names, ip_addresses=issued.ip_addresses,
        ca_key_pem=_key_pem(ca_key), ca_bundle_pem=bundle_pem, reused_ca=loaded is not None,
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
    missing, mode 0700); also ``ca.key`` (0600) and ``ca-bundle.crt`` (0644) when the bundle has
    them (:func:`renew`). The key is written before the certificate so that a server reloading
    on a change of ``tls.crt`` finds a matching pair; the CA key before the CA certificate.

    Returns ``{"ca": path, "cert": path, "key": path}`` plus ``"ca_key"`` and ``"ca_bundle"``
    when written. Raises :class:`CertificateError` when the directory cannot be created or
    written (message names the path).
    """
    paths = {"ca": os.path.join(out_dir, CA_FILE), "cert": os.path.join(out_dir, CERT_FILE),
             "key": os.path.join(out_dir, KEY_FILE)}
    try:
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        _atomic_write(out_dir, KEY_FILE, bundle.key_pem, 0o600)
        _atomic_write(out_dir, CERT_FILE, bundle.cert_pem, 0o644)
        if bundle.ca_key_pem is not None:
            _atomic_write(out_dir, CA_KEY_FILE, bundle.ca_key_pem, 0o600)
            paths["ca_key"] = os.path.join(out_dir, CA_KEY_FILE)
        _atomic_write(out_dir, CA_FILE, bundle.ca_pem, 0o644)
        if bundle.ca_bundle_pem is not None:
            _atomic_write(out_dir, CA_BUNDLE_FILE, bundle.ca_bundle_pem, 0o644)
            paths["ca_bundle"] = os.path.join(out_dir, CA_BUNDLE_FILE)
    except OSError as exc:
        raise CertificateError(f"cannot write certificates to {out_dir!r}: {exc.strerror or exc}") from exc
    return paths


def certificate_fingerprint(pem: bytes) -> str:
    """SHA-256 fingerprint (lower-case hex, no separators) of a PEM certificate."""
    return x509.load_pem_x509_certificate(pem).fingerprint(hashes.SHA256()).hex()


def signing_key_pair() -> tuple[bytes, bytes]:
    """A new ECDSA P-256 key pair for signing tokens: ``(private PKCS#8 PEM, public SubjectPublicKeyInfo PEM)``.

    The local control plane (``hack/local_cluster.py``) gives it to kube-apiserver as
    ``--service-account-signing-key-file`` / ``--service-account-key-file`` (ES256 service account
    tokens) and to kube-controller-manager as ``--service-account-private-key-file``.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), public_pem
