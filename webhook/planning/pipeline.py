"""The ``place`` pipeline (DESIGN.md §8): expand a workload into its pods through the webhook,
build the cluster index, place every gang; the command line (``webhook.cli.place``) only reads
the files and renders the :class:`PlaceResult`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds.registry import BY_KIND, gang_key, gang_size_keys, whole_gang_group
from webhook.admission.targets import target_annotations
from webhook.admission.workload_api import gang_shape, pod_maps
from webhook.placement.engine import ClusterIndex, Placement, PlacementError, place, shared_domain
from webhook.placement.shortfall import NEVER_FITS, shortfall
from webhook.planning.expand import ExpandError, expand
from webhook.planning.snapshot import Snapshot, topologies_or_default
from webhook.text.messages import quote
from webhook.topology.objects import StaticTopologyCatalog


@dataclass
class PlaceResult:
    """What :func:`place_workload` found.

    ``placed``: every gang placed (exit 0) or not (denied by the webhook / not placed: exit 1);
    ``document``: the JSON result (:func:`result_document`); ``index``: the cluster index the
    placement is on (``None`` when the webhook denied); ``placement``: the merged placement, or a
    failed one carrying the reason (``None`` when denied); ``warnings``: the webhook's warnings.
    """

    placed: bool
    document: dict[str, Any]
    index: ClusterIndex | None
    placement: Placement | None
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 placed, 1 not placed or denied."""
        return 0 if self.placed else 1


def admission_context(snapshot: Snapshot, platform_users: Sequence[str] = (), platform_groups: Sequence[str] = (),
                      default_topology: str | None = None,
                      target: str = "kai", kueue_version: tuple[int, int] = (0, 17),
                      ) -> tuple[StaticTopologyCatalog, AdmissionSettings]:
    """The topology catalog and admission settings ``place`` admits a workload with: the
    snapshot's topologies (``--topology-file`` included), else the embedded default; the default
    topology of automatic mode (DESIGN.md §6) chosen as ``serve`` and ``review`` choose it
    (:func:`webhook.cli.flags.static_topologies`): ``default_topology`` when given, else the only
    topology when exactly one is loaded; ``target`` as ``serve --target`` (``gate`` gates pods);
    ``kueue_version`` as ``--kueue-version``.
    Raises :class:`PlacementError` naming ``--default-topology`` when it is not a loaded topology."""
    topologies = topologies_or_default(snapshot)
    catalog = StaticTopologyCatalog(topologies)
    if default_topology and catalog.get(default_topology) is None:
        raise PlacementError(f"--default-topology {quote(default_topology)} is not a loaded topology; loaded: "
                             f"{', '.join(catalog.names())}")
    if not default_topology:
        default_topology = topologies[0].name if len(topologies) == 1 else None
    settings = AdmissionSettings(platform_users=frozenset(u for u in platform_users if u),
                                 platform_groups=frozenset(g for g in platform_groups if g),
                                 default_topology=default_topology, target=target, gate_pods=target == "gate",
                                 kueue_version=kueue_version)
    return catalog, settings


def place_workload(workload: Mapping[str, Any], snapshot: Snapshot, *, user: str = "kubectl-user",
                   groups: Sequence[str] = (), platform_users: Sequence[str] = (), platform_groups: Sequence[str] = (),
                   default_topology: str | None = None, runtimes: Sequence[Mapping[str, Any]] = (),
                   target: str = "kai", kueue_version: tuple[int, int] = (0, 17)) -> PlaceResult:
    """Expand, admit and place ``workload`` on ``snapshot``; the engine of ``place``.

    ``kueue_version``: as ``--kueue-version`` (DESIGN.md §9b, the ``kueue`` target's version rules).
    ``target``: the target the webhook compiles for (DESIGN.md §9b); a placed result then carries
    ``target``: its name and the target's annotations on the pods
    (:func:`webhook.admission.targets.target_annotations`).
    ``runtimes``: ClusterTrainingRuntime / TrainingRuntime objects, for a TrainJob (its pods are
    those of the JobSet the Trainer builds from the runtime it names: :func:`expand`).

    Returns a :class:`PlaceResult` (not placed or denied: ``placed`` false, ``reason`` in its
    ``document``). Raises :class:`ExpandError`, :class:`PlacementError` for bad input, and
    :class:`PlacementError` naming ``--default-topology`` when ``default_topology`` is not a loaded
    topology. Topology catalog: the snapshot's topologies (``--topology-file`` included), or the
    embedded default when it has none. The default topology of automatic mode (DESIGN.md §6) is
    chosen as ``serve`` and ``review`` choose it (:func:`webhook.cli.flags.static_topologies`):
    ``default_topology`` when given, else the only topology when exactly one is loaded.
    """
    catalog, settings = admission_context(snapshot, platform_users, platform_groups, default_topology, target,
                                          kueue_version)
    exp = expand(workload, catalog, settings, user=user, groups=list(groups), runtimes=list(runtimes))
    if exp.denied:
        return PlaceResult(False, result_document(None, f"denied by the webhook: {exp.message}"), None, None,
                           exp.warnings)
    if not any(gang.pods for gang in exp.gangs):
        kind = workload.get("kind")
        named = exp.generated_name or (workload.get("metadata") or {}).get("name")
        raise ExpandError(f"{kind} {quote(named)} creates no pods (no replica "
                          "type with replicas, no group, no workers): nothing to place; fix: give it the pods it should run")
    topo = catalog.get(exp.topology) if exp.topology else None
    if exp.topology and topo is None:
        raise PlacementError(f"topology {quote(exp.topology)} is not in the snapshot; known: "
                             f"{', '.join(catalog.names()) or 'none'}")
    index = ClusterIndex(snapshot.nodes, topo)
    saved = index.free.copy()
    merged = Placement(placed=True)
    reasons = []
    for gang in exp.gangs:
        res = place(index, gang)
        merged.exact &= res.exact
        if not res.placed:
            short = shortfall(index, gang, res, place)  # "can never fit" says so, with the smallest change
            reason = short.text if short.kind == NEVER_FITS else res.reason or ""
            reasons.append(f"{gang.name}: {reason}" if len(exp.gangs) > 1 else reason)
            break
        index.commit(res, gang.pods)
        merged.assignments.update(res.assignments)
        merged.segments.extend(res.segments)
    index.free[:] = saved
    if reasons:
        failed = Placement(placed=False, reason=reasons[0], exact=merged.exact)
        return PlaceResult(False, result_document(failed, "not placed: " + reasons[0]), index, failed, exp.warnings)
    if merged.assignments:
        merged.workload_level, merged.workload_domain = shared_domain(index, list(merged.assignments.values()))
    result = result_document(merged, None)
    if settings.target != "kai":  # DESIGN.md §9b: what the target reads, as the webhook wrote it
        result["target"] = {"name": settings.target, "annotations": target_annotations(exp.pods)}
        if settings.target == "workload-api":
            result["target"]["objects"] = _workload_api_objects(exp.pods)
    if BY_KIND[exp.expanded_kind].per_group:  # segments are numbered per group (LWS replica, JobSet replicatedJob)
        for seg, res in zip(merged.segments, result["segments"]):
            res["group"] = seg.group
    return PlaceResult(True, result, index, merged, exp.warnings)


def _workload_api_objects(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Workload API objects of the admitted ``pods`` (DESIGN.md §9b): per gang key, the objects
    the controller creates from the same pods (:func:`webhook.admission.workload_api.gang_shape`), named
    as the pod handler names each pod's PodGroup. A gang whose pods say no whole shape gives none."""
    gangs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        labels, annotations = pod_maps(pod)
        key = gang_key(namespace, labels, annotations)
        if key is not None:
            gangs.setdefault((namespace, key), []).append(pod)
    out: list[dict[str, Any]] = []
    for (namespace, key), members in gangs.items():
        out += gang_shape(namespace, key, members, gang_size_keys(), whole_gang_group).objects or []
    return out


def _natural(text: str) -> tuple[int | str, ...]:
    """Sort key that orders ``worker-2`` before ``worker-10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def result_document(p: Placement | None, reason: str | None) -> dict[str, Any]:
    """The JSON result of ``place`` (``-o json``): ``placed``, ``assignments`` (pod → node, in
    natural pod order), ``segments`` (``index``, ``domain``, ``level``, ``pods``), ``workload``
    (``domain``, ``level``), ``reason`` (``None`` when placed) and ``exact`` (the engine proved
    the answer optimal, or proved that nothing fits; ``False`` when its search budget ran out,
    DESIGN.md §8 "Exact"; ``None`` when the webhook denied the workload)."""
    if p is None or not p.placed:
        return {"placed": False, "assignments": {}, "segments": [], "workload": None, "reason": reason,
                "exact": p.exact if p is not None else None}
    segs = []
    for s in p.segments:
        segs.append({"index": s.index, "domain": s.domain, "level": s.level, "pods": s.pods})
    return {"placed": True, "assignments": dict(sorted(p.assignments.items(), key=lambda kv: _natural(kv[0]))), "segments": segs,
            "workload": {"domain": p.workload_domain, "level": p.workload_level}, "reason": None, "exact": p.exact}
