"""The typed Kubernetes boundary (webhook/kube/shapes.py; issue 38 item 3): objects written as the
shapes (mypy checks these literals' keys against them: a field renamed in shapes.py fails
``mypy``), read by the one reader of each kind; the narrowing of a file's object by its kind; and
the Lease's give-up, which reads and replaces the Lease as JSON through the one client."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from webhook.cluster.api_server import ApiServerReachability, JsonClient
from webhook.controller.election import LeaderElector
from webhook.controller.settings import ControllerSettings
from webhook.gating.reconcile import controller_owner
from webhook.kube.nodes import is_node, parse_node
from webhook.kube.pods import is_gated, is_pod, is_terminated, occupied_node, pod_ref
from webhook.kube.shapes import Lease, Node, Pod


def gated_pod() -> Pod:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "team-a", "name": "job-a-worker-0", "uid": "uid-w0",
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "job-a",
                                              "uid": "uid-job-a", "controller": True}]},
            "spec": {"schedulingGates": [{"name": "segments.dev/placement"}],
                     "nodeSelector": {"kubernetes.io/hostname": "n-1"},
                     "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def test_a_typed_pod_is_read_by_the_pod_readers():
    pod = gated_pod()
    assert pod_ref(pod) == ("team-a", "job-a-worker-0")
    assert is_gated(pod) and not is_terminated(pod)
    assert occupied_node(pod) is None  # gated: its nodeSelector is not a node held yet
    released: Pod = {**pod, "spec": {"nodeSelector": {"kubernetes.io/hostname": "n-1"}}}
    assert occupied_node(released) == "n-1"
    assert controller_owner(pod) == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "job-a",
                                     "uid": "uid-job-a", "controller": True}


def test_a_typed_node_is_parsed():
    node: Node = {"kind": "Node", "metadata": {"name": "n-1", "labels": {"kubernetes.io/hostname": "n-1"}},
                  "spec": {"unschedulable": True, "taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]},
                  "status": {"allocatable": {"cpu": "2", "nvidia.com/gpu": "4"},
                             "conditions": [{"type": "Ready", "status": "True"}]}}
    parsed = parse_node(node)
    assert (parsed.name, parsed.unschedulable, parsed.ready) == ("n-1", True, True)
    # milli-units; pods 110 when the node reports none (kubelet --max-pods default)
    assert parsed.allocatable == {"cpu": 2000, "nvidia.com/gpu": 4000, "pods": 110000}
    assert parsed.taints == (("gpu", "a100", "NoSchedule"),)


def test_a_files_object_is_a_pod_or_a_node_by_its_kind_only():
    assert is_pod({"kind": "Pod"}) and not is_pod({"kind": "Node"}) and not is_pod({"metadata": {"name": "p"}})
    assert is_node({"kind": "Node"}) and not is_node({"kind": "Pod"}) and not is_node({})


class Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def release_conn(self) -> None:
        pass


class Coordination:
    """``CoordinationV1Api``'s two methods of the give-up, answering from ``stored`` (a Lease as
    kube-apiserver holds it) or with ``refuse``."""

    def __init__(self, stored: Lease, refuse: ApiException | None = None) -> None:
        self.stored = stored
        self.refuse = refuse
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def read_namespaced_lease(self, *args: Any, **kwargs: Any) -> Body:
        import json
        self.calls.append(("read", args, kwargs))
        return Body(json.dumps(self.stored).encode())

    def replace_namespaced_lease(self, *args: Any, **kwargs: Any) -> Body:
        self.calls.append(("replace", args, kwargs))
        if self.refuse is not None:
            raise self.refuse
        return Body(b"{}")


def elector(stored: Lease, refuse: ApiException | None = None) -> tuple[LeaderElector, Coordination]:
    import threading

    configuration = k8s_client.Configuration()
    configuration.host = "https://127.0.0.1:1"
    client = JsonClient(k8s_client.ApiClient(configuration), ApiServerReachability(configuration.host))
    coordination = Coordination(stored, refuse)
    client.coordination = coordination  # type: ignore[assignment]  # the fake of the two calls
    settings = ControllerSettings(identity="c-1", lease_name="seg", lease_namespace="sys")
    out = LeaderElector(client, settings, threading.Event(), lambda: None, lambda: None)
    # the library's LeaseLock as it stands after a renewal: holding the Lease (model attributes)
    out._lease = SimpleNamespace(name="seg", namespace="sys",  # type: ignore[assignment]
                                 lease_reference=SimpleNamespace(spec=SimpleNamespace(holder_identity="c-1")))
    return out, coordination


def held_lease(holder: str) -> Lease:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "seg", "namespace": "sys", "resourceVersion": "42"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "renewTime": "2026-12-07T10:00:00.000000Z", "leaseTransitions": 3}}


def test_the_lease_is_given_up_as_read_without_its_holder(caplog):
    out, coordination = elector(held_lease("c-1"))
    with caplog.at_level(logging.INFO, logger="webhook.controller.election"):
        out.give_up_lease()
    [read, replace] = coordination.calls
    # 10 s to connect, LEASE_GIVE_UP_SECONDS (5 s) to read: the process is stopping
    assert read == ("read", ("seg", "sys"), {"_preload_content": False, "_request_timeout": (10.0, 5.0)})
    assert replace[1] == ("seg", "sys", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "seg", "namespace": "sys", "resourceVersion": "42"},  # the version just read
        "spec": {"leaseDurationSeconds": 15, "renewTime": "2026-12-07T10:00:00.000000Z", "leaseTransitions": 3}})
    assert replace[2] == {"_preload_content": False, "_request_timeout": (10.0, 5.0)}
    assert [r.getMessage() for r in caplog.records] == ["c-1 gave up Lease sys/seg"]


def test_a_lease_another_replica_took_meanwhile_is_left_alone():
    out, coordination = elector(held_lease("c-2"))
    out.give_up_lease()
    assert [name for name, _, _ in coordination.calls] == ["read"]


def test_a_refused_give_up_is_one_warning(caplog):
    out, _ = elector(held_lease("c-1"), ApiException(status=409, reason="Conflict"))
    with caplog.at_level(logging.INFO, logger="webhook.controller.election"):
        out.give_up_lease()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "could not give up Lease sys/seg: HTTP 409 Conflict")]
