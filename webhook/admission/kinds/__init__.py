"""Kind handlers and the dispatcher used by :func:`webhook.admission.review.review`.

One module per kind: ``pytorchjob`` (``kubeflow.org/v1`` PyTorchJob), ``leaderworkerset``
(``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet), ``distributedworkload`` (``segments.dev/v1alpha1``
DistributedWorkload, the native kind) and ``pod`` (core ``v1`` Pod). Each workload module ends
with its ``DESCRIPTION`` (:mod:`webhook.admission.kinds.description`), listed in
:mod:`webhook.admission.kinds.registry`. ``_workload`` holds the CREATE/UPDATE flow the workload kinds
share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds import pod
from webhook.admission.kinds.registry import DESCRIPTIONS
from webhook.admission.rules import malformed
from webhook.admission.types import AdmissionHandler
from webhook.admission.verdict import Decision
from webhook.text.messages import UNSET
from webhook.topology.objects import TopologyCatalog

#: The kind handler's signature: :class:`webhook.admission.types.AdmissionHandler`.
Handler = AdmissionHandler

#: (API group, kind) → handler: every kind of :data:`webhook.admission.kinds.registry.DESCRIPTIONS`,
#: then Pod. The core group is "".
HANDLERS: dict[tuple[str, str], Handler] = {
    **{(d.group, d.kind): d.review for d in DESCRIPTIONS},
    (pod.GROUP, pod.KIND): pod.review,
}


def handles(group: str, kind: str) -> bool:
    """True when the webhook has a handler for ``(group, kind)`` (core group "")."""
    return (group, kind) in HANDLERS


def handled_kinds() -> list[str]:
    """The kinds the webhook handles, for messages: ``["PyTorchJob (kubeflow.org)", …, "Pod"]``."""
    return [f"{kind} ({group})" if group else kind for group, kind in HANDLERS]


def group_kind(request: Mapping[str, Any]) -> tuple[str, str]:
    """(group, kind) of an AdmissionReview ``request``: from ``request.kind`` ({group, version,
    kind}, group "" for the core API), else from the object's (or oldObject's) ``apiVersion``
    (``group/version``, or ``version`` alone for the core group) and ``kind``. ``("", "")``
    when neither says."""
    rkind = request.get("kind")
    if isinstance(rkind, (dict, Mapping)) and isinstance(rkind.get("kind"), str) and rkind.get("kind"):
        group = rkind.get("group")
        return (group if isinstance(group, str) else "", rkind["kind"])
    for member in ("object", "oldObject"):
        obj = request.get(member)
        if isinstance(obj, (dict, Mapping)) and isinstance(obj.get("kind"), str):
            api_version = obj.get("apiVersion")
            group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
            return (group, obj["kind"])
    return ("", "")


def dispatch(request: object, catalog: TopologyCatalog, settings: AdmissionSettings, *, mutate: bool = True) -> Decision:
    """Route one AdmissionReview v1 ``request`` to its kind handler and return the Decision.

    ``request``: the ``request`` member (a dict). Kinds not listed in :data:`HANDLERS` are
    allowed with an empty patch. A request that is not an object is denied with code 400 (rule
    ``malformed-object``); every malformed field inside it is denied by the handlers, which
    validate before they read. An exception escaping a handler is a bug of this project, not of
    the user's object, so it is NOT disguised as a 400 here: the transport
    (``webhook.http.envelope.handle``) logs it and answers an AdmissionReview denial with
    ``status.code`` 500, never an HTTP 5xx.
    """
    if not isinstance(request, (dict, Mapping)):
        decision = Decision(kind="unknown")
        malformed(decision, "request", UNSET if request is None else request, "an AdmissionReview v1 request object")
        return decision
    group, kind = group_kind(request)
    handler = HANDLERS.get((group, kind))
    if handler is None:
        return Decision(kind=kind or "unknown")
    return handler(request, catalog, settings, mutate=mutate)
