"""The controller's writer of Workload API objects (DESIGN.md §9b): creates what
:func:`webhook.controller.podgroups.reconcile_groups` decided, in order.

* **Created** (201): done.
* **Exists** (409 AlreadyExists): the object is read and kept as it is (its spec is immutable,
  k8s.io/api v0.37.2). When its spec differs from the one compiled, a ``podgroup-kept`` warning is
  logged naming it (delete it, and the pods' gang is grouped again when a pod changes). An object
  without owner (made by hand) is kept too. When it belongs to other owners only (other uids: the
  gang's workload was deleted and made again under the same name, and the garbage collector has not
  deleted the old objects yet) or is being deleted, the answer is ``stale``: the runner tries again
  later.
* Any other answer or a connection error: ``failed`` (the runner tries again, rate limited).

Nothing raises out of :meth:`WorkloadObjectWriter.create`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from webhook.admission.workload_api import same_shape
from webhook.cluster.api_server import JsonClient

__all__ = ["CREATED", "FAILED", "KEPT", "PLURALS", "STALE", "WorkloadObjectWriter"]

log = logging.getLogger(__name__)

CREATED, KEPT, STALE, FAILED = "created", "kept", "stale", "failed"
#: The plural resource of each kind created (scheduling.k8s.io).
PLURALS = {"Workload": "workloads", "CompositePodGroup": "compositepodgroups", "PodGroup": "podgroups"}


def _owner_uids(obj: Mapping[str, Any]) -> set[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(ref.get("uid")) for ref in refs if isinstance(ref, Mapping)}


class WorkloadObjectWriter:
    """Creates Workload, CompositePodGroup and PodGroup objects (module docstring). ``client``: the
    process's :class:`~webhook.cluster.api_server.JsonClient`."""

    def __init__(self, client: JsonClient) -> None:
        self._client = client

    def create(self, obj: Mapping[str, Any]) -> str:
        """Create ``obj`` (a dict with ``apiVersion`` ``scheduling.k8s.io/<version>``, ``kind`` one of
        :data:`PLURALS`, ``metadata.namespace`` and ``name``). Returns :data:`CREATED`,
        :data:`KEPT`, :data:`STALE` or :data:`FAILED`."""
        group, version = str(obj["apiVersion"]).split("/", 1)
        plural = PLURALS[str(obj["kind"])]
        meta = obj["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        where = f"create {obj['kind']} {namespace}/{name}"
        answer = self._client.send(where, self._client.custom.create_namespaced_custom_object, group, version,
                                   namespace, plural, dict(obj))
        if answer.refusal is not None:
            if answer.refusal.status != 409:
                log.warning("%s: HTTP %s %s", where, answer.refusal.status, answer.refusal.reason)
                return FAILED
            return self._existing(obj, group, version, plural, namespace, name)
        if answer.body is None:
            if answer.error is not None:
                log.warning("%s: %s", where, answer.error)
            return FAILED
        log.info("created %s %s/%s", obj["kind"], namespace, name)
        return CREATED

    def _existing(self, obj: Mapping[str, Any], group: str, version: str, plural: str, namespace: str,
                  name: str) -> str:
        """The answer for ``obj`` that exists already (module docstring)."""
        where = f"read {obj['kind']} {namespace}/{name}"
        answer = self._client.send(where, self._client.custom.get_namespaced_custom_object, group, version,
                                   namespace, plural, name)
        if answer.refusal is not None:
            log.warning("%s: HTTP %s %s", where, answer.refusal.status, answer.refusal.reason)
            return FAILED
        if answer.body is None:
            if answer.error is not None:
                log.warning("%s: %s", where, answer.error)
            return FAILED
        found: dict[str, Any] = answer.body
        wanted_owners, found_owners = _owner_uids(obj), _owner_uids(found)
        if (found.get("metadata") or {}).get("deletionTimestamp") or (
                wanted_owners and found_owners and not wanted_owners & found_owners):
            log.info("%s %s/%s exists for another owner or is being deleted; trying again later",
                     obj["kind"], namespace, name)
            return STALE
        if not same_shape(obj, found):
            log.warning("podgroup-kept: %s %s/%s exists with another spec than the gang's; kept as it is (its spec "
                        "is immutable): delete it to have it made again", obj["kind"], namespace, name)
        return KEPT
