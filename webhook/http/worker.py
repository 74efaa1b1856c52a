"""The worker: gunicorn's gevent worker made safe for kube-apiserver's clients and hostile ones.

This module and the runner (``webhook.http.server``) are the only ones that know gunicorn's or
gevent's internals (``tests/unit/project/test_layout.py`` fences the imports and gunicorn's environ keys);
``tests/unit/http/test_serve_framework_surface.py`` lists every attribute and hook of theirs used here and
fails when a release moves one.

One greenlet per connection (gunicorn's gevent worker). What this worker adds, ``read_timeout``
seconds (``--read-timeout``, default 10) being every deadline:

* **TLS handshake** in the connection's greenlet, under one deadline from the accept (gevent's
  server would otherwise handshake before the worker sees the connection, without one; see
  :func:`deferred_handshake_context_class`).
* **Idle connections** (waiting for the ClientHello, or for the next request of a keep-alive
  connection, up to ``keepalive`` = 120 s; kube-apiserver's Go client keeps idle connections 90 s)
  are parked on the hub: no thread, no CPU. **Idle limit:** once a worker holds more than
  ``worker_connections - keep_free`` connections (1000 - 100), each new connection closes the one
  that has been idle the longest (as nginx reuses keep-alive connections when it runs short), so
  idle clients, however many, never take the slots /healthz and new reviews need.
* **Request head**: once a request's first byte arrived, its line and headers must all arrive
  within ``read_timeout`` (one deadline, however the bytes trickle in), else the connection is
  closed; the body likewise (the app answers 408, see :class:`DeadlineInput`). Writing the answer
  waits at most ``read_timeout`` per send.
* **SIGTERM**: idle keep-alive connections are closed at once, except one whose next request has
  already arrived (:func:`input_waiting`): that request is answered, with ``Connection: close``
  (kube-apiserver's Go client does not retry a POST dropped there); a connection that was accepted and
  has not sent its first request yet (also one accepted in the second gunicorn takes to stop its
  listeners) is given ``read_timeout`` seconds to send it, is answered, and then closed: no
  connection is accepted and closed without an answer. In-flight requests finish (up to
  ``graceful_timeout``).
* **CPU-heavy work apart**: the app's :data:`webhook.http.wsgi_extensions.RUN_APART` runs a
  function in the worker's one review thread (gevent's ``ThreadPool`` of size 1), so a review that
  computes for a long time shares the CPU with the connections' greenlets (the interpreter switches
  threads every ``sys.getswitchinterval()`` seconds) instead of stalling all of them until it
  ends: gevent never preempts a greenlet that computes.
* **Chunked bodies**: a chunk-size line that declares more than the body limit (3 MiB in all,
  :data:`webhook.http.wsgi_extensions.MAX_BODY_BYTES`) is refused at once
  (:class:`BoundedChunkedReader`: the app answers 413), instead of waiting for data that would be
  refused anyway until the body's deadline (408 after ``read_timeout``).
* gunicorn's own error answers for requests it cannot parse (400, 414, 431, 501) are JSON
  ``{"error", "field"}`` like the app's (:func:`client_error_answer`).
"""

from __future__ import annotations

import collections
import fcntl
import gc
import json
import logging
import ssl
import struct
import sys
import termios
import time
from collections.abc import Callable
from typing import Any, cast

import gevent
import gevent.hub
import gevent.threadpool
from gunicorn import util as gunicorn_util
from gunicorn.http import errors as gunicorn_errors
from gunicorn.http.body import ChunkedReader
from gunicorn.workers.ggevent import GeventWorker

from webhook.http import wsgi_extensions
from webhook.http.options import DEFAULT_READ_TIMEOUT
from webhook.http.serving_log import SocketTimeoutAsInfo

WSGIApplication = Callable[..., Any]

#: Fraction of ``worker_connections`` kept free for new connections by closing the longest-idle
#: ones (see the module docstring): 1000 connections → from the 901st on.
KEEP_FREE_FRACTION = 0.1
#: The interpreter's thread switch interval in a worker, seconds (CPython's default is 0.005): how
#: long the review thread may hold the interpreter while a connection's greenlet waits for it.
SWITCH_INTERVAL_S = 0.001

#: gunicorn parse errors answered as JSON by :meth:`WebhookWorker.handle_error`: (exception class
#: name in ``gunicorn.http.errors``, HTTP status, reason, ``field``). Names a gunicorn release does
#: not have are skipped; anything else gets gunicorn's own answer. Errors in a chunked body are
#: raised while the app reads it and answered by the app (400, ``field: body``).
CLIENT_ERRORS = (
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
    for name, status, reason, field_name in CLIENT_ERRORS:
        cls = getattr(gunicorn_errors, name, None)
        if cls is not None and isinstance(exc, cls):
            body = json.dumps({"error": str(exc) or reason, "field": field_name}, separators=(",", ":")) + "\n"
            head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n")
            return (head + body).encode("latin-1")
    return None


#: Bytes of a request body read before its greenlet lets the others run (see :class:`DeadlineInput`).
YIELD_EVERY_BYTES = 64 * 1024


class DeadlineInput:
    """``wsgi.input`` with a whole-body deadline: every read may wait only for the time left until
    ``deadline`` (``time.monotonic()`` seconds), so a client that sends one byte now and then
    cannot stretch the body past it. A read after the deadline, or one that waits past it, raises
    ``TimeoutError`` (the app answers 408).

    A large body that arrives as fast as it is read never makes its greenlet wait, so it would
    keep the worker's other connections waiting until its last byte: after every
    :data:`YIELD_EVERY_BYTES` read, the greenlet lets the others run first (``gevent.sleep(0)``)."""

    def __init__(self, stream: Any, deadline: float):
        self._stream, self._deadline = stream, deadline
        self._unyielded = 0

    def _call(self, method: str, *args: Any) -> Any:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request body did not arrive before its deadline")
        # One read of n bytes may take many socket reads: the deadline bounds them all.
        with gevent.Timeout(remaining, TimeoutError("the request body did not arrive before its deadline")):
            data = getattr(self._stream, method)(*args)
        self._unyielded += len(data) if isinstance(data, bytes) else YIELD_EVERY_BYTES
        if self._unyielded >= YIELD_EVERY_BYTES:
            self._unyielded = 0
            gevent.sleep(0)
        return data

    def read(self, size: int | None = None) -> bytes:
        data: bytes = self._call("read", size)
        return data

    def readline(self, size: int | None = None) -> bytes:
        line: bytes = self._call("readline", size)
        return line

    def readlines(self, hint: int | None = None) -> list[Any]:
        lines: list[Any] = self._call("readlines", hint)
        return lines

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


class BoundedChunkedReader(ChunkedReader):
    """gunicorn's chunked body reader that raises
    :class:`~webhook.http.wsgi_extensions.BodyTooLarge` as soon as a chunk-size line brings the
    sizes declared so far over ``limit`` bytes (:data:`~webhook.http.wsgi_extensions.MAX_BODY_BYTES`),
    before the chunk's data is read. Each line is parsed by gunicorn's own ``parse_chunk_size``."""

    limit = wsgi_extensions.MAX_BODY_BYTES

    def parse_chunk_size(self, unreader: Any, data: Any = None) -> Any:
        size, rest = super().parse_chunk_size(unreader, data)
        self.declared = getattr(self, "declared", 0) + size
        if self.declared > self.limit:
            raise wsgi_extensions.BodyTooLarge(
                f"the chunked body declares {self.declared} bytes, over the {self.limit}-byte limit")
        return size, rest


def bounded_chunked_input(body: Any) -> None:
    """Put a :class:`BoundedChunkedReader` in place of gunicorn's ``ChunkedReader`` behind ``body``
    (gunicorn's ``wsgi.input``: ``Body.reader``), before anything was read of it; another reader
    (a ``Content-Length`` body) is left alone."""
    reader = getattr(body, "reader", None)
    if reader is not None and type(reader) is ChunkedReader:
        body.reader = BoundedChunkedReader(reader.req, reader.req.unreader)


def drain_socket(sock: Any, max_bytes: int, seconds: float) -> None:
    """Read and drop at most ``max_bytes`` from ``sock`` within ``seconds`` in all, each ``recv``
    waiting only for the time left (:data:`webhook.http.wsgi_extensions.DRAIN`). Never raises."""
    deadline = time.monotonic() + seconds
    try:
        prior = sock.gettimeout()
        try:
            while max_bytes > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                sock.settimeout(remaining)
                chunk = sock.recv(min(max_bytes, 65536))
                if not chunk:
                    return
                max_bytes -= len(chunk)
        finally:
            sock.settimeout(prior)
    except (OSError, ValueError):
        return  # timed out, reset or closed: the connection is closed anyway


def input_waiting(sock: Any) -> bool:
    """Whether bytes have arrived on ``sock`` that nobody has read yet: decrypted TLS bytes in the
    ``SSLSocket``'s buffer, or bytes in the kernel's receive queue (``FIONREAD``), without waiting
    or yielding. False for a closed socket or one whose client has closed it with nothing sent."""
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        queued = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        count: int = struct.unpack("i", queued)[0]
        return count > 0
    except (OSError, ValueError):
        return False


class _CloseConnection(StopIteration):
    """Ends a connection quietly from the wait for its next request: gunicorn's async worker
    closes a keep-alive connection on ``StopIteration`` from reading the next request."""


# How an idle wait ended (:meth:`WebhookWorker._idle_wait`).
_READABLE, _TIMED_OUT, _EVICTED, _STOPPING = "readable", "timed out", "evicted", "stopping"


class _Connection:
    """One accepted connection of the worker: its socket, whether a request was read on it yet,
    and the waiter that parks it while it is idle (None when it is not idle)."""

    __slots__ = ("sock", "requests", "waiter", "__weakref__")

    def __init__(self, sock: Any):
        self.sock = sock
        self.requests = 0
        self.waiter: Any = None


class _ListenerName:
    """What gunicorn's ``handle`` uses of the listening socket, its address, read at the accept
    (the listener itself is closed at SIGTERM while accepted connections are still served)."""

    __slots__ = ("_name",)

    def __init__(self, name: Any):
        self._name = name

    def getsockname(self) -> Any:
        return self._name


class _RequestHeadDeadline:
    """gunicorn's ``timeout_ctx`` around reading one request head (see the module docstring):
    ``__enter__`` waits, idle, for the request's first byte; then line and headers must arrive
    within ``read_timeout`` (a ``gevent.Timeout`` that ends the read silently, and gunicorn closes
    the connection). An idle wait that ends without data raises :class:`_CloseConnection`."""

    def __init__(self, worker: WebhookWorker, conn: _Connection | None):
        self._worker, self._conn = worker, conn
        self._timeout: Any = None

    def __enter__(self) -> _RequestHeadDeadline:
        conn, worker = self._conn, self._worker
        if conn is not None:
            first = conn.requests == 0
            conn.requests += 1
            sock = conn.sock
            if not (hasattr(sock, "pending") and sock.pending()):
                sock.settimeout(None)  # the head deadline below bounds the reads, not a per-read timeout
                if not worker.alive and not first:
                    # stopping: a next request that has already arrived is answered (Connection: close)
                    if not input_waiting(sock):
                        raise _CloseConnection("the worker is shutting down")
                else:
                    ended = worker._idle_wait(conn, worker.cfg.keepalive if worker.alive else worker.read_timeout)
                    if ended == _STOPPING and first:  # accepted before SIGTERM: its first request is answered
                        ended = worker._idle_wait(conn, worker.read_timeout)
                    if ended != _READABLE:
                        raise _CloseConnection(f"connection closed: {ended}")
        self._timeout = gevent.Timeout(self._worker.read_timeout, False)
        self._timeout.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._timeout.__exit__(*exc)


class WebhookWorker(GeventWorker):
    """gunicorn's gevent worker with the deadlines, idle limit, shutdown and review thread of the
    module docstring. Built per ``read_timeout`` by :func:`worker_class`; gunicorn instantiates it
    in each worker process."""

    read_timeout: float = DEFAULT_READ_TIMEOUT
    wsgi: WSGIApplication  # what gunicorn serves: the loaded app inside the serving middleware
    #: the app as the factory built it (the Flask app, with its ``extensions``), before
    #: :meth:`load_wsgi` wrapped it; None until loaded. The runner's ``worker_exit`` reads it.
    loaded_app: WSGIApplication | None = None

    # ---------------------------------------------------------------- process
    def init_process(self) -> None:
        error_log = getattr(self.log, "error_log", None)
        if isinstance(error_log, logging.Logger) and not any(isinstance(f, SocketTimeoutAsInfo)
                                                             for f in error_log.filters):
            error_log.addFilter(SocketTimeoutAsInfo(self.read_timeout))
        self._connections: dict[Any, _Connection] = {}  # greenlet -> its connection
        self._idle: collections.OrderedDict[_Connection, None] = collections.OrderedDict()  # longest idle first
        self._keep_free = max(1, int(self.cfg.worker_connections * KEEP_FREE_FRACTION))
        self._review_pool: Any = None
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.loaded_app = self.wsgi
        self.wsgi = self._serving_middleware(self.wsgi)
        # What the app loaded (catalog, modules) lives as long as the worker: out of the
        # collector's sight, so collections scan only what requests allocate.
        gc.collect()
        gc.freeze()

    def handle_exit(self, sig: Any, frame: Any) -> None:
        """SIGTERM: gunicorn's graceful stop (``alive = False``), and every idle connection woken
        at once (see the module docstring); from a signal handler, so through the hub's
        thread-safe callback."""
        super().handle_exit(sig, frame)
        loop = gevent.get_hub().loop
        getattr(loop, "run_callback_threadsafe", loop.run_callback)(self._wake_idle, _STOPPING)

    # ---------------------------------------------------------------- connections
    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        conn = _Connection(client)
        current = gevent.getcurrent()
        self._connections[current] = conn
        try:
            # gunicorn asks the listener its name when it reads the first request: after SIGTERM
            # the listener may be closed by then (EBADF, the connection dropped unanswered).
            try:
                listener = _ListenerName(listener.getsockname())
            except OSError:  # closed between the accept and now: the connection's own local address
                listener = _ListenerName(client.getsockname())
            self._make_room()
            if isinstance(client, ssl.SSLSocket) and not self._handshake(conn, addr):
                gunicorn_util.close(client)
                return
            super().handle(listener, client, addr)
        finally:
            self._connections.pop(current, None)
            self._idle.pop(conn, None)

    def _handshake(self, conn: _Connection, addr: Any) -> bool:
        """The TLS handshake under one ``read_timeout`` deadline from the accept; idle (and so
        closable by the idle limit) until the ClientHello's first byte arrives. True when done."""
        deadline = time.monotonic() + self.read_timeout
        ended = self._idle_wait(conn, self.read_timeout)
        if ended == _STOPPING:  # SIGTERM while waiting for the ClientHello: it gets the rest of its time
            ended = self._idle_wait(conn, max(0.0, deadline - time.monotonic()))
        if ended != _READABLE:
            self.log.debug("connection from %s closed before its TLS handshake: %s", addr, ended)
            return False
        try:
            with gevent.Timeout(max(0.001, deadline - time.monotonic())):
                conn.sock.do_handshake()
            return True
        except (gevent.Timeout, OSError, ValueError) as exc:
            self.log.debug("TLS handshake with %s failed or timed out: %s", addr, exc)
            return False

    def _idle_wait(self, conn: _Connection, seconds: float) -> str:
        """Park ``conn`` until its socket is readable, ``seconds`` pass, the idle limit evicts it or
        SIGTERM wakes it; returns how it ended. No CPU while parked: one hub watcher each for the
        socket and the clock, and a ``Waiter`` that the first of them (or :meth:`_wake_idle`)
        switches; a late second switch is kept by the waiter and ignored."""
        hub = gevent.get_hub()
        waiter = gevent.hub.Waiter(hub)
        try:
            readable = hub.loop.io(conn.sock.fileno(), 1)
        except (OSError, ValueError):
            return _READABLE  # closed: the read that follows finds out
        timer = hub.loop.timer(max(0.0, seconds))
        readable.start(waiter.switch, _READABLE)
        timer.start(waiter.switch, _TIMED_OUT)
        conn.waiter = waiter
        self._idle[conn] = None
        try:
            ended: str = waiter.get()
            if ended in (_STOPPING, _EVICTED) and input_waiting(conn.sock):
                # woken while its next request (or ClientHello) had already arrived: it is not idle,
                # and a request received is answered, never dropped
                return _READABLE
            return ended
        finally:
            readable.stop()
            timer.stop()
            readable.close()
            timer.close()
            conn.waiter = None
            self._idle.pop(conn, None)

    def _make_room(self) -> None:
        """The idle limit: while the worker holds more than ``worker_connections - keep_free``
        connections, close the connection that has been idle the longest."""
        limit = self.cfg.worker_connections - self._keep_free
        loop = gevent.get_hub().loop
        while len(self._connections) > limit and self._idle:
            conn, _ = self._idle.popitem(last=False)
            if conn.waiter is not None:
                loop.run_callback(conn.waiter.switch, _EVICTED)

    def _wake_idle(self, how: str) -> None:
        """Wake every connection idle now with ``how`` (runs in the hub). Each is woken once: one
        that starts a new idle wait when woken (a first request after SIGTERM) is not woken again."""
        waiting = list(self._idle)
        self._idle.clear()
        for conn in waiting:
            if conn.waiter is not None:
                conn.waiter.switch(how)

    def timeout_ctx(self) -> Any:
        return _RequestHeadDeadline(self, self._connections.get(gevent.getcurrent()))

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer = client_error_answer(exc)
        if answer is None:
            super().handle_error(req, client, addr, exc)
            return
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        try:
            gunicorn_util.write(client, answer)
        except Exception:  # noqa: BLE001 - the client is gone; nothing to answer
            self.log.debug("Failed to send error message.")

    # ---------------------------------------------------------------- requests
    def run_apart(self, function: Callable[..., Any], *args: Any) -> Any:
        """:data:`webhook.http.wsgi_extensions.RUN_APART`: ``function(*args)`` in the worker's one
        review thread; the calling greenlet waits (parked), the others go on."""
        if self._review_pool is None:
            self._review_pool = gevent.threadpool.ThreadPool(1)
        return self._review_pool.apply(function, args)

    def _serving_middleware(self, app: WSGIApplication) -> WSGIApplication:
        """Wrap the app: the body gets a whole-body deadline of ``read_timeout`` seconds from the
        end of the head (:class:`DeadlineInput`); each send of the answer waits at most
        ``read_timeout``; the app finds :data:`~webhook.http.wsgi_extensions.DRAIN` and
        :data:`~webhook.http.wsgi_extensions.RUN_APART` in its environ; an answer with
        ``Connection: close`` makes gunicorn close the connection after it (gunicorn drops an
        app's hop-by-hop headers and decides from ``Response.should_close()``)."""
        read_timeout = self.read_timeout
        run_apart = self.run_apart

        def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            sock = environ.get("gunicorn.socket")
            if sock is not None and hasattr(sock, "settimeout"):
                sock.settimeout(read_timeout)
                bounded_chunked_input(environ["wsgi.input"])
                environ["wsgi.input"] = DeadlineInput(environ["wsgi.input"], time.monotonic() + read_timeout)
                environ[wsgi_extensions.DRAIN] = lambda max_bytes, seconds: drain_socket(sock, max_bytes, seconds)
            environ[wsgi_extensions.RUN_APART] = run_apart

            def closing_start_response(status: str, headers: list[Any], exc_info: Any = None) -> Any:
                if any(k.lower() == "connection" and v.strip().lower() == "close" for k, v in headers):
                    force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                    if callable(force_close):
                        force_close()
                if exc_info is not None:
                    return start_response(status, headers, exc_info)
                return start_response(status, headers)

            return app(environ, closing_start_response)

        return wrapped


def deferred_handshake_context_class() -> type[ssl.SSLContext]:
    """A subclass of the current ``ssl.SSLContext`` (gevent's, once a gevent worker has patched
    the standard library) whose ``wrap_socket`` never handshakes on connect: gevent's server
    wraps each accepted socket before the worker sees it, and a handshake there would have no
    deadline. :meth:`WebhookWorker.handle` does it under one. Call it in the worker process."""
    base = ssl.SSLContext
    cls = _DEFERRED_CLASSES.get(base)
    if cls is None:
        def wrap_socket(self: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
            kwargs["do_handshake_on_connect"] = False
            return base.wrap_socket(self, sock, *args, **kwargs)

        # cast: type() builds a subclass of base at run time (gevent's SSLContext once patched); mypy sees only `type`
        cls = cast(type[ssl.SSLContext], type("DeferredHandshakeContext", (base,), {"wrap_socket": wrap_socket}))
        _DEFERRED_CLASSES[base] = cls
    return cls


_DEFERRED_CLASSES: dict[type[ssl.SSLContext], type[ssl.SSLContext]] = {}


def worker_class(read_timeout: float) -> type:
    """:class:`WebhookWorker` with ``read_timeout`` seconds as the deadline of a TLS handshake, of
    a request head once its first byte arrived and of a request body, and the longest wait of one
    send of an answer. Raises ``ValueError`` for a non-positive ``read_timeout``."""
    if not read_timeout > 0:
        raise ValueError(f"read_timeout must be positive, got {read_timeout!r}")
    return type("WebhookWorker", (WebhookWorker,), {"read_timeout": float(read_timeout)})
