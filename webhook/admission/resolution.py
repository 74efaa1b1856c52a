"""Resolution of one workload's topology and segment keys (DESIGN.md §3, §4).

What a kind handler knows about an object (:class:`SegmentInputs`) goes in; the values in force
come out (:class:`Resolution`): the topology name (worker template, else root, else the automatic
default of :mod:`webhook.admission.automatic`), the segment keys (template value, else root value) and
the segment size by the precedence of §3 (annotation over LWS ``subGroupSize``; native
``workersPerSegment`` over the annotation). Nothing here validates ranges or levels: that is
:mod:`webhook.admission.rules`, called by :func:`webhook.admission.constraints.resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from webhook.admission.reading import AnnotationMap, Sourced
from webhook.admission.rules import check_size_is_integer
from webhook.admission.segments import SATURATION, parse_plain_decimal
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say
from webhook.kube import kai_scheduler
from webhook.text.messages import UNSET, key_field, quote
from webhook.topology.objects import Topology

#: Where a segment size was read: the annotation (template, else root), or a spec field.
ORIGIN_ANNOTATION = "annotation"

# Every value object here is a typing.NamedTuple: immutable, and built by one tuple construction
# where a frozen dataclass makes one object.__setattr__ call per field. What resolve() builds
# (SegmentSize, Resolution) is built positionally, cheaper than by keyword. Reading a NamedTuple
# field costs more than reading a plain instance attribute, so resolve() reads each SegmentInputs
# field once and hands the helpers what they need. benchmarks/instructions.py counts the cost per
# review; docs/tasks/benchmarks.md "Work per review, counted" has the figures.


class KindSizeRule(Protocol):
    """A kind's own rule on a segment size that passed the range rules of §5 (LWS: the sizes LWS
    accepts, §3; Ray: whole multi-host replicas, §3b), run by
    :func:`webhook.admission.constraints.resolve` after its own rules, so its denials and warnings come
    after theirs. Records its denials and warnings in ``decision``; returns True when the size
    stays in force."""

    def __call__(self, size: SegmentSize, decision: Decision) -> bool: ...


class SpecSizeField(NamedTuple):
    """A segment size stated by a spec field of the workload (DESIGN.md §3): LWS
    ``subGroupSize``, native ``workersPerSegment``. A kind handler builds it with :meth:`stated`,
    which gives ``None`` when the object does not write the field (absent or null).

    ``field``: its path (``spec.workersPerSegment``). ``written``: its value as written (an int,
    or what its reader denied 400: a string ``"8"``, so an UPDATE can say what the stored object
    had, §5 "like with like"). ``value``: ``written`` read as an integer, ``None`` when its reader
    could not. ``wins``: True when the field beats the segment-size annotation (native), False when
    the annotation beats it (LWS, which then writes the annotation's size into the field; §3).
    """

    field: str
    written: Any
    value: int | None
    wins: bool

    @classmethod
    def stated(cls, field: str, written: Any, value: int | None, *, wins: bool) -> SpecSizeField | None:
        """The spec field at path ``field`` as the object writes it (``written``: the raw value,
        ``None`` when absent or null; ``value``: what its reader made of it, ``None`` when it
        denied it), or ``None`` when the object does not write it. ``wins``: see the class."""
        return None if written is None else cls(field, written, value, wins)

    @property
    def name(self) -> str:
        """The field's own name (``subGroupSize``, ``workersPerSegment``): the origin of a size read there."""
        return self.field.rsplit(".", 1)[-1]


class LwsGroup(NamedTuple):
    """The shape of one LeaderWorkerSet group (DESIGN.md §3, §7), for the LWS segment rules.

    ``size``: R, the pods of one group, leader included (``leaderWorkerTemplate.size``), ``None``
    when its reader denied it (400). ``policy``: the leader policy (``LeaderWorker`` /
    ``LeaderExcluded``): segments are counted as the pod index rule of §7 assigns them.
    ``policy_field``: where the policy is read (``...subGroupPolicy.subGroupPolicyType``), what
    UPDATE names when it changes (§5). ``validates_size``: the object sets ``subGroupSize``, so LWS
    accepts only sizes that divide R or R - 1 (§3); the segment-count fix names one of those.
    """

    size: int | None
    policy: str
    policy_field: str
    validates_size: bool


class SegmentInputs(NamedTuple):
    """What a kind handler knows about one workload, for :func:`webhook.admission.constraints.resolve`;
    built by one constructor call in the kind's ``analyse`` and never changed.

    ``kind``: the workload kind (``PyTorchJob``, ``LeaderWorkerSet``, ``JobSet``, …).
    ``root``: the workload's ``metadata.annotations``.
    ``worker``: the worker PodTemplateSpec's annotations, ``None`` when the workload has no
    worker template (then nothing is segmented).
    ``pods`` / ``pods_field`` / ``pods_noun``: the number of segmented pods (PyTorchJob / native:
    workers; LWS LeaderWorker: ``size``; LWS LeaderExcluded: ``size - 1``), the field it comes
    from and how to name it in messages; ``pods`` is ``None`` when it could not be read.
    ``spec_size``: the segment size a spec field states (:class:`SpecSizeField`), ``None`` when
    the kind has no such field or the object does not write it.
    ``lws_group``: the LWS group shape (:class:`LwsGroup`), ``None`` for every other kind (no
    leader policy; segments counted as ``ceil(pods / size)``).
    ``automatic``: automatic segment placement applies to this object and requester (§6, decided
    by :func:`webhook.admission.automatic.applies`).
    ``warn_partial``: warn when the last segment is partial (training kinds; LWS warns itself).
    ``extra_worker_keys``: further owned keys the worker template receives when segmented (LWS
    leader policy, JobSet ``job-parallelism``, Ray ``num-of-hosts``; DESIGN.md §2, §3b).
    ``size_rule``: the kind's own rule on a valid size (:class:`KindSizeRule`), or ``None``.
    ``running_size``: on an UPDATE that keeps a running workload (neither side suspended), the
    segment size the stored object asks for; ``None`` on CREATE. When the new object asks for the
    same size, the size rule's fix names only changes the webhook admits (§5 "UPDATE compares like
    with like", :func:`webhook.admission.rules.scale_fix`).
    ``template_levels_read``: KAI's pod-grouper reads workload-level keys on this worker template
    (Ray: the group's subgroup constraint, §4.5), so they are not warned about as ignored; the kind
    checks them itself.
    ``groups``: in a kind of units (one SegmentInputs per group), what its groups are called
    (``replicatedJobs``, ``worker groups``): each inherits the root's segment size, and the size
    rule's fix names moving it to the templates of the groups to segment.
    """

    kind: str
    root: AnnotationMap
    worker: AnnotationMap | None
    pods: int | None
    pods_field: str
    pods_noun: str
    spec_size: SpecSizeField | None = None
    lws_group: LwsGroup | None = None
    automatic: bool = False
    warn_partial: bool = True
    extra_worker_keys: Mapping[str, str] | None = None
    size_rule: KindSizeRule | None = None
    running_size: int | None = None
    template_levels_read: bool = False
    groups: str | None = None


class SegmentSize(NamedTuple):
    """The segment size one object asks for (DESIGN.md §3, §4.3), built once by :func:`resolve_size`.

    ``raw``: as written (``"04"`` for an annotation, ``4`` for a spec field, the unreadable value
    of a spec field its reader denied). ``field``: the field path it was read from. ``origin``:
    :data:`ORIGIN_ANNOTATION`, or the spec field's name (``subGroupSize``, ``workersPerSegment``).
    ``requested``: the parsed size, ``None`` when it is not an integer (denied by its own rule);
    UPDATE compares it (§5 "like with like"). ``valid``: ``requested`` when it passes the range
    rules of §5 (at least 2, within the segmented pods, at most 10,000 segments), else ``None``.
    """

    raw: Any
    field: str
    origin: str
    requested: int | None = None
    valid: int | None = None


class Resolution(NamedTuple):
    """The resolved keys of one workload (DESIGN.md §4) and what automatic mode adds (§6), built
    once by :func:`webhook.admission.constraints.resolve` and never changed afterwards.

    ``size``: the :class:`SegmentSize` the object asks for, ``None`` when it sets none.
    ``size_in_force``: the segment size in force: valid, kept by the kind's own rule, AND with a
    topology name (§5 "Segments without a topology"); ``None`` means no segment keys are written.
    ``topology_name`` / ``topology_field`` / ``topology``: the resolved name (template, else root,
    else the automatic default), where it was read (or will be written), its Topology when the
    catalog knows it; ``topology_is_default``: the name is automatic mode's default (§6), not the
    user's. ``seg_*`` / ``wl_*``: the segment / workload placement levels the user set.
    ``auto_*``: values automatic mode adds. ``leader_policy`` / ``leader_policy_field``: the LWS
    leader policy and its field (``None`` for the other kinds). ``inputs``: what it was resolved
    from (``None`` for the empty resolution of a kind of units, whose units are resolved each on
    their own).
    """

    size: SegmentSize | None = None
    size_in_force: int | None = None
    topology_name: str | None = None
    topology_field: str | None = None
    topology: Topology | None = None
    topology_is_default: bool = False
    seg_required: Sourced | None = None
    seg_preferred: Sourced | None = None
    wl_required: Sourced | None = None
    wl_preferred: Sourced | None = None
    auto_segment_preferred: str | None = None
    auto_workload_preferred: str | None = None
    leader_policy: str | None = None
    leader_policy_field: str | None = None
    inputs: SegmentInputs | None = None

    @property
    def segmented(self) -> bool:
        """True when segments are in force (a valid size and a topology name)."""
        return self.size_in_force is not None

    @property
    def requested_size(self) -> int | None:
        """The segment size the object asks for (parsed), ``None`` when none or not an integer."""
        return self.size.requested if self.size is not None else None

    @property
    def segment_required(self) -> str | None:
        """Effective segment required level."""
        return self.seg_required.value if self.seg_required else None

    @property
    def segment_preferred(self) -> str | None:
        """Effective segment preferred level (the user's, else the automatic one)."""
        return self.seg_preferred.value if self.seg_preferred else self.auto_segment_preferred

    def node_label(self, level: str | None) -> str | None:
        """``level`` as a node label: a KAI level alias of the resolved topology
        (``spec.levels[].alias``, :meth:`Topology.label_of`) resolved, else as written; what every
        reader but KAI is given (DESIGN.md §5: our engine, controller and gate, Kueue and the
        Workload API know no KAI alias). ``None`` stays ``None``."""
        if level is None or self.topology is None:
            return level
        return self.topology.label_of(level)

    def workload_labels(self) -> tuple[str | None, str | None]:
        """The workload (required, preferred) levels (the user's, else the automatic preferred
        one) as node labels (:meth:`node_label`)."""
        required = self.wl_required.value if self.wl_required else None
        preferred = self.wl_preferred.value if self.wl_preferred else self.auto_workload_preferred
        return self.node_label(required), self.node_label(preferred)

    def segment_labels(self) -> tuple[str | None, str | None]:
        """The segment (required, preferred) levels as node labels (:meth:`node_label`)."""
        return self.node_label(self.segment_required), self.node_label(self.segment_preferred)

    def without_defaults(self) -> Resolution:
        """This resolution as if automatic mode were off (§6): no automatic levels, no default
        topology name (and then no segments in force, §5 "Segments without a topology"). What the
        stored object of an UPDATE says by itself, from the one analysis that also tells whether
        it carries its defaults (:func:`webhook.admission.automatic.update_defaults`)."""
        if self.auto_segment_preferred is None and self.auto_workload_preferred is None \
                and not self.topology_is_default:
            return self
        if not self.topology_is_default:
            return self._replace(auto_segment_preferred=None, auto_workload_preferred=None)
        return self._replace(auto_segment_preferred=None, auto_workload_preferred=None, topology_name=None,
                             topology=None, topology_is_default=False, size_in_force=None)

    def worker_keys(self) -> dict[str, str]:
        """Owned keys to write on the worker PodTemplateSpec (DESIGN.md §2): the resolved topology
        name, segment size and segment placement levels (+ the kind's ``extra_worker_keys``, e.g.
        the LWS leader policy). Empty when not segmented."""
        size, name, required, preferred, inputs = (self.size_in_force, self.topology_name, self.seg_required,
                                                   self.seg_preferred, self.inputs)
        if size is None:
            return {}
        out: dict[str, str] = {}
        if name is not None:
            out[kai_scheduler.TOPOLOGY] = name
        out[kai_scheduler.SEGMENT_SIZE] = str(size)
        if required is not None:
            out[kai_scheduler.SEGMENT_REQUIRED] = required.value
        preferred_level = preferred.value if preferred is not None else self.auto_segment_preferred
        if preferred_level is not None:
            out[kai_scheduler.SEGMENT_PREFERRED] = preferred_level
        if inputs is not None and inputs.extra_worker_keys:
            out.update(inputs.extra_worker_keys)
        return out

    def root_keys(self, root: AnnotationMap) -> dict[str, str]:
        """Owned keys written on the workload root ``metadata.annotations``: automatic mode's
        workload preferred level (§6), and the resolved topology name when a workload level is in
        force (the user's or automatic mode's) and the root names none (§4.5: KAI's pod-grouper
        reads the PodGroup's topology from the top owner's own annotations, KAI d5bc503
        ``pkg/podgrouper/podgrouper/plugins/defaultgrouper/default_grouper.go``, and the scheduler
        ignores a level without a topology name). Empty when neither applies."""
        out: dict[str, str] = {}
        workload_level = self.wl_required is not None or self.wl_preferred is not None
        if workload_level or self.auto_workload_preferred is not None:
            if kai_scheduler.TOPOLOGY not in root.values and self.topology_name is not None:
                out[kai_scheduler.TOPOLOGY] = self.topology_name
        if self.auto_workload_preferred is not None:
            out[kai_scheduler.TOPOLOGY_PREFERRED] = self.auto_workload_preferred
        return out

    def segment_view(self) -> list[tuple[str, str, str | None, Any]]:
        """What UPDATE may not change (DESIGN.md §5), as ``(name, annotation key, field, value)``:
        the segment size the object asks for, the topology name, the segment levels (automatic
        ones included) and the LWS leader policy, which decides segment membership as much as the
        size does (our addition). ``field`` is where the value was read (``None`` for an
        automatic default: it is written under ``annotation key`` on the template). A value is
        :data:`webhook.text.messages.UNSET` when not set; the policy counts only when a size is
        asked for (written, even if not valid)."""
        def value(v: Any) -> Any:
            return UNSET if v is None else v

        size = self.size
        return [
            ("segment size", kai_scheduler.SEGMENT_SIZE, size.field if size else None, value(self.requested_size)),
            ("topology name", kai_scheduler.TOPOLOGY, self.topology_field, value(self.topology_name)),
            ("segment required level", kai_scheduler.SEGMENT_REQUIRED,
             self.seg_required.field if self.seg_required else None, value(self.segment_required)),
            ("segment preferred level", kai_scheduler.SEGMENT_PREFERRED,
             self.seg_preferred.field if self.seg_preferred else None, value(self.segment_preferred)),
            ("segment leader policy", kai_scheduler.SEGMENT_LEADER_POLICY, self.leader_policy_field,
             value(self.leader_policy if size is not None else None)),
        ]


def pick(root: AnnotationMap, worker: AnnotationMap | None, key: str) -> Sourced | None:
    """§4.1 / §4.2: the worker template's value, else the root's, else ``None``."""
    if worker is not None and key in worker.values:
        return worker.get(key)
    return root.get(key)


#: The placement keys of one workload as the user set them (§4.2), :func:`resolve_keys`:
#: ``(topology name, segment required, segment preferred, workload required, workload preferred)``,
#: each a :class:`~webhook.admission.reading.Sourced` or ``None`` (a plain tuple: unpacked at once).
PlacementKeys = tuple[Sourced | None, Sourced | None, Sourced | None, Sourced | None, Sourced | None]


def resolve_keys(root: AnnotationMap, worker: AnnotationMap | None, decision: Decision, *,
                 template_levels_read: bool = False) -> PlacementKeys:
    """The placement keys of §4.2 (:data:`PlacementKeys`) from the workload's ``root`` annotations
    and its ``worker`` template's (:attr:`SegmentInputs.root` / ``.worker``): the topology name and
    segment levels from the template, else the root; the workload levels from the root.
    Workload-level keys on the worker template are ignored with a warning
    (``workload-key-on-template``), unless ``template_levels_read`` (a template KAI reads them
    from, :attr:`SegmentInputs.template_levels_read`)."""
    if worker is not None and not template_levels_read:
        for key in kai_scheduler.WORKLOAD_PLACEMENT_KEYS:
            if key in worker.values:
                say(decision, "workload-key-on-template", key=key)
    return (pick(root, worker, kai_scheduler.TOPOLOGY), pick(root, worker, kai_scheduler.SEGMENT_REQUIRED),
            pick(root, worker, kai_scheduler.SEGMENT_PREFERRED), root.get(kai_scheduler.TOPOLOGY_REQUIRED),
            root.get(kai_scheduler.TOPOLOGY_PREFERRED))


#: What :func:`resolve_size` reads: ``(raw, field, origin, requested)`` of a :class:`SegmentSize`
#: whose ``valid`` is not checked yet (a plain tuple: :func:`webhook.admission.constraints.resolve`
#: builds the one SegmentSize once the range rules said whether it is valid).
AskedSize = tuple[Any, str, str, int | None]


def resolve_size(root: AnnotationMap, worker: AnnotationMap | None, spec: SpecSizeField | None,
                 decision: Decision) -> AskedSize | None:
    """§3 / §4.3: the segment size the object asks for and where it was read (:data:`AskedSize`),
    from the annotation (``worker`` template, else ``root``) and the spec field (``spec``, see
    :class:`SegmentInputs`). Records the not-integer denial and the precedence warnings. Returns
    ``None`` when the object sets no segment size at all."""
    ann = pick(root, worker, kai_scheduler.SEGMENT_SIZE)
    if spec is not None and (spec.wins or ann is None):
        if spec.value is None:
            # Unreadable (denied 400 by its reader): the object asks for a size it does not state validly.
            return spec.written, spec.field, spec.name, None
        if ann is not None and parse_plain_decimal(ann.value) != spec.value:
            say(decision, "segment-size-disagrees-with-spec", value=quote(ann.value), spec_field=spec.name,
                spec_size=spec.value)
        return spec.value, spec.field, spec.name, spec.value
    if ann is None:
        return None
    size = parse_plain_decimal(ann.value)
    if not check_size_is_integer(decision, ann.field, ann.value, size) or size is None:
        return ann.value, ann.field, ORIGIN_ANNOTATION, None
    if ann.value != str(size) and size < SATURATION:  # a saturated value is denied by the range rules
        say(decision, "segment-size-not-canonical", value=quote(ann.value), canonical=quote(str(size)))
    return ann.value, ann.field, ORIGIN_ANNOTATION, size


def topology_source_field(worker: AnnotationMap | None, source: Sourced | None) -> str | None:
    """Field path of the topology name: where it was read (``source``), else where it will be
    written (the ``worker`` template's annotations; ``None`` without a worker template)."""
    if source is not None:
        return source.field
    return key_field(worker.field, kai_scheduler.TOPOLOGY) if worker is not None else None
