"""Work bounded before it is done: a review whose object cannot be admitted because of its size is
answered from its size alone.

kube-apiserver rejects an object whose ``metadata.annotations`` total more than 256 KiB (keys plus
values, in bytes: apimachinery's ``ValidateAnnotationsSize``, ``TotalAnnotationSizeLimitB``), in
validation, after mutating admission; the same check refuses a pod whose annotations pass it, so a
workload whose pod template carries that much never gets a pod. Reading such a review costs the
domain core CPU time in proportion to the annotations (docs/tasks/operations.md "Serving" gives the figures of the
heavy review of ``benchmarks/serving_faults.py``), and anyone who may create a pod can send it.

Decision (DESIGN.md §5 "Opt-in"; the size alone says nothing about opt-in): such a review is
answered without a patch and without reading the object further:

* when the object carries a placement key (:data:`webhook.kube.kai_scheduler.OPT_IN_KEYS`) in any of its
  annotation maps, it is **denied** (rule ``annotations-too-large``,
  :func:`webhook.admission.rules.deny_oversized_annotations`): its pods could never be created, and its
  placement keys are not reviewed, so it must not be stored as if they had been;
* otherwise it is **allowed**, with one warning naming the field, its size, the limit and the fix
  (:func:`oversized_annotations_warning`): the webhook never denies what did not opt in.
  kube-apiserver rejects the object when the map is its own ("metadata.annotations: Too long: may
  not be more than 262144 bytes"), and every pod of a template that big; a template's map inside a
  custom resource is not validated by kube-apiserver, so such a workload is stored (its pods can
  never be created).

The review's log line and metrics count it as ``denied`` (rule ``annotations-too-large``) or
``allowed`` with one warning.

Only a body longer than :data:`~webhook.admission.rules.ANNOTATIONS_LIMIT_BYTES` can hold such a map (a JSON string is at
least as long as the UTF-8 bytes it decodes to), so smaller reviews never pay for the check.

**Work bound** (issue 37 item 9; docs/decisions/review-work-bound.md): what the core does
for one review grows with the members of the object's maps and lists (the entries of every
``labels`` and ``annotations`` map are read, spelled and copied; every group of a JobSet or Ray
workload gets its own patch operations, in time that grows faster than the groups), and a body
under kube-apiserver's 3 MiB holds 50,000 labels or 10,000 replicatedJobs. Before the core runs,
one walk of ``request.object`` counts (:func:`work_excess`):

* :data:`MAX_MEMBERS` (10,000): the entries of any one map (``metadata.labels``,
  ``metadata.annotations``, any other object) or the items of any one list (``containers``,
  ``env``, ...). Kubernetes limits the bytes of one object's annotations (256 KiB,
  apimachinery ``TotalAnnotationSizeLimitB``) and of a request (3 MiB, kube-apiserver
  ``MaxRequestBodyBytes``), not counts; the 21 manifests of ``../shared/examples`` and
  ``tests/data/manifests`` have at most 8 entries in a map and 4 items in a list;
* :data:`MAX_GROUPS` (256): the members of one map or list that are maps carrying a ``template``
  (a workload's groups: ``spec.replicatedJobs``, ``spec.workerGroupSpecs``, replica specs). The
  core's patch grows with the square of the groups (on this project's 2-CPU machine a JobSet of
  1,000 replicatedJobs took 0.3 s of CPU, of 10,000: 23 s; of 256: 0.03 s); a JobSet that writes
  keys into more than about 130 templates is already denied by the answer's 64 KiB limit; those
  manifests have at most 2 groups;
* :data:`MAX_MEMBERS_IN_ALL` (200,000): the members of all maps and lists together, so that the
  walk itself is bounded (about 0.2 s for the worst 3 MiB body, whose decoding costs more).

``request.oldObject`` is not counted: an UPDATE that brings a stored object back under the limits
must pass. The answer for an object over a limit follows the size bound's decision above:
**denied** (rule ``too-many-items``, :func:`webhook.admission.rules.deny_too_much_work`) when it
carries a placement key in an annotation map (found by the same walk), else **allowed**
unpatched with one warning (:func:`not_reviewed_warning`), never denied. An object over both
bounds gets the size bound's answer (Kubernetes' own limit), unless it passes 200,000 members. A body with fewer than :data:`MAX_GROUPS` commas
cannot exceed any limit (a map or list of n members holds n - 1 commas), so it is never walked
(:func:`needs_bounds`): the usual few-KiB review pays one ``bytes.count``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.admission.config import AdmissionSettings
from webhook.admission.rules import (
    ANNOTATIONS_LIMIT_BYTES,
    MAX_GROUPS,
    MAX_MEMBERS,
    MAX_MEMBERS_IN_ALL,
    deny_oversized_annotations,
    deny_too_much_work,
)
from webhook.admission.types import AdmissionHandler, AdmissionRequest
from webhook.admission.verdict import MAX_WARNING_CHARS, Decision
from webhook.http.envelope import encode_json
from webhook.kube import kai_scheduler
from webhook.topology.objects import TopologyCatalog

__all__ = ["MAX_GROUPS", "MAX_MEMBERS", "MAX_MEMBERS_IN_ALL", "WorkExcess", "annotation_maps", "annotations_size",
           "bounded_review", "carries_placement_key", "needs_bounds", "not_reviewed_warning", "oversized_annotations",
           "oversized_annotations_warning", "work_excess"]


def annotations_size(annotations: Mapping[str, Any]) -> int:
    """Bytes of ``annotations`` as kube-apiserver counts them: the UTF-8 length of every key and
    value. A key or value that is not a string (never sent by kube-apiserver, whose annotations are
    ``map[string]string``) counts as the length of its JSON text."""
    total = 0
    for key, value in annotations.items():
        total += _text_bytes(key) + _text_bytes(value)
    return total


def _text_bytes(value: Any) -> int:
    """UTF-8 bytes of a string; of the JSON text of anything else (an int's digits without encoding it)."""
    kind = type(value)
    if kind is str:
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if kind is int:
        return len(str(value))
    return len(encode_json(value))


def annotation_maps(obj: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every ``metadata.annotations`` map of ``obj``: its own and every one nested in it (the pod
    templates of every workload kind, at any depth), as ``(field path, map)``, e.g.
    ``("spec.replicatedJobs[1].template.spec.template.metadata.annotations", {...})``. Linear in
    the size of ``obj`` (the maps' entries are not visited); never raises for JSON-shaped input."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if type(node) is not list and isinstance(node, (dict, Mapping)):
            meta = node.get("metadata")
            if meta is not None and isinstance(meta, (dict, Mapping)):
                annotations = meta.get("annotations")
                if annotations is not None and isinstance(annotations, (dict, Mapping)):
                    yield ".".join(map(str, path + ("metadata", "annotations"))), annotations
            for key, value in node.items():
                if _is_container(value) and not (key == "annotations" and path[-1:] == ("metadata",)):
                    stack.append((value, path + (key,)))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if _is_container(value):
                    stack.append((value, path[:-1] + (f"{path[-1]}[{index}]",) if path else (f"[{index}]",)))


#: JSON's scalar types: never containers (tested before the ``Mapping`` ABC, whose ``isinstance`` is a
#: Python-level call: the walk of a 0.3 MB JobSet spent most of its time there).
_SCALARS = (str, int, float, bool, type(None))


def _is_container(value: Any) -> bool:
    """Whether ``value`` is a map or a list to walk into (dict and list first, then any Mapping)."""
    kind = type(value)
    return kind is dict or kind is list or (kind not in _SCALARS and isinstance(value, (Mapping, list)))


def oversized_annotations(obj: Any) -> tuple[str, int] | None:
    """The first annotation map of ``obj`` (:func:`annotation_maps`) over
    :data:`~webhook.admission.rules.ANNOTATIONS_LIMIT_BYTES`: ``(field path, bytes)``, e.g.
    ``("spec.template.metadata.annotations", 1388890)``; None when there is none."""
    for path, annotations in annotation_maps(obj):
        size = annotations_size(annotations)
        if size > ANNOTATIONS_LIMIT_BYTES:
            return path, size
    return None


def carries_placement_key(obj: Any) -> bool:
    """True when one of ``obj``'s annotation maps (:func:`annotation_maps`) holds a key of
    :data:`webhook.kube.kai_scheduler.OPT_IN_KEYS` (DESIGN.md §5 "Opt-in"); a lookup per key and map."""
    for _, annotations in annotation_maps(obj):
        for key in kai_scheduler.OPT_IN_KEYS:
            if key in annotations:
                return True
    return False


def oversized_annotations_warning(path: str, size: int) -> str:
    """The warning for annotations at ``path`` of ``size`` bytes, at most 120 characters: the
    field (shortened from the left when needed), the size, the limit and the fix, e.g.
    ``metadata.annotations: 300000 bytes > 262144, Kubernetes' limit; not reviewed: remove annotations``."""
    return _with_field(path, f": {size} bytes > {ANNOTATIONS_LIMIT_BYTES}, Kubernetes' limit; not reviewed: "
                             "remove annotations")


def _with_field(path: str, tail: str) -> str:
    """``path`` + ``tail`` in at most :data:`MAX_WARNING_CHARS` characters: the field path loses
    its leading parts (shown as ``…``) while too long, keeping its last two."""
    parts, shown = path.split("."), path
    while len(shown) + len(tail) > MAX_WARNING_CHARS and len(parts) > 2:
        parts.pop(0)
        shown = "…" + ".".join(parts)
    return shown + tail


# --------------------------------------------------------------------------------------------
# the work bound (module docstring)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkExcess:
    """One work limit an object passes: ``field`` (its path, ``""`` for the whole object),
    ``count`` (members counted), ``limit`` (the limit passed), ``what`` (what was counted:
    ``"entries"`` of a map, ``"items"`` of a list, ``"groups"`` or ``"in all"``, as
    :data:`webhook.admission.rules.WORK_LIMITS` names them) and ``opted_in`` (a key of
    :data:`webhook.kube.kai_scheduler.OPT_IN_KEYS` was found in a ``metadata.annotations`` map among the
    members walked: DESIGN.md §5 "Opt-in")."""

    field: str
    count: int
    limit: int
    what: str
    opted_in: bool = False


#: One step of :func:`work_excess`'s walk: (map or list, the step it was found in, its key there).
_Step = tuple[Any, Any, Any]


def _step_path(step: _Step) -> str:
    """The field path of ``step``: map keys joined by ``.``, list indexes as ``[i]``
    (``spec.replicatedJobs[3].template``); ``""`` for the object itself."""
    parts: list[str] = []
    while step[1] is not None:
        key = step[2]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
        step = step[1]
    return "".join(reversed(parts)).lstrip(".")


def work_excess(obj: Any) -> WorkExcess | None:
    """The first work limit of the module docstring that ``obj`` (parsed JSON) passes, else None:
    a map or list of more than :data:`MAX_MEMBERS` members, one with more than :data:`MAX_GROUPS`
    members that are maps carrying a ``template`` key, or more than :data:`MAX_MEMBERS_IN_ALL`
    members in all. E.g. ``WorkExcess("metadata.labels", 50000, 10000, "entries", True)``.

    One walk of the whole object, stopped only past :data:`MAX_MEMBERS_IN_ALL` members (so that
    its cost is bounded however the object is built; a ``metadata`` map is walked before its
    siblings), which looks for a placement key in every ``metadata.annotations`` map it meets
    (``opted_in``), a few lookups each. So an excess other than ``"in all"`` says the object has
    at most :data:`MAX_MEMBERS_IN_ALL` members. ``metadata.managedFields`` is not counted: kube-apiserver
    writes it into the object it sends (a ``fieldsV1`` map mirroring every field set, so 10,001 labels
    made a 10,002-entry map there, denied at that path on the real kube-apiserver while `review`
    named the labels), and no review reads it. Never raises for JSON-shaped input."""
    if not isinstance(obj, (dict, list)):
        return None
    stack: list[_Step] = [(obj, None, None)]
    found: tuple[_Step, int, int, str] | None = None
    opted_in = False
    total = 0
    while stack:
        step = stack.pop()
        node = step[0]
        size = len(node)
        total += size
        if total > MAX_MEMBERS_IN_ALL:
            if found is None:
                found = ((obj, None, None), total, MAX_MEMBERS_IN_ALL, "in all")
            break
        groups = 0
        if isinstance(node, dict):
            if size > MAX_MEMBERS and found is None:
                found = (step, size, MAX_MEMBERS, "entries")
            meta = None
            in_metadata = step[2] == "metadata"
            for key, value in node.items():
                if in_metadata and key == "managedFields":
                    continue  # written by kube-apiserver, never read by a review
                if isinstance(value, dict):
                    if "template" in value:
                        groups += 1
                    if key == "metadata":
                        meta = value
                    else:
                        stack.append((value, step, key))
                elif isinstance(value, list):
                    stack.append((value, step, key))
            if meta is not None:
                annotations = meta.get("annotations")
                if not opted_in and isinstance(annotations, dict):
                    opted_in = any(key in annotations for key in kai_scheduler.OPT_IN_KEYS)
                stack.append((meta, step, "metadata"))  # walked next
        else:
            if size > MAX_MEMBERS and found is None:
                found = (step, size, MAX_MEMBERS, "items")
            for index, value in enumerate(node):
                if isinstance(value, dict):
                    if "template" in value:
                        groups += 1
                    stack.append((value, step, index))
                elif isinstance(value, list):
                    stack.append((value, step, index))
        if groups > MAX_GROUPS and found is None:
            found = (step, groups, MAX_GROUPS, "groups")
    if found is None:
        return None
    where, count, limit, what = found
    return WorkExcess(_step_path(where), count, limit, what, opted_in)


def needs_bounds(body: bytes) -> bool:
    """Whether a review body of these bytes must go through :func:`bounded_review`: longer than
    :data:`~webhook.admission.rules.ANNOTATIONS_LIMIT_BYTES`, or holding at least :data:`MAX_GROUPS`
    commas (a map or list of more members has that many; fewer commas can pass no work limit)."""
    return len(body) > ANNOTATIONS_LIMIT_BYTES or body.count(b",") >= MAX_GROUPS


def not_reviewed_warning(excess: WorkExcess) -> str:
    """The warning for an object over a work limit that carries no placement key, at most 120
    characters: the field, the count, the limit and the fix, e.g.
    ``metadata.labels: 50000 entries > 10000, this webhook's limit; not reviewed: remove some``."""
    what = "entries and items" if excess.what == "in all" else excess.what
    return _with_field(excess.field or "request.object",
                       f": {excess.count} {what} > {excess.limit}, this webhook's limit; not reviewed: remove some")


def bounded_review(review_fn: AdmissionHandler, *, body_bytes: int | None = None) -> AdmissionHandler:
    """``review_fn`` (the core's entry point, ``review(request, catalog, settings, *, mutate) ->
    Decision``) behind the size bound and the work bound: a request whose ``object`` has an
    annotation map over the size limit, or passes a work limit (:func:`work_excess`), is answered
    without a patch and ``review_fn`` is not called: denied (rule ``annotations-too-large``, or
    ``too-many-items``) when the object carries a placement key, else allowed with one warning
    (:func:`oversized_annotations_warning`, :func:`not_reviewed_warning`): module docstring.
    ``body_bytes``: the length of the review's body when known; the size bound is skipped for a
    body no longer than :data:`~webhook.admission.rules.ANNOTATIONS_LIMIT_BYTES`, which cannot pass it."""
    check_sizes = body_bytes is None or body_bytes > ANNOTATIONS_LIMIT_BYTES

    def review(request: AdmissionRequest | Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *,
               mutate: bool = True) -> Decision:
        obj = request.get("object")
        # the counts first: an object within MAX_MEMBERS_IN_ALL members keeps the size bound's
        # walks bounded too, and its answer comes first (Kubernetes' own limit)
        excess = work_excess(obj)
        found = oversized_annotations(obj) if check_sizes and (excess is None or excess.what != "in all") else None
        if found is None and excess is None:
            return review_fn(request, catalog, settings, mutate=mutate)
        kind = request.get("kind")
        decision = Decision(kind=str(kind.get("kind", "")) if isinstance(kind, Mapping) else "")
        if found is not None:
            if carries_placement_key(obj):
                deny_oversized_annotations(decision, *found)
            else:
                decision.warnings.append(oversized_annotations_warning(*found))
        elif excess is not None:
            if excess.opted_in:
                deny_too_much_work(decision, excess.field, excess.count, excess.what)
            else:
                decision.warnings.append(not_reviewed_warning(excess))
        return decision

    return review
