#!/usr/bin/env python3
"""Admission latency benchmark: the real webhook against a no-op webhook, over HTTPS.

Starts two servers as subprocesses on 127.0.0.1, both gunicorn with the same settings
(``webhook.http.server.ServeOptions``: gthread, ``--workers`` x ``--threads``, TLS with a freshly
generated CA):

* ``webhook``: ``segment-webhook serve`` (the embedded default topology ``cluster-topology``);
* ``noop``: a Flask app that answers ``allowed: true`` with the request's uid for any
  AdmissionReview (same framework and server, no admission logic, metrics or review log).

Then loads each with two AdmissionReview requests:

* ``pytorchjob``: CREATE of the seed's 16-worker PyTorchJob ``pytorch-tp4`` (segment size 4, rack);
* ``pod``: CREATE of worker pod 5 of that job (segment index stamping, DESIGN.md §7);

in two modes per pair, the two servers interleaved in ``--slices`` slices: **open loop** at ``--rate`` reviews/s (request i is due at ``t0 + i/rate``;
latency is measured from the due time, so a late send counts: no coordinated omission), and
**max throughput** (closed loop, every connection sends back to back). Clients are
``--procs`` processes x ``--conns`` keep-alive ``http.client.HTTPSConnection`` threads, trusting
the generated CA. Each phase lasts ``--duration`` seconds after a short warm-up; the whole run
stops by itself.

Prints throughput (reviews/s) and p50/p95/p99 latency (ms) for every phase and the p99 ratio
webhook / noop. Exit status 0, or 1 when a server did not start or a response was wrong.

    python benchmarks/admission.py                    # 8 phases x 10 s
    python benchmarks/admission.py --duration 5 --rate 200 --json result.json
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import multiprocessing as mp
import os
import shutil
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
    from webhook.core.admission import build_review

    return build_review(obj, user="alice", uid="00000000-0000-0000-0000-000000000000")


PAYLOADS = {
    "pytorchjob": admission_review(PYTORCHJOB),
    "pod": admission_review(WORKER_POD),
}


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

    return app


def run_noop_server(bind: str, cert_dir: str, workers: int, threads: int) -> None:
    """Serve the no-op app with the webhook's own gunicorn settings (``ServeOptions``)."""
    from webhook.http.server import ServeOptions, run

    run(noop_app_factory, ServeOptions(
        bind=bind, certfile=os.path.join(cert_dir, "tls.crt"), keyfile=os.path.join(cert_dir, "tls.key"),
        workers=workers, threads=threads, loglevel="warning"))


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

    Open loop (``rate`` > 0): this process owns requests ``proc_index, proc_index + procs, ...``
    of a global schedule ``t0 + i / rate``; thread ``k`` of it takes every ``conns``-th of those.
    Closed loop (``rate`` == 0): each thread sends back to back until ``t0 + duration``.
    Returns latencies in seconds and the error count."""
    port, ca_file, body, rate, duration, t0, proc_index, procs, conns = args
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    end = t0 + duration
    headers = {"Content-Type": "application/json", "Connection": "keep-alive"}

    def connect() -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ssl_context(ca_file), timeout=10)
        conn.connect()
        return conn

    def one(conn: http.client.HTTPSConnection) -> http.client.HTTPSConnection:
        try:
            conn.request("POST", "/mutate", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or b'"allowed":true' not in data.replace(b" ", b""):
                with lock:
                    errors.append(f"HTTP {resp.status}: {data[:200]!r}")
        except (OSError, http.client.HTTPException) as exc:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
            conn.close()
            conn = connect()
        return conn

    def worker(k: int) -> None:
        conn = connect()
        own: list[float] = []
        if rate > 0:
            i = proc_index + procs * k
            step = procs * conns
            while True:
                due = t0 + i / rate
                if due >= end:
                    break
                now = time.perf_counter()
                if due > now:
                    time.sleep(due - now)
                conn = one(conn)
                own.append(time.perf_counter() - due)
                i += step
        else:
            while True:
                start = time.perf_counter()
                if start >= end:
                    break
                conn = one(conn)
                own.append(time.perf_counter() - start)
        conn.close()
        with lock:
            latencies.extend(own)

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


def run_phase(pool, port: int, ca_file: str, body: bytes, rate: float, duration: float,
              procs: int, conns: int) -> tuple[list[float], list[str]]:
    """Load one server for ``duration`` seconds; returns (latencies in s, error texts)."""
    # perf_counter is CLOCK_MONOTONIC on Linux: comparable across the forked client processes.
    t0 = time.perf_counter() + 0.3
    jobs = [(port, ca_file, body, rate, duration, t0, p, procs, conns) for p in range(procs)]
    parts = pool.map(_client_proc, jobs)
    return [x for part in parts for x in part["latencies"]], [e for part in parts for e in part["errors"]]


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
    for name, review in PAYLOADS.items():
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase (default 10)")
    parser.add_argument("--rate", type=float, default=200.0, help="open-loop offered rate, reviews/s (default 200)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers of both servers (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="gthread threads per worker (default 8, as serve)")
    parser.add_argument("--procs", type=int, default=2, help="client processes (default 2)")
    parser.add_argument("--conns", type=int, default=4, help="keep-alive connections per client process (default 4)")
    parser.add_argument("--slices", type=int, default=5,
                        help="each phase runs as this many interleaved webhook/noop slices (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--noop-server", nargs=2, metavar=("BIND", "CERT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.noop_server:
        run_noop_server(args.noop_server[0], args.noop_server[1], args.workers, args.threads)
        return 0
    if not (args.duration > 0 and args.rate > 0 and args.procs >= 1 and args.conns >= 1 and args.slices >= 1):
        parser.error("--duration and --rate must be > 0; --procs, --conns and --slices >= 1")

    from webhook.http import certs

    tmp = tempfile.mkdtemp(prefix="segment-webhook-bench-")
    cert_dir = os.path.join(tmp, "certs")
    certs.write_certificates(certs.generate(), cert_dir)
    ca_file = os.path.join(cert_dir, "ca.crt")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "PROMETHEUS_MULTIPROC_DIR")}
    ports = {"webhook": free_port(), "noop": free_port()}
    commands = {
        "webhook": [sys.executable, "-m", "webhook.cli", "serve", "--bind", f"127.0.0.1:{ports['webhook']}",
                    "--cert-dir", cert_dir, "--workers", str(args.workers), "--threads", str(args.threads)],
        "noop": [sys.executable, str(Path(__file__).resolve()), "--workers", str(args.workers),
                 "--threads", str(args.threads), "--noop-server", f"127.0.0.1:{ports['noop']}", cert_dir],
    }
    procs: dict[str, subprocess.Popen] = {}
    logs = {}
    results: dict = {"settings": {k: v for k, v in vars(args).items() if k != "noop_server"},
                     "cpus": os.cpu_count(), "phases": {}}
    status = 0
    try:
        for name, cmd in commands.items():
            logs[name] = open(os.path.join(tmp, f"{name}.log"), "wb")
            procs[name] = subprocess.Popen(cmd, stdout=logs[name], stderr=subprocess.STDOUT, env=env,
                                           cwd=str(HERE.parent))
        for name in commands:
            wait_ready(ports[name], ca_file, procs[name])
        results["webhook_answers"] = check_webhook_answers(ports["webhook"], ca_file)

        load = os.getloadavg()[0]
        results["loadavg_1min_start"] = load
        print(f"segment-webhook admission benchmark: {os.cpu_count()} CPUs (load average {load:.2f} at start), "
              f"servers {args.workers} workers x {args.threads} threads, clients {args.procs} procs x "
              f"{args.conns} conns, {args.duration:g} s per server and phase in {args.slices} interleaved slices")
        header = f"{'server':8} {'payload':11} {'mode':9} {'req':>7} {'err':>4} {'rev/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}"
        print(header)
        ctx = mp.get_context("fork")
        slice_s = args.duration / args.slices
        with ctx.Pool(args.procs) as pool:
            for payload, review in PAYLOADS.items():
                body = json.dumps(review).encode()
                for server in ("webhook", "noop"):  # warm-up (not counted): connections, imports, caches
                    run_phase(pool, ports[server], ca_file, body, args.rate, 1.0, args.procs, args.conns)
                for mode, rate in (("rate", args.rate), ("max", 0.0)):
                    # Interleave the two servers in slices (alternating which goes first) so that
                    # other load on the machine affects both alike.
                    acc = {"webhook": ([], []), "noop": ([], [])}
                    for s in range(args.slices):
                        order = ("webhook", "noop") if s % 2 == 0 else ("noop", "webhook")
                        for server in order:
                            lat, err = run_phase(pool, ports[server], ca_file, body, rate, slice_s, args.procs, args.conns)
                            acc[server][0].extend(lat)
                            acc[server][1].extend(err)
                    for server in ("webhook", "noop"):
                        r = summarize(*acc[server], args.duration)
                        label = f"{rate:g}/s" if rate else "max"
                        results["phases"][f"{server}/{payload}/{mode}"] = r
                        print(f"{server:8} {payload:11} {label:9} {r['requests']:7d} {r['errors']:4d} "
                              f"{r['throughput']:8.1f} {r['p50_ms']:7.2f} {r['p95_ms']:7.2f} {r['p99_ms']:7.2f} {r['max_ms']:7.2f}",
                              flush=True)
                        if r["errors"]:
                            print(f"  first error: {r['first_error']}")
                            status = 1
        print()
        ratios = {}
        for payload in PAYLOADS:
            for mode in ("rate", "max"):
                w = results["phases"][f"webhook/{payload}/{mode}"]["p99_ms"]
                n = results["phases"][f"noop/{payload}/{mode}"]["p99_ms"]
                ratios[f"{payload}/{mode}"] = w / n
                label = f"{args.rate:g}/s" if mode == "rate" else "max"
                print(f"p99 ratio webhook/noop  {payload:11} {label:7} {w / n:5.2f}  ({w:.2f} ms / {n:.2f} ms)")
        results["p99_ratio"] = ratios
        results["loadavg_1min_end"] = os.getloadavg()[0]
        print(f"load average at the end: {results['loadavg_1min_end']:.2f}")
        for payload in PAYLOADS:
            p99 = results["phases"][f"webhook/{payload}/rate"]["p99_ms"]
            ratio = ratios[f"{payload}/rate"]
            print(f"goal at {args.rate:g}/s, {payload}: p99 {p99:.2f} ms (< 20 ms: {'yes' if p99 < 20 else 'NO'}), "
                  f"ratio {ratio:.2f} (< 1.5: {'yes' if ratio < 1.5 else 'NO'})")
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
