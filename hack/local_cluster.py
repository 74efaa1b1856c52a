"""Local control plane built from published Go modules (DESIGN.md §11).

Usage (through ``hack/local-cluster.sh``)::

    local-cluster.sh build                 # last line of stdout: the directory of the binaries
    local-cluster.sh up DIR [--webhook] [--gate-pods] [--controller] [--with NAMES] [--workload-api]
                           [--target NAME] [--kubelet]  # --workload-api --controller: our webhook (target workload-api)
                                            # and controller make the gangs' Workload API objects
                                           # NAMES: lws,kueue,training-operator,jobset,trainer,kuberay,kwok
                                           # --kubelet (--node): one real node, hack/node.py
    local-cluster.sh nodes DIR FILE        # register the Nodes of a `kubectl get nodes -o yaml` dump
                                           # (with Kueue running: its Topology, flavor and queues too;
                                           # with KWOK running: as KWOK nodes, hack/kwok.py)
    local-cluster.sh stop-apiserver DIR    # stop kube-apiserver alone (an outage: etcd and the rest keep running)
    local-cluster.sh start-apiserver DIR   # start it again with the same flags, port and etcd
    local-cluster.sh down DIR

``build`` compiles etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from
the modules pinned by ``hack/go/*/go.mod`` (fetched from the Go module proxy; no upstream source is
kept in this repository) into a cache outside the checkout, keyed by the hash of those go.mod and
go.sum files: ``$SEGMENT_WEBHOOK_CLUSTER_CACHE`` or ``~/.cache/segment-webhook/cluster``. A second
``build`` with the same pins reuses the binaries. The upstream programs ``up --with`` starts
(:data:`UPSTREAM`) and the tools of :data:`TOOLS` (helm) are built the same way, each from its own
module under ``hack/go/`` into its own cache directory keyed by that module's go.mod and go.sum.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import hashlib
import http.client
import importlib
import json
import math
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
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


#: Modules of the control plane: their go.mod/go.sum hash is the key of its cache directory.
CONTROL_PLANE_MODULES = ("etcd", "kubernetes")


def _plain_ldflags() -> str:
    """The linker flags of a build without version stamps: no symbol table, no DWARF."""
    return "-s -w"


@dataclass(frozen=True)
class Upstream:
    """An upstream program ``up --with NAME`` builds and starts: ``module_dir`` under hack/go,
    the Go ``module`` it pins and the ``package`` built into ``binary`` with the linker flags
    ``ldflags()`` returns."""

    module_dir: str
    module: str
    package: str
    binary: str
    ldflags: Callable[[], str] = _plain_ldflags


#: ``--with`` names -> what is built. KAI Scheduler's pod-grouper is not here: the Go module proxy
#: answers 403 for every version of github.com/NVIDIA/KAI-scheduler tried (README, "The local
#: control plane").
UPSTREAM: dict[str, Upstream] = {
    "lws": Upstream("lws", "sigs.k8s.io/lws", "sigs.k8s.io/lws/cmd", "lws-manager"),
    "kueue": Upstream("kueue", "sigs.k8s.io/kueue", "sigs.k8s.io/kueue/cmd/kueue", "kueue-manager"),
    "training-operator": Upstream("training-operator", "github.com/kubeflow/training-operator",
                                       "github.com/kubeflow/training-operator/cmd/training-operator.v1",
                                       "training-operator"),
        "jobset": Upstream("jobset", "sigs.k8s.io/jobset", "sigs.k8s.io/jobset", "jobset-manager"),
        "trainer": Upstream("trainer", "github.com/kubeflow/trainer/v2",
                             "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
                             "trainer-controller-manager"),
        "kuberay": Upstream("kuberay", "github.com/ray-project/kuberay/ray-operator",
                             "github.com/ray-project/kuberay/ray-operator", "ray-operator"),
        # KWOK's controller: simulated nodes that run pods (hack/kwok.py, ``up --with kwok``)
        "kwok": Upstream("kwok", "sigs.k8s.io/kwok", "sigs.k8s.io/kwok/cmd/kwok", "kwok"),
        # cert-manager's controller and CA injector, one binary of our own main over its packages
        # (the proxy serves no cmd/ module of it; hack/go/cert-manager/main.go, hack/cert_manager.py)
        "cert-manager": Upstream("cert-manager", "github.com/cert-manager/cert-manager",
                                 "segments.dev/segment-webhook/hack/cert-manager", "cert-manager"),
}
#: ``--with`` names that are known but cannot be built here, with the reason.
UNAVAILABLE_UPSTREAM = {
    "kai-podgrouper": "the Go module proxy refuses github.com/NVIDIA/KAI-scheduler (403 'This module version is "
                      "not available' for v0.9.0, v0.10.0, v0.13.0-rc1 and v0.13.0), so cmd/podgrouper cannot be built",
}


def _helm_ldflags() -> str:
    """helm's release flags (its Makefile, helm.sh/helm/v3 v3.22.0): the version ``helm version``
    prints and the Kubernetes version ``helm template``/``lint`` assume, 1.(client-go minor)."""
    version = module_version("helm", "helm.sh/helm/v3")
    minor = module_version("helm", "k8s.io/client-go").split(".")[1]
    flags = ["-s", "-w", f"-X=helm.sh/helm/v3/internal/version.version={version}",
             "-X=helm.sh/helm/v3/internal/version.gitTreeState=clean"]
    for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X={package}.k8sVersionMajor=1", f"-X={package}.k8sVersionMinor={minor}"]
    return " ".join(flags)


def _kubelet_ldflags() -> str:
    """The kubelet's version stamp: the same as kube-apiserver's (the pinned k8s.io/kubernetes)."""
    return _version_ldflags(module_version("kubelet", "k8s.io/kubernetes"))


#: Tools ``build`` also builds, the same way as :data:`UPSTREAM` but not started by ``up --with``
#: (``helm`` for the chart's tests, deploy/helm; the ``kubelet`` of ``up --kubelet``, hack/node.py:
#: k8s.io/kubernetes at the control plane's version, from hack/go/kubelet, whose go.mod is
#: hack/go/kubernetes's plus the kubelet's own dependencies, so the control plane's cache key and
#: binaries stay as they were).
TOOLS: dict[str, Upstream] = {
    "helm": Upstream("helm", "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm", "helm", ldflags=_helm_ldflags),
    "kubelet": Upstream("kubelet", "k8s.io/kubernetes", "k8s.io/kubernetes/cmd/kubelet", "kubelet",
                        ldflags=_kubelet_ldflags),
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


def pins_digest(module_dirs: tuple[str, ...] = CONTROL_PLANE_MODULES) -> str:
    """A short hash of the go.mod and go.sum of ``module_dirs`` (under hack/go), and of the Go
    files of a module that has its own main (hack/go/cert-manager): the cache key of a build (by
    default, of the control plane's)."""
    digest = hashlib.sha256()
    for path in sorted(p for d in module_dirs for pattern in ("go.*", "*.go") for p in (GO_MODULES / d).glob(pattern)):
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


def upstream_target(name: str) -> Path:
    """The cache directory of upstream program (or tool) ``name``: ``<cache>/<name>-<version>-<digest>``."""
    program = UPSTREAM.get(name) or TOOLS[name]
    version = module_version(program.module_dir, program.module)
    return cache_root() / f"{name}-{version}-{pins_digest((program.module_dir,))}"


def upstream_binary(name: str) -> Path:
    """The path of the built binary of upstream program ``name`` (see :func:`build_upstream`)."""
    return upstream_target(name) / (UPSTREAM.get(name) or TOOLS[name]).binary


#: The cached binaries (and control-plane directory) this process has already said it reuses:
#: ``up`` asks for one program up to three times (the check before starting, the starter, its
#: helpers), and says "build: reusing ..." once.
_REUSE_SAID: set[Path] = set()


def _say_reusing(path: Path, log) -> None:
    """Print ``build: reusing PATH`` on ``log``, once per path and process."""
    if path not in _REUSE_SAID:
        _REUSE_SAID.add(path)
        print(f"build: reusing {path}", file=log)


def build_upstream(name: str, log=sys.stderr) -> Path:
    """Build (or reuse) upstream program ``name`` of :data:`UPSTREAM`; return its binary's path.
    The first build's seconds are written to ``BUILD_SECONDS`` beside it.

    Raises:
        ClusterError: an unknown or unavailable name, no ``go``, or a failed ``go build``.
    """
    if name in UNAVAILABLE_UPSTREAM:
        raise ClusterError(f"build: {name}: {UNAVAILABLE_UPSTREAM[name]}")
    if name not in UPSTREAM and name not in TOOLS:
        raise ClusterError(f"build: unknown upstream program {name!r} (known: {', '.join(sorted(UPSTREAM))})")
    if shutil.which("go") is None:
        raise ClusterError("build: no `go` on PATH (Go 1.26 is needed; see README 'Cluster suite')")
    program = UPSTREAM.get(name) or TOOLS[name]
    target = upstream_target(name)
    if (target / program.binary).is_file():
        _say_reusing(target / program.binary, log)
        return target / program.binary
    staging = target.with_name(target.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false -trimpath")
    started = time.monotonic()
    print(f"build: {program.binary} ({program.package})", file=log, flush=True)
    result = subprocess.run(
        ["go", "build", "-ldflags", program.ldflags(), "-o", str(staging / program.binary), program.package],
        cwd=GO_MODULES / program.module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise ClusterError(f"build: go build {program.package} failed:\n{result.stdout[-4000:]}")
    elapsed = time.monotonic() - started
    (staging / "BUILD_SECONDS").write_text(f"{elapsed:.0f}\n")
    staging.rename(target)
    print(f"build: {program.binary} done in {elapsed:.0f} s", file=log)
    return target / program.binary


def upstream_source(name: str) -> Path:
    """The module directory of upstream program ``name`` in the Go module cache (its CRDs, RBAC
    and webhook manifests are read from there at run time, never copied into this repository).
    Raises ClusterError when ``go mod download`` cannot provide it."""
    program = UPSTREAM[name]
    version = module_version(program.module_dir, program.module)
    result = subprocess.run(["go", "mod", "download", "-json", f"{program.module}@{version}"],
                            cwd=GO_MODULES / program.module_dir, capture_output=True, text=True)
    try:
        return Path(json.loads(result.stdout)["Dir"])
    except (ValueError, KeyError):
        raise ClusterError(f"{name}: go mod download {program.module}@{version} failed: "
                           f"{result.stdout[-2000:]}{result.stderr[-2000:]}") from None


def _executable_name(package: str) -> str:
    """The file ``go build -o DIR/`` writes for main package ``package``: its last path element,
    or the one before it when the last is a major version (``go.etcd.io/etcd/server/v3`` ->
    ``server``; the Go command's DefaultExecName)."""
    parent, _, last = package.rpartition("/")
    if parent and len(last) >= 2 and last[0] == "v" and last[1:].isdigit():
        return parent.rpartition("/")[2]
    return last


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
        _say_reusing(target, log)
        return target
    staging = target.with_name(target.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false -trimpath")
    started = time.monotonic()
    # One `go build` per module directory, every missing binary of it at once (`-o DIR/` writes each
    # main package as DIR/<its last path element>): the Go command links one binary while it still
    # compiles the packages of the next, instead of leaving a CPU idle through each link.
    for module_dir in dict.fromkeys(module_dir for module_dir, _ in BINARIES.values()):
        missing = {name: package for name, (directory, package) in BINARIES.items()
                   if directory == module_dir and not (staging / name).is_file()}
        if not missing:
            continue
        for name, package in missing.items():
            print(f"build: {name} ({package})", file=log, flush=True)
        ldflags = _version_ldflags(kubernetes_version) if module_dir == "kubernetes" else "-s -w"
        partial = staging / f"{module_dir}.tmp"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        result = subprocess.run(
            ["go", "build", "-ldflags", ldflags, "-o", f"{partial}{os.sep}", *missing.values()],
            cwd=GO_MODULES / module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        if result.returncode != 0:
            raise ClusterError(f"build: go build {' '.join(missing.values())} failed:\n{result.stdout[-4000:]}")
        # moved only once complete: an interrupted build resumes without a half-written binary
        for name, package in missing.items():
            (partial / _executable_name(package)).rename(staging / name)
        partial.rmdir()
    elapsed = time.monotonic() - started
    (staging / "BUILD_SECONDS").write_text(f"{elapsed:.0f}\n")
    staging.rename(target)
    print(f"build: done in {elapsed:.0f} s", file=log)
    return target


#: What ``build`` builds, one program after the other by default; ``SEGMENT_WEBHOOK_BUILD_LANES=2``
#: runs the two lanes at the same time. On the 2-CPU machine from nothing the two lanes took
#: 2,108 s (2026-12-07, stop 43, a fresh `.ci/run`), one after the other 1,839 s (stop 42): each
#: Go build keeps both CPUs busy, so a second lane only slowed the first. Programs that compile the
#: same packages (the kubelet and the control plane, both k8s.io/kubernetes v1.37.2; JobSet and
#: Trainer, both k8s.io v0.32.2 and controller-runtime v0.20.2) are in one lane, one after the
#: other, so the second finds them in the Go build cache instead of compiling them again beside
#: the first.
BUILD_LANES: tuple[tuple[str, ...], ...] = (
    ("control-plane", "kubelet", "lws", "kuberay", "helm"),
    ("kueue", "training-operator", "jobset", "trainer", "kwok", "cert-manager"),
)


def build_everything(log=sys.stderr) -> Path:
    """Build (or reuse) the control plane and every program of :data:`UPSTREAM` and :data:`TOOLS`,
    one after the other (``SEGMENT_WEBHOOK_BUILD_LANES=2``: the lanes of :data:`BUILD_LANES` at the
    same time); return the control plane's directory. Prints
    ``build: everything done in N s`` once anything was built.

    Raises:
        ClusterError: the first failed build (the other lane finishes its current build first).
    """
    lanes = [list(lane) for lane in BUILD_LANES]
    listed = {name for lane in lanes for name in lane}
    assert listed == {"control-plane", *UPSTREAM, *TOOLS}, sorted(listed ^ {"control-plane", *UPSTREAM, *TOOLS})
    try:
        count = int(os.environ.get("SEGMENT_WEBHOOK_BUILD_LANES", "1"))
    except ValueError:
        count = 1
    if count < 2:
        lanes = [[name for lane in lanes for name in lane]]
    started = time.monotonic()
    built_any = False
    control_plane: list[Path] = []

    def run_lane(lane: list[str]) -> None:
        nonlocal built_any
        for name in lane:
            if name == "control-plane":
                cached = built()
                control_plane.append(build(log))
            else:
                cached = (upstream_target(name) / (UPSTREAM.get(name) or TOOLS[name]).binary).is_file()
                build_upstream(name, log)
            built_any = built_any or not cached

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes)) as pool:
        futures = [pool.submit(run_lane, lane) for lane in lanes]
        errors = [future.exception() for future in futures]
    for error in errors:
        if error is not None:
            raise error
    if built_any:
        print(f"build: everything done in {time.monotonic() - started:.0f} s ({len(lanes)} lane{'s' if len(lanes) > 1 else ''})", file=log)
    return control_plane[0]


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
                 "kube-scheduler": 90, "segment-webhook": 90, "cert-manager-controller": 180,
                 "cert-manager-cainjector": 120}
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
        self.state.setdefault("argv", {})[component] = list(argv)  # start_apiserver starts it again so
        if component not in self.state["components"]:
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
        (pki / "ca.key").write_bytes(bundle.ca_key_pem)  # signs the kubelet's certificate (up --kubelet)
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
        for component in ("etcd", "etcd-peer", "kube-apiserver"):
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
            "--allow-privileged=true", "--v", "1", *workload_api_args("kube-apiserver", self.state),
            *endpoint_routing_args(), *audit_args(self.dir),
        ])
        token = self.state["admin_token"]
        self.wait_until("kube-apiserver", apiserver,
                        lambda: self.https_ok(ports["kube-apiserver"], "/readyz", token), "ready (/readyz)")
        for component, extra in (
            ("kube-controller-manager", [
                "--service-account-private-key-file", str(pki / "sa.key"),
                "--root-ca-file", str(pki / "ca.crt"),
                # each controller under its own ServiceAccount, as kubeadm runs it: the node
                # lifecycle controller's role reads kube-node-lease Leases (``nodes``), the
                # kube-controller-manager user's does not
                "--use-service-account-credentials=true",
                # thousands of registered nodes (``nodes``): the default 20 QPS takes minutes to
                # lift the not-ready taints, and a Python heartbeat renewing 4,096 Leases on
                # 2 CPUs needs more than the default 50 s of grace under load
                "--kube-api-qps", "200", "--kube-api-burst", "400",
                *node_grace_args(self.state),
                "--cluster-name", "local",
            ]),
            ("kube-scheduler", []),
        ):
            component_kubeconfig = str(pki / f"{component}.kubeconfig")

            def argv(port: int, component: str = component, extra: list[str] = extra,
                     kubeconfig: str = component_kubeconfig) -> list[str]:
                return [str(self.bin / component),
                        "--kubeconfig", kubeconfig,
                        "--authentication-kubeconfig", kubeconfig,
                        "--authorization-kubeconfig", kubeconfig,
                        "--bind-address", "127.0.0.1", "--secure-port", str(port),
                        "--leader-elect=false", "--v", "1", *extra, *workload_api_args(component, self.state)]

            self.start_on_free_port(component, argv)
        self.wait_for_default_service_account()

    def start_on_free_port(self, component: str, argv_for_port, attempts: int = 3) -> subprocess.Popen:
        """Start ``component`` (``argv_for_port(port)``) on a port picked just before it starts and
        wait for its ``/healthz``. :func:`free_port` cannot reserve the port: another process (an
        outgoing connection's ephemeral port, another control plane) may take it before the
        component binds, and then the probe answers from that other process while the component
        exits with "address already in use" (seen in CI's helm test, 2026-12-05). So the component
        must still be running a second after it answered; when it exited for a taken port it is
        started again on another, up to ``attempts`` times. Raises ClusterError otherwise."""
        for attempt in range(1, attempts + 1):
            port = self.state["ports"][component] = free_port()
            self.save()
            process = self.start(component, argv_for_port(port))
            self.wait_until(component, process, lambda port=port: self.https_ok(port, "/healthz"), "healthy (/healthz)")
            time.sleep(1)
            if process.poll() is None:
                return process
            taken = "address already in use" in self.log_tail(component)
            if not taken or attempt == attempts:
                raise ClusterError(f"{component} exited with status {process.returncode} after it answered "
                                   f"/healthz on port {port}:\n{self.log_tail(component)}")
            print(f"up: {component}: port {port} was taken before it bound; starting it on another",
                  file=sys.stderr)
        raise AssertionError("unreachable")

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
    def render_deploy(self, controller: bool = False) -> list[dict]:
        """``kubectl kustomize`` of the self-signed overlay, from a copy of deploy/ whose certs/
        is filled by ``segment-webhook certs`` (the documented step). The serving certificate and
        key are kept in ``DIR/webhook/certs`` for the local ``serve``. With ``controller``: the
        with-controller overlay, built on self-signed instead of cert-manager as its
        kustomization's comment says to (``../cert-manager`` -> ``../self-signed``)."""
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
        overlay = copy / "overlays" / "self-signed"
        if controller:
            overlay = copy / "overlays" / "with-controller"
            kustomization = overlay / "kustomization.yaml"
            text = kustomization.read_text()
            if "  - ../cert-manager\n" not in text:
                raise ClusterError("deploy/overlays/with-controller no longer lists ../cert-manager; update local_cluster")
            kustomization.write_text(text.replace("  - ../cert-manager\n", "  - ../self-signed\n"))
        rendered = self.kubectl("kustomize", str(overlay)).stdout
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

    def start_webhook(self, gate_pods: bool, controller: bool = False) -> list[dict]:
        """Apply deploy/'s objects (the Deployment and Service aside: no kubelet runs pods here),
        the shared CRDs, then ``serve`` with the Deployment's command, args and env under a token of
        its ServiceAccount, then the webhook configurations pointed at it by ``url``. With
        ``controller`` the with-controller overlay is rendered (its RBAC applied; the webhook's
        env then turns gating on, as the overlay does). Returns the rendered documents."""
        docs = self.render_deploy(controller)
        deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "segment-webhook")
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
        return docs

    # -- the controller, as deploy/overlays/with-controller runs it
    def start_controllers(self, docs: list[dict]) -> None:
        """Start the with-controller Deployment's replicas (``spec.replicas``: 2) as local
        processes ``segment-webhook-controller-<i>``, each with the Deployment's args and env
        (``POD_NAME`` = the component name, ``POD_NAMESPACE`` = the Deployment's namespace, as
        the downward API gives them), ``--metrics-port`` on a free loopback port and a kubeconfig
        holding a token of the Deployment's ServiceAccount; wait for each one's ``/metrics``."""
        deployment = next(d for d in docs if d["kind"] == "Deployment"
                          and d["metadata"]["name"] == "segment-webhook-controller")
        pod_spec = deployment["spec"]["template"]["spec"]
        namespace = deployment["metadata"]["namespace"]
        token = self.kubectl("create", "token", pod_spec["serviceAccountName"], "-n", namespace,
                             "--duration", "24h").stdout.strip()
        controller_dir = self.dir / "controller"
        controller_dir.mkdir(parents=True, exist_ok=True)
        kubeconfig = controller_dir / "kubeconfig"
        write_kubeconfig(kubeconfig, f"https://127.0.0.1:{self.state['ports']['kube-apiserver']}",
                         self.dir / "pki" / "ca.crt", pod_spec["serviceAccountName"], token)
        container = pod_spec["containers"][0]
        env = {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}
        names = [f"segment-webhook-controller-{index}" for index in range(deployment["spec"].get("replicas", 1))]
        self.state["controller"] = {"args": container["args"], "env": env, "namespace": namespace,
                                    "kubeconfig": str(kubeconfig), "replicas": names}
        self.save()
        for name in names:
            self.start_controller(name)

    def start_controller(self, name: str) -> subprocess.Popen:
        """(Re)start controller replica ``name`` as recorded by :meth:`start_controllers` and wait
        until its metrics answer. Returns the process."""
        recorded = self.state["controller"]
        self.stop_component(name)
        port = self.state["ports"][name] = free_port()
        self.save()
        argv = replace_flags(recorded["args"], {"--metrics-port": str(port)}) + ["--kubeconfig", recorded["kubeconfig"]]
        env = dict(os.environ, PYTHONPATH=str(REPO), **recorded["env"], POD_NAME=name,
                   POD_NAMESPACE=recorded["namespace"])
        process = self.start(name, [sys.executable, "-m", "webhook.cli", *argv], env=env)
        self.wait_until(name, process, lambda: _http_ok(port, "/metrics"), "serving /metrics")
        return process

    # -- upstream programs (--with)
    def start_upstream(self, names: list[str]) -> None:
        """Start each ``--with`` program (built first when needed) with its CRDs and RBAC."""
        operators = _operators()  # hack/operators.py: training-operator, Trainer, JobSet, KubeRay
        for name in operators.ordered(names):
            if name == "lws":
                self.start_lws()
            elif name == "kueue":
                start_kueue(self)
            elif name == "kwok":
                _kwok().start(self)
            elif name == "cert-manager":
                _hack_module("cert_manager").start(self)
            elif name in operators.STARTERS:
                operators.start(self, name)
            else:  # build_upstream names the reason
                build_upstream(name)

    def start_lws(self) -> None:
        """The LWS manager (``sigs.k8s.io/lws/cmd``) as its ``config/default`` deploys it, on
        loopback: its CRD, RBAC and webhook configurations from ``kubectl kustomize`` of the
        module's ``config/default`` (the Deployment, Services, Secret aside), the webhooks'
        ``clientConfig.service`` replaced by a loopback ``url`` served with a certificate made by
        the project's certificate code, internal cert management and metrics off, leader election
        off (one replica), a token of its ServiceAccount. Waits for ``/readyz``."""
        binary = build_upstream("lws")
        source = upstream_source("lws")
        docs = [d for d in yaml.safe_load_all(self.kubectl("kustomize", str(source / "config" / "default")).stdout) if d]
        webhook_kinds = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
        skipped = {"Deployment", "Service", "Secret"} | webhook_kinds
        self.apply([d for d in docs if d["kind"] not in skipped])
        self.wait_for_crds()
        account = next(d for d in docs if d["kind"] == "ServiceAccount")
        namespace = account["metadata"]["namespace"]
        lws_dir = self.dir / "lws"
        (lws_dir / "certs").mkdir(parents=True, exist_ok=True)
        sys.path.insert(0, str(REPO))
        from webhook.http import certs

        bundle = certs.generate("lws-webhook-service", namespace)
        (lws_dir / "certs" / "tls.crt").write_bytes(bundle.cert_pem)
        (lws_dir / "certs" / "tls.key").write_bytes(bundle.key_pem)
        token = self.kubectl("create", "token", account["metadata"]["name"], "-n", namespace,
                             "--duration", "24h").stdout.strip()
        write_kubeconfig(lws_dir / "kubeconfig", f"https://127.0.0.1:{self.state['ports']['kube-apiserver']}",
                         self.dir / "pki" / "ca.crt", account["metadata"]["name"], token)
        webhook_port = self.state["ports"]["lws-webhook"] = free_port()
        probe_port = self.state["ports"]["lws-manager"] = free_port()
        self.save()
        configuration = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(lws_dir / "certs")},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        }
        (lws_dir / "config.yaml").write_text(yaml.safe_dump(configuration, sort_keys=False))
        env = dict(os.environ, KUBECONFIG=str(lws_dir / "kubeconfig"))
        manager = self.start("lws-manager", [str(binary), "--config", str(lws_dir / "config.yaml")], env=env)
        self.wait_until("lws-manager", manager, lambda: _http_ok(probe_port, "/readyz"), "ready (/readyz)")
        self.wait_until("lws-manager", manager, lambda: port_open(webhook_port), "serving its webhooks")
        ca_bundle = base64.b64encode(bundle.ca_pem).decode()
        configurations = [d for d in docs if d["kind"] in webhook_kinds]
        for configuration in configurations:
            for hook in configuration["webhooks"]:
                service = hook["clientConfig"].pop("service")
                hook["clientConfig"]["url"] = f"https://127.0.0.1:{webhook_port}{service.get('path', '/')}"
                hook["clientConfig"]["caBundle"] = ca_bundle
            configuration["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
        self.apply(configurations)

    def upstream_token_kubeconfig(self, work: Path, account: dict) -> Path:
        """A kubeconfig in ``work`` holding a 24 h token of ServiceAccount ``account`` (an object)."""
        namespace = account["metadata"]["namespace"]
        token = self.kubectl("create", "token", account["metadata"]["name"], "-n", namespace,
                             "--duration", "24h").stdout.strip()
        path = work / "kubeconfig"
        write_kubeconfig(path, f"https://127.0.0.1:{self.state['ports']['kube-apiserver']}",
                         self.dir / "pki" / "ca.crt", account["metadata"]["name"], token)
        return path

    # -- registered nodes (no kubelet)
    def write_node_names(self, added: list[str]) -> None:
        """Record ``added`` among the registered nodes (``state["nodes"]`` and ``DIR/nodes.json``,
        which ``node-heartbeat`` re-reads every round)."""
        names = sorted(set(self.state.get("nodes", [])) | set(added))
        self.state["nodes"] = names
        self.save()
        partial = self.dir / "nodes.json.partial"
        partial.write_text(json.dumps(names) + "\n")
        partial.rename(self.dir / "nodes.json")

    def wait_for_node_taints(self, api: ApiClient, taints: dict[str, list], timeout: float = 120,
                             poll: float = 1.0) -> None:
        """Wait until every node of ``taints`` carries exactly its dump's taints: the apiserver's
        TaintNodesByCondition admission adds ``node.kubernetes.io/not-ready:NoSchedule`` at
        create, and kube-controller-manager's node lifecycle controller removes it once it has seen
        the node Ready; lists the Nodes (from the apiserver's cache) every ``poll`` s. Raises
        ClusterError naming the nodes still tainted after ``timeout``."""
        def key(taint: dict) -> tuple:
            return taint.get("key"), taint.get("value"), taint.get("effect")

        deadline = time.monotonic() + timeout
        while True:
            listed = api.request("GET", "/api/v1/nodes?resourceVersion=0")["items"]
            extra = {n["metadata"]["name"]: [key(t) for t in n["spec"].get("taints") or []
                                             if key(t) not in {key(d) for d in taints[n["metadata"]["name"]]}]
                     for n in listed if n["metadata"]["name"] in taints}
            extra = {name: found for name, found in extra.items() if found}
            if not extra:
                return
            if time.monotonic() > deadline:
                sample = dict(list(extra.items())[:5])
                raise ClusterError(f"nodes: {len(extra)} nodes still carry taints the dump does not after {timeout} s "
                                   f"(e.g. {sample}):\n{self.log_tail('kube-controller-manager')}")
            time.sleep(poll)

    def register_nodes(self, dump: Path) -> int:
        """Create the Nodes of ``dump`` (a ``kubectl get nodes -o yaml`` List or a
        ``segment-webhook gen-cluster`` file; other kinds ignored) with their labels, taints,
        capacity and allocatable (capacity = allocatable when the dump has none), Ready, and
        a Lease each in kube-node-lease, in batches of :data:`NODE_BATCH`, with ``node-heartbeat``
        (started once, before the first batch) renewing the Leases of those registered so far
        until ``down``, so kube-controller-manager's node lifecycle controller never taints them;
        then wait until it has lifted the taints admission adds at create. Returns the number of
        Nodes registered. Raises ClusterError when the dump has no Node, a request fails or the
        taints stay."""
        nodes = [obj for obj in read_objects(dump) if obj.get("kind") == "Node"]
        if not nodes:
            raise ClusterError(f"nodes: {dump} holds no Node")
        api = ApiClient(self.state["ports"]["kube-apiserver"], self.state["admin_token"], workers=8)
        now = rfc3339_now()

        def register(node: dict) -> None:
            metadata = node["metadata"]
            status = node.get("status") or {}
            allocatable = status.get("allocatable") or {}
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": metadata["name"], "labels": metadata.get("labels") or {},
                                 "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
                    "spec": {k: v for k, v in (node.get("spec") or {}).items() if k in ("taints", "unschedulable")}}
            api.request("POST", "/api/v1/nodes", body, expect=(201, 409))
            status_body = {"status": {"capacity": status.get("capacity") or allocatable, "allocatable": allocatable,
                                      "conditions": ready_conditions(now)}}
            api.request("PATCH", f"/api/v1/nodes/{metadata['name']}/status", status_body,
                        content_type="application/strategic-merge-patch+json")
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": metadata["name"], "namespace": "kube-node-lease"},
                     "spec": {"holderIdentity": metadata["name"], "leaseDurationSeconds": NODE_LEASE_SECONDS,
                              "renewTime": rfc3339_now(micro=True)}}
            api.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease,
                        expect=(201, 409))

        # the heartbeat runs while nodes are registered, a batch at a time, so that no node waits
        # for its first renewal longer than a round
        if "node-heartbeat" not in self.state["components"]:
            self.write_node_names([])
            self.start("node-heartbeat", [sys.executable, str(Path(__file__).resolve()), "heartbeat", str(self.dir)])
        for start in range(0, len(nodes), NODE_BATCH):
            batch = nodes[start:start + NODE_BATCH]
            api.map(register, batch)
            self.write_node_names([n["metadata"]["name"] for n in batch])
        self.wait_for_node_taints(api, {n["metadata"]["name"]: (n.get("spec") or {}).get("taints") or [] for n in nodes},
                                  timeout=120 + len(nodes) / 20)
        return len(nodes)

    def run_webhook(self, gate_pods: bool) -> subprocess.Popen:
        """Start ``serve`` as recorded by :meth:`start_webhook` (``--gate-pods`` added when asked,
        ``--target`` when ``up`` was given one)
        and wait for its ``/readyz``; a running one is stopped first. Returns the process."""
        self.stop_component("segment-webhook")
        env = dict(os.environ, PYTHONPATH=str(REPO), **self.state["webhook_env"])
        shutil.rmtree(env["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
        for path in (env["PROMETHEUS_MULTIPROC_DIR"], env["TMPDIR"]):
            Path(path).mkdir(parents=True, exist_ok=True)
        argv = list(self.state["webhook_argv"]) + (["--gate-pods"] if gate_pods else [])
        if self.state.get("target"):
            argv += ["--target", self.state["target"]]
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
        """Stop one recorded component (SIGTERM to its process group, SIGKILL after 30 s, after
        :data:`DOWN_GRACE` s for the components named there); a stop that waited over 5 s is
        said on stderr (``down: <component> took N s to stop``)."""
        pid_file = self.dir / "pids" / f"{component}.pid"
        if pid_file.is_file():
            started = time.monotonic()
            stop_process_group(int(pid_file.read_text()), grace=DOWN_GRACE.get(component, 30.0))
            pid_file.unlink()
            if (took := time.monotonic() - started) > 5:  # a stop that waited: say which
                print(f"down: {component} took {took:.1f} s to stop", file=sys.stderr)
        if component in self.state.get("components", []):
            self.state["components"].remove(component)
            self.save()

    def stop_all(self) -> list[str]:
        """Stop every recorded component, newest first; return the ``component:port`` pairs still
        listening afterwards (none expected), and with a node (``up --kubelet``) what of it is left."""
        if self.state.get("node"):
            _node().drain(self)
        for component in reversed(list(self.state.get("components", []))):
            self.stop_component(component)
        left = [f"{name}:{port}" for name, port in self.state.get("ports", {}).items() if port_open(port)]
        if self.state.get("node"):
            left += _node().cleanup(self)
        return left


# ------------------------------------------------------------------------------ endpoint routing
#: kube-apiserver calls a webhook (or an aggregated API) named by a Service at one of the
#: Service's endpoints (a pod address, ``--enable-aggregator-routing``), never at its cluster IP:
#: the cluster IPs of ``--service-cluster-ip-range`` (10.0.0.0/24) belong to no process on this
#: machine (no kube-proxy runs), so a connection to one would leave the machine. Pod addresses
#: are only those of the network namespaces a run makes itself (``up --kubelet``).
ENDPOINT_ROUTING = "--enable-aggregator-routing=true"


def endpoint_routing_args() -> list[str]:
    """kube-apiserver's flags that route a Service-based ``clientConfig`` to the Service's
    endpoints (:data:`ENDPOINT_ROUTING`); always on, whatever ``up`` was asked."""
    return [ENDPOINT_ROUTING]


# ------------------------------------------------------------------------------------ audit log
#: The users whose writes the audit policy keeps with their bodies: KWOK's controller (its
#: ServiceAccount in KWOK v0.8.0's ``kustomize/rbac/service_account.yaml``) and this project's
#: controller (deploy/base: ``segment-webhook-controller`` in ``segment-webhook-system``).
KWOK_USER = "system:serviceaccount:kube-system:kwok-controller"
CONTROLLER_USER = "system:serviceaccount:segment-webhook-system:segment-webhook-controller"
SCHEDULER_USER = "system:kube-scheduler"
#: kube-apiserver's audit policy of every ``up``, into ``DIR/logs/audit.log`` once each request is
#: complete (``stageTimestamp`` and ``requestReceivedTimestamp`` in microseconds, where the
#: objects' own times have whole seconds):
#:
#: * each patch, update and delete of a pod (not of its subresources) at level ``Metadata`` (who,
#:   which pod, the answer's code; no bodies). A gang's releases are counted from it, whichever
#:   controller replica sent them and whether or not its answer arrived
#:   (tests/cluster/test_node_faults.py: every gated pod released by exactly one accepted patch);
#: * with the request's body (``Request``): Kueue's writes of a Workload's status (when Kueue
#:   refused or admitted it), KWOK's and kube-scheduler's writes of a pod's status (when the pod
#:   finished; when kube-scheduler found it ``Unschedulable``);
#: * with request and answer (``RequestResponse``): the Events this project's controller writes
#:   (which gang, which reason, the Event's name for a later count).
#:
#: benchmarks/trace.py times the advisory controller from them (:func:`audit_events`).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "verbs": ["patch", "update", "delete"], "resources": [{"group": "", "resources": ["pods"]}]},
              {"level": "Request", "verbs": ["patch", "update"],
               "resources": [{"group": "kueue.x-k8s.io", "resources": ["workloads/status"]}]},
              {"level": "Request", "verbs": ["patch", "update"], "users": [KWOK_USER, SCHEDULER_USER],
               "resources": [{"group": "", "resources": ["pods/status"]}]},
              {"level": "RequestResponse", "verbs": ["create", "patch", "update"], "users": [CONTROLLER_USER],
               "resources": [{"group": "", "resources": ["events"]}]},
              {"level": "None"}],
}
AUDIT_LOG = "logs/audit.log"


def audit_args(directory: Path) -> list[str]:
    """kube-apiserver's audit flags (:data:`AUDIT_POLICY`, written to ``DIR/audit-policy.yaml``):
    the log rotated at 200 MB, one old file kept (:func:`audit_events` reads both)."""
    policy = directory / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    return ["--audit-policy-file", str(policy), "--audit-log-path", str(directory / AUDIT_LOG),
            "--audit-log-maxsize", "200", "--audit-log-maxbackup", "1"]


def audit_events(directory: Path) -> list[dict]:
    """The audit events kube-apiserver wrote into ``DIR/logs/audit.log`` and its rotated file
    (``audit-<time>.log``, older first): one JSON object a line."""
    logs = directory / "logs"
    paths = sorted(logs.glob("audit-*.log")) + [directory / AUDIT_LOG]
    return [json.loads(line) for path in paths if path.is_file()
            for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------ apiserver outage
#: Seconds a component may take to end by itself on SIGTERM in ``down`` (and ``stop_component``)
#: before SIGKILL, where not 30. kube-apiserver has flushed its audit log within a second of
#: SIGTERM and then waits for long-running requests it no longer serves (below); a whole ``down``
#: needs none of them, and waiting out the 30 s made a third of every cluster fixture's teardown
#: (``down: kube-apiserver took 30.0 s to stop``, tests/cluster/test_cluster_kwok.py, issue 35).
DOWN_GRACE = {"kube-apiserver": 3.0}

#: Seconds ``stop-apiserver`` lets kube-apiserver end by itself before SIGKILL. On SIGTERM it stops
#: listening at once and has flushed its audit log within a second, then waits up to its request
#: timeout (60 s) for the long-running requests it no longer serves (seen 2026-12-07: "apiserver is
#: exiting" 60.0 s after "HTTPServerStoppedListening"); an outage asked for 30 s would last 90.
APISERVER_STOP_GRACE = 10.0


def stop_apiserver(cluster: LocalCluster) -> float:
    """Stop kube-apiserver alone (SIGTERM, SIGKILL after :data:`APISERVER_STOP_GRACE`), leaving
    etcd, the other components, the node and every pod running: an outage of the control plane's
    front door. It stays one of ``components`` (``down`` does not mind it stopped;
    :func:`start_apiserver` starts it again). Returns the seconds the stop took. Raises
    ClusterError when it is not running."""
    pid_file = cluster.dir / "pids" / "kube-apiserver.pid"
    if "kube-apiserver" not in cluster.state.get("components", []) or not pid_file.is_file():
        raise ClusterError(f"stop-apiserver: no running kube-apiserver in {cluster.dir}")
    started = time.monotonic()
    stop_process_group(int(pid_file.read_text()), grace=APISERVER_STOP_GRACE)
    pid_file.unlink()
    cluster.state["apiserver_stopped"] = True
    cluster.save()
    return time.monotonic() - started


def start_apiserver(cluster: LocalCluster) -> float:
    """Start kube-apiserver again with exactly the command line ``up`` gave it (same flags, port,
    etcd, certificates and audit log) and wait for its ``/readyz``. Returns the seconds until ready.
    Raises ClusterError when it is running already, was never started, or does not become ready."""
    pid_file = cluster.dir / "pids" / "kube-apiserver.pid"
    argv = cluster.state.get("argv", {}).get("kube-apiserver")
    if pid_file.is_file():
        raise ClusterError(f"start-apiserver: kube-apiserver is running in {cluster.dir} (pid {pid_file.read_text().strip()})")
    if not argv:
        raise ClusterError(f"start-apiserver: {cluster.dir} records no kube-apiserver command line (`up` it first)")
    started = time.monotonic()
    process = cluster.start("kube-apiserver", argv)
    port, token = cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"]
    cluster.wait_until("kube-apiserver", process, lambda: cluster.https_ok(port, "/readyz", token), "ready (/readyz)")
    cluster.state.pop("apiserver_stopped", None)
    cluster.save()
    return time.monotonic() - started


# ----------------------------------------------------------------------------------- workload api
#: Kubernetes v1.37.2's feature gates of the Workload API (k8s.io/kubernetes v1.37.2
#: pkg/features/kube_features.go: GenericWorkload beta, off by default; TopologyAwareWorkloadScheduling
#: alpha; CompositePodGroup alpha, which needs both) and the API versions that serve its objects
#: (scheduling.k8s.io/v1beta1 Workload and PodGroup; v1alpha3 CompositePodGroup).
WORKLOAD_API_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true"
WORKLOAD_API_RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"


def node_grace_args(state: dict) -> list[str]:
    """kube-controller-manager's node lifecycle graces for the control plane ``state`` describes:
    ``--node-monitor-grace-period 120s`` (``node-heartbeat`` renews a 40 s Lease every 20 s from
    Python; the default 50 s is too short under load), or KWOK's when ``up`` starts KWOK
    (``state["upstream"]`` holds ``kwok``; ``hack/kwok.py``'s ``controller_manager_args``)."""
    graces = {"--node-monitor-grace-period": "120s"}
    if "kwok" in state.get("upstream", ()):
        graces = _kwok().controller_manager_args()
    return [word for flag_value in graces.items() for word in flag_value]


def workload_api_args(component: str, state: dict) -> list[str]:
    """The extra flags of ``component`` under ``up --workload-api`` (``state["workload_api"]``):
    the feature gates for kube-apiserver, kube-controller-manager and kube-scheduler, and
    ``--runtime-config`` for kube-apiserver; ``[]`` otherwise."""
    if not state.get("workload_api"):
        return []
    flags = ["--feature-gates", WORKLOAD_API_GATES]
    if component == "kube-apiserver":
        flags += ["--runtime-config", WORKLOAD_API_RUNTIME_CONFIG]
    return flags


# ------------------------------------------------------------------------------------------ kueue
#: Kueue's integrations started here: batch/v1 Job is the one whose controller the control plane
#: runs (kube-controller-manager); the others need their operators and CRDs.
KUEUE_FRAMEWORKS = ("batch/job",)
#: The LocalQueue ``up --with kueue`` creates in namespace ``default`` (``kueue.x-k8s.io/queue-name``).
KUEUE_LOCAL_QUEUE = "user-queue"
KUEUE_CLUSTER_QUEUE = "cluster-queue"
#: The resources the ClusterQueue covers (a pod requesting another one is never admitted by Kueue);
#: each one the nodes report (``ephemeral-storage``: every kubelet, and ``gen-cluster``, report it).
KUEUE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "nvidia.com/gpu")


def _kueue_webhook_kept(hook: dict) -> bool:
    """Kueue's webhooks for its own API and for batch/v1 Jobs (the integrations not enabled here
    serve no handler, so their webhooks would fail every request of their kinds)."""
    for rule in hook.get("rules") or []:
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        if groups == ["kueue.x-k8s.io"] or (groups == ["batch"] and resources[:1] == ["jobs"]):
            return True
    return False


def start_kueue(cluster: LocalCluster) -> None:
    """The Kueue manager (``sigs.k8s.io/kueue/cmd/kueue``, hack/go/kueue) as its ``config/default``
    deploys it, on loopback: CRDs (their conversion webhooks pointed at the manager by ``url``),
    RBAC and the webhooks of its own API and of batch/v1 Jobs from ``kubectl kustomize`` of the
    module's ``config/default`` (Deployment, Services, Secret, APIService aside), served with a
    certificate made by :mod:`webhook.http.certs`; a Configuration with Topology-Aware Scheduling
    (beta, on by default in v0.17.0), internal cert management, metrics, visibility and leader
    election off, the ``batch/job`` integration; a token of its ServiceAccount. Waits for
    ``/readyz`` and its webhook port. The queues come with the nodes (:func:`kueue_queues`)."""
    binary = build_upstream("kueue")
    source = upstream_source("kueue")
    docs = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(source / "config" / "default")).stdout) if d]
    webhook_kinds = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    work = cluster.dir / "kueue"
    (work / "certs").mkdir(parents=True, exist_ok=True)
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    namespace = account["metadata"]["namespace"]
    sys.path.insert(0, str(REPO))
    from webhook.http import certs

    bundle = certs.generate("kueue-webhook-service", namespace)
    (work / "certs" / "tls.crt").write_bytes(bundle.cert_pem)
    (work / "certs" / "tls.key").write_bytes(bundle.key_pem)
    _kueue_metrics_certs(bundle.cert_pem, bundle.key_pem)
    ca_bundle = base64.b64encode(bundle.ca_pem).decode()
    webhook_port = cluster.state["ports"]["kueue-webhook"] = free_port()
    probe_port = cluster.state["ports"]["kueue-manager"] = free_port()
    cluster.save()
    url = f"https://127.0.0.1:{webhook_port}"
    for crd in (d for d in docs if d["kind"] == "CustomResourceDefinition"):
        client = ((crd["spec"].get("conversion") or {}).get("webhook") or {}).get("clientConfig")
        if client and "service" in client:
            client["url"] = url + (client.pop("service").get("path") or "/convert")
            client["caBundle"] = ca_bundle
        crd["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
    skipped = {"Deployment", "Service", "Secret", "APIService"} | webhook_kinds
    cluster.apply([d for d in docs if d["kind"] not in skipped])
    cluster.wait_for_crds()
    kubeconfig = cluster.upstream_token_kubeconfig(work, account)
    configuration = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"}, "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(work / "certs")},
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(configuration, sort_keys=False))
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    manager = cluster.start("kueue-manager", [str(binary), "--config", str(work / "config.yaml"),
                                              "--feature-gates", "VisibilityOnDemand=false"], env=env)
    cluster.wait_until("kueue-manager", manager, lambda: _http_ok(probe_port, "/readyz"), "ready (/readyz)")
    cluster.wait_until("kueue-manager", manager, lambda: port_open(webhook_port), "serving its webhooks")
    configurations = [d for d in docs if d["kind"] in webhook_kinds]
    for configuration_doc in configurations:
        configuration_doc["webhooks"] = [h for h in configuration_doc["webhooks"] if _kueue_webhook_kept(h)]
        for hook in configuration_doc["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"]["url"] = url + service.get("path", "/")
            hook["clientConfig"]["caBundle"] = ca_bundle
        configuration_doc["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
    cluster.apply(configurations)


#: Where Kueue v0.17.0 reads its metrics server's certificate when internal cert management is
#: off: a fixed path (cmd/kueue/main.go), not configurable; it exits when the files are missing.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def _kueue_metrics_certs(cert_pem: bytes, key_pem: bytes) -> None:
    """Give the manager the metrics certificate files it insists on (metrics serving itself is off:
    ``bindAddress: "0"``). Written once, only when missing; raises ClusterError when they cannot be."""
    if (KUEUE_METRICS_CERTS / "tls.crt").is_file() and (KUEUE_METRICS_CERTS / "tls.key").is_file():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        (KUEUE_METRICS_CERTS / "tls.crt").write_bytes(cert_pem)
        (KUEUE_METRICS_CERTS / "tls.key").write_bytes(key_pem)
    except OSError as error:
        raise ClusterError(f"kueue: its manager reads {KUEUE_METRICS_CERTS}/tls.crt and tls.key (fixed in "
                           f"cmd/kueue/main.go when internal cert management is off) and they cannot be "
                           f"written: {error.strerror}; create them (any certificate: metrics are off)") from None


def _common_node_label(nodes: list[dict], levels: list[str]) -> tuple[str, str]:
    """A label every node carries with one value (not a topology level): the ResourceFlavor's
    ``nodeLabels`` (Kueue requires one when ``topologyName`` is set). Raises ClusterError."""
    shared = None
    for node in nodes:
        labels = {k: v for k, v in (node["metadata"].get("labels") or {}).items() if k not in levels}
        shared = set(labels.items()) if shared is None else shared & set(labels.items())
    if not shared:
        raise ClusterError("kueue: the nodes share no label a ResourceFlavor can select; label them alike "
                           "(e.g. node.kubernetes.io/instance-type) and run `nodes` again")
    return sorted(shared)[0]


def kueue_queues(cluster: LocalCluster, dump: Path) -> list[str]:
    """Kueue's objects for the nodes of ``dump``: per ``kai.scheduler/v1alpha1`` Topology in the
    dump (else the one ``segment-webhook topology infer --kind kueue`` writes), a
    ``kueue.x-k8s.io/v1beta2`` Topology of the same name and levels and a ResourceFlavor
    ``<name>`` with that ``topologyName``; one ClusterQueue ``cluster-queue`` with the nodes' total
    allocatable as nominal quota of every flavor's resources, and LocalQueue ``user-queue`` in
    ``default``. Returns the Topology names."""
    objects = read_objects(dump)
    nodes = [o for o in objects if o.get("kind") == "Node"]
    topologies = [{"name": o["metadata"]["name"], "levels": [lv["nodeLabel"] for lv in o["spec"]["levels"]]}
                  for o in objects if o.get("kind") == "Topology" and o.get("apiVersion", "").startswith("kai.")]
    if not topologies:
        inferred = yaml.safe_load(cluster.segment_webhook("topology", "infer", "-f", str(dump), "--kind", "kueue"))
        topologies = [{"name": inferred["metadata"]["name"],
                       "levels": [lv["nodeLabel"] for lv in inferred["spec"]["levels"]]}]
    sys.path.insert(0, str(REPO))
    from webhook.kube.quantity import parse_quantity

    totals: dict[str, Fraction] = {}
    for node in nodes:
        for resource, quantity in (node.get("status", {}).get("allocatable") or {}).items():
            if resource in KUEUE_RESOURCES:
                totals[resource] = totals.get(resource, Fraction(0)) + parse_quantity(quantity)
    docs: list[dict] = []
    flavors = []
    for topology in topologies:
        key, value = _common_node_label(nodes, topology["levels"])
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
                     "metadata": {"name": topology["name"]},
                     "spec": {"levels": [{"nodeLabel": level} for level in topology["levels"]]}})
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                     "metadata": {"name": topology["name"]},
                     "spec": {"nodeLabels": {key: value}, "topologyName": topology["name"]}})
        flavors.append({"name": topology["name"], "resources": [
            {"name": resource, "nominalQuota": str(math.floor(total))} for resource, total in sorted(totals.items())]})
    docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                 "metadata": {"name": KUEUE_CLUSTER_QUEUE},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [
                     {"coveredResources": sorted(totals), "flavors": flavors}]}})
    docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": KUEUE_LOCAL_QUEUE, "namespace": "default"},
                 "spec": {"clusterQueue": KUEUE_CLUSTER_QUEUE}})
    cluster.apply(docs)
    return [t["name"] for t in topologies]


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
            if not process_alive(pid):
                break
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def process_alive(pid: int) -> bool:
    """True while process ``pid`` exists and has not exited: a zombie (state ``Z`` in
    ``/proc/PID/stat``: exited, not yet reaped by a parent that is not this process) counts as
    exited, else a stop waited out its whole grace for a process that ended at once."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def replace_flags(args: list[str], replaced: dict[str, str]) -> list[str]:
    """``args`` with each flag of ``replaced`` (``--flag value`` or ``--flag=value``) given the
    new value, appended when absent."""
    replaced = dict(replaced)
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
    return argv


#: Seconds a registered node's Lease lasts; ``node-heartbeat`` renews every half of it, within
#: kube-controller-manager's --node-monitor-grace-period (50 s by default).
NODE_LEASE_SECONDS = 40


def rfc3339_now(micro: bool = False) -> str:
    """UTC now as the API writes it (``...Z``; with ``micro``, MicroTime's 6 decimals)."""
    now = time.time()
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return text + (f".{int(now % 1 * 1_000_000):06d}Z" if micro else "Z")


def read_objects(path: Path) -> list[dict]:
    """The objects of a YAML or JSON file, ``List`` items flattened."""
    objects: list[dict] = []
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict):
            objects.extend(doc.get("items") or [] if doc.get("kind", "").endswith("List") else [doc])
    return objects


class ApiClient:
    """A small JSON client of the local kube-apiserver (admin token, loopback, one keep-alive
    connection per thread); used to register many Nodes and renew their Leases quickly."""

    def __init__(self, port: int, token: str, workers: int = 4):
        self.port, self.token, self.workers = port, token, workers
        self.local = threading.local()
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # our own apiserver on loopback

    def request(self, method: str, path: str, body: dict | None = None, expect=(200, 201),
                content_type: str = "application/json") -> dict:
        """Send one request; return the decoded answer. Raises ClusterError on an unexpected status."""
        for attempt in range(3):
            connection = getattr(self.local, "connection", None)
            if connection is None:
                connection = self.local.connection = http.client.HTTPSConnection(
                    "127.0.0.1", self.port, timeout=30, context=self.context)
            try:
                connection.request(method, path, body=json.dumps(body) if body is not None else None,
                                   headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                                            "Accept": "application/json"})
                response = connection.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                connection.close()
                self.local.connection = None
                if attempt == 2:
                    raise
                continue
            if response.status not in expect:
                raise ClusterError(f"{method} {path}: {response.status} {data[:500]!r}")
            return json.loads(data) if data else {}
        return {}

    def map(self, function, items) -> None:
        """Call ``function`` on every item with :attr:`workers` threads; re-raise the first error."""
        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            for future in [pool.submit(function, item) for item in items]:
                future.result()


#: Nodes registered per batch (``DIR/nodes.json`` is updated after each).
NODE_BATCH = 256


def ready_conditions(now: str) -> list[dict]:
    """The node status conditions a kubelet posts on a healthy node: Ready=True."""
    return [{"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "registered by hack/local-cluster.sh nodes (no kubelet)",
             "lastHeartbeatTime": now, "lastTransitionTime": now}]


def heartbeat(directory: Path) -> int:
    """``node-heartbeat``: what a kubelet does for its node, for every node ``nodes`` registered
    (``DIR/nodes.json``, re-read each round), every half of :data:`NODE_LEASE_SECONDS` until
    SIGTERM: renew its kube-node-lease Lease, and post Ready=True again on a node whose Ready
    condition is not True (the node lifecycle controller sets it Unknown when a Lease was late,
    and only a kubelet sets it back). A failed round is logged and retried."""
    cluster = LocalCluster(directory)
    api = ApiClient(cluster.state["ports"]["kube-apiserver"], cluster.state["admin_token"], workers=8)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    while not stopping.is_set():
        started = time.monotonic()
        names = set(json.loads((directory / "nodes.json").read_text()))
        patch = {"spec": {"renewTime": rfc3339_now(micro=True)}}
        try:
            api.map(lambda name, patch=patch: api.request(
                "PATCH", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}", patch,
                content_type="application/merge-patch+json"), sorted(names))
            not_ready = [n["metadata"]["name"] for n in api.request("GET", "/api/v1/nodes")["items"]
                         if n["metadata"]["name"] in names
                         and not any(c.get("type") == "Ready" and c.get("status") == "True"
                                     for c in n.get("status", {}).get("conditions") or [])]
            status = {"status": {"conditions": ready_conditions(rfc3339_now())}}
            api.map(lambda name, status=status: api.request("PATCH", f"/api/v1/nodes/{name}/status", status,
                                             content_type="application/strategic-merge-patch+json"), not_ready)
            print(f"{rfc3339_now()} renewed {len(names)} node Leases, {len(not_ready)} set Ready again, "
                  f"in {time.monotonic() - started:.1f} s", flush=True)
        except (ClusterError, OSError, http.client.HTTPException) as error:
            print(f"{rfc3339_now()} renewal failed: {error}", flush=True)
        stopping.wait(max(1.0, NODE_LEASE_SECONDS / 2 - (time.monotonic() - started)))
    return 0


def local_serve_argv(args: list[str], port: int, cert_dir: Path, kubeconfig: Path) -> list[str]:
    """The Deployment's ``serve`` arguments with the three that name the pod's surroundings
    replaced: ``--bind`` (loopback, ``port``), ``--cert-dir`` and ``--kubeconfig`` (the
    ServiceAccount token; in the pod, the in-cluster configuration)."""
    replaced = replace_flags(args, {"--bind": f"127.0.0.1:{port}", "--cert-dir": str(cert_dir)})
    return replaced + ["--kubeconfig", str(kubeconfig)]


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


def _hack_module(name: str):
    """A module of this directory (hack/operators.py, hack/node.py, hack/kwok.py), imported by name."""
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    return importlib.import_module(name)


def _operators():
    """hack/operators.py (the training operators ``--with`` starts)."""
    return _hack_module("operators")


def _node():
    """hack/node.py (the real node of ``up --kubelet``)."""
    return _hack_module("node")


def start_node(cluster: LocalCluster) -> None:
    """``up --kubelet``: one node run by a real kubelet with containerd and runc (hack/node.py).
    Raises ClusterError naming the step that failed."""
    node = _node()
    try:
        node.start(cluster)
    except node.NodeError as error:
        raise ClusterError(f"node: {error}") from None


def _kwok():
    """hack/kwok.py (KWOK's controller, ``--with kwok``)."""
    return _hack_module("kwok")


def up(directory: Path, webhook: bool, gate_pods: bool, controller: bool = False,
       upstream: tuple[str, ...] = (), workload_api: bool = False, target: str | None = None,
       kubelet: bool = False) -> LocalCluster:
    """Start the control plane (and with ``webhook`` the local ``serve``; with ``controller`` the
    with-controller overlay's two controller replicas; ``upstream``: the named :data:`UPSTREAM`
    programs; ``workload_api``: the Workload API's feature gates and API versions,
    :func:`workload_api_args`) with state in ``directory``. ``target``: ``serve --target``; by
    default ``workload-api`` when ``workload_api`` and the webhook runs (its controller then makes
    the gangs' Workload, CompositePodGroup and PodGroups, DESIGN.md §9b), else serve's own default.
    ``kubelet``: one real node (:func:`start_node`) right after the control plane.

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
    if target is None and workload_api and (webhook or controller):
        target = "workload-api"
    cluster.state = {"ports": {}, "components": [], "bin": str(build()), "workload_api": workload_api,
                     "target": target, "upstream": list(upstream)}
    cluster.save()
    try:
        started = time.monotonic()
        cluster.start_control_plane()
        if kubelet:
            start_node(cluster)
        for name in _operators().ordered(list(upstream)):  # fail before starting anything when a program cannot be built
            build_upstream(name)
        if webhook or controller:
            docs = cluster.start_webhook(gate_pods, controller=controller)
            if controller:
                cluster.start_controllers(docs)
        cluster.start_upstream(list(upstream))
        cluster.state["up_seconds"] = round(time.monotonic() - started, 1)
        cluster.save()
    except (ClusterError, subprocess.TimeoutExpired) as error:
        cluster.stop_all()
        raise ClusterError(f"up: {error}") from None
    return cluster


def up_workload_api(directory: Path, upstream: tuple[str, ...] = ()) -> LocalCluster:
    """The Workload API setup (DESIGN.md §9b), for tests and benchmarks: kube-apiserver,
    kube-controller-manager and kube-scheduler with the Workload API on, our webhook serving
    ``--target workload-api`` and the with-controller overlay's controllers, which create each gang's
    Workload, CompositePodGroup and PodGroups (``upstream``: e.g. ``("lws",)``). As
    ``local-cluster.sh up DIR --workload-api --controller``. Raises :class:`ClusterError`."""
    return up(directory, webhook=True, gate_pods=False, controller=True, upstream=upstream, workload_api=True,
              target="workload-api")


def main(argv: list[str]) -> int:
    """Command-line entry point; returns the exit status (0 done, 1 failed, 2 bad usage)."""
    parser = argparse.ArgumentParser(prog="local-cluster.sh", description=__doc__.split("\n\n")[0])
    # the metavar lists the user's commands; `heartbeat` (started by `nodes`) is added without help=, so
    # it is not listed (help=argparse.SUPPRESS prints "==SUPPRESS==" on Python 3.11)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{build,up,nodes,stop-apiserver,start-apiserver,down}")
    commands.add_parser("build", help="build or reuse the binaries; last stdout line: their directory")
    up_parser = commands.add_parser("up", help="start a control plane with state, logs and pids in DIR")
    up_parser.add_argument("dir", type=Path)
    up_parser.add_argument("--webhook", action="store_true",
                           help="also run segment-webhook serve as deploy/ configures it, registered by deploy/'s "
                                "webhook configurations")
    up_parser.add_argument("--gate-pods", action="store_true", help="serve with --gate-pods (implies --webhook)")
    up_parser.add_argument("--controller", action="store_true",
                           help="render deploy/overlays/with-controller (on self-signed; gating on) and run its "
                                "two segment-webhook controller replicas (implies --webhook)")
    up_parser.add_argument("--with", dest="upstream", default="", metavar="NAMES",
                           help="comma-separated upstream programs to build and start: "
                                + ", ".join(sorted(UPSTREAM)) + " (known, not buildable here: "
                                + ", ".join(sorted(UNAVAILABLE_UPSTREAM)) + ")")
    up_parser.add_argument("--workload-api", action="store_true",
                           help="start kube-apiserver, kube-controller-manager and kube-scheduler with the Workload "
                                "API on (feature gates " + WORKLOAD_API_GATES + "; runtime-config "
                                + WORKLOAD_API_RUNTIME_CONFIG + ")")
    up_parser.add_argument("--kubelet", "--node", dest="kubelet", action="store_true",
                           help="also run one node: a real kubelet with containerd, runc and the CNI bridge plugin, "
                                "pods in network namespaces on a bridge of this run (hack/node.py, docs/tasks/cluster.md)")
    up_parser.add_argument("--target", choices=("kai", "kueue", "workload-api", "gate"), default=None,
                           help="serve --target (default: workload-api with --workload-api and the webhook, else "
                                "serve's default)")
    nodes_parser = commands.add_parser("nodes", help="register the Nodes of a dump and keep them Ready until down")
    nodes_parser.add_argument("dir", type=Path)
    nodes_parser.add_argument("file", type=Path)
    heartbeat_parser = commands.add_parser("heartbeat")
    heartbeat_parser.add_argument("dir", type=Path)
    for name, what in (("stop-apiserver", "stop kube-apiserver alone (an outage; etcd, the node and pods keep running)"),
                       ("start-apiserver", "start kube-apiserver again with the same flags, port and etcd")):
        commands.add_parser(name, help=what).add_argument("dir", type=Path)
    down_parser = commands.add_parser("down", help="stop everything `up DIR` started")
    down_parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build_everything())
        elif args.command == "heartbeat":
            return heartbeat(args.dir.resolve())
        elif args.command == "nodes":
            cluster = LocalCluster(args.dir)
            if "kube-apiserver" not in cluster.state.get("components", []):
                raise ClusterError(f"nodes: no running cluster in {args.dir} (`up {args.dir}` first)")
            started = time.monotonic()
            if "kwok-controller" in cluster.state.get("components", []):  # up --with kwok: KWOK's nodes
                count = _kwok().register_nodes(cluster, args.file)
                print(f"nodes: registered {count} KWOK Nodes from {args.file} in {time.monotonic() - started:.1f} s; "
                      f"KWOK keeps them Ready and runs their pods until `down {args.dir}`")
            else:
                count = cluster.register_nodes(args.file)
                print(f"nodes: registered {count} Nodes from {args.file} in {time.monotonic() - started:.1f} s; "
                      f"node-heartbeat renews their Leases until `down {args.dir}`")
            if "kueue-manager" in cluster.state.get("components", []):
                names = kueue_queues(cluster, args.file)
                print(f"nodes: Kueue Topology and ResourceFlavor {', '.join(names)}, ClusterQueue "
                      f"{KUEUE_CLUSTER_QUEUE}, LocalQueue default/{KUEUE_LOCAL_QUEUE}")
        elif args.command == "up":
            upstream = tuple(name for name in args.upstream.split(",") if name)
            cluster = up(args.dir, args.webhook or args.gate_pods or args.controller, args.gate_pods,
                         controller=args.controller, upstream=upstream, workload_api=args.workload_api,
                         target=args.target, kubelet=args.kubelet)
            ports = cluster.state["ports"]
            print(f"up: kube-apiserver https://127.0.0.1:{ports['kube-apiserver']}"
                  + (f", segment-webhook {cluster.state['webhook_url']}" if "webhook_url" in cluster.state else "")
                  + (f", node {cluster.state['node']['name']} Ready (pods in {cluster.state['node']['subnet']} on "
                     f"{cluster.state['node']['bridge']})" if "node" in cluster.state else "")
                  + f" in {cluster.state['up_seconds']} s")
            print(cluster.kubeconfig)
        elif args.command in ("stop-apiserver", "start-apiserver"):
            if not (args.dir / STATE_FILE).is_file():
                raise ClusterError(f"{args.command}: {args.dir} holds no cluster that `up` started (no {STATE_FILE})")
            cluster = LocalCluster(args.dir)
            if args.command == "stop-apiserver":
                print(f"stop-apiserver: kube-apiserver stopped in {stop_apiserver(cluster):.1f} s; "
                      f"`start-apiserver {args.dir}` starts it again")
            else:
                print(f"start-apiserver: kube-apiserver https://127.0.0.1:{cluster.state['ports']['kube-apiserver']} "
                      f"ready in {start_apiserver(cluster):.1f} s")
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
