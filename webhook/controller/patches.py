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

import json
import logging
import threading
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from webhook.cluster.api_server import ApiServerReachability, Backoff
from webhook.cluster.informers import CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS
from webhook.gating.decision import Release, StrandedPod
from webhook.gating.reconcile import OwnerPatch
from webhook.gating.release import release_patch
from webhook.kube.pods import is_gated
from webhook.kube.segments_dev import GANG_STATE

__all__ = ["PATCH_ATTEMPTS", "PatchSender", "response_json"]

log = logging.getLogger(__name__)

#: How often a patch is sent for one pod before the gang is queued again, rate limited.
PATCH_ATTEMPTS = 5
_TIMEOUT = (CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)


class PatchSender:
    """Sends the patches a reconcile decided (module docstring). ``api_client``: a configured
    ``kubernetes.client.ApiClient``; ``reachability``: the process's outage log; ``errors``: the
    ``segment_controller_patch_errors`` counter (label ``code``); ``stop``: set when the process
    stops (a back-off wait ends at once)."""

    def __init__(self, api_client: k8s_client.ApiClient, reachability: ApiServerReachability, errors: Counter,
                 stop: threading.Event) -> None:
        self._core = k8s_client.CoreV1Api(api_client)
        self._custom = k8s_client.CustomObjectsApi(api_client)
        self._reachability = reachability
        self._errors = errors
        self._stop = stop

    def release(self, release: Release) -> dict[str, Any] | None:
        """Send one release patch, resent on 409/422/5xx after a fresh read (module docstring).
        Returns the pod as the API answered the accepted patch, ``None`` when not released."""
        patch: list[Any] = release.patch
        backoff = Backoff(initial=0.05, maximum=1.0)
        where = f"patch pod {release.namespace}/{release.name}"
        for attempt in range(PATCH_ATTEMPTS):
            try:
                response = self._core.patch_namespaced_pod(
                    release.name, release.namespace, patch, _preload_content=False,
                    _content_type="application/json-patch+json", _request_timeout=_TIMEOUT)
                updated = response_json(response)
                log.debug("released %s/%s to %s", release.namespace, release.name, release.node)
                self._reachability.answered(where)
                return updated
            except ApiException as exc:
                self._reachability.answered(where)
                self._errors.labels(code=str(exc.status)).inc()
                if exc.status == 404:
                    log.info("pod %s/%s was deleted while gated; skipped", release.namespace, release.name)
                    return None
                log.warning("release of %s/%s to %s: HTTP %s %s (attempt %d)", release.namespace, release.name,
                            release.node, exc.status, exc.reason, attempt + 1)
            except Exception as exc:  # noqa: BLE001 - connection errors (the outage log), timeouts
                self._errors.labels(code="error").inc()
                if not self._reachability.failed(where, exc):
                    log.warning("release of %s/%s: %s (attempt %d)", release.namespace, release.name, exc, attempt + 1)
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

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the API server has it now; ``None`` when gone or unreadable (logged)."""
        where = f"read pod {namespace}/{name}"
        try:
            pod = response_json(self._core.read_namespaced_pod(name, namespace, _preload_content=False,
                                                       _request_timeout=_TIMEOUT))
            self._reachability.answered(where)
            return pod
        except ApiException as exc:
            self._reachability.answered(where)
            if exc.status != 404:
                log.warning("reading pod %s/%s: HTTP %s", namespace, name, exc.status)
            return None
        except Exception as exc:  # noqa: BLE001
            if not self._reachability.failed(where, exc):
                log.warning("reading pod %s/%s: %s", namespace, name, exc)
            return None

    def delete_stranded(self, pod: StrandedPod) -> bool:
        """Delete one stranded pod (module docstring) so that its controller creates it again;
        True when it is gone or going, False when refused or unreachable (logged)."""
        where = f"delete pod {pod.namespace}/{pod.name}"
        options = k8s_client.V1DeleteOptions(preconditions=k8s_client.V1Preconditions(uid=pod.uid or None))
        try:
            response: Any = self._core.delete_namespaced_pod(pod.name, pod.namespace, body=options,
                                                             _preload_content=False, _request_timeout=_TIMEOUT)
            response_json(response)  # read the answer: a connection handed back unread garbles the next one
            self._reachability.answered(where)
            log.info("deleted stranded pod %s/%s (pinned to %s) for its controller to create again",
                     pod.namespace, pod.name, pod.node)
            return True
        except ApiException as exc:
            self._reachability.answered(where)
            if exc.status in (404, 409):
                return True
            self._errors.labels(code=str(exc.status)).inc()
            log.warning("%s: HTTP %s %s", where, exc.status, exc.reason)
        except Exception as exc:  # noqa: BLE001
            self._errors.labels(code="error").inc()
            if not self._reachability.failed(where, exc):
                log.warning("%s: %s", where, exc)
        return False

    def annotate_owner(self, patch: OwnerPatch) -> bool:
        """Merge-patch the owner's gang-state annotation; True when accepted."""
        target = patch.target
        where = f"patch {target.kind} {target.namespace}/{target.name}"
        group, version = target.api_version.split("/", 1)
        body = {"metadata": {"annotations": {GANG_STATE: patch.value}}}
        try:
            response: Any = self._custom.patch_namespaced_custom_object(
                group, version, target.namespace, patch.resource, target.name, body, _preload_content=False,
                _content_type="application/merge-patch+json", _request_timeout=_TIMEOUT)
            response_json(response)  # read the answer: a connection handed back unread garbles the next one
            self._reachability.answered(where)
            return True
        except ApiException as exc:
            self._reachability.answered(where)
            log.warning("%s (%s): HTTP %s %s", where, GANG_STATE, exc.status, exc.reason)
        except Exception as exc:  # noqa: BLE001
            if not self._reachability.failed(where, exc):
                log.warning("%s (%s): %s", where, GANG_STATE, exc)
        return False


def response_json(response: Any) -> dict[str, Any]:
    """The JSON object of an unparsed (``_preload_content=False``) answer; ``{}`` when not an object."""
    try:
        data = json.loads(response.data)
    finally:
        response.release_conn()
    return data if isinstance(data, dict) else {}
