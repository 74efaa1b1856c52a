"""Run a WSGI app under gunicorn with TLS, certificate rotation and graceful shutdown.

* gunicorn's Python application API (:class:`gunicorn.app.base.BaseApplication`), no shell
  string; ``gthread`` workers so kube-apiserver's keep-alive connections are kept.
* TLS 1.2 or newer: gunicorn asks its ``ssl_context`` hook for a context for every accepted
  connection (gunicorn ≥ 21, ``gunicorn.sock.ssl_wrap_socket``); the hook returns the context of
  a :class:`CertificateReloader`, which reloads ``tls.crt``/``tls.key`` when their content
  changes (a rewritten file, or the ``..data`` symlink swap of a Kubernetes Secret volume). New handshakes present the new pair; connections already open keep theirs; no restart.
  A pair that does not load (e.g. read between the writes of key and certificate) is logged and
  the previous pair stays in use until the next handshake retries.
* Timeouts: the worker class :class:`TimedThreadWorker` (gthread) puts a socket timeout of
  ``read_timeout`` seconds on every connection it hands to a worker thread: the TLS handshake and
  every blocking read or write while a request is handled wait at most that long, so a stalled
  client holds a thread for at most ``read_timeout`` per socket operation, never forever. Idle
  keep-alive connections wait in gunicorn's poller (no thread) for ``keepalive`` seconds.
* gunicorn's own error answers (request line or headers too long or malformed: 400, 414, 431) are
  JSON ``{"error", "field"}`` like the app's.
* Graceful shutdown: SIGTERM → gunicorn stops accepting, lets in-flight requests finish for up
  to ``graceful_timeout`` seconds, closes idle keep-alive connections, exits 0.
* The app factory runs in each worker after the fork (``preload_app`` off), so every worker
  builds its own catalog and starts its own Topology watch.
* Metrics: ``child_exit`` calls ``prometheus_client.multiprocess.mark_process_dead``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import ssl
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from gunicorn import util as gunicorn_util
from gunicorn.app.base import BaseApplication
from gunicorn.http import errors as gunicorn_errors
from gunicorn.workers.gthread import TConn, ThreadWorker

from webhook.http.metrics import mark_process_dead

WSGIApplication = Callable[..., Any]

log = logging.getLogger("segment_webhook.server")


class CertificateLoadError(ValueError):
    """The serving certificate/key cannot be read or do not form a pair (message names the files)."""


class CertificateReloader:
    """Hands out an ``ssl.SSLContext`` for ``certfile``/``keyfile``, rebuilt when they change.

    ``certfile``/``keyfile``: PEM paths (a Kubernetes ``kubernetes.io/tls`` Secret mount:
    ``tls.crt``/``tls.key``). Every context has ``minimum_version = TLSv1_2``. Thread-safe
    (gthread workers handshake in several threads).
    """

    def __init__(self, certfile: str, keyfile: str):
        self.certfile = certfile
        self.keyfile = keyfile
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._stamp: tuple | None = None
        self._fingerprint: str | None = None
        self.reloads = 0  # number of successful loads (1 after the first)

    def _file_stamp(self) -> tuple:
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
            if self._context is None or (stamp is not None and stamp != self._stamp):
                try:
                    self._load_locked()
                    if self.reloads > 1:
                        log.info("serving certificate reloaded from %s (sha256 %s)", self.certfile, self._fingerprint)
                except CertificateLoadError as exc:
                    if self._context is None:
                        raise
                    log.warning("%s; still serving the previous certificate", exc)
            return self._context  # type: ignore[return-value]

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


class _TimedSocket(socket.socket):
    """An accepted socket on which ``setblocking(True)`` means "blocking with a timeout of
    ``read_timeout`` seconds" (gthread calls ``setblocking(True)`` right before the TLS wrap,
    which would otherwise clear the timeout the ``SSLSocket`` inherits)."""

    read_timeout: float | None = None

    def setblocking(self, flag: bool) -> None:
        if flag and self.read_timeout is not None:
            self.settimeout(self.read_timeout)
        else:
            super().setblocking(flag)


class _TimedConn(TConn):
    """A gthread connection whose socket gets a timeout whenever a worker thread takes it up.

    gthread calls ``init()`` every time it hands the connection to a thread, before the first
    read: gunicorn ≥ 24 from ``handle()`` right after ``sock.setblocking(True)`` (which clears
    any timeout), gunicorn 23 from ``enqueue_req()``. On the first call the accepted socket is
    replaced by a :class:`_TimedSocket`, so the TLS handshake (the ``SSLSocket`` inherits the
    timeout) and the first reads are bounded; on every call the timeout is set again after
    gunicorn's own ``setblocking(True)``. When the connection goes back to the poller for
    keep-alive, gthread makes it non-blocking (no thread waits on it there).
    """

    read_timeout: float | None = None

    def init(self) -> None:
        if not self.initialized and type(self.sock) is socket.socket:  # noqa: E721 - the accepted socket
            timed = _TimedSocket(self.sock.family, self.sock.type, self.sock.proto, fileno=self.sock.detach())
            timed.read_timeout = self.read_timeout
            self.sock = timed
        self.sock.settimeout(self.read_timeout)
        super().init()
        self.sock.settimeout(self.read_timeout)

    _closed = False

    def close(self, graceful: bool = False) -> None:
        """Close once (later calls do nothing). ``graceful``: half-close, then read and drop what
        the peer still sends for up to 2 s before closing (gunicorn's ``close_graceful``)."""
        if self._closed:
            return
        self._closed = True
        if graceful and hasattr(gunicorn_util, "close_graceful"):
            try:
                self.sock.setblocking(True)
            except OSError:
                pass
            gunicorn_util.close_graceful(self.sock)
        else:
            gunicorn_util.close(self.sock)


class _TimeoutLog(logging.Filter):
    """Turns gthread's traceback for a socket timeout ("Socket error processing request.") into
    one INFO line: a stalled client is expected, not a server error."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, TimeoutError):
            record.msg = "closed a connection: the client sent or read nothing for %s s (read timeout)"
            record.args = (self.seconds,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


#: gunicorn parse errors answered as JSON by :meth:`TimedThreadWorker.handle_error`:
#: (exception class name in ``gunicorn.http.errors``, HTTP status, reason, ``field``). Names a
#: gunicorn release does not have are skipped; anything else gets gunicorn's own answer.
_CLIENT_ERRORS = (
    ("LimitRequestLine", 414, "URI Too Long", "request-line"),
    ("LimitRequestHeaders", 431, "Request Header Fields Too Large", "headers"),
    ("InvalidRequestMethod", 400, "Bad Request", "method"),
    ("InvalidHTTPVersion", 400, "Bad Request", "request-line"),
    ("InvalidRequestLine", 400, "Bad Request", "request-line"),
    ("InvalidHeaderName", 400, "Bad Request", "headers"),
    ("InvalidHeader", 400, "Bad Request", "headers"),
    ("ObsoleteFolding", 400, "Bad Request", "headers"),
    ("InvalidChunkSize", 400, "Bad Request", "body"),
    ("ChunkMissingTerminator", 400, "Bad Request", "body"),
    ("InvalidChunkExtension", 400, "Bad Request", "body"),
    ("UnsupportedTransferCoding", 501, "Not Implemented", "Transfer-Encoding"),
)


def client_error_answer(exc: BaseException) -> bytes | None:
    """The complete HTTP/1.1 answer (JSON ``{"error", "field"}``, ``Connection: close``) for a
    request gunicorn could not parse, or None when ``exc`` is not such an error."""
    for name, status, reason, field_name in _CLIENT_ERRORS:
        cls = getattr(gunicorn_errors, name, None)
        if cls is not None and isinstance(exc, cls):
            body = json.dumps({"error": str(exc) or reason, "field": field_name}, separators=(",", ":")) + "\n"
            head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n")
            return (head + body).encode("latin-1")
    return None


def _honour_connection_close(app: WSGIApplication) -> WSGIApplication:
    """Wrap a WSGI app so that an answer with ``Connection: close`` makes gunicorn close the
    connection after it (gunicorn drops hop-by-hop headers of the app and writes its own
    ``Connection`` header from ``Response.should_close()``)."""

    def wrapped(environ: dict, start_response: Callable[..., Any]) -> Any:
        def closing_start_response(status: str, headers: list, exc_info: Any = None) -> Any:
            if any(k.lower() == "connection" and v.strip().lower() == "close" for k, v in headers):
                force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                if callable(force_close):
                    force_close()
            return start_response(status, headers, exc_info) if exc_info is not None else start_response(status, headers)

        return app(environ, closing_start_response)

    return wrapped


class TimedThreadWorker(ThreadWorker):
    """gunicorn's gthread worker with a per-connection socket timeout (:attr:`read_timeout`
    seconds) on the TLS handshake and every blocking read/write while a request is handled, JSON
    answers for requests gunicorn cannot parse, and ``Connection: close`` from the app honoured.

    Use :func:`timed_worker_class` to get a subclass with a given timeout.
    """

    read_timeout: float = 10.0

    def init_process(self) -> None:
        error_log = getattr(self.log, "error_log", None)
        if isinstance(error_log, logging.Logger) and not any(isinstance(f, _TimeoutLog) for f in error_log.filters):
            error_log.addFilter(_TimeoutLog(self.read_timeout))
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = _honour_connection_close(self.wsgi)

    def enqueue_req(self, conn: Any) -> None:
        if type(conn) is TConn:  # noqa: E721 - exactly gthread's own class, made by accept()
            conn.__class__ = _TimedConn
            conn.read_timeout = self.read_timeout
        super().enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        result = super().handle(conn)
        if result is False and isinstance(conn, _TimedConn):
            # Close here, in the worker thread: gthread would do the graceful close (a linger of
            # up to 2 s for a peer that does not close) in the poller's thread, which accepts and
            # dispatches every connection of this worker, so a few stalled clients would stop it.
            conn.close(graceful=True)
        return result

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer = client_error_answer(exc)
        if answer is None:
            super().handle_error(req, client, addr, exc)
            return
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        try:
            gunicorn_util.write_nonblock(client, answer)
        except Exception:  # noqa: BLE001 - the client is gone; nothing to answer
            self.log.debug("Failed to send error message.")


def timed_worker_class(read_timeout: float) -> type:
    """A :class:`TimedThreadWorker` subclass whose connections time out after ``read_timeout``
    seconds of a blocked socket operation (the value of ``--read-timeout``)."""
    if not read_timeout > 0:
        raise ValueError(f"read_timeout must be positive, got {read_timeout!r}")
    return type("TimedThreadWorker", (TimedThreadWorker,), {"read_timeout": float(read_timeout)})


@dataclass
class ServeOptions:
    """gunicorn settings of the webhook (shared by ``serve`` and benchmarks).

    ``bind``: ``HOST:PORT``. ``certfile``/``keyfile``: PEM paths; both None = plain HTTP (for
    benchmarks only; kube-apiserver requires TLS). ``reloader``: the :class:`CertificateReloader`
    to use (built from certfile/keyfile when None). ``workers``: processes; ``threads``: gthread
    threads per worker. ``graceful_timeout``: seconds in-flight requests get after SIGTERM.
    ``keepalive``: seconds an idle keep-alive connection is kept; 120 is longer than the 90 s
    after which kube-apiserver's HTTP client (Go ``IdleConnTimeout``) drops idle connections itself,
    so the server never closes a connection the apiserver is about to reuse for a POST it would
    not retry. ``timeout``: seconds of worker
    silence before the master restarts it. ``worker_connections``: open connections per worker.
    ``read_timeout``: seconds every blocking socket operation of a connection being served (TLS
    handshake, reading the request line, headers and body, writing the answer) may wait before
    the connection is given up (see :class:`TimedThreadWorker`).
    ``loglevel``: gunicorn error-log level. ``accesslog``: gunicorn access log target (None = off;
    the JSON review log replaces it). ``extra``: further raw gunicorn settings.
    """

    bind: str = "0.0.0.0:8443"
    certfile: str | None = None
    keyfile: str | None = None
    reloader: CertificateReloader | None = None
    workers: int = 2
    threads: int = 8
    read_timeout: float = 10.0
    graceful_timeout: int = 30
    keepalive: int = 120
    timeout: int = 30
    worker_connections: int = 1000
    loglevel: str = "info"
    accesslog: str | None = None
    proc_name: str = "segment-webhook"
    extra: dict = field(default_factory=dict)


def _child_exit(server: Any, worker: Any) -> None:
    mark_process_dead(worker.pid)


def _worker_exit(server: Any, worker: Any) -> None:
    app = getattr(worker, "wsgi", None)
    extensions = getattr(app, "extensions", None)
    state = extensions.get("segment_webhook") if isinstance(extensions, dict) else None
    stop = getattr((state or {}).get("catalog"), "stop", None)
    if callable(stop):
        try:
            stop()
        except Exception:  # noqa: BLE001 - exiting anyway
            log.exception("stopping the topology catalog failed")


#: Settings that only newer gunicorn releases know; skipped when absent.
_OPTIONAL_SETTINGS = frozenset({"control_socket_disable"})


class _Application(BaseApplication):
    def __init__(self, app_factory: Callable[[], WSGIApplication], settings: dict):
        self._factory = app_factory
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._settings.items():
            if key in _OPTIONAL_SETTINGS and key not in self.cfg.settings:
                continue  # older gunicorn without this setting
            self.cfg.set(key, value)

    def load(self) -> WSGIApplication:
        return self._factory()


def gunicorn_settings(options: ServeOptions) -> dict:
    """The gunicorn settings for ``options``: a dict of gunicorn setting names to values.

    Includes the worker class (:func:`timed_worker_class`: gthread with ``options.read_timeout``), ``preload_app = False`` (the app factory runs in each
    worker after the fork), the ``child_exit`` hook (prometheus ``mark_process_dead``), the
    ``worker_exit`` hook (stops a live catalog), and, with TLS, ``certfile``/``keyfile`` plus the
    ``ssl_context`` hook returning the :class:`CertificateReloader`'s current context.
    ``options.extra`` is applied last. Raises :class:`CertificateLoadError` when only one of
    certfile/keyfile is given.
    """
    settings: dict[str, Any] = {
        "bind": [options.bind],
        "workers": options.workers,
        "worker_class": timed_worker_class(options.read_timeout),
        "threads": options.threads,
        "graceful_timeout": options.graceful_timeout,
        "keepalive": options.keepalive,
        "timeout": options.timeout,
        "worker_connections": options.worker_connections,
        "loglevel": options.loglevel,
        "accesslog": options.accesslog,
        "errorlog": "-",
        "proc_name": options.proc_name,
        "preload_app": False,
        "child_exit": _child_exit,
        # recent gunicorn releases open a control socket at a fixed per-user path; two servers on one
        # machine would fight over it, and the webhook does not use it.
        "control_socket_disable": True,
        "worker_exit": _worker_exit,
    }
    reloader = options.reloader
    if reloader is None and (options.certfile or options.keyfile):
        if not (options.certfile and options.keyfile):
            raise CertificateLoadError("both certfile and keyfile are needed for TLS")
        reloader = CertificateReloader(options.certfile, options.keyfile)
    if reloader is not None:
        settings["certfile"] = reloader.certfile
        settings["keyfile"] = reloader.keyfile

        def ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
            return reloader.context()

        settings["ssl_context"] = ssl_context
    settings.update(options.extra)
    return settings


def run(app_factory: Callable[[], WSGIApplication], options: ServeOptions) -> None:
    """Serve ``app_factory()`` (called once in every worker, after the fork) with ``options``.

    Blocks until gunicorn exits; gunicorn ends the process with ``SystemExit`` (0 after a
    graceful SIGTERM shutdown). Raises :class:`CertificateLoadError` before starting when the
    certificate pair does not load.
    """
    if options.reloader is None and (options.certfile or options.keyfile):
        if not (options.certfile and options.keyfile):
            raise CertificateLoadError("both certfile and keyfile are needed for TLS")
        options = replace(options, reloader=CertificateReloader(options.certfile, options.keyfile))
    if options.reloader is not None:
        options.reloader.load()
    _Application(app_factory, gunicorn_settings(options)).run()
