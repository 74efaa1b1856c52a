"""Work bounded before it is done: a review whose object cannot be admitted because of its size is
answered from its size alone.

kube-apiserver rejects an object whose ``metadata.annotations`` total more than 256 KiB (keys plus
values, in bytes: apimachinery's ``ValidateAnnotationsSize``, ``TotalAnnotationSizeLimitB``), in
validation, after mutating admission; the same check refuses a pod whose annotations pass it, so a
workload whose pod template carries that much never gets a pod. Reading such a review costs the
domain core CPU time in proportion to the annotations (README "Serving" gives the figures of the
heavy review of ``benchmarks/serving_faults.py``), and anyone who may create a pod can send it.

Decision (DESIGN.md §5 "never deny what did not opt in"; the size alone says nothing about opt-in):
such a review is **allowed without a patch**, with one warning naming the field, its size, the limit
and the fix (:func:`oversized_annotations_warning`). kube-apiserver rejects the object
when the map is its own ("metadata.annotations: Too long: may not be more than 262144 bytes"), and
every pod of a template that big; a template's map inside a custom resource is not validated by
kube-apiserver, so such a workload is stored unreviewed (its pods can never be created; a bad
placement key in it is not denied: README, "Serving"). The review's log line and metrics count it
as ``allowed`` with one warning.

Only a body longer than :data:`ANNOTATIONS_LIMIT_BYTES` can hold such a map (a JSON string is at
least as long as the UTF-8 bytes it decodes to), so smaller reviews never pay for the check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.admission import AdmissionHandler, AdmissionRequest
from webhook.core.admission_decision import Decision
from webhook.core.settings import AdmissionSettings
from webhook.core.topology import TopologyCatalog
from webhook.http.envelope import encode_json

#: kube-apiserver's limit on the total size of one object's annotations, in bytes (keys + values;
#: k8s.io/apimachinery/pkg/api/validation ``TotalAnnotationSizeLimitB``).
ANNOTATIONS_LIMIT_BYTES = 256 * 1024
#: Longest warning text (DESIGN.md §5).
MAX_WARNING_CHARS = 120


def annotations_size(annotations: Mapping) -> int:
    """Bytes of ``annotations`` as kube-apiserver counts them: the UTF-8 length of every key and
    value. A key or value that is not a string (never sent by kube-apiserver, whose annotations are
    ``map[string]string``) counts as the length of its JSON text."""
    total = 0
    for key, value in annotations.items():
        total += _text_bytes(key) + _text_bytes(value)
    return total


def _text_bytes(value: Any) -> int:
    """UTF-8 bytes of a string; of the JSON text of anything else (an int's digits without encoding it)."""
    kind = type(value)
    if kind is str:
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if kind is int:
        return len(str(value))
    return len(encode_json(value))


def oversized_annotations(obj: Any) -> tuple[str, int] | None:
    """The first annotation map of ``obj`` over :data:`ANNOTATIONS_LIMIT_BYTES`: ``(field path,
    bytes)``, e.g. ``("spec.template.metadata.annotations", 1388890)``; None when there is none.

    Looked at: ``obj``'s own ``metadata.annotations`` and every ``metadata.annotations`` nested in
    it (the pod templates of every workload kind, at any depth). Linear in the size of ``obj``;
    never raises for JSON-shaped input."""
    stack: list[tuple[Any, tuple]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, Mapping):
            meta = node.get("metadata")
            if isinstance(meta, Mapping):
                annotations = meta.get("annotations")
                if isinstance(annotations, Mapping):
                    size = annotations_size(annotations)
                    if size > ANNOTATIONS_LIMIT_BYTES:
                        return ".".join(map(str, path + ("metadata", "annotations"))), size
            for key, value in node.items():
                if isinstance(value, (Mapping, list)) and not (key == "annotations" and path[-1:] == ("metadata",)):
                    stack.append((value, path + (key,)))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if isinstance(value, (Mapping, list)):
                    stack.append((value, path[:-1] + (f"{path[-1]}[{index}]",) if path else (f"[{index}]",)))
    return None


def oversized_annotations_warning(path: str, size: int) -> str:
    """The warning for annotations at ``path`` of ``size`` bytes, at most 120 characters: the
    field (shortened from the left when needed), the size, the limit and the fix, e.g.
    ``metadata.annotations: 300000 bytes > 262144, Kubernetes' limit; not reviewed: remove annotations``."""
    tail = f": {size} bytes > {ANNOTATIONS_LIMIT_BYTES}, Kubernetes' limit; not reviewed: remove annotations"
    parts, shown = path.split("."), path
    while len(shown) + len(tail) > MAX_WARNING_CHARS and len(parts) > 2:
        parts.pop(0)
        shown = "…" + ".".join(parts)
    return shown + tail


def bounded_review(review_fn: AdmissionHandler) -> AdmissionHandler:
    """``review_fn`` (the core's entry point, ``review(request, catalog, settings, *, mutate) ->
    Decision``) behind the
    size bound: a request whose ``object`` has an annotation map over the limit is allowed without
    a patch, with :func:`oversized_annotations_warning`, and ``review_fn`` is not called."""

    def review(request: AdmissionRequest, catalog: TopologyCatalog, settings: AdmissionSettings, *,
               mutate: bool = True) -> Decision:
        found = oversized_annotations(request.get("object"))
        if found is None:
            return review_fn(request, catalog, settings, mutate=mutate)
        kind = request.get("kind")
        decision = Decision(kind=str(kind.get("kind", "")) if isinstance(kind, Mapping) else "")
        decision.warnings.append(oversized_annotations_warning(*found))
        return decision

    return review
