"""Every admission rule in one place: the registry and one check function per rule.

A :class:`Rule` ties a stable id (used in messages, metrics and docs/reference/rules.md) to
its source (a DESIGN.md section, or ``README: decisions``: docs/concepts/admission.md, "Decisions where
DESIGN.md is silent"), its
status code and the one function that checks it. The check functions are small and take plain
values (the readers in :mod:`webhook.admission.reading` and the resolution in
:mod:`webhook.admission.resolution` prepare them), in the spirit of Kueue's ``validateX`` functions
for topology-aware scheduling. Every denial goes through :func:`violate`, so every message has
the house format of :mod:`webhook.text.messages`: the field path, the value, the rule id and the
fix.

``tests/unit/admission/test_core_rules.py`` checks that each rule has an example that triggers it, denied with
the message it states; ``hack/gen_reference.py`` writes docs/reference/rules.md from :data:`RULES`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from rapidfuzz.distance import Levenshtein

from webhook.admission.segments import lws_accepted_sizes, lws_segment_count, segment_count, smallest_size_within
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say
from webhook.kube import kai_scheduler
from webhook.kube.core import is_dns_subdomain, is_valid_label_key
from webhook.text.messages import UNSET, key_field, quote, render
from webhook.topology.objects import TOPOLOGY_CRD, TOPOLOGY_CRD_INSTALL, Topology

#: Hard limit on the number of segments of one workload (DESIGN.md §5).
MAX_SEGMENTS = 10_000
#: Largest edit distance at which an unknown key counts as a misspelling of a placement key (§5).
MISSPELLING_DISTANCE = 3


@dataclass(frozen=True)
class Rule:
    """One admission rule.

    ``id``: stable identifier (``segment-size-too-small``); ``source``: where the rule comes from
    (``DESIGN.md §5``, or ``README: decisions`` for this project's own decisions); ``summary``:
    one line for docs; ``code``: 403 (policy) or 400 (malformed object); ``check``: the function
    that checks it.
    """

    id: str
    source: str
    summary: str
    code: int
    check: Callable[..., bool | None]


#: The largest replica count any workload kind accepts (Kubernetes int32 fields); read by
#: :mod:`webhook.admission.reading` as every count's maximum.
INT32_MAX = 2**31 - 1

#: A rule's check function (:attr:`Rule.check`), kept as its own type by :func:`rule`.
CheckT = TypeVar("CheckT", bound=Callable[..., "bool | None"])

#: Rule id → :class:`Rule`, in the order of docs/reference/rules.md.
RULES: dict[str, Rule] = {}


def rule(rule_id: str, source: str, summary: str, code: int = 403) -> Callable[[CheckT], CheckT]:
    """Decorator registering ``check`` as THE check function of rule ``rule_id``.
    Raises ``ValueError`` when the id is registered twice (a programming error)."""

    def register(check: CheckT) -> CheckT:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} registered twice")
        RULES[rule_id] = Rule(rule_id, source, summary, code, check)
        return check

    return register


def violate(decision: Decision, rule_id: str, field_path: str, value: Any, problem: str, fix: str) -> None:
    """Record one violation of the registered rule ``rule_id`` (``KeyError`` for an unknown id:
    a programming error) with the house message: ``<field> = <value>: <problem> (rule <id>);
    fix: <fix>.`` (``value`` may be :data:`webhook.text.messages.UNSET`)."""
    registered = RULES[rule_id]
    decision.deny(rule_id, field_path, render(field_path, value, problem, rule_id, fix), registered.code)


def _size_fix(origin: str, field_path: str) -> str:
    """How to remove a segment size, by where it was read (annotation, or the spec field
    ``field_path``): LWS ``subGroupSize`` is removed with its ``subGroupPolicy``, another spec
    field (native ``workersPerSegment``) by itself."""
    if origin == "subGroupSize":
        return f"remove {field_path.rsplit('.', 1)[0]} for no segments"
    if origin != "annotation":
        return f"remove {field_path} for no segments"
    return f"remove {kai_scheduler.SEGMENT_SIZE} for no segments"


# --------------------------------------------------------------------------------------------
# malformed objects (400)
# --------------------------------------------------------------------------------------------

@rule("malformed-object", "DESIGN.md §5", "a field has the wrong JSON type or range (status 400)", code=400)
def malformed(decision: Decision, field_path: str, value: Any, expected: str) -> None:
    """Deny a malformed object: ``value`` at ``field_path`` is not ``expected`` (e.g.
    ``"an integer from 0 to 2147483647"``). Called by every reader of :mod:`webhook.admission.reading`."""
    violate(decision, "malformed-object", field_path, value, f"must be {expected}", f"send {expected} at {field_path}")


#: kube-apiserver's limit on the total size of one object's ``metadata.annotations``, in bytes
#: of keys and values (k8s.io/apimachinery/pkg/api/validation ``TotalAnnotationSizeLimitB``).
ANNOTATIONS_LIMIT_BYTES = 256 * 1024


@rule("annotations-too-large", "DESIGN.md §5",
      "an opted-in object whose own or a pod template's annotations exceed 256 KiB")
def deny_oversized_annotations(decision: Decision, field_path: str, size: int) -> None:
    """Deny an object that carries a placement key (§5 "Opt-in") and an annotation map at
    ``field_path`` of ``size`` bytes (keys plus values, UTF-8) over :data:`ANNOTATIONS_LIMIT_BYTES`:
    kube-apiserver refuses the object itself when the map is its own (``metadata.annotations``),
    and every pod of a template that carries it, so the workload could never run its pods. Its
    placement keys are not reviewed (the size alone decides, before the object is read)."""
    refused = "kube-apiserver refuses this object" if field_path == "metadata.annotations" else \
        "Kubernetes refuses every pod of this template"
    violate(decision, "annotations-too-large", field_path, size,
            f"bytes of keys and values, over kube-apiserver's {ANNOTATIONS_LIMIT_BYTES}-byte (256 KiB) limit: "
            f"{refused}, and the placement keys were not reviewed",
            f"remove annotations from {field_path} until they total at most {ANNOTATIONS_LIMIT_BYTES} bytes")


#: Work limits of one review (``webhook.http.bounds``, docs/decisions/review-work-bound.md):
#: the members (entries or items) of any one map or list of the object; the members of one map or
#: list that are maps carrying a ``template`` (a workload's groups); the members of all its maps
#: and lists. Kubernetes limits bytes, not counts (annotations 256 KiB, a request 3 MiB): these are
#: this project's, about 100 times what real workloads carry.
MAX_MEMBERS = 10_000
MAX_GROUPS = 256
MAX_MEMBERS_IN_ALL = 200_000
#: What each limit counts, as a message names it (:func:`deny_too_much_work`'s ``what``).
WORK_LIMITS = {"entries": MAX_MEMBERS, "items": MAX_MEMBERS, "groups": MAX_GROUPS, "in all": MAX_MEMBERS_IN_ALL}


@rule("too-many-items", "README: decisions",
      "an opted-in object with a map or list of over 10,000 members, over 256 groups (members with a "
      "template) in one, or over 200,000 in all")
def deny_too_much_work(decision: Decision, field_path: str, count: int, what: str) -> None:
    """Deny an object that carries a placement key (§5 "Opt-in") and passes a work limit: the map
    or list at ``field_path`` (``""``: the whole object) has ``count`` ``what``: ``"entries"`` (a
    map) or ``"items"`` (a list) over :data:`MAX_MEMBERS`, ``"groups"`` (members that carry a
    ``template``) over :data:`MAX_GROUPS`, or ``"in all"`` over :data:`MAX_MEMBERS_IN_ALL`. Its
    placement keys are not reviewed (the counts alone decide, before the object is read)."""
    limit = WORK_LIMITS[what]
    field = field_path or "request.object"
    if what == "in all":
        counted, bound, unit = "entries and items of all its maps and lists", "", "entries and items"
    else:
        counted = "members that carry a pod template" if what == "groups" else what
        bound, unit = " per map or list", what
    fix = (f"remove fields until the object holds at most {limit} {unit}" if what == "in all"
           else f"keep {field} at most {limit} {unit}")
    violate(decision, "too-many-items", field, count,
            f"that many {counted}, over this webhook's limit of {limit}{bound}, a bound on the work of one review; the "
            "object was not reviewed, its placement keys included", fix)


# --------------------------------------------------------------------------------------------
# segment size (DESIGN.md §3, §5)
# --------------------------------------------------------------------------------------------

@rule("segment-size-not-integer", "DESIGN.md §5", "segment-size is not a plain decimal integer")
def check_size_is_integer(decision: Decision, field_path: str, raw: str, parsed: int | None,
                          *, winner: str | None = None) -> bool:
    """``raw`` (an annotation value) must parse as a plain decimal integer (``parsed`` is the
    result of :func:`webhook.admission.segments.parse_plain_decimal`). ``winner``: the template value
    that shadows this root value, named in the fix. Returns True when it does."""
    if parsed is not None:
        return True
    fix = ('write the number of pods per segment as digits, e.g. "4"' if winner is None
           else f'write digits, e.g. "4", or remove it: the worker template\'s value {quote(winner)} wins')
    violate(decision, "segment-size-not-integer", field_path, raw,
            "the segment size must be a plain decimal integer (digits 0-9 only, no sign, spaces or exponent)", fix)
    return False


@rule("segment-size-too-small", "DESIGN.md §5", "segment size ≤ 1")
def check_size_at_least_2(decision: Decision, size: int, field_path: str, raw: Any, origin: str) -> bool:
    """A segment needs at least 2 pods. ``origin``: ``annotation``, ``subGroupSize`` or
    ``workersPerSegment`` (the fix names how to remove that source). Returns True when ok."""
    if size > 1:
        return True
    # KAI's LWS pod-grouper reads subGroupSize as the segment size and refuses one below 2
    # ("segmentSize 1 is not valid", lws_grouper.go getSegmentSize at d5bc503): an LWS that opted
    # in to KAI's placement keys would otherwise never be grouped.
    why = ("a segment needs more than 1 pod (KAI's pod-grouper reads subGroupSize as the segment size "
           "and rejects 1)" if origin == "subGroupSize" else "a segment needs more than 1 pod")
    violate(decision, "segment-size-too-small", field_path, raw, why,
            f"set a segment size of at least 2 (or {_size_fix(origin, field_path)})")
    return False


@rule("segment-size-exceeds-replicas", "DESIGN.md §5", "segment size > the pods that are segmented")
def check_size_within_pods(decision: Decision, size: int, field_path: str, raw: Any, origin: str,
                           pods: int, pods_field: str, pods_noun: str, *, update_of: str | None = None,
                           groups: str | None = None) -> bool:
    """The segment size may not exceed the segmented pods (PyTorchJob / native: workers; LWS
    LeaderWorker: ``size``; LWS LeaderExcluded: ``size - 1``). The message names the replica
    count and its field. ``update_of``: the kind, when an UPDATE of a running workload keeps its
    segment size (§5 "UPDATE compares like with like"): the size cannot change then, so the fix
    names only changes the webhook admits (:func:`scale_fix`). ``groups``: the kind's groups
    (``replicatedJobs``, ``worker groups``) when the size is the root's, which every group
    inherits: the fix then names the usual one first, the size on the templates of the groups to
    segment (issue 37). Returns True when ok."""
    if size <= pods:
        return True
    if update_of is not None:
        fix = scale_fix(update_of, size, pods_field)
    elif size > INT32_MAX and pods >= 2:  # no replica count reaches it (replicas are int32)
        fix = f"use a segment size between 2 and {pods}" if pods > 2 else "use a segment size of 2"
    elif size > INT32_MAX:
        fix = _size_fix(origin, field_path)
    elif pods > 2:
        fix = f"use a segment size between 2 and {pods}, or raise {pods_field} to at least {size}"
    elif pods == 2:
        fix = f"use a segment size of 2, or raise {pods_field} to at least {size}"
    else:  # no segment size fits 0 or 1 pods
        fix = f"raise {pods_field} to at least {size} (the segment size), or {_size_fix(origin, field_path)}"
    if groups is not None and update_of is None:
        fix = (f"set {kai_scheduler.SEGMENT_SIZE} on the pod templates of the {groups} to segment instead of "
               f"metadata.annotations (every one inherits it), or {fix}")
    noun = pods_noun
    if pods == 1:  # "1 pod of replicatedJob driver", never "1 pods"
        noun = _SINGULAR.get(pods_noun) or (f"pod{pods_noun[4:]}" if pods_noun.startswith("pods ") else pods_noun)
    violate(decision, "segment-size-exceeds-replicas", field_path, raw,
            f"the segment size exceeds the {pods} {noun} ({pods_field})", fix)
    return False


def scale_fix(kind: str, size: int, pods_field: str) -> str:
    """The fix for an UPDATE that scales a running workload below its unchanged segment size
    ``size``: keep the replicas at least ``size`` (the size itself is immutable, §5), suspend a
    PyTorchJob to change the size, or recreate the workload. Every option is one the webhook
    admits: an LWS group size is named only as LWS accepts it for ``subGroupSize`` (§3: a multiple
    of S, or a multiple plus 1; LeaderExcluded: a multiple plus 1)."""
    if pods_field.endswith(" - 1"):  # LWS LeaderExcluded: size - 1 must be a multiple of S
        group = pods_field[: -len(" - 1")]
        keep = f"set {group} to {size + 1} or another multiple of {size} plus 1"
    elif kind == "LeaderWorkerSet":
        keep = f"set {pods_field} to {size} or another multiple of {size} (or a multiple plus 1)"
    else:
        keep = f"keep {pods_field} at least {size}"
    fix = f"{keep} (a running workload keeps its segment size {size})"
    if kind == "PyTorchJob":
        fix += ", or suspend the job (spec.runPolicy.suspend: true) to change the segment size"
    return fix + ", or delete and recreate the workload"


_SINGULAR = {"Worker replicas": "Worker replica", "pods per group": "pod per group", "workers": "worker",
             "workers per group (leader excluded)": "worker per group (leader excluded)"}


@rule("too-many-segments", "DESIGN.md §5", "more than 10,000 segments")
def check_segment_count(decision: Decision, size: int, field_path: str, raw: Any, pods: int, pods_noun: str,
                        *, group_size: int | None = None, policy: str = kai_scheduler.POLICY_LEADER_WORKER,
                        lws_validates: bool = False) -> bool:
    """At most :data:`webhook.admission.rules.MAX_SEGMENTS` segments. ``group_size``: an LWS group's
    size R (``None`` for the training kinds), whose segments are counted as the pod index rule
    assigns them (:func:`webhook.admission.segments.lws_segment_count`, DESIGN.md §7); ``policy`` and
    ``lws_validates`` (the object sets ``subGroupSize``): the fix names the smallest size that
    the LWS size rules admit too (:func:`webhook.admission.segments.smallest_size_within`).
    Returns True when ok."""
    count = segment_count(pods, size) if group_size is None else lws_segment_count(group_size, size, policy)
    if count <= MAX_SEGMENTS:
        return True
    smallest = smallest_size_within(MAX_SEGMENTS, pods, group_size=group_size, policy=policy,
                                    lws_validates=lws_validates)
    if smallest is None:  # not reached: R (R - 1 under LeaderExcluded) always fits
        fix = "use a larger segment size"
    elif group_size is not None and policy == kai_scheduler.POLICY_LEADER_EXCLUDED:
        fix = (f"use a segment size of {smallest} (the smallest that divides size - 1 = {group_size - 1}, as "
               f"LeaderExcluded requires, and makes at most {MAX_SEGMENTS} segments)")
    elif group_size is not None and lws_validates:
        fix = (f"use a segment size of {smallest} (the smallest that divides size {group_size} or size - 1 = "
               f"{group_size - 1}, as LWS requires of subGroupSize, and makes at most {MAX_SEGMENTS} segments)")
    else:
        fix = f"use a segment size of at least {smallest}"
    violate(decision, "too-many-segments", field_path, raw,
            f"{pods} {pods_noun} make {count} segments, more than {MAX_SEGMENTS}", fix)
    return False


@rule("lws-leader-excluded-divisibility", "DESIGN.md §5", "LWS LeaderExcluded and (size - 1) % S != 0")
def check_leader_excluded_divisibility(decision: Decision, size: int, field_path: str, raw: Any, group_size: int,
                                       group_field: str) -> bool:
    """Under LeaderExcluded the workers of a group (``size - 1``) split into whole segments
    (LWS's own ``subGroupSize`` validation and KAI's ``addExcludedLeaderSegments`` require it).
    ``group_field``: the field of the group size (``spec.leaderWorkerTemplate.size``).
    Returns True when ok."""
    if (group_size - 1) % size == 0:
        return True
    choices = ", ".join(map(str, lws_accepted_sizes(group_size, leader_excluded=True))) or "none >= 2"
    violate(decision, "lws-leader-excluded-divisibility", field_path, raw,
            f"under LeaderExcluded, size - 1 = {group_size - 1} ({group_field} = {group_size}) "
            "must be divisible by the segment size",
            f"choose a segment size that divides {group_size - 1} ({choices}), or change {group_field}")
    return False


@rule("lws-subgroup-size-divisibility", "DESIGN.md §3",
      "LWS subGroupSize would be set to a size LWS rejects (size % S != 0 and (size - 1) % S != 0)")
def check_lws_accepts_subgroup_size(decision: Decision, size: int, field_path: str, raw: Any, group_size: int,
                                    sub_group_size: int) -> bool:
    """When an LWS sets ``subGroupSize``, the webhook sets it to the resolved segment size (§3: one
    answer for LWS, KAI and the webhook), so that size must be one LWS accepts for ``subGroupSize``
    (LWS ``leaderworkerset_webhook.go``: ``size % S == 0`` or ``(size - 1) % S == 0``).
    Returns True when ok."""
    if group_size % size == 0 or (group_size - 1) % size == 0:
        return True
    fits = lws_accepted_sizes(group_size)
    violate(decision, "lws-subgroup-size-divisibility", field_path, raw,
            f"LWS accepts a subGroupSize only when size ({group_size}) or size - 1 ({group_size - 1}) is divisible "
            f"by it, and the webhook sets subGroupSize (now {sub_group_size}) to the segment size ({size})",
            f"choose a segment size that divides {group_size} or {group_size - 1} "
            f"({', '.join(map(str, fits)) or 'none >= 2'}), or remove subGroupPolicy")
    return False


#: The targets whose gang waits for every pod before any is placed, so that a LeaderReady LWS
#: (whose workers wait for a ready leader) never completes (DESIGN.md §3b, §9, §9b), each with why:
#: ``gate``: the pod handler gates the leader and the controller releases a whole gang only;
#: ``workload-api``: kube-scheduler holds the leader until its PodGroup exists and its gang's pods are
#: there (k8s.io/kubernetes v1.37.2 ``plugins/gangscheduling`` ``PreEnqueue``), and the controller
#: creates the PodGroups once every pod exists. The names are those of :data:`webhook.admission.targets.TARGETS`.
LEADER_READY_DEADLOCKS = {
    "gate": "with --gate-pods, its gang never completes (the workers wait for the gated leader)",
    "workload-api": "with target workload-api, its gang never completes (kube-scheduler holds the leader "
                    "until its PodGroup and the gang's pods exist; the workers wait for the leader)",
}


@rule("lws-leader-ready-segments", "DESIGN.md §3b",
      "LWS startupPolicy LeaderReady with segments under target gate (--gate-pods) or workload-api "
      "(a warning under kai)")
def check_lws_startup_policy(decision: Decision, policy: Any, size: int, target: str | None) -> bool:
    """DESIGN.md §3b: an LWS with ``spec.startupPolicy: LeaderReady`` creates its leader alone and
    its workers only once the leader is ready. KAI's pod-grouper cannot group that lone leader into
    a segment (``segmentSize S is greater than replicasSize 1``), and a gang that waits for all its
    pods before any is placed (target ``gate`` or ``workload-api``: :data:`LEADER_READY_DEADLOCKS`)
    never completes, since the workers wait for a leader that waits for its gang. ``policy``: the
    object's ``spec.startupPolicy`` (``None`` when absent: LWS defaults to ``LeaderCreated``);
    ``size``: the resolved segment size; ``target``: the object's resolved target
    (:func:`webhook.admission.targets.chosen_target`; ``None``: its label is denied). Denied under a
    target of :data:`LEADER_READY_DEADLOCKS` (whose pods the pod handler does not leave alone
    whatever ``--gate-pods`` says), a warning otherwise (a KAI reader gap: the review keeps it under
    target ``kai`` only, :attr:`WarningRule.kai_gap`). Returns True when no denial was recorded."""
    if policy != "LeaderReady":
        return True
    why = LEADER_READY_DEADLOCKS.get(target or "")
    if why is None:
        say(decision, "lws-leader-ready-segments")
        return True
    violate(decision, "lws-leader-ready-segments", "spec.startupPolicy", policy,
            f"under LeaderReady the leader is created alone: KAI cannot group it into a segment of {size} and, {why}",
            "set spec.startupPolicy: LeaderCreated (the LWS default), or remove the segment keys")
    return False


@rule("ray-segment-splits-replica", "DESIGN.md §3b", "Ray: segment size not a multiple of the group's numOfHosts")
def check_ray_whole_replicas(decision: Decision, size: int, field_path: str, raw: Any, hosts: int,
                             hosts_field: str) -> bool:
    """KubeRay creates and deletes a multi-host replica (``numOfHosts`` pods) whole, so a segment
    must never split one: the segment size must be a multiple of ``hosts`` (DESIGN.md §3b).
    ``hosts_field``: the field of ``numOfHosts``. Returns True when ok."""
    if size % hosts == 0:
        return True
    lower, upper = size - size % hosts, size - size % hosts + hosts
    choices = f"{upper}" if lower < 2 else f"{lower} or {upper}"
    violate(decision, "ray-segment-splits-replica", field_path, raw,
            f"a segment of {size} pods would split a replica of {hosts} hosts ({hosts_field}), which KubeRay "
            "creates and deletes whole",
            f"use a multiple of {hosts} (e.g. {choices}), or change {hosts_field}")
    return False


# --------------------------------------------------------------------------------------------
# topology names and levels (DESIGN.md §5)
# --------------------------------------------------------------------------------------------

@rule("placement-without-topology", "DESIGN.md §5", "a placement level without any topology name")
def check_placement_has_topology(decision: Decision, placements: Iterable[tuple[str, str]], topology_name: str | None,
                                 where: str) -> bool:
    """Each ``(field, level)`` in ``placements`` needs a topology name; ``where``: the maps in
    which to set it (named in the fix). Returns True when ok."""
    if topology_name is not None:
        return True
    ok = True
    for field_path, level in placements:
        violate(decision, "placement-without-topology", field_path, level, "a placement level needs a topology name",
                f'set {kai_scheduler.TOPOLOGY} (e.g. "cluster-topology") in {where}')
        ok = False
    return ok


@rule("invalid-level", "DESIGN.md §5", "a level that is not a label key")
def check_level_syntax(decision: Decision, field_path: str, level: str, topology: Topology | None) -> bool:
    """A topology level is a node-label key (``[prefix/]name``). ``topology``: the known
    Topology, whose levels the fix lists (read only for a denial). Returns True when ok."""
    if is_valid_label_key(level):
        return True
    levels = topology.level_names() if topology is not None else None
    violate(decision, "invalid-level", field_path, level,
            "a topology level must be a node label key ([prefix/]name, e.g. cloud.provider.com/topology-rack)",
            "use one of the topology's levels" + (f" ({', '.join(levels)})" if levels else ""))
    return False


@rule("unknown-level", "DESIGN.md §5", "a level that is not one of the named Topology's levels (nor an alias of one)")
def check_level_in_topology(decision: Decision, field_path: str, level: str, topology: Topology) -> bool:
    """``level`` must be one of the known ``topology``'s levels, by node label or by its alias
    (KAI's ``spec.levels[].alias``); the fix lists them broadest first, each alias beside its
    level. Returns True when ok."""
    if topology.has_level(level):
        return True
    violate(decision, "unknown-level", field_path, level, f"not a level of topology {quote(topology.name)}",
            f"use one of its levels, broadest first: {', '.join(topology.level_names())}")
    return False


@rule("invalid-topology-name", "DESIGN.md §5", "a topology name that is not an object name")
def check_topology_name_syntax(decision: Decision, field_path: str, name: str,
                               known: Callable[[], list[str]]) -> bool:
    """A topology name is a Kubernetes object name (lowercase DNS subdomain, at most 253
    characters). ``known``: returns the names listed in the fix (called only for a denial, e.g.
    ``catalog.names``). Returns True when ok."""
    if is_dns_subdomain(name):
        return True
    names = known()
    violate(decision, "invalid-topology-name", field_path, name,
            "a topology name must be a Kubernetes object name (lowercase DNS subdomain)",
            "name an existing Topology" + (f": {', '.join(names)}" if names else ""))
    return False


@rule("unknown-topology", "DESIGN.md §5", "a topology name unknown to the synced topology cache")
def check_topology_known(decision: Decision, field_path: str, name: str, found: bool, synced: bool,
                         known: Callable[[], list[str]], crd_missing: bool = False) -> bool:
    """A topology name must be known while the topology cache is synced (listing the names that
    ``known()`` returns, called only for a denial); while it is not synced, a warning. ``crd_missing``: the cluster has no Topology CRD
    (DESIGN.md §10), so the fix says how to install it. Returns True when the topology is known."""
    if found:
        return True
    if synced and crd_missing:
        violate(decision, "unknown-topology", field_path, name,
                f"no Topology exists: the cluster has no Topology CRD ({TOPOLOGY_CRD})",
                f"install the CRD ({TOPOLOGY_CRD_INSTALL}; or install KAI Scheduler), then create Topology {quote(name)}")
    elif synced:
        names = known()
        violate(decision, "unknown-topology", field_path, name, "no Topology has this name",
                f"use one of: {', '.join(names)}" if names else "create the Topology first")
    else:
        say(decision, "topology-not-loaded", name=quote(name))
    return False


@rule("preferred-broader-than-required", "DESIGN.md §5", "preferred level broader than the required one")
def check_preferred_within_required(decision: Decision, preferred: tuple[str, str], required: tuple[str, str],
                                    depth: Callable[[str], int]) -> bool:
    """``preferred`` / ``required``: ``(field, level)`` of one scope; ``depth``: 0 for the
    broadest level. Equal levels are fine. Returns True when ok."""
    if depth(preferred[1]) >= depth(required[1]):
        return True
    violate(decision, "preferred-broader-than-required", preferred[0], preferred[1],
            f"the preferred level is broader than the required level {quote(required[1])} ({required[0]})",
            "prefer a level equal to or narrower than the required one")
    return False


@rule("segment-required-broader-than-workload", "DESIGN.md §5", "segment required level broader than the workload's")
def check_segment_within_workload(decision: Decision, segment: tuple[str, str], workload: tuple[str, str],
                                  depth: Callable[[str], int]) -> bool:
    """A segment must fit inside the workload's required level (likely swapped otherwise).
    ``segment`` / ``workload``: ``(field, level)``. Returns True when ok."""
    if depth(segment[1]) >= depth(workload[1]):
        return True
    violate(decision, "segment-required-broader-than-workload", segment[0], segment[1],
            f"a segment must fit inside the workload's required level {quote(workload[1])} ({workload[0]})",
            "swap the two levels or narrow the segment level")
    return False


@rule("target-unknown", "DESIGN.md §9b", "a segments.dev/target label naming no target this webhook serves")
def check_target_known(decision: Decision, field_path: str, value: Any, served: tuple[str, ...]) -> bool:
    """The workload label ``segments.dev/target`` must name one of ``served`` (the targets the
    running webhook can honour: ``gate`` only under ``--gate-pods``). Returns True when ok."""
    if isinstance(value, str) and value in served:
        return True
    violate(decision, "target-unknown", field_path, value,
            f"not a target this webhook serves ({', '.join(served)})",
            "use one of them, or remove the label to use the webhook's --target")
    return False


@rule("target-as-annotation", "DESIGN.md §9b", "segments.dev/target written as a root annotation instead of a label")
def check_target_not_annotation(decision: Decision, annotations: Mapping[str, Any], target_key: str) -> bool:
    """The workload's target is read from its ``metadata.labels`` only (docs/concepts/targets.md); the same
    key as a root annotation would be a choice silently ignored (the default target used instead).
    ``annotations``: the root's annotation map. Returns True when the key is not there."""
    if target_key not in annotations:
        return True
    violate(decision, "target-as-annotation", key_field("metadata.annotations", target_key), annotations[target_key],
            "an annotation, but the target is read only from the workload's labels, so this choice would be "
            "ignored", f"move it to {key_field('metadata.labels', target_key)}")
    return False


@rule("target-key-misspelled", "DESIGN.md §9b",
      "a root label or annotation key within edit distance 3 of segments.dev/target")
def check_target_key_spelling(decision: Decision, map_field: str, keys: Mapping[str, Any], target_key: str) -> bool:
    """Deny each key of one root map (``map_field``: ``metadata.labels`` or ``metadata.annotations``)
    that misspells ``target_key`` (``segments.dev/target``, edit distance 1 to
    :data:`MISSPELLING_DISTANCE`): the workload's target choice would be ignored silently and the
    webhook's default target used instead, as a misspelled placement key would vanish (DESIGN.md
    §4.5, §5). Returns True when no key misspells it."""
    ok = True
    for key, value in keys.items():
        if not isinstance(key, str) or abs(len(key) - len(target_key)) > MISSPELLING_DISTANCE:
            continue
        if 0 < Levenshtein.distance(key, target_key, score_cutoff=MISSPELLING_DISTANCE) <= MISSPELLING_DISTANCE:
            violate(decision, "target-key-misspelled", key_field(map_field, key), value,
                    f"not a key this webhook reads but close to {target_key}, so this target choice would be "
                    "ignored", f"rename the key to {key_field('metadata.labels', target_key)}")
            ok = False
    return ok


@rule("target-label-on-template", "DESIGN.md §9b", "segments.dev/target written as a pod template label instead of the root's")
def check_target_not_on_template(decision: Decision, labels_field: str, labels: Mapping[str, Any], target_key: str) -> bool:
    """The workload's target is read from its root ``metadata.labels`` only (docs/concepts/targets.md);
    the same key as a pod template label (``labels_field``) would be a choice silently ignored (the
    default target used instead). Returns True when the key is not there."""
    if target_key not in labels:
        return True
    violate(decision, "target-label-on-template", key_field(labels_field, target_key), labels[target_key],
            "a pod template label, but the target is read only from the workload's own labels, so this choice "
            "would be ignored", f"move it to {key_field('metadata.labels', target_key)}")
    return False


@rule("target-cannot-express", "DESIGN.md §9b",
      "a segment constraint the chosen target cannot honour (its pods would wait forever or lose it)")
def deny_target_cannot_express(decision: Decision, target: str, field_path: str, value: Any, problem: str,
                               fix: str) -> None:
    """Deny what ``target`` (``kueue``, ``workload-api``) would admit but never place as resolved:
    ``problem`` says why, naming the target's rule; ``fix`` what to change."""
    violate(decision, "target-cannot-express", field_path, value, f"target {target}: {problem}", fix)


@rule("job-segments-need-indexed", "DESIGN.md §3b",
      "a segmented batch/v1 Job that is not Indexed with parallelism = completions")
def check_job_indexed(decision: Decision, field_path: str, value: Any, problem: str | None) -> bool:
    """A Job's pods are segmented by ``batch.kubernetes.io/job-completion-index``: only an Indexed
    Job has it, and a segment's pods run together only when every completion runs at once.
    ``problem``: what is wrong, or ``None``. Returns True when ok."""
    if problem is None:
        return True
    violate(decision, "job-segments-need-indexed", field_path, value, problem,
            "set completionMode: Indexed and parallelism equal to completions")
    return False


@rule("conflicting-topology", "README: decisions", "workload levels of another topology than the worker template's")
def check_one_topology(decision: Decision, workload_levels: Iterable[tuple[str, str]], root_topology: str,
                       template_topology: tuple[str, str]) -> bool:
    """One workload is placed in one topology: workload-level keys (``(field, level)``) that
    belong to the root's topology are denied when the worker template names another one
    (``template_topology``: ``(field, name)``). Returns True when ok."""
    if root_topology == template_topology[1]:
        return True
    ok = True
    for field_path, level in workload_levels:
        violate(decision, "conflicting-topology", field_path, level,
                f"this workload-level placement belongs to the root's topology {quote(root_topology)}, but "
                f"the worker template names topology {quote(template_topology[1])} ({template_topology[0]}); "
                "one workload is placed in one topology",
                "name the same topology in both places, or set it only in metadata.annotations")
        ok = False
    return ok


@rule("template-level-without-topology", "DESIGN.md §4",
      "a workload level on a template KAI reads it from (Ray group, JobSet Job) without a topology name there")
def check_template_level_has_topology(decision: Decision, field_path: str, level: str, topology_on_template: bool,
                                      template_field: str, reader: str) -> bool:
    """A workload-level key (``field_path`` = ``level``) on a template whose levels KAI's
    pod-grouper reads together with the topology name of that same template only (``reader``: which
    grouper, e.g. ``KAI's Ray grouper errors on every pod and makes no PodGroup``): without a
    topology name on ``template_field`` after admission (``topology_on_template`` False) the level
    is never honoured (DESIGN.md §4.5; KAI d5bc503 ``plugins/ray/ray_grouper.go``
    ``getTemplateTopologyConstraints``, ``plugins/jobset/jobset_grouper.go``
    ``singleReplicaSubGroupTopology``). Returns True when ok."""
    if topology_on_template:
        return True
    violate(decision, "template-level-without-topology", field_path, level,
            f"{template_field} names no {kai_scheduler.TOPOLOGY}, and KAI reads this level with that template's "
            f"topology only: {reader}",
            f"set {kai_scheduler.TOPOLOGY} in {template_field} too, or move the level to metadata.annotations")
    return False


@rule("per-job-level-differs", "DESIGN.md §3b",
      "JobSet with segment size = parallelism: a user per-Job level other than the segment's")
def check_per_job_level(decision: Decision, field_path: str, written: str, wanted: str | None,
                        segment_key: str) -> bool:
    """JobSet with ``S == parallelism``: KAI enforces each Job (one segment) from the per-Job keys
    on ``replicatedJobs[k].template.metadata.annotations`` (KAI d5bc503
    ``plugins/jobset/jobset_grouper.go``), which the webhook sets to the segment's topology and
    levels (DESIGN.md §3b). A user value there (``written`` at ``field_path``) other than the one
    the segment gives (``wanted``, ``None`` when the segment sets none; ``segment_key``: the pod
    template key that sets it) would be replaced or enforced beside the segment's: denied, never
    replaced silently (§4.5). Returns True when ok."""
    if written == wanted:
        return True
    says = quote(wanted) if wanted is not None else "unset"
    violate(decision, "per-job-level-differs", field_path, written,
            f"segment size = parallelism makes each Job one segment, and KAI enforces this per-Job key as the "
            f"segment's {segment_key} ({says})",
            f"remove it, or set it to {quote(wanted)}" if wanted is not None else
            f"remove it, or set {segment_key} on the pod template instead")
    return False


@rule("trainer-job-not-found", "DESIGN.md §3b",
      "a JobSet whose root segments.dev/trainer-job names no replicatedJob of it")
def check_trainer_job_found(decision: Decision, field_path: str, value: str, names: Iterable[str]) -> bool:
    """A JobSet's root ``segments.dev/trainer-job`` (``field_path`` = ``value``; written into a
    TrainJob's ``spec.annotations`` by the webhook, copied by Trainer v2.0/v2.1 onto the JobSet
    root) scopes the root's keys to that replicatedJob; naming none of ``names`` (the JobSet's
    replicatedJobs), the keys would reach no pod: denied, never silent (§4.5). Returns True when ok."""
    known = list(names)
    if value in known:
        return True
    violate(decision, "trainer-job-not-found", field_path, value,
            "the root's segment keys belong to that replicatedJob alone, and this JobSet has none of that name "
            f"(its replicatedJob names: {', '.join(known) or 'none'}), so no pod would get them",
            "set segments.dev/trainer-job on the TrainJob's metadata.annotations to the runtime's trainer "
            "replicatedJob (the one labelled trainer.kubeflow.org/trainjob-ancestor-step: trainer)")
    return False


@rule("trainjob-spec-annotation-differs", "DESIGN.md §3b",
      "a TrainJob whose spec.annotations sets a placement key to another value than its root resolves")
def check_trainjob_spec_annotation(decision: Decision, field_path: str, written: str, wanted: str) -> bool:
    """TrainJob: the webhook writes the resolved keys into ``spec.annotations`` (Trainer v2.0/v2.1
    copy them onto the JobSet root). A user value there (``written`` at ``field_path``) other than
    the resolved ``wanted`` would be replaced: denied, never replaced silently (§4.5). Returns True
    when ok."""
    if written == wanted:
        return True
    violate(decision, "trainjob-spec-annotation-differs", field_path, written,
            f"the TrainJob's metadata.annotations resolve it to {quote(wanted)}, which the webhook writes here for "
            "Trainer to copy onto the JobSet",
            f"remove it from spec.annotations (the metadata.annotations keys are used), or set it to {quote(wanted)}")
    return False


# --------------------------------------------------------------------------------------------
# kinds, keys, updates
# --------------------------------------------------------------------------------------------

@rule("native-framework-unsupported", "DESIGN.md §3", "DistributedWorkload segments with a framework other than PyTorch")
def check_native_framework(decision: Decision, framework: str, field_path: str, value: Any, source_name: str) -> bool:
    """Segments of the native kind are supported for ``PyTorch`` only. ``source_name``: the field
    or annotation that asks for segments (named in the fix). Returns True when ok."""
    if framework == "PyTorch":
        return True
    violate(decision, "native-framework-unsupported", field_path, value,
            f"segments are supported for framework PyTorch only, not {framework}",
            f"remove {source_name}, or use framework PyTorch")
    return False


@functools.lru_cache(maxsize=4096)
def resembled_placement_key(key: str) -> str | None:
    """The placement key of DESIGN.md §2 that ``key`` misspells (edit distance 0 to 3 with letter
    case not counted, and ``key`` is not a key KAI or this webhook uses), else ``None``. The closest one wins; ties go
    to the first in :data:`webhook.kube.kai_scheduler.PLACEMENT_KEYS`.

    A pure function of ``key``, memoised (at most 4,096 keys): the same annotation keys come
    back review after review, and the six edit distances were a tenth of a PyTorchJob review."""
    if key in kai_scheduler.KAI_KEYS or key in kai_scheduler.WEBHOOK_KEYS:
        return None
    # Letter case is not counted: Kubernetes keys are case-sensitive and KAI reads the lowercase
    # key only, so KAI.SCHEDULER/SEGMENT-SIZE is as lost as a typo (new-user trial, 2026-12-07)
    lowered = key.lower()
    best, best_distance = None, MISSPELLING_DISTANCE + 1
    for candidate in kai_scheduler.PLACEMENT_KEYS:
        if abs(len(candidate) - len(key)) > MISSPELLING_DISTANCE:
            continue
        distance = Levenshtein.distance(lowered, candidate, score_cutoff=MISSPELLING_DISTANCE)
        if distance < best_distance:
            best, best_distance = candidate, distance
    return best if best is not None else _one_word_from_placement_key(lowered)


def _one_word_from_placement_key(key: str) -> str | None:
    """The placement key that a ``kai.scheduler/`` ``key`` writes with one word (a ``-``-separated
    part) left out or added, sharing at least two words with it, else ``None``: e.g.
    ``segment-topology-required`` (``-placement`` left out) or ``segment-required-placement``
    (``topology-`` left out), which are more than 3 edits from the key meant and which KAI ignores
    as silently as any misspelling (docs/decisions/misspelled-key-one-word.md; DESIGN.md §4.5, §5).
    The key sharing the most words wins; ties go to the first in :data:`kai_scheduler.PLACEMENT_KEYS`."""
    if not key.startswith(kai_scheduler.KAI_PREFIX):
        return None
    words = key[len(kai_scheduler.KAI_PREFIX):].lower().replace("_", "-").split("-")
    best, best_shared = None, 1
    for candidate in kai_scheduler.PLACEMENT_KEYS:
        meant = candidate[len(kai_scheduler.KAI_PREFIX):].split("-")
        shorter, longer = (words, meant) if len(words) < len(meant) else (meant, words)
        if len(longer) - len(shorter) != 1 or len(shorter) <= best_shared:
            continue
        if any(longer[:i] + longer[i + 1:] == shorter for i in range(len(longer))):
            best, best_shared = candidate, len(shorter)
    return best


@rule("misspelled-key", "DESIGN.md §5", "an annotation key within edit distance 3 of a placement key (letter case not counted), or a kai.scheduler/ key one word away from one")
def check_key_spelling(decision: Decision, map_field: str, annotations: Mapping[str, str]) -> bool:
    """Deny each annotation key of one map (workload root or a pod template) that misspells a
    placement key (:func:`resembled_placement_key`): a misspelled hard constraint must never vanish
    silently. Other unknown ``kai.scheduler/`` keys get a warning. Returns True when no key is
    misspelled."""
    ok = True
    unknown = []
    for key, value in annotations.items():
        resembled = resembled_placement_key(key)
        if resembled is not None:
            violate(decision, "misspelled-key", key_field(map_field, key), value,
                    f"not a key KAI reads but close to {resembled}, so this constraint would be lost",
                    f"rename the key to {resembled}")
            ok = False
        elif key.startswith(kai_scheduler.KAI_PREFIX) and key not in kai_scheduler.KAI_KEYS and key not in kai_scheduler.WEBHOOK_KEYS:
            unknown.append(key)
    for key in unknown[:_MOST_UNKNOWN_WARNINGS]:
        say(decision, "unknown-kai-key", key=key)
    if len(unknown) > _MOST_UNKNOWN_WARNINGS:
        say(decision, "more-unknown-kai-keys", count=len(unknown) - _MOST_UNKNOWN_WARNINGS, map_field=map_field)
    return ok


@rule("placement-key-as-label", "DESIGN.md §5", "a placement key written as a label instead of an annotation")
def check_placement_keys_not_labels(decision: Decision, labels_field: str, labels: Mapping[str, str],
                                    annotations_field: str) -> bool:
    """Deny each placement key of DESIGN.md §2 in one labels map (workload root or a pod template):
    the keys are annotations (the seed's manifests, DESIGN.md §2), read as such by KAI and by this
    webhook, so a label holding one is a hard constraint that would vanish silently, as a misspelled
    key would (§5 "Misspelled keys"). ``labels_field`` / ``annotations_field``: the field
    paths of the two maps of the same metadata. Returns True when no placement key is a label."""
    ok = True
    for key in kai_scheduler.PLACEMENT_KEYS:
        if key in labels:
            violate(decision, "placement-key-as-label", key_field(labels_field, key), labels[key],
                    "a label, but KAI and this webhook read this key only as an annotation, so this constraint "
                    "would be lost", f"move it to {key_field(annotations_field, key)}")
            ok = False
    return ok


#: Unknown-key warnings per annotation map; the rest are counted in one warning.
_MOST_UNKNOWN_WARNINGS = 3


@rule("immutable-field", "DESIGN.md §5", "UPDATE changes a segment input of a running workload")
def check_unchanged(decision: Decision, what: str, field_path: str, new: Any, old: Any, kind: str,
                    *, shown: tuple[Any, Any] | None = None, old_written: Any = UNSET) -> bool:
    """An UPDATE may not change ``what`` (the segment size, topology name, segment levels or
    LWS leader policy) of an existing workload. ``new`` / ``old``: the values each side resolves
    (:data:`webhook.text.messages.UNSET` when a side sets none); ``shown``: (new, old) as written,
    for the message; ``old_written``: what the stored object wrote when it resolves none (an
    invalid ``"abc"``), so the message says what it had rather than "none". Returns True when
    unchanged."""
    if new == old:
        return True
    if shown is not None:
        new, old = shown
    fix = "restore the old value, or delete and recreate the workload"
    if new is UNSET:
        problem = f"the {what} of an existing workload cannot be removed (was {quote(old)})"
    elif old is UNSET and old_written is not UNSET:
        problem = (f"the {what} of an existing workload cannot be added (it had {quote(old_written)}, "
                   f"not a valid {what}, so none was in force)")
        fix = f"remove it (the stored workload has no {what} in force), or delete and recreate the workload"
    elif old is UNSET:
        problem = f"the {what} of an existing workload cannot be added (it had none)"
    else:
        problem = f"the {what} of an existing workload cannot change (was {quote(old)})"
    if kind == "PyTorchJob":
        fix += " (or suspend it first: spec.runPolicy.suspend: true)"
    violate(decision, "immutable-field", field_path, new, problem, fix)
    return False
