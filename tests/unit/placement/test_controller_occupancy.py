"""One rule for who occupies a node, one ledger charging it (webhook/placement/occupancy.py), shared
by ``place --cluster``, ``controller --once`` and the live controller (issue 17 item 2)."""

from __future__ import annotations

import pytest

from tests.unit.gating.test_controller_decision import cluster
from webhook.gating.decision import ParseCache, ledger_of
from webhook.kube.nodes import parse_node
from webhook.kube.pods import occupied_node
from webhook.placement.occupancy import CapacityLedger
from webhook.planning.snapshot import snapshot_from_objects

GPU = "nvidia.com/gpu"
GATE = [{"name": "segments.dev/placement"}]


def pod(name, *, node_name=None, pinned=None, gated=False, phase="Pending", deleting=False, gpus=1):
    spec: dict = {"containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if pinned:
        spec["nodeSelector"] = {"kubernetes.io/hostname": pinned}
    if gated:
        spec["schedulingGates"] = GATE
    meta: dict = {"name": name, "namespace": "x"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


# (pod, the node it occupies): DESIGN.md §9 "bound pods count as used and so does every pod that is not
# bound yet, not terminated and pinned by nodeSelector[kubernetes.io/hostname]"
CASES = [
    (pod("bound", node_name="zone-a-r1-n1", phase="Running"), "zone-a-r1-n1"),
    (pod("released", pinned="zone-a-r1-n2"), "zone-a-r1-n2"),
    (pod("gated-pinned", pinned="zone-a-r2-n1", gated=True), None),  # not released: holds nothing yet
    (pod("finished", node_name="zone-a-r2-n2", phase="Succeeded"), None),
    (pod("failed-released", pinned="zone-a-r2-n2", phase="Failed"), None),
    (pod("terminating", node_name="zone-a-r3-n1", phase="Running", deleting=True), "zone-a-r3-n1"),
    (pod("unscheduled"), None),
]


@pytest.mark.parametrize("obj, node", CASES, ids=[c[0]["metadata"]["name"] for c in CASES])
def test_occupied_node(obj, node):
    assert occupied_node(obj) == node


def test_place_and_the_controller_charge_the_same_gpus_per_node():
    nodes = cluster()  # 4 GPUs per node
    pods = [c[0] for c in CASES]
    expected = {"zone-a-r1-n1": 3, "zone-a-r1-n2": 3, "zone-a-r3-n1": 3}  # 4 - 1 where a pod sits
    snapshot = snapshot_from_objects(nodes + pods)
    by_place = {n.name: n.free[GPU] // 1000 for n in snapshot.nodes if n.free[GPU] != n.allocatable[GPU]}
    skipped: list[str] = []
    ledger = ledger_of(nodes, pods, skipped, ParseCache())
    index = ledger.index(None, None)
    by_controller = {name: int(index.free[row, index.col[GPU]]) // 1000 for name, row in index.node_pos.items()
                     if index.free[row, index.col[GPU]] != index.alloc[row, index.col[GPU]]}
    assert skipped == []
    assert by_place == by_controller == expected


def ledger_with_index():
    ledger = CapacityLedger([parse_node(n) for n in cluster()])
    index = ledger.index(None, None)
    return ledger, index, lambda node: int(index.free[index.node_pos[node], index.col[GPU]]) // 1000


def test_an_assumed_release_survives_a_stale_gated_view_until_the_pod_shows_its_node():
    ledger, _, free = ledger_with_index()
    ledger.assume(("x", "p"), "zone-a-r1-n1", {GPU: 2000})
    assert free("zone-a-r1-n1") == 2
    assert ledger.observe(("x", "p"), None, None) is False  # the informer's older, still-gated version
    assert free("zone-a-r1-n1") == 2 and ledger.is_assumed(("x", "p"))
    ledger.observe(("x", "p"), "zone-a-r1-n1", {GPU: 2000})  # the released pod, seen
    assert free("zone-a-r1-n1") == 2 and not ledger.is_assumed(("x", "p"))
    assert ledger.remove(("x", "p")) is True  # deleted: capacity given back
    assert free("zone-a-r1-n1") == 4


def test_a_failed_release_is_forgotten_and_gives_its_capacity_back():
    ledger, _, free = ledger_with_index()
    ledger.assume(("x", "p"), "zone-a-r1-n1", {GPU: 4000})
    assert free("zone-a-r1-n1") == 0
    assert ledger.forget(("x", "p")) is True
    assert free("zone-a-r1-n1") == 4
    assert ledger.forget(("x", "p")) is False  # nothing assumed any more


def test_a_node_change_rebuilds_the_index_with_every_charge():
    ledger, index, _ = ledger_with_index()
    ledger.observe(("x", "p"), "zone-a-r1-n1", {GPU: 3000})
    heartbeat = parse_node(cluster()[0])
    assert ledger.set_node(heartbeat) is False  # same engine view: nothing rebuilt
    assert ledger.index(None, None) is index
    bigger = cluster(gpus=8)[0]
    assert ledger.set_node(parse_node(bigger)) is True
    rebuilt = ledger.index(None, None)
    assert rebuilt is not index
    assert int(rebuilt.free[rebuilt.node_pos["zone-a-r1-n1"], rebuilt.col[GPU]]) // 1000 == 5  # 8 - 3
