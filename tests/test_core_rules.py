"""The rule registry (webhook/core/rules.py) against the README's rejection table.

Every rule has one home: an id, a source (DESIGN.md section or the README's decisions), one check
function. The README's table "Every rejection a user can meet" lists exactly the registered ids,
and each row's message is the real answer for the row's example (reproduced here).
"""

from __future__ import annotations

import re

import jsonpatch
import pytest
import yaml

from conftest import REPO, SEG_PREF, SEG_REQ, SIZE, TOPO, WL_REQ, load_example, make_request
from webhook.core.admission_settings import AdmissionSettings
from webhook.core.review import review
from webhook.core.rules import RULES
from webhook.core.topology import StaticTopologyCatalog, Topology
from webhook.http.bounds import bounded_review
from webhook.manifests import load_topology_files

PLAIN = AdmissionSettings()
ZONE, RACK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-rack"


def _documents() -> list[str]:
    """README.md, then every docs/*.md page (in name order): a table of the same heading in a docs
    page adds rows to the README's, and its row of an id replaces the README's (the README is being
    cut, its tables move to docs/)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [page.read_text(encoding="utf-8") for page in pages]


def _table_rows(heading: str, header: str) -> list[list[str]]:
    """The rows (cells) of every table ``header`` under ``### heading`` in :func:`_documents`."""
    rows = []
    for text in _documents():
        if f"### {heading}" not in text:
            continue
        section = text.split(f"### {heading}", 1)[1].split("\n###", 1)[0]
        if header not in section:
            continue
        table = section.split(header, 1)[1].split("\n\n", 1)[0]
        rows += [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in table.splitlines()[2:]]
    return rows


def readme_rejections() -> dict[str, str]:
    """rule id → message column of the table "Every rejection a user can meet" (README, docs/)."""
    return {cells[0].strip("`"): cells[3] for cells in _table_rows("Every rejection a user can meet",
                                                                   "| rule | example | status | message")}


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
    "annotations-too-large": lambda: (tp4(**{"example.com/big": "x" * 262_200}), None),
    # DESIGN.md §4.5, KAI d5bc503 plugins/ray/ray_grouper.go and plugins/jobset/jobset_grouper.go
    "template-level-without-topology": lambda: (_kai_reader("kai-reader-class-c-raycluster-no-topology.yaml"), None),
    "per-job-level-differs": lambda: (_kai_reader("kai-reader-class-e-jobset-user-keys.yaml"), None),
    "target-unknown": lambda: (_labelled(tp4(), "volcano"), None),
    "target-cannot-express": lambda: (_labelled(tp4(**{SIZE: "5"}), "kueue"), None),
    "job-segments-need-indexed": lambda: (_non_indexed_job(), None),
}


def _kai_reader(name):
    return yaml.safe_load((REPO / "tests" / "manifests" / name).read_text(encoding="utf-8"))


def _labelled(obj, target):
    obj["metadata"].setdefault("labels", {})["segments.dev/target"] = target
    return obj


def _non_indexed_job():
    from test_targets import job

    return job(mode="NonIndexed")


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
    # behind the size bound, as POST /mutate and segment-webhook review run the core
    bounded = bounded_review(review)
    decision = bounded(make_request(obj, "UPDATE" if old is not None else "CREATE", old=old), catalog, settings)
    assert [v.rule for v in decision.violations] == [rule_id]
    assert decision.code == RULES[rule_id].code
    assert decision.message == readme_rejections()[rule_id]


def readme_warnings() -> dict[str, tuple[str, str, str]]:
    """warning id → (source, when, text template) of the table "Every warning a user can meet" (README, docs/)."""
    return {cells[0].strip("`"): (cells[1], cells[2], cells[3].strip("`"))
            for cells in _table_rows("Every warning a user can meet", "| warning | source | when | text |")}


def test_readme_warning_table_and_registry_list_the_same_warnings():
    from webhook.core.warning_rules import WARNINGS

    expected = {w.id: (w.source, w.summary, w.template) for w in WARNINGS.values()}
    table = "\n".join(f"| `{i}` | {s} | {when} | `{t}` |" for i, (s, when, t) in expected.items())
    assert readme_warnings() == expected, f"README table should read:\n{table}"
    for rule in WARNINGS.values():
        assert re.fullmatch(r"DESIGN\.md §\d+(\.\d+)?b?|README: decisions", rule.source), rule.id


def _template_pattern(template: str) -> re.Pattern:
    """A registered template as a regular expression: each ``{field}`` stands for any text."""
    parts = re.split(r"\{\w+\}", template)
    return re.compile(".*".join(re.escape(p) for p in parts), re.S)


def _registered(text: str) -> list[str]:
    """The ids of the templates ``text`` is an instance of. A text ending in "…" was clipped at
    120 characters (DESIGN.md §5): it is an instance when the clipped end plus the rest of the
    template's last literal part completes it."""
    from webhook.core.warning_rules import WARNINGS

    if not text.endswith("…"):
        return [w.id for w in WARNINGS.values() if _template_pattern(w.template).fullmatch(text)]
    head = text[:-1]
    matches = []
    for warning in WARNINGS.values():
        tail = re.split(r"\{\w+\}", warning.template)[-1]
        pattern = _template_pattern(warning.template)
        if any(pattern.fullmatch(head + tail[cut:]) for cut in range(len(tail) + 1)):
            matches.append(warning.id)
    return matches


#: ``segment-webhook place`` prefixes each warning with the object it is about ("JobSet llama-ft: ").
PLACE_OBJECT_PREFIX = re.compile(r"^(?:PyTorchJob|LeaderWorkerSet|DistributedWorkload|JobSet|TrainJob|RayCluster|RayJob|"
                                 r"RayService|MPIJob|Pod) [a-z0-9.-]+: ")


def test_every_warning_the_readme_shows_is_a_registered_template():
    # the warning column of the table "warnings (allowed)" and every `Warning: ...` line of the README
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text.split("| example | warnings (allowed) |", 1)[1].split("\n\n", 1)[0]
    shown = [line.rsplit(" | ", 1)[1].strip(" |`") for line in table.splitlines()[2:]]
    shown += [PLACE_OBJECT_PREFIX.sub("", line) for line in re.findall(r"^Warning: (.+)$", text, flags=re.M)]
    assert len(shown) >= 20
    unregistered = [t for t in shown if not _registered(t) and not t.startswith(("Warning", "PlacementInfeasible"))]
    assert unregistered == []


def test_a_text_no_template_makes_is_not_taken_for_a_registered_warning():
    # the pattern matcher the README check relies on must be able to say no
    assert _registered("10 Worker replicas / segment size 4: last segment has 2 pods") == ["partial-last-segment"]
    assert _registered("10 Worker replicas / segment size 4: the last segment has 2 pods") == []
    # a clipped text is completed by its template's end, not by a text that differs before the cut
    # (templates ending in a field match any clipped text of their head, so only membership is checked)
    assert "partial-last-segment" in _registered("10 Worker replicas / segment size 4: last segment has 2 p…")
    assert "partial-last-segment" not in _registered("10 Worker replicas / segment size 4: first segment has 2 p…")


def test_say_and_text_refuse_an_unregistered_id_or_a_missing_field():
    from webhook.core.admission_decision import Decision
    from webhook.core.warning_rules import say, text

    with pytest.raises(KeyError):
        say(Decision(kind="PyTorchJob"), "no-such-warning")
    with pytest.raises(KeyError):
        text("partial-last-segment", pods="10 Worker replicas", size=4)  # no rest


def test_the_readme_warning_texts_are_what_review_says():
    # the §3b texts the README quotes are the warnings the webhook gives the README's sample manifests
    from test_kinds_jobset import jobset
    from test_kinds_jobset import run as run_jobset
    from test_kinds_mpijob import mpijob
    from test_kinds_mpijob import run as run_mpijob
    from test_kinds_ray import pod as ray_pod
    from test_kinds_ray import run as run_ray

    assert "KAI keeps MPIJob PodGroups flat: it does not enforce these MPIJob segments; --gate-pods does" \
        in run_mpijob(mpijob()).warnings
    assert "replicatedJob workers: segment size 6 and parallelism 4 do not divide each other; segments straddle Jobs" \
        in run_jobset(jobset(size="6")).warnings
    assert ("pod has no ray.io/worker-group-replica-index (KubeRay < 1.6?): no segment label; --gate-pods forms "
            "segments at placement") in run_ray(ray_pod(None)).warnings


@pytest.mark.parametrize("raw", ["99999999999999999999", "3000000000"])
def test_a_segment_size_beyond_any_replica_count_is_not_fixed_by_raising_the_replicas(raw):
    # replicas are int32 (at most 2147483647): "raise replicas to at least 3000000000" cannot be
    # done, so the fix names only the segment size (new-user trial)
    catalog = load_topology_files([str(REPO.parent / "shared" / "examples" / "topology.yaml")])
    decision = review(make_request(tp4(**{SIZE: raw})), catalog, PLAIN)
    assert [v.rule for v in decision.violations] == ["segment-size-exceeds-replicas"]
    assert decision.message.endswith("(rule segment-size-exceeds-replicas); fix: use a segment size between 2 and 16.")
