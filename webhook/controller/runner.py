"""The live controller (DESIGN.md §9): informers, one leader, passes, patches, Events, metrics.

Pieces, all from the ``kubernetes`` client where it has them:

* **Informers** (``kubernetes.informer.SharedInformer``) for pods (all namespaces), nodes and
  ``kai.scheduler/v1alpha1`` Topologies. The informer's own list call reads ``resp.items`` and
  ``resp.metadata.resource_version`` (typed models); the list functions given to it here return
  plain dicts in that shape (``_DictLister``), so the decision sees the objects as the API sends
  them and custom objects work the same way. The lister's docstring declares ``:rtype: object``,
  which makes ``kubernetes.watch.Watch`` deliver watch objects as dicts and track their
  resourceVersion. Watch requests carry ``timeoutSeconds`` and a client read timeout, so a dead
  connection is noticed. The informer retries a failed watch at once; an ``ERROR`` handler here
  waits with capped exponential back-off (``Backoff``), so an API server that refuses
  connections never sees a busy loop.
* **Leader election** (``kubernetes.leaderelection`` with a ``coordination.k8s.io`` Lease): only
  the holder runs passes; the others keep their caches warm and take over when the Lease expires.
* **Passes**: a change of a pod, node or Topology marks the state dirty; the loop waits a short
  debounce (so the pods of one gang arriving together cost one pass), builds the state from the
  caches, calls the pure :func:`webhook.controller.decision.decide` and sends its patches.
  Pods released by this process whose update the pod cache has not shown yet are overlaid with
  the PATCH response (so the next pass never places them twice).
* **Topology findings** (DESIGN.md §12): each pass logs, for every Topology whose
  resourceVersion it has not checked yet, one warning per :func:`webhook.core.topology_infer.check`
  finding on the cached nodes (levels out of order, dropped nodes, ...): once per Topology change.
* **Infeasible gangs** are retried only after some pod, node or Topology changed since their
  last attempt, and not before their back-off (1 s doubling to 60 s) expired; each gets one
  Event per pod per new reason (``kubectl describe pod`` shows it).
* **Patch errors**: 404 (pod deleted while gated) → dropped; 409 / 422 / 5xx / connection errors
  → the pod is read again and, while still gated, the patch is rebuilt for the same node and
  resent, up to :data:`PATCH_ATTEMPTS` times with back-off; after that the next pass finishes the
  gang around the pods already released. Nothing raises out of the loop.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException
from kubernetes.informer import SharedInformer
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.cluster.topology_cache import Backoff
from webhook.controller.decision import INFEASIBLE, INVALID, ParseCache, PassResult, Release, Waiting, decide, pod_ref
from webhook.core import gating, topology_infer
from webhook.core.topology import TOPOLOGY_API_VERSION, TOPOLOGY_KIND, Topology, TopologyError

log = logging.getLogger(__name__)

COMPONENT = "segment-webhook-controller"
#: How often a patch is sent for one pod in one pass before the next pass takes over.
PATCH_ATTEMPTS = 5
#: Server-side watch timeout (seconds); the informer then watches again from the last version.
WATCH_TIMEOUT_SECONDS = 300
CONNECT_TIMEOUT_SECONDS = 10.0
REQUEST_TIMEOUT_SECONDS = 30.0
#: Least time between two watch requests of one informer, seconds.
MIN_WATCH_SPACING_SECONDS = 1.0


@dataclass
class ControllerSettings:
    """Operator settings of ``segment-webhook controller``.

    ``identity``: this process's name in the Lease (the pod name). ``lease_name`` /
    ``lease_namespace``: the ``coordination.k8s.io/v1`` Lease. ``lease_duration`` /
    ``renew_deadline`` / ``retry_period``: seconds, as client-go (15 / 10 / 2); the client library
    requires ``lease_duration > renew_deadline > 1.2 * retry_period`` and ``retry_period >= 1``.
    ``default_topology``: topology of gangs whose pods name none. ``debounce``: seconds to wait
    after a change before a pass. ``resync``: seconds between passes when nothing changes.
    ``retry_initial`` / ``retry_max``: back-off of infeasible gangs, seconds.
    """

    identity: str
    lease_name: str = "segment-webhook-controller"
    lease_namespace: str = "segment-webhook"
    lease_duration: int = 15
    renew_deadline: int = 10
    retry_period: int = 2
    default_topology: str | None = None
    debounce: float = 0.05
    resync: float = 60.0
    retry_initial: float = 1.0
    retry_max: float = 60.0

    def check(self) -> None:
        """Raise ``ValueError`` naming the flag when the Lease timings break the library's rule."""
        if self.retry_period < 1:
            raise ValueError(f"--retry-period {self.retry_period} must be >= 1 second")
        if self.renew_deadline <= 1.2 * self.retry_period:
            raise ValueError(f"--renew-deadline {self.renew_deadline} must be > 1.2 x --retry-period ({self.retry_period})")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(f"--lease-duration {self.lease_duration} must be > --renew-deadline ({self.renew_deadline})")


class Metrics:
    """The controller's Prometheus metrics, in their own registry (``registry``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.waiting = Gauge("segment_controller_gangs_waiting", "Gangs left gated after the last pass, by why",
                             ["kind"], registry=self.registry)
        self.placed = Counter("segment_controller_gangs_placed", "Gangs placed and released",
                              registry=self.registry)
        self.infeasible = Gauge("segment_controller_gangs_infeasible", "Complete gangs the engine could not place",
                                registry=self.registry)
        self.release_seconds = Histogram(
            "segment_controller_release_seconds", "Seconds from the creation of a gang's last pod to its release",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800), registry=self.registry)
        self.patch_errors = Counter("segment_controller_patch_errors", "Release patches that failed, by HTTP status",
                                    ["code"], registry=self.registry)
        self.leader = Gauge("segment_controller_leader", "1 while this process holds the Lease",
                            registry=self.registry)
        self.passes = Counter("segment_controller_passes", "Placement passes run", registry=self.registry)


class _DictLister:
    """A list function for ``SharedInformer`` that returns plain dicts.

    ``method``: a generated list method (``CoreV1Api.list_pod_for_all_namespaces``, or a partial
    of ``CustomObjectsApi.list_cluster_custom_object``). ``on_listed``: called after each
    successful list (the informer has no "synced" flag of its own).
    """

    def __init__(self, method: Callable[..., Any], on_listed: Callable[[], None], stop: threading.Event,
                 *, missing_is_empty: bool = False):
        self._method = method
        self._on_listed = on_listed
        self._stop = stop
        self._missing_is_empty = missing_is_empty
        self._last_watch = 0.0

    def __call__(self, **kwargs: Any) -> Any:
        """List, or (``watch=True``) open a watch, as plain JSON.

        :rtype: object
        """
        if kwargs.get("watch"):
            # at most one watch request a second: a server that ends watches at once without an
            # error cannot make the informer (which re-watches immediately) spin
            wait = self._last_watch + MIN_WATCH_SPACING_SECONDS - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
            self._last_watch = time.monotonic()
            kwargs.setdefault("timeout_seconds", WATCH_TIMEOUT_SECONDS)
            kwargs.setdefault("allow_watch_bookmarks", True)
            kwargs["_request_timeout"] = (CONNECT_TIMEOUT_SECONDS, kwargs["timeout_seconds"] + 60)
            return self._method(**kwargs)
        kwargs["_preload_content"] = False
        kwargs["_request_timeout"] = (CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)
        try:
            response = self._method(**kwargs)
        except ApiException as exc:
            if exc.status == 404 and self._missing_is_empty:
                # no Topology CRD: a known state (DESIGN.md §10), gangs are placed by nodes alone
                log.warning("topologies.kai.scheduler not found (404): no Topology is known")
                self._on_listed()
                return SimpleNamespace(items=[], metadata=SimpleNamespace(resource_version=None))
            raise
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        if not isinstance(body, Mapping) or not isinstance(body.get("items") or [], list):
            raise ValueError("list response has no items list")
        meta = body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {}
        self._on_listed()
        return SimpleNamespace(items=list(body.get("items") or []),
                               metadata=SimpleNamespace(resource_version=meta.get("resourceVersion")))


class _StoppableLease(LeaseLock):
    """The client library's ``LeaseLock``, with this process's API client, that stops renewing
    once ``stopped`` is set (the library's election loop has no stop of its own), and can give
    the Lease up (:meth:`release`) so another replica takes over at once, as client-go's
    ``ReleaseOnCancel`` does."""

    def __init__(self, name: str, namespace: str, identity: str, api_client: k8s_client.ApiClient,
                 stopped: threading.Event):
        super().__init__(name, namespace, identity)
        self.api_instance = k8s_client.CoordinationV1Api(api_client)
        self._stopped = stopped

    def get(self, name, namespace):  # noqa: D102 - the library's interface
        if self._stopped.is_set():  # the library logs ``.reason`` of what it gets back
            return False, ApiException(status=503, reason="this controller is stopping")
        return super().get(name, namespace)

    def create(self, name, namespace, election_record):  # noqa: D102
        return False if self._stopped.is_set() else super().create(name, namespace, election_record)

    def update(self, name, namespace, updated_record):  # noqa: D102
        return False if self._stopped.is_set() else super().update(name, namespace, updated_record)

    def release(self) -> None:
        """Clear ``holderIdentity`` if this process holds the Lease (best effort)."""
        lease = self.lease_reference
        if lease is None or lease.spec is None or lease.spec.holder_identity != self.identity:
            return
        try:
            lease.spec.holder_identity = None
            self.api_instance.replace_namespaced_lease(name=self.name, namespace=self.namespace, body=lease,
                                                       _request_timeout=(CONNECT_TIMEOUT_SECONDS, 5.0))
            log.info("%s gave up Lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not give up Lease %s/%s: %s", self.namespace, self.name, exc)


def _topologies(objects: list[Any]) -> list[Topology]:
    out = []
    for obj in objects:
        if not isinstance(obj, Mapping):
            continue
        if "kind" not in obj:
            obj = {**obj, "kind": TOPOLOGY_KIND, "apiVersion": TOPOLOGY_API_VERSION}
        try:
            out.append(Topology.from_object(obj))
        except TopologyError as exc:
            log.warning("skipping malformed Topology: %s", exc)
    return out


def _meta_of(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _age_seconds(timestamp: str) -> float | None:
    try:
        created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return max(0.0, (datetime.now(timezone.utc) - created).total_seconds())


class Controller:
    """One controller process: informers, leader election, passes.

    ``api_client``: a configured ``kubernetes.client.ApiClient``. ``settings``:
    :class:`ControllerSettings`. ``metrics``: a :class:`Metrics` (a fresh one by default).
    ``elect``: False runs passes without a Lease (tests of the loop alone).
    Start with :meth:`start`; stop with :meth:`stop`.
    """

    def __init__(self, api_client: k8s_client.ApiClient, settings: ControllerSettings, *,
                 metrics: Metrics | None = None, elect: bool = True):
        settings.check()
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._api = api_client
        self._core = k8s_client.CoreV1Api(api_client)
        custom = k8s_client.CustomObjectsApi(api_client)
        self._elect = elect
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self._leading = threading.Event()
        self._lock = threading.Lock()
        self._generation = 0
        self._listed: set[str] = set()
        self._overlay: dict[tuple[str, str], dict] = {}
        self._retry: dict[str, tuple[float, float, int]] = {}  # gang → (next attempt, delay, generation)
        self._reported: dict[str, tuple[str, str]] = {}
        self._threads: list[threading.Thread] = []
        self._lock_object: _StoppableLease | None = None
        self.releases_sent = 0
        self.last_result: PassResult | None = None
        self._parse_cache = ParseCache()  # used by the pass thread only
        self._skipped_logged: set[str] = set()
        self._topologies_checked: set[tuple[str, str]] = set()  # (name, resourceVersion) logged (DESIGN.md §12)

        def topology_list(**kwargs: Any) -> Any:
            return custom.list_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", **kwargs)

        self._informers = {
            "pods": SharedInformer(_DictLister(self._core.list_pod_for_all_namespaces, lambda: self._synced("pods"),
                                               self._stop)),
            "nodes": SharedInformer(_DictLister(self._core.list_node, lambda: self._synced("nodes"), self._stop)),
            "topologies": SharedInformer(_DictLister(topology_list, lambda: self._synced("topologies"), self._stop,
                                                     missing_is_empty=True)),
        }
        for name, informer in self._informers.items():
            backoff = Backoff(initial=0.5, maximum=30.0)
            for event in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                informer.add_event_handler(event, self._on_event(name, event, backoff))
            informer.add_event_handler("ERROR", self._on_error(name, backoff))

    # ------------------------------------------------------------------ informer callbacks
    def _synced(self, name: str) -> None:
        self._listed.add(name)
        self._changed()

    def _changed(self) -> None:
        with self._lock:
            self._generation += 1
        self._dirty.set()

    def _on_event(self, name: str, event: str, backoff: Backoff) -> Callable[[Any], None]:
        def handle(obj: Any) -> None:
            backoff.reset()
            if event == "BOOKMARK":
                return
            if name == "pods" and isinstance(obj, Mapping):
                ref = pod_ref(obj)
                with self._lock:
                    if event == "DELETED" or not gating.is_gated(obj):
                        self._overlay.pop(ref, None)
            self._changed()
        return handle

    def _on_error(self, name: str, backoff: Backoff) -> Callable[[Any], None]:
        def handle(error: Any) -> None:
            delay = backoff.next_delay()
            log.warning("%s informer: %s; watching again in %.2fs", name, error, delay)
            self._stop.wait(delay)  # runs on the informer's thread: delays its reconnect
        return handle

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "Controller":
        """Start the informers, the leader election (unless ``elect=False``) and the pass loop."""
        for informer in self._informers.values():
            informer.start()
        if self._elect:
            self._spawn(self._elect_loop, "leader-election")
        else:
            self._leading.set()
            self.metrics.leader.set(1)
        self._spawn(self._loop, "controller-passes")
        return self

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop passes, give the Lease up when holding it, stop the informers."""
        was_leading = self._leading.is_set()
        self._stop.set()
        self._leading.clear()
        self._dirty.set()
        for thread in self._threads:
            if thread.name == "controller-passes":
                thread.join(5)
        if self._elect and was_leading and self._lock_object is not None:
            self._lock_object.release()
        for informer in self._informers.values():
            informer.stop()

    @property
    def leading(self) -> bool:
        """True while this process holds the Lease (always, with ``elect=False``)."""
        return self._leading.is_set()

    @property
    def synced(self) -> bool:
        """True once pods, nodes and Topologies were each listed once."""
        return len(self._listed) == len(self._informers)

    def _elect_loop(self) -> None:
        s = self.settings
        while not self._stop.is_set():
            lock = _StoppableLease(s.lease_name, s.lease_namespace, s.identity, self._api, self._stop)
            self._lock_object = lock
            config = electionconfig.Config(lock, s.lease_duration, s.renew_deadline, s.retry_period,
                                           self._started_leading, self._stopped_leading)
            try:
                leaderelection.LeaderElection(config).run()
            except Exception:  # noqa: BLE001 - the election must survive API errors
                log.exception("leader election failed; retrying")
            self._stopped_leading()
            self._stop.wait(s.retry_period)

    def _started_leading(self) -> None:
        log.info("%s holds Lease %s/%s", self.settings.identity, self.settings.lease_namespace, self.settings.lease_name)
        self._leading.set()
        self.metrics.leader.set(1)
        self._dirty.set()

    def _stopped_leading(self) -> None:
        if self._leading.is_set():
            log.warning("%s lost Lease %s/%s; passes stop", self.settings.identity,
                        self.settings.lease_namespace, self.settings.lease_name)
        self._leading.clear()
        self.metrics.leader.set(0)

    # ------------------------------------------------------------------ passes
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait(self._next_wake())
            if self._stop.is_set():
                break
            self._stop.wait(self.settings.debounce)
            self._dirty.clear()
            if not self.leading or not self.synced:
                continue
            try:
                self.run_pass()
            except Exception:  # noqa: BLE001 - a bug in one pass must not end the controller
                log.exception("placement pass failed; the next change or resync retries")
                self._stop.wait(1.0)

    def _next_wake(self) -> float:
        """Seconds until the next pass without a change: the resync, or the earliest back-off of
        an infeasible gang that has seen a change since its attempt."""
        now = time.monotonic()
        wake = self.settings.resync
        with self._lock:
            for at, _, generation in self._retry.values():
                if generation != self._generation:
                    wake = min(wake, max(0.0, at - now))
        return wake

    def state(self) -> tuple[list[dict], list[dict], list[Topology]]:
        """Nodes, pods (overlaid with this process's own releases) and Topologies from the caches."""
        pods = self._informers["pods"].cache.list()
        with self._lock:
            overlay = dict(self._overlay)
        if overlay:
            pods = [overlay.get(pod_ref(p), p) for p in pods]
        return self._informers["nodes"].cache.list(), pods, _topologies(self._informers["topologies"].cache.list())

    def run_pass(self) -> PassResult:
        """One pass: decide on the cached state, send the releases, report the waiting gangs."""
        now = time.monotonic()
        with self._lock:
            generation = self._generation
            skip = {g for g, (at, _, gen) in self._retry.items() if now < at or gen == generation}
        nodes, pods, topologies = self.state()
        self.log_topology_findings(nodes)
        result = decide(nodes, pods, topologies, default_topology=self.settings.default_topology, skip=skip,
                        cache=self._parse_cache)
        self.metrics.passes.inc()
        for line in set(result.skipped) - self._skipped_logged:  # once per malformed object
            log.warning("malformed object left out of placement (fix it; the other objects are used): %s", line)
        self._skipped_logged = set(result.skipped)
        by_ref = {pod_ref(p): p for p in pods}
        for release in result.releases:
            if not self.leading or self._stop.is_set():
                break
            self._release(release, by_ref.get((release.namespace, release.name)))
        for placed in result.placed:
            self.metrics.placed.inc()
            age = _age_seconds(placed.last_created)
            if age is not None:
                self.metrics.release_seconds.observe(age)
            log.info("placed gang %s (%d pods) at %s", placed.gang, placed.pods, placed.domain)
            with self._lock:
                self._retry.pop(placed.gang, None)
                self._reported.pop(placed.gang, None)
        uids = {ref: str(_meta_of(p).get("uid") or "") for ref, p in by_ref.items()}
        self._report(result.waiting, generation, skip, uids)
        self.last_result = result
        return result

    def log_topology_findings(self, nodes: list[dict]) -> None:
        """Log the DESIGN.md §12 findings of each cached Topology on ``nodes`` (one warning line per
        finding, :func:`webhook.core.topology_infer.check`), once per Topology resourceVersion: a
        Topology's change is checked again, a node's change alone is not."""
        live: set[tuple[str, str]] = set()
        checked = self._topologies_checked
        node_labels = None
        for obj in self._informers["topologies"].cache.list():
            meta = _meta_of(obj)
            key = (str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""))
            live.add(key)
            if key in checked:
                continue
            checked.add(key)
            body = obj if "kind" in obj else {**obj, "kind": TOPOLOGY_KIND, "apiVersion": TOPOLOGY_API_VERSION}
            try:
                topology = Topology.from_object(body)
            except TopologyError:
                continue  # _topologies() logs it
            if node_labels is None:
                node_labels = []
                for node in nodes:
                    try:
                        node_labels.append(topology_infer.node_labels_of(node))
                    except topology_infer.NodeLabelError:
                        continue  # the pass's own log names malformed objects
            for finding in topology_infer.check(topology.levels, node_labels, topology.name):
                log.warning("%s", finding.text().replace("\n  ", "; "))
        self._topologies_checked = checked & live

    def _report(self, waiting: list[Waiting], generation: int, skipped: set[str],
                uids: Mapping[tuple[str, str], str]) -> None:
        counts = {"incomplete": 0, INFEASIBLE: 0, INVALID: 0}
        now = time.monotonic()
        for w in waiting:
            counts[w.kind] = counts.get(w.kind, 0) + 1
            if w.kind == INFEASIBLE:
                with self._lock:
                    _, delay, _ = self._retry.get(w.gang, (0.0, self.settings.retry_initial / 2, 0))
                    delay = min(self.settings.retry_max, delay * 2)
                    self._retry[w.gang] = (now + delay, delay, generation)
            if w.kind in (INFEASIBLE, INVALID) and self._reported.get(w.gang) != (w.kind, w.reason):
                self._reported[w.gang] = (w.kind, w.reason)
                log.info("gang %s stays gated (%s): %s", w.gang, w.kind, w.reason)
                for namespace, name in w.pods:
                    self._event(namespace, name, uids.get((namespace, name), ""),
                                "PlacementInfeasible" if w.kind == INFEASIBLE else "GangInvalid",
                                f"gang {w.gang}: {w.reason}")
        with self._lock:
            live = {w.gang for w in waiting} | skipped
            for gang in [g for g in self._retry if g not in live]:
                del self._retry[gang]
        for gang in [g for g in self._reported if g not in live]:  # gangs that left
            del self._reported[gang]
            counts[INFEASIBLE] += sum(1 for g in skipped if g in self._retry)
        for kind, count in counts.items():
            self.metrics.waiting.labels(kind=kind).set(count)
        self.metrics.infeasible.set(counts[INFEASIBLE])

    def _release(self, release: Release, pod: Mapping[str, Any] | None) -> bool:
        """Send one release patch; on 409/422/5xx re-read the pod and resend (see module doc)."""
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
                cached = self._informers["pods"].cache.get_by_key(f"{release.namespace}/{release.name}")
                with self._lock:  # until the pod cache shows the update (see _on_event)
                    if isinstance(updated, dict) and (cached is None or gating.is_gated(cached)):
                        self._overlay[(release.namespace, release.name)] = updated
                self.releases_sent += 1
                log.debug("released %s/%s to %s", release.namespace, release.name, release.node)
                return True
            except ApiException as exc:
                self.metrics.patch_errors.labels(code=str(exc.status)).inc()
                if exc.status == 404:
                    log.info("pod %s/%s was deleted while gated; skipped", release.namespace, release.name)
                    return False
                log.warning("release of %s/%s to %s: HTTP %s %s (attempt %d)", release.namespace, release.name,
                            release.node, exc.status, exc.reason, attempt + 1)
            except Exception as exc:  # noqa: BLE001 - connection errors, timeouts
                self.metrics.patch_errors.labels(code="error").inc()
                log.warning("release of %s/%s: %s (attempt %d)", release.namespace, release.name, exc, attempt + 1)
            if self._stop.wait(backoff.next_delay()):
                return False
            fresh = self._read_pod(release.namespace, release.name)
            if fresh is None:
                return False
            if not gating.is_gated(fresh):
                log.info("pod %s/%s was released meanwhile; nothing to send", release.namespace, release.name)
                return False
            try:
                patch = gating.release_patch(fresh, release.node)
            except ValueError as exc:
                log.warning("pod %s/%s: %s; left to the next pass", release.namespace, release.name, exc)
                return False
        self._dirty.set()  # the next pass finishes the gang around what was released
        return False

    def _read_pod(self, namespace: str, name: str) -> dict | None:
        try:
            response = self._core.read_namespaced_pod(name, namespace, _preload_content=False,
                                                      _request_timeout=(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS))
            try:
                return json.loads(response.data)
            finally:
                response.release_conn()
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading pod %s/%s: HTTP %s", namespace, name, exc.status)
            return None
        except Exception as exc:  # noqa: BLE001
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
        except Exception as exc:  # noqa: BLE001
            log.warning("event on pod %s/%s not posted: %s", namespace, name, exc)
