"""KWOK's controller against the local control plane: simulated nodes that run pods
(``local-cluster.sh up DIR --with kwok``; DESIGN.md §11, issue 36).

KWOK (``sigs.k8s.io/kwok/cmd/kwok`` v0.8.0, ``hack/go/kwok``) is built by
``local_cluster.build_upstream`` and run as its ``kustomize/kwok`` deploys it: from ``kubectl
kustomize`` of that directory in the Go module cache (never copied here) its CRDs, ServiceAccount,
ClusterRole(Binding), FlowSchema and the ``kwok`` ConfigMap's ``kwok.yaml`` are read; everything but
the Deployment, Service and ConfigMap is applied; the controller runs as a local process under a
token of its ServiceAccount with that configuration, changed only where a pod's surroundings show:
its server on a free loopback port (``serverAddress``; in the pod, ``nodePort`` 10247 on the pod
IP), ``--node-ip 127.0.0.1``, a wider pod ``cidr`` (its /24 holds 254 pod IPs, and an IP is given
back only when a pod is deleted, so a trace of thousands of finished pods would exhaust it) and
``enableCRDs: [Stage]`` (the Metric, Exec, Logs, ... CRDs it also lists serve ``kubectl`` features
no test here uses, and Metric turns on a pod cache), a longer node Lease renewed by more
workers (:data:`NODE_LEASE_SECONDS`, :data:`NODE_LEASE_PARALLELISM`), more Stage plays at once
(:data:`NODE_PLAY_PARALLELISM`, :data:`POD_PLAY_PARALLELISM`) and its log at WARN;
kube-controller-manager gets longer node graces (:func:`controller_manager_args`).

It manages the nodes that carry ``kwok.x-k8s.io/node: fake`` (the annotation selector of its
``kwok.yaml``), renews their Leases and plays the
:func:`stages` on them and their pods: a node becomes Ready; a pod bound to one becomes Running and
Ready at once; a Running pod that carries :data:`DELAY_ANNOTATION` (a Go duration, ``"90s"``)
becomes Succeeded that long after KWOK saw it Running; a pod being deleted is deleted (what a
kubelet does at the end of graceful deletion).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from local_cluster import ApiClient, LocalCluster

#: The node annotation KWOK's own ``kustomize/kwok/kwok.yaml`` selects (``manageNodesWithAnnotationSelector``).
MANAGED_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: The label KWOK's documentation puts on its nodes (kept: it lets a user list them).
KWOK_LABEL = ("type", "kwok")
#: The pod annotation the pod-complete Stage reads its delay from: KWOK's own name for it
#: (``kustomize/stage/pod/general/pod-complete.yaml``), a Go duration string (``time.ParseDuration``).
DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
#: KWOK's Stage files used, relative to the module's ``kustomize/stage``.
STAGE_FILES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/general/pod-complete.yaml", "pod/fast/pod-delete.yaml")
#: Pod IPs KWOK hands out (a string on the pod: nothing routes them).
POD_CIDR = "10.128.0.0/10"
COMPONENT = "kwok-controller"
#: The Lease duration KWOK gives its nodes; it renews every quarter of it (``renewInterval``,
#: pkg/kwok/controllers/controller.go, v0.8.0), as a kubelet does. Its ConfigMap's 40 s (renewals
#: every 10 s) would be 500 requests a second at 5,000 nodes on a 2-CPU machine shared with other
#: work; 1,200 s renews every 300 s (17 a second at 5,000 nodes), within the
#: :data:`NODE_MONITOR_GRACE_SECONDS` kube-controller-manager gets when KWOK runs.
NODE_LEASE_SECONDS = 1200
#: Lease syncs KWOK runs at once (its ConfigMap: 4). KWOK manages a node (plays its Stages: Ready)
#: only once it has created the node's Lease, so this also paces registration: with 4, a 1,024-node
#: trace under load average 20 renewed about 5 Leases a second and the node lifecycle controller
#: marked 259 nodes NotReady; with 16, 5,000 nodes at load average 11 got Ready about 4 a second.
NODE_LEASE_PARALLELISM = 64
#: Node and pod Stage plays KWOK runs at once (its ConfigMap: 4 each): each play is one status
#: PATCH; with 4, a 1,024-pod hero gang waits for 256 round trips before its last pod is Running.
NODE_PLAY_PARALLELISM = 32
POD_PLAY_PARALLELISM = 32
#: kube-controller-manager's ``--node-monitor-grace-period`` and ``--node-startup-grace-period``
#: when KWOK runs (:func:`controller_manager_args`): a Lease renewed every 300 s
#: (:data:`NODE_LEASE_SECONDS`) needs more than the 120 s ``local_cluster`` gives otherwise, and a
#: node KWOK has not yet made Ready is marked ``NodeStatusNeverUpdated`` (Ready Unknown, tainted
#: unreachable) after the default 60 s of startup grace: at 5,000 nodes under load average 11,
#: 792 of 4,212 created nodes were, KWOK's first Stage play still queued.
NODE_MONITOR_GRACE_SECONDS = 900


def controller_manager_args() -> dict[str, str]:
    """kube-controller-manager flags (flag -> value) for a control plane KWOK runs on: the node
    lifecycle controller's graces of :data:`NODE_MONITOR_GRACE_SECONDS`, so that a KWOK node is
    neither marked NotReady between two Lease renewals nor before KWOK first made it Ready."""
    grace = f"{NODE_MONITOR_GRACE_SECONDS}s"
    return {"--node-monitor-grace-period": grace, "--node-startup-grace-period": grace}


def _local_cluster():
    """hack/local_cluster.py, imported from this directory."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import local_cluster

    return local_cluster


def pod_complete_stage(general: dict[str, Any]) -> dict[str, Any]:
    """KWOK's general ``pod-complete`` Stage (``general``, as its file holds it) made to finish
    exactly the pods a trace gives a duration: its selector's owner-kind requirement (a Job) is
    replaced by "``DELAY_ANNOTATION`` exists" (a pod without it runs until deleted, as under the
    fast stages), and the jitter is dropped (KWOK uses the jitter *instead of* the delay when it is
    smaller: ``lifecycle.Stage.Delay``, v0.8.0), so the delay is the annotation's duration alone;
    its fallback (``durationMilliseconds``) is removed too. Returns a new object."""
    stage = copy.deepcopy(general)
    spec = stage["spec"]
    expressions = [e for e in spec["selector"]["matchExpressions"] if "ownerReferences" not in e["key"]]
    expressions.append({"key": f'.metadata.annotations["{DELAY_ANNOTATION}"]', "operator": "Exists"})
    spec["selector"]["matchExpressions"] = expressions
    spec["delay"] = {"durationFrom": {"jq": {"expression": f'.metadata.annotations["{DELAY_ANNOTATION}"]'}}}
    return stage


def stages(source: Path) -> list[dict[str, Any]]:
    """The Stage objects applied: :data:`STAGE_FILES` from ``source`` (the kwok module directory),
    the pod-complete one through :func:`pod_complete_stage`."""
    docs = []
    for name in STAGE_FILES:
        stage = yaml.safe_load((source / "kustomize" / "stage" / name).read_text())
        docs.append(pod_complete_stage(stage) if name.endswith("pod-complete.yaml") else stage)
    return docs


def configuration(kwok_yaml: str, server_port: int) -> dict[str, Any]:
    """The ``KwokConfiguration`` of KWOK's ConfigMap (``kwok_yaml``) with the local changes of the
    module docstring (server on ``127.0.0.1:server_port``, wide pod CIDR, Stage the only CRD)."""
    config = yaml.safe_load(kwok_yaml)
    options = config.setdefault("options", {})
    options.update(serverAddress=f"127.0.0.1:{server_port}", nodePort=server_port, cidr=POD_CIDR,
                   enableCRDs=["Stage"], nodeIP="127.0.0.1", nodeLeaseDurationSeconds=NODE_LEASE_SECONDS,
                   nodeLeaseParallelism=NODE_LEASE_PARALLELISM, nodePlayStageParallelism=NODE_PLAY_PARALLELISM,
                   podPlayStageParallelism=POD_PLAY_PARALLELISM)
    return dict(config)


def start(cluster: LocalCluster) -> None:
    """Start KWOK's controller on ``cluster`` (the module docstring) and wait for its ``/healthz``;
    apply the :func:`stages`. Raises local_cluster.ClusterError naming what failed."""
    lc = _local_cluster()
    binary = lc.build_upstream("kwok")
    source = lc.upstream_source("kwok")
    docs = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(source / "kustomize" / "kwok")).stdout) if d]
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kwok")
    cluster.apply([d for d in docs if d["kind"] not in ("Deployment", "Service", "ConfigMap")])
    cluster.wait_for_crds()
    cluster.apply(stages(source))
    work = cluster.dir / "kwok"
    work.mkdir(parents=True, exist_ok=True)
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    kubeconfig = cluster.upstream_token_kubeconfig(work, account)
    port = cluster.state["ports"][COMPONENT] = lc.free_port()
    cluster.save()
    (work / "kwok.yaml").write_text(yaml.safe_dump(configuration(config_map["data"]["kwok.yaml"], port),
                                                   sort_keys=False))
    # -v WARN: at INFO it logs a line per node, Lease and pod patch (thousands a minute at scale)
    process = cluster.start(COMPONENT, [str(binary), "--config", str(work / "kwok.yaml"), "--kubeconfig",
                                        str(kubeconfig), "-v", "WARN"], env=dict(os.environ, HOME=str(work)))
    cluster.wait_until(COMPONENT, process, lambda: lc._http_ok(port, "/healthz"), "healthy (/healthz)")


def node_body(node: dict[str, Any]) -> dict[str, Any]:
    """The Node created for dump node ``node``: its name, labels (plus :data:`KWOK_LABEL`), taints
    and ``unschedulable``, with :data:`MANAGED_ANNOTATION` so KWOK manages it, and its status'
    ``capacity`` and ``allocatable`` from the dump (capacity = allocatable when it has none; the
    apiserver keeps a Node's status on create, so one request registers it). Nothing is added:
    KWOK's node-initialize Stage keeps what it finds, and no kubelet checks a pod's ephemeral
    storage."""
    metadata = node["metadata"]
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": metadata["name"], "labels": {**(metadata.get("labels") or {}), KWOK_LABEL[0]: KWOK_LABEL[1]},
                         "annotations": {MANAGED_ANNOTATION[0]: MANAGED_ANNOTATION[1]}},
            "spec": {k: v for k, v in (node.get("spec") or {}).items() if k in ("taints", "unschedulable")},
            "status": {"capacity": status.get("capacity") or allocatable, "allocatable": allocatable}}


#: Clients registering nodes at once (one keep-alive connection each).
REGISTER_WORKERS = 16


def wait_seconds(nodes: int) -> float:
    """Seconds :func:`register_nodes` waits for ``nodes`` nodes to be Ready, then untainted: 2 min
    plus 0.125 s a node (KWOK made 5,000 nodes Ready about 4 a second under load average 11 with
    its default Stage plays; 12 min 25 s at 5,000 nodes)."""
    return 120 + nodes / 8


def poll_seconds(nodes: int) -> float:
    """Seconds between two lists of all Nodes while waiting: 1 s up to 1,000 nodes, 1 s more for
    each further 1,000 (each list of 5,000 Nodes is about 15 MB of JSON to a busy apiserver)."""
    return float(max(1, -(-nodes // 1000)))


def register_nodes(cluster: LocalCluster, dump: Path) -> int:
    """Create the Nodes of ``dump`` as KWOK nodes (:func:`node_body`, one POST each), with
    :data:`REGISTER_WORKERS` clients in batches of ``local_cluster.NODE_BATCH``; KWOK makes them
    Ready and renews their Leases. Waits (:func:`wait_seconds`) until each is Ready and
    kube-controller-manager has lifted the ``not-ready`` taint admission adds at create. Returns
    the number of Nodes. Raises ClusterError when KWOK is not running, the dump has no Node or
    the nodes stay unready."""
    lc = _local_cluster()
    if COMPONENT not in cluster.state.get("components", []):
        raise lc.ClusterError(f"nodes: KWOK is not running in {cluster.dir} (`up {cluster.dir} --with kwok`)")
    nodes = [obj for obj in lc.read_objects(dump) if obj.get("kind") == "Node"]
    if not nodes:
        raise lc.ClusterError(f"nodes: {dump} holds no Node")
    api = lc.ApiClient(cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"], workers=REGISTER_WORKERS)

    def register(node: dict[str, Any]) -> None:
        api.request("POST", "/api/v1/nodes", node_body(node), expect=(201, 409))

    for start_at in range(0, len(nodes), lc.NODE_BATCH):
        api.map(register, nodes[start_at:start_at + lc.NODE_BATCH])
    names = [n["metadata"]["name"] for n in nodes]
    cluster.state["kwok_nodes"] = sorted(set(cluster.state.get("kwok_nodes", [])) | set(names))
    cluster.save()
    wait_ready(cluster, api, set(names), timeout=wait_seconds(len(nodes)), poll=poll_seconds(len(nodes)))
    cluster.wait_for_node_taints(api, {n["metadata"]["name"]: (n.get("spec") or {}).get("taints") or [] for n in nodes},
                                 timeout=wait_seconds(len(nodes)), poll=poll_seconds(len(nodes)))
    return len(nodes)


def wait_ready(cluster: LocalCluster, api: ApiClient, names: set[str], timeout: float, poll: float = 1.0) -> None:
    """Wait until every node of ``names`` has Ready=True (KWOK's node-initialize Stage), listing
    the Nodes every ``poll`` s. Raises ClusterError naming how many are not, with the tail of
    KWOK's log."""
    deadline = time.monotonic() + timeout
    while True:
        listed = api.request("GET", "/api/v1/nodes?resourceVersion=0")["items"]
        ready = {n["metadata"]["name"] for n in listed
                 if any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (n.get("status") or {}).get("conditions") or [])}
        missing = names - ready
        if not missing:
            return
        if time.monotonic() > deadline:
            raise _local_cluster().ClusterError(
                f"nodes: {len(missing)} KWOK nodes not Ready after {timeout:g} s (e.g. {sorted(missing)[:5]}):\n"
                f"{cluster.log_tail(COMPONENT)}")
        time.sleep(poll)


def describe(cluster: LocalCluster) -> str:
    """One line: the Stages KWOK plays (their names), for ``up``'s output."""
    stages_listed = json.loads(cluster.kubectl("get", "stages.kwok.x-k8s.io", "-o", "json").stdout)["items"]
    return "kwok: stages " + ", ".join(sorted(s["metadata"]["name"] for s in stages_listed))
