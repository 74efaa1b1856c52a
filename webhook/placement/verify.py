"""Verify — an independent check of a placement against the hard rules (DESIGN.md §8).

Run on every answer before it is returned: each pod placed once, on a node it may go to
(:mod:`webhook.placement.eligibility`), no node over its free capacity on a resource its
pods request, all pods inside one domain of the workload required level, the pods of each
segment inside one domain of the segment required level. A failure is an engine bug
(:class:`PlacementBug`), never a silently wrong answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from webhook.errors import EXIT_BUG, SegmentWebhookError
from webhook.placement.cluster_index import ClusterIndex
from webhook.placement.model import Gang


class PlacementBug(SegmentWebhookError, RuntimeError):
    """The engine produced a placement that breaks a hard rule (a bug; please report it)."""

    exit_code = EXIT_BUG


def verify(index: ClusterIndex, gang: Gang, assignment: dict[str, int], required: int, segment_required: int) -> None:
    """Raise :class:`PlacementBug` naming the broken rule; ``assignment``: pod key → node position;
    ``required`` / ``segment_required``: depths (0 = none)."""
    if set(assignment) != {p.key for p in gang.pods} or len(assignment) != len(gang.pods):
        raise PlacementBug("placement engine did not place every pod exactly once (bug)")
    used = np.zeros_like(index.free)
    for p in gang.pods:
        n = assignment[p.key]
        if not index.eligible(p)[n]:
            raise PlacementBug(f"placement engine put {p.key} on {index.node_names[n]}, which it may not use (bug)")
        used[n] += index.req_vector(p)
    over = (used > 0) & (used > index.free)
    if over.any():
        n, c = map(int, np.argwhere(over)[0])
        raise PlacementBug(f"placement engine broke the capacity of {index.node_names[n]} on {index.resources[c]} (bug)")
    positions = list(assignment.values())
    if required and index.shared_depth(positions) < required:
        raise PlacementBug("placement engine broke the workload required level (bug)")
    if segment_required:
        segments: dict[tuple[Any, ...], list[int]] = {}
        for p in gang.pods:
            if p.segment is not None:
                segments.setdefault(p.segment, []).append(assignment[p.key])
        for sid, nodes in segments.items():
            if index.shared_depth(nodes) < segment_required:
                raise PlacementBug(f"placement engine broke the segment required level of segment {sid} (bug)")
