"""The controller's pure decision (DESIGN.md §9): cluster state in, one KEP-3838 patch per released
pod out; gangs that cannot be placed stay gated with their reason.

Pods are made the way a cluster makes them: the workload manifest goes through the webhook with
``--gate-pods`` (``webhook.planning.expand``), so they carry the gate, the segment labels and the
gang facts. Every release is re-checked by tests/support/controller_checks.py, which never calls the engine.
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.conftest import load_example
from tests.support.controller_checks import capacity_violations, kep3838_violations, node_of, shared_label_violations
from webhook.admission.config import AdmissionSettings
from webhook.gating.decision import INCOMPLETE, INFEASIBLE, INVALID, NEVER_FITS, decide
from webhook.planning.expand import expand
from webhook.topology.objects import StaticTopologyCatalog, Topology

ZONE = "topology.kubernetes.io/zone"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
TOPOLOGY = Topology(name="cluster-topology", levels=(ZONE, BLOCK, RACK, HOST))
GATING = AdmissionSettings(gate_pods=True)


def node(name, zone, rack, gpus=4, cpu=16):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {ZONE: zone, BLOCK: f"{zone}-b1", RACK: rack, HOST: name}},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def cluster(zones=("zone-a",), racks=4, per_rack=2, gpus=4):
    """``zones`` × ``racks`` racks × ``per_rack`` nodes, ``gpus`` GPUs each; names ``<zone>-r<k>-n<i>``."""
    return [node(f"{z}-r{r}-n{i}", z, f"{z}-r{r}", gpus) for z in zones for r in range(1, racks + 1)
            for i in range(1, per_rack + 1)]


def pytorchjob(name="job-a", workers=16, gpus_per_worker=2, namespace="team-a"):
    """pytorchjob-zone-and-rack.yaml (zone required, segments of 4 in one rack) with GPU requests."""
    job = load_example("pytorchjob-zone-and-rack.yaml")
    job["metadata"].update(name=name, namespace=namespace)
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    specs["Worker"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus_per_worker)}}
    specs["Master"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return job


def gang_pods(workload):
    exp = expand(workload, StaticTopologyCatalog([TOPOLOGY]), GATING)
    assert not exp.denied, exp.message
    return exp.pods


def released(pods, result):
    """The pods after applying every release patch, and the patched ones."""
    by_ref = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    after = {ref: copy.deepcopy(p) for ref, p in by_ref.items()}
    for r in result.releases:
        assert kep3838_violations(by_ref[(r.namespace, r.name)], r.patch) == []
        after[(r.namespace, r.name)] = jsonpatch.apply_patch(by_ref[(r.namespace, r.name)], r.patch)
    return list(after.values())


def test_the_pods_the_webhook_makes_are_gated_and_carry_the_gang():
    pods = gang_pods(pytorchjob())
    assert len(pods) == 17
    for p in pods:
        assert p["spec"]["schedulingGates"] == [{"name": "segments.dev/placement"}]
        assert p["metadata"]["annotations"]["segments.dev/gang-size"] == "17"


def test_complete_pytorchjob_gang_is_released_each_segment_in_one_rack():
    nodes = cluster()  # 4 racks × 2 nodes × 4 GPUs = 32 GPUs = 16 workers × 2 GPUs exactly
    pods = gang_pods(pytorchjob())
    result = decide(nodes, pods, [TOPOLOGY])
    assert result.waiting == []
    assert len(result.releases) == 17
    after = released(pods, result)
    assert capacity_violations(nodes, after) == []
    workers = [p for p in after if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"]
    racks_of_segments = {}
    for seg in ("0", "1", "2", "3"):
        members = [node_of(p) for p in workers if p["metadata"]["labels"]["kai.scheduler/segment-index"] == seg]
        assert len(members) == 4
        assert shared_label_violations(nodes, members, RACK, f"segment {seg}") == []
        racks_of_segments[seg] = {n.rsplit("-n", 1)[0] for n in members if n is not None}.pop()
    assert sorted(racks_of_segments.values()) == ["zone-a-r1", "zone-a-r2", "zone-a-r3", "zone-a-r4"]
    # each node holds exactly 2 workers (4 GPUs)
    per_node: dict[str | None, int] = {}
    for p in workers:
        per_node[node_of(p)] = per_node.get(node_of(p), 0) + 1
    assert sorted(per_node.values()) == [2] * 8
    assert result.placed[0].gang == "team-a/job-a" and result.placed[0].pods == 17


def test_release_is_one_patch_per_pod_with_the_literal_operations():
    pods = gang_pods(pytorchjob())
    result = decide(cluster(), pods, [TOPOLOGY])
    master = next(r for r in result.releases if r.name == "job-a-master-0")
    assert master.patch == [
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "segments.dev/placement"},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": master.node}},
    ]
    assert sorted(r.name for r in result.releases).count("job-a-master-0") == 1


def pin(pods, nodes_in_order):
    """Release ``pods`` by hand (gate removed, hostname selector set, not bound): what a previous
    pass leaves before kube-scheduler binds."""
    out = []
    for p, n in zip(pods, nodes_in_order):
        p = copy.deepcopy(p)
        p["spec"].pop("schedulingGates")
        p["spec"]["nodeSelector"] = {HOST: n}
        out.append(p)
    return out


def test_released_but_unbound_pods_of_another_gang_are_counted():
    nodes = cluster(zones=("zone-a", "zone-b"))
    # gang B: released earlier onto zone-a, not bound yet: 16 workers x 2 GPUs fill all of zone-a
    b_pods = gang_pods(pytorchjob("job-b"))
    zone_a = [n["metadata"]["name"] for n in nodes if n["metadata"]["labels"][ZONE] == "zone-a"]
    b_workers = [p for p in b_pods if "worker" in p["metadata"]["name"]]
    b_master = [p for p in b_pods if "master" in p["metadata"]["name"]]
    b_pinned = pin(b_workers, [n for n in zone_a for _ in range(2)]) + pin(b_master, zone_a[:1])
    a_pods = gang_pods(pytorchjob("job-a"))
    result = decide(nodes, a_pods + b_pinned, [TOPOLOGY])
    assert [r.gang for r in result.releases] == ["team-a/job-a"] * 17
    # ignoring B would put A in zone-a (first by name); counting it leaves only zone-b
    assert {r.node.split("-r")[0] for r in result.releases} == {"zone-b"}
    assert capacity_violations(nodes, released(a_pods, result) + b_pinned) == []
    # the same state without B's pins: A goes to zone-a (proves the snapshot would double-book)
    alone = decide(nodes, a_pods, [TOPOLOGY])
    assert {r.node.split("-r")[0] for r in alone.releases} == {"zone-a"}


def test_bound_pods_are_counted():
    nodes = cluster()
    hog = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "namespace": "x"},
           "spec": {"nodeName": "zone-a-r1-n1", "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running"}}
    result = decide(nodes, gang_pods(pytorchjob()) + [hog], [TOPOLOGY])
    assert result.releases == []
    assert [(w.gang, w.kind) for w in result.waiting] == [("team-a/job-a", INFEASIBLE)]
    finished = dict(hog, status={"phase": "Succeeded"})
    assert len(decide(nodes, gang_pods(pytorchjob()) + [finished], [TOPOLOGY]).releases) == 17


def test_two_gangs_in_one_pass_never_share_capacity():
    nodes = cluster()  # room for exactly one gang
    pods = gang_pods(pytorchjob("job-a")) + gang_pods(pytorchjob("job-b"))
    result = decide(nodes, pods, [TOPOLOGY])
    assert {r.gang for r in result.releases} == {"team-a/job-a"}  # first by creation, then by key
    assert [(w.gang, w.kind) for w in result.waiting] == [("team-a/job-b", INFEASIBLE)]
    assert capacity_violations(nodes, released(pods, result)) == []
    # with room for both, they get disjoint zones
    nodes2 = cluster(zones=("zone-a", "zone-b"))
    both = decide(nodes2, pods, [TOPOLOGY])
    assert len(both.releases) == 34 and both.waiting == []
    zones = {g: {r.node.split("-r")[0] for r in both.releases if r.gang == g} for g in ("team-a/job-a", "team-a/job-b")}
    assert zones == {"team-a/job-a": {"zone-a"}, "team-a/job-b": {"zone-b"}}
    assert capacity_violations(nodes2, released(pods, both)) == []


def test_incomplete_gang_stays_gated():
    pods = gang_pods(pytorchjob())[:9]
    result = decide(cluster(), pods, [TOPOLOGY])
    assert result.releases == []
    assert len(result.waiting) == 1
    assert (result.waiting[0].gang, result.waiting[0].kind, result.waiting[0].reason) == \
        ("team-a/job-a", INCOMPLETE, "9 of 17 pods exist")
    assert len(result.waiting[0].pods) == 9


def test_gang_larger_than_the_cluster_can_never_fit():
    nodes = cluster()
    pods = gang_pods(pytorchjob(gpus_per_worker=3))  # 48 GPUs asked, 32 exist
    result = decide(nodes, pods, [TOPOLOGY])
    assert result.releases == []
    [waiting] = result.waiting
    assert waiting.kind == NEVER_FITS
    assert waiting.reason.startswith("can never fit, not even on the empty cluster (every node free); ")
    assert "; engine: workload level topology.kubernetes.io/zone: 1 domain(s), 0 with room" in waiting.reason
    assert len(waiting.pods) == 17


def segment_of_8_eight_gpu_workers():
    """Issue 17 item 3's example: 8 Workers of 8 GPUs, segments of 8 required in one rack (no Master)."""
    job = pytorchjob(workers=8, gpus_per_worker=8)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = "8"
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    return job


def test_segment_larger_than_any_rack_can_never_fit_and_names_the_smallest_change():
    """Racks of 4 nodes of 8 GPUs hold 4 such workers: a segment of 8 never fits, even with every
    node free; the smallest change that fits is segment size 4 (issue 17 item 3)."""
    nodes = cluster(racks=2, per_rack=4, gpus=8)
    result = decide(nodes, gang_pods(segment_of_8_eight_gpu_workers()), [TOPOLOGY])
    assert result.releases == []
    [waiting] = result.waiting
    assert waiting.kind == NEVER_FITS == "never-fits"
    assert waiting.change == ("kai.scheduler/segment-size: 4 (was 8; a cloud.provider.com/topology-rack domain "
                              "holds at most 4 such pods)")
    assert waiting.reason == (
        "can never fit, not even on the empty cluster (every node free); smallest change that fits: "
        "kai.scheduler/segment-size: 4 (was 8; a cloud.provider.com/topology-rack domain holds at most 4 such pods); "
        "engine: workload level topology.kubernetes.io/zone: 1 domain(s), 0 with room for the whole demand; the best "
        "(zone-a) holds 0 of 1 segments of 8 pods at segment level cloud.provider.com/topology-rack (binding resource: "
        "nvidia.com/gpu)")


def test_when_no_segment_of_2_fits_a_rack_the_change_is_a_broader_segment_level_never_size_1():
    """Racks of 1 node of 8 GPUs hold 1 eight-GPU worker: a segment of 2 never fits a rack, and a
    segment of 1 is denied (DESIGN.md §5, segment-size-too-small), so the smallest change is the
    next broader segment level, the block (found in a new-user trial: it advised size 1)."""
    job = segment_of_8_eight_gpu_workers()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = "2"
    result = decide(cluster(racks=8, per_rack=1, gpus=8), gang_pods(job), [TOPOLOGY])
    [waiting] = result.waiting
    assert waiting.kind == NEVER_FITS
    assert waiting.change == ("kai.scheduler/segment-topology-required-placement: cloud.provider.com/topology-block (was "
                              "cloud.provider.com/topology-rack; a cloud.provider.com/topology-rack domain holds at "
                              "most 1 such pod, less than a segment of 2)")


def test_gang_that_fits_an_empty_cluster_waits_for_capacity_naming_resource_and_domain():
    hog = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "namespace": "x"},
           "spec": {"nodeName": "zone-a-r1-n1", "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running"}}
    result = decide(cluster(), gang_pods(pytorchjob()) + [hog], [TOPOLOGY])
    [waiting] = result.waiting
    assert waiting.kind == INFEASIBLE
    # 16 workers of 2 GPUs on 8 nodes of 4: one GPU taken leaves room for 15 in the zone
    assert waiting.reason.startswith(
        "waiting for capacity: nvidia.com/gpu in topology.kubernetes.io/zone zone-a (room for 15 of 16 pods like "
        "team-a/job-a-worker-0 there now; it fits when those nodes are free); engine: workload level "
        "topology.kubernetes.io/zone: 1 domain(s), 0 with room for the whole demand")
    assert waiting.change == ""


def test_half_released_gang_is_finished_around_its_pinned_pods():
    nodes = cluster()
    pods = gang_pods(pytorchjob())
    first = decide(nodes, pods, [TOPOLOGY])
    after = released(pods, first)
    # only the first 5 patches went through (say the rest hit a 409), then a new pass
    done = {(r.namespace, r.name) for r in first.releases[:5]}
    state = [a if (a["metadata"]["namespace"], a["metadata"]["name"]) in done else p for p, a in zip(pods, after)]
    second = decide(nodes, state, [TOPOLOGY])
    assert len(second.releases) == 12 and second.waiting == []
    final = released(state, second)
    assert capacity_violations(nodes, final) == []
    for seg in ("0", "1", "2", "3"):
        members = [node_of(p) for p in final if p["metadata"]["labels"].get("kai.scheduler/segment-index") == seg]
        assert shared_label_violations(nodes, members, RACK, f"segment {seg}") == []


def test_deleting_and_finished_pods_are_not_members():
    pods = gang_pods(pytorchjob())
    pods[3] = dict(pods[3], metadata={**pods[3]["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"})
    result = decide(cluster(), pods, [TOPOLOGY])
    assert [(w.kind, w.reason) for w in result.waiting] == [(INCOMPLETE, "16 of 17 pods exist")]


def test_pods_that_disagree_on_gang_size_are_reported():
    pods = gang_pods(pytorchjob())
    pods[0]["metadata"]["annotations"]["segments.dev/gang-size"] = "18"
    [waiting] = decide(cluster(), pods, [TOPOLOGY]).waiting
    assert (waiting.kind, waiting.reason) == (INVALID, 'pods disagree on segments.dev/gang-size: "17", "18"')


def test_unknown_topology_and_malformed_nodes_do_not_crash():
    nodes = cluster() + [{"metadata": {"name": "bad"}, "status": {"allocatable": {"cpu": "lots"}}}]
    result = decide(nodes, gang_pods(pytorchjob()), [])
    assert [(w.kind, w.reason) for w in result.waiting] == [
        (INFEASIBLE, 'topology "cluster-topology" is not known (known: none)')]
    assert result.skipped == ['Node "bad": status.allocatable[cpu]: "lots" is not a Kubernetes quantity '
                              '(examples: "500m", "2", "64Gi", "1e3"); fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, Ti) and no spaces']


def test_the_live_pass_leaves_out_malformed_objects_and_places_on_the_rest():
    # one bad object never stops the live controller (it logs these lines); the dry run exits 2 instead
    nodes = cluster() + [dict(node("bad-labels", "zone-a", "zone-a-r1"), spec={"unschedulable": "false"})]
    negative = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "neg", "namespace": "x", "resourceVersion": "1"},
                "spec": {"nodeName": "zone-a-r1-n1",
                         "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "-3"}}}]}}
    pods = gang_pods(pytorchjob())
    result = decide(nodes, pods + [negative], [TOPOLOGY])
    assert result.skipped == [
        'Node "bad-labels": spec.unschedulable = "false": must be a boolean, not a string; fix: write unschedulable: '
        "true or false, unquoted",
        'Pod x/neg: spec.containers[0].resources.requests[nvidia.com/gpu]: "-3" is negative: Kubernetes API validation '
        "rejects negative requests, limits, overhead and allocatable (quantities must be non-negative); fix: use 0 or more"]
    assert result.waiting == [] and len(result.releases) == 17
    assert "bad-labels" not in {r.node for r in result.releases}
    assert capacity_violations(cluster(), released(pods, result)) == []


def test_a_level_the_topology_no_longer_has_is_said_in_json_terms():
    # the Topology changed after the pods were admitted: the reason lists its levels, not a Python list
    [waiting] = decide(cluster(), gang_pods(pytorchjob()), [Topology(name="cluster-topology", levels=(ZONE, HOST))]).waiting
    assert (waiting.kind, waiting.reason) == (
        INVALID, f'level "{RACK}" is not a level of topology cluster-topology; levels: {ZONE}, {HOST}')


def test_skip_leaves_a_gang_out_of_the_pass():
    result = decide(cluster(), gang_pods(pytorchjob()), [TOPOLOGY], skip={"team-a/job-a"})
    assert result.releases == [] and result.waiting == []


@pytest.mark.parametrize("count", [1, 2])
def test_lws_groups_are_separate_gangs(count):
    lws = load_example("lws-segmented.yaml")
    lws["metadata"]["namespace"] = "team-b"
    lws["spec"]["replicas"] = count
    pods = gang_pods(lws)
    result = decide(cluster(), pods, [TOPOLOGY])
    assert sorted({r.gang for r in result.releases}) == [f"team-b/lws-segmented/{g}" for g in range(count)]
    assert len(result.releases) == 5 * count


def test_parse_cache_gives_the_same_answers_and_is_never_charged():
    from webhook.gating.decision import ParseCache

    nodes = [dict(n, metadata={**n["metadata"], "resourceVersion": "7"}) for n in cluster(zones=("zone-a", "zone-b"))]
    pods = []
    for p in gang_pods(pytorchjob("job-a")) + gang_pods(pytorchjob("job-b")):
        pods.append(dict(p, metadata={**p["metadata"], "resourceVersion": "8"}))
    cache = ParseCache()
    plain = decide(nodes, pods, [TOPOLOGY])
    first = decide(nodes, pods, [TOPOLOGY], cache=cache)
    second = decide(nodes, pods, [TOPOLOGY], cache=cache)  # a charged cache would leave no room
    assert plain.releases == first.releases == second.releases and len(second.releases) == 34
    assert len(cache.nodes) == 16 and len(cache.requests) == 34
    decide(nodes[:3], [], [TOPOLOGY], cache=cache)  # objects gone from the cluster are dropped
    assert len(cache.nodes) == 3 and cache.requests == {}


def test_workload_larger_than_its_required_domain_names_the_narrowest_broader_level():
    """8 workers of 8 GPUs required in one rack of 4 such nodes: no segment to shrink; the smallest
    change that fits is the next broader level, the block (both racks are in block zone-a-b1)."""
    job = pytorchjob(workers=8, gpus_per_worker=8)
    job["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] = RACK
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    del worker["kai.scheduler/segment-size"], worker["kai.scheduler/segment-topology-required-placement"]
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    [waiting] = decide(cluster(racks=2, per_rack=4, gpus=8), gang_pods(job), [TOPOLOGY]).waiting
    assert waiting.kind == NEVER_FITS
    assert waiting.change == ("kai.scheduler/topology-required-placement: cloud.provider.com/topology-block "
                              "(was cloud.provider.com/topology-rack)")


def test_a_lower_case_worker_replica_type_is_expanded_as_admission_reads_it():
    # pytorchjob-tp4.yaml: Master + 16 Workers; written `worker:` it is the same job to admission
    # (kinds/_workload.replica_key), so place/what-if/controller --once must expand 17 pods, not 1
    job = load_example("pytorchjob-tp4.yaml")
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["worker"] = specs.pop("Worker")
    exp = expand(job, StaticTopologyCatalog([TOPOLOGY]), AdmissionSettings())
    assert not exp.denied, exp.message
    names = [p["metadata"]["name"] for p in exp.pods]
    assert len(names) == 17 and names[0] == "pytorch-tp4-master-0" and names[-1] == "pytorch-tp4-worker-15"
