"""Go-style and slow clients against a real `segment-webhook serve` (docs/tasks/operations.md "Serving"):
idle connections left after the TLS handshake and clients that send their headers a byte at a
time must not stop the server; their request head and body get one deadline (--read-timeout),
however the bytes trickle in; malformed chunked bodies get 400 or a closed connection, never 5xx.

Every wait here is bounded (a socket timeout or a deadline), none asserts a duration.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time

import pytest
import requests

from tests.support.serving import admission_review, running_serve

READ_TIMEOUT = 1.0
#: Generous bound for "the server answered or closed it" (a loaded CI machine).
BOUND_S = 20.0
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_serve(tmp_path_factory.mktemp("slowclients"), "--read-timeout", str(READ_TIMEOUT)) as srv:
        yield srv


def tls_connect(server) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=server["ca"])
    raw = socket.create_connection(("127.0.0.1", server["port"]), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def read_until_closed(sock: socket.socket, bound_s: float = BOUND_S) -> bytes:
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


class Dribblers:
    """``count`` connections that each send a request head one byte every ``every_s`` seconds
    (the per-read timeout of the old server restarted on every byte), plus ``idle`` TLS
    connections that complete the handshake and send nothing (a Go client's spare connections)."""

    HEAD = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 200

    def __init__(self, server, count: int, idle: int, every_s: float = 0.3):
        self.server, self.every_s = server, every_s
        self.stop = threading.Event()
        self.idle = [tls_connect(server) for _ in range(idle)]
        self.closed_by_server = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.dribble, daemon=True) for _ in range(count)]

    def dribble(self) -> None:
        while not self.stop.is_set():
            try:
                sock = tls_connect(self.server)
            except OSError:
                continue
            try:
                for i in range(len(self.HEAD)):
                    if self.stop.wait(self.every_s):
                        return
                    sock.sendall(self.HEAD[i:i + 1])
            except OSError:
                with self.lock:
                    self.closed_by_server += 1
            finally:
                sock.close()

    def __enter__(self) -> Dribblers:
        for t in self.threads:
            t.start()
        time.sleep(0.5)  # every dribbler connected and sending
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)
        for sock in self.idle:
            sock.close()


def test_16_dribblers_and_16_idle_connections_do_not_block_healthz_or_reviews(server):
    # 16 dribblers: as many as the old server's 2 workers x 8 threads, which they stopped for good.
    with Dribblers(server, count=16, idle=16):
        for _ in range(3):
            resp = requests.get(server["url"] + "/healthz", verify=server["ca"], timeout=BOUND_S,
                                headers={"Connection": "close"})
            assert resp.status_code == 200 and resp.json() == {"status": "ok"}
            review = requests.post(server["url"] + "/mutate", data=json.dumps(admission_review(POD)),
                                   headers={"Content-Type": "application/json", "Connection": "close"},
                                   verify=server["ca"], timeout=BOUND_S)
            assert review.status_code == 200 and review.json()["response"]["allowed"] is True
    assert b"Traceback" not in server["log"].read_bytes()


def test_a_request_head_sent_a_byte_at_a_time_is_cut_at_its_deadline(server):
    """One deadline for the whole head: a byte every 0.2 s never lets a 1 s per-read timeout
    fire, yet the server closes the connection (without an answer) well before the head ends."""
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 500 + b"\r\n\r\n"
    sock = tls_connect(server)
    closed = False
    try:
        for i in range(len(head)):  # 500+ bytes x 0.2 s: the head would take 100 s
            try:
                sock.sendall(head[i:i + 1])
            except OSError:
                closed = True
                break
            sock.settimeout(0.2)
            try:
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except (ConnectionResetError, ssl.SSLError):
                closed = True
                break
    finally:
        sock.close()
    assert closed, "the server never closed a head that trickled in for 100 s"


def test_a_body_sent_a_byte_at_a_time_is_answered_408_at_its_deadline(server):
    sock = tls_connect(server)
    try:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n")
        answer = b""
        for _ in range(500):  # 500 bytes x 0.2 s = 100 s if the deadline restarted on every byte
            try:
                sock.sendall(b" ")
            except OSError:
                break
            sock.settimeout(0.2)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            answer += chunk
            break
        answer += read_until_closed(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    assert json.loads(body)["field"] == "body"


CHUNKED_HEAD = (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")


def read_answer(sock: socket.socket, bound_s: float = BOUND_S) -> bytes:
    """One HTTP answer (head and Content-Length body), or what came before the server closed."""
    deadline = time.monotonic() + bound_s
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if len(body) >= length:
                return data
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no answer and no close within {bound_s} s; got {data[:200]!r}"
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


@pytest.mark.parametrize("body", [
    b"zz\r\n{}\r\n0\r\n\r\n",                     # chunk size not hexadecimal
    b"2\r\n{}XX0\r\n\r\n",                          # chunk data not followed by CRLF
    b"2;bad\x01ext\r\n{}\r\n0\r\n\r\n",             # chunk extension with a control character
    b"-2\r\n{}\r\n0\r\n\r\n",                     # negative chunk size
], ids=["bad-size", "bad-terminator", "bad-extension", "negative-size"])
def test_malformed_chunked_body_is_400_or_closed_never_5xx(server, body):
    sock = tls_connect(server)
    try:
        sock.sendall(CHUNKED_HEAD + body)
        answer = read_answer(sock)
    finally:
        sock.close()
    if answer:  # else: closed without an answer, which the issue allows
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert b"content-type: application/json" in head.lower()
        assert json.loads(payload)["error"]
    log = server["log"].read_bytes()
    assert b"Traceback" not in log and b" 500 " not in log


def test_chunked_body_cut_short_logs_no_traceback(server):
    sock = tls_connect(server)
    try:
        sock.sendall(CHUNKED_HEAD + b"10\r\n{\"apiVers")
    finally:
        sock.close()  # the client goes away mid-body
    # the server is still fine, and logged no traceback for it
    resp = requests.get(server["url"] + "/healthz", verify=server["ca"], timeout=BOUND_S)
    assert resp.status_code == 200
    time.sleep(0.5)  # let the server write its log lines, if any
    assert b"Traceback" not in server["log"].read_bytes()


@pytest.mark.parametrize("size_line", [b"400001", b"ffffffffffffffff"], ids=["3-MiB-and-1", "2-to-the-64-less-1"])
def test_a_chunk_declaring_more_than_3_mib_is_refused_at_once_with_413(server, size_line):
    """0x400001 = 4,194,305 bytes and 0xffffffffffffffff are over the 3,145,728-byte (3 MiB) body
    limit: answered 413 while the client has sent nothing of the chunk's data, not 408 at the
    body's deadline (which waiting for that data would give)."""
    sock = tls_connect(server)
    try:
        sock.sendall(CHUNKED_HEAD + size_line + b"\r\n{}")
        answer = read_answer(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    assert json.loads(payload) == {"error": "request body is larger than the 3145728-byte limit", "field": "body"}


def test_chunks_declaring_3_mib_in_all_pass_the_declared_sizes_check(server):
    """Two chunks of 1 MiB and 2 MiB (0x100000 + 0x200000 = 3,145,728 bytes, the limit itself):
    not refused on their sizes; the JSON body then arrives and is answered 400 (not a review)."""
    sock = tls_connect(server)
    try:
        sock.sendall(CHUNKED_HEAD + b"100000\r\n" + b" " * 0x100000 + b"\r\n200000\r\n" + b" " * 0x1FFFFE
                     + b"{}\r\n0\r\n\r\n")
        answer = read_answer(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
