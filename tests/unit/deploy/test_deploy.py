"""The kustomize manifests under deploy/: rendered with ``kubectl kustomize``, validated against the
Kubernetes OpenAPI schema (kubernetes-validate, strict) and checked field by field against the
deployment contract (task brief, DESIGN.md §1, §3, §7).

cert-manager ``Issuer``/``Certificate`` are CRD-typed; kubernetes-validate has no schema for them,
so their required fields are checked by hand (``test_cert_manager_objects``).
"""

from __future__ import annotations

import base64
import copy
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonpatch
import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import no_kubectl
from tests.support import paths

ROOT = paths.REPO
DEPLOY = ROOT / "deploy"
CRD_FILE = DEPLOY / "crds" / "segments.dev_distributedworkloads.yaml"
EXAMPLES = paths.SHARED / "examples"
KUBECTL = shutil.which("kubectl")
K8S_VERSION = "1.30.0"  # matchConditions are GA (admissionregistration v1) since Kubernetes 1.30

NAMESPACE = "segment-webhook-system"
SERVICE = "segment-webhook"
CERT_DIR = "/etc/segment-webhook/certs"
IMAGE = "ghcr.io/segment-webhook/segment-webhook:0.1.0"
POD_MATCH_EXPRESSION = (
    "has(object.metadata.labels) && "
    "('training.kubeflow.org/replica-type' in object.metadata.labels || "
    "'leaderworkerset.sigs.k8s.io/name' in object.metadata.labels || "
    "'training.kubeflow.org/job-role' in object.metadata.labels || "
    "'jobset.sigs.k8s.io/jobset-name' in object.metadata.labels || "
    "'ray.io/group' in object.metadata.labels || "
    "'batch.kubernetes.io/job-completion-index' in object.metadata.labels)"
)
WORKLOAD_RULES = [
    {"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "resources": ["pytorchjobs"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "apiVersions": ["v1"], "resources": ["leaderworkersets"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    {"apiGroups": ["segments.dev"], "apiVersions": ["v1alpha1"], "resources": ["distributedworkloads"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    {"apiGroups": ["kubeflow.org"], "apiVersions": ["v2beta1"], "resources": ["mpijobs"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "resources": ["jobsets"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    {"apiGroups": ["ray.io"], "apiVersions": ["v1"], "resources": ["rayclusters", "rayjobs", "rayservices"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    {"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"], "resources": ["trainjobs"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"],
     "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
]
POD_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"], "scope": "Namespaced"},
]
NAMESPACE_SELECTOR = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "segment-webhook-system"]},
    ],
}

needs_kubectl = pytest.mark.skipif(KUBECTL is None and os.environ.get("CI") != "true",
                                   reason="kubectl is not installed: cannot render kustomize")


def kustomize(path: Path) -> list[dict]:
    assert KUBECTL is not None, "kubectl is not installed: cannot render kustomize (CI must have it: .ci/run builds it)"
    out = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubectl kustomize {path} failed: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def base():
    if KUBECTL is None:
        no_kubectl()
    return kustomize(DEPLOY / "base")


@pytest.fixture(scope="module")
def cert_manager():
    if KUBECTL is None:
        no_kubectl()
    return kustomize(DEPLOY / "overlays" / "cert-manager")


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory):
    """Render the self-signed overlay from a temporary copy of deploy/ whose certs/ directory is
    filled by ``segment-webhook certs`` (the documented step). Returns (docs, ca.crt bytes)."""
    if KUBECTL is None:
        no_kubectl()
    tmp = tmp_path_factory.mktemp("deploy") / "deploy"
    shutil.copytree(DEPLOY, tmp, ignore=shutil.ignore_patterns("*.crt", "*.key"))
    certs = tmp / "overlays" / "self-signed" / "certs"
    out = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "certs", "--out", str(certs)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 0, f"segment-webhook certs failed: {out.stderr}"
    return kustomize(tmp / "overlays" / "self-signed"), (certs / "ca.crt").read_bytes()


def all_renders(base, cert_manager, self_signed):
    return {"base": base, "cert-manager": cert_manager, "self-signed": self_signed[0]}


# ----------------------------------------------------------------- schema validation

CERT_MANAGER_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


@needs_kubectl
def test_every_object_is_valid_kubernetes(base, cert_manager, self_signed):
    checked = 0
    for render, docs in all_renders(base, cert_manager, self_signed).items():
        for doc in docs:
            if (doc["apiVersion"], doc["kind"]) in CERT_MANAGER_KINDS:
                continue  # CRD-typed: test_cert_manager_objects
            try:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{render}: {doc['kind']}/{doc['metadata']['name']} invalid: {exc.message} at {list(exc.path)}")
            checked += 1
    # base: Namespace, PriorityClass, CRD, ServiceAccount, ClusterRole, ClusterRoleBinding, Service,
    # Deployment, PodDisruptionBudget, Mutating- and ValidatingWebhookConfiguration = 11; self-signed
    # adds a Secret.
    assert checked == 11 + 11 + 12


def test_strict_validation_is_not_a_no_op(base):
    """Guard against a validator that accepts anything: an unknown field must fail."""
    deployment = copy.deepcopy(one(base, "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbez"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


@needs_kubectl
def test_base_objects(base):
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in base)
    assert kinds == sorted([
        ("Namespace", NAMESPACE),
        ("PriorityClass", "segment-webhook-critical"),
        ("CustomResourceDefinition", "distributedworkloads.segments.dev"),
        ("ServiceAccount", SERVICE),
        ("ClusterRole", "segment-webhook-topology-reader"),
        ("ClusterRoleBinding", "segment-webhook-topology-reader"),
        ("Service", SERVICE),
        ("Deployment", SERVICE),
        ("PodDisruptionBudget", SERVICE),
        ("MutatingWebhookConfiguration", SERVICE),
        ("ValidatingWebhookConfiguration", SERVICE),
    ])
    for d in base:
        if d["kind"] in ("ServiceAccount", "Service", "Deployment", "PodDisruptionBudget"):
            assert d["metadata"]["namespace"] == NAMESPACE


# ----------------------------------------------------------------- rollouts (DESIGN.md §10)

OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").is_file())


def render_overlay(name: str, tmp_path: Path) -> list[dict]:
    """Render ``deploy/overlays/<name>`` from a copy of deploy/ whose self-signed certs/ directory
    is filled by ``segment-webhook certs`` (the documented step; other overlays ignore it)."""
    deploy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("*.crt", "*.key"))
    out = subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out",
                          str(deploy / "overlays" / "self-signed" / "certs")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return kustomize(deploy / "overlays" / name)


def test_every_overlay_is_checked():
    assert {"cert-manager", "self-signed"} <= set(OVERLAYS)


@needs_kubectl
@pytest.mark.parametrize("overlay", ["base"] + OVERLAYS)
def test_every_render_carries_the_rollout_settings(overlay, tmp_path):
    """docs/tasks/operations.md "Rollouts": a 15 s preStop pause (longer than endpoint propagation), a 60 s grace
    period (pause + gunicorn's 30 s drain), and the webhook's own PriorityClass."""
    docs = kustomize(DEPLOY / "base") if overlay == "base" else render_overlay(overlay, tmp_path)
    pod = one(docs, "Deployment", SERVICE)["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["priorityClassName"] == "segment-webhook-critical"
    [container] = pod["containers"]
    assert container["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "15"]}}}
    priority = one(docs, "PriorityClass", "segment-webhook-critical")
    assert priority["value"] == 1000000
    assert priority["globalDefault"] is False
    # queued ahead of workloads, but never evicts a training pod on a full GPU cluster (issue 16)
    assert priority["preemptionPolicy"] == "Never"
    assert "namespace" not in priority["metadata"]  # cluster-scoped


def test_grace_period_covers_the_pause_and_the_drain():
    """The 60 s above against the server's own drain: preStop 15 s + gunicorn graceful_timeout."""
    from webhook.http.server import ServeOptions

    drain = ServeOptions.__dataclass_fields__["graceful_timeout"].default
    assert drain == 30
    assert 15 + drain < 60


# ----------------------------------------------------------------- RBAC

@needs_kubectl
def test_rbac_is_least_privilege(base):
    role = one(base, "ClusterRole")
    assert role["rules"] == [{"apiGroups": ["kai.scheduler"], "resources": ["topologies"], "verbs": ["get", "list", "watch"]}]
    binding = one(base, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "segment-webhook-topology-reader"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE, "namespace": NAMESPACE}]
    assert not [d for d in base if d["kind"] in ("Role", "RoleBinding")]
    pod = one(base, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE


# ----------------------------------------------------------------- Deployment, PDB, Service

@needs_kubectl
def test_deployment(base):
    dep = one(base, "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()

    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert isinstance(sc["runAsUser"], int) and sc["runAsUser"] != 0

    assert container["image"] == IMAGE
    assert container["command"] == ["segment-webhook"]
    assert container["args"] == ["serve", "--bind", "0.0.0.0:8443", "--cert-dir", CERT_DIR]
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]

    for key in ("requests", "limits"):
        assert set(container["resources"][key]) == {"cpu", "memory"}

    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8443, "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8443, "scheme": "HTTPS"}

    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "SEGMENT_WEBHOOK_PLATFORM_USER" in env and "SEGMENT_WEBHOOK_PLATFORM_GROUP" in env
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # TLS Secret at the cert dir, read-only, as a whole directory (no subPath: rotation works)
    certs = mounts[CERT_DIR]
    assert certs.get("readOnly") is True and "subPath" not in certs
    assert volumes[certs["name"]]["secret"]["secretName"].startswith("segment-webhook-tls")
    # writable emptyDirs: prometheus multiprocess dir and the temp dir gunicorn's workers use
    metrics_mount = mounts[env["PROMETHEUS_MULTIPROC_DIR"]]
    assert "emptyDir" in volumes[metrics_mount["name"]]
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert env["TMPDIR"] == "/tmp"


@needs_kubectl
def test_container_command_and_env_are_accepted_by_the_cli(base):
    """The Deployment's command line parses with the real ``segment-webhook`` parser, and every
    SEGMENT_WEBHOOK_* variable is one that ``serve`` reads (webhook/cli/serve.py, webhook/cli/flags.py)."""
    from webhook.cli import build_parser, flags

    container = one(base, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.command == "serve"
    assert args.bind == "0.0.0.0:8443"
    assert args.cert_dir == CERT_DIR
    known = {flags.env_name(spec.flag) for spec in args._env_flags}
    ours = {e["name"] for e in container["env"] if e["name"].startswith("SEGMENT_WEBHOOK_")}
    assert ours <= known, f"unknown variables: {sorted(ours - known)}"
    env = {e["name"]: e["value"] for e in container["env"]}
    flags.apply_env(args, env)  # raises UsageError for a bad value
    assert args.workers == 2 and args.threads is None  # serve --threads was removed (docs/tasks/operations.md "Running the webhook")


@needs_kubectl
def test_pdb(base):
    pdb = one(base, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    labels = one(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


@needs_kubectl
def test_service(base):
    svc = one(base, "Service", SERVICE)
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]
    labels = one(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()


# ----------------------------------------------------------------- webhook configurations

def webhooks_by_name(doc: dict) -> dict:
    return {w["name"]: w for w in doc["webhooks"]}


@needs_kubectl
def test_mutating_webhook_configuration(base):
    hooks = webhooks_by_name(one(base, "MutatingWebhookConfiguration"))
    assert set(hooks) == {"workloads.segment-webhook.segments.dev", "pods.segment-webhook.segments.dev"}
    for hook in hooks.values():
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] == 5
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert hook["namespaceSelector"] == NAMESPACE_SELECTOR
        assert hook["clientConfig"]["service"] == {"name": SERVICE, "namespace": NAMESPACE, "path": "/mutate", "port": 443}
    workloads = hooks["workloads.segment-webhook.segments.dev"]
    assert workloads["rules"] == WORKLOAD_RULES
    assert workloads["failurePolicy"] == "Fail"
    assert [c["name"] for c in workloads["matchConditions"]] == ["not-being-deleted", "may-carry-a-placement-key"]
    pods = hooks["pods.segment-webhook.segments.dev"]
    assert pods["rules"] == POD_RULES
    assert pods["failurePolicy"] == "Fail"
    assert pods["matchConditions"] == [{"name": "made-by-a-training-controller", "expression": POD_MATCH_EXPRESSION}]


def test_workload_rules_list_every_described_kind():
    # issue 18: a kind the webhook handles is registered in deploy/ (and nothing else is)
    from webhook.admission.kinds.registry import DESCRIPTIONS

    assert sorted((r["apiGroups"][0], r["apiVersions"][0], res) for r in WORKLOAD_RULES for res in r["resources"]) == \
        sorted((d.group, d.version, d.resource) for d in DESCRIPTIONS)


@needs_kubectl
def test_validating_webhook_configuration(base):
    hooks = webhooks_by_name(one(base, "ValidatingWebhookConfiguration"))
    assert set(hooks) == {"workloads.segment-webhook.segments.dev"}
    hook = hooks["workloads.segment-webhook.segments.dev"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    assert hook["failurePolicy"] == "Fail"
    assert "reinvocationPolicy" not in hook  # a mutating-only field
    assert hook["namespaceSelector"] == NAMESPACE_SELECTOR
    assert hook["rules"] == WORKLOAD_RULES
    assert hook["clientConfig"]["service"] == {"name": SERVICE, "namespace": NAMESPACE, "path": "/validate", "port": 443}
    mutating = webhooks_by_name(one(base, "MutatingWebhookConfiguration"))["workloads.segment-webhook.segments.dev"]
    assert hook["matchConditions"] == mutating["matchConditions"]  # the same objects reach both


@functools.lru_cache(maxsize=64)
def cel_program(expression: str):
    """The compiled cel-python program of ``expression``, once per expression: compiling the
    workload condition takes about 0.25 s of CPU, evaluating it about 0.016 s (this machine), so
    the property test below compiled for 150 s of the default suite's wall time."""
    import celpy  # cel-python, a test extra
    env = celpy.Environment()
    return env.program(env.compile(expression))


def cel_eval(expression: str, **variables) -> bool:
    """Evaluate a CEL expression (cel-python) with JSON-shaped variables."""
    import celpy
    return bool(cel_program(expression).evaluate({k: celpy.json_to_cel(v) for k, v in variables.items()}))


@needs_kubectl
@pytest.mark.parametrize("metadata, expected", [
    ({"labels": {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "3"}}, True),
    ({"labels": {"training.kubeflow.org/replica-type": "master"}}, True),
    ({"labels": {"leaderworkerset.sigs.k8s.io/name": "lws-segmented", "leaderworkerset.sigs.k8s.io/worker-index": "0"}}, True),
    ({"labels": {"training.kubeflow.org/job-role": "worker", "training.kubeflow.org/replica-index": "3"}}, True),
    ({"labels": {"jobset.sigs.k8s.io/jobset-name": "llm", "jobset.sigs.k8s.io/job-index": "0"}}, True),
    ({"labels": {"ray.io/cluster": "nvl72", "ray.io/group": "gpu", "ray.io/node-type": "worker"}}, True),
    ({"labels": {"app": "nginx"}}, False),
    ({"labels": {}}, False),
    ({"name": "no-labels-at-all"}, False),
])
def test_pod_match_condition_selects_training_operator_and_lws_pods(base, metadata, expected):
    hooks = webhooks_by_name(one(base, "MutatingWebhookConfiguration"))
    (condition,) = hooks["pods.segment-webhook.segments.dev"]["matchConditions"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [{"name": "c"}]}}
    assert cel_eval(condition["expression"], object=pod) is expected


def workload_condition(base, name: str) -> str:
    hooks = webhooks_by_name(one(base, "MutatingWebhookConfiguration"))
    return {c["name"]: c["expression"] for c in hooks["workloads.segment-webhook.segments.dev"]["matchConditions"]}[name]


def pytorchjob(root: dict | None = None, worker: dict | None = None, **metadata) -> dict:
    worker_template: dict = {"spec": {"containers": [{"name": "c"}]}}
    if worker is not None:
        worker_template["metadata"] = {"annotations": worker}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "job", **({"annotations": root} if root is not None else {}), **metadata},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4, "template": worker_template}}}}


def lws(worker: dict | None = None, leader: dict | None = None) -> dict:
    templates = {}
    for name, annotations in (("workerTemplate", worker), ("leaderTemplate", leader)):
        if annotations is not None:
            templates[name] = {"metadata": {"annotations": annotations}, "spec": {"containers": [{"name": "c"}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "set"},
            "spec": {"leaderWorkerTemplate": {"size": 4, **templates}}}


def with_pod_template(annotations: dict | None) -> dict:
    template: dict = {"spec": {"containers": [{"name": "c"}]}}
    if annotations is not None:
        template["metadata"] = {"annotations": annotations}
    return template


def mpijob(worker: dict | None = None) -> dict:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "mpi"},
            "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": with_pod_template(None)},
                                         "Worker": {"replicas": 4, "template": with_pod_template(worker)}}}}


def jobset(job: dict | None = None, pod: dict | None = None) -> dict:
    job_template: dict = {"spec": {"parallelism": 4, "template": with_pod_template(pod)}}
    if job is not None:
        job_template["metadata"] = {"annotations": job}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
            "spec": {"replicatedJobs": [{"name": "driver", "replicas": 1, "template": {"spec": {
                "template": with_pod_template(None)}}}, {"name": "workers", "replicas": 2, "template": job_template}]}}


def ray_cluster_spec(worker: dict | None = None, head: dict | None = None) -> dict:
    return {"headGroupSpec": {"template": with_pod_template(head)},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "numOfHosts": 4,
                                  "template": with_pod_template(worker)}]}


def ray(kind: str, worker: dict | None = None, head: dict | None = None) -> dict:
    spec = ray_cluster_spec(worker, head)
    spec = {"RayCluster": spec, "RayJob": {"rayClusterSpec": spec}, "RayService": {"rayClusterConfig": spec}}[kind]
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "r"}, "spec": spec}


@needs_kubectl
@pytest.mark.parametrize("obj, old, expected", [
    # opted in: a placement key on the root, on a template, on the leader template
    (pytorchjob(root={"kai.scheduler/topology": "t"}), None, True),
    (pytorchjob(worker={"kai.scheduler/segment-size": "4"}), None, True),
    (lws(worker={"app": "x"}, leader={"kai.scheduler/segment-size": "2"}), None, True),
    # misspellings at edit distance 1, 2 and 3 that keep one of the words reach the guard
    (pytorchjob(worker={"kai.schedular/segment-size": "4"}), None, True),
    (pytorchjob(root={"kia.scheduler/topolgy": "t"}), None, True),
    (pytorchjob(root={"ka.schduler/topology": "t"}), None, True),
    (lws(worker={"kai.scheduler/segment-topology-required-placment": "r"}), None, True),
    # KAI's other keys are the webhook's too (DESIGN.md §5 opt-in: any kai.scheduler/* key)
    (pytorchjob(root={"kai.scheduler/queue": "q"}), None, True),
    # no such key anywhere: never reaches the webhook
    (pytorchjob(), None, False),
    (pytorchjob(root={"app": "x"}, worker={"prometheus.io/scrape": "true"}), None, False),
    (lws(worker={"app": "x"}), None, False),
    # three edits, one in each of `kai`, `sched` and `topolog` (the new-user trial's key): still
    # reaches the guard, through `duler`
    (pytorchjob(root={"ka.scxeduler/topoogy": "t"}), None, True),
    (pytorchjob(root={"ka.schduler/topolgy": "t"}), None, True),
    # a malformed shape is no evaluation error: with a key it reaches the webhook (which names the
    # field), without one it is left to the CRD schema
    ({**pytorchjob(root={"kai.scheduler/topology": "t"}), "spec": {"pytorchReplicaSpecs": [1, 2]}}, None, True),
    ({**pytorchjob(), "spec": {"pytorchReplicaSpecs": [1, 2]}}, None, False),
    ({**jobset(), "spec": {"replicatedJobs": {"a": 1}}}, None, False),
    ({**ray("RayCluster"), "spec": {"workerGroupSpecs": ["x"], "headGroupSpec": 7}}, None, False),
    ({**pytorchjob(), "spec": "x"}, None, False),
    # UPDATE that removes every key from an object that had them still reaches it (immutability)
    (pytorchjob(), pytorchjob(worker={"kai.scheduler/segment-size": "4"}), True),
    # the DESIGN.md §3b kinds: each template the webhook reads
    (mpijob(worker={"kai.scheduler/segment-size": "2"}), None, True),
    (mpijob(worker={"app": "x"}), None, False),
    (jobset(pod={"kai.scheduler/segment-size": "4"}), None, True),
    (jobset(job={"kai.scheduler/topology": "t"}), None, True),
    (jobset(job={"app": "x"}, pod={"app": "y"}), None, False),
    (ray("RayCluster", worker={"kai.scheduler/segment-size": "4"}), None, True),
    (ray("RayJob", worker={"kai.scheduler/segment-size": "4"}), None, True),
    (ray("RayService", head={"kai.schedular/topology": "t"}), None, True),
    (ray("RayService", worker={"app": "x"}, head={"app": "y"}), None, False),
    ({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
      "metadata": {"name": "tj", "annotations": {"kai.scheduler/segment-size": "4"}},
      "spec": {"trainer": {"numNodes": 8}}}, None, True),
    ({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj"},
      "spec": {"trainer": {"numNodes": 8}}}, None, False),
    # a placement key written as a label (root or template) reaches the webhook, which denies it;
    # KAI's queue label alone does not
    ({**pytorchjob(), "metadata": {"name": "p", "labels": {"kai.scheduler/segment-size": "4"}}}, None, True),
    (jobset(pod=None) | {"spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {
        "metadata": {"labels": {"kai.scheduler/topology": "t"}}}}}}]}}, None, True),
    ({**pytorchjob(), "metadata": {"name": "p", "labels": {"kai.scheduler/queue": "q"}}}, None, False),
    # a batch/v1 Job: keys on its pod template alone still reach the webhook
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
      "spec": {"completions": 8, "template": with_pod_template({"kai.scheduler/segment-size": "4"})}}, None, True),
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
      "spec": {"completions": 8, "template": with_pod_template({"app": "x"})}}, None, False),
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": 3}}, None, False),
    # the native kind is always the webhook's (it writes the gang size under --gate-pods)
    ({"apiVersion": "segments.dev/v1alpha1", "kind": "DistributedWorkload", "metadata": {"name": "n"},
      "spec": {"workers": 2}}, None, True),
])
def test_workload_match_condition_selects_objects_with_placement_keys(base, obj, old, expected):
    expression = workload_condition(base, "may-carry-a-placement-key")
    request = {"operation": "UPDATE" if old is not None else "CREATE"}
    assert cel_eval(expression, object=obj, oldObject=old, request=request) is expected


PLACEMENT_KEYS = ("kai.scheduler/topology", "kai.scheduler/topology-required-placement",
                  "kai.scheduler/topology-preferred-placement", "kai.scheduler/segment-size",
                  "kai.scheduler/segment-topology-required-placement",
                  "kai.scheduler/segment-topology-preferred-placement")


@st.composite
def misspelling(draw) -> str:
    """A placement key (DESIGN.md §2) with 1 to 3 random insertions, deletions or substitutions."""
    key = draw(st.sampled_from(PLACEMENT_KEYS))
    alphabet = "abcdefghijklmnopqrstuvwxyz.-/_0123456789"
    for _ in range(draw(st.integers(1, 3))):
        operation = draw(st.sampled_from(("insert", "delete", "substitute")))
        at = draw(st.integers(0, len(key) - (operation != "insert")))
        if operation == "insert":
            key = key[:at] + draw(st.sampled_from(alphabet)) + key[at:]
        elif operation == "delete":
            key = key[:at] + key[at + 1:]
        else:
            key = key[:at] + draw(st.sampled_from(alphabet)) + key[at + 1:]
    return key


@pytest.fixture(name="guard", scope="module")
def _guard(base) -> str:
    """The workload condition that must select every object that may carry a placement key,
    compiled before Hypothesis runs (importing cel-python raises the recursion limit, which
    Hypothesis warns about when it happens inside a test)."""
    expression = workload_condition(base, "may-carry-a-placement-key")
    cel_program(expression)
    return expression


def misspelling_reaches_the_guard(guard: str, key: str, where: str) -> None:
    """DESIGN.md §5: the guard must see every key within edit distance 3 of a placement key, so the
    workload condition must select the object that carries one."""
    job = pytorchjob(root={key: "x"}) if where == "root" else pytorchjob(worker={key: "x"})
    assert cel_eval(guard, object=job, oldObject=None, request={"operation": "CREATE"}) is True


@needs_kubectl
@settings(max_examples=300, deadline=None)
@given(key=misspelling(), where=st.sampled_from(("root", "worker")))
def test_every_misspelling_within_distance_3_reaches_the_guard(guard, key, where):
    misspelling_reaches_the_guard(guard, key, where)


@pytest.mark.slow
@needs_kubectl
@settings(max_examples=1000, deadline=None)
@given(key=misspelling(), where=st.sampled_from(("root", "worker")))
def test_every_misspelling_within_distance_3_reaches_the_guard_full_search(guard, key, where):
    """The same with 1,000 examples, random on every run under ``-m slow`` (profile ``full``); 3,000 took
    580 s at load average 15."""
    misspelling_reaches_the_guard(guard, key, where)


@needs_kubectl
def test_workload_match_condition_lets_deletions_pass(base):
    expression = workload_condition(base, "not-being-deleted")
    job = pytorchjob(worker={"kai.scheduler/segment-size": "4"})
    assert cel_eval(expression, object=job) is True
    deleting = pytorchjob(worker={"kai.scheduler/segment-size": "4"}, deletionTimestamp="2026-12-02T06:00:00Z")
    assert cel_eval(expression, object=deleting) is False


# ----------------------------------------------------------------- overlays

@needs_kubectl
def test_cert_manager_objects(cert_manager):
    issuers = {d["metadata"]["name"]: d for d in cert_manager if d["kind"] == "Issuer"}
    certs = {d["metadata"]["name"]: d for d in cert_manager if d["kind"] == "Certificate"}
    assert set(issuers) == {"segment-webhook-selfsigned", "segment-webhook-ca"}
    assert set(certs) == {"segment-webhook-ca", "segment-webhook-serving"}
    for d in list(issuers.values()) + list(certs.values()):
        assert d["apiVersion"] == "cert-manager.io/v1"
        assert d["metadata"]["namespace"] == NAMESPACE
    assert issuers["segment-webhook-selfsigned"]["spec"] == {"selfSigned": {}}
    ca = certs["segment-webhook-ca"]["spec"]
    assert ca["isCA"] is True
    assert ca["issuerRef"]["name"] == "segment-webhook-selfsigned" and ca["issuerRef"]["kind"] == "Issuer"
    assert issuers["segment-webhook-ca"]["spec"] == {"ca": {"secretName": ca["secretName"]}}
    serving = certs["segment-webhook-serving"]["spec"]
    # required fields of a cert-manager v1 Certificate: secretName, issuerRef.name
    assert serving["secretName"] == "segment-webhook-tls"
    assert serving["issuerRef"]["name"] == "segment-webhook-ca" and serving["issuerRef"]["kind"] == "Issuer"
    assert "segment-webhook.segment-webhook-system.svc" in serving["dnsNames"]
    assert "segment-webhook.segment-webhook-system.svc.cluster.local" in serving["dnsNames"]
    assert "server auth" in serving["usages"]

    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        cfg = one(cert_manager, kind)
        assert cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "segment-webhook-system/segment-webhook-serving"
    pod = one(cert_manager, "Deployment")["spec"]["template"]["spec"]
    secret_names = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    assert secret_names == ["segment-webhook-tls"]


@needs_kubectl
def test_self_signed_overlay_carries_the_generated_ca(self_signed):
    docs, ca_pem = self_signed
    secret = one(docs, "Secret")
    assert secret["metadata"]["name"].startswith("segment-webhook-tls-")  # name hash: Deployment rolls on rotation
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["type"] == "kubernetes.io/tls"
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]  # never ca.key
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca_pem  # ca-bundle.crt: one CA so far
    assert base64.b64decode(secret["data"]["tls.key"]).startswith(b"-----BEGIN PRIVATE KEY-----")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v] == [secret["metadata"]["name"]]
    bundles = 0
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in one(docs, kind)["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem
            bundles += 1
    assert bundles == 3


def _ca_bundles(docs: list[dict]) -> set[bytes]:
    return {base64.b64decode(hook["clientConfig"]["caBundle"])
            for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for hook in one(docs, kind)["webhooks"]}


@needs_kubectl
def test_self_signed_rendered_twice_with_certs_between_keeps_the_ca_bundle(tmp_path):
    """The README's rotation: `certs` then render, `certs` again then render. The caBundle stays
    the same (the CA is kept), the serving certificate and the Secret's name (so the pods) change.
    With --new-ca the caBundle holds the new and the old CA, until the next plain run."""
    deploy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("*.crt", "*.key"))
    certs_dir = deploy / "overlays" / "self-signed" / "certs"

    def certs_then_render(*extra):
        out = subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(certs_dir), *extra],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        docs = kustomize(deploy / "overlays" / "self-signed")
        secret = one(docs, "Secret")
        return docs, secret["metadata"]["name"], base64.b64decode(secret["data"]["tls.crt"])

    first, first_name, first_tls = certs_then_render()
    second, second_name, second_tls = certs_then_render()
    ca = (certs_dir / "ca.crt").read_bytes()
    assert _ca_bundles(first) == _ca_bundles(second) == {ca}
    assert second_tls != first_tls and second_name != first_name

    third, _, _ = certs_then_render("--new-ca")
    new_ca = (certs_dir / "ca.crt").read_bytes()
    assert new_ca != ca
    assert _ca_bundles(third) == {new_ca + ca}
    fourth, _, _ = certs_then_render()
    assert _ca_bundles(fourth) == {new_ca}


def test_self_signed_certs_dir_is_git_ignored():
    ignore = (DEPLOY / "overlays" / "self-signed" / "certs" / ".gitignore").read_text().split()
    assert ignore == ["*", "!.gitignore"]


# ----------------------------------------------------------------- the DistributedWorkload CRD

@pytest.fixture(scope="module")
def crd():
    return yaml.safe_load(CRD_FILE.read_text())


@pytest.fixture(scope="module")
def dw_schema(crd):
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_crd_shape(crd):
    kubernetes_validate.validate(crd, K8S_VERSION, strict=True)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    spec = crd["spec"]
    assert spec["group"] == "segments.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "distributedworkloads"
    assert spec["names"]["kind"] == "DistributedWorkload"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] is True and version["storage"] is True
    assert version["subresources"] == {"status": {}}
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert props["required"] == ["framework", "workers", "worker"]
    assert props["properties"]["framework"]["enum"] == ["PyTorch", "TensorFlow", "MPI", "XGBoost", "JAX"]
    assert props["properties"]["workers"]["minimum"] == 1
    assert props["properties"]["workersPerSegment"]["minimum"] == 2


def _structural(schema, path="openAPIV3Schema"):
    """Kubernetes structural-schema rules this CRD relies on: every node has a type, no $ref."""
    assert "$ref" not in schema, f"{path}: $ref is not allowed in a CRD schema"
    assert "type" in schema, f"{path}: missing type"
    for name, sub in (schema.get("properties") or {}).items():
        _structural(sub, f"{path}.properties.{name}")
    if "items" in schema:
        _structural(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        _structural(schema["additionalProperties"], f"{path}.additionalProperties")


def test_crd_schema_is_structural(dw_schema):
    _structural(dw_schema)


def test_native_example_is_valid(dw_schema):
    example = yaml.safe_load((EXAMPLES / "distributedworkload-native.yaml").read_text())
    jsonschema.validate(example, dw_schema)
    assert example["spec"]["workersPerSegment"] == 8


def _errors(schema, obj) -> dict[str, str]:
    validator = jsonschema.Draft7Validator(schema)
    return {".".join(map(str, e.absolute_path)): e.validator for e in validator.iter_errors(obj)}


def test_bad_distributed_workload_fails_naming_the_fields(dw_schema):
    bad = yaml.safe_load((EXAMPLES / "distributedworkload-native.yaml").read_text())
    bad["spec"]["framework"] = "Foo"
    bad["spec"]["workers"] = 0
    assert _errors(dw_schema, bad) == {"spec.framework": "enum", "spec.workers": "minimum"}


@pytest.mark.parametrize("mutate, field, rule", [
    (lambda s: s.update(workersPerSegment=1), "spec.workersPerSegment", "minimum"),
    (lambda s: s.update(workers="32"), "spec.workers", "type"),
    (lambda s: s.pop("framework"), "spec", "required"),
    (lambda s: s.pop("worker"), "spec", "required"),
    (lambda s: s["worker"].pop("template"), "spec.worker", "required"),
    (lambda s: s["worker"]["template"]["spec"].pop("containers"), "spec.worker.template.spec", "required"),
    (lambda s: s.update(master={"template": {"metadata": {"annotations": {"a": 1}}, "spec": {"containers": [{"name": "m"}]}}}),
     "spec.master.template.metadata.annotations.a", "type"),
])
def test_more_bad_distributed_workloads(dw_schema, mutate, field, rule):
    bad = yaml.safe_load((EXAMPLES / "distributedworkload-native.yaml").read_text())
    mutate(bad["spec"])
    assert _errors(dw_schema, bad) == {field: rule}


def test_crd_cel_rules_present(dw_schema):
    rules = [r["rule"] for r in dw_schema["properties"]["spec"]["x-kubernetes-validations"]]
    assert rules == [
        "!has(self.workersPerSegment) || self.framework == 'PyTorch'",
        "!has(self.workersPerSegment) || self.workersPerSegment <= self.workers",
    ]


@pytest.mark.parametrize("spec, expected", [
    ({"framework": "PyTorch", "workers": 32, "workersPerSegment": 8}, [True, True]),
    ({"framework": "JAX", "workers": 32}, [True, True]),
    # DESIGN.md §3: workersPerSegment with another framework is denied
    ({"framework": "JAX", "workers": 32, "workersPerSegment": 8}, [False, True]),
    # DESIGN.md §5: segment size > replica count is denied
    ({"framework": "PyTorch", "workers": 4, "workersPerSegment": 8}, [True, False]),
    ({"framework": "PyTorch", "workers": 8, "workersPerSegment": 8}, [True, True]),
])
def test_crd_cel_rules_evaluate(dw_schema, spec, expected):
    rules = [r["rule"] for r in dw_schema["properties"]["spec"]["x-kubernetes-validations"]]
    assert [cel_eval(rule, self=spec) for rule in rules] == expected


def _pruning_schema(node):
    """CRD schema -> JSON Schema with the API server's pruning made strict: an object with
    ``properties`` and no ``x-kubernetes-preserve-unknown-fields`` rejects unknown fields (the API
    server would silently drop them, so a patch writing there would be lost)."""
    if isinstance(node, list):
        return [_pruning_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: ({p: _pruning_schema(s) for p, s in v.items()} if k == "properties" else _pruning_schema(v))
           for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def test_webhook_patch_of_the_native_example_fits_the_crd(dw_schema):
    """The webhook's automatic placement (DESIGN.md §6, native kind) writes annotations the CRD
    keeps: the patched object validates with pruning made strict."""
    from webhook.admission.config import AdmissionSettings
    from webhook.admission.review import review
    from webhook.topology.objects import default_catalog

    obj = yaml.safe_load((EXAMPLES / "distributedworkload-native.yaml").read_text())
    request = {
        "uid": "0", "operation": "CREATE", "namespace": "team-a", "name": "llama-tp8",
        "kind": {"group": "segments.dev", "version": "v1alpha1", "kind": "DistributedWorkload"},
        "resource": {"group": "segments.dev", "version": "v1alpha1", "resource": "distributedworkloads"},
        "userInfo": {"username": "alice"}, "object": obj,
    }
    decision = review(request, default_catalog(), AdmissionSettings(default_topology="cluster-topology"))
    assert decision.allowed, decision.message
    patched = jsonpatch.apply_patch(obj, decision.patch)
    strict = _pruning_schema(dw_schema)
    strict["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: validated by the API server itself
    jsonschema.validate(patched, strict)
    annotations = patched["spec"]["worker"]["template"]["metadata"]["annotations"]
    assert annotations["kai.scheduler/segment-size"] == "8"
    assert annotations["kai.scheduler/segment-topology-preferred-placement"] == "kubernetes.io/hostname"
    # the strict schema does reject a field the API server would prune
    stray = copy.deepcopy(patched)
    stray["spec"]["worker"]["segmentSize"] = 8
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(stray, strict)


@needs_kubectl
@pytest.mark.parametrize("overlay", ["base"] + OVERLAYS)
def test_every_image_names_a_tag_or_digest(overlay, tmp_path):
    """Issue 17: an image without a tag or digest is never pullable as meant (``:latest`` at best);
    every container of every render names one, set in deploy/components/image."""
    docs = kustomize(DEPLOY / "base") if overlay == "base" else render_overlay(overlay, tmp_path)
    images = [container["image"] for doc in docs if doc["kind"] == "Deployment"
              for container in doc["spec"]["template"]["spec"]["containers"]]
    assert images, f"{overlay}: no Deployment rendered"
    for image in images:
        name = image.split("@", 1)[0].rsplit("/", 1)[-1]
        assert "@sha256:" in image or ":" in name, f"{overlay}: image {image!r} has no tag or digest"
        assert image == IMAGE

