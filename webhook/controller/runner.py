"""The live controller (DESIGN.md §9): informers → a work queue of gangs → one reconcile per gang.

The shape of controller-runtime and Kueue's TopologyUngater, with the ``kubernetes`` client's
pieces where it has them:

* **Informers.** Pods (all namespaces) and nodes: ``kubernetes.informer.SharedInformer`` with a
  list function that hands plain dicts to it (:class:`webhook.cluster.informers.DictLister`).
  Topologies: the same :class:`webhook.cluster.topology_cache.LiveTopologyCatalog` that ``serve``
  uses (one Topology watch, one "404 means no CRD" path, DESIGN.md §10), through its listener.
  The event handlers keep the controller's own view up to date under one lock: each gang's pods
  (keyed by :func:`webhook.controller.decision.gang_key_of`) and the one
  :class:`webhook.placement.occupancy.CapacityLedger` (every pod charged where
  :func:`~webhook.placement.occupancy.occupied_node` says; node heartbeats that do not change the
  engine's view of a node change nothing).
* **Work queue** (:mod:`webhook.controller.workqueue`, client-go's): a pod event queues its gang
  while the gang has gated pods (a key queued twice is reconciled once; a key re-added while it is
  reconciled is reconciled again after). Capacity given back (a pod deleted or terminated) queues
  the gangs waiting for capacity; a node or Topology change queues every waiting gang — each not
  before its back-off: after a gang could not be placed, its next attempt waits
  ``retry_initial * 2**n`` seconds up to ``retry_max`` (client-go's
  ``ItemExponentialFailureRateLimiter``; reset when it is placed). Every ``resync`` seconds every
  gang with gated pods is queued again (a safety net).
* **Reconcile** (one gang): under the lock, :func:`webhook.controller.decision.decide_gang` — the
  same per-gang step ``controller --once`` runs — decides on the ledger and, when it places the
  gang, charges every release to the ledger as *assumed* before any patch is sent (as
  kube-scheduler's assume), so reconciles of gangs competing for the same nodes never double-book.
  Then the patches are sent concurrently (``patch_concurrency`` at once, shared by all workers);
  each accepted patch's answer becomes this process's view of the pod until the informer shows
  the update. A gang left gated gets one Warning Event per pod per new reason
  (``PlacementNeverFits``: it cannot fit even on the empty cluster; ``PlacementInfeasible``:
  waiting for capacity; ``GangInvalid``) and the gauges are set from the recorded outcomes.
* **Patch errors**: 404 (pod deleted while gated) → dropped; 409 / 422 / 5xx / connection errors
  → the pod is read again and, while still gated, the patch is rebuilt for the same node and
  resent, up to :data:`PATCH_ATTEMPTS` times with back-off; after that the assumed capacity is
  given back and the gang is queued again rate-limited, to be finished around the pods already
  released. Nothing raises out of a worker.
* **Leader election**: ``kubernetes.leaderelection`` with the library's own ``LeaseLock`` (no
  subclass): only the holder reconciles; the others keep their caches warm. See
  :meth:`Controller._elect_loop` for how it stops.
* **API server unreachable**: every request of the process reports to one
  :class:`webhook.cluster.api_server.ApiServerReachability` (:attr:`Controller.reachability`):
  one WARNING line naming the server and the cause when an outage starts, a reminder each minute,
  one INFO line when it answers again; the informers retry with back-off (0.5 s doubling to
  30 s) and watch again from their last resourceVersion, the election from ``retry_period``
  doubling to 30 s.
* **Topology findings** (DESIGN.md §12): queued (key :data:`TOPOLOGY_FINDINGS`) when a Topology
  changes, on leadership and on resync: for every Topology whose levels were not checked yet, one
  warning per :func:`webhook.core.topology_infer.check` finding on the cached nodes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException
from kubernetes.informer import ADDED, BOOKMARK, DELETED, ERROR, MODIFIED, SharedInformer
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.cluster.api_server import ApiServerReachability, Backoff
from webhook.cluster.informers import CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS, DictLister
from webhook.cluster.topology_cache import LiveTopologyCatalog
from webhook.controller.decision import (
    INCOMPLETE,
    INFEASIBLE,
    INVALID,
    NEVER_FITS,
    ParseCache,
    Release,
    Waiting,
    decide_gang,
    gang_key_of,
    pod_ref,
)
from webhook.controller.settings import ControllerSettings
from webhook.controller.workqueue import ExponentialRateLimiter, ShutDown, WorkQueue
from webhook.core import gating, topology_infer
from webhook.placement.occupancy import CapacityLedger, is_terminated, occupied_node
from webhook.placement.quantity import QuantityError
from webhook.placement.snapshot import SnapshotError, parse_node, pod_requests_milli

__all__ = ["COMPONENT", "Controller", "ControllerSettings", "Metrics", "PATCH_ATTEMPTS"]

log = logging.getLogger(__name__)

COMPONENT = "segment-webhook-controller"
#: How often a patch is sent for one pod before the gang is queued again, rate limited.
PATCH_ATTEMPTS = 5
#: Event reasons, by the kind of a gang left gated.
EVENT_REASONS = {NEVER_FITS: "PlacementNeverFits", INFEASIBLE: "PlacementInfeasible", INVALID: "GangInvalid"}
WAITING_KINDS = (INCOMPLETE, INFEASIBLE, NEVER_FITS, INVALID)
#: The work-queue key of "check the Topologies against the nodes" (DESIGN.md §12); gang keys hold a "/".
TOPOLOGY_FINDINGS = "topology-findings"
#: Read timeout of the request that gives the Lease up when the controller stops, seconds.
LEASE_GIVE_UP_SECONDS = 5.0
#: Back-off of the pod and node informers (and of the Lease while the API server cannot be reached),
#: seconds: client-go's reflector waits 0.8 s doubling to 30 s and starts again after 2 minutes
#: without a failure (``k8s.io/client-go/tools/cache/reflector.go``).
INFORMER_BACKOFF_INITIAL = 0.5
INFORMER_BACKOFF_MAX = 30.0
BACKOFF_RESET_SECONDS = 120.0


class Metrics:
    """The controller's Prometheus metrics, in their own registry (``registry``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.waiting = Gauge("segment_controller_gangs_waiting", "Gangs left gated, by why (incomplete, infeasible: "
                             "waiting for capacity, never-fits: not even on the empty cluster, invalid)",
                             ["kind"], registry=self.registry)
        self.placed = Counter("segment_controller_gangs_placed", "Gangs placed and released",
                              registry=self.registry)
        self.infeasible = Gauge("segment_controller_gangs_infeasible",
                                "Complete gangs the engine could not place (waiting for capacity or never fitting)",
                                registry=self.registry)
        self.never_fit = Gauge("segment_controller_gangs_never_fit",
                               "Complete gangs that cannot be placed even on the empty cluster (every node free)",
                               registry=self.registry)
        self.release_seconds = Histogram(
            "segment_controller_release_seconds", "Seconds from the creation of a gang's last pod to its release",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800), registry=self.registry)
        self.patch_errors = Counter("segment_controller_patch_errors", "Release patches that failed, by HTTP status",
                                    ["code"], registry=self.registry)
        self.leader = Gauge("segment_controller_leader", "1 while this process holds the Lease",
                            registry=self.registry)
        self.passes = Counter("segment_controller_passes", "Gang reconciles run", registry=self.registry)
        for kind in WAITING_KINDS:
            self.waiting.labels(kind=kind).set(0)


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _age_seconds(timestamp: str) -> float | None:
    try:
        created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return max(0.0, (datetime.now(timezone.utc) - created).total_seconds())


def _requests_or_none(pod: Mapping[str, Any]) -> dict[str, int] | None:
    spec = pod.get("spec")
    try:
        return pod_requests_milli(spec if isinstance(spec, Mapping) else {}, "spec")
    except QuantityError as exc:
        log.warning("pod %s: %s; not charged to its node (fix the pod)", "/".join(pod_ref(pod)), exc)
        return None


class _Stopping(Exception):
    """Raised by the leading callback when the controller stops: the library then stops renewing."""


class Controller:
    """One controller process (module docstring).

    ``api_client``: a configured ``kubernetes.client.ApiClient``. ``settings``:
    :class:`ControllerSettings` (``ValueError`` from its ``check``). ``metrics``: a
    :class:`Metrics` (a fresh one by default). ``elect``: False reconciles without a Lease (tests
    of the loop alone). Start with :meth:`start`; stop with :meth:`stop`.
    """

    def __init__(self, api_client: k8s_client.ApiClient, settings: ControllerSettings, *,
                 metrics: Metrics | None = None, elect: bool = True):
        settings.check()
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._api = api_client
        self._core = k8s_client.CoreV1Api(api_client)
        self._elect = elect
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._renewing = threading.Event()  # set while the library renews the Lease for this process
        # set while the library does not renew the Lease for this process: cleared when it starts
        # leading, set once it stopped (and, when stopping, once the Lease was given up)
        self._not_renewing = threading.Event()
        self._not_renewing.set()
        self._lease: LeaseLock | None = None
        self._lock = threading.Lock()  # the view below: gangs, ledger, outcomes
        self._gangs: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
        self._ledger = CapacityLedger()
        self._outcomes: dict[str, Waiting] = {}  # gangs left gated, by key
        self._not_before: dict[str, float] = {}  # gang -> monotonic time of its next attempt (back-off)
        self._ungated: set[tuple[str, str]] = set()  # gang pods known released (seen, or our patch accepted)
        self._reported: dict[str, tuple[str, str]] = {}  # gang -> (kind, reason) of its last Events
        self._bad_nodes: set[tuple[str, str]] = set()  # (name, resourceVersion) of malformed nodes logged
        self._checked_topologies: set[tuple[str, tuple[str, ...]]] = set()  # (name, levels) checked (§12)
        self._listed: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._queue = WorkQueue(ExponentialRateLimiter(settings.retry_initial, settings.retry_max))
        self._patches = ThreadPoolExecutor(settings.patch_concurrency, thread_name_prefix="release-patch")
        self.reachability = ApiServerReachability(api_client.configuration.host)
        """The outage log of the API server, shared by every request of this process."""
        self.topologies = LiveTopologyCatalog(api_client, reachability=self.reachability)
        self.topologies.add_listener(self._topologies_changed)
        methods = {"pods": self._core.list_pod_for_all_namespaces, "nodes": self._core.list_node}
        handlers = {"pods": self._on_pod, "nodes": self._on_node}
        self._informers: dict[str, SharedInformer] = {}
        for name, method in methods.items():
            backoff = Backoff(initial=INFORMER_BACKOFF_INITIAL, maximum=INFORMER_BACKOFF_MAX,
                              reset_after=BACKOFF_RESET_SECONDS)
            informer = SharedInformer(DictLister(method, name, lambda name=name: self._synced(name), self._stop,
                                                 reachability=self.reachability, backoff=backoff))
            self._informers[name] = informer
            for event in (ADDED, MODIFIED, DELETED):
                informer.add_event_handler(event, self._handler(handlers[name], event, backoff))
            informer.add_event_handler(BOOKMARK, lambda _obj, b=backoff: b.reset())
            informer.add_event_handler(ERROR, self._on_error(name, backoff))

    # ------------------------------------------------------------------ informer callbacks
    def _synced(self, name: str) -> None:
        self._listed.add(name)

    def _handler(self, handle: Callable[[str, Mapping[str, Any]], None], event: str,
                 backoff: Backoff) -> Callable[[Any], None]:
        def on_event(obj: Any) -> None:
            backoff.reset()
            if isinstance(obj, Mapping) and not self._stop.is_set():
                handle(event, obj)
        return on_event

    def _on_error(self, name: str, backoff: Backoff) -> Callable[[Any], None]:
        """The informer's ``ERROR`` handler (its thread: the wait delays its reconnect). A watch
        that broke for want of a connection goes to the outage log; after :meth:`stop` (whose
        socket shutdown ends the watch with such an error) nothing is logged."""
        def handle(error: Any) -> None:
            if self._stop.is_set():
                return
            delay = backoff.next_delay()
            if not (isinstance(error, BaseException) and self.reachability.failed(f"watch {name}", error)):
                log.warning("%s informer: %s; watching again in %.2fs", name, error, delay)
            self._stop.wait(delay)
        return handle

    def _on_pod(self, event: str, pod: Mapping[str, Any]) -> None:
        """Keep the gang's pods and the ledger current; queue what this change may unblock."""
        ref = pod_ref(pod)
        key = gang_key_of(pod)
        gone = event == DELETED or is_terminated(pod)
        gated = gating.is_gated(pod)
        with self._lock:
            if not gone and gated and ref in self._ungated:
                # an older version replayed (a watch resumed from an old resourceVersion, or seen
                # before this process's accepted patch): a gate is never added back (KEP-3838)
                return
            if gone:
                self._ungated.discard(ref)
            elif not gated and key is not None:
                self._ungated.add(ref)
            if gone:
                freed = self._ledger.remove(ref)
            else:
                node = occupied_node(pod)
                freed = self._ledger.observe(ref, node, _requests_or_none(pod) if node else None)
            members = self._gangs.get(key) if key is not None else None
            if key is not None:
                if gone:
                    if members is not None:
                        members.pop(ref, None)
                        if not members:
                            del self._gangs[key]
                            self._gang_left(key)
                else:
                    members = self._gangs.setdefault(key, {})
                    members[ref] = pod
            queue_own = key is not None and key in self._gangs and \
                (key in self._outcomes or any(gating.is_gated(p) for p in self._gangs[key].values()))
            waiting = [g for g, w in self._outcomes.items() if w.kind == INFEASIBLE] if freed else []
        if queue_own:
            self._queue_gang(key)
        for gang in waiting:
            self._queue_gang(gang)

    def _on_node(self, event: str, obj: Mapping[str, Any]) -> None:
        """A node's engine view changed (not a heartbeat): every waiting gang may fit now."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        name = str(meta.get("name") or "")
        if event == DELETED:
            with self._lock:
                changed = self._ledger.remove_node(name)
        else:
            try:
                node = parse_node(obj)
            except SnapshotError as exc:
                seen = (name, str(meta.get("resourceVersion") or ""))
                if seen not in self._bad_nodes:
                    self._bad_nodes.add(seen)
                    log.warning("malformed node left out of placement (fix it; the other nodes are used): %s", exc)
                with self._lock:
                    changed = self._ledger.remove_node(name)
            else:
                with self._lock:
                    changed = self._ledger.set_node(node)
        if changed:
            self._queue_waiting(lambda w: w.kind != INCOMPLETE)

    def _topologies_changed(self) -> None:
        self._queue.add(TOPOLOGY_FINDINGS)
        self._queue_waiting(lambda w: True)

    def _queue_waiting(self, which: Callable[[Waiting], bool]) -> None:
        with self._lock:
            gangs = [g for g, w in self._outcomes.items() if which(w)]
        for gang in gangs:
            self._queue_gang(gang)

    def _queue_gang(self, key: str) -> None:
        """Queue ``key`` now, or when its back-off ends."""
        with self._lock:
            at = self._not_before.get(key)
        self._queue.add_after(key, at - time.monotonic()) if at is not None else self._queue.add(key)

    def _queue_all(self) -> None:
        """Queue every gang that has gated pods and the Topology check (leadership gained, resync)."""
        self._queue.add(TOPOLOGY_FINDINGS)
        with self._lock:
            gangs = [k for k, pods in self._gangs.items() if any(gating.is_gated(p) for p in pods.values())]
        for gang in gangs:
            self._queue_gang(gang)

    def _gang_left(self, key: str) -> None:
        """Forget a gang that has no pods any more (called with the lock held)."""
        self._outcomes.pop(key, None)
        self._not_before.pop(key, None)
        self._reported.pop(key, None)
        self._queue.forget(key)
        self._set_gauges()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Controller:
        """Start the informers, the leader election (unless ``elect=False``), the workers and the resync."""
        self.topologies.start()
        for informer in self._informers.values():
            informer.start()
        if self._elect:
            self._spawn(self._elect_loop, "leader-election")
        else:
            self._started_leading()
        for i in range(self.settings.workers):
            self._spawn(self._work, f"reconcile-{i}")
        self._spawn(self._resync, "resync")
        return self

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop the workers and the informers, give the Lease up when holding it."""
        self._stop.set()
        self._queue.shut_down()
        for thread in self._threads:
            if thread.name.startswith("reconcile-"):
                thread.join(5)
        # the informers next: once stopped, their list functions answer at once without a request,
        # and the informers' loops must end rather than call them again
        for informer in self._informers.values():
            informer.stop()
        self.topologies.stop()
        self._leading.clear()
        self.metrics.leader.set(0)
        # the library renews until our leading callback has raised and its loop noticed (at most one
        # retry period; giving the Lease up before would be undone by a renewal), then the election
        # thread gives it up (_stopped_leading): wait for that, so that the process does not exit
        # while the request is under way (a daemon thread woken in the interpreter's finalization
        # aborts the process: exit -6 instead of 0)
        if self._elect and not self._not_renewing.wait(self.settings.retry_period * 2 + 1 + LEASE_GIVE_UP_SECONDS):
            self._give_up_lease()
        self._patches.shutdown(wait=False, cancel_futures=True)

    @property
    def leading(self) -> bool:
        """True while this process holds the Lease (always, with ``elect=False``)."""
        return self._leading.is_set()

    @property
    def synced(self) -> bool:
        """True once pods and nodes were each listed once and the Topology catalog is known."""
        return len(self._listed) == len(self._informers) and self.topologies.synced

    def knows_node(self, name: str) -> bool:
        """True when node ``name`` is in the controller's capacity ledger (listed or watched, well formed)."""
        with self._lock:
            return self._ledger.has_node(name)

    def idle(self) -> bool:
        """True when no gang is queued, delayed or being reconciled."""
        return self._queue.idle()

    # ------------------------------------------------------------------ leader election
    def _elect_loop(self) -> None:
        """Run the library's election until stopped.

        The library's ``LeaderElection.run`` has no stop: its follower loop retries forever and its
        renew loop ends only when a renewal fails or the leading callback raises. So the leading
        callback (:meth:`_lead`) blocks until :meth:`stop`, then raises :class:`_Stopping`: the
        library stops renewing and calls back :meth:`_stopped_leading`, after which :meth:`stop`
        gives the Lease up (as client-go's ``ReleaseOnCancel``). A stopped follower's thread keeps
        polling until the process exits (it is a daemon); if it acquires the Lease meanwhile,
        :meth:`_lead` raises at once and the Lease is given up again. The lock is the library's
        ``LeaseLock`` itself; only its ``api_instance`` is set to this process's API client.

        The library's ``LeaseLock`` catches only HTTP errors: a Lease request that cannot reach the
        API server raises out of ``run``. That failure goes to the outage log
        (:attr:`reachability`: one line per outage, not a traceback per attempt) and the election
        runs again after a back-off from ``retry_period`` doubling to 30 s (each run logs the
        library's "is a follower" line); any other error is logged with its traceback and retried
        after ``retry_period``.
        """
        s = self.settings
        backoff = Backoff(initial=s.retry_period, maximum=max(float(s.retry_period), INFORMER_BACKOFF_MAX),
                          reset_after=BACKOFF_RESET_SECONDS)
        while not self._stop.is_set():
            lock = LeaseLock(s.lease_name, s.lease_namespace, s.identity)
            lock.api_instance = k8s_client.CoordinationV1Api(self._api)
            self._lease = lock
            config = electionconfig.Config(lock, s.lease_duration, s.renew_deadline, s.retry_period,
                                           self._lead, self._stopped_leading)
            delay: float = s.retry_period
            try:
                leaderelection.LeaderElection(config).run()
            except Exception as exc:
                if self._stop.is_set():
                    delay = 0.0  # an error of the last renewal: nothing to report, and no retry
                elif self.reachability.failed(self._lease_request, exc):
                    delay = backoff.next_delay()
                else:
                    log.exception("leader election failed; retrying")
            self._stopped_leading()
            self._stop.wait(delay)

    @property
    def _lease_request(self) -> str:
        """The Lease's requests in the outage log: ``Lease NAMESPACE/NAME``."""
        return f"Lease {self.settings.lease_namespace}/{self.settings.lease_name}"

    def _lead(self) -> None:
        """The library's ``onstarted_leading`` (its own thread): lead until :meth:`stop`."""
        self.reachability.answered(self._lease_request)
        self._renewing.set()
        self._not_renewing.clear()
        if not self._stop.is_set():
            self._started_leading()
            self._stop.wait()
        raise _Stopping(f"{self.settings.identity} stops: the Lease is given up")

    def _started_leading(self) -> None:
        log.info("%s holds Lease %s/%s", self.settings.identity, self.settings.lease_namespace, self.settings.lease_name)
        self._leading.set()
        self.metrics.leader.set(1)
        self._queue_all()

    def _stopped_leading(self) -> None:
        if self._leading.is_set() and not self._stop.is_set():
            log.warning("%s lost Lease %s/%s; reconciles stop", self.settings.identity,
                        self.settings.lease_namespace, self.settings.lease_name)
        self._leading.clear()
        self.metrics.leader.set(0)
        if self._renewing.is_set():
            self._renewing.clear()
            if self._stop.is_set():
                self._give_up_lease()
            self._not_renewing.set()

    def _give_up_lease(self) -> None:
        """Clear ``holderIdentity`` if this process holds the Lease (best effort, as client-go's
        ``ReleaseOnCancel``; a failure is one warning line). The Lease is read again first: the
        library's ``LeaseLock.update`` does not keep the server's answer to a renewal, so its
        ``lease_reference`` carries the resourceVersion from before the last renewal, and a
        replace with it is refused (409 Conflict)."""
        lock = self._lease
        known = lock.lease_reference if lock is not None else None
        if known is None or known.spec is None or known.spec.holder_identity != self.settings.identity:
            return
        timeout = (CONNECT_TIMEOUT_SECONDS, LEASE_GIVE_UP_SECONDS)
        where = f"{lock.namespace}/{lock.name}"
        try:
            lease = lock.api_instance.read_namespaced_lease(lock.name, lock.namespace, _request_timeout=timeout)
            if lease.spec is None or lease.spec.holder_identity != self.settings.identity:
                return
            lease.spec.holder_identity = None
            lock.api_instance.replace_namespaced_lease(name=lock.name, namespace=lock.namespace, body=lease,
                                                       _request_timeout=timeout)
            log.info("%s gave up Lease %s", self.settings.identity, where)
        except ApiException as exc:
            log.warning("could not give up Lease %s: HTTP %s %s", where, exc.status, exc.reason)
        except Exception as exc:  # noqa: BLE001
            if not self.reachability.failed(f"give up Lease {where}", exc):
                log.warning("could not give up Lease %s: %s", where, exc)

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
                        self.reconcile(key)
            except Exception:
                log.exception("reconcile of gang %s failed; retried with back-off", key)
                self._queue.add_rate_limited(key)
            finally:
                self._queue.done(key)

    def reconcile(self, key: str) -> None:
        """Reconcile one gang (module docstring): decide under the lock (charging the releases as
        assumed), record the outcome, post Events, send the patches."""
        catalog = {name: self.topologies.get(name) for name in self.topologies.names()}
        with self._lock:
            pods = list(self._gangs.get(key, {}).values())
            decision = decide_gang(key, pods, self._ledger, catalog, self.settings.default_topology, ParseCache())
            self.metrics.passes.inc()
            waiting = decision.waiting
            if waiting is None:
                self._outcomes.pop(key, None)
                self._not_before.pop(key, None)
                self._queue.forget(key)
            else:
                self._outcomes[key] = waiting
                if waiting.kind in (INFEASIBLE, NEVER_FITS):
                    self._not_before[key] = time.monotonic() + self._queue.rate_limiter.when(key)
            self._set_gauges()
            report = waiting is not None and waiting.kind in EVENT_REASONS and \
                self._reported.get(key) != (waiting.kind, waiting.reason)
            if report:
                self._reported[key] = (waiting.kind, waiting.reason)
            elif waiting is None:
                self._reported.pop(key, None)
            uids = {pod_ref(p): str((p.get("metadata") or {}).get("uid") or "") for p in pods}
        if report:
            log.info("gang %s stays gated (%s): %s", key, waiting.kind, waiting.reason)
            for namespace, name in waiting.pods:
                self._event(namespace, name, uids.get((namespace, name), ""), EVENT_REASONS[waiting.kind],
                            f"gang {key}: {waiting.reason}")
        if decision.releases:
            self._send(key, decision)

    def _send(self, key: str, decision: Any) -> None:
        """Send a placed gang's patches concurrently; count it placed when all were accepted."""
        futures = [self._patches.submit(self._release, release) for release in decision.releases]
        accepted = 0
        for release, future in zip(decision.releases, futures):
            updated = future.result()
            ref = (release.namespace, release.name)
            with self._lock:
                if updated is None:
                    self._ledger.forget(ref)  # not released: its capacity is free again
                    continue
                accepted += 1
                members = self._gangs.get(key)
                self._ungated.add(ref)
                if members is not None and ref in members and gating.is_gated(members[ref]):
                    members[ref] = updated  # this process's view until the informer shows the update
                    node = occupied_node(updated)
                    if node is not None:
                        self._ledger.observe(ref, node, _requests_or_none(updated))
        if accepted == len(decision.releases):
            placed = decision.placed
            self.metrics.placed.inc()
            age = _age_seconds(placed.last_created)
            if age is not None:
                self.metrics.release_seconds.observe(age)
            log.info("placed gang %s (%d pods) at %s", placed.gang, placed.pods, placed.domain)
        else:
            log.warning("gang %s: %d of %d releases accepted; finishing it later", key, accepted,
                        len(decision.releases))
            self._queue.add_rate_limited(key)

    def _set_gauges(self) -> None:
        """The gauges from the recorded outcomes (called with the lock held)."""
        counts = dict.fromkeys(WAITING_KINDS, 0)
        for waiting in self._outcomes.values():
            counts[waiting.kind] = counts.get(waiting.kind, 0) + 1
        for kind, count in counts.items():
            self.metrics.waiting.labels(kind=kind).set(count)
        self.metrics.infeasible.set(counts[INFEASIBLE] + counts[NEVER_FITS])
        self.metrics.never_fit.set(counts[NEVER_FITS])

    def log_topology_findings(self) -> None:
        """Log the DESIGN.md §12 findings of each known Topology on the cached nodes (one warning
        line per finding, :func:`webhook.core.topology_infer.check`), once per Topology name and
        levels: a Topology's change is checked again, a node's change alone is not."""
        topologies = [self.topologies.get(name) for name in self.topologies.names()]
        live = {(t.name, tuple(t.levels)) for t in topologies if t is not None}
        new = live - self._checked_topologies
        self._checked_topologies = live
        if not new:
            return
        node_labels = []
        for node in self._informers["nodes"].cache.list():
            try:
                node_labels.append(topology_infer.node_labels_of(node))
            except topology_infer.NodeLabelError:
                continue  # logged by the node handler
        for name, levels in sorted(new):
            for finding in topology_infer.check(levels, node_labels, name):
                log.warning("%s", finding.text().replace("\n  ", "; "))

    # ------------------------------------------------------------------ API calls
    def _release(self, release: Release) -> dict[str, Any] | None:
        """Send one release patch; on 409/422/5xx re-read the pod and resend (module docstring).
        Returns the pod as the API answered the accepted patch, ``None`` when not released."""
        patch = release.patch
        backoff = Backoff(initial=0.05, maximum=1.0)
        for attempt in range(PATCH_ATTEMPTS):
            try:
                response = self._core.patch_namespaced_pod(
                    release.name, release.namespace, patch, _preload_content=False,
                    _content_type="application/json-patch+json",
                    _request_timeout=(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS))
                try:
                    updated = json.loads(response.data)
                finally:
                    response.release_conn()
                log.debug("released %s/%s to %s", release.namespace, release.name, release.node)
                self.reachability.answered(f"patch pod {release.namespace}/{release.name}")
                return updated if isinstance(updated, dict) else {}
            except ApiException as exc:
                self.reachability.answered(f"patch pod {release.namespace}/{release.name}")
                self.metrics.patch_errors.labels(code=str(exc.status)).inc()
                if exc.status == 404:
                    log.info("pod %s/%s was deleted while gated; skipped", release.namespace, release.name)
                    return None
                log.warning("release of %s/%s to %s: HTTP %s %s (attempt %d)", release.namespace, release.name,
                            release.node, exc.status, exc.reason, attempt + 1)
            except Exception as exc:  # noqa: BLE001 - connection errors (the outage log), timeouts
                self.metrics.patch_errors.labels(code="error").inc()
                if not self.reachability.failed(f"patch pod {release.namespace}/{release.name}", exc):
                    log.warning("release of %s/%s: %s (attempt %d)", release.namespace, release.name, exc, attempt + 1)
            if self._stop.wait(backoff.next_delay()):
                return None
            fresh = self._read_pod(release.namespace, release.name)
            if fresh is None:
                return None
            if not gating.is_gated(fresh):
                log.info("pod %s/%s was released meanwhile; nothing to send", release.namespace, release.name)
                return None
            try:
                patch = gating.release_patch(fresh, release.node)
            except ValueError as exc:
                log.warning("pod %s/%s: %s; left to the next reconcile", release.namespace, release.name, exc)
                return None
        return None

    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = self._core.read_namespaced_pod(name, namespace, _preload_content=False,
                                                      _request_timeout=(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS))
            try:
                pod = json.loads(response.data)
            finally:
                response.release_conn()
            self.reachability.answered(f"read pod {namespace}/{name}")
            return pod
        except ApiException as exc:
            self.reachability.answered(f"read pod {namespace}/{name}")
            if exc.status != 404:
                log.warning("reading pod %s/%s: HTTP %s", namespace, name, exc.status)
            return None
        except Exception as exc:  # noqa: BLE001
            if not self.reachability.failed(f"read pod {namespace}/{name}", exc):
                log.warning("reading pod %s/%s: %s", namespace, name, exc)
            return None

    def _event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        """Post a Warning Event on a pod (best effort: failures are logged). The pod's ``uid`` is
        part of ``involvedObject``: ``kubectl describe pod`` selects Events by it."""
        now = _now_rfc3339()
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
            "reason": reason, "message": message[:1024], "type": "Warning",
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": self.settings.identity,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            response = self._core.create_namespaced_event(namespace, body, _preload_content=False,
                                                          _request_timeout=(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS))
            response.release_conn()
            self.reachability.answered(f"post Event on pod {namespace}/{name}")
        except Exception as exc:  # noqa: BLE001
            if not self.reachability.failed(f"post Event on pod {namespace}/{name}", exc):
                log.warning("event on pod %s/%s not posted: %s", namespace, name, exc)
