"""webhook.planning.manifests: the one reader of manifests and kubectl dumps."""

from __future__ import annotations

import pytest
import yaml
import yaml.scanner

from tests.support.bounded_work import Visits, list_bomb, map_bomb
from webhook.planning import manifests
from webhook.planning.manifests import ManifestError
from webhook.text.messages import json_type, quote

#: the fix of a manifest nested too deeply (webhook/planning/manifests.py NESTED_TOO_DEEPLY)
DEEP_FIX = "; fix: give the manifest kubectl would apply (kubectl get -o yaml of the object)"


def test_json_is_detected_by_its_first_character_and_kept_as_one_document():
    text = '\n  {"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1"}}]}'
    docs = manifests.parse_documents(text, "nodes.json")
    assert docs == [{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1"}}]}]
    assert list(manifests.flatten(docs, "nodes.json")) == [("document 1.items[0]", {"kind": "Node", "metadata": {"name": "n1"}})]


def test_yaml_flow_mapping_starting_with_a_brace_is_read_as_yaml():
    assert manifests.parse_documents("{kind: Pod, metadata: {name: p}}\n", "pod.yaml") == [
        {"kind": "Pod", "metadata": {"name": "p"}}]


def test_yaml_stream_with_empty_documents():
    docs = manifests.parse_documents("kind: Pod\n---\n---\nkind: Node\n", "x.yaml")
    assert docs == [{"kind": "Pod"}, None, {"kind": "Node"}]
    assert [obj["kind"] for _, obj in manifests.flatten(docs, "x.yaml")] == ["Pod", "Node"]


@pytest.mark.parametrize("text, message", [
    ("a: [b\n", "line 2, column 1: not valid YAML: "),
    ("kind: Pod\nx: " + "9" * 5000 + "\n", "a number has more than 4300 digits"),
    ("[" * 5000 + "]" * 5000, "nested too deeply to be a Kubernetes object"),
])
def test_parse_errors_name_the_file(text, message):
    with pytest.raises(ManifestError) as caught:
        manifests.parse_documents(text, "bad.yaml")
    assert caught.value.source == "bad.yaml"
    assert str(caught.value).startswith("bad.yaml: " + message)


# ------------------------------------------------------------------ syntax errors: line, column, problem, fix
# (new-user trial: the messages quoted PyYAML's `in "<unicode string>", line 3, column 1` marks and
# its internal context lines)

GENERAL_FIX = ("the keys of one mapping start in the same column, the items ('- ') of one list too, and a value "
               "holding ': ' or ' #' is quoted")


@pytest.mark.parametrize("text, message", [
    ("apiVersion: v1\nkind: Pod\nmetadata\n  name: x\n",
     "line 4, column 7: not valid YAML: could not find expected ':' (for the key that starts at line 3, column 1)\n"
     "fix: line 3 is read as a key but has no ':' after it: add ': ' after the key, or, when the line continues "
     "the value above it, indent it under that value or quote the value"),
    ('kind: Pod\nmetadata: {name: "p}\n',
     "line 3, column 1: not valid YAML: found unexpected end of stream (in the quoted text that starts at line 2, "
     "column 18)\nfix: close the quote that opens at line 2, column 18 with the same quote character"),
    ("kind: Pod\nspec: {containers: [{name: c}\n",
     "line 3, column 1: not valid YAML: did not find expected ',' or ']' (in the [ ] list that starts at line 2, "
     "column 20)\nfix: close the [ at line 2, column 20 with ], and separate its items with commas"),
    ("kind: Pod\nmetadata:\n  name: p\n labels: {}\n",
     f"line 4, column 2: not valid YAML: did not find expected key (in the mapping that starts at line 1, column 1)\n"
     f"fix: check the indentation and quoting at line 4: {GENERAL_FIX}"),
    ("kind: Pod\nmetadata: {name: p}\ncommand: echo a: b\n",
     "line 3, column 16: not valid YAML: mapping values are not allowed in this context\n"
     "fix: quote the value at line 3 if it holds ': ', or move a nested key to a line of its own, indented under "
     "a key that has no value"),
    ("kind: Pod\nmetadata:\n\tname: p\n",
     "line 3, column 1: not valid YAML: found character that cannot start any token\n"
     "fix: line 3 has a tab character; YAML indentation must use spaces, so replace the tab with spaces"),
    ("kind: Pod\nimage: @latest\n",
     "line 2, column 8: not valid YAML: found character that cannot start any token\n"
     "fix: quote the value at line 2: a plain value cannot start with @ or `"),
    ("kind: Pod\nname: *p\n",
     "line 2, column 7: not valid YAML: found undefined alias\n"
     "fix: define the anchor (&name) before the alias (*name) at line 2, or quote the value if the * belongs to it"),
    ("kind: Pod\nname: !p x\n",
     "line 2, column 7: not valid YAML: could not determine a constructor for the tag '!p'\n"
     "fix: remove the tag (!...) at line 2, or quote the value if the ! belongs to it"),
    ("kind: Pod\nsize: &size 4\nmetadata:\n  <<: *size\n",
     "line 2, column 7: not valid YAML: expected a mapping or list of mappings for merging, but found scalar (in the "
     "mapping that starts at line 4, column 3)\nfix: a merge key (<<) takes a mapping, or a list of mappings, and the "
     "value at line 2 is not one: merge a mapping's anchor, or write the keys out"),
    ("kind: Pod\n? [a, b]\n: 1\n",
     "line 2, column 3: not valid YAML: found unhashable key (in the mapping that starts at line 1, column 1)\n"
     "fix: write the key at line 2 as a plain string (a key of a Kubernetes object is a string, never a list or a "
     "mapping)"),
    # a control character after a two-byte character: the column counts characters, not bytes
    ("kind: Pod\nname: é\x00\n",
     "line 2, column 8: not valid YAML: character #x0000: control characters are not allowed\n"
     "fix: remove the character at line 2, column 8; a manifest is text (is this a binary file?)"),
    # JSON text is worded as JSON (kubectl reads a text starting with { as JSON) ...
    ('{"kind": "Pod",\n "metadata": {"name": "p"}\n "spec": {}}\n',
     "line 3, column 2: not valid JSON: Expecting ',' delimiter\n"
     "fix: check the JSON at line 3: a comma between items and none after the last, every key and string in "
     "double quotes, every { and [ closed"),
    ('[{"kind": "Pod"}\n {"kind": "Node"}]\n',
     "line 2, column 2: not valid JSON: Expecting ',' delimiter\n"
     "fix: check the JSON at line 2: a comma between items and none after the last, every key and string in "
     "double quotes, every { and [ closed"),
    # ... unless YAML read further: a YAML flow mapping
    ("{kind: Pod, metadata: {name: p}\n",
     "line 2, column 1: not valid YAML: did not find expected ',' or '}' (in the { } mapping that starts at line 1, "
     "column 1)\nfix: close the { at line 1, column 1 with }, and separate its items with commas"),
])
def test_syntax_errors_name_line_column_problem_and_fix(text, message):
    with pytest.raises(ManifestError) as caught:
        manifests.parse_documents(text, "pod.yaml")
    assert str(caught.value) == f"pod.yaml: {message}"
    assert "<unicode string>" not in str(caught.value) and "while " not in str(caught.value)


def test_not_utf8_names_the_byte_its_line_and_column_in_the_whole_file(tmp_path):
    # the byte is placed in the whole file, not in the chunk the text reader decoded
    path = tmp_path / "pod.yaml"
    path.write_bytes(b"kind: Pod\r\n" + b"# padding\n" * 2000 + b"name: caf\xe9\n")
    with pytest.raises(ManifestError) as caught:
        manifests.load_documents(str(path))
    assert str(caught.value) == (
        f"{path}: not UTF-8 text: byte 0xe9 at line 2002, column 10 (invalid continuation byte)\n"
        "fix: give a YAML or JSON manifest saved as UTF-8 (is this a binary file, or text saved as Latin-1 or "
        "UTF-16?)")


def test_line_ends_are_read_as_text_mode_reads_them(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_bytes(b"kind: Pod\r\nmetadata:\r  name: p\r\n")
    assert manifests.read_text(str(path)) == "kind: Pod\nmetadata:\n  name: p\n"
    assert manifests.load_documents(str(path)) == [{"kind": "Pod", "metadata": {"name": "p"}}]


@pytest.mark.parametrize("docs, message", [
    (["hello"], 'bad.yaml: document 1: expected a Kubernetes object, got a string "hello"; fix: give Kubernetes objects, each a mapping with apiVersion, kind and metadata (is this the right file?)'),
    ([7], "bad.yaml: document 1: expected a Kubernetes object, got a number 7; fix: give Kubernetes objects, each a mapping with apiVersion, kind and metadata (is this the right file?)"),
    ([True], "bad.yaml: document 1: expected a Kubernetes object, got a boolean true; fix: give Kubernetes objects, each a mapping with apiVersion, kind and metadata (is this the right file?)"),
    ([["a"]], 'bad.yaml: document 1: expected a Kubernetes object, got an array ["a"] (objects in a bare array? put '
              'them in a List: {"apiVersion": "v1", "kind": "List", "items": [...]})'),
    ([{"kind": "List", "items": {"a": 1}}], "bad.yaml: document 1: items must be an array of objects, got an object"),
    ([{"apiVersion": "v1"}], "bad.yaml: document 1: object has no kind; fix: give it its apiVersion and kind "
                             "(e.g. apiVersion: kubeflow.org/v1, kind: PyTorchJob), as kubectl dumps them"),
])
def test_flatten_errors(docs, message):
    with pytest.raises(ManifestError) as caught:
        list(manifests.flatten(docs, "bad.yaml"))
    assert str(caught.value) == message


def test_read_errors(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ManifestError, match=f"^{missing}: cannot read: No such file or directory; fix: give the path"):
        manifests.load_documents(str(missing))
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"kind: \xff\n")
    with pytest.raises(ManifestError, match=f"^{binary}: not UTF-8 text: "):
        manifests.load_documents(str(binary))


def test_topology_files_skip_other_kinds_and_name_the_file_of_a_bad_topology(tmp_path):
    good = tmp_path / "t.yaml"
    good.write_text("kind: Node\nmetadata: {name: n}\n---\napiVersion: kai.scheduler/v1alpha1\nkind: Topology\n"
                    "metadata: {name: t}\nspec: {levels: [{nodeLabel: topology.kubernetes.io/zone}]}\n")
    assert manifests.load_topology_files([str(good)]).names() == ["t"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Topology\nmetadata: {name: t}\nspec: {levels: []}\n")
    with pytest.raises(ManifestError) as caught:
        manifests.load_topology_files([str(good), str(bad)])
    assert str(caught.value).startswith(f"{bad}: ")


@pytest.mark.parametrize("text, message", [
    # new-user trial: serve and review said "t.yaml: expected a Kubernetes object, got [1]", without the
    # document or the fix that place gives for the same file
    ("- 1\n", 'document 1: expected a Kubernetes object, got an array [1] (objects in a bare array? put them in a '
               'List: {"apiVersion": "v1", "kind": "List", "items": [...]})'),
    ("kind: Node\nmetadata: {name: n}\n---\nkind: Topology\napiVersion: kai.scheduler/v1alpha1\nmetadata: {name: t}\n"
     "spec: {levels: []}\n", 'document 2: Topology "t": spec.levels must be a non-empty list'),
])
def test_topology_file_errors_name_the_file_and_document_as_place_does(tmp_path, text, message):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as caught:
        manifests.load_topology_files([str(path)])
    assert str(caught.value) == f"{path}: {message}"


def test_a_raw_topology_list_is_read_as_place_reads_it(tmp_path):
    # the API's TopologyList carries no kind on its items (as kubectl get --raw gives it)
    path = tmp_path / "t.yaml"
    path.write_text("apiVersion: kai.scheduler/v1alpha1\nkind: TopologyList\nitems:\n- apiVersion: kai.scheduler/v1alpha1\n"
                    "  metadata: {name: t}\n  spec: {levels: [{nodeLabel: topology.kubernetes.io/zone}]}\n")
    assert manifests.load_topology_files([str(path)]).names() == ["t"]


def test_deeper_than():
    assert manifests.deeper_than({"a": [1]}, 1) is True
    assert manifests.deeper_than({"a": [1]}, 2) is False
    assert manifests.deeper_than(7, 0) is False


@pytest.mark.parametrize("text", [
    "kind: Pod\nspec: " + "[" * 5000 + "1" + "]" * 5000 + "\n",   # flow nesting
    "kind: Pod\nspec: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",  # flow mappings
])
def test_deep_nesting_has_one_message_on_every_pyyaml(text):
    # PyYAML 6.0.4's libyaml stops with "exceeded maximum nesting depth"; older versions build the
    # object and the review's depth check (or Python's recursion limit) stops it. One text for both.
    with pytest.raises(ManifestError) as caught:
        docs = manifests.parse_documents(text, "deep.yaml")
        if manifests.deeper_than(docs, 400):
            raise ManifestError("deep.yaml", manifests.NESTED_TOO_DEEPLY)
    assert str(caught.value) == "deep.yaml: nested too deeply to be a Kubernetes object" + DEEP_FIX


def test_libyaml_nesting_limit_error_becomes_nested_too_deeply(monkeypatch):
    # The libyaml error itself, raised whatever PyYAML is installed.
    def limit(*_args, **_kwargs):
        raise yaml.scanner.ScannerError("while increasing flow level", None,
                                        "exceeded maximum nesting depth", None)
    monkeypatch.setattr(yaml, "load_all", limit)  # the module webhook.planning.manifests reads with
    with pytest.raises(ManifestError) as caught:
        manifests.parse_documents("kind: Pod\n", "deep.yaml")
    assert str(caught.value) == "deep.yaml: nested too deeply to be a Kubernetes object" + DEEP_FIX


# ------------------------------------------------------------------ duplicate keys (kubectl rejects them)

DUP_FIX = ('fix: keep one "kai.scheduler/segment-size" in that mapping; if the file joins two objects '
           "(cat a.yaml b.yaml), put a line --- between them")


def test_duplicate_yaml_key_names_file_line_key_and_fix():
    text = ('kind: PyTorchJob\nmetadata:\n  annotations:\n    kai.scheduler/segment-size: "4x"\n'
            '    kai.scheduler/segment-size: "4"\n')
    with pytest.raises(ManifestError) as caught:
        manifests.parse_documents(text, "job.yaml")
    assert str(caught.value) == ('job.yaml: line 5: mapping key "kai.scheduler/segment-size" already defined at '
                                 "line 4 (kubectl rejects duplicate keys)\n" + DUP_FIX)


def test_two_objects_joined_without_separator_are_rejected():
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\napiVersion: v1\nkind: Pod\n"
    with pytest.raises(ManifestError, match='^two.yaml: line 4: mapping key "apiVersion" already defined at line 1 '):
        manifests.parse_documents(text, "two.yaml")


def test_duplicate_key_in_a_flow_mapping_on_one_line():
    with pytest.raises(ManifestError, match='^f.yaml: line 1: mapping key "a" already defined at line 1 '):
        manifests.parse_documents("{a: 1, a: 2}\n", "f.yaml")


def test_merge_keys_and_separate_documents_are_not_duplicates():
    text = "base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n---\nbase: 1\n"
    assert manifests.parse_documents(text, "m.yaml") == [
        {"base": {"x": 1, "y": 2}, "m": {"x": 3, "y": 2}}, {"base": 1}]


def test_duplicate_json_key_names_file_line_and_key():
    text = '{"apiVersion": "v1", "kind": "List", "items": [\n {"kind": "Pod",\n  "kind": "Node"}]}'
    with pytest.raises(ManifestError) as caught:
        manifests.parse_documents(text, "d.json")
    assert str(caught.value) == ('d.json: line 2: object has the key "kind" twice (kubectl rejects duplicate keys)\n'
                                 'fix: keep one "kind" in that object')


@pytest.mark.parametrize("text, line, key", [
    # the duplicate in the outer object, after inner objects (one with braces in its strings) closed
    ('{"a": {"b": 1},\n "c": {"d": "}{\\"}"},\n "a": 2}', 1, "a"),
    # the duplicate in the second of two sibling objects, on line 3
    ('[{"x": 1},\n {"y": 1},\n {"z": 1,\n  "z": 2}]', 3, "z"),
    # an inner object opened on line 2 holding the duplicate on line 4
    ('{"items": [\n {"kind": "Pod", "spec": {"c": "{"},\n  "m": 1,\n  "kind": "Node"}]}', 2, "kind"),
])
def test_duplicate_json_key_names_the_line_of_its_object(text, line, key):
    with pytest.raises(ManifestError) as caught:
        manifests.parse_documents(text, "d.json")
    assert str(caught.value) == (f'd.json: line {line}: object has the key "{key}" twice (kubectl rejects duplicate '
                                 f'keys)\nfix: keep one "{key}" in that object')


def test_cluster_dumps_skip_the_json_duplicate_check_only():
    # Decision: the JSON object_pairs_hook costs ~25% of the dump load (README), so `place --cluster`
    # and `controller --snapshot` read JSON dumps without it; YAML is always checked.
    assert manifests.parse_documents('{"a": 1, "a": 2}', "c.json", json_duplicates=False) == [{"a": 2}]
    with pytest.raises(ManifestError, match="already defined"):
        manifests.parse_documents("a: 1\na: 2\n", "c.yaml", json_duplicates=False)


@pytest.mark.parametrize("kind, item_kind", [("NodeList", "Node"), ("PodList", "Pod"), ("TopologyList", "Topology")])
def test_items_of_a_typed_list_without_kind_get_the_lists_item_kind(kind, item_kind):
    # the raw API's lists (GET /api/v1/nodes) carry no kind on their items
    docs = [{"apiVersion": "v1", "kind": kind, "items": [{"metadata": {"name": "a"}},
                                                         {"kind": "Other", "metadata": {"name": "b"}}]}]
    assert list(manifests.flatten(docs, "list.json")) == [
        ("document 1.items[0]", {"kind": item_kind, "metadata": {"name": "a"}}),
        ("document 1.items[1]", {"kind": "Other", "metadata": {"name": "b"}})]
    with pytest.raises(ManifestError) as caught:  # a plain List names no kind for its items
        list(manifests.flatten([{"kind": "List", "items": [{"metadata": {}}]}], "list.json"))
    assert str(caught.value) == ("list.json: document 1.items[0]: object has no kind; fix: give it its apiVersion and "
                                 "kind (e.g. apiVersion: kubeflow.org/v1, kind: PyTorchJob), as kubectl dumps them")


@pytest.mark.parametrize("value, text, type_name", [
    (None, "null", "null"), (True, "true", "a boolean"), (7, "7", "a number"), ("abc", '"abc"', "a string"),
    ([1, "a"], '[1, "a"]', "an array"), ({"a": None}, '{"a": null}', "an object"),
    (float("inf"), ".inf (YAML float)", "a number"), (float("nan"), ".nan (YAML float)", "a number"),
    ("x" * 100, '"' + "x" * 56 + "...", "a string"),
    # no Python repr (the old manifests.brief wrote {"None": 1}, "b'hi'", "{'a', 'b'}")
    ({None: 1}, '{"null": 1}', "an object"), (b"hi", "aGk= (YAML binary)", "binary data"),
    ({"b", "a"}, '{"a": null, "b": null} (YAML set)', "a value"), ({"b": 1, "a": [b"x"]}, '{"a": ["eA=="], "b": 1}', "an object"),
])
def test_quote_renders_json_and_json_types(value, text, type_name):
    assert (quote(value), json_type(value)) == (text, type_name)


def test_quote_of_a_yaml_alias_bomb_visits_only_what_it_shows():
    visits = Visits()
    bomb = list_bomb(9, 9, visits)  # 9**10 strings in all, sharing one list per level, as YAML aliases build them
    assert quote(bomb) == "[[[[[[[[[[" + '"x", ' * 8 + '"x"], [...'
    assert visits.count <= 100  # the 10 lists opened and the 9 strings shown; an unbounded walk visits 9**10


def test_quote_of_a_yaml_mapping_alias_bomb_in_an_annotation_visits_each_map_once():
    text = "a: &a {" + ", ".join(f"k{i}: x" for i in range(9)) + "}\n"
    for parent, child in zip("abcde", "bcdef"):  # 9**6 strings, every map shared through aliases
        text += f"{child}: &{child} {{" + ", ".join(f"k{i}: *{parent}" for i in range(9)) + "}\n"
    doc = yaml.load(text, Loader=manifests.UniqueKeyLoader)  # parse_documents refuses it (excessive aliasing)
    assert quote(doc["f"]) == '{"k0": {"k0": {"k0": {"k0": {"k0": {"k0": "x", "k1": "x",...'
    visits = Visits()
    assert quote(map_bomb(5, 9, visits)) == '{"k0": {"k0": {"k0": {"k0": {"k0": {"k0": ["x"], "k1": ["...'
    # each of the 6 shared maps' 9 entries sorted once, and the 2 leaves shown: 56; a walk past what is
    # shown visits the 9**6 leaves
    assert visits.count <= 6 * 9 + 2


def test_yaml_timestamps_are_read_as_their_text_as_kubectl_does():
    docs = manifests.parse_documents("a: 2024-01-01\nb: 2024-01-01T10:00:00Z\nc: !!timestamp 2001-12-14 21:59:43.10 -5\n", "t.yaml")
    assert docs == [{"a": "2024-01-01", "b": "2024-01-01T10:00:00Z", "c": "2001-12-14 21:59:43.10 -5"}]
    # PyYAML's own SafeLoader is untouched (other code in the process keeps its datetimes)
    assert not isinstance(yaml.safe_load("a: 2024-01-01")["a"], str)


def test_yaml_keys_that_are_not_strings_become_their_json_text_as_kubectl_makes_them():
    # sigs.k8s.io/yaml turns every YAML key into a JSON string; in Python 1 and True are one key.
    docs = manifests.parse_documents("a: {1: c, true: d, 0: e, false: f, null: g, 1.5: h}\n", "t.yaml")
    assert docs == [{"a": {"1": "c", "true": "d", "0": "e", "false": "f", "null": "g", "1.5": "h"}}]
    with pytest.raises(ManifestError) as raised:
        manifests.parse_documents('a: {1: c, "1": d}\n', "t.yaml")
    assert 'line 1: mapping key "1" already defined at line 1' in str(raised.value)


def test_two_topology_files_naming_one_topology_with_other_levels_are_rejected(tmp_path):
    one = tmp_path / "a.yaml"
    one.write_text("kind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: a.io/zone}, {nodeLabel: kubernetes.io/hostname}]}\n")
    other = tmp_path / "b.yaml"
    other.write_text("kind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: kubernetes.io/hostname}]}\n")
    assert manifests.load_topology_files([str(one), str(one)]).names() == ["t"]  # the same one twice is fine
    with pytest.raises(ManifestError) as raised:
        manifests.load_topology_files([str(one), str(other)])
    assert str(raised.value) == (
        f'{other}: Topology "t" is defined twice with different levels or aliases (also at {one}: a.io/zone, '
        'kubernetes.io/hostname; here: kubernetes.io/hostname); fix: keep one of them or rename one')


# ------------------------------------------------------------------ excessive aliasing (kubectl's rule)

def _aliased(levels: int, width: int) -> str:
    """A PyTorchJob whose ``spec`` holds ``levels`` lists of ``width`` aliases of the level below,
    over one list of ``width`` strings: ``width ** (levels + 1)`` strings once expanded."""
    lines = ["apiVersion: kubeflow.org/v1", "kind: PyTorchJob", "metadata: {name: aliased}", "spec:",
             "  a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"  a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_document_is_refused_at_once_with_kubectls_reason():
    """10 levels of 10 aliases: 10**11 strings once expanded (a new-user trial's review ran for
    minutes); refused from the shared objects, without expanding them."""
    with pytest.raises(ManifestError) as info:
        manifests.parse_documents(_aliased(10, 10), "bomb.yaml")
    assert str(info.value) == (
        'bomb.yaml: excessive aliasing: its YAML aliases (*name) make 123456790127 nodes of 27 distinct ones, '
        'more than 10 times as many (kubectl refuses it too: "document contains excessive aliasing"); '
        "fix: write the repeated parts out instead of aliasing aliases")


def test_aliasing_that_stays_small_or_shares_little_is_read():
    """One level of 10 aliases, three levels of 3, and a large document whose objects share one
    list (the 10,000-node YAML dump of benchmarks/placement.py shares parts the same way: 4.9
    million nodes of 3.9 million distinct ones) are read as written."""
    assert manifests.parse_documents(_aliased(1, 10), "a.yaml")[0]["spec"]["a1"] == [["x"] * 10] * 10
    spec = manifests.parse_documents(_aliased(3, 3), "a.yaml")[0]["spec"]
    assert spec["a3"] == [[[["x"] * 3] * 3] * 3] * 3
    # what PyYAML builds from "- {name: n0, tags: &t0 [a, b, c, d]}" ... "- {name: m0, tags: *t0}" ...
    tags = [["a", "b", "c", "d"] for _ in range(150_000)]
    items = [{"name": f"n{i}", "tags": tags[i]} for i in range(150_000)] + \
        [{"name": f"m{i}", "tags": tags[i]} for i in range(150_000)]
    assert manifests.excessive_aliasing({"items": items}) is None  # 2.1 million nodes, 1.35 million distinct


def test_the_aliasing_rule_names_the_document_of_a_stream():
    text = "kind: ConfigMap\nmetadata: {name: plain}\n---\n" + _aliased(6, 10)
    with pytest.raises(ManifestError, match=r"^s\.yaml: document 2: excessive aliasing: its YAML aliases"):
        manifests.parse_documents(text, "s.yaml")


def test_the_limit_is_ten_times_the_distinct_nodes_past_a_million():
    one_list = ["x"] * 1000
    assert manifests.excessive_aliasing([one_list] * 1000) == (
        "excessive aliasing: its YAML aliases (*name) make 1001001 nodes of 1002 distinct ones, more than 10 times "
        'as many (kubectl refuses it too: "document contains excessive aliasing"); fix: write the repeated parts '
        "out instead of aliasing aliases")
    assert manifests.excessive_aliasing([one_list] * 998) is None  # 999,000 nodes: under the floor
    distinct = [["x"] * 1000 for _ in range(100)]
    assert manifests.excessive_aliasing(distinct * 10) is None  # 1,001,001 nodes of 100,101: 10 times, not more


def test_an_input_larger_than_the_cap_ends_with_an_error_not_the_machines_memory(tmp_path, monkeypatch):
    # -f /dev/zero or an endless pipe: reading stops at the cap (1 GiB; 1 KiB here)
    monkeypatch.setattr(manifests, "MAX_INPUT_BYTES", 1024)
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * 2000 + "\n")
    with pytest.raises(ManifestError) as caught:
        manifests.read_text(str(big))
    assert str(caught.value) == (
        f"{big}: larger than 1,024 bytes (reading stopped there); fix: give a manifest or a kubectl dump, not a device or an "
        "endless stream (a dump this large: split it, e.g. kubectl get nodes -o yaml and kubectl get pods -A -o yaml "
        "apart)")
    small = tmp_path / "small.yaml"
    small.write_text("a: " + "x" * 1000 + "\n")  # 1,005 bytes: under the cap
    assert manifests.read_text(str(small)).startswith("a: x")


def test_the_input_cap_is_1_gib():
    assert manifests.MAX_INPUT_BYTES == 2**30
