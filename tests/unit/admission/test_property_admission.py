"""Property tests: random and malformed AdmissionReviews and annotation values at /mutate.

Properties (brief item 8, DESIGN.md §5): every answer is well-formed JSON; HTTP 200 or 4xx, never
5xx; an AdmissionReview answer carries the request's uid whenever the request had one; a denial
has status.code 400 or 403 and a message; a patch is only sent when allowed and applies cleanly to
the object (kube-apiserver would reject the review otherwise); warnings are at most 120
characters. Most examples go through the Flask test client; a few go over real HTTPS.
"""

from __future__ import annotations

import base64
import json
import os

import jsonpatch
import pytest
import requests
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.serving import running_serve
from webhook.admission.config import AdmissionSettings
from webhook.http.app import create_app
from webhook.http.metrics import ReviewMetrics
from webhook.topology.objects import default_catalog

KEYS = [
    "kai.scheduler/topology",
    "kai.scheduler/topology-required-placement",
    "kai.scheduler/topology-preferred-placement",
    "kai.scheduler/segment-size",
    "kai.scheduler/segment-topology-required-placement",
    "kai.scheduler/segment-topology-preferred-placement",
    "kai.scheduler/segment-leader-policy",
]
LEVELS = ["topology.kubernetes.io/zone", "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack",
          "kubernetes.io/hostname", "not a label", "example.com/unknown"]

json_scalars = st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)

GOOD_VALUES = {
    "kai.scheduler/topology": ["cluster-topology"],
    "kai.scheduler/segment-size": ["2", "4", "8"],
    "kai.scheduler/segment-leader-policy": ["LeaderWorker", "LeaderExcluded"],
}
annotation_value = st.one_of(
    st.sampled_from(["4", "2", "1", "0", "-1", "4x", "1e3", " 4", "", "16", "17", "99999999999", "cluster-topology",
                     "nope", "LeaderWorker", "LeaderExcluded"] + LEVELS),
    st.text(max_size=10),
    st.text(alphabet="0123456789", min_size=19, max_size=6000),  # beyond int64 and Python's 4,300-digit limit
    st.integers(-5, 40),   # not a string: malformed annotation map
    st.none(),
)


@st.composite
def good_annotations(draw):
    """Mostly legal values (the path that builds patches), sometimes one odd value."""
    ann = {}
    for key in draw(st.sets(st.sampled_from(KEYS), max_size=4)):
        ann[key] = draw(st.sampled_from(GOOD_VALUES.get(key, LEVELS[:4])))
    if draw(st.integers(0, 4)) == 0:
        ann[draw(st.sampled_from(KEYS))] = draw(annotation_value)
    return ann


annotation_maps = st.one_of(good_annotations(), good_annotations(), good_annotations(),
                            st.dictionaries(st.sampled_from(KEYS), annotation_value, max_size=5), json_values)
replicas = st.one_of(st.integers(1, 33), st.integers(1, 33), st.integers(-2, 40), st.none(), st.sampled_from(["4", "x"]))


def template(ann):
    return {"metadata": {"annotations": ann}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


@st.composite
def pytorchjobs(draw, annotations=annotation_maps, replicas=replicas):
    specs = {"Worker": {"replicas": draw(replicas), "template": template(draw(annotations))}}
    if draw(st.booleans()):
        specs["Master"] = {"replicas": 1, "template": template(draw(annotations))}
    spec = {"pytorchReplicaSpecs": specs}
    if draw(st.booleans()):
        spec["runPolicy"] = {"suspend": draw(st.booleans())}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "j", "annotations": draw(annotations)}, "spec": spec}


@st.composite
def lws(draw, annotations=annotation_maps, replicas=replicas):
    lwt = {"size": draw(replicas), "workerTemplate": template(draw(annotations))}
    if draw(st.booleans()):
        lwt["leaderTemplate"] = template(draw(annotations))
    if draw(st.booleans()):
        lwt["subGroupPolicy"] = {"subGroupSize": draw(replicas),
                                 "subGroupPolicyType": draw(st.sampled_from(["LeaderWorker", "LeaderExcluded", "x"]))}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "l", "annotations": draw(annotations)}, "spec": {"leaderWorkerTemplate": lwt}}


@st.composite
def native(draw, annotations=annotation_maps, replicas=replicas, frameworks=("PyTorch", "MPI", "JAX", 3)):
    spec = {"framework": draw(st.sampled_from(frameworks)), "workers": draw(replicas),
            "worker": {"template": template(draw(annotations))}}
    if draw(st.booleans()):
        spec["workersPerSegment"] = draw(replicas)
    return {"apiVersion": "segments.dev/v1alpha1", "kind": "DistributedWorkload",
            "metadata": {"name": "d", "annotations": draw(annotations)}, "spec": spec}


@st.composite
def mpijobs(draw, annotations=annotation_maps, replicas=replicas):
    specs = {"Worker": {"replicas": draw(replicas), "template": template(draw(annotations))}}
    if draw(st.booleans()):
        specs["Launcher"] = {"replicas": 1, "template": template(draw(annotations))}
    spec = {"mpiReplicaSpecs": specs}
    if draw(st.booleans()):
        spec["runLauncherAsWorker"] = draw(st.sampled_from([True, False, "yes"]))
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "m", "annotations": draw(annotations)}, "spec": spec}


@st.composite
def jobsets(draw, annotations=annotation_maps, replicas=replicas):
    rjobs = [{"name": draw(st.sampled_from(["workers", "driver", 3])), "replicas": draw(replicas),
              "template": {"metadata": {"annotations": draw(annotations)},
                           "spec": {"parallelism": draw(replicas), "template": template(draw(annotations))}}}
             for _ in range(draw(st.integers(1, 2)))]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "annotations": draw(annotations)}, "spec": {"replicatedJobs": rjobs}}


@st.composite
def rayclusters(draw, annotations=annotation_maps, replicas=replicas):
    groups = [{"groupName": draw(st.sampled_from(["gpu", "cpu", 3])), "replicas": draw(replicas),
               "numOfHosts": draw(st.one_of(st.sampled_from([1, 2, 4]), replicas)), "template": template(draw(annotations))}
              for _ in range(draw(st.integers(0, 2)))]
    cluster = {"headGroupSpec": {"template": template(draw(annotations))}, "workerGroupSpecs": groups}
    kind = draw(st.sampled_from(["RayCluster", "RayJob", "RayService"]))
    spec = {"RayCluster": cluster, "RayJob": {"rayClusterSpec": cluster}, "RayService": {"rayClusterConfig": cluster}}[kind]
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "r", "annotations": draw(annotations)},
            "spec": spec}


@st.composite
def trainjobs(draw, annotations=annotation_maps, replicas=replicas):
    spec = {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": draw(replicas)}}
    if draw(st.booleans()):
        spec["runtimePatches"] = draw(st.sampled_from([[], [{"manager": "other"}], "x"]))
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "annotations": draw(annotations)}, "spec": spec}


@st.composite
def pods(draw):
    labels = draw(st.dictionaries(
        st.sampled_from(["training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index", "training.kubeflow.org/job-role",
                         "leaderworkerset.sigs.k8s.io/worker-index", "jobset.sigs.k8s.io/jobset-name",
                         "jobset.sigs.k8s.io/job-index", "batch.kubernetes.io/job-completion-index",
                         "ray.io/group", "ray.io/worker-group-replica-index", "ray.io/replica-host-index"]),
        st.one_of(st.sampled_from(["worker", "master", "0", "5", "-1", "x"]), st.text(max_size=4),
                  st.text(alphabet="0123456789", min_size=19, max_size=6000)), max_size=3))
    ann = draw(st.dictionaries(
        st.sampled_from(KEYS + ["leaderworkerset.sigs.k8s.io/size", "leaderworkerset.sigs.k8s.io/subgroup-size",
                                "leaderworkerset.sigs.k8s.io/subgroup-policy-type", "segments.dev/job-parallelism",
                                "segments.dev/num-of-hosts"]),
        st.one_of(annotation_value, st.sampled_from(["5", "9", "2"])), max_size=4))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels, "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


objects = st.one_of(pytorchjobs(), lws(), native(), mpijobs(), jobsets(), rayclusters(), trainjobs(), pods(), json_values)


def gvk_of(obj):
    if isinstance(obj, dict) and isinstance(obj.get("apiVersion"), str):
        group, _, version = obj["apiVersion"].rpartition("/")
        return {"group": group, "version": version, "kind": obj.get("kind")}
    return {"group": "", "version": "v1", "kind": "Pod"}


workloads = st.one_of(pytorchjobs(), lws(), native(), mpijobs(), jobsets(), rayclusters(), trainjobs(), pods())
clean_replicas = st.integers(1, 33)
@st.composite
def seedlike(draw):
    """Legal variants of the seed manifests (DESIGN.md §3): mostly allowed, usually patched."""
    size = draw(st.sampled_from(["2", "4"]))
    seg = {"kai.scheduler/segment-size": size}
    if draw(st.booleans()):
        seg["kai.scheduler/segment-topology-required-placement"] = "cloud.provider.com/topology-rack"
    if draw(st.booleans()):
        seg["kai.scheduler/segment-topology-preferred-placement"] = "kubernetes.io/hostname"
    root = {}
    if draw(st.booleans()):
        root["kai.scheduler/topology"] = "cluster-topology"
    else:
        seg["kai.scheduler/topology"] = "cluster-topology"
    if draw(st.booleans()):
        root["kai.scheduler/topology-required-placement"] = "topology.kubernetes.io/zone"
    kind = draw(st.sampled_from(["PyTorchJob", "LeaderWorkerSet", "DistributedWorkload"]))
    n = draw(st.integers(4, 32))
    if kind == "PyTorchJob":
        spec: dict = {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template({})},
                                              "Worker": {"replicas": n, "template": template(seg)}}}
        api = "kubeflow.org/v1"
    elif kind == "LeaderWorkerSet":
        policy = draw(st.sampled_from(["LeaderWorker", "LeaderExcluded"]))
        spec = {"leaderWorkerTemplate": {"size": n + 1 if policy == "LeaderExcluded" else n,
                                         "subGroupPolicy": {"subGroupSize": int(size), "subGroupPolicyType": policy},
                                         "leaderTemplate": template({}), "workerTemplate": template(seg)}}
        api = "leaderworkerset.x-k8s.io/v1"
    else:
        seg.pop("kai.scheduler/segment-size")
        spec = {"framework": "PyTorch", "workers": n, "workersPerSegment": int(size), "worker": {"template": template(seg)}}
        api = "segments.dev/v1alpha1"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "s", "annotations": root}, "spec": spec}


@st.composite
def clean_pods(draw):
    """Pods as the training operator / LWS controller label them (DESIGN.md §7)."""
    size = draw(st.sampled_from(["2", "4"]))
    if draw(st.booleans()):
        labels = {"training.kubeflow.org/replica-type": draw(st.sampled_from(["worker", "master"])),
                  "training.kubeflow.org/replica-index": str(draw(st.integers(0, 20)))}
        ann = {"kai.scheduler/segment-size": size}
    else:
        r = draw(st.integers(2, 12))
        labels = {"leaderworkerset.sigs.k8s.io/worker-index": str(draw(st.integers(0, r - 1)))}
        ann = {"leaderworkerset.sigs.k8s.io/size": str(r), "kai.scheduler/segment-size": size,
               "kai.scheduler/segment-leader-policy": draw(st.sampled_from(["LeaderWorker", "LeaderExcluded"]))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels, "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


#: Structurally valid workloads with legal-looking keys: the path that builds patches.
clean_workloads = st.one_of(
    seedlike(),
    pytorchjobs(annotations=good_annotations(), replicas=clean_replicas),
    lws(annotations=good_annotations(), replicas=clean_replicas),
    native(annotations=good_annotations(), replicas=clean_replicas, frameworks=("PyTorch",)),
    mpijobs(annotations=good_annotations(), replicas=clean_replicas),
    jobsets(annotations=good_annotations(), replicas=clean_replicas),
    rayclusters(annotations=good_annotations(), replicas=clean_replicas),
    trainjobs(annotations=good_annotations(), replicas=clean_replicas),
    clean_pods(),
)


@st.composite
def valid_reviews(draw):
    """Well-formed envelopes around (mostly) structured objects: CREATE, or UPDATE with oldObject."""
    obj = draw(st.one_of(clean_workloads, clean_workloads, workloads))
    return _review_of(draw, obj, st.one_of(st.just(obj), clean_workloads, workloads))


def _review_of(draw, obj: dict, stored) -> dict:
    """An AdmissionReview of ``obj``: CREATE twice as often as UPDATE, whose ``oldObject`` is drawn
    from the strategy ``stored``."""
    operation = draw(st.sampled_from(["CREATE", "CREATE", "UPDATE"]))
    request = {"uid": str(draw(st.uuids())), "kind": gvk_of(obj), "operation": operation, "object": obj,
               "namespace": "team-a",
               "userInfo": {"username": draw(st.sampled_from(["kubectl-user", "platform"])),
                            "groups": ["system:authenticated"]}}
    if operation == "UPDATE":
        request["oldObject"] = draw(stored)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@st.composite
def reviews(draw):
    obj = draw(objects)
    request = {
        "uid": draw(st.one_of(st.uuids().map(str), st.text(min_size=1, max_size=8))),
        "kind": draw(st.one_of(st.just(gvk_of(obj)), json_values)),
        "operation": draw(st.sampled_from(["CREATE", "CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH", None])),
        "object": obj,
        "userInfo": draw(st.one_of(
            st.just({"username": "kubectl-user", "groups": ["system:authenticated"]}),
            st.just({"username": "platform", "groups": ["system:authenticated"]}),
            json_values)),
    }
    if draw(st.booleans()):
        request["oldObject"] = draw(st.one_of(st.just(obj), objects))
    for key in draw(st.sets(st.sampled_from(list(request)), max_size=2)):
        if draw(st.booleans()):
            del request[key]
        else:
            request[key] = draw(json_values)
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    if draw(st.integers(0, 9)) == 0:
        doc["apiVersion"] = draw(st.sampled_from(["admission.k8s.io/v1beta1", None, 1]))
    return doc


bodies = st.one_of(
    valid_reviews().map(lambda d: json.dumps(d).encode()),
    valid_reviews().map(lambda d: json.dumps(d).encode()),
    reviews().map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    reviews().map(lambda d: json.dumps(d).encode()[: len(json.dumps(d)) // 2]),  # truncated JSON
)


def expected_uid(body: bytes):
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("request"), dict):
        uid = doc["request"].get("uid")
        if isinstance(uid, str) and uid:
            return uid
    return None


def check_answer(body: bytes, status: int, payload: bytes, mutate: bool = True) -> None:
    assert status < 500, (status, payload[:300])
    assert status in (200, 400), (status, payload[:300])
    answer = json.loads(payload)
    uid = expected_uid(body)
    if status == 400:
        assert uid is None
        assert isinstance(answer["error"], str) and answer["error"]
        assert isinstance(answer["field"], str)
        return
    assert uid is not None
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and len(warning) <= 120
    if response["allowed"]:
        assert "status" not in response
        if "patch" in response:
            assert mutate
            assert response["patchType"] == "JSONPatch"
            ops = json.loads(base64.b64decode(response["patch"]))
            assert ops, "an empty patch must not be sent"
            obj = json.loads(body)["request"]["object"]
            jsonpatch.apply_patch(obj, ops)  # raises if kube-apiserver could not apply it either
        else:
            assert "patchType" not in response
    else:
        assert "patch" not in response
        assert response["status"]["code"] in (400, 403), response["status"]
        assert isinstance(response["status"]["message"], str) and response["status"]["message"]


@pytest.fixture(scope="module")
def client():
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    app = create_app(default_catalog(), AdmissionSettings(platform_users=frozenset({"platform"}),
                                                          default_topology="cluster-topology"),
                     metrics=ReviewMetrics(CollectorRegistry()))
    return app.test_client()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(body=bodies, path=st.sampled_from(["/mutate", "/mutate", "/validate"]))
def test_any_body_gets_a_well_formed_answer(client, body, path):
    resp = client.post(path, data=body, content_type="application/json")
    check_answer(body, resp.status_code, resp.get_data(), mutate=path == "/mutate")


# ------------------------------------------------------------------ a few over real HTTPS

@pytest.fixture(scope="module")
def https_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("prop")
    with running_serve(base, "--workers", "1", "--platform-user", "platform") as srv, \
            requests.Session() as session:
        yield srv["url"], srv["ca"], session


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(body=bodies)
def test_any_body_over_https_gets_a_well_formed_answer(https_server, body):
    url, ca, session = https_server
    resp = session.post(url + "/mutate", data=body, headers={"Content-Type": "application/json"}, verify=ca,
                        timeout=30)
    check_answer(body, resp.status_code, resp.content)


ZONE_, BLOCK_, RACK_, HOST_ = LEVELS[:4]


@st.composite
def admissible_workloads(draw):
    """Objects of every kind that the webhook admits AND patches (so the idempotence property is
    checked on them, not skipped): a known topology, a segment size S of 2 or 4 that every kind's
    size rules accept (DESIGN.md §3, §3b, §5: at most the pods segmented; LWS sizes ``R % S == 0`` or
    ``(R - 1) % S == 0``, ``(R - 1) % S == 0`` under LeaderExcluded; Ray ``S % numOfHosts == 0``),
    and levels in the topology's order (workload levels broader than segment levels)."""
    size = draw(st.sampled_from([2, 4]))
    seg = {"kai.scheduler/segment-size": str(size)}
    root = {"kai.scheduler/topology": "cluster-topology"}  # the webhook writes it onto the templates: a patch
    for keys, key, level in ((root, "kai.scheduler/topology-required-placement", ZONE_),
                             (root, "kai.scheduler/topology-preferred-placement", BLOCK_),
                             (seg, "kai.scheduler/segment-topology-required-placement", RACK_),
                             (seg, "kai.scheduler/segment-topology-preferred-placement", HOST_)):
        if draw(st.booleans()):
            keys[key] = level
    n = draw(st.integers(size, 33))
    kind = draw(st.sampled_from(["PyTorchJob", "LeaderWorkerSet", "DistributedWorkload", "MPIJob", "JobSet",
                                 "RayCluster", "TrainJob", "Pod"]))
    if kind == "PyTorchJob":
        specs = {"Worker": {"replicas": n, "template": template(seg)}}
        if draw(st.booleans()):
            specs["Master"] = {"replicas": 1, "template": template({})}
        return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "j", "annotations": root},
                "spec": {"pytorchReplicaSpecs": specs}}
    if kind == "LeaderWorkerSet":
        policy = draw(st.sampled_from(["LeaderWorker", "LeaderExcluded"]))
        groups = draw(st.integers(1, 8))
        extra = 1 if policy == "LeaderExcluded" else draw(st.sampled_from([0, 1]))
        lwt = {"size": groups * size + extra, "workerTemplate": template(seg)}
        if policy == "LeaderExcluded" or draw(st.booleans()):
            lwt["subGroupPolicy"] = {"subGroupSize": size, "subGroupPolicyType": policy}
        if draw(st.booleans()):
            lwt["leaderTemplate"] = template({})
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": kind,
                "metadata": {"name": "l", "annotations": root}, "spec": {"leaderWorkerTemplate": lwt}}
    if kind == "DistributedWorkload":
        seg.pop("kai.scheduler/segment-size")
        return {"apiVersion": "segments.dev/v1alpha1", "kind": kind, "metadata": {"name": "d", "annotations": root},
                "spec": {"framework": "PyTorch", "workers": n, "workersPerSegment": size, "worker": {"template": template(seg)}}}
    if kind == "MPIJob":
        specs = {"Worker": {"replicas": n, "template": template(seg)}}
        if draw(st.booleans()):
            specs["Launcher"] = {"replicas": 1, "template": template({})}
        return {"apiVersion": "kubeflow.org/v2beta1", "kind": kind, "metadata": {"name": "m", "annotations": root},
                "spec": {"mpiReplicaSpecs": specs, "runLauncherAsWorker": draw(st.booleans())}}
    if kind == "JobSet":
        parallelism = draw(st.sampled_from([1, 2, size, 2 * size, 3]))
        rjobs = [{"name": name, "replicas": -(-size // parallelism) + draw(st.integers(0, 3)),
                  "template": {"spec": {"parallelism": parallelism, "template": template(seg)}}}
                 for name in draw(st.sampled_from([["workers"], ["workers", "driver"]]))]
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": kind, "metadata": {"name": "js", "annotations": root},
                "spec": {"replicatedJobs": rjobs}}
    if kind == "RayCluster":
        hosts = draw(st.sampled_from([h for h in (1, 2, 4) if size % h == 0]))
        group = {"groupName": "gpu", "replicas": size // hosts + draw(st.integers(0, 3)), "numOfHosts": hosts,
                 "template": template(seg)}
        return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "r", "annotations": root},
                "spec": {"headGroupSpec": {"template": template({})}, "workerGroupSpecs": [group]}}
    if kind == "TrainJob":  # its keys are read from the root only
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
                "metadata": {"name": "t", "annotations": {**root, **seg}},
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": n}}}
    pod = draw(clean_pods())  # a pod whose template the webhook patched: it names the topology
    pod["metadata"]["annotations"]["kai.scheduler/topology"] = "cluster-topology"
    return pod


@st.composite
def admissible_reviews(draw):
    """CREATE of :func:`admissible_workloads`, or UPDATE of one onto itself (the webhook reinvoked,
    or a re-apply of the same manifest)."""
    obj = draw(admissible_workloads())
    return _review_of(draw, obj, st.just(obj))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(doc=st.one_of(admissible_reviews(), admissible_reviews(), admissible_reviews(), admissible_reviews(),
                     valid_reviews()))
def test_mutation_is_idempotent(client, doc):
    """Kubernetes requires mutating webhooks to be idempotent (a reinvoked webhook sees its own
    output): reviewing the patched object again is allowed and yields no further patch. Four
    draws in five are :func:`admissible_reviews` (admitted and patched, so the property is checked);
    the event statistics (``--hypothesis-show-statistics``) give the share that reaches it."""
    r = client.post("/mutate", data=json.dumps(doc), content_type="application/json").get_json()["response"]
    if not (r["allowed"] and "patch" in r):
        event("idempotence: not reached (" + ("allowed, no patch" if r["allowed"] else "denied") + ")")
        return
    event("idempotence: reached")
    patched = jsonpatch.apply_patch(doc["request"]["object"], json.loads(base64.b64decode(r["patch"])))
    doc["request"]["object"] = patched
    if doc["request"]["operation"] == "UPDATE":
        doc["request"]["oldObject"] = patched
    again = client.post("/mutate", data=json.dumps(doc), content_type="application/json").get_json()["response"]
    assert again["allowed"] is True, again
    assert "patch" not in again, json.loads(base64.b64decode(again["patch"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), where=st.sampled_from(["worker", "root", "pod"]),
       digits=st.one_of(st.text(alphabet="0123456789", min_size=19, max_size=64),
                        st.builds(lambda n, d: d * n, st.sampled_from([4300, 4301, 6000]), st.sampled_from("0123456789"))))
def test_huge_digit_strings_anywhere_get_a_well_formed_answer(client, key, where, digits):
    """Digit strings beyond int64 and beyond Python's 4,300-digit conversion limit, in every key
    the webhook reads, on the workload root, the Worker template and a pod: never a 5xx and never
    an internal error (status.code 500) inside the AdmissionReview."""
    if where == "pod":
        obj: dict = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "p", "labels": {"training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": digits[:63]},
            "annotations": {key: digits, "leaderworkerset.sigs.k8s.io/size": digits}}}
        kind = {"group": "", "version": "v1", "kind": "Pod"}
    else:
        obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
               "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 16, "template": {
                   "metadata": {"annotations": {"kai.scheduler/topology": "cluster-topology"}}, "spec": {}}}}}}
        target = obj["metadata"] if where == "root" else obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
        target.setdefault("annotations", {})[key] = digits
        kind = {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-huge", "kind": kind, "operation": "CREATE", "object": obj,
        "userInfo": {"username": "platform"}}}).encode()
    resp = client.post("/mutate", data=body, content_type="application/json")
    check_answer(body, resp.status_code, resp.get_data())
