"""deploy/overlays/with-controller (DESIGN.md §9): rendered with ``kubectl kustomize``, validated
against the Kubernetes OpenAPI schema, and checked against the contract: 2 controller replicas
(one active through a Lease), least-privilege RBAC, metrics, the webhook started with gating."""

from __future__ import annotations

import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.conftest import no_kubectl
from tests.support import paths

ROOT = paths.REPO
OVERLAY = ROOT / "deploy" / "overlays" / "with-controller"
KUBECTL = shutil.which("kubectl")
NAMESPACE = "segment-webhook-system"


@pytest.fixture(scope="module")
def docs():
    if KUBECTL is None:
        no_kubectl()
    out = subprocess.run([KUBECTL, "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)}"
    return found[0]


def test_every_object_is_valid_kubernetes(docs):
    checked = 0
    for doc in docs:
        if doc["apiVersion"].startswith("cert-manager.io/"):
            continue
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
        checked += 1
    # the cert-manager overlay's 11 (incl. the PriorityClass) + SA, ClusterRole(Binding), Role(Binding),
    # Deployment, PodDisruptionBudget
    assert checked == 11 + 7


def workload_rules() -> list[dict]:
    """get + patch (the segments.dev/gang-state annotation) on every kind of the kind registry,
    one rule per API group in the registry's order."""
    from webhook.admission.kinds.registry import DESCRIPTIONS

    groups: dict[str, list[str]] = {}
    for description in DESCRIPTIONS:
        groups.setdefault(description.group, []).append(description.resource)
    return [{"apiGroups": [group], "resources": resources, "verbs": ["get", "patch"]}
            for group, resources in groups.items()]


def test_controller_rbac_is_least_privilege(docs):
    role = one(docs, "ClusterRole", "segment-webhook-controller")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["kai.scheduler"], "resources": ["topologies"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        # the owners between a pod and its workload (webhook/controller/owners.py)
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
        # target workload-api: the gangs' Workload API objects (webhook/controller/workload_objects.py)
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["workloads", "podgroups", "compositepodgroups"],
         "verbs": ["get", "list", "create"]},
    ] + workload_rules()
    lease_role = one(docs, "Role", "segment-webhook-controller-lease")
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                    "verbs": ["get", "create", "update"]}]
    subject = [{"kind": "ServiceAccount", "name": "segment-webhook-controller", "namespace": NAMESPACE}]
    assert one(docs, "ClusterRoleBinding", "segment-webhook-controller")["subjects"] == subject
    assert one(docs, "RoleBinding", "segment-webhook-controller-lease")["subjects"] == subject


def test_controller_deployment(docs):
    deployment = one(docs, "Deployment", "segment-webhook-controller")
    assert deployment["metadata"]["namespace"] == NAMESPACE
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "segment-webhook-controller"
    [container] = pod["containers"]
    assert container["command"] == ["segment-webhook"]
    assert container["args"][0] == "controller"
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9090"


def test_webhook_gates_pods(docs):
    webhook = one(docs, "Deployment", "segment-webhook")
    env = {e["name"]: e.get("value") for e in webhook["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SEGMENT_WEBHOOK_GATE_PODS"] == "true"


def test_commands_and_env_are_accepted_by_the_cli(docs):
    """The controller's and the webhook's command lines parse with the real parser, and the
    webhook's SEGMENT_WEBHOOK_GATE_PODS=true turns gating on."""
    from webhook.cli import build_parser, flags

    container = one(docs, "Deployment", "segment-webhook-controller")["spec"]["template"]["spec"]["containers"][0]
    args = flags.apply_env(build_parser().parse_args(container["args"]), {})
    assert (args.command, args.once, args.metrics_port, args.default_topology) == ("controller", False, 9090, "cluster-topology")
    webhook = one(docs, "Deployment", "segment-webhook")["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(webhook["args"])
    flags.apply_env(args, {e["name"]: e["value"] for e in webhook["env"] if "value" in e})
    assert args.gate_pods is True


def test_controller_keeps_one_replica_and_never_preempts(docs):
    """Issue 16: a PDB keeps one of the two replicas through node drains; the controller shares
    the webhook's PriorityClass, which never preempts training pods."""
    pdb = one(docs, "PodDisruptionBudget", "segment-webhook-controller")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {
        "app.kubernetes.io/name": "segment-webhook", "app.kubernetes.io/component": "controller"}}}
    pod = one(docs, "Deployment", "segment-webhook-controller")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "segment-webhook-critical"
    assert one(docs, "PriorityClass", "segment-webhook-critical")["preemptionPolicy"] == "Never"
