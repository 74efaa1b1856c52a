"""Property tests: every reader of an LWS gets the same segment (DESIGN.md §3 "One answer for every
reader (LWS)"), an object without a placement key is left alone (§5 "Opt-in"), and the rules of §5
hold for every kind of §3b.

1. For random LeaderWorkerSets (size 1..64, every segment size, both policies, the annotation on
   the workerTemplate and/or ``subGroupSize`` and/or the root annotation), after the webhook's
   patch, every pod gets the same segment from three readers, or the object is denied with the
   rule that failed named:

   * the webhook's pod handler (``kai.scheduler/segment-index`` / ``subgroup-name``);
   * :func:`lws_subgroup_index`, written from LWS's pod webhook (kubernetes-sigs/lws
     ``pkg/webhooks/pod_webhook.go``: ``getSubGroupIndex`` and the leader branch of ``Default``);
   * :func:`kai_leaf_subgroup`, written from KAI's pod-grouper (kai-scheduler/KAI-Scheduler at
     d5bc503, ``pkg/podgrouper/podgrouper/plugins/leaderworkerset/lws_grouper.go``:
     ``getSegmentSize``, ``getSegmentIndex``, ``buildSubGroupsWithSegmentation``).

2. No PyTorchJob or LeaderWorkerSet without a ``kai.scheduler/*`` key (random shapes, valid or not,
   CREATE or UPDATE) is ever denied or patched, nor warned about.

3. For random objects of the §3b kinds (MPIJob, JobSet, RayCluster / RayJob / RayService,
   TrainJob): the same opt-in; a misspelled placement key anywhere is denied; a segment size
   without a topology writes nothing and warns; UPDATE denies a segment-size change, never a
   scale that keeps the size.
"""

from __future__ import annotations

import copy
import json
import re

import jsonpatch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.conftest import SIZE, TOPO, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.kube.kai_scheduler import KAI_KEYS
from webhook.topology.objects import default_catalog

CATALOG = default_catalog()
PLAIN = AdmissionSettings()
LW, LE = "LeaderWorker", "LeaderExcluded"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_POLICY_TYPE = "leaderworkerset.sigs.k8s.io/subgroup-policy-type"
INDEX, NAME = "kai.scheduler/segment-index", "kai.scheduler/subgroup-name"


# ----------------------------------------------------------------------------- LWS oracle

def lws_subgroup_index(pod_annotations: dict, worker_index: int) -> int | None:
    """LWS's ``leaderworkerset.sigs.k8s.io/subgroup-index`` for a pod (None: LWS sets none).

    LWS labels a pod only when its ``subgroup-size`` annotation (copied from ``subGroupSize``) is
    there. The leader gets 0 unless the policy type is LeaderExcluded. A worker with group size R
    (the ``size`` annotation) and subgroup size S: when R-1 is a multiple of S but R is not, the
    leader counts as an extra member of subgroup 0 and the worker's index is (w-1) div S;
    otherwise w div S."""
    if LWS_SUBGROUP_SIZE not in pod_annotations:
        return None
    if worker_index == 0:
        return None if pod_annotations.get(LWS_POLICY_TYPE) == LE else 0
    group, sub = int(pod_annotations[LWS_SIZE]), int(pod_annotations[LWS_SUBGROUP_SIZE])
    if (group - 1) % sub == 0 and group % sub != 0:
        return (worker_index - 1) // sub
    return worker_index // sub


# ----------------------------------------------------------------------------- KAI oracle

def _go_atoi(text: str) -> int | None:
    """Go's strconv.Atoi on a decimal string: optional sign, ASCII digits."""
    return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None


def kai_segment_size(lws: dict) -> int | str | None:
    """The segment size KAI's pod-grouper reads: ``subGroupSize`` when present, else the LWS root
    annotation ``kai.scheduler/segment-size``, else the workerTemplate's (Go ``strconv.Atoi``:
    optional sign, ASCII digits; anything else is ``"error"``). None: KAI does not segment."""
    lwt = lws["spec"]["leaderWorkerTemplate"]
    size = (lwt.get("subGroupPolicy") or {}).get("subGroupSize")
    if size is not None:
        return size
    for annotations in (lws["metadata"].get("annotations") or {}, lwt["workerTemplate"]["metadata"].get("annotations") or {}):
        if SIZE in annotations:
            return int(annotations[SIZE]) if re.fullmatch(r"[+-]?[0-9]+", annotations[SIZE]) else "error"
    return None


def kai_leaf_subgroup(lws: dict, worker_index: int) -> tuple[int | None, str] | str:
    """KAI's answer for one pod of a segmented ``lws`` (:func:`kai_segment_size` not None):
    ``(segment, leaf subgroup name)``, segment None for a leader excluded from segments, or the
    string ``"error"`` when KAI's pod-grouper rejects the object.

    A size <= 1, above ``size`` (R), or (LeaderExcluded) not dividing R-1 is an error. Segment of
    worker w: the leader is in segment 0; when R-1 is a multiple of S the leader is an extra pod of
    segment 0 and workers go to (w-1) div S; otherwise w div S. Leaf names: the leader is
    ``leader``; under LeaderWorker the other pods of segment 0 are ``workers`` (both nested under
    ``segment-0``); everyone else ``segment-<k>`` (under LeaderExcluded KAI shifts the pod's
    position by the leader's extra subgroup, not its name).
    """
    lwt = lws["spec"]["leaderWorkerTemplate"]
    group, size = lwt["size"], kai_segment_size(lws)
    assert size is not None, "asked only about a segmented LeaderWorkerSet"
    policy = (lwt.get("subGroupPolicy") or {}).get("subGroupPolicyType", LW)
    if isinstance(size, str) or size <= 1 or size > group or (policy == LE and (group - 1) % size != 0):
        return "error"
    if worker_index == 0:
        return (None if policy == LE else 0, "leader")
    segment = (worker_index - 1) // size if (group - 1) % size == 0 else worker_index // size
    if policy == LW and segment == 0:
        return (0, "workers")
    return (segment, f"segment-{segment}")


# ----------------------------------------------------------------------------- the webhook

def lws_pods(lws: dict) -> list[dict]:
    """The pods of one group as the LWS controller creates them: template annotations plus
    ``size`` (and, with ``subGroupSize``, ``subgroup-size`` and ``subgroup-policy-type``)."""
    lwt = lws["spec"]["leaderWorkerTemplate"]
    extra = {LWS_SIZE: str(lwt["size"])}
    if (lwt.get("subGroupPolicy") or {}).get("subGroupSize") is not None:
        extra[LWS_SUBGROUP_SIZE] = str(lwt["subGroupPolicy"]["subGroupSize"])
        extra[LWS_POLICY_TYPE] = lwt["subGroupPolicy"].get("subGroupPolicyType", LW)
    pods = []
    for w in range(lwt["size"]):  # worker index 0 is the leader
        template = lwt.get("leaderTemplate") if w == 0 and lwt.get("leaderTemplate") else lwt["workerTemplate"]
        annotations = dict(template["metadata"].get("annotations") or {}, **extra)
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"l-0-{w}" if w else "l-0", "namespace": "default", "annotations": annotations,
            "labels": {"leaderworkerset.sigs.k8s.io/name": "l", "leaderworkerset.sigs.k8s.io/group-index": "0",
                       "leaderworkerset.sigs.k8s.io/worker-index": str(w)}}})
    return pods


def webhook_pod_answer(pod: dict) -> tuple[int | None, str | None]:
    decision = review(make_request(pod), CATALOG, PLAIN)
    assert decision.allowed and decision.warnings == [], (decision.message, decision.warnings)
    labels = jsonpatch.apply_patch(pod, decision.patch)["metadata"].get("labels", {})
    index = labels.get(INDEX)
    return (int(index) if index is not None else None, labels.get(NAME))


@st.composite
def segmented_lws(draw):
    group = draw(st.integers(1, 64))
    sizes = st.integers(1, group + 1)
    lwt = {"size": group,
           "workerTemplate": {"metadata": {"annotations": {}}, "spec": {"containers": [{"name": "w", "image": "i"}]}}}
    root: dict = {}
    where_topology = draw(st.sampled_from(["worker", "root"]))
    (lwt["workerTemplate"]["metadata"]["annotations"] if where_topology == "worker" else root)[TOPO] = "cluster-topology"
    if draw(st.booleans()):
        lwt["workerTemplate"]["metadata"]["annotations"][SIZE] = str(draw(sizes))
    if draw(st.booleans()):
        root[SIZE] = str(draw(sizes))
    if draw(st.booleans()):
        lwt["subGroupPolicy"] = {"subGroupSize": draw(sizes)}
        policy = draw(st.sampled_from([None, LW, LE]))
        if policy is not None:
            lwt["subGroupPolicy"]["subGroupPolicyType"] = policy
    if draw(st.booleans()):
        lwt["leaderTemplate"] = {"metadata": {}, "spec": {"containers": [{"name": "l", "image": "i"}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "l", "namespace": "default", "annotations": root}, "spec": {"leaderWorkerTemplate": lwt}}


def expected_denials(lws: dict) -> set[str]:
    """The rules the resolved size breaks (DESIGN.md §3, §5), from the object as written."""
    lwt = lws["spec"]["leaderWorkerTemplate"]
    group = lwt["size"]
    sgp = lwt.get("subGroupPolicy") or {}
    excluded = sgp.get("subGroupPolicyType") == LE
    worker_size = lwt["workerTemplate"]["metadata"]["annotations"].get(SIZE)
    root_size = lws["metadata"]["annotations"].get(SIZE)
    raw = worker_size or root_size or sgp.get("subGroupSize")
    if raw is None:
        return set()
    size = int(raw)
    pods = group - 1 if excluded else group
    if size <= 1:
        return {"segment-size-too-small"}
    if size > pods:
        return {"segment-size-exceeds-replicas"}
    if excluded and (group - 1) % size:
        return {"lws-leader-excluded-divisibility"}
    if not excluded and "subGroupSize" in sgp and group % size and (group - 1) % size:
        return {"lws-subgroup-size-divisibility"}
    return set()


@settings(max_examples=400, deadline=None)
@given(segmented_lws())
def test_lws_kai_and_the_webhook_give_every_pod_the_same_segment(lws):
    decision = review(make_request(lws), CATALOG, PLAIN)
    expected = expected_denials(lws)
    if not decision.allowed:
        assert {v.rule for v in decision.violations} == expected
        assert all(f"(rule {rule})" in decision.message for rule in expected)
        return
    assert expected == set()
    admitted = jsonpatch.apply_patch(lws, decision.patch)
    kai_segments = kai_segment_size(admitted) is not None
    for w, pod in enumerate(lws_pods(admitted)):
        webhook = webhook_pod_answer(pod)
        lws_index = lws_subgroup_index(pod["metadata"]["annotations"], w)
        if not kai_segments:  # no size anywhere: nobody segments, the webhook labels nothing
            assert webhook == (None, None) and lws_index is None, (w, webhook, lws_index)
            continue
        kai = kai_leaf_subgroup(admitted, w)
        assert kai != "error", "KAI's pod-grouper would reject the admitted object"
        assert webhook == kai, (w, webhook, kai)
        if lws_index is not None:
            assert lws_index == webhook[0], (w, lws_index, webhook)


# ----------------------------------------------------------------------------- opt-in

other_keys = st.sampled_from(["team", "example.com/owner", "leaderworkerset.sigs.k8s.io/exclusive-topology",
                              "app.kubernetes.io/name", "prometheus.io/scrape"])
values = st.one_of(st.sampled_from(["", "1", "4", "x", "cloud.provider.com/topology-rack"]), st.text(max_size=6))
annotation_maps = st.one_of(st.none(), st.dictionaries(other_keys, values, max_size=3))
numbers = st.one_of(st.none(), st.integers(-2, 70), st.sampled_from(["4", "x", 2.5]))


def _template(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([None, "oops", {}]))
    return {"metadata": {"annotations": draw(annotation_maps)}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


@st.composite
def foreign_pytorchjobs(draw):
    specs = {"Worker": {"replicas": draw(numbers), "template": _template(draw)}}
    if draw(st.booleans()):
        specs["Master"] = {"replicas": 1, "template": _template(draw)}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "j", "annotations": draw(annotation_maps)}, "spec": {"pytorchReplicaSpecs": specs}}


@st.composite
def foreign_lws(draw):
    lwt = {"size": draw(numbers), "workerTemplate": _template(draw)}
    if draw(st.booleans()):
        lwt["leaderTemplate"] = _template(draw)
    if draw(st.booleans()):
        lwt["subGroupPolicy"] = {"subGroupSize": draw(numbers),
                                 "subGroupPolicyType": draw(st.sampled_from([LW, LE, "x", None]))}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "l", "annotations": draw(annotation_maps)}, "spec": {"leaderWorkerTemplate": lwt}}


@settings(max_examples=300, deadline=None)
@given(obj=st.one_of(foreign_pytorchjobs(), foreign_lws()), old=st.one_of(st.none(), foreign_pytorchjobs(), foreign_lws()),
       platform=st.booleans())
def test_objects_without_kai_keys_are_never_denied_patched_or_warned(obj, old, platform):
    settings_ = AdmissionSettings(platform_users=frozenset({"kubectl-user"}) if platform else frozenset(),
                                  default_topology="cluster-topology")
    if old is not None and old["kind"] != obj["kind"]:
        old = None
    request = make_request(obj, "UPDATE" if old is not None else "CREATE", old=old)
    decision = review(request, CATALOG, settings_)
    assert (decision.allowed, decision.patch, decision.warnings) == (True, [], [])
    assert not any(key.startswith("kai.") for key in str(obj).split("'"))  # the generator made none


# ----------------------------------------------------------------------------- §5 for the §3b kinds
# The opt-in, misspelled-key, segments-without-topology and UPDATE rules of DESIGN.md §5 hold for
# every kind of §3b ("same validation (§5), same opt-in"). Each builder makes one object of its kind
# from the annotations of the root, of the segmented pod template ("worker") and of another pod
# template of the object ("other"), with ``n`` segmented pods; it returns the object and the field
# path of the worker map.

def build_mpijob(root, worker, other, n, draw):
    as_worker = draw(st.booleans())
    obj = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "m", "namespace": "default", "annotations": root},
           "spec": {"runLauncherAsWorker": as_worker, "mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": {"metadata": {"annotations": other},
                                                        "spec": {"containers": [{"name": "l", "image": "i"}]}}},
               "Worker": {"replicas": n - 1 if as_worker else n,
                          "template": {"metadata": {"annotations": worker},
                                       "spec": {"containers": [{"name": "w", "image": "i"}]}}}}}}
    return obj, "spec.mpiReplicaSpecs.Worker.template.metadata.annotations"


def scale_mpijob(obj, n):
    """``obj`` with ``n`` segmented pods."""
    spec = obj["spec"]
    spec["mpiReplicaSpecs"]["Worker"]["replicas"] = n - 1 if spec["runLauncherAsWorker"] else n
    return obj


def build_jobset(root, worker, other, n, draw):
    """A JobSet whose replicatedJob ``workers`` runs ``n`` pods (replicas × parallelism; ``other`` is
    its Job template's map), sometimes beside a driver replicatedJob without keys."""
    parallelism = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    rjobs = [{"name": "workers", "replicas": n // parallelism, "template": {
        "metadata": {"annotations": other},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "template": {"metadata": {"annotations": worker}, "spec": {"containers": [{"name": "w", "image": "i"}]}}}}}]
    if draw(st.booleans()) and not any(k in root for k in (SIZE,)):
        rjobs.insert(0, {"name": "driver", "template": {"spec": {"template": {"spec": {"containers": [{"name": "d"}]}}}}})
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
           "metadata": {"name": "js", "namespace": "default", "annotations": root}, "spec": {"replicatedJobs": rjobs}}
    return obj, f"spec.replicatedJobs[{len(rjobs) - 1}].template.spec.template.metadata.annotations"


def scale_jobset(obj, n):
    """``obj`` with ``n`` pods in replicatedJob ``workers`` (parallelism 1 when it does not divide n)."""
    rj = obj["spec"]["replicatedJobs"][-1]
    parallelism = rj["template"]["spec"]["parallelism"]
    if n % parallelism:
        parallelism = rj["template"]["spec"]["parallelism"] = rj["template"]["spec"]["completions"] = 1
    rj["replicas"] = n // parallelism
    return obj


def build_ray(kind):
    """A builder of a ``kind`` (RayCluster, RayJob, RayService) whose worker group ``gpu`` has ``n``
    pods (single-host replicas, so every segment size keeps replicas whole); ``other`` is the head's map."""
    member = {"RayCluster": None, "RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}[kind]

    def build(root, worker, other, n, draw):
        cluster = {"headGroupSpec": {"template": {"metadata": {"annotations": other},
                                                  "spec": {"containers": [{"name": "h", "image": "i"}]}}},
                   "workerGroupSpecs": [{"groupName": "gpu", "replicas": n, "numOfHosts": 1, "template": {
                       "metadata": {"annotations": worker}, "spec": {"containers": [{"name": "w", "image": "i"}]}}}]}
        spec = cluster if member is None else {member: cluster}
        obj = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "r", "namespace": "default",
                                                                      "annotations": root}, "spec": spec}
        prefix = "spec" if member is None else f"spec.{member}"
        return obj, f"{prefix}.workerGroupSpecs[0].template.metadata.annotations"

    return build


def scale_ray(obj, n):
    """``obj`` with ``n`` replicas in worker group ``gpu``."""
    spec = obj["spec"]
    cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec
    cluster["workerGroupSpecs"][0]["replicas"] = n
    return obj


def build_trainjob(root, worker, other, n, draw):
    """A TrainJob of ``n`` nodes: it has no pod template of its own, so every map's keys are on
    its root (DESIGN.md §3b: read from the TrainJob root)."""
    obj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "t", "namespace": "default", "annotations": {**other, **worker, **root}},
           "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": n}}}
    return obj, "metadata.annotations"


def scale_trainjob(obj, n):
    obj["spec"]["trainer"]["numNodes"] = n
    return obj


#: kind → (builder, scaler)
NEW_KINDS = {"TrainJob": (build_trainjob, scale_trainjob), "MPIJob": (build_mpijob, scale_mpijob), "JobSet": (build_jobset, scale_jobset),
             **{kind: (build_ray(kind), scale_ray) for kind in ("RayCluster", "RayJob", "RayService")}}
PLACEMENT_KEYS = ["kai.scheduler/topology", "kai.scheduler/topology-required-placement",
                  "kai.scheduler/topology-preferred-placement", "kai.scheduler/segment-size",
                  "kai.scheduler/segment-topology-required-placement",
                  "kai.scheduler/segment-topology-preferred-placement"]


@st.composite
def new_kind_objects(draw, root=None, worker=None, other=None, n=None):
    """(kind, object, worker map field, n) of a random §3b kind."""
    kind = draw(st.sampled_from(sorted(NEW_KINDS)))
    n = n if n is not None else draw(st.integers(2, 40))
    obj, field = NEW_KINDS[kind][0](dict(root or {}), dict(worker or {}), dict(other or {}), n, draw)
    return kind, obj, field, n


@st.composite
def misspelling(draw):
    """(misspelled key, the placement key it resembles): 1 to 3 single-character edits (a letter
    dropped or replaced: edit distance at most 3) of one of the six keys that make no key KAI reads
    (DESIGN.md §5)."""
    key = draw(st.sampled_from(PLACEMENT_KEYS))
    name = list(key[len("kai.scheduler/"):])
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(name) - 1))
        if draw(st.booleans()) and len(name) > 4:
            del name[i]
        else:
            name[i] = draw(st.sampled_from("qxz"))
    wrong = "kai.scheduler/" + "".join(name)
    assume(wrong not in PLACEMENT_KEYS and wrong not in KAI_KEYS)
    return wrong, key


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_new_kinds_without_kai_keys_are_never_denied_patched_or_warned(data):
    ann = data.draw(annotation_maps) or {}
    kind, obj, _, n = data.draw(new_kind_objects(root=ann, worker=data.draw(annotation_maps) or {},
                                                 other=data.draw(annotation_maps) or {}))
    old = None
    if data.draw(st.booleans()):
        old = NEW_KINDS[kind][1](copy.deepcopy(obj), data.draw(st.integers(1, 40)))
    decision = review(make_request(obj, "UPDATE" if old else "CREATE", old=old), CATALOG,
                      AdmissionSettings(gate_pods=data.draw(st.booleans()), default_topology="cluster-topology"))
    assert (decision.allowed, decision.patch, decision.warnings) == (True, [], [])


@settings(max_examples=200, deadline=None)
@given(data=st.data(), spelled=misspelling(), where=st.sampled_from(["root", "worker", "other"]))
def test_new_kinds_deny_a_misspelled_placement_key_anywhere(data, spelled, where):
    wrong, meant = spelled
    maps: dict[str, dict[str, str]] = {"root": {}, "worker": {}, "other": {}}
    if data.draw(st.booleans()):  # with or without valid keys beside it
        maps["worker"].update({TOPO: "cluster-topology", SIZE: "2"})
    maps[where][wrong] = "cloud.provider.com/topology-rack"
    kind, obj, _, _ = data.draw(new_kind_objects(**maps))
    decision = review(make_request(obj), CATALOG, PLAIN)
    assert not decision.allowed and "misspelled-key" in {v.rule for v in decision.violations}
    assert f'["{wrong}"] = "cloud.provider.com/topology-rack": not a key KAI reads but close to {meant}' in decision.message \
        or 'close to kai.scheduler/' in decision.message  # a nearer placement key may be named
    assert "(rule misspelled-key); fix: rename the key to kai.scheduler/" in decision.message


@settings(max_examples=150, deadline=None)
@given(data=st.data(), where=st.sampled_from(["root", "worker"]))
def test_new_kinds_segments_without_a_topology_write_nothing_and_warn(data, where):
    n = data.draw(st.integers(2, 40))
    size = data.draw(st.integers(2, n))
    kind, obj, _, _ = data.draw(new_kind_objects(n=n, **{where: {SIZE: str(size)}}))
    decision = review(make_request(obj), CATALOG, PLAIN)
    assert decision.allowed and decision.patch == []
    assert len(decision.warnings) == 1 + bool(n % size)  # a partial last segment is said too (§5)
    rest = n % size  # "1 pod", "2 pods" (issue 37: pluralised)
    assert all(w.endswith(f": last segment has {rest} pod{'' if rest == 1 else 's'}") for w in decision.warnings[:-1])
    assert decision.warnings[-1] == ("kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for segments; "
                                     "set it in metadata.annotations")


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_new_kinds_update_denies_a_segment_size_change_and_never_a_scale_that_keeps_it(data):
    n = data.draw(st.integers(4, 40))
    size, other_size = data.draw(st.lists(st.integers(2, n), min_size=2, max_size=2, unique=True))
    kind, obj, field, _ = data.draw(new_kind_objects(n=n, worker={TOPO: "cluster-topology", SIZE: str(size)}))
    created = review(make_request(obj), CATALOG, PLAIN)
    assert created.allowed, created.message
    stored = jsonpatch.apply_patch(obj, created.patch)
    changed = json.loads(json.dumps(obj).replace(f'"{SIZE}": "{size}"', f'"{SIZE}": "{other_size}"'))
    decision = review(make_request(changed, "UPDATE", old=stored), CATALOG, PLAIN)
    assert [v.rule for v in decision.violations] == ["immutable-field"]
    assert decision.violations[0].field == f'{field}["{SIZE}"]'
    assert f'cannot change (was "{size}")' in decision.message
    scaled = NEW_KINDS[kind][1](copy.deepcopy(obj), data.draw(st.integers(size, 40)))
    decision = review(make_request(scaled, "UPDATE", old=stored), CATALOG, PLAIN)
    assert decision.allowed, decision.message
