"""The pure parts of benchmarks/trace.py (issue 36 part 2) and of hack/kwok.py: the seeded trace,
the Job each gang becomes, the split and over-booking checks, the percentile, the greedy-miss count
on hand-made snapshots, and the pod-complete Stage made from KWOK's. Expected values are written
out from the issue's rules (gang sizes 4 to a quarter of the cluster, segments required in a rack,
0 over-booked nodes) and KWOK v0.8.0's Stage API."""

from __future__ import annotations

import datetime
import importlib.util
import sys

import pytest

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import kwok  # noqa: E402  (hack/kwok.py)
import local_cluster  # noqa: E402  (hack/local_cluster.py)

# benchmarks/trace.py shares its name with the standard library's `trace`: load it by path
_spec = importlib.util.spec_from_file_location("trace_benchmark", REPO / "benchmarks" / "trace.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["trace_benchmark"] = bench
_spec.loader.exec_module(bench)

RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
ZONE = "topology.kubernetes.io/zone"


# ------------------------------------------------------------------------------- the trace
def test_the_trace_is_seeded_and_keeps_the_issues_ranges():
    cluster = bench.Cluster(zones=1, blocks=2, racks=4, nodes=16)  # 128 nodes, racks of 16
    shape = bench.TraceShape(jobs=200, arrivals=100, min_duration=3, max_duration=12, seed=5)
    jobs = bench.make_trace(cluster, shape)
    assert jobs == bench.make_trace(cluster, shape)
    assert jobs != bench.make_trace(cluster, bench.TraceShape(jobs=200, arrivals=100, min_duration=3,
                                                              max_duration=12, seed=6))
    assert len(jobs) == 200 and jobs[0].arrival == 0.0
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    assert {j.pods for j in jobs} <= {4, 8, 16, 32}  # 4 .. a quarter of 128 nodes
    assert any(j.pods == 32 for j in jobs)  # the hero
    for job in jobs:
        assert job.pods % job.segment == 0 and 2 <= job.segment <= job.pods
        assert job.segment * job.gpus <= 16 * 8  # a segment fits one rack
        assert job.gpus in (4, 8) and (job.pods < 16 or job.gpus == 8)
        assert 3 <= job.duration <= 12
        if job.gang_level is not None:  # the narrowest level that holds the gang
            assert job.gang_level == (RACK if job.pods * job.gpus <= 16 * 8 else BLOCK)
    # a heavy tail of small jobs: most gangs are the smallest sizes
    assert sum(1 for j in jobs if j.pods <= 8) > len(jobs) / 2
    assert sum(1 for j in jobs if j.pods == 32) < sum(1 for j in jobs if j.pods == 4)


def test_a_5000_node_cluster_gets_gangs_up_to_1024_pods_at_the_zone_level():
    cluster = bench.Cluster(zones=2, blocks=5, racks=25, nodes=20)
    assert cluster.node_count == 5000
    jobs = bench.make_trace(cluster, bench.TraceShape(jobs=50, arrivals=100, min_duration=30, max_duration=600))
    hero = [j for j in jobs if j.pods == 1024]
    assert any(j.gang_level == ZONE and j.required for j in hero)  # the hero: a zone holds it, required
    assert max(j.pods for j in jobs) == 1024  # the largest power of two within 5000 / 4


def test_a_cluster_too_small_for_a_gang_of_four_is_refused():
    with pytest.raises(ValueError, match="at least 16 nodes"):
        bench.make_trace(bench.Cluster(1, 1, 2, 4), bench.TraceShape())


def test_the_job_of_a_gang_carries_its_levels_and_kwoks_delay():
    job = bench.TraceJob("trace-0001", 0.0, 8, 4, 4, BLOCK, False, 6.095)
    manifest = bench.job_manifest(job, "kueue")
    assert manifest["metadata"]["labels"] == {"segments.dev/target": "kueue", "kueue.x-k8s.io/queue-name": "user-queue"}
    assert manifest["metadata"]["annotations"] == {"kai.scheduler/topology": "cluster-topology",
                                                   "kai.scheduler/topology-preferred-placement": BLOCK}
    template = manifest["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": RACK,
        "pod-complete.stage.kwok.x-k8s.io/delay": "6095ms"}
    assert (manifest["spec"]["completions"], manifest["spec"]["parallelism"]) == (8, 8)
    assert template["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    bare = bench.job_manifest(bench.TraceJob("trace-0002", 0.0, 4, 8, 2, None, False, 1.0), None)
    assert bare["metadata"]["labels"] == {}
    assert bare["metadata"]["annotations"] == {"kai.scheduler/topology": "cluster-topology"}


# ------------------------------------------------------------------------------- the checks
def node(name: str, rack: str, block: str = "b0", gpus: str = "8") -> dict:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RACK: rack, BLOCK: block,
                                                  ZONE: "z0"}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "128", "memory": "1Ti", "pods": "110"}}}


def pod(job: str, index: int, node_name: str | None, gpus: str = "8", phase: str = "Running",
        pinned: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if pinned:
        spec["nodeSelector"] = {"kubernetes.io/hostname": pinned}
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": f"{job}-{index}", "namespace": "default",
                         "labels": {"batch.kubernetes.io/job-name": job,
                                    "batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": spec, "status": {"phase": phase}}


def test_splits_count_required_segments_and_gangs_apart_from_preferred_ones():
    nodes = [node("n1", "r1", "b0"), node("n2", "r2", "b0"), node("n3", "r3", "b1")]
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    jobs = [bench.TraceJob("a", 0, 4, 8, 2, BLOCK, True, 1), bench.TraceJob("p", 0, 2, 8, 2, BLOCK, False, 1)]
    pods = [pod("a", 0, "n1"), pod("a", 1, "n2", phase="Succeeded"),  # segment 0 over r1 and r2
            pod("a", 2, "n3"), pod("a", 3, "n3"),  # segment 1 in r3, but the gang over b0 and b1
            pod("p", 0, "n1"), pod("p", 1, None)]
    required, preferred = bench.splits(jobs, pods, labels)
    assert required == ["a segment 0 spans 2 racks: r1, r2",
                        f"a spans 2 {BLOCK} domains: b0, b1"]
    assert preferred == []
    pods.append(pod("p", 1, "n3"))
    assert bench.splits(jobs, pods, labels)[1] == [f"p spans 2 {BLOCK} domains: b0, b1"]


def test_occupancy_flags_a_node_whose_unfinished_pods_ask_more_than_it_has():
    occupancy = bench.Occupancy([node("n1", "r1")])
    occupancy.update(pod("a", 0, "n1", gpus="8"))
    occupancy.update(pod("a", 0, "n1", gpus="8", phase="Succeeded"))  # finished: off the node
    occupancy.update(pod("b", 0, "n1", gpus="4"))
    occupancy.update(pod("b", 1, "n1", gpus="4"))
    assert occupancy.over == {}
    occupancy.update(pod("c", 0, "n1", gpus="4"))
    assert occupancy.over == {"n1": "node n1: its 3 bound pods ask 12 nvidia.com/gpu, it has 8"}
    occupancy.update(pod("c", 0, "n1", gpus="4"), deleted=True)
    assert set(occupancy.on_node["n1"]) == {"b-0", "b-1"}


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (bench.percentile(values, 0.5), bench.percentile(values, 0.99)) == (50.0, 99.0)
    assert bench.percentile([7.0], 0.99) == 7.0
    assert bench.percentile([], 0.5) != bench.percentile([], 0.5)  # nan


def greedy_fixture():
    """One rack of 4 nodes of 8 GPUs (and the Topology), a gang of 4 pods of 8 GPUs."""
    objects = [node(f"n{i}", "r1") for i in range(4)]
    objects.append({"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                    "metadata": {"name": "cluster-topology"},
                    "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": BLOCK}, {"nodeLabel": RACK},
                                        {"nodeLabel": "kubernetes.io/hostname"}]}})
    return bench.Snapshots(objects), bench.TraceJob("g", 0, 4, 8, 2, RACK, True, 5)


def test_a_gang_pending_on_free_capacity_past_the_grace_is_a_greedy_miss():
    snapshots, job = greedy_fixture()
    samples: list[tuple[float, dict]] = [(10.0, {}), (11.0, {}), (13.5, {})]  # pending, nothing on the nodes
    missed, scope = bench.greedy_misses([job], {"g": 9.0}, samples, snapshots, grace=3.0, budget=60)
    assert scope == "all 3 snapshots"
    assert missed == {"g": bench.Miss(9.0, 10.0, None)} and missed["g"].waited == 1.0  # found at 10.0, 1.0 s after


def test_no_greedy_miss_when_the_gang_is_placed_in_time_or_does_not_fit():
    snapshots, job = greedy_fixture()
    released = {f"g-{i}": pod("g", i, None, pinned=f"n{i}") for i in range(4)}  # pinned: in flight
    samples = [(10.0, {}), (13.0, released)]
    assert bench.greedy_misses([job], {"g": 9.0}, samples, snapshots, grace=3.0, budget=60)[0] == {}
    full = {"x-0": pod("x", 0, "n0")}  # one node taken: a gang of 4 whole nodes does not fit
    samples = [(10.0, full), (13.0, full), (16.0, full)]
    assert bench.greedy_misses([job], {"g": 9.0}, samples, snapshots, grace=3.0, budget=60)[0] == {}
    # capacity freed (the pod finished) at 16.0: found then, still pending at 19.0 -> a miss
    samples.append((19.0, {"x-0": pod("x", 0, "n0", phase="Succeeded")}))
    samples.insert(3, (16.5, {"x-0": pod("x", 0, "n0", phase="Succeeded")}))
    # tried at 10.0 (did not fit), again at 16.5 (a pod finished): it fitted after the sample before, 16.0
    assert bench.greedy_misses([job], {"g": 9.0}, samples, snapshots, grace=2.0, budget=60)[0] == {
        "g": bench.Miss(9.0, 16.5, 16.0)}


def test_with_refusals_a_gang_is_pending_only_while_its_scheduler_refuses_it():
    """Pending from the refusal (issue 36): g is in hand at 1.0 but refused only from 11.0 (its
    condition's time), so the placement found at 12.0 is 1.0 s after pending; a gang whose refusal
    ended (admitted: gone from the map) before the grace is no miss."""
    snapshots, job = greedy_fixture()
    samples: list[tuple[float, dict]] = [(10.0, {}), (12.0, {}), (15.0, {})]
    refused = [{}, {"g": 11.0}, {"g": 11.0}]
    missed, _ = bench.greedy_misses([job], {"g": 1.0}, samples, snapshots, grace=3.0, budget=60, refused=refused)
    assert missed == {"g": bench.Miss(11.0, 12.0, None)} and missed["g"].waited == 1.0
    refused = [{}, {"g": 11.0}, {}]
    assert bench.greedy_misses([job], {"g": 1.0}, samples, snapshots, grace=3.0, budget=60, refused=refused)[0] == {}


def unschedulable(p: dict, at: str) -> dict:
    p["status"]["phase"] = "Pending"
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "lastTransitionTime": at, "message": "0/4 nodes are available"}]
    return p


def kueue_workload(job: str, conditions: list[dict], admission: dict | None = None) -> dict:
    workload: dict = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": f"job-{job}-abcde", "namespace": "default",
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                  "uid": "u", "controller": True}]},
                "spec": {"queueName": "user-queue"}, "status": {"conditions": conditions}}
    if admission is not None:
        workload["status"]["admission"] = admission
    return workload


def test_refusals_read_kube_schedulers_pod_conditions_and_kueues_workload():
    """workload-api: every pod of the gang PodScheduled=False Unschedulable, since the latest
    condition time (epoch 1,800,000,000 + 2 s with offset -1,800,000,000 -> 2.0); a gang with a pod
    not refused, or missing, or with a pod bound, is not refused. kueue: the Job's Workload with
    QuotaReserved=False (Kueue's "Pending"), since that condition's time; admitted, not refused."""
    offset = -1_800_000_000.0  # 2027-01-15T08:00:00Z is 1,800,000,000 s after the epoch
    g, h, k = (bench.TraceJob(n, 0, 2, 8, 2, RACK, True, 5) for n in ("g", "h", "k"))
    pods = {"g-0": unschedulable(pod("g", 0, None), "2027-01-15T08:00:01Z"),
            "g-1": unschedulable(pod("g", 1, None), "2027-01-15T08:00:02Z"),
            "h-0": unschedulable(pod("h", 0, None), "2027-01-15T08:00:01Z"), "h-1": pod("h", 1, None),
            "k-0": unschedulable(pod("k", 0, None), "2027-01-15T08:00:01Z"), "k-1": pod("k", 1, "n1")}
    assert bench.refusals("workload-api", [g, h, k], pods, {}, offset) == {"g": 2.0}
    pending = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
               "lastTransitionTime": "2027-01-15T08:00:05Z",
               "message": "couldn't assign flavors to pod set main: topology \"cluster-topology\" allows to fit "
                          "only 1 out of 2 pod(s)"}
    reserved = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                "lastTransitionTime": "2027-01-15T08:00:06Z"}
    workloads = {"g": kueue_workload("g", [pending]),
                 "h": kueue_workload("h", [reserved], admission={"clusterQueue": "cluster-queue"})}
    assert bench.refusals("kueue", [g, h, k], {}, workloads, offset) == {"g": 5.0}
    assert bench.refusals("gate", [g, h, k], pods, workloads, offset) == {}
    assert bench.monotonic_of("not a time", offset) is None


def test_first_refusals_come_from_every_pod_event_not_only_the_samples():
    """workload-api: g's two pods were first seen Unschedulable at 3.0 and 4.0 (their condition
    times), then one was bound at 4.5: refused from 4.0. h's second pod was never refused; k's pod
    was bound (2.0) before its last refusal (3.0): neither. kueue: the watch's Workload times."""
    g, h, k = (bench.TraceJob(n, 0, 2, 8, 2, RACK, True, 5) for n in ("g", "h", "k"))
    pods = {name: pod(name[0], int(name[-1]), None) for name in ("g-0", "g-1", "h-0", "h-1", "k-0", "k-1")}
    times = {"g-0": bench.PodTimes(1.0, refused=3.0), "g-1": bench.PodTimes(1.0, refused=4.0, bound=4.5),
             "h-0": bench.PodTimes(1.0, refused=3.0), "h-1": bench.PodTimes(1.0),
             "k-0": bench.PodTimes(1.0, refused=1.5, bound=2.0), "k-1": bench.PodTimes(1.0, refused=3.0)}
    assert bench.first_refusals("workload-api", [g, h, k], times, pods, {}) == {"g": 4.0}
    assert bench.first_refusals("kueue", [g, h, k], times, pods, {"h": 7.0}) == {"h": 7.0}
    assert bench.first_refusals("gate", [g, h, k], times, pods, {"h": 7.0}) == {}


class FakeAdvisoryWatch:
    def __init__(self, events):
        import threading

        self.events, self.lock = events, threading.Lock()


def test_advisory_figures_name_misses_time_them_and_catch_a_fits_that_did_not_fit():
    """--advise: gang g (refused at 9.0, its placement found at 10.0 when first tried: a greedy miss
    pending from its refusal) gets "fits now" at 10.4: named 1.4 s after the refusal, within 2 s.
    Gang h gets "fits now" at 12.0 while x-0 holds node n0 (bound at 11.0): h, 4 whole nodes of a
    4-node rack, does not fit then, nor in the samples around: a false "fits"; and h was never
    refused: an Event before refusal. A "fits" received after the gang's first pod was bound is
    late, not judged."""
    snapshots, g = greedy_fixture()
    h = bench.TraceJob("h", 0, 4, 8, 2, RACK, True, 5)
    busy = {"x-0": pod("x", 0, "n0")}
    samples = [(10.0, {}), (11.5, busy), (12.5, busy)]
    fits, says = bench.FITS_REASON, "gang default/{}: fits now on free capacity: ..."
    watch = FakeAdvisoryWatch([(10.4, "g", fits, says.format("g")), (12.0, "h", fits, says.format("h")),
                               (13.0, "g", fits, says.format("g"))])
    figures = bench.advisory_figures([g, h], watch, {"g": 9.0}, {"g": bench.Miss(9.0, 10.0, None)}, samples,
                                     snapshots, {"g": 12.8}, {"x-0": bench.PodTimes(11.0, bound=11.0)}, busy)
    assert figures["to_event"] == [pytest.approx(1.4)] and figures["to_name"] == [pytest.approx(1.4)]
    assert {k: figures[k] for k in ("found", "named", "within", "refused", "advised", "late", "events", "unnamed",
                                    "false_fits", "early")} == {
        "found": 1, "named": 1, "within": 1, "refused": 1, "advised": 1, "late": 1, "events": 3, "unnamed": [],
        "false_fits": ["h at +2.0 s: gang default/h: fits now on free capacity: ..."],
        "early": ["h: SecondOpinionFitsNow at +2.0 s, never refused"]}


def test_a_miss_after_capacity_freed_is_timed_from_the_pod_finish_and_a_late_name_is_not_within():
    """g refused at 9.0, did not fit at the sample of 13.0; x-0 finished at 14.2 and y-0 at 15.0;
    found at 16.5: placeable from 14.2 (the first finish after 13.0). The advisor said "waiting"
    at 9.5 and "fits now" at 17.0: named 2.8 s after 14.2, not within 2 s. An advisor whose last
    Event before 14.2 already said "fits now" named it at once (0 s)."""
    snapshots, g = greedy_fixture()
    times = {"x-0": bench.PodTimes(1.0, bound=1.0, finished=14.2), "y-0": bench.PodTimes(1.0, bound=1.0, finished=15.0)}
    miss = bench.Miss(9.0, 16.5, 13.0)
    assert bench.placeable_since(miss, times) == 14.2
    watch = FakeAdvisoryWatch([(9.5, "g", "SecondOpinionWaitingForCapacity", "waiting"),
                               (17.0, "g", bench.FITS_REASON, "fits")])
    figures = bench.advisory_figures([g], watch, {"g": 9.0}, {"g": miss}, [(16.5, {})], snapshots, {}, times, {})
    assert figures["to_name"] == [pytest.approx(2.8)] and (figures["named"], figures["within"]) == (1, 0)
    watch = FakeAdvisoryWatch([(9.5, "g", bench.FITS_REASON, "fits")])
    figures = bench.advisory_figures([g], watch, {"g": 9.0}, {"g": miss}, [(16.5, {})], snapshots, {}, times, {})
    assert figures["to_name"] == [0.0] and (figures["named"], figures["within"]) == (1, 1)


def test_the_low_latency_runs_from_the_latest_moment_the_refusal_can_have_happened():
    """g refused at the whole second 9.0 (the condition's time), seen by the watch at 9.6, named at
    10.4: at most 1.4 s (from 9.0), at least 0.8 s (from 9.6). Seen only at 10.3 (a slow watch):
    the refusal happened before 10.0 (the second after its condition time): at least 0.4 s. A
    latency from a pod finish (the second test above) is the same in both."""
    snapshots, g = greedy_fixture()
    watch = FakeAdvisoryWatch([(10.4, "g", bench.FITS_REASON, "fits")])
    for seen, low in ((9.6, 0.8), (10.3, 0.4)):
        figures = bench.advisory_figures([g], watch, {"g": 9.0}, {"g": bench.Miss(9.0, 10.0, None)}, [(10.0, {})],
                                         snapshots, {}, {}, {}, {"g": seen})
        assert figures["to_name"] == [pytest.approx(1.4)] and figures["to_name_low"] == [pytest.approx(low)]
    times = {"x-0": bench.PodTimes(1.0, bound=1.0, finished=14.2)}
    watch = FakeAdvisoryWatch([(17.0, "g", bench.FITS_REASON, "fits")])
    figures = bench.advisory_figures([g], watch, {"g": 9.0}, {"g": bench.Miss(9.0, 16.5, 13.0)}, [(16.5, {})],
                                     snapshots, {}, times, {}, {"g": 9.6})
    assert figures["to_name"] == figures["to_name_low"] == [pytest.approx(2.8)]


# ------------------------------------------------------------------------------- the audit log's times
# Audit events as kube-apiserver v1.37.2 wrote them under hack/local_cluster.py's AUDIT_POLICY (a
# CI-sized run, 2026-12-07), cut to the fields read: Kueue v0.17's server-side-apply of a Workload's
# status, KWOK's and kube-scheduler's pod status patches, this project's Event create and count.
def _audit(verb: str, ref: dict, received: str, done: str, body: dict | list | None = None, answer: dict | None = None,
           code: int = 200) -> dict:
    event = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete", "verb": verb,
             "objectRef": ref, "responseStatus": {"metadata": {}, "code": code},
             "requestReceivedTimestamp": received, "stageTimestamp": done}
    if body is not None:
        event["requestObject"] = body
    if answer is not None:
        event["responseObject"] = answer
    return event


WORKLOAD = {"resource": "workloads", "namespace": "default", "name": "job-g-eec9a", "apiGroup": "kueue.x-k8s.io",
            "apiVersion": "v1beta2", "subresource": "status"}
PENDING = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                      "lastTransitionTime": "2026-12-07T21:05:11Z",
                                      "message": "couldn't assign flavors to pod set main: topology \"t\" allows to fit only 10 out of 16 pod(s)"}]}}
RESERVED = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                       "lastTransitionTime": "2026-12-07T21:05:11Z"}]}}


def _pod_status(name: str) -> dict:
    return {"resource": "pods", "namespace": "default", "name": name, "apiVersion": "v1", "subresource": "status"}


def _event_create(job: str, reason: str, made: str, done: str) -> dict:
    return _audit("create", {"resource": "events", "namespace": "default", "apiVersion": "v1"}, done, done,
                  {"kind": "Event", "metadata": {"generateName": f"{job}."},
                   "involvedObject": {"kind": "Job", "namespace": "default", "name": job, "apiVersion": "batch/v1"},
                   "reason": reason}, {"kind": "Event", "metadata": {"name": made}}, code=201)


def test_the_audit_log_gives_each_refusal_finish_and_event_to_the_microsecond():
    """Offset 0 (monotonic = wall seconds). g: Kueue reserved nothing at 21:05:11.250000 (received)
    and again at :12 (a later refusal: not the first); x-0 Succeeded at 21:05:12.500000 (its Running
    patch before does not count); the advisor's Event on g created at :11.400000, counted again
    (patch of its name) at :13.000000; a refused create (403) and an Event on a pod are not read.
    Under the Workload API, h's two pods were found Unschedulable at :20.1 and :20.3: the gang at
    :20.3; k has one Unschedulable pod of two: not refused."""
    t0 = datetime.datetime(2026, 12, 7, 21, 5, tzinfo=datetime.timezone.utc).timestamp()
    unschedulable = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                "message": "pod group is unschedulable"}]}}
    events = [
        _audit("patch", WORKLOAD, "2026-12-07T21:05:12.000000Z", "2026-12-07T21:05:12.010000Z", PENDING),
        _audit("patch", WORKLOAD, "2026-12-07T21:05:11.250000Z", "2026-12-07T21:05:11.260000Z", PENDING),
        _audit("patch", WORKLOAD, "2026-12-07T21:05:10.000000Z", "2026-12-07T21:05:10.010000Z", PENDING, code=409),
        _audit("patch", _pod_status("x-0"), "2026-12-07T21:05:01.000000Z", "2026-12-07T21:05:01.010000Z",
               {"status": {"phase": "Running"}}),
        _audit("patch", _pod_status("x-0"), "2026-12-07T21:05:12.500000Z", "2026-12-07T21:05:12.510000Z",
               {"status": {"phase": "Succeeded"}}),
        _event_create("g", "SecondOpinionFitsNow", "g.187f0", "2026-12-07T21:05:11.400000Z"),
        _audit("patch", {"resource": "events", "namespace": "default", "name": "g.187f0", "apiVersion": "v1"},
               "2026-12-07T21:05:12.990000Z", "2026-12-07T21:05:13.000000Z",
               [{"op": "replace", "path": "/count", "value": 2}]),
        {**_event_create("g", "SecondOpinionFitsNow", "g.2", "2026-12-07T21:05:14.000000Z"),
         "responseStatus": {"code": 403}},
        _event_create("g-0", "SecondOpinionFitsNow", "g-0.1", "2026-12-07T21:05:14.000000Z") | {
            "requestObject": {"involvedObject": {"kind": "Pod", "name": "g-0"}, "reason": "SecondOpinionFitsNow"}},
        _audit("patch", _pod_status("h-0"), "2026-12-07T21:05:20.100000Z", "2026-12-07T21:05:20.110000Z", unschedulable),
        _audit("patch", _pod_status("h-1"), "2026-12-07T21:05:20.300000Z", "2026-12-07T21:05:20.310000Z", unschedulable),
        _audit("patch", _pod_status("k-0"), "2026-12-07T21:05:20.300000Z", "2026-12-07T21:05:20.310000Z", unschedulable),
        _audit("patch", WORKLOAD | {"name": "job-admitted"}, "2026-12-07T21:05:11.0Z", "2026-12-07T21:05:11.1Z", RESERVED),
    ]
    jobs = [bench.TraceJob("g", 0.0, 16, 8, 4, RACK, True, 60.0), bench.TraceJob("h", 0.0, 2, 8, 2, RACK, True, 60.0),
            bench.TraceJob("k", 0.0, 2, 8, 2, RACK, True, 60.0)]
    audit = bench.audit_times(events, 0.0, {"job-g-eec9a": "g", "job-admitted": "a"},
                              {"h-0": "h", "h-1": "h", "k-0": "k"}, jobs)
    assert audit.refused == {"g": pytest.approx(t0 + 11.25), "h": pytest.approx(t0 + 20.3)}
    assert audit.finished == {"x-0": pytest.approx(t0 + 12.5)}
    assert audit.events == [(pytest.approx(t0 + 11.4), "g", "SecondOpinionFitsNow"),
                            (pytest.approx(t0 + 13.0), "g", "SecondOpinionFitsNow")]


def test_audited_latencies_run_from_the_refusal_or_the_earliest_audited_finish():
    """g refused at 100.25 and fitted then (after None), named at 101.40: 1.15 s. f refused at
    100.0, did not fit at the sample of 105.0, x-0 (seen finished at 106.0, audited 105.7) made it
    fit, found at 107.0, named at 108.0: 2.3 s, from the audited finish, not within 2 s. e: named
    only after the watch saw its pod bound: left, with why; d: never refused in the log: left."""
    times = {"x-0": bench.PodTimes(1.0, bound=1.0, finished=106.0)}
    audit = bench.AuditTimes(refused={"g": 100.25, "f": 100.0, "e": 100.0}, finished={"x-0": 105.7},
                             events=[(101.4, "g", bench.FITS_REASON), (100.5, "f", "SecondOpinionWaitingForCapacity"),
                                     (108.0, "f", bench.FITS_REASON), (103.0, "e", bench.FITS_REASON)])
    misses = {"g": bench.Miss(100.0, 101.0, None), "f": bench.Miss(100.0, 107.0, 105.0),
              "e": bench.Miss(100.0, 101.0, None), "d": bench.Miss(100.0, 101.0, None)}
    latencies, left = bench.exact_latencies(misses, audit, times, {"e": 102.5})
    assert latencies == {"g": pytest.approx(1.15), "f": pytest.approx(2.3)}
    assert left == ["e: no 'fits now' write in the audit log after +0.00 s", "d: no refusal in the audit log"]
    # the advisor already said "fits now" between f's refusal and the finish: named at once
    audit.events.append((104.0, "f", bench.FITS_REASON))
    assert bench.exact_latencies({"f": misses["f"]}, audit, times, {})[0] == {"f": 0.0}


# ------------------------------------------------------------------------------- hack/kwok.py
GENERAL_POD_COMPLETE: dict = {
    # the shape of KWOK v0.8.0 kustomize/stage/pod/general/pod-complete.yaml (template shortened)
    "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-complete"},
    "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
             "selector": {"matchExpressions": [
                 {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                 {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                 {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}]},
             "delay": {"durationMilliseconds": 1000,
                       "durationFrom": {"expressionFrom": '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]'},
                       "jitterDurationMilliseconds": 5000},
             "next": {"statusTemplate": "phase: Succeeded"}}}


def test_the_pod_complete_stage_finishes_exactly_the_pods_with_a_delay_after_that_delay():
    stage = kwok.pod_complete_stage(GENERAL_POD_COMPLETE)
    assert stage["spec"]["selector"]["matchExpressions"] == [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]', "operator": "Exists"}]
    assert stage["spec"]["delay"] == {
        "durationFrom": {"jq": {"expression": '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]'}}}
    assert stage["spec"]["next"] == {"statusTemplate": "phase: Succeeded"}
    assert GENERAL_POD_COMPLETE["spec"]["delay"]["jitterDurationMilliseconds"] == 5000  # the input is not changed


def test_kwok_configuration_keeps_the_server_on_loopback():
    config = kwok.configuration("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
                                "  nodePort: 10247\n  cidr: 10.0.0.0/24\n  manageNodesWithAnnotationSelector: "
                                "'kwok.x-k8s.io/node=fake'\n  enableCRDs:\n  - Stage\n  - Metric\n", 41234)
    assert config["options"] == {"nodePort": 41234, "cidr": "10.128.0.0/10",
                                 "manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
                                 "enableCRDs": ["Stage"], "serverAddress": "127.0.0.1:41234", "nodeIP": "127.0.0.1",
                                 "nodeLeaseDurationSeconds": 1200, "nodeLeaseParallelism": 64,
                                 "nodePlayStageParallelism": 32, "podPlayStageParallelism": 32}


def test_kwok_runs_with_node_graces_longer_than_a_lease_renewal():
    # KWOK renews every quarter of the Lease (1,200 s / 4 = 300 s): the grace must exceed that
    assert kwok.controller_manager_args() == {"--node-monitor-grace-period": "900s",
                                              "--node-startup-grace-period": "900s"}
    assert local_cluster.node_grace_args({"upstream": ["lws", "kwok"]}) == [
        "--node-monitor-grace-period", "900s", "--node-startup-grace-period", "900s"]
    assert local_cluster.node_grace_args({"upstream": ["lws"]}) == ["--node-monitor-grace-period", "120s"]
    assert local_cluster.node_grace_args({}) == ["--node-monitor-grace-period", "120s"]  # a state from before


def test_registration_waits_and_polls_in_proportion_to_the_nodes():
    assert kwok.wait_seconds(128) == 136.0
    assert kwok.wait_seconds(5000) == 745.0
    assert kwok.poll_seconds(128) == 1.0
    assert kwok.poll_seconds(1000) == 1.0
    assert kwok.poll_seconds(1001) == 2.0
    assert kwok.poll_seconds(5000) == 5.0


def test_a_kwok_node_carries_kwoks_annotation_and_label_and_the_dumps_taints():
    body = kwok.node_body({"metadata": {"name": "n1", "labels": {RACK: "r1"}},
                           "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "providerID": "x"}})
    assert body == {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "n1", "labels": {RACK: "r1", "type": "kwok"},
                                 "annotations": {"kwok.x-k8s.io/node": "fake"}},
                    "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                    "status": {"capacity": {}, "allocatable": {}}}


def test_a_kwok_node_is_created_with_the_dumps_capacity_and_allocatable():
    status = {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}}
    assert kwok.node_body({"metadata": {"name": "n1"}, "status": status})["status"] == {
        "capacity": {"nvidia.com/gpu": "8", "cpu": "96"}, "allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}}
    status_with_conditions: dict[str, object] = {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"},
                                                 "conditions": [{"type": "Ready", "status": "True"}]}
    assert kwok.node_body({"metadata": {"name": "n1"}, "status": status_with_conditions})["status"] == {
        "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}}  # KWOK makes it Ready


def test_a_gang_is_in_hand_at_its_jobs_create_for_kueue_and_at_its_last_pod_for_the_others():
    jobs = [bench.TraceJob("g", 0, 2, 8, 2, RACK, True, 5), bench.TraceJob("h", 0, 2, 8, 2, RACK, True, 5)]
    pods = {"g-0": pod("g", 0, None), "g-1": pod("g", 1, None), "h-0": pod("h", 0, None)}
    times = {"g-0": bench.PodTimes(3.0), "g-1": bench.PodTimes(4.5), "h-0": bench.PodTimes(3.5)}
    submitted = {"g": 1.0, "h": 2.0}
    assert bench.in_hand("kueue", jobs, submitted, times, pods) == {"g": 1.0, "h": 2.0}
    assert bench.in_hand("gate", jobs, submitted, times, pods) == {"g": 4.5}  # h has 1 of its 2 pods
    assert bench.in_hand("workload-api", jobs, submitted, times, pods) == {"g": 4.5}


def test_the_pod_watch_resumes_from_the_last_version_and_lists_again_after_410():
    watch = bench.TraceWatch(None, [node("n1", "r1")], sample=1.0)  # no cluster: run() unused
    base = "/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&labelSelector=bench.segments.dev/run%3Dtrace"
    assert watch.watch_path() == base  # the first watch: every pod as ADDED
    added = pod("g", 0, "n1")
    added["metadata"]["resourceVersion"] = "120"
    watch.handle({"type": "ADDED", "object": added})
    assert watch.times["g-0"].bound is not None and watch.watch_path() == base + "&resourceVersion=120"
    watch.handle({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "135"}}})
    assert watch.watch_path() == base + "&resourceVersion=135" and set(watch.latest) == {"g-0"}
    watch.handle({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})
    assert watch.watch_path() == base


# kube-scheduler v1.37.2's log when it crashed under the workload-api target (5,000 KWOK nodes,
# 2026-12-07, stop 43), shortened: the first stack, then the runtime's own panic line.
_SCHEDULER_PANIC_LOG = """\
I1207 16:38:24.821946   13085 shared_informer.go:531] "Caches are synced"
E1207 16:43:35.046239   13085 panic.go:336] "Observed a panic" panic="runtime error: invalid memory address or nil pointer dereference" stacktrace=<
\tgoroutine 556 [running]:
\tpanic({0x29dc5a0?, 0x50e4d30?})
\t\truntime/panic.go:860 +0x13a
\tk8s.io/kubernetes/pkg/scheduler.(*Scheduler).compositePodGroupSchedulingDefaultAlgorithm.func1()
\t\tk8s.io/kubernetes@v1.37.2/pkg/scheduler/schedule_one_podgroup.go:1325 +0x203
\tpanic({0x29dc5a0?, 0x50e4d30?})
\t\truntime/panic.go:860 +0x13a
\tk8s.io/kubernetes/pkg/scheduler.(*Scheduler).assumeSubtreeWithRevert.successfulLeafResults.func2.func3(0x2dcec28b6ee0)
\t\tk8s.io/kubernetes@v1.37.2/pkg/scheduler/schedule_one_podgroup.go:1430 +0xb5
 >
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x20 pc=0x255d823]

goroutine 556 [running]:
panic({0x29dc5a0?, 0x50e4d30?})
\truntime/panic.go:860 +0x13a
k8s.io/apimachinery/pkg/util/runtime.handleCrash({0x314ad48, 0x2dcebc7a8000})
\tk8s.io/apimachinery@v0.37.2/pkg/util/runtime/runtime.go:109 +0x116
"""


def test_a_panicked_component_is_named_with_the_frame_that_raised_it():
    """A scheduler that crashes leaves every later gang pending in silence: the table names it
    (``EXITED during the run``) with the panic and the frame of the innermost re-raised panic."""
    assert bench.panic_summary(_SCHEDULER_PANIC_LOG) == (
        "panic: runtime error: invalid memory address or nil pointer dereference at "
        "k8s.io/kubernetes@v1.37.2/pkg/scheduler/schedule_one_podgroup.go:1430")
    assert bench.panic_summary("I1207 started\nE1207 lost the lease\n") == "exited (no panic in its log)"


def test_exited_components_are_those_whose_process_is_gone(tmp_path):
    import subprocess
    from types import SimpleNamespace

    (tmp_path / "pids").mkdir()
    (tmp_path / "logs").mkdir()
    running = subprocess.Popen(["sleep", "30"])
    crashed = subprocess.Popen(["true"])
    crashed.wait()  # reaped: no such process any more
    zombie = subprocess.Popen(["true"])
    try:
        import time

        deadline = time.monotonic() + 10
        while local_cluster.process_alive(zombie.pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # a zombie until waited for
        for name, proc in (("etcd", running), ("kube-scheduler", crashed), ("kwok-controller", zombie)):
            (tmp_path / "pids" / f"{name}.pid").write_text(str(proc.pid))
        (tmp_path / "logs" / "kube-scheduler.log").write_text(_SCHEDULER_PANIC_LOG)
        cluster = SimpleNamespace(dir=tmp_path, state={"components": ["etcd", "kube-scheduler", "kwok-controller"]})
        assert bench.exited_components(cluster) == {
            "kube-scheduler": "panic: runtime error: invalid memory address or nil pointer dereference at "
                              "k8s.io/kubernetes@v1.37.2/pkg/scheduler/schedule_one_podgroup.go:1430",
            "kwok-controller": "exited",
        }
    finally:
        running.kill()
        running.wait()
        zombie.wait()
