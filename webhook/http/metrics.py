"""Prometheus metrics (``prometheus_client``, multiprocess mode under gunicorn) and the JSON
review log.

Metrics (one set per process; under gunicorn every worker writes into
``PROMETHEUS_MULTIPROC_DIR`` and ``GET /metrics`` aggregates all workers with
``prometheus_client.multiprocess.MultiProcessCollector``; the counts of exited workers are kept in
one archive file per metric type, :func:`archive_dead_worker`, so the directory holds two files per
live worker and two archives, however often workers restart):

* ``segment_webhook_reviews_total{kind,operation,decision}`` counter: one per AdmissionReview.
  ``kind``: every kind of :data:`webhook.admission.kinds.registry.DESCRIPTIONS`, ``Pod``, or ``other``
  (:data:`KNOWN_KINDS`; bounded, so a client cannot blow up the label set); ``operation``: CREATE | UPDATE | DELETE |
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

Review log: one ``logging`` record per review on the ``segment_webhook.review`` logger
(:func:`log_review`), written under ``serve`` as one JSON line on stderr
(:class:`ReviewLineFormatter`, orjson), fields ``time`` (UTC ISO 8601 with milliseconds, ``2026-12-01T21:06:00.123Z``), ``uid``, ``kind``,
``namespace``, ``name``, ``user``, ``operation``, ``decision``, ``rule`` (first violated rule or
null), ``rules``, ``warnings`` (count), ``duration_ms`` (the histogram's measure, in
milliseconds), ``http_status``. Under ``serve`` each line is on stderr before the review's
answer is returned.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson

from webhook.admission.kinds import registry
from webhook.http.envelope import DECISION_ALLOWED
from webhook.kube.core import OPERATIONS

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The ``kind`` label values besides ``other``: every kind of the registry, and ``Pod``.
KNOWN_KINDS: tuple[str, ...] = tuple(d.kind for d in registry.DESCRIPTIONS) + ("Pod",)
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
    # prometheus_client chooses its value storage (the multiprocess files) when it is first
    # imported, from this variable: ``serve`` calls this before anything imports it
    # (tests/unit/http/test_http_metrics.py checks that in a fresh process). Imported here, in the master, with the directory set: gunicorn's child_exit hook
    # (mark_process_dead) runs in a SIGCHLD handler, and a first import there can be interrupted
    # by the next worker's SIGCHLD, which then imports the half-imported package (an ImportError
    # that made serve exit 1 on SIGTERM in one CI run).
    import prometheus_client.multiprocess  # noqa: F401
    return path, created


def multiprocess_enabled() -> bool:
    """True when ``PROMETHEUS_MULTIPROC_DIR`` is set (metrics are shared across workers)."""
    return bool(os.environ.get(MULTIPROC_ENV))


#: Metric file types whose values of a dead worker are kept by adding them into one archive file
#: per type (:func:`archive_dead_worker`): the types MultiProcessCollector sums across processes.
ARCHIVED_TYPES = ("counter", "histogram", "summary")
#: The lock file, beside the metric files (not ``*.db``: the collector reads only those).
LOCK_FILE = ".lock"


def mark_process_dead(pid: int) -> None:
    """Worker ``pid`` exited (gunicorn ``child_exit`` hook, in the master): prometheus_client's
    ``multiprocess.mark_process_dead`` drops its live-gauge files, and :func:`archive_dead_worker`
    adds its counters and histograms into the archive files and removes its files, so that the
    directory stays bounded across worker restarts. No-op outside multiprocess mode."""
    if multiprocess_enabled():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
        archive_dead_worker(pid, os.environ[MULTIPROC_ENV])


@contextlib.contextmanager
def directory_lock(path: str, *, exclusive: bool) -> Iterator[None]:
    """``flock`` on :data:`LOCK_FILE` in the metrics directory ``path``: shared while a scrape
    reads the files (:meth:`ReviewMetrics.render`), exclusive while :func:`archive_dead_worker`
    replaces them, so that a scrape never sees a dead worker's counts twice or not at all (a
    counter that went down would read as a reset). Released when the process dies."""
    fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def archive_dead_worker(pid: int, path: str) -> None:
    """Fold the metric files of the exited worker ``pid`` (``counter_<pid>.db``,
    ``histogram_<pid>.db``, ``summary_<pid>.db`` in ``path``) into ``<type>_archive.db`` and
    remove them.

    prometheus_client keeps every exited worker's counter and histogram files (their counts must
    not be lost: ``mark_process_dead`` only drops live gauges), so each worker restart left two
    more 64 KiB files that every scrape read. Its collector sums counters, histogram buckets and
    summaries over all files by their sample key (``MultiProcessCollector.merge``), whatever the
    file's pid, so one file per type holding the sums of the dead workers reads the same. The new
    archive is written beside (``<type>_archive.db.tmp``, which the collector does not read),
    then renamed over the old one and the worker's file removed, under the exclusive
    :func:`directory_lock`. Call it after the worker exited and before a new one could have its
    pid (gunicorn's ``child_exit``, before the master forks again). Raises ``OSError`` when a
    file cannot be read or written."""
    from prometheus_client.mmap_dict import MmapedDict

    with directory_lock(path, exclusive=True):
        for typ in ARCHIVED_TYPES:
            dead = os.path.join(path, f"{typ}_{pid}.db")
            if not os.path.exists(dead):
                continue
            archive = os.path.join(path, f"{typ}_archive.db")
            totals: dict[str, float] = {}
            for name in (archive, dead):
                if os.path.exists(name):
                    for key, value, *_ in MmapedDict.read_all_values_from_file(name):
                        totals[key] = totals.get(key, 0.0) + value
            staged = archive + ".tmp"
            if os.path.exists(staged):
                os.unlink(staged)
            merged = MmapedDict(staged)
            try:
                for key, value in totals.items():
                    merged.write_value(key, value, 0.0)
            finally:
                merged.close()
            os.replace(staged, archive)
            os.unlink(dead)


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
        """Count one answered review. ``outcome``: a :class:`webhook.http.envelope.ReviewOutcome`;
        ``seconds``: time taken to answer it.

        The labelled children are kept in a dict (one lookup per review instead of
        prometheus_client's ``labels()`` validation); label values stay bounded as documented.
        """
        kind = outcome.kind if outcome.kind in KNOWN_KINDS else "other"
        operation = outcome.operation if outcome.operation in OPERATIONS else "unknown"
        key = (kind, operation, outcome.decision)
        child = self._review_children.get(key)
        if child is None:
            child = self._review_children[key] = self.reviews.labels(
                kind=kind, operation=operation, decision=outcome.decision)
        child.inc()
        self.duration.observe(max(seconds, 0.0))
        if outcome.decision != DECISION_ALLOWED:  # not outcome.allowed (that property, read inline)
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
            with directory_lock(os.environ[MULTIPROC_ENV], exclusive=False):
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


#: ``(second, "YYYY-MM-DDTHH:MM:SS")`` of the last timestamp made: the reviews of one second share
#: the calendar conversion.
_last_second: tuple[int, str] = (-1, "")


def utc_timestamp(seconds: float) -> str:
    """``seconds`` since the epoch as UTC ``2026-12-01T21:06:00.123Z``: the text of
    ``datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")`` with
    ``Z`` for ``+00:00`` (milliseconds truncated, as ``isoformat`` does)."""
    global _last_second
    whole, millis = divmod(int(seconds * 1000), 1000)
    cached, prefix = _last_second
    if cached != whole:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _last_second = (whole, prefix)
    return f"{prefix}.{millis:03d}Z"


def review_fields(outcome: Any, seconds: float) -> dict[str, Any]:
    """One review's log line as a dict, in its order (the fields listed in the module docstring):
    ``time`` (None here: :class:`ReviewLineFormatter` fills it in from the record's creation
    time), ``msg`` (:data:`REVIEW_MESSAGE`), then ``uid`` … ``http_status``. ``outcome``: a
    :class:`webhook.http.envelope.ReviewOutcome`; ``seconds``: the review's latency."""
    denied = outcome.decision != DECISION_ALLOWED
    rules = outcome.rules
    return {
        "time": None,
        "msg": REVIEW_MESSAGE,
        "uid": outcome.uid,
        "kind": outcome.kind,
        "namespace": outcome.namespace,
        "name": outcome.name,
        "user": outcome.user,
        "operation": outcome.operation,
        "decision": outcome.decision,
        "rule": rules[0] if (rules and denied) else None,
        "rules": list(rules) if denied else [],
        "warnings": len(outcome.warnings),
        "duration_ms": round(seconds * 1000.0, 3),
        "http_status": outcome.http_status,
    }


class ReviewLineFormatter(logging.Formatter):
    """Formats a ``segment_webhook.review`` record as one compact JSON object, encoded by orjson:
    the record's review fields (:func:`review_fields`, the record attribute :data:`REVIEW_FIELDS`)
    with ``time`` set to the record's creation time (:func:`utc_timestamp`) and ``msg`` to its
    message; a record without them is ``{"time", "msg"}``. Like :class:`logging.Formatter`, which
    stores ``message`` and ``asctime`` on the record, this sets ``time`` and ``msg`` in the
    record's own dict (no copy per line). Text orjson refuses (a lone surrogate in a client's uid,
    a value that is not JSON) is encoded by :mod:`json` instead, with non-JSON values as their
    ``str``: a log line never fails a review."""

    def format(self, record: logging.LogRecord) -> str:
        line = record.__dict__.get(REVIEW_FIELDS)
        if line is None:
            line = {"time": None, "msg": None}
        line["time"] = utc_timestamp(record.created)
        line["msg"] = record.getMessage()
        try:
            return orjson.dumps(line).decode()
        except TypeError:
            return json.dumps(line, separators=(",", ":"), default=str)


#: The ``LogRecord`` attribute that carries a review's fields (:func:`review_fields`).
REVIEW_FIELDS = "review"
#: The message of every review record (the line's ``msg``).
REVIEW_MESSAGE = "admission review"


def log_review(outcome: Any, seconds: float) -> None:
    """Log one review on the ``segment_webhook.review`` logger (INFO, message ``admission
    review``, the fields of :func:`review_fields` as the record's ``review`` attribute): under
    ``serve`` one JSON line on stderr (:func:`configure_review_log`), out before the review's
    answer is returned."""
    if review_log.isEnabledFor(logging.INFO):
        # makeRecord + handle is Logger.info without looking up the calling source line (no
        # format of ours prints it): the same filters, handlers and formatter. The fields are set
        # as the record's attribute, as ``extra`` would, without its check for clashing names.
        record = review_log.makeRecord(REVIEW_LOGGER, logging.INFO, __file__, 0, REVIEW_MESSAGE, (), None)
        record.review = review_fields(outcome, seconds)
        review_log.handle(record)


#: the name of the review log's handler: :func:`configure_review_log` adds it once
REVIEW_HANDLER = "segment_webhook.review"


class ReviewLineHandler(logging.StreamHandler[Any]):
    """The review log's handler: a :class:`logging.StreamHandler` that, on a stream with a file
    descriptor (stderr under ``serve``), writes each formatted line with ``os.write`` (repeated
    until all of it is written), encoded as the stream encodes text: the same bytes as the stream's
    ``write`` and ``flush`` (which the stdlib handler calls for every record), out at once, in
    fewer instructions (docs/tasks/benchmarks.md). Filters, the handler's lock and ``handleError`` are
    the stdlib's. A stream without a descriptor (a ``StringIO``) is written as the stdlib does."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._fd: int | None = None
        self._use(stream)

    def _use(self, stream: Any) -> None:
        """Read ``stream``'s descriptor and text encoding (no descriptor: ``_fd`` None)."""
        try:
            stream.flush()  # what the stream holds already goes out first
            self._fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor
            self._fd = None
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._errors = getattr(stream, "errors", None) or "strict"

    def setStream(self, stream: Any) -> Any:
        """The stdlib's ``setStream``, then the new stream's descriptor and encoding."""
        old = super().setStream(stream)
        self._use(self.stream)
        return old

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record``'s line and a newline (see the class)."""
        if self._fd is None or getattr(self.stream, "closed", False):  # closed: the stdlib's write raises, handleError reports
            super().emit(record)
            return
        try:
            data = (self.format(record) + self.terminator).encode(self._encoding, self._errors)
            while data:
                data = data[os.write(self._fd, data):]
        except RecursionError:  # as logging.StreamHandler.emit
            raise
        except Exception:  # noqa: BLE001 - as the stdlib's emit: handleError reports it
            self.handleError(record)


def configure_review_log(stream: Any = None) -> None:
    """Send the review log to ``stream`` (default stderr) as bare JSON lines
    (:class:`ReviewLineFormatter`), once per process."""
    if any(h.name == REVIEW_HANDLER for h in review_log.handlers):
        return
    handler = ReviewLineHandler(stream or sys.stderr)
    handler.setFormatter(ReviewLineFormatter())
    handler.name = REVIEW_HANDLER
    review_log.addHandler(handler)
    review_log.setLevel(logging.INFO)
    review_log.propagate = False
