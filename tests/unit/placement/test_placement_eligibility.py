"""Which nodes a pod may use (DESIGN.md §8, :mod:`webhook.placement.eligibility`): required node
affinity with every operator (matchExpressions and matchFields on ``metadata.name``), taints and
tolerations, per pod; and a placement that fails because of them names the constraint."""

from __future__ import annotations

import pytest

from tests.support.placement_helpers import CLUSTER_TOPOLOGY, GPU, HOST, node
from webhook.placement.engine import ClusterIndex, Gang, PodRequest, place


def affinity(*terms) -> tuple:
    """Frozen nodeSelectorTerms: each term a list of (key, operator, values) label expressions,
    or ("metadata.name", operator, values) as a field."""
    out = []
    for term in terms:
        exprs = tuple((k, op, tuple(v)) for k, op, v in term if k != "metadata.name")
        fields = tuple((k, op, tuple(v)) for k, op, v in term if k == "metadata.name")
        out.append((exprs, fields))
    return tuple(out)


def gpu_cluster() -> ClusterIndex:
    spec = [("h-0", "h100", "2"), ("h-1", "h100", "4"), ("a-0", "a100", "8"), ("a-1", "a100", None)]
    nodes = []
    for name, kind, gen in spec:
        n = node(name, "z0", "b0", "r0", **{GPU: 8000, "cpu": 64000})
        n.labels["gpu-type"] = kind
        if gen is not None:
            n.labels["gen"] = gen
        nodes.append(n)
    return ClusterIndex(nodes, CLUSTER_TOPOLOGY)


@pytest.mark.parametrize("terms, allowed", [
    ([[("gpu-type", "In", ["a100"])]], {"a-0", "a-1"}),
    ([[("gpu-type", "NotIn", ["a100"])]], {"h-0", "h-1"}),
    ([[("gen", "Exists", [])]], {"h-0", "h-1", "a-0"}),
    ([[("gen", "DoesNotExist", [])]], {"a-1"}),
    ([[("gen", "Gt", ["3"])]], {"h-1", "a-0"}),
    ([[("gen", "Lt", ["3"])]], {"h-0"}),
    ([[("gpu-type", "In", ["h100"]), ("gen", "Gt", ["2"])]], {"h-1"}),            # ANDed
    ([[("gen", "Lt", ["3"])], [("gen", "DoesNotExist", [])]], {"h-0", "a-1"}),    # ORed
    ([[("metadata.name", "In", ["a-1", "h-0"])]], {"a-1", "h-0"}),
    ([[("metadata.name", "NotIn", ["a-1", "h-0"])]], {"a-0", "h-1"}),
    ([[], [("metadata.name", "In", ["h-1"])]], {"h-1"}),                           # an empty term matches nothing
])
def test_required_node_affinity_operators(terms, allowed):
    pods = [PodRequest(f"ns/w-{i}", {GPU: 8000, "pods": 1000}, node_affinity=affinity(*terms)) for i in range(len(allowed))]
    res = place(gpu_cluster(), Gang(pods))
    assert res.placed
    assert set(res.assignments.values()) == allowed  # 8 GPUs each: one pod per allowed node, none elsewhere


def test_affinity_matching_no_node_is_named():
    pods = [PodRequest("ns/job-worker-0", {GPU: 1000, "pods": 1000}, role="worker",
                       node_affinity=affinity([("gpu-type", "In", ["b200"])])),
            PodRequest("ns/job-master-0", {"cpu": 1000, "pods": 1000}, role="master", node_selector=(("pool", "cpu"),))]
    res = place(gpu_cluster(), Gang(pods))
    assert not res.placed and res.exact
    assert res.reason == ("pod ns/job-worker-0 (worker) can go to no node: required node affinity (gpu-type In [b200]) "
                          "matches 0 of 4 ready node(s); pod ns/job-master-0 (master) can go to no node: nodeSelector "
                          "pool=cpu matches 0 of 4 ready node(s)")


def test_untolerated_taint_is_named():
    index = gpu_cluster()
    for n in index.nodes:
        n.taints = (("dedicated", "training", "NoSchedule"),)
    index = ClusterIndex(index.nodes, CLUSTER_TOPOLOGY)
    res = place(index, Gang([PodRequest("ns/p", {GPU: 1000, "pods": 1000})]))
    assert res.reason == ("pod ns/p can go to no node: untolerated taint(s) dedicated=training:NoSchedule leave 0 of 4 "
                          "ready node(s)")
    tol = ((("effect", "NoSchedule"), ("key", "dedicated"), ("operator", "Equal"), ("value", "training")),)
    assert place(index, Gang([PodRequest("ns/p", {GPU: 1000, "pods": 1000}, tolerations=tol)])).placed


def test_workers_with_a100_affinity_never_on_h100():
    index = gpu_cluster()
    pods = [PodRequest(f"ns/w-{i}", {GPU: 4000, "pods": 1000}, segment=(0, i // 2),
                       node_affinity=affinity([("gpu-type", "In", ["a100"])])) for i in range(4)]
    res = place(index, Gang(pods, segment_preferred=HOST))
    assert res.placed
    assert sorted(res.assignments.values()) == ["a-0", "a-0", "a-1", "a-1"]
    pods.append(PodRequest("ns/w-4", {GPU: 4000, "pods": 1000}, segment=(0, 2),
                           node_affinity=affinity([("gpu-type", "In", ["a100"])])))
    assert not place(index, Gang(pods)).placed



def test_infeasible_under_required_affinity_names_the_restricted_role():
    # gen labels 2, 4, 8, none: `gen Gt 3` leaves h-1 and a-0; three 8-GPU workers cannot fit on two
    # nodes. The reason says so beside the binding resource; the unrestricted master is not named.
    pods = [PodRequest(f"ns/job-worker-{i}", {GPU: 8000, "pods": 1000}, role="worker",
                       node_affinity=affinity([("gen", "Gt", ["3"])])) for i in range(3)]
    pods.append(PodRequest("ns/job-master-0", {"cpu": 1000, "pods": 1000}, role="master"))
    res = place(gpu_cluster(), Gang(pods))
    assert not res.placed and res.exact
    assert res.reason == ("workload level cluster: 1 domain(s), 0 with room for the whole demand; the best (cluster) "
                          "holds 2 of 3 pods like ns/job-worker-0 (binding resource: nvidia.com/gpu); not enough room "
                          "there for 3 pods like ns/job-worker-0 (worker); 3 pods like ns/job-worker-0 (worker) are "
                          "eligible on only 2 of 4 ready node(s), restricted by: required node affinity (gen Gt [3]) "
                          "matches 2 of 4 ready node(s)")
