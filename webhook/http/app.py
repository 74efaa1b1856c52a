"""Flask application: the HTTP face of the webhook.

Endpoints:

* ``POST /mutate``   AdmissionReview v1 in, AdmissionReview v1 out: validation + JSONPatch.
* ``POST /validate`` the same checks, never a patch (for a ValidatingWebhookConfiguration).
* ``GET /healthz``   200 while the process serves requests (liveness).
* ``GET /readyz``    200 when the topology catalog is synced and the serving certificate is
  loaded, else 503 with the reason (readiness); while a synced live catalog cannot reach its API
  server, 200 with ``stale`` naming the outage and the Topologies it answers from
  (:func:`stale_catalog_note`); header ``Segment-Webhook-Worker``: the pid of the worker that
  answered (each worker has its own catalog).
* ``GET /metrics``   Prometheus exposition (all workers aggregated under gunicorn).

Transport rules (checked in this order, each answered with a JSON body, never a 5xx):

1. ``Content-Length`` over :data:`MAX_BODY_BYTES` (3 MiB) → 413 at once, before any of the body
   is read; a body without ``Content-Length`` (chunked) is read in 64 KiB steps and answered with
   413 as soon as it passes the limit, or as soon as its chunk-size lines declare more (under
   ``serve``: ``webhook.http.wsgi_extensions``). Both answers carry ``Connection: close``: after the answer
   is written, what the client is still sending is read and dropped for at most ``read_timeout``
   seconds (and 16 MiB), so a client that really sends its body sees the 413 rather than a
   connection reset, and a client that announces a large body and sends nothing is closed.
2. ``Content-Type`` other than ``application/json`` → 415.
3. A body that does not arrive within its deadline (``read_timeout`` seconds from the end of the
   request head; a read timed out, see ``webhook.http.worker``) → 408
   ``{"error", "field": "body"}`` with ``Connection: close``.
4. A body the server cannot decode (malformed chunked encoding: bad chunk size, extension or
   terminator, or cut short) → 400 ``{"error", "field": "body"}`` with ``Connection: close``.
5. Body not JSON / not an AdmissionReview with a uid → 400 ``{"error", "field"}``; with a uid →
   200 AdmissionReview, ``allowed: false``, ``status.code: 400`` (see ``webhook.http.envelope``).

Review latency (``segment_webhook_review_duration_seconds``, ``duration_ms`` of the review log) is
measured from the moment the whole body has been read to the moment the answer is built (decode,
checks, patch, encode; for a body over :data:`RUN_APART_BYTES`, the wait for the server's review
thread too): the time the client takes to send its body or to read the answer is not in it.

Large reviews (docs/tasks/operations.md "Serving", CPU-heavy reviews): a body over :data:`RUN_APART_BYTES` is reviewed through the server's
``run_apart`` (``webhook.http.wsgi_extensions``), so its CPU time does not hold up the worker's
other connections; a body over 256 KiB whose object carries more annotations than kube-apiserver
admits is answered from their size alone, and an object whose maps or lists pass the work limits
(10,000 members in one, 256 groups in one, 200,000 in all) from those counts alone, before the
domain core reads it (``webhook.http.bounds``).

3 MiB is kube-apiserver's own request body limit (``MaxRequestBodyBytes``), so every object the
apiserver can store fits in a review.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from flask import Flask, Response, request
from flask.json.provider import DefaultJSONProvider
from flask.sessions import NullSession, SessionInterface
from werkzeug.exceptions import HTTPException, InternalServerError, RequestEntityTooLarge
from werkzeug.http import parse_options_header
from werkzeug.wsgi import get_content_length

from webhook.admission.config import AdmissionSettings
from webhook.errors import SegmentWebhookError
from webhook.http import envelope, wsgi_extensions
from webhook.http.bounds import bounded_review, needs_bounds
from webhook.http.metrics import ReviewMetrics, default_metrics, log_review
from webhook.http.options import DEFAULT_READ_TIMEOUT
from webhook.topology.objects import TopologyCatalog

if TYPE_CHECKING:  # typeshed's WSGI types (``wsgiref.types`` is Python 3.11+)
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

#: Header of every /readyz answer naming the process that answered (its pid): each worker has
#: its own catalog, so "every worker is ready" is "every worker's pid has answered 200".
WORKER_HEADER = "Segment-Webhook-Worker"
#: Largest accepted request body, in bytes (3 MiB; kube-apiserver's MaxRequestBodyBytes; its home:
#: :data:`webhook.http.wsgi_extensions.MAX_BODY_BYTES`, which the server's chunked reading uses too).
MAX_BODY_BYTES = wsgi_extensions.MAX_BODY_BYTES
JSON_MIMETYPE = "application/json"
#: After a 413, at most this many bytes of the body are read and dropped (so the client, still
#: sending, sees the answer); beyond it the connection is simply closed.
DRAIN_LIMIT_BYTES = 16 * 1024 * 1024
#: Bodies longer than this (bytes) are reviewed apart (:data:`webhook.http.wsgi_extensions.RUN_APART`,
#: the worker's review thread), so that their CPU time does not hold up small reviews: the seed's
#: PyTorchJob review is about 2 KB and takes about 1 ms.
RUN_APART_BYTES = 32 * 1024
#: The clock of review latency (a module attribute so that tests can replace it).
_clock = time.perf_counter

log = logging.getLogger("segment_webhook.http")


def _json(body: Any, status: int = 200) -> Response:
    """``body`` as compact JSON (UTF-8, encoded by orjson) and a newline, ``Content-Type:
    application/json``. Text orjson refuses (a lone surrogate a client put in a uid, a name or an
    annotation and the answer echoes) is encoded by :mod:`json` instead, as ``\\ud800`` escapes:
    an answer never fails (json's text where orjson's would have been a 500)."""
    try:
        encoded = orjson.dumps(body)
    except TypeError:
        encoded = json.dumps(body, separators=(",", ":"), default=str).encode()
    return Response(encoded + b"\n", status=status, content_type=JSON_MIMETYPE)


BodyTooLarge = wsgi_extensions.BodyTooLarge


def _drain(environ: dict[str, Any], max_bytes: int, seconds: float) -> None:
    """Read and drop what the client sends of an unwanted body, at most ``max_bytes`` and for
    at most ``seconds`` in all ("lingering close", as nginx does), so that a client still
    sending receives the answer instead of a connection reset. Runs after the answer is written
    (a response ``call_on_close`` callback) on a connection that is closed next.

    With the server's drain (:data:`webhook.http.wsgi_extensions.DRAIN`, which reads the
    connection with each wait bounded by the time left) that is called; elsewhere (tests, other
    servers) ``wsgi.input`` is read. Never raises.
    """
    server_drain = environ.get(wsgi_extensions.DRAIN)
    deadline = time.monotonic() + seconds
    try:
        if callable(server_drain):
            server_drain(max_bytes, seconds)
            return
        stream = environ.get("wsgi.input")
        while stream is not None and max_bytes > 0 and time.monotonic() < deadline:
            chunk = stream.read(min(max_bytes, 65536))
            if not chunk:
                return
            max_bytes -= len(chunk)
    except (OSError, ValueError):
        return  # timed out, reset or closed: the connection is closed anyway
    except Exception:
        log.debug("draining an oversized body stopped", exc_info=True)


class BodyIncomplete(SegmentWebhookError):
    """The client sent fewer body bytes than its ``Content-Length`` and closed: not a review."""


def _read_body(environ: dict[str, Any], length: int | None, limit: int) -> bytes:
    """Read the request body, at most ``limit`` bytes.

    With ``Content-Length`` (already checked against ``limit``) exactly that many bytes are read.
    Without it (chunked transfer), the body is read only when the server terminates the stream
    (``wsgi.input_terminated``, set by gunicorn) and :class:`BodyTooLarge` is raised as soon as
    more than ``limit`` bytes arrive; otherwise the body is empty. A socket timeout while reading
    propagates (``TimeoutError``); a stream that ends before ``Content-Length`` bytes (the client
    went away) raises :class:`BodyIncomplete`.
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
        if remaining > 0:
            raise BodyIncomplete(f"the request body ended after {length - remaining} of {length} bytes")
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
            raise BodyTooLarge()
        chunks.append(chunk)


def _framing_error(exc: BaseException) -> str:
    """The message for a body the server could not decode (a malformed chunked encoding: bad
    chunk size, extension or terminator; a chunked body cut short), e.g. ``InvalidChunkSize``."""
    detail = str(exc).strip()
    name = type(exc).__name__
    return (f"the request body is not a well-formed HTTP body ({name}{': ' + detail if detail else ''}); "
            "send it with Content-Length or a valid chunked encoding")


#: A view function of the app (a plain ``def``; see :class:`WebhookFlask`).
View = TypeVar("View", bound=Callable[..., object])


class SessionFree(SessionInterface):
    """Flask's session interface for an app that keeps no sessions: every request gets the same
    empty, read-only :class:`flask.sessions.NullSession` (writing to it raises, as with Flask's
    own null session), so no signing serializer is looked up, no session object built and nothing
    saved per request (Flask's documented extension point, ``Flask.session_interface``)."""

    def __init__(self) -> None:
        self._session = NullSession()

    def open_session(self, app: Flask, request: Any) -> NullSession:
        """The shared null session."""
        return self._session

    def save_session(self, app: Flask, session: Any, response: Response) -> None:
        """Nothing to save."""


class KeptOrderJSONProvider(DefaultJSONProvider):
    """Flask's JSON provider with the keys in the order the webhook wrote them (not sorted)."""

    sort_keys = False


#: The admission paths answered before Flask's dispatch (:meth:`WebhookFlask.wsgi_app`): path → mutate.
_ADMISSION_PATHS = {"/mutate": True, "/validate": False}

#: ``admit(environ, mutate)``: one admission request's WSGI environ in, its response out.
Admit = Callable[[dict[str, Any], bool], Response]


class WebhookFlask(Flask):
    """The webhook's Flask app: Flask with the parts a webhook does not use turned off through
    Flask's documented overrides: no sessions (:class:`SessionFree`), and every view a plain
    function (``ensure_sync`` returns it as it is, without asking on each request whether it is a
    coroutine; ``create_app`` registers only plain ``def`` views, and refuses anything else)."""

    session_interface = SessionFree()
    json_provider_class = KeptOrderJSONProvider
    #: The admission view (set by :func:`create_app`), answered before Flask's dispatch.
    admit: Admit | None = None

    def wsgi_app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Flask's WSGI entry point (its documented override point), with ``POST /mutate`` and
        ``POST /validate`` (by exact path) answered by :attr:`admit` directly: without Flask's
        request context, URL routing and response finalisation, which cost more instructions
        than the review itself (docs/decisions/admission-paths-before-flask.md). Every other
        request (another method or path, ``/mutate/``, ``HEAD``) is Flask's, as before."""
        if self.admit is not None and environ.get("REQUEST_METHOD") == "POST":
            mutate = _ADMISSION_PATHS.get(environ.get("PATH_INFO", ""))
            if mutate is not None:
                return _admitted(self.admit, environ, mutate)(environ, start_response)
        return super().wsgi_app(environ, start_response)

    def ensure_sync(self, func: View) -> View:
        """``func`` itself: every view of this app is a plain function."""
        return func


def create_app(
    catalog: TopologyCatalog,
    settings: AdmissionSettings,
    *,
    tls_ready: Callable[[], bool] | None = None,
    metrics: ReviewMetrics | None = None,
    review_fn: envelope.ReviewFunction | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
) -> Flask:
    """Build the webhook's Flask app.

    ``catalog``: a ``TopologyCatalog`` (``.synced``, ``.get(name)``, ``.names()``; a live one may
    also have ``.stop()``, called by the server when the worker exits). ``settings``:
    ``webhook.admission.config.AdmissionSettings``. ``tls_ready``: returns True when the serving
    certificate is loaded (``CertificateReloader.ready``); None when the app is not served over
    TLS (tests), then readiness depends on the catalog only. ``metrics``: where to count reviews
    (default: the process-wide :func:`webhook.http.metrics.default_metrics`). ``review_fn``:
    the domain entry point (default ``webhook.admission.review.review``, imported here, so that an
    install whose review code does not load fails when the app is created, not on the first
    review). ``max_body_bytes``: body limit in bytes (default 3 MiB). ``read_timeout``: seconds
    the rest of an oversized body is drained at most after the 413 (the server's socket timeout).

    Returns a Flask app; ``app.extensions["segment_webhook"]`` holds ``catalog`` and ``settings``.
    """
    if review_fn is None:
        review_fn = envelope._default_review()  # ImportError here: a broken install fails at start
    app = WebhookFlask("segment_webhook")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.extensions["segment_webhook"] = {"catalog": catalog, "settings": settings}
    counter = metrics

    def get_metrics() -> ReviewMetrics:
        nonlocal counter
        if counter is None:
            counter = default_metrics()
        return counter

    admit = _admission_view(catalog, settings, review_fn, get_metrics, max_body_bytes, read_timeout)
    _add_routes(app, admit, catalog, tls_ready, get_metrics, max_body_bytes)
    app.admit = admit
    coroutines = sorted(name for name, view in app.view_functions.items() if inspect.iscoroutinefunction(view))
    if coroutines:  # WebhookFlask.ensure_sync runs views as they are: a coroutine would never run
        raise TypeError(f"views {coroutines} are coroutines; WebhookFlask serves plain functions only")
    return app


def _admitted(admit: Admit, environ: WSGIEnvironment, mutate: bool) -> Response:
    """``admit(environ, mutate)``; an exception it lets out (none is expected: it answers every
    body) is logged and answered as Flask answers it: 500 with the JSON body of the app's HTTP
    error handler."""
    try:
        return admit(environ, mutate)
    except Exception:
        log.exception("admission request failed")
        return _http_error(InternalServerError())


def _http_error(exc: HTTPException) -> Response:
    """The JSON answer for a werkzeug HTTP error, ``{"error": description, "code": code}``, with
    the ``Allow`` header of a 405 (RFC 9110 §15.5.6; sorted: werkzeug's order follows a set's)."""
    resp = _json({"error": exc.description, "code": exc.code}, exc.code or 400)
    allow = dict(exc.get_headers()).get("Allow")
    if allow:
        resp.headers["Allow"] = ", ".join(sorted(method.strip() for method in allow.split(",")))
    return resp


def _admission_view(catalog: TopologyCatalog, settings: AdmissionSettings, review_fn: envelope.ReviewFunction,
                    get_metrics: Callable[[], ReviewMetrics], max_body_bytes: int,
                    read_timeout: float) -> Admit:
    """The body of ``/mutate`` and ``/validate`` for :func:`create_app` (its arguments of the same
    names): ``admit(environ, mutate)`` reads and bounds the body, reviews it, and counts and logs
    the review."""

    def closing(resp: Response, environ: dict[str, Any], drain_bytes: int = 0) -> Response:
        """``resp`` with ``Connection: close``; after it is written, drain up to ``drain_bytes``
        of the unread body within ``read_timeout`` seconds."""
        resp.headers["Connection"] = "close"
        if drain_bytes > 0:
            resp.call_on_close(lambda: _drain(environ, drain_bytes, read_timeout))
        return resp

    def too_large(length: int | None) -> Response:
        size = f"{length} bytes, " if length is not None else ""
        return _json(envelope.error_body(
            f"request body is {size}larger than the {max_body_bytes}-byte limit", "body"), 413)

    def admit(environ: dict[str, Any], mutate: bool) -> Response:
        length = get_content_length(environ)  # werkzeug's reading, as request.content_length
        if length is not None and length > max_body_bytes:
            return closing(too_large(length), environ, min(length, DRAIN_LIMIT_BYTES))
        # kube-apiserver sends exactly "application/json"; anything else is werkzeug's to parse
        content_type = environ.get("CONTENT_TYPE")
        if content_type != JSON_MIMETYPE and parse_options_header(content_type)[0].lower() != JSON_MIMETYPE:
            return _json(envelope.error_body(
                f"Content-Type must be {JSON_MIMETYPE}, got {content_type or 'none'!r}",
                "Content-Type"), 415)
        try:
            raw = _read_body(environ, length, max_body_bytes)
        except BodyTooLarge:
            return closing(too_large(None), environ, DRAIN_LIMIT_BYTES)
        except TimeoutError:
            return closing(_json(envelope.error_body(
                f"the request body did not arrive within {read_timeout:g} s", "body"), 408), environ)
        except BodyIncomplete as exc:  # the client is gone: answer for the record, count nothing
            return closing(_json(envelope.error_body(str(exc), "body"), 400), environ)
        except Exception as exc:  # noqa: BLE001 - the server could not decode the body's framing
            return closing(_json(envelope.error_body(_framing_error(exc), "body"), 400), environ)
        started = _clock()  # review latency: body read → answer built (not network time)
        # bounded by its annotations' size and its members' counts before the core reads it
        # (webhook.http.bounds); the usual small body cannot pass a bound and is not walked
        bounded_fn = bounded_review(review_fn, body_bytes=len(raw)) if needs_bounds(raw) else review_fn
        if len(raw) <= RUN_APART_BYTES:
            outcome = envelope.handle(raw, catalog, settings, mutate=mutate, review_fn=bounded_fn)
        else:
            # A large review: run where its CPU time does not hold up the worker's other connections.
            run_apart = environ.get(wsgi_extensions.RUN_APART)
            handle = functools.partial(envelope.handle, raw, catalog, settings, mutate=mutate, review_fn=bounded_fn)
            outcome = run_apart(handle) if callable(run_apart) else handle()
        resp = _json(outcome.body, outcome.http_status)
        elapsed = _clock() - started
        try:
            get_metrics().observe(outcome, elapsed)
            log_review(outcome, elapsed)
        except Exception:
            log.exception("could not record metrics/log for uid=%s", outcome.uid)
        return resp

    return admit


def stale_catalog_note(catalog: TopologyCatalog) -> str | None:
    """What a synced live catalog knows while its API server cannot be reached, for /readyz's
    ``stale`` (issue 35: kube-apiserver stopped under the installed webhook, which stays ready
    and answers from the Topologies it listed): ``API server URL unreachable: CAUSE; answering
    from the N Topologies last listed (NAMES)``. ``None`` when the server answers, or for a
    catalog without an outage record (a static file, the embedded default)."""
    reachability = getattr(catalog, "reachability", None)
    reason = getattr(reachability, "reason", None)
    if not isinstance(reason, str):
        return None
    names = catalog.names()
    return f"{reason}; answering from the {len(names)} Topologies last listed ({', '.join(names) or 'none'})"


def _add_routes(app: Flask, admit: Admit, catalog: TopologyCatalog,
                tls_ready: Callable[[], bool] | None, get_metrics: Callable[[], ReviewMetrics],
                max_body_bytes: int) -> None:
    """Register :func:`create_app`'s views and error handlers on ``app``: ``/mutate`` and
    ``/validate`` (``admit``), ``/healthz``, ``/readyz`` (header :data:`WORKER_HEADER`: this
    worker's pid), ``/metrics``, and JSON answers for werkzeug's HTTP errors."""
    worker_id = str(os.getpid())  # the app is built in each worker after the fork

    # POST /mutate and /validate are answered by WebhookFlask.wsgi_app before Flask's dispatch;
    # the routes stay so that another method on them is Flask's 405 naming POST.
    @app.post("/mutate")
    def mutate() -> Response:
        """Mutating admission: validation + JSONPatch (DESIGN.md §1)."""
        return admit(request.environ, True)

    @app.post("/validate")
    def validate() -> Response:
        """Validating admission: the same checks as /mutate, no patch."""
        return admit(request.environ, False)

    @app.get("/healthz")
    def healthz() -> Response:
        """Liveness: the process answers HTTP."""
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        """Readiness: catalog synced and serving certificate loaded."""
        synced = bool(catalog.synced)
        tls = True if tls_ready is None else bool(tls_ready())
        reason = None
        if not synced:
            reason = "the Topology catalog has not completed its first list yet"
            last_error = getattr(catalog, "last_error", None)  # live catalog: why (DESIGN.md §10)
            if last_error:
                reason += f": {last_error}"
        elif not tls:
            reason = "the serving certificate is not loaded"
        body: dict[str, object] = {"ready": synced and tls, "topologiesSynced": synced, "certificateLoaded": tls}
        if reason is not None:
            body["reason"] = reason
        stale = stale_catalog_note(catalog) if synced else None
        if stale is not None:
            body["stale"] = stale
        resp = _json(body, 200 if synced and tls else 503)
        resp.headers[WORKER_HEADER] = worker_id
        return resp

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        """Prometheus exposition of the webhook's metrics."""
        payload, content_type = get_metrics().render()
        return Response(payload, status=200, content_type=content_type)

    @app.errorhandler(RequestEntityTooLarge)
    def too_large_error(exc: RequestEntityTooLarge) -> Response:
        return _json(envelope.error_body(
            f"request body is larger than the {max_body_bytes}-byte limit", "body"), 413)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return _http_error(exc)
