"""The AdmissionReview v1 documents, typed, and the one handler signature of the admission seams.

kube-apiserver sends ``{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
"request": {...}}`` to the webhook (Kubernetes ``k8s.io/api/admission/v1`` types). The
:class:`AdmissionRequest` TypedDict names the members the webhook reads; :class:`AdmissionHandler`
is what the transport calls the core through and the dispatcher each kind's handler. Types only:
the kinds import them, and :mod:`webhook.admission.request` (which builds requests and asks the
kinds' registry for plurals) imports the kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypedDict

from webhook.admission.config import AdmissionSettings
from webhook.admission.verdict import Decision
from webhook.topology.objects import TopologyCatalog

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict):
    """``request.kind`` / ``request.requestKind``: ``group`` is "" for the core API."""

    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    """``request.resource`` / ``request.requestResource``."""

    group: str
    version: str
    resource: str


class UserInfo(TypedDict, total=False):
    """``request.userInfo`` (Kubernetes ``authentication/v1`` UserInfo)."""

    username: str
    uid: str
    groups: list[str]


class _RequiredRequestMembers(TypedDict):
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Operation
    userInfo: UserInfo
    object: Any
    oldObject: Any


class AdmissionRequest(_RequiredRequestMembers, total=False):
    """``request`` of an AdmissionReview v1 (the members this project reads or sends); the
    members below are optional, the ones of the base class required."""

    requestKind: GroupVersionKind
    requestResource: GroupVersionResource
    subResource: str
    name: str
    namespace: str
    dryRun: bool
    options: dict[str, Any]


class AdmissionStatus(TypedDict):
    """``response.status`` of a denial (``metav1.Status``): ``code`` 400 / 403 / 500, ``reason`` its
    StatusReason (``BadRequest`` / ``Forbidden`` / ``InternalError``), ``message`` for the user."""

    code: int
    reason: str
    message: str


class _RequiredResponseMembers(TypedDict):
    uid: str
    allowed: bool


class AdmissionResponse(_RequiredResponseMembers, total=False):
    """``response`` of an AdmissionReview v1 answer (``k8s.io/api/admission/v1`` AdmissionResponse):
    ``patchType`` is ``JSONPatch`` and ``patch`` base64 of the RFC 6902 operations' JSON, both only
    when allowed with a non-empty patch; ``warnings`` only when non-empty; ``status`` only on denial.
    Built by :func:`webhook.http.envelope.review_response` alone."""

    patchType: Literal["JSONPatch"]
    patch: str
    warnings: list[str]
    status: AdmissionStatus


class AdmissionReviewResponse(TypedDict):
    """The AdmissionReview v1 document a webhook answers: ``apiVersion`` ``admission.k8s.io/v1``,
    ``kind`` ``AdmissionReview`` and the :class:`AdmissionResponse`."""

    apiVersion: str
    kind: str
    response: AdmissionResponse


class AdmissionHandler(Protocol):
    """The one handler signature of the admission seams (cf. controller-runtime's
    ``admission.Handler``): the transport calls the core's entry point
    (:func:`webhook.admission.review.review`) through it, and the dispatcher each kind's handler
    (:data:`webhook.admission.kinds.HANDLERS`). ``request``: the ``request`` member of an AdmissionReview
    v1 (:class:`AdmissionRequest`; a handler never trusts its shape and answers a malformed one with
    a 400 denial); ``mutate``: False for ``/validate`` (same checks, never a patch). Returns the
    :class:`~webhook.admission.verdict.Decision`; never raises for JSON-shaped input."""

    def __call__(self, request: AdmissionRequest | Mapping[str, Any], catalog: TopologyCatalog,
                 settings: AdmissionSettings, *, mutate: bool = True) -> Decision: ...


class AdmissionReview(TypedDict):
    """The AdmissionReview v1 document kube-apiserver POSTs."""

    apiVersion: str
    kind: str
    request: AdmissionRequest
