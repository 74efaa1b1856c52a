"""Live catalog of KAI Scheduler ``Topology`` objects: list + watch with the ``kubernetes`` client.

:class:`LiveTopologyCatalog` implements :class:`webhook.core.topology.TopologyCatalog`
(``synced``, ``get``, ``names``) from the cluster's ``kai.scheduler/v1alpha1`` ``topologies``
(cluster-scoped; DESIGN.md §2, §4.4). It follows the list/watch protocol of the Kubernetes API
(the informer pattern of client-go / controller-runtime), in one daemon thread:

1. **list** ``GET /apis/kai.scheduler/v1alpha1/topologies``; the result replaces the whole
   catalog and its ``metadata.resourceVersion`` is the watch's starting point. ``synced`` turns
   True after the first successful list and stays True.
2. **watch** from that resourceVersion with ``allowWatchBookmarks=true`` and a server-side
   ``timeoutSeconds``; ADDED / MODIFIED / DELETED events update the catalog, BOOKMARK events only
   advance the resourceVersion.
3. When the watch ends (server timeout) or the connection drops, watch again **from the last
   resourceVersion seen** (no re-list).
4. **410 Gone** (an ``ERROR`` watch event with ``code: 410``, or an HTTP 410 ``ApiException``):
   the resourceVersion is too old; **re-list**, then watch from the new one.
5. Any other error: wait with exponential back-off and jitter (0.2 s doubling to 30 s by
   default, :class:`Backoff`), then continue from step 3 (or step 1 if never listed). The
   back-off resets after a successful list or a watch that delivered an event.

Every update builds a new dict and swaps it in with one assignment, so readers (admission
worker threads) never lock and always see a complete catalog. A malformed Topology (no name,
no levels, an invalid label key; :meth:`Topology.from_object`) is skipped with a logged warning;
the thread never dies of bad data.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from types import MappingProxyType
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from webhook.core.topology import TOPOLOGY_API_VERSION, TOPOLOGY_KIND, Topology, TopologyError

log = logging.getLogger(__name__)

GROUP = "kai.scheduler"
VERSION = "v1alpha1"
PLURAL = "topologies"

#: Server-side watch timeout in seconds (client-go uses 5-10 min); the watch then resumes.
DEFAULT_WATCH_TIMEOUT_SECONDS = 300
#: HTTP connect timeout in seconds for list and watch requests.
CONNECT_TIMEOUT_SECONDS = 10.0
#: Read timeout of a list request, in seconds.
LIST_READ_TIMEOUT_SECONDS = 30.0
#: Extra read time beyond the watch's ``timeoutSeconds`` before the client gives up on a silent
#: connection (bookmarks arrive about once a minute, so a healthy watch is never that quiet).
WATCH_READ_SLACK_SECONDS = 60.0


#: Operator hints appended to list/watch errors, by HTTP status.
_HINTS = {
    403: " (RBAC: the service account needs get/list/watch on topologies.kai.scheduler)",
    404: " (is the KAI Scheduler Topology CRD topologies.kai.scheduler installed?)",
}


class TopologyCacheError(RuntimeError):
    """The cache cannot be set up (no usable kubeconfig / in-cluster configuration).

    The message names the source that failed (the kubeconfig path, or the in-cluster service
    account environment)."""


class Backoff:
    """Capped exponential back-off with jitter.

    ``next_delay()`` returns ``min(maximum, initial * factor**n)`` seconds for the n-th
    consecutive failure (n from 0), multiplied by a random factor in ``[1 - jitter, 1]`` (so the
    replicas of the webhook do not retry in lock-step). ``reset()`` starts again from
    ``initial``. Defaults: 0.2 s doubling to 30 s, jitter 0.5. ``rng``: a ``random.Random`` (a
    seeded one makes tests repeatable). Raises ``ValueError`` for non-positive values,
    ``maximum < initial``, ``factor < 1`` or ``jitter`` outside ``[0, 1]``.
    """

    def __init__(
        self,
        initial: float = 0.2,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
    ):
        if not initial > 0 or maximum < initial or factor < 1 or not 0 <= jitter <= 1:
            raise ValueError(
                f"Backoff(initial={initial}, maximum={maximum}, factor={factor}, jitter={jitter}): "
                "need initial > 0, maximum >= initial, factor >= 1, 0 <= jitter <= 1"
            )
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._failures = 0

    def next_delay(self) -> float:
        """Seconds to wait after one more consecutive failure."""
        base = min(self.maximum, self.initial * self.factor ** min(self._failures, 64))
        self._failures += 1
        return base * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        """Forget earlier failures (after a success)."""
        self._failures = 0


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
        if isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
            return meta["name"]
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


class LiveTopologyCatalog:
    """A :class:`~webhook.core.topology.TopologyCatalog` kept current from the cluster.

    Construct with a ``kubernetes.client.ApiClient`` (or use :meth:`from_kubeconfig`), then
    :meth:`start`. ``backoff``: the :class:`Backoff` used after errors (tests inject a fast one).
    ``watch_timeout_seconds``: server-side ``timeoutSeconds`` of each watch request (integer
    seconds >= 1). Reads (``synced``, ``get``, ``names``) are thread-safe and never block.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        backoff: Backoff | None = None,
        watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT_SECONDS,
    ):
        if not isinstance(watch_timeout_seconds, int) or watch_timeout_seconds < 1:
            raise ValueError(f"watch_timeout_seconds {watch_timeout_seconds!r} must be an integer >= 1")
        self._api = k8s_client.CustomObjectsApi(api_client)
        self._backoff = backoff or Backoff()
        self._watch_timeout = watch_timeout_seconds
        self._topologies: Mapping[str, Topology] = MappingProxyType({})
        self._synced = False
        self._resource_version: str | None = None
        self._write_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: k8s_watch.Watch | None = None
        self.list_count = 0
        """Successful lists so far (1 after start-up; each 410 Gone adds one)."""
        self.last_error: str | None = None
        """Text of the most recent list/watch error, or None (for logs and /readyz detail)."""

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_kubeconfig(cls, path: str | None, **kwargs: Any) -> "LiveTopologyCatalog":
        """Build from a kubeconfig file, or from the in-cluster service account when ``path``
        is None (``kubernetes.config.load_incluster_config``: the pod's token, CA and
        ``KUBERNETES_SERVICE_HOST``/``_PORT``). ``kwargs`` go to the constructor.

        Raises :class:`TopologyCacheError` naming the kubeconfig path or the in-cluster source
        when the configuration cannot be loaded.
        """
        configuration = k8s_client.Configuration()
        try:
            if path is None:
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
        except (k8s_config.ConfigException, OSError, TypeError, ValueError, AttributeError) as exc:
            source = "in-cluster service account (KUBERNETES_SERVICE_HOST, token, ca.crt)" if path is None else f"kubeconfig {path!r}"
            # The client's own message for a file that is not a kubeconfig mapping is a Python
            # internal one ("'str' object does not support item assignment"): say what is wrong.
            why = (str(exc) if isinstance(exc, (k8s_config.ConfigException, OSError))
                   else "not a kubeconfig (a YAML mapping with clusters, users and contexts)")
            raise TopologyCacheError(f"cannot load {source}: {why}") from exc
        return cls(k8s_client.ApiClient(configuration), **kwargs)

    # ---------------------------------------------------------------- TopologyCatalog
    @property
    def synced(self) -> bool:
        """True once the first list succeeded (stays True, DESIGN.md §5 unknown-name rule)."""
        return self._synced

    def get(self, name: str) -> Topology | None:
        """The Topology called ``name``, or None when not (yet) known."""
        return self._topologies.get(name)

    def names(self) -> list[str]:
        """Known Topology names, sorted."""
        return sorted(self._topologies)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark), or None before the list."""
        return self._resource_version

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "LiveTopologyCatalog":
        """Start the list/watch daemon thread (idempotent). Returns ``self``."""
        if self._thread is None or not self._thread.is_alive():
            self._stop_event.clear()
            self._thread = threading.Thread(target=self._run, name="topology-cache", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread: closes an open watch connection and waits up to ``timeout`` seconds.

        The watch is closed repeatedly until the thread ends, because a ``stop()`` that lands
        while a watch request is still being sent would otherwise be lost."""
        self._stop_event.set()
        thread = self._thread
        deadline = time.monotonic() + timeout
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            w = self._watch
            if w is not None:
                w.stop()
            thread.join(0.05)

    def wait_synced(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for the first successful list; returns ``synced``."""
        deadline = time.monotonic() + timeout
        while not self._synced and time.monotonic() < deadline and not self._stop_event.is_set():
            self._stop_event.wait(0.02)
        return self._synced

    # ---------------------------------------------------------------- the loop
    def _run(self) -> None:
        gone_streak = 0  # consecutive 410s without a watch event in between
        while not self._stop_event.is_set():
            try:
                if self._resource_version is None:
                    self._list()
                events = self._watch_once()
                if events:
                    gone_streak = 0
            except ApiException as exc:
                if exc.status == 410:
                    # The resourceVersion is too old: re-list (``synced`` stays True; the old
                    # catalog is the best answer until the list returns). Re-list at once the
                    # first time, with back-off if the server keeps answering 410.
                    log.info("topology watch: resourceVersion %s is gone (410); re-listing", self._resource_version)
                    self._resource_version = None
                    if gone_streak:
                        self._failed("410 Gone again right after a re-list")
                    gone_streak += 1
                    continue
                if self._stop_event.is_set():
                    break
                self._failed(f"API error {exc.status}: {exc.reason}{_HINTS.get(exc.status, '')}")
            except Exception as exc:  # noqa: BLE001 - the thread must survive anything
                if self._stop_event.is_set():
                    break  # stop() closed the watch connection
                self._failed(f"{type(exc).__name__}: {exc}")

    def _failed(self, text: str) -> None:
        self.last_error = text
        delay = self._backoff.next_delay()
        log.warning("topology cache: %s; retrying in %.2fs from resourceVersion %s", text, delay, self._resource_version)
        self._stop_event.wait(delay)

    def _list(self) -> None:
        result = self._api.list_cluster_custom_object(
            GROUP, VERSION, PLURAL,
            _request_timeout=(CONNECT_TIMEOUT_SECONDS, LIST_READ_TIMEOUT_SECONDS),
        )
        if not isinstance(result, Mapping) or not isinstance(result.get("items", []), list):
            raise ValueError("list response is not a TopologyList (no items list)")
        fresh: dict[str, Topology] = {}
        for item in result.get("items") or []:
            topo = _parse_topology(item)
            if topo is not None:
                fresh[topo.name] = topo
        rv = _rv_of(result)
        with self._write_lock:
            self._topologies = MappingProxyType(fresh)
            self._resource_version = rv
            self._synced = True
            self.list_count += 1
        self._backoff.reset()
        self.last_error = None
        log.info("topology cache: listed %d topologies at resourceVersion %s: %s", len(fresh), rv, sorted(fresh))

    def _watch_once(self) -> int:
        """One watch request from the current resourceVersion; returns the number of events.

        Returns normally when the server ends the watch (``timeoutSeconds``) or on :meth:`stop`;
        raises on errors (``ApiException`` 410 for an expired resourceVersion, urllib3 errors
        for a dropped connection). A watch that the server closes within a second without any
        event counts as an error (back-off), so a misbehaving server cannot cause a busy loop.
        """
        kwargs: dict[str, Any] = {
            "allow_watch_bookmarks": True,
            "timeout_seconds": self._watch_timeout,
            "_request_timeout": (CONNECT_TIMEOUT_SECONDS, self._watch_timeout + WATCH_READ_SLACK_SECONDS),
        }
        if self._resource_version is not None:
            kwargs["resource_version"] = self._resource_version
        w = k8s_watch.Watch()
        self._watch = w
        events = 0
        started = time.monotonic()
        try:
            if self._stop_event.is_set():
                return 0
            for event in w.stream(self._api.list_cluster_custom_object, GROUP, VERSION, PLURAL, **kwargs):
                events += 1
                self._apply(event)
                if self._stop_event.is_set():
                    break
        finally:
            self._watch = None
        if not events and time.monotonic() - started < 1.0 and not self._stop_event.is_set():
            self._failed("watch closed by the server without any event")
        return events

    def _apply(self, event: Any) -> None:
        """Apply one watch event (a dict from ``kubernetes.watch.Watch``)."""
        if not isinstance(event, Mapping):
            return
        kind = event.get("type")
        obj = event.get("raw_object", event.get("object"))
        rv = _rv_of(obj)
        if kind == "BOOKMARK":
            pass
        elif kind in ("ADDED", "MODIFIED"):
            topo = _parse_topology(obj)
            if topo is not None:
                with self._write_lock:
                    updated = dict(self._topologies)
                    updated[topo.name] = topo
                    self._topologies = MappingProxyType(updated)
        elif kind == "DELETED":
            name = _name_of(obj)
            if name is None:
                log.warning("topology watch: DELETED event without metadata.name skipped")
            elif name in self._topologies:
                with self._write_lock:
                    updated = dict(self._topologies)
                    del updated[name]
                    self._topologies = MappingProxyType(updated)
        else:
            log.warning("topology watch: unknown event type %r skipped", kind)
        if rv is not None:
            self._resource_version = rv
        self._backoff.reset()
        self.last_error = None
