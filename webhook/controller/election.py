"""The controller's leader election adapter: ``kubernetes.leaderelection`` with the library's own
``LeaseLock`` (no subclass), so that one replica reconciles (DESIGN.md §9: one active controller).

The library's ``LeaderElection.run`` has no stop: its follower loop retries forever and its renew
loop ends only when a renewal fails or the leading callback raises. So the leading callback
(:meth:`LeaderElector._lead`) blocks until the process stops, then raises :class:`_Stopping`: the
library stops renewing and calls back :meth:`LeaderElector._stopped_leading`, which gives the Lease
up (as client-go's ``ReleaseOnCancel``). A stopped follower's thread keeps polling until the
process exits (it is a daemon); if it acquires the Lease meanwhile, the callback raises at once and
the Lease is given up again.

The library's ``LeaseLock`` catches only HTTP errors: a Lease request that cannot reach the API
server raises out of ``run``. That failure goes to the outage log (one line per outage) and the
election runs again after a back-off from ``retry_period`` doubling to 30 s.

Logging: the library logs an INFO line at every renewal (``leader X has successfully acquired
lease``, every ``retry_period``) and at every follower's poll; :class:`RenewalLogFilter` turns
those routine lines to DEBUG. Taking and losing the Lease stay INFO / WARNING lines of this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from webhook.cluster.api_server import CONNECT_TIMEOUT_SECONDS, Backoff, JsonClient
from webhook.controller.settings import ControllerSettings
from webhook.kube.shapes import Lease

__all__ = ["BACKOFF_MAX", "BACKOFF_RESET_SECONDS", "LEASE_GIVE_UP_SECONDS", "LeaderElector", "RenewalLogFilter"]

log = logging.getLogger(__name__)

#: Read timeout of the request that gives the Lease up when the controller stops, seconds.
LEASE_GIVE_UP_SECONDS = 5.0
#: Longest back-off of the election while the API server cannot be reached, seconds, and the
#: failure-free time after which it starts again from ``retry_period`` (client-go's reflector's).
BACKOFF_MAX = 30.0
BACKOFF_RESET_SECONDS = 120.0
#: The library's routine lines (a renewal, a follower's poll), logged at DEBUG.
ROUTINE_PREFIXES = ("leader ", "yet to finish lease_duration", "Leader has entered renew loop")


class _Stopping(Exception):
    """Raised by the leading callback when the controller stops: the library then stops renewing."""


class RenewalLogFilter(logging.Filter):
    """A filter on the library's ``leaderelection`` logger: its routine INFO lines
    (:data:`ROUTINE_PREFIXES`) and its traceback of the planned stop (the leading callback's
    :class:`_Stopping`, logged by the library as "onstarted_leading raised an exception") become
    DEBUG records, shown only when this module's logger is enabled for DEBUG (``--log-level debug``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        stopping = record.exc_info is not None and isinstance(record.exc_info[1], _Stopping)
        routine = record.levelno == logging.INFO and record.getMessage().startswith(ROUTINE_PREFIXES)
        if not (stopping or routine):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return log.isEnabledFor(logging.DEBUG)


_LIBRARY_LOG = logging.getLogger("leaderelection")
if not any(isinstance(f, RenewalLogFilter) for f in _LIBRARY_LOG.filters):
    _LIBRARY_LOG.addFilter(RenewalLogFilter())


class LeaderElector:
    """Runs the election for one process (module docstring).

    ``client``: the process's :class:`~webhook.cluster.api_server.JsonClient` (its
    ``coordination`` API and outage log); ``settings``: the Lease's name, namespace, identity and
    timings; ``stop``: set when the process stops; ``on_started`` / ``on_stopped``: called when
    this process starts / stops leading.
    """

    def __init__(self, client: JsonClient, settings: ControllerSettings, stop: threading.Event,
                 on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        self._client = client
        self._settings = settings
        self._reachability = client.reachability
        self._stop = stop
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._lease: LeaseLock | None = None
        self._leading = threading.Event()
        self._renewing = threading.Event()  # set while the library renews the Lease for this process
        # set while the library does not renew the Lease for this process: cleared when it starts
        # leading, set once it stopped (and, when stopping, once the Lease was given up)
        self._not_renewing = threading.Event()
        self._not_renewing.set()

    @property
    def leading(self) -> bool:
        """True while this process holds the Lease (or leads without one, :meth:`lead_without_lease`)."""
        return self._leading.is_set()

    @property
    def lease_request(self) -> str:
        """The Lease's requests in the outage log: ``Lease NAMESPACE/NAME``."""
        return f"Lease {self._settings.lease_namespace}/{self._settings.lease_name}"

    def lead_without_lease(self) -> None:
        """Lead without an election (tests of the reconcile loop alone)."""
        self._start_leading()

    def run(self) -> None:
        """The election thread: run the library's election until the process stops."""
        s = self._settings
        backoff = Backoff(initial=s.retry_period, maximum=max(float(s.retry_period), BACKOFF_MAX),
                          reset_after=BACKOFF_RESET_SECONDS)
        while not self._stop.is_set():
            lock = LeaseLock(s.lease_name, s.lease_namespace, s.identity)
            lock.api_instance = self._client.coordination
            self._lease = lock
            config = electionconfig.Config(lock, s.lease_duration, s.renew_deadline, s.retry_period,
                                           self._lead, self._stopped_leading)
            delay: float = s.retry_period
            try:
                leaderelection.LeaderElection(config).run()
            except Exception as exc:
                if self._stop.is_set():
                    delay = 0.0  # an error of the last renewal: nothing to report, and no retry
                elif self._reachability.failed(self.lease_request, exc):
                    delay = backoff.next_delay()
                else:
                    log.exception("leader election failed; retrying")
            self._stopped_leading()
            self._stop.wait(delay)

    def _lead(self) -> None:
        """The library's ``onstarted_leading`` (its own thread): lead until the process stops."""
        self._reachability.answered(self.lease_request)
        self._renewing.set()
        self._not_renewing.clear()
        if not self._stop.is_set():
            self._start_leading()
            self._stop.wait()
        raise _Stopping(f"{self._settings.identity} stops: the Lease is given up")

    def _start_leading(self) -> None:
        s = self._settings
        log.info("%s holds Lease %s/%s", s.identity, s.lease_namespace, s.lease_name)
        self._leading.set()
        self._on_started()

    def _stopped_leading(self) -> None:
        s = self._settings
        if self._leading.is_set() and not self._stop.is_set():
            log.warning("%s lost Lease %s/%s; reconciles stop", s.identity, s.lease_namespace, s.lease_name)
        self._leading.clear()
        self._on_stopped()
        if self._renewing.is_set():
            self._renewing.clear()
            if self._stop.is_set():
                self.give_up_lease()
            self._not_renewing.set()

    def stopped(self, elect: bool) -> None:
        """After the process's ``stop`` is set: stop leading; with an election, wait until the
        library stopped renewing and the Lease was given up (at most two retry periods plus the
        give-up request; giving it up before would be undone by a renewal), so that the process
        does not exit while that request is under way."""
        self._leading.clear()
        self._on_stopped()
        s = self._settings
        if elect and not self._not_renewing.wait(s.retry_period * 2 + 1 + LEASE_GIVE_UP_SECONDS):
            self.give_up_lease()

    def give_up_lease(self) -> None:
        """Clear ``holderIdentity`` if this process holds the Lease (best effort, as client-go's
        ``ReleaseOnCancel``; a failure is one warning line). The Lease is read again first (as
        JSON, a :class:`~webhook.kube.shapes.Lease`): the library's ``LeaseLock.update`` does not
        keep the server's answer to a renewal, so its ``lease_reference`` carries the
        resourceVersion from before the last renewal, and a replace with it is refused (409
        Conflict). The replace sends the Lease as read without ``spec.holderIdentity``."""
        lock = self._lease
        identity = self._settings.identity
        known = lock.lease_reference if lock is not None else None
        if lock is None or known is None or known.spec is None or known.spec.holder_identity != identity:
            return
        timeout = (CONNECT_TIMEOUT_SECONDS, LEASE_GIVE_UP_SECONDS)
        where = f"{lock.namespace}/{lock.name}"
        request = f"give up Lease {where}"
        coordination = self._client.coordination
        answer = self._client.send(request, coordination.read_namespaced_lease, lock.name, lock.namespace,
                                   timeout=timeout)
        lease: Lease | None = answer.body
        if lease is not None:
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != identity:
                return
            spec.pop("holderIdentity")  # the Lease as read, held by nobody
            answer = self._client.send(request, coordination.replace_namespaced_lease, lock.name, lock.namespace,
                                       lease, timeout=timeout)
            if answer.body is not None:
                log.info("%s gave up Lease %s", identity, where)
                return
        if answer.refusal is not None:
            log.warning("could not give up Lease %s: HTTP %s %s", where, answer.refusal.status, answer.refusal.reason)
        elif answer.error is not None:
            log.warning("could not give up Lease %s: %s", where, answer.error)
