"""Shared helpers for tests that run `segment-webhook serve` as a real process.

One place to start the server on a free loopback port, wait for it, and stop it with SIGTERM,
so every serving test uses the same, clean environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any SEGMENT_WEBHOOK_* / PROMETHEUS_MULTIPROC_* /
    in-cluster variable, plus ``extra``: a served process then sees only what the test gives it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEGMENT_WEBHOOK_", "PROMETHEUS_MULTIPROC"))}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.update(extra)
    return env


def stop(proc: subprocess.Popen, timeout_s: float = 20.0) -> int:
    """SIGTERM ``proc`` (if still running), wait for it, kill it after ``timeout_s``; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def wait_ready(url: str, ca: str, proc: subprocess.Popen, *, path: str = "/healthz",
               workers: int = 1, deadline_s: float = 30.0) -> None:
    """Poll ``url + path`` over HTTPS (verified against ``ca``) on new connections until
    ``workers`` distinct workers have answered 200 (the ``Segment-Webhook-Worker`` header of
    ``/readyz`` names the worker; other paths count any 200 once). Raises AssertionError if
    ``proc`` exits or the deadline passes (a failure guard, not a measure: the condition is
    every worker's own answer, never a count of answers in a row)."""
    end = time.monotonic() + deadline_s
    ready: set[str] = set()
    while len(ready) < workers:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early with {proc.returncode}")
        try:
            resp = requests.get(url + path, verify=ca, timeout=2, headers={"Connection": "close"}) \
                if os.path.exists(ca) else None
        except requests.RequestException:
            resp = None
        if resp is not None and resp.status_code == 200:
            ready.add(resp.headers.get("Segment-Webhook-Worker", "any"))
        if time.monotonic() > end:
            raise AssertionError(f"{workers - len(ready)} of {workers} workers did not answer 200 on {path} "
                                 f"within {deadline_s} s")
        if len(ready) < workers:
            time.sleep(0.05)


@contextlib.contextmanager
def running_serve(base: Path, *args: str, ca: str | None = None, env: dict[str, str] | None = None,
                  ready_path: str = "/healthz", ready_workers: int = 1) -> Iterator[dict]:
    """Run ``segment-webhook serve --bind 127.0.0.1:<free port> --cert-dir <base>/certs
    --workers 2 *args`` with stderr in ``<base>/stderr.log``.

    Yields ``{"url", "port", "ca", "proc", "log", "cert_dir"}``; ``ca`` defaults to the generated
    ``<base>/certs/ca.crt``. Stops the server with SIGTERM on exit.
    """
    cert_dir = base / "certs"
    port = free_port()
    ca = ca or str(cert_dir / "ca.crt")
    url = f"https://127.0.0.1:{port}"
    log_path = base / "stderr.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "webhook.cli", "serve", "--bind", f"127.0.0.1:{port}", "--cert-dir", str(cert_dir),
             "--workers", "2", *args],
            stdout=subprocess.DEVNULL, stderr=log, env=env if env is not None else clean_env(),
        )
        try:
            wait_ready(url, ca, proc, path=ready_path, workers=ready_workers)
            yield {"url": url, "port": port, "ca": ca, "proc": proc, "log": log_path, "cert_dir": cert_dir}
        finally:
            stop(proc)


def admission_review(obj, *, uid=None, operation="CREATE", kind=None, user="kubectl-user") -> dict:
    """An AdmissionReview v1 request body for ``obj``, as kube-apiserver sends it (the project's
    one builder, ``webhook.admission.request.build_review``; ``kind`` overrides ``request.kind``)."""
    from webhook.admission.request import build_review

    return dict(build_review(obj, uid=uid, operation=operation, kind=kind, user=user, namespace="default"))
