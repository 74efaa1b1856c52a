#!/usr/bin/env python3
"""CPU instructions per AdmissionReview: the webhook's WSGI app against the no-op app, counted.

Throughput on a small shared VM swings by up to 2x from one run to the next (``benchmarks/
admission.py`` shows it); an instruction count does not. This script counts, with valgrind's
callgrind (user-space instructions, ``Ir``), what one ``POST /mutate`` costs inside the WSGI app,
without the network, TLS or gunicorn (those are the same for both apps):

* ``webhook``: ``webhook.http.app.create_app`` as ``segment-webhook serve`` builds it (embedded
  topology, multiprocess Prometheus metrics, the JSON review log written to a file);
* ``noop``: the no-op Flask app of ``benchmarks/admission.py`` (decode the review, answer
  ``allowed: true``);
* ``core``: ``webhook.admission.review.review`` alone on the decoded request (the domain core).

Each figure is ``(Ir(N2 calls) - Ir(N1 calls)) / (N2 - N1)`` of two runs of a fresh process, so
start-up and imports cancel out. Payloads: the ``pytorchjob`` and ``pod`` reviews of
``benchmarks/admission.py``. Prints instructions per review, ``webhook - noop`` (what the
webhook adds) and ``webhook / noop``.

    python benchmarks/instructions.py              # about 3 minutes (valgrind runs Python ~50x slower)
    python benchmarks/instructions.py --source ../other-checkout --payload pytorchjob
    python benchmarks/instructions.py --server custom,stock   # the whole worker process, two servers

``--server custom,stock`` counts the whole serving path instead: ``segment-webhook serve --workers
1`` under valgrind (gunicorn's ``timeout`` 3600 s for both), with serve's own worker (``custom``)
or gunicorn's stock gevent worker with public settings only (``stock``), both run by
``benchmarks/stock_worker.py``, answering N reviews on one keep-alive TLS connection; the figure is the worker process's ``Ir`` (TLS records, gunicorn's
parser, the worker, gevent, the app) at two N, the difference per review. The one ``/readyz`` that
waits for the server, the TLS handshake, start-up and shutdown cancel out.

Exit status 0; 2 without valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAYLOADS = ("pytorchjob", "pod")
SUBJECTS = ("noop", "webhook", "core")
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _environ(body: bytes) -> dict:
    """A WSGI environ for ``POST /mutate`` with ``body`` (what gunicorn hands the app)."""
    return {"REQUEST_METHOD": "POST", "PATH_INFO": "/mutate", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8443",
            "wsgi.url_scheme": "https", "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr, "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.input_terminated": False, "HTTP_HOST": "127.0.0.1:8443"}


def run_child(subject: str, payload: str, calls: int, warmup: int = 50) -> None:
    """Child mode: build ``subject`` and answer ``warmup + calls`` reviews of ``payload``."""
    sys.path.insert(0, str(HERE))
    import admission  # the payloads and the no-op app

    review = admission.payloads()[payload]
    body = json.dumps(review).encode()
    if subject == "core":
        from webhook.admission.review import review as core_review
        from webhook.cli.flags import admission_settings, static_topologies

        catalog, default = static_topologies(None, None)
        settings = admission_settings(None, None, default, False)
        request = json.loads(body)["request"]
        for _ in range(warmup + calls):
            core_review(request, catalog, settings, mutate=True)
        return
    if subject == "noop":
        app = admission.noop_app_factory()
    else:
        from webhook.cli.flags import admission_settings, static_topologies
        from webhook.http import metrics
        from webhook.http.app import create_app

        metrics.prepare_multiprocess_dir()
        catalog, default = static_topologies(None, None)
        settings = admission_settings(None, None, default, False)
        metrics.configure_review_log(open(os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], "review.log"), "w"))
        app = create_app(catalog, settings)

    def start_response(status: str, headers: list, exc_info: object = None) -> None:
        if not status.startswith("200"):
            raise SystemExit(f"{subject} answered {status}")

    for _ in range(warmup + calls):
        answer = app(_environ(body), start_response)
        b"".join(answer)
        getattr(answer, "close", lambda: None)()


def count(subject: str, payload: str, calls: int, source: str) -> int:
    """Instructions (callgrind ``Ir``) of a child process answering ``calls`` reviews."""
    with tempfile.TemporaryDirectory(prefix="segment-webhook-ir-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEGMENT_WEBHOOK_")}
        env["PROMETHEUS_MULTIPROC_DIR"] = tmp
        # str hashing is salted per process: unseeded, the same tree's counts moved by about 1%
        # between runs (the no-op 497,834 to 515,039 on 2026-12-05); one seed makes a run repeatable
        env["PYTHONHASHSEED"] = "0"
        env["PYTHONPATH"] = os.pathsep.join([source] + [p for p in [env.get("PYTHONPATH")] if p])
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               sys.executable, str(Path(__file__).resolve()), "--child", subject, payload, str(calls)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        found = COLLECTED.search(out.stderr)
        if out.returncode != 0 or found is None:
            raise RuntimeError(f"{subject}/{payload}: valgrind run failed:\n{out.stderr[-2000:]}")
        return int(found.group(1))


def per_review(subject: str, payload: str, low: int, high: int, source: str) -> float:
    """Instructions per review: the difference of two runs over the difference of their calls."""
    return (count(subject, payload, high, source) - count(subject, payload, low, source)) / (high - low)


WORKER_COLLECTED = re.compile(r"==(\d+)== Collected\s*:\s*(\d+)")


def count_server(worker: str, payload: str, calls: int, source: str, warmup: int = 20) -> int:
    """Instructions (callgrind ``Ir``) of the worker process of ``serve --workers 1`` (``worker``:
    ``custom``, serve itself; ``stock``, ``benchmarks/stock_worker.py``) from its start to its exit,
    having answered one ``/readyz`` and ``warmup + calls`` reviews of ``payload`` on one keep-alive
    TLS connection."""
    import http.client
    import signal
    import socket
    import ssl
    import time

    sys.path.insert(0, str(HERE))
    import admission

    body = json.dumps(admission.payloads()[payload]).encode()
    with tempfile.TemporaryDirectory(prefix="segment-webhook-ir-server-") as tmp:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SEGMENT_WEBHOOK_", "PROMETHEUS_MULTIPROC", "KUBERNETES_SERVICE"))}
        env["PYTHONHASHSEED"] = "0"
        env["PYTHONPATH"] = os.pathsep.join([source, str(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        from webhook.http import certs  # generated here, not under valgrind (an RSA key: seconds there)

        certs.write_certificates(certs.generate(), os.path.join(tmp, "certs"))
        # both through stock_worker.py (custom: serve's own worker and settings), for one setting:
        # a worker silent past gunicorn's 30 s timeout under valgrind would be aborted mid-review
        env["STOCK_WORKER_SETTINGS"] = json.dumps({"timeout": 3600})
        runner = [str(HERE / "stock_worker.py")] + (["--custom"] if worker == "custom" else [])
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *runner, "serve",
               "--bind", f"127.0.0.1:{port}", "--cert-dir", os.path.join(tmp, "certs"), "--workers", "1"]
        with open(os.path.join(tmp, "stderr.log"), "w+") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=tmp)
            try:
                ca = os.path.join(tmp, "certs", "ca.crt")
                end = time.monotonic() + 600
                while not os.path.exists(ca) or not _listening(port):
                    if proc.poll() is not None or time.monotonic() > end:
                        raise RuntimeError(f"{worker}: serve did not start")
                    time.sleep(0.5)
                context = ssl.create_default_context(cafile=ca)
                # one connection, one /readyz that waits as long as the worker takes to start: the
                # same requests in every run, so they cancel out of the difference
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=600)
                conn.request("GET", "/readyz")
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{worker}: /readyz answered {resp.status}")
                for _ in range(warmup + calls):
                    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{worker}: a review answered {resp.status}")
                with open(f"/proc/{proc.pid}/task/{proc.pid}/children", encoding="ascii") as fh:
                    workers = [int(p) for p in fh.read().split()]
                conn.close()
            except (RuntimeError, OSError, http.client.HTTPException) as exc:
                log.seek(0)
                raise RuntimeError(f"{worker}/{payload}: {exc}; the server's log ends:\n{log.read()[-3000:]}") from None
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(300)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.seek(0)
            found = {int(pid): int(n) for pid, n in WORKER_COLLECTED.findall(log.read())}
        if len(workers) != 1 or workers[0] not in found:
            raise RuntimeError(f"{worker}/{payload}: no callgrind count for the worker {workers} in {sorted(found)}")
        return found[workers[0]]


def _listening(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def server_per_review(worker: str, payload: str, low: int, high: int, source: str) -> float:
    """Instructions per review of the worker process (:func:`count_server` at two N)."""
    return (count_server(worker, payload, high, source) - count_server(worker, payload, low, source)) / (high - low)


def main_server(workers: list[str], payloads: list[str], low: int, high: int, source: str) -> dict:
    """``--server``: prints and returns the worker process's instructions per review for each
    worker kind and payload (the runs two at a time)."""
    print(f"CPU instructions per review, whole worker process (valgrind callgrind Ir; serve --workers 1, one "
          f"keep-alive TLS connection, {high} - {low} reviews); source {source}", flush=True)
    jobs = [(worker, payload) for payload in payloads for worker in workers]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {job: pool.submit(server_per_review, *job, low, high, source) for job in jobs}
        figures = {job: future.result() for job, future in futures.items()}
    print(f"{'payload':11} " + " ".join(f"{w:>12}" for w in workers)
          + (f" {workers[0] + '/' + workers[1]:>14}" if len(workers) == 2 else ""))
    for payload in payloads:
        values = [figures[(w, payload)] for w in workers]
        ratio = f" {values[0] / values[1]:14.3f}" if len(values) == 2 else ""
        print(f"{payload:11} " + " ".join(f"{v:12,.0f}" for v in values) + ratio)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--payload", choices=PAYLOADS, action="append", help="payload(s) to count (default both)")
    parser.add_argument("--calls", type=int, nargs=2, default=(100, 300), metavar=("N1", "N2"),
                        help="reviews answered by the two runs of each figure (default 100 300)")
    parser.add_argument("--source", default=str(HERE.parent), help="checkout whose webhook package is counted")
    parser.add_argument("--server", metavar="WORKERS",
                        help="count the whole worker process of serve instead: custom, stock or custom,stock")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    low, high = args.calls
    if not 0 < low < high:
        parser.error("--calls N1 N2: 0 < N1 < N2")
    if shutil.which("valgrind") is None:
        print("benchmark needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    payloads = args.payload or list(PAYLOADS)
    if args.server:
        workers = args.server.split(",")
        if not workers or any(w not in ("custom", "stock") for w in workers):
            parser.error("--server: custom, stock or custom,stock")
        main_server(workers, payloads, low, high, args.source)
        return 0
    jobs = [(subject, payload) for payload in payloads for subject in SUBJECTS]
    print(f"CPU instructions per review (valgrind callgrind Ir, in-process WSGI call, {high} - {low} reviews); "
          f"source {args.source}")
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        futures = {job: pool.submit(per_review, *job, low, high, args.source) for job in jobs}
        figures = {job: future.result() for job, future in futures.items()}
    print(f"{'payload':11} {'noop':>10} {'webhook':>10} {'core':>10} {'webhook-noop':>13} {'webhook/noop':>13}")
    for payload in payloads:
        noop, webhook, core = (figures[(s, payload)] for s in SUBJECTS)
        print(f"{payload:11} {noop:10,.0f} {webhook:10,.0f} {core:10,.0f} {webhook - noop:13,.0f} {webhook / noop:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
