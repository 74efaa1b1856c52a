"""The one AdmissionReview request builder (webhook/admission/request.py)."""

from __future__ import annotations

from webhook.admission.request import build_request, build_review


def test_create_request_for_a_pytorchjob_is_what_kube_apiserver_sends():
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", "namespace": "team-a"}}
    request = build_request(obj, uid="u-1", user="alice", groups=["ml"])
    assert request == {
        "uid": "u-1",
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
        "requestKind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "requestResource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
        "namespace": "team-a",
        "name": "j",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["ml", "system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }


def test_core_group_namespace_default_and_update():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    request = build_request(pod, operation="UPDATE", old=pod)
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"]["resource"] == "pods"
    assert request["namespace"] == "default"
    assert request["oldObject"] is pod
    assert request["options"]["kind"] == "UpdateOptions"
    assert request["userInfo"] == {"username": "kubectl-user", "groups": ["system:authenticated"]}
    assert len(request["uid"]) == 36  # a random UUID


def test_delete_takes_kind_and_name_from_the_old_object_and_any_json_is_accepted():
    old = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "l"}}
    request = build_request(None, operation="DELETE", old=old)
    assert (request["kind"]["kind"], request["resource"]["resource"], request["name"]) == (
        "LeaderWorkerSet", "leaderworkersets", "l")
    assert build_request(["not", "an", "object"])["kind"] == {"group": "", "version": "", "kind": ""}


def test_kind_override_for_manifests_without_api_version_and_the_whole_review():
    review = build_review({"kind": "PyTorchJob"}, kind={"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
                          sub_resource="status")
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    assert review["request"]["kind"]["group"] == "kubeflow.org" and review["request"]["subResource"] == "status"
