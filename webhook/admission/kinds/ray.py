"""RayCluster, RayJob and RayService (``ray.io/v1``, KubeRay) admission and descriptions (DESIGN.md §3b).

The cluster spec is the RayCluster's ``spec``, a RayJob's ``spec.rayClusterSpec`` or a RayService's
``spec.rayClusterConfig``. Each worker group is segmented on its own (a unit of
:class:`~webhook.admission.kinds._workload.Plan`): ``N = replicas × numOfHosts`` pods (CRD defaults:
``replicas`` 0, ``numOfHosts`` 1), keys read from ``workerGroupSpecs[k].template.metadata.annotations``
(root inherited). KubeRay creates and deletes a multi-host replica whole, so a segment must never split
one: ``S % numOfHosts != 0`` is denied (rule ``ray-segment-splits-replica``). The webhook writes the
group's ``numOfHosts`` on the pod template (``segments.dev/num-of-hosts``), since no pod carries it.

Pods (KubeRay ``ray-operator/controllers/ray/common/pod.go`` ``DefaultWorkerPodTemplate``, ``labelPod``):
``ray.io/cluster``, ``ray.io/node-type: head|worker``, ``ray.io/group``; with ``RayMultiHostIndexing``
(KubeRay >= 1.6, on by default) ``ray.io/worker-group-replica-index`` and, for ``numOfHosts > 1``,
``ray.io/replica-host-index`` and ``ray.io/worker-group-replica-name``. Index
``replica-index × numOfHosts + host-index``. A worker pod without the index labels (older KubeRay)
gets no segment label and the ``pod-without-index`` warning, never a denial; under ``--gate-pods`` the
controller forms its segments at placement time. KAI's pod-grouper groups Ray pods by worker group
and overwrites ``subgroup-name``, so the webhook never writes it, and KAI does not enforce these
segments (``kai-does-not-enforce``). Gang (§9): one worker group, ``<namespace>/<cluster>/<group>``;
with a workload level on the root, every worker group, ``<namespace>/<cluster>/*`` (KAI makes one
PodGroup of the cluster, §4.5); the head is not gated. Automatic placement (§6) never applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from webhook.admission.config import AdmissionSettings
from webhook.admission.constraints import resolve
from webhook.admission.kinds._workload import (
    CREATE,
    Analyse,
    UpdateContext,
    review_workload,
    warn_ignored_segment_keys,
)
from webhook.admission.kinds.description import (
    ControllerPod,
    KindDescription,
    PodCap,
    PodRules,
    ShapeError,
    lenient_count,
    name_and_namespace,
    pod_int,
    pod_template,
    replicas,
    shown,
)
from webhook.admission.reading import AnnotationMap, get_int, get_mapping, read_annotations
from webhook.admission.resolution import Resolution, SegmentInputs, SegmentSize
from webhook.admission.rules import (
    check_level_in_topology,
    check_level_syntax,
    check_ray_whole_replicas,
    check_template_level_has_topology,
    malformed,
)
from webhook.admission.types import AdmissionHandler
from webhook.admission.verdict import Decision
from webhook.admission.warning_rules import say, text
from webhook.admission.workload_plan import Plan
from webhook.kube import kai_scheduler, ray_io
from webhook.kube.segments_dev import NUM_OF_HOSTS
from webhook.text.messages import UNSET
from webhook.topology.objects import TopologyCatalog

GROUP = "ray.io"
VERSION = "v1"
GROUPS = "workerGroupSpecs"
#: kind → the spec field that holds the RayCluster spec (``()`` for a RayCluster)
CLUSTER_SPEC = {"RayCluster": (), "RayJob": ("rayClusterSpec",), "RayService": ("rayClusterConfig",)}


def _field(parts: tuple[str, ...]) -> str:
    return ".".join(("spec",) + parts)


def _unit(kind: str, root: AnnotationMap, group: Any, k: int, prefix: tuple[str, ...], catalog: TopologyCatalog,
          settings: AdmissionSettings, decision: Decision, update: UpdateContext,
          autoscaled: bool = False) -> tuple[str, Plan] | None:
    """Read, resolve and validate worker group ``k``; ``None`` when malformed (400 recorded).
    ``autoscaled``: the cluster's ``enableInTreeAutoscaling`` is true, so the group may scale between
    its ``minReplicas`` and ``maxReplicas`` (:attr:`Plan.elastic`)."""
    field = f"{_field(prefix + (GROUPS,))}[{k}]"
    if not isinstance(group, (dict, Mapping)):
        malformed(decision, field, group, "a WorkerGroupSpec object")
        return None
    name = group.get("groupName")
    if not isinstance(name, str) or not name:
        malformed(decision, f"{field}.groupName", UNSET if name is None else name, "the worker group's name (a string)")
        return None
    count = get_int(group, "replicas", field, decision, default=0)
    hosts = get_int(group, "numOfHosts", field, decision, default=1, minimum=1)
    template = get_mapping(group, "template", field, decision, required=True)
    if template is None:
        return None
    worker = read_annotations(template, f"{field}.template", ("spec",) + prefix + (GROUPS, str(k), "template"), decision)
    if worker is None:
        return None
    pods = count * hosts if isinstance(count, int) and isinstance(hosts, int) else None
    whole_replicas = None
    if isinstance(hosts, int):
        def whole_replicas(size: SegmentSize, decision: Decision) -> bool:
            if size.valid is None:  # never: resolve asks a size rule only about a valid size
                return True
            return check_ray_whole_replicas(decision, size.valid, size.field, size.raw, hosts, f"{field}.numOfHosts")
    inputs = SegmentInputs(kind=kind, root=root, worker=worker, pods=pods, pods_field=f"{field}.replicas × numOfHosts",
                           pods_noun=f"pods of worker group {name}", running_size=update.running_size(name),
                           extra_worker_keys={NUM_OF_HOSTS: str(hosts)} if isinstance(hosts, int) else {},
                           size_rule=whole_replicas, template_levels_read=True, groups="worker groups")
    res = resolve(inputs, catalog, settings, decision)
    written = res.worker_keys().get(kai_scheduler.TOPOLOGY)
    check_template_levels(worker, worker.values.get(kai_scheduler.TOPOLOGY, written), f"worker group {name}", catalog,
                          decision)
    if res.segmented and isinstance(hosts, int):
        say(decision, "kai-does-not-enforce", kind=kind, why="groups Ray pods by worker group")
    elastic = None
    low, high = group.get("minReplicas"), group.get("maxReplicas")
    if autoscaled and type(low) is int and type(high) is int and isinstance(hosts, int) and 0 <= low < high:
        elastic = (f"worker group {name}", low * hosts, high * hosts)  # pods: replicas × numOfHosts
    return name, Plan(resolution=res, root=root, worker=worker, gang_size=pods, elastic=elastic)


def check_template_levels(template: AnnotationMap, topology_name: str | None, group: str, catalog: TopologyCatalog,
                          decision: Decision) -> None:
    """DESIGN.md §4.5, the workload-level keys on a Ray group template (``template``; ``group``:
    ``head`` or ``worker group <name>``): KAI d5bc503 (``pkg/podgrouper/podgrouper/plugins/ray/
    ray_grouper.go``, ``getTemplateTopologyConstraints``) makes them the constraint of that group's
    subgroup, with the topology name of that same template (``topology_name``: as the admitted
    object has it, the webhook's own copy included, or ``None``), and errors on every pod of the
    cluster when the template has a level but no topology name. No name: denied
    (``template-level-without-topology``); else the level is checked against that topology and
    the ``kai-template-level-whole-group`` warning says what KAI does with it."""
    levels = [(key, template.get(key)) for key in kai_scheduler.WORKLOAD_PLACEMENT_KEYS if key in template.values]
    if not levels:
        return
    topology = catalog.get(topology_name) if topology_name is not None else None
    for key, level in levels:
        if level is None:
            continue
        if not check_template_level_has_topology(
                decision, level.field, level.value, topology_name is not None, template.field,
                "KAI's Ray grouper errors on every pod of the cluster and makes no PodGroup"):
            continue
        if not check_level_syntax(decision, level.field, level.value, topology):
            continue
        if topology is not None and not check_level_in_topology(decision, level.field, level.value, topology):
            continue
        scope = "required" if key == kai_scheduler.TOPOLOGY_REQUIRED else "preferred"
        say(decision, "kai-template-level-whole-group", scope=scope, level=level.value, group=group)


def _head(cluster: Mapping[str, Any], prefix: tuple[str, ...], catalog: TopologyCatalog,
          decision: Decision) -> AnnotationMap | Literal[False] | None:
    """The head template's annotation map (read for the opt-in and misspelled-key rules; never
    segmented: segment keys there get a warning and are left alone), ``None`` without a head
    template, ``False`` when malformed (400 recorded)."""
    where = _field(prefix + ("headGroupSpec",))
    head = get_mapping(cluster, "headGroupSpec", _field(prefix), decision)
    template = get_mapping(head, "template", where, decision) if head is not None else None
    if template is None:
        return False if not decision.allowed else None
    amap = read_annotations(template, f"{where}.template", ("spec",) + prefix + ("headGroupSpec", "template"), decision)
    if amap is None:
        return False
    warn_ignored_segment_keys(amap, "the head template", decision)
    check_template_levels(amap, amap.values.get(kai_scheduler.TOPOLOGY), "head", catalog, decision)
    return amap


def _analyser(kind: str) -> Analyse:
    prefix = CLUSTER_SPEC[kind]

    def analyse(obj: Mapping[str, Any], request: Mapping[str, Any], catalog: TopologyCatalog,
                settings: AdmissionSettings, decision: Decision, *, update: UpdateContext = CREATE) -> Plan | None:
        """Read, resolve and validate one object of this Ray kind: one unit per worker group (none
        for a RayJob without ``rayClusterSpec``, which runs on an existing cluster). ``None`` when
        too malformed to resolve (400 recorded); automatic placement never applies (§6)."""
        root = read_annotations(obj, "", (), decision)
        spec = get_mapping(obj, "spec", "", decision, required=True)
        if root is None or spec is None:
            return None
        cluster, where = spec, "spec"
        for part in prefix:
            inner = get_mapping(cluster, part, where, decision)
            where = f"{where}.{part}"
            if inner is None:
                return Plan(resolution=Resolution(), root=root, worker=None) if decision.allowed else None
            cluster = inner
        groups = cluster.get(GROUPS)
        if groups is None:
            groups = []
        if not isinstance(groups, list):
            malformed(decision, _field(prefix + (GROUPS,)), groups, "a list of WorkerGroupSpec objects")
            return None
        head = _head(cluster, prefix, catalog, decision)
        if head is False:
            return None
        units = []
        for k, group in enumerate(groups):
            unit = _unit(kind, root, group, k, prefix, catalog, settings, decision, update,
                         autoscaled=cluster.get("enableInTreeAutoscaling") is True)
            if unit is None:
                return None
            units.append(unit)
        return Plan(resolution=Resolution(), root=root, worker=None, units=units, templates=[head] if head else [],
                    one_podgroup=True, ungated="the Ray head" if head else None)

    return analyse


def _reviewer(kind: str) -> AdmissionHandler:
    analyse = _analyser(kind)

    def review(request: Mapping[str, Any], catalog: TopologyCatalog, settings: AdmissionSettings, *,
               mutate: bool = True) -> Decision:
        """Admit an AdmissionReview ``request`` of this Ray kind (CREATE/UPDATE; others allowed
        unchanged): the resolved keys and ``segments.dev/num-of-hosts`` on each segmented worker
        group's template, never ``subgroup-name`` (DESIGN.md §3b)."""
        return review_workload(kind, analyse, request, catalog, settings, mutate=mutate)

    return review


# ----------------------------------------------------------------------------- the description
class RayPods(PodRules):
    """Pods of a Ray cluster: workers indexed ``replica-index × numOfHosts + host-index`` (the
    webhook's ``segments.dev/num-of-hosts`` annotation; host index 0 when ``numOfHosts`` is 1),
    segment ``index // S``, no ``subgroup-name``. Gang: one worker group; the head is in none."""

    name = "kuberay"
    gang_label_text = f"{ray_io.RAY_CLUSTER} + {ray_io.RAY_GROUP}"

    def owns(self, labels: Mapping[str, str]) -> bool:
        """A pod labelled ``ray.io/group`` or ``ray.io/cluster``."""
        return ray_io.RAY_GROUP in labels or ray_io.RAY_CLUSTER in labels

    def segment(self, labels: Mapping[str, str], annotations: Mapping[str, str], size: int) -> tuple[dict[str, str], list[str]]:
        """Segment of a worker; a worker without index labels gets the ``pod-without-index`` warning."""
        if labels.get(ray_io.RAY_NODE_TYPE) == "head":
            return {}, []
        raw_h = annotations.get(NUM_OF_HOSTS)
        hosts = pod_int(raw_h)
        if hosts is None or hosts < 1:
            return {}, [text("pod-annotation-unreadable", annotation=NUM_OF_HOSTS, shown=shown(raw_h),
                             expected="missing or not an int32 >= 1")]
        raw_r = labels.get(ray_io.RAY_REPLICA_INDEX)
        if raw_r is None:
            return {}, [text("pod-without-index", label=ray_io.RAY_REPLICA_INDEX)]
        replica = pod_int(raw_r)
        if replica is None:
            return {}, [text("pod-label-unreadable", label=ray_io.RAY_REPLICA_INDEX, shown=shown(raw_r), expected="not an int32")]
        host = 0
        if hosts > 1:
            raw_host = labels.get(ray_io.RAY_HOST_INDEX)
            read_host = pod_int(raw_host)
            if read_host is None or read_host >= hosts:
                return {}, [text("pod-label-unreadable", label=ray_io.RAY_HOST_INDEX, shown=shown(raw_host),
                                 expected=f"missing or not below numOfHosts {hosts}")]
            host = read_host
        return {kai_scheduler.SEGMENT_INDEX: str((replica * hosts + host) // size)}, []

    def claims_gang(self, labels: Mapping[str, str]) -> bool:
        """A non-empty ``ray.io/cluster``."""
        return bool(labels.get(ray_io.RAY_CLUSTER))

    def gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<cluster>/<group>`` of a worker; ``None`` for the head (never gated)."""
        group = labels.get(ray_io.RAY_GROUP)
        if labels.get(ray_io.RAY_NODE_TYPE) == "head" or not group:
            return None
        return f"{namespace}/{labels[ray_io.RAY_CLUSTER]}/{group}"

    def workload_gang_key(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """``<namespace>/<cluster>/*`` of a worker: every worker group in one gang (DESIGN.md §4.5,
        §9); ``None`` for the head (never gated)."""
        if labels.get(ray_io.RAY_NODE_TYPE) == "head" or not labels.get(ray_io.RAY_GROUP):
            return None
        return f"{namespace}/{labels[ray_io.RAY_CLUSTER]}/*"

    def role(self, labels: Mapping[str, str]) -> str | None:
        """``head`` or the worker group's name."""
        return "head" if labels.get(ray_io.RAY_NODE_TYPE) == "head" else labels.get(ray_io.RAY_GROUP) or None

    def replica(self, labels: Mapping[str, str]) -> str | None:
        """The multi-host replica a worker belongs to (``ray.io/worker-group-replica-name``), which
        the controller keeps whole when it forms segments of pods without an index; ``None`` for a
        single-host worker (each pod is its own replica)."""
        return labels.get(ray_io.RAY_REPLICA_NAME) or None


RAY_PODS = RayPods()


def _expected(kind: str) -> Callable[[Mapping[str, Any]], tuple[int, str] | None]:
    prefix = CLUSTER_SPEC[kind]

    def expected_pods(obj: Mapping[str, Any]) -> tuple[int, str] | None:
        """The head + Σ replicas × numOfHosts as written, for ``place``'s cap."""
        cluster: Any = obj.get("spec")
        for part in prefix:
            cluster = cluster.get(part) if isinstance(cluster, Mapping) else None
        groups = cluster.get(GROUPS) if isinstance(cluster, Mapping) else None
        if not isinstance(groups, list):
            return None
        total = 1
        for group in groups:
            if isinstance(group, Mapping):
                total += lenient_count(group.get("replicas"), 0) * lenient_count(group.get("numOfHosts"))
        return total, f"1 head + Σ {_field(prefix + (GROUPS,))}[*].replicas × numOfHosts"

    return expected_pods


def _controller(kind: str) -> Callable[[Mapping[str, Any], PodCap], list[ControllerPod]]:
    prefix = CLUSTER_SPEC[kind]

    def controller_pods(obj: Mapping[str, Any], cap: PodCap) -> list[ControllerPod]:
        """The pods KubeRay creates for the cluster (named after the object here: a RayJob's or
        RayService's cluster gets a generated name, and pods a random suffix): per worker group ``k``
        (gang ``k``) and replica ``r``, ``numOfHosts`` workers ``<cluster>-<group>-worker-<r>-<h>``
        labelled ``ray.io/cluster``, ``node-type: worker``, ``group``, the replica index and, for
        multi-host groups, the host index and replica name (``RayMultiHostIndexing``). The head is
        not placed with a group's gang. Raises :class:`ShapeError` naming the field."""
        name, _ = name_and_namespace(obj)
        cluster: Any = obj.get("spec") or {}
        for part in prefix:
            cluster = cluster.get(part) if isinstance(cluster, Mapping) else None
        where = _field(prefix + (GROUPS,))
        groups = cluster.get(GROUPS) if isinstance(cluster, Mapping) else None
        if not isinstance(groups, list):
            raise ShapeError(f"{where}: missing or not a list")
        out = []
        for k, group in enumerate(groups):
            field = f"{where}[{k}]"
            if not isinstance(group, Mapping) or not isinstance(group.get("groupName"), str):
                raise ShapeError(f"{field}: expected a WorkerGroupSpec object with a groupName")
            count = replicas(group.get("replicas"), f"{field}.replicas", 0)
            hosts = replicas(group.get("numOfHosts"), f"{field}.numOfHosts", 1)
            cap(count * hosts, f"{field}.replicas × numOfHosts")
            path = f"{field}.template"
            tmpl = pod_template(group.get("template"), path)
            gname = group["groupName"]
            for r in range(count):
                for h in range(hosts):
                    labels = {ray_io.RAY_CLUSTER: name, ray_io.RAY_NODE_TYPE: "worker", ray_io.RAY_GROUP: gname,
                              ray_io.RAY_REPLICA_INDEX: str(r)}
                    if hosts > 1:
                        labels[ray_io.RAY_HOST_INDEX] = str(h)
                        labels[ray_io.RAY_REPLICA_NAME] = f"{gname}-{r}"
                    out.append(ControllerPod(k, f"{name}-{gname}-worker-{r}-{h}", tmpl, path, labels, {}))
            cap(len(out), f"Σ {where}[*].replicas × numOfHosts")
        return out

    return controller_pods


def _description(kind: str, resource: str) -> KindDescription:
    return KindDescription(
        group=GROUP, version=VERSION, kind=kind, resource=resource, review=_reviewer(kind),
        expected_pods=_expected(kind), controller_pods=_controller(kind), pods=RAY_PODS, per_group=True, one_podgroup=True,
        kai="one PodGroup per cluster, one subgroup per worker group (KAI d5bc503 ray grouper): segments not enforced; "
            "a template's workload level is its group's constraint",
    )


RAYCLUSTER = _description("RayCluster", "rayclusters")
RAYJOB = _description("RayJob", "rayjobs")
RAYSERVICE = _description("RayService", "rayservices")
