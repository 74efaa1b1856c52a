"""Every warning the webhook gives, in one registry: id → DESIGN.md § → text template.

DESIGN.md §5 makes warnings part of the contract (legal but surprising input is allowed with an
AdmissionResponse warning, kubectl prints it as ``Warning: …``), so they are registered the way
denials are (:data:`webhook.admission.rules.RULES`): a stable ``id``, the ``source`` of the rule (a
DESIGN.md section, or ``README: decisions``: docs/concepts/admission.md, "Decisions where DESIGN.md is
silent"), a one-line ``summary``
and the ONE ``template`` of its text (:meth:`str.format` fields). A warning is given only through
:func:`say` (into a :class:`~webhook.admission.verdict.Decision`) or :func:`text` (the pod rules return
their warnings as strings), both of which raise ``KeyError`` for an id that is not registered.

``hack/gen_reference.py`` writes docs/reference/warnings.md from :data:`WARNINGS`;
``tests/unit/admission/test_core_warnings.py`` gives each by a real review.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.admission.verdict import Decision


@dataclass(frozen=True)
class WarningRule:
    """One warning the webhook gives on an object (or pod) it allows.

    ``id``: stable identifier (``partial-last-segment``); ``source``: ``DESIGN.md §N`` or ``README:
    decisions``; ``summary``: when it is given, one line for docs; ``template``: its text, with
    :meth:`str.format` fields (``{pods}``), at most 120 characters once filled (DESIGN.md §5; longer
    texts are clipped by :meth:`Decision.warn`). ``kai_gap``: it says what KAI's pod-grouper does
    not enforce, so it is given only when the object's target is ``kai`` (DESIGN.md §4.5, §9b:
    under ``gate``, ``workload-api`` or ``kueue`` another reader enforces, or warns for itself).
    """

    id: str
    source: str
    summary: str
    template: str
    kai_gap: bool = False

    def text(self, **values: Any) -> str:
        """The warning's text with ``values`` filled in. Raises ``KeyError`` naming a missing field."""
        return self.template.format(**values)


_ALL = (
    # ---- resolution of the keys (DESIGN.md §4, §5)
    WarningRule("workload-key-on-template", "DESIGN.md §4",
                "a workload-level key (topology-required/preferred-placement) on the worker template",
                "{key} on the worker template is ignored; set it in metadata.annotations"),
    WarningRule("segment-levels-without-size", "DESIGN.md §5",
                "segment placement levels without a segment size",
                "segment placement ignored: no kai.scheduler/segment-size is set"),
    WarningRule("segments-without-topology", "DESIGN.md §5",
                "a valid segment size but no topology name anywhere: nothing is written",
                "kai.scheduler/segment-size ignored: KAI needs kai.scheduler/topology for segments; "
                "set it in metadata.annotations"),
    WarningRule("no-worker-template", "DESIGN.md §3",
                "a segment size on a workload without a worker template",
                "{kind} has no worker template: kai.scheduler/segment-size ignored"),
    WarningRule("partial-last-segment", "DESIGN.md §5",
                "the segmented pods are not a multiple of the segment size",
                "{pods} / segment size {size}: last segment has {rest}"),
    WarningRule("segment-size-not-canonical", "README: decisions",
                "a segment size written with leading zeros (it is written back as digits)",
                "kai.scheduler/segment-size={value} written as {canonical}"),
    WarningRule("segment-size-disagrees-with-spec", "DESIGN.md §3",
                "DistributedWorkload: an annotation segment size other than workersPerSegment (overwritten)",
                "kai.scheduler/segment-size={value} disagrees with {spec_field}={spec_size}; overwritten"),
    WarningRule("root-key-ignored-spec-wins", "DESIGN.md §3",
                "DistributedWorkload: a root segment size the template shadows, while workersPerSegment decides",
                "root {key}={value} ignored: {spec_field}={spec_size} wins"),
    WarningRule("root-key-overridden", "DESIGN.md §4",
                "a valid root key the worker template sets to another value",
                "root {key}={value} overridden by template"),
    WarningRule("topology-not-loaded", "DESIGN.md §5",
                "a topology name while the topology cache is not synced: levels not checked",
                "topology {name} not loaded yet; levels not checked"),
    WarningRule("unknown-kai-key", "DESIGN.md §5",
                "a kai.scheduler/ key KAI does not read and that misspells no placement key",
                "unknown key {key} ignored: KAI does not read it"),
    WarningRule("more-unknown-kai-keys", "DESIGN.md §5",
                "more than 3 unknown kai.scheduler/ keys in one annotation map: the rest counted",
                "{count} more unknown kai.scheduler/ keys in {map_field} ignored"),
    WarningRule("segment-key-on-unsegmented-template", "DESIGN.md §5",
                "segment keys on a template that is never segmented (Master, launcher, Ray head)",
                "{key} on {template} ignored (never segmented)"),
    WarningRule("misspelled-field", "DESIGN.md §5",
                "a misspelled metadata or annotations (of the object or a template), which the API server drops "
                "with the keys in it; given even when it is why the object did not opt in",
                "{field}: did you mean {expected}? the API server drops it"),
    WarningRule("unknown-field", "DESIGN.md §5",
                "DistributedWorkload: a field its CRD schema does not define, which the API server drops (prunes); "
                "the defined field its name is close to (letter case not counted) is named",
                "unknown field {field}={value}: {fix}; the API server drops it"),
    # ---- automatic segment placement (DESIGN.md §6)
    WarningRule("automatic-no-topology", "DESIGN.md §6",
                "automatic mode applies, but no topology is named and no default is configured",
                "automatic segment placement skipped: no kai.scheduler/topology and no default topology"),
    WarningRule("automatic-default-topology-missing", "DESIGN.md §6",
                "the configured default topology is not known",
                "automatic segment placement skipped: default topology {name} not found"),
    WarningRule("automatic-topology-not-loaded", "DESIGN.md §6",
                "automatic mode applies while the topology cache is not synced",
                "automatic segment placement skipped: topology {name} not loaded yet"),
    # ---- LeaderWorkerSet (DESIGN.md §3, §3b)
    WarningRule("lws-partial-group", "DESIGN.md §5",
                "LWS without subGroupSize: neither size nor size - 1 is a multiple of the segment size",
                "size {group_size} / segment size {size}: last segment has {rest}"),
    WarningRule("lws-subgroup-size-set", "DESIGN.md §3",
                "LWS subGroupSize other than the annotation's size (the patch sets it)",
                "subGroupSize {sub_group_size} set to {size} (kai.scheduler/segment-size wins)"),
    WarningRule("lws-root-size-set", "DESIGN.md §3",
                "LWS root segment-size other than the workerTemplate's (the patch sets it)",
                "root kai.scheduler/segment-size={value} set to {size} (workerTemplate wins)"),
    WarningRule("lws-leader-policy-replaced", "DESIGN.md §2",
                "a segment-leader-policy on the workerTemplate other than subGroupPolicyType",
                "kai.scheduler/segment-leader-policy={value} replaced by subGroupPolicyType {policy}"),
    WarningRule("lws-leader-template-key-unsegmented", "README: decisions",
                "segment keys on the leaderTemplate of an LWS that is not segmented",
                "{key} on the leaderTemplate ignored: the workerTemplate decides segments"),
    WarningRule("lws-leader-template-differs", "README: decisions",
                "LeaderWorker: a leaderTemplate key other than the workerTemplate's (overwritten)",
                "leaderTemplate {key} differs from workerTemplate; worker value wins"),
    WarningRule("lws-leader-excluded-segment-key", "README: decisions",
                "LeaderExcluded: segment keys on the leaderTemplate (left in place, ignored)",
                "{key} on the leaderTemplate ignored: leader excluded from segments"),
    WarningRule("lws-leader-ready-segments", "DESIGN.md §3b",
                "LWS startupPolicy LeaderReady with segments (denied under targets gate, workload-api)",
                "startupPolicy LeaderReady: KAI cannot group the lone leader into a segment; "
                "use startupPolicy: LeaderCreated", kai_gap=True),
    # ---- the §3b kinds
    WarningRule("kai-does-not-enforce", "DESIGN.md §3b",
                "segments of a kind (or case) KAI's pod-grouper does not enforce; gate mode does",
                "KAI {why}: it does not enforce these {kind} segments; --gate-pods does", kai_gap=True),
    WarningRule("kai-flat-gang", "DESIGN.md §4.5",
                "a segmented workload whose owner chain KAI's pod-grouper cannot group (native kind)",
                "KAI flattens pods {kind} owns: segments ({constraints}) not enforced; --gate-pods does", kai_gap=True),
    WarningRule("kai-template-level-whole-group", "DESIGN.md §4.5",
                "a workload level on a Ray group template that names its topology: KAI enforces it on that group",
                "workload {scope} level {level} on {group}: KAI enforces it on the whole group"),
    WarningRule("target-cannot-express", "DESIGN.md §9b",
                "a constraint the chosen target (kueue, workload-api) cannot express: what it will do instead",
                "target {target}: {what}"),
    WarningRule("kueue-partial-slice", "DESIGN.md §9b",
                "target kueue, --kueue-version 0.20+: the PodSet's last slice is partial (Kueue TASPartialSlices)",
                "target kueue: last slice of {pods} placed partial by Kueue {version} (gate TASPartialSlices, on by default)"),
    WarningRule("elastic-partial-segment", "DESIGN.md §5",
                "segmented pods that may scale (PyTorchJob elasticPolicy, autoscaled Ray group) to a count the size "
                "does not divide",
                "{what} may scale {low}-{high}: a count segment size {size} does not divide gives a partial last "
                "segment"),
    WarningRule("elastic-segments-target", "DESIGN.md §9b",
                "segmented pods that may scale: what the chosen target does with another count",
                "scaled, {who} {what}"),
    WarningRule("jobset-segments-straddle-jobs", "DESIGN.md §3b",
                "JobSet: neither parallelism % S == 0 nor S % parallelism == 0 (segments straddle Jobs)",
                "replicatedJob {replicated_job}: segment size {size} and parallelism {parallelism} do not "
                "divide each other; segments straddle Jobs"),
    WarningRule("mpijob-launcher-template-differs", "DESIGN.md §3b",
                "MPIJob launcher-as-worker: a Launcher template key other than the Worker's (overwritten)",
                "Launcher template {key} differs from the Worker template; Worker value wins"),
    WarningRule("trainjob-num-nodes-unset", "DESIGN.md §3b",
                "a segmented TrainJob without spec.trainer.numNodes: the size is not checked",
                "spec.trainer.numNodes not set: the runtime's node count decides; segment size not checked"),
    # ---- pod CREATE (DESIGN.md §7, §9): pods are never denied, their problems are warnings
    WarningRule("pod-size-without-topology", "DESIGN.md §5",
                "a pod with a segment size but no topology name: no segment label",
                "pod has kai.scheduler/segment-size but no kai.scheduler/topology; no segment label"),
    WarningRule("pod-size-not-int", "DESIGN.md §7",
                "a pod whose segment size is not an int32 >= 1: no segment label",
                "pod {key}={value} is not an int32 >= 1; no segment label"),
    WarningRule("pod-label-unreadable", "DESIGN.md §7",
                "a pod index label its family reads is missing or garbled: no segment label",
                "pod label {label}{shown} {expected}; no segment label"),
    WarningRule("pod-of-no-segmented-kind", "DESIGN.md §7",
                "a pod with a segment size but no label of any kind the webhook segments (a Deployment's pod)",
                "pod segment size ignored: no index label of a kind the webhook segments (Job, JobSet, LWS, Ray, "
                "Kubeflow)"),
    WarningRule("pod-annotation-unreadable", "DESIGN.md §7",
                "a pod annotation its family reads (group size, parallelism, hosts) is missing or garbled",
                "pod annotation {annotation}{shown} {expected}; no segment label"),
    WarningRule("pod-leader-policy-unknown", "DESIGN.md §7",
                "an LWS pod whose leader policy is neither LeaderWorker nor LeaderExcluded",
                "pod leader policy {policy} unknown; no segment label"),
    WarningRule("pod-index-out-of-range", "DESIGN.md §7",
                "a pod index outside its group (LWS worker index, JobSet completion index)",
                "pod {index} is {problem}; no segment label"),
    WarningRule("pod-without-index", "DESIGN.md §3b",
                "a pod of a segmented group without its index labels (KubeRay < 1.6): no segment label",
                "pod has no {label} (KubeRay < 1.6?): no segment label; --gate-pods forms segments at placement"),
    WarningRule("not-gated-no-gang-key", "DESIGN.md §9",
                "--gate-pods: a pod to gate without the labels of its gang key: not gated",
                "not gated: no gang key ({gang_labels})"),
    WarningRule("not-gated-bad-gang-size", "DESIGN.md §9",
                "--gate-pods: a pod whose segments.dev/gang-size is not a whole number >= 1: not gated",
                "not gated: segments.dev/gang-size={value} is not a whole number of pods >= 1"),
    WarningRule("not-gated-no-gang-size", "DESIGN.md §9",
                "--gate-pods: a pod to gate without a gang size: not gated",
                "not gated: no segments.dev/gang-size (workload created before --gate-pods?)"),
    WarningRule("not-gated-node-name", "DESIGN.md §9",
                "--gate-pods: a pod created with spec.nodeName (KEP-3838 forbids gates there): not gated",
                "not gated: spec.nodeName {node} is set (the pod bypasses the scheduler)"),
    WarningRule("not-grouped-no-gang-key", "DESIGN.md §9b",
                "target workload-api: a pod without the labels of its gang key gets no PodGroup",
                "no PodGroup: no gang key ({gang_labels})"),
    WarningRule("podgroup-name-kept", "DESIGN.md §9b",
                "target workload-api: a pod that names another PodGroup keeps it (the field is immutable)",
                "spec.schedulingGroup.podGroupName {value} kept; its segment's PodGroup is {wanted}"),
    WarningRule("gate-per-group-gangs", "DESIGN.md §9",
                "--gate-pods / target workload-api: a JobSet / Ray root workload level, groups differ in topology "
                "or segment levels",
                "{who} gangs {kind} per group ({why}): {level} holds in each only"),
    WarningRule("gate-head-not-gated", "DESIGN.md §9",
                "--gate-pods / target workload-api: a Ray root workload level; the head is not in the gang "
                "(kube-scheduler places it)",
                "{who} does not {verb} {template}: {level} binds the worker groups only"),
)

#: Warning id → :class:`WarningRule`, in the order of the README's table "Every warning a user can meet".
WARNINGS: dict[str, WarningRule] = {}
for _rule in _ALL:
    if _rule.id in WARNINGS:
        raise ValueError(f"warning {_rule.id} registered twice")
    WARNINGS[_rule.id] = _rule
del _rule


def text(warning_id: str, **values: Any) -> str:
    """The text of registered warning ``warning_id`` with ``values`` filled in (for the pod rules,
    which return their warnings). Raises ``KeyError`` for an unknown id or a missing field (a
    programming error)."""
    return WARNINGS[warning_id].text(**values)


def say(decision: Decision, warning_id: str, **values: Any) -> None:
    """Give registered warning ``warning_id`` (its text with ``values``) in ``decision``
    (:meth:`Decision.warn` clips it to 120 characters and drops a repeat). Raises ``KeyError`` for
    an unknown id or a missing field (a programming error). A :attr:`WarningRule.kai_gap` warning is
    also listed in :attr:`Decision.kai_gaps` (kept only under target ``kai``)."""
    rule = WARNINGS[warning_id]
    decision.warn(rule.template.format(**values), kai_gap=rule.kai_gap)
