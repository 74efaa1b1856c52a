"""Operator settings of ``segment-webhook controller`` and their defaults: the one home of every
default (the CLI's flags take theirs from here). Pure: no kubernetes import."""

from __future__ import annotations

import os
from dataclasses import dataclass

#: The ``coordination.k8s.io/v1`` Lease the replicas elect a leader with (deploy/overlays/with-controller).
DEFAULT_LEASE_NAME = "segment-webhook-controller"
#: The Lease's namespace when ``$POD_NAMESPACE`` is not set: deploy/'s namespace.
DEFAULT_LEASE_NAMESPACE = "segment-webhook-system"
#: The Lease of the advisory controller (``controller --advise``): its own, so that it runs beside a
#: gating controller (which target ``workload-api`` needs for its PodGroups) without taking its Lease.
DEFAULT_ADVISOR_LEASE_NAME = "segment-webhook-advisor"


def default_lease_namespace() -> str:
    """``$POD_NAMESPACE`` (the downward API, as deploy/ sets it), else :data:`DEFAULT_LEASE_NAMESPACE`."""
    return os.environ.get("POD_NAMESPACE") or DEFAULT_LEASE_NAMESPACE


@dataclass
class ControllerSettings:
    """Operator settings of the live controller.

    ``identity``: this process's name in the Lease (the pod name). ``lease_name`` /
    ``lease_namespace``: the Lease (namespace default: :func:`default_lease_namespace`).
    ``lease_duration`` / ``renew_deadline`` / ``retry_period``: seconds, as client-go (15 / 10 / 2);
    the client library requires ``lease_duration > renew_deadline > 1.2 * retry_period`` and
    ``retry_period >= 1``. ``default_topology``: topology of gangs whose pods name none.
    ``resync``: seconds between two re-queues of every gang with gated pods (a safety net; changes
    queue gangs at once). ``retry_initial`` / ``retry_max``: per-gang exponential back-off in
    seconds (client-go's ``ItemExponentialFailureRateLimiter``) after a gang could not be placed or
    a release failed. ``workers``: gangs reconciled at once (their capacity is charged one at a
    time, under one lock). ``patch_concurrency``: release patches in flight at once.
    ``incomplete_grace``: seconds a gang may stay incomplete after its newest pod was created before
    its state ("waiting for N more pods") is written (operators create a gang's pods one by one).
    ``stranded_grace``: seconds a released pod may stay ``Unschedulable`` on the node it was pinned to
    before it is deleted, for its controller to create it again and the controller to place it again
    (DESIGN.md §9; :func:`webhook.gating.decision.decide_stranded`).
    ``advise``: the advisory mode (DESIGN.md §13, :mod:`webhook.controller.advisory`): no gate, no
    binding, no pod patch; a second opinion on each gang another scheduler leaves pending.
    """

    identity: str
    lease_name: str = DEFAULT_LEASE_NAME
    lease_namespace: str = DEFAULT_LEASE_NAMESPACE
    lease_duration: int = 15
    renew_deadline: int = 10
    retry_period: int = 2
    default_topology: str | None = None
    resync: float = 60.0
    retry_initial: float = 1.0
    retry_max: float = 60.0
    workers: int = 2
    patch_concurrency: int = 8
    incomplete_grace: float = 10.0
    stranded_grace: float = 5.0
    advise: bool = False

    def check(self) -> None:
        """Raise ``ValueError`` naming the flag when a value breaks its rule (the Lease timings:
        the client library's; the others: positive)."""
        if self.retry_period < 1:
            raise ValueError(f"--retry-period {self.retry_period} must be >= 1 second")
        if self.renew_deadline <= 1.2 * self.retry_period:
            raise ValueError(f"--renew-deadline {self.renew_deadline} must be > 1.2 x --retry-period ({self.retry_period})")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(f"--lease-duration {self.lease_duration} must be > --renew-deadline ({self.renew_deadline})")
        if not 0 < self.retry_initial <= self.retry_max:
            raise ValueError(f"retry_initial {self.retry_initial} and retry_max {self.retry_max}: need 0 < initial <= max")
        if self.incomplete_grace < 0 or self.stranded_grace < 0:
            raise ValueError(f"incomplete_grace {self.incomplete_grace} and stranded_grace {self.stranded_grace} "
                             "must be >= 0 seconds")
        if self.workers < 1 or self.patch_concurrency < 1:
            raise ValueError(f"workers {self.workers} and patch_concurrency {self.patch_concurrency} must be >= 1")
