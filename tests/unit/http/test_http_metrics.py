"""Metrics and review log helpers (webhook.http.metrics)."""

from __future__ import annotations

import datetime
import io
import logging
import os
import re

import pytest
from prometheus_client import CollectorRegistry

from webhook.http import metrics
from webhook.http.envelope import ReviewOutcome


def test_fresh_directory_when_unset(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    path, created = metrics.prepare_multiprocess_dir()
    try:
        assert created is True
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == path
        assert os.path.isdir(path) and os.listdir(path) == []
    finally:
        os.rmdir(path)


def test_operator_directory_is_kept_but_stale_files_are_removed(tmp_path, monkeypatch):
    (tmp_path / "counter_123.db").write_bytes(b"stale")
    (tmp_path / "keep.txt").write_text("not ours")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics.prepare_multiprocess_dir() == (str(tmp_path), False)
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_unusable_directory_names_the_variable(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(blocker / "sub"))
    with pytest.raises(ValueError) as info:
        metrics.prepare_multiprocess_dir()
    assert "PROMETHEUS_MULTIPROC_DIR=" in str(info.value)


def test_label_values_are_bounded(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    m = metrics.ReviewMetrics(CollectorRegistry())
    m.observe(ReviewOutcome(200, {}, uid="u", decision="allowed", kind="Widget-" + "x" * 50, operation="EXPLODE"), 0.001)
    m.observe(ReviewOutcome(200, {}, uid="u", decision="denied", kind="PyTorchJob", operation="CREATE",
                      rules=("segment-size-not-integer", "unknown-level")), 0.002)
    assert m.reviews.labels(kind="other", operation="unknown", decision="allowed")._value.get() == 1
    assert m.reviews.labels(kind="PyTorchJob", operation="CREATE", decision="denied")._value.get() == 1
    assert m.denials.labels(rule="segment-size-not-integer")._value.get() == 1
    assert m.denials.labels(rule="unknown-level")._value.get() == 1
    text = m.render()[0].decode()
    assert "segment_webhook_review_duration_seconds_count 2.0" in text


#: Every kind the webhook reviews (DESIGN.md §3 and §3b: the training operator, LWS, the native
#: CRD, JobSet, MPIJob, KubeRay's three, Trainer v2; an Indexed batch/v1 Job) and pods.
REVIEWED_KINDS = ("PyTorchJob", "LeaderWorkerSet", "DistributedWorkload", "MPIJob", "JobSet", "RayCluster", "RayJob",
                  "RayService", "TrainJob", "Job", "Pod")


def test_every_reviewed_kind_is_its_own_label_value(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    m = metrics.ReviewMetrics(CollectorRegistry())
    for kind in REVIEWED_KINDS:
        m.observe(ReviewOutcome(200, {}, uid="u", decision="allowed", kind=kind, operation="CREATE"), 0.001)
    for kind in REVIEWED_KINDS:
        assert m.reviews.labels(kind=kind, operation="CREATE", decision="allowed")._value.get() == 1, kind
    assert m.reviews.labels(kind="other", operation="CREATE", decision="allowed")._value.get() == 0
    assert sorted(metrics.KNOWN_KINDS) == sorted(REVIEWED_KINDS)


# ------------------------------------------------------------------ the review log line (docs/tasks/operations.md "Metrics and logs")

#: 2026-12-01 21:06:00.1235 UTC as seconds since the epoch (the README example's day).
CREATED = datetime.datetime(2026, 12, 1, 21, 6, 0, 123500, tzinfo=datetime.timezone.utc).timestamp()

SAMPLE = ReviewOutcome(200, {}, uid="u-9", decision="denied", rules=("immutable-field",), kind="Pod", operation="UPDATE",
                 namespace="ns", name="p", user="bob")
SAMPLE_LINE = ('{"time":"2026-12-01T21:06:00.123Z","msg":"admission review","uid":"u-9","kind":"Pod","namespace":"ns",'
               '"name":"p","user":"bob","operation":"UPDATE","decision":"denied","rule":"immutable-field",'
               '"rules":["immutable-field"],"warnings":0,"duration_ms":4.2,"http_status":200}')


def formatted(outcome, seconds):
    record = logging.makeLogRecord({"name": metrics.REVIEW_LOGGER, "msg": "admission review", "created": CREATED,
                                    "review": metrics.review_fields(outcome, seconds)})
    return metrics.ReviewLineFormatter().format(record)


def test_review_line_of_a_denial():
    assert formatted(SAMPLE, 0.0042) == SAMPLE_LINE


def test_review_line_of_an_allowed_review_names_no_rule():
    outcome = ReviewOutcome(200, {}, uid="u-1", decision="allowed", rules=("ignored-when-allowed",), kind="PyTorchJob",
                      operation="CREATE", namespace="team-a", name="job", user="alice", warnings=["w", "v"])
    assert formatted(outcome, 0.0123456) == (
        '{"time":"2026-12-01T21:06:00.123Z","msg":"admission review","uid":"u-1","kind":"PyTorchJob",'
        '"namespace":"team-a","name":"job","user":"alice","operation":"CREATE","decision":"allowed","rule":null,'
        '"rules":[],"warnings":2,"duration_ms":12.346,"http_status":200}')


def test_review_line_of_a_body_without_uid():
    assert formatted(ReviewOutcome(400, {}, decision="malformed", rules=("malformed-review",)), 0.0005) == (
        '{"time":"2026-12-01T21:06:00.123Z","msg":"admission review","uid":null,"kind":"","namespace":"",'
        '"name":"","user":"","operation":"","decision":"malformed","rule":"malformed-review",'
        '"rules":["malformed-review"],"warnings":0,"duration_ms":0.5,"http_status":400}')


def test_review_line_keeps_unicode_and_escapes_what_json_must():
    outcome = ReviewOutcome(200, {}, uid='quo"te\\n\n', decision="allowed", name="名前", user="\U0001f600")
    line = formatted(outcome, 0.001)
    assert '"uid":"quo\\"te\\\\n\\n"' in line
    assert '"name":"名前","user":"😀"' in line


def test_review_line_of_text_orjson_refuses_is_still_written():
    """A lone surrogate (a client can send ``"\\ud800"`` as a uid): json's escape instead."""
    line = formatted(ReviewOutcome(200, {}, uid="\ud800", decision="allowed"), 0.001)
    assert line.startswith('{"time":"2026-12-01T21:06:00.123Z","msg":"admission review","uid":"\\ud800","kind":""')


@pytest.fixture
def review_stream():
    """The review log on a StringIO, installed as ``configure_review_log`` does; restored afterwards."""
    logger = metrics.review_log
    saved = logger.handlers[:], logger.level, logger.propagate
    logger.handlers.clear()
    stream = io.StringIO()
    metrics.configure_review_log(stream)
    yield stream
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def test_log_review_writes_one_line_through_logging(review_stream):
    metrics.log_review(SAMPLE, 0.0042)
    metrics.log_review(SAMPLE, 0.0042)
    lines = review_stream.getvalue().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert re.fullmatch(r'\{"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",' + re.escape(SAMPLE_LINE[SAMPLE_LINE.index('"msg"'):]), line)


def test_log_review_to_a_closed_stream_does_not_raise(tmp_path, monkeypatch):
    logger = metrics.review_log
    saved = logger.handlers[:], logger.level, logger.propagate
    logger.handlers.clear()
    try:
        stream = open(tmp_path / "review.log", "w")
        metrics.configure_review_log(stream)
        reported: list = []  # the LogRecords, with the review the handler was given as an extra field
        monkeypatch.setattr(logger.handlers[0], "handleError", reported.append)
        stream.close()
        metrics.log_review(SAMPLE, 0.001)
        assert len(reported) == 1 and reported[0].review["uid"] == "u-9"
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]


def test_utc_timestamp_truncates_to_milliseconds():
    assert metrics.utc_timestamp(CREATED) == "2026-12-01T21:06:00.123Z"
    assert metrics.utc_timestamp(0.9999) == "1970-01-01T00:00:00.999Z"


def test_the_master_imports_the_multiprocess_module_before_workers_fork(tmp_path):
    """gunicorn's child_exit (mark_process_dead) runs in a SIGCHLD handler; a first import of
    prometheus_client there was interrupted by the next worker's SIGCHLD (ImportError, serve exited
    1 on SIGTERM). prepare_multiprocess_dir, run in the master, imports it beforehand."""
    import subprocess
    import sys

    code = ("import os, sys; os.environ['PROMETHEUS_MULTIPROC_DIR'] = sys.argv[1]; "
            "from webhook.http import metrics; assert 'prometheus_client' not in sys.modules; "
            "metrics.prepare_multiprocess_dir(); "
            "assert 'prometheus_client.multiprocess' in sys.modules; "
            "from prometheus_client import values; assert values.ValueClass.__name__ == 'MmapedValue', values.ValueClass")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_review_line_handler_writes_the_bytes_a_stream_handler_writes(tmp_path, encoding):
    """On a file the review log's handler writes each line with os.write: the bytes the stdlib's
    StreamHandler writes through the stream (its encoding and error handler), one line per record,
    after what the stream held already; after setStream, to the new stream."""
    outcome = ReviewOutcome(200, {}, uid="u-é", decision="allowed", name="naïve")
    paths = [tmp_path / "ours.log", tmp_path / "stdlib.log", tmp_path / "moved.log"]
    streams = [open(path, "w", encoding=encoding, errors="backslashreplace") for path in paths]
    for stream in streams:
        stream.write("before\n")
    ours, stdlib = metrics.ReviewLineHandler(streams[0]), logging.StreamHandler(streams[1])
    for handler in (ours, stdlib):
        handler.setFormatter(metrics.ReviewLineFormatter())
        for seconds in (0.001, 0.002):
            record = logging.LogRecord(metrics.REVIEW_LOGGER, logging.INFO, __file__, 0, metrics.REVIEW_MESSAGE, (),
                                       None)
            record.created = CREATED
            record.review = metrics.review_fields(outcome, seconds)
            handler.handle(record)
    ours.setStream(streams[2])
    ours.handle(record)
    for stream in streams:
        stream.close()
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes().count(b"\n") == 3
    assert paths[2].read_bytes() == b"before\n" + paths[1].read_bytes().splitlines(keepends=True)[-1]
    expected_name = b'"name":"na\\xefve"' if encoding == "ascii" else '"name":"naïve"'.encode()
    assert expected_name in paths[0].read_bytes()


# ------------------------------------------------------------------ worker restarts (issue 37 item 9)

def simulated_worker(monkeypatch, pid: int, reviews: int) -> None:
    """One gunicorn worker with pid ``pid`` that answered ``reviews`` reviews, each an allowed Pod
    CREATE and a denied PyTorchJob CREATE (rule unknown-level), each taking 2 ms. Its files are
    written as prometheus_client's multiprocess mode writes them in a worker (``values.MultiProcessValue``
    with the worker's pid as its process identifier)."""
    from prometheus_client import values

    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda: pid))
    worker = metrics.ReviewMetrics(CollectorRegistry())
    for _ in range(reviews):
        worker.observe(ReviewOutcome(200, {}, uid="u", decision="allowed", kind="Pod", operation="CREATE"), 0.002)
        worker.observe(ReviewOutcome(200, {}, uid="u", decision="denied", kind="PyTorchJob", operation="CREATE",
                                     rules=("unknown-level",)), 0.002)


def scraped(text: str) -> dict[str, float]:
    """``name{labels}`` → value of every sample line of an exposition text."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_the_directory_stays_bounded_across_20_worker_restarts_and_keeps_every_count(tmp_path, monkeypatch):
    """20 workers answer 3 reviews each and exit (gunicorn's child_exit: mark_process_dead), then 2
    live workers answer 3 each: the directory holds the 2 live workers' counter and histogram files
    and one archive per type, 6 files of prometheus_client's 64 KiB (6 x 65,536 = 393,216 bytes;
    before, 2 more files per restart: 44 files, 2,883,584 bytes), and the scrape counts all 22
    workers: 66 allowed Pod reviews, 66 denied PyTorchJob reviews, 66 unknown-level denials, 132
    durations."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    for pid in range(1000, 1020):
        simulated_worker(monkeypatch, pid, 3)
        metrics.mark_process_dead(pid)
    for pid in (2000, 2001):
        simulated_worker(monkeypatch, pid, 3)
    files = sorted(p.name for p in tmp_path.glob("*.db"))
    assert files == ["counter_2000.db", "counter_2001.db", "counter_archive.db",
                     "histogram_2000.db", "histogram_2001.db", "histogram_archive.db"]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 393_216
    samples = scraped(metrics.ReviewMetrics(CollectorRegistry()).render()[0].decode())
    assert samples['segment_webhook_reviews_total{decision="allowed",kind="Pod",operation="CREATE"}'] == 66
    assert samples['segment_webhook_reviews_total{decision="denied",kind="PyTorchJob",operation="CREATE"}'] == 66
    assert samples['segment_webhook_denials_total{rule="unknown-level"}'] == 66
    assert samples["segment_webhook_review_duration_seconds_count"] == 132
    assert samples['segment_webhook_review_duration_seconds_bucket{le="0.0025"}'] == 132
    assert samples['segment_webhook_review_duration_seconds_bucket{le="0.001"}'] == 0
    assert samples["segment_webhook_review_duration_seconds_sum"] == pytest.approx(132 * 0.002)


def test_a_dead_worker_without_files_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    simulated_worker(monkeypatch, 3000, 1)
    metrics.mark_process_dead(4242)  # never wrote a metric
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["counter_3000.db", "histogram_3000.db"]
