"""Run a WSGI app under gunicorn with TLS, certificate rotation and graceful shutdown.

This is the only module of the project that knows gunicorn's or gevent's internals
(tests/test_layout.py fences them here); the Flask app and the CLI see :func:`run` and
:class:`ServeOptions` only.

Serving model (README "Serving model" compares it with the gthread designs, with figures):

* gunicorn's **gevent** worker (:func:`worker_class`): one greenlet per connection. A connection
  that is idle (kube-apiserver's keep-alive pool, the spare connections a Go client dials and
  leaves unused after the TLS handshake) or slow (a client sending its headers a byte at a time)
  costs a parked greenlet, not a thread: it cannot stop the worker from answering others.
  ``worker_connections`` (1000) bounds the connections of one worker.
* Deadlines, all ``read_timeout`` seconds (``--read-timeout``, default 10): the TLS handshake;
  the request line and headers once the connection became readable (one deadline for the whole
  head, however the bytes trickle in); the request body from the end of the head (408). Writing
  the answer waits at most ``read_timeout`` per send. An idle keep-alive connection is kept
  ``keepalive`` seconds (120, longer than kube-apiserver's 90 s idle timeout).
* TLS 1.2 or newer. Every handshake's SNI callback (called for every ClientHello, with or without
  a server name) switches the connection to the current context of a
  :class:`CertificateReloader`, which reloads ``tls.crt``/``tls.key`` when their content changes
  (a rewritten file, or the ``..data`` symlink swap of a Kubernetes Secret volume). New
  handshakes present the new pair; connections already open keep theirs; no restart. A pair that
  does not load (e.g. read between the writes of key and certificate) is logged and the previous
  pair stays in use until the next handshake retries. Reloads and failures are logged on
  ``segment_webhook.server`` with time and level (:func:`configure_logging`).
* gunicorn's own error answers (request line or headers too long or malformed: 400, 414, 431) are
  JSON ``{"error", "field"}`` like the app's.
* Graceful shutdown: SIGTERM → gunicorn stops accepting, idle keep-alive connections are closed
  (within a second), in-flight requests finish for up to ``graceful_timeout`` seconds, exit 0.
* The app factory runs in each worker after the fork (``preload_app`` off), so every worker
  builds its own catalog and starts its own Topology watch.
* Metrics: ``child_exit`` calls ``prometheus_client.multiprocess.mark_process_dead``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from gunicorn import util as gunicorn_util
from gunicorn.app.base import BaseApplication
from gunicorn.http import errors as gunicorn_errors

from webhook.http.metrics import mark_process_dead
from webhook.errors import SegmentWebhookError

WSGIApplication = Callable[..., Any]

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

    def _switch(self, ssl_socket: Any, server_name: str | None, initial: ssl.SSLContext) -> None:
        try:
            ssl_socket.context = self.context()
        except Exception:  # noqa: BLE001 - keep the context the handshake started with
            log.exception("cannot switch a handshake to the current serving certificate")

    def serving_context(self) -> ssl.SSLContext:
        """A server context, built now, whose every handshake presents the pair that is current at
        that moment (an SNI callback, which OpenSSL calls for every ClientHello, switches the
        connection to :meth:`context`). Built in the worker process: after gevent has patched
        the ``ssl`` module, the context is gevent's (cooperative sockets), and its
        ``wrap_socket`` defers the handshake to the worker (see :func:`worker_class`).
        Raises :class:`CertificateLoadError` when no pair loads."""
        current = self.context()
        context = _deferred_handshake_context_class()(ssl.PROTOCOL_TLS_SERVER)
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


class _TimeoutLog(logging.Filter):
    """Turns gunicorn's traceback for a socket timeout ("Socket error processing request.", e.g. a
    client that stopped reading its answer) into one INFO line: a stalled client is expected,
    not a server error."""

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


#: gunicorn parse errors answered as JSON by :meth:`WebhookWorker.handle_error`: (exception class
#: name in ``gunicorn.http.errors``, HTTP status, reason, ``field``). Names a gunicorn release does
#: not have are skipped; anything else gets gunicorn's own answer. Errors in a chunked body are
#: raised while the app reads it and answered by the app (400, ``field: body``).
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


class _DeadlineInput:
    """``wsgi.input`` with a whole-body deadline: every read may wait only for the time left until
    ``deadline`` (``time.monotonic()`` seconds), so a client that sends one byte now and then
    cannot stretch the body past it. A read after the deadline, or one that waits past it, raises
    ``TimeoutError`` (the app answers 408). Runs in a gevent worker (a ``gevent.Timeout`` bounds
    each read)."""

    def __init__(self, stream: Any, deadline: float):
        self._stream, self._deadline = stream, deadline

    def _call(self, method: str, *args: Any) -> Any:
        import gevent

        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request body did not arrive before its deadline")
        # One read of n bytes may take many socket reads: the deadline bounds them all.
        with gevent.Timeout(remaining, TimeoutError("the request body did not arrive before its deadline")):
            return getattr(self._stream, method)(*args)

    def read(self, size: int | None = None) -> bytes:
        return self._call("read", size)

    def readline(self, size: int | None = None) -> bytes:
        return self._call("readline", size)

    def readlines(self, hint: int | None = None) -> list:
        return self._call("readlines", hint)

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


def _serving_middleware(app: WSGIApplication, read_timeout: float) -> WSGIApplication:
    """Wrap a WSGI app for gunicorn: the request body gets a whole-body deadline of
    ``read_timeout`` seconds from the moment the request head has been read
    (:class:`_DeadlineInput`); writing the answer waits at most ``read_timeout`` per send; an
    answer with ``Connection: close`` makes gunicorn close the connection after it (gunicorn drops
    an app's hop-by-hop headers and decides from ``Response.should_close()``)."""

    def wrapped(environ: dict, start_response: Callable[..., Any]) -> Any:
        sock = environ.get("gunicorn.socket")
        if sock is not None and hasattr(sock, "settimeout"):
            sock.settimeout(read_timeout)
            environ["wsgi.input"] = _DeadlineInput(environ["wsgi.input"], time.monotonic() + read_timeout)

        def closing_start_response(status: str, headers: list, exc_info: Any = None) -> Any:
            if any(k.lower() == "connection" and v.strip().lower() == "close" for k, v in headers):
                force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                if callable(force_close):
                    force_close()
            return start_response(status, headers, exc_info) if exc_info is not None else start_response(status, headers)

        return app(environ, closing_start_response)

    return wrapped


class _CloseConnection(StopIteration):
    """Raised by :class:`_RequestHeadDeadline` to end a keep-alive connection quietly (gunicorn's
    async worker closes a connection on ``StopIteration`` from reading the next request)."""


class _RequestHeadDeadline:
    """The ``timeout_ctx`` of :class:`WebhookWorker` around reading one request head.

    ``__enter__`` waits (no CPU, a greenlet parked on the socket) until the connection is
    readable: at most ``idle_seconds`` (``keepalive``) for a keep-alive connection, and only
    while the worker is alive (so SIGTERM closes idle connections at once); then the request
    line and headers must all arrive within ``head_seconds`` (a ``gevent.Timeout`` that ends the
    read silently, and gunicorn closes the connection). A connection that stays idle, or a
    worker that is stopping, raises :class:`_CloseConnection`.
    """

    def __init__(self, worker: Any, sock: Any, idle_seconds: float, head_seconds: float):
        self._worker, self._sock = worker, sock
        self._idle, self._head = idle_seconds, head_seconds
        self._timeout: Any = None

    def _wait_readable(self) -> None:
        import gevent.socket

        sock = self._sock
        if sock is None or (hasattr(sock, "pending") and sock.pending()):
            return
        sock.settimeout(None)  # the head deadline below bounds the reads, not a per-read timeout
        end = time.monotonic() + self._idle
        while True:
            if not self._worker.alive:
                raise _CloseConnection("the worker is shutting down")
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise _CloseConnection("keep-alive connection idle for longer than keepalive")
            try:
                gevent.socket.wait_read(sock.fileno(), timeout=min(remaining, 1.0))
                return
            except gevent.socket.timeout:
                continue
            except (OSError, ValueError):
                return  # closed: the read below finds out

    def __enter__(self) -> "_RequestHeadDeadline":
        import gevent

        self._wait_readable()
        self._timeout = gevent.Timeout(self._head, False)
        self._timeout.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._timeout.__exit__(*exc)


def _worker_base() -> type:
    from gunicorn.workers.ggevent import GeventWorker

    return GeventWorker


def _deferred_handshake_context_class() -> type:
    """A subclass of the current ``ssl.SSLContext`` (gevent's, once a gevent worker has patched
    the standard library) whose ``wrap_socket`` never handshakes on connect: gevent's server
    wraps each accepted socket before the worker sees it, and a handshake there would have no
    deadline. :meth:`WebhookWorker.handle` does it under one."""
    base = ssl.SSLContext
    cls = _DEFERRED_CLASSES.get(base)
    if cls is None:
        def wrap_socket(self: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
            kwargs["do_handshake_on_connect"] = False
            return base.wrap_socket(self, sock, *args, **kwargs)

        cls = type("DeferredHandshakeContext", (base,), {"wrap_socket": wrap_socket})
        _DEFERRED_CLASSES[base] = cls
    return cls


_DEFERRED_CLASSES: dict = {}


class _WorkerMixin:
    """What :class:`WebhookWorker` adds to gunicorn's gevent worker (kept apart so the worker class
    is built only when gunicorn's gevent module is importable)."""

    read_timeout: float = 10.0

    def init_process(self) -> None:
        error_log = getattr(self.log, "error_log", None)
        if isinstance(error_log, logging.Logger) and not any(isinstance(f, _TimeoutLog) for f in error_log.filters):
            error_log.addFilter(_TimeoutLog(self.read_timeout))
        super().init_process()  # type: ignore[misc]

    def load_wsgi(self) -> None:
        super().load_wsgi()  # type: ignore[misc]
        self.wsgi = _serving_middleware(self.wsgi, self.read_timeout)
        # What the app loaded (catalog, modules) lives as long as the worker: out of the
        # collector's sight, so collections scan only what requests allocate.
        gc.collect()
        gc.freeze()

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        import gevent

        gevent.getcurrent()._webhook_client = client
        if isinstance(client, ssl.SSLSocket):
            try:
                with gevent.Timeout(self.read_timeout):
                    client.do_handshake()
            except (gevent.Timeout, OSError, ValueError) as exc:
                self.log.debug("TLS handshake with %s failed or timed out: %s", addr, exc)
                gunicorn_util.close(client)
                return
        super().handle(listener, client, addr)  # type: ignore[misc]

    def timeout_ctx(self) -> Any:
        import gevent

        client = getattr(gevent.getcurrent(), "_webhook_client", None)
        return _RequestHeadDeadline(self, client, float(self.cfg.keepalive), self.read_timeout)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer = client_error_answer(exc)
        if answer is None:
            super().handle_error(req, client, addr, exc)  # type: ignore[misc]
            return
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        try:
            gunicorn_util.write(client, answer)
        except Exception:  # noqa: BLE001 - the client is gone; nothing to answer
            self.log.debug("Failed to send error message.")


def worker_class(read_timeout: float) -> type:
    """gunicorn's gevent worker (one greenlet per connection) made safe for kube-apiserver's
    clients and slow ones, with ``read_timeout`` seconds as the deadline of a TLS handshake, of a
    request head once its first byte arrived, and of a request body:

    * the TLS handshake runs in the connection's greenlet under a ``gevent.Timeout``;
    * an idle keep-alive connection (or one a Go client opened and left unused) is a greenlet
      parked on its socket for up to ``keepalive`` seconds: no thread, no CPU;
    * request line and headers must arrive within ``read_timeout`` (one deadline, however the
      bytes trickle in); the body likewise (answered 408 by the app);
    * gunicorn's parse errors are answered as JSON (:func:`client_error_answer`).

    Raises ``ValueError`` for a non-positive ``read_timeout``; ``RuntimeError`` from gunicorn
    when gevent is missing or too old.
    """
    if not read_timeout > 0:
        raise ValueError(f"read_timeout must be positive, got {read_timeout!r}")
    return type("WebhookWorker", (_WorkerMixin, _worker_base()), {"read_timeout": float(read_timeout)})


@dataclass
class ServeOptions:
    """gunicorn settings of the webhook (shared by ``serve`` and benchmarks).

    ``bind``: ``HOST:PORT``. ``certfile``/``keyfile``: PEM paths; both None = plain HTTP (for
    benchmarks only; kube-apiserver requires TLS). ``reloader``: the :class:`CertificateReloader`
    to use (built from certfile/keyfile when None). ``workers``: processes. ``threads``: not used
    by the gevent worker (kept for the command line's ``--threads``, which is ignored). ``graceful_timeout``: seconds in-flight requests get after SIGTERM.
    ``keepalive``: seconds an idle keep-alive connection is kept; 120 is longer than the 90 s
    after which kube-apiserver's HTTP client (Go ``IdleConnTimeout``) drops idle connections itself,
    so the server never closes a connection the apiserver is about to reuse for a POST it would
    not retry. ``timeout``: seconds of worker
    silence before the master restarts it. ``worker_connections``: open connections per worker.
    ``read_timeout``: deadline in seconds of a TLS handshake, of a request head once it started
    and of a request body, and the longest wait of one send of an answer (see
    :func:`worker_class`). ``worker_connections``: open connections per worker (each a greenlet).
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


#: Format of the ``segment_webhook.*`` log lines (the review log has its own, bare JSON): time,
#: process, level, logger, message, as gunicorn's own error log.
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S %z"


def configure_logging(stream: Any = None, level: int = logging.INFO) -> None:
    """Send the ``segment_webhook`` loggers (certificate reloads, catalog, envelope errors) to
    ``stream`` (default stderr) as ``[time] [pid] [LEVEL] logger: message`` lines from ``level``
    up; once per process (a second call does nothing). The review log (``segment_webhook.review``)
    keeps its own handler and format."""
    root = logging.getLogger("segment_webhook")
    if any(getattr(h, "_segment_webhook", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
    handler._segment_webhook = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)


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

    Includes the worker class (:func:`worker_class`: gevent with ``options.read_timeout``), ``preload_app = False`` (the app factory runs in each
    worker after the fork), the ``child_exit`` hook (prometheus ``mark_process_dead``), the
    ``worker_exit`` hook (stops a live catalog), and, with TLS, ``certfile``/``keyfile`` plus the
    ``ssl_context`` hook returning the :class:`CertificateReloader`'s current context.
    ``options.extra`` is applied last. Raises :class:`CertificateLoadError` when only one of
    certfile/keyfile is given.
    """
    settings: dict[str, Any] = {
        "bind": [options.bind],
        "workers": options.workers,
        "worker_class": worker_class(options.read_timeout),
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
            return reloader.serving_context()

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
    configure_logging()
    _Application(app_factory, gunicorn_settings(options)).run()
