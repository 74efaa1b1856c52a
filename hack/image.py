"""Build and run the container image without Docker (docs/tasks/image-and-helm.md).

Usage (through ``hack/image.sh``)::

    image.sh build       # two bases from Debian packages (mmdebstrap), then the Dockerfile (podman build)
    image.sh smoke       # run it as deploy/base runs it: /readyz, one review over TLS, SIGTERM
    image.sh contents    # the image's config, Python packages, bytecode, largest directories, as JSON
    image.sh controller-once DUMP   # controller --once --snapshot DUMP in the image, as JSON

``build`` makes two Debian ``bookworm`` root filesystems with ``mmdebstrap``: the builder's
(``minbase``, Python 3.11 with pip installed under /usr/local, as the Dockerfile's default
``python:3.11.14-slim-bookworm`` has it) and the image's own (``custom``: only Python 3.11 and
what the pod runs, :data:`RUNTIME_PACKAGES`). Each is cached as a tar under
``$SEGMENT_WEBHOOK_IMAGE_CACHE`` or ``~/.cache/segment-webhook/image`` keyed by the hash of its
recipe and imported as ``localhost/segment-webhook-base:bookworm-<key>`` (builder) and
``localhost/segment-webhook-runtime:bookworm-<key>``; then the unmodified Dockerfile is built with
``--build-arg BUILDER_IMAGE=`` and ``--build-arg BASE_IMAGE=`` those images. The last line of
``build``'s and ``smoke``'s stdout is a JSON object of what was measured. Exit codes: 0 done, 1 a
step failed (its output is shown), 2 a tool is missing (the message names the Debian package).
"""

from __future__ import annotations

import argparse
import base64
import configparser
import hashlib
import http.client
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

HACK = Path(__file__).resolve().parent
REPO = HACK.parent
DEPLOYMENT = REPO / "deploy" / "base" / "deployment.yaml"

SUITE = "bookworm"
#: Debian archives of the base: the release, its updates and its security updates.
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
#: What the builder base holds beyond mmdebstrap's ``minbase`` (Essential packages and apt): Python
#: 3.11, the pip wheel Debian ships (installed under /usr/local by the hook below), passwd, CA
#: certificates and /etc/services as python:*-slim has them. Only the Dockerfile's builder stage
#: runs on it; none of it is in the image but what the image's base has too.
BASE_PACKAGES = ("python3", "python3-pip-whl", "passwd", "ca-certificates", "netbase")
#: mmdebstrap customize hooks: make the builder base behave as python:*-slim for the Dockerfile's
#: ``pip`` (no PEP 668 marker, pip on PATH in /usr/local/bin).
BASE_HOOKS = (
    'rm -f "$1"/usr/lib/python3.11/EXTERNALLY-MANAGED',
    'chroot "$1" sh -c \'wheel=$(ls /usr/share/python-wheels/pip-*.whl) && '
    'python3 "$wheel/pip" install --no-index --no-cache-dir --disable-pip-version-check "$wheel"\'',
)
#: dpkg filters as Debian's slim images have them (the python:*-slim base is bookworm-slim): no
#: manual pages, documentation or translations; copyright files kept.
BASE_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
#: What the image's own base holds, installed with mmdebstrap's ``custom`` variant (only these and
#: their dependencies; no apt, no Essential set): bookworm's Python 3.11 with its whole standard
#: library (``python3.11``, whose postinst compiles it; ``python3-minimal`` for /usr/bin/python3,
#: the interpreter the builder's environment links to), libstdc++ (greenlet, rapidfuzz and numpy
#: are C++), coreutils (/bin/sleep of the Deployment's preStop pause), dash (/bin/sh for the
#: Dockerfile's RUN), base-files, base-passwd and netbase (/etc/os-release, passwd, group,
#: services), and what dpkg needs to install packages (dpkg, diffutils, libc-bin, sed, grep,
#: findutils; listed first: mmdebstrap hands them to dpkg in this order, and libc6's preinst
#: runs sed). No CA certificates: the Kubernetes client trusts the ServiceAccount's ca.crt or
#: the kubeconfig's, else certifi's bundle.
RUNTIME_PACKAGES = ("dpkg", "diffutils", "libc-bin", "sed", "grep", "findutils", "base-files", "base-passwd",
                    "coreutils", "dash", "netbase", "python3.11", "python3-minimal", "libstdc++6")
#: The builder's filters plus glibc's iconv modules (gconv: Python's codecs do not use them). (The
#: standard library's test/ helpers stay: python3.11's postinst compiles them and fails without.)
RUNTIME_DPKG_OPTIONS = BASE_DPKG_OPTIONS + ("path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*",)
#: Config the imported bases get (python:*-slim sets the same PATH and LANG).
BASE_CHANGES = (
    "ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV=LANG=C.UTF-8",
    'CMD=["python3"]',
)
#: Commands ``contents`` looks up on the image's PATH: what runs, and what must not be there.
COMMANDS = ("segment-webhook", "python3", "sleep", "sh", "pip", "pip3", "apt-get", "gcc", "cc", "perl")
#: Site-packages of the image's virtual environment (the Dockerfile's /opt/segment-webhook).
VENV_SITE = "opt/segment-webhook/lib/python3*/site-packages"
#: The Deployment's numeric user and group (deploy/base/deployment.yaml, Dockerfile USER).
UID = 65532
#: The worker pod the smoke review admits and what DESIGN.md §2/§7 label it with: replica index 5
#: with segment size 4 is segment 1, subgroup worker-1.
SMOKE_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "pytorch-tp4-worker-5", "namespace": "default",
                 "labels": {"training.kubeflow.org/replica-type": "worker",
                            "training.kubeflow.org/replica-index": "5",
                            "training.kubeflow.org/job-name": "pytorch-tp4"},
                 "annotations": {"kai.scheduler/topology": "cluster-topology",
                                 "kai.scheduler/segment-size": "4"}},
    "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:latest"}]},
}


class ImageError(RuntimeError):
    """A step failed or a tool is missing; ``code`` is the exit status (1 failed, 2 missing)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def cache_root() -> Path:
    """Where base tars live: ``$SEGMENT_WEBHOOK_IMAGE_CACHE``, else ``~/.cache/segment-webhook/image``."""
    configured = os.environ.get("SEGMENT_WEBHOOK_IMAGE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "segment-webhook" / "image"


def package_version() -> str:
    """``setup.cfg``'s ``[metadata] version`` (the image tag)."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config["metadata"]["version"]


def image_tag() -> str:
    """The local tag ``build`` gives the image: ``localhost/segment-webhook:<version>``."""
    return f"localhost/segment-webhook:{package_version()}"


def mmdebstrap_argv(output: Path, base: str = "builder") -> list[str]:
    """The mmdebstrap command writing a base root filesystem as a tar to ``output``: ``builder``
    (the Dockerfile's BUILDER_IMAGE) or ``runtime`` (its BASE_IMAGE, what the image is made of)."""
    if base == "builder":
        argv = ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES)]
        argv += [f"--dpkgopt={option}" for option in BASE_DPKG_OPTIONS]
        argv += [f"--customize-hook={hook}" for hook in BASE_HOOKS]
    else:
        argv = ["mmdebstrap", "--variant=custom", "--include=" + ",".join(RUNTIME_PACKAGES)]
        argv += [f"--dpkgopt={option}" for option in RUNTIME_DPKG_OPTIONS]
    return argv + [SUITE, str(output), *MIRRORS]


def base_key(base: str = "builder") -> str:
    """A short hash of a base's recipe (suite, archives, packages, hooks, image config)."""
    recipe = {"argv": mmdebstrap_argv(Path("OUT"), base), "changes": BASE_CHANGES}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def base_tag(base: str = "runtime") -> str:
    """The local tag of an imported base: ``localhost/segment-webhook-base:bookworm-<key>`` (the
    builder's) or ``localhost/segment-webhook-runtime:bookworm-<key>``."""
    name = "segment-webhook-base" if base == "builder" else "segment-webhook-runtime"
    return f"localhost/{name}:{SUITE}-{base_key(base)}"


def need(*tools: str) -> None:
    """Raise ImageError (code 2) naming the Debian package of the first tool not on PATH, or
    when not run as root (mmdebstrap's root mode, rootful podman, the certificates' group)."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise ImageError(f"no `{tool}` on PATH: apt-get install -y {tool} (Debian package of the same name)", 2)
    if os.geteuid() != 0:
        raise ImageError("hack/image.sh needs root (mmdebstrap's root mode, rootful podman): run it with sudo", 2)


def run(argv: list[str], timeout: float = 1800, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; raise ImageError with its output when it exits non-zero."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    if result.returncode != 0:
        raise ImageError(f"`{' '.join(argv)}` exited {result.returncode}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def podman_has_image(tag: str) -> bool:
    """True when podman's local storage has ``tag``."""
    return subprocess.run(["podman", "image", "exists", tag], capture_output=True).returncode == 0


def build_base(base: str, log: Any = sys.stderr) -> tuple[str, float | None]:
    """Make (or reuse) the tar of base ``builder`` or ``runtime`` and import it; return (its tag,
    mmdebstrap seconds or None when the cached tar was reused). Raises ImageError when mmdebstrap
    or the import fails."""
    tag = base_tag(base)
    prefix = "base" if base == "builder" else "runtime"
    tar = cache_root() / f"{prefix}-{SUITE}-{base_key(base)}.tar"
    seconds = None
    if not tar.is_file():
        tar.parent.mkdir(parents=True, exist_ok=True)
        partial = tar.with_suffix(".partial.tar")
        print(f"image: mmdebstrap {SUITE} -> {tar}", file=log, flush=True)
        started = time.monotonic()
        run(mmdebstrap_argv(partial, base))
        seconds = round(time.monotonic() - started, 1)
        partial.rename(tar)
        print(f"image: {base} base made in {seconds} s", file=log, flush=True)
    else:
        print(f"image: reusing {tar}", file=log, flush=True)
    if not podman_has_image(tag):
        changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
        run(["podman", "import", *changes, str(tar), tag])
    return tag, seconds


def host_ca_volumes(workdir: Path) -> list[str]:
    """``--volume`` flags for the Dockerfile's RUN steps when this host's pip trusts its own CA
    bundle (``PIP_CERT``; a TLS-intercepting egress proxy): the bundle and a pip.conf naming it,
    mounted for the build only (never written into a layer). Empty when pip uses its defaults."""
    bundle = os.environ.get("PIP_CERT")
    if not bundle or not Path(bundle).is_file():
        return []
    pip_conf = workdir / "pip.conf"
    pip_conf.write_text("[global]\ncert = /run/host-ca/ca-bundle.crt\n")
    return ["--volume", f"{bundle}:/run/host-ca/ca-bundle.crt:ro", "--volume", f"{pip_conf}:/etc/pip.conf:ro"]


def container_flags(image: str, log: Any = sys.stderr) -> tuple[list[str], list[str], dict[str, str]]:
    """How containers run on this machine: ``(podman global flags, run/build flags, refusals)``.
    Tries ``podman run --rm --entrypoint /bin/true IMAGE`` with podman's defaults, then with the resource limits
    lowered to this host's (podman's defaults are above them and raising a hard limit needs
    CAP_SYS_RESOURCE), then also with runc instead of the default crun (crun refuses a hybrid
    cgroup v1 + v2 host whose v2 hierarchy has controllers). ``refusals``: each refused attempt's
    error. Raises ImageError listing the refusals when no attempt runs a container."""
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limits = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]
    attempts = {"podman defaults": ([], []), "host resource limits": ([], limits),
                "host resource limits, runc": (["--runtime", "runc"], limits)}
    refusals: dict[str, str] = {}
    for label, (global_flags, flags) in attempts.items():
        if label.endswith("runc") and shutil.which("runc") is None:
            refusals[label] = "no runc on PATH (apt-get install -y runc)"
            continue
        done = subprocess.run(["podman", *global_flags, "run", "--rm", *flags, "--entrypoint", "/bin/true", image],
                              capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            return global_flags, flags, refusals
        refusals[label] = done.stderr.strip()
        print(f"image: podman run refused ({label}): {refusals[label]}", file=log, flush=True)
    raise ImageError("no container runs on this machine:\n" + "\n".join(f"{k}: {v}" for k, v in refusals.items()))


def build(log: Any = sys.stderr) -> dict[str, Any]:
    """``build``: both bases, then the Dockerfile with ``BUILDER_IMAGE`` and ``BASE_IMAGE`` = those
    bases. Returns the figures printed as JSON: tags, seconds of each step, image id, size in
    bytes and its layers (``podman history``: bytes and the instruction that made each)."""
    need("mmdebstrap", "podman")
    started = time.monotonic()
    builder, builder_seconds = build_base("builder", log)
    base, base_seconds = build_base("runtime", log)
    global_flags, flags, refusals = container_flags(builder, log)
    tag = image_tag()
    with tempfile.TemporaryDirectory(prefix="segment-webhook-image-") as workdir:
        argv = ["podman", *global_flags, "build", *flags, "--network", "host",
                "--build-arg", f"BUILDER_IMAGE={builder}", "--build-arg", f"BASE_IMAGE={base}",
                *host_ca_volumes(Path(workdir)), "--tag", tag, "--file", str(REPO / "Dockerfile"), str(REPO)]
        print(f"image: podman build --build-arg BUILDER_IMAGE={builder} --build-arg BASE_IMAGE={base} --tag {tag}",
              file=log, flush=True)
        build_started = time.monotonic()
        result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
        if result.returncode != 0:
            raise ImageError(f"podman build exited {result.returncode}:\n{result.stdout[-6000:]}")
    build_seconds = round(time.monotonic() - build_started, 1)
    pruned = [line for line in result.stdout.splitlines() if line.startswith('{"bytes_before"')]
    inspected = json.loads(run(["podman", "image", "inspect", tag]).stdout)[0]
    return {"image": tag, "id": inspected["Id"][:12], "size_bytes": inspected["Size"], "base": base,
            "builder": builder, "podman_flags": global_flags + flags, "refused": refusals,
            "builder_seconds": builder_seconds, "base_seconds": base_seconds, "dockerfile_seconds": build_seconds,
            "total_seconds": round(time.monotonic() - started, 1), "layers": layers(tag),
            "pruned": json.loads(pruned[-1]) if pruned else None}


def layers(tag: str) -> list[dict[str, Any]]:
    """The image's layers that hold files, oldest first: ``{"bytes", "created_by"}``."""
    history = json.loads(run(["podman", "history", "--format", "json", tag]).stdout)
    return [{"bytes": int(entry["size"]), "created_by": entry.get("CreatedBy") or entry.get("createdBy", "")}
            for entry in reversed(history) if int(entry["size"]) > 0]


def site_packages(root: Path) -> dict[str, str]:
    """``{distribution name: version}`` of every ``*.dist-info`` under the image's Python
    directories (the environment :data:`VENV_SITE`, /usr/local/lib/python3*, /usr/lib/python3*),
    read from their METADATA."""
    found: dict[str, str] = {}
    for pattern in (f"{VENV_SITE}/*.dist-info", "usr/local/lib/python3*/*-packages/*.dist-info",
                    "usr/lib/python3*/*-packages/*.dist-info"):
        for info in sorted(root.glob(pattern)):
            fields: dict[str, str] = {}
            for line in (info / "METADATA").read_text(errors="replace").splitlines():
                if not line:
                    break
                key, _, value = line.partition(": ")
                fields.setdefault(key, value)
            found[fields["Name"]] = fields["Version"]
    return found


def bytecode_problems(root: Path) -> dict[str, Any]:
    """Check the environment's bytecode as the image's Python would on import (it cannot write
    any: the root filesystem is read-only): every ``.py`` on disk has a ``__pycache__`` .pyc for
    this Python whose hash matches the source (``checked-hash``), and every ``.py`` in a zip on
    ``sys.path`` has an ``x.pyc`` entry for this Python. Returns the counts checked and the paths
    without valid bytecode (``stale``). Needs this Python to be the image's minor version."""
    magic = importlib.util.MAGIC_NUMBER
    tag = sys.implementation.cache_tag
    checked, stale = 0, []
    for site in root.glob(VENV_SITE):
        for source in sorted(site.rglob("*.py")):
            checked += 1
            cached = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
            header = cached.read_bytes()[:16] if cached.is_file() else b""
            expected = magic + (3).to_bytes(4, "little") + importlib.util.source_hash(source.read_bytes())
            if header != expected:
                stale.append(str(source.relative_to(root)))
        for archive in sorted(site.glob("*.zip")):
            with zipfile.ZipFile(archive) as bundle:
                names = set(bundle.namelist())
                for name in sorted(names):
                    if name.endswith(".py"):
                        checked += 1
                        if name + "c" not in names or bundle.read(name + "c")[:4] != magic:
                            stale.append(f"{archive.relative_to(root)}/{name}")
    return {"python": tag, "checked": checked, "stale": stale}


def largest(root: Path, count: int = 12) -> dict[str, int]:
    """Bytes of the ``count`` largest entries of the environment's site-packages and of the
    top-level directories of the root filesystem (``du``-like, files counted once)."""
    def size(path: Path) -> int:
        if path.is_symlink() or not path.exists():
            return 0
        return path.stat().st_size if path.is_file() else sum(
            entry.lstat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())
    sizes = {f"/{entry.relative_to(root)}": size(entry) for entry in root.iterdir() if entry.is_dir()
             and not entry.is_symlink()}
    for site in root.glob(VENV_SITE):
        sizes |= {f"/{entry.relative_to(root)}": size(entry) for entry in site.iterdir()}
    return dict(sorted(sizes.items(), key=lambda item: -item[1])[:count])


def contents(tag: str | None = None) -> dict[str, Any]:
    """The image's config (User, Entrypoint, Cmd, Env, ExposedPorts, WorkingDir), its Python
    distributions, its bytecode check (:func:`bytecode_problems`), its largest directories
    (:func:`largest`), what the environment's zip holds, and where each of :data:`COMMANDS` is
    on its PATH (None: absent), read from podman's storage without running a container."""
    need("podman")
    tag = tag or image_tag()
    if not podman_has_image(tag):
        raise ImageError(f"no image {tag}: run hack/image.sh build first")
    config = json.loads(run(["podman", "image", "inspect", tag]).stdout)[0]["Config"]
    mounted = Path(run(["podman", "image", "mount", tag]).stdout.strip())
    try:
        packages = site_packages(mounted)
        shell_users = (mounted / "etc" / "passwd").read_text().splitlines()
        bytecode = bytecode_problems(mounted)
        sizes = largest(mounted, 25)
        zipped = sorted({name.split("/")[0] for archive in mounted.glob(f"{VENV_SITE}/*.zip")
                         for name in zipfile.ZipFile(archive).namelist()})
        path = next((item.split("=", 1)[1] for item in config.get("Env") or [] if item.startswith("PATH=")), "")
        commands = {name: next((f"{directory}/{name}" for directory in path.split(":")
                                if os.path.lexists(mounted / directory.lstrip("/") / name)), None)
                    for name in COMMANDS}
    finally:
        run(["podman", "image", "unmount", tag])
    account = next((line for line in shell_users if line.split(":")[2:3] == [str(UID)]), "")
    return {"image": tag, "config": {key: config.get(key) for key in
                                     ("User", "Entrypoint", "Cmd", "Env", "ExposedPorts", "WorkingDir")},
            "passwd": account, "packages": packages, "bytecode": bytecode, "largest": sizes, "zipped": zipped,
            "commands": commands}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tls_context(ca_file: Path) -> ssl.SSLContext:
    """A client context trusting only ``ca_file`` (the mounted certificates' CA)."""
    return ssl.create_default_context(cafile=str(ca_file))


def https(port: int, method: str, path: str, ca_file: Path, body: bytes | None = None) -> tuple[int, bytes]:
    """One request to https://localhost:port/path verified against ``ca_file``: (status, body)."""
    connection = http.client.HTTPSConnection("localhost", port, timeout=10, context=tls_context(ca_file))
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def write_certs(directory: Path) -> Path:
    """``segment-webhook certs --out`` a scratch directory, then copy tls.crt, tls.key and ca.crt
    into ``directory`` as the Deployment's Secret volume has them (mode 0440, group 65532 as
    ``fsGroup`` makes it). Returns the CA file for the client."""
    made = directory.parent / "made"
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(made)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    if done.returncode != 0:
        raise ImageError(f"segment-webhook certs failed: {done.stderr.strip()}")
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copy(made / name, directory / name)
        os.chown(directory / name, 0, UID)
        (directory / name).chmod(0o440)
    directory.chmod(0o755)
    return made / "ca.crt"


def deployment_env() -> dict[str, str]:
    """The ``value`` env entries of deploy/base's webhook container (what the pod gets)."""
    import yaml  # the project's dependency; only this subcommand needs it

    container = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: str(item["value"]) for item in container.get("env", []) if "value" in item}


def run_container(tag: str, name: str, scratch: Path, port: int, network: str,
                  podman: tuple[list[str], list[str]]) -> subprocess.CompletedProcess[str]:
    """``podman run -d`` the image as deploy/base runs its pod: the image's own user, entrypoint
    and command, a read-only root filesystem with the Deployment's two emptyDirs (/tmp in memory;
    the metrics directory a host directory made as the kubelet makes an emptyDir: mode 0777, group
    65532 with setgid as ``fsGroup`` does), every capability dropped, no privilege escalation,
    ``scratch``/certs mounted read-only as the Secret volume, the Deployment's env. ``network`` ``bridge`` publishes 8443 on
    127.0.0.1:``port``; ``host`` shares the host's network and binds 127.0.0.1:``port``.
    ``podman``: the global and run flags :func:`container_flags` found."""
    metrics = scratch / "metrics"
    metrics.mkdir(exist_ok=True)
    os.chown(metrics, 0, UID)
    metrics.chmod(0o2777)
    argv = ["podman", *podman[0], "run", *podman[1], "--detach", "--name", name, "--read-only",
            "--read-only-tmpfs=false",
            "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m,mode=1777",
            "--volume", f"{metrics}:/var/run/segment-webhook/metrics:rw",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--volume", f"{scratch / 'certs'}:/etc/segment-webhook/certs:ro"]
    for key, value in deployment_env().items():
        argv += ["--env", f"{key}={value}"]
    if network == "bridge":
        return subprocess.run(argv + ["--publish", f"127.0.0.1:{port}:8443", tag], capture_output=True, text=True,
                              timeout=300)
    return subprocess.run(argv + ["--network", "host", tag, "--bind", f"127.0.0.1:{port}", "--cert-dir",
                                  "/etc/segment-webhook/certs"], capture_output=True, text=True, timeout=300)


def wait_ready(name: str, port: int, ca_file: Path, timeout: float = 90) -> float:
    """Poll GET /readyz until it answers 200; return the seconds waited. Raises ImageError with
    the container's log when it exits or the deadline passes."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if https(port, "GET", "/readyz", ca_file)[0] == 200:
                return round(time.monotonic() - started, 1)
        except (OSError, http.client.HTTPException):
            pass
        state = run(["podman", "inspect", "--format", "{{.State.Status}}", name]).stdout.strip()
        if state != "running":
            break
        time.sleep(0.5)
    logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True, timeout=60)
    raise ImageError(f"/readyz did not answer 200 within {timeout} s:\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}")


def admission_review() -> dict[str, Any]:
    """An AdmissionReview v1 CREATE of :data:`SMOKE_POD`."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "b6c1f7a2-0d51-4c7e-9f1b-5f0e6d7c8a90",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                        "name": SMOKE_POD["metadata"]["name"], "namespace": "default", "operation": "CREATE",
                        "userInfo": {"username": "kubectl-user", "groups": ["system:authenticated"]},
                        "object": SMOKE_POD, "oldObject": None, "dryRun": False,
                        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def review(port: int, ca_file: Path) -> dict[str, Any]:
    """POST the smoke AdmissionReview to /mutate; return status, allowed, uid and decoded patch."""
    status, body = https(port, "POST", "/mutate", ca_file, json.dumps(admission_review()).encode())
    answer = json.loads(body) if status == 200 else {}
    response = answer.get("response", {})
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else None
    return {"status": status, "uid": response.get("uid"), "allowed": response.get("allowed"),
            "patchType": response.get("patchType"), "patch": patch}


def container_facts(name: str) -> dict[str, Any]:
    """The server process's uid/gid (from /proc of its host pid) and whether the root filesystem
    refuses a write (``touch /probe`` inside the container)."""
    pid = run(["podman", "inspect", "--format", "{{.State.Pid}}", name]).stdout.strip()
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    ids = {line.split(":")[0]: line.split()[1] for line in status if line.startswith(("Uid:", "Gid:"))}
    write = subprocess.run(["podman", "exec", name, "touch", "/probe"], capture_output=True, text=True, timeout=60)
    return {"uid": int(ids["Uid"]), "gid": int(ids["Gid"]), "root_write_refused": write.returncode != 0,
            "root_write_error": write.stderr.strip()}


def stop(name: str) -> dict[str, Any]:
    """SIGTERM the container's main process; wait for it to exit; return exit code, seconds and
    whether its log holds a Python traceback."""
    started = time.monotonic()
    run(["podman", "kill", "--signal", "TERM", name])
    code = int(run(["podman", "wait", name], timeout=120).stdout.strip())
    seconds = round(time.monotonic() - started, 1)
    logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True, timeout=60)
    return {"exit_code": code, "seconds": seconds, "traceback": "Traceback" in logs.stdout + logs.stderr,
            "log_tail": (logs.stdout + logs.stderr).strip().splitlines()[-3:]}


def smoke(tag: str | None = None, log: Any = sys.stderr) -> dict[str, Any]:
    """``smoke``: run the image (bridge network with a published port; when podman refuses that,
    the host network), check /readyz, one review over TLS, the process's user and the read-only
    root filesystem, then SIGTERM. Returns the figures printed as JSON. Raises ImageError when
    the container cannot start under either network (podman's refusals in the message)."""
    need("podman")
    tag = tag or image_tag()
    if not podman_has_image(tag):
        raise ImageError(f"no image {tag}: run hack/image.sh build first")
    name = f"segment-webhook-smoke-{os.getpid()}"
    global_flags, flags, refusals = container_flags(tag, log)
    with tempfile.TemporaryDirectory(prefix="segment-webhook-smoke-") as scratch:
        ca_file = write_certs(Path(scratch) / "certs")
        for network in ("bridge", "host"):
            port = free_port()
            started = run_container(tag, name, Path(scratch), port, network, (global_flags, flags))
            if started.returncode == 0:
                break
            refusals[f"{network} network"] = started.stderr.strip()
            print(f"image: podman run ({network} network) refused: {started.stderr.strip()}", file=log, flush=True)
            subprocess.run(["podman", "rm", "--force", name], capture_output=True, timeout=120)
        else:
            raise ImageError("podman run refused under both networks:\n"
                             + "\n".join(f"{key}: {value}" for key, value in refusals.items()))
        try:
            figures: dict[str, Any] = {"image": tag, "network": network, "podman_flags": global_flags + flags,
                                       "refused": refusals}
            figures["ready_seconds"] = wait_ready(name, port, ca_file)
            figures["review"] = review(port, ca_file)
            status, body = https(port, "GET", "/metrics", ca_file)
            figures["reviews_total"] = [line for line in body.decode().splitlines()
                                        if line.startswith("segment_webhook_reviews_total")] if status == 200 else status
            figures.update(container_facts(name))
            figures["sigterm"] = stop(name)
        finally:
            subprocess.run(["podman", "rm", "--force", name], capture_output=True, timeout=120)
    return figures


def controller_once(snapshot: Path, tag: str | None = None, log: Any = sys.stderr) -> dict[str, Any]:
    """``controller-once DUMP``: ``segment-webhook controller --once --snapshot DUMP -o yaml`` in
    the image, run as the Deployment runs its pods (the image's user, read-only root filesystem,
    /tmp in memory, every capability dropped, no privilege escalation, no network), ``DUMP``
    mounted read-only. Returns its exit code, stdout and stderr (the placement engine's patches)."""
    need("podman")
    tag = tag or image_tag()
    if not podman_has_image(tag):
        raise ImageError(f"no image {tag}: run hack/image.sh build first")
    global_flags, flags, _refusals = container_flags(tag, log)
    argv = ["podman", *global_flags, "run", "--rm", *flags, "--read-only", "--read-only-tmpfs=false",
            "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m,mode=1777", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--network", "none",
            "--volume", f"{snapshot.resolve()}:/input/dump.yaml:ro", "--entrypoint", "segment-webhook", tag,
            "controller", "--once", "--snapshot", "/input/dump.yaml", "-o", "yaml"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return {"image": tag, "exit_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def main(argv: list[str]) -> int:
    """Command-line entry point; returns the exit status (0 done, 1 failed, 2 missing tool)."""
    parser = argparse.ArgumentParser(prog="image.sh", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="base from Debian packages, then the Dockerfile; last line: JSON figures")
    commands.add_parser("smoke", help="run the built image: /readyz, a review over TLS, SIGTERM; last line: JSON")
    commands.add_parser("contents", help="the built image's config and Python packages as JSON (no container run)")
    commands.add_parser("base-tag", help="print the tag of the image's local base (its recipe's hash)")
    commands.add_parser("builder-tag", help="print the tag of the builder stage's local base (its recipe's hash)")
    once = commands.add_parser("controller-once", help="controller --once --snapshot DUMP in the image; JSON")
    once.add_argument("snapshot", type=Path, help="kubectl get nodes,pods -A -o yaml output")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(json.dumps(build()))
        elif args.command == "smoke":
            print(json.dumps(smoke()))
        elif args.command == "contents":
            print(json.dumps(contents()))
        elif args.command == "controller-once":
            print(json.dumps(controller_once(args.snapshot)))
        elif args.command == "builder-tag":
            print(base_tag("builder"))
        else:
            print(base_tag())
    except ImageError as error:
        print(f"image: {error}", file=sys.stderr)
        return error.code
    except subprocess.TimeoutExpired as error:
        print(f"image: `{' '.join(map(str, error.cmd))}` did not finish within {error.timeout} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
