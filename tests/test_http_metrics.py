"""Metrics and review log helpers (webhook.http.metrics)."""

from __future__ import annotations

import io
import json
import os

import pytest
from prometheus_client import CollectorRegistry, values

from webhook.http import metrics
from webhook.http.envelope import Outcome, encode_json


@pytest.fixture
def isolated_value_class(monkeypatch):
    # prepare_multiprocess_dir switches prometheus_client to multiprocess values; undo afterwards
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)


def test_fresh_directory_when_unset(monkeypatch, isolated_value_class):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    path, created = metrics.prepare_multiprocess_dir()
    try:
        assert created is True
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == path
        assert os.path.isdir(path) and os.listdir(path) == []
    finally:
        os.rmdir(path)


def test_operator_directory_is_kept_but_stale_files_are_removed(tmp_path, monkeypatch, isolated_value_class):
    (tmp_path / "counter_123.db").write_bytes(b"stale")
    (tmp_path / "keep.txt").write_text("not ours")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics.prepare_multiprocess_dir() == (str(tmp_path), False)
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_unusable_directory_names_the_variable(tmp_path, monkeypatch, isolated_value_class):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(blocker / "sub"))
    with pytest.raises(ValueError) as info:
        metrics.prepare_multiprocess_dir()
    assert "PROMETHEUS_MULTIPROC_DIR=" in str(info.value)


def test_label_values_are_bounded(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    m = metrics.ReviewMetrics(CollectorRegistry())
    m.observe(Outcome(200, {}, uid="u", decision="allowed", kind="Widget-" + "x" * 50, operation="EXPLODE"), 0.001)
    m.observe(Outcome(200, {}, uid="u", decision="denied", kind="PyTorchJob", operation="CREATE",
                      rules=("segment-size-not-integer", "unknown-level")), 0.002)
    assert m.reviews.labels(kind="other", operation="unknown", decision="allowed")._value.get() == 1
    assert m.reviews.labels(kind="PyTorchJob", operation="CREATE", decision="denied")._value.get() == 1
    assert m.denials.labels(rule="segment-size-not-integer")._value.get() == 1
    assert m.denials.labels(rule="unknown-level")._value.get() == 1
    text = m.render()[0].decode()
    assert "segment_webhook_review_duration_seconds_count 2.0" in text


def test_review_record_fields():
    outcome = Outcome(200, {}, uid="u-1", decision="denied", rules=("immutable-field",), kind="PyTorchJob",
                      operation="UPDATE", namespace="team-a", name="job", user="alice", warnings=["w"])
    rec = metrics.review_record(outcome, 0.0123456)
    assert {k: v for k, v in rec.items() if k != "time"} == {
        "msg": "admission review", "uid": "u-1", "kind": "PyTorchJob", "namespace": "team-a", "name": "job",
        "user": "alice", "operation": "UPDATE", "decision": "denied", "rule": "immutable-field",
        "rules": ["immutable-field"], "warnings": 1, "duration_ms": 12.346, "http_status": 200}
    assert rec["time"].endswith("Z")
    json.dumps(rec)


# ------------------------------------------------------------------ the review log line

def _encoded_record(outcome, seconds):
    """The reference text of a review log line: the JSON encoding of the record."""
    return encode_json(metrics.review_record(outcome, seconds))


@pytest.fixture
def fixed_time(monkeypatch):
    monkeypatch.setattr(metrics, "utc_timestamp", lambda: "2026-12-01T21:06:00.123Z")


@pytest.mark.parametrize("outcome", [
    Outcome(200, {}, uid="u-1", decision="allowed", kind="PyTorchJob", operation="CREATE", namespace="team-a",
            name="job", user="alice", warnings=["w", "v"]),
    Outcome(200, {}, uid="u-2", decision="denied", rules=("immutable-field", "unknown-level"), kind="Pod",
            operation="UPDATE", namespace="n", name="p", user="system:serviceaccount:a:b"),
    Outcome(200, {}, uid="u-3", decision="allowed", rules=("ignored-when-allowed",)),
    Outcome(400, {}, decision="malformed", rules=("malformed-review",)),
    Outcome(200, {}, uid='quo"te\\back\nslash\u2028', decision="error", rules=["internal-error"],
            kind="Wïdget", name="名前", user="\U0001f600\x00\ud800", operation="CONNECT"),
    # unusual types: the line is then the encoder's text of the record
    Outcome(200, {}, uid=7, decision="allowed"),
    Outcome(True, {}, uid="u", decision="allowed"),
    Outcome(200, {}, uid="u", decision="denied", rules=(1, "x")),
    Outcome(200, {}, uid="u", decision="allowed", kind=None),
])
@pytest.mark.parametrize("seconds", [0.0, 0.0012345, 0.0000625, 2.5, -0.0000001, 3, float("nan"), float("inf"), 5e9])
def test_review_line_is_the_encoded_record(fixed_time, outcome, seconds):
    assert metrics.review_line(outcome, seconds) == _encoded_record(outcome, seconds)


def test_review_line_bad_field_fails_as_the_encoder_does(fixed_time):
    outcome = Outcome(200, {}, uid="u", decision="denied", rules=(object(),))
    with pytest.raises(TypeError):
        _encoded_record(outcome, 0.001)
    with pytest.raises(TypeError):
        metrics.review_line(outcome, 0.001)


def test_duration_text_is_repr_of_rounded_milliseconds():
    import random
    import struct

    rng = random.Random(6)
    values = [0.0, -0.0, 1e-7, -1e-7, 5e-7, 0.0000625, 0.0005, 0.001, 1.0, 123.4565, 999999999.9999]
    values += [rng.random() * 10 ** rng.randint(-8, 8) for _ in range(20000)]
    values += [rng.randint(0, 10 ** 9) / 1e6 + rng.choice((5e-7, -5e-7, 4.99999e-7)) for _ in range(20000)]
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(20000)]
    checked = 0
    for value in values:
        text = metrics._duration_ms_json(value)
        if text is not None:
            checked += 1
            assert text == repr(round(value * 1000.0, 3)), value
    assert checked > 40000


def test_utc_timestamp_is_datetime_isoformat_in_milliseconds():
    import datetime
    import re

    def iso():
        return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    for _ in range(200):
        before, stamp, after = iso(), metrics.utc_timestamp(), iso()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
        assert before <= stamp <= after


@pytest.fixture
def review_handler():
    """Install a review-log handler as ``configure_review_log`` does, on a stream the test chooses;
    the logger's previous state is restored afterwards."""
    logger = metrics.review_log
    saved = logger.handlers[:], logger.level, logger.propagate
    logger.handlers.clear()

    def install(stream):
        metrics.configure_review_log(stream)
        return logger.handlers[0]
    yield install
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


SAMPLE = Outcome(200, {}, uid="u-9", decision="denied", rules=("immutable-field",), kind="Pod", operation="UPDATE",
                 namespace="ns", name="p", user="bob")


def test_log_review_to_a_file_writes_the_line_bytes(tmp_path, review_handler, fixed_time):
    with open(tmp_path / "review.log", "w") as stream:
        review_handler(stream)
        stream.write("written before\n")  # still buffered: must come out first
        metrics.log_review(SAMPLE, 0.0042)
        assert (tmp_path / "review.log").read_bytes() == \
            b"written before\n" + (_encoded_record(SAMPLE, 0.0042) + "\n").encode()
        metrics.log_review(SAMPLE, 0.001)
        stream.write("after\n")
    lines = (tmp_path / "review.log").read_text().splitlines()
    assert lines == ["written before", _encoded_record(SAMPLE, 0.0042), _encoded_record(SAMPLE, 0.001), "after"]


def test_log_review_without_a_file_descriptor_writes_to_the_stream(review_handler, fixed_time):
    stream = io.StringIO()
    review_handler(stream)
    metrics.log_review(SAMPLE, 0.0042)
    assert stream.getvalue() == _encoded_record(SAMPLE, 0.0042) + "\n"


def test_log_review_follows_a_replaced_stream(tmp_path, review_handler, fixed_time):
    first = open(tmp_path / "first.log", "w")
    handler = review_handler(first)
    metrics.log_review(SAMPLE, 0.001)
    second = io.StringIO()
    handler.setStream(second)
    first.close()
    metrics.log_review(SAMPLE, 0.002)
    assert (tmp_path / "first.log").read_text() == _encoded_record(SAMPLE, 0.001) + "\n"
    assert second.getvalue() == _encoded_record(SAMPLE, 0.002) + "\n"


def test_log_review_to_a_closed_stream_is_reported_not_raised(tmp_path, review_handler, monkeypatch):
    stream = open(tmp_path / "review.log", "w")
    handler = review_handler(stream)
    metrics.log_review(SAMPLE, 0.001)
    stream.close()
    reported = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    metrics.log_review(SAMPLE, 0.001)
    assert len(reported) == 1 and reported[0].getMessage().startswith('{"time":')


def test_line_descriptor_only_for_ascii_compatible_text_files(tmp_path):
    with open(tmp_path / "a", "w", encoding="utf-8") as utf8, open(tmp_path / "b", "w", encoding="utf-16") as utf16, \
            open(tmp_path / "c", "w+") as random_access:
        assert metrics._line_fd(utf8) == utf8.fileno()
        assert metrics._line_fd(utf16) is None
        assert metrics._line_fd(random_access) is None
    with io.TextIOWrapper(io.FileIO(tmp_path / "d", "w"), write_through=True) as unbuffered:  # python -u
        assert metrics._line_fd(unbuffered) == unbuffered.fileno()
    assert metrics._line_fd(io.StringIO()) is None


def test_log_review_to_an_unbuffered_file(tmp_path, review_handler, fixed_time):
    with io.TextIOWrapper(io.FileIO(tmp_path / "review.log", "w"), write_through=True) as stream:
        review_handler(stream)
        stream.write("first\n")
        metrics.log_review(SAMPLE, 0.0042)
        stream.write("last\n")
    assert (tmp_path / "review.log").read_text() == f"first\n{_encoded_record(SAMPLE, 0.0042)}\nlast\n"


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
