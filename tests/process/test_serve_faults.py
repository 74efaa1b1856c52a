"""Idle connections, SIGTERM and CPU-heavy reviews (docs/tasks/operations.md "Serving"), on a real server (``webhook.http.server.run`` with
the settings ``serve`` uses, around a small WSGI app; no test-only hook in the product code):

* idle connections beyond the idle limit do not keep a new connection from being answered;
* after SIGTERM, a connection accepted before it is answered, not closed unanswered;
* after SIGTERM, a request that already arrived on an idle keep-alive connection is answered;
* a review that computes in the review thread (``run_apart``) does not stop other answers.

No clock decides a result: every wait is for a condition (a file, a refused connect, an answer),
and a client timeout only turns a stalled server into a failure instead of a hung test. The
figures (latencies under load) are benchmarks/serving_faults.py's.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
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
    from webhook.http.wsgi_extensions import RUN_APART

    base = sys.argv[3]

    def spin():
        open(os.path.join(base, "spinning"), "w").close()
        while not os.path.exists(os.path.join(base, "stop-spinning")):
            sum(range(10000))  # computes: holds the interpreter between switch intervals
        return b"spun"

    def factory():
        def app(environ, start_response):
            if environ["PATH_INFO"] == "/spin":
                body = environ[RUN_APART](spin)
            else:
                body = b"fast"
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        return app

    cert_dir = sys.argv[2]
    run(factory, ServeOptions(bind=sys.argv[1], certfile=os.path.join(cert_dir, "tls.crt"),
                              keyfile=os.path.join(cert_dir, "tls.key"), workers=1, worker_connections=20,
                              graceful_timeout=20))
    """
)


@pytest.fixture
def server(tmp_path):
    certs.write_certificates(certs.generate(), str(tmp_path / "certs"))
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMETHEUS_MULTIPROC")}
    proc = subprocess.Popen([sys.executable, str(script), f"127.0.0.1:{port}", str(tmp_path / "certs"), str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url, ca = f"https://127.0.0.1:{port}", str(tmp_path / "certs" / "ca.crt")
    try:
        wait_ready(url, ca, proc, path="/fast")
        yield {"url": url, "port": port, "ca": ca, "proc": proc, "base": tmp_path}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def tls_connection(srv, timeout: float = 20.0) -> ssl.SSLSocket:
    """A TLS connection to the server, handshake done, nothing sent."""
    context = ssl.create_default_context(cafile=srv["ca"])
    sock = socket.create_connection(("127.0.0.1", srv["port"]), timeout=timeout)
    return context.wrap_socket(sock, server_hostname="127.0.0.1")


def read_answer(conn: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith((b"fast", b"spun")):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_idle_connections_beyond_the_idle_limit_make_room_for_new_ones(server):
    """worker_connections 20 (keep 2 free): 30 idle TLS connections, then a request on a new
    connection is answered, and the connection idle the longest has been closed by the server.
    (Before the idle limit, the 21st connection waited for an idle one to time out: 120 s.)"""
    idle = []
    for _ in range(30):
        try:
            idle.append(tls_connection(server))
        except OSError:  # a server that stopped accepting: the request below shows it
            break
    try:
        resp = requests.get(server["url"] + "/fast", verify=server["ca"], timeout=30, headers={"Connection": "close"})
        assert (resp.status_code, resp.text) == (200, "fast")
        assert idle[0].recv(1) == b""  # closed by the server (a recv timeout raises instead)
    finally:
        for conn in idle:
            conn.close()


def test_after_sigterm_a_connection_accepted_before_it_is_answered(server):
    """A connection handshaken before SIGTERM sends its request only once the worker has closed
    its listener (new connections refused): it is answered, with Connection: close."""
    held = tls_connection(server)
    server["proc"].send_signal(signal.SIGTERM)
    end = time.monotonic() + 20
    while True:  # wait for the worker to stop listening
        try:
            socket.create_connection(("127.0.0.1", server["port"]), timeout=5).close()
        except ConnectionRefusedError:
            break
        assert time.monotonic() < end, "the listener did not close after SIGTERM"
        time.sleep(0.05)
    # Sent a while after: the previous worker checked its state once a second and then closed every
    # connection waiting for a request (curl exit 52); a first request is now given read_timeout
    # (10 s). The pause only sets the scene: no result depends on how long anything took.
    time.sleep(1.5)
    held.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = read_answer(held)
    held.close()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nConnection: close\r\n" in answer
    assert answer.endswith(b"fast")
    assert server["proc"].wait(30) == 0


def worker_pid(proc: subprocess.Popen) -> int:
    """The pid of the server's one gunicorn worker (the master's only child)."""
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as children:
        pids = [int(pid) for pid in children.read().split()]
    assert len(pids) == 1, f"expected one worker, found {pids}"
    return pids[0]


def process_status(pid: int, field: str) -> str:
    """The value of ``field`` (e.g. ``State``, ``ShdPnd``) in /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as status:
        return next(line.split(":", 1)[1].strip() for line in status if line.startswith(field + ":"))


def signal_pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` is pending for process ``pid`` (its ``ShdPnd`` mask)."""
    return bool(int(process_status(pid, "ShdPnd"), 16) & (1 << (signum - 1)))


def test_after_sigterm_a_request_already_received_on_an_idle_connection_is_answered(server):
    """One keep-alive connection answered once, so idle in the worker; the worker is stopped
    (SIGSTOP), the next request is sent on that connection, the server gets SIGTERM (which the
    master passes on to the stopped worker), then the worker goes on (SIGCONT). SIGTERM wakes the
    idle connection and the request has already arrived: it is answered, with Connection: close,
    never dropped (kube-apiserver's Go client does not retry such a POST)."""
    conn = tls_connection(server)
    try:
        conn.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
        first = read_answer(conn)
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" not in first
        worker = worker_pid(server["proc"])
        os.kill(worker, signal.SIGSTOP)
        try:
            end = time.monotonic() + 20
            # stopped before SIGTERM comes: a SIGTERM that met the worker still running would be
            # taken (its handler frame set up) on the way to the stop, no longer pending
            while not process_status(worker, "State").startswith("T"):
                assert time.monotonic() < end, "the worker did not stop"
                time.sleep(0.01)
            conn.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
            server["proc"].send_signal(signal.SIGTERM)
            while not signal_pending(worker, signal.SIGTERM):  # the master has passed SIGTERM on
                assert time.monotonic() < end, "the master did not pass SIGTERM on to the worker"
                time.sleep(0.02)
        finally:
            os.kill(worker, signal.SIGCONT)
        answer = read_answer(conn)
    finally:
        conn.close()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert b"\r\nConnection: close\r\n" in answer
    assert answer.endswith(b"fast")
    assert server["proc"].wait(30) == 0


def test_a_computing_request_run_apart_does_not_stop_other_answers(server):
    """/spin computes in the review thread until the test lets it stop; meanwhile a request on a
    new connection is answered (a greenlet that computed would have stopped the whole worker)."""
    result = {}

    def spin():
        result["spin"] = requests.get(server["url"] + "/spin", verify=server["ca"], timeout=60).text

    thread = threading.Thread(target=spin)
    thread.start()
    end = time.monotonic() + 20
    while not (server["base"] / "spinning").exists():
        assert time.monotonic() < end, "/spin never started"
        time.sleep(0.02)
    try:
        resp = requests.get(server["url"] + "/fast", verify=server["ca"], timeout=30, headers={"Connection": "close"})
        assert (resp.status_code, resp.text) == (200, "fast")
        assert thread.is_alive()  # still computing: the answer did not wait for it
    finally:
        (server["base"] / "stop-spinning").touch()
        thread.join(60)
    assert result == {"spin": "spun"}
