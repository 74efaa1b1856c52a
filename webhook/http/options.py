"""The webhook server's settings (:class:`ServeOptions`), apart from the runner so that the command
line reads their defaults (their one home) without importing gunicorn or gevent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.http.tls import CertificateReloader

#: Default ``read_timeout`` of :class:`ServeOptions` (``--read-timeout``), seconds.
DEFAULT_READ_TIMEOUT = 10.0


@dataclass
class ServeOptions:
    """gunicorn settings of the webhook (shared by ``serve`` and benchmarks).

    ``bind``: ``HOST:PORT``. ``certfile``/``keyfile``: PEM paths; both None = plain HTTP (for
    benchmarks only; kube-apiserver requires TLS). ``reloader``: the :class:`CertificateReloader`
    to use (built from certfile/keyfile when None). ``workers``: processes. ``graceful_timeout``: seconds in-flight requests get after SIGTERM.
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
    read_timeout: float = DEFAULT_READ_TIMEOUT
    graceful_timeout: int = 30
    keepalive: int = 120
    timeout: int = 30
    worker_connections: int = 1000
    loglevel: str = "info"
    accesslog: str | None = None
    proc_name: str = "segment-webhook"
    extra: dict[str, Any] = field(default_factory=dict)
