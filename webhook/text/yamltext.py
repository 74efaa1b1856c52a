"""The YAML loader of the package: PyYAML's libyaml ``CSafeLoader`` (``SafeLoader`` when libyaml
is missing) with timestamps read as the text they were written as, as kubectl reads YAML.

Every YAML reader of the package builds on :class:`TextTimestampLoader`: the manifest reader
(``webhook.planning.manifests.UniqueKeyLoader`` adds kubectl's duplicate-key rule) and
:func:`webhook.topology.objects.load_topology_text`. PyYAML's own loaders are left untouched. Both
word a text PyYAML cannot read with :func:`yaml_error_text` (line, column, problem, fix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # the stubs always have libyaml's loader
    _BaseLoader = yaml.CSafeLoader
else:  # PyYAML built without libyaml has no CSafeLoader
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


def _timestamp_as_text(loader: Any, node: Any) -> str:
    """A YAML timestamp (``2024-01-01``, ``2024-01-01T10:00:00Z``) as the text it was written as.

    kubectl converts YAML to JSON with go-yaml v2, which keeps timestamp-like scalars as strings
    when decoding into an untyped value (its decoder says so: "for backward compatibility reasons
    we set it as a string"), so the API server, and the webhook behind it, receive the string
    ``"2024-01-01T10:00:00Z"``. PyYAML would build a ``datetime``; reading the text instead keeps
    ``review`` and ``place`` answering what the cluster would (an unquoted date in an annotation is
    a valid string there, not a type error)."""
    text: str = loader.construct_scalar(node)
    return text


class TextTimestampLoader(_BaseLoader):
    """``CSafeLoader`` (``SafeLoader`` without libyaml) that reads timestamps as text."""


TextTimestampLoader.add_constructor(TIMESTAMP_TAG, _timestamp_as_text)


#: Whether :class:`TextTimestampLoader` is libyaml's: its reader reports the offset of a bad
#: character in bytes of the UTF-8 text, the pure-Python reader in characters.
_LIBYAML = hasattr(yaml, "CSafeLoader")

#: PyYAML's ``context`` of a syntax error (libyaml's words) → where the construct it was reading
#: started, in plain words; other contexts ("while scanning for the next token") are the
#: parser's internals and are left out of the message.
_CONTEXT_WORDS = {
    "while scanning a simple key": "for the key that starts at",
    "while scanning a quoted scalar": "in the quoted text that starts at",
    "while scanning a block scalar": "in the | or > text block that starts at",
    "while scanning a plain scalar": "in the value that starts at",
    "while scanning an anchor": "in the anchor (&) that starts at",
    "while scanning an alias": "in the alias (*) that starts at",
    "while scanning a tag": "in the tag (!) that starts at",
    "while scanning a directive": "in the directive (%) that starts at",
    "while parsing a block mapping": "in the mapping that starts at",
    "while parsing a block collection": "in the list that starts at",
    "while parsing a flow sequence": "in the [ ] list that starts at",
    "while parsing a flow mapping": "in the { } mapping that starts at",
    "while parsing a block node": "in the value that starts at",
    "while parsing a flow node": "in the value that starts at",
    "while constructing a mapping": "in the mapping that starts at",
    "found duplicate anchor; first occurrence": "an anchor defined twice; its first definition is at",
}

#: The closing character of a flow collection, by the context that names its opening.
_FLOW_CLOSE = {"while parsing a flow sequence": ("[", "]"), "while parsing a flow mapping": ("{", "}")}


def _where(line: int, column: int) -> str:
    """``line L, column C`` from 0-based PyYAML mark values."""
    return f"line {line + 1}, column {column + 1}"


def yaml_error_text(exc: yaml.YAMLError, text: str) -> str:
    """The house message for ``text`` that PyYAML (``exc``) could not read, without the file name:
    ``line L, column C: not valid YAML: <problem> (<where the construct started>)`` and a second
    line ``fix: ...`` saying what to change at that line. PyYAML's own problem text is kept (it is
    libyaml's, and reads plainly: ``could not find expected ':'``); its ``in "<unicode string>"``
    marks become the line and column, and its internal context lines are dropped or said in words
    (:data:`_CONTEXT_WORDS`). A bad character (PyYAML's ``ReaderError``) is placed the same way."""
    if isinstance(exc, yaml.reader.ReaderError):
        return _reader_error_text(exc, text)
    problem = str(getattr(exc, "problem", None) or exc).strip()
    context = getattr(exc, "context", None)
    mark, start = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    if mark is None:  # pragma: no cover - every syntax error of a text has its mark
        return f"not valid YAML: {problem}\nfix: {_GENERAL_FIX}"
    same_place = start is not None and (start.line, start.column) == (mark.line, mark.column)
    words = _CONTEXT_WORDS.get(str(context)) if start is not None and not same_place else None
    started = f" ({words} {_where(start.line, start.column)})" if words and start is not None else ""
    return (f"{_where(mark.line, mark.column)}: not valid YAML: {problem}{started}\n"
            f"fix: {_yaml_fix(problem, str(context), mark, start, text)}")


#: What to check at a line when the problem has no fix of its own (YAML's rules of block style).
_GENERAL_FIX = ("the keys of one mapping start in the same column, the items ('- ') of one list too, "
                "and a value holding ': ' or ' #' is quoted")


#: The fix of a problem (PyYAML's text starts with the first member), at ``{line}`` / ``{at}``
#: (``line L, column C``) of the problem; a problem not listed gets the indentation and quoting check.
_PROBLEM_FIXES = (
    ("mapping values are not allowed",
     "quote the value at line {line} if it holds ': ', or move a nested key to a line of its own, indented under a "
     "key that has no value"),
    ("did not find expected node content", "give the value expected at {at}, and close every [ or {{ opened before it"),
    ("found character that cannot start any token", "quote the value at line {line}: a plain value cannot start with @ or `"),
    ("could not determine a constructor for the tag",
     "remove the tag (!...) at line {line}, or quote the value if the ! belongs to it"),
    ("expected a mapping or list of mappings for merging",
     "a merge key (<<) takes a mapping, or a list of mappings, and the value at line {line} is not one: merge a "
     "mapping's anchor, or write the keys out"),
    ("found unhashable key",
     "write the key at line {line} as a plain string (a key of a Kubernetes object is a string, never a list or a "
     "mapping)"),
    ("found undefined alias",
     "define the anchor (&name) before the alias (*name) at line {line}, or quote the value if the * belongs to it"),
)


def _yaml_fix(problem: str, context: str, mark: Any, start: Any, text: str) -> str:
    """The ``fix:`` of :func:`yaml_error_text`: a tab in the indentation (the commonest mistake,
    which libyaml words obscurely), then the fix of the problem or of its context, else what to
    check at the line."""
    tab = tab_fix(text, mark.line, mark.column)
    if tab:
        return tab
    line = mark.line + 1
    if context == "while scanning a quoted scalar" and start is not None:
        return f"close the quote that opens at {_where(start.line, start.column)} with the same quote character"
    if context in _FLOW_CLOSE and start is not None:
        opening, closing = _FLOW_CLOSE[context]
        return (f"close the {opening} at {_where(start.line, start.column)} with {closing}, and separate its "
                "items with commas")
    if context == "while scanning a simple key" and start is not None:
        return (f"line {start.line + 1} is read as a key but has no ':' after it: add ': ' after the key, or, "
                "when the line continues the value above it, indent it under that value or quote the value")
    for start_of_problem, fix in _PROBLEM_FIXES:
        if problem.startswith(start_of_problem):
            return fix.format(line=line, at=_where(mark.line, mark.column))
    return f"check the indentation and quoting at line {line}: {_GENERAL_FIX}"


def tab_fix(text: str, line: int, column: int) -> str:
    """A fix for the commonest YAML mistake PyYAML words obscurely: a tab where YAML allows only
    spaces (YAML 1.1/1.2 forbid tabs in indentation), at the 0-based ``line`` up to ``column``.
    Empty when there is no tab there."""
    lines = text.splitlines()
    content = lines[line] if 0 <= line < len(lines) else ""
    if "\t" not in content[: column + 1]:
        return ""
    return (f"line {line + 1} has a tab character; YAML indentation must use spaces, "
            "so replace the tab with spaces")


def _reader_error_text(exc: yaml.reader.ReaderError, text: str) -> str:
    """:func:`yaml_error_text` of a character YAML does not allow (a control character: the file
    is likely binary). libyaml gives its offset in bytes of the UTF-8 text."""
    offset = exc.position
    if _LIBYAML:
        offset = len(text.encode("utf-8")[:offset].decode("utf-8", errors="ignore"))
    before = text[:offset]
    line, column = before.count("\n"), offset - (before.rfind("\n") + 1)
    character = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
    return (f"{_where(line, column)}: not valid YAML: character {character}: {exc.reason}\n"
            f"fix: remove the character at {_where(line, column)}; a manifest is text (is this a binary file?)")
