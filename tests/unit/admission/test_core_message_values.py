"""What a denial shows (DESIGN.md §5, the house message format): the manifest's own fields are
named, never the AdmissionReview envelope; values that are not JSON (YAML bytes, sets, .nan/.inf,
non-string keys) are shown as JSON or by their YAML type, never as Python reprs (timestamps are read
as their text, as kubectl reads them)."""

from __future__ import annotations

import pytest

from tests.conftest import TOPO
from tests.support.admission_helpers import PLAIN, run, tp4
from webhook.admission.review import review

# ------------------------------------------------------------------ the manifest's own fields are named

NS_DENIAL = ('metadata.namespace = ["a"]: the object\'s namespace must be a string (rule malformed-object); '
             "fix: write one namespace name, e.g. metadata.namespace: team-a.")


def test_a_namespace_that_is_a_list_is_named_as_metadata_namespace(example_catalog):
    from webhook.admission.request import build_request

    obj = tp4()
    obj["metadata"]["namespace"] = ["a"]
    assert build_request(obj)["namespace"] == "default"  # the envelope stays well-formed
    d = run(obj, example_catalog)
    assert (d.allowed, d.code, d.message) == (False, 400, NS_DENIAL)


def test_a_pod_namespace_that_is_a_list_is_named_as_metadata_namespace(example_catalog):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ["a"]},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    d = run(pod, example_catalog)
    assert (d.allowed, d.code, d.message) == (False, 400, NS_DENIAL)


def test_a_name_that_is_a_number_is_named_as_metadata_name(example_catalog):
    obj = tp4()
    obj["metadata"]["name"] = 7
    d = run(obj, example_catalog)
    assert (d.allowed, d.code, d.message) == (False, 400, (
        "metadata.name = 7: the object's name must be a string (rule malformed-object); "
        "fix: write one name, e.g. metadata.name: train-job."))


def test_review_cli_names_metadata_namespace_not_the_envelope(capsys, tmp_path):
    import yaml

    from webhook.cli import main

    obj = tp4()
    obj["metadata"]["namespace"] = ["a"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    assert main(["review", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith("denied the request: " + NS_DENIAL)
    assert "AdmissionReview" not in err and "request.namespace" not in err


@pytest.mark.parametrize("obj, problem", [
    ({"apiVersion": 1, "kind": "PyTorchJob"}, "apiVersion is 1, must be a string group/version (e.g. kubeflow.org/v1)"),
    ({"kind": "PyTorchJob"}, "apiVersion is missing"),
    ({"apiVersion": None, "kind": "PyTorchJob"}, "apiVersion is null, must be a string group/version (e.g. kubeflow.org/v1)"),
    ({"apiVersion": "v1", "kind": ["Pod"]}, 'kind is ["Pod"], must be a string kind name (e.g. PyTorchJob)'),
    ({"apiVersion": "v1", "kind": True}, "kind is true, must be a string kind name (e.g. PyTorchJob)"),
    ({"apiVersion": "v1", "kind": "Pod"}, None),
])
def test_manifest_problem_says_what_the_field_is(obj, problem):
    from webhook.admission.request import manifest_problem

    assert manifest_problem(obj) == problem


# ------------------------------------------------------------------ no Python repr in a message

def _with_root_annotation(key, value):
    obj = tp4()
    obj["metadata"]["annotations"] = {TOPO: "cluster-topology", key: value}
    return obj


@pytest.mark.parametrize("value, shown", [
    (b"hi", "aGk= (YAML binary)"),
    ({"b", "a"}, '{"a": null, "b": null} (YAML set)'),
    (float("nan"), ".nan (YAML float)"),
    (float("-inf"), "-.inf (YAML float)"),
    ([b"x", None, True], '["eA==", null, true]'),
    ({1: "a", None: True}, '{"1": "a", "null": true}'),
    (4, "4"),
])
def test_non_json_annotation_values_are_shown_as_json_or_by_yaml_type(example_catalog, value, shown):
    d = run(_with_root_annotation("created", value), example_catalog)
    assert (d.code, d.message) == (400, (
        f'metadata.annotations["created"] = {shown}: must be a string (quote it in YAML) (rule malformed-object); '
        'fix: send a string (quote it in YAML) at metadata.annotations["created"].'))
    for python in ("datetime.", "b'", "None", "True", "nan)", "{'"):
        assert python not in d.message


@pytest.mark.parametrize("key, text", [(7, "7"), (True, "true")])  # YAML ``7: x``, ``yes: x``
def test_a_non_string_annotation_key_is_named_as_the_key(example_catalog, key, text):
    d = run(_with_root_annotation(key, "x"), example_catalog)
    assert d.message == (
        f'metadata.annotations["{text}"] = {text}: must be a string key (quote the key in YAML) '
        f'(rule malformed-object); fix: send a string key (quote the key in YAML) at metadata.annotations["{text}"].')


def test_quote_never_falls_back_to_a_python_repr():
    from webhook.text.messages import quote

    assert quote(object()) == "a value that is not JSON"
    assert quote((1, "a")) == '[1, "a"]'
    assert quote("x" * 100) == '"' + "x" * 56 + "..."


def test_a_request_that_is_not_an_object_is_shown_as_json_not_a_python_type_name():
    from webhook.topology.objects import StaticTopologyCatalog

    d = review([1, 2], StaticTopologyCatalog(()), PLAIN)  # type: ignore[arg-type]  # the bad input under test
    assert (d.code, d.message) == (400, "request = [1, 2]: must be an AdmissionReview v1 request object "
                                        "(rule malformed-object); fix: send an AdmissionReview v1 request object at request.")


# ------------------------------------------------------------------ invisible characters are shown

def test_a_zero_width_space_in_a_misspelled_key_is_shown_escaped(example_catalog):
    # "segment\u200b-size" reads as "segment-size" on a terminal: the message must show the
    # character that makes it another key, as a JSON escape (the key is one edit from the real one)
    obj = tp4()
    ann = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    ann["kai.scheduler/segment\u200b-size"] = ann.pop("kai.scheduler/segment-size")
    d = run(obj, example_catalog)
    assert d.message == (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment\\u200b-size"]'
        ' = "4": not a key KAI reads but close to kai.scheduler/segment-size, so this constraint would be'
        " lost (rule misspelled-key); fix: rename the key to kai.scheduler/segment-size.")


@pytest.mark.parametrize("value, shown", [
    ("cluster\u200b-topology", '"cluster\\u200b-topology"'),   # zero-width space
    ("cluster\u202e-topology", '"cluster\\u202e-topology"'),   # right-to-left override
    ("cluster\u00a0topology", '"cluster\\u00a0topology"'),     # no-break space
    ("\ufeffcluster-topology", '"\\ufeffcluster-topology"'),   # byte-order mark
    ("clúster-topology", '"clúster-topology"'),                # visible non-ASCII stays readable
])
def test_invisible_characters_of_a_value_are_escaped_and_visible_ones_kept(value, shown):
    from webhook.text.messages import quote

    assert quote(value) == shown


@pytest.mark.parametrize("name, candidates, expected", [
    ("PyTorchJobb", ["PyTorchJob", "LeaderWorkerSet"], "PyTorchJob"),
    ("pytorchjob", ["PyTorchJob", "LeaderWorkerSet"], "PyTorchJob"),  # letter case not counted
    ("workerPerSegment", ["framework", "workers", "workersPerSegment"], "workersPerSegment"),
    ("ConfigMap", ["PyTorchJob", "LeaderWorkerSet"], None),
    ("sepc", ["spec"], None),  # a transposition scores 0.75, under the 0.8 cutoff
])
def test_closest_is_the_one_did_you_mean_of_every_message(name, candidates, expected):
    from webhook.text.messages import closest

    assert closest(name, candidates) == expected
