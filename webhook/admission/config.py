"""The operator's configuration of admission (DESIGN.md §4.1, §6, §9, §3b): :class:`AdmissionSettings`.

The one home of each setting's default: the ``serve`` / ``review`` flags of
:mod:`webhook.cli.flags` build it and take their defaults from here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionSettings:
    """Operator configuration that changes what the webhook does (DESIGN.md §4.1, §6).

    ``platform_users`` / ``platform_groups``: identities from ``request.userInfo`` whose
    PyTorchJobs get automatic segment placement. ``default_topology``: topology name used when
    automatic mode applies and the manifest names none. ``gate_pods``: ``serve --gate-pods``
    (DESIGN.md §9): gate gang pods at CREATE and write the gang facts on workload templates.
    ``segment_env``: ``serve --segment-env`` (DESIGN.md §3b "Segment facts in the pod"): the
    containers of a segmented pod get ``KAI_SEGMENT_INDEX`` and ``KAI_SEGMENT_SIZE``.
    """

    platform_users: frozenset[str] = frozenset()
    platform_groups: frozenset[str] = frozenset()
    default_topology: str | None = None
    gate_pods: bool = False
    segment_env: bool = False
    #: ``serve --target`` (DESIGN.md §9b): the target of workloads without a ``segments.dev/target``
    #: label (``kai``, ``kueue``, ``workload-api`` or ``gate``; see :mod:`webhook.admission.targets`)
    target: str = "kai"
    #: ``--kueue-version`` (DESIGN.md §9b): the (major, minor) of the Kueue that reads the ``kueue``
    #: target's annotations; decides the rules that changed between Kueue versions (a partial last
    #: slice: refused before v0.20, placed from v0.20, :data:`webhook.admission.targets.KUEUE_PARTIAL_SLICES`)
    kueue_version: tuple[int, int] = (0, 17)
