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

from webhook.cluster.api_server import Answer, JsonClient
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

    ``client``: the process's :class:`~webhook.cluster.api_server.JsonClient`; ``component``:
    ``source.component`` and ``reportingComponent``; ``instance``: ``reportingInstance`` (this replica).
    """

    def __init__(self, client: JsonClient, component: str, instance: str) -> None:
        self._client = client
        self._component = component
        self._instance = instance
        self.correlator = EventCorrelator()

    def record(self, spec: EventSpec) -> None:
        """Create the Event, or count it again when the same one was written before."""
        key = EventCorrelator.key(self._component, spec)
        seen = self.correlator.last(key)
        target = spec.target
        where = f"Event on {target.kind} {target.namespace}/{target.name}"
        answer = self._count_again(where, target.namespace, seen) if seen is not None else None
        if answer is None or answer.status == 404:  # none written yet, or it expired
            answer = self._create(where, spec)
        if answer.refusal is not None:
            log.warning("%s not written: HTTP %s %s", where, answer.refusal.status, answer.refusal.reason)
            return
        if answer.body is None:  # unreachable (the outage log has it) or another error
            if answer.error is not None:
                log.warning("%s not written: %s", where, answer.error)
            return
        written: dict[str, Any] = answer.body
        meta = written.get("metadata") or {}
        self.correlator.record(key, Observation(str(meta.get("name") or ""), int(written.get("count") or 1),
                                                str(written.get("firstTimestamp") or "")))

    def _count_again(self, where: str, namespace: str, seen: Observation) -> Answer:
        """Patch the known Event (count + 1, lastTimestamp now); answered 404 when it is gone."""
        patch: list[dict[str, Any]] = [{"op": "replace", "path": "/count", "value": seen.count + 1},
                 {"op": "replace", "path": "/lastTimestamp", "value": now_rfc3339()}]
        return self._client.send(where, self._client.core.patch_namespaced_event, seen.name, namespace, patch,
                                 _content_type="application/json-patch+json")

    def _create(self, where: str, spec: EventSpec) -> Answer:
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
        return self._client.send(where, self._client.core.create_namespaced_event, target.namespace, body)

