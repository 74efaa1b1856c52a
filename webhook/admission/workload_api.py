"""The ``workload-api`` target's objects (DESIGN.md §9b): a gang of segments as Kubernetes 1.37's
Workload API objects.

Field names from k8s.io/api v0.37.2: ``scheduling/v1beta1`` ``Workload`` (``spec.compositePodGroupTemplates``:
``name``, ``schedulingPolicy.gang.minGroupCount``, ``schedulingConstraints.topology[].key``,
``podGroupTemplates``) and ``PodGroup`` (``spec.parentCompositePodGroupName``, ``spec.workloadRef``
{``workloadName``, ``templateName``}, ``spec.schedulingPolicy.gang.minCount``,
``spec.schedulingConstraints.topology[].key``); ``scheduling/v1alpha3`` ``CompositePodGroup``
(``spec.workloadRef`` required, ``spec.schedulingPolicy.gang.minGroupCount``,
``spec.schedulingConstraints.topology``); ``core/v1`` ``PodSpec.schedulingGroup.podGroupName``. A
child PodGroup with a parent needs ``workloadRef`` (``+k8s:dependentRequired("workloadRef")``), so
each gang gets a Workload too. Topology constraints are required only, one key each.

Pure: plain dicts, no client. One gang: a CompositePodGroup ``<gang>`` (the workload required level)
with one child PodGroup ``<gang>-segment-<k>`` per segment (``minCount`` = its pods, the segment
required level) and, for pods outside segments (a Master, an excluded leader), one child
``<gang>-other`` without a topology constraint. A gang of a whole object (``segments.dev/gang-scope:
workload``: every replicatedJob of a JobSet, every worker group of a Ray object, DESIGN.md §4.5)
numbers the segments of each group from 0, so its children are ``<gang>-<group>-segment-<k>``: two
groups never share a PodGroup.

One naming function for everybody: the pod handler (:func:`group_pod`, at pod CREATE), the controller
(:func:`gang_shape` on the live pods, :mod:`webhook.controller.podgroups`) and ``place --target
workload-api`` (:func:`gang_shape` on the admitted pods) all name a gang's objects with
:func:`gang_object_name` and :func:`podgroup_name`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from webhook.admission.warning_rules import text
from webhook.kube import kai_scheduler, segments_dev
from webhook.kube.pods import gang_size
from webhook.text.messages import quote

WORKLOAD_VERSION = "scheduling.k8s.io/v1beta1"
COMPOSITE_VERSION = "scheduling.k8s.io/v1alpha3"
GANG_TEMPLATE, SEGMENT_TEMPLATE, OTHER_TEMPLATE = "gang", "segment", "other"


#: Longest Kubernetes object name (a DNS-1123 subdomain, k8s.io/apimachinery ``validation.DNS1123SubdomainMaxLength``).
NAME_MAX = 253
#: Longest gang name: room for ``-segment-`` and a 10-digit segment index after it.
GANG_NAME_MAX = NAME_MAX - len(f"-{SEGMENT_TEMPLATE}-") - 10
#: Hex digits of the sha256 suffix of a shortened or rewritten name.
DIGEST_CHARS = 10
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _dns_name(text: str, digest_of: str) -> str:
    """``text`` when it is a DNS-1123 subdomain of at most :data:`GANG_NAME_MAX` characters;
    otherwise lower-cased, every run of other characters than ``a-z0-9-`` made ``-``, cut to fit,
    and suffixed with ``-`` and the first :data:`DIGEST_CHARS` hex digits of the sha256 of
    ``digest_of``."""
    if len(text) <= GANG_NAME_MAX and _SUBDOMAIN.fullmatch(text):
        return text
    digest = hashlib.sha256(digest_of.encode()).hexdigest()[:DIGEST_CHARS]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower())[:GANG_NAME_MAX - DIGEST_CHARS - 1].strip("-")
    return f"{cleaned}-{digest}" if cleaned else digest


def gang_object_name(gang_key: str) -> str:
    """The name of the Workload and CompositePodGroup of the gang ``gang_key``
    (``<namespace>/<name>[/<part>…]``, :func:`webhook.admission.kinds.registry.gang_key`): the parts after
    the namespace joined by ``-`` (``team-a/llama/0`` → ``llama-0``). That text is kept when it is a
    DNS-1123 subdomain of at most :data:`GANG_NAME_MAX` characters (so every child name
    :func:`podgroup_name` makes stays within 253); otherwise it is lower-cased, every run of other
    characters than ``a-z0-9-`` becomes ``-``, it is cut to fit, and ``-`` plus the first
    :data:`DIGEST_CHARS` hex digits of the sha256 of ``gang_key`` are appended, so two gangs never
    share a shortened name by accident (``ns/job.x/*`` → ``job-x-<digest>``)."""
    parts = gang_key.split("/")[1:] or [gang_key]
    return _dns_name("-".join(parts), gang_key)


def podgroup_name(gang: str, segment: int | None, group: str | None = None) -> str:
    """The child PodGroup of segment ``segment`` of the gang named ``gang`` (:func:`gang_object_name`):
    ``<gang>-segment-<k>``; ``None``: the pods outside segments, ``<gang>-other``. The ONE name both
    the pod handler writes in ``spec.schedulingGroup.podGroupName`` and the controller creates.

    ``group``: the pod's group within a whole-object gang (a JobSet's replicatedJob, a Ray worker
    group: :func:`webhook.admission.kinds.registry.whole_gang_group`), whose segments are numbered per
    group: ``<gang>-<group>-segment-<k>``, where ``<gang>-<group>`` is made DNS-safe as
    :func:`gang_object_name` does (digest of ``<gang>/<group>``), so two groups' segment ``k`` never
    share a PodGroup. Pods outside segments share ``<gang>-other`` whatever their group."""
    if segment is None:
        return f"{gang}-{OTHER_TEMPLATE}"
    stem = gang if group is None else _dns_name(f"{gang}-{group}", f"{gang}/{group}")
    return f"{stem}-{SEGMENT_TEMPLATE}-{segment}"


def pod_podgroup(gang_key: str, segment_index: str | None, group: str | None = None) -> str:
    """The PodGroup of a pod of gang ``gang_key`` whose ``kai.scheduler/segment-index`` is
    ``segment_index`` (``None`` or not a whole number: the pods outside segments) and whose group in a
    whole-object gang is ``group`` (``None``: a gang of one group), by :func:`podgroup_name`."""
    segment = int(segment_index) if segment_index is not None and segment_index.isdigit() else None
    return podgroup_name(gang_object_name(gang_key), segment, group)


def _constraints(level: str | None) -> dict[str, Any]:
    return {"schedulingConstraints": {"topology": [{"key": level}]}} if level else {}


#: A segment of a gang: (its group in a whole-object gang, or ``None``; its index).
SegmentKey = tuple[str | None, int]


def gang_objects(namespace: str, gang: str, segment_sizes: Sequence[int] | Mapping[SegmentKey, int], others: int,
                 workload_level: str | None, segment_level: str | None) -> list[dict[str, Any]]:
    """The Workload, CompositePodGroup and child PodGroups of one gang.

    ``segment_sizes``: pods per segment, by segment index (a list), or by ``(group, index)`` for a
    whole-object gang whose groups number their segments apart (:func:`podgroup_name`; children in
    that order); ``others``: pods outside segments; ``workload_level`` / ``segment_level``: the
    required levels (node-label keys) or ``None``. Returns the objects in creation order (Workload,
    CompositePodGroup, PodGroups)."""
    sizes = (dict(segment_sizes) if isinstance(segment_sizes, Mapping)
             else {(None, index): size for index, size in enumerate(segment_sizes)})
    children = len(sizes) + (1 if others else 0)
    group_templates = []
    if sizes:
        group_templates.append({"name": SEGMENT_TEMPLATE,
                                "schedulingPolicy": {"gang": {"minCount": max(sizes.values())}},
                                **_constraints(segment_level)})
    if others:
        group_templates.append({"name": OTHER_TEMPLATE, "schedulingPolicy": {"gang": {"minCount": others}}})
    def policy() -> dict[str, Any]:
        return {"gang": {"minGroupCount": children}}

    workload = {"apiVersion": WORKLOAD_VERSION, "kind": "Workload", "metadata": {"name": gang, "namespace": namespace},
                "spec": {"compositePodGroupTemplates": [{"name": GANG_TEMPLATE, "schedulingPolicy": policy(),
                                                         **_constraints(workload_level),
                                                         "podGroupTemplates": group_templates}]}}
    composite = {"apiVersion": COMPOSITE_VERSION, "kind": "CompositePodGroup",
                 "metadata": {"name": gang, "namespace": namespace},
                 "spec": {"workloadRef": {"workloadName": gang, "templateName": GANG_TEMPLATE},
                          "schedulingPolicy": policy(), **_constraints(workload_level)}}
    groups = [_podgroup(namespace, gang, podgroup_name(gang, index, group), size, SEGMENT_TEMPLATE, segment_level)
              for (group, index), size in sizes.items()]
    if others:
        groups.append(_podgroup(namespace, gang, podgroup_name(gang, None), others, OTHER_TEMPLATE, None))
    return [workload, composite, *groups]


def _podgroup(namespace: str, gang: str, name: str, pods: int, template: str, level: str | None) -> dict[str, Any]:
    return {"apiVersion": WORKLOAD_VERSION, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"parentCompositePodGroupName": gang,
                     "workloadRef": {"workloadName": gang, "templateName": template},
                     "schedulingPolicy": {"gang": {"minCount": pods}}, **_constraints(level)}}


def pod_operations(podgroup: str) -> list[dict[str, Any]]:
    """The RFC 6902 operation that points a pod at its PodGroup at CREATE (``spec.schedulingGroup``
    is immutable afterwards)."""
    return [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": podgroup}}]


def group_pod(pod: Mapping[str, Any], gang: str | None, segment_index: str | None,
              gang_labels: str, group: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The pod CREATE hook of target ``workload-api`` (DESIGN.md §9b): ``(operations, warnings)``.

    ``pod``: the admitted Pod; ``gang``: its gang key (``None``: unknown); ``segment_index``: the
    ``kai.scheduler/segment-index`` it carries or gets now (``None``: outside segments);
    ``gang_labels``: the gang labels to name when the key is unknown; ``group``: its group in a
    whole-object gang (``None``: a gang of one group). The operations set
    ``spec.schedulingGroup.podGroupName`` to :func:`pod_podgroup` (:func:`pod_operations`). A pod
    that names that PodGroup already gets none; one that names another keeps it (the field is
    immutable; warning ``podgroup-name-kept``); a pod of no known gang gets the warning
    ``not-grouped-no-gang-key``. No scheduling gate is ever added under this target."""
    if gang is None:
        return [], [text("not-grouped-no-gang-key", gang_labels=gang_labels)]
    wanted = pod_podgroup(gang, segment_index, group)
    spec = pod.get("spec")
    group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    current = group.get("podGroupName") if isinstance(group, Mapping) else None
    if current == wanted:
        return [], []
    if group is not None:
        return [], [text("podgroup-name-kept", value=quote(current), wanted=quote(wanted))]
    return pod_operations(wanted), []


def pod_maps(pod: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """A pod's string labels and annotations (other entries left out)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    out = []
    for name in ("labels", "annotations"):
        value = meta.get(name) if isinstance(meta, Mapping) else None
        out.append({k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
                   if isinstance(value, Mapping) else {})
    return out[0], out[1]


class GangShape(NamedTuple):
    """What a gang's pods say of its objects (:func:`gang_shape`): ``objects`` to create (in creation
    order, without owner), or ``None`` with ``waiting`` saying why not yet (``"3 of 8 pods exist"``)
    or ``problem`` saying why never (the pods disagree)."""

    objects: list[dict[str, Any]] | None
    waiting: str = ""
    problem: str = ""


def gang_shape(namespace: str, gang_key: str, pods: Sequence[Mapping[str, Any]],
               size_keys: Sequence[str] = (),
               group_of: Callable[[Mapping[str, str], Mapping[str, str]], str | None] = lambda _l, _a: None,
               ) -> GangShape:
    """The Workload API objects of gang ``gang_key`` from its live pods alone (DESIGN.md §9b), the
    same for the controller (live pods) and ``place --target workload-api`` (the admitted pods).

    ``pods``: the gang's pod dicts (not terminated, not being deleted); ``size_keys``: the gang-size
    fallbacks (:func:`webhook.admission.kinds.registry.gang_size_keys`); ``group_of``: a pod's group in a
    whole-object gang from its (labels, annotations), ``None`` for a gang of one group
    (:func:`webhook.admission.kinds.registry.whole_gang_group`; the pod handler names with the same). The
    gang size is the pods' ``segments.dev/gang-size`` (written at workload CREATE); the objects exist
    once that many pods do: one child PodGroup per (group, ``kai.scheduler/segment-index``)
    (``minCount`` = its pods; indices 0.. in each group), one for the pods without an index; the
    levels are the pods' ``segments.dev/topology-required-placement`` (workload) and
    ``kai.scheduler/segment-topology-required-placement`` (segment; the pods'
    ``segments.dev/segment-topology-required-placement`` first, the node label of an alias). Never raises."""
    sizes: dict[SegmentKey, int] = {}
    others, gang_sizes, workload_level, segment_level = 0, set(), None, None
    for pod in pods:
        labels, annotations = pod_maps(pod)
        gang_sizes.add(gang_size(annotations, size_keys))
        workload_level = workload_level or annotations.get(segments_dev.GANG_REQUIRED)
        index = labels.get(kai_scheduler.SEGMENT_INDEX)
        if index is not None and index.isdigit():
            segment = (group_of(labels, annotations), int(index))
            sizes[segment] = sizes.get(segment, 0) + 1
            # the node label the webhook wrote when the template names the level by a KAI alias
            segment_level = segment_level or annotations.get(segments_dev.GANG_SEGMENT_REQUIRED) \
                or annotations.get(kai_scheduler.SEGMENT_REQUIRED)
        else:
            others += 1
    if None in gang_sizes or len(gang_sizes) != 1:
        return GangShape(None, problem=f"its pods state {len(gang_sizes - {None})} gang sizes "
                                       f"({segments_dev.GANG_SIZE}), need exactly one")
    size = gang_sizes.pop()
    assert size is not None
    if len(pods) < size:
        return GangShape(None, waiting=f"{len(pods)} of {size} pods exist")
    if len(pods) > size:
        return GangShape(None, problem=f"{len(pods)} pods, more than its gang size {size}")
    ordered = sorted(sizes, key=lambda segment: (segment[0] or "", segment[1]))
    for group in dict.fromkeys(g for g, _ in ordered):
        indices = [k for g, k in ordered if g == group]
        if indices != list(range(len(indices))):
            where = "" if group is None else f" of group {quote(group)}"
            return GangShape(None, problem=f"segment indices{where} {indices} are not 0..{len(indices) - 1}")
    objects = gang_objects(namespace, gang_object_name(gang_key), {k: sizes[k] for k in ordered}, others,
                           workload_level, segment_level)
    return GangShape(objects)


def same_shape(wanted: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    """True when ``existing`` (an object as read) has the ``spec`` of ``wanted`` (as compiled): every
    field ``wanted`` sets is set alike (the API server's defaults on other fields are ignored)."""
    return _contains(existing.get("spec"), wanted.get("spec"))


def _contains(have: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_contains(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(_contains, have, want))
    return bool(have == want)
