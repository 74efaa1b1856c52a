"""The live advisory controller's step (``controller --advise``, DESIGN.md §13, issue 36): a second
opinion on each gang another scheduler leaves pending, on the cache's snapshot, written as one Event
and ``segments.dev/gang-state`` on the gang's top owner. Reads, Events and the owner's annotation
only: no pod is patched or deleted (RBAC: no pod ``patch``/``delete``).

The verdict is :func:`webhook.controller.advisory.advise` (pure; ``controller --once --advise`` runs
it on a dump). This module is its adapter on the runner's parts: the cache (pods, capacity ledger,
Topologies, Kueue's pending Workloads), the owner reader, the event recorder and the owner
annotation writer;
:class:`AdvisoryController` is the runner's :class:`~webhook.controller.runner.Controller` whose
reconcile of a gang is this step (the informers, work queue, Lease and metrics are the same).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from webhook.controller import advisory
from webhook.controller.cache import KUEUE_KEY, AdvisoryCache
from webhook.controller.events import EventRecorder
from webhook.controller.gang_metrics import Metrics
from webhook.controller.owners import OwnerResolver
from webhook.controller.runner import Controller
from webhook.controller.settings import ControllerSettings
from webhook.gating.reconcile import TopOwner
from webhook.placement.cluster_index import ClusterIndex
from webhook.planning.snapshot import Snapshot
from webhook.topology.objects import Topology

__all__ = ["Advisor", "AdvisoryController"]

log = logging.getLogger(__name__)


class OwnerStates(Protocol):
    """:class:`webhook.controller.runner.OwnerStateWriter`'s one method used here."""

    def write(self, key: str, owner: TopOwner, line: str) -> None: ...


class Advisor:
    """The advisory step of a :class:`webhook.controller.runner.Controller` (module docstring)."""

    def __init__(self, cache: AdvisoryCache, owners: OwnerResolver, events: EventRecorder,
                 owner_states: OwnerStates, settings: ControllerSettings, metrics: Metrics) -> None:
        self._cache, self._owners, self._events = cache, owners, events
        self._owner_states, self._settings, self._metrics = owner_states, settings, metrics
        #: the owners' expansions, kept while they are not written (re-advised as capacity moves)
        self.expansions = advisory.Expansions()

    def pending_gangs(self) -> list[str]:
        """Every gang with a pod pending under another scheduler and every pending Kueue Workload
        (queued on leadership and resync)."""
        with self._cache.lock:
            return [k for k, pods in self._cache.gangs.items()
                    if any(advisory.pending_elsewhere(p) for p in pods.values())] + list(self._cache.kueue_pending)

    def snapshot(self) -> Snapshot:
        """The known Topologies (the what-if's catalog); the nodes come from :meth:`index_for`."""
        topologies = self._cache.topologies
        return Snapshot(topologies=[t for name in topologies.names() if (t := topologies.get(name)) is not None])

    def index_for(self, name: str | None, topology: Topology | None) -> ClusterIndex:
        """The ledger's cluster index of ``topology`` (every bound or pinned pod charged, built once
        and charged incrementally, as the gating controller's), copied with its own ``free`` under
        the cache's lock (:meth:`CapacityLedger.index_copy`): the what-if runs without the lock."""
        with self._cache.lock:
            return self._cache.ledger.index_copy(name, topology)

    def advise(self, key: str) -> None:
        """When gang ``key`` is pending under another scheduler, its second opinion on the cache's
        snapshot, written (one Event, the owner's annotation) when it changed. A gang whose top
        owner cannot be read gets none (the what-if needs the workload): logged."""
        if key.startswith(KUEUE_KEY):
            with self._cache.lock:
                workload = self._cache.kueue_pending.get(key)
            if workload is not None:
                self.advise_kueue(key, workload)
                return
        with self._cache.lock:
            kueue_gang = key in self._cache.kueue_gangs
        if kueue_gang:  # its pending Kueue Workload advises it (queued with it), until admitted
            return
        members = self._cache.members(key)
        if key not in advisory.pending_gangs(members):
            with self._cache.lock:
                self._cache.advised.pop(key, None)
                self._cache.verdicts.pop(key, None)
            return
        first = self._cache.first_pod(key)
        owner = self._owners.top_owner(first) if first is not None else None
        if owner is None:
            log.info("gang %s is pending, but its top owner workload cannot be read: no second opinion", key)
            return
        # no occupants: they name the pods of a "free nodes" change, which the line of a gang waiting
        # for capacity does not search and which cannot help one that never fits
        advice = advisory.advise(key, owner.obj, self.snapshot(), {}, self._settings.default_topology,
                                 live_pods=len(members), index_for=self.index_for, expansions=self.expansions)
        self._metrics.passes.inc()
        if advice is None:
            return
        self._write(advice, owner)

    def _write(self, advice: advisory.Advice, owner: TopOwner, kueue: str | None = None) -> None:
        """Write ``advice`` on ``owner`` when its line changed: the annotation then, the Event only
        when the verdict changed too (one Event per verdict: "fits now" with other nodes named as
        the capacity moves is not a new Event; the annotation shows the latest line). ``kueue``:
        the pending Kueue Workload advised (``namespace/name``), named in the log line."""
        with self._cache.lock:
            if self._cache.advised.get(advice.gang) == advice.line:
                return
            new_verdict = self._cache.verdicts.get(advice.gang) != advice.verdict
            self._cache.advised[advice.gang] = advice.line
            self._cache.verdicts[advice.gang] = advice.verdict
            siblings = {g: line for g, (ref, line) in self._cache.states.items()
                        if g != advice.gang and ref == owner.ref}
        event, _ = advisory.advice_writes(advice, owner, siblings)
        log.info("%s%s", "" if kueue is None else f"Kueue Workload {kueue}: ", advice.line)
        if new_verdict:
            self._events.record(event)
        self._owner_states.write(advice.gang, owner, advice.line)

    def advise_kueue(self, key: str, workload: Mapping[str, Any]) -> None:
        """The second opinion on every gang of the pending Kueue Workload queued as ``key``
        (:func:`webhook.controller.advisory.advise_owner` on its top owner, which has no pod yet),
        each written (one Event, the owner's annotation) when its line changed. A Workload whose
        top owner cannot be read gets none (logged)."""
        owner = self._owners.top_owner(workload)
        if owner is None:
            log.info("Kueue Workload %s is pending, but its top owner workload cannot be read: no second opinion",
                     key[len(KUEUE_KEY):])
            return
        advices = advisory.advise_owner(owner.obj, self.snapshot(), {}, self._settings.default_topology,
                                        index_for=self.index_for, expansions=self.expansions)
        self._metrics.passes.inc()
        for advice in advices:
            with self._cache.lock:
                if key not in self._cache.kueue_pending:  # admitted meanwhile: its opinion is moot
                    return
                self._cache.kueue_gangs[advice.gang] = key
            self._write(advice, owner, key[len(KUEUE_KEY):])


class AdvisoryController(Controller):
    """``controller --advise``: a :class:`~webhook.controller.runner.Controller` (same cache, queue,
    Lease, metrics) whose reconcile of a gang is :meth:`Advisor.advise` and whose resync queues the
    pending gangs; it never places, releases, deletes or creates Workload API objects. ``settings``
    must have ``advise`` set (the cache then queues pending gangs)."""

    def __init__(self, api_client: Any, settings: ControllerSettings, **kwargs: Any) -> None:
        if not settings.advise:
            raise ValueError("AdvisoryController needs ControllerSettings(advise=True)")
        super().__init__(api_client, settings, **kwargs)
        assert isinstance(self.cache, AdvisoryCache)
        self.advisor = Advisor(self.cache, self.owners, self.events, self._owner_states, settings, self.metrics)

    def _queue_all(self) -> None:
        self._queue_gangs(self.advisor.pending_gangs())

    def reconcile(self, key: str) -> None:
        """The second opinion on gang ``key`` (:meth:`Advisor.advise`)."""
        self.advisor.advise(key)
