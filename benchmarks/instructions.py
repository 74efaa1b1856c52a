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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--payload", choices=PAYLOADS, action="append", help="payload(s) to count (default both)")
    parser.add_argument("--calls", type=int, nargs=2, default=(100, 300), metavar=("N1", "N2"),
                        help="reviews answered by the two runs of each figure (default 100 300)")
    parser.add_argument("--source", default=str(HERE.parent), help="checkout whose webhook package is counted")
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
