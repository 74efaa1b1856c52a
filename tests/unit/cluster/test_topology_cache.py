"""LiveTopologyCatalog against a loopback server that speaks the Kubernetes list/watch protocol
for ``kai.scheduler/v1alpha1`` ``topologies`` (one resource, scripted scenarios).

Protocol facts used here (Kubernetes API concepts, "Efficient detection of changes"): a list
returns ``metadata.resourceVersion``; ``?watch=true&resourceVersion=N`` streams newline-delimited
JSON events ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`` over a chunked
response; an expired resourceVersion is reported as an ERROR event carrying a ``Status`` with
``code: 410`` (or as an HTTP 410), after which the client must list again.

No sleeps are assertions: every check polls with a bounded wait (``eventually``).
"""

from __future__ import annotations

import json
import logging
import queue
import random
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s_client

from webhook.cluster.api_server import Backoff, client_retries
from webhook.cluster.topology_cache import LiveTopologyCatalog, TopologyCacheError

PATH = "/apis/kai.scheduler/v1alpha1/topologies"
WAIT = 10.0  # upper bound of every wait, seconds; normally reached in milliseconds

CLUSTER_TOPOLOGY_LEVELS = (
    "topology.kubernetes.io/zone",
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
)


def topology(name: str, levels, rv: str) -> dict:
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {"levels": [{"nodeLabel": lvl} for lvl in levels]},
    }


def gone_event() -> dict:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 100 (150)", "reason": "Expired", "code": 410,
        },
    }


class FakeApiServer:
    """Loopback HTTP/1.1 server for list + watch of one resource.

    ``items`` / ``list_rv``: what the next list returns. ``list_failures``: how many list requests
    answer HTTP 500 first. ``list_status``: HTTP status codes for the next list requests (e.g. 404:
    no CRD), consumed one per request before ``list_failures``. ``watch_status``: HTTP status codes for the next watch requests (e.g.
    410), consumed one per request. Each watch request gets a queue; ``send(event)``,
    ``drop()`` (close mid-stream without the terminating chunk) and ``end()`` act on the newest.
    ``port``: the loopback port to listen on (0: a free one).
    """

    def __init__(self, port: int = 0):
        self.items: list[dict] = []
        self.list_rv = "1"
        self.list_failures = 0
        self.list_status: list[int] = []
        self.watch_status: list[int] = []
        self.list_requests: list[dict] = []
        self.list_agents: list[str] = []  # User-Agent of each list request (serve: one per worker process)
        self.watch_requests: list[dict] = []
        self._queues: list[queue.Queue] = []
        self._cond = threading.Condition()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path != PATH:
                    self._json(404, {"kind": "Status", "code": 404, "message": "not found"})
                elif query.get("watch") == "true":
                    fake._serve_watch(self, query)
                else:
                    fake._serve_list(self, query)

            def _json(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._handler = Handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # -- server side
    def _serve_list(self, handler, query):
        with self._cond:
            self.list_requests.append(query)
            self.list_agents.append(handler.headers.get("User-Agent", ""))
            scripted = self.list_status.pop(0) if self.list_status else 200
            fail = self.list_failures > 0 and scripted == 200
            if fail:
                self.list_failures -= 1
            body = {
                "apiVersion": "kai.scheduler/v1alpha1", "kind": "TopologyList",
                "metadata": {"resourceVersion": self.list_rv}, "items": list(self.items),
            }
            self._cond.notify_all()
        if scripted != 200:
            handler._json(scripted, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": scripted,
                                     "reason": "NotFound" if scripted == 404 else "InternalError",
                                     "message": "the server could not find the requested resource"})
        elif fail:
            handler._json(500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                                "reason": "InternalError", "message": "etcd is sad"})
        else:
            handler._json(200, body)

    def _serve_watch(self, handler, query):
        q: queue.Queue = queue.Queue()
        with self._cond:
            self.watch_requests.append(query)
            status = self.watch_status.pop(0) if self.watch_status else 200
            if status == 200:
                self._queues.append(q)
            self._cond.notify_all()
        if status != 200:
            handler._json(status, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                   "reason": "Expired" if status == 410 else "InternalError",
                                   "message": f"status {status}"})
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.wfile.flush()
        try:
            while True:
                try:
                    action, payload = q.get(timeout=WAIT * 3)
                except queue.Empty:
                    action, payload = "end", None
                if action == "event":
                    line = (json.dumps(payload) + "\n").encode()
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    handler.wfile.flush()
                elif action == "drop":
                    handler.close_connection = True
                    handler.connection.shutdown(socket.SHUT_RDWR)
                    return
                else:  # end: the server-side timeoutSeconds elapsed
                    handler.wfile.write(b"0\r\n\r\n")
                    handler.wfile.flush()
                    handler.close_connection = True
                    return
        except OSError:  # the client went away (stop())
            handler.close_connection = True

    # -- test side
    def start(self):
        self._thread.start()
        return self

    def close(self):
        with self._cond:
            for q in self._queues:
                q.put(("end", None))
        self.httpd.shutdown()
        self.httpd.server_close()

    def wait_watches(self, n: int) -> dict:
        """Block until ``n`` watch requests arrived; returns the n-th query."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.watch_requests) >= n, WAIT), \
                f"expected watch request #{n}, got {len(self.watch_requests)}"
            return self.watch_requests[n - 1]

    def _current(self) -> queue.Queue:
        with self._cond:
            return self._queues[-1]

    def send(self, event: dict):
        self._current().put(("event", event))

    def drop(self):
        self._current().put(("drop", None))

    def end(self):
        self._current().put(("end", None))


def eventually(predicate, what: str, timeout: float = WAIT):
    """Poll ``predicate`` until true or ``timeout`` seconds passed (then fail naming ``what``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.005)
    assert predicate(), f"timed out waiting for: {what}"


def fast_backoff() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05, rng=random.Random(7))


@pytest.fixture
def server():
    srv = FakeApiServer().start()
    yield srv
    srv.close()


@pytest.fixture
def make_cache(server):
    caches = []

    def make(**kwargs):
        cfg = k8s_client.Configuration()
        cfg.host = f"http://127.0.0.1:{server.port}"
        cache = LiveTopologyCatalog(k8s_client.ApiClient(cfg), backoff=fast_backoff(), **kwargs)
        caches.append(cache)
        return cache

    yield make
    for cache in caches:
        assert cache.stop(timeout=WAIT) is True, "the informer thread did not stop"


def test_initial_list_then_added_modified_deleted_and_bookmark(server, make_cache):
    server.items = [
        topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90"),
        # malformed: no levels -> skipped with a warning, never fatal
        {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
         "metadata": {"name": "broken", "resourceVersion": "91"}, "spec": {"levels": []}},
    ]
    server.list_rv = "100"
    cache = make_cache()
    assert cache.synced is False
    assert cache.names() == []
    cache.start()

    assert cache.wait_synced(WAIT) is True
    assert cache.names() == ["cluster-topology"]
    assert cache.get("cluster-topology").levels == CLUSTER_TOPOLOGY_LEVELS
    assert cache.get("broken") is None

    first = server.wait_watches(1)
    assert first["watch"] == "true"
    assert first["resourceVersion"] == "100"
    assert first["allowWatchBookmarks"] == "true"
    assert len(server.list_requests) == 1

    server.send({"type": "ADDED", "object": topology("rack-only", ["cloud.provider.com/topology-rack"], "101")})
    eventually(lambda: cache.names() == ["cluster-topology", "rack-only"], "ADDED rack-only")
    assert cache.get("rack-only").levels == ("cloud.provider.com/topology-rack",)

    server.send({"type": "MODIFIED", "object": topology(
        "rack-only", ["cloud.provider.com/topology-rack", "kubernetes.io/hostname"], "102")})
    eventually(lambda: cache.get("rack-only").levels == ("cloud.provider.com/topology-rack", "kubernetes.io/hostname"),
               "MODIFIED rack-only")

    server.send({"type": "DELETED", "object": topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "103")})
    eventually(lambda: cache.names() == ["rack-only"], "DELETED cluster-topology")
    assert cache.get("cluster-topology") is None

    server.send({"type": "BOOKMARK", "object": {"kind": "Topology", "apiVersion": "kai.scheduler/v1alpha1",
                                                "metadata": {"resourceVersion": "150"}}})
    eventually(lambda: cache.resource_version == "150", "BOOKMARK advances the resourceVersion")

    # A malformed object (invalid label key) is skipped; the thread lives on and applies the next event.
    server.send({"type": "ADDED", "object": topology("bad-key", ["not a label key!"], "151")})
    server.send({"type": "ADDED", "object": topology("zone-only", ["topology.kubernetes.io/zone"], "152")})
    eventually(lambda: "zone-only" in cache.names(), "ADDED after a malformed object")
    assert cache.names() == ["rack-only", "zone-only"]
    assert cache.resource_version == "152"
    assert cache.synced is True
    assert len(server.watch_requests) == 1  # all of it on one watch connection
    assert len(server.list_requests) == 1


def test_error_event_410_gone_relists_and_watches_from_new_version(server, make_cache):
    server.items = [topology("old", ["kubernetes.io/hostname"], "5")]
    server.list_rv = "100"
    cache = make_cache().start()
    assert server.wait_watches(1)["resourceVersion"] == "100"
    assert cache.names() == ["old"]

    # Meanwhile the cluster changed and the watch window expired.
    server.items = [topology("new", ["topology.kubernetes.io/zone", "kubernetes.io/hostname"], "180")]
    server.list_rv = "200"
    server.send(gone_event())

    second = server.wait_watches(2)
    assert second["resourceVersion"] == "200"
    assert len(server.list_requests) == 2
    eventually(lambda: cache.names() == ["new"], "catalog replaced by the re-list")
    assert cache.get("new").levels == ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
    assert cache.synced is True
    assert cache.list_count == 2
    # The list's resourceVersion, not the item's "180": the informer's replay of the re-list as
    # ADDED/DELETED events is not applied again.
    assert cache.resource_version == "200"


def test_http_410_on_watch_request_relists(server, make_cache):
    server.items = [topology("a", ["kubernetes.io/hostname"], "7")]
    server.list_rv = "100"
    cache = make_cache().start()
    server.wait_watches(1)
    server.watch_status = [410]  # the next watch request is answered with HTTP 410
    server.list_rv = "300"
    server.end()  # server-side timeout: the client re-watches from 100 and gets 410

    assert server.wait_watches(2)["resourceVersion"] == "100"
    third = server.wait_watches(3)
    assert third["resourceVersion"] == "300"
    assert len(server.list_requests) == 2
    assert cache.names() == ["a"]


def tracebacks(caplog) -> list[str]:
    """The records logged with an exception (the informer's ``logger.exception`` among them)."""
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info]


def test_dropped_connection_resumes_from_last_resource_version_without_relist(server, make_cache, caplog):
    caplog.set_level(logging.INFO)
    server.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
    server.list_rv = "100"
    cache = make_cache().start()
    server.wait_watches(1)
    server.send({"type": "ADDED", "object": topology("rack-only", ["cloud.provider.com/topology-rack"], "105")})
    eventually(lambda: cache.get("rack-only") is not None, "ADDED before the drop")

    server.drop()  # connection closed mid-stream (no terminating chunk)

    resumed = server.wait_watches(2)
    assert resumed["resourceVersion"] == "105"
    assert len(server.list_requests) == 1
    server.send({"type": "DELETED", "object": topology("rack-only", ["cloud.provider.com/topology-rack"], "106")})
    eventually(lambda: cache.names() == ["cluster-topology"], "DELETED after the resume")
    assert cache.synced is True
    assert tracebacks(caplog) == []  # the informer's "Unexpected error in watch loop" traceback is not logged
    assert [r.getMessage() for r in caplog.records if r.name == "webhook.cluster.api_server"][0] == (
        f"API server http://127.0.0.1:{server.port} unreachable: connection broken: response ended prematurely "
        "(watch topologies); retrying with back-off")


def test_clean_watch_end_resumes_from_last_resource_version(server, make_cache):
    server.list_rv = "100"
    cache = make_cache().start()
    server.wait_watches(1)
    server.send({"type": "ADDED", "object": topology("z", ["topology.kubernetes.io/zone"], "120")})
    eventually(lambda: cache.names() == ["z"], "ADDED z")
    server.end()
    assert server.wait_watches(2)["resourceVersion"] == "120"
    assert len(server.list_requests) == 1


def test_list_errors_back_off_then_sync(server, make_cache):
    server.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
    server.list_rv = "100"
    server.list_failures = 3  # HTTP 500 three times
    cache = make_cache()
    cache.start()
    assert cache.wait_synced(WAIT) is True
    assert len(server.list_requests) == 4
    assert cache.names() == ["cluster-topology"]
    assert server.wait_watches(1)["resourceVersion"] == "100"


def test_synced_stays_true_while_watch_fails(server, make_cache):
    server.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
    server.list_rv = "100"
    cache = make_cache().start()
    server.wait_watches(1)
    server.watch_status = [500, 500]
    server.end()
    server.wait_watches(3)
    eventually(lambda: cache.last_error is not None or len(server.watch_requests) >= 4, "watch errors seen")
    assert cache.synced is True
    assert cache.names() == ["cluster-topology"]
    fourth = server.wait_watches(4)  # back-off, then resumes from the same version
    assert fourth["resourceVersion"] == "100"
    assert len(server.list_requests) == 1


def test_stop_closes_an_open_watch_and_the_thread_ends_without_a_logged_error(server, make_cache, caplog):
    caplog.set_level(logging.DEBUG)
    server.list_rv = "1"
    cache = make_cache().start()
    server.wait_watches(1)
    assert cache.stop(timeout=WAIT) is True  # the fake server would keep the watch open for 30 s
    # the socket shutdown ends the watch with an error: neither the informer's traceback nor an
    # outage line is logged for it, and no request follows the stop
    assert tracebacks(caplog) == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert (len(server.list_requests), len(server.watch_requests)) == (1, 1)


def test_stop_during_a_list_back_off_ends_the_thread_without_a_watch_request_or_error(server, make_cache, caplog):
    """Stopped while the list is retried: the list function answers empty, the informer then asks
    for a watch and gets the finished empty response (no request), and its loop ends."""
    caplog.set_level(logging.DEBUG)
    server.list_status = [500] * 1000
    cache = make_cache().start()
    eventually(lambda: len(server.list_requests) >= 2, "the list retried")
    assert cache.stop(timeout=WAIT) is True
    lists = len(server.list_requests)
    assert server.watch_requests == []
    assert tracebacks(caplog) == []
    assert [r.levelname for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert len(server.list_requests) == lists  # the thread has ended: nothing more is sent


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released; a server may start on it later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_api_server_is_one_line_until_it_answers(make_cache, caplog):
    """No API server on the port: one WARNING naming the URL and the cause however many attempts
    (the library's own logging gave a traceback, and urllib3 three retry warnings, per attempt);
    /readyz's reason says so; when a server starts there, one INFO line and the catalog syncs."""
    caplog.set_level(logging.DEBUG)
    port = closed_port()
    url = f"http://127.0.0.1:{port}"
    configuration = k8s_client.Configuration()
    configuration.host = url
    configuration.retries = client_retries()  # as api_client_from_kubeconfig sets it
    cache = LiveTopologyCatalog(k8s_client.ApiClient(configuration), backoff=fast_backoff()).start()
    try:
        eventually(lambda: cache.reachability.failures_by_request.get("list topologies", 0) >= 20,
                   "20 list attempts failed")
        assert cache.synced is False
        assert cache.last_error == f"API server {url} unreachable: connection refused"
        assert [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO] == [
            ("WARNING", f"API server {url} unreachable: connection refused (list topologies); retrying with back-off")]

        back = FakeApiServer(port=port).start()
        try:
            back.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
            back.list_rv = "100"
            assert cache.wait_synced(WAIT) is True
            assert cache.names() == ["cluster-topology"]
            back.wait_watches(1)
        finally:
            assert cache.stop(timeout=WAIT) is True
            back.close()
    finally:
        cache.stop(timeout=WAIT)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "webhook.cluster.api_server"
             and r.levelno >= logging.INFO]
    assert len(lines) == 2
    assert lines[1][0] == "INFO"
    assert re.fullmatch(rf"API server {re.escape(url)} answers again \(list topologies\) after [0-9.]+ s unreachable "
                        r"\(\d+ failed requests; last cause: connection refused\)", lines[1][1]), lines[1][1]
    assert tracebacks(caplog) == []


def test_a_watch_resumes_from_its_resource_version_when_the_api_server_is_back(make_cache, caplog):
    """The API server goes away under an open watch and comes back: the watch is opened again
    from the last resourceVersion (no re-list, as client-go's reflector after "connection
    refused"), one line when it goes, one when it answers, no traceback."""
    caplog.set_level(logging.INFO)
    port = closed_port()
    first = FakeApiServer(port=port).start()
    first.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
    first.list_rv = "100"
    configuration = k8s_client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.retries = client_retries()
    cache = LiveTopologyCatalog(k8s_client.ApiClient(configuration), backoff=fast_backoff()).start()
    second = None
    try:
        first.wait_watches(1)
        first.send({"type": "ADDED", "object": topology("rack-only", ["cloud.provider.com/topology-rack"], "105")})
        eventually(lambda: cache.get("rack-only") is not None, "ADDED before the server went away")
        first.close()
        eventually(lambda: cache.reachability.failures_by_request.get("watch topologies", 0) >= 3,
                   "the watch failed to reconnect 3 times")
        second = FakeApiServer(port=port).start()
        assert second.wait_watches(1)["resourceVersion"] == "105"
        assert second.list_requests == []
        assert cache.names() == ["cluster-topology", "rack-only"]
    finally:
        assert cache.stop(timeout=WAIT) is True
        if second is not None:
            second.close()
    url = f"http://127.0.0.1:{port}"
    outage = [r.getMessage() for r in caplog.records if r.name == "webhook.cluster.api_server"]
    refused = [f"API server {url} unreachable: connection refused (watch topologies); retrying with back-off"]
    # the first reconnect can meet the closing server's listening socket, which resets it
    reset_then_refused = [
        f"API server {url} unreachable: connection reset by peer (watch topologies); retrying with back-off",
        f"API server {url} still unreachable after 0 s: connection refused (2 failed requests)"]
    assert outage[:-1] in (refused, reset_then_refused)
    assert re.fullmatch(rf"API server {re.escape(url)} answers again \(watch topologies\) after [0-9.]+ s unreachable "
                        r"\(\d+ failed requests; last cause: connection refused\)", outage[-1]), outage[-1]
    assert tracebacks(caplog) == []


def test_reads_are_consistent_under_concurrent_updates(server, make_cache):
    """Readers never see a half-applied update: each snapshot of names() is a set that
    existed (the catalog is replaced, never edited in place)."""
    server.list_rv = "1"
    cache = make_cache().start()
    server.wait_watches(1)
    seen_bad = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            for name in cache.names():
                topo = cache.get(name)
                if topo is not None and topo.name != name:
                    seen_bad.append(name)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(200):
        server.send({"type": "ADDED", "object": topology(f"t{i}", ["kubernetes.io/hostname"], str(10 + i))})
    eventually(lambda: len(cache.names()) == 200, "200 topologies added")
    stop.set()
    for t in threads:
        t.join()
    assert seen_bad == []
    assert cache.resource_version == "209"


def test_from_kubeconfig_file(server, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
    }))
    server.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
    server.list_rv = "100"
    cache = LiveTopologyCatalog.from_kubeconfig(str(kubeconfig), backoff=fast_backoff()).start()
    try:
        assert cache.wait_synced(WAIT) is True
        assert cache.names() == ["cluster-topology"]
    finally:
        cache.stop()


def test_from_kubeconfig_errors_name_the_source(tmp_path, monkeypatch):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(TopologyCacheError) as info:
        LiveTopologyCatalog.from_kubeconfig(missing)
    assert str(info.value) == (f"cannot load kubeconfig {missing!r}: no such file; fix: name a kubeconfig file "
                               "(kubectl config view --raw --minify > FILE)")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(TopologyCacheError, match="in-cluster"):
        LiveTopologyCatalog.from_kubeconfig(None)
    not_a_kubeconfig = tmp_path / "hostname"
    not_a_kubeconfig.write_text("build-host\n")
    with pytest.raises(TopologyCacheError) as info:
        LiveTopologyCatalog.from_kubeconfig(str(not_a_kubeconfig))
    assert str(info.value) == (f"cannot load kubeconfig {str(not_a_kubeconfig)!r}: "
                               "not a kubeconfig (a YAML mapping with clusters, users and contexts)")
    # not YAML at all: the line, the parser's problem and the fix, as for a manifest; no traceback
    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("not: [valid\n")
    with pytest.raises(TopologyCacheError) as info:
        LiveTopologyCatalog.from_kubeconfig(str(not_yaml))
    assert str(info.value).startswith(f"cannot load kubeconfig {str(not_yaml)!r}: line 2, column 1: not valid YAML: "
                                      "expected ',' or ']', but got '<stream end>' (in the [ ] list that starts at line 1, "
                                      "column 6)\nfix: close the [ at line 1, column 6 with ], and separate its items "
                                      "with commas")
    assert "\nfix: " in str(info.value) and "<unicode string>" not in str(info.value)
    # a directory: the system's reason and the fix, not "[Errno 21] Is a directory: '...'"
    with pytest.raises(TopologyCacheError) as info:
        LiveTopologyCatalog.from_kubeconfig(str(tmp_path))
    assert str(info.value) == (f"cannot load kubeconfig {str(tmp_path)!r}: Is a directory; fix: name a kubeconfig "
                               "file (kubectl config view --raw --minify > FILE)")


def test_backoff_doubles_to_the_cap_and_resets():
    b = Backoff(initial=0.2, maximum=30.0, factor=2.0, jitter=0.0)
    delays = [b.next_delay() for _ in range(10)]
    assert delays == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
    b.reset()
    assert b.next_delay() == pytest.approx(0.2)


def test_backoff_jitter_stays_within_half_to_full_delay():
    b = Backoff(initial=0.2, maximum=30.0, jitter=0.5, rng=random.Random(1))
    bases = [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    delays = [b.next_delay() for _ in bases]
    for d, base in zip(delays, bases):
        assert base * 0.5 <= d <= base
    assert len(set(delays)) == len(delays)  # jittered, not a fixed ladder


@pytest.mark.parametrize("kwargs", [{"initial": 0}, {"initial": 1, "maximum": 0.5}, {"factor": 0.5}, {"jitter": 2}])
def test_backoff_rejects_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_missing_crd_404_is_a_known_state_then_the_crd_appears(server, make_cache):
    """DESIGN.md §10: a cluster without the Topology CRD answers 404 on the list. That is a known
    state (synced, no topologies, crd_missing); the list is retried with back-off, so a CRD
    installed later is picked up, and then the catalog is an ordinary listed one."""
    server.list_status = [404, 404, 404]
    server.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
    server.list_rv = "100"
    cache = make_cache().start()
    assert cache.wait_synced(WAIT) is True
    if cache.state == "crd-missing":  # seen before the third retry found the CRD
        assert cache.crd_missing is True
        assert cache.names() == []
        assert cache.last_error == ("list answered 404 (the KAI Scheduler Topology CRD topologies.kai.scheduler "
                                    "is not installed)")
    # The CRD is "installed" after three 404s: the fourth list succeeds and the watch starts.
    assert server.wait_watches(1)["resourceVersion"] == "100"
    assert len(server.list_requests) == 4
    eventually(lambda: cache.state == "listed", "listed after the CRD appeared")
    assert cache.crd_missing is False
    assert cache.names() == ["cluster-topology"]
    assert cache.last_error is None


def test_missing_crd_state_while_it_stays_missing(server, make_cache):
    server.list_status = [404] * 1000
    cache = make_cache().start()
    eventually(lambda: len(server.list_requests) >= 3, "the list retried")
    assert cache.synced is True
    assert cache.crd_missing is True
    assert cache.state == "crd-missing"
    assert cache.names() == [] and cache.get("cluster-topology") is None
    assert "topologies.kai.scheduler is not installed" in cache.last_error
    assert server.watch_requests == []  # nothing to watch


def test_crd_deleted_under_a_watch_is_the_missing_state(server, make_cache):
    server.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
    server.list_rv = "100"
    cache = make_cache().start()
    server.wait_watches(1)
    assert cache.crd_missing is False
    # Deleting a CRD deletes its objects (DELETED events), then the resource answers 404.
    server.send({"type": "DELETED", "object": topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "101")})
    eventually(lambda: cache.names() == [], "DELETED")
    server.watch_status = [404]
    server.end()
    server.wait_watches(3)  # the 404, then a retry with back-off
    eventually(lambda: cache.crd_missing, "404 on the watch: crd-missing")
    assert cache.synced is True
    # The CRD comes back and a Topology is created: the watch delivers it.
    server.send({"type": "ADDED", "object": topology("rack-only", ["cloud.provider.com/topology-rack"], "120")})
    eventually(lambda: cache.names() == ["rack-only"], "ADDED after the CRD came back")
    assert cache.state == "listed"


def test_other_list_errors_stay_unsynced_with_the_reason(server, make_cache):
    server.list_status = [403] * 1000
    cache = make_cache().start()
    eventually(lambda: len(server.list_requests) >= 2, "the list retried")
    assert cache.synced is False
    assert cache.crd_missing is False
    assert cache.state == "waiting"
    assert cache.last_error == ("API error 403: Forbidden (RBAC: the service account needs get/list/watch "
                                "on topologies.kai.scheduler)")


# ------------------------------------------------------------------ serve against a loopback API server

def _kubeconfig_for_url(url: str, path) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
    }))
    return str(path)


def _kubeconfig_for(server: FakeApiServer, path) -> str:
    return _kubeconfig_for_url(f"http://127.0.0.1:{server.port}", path)


SEG_SIZE, TOPO_KEY = "kai.scheduler/segment-size", "kai.scheduler/topology"
RACK = "cloud.provider.com/topology-rack"


def _post(srv, body) -> dict:
    import requests

    resp = requests.post(srv["url"] + "/mutate", data=json.dumps(body), verify=srv["ca"], timeout=30,
                         headers={"Content-Type": "application/json"})
    assert resp.status_code == 200
    return resp.json()["response"]


def test_serve_without_the_topology_crd_is_ready_and_answers_as_design_10(server, tmp_path):
    """DESIGN.md §10: the API server answers 404 for Topologies. serve is ready; a workload that
    names a topology is denied saying no Topology exists and how to install the CRD; pods are
    unaffected."""
    import base64

    import jsonpatch
    import requests

    from tests.support.serving import admission_review, clean_env, running_serve

    server.list_status = [404] * 100_000
    kubeconfig = _kubeconfig_for(server, tmp_path / "kubeconfig")
    with running_serve(tmp_path, "--kubeconfig", kubeconfig, env=clean_env(), ready_path="/readyz",
                       ready_workers=2) as srv:  # both workers answered ready (each names itself)
        # both workers synced, the condition itself: each worker (its own User-Agent) listed again
        # after a 404, so it has applied the first 404 (the "no CRD" state) before the second list
        eventually(lambda: len({a for a in server.list_agents if server.list_agents.count(a) >= 2}) == 2,
                   "both serve workers saw the 404", timeout=30)
        ready = requests.get(srv["url"] + "/readyz", verify=srv["ca"], timeout=10)
        assert ready.status_code == 200
        assert ready.json() == {"ready": True, "topologiesSynced": True, "certificateLoaded": True}

        job = {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pytorch-tp4"},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}}},
                "Worker": {"replicas": 16, "template": {
                    "metadata": {"annotations": {TOPO_KEY: "cluster-topology", SEG_SIZE: "4",
                                                 "kai.scheduler/segment-topology-required-placement": RACK}},
                    "spec": {"containers": [{"name": "pytorch", "image": "i"}]}}}}},
        }
        # Each of the 2 workers has its own informer: ask a few times so both answer.
        for _ in range(4):
            answer = _post(srv, admission_review(job))
            assert answer["allowed"] is False
            assert answer["status"]["code"] == 403
            assert answer["status"]["message"] == (
                'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/topology"] = '
                '"cluster-topology": no Topology exists: the cluster has no Topology CRD (topologies.kai.scheduler) '
                "(rule unknown-topology); fix: install the CRD (kubectl apply -f https://raw.githubusercontent.com/"
                "NVIDIA/KAI-Scheduler/main/deployments/kai-scheduler/crds/kai.scheduler_topologies.yaml; or install "
                'KAI Scheduler), then create Topology "cluster-topology".')

        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "pytorch-tp4-worker-5",
                            "labels": {"training.kubeflow.org/replica-type": "worker",
                                       "training.kubeflow.org/replica-index": "5"},
                            "annotations": {SEG_SIZE: "4", TOPO_KEY: "cluster-topology"}},
               "spec": {"containers": [{"name": "pytorch", "image": "i"}]}}
        answer = _post(srv, admission_review(pod))
        assert answer["allowed"] is True
        patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
        assert patched["metadata"]["labels"]["kai.scheduler/segment-index"] == "1"  # worker 5 // 4
        assert patched["metadata"]["labels"]["kai.scheduler/subgroup-name"] == "worker-1"
    assert len(server.list_requests) >= 2  # both workers listed (and keep retrying for a CRD)
    assert server.watch_requests == []


def test_serve_with_a_failing_topology_list_is_not_ready_and_says_why(server, tmp_path):
    """DESIGN.md §10: other list errors keep the webhook unready until a list succeeds, and
    /readyz shows the reason."""
    import requests

    from tests.support.serving import clean_env, running_serve

    server.list_status = [403] * 100_000
    kubeconfig = _kubeconfig_for(server, tmp_path / "kubeconfig")
    expected = {
        "ready": False, "topologiesSynced": False, "certificateLoaded": True,
        "reason": "the Topology catalog has not completed its first list yet: API error 403: Forbidden "
                  "(RBAC: the service account needs get/list/watch on topologies.kai.scheduler)"}
    with running_serve(tmp_path, "--kubeconfig", kubeconfig, env=clean_env()) as srv:
        eventually(lambda: len(server.list_requests) >= 2, "both workers tried the list")
        # the condition itself: a list the server received may not have been answered and read by
        # the worker yet (its /readyz then has no cause: a run failed on that), so poll the answer
        answers: list[requests.Response] = []

        def says_why() -> bool:
            answers.append(requests.get(srv["url"] + "/readyz", verify=srv["ca"], timeout=10))
            return bool(answers[-1].json() == expected)

        eventually(says_why, "/readyz names the 403 and the RBAC fix")
        assert answers[-1].status_code == 503
        assert answers[-1].json() == expected


def test_serve_without_an_api_server_logs_one_line_per_worker_and_one_when_it_answers(tmp_path):
    """New-user trial: `serve --kubeconfig` pointing at a closed port logged a MaxRetryError line per
    attempt and worker. Now each worker's catalog logs one line naming the server and the cause,
    /readyz says why it is not ready, and each logs one line when a server starts there."""
    import requests

    from tests.support.serving import clean_env, running_serve

    port = closed_port()
    url = f"http://127.0.0.1:{port}"
    kubeconfig = _kubeconfig_for_url(url, tmp_path / "kubeconfig")
    outage_line = f"webhook.cluster.api_server: API server {url} unreachable: connection refused (list topologies); " \
                  "retrying with back-off"
    with running_serve(tmp_path, "--kubeconfig", kubeconfig, env=clean_env()) as srv:
        def log_lines() -> list[str]:
            return srv["log"].read_text(errors="replace").splitlines()

        eventually(lambda: sum(line.endswith(outage_line) for line in log_lines()) == 2, "one line from each worker",
                   timeout=30)
        ready = requests.get(srv["url"] + "/readyz", verify=srv["ca"], timeout=10)
        assert ready.status_code == 503
        assert ready.json()["reason"] == ("the Topology catalog has not completed its first list yet: "
                                          f"API server {url} unreachable: connection refused")
        back = FakeApiServer(port=port).start()
        try:
            back.items = [topology("cluster-topology", CLUSTER_TOPOLOGY_LEVELS, "90")]
            eventually(lambda: sum(" answers again (list topologies) " in line for line in log_lines()) == 2,
                       "each worker's line when the server answers", timeout=30)
            eventually(lambda: requests.get(srv["url"] + "/readyz", verify=srv["ca"], timeout=10).status_code == 200,
                       "ready")
        finally:
            back.close()
        lines = log_lines()
    assert sum(" unreachable: " in line for line in lines) == 2
    assert not any("Traceback" in line or "MaxRetryError" in line for line in lines), lines
