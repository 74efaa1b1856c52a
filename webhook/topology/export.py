"""A Topology and the nodes' labels as other schedulers describe a network (DESIGN.md §13 "Export"):
Volcano HyperNodes (``topology.volcano.sh/v1alpha1``) and a Slurm ``topology.yaml``.

Both start from the same reading as ``topology check`` (DESIGN.md §12,
:func:`webhook.topology.infer.check`): a node that lacks a level label, or carries a
placeholder value there, is dropped (and named in :attr:`Export.dropped`), as KAI and Kueue drop it;
the other findings are returned with the export. Domains are identified by their full path
(every broader level's value, then their own), so one value under two parents makes two domains.
``kubernetes.io/hostname`` is never a domain: the node itself is the member.

* **Volcano** (HyperNode, Volcano ``volcano.sh/apis`` v1.13.0 ``pkg/apis/topology/v1alpha1``): one
  cluster-scoped HyperNode per domain; ``spec.tier`` 1 for the narrowest level, one more per
  broader level; members of a tier-1 HyperNode are its nodes (``exactMatch`` by node name, or one
  ``labelMatch`` on the domain's whole label path), members of a higher tier are the HyperNodes of
  the level below (``exactMatch``).
* **Slurm** (``topology.yaml(5)``, SchedMD/slurm ``doc/man/man5/topology.yaml.5``): one topology
  entry; ``tree``: one switch per domain, leaf switches list ``nodes``, the others ``children``,
  and a root switch over the broadest level when it has more than one domain (the tree plugin lets
  a job span only switches that are connected); ``block``: one block per domain of one level
  (default the narrowest) and ``block_sizes`` = the smallest block's node count (the man page:
  each block has at least the planning base block size of nodes).

Names: a domain's value made a DNS-1123 label (lowercase, ``[a-z0-9-]``), prefixed by its level's
last path segment; a name two domains would share gets a digest of the domain's path.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.errors import SegmentWebhookError
from webhook.kube.core import HOSTNAME
from webhook.topology import infer as topology_infer
from webhook.topology.infer import Finding, NodeLabels

VOLCANO_API_VERSION = "topology.volcano.sh/v1alpha1"
#: Longest Slurm switch name (topology.yaml(5): "cannot be longer than 64 characters").
SLURM_NAME_LIMIT = 64
#: Longest HyperNode name part kept before the digest (a DNS-1123 label is at most 63).
NAME_LIMIT = 63


class ExportError(SegmentWebhookError, ValueError):
    """A Topology that cannot be exported (no level besides the hostname, no node kept, a block
    level that is not one of its levels); the message names the value and the fix."""


@dataclass
class Domain:
    """One domain: ``level`` (label key), ``path`` (values from the broadest level to its own),
    ``name`` (exported name), ``nodes`` (node names, sorted), ``children`` (names of the domains of
    the next narrower exported level inside it)."""

    level: str
    path: tuple[str, ...]
    name: str = ""
    nodes: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)


@dataclass
class Export:
    """What :func:`domains_of` read: ``levels`` exported (broadest first, hostname left out),
    ``domains`` per level, ``dropped`` node names, ``findings`` (§12, on every node)."""

    topology: str
    levels: list[str]
    domains: dict[str, list[Domain]]
    dropped: list[str]
    findings: list[Finding]


def _label(text: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return cleaned or "x"


def _name(level: str, path: tuple[str, ...], limit: int) -> str:
    base = f"{_label(level.rsplit('/', 1)[-1])}-{_label(path[-1])}"
    return base[:limit].rstrip("-")


def domains_of(topology: str, levels: Sequence[str], nodes: Sequence[NodeLabels], limit: int = NAME_LIMIT) -> Export:
    """The domains of ``levels`` (a Topology's, broadest first) on ``nodes`` (module docstring).
    Raises :class:`ExportError` when no level but the hostname is left or no node carries them all."""
    exported = [lv for lv in levels if lv != HOSTNAME]
    if not exported:
        raise ExportError(f"Topology {topology} has no level besides {HOSTNAME}: nothing groups the nodes; "
                          "fix: export a Topology with a rack, block or zone level")
    findings = topology_infer.check(levels, nodes, topology)
    kept, dropped = [], []
    for node in nodes:
        values = [node.labels.get(lv) for lv in levels]
        if any(v is None or topology_infer.is_placeholder(v) for v in values):
            dropped.append(node.name)
        else:
            kept.append(node)
    if not kept:
        raise ExportError(f"no node of the {len(nodes)} carries every level of Topology {topology} "
                          f"({', '.join(levels)}); fix: check the Topology against the nodes with `topology check`")
    domains: dict[str, dict[tuple[str, ...], Domain]] = {lv: {} for lv in exported}
    for node in sorted(kept, key=lambda n: n.name):
        path: tuple[str, ...] = ()
        for lv in exported:
            path = path + (node.labels[lv],)
            domains[lv].setdefault(path, Domain(lv, path)).nodes.append(node.name)
    used: dict[str, int] = {}
    for lv in exported:
        for domain in domains[lv].values():
            used[_name(lv, domain.path, limit)] = used.get(_name(lv, domain.path, limit), 0) + 1
    for lv in exported:
        for domain in domains[lv].values():
            name = _name(lv, domain.path, limit)
            if used[name] > 1:  # the same value under two parents, or two values that clean to one name
                digest = hashlib.sha256("/".join(domain.path).encode()).hexdigest()[:8]
                name = f"{name[:limit - 9].rstrip('-')}-{digest}"
            domain.name = name
    for upper, lower in zip(exported, exported[1:]):
        for domain in domains[lower].values():
            domains[upper][domain.path[:-1]].children.append(domain.name)
    ordered = {lv: sorted(domains[lv].values(), key=lambda d: d.path) for lv in exported}
    return Export(topology, exported, ordered, sorted(dropped), findings)


def volcano_hypernodes(export: Export, *, members: str = "name") -> list[dict[str, Any]]:
    """The HyperNode objects of ``export`` (module docstring); ``members``: ``"name"`` (tier-1
    members by exact node name) or ``"labels"`` (one label selector on the domain's label path)."""
    out = []
    tiers = {lv: len(export.levels) - i for i, lv in enumerate(export.levels)}
    narrowest = export.levels[-1]
    for lv in export.levels:
        for domain in export.domains[lv]:
            if lv != narrowest:
                spec_members = [{"type": "HyperNode", "selector": {"exactMatch": {"name": child}}}
                                for child in domain.children]
            elif members == "labels":
                labels = dict(zip(export.levels, domain.path))
                spec_members = [{"type": "Node", "selector": {"labelMatch": {"matchLabels": labels}}}]
            else:
                spec_members = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in domain.nodes]
            out.append({"apiVersion": VOLCANO_API_VERSION, "kind": "HyperNode",
                        "metadata": {"name": domain.name,
                                     "labels": {"segments.dev/topology": _label(export.topology)},
                                     "annotations": {"segments.dev/level": lv,
                                                     "segments.dev/domain": "/".join(domain.path)}},
                        "spec": {"tier": tiers[lv], "members": spec_members}})
    return out


def slurm_topology(export: Export, *, plugin: str = "tree", block_level: str | None = None) -> list[dict[str, Any]]:
    """The Slurm ``topology.yaml`` document (a list of one topology) of ``export``: ``plugin``
    ``"tree"`` or ``"block"``; ``block_level``: the level whose domains are the blocks (default the
    narrowest). Raises :class:`ExportError` for a block level that is not exported."""
    name = _label(export.topology)
    if plugin == "block":
        level = block_level or export.levels[-1]
        if level not in export.levels:
            raise ExportError(f"--block-level {level} is not a level of Topology {export.topology} (besides "
                              f"{HOSTNAME}): {', '.join(export.levels)}; fix: name one of them")
        blocks = export.domains[level]
        base = min(len(b.nodes) for b in blocks)
        return [{"topology": name, "cluster_default": True,
                 "block": {"block_sizes": [base],
                           "blocks": [{"block": b.name, "nodes": ",".join(b.nodes)} for b in blocks]}}]
    switches = []
    broadest = export.domains[export.levels[0]]
    if len(broadest) > 1:
        switches.append({"switch": "root", "children": ",".join(d.name for d in broadest)})
    for lv in export.levels:
        for domain in export.domains[lv]:
            if domain.children:
                switches.append({"switch": domain.name, "children": ",".join(domain.children)})
            else:
                switches.append({"switch": domain.name, "nodes": ",".join(domain.nodes)})
    return [{"topology": name, "cluster_default": True, "tree": {"switches": switches}}]
