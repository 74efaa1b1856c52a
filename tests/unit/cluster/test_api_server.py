"""webhook.cluster.api_server: the cause of a failed request in words, one log line per outage,
back-off, the client's retries and the finished watch response (no API server needed: a closed
loopback port, a loopback TLS server, and errors as urllib3 and the kubernetes client raise them).
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
import threading

import pytest
import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from webhook.cluster.api_server import (
    INFORMER_LOGGER,
    ApiServerReachability,
    Backoff,
    InformerTransportTracebacks,
    client_retries,
    send_until_answered,
    transport_cause,
)

WAIT = 10.0


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def core_api(url: str) -> k8s_client.CoreV1Api:
    configuration = k8s_client.Configuration()
    configuration.host = url
    configuration.retries = client_retries()
    return k8s_client.CoreV1Api(k8s_client.ApiClient(configuration))


def error_of(call) -> BaseException:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the error is the result
        return exc
    raise AssertionError("the call did not fail")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


#: the pool urllib3 names in the errors it raises (made, never connected)
POOL = urllib3.HTTPSConnectionPool("10.0.0.1", 6443)


def refused() -> BaseException:
    """The error a request to a closed port raises (urllib3's MaxRetryError, the real chain)."""
    port = closed_port()
    return error_of(lambda: core_api(f"http://127.0.0.1:{port}").list_node(_request_timeout=(2, 2)))


# ------------------------------------------------------------------ transport_cause

def test_a_refused_connection_fails_at_once_without_a_retry_warning(caplog):
    caplog.set_level(logging.DEBUG)
    error = refused()
    assert isinstance(error, urllib3.exceptions.MaxRetryError)
    assert transport_cause(error) == "connection refused"
    # urllib3's default (Retry(3)) logs "Retrying (Retry(total=2, ...))" three times per request
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_tls_failure_is_named_as_tls(tmp_path):
    from webhook.http.certs import generate

    bundle = generate()
    (tmp_path / "tls.crt").write_bytes(bundle.cert_pem)
    (tmp_path / "tls.key").write_bytes(bundle.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_one_handshake():
        connection, _ = listener.accept()
        try:
            context.wrap_socket(connection, server_side=True).recv(16)
        except (OSError, ssl.SSLError):
            pass  # the client gave up: its CA store does not know this certificate's issuer
        finally:
            connection.close()

    server = threading.Thread(target=serve_one_handshake, daemon=True)
    server.start()
    try:
        error = error_of(lambda: core_api(f"https://127.0.0.1:{port}").list_node(_request_timeout=(5, 5)))
    finally:
        server.join(WAIT)
        listener.close()
    assert transport_cause(error) == "TLS: certificate verify failed: unable to get local issuer certificate"


@pytest.mark.parametrize("error, cause", [
    # what urllib3 raises when a watch's chunked body stops without its last chunk
    (urllib3.exceptions.ProtocolError("Response ended prematurely"), "connection broken: response ended prematurely"),
    # a pooled connection the server reset (urllib3 puts the cause among the arguments)
    (urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer")),
     "connection reset by peer"),
    (urllib3.exceptions.ReadTimeoutError(POOL, "/api/v1/nodes", "Read timed out. (read timeout=30)"), "read timed out"),
    (socket.gaierror(-2, "Name or service not known"), "host name not resolved: name or service not known"),
    # the kubernetes client turns urllib3's SSLError into this (kubernetes/client/rest.py)
    (ApiException(status=0, reason="SSLError\n[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                                   "self-signed certificate (_ssl.c:1006)"),
     "TLS: certificate verify failed: self-signed certificate"),
])
def test_transport_causes_in_words(error, cause):
    assert transport_cause(error) == cause


def test_errors_the_server_answered_and_bugs_are_not_transport_failures():
    assert transport_cause(ApiException(status=403, reason="Forbidden")) is None
    assert transport_cause(ApiException(status=0, reason="Cannot prepare a request message")) is None
    assert transport_cause(ValueError("list response has no items list")) is None
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError:
            raise KeyError("a bug while handling it")  # noqa: B904 - the context is the point
    except KeyError as bug:
        assert transport_cause(bug) is None


# ------------------------------------------------------------------ ApiServerReachability

def api_server_lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "webhook.cluster.api_server" and r.levelno >= logging.INFO]


def test_one_line_per_outage_a_reminder_a_changed_cause_and_one_line_when_it_answers(caplog):
    caplog.set_level(logging.DEBUG, logger="webhook.cluster.api_server")
    clock = FakeClock()
    reachability = ApiServerReachability("https://10.0.0.1:6443", clock=clock, still_every=60.0)
    error = refused()
    assert reachability.reason is None
    assert reachability.failed("list pods", error) is True
    for second in range(1, 60):  # many requests within the first minute: no further line
        clock.now = 1000.0 + second
        assert reachability.failed("watch nodes", error) is True
    assert api_server_lines(caplog) == [
        ("WARNING",
         "API server https://10.0.0.1:6443 unreachable: connection refused (list pods); retrying with back-off")]
    assert reachability.reason == "API server https://10.0.0.1:6443 unreachable: connection refused"
    assert reachability.failures_by_request == {"list pods": 1, "watch nodes": 59}

    clock.now = 1060.0
    reachability.failed("list pods", error)
    clock.now = 1061.0
    reachability.failed("list pods", urllib3.exceptions.ReadTimeoutError(POOL, "/api/v1/pods", "Read timed out."))
    clock.now = 1062.0
    reachability.failed("watch nodes", error)  # a cause seen before in this outage: no line
    clock.now = 1075.5
    reachability.answered("list pods")
    reachability.answered("watch nodes")  # not in an outage any more: nothing
    assert api_server_lines(caplog)[1:] == [
        ("WARNING", "API server https://10.0.0.1:6443 still unreachable after 60 s: connection refused "
                    "(61 failed requests)"),
        ("WARNING",
         "API server https://10.0.0.1:6443 still unreachable after 61 s: read timed out (62 failed requests)"),
        ("INFO", "API server https://10.0.0.1:6443 answers again (list pods) after 75.5 s unreachable "
                 "(63 failed requests; last cause: connection refused)"),
    ]
    assert reachability.reason is None
    assert reachability.failures_by_request == {}


def test_an_error_the_server_answered_is_left_to_the_caller(caplog):
    caplog.set_level(logging.DEBUG, logger="webhook.cluster.api_server")
    reachability = ApiServerReachability("https://10.0.0.1:6443")
    assert reachability.failed("list pods", ApiException(status=403, reason="Forbidden")) is False
    assert caplog.records == []
    assert reachability.reason is None


def test_send_until_answered_backs_off_while_unreachable_and_stops(caplog):
    caplog.set_level(logging.INFO)
    reachability = ApiServerReachability("http://127.0.0.1:1")
    backoff = Backoff(initial=0.001, maximum=0.002, rng=random.Random(3))
    error = refused()
    calls = []

    def send():
        calls.append(1)
        if len(calls) <= 3:
            raise error
        return "the list"

    assert send_until_answered(send, "list pods", reachability, backoff, threading.Event()) == "the list"
    assert len(calls) == 4
    assert [m for _, m in api_server_lines(caplog)][0] == (
        "API server http://127.0.0.1:1 unreachable: connection refused (list pods); retrying with back-off")
    assert [m.split(" after ")[0] for _, m in api_server_lines(caplog)][1:] == [
        "API server http://127.0.0.1:1 answers again (list pods)"]

    stopped = threading.Event()
    stopped.set()
    assert send_until_answered(send, "list pods", reachability, backoff, stopped) is None
    assert len(calls) == 4  # no request once stopped

    def forbidden():
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException):
        send_until_answered(forbidden, "list pods", reachability, backoff, threading.Event())


# ------------------------------------------------------------------ Backoff

def test_backoff_starts_again_after_a_quiet_period():
    clock = FakeClock()
    backoff = Backoff(initial=1.0, maximum=30.0, jitter=0.0, reset_after=120.0, clock=clock)
    assert [backoff.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    clock.now += 120.0  # not more than reset_after: the outage goes on
    assert backoff.next_delay() == 30.0
    clock.now += 120.5
    assert backoff.next_delay() == 1.0


def test_backoff_rejects_a_non_positive_reset_after():
    with pytest.raises(ValueError, match="reset_after > 0 or None"):
        Backoff(reset_after=0)


# ------------------------------------------------------------------ the informer's side

class ListedThenUnreachable:
    """A list method: with ``lists=1`` the first list answers (resourceVersion 5, one pod), and
    every later request (watches, lists) fails to connect, as when the API server goes away; with
    ``lists=0`` every request fails (the server was never reachable)."""

    def __init__(self, lists: int):
        self.lists = lists
        self.requests: list[dict] = []
        self.failed = threading.Event()

    def __call__(self, **kwargs):
        self.requests.append(kwargs)
        if len(self.requests) <= self.lists:
            return _Answer(b'{"metadata": {"resourceVersion": "5"}, "items": '
                           b'[{"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5"}}]}')
        self.failed.set()
        raise refused()


class _Answer:
    def __init__(self, data: bytes):
        self.data = data

    def release_conn(self) -> None:
        pass


@pytest.mark.parametrize("lists", [0, 1], ids=["never-listed", "listed-then-watching"])
def test_a_stopped_informer_ends_during_an_outage_without_spinning_or_emptying_its_cache(caplog, lists):
    """The controller's SIGTERM during an outage (found in a new-user trial: SharedInformer.stop
    never returned, the informer's thread spinning on empty watch answers at 100% CPU): once the
    owner stops, DictLister's list or watch raises InformerStopped, the informer's loop ends,
    ``SharedInformer.stop`` returns, no request is sent after the stop, no traceback is logged and
    the cache keeps its objects (an empty list answer fired a DELETED for each)."""
    from kubernetes.informer import DELETED, ERROR, SharedInformer

    from webhook.cluster.api_server import InformerStopped
    from webhook.cluster.informers import DictLister

    method = ListedThenUnreachable(lists)
    stop = threading.Event()
    listed = threading.Event()
    lister = DictLister(method, "pods", listed.set, stop, reachability=ApiServerReachability("https://127.0.0.1:1"),
                        backoff=Backoff(initial=0.01, maximum=0.05, jitter=0.0))
    informer = SharedInformer(lister)
    deleted: list[object] = []
    errors: list[object] = []
    informer.add_event_handler(DELETED, deleted.append)
    informer.add_event_handler(ERROR, errors.append)
    caplog.set_level(logging.DEBUG)
    informer.start()
    assert method.failed.wait(WAIT) and listed.is_set() == bool(lists)
    stop.set()
    sent = len(method.requests)
    stopper = threading.Thread(target=informer.stop, daemon=True)
    stopper.start()
    stopper.join(WAIT)
    assert not stopper.is_alive(), "SharedInformer.stop did not return"
    assert len(method.requests) <= sent + 1  # at most the request under way when stop came
    assert deleted == [] and list(informer.cache.list_keys()) == (["ns/p"] if lists else [])
    assert all(isinstance(error, (InformerStopped, urllib3.exceptions.HTTPError)) for error in errors)
    assert not [r for r in caplog.records if r.name == INFORMER_LOGGER and r.exc_info], \
        [r.getMessage() for r in caplog.records if r.exc_info]


def test_the_informer_filter_drops_only_its_loops_traceback_of_a_transport_error():
    def record(func_name: str, error: BaseException) -> logging.LogRecord:
        return logging.LogRecord(INFORMER_LOGGER, logging.ERROR, "informer.py", 312,
                                 "Unexpected error in watch loop; reconnecting", (), (type(error), error, None),
                                 func=func_name)

    dropped = InformerTransportTracebacks()
    assert dropped.filter(record("_run_loop", urllib3.exceptions.ProtocolError("Response ended prematurely"))) is False
    assert dropped.filter(record("_run_loop", refused())) is False
    assert dropped.filter(record("_run_loop", ValueError("a bug in the list function"))) is True
    assert dropped.filter(record("_fire", refused())) is True  # an event handler's own error
