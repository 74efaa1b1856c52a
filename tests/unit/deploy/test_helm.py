"""The Helm chart deploy/helm/segment-webhook, rendered by ``helm`` built from helm.sh/helm/v3
(hack/go/helm, ``hack/local-cluster.sh build``) and compared object by object with the kustomize
overlays rendered by ``kubectl kustomize``.

The only differences allowed are Helm's own, removed before comparing and checked to be there:
the release labels ``helm.sh/chart``, ``app.kubernetes.io/managed-by``, ``app.kubernetes.io/instance``
and ``app.kubernetes.io/version`` on every object; ``helm.sh/resource-policy: keep`` on the CRD
(``helm uninstall`` keeps it and every DistributedWorkload); with self-signed certificates the pod
template annotation ``checksum/tls`` (a new certificate rolls the pods; kustomize does it by a hash
suffix on the Secret's name, which is removed from the kustomize render instead).

In CI (``CI=true``) a missing helm or kubectl fails; elsewhere these tests are skipped with one line.
The ``cluster`` test installs the chart on a local control plane of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402  (hack/local_cluster.py)

CHART = REPO / "deploy" / "helm" / "segment-webhook"
DEPLOY = REPO / "deploy"
RELEASE = "segment-webhook"
#: Helm's release labels on every object the chart renders (Chart.yaml: version 0.1.0, appVersion 0.1.0).
HELM_LABELS = {"helm.sh/chart": "segment-webhook-0.1.0", "app.kubernetes.io/managed-by": "Helm",
               "app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/version": "0.1.0"}
IMAGE = "ghcr.io/segment-webhook/segment-webhook"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def missing(tool: str, how: str) -> None:
    """Skip (one line) outside CI, fail in CI, when ``tool`` is not available."""
    message = f"{tool} is not built: {how}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI must have it: .ci/run builds it)", pytrace=False)
    pytest.skip(message)


class Helm:
    """The built helm, with its cache, config and data homes in ``home`` (never the user's)."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = dict(os.environ, HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
                        HELM_DATA_HOME=str(home / "data"))

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``helm ARGS``; with ``check`` a non-zero exit fails the test with helm's stderr."""
        done = subprocess.run([str(self.binary), *args], capture_output=True, text=True, timeout=300, env=self.env)
        if check:
            assert done.returncode == 0, f"helm {' '.join(args)} exited {done.returncode}: {done.stderr}"
        return done

    def template(self, *values: str) -> list[dict]:
        """``helm template segment-webhook CHART VALUES...``: the rendered objects."""
        return [doc for doc in yaml.safe_load_all(self.run("template", RELEASE, str(CHART), *values).stdout) if doc]


@pytest.fixture(scope="module")
def helm(tmp_path_factory) -> Helm:
    """The helm ``hack/local-cluster.sh build`` made (hack/go/helm)."""
    binary = local_cluster.upstream_binary("helm")
    if not binary.is_file():
        missing("helm", "hack/local-cluster.sh build (helm.sh/helm/v3 from hack/go/helm)")
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def kubectl() -> str:
    """The kubectl on PATH, else the one ``hack/local-cluster.sh build`` made."""
    found = shutil.which("kubectl")
    if found:
        return found
    if local_cluster.built():
        return str(local_cluster.build_target() / "kubectl")
    missing("kubectl", "hack/local-cluster.sh build")
    raise AssertionError("unreachable")


def kustomize(kubectl: str, path: Path) -> list[dict]:
    done = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {path}: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def without_helm_additions(docs: list[dict]) -> list[dict]:
    """The chart's objects with Helm's own additions (module docstring) checked and removed."""
    for doc in docs:
        metadata = doc["metadata"]
        labels = metadata["labels"]
        for key, value in HELM_LABELS.items():
            assert labels.pop(key, None) == value, f"{doc['kind']}/{metadata['name']}: label {key} is not {value!r}"
        annotations = metadata.get("annotations", {})
        if doc["kind"] == "CustomResourceDefinition":
            assert annotations.pop("helm.sh/resource-policy") == "keep"
        if "annotations" in metadata and not annotations:
            del metadata["annotations"]
        template = doc.get("spec", {}).get("template", {}).get("metadata", {})
        checksum = template.get("annotations", {}).pop("checksum/tls", None)
        assert checksum is None or re.fullmatch(r"[0-9a-f]{64}", checksum), checksum
    return docs


def without_base64_line_breaks(docs: list[dict]) -> list[dict]:
    """Base64 values (Secret ``data``, webhook ``caBundle``) without the line breaks kustomize
    writes into long ones (kube-apiserver's base64 decoding skips them: the same bytes)."""
    for doc in docs:
        if doc["kind"] == "Secret":
            doc["data"] = {key: value.replace("\n", "") for key, value in doc["data"].items()}
        for hook in doc.get("webhooks", []):
            if "caBundle" in hook["clientConfig"]:
                hook["clientConfig"]["caBundle"] = hook["clientConfig"]["caBundle"].replace("\n", "")
    return docs


def without_secret_hash(docs: list[dict]) -> list[dict]:
    """The kustomize render with secretGenerator's hash suffix removed from Secret
    ``segment-webhook-tls-<hash>`` and from the Deployment volume that names it."""
    hashed = [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"]
    assert len(hashed) == 1 and re.fullmatch(r"segment-webhook-tls-[a-z0-9]{10}", hashed[0]), hashed
    for doc in docs:
        if doc["kind"] == "Secret":
            doc["metadata"]["name"] = "segment-webhook-tls"
        if doc["kind"] == "Deployment":
            for volume in doc["spec"]["template"]["spec"].get("volumes", []):
                if volume.get("secret", {}).get("secretName") == hashed[0]:
                    volume["secret"]["secretName"] = "segment-webhook-tls"
    return docs


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Paths where ``left`` (helm) and ``right`` (kustomize) differ, with both values."""
    if isinstance(left, dict) and isinstance(right, dict):
        found = []
        for key in sorted(set(left) | set(right), key=str):
            if key not in left or key not in right:
                found.append(f"{path}.{key}: helm {left.get(key, '<absent>')!r} / kustomize {right.get(key, '<absent>')!r}")
            else:
                found += differences(left[key], right[key], f"{path}.{key}")
        return found
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [line for index, (a, b) in enumerate(zip(left, right)) for line in differences(a, b, f"{path}[{index}]")]
    return [] if left == right else [f"{path}: helm {left!r} / kustomize {right!r}"]


def assert_same_objects(helm_docs: list[dict], kustomize_docs: list[dict]) -> None:
    """Both renders hold the same objects (by apiVersion, kind, namespace, name), field by field."""
    def index(docs: list[dict]) -> dict[tuple[str, str, str, str], dict]:
        keyed = {(d["apiVersion"], d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
                 for d in docs}
        assert len(keyed) == len(docs), "two objects with the same apiVersion, kind, namespace and name"
        return keyed

    from_helm, from_kustomize = index(helm_docs), index(kustomize_docs)
    assert sorted(from_helm) == sorted(from_kustomize)
    found = [f"{'/'.join(key[1:])}: {line}" for key, expected in sorted(from_kustomize.items())
             for line in differences(from_helm[key], expected)]
    assert not found, "helm template and kubectl kustomize differ:\n" + "\n".join(found)


def test_helm_is_built_from_the_pinned_module_by_the_hack_build(monkeypatch, capsys):
    helm = local_cluster.TOOLS["helm"]
    assert (helm.module, helm.package, helm.binary) == ("helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm", "helm")
    assert local_cluster.module_version("helm", "helm.sh/helm/v3") == "v3.22.0"
    flags = helm.ldflags().split()
    # helm's Makefile: the release version, and Kubernetes 1.<client-go minor> (helm v3.22.0 requires
    # k8s.io/client-go v0.37.0) as the version `helm template` and `helm lint` assume
    assert "-X=helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    assert "-X=helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in flags
    assert "-X=helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" in flags
    assert local_cluster.upstream_target("helm").name.startswith("helm-v3.22.0-")
    built: list[str] = []
    monkeypatch.setattr(local_cluster, "build", lambda log=None: Path("/control-plane"))
    monkeypatch.setattr(local_cluster, "build_upstream", lambda name, log=None: built.append(name))
    assert local_cluster.main(["build"]) == 0
    assert "helm" in built
    assert capsys.readouterr().out.splitlines()[-1] == "/control-plane"


def test_helm_lint_strict(helm):
    for values in ([], ["--set", "controller.enabled=true"]):
        done = helm.run("lint", "--strict", str(CHART), *values)
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_default_values_render_the_cert_manager_overlay(helm, kubectl):
    # the default install (deploy/overlays/cert-manager): 15 objects
    helm_docs = without_helm_additions(helm.template())
    kustomize_docs = kustomize(kubectl, DEPLOY / "overlays" / "cert-manager")
    assert len(kustomize_docs) == 15
    assert_same_objects(helm_docs, kustomize_docs)


def test_controller_enabled_renders_the_with_controller_overlay(helm, kubectl):
    helm_docs = without_helm_additions(helm.template("--set", "controller.enabled=true"))
    assert_same_objects(helm_docs, kustomize(kubectl, DEPLOY / "overlays" / "with-controller"))


def test_controller_advise_renders_the_advisory_overlay(helm, kubectl):
    """controller.advise (DESIGN.md §13, issue 36): the controller runs --advise, the webhook gates no
    pod, the controller may read Kueue's Workloads: the same objects as deploy/overlays/advisory."""
    helm_docs = without_helm_additions(helm.template("--set", "controller.enabled=true", "--set", "controller.advise=true"))
    assert_same_objects(helm_docs, kustomize(kubectl, DEPLOY / "overlays" / "advisory"))
    role = next(d for d in helm_docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "segment-webhook-controller")
    assert role["rules"][-1] == {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
                                 "verbs": ["get", "list", "watch"]}
    controller = next(d for d in helm_docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "segment-webhook-controller")
    assert controller["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--advise"
    webhook = next(d for d in helm_docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "segment-webhook")
    assert "SEGMENT_WEBHOOK_GATE_PODS" not in [e["name"] for e in webhook["spec"]["template"]["spec"]["containers"][0]["env"]]


def test_self_signed_renders_the_self_signed_overlay_with_the_same_files(helm, kubectl, tmp_path):
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("*.crt", "*.key", "helm"))
    certs = copy / "overlays" / "self-signed" / "certs"
    made = subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(certs)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert made.returncode == 0, made.stderr
    helm_docs = without_helm_additions(helm.template(
        "--set", "certificates.mode=self-signed",
        "--set-file", f"certificates.selfSigned.caBundle={certs / 'ca-bundle.crt'}",
        "--set-file", f"certificates.selfSigned.tlsCrt={certs / 'tls.crt'}",
        "--set-file", f"certificates.selfSigned.tlsKey={certs / 'tls.key'}"))
    kustomize_docs = without_base64_line_breaks(without_secret_hash(kustomize(kubectl, copy / "overlays" / "self-signed")))
    assert_same_objects(helm_docs, kustomize_docs)


def test_values_reach_the_objects(helm):
    docs = helm.template("--set", "controller.enabled=true", "--set", f"image.digest={DIGEST}",
                         "--set", "webhook.replicas=3", "--set", "controller.replicas=1",
                         "--set", "webhook.resources.limits.memory=1Gi", "--set", "webhook.url=https://10.0.0.7:9443",
                         "--set", "namespace.name=gpu-admission")
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert {name: d["spec"]["replicas"] for name, d in deployments.items()} == \
        {"segment-webhook": 3, "segment-webhook-controller": 1}
    for deployment in deployments.values():
        assert deployment["metadata"]["namespace"] == "gpu-admission"
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"{IMAGE}@{DIGEST}"
    webhook = deployments["segment-webhook"]["spec"]["template"]["spec"]["containers"][0]
    assert webhook["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    configurations = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    assert [hook["clientConfig"] for c in configurations for hook in c["webhooks"]] == [
        {"url": "https://10.0.0.7:9443/mutate"}, {"url": "https://10.0.0.7:9443/mutate"},
        {"url": "https://10.0.0.7:9443/validate"}]
    serving = next(d for d in docs if d["kind"] == "Certificate" and d["metadata"]["name"] == "segment-webhook-serving")
    assert serving["spec"]["commonName"] == "segment-webhook.gpu-admission.svc"


def test_bad_values_are_refused_naming_the_field(helm):
    unknown = helm.run("template", RELEASE, str(CHART), "--set", "certificates.mode=vault", check=False)
    assert unknown.returncode == 1
    assert "- at '/certificates/mode': value must be one of 'cert-manager', 'self-signed'" in unknown.stderr
    no_files = helm.run("template", RELEASE, str(CHART), "--set", "certificates.mode=self-signed", check=False)
    assert no_files.returncode == 1
    assert ("certificates.selfSigned.caBundle is empty (rule: certificates.mode self-signed needs the files of "
            "`segment-webhook certs`); fix: segment-webhook certs --out certs, then --set-file "
            "certificates.selfSigned.caBundle=certs/ca-bundle.crt") in no_files.stderr


def _webhook_container(docs: list[dict]) -> dict:
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "segment-webhook")
    return deployment["spec"]["template"]["spec"]["containers"][0]


#: serve's flags the chart sets from the pod itself, not from a value: where it listens and finds
#: its certificate (args), the in-cluster configuration instead of a kubeconfig, the Topology
#: objects of the cluster instead of files, the gate with the controller (controller.enabled).
SET_BY_THE_POD = {"--bind", "--cert-dir", "--kubeconfig", "--topology-file", "--gate-pods"}


def test_every_serve_setting_is_a_chart_value(helm):
    """Issue 35: the chart sets every `serve` setting a user needs, the target included (the
    schema refused `webhook.target=kueue`). Each serve flag is set by a value (its
    SEGMENT_WEBHOOK_* variable in the container's env) or by the pod (SET_BY_THE_POD)."""
    from webhook.cli import build_parser

    commands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    serve = commands.choices["serve"]
    # the flags serve lists (a removed one, --threads, is kept hidden only to explain its removal)
    flags = {option for action in serve._actions for option in action.option_strings
             if option.startswith("--") and action.help != argparse.SUPPRESS}
    flags.discard("--help")
    docs = helm.template("--set", "webhook.target=kueue", "--set", "webhook.kueueVersion=0.20",
                         "--set", "webhook.readTimeout=2.5",
                         "--set", "webhook.segmentEnv=true", "--set", "webhook.workers=3",
                         "--set", "webhook.defaultTopology=racks", "--set", "webhook.platformUsers={a,b}",
                         "--set", "webhook.platformGroups={g}")
    container = _webhook_container(docs)
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    assert env["SEGMENT_WEBHOOK_TARGET"] == "kueue"
    assert env["SEGMENT_WEBHOOK_READ_TIMEOUT"] == "2.5"
    assert env["SEGMENT_WEBHOOK_SEGMENT_ENV"] == "true"
    assert env["SEGMENT_WEBHOOK_WORKERS"] == "3"
    assert env["SEGMENT_WEBHOOK_DEFAULT_TOPOLOGY"] == "racks"
    assert env["SEGMENT_WEBHOOK_PLATFORM_USER"] == "a,b"
    assert env["SEGMENT_WEBHOOK_PLATFORM_GROUP"] == "g"
    by_value = {"--" + name.removeprefix("SEGMENT_WEBHOOK_").lower().replace("_", "-") for name in env
                if name.startswith("SEGMENT_WEBHOOK_")}
    assert flags - by_value - SET_BY_THE_POD == set()
    assert env["SEGMENT_WEBHOOK_KUEUE_VERSION"] == "0.20"
    assert [arg for arg in container["args"] if arg.startswith("--")] == ["--bind", "--cert-dir"]
    gated = helm.template("--set", "webhook.target=workload-api", "--set", "controller.enabled=true")
    gated_env = {item["name"]: item.get("value") for item in _webhook_container(gated)["env"]}
    assert gated_env["SEGMENT_WEBHOOK_TARGET"] == "workload-api"
    assert gated_env["SEGMENT_WEBHOOK_GATE_PODS"] == "true"
    defaults = {item["name"] for item in _webhook_container(helm.template())["env"]}
    assert "SEGMENT_WEBHOOK_TARGET" not in defaults and "SEGMENT_WEBHOOK_READ_TIMEOUT" not in defaults


def test_bad_serve_settings_are_refused_naming_the_field(helm):
    unknown = helm.run("template", RELEASE, str(CHART), "--set", "webhook.target=volcano", check=False)
    assert unknown.returncode == 1
    assert ("- at '/webhook/target': value must be one of '', 'kai', 'kueue', 'workload-api', 'gate'"
            in unknown.stderr)
    slow = helm.run("template", RELEASE, str(CHART), "--set", "webhook.readTimeout=301", check=False)
    assert slow.returncode == 1
    assert "- at '/webhook/readTimeout': maximum: got 301, want 300" in slow.stderr
    # --set gives 300.5 as a string: the template checks the range
    slow = helm.run("template", RELEASE, str(CHART), "--set", "webhook.readTimeout=300.5", check=False)
    assert slow.returncode == 1
    assert ("webhook.readTimeout: 300.5 is out of range (rule: serve --read-timeout takes 0.1..300 seconds); "
            "fix: --set webhook.readTimeout=10") in slow.stderr
    words = helm.run("template", RELEASE, str(CHART), "--set", "webhook.readTimeout=ten", check=False)
    assert words.returncode == 1
    assert "- at '/webhook/readTimeout': 'ten' does not match pattern '^[0-9]+(\\\\.[0-9]+)?$'" in words.stderr
    for target in ("gate", "workload-api"):
        alone = helm.run("template", RELEASE, str(CHART), "--set", f"webhook.target={target}", check=False)
        assert alone.returncode == 1
        assert (f'webhook.target: "{target}" needs the gang controller (rule: under target {target} the controller '
                f"makes what releases the pods, docs/concepts/targets.md); fix: --set controller.enabled=true, or another "
                f"webhook.target") in alone.stderr


# ------------------------------------------------------------------------- on the local control plane

@pytest.fixture(scope="module")
def plane(helm, tmp_path_factory):
    """A local control plane of its own (``up`` without ``--webhook``: the chart installs it)."""
    if os.environ.get("CI") != "true" and not local_cluster.built():
        pytest.skip("helm cluster test: control-plane binaries not built (hack/local-cluster.sh build)")
    try:
        cluster = local_cluster.up(tmp_path_factory.mktemp("helm-cluster") / "cluster", webhook=False, gate_pods=False)
    except local_cluster.ClusterError as error:
        pytest.fail(f"local control plane did not start: {error}", pytrace=False)
    yield cluster
    cluster.stop_all()


@pytest.mark.cluster
def test_helm_install_gives_a_working_webhook(helm, plane, capsys):
    """``helm install`` (release record in ``default``, objects in segment-webhook-system) with self-signed certificates and ``webhook.url`` on loopback (no kubelet
    runs the Deployment's pods here); ``serve`` runs locally with the installed Deployment's
    args and env under a token of the chart's ServiceAccount, as ``up --webhook`` runs deploy/'s.
    A server-side dry run of a worker pod comes back labelled; ``helm uninstall`` removes the
    webhook configurations and keeps the CRD."""
    kubeconfig = ["--kubeconfig", str(plane.kubeconfig)]
    certs = plane.dir / "helm-certs"
    plane.segment_webhook("certs", "--out", str(certs))
    port = plane.state["ports"]["segment-webhook"] = local_cluster.free_port()
    started = time.monotonic()
    helm.run("install", RELEASE, str(CHART), *kubeconfig, "--namespace", "default",
             "--set", "certificates.mode=self-signed",
             "--set-file", f"certificates.selfSigned.caBundle={certs / 'ca-bundle.crt'}",
             "--set-file", f"certificates.selfSigned.tlsCrt={certs / 'tls.crt'}",
             "--set-file", f"certificates.selfSigned.tlsKey={certs / 'tls.key'}",
             "--set", f"webhook.url=https://127.0.0.1:{port}")
    installed = time.monotonic() - started
    manifest = [d for d in yaml.safe_load_all(helm.run("get", "manifest", RELEASE, *kubeconfig,
                                                       "--namespace", "default").stdout) if d]
    deployment = next(d for d in manifest if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    namespace = deployment["metadata"]["namespace"]
    token = plane.kubectl("create", "token", "segment-webhook", "-n", namespace, "--duration", "1h").stdout.strip()
    account_kubeconfig = plane.dir / "helm-webhook.kubeconfig"
    local_cluster.write_kubeconfig(account_kubeconfig, f"https://127.0.0.1:{plane.state['ports']['kube-apiserver']}",
                                   plane.dir / "pki" / "ca.crt", "segment-webhook", token)
    plane.state["webhook_argv"] = local_cluster.local_serve_argv(container["args"], port, certs, account_kubeconfig)
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    env.update(PROMETHEUS_MULTIPROC_DIR=str(plane.dir / "helm-metrics"), TMPDIR=str(plane.dir / "helm-tmp"))
    plane.state["webhook_env"] = env
    plane.run_webhook(gate_pods=False)

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "pytorch-tp4-worker-5", "namespace": "default",
                        "labels": {"training.kubeflow.org/job-name": "pytorch-tp4",
                                   "training.kubeflow.org/replica-type": "worker",
                                   "training.kubeflow.org/replica-index": "5"},
                        "annotations": {"kai.scheduler/topology": "cluster-topology",
                                        "kai.scheduler/segment-size": "4"}},
           "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]}}
    dry_run = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input_text=json.dumps(pod))
    labels = json.loads(dry_run.stdout)["metadata"]["labels"]
    # DESIGN.md §2/§7: Worker replica 5 of segment size 4 is in segment 1, subgroup worker-1
    assert labels["kai.scheduler/segment-index"] == "1"
    assert labels["kai.scheduler/subgroup-name"] == "worker-1"

    helm.run("uninstall", RELEASE, *kubeconfig, "--namespace", "default")
    gone = plane.kubectl("get", "mutatingwebhookconfiguration", "segment-webhook", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr
    assert plane.kubectl("get", "crd", "distributedworkloads.segments.dev", check=False).returncode == 0
    plane.stop_component("segment-webhook")
    with capsys.disabled():
        print(f"\nhelm: install {installed:.1f} s; a worker pod's dry run labelled segment 1 through the chart's "
              f"webhook configuration")
