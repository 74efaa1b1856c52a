"""The live controller decides outside its cache lock (issue 38 item 4; kube-scheduler's snapshot
then assume): a gang is decided on a snapshot of the ledger, then charged under the lock only when
the ledger still allows it (webhook/controller/cache.py ``ControllerCache.reconcile``,
webhook/placement/occupancy.py ``CapacityLedger.snapshot`` / ``still_valid``).

Another worker committing while a decision is made is simulated by changing the ledger from inside
the pure reconcile (the only code that now runs without the lock). The gang: pytorchjob-zone-and-
rack.yaml with 4 workers of 2 GPUs (segments of 4 in one rack: 8 GPUs, one whole rack) and its
Master (1 CPU), on 4 racks of 2 nodes of 4 GPUs (tests/unit/gating/test_controller_decision.py).
"""

from __future__ import annotations

import threading

import pytest
from kubernetes import client as k8s_client
from kubernetes.informer import ADDED

import webhook.controller.cache as cache_module
from tests.unit.gating.test_controller_decision import TOPOLOGY, cluster, gang_pods, pytorchjob
from webhook.controller.cache import OPTIMISTIC_ATTEMPTS, ControllerCache
from webhook.controller.workqueue import ExponentialRateLimiter
from webhook.kube.nodes import parse_node
from webhook.placement.occupancy import CapacityLedger
from webhook.topology.objects import StaticTopologyCatalog

GPU = "nvidia.com/gpu"
GANG = "team-a/job-a"


def make_cache() -> ControllerCache:
    """A cache fed by hand (its informers are never started; nothing is sent to the address)."""
    api = k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9"))
    cache = ControllerCache(api, None, threading.Event(), lambda keys, first: None, lambda: None, lambda key: None)  # type: ignore[arg-type]  # no reachability: nothing is sent
    cache.topologies = StaticTopologyCatalog([TOPOLOGY])  # type: ignore[assignment]  # stands in for the live one
    for node in cluster():
        cache.on_node(ADDED, node)
    for pod in gang_pods(pytorchjob(workers=4, gpus_per_worker=2)):
        cache.on_pod(ADDED, pod)
    return cache


def decide(cache: ControllerCache):
    return cache.reconcile(GANG, None, 0.0, None, ExponentialRateLimiter(1.0, 1.0))


def gpus_per_node(cache: ControllerCache) -> dict[str, int]:
    index = cache.ledger.index(TOPOLOGY.name, TOPOLOGY)
    return {node: 4 - int(index.free[row, index.col[GPU]]) // 1000 for node, row in index.node_pos.items()}


def with_meanwhile(monkeypatch, change):
    """Make ``change(cache, result)`` run after the first decision, as another worker's commit would."""
    real = cache_module.reconcile  # type: ignore[attr-defined]  # the name cache.py calls, patched below
    calls = []

    def reconcile(key, view):
        result = real(key, view)
        calls.append(result)
        if len(calls) == 1:
            change(result)
        return result
    monkeypatch.setattr(cache_module, "reconcile", reconcile)
    return calls


def test_a_decision_on_a_snapshot_is_charged_when_nothing_changed():
    cache = make_cache()
    result = decide(cache)
    assert result.kind == "released" and len(result.releases) == 5  # the Master and 4 workers
    assert cache.conflicts == 0
    used = gpus_per_node(cache)
    assert sorted(used.values()) == [0, 0, 0, 0, 0, 0, 4, 4]  # one whole rack: 8 GPUs on 2 nodes


def test_a_node_taken_meanwhile_makes_the_gang_decided_again_elsewhere(monkeypatch):
    cache = make_cache()
    taken = []

    def another_worker(result):
        node = next(r.node for r in result.releases if r.name != "job-a-master-0")
        taken.append(node)
        with cache.lock:
            cache.ledger.assume(("team-b", "other"), node, {GPU: 4000})
    calls = with_meanwhile(monkeypatch, another_worker)
    result = decide(cache)
    assert cache.conflicts == 1 and len(calls) == 2
    assert result.kind == "released"
    assert taken[0] not in {r.node for r in result.releases if r.name != "job-a-master-0"}  # its GPUs are gone
    assert all(used <= 4 for used in gpus_per_node(cache).values())  # nothing over-booked
    assert sum(gpus_per_node(cache).values()) == 12  # the other pod's 4 + the gang's 8


def test_a_change_on_another_node_keeps_the_decision(monkeypatch):
    cache = make_cache()

    def elsewhere(result):
        chosen = {r.node for r in result.releases}
        other = next(n["metadata"]["name"] for n in cluster() if n["metadata"]["name"] not in chosen)
        with cache.lock:
            cache.ledger.observe(("team-b", "other"), other, {GPU: 1000})
    calls = with_meanwhile(monkeypatch, elsewhere)
    result = decide(cache)
    assert cache.conflicts == 0 and len(calls) == 1 and result.kind == "released"


def test_capacity_freed_meanwhile_is_not_missed_by_a_waiting_gang(monkeypatch):
    cache = make_cache()
    with cache.lock:
        for i, node in enumerate(n["metadata"]["name"] for n in cluster()):
            cache.ledger.observe(("team-b", f"blocker-{i}"), node, {GPU: 4000})

    def freed(result):
        assert result.kind == "infeasible"  # every GPU taken
        with cache.lock:
            cache.ledger.remove(("team-b", "blocker-0"))  # zone-a-r1-n1 and -n2: rack r1 free
            cache.ledger.remove(("team-b", "blocker-1"))
    calls = with_meanwhile(monkeypatch, freed)
    result = decide(cache)
    assert cache.conflicts == 1 and len(calls) == 2
    assert result.kind == "released"
    assert {r.node for r in result.releases} >= {"zone-a-r1-n1", "zone-a-r1-n2"}


def test_after_the_optimistic_attempts_the_decision_is_made_under_the_lock(monkeypatch):
    cache = make_cache()
    real = cache_module.reconcile  # type: ignore[attr-defined]  # the name cache.py calls, patched below
    held = []

    def always_conflicting(key, view):
        held.append(cache.lock.locked())
        result = real(key, view)
        if not cache.lock.locked():  # another worker takes a GPU on a chosen node every time
            with cache.lock:
                cache.ledger.assume(("team-b", f"other-{len(held)}"), result.releases[1].node, {GPU: 1000})
        return result
    monkeypatch.setattr(cache_module, "reconcile", always_conflicting)
    result = decide(cache)
    assert held == [False] * OPTIMISTIC_ATTEMPTS + [True]
    assert cache.conflicts == OPTIMISTIC_ATTEMPTS
    assert result.kind == "released"
    assert all(used <= 4 for used in gpus_per_node(cache).values())


@pytest.mark.parametrize("change, any_change, valid", [
    (lambda ledger: ledger.observe(("x", "p"), "zone-a-r1-n1", {GPU: 1000}), False, False),  # a chosen node charged
    (lambda ledger: ledger.observe(("x", "p"), "zone-a-r2-n1", {GPU: 1000}), False, True),   # another node
    (lambda ledger: ledger.observe(("x", "p"), "zone-a-r2-n1", {GPU: 1000}), True, False),   # any change counts
    (lambda ledger: ledger.remove_node("zone-a-r4-n2"), False, False),                        # the node set changed
    (lambda ledger: ledger.set_node(parse_node(cluster(gpus=8)[7])), False, False),         # a node's capacity changed
    (lambda ledger: None, True, True),                                                   # nothing happened
])
def test_still_valid(change, any_change, valid):
    ledger = CapacityLedger([parse_node(n) for n in cluster()])
    ledger.index(None, None)
    snapshot = ledger.snapshot()
    change(ledger)
    assert ledger.still_valid(snapshot, ["zone-a-r1-n1", "zone-a-r1-n2"], any_change=any_change) is valid


def test_a_snapshot_is_charged_without_touching_the_ledger():
    ledger = CapacityLedger([parse_node(n) for n in cluster()])
    index = ledger.index(None, None)
    snapshot = ledger.snapshot()
    snapshot.assume(("x", "p"), "zone-a-r1-n1", {GPU: 3000})
    own = snapshot.index(None, None)
    assert int(own.free[own.node_pos["zone-a-r1-n1"], own.col[GPU]]) // 1000 == 1
    assert int(index.free[index.node_pos["zone-a-r1-n1"], index.col[GPU]]) // 1000 == 4
    assert ledger.charged(("x", "p")) is None


def test_indexes_a_snapshot_built_are_kept_only_when_nothing_changed():
    ledger = CapacityLedger([parse_node(n) for n in cluster()])
    snapshot = ledger.snapshot()
    built = snapshot.index(TOPOLOGY.name, TOPOLOGY)
    ledger.adopt_indexes(snapshot)
    assert ledger.index(TOPOLOGY.name, TOPOLOGY) is built
    other = CapacityLedger([parse_node(n) for n in cluster()])
    late = other.snapshot()
    late.index(TOPOLOGY.name, TOPOLOGY)
    other.observe(("x", "p"), "zone-a-r1-n1", {GPU: 1000})
    other.adopt_indexes(late)
    rebuilt = other.index(TOPOLOGY.name, TOPOLOGY)
    assert int(rebuilt.free[rebuilt.node_pos["zone-a-r1-n1"], rebuilt.col[GPU]]) // 1000 == 3
