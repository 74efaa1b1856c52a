"""The controller's pure reconcile (webhook/gating/reconcile.py; DESIGN.md §9, last bullet):
a view of the cache in, one literal Result out — the Events to write, the state on the gang's top
owner workload, when to look again.

Pods are made by the webhook with ``--gate-pods`` from pytorchjob-zone-and-rack.yaml (17 pods:
Master + 16 Workers, the training operator's names ``<job>-master-0``, ``<job>-worker-<i>``;
tests/unit/gating/test_controller_decision.py), on 8 nodes of 4 GPUs in one block ``zone-a-b1``.
"""

from __future__ import annotations

import logging
from typing import Any

from tests.unit.gating.test_controller_decision import RACK, TOPOLOGY, cluster, gang_pods, pytorchjob
from webhook.controller.election import RenewalLogFilter
from webhook.controller.events import EventCorrelator, Observation
from webhook.gating.decision import (
    INCOMPLETE,
    INFEASIBLE,
    INVALID,
    ParseCache,
    StrandedPod,
    Waiting,
    ledger_of,
    stranded_pod,
)
from webhook.gating.reconcile import (
    EventSpec,
    GangView,
    ObjectRef,
    OwnerPatch,
    Result,
    TopOwner,
    expected_pod_names,
    missing_pod_names,
    owner_annotation,
    reconcile,
)

GANG = "team-a/job-a"
#: 2026-01-01T00:00:00Z in seconds since the epoch
CREATED = 1767225600.0
OWNER = ObjectRef("kubeflow.org/v1", "PyTorchJob", "team-a", "job-a", "uid-job-a")
NAMES = ["job-a-master-0"] + [f"job-a-worker-{i}" for i in range(16)]


def made_pods(count: int = 17) -> list[Any]:
    """The gang's first ``count`` pods, each with a uid and the creation time :data:`CREATED`."""
    pods = gang_pods(pytorchjob())[:count]
    for pod in pods:
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return pods


def owner(annotation: str | None = None) -> TopOwner:
    job = pytorchjob()
    job["metadata"]["uid"] = "uid-job-a"
    return TopOwner(OWNER, "pytorchjobs", job, annotation)


def view(pods: list[Any], *, nodes: list[Any] | None = None, top: TopOwner | None = None, now: float = CREATED + 60,
         grace: float = 10.0, siblings: dict[str, str] | None = None) -> GangView:
    cache = ParseCache()
    ledger = ledger_of(cluster() if nodes is None else nodes, pods, [], cache)
    return GangView(pods, ledger, {TOPOLOGY.name: TOPOLOGY}, None, cache, top, siblings or {}, now, grace)


def refs(names: list[str]) -> tuple[tuple[str, str], ...]:
    """The sorted (namespace, name) pairs of ``names`` (Waiting.pods is sorted)."""
    return tuple(sorted(("team-a", name) for name in names))


def test_an_incomplete_gang_in_its_grace_is_looked_at_again_when_the_grace_ends():
    pods = made_pods(16)
    assert reconcile(GANG, view(pods, top=owner(), now=CREATED + 3, grace=10.0)) == Result(
        GANG, INCOMPLETE, requeue_after=7.0,
        waiting=Waiting(GANG, INCOMPLETE, "16 of 17 pods exist", refs(NAMES[:16])))


def test_an_incomplete_gang_after_its_grace_names_the_missing_pod_on_its_owner():
    line = "gang team-a/job-a: waiting for 1 more pod (16 of 17 exist): job-a-worker-15"
    assert reconcile(GANG, view(made_pods(16), top=owner())) == Result(
        GANG, INCOMPLETE, line,
        events=(EventSpec(OWNER, "Normal", "GangIncomplete", line),),
        owner_patch=OwnerPatch(OWNER, "pytorchjobs", line),
        waiting=Waiting(GANG, INCOMPLETE, "16 of 17 pods exist", refs(NAMES[:16])))


def test_an_owner_that_already_shows_the_line_is_not_patched_again_but_the_event_is_written():
    line = "gang team-a/job-a: waiting for 3 more pods (14 of 17 exist): job-a-worker-13, job-a-worker-14, job-a-worker-15"
    assert reconcile(GANG, view(made_pods(14), top=owner(line))) == Result(
        GANG, INCOMPLETE, line,
        events=(EventSpec(OWNER, "Normal", "GangIncomplete", line),),
        waiting=Waiting(GANG, INCOMPLETE, "14 of 17 pods exist", refs(NAMES[:14])))


def test_without_a_readable_owner_the_event_goes_on_the_first_gated_pod_and_no_annotation():
    pods = made_pods()
    pods[0]["metadata"]["annotations"]["segments.dev/gang-size"] = "18"  # the Master disagrees
    line = 'gang team-a/job-a: pods disagree on segments.dev/gang-size: "17", "18"'
    master = ObjectRef("v1", "Pod", "team-a", "job-a-master-0", "uid-job-a-master-0")
    assert reconcile(GANG, view(pods)) == Result(
        GANG, INVALID, line, events=(EventSpec(master, "Warning", "GangInvalid", line),),
        waiting=Waiting(GANG, INVALID, 'pods disagree on segments.dev/gang-size: "17", "18"', refs(NAMES)))


def test_a_gang_naming_an_unknown_topology_waits_with_back_off():
    pods = made_pods()
    for pod in pods:
        pod["metadata"]["annotations"]["kai.scheduler/topology"] = "other"
        pod["metadata"]["annotations"]["segments.dev/topology"] = "other"
    line = 'gang team-a/job-a: topology "other" is not known (known: "cluster-topology")'
    result = reconcile(GANG, view(pods, top=owner()))
    assert result == Result(
        GANG, INFEASIBLE, line, events=(EventSpec(OWNER, "Warning", "PlacementInfeasible", line),),
        owner_patch=OwnerPatch(OWNER, "pytorchjobs", line), backoff=True,
        waiting=Waiting(GANG, INFEASIBLE, 'topology "other" is not known (known: "cluster-topology")', refs(NAMES)))


def test_a_gang_that_never_fits_says_so_with_back_off():
    result = reconcile(GANG, view(made_pods(), nodes=cluster()[:4], top=owner()))  # 16 of the 32 GPUs it needs
    assert (result.kind, result.backoff, result.releases, result.requeue_after) == ("never-fits", True, (), None)
    [event] = result.events
    assert (event.target, event.type, event.reason) == (OWNER, "Warning", "PlacementNeverFits")
    assert event.message.startswith("gang team-a/job-a: can never fit, not even on the empty cluster")
    assert result.owner_patch == OwnerPatch(OWNER, "pytorchjobs", event.message)


def test_a_placed_gang_is_released_and_the_ledger_is_left_as_it_was():
    pods = made_pods()
    seen = view(pods, top=owner())
    free_before = seen.ledger.index(None, None).free.copy()
    result = reconcile(GANG, seen)
    # 32 GPUs: every node; the narrowest level they all share is the one block zone-a-b1
    line = "gang team-a/job-a: released 17 pods to cloud.provider.com/topology-block=zone-a-b1"
    assert (result.kind, result.state, result.waiting, result.requeue_after, result.backoff) == (
        "released", line, None, None, False)
    assert result.events == (EventSpec(OWNER, "Normal", "GangReleased", line),)
    assert result.owner_patch == OwnerPatch(OWNER, "pytorchjobs", line)
    assert sorted(r.name for r in result.releases) == sorted(NAMES)
    assert sorted(ref for ref, _, _ in result.charges) == sorted(refs(NAMES))
    assert (seen.ledger.index(None, None).free == free_before).all()  # the runner charges, not reconcile


def test_an_owner_with_several_gangs_shows_every_gang_s_line():
    line = "gang team-a/job-a: waiting for 1 more pod (16 of 17 exist): job-a-worker-15"
    sibling = "gang team-a/job-0: released 4 pods to cloud.provider.com/topology-rack=zone-a-r1"
    result = reconcile(GANG, view(made_pods(16), top=owner(), siblings={"team-a/job-0": sibling}))
    assert result.owner_patch == OwnerPatch(OWNER, "pytorchjobs", f"{sibling}; {line}")
    assert owner_annotation({"b": "gang b: x", "a": "gang a: y", "c": ""}) == "gang a: y; gang b: x"


def test_expected_pod_names_are_the_operator_s():
    assert expected_pod_names(GANG, pytorchjob(), "PyTorchJob") == NAMES
    assert expected_pod_names("team-a/other", pytorchjob(), "PyTorchJob") is None
    assert expected_pod_names(GANG, pytorchjob(), "Deployment") is None


def test_the_event_key_is_client_go_s_and_the_memory_is_an_lru():
    spec = EventSpec(OWNER, "Warning", "PlacementNeverFits", "gang team-a/job-a: can never fit")
    assert EventCorrelator.key("c", spec) == ("c", "kubeflow.org/v1", "PyTorchJob", "team-a", "job-a", "uid-job-a",
                                              "Warning", "PlacementNeverFits", "gang team-a/job-a: can never fit")
    correlator = EventCorrelator(capacity=2)
    for name in ("a", "b", "c"):
        correlator.record((name,), Observation(f"ev-{name}", 1, "t"))
    assert correlator.last(("a",)) is None  # the oldest went
    assert correlator.last(("c",)) == Observation("ev-c", 1, "t")


def test_lease_renewals_log_at_debug():
    """The library logs "leader X has successfully acquired lease" at every renewal (every 2 s):
    a DEBUG line; taking part in the election ("is a follower") stays INFO."""
    renewal = logging.LogRecord("leaderelection", logging.INFO, __file__, 1,
                                "leader c-1 has successfully acquired lease", None, None)
    follower = logging.LogRecord("leaderelection", logging.INFO, __file__, 1, "c-1 is a follower", None, None)
    assert RenewalLogFilter().filter(renewal) is False and renewal.levelno == logging.DEBUG
    assert RenewalLogFilter().filter(follower) is True and follower.levelno == logging.INFO


def test_the_planned_stop_is_not_an_error_traceback():
    """Stopping, the leading callback raises to end the library's renew loop; the library logs
    that with a traceback at ERROR: a DEBUG record. Any other exception stays an ERROR."""
    from webhook.controller.election import _Stopping

    def record(error: Exception) -> logging.LogRecord:
        return logging.LogRecord("leaderelection", logging.ERROR, __file__, 1,
                                 "onstarted_leading raised an exception, stopping leading", None,
                                 (type(error), error, None))

    planned, bug = record(_Stopping("c-1 stops")), record(RuntimeError("a bug"))
    assert RenewalLogFilter().filter(planned) is False and planned.levelno == logging.DEBUG
    assert RenewalLogFilter().filter(bug) is True and bug.levelno == logging.ERROR


# ------------------------------------------------------------------ a Job blocked by a ResourceQuota
JOB_B = ObjectRef("batch/v1", "Job", "team-a", "job-b", "uid-job-b")


def indexed_job() -> dict:
    """An Indexed Job of 8 pods, segments of 4 in one rack (the trial's: a ResourceQuota lets 4 in)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "job-b", "namespace": "team-a", "uid": "uid-job-b",
                         "annotations": {"kai.scheduler/topology": "cluster-topology"}},
            "spec": {"completionMode": "Indexed", "parallelism": 8, "completions": 8, "template": {
                "metadata": {"annotations": {"kai.scheduler/segment-size": "4",
                                             "kai.scheduler/segment-topology-required-placement": RACK}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}


def test_a_job_s_missing_pods_are_its_missing_indexes_not_the_pods_that_exist():
    """Issue 37 trial: the Job controller names its pods <job>-<index>-<random>; 4 of 8 exist
    (indexes 0, 2, 5, 6; a ResourceQuota refused the others). The line names the 4 indexes that do
    not exist (the operator's names without the suffix), not all 8."""
    pods = []
    for pod in gang_pods(indexed_job()):
        index = pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        if index in ("0", "2", "5", "6"):
            pod["metadata"]["name"] = f"job-b-{index}-x7k2p"
            pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
            pods.append(pod)
    job = TopOwner(JOB_B, "jobs", indexed_job())
    line = "gang team-a/job-b: waiting for 4 more pods (4 of 8 exist): job-b-1, job-b-3, job-b-4, job-b-7"
    result = reconcile("team-a/job-b", view(pods, top=job))
    assert (result.kind, result.state) == (INCOMPLETE, line)
    assert result.owner_patch == OwnerPatch(JOB_B, "jobs", line)


def test_a_live_pod_is_one_expected_pod_by_name_or_by_the_labels_it_alone_has():
    expected = [("job-b-0", {"batch.kubernetes.io/job-completion-index": "0"}),
                ("job-b-1", {"batch.kubernetes.io/job-completion-index": "1"}),
                ("w-0", {"role": "w"}), ("w-1", {"role": "w"})]  # a label set two share identifies neither

    def pod(name, **labels):
        return {"metadata": {"namespace": "team-a", "name": name,
                             "labels": {k.replace("_", "-"): v for k, v in labels.items()}}}

    live = [pod("job-b-1-abcde", **{"batch.kubernetes.io/job-completion-index": "1"}), pod("x-1", role="w"), pod("w-0")]
    assert missing_pod_names(expected, live) == ["job-b-0", "w-1"]
    # the same index twice (a replacement pod beside one being deleted is filtered out before) is one pod
    twice = [pod("job-b-1-abcde", **{"batch.kubernetes.io/job-completion-index": "1"}),
             pod("job-b-1-fghij", **{"batch.kubernetes.io/job-completion-index": "1"})]
    assert missing_pod_names(expected, twice) == ["job-b-0", "w-0", "w-1"]


# ------------------------------------------------------------------ a released gang left stranded (DESIGN.md §9)
SCHEDULER_SAYS = ("0/8 nodes are available: 1 Insufficient nvidia.com/gpu, 7 node(s) didn't match Pod's node "
                  "affinity/selector. preemption: 0/8 nodes are available: 8 No preemption victims found for "
                  "incoming pod.")


def released_gang(stranded: str = "job-a-worker-15", owned: bool = True) -> list[Any]:
    """The 17 pods released (gate removed, pinned to a node; here all to zone-a-r4-n2 for brevity)
    and bound but ``stranded``, which kube-scheduler reports Unschedulable since 00:00:10
    (the message kube-scheduler v1.34 writes for a pod pinned to a full node)."""
    pods = made_pods()
    for pod in pods:
        pod["spec"]["schedulingGates"] = []
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "zone-a-r4-n2"}
        if owned:
            pod["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                   "name": "job-a", "uid": "uid-job-a", "controller": True}]
        if pod["metadata"]["name"] == stranded:
            pod["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SCHEDULER_SAYS,
                 "lastTransitionTime": "2026-01-01T00:00:10Z"}]}
        else:
            pod["spec"]["nodeName"] = "zone-a-r4-n2"
    return pods


def stranded_view(pods, now, grace=5.0):
    return GangView(pods, ledger_of(cluster(), pods, [], ParseCache()), {TOPOLOGY.name: TOPOLOGY}, None, ParseCache(),
                    owner(), {}, now, 10.0, grace)


def test_a_released_pod_pinned_where_it_no_longer_fits_is_stranded():
    [pod] = [p for p in released_gang() if p["metadata"]["name"] == "job-a-worker-15"]
    assert stranded_pod(pod) == StrandedPod("team-a", "job-a-worker-15", "uid-job-a-worker-15", "zone-a-r4-n2",
                                            SCHEDULER_SAYS, "2026-01-01T00:00:10Z", True)
    bound = [p for p in released_gang() if p["metadata"]["name"] == "job-a-worker-0"][0]
    assert stranded_pod(bound) is None
    pod["status"]["conditions"][0]["reason"] = "SchedulerError"
    assert stranded_pod(pod) is None


def test_a_stranded_pod_after_its_grace_is_deleted_for_its_controller_to_make_again_and_the_owner_says_so():
    line = ("gang team-a/job-a: stranded: pod job-a-worker-15 released to node zone-a-r4-n2 no longer fits there ("
            + SCHEDULER_SAYS + "); 16 of 17 pods bound; deleted job-a-worker-15 so that its controller creates it "
            "again, to be placed again around the bound pods")
    pod = StrandedPod("team-a", "job-a-worker-15", "uid-job-a-worker-15", "zone-a-r4-n2", SCHEDULER_SAYS,
                      "2026-01-01T00:00:10Z", True)
    assert reconcile(GANG, stranded_view(released_gang(), now=CREATED + 15)) == Result(
        GANG, "stranded", line, events=(EventSpec(OWNER, "Warning", "GangStranded", line),),
        owner_patch=OwnerPatch(OWNER, "pytorchjobs", line), deletions=(pod,))


def test_a_stranded_pod_in_its_grace_is_looked_at_again_when_the_grace_ends():
    assert reconcile(GANG, stranded_view(released_gang(), now=CREATED + 12)) == Result(GANG, requeue_after=3.0)


def test_a_stranded_pod_no_controller_makes_again_is_reported_not_deleted():
    result = reconcile(GANG, stranded_view(released_gang(owned=False), now=CREATED + 15))
    assert (result.kind, result.deletions) == ("stranded", ())
    assert result.state.endswith("16 of 17 pods bound; job-a-worker-15 has no controller to create it again: "
                                 "delete it, and create it again without the node selector")
