"""Resolution of one workload's topology and segment keys (DESIGN.md §3, §4).

What a kind handler knows about an object (:class:`SegmentInputs`) goes in; the values in force
come out (:class:`Resolution`): the topology name (worker template, else root, else the automatic
default of :mod:`webhook.core.automatic`), the segment keys (template value, else root value) and
the segment size by the precedence of §3 (annotation over LWS ``subGroupSize``; native
``workersPerSegment`` over the annotation). Nothing here validates ranges or levels: that is
:mod:`webhook.core.rules`, called by :func:`webhook.core.constraints.resolve`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.core import keys
from webhook.core.decision import Decision
from webhook.core.messages import UNSET, key_field, quote
from webhook.core.reading import AnnotationMap, Sourced
from webhook.core.rules import check_size_is_integer
from webhook.core.segments import SATURATION, parse_plain_decimal
from webhook.core.topology import Topology

#: Where a segment size was read: the annotation (template, else root), or a spec field.
ORIGIN_ANNOTATION = "annotation"


@dataclass
class SegmentInputs:
    """What a kind handler knows about one workload, for :func:`webhook.core.constraints.resolve`.

    ``kind``: ``PyTorchJob`` / ``LeaderWorkerSet`` / ``DistributedWorkload``.
    ``root``: the workload's ``metadata.annotations``.
    ``worker``: the worker PodTemplateSpec's annotations, ``None`` when the workload has no
    worker template (then nothing is segmented).
    ``pods`` / ``pods_field`` / ``pods_noun``: the number of segmented pods (PyTorchJob / native:
    workers; LWS LeaderWorker: ``size``; LWS LeaderExcluded: ``size - 1``), the field it comes
    from and how to name it in messages; ``pods`` is ``None`` when it could not be read.
    ``spec_size`` / ``spec_size_field``: a segment size from a spec field (LWS ``subGroupSize``,
    native ``workersPerSegment``); ``spec_size_written``: that field's value as written when its
    reader could not read it as an integer (a string ``"8"``, denied 400 there), else ``None``, so
    an UPDATE can say what the stored object had (§5 "like with like"); ``spec_size_wins``: True
    when that field beats the annotation (native), False when the annotation beats it (LWS;
    DESIGN.md §3).
    ``automatic``: automatic segment placement applies to this object and requester (§6, decided
    by :func:`webhook.core.automatic.applies`).
    ``warn_partial``: warn when the last segment is partial (training kinds; LWS warns itself).
    ``group_size`` / ``leader_policy`` / ``lws_validates_size``: LWS only, the group size R (its
    segments are counted as the pod index rule assigns them, DESIGN.md §7), the leader policy, and
    whether the object sets ``subGroupSize`` (LWS then accepts only sizes dividing R or R - 1, §3).
    """

    kind: str
    root: AnnotationMap
    worker: AnnotationMap | None
    pods: int | None
    pods_field: str
    pods_noun: str
    spec_size: int | None = None
    spec_size_field: str | None = None
    spec_size_wins: bool = False
    spec_size_written: Any = None
    automatic: bool = False
    warn_partial: bool = True
    group_size: int | None = None
    leader_policy: str = keys.POLICY_LEADER_WORKER
    lws_validates_size: bool = False

    @property
    def spec_size_name(self) -> str:
        """The spec field's own name (``subGroupSize``, ``workersPerSegment``)."""
        return (self.spec_size_field or "spec").rsplit(".", 1)[-1]


@dataclass
class Resolution:
    """The resolved keys of one workload (DESIGN.md §4) and what automatic mode adds (§6).

    ``requested_size``: the segment size the object asks for (parsed, before the range rules),
    ``None`` when it sets none or it is not an integer; UPDATE compares it (§5 "like with like").
    ``valid_size``: the requested size when it passes the range rules of §5 (with or without a
    topology). ``size``: the segment size in force: valid (> 1, within the pods) AND with a topology name
    (§5 "Segments without a topology"); ``None`` means no segment keys are written.
    ``size_field`` / ``size_raw`` / ``size_origin``: where the size was read, as written, and
    :data:`ORIGIN_ANNOTATION` or the spec field's name.
    ``topology_name`` / ``topology_field`` / ``topology``: the resolved name (template, else root,
    else the automatic default), where it was read, its Topology when the catalog knows it.
    ``seg_*`` / ``wl_*``: the segment / workload placement levels the user set. ``auto_*``: values
    automatic mode adds. ``extra_worker_keys``: further owned template keys (LWS leader policy).
    ``leader_policy`` / ``leader_policy_field``: the LWS leader policy and its field.
    ``spec_updates``: spec fields the patch sets (``(JSON Pointer parts, value)``: LWS
    ``subGroupSize``, §3). ``root_updates``: root annotations the patch sets besides the
    automatic ones (LWS root ``segment-size``, §3).
    """

    requested_size: int | None = None
    valid_size: int | None = None
    size: int | None = None
    size_field: str | None = None
    size_raw: Any = None
    size_origin: str = ORIGIN_ANNOTATION
    topology_name: str | None = None
    topology_field: str | None = None
    topology: Topology | None = None
    seg_required: Sourced | None = None
    seg_preferred: Sourced | None = None
    wl_required: Sourced | None = None
    wl_preferred: Sourced | None = None
    auto_segment_preferred: str | None = None
    auto_workload_preferred: str | None = None
    extra_worker_keys: dict[str, str] = field(default_factory=dict)
    leader_policy: str | None = None
    leader_policy_field: str | None = None
    spec_size: int | None = None
    spec_size_field: str | None = None
    spec_updates: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)
    root_updates: dict[str, str] = field(default_factory=dict)
    #: the inputs this was resolved from (set by :func:`webhook.core.constraints.resolve`)
    inputs: SegmentInputs | None = field(default=None, compare=False, repr=False)

    @property
    def segmented(self) -> bool:
        """True when segments are in force (a valid size and a topology name)."""
        return self.size is not None

    @property
    def segment_required(self) -> str | None:
        """Effective segment required level."""
        return self.seg_required.value if self.seg_required else None

    @property
    def segment_preferred(self) -> str | None:
        """Effective segment preferred level (the user's, else the automatic one)."""
        return self.seg_preferred.value if self.seg_preferred else self.auto_segment_preferred

    def worker_keys(self) -> dict[str, str]:
        """Owned keys to write on the worker PodTemplateSpec (DESIGN.md §2): the resolved topology
        name, segment size and segment placement levels (+ ``extra_worker_keys``, e.g. the LWS
        leader policy). Empty when not segmented."""
        if not self.segmented:
            return {}
        out: dict[str, str] = {}
        if self.topology_name is not None:
            out[keys.TOPOLOGY] = self.topology_name
        out[keys.SEGMENT_SIZE] = str(self.size)
        if self.segment_required is not None:
            out[keys.SEGMENT_REQUIRED] = self.segment_required
        if self.segment_preferred is not None:
            out[keys.SEGMENT_PREFERRED] = self.segment_preferred
        out.update(self.extra_worker_keys)
        return out

    def root_keys(self, root: AnnotationMap) -> dict[str, str]:
        """Owned keys to write on the workload root ``metadata.annotations``: the automatic
        workload preferred level, plus the topology name when the root names none (so the root's
        workload-level constraint is complete on its own), plus :attr:`root_updates`."""
        out = dict(self.root_updates) if self.segmented else {}
        if self.auto_workload_preferred is not None:
            if keys.TOPOLOGY not in root.values and self.topology_name is not None:
                out[keys.TOPOLOGY] = self.topology_name
            out[keys.TOPOLOGY_PREFERRED] = self.auto_workload_preferred
        return out

    def segment_view(self) -> list[tuple[str, str, str | None, Any]]:
        """What UPDATE may not change (DESIGN.md §5), as ``(name, annotation key, field, value)``:
        the segment size the object asks for, the topology name, the segment levels (automatic
        ones included) and the LWS leader policy, which decides segment membership as much as the
        size does (our addition). ``field`` is where the value was read (``None`` for an
        automatic default: it is written under ``annotation key`` on the template). A value is
        :data:`webhook.core.messages.UNSET` when not set; the policy counts only when a size is
        asked for (written, even if not valid)."""
        def value(v: Any) -> Any:
            return UNSET if v is None else v

        size_asked = self.requested_size is not None or self.size_raw is not None
        return [
            ("segment size", keys.SEGMENT_SIZE, self.size_field, value(self.requested_size)),
            ("topology name", keys.TOPOLOGY, self.topology_field, value(self.topology_name)),
            ("segment required level", keys.SEGMENT_REQUIRED,
             self.seg_required.field if self.seg_required else None, value(self.segment_required)),
            ("segment preferred level", keys.SEGMENT_PREFERRED,
             self.seg_preferred.field if self.seg_preferred else None, value(self.segment_preferred)),
            ("segment leader policy", keys.SEGMENT_LEADER_POLICY, self.leader_policy_field,
             value(self.leader_policy if size_asked else None)),
        ]


def pick(root: AnnotationMap, worker: AnnotationMap | None, key: str) -> Sourced | None:
    """§4.1 / §4.2: the worker template's value, else the root's, else ``None``."""
    if worker is not None and key in worker.values:
        return worker.get(key)
    return root.get(key)


def resolve_keys(inp: SegmentInputs, res: Resolution, decision: Decision) -> Sourced | None:
    """Fill the placement levels of ``res`` (§4.2) and return the topology name's source (template,
    else root). Workload-level keys on the worker template are ignored with a warning."""
    res.seg_required = pick(inp.root, inp.worker, keys.SEGMENT_REQUIRED)
    res.seg_preferred = pick(inp.root, inp.worker, keys.SEGMENT_PREFERRED)
    res.wl_required = inp.root.get(keys.TOPOLOGY_REQUIRED)
    res.wl_preferred = inp.root.get(keys.TOPOLOGY_PREFERRED)
    if inp.worker is not None:
        for key in keys.WORKLOAD_PLACEMENT_KEYS:
            if key in inp.worker.values:
                decision.warn(f"{key} on the worker template is ignored; set it in metadata.annotations")
    return pick(inp.root, inp.worker, keys.TOPOLOGY)


def resolve_size(inp: SegmentInputs, res: Resolution, decision: Decision) -> bool:
    """§3 / §4.3: the segment size and where it was read. Sets ``res.requested_size``,
    ``size_field``, ``size_raw`` and ``size_origin``; records the not-integer denial and the
    precedence warnings. Returns True when the object sets a segment size at all."""
    ann = pick(inp.root, inp.worker, keys.SEGMENT_SIZE)
    spec_size = inp.spec_size
    if spec_size is not None and (inp.spec_size_wins or ann is None):
        res.size_field, res.size_raw, res.size_origin = inp.spec_size_field or "spec", spec_size, inp.spec_size_name
        res.requested_size = spec_size
        if ann is not None and parse_plain_decimal(ann.value) != spec_size:
            decision.warn(f"{keys.SEGMENT_SIZE}={quote(ann.value)} disagrees with {inp.spec_size_name}={spec_size}; overwritten")
        return True
    if spec_size is None and inp.spec_size_written is not None and (inp.spec_size_wins or ann is None):
        # Unreadable (denied 400 by its reader): the object asks for a size it does not state validly.
        res.size_field, res.size_raw, res.size_origin = inp.spec_size_field or "spec", inp.spec_size_written, inp.spec_size_name
        return True
    if ann is None:
        return False
    res.size_field, res.size_raw, res.size_origin = ann.field, ann.value, ORIGIN_ANNOTATION
    size = parse_plain_decimal(ann.value)
    if not check_size_is_integer(decision, ann.field, ann.value, size):
        return True
    res.requested_size = size
    if ann.value != str(size) and size < SATURATION:  # a saturated value is denied by the range rules
        decision.warn(f"{keys.SEGMENT_SIZE}={quote(ann.value)} written as {quote(str(size))}")
    return True


def topology_source_field(inp: SegmentInputs, source: Sourced | None) -> str | None:
    """Field path of the topology name: where it was read, else where it will be written."""
    if source is not None:
        return source.field
    return key_field(inp.worker.field, keys.TOPOLOGY) if inp.worker is not None else None
