"""A gang's top owner workload, read up its pods' controller ``ownerReferences`` (DESIGN.md §9, last
bullet): the object a user runs ``kubectl describe`` on.

A pod's controller owner is read, then that object's, until an object has no controller owner or
its owner cannot be read (403, 404, a kind outside :data:`INTERMEDIATE` and the kind registry). The
top owner is the highest object of that chain whose kind is one of the registry's workload kinds
(:data:`webhook.admission.kinds.registry.DESCRIPTIONS`: PyTorchJob, LeaderWorkerSet, JobSet, TrainJob,
RayCluster, RayJob, RayService, MPIJob, DistributedWorkload); the chains the operators build:

* PyTorchJob / MPIJob / RayCluster / DistributedWorkload → Pod;
* TrainJob → JobSet → Job → Pod (``batch/v1`` Job in between);
* LeaderWorkerSet → leader StatefulSet → leader Pod → worker StatefulSet → worker Pod;
* RayJob / RayService → RayCluster → Pod.

Answers are kept per owner uid for :data:`OWNER_TTL_SECONDS` (a found owner, whose spec names the
pods still missing) or :data:`MISSING_TTL_SECONDS` (none: the gang's Event goes on one pod).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.admission.kinds import registry
from webhook.cluster.api_server import JsonClient
from webhook.gating.reconcile import ObjectRef, TopOwner, controller_owner
from webhook.kube.segments_dev import GANG_STATE
from webhook.kube.shapes import OwnerReference

__all__ = ["INTERMEDIATE", "MISSING_TTL_SECONDS", "OWNER_TTL_SECONDS", "OwnerResolver", "controller_owner"]

log = logging.getLogger(__name__)

#: Seconds a read owner is kept before it is read again.
OWNER_TTL_SECONDS = 30.0
#: Seconds a chain that ended without a workload is kept before it is read again.
MISSING_TTL_SECONDS = 60.0
#: Kinds read on the way up that are not workloads of the registry: (apiVersion, kind) → plural.
INTERMEDIATE: dict[tuple[str, str], str] = {
    ("v1", "Pod"): "pods", ("apps/v1", "StatefulSet"): "statefulsets", ("batch/v1", "Job"): "jobs"}
#: Longest chain followed (LWS's is the longest: 4 owners above a worker pod).
MAX_DEPTH = 6


def _workload_resource(api_version: str, kind: str) -> str | None:
    """The plural of a registry workload kind of that API group, ``None`` for any other kind."""
    description = registry.BY_KIND.get(kind)
    group = api_version.split("/")[0] if "/" in api_version else ""
    if description is None or description.group != group:
        return None
    return description.resource


class OwnerResolver:
    """Reads and remembers top owners (module docstring). ``client``: the process's
    :class:`~webhook.cluster.api_server.JsonClient`; ``clock``: monotonic seconds (tests pass a
    fake one)."""

    def __init__(self, client: JsonClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._readers: dict[str, Callable[..., Any]] = {
            "pods": client.core.read_namespaced_pod,
            "statefulsets": client.apps.read_namespaced_stateful_set,
            "jobs": client.batch.read_namespaced_job,
        }
        self._clock = clock
        self._known: dict[str, tuple[float, TopOwner | None]] = {}  # uid of the pod's owner -> (until, answer)
        self._lock = threading.Lock()

    def top_owner(self, pod: Mapping[str, Any]) -> TopOwner | None:
        """The top owner workload of ``pod`` (a dict), ``None`` when its chain holds no readable
        workload of the registry. Never raises (failures are logged)."""
        first = controller_owner(pod)
        if first is None:
            return None
        uid = str(first.get("uid") or "")
        now = self._clock()
        with self._lock:
            known = self._known.get(uid)
        if known is not None and known[0] > now:
            return known[1]
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        found = self._climb(namespace, first)
        with self._lock:
            self._known[uid] = (now + (OWNER_TTL_SECONDS if found else MISSING_TTL_SECONDS), found)
        return found

    def note_annotation(self, owner: ObjectRef, annotation: str) -> None:
        """Remember that ``owner``'s :data:`GANG_STATE` is now ``annotation`` (a patch was accepted)."""
        with self._lock:
            for uid, (until, found) in list(self._known.items()):
                if found is not None and found.ref == owner:
                    self._known[uid] = (until, TopOwner(found.ref, found.resource, found.obj, annotation))

    def _climb(self, namespace: str, ref: OwnerReference) -> TopOwner | None:
        """Follow controller owners from ``ref`` up; the highest workload read."""
        found: TopOwner | None = None
        current: OwnerReference | None = ref
        for _ in range(MAX_DEPTH):
            if current is None:
                break
            api_version, kind, name = str(current.get("apiVersion") or ""), str(current["kind"]), str(current["name"])
            obj = self._read(namespace, api_version, kind, name)
            if obj is None:
                break
            resource = _workload_resource(api_version, kind)
            if resource is not None:
                meta = obj.get("metadata") or {}
                annotations = meta.get("annotations") or {}
                value = annotations.get(GANG_STATE) if isinstance(annotations, Mapping) else None
                found = TopOwner(ObjectRef(api_version, kind, namespace, name, str(meta.get("uid") or "")), resource,
                                 obj, value if isinstance(value, str) else None)
            current = controller_owner(obj)
        return found

    def _read(self, namespace: str, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        """GET one owner as a dict; ``None`` when its kind is not followed or it cannot be read."""
        plural = INTERMEDIATE.get((api_version, kind)) or _workload_resource(api_version, kind)
        if plural is None:
            return None
        where = f"read {kind} {namespace}/{name}"
        if plural in self._readers and (api_version, kind) in INTERMEDIATE:
            answer = self._client.send(where, self._readers[plural], name, namespace)
        else:
            group, version = api_version.split("/", 1)
            answer = self._client.send(where, self._client.custom.get_namespaced_custom_object, group, version,
                                       namespace, plural, name)
        if answer.refusal is not None:
            log.info("%s: HTTP %s %s; the gang's state goes on one of its pods", where, answer.refusal.status,
                     answer.refusal.reason)
        elif answer.error is not None:
            log.warning("%s: %s", where, answer.error)
        obj: dict[str, Any] | None = answer.body or None
        return obj
