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
    positions_of = np.empty(len(gang.pods), dtype=np.int64)
    need = np.zeros((len(gang.pods), len(index.resources)), dtype=np.int64)
    rows: dict[tuple[tuple[str, int], ...], np.ndarray | None] = {}  # one request row per request shape
    for i, p in enumerate(gang.pods):
        n = positions_of[i] = assignment[p.key]
        if not index.eligible(p)[n]:
            raise PlacementBug(f"placement engine put {p.key} on {index.node_names[n]}, which it may not use (bug)")
        shape = tuple(sorted(p.requests.items()))
        if shape not in rows:
            rows[shape] = index.req_vector(p)
        row = rows[shape]
        if row is None:
            raise PlacementBug(f"placement engine placed {p.key}, which asks for a resource no node has (bug)")
        need[i] = row
    np.add.at(used, positions_of, need)
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
        for sid, shared in zip(segments, index.shared_depths(list(segments.values()))):
            if shared < segment_required:
                raise PlacementBug(f"placement engine broke the segment required level of segment {sid} (bug)")
