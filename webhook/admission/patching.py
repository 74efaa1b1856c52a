"""JSONPatch (RFC 6902) construction for the keys the webhook owns.

Only ``add`` and ``replace`` operations are ever produced, and only for the keys the webhook
writes (DESIGN.md §2, §7): user keys are never removed or rewritten. Paths are JSON Pointers
(RFC 6901) with each part escaped (``~`` → ``~0``, then ``/`` → ``~1``), so an annotation key
such as ``kai.scheduler/segment-size`` becomes ``.../annotations/kai.scheduler~1segment-size``.
A missing ``metadata``, ``annotations`` or ``labels`` map is added whole (one ``add`` of the map),
because RFC 6902 ``add`` needs the parent to exist. Every operation is an ``add`` or ``replace``
with a ``path`` and a ``value`` (``tests/unit/admission/test_core_patching.py`` applies them with
:mod:`jsonpatch`, which validates them); nothing is re-validated on the request path.

Nothing here deep-copies the reviewed object: the builder only reads it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, cast

import jsonpatch


def pointer(parts: Sequence[str]) -> str:
    """RFC 6901 JSON Pointer for ``parts`` (each escaped: ``~`` → ``~0``, then ``/`` → ``~1``,
    the order RFC 6901 §4 requires; the same string as ``jsonpointer.JsonPointer.from_parts``).

    ``pointer(["metadata", "annotations", "kai.scheduler/topology"])`` →
    ``"/metadata/annotations/kai.scheduler~1topology"``; ``pointer([])`` → ``""``.
    """
    return _pointer_of(tuple(parts))


@functools.lru_cache(maxsize=1024)
def _pointer_of(parts: tuple[Any, ...]) -> str:
    # Memoised: the same few paths (a template's metadata, the owned keys) recur review after review.
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def _map_at(obj: Any, parts: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The mapping at ``parts`` inside ``obj`` when every step is a present key of a mapping
    (walked by subscripts alone), else ``None`` (a list item, a missing or null step, another
    type: :meth:`PatchBuilder.set_entries` walks those step by step)."""
    node = obj
    try:
        for part in parts:
            node = node[part]
    except (KeyError, TypeError, IndexError):
        return None
    return node if node is not None and isinstance(node, (dict, Mapping)) else None


def _nested(names: tuple[str, ...], desired: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``desired`` inside one single-key dict per name of ``names``, outermost first:
    ``_nested(("metadata", "labels"), {"k": "v"})`` is ``{"metadata": {"labels": {"k": "v"}}}``."""
    value: dict[str, Any] = dict(desired)
    for outer in reversed(names):
        value = {outer: value}
    return value


class PatchBuilder:
    """Accumulates RFC 6902 operations that set string entries of ``metadata.annotations`` /
    ``metadata.labels`` maps inside one object.

    Usage: ``b = PatchBuilder(obj); b.set_entries(("spec", "worker", "template"), "annotations",
    {"k": "v"}); ops = b.build()``. ``obj`` is the object the patch will be applied to (the
    AdmissionReview ``request.object``); it is read, never modified.
    """

    def __init__(self, obj: Mapping[str, Any]):
        self._obj: Any = obj
        self._ops: list[dict[str, Any]] = []
        # Every dict inside a value added whole by this builder, by its path: a later call for a
        # map at or below it extends that dict instead of adding the path again.
        # The value of each ``add`` of a whole map by this builder, by its path: a later call for a
        # map at or below it extends that value instead of adding the path again.
        self._added: dict[tuple[str, ...], dict[str, Any]] = {}

    def set_entries(self, container: Sequence[str], map_name: str, desired: Mapping[str, str]) -> None:
        """Make ``<container>/metadata/<map_name>`` hold every entry of ``desired``.

        ``container``: path parts of the object that owns the ``metadata`` (``()`` for the root,
        ``("spec", "pytorchReplicaSpecs", "Worker", "template")`` for a PodTemplateSpec; a decimal
        part indexes an existing list item);
        ``map_name``: ``"annotations"`` or ``"labels"``; ``desired``: key → string value.
        Emits ``add`` for a missing key, ``replace`` for a different value, nothing for an equal
        one (so re-reviewing a patched object yields no operation). The first missing map on the
        way (``metadata`` or the map itself, or a missing template) is added whole.
        Raises ``ValueError`` when a component on the path exists but is not a mapping (callers
        validate the object first and deny it as malformed).
        """
        if not desired:
            return
        parts = tuple(container) + ("metadata", map_name)
        start, node = 0, self._obj
        for path, added in self._added.items():
            if parts[: len(path)] == path:  # inside a value added by an earlier call: walk that value
                start, node = len(path), added
                break
        else:
            present = _map_at(node, parts)
            if present is not None:  # the usual case: the map is there, only its entries may change
                self._set_in(present, parts, desired)
                return
        for depth in range(start, len(parts)):
            part = parts[depth]
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]  # an existing list item (JobSet spec.replicatedJobs/<k>)
                continue
            if not isinstance(node, (dict, Mapping)):
                raise ValueError(f"{pointer(parts[:depth])} is not an object")
            child = node.get(part)
            if child is not None:
                node = child
                continue
            # missing or null: add it whole, with the maps below it
            value = _nested(parts[depth + 1:], desired)
            if start:  # inside an added value: extend it (two adds of one path: the second would win)
                cast(dict[str, Any], node)[part] = value  # a dict of ``_added``
            else:
                self._added[parts[: depth + 1]] = value
                self._ops.append({"op": "add" if part not in node else "replace", "path": pointer(parts[: depth + 1]),
                                  "value": value})
            return
        if start:  # the map itself was added by this builder
            node.update(desired)
            return
        if not isinstance(node, (dict, Mapping)):
            raise ValueError(f"{pointer(parts)} is not an object")
        self._set_in(node, parts, desired)

    def _set_in(self, node: Mapping[str, Any], parts: tuple[str, ...], desired: Mapping[str, str]) -> None:
        """``add`` each entry of ``desired`` missing from the map ``node`` (at ``parts``), ``replace``
        each that differs."""
        for key, val in desired.items():
            if key not in node:
                self._ops.append({"op": "add", "path": pointer(parts + (key,)), "value": val})
            elif node[key] != val:
                self._ops.append({"op": "replace", "path": pointer(parts + (key,)), "value": val})

    def set_value(self, parts: Sequence[str], value: Any) -> None:
        """Make the member at ``parts`` (e.g. ``("spec", "leaderWorkerTemplate", "subGroupPolicy",
        "subGroupSize")``) equal ``value``: ``replace`` when it holds another value, ``add`` when
        absent, nothing when equal. Raises ``ValueError`` when the parent is not an object."""
        node: Any = self._obj
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node, (dict, Mapping)) or part not in node:
                raise ValueError(f"{pointer(parts[: depth + 1])} is not an object")
            node = node[part]
        if not isinstance(node, (dict, Mapping)):
            raise ValueError(f"{pointer(parts[:-1])} is not an object")
        last = parts[-1]
        if last not in node:
            self._ops.append({"op": "add", "path": pointer(parts), "value": value})
        elif node[last] != value or type(node[last]) is not type(value):
            self._ops.append({"op": "replace", "path": pointer(parts), "value": value})

    def build(self) -> list[dict[str, Any]]:
        """The RFC 6902 operations (``add`` / ``replace`` dicts with ``op``, ``path``, ``value``),
        in emission order, as a new list."""
        return list(self._ops)


def apply_patch(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> Any:
    """Apply RFC 6902 ``ops`` to a copy of ``obj`` with :mod:`jsonpatch` and return the copy
    (offline dry runs and tests; not used on the request hot path)."""
    return jsonpatch.JsonPatch(list(ops)).apply(obj, in_place=False)
