"""A gang's state where the user looks (DESIGN.md §9, last bullet), on the real control plane
(marker ``cluster``): ``hack/local-cluster.sh up DIR --webhook --gate-pods --controller`` (the
controller under deploy/'s ServiceAccount and RBAC), the PyTorchJob CRD from ../shared/crds (no
training operator runs: the pods are made by hand as it makes them, owned by their stored
PyTorchJob, tests/cluster/test_cluster_consumers.py), 4 nodes of 8 GPUs in one rack.

``kubectl describe pytorchjob`` shows one Event line naming the reason for each of: a gang missing
a pod (the pod named), a gang that can never fit, a gang waiting for capacity; the same line is on
the PyTorchJob's ``segments.dev/gang-state`` annotation; no pod gets an Event from the controller.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cluster.test_cluster_consumers import create, gpu_job, operator_pods, pods_of, wait_for
from tests.support.cluster_support import Kubectl, gated_plane

pytestmark = pytest.mark.cluster

#: 1 zone, 1 block, 1 rack of 4 nodes, 8 GPUs each (gen-cluster's default): 32 GPUs
LAYOUT = ("--zones", "1", "--blocks", "1", "--racks", "1", "--nodes", "4", "--fill", "0")
NAMESPACE = "gang-state"
COMPONENT = "segment-webhook-controller"


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    with gated_plane(tmp_path_factory.mktemp("gang-state"), "gang state", LAYOUT, NAMESPACE, 4) as (cluster, kubectl):
        yield kubectl


def describe_events(kube: Kubectl, name: str) -> tuple[str, list[str]]:
    """``kubectl describe pytorchjob NAME``: the whole text and the lines of its Events table."""
    text = kube.ok("describe", "pytorchjob", name, "-n", NAMESPACE)
    events = text.split("\nEvents:", 1)[1] if "\nEvents:" in text else ""
    return text, [line.strip() for line in events.splitlines()[3:] if line.strip()]


def gang_state(kube: Kubectl, name: str) -> str | None:
    job = json.loads(kube.ok("get", "pytorchjob", name, "-n", NAMESPACE, "-o", "json"))
    return (job["metadata"].get("annotations") or {}).get("segments.dev/gang-state")


def controller_events_on_pods(kube: Kubectl) -> list[dict]:
    events = json.loads(kube.ok("get", "events", "-n", NAMESPACE, "-o", "json"))["items"]
    return [e for e in events if e["involvedObject"]["kind"] == "Pod" and e.get("source", {}).get("component") == COMPONENT]


def start_gang(kube: Kubectl, tmp_path: Path, name: str, workers: int, leave_out: int = 0) -> dict:
    """Create the PyTorchJob (through the webhook) and its pods but the last ``leave_out``."""
    job = create(kube, tmp_path, gpu_job(name, NAMESPACE, workers))
    pods = operator_pods(job)
    for pod in pods[:len(pods) - leave_out]:
        create(kube, tmp_path, pod)
    return job


def one_line(kube: Kubectl, name: str, reason: str, message: str) -> str:
    """Wait until ``describe`` shows exactly one Event, of ``reason``, whose message starts with
    ``message``; return the describe output."""
    def shown() -> str | None:
        text, lines = describe_events(kube, name)
        return text if len(lines) == 1 and reason in lines[0] and \
            re.search(rf"{COMPONENT}\s+{re.escape(message)}", lines[0]) else None
    return wait_for(f"{name}: one {reason} line", shown, timeout=90)


def test_describe_pytorchjob_shows_one_line_per_gang_state(kube, tmp_path, capsys):
    # waiting for capacity: a pod bound to one node by hand holds 8 of its GPUs
    nodes = sorted(n["metadata"]["name"] for n in json.loads(kube.ok("get", "nodes", "-o", "json"))["items"])
    hog = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "namespace": NAMESPACE},
           "spec": {"nodeName": nodes[0], "containers": [
               {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    create(kube, tmp_path, hog)
    start_gang(kube, tmp_path, "gang-missing", workers=4, leave_out=1)  # Master + 4 Workers: 5, one missing
    start_gang(kube, tmp_path, "gang-huge", workers=8)  # 64 GPUs of a 32-GPU cluster
    start_gang(kube, tmp_path, "gang-waits", workers=4)  # 32 GPUs: the whole cluster, 8 held by the hog
    shown = {
        "gang-missing": one_line(kube, "gang-missing", "GangIncomplete",
                                 f"gang {NAMESPACE}/gang-missing: waiting for 1 more pod (4 of 5 exist): "
                                 "gang-missing-worker-3"),
        "gang-huge": one_line(kube, "gang-huge", "PlacementNeverFits", f"gang {NAMESPACE}/gang-huge: can never fit"),
        "gang-waits": one_line(kube, "gang-waits", "PlacementInfeasible",
                               f"gang {NAMESPACE}/gang-waits: waiting for capacity: nvidia.com/gpu"),
    }
    for name, _text in shown.items():
        line = describe_events(kube, name)[1][0]
        assert gang_state(kube, name) == re.split(rf"{COMPONENT}\s+", line, maxsplit=1)[1], name
    assert controller_events_on_pods(kube) == []
    assert all(p["spec"].get("schedulingGates") for p in pods_of(kube, NAMESPACE) if p["metadata"]["name"] != "hog")
    with capsys.disabled():
        for name, text in shown.items():
            print(f"\n$ kubectl describe pytorchjob {name} -n {NAMESPACE}   (Events)\n"
                  + text[text.index("Events:"):].rstrip())
