"""Quantities, pod requests and cluster snapshot input (issue 3 §1)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import yaml

from webhook.placement.quantity import QuantityError, parse_quantity, to_milli
from webhook.placement.snapshot import SnapshotError, load_snapshot, pod_requests, snapshot_from_objects
from webhook.placement.engine import ClusterIndex, Gang, PodRequest, place
from placement_helpers import CLUSTER_TOPOLOGY, HOST, RACK, BLOCK, ZONE


@pytest.mark.parametrize("text, value", [
    ("500m", Fraction(1, 2)), ("64Gi", 64 * 2**30), ("1e3", 1000), ("1.5", Fraction(3, 2)),
    ("2Ki", 2048), ("100M", 10**8), ("1E", 10**18), ("0.1", Fraction(1, 10)), ("1m", Fraction(1, 1000)),
    ("250u", Fraction(1, 4000)), (".5", Fraction(1, 2)), ("2E-3", Fraction(1, 500)), ("+3", 3), (8, 8),
    ("12345678901234567890", 12345678901234567890),
])
def test_quantity_exact(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5.2", "10 Gi", "1Gb", "Gi", "-", "1e", True, None, [1]])
def test_quantity_rejects(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_milli_rounding():
    assert to_milli(Fraction(1, 3000), round_up=True) == 1
    assert to_milli(Fraction(1, 3000), round_up=False) == 0
    assert to_milli(parse_quantity("64Gi"), round_up=True) == 64 * 2**30 * 1000


def test_pod_requests_kubernetes_rules():
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2", "nvidia.com/gpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        ],
        "initContainers": [
            {"name": "big-init", "resources": {"requests": {"cpu": "4", "memory": "512Mi"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
            {"name": "late-init", "resources": {"requests": {"memory": "3Gi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    req = pod_requests(spec)
    # cpu: containers 1.5 + sidecar 0.25 = 1.75 vs init peak 4 -> 4, + overhead 0.1
    assert req["cpu"] == Fraction(41, 10)
    # memory: containers 1Gi vs late-init 3Gi (sidecar has none) -> 3Gi
    assert req["memory"] == 3 * 2**30
    # a limit without a request counts as the request
    assert req["nvidia.com/gpu"] == 1


def test_pod_requests_bad_quantity_names_field():
    with pytest.raises(QuantityError, match=r"spec\.containers\[0\]\.resources\.requests\[cpu\]"):
        pod_requests({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]})


def _node(name, **extra):
    obj = {"kind": "Node", "metadata": {"name": name, "labels": {ZONE: "z", BLOCK: "b", RACK: "r", HOST: name}},
           "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "4", "pods": "10"},
                                  "conditions": [{"type": "Ready", "status": "True"}]}}
    for k, v in extra.items():
        obj[k].update(v)
    return obj


def _pod(name, node, phase="Running", cpu="1", gpu=None):
    res = {"requests": {"cpu": cpu}}
    if gpu:
        res["limits"] = {"nvidia.com/gpu": gpu}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "x"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": res}]}, "status": {"phase": phase}}


def test_free_capacity_subtracts_bound_live_pods():
    snap = snapshot_from_objects([
        {"kind": "List", "items": [_node("n1"), _node("n2")]},
        _pod("p1", "n1", cpu="1500m", gpu="2"), _pod("p2", "n1", phase="Succeeded", cpu="4"),
        _pod("p3", "n1", phase="Failed", cpu="4"), _pod("p4", "n2", phase="Pending", cpu="250m"),
        {"kind": "Pod", "metadata": {"name": "unbound"}, "spec": {"containers": [{"name": "c"}]}},
    ])
    n1, n2 = snap.nodes
    assert n1.free == {"cpu": 6500, "memory": 16 * 2**30 * 1000, "nvidia.com/gpu": 2000, "pods": 9000}
    assert n2.free["cpu"] == 7750 and n2.free["pods"] == 9000
    assert snap.bound_pods == 2


def test_json_and_stream_files(tmp_path):
    import json
    (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [_node("n1")]}))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([_pod("p", "n1", cpu="2"), None]))
    (tmp_path / "topo.yaml").write_text((
        "apiVersion: kai.scheduler/v1alpha1\nkind: TopologyList\nitems:\n- apiVersion: kai.scheduler/v1alpha1\n"
        "  kind: Topology\n  metadata: {name: t}\n  spec: {levels: [{nodeLabel: topology.kubernetes.io/zone}]}\n"))
    snap = load_snapshot([str(tmp_path / "nodes.json"), str(tmp_path / "pods.yaml"), str(tmp_path / "topo.yaml")])
    assert snap.nodes[0].free["cpu"] == 6000
    assert [t.name for t in snap.topologies] == ["t"]


@pytest.mark.parametrize("objs, needle", [
    ([_node("n1", status={"allocatable": {"cpu": "eight"}})], "Node 'n1': status.allocatable[cpu]"),
    ([_node("n1"), _node("n1")], "Node 'n1': listed twice"),
    ([_node("n1"), _pod("p", "n1", cpu="1x")], "Pod x/p: spec.containers[0].resources.requests[cpu]"),
    ([{"kind": "Node", "metadata": {}}], "Node has no metadata.name"),
    ([{"kind": "Node", "metadata": {"name": "n"}, "status": {}}], "Node 'n': status.allocatable is missing"),
    ([{"apiVersion": "v1"}], "object has no kind"),
    ([{"kind": "Topology", "metadata": {"name": "t"}, "spec": {"levels": []}}], "spec.levels must be a non-empty list"),
])
def test_bad_objects_named(tmp_path, objs, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    with pytest.raises(SnapshotError) as exc:
        load_snapshot([str(path)])
    assert str(exc.value).startswith(f"{path}: ")
    assert needle in str(exc.value)


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read"):
        load_snapshot([str(tmp_path / "missing.yaml")])
    (tmp_path / "bad.yaml").write_text("a: [b\n")
    with pytest.raises(SnapshotError, match="not valid YAML"):
        load_snapshot([str(tmp_path / "bad.yaml")])


def test_candidates_exclude_unschedulable_notready_tainted_and_unlabelled():
    objs = [
        _node("a-ok"),
        _node("b-cordoned", spec={"unschedulable": True}),
        _node("c-notready", status={"conditions": [{"type": "Ready", "status": "False"}]}),
        _node("d-tainted", spec={"taints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}]}),
        _node("e-prefer", spec={"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}),
        {**_node("f-nolabel"), "metadata": {"name": "f-nolabel", "labels": {ZONE: "z"}}},
    ]
    index = ClusterIndex(snapshot_from_objects(objs).nodes, CLUSTER_TOPOLOGY)
    assert index.outside == 1
    pods = [PodRequest(f"x/p{i}", {"pods": 1000, "cpu": 1000}) for i in range(16)]
    res = place(index, Gang(pods))
    assert res.placed
    assert sorted(set(res.assignments.values())) == ["a-ok", "e-prefer"]
    tol = (("effect", "NoSchedule"), ("key", "gpu"), ("operator", "Equal"), ("value", "h100"))
    res = place(index, Gang([PodRequest(f"x/p{i}", {"pods": 1000, "cpu": 1000}, tolerations=(tol,)) for i in range(24)]))
    assert sorted(set(res.assignments.values())) == ["a-ok", "d-tainted", "e-prefer"]
    res = place(index, Gang([PodRequest(f"x/p{i}", {"pods": 1000, "cpu": 1000}) for i in range(17)]))
    assert not res.placed and "holds 16 of 17 pods" in res.reason and "binding resource: cpu" in res.reason


def test_bound_pods_far_over_allocatable_stay_in_int64():
    """Four bound pods of 1e30 cpu on a 1-cpu node: free cpu is clamped at -2**62 milli (it used to
    reach -2**64 and fail with OverflowError when the engine copied it into int64 arrays)."""
    from webhook.placement.quantity import MAX_MILLI

    snap = snapshot_from_objects([_node("n1")] + [_pod(f"p{i}", "n1", cpu="1e30") for i in range(4)])
    assert snap.nodes[0].free["cpu"] == -MAX_MILLI == -(2**62)
    idx = ClusterIndex(snap.nodes, CLUSTER_TOPOLOGY)
    assert int(idx.free[0, idx.col["cpu"]]) == -(2**62)


def test_load_snapshot_without_nodes(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(SnapshotError) as info:
        load_snapshot([str(empty)])
    assert str(info.value) == f"{empty}: no Node objects (dump them with `kubectl get nodes -o yaml`)"
    # in-memory snapshots (tests, benchmarks) may still be empty
    assert snapshot_from_objects([]).nodes == []


@pytest.mark.parametrize("value", ["9" * 5000, "0" * 5000 + "1", "0." + "0" * 5000 + "1"])
def test_quantity_with_thousands_of_digits_is_a_quantity_error(value):
    from webhook.placement.quantity import QuantityError, parse_quantity

    with pytest.raises(QuantityError, match="more than 100 digits is not a quantity"):
        parse_quantity(value)
