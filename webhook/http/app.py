"""Flask application: the HTTP face of the webhook.

Endpoints:

* ``POST /mutate``   AdmissionReview v1 in, AdmissionReview v1 out: validation + JSONPatch.
* ``POST /validate`` the same checks, never a patch (for a ValidatingWebhookConfiguration).
* ``GET /healthz``   200 while the process serves requests (liveness).
* ``GET /readyz``    200 when the topology catalog is synced and the serving certificate is
  loaded, else 503 with the reason (readiness).
* ``GET /metrics``   Prometheus exposition (all workers aggregated under gunicorn).

Transport rules (checked in this order, each answered with a JSON body, never a 5xx):

1. ``Content-Length`` over :data:`MAX_BODY_BYTES` (3 MiB) → 413, before the body is read; a
   body without ``Content-Length`` (chunked) is read in 64 KiB steps and answered with 413 as
   soon as it passes the limit. Nothing of an oversized body is kept or parsed; it
   is read and dropped (up to 16 MiB in all) so that the client, still sending, sees the 413.
2. ``Content-Type`` other than ``application/json`` → 415.
3. Body not JSON / not an AdmissionReview with a uid → 400 ``{"error", "field"}``; with a uid →
   200 AdmissionReview, ``allowed: false``, ``status.code: 400`` (see ``webhook.http.envelope``).

3 MiB is kube-apiserver's own request body limit (``MaxRequestBodyBytes``), so every object the
apiserver can store fits in a review.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from webhook.http import envelope
from webhook.http.metrics import ReviewMetrics, default_metrics, log_review

#: Largest accepted request body, in bytes (3 MiB; kube-apiserver's MaxRequestBodyBytes).
MAX_BODY_BYTES = 3 * 1024 * 1024
JSON_MIMETYPE = "application/json"
#: An oversized body is read and dropped up to this many bytes in total before answering 413,
#: so the client sees the answer; beyond it the connection is simply closed.
DRAIN_LIMIT_BYTES = 16 * 1024 * 1024

log = logging.getLogger("segment_webhook.http")


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")) + "\n", status=status, mimetype=JSON_MIMETYPE)


def _discard(stream: Any, max_bytes: int) -> None:
    """Read and drop up to ``max_bytes`` of an unwanted body, 64 KiB at a time, so the client
    (still sending) receives the 413 answer instead of a connection reset ("lingering close",
    as nginx does; gunicorn itself drains only 64 KiB before closing)."""
    while max_bytes > 0:
        chunk = stream.read(min(max_bytes, 65536))
        if not chunk:
            return
        max_bytes -= len(chunk)


def _read_body(environ: dict, length: int | None, limit: int) -> bytes:
    """Read the request body, at most ``limit`` bytes.

    With ``Content-Length`` (already checked against ``limit``) exactly that many bytes are read.
    Without it (chunked transfer), the body is read only when the server terminates the stream
    (``wsgi.input_terminated``, set by gunicorn) and :class:`RequestEntityTooLarge` is raised as
    soon as more than ``limit`` bytes arrive; otherwise the body is empty.
    """
    stream = environ["wsgi.input"]
    if length is not None:
        chunks, remaining = [], length
        while remaining > 0:
            chunk = stream.read(min(remaining, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    if not environ.get("wsgi.input_terminated"):
        return b""  # neither Content-Length nor chunked: an empty body (RFC 9112 §6.3)
    chunks, total = [], 0
    while True:
        chunk = stream.read(65536)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            _discard(stream, DRAIN_LIMIT_BYTES - total)
            raise RequestEntityTooLarge()
        chunks.append(chunk)


def create_app(
    catalog: Any,
    settings: Any,
    *,
    tls_ready: Callable[[], bool] | None = None,
    metrics: ReviewMetrics | None = None,
    review_fn: Callable[..., Any] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Flask:
    """Build the webhook's Flask app.

    ``catalog``: a ``TopologyCatalog`` (``.synced``, ``.get(name)``, ``.names()``; a live one may
    also have ``.stop()``, called by the server when the worker exits). ``settings``:
    ``webhook.core.decision.AdmissionSettings``. ``tls_ready``: returns True when the serving
    certificate is loaded (``CertificateReloader.ready``); None when the app is not served over
    TLS (tests), then readiness depends on the catalog only. ``metrics``: where to count reviews
    (default: the process-wide :func:`webhook.http.metrics.default_metrics`). ``review_fn``:
    the domain entry point (default ``webhook.core.review.review``). ``max_body_bytes``: body
    limit in bytes (default 3 MiB).

    Returns a Flask app; ``app.extensions["segment_webhook"]`` holds ``catalog`` and ``settings``.
    """
    app = Flask("segment_webhook")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.json.sort_keys = False
    app.extensions["segment_webhook"] = {"catalog": catalog, "settings": settings}
    counter = metrics

    def get_metrics() -> ReviewMetrics:
        nonlocal counter
        if counter is None:
            counter = default_metrics()
        return counter

    def admit(mutate: bool) -> Response:
        started = time.perf_counter()
        length = request.content_length
        if length is not None and length > max_body_bytes:
            _discard(request.environ["wsgi.input"], min(length, DRAIN_LIMIT_BYTES))
            return _json(envelope.error_body(
                f"request body is {length} bytes, larger than the {max_body_bytes}-byte limit", "body"), 413)
        if request.mimetype != JSON_MIMETYPE:
            return _json(envelope.error_body(
                f"Content-Type must be {JSON_MIMETYPE}, got {request.content_type or 'none'!r}",
                "Content-Type"), 415)
        raw = _read_body(request.environ, length, max_body_bytes)
        outcome = envelope.handle(raw, catalog, settings, mutate=mutate, review_fn=review_fn)
        elapsed = time.perf_counter() - started
        try:
            get_metrics().observe(outcome, elapsed)
            log_review(outcome, elapsed)
        except Exception:  # noqa: BLE001 - bookkeeping must never fail a review
            log.exception("could not record metrics/log for uid=%s", outcome.uid)
        return _json(outcome.body, outcome.http_status)

    @app.post("/mutate")
    def mutate() -> Response:
        """Mutating admission: validation + JSONPatch (DESIGN.md §1)."""
        return admit(True)

    @app.post("/validate")
    def validate() -> Response:
        """Validating admission: the same checks as /mutate, no patch."""
        return admit(False)

    @app.get("/healthz")
    def healthz() -> Response:
        """Liveness: the process answers HTTP."""
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        """Readiness: catalog synced and serving certificate loaded."""
        synced = bool(getattr(catalog, "synced", False))
        tls = True if tls_ready is None else bool(tls_ready())
        body = {"ready": synced and tls, "topologiesSynced": synced, "certificateLoaded": tls}
        if not synced:
            body["reason"] = "the Topology catalog has not completed its first list yet"
        elif not tls:
            body["reason"] = "the serving certificate is not loaded"
        return _json(body, 200 if body["ready"] else 503)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        """Prometheus exposition of the webhook's metrics."""
        payload, content_type = get_metrics().render()
        return Response(payload, status=200, content_type=content_type)

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(exc: RequestEntityTooLarge) -> Response:
        return _json(envelope.error_body(
            f"request body is larger than the {max_body_bytes}-byte limit", "body"), 413)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return _json({"error": exc.description, "code": exc.code}, exc.code or 400)

    return app
