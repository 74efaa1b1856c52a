"""benchmarks/stock_worker.py, the stock row of the serving choice (issue 38 item 2): ``serve`` under
gunicorn's stock gevent worker with public settings only.

The settings are checked literally (the worker class gunicorn names ``gevent``, the values of
``ServeOptions`` for keepalive, worker_connections, timeout and graceful_timeout, gunicorn's
documented request limits), and a served process is checked to run the stock worker (gunicorn's
own start-up line) and to answer a review. No figure is asserted: those are
benchmarks/serving_choice.py's.
"""

from __future__ import annotations

import ssl
import subprocess
import sys

import pytest
import requests

from tests.support import paths
from tests.support.serving import admission_review, clean_env, free_port, stop, wait_ready

ROOT = paths.REPO
sys.path.insert(0, str(ROOT / "benchmarks"))

import stock_worker  # noqa: E402 - the benchmark module, beside the others


def test_stock_settings_replace_only_what_names_the_custom_worker(tmp_path):
    from webhook.http import certs
    from webhook.http.options import ServeOptions
    from webhook.http.server import gunicorn_settings
    from webhook.http.tls import CertificateReloader

    paths = certs.write_certificates(certs.generate(), str(tmp_path))
    reloader = CertificateReloader(paths["cert"], paths["key"])
    options = ServeOptions(bind="127.0.0.1:9443", reloader=reloader, certfile=reloader.certfile,
                           keyfile=reloader.keyfile)
    custom = gunicorn_settings(options)
    stock = stock_worker.stock_settings(gunicorn_settings)(options)

    assert stock["worker_class"] == "gevent"  # gunicorn.workers.ggevent.GeventWorker as released
    assert (stock["keepalive"], stock["worker_connections"], stock["timeout"], stock["graceful_timeout"]) == \
        (120, 1000, 30, 30)
    assert (stock["limit_request_line"], stock["limit_request_fields"], stock["limit_request_field_size"]) == \
        (4094, 100, 8190)
    # every other setting and hook is serve's own
    changed = {"worker_class", "ssl_context", "post_worker_init", "limit_request_line", "limit_request_fields",
               "limit_request_field_size"}
    assert {k: v for k, v in stock.items() if k not in changed} == {k: v for k, v in custom.items() if k not in changed}
    # the hook gives the reloader's context of the ssl module's own class (no deferred handshake)
    context = stock["ssl_context"](None, None)
    assert type(context) is ssl.SSLContext
    assert context.sni_callback is not None  # rotation without restart stays


def test_custom_mode_keeps_serves_settings_and_applies_overrides_last(tmp_path):
    from webhook.http.options import ServeOptions
    from webhook.http.server import gunicorn_settings

    options = ServeOptions(bind="127.0.0.1:9443")
    custom = gunicorn_settings(options)
    kept = stock_worker.stock_settings(gunicorn_settings, stock=False, overrides={"timeout": 3600})(options)
    # worker_class() builds its class per call: compared by name and deadline
    assert {k: v for k, v in kept.items() if k != "worker_class"} == \
        {**{k: v for k, v in custom.items() if k != "worker_class"}, "timeout": 3600}
    assert (kept["worker_class"].__name__, kept["worker_class"].read_timeout) == ("WebhookWorker", 10.0)
    stock = stock_worker.stock_settings(gunicorn_settings, overrides={"timeout": 3600})(options)
    assert (stock["worker_class"], stock["timeout"]) == ("gevent", 3600)


@pytest.mark.slow
def test_served_by_the_stock_worker_answers_a_review(tmp_path):
    port = free_port()
    ca = str(tmp_path / "certs" / "ca.crt")
    with open(tmp_path / "stderr.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "stock_worker.py"), "serve",
                                 "--bind", f"127.0.0.1:{port}", "--cert-dir", str(tmp_path / "certs"), "--workers", "1"],
                                stdout=subprocess.DEVNULL, stderr=log, env=clean_env())
        try:
            wait_ready(f"https://127.0.0.1:{port}", ca, proc, path="/readyz")
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            resp = requests.post(f"https://127.0.0.1:{port}/mutate", json=admission_review(pod), verify=ca, timeout=10,
                                 headers={"Connection": "close"})
            assert resp.status_code == 200 and resp.json()["response"]["allowed"] is True
        finally:
            code = stop(proc, 40.0)
    text = (tmp_path / "stderr.log").read_text()
    assert code == 0, text
    assert "Using worker: gevent" in text
