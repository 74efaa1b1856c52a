"""Property: no reader drops what the user wrote (DESIGN.md §4.5), KAI's pod-grouper as its source reads it.

For random objects of every kind (PyTorchJob, LeaderWorkerSet, DistributedWorkload, MPIJob, JobSet,
RayCluster / RayJob, TrainJob) with placement keys at the places users put them (the root, the
worker template, a Ray head or worker-group template, a JobSet Job template), each object the
webhook admits is expanded into the pods its operator creates (admitted too, as ``place`` does) and
given to :mod:`kai_oracle` (written from KAI d5bc503's pod-grouper). Then every constraint the user
wrote is either in the oracle's PodGroup or named in a warning:

* a root workload level is the PodGroup's own, with a topology name (else the scheduler ignores it);
* a workload level on a template KAI reads (Ray group template, JobSet Job template) is that
  subgroup's constraint; on a template KAI does not read, a warning names the key;
* segment levels: each pod the webhook puts in a segment is in a KAI subgroup with those levels
  whose pods are exactly that segment's, or a warning names the segments as not enforced;
* KAI makes a PodGroup (no grouper error) and rejects no pod (no subgroup-name naming a subgroup
  the PodGroup lacks).

Denied objects satisfy the property by the denial (it names the field, value, rule and fix).
"""

from __future__ import annotations

import copy

import jsonpatch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, make_request
from tests.support import kai_oracle
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds import trainingruntime
from webhook.admission.review import review
from webhook.planning.expand import expand
from webhook.topology.objects import default_catalog

CATALOG = default_catalog()
PLAIN = AdmissionSettings()
ZONE, BLOCK, RACK, HOST = ("topology.kubernetes.io/zone", "cloud.provider.com/topology-block",
                           "cloud.provider.com/topology-rack", "kubernetes.io/hostname")
TOPO, REQ, PREF = kai_oracle.TOPOLOGY, kai_oracle.REQUIRED, kai_oracle.PREFERRED
SIZE, SEG_REQ, SEG_PREF = kai_oracle.SEGMENT_SIZE, kai_oracle.SEGMENT_REQUIRED, kai_oracle.SEGMENT_PREFERRED
INDEX = "kai.scheduler/segment-index"
RUNTIME = yaml.safe_load((REPO / "tests" / "data" / "manifests" / "clustertrainingruntime-torch.yaml").read_text())
KINDS = ["PyTorchJob", "LeaderWorkerSet", "DistributedWorkload", "MPIJob", "JobSet", "RayCluster", "RayJob",
         "TrainJob"]


def template(annotations: dict) -> dict:
    return {"metadata": {"annotations": dict(annotations)},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


@st.composite
def placement(draw) -> tuple[dict, dict, int | None]:
    """(root annotations, worker template annotations, segment size): a topology name at the root,
    the template, both or neither; root workload levels; a segment size and segment levels at the
    root or the template. Levels in the topology's order (preferred within required)."""
    root: dict = {}
    worker: dict = {}
    where = draw(st.sampled_from(["root", "template", "both", "none"]))
    if where in ("root", "both"):
        root[TOPO] = "cluster-topology"
    if where in ("template", "both"):
        worker[TOPO] = "cluster-topology"
    if draw(st.booleans()):
        root[REQ] = draw(st.sampled_from([ZONE, BLOCK]))
    if draw(st.booleans()):
        root[PREF] = draw(st.sampled_from([BLOCK, RACK]))
    size = draw(st.sampled_from([None, 2, 4]))
    if size is not None:
        seg = draw(st.sampled_from([root, worker, worker]))
        seg[SIZE] = str(size)
        levels = draw(st.sampled_from([root, worker, worker]))
        if draw(st.booleans()):
            levels[SEG_REQ] = RACK
        if draw(st.booleans()):
            levels[SEG_PREF] = HOST
    return root, worker, size


@st.composite
def reader_objects(draw) -> dict:
    """One object of a random kind, its placement keys by :func:`placement`, plus the places
    where KAI reads template levels (Ray head and worker templates, JobSet Job templates)."""
    kind = draw(st.sampled_from(KINDS))
    root, worker, size = draw(placement())
    n = draw(st.integers(max(size or 1, 1), 9)) if size else draw(st.integers(1, 6))
    meta = {"name": "w", "namespace": "team-a", "annotations": root}
    if kind == "PyTorchJob":
        specs = {"Worker": {"replicas": n, "template": template(worker)}}
        if draw(st.booleans()):
            specs["Master"] = {"replicas": 1, "template": template({})}
        return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": meta, "spec": {"pytorchReplicaSpecs": specs}}
    if kind == "LeaderWorkerSet":
        extra = draw(st.sampled_from([0, 1]))
        lwt = {"size": (size or 1) * draw(st.integers(1, 4)) + extra, "workerTemplate": template(worker)}
        if size is not None and draw(st.booleans()):  # LWS's own field, which KAI reads first (§3)
            lwt["subGroupPolicy"] = {"subGroupSize": draw(st.sampled_from([2, 4])),
                                     "subGroupPolicyType": draw(st.sampled_from(["LeaderWorker", "LeaderExcluded"]))}
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": kind, "metadata": meta,
                "spec": {"leaderWorkerTemplate": lwt}}
    if kind == "DistributedWorkload":
        spec = {"framework": "PyTorch", "workers": n, "worker": {"template": template(worker)}}
        if size is not None and draw(st.booleans()):
            spec["workersPerSegment"] = size
        if draw(st.booleans()):
            spec["master"] = {"template": template({})}
        return {"apiVersion": "segments.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "MPIJob":
        specs = {"Launcher": {"replicas": 1, "template": template({})},
                 "Worker": {"replicas": n, "template": template(worker)}}
        return {"apiVersion": "kubeflow.org/v2beta1", "kind": kind, "metadata": meta,
                "spec": {"mpiReplicaSpecs": specs, "runLauncherAsWorker": draw(st.booleans())}}
    if kind == "JobSet":
        parallelism = draw(st.sampled_from([1, 2, 4]))
        job_ann = draw(st.sampled_from([{}, {}, {REQ: RACK}, {PREF: HOST}, {TOPO: "cluster-topology", REQ: ZONE},
                                        {TOPO: "cluster-topology", PREF: RACK}]))
        rj = {"name": "workers", "replicas": max(1, -(-(size or 1) // parallelism)) + draw(st.integers(0, 2)),
              "template": {"metadata": {"annotations": dict(job_ann)},
                           "spec": {"parallelism": parallelism, "completions": parallelism,
                                    "template": template(worker)}}}
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": kind, "metadata": meta,
                "spec": {"replicatedJobs": [rj]}}
    if kind in ("RayCluster", "RayJob"):
        group_levels = draw(st.sampled_from([{}, {}, {REQ: BLOCK}, {PREF: RACK}]))
        head_ann = draw(st.sampled_from([{}, {}, {PREF: RACK}, {TOPO: "cluster-topology", REQ: ZONE}]))
        group = {"groupName": "gpu", "replicas": n, "numOfHosts": 1, "template": template({**worker, **group_levels})}
        cluster = {"headGroupSpec": {"template": template(head_ann)}, "workerGroupSpecs": [group]}
        spec = cluster if kind == "RayCluster" else {"rayClusterSpec": cluster}
        return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": meta, "spec": spec}
    # TrainJob: keys are read from its root (the webhook writes them into its runtimePatches entry)
    meta["annotations"] = {**root, **worker}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta,
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": n}}}


def _named(warnings: list[str], key: str, level: str) -> bool:
    """True when a warning names the workload-level ``key`` (in full: its short name is part of
    the segment key's) or says what a reader does with this ``level`` of that scope."""
    scope = "required" if key == REQ else "preferred"
    return any(key in w or f"workload {scope} level {level}" in w for w in warnings)


def _pod_groups(kind: str, pods: list[dict]) -> list[list[dict]]:
    """The pods of each PodGroup: one per LWS group, else all of them."""
    if kind != "LeaderWorkerSet":
        return [pods]
    by_group: dict[str, list[dict]] = {}
    for pod in pods:
        by_group.setdefault(pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"], []).append(pod)
    return list(by_group.values())


def _annotations(template_spec: dict) -> dict:
    return (template_spec.get("metadata") or {}).get("annotations") or {}


def _template_level_places(obj: dict) -> list[tuple[str, dict, str]]:
    """Templates carrying user workload levels: ``(kind of place, annotations, subgroup)`` where
    the subgroup is KAI's for that template (``""`` when KAI does not read that template)."""
    kind, spec = obj["kind"], obj["spec"]
    out: list[tuple[str, dict, str]] = []
    if kind in ("RayCluster", "RayJob"):
        cluster = spec if kind == "RayCluster" else spec["rayClusterSpec"]
        out.append(("ray", _annotations(cluster["headGroupSpec"]["template"]), "headgroup"))
        for group in cluster["workerGroupSpecs"]:
            out.append(("ray", _annotations(group["template"]), group["groupName"]))
    elif kind == "JobSet":
        for rj in spec["replicatedJobs"]:
            out.append(("job", _annotations(rj["template"]), f"{rj['name']}-replica-0"))
            out.append(("pod", _annotations(rj["template"]["spec"]["template"]), ""))
    elif kind == "PyTorchJob":
        out.append(("pod", _annotations(spec["pytorchReplicaSpecs"]["Worker"]["template"]), ""))
    elif kind == "MPIJob":
        out.append(("pod", _annotations(spec["mpiReplicaSpecs"]["Worker"]["template"]), ""))
    elif kind == "LeaderWorkerSet":
        out.append(("pod", spec["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"], ""))
    elif kind == "DistributedWorkload":
        out.append(("pod", _annotations(spec["worker"]["template"]), ""))
    return [place for place in out if REQ in place[1] or PREF in place[1]]


def lost_constraints(obj: dict) -> list[str]:
    """What the user wrote on ``obj`` that no reader honours and no warning names (empty: the
    property holds). A denied object loses nothing: its denial names it."""
    decision = review(make_request(obj), CATALOG, PLAIN)
    if not decision.allowed:
        return []
    exp = expand(copy.deepcopy(obj), CATALOG, PLAIN, runtimes=[RUNTIME])
    assert not exp.denied, exp.message
    warnings = list(decision.warnings) + [text for _, _, text in exp.notes]
    admitted = exp.workload
    assert admitted is not None  # an admitted workload is expanded
    jobset = None
    if obj["kind"] == "TrainJob":
        built = trainingruntime.jobset_for(admitted, RUNTIME)
        answer = review(make_request(built), CATALOG, PLAIN)
        jobset = jsonpatch.apply_patch(built, answer.patch) if answer.patch else built
    lost: list[str] = []
    root = obj["metadata"].get("annotations") or {}
    for pods in _pod_groups(obj["kind"], exp.pods):
        group = kai_oracle.derive(admitted, pods, jobset=jobset)
        if group.error is not None:
            lost.append(f"KAI's pod-grouper errors on every pod: {group.error}")
            continue
        lost += [f"pod {pod}: {why}" for pod, why in group.rejected.items()]
        for key, attr in ((REQ, "required"), (PREF, "preferred")):
            if key in root and not (group.constraint.effective and getattr(group.constraint, attr) == root[key]) \
                    and not _named(warnings, key, root[key]):
                lost.append(f"root {key}={root[key]} is not the PodGroup's ({group.constraint})")
        for place, ann, subgroup in _template_level_places(obj):
            for key, attr in ((REQ, "required"), (PREF, "preferred")):
                if key not in ann:
                    continue
                sub = group.subgroups.get(subgroup) if subgroup else None
                honoured = sub is not None and sub.constraint is not None and sub.constraint.effective \
                    and getattr(sub.constraint, attr) == ann[key]
                if not honoured and not _named(warnings, key, ann[key]):
                    lost.append(f"{place} template {key}={ann[key]} is in no subgroup of KAI's and named by no warning")
        lost += _lost_segments(pods, group, warnings)
    return lost


def _lost_segments(pods: list[dict], group: kai_oracle.PodGroup, warnings: list[str]) -> list[str]:
    """Segment levels the webhook stamped on pods that KAI does not enforce on exactly that
    segment's pods, when no warning names the segments as not enforced."""
    segments: dict[str, set[str]] = {}
    for pod in pods:
        index = (pod["metadata"].get("labels") or {}).get(INDEX)
        ann = pod["metadata"].get("annotations") or {}
        if index is not None and (ann.get(SEG_REQ) or ann.get(SEG_PREF)):
            segments.setdefault(index, set()).add(pod["metadata"]["name"])
    if not segments or any("not enforce" in w for w in warnings):
        return []
    lost = []
    for pod in pods:
        name, ann = pod["metadata"]["name"], pod["metadata"].get("annotations") or {}
        index = (pod["metadata"].get("labels") or {}).get(INDEX)
        if index not in segments:
            continue
        wanted = (ann.get(SEG_REQ, ""), ann.get(SEG_PREF, ""))
        carriers = [c for c in group.constraints_of(name) if (c.required, c.preferred) == wanted]
        holder = group.subgroup_of.get(name)
        while holder in group.subgroups and group.subgroups[holder].constraint not in carriers:
            holder = group.subgroups[holder].parent
        if not carriers or holder not in group.subgroups or group.members(holder) != segments[index]:
            lost.append(f"pod {name}: segment {index} levels {wanted} are not one KAI subgroup's")
    return lost


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reader_objects())
def test_every_constraint_is_in_kais_podgroup_or_named(obj):
    assert lost_constraints(obj) == []
