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
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from webhook.admission.workload_api import same_shape
from webhook.cluster.api_server import ApiServerReachability
from webhook.cluster.informers import CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS
from webhook.controller.patches import response_json

__all__ = ["CREATED", "FAILED", "KEPT", "PLURALS", "STALE", "WorkloadObjectWriter"]

log = logging.getLogger(__name__)

CREATED, KEPT, STALE, FAILED = "created", "kept", "stale", "failed"
#: The plural resource of each kind created (scheduling.k8s.io).
PLURALS = {"Workload": "workloads", "CompositePodGroup": "compositepodgroups", "PodGroup": "podgroups"}
_TIMEOUT = (CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)


def _owner_uids(obj: Mapping[str, Any]) -> set[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(ref.get("uid")) for ref in refs if isinstance(ref, Mapping)}


class WorkloadObjectWriter:
    """Creates Workload, CompositePodGroup and PodGroup objects (module docstring). ``api_client``:
    a configured ``kubernetes.client.ApiClient``; ``reachability``: the process's outage log."""

    def __init__(self, api_client: k8s_client.ApiClient, reachability: ApiServerReachability) -> None:
        self._custom = k8s_client.CustomObjectsApi(api_client)
        self._reachability = reachability

    def create(self, obj: Mapping[str, Any]) -> str:
        """Create ``obj`` (a dict with ``apiVersion`` ``scheduling.k8s.io/<version>``, ``kind`` one of
        :data:`PLURALS`, ``metadata.namespace`` and ``name``). Returns :data:`CREATED`,
        :data:`KEPT`, :data:`STALE` or :data:`FAILED`."""
        group, version = str(obj["apiVersion"]).split("/", 1)
        plural = PLURALS[str(obj["kind"])]
        meta = obj["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        where = f"create {obj['kind']} {namespace}/{name}"
        answer = self._request(where, lambda: self._custom.create_namespaced_custom_object(
            group, version, namespace, plural, dict(obj), _preload_content=False, _request_timeout=_TIMEOUT))
        if answer is None:
            return FAILED
        if isinstance(answer, ApiException):
            if answer.status != 409:
                log.warning("%s: HTTP %s %s", where, answer.status, answer.reason)
                return FAILED
            return self._existing(obj, group, version, plural, namespace, name)
        log.info("created %s %s/%s", obj["kind"], namespace, name)
        return CREATED

    def _request(self, where: str, call: Callable[[], Any]) -> Any:
        """``call()``'s answer, or the :class:`ApiException` kube-apiserver answered with, or ``None``
        when it could not be reached (logged once per outage by the reachability log)."""
        try:
            answer = call()
        except ApiException as exc:
            self._reachability.answered(where)
            return exc
        except Exception as exc:  # noqa: BLE001 - connection errors: the outage log
            if not self._reachability.failed(where, exc):
                log.warning("%s: %s", where, exc)
            return None
        self._reachability.answered(where)
        return answer

    def _existing(self, obj: Mapping[str, Any], group: str, version: str, plural: str, namespace: str,
                  name: str) -> str:
        """The answer for ``obj`` that exists already (module docstring)."""
        where = f"read {obj['kind']} {namespace}/{name}"
        answer = self._request(where, lambda: response_json(self._custom.get_namespaced_custom_object(
            group, version, namespace, plural, name, _preload_content=False, _request_timeout=_TIMEOUT)))
        if answer is None:
            return FAILED
        if isinstance(answer, ApiException):
            log.warning("%s: HTTP %s %s", where, answer.status, answer.reason)
            return FAILED
        found: dict[str, Any] = answer
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
