"""What one workload object resolves to: the :class:`Plan` a kind's analysis returns (the shared
flow of :mod:`webhook.admission.kinds._workload` turns it into the patch, and
:mod:`webhook.admission.targets` compiles it for the chosen target) and the :class:`ReaderEdits` of
LWS's "one answer for every reader" (DESIGN.md §3). Its own module so that both read it without
importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.admission.reading import AnnotationMap
from webhook.admission.resolution import Resolution
from webhook.kube import kai_scheduler
from webhook.text.messages import key_field


@dataclass(frozen=True)
class ReaderEdits:
    """The edits that give every reader of an object one answer (DESIGN.md §3, LWS): KAI's
    pod-grouper reads ``subGroupSize`` first, then the root annotation; the webhook's resolved size
    is written there too. ``spec_values``: ``(JSON Pointer parts, value)`` the patch sets (LWS
    ``subGroupSize``); ``root_annotations``: root annotations the patch sets (LWS root
    ``segment-size``); ``overwritten_inputs``: the field paths of segment inputs the patch sets to
    the resolved value, so a different value there on UPDATE is not a change."""

    spec_values: tuple[tuple[tuple[str, ...], Any], ...] = ()
    root_annotations: Mapping[str, str] = field(default_factory=dict)
    overwritten_inputs: frozenset[str] = frozenset()


#: No reader edits (every kind but LWS).
NO_READER_EDITS = ReaderEdits()


@dataclass
class Plan:
    """What one workload object resolves to.

    ``resolution``: the resolved keys; ``root`` / ``worker``: the annotation maps of the workload
    root and the worker PodTemplateSpec (``worker`` is ``None`` without a worker template);
    ``other_templates``: further templates and the owned keys they receive (LWS leaderTemplate);
    ``suspended``: PyTorchJob ``spec.runPolicy.suspend`` is true. An UPDATE may change the
    segment keys when the old or the new object is suspended: either no pods exist (old
    suspended) or the operator deletes them now (new suspended), so no running pod keeps a stale
    constraint.
    ``master``: the annotation map of a never-segmented Master PodTemplateSpec (PyTorchJob,
    native), or ``None``. When the workload is segmented, that template receives the label
    ``kai.scheduler/subgroup-name: master`` (DESIGN.md §2, §7). It is written on the template,
    not by the pod handler, because a Master pod carries no segment size of its own.
    ``templates``: every PodTemplateSpec annotation map of the object (for the opt-in and
    misspelled-key rules); ``always_ours``: the kind is this project's own (native), so the
    opt-in rule does not apply.
    ``reader_edits``: what the patch sets so that every reader of the object sees the resolved
    size (LWS "one answer for every reader", DESIGN.md §3), :class:`ReaderEdits`.
    """

    resolution: Resolution
    root: AnnotationMap
    worker: AnnotationMap | None
    other_templates: list[tuple[AnnotationMap, dict[str, str]]] = field(default_factory=list)
    suspended: bool = False
    master: AnnotationMap | None = None
    templates: list[AnnotationMap] = field(default_factory=list)
    always_ours: bool = False
    reader_edits: ReaderEdits = NO_READER_EDITS
    #: pods per gang and further templates of the gang (LWS leader), for ``--gate-pods`` (§9)
    gang_size: int | None = None
    gang_templates: list[AnnotationMap] = field(default_factory=list)
    #: a kind whose segmented templates are resolved each on its own (JobSet: one per
    #: replicatedJob, DESIGN.md §3b): ``(name, plan)`` per unit; the object's own plan then carries
    #: no resolution of its own, and UPDATE compares each unit with the stored unit of that name
    units: list[tuple[str, Plan]] = field(default_factory=list)
    #: further RFC 6902 operations of the patch, after the template entries (TrainJob: its own
    #: ``spec.runtimePatches`` entry, DESIGN.md §3b)
    extra_ops: list[dict[str, Any]] = field(default_factory=list)
    #: False when KAI's pod-grouper cannot group the object's owner chain into subgroups (native
    #: kind, DESIGN.md §4.5): no template or pod then gets ``kai.scheduler/subgroup-name``
    kai_subgroups: bool = True
    #: KAI makes ONE PodGroup of the object (JobSet, Ray: DESIGN.md §4.5): with a workload level
    #: on the root, ``--gate-pods`` gangs the whole object (:func:`gang_entries`)
    one_podgroup: bool = False
    #: a template of the object that is never gated (the Ray head), named for the warning that
    #: the root's workload level does not reach it under ``--gate-pods``; ``None`` when none
    ungated: str | None = None
    #: the segmented pods may scale (PyTorchJob ``spec.elasticPolicy``, an autoscaled Ray worker
    #: group): ``(what scales, fewest pods, most pods)``; ``None`` when they do not
    elastic: tuple[str, int, int] | None = None

    def annotation_maps(self) -> list[AnnotationMap]:
        """The root's and every template's annotation map (those of every unit included)."""
        maps = [self.root] + [m for m in (self.worker, self.master) if m is not None]
        maps += [t for t, _ in self.other_templates] + self.templates
        for _, unit in self.units:
            maps += unit.annotation_maps()
        unique: dict[str, AnnotationMap] = {}
        for amap in maps:
            unique.setdefault(amap.field, amap)
        return list(unique.values())

    def segment_inputs(self) -> dict[str, Any]:
        """Every segment input the object states, by field path: the topology name, segment size
        and segment levels on the root and on the worker template, and the spec's segment size
        (LWS ``subGroupSize``, native ``workersPerSegment``)."""
        out: dict[str, Any] = {}
        for amap in (self.root, self.worker):
            if amap is not None:
                for key in (kai_scheduler.SEGMENT_SIZE, kai_scheduler.TOPOLOGY, kai_scheduler.SEGMENT_REQUIRED, kai_scheduler.SEGMENT_PREFERRED):
                    if key in amap.values:
                        out[key_field(amap.field, key)] = amap.values[key]
        inputs = self.resolution.inputs
        spec = inputs.spec_size if inputs is not None else None
        if spec is not None and spec.value is not None:
            out[spec.field] = spec.value
        return out

    def root_keys(self) -> dict[str, str]:
        """Owned keys the patch sets on the workload root: the reader edits' root annotations (LWS
        root ``segment-size``, §3) and automatic mode's (§6)."""
        return {**self.reader_edits.root_annotations, **self.resolution.root_keys(self.root)}

    def owned_keys(self) -> tuple[dict[str, str], dict[str, str]]:
        """(worker template keys, root keys) this plan makes the webhook own (DESIGN.md §2)."""
        return self.resolution.worker_keys(), self.root_keys()

    def without_defaults(self) -> Plan:
        """This plan with every resolution as if automatic mode were off
        (:meth:`Resolution.without_defaults`): what a stored object says by itself."""
        return replace(self, resolution=self.resolution.without_defaults(),
                       units=[(name, unit.without_defaults()) for name, unit in self.units])
