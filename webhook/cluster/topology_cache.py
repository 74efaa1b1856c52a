"""Live catalog of KAI Scheduler ``Topology`` objects, kept by ``kubernetes.informer.SharedInformer``.

:class:`LiveTopologyCatalog` implements :class:`webhook.topology.objects.TopologyCatalog`
(``synced``, ``crd_missing``, ``get``, ``names``) from the cluster's ``kai.scheduler/v1alpha1``
``topologies`` (cluster-scoped; DESIGN.md §2, §4.4, §10).

What the library does (``kubernetes.informer.SharedInformer``, kubernetes >= 37.0; read in its
source, ``kubernetes/informer/informer.py``): one daemon thread lists, then watches from the list's
resourceVersion; when a watch ends or its connection drops it watches again **from the last
resourceVersion seen** (no re-list); on **410 Gone** (an ``ERROR`` event with ``code: 410`` or an
HTTP 410, both raised as ``ApiException(410)`` by ``kubernetes.watch.Watch`` once
``timeoutSeconds`` is set) it re-lists and watches from the new resourceVersion. With
``resync_period`` it sets the watch's server-side ``timeoutSeconds`` and re-lists after a watch
that ran that long (so by default every 5 minutes: a cheap safety net for a few Topologies).

What the library does not do, and this module adds (the smallest own code, in the list function
it is given and in its event handlers):

* **Back-off.** The informer reconnects a failed watch at once and retries a failed list after a
  fixed 5 s. Here a failed list is retried inside the list function, and a failed watch waits in
  the ``ERROR`` handler (which runs on the informer's thread), with exponential back-off and
  jitter (:class:`Backoff`, 0.2 s doubling to 30 s); a second 410 right after a re-list and a
  watch that the server closes within a second without any event back off too, so a misbehaving
  server cannot cause a busy loop.
* **An unreachable API server** (:mod:`webhook.cluster.api_server`). A list or watch request
  that cannot reach the server is retried with the same back-off inside the list function
  (client-go's reflector, too, watches again from the last resourceVersion after "connection
  refused" rather than re-listing), and a watch that breaks (connection lost) waits in the
  ``ERROR`` handler; both report to an :class:`~webhook.cluster.api_server.ApiServerReachability`
  (one line naming the server and the cause when the outage starts, one when it answers again),
  not one line per attempt, and the informer's traceback of that error is dropped
  (:class:`~webhook.cluster.api_server.InformerTransportTracebacks`).
* **Stop.** Once :meth:`LiveTopologyCatalog.stop` was called the list function sends no request:
  a list or a watch raises :class:`~webhook.cluster.api_server.InformerStopped`
  (:func:`~webhook.cluster.api_server.informer_stopped`), so the informer's loop ends, with no
  error logged.
* **Timeouts and bookmarks.** Every request gets a connect and read timeout; watches ask for
  bookmarks (``allowWatchBookmarks``); the informer passes neither.
* **Custom objects.** ``CustomObjectsApi`` answers lists with a dict, which the informer cannot
  read (it expects ``.items`` and ``.metadata.resource_version``): the list function parses the
  dict and hands the informer an object of that shape.
* **States** (DESIGN.md §10): ``waiting`` until the first list succeeds (not synced: /readyz
  503 with :attr:`LiveTopologyCatalog.last_error` as the reason); ``listed`` after it;
  ``crd-missing`` when the list (or a watch) answers **404**: the cluster has no Topology CRD,
  which is a known state (synced, no topologies, ``crd_missing`` True; the list is retried with
  back-off up to every 30 s so a CRD installed later is picked up).
* **Atomic, validated catalog.** Each list result and each event builds a new mapping of parsed
  :class:`~webhook.topology.objects.Topology` objects and swaps it in with one assignment, so
  readers (admission worker threads) never lock and never see a half-applied re-list (the
  informer replays a re-list as separate DELETED/ADDED/MODIFIED events; those replays are
  ignored here because the list already replaced the catalog in one step). A malformed Topology
  is skipped with a logged warning; a MODIFIED event that makes a known Topology malformed
  leaves its last good version in place.
"""

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType, SimpleNamespace
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.informer import ADDED, BOOKMARK, DELETED, ERROR, MODIFIED, SharedInformer

from webhook.cluster.api_server import (
    CONNECT_TIMEOUT_SECONDS,
    REQUEST_TIMEOUT_SECONDS,
    WATCH_TIMEOUT_SECONDS,
    ApiServerReachability,
    Backoff,
    informer_stopped,
    install_informer_traceback_filter,
    send_until_answered,
)
from webhook.cluster.kubeconfig import KubeconfigError, api_client_from_kubeconfig
from webhook.errors import SegmentWebhookError
from webhook.kube.kai_scheduler import TOPOLOGY_API_VERSION
from webhook.topology.objects import TOPOLOGY_CRD, TOPOLOGY_KIND, Topology, TopologyError

log = logging.getLogger(__name__)

GROUP = "kai.scheduler"
VERSION = "v1alpha1"
PLURAL = "topologies"

#: Read timeout of a list request, in seconds.
LIST_READ_TIMEOUT_SECONDS = REQUEST_TIMEOUT_SECONDS
#: Extra read time beyond the watch's ``timeoutSeconds`` before the client gives up on a silent
#: connection (bookmarks arrive about once a minute, so a healthy watch is never that quiet).
WATCH_READ_SLACK_SECONDS = 60.0

#: Catalog states (DESIGN.md §10): no list succeeded yet / listed / the Topology CRD is absent (404).
STATE_WAITING = "waiting"
STATE_LISTED = "listed"
STATE_CRD_MISSING = "crd-missing"

#: Operator hints appended to list/watch errors, by HTTP status.
_HINTS = {
    403: " (RBAC: the service account needs get/list/watch on topologies.kai.scheduler)",
    404: f" (the KAI Scheduler Topology CRD {TOPOLOGY_CRD} is not installed)",
}


def _shutdown(response: Any) -> None:
    """Shut down the socket under a streaming urllib3 response, so a thread blocked reading it
    wakes up at once (as ``kubernetes.watch.Watch.stop`` does for the response it knows)."""
    try:
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class TopologyCacheError(SegmentWebhookError, RuntimeError):
    """The cache cannot be set up (no usable kubeconfig / in-cluster configuration).

    The message names the source that failed (the kubeconfig path, or the in-cluster service
    account environment)."""


def _rv_of(obj: Any) -> str | None:
    """``metadata.resourceVersion`` of a dict object, or None."""
    if isinstance(obj, Mapping):
        meta = obj.get("metadata")
        if isinstance(meta, Mapping):
            rv = meta.get("resourceVersion")
            if isinstance(rv, str) and rv:
                return rv
    return None


def _name_of(obj: Any) -> str | None:
    if isinstance(obj, Mapping):
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(name, str):
            return name
    return None


def _parse_topology(obj: Any) -> Topology | None:
    """A Topology from one list item / watch object, or None (logged) when malformed.

    List items may omit ``kind``/``apiVersion``; they are Topologies by construction."""
    if not isinstance(obj, Mapping):
        log.warning("skipping Topology: expected an object, got %s", type(obj).__name__)
        return None
    if "kind" not in obj:
        obj = {**obj, "kind": TOPOLOGY_KIND, "apiVersion": TOPOLOGY_API_VERSION}
    try:
        return Topology.from_object(obj)
    except TopologyError as exc:
        log.warning("skipping malformed Topology %r: %s", _name_of(obj), exc)
        return None


class TopologyState:
    """What a live catalog knows (its half that is not the list/watch): the Topologies by name, the
    state (:data:`STATE_WAITING`, :data:`STATE_LISTED`, :data:`STATE_CRD_MISSING`), the last
    resourceVersion, the number of lists, the last error text and the change listeners.

    Written by the informer's thread only (each change one replacement of an immutable mapping
    under a lock); read by any thread without blocking. Every change that alters the catalog calls
    the listeners (:meth:`notify`)."""

    def __init__(self) -> None:
        self.topologies: Mapping[str, Topology] = MappingProxyType({})
        self.state = STATE_WAITING
        self.resource_version: str | None = None
        self.list_count = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def listed(self, fresh: dict[str, Topology], resource_version: str | None) -> None:
        """A list succeeded: ``fresh`` replaces every Topology in one step."""
        with self._lock:
            self.topologies = MappingProxyType(fresh)
            self.resource_version = resource_version
            self.state = STATE_LISTED
            self.list_count += 1
        self.last_error = None
        self.notify()

    def upsert(self, topology: Topology) -> None:
        """A Topology was added or changed by a watch event."""
        with self._lock:
            self.topologies = MappingProxyType({**self.topologies, topology.name: topology})
            self.state = STATE_LISTED
        self.notify()

    def delete(self, name: str) -> None:
        """A Topology was deleted by a watch event (nothing happens for an unknown name)."""
        if name not in self.topologies:
            return
        with self._lock:
            self.topologies = MappingProxyType({k: v for k, v in self.topologies.items() if k != name})
        self.notify()

    def crd_missing(self, text: str) -> None:
        """The Topology resource does not exist: a known state with no topologies (DESIGN.md §10)."""
        changed = self.state != STATE_CRD_MISSING
        if changed:
            log.warning("topology cache: %s; ready with no topologies (workloads naming one are denied)", text)
        with self._lock:
            self.topologies = MappingProxyType({})
            self.state = STATE_CRD_MISSING
        self.last_error = text
        if changed:
            self.notify()

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every change (see :meth:`LiveTopologyCatalog.add_listener`)."""
        self._listeners.append(callback)

    def notify(self) -> None:
        """Call every listener; one that raises is logged and the others still called."""
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("topology cache listener failed")


class TopologyWatch:
    """The list/watch half of a :class:`LiveTopologyCatalog`: one ``SharedInformer`` on
    ``topologies.kai.scheduler`` whose list function lists until answered and opens watches
    (retried with back-off while the server cannot be reached), and whose event handlers write
    what they learn into ``known`` (a :class:`TopologyState`). ``api``: a ``CustomObjectsApi``;
    ``backoff``, ``watch_timeout_seconds`` and ``reachability`` as the catalog's."""

    def __init__(self, api: k8s_client.CustomObjectsApi, known: TopologyState, backoff: Backoff,
                 watch_timeout_seconds: int, reachability: ApiServerReachability):
        self._api = api
        self._known = known
        self._backoff = backoff
        self.reachability = reachability
        self._watch_timeout = watch_timeout_seconds
        self.stop_event = threading.Event()
        self._started = False
        self._replaying = False  # between a list and the next watch: the informer replays the list
        self._watch_started: float | None = None
        self._watch_response: Any = None  # the newest watch response (urllib3), for stop()
        self._watch_events = 0
        self._watch_failed = False
        self._gone_streak = 0  # consecutive 410s without a watch event in between
        install_informer_traceback_filter()
        self._informer = SharedInformer(self._list_or_watch, resync_period=watch_timeout_seconds)
        for event_type, handler in ((ADDED, self._on_upsert), (MODIFIED, self._on_upsert),
                                    (DELETED, self._on_delete), (BOOKMARK, self._on_bookmark),
                                    (ERROR, self._on_error)):
            self._informer.add_event_handler(event_type, handler)

    def start(self) -> None:
        """Start the informer's daemon thread (idempotent; not restartable after :meth:`stop`)."""
        if not self._started:
            self._started = True
            self._informer.start()

    def stop(self, timeout: float) -> bool:
        """See :meth:`LiveTopologyCatalog.stop`."""
        self.stop_event.set()
        if not self._started:
            return True
        response = self._watch_response
        if response is not None:
            _shutdown(response)
        stopper = threading.Thread(target=self._informer.stop, name="topology-cache-stop", daemon=True)
        stopper.start()
        stopper.join(timeout)
        return not stopper.is_alive()


    # ---------------------------------------------------------------- the informer's list function
    def _list_or_watch(self, **kwargs: Any) -> object:
        """The ``list_func`` given to the informer: a list (no ``watch`` argument) or a watch.
        The return annotation ``object`` (this module has no ``from __future__ import
        annotations``, so it stays the class) tells ``kubernetes.watch.Watch`` to decode watch
        events as plain dicts and to track their resourceVersion, as
        :mod:`webhook.cluster.informers` explains."""
        if kwargs.get("watch"):
            return self._start_watch(kwargs)
        return self._list_until_known()

    def _list_until_known(self) -> Any:
        """List until it succeeds (or answers 404: no CRD), retrying with back-off. Returns the
        informer's view of the list (``.items``, ``.metadata.resource_version``)."""
        while not self.stop_event.is_set():
            try:
                result = send_until_answered(
                    lambda: self._api.list_cluster_custom_object(
                        GROUP, VERSION, PLURAL, _request_timeout=(CONNECT_TIMEOUT_SECONDS, LIST_READ_TIMEOUT_SECONDS)),
                    "list topologies", self.reachability, self._backoff, self.stop_event)
                if result is None:  # stopped
                    break
                if not isinstance(result, Mapping) or not isinstance(result.get("items", []), list):
                    raise ValueError("list response is not a TopologyList (no items list)")
            except ApiException as exc:
                if self.stop_event.is_set():
                    break
                if exc.status == 404:
                    self._known.crd_missing(f"list answered 404{_HINTS[404]}")
                    self.stop_event.wait(self._backoff.next_delay())
                else:
                    self._failed(f"API error {exc.status}: {exc.reason}{_HINTS.get(exc.status, '')}")
                continue
            except Exception as exc:  # noqa: BLE001 - the thread must survive anything
                if self.stop_event.is_set():
                    break
                self._failed(f"{type(exc).__name__}: {exc}")
                continue
            items = result.get("items") or []
            fresh: dict[str, Topology] = {}
            for item in items:
                topo = _parse_topology(item)
                if topo is not None:
                    fresh[topo.name] = topo
            rv = _rv_of(result)
            self._replaying = True
            self._backoff.reset()
            log.info("topology cache: listed %d topologies at resourceVersion %s: %s", len(fresh), rv, sorted(fresh))
            self._known.listed(fresh, rv)
            return SimpleNamespace(items=items, metadata=SimpleNamespace(resource_version=rv))
        informer_stopped()  # stopped: no answer, the informer's loop then ends

    def _start_watch(self, kwargs: dict[str, Any]) -> Any:
        """Open one watch request (called by ``kubernetes.watch.Watch.stream``), retried with
        back-off while the server cannot be reached; once stopped, none
        (:func:`~webhook.cluster.api_server.informer_stopped`)."""
        self._replaying = False
        if (self._watch_started is not None and not self._watch_events and not self._watch_failed
                and time.monotonic() - self._watch_started < 1.0 and not self.stop_event.is_set()):
            self._failed("watch closed by the server without any event")
        kwargs.setdefault("timeout_seconds", self._watch_timeout)
        kwargs["allow_watch_bookmarks"] = True
        kwargs["_request_timeout"] = (CONNECT_TIMEOUT_SECONDS, kwargs["timeout_seconds"] + WATCH_READ_SLACK_SECONDS)
        response = send_until_answered(lambda: self._api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs),
                                       "watch topologies", self.reachability, self._backoff, self.stop_event)
        if response is None:  # stopped
            informer_stopped()
        self._watch_started, self._watch_events, self._watch_failed = time.monotonic(), 0, False
        # stop() may have come while the request was being sent, before the library's Watch knows
        # the response (its stop() would miss it): keep it where stop() looks, then check.
        self._watch_response = response
        if self.stop_event.is_set():
            _shutdown(response)
        return response

    # ---------------------------------------------------------------- event handlers (informer thread)
    def _on_upsert(self, obj: Any) -> None:
        if self._seen_event(obj):
            topo = _parse_topology(obj)
            if topo is not None:
                self._known.upsert(topo)

    def _on_delete(self, obj: Any) -> None:
        if self._seen_event(obj):
            name = _name_of(obj)
            if name is None:
                log.warning("topology watch: DELETED event without metadata.name skipped")
            else:
                self._known.delete(name)

    def _on_bookmark(self, obj: Any) -> None:
        self._seen_event(obj)

    def _seen_event(self, obj: Any) -> bool:
        """Book-keeping for one event; False for the informer's replay of a list (already applied)."""
        if self._replaying or self.stop_event.is_set():
            return False
        self._watch_events += 1
        self._gone_streak = 0
        rv = _rv_of(obj)
        if rv is not None:
            self._known.resource_version = rv
        self._backoff.reset()
        self._known.last_error = None
        return True

    def _on_error(self, exc: Any) -> None:
        """A failed watch (the informer reconnects as soon as this returns): back off."""
        if self.stop_event.is_set():
            return
        self._watch_failed = True
        status = getattr(exc, "status", None) if isinstance(exc, ApiException) else None
        if status == 410:
            # The resourceVersion is too old: the informer re-lists (``synced`` stays True; the old
            # catalog is the best answer until the list returns). At once the first time, with
            # back-off if the server keeps answering 410.
            log.info("topology watch: resourceVersion %s is gone (410); re-listing", self._known.resource_version)
            if self._gone_streak:
                self._failed("410 Gone again right after a re-list")
            self._gone_streak += 1
        elif status == 404:
            self._known.crd_missing(f"watch answered 404{_HINTS[404]}")
            self._failed(f"API error 404: {getattr(exc, 'reason', '')}{_HINTS[404]}")
        elif status is not None:
            self._failed(f"API error {status}: {exc.reason}{_HINTS.get(status, '')}")
        elif self.reachability.failed("watch topologies", exc):  # the connection broke: one line per outage
            self.stop_event.wait(self._backoff.next_delay())
        else:
            self._failed(f"{type(exc).__name__}: {exc}")

    def _failed(self, text: str) -> None:
        self._known.last_error = text
        delay = self._backoff.next_delay()
        log.warning("topology cache: %s; retrying in %.2fs from resourceVersion %s", text, delay,
                    self._known.resource_version)
        self.stop_event.wait(delay)


class LiveTopologyCatalog:
    """A :class:`~webhook.topology.objects.TopologyCatalog` kept current from the cluster by a
    ``kubernetes.informer.SharedInformer`` (see the module docstring for who does what).

    Construct with a ``kubernetes.client.ApiClient`` (or use :meth:`from_kubeconfig`), then
    :meth:`start`. ``backoff``: the :class:`Backoff` used after errors (tests inject a fast one).
    ``watch_timeout_seconds``: server-side ``timeoutSeconds`` of each watch request and the
    informer's re-list period (integer seconds >= 1; ValueError otherwise). ``reachability``:
    the outage log of the API server, shared with the other requests of the process (default: a
    new one for ``api_client``'s server). Reads (``synced``, ``crd_missing``, ``state``, ``get``,
    ``names``) are thread-safe and never block.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        backoff: Backoff | None = None,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        reachability: ApiServerReachability | None = None,
    ):
        if not isinstance(watch_timeout_seconds, int) or watch_timeout_seconds < 1:
            raise ValueError(f"watch_timeout_seconds {watch_timeout_seconds!r} must be an integer >= 1")
        self.reachability = reachability or ApiServerReachability(api_client.configuration.host)
        """The outage log of the API server (:class:`~webhook.cluster.api_server.ApiServerReachability`)."""
        self._known = TopologyState()
        self._watch = TopologyWatch(k8s_client.CustomObjectsApi(api_client), self._known, backoff or Backoff(),
                                    watch_timeout_seconds, self.reachability)

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_kubeconfig(cls, path: str | None, **kwargs: Any) -> "LiveTopologyCatalog":
        """Build from a kubeconfig file, or from the in-cluster service account when ``path``
        is None (``kubernetes.config.load_incluster_config``: the pod's token, CA and
        ``KUBERNETES_SERVICE_HOST``/``_PORT``). ``kwargs`` go to the constructor.

        Raises :class:`TopologyCacheError` naming the kubeconfig path or the in-cluster source
        when the configuration cannot be loaded.
        """
        try:
            api_client = api_client_from_kubeconfig(path)
        except KubeconfigError as exc:
            raise TopologyCacheError(str(exc)) from exc
        # one catalog per serve worker process: its requests say which (API server audit logs, tests)
        api_client.user_agent = f"segment-webhook-serve/{os.getpid()}"
        return cls(api_client, **kwargs)

    # ---------------------------------------------------------------- TopologyCatalog
    @property
    def synced(self) -> bool:
        """True once the catalog is in a known state: a list succeeded, or the Topology CRD is
        missing (404). Stays True (DESIGN.md §5 unknown-name rule, §10 readiness)."""
        return self._known.state != STATE_WAITING

    @property
    def crd_missing(self) -> bool:
        """True while the cluster has no Topology CRD (the list or watch answered 404): synced,
        no topologies (DESIGN.md §10)."""
        return self._known.state == STATE_CRD_MISSING

    @property
    def state(self) -> str:
        """``"waiting"`` (no list succeeded yet), ``"listed"`` or ``"crd-missing"``."""
        return self._known.state

    @property
    def list_count(self) -> int:
        """Successful lists so far (1 after start-up; each 410 Gone and each re-list period adds one)."""
        return self._known.list_count

    def get(self, name: str) -> Topology | None:
        """The Topology called ``name``, or None when not (yet) known."""
        return self._known.topologies.get(name)

    def names(self) -> list[str]:
        """Known Topology names, sorted."""
        return sorted(self._known.topologies)

    @property
    def last_error(self) -> str | None:
        """Why the catalog may be behind, or None (logs and /readyz ``reason``): ``API server URL
        unreachable: CAUSE`` during an outage, else the text of the most recent list/watch error
        the server answered (e.g. ``API error 403: Forbidden (RBAC: ...)``)."""
        return self.reachability.reason or self._known.last_error

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark), or None before the list."""
        return self._known.resource_version

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (no arguments, on the informer's thread; it must not block) after
        every change of the catalog: a list applied, a Topology added, changed or deleted, the
        CRD found missing. The controller queues its waiting gangs from it (one Topology watch
        for ``serve`` and the controller)."""
        self._known.add_listener(callback)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "LiveTopologyCatalog":
        """Start the informer's daemon thread (idempotent; not restartable after :meth:`stop`).
        Returns ``self``."""
        self._watch.start()
        return self

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the informer: wakes a back-off wait, closes an open watch connection (the
        library's ``Watch.stop`` shuts its socket down; the error that ends the watch is neither
        reported nor logged) and waits up to ``timeout`` seconds for the thread; no request is
        sent after this call. Returns True when the thread has ended (False only if a request was
        still being sent and did not end in time; the thread is a daemon and ends with the
        process)."""
        return self._watch.stop(timeout)

    def wait_synced(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a known state; returns ``synced``."""
        deadline = time.monotonic() + timeout
        stop = self._watch.stop_event
        while not self.synced and time.monotonic() < deadline and not stop.is_set():
            stop.wait(0.02)
        return self.synced

