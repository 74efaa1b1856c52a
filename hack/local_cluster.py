"""Local control plane built from published Go modules (DESIGN.md §11).

Usage (through ``hack/local-cluster.sh``)::

    local-cluster.sh build                 # last line of stdout: the directory of the binaries
    local-cluster.sh up DIR [--webhook] [--gate-pods]
    local-cluster.sh down DIR

``build`` compiles etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from
the modules pinned by ``hack/go/*/go.mod`` (fetched from the Go module proxy; no upstream source is
kept in this repository) into a cache outside the checkout, keyed by the hash of those go.mod and
go.sum files: ``$SEGMENT_WEBHOOK_CLUSTER_CACHE`` or ``~/.cache/segment-webhook/cluster``. A second
``build`` with the same pins reuses the binaries.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import yaml

HACK = Path(__file__).resolve().parent
GO_MODULES = HACK / "go"

#: binary name -> (our module directory, Go package built).
BINARIES: dict[str, tuple[str, str]] = {
    "etcd": ("etcd", "go.etcd.io/etcd/server/v3"),
    "kube-apiserver": ("kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver"),
    "kube-controller-manager": ("kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    "kube-scheduler": ("kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler"),
    "kubectl": ("kubernetes", "k8s.io/kubernetes/cmd/kubectl"),
}


class ClusterError(RuntimeError):
    """A component could not be built or started; the message names it."""


def cache_root() -> Path:
    """Where built binaries live: ``$SEGMENT_WEBHOOK_CLUSTER_CACHE``, else ``~/.cache/...``."""
    configured = os.environ.get("SEGMENT_WEBHOOK_CLUSTER_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "segment-webhook" / "cluster"


def module_version(module_dir: str, module: str) -> str:
    """The version ``hack/go/<module_dir>/go.mod`` requires of ``module`` (e.g. ``v1.37.2``)."""
    for line in (GO_MODULES / module_dir / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise ClusterError(f"hack/go/{module_dir}/go.mod does not require {module}")


def pins_digest() -> str:
    """A short hash of every go.mod and go.sum under hack/go: the cache key of a build."""
    digest = hashlib.sha256()
    for path in sorted(GO_MODULES.glob("*/go.*")):
        digest.update(path.relative_to(GO_MODULES).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _version_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    pairs = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X={package}.{key}={value}" for key, value in pairs.items()]
    return " ".join(flags)


def built() -> bool:
    """True when the binaries of the pinned versions are in the cache (``build`` would reuse them)."""
    return all((build_target() / name).is_file() for name in BINARIES)


def build_target() -> Path:
    """The cache directory of the pinned versions: ``<cache>/<kubernetes version>-<pins digest>``."""
    return cache_root() / f"{module_version('kubernetes', 'k8s.io/kubernetes')}-{pins_digest()}"


def build(log=sys.stderr) -> Path:
    """Build (or reuse) the control-plane binaries; return the directory that holds them.

    Raises:
        ClusterError: ``go`` is missing or a ``go build`` failed (its output is in the message).
    """
    if shutil.which("go") is None:
        raise ClusterError("build: no `go` on PATH (Go 1.26 is needed; see README 'Cluster suite')")
    kubernetes_version = module_version("kubernetes", "k8s.io/kubernetes")
    target = build_target()
    if built():
        print(f"build: reusing {target}", file=log)
        return target
    staging = target.with_name(target.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false -trimpath")
    started = time.monotonic()
    for name, (module_dir, package) in BINARIES.items():
        if (staging / name).is_file():
            continue
        print(f"build: {name} ({package})", file=log, flush=True)
        ldflags = _version_ldflags(kubernetes_version) if module_dir == "kubernetes" else "-s -w"
        result = subprocess.run(
            ["go", "build", "-ldflags", ldflags, "-o", str(staging / f"{name}.tmp"), package],
            cwd=GO_MODULES / module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        if result.returncode != 0:
            raise ClusterError(f"build: go build {package} failed:\n{result.stdout[-4000:]}")
        # renamed only once complete: an interrupted build resumes without a half-written binary
        (staging / f"{name}.tmp").rename(staging / name)
    elapsed = time.monotonic() - started
    (staging / "BUILD_SECONDS").write_text(f"{elapsed:.0f}\n")
    staging.rename(target)
    print(f"build: done in {elapsed:.0f} s", file=log)
    return target


# --------------------------------------------------------------------------------------------- up

REPO = HACK.parent
SHARED_CRDS = REPO.parent / "shared" / "crds"
DEPLOY = REPO / "deploy"
ADMIN_TOKEN_USERS = {
    # token file rows: kube-apiserver --token-auth-file (user, uid, groups). The bootstrap RBAC
    # policy binds system:kube-controller-manager and system:kube-scheduler to their roles.
    "admin": ("admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", ""),
    "kube-scheduler": ("system:kube-scheduler", ""),
}
#: seconds each component gets to become healthy.
START_TIMEOUT = {"etcd": 60, "kube-apiserver": 180, "kube-controller-manager": 90,
                 "kube-scheduler": 90, "segment-webhook": 90}
STATE_FILE = "cluster.json"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_open(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class LocalCluster:
    """The processes of one local control plane, recorded in ``DIR/cluster.json``.

    ``DIR/logs/<component>.log`` holds each component's output, ``DIR/pids/<component>.pid`` its
    process id (each runs in its own process group, so ``down`` also stops gunicorn's workers),
    ``DIR/kubeconfig`` the admin kubeconfig. ``state`` maps ``ports`` (component -> port),
    ``bin`` (the binaries' directory) and ``webhook_url``.
    """

    def __init__(self, directory: Path):
        self.dir = directory.resolve()
        self.state: dict = {"ports": {}, "components": []}
        state_path = self.dir / STATE_FILE
        if state_path.is_file():
            self.state = json.loads(state_path.read_text())

    # -- bookkeeping
    def save(self) -> None:
        (self.dir / STATE_FILE).write_text(json.dumps(self.state, indent=2) + "\n")

    def log_path(self, component: str) -> Path:
        return self.dir / "logs" / f"{component}.log"

    def log_tail(self, component: str, lines: int = 40) -> str:
        path = self.log_path(component)
        if not path.is_file():
            return f"(no log at {path})"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def bin(self) -> Path:
        return Path(self.state["bin"])

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
        """Run the built kubectl against this cluster; raise ClusterError on failure when ``check``."""
        result = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input_text, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def start(self, component: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        """Start ``argv`` detached (own session), output to its log, pid recorded."""
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "pids").mkdir(parents=True, exist_ok=True)
        with open(self.log_path(component), "ab") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, cwd=self.dir, start_new_session=True)
        (self.dir / "pids" / f"{component}.pid").write_text(f"{process.pid}\n")
        self.state["components"].append(component)
        self.save()
        return process

    def wait_until(self, component: str, process: subprocess.Popen, ready, what: str) -> None:
        """Poll ``ready()`` until true; raise ClusterError with the log tail if the process exits
        or :data:`START_TIMEOUT` passes."""
        deadline = time.monotonic() + START_TIMEOUT.get(component, 60)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ClusterError(f"{component} exited with status {process.returncode} before {what}:\n"
                                   f"{self.log_tail(component)}")
            try:
                if ready():
                    return
            except (OSError, ssl.SSLError, http.client.HTTPException):
                pass
            time.sleep(0.5)
        raise ClusterError(f"{component} not {what} after {START_TIMEOUT.get(component, 60)} s:\n"
                           f"{self.log_tail(component)}")

    def https_ok(self, port: int, path: str, token: str | None = None) -> bool:
        """True when GET https://127.0.0.1:port/path answers 200 (certificate not verified: a
        readiness probe of our own processes on loopback)."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            connection.request("GET", path, headers=headers)
            return connection.getresponse().status == 200
        finally:
            connection.close()

    # -- the control plane
    def write_credentials(self) -> None:
        """Serving certificate (webhook.http.certs), service account key pair, token file, kubeconfigs."""
        sys.path.insert(0, str(REPO))
        from webhook.http import certs

        pki = self.dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        bundle = certs.generate("kubernetes", "default")
        (pki / "ca.crt").write_bytes(bundle.ca_pem)
        (pki / "apiserver.crt").write_bytes(bundle.cert_pem)
        (pki / "apiserver.key").write_bytes(bundle.key_pem)
        private_pem, public_pem = certs.signing_key_pair()
        (pki / "sa.key").write_bytes(private_pem)
        (pki / "sa.pub").write_bytes(public_pem)
        tokens = {name: secrets.token_hex(24) for name in ADMIN_TOKEN_USERS}
        rows = [f'{tokens[name]},{user},{name}-uid,"{groups}"' for name, (user, groups) in ADMIN_TOKEN_USERS.items()]
        (pki / "tokens.csv").write_text("\n".join(rows) + "\n")
        for path in pki.iterdir():
            path.chmod(0o600)
        server = f"https://127.0.0.1:{self.state['ports']['kube-apiserver']}"
        for name, token in tokens.items():
            target = self.kubeconfig if name == "admin" else pki / f"{name}.kubeconfig"
            write_kubeconfig(target, server, pki / "ca.crt", name, token)
        self.state["admin_token"] = tokens["admin"]
        self.save()

    def start_control_plane(self) -> None:
        ports = self.state["ports"]
        for component in ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            ports[component] = free_port()
        self.save()
        self.write_credentials()
        pki = self.dir / "pki"
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
        etcd = self.start("etcd", [
            str(self.bin / "etcd"), "--name", "local", "--data-dir", str(self.dir / "etcd-data"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"local={peer_url}", "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self.wait_until("etcd", etcd, lambda: _http_ok(ports["etcd"], "/health"), "healthy")
        apiserver = self.start("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(ports["kube-apiserver"]),
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--token-auth-file", str(pki / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--api-audiences", "https://kubernetes.default.svc.cluster.local",
            # the default endpoint reconciler refuses a loopback advertise address; nothing here
            # dials the `kubernetes` Service from a pod
            "--endpoint-reconciler-type", "none",
            "--allow-privileged=true", "--v", "1",
        ])
        token = self.state["admin_token"]
        self.wait_until("kube-apiserver", apiserver,
                        lambda: self.https_ok(ports["kube-apiserver"], "/readyz", token), "ready (/readyz)")
        for component, extra in (
            ("kube-controller-manager", [
                "--service-account-private-key-file", str(pki / "sa.key"),
                "--root-ca-file", str(pki / "ca.crt"),
                "--use-service-account-credentials=false",
                "--cluster-name", "local",
            ]),
            ("kube-scheduler", []),
        ):
            component_kubeconfig = str(pki / f"{component}.kubeconfig")
            process = self.start(component, [
                str(self.bin / component),
                "--kubeconfig", component_kubeconfig,
                "--authentication-kubeconfig", component_kubeconfig,
                "--authorization-kubeconfig", component_kubeconfig,
                "--bind-address", "127.0.0.1", "--secure-port", str(ports[component]),
                "--leader-elect=false", "--v", "1", *extra,
            ])
            self.wait_until(component, process, lambda port=ports[component]: self.https_ok(port, "/healthz"),
                            "healthy (/healthz)")
        self.wait_for_default_service_account()

    def wait_for_default_service_account(self) -> None:
        """kube-controller-manager creates ``default`` ServiceAccounts; pods need one."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise ClusterError("kube-controller-manager: no ServiceAccount default/default after 60 s:\n"
                           + self.log_tail("kube-controller-manager"))

    # -- the webhook, as deploy/ runs it
    def render_deploy(self) -> list[dict]:
        """``kubectl kustomize`` of the self-signed overlay, from a copy of deploy/ whose certs/
        is filled by ``segment-webhook certs`` (the documented step). The serving certificate and
        key are kept in ``DIR/webhook/certs`` for the local ``serve``."""
        copy = self.dir / "webhook" / "deploy"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("*.crt", "*.key"))
        certs_dir = copy / "overlays" / "self-signed" / "certs"
        self.segment_webhook("certs", "--out", str(certs_dir))
        serving = self.dir / "webhook" / "certs"
        serving.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key", "ca.crt"):
            shutil.copy2(certs_dir / name, serving / name)
        rendered = self.kubectl("kustomize", str(copy / "overlays" / "self-signed")).stdout
        return [doc for doc in yaml.safe_load_all(rendered) if doc]

    def segment_webhook(self, *args: str) -> str:
        """Run this checkout's ``segment-webhook`` CLI; return its stdout, raise ClusterError."""
        result = subprocess.run([sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True,
                                env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
        if result.returncode != 0:
            raise ClusterError(f"segment-webhook {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def wait_for_crds(self, timeout: float = 60) -> None:
        """Wait until every CustomResourceDefinition is Established (``kubectl wait`` fails on a
        CRD whose status has no conditions yet, so poll)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            crds = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
            pending = [crd["metadata"]["name"] for crd in crds
                       if not any(condition.get("type") == "Established" and condition.get("status") == "True"
                                  for condition in crd.get("status", {}).get("conditions") or [])]
            if not pending:
                return
            time.sleep(0.5)
        raise ClusterError(f"kube-apiserver: CRDs not Established after {timeout} s: {', '.join(pending)}")

    def apply(self, docs: list[dict]) -> None:
        if docs:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                         input_text=yaml.safe_dump_all(docs, sort_keys=False))

    def start_webhook(self, gate_pods: bool) -> None:
        """Apply deploy/'s objects (the Deployment and Service aside: no kubelet runs pods here),
        the shared CRDs, then ``serve`` with the Deployment's command, args and env under a token of
        its ServiceAccount, then the webhook configurations pointed at it by ``url``."""
        docs = self.render_deploy()
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        webhook_kinds = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
        self.apply([d for d in docs if d["kind"] not in webhook_kinds | {"Deployment", "Service"}])
        for crd_file in sorted(SHARED_CRDS.glob("*.yaml")):
            self.kubectl("apply", "--server-side", "-f", str(crd_file))
        self.wait_for_crds()

        pod_spec = deployment["spec"]["template"]["spec"]
        namespace = deployment["metadata"]["namespace"]
        token = self.kubectl("create", "token", pod_spec["serviceAccountName"], "-n", namespace,
                             "--duration", "24h").stdout.strip()
        webhook_dir = self.dir / "webhook"
        service_account_kubeconfig = webhook_dir / "kubeconfig"
        write_kubeconfig(service_account_kubeconfig, f"https://127.0.0.1:{self.state['ports']['kube-apiserver']}",
                         self.dir / "pki" / "ca.crt", pod_spec["serviceAccountName"], token)
        port = self.state["ports"]["segment-webhook"] = free_port()
        self.save()
        container = pod_spec["containers"][0]
        self.state["webhook_argv"] = local_serve_argv(container["args"], port, webhook_dir / "certs",
                                                      service_account_kubeconfig)
        env = {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}
        env.update(PROMETHEUS_MULTIPROC_DIR=str(webhook_dir / "metrics"), TMPDIR=str(webhook_dir / "tmp"))
        self.state["webhook_env"] = env
        serve = self.run_webhook(gate_pods)

        configurations = [d for d in docs if d["kind"] in webhook_kinds]
        for configuration in configurations:
            for hook in configuration["webhooks"]:
                service = hook["clientConfig"].pop("service")
                hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service.get('path', '/')}"
        self.apply(configurations)
        self.state["webhook_url"] = f"https://127.0.0.1:{port}"
        self.save()
        self.wait_until("segment-webhook", serve, self.review_answers, "answering reviews through kube-apiserver")

    def run_webhook(self, gate_pods: bool) -> subprocess.Popen:
        """Start ``serve`` as recorded by :meth:`start_webhook` (``--gate-pods`` added when asked)
        and wait for its ``/readyz``; a running one is stopped first. Returns the process."""
        self.stop_component("segment-webhook")
        env = dict(os.environ, PYTHONPATH=str(REPO), **self.state["webhook_env"])
        shutil.rmtree(env["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
        for path in (env["PROMETHEUS_MULTIPROC_DIR"], env["TMPDIR"]):
            Path(path).mkdir(parents=True, exist_ok=True)
        argv = list(self.state["webhook_argv"]) + (["--gate-pods"] if gate_pods else [])
        serve = self.start("segment-webhook", [sys.executable, "-m", "webhook.cli", *argv], env=env)
        port = self.state["ports"]["segment-webhook"]
        self.wait_until("segment-webhook", serve, lambda: self.https_ok(port, "/readyz"), "ready (/readyz)")
        return serve

    def review_answers(self) -> bool:
        """True once kube-apiserver calls the webhook: a server-side dry-run create of a worker pod
        of a segmented PyTorchJob comes back with ``kai.scheduler/segment-index`` (DESIGN.md §7)."""
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "local-cluster-probe", "namespace": "default",
                         "labels": {"training.kubeflow.org/job-name": "probe",
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": "5"},
                         "annotations": {"kai.scheduler/topology": "cluster-topology",
                                         "kai.scheduler/segment-size": "4"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
        result = self.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                              input_text=json.dumps(pod), check=False)
        if result.returncode != 0:
            return False
        labels = json.loads(result.stdout)["metadata"].get("labels", {})
        return labels.get("kai.scheduler/segment-index") == "1"

    # -- down
    def stop_component(self, component: str) -> None:
        """Stop one recorded component (SIGTERM to its process group, SIGKILL after 30 s)."""
        pid_file = self.dir / "pids" / f"{component}.pid"
        if pid_file.is_file():
            stop_process_group(int(pid_file.read_text()))
            pid_file.unlink()
        if component in self.state.get("components", []):
            self.state["components"].remove(component)
            self.save()

    def stop_all(self) -> list[str]:
        """Stop every recorded component, newest first; return the ``component:port`` pairs still
        listening afterwards (none expected)."""
        for component in reversed(list(self.state.get("components", []))):
            self.stop_component(component)
        return [f"{name}:{port}" for name, port in self.state.get("ports", {}).items() if port_open(port)]


def stop_process_group(pid: int, grace: float = 30.0) -> None:
    """SIGTERM the process group ``pid`` leads, wait up to ``grace`` s for the leader, then SIGKILL."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
            if finished:
                break
        except ChildProcessError:  # not our child (``down`` in another process): poll its existence
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def local_serve_argv(args: list[str], port: int, cert_dir: Path, kubeconfig: Path) -> list[str]:
    """The Deployment's ``serve`` arguments with the three that name the pod's surroundings
    replaced: ``--bind`` (loopback, ``port``), ``--cert-dir`` and ``--kubeconfig`` (the
    ServiceAccount token; in the pod, the in-cluster configuration)."""
    replaced = {"--bind": f"127.0.0.1:{port}", "--cert-dir": str(cert_dir)}
    argv: list[str] = []
    words = iter(args)
    for word in words:
        flag, equals, _value = word.partition("=")
        if flag in replaced:
            if not equals:
                next(words, None)
            argv += [flag, replaced.pop(flag)]
        else:
            argv.append(word)
    for flag, value in replaced.items():
        argv += [flag, value]
    return argv + ["--kubeconfig", str(kubeconfig)]


def write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> None:
    """A one-context kubeconfig for ``user`` with a bearer ``token`` (mode 0600)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _http_ok(port: int, path: str) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    finally:
        connection.close()


def up(directory: Path, webhook: bool, gate_pods: bool) -> LocalCluster:
    """Start the control plane (and with ``webhook`` the local ``serve``) with state in ``directory``.

    Raises:
        ClusterError: naming the component that failed, with the tail of its log; everything
        started so far has been stopped.
    """
    directory.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(directory)
    if cluster.state.get("components"):
        raise ClusterError(f"up: {directory} already has a running cluster; `down {directory}` first")
    if (directory / "etcd-data").exists():
        shutil.rmtree(directory / "etcd-data")
    cluster.state = {"ports": {}, "components": [], "bin": str(build())}
    cluster.save()
    try:
        started = time.monotonic()
        cluster.start_control_plane()
        if webhook:
            cluster.start_webhook(gate_pods)
        cluster.state["up_seconds"] = round(time.monotonic() - started, 1)
        cluster.save()
    except (ClusterError, subprocess.TimeoutExpired) as error:
        cluster.stop_all()
        raise ClusterError(f"up: {error}") from None
    return cluster


def main(argv: list[str]) -> int:
    """Command-line entry point; returns the exit status (0 done, 1 failed, 2 bad usage)."""
    parser = argparse.ArgumentParser(prog="local-cluster.sh", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build or reuse the binaries; last stdout line: their directory")
    up_parser = commands.add_parser("up", help="start a control plane with state, logs and pids in DIR")
    up_parser.add_argument("dir", type=Path)
    up_parser.add_argument("--webhook", action="store_true",
                           help="also run segment-webhook serve as deploy/ configures it, registered by deploy/'s "
                                "webhook configurations")
    up_parser.add_argument("--gate-pods", action="store_true", help="serve with --gate-pods (implies --webhook)")
    down_parser = commands.add_parser("down", help="stop everything `up DIR` started")
    down_parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build())
        elif args.command == "up":
            cluster = up(args.dir, args.webhook or args.gate_pods, args.gate_pods)
            ports = cluster.state["ports"]
            print(f"up: kube-apiserver https://127.0.0.1:{ports['kube-apiserver']}"
                  + (f", segment-webhook {cluster.state['webhook_url']}" if "webhook_url" in cluster.state else "")
                  + f" in {cluster.state['up_seconds']} s")
            print(cluster.kubeconfig)
        else:
            if not (args.dir / STATE_FILE).is_file():
                print(f"local-cluster: down: {args.dir} holds no cluster that `up` started (no {STATE_FILE})",
                      file=sys.stderr)
                return 1
            listening = LocalCluster(args.dir).stop_all()
            if listening:
                print(f"down: still listening after stop: {', '.join(listening)}", file=sys.stderr)
                return 1
            print(f"down: stopped everything in {args.dir}")
    except ClusterError as error:
        print(f"local-cluster: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
