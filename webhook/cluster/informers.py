"""The list function the controller's ``kubernetes.informer.SharedInformer`` instances call, so
that pods and nodes arrive as plain dicts (as the API sends them) rather than typed models, which
cost about a millisecond each to build and would be turned back into dicts for the decision.

What the library needs from a list function (``kubernetes/informer/informer.py``,
``kubernetes/watch/watch.py``, kubernetes 37): called without ``watch`` it returns an object
with ``.items`` and ``.metadata.resource_version``; called with ``watch=True`` (through
``kubernetes.watch.Watch.stream``) it returns the streaming HTTP response, and ``Watch`` decodes
each event into the type the function declares it returns — its return annotation, looked up
first (``kubernetes.watch.watch._find_return_type``), so :meth:`DictLister.__call__` is annotated
``-> object``: "a plain dict", as for ``CustomObjectsApi``. Only with a declared type does
``Watch`` record each event's resourceVersion; without one (a callable object's docstring is its
class's, which names no type) every reconnect — each watch ends after ``timeoutSeconds`` — resumed
from the first list's resourceVersion, replaying old versions of pods (a released pod seen
gated again, its release sent twice: 422) and, once etcd compacted, 410 for nodes. Found on the
local control plane (benchmarks/consumers.py, 5 minutes into the run).

When the API server cannot be reached, the list function retries the request itself with
back-off (:func:`webhook.cluster.api_server.send_until_answered`: one line per outage, naming the
server and the cause), so the informer neither logs a traceback per attempt nor re-lists: a watch
is opened again from the last resourceVersion, as client-go's reflector does after "connection
refused". A list the server answers with an HTTP error is retried with the same back-off, one
warning line per attempt. Once the owner stops, a list or a watch raises
:class:`~webhook.cluster.api_server.InformerStopped` (:func:`~webhook.cluster.api_server.informer_stopped`):
no request is sent and the informer's loop ends.

No ``from __future__ import annotations`` here: the annotation must stay the class ``object``.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException

from webhook.cluster.api_server import (
    CONNECT_TIMEOUT_SECONDS,
    REQUEST_TIMEOUT,
    WATCH_TIMEOUT_SECONDS,
    ApiServerReachability,
    Backoff,
    informer_stopped,
    install_informer_traceback_filter,
    read_json,
    send_until_answered,
)

log = logging.getLogger(__name__)

#: Least time between two watch requests of one informer, seconds.
MIN_WATCH_SPACING_SECONDS = 1.0


class DictLister:
    """A list function for ``SharedInformer`` that returns plain dicts (module docstring).

    ``method``: a generated list method (``CoreV1Api.list_pod_for_all_namespaces``,
    ``CoreV1Api.list_node``). ``resource``: its resource in log lines (``"pods"``).
    ``on_listed``: called after each successful list (the informer has no "synced" flag of its
    own). ``stop``: set when the owner stops (ends a back-off or spacing wait; no request is sent
    after it). ``reachability``: the outage log of the API server. ``backoff``: the delays between
    attempts while the server cannot be reached or answers a list with an error (the owner's
    ``ERROR`` handler may share it). Watches carry ``timeoutSeconds``, bookmarks and a client read
    timeout (a dead connection is noticed); two watch requests are at least
    :data:`MIN_WATCH_SPACING_SECONDS` apart, so a server that ends watches at once cannot make the
    informer (which re-watches immediately) spin. Raises what a watch request raises when the
    server answers it with an error (``ApiException``: the informer re-lists on 410).
    """

    def __init__(self, method: Callable[..., Any], resource: str, on_listed: Callable[[], None],
                 stop: threading.Event, *, reachability: ApiServerReachability, backoff: Backoff):
        self._method = method
        self._resource = resource
        self._on_listed = on_listed
        self._stop = stop
        self._reachability = reachability
        self._backoff = backoff
        self._last_watch = 0.0
        install_informer_traceback_filter()

    def __call__(self, **kwargs: Any) -> object:
        """List (an object with ``items`` and ``metadata.resource_version``), or with
        ``watch=True`` open a watch whose events ``Watch`` decodes as plain dicts."""
        if kwargs.get("watch"):
            return self._watch(kwargs)
        return self._list(kwargs)

    def _watch(self, kwargs: dict[str, Any]) -> object:
        wait = self._last_watch + MIN_WATCH_SPACING_SECONDS - time.monotonic()
        if wait > 0:
            self._stop.wait(wait)
        self._last_watch = time.monotonic()
        kwargs.setdefault("timeout_seconds", WATCH_TIMEOUT_SECONDS)
        kwargs.setdefault("allow_watch_bookmarks", True)
        kwargs["_request_timeout"] = (CONNECT_TIMEOUT_SECONDS, kwargs["timeout_seconds"] + 60)
        response = send_until_answered(lambda: self._method(**kwargs), f"watch {self._resource}",
                                       self._reachability, self._backoff, self._stop)
        if response is None:  # stopped
            informer_stopped()
        return response

    def _list(self, kwargs: dict[str, Any]) -> object:
        kwargs["_preload_content"] = False
        kwargs["_request_timeout"] = REQUEST_TIMEOUT
        request = f"list {self._resource}"
        while True:
            try:
                response = send_until_answered(lambda: self._method(**kwargs), request, self._reachability,
                                               self._backoff, self._stop)
                if response is None:  # stopped
                    informer_stopped()
                body = read_json(response)
                if not isinstance(body, Mapping) or not isinstance(body.get("items") or [], list):
                    raise ValueError("list response has no items list")
            except (ApiException, ValueError) as exc:
                why = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
                delay = self._backoff.next_delay()
                log.warning("%s: %s; retrying in %.2fs", request, why, delay)
                self._stop.wait(delay)
                continue
            self._backoff.reset()
            meta = body.get("metadata")
            if not isinstance(meta, Mapping):
                meta = {}
            self._on_listed()
            return SimpleNamespace(items=list(body.get("items") or []),
                                   metadata=SimpleNamespace(resource_version=meta.get("resourceVersion")))
