"""The engine's input and output types (DESIGN.md §8), shared by every phase.

Kept apart from :mod:`webhook.placement.engine` so the phase modules can import them without a
cycle; :mod:`webhook.placement.engine` re-exports them (``from webhook.placement.engine import
Gang, PodRequest, Placement``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.errors import SegmentWebhookError
from webhook.kube.core import HOSTNAME

__all__ = ["HOSTNAME", "Gang", "Placement", "PlacementError", "PodRequest", "SegmentResult"]


class PlacementError(SegmentWebhookError, ValueError):
    """The gang itself is malformed for placement (a level the topology does not have, a bad
    node affinity operator); the message names the field, the value and the fix."""


@dataclass(frozen=True)
class PodRequest:
    """One pod to place.

    ``key``: ``"<namespace>/<name>"``. ``requests``: integer milli-units per resource, including
    ``pods: 1000`` (:func:`webhook.kube.pods.pod_requests_milli`). ``segment``:
    ``(group, index)`` for a segment pod (group is the LWS replica, 0 otherwise), ``None`` for a
    pod outside segments (PyTorchJob Master, LWS leader under LeaderExcluded, any pod of an
    unsegmented workload). ``role``: a short name used in explanations (``master``, ``leader``,
    ``worker``; free text).

    Node eligibility (DESIGN.md §8 "Node eligibility per pod"), from the pod's own spec:
    ``node_selector``: ``((key, value), …)`` sorted; ``tolerations``: the PodSpec tolerations as
    frozen ``((field, value), …)`` tuples; ``node_affinity``: the required node affinity,
    ``((match_expressions, match_fields), …)`` — one entry per NodeSelectorTerm (ORed), each
    expression ``(key, operator, (values…))`` (ANDed); ``None`` when the pod has none. Build these
    with :func:`webhook.placement.eligibility.pod_request` from a Pod manifest.
    """

    key: str
    requests: Mapping[str, int]
    segment: tuple[int, int] | None = None
    tolerations: tuple[Any, ...] = ()
    node_selector: tuple[Any, ...] = ()
    node_affinity: tuple[Any, ...] | None = None
    role: str = ""


@dataclass
class Gang:
    """All pods that must be placed together, and the placement keys (label keys or ``None``)."""

    pods: list[PodRequest]
    workload_required: str | None = None
    workload_preferred: str | None = None
    segment_required: str | None = None
    segment_preferred: str | None = None
    name: str = ""


@dataclass
class SegmentResult:
    """Where one segment went: the deepest domain shared by its pods, and its level (label key,
    ``"node"`` for the implicit node level, ``"cluster"`` for none)."""

    group: int
    index: int
    domain: str
    level: str
    pods: list[str]


@dataclass
class Placement:
    """The engine's answer.

    ``assignments``: pod key → node name (empty when not placed). ``workload_level`` /
    ``workload_domain``: the deepest level all pods share. ``reason``: why not placed (per
    level), ``None`` when placed. ``objective``: the DESIGN.md §8 keys of this placement, primary
    first — ``(workload depth, segment vector, workload packing, segment packing)`` (see
    :mod:`webhook.placement.engine`). ``exact``: ``True`` when the engine proved the answer
    optimal for those keys (or proved that no placement exists); ``False`` when the search budget
    ran out first (the answer is then the best found, or "not placed" without proof).
    """

    placed: bool
    assignments: dict[str, str] = field(default_factory=dict)
    segments: list[SegmentResult] = field(default_factory=list)
    workload_domain: str | None = None
    workload_level: str | None = None
    reason: str | None = None
    objective: tuple[Any, ...] = ()
    exact: bool = True


