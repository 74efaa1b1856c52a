"""Edits of a workload manifest that the what-if search tries (DESIGN.md §13).

Each edit returns a new manifest (the input is never changed) in which one placement input has
another value, wherever the user or the webhook wrote it: an annotation key is replaced in every
``metadata.annotations`` map of the object tree (the root and each PodTemplateSpec, so a value the
webhook already stamped on a template of a stored object changes too, DESIGN.md §2 "Written on pod
templates"), and set on the root when no map holds it (root values are inherited, §4). The edited
manifest then goes through the webhook and the engine as ``place`` takes it, so a value the kind
does not allow is denied there, never assumed.

Pure: no I/O, no kubernetes import.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: Spec fields that state a segment size beside the annotation (DESIGN.md §3: the native kind's
#: ``spec.workersPerSegment``, which wins over the annotation; LWS ``subGroupSize``, which the
#: annotation overrides and the webhook rewrites).
SIZE_FIELDS = ("workersPerSegment", "subGroupSize")


def copy_tree(value: Any) -> Any:
    """A deep copy of parsed YAML/JSON (dicts, lists, scalars)."""
    if isinstance(value, dict):
        return {k: copy_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_tree(v) for v in value]
    return value


def annotation_maps(obj: Any) -> Iterator[dict[str, Any]]:
    """Every ``metadata.annotations`` mapping of ``obj`` and of the objects nested in it (pod
    templates at any depth), root first, in document order."""
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
            yield meta["annotations"]
        for key, value in obj.items():
            if key != "metadata":
                yield from annotation_maps(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from annotation_maps(item)


def _root_annotations(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.setdefault("metadata", {})
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        return annotations
    fresh: dict[str, Any] = {}
    meta["annotations"] = fresh
    return fresh


def copy_object(workload: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of one object (:func:`copy_tree` of a mapping)."""
    edited: dict[str, Any] = copy_tree(workload)
    return edited


def with_annotation(workload: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    """``workload`` with annotation ``key`` set to ``value`` wherever it is written (on the root
    when nowhere), or removed everywhere when ``value`` is ``None``."""
    edited = copy_object(workload)
    found = False
    for mapping in annotation_maps(edited):
        if key in mapping:
            found = True
            if value is None:
                del mapping[key]
            else:
                mapping[key] = value
    if not found and value is not None:
        _root_annotations(edited)[key] = value
    return edited


def with_preferred_for_required(workload: dict[str, Any], required: str, preferred: str) -> dict[str, Any]:
    """``workload`` with the hard level annotation ``required`` removed and, where a map held it
    and no soft level ``preferred`` is written there, that level set as ``preferred`` (the
    constraint becomes soft at the same level, DESIGN.md §8 "Preferred")."""
    edited = copy_object(workload)
    for mapping in annotation_maps(edited):
        if required in mapping:
            level = mapping.pop(required)
            mapping.setdefault(preferred, level)
    return edited


def _replace_size_fields(obj: Any, old: int, new: int) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in SIZE_FIELDS and value == old and isinstance(value, int) and not isinstance(value, bool):
                obj[key] = new
            else:
                _replace_size_fields(value, old, new)
    elif isinstance(obj, list):
        for item in obj:
            _replace_size_fields(item, old, new)


def with_segment_size(workload: dict[str, Any], key: str, old: int, new: int) -> dict[str, Any]:
    """``workload`` with segment size ``new`` instead of ``old``: the annotation ``key``
    (``kai.scheduler/segment-size``) as :func:`with_annotation` sets it, and every spec field of
    :data:`SIZE_FIELDS` that states ``old``."""
    edited = with_annotation(workload, key, str(new))
    _replace_size_fields(edited, old, new)
    return edited


def with_spec_value(workload: dict[str, Any], field: str, value: int) -> dict[str, Any]:
    """``workload`` with ``spec.<field>`` set to ``value`` (LWS ``spec.replicas``)."""
    edited = copy_object(workload)
    spec = edited.get("spec")
    if isinstance(spec, dict):
        spec[field] = value
    return edited
