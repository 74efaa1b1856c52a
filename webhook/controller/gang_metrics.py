"""The controller's Prometheus metrics (DESIGN.md §9: gangs waiting, placed, infeasible, seconds to
place), in a registry of their own."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.gating.decision import INCOMPLETE, INFEASIBLE, INVALID, NEVER_FITS

__all__ = ["WAITING_KINDS", "Metrics"]

#: The kinds of a gang left gated, as the ``kind`` label of ``segment_controller_gangs_waiting``.
WAITING_KINDS = (INCOMPLETE, INFEASIBLE, NEVER_FITS, INVALID)


class Metrics:
    """The controller's Prometheus metrics, in their own registry (``registry``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.waiting = Gauge("segment_controller_gangs_waiting", "Gangs left gated, by why (incomplete, infeasible: "
                             "waiting for capacity, never-fits: not even on the empty cluster, invalid)",
                             ["kind"], registry=self.registry)
        self.placed = Counter("segment_controller_gangs_placed", "Gangs placed and released",
                              registry=self.registry)
        self.infeasible = Gauge("segment_controller_gangs_infeasible",
                                "Complete gangs the engine could not place (waiting for capacity or never fitting)",
                                registry=self.registry)
        self.never_fit = Gauge("segment_controller_gangs_never_fit",
                               "Complete gangs that cannot be placed even on the empty cluster (every node free)",
                               registry=self.registry)
        self.release_seconds = Histogram(
            "segment_controller_release_seconds", "Seconds from the creation of a gang's last pod to its release",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800), registry=self.registry)
        self.patch_errors = Counter("segment_controller_patch_errors", "Release patches that failed, by HTTP status",
                                    ["code"], registry=self.registry)
        self.leader = Gauge("segment_controller_leader", "1 while this process holds the Lease",
                            registry=self.registry)
        self.passes = Counter("segment_controller_passes", "Gang reconciles run", registry=self.registry)
        for kind in WAITING_KINDS:
            self.waiting.labels(kind=kind).set(0)

    def set_waiting(self, kinds: Mapping[str, str]) -> None:
        """Set the gauges from the kind of every gang left gated (gang key → kind)."""
        counts = dict.fromkeys(WAITING_KINDS, 0)
        for kind in kinds.values():
            counts[kind] = counts.get(kind, 0) + 1
        for kind, count in counts.items():
            self.waiting.labels(kind=kind).set(count)
        self.infeasible.set(counts[INFEASIBLE] + counts[NEVER_FITS])
        self.never_fit.set(counts[NEVER_FITS])
