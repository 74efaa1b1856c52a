"""Who occupies which node, and the one ledger that charges it (DESIGN.md §8 snapshot, §9 used capacity).

``place --cluster`` (:func:`webhook.planning.snapshot.build_snapshot`), ``controller --once`` and
the live controller all ask this module, so a pod counts the same everywhere:

* :func:`occupied_node` — the node a pod holds capacity on: ``spec.nodeName`` (bound), else, for a
  pod that is NOT gated by this webhook, ``spec.nodeSelector[kubernetes.io/hostname]`` (released
  but not bound yet: kube-scheduler can only put it there, DESIGN.md §9); ``None`` for a
  ``Succeeded``/``Failed`` pod (a terminated pod holds nothing, as in kube-scheduler). A pod that
  is being deleted (``metadata.deletionTimestamp``) still holds its node until it is gone, as
  kube-scheduler counts it.
* :class:`CapacityLedger` — the one capacity charger: the parsed nodes, one charge per pod
  (``(namespace, name)`` → node and requests) and the engine's :class:`ClusterIndex` per topology,
  charged incrementally. A charge is *observed* (the pod as the API shows it) or *assumed* (a
  release this process decided and is sending, as kube-scheduler's ``assume``): an assumed charge
  survives a still-gated view of its pod until the pod shows its node, is deleted or the release
  is given up (:meth:`CapacityLedger.forget`).
* **Deciding outside the lock** (kube-scheduler's snapshot, then assume): :meth:`CapacityLedger.snapshot`
  copies the ledger (taken under the caller's lock, then read and charged freely by one decision);
  :meth:`CapacityLedger.still_valid` says, under the lock again, whether what was decided on the
  copy may be charged to the ledger as it is now (no node set change, none of the decision's nodes
  charged or freed since; or, for a decision that placed nothing, no change at all).

Pure: no kubernetes import (tests/unit/project/test_layout.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import replace

from webhook.kube.nodes import Node
from webhook.kube.pods import PodRef
from webhook.placement.cluster_index import ClusterIndex
from webhook.topology.objects import Topology


class CapacityLedger:
    """The one capacity charger (module docstring).

    ``nodes``: parsed :class:`Node` objects, uncharged (``free`` = allocatable). Charges are in the
    milli-units of :func:`webhook.kube.pods.pod_requests_milli`. :meth:`index` returns the
    engine's :class:`ClusterIndex` of a topology with every charge applied; the index is kept and
    charged incrementally until the node set changes (:meth:`set_node`, :meth:`remove_node`,
    :meth:`set_nodes`). Not thread-safe: the caller serializes (the live controller holds one lock
    around every read and charge, so two gangs never take the same capacity).
    """

    def __init__(self, nodes: Iterable[Node] = ()):
        self._nodes: dict[str, Node] = {n.name: n for n in nodes}
        self._charges: dict[PodRef, tuple[str, Mapping[str, int]]] = {}
        self._assumed: set[PodRef] = set()
        self._indexes: dict[str | None, ClusterIndex] = {}
        #: Bumped by every change (a charge taken or given back, a node added, changed or removed).
        self.generation = 0
        self._nodes_generation = 0  # the generation of the last node set change
        self._touched: dict[str, int] = {}  # node -> the generation of its last charge change

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> CapacityLedger:
        """A copy to decide on without the caller's lock: the charges, the assumed set and every
        built index copied (``free`` only: the rest of an index is never changed by the engine),
        the parsed nodes shared (they are replaced, never changed). O(pods + nodes x resources)."""
        copy_ = CapacityLedger()
        copy_._nodes = dict(self._nodes)
        copy_._charges = dict(self._charges)
        copy_._assumed = set(self._assumed)
        copy_._indexes = {name: _own_free(index) for name, index in self._indexes.items()}
        copy_.generation = copy_._nodes_generation = self.generation
        return copy_

    def still_valid(self, snapshot: CapacityLedger, nodes: Iterable[str], *, any_change: bool = False) -> bool:
        """True when a decision made on ``snapshot`` (from :meth:`snapshot` of this ledger) may be
        charged here now: the node set did not change since, and no charge changed on ``nodes``
        (the nodes the decision takes); with ``any_change=True`` (a decision that placed nothing:
        capacity freed anywhere may make it fit) nothing changed at all."""
        if any_change:
            return self.generation == snapshot.generation
        if self._nodes_generation > snapshot.generation:
            return False
        return all(self._touched.get(node, -1) <= snapshot.generation for node in nodes)

    def adopt_indexes(self, snapshot: CapacityLedger) -> None:
        """Keep the indexes ``snapshot`` built that this ledger lacks, when nothing changed since
        the snapshot was taken (so the next decision does not build them again)."""
        if self.generation != snapshot.generation:
            return
        for name, index in snapshot._indexes.items():
            self._indexes.setdefault(name, index)

    def _bump(self, node: str | None = None) -> None:
        self.generation += 1
        if node is None:
            self._nodes_generation = self.generation
        else:
            self._touched[node] = self.generation

    # ------------------------------------------------------------------ nodes
    def set_nodes(self, nodes: Iterable[Node]) -> None:
        """Replace every node (the indexes are rebuilt on the next :meth:`index`)."""
        self._nodes = {n.name: n for n in nodes}
        self._indexes.clear()
        self._bump()

    def set_node(self, node: Node) -> bool:
        """Add or replace one node; returns True when the engine's view of it changed."""
        if self._nodes.get(node.name) == node:
            return False
        self._nodes[node.name] = node
        self._indexes.clear()
        self._bump()
        return True

    def remove_node(self, name: str) -> bool:
        """Forget node ``name``; returns True when it was known."""
        if self._nodes.pop(name, None) is None:
            return False
        self._indexes.clear()
        self._bump()
        return True

    def has_node(self, name: str) -> bool:
        """True when node ``name`` is known (parsed and not removed)."""
        return name in self._nodes

    @property
    def node_count(self) -> int:
        """Number of known nodes."""
        return len(self._nodes)

    # ------------------------------------------------------------------ charges
    def charged(self, ref: PodRef) -> tuple[str, Mapping[str, int]] | None:
        """``(node, requests)`` charged for pod ``ref``, or ``None``."""
        return self._charges.get(ref)

    def is_assumed(self, ref: PodRef) -> bool:
        """True while ``ref``'s charge is an assumed release not yet seen on the pod."""
        return ref in self._assumed

    def observe(self, ref: PodRef, node: str | None, requests: Mapping[str, int] | None) -> bool:
        """Record pod ``ref`` as the API shows it: on ``node`` with ``requests`` (both from
        :func:`occupied_node` and ``pod_requests_milli``), or occupying nothing (``node`` None).
        A still-gated view of an assumed pod keeps the assumption. Returns True when capacity
        was given back (the pod left a node or moved), so gangs waiting for capacity may fit."""
        if node is None:
            if ref in self._assumed:
                return False
            return self._set(ref, None)
        self._assumed.discard(ref)
        return self._set(ref, (node, dict(requests or {})))

    def assume(self, ref: PodRef, node: str, requests: Mapping[str, int]) -> None:
        """Charge a release this process is about to send (before the patch goes out)."""
        self._set(ref, (node, dict(requests)))
        self._assumed.add(ref)

    def forget(self, ref: PodRef) -> bool:
        """Drop the assumed charge of ``ref`` (its release failed for good); returns True when
        capacity was given back."""
        if ref not in self._assumed:
            return False
        self._assumed.discard(ref)
        return self._set(ref, None)

    def remove(self, ref: PodRef) -> bool:
        """The pod is gone (deleted or terminated): drop its charge, observed or assumed."""
        self._assumed.discard(ref)
        return self._set(ref, None)

    def _set(self, ref: PodRef, charge: tuple[str, Mapping[str, int]] | None) -> bool:
        old = self._charges.get(ref)
        if old == charge:
            return False
        if old is not None:
            self._apply(old[0], old[1], -1)
            self._bump(old[0])
        if charge is None:
            del self._charges[ref]
        else:
            self._charges[ref] = charge
            self._apply(charge[0], charge[1], 1)
            self._bump(charge[0])
        return old is not None

    def _apply(self, node: str, requests: Mapping[str, int], sign: int) -> None:
        for index in self._indexes.values():
            _charge_index(index, node, requests, sign)

    def give_back(self, charges: Iterable[tuple[str, Mapping[str, int]]], sign: int = -1) -> None:
        """Temporarily give back (``sign=-1``) or take again (``+1``) ``(node, requests)``
        pairs in every built index (a half-released gang's own pods while it is placed again);
        the recorded charges are not changed, so the caller must undo it before returning."""
        for node, requests in charges:
            self._apply(node, requests, sign)

    # ------------------------------------------------------------------ the engine's view
    def index(self, name: str | None, topology: Topology | None) -> ClusterIndex:
        """The :class:`ClusterIndex` of ``topology`` (``None``: nodes alone) with every charge
        applied. The same object is returned until the node set changes; do not keep it across
        charges made by someone else without the caller's lock."""
        index = self._indexes.get(name)
        if index is None or index.topology != topology:
            index = ClusterIndex([replace(n, free=dict(n.allocatable)) for n in self._nodes.values()], topology)
            for node, requests in self._charges.values():
                _charge_index(index, node, requests, 1)
            self._indexes[name] = index
        return index

    def index_copy(self, name: str | None, topology: Topology | None) -> ClusterIndex:
        """:meth:`index` with its own ``free`` (a shallow copy: the rest is shared and never changed
        by the engine): a caller may charge and restore it without touching the ledger's (the
        advisory controller's what-if)."""
        return _own_free(self.index(name, topology))


def _own_free(index: ClusterIndex) -> ClusterIndex:
    """A shallow copy of ``index`` with its own ``free``."""
    own = copy.copy(index)
    own.free = index.free.copy()
    return own


def _charge_index(index: ClusterIndex, node: str, requests: Mapping[str, int], sign: int) -> None:
    """Take (``sign=1``) or give back (``-1``) ``requests`` on ``node`` in ``index``; resources
    no node of the index has are not tracked there."""
    row = index.node_pos.get(node)
    if row is None:
        return
    for resource, value in requests.items():
        col = index.col.get(resource)
        if col is not None and value > 0:
            index.free[row, col] -= sign * value
