#!/usr/bin/env python3
"""The three serving faults of issue 20 item 5, measured on a real ``segment-webhook serve``.

Each scenario starts ``segment-webhook serve`` (TLS, a freshly generated CA, ``--workers``) from
``--source`` (default: this checkout; give an older checkout to measure the previous design the
same way, with the same load) on 127.0.0.1 and prints what the clients saw:

``heavy N``  N connections send a 1.3 MB AdmissionReview back to back (a PyTorchJob whose Worker
             template carries 50,000 integer annotations: the review of tests/unit/http/test_http_bounds.py,
             about 0.5 s of CPU in the domain core), each on its own keep-alive connection. After
             1 s of that, for ``--duration`` seconds, a small pod review (the worker pod of
             benchmarks/admission.py) is sent every 50 ms on ONE keep-alive connection, and every
             100 ms on a new connection. Printed: the heavy answers (count, p50, max: kube-apiserver
             gives up after deploy's ``timeoutSeconds: 5``) and the small reviews' p50/p99/max on
             the keep-alive and the new connections.
``idle``     ``--idle`` TLS connections (default 2,000: 2 workers x 1,000) that handshake and then
             send nothing (reconnecting at once when the server closes one: the worst case for
             eviction), then ``GET /healthz`` and a small review, each on a new connection, every
             0.5 s for ``--duration`` seconds (client timeout 20 s). Printed: answered / timed out,
             p50/max, and how often the idle clients were closed and reconnected.
``dribble``  a request head, and a request body, sent a byte every 0.5 s: how long until the
             server answers or closes (serve: 10 s each, its deadlines; at most 30 s).
``hostile N`` N reviews of a hostile object sent at once, each on its own new connection, in
             ``--repeat`` rounds (issue 37 item 9): ``--shape labels``, a pod that opts in and
             carries 50,000 small labels (1.6 MB); ``--shape groups``, a JobSet that opts in with
             2,000 replicatedJobs (0.4 MB). Printed: every answer's latency, p50/max, the answers
             past 1 s and past 5 s (deploy's ``timeoutSeconds``), and the answer's first words.
``restarts N`` N times: SIGTERM to a worker (gunicorn starts another), then 2 small reviews;
             printed: the files and bytes of the metrics directory (``PROMETHEUS_MULTIPROC_DIR``)
             at the start and after the N restarts, and the reviews counted by ``/metrics``
             against those sent.
``keepalive`` one request on a keep-alive connection, then nothing: how long until the server
             closes it (serve: 120 s, longer than kube-apiserver's 90 s; at most 40 s here).
``sigterm``  8 client threads open new connections back to back (TLS handshake, ``GET /healthz``,
             read the answer); 1 s in, the server gets SIGTERM. Printed per outcome: answered 200,
             refused at connect (the listener is closed: fine), reset during the TLS handshake
             (connections the kernel had queued on the listener when it closed), and **handshaken,
             then closed without an answer** (curl's exit 52, "Empty reply from server": the
             fault), over the whole shutdown. Repeated ``--repeat`` times.
``sigterm-reviews`` 8 client threads send a small review on a new connection each, back to back,
             and 8 send reviews on one keep-alive connection each, 0-100 ms apart; 1 s in, the
             server gets SIGTERM. Printed per kind: answered, refused at connect, reset in the TLS
             handshake, and **sent, then closed without an answer** (the fault), and the seconds
             from SIGTERM to the server's exit. Repeated ``--repeat`` times.

``--worker stock`` serves the same ``serve`` under gunicorn's stock gevent worker with public
settings only (``benchmarks/stock_worker.py``); ``benchmarks/serving_choice.py`` runs the checks of
issue 38 item 2 for both workers in one table.

    python benchmarks/serving_faults.py heavy 16
    python benchmarks/serving_faults.py idle
    python benchmarks/serving_faults.py sigterm --repeat 5
    python benchmarks/serving_faults.py sigterm-reviews --repeat 2 --worker stock
    python benchmarks/serving_faults.py heavy 4 --source /tmp/previous-checkout
    python benchmarks/serving_faults.py hostile 4 --repeat 5 --shape labels
    python benchmarks/serving_faults.py dribble --granian .venv/bin/granian   # the design weighed

Figures are wall-clock latencies on this machine, clients and server sharing its CPUs: run the
designs to compare one after the other, with nothing else running.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SMALL_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"generateName": "pytorch-tp4-worker-5-", "namespace": "team-a",
                 "labels": {"training.kubeflow.org/job-name": "pytorch-tp4",
                            "training.kubeflow.org/replica-type": "worker",
                            "training.kubeflow.org/replica-index": "5"},
                 "annotations": {"kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-size": "4",
                                 "kai.scheduler/segment-topology-required-placement":
                                     "cloud.provider.com/topology-rack"}},
    "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]},
}


def review_document(obj: dict, kind: dict, uid: str) -> dict:
    """An AdmissionReview v1 CREATE of ``obj`` as kube-apiserver sends it (written out here so that
    an older ``--source`` is measured with exactly the same bytes)."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": kind, "resource": {"group": kind["group"], "version": kind["version"],
                                               "resource": kind["kind"].lower() + "s"},
        "operation": "CREATE", "namespace": "team-a", "name": obj["metadata"].get("name", ""),
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]}, "object": obj}}


def small_review_body() -> bytes:
    """The small pod review (about 1 KB)."""
    return json.dumps(review_document(SMALL_POD, {"group": "", "version": "v1", "kind": "Pod"},
                                      "00000000-0000-0000-0000-000000000001")).encode()


def heavy_review_body() -> bytes:
    """The 1.3 MB review: a 16-worker PyTorchJob whose Worker template carries the three segment
    keys and 50,000 integer annotations (tests/unit/http/test_http_bounds.py)."""
    annotations = {"kai.scheduler/topology": "cluster-topology", "kai.scheduler/segment-size": "4",
                   "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-rack"}
    annotations.update({f"example.com/a{i}": i for i in range(50_000)})
    template = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "big", "namespace": "team-a"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": template},
               "Worker": {"replicas": 16, "template": {"metadata": {"annotations": annotations}, **template}}}}}
    return json.dumps(review_document(job, {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
                                      "00000000-0000-0000-0000-000000000002")).encode()


def hostile_review_body(shape: str) -> bytes:
    """The review of a hostile object (issue 37 item 9), opted in with the three segment keys:
    ``labels``, a pod with 50,000 labels ``example.com/label-<i>: v``; ``groups``, a JobSet with
    2,000 replicatedJobs of 4 pods each."""
    keys = dict(SMALL_POD["metadata"]["annotations"])
    if shape == "labels":
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "hostile", "namespace": "team-a", "annotations": keys,
                            "labels": {f"example.com/label-{i}": "v" for i in range(50_000)}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        return json.dumps(review_document(pod, {"group": "", "version": "v1", "kind": "Pod"},
                                          "00000000-0000-0000-0000-000000000003")).encode()
    jobs = [{"name": f"r{i}", "replicas": 1, "template": {"spec": {"parallelism": 4, "completions": 4, "template": {
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}} for i in range(2_000)]
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "hostile", "namespace": "team-a", "annotations": keys},
              "spec": {"replicatedJobs": jobs}}
    return json.dumps(review_document(jobset, {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
                                      "00000000-0000-0000-0000-000000000004")).encode()


# ------------------------------------------------------------------------- the server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def granian_app():
    """The webhook's app as ``serve`` builds it (embedded topology, default settings), for granian
    (``--granian``: the server with public head-deadline settings weighed in the README)."""
    from webhook.admission.config import AdmissionSettings
    from webhook.cli.flags import static_topologies
    from webhook.http.app import create_app

    catalog, default = static_topologies(None, None)
    return create_app(catalog, AdmissionSettings(default_topology=default))


class Server:
    """``segment-webhook serve`` from ``source`` on a free loopback port, stderr kept in a file;
    with ``granian`` (the path of its command), granian serving the same app (:func:`granian_app`)
    with ``--http1-header-read-timeout 10000`` (the ``--read-timeout`` of serve)."""

    def __init__(self, source: str, workers: int, extra: list[str], granian: str | None = None,
                 metrics_dir: str | None = None, worker: str = "custom"):
        self.dir = tempfile.mkdtemp(prefix="serving-faults-")
        self.port = free_port()
        self.ca = os.path.join(self.dir, "certs", "ca.crt")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SEGMENT_WEBHOOK_", "PROMETHEUS_MULTIPROC"))}
        if metrics_dir is not None:  # the operator's metrics directory (else serve makes its own)
            env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        env.pop("KUBERNETES_SERVICE_HOST", None)
        env["PYTHONPATH"] = f"{source}{os.pathsep}{HERE}"
        self.log = open(os.path.join(self.dir, "stderr.log"), "wb")
        if granian:
            from cryptography.hazmat.primitives import serialization

            from webhook.http import certs

            certs.write_certificates(certs.generate(), os.path.join(self.dir, "certs"))
            key_path = os.path.join(self.dir, "certs", "tls.key")
            with open(key_path, "rb") as fh:  # granian reads PKCS#8 keys only
                key = serialization.load_pem_private_key(fh.read(), None)
            with open(key_path, "wb") as fh:
                fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
            argv = [granian, "--interface", "wsgi", "--factory", "--host", "127.0.0.1", "--port", str(self.port),
                    "--workers", str(workers), "--ssl-certificate", os.path.join(self.dir, "certs", "tls.crt"),
                    "--ssl-keyfile", key_path, "--ssl-protocol-min", "tls1.2",
                    "--http1-header-read-timeout", "10000", "--no-ws", *extra, "serving_faults:granian_app"]
        else:
            # --worker stock: the same serve under gunicorn's stock gevent worker (stock_worker.py)
            runner = ["-m", "webhook.cli"] if worker == "custom" else [str(HERE / "stock_worker.py")]
            argv = [sys.executable, *runner, "serve", "--bind", f"127.0.0.1:{self.port}",
                    "--cert-dir", os.path.join(self.dir, "certs"), "--workers", str(workers), *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log, env=env, cwd=source)
        self._wait_ready()

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca)

    def _wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context(), timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except (OSError, ssl.SSLError):
                pass
            time.sleep(0.1)
        raise RuntimeError("serve did not become ready")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def post(conn: http.client.HTTPSConnection, body: bytes) -> int:
    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(name: str, latencies: list[float], errors: int) -> str:
    ms = [v * 1000 for v in latencies]
    return (f"{name:<34} n={len(ms):5d} errors={errors:3d}  p50 {percentile(ms, 0.5):8.0f} ms  "
            f"p99 {percentile(ms, 0.99):8.0f} ms  max {max(ms) if ms else float('nan'):8.0f} ms")


# ------------------------------------------------------------------------- heavy

def heavy(server: Server, n_heavy: int, duration: float) -> dict:
    heavy_body, small_body = heavy_review_body(), small_review_body()
    stop = threading.Event()
    results: dict[str, list] = {"heavy": [], "heavy_errors": [], "keepalive": [], "keepalive_errors": [],
                                "new": [], "new_errors": []}

    def heavy_sender() -> None:
        conn = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=60)
                started = time.perf_counter()
                status = post(conn, heavy_body)
                results["heavy"].append(time.perf_counter() - started)
                if status != 200:
                    results["heavy_errors"].append(status)
            except (OSError, http.client.HTTPException) as exc:
                results["heavy_errors"].append(repr(exc))
                conn = None

    def keepalive_prober() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=60)
        post(conn, small_body)  # connected and used once before the load
        while not probing.is_set():
            time.sleep(0.01)
        while not stop.is_set():
            started = time.perf_counter()
            try:
                status = post(conn, small_body)
                results["keepalive"].append(time.perf_counter() - started)
                if status != 200:
                    results["keepalive_errors"].append(status)
            except (OSError, http.client.HTTPException) as exc:
                results["keepalive_errors"].append(repr(exc))
                conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=60)
            time.sleep(0.05)

    def new_connection_prober() -> None:
        while not probing.is_set():
            time.sleep(0.01)
        while not stop.is_set():
            started = time.perf_counter()
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=60)
                status = post(conn, small_body)
                conn.close()
                results["new"].append(time.perf_counter() - started)
                if status != 200:
                    results["new_errors"].append(status)
            except (OSError, http.client.HTTPException) as exc:
                results["new_errors"].append(repr(exc))
            time.sleep(0.1)

    probing = threading.Event()
    threads = [threading.Thread(target=heavy_sender, daemon=True) for _ in range(n_heavy)]
    threads += [threading.Thread(target=keepalive_prober, daemon=True),
                threading.Thread(target=new_connection_prober, daemon=True)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    probing.set()
    time.sleep(duration)
    stop.set()
    for t in threads:
        t.join(60)
    print(figures(f"heavy 1.3 MB reviews ({n_heavy} senders)", results["heavy"], len(results["heavy_errors"])))
    print(figures("small review, keep-alive connection", results["keepalive"], len(results["keepalive_errors"])))
    print(figures("small review, new connections", results["new"], len(results["new_errors"])))
    over = sum(1 for v in results["heavy"] if v > 5.0)
    print(f"heavy answers past 5 s (deploy's timeoutSeconds): {over}")
    return results


# ------------------------------------------------------------------------- hostile

def server_cpu_seconds(server: Server) -> float:
    """CPU seconds (user + system) used so far by the serve process and its workers (Linux
    ``/proc/<pid>/stat``); a figure that the other processes on the machine do not change."""
    pids = [server.proc.pid]
    try:
        with open(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children", encoding="ascii") as fh:
            pids += [int(p) for p in fh.read().split()]
    except OSError:
        pass
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return total


def hostile(server: Server, n: int, shape: str, rounds: int) -> list[float]:
    """``rounds`` rounds of ``n`` hostile reviews (:func:`hostile_review_body`) sent at once, each
    on a new connection; prints each round's latencies and the summary. Returns every latency."""
    body = hostile_review_body(shape)
    latencies: list[float] = []
    errors: list[str] = []
    answers: set[str] = set()

    def one() -> None:
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=60)
            started = time.perf_counter()
            conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            latencies.append(time.perf_counter() - started)
            conn.close()
            answer = json.loads(data).get("response", {})
            words = answer.get("status", {}).get("message") or "; ".join(answer.get("warnings", [])) or "(no message)"
            answers.add(f"HTTP {resp.status}, allowed={answer.get('allowed')}: {words[:110]}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            errors.append(repr(exc))

    cpu_before = server_cpu_seconds(server)
    for round_ in range(rounds):
        threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
        start = len(latencies)
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        print(f"round {round_ + 1}: " + ", ".join(f"{v:.2f} s" for v in latencies[start:]), flush=True)
    cpu = server_cpu_seconds(server) - cpu_before
    print(f"hostile {shape} review ({len(body):,} bytes), {n} at once x {rounds} rounds:")
    print(figures(f"hostile {shape}", latencies, len(errors)))
    print(f"server CPU (master and workers, user + system) per review: {cpu / max(1, n * rounds) * 1000:.0f} ms")
    print(f"answers past 1 s: {sum(1 for v in latencies if v > 1.0)}; past 5 s (deploy's timeoutSeconds): "
          f"{sum(1 for v in latencies if v > 5.0)}")
    for answer in sorted(answers):
        print(f"  {answer}")
    return latencies


# ------------------------------------------------------------------------- restarts

def restarts(server: Server, metrics_dir: str, count: int) -> tuple[int, int]:
    """``count`` worker restarts (SIGTERM to one worker, wait until ready, 2 small reviews);
    prints the metrics directory before and after and the reviews counted. Returns (files, bytes)."""
    body = small_review_body()
    sent = 0

    def review(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=30)
            post(conn, body)
            conn.close()
            sent += 1

    def directory() -> tuple[int, int]:
        names = [n for n in os.listdir(metrics_dir) if n.endswith(".db")]
        return len(names), sum(os.path.getsize(os.path.join(metrics_dir, n)) for n in names)

    review(10)
    files, size = directory()
    print(f"start: {files} metric files, {size:,} bytes")
    for _ in range(count):
        with open(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children", encoding="ascii") as fh:
            worker = int(fh.read().split()[0])
        os.kill(worker, signal.SIGTERM)
        while os.path.exists(f"/proc/{worker}"):
            time.sleep(0.05)
        server._wait_ready()
        review(2)
    files, size = directory()
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    counted = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("segment_webhook_reviews_total{"))
    print(f"after {count} worker restarts: {files} metric files, {size:,} bytes; /metrics counts {counted:.0f} "
          f"reviews of {sent} sent")
    return files, size


# ------------------------------------------------------------------------- idle

async def _idle_clients(port: int, ca: str, count: int, stop: asyncio.Event, counters: dict) -> None:
    context = ssl.create_default_context(cafile=ca)

    async def one() -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=context), 30)
            except (OSError, asyncio.TimeoutError, ssl.SSLError):
                counters["failed"] += 1
                await asyncio.sleep(0.5)
                continue
            counters["open"] += 1
            stop_wait = asyncio.ensure_future(stop.wait())
            closed = asyncio.ensure_future(reader.read(1))
            done, _ = await asyncio.wait({stop_wait, closed}, return_when=asyncio.FIRST_COMPLETED)
            counters["open"] -= 1
            if closed in done:
                counters["closed_by_server"] += 1
            stop_wait.cancel()
            closed.cancel()
            writer.transport.abort()

    await asyncio.gather(*(one() for _ in range(count)))


def _idle_process(port: int, ca: str, count: int, seconds: float, queue) -> None:
    counters = {"open": 0, "failed": 0, "closed_by_server": 0}

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.ensure_future(_idle_clients(port, ca, count, stop, counters))
        await asyncio.sleep(seconds)
        queue.put(dict(counters))
        stop.set()
        await asyncio.wait_for(task, 30)

    try:
        asyncio.run(main())
    except Exception:  # noqa: BLE001 - the figures were sent
        pass


def idle(server: Server, count: int, duration: float) -> dict:
    import multiprocessing as mp

    queue = mp.Queue()
    ramp = 20.0
    proc = mp.Process(target=_idle_process, args=(server.port, server.ca, count, ramp + duration + 1, queue))
    proc.start()
    time.sleep(ramp)  # 2,000 handshakes on 2 shared CPUs
    small_body = small_review_body()
    results: dict[str, list] = {"healthz": [], "healthz_errors": [], "review": [], "review_errors": []}
    end = time.monotonic() + duration
    while time.monotonic() < end:
        for name in ("healthz", "review"):
            started = time.perf_counter()
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context(), timeout=20)
                if name == "healthz":
                    conn.request("GET", "/healthz")
                    resp = conn.getresponse()
                    resp.read()
                    status = resp.status
                else:
                    status = post(conn, small_body)
                conn.close()
                if status == 200:
                    results[name].append(time.perf_counter() - started)
                else:
                    results[name + "_errors"].append(status)
            except (OSError, http.client.HTTPException) as exc:
                results[name + "_errors"].append(repr(exc))
        time.sleep(0.5)
    counters = queue.get(timeout=60)
    proc.join(60)
    results["counters"] = [counters]
    print(f"idle TLS clients: {count} (reconnecting when closed); at the end {counters['open']} open, "
          f"{counters['closed_by_server']} closed by the server, {counters['failed']} connects failed")
    print(figures("GET /healthz, new connections", results["healthz"], len(results["healthz_errors"])))
    print(figures("small review, new connections", results["review"], len(results["review_errors"])))
    for name in ("healthz_errors", "review_errors"):
        if results[name]:
            print(f"  {name}: {sorted(set(map(str, results[name])))[:3]}")
    return results


# ------------------------------------------------------------------------- sigterm

def sigterm(server: Server, clients: int = 8) -> dict:
    outcomes = {"answered": 0, "refused": 0, "reset_in_handshake": 0, "closed_unanswered": 0, "other": 0}
    lock = threading.Lock()
    stop = threading.Event()
    context = server.context()

    def client() -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            except OSError:
                with lock:
                    outcomes["refused"] += 1
                time.sleep(0.01)
                continue
            outcome = "other"
            try:
                try:
                    tls = context.wrap_socket(sock, server_hostname="127.0.0.1")
                except (ssl.SSLError, OSError):
                    sock.close()
                    with lock:
                        outcomes["reset_in_handshake"] += 1
                    continue
                with tls:
                    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    data = b""
                    while True:
                        chunk = tls.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    if data.startswith(b"HTTP/1.1 200"):
                        outcome = "answered"
                    elif not data:
                        outcome = "closed_unanswered"
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError):
                outcome = "closed_unanswered"
            except OSError:
                outcome = "other"
            with lock:
                outcomes[outcome] += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    sent = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(40)
    took = time.monotonic() - sent
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(10)
    print(f"SIGTERM -> exit {code} after {took:.2f} s; connections: {outcomes['answered']} answered, "
          f"{outcomes['refused']} refused at connect, {outcomes['reset_in_handshake']} reset in the TLS handshake "
          f"(left in the listen queue when the listener closed), {outcomes['closed_unanswered']} handshaken and "
          f"closed unanswered (curl exit 52), {outcomes['other']} other")
    return outcomes


def _read_answer(tls: ssl.SSLSocket) -> tuple[bytes, bool]:
    """Read one HTTP/1.1 answer with ``Content-Length`` from ``tls``: (its bytes, whether it
    carries ``Connection: close``); (b"", True) when the server closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(65536)
        if not chunk:
            return data, True
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lower = head.lower()
    length = 0
    for line in lower.split(b"\r\n")[1:]:
        if line.startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(rest) < length:
        chunk = tls.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest, b"connection: close" in lower


def sigterm_reviews(server: Server, clients: int = 8) -> dict:
    """SIGTERM while reviews are in flight and already sent: ``clients`` threads send a small review
    on a new connection each (``Connection: close``) back to back, and ``clients`` threads send
    reviews on one keep-alive connection each, 0-100 ms apart (a connection found closed by the
    server while idle is replaced before sending, as Go's transport does). 1 s in, the server gets
    SIGTERM. Counted per request: answered 200, refused at connect, reset in the TLS handshake,
    and **sent, then closed without an answer** (the fault: kube-apiserver does not retry a POST
    dropped there). Also the seconds from SIGTERM to the server's exit."""
    import random

    kinds = ("new", "keepalive")
    outcomes = {k: {"answered": 0, "refused": 0, "reset_in_handshake": 0, "closed_unanswered": 0,
                    "closed_while_sending": 0, "other": 0} for k in kinds}
    lock = threading.Lock()
    stop = threading.Event()
    context = server.context()
    body = small_review_body()
    head = (b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n")
    requests = {True: head + b"Connection: close\r\n\r\n" + body, False: head + b"\r\n" + body}

    def count(kind: str, outcome: str) -> None:
        with lock:
            outcomes[kind][outcome] += 1

    def connect(kind: str) -> ssl.SSLSocket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=40)
        except OSError:
            count(kind, "refused")
            time.sleep(0.01)
            return None
        try:
            return context.wrap_socket(sock, server_hostname="127.0.0.1")
        except (ssl.SSLError, OSError):
            sock.close()
            count(kind, "reset_in_handshake")
            return None

    def one(kind: str, tls: ssl.SSLSocket, close: bool) -> bool:
        """One review on ``tls``; True when the connection may be used again."""
        try:
            tls.sendall(requests[close])
        except OSError:
            count(kind, "closed_while_sending")
            return False
        try:
            data, closing = _read_answer(tls)
        except OSError:
            data, closing = b"", True
        if data.startswith(b"HTTP/1.1 200"):
            count(kind, "answered")
        elif not data:
            count(kind, "closed_unanswered")
        else:
            count(kind, "other")
        return not closing

    def new_client() -> None:
        while not stop.is_set():
            tls = connect("new")
            if tls is not None:
                with tls:
                    one("new", tls, True)

    def keepalive_client() -> None:
        tls = None
        while not stop.is_set():
            if tls is not None:
                import select

                readable, _, _ = select.select([tls], [], [], 0)
                if readable:  # closed by the server while idle (EOF or close_notify): not sent
                    tls.close()
                    tls = None
            if tls is None:
                tls = connect("keepalive")
                if tls is None:
                    continue
            if not one("keepalive", tls, False):
                tls.close()
                tls = None
            time.sleep(random.uniform(0, 0.1))
        if tls is not None:
            tls.close()

    threads = [threading.Thread(target=new_client, daemon=True) for _ in range(clients)]
    threads += [threading.Thread(target=keepalive_client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    sent = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(60)
    took = time.monotonic() - sent
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(10)
    for kind in kinds:
        o = outcomes[kind]
        print(f"SIGTERM -> exit {code} after {took:.2f} s; reviews on {kind} connections: {o['answered']} answered, "
              f"{o['refused']} refused at connect, {o['reset_in_handshake']} reset in the TLS handshake, "
              f"{o['closed_unanswered']} sent and closed unanswered, {o['closed_while_sending']} closed while "
              f"sending, {o['other']} other")
    return {"exit_code": code, "exit_seconds": took, **outcomes}


# ------------------------------------------------------------------------- dribble

def dribble(server: Server, every: float = 0.5, give_up: float = 30.0) -> dict:
    """A request head, then a request body, each sent a byte every ``every`` seconds on its own
    connection: how long until the server answers or closes (``give_up`` at most). serve's
    deadlines (--read-timeout 10) end both after 10 s, however slow the bytes."""
    head = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    results = {}

    def one(name: str, first: bytes, trickle: bytes) -> None:
        context = server.context()
        tls = context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=give_up),
                                  server_hostname="127.0.0.1")
        tls.sendall(first)
        tls.setblocking(False)
        started = time.monotonic()
        outcome = f"still open after {give_up:.0f} s"
        for byte in trickle:
            if time.monotonic() - started > give_up:
                break
            try:
                data = tls.recv(4096)
                status = data.split(b"\r\n", 1)[0].decode(errors="replace")
                outcome = f"answered {status!r}" if data else "closed"
                break
            except (ssl.SSLWantReadError, BlockingIOError):
                pass
            except OSError as exc:
                outcome = f"closed ({exc.__class__.__name__})"
                break
            try:
                tls.sendall(bytes([byte]))
            except (ssl.SSLWantWriteError, BlockingIOError):
                pass
            except OSError as exc:
                outcome = f"closed ({exc.__class__.__name__})"
                break
            time.sleep(every)
        results[name] = (time.monotonic() - started, outcome)
        tls.close()

    threads = [threading.Thread(target=one, args=("head a byte at a time", b"", head + b"x" * 1000)),
               threading.Thread(target=one, args=("body a byte at a time", head, b"x" * 1000))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(give_up + 30)
    for name, (seconds, outcome) in results.items():
        print(f"{name:<24} ({every} s per byte): {outcome} after {seconds:.1f} s")
    return results


# ------------------------------------------------------------------------- keepalive

def keepalive(server: Server, give_up: float = 40.0) -> float | None:
    """One request on a keep-alive connection, then nothing: seconds until the server closes the
    connection (None: still open after ``give_up``). kube-apiserver keeps idle connections 90 s
    and does not retry a POST sent on a connection the server closes meanwhile; serve keeps them
    120 s."""
    tls = server.context().wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=give_up),
                                       server_hostname="127.0.0.1")
    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while not data.endswith(b"}\n"):
        data += tls.recv(4096)
    started = time.monotonic()
    try:
        tls.recv(1)
        closed: float | None = time.monotonic() - started
        print(f"idle keep-alive connection closed by the server after {closed:.1f} s")
    except TimeoutError:
        closed = None
        print(f"idle keep-alive connection still open after {give_up:.0f} s")
    tls.close()
    return closed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=("heavy", "idle", "sigterm", "sigterm-reviews", "dribble", "keepalive",
                                                 "hostile", "restarts"))
    parser.add_argument("count", nargs="?", type=int, default=16,
                        help="heavy: senders of the 1.3 MB review; hostile: reviews sent at once; "
                             "restarts: worker restarts")
    parser.add_argument("--shape", choices=("labels", "groups"), default="labels", help="hostile: the object")
    parser.add_argument("--source", default=str(HERE.parent), help="checkout whose webhook package is served")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of probing (default 10)")
    parser.add_argument("--idle", type=int, default=2000, help="idle: TLS connections (default 2000)")
    parser.add_argument("--repeat", type=int, default=1, help="sigterm: runs; hostile: rounds (default 1)")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra argument for serve (repeatable)")
    parser.add_argument("--worker", choices=("custom", "stock"), default="custom",
                        help="serve's own worker (default), or gunicorn's stock gevent worker with public settings "
                             "only (benchmarks/stock_worker.py)")
    parser.add_argument("--granian", metavar="COMMAND", help="serve the same app with granian (its command's path) "
                                                             "instead of segment-webhook serve")
    args = parser.parse_args(argv)
    print(f"serving faults: {args.scenario}; {'granian' if args.granian else 'serve'} from {args.source}"
          f"{' (stock gevent worker)' if args.worker == 'stock' and not args.granian else ''}; "
          f"{os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; --workers {args.workers}", flush=True)
    runs = args.repeat if args.scenario.startswith("sigterm") else 1
    for _ in range(runs):
        metrics_dir = tempfile.mkdtemp(prefix="serving-faults-metrics-") if args.scenario == "restarts" else None
        server = Server(args.source, args.workers, args.serve_arg, args.granian, metrics_dir, args.worker)
        try:
            if args.scenario == "heavy":
                heavy(server, args.count, args.duration)
            elif args.scenario == "hostile":
                hostile(server, args.count, args.shape, args.repeat)
            elif args.scenario == "restarts":
                restarts(server, metrics_dir or "", args.count)
            elif args.scenario == "idle":
                idle(server, args.idle, args.duration)
            elif args.scenario == "dribble":
                dribble(server)
            elif args.scenario == "keepalive":
                keepalive(server)
            elif args.scenario == "sigterm-reviews":
                sigterm_reviews(server)
            else:
                sigterm(server)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
