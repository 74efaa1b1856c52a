#!/usr/bin/env python3
"""Admission benchmark: the real webhook against a no-op webhook, over HTTPS, with Go clients.

Starts two servers as subprocesses on 127.0.0.1 with the same gunicorn settings
(``webhook.http.server.ServeOptions`` defaults, TLS with a freshly generated CA):

* ``webhook``: ``segment-webhook serve`` with its defaults (embedded topology ``cluster-topology``);
* ``noop``: a Flask app that answers ``allowed: true`` with the request's uid for any
  AdmissionReview (same framework and server, no admission logic, metrics or review log).

Two AdmissionReview requests: ``pytorchjob`` (CREATE of the seed's 16-worker PyTorchJob
``pytorch-tp4``, segment size 4, rack) and ``pod`` (CREATE of its worker pod 5, DESIGN.md §7).
Phases, webhook and no-op alternating so that other load on the machine hits both alike:

1. **Go clients** (``hey``, Go ``net/http`` like kube-apiserver: keep-alive, plus the spare
   connections its transport dials and leaves idle after the TLS handshake) at each
   ``--concurrency`` (1, 8, 32, 128, 512) for ``--duration`` seconds, both payloads;
2. the same (PyTorchJob) with ``--dribblers`` connections sending a request head one byte every
   2 s and ``--idle`` TLS connections that send nothing attached to each server at once (they
   reconnect when closed), and
   ``GET /healthz`` plus one review on a new connection every 0.25-0.5 s: first with only the
   slow clients attached (the 2 s goal), then during the Go phases;
3. **open loop** at ``--rate`` reviews/s to each server, both at once: requests alternate
   between the two servers (request i due at ``t0 + i/(2 rate)``, to the webhook when i is
   even; latency from the due time: no coordinated omission), so a stall of the machine (the
   p99 of a shared VM is made of them) delays both servers' requests alike; ``--procs`` x
   ``--conns`` keep-alive Python clients.

Prints throughput (reviews/s answered 200), errors and p50/p99 for every phase, the webhook/no-op
throughput and p99 ratios, and the goals of issue 9 (met or not). ``--source DIR`` serves another
checkout's ``webhook`` package (both servers), to compare serving designs. Exit status 0; 1 when
a server did not start, an answer was wrong or a phase had errors; 2 without ``hey``
(``apt-get install hey``).

    python benchmarks/admission.py                       # about 4 minutes
    python benchmarks/admission.py --concurrency 8,128 --duration 2 --json result.json
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

PYTORCHJOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "pytorch-tp4", "namespace": "team-a"},
    "spec": {
        "pytorchReplicaSpecs": {
            "Master": {
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}},
            },
            "Worker": {
                "replicas": 16,
                "template": {
                    "metadata": {"annotations": {
                        "kai.scheduler/topology": "cluster-topology",
                        "kai.scheduler/segment-size": "4",
                        "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-rack",
                    }},
                    "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]},
                },
            },
        },
    },
}

WORKER_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "generateName": "pytorch-tp4-worker-5-",
        "namespace": "team-a",
        "labels": {
            "training.kubeflow.org/job-name": "pytorch-tp4",
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": "5",
        },
        "annotations": {
            "kai.scheduler/topology": "cluster-topology",
            "kai.scheduler/segment-size": "4",
            "kai.scheduler/segment-topology-required-placement": "cloud.provider.com/topology-rack",
        },
    },
    "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]},
}


def admission_review(obj: dict) -> dict:
    """An AdmissionReview v1 CREATE request for ``obj`` as kube-apiserver sends it (the project's
    one builder, with a fixed uid and user so every run sends the same bytes)."""
    from webhook.admission.request import build_review

    return build_review(obj, user="alice", uid="00000000-0000-0000-0000-000000000000")


_PAYLOADS: dict = {}


def payloads() -> dict:
    """The two reviews by name (``pytorchjob``, ``pod``), built on first use: the no-op server
    process, which may run another checkout's ``webhook`` package (``--source``), never builds them."""
    if not _PAYLOADS:
        _PAYLOADS.update(pytorchjob=admission_review(PYTORCHJOB), pod=admission_review(WORKER_POD))
    return _PAYLOADS


def __getattr__(name: str) -> dict:
    """``admission.PAYLOADS`` for importers: :func:`payloads`."""
    if name == "PAYLOADS":
        return payloads()
    raise AttributeError(name)


# ------------------------------------------------------------------------- the no-op server

def noop_app_factory():
    """A Flask app answering ``allowed: true`` (with the request uid) to any AdmissionReview."""
    from flask import Flask, Response, request

    app = Flask("noop_webhook")

    @app.post("/mutate")
    def mutate():
        review = json.loads(request.get_data(cache=False))
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True}}
        return Response(json.dumps(body, separators=(",", ":")) + "\n", mimetype="application/json")

    @app.get("/readyz")
    def readyz():
        return Response('{"ready":true}\n', mimetype="application/json")

    @app.get("/healthz")
    def healthz():
        return Response('{"status":"ok"}\n', mimetype="application/json")

    return app


def run_noop_server(bind: str, cert_dir: str, workers: int | None) -> None:
    """Serve the no-op app with the webhook's own gunicorn settings (``ServeOptions`` defaults,
    as ``serve``; ``workers`` when given)."""
    from webhook.http.server import ServeOptions, run

    options = ServeOptions(bind=bind, certfile=os.path.join(cert_dir, "tls.crt"),
                           keyfile=os.path.join(cert_dir, "tls.key"), loglevel="warning")
    if workers:
        options.workers = workers
    run(noop_app_factory, options)


# ------------------------------------------------------------------------- process control

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ssl_context(ca_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.check_hostname = True
    return ctx


def wait_ready(port: int, ca_file: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with status {proc.returncode}")
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ssl_context(ca_file), timeout=2)
            conn.request("GET", "/readyz")
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status == 200:
                return
            last = f"HTTP {resp.status}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"server on port {port} not ready after {timeout:.0f}s: {last}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # gunicorn: graceful shutdown
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# ------------------------------------------------------------------------- load generation

def _client_proc(args: tuple) -> dict:
    """One client process: ``conns`` threads, each with its own keep-alive connection.

    ``ports``: the servers, loaded side by side: request ``i`` of the schedule goes to
    ``ports[i % len(ports)]``, so that a stall of the machine delays requests to every server
    alike. Open loop (``rate`` > 0, reviews/s per server): this process owns requests
    ``proc_index, proc_index + procs, ...`` of a global schedule ``t0 + i / (rate * len(ports))``;
    thread ``k`` of it takes every ``conns``-th of those. Closed loop (``rate`` == 0, one server):
    each thread sends back to back until ``t0 + duration``.
    Returns latencies in seconds and error texts, one list of each per server."""
    ports, ca_file, body, rate, duration, t0, proc_index, procs, conns = args
    latencies: list[list[float]] = [[] for _ in ports]
    errors: list[list[str]] = [[] for _ in ports]
    lock = threading.Lock()
    end = t0 + duration
    headers = {"Content-Type": "application/json", "Connection": "keep-alive"}

    def connect(server: int) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection("127.0.0.1", ports[server], context=ssl_context(ca_file), timeout=10)
        conn.connect()
        return conn

    def one(conns_by_server: dict, server: int) -> None:
        conn = conns_by_server.get(server) or connect(server)
        conns_by_server[server] = conn
        try:
            conn.request("POST", "/mutate", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or b'"allowed":true' not in data.replace(b" ", b""):
                with lock:
                    errors[server].append(f"HTTP {resp.status}: {data[:200]!r}")
        except (OSError, http.client.HTTPException) as exc:
            with lock:
                errors[server].append(f"{type(exc).__name__}: {exc}")
            conn.close()
            conns_by_server[server] = connect(server)

    def worker(k: int) -> None:
        own: list[list[float]] = [[] for _ in ports]
        open_conns: dict = {}
        if rate > 0:
            total_rate = rate * len(ports)
            i = proc_index + procs * k
            step = procs * conns
            while True:
                due = t0 + i / total_rate
                if due >= end:
                    break
                now = time.perf_counter()
                if due > now:
                    time.sleep(due - now)
                server = i % len(ports)
                one(open_conns, server)
                own[server].append(time.perf_counter() - due)
                i += step
        else:
            while True:
                start = time.perf_counter()
                if start >= end:
                    break
                one(open_conns, 0)
                own[0].append(time.perf_counter() - start)
        for conn in open_conns.values():
            conn.close()
        with lock:
            for server, values in enumerate(own):
                latencies[server].extend(values)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"latencies": latencies, "errors": errors}


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def run_phase(pool, ports: list[int], ca_file: str, body: bytes, rate: float, duration: float,
              procs: int, conns: int) -> list[tuple[list[float], list[str]]]:
    """Load ``ports`` side by side for ``duration`` seconds at ``rate`` reviews/s each; returns,
    per server, (latencies in s, error texts)."""
    # perf_counter is CLOCK_MONOTONIC on Linux: comparable across the forked client processes.
    t0 = time.perf_counter() + 0.3
    jobs = [(tuple(ports), ca_file, body, rate, duration, t0, p, procs, conns) for p in range(procs)]
    parts = pool.map(_client_proc, jobs)
    return [([x for part in parts for x in part["latencies"][server]],
             [e for part in parts for e in part["errors"][server]]) for server in range(len(ports))]


def summarize(latencies: list[float], errors: list[str], duration: float) -> dict:
    """Throughput (reviews/s over ``duration`` s) and nearest-rank percentiles in ms."""
    lat = sorted(latencies)
    return {
        "requests": len(lat),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "throughput": len(lat) / duration,
        "p50_ms": percentile(lat, 50) * 1e3,
        "p95_ms": percentile(lat, 95) * 1e3,
        "p99_ms": percentile(lat, 99) * 1e3,
        "max_ms": (lat[-1] * 1e3) if lat else float("nan"),
    }


def check_webhook_answers(port: int, ca_file: str) -> dict:
    """One request per payload to the real webhook; returns the responses (for the printout)."""
    out = {}
    for name, review in payloads().items():
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ssl_context(ca_file), timeout=10)
        conn.request("POST", "/mutate", body=json.dumps(review), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = json.loads(resp.read())
        conn.close()
        response = data.get("response", {})
        if resp.status != 200 or response.get("allowed") is not True or response.get("uid") != review["request"]["uid"]:
            raise RuntimeError(f"webhook answered {name} with HTTP {resp.status}: {json.dumps(data)[:300]}")
        patch = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
        out[name] = {"allowed": True, "patchType": response.get("patchType"), "patch": patch,
                     "warnings": response.get("warnings", [])}
    return out



# ------------------------------------------------------------------------- Go-style clients (hey)

HEY_LINE = {
    "total": re.compile(r"Total:\s+([0-9.]+) secs"),
    "p50": re.compile(r"50% in ([0-9.]+) secs"),
    "p99": re.compile(r"99% in ([0-9.]+) secs"),
}


def run_hey(url: str, body_file: str, concurrency: int, duration: float, timeout_s: int = 20) -> dict:
    """Load ``url`` with ``hey`` (Go net/http, as kube-apiserver: keep-alive, and the spare
    connections its transport dials and leaves idle after the TLS handshake) for ``duration``
    seconds with ``concurrency`` workers; returns requests answered 200, errors (other statuses,
    timeouts, resets), throughput (200s per second) and p50/p99 in ms (hey's, over every answer)."""
    cmd = ["hey", "-z", f"{duration:g}s", "-c", str(concurrency), "-t", str(timeout_s), "-m", "POST",
           "-T", "application/json", "-D", body_file, "-disable-compression", url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + timeout_s + 60).stdout
    ok = sum(int(n) for code, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", out) if code == "200")
    other = sum(int(n) for code, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", out) if code != "200")
    errors_part = out.split("Error distribution:", 1)[1] if "Error distribution:" in out else ""
    failed = sum(int(n) for n in re.findall(r"^\s*\[(\d+)\]", errors_part, re.M))
    first_error = errors_part.strip().splitlines()[0].strip() if errors_part.strip() else (
        f"{other} answers other than 200" if other else None)
    found = {k: (float(m.group(1)) if (m := rx.search(out)) else float("nan")) for k, rx in HEY_LINE.items()}
    total = found["total"] if found["total"] == found["total"] and found["total"] > 0 else duration
    return {"requests": ok, "errors": other + failed, "first_error": first_error,
            "throughput": ok / total, "p50_ms": found["p50"] * 1e3, "p99_ms": found["p99"] * 1e3, "seconds": total}


def combine(parts: list[dict]) -> dict:
    """One figure from several hey runs of one phase: requests and errors added, throughput over
    the summed time, p50/p99 the request-weighted mean of the runs' (hey gives percentiles, not
    the latencies)."""
    requests = sum(p["requests"] for p in parts)
    seconds = sum(p["seconds"] for p in parts)
    weight = requests or 1

    def mean(key: str) -> float:
        return sum(p[key] * p["requests"] for p in parts if p["requests"]) / weight if requests else float("nan")

    return {"requests": requests, "errors": sum(p["errors"] for p in parts),
            "first_error": next((p["first_error"] for p in parts if p["first_error"]), None),
            "throughput": requests / seconds if seconds else 0.0, "p50_ms": mean("p50_ms"), "p99_ms": mean("p99_ms"),
            "seconds": seconds, "server_cpu_s": sum(p.get("server_cpu_s", 0.0) for p in parts),
            "server_cpu_us_per_review": (
                sum(p.get("server_cpu_s", 0.0) for p in parts) / requests * 1e6 if requests else float("nan"))}



def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and its live children (the
    gunicorn master and its workers), from ``/proc/<pid>/stat``; 0.0 where ``/proc`` is absent."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        # after the command: state(0) ppid(1) ... utime(11) stime(12)
        if int(entry) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_hey_measured(server_pid: int, *args, **kwargs) -> dict:
    """:func:`run_hey`, plus ``server_cpu_s``: the CPU seconds the server's processes spent during
    the run. Per review answered this is what the server itself pays, whatever else shares the
    machine (throughput, by contrast, moves with every other process on the 2 CPUs)."""
    before = tree_cpu_seconds(server_pid)
    result = run_hey(*args, **kwargs)
    result["server_cpu_s"] = tree_cpu_seconds(server_pid) - before
    return result

# ------------------------------------------------------------------------- slow clients

def _slow_clients_proc(port: int, dribblers: int, idle: int, byte_every_s: float, stop_event) -> None:
    """``dribblers`` connections that send a request head one byte every ``byte_every_s`` seconds
    and ``idle`` TLS connections that complete the handshake and send nothing; each reconnects
    when the server closes it, so the number attached stays constant until ``stop_event``."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    head = b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 4000

    def connect() -> ssl.SSLSocket | None:
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            return context.wrap_socket(raw, server_hostname="127.0.0.1")
        except OSError:
            time.sleep(0.2)
            return None

    def dribbler() -> None:
        while not stop_event.is_set():
            sock = connect()
            if sock is None:
                continue
            try:
                for i in range(len(head)):
                    if stop_event.wait(byte_every_s):
                        break
                    sock.sendall(head[i:i + 1])
            except OSError:
                pass
            finally:
                sock.close()

    def idler() -> None:
        while not stop_event.is_set():
            sock = connect()
            if sock is None:
                continue
            try:
                sock.settimeout(0.5)
                while not stop_event.is_set():
                    try:
                        if not sock.recv(1):
                            break  # closed by the server: reconnect
                    except TimeoutError:
                        continue
            except OSError:
                pass
            finally:
                sock.close()

    threads = [threading.Thread(target=dribbler, daemon=True) for _ in range(dribblers)]
    threads += [threading.Thread(target=idler, daemon=True) for _ in range(idle)]
    for t in threads:
        t.start()
    stop_event.wait()


def probe(port: int, ca_file: str, body: bytes) -> dict:
    """``GET /healthz`` and one review, each on a new TLS connection; seconds each took (None when
    it failed or took over 10 s)."""
    out = {}
    for name, method, path, payload in (("healthz", "GET", "/healthz", None), ("review", "POST", "/mutate", body)):
        start = time.perf_counter()
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ssl_context(ca_file), timeout=10)
            conn.request(method, path, body=payload, headers={"Content-Type": "application/json", "Connection": "close"})
            resp = conn.getresponse()
            resp.read()
            conn.close()
            out[name] = time.perf_counter() - start if resp.status == 200 else None
        except (OSError, http.client.HTTPException):
            out[name] = None
    return out


class Prober:
    """Probes a server every ``every_s`` seconds in a thread (:func:`probe`), keeping the results."""

    def __init__(self, port: int, ca_file: str, body: bytes, every_s: float = 0.5):
        self.results: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(port, ca_file, body, every_s), daemon=True)

    def _run(self, port: int, ca_file: str, body: bytes, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.results.append(probe(port, ca_file, body))

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def worst(self, name: str) -> float | None:
        """Longest probe of ``name`` in seconds; None when one failed (or none ran)."""
        values = [r[name] for r in self.results]
        return None if (not values or any(v is None for v in values)) else max(values)


def _row(server: str, payload: str, label: str, r: dict) -> str:
    cpu = r.get("server_cpu_us_per_review")
    return (f"{server:8} {payload:11} {label:22} {r['requests']:7d} {r['errors']:4d} {r['throughput']:8.1f} "
            f"{r['p50_ms']:7.2f} {r['p99_ms']:8.2f}" + (f" {cpu:11.0f}" if cpu is not None else ""))


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=4.0,
                        help="seconds per server of each Go-client phase (default 4)")
    parser.add_argument("--concurrency", default="1,8,32,128,512",
                        help="hey concurrencies, comma-separated (default 1,8,32,128,512)")
    parser.add_argument("--dribblers", type=int, default=64, help="header dribblers of the slow phases (default 64)")
    parser.add_argument("--idle", type=int, default=64, help="idle TLS connections of the slow phases (default 64)")
    parser.add_argument("--rate", type=float, default=200.0, help="open-loop offered rate, reviews/s (default 200)")
    parser.add_argument("--rate-duration", type=float, default=10.0,
                        help="seconds per payload of the open-loop phase, both servers at once (default 10)")
    parser.add_argument("--workers", type=int, default=None, help="gunicorn workers of both servers (default: serve's)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="each Go phase runs webhook, noop, noop, webhook this many times, --duration split "
                             "among them (default 1)")
    parser.add_argument("--procs", type=int, default=2, help="open-loop client processes (default 2)")
    parser.add_argument("--conns", type=int, default=4, help="open-loop keep-alive connections per process (default 4)")
    parser.add_argument("--source", metavar="DIR", default=str(HERE.parent),
                        help="serve the webhook package of this checkout (default: this one; to compare designs)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--noop-server", nargs=2, metavar=("BIND", "CERT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.noop_server:
        run_noop_server(args.noop_server[0], args.noop_server[1], args.workers)
        return 0
    try:
        levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--concurrency {args.concurrency!r}: comma-separated whole numbers")
    if not (args.duration > 0 and args.rate > 0 and args.rate_duration > 0 and args.procs >= 1
            and args.conns >= 1 and args.rounds >= 1 and levels and min(levels) >= 1):
        parser.error("--duration, --rate and --rate-duration must be > 0; --procs, --conns, --rounds and "
                     "every --concurrency >= 1")
    if shutil.which("hey") is None:
        print("benchmark needs hey (a Go net/http load generator): apt-get install hey", file=sys.stderr)
        return 2

    from webhook.http import certs

    tmp = tempfile.mkdtemp(prefix="segment-webhook-bench-")
    cert_dir = os.path.join(tmp, "certs")
    certs.write_certificates(certs.generate(), cert_dir)
    ca_file = os.path.join(cert_dir, "ca.crt")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "PROMETHEUS_MULTIPROC_DIR")
           and not k.startswith("SEGMENT_WEBHOOK_")}
    env["PYTHONPATH"] = os.pathsep.join([args.source] + [p for p in [env.get("PYTHONPATH")] if p])
    ports = {"webhook": free_port(), "noop": free_port()}
    workers = ["--workers", str(args.workers)] if args.workers else []
    commands = {
        "webhook": [sys.executable, "-m", "webhook.cli", "serve", "--bind", f"127.0.0.1:{ports['webhook']}",
                    "--cert-dir", cert_dir, *workers],
        "noop": [sys.executable, str(Path(__file__).resolve()), *workers,
                 "--noop-server", f"127.0.0.1:{ports['noop']}", cert_dir],
    }
    body_files = {}
    for payload, review in payloads().items():
        body_files[payload] = os.path.join(tmp, f"{payload}.json")
        Path(body_files[payload]).write_text(json.dumps(review))
    procs: dict[str, subprocess.Popen] = {}
    logs = {}
    results: dict = {"settings": {k: v for k, v in vars(args).items() if k != "noop_server"},
                     "cpus": os.cpu_count(), "phases": {}, "probes": {}, "pairs": {}}
    status = 0
    ctx = mp.get_context("fork")
    try:
        for name, cmd in commands.items():
            logs[name] = open(os.path.join(tmp, f"{name}.log"), "wb")
            procs[name] = subprocess.Popen(cmd, stdout=logs[name], stderr=subprocess.STDOUT, env=env, cwd=args.source)
        for name in commands:
            wait_ready(ports[name], ca_file, procs[name])
        results["webhook_answers"] = check_webhook_answers(ports["webhook"], ca_file)
        url = {name: f"https://127.0.0.1:{port}/mutate" for name, port in ports.items()}

        load = os.getloadavg()[0]
        results["loadavg_1min_start"] = load
        print(f"segment-webhook admission benchmark: {os.cpu_count()} CPUs (load average {load:.2f} at start); "
              f"webhook = segment-webhook serve with its defaults{' but ' + ' '.join(workers) if workers else ''}, "
              f"noop = a Flask app answering allowed:true under the same gunicorn settings; both TLS on 127.0.0.1; "
              f"Go clients: hey, {args.duration:g} s per server and phase")
        print(f"{'server':8} {'payload':11} {'clients':22} {'req':>7} {'err':>4} {'rev/s':>8} {'p50 ms':>7} {'p99 ms':>8} {'srv us/rev':>11}")

        def record(key: str, server: str, payload: str, label: str, r: dict) -> None:
            nonlocal status
            results["phases"][key] = r
            print(_row(server, payload, label, r), flush=True)
            if r["errors"]:
                print(f"  first error: {r['first_error']}")
                status = 1

        for payload in payloads():
            for server in ("webhook", "noop"):  # warm-up (not counted): connections, imports, caches
                run_hey(url[server], body_files[payload], 8, min(1.0, args.duration))
            for level in levels:
                # webhook, noop, noop, webhook (half the time each): a drift of the machine's
                # other load between the two halves hits both servers alike.
                parts: dict = {"webhook": [], "noop": []}
                for server in ("webhook", "noop", "noop", "webhook") * args.rounds:
                    parts[server].append(run_hey_measured(procs[server].pid, url[server], body_files[payload], level,
                                                          args.duration / (2 * args.rounds)))
                for server in ("webhook", "noop"):
                    record(f"{server}/{payload}/go-c{level}", server, payload, f"go c={level}", combine(parts[server]))
                # run k of the webhook and run k of the no-op are adjacent in time: one pair each
                results["pairs"][f"{payload}/go-c{level}"] = [
                    _ratio(w["throughput"], n["throughput"]) for w, n in zip(parts["webhook"], parts["noop"])]

        # The same Go clients with slow clients attached to both servers at once (so that both
        # carry them alike), and probes on new connections.
        slow_label = f"+{args.dribblers}drib+{args.idle}idle"
        stop_event = ctx.Event()
        slow_procs = [ctx.Process(target=_slow_clients_proc, daemon=True,
                                  args=(ports[server], args.dribblers, args.idle, 2.0, stop_event))
                      for server in ("webhook", "noop")]
        review_body = json.dumps(payloads()["pytorchjob"]).encode()
        for proc in slow_procs:
            proc.start()
        try:
            time.sleep(min(2.0, 2 * args.duration))  # let them connect and settle
            # slow clients only (the goal): probes on new connections, nothing else running
            quiet = {server: Prober(ports[server], ca_file, review_body, every_s=0.25) for server in ("webhook", "noop")}
            for prober in quiet.values():
                prober.__enter__()
            time.sleep(max(1.0, min(3.0, args.duration)))
            for prober in quiet.values():
                prober.__exit__(None, None, None)
            loaded = {server: Prober(ports[server], ca_file, review_body) for server in ("webhook", "noop")}
            for prober in loaded.values():
                prober.__enter__()
            try:
                for level in levels:
                    parts: dict = {"webhook": [], "noop": []}
                    for server in ("webhook", "noop", "noop", "webhook"):
                        parts[server].append(run_hey_measured(procs[server].pid, url[server], body_files["pytorchjob"],
                                                              level, args.duration / 2))
                    for server in ("webhook", "noop"):
                        record(f"{server}/pytorchjob/go-c{level}-slow", server, "pytorchjob",
                               f"c={level} {slow_label}", combine(parts[server]))
            finally:
                for prober in loaded.values():
                    prober.__exit__(None, None, None)
        finally:
            stop_event.set()
            for proc in slow_procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()

        def shown(values: dict) -> str:
            return ", ".join(f"{n} {'FAILED' if v is None else f'{v * 1e3:.0f} ms'}" for n, v in values.items())

        for server in ("webhook", "noop"):
            worst = {name: quiet[server].worst(name) for name in ("healthz", "review")}
            under_load = {name: loaded[server].worst(name) for name in ("healthz", "review")}
            results["probes"][server] = {"count": len(quiet[server].results), "worst_s": worst,
                                         "under_load_count": len(loaded[server].results),
                                         "under_load_worst_s": under_load}
            print(f"{server:8} probes on new connections, slow clients attached: {len(quiet[server].results)} with "
                  f"no other load, worst {shown(worst)}; {len(loaded[server].results)} during the Go phases above "
                  f"(both servers probed), worst {shown(under_load)}", flush=True)

        # Open loop at --rate on both servers at once, request by request interleaved (latency
        # from each request's due time: no coordinated omission). A stall of this shared VM
        # (its p99 is made of them) then delays the webhook's and the no-op's requests alike.
        with ctx.Pool(args.procs) as pool:
            for payload, review in payloads().items():
                body = json.dumps(review).encode()
                pair = [ports["webhook"], ports["noop"]]
                run_phase(pool, pair, ca_file, body, args.rate, 1.0, args.procs, args.conns)  # warm-up
                measured = run_phase(pool, pair, ca_file, body, args.rate, args.rate_duration, args.procs, args.conns)
                for server, (lat, err) in zip(("webhook", "noop"), measured):
                    record(f"{server}/{payload}/rate", server, payload, f"{args.rate:g}/s open", summarize(lat, err, args.rate_duration))

        print()
        ratios: dict = {}
        for payload in payloads():
            for level in levels:
                w, n = results["phases"][f"webhook/{payload}/go-c{level}"], results["phases"][f"noop/{payload}/go-c{level}"]
                ratios[f"{payload}/go-c{level}"] = {"throughput": _ratio(w["throughput"], n["throughput"]),
                                                    "p99": _ratio(w["p99_ms"], n["p99_ms"])}
            w, n = results["phases"][f"webhook/{payload}/rate"], results["phases"][f"noop/{payload}/rate"]
            ratios[f"{payload}/rate"] = {"p99": _ratio(w["p99_ms"], n["p99_ms"])}
        for level in levels:
            w, n = results["phases"][f"webhook/pytorchjob/go-c{level}-slow"], results["phases"][f"noop/pytorchjob/go-c{level}-slow"]
            ratios[f"pytorchjob/go-c{level}-slow"] = {"throughput": _ratio(w["throughput"], n["throughput"]),
                                                      "p99": _ratio(w["p99_ms"], n["p99_ms"])}
        results["ratios"] = ratios
        print("webhook / noop         " + " ".join(f"{'c=' + str(level):>13}" for level in levels))
        for payload in payloads():
            for what in ("throughput", "p99"):
                print(f"{payload:11} {what:13} " + " ".join(
                    f"{ratios[f'{payload}/go-c{level}'][what]:13.2f}" for level in levels))
        for what in ("throughput", "p99"):
            print(f"{'+slow':11} {what:13} " + " ".join(
                f"{ratios[f'pytorchjob/go-c{level}-slow'][what]:13.2f}" for level in levels))
        for payload in payloads():
            print(f"{payload:11} p99 at {args.rate:g}/s open loop: {ratios[f'{payload}/rate']['p99']:.2f}")
        # Server CPU per review over every Go phase at c >= 8: what the webhook spends per review
        # against the no-op, independent of what else runs on the machine.
        for payload in payloads():
            cpu = {}
            for server in ("webhook", "noop"):
                keys = [f"{server}/{payload}/go-c{level}" for level in levels if level >= 8] or \
                    [f"{server}/{payload}/go-c{level}" for level in levels]
                answered = sum(results["phases"][k]["requests"] for k in keys)
                spent = sum(results["phases"][k]["server_cpu_s"] for k in keys)
                cpu[server] = spent / answered * 1e6 if answered else float("nan")
            ratios[f"{payload}/server-cpu"] = {"webhook_us": cpu["webhook"], "noop_us": cpu["noop"],
                                               "noop_over_webhook": _ratio(cpu["noop"], cpu["webhook"])}
            print(f"{payload:11} server CPU per review (Go phases): webhook {cpu['webhook']:.0f} us, noop "
                  f"{cpu['noop']:.0f} us; noop/webhook {_ratio(cpu['noop'], cpu['webhook']):.2f} "
                  "(the throughput ratio a server-bound machine would show)")
        results["loadavg_1min_end"] = os.getloadavg()[0]
        print(f"load average at the end: {results['loadavg_1min_end']:.2f}")

        # Goals (issue 9), judged on the webhook's own figures.
        web = {k.split("/", 1)[1]: v for k, v in results["phases"].items() if k.startswith("webhook/")}
        errors = sum(v["errors"] for v in web.values())
        goals = [("0 errors at every concurrency, with and without slow clients", errors == 0, f"{errors} errors")]
        if 8 in levels and 128 in levels:
            for key in ("pytorchjob/go-c{}", "pytorchjob/go-c{}-slow"):
                low, high = web[key.format(8)]["throughput"], web[key.format(128)]["throughput"]
                goals.append((f"throughput at c=128 >= 50% of c=8 ({key.format('N')})", high >= 0.5 * low,
                              f"{_ratio(high, low):.2f}"))
        probes = results["probes"]["webhook"]["worst_s"]
        goals.append(("/healthz and a review on a new connection within 2 s with the slow clients attached",
                      all(v is not None and v <= 2.0 for v in probes.values()),
                      ", ".join(f"{n} {'failed' if v is None else f'{v:.2f} s'}" for n, v in probes.items())))
        sat = [level for level in levels if level >= 8] or levels
        for payload in payloads():
            # all reviews answered over all c >= 8 (a single level swings with the machine's other load)
            answered = {server: sum(results["phases"][f"{server}/{payload}/go-c{level}"]["requests"] for level in sat)
                        for server in ("webhook", "noop")}
            seconds = {server: sum(results["phases"][f"{server}/{payload}/go-c{level}"]["seconds"] for level in sat)
                       for server in ("webhook", "noop")}
            overall = _ratio(answered["webhook"] / seconds["webhook"], answered["noop"] / seconds["noop"])
            # The goal's figure: the median over every pair of adjacent webhook and no-op runs at
            # c >= 8. One run that the VM slowed (a pair of 0.6 or 1.5 beside ones of 0.9) moves a
            # median of many pairs little, and the sum of all reviews a lot.
            pairs = sorted(r for level in sat for r in results["pairs"][f"{payload}/go-c{level}"])
            median = statistics.median(pairs) if pairs else float("nan")
            ratios[f"{payload}/go-overall"] = {"throughput": overall, "median_of_pairs": median, "pairs": pairs}
            per_level = ", ".join(f"{ratios[f'{payload}/go-c{level}']['throughput']:.2f}" for level in sat)
            goals.append((f"{payload} throughput >= 0.80x noop (median of {len(pairs)} adjacent webhook/noop runs at "
                          f"c>={sat[0]})", median >= 0.80,
                          f"{median:.2f}; pairs {', '.join(f'{r:.2f}' for r in pairs)}; all reviews {overall:.2f}; "
                          f"per level {per_level}"))
            rate_ratio = ratios[f"{payload}/rate"]["p99"]
            goals.append((f"{payload} p99 at {args.rate:g}/s <= 1.2x noop", rate_ratio <= 1.2, f"{rate_ratio:.2f}"))
        results["goals"] = [{"goal": g, "met": bool(ok), "figure": fig} for g, ok, fig in goals]
        print()
        for goal, ok, figure in goals:
            print(f"goal {'met   ' if ok else 'NOT met'}  {goal}: {figure}")
    except RuntimeError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        for name, log in logs.items():
            log.flush()
            tail = Path(log.name).read_bytes()[-2000:].decode(errors="replace")
            print(f"--- {name} server log (tail) ---\n{tail}", file=sys.stderr)
        status = 1
    finally:
        for proc in procs.values():
            stop(proc)
        for log in logs.values():
            log.close()
        # The directory holds the generated CA and serving key: never leave it behind.
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
