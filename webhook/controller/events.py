"""The controller's event recorder: Events deduplicated and counted as client-go's does.

client-go's ``EventCorrelator`` (``k8s.io/client-go/tools/record/events_cache.go``, ``eventLogger``;
``event.go``, ``recordToSink`` / ``recordEvent``; at ``32ce75a7``), which kube-scheduler's ``FailedScheduling``
Events go through: an Event is keyed by its source, its ``involvedObject`` (apiVersion, kind,
namespace, name, uid), its type, reason and message. The first occurrence of a key is created;
every later one patches the Event created for it (``count`` + 1, ``lastTimestamp`` now), so
``kubectl describe`` shows one line ``(xN over T)``. A patch answered 404 (the Event expired: the
API server keeps Events one hour by default) creates it anew with count 1. The keys are kept in an
LRU of :data:`CACHE_ENTRIES` (client-go's ``maxLruCacheEntries``). Failures are logged, never
raised: an Event is best effort.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from webhook.cluster.api_server import ApiServerReachability
from webhook.cluster.informers import CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS
from webhook.controller.patches import response_json
from webhook.gating.reconcile import EventSpec

__all__ = ["CACHE_ENTRIES", "EventCorrelator", "EventRecorder", "Observation"]

log = logging.getLogger(__name__)

#: Keys remembered (client-go's ``maxLruCacheEntries``).
CACHE_ENTRIES = 4096


@dataclass(frozen=True)
class Observation:
    """The Event written for a key: its ``name`` (the API server's), ``count`` and ``first``
    timestamp (RFC 3339)."""

    name: str
    count: int
    first: str


class EventCorrelator:
    """The key → :class:`Observation` memory of the recorder (client-go's ``eventLogger``): an
    LRU of ``capacity`` keys. Thread-safe; pure (no I/O)."""

    def __init__(self, capacity: int = CACHE_ENTRIES) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[tuple[str, ...], Observation] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(component: str, spec: EventSpec) -> tuple[str, ...]:
        """client-go's ``getEventKey``: source, involvedObject, type, reason, message."""
        target = spec.target
        return (component, target.api_version, target.kind, target.namespace, target.name, target.uid,
                spec.type, spec.reason, spec.message)

    def last(self, key: tuple[str, ...]) -> Observation | None:
        """The Event written for ``key``, ``None`` when none is known."""
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
            return seen

    def record(self, key: tuple[str, ...], observation: Observation) -> None:
        """Remember the Event the API server answered for ``key``."""
        with self._lock:
            self._seen[key] = observation
            self._seen.move_to_end(key)
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)


def now_rfc3339() -> str:
    """The current UTC time as the API writes it (``2026-01-02T03:04:05Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Write :class:`~webhook.gating.reconcile.EventSpec` s as ``v1`` Events (module docstring).

    ``api_client``: a ``kubernetes.client.ApiClient``; ``component``: ``source.component`` and
    ``reportingComponent``; ``instance``: ``reportingInstance`` (this replica); ``reachability``:
    the process's outage log.
    """

    def __init__(self, api_client: k8s_client.ApiClient, component: str, instance: str,
                 reachability: ApiServerReachability) -> None:
        self._core = k8s_client.CoreV1Api(api_client)
        self._component = component
        self._instance = instance
        self._reachability = reachability
        self.correlator = EventCorrelator()

    def record(self, spec: EventSpec) -> None:
        """Create the Event, or count it again when the same one was written before."""
        key = EventCorrelator.key(self._component, spec)
        seen = self.correlator.last(key)
        target = spec.target
        where = f"Event on {target.kind} {target.namespace}/{target.name}"
        try:
            answer = None
            if seen is not None:
                answer = self._count_again(target.namespace, seen)
            if answer is None:
                answer = self._create(spec)
            self._reachability.answered(where)
        except ApiException as exc:
            self._reachability.answered(where)
            log.warning("%s not written: HTTP %s %s", where, exc.status, exc.reason)
            return
        except Exception as exc:  # noqa: BLE001 - connection errors: the outage log
            if not self._reachability.failed(where, exc):
                log.warning("%s not written: %s", where, exc)
            return
        meta = answer.get("metadata") or {}
        self.correlator.record(key, Observation(str(meta.get("name") or ""), int(answer.get("count") or 1),
                                                str(answer.get("firstTimestamp") or "")))

    def _count_again(self, namespace: str, seen: Observation) -> dict[str, Any] | None:
        """Patch the known Event (count + 1, lastTimestamp now); ``None`` when it is gone (404)."""
        patch: list[dict[str, Any]] = [{"op": "replace", "path": "/count", "value": seen.count + 1},
                 {"op": "replace", "path": "/lastTimestamp", "value": now_rfc3339()}]
        try:
            response = self._core.patch_namespaced_event(
                seen.name, namespace, patch, _preload_content=False, _content_type="application/json-patch+json",
                _request_timeout=(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return response_json(response)

    def _create(self, spec: EventSpec) -> dict[str, Any]:
        target = spec.target
        now = now_rfc3339()
        body: Any = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{target.name}.", "namespace": target.namespace},
            "involvedObject": {"apiVersion": target.api_version, "kind": target.kind, "namespace": target.namespace,
                               "name": target.name, "uid": target.uid},
            "reason": spec.reason, "message": spec.message, "type": spec.type,
            "source": {"component": self._component}, "reportingComponent": self._component,
            "reportingInstance": self._instance, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        response = self._core.create_namespaced_event(target.namespace, body, _preload_content=False,
                                                      _request_timeout=(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS))
        return response_json(response)

