"""Topology from the nodes (DESIGN.md §12): which node labels make a Topology, in which
order, and what is wrong with a given Topology on given nodes.

Pure: it reads :class:`NodeLabels` (a node's name and labels), never a file or a cluster.
``segment-webhook topology infer|check`` (:mod:`webhook.cli.topology`) and the controller's
Topology log (:mod:`webhook.controller.runner`) call it.

* :func:`infer` ``(nodes, extra_keys, name) -> InferResult``: the Topology (or one per node group)
  that the labels support, the per-level figures and every problem found.
* :func:`check` ``(levels, nodes) -> list[Finding]``: the §12 findings of a Topology's levels.
* :func:`topology_object` ``(name, levels, kind) -> dict``: a KAI or Kueue Topology object.

Rules (DESIGN.md §12 and the issue's table of label families):

* Candidate keys are the network-topology labels of the known providers and tools
  (:data:`FAMILIES`), ``topology.kubernetes.io/zone``, ``kubernetes.io/hostname`` and the keys the
  user names; attribute labels (instance type, GPU product, arch, TPU shape) are never candidates.
* Empty and placeholder values (:data:`PLACEHOLDER_VALUES`, any case) count as missing.
* Key B is below key A when every value of B lies under exactly one value of A (on the nodes that
  carry both); keys that split the nodes identically are one level (aliases; the one kept is the
  first of hostname, the :data:`FAMILIES` in order, ``--label`` keys; ties by name). Keys of which
  neither is below the other do not nest: each such pair is reported with the values that
  straddle and their node counts, never ordered silently; the key that fails to nest with the
  most others is left out, repeatedly, and keys tied for the most are all left out (a mislabelled
  key conflicts with every level above it and goes alone; two keys that only conflict with each
  other both go). ``kubernetes.io/hostname`` is the last level.
* Node groups: nodes are grouped by hardware (``node.kubernetes.io/instance-type``, else
  ``nvidia.com/gpu.product``); a group's keys are the candidate keys more than half of its nodes
  carry. Groups with the same keys share a Topology; groups with different keys get one each
  (EKS layer-3 is the lowest network level on 3-layer instance types, an aggregation above
  layer-4 on 4-layer ones: one Topology over both would mix the two meanings).
* A group whose only level besides the hostname is ``topology.kubernetes.io/zone`` gets no
  Topology when another group has a network level below the zone (a CPU system pool beside the
  GPU nodes): it is reported (``zone-only-group``); a single remaining Topology keeps the given name.
* Infer never writes a Topology that :func:`check` rejects on the nodes that carry its levels:
  keys are related pairwise on the nodes that carry both, check reads the nodes that carry every
  level, so a level that check would reject there (single domain, duplicate, out of order, under
  two parents, colliding ids, repeated hostname) is left out and reported (``level-left-out``).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cmp_to_key
from typing import Any

from webhook.errors import SegmentWebhookError
from webhook.kube.core import HOSTNAME, ZONE
from webhook.kube.kai_scheduler import TOPOLOGY_API_VERSION
from webhook.kube.kueue import KUEUE_API_VERSION
from webhook.text.messages import json_type, quote
from webhook.topology.objects import catalog_topologies, default_catalog

#: Values that mean "not known" (DESIGN.md §12): compared after stripping and lower-casing; ""
#: is the empty value. ``no-imds-data`` is what EKS writes when the instance metadata is unreachable.
PLACEHOLDER_VALUES = frozenset({"", "unknown", "none", "no-imds-data"})
#: The hardware of a node, the first of these labels it carries: nodes are grouped by it.
HARDWARE_KEYS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type", "nvidia.com/gpu.product")
DEFAULT_NAME = "cluster-topology"
#: How many node names and values a finding's text shows (the structured fields hold them all).
SHOWN = 10

#: The label families of the issue's table, then the keys of the embedded default Topology
#: (webhook/data/topology.yaml: ``cloud.provider.com/topology-block``, ``-rack``, which
#: ``gen-cluster`` writes), in the order an alias is kept (first wins):
#: ``(family, pattern)``. ``kubernetes.io/hostname`` is kept before all of them; keys named with
#: ``--label`` come after all of them.
FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("zone", r"topology\.kubernetes\.io/zone"),
    ("AWS EKS", r"topology\.k8s\.aws/network-node-layer-\d+"),
    ("GKE", r"cloud\.google\.com/gce-topology-(block|subblock|host)"),
    ("OCI", r"oci\.oraclecloud\.com/rdma\.[A-Za-z0-9_.-]+"),
    ("Nebius", r"topology\.nebius\.com/[A-Za-z0-9_.-]+"),
    ("CoreWeave", r"ib\.coreweave\.cloud/(fabric|superpod|leafgroup)|node\.coreweave\.cloud/rack"),
    ("topograph", r"(fabric|accelerator)\.topograph\.run/[A-Za-z0-9_.-]+|[a-z0-9.-]+\.topograph\.run/[A-Za-z0-9_.-]+"),
    ("GB200/GB300 NVL72", r"nvidia\.com/gpu\.clique"),
    ("older topograph", r"network\.topology\.nvidia\.com/[A-Za-z0-9_.-]+"),
    ("this project's default Topology", "|".join(
        re.escape(level) for topology in catalog_topologies(default_catalog()) for level in topology.levels
        if level not in (ZONE, HOSTNAME))),
))
USER_RANK = len(FAMILIES)

# Finding kinds. check (DESIGN.md §12): exit 1 on any of these.
ORDER = "levels-out-of-order"
TWO_PARENTS = "values-under-two-parents"
DUPLICATE = "duplicate-level"
SINGLE = "single-domain-level"
PLACEHOLDER = "placeholder-value"
DROPPED = "dropped-nodes"
COLLISION = "domain-path-collision"
HOSTNAME_REPEATED = "hostname-not-unique"
NO_NODES = "no-nodes"
# infer's report only.
ALIAS = "aliases"
NOT_NESTED = "keys-do-not-nest"
FEW_NODES = "key-on-few-nodes"
GROUPS = "node-groups"
MEANING = "key-meaning-differs"
HOSTNAME_DIFFERS = "hostname-differs-from-node-name"
NO_TOPOLOGY = "no-topology-labels"
LEFT_OUT = "level-left-out"
ZONE_ONLY = "zone-only-group"


class NodeLabelError(SegmentWebhookError, ValueError):
    """A Node object whose name or labels cannot be read; the message names the node and field."""


@dataclass(frozen=True)
class NodeLabels:
    """One node as the inference sees it: ``name`` (``metadata.name``) and ``labels`` (str → str)."""

    name: str
    labels: Mapping[str, str]


def node_labels_of(obj: Mapping[str, Any]) -> NodeLabels:
    """The :class:`NodeLabels` of a Node object (a dict as kubectl dumps it).

    Raises :class:`NodeLabelError` naming the node and the field when ``metadata.name`` is not a
    non-empty string, ``metadata.labels`` is not a mapping, or a label key or value is not a string
    (a Kubernetes label value is a string; ``null`` or ``7`` unquoted in YAML are not)."""
    meta = obj.get("metadata") if isinstance(obj, (dict, Mapping)) else None  # dict first: the fast check
    if type(meta) is dict:  # the common case, every key and value a string, checked at C speed
        name, labels = meta.get("name"), meta.get("labels")
        if type(name) is str and name and type(labels) is dict:
            try:
                "".join(labels)  # join refuses anything but strings
                "".join(labels.values())
                return NodeLabels(name, labels)
            except TypeError:
                pass
    name = meta.get("name") if isinstance(meta, (dict, Mapping)) else None
    if not isinstance(meta, (dict, Mapping)) or not isinstance(name, str) or not name:
        got = "" if name in (None, "") else f" (metadata.name = {quote(name)} is {json_type(name)}, not a string)"
        raise NodeLabelError(f"Node has no metadata.name{got}")
    labels = meta.get("labels")
    if labels is None:
        return NodeLabels(name, {})
    if not isinstance(labels, (dict, Mapping)):
        raise NodeLabelError(f"Node {quote(name)}: metadata.labels must be an object, not {json_type(labels)}")
    for key, value in labels.items():
        if not isinstance(key, str):
            raise NodeLabelError(f"Node {quote(name)}: metadata.labels has the key {quote(key)}, which is "
                                 f"{json_type(key)}: label keys are strings; fix: quote the key")
        if not isinstance(value, str):
            raise NodeLabelError(f'Node {quote(name)}: metadata.labels["{key}"] = {quote(value)}: a label value must '
                                 f"be a string, not {json_type(value)}; fix: quote the value or remove the label")
    return NodeLabels(name, labels)


def is_placeholder(value: str) -> bool:
    """True when a label value counts as missing: empty, ``unknown``, ``none``, ``no-imds-data``
    (any case, surrounding blanks ignored). DESIGN.md §12."""
    return value.strip().lower() in PLACEHOLDER_VALUES


def key_rank(key: str, extra_keys: Iterable[str] = ()) -> int | None:
    """The place of ``key`` in :data:`FAMILIES` (``-1`` for ``kubernetes.io/hostname``,
    :data:`USER_RANK` for a key of ``extra_keys``), ``None`` when it is not a candidate key
    (an attribute label such as the instance type, GPU product, arch or TPU shape)."""
    if key == HOSTNAME:
        return -1
    for rank, (_, pattern) in enumerate(FAMILIES):
        if pattern.fullmatch(key):
            return rank
    return USER_RANK if key in set(extra_keys) else None


def family_of(key: str) -> str:
    """The family name of a candidate key (``"AWS EKS"``, ``"GKE"``, ...; ``"--label"`` for a user key)."""
    if key == HOSTNAME:
        return "node"
    for name, pattern in FAMILIES:
        if pattern.fullmatch(key):
            return name
    return "--label"


@dataclass(frozen=True)
class Finding:
    """One problem or note: ``kind`` (a constant of this module), ``level`` (the label key concerned;
    two keys are joined with `` / ``), ``message`` (names the values and nodes, at most
    :data:`SHOWN` of each), ``fix``, and the full ``values`` and ``nodes`` (node names, sorted)."""

    kind: str
    level: str
    message: str
    fix: str = ""
    values: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    topology: str = ""

    def text(self) -> str:
        """``<kind>: [Topology <name>: ]level <key>: <message>`` and, when there is one, a second
        line ``  fix: <fix>``."""
        where = f"Topology {self.topology}: " if self.topology else ""
        line = f"{self.kind}: {where}level {self.level}: {self.message}"
        return line + (f"\n  fix: {self.fix}" if self.fix else "")

    def document(self) -> dict[str, Any]:
        """The finding as a JSON-ready dict (every value and node name, not only the shown ones)."""
        out = {"kind": self.kind, "level": self.level, "message": self.message, "fix": self.fix,
               "values": list(self.values), "nodes": list(self.nodes)}
        if self.topology:
            out["topology"] = self.topology
        return out


@dataclass(frozen=True)
class LevelStats:
    """One level of a Topology on the nodes it keeps: ``key``, number of ``domains`` and nodes per
    domain (``smallest``, ``median``, ``largest``), and the keys that are ``aliases`` of it."""

    key: str
    domains: int
    smallest: int
    median: float
    largest: int
    aliases: tuple[str, ...] = ()


@dataclass
class InferredTopology:
    """A Topology :func:`infer` writes: ``name``, ``levels`` (broadest first), ``stats`` (one
    :class:`LevelStats` per level), ``groups`` (``(hardware, node count)`` it was inferred from),
    ``kept`` (nodes that carry every level, of any group) and ``findings`` (:func:`check` of it on
    its groups' nodes and the other nodes that carry its keys, placeholder values left to the
    result's own findings)."""

    name: str
    levels: tuple[str, ...]
    stats: list[LevelStats]
    groups: list[tuple[str, int]]
    kept: int
    findings: list[Finding] = field(default_factory=list)
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class InferResult:
    """What :func:`infer` found: ``topologies`` (possibly none), ``findings`` (aliases, keys that do
    not nest, single-domain keys, keys on few nodes, placeholder values, node groups, hostname
    notes; each Topology's own findings are in :attr:`InferredTopology.findings`), ``nodes`` (count
    read) and ``candidates`` (the candidate keys seen, sorted)."""

    topologies: list[InferredTopology]
    findings: list[Finding]
    nodes: int
    candidates: list[str]

    def all_findings(self) -> list[Finding]:
        """Every finding: the result's, then each Topology's."""
        return list(self.findings) + [f for topo in self.topologies for f in topo.findings]


def names_text(names: Sequence[str], limit: int = SHOWN) -> str:
    """``a, b, c`` or ``a, b, … (and 12 more)``."""
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def topology_object(name: str, levels: Sequence[str], kind: str = "kai") -> dict[str, Any]:
    """A Topology object with ``levels`` (broadest first): ``kind="kai"`` →
    ``kai.scheduler/v1alpha1`` (the default), ``"kueue"`` → ``kueue.x-k8s.io/v1beta2``. Raises
    ``ValueError`` for another ``kind``."""
    api = {"kai": TOPOLOGY_API_VERSION, "kueue": KUEUE_API_VERSION}.get(kind)
    if api is None:
        raise ValueError(f"kind {kind!r} is not kai or kueue")
    return {"apiVersion": api, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": key} for key in levels]}}


# ---------------------------------------------------------------------------------------- check

def _level_stats(key: str, column: Sequence[str], aliases: tuple[str, ...] = ()) -> LevelStats:
    sizes = sorted(Counter(column).values())
    if not sizes:
        return LevelStats(key, 0, 0, 0, 0, aliases)
    return LevelStats(key, len(sizes), sizes[0], statistics.median(sizes), sizes[-1], aliases)


def _signature(column: Sequence[str]) -> tuple[int, ...]:
    """The partition a column makes, independent of the values' spelling."""
    ids: dict[str, int] = {}
    return tuple(ids.setdefault(value, len(ids)) for value in column)


def _straddlers(upper: Sequence[str], lower: Sequence[str], names: Sequence[str]
                ) -> list[tuple[str, dict[str, list[str]]]]:
    """Values of ``lower`` found under two or more values of ``upper``: ``(value, {parent: nodes})``."""
    by_value: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for up, low, name in zip(upper, lower, names):
        by_value[low][up].append(name)
    return sorted((value, dict(parents)) for value, parents in by_value.items() if len(parents) > 1)


def _straddle_text(straddlers: list[tuple[str, dict[str, list[str]]]], limit: int = 5) -> str:
    parts = []
    for value, parents in straddlers[:limit]:
        under = ", ".join(f"{quote(p)}: {_plural(len(nodes), 'node')}" for p, nodes in sorted(parents.items()))
        parts.append(f"{quote(value)} under {under}")
    more = f" (and {len(straddlers) - limit} more values)" if len(straddlers) > limit else ""
    return "; ".join(parts) + more


def _examine(levels: Sequence[str], nodes: Sequence[NodeLabels], topology: str = "",
             aliases: Mapping[str, tuple[str, ...]] | None = None,
             given: Mapping[str, Sequence[str | None]] | None = None) -> tuple[list[Finding], list[LevelStats], int]:
    """:func:`check`'s findings, the :class:`LevelStats` of every level on the kept nodes, and the
    number of kept nodes (those that carry every level with a real value). ``given``: the levels'
    values of ``nodes`` already read (``None`` where missing), copied before use."""
    findings: list[Finding] = []
    levels = list(levels)
    aliases = aliases or {}
    raw, missing, placeholders = _read_levels(levels, nodes, given)
    if any(missing.values()):
        kept_positions = [position for position, row in enumerate(zip(*raw)) if None not in row]
        kept_raw = [[column[p] for p in kept_positions] for column in raw]
        kept_names = [nodes[p].name for p in kept_positions]
    else:
        kept_raw = raw
        kept_names = [node.name for node in nodes]
    # the rows with a missing value are left out above: this only narrows the type (no value is None)
    columns = [[value for value in column if value is not None] for column in kept_raw]
    if not nodes:
        findings.append(Finding(NO_NODES, ", ".join(levels), "no nodes to check the Topology against",
                                "dump the nodes with `kubectl get nodes -o yaml`", topology=topology))
        return findings, [], 0
    findings.extend(_missing_findings(levels, nodes, missing, placeholders, topology))
    kept = len(kept_names)
    stats = [_level_stats(key, column, tuple(aliases.get(key, ()))) for key, column in zip(levels, columns)]
    if HOSTNAME in levels and levels[-1] != HOSTNAME:
        findings.append(Finding(
            ORDER, HOSTNAME, f"is level {levels.index(HOSTNAME) + 1} of {len(levels)}; it must be the last level "
                             "(KAI's and Kueue's Topology CRDs reject it anywhere else)",
            f"move {HOSTNAME} to the end of spec.levels", (), (), topology))
    if kept == 0:
        return findings, stats, 0
    findings.extend(_alike_findings(levels, columns, stats, kept, topology))
    single = {stat.key for stat in stats if stat.domains == 1 and kept >= 2}
    findings.extend(_nesting_findings(levels, columns, stats, kept_names, single, topology))
    findings.extend(_hostname_findings(levels, columns, kept_names, topology))
    findings.extend(_collisions(levels, columns, kept_names, topology))
    return findings, stats, kept


def _read_levels(levels: list[str], nodes: Sequence[NodeLabels], given: Mapping[str, Sequence[str | None]] | None,
                 ) -> tuple[list[list[str | None]], dict[str, list[str]], dict[tuple[str, str], list[str]]]:
    """The values of ``levels`` on ``nodes``, one column per level (``None`` where a node lacks the
    label or carries a placeholder value), the names of the nodes missing each level, and the
    nodes of each (level, placeholder value)."""
    missing: dict[str, list[str]] = {key: [] for key in levels}
    placeholders: dict[tuple[str, str], list[str]] = defaultdict(list)
    label_maps = [node.labels for node in nodes]
    raw = ([list(given[key]) for key in levels] if given is not None else
           [[labels.get(key) for labels in label_maps] for key in levels])  # column-wise: 10,000 nodes fast
    for key, column in zip(levels, raw):
        distinct = set(column)
        bad = {value for value in distinct if value is not None and value.strip().lower() in PLACEHOLDER_VALUES}
        if None not in distinct and not bad:
            continue
        for position, value in enumerate(column):
            if value is None:
                missing[key].append(nodes[position].name)
            elif value in bad:
                placeholders[(key, value)].append(nodes[position].name)
                missing[key].append(nodes[position].name)
                column[position] = None
    return raw, missing, placeholders


def _missing_findings(levels: list[str], nodes: Sequence[NodeLabels], missing: Mapping[str, list[str]],
                      placeholders: Mapping[tuple[str, str], list[str]], topology: str) -> list[Finding]:
    """The findings of placeholder values and of nodes left out of a level (:func:`_read_levels`)."""
    findings: list[Finding] = []
    total = len(nodes)
    for (key, value), names in sorted(placeholders.items()):
        names = sorted(names)
        findings.append(Finding(
            PLACEHOLDER, key, f"value {quote(value)} on {_plural(len(names), 'node')} counts as missing "
                              f"(the label's source did not know the value): {names_text(names)}",
            f"relabel these nodes with their real {key} (or fix what writes the label), or leave them out of the "
            "topology on purpose", (value,), tuple(names), topology))
    for key in levels:
        names = sorted(missing[key])
        if not names:
            continue
        if len(names) == total:
            nearby = sorted({k for node in nodes for k in node.labels if key_rank(k) is not None} - set(levels))
            findings.append(Finding(
                DROPPED, key, f"no node carries this label with a real value: KAI and Kueue leave all "
                              f"{_plural(total, 'node')} out of this Topology",
                f"check the spelling; topology keys these nodes carry: {', '.join(nearby) or 'none'}",
                (), tuple(names), topology))
            continue
        findings.append(Finding(
            DROPPED, key, f"{_plural(len(names), 'node')} of {total:,} {'lacks' if len(names) == 1 else 'lack'} this "
                          "label or carries a placeholder, so "
                          f"KAI and Kueue leave them out of this Topology without a word: {names_text(names)}",
            f"label them (kubectl label node NAME {key}=VALUE), or give them a Topology of their own without this "
            "level", (), tuple(names), topology))
    return findings


def _alike_findings(levels: list[str], columns: list[list[str]], stats: list[LevelStats], kept: int,
                    topology: str) -> list[Finding]:
    """Levels that constrain nothing (one domain for all kept nodes) and levels listed twice (the
    same split of the kept nodes)."""
    findings: list[Finding] = []
    if kept >= 2:
        for key, column, stat in zip(levels, columns, stats):
            if stat.domains == 1:
                findings.append(Finding(
                    SINGLE, key, f"all {kept:,} kept nodes share one value {quote(column[0])}: the level is the whole "
                                 "cluster and constrains nothing",
                    f"drop {key} from spec.levels (or label the nodes with their real {key})",
                    (column[0],), (), topology))
    signatures: dict[tuple[int, ...], str] = {}
    single = {stat.key for stat in stats if stat.domains == 1 and kept >= 2}
    domain_counts = Counter(stat.domains for stat in stats)
    for key, column, stat in zip(levels, columns, stats):
        if key in single or domain_counts[stat.domains] < 2:  # only levels of equal domain counts can split alike
            continue
        sig = _signature(column)
        if sig in signatures:
            first = signatures[sig]
            findings.append(Finding(
                DUPLICATE, f"{first} / {key}", f"{first} and {key} split the {kept:,} kept nodes identically "
                                               f"({stats[levels.index(key)].domains:,} domains): one level listed twice",
                f"keep one of them in spec.levels (e.g. {first})", (first, key), (), topology))
        else:
            signatures[sig] = key
    return findings


def _nesting_findings(levels: list[str], columns: list[list[str]], stats: list[LevelStats],
                      kept_names: list[str], single: set[str], topology: str) -> list[Finding]:
    """Each pair of adjacent levels: listed in the wrong order, or a lower value under two parents."""
    findings: list[Finding] = []
    for upper_at in range(len(levels) - 1):
        upper_key, lower_key = levels[upper_at], levels[upper_at + 1]
        upper, lower = columns[upper_at], columns[upper_at + 1]
        if upper_key in single or lower_key in single:
            continue
        pairs = set(zip(upper, lower))
        lower_nests = len({low for _, low in pairs}) == len(pairs)
        upper_nests = len({up for up, _ in pairs}) == len(pairs)
        if lower_nests:
            continue  # in order (or a duplicate, reported above)
        suggested = sorted(levels, key=lambda k: (k == HOSTNAME, stats[levels.index(k)].domains))
        if upper_nests and suggested == levels and lower_key == HOSTNAME:
            continue  # a hostname on two nodes, not an order: hostname-not-unique reports it below
        if upper_nests and suggested != levels:  # an order that nests exists: name it
            findings.append(Finding(
                ORDER, f"{upper_key} / {lower_key}",
                f"{upper_key} ({stats[upper_at].domains:,} domains) is listed above {lower_key} "
                f"({stats[upper_at + 1].domains:,} domains), but every {upper_key} value lies under one {lower_key} "
                "value: the broader level must come first",
                f"order spec.levels by nesting: {', '.join(suggested)}", (upper_key, lower_key), (), topology))
            continue
        straddlers = _straddlers(upper, lower, kept_names)
        names = sorted({n for _, parents in straddlers for group in parents.values() for n in group})
        findings.append(Finding(
            TWO_PARENTS, lower_key,
            f"{_plural(len(straddlers), 'value')} of {lower_key} lie under two or more values of {upper_key}, so "
            f"whatever reads the value alone takes separate domains for one: {_straddle_text(straddlers)}",
            f"give each {lower_key} value one {upper_key} parent (make the values unique, e.g. prefix the "
            f"{upper_key} value), or relabel the nodes that sit under the wrong parent",
            tuple(value for value, _ in straddlers), tuple(names), topology))
    return findings


def _hostname_findings(levels: list[str], columns: list[list[str]], kept_names: list[str],
                       topology: str) -> list[Finding]:
    """One ``kubernetes.io/hostname`` value on more than one node (the last level only)."""
    findings: list[Finding] = []
    if levels[-1] == HOSTNAME:
        repeated = sorted(value for value, count in Counter(columns[-1]).items() if count > 1)
        if repeated:
            names = sorted(n for n, v in zip(kept_names, columns[-1]) if v in set(repeated))
            findings.append(Finding(
                HOSTNAME_REPEATED, HOSTNAME,
                f"{_plural(len(repeated), 'value')} name more than one node ({names_text([quote(v) for v in repeated])})"
                f": a pod pinned to one of them by {HOSTNAME} may land on the other: {names_text(names)}",
                f"give every node its own {HOSTNAME} (the kubelet's --hostname-override)",
                tuple(repeated), tuple(names), topology))
    return findings


def _collisions(levels: Sequence[str], columns: Sequence[Sequence[str]], names: Sequence[str],
                topology: str) -> list[Finding]:
    """KAI names the domain of a node at level d by joining the node's values of levels 0..d with
    ``.``; two different paths that join to one id (``a.b`` + ``c`` and ``a`` + ``b.c``) are one
    domain to it."""
    dotted = [any("." in value for value in set(column)) for column in columns]
    findings = []
    for depth in range(1, len(levels)):
        if not any(dotted[: depth + 1]):
            continue
        paths_seen = set(zip(*columns[: depth + 1]))
        if len({".".join(path) for path in paths_seen}) == len(paths_seen):
            continue  # every path joins to its own id
        paths: dict[str, dict[tuple[str, ...], list[str]]] = defaultdict(lambda: defaultdict(list))
        for position, row in enumerate(zip(*columns[: depth + 1])):
            paths[".".join(row)][row].append(names[position])
        for joined, by_path in sorted(paths.items()):
            if len(by_path) < 2:
                continue
            nodes = sorted(n for group in by_path.values() for n in group)
            shown = "; ".join(" + ".join(quote(v) for v in path) + f" ({_plural(len(group), 'node')})"
                              for path, group in sorted(by_path.items()))
            findings.append(Finding(
                COLLISION, levels[depth],
                f"KAI joins a node's level values with '.' into one domain id, and {len(by_path)} different paths "
                f"give {quote(joined)}: {shown}; their nodes become one domain: {names_text(nodes)}",
                "use values without '.' at the levels above, or make the values unique on their own",
                (joined,), tuple(nodes), topology))
    return findings


def check(levels: Sequence[str], nodes: Iterable[NodeLabels], topology: str = "") -> list[Finding]:
    """The findings of a Topology with ``levels`` (broadest first) on ``nodes`` (DESIGN.md §12):
    levels out of order (and ``kubernetes.io/hostname`` not last), values under two parents,
    duplicate and single-domain levels, placeholder values, nodes a scheduler drops (a level label
    missing), KAI's ``.``-joined domain ids that collide, and a ``kubernetes.io/hostname`` value on
    two nodes. ``topology`` (its name) is copied into every finding. Empty when the Topology is
    clean. Never raises for well-formed :class:`NodeLabels`."""
    return _examine(levels, list(nodes), topology)[0]


# ---------------------------------------------------------------------------------------- infer

ABOVE, BELOW, SAME, STRADDLE, APART = "above", "below", "same", "straddle", "apart"


def _relation(upper: Sequence[str | None], lower: Sequence[str | None]) -> str:
    """How key ``upper`` relates to key ``lower`` on the nodes that carry both: ``ABOVE`` (lower is
    below it), ``BELOW``, ``SAME`` (aliases), ``STRADDLE`` (neither nests), ``APART`` (no node
    carries both)."""
    pairs = set(zip(upper, lower))
    if any(None in pair for pair in pairs):
        pairs = {pair for pair in pairs if pair[0] is not None and pair[1] is not None}
    if not pairs:
        return APART
    lower_nests = len({low for _, low in pairs}) == len(pairs)
    upper_nests = len({up for up, _ in pairs}) == len(pairs)
    if lower_nests and upper_nests:
        return SAME
    if lower_nests:
        return ABOVE
    if upper_nests:
        return BELOW
    return STRADDLE


def _hardware(labels: Mapping[str, str]) -> str:
    for key in HARDWARE_KEYS:
        value = labels.get(key)
        if value and not is_placeholder(value):
            return value
    return ""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@dataclass
class _Group:
    """Nodes that share a key set: hardware names with node counts, node positions, keys."""

    hardware: list[tuple[str, int]]
    positions: list[int]
    keys: frozenset[str]


#: A node group with its Topology: ``(group, covered, levels, aliases)``; ``covered``: the group
#: with the other groups' nodes that carry all its keys.
GroupLevels = tuple[_Group, _Group, tuple[str, ...], dict[str, tuple[str, ...]]]
#: What :func:`_examine` returns: findings, per-level figures, kept nodes.
Examined = tuple[list[Finding], list[LevelStats], int]
#: Levels and aliases, the key under which an :data:`Examined` on every node is kept.
ExaminedKey = tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]


def infer(nodes: Iterable[NodeLabels], extra_keys: Iterable[str] = (), name: str = DEFAULT_NAME) -> InferResult:
    """The Topology (or one per node group) that the labels of ``nodes`` support (DESIGN.md §12).

    ``extra_keys``: label keys the user names (``--label``), candidates besides the known families.
    ``name``: the Topology's name; with several node groups, ``<name>-<hardware>`` each. Returns an
    :class:`InferResult`; every problem is a :class:`Finding` (nothing is dropped silently). Never
    raises for well-formed :class:`NodeLabels`.
    """
    nodes = list(nodes)
    extra = frozenset(extra_keys)
    findings: list[Finding] = []
    columns: dict[str, list[str | None]] = {}
    placeholders: dict[tuple[str, str], list[str]] = defaultdict(list)
    count = len(nodes)
    label_maps = [node.labels for node in nodes]
    first, second, third = HARDWARE_KEYS
    hardware = [labels.get(first) or labels.get(second) or labels.get(third) or "" for labels in label_maps]
    if any(value.strip().lower() in PLACEHOLDER_VALUES for value in set(hardware) if value):
        hardware = [_hardware(labels) for labels in label_maps]  # a placeholder instance type: the full rule
    for key in sorted(set().union(*label_maps)):
        if key_rank(key, extra) is None:
            continue
        column = [labels.get(key) for labels in label_maps]
        columns[key] = column
        bad = {value for value in set(column) if value is not None and value.strip().lower() in PLACEHOLDER_VALUES}
        if bad:
            for position, value in enumerate(column):
                if value in bad:
                    placeholders[(key, value)].append(nodes[position].name)
                    column[position] = None
    candidates = sorted(columns)
    for (key, value), names in sorted(placeholders.items()):
        names = sorted(names)
        findings.append(Finding(
            PLACEHOLDER, key, f"value {quote(value)} on {_plural(len(names), 'node')} counts as missing: "
                              f"{names_text(names)}",
            f"relabel these nodes with their real {key} (or fix what writes it; EKS writes no-imds-data when the "
            "node cannot reach the instance metadata)", (value,), tuple(names)))
    findings.extend(_hostname_notes(nodes, columns.get(HOSTNAME)))
    for key in sorted(extra - set(columns)):
        findings.append(Finding(FEW_NODES, key, "--label names a key no node carries with a real value",
                                "check the spelling (kubectl get nodes --show-labels)"))
    groups = _groups(nodes, hardware, columns, findings)
    examined: dict[ExaminedKey, Examined] = {}  # check on every node, kept for reuse below
    kept_groups = _levels_per_group(groups, nodes, columns, findings, extra, examined)
    kept_groups = _without_zone_only(kept_groups, nodes, findings)
    topologies = [InferredTopology(name, levels, [], group.hardware, 0, [], aliases)
                  for group, _, levels, aliases in kept_groups]
    group_levels = [(group, levels) for group, _, levels, _ in kept_groups]
    covering = [covered for _, covered, _, _ in kept_groups]
    if len(topologies) > 1:
        _name_topologies(topologies, name)
        findings.extend(_group_notes(group_levels, topologies, count))
    for topo, (_group, levels), covered in zip(topologies, group_levels, covering):
        everyone = len(covered.positions) == count
        examined_key = (levels, tuple(sorted(topo.aliases.items())))
        if everyone and examined_key in examined:  # the same levels on the same nodes: only the name differs
            found, stats, kept = examined[examined_key]
            found = [replace(f, topology=topo.name) for f in found]
        else:
            members = nodes if everyone else [nodes[p] for p in covered.positions]
            found, stats, kept = _examine(levels, members, topo.name, topo.aliases, columns if everyone else None)
        topo.findings = [f for f in found if f.kind != PLACEHOLDER]  # reported once, for every key
        topo.stats = stats
        topo.kept = kept
    return InferResult(topologies, findings, count, candidates)


#: :func:`check` findings that no relabelling of the dropped nodes removes: :func:`infer` leaves a
#: level out rather than write a Topology that ``topology check`` rejects with one of them.
STRUCTURAL = frozenset({ORDER, TWO_PARENTS, DUPLICATE, SINGLE, COLLISION, HOSTNAME_REPEATED})


def _level_to_leave_out(found: Finding) -> str:
    """The level a structural :func:`check` finding asks to remove: the lower key of a pair (the
    later of two duplicates, the narrower of two keys out of order or under two parents), the level
    a collision or a single domain is at, ``kubernetes.io/hostname`` for a repeated hostname."""
    if found.kind in (DUPLICATE, ORDER) and len(found.values) == 2:
        return found.values[1]
    if found.kind == HOSTNAME_REPEATED:
        return HOSTNAME
    return found.level


def _accepted_levels(levels: tuple[str, ...], members: Sequence[NodeLabels],
                     given: Mapping[str, Sequence[str | None]], scope: str,
                     aliases: Mapping[str, tuple[str, ...]], examined: dict[ExaminedKey, Examined]
                     ) -> tuple[tuple[str, ...], list[Finding]]:
    """``levels`` less the levels that ``topology check`` would reject on ``members`` (every node read;
    ``given``: their candidate keys' values, ``None`` where missing), one at a time, each with a
    :data:`LEFT_OUT` finding quoting what check says.

    :func:`_order` relates keys pairwise on the nodes that carry both; check reads the nodes that
    carry every level, where two keys can split alike, one can have a single value, or a value can
    lie under two parents. Returns the levels (possibly only the hostname) and the findings; the
    last :func:`_examine` (with ``aliases``) is left in ``examined`` under the levels and aliases."""
    notes: list[Finding] = []
    while True:
        found, stats, kept = _examine(levels, members, "", aliases, given)
        blocking = [f for f in found if f.kind in STRUCTURAL]
        if not blocking:
            examined[(levels, tuple(sorted(aliases.items())))] = (found, stats, kept)
            return levels, notes
        first = blocking[0]
        key = _level_to_leave_out(first)
        notes.append(Finding(
            LEFT_OUT, key,
            f"{scope}left out of the Topology: on the {kept:,} nodes that carry every level, topology check "
            f"finds {first.kind}: {first.message}",
            "if the level is real, fix the labels as check says (" + first.fix + "), then infer again",
            first.values, first.nodes))
        levels = tuple(level for level in levels if level != key)


def _without_zone_only(kept_groups: list[GroupLevels], nodes: Sequence[NodeLabels], findings: list[Finding]
                       ) -> list[GroupLevels]:
    """Node groups whose only level besides the hostname is ``topology.kubernetes.io/zone`` get no
    Topology when another group has a network level below the zone (a CPU system pool beside GPU
    nodes): a zone-only Topology would rename the other, place nothing that the other's zone level
    does not, and make the zone look like a different unit. Each such group is reported
    (:data:`ZONE_ONLY`). DESIGN.md §12: node groups get one Topology each, or a report of why not."""
    zone_only = [entry for entry in kept_groups if not set(entry[2]) - {ZONE, HOSTNAME}]
    if len(zone_only) == len(kept_groups):
        return kept_groups
    for group, _, _, _ in zone_only:
        names = sorted(nodes[p].name for p in group.positions)
        findings.append(Finding(
            ZONE_ONLY, ZONE,
            f"{_plural(len(names), 'node')} ({_hardware_text(group.hardware)}) carry no network-topology label below "
            f"{ZONE}: no Topology for them (a zone-only Topology adds no placement that the other Topology's zone "
            f"level lacks): {names_text(names)}",
            "none needed for nodes that run no topology-aware workload; check the written Topology on its own "
            "nodes with topology check --selector; to place workloads on these nodes by zone, write a Topology "
            f"with levels {ZONE}, {HOSTNAME} by hand", (), tuple(names)))
    return [entry for entry in kept_groups if entry not in zone_only]


def _levels_per_group(groups: Sequence[_Group], nodes: Sequence[NodeLabels],
                      columns: Mapping[str, Sequence[str | None]], findings: list[Finding],
                      extra: frozenset[str], examined: dict[ExaminedKey, Examined]) -> list[GroupLevels]:
    """Each group's levels (:func:`_order`, then :func:`_accepted_levels`), for the groups with a
    level besides the hostname; the others are reported (:data:`NO_TOPOLOGY`)."""
    count = len(nodes)
    kept_groups: list[GroupLevels] = []
    for group in groups:
        scope = "" if len(groups) == 1 else f"in node group {_hardware_text(group.hardware)}: "
        # a Topology holds every node that carries its keys, also nodes of other groups: its levels
        # are ordered on all of them (and their figures counted on all of them)
        covered = group
        if len(groups) > 1:
            own = set(group.positions)
            others = [p for p in range(count) if p not in own and all(columns[k][p] is not None for k in group.keys)]
            covered = _Group(group.hardware, sorted(group.positions + others), group.keys)
        levels, aliases = _order(covered, nodes, columns, findings, extra, scope)
        if [key for key in levels if key != HOSTNAME]:  # check reads every node that carries the levels
            levels, left_out = _accepted_levels(levels, nodes, columns, scope, aliases, examined)
            findings.extend(left_out)
        if not [key for key in levels if key != HOSTNAME]:
            names = sorted(nodes[p].name for p in group.positions)
            what = _hardware_text(group.hardware)
            findings.append(Finding(
                NO_TOPOLOGY, ", ".join(sorted(group.keys)) or "(none)",
                f"{_plural(len(names), 'node')} ({what}) carry no topology label that makes a level besides "
                f"{HOSTNAME}: no Topology for them: {names_text(names)}",
                "label them with their network position (or pass --label KEY for the key you use)",
                (), tuple(names)))
            continue
        kept_groups.append((group, covered, levels, aliases))
    return kept_groups


def _hostname_notes(nodes: Sequence[NodeLabels], column: Sequence[str | None] | None) -> list[Finding]:
    if column is None:
        return []
    differs = sorted(node.name for node, value in zip(nodes, column) if value is not None and value != node.name)
    if not differs:
        return []
    examples = [f"{node.name} has {quote(value)}" for node, value in zip(nodes, column)
                if value is not None and value != node.name][:3]
    return [Finding(
        HOSTNAME_DIFFERS, HOSTNAME,
        f"on {_plural(len(differs), 'node')} the label differs from the node name ({'; '.join(examples)}): a tool "
        "that takes one for the other places pods on the wrong node or none (the level is kept; its domains "
        "are the label's values)",
        "", (), tuple(differs))]


def _groups(nodes: Sequence[NodeLabels], hardware: Sequence[str], columns: Mapping[str, Sequence[str | None]],
            findings: list[Finding]) -> list[_Group]:
    """Node groups: by hardware, each with the candidate keys more than half its nodes carry;
    hardware with the same keys share a group. Keys on half or fewer of a hardware's nodes are
    reported (:data:`FEW_NODES`)."""
    by_hardware: dict[str, list[int]] = defaultdict(list)
    for position, hw in enumerate(hardware):
        by_hardware[hw].append(position)
    merged: dict[frozenset[str], _Group] = {}
    for hw, positions in sorted(by_hardware.items(), key=lambda item: (-len(item[1]), item[0])):
        keys = set()
        everyone = len(positions) == len(hardware)
        for key, column in columns.items():
            carried = len(column) - column.count(None) if everyone else sum(1 for p in positions if column[p] is not None)
            if carried * 2 > len(positions):
                keys.add(key)
            elif carried:
                carriers = sorted(nodes[p].name for p in positions if column[p] is not None)
                what = f"{hw} nodes" if hw else "nodes without an instance type"
                findings.append(Finding(
                    FEW_NODES, key,
                    f"only {carried:,} of the {len(positions):,} {what} carry it, so it is no level for them: "
                    f"{names_text(carriers)}",
                    f"if it is a real level, label the other {what} too; else remove it from these",
                    (), tuple(carriers)))
        frozen = frozenset(keys)
        if frozen in merged:
            merged[frozen].hardware.append((hw, len(positions)))
            merged[frozen].positions.extend(positions)
        else:
            merged[frozen] = _Group([(hw, len(positions))], list(positions), frozen)
    groups = sorted(merged.values(), key=lambda g: (-len(g.positions), sorted(g.keys)))
    for group in groups:
        group.positions.sort()
    return groups


def _hardware_text(hardware: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{hw or 'no instance type'} ({count:,})" for hw, count in hardware)


def _constraining(keys: list[str], local: Mapping[str, Sequence[str | None]], findings: list[Finding],
                  scope: str) -> list[str]:
    """``keys`` without the hostname and without single-domain keys (they constrain nothing; each is
    reported in ``findings``, its message starting with ``scope``), in their order."""
    levels = []
    for key in keys:
        if key == HOSTNAME:
            continue
        values = {value for value in local[key] if value is not None}
        carriers = sum(1 for value in local[key] if value is not None)
        if len(values) == 1 and carriers >= 2:
            findings.append(Finding(
                SINGLE, key, f"{scope}all {carriers:,} nodes that carry it share one value {quote(next(iter(values)))}: the "
                             "level would be the whole cluster, so it is left out", "", tuple(values), ()))
            continue
        levels.append(key)
    return levels


def _order(group: _Group, nodes: Sequence[NodeLabels], columns: Mapping[str, Sequence[str | None]],
           findings: list[Finding], extra: frozenset[str], scope: str = ""
           ) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The levels of one group, broadest first, and ``{kept key: its aliases}``; reports aliases,
    single-domain keys and keys that do not nest (each message starts with ``scope``, the group
    named when there are several)."""
    positions = group.positions
    keys = sorted(key for key in group.keys if key != HOSTNAME)
    everyone = len(positions) == len(nodes)
    local = {key: columns[key] if everyone else [columns[key][p] for p in positions]
             for key in keys + ([HOSTNAME] if HOSTNAME in group.keys else [])}
    relations: dict[tuple[str, str], str] = {}

    def relation(upper: str, lower: str) -> str:
        if (upper, lower) not in relations:
            found = _relation(local[upper], local[lower])
            relations[(upper, lower)] = found
            relations[(lower, upper)] = {ABOVE: BELOW, BELOW: ABOVE}.get(found, found)
        return relations[(upper, lower)]

    # aliases: keys that split the group's nodes identically are one level. Two keys that every node
    # carries split alike only with as many values each: other pairs need no comparison
    complete = {key: None not in column for key, column in local.items()}
    distinct = {key: len(set(column)) for key, column in local.items()}

    def may_be_same(first: str, second: str) -> bool:
        return not (complete[first] and complete[second]) or distinct[first] == distinct[second]

    preference = {key: (key_rank(key, extra), key) for key in local}
    classes: list[list[str]] = []
    for key in sorted(preference, key=preference.__getitem__):
        for members in classes:
            if may_be_same(members[0], key) and relation(members[0], key) == SAME:
                members.append(key)
                break
        else:
            classes.append([key])
    aliases: dict[str, tuple[str, ...]] = {}
    representatives = []
    for members in classes:
        kept, others = members[0], tuple(members[1:])
        representatives.append(kept)
        if others:
            aliases[kept] = others
            findings.append(Finding(
                ALIAS, kept, f"{scope}{', '.join(others)} split{'s' if len(others) == 1 else ''} the nodes exactly as {kept} "
                             f"does: one level; {kept} is kept ({family_of(kept)} key)",
                "", others, ()))
    levels = _constraining(representatives, local, findings, scope)
    # keys that do not nest are never ordered silently: the key that fails to nest with the most
    # others is left out, again until every pair nests; keys tied for the most are all left out
    pairs = [(upper, lower) for i, upper in enumerate(levels) for lower in levels[i + 1:]
             if relation(upper, lower) in (STRADDLE, APART)]
    left_out: set[str] = set()
    while True:
        conflicts = Counter(key for pair in pairs if not left_out & set(pair) for key in pair)
        if not conflicts:
            break
        most = max(conflicts.values())
        left_out.update(key for key, number in conflicts.items() if number == most)
    for upper, lower in pairs:
        found = _not_nested(upper, lower, relation(upper, lower), local, [nodes[p].name for p in positions],
                            sorted(left_out & {upper, lower}))
        findings.append(replace(found, message=scope + found.message))
    levels = [key for key in levels if key not in left_out]
    def above_first(a: str, b: str) -> int:
        return -1 if relation(a, b) == ABOVE else 1

    levels.sort(key=cmp_to_key(above_first))
    if HOSTNAME in local:
        levels.append(HOSTNAME)
    return tuple(levels), aliases


def _not_nested(first: str, second: str, found: str, local: Mapping[str, Sequence[str | None]],
                names: Sequence[str], left_out: Sequence[str]) -> Finding:
    """The finding for two keys of which neither is below the other; ``left_out``: which of them the
    Topology leaves out (the one that fails to nest with more keys, or both)."""
    out = f"{' and '.join(left_out)} {'is' if len(left_out) == 1 else 'are'} left out of the Topology"
    if found == APART:
        return Finding(NOT_NESTED, f"{first} / {second}",
                       f"no node carries both keys, so their order is unknown: {out}",
                       "label the nodes with both keys, or name the one you want with --label and write the Topology "
                       "by hand, then run topology check", (), ())
    rows = [(a, b, n) for a, b, n in zip(local[first], local[second], names) if a is not None and b is not None]
    upper, lower, row_names = ([row[i] for row in rows] for i in range(3))
    below_first = _straddlers(upper, lower, row_names)
    below_second = _straddlers(lower, upper, row_names)
    nodes = sorted({n for part in (below_first, below_second) for _, parents in part
                    for group in parents.values() for n in group})
    return Finding(
        NOT_NESTED, f"{first} / {second}",
        f"neither is below the other, so {out}: values of {second} under two or more "
        f"values of {first}: {_straddle_text(below_first) or 'none'}; values of {first} under two or more values of "
        f"{second}: {_straddle_text(below_second) or 'none'}",
        "relabel so that each value of the narrower key lies under one value of the broader one (values that "
        "repeat under two parents: make them unique, e.g. prefix the parent's value), then infer again",
        tuple(v for v, _ in below_first + below_second), tuple(nodes))


def _name_topologies(topologies: list[InferredTopology], name: str) -> None:
    """``<name>-<hardware>`` for each of several Topologies (``<name>-<n>`` when that is taken)."""
    used: set[str] = set()
    for number, topo in enumerate(topologies, 1):
        slug = _slug(topo.groups[0][0]) or "other-nodes"
        candidate = f"{name}-{slug}"[:253].rstrip("-.")
        if candidate in used:
            candidate = f"{name}-{number}"[:253]
        used.add(candidate)
        topo.name = candidate


def _group_notes(group_levels: Sequence[tuple[_Group, tuple[str, ...]]], topologies: Sequence[InferredTopology],
                 count: int) -> list[Finding]:
    """Why the groups get one Topology each, and keys whose meaning differs between groups."""
    findings = []
    shared = set.intersection(*(set(levels) for _, levels in group_levels))
    every = set().union(*(set(levels) for _, levels in group_levels))
    parts = []
    for topo, (group, levels) in zip(topologies, group_levels):
        hw = _hardware_text(group.hardware)
        parts.append(f"{topo.name}: {hw}: {', '.join(levels)}")
    lacking = {topo.name: sorted(every - set(levels)) for topo, (_, levels) in zip(topologies, group_levels)}
    why = "; ".join(f"{n} lacks {', '.join(keys)}" for n, keys in lacking.items() if keys)
    findings.append(Finding(
        GROUPS, ", ".join(sorted(every - shared)) or "(levels)",
        f"node groups carry different topology keys, so each gets its own Topology: {' | '.join(parts)}. One "
        f"Topology with every key would drop the nodes of the groups without some of them ({why}); one with only "
        f"the keys they share ({', '.join(k for k in group_levels[0][1] if k in shared)}) loses the finer levels",
        "name the Topology that fits in each workload's kai.scheduler/topology", (), ()))
    for topo, (_, levels) in zip(topologies, group_levels):
        network = [key for key in levels if key != HOSTNAME]
        if not network:
            continue
        lowest = network[-1]
        for other, (_, other_levels) in zip(topologies, group_levels):
            if other is topo or lowest not in other_levels:
                continue
            below = [key for key in other_levels[other_levels.index(lowest) + 1:] if key != HOSTNAME]
            if below:
                findings.append(Finding(
                    MEANING, lowest,
                    f"is the lowest level above the node in {topo.name} but has {', '.join(below)} below it in "
                    f"{other.name}: a {lowest} domain is a different unit on the two hardware groups, so they do not "
                    "share one Topology", "", (), ()))
    return findings


def render_report(result: InferResult) -> str:
    """The text report of :func:`infer` (``topology infer`` prints it on stderr): per Topology a line
    with its levels' figures, then every finding with its fix."""
    lines = [f"topology infer: {_plural(result.nodes, 'node')} read; candidate keys: "
             f"{', '.join(result.candidates) or 'none'}"]
    for topo in result.topologies:
        hw = _hardware_text(topo.groups)
        lines.append("")
        lines.append(f"Topology {topo.name}: {', '.join(topo.levels)}")
        lines.append(f"  inferred from {hw}; {topo.kept:,} nodes carry every level")
        if topo.kept < result.nodes:  # check the Topology on the nodes it holds, not on the others
            lines.append(f"  check it on them: segment-webhook topology check -f TOPOLOGY --nodes NODES "
                         f"--topology {topo.name} --selector '{','.join(topo.levels)}'")
        width = max([len(s.key) for s in topo.stats] + [5])
        lines.append(f"  {'LEVEL':<{width}}  DOMAINS  NODES PER DOMAIN (min/median/max)  ALIASES")
        for stat in topo.stats:
            sizes = f"{stat.smallest:,} / {stat.median:g} / {stat.largest:,}"
            lines.append(f"  {stat.key:<{width}}  {stat.domains:>7,}  {sizes:<34}  {', '.join(stat.aliases)}".rstrip())
    everything = result.all_findings()
    lines.append("")
    if not result.topologies:
        lines.append("no Topology: no node carries a topology label that makes a level")
    lines.append(f"{_plural(len(everything), 'finding')}" + (":" if everything else ""))
    for found in everything:
        lines.append(found.text())
    return "\n".join(lines) + "\n"
