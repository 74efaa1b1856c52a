"""Prometheus metrics (``prometheus_client``, multiprocess mode under gunicorn) and the JSON
review log.

Metrics (one set per process; under gunicorn every worker writes into
``PROMETHEUS_MULTIPROC_DIR`` and ``GET /metrics`` aggregates all workers with
``prometheus_client.multiprocess.MultiProcessCollector``):

* ``segment_webhook_reviews_total{kind,operation,decision}`` counter: one per AdmissionReview.
  ``kind``: ``PyTorchJob`` | ``LeaderWorkerSet`` | ``DistributedWorkload`` | ``Pod`` | ``other``
  (bounded, so a client cannot blow up the label set); ``operation``: CREATE | UPDATE | DELETE |
  CONNECT | ``unknown``; ``decision``: ``allowed`` | ``denied`` | ``malformed`` | ``error``.
* ``segment_webhook_review_duration_seconds`` histogram: time to answer one review, in seconds,
  from the moment its body has been read to the moment the answer is built (decode + check +
  domain core + encode). Not in it: TLS handshake, the time the client takes to send the body or
  to read the answer, queueing for a worker thread.
* ``segment_webhook_denials_total{rule}`` counter: +1 per distinct violated rule of a denied
  review (``malformed-review`` for a malformed AdmissionReview, ``internal-error`` for an
  unexpected exception).

``prometheus_client`` picks its value storage when it is first imported, so this module imports
it lazily: :func:`prepare_multiprocess_dir` must run (in the gunicorn master, before workers
fork) before anything touches the metrics.

Review log: one JSON line per review on the ``segment_webhook.review`` logger (stderr), fields
``time`` (UTC ISO 8601 with milliseconds, ``2026-12-01T21:06:00.123Z``), ``uid``, ``kind``,
``namespace``, ``name``, ``user``, ``operation``, ``decision``, ``rule`` (first violated rule or
null), ``rules``, ``warnings`` (count), ``duration_ms`` (the histogram's measure, in
milliseconds), ``http_status``. Under ``serve`` each line is on stderr before the review's
answer is returned.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
import threading
import time
from json.encoder import encode_basestring_ascii
from typing import Any

from webhook.http.envelope import encode_json

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
KNOWN_KINDS = ("PyTorchJob", "LeaderWorkerSet", "DistributedWorkload", "Pod")
KNOWN_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
#: Histogram buckets in seconds: a review is sub-millisecond to a few milliseconds.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

REVIEW_LOGGER = "segment_webhook.review"
review_log = logging.getLogger(REVIEW_LOGGER)


def prepare_multiprocess_dir() -> tuple[str, bool]:
    """Make sure ``PROMETHEUS_MULTIPROC_DIR`` names a directory; call before workers fork.

    When the variable is unset, a fresh temporary directory is created and exported. Returns
    ``(path, created)``: ``created`` is True when this call made the directory (the caller
    removes it at exit). A directory given by the operator (e.g. an ``emptyDir``, which outlives
    a container restart) is created if missing and its stale ``*.db`` metric files from a previous
    run are deleted, as prometheus_client's multiprocess documentation requires.
    Raises ``ValueError`` naming the variable when the directory cannot be created or cleaned.
    """
    path = os.environ.get(MULTIPROC_ENV)
    created = False
    if path:
        try:
            os.makedirs(path, exist_ok=True)
            for name in os.listdir(path):
                if name.endswith(".db"):
                    os.unlink(os.path.join(path, name))
        except OSError as exc:
            raise ValueError(f"{MULTIPROC_ENV}={path!r} is not a usable directory: {exc.strerror}") from exc
    else:
        path = tempfile.mkdtemp(prefix="segment-webhook-metrics-")
        os.environ[MULTIPROC_ENV] = path
        created = True
    values = sys.modules.get("prometheus_client.values")
    if values is not None:  # imported too early: switch to the multiprocess value class now
        values.ValueClass = values.get_value_class()
    # Imported here, in the master, with the directory set: gunicorn's child_exit hook
    # (mark_process_dead) runs in a SIGCHLD handler, and a first import there can be interrupted
    # by the next worker's SIGCHLD, which then imports the half-imported package (an ImportError
    # that made serve exit 1 on SIGTERM in one CI run).
    import prometheus_client.multiprocess  # noqa: F401
    return path, created


def multiprocess_enabled() -> bool:
    """True when ``PROMETHEUS_MULTIPROC_DIR`` is set (metrics are shared across workers)."""
    return bool(os.environ.get(MULTIPROC_ENV))


def mark_process_dead(pid: int) -> None:
    """Tell prometheus_client that worker ``pid`` exited (gunicorn ``child_exit`` hook), so its
    live-gauge files are dropped. No-op outside multiprocess mode."""
    if multiprocess_enabled():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


class ReviewMetrics:
    """The webhook's metrics in one registry.

    ``registry``: a ``prometheus_client.CollectorRegistry`` to register into (default: the
    process-wide ``REGISTRY``; pass a fresh one in tests that build several apps). Creating two
    ``ReviewMetrics`` on the same registry raises ``ValueError`` (duplicate metric names), so
    use :func:`default_metrics` for the process-wide instance.
    """

    def __init__(self, registry: Any = None):
        from prometheus_client import REGISTRY, Counter, Histogram

        self.registry = registry if registry is not None else REGISTRY
        self.reviews = Counter(
            "segment_webhook_reviews",
            "AdmissionReviews answered, by workload kind, operation and decision.",
            ("kind", "operation", "decision"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "segment_webhook_review_duration_seconds",
            "Time from an AdmissionReview's body read to its answer built (decode, check, mutate, encode), "
            "in seconds; network time excluded.",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.denials = Counter(
            "segment_webhook_denials",
            "Denied AdmissionReviews, by violated rule (one count per distinct rule of a review).",
            ("rule",),
            registry=self.registry,
        )
        self._review_children: dict[tuple[str, str, str], Any] = {}

    def observe(self, outcome: Any, seconds: float) -> None:
        """Count one answered review. ``outcome``: a :class:`webhook.http.envelope.Outcome`;
        ``seconds``: time taken to answer it.

        The labelled children are kept in a dict (one lookup per review instead of
        prometheus_client's ``labels()`` validation); label values stay bounded as documented.
        """
        kind = outcome.kind if outcome.kind in KNOWN_KINDS else "other"
        operation = outcome.operation if outcome.operation in KNOWN_OPERATIONS else "unknown"
        key = (kind, operation, outcome.decision)
        child = self._review_children.get(key)
        if child is None:
            child = self._review_children[key] = self.reviews.labels(
                kind=kind, operation=operation, decision=outcome.decision)
        child.inc()
        self.duration.observe(max(seconds, 0.0))
        if not outcome.allowed:
            for rule in outcome.rules:
                self.denials.labels(rule=rule).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text for ``GET /metrics`` and its Content-Type.

        In multiprocess mode the values of every worker (files in ``PROMETHEUS_MULTIPROC_DIR``)
        are aggregated; otherwise this instance's registry is rendered.
        """
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        if multiprocess_enabled():
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_default: ReviewMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> ReviewMetrics:
    """The process-wide :class:`ReviewMetrics` on prometheus_client's default registry (created
    on first use, so after :func:`prepare_multiprocess_dir`)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ReviewMetrics()
        return _default


#: ``(second, "YYYY-MM-DDTHH:MM:SS")`` of the last timestamp made: reviews within the same
#: second share the calendar conversion.
_last_second: tuple[int, str] = (-1, "")
#: ``.000Z`` ... ``.999Z``: the millisecond tails of a timestamp.
_MILLISECOND_SUFFIXES = tuple(f".{millis:03d}Z" for millis in range(1000))


def utc_timestamp() -> str:
    """The current UTC time as ``2026-12-01T21:06:00.123Z``: the text of
    ``datetime.now(timezone.utc).isoformat(timespec="milliseconds")`` with ``Z`` for ``+00:00``
    (milliseconds truncated, as ``isoformat`` does), from one ``time.time_ns()`` call."""
    global _last_second
    second, millis = divmod(time.time_ns() // 1_000_000, 1000)
    cached_second, prefix = _last_second
    if cached_second != second:
        utc = time.gmtime(second)
        prefix = (f"{utc.tm_year:04d}-{utc.tm_mon:02d}-{utc.tm_mday:02d}"
                  f"T{utc.tm_hour:02d}:{utc.tm_min:02d}:{utc.tm_sec:02d}")
        _last_second = (second, prefix)
    return prefix + _MILLISECOND_SUFFIXES[millis]


def review_record(outcome: Any, seconds: float) -> dict:
    """The JSON log record of one review (fields listed in the module docstring)."""
    return {
        "time": utc_timestamp(),
        "msg": "admission review",
        "uid": outcome.uid,
        "kind": outcome.kind,
        "namespace": outcome.namespace,
        "name": outcome.name,
        "user": outcome.user,
        "operation": outcome.operation,
        "decision": outcome.decision,
        "rule": outcome.rules[0] if (outcome.rules and not outcome.allowed) else None,
        "rules": list(outcome.rules) if not outcome.allowed else [],
        "warnings": len(outcome.warnings),
        "duration_ms": round(seconds * 1000.0, 3),
        "http_status": outcome.http_status,
    }


def _duration_ms_json(seconds: Any) -> str | None:
    """The JSON of the record's ``duration_ms``, ``repr(round(seconds * 1000.0, 3))``, from one
    fixed-point formatting (``round`` and ``repr`` each convert the float once more), or None
    outside ``(-1e12, 1e12)`` ms or for a value that is not a float (then the caller encodes the
    record).

    Why it is the same text: ``f"{x:.3f}"`` holds the digits of ``round(x, 3)`` (both are one
    correctly rounded conversion to 3 decimals); with at most 15 significant digits those
    digits are the shortest text that reads back as that float, which is what ``repr`` writes
    (fixed notation between 1e-4 and 1e16), less trailing zeros and with at least one decimal.
    """
    millis = seconds * 1000.0
    if type(millis) is not float or not -1e12 < millis < 1e12:  # NaN fails the comparison too
        return None
    text = f"{millis:.3f}".rstrip("0")
    return text + "0" if text[-1] == "." else text


def review_line(outcome: Any, seconds: float) -> str:
    """The review log line (no newline): the compact JSON text of :func:`review_record`, the
    same keys in the same order, written out here from the outcome's fields (encoding the
    record dict costs several times more). Strings are escaped as the JSON encoder escapes
    them (:func:`json.encoder.encode_basestring_ascii`); a field of another type than usual (a
    uid that is neither str nor None, a non-str rule, a non-int ``http_status``, ...) makes the
    line the encoding of the record instead."""
    status = outcome.http_status
    duration = _duration_ms_json(seconds)
    if duration is None or type(status) is not int:
        return encode_json(review_record(outcome, seconds))
    uid = outcome.uid
    rules = () if outcome.allowed else outcome.rules
    try:
        uid_json = "null" if uid is None else encode_basestring_ascii(uid)
        if rules:
            rule_json, rules_json = encode_basestring_ascii(rules[0]), ",".join(map(encode_basestring_ascii, rules))
        else:
            rule_json, rules_json = "null", ""
        return (f'{{"time":"{utc_timestamp()}","msg":"admission review","uid":{uid_json}'
                f',"kind":{encode_basestring_ascii(outcome.kind)}'
                f',"namespace":{encode_basestring_ascii(outcome.namespace)}'
                f',"name":{encode_basestring_ascii(outcome.name)}'
                f',"user":{encode_basestring_ascii(outcome.user)}'
                f',"operation":{encode_basestring_ascii(outcome.operation)}'
                f',"decision":{encode_basestring_ascii(outcome.decision)}'
                f',"rule":{rule_json},"rules":[{rules_json}],"warnings":{len(outcome.warnings)}'
                f',"duration_ms":{duration},"http_status":{status}}}')
    except TypeError:  # a field that is not a string: let the encoder write (or reject) it
        return encode_json(review_record(outcome, seconds))


#: Printable ASCII and the newline: a stream whose encoding writes these as ASCII bytes gets
#: the review line's bytes unchanged (the line is ASCII: the JSON escapes everything else).
_ASCII_PROBE = "".join(map(chr, range(32, 127))) + "\n"


def _line_fd(stream: Any) -> int | None:
    r"""The file descriptor a review line can be written to directly for ``stream``, or None:
    only for a text file over a plain buffered writer or an unbuffered file (``sys.stderr``, also
    under ``PYTHONUNBUFFERED``; ``open(path, "w")``) with an ASCII-compatible encoding, on a
    system whose line separator is ``\n``. (Not over a read-write buffer: its read-ahead would
    misplace the next buffered write.) The line then ends with ``\n`` whatever ``newline=`` the
    stream was opened with (only an explicit ``"\r\n"`` or ``"\r"`` would have differed)."""
    if os.linesep != "\n" or not isinstance(stream, io.TextIOWrapper) \
            or type(getattr(stream, "buffer", None)) not in (io.BufferedWriter, io.FileIO):
        return None
    try:
        if _ASCII_PROBE.encode(stream.encoding) != _ASCII_PROBE.encode("ascii"):
            return None
        return stream.fileno()
    except (LookupError, UnicodeError, OSError, ValueError):  # no such codec / no usable fd
        return None


def _write_line(handler: logging.StreamHandler, line: str) -> None:
    """Write ``line`` and a newline to ``handler``'s stream, the caller holding its lock.

    For a real file (see :func:`_line_fd`) the stream is flushed (what others wrote to it goes
    first; a closed stream raises here) and the line's bytes go out in one ``os.write`` to its
    file descriptor (looping only on a short write); otherwise ``stream.write`` + ``flush``.
    Either way the line is out of the process when this returns.
    """
    stream = handler.stream
    known = getattr(handler, "_segment_webhook_fd", None)
    if known is None or known[0] is not stream:
        known = handler._segment_webhook_fd = (stream, _line_fd(stream))  # type: ignore[attr-defined]
    fd = known[1]
    if fd is None:
        stream.write(line + "\n")
        stream.flush()
        return
    stream.flush()
    data = (line + "\n").encode("ascii")
    written = os.write(fd, data)
    while written < len(data):
        data = data[written:]
        written = os.write(fd, data)


def log_review(outcome: Any, seconds: float) -> None:
    """Write one JSON line for a review on the ``segment_webhook.review`` logger (INFO).

    When the logger has only the handler of :func:`configure_review_log` (as under ``serve``),
    the line (:func:`review_line`) goes straight to that handler's stream under its lock (see
    :func:`_write_line`): the same bytes as through ``logging``, without building a
    ``LogRecord`` per review (a few percent of a review's CPU).
    """
    if not review_log.isEnabledFor(logging.INFO):
        return
    line = review_line(outcome, seconds)
    handlers = review_log.handlers
    if len(handlers) == 1 and getattr(handlers[0], "_segment_webhook", False) and not review_log.filters:
        handler = handlers[0]
        with handler.lock:
            try:
                _write_line(handler, line)
            except Exception:  # noqa: BLE001 - as logging does: report, never fail the review
                handler.handleError(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))
        return
    review_log.info(line)


def configure_review_log(stream: Any = None) -> None:
    """Send the review log to ``stream`` (default stderr) as bare JSON lines, once per process."""
    if any(getattr(h, "_segment_webhook", False) for h in review_log.handlers):
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler._segment_webhook = True  # type: ignore[attr-defined]
    review_log.addHandler(handler)
    review_log.setLevel(logging.INFO)
    review_log.propagate = False
