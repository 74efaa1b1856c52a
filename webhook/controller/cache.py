"""The controller's cache (DESIGN.md §9): informers, each gang's pods and the capacity ledger — the
part controller-runtime calls the cache, which every reconcile reads.

* **Informers.** Pods (all namespaces) and nodes: ``kubernetes.informer.SharedInformer`` with a
  list function that hands plain dicts to it (:class:`webhook.cluster.informers.DictLister`;
  back-off 0.5 s doubling to 30 s, as client-go's reflector). Topologies: the same
  :class:`webhook.cluster.topology_cache.LiveTopologyCatalog` that ``serve`` uses.
* **The view**, under one lock: each gang's pods (keyed by
  :func:`webhook.gating.decision.gang_key_of`), the one
  :class:`webhook.placement.occupancy.CapacityLedger` (every pod charged where
  :func:`~webhook.kube.pods.occupied_node` says; node heartbeats that do not change the
  engine's view of a node change nothing), the kind of every gang left gated, and each gang's
  state line and owner (for its siblings' annotation). A gang's back-off deadline is kept in the
  one back-off ledger, the work queue's (:class:`webhook.controller.workqueue.ExponentialRateLimiter`),
  written here when a decision says to back off and forgotten when the gang is placed.
* **What a change queues** (through ``enqueue``): a pod event queues its gang while the gang has
  gated pods or was left gated, or when the pod is stranded (released, pinned, ``Unschedulable``); capacity given back (a pod deleted or terminated) queues the gangs
  waiting for capacity; a node change queues every complete gang left gated; a Topology change
  every gang left gated (and the Topology findings, DESIGN.md §12).
* A replayed older version of a released pod (gated) is ignored: a gate is never added back
  (KEP-3838).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.informer import ADDED, BOOKMARK, DELETED, ERROR, MODIFIED, SharedInformer

from webhook.cluster.api_server import REQUEST_TIMEOUT, ApiServerReachability, Backoff, send_until_answered
from webhook.cluster.informers import DictLister
from webhook.cluster.topology_cache import LiveTopologyCatalog
from webhook.controller.advisory import KUEUE_WORKLOAD_VERSION, kueue_workload_pending, pending_elsewhere
from webhook.controller.podgroups import is_grouped_pod
from webhook.controller.workqueue import ExponentialRateLimiter
from webhook.gating.decision import INCOMPLETE, INFEASIBLE, ParseCache, gang_key_of, pod_ref, stranded_pod
from webhook.gating.reconcile import GangView, ObjectRef, Result, TopOwner, reconcile
from webhook.kube.kueue import KUEUE_GROUP
from webhook.kube.nodes import SnapshotError, parse_node
from webhook.kube.pods import is_gated, is_terminated, occupied_node, pod_requests_milli
from webhook.kube.quantity import QuantityError
from webhook.kube.shapes import Node as NodeObject
from webhook.kube.shapes import Pod
from webhook.placement.occupancy import CapacityLedger
from webhook.topology.objects import Topology

__all__ = ["BACKOFF_RESET_SECONDS", "INFORMER_BACKOFF_INITIAL", "INFORMER_BACKOFF_MAX", "KUEUE_KEY", "AdvisoryCache",
           "ControllerCache"]

log = logging.getLogger(__name__)

#: Back-off of the pod and node informers, seconds: client-go's reflector waits 0.8 s doubling to
#: 30 s and starts again after 2 minutes without a failure (``k8s.io/client-go/tools/cache/reflector.go``).
#: Decisions made on a snapshot without the lock before one is made under it (:meth:`ControllerCache.reconcile`).
OPTIMISTIC_ATTEMPTS = 2

INFORMER_BACKOFF_INITIAL = 0.5
INFORMER_BACKOFF_MAX = 30.0
BACKOFF_RESET_SECONDS = 120.0

PodRef = tuple[str, str]


def requests_or_none(pod: Pod) -> dict[str, int] | None:
    """A pod's requests in milli-units, ``None`` (logged) when a quantity is malformed."""
    spec = pod.get("spec")
    try:
        return pod_requests_milli(spec if isinstance(spec, Mapping) else {}, "spec")
    except QuantityError as exc:
        log.warning("pod %s: %s; not charged to its node (fix the pod)", "/".join(pod_ref(pod)), exc)
        return None


def event_handler(handle: Callable[[str, Any], None], event: str, backoff: Backoff,
                  stop: threading.Event) -> Callable[[Any], None]:
    """An informer's handler of ``event``: resets ``backoff`` and passes a dict object to
    ``handle(event, obj)``, none once ``stop`` is set."""
    def on_event(obj: Any) -> None:
        backoff.reset()
        if isinstance(obj, Mapping) and not stop.is_set():
            handle(event, obj)
    return on_event


def error_handler(name: str, backoff: Backoff, stop: threading.Event,
                  reachability: ApiServerReachability) -> Callable[[Any], None]:
    """The ``name`` informer's ``ERROR`` handler (its thread: the wait delays its reconnect). A
    watch that broke for want of a connection goes to the outage log (``reachability``); after
    ``stop`` (whose socket shutdown ends the watch with such an error) nothing is logged."""
    def handle(error: Any) -> None:
        if stop.is_set():
            return
        delay = backoff.next_delay()
        if not (isinstance(error, BaseException) and reachability.failed(f"watch {name}", error)):
            log.warning("%s informer: %s; watching again in %.2fs", name, error, delay)
        stop.wait(delay)
    return handle


class ControllerCache:
    """The cache (module docstring). ``api_client``: a configured ``kubernetes.client.ApiClient``;
    ``reachability``: the process's outage log; ``stop``: set when the process stops;
    ``enqueue(keys, first)``: queue gang keys, ``first``: at the head of the queue (the runner's,
    which honours each gang's back-off);
    ``topologies_changed()``: called when a Topology changes; ``gang_gone(key)``: called when a
    gang's last pod went (its back-off and gauges are reset)."""

    def __init__(self, api_client: k8s_client.ApiClient, reachability: ApiServerReachability, stop: threading.Event,
                 enqueue: Callable[[Iterable[str], bool], None], topologies_changed: Callable[[], None],
                 gang_gone: Callable[[str], None]) -> None:
        self._stop = stop
        self._enqueue = enqueue
        self._gang_gone = gang_gone
        self._reachability = reachability
        self.lock = threading.Lock()  # everything below
        self.gangs: dict[str, dict[PodRef, Pod]] = {}
        #: gang key → its gated members, kept with :attr:`gangs` (a scan per pod event was quadratic: issue 36)
        self._gated: dict[str, set[PodRef]] = {}
        self.ledger = CapacityLedger()
        #: Decisions made again because the ledger changed under them (:meth:`reconcile`).
        self.conflicts = 0
        self.kinds: dict[str, str] = {}  # gangs left gated -> their kind
        self.states: dict[str, tuple[ObjectRef | None, str]] = {}  # gang -> (owner, state line)
        self._ungated: set[PodRef] = set()  # gang pods known released (seen, or our patch accepted)
        self.grouped: set[str] = set()  # target workload-api: gangs whose objects exist (DESIGN.md §9b)
        self._bad_nodes: set[tuple[str, str]] = set()  # (name, resourceVersion) of malformed nodes logged
        self._listed: set[str] = set()
        self.topologies = LiveTopologyCatalog(api_client, reachability=reachability)
        self.topologies.add_listener(topologies_changed)
        core = k8s_client.CoreV1Api(api_client)
        self.informers: dict[str, SharedInformer] = {}
        self._add_informer("pods", core.list_pod_for_all_namespaces, self.on_pod)
        self._add_informer("nodes", core.list_node, self.on_node)

    def _add_informer(self, name: str, method: Callable[..., Any],
                      handle: Callable[[str, Any], None], counted: bool = True) -> SharedInformer:
        """An informer of ``name`` (``method`` lists and watches) whose events go to ``handle``;
        ``counted``: in :attr:`informers`, so :attr:`synced` waits for it (else the caller runs it)."""
        backoff = Backoff(initial=INFORMER_BACKOFF_INITIAL, maximum=INFORMER_BACKOFF_MAX, reset_after=BACKOFF_RESET_SECONDS)
        informer = SharedInformer(DictLister(method, name, (lambda: self._listed.add(name)) if counted else (lambda: None),
                                             self._stop, reachability=self._reachability, backoff=backoff))
        self.informers.update({name: informer} if counted else {})
        for event in (ADDED, MODIFIED, DELETED):
            informer.add_event_handler(event, event_handler(handle, event, backoff, self._stop))
        informer.add_event_handler(BOOKMARK, lambda _obj, b=backoff: b.reset())
        informer.add_event_handler(ERROR, error_handler(name, backoff, self._stop, self._reachability))
        return informer

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the Topology watch and the informers."""
        self.topologies.start()
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        """Stop the informers (after the process's ``stop`` was set) and the Topology watch."""
        for informer in self.informers.values():
            informer.stop()
        self.topologies.stop()

    @property
    def synced(self) -> bool:
        """True once pods and nodes were each listed once and the Topology catalog is known."""
        return len(self._listed) == len(self.informers) and self.topologies.synced

    # ------------------------------------------------------------------ informer callbacks

    def on_pod(self, event: str, pod: Pod) -> None:
        """Keep the gang's pods and the ledger current; queue what this change may unblock."""
        ref = pod_ref(pod)
        key = gang_key_of(pod)
        gone = event == DELETED or is_terminated(pod)
        gated = is_gated(pod)
        grouping = not gone and key is not None and is_grouped_pod(pod)
        with self.lock:
            if not gone and gated and ref in self._ungated:
                return  # an older version replayed: a gate is never added back (KEP-3838)
            if gone:
                self._ungated.discard(ref)
                freed = self.ledger.remove(ref)
            else:
                if not gated and key is not None:
                    self._ungated.add(ref)
                node = occupied_node(pod)
                freed = self.ledger.observe(ref, node, requests_or_none(pod) if node else None)
            left = key is not None and self._keep_member(key, ref, None if gone else pod)
            members = self.gangs.get(key) if key is not None else None
            own = [key] if key is not None and members is not None and \
                (key in self.kinds or bool(self._gated.get(key))
                 or (not gone and stranded_pod(pod) is not None)) else []
            waiting = [g for g, kind in self.kinds.items() if kind == INFEASIBLE] if freed else []
            if grouping and key is not None and key not in self.grouped:
                own = [key]
        if left and key is not None:
            self._gang_gone(key)
        self._enqueue(own + waiting, False)

    def _keep_member(self, key: str, ref: PodRef, pod: Pod | None) -> bool:
        """Store (or, ``pod`` None, drop) one member of gang ``key`` (lock held); True when the
        gang's last pod went (the gang is forgotten)."""
        if pod is not None:
            self.gangs.setdefault(key, {})[ref] = pod
            (self._gated.setdefault(key, set()).add if is_gated(pod) else self._gated.get(key, set()).discard)(ref)
            return False
        members = self.gangs.get(key)
        if members is None:
            return False
        members.pop(ref, None)
        self._gated.get(key, set()).discard(ref)
        if members:
            return False
        del self.gangs[key]
        self._gated.pop(key, None)
        self.grouped.discard(key)
        self.kinds.pop(key, None)
        self.states.pop(key, None)
        return True

    def on_node(self, event: str, obj: NodeObject) -> None:
        """A node's engine view changed (not a heartbeat): every complete gang left gated may fit now."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        name = str((meta or {}).get("name") or "")
        if event == DELETED:
            with self.lock:
                changed = self.ledger.remove_node(name)
        else:
            try:
                node = parse_node(obj)
            except SnapshotError as exc:
                seen = (name, str((meta or {}).get("resourceVersion") or ""))
                if seen not in self._bad_nodes:
                    self._bad_nodes.add(seen)
                    log.warning("malformed node left out of placement (fix it; the other nodes are used): %s", exc)
                with self.lock:
                    changed = self.ledger.remove_node(name)
            else:
                with self.lock:
                    changed = self.ledger.set_node(node)
        if changed:
            self._enqueue(self.waiting_gangs(lambda kind: kind != INCOMPLETE), False)

    # ------------------------------------------------------------------ the runner's reads and writes
    def waiting_gangs(self, which: Callable[[str], bool]) -> list[str]:
        """Gangs left gated whose kind ``which`` accepts."""
        with self.lock:
            return [g for g, kind in self.kinds.items() if which(kind)]

    def gated_gangs(self) -> list[str]:
        """Every gang with a gated pod."""
        with self.lock:
            return [k for k in self.gangs if self._gated.get(k)]

    def grouping_gangs(self) -> list[str]:
        """Every gang of target ``workload-api`` whose objects were not made yet (DESIGN.md §9b)."""
        with self.lock:
            return [k for k, pods in self.gangs.items()
                    if k not in self.grouped and any(is_grouped_pod(p) for p in pods.values())]

    def is_grouping(self, key: str) -> bool:
        """True when gang ``key`` is of target ``workload-api`` (one of its pods says so)."""
        with self.lock:
            return any(is_grouped_pod(p) for p in (self.gangs.get(key) or {}).values())

    def members(self, key: str) -> list[Pod]:
        """The pods of gang ``key`` as held now."""
        with self.lock:
            return list((self.gangs.get(key) or {}).values())

    def mark_grouped(self, key: str) -> None:
        """Every object of gang ``key`` exists (created or kept): its pod events queue it no more."""
        with self.lock:
            if key in self.gangs:
                self.grouped.add(key)

    def first_pod(self, key: str) -> Pod | None:
        """The gang's pod first by name (its owner is the gang's), ``None`` for an unknown gang."""
        with self.lock:
            members = self.gangs.get(key) or {}
            return members[min(members)] if members else None

    def knows_node(self, name: str) -> bool:
        """True when node ``name`` is in the capacity ledger (listed or watched, well formed)."""
        with self.lock:
            return self.ledger.has_node(name)

    def reconcile(self, key: str, owner: TopOwner | None, grace: float, default_topology: str | None,
                  backoff: ExponentialRateLimiter, stranded_grace: float = 0.0) -> Result:
        """Decide gang ``key`` with the lock released while the engine runs (:func:`decide_on_snapshot`),
        then charge its releases as assumed and record its kind under the lock, and its back-off in
        ``backoff`` (the work queue's ledger: ``defer`` when the decision backs off, ``forget`` when
        the gang no longer waits)."""
        catalog = {name: t for name in self.topologies.names() if (t := self.topologies.get(name)) is not None}
        return decide_on_snapshot(
            key, self.lock, self.ledger, catalog,
            lambda ledger: self._view(key, owner, ledger, catalog, default_topology, grace, stranded_grace),
            lambda result: self._commit(key, result, backoff), self._conflict)

    def _conflict(self) -> None:
        self.conflicts += 1

    def _view(self, key: str, owner: TopOwner | None, ledger: CapacityLedger, catalog: Mapping[str, Topology],
              default_topology: str | None, grace: float, stranded_grace: float) -> GangView:
        """The gang's :class:`GangView` on ``ledger`` (lock held): its pods and its siblings' lines copied."""
        owner_ref = owner.ref if owner is not None else None
        siblings = {g: line for g, (ref, line) in self.states.items() if g != key and ref == owner_ref and ref}
        return GangView(list(self.gangs.get(key, {}).values()), ledger, catalog, default_topology,
                        ParseCache(), owner, siblings, time.time(), grace, stranded_grace)

    def _commit(self, key: str, result: Result, backoff: ExponentialRateLimiter) -> Result:
        """Charge ``result``'s releases as assumed and record the gang's kind and back-off (lock held)."""
        for ref, node, milli in result.charges:
            self.ledger.assume(ref, node, milli)
        if result.waiting is None:
            self.kinds.pop(key, None)
            backoff.forget(key)
        else:
            self.kinds[key] = result.waiting.kind
            if result.backoff:
                backoff.defer(key)
        return result

    def record_state(self, key: str, owner: ObjectRef | None, line: str) -> None:
        """The gang's state line as written (its owner's annotation is built from its gangs' lines)."""
        with self.lock:
            if key in self.gangs:
                self.states[key] = (owner, line)

    def owner_states(self, owner: ObjectRef) -> dict[str, str]:
        """The state line of every gang of ``owner`` recorded so far (gang key → line)."""
        with self.lock:
            return {g: line for g, (ref, line) in self.states.items() if ref == owner}

    def release_answered(self, key: str, ref: PodRef, updated: Pod | None) -> None:
        """One release patch's answer: the pod as updated (this process's view until the informer
        shows it), or ``None`` (not released: its assumed capacity is free again)."""
        with self.lock:
            if updated is None:
                self.ledger.forget(ref)
                return
            members = self.gangs.get(key)
            self._ungated.add(ref)
            if members is not None and ref in members and is_gated(members[ref]):
                members[ref] = updated
                node = occupied_node(updated)
                if node is not None:
                    self.ledger.observe(ref, node, requests_or_none(updated))


def decide_on_snapshot(key: str, lock: threading.Lock, ledger: CapacityLedger, catalog: Mapping[str, Topology],
                       view_of: Callable[[CapacityLedger], GangView], commit: Callable[[Result], Result],
                       conflict: Callable[[], None]) -> Result:
    """Run the pure :func:`webhook.gating.reconcile.reconcile` of gang ``key`` on a snapshot of ``ledger``
    taken under ``lock``, with the lock released while the engine decides (kube-scheduler's
    snapshot, then assume); then, under the lock again, ``commit`` the result when the ledger still
    allows it (:meth:`CapacityLedger.still_valid`: no node set change and none of the chosen nodes
    charged or freed meanwhile; for a decision that placed nothing, no change at all, so capacity
    freed meanwhile is not missed). A decision the ledger no longer allows is made again
    (``conflict()`` is called for each); after :data:`OPTIMISTIC_ATTEMPTS` it is made under the
    lock, as before, so a gang always gets an answer. Gangs decided at once never double-book:
    every charge is taken under the lock on the ledger as it is then. ``view_of(ledger)`` builds
    the gang's view (called with the lock held); each Topology of ``catalog`` gets its index built
    on ``ledger`` under the lock (once, then charged incrementally) before the snapshot."""
    for attempt in range(OPTIMISTIC_ATTEMPTS + 1):
        locked = attempt == OPTIMISTIC_ATTEMPTS
        with lock:
            for name, topology in catalog.items():
                ledger.index(name, topology)
            snapshot = ledger if locked else ledger.snapshot()
            view = view_of(snapshot)
            if locked:
                return commit(reconcile(key, view))
        result = reconcile(key, view)  # the engine, without the lock
        with lock:
            if ledger.still_valid(snapshot, [node for _, node, _ in result.charges], any_change=not result.charges):
                ledger.adopt_indexes(snapshot)
                return commit(result)
            conflict()
    raise AssertionError("unreachable: the last attempt decides under the lock")


#: The work-queue key prefix of a pending Kueue Workload (``kueue/<namespace>/<name>``); gang keys
#: start with a namespace, which cannot hold a ``/``, so no gang key is ``kueue/...`` of 3 parts
#: unless it is an LWS group of namespace ``kueue``: the prefix is checked on the Workload table too.
KUEUE_KEY = "kueue/"


class AdvisoryCache(ControllerCache):
    """The cache of the advisory mode (``controller --advise``, :mod:`webhook.controller.advisor`):
    the same informers, gangs and ledger, and also: a pod pending under another scheduler
    (:func:`webhook.controller.advisory.pending_elsewhere`) queues its gang; a pod that leaves,
    lands on or is pinned to a node, and a node change, queue every gang with a second opinion
    (``advised``: gang key → the line last written) and every pending Kueue Workload, whose opinion
    may change with the capacity. When the API server serves Kueue's ``workloads`` (kueue.x-k8s.io
    v1beta2, asked once at :meth:`start`), a Workload informer too: a Workload Kueue did not admit
    (:func:`webhook.controller.advisory.kueue_workload_pending`) is kept in ``kueue_pending``
    (queue key ``kueue/<namespace>/<name>`` → the Workload) and queued; admitted, finished or
    deleted, it is dropped. ``kueue_gangs``: gang key → queue key of the Workload advised for it.
    A gang not advised yet (and a Workload newly pending) is queued first: its first opinion does
    not wait behind the opinions kept current as the capacity moves (at 5,000 nodes a pass of every
    advised gang takes seconds; issue 36 asks each miss named within 2 s)."""

    def __init__(self, api_client: k8s_client.ApiClient, *args: Any, **kwargs: Any) -> None:
        super().__init__(api_client, *args, **kwargs)
        self._api_client = api_client
        self.advised: dict[str, str] = {}
        self.verdicts: dict[str, str] = {}  # gang -> the verdict of its last Event
        self.kueue_pending: dict[str, Mapping[str, Any]] = {}
        self.kueue_gangs: dict[str, str] = {}
        self._kueue_informer: SharedInformer | None = None

    def start(self) -> None:
        """Start everything, and a thread that asks once whether the API server serves Kueue's
        Workloads and then starts their informer (not part of :attr:`synced`: pods are advised
        without it)."""
        super().start()
        threading.Thread(target=self._watch_kueue_workloads, name="kueue-workloads", daemon=True).start()

    def stop(self) -> None:
        super().stop()
        if self._kueue_informer is not None:
            self._kueue_informer.stop()

    def _watch_kueue_workloads(self) -> None:
        """Discovery of kueue.x-k8s.io/v1beta2 (retried while the server cannot be reached); when
        it lists ``workloads``, their informer is started; a 404 or no such resource is logged."""
        custom = k8s_client.CustomObjectsApi(self._api_client)
        backoff = Backoff(initial=INFORMER_BACKOFF_INITIAL, maximum=INFORMER_BACKOFF_MAX,
                          reset_after=BACKOFF_RESET_SECONDS)
        served = False
        try:
            found = send_until_answered(
                lambda: custom.get_api_resources(KUEUE_GROUP, KUEUE_WORKLOAD_VERSION,
                                                 _request_timeout=REQUEST_TIMEOUT),
                f"discover {KUEUE_GROUP}/{KUEUE_WORKLOAD_VERSION}", self._reachability, backoff, self._stop)
            served = any(getattr(r, "name", None) == "workloads" for r in getattr(found, "resources", None) or [])
        except ApiException as exc:
            if exc.status != 404:
                log.warning("discovery of %s/%s: HTTP %s; Kueue Workloads are not advised", KUEUE_GROUP,
                            KUEUE_WORKLOAD_VERSION, exc.status)
                return
        if self._stop.is_set():
            return
        if not served:
            log.info("the API server serves no %s/%s workloads: Kueue Workloads are not advised (pods only)",
                     KUEUE_GROUP, KUEUE_WORKLOAD_VERSION)
            return
        informer = self._add_informer("workloads", partial(custom.list_cluster_custom_object, KUEUE_GROUP,
                                                           KUEUE_WORKLOAD_VERSION, "workloads"),
                                      self.on_workload, counted=False)
        with self.lock:
            self._kueue_informer = informer
        if not self._stop.is_set():
            informer.start()
            log.info("advising Kueue Workloads (%s/%s) that Kueue did not admit", KUEUE_GROUP, KUEUE_WORKLOAD_VERSION)

    def on_workload(self, event: str, workload: Mapping[str, Any]) -> None:
        """Keep ``kueue_pending`` current and queue a Workload that is (still) pending."""
        meta = workload.get("metadata") if isinstance(workload.get("metadata"), Mapping) else {}
        key = f"{KUEUE_KEY}{(meta or {}).get('namespace') or ''}/{(meta or {}).get('name') or ''}"
        pending = event != DELETED and kueue_workload_pending(workload)
        with self.lock:
            new = pending and key not in self.kueue_pending
            if pending:
                self.kueue_pending[key] = workload
            else:
                self.kueue_pending.pop(key, None)
                for gang in [g for g, k in self.kueue_gangs.items() if k == key]:
                    del self.kueue_gangs[gang]
                    self.advised.pop(gang, None)
                    self.verdicts.pop(gang, None)
                    if gang not in self.gangs:
                        self.states.pop(gang, None)
        if pending:
            self._enqueue([key], new)

    def kueue_keys(self) -> list[str]:
        """The queue keys of every pending Kueue Workload."""
        with self.lock:
            return list(self.kueue_pending)

    def on_pod(self, event: str, pod: Pod) -> None:
        super().on_pod(event, pod)
        key = gang_key_of(pod)
        gone = event == DELETED or is_terminated(pod)
        with self.lock:
            moved = list(self.advised) + list(self.kueue_pending) if gone or occupied_node(pod) is not None else []
            new = key is not None and key not in self.advised
        if key is not None and not gone and pending_elsewhere(pod):
            self._enqueue([key], new)
        self._enqueue(moved, False)

    def on_node(self, event: str, obj: NodeObject) -> None:
        super().on_node(event, obj)
        with self.lock:
            advised = list(self.advised) + list(self.kueue_pending)
        self._enqueue(advised, False)

    def record_state(self, key: str, owner: ObjectRef | None, line: str) -> None:
        """As :meth:`ControllerCache.record_state`, also for a gang of a pending Kueue Workload (no pod)."""
        with self.lock:
            if key in self.gangs or key in self.kueue_gangs:
                self.states[key] = (owner, line)

    def _keep_member(self, key: str, ref: PodRef, pod: Pod | None) -> bool:
        gone = super()._keep_member(key, ref, pod)
        if gone:
            self.advised.pop(key, None)
            self.verdicts.pop(key, None)
        return gone
