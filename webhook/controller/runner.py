"""The live controller's runner (DESIGN.md §9): the work queue of gangs, the workers that reconcile
them, and the adapters that carry out what a reconcile decided — controller-runtime's controller
(``pkg/internal/controller/controller.go``: ``processNextWorkItem`` / ``reconcileHandler``) with
its leader election, event recorder and client.

The three parts:

* the **cache** (:mod:`webhook.controller.cache`): informers, each gang's pods, the capacity ledger;
* the **reconcile** (:mod:`webhook.gating.reconcile`): pure, one gang in, a ``Result`` out;
* this **runner**: a :class:`~webhook.controller.workqueue.WorkQueue` (client-go's: a key queued
  twice is reconciled once; a key re-added while reconciled is reconciled again after), ``workers``
  threads, the leader election adapter (:mod:`webhook.controller.election`: only the holder
  reconciles; the others keep their caches warm), the patch sender (:mod:`webhook.controller.patches`)
  and the event recorder (:mod:`webhook.controller.events`), the owner reader
  (:mod:`webhook.controller.owners`) and the metrics.

One reconcile: the gang's top owner is read (cached), the reconcile runs on the cache under its
lock and its releases are charged there as assumed before any patch is sent; then the patches are
sent concurrently (``patch_concurrency`` at once, shared by all workers); once every one was
accepted (or when there were none) the Events are written and the owner's annotation patched.
A release refused after its retries gives its capacity back and queues the gang again, rate limited,
to be finished around the pods already released. A gang waiting for capacity or never fitting is
attempted again, when something changes, not before its back-off (``retry_initial * 2**n`` up to
``retry_max``; reset when placed); an incomplete gang in its grace period is queued again when the
grace ends. Every ``resync`` seconds every gang with gated pods is queued again (a safety net).
Nothing raises out of a worker.

**API server unreachable**: every request of the process reports to one
:class:`webhook.cluster.api_server.ApiServerReachability` (:attr:`Controller.reachability`): one
WARNING line when an outage starts, a reminder each minute, one INFO line when it answers again.

**Topology findings** (DESIGN.md §12): queued (key :data:`TOPOLOGY_FINDINGS`) when a Topology
changes, on leadership and on resync: for every Topology whose levels were not checked yet, one
warning per :func:`webhook.topology.infer.check` finding on the cached nodes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from kubernetes import client as k8s_client

from webhook.cluster.api_server import ApiServerReachability, JsonClient
from webhook.controller.cache import AdvisoryCache, ControllerCache
from webhook.controller.election import LeaderElector
from webhook.controller.events import EventRecorder
from webhook.controller.gang_metrics import Metrics
from webhook.controller.owners import OwnerResolver
from webhook.controller.patches import PATCH_ATTEMPTS, PatchSender
from webhook.controller.podgroups import reconcile_groups
from webhook.controller.settings import ControllerSettings
from webhook.controller.workload_objects import CREATED, KEPT, WorkloadObjectWriter
from webhook.controller.workqueue import ExponentialRateLimiter, ShutDown, WorkQueue
from webhook.gating.reconcile import Result, TopOwner, owner_patch
from webhook.topology import infer as topology_infer

__all__ = ["COMPONENT", "Controller", "ControllerSettings", "Metrics", "PATCH_ATTEMPTS", "TOPOLOGY_FINDINGS"]

log = logging.getLogger(__name__)

#: ``source.component`` of the controller's Events and its User-Agent's product.
COMPONENT = "segment-webhook-controller"
#: The work-queue key of "check the Topologies against the nodes" (DESIGN.md §12); gang keys hold a "/".
TOPOLOGY_FINDINGS = "topology-findings"


def _age_seconds(timestamp: str) -> float | None:
    """Seconds since an RFC 3339 ``timestamp``, ``None`` when unreadable."""
    try:
        created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return max(0.0, (datetime.now(timezone.utc) - created).total_seconds())


class Controller:
    """One controller process (module docstring).

    ``api_client``: a configured ``kubernetes.client.ApiClient``. ``settings``:
    :class:`ControllerSettings` (``ValueError`` from its ``check``). ``metrics``: a
    :class:`~webhook.controller.gang_metrics.Metrics` (a fresh one by default). ``elect``: False
    reconciles without a Lease (tests of the loop alone). Start with :meth:`start`; stop with
    :meth:`stop`. The parts: :attr:`cache`, :attr:`patches`, :attr:`events`, :attr:`owners`,
    :attr:`election`.
    """

    def __init__(self, api_client: k8s_client.ApiClient, settings: ControllerSettings, *,
                 metrics: Metrics | None = None, elect: bool = True) -> None:
        settings.check()
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._elect = elect
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._checked_topologies: set[tuple[str, tuple[str, ...]]] = set()  # (name, levels) checked (§12)
        self._queue = WorkQueue(ExponentialRateLimiter(settings.retry_initial, settings.retry_max))
        self._patch_pool = ThreadPoolExecutor(settings.patch_concurrency, thread_name_prefix="release-patch")
        self.reachability = ApiServerReachability(api_client.configuration.host)
        """The outage log of the API server, shared by every request of this process."""
        self.cache = (AdvisoryCache if settings.advise else ControllerCache)(
            api_client, self.reachability, self._stop, self._queue_gangs, self._topologies_changed, self._gang_gone)
        self.topologies = self.cache.topologies
        self.client = JsonClient(api_client, self.reachability)
        """The sender of every single request of this process (reads, patches, creates, deletes, the Lease)."""
        self.patches = PatchSender(self.client, self.metrics.patch_errors, self._stop)
        self.events = EventRecorder(self.client, COMPONENT, settings.identity)
        self.owners = OwnerResolver(self.client)
        self._owner_states = OwnerStateWriter(self.cache, self.patches, self.owners)
        self.workload_objects = WorkloadObjectWriter(self.client)
        self.election = LeaderElector(self.client, settings, self._stop, self._started_leading, self._stopped_leading)

    # ------------------------------------------------------------------ queueing
    def _queue_gangs(self, keys: Iterable[str], first: bool = False) -> None:
        """Queue each gang now (``first``: at the head of the queue), or when its back-off ends."""
        for key in keys:
            at = self._queue.rate_limiter.not_before(key)
            if at is None:
                self._queue.add(key, first)
            else:
                self._queue.add_after(key, at - time.monotonic())

    def _topologies_changed(self) -> None:
        self._queue.add(TOPOLOGY_FINDINGS)
        self._queue_gangs(self.cache.waiting_gangs(lambda kind: True))

    def _gang_gone(self, key: str) -> None:
        self._queue.forget(key)
        self._set_gauges()

    def _queue_all(self) -> None:
        """Queue every gang that has gated pods and the Topology check (leadership gained, resync)."""
        self._queue.add(TOPOLOGY_FINDINGS)
        self._queue_gangs(self.cache.gated_gangs() + self.cache.grouping_gangs())

    def _set_gauges(self) -> None:
        with self.cache.lock:
            kinds = dict(self.cache.kinds)
        self.metrics.set_waiting(kinds)

    def _started_leading(self) -> None:
        self.metrics.leader.set(1)
        self._queue_all()

    def _stopped_leading(self) -> None:
        self.metrics.leader.set(0)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Controller:
        """Start the cache, the leader election (unless ``elect=False``), the workers and the resync."""
        self.cache.start()
        if self._elect:
            self._spawn(self.election.run, "leader-election")
        else:
            self.election.lead_without_lease()
        for i in range(self.settings.workers):
            self._spawn(self._work, f"reconcile-{i}")
        self._spawn(self._resync, "resync")
        return self

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop the workers and the cache; give the Lease up when holding it."""
        self._stop.set()
        self._queue.shut_down()
        for thread in self._threads:
            if thread.name.startswith("reconcile-"):
                thread.join(5)
        # the informers next: once stopped, their list functions answer at once without a request,
        # and the informers' loops must end rather than call them again
        self.cache.stop()
        self.election.stopped(self._elect)
        self._patch_pool.shutdown(wait=False, cancel_futures=True)

    @property
    def leading(self) -> bool:
        """True while this process holds the Lease (always, with ``elect=False``)."""
        return self.election.leading

    @property
    def synced(self) -> bool:
        """True once pods and nodes were each listed once and the Topology catalog is known."""
        return self.cache.synced

    def knows_node(self, name: str) -> bool:
        """True when node ``name`` is in the controller's capacity ledger (listed or watched, well formed)."""
        return self.cache.knows_node(name)

    def idle(self) -> bool:
        """True when no gang is queued, delayed or being reconciled."""
        return self._queue.idle()

    # ------------------------------------------------------------------ workers
    def _resync(self) -> None:
        while not self._stop.wait(self.settings.resync):
            if self.leading:
                self._queue_all()

    def _work(self) -> None:
        while True:
            try:
                key = self._queue.get()
            except ShutDown:
                return
            try:
                if self.leading and not self._stop.is_set():
                    if not self.synced:
                        self._queue.add_after(key, 0.1)
                    elif key == TOPOLOGY_FINDINGS:
                        self.log_topology_findings()
                    else:
                        self.reconcile(str(key))
            except Exception:
                log.exception("reconcile of gang %s failed; retried with back-off", key)
                self._queue.add_rate_limited(key)
            finally:
                self._queue.done(key)

    def reconcile(self, key: str) -> None:
        """Reconcile one gang (module docstring): read its owner, reconcile on the cache (charging
        the releases as assumed), send the patches, then write the Events and the owner's state.
        A gang of target ``workload-api`` gets its objects made instead (:meth:`group`)."""
        if self.cache.is_grouping(key):
            self.group(key)
            return
        first = self.cache.first_pod(key)
        owner = self.owners.top_owner(first) if first is not None else None
        result = self.cache.reconcile(key, owner, self.settings.incomplete_grace, self.settings.default_topology,
                                      self._queue.rate_limiter, self.settings.stranded_grace)
        self.metrics.passes.inc()
        self._set_gauges()
        if result.requeue_after is not None:
            self._queue.add_after(key, result.requeue_after)
        if result.releases and not self._send(key, result):
            return
        deleted = [self.patches.delete_stranded(pod) for pod in result.deletions]  # every one, not up to a refusal
        if not all(deleted):
            self._queue.add_rate_limited(key)  # the state is written: the deletion is tried again
        self._write(key, result, owner)

    def group(self, key: str) -> None:
        """Target ``workload-api`` (DESIGN.md §9b): decide the gang's Workload API objects
        (:func:`webhook.controller.podgroups.reconcile_groups`) and create them in order; once each was
        created or exists, the gang is done. A refused or stale one queues the gang again, rate limited."""
        first = self.cache.first_pod(key)
        owner = self.owners.top_owner(first) if first is not None else None
        decision = reconcile_groups(key, self.cache.members(key), owner.ref if owner is not None else None)
        self.metrics.passes.inc()
        if decision.problem:
            log.warning("gang %s: no Workload API objects: %s", key, decision.problem)
            return
        if not decision.create:
            log.debug("gang %s: waiting (%s)", key, decision.waiting)
            return
        if owner is None:
            log.warning("gang %s: top owner not readable; its Workload API objects are created without an owner "
                        "(delete them with the workload)", key)
        for obj in decision.create:
            if self.workload_objects.create(obj) not in (CREATED, KEPT):
                self._queue.add_rate_limited(key)
                return
        self.cache.mark_grouped(key)
        self._queue.forget(key)
        log.info("gang %s: %d Workload API objects in place", key, len(decision.create))

    def _send(self, key: str, result: Result) -> bool:
        """Send a placed gang's patches concurrently; True (and counted placed) when all were accepted."""
        futures = [self._patch_pool.submit(self.patches.release, release) for release in result.releases]
        accepted = 0
        for release, future in zip(result.releases, futures):
            updated = future.result()
            self.cache.release_answered(key, (release.namespace, release.name), updated)
            accepted += updated is not None
        if accepted < len(result.releases):
            log.warning("gang %s: %d of %d releases accepted; finishing it later", key, accepted, len(result.releases))
            self._queue.add_rate_limited(key)
            return False
        placed = result.placed
        self.metrics.placed.inc()
        if placed is not None:
            age = _age_seconds(placed.last_created)
            if age is not None:
                self.metrics.release_seconds.observe(age)
            log.info("placed gang %s (%d pods) at %s", placed.gang, placed.pods, placed.domain)
        return True

    def _write(self, key: str, result: Result, owner: TopOwner | None) -> None:
        """Write the reconcile's Events and the owner's annotation; remember the gang's state line."""
        if not result.state:
            return
        with self.cache.lock:
            before = self.cache.states.get(key, (None, ""))[1]
        if result.state != before and result.waiting is not None:
            log.info("%s", result.state)
        for event in result.events:
            self.events.record(event)
        if owner is None:
            self.cache.record_state(key, None, result.state)
        else:
            self._owner_states.write(key, owner, result.state)

    def log_topology_findings(self) -> None:
        """Log the DESIGN.md §12 findings of each known Topology on the cached nodes (one warning
        line per finding, :func:`webhook.topology.infer.check`), once per Topology name and
        levels: a Topology's change is checked again, a node's change alone is not."""
        topologies = [self.topologies.get(name) for name in self.topologies.names()]
        live = {(t.name, tuple(t.levels)) for t in topologies if t is not None}
        new = live - self._checked_topologies
        self._checked_topologies = live
        if not new:
            return
        node_labels = []
        for node in self.cache.informers["nodes"].cache.list():
            try:
                node_labels.append(topology_infer.node_labels_of(node))
            except topology_infer.NodeLabelError:
                continue  # logged by the node handler
        for name, levels in sorted(new):
            for finding in topology_infer.check(levels, node_labels, name):
                log.warning("%s", finding.text().replace("\n  ", "; "))


class OwnerStateWriter:
    """Writes a top owner's :data:`~webhook.gating.reconcile.GANG_STATE`, which holds the line of
    every gang of that owner (an LWS's groups, a JobSet's replicatedJobs). The gang's line is
    recorded in ``cache``, and the value built from every line of the owner recorded by then and sent
    (``patches``), under one lock per owner: two workers writing gangs of one owner never send a
    value without the other's line, nor an older value last (issue 37: 3 groups, 2 lines)."""

    def __init__(self, cache: ControllerCache, patches: PatchSender, owners: OwnerResolver) -> None:
        self._cache, self._patches, self._owners = cache, patches, owners
        self._locks: dict[str, threading.Lock] = {}  # owner uid -> the lock of its annotation
        self._locks_lock = threading.Lock()
        self._values: dict[str, str] = {}  # owner uid -> the value last accepted

    def write(self, key: str, owner: TopOwner, line: str) -> None:
        """Record gang ``key``'s ``line`` and bring ``owner``'s annotation up to date (best effort)."""
        uid = owner.ref.uid
        with self._locks_lock:
            lock = self._locks.setdefault(uid, threading.Lock())
        with lock:
            self._cache.record_state(key, owner.ref, line)
            states = {**self._cache.owner_states(owner.ref), key: line}  # also when its pods left the cache
            patch = owner_patch(owner, states, self._values.get(uid, owner.annotation))
            if patch is not None and self._patches.annotate_owner(patch):
                self._values[uid] = patch.value
                self._owners.note_annotation(patch.target, patch.value)
