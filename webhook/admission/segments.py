"""Segment index arithmetic (DESIGN.md §7) as small pure functions.

Every function here takes plain integers and returns plain integers (or ``None``); nothing reads
Kubernetes objects. The pod handler (``webhook.admission.kinds.pod``) parses labels and annotations and
calls these; the placement engine may call them to expand a workload into its segments.

Terms: *segment size* ``S`` (pods per segment), *replica index* ``i`` (training-operator
``training.kubeflow.org/replica-index``, 0-based among the Workers), *worker index* ``w`` (LWS
``leaderworkerset.sigs.k8s.io/worker-index``, 0 is the leader), *group size* ``R`` (LWS
``spec.leaderWorkerTemplate.size``, leader included).
"""

from __future__ import annotations

import re

from webhook.kube.kai_scheduler import POLICY_LEADER_EXCLUDED, POLICY_LEADER_WORKER

_PLAIN_DECIMAL = re.compile(r"[0-9]+")


#: Upper bound of :func:`parse_plain_decimal`: larger values saturate to it.
SATURATION = 10**18


def parse_plain_decimal(value: object) -> int | None:
    """Parse a Kubernetes annotation/label value that must be a plain decimal integer.

    Returns the integer for a ``str`` matching ``^[0-9]+$`` (ASCII digits only, leading zeros
    allowed: ``"04"`` → 4), else ``None``: ``"4x"``, ``"-1"``, ``"+4"``, ``"1e3"``, ``" 4"``,
    ``"4 "``, ``""``, ``"٤"`` (non-ASCII digit) and every non-string value give ``None``.
    Rule source: DESIGN.md §5 (segment size must be a plain decimal integer).

    Values above :data:`SATURATION` (10**18) saturate to it, so a 5,000-digit value costs no
    big-integer conversion (Python refuses more than 4,300 digits) and is still denied by the
    range rules (a segment size above the replica count, an index above int32).
    """
    if isinstance(value, str) and _PLAIN_DECIMAL.fullmatch(value) and value.isascii():
        significant = value.lstrip("0")
        return SATURATION if len(significant) > 18 else int(significant or "0")
    return None


def _check(size: int, index: int, index_name: str) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"segment size must be an integer >= 1, got {size!r}")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"{index_name} must be an integer >= 0, got {index!r}")


def training_segment(replica_index: int, size: int) -> int:
    """Segment of a PyTorchJob / native Worker pod: ``replica_index // size``.

    ``replica_index``: the Worker's 0-based ``training.kubeflow.org/replica-index``;
    ``size``: pods per segment (>= 1). Returns the 0-based segment index. The last segment may be
    partial: 10 workers, S=4 → {0-3} {4-7} {8-9} (DESIGN.md §7). Raises ``ValueError`` for a
    negative index or a size < 1.
    """
    _check(size, replica_index, "replica index")
    return replica_index // size


def lws_leader_in_first_segment(group_size: int, size: int) -> bool:
    """True when LWS counts the leader as an *extra* pod of segment 0 for its workers' indices:
    ``(R - 1) % S == 0 and R % S != 0`` (DESIGN.md §7; LWS pod webhook ``getSubGroupIndex``).

    ``group_size``: R, pods per LWS group including the leader (>= 1); ``size``: S (>= 1).
    """
    return (group_size - 1) % size == 0 and group_size % size != 0


def lws_segment(worker_index: int, group_size: int, size: int, policy: str = POLICY_LEADER_WORKER) -> int | None:
    """Segment of one pod of an LWS group, or ``None`` for a leader excluded from segmentation.

    ``worker_index``: w from ``leaderworkerset.sigs.k8s.io/worker-index`` (0 = leader, < R);
    ``group_size``: R (>= 1); ``size``: S (>= 1); ``policy``: ``LeaderWorker`` or
    ``LeaderExcluded``. Rules (DESIGN.md §7, the same as LWS's own ``subgroup-index`` label):

    * leader (w = 0): segment 0 under LeaderWorker, ``None`` under LeaderExcluded;
    * worker (w >= 1): ``(w - 1) // S`` when :func:`lws_leader_in_first_segment`, else ``w // S``.

    Examples: R=5,S=2,LeaderWorker → {L,1,2} {3,4}; R=4,S=2 → {L,1} {2,3};
    R=9,S=4 → {L,1,2,3,4} {5..8}; R=5,S=2,LeaderExcluded → L alone, {1,2} {3,4}.
    Raises ``ValueError`` for an unknown policy, w < 0, w >= R, R < 1 or S < 1.
    """
    _check(size, worker_index, "worker index")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group size must be an integer >= 1, got {group_size!r}")
    if worker_index >= group_size:
        raise ValueError(f"worker index {worker_index} is outside a group of {group_size} pods")
    if policy not in (POLICY_LEADER_WORKER, POLICY_LEADER_EXCLUDED):
        raise ValueError(f"unknown leader policy {policy!r}")
    if worker_index == 0:
        return None if policy == POLICY_LEADER_EXCLUDED else 0
    if lws_leader_in_first_segment(group_size, size):
        return (worker_index - 1) // size
    return worker_index // size


def segment_count(pods: int, size: int) -> int:
    """Number of segments for ``pods`` segmented pods of ``size`` each (ceiling division; the
    last segment may be partial). ``segment_count(10, 4) == 3``. Raises ``ValueError`` for
    size < 1 or pods < 0. For an LWS group use :func:`lws_segment_count` (the leader may be an
    extra pod of segment 0)."""
    _check(size, pods, "pod count")
    return -(-pods // size)


def lws_segment_count(group_size: int, size: int, policy: str = POLICY_LEADER_WORKER) -> int:
    """Number of segments of one LWS group of ``group_size`` pods (R, leader included), counted
    the way :func:`lws_segment` assigns them, from the first pod's segment to the last (DESIGN.md
    §7). When the leader is an extra pod of segment 0 (:func:`lws_leader_in_first_segment`)
    R=20001, S=2 makes 10000 segments, not 10001; R=5, S=2 → {L,1,2} {3,4}: 2. A LeaderExcluded
    group of 1 (the leader alone) has none. Raises ``ValueError`` like :func:`lws_segment`."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group size must be an integer >= 1, got {group_size!r}")
    last = lws_segment(group_size - 1, group_size, size, policy)
    if last is None:
        return 0
    first = lws_segment(1, group_size, size, policy) if policy == POLICY_LEADER_EXCLUDED else 0
    return last - (first or 0) + 1  # first is 1 only for LeaderExcluded with S = 1 (a worker: never None)


def smallest_size_within(most_segments: int, pods: int, *, group_size: int | None = None,
                         policy: str = POLICY_LEADER_WORKER, lws_validates: bool = False) -> int | None:
    """The smallest segment size >= 2 that makes at most ``most_segments`` segments of ``pods``
    segmented pods AND passes the size rules that apply (the fix of ``too-many-segments``), or
    ``None`` when there is none.

    Training kinds (``group_size`` None): ``ceil(pods / most_segments)``. An LWS group of
    ``group_size`` pods: segments counted by :func:`lws_segment_count` (the leader may be an
    extra pod of segment 0), and under LeaderExcluded only divisors of R - 1 (DESIGN.md §5), with
    ``lws_validates`` (the object sets ``subGroupSize``, which LWS validates and the webhook sets
    to the segment size, §3) only sizes of :func:`lws_accepted_sizes`. R=30011, subGroupSize set:
    5 (4 makes few enough segments but LWS rejects it). O(sqrt(R))."""
    if group_size is None:
        return max(2, -(-pods // most_segments))
    # No size below this one makes few enough segments, even with the leader as an extra pod.
    floor = max(2, -(-(group_size - 1) // most_segments))
    excluded = policy == POLICY_LEADER_EXCLUDED
    if excluded or lws_validates:
        candidates = lws_accepted_sizes(group_size, leader_excluded=excluded, at_least=floor, most=2)
    else:  # any size; a divisor of R - 1 may make one segment fewer (the leader joins segment 0)
        candidates = [max(2, -(-group_size // most_segments))] + divisors(group_size - 1, most=1, at_least=floor)
    fits = [s for s in candidates if s <= pods and lws_segment_count(group_size, s, policy) <= most_segments]
    return min(fits, default=None)


def lws_segmented_pods(group_size: int, policy: str) -> int:
    """Pods of one LWS group that are segmented: R under LeaderWorker, R - 1 under
    LeaderExcluded (DESIGN.md §5: the replica count a segment size is checked against)."""
    return group_size - 1 if policy == POLICY_LEADER_EXCLUDED else group_size


def training_subgroup_name(segment: int | None) -> str:
    """``kai.scheduler/subgroup-name`` of a PyTorchJob / native pod: ``worker-<k>`` for a Worker
    in segment k, ``master`` for ``None`` (the Master is never segmented; DESIGN.md §2)."""
    return "master" if segment is None else f"worker-{segment}"


def lws_subgroup_name(segment: int | None, *, leader: bool = False, policy: str = POLICY_LEADER_WORKER) -> str:
    """``kai.scheduler/subgroup-name`` of an LWS pod: the LEAF subgroup KAI's pod-grouper puts it
    in (DESIGN.md §2; KAI ``lws_grouper.go`` at d5bc503).

    ``segment``: the pod's segment (``None`` for a leader excluded from segments); ``leader``: the
    pod is the group's leader (worker index 0); ``policy``: ``LeaderWorker`` / ``LeaderExcluded``.
    The leader is always ``leader``; under LeaderWorker the other pods of segment 0 are
    ``workers`` (KAI nests ``leader`` and ``workers`` under a parent ``segment-0``); every other
    pod is ``segment-<k>``.
    """
    if leader or segment is None:
        return "leader"
    if segment == 0 and policy == POLICY_LEADER_WORKER:
        return "workers"
    return f"segment-{segment}"


def divisors(n: int, *, most: int, at_least: int = 2) -> list[int]:
    """The smallest ``most`` divisors of ``n`` that are >= ``at_least`` (and >= 2), ascending (for
    the fix texts of the LWS rules, DESIGN.md §3, §5). ``n`` >= 0; ``divisors(4, most=8)`` →
    ``[2, 4]``; ``divisors(30010, most=1, at_least=4)`` → ``[5]``; ``0`` → ``[]``.

    O(sqrt(n)) steps: at most 46,341 for an int32 LWS size (the handlers bound sizes to int32)."""
    at_least = max(at_least, 2)
    if n < at_least:
        return []
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            if d >= at_least:
                small.append(d)
            if d * d != n and n // d >= at_least:
                large.append(n // d)
        d += 1
    return (small + large[::-1])[:most]


def lws_accepted_sizes(group_size: int, *, leader_excluded: bool = False, at_least: int = 2,
                       most: int = 8) -> list[int]:
    """The smallest ``most`` segment sizes >= ``at_least`` (and >= 2) that LWS accepts as
    ``subGroupSize`` for a group of ``group_size`` pods, ascending: divisors of R or of R - 1
    (LWS ``leaderworkerset_webhook.go``: ``size % S == 0`` or ``(size - 1) % S == 0``); under
    LeaderExcluded divisors of R - 1 only (DESIGN.md §5). ``lws_accepted_sizes(30011)`` →
    ``[2, 5, 10, 3001, 6002, 15005, 30010, 30011]``. O(sqrt(R))."""
    found = divisors(group_size - 1, most=most, at_least=at_least)
    if not leader_excluded:
        found = sorted(set(found) | set(divisors(group_size, most=most, at_least=at_least)))[:most]
    return found
