"""How the webhook writes values and field paths into messages (one house format, DESIGN.md §5).

A denial reads ``<field> = <value>: <problem> (rule <id>); fix: <fix>.``; a field that is not set
reads ``<field> is not set: …``. Values are JSON-quoted so ``" 4"`` and ``""`` stay visible, and
JSON ``null`` never appears: an absent value is said in words.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import Any


class _Unset:
    """Marker for "the field is not set" (rendered in words, never as ``null``/``None``)."""

    def __repr__(self) -> str:
        return "UNSET"


#: Pass as a value when the field is absent.
UNSET: Any = _Unset()


def quote(value: Any) -> str:
    """Render a value for a message: strings JSON-quoted (``" 4"``, ``""`` stay visible),
    other JSON values as JSON (``4``, ``true``, ``null``, ``{...}`` shortened to 60 chars).

    Never a Python repr. Values a YAML loader makes that JSON has no type for are shown as
    kubectl would send them (its YAML reader turns them into JSON first) and, at the top level,
    named by their YAML type, so ``must be a string`` never reads as if they were strings:
    ``!!binary`` as its base64 text ``(YAML binary)``, ``!!set`` as a map of nulls ``(YAML set)``,
    ``.nan`` / ``.inf`` ``(YAML float)``. Map keys that are not strings become their JSON text
    (``1`` → ``"1"``), as sigs.k8s.io/yaml does."""
    if value is None or isinstance(value, (str, bool, int)):
        return _short(json.dumps(value, ensure_ascii=False))
    try:
        text = json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return "a value that is not JSON"
    yaml_type = _yaml_type(value)
    if yaml_type is None:
        return _short(text)
    if isinstance(value, (bytes, bytearray, float)):  # JSON strings: shown bare
        text = json.loads(text)
    return f"{_short(text)} ({yaml_type})"


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


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


def _jsonable(value: Any) -> Any:
    """``value`` as the JSON kubectl would send for it (see :func:`quote`). Raises ``TypeError``
    for a value no YAML loader makes."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _SPECIAL_FLOATS[str(value)]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return {key_text(k): None for k in value}
    if isinstance(value, Mapping):
        return {key_text(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    raise TypeError(f"not a YAML value: {type(value).__name__}")


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
        converted = _jsonable(key)
    except TypeError:
        return "a key that is not JSON"
    return converted if isinstance(converted, str) else json.dumps(converted, sort_keys=True, ensure_ascii=False)


def key_field(map_field: str, key: str) -> str:
    """Field path of one map entry: ``key_field("metadata.annotations", "a/b")`` →
    ``metadata.annotations["a/b"]``."""
    return f'{map_field}["{key}"]'


def join_field(parent: str, child: str) -> str:
    """``join_field("", "metadata")`` → ``metadata``; ``join_field("spec", "x")`` → ``spec.x``."""
    return f"{parent}.{child}" if parent else child




def render(field_path: str, value: Any, problem: str, rule_id: str, fix: str) -> str:
    """The house message: ``<field> = <value>: <problem> (rule <rule_id>); fix: <fix>.``
    (``<field> is not set: …`` when ``value`` is :data:`UNSET`)."""
    subject = f"{field_path} is not set" if value is UNSET else f"{field_path} = {quote(value)}"
    return f"{subject}: {problem} (rule {rule_id}); fix: {fix}."
