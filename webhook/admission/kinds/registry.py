"""Every workload kind the webhook handles, in one list (docs/concepts/ARCHITECTURE.md, "Adding a workload
kind"), and the questions asked of a pod whatever its kind: which family's rules read it, its
gang, its gang size, its role.

:data:`DESCRIPTIONS` lists one :class:`~webhook.admission.kinds.description.KindDescription` per kind;
:data:`POD_RULES` the pod families in the order a pod is classified (the training operator's
rules last: the fallback). Admission (:mod:`webhook.admission.kinds`), the pod handler, ``place``'s
expansion and the controller read kinds only through this module.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.admission.kinds import distributedworkload, job, jobset, leaderworkerset, mpijob, pytorchjob, ray, trainjob
from webhook.admission.kinds.description import KindDescription, PodRules
from webhook.kube import segments_dev

#: One description per kind, in the order messages list them.
DESCRIPTIONS: tuple[KindDescription, ...] = (
    pytorchjob.DESCRIPTION,
    leaderworkerset.DESCRIPTION,
    distributedworkload.DESCRIPTION,
    mpijob.DESCRIPTION,
    jobset.DESCRIPTION,
    ray.RAYCLUSTER,
    ray.RAYJOB,
    ray.RAYSERVICE,
    trainjob.DESCRIPTION,
    job.DESCRIPTION,
)

#: kind → description (kind names are unique across the handled groups)
BY_KIND: dict[str, KindDescription] = {d.kind: d for d in DESCRIPTIONS}

#: Pod families in classification order; the last one owns every pod (the fallback).
POD_RULES: tuple[PodRules, ...] = (leaderworkerset.LWS_PODS, jobset.JOBSET_PODS, ray.RAY_PODS, mpijob.MPI_PODS,
                                   job.JOB_PODS, pytorchjob.TRAINING_PODS)

#: Annotations read as a pod's segment size, in order (``kai.scheduler/segment-size`` first).
SIZE_FALLBACKS: tuple[str, ...] = tuple(r.size_fallback for r in POD_RULES if r.size_fallback)


def pod_rules(labels: Mapping[str, str]) -> PodRules:
    """The rules of the first family in :data:`POD_RULES` that owns a pod with ``labels``."""
    for rules in POD_RULES:
        if rules.owns(labels):
            return rules
    return POD_RULES[-1]


def gang_key(namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> str | None:
    """The gang a pod belongs to (DESIGN.md §9), from its own labels: the key of the first family
    whose gang labels it carries (``<namespace>/<job-name>``, ``<namespace>/<lws>/<group-index>``),
    or ``None`` (no gang labels, or an LWS pod without a group index). With ``annotations``
    holding ``segments.dev/gang-scope: workload`` (written at workload CREATE, DESIGN.md §4.5),
    the family's whole-object key (:meth:`PodRules.workload_gang_key`), when it has one."""
    whole = annotations is not None and annotations.get(segments_dev.GANG_SCOPE) == segments_dev.WHOLE_WORKLOAD
    for rules in POD_RULES:
        if rules.claims_gang(labels):
            if whole:
                key = rules.workload_gang_key(namespace, labels)
                if key is not None:
                    return key
            return rules.gang_key(namespace, labels)
    return None


def whole_gang_group(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """The group a pod of a whole-object gang belongs to (its replicatedJob, its Ray worker group:
    :meth:`PodRules.role`), within which its ``kai.scheduler/segment-index`` counts; ``None`` for a
    pod whose gang is one group (no ``segments.dev/gang-scope: workload``, or a family without
    whole-object gangs: :func:`gang_key` gives the per-group key). The Workload API's PodGroup names
    keep groups apart by it (:func:`webhook.admission.workload_api.podgroup_name`)."""
    if annotations.get(segments_dev.GANG_SCOPE) != segments_dev.WHOLE_WORKLOAD:
        return None
    for rules in POD_RULES:
        if rules.claims_gang(labels):
            if rules.workload_gang_key("", labels) is None:
                return None
            return rules.role(labels) or ""
    return None


def gang_labels_text(labels: Mapping[str, str]) -> str:
    """The gang labels a pod with ``labels`` lacks, for the ``not-gated-no-gang-key`` warning: its
    family's (``ray.io/cluster + ray.io/group``); for a pod no other family owns, the training
    operator's or LWS's (``label training.kubeflow.org/job-name, or leaderworkerset.sigs.k8s.io/name
    + group-index``)."""
    rules = pod_rules(labels)
    if rules is not POD_RULES[-1]:
        return rules.gang_label_text
    return ", or ".join(r.gang_label_text for r in (POD_RULES[-1], leaderworkerset.LWS_PODS))


def gang_size_keys() -> tuple[str, ...]:
    """Pod annotations read as the gang size after ``segments.dev/gang-size``, in order."""
    return tuple(r.gang_size_fallback for r in POD_RULES if r.gang_size_fallback)


def pod_role(labels: Mapping[str, str]) -> str:
    """The role explanations name a pod by (:attr:`webhook.placement.model.PodRequest.role`):
    ``master``, ``worker``, ``leader``, …; ``""`` when its labels say none."""
    return pod_rules(labels).role(labels) or ""


def segment_group(labels: Mapping[str, str]) -> int:
    """The gang within its workload whose segments a pod's index counts in (LWS group; else 0).
    Raises ``ValueError`` for a group label that is not a whole number."""
    return pod_rules(labels).segment_group(labels)


def replica_of(labels: Mapping[str, str]) -> str | None:
    """The replica a pod is created and deleted with (KubeRay multi-host), or ``None``."""
    return pod_rules(labels).replica(labels)
