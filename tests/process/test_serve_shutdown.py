"""Graceful shutdown (DESIGN.md §10: rollouts lose no review): SIGTERM lets in-flight requests finish, then exit 0.

The server is ``webhook.http.server.run`` with the SAME gunicorn settings as ``serve``
(ServeOptions), around a small WSGI app whose ``/slow`` request takes 2 s and marks a file when it
starts; no test-only hook in the product code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import requests

from tests.support.serving import free_port, wait_ready
from webhook.http import certs

SERVER = textwrap.dedent(
    """
    import os, sys, time
    from webhook.http.server import ServeOptions, run

    marker = sys.argv[3]

    def factory():
        def app(environ, start_response):
            if environ["PATH_INFO"] == "/slow":
                open(marker, "w").close()
                time.sleep(2)
                body = b"slow done"
            else:
                body = b"fast"
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        return app

    cert_dir = sys.argv[2]
    run(factory, ServeOptions(bind=sys.argv[1], certfile=os.path.join(cert_dir, "tls.crt"),
                              keyfile=os.path.join(cert_dir, "tls.key"), workers=1,
                              graceful_timeout=10))
    """
)


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("shutdown")
    certs.write_certificates(certs.generate(), str(base / "certs"))
    script = base / "server.py"
    script.write_text(SERVER)
    marker = base / "slow-started"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMETHEUS_MULTIPROC")}
    proc = subprocess.Popen([sys.executable, str(script), f"127.0.0.1:{port}", str(base / "certs"), str(marker)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url, ca = f"https://127.0.0.1:{port}", str(base / "certs" / "ca.crt")
    try:
        wait_ready(url, ca, proc, path="/fast")
        yield {"url": url, "ca": ca, "proc": proc, "marker": marker}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_drains_in_flight_requests_and_exits_0(slow_server):
    srv = slow_server
    session = requests.Session()  # a keep-alive connection, used before and during the shutdown
    assert session.get(srv["url"] + "/fast", verify=srv["ca"], timeout=10).text == "fast"
    result: dict[str, object] = {}

    def slow():
        try:
            resp = session.get(srv["url"] + "/slow", verify=srv["ca"], timeout=30)
            result["status"], result["body"] = resp.status_code, resp.text
        except requests.RequestException as exc:
            result["error"] = repr(exc)

    t = threading.Thread(target=slow)
    t.start()
    end = time.monotonic() + 20
    while not srv["marker"].exists():  # the slow request is now inside the app
        assert time.monotonic() < end, "the slow request never started"
        time.sleep(0.02)
    srv["proc"].send_signal(signal.SIGTERM)
    t.join(30)
    session.close()
    assert result == {"status": 200, "body": "slow done"}
    assert srv["proc"].wait(30) == 0
    stderr = srv["proc"].stderr.read().decode()
    assert "Handling signal: term" in stderr
    # the listening socket is closed: new connections are refused
    with pytest.raises(requests.ConnectionError):
        requests.get(srv["url"] + "/fast", verify=srv["ca"], timeout=5)
