"""Static checks of the Dockerfile, requirements.lock and .dockerignore (Docker cannot run on the
build machine, so the image is never built here): the instructions are parsed and checked one by
one; the lock is checked to be what the Dockerfile installs and to satisfy setup.cfg's
install_requires and pyproject.toml's build requirements.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.support import paths

ROOT = paths.REPO
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEPLOYMENT = ROOT / "deploy" / "base" / "deployment.yaml"
LOCK = ROOT / "requirements.lock"
BUILD_IN = ROOT / "requirements-build.in"
#: The image's virtual environment (Dockerfile): what the lock is installed into.
VENV_PYTHON = "/opt/segment-webhook/bin/python"
#: The command that made requirements.lock (docs/tasks/operations.md "Image").
LOCK_COMMAND = ("uv pip compile setup.cfg requirements-build.in --python-version 3.11 --python-platform linux "
                "--generate-hashes --output-file requirements.lock")


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs: comments dropped, ``\\`` continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            keyword, _, args = full.partition(" ")
            out.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a line continuation"
    return out


def find(keyword: str) -> list[str]:
    return [args for kw, args in instructions() if kw == keyword]


def env_vars() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in find("ENV"):
        for token in shlex.split(args):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def test_base_image_is_pinned_python_311_slim_debian():
    # An exact Python release on an exact Debian release (bookworm: coreutils' /bin/sleep for the
    # preStop pause); the lock is compiled for the same Python (--python-version 3.11).
    # Both stages' bases are build arguments (hack/image.sh passes two bases made from Debian's
    # packages); their default is what users pull. The image is the last stage, on BASE_IMAGE.
    assert instructions()[:3] == [("ARG", "BUILDER_IMAGE=python:3.11.14-slim-bookworm"),
                                  ("ARG", "BASE_IMAGE=python:3.11.14-slim-bookworm"),
                                  ("FROM", "${BUILDER_IMAGE} AS builder")]
    assert find("FROM") == ["${BUILDER_IMAGE} AS builder", "${BASE_IMAGE}"]
    # the image takes only the environment from the builder
    assert [a for a in find("COPY") if a.startswith("--from=")] == [
        "--from=builder /opt/segment-webhook /opt/segment-webhook"]
    assert "--python-version 3.11 " in LOCK_COMMAND
    container = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]["containers"][0]
    assert container["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"


def test_runs_as_non_root_numeric_user_matching_the_deployment():
    (user,) = find("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit(), "USER must be numeric (runAsNonRoot cannot check a name)"
    assert int(uid) != 0 and int(gid) != 0
    pod = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["containers"][0]["securityContext"]["runAsUser"] == int(uid)
    # USER is set after every RUN (the installs run as root, the server does not)
    kinds = [kw for kw, _ in instructions()]
    assert max(i for i, k in enumerate(kinds) if k == "RUN") < kinds.index("USER")


def test_read_only_root_filesystem_settings():
    env = env_vars()
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/var/run/segment-webhook/metrics"
    container = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]["containers"][0]
    deploy_env = {e["name"]: e.get("value") for e in container["env"]}
    assert deploy_env["PROMETHEUS_MULTIPROC_DIR"] == env["PROMETHEUS_MULTIPROC_DIR"]
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert env["PROMETHEUS_MULTIPROC_DIR"] in mounts
    assert "/tmp" in mounts  # gunicorn's worker heartbeat files (tempfile default dir)


def test_entrypoint_expose_and_cmd():
    assert find("EXPOSE") == ["8443"]
    (entrypoint,) = find("ENTRYPOINT")
    assert json.loads(entrypoint) == ["segment-webhook", "serve"]  # exec form: signals reach gunicorn
    (cmd,) = find("CMD")
    assert json.loads(cmd) == ["--bind", "0.0.0.0:8443", "--cert-dir", "/etc/segment-webhook/certs"]


def test_dependencies_layer_comes_before_the_source():
    steps = instructions()
    copies = [(i, args) for i, (kw, args) in enumerate(steps) if kw == "COPY"]
    lock_step = next(i for i, a in copies if a.split() == ["requirements.lock", "./"])
    meta_step = next(i for i, a in copies if "setup.cfg" in a.split() and "pyproject.toml" in a.split())
    src_step = next(i for i, a in copies if a.split()[0] == "webhook")
    deps_step = next(i for i, (kw, a) in enumerate(steps) if kw == "RUN" and "-r requirements.lock" in a)
    pkg_step = next(i for i, (kw, a) in enumerate(steps) if kw == "RUN" and a.split()[:1] == ["pip"]
                    and " install " in a and " . " in f" {a} ")
    assert lock_step < deps_step < meta_step < src_step < pkg_step


def test_the_dockerfile_installs_the_lock_and_nothing_else():
    """Every pip install of the Dockerfile: the lock with hash checking (pip then refuses any
    requirement the lock does not pin), then the package without dependencies or a build-isolation
    download (its build backend comes from the lock)."""
    installs = []
    for run in find("RUN"):
        for command in run.split("&&"):
            words = shlex.split(command)
            if words[:1] == ["pip"] and "install" in words:
                installs.append(words[1:])
    # into the virtual environment the image copies (pip itself stays in the builder)
    assert installs == [
        ["--python", VENV_PYTHON, "install", "--no-cache-dir", "--require-hashes", "-r", "requirements.lock"],
        ["--python", VENV_PYTHON, "install", "--no-cache-dir", "--no-deps", "--no-build-isolation", "."],
    ]
    # then hack/image_prune.py cuts it (tests/unit/hack/test_image_prune.py), run by the environment's Python
    assert f"{VENV_PYTHON} image_prune.py" in find("RUN")
    assert "hack/image_prune.py ./" in find("COPY")


def _lock_entries() -> dict[str, tuple[str, list[str]]]:
    """``{normalized name: (version, [sha256 hashes])}`` of requirements.lock."""
    from packaging.utils import canonicalize_name

    entries: dict[str, tuple[str, list[str]]] = {}
    text = LOCK.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        requirement, *options = line.split()
        name, sep, version = requirement.partition("==")
        assert sep and version, f"requirements.lock: {requirement!r} is not pinned with =="
        hashes = [o.split(":", 1)[1] for o in options if o.startswith("--hash=sha256:")]
        assert hashes, f"requirements.lock: {requirement} has no sha256 hash"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), requirement
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def test_lock_was_made_by_the_documented_command():
    first, command = LOCK.read_text().splitlines()[:2]
    assert first == "# This file was autogenerated by uv via the following command:"
    # README's refresh command, with or without --upgrade (take new releases).
    words = [w for w in shlex.split(command.lstrip("# ")) if w not in ("--upgrade", "-U")]
    assert words == LOCK_COMMAND.split()


def test_lock_satisfies_setup_cfg_and_the_build_backend():
    """The image gets exactly the lock: every install_requires and every pyproject build
    requirement must be pinned there at a version its bound allows (a raised bound fails here
    until the lock is refreshed)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on; setup.cfg allows 3.10
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    entries = _lock_entries()
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    runtime = [Requirement(r) for r in cfg["options"]["install_requires"].splitlines()
               if r.strip() and not r.strip().startswith("#")]
    build = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]]
    build_in = [Requirement(r) for r in BUILD_IN.read_text().splitlines() if r.strip() and not r.startswith("#")]
    assert sorted(map(str, build_in)) == sorted(map(str, build))  # requirements-build.in follows pyproject.toml
    assert {r.name for r in runtime} >= {"kubernetes", "gunicorn", "cryptography", "Flask", "PyYAML"}
    for requirement in runtime + build:
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{requirement} is not in requirements.lock: refresh it (README)"
        version = entries[name][0]
        assert requirement.specifier.contains(version, prereleases=True), \
            f"requirements.lock pins {name}=={version}, outside {requirement}: refresh it (README)"
    assert entries["kubernetes"][0].split(".")[0] == "37"  # kubernetes.informer (see setup.cfg)
    assert not any(n in entries for n in ("pytest", "hypothesis", "ortools"))  # test extras stay out


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore semantics for the patterns used here (last match wins, ``!`` re-includes)."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/") or (
                pat.startswith("**/") and fnmatch.fnmatch(path.rsplit("/", 1)[-1], pat[3:])):
            ignored = not negate
    return ignored


@pytest.mark.parametrize("path, ignored", [
    ("requirements.lock", False),
    ("requirements-build.in", True),
    ("setup.cfg", False),
    ("pyproject.toml", False),
    ("README.md", False),
    ("webhook/cli/__init__.py", False),
    ("webhook/data/topology.yaml", False),
    ("webhook/__pycache__/cli.cpython-311.pyc", True),
    ("hack/image_prune.py", False),
    ("hack/image.py", True),
    ("tests/unit/deploy/test_deploy.py", True),
    (".git/config", True),
    ("deploy/overlays/self-signed/certs/tls.key", True),
    ("certs/tls.key", True),
])
def test_dockerignore_keeps_only_the_build_inputs(path, ignored):
    patterns = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert _ignored(path, patterns) is ignored


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="requirements.lock is compiled for Python 3.11 (the image's)")
def test_dockerfile_pip_steps_install_exactly_the_lock(tmp_path):
    """Run the Dockerfile's pip commands as written (no Docker here), in a fresh virtual environment
    of this machine's Python 3.11, in a build context laid out as its COPY steps do. Afterwards the
    environment holds exactly the locked versions, plus pip and the package itself. Needs PyPI."""
    import shutil as _shutil

    from packaging.utils import canonicalize_name

    context = tmp_path / "src"
    context.mkdir()
    for name in ("requirements.lock", "setup.cfg", "pyproject.toml", "README.md"):
        _shutil.copy(ROOT / name, context / name)
    _shutil.copytree(ROOT / "webhook", context / "webhook", ignore=_shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    for run in find("RUN"):
        for command in run.split("&&"):
            words = shlex.split(command)
            if words[:3] == ["pip", "--python", VENV_PYTHON]:
                done = subprocess.run([python, "-m", "pip", *words[3:]], cwd=context, capture_output=True,
                                      text=True, timeout=900)
                assert done.returncode == 0, f"{command.strip()}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    freeze = subprocess.run([python, "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                            check=True, timeout=120).stdout.split()
    installed = {canonicalize_name(line.split("==")[0]): line.split("==")[1] for line in freeze if "==" in line}
    installed.pop(canonicalize_name("pip"))
    assert installed == {name: version for name, (version, _hashes) in _lock_entries().items()}
    version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('segment-webhook'))"],
                             capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert version == cfg["metadata"]["version"]
    assert subprocess.run([python, "-m", "pip", "check"], capture_output=True, timeout=120).returncode == 0
    helped = subprocess.run([str(venv / "bin" / "segment-webhook"), "--help"], capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and "serve" in helped.stdout


def test_the_runtime_install_has_what_the_gevent_worker_imports():
    """A trial found ``pip install . && segment-webhook serve`` failing on a fresh machine:
    gunicorn 27's gevent worker imports ``packaging``, which gunicorn declares only under its
    ``gevent`` extra (the test install had it through pytest). So setup.cfg asks for
    ``gunicorn[gevent]``, and every requirement of that extra of the installed gunicorn is in
    requirements.lock (the image)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    runtime = [Requirement(r) for r in cfg["options"]["install_requires"].splitlines()
               if r.strip() and not r.strip().startswith("#")]
    gunicorn = [r for r in runtime if canonicalize_name(r.name) == "gunicorn"]
    assert len(gunicorn) == 1 and gunicorn[0].extras == {"gevent"}
    extra = [Requirement(r) for r in metadata.requires("gunicorn") or []]
    needed = {canonicalize_name(r.name) for r in extra if r.marker is not None and r.marker.evaluate({"extra": "gevent"})}
    assert "gevent" in needed
    assert needed <= set(_lock_entries()), f"not in requirements.lock: {needed - set(_lock_entries())}"
