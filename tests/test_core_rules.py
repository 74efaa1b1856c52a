"""The rule registry (webhook/core/rules.py) against the README's rejection table.

Every rule has one home: an id, a source (DESIGN.md section or the README's decisions), one check
function. The README's table "Every rejection a user can meet" lists exactly the registered ids,
and each row's message is the real answer for the row's example (reproduced here).
"""

from __future__ import annotations

import re

import jsonpatch
import pytest
from conftest import REPO, SEG_PREF, SEG_REQ, SIZE, TOPO, WL_REQ, load_example, make_request

from webhook.core.decision import AdmissionSettings
from webhook.core.review import review
from webhook.core.rules import RULES
from webhook.core.topology import StaticTopologyCatalog, Topology
from webhook.manifests import load_topology_files

PLAIN = AdmissionSettings()
ZONE, RACK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-rack"


def readme_rejections() -> dict[str, str]:
    """rule id → message column of the README's table "Every rejection a user can meet"."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### Every rejection a user can meet", 1)[1].split("\n###", 1)[0]
    table = section.split("| rule | example | status | message", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows[cells[0].strip("`")] = cells[3]
    return rows


def test_readme_table_and_registry_list_the_same_rules():
    assert sorted(readme_rejections()) == sorted(RULES)


def test_every_rule_has_a_source_a_code_and_one_documented_check():
    for rule_id, rule in RULES.items():
        assert re.fullmatch(r"DESIGN\.md §\d+b?|README: decisions", rule.source), rule_id
        assert rule.code in (400, 403)
        assert rule.check.__doc__, rule_id
    assert [r.id for r in RULES.values() if r.code == 400] == ["malformed-object"]


def worker(obj):
    return obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]


def tp4(**worker_annotations):
    obj = load_example("pytorchjob-tp4.yaml")
    worker(obj).update(worker_annotations)
    return obj


def _zone_and_rack_other_topology():
    obj = load_example("pytorchjob-zone-and-rack.yaml")
    worker(obj)[TOPO] = "gpu-fabric"
    return obj


def _lws(**changes):
    obj = load_example("lws-segmented.yaml")
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = changes.get("size", lwt["size"])
    lwt["subGroupPolicy"].update(changes.get("policy", {}))
    lwt["workerTemplate"]["metadata"]["annotations"].update(changes.get("annotations", {}))
    return obj


def _native_mpi():
    obj = load_example("distributedworkload-native.yaml")
    obj["spec"]["framework"] = "MPI"
    return obj


def _replicas_string():
    obj = load_example("pytorchjob-tp4.yaml")
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "16"
    return obj


def _no_topology():
    obj = tp4()
    del worker(obj)[TOPO]
    return obj


def _huge():
    obj = tp4(**{SIZE: "2"})
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 30000
    return obj


GPU_FABRIC = Topology("gpu-fabric", (RACK, "kubernetes.io/hostname"))

#: rule id → (object, operation, stored object); the README's example column says the same.
TRIGGERS = {
    "malformed-object": lambda: (_replicas_string(), None),
    "segment-size-not-integer": lambda: (tp4(**{SIZE: "4x"}), None),
    "segment-size-too-small": lambda: (tp4(**{SIZE: "1"}), None),
    "segment-size-exceeds-replicas": lambda: (tp4(**{SIZE: "32"}), None),
    "too-many-segments": lambda: (_huge(), None),
    "lws-leader-excluded-divisibility": lambda: (_lws(policy={"subGroupSize": 3, "subGroupPolicyType": "LeaderExcluded"}), None),
    "lws-subgroup-size-divisibility": lambda: (_lws(size=8, annotations={SIZE: "3"}), None),
    "placement-without-topology": lambda: (_no_topology(), None),
    "invalid-level": lambda: (tp4(**{SEG_REQ: "rack!"}), None),
    "unknown-level": lambda: (tp4(**{SEG_REQ: "example.com/row"}), None),
    "invalid-topology-name": lambda: (tp4(**{TOPO: "Bad Name"}), None),
    "unknown-topology": lambda: (tp4(**{TOPO: "gpu-topology"}), None),
    "preferred-broader-than-required": lambda: (tp4(**{SEG_PREF: ZONE}), None),
    "segment-required-broader-than-workload": lambda: (_swapped(), None),
    "conflicting-topology": lambda: (_zone_and_rack_other_topology(), None),
    "native-framework-unsupported": lambda: (_native_mpi(), None),
    "misspelled-key": lambda: (_misspelled(), None),
    "immutable-field": lambda: (tp4(**{SIZE: "8"}), tp4()),
    "lws-leader-ready-segments": lambda: (_lws_leader_ready(), None, AdmissionSettings(gate_pods=True)),
    "ray-segment-splits-replica": lambda: (_ray_size_3(), None),
}


def _ray_size_3():
    from test_kinds_ray import raycluster

    return raycluster(size="3")


def _lws_leader_ready():
    obj = load_example("lws-segmented.yaml")
    obj["spec"]["startupPolicy"] = "LeaderReady"
    return obj


def _swapped():
    obj = tp4(**{SEG_REQ: ZONE})
    obj["metadata"]["annotations"] = {WL_REQ: RACK}
    return obj


def _misspelled():
    obj = tp4()
    ann = worker(obj)
    ann["kai.scheduler/segment-topology-required-placment"] = ann.pop(SEG_REQ)
    return obj


def test_every_registered_rule_has_a_trigger():
    assert sorted(TRIGGERS) == sorted(RULES)


@pytest.mark.parametrize("rule_id", sorted(TRIGGERS))
def test_each_rule_denies_its_readme_example_with_the_readme_message(rule_id):
    catalog = load_topology_files([str(REPO.parent / "shared" / "examples" / "topology.yaml")])
    if rule_id == "conflicting-topology":
        catalog = StaticTopologyCatalog(tuple(catalog.get(n) for n in catalog.names()) + (GPU_FABRIC,))
    obj, old, *settings = TRIGGERS[rule_id]()
    settings = settings[0] if settings else PLAIN
    if old is not None:
        created = review(make_request(old), catalog, settings)
        old = jsonpatch.apply_patch(old, created.patch)
    decision = review(make_request(obj, "UPDATE" if old is not None else "CREATE", old=old), catalog, settings)
    assert [v.rule for v in decision.violations] == [rule_id]
    assert decision.code == RULES[rule_id].code
    assert decision.message == readme_rejections()[rule_id]


def readme_warnings() -> dict[str, str]:
    """warning id → text column of the README's table "Warnings of the §3b kinds"."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### Warnings of the §3b kinds", 1)[1].split("\n###", 1)[0]
    table = section.split("| warning | source | when | text", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows[cells[0].strip("`")] = (cells[1], cells[3].strip("`"))
    return rows


def test_readme_warning_table_and_registry_list_the_same_warnings():
    from webhook.core.rules import WARNINGS

    rows = readme_warnings()
    assert sorted(rows) == sorted(WARNINGS)
    for warning_id, (source, _) in rows.items():
        assert WARNINGS[warning_id].source == source and WARNINGS[warning_id].check.__doc__


def test_the_readme_warning_texts_are_what_review_says():
    # each row's text is the warning the webhook gives the row's example (the README's sample manifests)
    from test_kinds_mpijob import mpijob, run as run_mpijob

    from test_kinds_jobset import jobset, run as run_jobset
    from test_kinds_ray import pod as ray_pod, run as run_ray

    said = {"kai-does-not-enforce": run_mpijob(mpijob()).warnings,
            "jobset-segments-straddle-jobs": run_jobset(jobset(size="6")).warnings,
            "pod-without-index": run_ray(ray_pod(None)).warnings}
    for warning_id, (_, text) in readme_warnings().items():
        assert text in said[warning_id], warning_id
