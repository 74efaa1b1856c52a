"""Work bounded before it is done: a review whose object cannot be admitted because of its size is
answered from its size alone.

kube-apiserver rejects an object whose ``metadata.annotations`` total more than 256 KiB (keys plus
values, in bytes: apimachinery's ``ValidateAnnotationsSize``, ``TotalAnnotationSizeLimitB``), in
validation, after mutating admission; the same check refuses a pod whose annotations pass it, so a
workload whose pod template carries that much never gets a pod. Reading such a review costs the
domain core CPU time in proportion to the annotations (README "Serving" gives the figures of the
heavy review of ``benchmarks/serving_faults.py``), and anyone who may create a pod can send it.

Decision (DESIGN.md §5 "Opt-in"; the size alone says nothing about opt-in): such a review is
answered without a patch and without reading the object further:

* when the object carries a placement key (:data:`webhook.core.keys.OPT_IN_KEYS`) in any of its
  annotation maps, it is **denied** (rule ``annotations-too-large``,
  :func:`webhook.core.rules.deny_oversized_annotations`): its pods could never be created, and its
  placement keys are not reviewed, so it must not be stored as if they had been;
* otherwise it is **allowed**, with one warning naming the field, its size, the limit and the fix
  (:func:`oversized_annotations_warning`): the webhook never denies what did not opt in.
  kube-apiserver rejects the object when the map is its own ("metadata.annotations: Too long: may
  not be more than 262144 bytes"), and every pod of a template that big; a template's map inside a
  custom resource is not validated by kube-apiserver, so such a workload is stored (its pods can
  never be created).

The review's log line and metrics count it as ``denied`` (rule ``annotations-too-large``) or
``allowed`` with one warning.

Only a body longer than :data:`~webhook.core.rules.ANNOTATIONS_LIMIT_BYTES` can hold such a map (a JSON string is at
least as long as the UTF-8 bytes it decodes to), so smaller reviews never pay for the check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from webhook.core import keys
from webhook.core.admission_decision import Decision
from webhook.core.admission_settings import AdmissionSettings
from webhook.core.admission_types import AdmissionHandler, AdmissionRequest
from webhook.core.rules import ANNOTATIONS_LIMIT_BYTES, deny_oversized_annotations
from webhook.core.topology import TopologyCatalog
from webhook.http.envelope import encode_json

#: Longest warning text (DESIGN.md §5).
MAX_WARNING_CHARS = 120


def annotations_size(annotations: Mapping[str, Any]) -> int:
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


def annotation_maps(obj: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every ``metadata.annotations`` map of ``obj``: its own and every one nested in it (the pod
    templates of every workload kind, at any depth), as ``(field path, map)``, e.g.
    ``("spec.replicatedJobs[1].template.spec.template.metadata.annotations", {...})``. Linear in
    the size of ``obj`` (the maps' entries are not visited); never raises for JSON-shaped input."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, Mapping):
            meta = node.get("metadata")
            if isinstance(meta, Mapping):
                annotations = meta.get("annotations")
                if isinstance(annotations, Mapping):
                    yield ".".join(map(str, path + ("metadata", "annotations"))), annotations
            for key, value in node.items():
                if isinstance(value, (Mapping, list)) and not (key == "annotations" and path[-1:] == ("metadata",)):
                    stack.append((value, path + (key,)))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if isinstance(value, (Mapping, list)):
                    stack.append((value, path[:-1] + (f"{path[-1]}[{index}]",) if path else (f"[{index}]",)))


def oversized_annotations(obj: Any) -> tuple[str, int] | None:
    """The first annotation map of ``obj`` (:func:`annotation_maps`) over
    :data:`~webhook.core.rules.ANNOTATIONS_LIMIT_BYTES`: ``(field path, bytes)``, e.g.
    ``("spec.template.metadata.annotations", 1388890)``; None when there is none."""
    for path, annotations in annotation_maps(obj):
        size = annotations_size(annotations)
        if size > ANNOTATIONS_LIMIT_BYTES:
            return path, size
    return None


def carries_placement_key(obj: Any) -> bool:
    """True when one of ``obj``'s annotation maps (:func:`annotation_maps`) holds a key of
    :data:`webhook.core.keys.OPT_IN_KEYS` (DESIGN.md §5 "Opt-in"); a lookup per key and map."""
    for _, annotations in annotation_maps(obj):
        for key in keys.OPT_IN_KEYS:
            if key in annotations:
                return True
    return False


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
    Decision``) behind the size bound: a request whose ``object`` has an annotation map over the
    limit is answered without a patch and ``review_fn`` is not called: denied (rule
    ``annotations-too-large``) when the object carries a placement key, else allowed with
    :func:`oversized_annotations_warning` (module docstring)."""

    def review(request: AdmissionRequest | Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *,
               mutate: bool = True) -> Decision:
        found = oversized_annotations(request.get("object"))
        if found is None:
            return review_fn(request, catalog, settings, mutate=mutate)
        kind = request.get("kind")
        decision = Decision(kind=str(kind.get("kind", "")) if isinstance(kind, Mapping) else "")
        if carries_placement_key(request.get("object")):
            deny_oversized_annotations(decision, *found)
        else:
            decision.warnings.append(oversized_annotations_warning(*found))
        return decision

    return review
