"""JSONPatch construction (webhook.admission.patching): RFC 6901 escaping, whole-map adds, no removals."""

from __future__ import annotations

import jsonpatch
import pytest

from webhook.admission.patching import PatchBuilder, apply_patch, pointer

TEMPLATE = ("spec", "worker", "template")


def test_pointer_escapes_slash_and_tilde():
    assert pointer(["metadata", "annotations", "kai.scheduler/segment-size"]) == \
        "/metadata/annotations/kai.scheduler~1segment-size"
    assert pointer(["a~b/c"]) == "/a~0b~1c"
    assert pointer([]) == ""


def test_missing_metadata_is_added_whole():
    obj: dict = {"spec": {"worker": {"template": {"spec": {}}}}}
    b = PatchBuilder(obj)
    b.set_entries(TEMPLATE, "annotations", {"kai.scheduler/segment-size": "4"})
    assert b.build() == [{"op": "add", "path": "/spec/worker/template/metadata",
                          "value": {"annotations": {"kai.scheduler/segment-size": "4"}}}]


def test_missing_annotations_map_is_added_whole():
    obj = {"metadata": {"name": "x", "labels": {"a": "b"}}}
    b = PatchBuilder(obj)
    b.set_entries((), "annotations", {"k/x": "v"})
    assert b.build() == [{"op": "add", "path": "/metadata/annotations", "value": {"k/x": "v"}}]


def test_null_annotations_map_is_replaced_whole():
    obj = {"metadata": {"annotations": None}}
    b = PatchBuilder(obj)
    b.set_entries((), "annotations", {"k": "v"})
    assert b.build() == [{"op": "replace", "path": "/metadata/annotations", "value": {"k": "v"}}]
    assert apply_patch(obj, b.build()) == {"metadata": {"annotations": {"k": "v"}}}


def test_existing_map_add_replace_and_equal():
    obj = {"metadata": {"annotations": {"user/key": "keep", "a/same": "1", "a/diff": "old"}}}
    b = PatchBuilder(obj)
    b.set_entries((), "annotations", {"a/same": "1", "a/diff": "new", "a/new": "x"})
    ops = b.build()
    assert ops == [
        {"op": "replace", "path": "/metadata/annotations/a~1diff", "value": "new"},
        {"op": "add", "path": "/metadata/annotations/a~1new", "value": "x"},
    ]
    patched = jsonpatch.JsonPatch(ops).apply(obj)
    assert patched["metadata"]["annotations"] == {"user/key": "keep", "a/same": "1", "a/diff": "new", "a/new": "x"}
    assert obj["metadata"]["annotations"]["a/diff"] == "old"  # the input is not modified


def test_two_calls_on_the_same_missing_map_extend_one_add():
    obj: dict = {"metadata": {}}
    b = PatchBuilder(obj)
    b.set_entries((), "labels", {"a": "1"})
    b.set_entries((), "labels", {"b": "2"})
    assert b.build() == [{"op": "add", "path": "/metadata/labels", "value": {"a": "1", "b": "2"}}]


def test_no_desired_entries_gives_no_ops():
    b = PatchBuilder({})
    b.set_entries((), "labels", {})
    assert b.build() == []


def test_non_mapping_on_the_path_raises_value_error():
    b = PatchBuilder({"metadata": "oops"})
    with pytest.raises(ValueError):
        b.set_entries((), "annotations", {"a": "b"})


def test_only_add_and_replace_ops_are_produced():
    obj = {"metadata": {"annotations": {"x": "1"}}, "spec": {"worker": {"template": {}}}}
    b = PatchBuilder(obj)
    b.set_entries((), "annotations", {"x": "2", "y": "3"})
    b.set_entries(TEMPLATE, "annotations", {"z": "4"})
    assert {op["op"] for op in b.build()} == {"add", "replace"}


@pytest.mark.parametrize("parts", [["a~1b"], ["~/"], ["/~"], ["~0"], ["", "x"], ["0", "-"], ["ü/é~"]])
def test_pointer_is_what_jsonpointer_builds(parts):
    # RFC 6901 §4: "~" is escaped before "/", so "~1" in a key stays the two characters "~1".
    from jsonpointer import JsonPointer

    assert pointer(parts) == JsonPointer.from_parts(parts).path
    assert JsonPointer(pointer(parts)).parts == parts


def test_built_operations_are_valid_rfc6902():
    obj = {"metadata": {"annotations": {"k": "old"}}, "spec": {"worker": {"template": {}}}}
    b = PatchBuilder(obj)
    b.set_entries((), "annotations", {"k": "new", "a/b~c": "v"})
    b.set_entries(TEMPLATE, "labels", {"x": "1"})
    ops = b.build()
    jsonpatch.JsonPatch(ops)  # raises InvalidJsonPatch on a malformed operation
    assert jsonpatch.JsonPatch(ops).apply(obj) == {
        "metadata": {"annotations": {"k": "new", "a/b~c": "v"}},
        "spec": {"worker": {"template": {"metadata": {"labels": {"x": "1"}}}}}}


def test_labels_then_annotations_on_a_template_without_metadata_are_one_add():
    """A PyTorchJob Master template without metadata gets the subgroup-name label (DESIGN.md §2)
    and, under --gate-pods, the gang annotations (§9): one ``add`` of metadata holding both. Two
    adds of the same path would leave only the second (the label lost)."""
    from webhook.admission.patching import PatchBuilder

    obj: dict = {"spec": {"Master": {"template": {"spec": {}}}}}
    builder = PatchBuilder(obj)
    builder.set_entries(("spec", "Master", "template"), "labels", {"kai.scheduler/subgroup-name": "master"})
    builder.set_entries(("spec", "Master", "template"), "annotations", {"segments.dev/gang-size": "5"})
    builder.set_entries(("spec", "Other", "template"), "labels", {"a": "1"})
    builder.set_entries(("spec", "Other", "template"), "annotations", {"b": "2"})
    assert builder.build() == [
        {"op": "add", "path": "/spec/Master/template/metadata",
         "value": {"labels": {"kai.scheduler/subgroup-name": "master"},
                   "annotations": {"segments.dev/gang-size": "5"}}},
        {"op": "add", "path": "/spec/Other",
         "value": {"template": {"metadata": {"labels": {"a": "1"}, "annotations": {"b": "2"}}}}},
    ]
