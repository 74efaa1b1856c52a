"""Patched PyTorchJob and LeaderWorkerSet objects still validate against the upstream CRD schemas
(``shared/crds``, unmodified copies; ``spec.versions[].schema.openAPIV3Schema``) with jsonschema.

Kubernetes structural-schema extensions are mapped to JSON Schema once per session:
``x-kubernetes-int-or-string`` → ``anyOf [integer, string]``; ``nullable`` → also ``null``;
objects with ``properties`` and neither ``additionalProperties`` nor
``x-kubernetes-preserve-unknown-fields`` get ``additionalProperties: false`` (the API server
would prune unknown fields: here they fail, so a patch that writes a wrong path is caught).
Other ``x-kubernetes-*`` keys are dropped.
"""

from __future__ import annotations

import jsonpatch
import jsonschema
import pytest
import yaml

from tests.conftest import CRDS, load_example, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.topology.objects import default_catalog

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def to_json_schema(node):
    """Structural OpenAPI v3 schema → JSON Schema (see module docstring)."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("description", "nullable"):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        else:
            out[key] = to_json_schema(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="session")
def crd_validators():
    """kind → jsonschema validator of the CRD's served version (loaded once per session)."""
    validators = {}
    for filename in ("kubeflow.org_pytorchjobs.yaml", "leaderworkerset.x-k8s.io_leaderworkersets.yaml"):
        with open(CRDS / filename, encoding="utf-8") as fh:
            crd = yaml.load(fh, Loader=_Loader)
        version = next(v for v in crd["spec"]["versions"] if v.get("served", True))
        schema = to_json_schema(version["schema"]["openAPIV3Schema"])
        validators[crd["spec"]["names"]["kind"]] = jsonschema.Draft7Validator(schema)
    return validators


def patched(obj, settings=AdmissionSettings(), **kw):
    decision = review(make_request(obj, **kw), default_catalog(), settings)
    assert decision.allowed, decision.message
    return decision, jsonpatch.JsonPatch(decision.patch).apply(obj, in_place=False)


def errors(validator, obj):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def lws_leader_excluded():
    obj = load_example("lws-segmented.yaml")
    obj["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupPolicyType"] = "LeaderExcluded"
    return obj


def pytorchjob_platform():
    obj = load_example("pytorchjob-tp4.yaml")
    ann = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    del ann["kai.scheduler/topology"], ann["kai.scheduler/segment-topology-required-placement"]
    return obj


CASES = [
    ("PyTorchJob", lambda: load_example("pytorchjob-tp4.yaml"), {}),
    ("PyTorchJob", lambda: load_example("pytorchjob-zone-and-rack.yaml"), {}),
    ("PyTorchJob", pytorchjob_platform, {"settings": AdmissionSettings(platform_users=frozenset({"platform"}),
                                                                       default_topology="cluster-topology"),
                                         "user": "platform"}),
    ("LeaderWorkerSet", lambda: load_example("lws-segmented.yaml"), {}),
    ("LeaderWorkerSet", lws_leader_excluded, {}),
]


@pytest.mark.parametrize("kind, build, kw", CASES)
def test_patched_object_validates_against_crd(kind, build, kw, crd_validators):
    obj = build()
    validator = crd_validators[kind]
    assert errors(validator, obj) == []  # the input is valid to begin with
    decision, out = patched(obj, kw.get("settings", AdmissionSettings()),
                            **{k: v for k, v in kw.items() if k != "settings"})
    assert errors(validator, out) == []
    if kind == "PyTorchJob" and kw:
        assert decision.patch != []  # the platform case writes the root and the template


def test_schema_rejects_a_wrongly_placed_or_typed_key(crd_validators):
    """The checks above can fail: a non-string annotation value and a misspelled metadata map
    are rejected by the converted schema."""
    validator = crd_validators["PyTorchJob"]
    obj = load_example("pytorchjob-tp4.yaml")
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = 4
    assert errors(validator, obj) != []
    obj = load_example("lws-segmented.yaml")
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotation"] = {"a": "b"}
    assert errors(crd_validators["LeaderWorkerSet"], obj) != []


# ------------------------------------------------------------------ every test manifest of a CRD's kind

def _crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) → JSON Schema, for every served version of every CRD in shared/crds."""
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        with open(path, encoding="utf-8") as fh:
            crd = yaml.load(fh, Loader=_Loader)
        if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served", True):
                schemas[(f"{group}/{version['name']}", kind)] = to_json_schema(version["schema"]["openAPIV3Schema"])
    return schemas


def _manifest_objects() -> list[tuple[str, dict]]:
    from tests.conftest import EXAMPLES, REPO

    found = []
    for path in sorted((REPO / "tests" / "data" / "manifests").glob("*.yaml")) + sorted(EXAMPLES.glob("*.yaml")):
        for index, obj in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if isinstance(obj, dict):
                found.append((f"{path.name}#{index}", obj))
    return found


def test_every_test_manifest_of_a_crd_kind_validates_against_its_crd():
    schemas = _crd_schemas()
    assert ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime") in schemas
    checked, failures = [], []
    for where, obj in _manifest_objects():
        schema = schemas.get((obj.get("apiVersion", ""), obj.get("kind", "")))
        if schema is None:
            continue
        checked.append(where)
        failures += [f"{where}: {e}" for e in errors(jsonschema.Draft7Validator(schema), obj)]
    assert {"clustertrainingruntime-torch.yaml#0", "trainjob-torch.yaml#0", "jobset-workers.yaml#0",
            "pytorchjob-tp4.yaml#0", "lws-segmented.yaml#0"} <= set(checked)
    assert failures == []
