"""Slow and stalled clients against a real `segment-webhook serve` (2 gevent workers,
--read-timeout 1): they must not freeze the server, and the server closes them.

Every wait here is bounded (a socket timeout or a deadline), none asserts a duration.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.support.serving import running_serve

READ_TIMEOUT = 1.0
#: Generous bound for "the server closed it after about READ_TIMEOUT" (queued connections wait
#: for a thread first; gunicorn lingers up to 2 s in its graceful close).
CLOSE_BOUND_S = 15.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_serve(tmp_path_factory.mktemp("slow"), "--read-timeout", str(READ_TIMEOUT)) as srv:
        yield srv


def tls_connect(server) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=server["ca"])
    raw = socket.create_connection(("127.0.0.1", server["port"]), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def read_until_closed(sock: socket.socket, bound_s: float = CLOSE_BOUND_S) -> bytes:
    """Everything the server sends until it closes the connection; fails after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the server did not close the connection within {bound_s} s; got {data[:200]!r}"
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return data
        except TimeoutError:
            continue
        if not chunk:
            return data
        data += chunk


def stalled_body(server) -> ssl.SSLSocket:
    """POST /mutate announcing 1000 bytes, then 1 byte, then nothing."""
    sock = tls_connect(server)
    sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{")
    return sock


def stalled_handshake(server) -> socket.socket:
    """A TCP connection that sends the first bytes of a TLS ClientHello, then nothing."""
    sock = socket.create_connection(("127.0.0.1", server["port"]), timeout=10)
    sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    return sock


def stall_and_wait(opener, server) -> bytes:
    """Open a stalled connection with ``opener``, then return what the server sends until it
    closes it (and close our end at once, as a client does)."""
    sock = opener(server)
    try:
        return read_until_closed(sock)
    finally:
        sock.close()


def test_stalled_clients_do_not_freeze_the_server_and_are_closed(server):
    slots = 2 * 4  # more stalled clients than the previous gthread server's 2 x 4 threads
    openers = [stalled_body] * (slots + 4) + [stalled_handshake] * 4
    with ThreadPoolExecutor(len(openers)) as pool:
        answers = [pool.submit(stall_and_wait, opener, server) for opener in openers]
        time.sleep(0.5)  # let them connect and stall every thread
        # /healthz answers while the stalled clients wait (bounded: each holds a thread <= ~T)
        resp = requests.get(server["url"] + "/healthz", verify=server["ca"], timeout=10,
                            headers={"Connection": "close"})
        assert resp.status_code == 200
        results = [f.result(timeout=CLOSE_BOUND_S + 10) for f in answers]
    for answer in results[:slots + 4]:  # stalled bodies: a 408, then the server closes
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower()
        assert b'"field":"body"' in body
    assert results[slots + 4:] == [b""] * 4  # stalled handshakes: closed without an answer
    assert b"Traceback" not in server["log"].read_bytes()


def test_announced_oversized_body_is_answered_413_at_once_then_closed(server):
    sock = tls_connect(server)
    try:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 5000000\r\n\r\n")
        sock.settimeout(READ_TIMEOUT * 0.8 + 5)  # the answer comes before any body is awaited
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 413 "), first[:200]
        answer = first + read_until_closed(sock)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    assert b'"field":"body"' in body and b"5000000 bytes" in body


def test_keep_alive_connection_idle_longer_than_the_read_timeout_is_kept(server):
    """An idle keep-alive connection waits in gunicorn's poller (keepalive, 120 s), not under the
    read timeout: the same connection serves a request after an idle gap longer than T."""
    sock = tls_connect(server)
    try:
        for gap in (READ_TIMEOUT * 1.5, 0):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.settimeout(10)
            answer = b""
            while not answer.endswith(b"}\n"):
                chunk = sock.recv(65536)
                assert chunk, f"connection closed; got {answer!r}"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            time.sleep(gap)
    finally:
        sock.close()


@pytest.mark.parametrize("request_bytes, status, field", [
    (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request-line"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431, "headers"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(120)) + b"\r\n", 431, "headers"),
    (b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "method"),
], ids=["uri-too-long", "header-too-large", "too-many-headers", "bad-method"])
def test_gunicorn_parse_errors_are_json(server, request_bytes, status, field):
    sock = tls_connect(server)
    try:
        sock.sendall(request_bytes)
        answer = read_until_closed(sock)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    assert b"content-type: application/json" in head.lower()
    parsed = json.loads(body)
    assert parsed["field"] == field and parsed["error"]
