"""Flask app + AdmissionReview envelope (webhook.http.app, webhook.http.envelope), in-process.

Transport rules are checked with a stub domain function (the contract types of
webhook.admission.verdict); the domain answers with the real core (webhook.admission.review).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os

import jsonpatch
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from webhook.admission.config import AdmissionSettings
from webhook.admission.verdict import Decision
from webhook.http import envelope
from webhook.http.app import MAX_BODY_BYTES, create_app
from webhook.http.metrics import ReviewMetrics
from webhook.topology.objects import StaticTopologyCatalog, default_catalog

JSON = "application/json"
SEG = "kai.scheduler/segment-size"
TOPO = "kai.scheduler/topology"
SEG_REQ = "kai.scheduler/segment-topology-required-placement"
RACK = "cloud.provider.com/topology-rack"


def review_doc(uid="uid-1", operation="CREATE", obj=None, kind=("kubeflow.org", "v1", "PyTorchJob"), **extra):
    request = {
        "uid": uid,
        "kind": {"group": kind[0], "version": kind[1], "kind": kind[2]},
        "operation": operation,
        "namespace": "team-a",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj if obj is not None else {"apiVersion": "/".join(filter(None, kind[:2])), "kind": kind[2],
                                                "metadata": {"name": "job-1", "namespace": "team-a"}},
    }
    request.update(extra)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def stub(decision: Decision, calls: list | None = None):
    def review_fn(request, catalog, settings, *, mutate=True):
        if calls is not None:
            calls.append((request, mutate))
        return decision
    return review_fn


def make_app(review_fn=None, catalog=None, tls_ready=None, settings=AdmissionSettings()):
    metrics = ReviewMetrics(CollectorRegistry())
    app = create_app(catalog or StaticTopologyCatalog(), settings, tls_ready=tls_ready, metrics=metrics,
                     review_fn=review_fn)
    return app.test_client(), metrics


@pytest.fixture(autouse=True)
def _single_process_metrics(monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


def post(client, path, body, content_type=JSON):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, data=data, content_type=content_type)


# ------------------------------------------------------------------ transport: 4xx, never 5xx

def test_wrong_content_type_is_415():
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    resp = post(client, "/mutate", review_doc(), content_type="text/plain")
    assert resp.status_code == 415
    assert resp.get_json() == {"error": "Content-Type must be application/json, got 'text/plain'",
                               "field": "Content-Type"}


def test_json_with_charset_parameter_is_accepted():
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    resp = post(client, "/mutate", review_doc(), content_type="application/json; charset=utf-8")
    assert resp.status_code == 200
    assert resp.get_json()["response"] == {"uid": "uid-1", "allowed": True}


@pytest.mark.parametrize("content_type", ["Application/JSON", "application/json;charset=utf-8",
                                          "application/json ; foo=bar", "APPLICATION/JSON; charset=\"x\""])
def test_json_media_type_is_case_insensitive_and_parameters_ignored(content_type):
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    assert post(client, "/mutate", review_doc(), content_type=content_type).status_code == 200


@pytest.mark.parametrize("content_type", ["application/jsonx", "application/json-patch+json", "text/json", ""])
def test_other_media_types_are_415(content_type):
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    resp = post(client, "/mutate", review_doc(), content_type=content_type)
    assert resp.status_code == 415
    assert resp.get_json()["error"] == f"Content-Type must be application/json, got {content_type or 'none'!r}"


def test_body_over_3_mib_is_413_before_reading():
    calls: list = []
    client, _ = make_app(stub(Decision(kind="PyTorchJob"), calls))
    resp = post(client, "/mutate", b"x" * (3 * 1024 * 1024 + 1))
    assert resp.status_code == 413
    assert resp.get_json()["field"] == "body"
    assert "3145728-byte limit" in resp.get_json()["error"]
    assert calls == []


def test_body_without_content_length_is_cut_at_3_mib():
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    stream = io.BytesIO(b"{" + b" " * (3 * 1024 * 1024 + 10) + b"}")
    resp = client.post("/mutate", input_stream=stream, content_type=JSON,
                       environ_overrides={"wsgi.input_terminated": True})
    assert resp.status_code == 413
    assert resp.get_json()["field"] == "body"


class RecordingStream:
    """A wsgi.input that counts the bytes read and calls ``on_read(n)`` after each read."""

    def __init__(self, data: bytes, on_read=None):
        self.buffer = io.BytesIO(data)
        self.read_bytes = 0
        self.on_read = on_read

    def read(self, size=-1):
        chunk = self.buffer.read(size)
        self.read_bytes += len(chunk)
        if self.on_read is not None:
            self.on_read(len(chunk))
        return chunk


def call_wsgi(app, environ_extra):
    """Call the WSGI app directly; returns (status, headers, iterable) before the body is iterated."""
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(path="/mutate", method="POST", content_type=JSON).get_environ()
    environ.update(environ_extra)
    started = {}

    def start_response(status, headers, exc_info=None):
        started["status"], started["headers"] = status, dict(headers)

    iterable = app(environ, start_response)
    return started, iterable


def test_announced_oversized_body_is_413_at_once_and_drained_only_after_the_answer():
    app = create_app(StaticTopologyCatalog(), AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()),
                     review_fn=stub(Decision(kind="PyTorchJob")), read_timeout=5)
    stream = RecordingStream(b"x" * 100)  # announces 5 MB, sends 100 bytes
    started, iterable = call_wsgi(app, {"CONTENT_LENGTH": "5000000", "wsgi.input": stream})
    assert started["status"].startswith("413")
    assert started["headers"]["Connection"] == "close"
    assert stream.read_bytes == 0  # answered before reading anything
    body = b"".join(iterable)
    assert json.loads(body)["field"] == "body" and b"5000000 bytes" in body
    iterable.close()  # the server calls close() after writing the answer: the drain happens now
    assert stream.read_bytes == 100


def test_chunked_body_over_3_mib_is_413_with_connection_close():
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    stream = io.BytesIO(b"{" + b" " * (3 * 1024 * 1024 + 10) + b"}")
    resp = client.post("/mutate", input_stream=stream, content_type=JSON,
                       environ_overrides={"wsgi.input_terminated": True})
    assert resp.status_code == 413
    assert resp.headers["Connection"] == "close"


def test_body_that_stops_arriving_is_408_with_connection_close():
    class Stalled:
        def read(self, size=-1):
            raise TimeoutError("The read operation timed out")  # what a socket timeout raises

    calls: list = []
    app = create_app(StaticTopologyCatalog(), AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()),
                     review_fn=stub(Decision(kind="PyTorchJob"), calls))
    started, iterable = call_wsgi(app, {"CONTENT_LENGTH": "1000", "wsgi.input": Stalled()})
    assert started["status"].startswith("408")
    assert started["headers"]["Connection"] == "close"
    assert json.loads(b"".join(iterable))["field"] == "body"
    iterable.close()
    assert calls == []


def test_client_gone_mid_body_is_400_and_not_counted_as_a_review():
    import io

    calls: list = []
    metrics = ReviewMetrics(CollectorRegistry())
    app = create_app(StaticTopologyCatalog(), AdmissionSettings(), metrics=metrics,
                     review_fn=stub(Decision(kind="PyTorchJob"), calls))
    started, iterable = call_wsgi(app, {"CONTENT_LENGTH": "1000", "wsgi.input": io.BytesIO(b'{"apiVersion": "adm')})
    assert started["status"].startswith("400")
    assert started["headers"]["Connection"] == "close"
    assert json.loads(b"".join(iterable)) == {"error": "the request body ended after 19 of 1000 bytes", "field": "body"}
    iterable.close()
    assert calls == []
    assert "segment_webhook_reviews_total{" not in generate_latest(metrics.registry).decode()


def test_review_latency_excludes_the_time_the_body_takes_to_arrive(monkeypatch):
    """duration (histogram and duration_ms) runs from body read to answer built: a client that
    takes 100 s (of a fake clock) to send its body is not 100 s of webhook latency."""
    from webhook.http import app as app_module

    now = [1000.0]
    monkeypatch.setattr(app_module, "_clock", lambda: now[0])

    def slow_network(n):
        now[0] += 100.0

    observed = []

    class Recorder(ReviewMetrics):
        def observe(self, outcome, seconds):
            observed.append(seconds)

    def review_fn(request, catalog, settings, *, mutate=True):
        now[0] += 0.25  # the review itself
        return Decision(kind="PyTorchJob")

    app = create_app(StaticTopologyCatalog(), AdmissionSettings(), metrics=Recorder(CollectorRegistry()),
                     review_fn=review_fn)
    body = json.dumps(review_doc()).encode()
    started, iterable = call_wsgi(app, {"CONTENT_LENGTH": str(len(body)),
                                        "wsgi.input": RecordingStream(body, on_read=slow_network)})
    assert started["status"].startswith("200")
    iterable.close()
    assert observed == [0.25]


def test_app_creation_imports_the_review_code(monkeypatch):
    """A broken install (review code that does not import) fails when the app is created, i.e.
    when a worker starts, not on the first review."""
    import sys

    monkeypatch.setitem(sys.modules, "webhook.admission.review", None)  # "import webhook.admission.review" fails
    with pytest.raises(ImportError):
        create_app(StaticTopologyCatalog(), AdmissionSettings(), metrics=ReviewMetrics(CollectorRegistry()))


def test_body_of_exactly_3_mib_is_read():
    assert MAX_BODY_BYTES == 3145728
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    doc = json.dumps(review_doc())
    body = doc + " " * (MAX_BODY_BYTES - len(doc))
    assert len(body) == MAX_BODY_BYTES
    resp = post(client, "/mutate", body)
    assert resp.status_code == 200
    assert resp.get_json()["response"]["uid"] == "uid-1"


@pytest.mark.parametrize(
    "body, field",
    [
        (b"not json", "body"),
        (b"\xff\xfe", "body"),
        (b"NaN", "body"),
        (b"[1, 2]", "body"),
        (b"[" * 100000 + b"]" * 100000, "body"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "request"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "request": {"uid": 7}}).encode(), "request.uid"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "request": {"uid": ""}}).encode(), "request.uid"),
    ],
)
def test_body_without_usable_uid_is_plain_400(body, field):
    client, metrics = make_app(stub(Decision(kind="PyTorchJob")))
    resp = post(client, "/mutate", body)
    assert resp.status_code == 400
    assert resp.get_json()["field"] == field
    assert metrics.reviews.labels(kind="other", operation="unknown", decision="malformed")._value.get() == 1


@pytest.mark.parametrize(
    "mutation, field",
    [
        ({"apiVersion": "admission.k8s.io/v1beta1"}, "apiVersion"),
        ({"kind": "TokenReview"}, "kind"),
        ({"request.kind": "PyTorchJob"}, "request.kind"),
        ({"request.kind": {"group": "kubeflow.org", "kind": "PyTorchJob"}}, "request.kind.version"),
        ({"request.operation": "PATCH"}, "request.operation"),
        ({"request.object": None}, "request.object"),
        ({"request.object": []}, "request.object"),
        ({"request.operation": "UPDATE"}, "request.oldObject"),
        ({"request.userInfo": {"username": "bob", "groups": "admins"}}, "request.userInfo.groups"),
        ({"request.userInfo": "bob"}, "request.userInfo"),
        ({"request.namespace": 5}, "request.namespace"),
    ],
)
def test_malformed_review_with_uid_is_denied_with_400_naming_the_field(mutation, field):
    doc = review_doc(uid="u-malformed")
    for key, value in mutation.items():
        if key.startswith("request."):
            doc["request"][key.split(".", 1)[1]] = value
        else:
            doc[key] = value
    calls: list = []
    client, _ = make_app(stub(Decision(kind="PyTorchJob"), calls))
    resp = post(client, "/mutate", doc)
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "u-malformed"
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 400
    assert f"malformed AdmissionReview: {field} " in body["response"]["status"]["message"]
    assert calls == []


# ------------------------------------------------------------------ response encoding

def test_patch_is_base64_jsonpatch_only_when_non_empty():
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    client, _ = make_app(stub(Decision(kind="Pod", patch=ops, warnings=["w1"])))
    resp = post(client, "/mutate", review_doc(kind=("", "v1", "Pod")))
    r = resp.get_json()["response"]
    assert r["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(r["patch"])) == ops
    assert r["warnings"] == ["w1"]
    assert "status" not in r

    client, _ = make_app(stub(Decision(kind="Pod")))
    r = post(client, "/mutate", review_doc(kind=("", "v1", "Pod"))).get_json()["response"]
    assert r == {"uid": "uid-1", "allowed": True}


def test_validate_runs_core_without_mutation_and_never_patches():
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    calls: list = []
    client, _ = make_app(stub(Decision(kind="Pod", patch=ops), calls))
    r = post(client, "/validate", review_doc()).get_json()["response"]
    assert r == {"uid": "uid-1", "allowed": True}
    assert calls[0][1] is False


def test_denial_carries_code_message_and_no_patch():
    d = Decision(kind="PyTorchJob", patch=[{"op": "add", "path": "/x", "value": 1}])
    d.deny("segment-size-not-integer", "spec.x", "bad value")
    d.deny("other-rule", "spec.y", "second")
    client, metrics = make_app(stub(d))
    r = post(client, "/mutate", review_doc()).get_json()["response"]
    assert r == {"uid": "uid-1", "allowed": False,
                 "status": {"code": 403, "reason": "Forbidden", "message": "2 problems: (1) bad value (2) second"}}
    assert metrics.denials.labels(rule="segment-size-not-integer")._value.get() == 1
    assert metrics.denials.labels(rule="other-rule")._value.get() == 1
    assert metrics.reviews.labels(kind="PyTorchJob", operation="CREATE", decision="denied")._value.get() == 1


def test_internal_error_is_a_visible_500_denial_not_an_http_5xx(caplog):
    def broken(request, catalog, settings, *, mutate=True):
        raise KeyError("boom")

    client, metrics = make_app(broken)
    with caplog.at_level(logging.ERROR, logger="segment_webhook.envelope"):
        resp = post(client, "/mutate", review_doc(uid="u-err"))
    assert resp.status_code == 200
    r = resp.get_json()["response"]
    assert r["uid"] == "u-err"
    assert r["allowed"] is False
    assert r["status"]["code"] == 500
    assert "u-err" in r["status"]["message"]
    assert any("KeyError" in (rec.exc_text or "") for rec in caplog.records)
    assert metrics.denials.labels(rule="internal-error")._value.get() == 1


def test_one_json_log_line_per_review(caplog):
    d = Decision(kind="PyTorchJob")
    d.deny("segment-size-too-small", "spec.x", "too small")
    client, _ = make_app(stub(d))
    with caplog.at_level(logging.INFO, logger="segment_webhook.review"):
        post(client, "/mutate", review_doc(uid="u-log"))
    lines = [r.review for r in caplog.records if r.name == "segment_webhook.review" and r.getMessage() == "admission review"]
    assert len(lines) == 1
    rec = lines[0]
    assert {k: rec[k] for k in ("uid", "kind", "namespace", "name", "user", "operation", "decision", "rule")} == {
        "uid": "u-log", "kind": "PyTorchJob", "namespace": "team-a", "name": "job-1", "user": "alice",
        "operation": "CREATE", "decision": "denied", "rule": "segment-size-too-small"}
    assert isinstance(rec["duration_ms"], float) and rec["duration_ms"] >= 0


# ------------------------------------------------------------------ health, readiness, metrics

class _Unsynced(StaticTopologyCatalog):
    @property
    def synced(self):
        return False


def test_readyz_says_the_catalog_answers_from_its_last_list_during_an_outage():
    """Issue 35: kube-apiserver stopped under the installed webhook: the pods stay ready (the
    catalog keeps what it listed, DESIGN.md §10) and /readyz says what it knows: the outage and
    the Topologies it answers from; once the server answers, the note is gone."""
    from webhook.cluster.api_server import ApiServerReachability

    class Live(StaticTopologyCatalog):
        reachability = ApiServerReachability("https://10.244.0.1:6443")

    topology = default_catalog().get("cluster-topology")
    assert topology is not None
    catalog = Live([topology])
    client, _ = make_app(stub(Decision(kind="x")), catalog=catalog)
    assert client.get("/readyz").get_json() == {"ready": True, "topologiesSynced": True, "certificateLoaded": True}
    catalog.reachability.failed("watch topologies", ConnectionRefusedError(111, "Connection refused"))
    resp = client.get("/readyz")
    assert resp.status_code == 200
    assert resp.get_json() == {
        "ready": True, "topologiesSynced": True, "certificateLoaded": True,
        "stale": "API server https://10.244.0.1:6443 unreachable: connection refused; answering from the 1 "
                 "Topologies last listed (cluster-topology)"}
    catalog.reachability.answered("watch topologies")
    assert "stale" not in client.get("/readyz").get_json()


def test_healthz_and_readyz():
    client, _ = make_app(stub(Decision(kind="x")))
    assert client.get("/healthz").status_code == 200
    resp = client.get("/readyz")
    assert resp.status_code == 200
    assert resp.get_json() == {"ready": True, "topologiesSynced": True, "certificateLoaded": True}
    assert resp.headers["Segment-Webhook-Worker"] == str(os.getpid())  # the process that answered

    client, _ = make_app(stub(Decision(kind="x")), catalog=_Unsynced())
    resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json()["topologiesSynced"] is False

    client, _ = make_app(stub(Decision(kind="x")), tls_ready=lambda: False)
    resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json()["certificateLoaded"] is False


def test_metrics_exposition_counts_reviews():
    client, _ = make_app(stub(Decision(kind="Pod")))
    post(client, "/mutate", review_doc(kind=("", "v1", "Pod")))
    post(client, "/mutate", review_doc(kind=("", "v1", "Pod")))
    post(client, "/mutate", review_doc(kind=("example.com", "v1", "Widget")))
    text = client.get("/metrics").get_data(as_text=True)
    assert 'segment_webhook_reviews_total{decision="allowed",kind="Pod",operation="CREATE"} 2.0' in text
    assert 'segment_webhook_reviews_total{decision="allowed",kind="other",operation="CREATE"} 1.0' in text
    assert "segment_webhook_review_duration_seconds_count 3.0" in text


def test_unknown_path_and_method_are_json_4xx():
    client, _ = make_app(stub(Decision(kind="x")))
    assert client.get("/nope").status_code == 404
    resp = client.get("/mutate")
    assert resp.status_code == 405
    assert resp.get_json()["code"] == 405
    assert resp.headers["Allow"] == "OPTIONS, POST"  # RFC 9110 §15.5.6: a 405 names the methods
    assert client.get("/nope").headers.get("Allow") is None


def test_admission_paths_are_answered_before_flask_dispatch_and_the_rest_by_flask():
    """POST /mutate and /validate skip Flask's dispatch (``WebhookFlask.wsgi_app``,
    webhook.http.app): a ``before_request`` hook runs for /healthz, a GET of /mutate and a POST of
    /mutate/ (Flask's 200, 405 and 404), never for the two admission paths."""
    metrics = ReviewMetrics(CollectorRegistry())
    app = create_app(StaticTopologyCatalog(), AdmissionSettings(), metrics=metrics,
                     review_fn=stub(Decision(kind="PyTorchJob")))
    seen = []
    app.before_request(lambda: seen.append(request_path()))
    client = app.test_client()
    assert post(client, "/mutate", review_doc()).get_json()["response"]["allowed"] is True
    assert post(client, "/validate", review_doc()).get_json()["response"]["allowed"] is True
    assert seen == []
    assert client.get("/healthz").status_code == 200
    assert client.get("/mutate").status_code == 405
    assert post(client, "/mutate/", review_doc()).status_code == 404
    assert seen == ["/healthz", "/mutate", "/mutate/"]


def request_path():
    from flask import request
    return request.path


def test_an_exception_out_of_the_admission_path_is_flasks_json_500(monkeypatch, caplog):
    """What Flask answered for an exception a view lets out, the admission path answers too:
    500 with the app's HTTP error body (werkzeug ``InternalServerError``), and the traceback logged."""
    import webhook.http.app as app_module

    def broken(body):
        raise RuntimeError("planted")

    monkeypatch.setattr(app_module, "needs_bounds", broken)
    client, _ = make_app(stub(Decision(kind="PyTorchJob")))
    with caplog.at_level(logging.ERROR, logger="segment_webhook.http"):
        resp = post(client, "/mutate", review_doc())
    assert resp.status_code == 500
    from werkzeug.exceptions import InternalServerError  # the text of the werkzeug version installed

    assert resp.get_json() == {"code": 500, "error": InternalServerError.description}
    assert any("admission request failed" in r.getMessage() and r.exc_info for r in caplog.records)


# ------------------------------------------------------------------ real domain core (DESIGN.md)

SEED_TP4 = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "pytorch-tp4", "namespace": "default"},
    "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}},
        "Worker": {"replicas": 16, "template": {
            "metadata": {"annotations": {TOPO: "cluster-topology", SEG: "4", SEG_REQ: RACK}},
            "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}},
    }},
}


def _core_app():
    return make_app(None, catalog=default_catalog(), settings=AdmissionSettings(default_topology="cluster-topology"))


def _patched(obj, response):
    return jsonpatch.apply_patch(obj, envelope.decode_patch({"response": response}))


def test_core_seed_pytorchjob_is_allowed():
    client, _ = _core_app()
    r = post(client, "/mutate", review_doc(uid="seed", obj=SEED_TP4)).get_json()["response"]
    assert r["uid"] == "seed"
    assert r["allowed"] is True
    out = _patched(SEED_TP4, r)
    worker = out["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert worker[TOPO] == "cluster-topology"
    assert worker[SEG] == "4"
    assert worker[SEG_REQ] == RACK


def test_core_segment_size_4x_is_denied_403_naming_the_field():
    client, metrics = _core_app()
    job = json.loads(json.dumps(SEED_TP4))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SEG] = "4x"
    resp = post(client, "/mutate", review_doc(uid="bad", obj=job))
    assert resp.status_code == 200
    r = resp.get_json()["response"]
    assert r["allowed"] is False
    assert r["status"]["code"] == 403
    assert SEG in r["status"]["message"]
    assert "4x" in r["status"]["message"]
    assert "patch" not in r


def test_core_pod_worker_index_5_segment_size_4_gets_segment_1():
    client, _ = _core_app()
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "pytorch-tp4-worker-5", "namespace": "default",
                        "labels": {"training.kubeflow.org/replica-type": "worker",
                                   "training.kubeflow.org/replica-index": "5"},
                        "annotations": {SEG: "4", TOPO: "cluster-topology"}},
           "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}
    r = post(client, "/mutate", review_doc(uid="pod", obj=pod, kind=("", "v1", "Pod"))).get_json()["response"]
    assert r["allowed"] is True
    labels = _patched(pod, r)["metadata"]["labels"]
    assert labels["kai.scheduler/segment-index"] == "1"
    assert labels["kai.scheduler/subgroup-name"] == "worker-1"


def test_body_with_a_number_of_more_than_4300_digits_is_a_400_without_python_internals():
    client, _ = make_app()
    body = '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "x": ' + "9" * 5000 + "}}"
    resp = client.post("/mutate", data=body, content_type="application/json")
    assert resp.status_code == 400
    assert resp.get_json() == {"error": "request body holds a number of more than 4300 digits; no Kubernetes field "
                                        "takes one", "field": "body"}


def test_a_lone_surrogate_the_answer_echoes_is_answered_not_500():
    # JSON allows "\ud800" (a lone UTF-16 surrogate); orjson refuses to encode it, so the answer
    # that echoes the uid is encoded as JSON escapes instead (new-user trial: HTTP 500)
    client, _ = make_app()  # the real review
    body = json.dumps(review_doc(uid="\ud800")).encode()
    assert b"\\ud800" in body
    resp = client.post("/mutate", data=body, content_type=JSON)
    assert resp.status_code == 200
    assert json.loads(resp.data)["response"]["uid"] == "\ud800"
    assert json.loads(resp.data)["response"]["allowed"] is True


def test_the_app_keeps_no_sessions_and_serves_only_plain_views():
    """``WebhookFlask``: one shared, read-only null session (writing raises, as Flask's own null
    session does), and a coroutine view is refused when the app is built, not served unrun."""
    from flask.sessions import NullSession

    from webhook.http.app import WebhookFlask

    client, _ = make_app()
    app = client.application
    assert isinstance(app, WebhookFlask)
    with app.test_request_context("/healthz"):
        from flask import session

        assert isinstance(session, NullSession)  # the proxy answers for the session it stands for
        with pytest.raises(RuntimeError):
            session["user"] = "x"
    assert client.get("/healthz").status_code == 200


def test_a_coroutine_view_is_refused_when_the_app_is_built(monkeypatch):
    import flask

    real_post = flask.Flask.post

    def post_as_coroutine(self, rule, **options):
        register = real_post(self, rule, **options)

        def decorator(view):
            async def coroutine_view():
                return view()
            coroutine_view.__name__ = view.__name__
            return register(coroutine_view)
        return decorator

    monkeypatch.setattr(flask.Flask, "post", post_as_coroutine)
    with pytest.raises(TypeError, match=r"views \['mutate', 'validate'\] are coroutines"):
        make_app()
