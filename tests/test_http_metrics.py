"""Metrics and review log helpers (webhook.http.metrics)."""

from __future__ import annotations

import json
import os

import pytest
from prometheus_client import CollectorRegistry, values

from webhook.http import metrics
from webhook.http.envelope import Outcome


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
