"""Static checks of the Dockerfile and .dockerignore (Docker cannot run on the build machine, so
the image is never built here): the instructions are parsed and checked one by one, and the
dependency-extraction step is executed against the real setup.cfg.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEPLOYMENT = ROOT / "deploy" / "base" / "deployment.yaml"


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


def test_base_image_is_python_311_slim():
    assert find("FROM") == ["python:3.11-slim"]
    assert instructions()[0][0] == "FROM"


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
    meta_step = next(i for i, a in copies if "setup.cfg" in a.split() and "pyproject.toml" in a.split())
    src_step = next(i for i, a in copies if a.split()[0] == "webhook")
    deps_step = next(i for i, (kw, a) in enumerate(steps) if kw == "RUN" and "-r /tmp/requirements.txt" in a)
    pkg_step = next(i for i, (kw, a) in enumerate(steps) if kw == "RUN" and "--no-deps ." in a)
    assert meta_step < deps_step < src_step < pkg_step


def test_copy_sources_exist():
    for args in find("COPY"):
        *sources, _dest = args.split()
        for src in sources:
            if "*" in src:
                continue  # optional glob (README.md* while README.md is not yet written)
            assert (ROOT / src).exists(), f"COPY source {src} is missing"


def test_requirement_extraction_step_reads_setup_cfg(tmp_path):
    """Run the Dockerfile's own extraction command on the real setup.cfg."""
    (run,) = [a for a in find("RUN") if "configparser" in a]
    command = re.search(r'python -c "([^"]+)"', run).group(1)
    out_file = tmp_path / "requirements.txt"
    command = command.replace("/tmp/requirements.txt", str(out_file))
    (tmp_path / "setup.cfg").write_text((ROOT / "setup.cfg").read_text())
    subprocess.run([sys.executable, "-c", command], cwd=tmp_path, check=True, timeout=60)
    requirements = out_file.read_text().split()
    for expected in ("PyYAML>=6.0", "jsonpatch>=1.33", "Flask>=3.0", "gunicorn>=23.0,<28",
                     "cryptography>=42.0", "prometheus_client>=0.20", "kubernetes>=30.1"):
        assert expected in requirements
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert requirements == cfg["options"]["install_requires"].split()
    assert "pytest" not in " ".join(requirements)  # test extras stay out of the image


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
    ("setup.cfg", False),
    ("pyproject.toml", False),
    ("README.md", False),
    ("webhook/cli/__init__.py", False),
    ("webhook/data/topology.yaml", False),
    ("webhook/__pycache__/cli.cpython-311.pyc", True),
    ("tests/test_deploy.py", True),
    (".git/config", True),
    ("deploy/overlays/self-signed/certs/tls.key", True),
    ("certs/tls.key", True),
])
def test_dockerignore_keeps_only_the_build_inputs(path, ignored):
    patterns = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert _ignored(path, patterns) is ignored
