"""The answer to one AdmissionReview request: :class:`Decision` (allowed, patch, warnings) and the
:class:`Violation` s that deny it. Every handler of :mod:`webhook.admission.kinds` returns a Decision;
the transport (:mod:`webhook.http.envelope`) turns it into an AdmissionResponse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Violations listed in full in :attr:`Decision.message` at most (README "Every rejection a user
#: can meet": the message stays under 4 KiB however many violations); the rest are counted by rule.
MAX_LISTED_VIOLATIONS = 20
#: Longest :attr:`Decision.message`, in characters: well under the 4 KiB a user can read.
MAX_MESSAGE_CHARS = 3000
#: Longest AdmissionResponse warning, in characters (DESIGN.md §5).
MAX_WARNING_CHARS = 120
#: Longest text of one listed violation (a message may quote a long value).
MAX_VIOLATION_CHARS = 600


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Violation:
    """One broken rule of one object.

    ``rule``: stable identifier used in metrics and logs (e.g. ``segment-size-not-integer``), one
    of the ids of :data:`webhook.admission.rules.RULES`.
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
    ``kai_gaps``: those of ``warnings`` that say what KAI's pod-grouper does not enforce; a
    workload's review keeps them only when the object's target is ``kai`` (DESIGN.md §4.5, §9b:
    :func:`webhook.admission.kinds._workload.review_workload`).
    """

    kind: str
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    kai_gaps: list[str] = field(default_factory=list, compare=False, repr=False)
    #: those of ``warnings`` that name a misspelled ``metadata`` or ``annotations`` holding a key that
    #: opts in (DESIGN.md §5): kept even when the object, as read, did not opt in (the misspelling
    #: is why it did not), never a denial
    lost_opt_ins: list[str] = field(default_factory=list, compare=False, repr=False)

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
        """All violations in one message (DESIGN.md §5: reported together), bounded for a reader.

        At most :data:`MAX_LISTED_VIOLATIONS` violations in full, in order, each clipped to
        :data:`MAX_VIOLATION_CHARS`, as many as fit in :data:`MAX_MESSAGE_CHARS`; the rest as
        ``… and N more; all T by rule: <rule> ×<count>, …`` counting every violation under its
        rule id. The whole message is at most :data:`MAX_MESSAGE_CHARS`
        characters (well under the 4 KiB a user reads in kubectl's error). Empty when allowed.
        """
        if not self.violations:
            return ""
        if len(self.violations) == 1:
            return _clip(self.violations[0].message, MAX_MESSAGE_CHARS)
        total = len(self.violations)
        counts: dict[str, int] = {}
        for violation in self.violations:
            counts[violation.rule] = counts.get(violation.rule, 0) + 1
        by_rule = ", ".join(f"{rule} ×{n}" for rule, n in counts.items())
        head = f"{total} problems: "
        parts: list[str] = []
        message = f"{head}… by rule: {by_rule}"
        for index, violation in enumerate(self.violations[:MAX_LISTED_VIOLATIONS], 1):
            parts.append(f"({index}) {_clip(violation.message, MAX_VIOLATION_CHARS)}")
            rest = f" … and {total - index} more; all {total} by rule: {by_rule}" if index < total else ""
            candidate = head + " ".join(parts) + rest
            if len(candidate) > MAX_MESSAGE_CHARS:
                break
            message = candidate
        return _clip(message, MAX_MESSAGE_CHARS)

    @property
    def rule(self) -> str | None:
        """Identifier of the first violated rule, or None when allowed."""
        return self.violations[0].rule if self.violations else None

    def warn(self, text: str, *, kai_gap: bool = False) -> None:
        """Add a warning, shortened to 120 characters (DESIGN.md §5; at a space, so no word is cut,
        unless the last 40 characters hold none) and de-duplicated.
        ``kai_gap``: it says what KAI does not enforce (also listed in :attr:`kai_gaps`)."""
        if len(text) > MAX_WARNING_CHARS:
            cut = text[: MAX_WARNING_CHARS - 1]
            space = cut.rfind(" ", MAX_WARNING_CHARS - 41)
            if text[MAX_WARNING_CHARS - 1] != " " and space > 0:
                cut = cut[:space]
            text = cut.rstrip(" ,;:") + "…"
        if text not in self.warnings:
            self.warnings.append(text)
        if kai_gap and text not in self.kai_gaps:
            self.kai_gaps.append(text)

    def deny(self, rule: str, field_path: str, message: str, code: int = 403) -> None:
        """Record a violation; the object will be denied."""
        self.violations.append(Violation(rule=rule, field=field_path, message=message, code=code))
