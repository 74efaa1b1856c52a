"""The rule registry (webhook/admission/rules.py) and the warning registry (warning_rules.py).

Every rule has one home: an id, a source (DESIGN.md section or the project's decisions), one check
function. :data:`MESSAGES` lists exactly the registered ids, each with the whole answer its example
(:data:`TRIGGERS`) is denied with, written out; docs/reference/rules.md is generated from the
registry (tests/unit/project/test_docs_reference.py).
"""

from __future__ import annotations

import re

import jsonpatch
import pytest
import yaml

from tests.conftest import REPO, SEG_PREF, SEG_REQ, SIZE, TOPO, WL_REQ, load_example, make_request
from tests.support import paths
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.admission.rules import RULES
from webhook.http.bounds import bounded_review
from webhook.planning.manifests import load_topology_files
from webhook.topology.objects import StaticTopologyCatalog, Topology

PLAIN = AdmissionSettings()
ZONE, RACK = "topology.kubernetes.io/zone", "cloud.provider.com/topology-rack"


#: rule id → the message its example (:data:`TRIGGERS`) is denied with: the whole answer of
#: ``segment-webhook review``, written out (docs/concepts/admission.md shows the same table).
MESSAGES = {
    'segment-size-not-integer': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "4x": '
        'the segment size must be a plain decimal integer (digits 0-9 only, no sign, spaces or exponent) (rul'
        'e segment-size-not-integer); fix: write the number of pods per segment as digits, e.g. "4".'
    ),
    'segment-size-too-small': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "1": a'
        ' segment needs more than 1 pod (rule segment-size-too-small); fix: set a segment size of at least 2 '
        '(or remove kai.scheduler/segment-size for no segments).'
    ),
    'segment-size-exceeds-replicas': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "32": '
        'the segment size exceeds the 16 Worker replicas (spec.pytorchReplicaSpecs.Worker.replicas) (rule seg'
        'ment-size-exceeds-replicas); fix: use a segment size between 2 and 16, or raise spec.pytorchReplicaS'
        'pecs.Worker.replicas to at least 32.'
    ),
    'too-many-segments': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "2": 3'
        '0000 Worker replicas make 15000 segments, more than 10000 (rule too-many-segments); fix: use a segme'
        'nt size of at least 3.'
    ),
    'lws-leader-excluded-divisibility': (
        'spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize = 3: under LeaderExcluded, size - 1 = 4 (spec.'
        'leaderWorkerTemplate.size = 5) must be divisible by the segment size (rule lws-leader-excluded-divis'
        'ibility); fix: choose a segment size that divides 4 (2, 4), or change spec.leaderWorkerTemplate.size'
        '.'
    ),
    'lws-subgroup-size-divisibility': (
        'spec.leaderWorkerTemplate.workerTemplate.metadata.annotations["kai.scheduler/segment-size"] = "3": L'
        'WS accepts a subGroupSize only when size (8) or size - 1 (7) is divisible by it, and the webhook set'
        's subGroupSize (now 2) to the segment size (3) (rule lws-subgroup-size-divisibility); fix: choose a '
        'segment size that divides 8 or 7 (2, 4, 7, 8), or remove subGroupPolicy.'
    ),
    'lws-leader-ready-segments': (
        'spec.startupPolicy = "LeaderReady": under LeaderReady the leader is created alone: KAI cannot group '
        'it into a segment of 2 and, with --gate-pods, its gang never completes (the workers wait for the gat'
        'ed leader) (rule lws-leader-ready-segments); fix: set spec.startupPolicy: LeaderCreated (the LWS def'
        'ault), or remove the segment keys.'
    ),
    'ray-segment-splits-replica': (
        'spec.workerGroupSpecs[0].template.metadata.annotations["kai.scheduler/segment-size"] = "3": a segmen'
        't of 3 pods would split a replica of 2 hosts (spec.workerGroupSpecs[0].numOfHosts), which KubeRay cr'
        'eates and deletes whole (rule ray-segment-splits-replica); fix: use a multiple of 2 (e.g. 2 or 4), o'
        'r change spec.workerGroupSpecs[0].numOfHosts.'
    ),
    'placement-without-topology': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-topology-requir'
        'ed-placement"] = "cloud.provider.com/topology-rack": a placement level needs a topology name (rule p'
        'lacement-without-topology); fix: set kai.scheduler/topology (e.g. "cluster-topology") in metadata.an'
        'notations or spec.pytorchReplicaSpecs.Worker.template.metadata.annotations.'
    ),
    'invalid-level': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-topology-requir'
        'ed-placement"] = "rack!": a topology level must be a node label key ([prefix/]name, e.g. cloud.provi'
        "der.com/topology-rack) (rule invalid-level); fix: use one of the topology's levels (topology.kuberne"
        'tes.io/zone, cloud.provider.com/topology-block, cloud.provider.com/topology-rack, kubernetes.io/host'
        'name).'
    ),
    'unknown-level': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-topology-requir'
        'ed-placement"] = "example.com/row": not a level of topology "cluster-topology" (rule unknown-level);'
        ' fix: use one of its levels, broadest first: topology.kubernetes.io/zone, cloud.provider.com/topolog'
        'y-block, cloud.provider.com/topology-rack, kubernetes.io/hostname.'
    ),
    'invalid-topology-name': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/topology"] = "Bad Name"'
        ': a topology name must be a Kubernetes object name (lowercase DNS subdomain) (rule invalid-topology-'
        'name); fix: name an existing Topology: cluster-topology.'
    ),
    'unknown-topology': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/topology"] = "gpu-topol'
        'ogy": no Topology has this name (rule unknown-topology); fix: use one of: cluster-topology.'
    ),
    'preferred-broader-than-required': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-topology-prefer'
        'red-placement"] = "topology.kubernetes.io/zone": the preferred level is broader than the required le'
        'vel "cloud.provider.com/topology-rack" (spec.pytorchReplicaSpecs.Worker.template.metadata.annotation'
        's["kai.scheduler/segment-topology-required-placement"]) (rule preferred-broader-than-required); fix:'
        ' prefer a level equal to or narrower than the required one.'
    ),
    'segment-required-broader-than-workload': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-topology-requir'
        'ed-placement"] = "topology.kubernetes.io/zone": a segment must fit inside the workload\'s required le'
        'vel "cloud.provider.com/topology-rack" (metadata.annotations["kai.scheduler/topology-required-placem'
        'ent"]) (rule segment-required-broader-than-workload); fix: swap the two levels or narrow the segment'
        ' level.'
    ),
    'conflicting-topology': (
        'metadata.annotations["kai.scheduler/topology-required-placement"] = "topology.kubernetes.io/zone": t'
        'his workload-level placement belongs to the root\'s topology "cluster-topology", but the worker templ'
        'ate names topology "gpu-fabric" (spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.'
        'scheduler/topology"]); one workload is placed in one topology (rule conflicting-topology); fix: name'
        ' the same topology in both places, or set it only in metadata.annotations.'
    ),
    'native-framework-unsupported': (
        'spec.workersPerSegment = 8: segments are supported for framework PyTorch only, not MPI (rule native-'
        'framework-unsupported); fix: remove workersPerSegment, or use framework PyTorch.'
    ),
    'misspelled-key': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-topology-requir'
        'ed-placment"] = "cloud.provider.com/topology-rack": not a key KAI reads but close to kai.scheduler/s'
        'egment-topology-required-placement, so this constraint would be lost (rule misspelled-key); fix: ren'
        'ame the key to kai.scheduler/segment-topology-required-placement.'
    ),
    'malformed-object': (
        'spec.pytorchReplicaSpecs.Worker.replicas = "16": must be an integer from 0 to 2147483647 (rule malfo'
        'rmed-object); fix: send an integer from 0 to 2147483647 at spec.pytorchReplicaSpecs.Worker.replicas.'
    ),
    'immutable-field': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "8": t'
        'he segment size of an existing workload cannot change (was "4") (rule immutable-field); fix: restore'
        ' the old value, or delete and recreate the workload (or suspend it first: spec.runPolicy.suspend: tr'
        'ue).'
    ),
    'annotations-too-large': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations = 262361: bytes of keys and values, ov'
        "er kube-apiserver's 262144-byte (256 KiB) limit: Kubernetes refuses every pod of this template, and "
        'the placement keys were not reviewed (rule annotations-too-large); fix: remove annotations from spec'
        '.pytorchReplicaSpecs.Worker.template.metadata.annotations until they total at most 262144 bytes.'
    ),
    'too-many-items': (
        # 10,001 labels on the Worker template: one over the 10,000 entries per map of
        # docs/decisions/review-work-bound.md
        'spec.pytorchReplicaSpecs.Worker.template.metadata.labels = 10001: that many entries, over this webhook\'s limit of '
        '10000 per map or list, a bound on the work of one review; the object was not reviewed, its placement keys '
        'included (rule too-many-items); fix: keep spec.pytorchReplicaSpecs.Worker.template.metadata.labels at most '
        '10000 entries.'
    ),
    'placement-key-as-label': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.labels["kai.scheduler/segment-size"] = "4": a labe'
        'l, but KAI and this webhook read this key only as an annotation, so this constraint would be lost (r'
        'ule placement-key-as-label); fix: move it to spec.pytorchReplicaSpecs.Worker.template.metadata.annot'
        'ations["kai.scheduler/segment-size"].'
    ),
    'template-level-without-topology': (
        'spec.workerGroupSpecs[0].template.metadata.annotations["kai.scheduler/topology-required-placement"] '
        '= "cloud.provider.com/topology-block": spec.workerGroupSpecs[0].template.metadata.annotations names '
        "no kai.scheduler/topology, and KAI reads this level with that template's topology only: KAI's Ray gr"
        'ouper errors on every pod of the cluster and makes no PodGroup (rule template-level-without-topology'
        '); fix: set kai.scheduler/topology in spec.workerGroupSpecs[0].template.metadata.annotations too, or'
        ' move the level to metadata.annotations.'
    ),
    'trainer-job-not-found': (
        'metadata.annotations["segments.dev/trainer-job"] = "trainer": the root\'s segment keys belong to that '
        'replicatedJob alone, and this JobSet has none of that name (its replicatedJob names: dataset-initializer, '
        'model-initializer, node), so no pod would get them (rule trainer-job-not-found); fix: set '
        "segments.dev/trainer-job on the TrainJob's metadata.annotations to the runtime's trainer replicatedJob "
        '(the one labelled trainer.kubeflow.org/trainjob-ancestor-step: trainer).'
    ),
    'trainjob-spec-annotation-differs': (
        'spec.annotations["kai.scheduler/segment-size"] = "8": the TrainJob\'s metadata.annotations resolve it '
        'to "4", which the webhook writes here for Trainer to copy onto the JobSet (rule '
        'trainjob-spec-annotation-differs); fix: remove it from spec.annotations (the metadata.annotations keys '
        'are used), or set it to "4".'
    ),
    'per-job-level-differs': (
        'spec.replicatedJobs[0].template.metadata.annotations["kai.scheduler/topology-preferred-placement"] ='
        ' "kubernetes.io/hostname": segment size = parallelism makes each Job one segment, and KAI enforces t'
        "his per-Job key as the segment's kai.scheduler/segment-topology-preferred-placement (unset) (rule pe"
        'r-job-level-differs); fix: remove it, or set kai.scheduler/segment-topology-preferred-placement on t'
        'he pod template instead.'
    ),
    'target-unknown': (
        'metadata.labels["segments.dev/target"] = "volcano": not a target this webhook serves (kai, kueue) (r'
        "ule target-unknown); fix: use one of them, or remove the label to use the webhook's --target."
    ),
    'target-as-annotation': (
        'metadata.annotations["segments.dev/target"] = "kueue": an annotation, but the target is read only fr'
        'om the workload\'s labels, so this choice would be ignored (rule target-as-annotation); fix: move it t'
        'o metadata.labels["segments.dev/target"].'
    ),
    'target-key-misspelled': (
        'metadata.labels["segments.dev/targte"] = "kueue": not a key this webhook reads but close to segments'
        '.dev/target, so this target choice would be ignored (rule target-key-misspelled); fix: rename the ke'
        'y to metadata.labels["segments.dev/target"].'
    ),
    'target-label-on-template': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.labels["segments.dev/target"] = "kueue": a pod templ'
        "ate label, but the target is read only from the workload's own labels, so this choice would be ignor"
        'ed (rule target-label-on-template); fix: move it to metadata.labels["segments.dev/target"].'
    ),
    'target-cannot-express': (
        'spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"] = "5": t'
        "arget kueue: Kueue's PodSet has 16 pods and slices of 5 leave 1 pod gated forever on Kueue before v0."
        "20 (kueue #15277; --kueue-version is 0.17) (rule target-cannot-express); fix: a segment size dividin"
        'g 16 (2, 4, 8, 16), or target kai, or --kueue-version 0.20 on Kueue v0.20+.'
    ),
    'job-segments-need-indexed': (
        'spec.completionMode = "NonIndexed": only an Indexed Job gives its pods the completion index segments'
        ' are counted by (rule job-segments-need-indexed); fix: set completionMode: Indexed and parallelism e'
        'qual to completions.'
    ),
}


def test_the_messages_and_the_registry_list_the_same_rules():
    assert sorted(MESSAGES) == sorted(RULES)


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


def _target_annotation():
    obj = tp4()
    obj["metadata"].setdefault("annotations", {})["segments.dev/target"] = "kueue"
    return obj


def _target_on_template():
    obj = tp4()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"] = {"segments.dev/target": "kueue"}
    return obj


def _misspelled_target():
    obj = tp4()
    obj["metadata"].setdefault("labels", {})["segments.dev/targte"] = "kueue"
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

#: rule id → (object, operation, stored object); docs/concepts/admission.md's example column says the same.
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
    "too-many-items": lambda: (_labels_on_worker(10_001), None),
    # DESIGN.md §4.5, KAI d5bc503 plugins/ray/ray_grouper.go and plugins/jobset/jobset_grouper.go
    "template-level-without-topology": lambda: (_kai_reader("kai-reader-class-c-raycluster-no-topology.yaml"), None),
    "per-job-level-differs": lambda: (_kai_reader("kai-reader-class-e-jobset-user-keys.yaml"), None),
    "trainer-job-not-found": lambda: (_trainer_jobset("trainer"), None),
    "trainjob-spec-annotation-differs": lambda: (_trainjob_spec_size("8"), None),
    "target-unknown": lambda: (_labelled(tp4(), "volcano"), None),
    "target-as-annotation": lambda: (_target_annotation(), None),
    "target-key-misspelled": lambda: (_misspelled_target(), None),
    "target-label-on-template": lambda: (_target_on_template(), None),
    "target-cannot-express": lambda: (_labelled(tp4(**{SIZE: "5"}), "kueue"), None),
    "job-segments-need-indexed": lambda: (_non_indexed_job(), None),
    "placement-key-as-label": lambda: (_size_as_label(), None),
}


def _trainer_jobset(trainer_job):
    from tests.unit.admission.test_kinds_trainjob import trainer_v2_0_jobset

    return trainer_v2_0_jobset({TOPO: "cluster-topology", SIZE: "4", SEG_REQ: RACK,
                                "segments.dev/trainer-job": trainer_job})


def _trainjob_spec_size(size):
    obj = _kai_reader("trainjob-torch.yaml")
    obj["spec"]["annotations"] = {SIZE: size}
    return obj


def _labels_on_worker(count):
    obj = tp4()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"] = {
        f"example.com/l{i}": "v" for i in range(count)}
    return obj


def _size_as_label():
    obj = tp4()
    template = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    template["labels"] = {SIZE: template["annotations"].pop(SIZE)}
    return obj


def _kai_reader(name):
    return yaml.safe_load((REPO / "tests" / "data" / "manifests" / name).read_text(encoding="utf-8"))


def _labelled(obj, target):
    obj["metadata"].setdefault("labels", {})["segments.dev/target"] = target
    return obj


def _non_indexed_job():
    from tests.unit.admission.test_targets import job

    return job(mode="NonIndexed")


def _ray_size_3():
    from tests.unit.admission.test_kinds_ray import raycluster

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
def test_each_rule_denies_its_example_with_its_message(rule_id):
    catalog = load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")])
    if rule_id == "conflicting-topology":
        catalog = StaticTopologyCatalog(tuple(catalog.get(n) for n in catalog.names()) + (GPU_FABRIC,))
    obj, old, *given_settings = TRIGGERS[rule_id]()
    settings = given_settings[0] if given_settings else PLAIN
    if old is not None:
        created = review(make_request(old), catalog, settings)
        old = jsonpatch.apply_patch(old, created.patch)
    # behind the size bound, as POST /mutate and segment-webhook review run the core
    bounded = bounded_review(review)
    decision = bounded(make_request(obj, "UPDATE" if old is not None else "CREATE", old=old), catalog, settings)
    assert [v.rule for v in decision.violations] == [rule_id]
    assert decision.code == RULES[rule_id].code
    assert decision.message == MESSAGES[rule_id]


def test_every_warning_has_a_source():
    from webhook.admission.warning_rules import WARNINGS

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
    from webhook.admission.warning_rules import WARNINGS

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


#: Warning texts the user guides show (docs/concepts/admission.md, docs/concepts/kinds/*.md), each from a real review:
#: every one is an instance of a registered template.
SHOWN_WARNINGS = (
    '10 Worker replicas / segment size 4: last segment has 2 pods',
    'subGroupSize 2 set to 4 (kai.scheduler/segment-size wins)',
    'root kai.scheduler/segment-size="2" set to "4" (workerTemplate wins)',
    'startupPolicy LeaderReady: KAI cannot group the lone leader into a segment; use startupPolicy: LeaderCreated',
    'kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for segments; set it in metadata.annotations',
    'unknown key kai.scheduler/gang-timeout ignored: KAI does not read it',
    'kai.scheduler/segment-size on the Master template ignored (never segmented)',
    'leaderTemplate kai.scheduler/segment-topology-required-placement differs from workerTemplate; worker value wins',
    'kai.scheduler/segment-size="4" disagrees with workersPerSegment=8; overwritten',
    'root kai.scheduler/segment-size="8" overridden by template',
    'kai.scheduler/segment-size="04" written as "4"',
    'KAI keeps MPIJob PodGroups flat: it does not enforce these MPIJob segments; --gate-pods does',
    'KAI enforces JobSet segments only of size = parallelism (4): it does not enforce these JobSet segments; --gate-pods does',
    '16 pods of replicatedJob workers / segment size 6: last segment has 4 pods',
    'replicatedJob workers: segment size 6 and parallelism 4 do not divide each other; segments straddle Jobs',
    'KAI groups Ray pods by worker group: it does not enforce these RayCluster segments; --gate-pods does',
    '8 pods of worker group gpu / segment size 3: last segment has 2 pods',
    'pod has no ray.io/worker-group-replica-index (KubeRay < 1.6?): no segment label; --gate-pods forms segments at placement',
    'KAI enforces only size = numNodes (16): it does not enforce these TrainJob segments; --gate-pods does',
    'KAI enforces JobSet segments only of size = parallelism (16): it does not enforce these JobSet segments; --gate-pods do…',
)


def test_every_warning_the_guides_show_is_a_registered_template():
    assert len(SHOWN_WARNINGS) >= 20
    assert [t for t in SHOWN_WARNINGS if not _registered(t)] == []


def test_a_text_no_template_makes_is_not_taken_for_a_registered_warning():
    # the pattern matcher the check above relies on must be able to say no
    assert _registered("10 Worker replicas / segment size 4: last segment has 2 pods") == ["partial-last-segment"]
    assert _registered("10 Worker replicas / segment size 4: the last segment has 2 pods") == []
    # a clipped text is completed by its template's end, not by a text that differs before the cut
    # (templates ending in a field match any clipped text of their head, so only membership is checked)
    assert "partial-last-segment" in _registered("10 Worker replicas / segment size 4: last segment has 2 p…")
    assert "partial-last-segment" not in _registered("10 Worker replicas / segment size 4: first segment has 2 p…")


def test_say_and_text_refuse_an_unregistered_id_or_a_missing_field():
    from webhook.admission.verdict import Decision
    from webhook.admission.warning_rules import say, text

    with pytest.raises(KeyError):
        say(Decision(kind="PyTorchJob"), "no-such-warning")
    with pytest.raises(KeyError):
        text("partial-last-segment", pods="10 Worker replicas", size=4)  # no rest


def test_the_quoted_warning_texts_are_what_review_says():
    # the §3b texts the guides quote are the warnings the webhook gives the sample manifests
    from tests.unit.admission.test_kinds_jobset import jobset
    from tests.unit.admission.test_kinds_jobset import run as run_jobset
    from tests.unit.admission.test_kinds_mpijob import mpijob
    from tests.unit.admission.test_kinds_mpijob import run as run_mpijob
    from tests.unit.admission.test_kinds_ray import pod as ray_pod
    from tests.unit.admission.test_kinds_ray import run as run_ray

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
    catalog = load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")])
    decision = review(make_request(tp4(**{SIZE: raw})), catalog, PLAIN)
    assert [v.rule for v in decision.violations] == ["segment-size-exceeds-replicas"]
    assert decision.message.endswith("(rule segment-size-exceeds-replicas); fix: use a segment size between 2 and 16.")


def test_placement_keys_written_only_as_labels_are_denied_not_left_out_as_not_opted_in():
    # every key of the Worker template as a label and no annotation: the workload is not opted in
    # by its annotations, yet its hard constraints must not vanish silently (DESIGN.md §5)
    obj = tp4()
    template = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    template["labels"] = template.pop("annotations")
    decision = review(make_request(obj), load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")]),
                      PLAIN)
    assert [(v.rule, v.field) for v in decision.violations] == [
        ("placement-key-as-label", f'spec.pytorchReplicaSpecs.Worker.template.metadata.labels["{key}"]')
        for key in (TOPO, SIZE, SEG_REQ)]
    assert decision.code == 403 and decision.patch in (None, [])


def test_a_misspelled_target_key_on_a_workload_that_did_not_opt_in_is_not_denied():
    # no segment key anywhere: the webhook never reads a target for it, so nothing is lost and the
    # object must pass untouched (never deny an object that did not opt in)
    obj = load_example("pytorchjob-tp4.yaml")
    del obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    obj["metadata"].pop("annotations", None)
    obj["metadata"]["labels"] = {"segments.dev/targte": "kueue"}
    decision = review(make_request(obj), load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")]),
                      PLAIN)
    assert decision.violations == []
    assert decision.patch in (None, [])


@pytest.mark.parametrize("key", ["segments.dev/target", "segments.dev/trainer-job", "segments.dev/topology",
                                 "example.com/target"])
def test_keys_that_are_not_target_misspellings_are_not_denied(key):
    obj = tp4()
    obj["metadata"].setdefault("labels", {})[key] = "kai"
    decision = review(make_request(obj), load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")]),
                      PLAIN)
    assert [v.rule for v in decision.violations] == []


def test_a_target_label_on_the_template_of_a_workload_that_did_not_opt_in_is_not_denied():
    obj = load_example("pytorchjob-tp4.yaml")
    template = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    del template["annotations"]
    obj["metadata"].pop("annotations", None)
    template["labels"] = {"segments.dev/target": "kueue"}
    decision = review(make_request(obj), load_topology_files([str(paths.SHARED / "examples" / "topology.yaml")]),
                      PLAIN)
    assert decision.violations == []
