"""Automatic segment placement (DESIGN.md §6), all of it.

Automatic mode applies when a segment size is resolved (> 1) AND the workload is the native kind,
or a PyTorchJob whose ``request.userInfo`` matches a configured platform identity
(``--platform-user`` / ``--platform-group``); never to a LeaderWorkerSet. Where the user set
nothing of that scope it adds: the configured default topology name, the segment preferred
level = the topology's LOWEST level, and the workload preferred level = the lowest level.

On UPDATE (:func:`update_defaults`), the defaults are applied again only when the stored object
already carries them all (so a ``kubectl replace`` that drops them gets them back, whoever sends
it), and never added to a running workload that was created without them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from webhook.admission.config import AdmissionSettings
from webhook.admission.reading import AnnotationMap
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say
from webhook.kube import kai_scheduler
from webhook.text.messages import quote
from webhook.topology.objects import Topology, TopologyCatalog

#: Kinds automatic mode may apply to (DESIGN.md §6); LeaderWorkerSet never.
NATIVE_KIND = "DistributedWorkload"
PLATFORM_KIND = "PyTorchJob"


class Defaults(enum.Enum):
    """When a kind handler applies automatic placement while analysing an object."""

    #: never: the object's explicit keys only (the stored object of an UPDATE)
    OFF = "off"
    #: as on CREATE: the native kind always, a PyTorchJob when the requester is a platform identity
    AS_CREATE = "as-create"
    #: whoever sends the request (UPDATE of a workload that carries all its defaults already)
    ANY_REQUESTER = "any-requester"


def is_automatic_requester(request: Mapping[str, Any], settings: AdmissionSettings) -> bool:
    """True when ``request.userInfo`` matches a platform identity (DESIGN.md §6):
    ``username`` in ``settings.platform_users`` or any of ``groups`` in
    ``settings.platform_groups``. Malformed userInfo counts as no match."""
    if not (settings.platform_users or settings.platform_groups):
        return False  # no platform identity configured
    info = request.get("userInfo")
    if not isinstance(info, (dict, Mapping)):
        return False
    user = info.get("username")
    if isinstance(user, str) and user in settings.platform_users:
        return True
    groups = info.get("groups")
    if isinstance(groups, list):
        return any(isinstance(g, str) and g in settings.platform_groups for g in groups)
    return False


def applies(kind: str, request: Mapping[str, Any], settings: AdmissionSettings, defaults: Defaults,
            *, supported: bool = True) -> bool:
    """Whether automatic mode applies to this ``kind`` and requester (before the size check of
    :func:`default_topology`). ``supported``: the native kind's framework can be segmented."""
    if defaults is Defaults.OFF or not supported:
        return False
    if kind == NATIVE_KIND:
        return True
    if kind == PLATFORM_KIND:
        return defaults is Defaults.ANY_REQUESTER or is_automatic_requester(request, settings)
    return False


def default_topology(automatic: bool, size: int | None, named: str | None, settings: AdmissionSettings,
                     catalog: TopologyCatalog, decision: Decision) -> tuple[str | None, bool]:
    """§4.1 / §6: the topology name and whether automatic mode stays on.

    ``automatic``: :func:`applies` said yes; ``size``: the segment size the object asks for, when
    > 1 (``None``: not segmented, automatic mode off); ``named``: the name the object sets. When the object names no
    topology, the configured default is used if it exists; otherwise automatic mode is skipped with
    a warning. Returns ``(name or None, automatic)``.
    """
    automatic = automatic and size is not None
    if named is not None or not automatic:
        return named, automatic
    if not settings.default_topology:
        say(decision, "automatic-no-topology")
        return None, False
    if catalog.get(settings.default_topology) is None:
        say(decision, "automatic-default-topology-missing", name=quote(settings.default_topology))
        return None, False
    return settings.default_topology, True


def level_defaults(automatic: bool, topology: Topology | None, topology_name: str | None, synced: bool,
                   root: AnnotationMap, worker: AnnotationMap | None, decision: Decision) -> tuple[str | None, str | None]:
    """§6: ``(segment preferred level, workload preferred level)`` automatic mode adds: the
    topology's lowest level, each only where the user set no key of that scope (user keys always
    win). ``(None, None)`` when automatic mode is off or the topology is unknown (a warning when
    it is not loaded yet)."""
    if not automatic:
        return None, None
    if topology is None:
        if not synced:
            say(decision, "automatic-topology-not-loaded", name=quote(topology_name))
        return None, None

    def user_set(*names: str) -> bool:
        return root.has_any(*names) or (worker is not None and worker.has_any(*names))

    lowest = topology.lowest_level
    segment = None if user_set(kai_scheduler.SEGMENT_REQUIRED, kai_scheduler.SEGMENT_PREFERRED) else lowest
    workload = None if user_set(*kai_scheduler.WORKLOAD_PLACEMENT_KEYS) else lowest
    return segment, workload


def update_defaults(stored_plain: Any, stored_with_defaults: Any) -> Defaults:
    """§6 on UPDATE: which defaults to apply to the new object, from the ONE analysis of the stored
    object with every default automatic mode would add (``stored_with_defaults``: a ``Plan`` of
    ``analyse(old, update=STORED)``, or ``None`` when malformed) and that plan as the stored object
    says it by itself (``stored_plain``: its ``Plan.without_defaults()``, or ``None``).

    * the stored object asks for no segment size: adding one (while suspended) is like a CREATE;
    * it asks for one but names no topology, so no segments were in force (DESIGN.md §5
      "Segments without a topology"; a native workload created before its default topology was
      configured or loaded): resolved exactly as CREATE (§5 "UPDATE resolves exactly as CREATE"),
      since the defaults change no constraint that was in force;
    * it carries every default already: apply them whoever sends the update;
    * otherwise (segments in force, created without the defaults): never add them to a running
      workload.
    """
    if stored_plain is None or stored_plain.resolution.requested_size is None:
        return Defaults.AS_CREATE
    if stored_plain.resolution.topology_name is None:
        return Defaults.AS_CREATE
    if stored_with_defaults is not None and stored_plain.owned_keys() == stored_with_defaults.owned_keys():
        return Defaults.ANY_REQUESTER
    return Defaults.OFF
