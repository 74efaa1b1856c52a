"""The serving certificate: load ``tls.crt``/``tls.key``, reload them when their content changes,
and hand every new TLS handshake the pair that is current at that moment.

No server framework here (gunicorn and gevent are the worker's, ``webhook.http.worker``): the
server builds its context with :meth:`CertificateReloader.serving_context`, the app asks
:meth:`CertificateReloader.ready` for ``/readyz`` (DESIGN.md §10: "TLS loaded").

Rotation without restart: the context's SNI callback (OpenSSL calls it for every ClientHello, with
or without a server name) switches each new connection to the current pair, reloaded whenever the
content of the files changes (an in-place rewrite, or the ``..data`` symlink swap kubelet does for
a Secret volume). Connections already open keep theirs. A pair that does not load (e.g. the key
written but not yet the certificate) is logged as a WARNING on ``segment_webhook.server`` and the
previous pair stays in use until the next handshake retries; a reload is logged as INFO with the
new fingerprint. Every context has ``minimum_version = TLSv1_2``.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
from typing import Any

from webhook.errors import SegmentWebhookError

log = logging.getLogger("segment_webhook.server")


class CertificateLoadError(SegmentWebhookError, ValueError):
    """The serving certificate/key cannot be read or do not form a pair (message names the files)."""


class CertificateReloader:
    """Hands out an ``ssl.SSLContext`` for ``certfile``/``keyfile``, rebuilt when they change.

    ``certfile``/``keyfile``: PEM paths (a Kubernetes ``kubernetes.io/tls`` Secret mount:
    ``tls.crt``/``tls.key``). Every context has ``minimum_version = TLSv1_2``. Thread-safe.
    :meth:`serving_context` is the context to give the server: its handshakes use the current
    pair.
    """

    def __init__(self, certfile: str, keyfile: str):
        self.certfile = certfile
        self.keyfile = keyfile
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._stamp: tuple[Any, ...] | None = None
        self._fingerprint: str | None = None
        self.reloads = 0  # number of successful loads (1 after the first)

    def _file_stamp(self) -> tuple[Any, ...]:
        # The files' content, hashed: a few KiB read per handshake (microseconds, against a
        # millisecond handshake), immune to coarse mtimes and in-place rewrites.
        stamp = []
        for path in (self.certfile, self.keyfile):
            with open(path, "rb") as fh:
                stamp.append(hashlib.sha256(fh.read()).digest())
        return tuple(stamp)

    def load(self) -> ssl.SSLContext:
        """Build a context from the files now, unconditionally, and make it current.

        Returns the new context. Raises :class:`CertificateLoadError` when a file is missing,
        unreadable or the key does not match the certificate.
        """
        with self._lock:
            return self._load_locked()

    def _load_locked(self) -> ssl.SSLContext:
        try:
            stamp = self._file_stamp()
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(certfile=self.certfile, keyfile=self.keyfile)
            with open(self.certfile, "rb") as fh:
                der = ssl.PEM_cert_to_DER_cert(fh.read().decode("ascii", "replace"))
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise CertificateLoadError(
                f"cannot load the serving certificate {self.certfile} with key {self.keyfile}: {exc}"
            ) from exc
        self._context, self._stamp = context, stamp
        self._fingerprint = hashlib.sha256(der).hexdigest()
        self.reloads += 1
        return context

    def context(self) -> ssl.SSLContext:
        """The current context, reloaded first if the files changed since the last load.

        A failed reload keeps the previous context (logged, retried on the next call). Raises
        :class:`CertificateLoadError` only when no pair was ever loaded.
        """
        with self._lock:
            try:
                stamp = self._file_stamp()
            except OSError:
                stamp = None
            if self._context is None:  # no pair loaded yet: CertificateLoadError when none loads
                return self._load_locked()
            if stamp is not None and stamp != self._stamp:
                try:
                    self._load_locked()
                    log.info("serving certificate reloaded from %s (sha256 %s)", self.certfile, self._fingerprint)
                except CertificateLoadError as exc:
                    log.warning("%s; still serving the previous certificate", exc)
            return self._context

    def _switch(self, ssl_socket: Any, server_name: str | None, initial: ssl.SSLContext) -> None:
        try:
            ssl_socket.context = self.context()
        except Exception:
            log.exception("cannot switch a handshake to the current serving certificate")

    def serving_context(self, context_class: type[ssl.SSLContext] | None = None) -> ssl.SSLContext:
        """A server context, built now, whose every handshake presents the pair that is current at
        that moment (an SNI callback, which OpenSSL calls for every ClientHello, switches the
        connection to :meth:`context`).

        ``context_class``: the ``ssl.SSLContext`` (sub)class to build, default the ``ssl``
        module's current one (the server passes its worker's, see ``webhook.http.worker``).
        Raises :class:`CertificateLoadError` when no pair loads."""
        context_class = context_class or ssl.SSLContext
        current = self.context()
        context = context_class(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(certfile=self.certfile, keyfile=self.keyfile)
        except (OSError, ssl.SSLError) as exc:  # rotated between the two reads: the callback has the pair
            log.warning("serving context built without its own pair (%s); handshakes use the reloaded one", exc)
        context.options |= current.options & ssl.OP_NO_COMPRESSION
        context.sni_callback = self._switch
        return context

    def ready(self) -> bool:
        """True when a certificate pair is loaded (loads it now if needed)."""
        try:
            self.context()
            return True
        except CertificateLoadError:
            return False

    @property
    def fingerprint(self) -> str | None:
        """SHA-256 (hex) of the DER of the certificate currently served, None before a load."""
        return self._fingerprint
