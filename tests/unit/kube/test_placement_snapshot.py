"""Quantities, pod requests and cluster snapshot input (DESIGN.md §8 "Input"; docs/concepts/placement.md "Snapshot rules")."""

from __future__ import annotations

from fractions import Fraction

import pytest
import yaml

from tests.support.placement_helpers import BLOCK, CLUSTER_TOPOLOGY, HOST, RACK, ZONE
from webhook.kube.nodes import SnapshotError
from webhook.kube.pods import pod_requests
from webhook.kube.quantity import QuantityError, parse_quantity, to_milli
from webhook.placement.engine import ClusterIndex, Gang, PodRequest, place
from webhook.planning.snapshot import load_snapshot, snapshot_from_objects


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
    obj: dict = {"kind": "Node", "metadata": {"name": name, "labels": {ZONE: "z", BLOCK: "b", RACK: "r", HOST: name}},
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
    (tmp_path / "topo.yaml").write_text(
        "apiVersion: kai.scheduler/v1alpha1\nkind: TopologyList\nitems:\n- apiVersion: kai.scheduler/v1alpha1\n"
        "  kind: Topology\n  metadata: {name: t}\n  spec: {levels: [{nodeLabel: topology.kubernetes.io/zone}]}\n")
    snap = load_snapshot([str(tmp_path / "nodes.json"), str(tmp_path / "pods.yaml"), str(tmp_path / "topo.yaml")])
    assert snap.nodes[0].free["cpu"] == 6000
    assert [t.name for t in snap.topologies] == ["t"]


@pytest.mark.parametrize("objs, needle", [
    ([_node("n1", status={"allocatable": {"cpu": "eight"}})], 'Node "n1": status.allocatable[cpu]: "eight" is not a Kubernetes quantity'),
    ([_node("n1"), _node("n1")], 'bad.yaml: document 2: Node "n1" is listed twice (also at {DIR}/bad.yaml: document 1)'),
    ([_node("n1"), _pod("p", "n1", cpu="1x")], "Pod x/p: spec.containers[0].resources.requests[cpu]"),
    ([{"kind": "Node", "metadata": {}}], "Node has no metadata.name"),
    ([{"kind": "Node", "metadata": {"name": "n"}, "status": {}}], 'Node "n": status.allocatable is missing'),
    ([{"apiVersion": "v1"}], "object has no kind"),
    ([{"kind": "Topology", "metadata": {"name": "t"}, "spec": {"levels": []}}], "spec.levels must be a non-empty list"),
])
def test_bad_objects_named(tmp_path, objs, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    with pytest.raises(SnapshotError) as exc:
        load_snapshot([str(path)])
    assert str(exc.value).startswith(f"{path}: ")
    assert needle.replace("{DIR}", str(tmp_path)) in str(exc.value)


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
    assert not res.placed and res.reason is not None
    assert "holds 16 of 17 pods" in res.reason and "binding resource: cpu" in res.reason


def test_bound_pods_far_over_allocatable_stay_in_int64():
    """Four bound pods of 1e30 cpu on a 1-cpu node: free cpu is clamped at -2**62 milli (it used to
    reach -2**64 and fail with OverflowError when the engine copied it into int64 arrays)."""
    from webhook.kube.quantity import MAX_MILLI

    snap = snapshot_from_objects([_node("n1")] + [_pod(f"p{i}", "n1", cpu="1e30") for i in range(4)])
    assert snap.nodes[0].free["cpu"] == -MAX_MILLI == -(2**62)
    idx = ClusterIndex(snap.nodes, CLUSTER_TOPOLOGY)
    assert int(idx.free[0, idx.col["cpu"]]) == -(2**62)


def test_load_snapshot_without_nodes(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(SnapshotError) as info:
        load_snapshot([str(empty)])
    assert str(info.value) == (f"{empty}: no Node objects; fix: dump the cluster with `kubectl get nodes,pods -A -o yaml` "
                               "(the nodes, and the pods that say what is already taken)")
    # in-memory snapshots (tests, benchmarks) may still be empty
    assert snapshot_from_objects([]).nodes == []


@pytest.mark.parametrize("value", ["9" * 5000, "0" * 5000 + "1", "0." + "0" * 5000 + "1"])
def test_quantity_with_thousands_of_digits_is_a_quantity_error(value):
    from webhook.kube.quantity import QuantityError, parse_quantity

    with pytest.raises(QuantityError, match="more than 100 digits is not a quantity"):
        parse_quantity(value)


NEGATIVE = ('"-3" is negative: Kubernetes API validation rejects negative requests, limits, overhead and allocatable '
            "(quantities must be non-negative); fix: use 0 or more")


@pytest.mark.parametrize("spec, field", [
    ({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "-3"}}}]},
     "spec.containers[0].resources.requests[nvidia.com/gpu]"),
    ({"containers": [{"name": "c", "resources": {"limits": {"cpu": "-3"}}}]}, "spec.containers[0].resources.limits[cpu]"),
    ({"containers": [], "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "-3"}}}]},
     "spec.initContainers[0].resources.requests[cpu]"),
    ({"containers": [], "overhead": {"cpu": "-3"}}, "spec.overhead[cpu]"),
])
def test_negative_requests_are_bad_input(spec, field):
    # Kubernetes rejects them; a bound pod with one used to free capacity on its node
    pod = {"kind": "Pod", "metadata": {"name": "neg", "namespace": "x"}, "spec": {"nodeName": "n1", **spec}}
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([_node("n1"), pod])
    assert str(exc.value) == f"<objects>: Pod x/neg: {field}: {NEGATIVE}"


@pytest.mark.parametrize("value, text", [("-3", '"-3"'), (-3, "-3")])
def test_negative_allocatable_is_bad_input(value, text):
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([_node("n1", status={"allocatable": {"cpu": "8", "nvidia.com/gpu": value}})])
    assert str(exc.value) == (f'<objects>: Node "n1": status.allocatable[nvidia.com/gpu]: {text} is negative: Kubernetes '
                              "API validation rejects negative requests, limits, overhead and allocatable (quantities "
                              "must be non-negative); fix: use 0 or more")


def test_zero_requests_and_allocatable_are_fine():
    snap = snapshot_from_objects([_node("n1", status={"allocatable": {"cpu": "0", "nvidia.com/gpu": "-0"}}),
                                  _pod("p", "n1", cpu="0")])
    assert (snap.nodes[0].allocatable["cpu"], snap.nodes[0].free["nvidia.com/gpu"]) == (0, 0)


@pytest.mark.parametrize("raw, message", [
    (None, 'null is not a quantity (expected a string such as "500m" or "64Gi")'),
    (True, 'true is not a quantity (expected a string such as "500m" or "64Gi")'),
    (float("inf"), '.inf (YAML float) is not a quantity (not a finite number; a JSON number too large to read, '
                   'such as 1e400, reads as .inf too; expected a string such as "500m" or "64Gi")'),
    (float("nan"), '.nan (YAML float) is not a quantity (not a finite number; a JSON number too large to read, '
                   'such as 1e400, reads as .inf too; expected a string such as "500m" or "64Gi")'),
    (["1"], '["1"] is not a quantity (expected a string such as "500m" or "64Gi", got an array)'),
    ("NaN", '"NaN" is not a Kubernetes quantity (examples: "500m", "2", "64Gi", "1e3"); fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, Ti) and no spaces'),
    ("1e308", '"1e308": exponent out of range (at most 30 either way)'),
])
def test_quantity_messages_render_values_as_json(raw, message):
    with pytest.raises(QuantityError) as exc:
        parse_quantity(raw)
    assert str(exc.value) == message


def test_json_1e400_allocatable_is_explained(tmp_path):
    # one renderer for every message (webhook.text.messages.quote) names the value as YAML does;
    # the message says that a JSON number too large to read is that value
    path = tmp_path / "nodes.json"
    path.write_text('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n0"}, '
                    '"status": {"allocatable": {"cpu": 1e400}}}]}')
    with pytest.raises(SnapshotError) as exc:
        load_snapshot([str(path)])
    assert str(exc.value) == (f'{path}: Node "n0": status.allocatable[cpu]: .inf (YAML float) is not a quantity (not a '
                              'finite number; a JSON number too large to read, such as 1e400, reads as .inf too; '
                              'expected a string such as "500m" or "64Gi")')


@pytest.mark.parametrize("labels, message", [
    ({RACK: None}, f'metadata.labels["{RACK}"] = null: a label value must be a string, not null; '
                   f'fix: quote the value ("{RACK}": "...") or remove the label'),
    ({RACK: 7}, f'metadata.labels["{RACK}"] = 7: a label value must be a string, not a number; '
                f'fix: quote the value ("{RACK}": "...") or remove the label'),
    ({RACK: True}, f'metadata.labels["{RACK}"] = true: a label value must be a string, not a boolean; '
                   f'fix: quote the value ("{RACK}": "...") or remove the label'),
    ({7: "a"}, "metadata.labels has the key 7, which is a number: label keys are strings; fix: quote the key"),
])
def test_label_values_that_are_not_strings_are_bad_input(labels, message):
    # a null label value used to make a domain named "None"
    node = _node("n1")
    node["metadata"]["labels"].update(labels)
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([node])
    assert str(exc.value) == f'<objects>: Node "n1": {message}'


@pytest.mark.parametrize("value, json_text, type_name", [("false", '"false"', "a string"), (0, "0", "a number")])
def test_unschedulable_that_is_not_a_boolean_is_bad_input(value, json_text, type_name):
    # bool("false") is True: a string "false" used to cordon the node
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([_node("n1", spec={"unschedulable": value})])
    assert str(exc.value) == (f'<objects>: Node "n1": spec.unschedulable = {json_text}: must be a boolean, not '
                              f"{type_name}; fix: write unschedulable: true or false, unquoted")
    assert snapshot_from_objects([_node("n1", spec={"unschedulable": False})]).nodes[0].unschedulable is False


@pytest.mark.parametrize("value, message", [
    (True, 'true: must be the string "True", "False" or "Unknown" (a ConditionStatus), not a boolean; '
           'fix: write status: "True", quoted (unquoted true is a YAML boolean)'),
    (False, 'false: must be the string "True", "False" or "Unknown" (a ConditionStatus), not a boolean; '
            'fix: write status: "False", quoted (unquoted false is a YAML boolean)'),
    ("Yes", '"Yes": must be "True", "False" or "Unknown" (a ConditionStatus; letter case counts); fix: write one of them'),
    ("true", '"true": must be "True", "False" or "Unknown" (a ConditionStatus; letter case counts); fix: write one of them'),
    (None, 'null: must be the string "True", "False" or "Unknown" (a ConditionStatus), not null; '
           'fix: write one of them, quoted'),
])
def test_a_ready_status_that_is_not_a_condition_status_is_bad_input(value, message):
    """A ConditionStatus is the string "True", "False" or "Unknown" (k8s.io/api core/v1). A new-user
    trial's hand-edited `status: true` (a YAML boolean) left the node out as not Ready, in silence,
    and turned "fits" into "never fits"; a second trial found `false` told to write "True"."""
    node = _node("n1")
    node["status"]["conditions"] = [{"type": "Ready", "status": value}]
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([node])
    assert str(exc.value) == f'<objects>: Node "n1": status.conditions[Ready].status = {message}'
    for status, ready in (("True", True), ("False", False), ("Unknown", False)):
        node["status"]["conditions"] = [{"type": "Ready", "status": status}]
        assert snapshot_from_objects([node]).nodes[0].ready is ready


def test_taint_value_that_is_not_a_string_is_bad_input():
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([_node("n1", spec={"taints": [{"key": "k", "value": 5, "effect": "NoSchedule"}]})])
    assert str(exc.value) == ('<objects>: Node "n1": spec.taints[0].value = 5: a taint value must be a string, '
                              "not a number; fix: quote it")


def test_yaml_alias_bomb_in_a_label_value_is_refused_at_load_without_expanding_it(tmp_path):
    # nine levels of nine aliases: 387,420,489 strings once expanded (str() of it took 61 s and 2 GB);
    # refused when the file is read (kubectl's excessive-aliasing rule, webhook.planning.manifests); a shared
    # value that gets past it is walked only as far as shown
    # (test_an_alias_bomb_label_value_is_walked_only_as_far_as_shown)
    levels = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        levels.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("x_anchors:\n" + "".join(f"  {line}\n" for line in levels) + (
        "kind: List\nitems:\n- kind: Node\n  metadata:\n    name: n0\n    labels:\n      junk: *i\n"
        "  status:\n    allocatable: {cpu: '1'}\n"))
    with pytest.raises(SnapshotError) as exc:
        load_snapshot([str(path)])
    assert str(exc.value) == (f'{path}: excessive aliasing: its YAML aliases (*name) make 926177116 nodes of 30 '
                              'distinct ones, more than 10 times as many (kubectl refuses it too: "document contains '
                              'excessive aliasing"); fix: write the repeated parts out instead of aliasing aliases')


def test_an_alias_bomb_label_value_is_walked_only_as_far_as_shown():
    from tests.support.bounded_work import Visits, list_bomb

    visits = Visits()
    node = {"kind": "Node", "metadata": {"name": "n0", "labels": {"junk": list_bomb(8, 9, visits)}},
            "status": {"allocatable": {"cpu": "1"}}}
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([node])
    assert str(exc.value).startswith('<objects>: Node "n0": metadata.labels["junk"] = [[[[[[[[["x", "x", "x", "x", '
                                     '"x", "x", "x", "x", "x"], ["...: a label value must be a string, not an array')
    assert visits.count <= 100  # what the message shows; an unbounded walk (str() of it) visits 9**9 strings


def test_every_problem_is_named_and_nodes_listed_twice_name_both_places(tmp_path):
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": [
        _node("n1"), _node("n1"), _node("n2", status={"allocatable": {"cpu": None}}),
        {"kind": "Pod", "metadata": {"name": "p", "namespace": "x"}}]}))
    with pytest.raises(SnapshotError) as exc:
        load_snapshot([str(path)])
    assert str(exc.value) == (
        "3 problems in the input (a truncated or hand-edited dump? dump it again with "
        "`kubectl get nodes,pods -A -o yaml`):\n"
        f'  {path}: document 1.items[1]: Node "n1" is listed twice (also at {path}: document 1.items[0]); node names '
        "are unique in a cluster; fix: keep one of them\n"
        f'  {path}: Node "n2": status.allocatable[cpu]: null is not a quantity (expected a string such as "500m" '
        'or "64Gi")\n'
        f"  {path}: Pod x/p: spec is missing")


def _topology(name, *levels):
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}


def test_two_different_topologies_of_one_name_are_bad_input(tmp_path):
    dump = tmp_path / "dump.yaml"
    dump.write_text(yaml.safe_dump_all([_node("n1"), _topology("t", ZONE, RACK)]))
    topo = tmp_path / "topo.yaml"
    topo.write_text(yaml.safe_dump(_topology("t", RACK)))
    with pytest.raises(SnapshotError) as exc:
        load_snapshot([str(dump)], [str(topo)])
    assert str(exc.value) == (f'{dump}: document 2: Topology "t" is defined twice with different levels or aliases '
                              f"(also at {topo}: document 1: {RACK}; here: {ZONE}, {RACK}); fix: keep one of them or rename one")
    # the same Topology given twice (in the dump and in --topology-file) is one topology
    topo.write_text(yaml.safe_dump(_topology("t", ZONE, RACK)))
    assert [t.levels for t in load_snapshot([str(dump)], [str(topo)]).topologies] == [(ZONE, RACK)]


def test_raw_api_node_and_pod_lists_without_item_kinds(tmp_path):
    import json

    node, pod = _node("n1"), _pod("p", "n1", cpu="2")
    del node["kind"], pod["kind"]
    (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [node]}))
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [pod]}))
    snap = load_snapshot([str(tmp_path / "nodes.json"), str(tmp_path / "pods.json")])
    assert ([n.name for n in snap.nodes], snap.nodes[0].free["cpu"], snap.bound_pods) == (["n1"], 6000, 1)


# Real dumps: JSON read by the JSON parser whatever the file name; only placement's fields kept.
KUBECTL_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "gpu-1", "uid": "u", "labels": {ZONE: "z0", BLOCK: "b0", RACK: "r0", HOST: "gpu-1"},
                 "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
    "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "dedicated", "value": "train", "effect": "NoSchedule"},
                                                  {"key": "soft", "effect": "PreferNoSchedule"}]},
    "status": {"addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
               "allocatable": {"cpu": "191450m", "memory": "2035784956Ki", "nvidia.com/gpu": "8", "pods": "110"},
               "capacity": {"cpu": "192", "memory": "2047512316Ki", "nvidia.com/gpu": "8", "pods": "110"},
               "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
               "images": [{"names": ["registry.example.com/trainer:1"], "sizeBytes": 123}],
               "nodeInfo": {"kubeletVersion": "v1.29.0"}}}
KUBECTL_POD: dict = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": "t"},
    "spec": {"nodeName": "gpu-1", "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "16", "memory": "200Gi"}, "limits": {"nvidia.com/gpu": "2"}}},
        {"name": "b", "resources": {"requests": {"cpu": "500m"}}}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_json_dump_read_as_json_whatever_its_name(tmp_path, monkeypatch):
    import gc
    import json

    import yaml

    from webhook.planning.snapshot import load_snapshot

    path = tmp_path / "cluster.yaml"  # JSON text under a YAML name
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [KUBECTL_NODE, KUBECTL_POD]}))

    def no_yaml(*args, **kwargs):
        raise AssertionError("a JSON dump went through the YAML parser")

    monkeypatch.setattr(yaml, "load_all", no_yaml)
    snap = load_snapshot([str(path)])
    assert gc.isenabled()  # paused only while the dump is built
    (n,) = snap.nodes
    assert (n.name, n.ready, n.unschedulable, n.taints) == ("gpu-1", True, False, (("dedicated", "train", "NoSchedule"),))
    assert n.allocatable == {"cpu": 191_450, "memory": 2035784956 * 1024 * 1000, "nvidia.com/gpu": 8000, "pods": 110_000}
    # 16 + 0.5 cores, 200Gi, 2 GPUs (a limit without a request), one pod
    assert n.free == {"cpu": 191_450 - 16_500, "memory": (2035784956 * 1024 - 200 * 2**30) * 1000,
                      "nvidia.com/gpu": 6000, "pods": 109_000}
    assert snap.bound_pods == 1


def test_pod_requests_fast_path_agrees_with_the_exact_rule():
    from webhook.kube.pods import pod_requests, pod_requests_milli
    from webhook.kube.quantity import to_milli

    specs: list[dict] = [KUBECTL_POD["spec"],
                         {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "250m"}}}]},
                         {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1n"}}}]},  # not whole milli: exact rule
                         {"containers": [{"name": "a"}], "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]},
                         {"containers": [{"name": "a", "resources": {"requests": {"cpu": 2}}}]}]
    expected = [{"cpu": 16_500, "memory": 200 * 2**30 * 1000, "nvidia.com/gpu": 2000, "pods": 1000},
                {"cpu": 250, "memory": 2**30 * 1000, "pods": 1000},
                {"cpu": 1, "pods": 1000},
                {"cpu": 2000, "pods": 1000},
                {"cpu": 2000, "pods": 1000}]
    for spec, want in zip(specs, expected):
        assert pod_requests_milli(spec) == want
        exact = {k: to_milli(v, round_up=True) for k, v in pod_requests(spec).items()}
        assert exact == {k: v for k, v in want.items() if k != "pods"}


@pytest.mark.parametrize("kind, near", [("Podd", "Pod"), ("node", "Node"), ("Topolgy", "Topology")])
def test_a_kind_close_to_one_the_snapshot_reads_is_bad_input(kind, near):
    """A new-user trial's hand-edited `kind: Podd` was ignored with the other kinds: the busy node
    it ran on counted as free, and the verdict turned to "fits". Kinds far from Node, Pod and
    Topology (a Deployment, a PodGroup) are still ignored."""
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([_node("n1"), {"kind": kind, "metadata": {"name": "x"}}])
    assert str(exc.value) == (f'<objects>: document 2: kind "{kind}" is none of the kinds a snapshot reads '
                              f"(Node, Pod, Topology), so the object would be ignored; did you mean {near}? "
                              f"fix: write kind: {near}, or remove the object")
    ignored = [{"kind": other, "metadata": {"name": "x"}} for other in ("Deployment", "PodGroup", "PodTemplate", "Lease")]
    assert [n.name for n in snapshot_from_objects([_node("n1"), *ignored]).nodes] == ["n1"]


@pytest.mark.parametrize("kind, near", [("PytorchJob", "PyTorchJob"), ("PyTorchJobs", "PyTorchJob"),
                                        ("leaderworkerset", "LeaderWorkerSet")])
def test_a_case_or_plural_variant_of_a_workload_kind_is_bad_input(kind, near):
    """A second new-user trial: `kind: PytorchJob` in an advise snapshot made `controller --once`
    say the gang's owner was not in the input. Only case and plural variants count: a Service is
    not taken for a RayService, nor a PodGroup for anything."""
    with pytest.raises(SnapshotError) as exc:
        snapshot_from_objects([_node("n1"), {"kind": kind, "metadata": {"name": "x"}}])
    assert str(exc.value) == (f'<objects>: document 2: kind "{kind}" is no kind the webhook handles; did you mean '
                              f"{near}? (kinds are case-sensitive); fix: write kind: {near}")
    fine = [{"kind": other, "metadata": {"name": "x"}} for other in ("Service", "PyTorchJob", "Job", "PodGroup")]
    assert [n.name for n in snapshot_from_objects([_node("n1"), *fine]).nodes] == ["n1"]
