"""How the webhook writes values and field paths into messages (one house format, DESIGN.md §5).

A denial reads ``<field> = <value>: <problem> (rule <id>); fix: <fix>.``; a field that is not set
reads ``<field> is not set: …``. Values are JSON-quoted so ``" 4"`` and ``""`` stay visible, and
JSON ``null`` never appears: an absent value is said in words.
"""

from __future__ import annotations

import base64
import difflib
import heapq
import json
import math
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.errors import SegmentWebhookError


class _Unset:
    """Marker for "the field is not set" (rendered in words, never as ``null``/``None``)."""

    def __repr__(self) -> str:
        return "UNSET"


#: Pass as a value when the field is absent.
UNSET: Any = _Unset()


#: Longest rendering of a value in a message (:func:`quote`), its ``(YAML ...)`` type aside.
QUOTE_LIMIT = 60


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """Render a value for a message: strings JSON-quoted (``" 4"``, ``""`` stay visible),
    other JSON values as JSON (``4``, ``true``, ``null``, ``{...}``), cut to ``limit`` characters
    with ``...``. The one renderer of values for every message of the package.

    Never a Python repr. Values a YAML loader makes that JSON has no type for are shown as
    kubectl would send them (its YAML reader turns them into JSON first) and, at the top level,
    named by their YAML type, so ``must be a string`` never reads as if they were strings:
    ``!!binary`` as its base64 text ``(YAML binary)``, ``!!set`` as a map of nulls ``(YAML set)``,
    ``.nan`` / ``.inf`` ``(YAML float)``. Map keys that are not strings become their JSON text
    (``1`` → ``"1"``), as sigs.k8s.io/yaml does; maps are shown with their keys sorted, as Go's
    JSON encoder writes them. A value that is none of these reads ``a value that is not JSON``.

    The work is bounded by ``limit``, not by the value: the walk stops once ``limit`` characters
    are written, and each map's keys are sorted once per call, so a YAML alias bomb (a billion
    strings sharing nine, or maps sharing one) renders at once."""
    try:
        text = _bounded(value, limit)
    except (_NotJSON, ValueError):  # ValueError: an int of more digits than Python converts
        return "a value that is not JSON"
    yaml_type = _yaml_type(value)
    return text if yaml_type is None else f"{text} ({yaml_type})"


class _NotJSON(SegmentWebhookError):
    """A value no YAML loader makes (:func:`quote` says ``a value that is not JSON``)."""


#: ``.nan`` / ``.inf`` as YAML writes them (JSON has no such numbers).
_SPECIAL_FLOATS = {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}


def _yaml_type(value: Any) -> str | None:
    """The YAML type of a top-level value JSON cannot hold, else ``None``."""
    if isinstance(value, (bytes, bytearray)):
        return "YAML binary"
    if isinstance(value, (set, frozenset)):
        return "YAML set"
    if isinstance(value, float) and not math.isfinite(value):
        return "YAML float"
    return None


def _leaf(value: Any, limit: int | None = None) -> Any:
    """A scalar as the JSON value kubectl would send for it: ``None``, a string, a boolean, a
    number, ``!!binary`` as its base64 text (of the first bytes only when ``limit`` is given: the
    text is cut there anyway), ``.nan``/``.inf`` as that text. Raises :class:`_NotJSON` for
    anything else."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _SPECIAL_FLOATS[str(value)]
    if isinstance(value, (bytes, bytearray)):
        head = value if limit is None else value[: 3 * (limit // 4 + 2)]  # 3 bytes → 4 characters
        return base64.b64encode(bytes(head)).decode("ascii")
    raise _NotJSON(type(value).__name__)


def _bounded(value: Any, limit: int) -> str:
    """:func:`quote`'s text without the YAML type: a walk that stops once ``limit`` characters
    are written (each level writes one first, so its depth is bounded too)."""
    out: list[str] = []
    size = 0
    sorted_entries: dict[int, list[tuple[str, Any]]] = {}  # per map, by identity (alive during the call)

    def emit(text: str) -> bool:
        nonlocal size
        out.append(text)
        size += len(text)
        return size > limit

    def entries(item: Any) -> list[tuple[str, Any]]:
        # only the first ``limit`` entries can be shown; a map shared through aliases is sorted once
        found = sorted_entries.get(id(item))
        if found is None:
            pairs = ((key_text(k), None) for k in item) if isinstance(item, (set, frozenset)) \
                else ((key_text(k), v) for k, v in item.items())
            found = sorted_entries[id(item)] = heapq.nsmallest(limit, pairs, key=lambda pair: pair[0])
        return found

    def walk(item: Any) -> bool:  # True once the budget is spent
        if isinstance(item, (Mapping, set, frozenset)):
            if emit("{"):
                return True
            for n, (k, v) in enumerate(entries(item)):
                if (n and emit(", ")) or emit(_json_text(k, limit)) or emit(": ") or walk(v):
                    return True
            return emit("}")
        if isinstance(item, (list, tuple)):
            if emit("["):
                return True
            for n, v in enumerate(item):
                if (n and emit(", ")) or walk(v):
                    return True
            return emit("]")
        return emit(_json_text(_leaf(item, limit), limit))

    if _yaml_type(value) in ("YAML binary", "YAML float"):  # at the top level, their JSON strings shown bare
        emit(_leaf(value, limit))
    else:
        walk(value)
    text = "".join(out)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_text(leaf: Any, limit: int) -> str:
    """A JSON scalar as JSON text (a long string cut first: only ``limit`` characters are shown),
    its invisible characters escaped (:func:`visible`)."""
    if isinstance(leaf, str) and len(leaf) > limit:
        leaf = leaf[: limit + 1]
    return visible(json.dumps(leaf, ensure_ascii=False))


#: Unicode categories a terminal shows as nothing or as plain space: format characters (zero-width
#: space U+200B, joiners, the byte-order mark U+FEFF, bidirectional overrides such as U+202E),
#: controls, private-use, unassigned, line and paragraph separators, and spaces other than U+0020.
_INVISIBLE = frozenset({"Cf", "Cc", "Co", "Cn", "Cs", "Zl", "Zp", "Zs"})


def visible(text: str) -> str:
    """``text`` with every character a reader cannot see written as a JSON escape (``\\u200b``,
    ``\\U0001f3f4`` style above U+FFFF as ``\\ud83c\\udff4``), so that ``"segment\\u200b-size"``
    in a message does not read as ``segment-size``. Plain ASCII text is returned as it is."""
    if text.isascii():
        return text
    out = []
    for ch in text:
        if ch != " " and unicodedata.category(ch) in _INVISIBLE:
            out.append(json.dumps(ch))  # "\uXXXX" (a surrogate pair above U+FFFF), quotes stripped below
            out[-1] = out[-1][1:-1]
        else:
            out.append(ch)
    return "".join(out)


def json_type(value: Any) -> str:
    """The JSON (YAML) type of a parsed value, in words: ``"an object"``, ``"an array"``,
    ``"a string"``, ``"a number"``, ``"a boolean"``, ``"null"`` (YAML only: ``"binary data"``). Messages say these, never Python's ``dict``/``int``/``None``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (dict, Mapping)):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, (bytes, bytearray)):
        return "binary data"
    return "a value"


def key_text(key: Any) -> str:
    """A map key as text: a string as it is, another scalar as its JSON text (``1``, ``true``,
    ``null``), as sigs.k8s.io/yaml turns YAML keys into JSON keys."""
    if isinstance(key, str):
        return key
    try:
        converted = _leaf(key)
    except _NotJSON:
        return "a key that is not JSON"
    return converted if isinstance(converted, str) else json.dumps(converted)


def key_field(map_field: str, key: str) -> str:
    """Field path of one map entry: ``key_field("metadata.annotations", "a/b")`` →
    ``metadata.annotations["a/b"]``; a key's non-ASCII characters are written as JSON escapes
    (a label or annotation key is ASCII in Kubernetes, so ``kai.scheduler/segment\\u2010size``
    with a Unicode hyphen, or a zero-width space, is shown for what it is)."""
    if not key.isascii():
        key = json.dumps(key)[1:-1]
    return f'{map_field}["{key}"]'


def join_field(parent: str, child: str) -> str:
    """``join_field("", "metadata")`` → ``metadata``; ``join_field("spec", "x")`` → ``spec.x``."""
    return f"{parent}.{child}" if parent else child




def render(field_path: str, value: Any, problem: str, rule_id: str, fix: str) -> str:
    """The house message: ``<field> = <value>: <problem> (rule <rule_id>); fix: <fix>.``
    (``<field> is not set: …`` when ``value`` is :data:`UNSET`)."""
    subject = f"{field_path} is not set" if value is UNSET else f"{field_path} = {quote(value)}"
    return f"{subject}: {problem} (rule {rule_id}); fix: {fix}."


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` is a likely misspelling of, for a "did you mean" (letter case not
    counted; :func:`difflib.get_close_matches` with cutoff 0.8: ``PyTorchJobb`` -> ``PyTorchJob``,
    ``workerPerSegment`` -> ``workersPerSegment``, ``ConfigMap`` -> nothing), else ``None``."""
    lowered = {candidate.lower(): candidate for candidate in candidates}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.8)
    return lowered[match[0]] if match else None


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun with an ``s`` unless ``count`` is 1: ``"1 pod"``, ``"2 pods"``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
