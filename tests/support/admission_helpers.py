"""Workload builders and review shortcuts shared by the admission-core test modules (``tests/unit/admission/test_core_*.py``)."""

from __future__ import annotations

import jsonpatch

from tests.conftest import SIZE, load_example, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review

PLAIN = AdmissionSettings()
#: automatic mode with the seed's default topology (DESIGN.md §6)
AUTO = AdmissionSettings(default_topology="cluster-topology")
LWT = "spec.leaderWorkerTemplate"
#: the PyTorchJob Worker template's annotation map, as messages name it
W_ANN = "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations"


def run(obj, catalog, settings=PLAIN, operation="CREATE", old=None):
    """The webhook's Decision for ``obj`` (``operation``; ``old`` the stored object of an UPDATE)."""
    return review(make_request(obj, operation, old=old), catalog, settings)


def created(obj, catalog, settings=PLAIN):
    """``obj`` as stored after an allowed CREATE (the webhook's patch applied)."""
    decision = run(obj, catalog, settings)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(obj, decision.patch)


def tp4(replicas=16, size=None):
    """The seed's ``pytorchjob-tp4.yaml`` with ``replicas`` Workers and, when given, Worker
    annotation ``kai.scheduler/segment-size`` = ``size`` (the seed writes "4")."""
    obj = load_example("pytorchjob-tp4.yaml")
    worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = replicas
    if size is not None:
        worker["template"]["metadata"]["annotations"][SIZE] = size
    return obj


def lws(size=5, sub_size=None, worker_ann=None, root_ann=None, policy=None):
    """A LeaderWorkerSet as a user writes it (no leaderTemplate): group ``size``, optional
    ``subGroupPolicy`` (``sub_size``, ``policy``), worker template and root annotations."""
    lwt: dict = {"size": size, "workerTemplate": {"metadata": {"annotations": dict(worker_ann or {})},
                                                  "spec": {"containers": [{"name": "w", "image": "i"}]}}}
    if sub_size is not None:
        lwt["subGroupPolicy"] = {"subGroupSize": sub_size}
        if policy:
            lwt["subGroupPolicy"]["subGroupPolicyType"] = policy
    meta: dict = {"name": "l", "namespace": "default"}
    if root_ann is not None:
        meta["annotations"] = dict(root_ann)
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"leaderWorkerTemplate": lwt}}


def lws_example(size, sub_size=2, policy="LeaderWorker"):
    """The seed's ``lws-segmented.yaml`` with group ``size`` and ``subGroupPolicy`` (``sub_size``, ``policy``)."""
    obj = load_example("lws-segmented.yaml")
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = size
    lwt["subGroupPolicy"] = {"subGroupSize": sub_size, "subGroupPolicyType": policy}
    return obj
