"""AdmissionReview v1 transport: parse and check a request body, build the response body.

No Flask here: the HTTP app (``webhook.http.app``) and the offline dry run
(``segment-webhook review``) both call :func:`handle`, so a manifest reviewed offline goes
through exactly the code path of ``POST /mutate``.

Wire format (upstream ``k8s.io/api/admission/v1``):

* request: ``{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {uid,
  kind: {group, version, kind}, operation, object, oldObject, userInfo, namespace, name, ...}}``
* response: ``{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {uid,
  allowed, patchType: "JSONPatch", patch: base64(JSON), warnings: [...], status: {code, message}}}``

Decisions of this module (DESIGN.md is silent on transport details):

* A body that is not JSON, or not an AdmissionReview with a ``request.uid`` string, gets
  HTTP 400 and a plain JSON error ``{"error": message, "field": path}``: there is no uid to
  answer to, and kube-apiserver only sends well-formed reviews, so only a broken client sees it.
* A review that carries a uid but is malformed otherwise (wrong apiVersion, unknown operation,
  ``request.object`` missing on CREATE, ...) gets HTTP 200 and an AdmissionReview with
  ``allowed: false`` and ``status.code: 400`` whose message names the field: kube-apiserver
  shows the message of a 200 answer to the user, but only a generic error for a non-200 one.
* An unexpected exception in the domain core is logged with its traceback and answered with
  HTTP 200, ``allowed: false``, ``status.code: 500`` ("internal error ... uid ..."): the failure is
  visible to the user and in metrics (``decision="error"``), and never kills a worker.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from webhook.admission.config import AdmissionSettings
from webhook.admission.types import AdmissionHandler, AdmissionRequest, AdmissionResponse, AdmissionReviewResponse
from webhook.admission.verdict import MAX_MESSAGE_CHARS
from webhook.errors import SegmentWebhookError
from webhook.kube.core import ADMISSION_API_VERSION, ADMISSION_KIND, OBJECT_OPERATIONS, OPERATIONS
from webhook.text.messages import json_type, quote
from webhook.topology.objects import TopologyCatalog

DECISION_ALLOWED = "allowed"
DECISION_DENIED = "denied"
DECISION_MALFORMED = "malformed"
DECISION_ERROR = "error"

#: Rule identifier used in logs and ``segment_webhook_denials_total`` for a malformed review.
RULE_MALFORMED = "malformed-review"
#: Rule identifier for an unexpected exception inside the domain core.
RULE_INTERNAL = "internal-error"
#: Rule identifier for an allowed review whose patch would make the answer too large.
RULE_ANSWER_TOO_LARGE = "answer-too-large"

#: Largest AdmissionReview answer, in bytes of JSON (docs/concepts/admission.md "Every rejection a user can meet": the
#: answer is bounded whatever the object). ``status.message`` is bounded by the core (``Decision.message``) and clipped
#: here again; warnings and the uid are bounded here; only a patch could pass it, and then the
#: review is denied instead.
MAX_ANSWER_BYTES = 64 * 1024
#: Warnings sent at most; more are summed up in one last warning.
MAX_WARNINGS = 20
#: Longest accepted ``request.uid`` (kube-apiserver sends a 36-character UUID).
MAX_UID_CHARS = 128

log = logging.getLogger("segment_webhook.envelope")

#: ``isinstance(value, JSON_OBJECT)``: a JSON object, as decoded (dict) or given (any mapping).
#: ``dict`` first: a decoded object is an exact dict, found without the ``Mapping`` ABC check.
JSON_OBJECT = (dict, Mapping)

#: The domain entry point the transport calls (``webhook.admission.review.review`` unless a test or
#: benchmark passes another): :class:`webhook.admission.types.AdmissionHandler`.
ReviewFunction = AdmissionHandler


class EnvelopeError(SegmentWebhookError, ValueError):
    """A request body that is not a usable AdmissionReview v1.

    ``field``: the path of the offending member (``body``, ``apiVersion``, ``request.uid``, ...).
    ``uid``: the request uid when one could be read (then the answer is an AdmissionReview),
    else None (then the answer is a plain JSON error with HTTP 400).
    """

    def __init__(self, message: str, *, field: str, uid: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.uid = uid


@dataclass
class ReviewOutcome:
    """Result of one :func:`handle` call: what to send and what to log/count.

    ``http_status``: 200 for every AdmissionReview answer, 400 for a body without a usable uid.
    ``body``: the JSON document to send (AdmissionReview, or ``{"error", "field"}``).
    ``decision``: ``allowed`` | ``denied`` | ``malformed`` | ``error``.
    ``rules``: identifiers of the violated rules, de-duplicated, in order (empty when allowed).
    ``patch``: RFC 6902 operations sent to the apiserver (empty when none / denied / validate).
    ``kind``/``operation``/``namespace``/``name``/``user``: from the request, ``""`` if absent.
    """

    http_status: int
    body: AdmissionReviewResponse | dict[str, str]
    uid: str | None = None
    decision: str = DECISION_MALFORMED
    rules: tuple[str, ...] = ()
    message: str = ""
    patch: list[Any] = field(default_factory=list)
    warnings: list[Any] = field(default_factory=list)
    kind: str = ""
    operation: str = ""
    namespace: str = ""
    name: str = ""
    user: str = ""

    @property
    def allowed(self) -> bool:
        """True when the AdmissionReview answer allows the request."""
        return self.decision == DECISION_ALLOWED


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: One strict decoder and one compact encoder for every review (``json.loads`` / ``json.dumps``
#: with arguments build a new coder per call). Both are stateless, so threads share them.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
#: ``encode_json(value)`` → compact JSON text (``json.dumps(value, separators=(",", ":"))``).
encode_json = json.JSONEncoder(separators=(",", ":")).encode


#: ``bytes.translate`` table: every ASCII digit to ``0``, ``[`` and ``{`` to ``[``, every other
#: byte to ``.``: in one pass over a body, what :data:`_LONG_DIGIT_RUN` (a run of 19 digits) and
#: the count of opening brackets (:data:`_MOST_ORJSON_BRACKETS`) are then read from at C speed.
_DIGIT_MASK = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x5B if byte in b"[{" else 0x2E for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19
#: Bodies with more ``[`` and ``{`` than this go to :mod:`json`: nested that deep, json may run out
#: of Python's recursion limit (1000 frames, the caller's included) where orjson does not.
_MOST_ORJSON_BRACKETS = 400


def decode_json(raw: bytes | str) -> Any:
    """Decode a request body as strict JSON (UTF-8; ``NaN``/``Infinity`` rejected).

    The result is exactly :mod:`json`'s (with ``NaN``, ``Infinity`` and ``-Infinity`` refused).
    A body of bytes is decoded by :mod:`orjson` (faster: docs/tasks/benchmarks.md "Work per review, counted") when that cannot
    differ: orjson reads an integer beyond 64 bits as a float where :mod:`json` keeps it exact,
    so a body with a run of 19 or more digits goes to :mod:`json`, as does a body that could nest
    deeper than json's recursion allows (more than :data:`_MOST_ORJSON_BRACKETS` brackets); and
    anything orjson refuses (invalid JSON, a lone surrogate escape, ``1e400``, ...) is decoded
    again by :mod:`json`, whose answer (a value, or the error below) is the one given.
    ``tests/unit/http/test_http_decode.py`` checks the two against each other.

    Raises :class:`EnvelopeError` (``field="body"``) for anything that is not JSON, including
    nesting too deep for the decoder.
    """
    if isinstance(raw, (bytes, bytearray, str)) and (not raw or raw.isspace()):  # no body: say so (no copy)
        raise EnvelopeError("request body is empty: send the AdmissionReview as JSON (with Content-Length, or "
                            "chunked)", field="body")
    if type(raw) is bytes:
        masked = raw.translate(_DIGIT_MASK)
        if masked.count(b"[") <= _MOST_ORJSON_BRACKETS and masked.find(_LONG_DIGIT_RUN) < 0:
            try:
                return orjson.loads(raw)
            except Exception:  # noqa: BLE001 - json decides: it gives the value or the error
                pass
    try:
        if isinstance(raw, (bytes, bytearray)):
            raw = bytes(raw).decode("utf-8")
        if not isinstance(raw, str):
            raise ValueError("the request body must be bytes or text")
        return _DECODER.decode(raw)
    except UnicodeDecodeError:
        raise EnvelopeError("request body is not UTF-8 text", field="body") from None
    except RecursionError:
        raise EnvelopeError("request body is nested too deeply to be an AdmissionReview", field="body") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # Python's 4,300-digit limit on int()
            raise EnvelopeError("request body holds a number of more than 4300 digits; no Kubernetes field "
                                "takes one", field="body") from None
        raise EnvelopeError(f"request body is not valid JSON: {exc}", field="body") from None


def _malformed(uid: str, path: str, message: str) -> EnvelopeError:
    """The error for member ``path`` of a review with ``uid`` (answered with an AdmissionReview)."""
    return EnvelopeError(f"malformed AdmissionReview: {path} {message}", field=path, uid=uid)


def _all_strings(values: list[Any]) -> bool:
    """True when every item of ``values`` is a string (a loop: cheaper than ``all`` over a generator)."""
    for value in values:
        if not isinstance(value, str):
            return False
    return True


def parse_review(body: Any) -> AdmissionRequest:
    """Check a decoded AdmissionReview v1 body and return its ``request`` member (a new dict,
    checked member by member to be the :class:`~webhook.admission.types.AdmissionRequest` below).

    Checks (each failure raises :class:`EnvelopeError` naming the field): the body is an object;
    ``request`` is an object with a non-empty string ``uid``; ``apiVersion`` is
    ``admission.k8s.io/v1``; ``kind`` is ``AdmissionReview``; ``request.kind`` is an object with
    string ``group``/``version``/``kind`` (``group`` may be ``""`` or absent for the core group);
    ``request.operation`` is one of CREATE, UPDATE, DELETE, CONNECT; ``request.object`` is an
    object for CREATE and UPDATE; ``request.oldObject`` is an object for UPDATE (kube-apiserver
    always sends it; the immutability rules of DESIGN.md §5 need it); ``request.userInfo``, when
    present, is an object with a string ``username`` and a list of string ``groups``;
    ``request.namespace``/``request.name``, when present, are strings.
    """
    if not isinstance(body, JSON_OBJECT):
        raise EnvelopeError(
            f"request body must be a JSON object (an AdmissionReview), got {json_type(body)}", field="body"
        )
    request = body.get("request")
    if not isinstance(request, JSON_OBJECT):
        raise EnvelopeError(
            f"request is {'missing' if request is None else json_type(request)}: an AdmissionReview "
            "sent to a webhook must carry a request object", field="request",
        )
    uid = request.get("uid")
    if not (isinstance(uid, str) and uid and len(uid) <= MAX_UID_CHARS):
        raise EnvelopeError(f"request.uid must be a non-empty string of at most {MAX_UID_CHARS} characters "
                            "(kube-apiserver sends a UUID)", field="request.uid")
    if body.get("apiVersion") != ADMISSION_API_VERSION:
        raise _malformed(uid, "apiVersion", f"{_is_value(body, 'apiVersion')}; this webhook speaks "
                         f"\"{ADMISSION_API_VERSION}\" only (set admissionReviewVersions: [\"v1\"] in the "
                         "webhook configuration)")
    if body.get("kind") != ADMISSION_KIND:
        raise _malformed(uid, "kind", f"{_is_value(body, 'kind')}, expected \"{ADMISSION_KIND}\"")
    gvk = request.get("kind")
    if not isinstance(gvk, JSON_OBJECT):
        raise _malformed(uid, "request.kind", "must be an object {group, version, kind}")
    for key in ("version", "kind"):
        value = gvk.get(key)
        if not isinstance(value, str) or not value:
            raise _malformed(uid, f"request.kind.{key}", "must be a non-empty string")
    if not isinstance(gvk.get("group", ""), str):
        raise _malformed(uid, "request.kind.group", "must be a string")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise _malformed(uid, "request.operation",
                         f"{_is_value(request, 'operation')}; expected one of {', '.join(OPERATIONS)}")
    if operation in OBJECT_OPERATIONS:
        obj = request.get("object")
        if not isinstance(obj, JSON_OBJECT):
            raise _malformed(uid, "request.object", f"must be an object for {operation}, got {json_type(obj)}")
        if operation == "UPDATE":
            old = request.get("oldObject")
            if not isinstance(old, JSON_OBJECT):
                raise _malformed(uid, "request.oldObject", f"must be an object for UPDATE, got {json_type(old)}")
    for key in ("namespace", "name"):
        value = request.get(key)
        if value is not None and not isinstance(value, str):
            raise _malformed(uid, f"request.{key}", "must be a string")
    user_info = request.get("userInfo")
    if user_info is not None:
        if not isinstance(user_info, JSON_OBJECT):
            raise _malformed(uid, "request.userInfo", "must be an object")
        username = user_info.get("username")
        if username is not None and not isinstance(username, str):
            raise _malformed(uid, "request.userInfo.username", "must be a string")
        groups = user_info.get("groups")
        if groups is not None and not (isinstance(groups, list) and _all_strings(groups)):
            raise _malformed(uid, "request.userInfo.groups", "must be a list of strings")
    # cast: every member AdmissionRequest names was checked above; a TypedDict cannot be narrowed to
    return cast(AdmissionRequest, dict(request))


def _is_value(parent: Mapping[str, Any], key: str) -> str:
    """``is missing`` / ``is null`` / ``is "v1beta1"`` (JSON), never Python's ``None``."""
    if key not in parent:
        return "is missing"
    return "is " + quote(parent[key])


#: HTTP status code of a denial -> metav1.StatusReason (k8s.io/apimachinery/pkg/apis/meta/v1 types.go).
STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}


def patch_json(patch: list[Any]) -> bytes:
    """The JSON text of a JSONPatch, as sent (base64) in ``response.patch``: compact, ASCII, the
    bytes of ``encode_json(patch).encode()``.

    Encoded by :mod:`orjson` (cheaper than :mod:`json`: docs/tasks/benchmarks.md "Work per review, counted"); its
    text is :mod:`json`'s byte for byte when it is ASCII and holds no float (orjson writes other
    characters as UTF-8 where json escapes them, and DEL (0x7f) raw where json writes ``\\u007f``;
    it refuses integers beyond 64 bits, lone
    surrogates and keys that are not strings: all of those go to :mod:`json`). A float, which no
    patch of the webhook's own carries, is spelled the shortest way that reads back as the same
    number (``1e16`` for json's ``1e+16``): kube-apiserver decodes the same patch.
    ``tests/unit/http/test_http_decode.py`` checks the two encoders against each other.
    """
    try:
        encoded = orjson.dumps(patch)
    except TypeError:
        return encode_json(patch).encode()
    if encoded.isascii() and b"\x7f" not in encoded:
        return encoded
    return encode_json(patch).encode()


def review_response(
    uid: str,
    *,
    allowed: bool,
    patch: list[Any] | None = None,
    warnings: list[str] | None = None,
    code: int | None = None,
    message: str | None = None,
) -> AdmissionReviewResponse:
    """Build an AdmissionReview v1 response document (the one builder of
    :class:`~webhook.admission.types.AdmissionReviewResponse`; cf. controller-runtime's
    ``Allowed`` / ``Denied`` / ``Patched`` constructors, which all end in one response type).

    ``patch`` (RFC 6902 operations) is sent as ``patchType: JSONPatch`` + base64 of its JSON only
    when non-empty and ``allowed``. ``warnings`` is sent only when non-empty. ``status: {code,
    reason, message}`` is sent on denial (``allowed`` False); ``code`` defaults to 403, ``reason``
    is its Kubernetes StatusReason (:data:`STATUS_REASONS`): kube-apiserver passes it on, and
    kubectl prints ``Error from server (Forbidden): …`` only when the status has one (without,
    ``Error from server: …``; seen on the real apiserver, tests/cluster/test_cluster_admission.py).
    """
    response: AdmissionResponse = {"uid": uid, "allowed": bool(allowed)}
    if allowed and patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch_json(patch)).decode("ascii")
    if warnings:
        response["warnings"] = bounded_warnings(warnings)
    if not allowed:
        text = message or "denied"
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 1] + "…"
        status_code = int(code or 403)
        response["status"] = {"code": status_code, "reason": STATUS_REASONS.get(status_code, "Forbidden"),
                              "message": text}
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}


def bounded_warnings(warnings: list[Any]) -> list[str]:
    """At most :data:`MAX_WARNINGS` warnings (each already at most 120 characters, DESIGN.md §5,
    clipped here too): the first ``MAX_WARNINGS - 1`` and, when there are more, one
    ``… and N more warnings`` line."""
    texts = [w if len(w) <= 120 else w[:119] + "…" for w in map(str, warnings)]
    if len(texts) <= MAX_WARNINGS:
        return texts
    shown = texts[: MAX_WARNINGS - 1]
    return shown + [f"… and {len(texts) - len(shown)} more warnings"]


def error_body(message: str, field_path: str) -> dict[str, Any]:
    """A plain JSON error for a body that cannot be answered with an AdmissionReview."""
    return {"error": message, "field": field_path}


def decode_patch(response_review: Mapping[str, Any]) -> list[Any]:
    """Inverse of the patch encoding of :func:`review_response`: the RFC 6902 operations of an
    AdmissionReview response (``[]`` when it has no patch). Raises ``ValueError`` when the
    ``patch`` member is not base64 of a JSON array."""
    response = response_review.get("response") or {}
    if "patch" not in response:
        return []
    ops = json.loads(base64.b64decode(response["patch"], validate=True))
    if not isinstance(ops, list):
        raise ValueError("response.patch is not a JSON array")
    return ops


def _default_review() -> ReviewFunction:
    from webhook.admission.review import review

    return review


def handle(
    raw: bytes | str | Mapping[str, Any],
    catalog: TopologyCatalog,
    settings: AdmissionSettings,
    *,
    mutate: bool = True,
    review_fn: ReviewFunction | None = None,
) -> ReviewOutcome:
    """Answer one AdmissionReview: decode, check, run the domain core, encode.

    ``raw``: the request body (bytes/str of JSON, or an already decoded dict). ``catalog``: a
    ``TopologyCatalog``; ``settings``: ``AdmissionSettings``. ``mutate=False`` (``/validate``)
    runs the same checks and never sends a patch. ``review_fn``: the domain entry point, default
    ``webhook.admission.review.review(request, catalog, settings, mutate=...) -> Decision``.

    Never raises (see the module docstring for the mapping of failures to answers).
    """
    try:
        body = decode_json(raw) if type(raw) is bytes or not isinstance(raw, JSON_OBJECT) else raw
        request = parse_review(body)
    except EnvelopeError as exc:
        if exc.uid is None:
            return ReviewOutcome(400, error_body(exc.message, exc.field), message=exc.message, rules=(RULE_MALFORMED,))
        outcome = ReviewOutcome(
            200,
            review_response(exc.uid, allowed=False, code=400, message=exc.message),
            uid=exc.uid, rules=(RULE_MALFORMED,), message=exc.message,
        )
        _describe(outcome, body.get("request") if isinstance(body, JSON_OBJECT) else None)
        return outcome

    uid = request["uid"]
    outcome = ReviewOutcome(200, {}, uid=uid)
    _describe(outcome, request)
    try:
        fn = review_fn or _default_review()
        decision = fn(request, catalog, settings, mutate=mutate)
        allowed = bool(decision.allowed)
        patch = list(decision.patch or []) if (mutate and allowed) else []
        decision_warnings = decision.warnings
        warnings = [str(w) for w in decision_warnings] if decision_warnings else []
        code = int(decision.code) if not allowed else None
        message = str(decision.message) if not allowed else ""
        rules: list[str] = []
        for violation in getattr(decision, "violations", None) or []:
            if violation.rule not in rules:
                rules.append(str(violation.rule))
        outcome.body = review_response(uid, allowed=allowed, patch=patch, warnings=warnings, code=code, message=message)
        # Without a patch an answer is under 34 KB (message, warnings and uid bounded, even with
        # every character escaped); only a long patch is measured.
        encoded_patch = outcome.body["response"].get("patch", "")
        if len(encoded_patch) > MAX_ANSWER_BYTES // 4 and \
                len(encode_json(outcome.body)) > MAX_ANSWER_BYTES:
            message = (f"the mutation of this object would be a JSONPatch of {len(patch)} operations, "
                       f"{len(encoded_patch)} bytes in base64, over the webhook's "
                       f"{MAX_ANSWER_BYTES}-byte answer limit; remove what the webhook would have to "
                       "copy (the operations' paths start with "
                       f"{', '.join(sorted({str(op.get('path', ''))[:80] for op in patch[:3]}))})")
            log.warning("uid=%s: %s", uid, message)
            outcome.body = review_response(uid, allowed=False, warnings=warnings, code=500, message=message)
            allowed, patch, rules = False, [], [RULE_ANSWER_TOO_LARGE]
    except Exception:
        log.exception("internal error while reviewing uid=%s kind=%s", uid, outcome.kind)
        message = f"internal error in segment-webhook while reviewing this object (uid {uid}); see the webhook log"
        outcome.body = review_response(uid, allowed=False, code=500, message=message)
        outcome.decision, outcome.rules, outcome.message = DECISION_ERROR, (RULE_INTERNAL,), message
        return outcome
    outcome.decision = DECISION_ALLOWED if allowed else DECISION_DENIED
    outcome.rules = tuple(rules)
    outcome.message = message
    outcome.patch = patch
    outcome.warnings = warnings
    return outcome


def _describe(outcome: ReviewOutcome, request: Any) -> None:
    """Fill kind/operation/namespace/name/user of ``outcome`` from a (possibly malformed) request."""
    if not isinstance(request, JSON_OBJECT):
        return
    gvk = request.get("kind")
    if isinstance(gvk, JSON_OBJECT):
        kind = gvk.get("kind")
        if isinstance(kind, str):
            outcome.kind = kind
    operation = request.get("operation")
    if isinstance(operation, str):
        outcome.operation = operation
    obj = request.get("object")
    if not isinstance(obj, JSON_OBJECT):
        obj = request.get("oldObject")
    meta = obj.get("metadata") if isinstance(obj, JSON_OBJECT) else None
    if not isinstance(meta, JSON_OBJECT):
        meta = {}
    namespace = request.get("namespace") or meta.get("namespace")
    if isinstance(namespace, str):
        outcome.namespace = namespace
    name = request.get("name") or meta.get("name") or meta.get("generateName")
    if isinstance(name, str):
        outcome.name = name
    user_info = request.get("userInfo")
    if isinstance(user_info, JSON_OBJECT):
        username = user_info.get("username")
        if isinstance(username, str):
            outcome.user = username
