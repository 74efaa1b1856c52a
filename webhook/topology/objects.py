"""Topology model and catalogs (DESIGN.md §2, §4.4, §5).

A ``Topology`` (``kai.scheduler/v1alpha1``, cluster-scoped) lists node-label keys, broadest level
first: ``spec.levels[].nodeLabel``, each with an optional ``alias`` (KAI's level aliases: a
workload may name the level by its alias wherever it names a level; KAI's scheduler resolves it to
the node label, raw label keys always keep working; KAI-Scheduler ``pkg/apis/kai/v1alpha1/
topology_types.go`` ``TopologyLevel.Alias``, ``pkg/scheduler/api/topology_info/topology_info.go``
``ResolveAliases``). The core never talks to a cluster; it reads topologies through
a :class:`TopologyCatalog` (a static one built from files here, a live one in
``webhook.cluster.topology_cache``).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

import yaml

from webhook.errors import SegmentWebhookError
from webhook.kube.core import HOSTNAME, is_dns_subdomain, is_valid_label_key
from webhook.kube.kai_scheduler import TOPOLOGY_API_VERSION
from webhook.kube.shapes import TopologySpec
from webhook.text.yamltext import TextTimestampLoader, yaml_error_text

TOPOLOGY_KIND = "Topology"
#: The CustomResourceDefinition that serves Topologies (KAI Scheduler) and how to install it alone
#: (the file is KAI Scheduler's own CRD; installing KAI Scheduler installs it too). DESIGN.md §10.
TOPOLOGY_CRD = "topologies.kai.scheduler"
TOPOLOGY_CRD_INSTALL = ("kubectl apply -f https://raw.githubusercontent.com/NVIDIA/KAI-Scheduler/main/"
                        "deployments/kai-scheduler/crds/kai.scheduler_topologies.yaml")


class TopologyError(SegmentWebhookError, ValueError):
    """A Topology object or file is malformed; the message names the object and field."""


@dataclass(frozen=True)
class Topology:
    """One topology: a name and its levels (node-label keys), broadest first.

    ``levels[0]`` is the broadest level (e.g. zone), ``levels[-1]`` the lowest (e.g.
    ``kubernetes.io/hostname``).
    """

    name: str
    levels: tuple[str, ...]
    #: ``alias → nodeLabel`` of the levels that declare an alias (``spec.levels[].alias``), in
    #: level order; empty for a topology without aliases.
    aliases: tuple[tuple[str, str], ...] = ()

    def label_of(self, level: str) -> str:
        """The node label a workload's ``level`` names: an alias resolves to its level's
        ``nodeLabel``, anything else is returned unchanged (KAI's ``resolveAlias``: raw label
        keys pass through). The one place an alias is resolved (engine, controller, targets)."""
        for alias, label in self.aliases:
            if alias == level:
                return label
        return level

    def has_level(self, level: str) -> bool:
        """True when ``level`` is one of the levels, by node label or by alias."""
        return level in self.levels or self.label_of(level) in self.levels

    def depth(self, level: str) -> int:
        """Position of ``level`` (a node label or an alias): 0 for the broadest. Raises
        ``KeyError`` if unknown."""
        try:
            return self.levels.index(self.label_of(level))
        except ValueError:
            raise KeyError(level) from None

    def level_names(self) -> tuple[str, ...]:
        """The levels as messages list them, broadest first: the node label, with its alias
        beside it when it has one (``accelerator.nvidia.com/rack (alias rack)``)."""
        alias_of = {label: alias for alias, label in self.aliases}
        return tuple(f"{label} (alias {alias_of[label]})" if label in alias_of else label for label in self.levels)

    @property
    def lowest_level(self) -> str:
        """The narrowest level (DESIGN.md §6 automatic segment placement uses it)."""
        return self.levels[-1]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Topology:
        """Build from a ``kai.scheduler/v1alpha1`` Topology object (a dict).

        Raises :class:`TopologyError` when the kind, name or levels are missing or invalid: levels
        must be non-empty, unique, valid label keys, with ``kubernetes.io/hostname`` only as the
        lowest (the upstream CRD's rules; it also requires 1..16); a level's fields are
        ``nodeLabel`` and ``alias`` (another field is named, e.g. a misspelled ``nodelabel``);
        aliases are label keys, unique, and never equal to a ``nodeLabel`` (KAI's Topology
        validating webhook, ``pkg/admission/webhook/topologyhooks/topology_validator.go``).
        """
        from webhook.text.messages import quote

        if not isinstance(obj, (dict, Mapping)):
            raise TopologyError(f"expected a {TOPOLOGY_KIND} object, got {quote(obj)}")
        if obj.get("kind") != TOPOLOGY_KIND:
            raise TopologyError(f"expected kind {TOPOLOGY_KIND}, got {quote(obj.get('kind'))}")
        if "apiVersion" in obj and obj["apiVersion"] != TOPOLOGY_API_VERSION:
            raise TopologyError(f"Topology apiVersion {quote(obj['apiVersion'])} is not one KAI serves; "
                                f"fix: apiVersion: {TOPOLOGY_API_VERSION}")
        meta = obj.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, (dict, Mapping)) else None
        if not isinstance(name, str) or not name:
            raise TopologyError("Topology metadata.name is missing")
        if not is_dns_subdomain(name):
            raise TopologyError(f"Topology metadata.name {quote(name)} is not a Kubernetes object name (lowercase DNS subdomain)")
        spec: TopologySpec = obj.get("spec") or {}  # read as the shape, each field still checked below
        raw_levels = spec.get("levels") if isinstance(spec, (dict, Mapping)) else None
        if not isinstance(raw_levels, list) or not raw_levels:
            raise TopologyError(f"Topology {quote(name)}: spec.levels must be a non-empty list")
        levels: list[str] = []
        aliases: list[tuple[str, str]] = []
        for i, entry in enumerate(raw_levels):
            at = f"Topology {quote(name)}: spec.levels[{i}]"
            if not isinstance(entry, (dict, Mapping)):
                raise TopologyError(f"{at} must be an object with nodeLabel (and an optional alias), got {quote(entry)}")
            # a field KAI's TopologyLevel lacks: named when it misspells one (case aside) or when
            # nodeLabel is missing; another one is left alone, as kube-apiserver prunes it
            unknown = [str(k) for k in entry if k not in LEVEL_FIELDS]
            if unknown and ("nodeLabel" not in entry or any(_known_field(k) for k in unknown)):
                raise TopologyError(f"{at} has field {', '.join(map(quote, unknown))}, which a Topology level does not "
                                    f"have ({', '.join(LEVEL_FIELDS)}); fix: {_level_fields_fix(unknown, 'nodeLabel' in entry)}")
            label = entry.get("nodeLabel")
            if not is_valid_label_key(label):
                raise TopologyError(f"{at}.nodeLabel {quote(label)} is not a valid label key; fix: write the node "
                                    "label key of this level, e.g. topology.kubernetes.io/zone (an optional DNS "
                                    "prefix and /, then a name of at most 63 characters)")
            if label in levels:
                raise TopologyError(f"{at}.nodeLabel {quote(label)} is listed twice (also spec.levels"
                                    f"[{levels.index(label)}]); fix: list each node label once, from the broadest "
                                    "level to the narrowest: remove one of them")
            levels.append(label)
            if "alias" in entry:
                alias = entry.get("alias")
                if not is_valid_label_key(alias):
                    raise TopologyError(f"{at}.alias {quote(alias)} is not a valid alias (a label key, "
                                        "e.g. rack); fix: rename it or remove it")
                aliases.append((alias, label))
        _check_aliases(name, aliases, levels)
        if HOSTNAME in levels and levels[-1] != HOSTNAME:
            raise TopologyError(f"Topology {quote(name)}: spec.levels[{levels.index(HOSTNAME)}].nodeLabel "
                                f"{HOSTNAME} is not the lowest level, and Kubernetes refuses the Topology "
                                f"(its CRD: {HOSTNAME} can only be the lowest level); "
                                f"fix: move {HOSTNAME} to the end of spec.levels")
        return cls(name=name, levels=tuple(levels), aliases=tuple(aliases))


#: The fields of one ``spec.levels[]`` entry (KAI's ``TopologyLevel``).
LEVEL_FIELDS = ("nodeLabel", "alias")


def _known_field(field: str) -> str | None:
    """The level field (:data:`LEVEL_FIELDS`) that ``field`` misspells (another case, or within 2
    edits of it case aside, e.g. ``alais``, ``nodeLabels``), or ``None``."""
    from rapidfuzz.distance import Levenshtein

    folded = field.lower()
    return next((known for known in LEVEL_FIELDS
                 if Levenshtein.distance(folded, known.lower(), score_cutoff=2) <= 2), None)


def describe_levels(topology: Topology) -> str:
    """The levels of ``topology``, broadest first, each with its alias: ``zone-key (alias zone), ...``."""
    aliases = {label: alias for alias, label in topology.aliases}
    return ", ".join(f"{level} (alias {aliases[level]})" if level in aliases else level for level in topology.levels)


def defined_twice(first: Topology, first_where: str, second: Topology) -> str:
    """The message for two Topology objects of one name that differ (levels or aliases), the first
    read at ``first_where`` (one home for ``place --cluster`` dumps and ``--topology-file``)."""
    from webhook.text.messages import quote

    return (f"Topology {quote(first.name)} is defined twice with different levels or aliases (also at {first_where}: "
            f"{describe_levels(first)}; here: {describe_levels(second)}); fix: keep one of them or rename one")


def _level_fields_fix(unknown: list[str], has_label: bool) -> str:
    """The fix for unknown fields of a level: rename the field each one misspells, else remove it."""
    fixes = []
    for field in unknown:
        known = _known_field(field)
        fixes.append(f"rename {field} to {known}" if known else f"remove {field}")
    if not has_label and not any(_known_field(field) == "nodeLabel" for field in unknown):
        fixes.append("set nodeLabel")
    return "; ".join(fixes)


def _check_aliases(name: str, aliases: list[tuple[str, str]], labels: list[str]) -> None:
    """KAI's rules on level aliases (``topology_validator.go`` ``validateAliases``): unique within
    the topology, and none equal to a level's ``nodeLabel`` (resolution would be ambiguous).
    Raises :class:`TopologyError` naming every offending alias."""
    from webhook.text.messages import quote

    counts = Counter(alias for alias, _ in aliases)
    duplicated = sorted(alias for alias, count in counts.items() if count > 1)
    colliding = sorted({alias for alias, _ in aliases if alias in labels})
    problems = []
    if duplicated:
        problems.append(f"alias {', '.join(map(quote, duplicated))} is given to more than one level")
    if colliding:
        problems.append(f"alias {', '.join(map(quote, colliding))} equals a level's nodeLabel")
    if problems:
        raise TopologyError(f"Topology {quote(name)}: {'; '.join(problems)}, and KAI refuses the Topology "
                            "(an alias names exactly one level); fix: give each level its own alias, "
                            "none equal to a nodeLabel")


class TopologyCatalog(Protocol):
    """What the core needs to know about the cluster's topologies.

    ``synced`` is True once the catalog holds the complete set (a file-backed catalog always;
    a live cache after its first successful list). Only a synced catalog lets the webhook deny
    an unknown topology name (DESIGN.md §5).

    ``crd_missing`` is True when the cluster has no Topology CRD
    (the list answered 404): a known state, so ``synced`` is True and there are no topologies;
    the unknown-topology denial then says how to install the CRD (DESIGN.md §10).
    """

    @property
    def synced(self) -> bool: ...

    @property
    def crd_missing(self) -> bool: ...

    def get(self, name: str) -> Topology | None: ...

    def names(self) -> list[str]: ...


class StaticTopologyCatalog:
    """An immutable catalog from Topology objects (files or the packaged default). Always synced."""

    def __init__(self, topologies: Iterable[Topology] = ()):
        self._by_name: dict[str, Topology] = {}
        for topo in topologies:
            self._by_name[topo.name] = topo

    @property
    def synced(self) -> bool:
        return True

    @property
    def crd_missing(self) -> bool:
        return False

    def get(self, name: str) -> Topology | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)


def catalog_topologies(catalog: TopologyCatalog) -> list[Topology]:
    """Every Topology of ``catalog``, in the order of ``catalog.names()`` (a name whose topology is
    gone by the time it is read, in a live catalog, is left out)."""
    return [topology for name in catalog.names() if (topology := catalog.get(name)) is not None]


def topologies_from_documents(documents: Iterable[object]) -> list[Topology]:
    """Extract Topology objects from parsed YAML/JSON documents.

    Accepts single objects, ``kind: List`` / ``*List`` objects with ``items``, and ``None``
    (empty documents). Objects of other kinds are skipped. Raises :class:`TopologyError` for a
    malformed Topology.
    """
    found: list[Topology] = []
    for doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, (dict, Mapping)):
            from webhook.text.messages import quote

            raise TopologyError(f"expected a Kubernetes object, got {quote(doc)}")
        if isinstance(doc.get("items"), list):
            found.extend(topologies_from_documents(doc["items"]))
        elif doc.get("kind") == TOPOLOGY_KIND:
            found.append(Topology.from_object(doc))
    return found


def load_topology_text(text: str, source: str = "<text>") -> list[Topology]:
    """Parse a YAML stream (or JSON) of Topology objects. Raises :class:`TopologyError`."""
    try:
        docs = list(yaml.load_all(text, Loader=TextTimestampLoader))  # timestamps as text, as kubectl reads them
    except yaml.YAMLError as exc:
        raise TopologyError(f"{source}: {yaml_error_text(exc, text)}") from exc
    except ValueError as exc:  # an integer of more than 4,300 digits (Python's conversion limit)
        raise TopologyError(f"{source}: a number has more than 4300 digits") from exc
    try:
        return topologies_from_documents(docs)
    except TopologyError as exc:
        raise TopologyError(f"{source}: {exc}") from exc


def default_catalog() -> StaticTopologyCatalog:
    """The embedded default: the packaged example topology ``cluster-topology``
    (zone > block > rack > hostname, as in ``shared/examples/topology.yaml``); a new catalog each
    call, of the topologies read once (:class:`Topology` is frozen)."""
    return StaticTopologyCatalog(_default_topologies())


@functools.cache
def _default_topologies() -> tuple[Topology, ...]:
    text = resources.files("webhook").joinpath("data/topology.yaml").read_text(encoding="utf-8")
    return tuple(load_topology_text(text, source="embedded default"))
