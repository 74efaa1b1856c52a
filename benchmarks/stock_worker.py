#!/usr/bin/env python3
"""``segment-webhook serve`` under gunicorn's stock gevent worker, public settings only (issue 38
item 2: the row that shows what the custom worker, ``webhook.http.worker``, buys).

Everything ``serve`` does stays: the same command line, app factory (``create_app`` with its body
cap: 413 over 3 MiB, ``Content-Length`` or chunked), certificate reloader, metrics directory,
review log and gunicorn hooks (``child_exit``, ``worker_exit``, ``on_exit``). Only the gunicorn
settings that name the custom code are replaced, by public ones (:data:`STOCK`):

* ``worker_class = "gevent"`` (``gunicorn.workers.ggevent.GeventWorker`` as released) instead of
  ``webhook.http.worker.WebhookWorker``;
* the ``ssl_context`` hook returns the reloader's context (rotation without restart, a public
  hook) built from the ``ssl`` module's own class, instead of the deferred-handshake subclass;
* ``keepalive`` 120, ``worker_connections`` 1000, ``timeout`` 30, ``graceful_timeout`` 30: the
  values ``serve`` gives (``ServeOptions``); ``limit_request_line`` 4094,
  ``limit_request_fields`` 100, ``limit_request_field_size`` 8190 (gunicorn's defaults, set
  explicitly);
* ``post_worker_init``: ``gc.collect(); gc.freeze()`` once the app is loaded, as the custom
  worker's ``load_wsgi`` does (a public hook; it keeps the stock row from paying for a collector
  that scans the loaded catalog).

What the stock worker then does (gunicorn 27 / gevent 26 source, ``GeventWorker`` and
``AsyncWorker``): the TLS handshake in the connection's greenlet, no deadline; the wait for a
request and the reading of its head together under one ``gevent.Timeout(keepalive)``; the body
with no deadline (a blocking socket); SIGTERM closes the listeners within 1 s and waits up to
``graceful_timeout`` for every connection, idle keep-alive ones included; a review computes in its
connection's greenlet (no review thread: the app's ``run_apart`` key is absent, so it calls the
review itself).

    python benchmarks/stock_worker.py serve --bind 127.0.0.1:8443 --cert-dir DIR --workers 2

``--custom`` before ``serve`` keeps serve's own worker and settings; the environment variable
``STOCK_WORKER_SETTINGS`` (a JSON object of gunicorn settings) is applied last, in either mode:
``benchmarks/instructions.py --server`` gives both workers ``{"timeout": 3600}``, since under
valgrind a worker can be silent for longer than 30 s and gunicorn's master would abort it.

Used by ``benchmarks/serving_faults.py --worker stock`` and ``benchmarks/serving_choice.py``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

#: The public gunicorn settings of the stock row (besides the hooks ``serve`` sets anyway).
STOCK: dict[str, Any] = {
    "worker_class": "gevent",
    "keepalive": 120,
    "worker_connections": 1000,
    "timeout": 30,
    "graceful_timeout": 30,
    "limit_request_line": 4094,
    "limit_request_fields": 100,
    "limit_request_field_size": 8190,
}


def _post_worker_init(worker: Any) -> None:
    gc.collect()
    gc.freeze()


#: Environment variable of gunicorn settings applied last (a JSON object), in either mode.
SETTINGS_ENV = "STOCK_WORKER_SETTINGS"


def stock_settings(original: Any, stock: bool = True, overrides: dict[str, Any] | None = None) -> Any:
    """``webhook.http.server.gunicorn_settings`` with the custom worker's settings replaced by
    :data:`STOCK`, the plain ``ssl_context`` hook and ``post_worker_init`` (``stock``; else serve's
    own), then ``overrides``."""

    def settings(options: Any) -> dict[str, Any]:
        result: dict[str, Any] = original(options)
        if not stock:
            result.update(overrides or {})
            return result
        result.update(STOCK)
        result["post_worker_init"] = _post_worker_init
        reloader = options.reloader
        if reloader is not None:
            def ssl_context(conf: Any, default_factory: Any) -> Any:
                return reloader.serving_context()  # the ssl module's SSLContext (gevent's, once patched)

            result["ssl_context"] = ssl_context
        result.update(overrides or {})
        return result

    return settings


def main(argv: list[str] | None = None) -> int:
    from webhook.cli import main as cli_main
    from webhook.http import server

    args = list(sys.argv[1:] if argv is None else argv)
    custom = args[:1] == ["--custom"]
    overrides = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
    server.gunicorn_settings = stock_settings(server.gunicorn_settings, not custom, overrides)
    return cli_main(args[1:] if custom else args)


if __name__ == "__main__":
    sys.exit(main())
