"""gunicorn's ``worker_exit`` hook stops the exiting worker's live Topology catalog (issue 38).

The hook (``webhook.http.server._worker_exit``) runs on the worker gunicorn built: its ``wsgi`` is
what :meth:`WebhookWorker.load_wsgi` left there, the serving middleware around the app, which has
no ``extensions``. The hook used to read the catalog from ``worker.wsgi`` and so never stopped it
(its Topology watch thread ran on while the worker exited). Here the worker loads a real
``create_app`` app through gunicorn's own ``Worker.load_wsgi``, and the hook must call the
catalog's ``stop()`` exactly once.
"""

from __future__ import annotations

import gc
from typing import Any

from prometheus_client import CollectorRegistry

from webhook.admission.config import AdmissionSettings
from webhook.http.app import create_app
from webhook.http.metrics import ReviewMetrics
from webhook.http.server import _worker_exit
from webhook.http.worker import worker_class
from webhook.topology.objects import default_catalog


class StoppableCatalog:
    """The embedded catalog with the ``stop()`` a live catalog has, counting its calls."""

    def __init__(self) -> None:
        self._catalog = default_catalog()
        self.synced = True
        self.stops = 0

    def __getattr__(self, name):
        return getattr(self._catalog, name)

    def stop(self) -> None:
        self.stops += 1


class LoadedApp:
    """What gunicorn's ``Worker.load_wsgi`` asks: ``app.wsgi()`` returns the WSGI app."""

    def __init__(self, wsgi) -> None:
        self._wsgi = wsgi

    def wsgi(self):
        return self._wsgi


def loaded_worker(app, monkeypatch):
    """A WebhookWorker (not started: no sockets, no fork) that has run ``load_wsgi`` on ``app``."""
    monkeypatch.setattr(gc, "freeze", lambda: None)  # load_wsgi freezes the collector: not in the test process
    worker: Any = object.__new__(worker_class(10.0))  # gunicorn has no types
    worker.app = LoadedApp(app)
    worker.load_wsgi()
    return worker


def test_worker_exit_stops_the_catalog_of_the_app_the_worker_loaded(monkeypatch):
    catalog = StoppableCatalog()
    app = create_app(catalog, AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()))
    worker = loaded_worker(app, monkeypatch)
    _worker_exit(None, worker)
    assert catalog.stops == 1
    assert worker.wsgi is not app  # the middleware wraps it: the hook must not read worker.wsgi alone


def test_worker_exit_without_a_stoppable_catalog_does_nothing(monkeypatch):
    """The embedded catalog has no ``stop()``: the hook neither fails nor logs."""
    app = create_app(default_catalog(), AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()))
    _worker_exit(None, loaded_worker(app, monkeypatch))


def test_a_failing_stop_is_logged_not_raised(monkeypatch, caplog):
    catalog = StoppableCatalog()

    def fail() -> None:
        raise RuntimeError("watch already gone")

    monkeypatch.setattr(catalog, "stop", fail)
    app = create_app(catalog, AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()))
    _worker_exit(None, loaded_worker(app, monkeypatch))
    assert "stopping the topology catalog failed" in caplog.text
