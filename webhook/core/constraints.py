"""Resolution and validation of the topology / segment keys of one workload (DESIGN.md §4–§6).

The kind handlers (``webhook.core.kinds.*``) read their object's shape, then hand this module an
:class:`SegmentInputs` (root annotations, worker PodTemplateSpec annotations, the number of pods
that are segmented, an optional size from a spec field). :func:`resolve` applies the precedence
rules (§4), records every violation of §5 in the :class:`Decision` (all of them, so one object is
reported in one message), adds the warnings, and applies automatic segment placement (§6). The
returned :class:`Resolution` says which owned keys the handler writes.

Messages name the field path, the value (JSON-quoted, so ``" 4"`` and ``""`` are visible), the
rule id and the fix. Field paths look like
``spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from webhook.core import keys
from webhook.core.decision import AdmissionSettings, Decision
from webhook.core.segments import SATURATION, parse_plain_decimal, segment_count
from webhook.core.topology import Topology, TopologyCatalog, is_valid_label_key

MALFORMED = "malformed-object"

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# --------------------------------------------------------------------------------------------
# message helpers
# --------------------------------------------------------------------------------------------

def quote(value: Any) -> str:
    """Render a value for a message: strings JSON-quoted (``" 4"``, ``""`` stay visible),
    other JSON values as JSON (``4``, ``true``, ``null``, ``{...}`` shortened to 60 chars)."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def key_field(map_field: str, key: str) -> str:
    """Field path of one map entry: ``key_field("metadata.annotations", "a/b")`` →
    ``metadata.annotations["a/b"]``."""
    return f'{map_field}["{key}"]'


def join_field(parent: str, child: str) -> str:
    """``join_field("", "metadata")`` → ``metadata``; ``join_field("spec", "x")`` → ``spec.x``."""
    return f"{parent}.{child}" if parent else child


def deny(decision: Decision, rule: str, field_path: str, value: Any, problem: str, fix: str, code: int = 403) -> None:
    """Record one violation with the house message format:
    ``<field> = <value>: <problem> (rule <rule>); fix: <fix>.``"""
    decision.deny(rule, field_path, f"{field_path} = {quote(value)}: {problem} (rule {rule}); fix: {fix}.", code)


def deny_malformed(decision: Decision, field_path: str, value: Any, expected: str) -> None:
    """A malformed object (DESIGN.md §5: status code 400) at ``field_path``."""
    deny(decision, MALFORMED, field_path, value, f"must be {expected}", f"send {expected} at {field_path}", code=400)


# --------------------------------------------------------------------------------------------
# reading the object
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sourced:
    """A string value and the field path it was read from (for messages)."""

    value: str
    field: str


@dataclass(frozen=True)
class AnnotationMap:
    """The ``metadata.annotations`` of one object or PodTemplateSpec.

    ``field``: human path of the map (``metadata.annotations`` for the workload root);
    ``container``: JSON Pointer parts of the object that owns ``metadata`` (``()`` for the root);
    ``values``: the entries (all strings, validated).
    """

    field: str
    container: tuple[str, ...]
    values: Mapping[str, str]

    def get(self, key: str) -> Sourced | None:
        """The entry ``key`` with its field path, or ``None`` when absent."""
        if key in self.values:
            return Sourced(self.values[key], key_field(self.field, key))
        return None

    def has_any(self, *names: str) -> bool:
        """True when any of ``names`` is present."""
        return any(n in self.values for n in names)


def get_mapping(parent: Mapping, key: str, parent_field: str, decision: Decision, *, required: bool = False) -> Mapping | None:
    """``parent[key]`` when it is a mapping; ``{}``-like ``None`` when absent/null (a denial
    naming the field when ``required``); a 400 denial naming the field when it is another type."""
    value = parent.get(key)
    path = join_field(parent_field, key)
    if value is None:
        if required:
            deny_malformed(decision, path, None, "an object (it is required)")
        return None
    if not isinstance(value, Mapping):
        deny_malformed(decision, path, value, "an object")
        return None
    return value


#: Largest value of an ``int32`` field: PyTorchJob ``replicas`` and LWS ``size`` are int32 in their
#: CRDs (``shared/crds``), and kube-apiserver checks that schema only after mutating admission.
INT32_MAX = 2**31 - 1


def get_int(parent: Mapping, key: str, parent_field: str, decision: Decision, *, default: int | None,
            minimum: int = 0, maximum: int = INT32_MAX) -> int | None:
    """``parent[key]`` as an integer in ``[minimum, maximum]`` (``default`` when absent or null).
    Booleans, floats, strings and out-of-range numbers → 400 denial naming the field, returns
    ``None``. The int32 upper bound keeps every later computation small."""
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        deny_malformed(decision, join_field(parent_field, key), value, f"an integer from {minimum} to {maximum}")
        return None
    return value


def read_string_map(owner: Mapping, owner_field: str, map_name: str, decision: Decision) -> Mapping[str, str] | None:
    """Validate ``owner.metadata.<map_name>`` (``annotations`` or ``labels``) as a map of
    strings. Returns the map (``{}`` when ``metadata`` or the map is absent or null), or ``None``
    after a 400 denial naming the offending field (metadata not an object, map not an object,
    a value that is not a string: Kubernetes annotation and label values are always strings)."""
    meta_field = join_field(owner_field, "metadata")
    meta = owner.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        deny_malformed(decision, meta_field, meta, "an object")
        return None
    values = meta.get(map_name)
    map_field = join_field(meta_field, map_name)
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        deny_malformed(decision, map_field, values, "a map of string keys to string values")
        return None
    ok = True
    for k, v in values.items():
        if not isinstance(k, str) or not isinstance(v, str):
            deny_malformed(decision, key_field(map_field, str(k)), v, "a string (quote it in YAML)")
            ok = False
    return values if ok else None


def read_annotations(owner: Mapping, owner_field: str, container: tuple[str, ...], decision: Decision) -> AnnotationMap | None:
    """:func:`read_string_map` for ``annotations``, wrapped in an :class:`AnnotationMap`."""
    values = read_string_map(owner, owner_field, "annotations", decision)
    if values is None:
        return None
    return AnnotationMap(join_field(join_field(owner_field, "metadata"), "annotations"), container, values)


# --------------------------------------------------------------------------------------------
# resolution
# --------------------------------------------------------------------------------------------

@dataclass
class SegmentInputs:
    """What a kind handler knows about one workload, for :func:`resolve`.

    ``kind``: ``PyTorchJob`` / ``LeaderWorkerSet`` / ``DistributedWorkload``.
    ``root``: the workload's ``metadata.annotations``.
    ``worker``: the worker PodTemplateSpec's annotations, ``None`` when the workload has no
    worker template (then nothing is segmented).
    ``pods`` / ``pods_field`` / ``pods_noun``: the number of segmented pods (PyTorchJob / native:
    workers; LWS LeaderWorker: ``size``; LWS LeaderExcluded: ``size - 1``), the field it comes
    from and how to name it in messages; ``pods`` is ``None`` when it could not be read.
    ``spec_size`` / ``spec_size_field``: a segment size from a spec field (LWS ``subGroupSize``,
    native ``workersPerSegment``); ``spec_size_wins``: True when that field beats the annotation
    (native), False when the annotation beats it (LWS; DESIGN.md §3).
    ``automatic``: automatic segment placement applies to this kind / requester (§6).
    ``warn_partial``: warn when the last segment is partial (training kinds; LWS warns itself).
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
    automatic: bool = False
    warn_partial: bool = True


@dataclass
class Resolution:
    """The resolved keys of one workload (DESIGN.md §4) and what automatic mode adds (§6).

    ``size``: valid segment size (> 1, within the pod count), else ``None`` (not segmented, or
    denied). ``topology_name`` / ``topology``: the resolved name (template, else root, else the
    automatic default) and its Topology when the catalog knows it. ``seg_*`` / ``wl_*``: the
    segment / workload placement levels the user set. ``auto_*``: values automatic mode adds.
    """

    size: int | None = None
    size_field: str | None = None
    size_raw: Any = None
    topology_name: str | None = None
    topology_field: str | None = None
    topology: Topology | None = None
    seg_required: Sourced | None = None
    seg_preferred: Sourced | None = None
    wl_required: Sourced | None = None
    wl_preferred: Sourced | None = None
    auto_topology: bool = False
    auto_segment_preferred: str | None = None
    auto_workload_preferred: str | None = None
    extra_worker_keys: dict[str, str] = field(default_factory=dict)
    leader_policy_field: str | None = None
    spec_size: int | None = None
    spec_size_field: str | None = None

    @property
    def segmented(self) -> bool:
        """True when a valid segment size resolved."""
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
        workload-level constraint is complete on its own)."""
        if self.auto_workload_preferred is None:
            return {}
        out = {}
        if keys.TOPOLOGY not in root.values and self.topology_name is not None:
            out[keys.TOPOLOGY] = self.topology_name
        out[keys.TOPOLOGY_PREFERRED] = self.auto_workload_preferred
        return out

    def immutable_view(self) -> tuple:
        """What UPDATE may not change (DESIGN.md §5): segment size, topology name, segment
        levels (effective values, automatic ones included), and the LWS leader policy, which
        decides segment membership as much as the size does (our addition)."""
        return (self.size, self.topology_name, self.segment_required, self.segment_preferred,
                self.extra_worker_keys.get(keys.SEGMENT_LEADER_POLICY))


def is_automatic_requester(request: Mapping[str, Any], settings: AdmissionSettings) -> bool:
    """True when ``request.userInfo`` matches a platform identity (DESIGN.md §6):
    ``username`` in ``settings.platform_users`` or any of ``groups`` in
    ``settings.platform_groups``. Malformed userInfo counts as no match."""
    info = request.get("userInfo")
    if not isinstance(info, Mapping):
        return False
    user = info.get("username")
    if isinstance(user, str) and user in settings.platform_users:
        return True
    groups = info.get("groups")
    if isinstance(groups, list):
        return any(isinstance(g, str) and g in settings.platform_groups for g in groups)
    return False


def _levels_text(topology: Topology) -> str:
    return ", ".join(topology.levels)


def _resolve_size(inp: SegmentInputs, res: Resolution, decision: Decision) -> tuple[int | None, bool]:
    """Returns (size, size_given). Records not-integer denials and precedence warnings."""
    ann = None
    if inp.worker is not None:
        ann = inp.worker.get(keys.SEGMENT_SIZE)
    if ann is None:
        ann = inp.root.get(keys.SEGMENT_SIZE)
    spec_size = inp.spec_size
    spec_field = inp.spec_size_field or "spec"

    if spec_size is not None and (inp.spec_size_wins or ann is None):
        res.size_field, res.size_raw = spec_field, spec_size
        if ann is not None and parse_plain_decimal(ann.value) != spec_size:
            decision.warn(f"{keys.SEGMENT_SIZE}={quote(ann.value)} disagrees with {spec_field.rsplit('.', 1)[-1]}={spec_size}; overwritten")
        return spec_size, True
    if ann is None:
        return None, False
    res.size_field, res.size_raw = ann.field, ann.value
    size = parse_plain_decimal(ann.value)
    if size is None:
        deny(decision, "segment-size-not-integer", ann.field, ann.value,
             "the segment size must be a plain decimal integer (digits 0-9 only, no sign, spaces or exponent)",
             'write the number of pods per segment as digits, e.g. "4"')
        return None, True
    if spec_size is not None and spec_size != size:
        decision.warn(f"subGroupSize overridden: {keys.SEGMENT_SIZE}={quote(ann.value)} beats subGroupSize={spec_size}")
    if ann.value != str(size) and size < SATURATION:  # a saturated value is denied by the range rules
        decision.warn(f"{keys.SEGMENT_SIZE}={quote(ann.value)} written as {quote(str(size))}")
    return size, True


def _check_size(inp: SegmentInputs, size: int, size_field: str, raw: Any, decision: Decision) -> bool:
    ok = True
    if size <= 1:
        deny(decision, "segment-size-too-small", size_field, raw,
             "a segment needs more than 1 pod",
             f"set a segment size of at least 2 (or remove {keys.SEGMENT_SIZE} for no segments)")
        ok = False
    elif inp.pods is not None and size > inp.pods:
        fix = (f"use a segment size between 2 and {inp.pods}, or raise {inp.pods_field}" if inp.pods >= 2
               else f"raise {inp.pods_field} to at least 2, or remove {keys.SEGMENT_SIZE} for no segments")
        deny(decision, "segment-size-exceeds-replicas", size_field, raw,
             f"the segment size exceeds the {inp.pods} {inp.pods_noun} ({inp.pods_field})", fix)
        ok = False
    elif inp.pods is not None and segment_count(inp.pods, size) > keys.MAX_SEGMENTS:
        deny(decision, "too-many-segments", size_field, raw,
             f"{inp.pods} {inp.pods_noun} make {segment_count(inp.pods, size)} segments, more than {keys.MAX_SEGMENTS}",
             f"use a segment size of at least {-(-inp.pods // keys.MAX_SEGMENTS)}")
        ok = False
    elif inp.warn_partial and inp.pods is not None and inp.pods % size:
        decision.warn(f"{inp.pods} {inp.pods_noun} / segment size {size}: last segment has {inp.pods % size} pods")
    return ok


def _check_level(level: Sourced, topology: Topology | None, topo_name: str | None, decision: Decision) -> bool:
    if not is_valid_label_key(level.value):
        deny(decision, "invalid-level", level.field, level.value,
             "a topology level must be a node label key ([prefix/]name, e.g. cloud.provider.com/topology-rack)",
             "use one of the topology's levels" + (f" ({_levels_text(topology)})" if topology else ""))
        return False
    if topology is not None and not topology.has_level(level.value):
        deny(decision, "unknown-level", level.field, level.value,
             f"not a level of topology {quote(topo_name)}",
             f"use one of its levels, broadest first: {_levels_text(topology)}")
        return False
    return True


def _check_topology_name(src: Sourced, catalog: TopologyCatalog, decision: Decision) -> Topology | None:
    """Validate one ``kai.scheduler/topology`` value (DESIGN.md §5): an object name, and known
    to a synced catalog. Returns its Topology, or ``None`` (denied, or not loaded yet: warning)."""
    if not (len(src.value) <= 253 and _DNS_SUBDOMAIN.fullmatch(src.value)):
        deny(decision, "invalid-topology-name", src.field, src.value,
             "a topology name must be a Kubernetes object name (lowercase DNS subdomain)",
             "name an existing Topology" + (f": {', '.join(catalog.names())}" if catalog.names() else ""))
        return None
    topology = catalog.get(src.value)
    if topology is None:
        if catalog.synced:
            known = catalog.names()
            deny(decision, "unknown-topology", src.field, src.value, "no Topology has this name",
                 f"use one of: {', '.join(known)}" if known else "create the Topology first")
        else:
            decision.warn(f"topology {quote(src.value)} not loaded yet; levels not checked")
    return topology


def _check_shadowed_root_keys(root: AnnotationMap, worker: AnnotationMap, topology: Topology | None,
                              topology_conflict: bool, decision: Decision) -> None:
    """Root segment keys that the worker template overrides (DESIGN.md §4.2: template value
    wins) are still the user's input, so nothing is dropped silently: an invalid root value is
    denied like an effective one (§5), a valid but different one gets a warning. ``topology`` is
    the resolved topology; root levels are checked against it unless the root names another
    topology (``topology_conflict``), whose own checks ran already."""
    for key in keys.SEGMENT_KEYS:
        shadowed, winner = root.get(key), worker.get(key)
        if shadowed is None or winner is None or shadowed.value == winner.value:
            continue
        if key == keys.SEGMENT_SIZE:
            if parse_plain_decimal(shadowed.value) is None:
                deny(decision, "segment-size-not-integer", shadowed.field, shadowed.value,
                     "the segment size must be a plain decimal integer (digits 0-9 only, no sign, spaces or exponent)",
                     f'write digits, e.g. "4", or remove it: the worker template\'s value {quote(winner.value)} wins')
                continue
        elif not _check_level(shadowed, None if topology_conflict else topology,
                              topology.name if topology is not None else None, decision):
            continue
        decision.warn(f"root {key}={quote(shadowed.value)} overridden by template")
    topo_root, topo_worker = root.get(keys.TOPOLOGY), worker.get(keys.TOPOLOGY)
    if topo_root is not None and topo_worker is not None and topo_root.value != topo_worker.value:
        decision.warn(f"root {keys.TOPOLOGY}={quote(topo_root.value)} overridden by template")


def resolve(inp: SegmentInputs, catalog: TopologyCatalog, settings: AdmissionSettings, decision: Decision) -> Resolution:
    """Resolve and validate one workload's keys (DESIGN.md §4, §5, §6).

    Records every violation of §5 (segment size syntax and range, placement without topology,
    invalid / unknown levels, unknown topology when ``catalog.synced``, preferred broader than
    required, segment required broader than workload required) and the warnings (partial last
    segment, overridden / disagreeing sizes, keys that are ignored, topology not loaded yet,
    automatic placement skipped) in ``decision``. Never raises for validated annotation maps.
    Returns the :class:`Resolution`; ``size`` is ``None`` when not segmented or denied.
    """
    res = Resolution(spec_size=inp.spec_size, spec_size_field=inp.spec_size_field)
    root, worker = inp.root, inp.worker

    # §4.1 / §4.2: template value, else root value.
    def pick(key: str) -> Sourced | None:
        """Template value, else root value."""
        if worker is not None and key in worker.values:
            return worker.get(key)
        return root.get(key)

    topo_src = pick(keys.TOPOLOGY)
    res.seg_required = pick(keys.SEGMENT_REQUIRED)
    res.seg_preferred = pick(keys.SEGMENT_PREFERRED)
    res.wl_required = root.get(keys.TOPOLOGY_REQUIRED)
    res.wl_preferred = root.get(keys.TOPOLOGY_PREFERRED)
    if worker is not None:
        for key in keys.WORKLOAD_PLACEMENT_KEYS:
            if key in worker.values:
                decision.warn(f"{key} on the worker template is ignored; set it in metadata.annotations")

    # §3 segment size and §5 range checks.
    size, size_given = _resolve_size(inp, res, decision)
    if worker is None and size_given:
        decision.warn(f"{inp.kind} has no worker template: {keys.SEGMENT_SIZE} ignored")
        size = None
    if size is not None and res.size_field is not None and _check_size(inp, size, res.size_field, res.size_raw, decision):
        res.size = size
    if not size_given and (res.seg_required or res.seg_preferred):
        decision.warn(f"segment placement ignored: no {keys.SEGMENT_SIZE} is set")

    # §4.1 automatic default topology name (§6).
    auto = inp.automatic and res.size is not None
    topo_name: str | None = topo_src.value if topo_src else None
    if topo_name is None and auto:
        if settings.default_topology:
            topo_name = settings.default_topology
            res.auto_topology = True
        else:
            decision.warn("automatic segment placement skipped: no kai.scheduler/topology and no default topology")
            auto = False

    # §5 topology name (the resolved one, and a root name that the template overrides).
    topology: Topology | None = None
    if topo_src is not None:
        topology = _check_topology_name(topo_src, catalog, decision)
    elif topo_name is not None:  # automatic default
        topology = catalog.get(topo_name)
        if topology is None:
            decision.warn(f"automatic segment placement skipped: default topology {quote(topo_name)} not found")
            auto = False
            topo_name = None
            res.auto_topology = False
    root_topo = root.get(keys.TOPOLOGY)
    conflict = root_topo is not None and topo_src is not None and root_topo.value != topo_src.value
    if conflict:
        _check_topology_name(root_topo, catalog, decision)
        for s in (res.wl_required, res.wl_preferred):
            if s is not None:
                deny(decision, "conflicting-topology", s.field, s.value,
                     f"this workload-level placement belongs to the root's topology {quote(root_topo.value)}, but "
                     f"the worker template names topology {quote(topo_src.value)} ({topo_src.field}); "
                     "one workload is placed in one topology",
                     "name the same topology in both places, or set it only in metadata.annotations")
    if worker is not None:
        _check_shadowed_root_keys(root, worker, topology, conflict, decision)
    res.topology_name = topo_name
    res.topology_field = topo_src.field if topo_src else (key_field(worker.field, keys.TOPOLOGY) if worker else None)
    res.topology = topology

    # §5 placement keys need a topology name.
    placement = [(s, scope) for s, scope in (
        (res.wl_required, "workload"), (res.wl_preferred, "workload"),
        (res.seg_required, "segment"), (res.seg_preferred, "segment"))
        if s is not None and not (conflict and scope == "workload")]  # conflicting: denied above
    if topo_name is None:
        where = f"{worker.field} or metadata.annotations" if worker is not None else "metadata.annotations"
        for s, _scope in placement:
            deny(decision, "placement-without-topology", s.field, s.value,
                 "a placement level needs a topology name", f'set {keys.TOPOLOGY} (e.g. "cluster-topology") in {where}')

    # §5 levels: valid label keys, members of the topology.
    valid = {id(s): _check_level(s, topology, topo_name, decision) for s, _ in placement}

    def comparable(*items: Sourced | None) -> bool:
        """All present, valid, and the topology is known."""
        return topology is not None and all(s is not None and valid.get(id(s)) for s in items)

    # §5 preferred broader than required of the same scope; segment required broader than workload required.
    for req, pref in ((res.wl_required, res.wl_preferred), (res.seg_required, res.seg_preferred)):
        if comparable(req, pref) and topology.is_broader(pref.value, req.value):
            deny(decision, "preferred-broader-than-required", pref.field, pref.value,
                 f"the preferred level is broader than the required level {quote(req.value)} ({req.field})",
                 "prefer a level equal to or narrower than the required one")
    if comparable(res.seg_required, res.wl_required) and topology.is_broader(res.seg_required.value, res.wl_required.value):
        deny(decision, "segment-required-broader-than-workload", res.seg_required.field, res.seg_required.value,
             f"a segment must fit inside the workload's required level {quote(res.wl_required.value)} ({res.wl_required.field})",
             "swap the two levels or narrow the segment level")

    # §6 automatic segment placement: only where the user set nothing of that scope.
    if auto and topology is not None:
        lowest = topology.lowest_level
        seg_scope = (keys.SEGMENT_REQUIRED, keys.SEGMENT_PREFERRED)
        if not (root.has_any(*seg_scope) or (worker is not None and worker.has_any(*seg_scope))):
            res.auto_segment_preferred = lowest
        if not (root.has_any(*keys.WORKLOAD_PLACEMENT_KEYS) or (worker is not None and worker.has_any(*keys.WORKLOAD_PLACEMENT_KEYS))):
            res.auto_workload_preferred = lowest
    elif auto and topology is None and not catalog.synced:
        decision.warn(f"automatic segment placement skipped: topology {quote(topo_name)} not loaded yet")
    return res
