"""KWOK nodes that run pods on the local control plane (marker ``cluster``; issue 36 part 1,
DESIGN.md §11): ``up --with kwok`` (no webhook), two ``gen-cluster`` nodes registered by
``hack/kwok.py``; KWOK v0.8.0 (``sigs.k8s.io/kwok``) makes them Ready with its node-initialize
Stage (reason ``KubeletReady``, ``kubeletVersion`` ``kwok-0.8.0``: pkg/utils/gotpl/funcs.go and
kustomize/stage/node/fast of v0.8.0), a Node without its annotation is left alone, a pod bound to a
KWOK node is Running and then Succeeded the annotated 4 s later, and a pod without the annotation
keeps running."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
import time
from pathlib import Path

import pytest

from tests.support.cluster_support import local_cluster

kwok = local_cluster._kwok()  # hack/kwok.py

pytestmark = pytest.mark.cluster

DELAY_SECONDS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.environ.get("CI") != "true" and not (local_cluster.built() and local_cluster.upstream_binary("kwok").is_file()):
        pytest.skip("kwok: binaries not built (hack/local-cluster.sh build)")
    directory = tmp_path_factory.mktemp("kwok")
    try:
        running = local_cluster.up(directory / "cluster", webhook=False, gate_pods=False, upstream=("kwok",))
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane with KWOK did not start: {error}", pytrace=False)
    try:
        yield running
    finally:
        running.stop_all()


def pod_phases(cluster: local_cluster.LocalCluster, name: str, seen: dict[str, float], stop: threading.Event) -> None:
    """Watch pod ``name`` in default; ``seen[phase]`` = the monotonic time a phase was first seen."""
    context = ssl.create_default_context(cafile=str(cluster.dir / "pki" / "ca.crt"))
    connection = http.client.HTTPSConnection("127.0.0.1", cluster.state["ports"]["kube-apiserver"], context=context,
                                             timeout=60)
    connection.request("GET", f"/api/v1/namespaces/default/pods?watch=1&fieldSelector=metadata.name%3D{name}",
                       headers={"Authorization": f"Bearer {cluster.state['admin_token']}"})
    response = connection.getresponse()
    while not stop.is_set():
        line = response.readline()
        if not line:
            return
        phase = (json.loads(line)["object"].get("status") or {}).get("phase")
        if phase:
            seen.setdefault(phase, time.monotonic())


def bound_pod(name: str, node: str, delay: str | None) -> dict:
    annotations = {kwok.DELAY_ANNOTATION: delay} if delay else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "w", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def test_kwok_nodes_are_ready_and_run_a_pod_for_its_annotated_duration(cluster, tmp_path: Path):
    dump = tmp_path / "nodes.yaml"
    cluster.segment_webhook("gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "1", "--nodes", "2",
                            "--fill", "0", "-o", str(dump))
    assert kwok.register_nodes(cluster, dump) == 2
    api = local_cluster.ApiClient(cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"])
    api.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "not-kwok"}})

    for name in ("node-0-0-0-0", "node-0-0-0-1"):
        node = api.request("GET", f"/api/v1/nodes/{name}")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"], ready["message"]) == ("True", "KubeletReady",
                                                                          "kubelet is posting ready status")
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert node["metadata"]["labels"]["type"] == "kwok"
        assert node["metadata"]["labels"]["cloud.provider.com/topology-rack"] == "rack-0-0-0"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["status"]["nodeInfo"]["kubeletVersion"] == "kwok-0.8.0"
        assert not node["spec"].get("taints")  # the not-ready taint lifted by the node lifecycle controller
        lease = api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
        # KWOK holds every node's Lease under its own identity, for the duration hack/kwok.py gives it
        assert lease["spec"]["leaseDurationSeconds"] == 1200 and lease["spec"]["renewTime"]
        assert lease["metadata"]["ownerReferences"][0]["name"] == name

    seen: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=pod_phases, args=(cluster, "finishes", seen, stop), daemon=True)
    watcher.start()
    time.sleep(1)
    api.request("POST", "/api/v1/namespaces/default/pods", bound_pod("finishes", "node-0-0-0-0", f"{DELAY_SECONDS}s"))
    api.request("POST", "/api/v1/namespaces/default/pods", bound_pod("keeps-running", "node-0-0-0-1", None))
    deadline = time.monotonic() + 60
    while "Succeeded" not in seen and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    assert "Running" in seen and "Succeeded" in seen, seen
    ran = seen["Succeeded"] - seen["Running"]
    print(f"\nkwok: Running -> Succeeded in {ran:.2f} s (annotation {DELAY_SECONDS}s)")
    # KWOK counts the delay from when it saw the pod Running, which is after the watch here saw it
    assert DELAY_SECONDS - 0.5 <= ran <= DELAY_SECONDS + 5
    finished = api.request("GET", "/api/v1/namespaces/default/pods/finishes")
    assert finished["status"]["phase"] == "Succeeded"
    terminated = finished["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")

    running = api.request("GET", "/api/v1/namespaces/default/pods/keeps-running")
    assert running["status"]["phase"] == "Running"
    assert [c["status"] for c in running["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    assert running["status"]["podIP"].startswith("10.")
    plain = api.request("GET", "/api/v1/nodes/not-kwok")
    assert not any(c.get("type") == "Ready" for c in (plain.get("status") or {}).get("conditions") or [])
