"""Outcome types shared by every handler: violations, decisions and admission settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.core.keys import MAX_WARNING_CHARS


@dataclass(frozen=True)
class AdmissionSettings:
    """Operator configuration that changes what the webhook does (DESIGN.md §4.1, §6).

    ``platform_users`` / ``platform_groups``: identities from ``request.userInfo`` whose
    PyTorchJobs get automatic segment placement. ``default_topology``: topology name used when
    automatic mode applies and the manifest names none. ``gate_pods``: ``serve --gate-pods``
    (DESIGN.md §9): gate gang pods at CREATE and write the gang facts on workload templates.
    """

    platform_users: frozenset[str] = frozenset()
    platform_groups: frozenset[str] = frozenset()
    default_topology: str | None = None
    gate_pods: bool = False


@dataclass(frozen=True)
class Violation:
    """One broken rule of one object.

    ``rule``: stable identifier used in metrics and logs (e.g. ``segment-size-not-integer``), one
    of the ids of :data:`webhook.core.rules.RULES`.
    ``field``: the field path, e.g.
    ``spec.pytorchReplicaSpecs.Worker.template.metadata.annotations[kai.scheduler/segment-size]``.
    ``message``: one sentence naming the field, the value, the rule and the fix.
    ``code``: 403 for a policy denial, 400 for a malformed object.
    """

    rule: str
    field: str
    message: str
    code: int = 403


@dataclass
class Decision:
    """The answer to one AdmissionReview request.

    ``patch``: RFC 6902 operations (list of dicts), empty when nothing changes or when denied.
    ``warnings``: AdmissionResponse warnings, each at most 120 characters (DESIGN.md §5).
    ``violations``: every broken rule of the object; non-empty means denied.
    """

    kind: str
    patch: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.violations

    @property
    def code(self) -> int:
        """HTTP-style status for ``response.status.code``: 200 allowed, else 400 if any
        violation is a malformed-object one, else 403."""
        if not self.violations:
            return 200
        return 400 if any(v.code == 400 for v in self.violations) else 403

    @property
    def message(self) -> str:
        """All violations in one message (DESIGN.md §5: reported together)."""
        if not self.violations:
            return ""
        if len(self.violations) == 1:
            return self.violations[0].message
        return f"{len(self.violations)} problems: " + " ".join(
            f"({i}) {v.message}" for i, v in enumerate(self.violations, 1)
        )

    @property
    def rule(self) -> str | None:
        """Identifier of the first violated rule, or None when allowed."""
        return self.violations[0].rule if self.violations else None

    def warn(self, text: str) -> None:
        """Add a warning, shortened to 120 characters (DESIGN.md §5) and de-duplicated."""
        if len(text) > MAX_WARNING_CHARS:
            text = text[: MAX_WARNING_CHARS - 1] + "…"
        if text not in self.warnings:
            self.warnings.append(text)

    def deny(self, rule: str, field_path: str, message: str, code: int = 403) -> None:
        """Record a violation; the object will be denied."""
        self.violations.append(Violation(rule=rule, field=field_path, message=message, code=code))
