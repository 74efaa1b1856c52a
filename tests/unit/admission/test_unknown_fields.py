"""Rule ``unknown-field`` (webhook/admission/warning_rules.py): a DistributedWorkload field its CRD
schema does not define is dropped by the API server, so ``review`` and ``place`` of a file warn about
it, naming the defined field it is close to (new-user trial: ``workerPerSegment: 8`` was admitted in
silence and every pod placed "(no segment)").

The expected texts are written out literally; the defined fields are read from the CRD file
(deploy/crds/segments.dev_distributedworkloads.yaml), never from the code under test.
"""

from __future__ import annotations

import yaml

from tests.conftest import REPO, load_example, make_request
from tests.unit.admission.test_core_warnings import CATALOG, PLAIN, pytorchjob
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.distributedworkload import MAX_UNKNOWN_FIELDS, SCHEMA_FIELDS
from webhook.admission.review import review

CRD_FILE = REPO / "deploy" / "crds" / "segments.dev_distributedworkloads.yaml"
DROPS = "; the API server drops it"


def unknown_field_warnings(obj: dict, settings: AdmissionSettings = PLAIN) -> list[str]:
    decision = review(make_request(obj), CATALOG, settings)
    return [w for w in decision.warnings if w.startswith("unknown field ")]


def native() -> dict:
    return load_example("distributedworkload-native.yaml")


def _defined(schema: dict):
    """The fields a structural schema defines, as SCHEMA_FIELDS writes them: an object with
    ``properties`` and without ``x-kubernetes-preserve-unknown-fields`` → its fields, else ``None``."""
    if schema.get("type") != "object" or "properties" not in schema or schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    return {name: _defined(sub) for name, sub in schema["properties"].items()}


def test_the_defined_fields_are_the_crd_schemas():
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    assert SCHEMA_FIELDS == _defined(version["schema"]["openAPIV3Schema"])


def test_a_misspelled_workers_per_segment_is_named_with_the_field_it_resembles():
    obj = native()
    obj["spec"]["workerPerSegment"] = obj["spec"].pop("workersPerSegment")
    decision = review(make_request(obj), CATALOG, PLAIN)
    assert decision.allowed  # a warning, not a denial: the API server prunes the field before any webhook
    assert decision.warnings == [
        "unknown field spec.workerPerSegment=8: did you mean spec.workersPerSegment? rename it; the API server drops it"
    ]


def test_the_shared_sample_has_no_unknown_field():
    assert unknown_field_warnings(native()) == []


def test_a_far_off_unknown_field_is_named_without_a_suggestion():
    obj = native()
    obj["spec"]["colour"] = "blue"
    assert unknown_field_warnings(obj) == ['unknown field spec.colour="blue": remove it; the API server drops it']


def test_letter_case_is_not_counted_in_the_suggestion():
    obj = native()
    obj["spec"]["WorkersPerSegment"] = obj["spec"].pop("workersPerSegment")
    assert unknown_field_warnings(obj) == [
        "unknown field spec.WorkersPerSegment=8: did you mean spec.workersPerSegment? rename it" + DROPS
    ]


def test_nested_objects_of_the_schema_are_checked_and_the_text_fits_one_warning():
    obj = native()
    template = obj["spec"]["worker"]["template"]
    template["metdata"] = {"annotations": {"kai.scheduler/segment-size": "8"}}
    obj["spec"]["master"] = {"template": {"spec": template["spec"]}, "replica": 1}
    obj["sepc"] = "x"
    # the value is shortened to leave room for the fix; what is still too long is clipped at a space
    assert unknown_field_warnings(obj) == [
        'unknown field sepc="x": remove it' + DROPS,
        'unknown field spec.master.replica=1: remove it' + DROPS,
        'unknown field spec.worker.template.metdata={"annotat...: did you mean spec.worker.template.metadata? '
        "rename it; the API…",
    ]


def test_the_template_contents_the_schema_keeps_are_not_checked():
    # metadata (ObjectMeta), a template's metadata and spec, and status keep unknown fields
    obj = native()
    obj["metadata"]["generateName"] = "llama-"
    obj["spec"]["worker"]["template"]["metadata"] = {"name": "w", "annotations": {}}
    obj["spec"]["worker"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    obj["status"] = {"phase": "Running"}
    assert unknown_field_warnings(obj) == []


def test_unknown_fields_are_warned_in_field_path_order_and_bounded():
    obj = native()
    for name in ("zeta", "alpha", "kai.scheduler/segment-size"):
        obj["spec"][name] = "1"
    assert unknown_field_warnings(obj) == [
        'unknown field spec.alpha="1": remove it' + DROPS,
        'unknown field spec.zeta="1": remove it' + DROPS,
        'unknown field spec["kai.scheduler/segment-size"]="1": remove it' + DROPS,
    ]
    many = native()
    many["spec"].update({f"x{i:03}": i for i in range(200)})
    said = unknown_field_warnings(many)
    assert len(said) == MAX_UNKNOWN_FIELDS == 20
    assert said[0] == "unknown field spec.x000=0: remove it" + DROPS and said[-1].startswith("unknown field spec.x019=")


def test_another_kind_is_unaffected():
    job = pytorchjob()
    job["spec"]["colour"] = "blue"
    job["spec"]["workerPerSegment"] = 8
    assert unknown_field_warnings(job) == []


# ---- rule misspelled-field: a misspelled metadata or annotations of any object or template
def test_a_misspelled_template_metadata_or_annotations_is_said_even_though_the_object_did_not_opt_in():
    """A second new-user trial: `annotation:` (or `metdata:`) on the only template with kai.scheduler
    keys made the object look as if it had not opted in: allowed unchanged, no word, every segment
    constraint lost. Still allowed (an object that did not opt in is never denied), now with the
    warning; a misspelled map holding no key that opts in says nothing on an object that did not opt
    in; on one that did, it is said."""
    obj = pytorchjob()
    meta = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    meta["annotation"] = meta.pop("annotations")
    decision = review(make_request(obj), CATALOG, PLAIN)
    assert decision.allowed and decision.patch == []
    assert decision.warnings == ["spec.pytorchReplicaSpecs.Worker.template.metadata.annotation: did you mean "
                                 "annotations? the API server drops it"]
    obj = pytorchjob()
    template = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["metdata"] = template.pop("metadata")
    decision = review(make_request(obj), CATALOG, PLAIN)
    assert decision.allowed and decision.warnings == [
        "spec.pytorchReplicaSpecs.Worker.template.metdata: did you mean metadata? the API server drops it"]
    # nothing that opts in under the misspelled key, and nothing else opts in: not ours, no word
    plain = pytorchjob()
    for spec in plain["spec"]["pytorchReplicaSpecs"].values():
        spec["template"].pop("metadata", None)
    plain["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"annotation": {"team": "a"}}
    assert review(make_request(plain), CATALOG, PLAIN).warnings == []
