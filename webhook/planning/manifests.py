"""Reading Kubernetes manifests and ``kubectl get -o yaml|json`` dumps: the one reader behind
``review -f``, ``place -f``/``--cluster``/``--topology-file`` and ``serve``/``review``
``--topology-file``.

Text is JSON when its first non-whitespace character is ``{`` or ``[`` (parsed with :mod:`json`;
a text that is not valid JSON after all, such as a YAML flow mapping, is read as YAML), else a
YAML stream parsed with PyYAML's libyaml ``CSafeLoader`` (the pure-Python ``SafeLoader``, far
slower on large dumps, when libyaml is missing; docs/tasks/benchmarks.md "Reading cluster dumps: JSON, YAML and the duplicate-key check"). ``kind: List`` (and
``*List``) objects are flattened into their items by :func:`flatten`. Every error is a
:class:`ManifestError` whose message starts with the file name. This module reads files, so it
lives outside the pure core.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml

from webhook.errors import SegmentWebhookError
from webhook.text.messages import json_type, key_text, quote
from webhook.text.yamltext import TextTimestampLoader, yaml_error_text

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(SegmentWebhookError, yaml.YAMLError):
    """A mapping that holds one key twice (``key``; 1-based ``line`` of the second one and
    ``first_line`` of the first, ``0`` when unknown). kubectl rejects such a file ("mapping key
    ... already defined"); PyYAML and :mod:`json` would keep the last value silently."""

    def __init__(self, key: Any, line: int, first_line: int = 0) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.line, self.first_line = key, line, first_line


class UniqueKeyLoader(TextTimestampLoader):
    """PyYAML's libyaml ``CSafeLoader`` (``SafeLoader`` without libyaml) reading timestamps as
    text (:class:`webhook.text.yamltext.TextTimestampLoader`, as kubectl does), whose mapping
    construction rejects a key that appears twice in one mapping (:class:`DuplicateKeyError`).
    Parsing stays in libyaml; only the (already Python) construction step checks. Merge keys
    (``<<``) keep YAML's meaning: the mapping's own keys override merged ones."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for position, (key_node, value_node) in enumerate(node.value):
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=deep)  # cached: built once
                if isinstance(key_node, yaml.ScalarNode) and not isinstance(key, str):
                    # kubectl (sigs.k8s.io/yaml) makes every key a JSON string: 1 → "1", true →
                    # "true"; so do we (in Python 1 and True would be one key)
                    key = key_text(key)
                    node.value[position] = (yaml.ScalarNode(_STR_TAG, key, key_node.start_mark, key_node.end_mark),
                                            value_node)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeConstructor reports it
                    continue
                if first is not None:
                    raise DuplicateKeyError(key, line, first)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


_Loader = UniqueKeyLoader
_STR_TAG = "tag:yaml.org,2002:str"

#: The message for input nested deeper than any Kubernetes object: Python's recursion limit, the
#: review's depth check and libyaml's own nesting limit (PyYAML >= 6.0.4) all give this one text.
NESTED_TOO_DEEPLY = ("nested too deeply to be a Kubernetes object; fix: give the manifest kubectl would apply "
                     "(kubectl get -o yaml of the object)")

#: libyaml's wording (PyYAML 6.0.4's bundled libyaml) when flow or block nesting passes its limit.
_NESTING_LIMIT_PROBLEM = "exceeded maximum nesting depth"

#: The name ``-`` reads standard input.
STDIN = "-"


class ManifestError(SegmentWebhookError, ValueError):
    """An unreadable or unusable manifest file.

    ``source``: the file name (``-`` for stdin); ``str(error)`` is ``"<source>: <message>"``.
    """

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source


#: The most bytes one input file (or stdin) is read to: far above a 10,000-node, 100,000-pod
#: ``kubectl get -o yaml`` dump, so that ``-f /dev/zero`` or an endless pipe ends with an error
#: instead of taking the machine's memory.
MAX_INPUT_BYTES = 1024 * 2**20


def read_text(path: str) -> str:
    """The UTF-8 text of ``path`` (``-`` = stdin), with line ends read as Python's text mode reads
    them (``\r\n`` and ``\r`` become ``\n``), at most :data:`MAX_INPUT_BYTES`. Raises :class:`ManifestError`: ``cannot read:
    <reason>``; ``not UTF-8 text: byte 0xNN at line L, column C (<reason>)`` with a fix
    (:func:`_not_utf8_message`), the byte counted in the whole file."""
    try:
        if path == STDIN:
            stdin_bytes = getattr(sys.stdin, "buffer", None)
            if stdin_bytes is None:  # a text stream put in place of stdin (tests): already decoded
                return sys.stdin.read()
            data: bytes = stdin_bytes.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_INPUT_BYTES + 1)
    except IsADirectoryError:
        raise ManifestError(path, "cannot read: Is a directory; fix: give one file (or - for stdin), e.g. "
                                  f"cat {path.rstrip('/')}/*.yaml | segment-webhook ... -f - (a directory is not read "
                                  "as kubectl -f DIR reads it)") from None
    except OSError as exc:
        raise ManifestError(path, f"cannot read: {exc.strerror}; fix: give the path of a readable YAML or JSON "
                                  "file, or - to read standard input") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ManifestError(path, f"larger than {MAX_INPUT_BYTES:,} bytes (reading stopped there); fix: give a "
                                  "manifest or a kubectl dump, not a device or an endless stream (a dump this large: "
                                  "split it, e.g. kubectl get nodes -o yaml and kubectl get pods -A -o yaml apart)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(path, _not_utf8_message(data, exc)) from None
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _not_utf8_message(data: bytes, exc: UnicodeDecodeError) -> str:
    """``not UTF-8 text: byte 0xNN at line L, column C (<codec reason>)`` and a fix, for the file
    bytes ``data`` whose decoding failed with ``exc`` (its ``start`` is an offset in ``data``)."""
    before = data[: exc.start].decode("utf-8")
    line_start = before.rfind("\n") + 1
    line, column = before.count("\n") + 1, len(before) - line_start + 1
    return (f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column} ({exc.reason})\n"
            "fix: give a YAML or JSON manifest saved as UTF-8 (is this a binary file, or text saved as "
            "Latin-1 or UTF-16?)")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json`` ``object_pairs_hook``: the object, or :class:`DuplicateKeyError` (line unknown
    here; :func:`_json_duplicate_line` finds it) when a key appears twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key, 0)
            seen.add(key)
    return obj


def _json_duplicate_line(text: str) -> DuplicateKeyError:
    """The first duplicate key of the JSON ``text`` with the line of the object holding it (only
    on this error path). :mod:`json` calls ``object_pairs_hook`` as each object closes, so the
    n-th call is the object whose ``}`` is the n-th of the text outside strings
    (:func:`_object_line` finds its ``{``)."""
    closed = 0

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal closed
        closed += 1
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                line = _object_line(text, closed)
                raise DuplicateKeyError(key, line, line)
            seen.add(key)
        return dict(pairs)

    try:
        json.loads(text, object_pairs_hook=hook)
    except DuplicateKeyError as exc:
        return exc
    return DuplicateKeyError("?", 0)  # pragma: no cover - the fast parse found one


#: A JSON string (quotes and backslash escapes), or one brace outside strings
_JSON_STRING_OR_BRACE = re.compile(r'"(?:[^"\\]|\\.)*"|[{}]')


def _object_line(text: str, closing: int) -> int:
    """The 1-based line of the ``{`` of the object whose ``}`` is the ``closing``-th (1-based) of
    the JSON ``text`` outside strings; 0 when there is no such object."""
    opened: list[int] = []
    count = 0
    for match in _JSON_STRING_OR_BRACE.finditer(text):
        token = match.group()
        if token == "{":
            opened.append(match.start())
        elif token == "}" and opened:
            start = opened.pop()
            count += 1
            if count == closing:
                return text.count("\n", 0, start) + 1
    return 0


def _duplicate_message(exc: DuplicateKeyError, json_text: bool) -> str:
    """``line N: mapping key "K" already defined at line M`` (kubectl's words) and a fix."""
    key = json.dumps(key_text(exc.key))
    if json_text:
        where = f"line {exc.line}: object has the key {key} twice" if exc.line else f"object has the key {key} twice"
        return (f"{where} (kubectl rejects duplicate keys)\nfix: keep one {key} in that object")
    return (f"line {exc.line}: mapping key {key} already defined at line {exc.first_line} "
            "(kubectl rejects duplicate keys)\n"
            f"fix: keep one {key} in that mapping; if the file joins two objects (cat a.yaml b.yaml), "
            "put a line --- between them")


def _is_json(text: str) -> bool:
    stripped = text.lstrip()
    return stripped[:1] in ("{", "[")


def parse_documents(text: str, source: str, *, json_duplicates: bool = True) -> list[Any]:
    """The documents of a YAML stream or a JSON text (one document); empty YAML documents are
    ``None``. A key that appears twice in one mapping or JSON object is an error (kubectl's
    rule; PyYAML and :mod:`json` would keep the last value silently). ``json_duplicates=False``
    skips that check for JSON text only (cluster dumps from ``kubectl get -o json``, which never
    holds a duplicate: the ``object_pairs_hook`` slows their load, README "Duplicate keys are
    rejected" gives the figures; YAML is always checked). Raises
    :class:`ManifestError` naming ``source``: ``line N: mapping key "K" already defined at line
    M`` (JSON: ``line N: object has the key "K" twice``) with a fix; ``line L, column C: not valid
    YAML: <problem>`` or ``... not valid JSON: <problem>`` with a ``fix:`` line
    (:func:`syntax_error_message`); ``a number has more than 4300 digits`` (Python's integer
    conversion limit); ``nested too deeply to be a Kubernetes object``."""
    json_error: json.JSONDecodeError | None = None
    try:
        if _is_json(text):
            try:
                if not json_duplicates:
                    return [json.loads(text)]
                return [json.loads(text, object_pairs_hook=_unique_pairs)]
            except json.JSONDecodeError as exc:
                json_error = exc  # e.g. a YAML flow mapping ``{a: 1}`` or a stream: read it as YAML
            except DuplicateKeyError:
                raise ManifestError(source, _duplicate_message(_json_duplicate_line(text), True)) from None
        documents = list(yaml.load_all(text, Loader=_Loader))
        if "*" in text:  # an alias is written ``*name``: without one no node is shared
            for number, document in enumerate(documents, 1):
                excess = excessive_aliasing(document)
                if excess is not None:
                    where = f"document {number}: " if len(documents) > 1 else ""
                    raise ManifestError(source, f"{where}{excess}")
        return documents
    except ManifestError:
        raise
    except DuplicateKeyError as exc:
        raise ManifestError(source, _duplicate_message(exc, False)) from None
    except yaml.YAMLError as exc:
        if _NESTING_LIMIT_PROBLEM in str(getattr(exc, "problem", "") or ""):
            raise ManifestError(source, NESTED_TOO_DEEPLY) from None
        raise ManifestError(source, syntax_error_message(text, exc, json_error)) from None
    except RecursionError:
        raise ManifestError(source, NESTED_TOO_DEEPLY) from None
    except ValueError:  # an integer of more than 4,300 digits (Python's conversion limit)
        raise ManifestError(source, "a number has more than 4300 digits") from None


#: What to check in JSON text at the line of its error (the mistakes :mod:`json` reports).
_JSON_FIX = ("a comma between items and none after the last, every key and string in double quotes, "
             "every { and [ closed")


def syntax_error_message(text: str, yaml_error: yaml.YAMLError, json_error: json.JSONDecodeError | None) -> str:
    """The message for ``text`` that is neither valid YAML (``yaml_error``) nor, when it looks like
    JSON (starts with ``{`` or ``[``), valid JSON (``json_error``): ``line L, column C: not valid
    JSON: <json's problem>`` and ``fix: check the JSON at line L: ...`` when JSON read at least as
    far as YAML did (the text is meant as JSON), else
    :func:`webhook.text.yamltext.yaml_error_text` (a YAML flow mapping such as ``{a: 1``)."""
    mark = getattr(yaml_error, "problem_mark", None)
    yaml_reached = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    if json_error is not None and (json_error.lineno, json_error.colno) >= yaml_reached:
        return (f"line {json_error.lineno}, column {json_error.colno}: not valid JSON: {json_error.msg}\n"
                f"fix: check the JSON at line {json_error.lineno}: {_JSON_FIX}")
    return yaml_error_text(yaml_error, text)


#: A document's aliases may make at most this many times its distinct nodes ...
ALIAS_EXPANSION_LIMIT = 10
#: ... once it has more than this many nodes in all (smaller documents are cheap to walk whatever
#: their aliases).
ALIAS_NODES_FLOOR = 1_000_000


def excessive_aliasing(document: Any) -> str | None:
    """Why ``document`` (as PyYAML built it: an alias is the same Python object as its anchor)
    expands to too many nodes through its aliases, or None.

    Counted on the built object, each shared mapping or list once: ``decoded``, every node (mapping,
    list, value) with each alias expanded, as a walk of the object visits them; ``distinct``, the
    nodes with every shared one counted once. Refused when ``decoded`` is over
    :data:`ALIAS_NODES_FLOOR` and over :data:`ALIAS_EXPANSION_LIMIT` times ``distinct``: a "billion
    laughs" document (10 levels of 10 aliases is 10^11 nodes from 27) that every later walk would
    visit in full. kubectl's YAML reader (go-yaml ``decoder.unmarshal``, ``allowedAliasRatio``)
    refuses such a document too: more than 90% of its nodes come through aliases, over the 84% it
    allows past a million nodes. A dump whose objects share parts (PyYAML's dumper writes an
    anchor for every object it meets twice: 4.9 million nodes of 3.9 million distinct ones in
    ``benchmarks/placement.py``'s 10,000-node YAML) is read. Linear in the distinct nodes;
    iterative, so any depth works."""
    sizes: dict[int, int] = {}  # id of a mapping or list → nodes in its expansion
    written = 0  # nodes with every shared mapping or list counted once
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        node, children_done = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None or (id(node) in sizes and not children_done):
            continue
        if not children_done:
            sizes[id(node)] = 0  # on the stack: a cycle (PyYAML builds none from a document) counts once
            stack.append((node, True))
            stack.extend((child, False) for child in children if isinstance(child, (dict, list)))
            continue
        size = 1
        written += 1
        for child in children:
            if isinstance(child, (dict, list)):
                size += sizes[id(child)]
            else:
                size += 1
                written += 1
        sizes[id(node)] = size
    decoded, distinct = sizes.get(id(document), 1), max(written, 1)
    if decoded > ALIAS_NODES_FLOOR and decoded > ALIAS_EXPANSION_LIMIT * distinct:
        return (f"excessive aliasing: its YAML aliases (*name) make {decoded} nodes of {distinct} distinct ones, "
                f"more than {ALIAS_EXPANSION_LIMIT} times as many (kubectl refuses it too: \"document contains "
                "excessive aliasing\"); fix: write the repeated parts out instead of aliasing aliases")
    return None


def deeper_than(value: Any, limit: int) -> bool:
    """Whether mappings and lists in ``value`` nest more than ``limit`` levels (a scalar is 0, ``{}``
    is 1). Iterative, so it works on any depth the C loader builds."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def load_documents(path: str, *, json_duplicates: bool = True) -> list[Any]:
    """:func:`read_text` then :func:`parse_documents`. Raises :class:`ManifestError`."""
    return parse_documents(read_text(path), path, json_duplicates=json_duplicates)


def _list_item_kind(kind: Any) -> str | None:
    """The kind of the items of a typed list (``NodeList`` → ``Node``), ``None`` for ``List``."""
    if isinstance(kind, str) and kind.endswith("List") and len(kind) > len("List"):
        return kind[: -len("List")]
    return None


def flatten(documents: Iterable[Any], source: str, where: str = "", item_kind: str | None = None,
            ) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(location, object)`` for every Kubernetes object of ``documents``: ``kind: List`` /
    ``*List`` objects (and kind-less objects with ``items``) are replaced by their items, empty
    documents skipped. Items of a typed list without a ``kind`` of their own (the raw API's
    ``NodeList``, ``PodList``, ``TopologyList`` carry none) get the list's item kind (``Node``,
    ``Pod``, ``Topology``); ``item_kind`` is that kind while flattening a list's items.
    ``location`` is ``document N`` (1-based), and ``document N.items[i]`` for an item of a list. Raises :class:`ManifestError` naming ``source``
    and the location when a document is not a mapping, ``items`` is not an array, or an object
    has no ``kind``."""
    for i, doc in enumerate(documents):
        if doc is None:
            continue
        here = f"{where}items[{i}]" if where else f"document {i + 1}"
        if not isinstance(doc, Mapping):
            hint = (' (objects in a bare array? put them in a List: {"apiVersion": "v1", "kind": "List", "items": [...]})'
                    if isinstance(doc, list) and not where else
                    "; fix: give Kubernetes objects, each a mapping with apiVersion, kind and metadata "
                    "(is this the right file?)")
            raise ManifestError(source, f"{here}: expected a Kubernetes object, got {json_type(doc)} {quote(doc)}{hint}")
        if "items" in doc and (doc.get("kind") in (None, "List") or str(doc.get("kind", "")).endswith("List")):
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                raise ManifestError(source, f"{here}: items must be an array of objects, got {json_type(items)}")
            yield from flatten(items, source, f"{here}.", _list_item_kind(doc.get("kind")))
            continue
        if "kind" not in doc:
            if item_kind is None:
                raise ManifestError(source, f"{here}: object has no kind; fix: give it its apiVersion and kind "
                                            "(e.g. apiVersion: kubeflow.org/v1, kind: PyTorchJob), as kubectl dumps them")
            doc = {"kind": item_kind, **doc}
        yield here, doc


def object_source(path: str, location: str, count: int) -> str:
    """Where an object was read, for messages: ``<path>: <location>`` (``a.yaml: document 2``, the
    :func:`flatten` location) when the input holds ``count`` objects, more than one; the file name
    alone for the one object of one file. ``place -f`` and ``review -f`` name objects so."""
    return f"{path}: {location}" if count > 1 else path


def load_objects(path: str, *, json_duplicates: bool = True) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``(location, object)`` pairs of the file ``path`` (:func:`load_documents` then
    :func:`flatten`; ``json_duplicates``: see :func:`parse_documents`). Raises
    :class:`ManifestError`."""
    return list(flatten(load_documents(path, json_duplicates=json_duplicates), path))


def load_topology_files(paths: Iterable[str]) -> Any:
    """The ``StaticTopologyCatalog`` of the Topology objects in ``paths`` (other kinds skipped),
    read as ``place --topology-file`` reads them (:func:`load_objects`: ``List`` and typed
    ``TopologyList`` items flattened, each object named by its ``document N``).

    Raises :class:`ManifestError` naming the file (and the document) for unreadable input, a
    document that is not an object, and a malformed Topology (the rule is
    ``webhook.topology.objects.Topology.from_object``'s).
    """
    from webhook.topology.objects import TOPOLOGY_KIND, StaticTopologyCatalog, Topology, TopologyError, defined_twice

    topologies: dict[str, Any] = {}
    where: dict[str, str] = {}
    for path in paths:
        for here, obj in load_objects(path):
            if obj.get("kind") != TOPOLOGY_KIND:
                continue
            try:
                topo = Topology.from_object(obj)
            except TopologyError as exc:
                raise ManifestError(path, f"{here}: {exc}") from None
            # as place --cluster: one name, one set of levels (an identical copy is fine)
            if topo.name in topologies and topologies[topo.name] != topo:
                raise ManifestError(path, defined_twice(topologies[topo.name], str(where[topo.name]), topo))
            topologies.setdefault(topo.name, topo)
            where.setdefault(topo.name, path)
    return StaticTopologyCatalog(topologies.values())
