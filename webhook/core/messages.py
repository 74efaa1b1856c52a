"""How the webhook writes values and field paths into messages (one house format, DESIGN.md §5).

A denial reads ``<field> = <value>: <problem> (rule <id>); fix: <fix>.``; a field that is not set
reads ``<field> is not set: …``. Values are JSON-quoted so ``" 4"`` and ``""`` stay visible, and
JSON ``null`` never appears: an absent value is said in words.
"""

from __future__ import annotations

import json
from typing import Any


class _Unset:
    """Marker for "the field is not set" (rendered in words, never as ``null``/``None``)."""

    def __repr__(self) -> str:
        return "UNSET"


#: Pass as a value when the field is absent.
UNSET: Any = _Unset()


def quote(value: Any) -> str:
    """Render a value for a message: strings JSON-quoted (``" 4"``, ``""`` stay visible),
    other JSON values as JSON (``4``, ``true``, ``null``, ``{...}`` shortened to 60 chars)."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
