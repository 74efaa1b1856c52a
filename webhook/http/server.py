"""The runner: serve a WSGI app under gunicorn with the webhook's worker, TLS and hooks.

The serving jobs live in one module each: the runner here (:class:`ServeOptions`,
:func:`gunicorn_settings`, :func:`run`), the worker (``webhook.http.worker``: connections,
deadlines, idle limit, shutdown, the review thread), the serving certificate
(``webhook.http.tls``) and the server's log lines (``webhook.http.serving_log``). Only this module
and the worker import gunicorn or gevent (``tests/unit/project/test_layout.py``); the Flask app and the CLI see
:func:`run` and :class:`ServeOptions`.

* The app factory runs in each worker after the fork (``preload_app`` off), so every worker
  builds its own catalog and starts its own Topology watch.
* Metrics: the ``child_exit`` hook calls ``prometheus_client.multiprocess.mark_process_dead``;
  ``worker_exit`` stops a live catalog.
* Graceful shutdown: SIGTERM → gunicorn stops accepting; the worker closes idle keep-alive
  connections at once and answers connections that were accepted and have not sent their first
  request yet; in-flight requests finish for up to ``graceful_timeout`` seconds; exit 0.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gunicorn.app.base import BaseApplication

from webhook.http.metrics import mark_process_dead
from webhook.http.options import ServeOptions
from webhook.http.serving_log import configure_logging
from webhook.http.tls import CertificateLoadError, CertificateReloader
from webhook.http.worker import deferred_handshake_context_class, worker_class

__all__ = ["CertificateLoadError", "CertificateReloader", "ServeOptions", "gunicorn_settings", "run"]

WSGIApplication = Callable[..., Any]

log = logging.getLogger("segment_webhook.server")


def _child_exit(server: Any, worker: Any) -> None:
    mark_process_dead(worker.pid)


def _worker_exit(server: Any, worker: Any) -> None:
    """gunicorn's ``worker_exit`` hook: stop the exiting worker's live Topology catalog (its watch).

    The catalog is in the app the factory built (``app.extensions["segment_webhook"]["catalog"]``),
    which :meth:`WebhookWorker.load_wsgi` keeps as ``worker.loaded_app`` before wrapping it in the
    serving middleware (``worker.wsgi``, which has no ``extensions``); another worker class's
    ``worker.wsgi`` is read as the app. Logs and swallows an exception of ``stop()``."""
    app = getattr(worker, "loaded_app", None) or getattr(worker, "wsgi", None)
    extensions = getattr(app, "extensions", None)
    state = extensions.get("segment_webhook") if isinstance(extensions, dict) else None
    stop = getattr((state or {}).get("catalog"), "stop", None)
    if callable(stop):
        try:
            stop()
        except Exception:
            log.exception("stopping the topology catalog failed")


#: Settings that only newer gunicorn releases know; skipped when absent.
_OPTIONAL_SETTINGS = frozenset({"control_socket_disable"})


class _Application(BaseApplication):
    def __init__(self, app_factory: Callable[[], WSGIApplication], settings: dict[str, Any]):
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


def gunicorn_settings(options: ServeOptions) -> dict[str, Any]:
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
            return reloader.serving_context(deferred_handshake_context_class())

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
