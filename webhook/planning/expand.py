"""Workload expansion (DESIGN.md §8): a workload manifest → the pods its controller would create,
passed through the admission core so the engine places exactly the segments the webhook stamps.

Pod naming and labels follow the upstream controllers: every kind of the registry
(:data:`webhook.admission.kinds.registry.DESCRIPTIONS`) says how its controller names and labels its
pods (:attr:`webhook.admission.kinds.description.KindDescription.controller_pods`, with the upstream
source), and this module follows that; no kind is named here.

The workload (CREATE), then each pod (CREATE), goes through :func:`webhook.admission.review.review`;
the returned JSONPatch is applied with ``jsonpatch``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds import trainingruntime
from webhook.admission.kinds.description import ShapeError
from webhook.admission.kinds.registry import BY_KIND, DESCRIPTIONS, pod_role, segment_group
from webhook.errors import SegmentWebhookError
from webhook.kube import kai_scheduler
from webhook.kube.pods import pod_requests_milli, resource_requirements
from webhook.kube.quantity import QuantityError
from webhook.placement.eligibility import pod_request
from webhook.placement.model import Gang, PlacementError, PodRequest
from webhook.text.messages import closest, quote
from webhook.topology.objects import TopologyCatalog

#: kind → (API group, version) of every kind ``place`` expands (:data:`webhook.admission.kinds.registry.DESCRIPTIONS`)
SUPPORTED = {d.kind: (d.group, d.version) for d in DESCRIPTIONS}


class ExpandError(SegmentWebhookError, ValueError):
    """The workload manifest cannot be expanded (bad shape or unsupported kind): exit 2.

    ``runtime``: the ClusterTrainingRuntime / TrainingRuntime document (one of the ``runtimes``
    given to :func:`expand`, the same object) whose own fields the message names, so a caller that
    read it from another file than the TrainJob names that file; ``None`` when the message is about
    the workload."""

    def __init__(self, message: str, runtime: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.runtime = runtime


@dataclass
class Expansion:
    """Result of expanding one workload.

    ``denied``: the webhook denied the workload (``message`` says why; exit 1).
    ``gangs``: one :class:`Gang` (one per LWS replica group), in order.
    ``pods``: the patched Pod objects. ``notes``: the AdmissionResponse warnings collected, as
    ``(kind, object name, warning)``; :attr:`warnings` says each distinct one once.
    ``topology``: the resolved topology name, or ``None``. ``expanded_kind``: the kind whose
    pods were made (the workload's; ``JobSet`` for a TrainJob, whose pods are its JobSet's).
    ``generated_name``: the name made from ``metadata.generateName`` (:func:`generated_name`;
    also said in :attr:`notes`; ``name_note`` is that line, as :attr:`warnings` prints it), ``None``
    when the workload has a name.
    """

    denied: bool = False
    message: str = ""
    gangs: list[Gang] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    workload: dict[str, Any] | None = None
    notes: list[tuple[str, str, str]] = field(default_factory=list)
    topology: str | None = None
    expanded_kind: str = ""
    generated_name: str | None = None
    name_note: str | None = None

    def note(self, kind: str, name: str, warning: str) -> None:
        """Collect one AdmissionResponse ``warning`` the webhook gave object ``kind``/``name``."""
        self.notes.append((kind, name, warning))

    @property
    def warnings(self) -> list[str]:
        """Each distinct warning once, in first-seen order (:func:`group_warnings`)."""
        return group_warnings(self.notes)


def group_warnings(notes: list[tuple[str, str, str]]) -> list[str]:
    """One line per distinct ``(kind, warning)`` of ``notes`` (``(kind, object name, warning)``), in
    first-seen order: ``"<kind> <name>: <warning>"`` when one object gave it, else
    ``"<count> <kind>s (<first name> …): <warning>"``, so a 512-worker job whose every pod gets the
    same warning prints one line, ``512 Pods (job-worker-0 …): …``."""
    seen: dict[tuple[str, str], list[str]] = {}
    for kind, name, warning in notes:
        seen.setdefault((kind, warning), []).append(name)
    lines = []
    for (kind, warning), names in seen.items():
        lines.append(f"{kind} {names[0]}: {warning}" if len(names) == 1
                     else f"{len(names)} {kind}s ({names[0]} …): {warning}")
    return lines


def _request(obj: Mapping[str, Any], kind: str, user: str, groups: list[str]) -> dict[str, Any]:
    from webhook.admission.request import build_request

    group, version = SUPPORTED.get(kind, ("", "v1"))
    return dict(build_request(obj, user=user, groups=groups, uid=f"place-{(obj.get('metadata') or {}).get('name', '')}",
                              kind={"group": group, "version": version, "kind": kind}))


def _admit(obj: dict[str, Any], kind: str, catalog: TopologyCatalog, settings: AdmissionSettings, user: str,
           groups: list[str], exp: Expansion, name: str | None = None) -> dict[str, Any] | None:
    """Pass ``obj`` through the webhook; ``name``: the name its warnings are noted under (default
    its ``metadata.name``; the generated name of an object the webhook sees with only
    ``metadata.generateName``)."""
    from webhook.admission.review import review

    decision = review(_request(obj, kind, user, groups), catalog, settings, mutate=True)
    for w in decision.warnings:
        exp.note(kind, name or str(obj["metadata"].get("name")), w)
    if not decision.allowed:
        exp.denied = True
        exp.message = decision.message
        return None
    if decision.patch:
        try:  # obj is this module's own copy: patched in place
            patched: dict[str, Any] = jsonpatch.apply_patch(obj, decision.patch, in_place=True)
            return patched
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ExpandError(f"the webhook's patch for {kind} {obj['metadata'].get('name')} does not apply: {exc}") from exc
    return obj


def _copy_json(value: Any) -> Any:
    """Deep copy of parsed YAML/JSON (dicts, lists, scalars), without ``copy.deepcopy``'s memo
    (parsed JSON is a tree; YAML aliases are copied apart, as a JSON round trip would)."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return copy.deepcopy(value)


def _pod(name: str, ns: str, tmpl: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, Any]:
    meta = tmpl.get("metadata") or {}
    lab = dict(meta.get("labels") or {})
    lab.update(labels)
    ann = dict(meta.get("annotations") or {})
    ann.update(annotations)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": lab, "annotations": ann},
            "spec": _copy_json(dict(tmpl["spec"]))}


#: Most pods one workload may expand into: far above any real gang, low enough that a typo such as
#: ``replicas: 2000000000`` fails at once instead of exhausting memory.
MAX_PODS = 100_000


def _check_pod_count(total: int, where: str) -> None:
    """Raise :class:`ExpandError` when a workload would expand into more than :data:`MAX_PODS` pods."""
    if total > MAX_PODS:
        raise ExpandError(f"{where}: {total} pods is more than the {MAX_PODS} this command expands; fix: fewer "
                          "replicas, or `segment-webhook capacity --shape` to count gangs of a shape")


def _precheck_pod_count(obj: Mapping[str, Any], kind: str) -> None:
    """Apply the :data:`MAX_PODS` cap to the manifest as written, before the webhook sees it, so an
    oversized workload is bad input (exit 2) at once whatever the webhook would say. Malformed
    counts are left to the full expansion (which names the field). The count is the kind
    description's (:attr:`webhook.admission.kinds.description.KindDescription.expected_pods`)."""
    expected = BY_KIND[kind].expected_pods(obj)
    if expected is not None:
        _check_pod_count(*expected)


def _controller_pods(obj: Mapping[str, Any], kind: str) -> list[tuple[int, dict[str, Any], str]]:
    """``(group, pod, template path)`` for each pod the kind's controller creates from ``obj``
    (:attr:`webhook.admission.kinds.description.KindDescription.controller_pods`)."""
    ns = obj["metadata"].get("namespace", "default")
    try:
        made = BY_KIND[kind].controller_pods(obj, _check_pod_count)
    except ShapeError as exc:
        raise ExpandError(str(exc)) from None
    return [(p.group, _pod(p.name, ns, p.template, p.labels, p.annotations), p.path) for p in made]


#: The characters kube-apiserver appends to ``metadata.generateName``
#: (k8s.io/apimachinery ``pkg/util/rand``: ``alphanums``, no vowels and no ``0``, ``1``, ``3``),
#: and how many (``names.SimpleNameGenerator``: ``randomLength = 5``); the prefix is cut to
#: ``63 - 5 = 58`` characters first (``maxGeneratedNameLength``).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
NAME_SUFFIX_LENGTH = 5
MAX_GENERATE_NAME = 63 - NAME_SUFFIX_LENGTH


def generated_name(kind: str, namespace: str, generate_name: str) -> str:
    """The name kube-apiserver would give an object created with ``metadata.generateName`` and no
    ``metadata.name``: the prefix (cut to :data:`MAX_GENERATE_NAME` characters) and
    :data:`NAME_SUFFIX_LENGTH` characters of :data:`NAME_ALPHABET`. kube-apiserver picks them at
    random; offline they are the SHA-256 of ``kind/namespace/generateName``, so every run (and
    every what-if change of one manifest) names the object alike: ``("Job", "default", "train-")``
    → ``train-`` followed by 5 such characters. Returns a ``str``."""
    digest = hashlib.sha256(f"{kind}/{namespace}/{generate_name}".encode()).digest()
    suffix = "".join(NAME_ALPHABET[b % len(NAME_ALPHABET)] for b in digest[:NAME_SUFFIX_LENGTH])
    return generate_name[:MAX_GENERATE_NAME] + suffix


def _workload_copy(workload: Mapping[str, Any]) -> tuple[dict[str, Any], str, str | None]:
    """A deep copy of ``workload`` (its namespace defaulted to ``default``), its kind, and the
    name made from ``metadata.generateName`` when ``metadata.name`` is empty
    (:func:`generated_name`; ``None`` when the object has a name). Raises :class:`ExpandError`
    when it is not an object, its kind is not one of :data:`SUPPORTED`, or it has neither
    ``metadata.name`` nor ``metadata.generateName`` (as kube-apiserver: "name or generateName is
    required")."""
    if not isinstance(workload, Mapping):
        raise ExpandError("the workload file must hold one Kubernetes object")
    kind = workload.get("kind")
    if kind not in SUPPORTED:
        near = closest(kind, SUPPORTED) if isinstance(kind, str) else None
        hint = f" (did you mean {near}?)" if near is not None else ""
        raise ExpandError(f"kind {quote(kind)} is not supported{hint}; use one of {', '.join(SUPPORTED)}")
    api_version = workload.get("apiVersion")
    group = SUPPORTED[kind][0]
    if isinstance(api_version, str) and api_version and api_version.rpartition("/")[0] != group:
        # the webhook is registered for the kind in its group only: another group's object never reaches it
        expected = f"{group}/{SUPPORTED[kind][1]}" if group else SUPPORTED[kind][1]
        raise ExpandError(f"apiVersion {quote(api_version)}: {kind} is handled in the API group "
                          f"{quote(group or 'core')} only (the webhook never sees another group's {kind}); "
                          f"fix: apiVersion: {expected}")
    meta = workload.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    name, generate = meta.get("name"), meta.get("generateName")
    made = None
    if not (isinstance(name, str) and name):
        if name not in (None, "") or not isinstance(generate, str) or not generate:
            shown = f"metadata.name = {quote(name)}" if name not in (None, "") else (
                f"metadata.generateName = {quote(generate)}" if generate is not None else "metadata.name")
            raise ExpandError(f"{shown}: an object needs a name (rule name-or-generate-name, as kube-apiserver: "
                              "\"name or generateName is required\"); fix: set metadata.name (e.g. train) or "
                              "metadata.generateName (e.g. train-) to a non-empty string")
    obj = copy.deepcopy(dict(workload))
    obj["metadata"] = dict(meta)
    obj["metadata"].setdefault("namespace", "default")
    if not (isinstance(name, str) and name):
        obj["metadata"].pop("name", None)
        made = generated_name(str(kind), str(obj["metadata"]["namespace"]), str(generate))
    return obj, kind, made


def _say_generated_name(exp: Expansion, kind: str, obj: Mapping[str, Any], made: str | None) -> None:
    """Record on ``exp`` the name ``made`` from ``obj``'s ``metadata.generateName``
    (:attr:`Expansion.generated_name`) and the note that says it (in :attr:`Expansion.notes` and
    :attr:`Expansion.name_note`); nothing when ``made`` is ``None`` (the object has a name)."""
    if made is None:
        return
    generate_name = str(obj["metadata"]["generateName"])
    exp.generated_name = made
    exp.note(kind, made, f"metadata.name made from metadata.generateName {quote(generate_name)} "
                         f"(kube-apiserver appends {NAME_SUFFIX_LENGTH} random characters; here they come from "
                         "a hash, the same on every run; set metadata.name to choose it)")
    exp.name_note = group_warnings(exp.notes[-1:])[0]


def expand(workload: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings,
           user: str = "kubectl-user", groups: list[str] | None = None,
           runtimes: Sequence[Mapping[str, Any]] = ()) -> Expansion:
    """Expand ``workload`` into pods, admit everything through the webhook, build gangs.

    ``workload``: an object of a kind of :data:`SUPPORTED` (dict). ``runtimes``: the
    ClusterTrainingRuntime / TrainingRuntime documents given with it; a TrainJob is expanded
    through the JobSet the Trainer builds from the runtime its ``spec.runtimeRef`` names
    (:func:`webhook.admission.kinds.trainingruntime.jobset_for`), which the webhook admits as the
    cluster's would, and that JobSet's pods (:attr:`Expansion.expanded_kind` is then ``JobSet``).
    ``user``/``groups``: the ``request.userInfo`` the webhook sees (platform identities get
    automatic placement, DESIGN.md §6). Returns an :class:`Expansion`; ``denied=True`` when the
    webhook denies. Raises :class:`ExpandError` for an unsupported kind, a malformed manifest,
    a TrainJob whose runtime is not among ``runtimes``, or a bad resource quantity (the message
    names the field).
    """
    groups = list(groups or [])
    obj, kind, made = _workload_copy(workload)
    _precheck_pod_count(obj, kind)
    runtime = None
    if kind == trainingruntime.TRAINJOB:
        try:
            runtime = trainingruntime.find_runtime(obj, runtimes)
        except ShapeError as exc:
            raise ExpandError(str(exc)) from None
    exp = Expansion(expanded_kind=kind)
    _say_generated_name(exp, kind, obj, made)  # the webhook sees it as kube-apiserver's mutating admission: no name yet
    patched = _admit(obj, kind, catalog, settings, user, groups, exp, made)
    if patched is None:
        return exp
    meta = patched["metadata"]
    meta.setdefault("name", made)  # a generateName object is named after admission, as by kube-apiserver
    exp.workload = patched
    owner_ann: Mapping[str, str] = {}  # a skipped top owner's annotations (TrainJob), read as KAI reads them
    if runtime is not None:  # the Trainer builds a JobSet, which the webhook admits; its pods are the JobSet's
        owner_ann = (patched.get("metadata") or {}).get("annotations") or {}
        _check_trainer_resources(patched)
        try:
            jobset = trainingruntime.jobset_for(patched, runtime)
        except ShapeError as exc:
            about_runtime = str(exc).startswith(trainingruntime.runtime_label(runtime) + ": ")
            raise ExpandError(str(exc), runtime if about_runtime else None) from None
        _precheck_pod_count(jobset, "JobSet")
        patched = _admit(jobset, "JobSet", catalog, settings, user, groups, exp)
        if patched is None:
            return exp
        exp.expanded_kind = kind = "JobSet"
    # name the runtime's field, not the JobSet's that exists in no file
    in_runtime = f"{trainingruntime.runtime_label(runtime)}: spec.template." if runtime is not None else ""
    try:
        pods = _controller_pods(patched, kind)
    except ExpandError as exc:
        raise ExpandError(in_runtime + str(exc), runtime) from None
    pods = [(g, pod, in_runtime + path) for g, pod, path in pods]
    root_ann = inherited_annotations((patched.get("metadata") or {}).get("annotations") or {}, owner_ann)
    by_group: dict[int, list[Mapping[str, Any]]] = {}
    templates: dict[str, str] = {}
    topo = root_ann.get(kai_scheduler.TOPOLOGY)
    for g, pod, template in pods:
        templates[pod["metadata"]["name"]] = template
        admitted = _admit(pod, "Pod", catalog, settings, user, groups, exp)
        if admitted is None:
            return exp
        exp.pods.append(admitted)
        ann = admitted["metadata"].get("annotations") or {}
        labels = admitted["metadata"].get("labels") or {}
        if labels.get(kai_scheduler.SEGMENT_INDEX) is not None and ann.get(kai_scheduler.TOPOLOGY):
            topo = ann.get(kai_scheduler.TOPOLOGY)
        topo = topo or ann.get(kai_scheduler.TOPOLOGY)
        by_group.setdefault(g, []).append(admitted)
    exp.topology = topo or settings.default_topology
    for g in sorted(by_group):
        name = f"{meta['name']}" + (f" group {g}" if BY_KIND[kind].per_group else "")
        try:
            exp.gangs.append(gang_from_pods(by_group[g], workload_annotations=root_ann, name=name, templates=templates))
        except ExpandError as exc:  # a TrainJob's pod templates are its runtime's
            raise ExpandError(str(exc), runtime) from None
    if BY_KIND[kind].one_podgroup:
        exp.gangs = one_podgroup(exp.gangs, str(meta["name"]))
    return exp


def one_podgroup(gangs: list[Gang], name: str) -> list[Gang]:
    """The gangs of one object that KAI groups as ONE PodGroup (JobSet, Ray:
    :attr:`~webhook.admission.kinds.description.KindDescription.one_podgroup`) as one gang, when a
    workload level is set and the groups agree on their segment levels, so the root's level holds
    across every group, as KAI d5bc503 enforces it on the PodGroup (DESIGN.md §4.5). Each pod's
    segment becomes ``(group position, index)``, so segments of different groups stay apart.
    Returns ``gangs`` unchanged otherwise (no workload level, one group, or groups whose segment
    levels differ, which one gang cannot say)."""
    if len(gangs) < 2 or not any(g.workload_required or g.workload_preferred for g in gangs):
        return gangs
    if len({(g.segment_required, g.segment_preferred) for g in gangs if any(p.segment for p in g.pods)}) > 1:
        return gangs
    pods = [dataclasses.replace(pod, segment=(k, pod.segment[1])) if pod.segment is not None else pod
            for k, gang in enumerate(gangs) for pod in gang.pods]
    segmented = next((g for g in gangs if any(p.segment for p in g.pods)), gangs[0])
    first = gangs[0]
    return [Gang(pods=pods, workload_required=first.workload_required, workload_preferred=first.workload_preferred,
                 segment_required=segmented.segment_required, segment_preferred=segmented.segment_preferred,
                 name=name)]


def inherited_annotations(own: Mapping[str, str], skipped_owner: Mapping[str, str]) -> dict[str, str]:
    """The annotations the workload-level keys of a gang are read from (DESIGN.md §4.5): the
    expanded object's ``own`` ``metadata.annotations``, each key it lacks taken from the
    ``skipped_owner``'s (a TrainJob above its JobSet; empty otherwise). This is how KAI d5bc503
    reads a TrainJob: its pod-grouper skips the TrainJob and groups the JobSet, copying down every
    TrainJob annotation the JobSet does not set (``pkg/podgrouper/podgrouper/plugins/skiptopowner/
    skiptopowner.go``, ``propagateMetadataDownChain``), so a TrainJob's root
    ``kai.scheduler/topology-required-placement`` is the PodGroup's. Returns a new dict."""
    out = dict(own)
    for key, value in skipped_owner.items():
        out.setdefault(key, value)
    return out


def _check_trainer_resources(trainjob: Mapping[str, Any]) -> None:
    """Raise :class:`ExpandError` naming ``spec.trainer.resourcesPerNode.<limits|requests>[<name>]``
    of the TrainJob when a value there is not a Kubernetes quantity. The Trainer merges it over the
    resources of the runtime's container ``node``, where the pod check would name the runtime's
    field (and file) for a value written in the TrainJob."""
    spec = trainjob.get("spec")
    trainer = spec.get("trainer") if isinstance(spec, Mapping) else None
    per_node = trainer.get("resourcesPerNode") if isinstance(trainer, Mapping) else None
    if per_node is None:
        return
    try:
        resource_requirements(per_node, "spec.trainer.resourcesPerNode")
    except QuantityError as exc:
        raise ExpandError(str(exc)) from None


def gang_from_pods(pods: Sequence[Mapping[str, Any]], *, workload_annotations: Mapping[str, str] | None = None,
                   name: str = "", templates: Mapping[str, str] | None = None) -> Gang:
    """The engine's input for one gang from its admitted Pod manifests (the pods the webhook
    stamped, DESIGN.md §7; the controller passes the gated pods of one gang).

    ``pods``: Pod objects (``metadata.name/namespace/labels/annotations``, ``spec``) of ONE gang
    (one PyTorchJob / native workload, or one LWS group). ``workload_annotations``: the
    workload root's annotations, for the workload-level keys
    ``kai.scheduler/topology-required-placement`` / ``-preferred-placement`` (pods do not carry
    them; when omitted they are read from the pods' own annotations if present). Segment keys
    come from the pods' annotations (the webhook writes them on every segmented pod's
    template). Each pod's segment is ``(LWS group index or 0, kai.scheduler/segment-index)``;
    its requests follow the scheduler's rule (:func:`pod_requests_milli`); its node selector,
    required node affinity and tolerations are kept per pod
    (:func:`webhook.placement.eligibility.pod_request`).

    ``templates``: pod name → the workload's template path it was made from
    (``spec.pytorchReplicaSpecs.Worker.template``), so an error names the field as written in
    the workload file (``spec.pytorchReplicaSpecs.Worker.template.spec.tolerations``), not only
    a pod that exists nowhere but in the expansion.

    Returns a :class:`Gang`. Raises :class:`ExpandError` naming the pod and field for a bad
    segment label, quantity, toleration list, nodeSelector or node affinity.
    """
    templates = templates or {}
    requests: list[PodRequest] = []
    seg_keys: dict[str, str] = {}
    wl_keys = dict(workload_annotations or {})
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
        seg = labels.get(kai_scheduler.SEGMENT_INDEX)
        segment = None
        if seg is not None:
            try:
                segment = (segment_group(labels), int(seg))
            except ValueError:
                raise ExpandError(f'Pod {meta.get("name")}: metadata.labels["{kai_scheduler.SEGMENT_INDEX}"] = {quote(seg)} '
                                  "is not a whole number") from None
            for k in (kai_scheduler.SEGMENT_REQUIRED, kai_scheduler.SEGMENT_PREFERRED):
                if ann.get(k) and not seg_keys.get(k):
                    seg_keys[k] = ann[k]
        if workload_annotations is None:
            for k in (kai_scheduler.TOPOLOGY_REQUIRED, kai_scheduler.TOPOLOGY_PREFERRED):
                if ann.get(k) and not wl_keys.get(k):
                    wl_keys[k] = ann[k]
        template = templates.get(str(meta.get("name")))
        spec_path = f"{template}.spec" if template else "spec"
        try:
            req = pod_requests_milli(pod.get("spec") or {}, spec_path)
        except QuantityError as exc:
            raise ExpandError(f"Pod {meta.get('name')}: {exc}") from None
        try:
            requests.append(pod_request(pod, req, segment, pod_role(labels), spec_path))
        except PlacementError as exc:
            raise ExpandError(str(exc)) from None
    return Gang(pods=requests,
                workload_required=wl_keys.get(kai_scheduler.TOPOLOGY_REQUIRED),
                workload_preferred=wl_keys.get(kai_scheduler.TOPOLOGY_PREFERRED),
                segment_required=seg_keys.get(kai_scheduler.SEGMENT_REQUIRED),
                segment_preferred=seg_keys.get(kai_scheduler.SEGMENT_PREFERRED),
                name=name)
