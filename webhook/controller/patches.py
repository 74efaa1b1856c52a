"""The controller's patch sender (DESIGN.md §9): release patches on pods and the gang state on the
top owner workload.

* **Release** (KEP-3838): one JSON patch per gated pod. 404 (the pod was deleted while gated) →
  dropped; 409 / 422 / 5xx / connection errors → the pod is read again and, while still gated, the
  patch is rebuilt for the same node (:func:`webhook.gating.release.release_patch`) and resent, up to
  :data:`PATCH_ATTEMPTS` times with back-off.
* **Stranded pods**: one DELETE per pod with its uid as precondition (never its replacement of the
  same name); 404 (gone) and 409 (another pod of that name now) count as done.
* **Gang state**: a JSON merge patch of ``metadata.annotations["segments.dev/gang-state"]`` on the
  owner (:data:`webhook.gating.reconcile.GANG_STATE`); best effort, one warning when refused.

Nothing raises out of a sender.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kubernetes import client as k8s_client
from prometheus_client import Counter

from webhook.cluster.api_server import Backoff, JsonClient
from webhook.gating.decision import Release, StrandedPod
from webhook.gating.reconcile import OwnerPatch
from webhook.gating.release import release_patch
from webhook.kube.pods import is_gated
from webhook.kube.segments_dev import GANG_STATE
from webhook.kube.shapes import Pod

__all__ = ["PATCH_ATTEMPTS", "PatchSender"]

log = logging.getLogger(__name__)

#: How often a patch is sent for one pod before the gang is queued again, rate limited.
PATCH_ATTEMPTS = 5


class PatchSender:
    """Sends the patches a reconcile decided (module docstring). ``client``: the process's
    :class:`~webhook.cluster.api_server.JsonClient` (timeouts, answers read as JSON, the outage
    log); ``errors``: the ``segment_controller_patch_errors`` counter (label ``code``); ``stop``: set
    when the process stops (a back-off wait ends at once)."""

    def __init__(self, client: JsonClient, errors: Counter, stop: threading.Event) -> None:
        self._client = client
        self._errors = errors
        self._stop = stop

    def release(self, release: Release) -> Pod | None:
        """Send one release patch, resent on 409/422/5xx after a fresh read (module docstring).
        Returns the pod as the API answered the accepted patch, ``None`` when not released."""
        patch: list[Any] = release.patch
        backoff = Backoff(initial=0.05, maximum=1.0)
        where = f"patch pod {release.namespace}/{release.name}"
        for attempt in range(PATCH_ATTEMPTS):
            answer = self._client.send(where, self._client.core.patch_namespaced_pod, release.name, release.namespace,
                                       patch, _content_type="application/json-patch+json")
            if answer.body is not None:
                log.debug("released %s/%s to %s", release.namespace, release.name, release.node)
                updated: Pod = answer.body
                return updated
            if answer.refusal is not None:
                self._errors.labels(code=str(answer.refusal.status)).inc()
                if answer.refusal.status == 404:
                    log.info("pod %s/%s was deleted while gated; skipped", release.namespace, release.name)
                    return None
                log.warning("release of %s/%s to %s: HTTP %s %s (attempt %d)", release.namespace, release.name,
                            release.node, answer.refusal.status, answer.refusal.reason, attempt + 1)
            else:  # connection errors (the outage log), timeouts
                self._errors.labels(code="error").inc()
                if answer.error is not None:
                    log.warning("release of %s/%s: %s (attempt %d)", release.namespace, release.name, answer.error,
                                attempt + 1)
            if self._stop.wait(backoff.next_delay()):
                return None
            rebuilt = self._rebuild(release)
            if rebuilt is None:
                return None
            patch = rebuilt
        return None

    def _rebuild(self, release: Release) -> list[Any] | None:
        """The release patch rebuilt on the pod as read now; ``None`` when there is nothing to send."""
        fresh = self.read_pod(release.namespace, release.name)
        if fresh is None:
            return None
        if not is_gated(fresh):
            log.info("pod %s/%s was released meanwhile; nothing to send", release.namespace, release.name)
            return None
        try:
            return release_patch(fresh, release.node)
        except ValueError as exc:
            log.warning("pod %s/%s: %s; left to the next reconcile", release.namespace, release.name, exc)
            return None

    def read_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod as the API server has it now; ``None`` when gone or unreadable (logged)."""
        answer = self._client.send(f"read pod {namespace}/{name}", self._client.core.read_namespaced_pod, name, namespace)
        if answer.refusal is not None and answer.refusal.status != 404:
            log.warning("reading pod %s/%s: HTTP %s", namespace, name, answer.refusal.status)
        elif answer.error is not None:
            log.warning("reading pod %s/%s: %s", namespace, name, answer.error)
        pod: Pod | None = answer.body
        return pod

    def delete_stranded(self, pod: StrandedPod) -> bool:
        """Delete one stranded pod (module docstring) so that its controller creates it again;
        True when it is gone or going, False when refused or unreachable (logged)."""
        where = f"delete pod {pod.namespace}/{pod.name}"
        options = k8s_client.V1DeleteOptions(preconditions=k8s_client.V1Preconditions(uid=pod.uid or None))
        answer = self._client.send(where, self._client.core.delete_namespaced_pod, pod.name, pod.namespace, body=options)
        if answer.body is not None:
            log.info("deleted stranded pod %s/%s (pinned to %s) for its controller to create again",
                     pod.namespace, pod.name, pod.node)
            return True
        if answer.refusal is not None:
            if answer.refusal.status in (404, 409):
                return True
            self._errors.labels(code=str(answer.refusal.status)).inc()
            log.warning("%s: HTTP %s %s", where, answer.refusal.status, answer.refusal.reason)
        else:
            self._errors.labels(code="error").inc()
            if answer.error is not None:
                log.warning("%s: %s", where, answer.error)
        return False

    def annotate_owner(self, patch: OwnerPatch) -> bool:
        """Merge-patch the owner's gang-state annotation; True when accepted."""
        target = patch.target
        where = f"patch {target.kind} {target.namespace}/{target.name}"
        group, version = target.api_version.split("/", 1)
        body = {"metadata": {"annotations": {GANG_STATE: patch.value}}}
        answer = self._client.send(where, self._client.custom.patch_namespaced_custom_object, group, version,
                                   target.namespace, patch.resource, target.name, body,
                                   _content_type="application/merge-patch+json")
        if answer.refusal is not None:
            log.warning("%s (%s): HTTP %s %s", where, GANG_STATE, answer.refusal.status, answer.refusal.reason)
        elif answer.error is not None:
            log.warning("%s (%s): %s", where, GANG_STATE, answer.error)
        return answer.body is not None
