"""Requests to an API server that may not be reachable: back-off, the cause of a failure in words,
and one log line per outage instead of one (or a traceback) per request.

What the libraries do on their own when the API server cannot be reached (kubernetes 37, urllib3
2.8; found by a new-user trial with a kubeconfig pointing at a closed port, about 900 log lines in
10 s from ``segment-webhook controller``):

* urllib3 retries every request 3 times at once (``Retry.DEFAULT``), logging a ``Retrying (...)``
  warning each time. :func:`client_retries` is the client's retry configuration
  (``Configuration.retries``) without the retries of a connection that could not be made or of a
  TLS failure: the callers below retry those with back-off. Read errors of idempotent requests
  (a pooled keep-alive connection the server closed) are still retried by urllib3.
* ``kubernetes.informer.SharedInformer`` logs a traceback for every failed list and watch
  (``logger.exception``), then retries a list after a fixed 5 s and a watch at once.

What this module gives the cluster adapters (:mod:`webhook.cluster.informers`,
:mod:`webhook.cluster.topology_cache`, the controller's runner):

* :class:`Backoff`: capped exponential back-off with jitter (client-go's reflector: 800 ms
  doubling to 30 s, reset after 2 minutes without a failure, ``k8s.io/client-go/tools/cache``).
* :func:`transport_cause`: "connection refused", "TLS: certificate verify failed: ...", or None
  when the error is not a failure to reach the server (an HTTP status, a bug).
* :class:`ApiServerReachability`: the outage log of one API server (one per API client, shared by
  every request of a process): one WARNING line naming the URL and the cause when a request first
  fails, a reminder while it lasts, one INFO line naming the outage's length when a request is
  answered again.
* :func:`send_until_answered`: send one request until the server answers, backing off while it
  cannot be reached (the list functions of the informers).
* :class:`JsonClient`: the one sender of single requests (a read, a create, a patch, a replace, a
  delete) of the controller: each sent with ``_preload_content=False`` and the
  :data:`REQUEST_TIMEOUT`, its answer read as JSON (:func:`read_json`, the connection handed back
  to the pool), a failure to reach the server reported to the outage log, and the outcome handed
  back as an :class:`Answer` (the object, the HTTP refusal, or another error for the caller's own
  log line).
* :func:`informer_stopped`: what a list function does, for a list or a watch, once its owner stops:
  raise :class:`InformerStopped`, which ends the informer's current list or watch without a request.
* :class:`InformerTransportTracebacks`: a filter on the informer's logger for the traceback of a
  watch that broke (connection lost, server gone, or the socket shut down by ``stop``), whose
  exception the informer hands to the ``ERROR`` handlers right after: they report it here; and for
  the traceback of :class:`InformerStopped`.
"""

from __future__ import annotations

import json
import logging
import random
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

from webhook.errors import SegmentWebhookError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: HTTP connect timeout in seconds of every request to kube-apiserver.
CONNECT_TIMEOUT_SECONDS = 10.0
#: Read timeout in seconds of a request that is not a watch (a list, a patch, a lease update).
REQUEST_TIMEOUT_SECONDS = 30.0
#: Server-side watch timeout in seconds (client-go uses 5-10 min); the watch then resumes from the
#: last resource version.
WATCH_TIMEOUT_SECONDS = 300
#: ``_request_timeout`` of a request that is not a watch: (connect, read) seconds.
REQUEST_TIMEOUT = (CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)
#: Seconds between two "still unreachable" lines of one outage.
STILL_UNREACHABLE_EVERY_SECONDS = 60.0
#: The logger of ``kubernetes.informer.SharedInformer`` (``kubernetes/informer/informer.py``).
INFORMER_LOGGER = "kubernetes.informer.informer"


class Backoff:
    """Capped exponential back-off with jitter.

    ``next_delay()`` returns ``min(maximum, initial * factor**n)`` seconds for the n-th
    consecutive failure (n from 0), multiplied by a random factor in ``[1 - jitter, 1]`` (so the
    replicas of the webhook do not retry in lock-step). ``reset()`` starts again from
    ``initial``; with ``reset_after`` (seconds) so does a failure that comes more than that long
    after the previous one (client-go's ``ExponentialBackoffManager`` ``resetDuration``: a
    client that worked for a while starts a new outage at the short delay). Defaults: 0.2 s
    doubling to 30 s, jitter 0.5, no reset by time. ``rng``: a ``random.Random`` (a seeded one
    makes tests repeatable); ``clock``: monotonic seconds (tests inject a fake one). Raises
    ``ValueError`` for non-positive values, ``maximum < initial``, ``factor < 1`` or ``jitter``
    outside ``[0, 1]``.
    """

    def __init__(
        self,
        initial: float = 0.2,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
        *,
        reset_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if (not initial > 0 or maximum < initial or factor < 1 or not 0 <= jitter <= 1
                or (reset_after is not None and not reset_after > 0)):
            raise ValueError(
                f"Backoff(initial={initial}, maximum={maximum}, factor={factor}, jitter={jitter}, "
                f"reset_after={reset_after}): need initial > 0, maximum >= initial, factor >= 1, 0 <= jitter <= 1, "
                "reset_after > 0 or None"
            )
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._rng = rng or random.Random()
        self._clock = clock
        self._failures = 0
        self._last_failure: float | None = None

    def next_delay(self) -> float:
        """Seconds to wait after one more consecutive failure."""
        now = self._clock()
        quiet = now - self._last_failure if self._last_failure is not None else 0.0
        if self.reset_after is not None and quiet > self.reset_after:
            self._failures = 0
        self._last_failure = now
        base = min(self.maximum, self.initial * self.factor ** min(self._failures, 64))
        self._failures += 1
        return base * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        """Forget earlier failures (after a success)."""
        self._failures = 0


def client_retries() -> Retry:
    """urllib3's default retries (3) without the immediate retries of a connection that could not
    be made (``connect``) or of another transport error such as TLS (``other``): for
    ``kubernetes.client.Configuration.retries``. A refused connection then fails at once (no
    ``Retrying`` warning), and the caller retries it with back-off."""
    return Retry.DEFAULT.new(connect=0, other=0)


_SSL_DECORATION = re.compile(r"^\[SSL(?:: [A-Z0-9_]+)?\] |\s*\(_ssl\.c:\d+\)$")


def _error_chain(error: BaseException) -> list[BaseException]:
    """``error`` and what caused it, outermost first: urllib3's ``MaxRetryError.reason``, then
    ``__cause__``, then ``__context__`` unless suppressed (``raise ... from None``), then an
    exception among the arguments (urllib3's ``ProtocolError("Connection aborted.", inner)``)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain) and len(chain) < 16:
        chain.append(current)
        context = None if current.__suppress_context__ else current.__context__
        if isinstance(current, urllib3.exceptions.MaxRetryError) and isinstance(current.reason, BaseException):
            current = current.reason
        elif current.__cause__ is not None or context is not None:
            current = current.__cause__ or context
        else:
            current = next((a for a in current.args if isinstance(a, BaseException)), None)
    return chain


def transport_cause(error: BaseException) -> str | None:
    """Why a request did not reach the API server or got no answer, in words ("connection
    refused", "host name not resolved: name or service not known", "TLS: certificate verify
    failed: ...", "read timed out", "connection broken: response ended prematurely"); None when
    ``error`` is not such a failure (an HTTP status answered by the server, a bug).

    The kubernetes client raises urllib3's errors as they come (``MaxRetryError`` wrapping the
    cause), except a TLS error, which it turns into ``ApiException(status=0, reason="SSLError\\n
    <text>")`` (``kubernetes/client/rest.py``)."""
    if isinstance(error, ApiException):
        reason = str(error.reason or "")
        if error.status == 0 and reason.startswith("SSLError"):
            return "TLS: " + _SSL_DECORATION.sub("", reason.partition("\n")[2].strip())
        return None
    if not isinstance(error, (urllib3.exceptions.HTTPError, OSError)):
        return None
    chain = _error_chain(error)
    for e in chain:
        if isinstance(e, ssl.SSLError):
            return "TLS: " + _SSL_DECORATION.sub("", str(e))
    for e in chain:
        if isinstance(e, socket.gaierror):
            return f"host name not resolved: {str(e.strerror or e).lower()}"
    for e in reversed(chain):
        if isinstance(e, OSError) and e.strerror:
            return str(e.strerror).lower()
    for e in chain:
        if isinstance(e, urllib3.exceptions.ReadTimeoutError):
            return "read timed out"
        if isinstance(e, urllib3.exceptions.ConnectTimeoutError):
            return "connect timed out"
    innermost = str(chain[-1]).strip() or type(chain[-1]).__name__
    if any(isinstance(e, urllib3.exceptions.ProtocolError) for e in chain):
        return f"connection broken: {innermost[:1].lower()}{innermost[1:]}"
    return innermost


class ApiServerReachability:
    """The outage log of one API server, shared by every request of a process to it.

    ``url``: the server (``Configuration.host``), named in every line. ``clock``: monotonic
    seconds (tests inject a fake one). ``still_every``: seconds between two "still unreachable"
    lines (default :data:`STILL_UNREACHABLE_EVERY_SECONDS`). Thread-safe.

    An outage starts with the first request that fails for want of a connection
    (:func:`transport_cause`) and ends with the next request the server answers, with any HTTP
    status. Lines, on the ``webhook.cluster.api_server`` logger:

    * WARNING at the start: ``API server URL unreachable: CAUSE (REQUEST); retrying with back-off``;
    * WARNING for a cause not seen yet in this outage (e.g. a broken watch, then "connection
      refused"; causes that alternate give one line each, not one per request), and every
      ``still_every`` seconds while it lasts: ``API server URL still unreachable after N s: CAUSE
      (M failed requests)``;
    * INFO at the end: ``API server URL answers again (REQUEST) after N s unreachable (M failed
      requests; last cause: CAUSE)``;
    * DEBUG for each other failed request (its name and cause).
    """

    def __init__(self, url: str, *, clock: Callable[[], float] = time.monotonic,
                 still_every: float = STILL_UNREACHABLE_EVERY_SECONDS):
        self.url = url
        self._clock = clock
        self._still_every = still_every
        self._lock = threading.Lock()
        self._since: float | None = None  # start of the current outage, None while reachable
        self._last_line = 0.0
        self._cause = ""
        self._causes: set[str] = set()  # the causes of the current outage logged so far
        self._failures = 0
        self.failures_by_request: dict[str, int] = {}
        """Failed requests of the current outage, by request name (cleared when it ends)."""

    @property
    def reason(self) -> str | None:
        """``API server URL unreachable: CAUSE`` during an outage, else None (a readiness reason)."""
        with self._lock:
            return f"API server {self.url} unreachable: {self._cause}" if self._since is not None else None

    def failed(self, request: str, error: BaseException) -> bool:
        """Record that ``request`` (e.g. ``"list pods"``) failed with ``error`` and log it as the
        class docstring says. Returns False, logging nothing, when ``error`` is not a failure to
        reach the server (:func:`transport_cause` is None): the caller reports it."""
        cause = transport_cause(error)
        if cause is None:
            return False
        with self._lock:
            now = self._clock()
            self._failures += 1
            self.failures_by_request[request] = self.failures_by_request.get(request, 0) + 1
            new_cause = cause not in self._causes
            self._cause = cause
            self._causes.add(cause)
            if self._since is None:
                self._since, self._last_line = now, now
                line: tuple[Any, ...] = ("API server %s unreachable: %s (%s); retrying with back-off", self.url, cause, request)
            elif new_cause or now - self._last_line >= self._still_every:
                self._last_line = now
                line = ("API server %s still unreachable after %.0f s: %s (%d failed requests)",
                        self.url, now - self._since, cause, self._failures)
            else:
                line = ()
        if line:
            log.warning(*line)
        else:
            log.debug("%s: API server %s unreachable: %s", request, self.url, cause)
        return True

    def answered(self, request: str) -> None:
        """Record that the server answered ``request``; ends an outage with one INFO line."""
        outage_start = self._since  # read once without the lock: the common case is no outage
        if outage_start is None:
            return
        with self._lock:
            if self._since is None:  # another thread ended the outage meanwhile
                return
            seconds, failures, cause = self._clock() - self._since, self._failures, self._cause
            self._since, self._failures, self._causes = None, 0, set()
            self.failures_by_request = {}
        log.info("API server %s answers again (%s) after %.1f s unreachable (%d failed requests; last cause: %s)",
                 self.url, request, seconds, failures, cause)


def send_until_answered(send: Callable[[], T], request: str, reachability: ApiServerReachability,
                        backoff: Backoff, stop: threading.Event) -> T | None:
    """``send()`` until the server answers: a failure to reach it (:func:`transport_cause`) is
    reported to ``reachability`` and retried after ``backoff.next_delay()`` seconds. Returns
    what ``send`` returns, or None once ``stop`` is set (no request is sent after that). Raises
    what ``send`` raises otherwise (an ``ApiException`` with an HTTP status: the server answered,
    which ends an outage)."""
    while not stop.is_set():
        try:
            result = send()
        except Exception as exc:
            if stop.is_set():
                return None
            if not reachability.failed(request, exc):
                if isinstance(exc, ApiException):
                    reachability.answered(request)
                raise
            stop.wait(backoff.next_delay())
            continue
        reachability.answered(request)
        return result
    return None


def read_json(response: Any) -> Any:
    """The JSON value of an unparsed (``_preload_content=False``) answer, a urllib3 response whose
    connection is handed back to the pool in any case (a connection handed back unread garbles the
    next answer on it). Raises ``ValueError`` when the body is not JSON."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def response_json(response: Any) -> dict[str, Any]:
    """:func:`read_json` of an answer that should be an object; ``{}`` when it is not one."""
    data = read_json(response)
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Answer:
    """What became of one request of :meth:`JsonClient.send`; exactly one of these holds:

    * ``body`` is not None: the server accepted it; the object it answered (a dict, ``{}`` when the
      body was not a JSON object), typed ``Any`` so that the caller names its shape
      (:mod:`webhook.kube.shapes`: ``pod: Pod = answer.body``);
    * ``refusal`` is not None: the server answered with an HTTP error status (``.status``,
      ``.reason``), or the client raised ``ApiException`` for a TLS failure (status 0);
    * ``error`` is not None: no answer for another reason than a failure to reach the server (an
      answer that is not JSON, a bug): the caller logs it in its own words;
    * none of them (:attr:`unreachable`): the server could not be reached; the outage log has it.
    """

    body: Any = None
    refusal: ApiException | None = None
    error: Exception | None = None

    @property
    def status(self) -> int | None:
        """The HTTP status of a refusal, None otherwise."""
        return None if self.refusal is None else int(self.refusal.status or 0)

    @property
    def unreachable(self) -> bool:
        """True when the server could not be reached (reported to the outage log)."""
        return self.body is None and self.refusal is None and self.error is None


class JsonClient:
    """The controller's sender of single requests (module docstring): the generated APIs of the
    groups it reads and writes (:attr:`core`, :attr:`apps`, :attr:`batch`, :attr:`coordination`,
    :attr:`custom`) on one configured ``kubernetes.client.ApiClient``, and the process's outage log
    (:attr:`reachability`)."""

    def __init__(self, api_client: k8s_client.ApiClient, reachability: ApiServerReachability) -> None:
        self.core = k8s_client.CoreV1Api(api_client)
        self.apps = k8s_client.AppsV1Api(api_client)
        self.batch = k8s_client.BatchV1Api(api_client)
        self.coordination = k8s_client.CoordinationV1Api(api_client)
        self.custom = k8s_client.CustomObjectsApi(api_client)
        self.reachability = reachability

    def send(self, where: str, method: Callable[..., Any], *args: Any,
             timeout: tuple[float, float] = REQUEST_TIMEOUT, **kwargs: Any) -> Answer:
        """``method(*args, **kwargs)`` (a generated API method) with ``_preload_content=False`` and
        ``_request_timeout=timeout`` (connect, read seconds); ``where`` names the request in the
        outage log (``"patch pod NS/NAME"``). Returns an :class:`Answer`; never raises. An answer or
        an HTTP refusal ends an outage (``reachability.answered``), a failure to reach the server
        is reported to it (``reachability.failed``)."""
        try:
            body = response_json(method(*args, _preload_content=False, _request_timeout=timeout, **kwargs))
        except ApiException as exc:
            self.reachability.answered(where)
            return Answer(refusal=exc)
        except Exception as exc:  # noqa: BLE001 - connection errors go to the outage log, the rest to the caller
            return Answer() if self.reachability.failed(where, exc) else Answer(error=exc)
        self.reachability.answered(where)
        return Answer(body=body)


class InformerStopped(SegmentWebhookError):
    """Raised by a list function once its owner stopped (:func:`informer_stopped`)."""


#: Seconds a list function waits before raising :class:`InformerStopped`: its owner sets its own
#: stop event first and then calls ``SharedInformer.stop``; until that sets the informer's event the
#: informer's loop calls the list function again, so each of those calls takes this long, not zero.
STOPPED_PAUSE_SECONDS = 0.05


def informer_stopped() -> NoReturn:
    """End the informer's current list or watch, once its owner stopped, without a request: raise
    :class:`InformerStopped` (after :data:`STOPPED_PAUSE_SECONDS`).

    Why an exception, not an empty answer (``kubernetes/informer/informer.py``, ``_run_loop``;
    ``kubernetes/watch/watch.py``, ``Watch.stream``): an empty list answer makes the informer
    replace its cache with nothing (a DELETED event for every object) and go on to watch; an empty
    watch answer makes ``Watch.stream`` watch again at once from its resourceVersion (it ends by
    itself only when ``Watch.stop`` was called on that very ``Watch``, which ``SharedInformer.stop``
    misses when the ``Watch`` is created after it, or when the informer's request sets
    ``timeoutSeconds``): the thread spun on empty answers and ``SharedInformer.stop``, which joins
    it, never returned. An exception leaves ``_run_loop``'s list or watch; the informer logs it
    (dropped by :class:`InformerTransportTracebacks`), hands it to the ``ERROR`` handlers (which
    ignore everything after their owner's stop) and checks its stop event.

    Raises :class:`InformerStopped`, always."""
    time.sleep(STOPPED_PAUSE_SECONDS)
    raise InformerStopped("stopped")


class InformerTransportTracebacks(logging.Filter):
    """Drops the traceback ``kubernetes.informer.SharedInformer`` logs in its loop (``_run_loop``:
    "Unexpected error in watch loop; reconnecting", "Error during initial list; retrying", "Error
    during resync list; continuing") when its exception is a failure to reach the server
    (:func:`transport_cause`): the informer hands that exception to its ``ERROR`` handlers right
    after logging it, and this project's handlers report it to :class:`ApiServerReachability`
    (or ignore it after ``stop``, whose socket shutdown ends an open watch with such an error).
    Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (record.funcName == "_run_loop" and isinstance(error, BaseException)
                    and (isinstance(error, InformerStopped) or transport_cause(error) is not None))


def install_informer_traceback_filter() -> None:
    """Install :class:`InformerTransportTracebacks` on the informer's logger (once per process)."""
    logger = logging.getLogger(INFORMER_LOGGER)
    if not any(isinstance(f, InformerTransportTracebacks) for f in logger.filters):
        logger.addFilter(InformerTransportTracebacks())
