"""The ONE builder of AdmissionReview v1 requests the project uses (their types:
:mod:`webhook.admission.types`).

kube-apiserver sends ``{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
"request": {...}}`` to the webhook (Kubernetes ``k8s.io/api/admission/v1`` types). The
:class:`AdmissionRequest` TypedDict names the members the webhook reads. :func:`build_request` is
what every offline caller uses to make one for an object: the ``review`` command (a dry run of
``kubectl create/replace``), the placement engine's expansion (each object of a workload passes
through the webhook), the tests and the benchmarks. The HTTP adapter only decodes requests.

Request fields where kube-apiserver's exact values do not matter to the webhook (decisions):
``uid`` a random UUID unless given; ``kind``/``requestKind`` from the object's ``apiVersion`` and
``kind`` (``v1`` alone is the core group ""); ``resource``/``requestResource`` the lower-case
plural (:func:`plural`); ``namespace`` = ``metadata.namespace`` when it is
a non-empty string, else ``default`` (a ``metadata.namespace`` of another type is denied by the
core, naming that field); ``userInfo.groups`` = the given groups plus ``system:authenticated`` (kube-apiserver adds it to
every authenticated user); ``options`` CreateOptions / UpdateOptions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.admission.kinds.registry import BY_KIND
from webhook.admission.types import (
    AdmissionRequest,
    AdmissionReview,
    GroupVersionKind,
    GroupVersionResource,
    Operation,
)
from webhook.kube.core import ADMISSION_API_VERSION
from webhook.text.messages import quote

AUTHENTICATED_GROUP = "system:authenticated"
DEFAULT_USER = "kubectl-user"

#: Plural resource names of the kinds outside the workload registry (Pod, the Topology CRD).
OTHER_PLURALS = {"Pod": "pods", "Topology": "topologies"}


def plural(kind: str) -> str:
    """The plural resource name of ``kind``: a workload kind's from the registry
    (:attr:`webhook.admission.kinds.description.KindDescription.resource`), else :data:`OTHER_PLURALS`,
    else lower-case ``kind`` + ``s``."""
    described = BY_KIND.get(kind)
    return described.resource if described is not None else OTHER_PLURALS.get(kind, kind.lower() + "s")


def group_version_kind(obj: Any) -> GroupVersionKind:
    """``{group, version, kind}`` of a parsed object (``apiVersion`` ``group/version``, or
    ``version`` alone for the core group); empty strings for what the object does not say."""
    source = obj if isinstance(obj, (dict, Mapping)) else {}
    api_version = source.get("apiVersion")
    group, _, version = api_version.rpartition("/") if isinstance(api_version, str) else ("", "", "")
    kind = source.get("kind")
    if not isinstance(kind, str):
        kind = ""
    return {"group": group, "version": version, "kind": kind}


def build_request(obj: Any, *, operation: Operation = "CREATE", old: Any = None, user: str = DEFAULT_USER,
                  groups: Iterable[str] = (), uid: str | None = None, namespace: str | None = None,
                  sub_resource: str | None = None, kind: GroupVersionKind | None = None) -> AdmissionRequest:
    """The AdmissionReview v1 ``request`` kube-apiserver would send for ``obj``.

    ``operation``: ``CREATE`` / ``UPDATE`` (``old`` is then ``oldObject``) / ``DELETE`` (``obj``
    may be None; kind and name come from ``old``). ``user`` / ``groups``: ``userInfo``
    (``system:authenticated`` is always added). ``uid``: a random UUID when None. ``namespace``:
    ``metadata.namespace`` when it is a non-empty string, else ``default``. ``kind``: the
    group/version/kind when the object does not say (a manifest without ``apiVersion``); else read
    from the object. Any JSON value is accepted as ``obj`` (malformed objects are the webhook's to
    deny); never raises.
    """
    source = obj if isinstance(obj, (dict, Mapping)) else old if isinstance(old, (dict, Mapping)) else {}
    gvk = kind if kind is not None else group_version_kind(source)
    gvr: GroupVersionResource = {"group": gvk["group"], "version": gvk["version"],
                                 "resource": plural(gvk["kind"])}
    meta = source.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    all_groups = [g for g in groups if g != AUTHENTICATED_GROUP] + [AUTHENTICATED_GROUP]
    request: AdmissionRequest = {
        "uid": uid or str(uuid.uuid4()),
        "kind": gvk,
        "resource": gvr,
        "requestKind": {"group": gvk["group"], "version": gvk["version"], "kind": gvk["kind"]},
        "requestResource": {"group": gvr["group"], "version": gvr["version"], "resource": gvr["resource"]},
        "namespace": namespace if namespace is not None else _namespace(meta),
        "operation": operation,
        "userInfo": {"username": user, "groups": all_groups},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1",
                    "kind": {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}.get(operation, "DeleteOptions")},
    }
    if isinstance(meta.get("name"), str):
        request["name"] = meta["name"]
    if sub_resource:
        request["subResource"] = sub_resource
    return request


def _namespace(meta: Mapping[str, Any]) -> str:
    """``request.namespace`` for an object's ``metadata``: its ``namespace`` when that is a
    non-empty string, else ``default``. A namespace that is not a string (``[a]``) is the object's
    own problem, denied by the core naming ``metadata.namespace``
    (:func:`webhook.admission.reading.check_object_meta`), never an envelope field the user never wrote."""
    value = meta.get("namespace")
    return value if isinstance(value, str) and value else "default"


def manifest_problem(obj: Any) -> str | None:
    """What makes a manifest's document unusable as a Kubernetes object, said about the fields
    the user wrote (for ``segment-webhook review``), or ``None``: ``apiVersion is missing``,
    ``apiVersion is 1, must be a string group/version (e.g. kubeflow.org/v1)``,
    ``apiVersion is "/", must be group/version (e.g. kubeflow.org/v1) or a version (v1)``,
    ``kind is missing``, ``kind is ["a"], must be a string kind name (e.g. PyTorchJob)``. Values
    are shown as JSON."""
    if not isinstance(obj, (dict, Mapping)):
        return None
    for key, what in (("apiVersion", "group/version (e.g. kubeflow.org/v1)"), ("kind", "kind name (e.g. PyTorchJob)")):
        value = obj.get(key)
        if value is None:
            return f"{key} is missing" if key not in obj else f"{key} is null, must be a string {what}"
        if not isinstance(value, str) or not value:
            return f"{key} is {quote(value)}, must be a string {what}"
    group, _, version = obj["apiVersion"].rpartition("/")
    if not version or ("/" in obj["apiVersion"] and not group):
        return f"apiVersion is {quote(obj['apiVersion'])}, must be group/version (e.g. kubeflow.org/v1) or a version (v1)"
    return None


def build_review(obj: Any, **kwargs: Any) -> AdmissionReview:
    """The whole AdmissionReview v1 document for ``obj``: :func:`build_request` wrapped in
    ``{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": ...}``."""
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "request": build_request(obj, **kwargs)}
