"""cert-manager against the local control plane (``local-cluster.sh up DIR --with cert-manager``;
issue 35 item 2): its controller and its CA injector (cainjector), v1.21.2, without its webhook.

The Go module proxy serves ``github.com/cert-manager/cert-manager`` v1.21.x without its
``cmd/`` directory (``cmd/controller`` and ``cmd/cainjector`` are separate modules, never
published: ``go list -m -versions`` of them is a 404), so ``hack/go/cert-manager/main.go`` (ours)
runs cert-manager's own packages as one binary, ``cert-manager controller`` and ``cert-manager
cainjector``: the controllers of a selfSigned and a CA Issuer (all the chart of this project
uses), and the four injectors. ``local_cluster.build_upstream`` builds it.

Everything else comes from the module in the Go module cache, never copied here: the CRDs
(``deploy/crds``) and, from ``helm template`` of its chart (``deploy/charts/cert-manager``), the
ServiceAccounts, ClusterRoles, Roles and their bindings. Each process runs under a token of its
chart ServiceAccount (``cert-manager``, ``cert-manager-cainjector``) in namespace
:data:`NAMESPACE`, as the chart's Deployments do, with the chart's
``--cluster-resource-namespace`` (its namespace). Not run: cert-manager's webhook (it validates
and defaults cert-manager's own objects; the CRDs' OpenAPI schemas still apply), leader election
(one replica each), the metrics and health servers, ACME/Vault/Venafi issuers.

``up`` waits until the controller has issued a throw-away selfSigned certificate
(:data:`PROBE`, deleted afterwards) and the injector has started its four controllers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from local_cluster import LocalCluster

#: The namespace the chart installs into (cert-manager's documented default).
NAMESPACE = "cert-manager"
CONTROLLER = "cert-manager-controller"
CAINJECTOR = "cert-manager-cainjector"
#: The kinds of the chart's rendering that are applied (RBAC and identities; no Deployment,
#: Service, webhook configuration, Job or ConfigMap: nothing of it runs as a pod here).
APPLIED_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: The selfSigned Issuer and Certificate ``up`` issues once to know the controller works.
PROBE = "local-cluster-probe"
#: The injectors cainjector starts (pkg/controller/cainjector): one "Starting workers" line each.
INJECTORS = 4


def _local_cluster():
    """hack/local_cluster.py, imported from this directory."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import local_cluster

    return local_cluster


def chart_objects(cluster: LocalCluster, source: Path) -> list[dict[str, Any]]:
    """The :data:`APPLIED_KINDS` objects of ``helm template`` of cert-manager's chart in the module
    directory ``source``, in :data:`NAMESPACE`. Raises ClusterError when helm fails."""
    lc = _local_cluster()
    helm = lc.build_upstream("helm")
    home = cluster.dir / "cert-manager" / "helm"
    env = dict(os.environ, HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
               HELM_DATA_HOME=str(home / "data"))
    done = subprocess.run([str(helm), "template", "cert-manager", str(source / "deploy" / "charts" / "cert-manager"),
                           "--namespace", NAMESPACE], capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        raise lc.ClusterError(f"cert-manager: helm template of its chart failed: {done.stderr[-2000:]}")
    return [d for d in yaml.safe_load_all(done.stdout) if d and d.get("kind") in APPLIED_KINDS]


def probe_objects() -> list[dict[str, Any]]:
    """The selfSigned Issuer and the Certificate ``up`` issues (:data:`PROBE`, in :data:`NAMESPACE`)."""
    return [{"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": PROBE, "namespace": NAMESPACE},
             "spec": {"selfSigned": {}}},
            {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": PROBE, "namespace": NAMESPACE},
             "spec": {"secretName": PROBE, "commonName": PROBE, "issuerRef": {"name": PROBE, "kind": "Issuer"}}}]


def certificate_ready(cluster: LocalCluster, namespace: str, name: str) -> bool:
    """True when Certificate ``namespace/name`` has condition Ready=True."""
    found = cluster.kubectl("get", "certificate", name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return False
    conditions = json.loads(found.stdout).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def start(cluster: LocalCluster) -> None:
    """Start cert-manager's controller and cainjector on ``cluster`` (the module docstring) and
    wait until a probe certificate is issued and the four injectors run. Raises ClusterError."""
    lc = _local_cluster()
    binary = lc.build_upstream("cert-manager")
    source = lc.upstream_source("cert-manager")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(source / "deploy" / "crds"))
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    objects = chart_objects(cluster, source)
    cluster.apply(objects)
    cluster.wait_for_crds()
    accounts = {d["metadata"]["name"]: d for d in objects if d["kind"] == "ServiceAccount"}
    processes = {}
    for component, account in ((CONTROLLER, "cert-manager"), (CAINJECTOR, "cert-manager-cainjector")):
        work = cluster.dir / component
        work.mkdir(parents=True, exist_ok=True)
        kubeconfig = cluster.upstream_token_kubeconfig(work, accounts[account])
        argv = [str(binary), component.removeprefix("cert-manager-"), "--kubeconfig", str(kubeconfig), "--v", "2"]
        if component == CONTROLLER:
            argv += ["--cluster-resource-namespace", NAMESPACE]
        processes[component] = cluster.start(component, argv, env=dict(os.environ, HOME=str(work)))
    cluster.wait_until(CAINJECTOR, processes[CAINJECTOR], lambda: cluster.log_path(CAINJECTOR).read_text(
        errors="replace").count('"Starting workers"') >= INJECTORS, f"running its {INJECTORS} injectors")
    cluster.apply(probe_objects())
    try:
        cluster.wait_until(CONTROLLER, processes[CONTROLLER], lambda: certificate_ready(cluster, NAMESPACE, PROBE),
                           f"issuing the selfSigned Certificate {NAMESPACE}/{PROBE}")
    finally:
        for kind in ("certificate", "issuer", "secret"):
            cluster.kubectl("delete", kind, PROBE, "-n", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)

