"""The container image, built and run on this machine (``hack/image.sh``, docs/tasks/image-and-helm.md).

Marker ``image`` (``.ci/run`` runs ``-m image`` once): ``hack/image.sh build`` makes a base from
Debian's packages with mmdebstrap and builds the Dockerfile on it with podman; the tests read the
image's config and installed packages from podman's storage, then ``hack/image.sh smoke`` runs it
as deploy/base runs its pod. In CI (``CI=true``) missing tools fail the tests; elsewhere they are
skipped with one line.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from packaging.utils import canonicalize_name

from tests.support import paths
from tests.unit.deploy.test_deploy_docker import _lock_entries

REPO = paths.REPO
IMAGE_SH = REPO / "hack" / "image.sh"
DEPLOYMENT = REPO / "deploy" / "base" / "deployment.yaml"
#: What the image leaves out of requirements.lock (docs/decisions/image-size.md): the build
#: backend, and what only kubernetes' asyncio client (not in the image) imports.
LEFT_OUT = {"setuptools", "wheel", "aiohttp", "aiohttp-retry", "aiohappyeyeballs", "aiosignal", "attrs",
            "frozenlist", "multidict", "propcache", "yarl"}
#: Issue 35: what every node pulls after a restart, at most 200 MB (as podman counts it, 10^6 bytes).
MAX_BYTES = 200_000_000


def run_image_sh(*args: str, timeout: float = 1800) -> dict:
    """Run ``hack/image.sh ARGS``; return the JSON object of its last stdout line (fail with its
    stderr when it exits non-zero)."""
    done = subprocess.run([str(IMAGE_SH), *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, f"hack/image.sh {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built() -> dict:
    """``hack/image.sh build`` once for the module (the base is reused from the cache)."""
    missing = [tool for tool in ("mmdebstrap", "podman") if shutil.which(tool) is None]
    if missing:
        message = f"image: {', '.join(missing)} not installed (apt-get install -y mmdebstrap podman runc)"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return run_image_sh("build")


def test_build_without_the_tools_exits_2_naming_the_package(tmp_path):
    # runs in the default suite: no tool is needed to see the refusal
    done = subprocess.run([sys.executable, str(REPO / "hack" / "image.py"), "build"], capture_output=True,
                          text=True, timeout=120, env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.strip() == ("image: no `mmdebstrap` on PATH: apt-get install -y mmdebstrap "
                                   "(Debian package of the same name)")


@pytest.mark.image
def test_the_image_config_is_the_dockerfile_s(built, capsys):
    contents = run_image_sh("contents")
    config = contents["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["segment-webhook", "serve"]
    assert config["Cmd"] == ["--bind", "0.0.0.0:8443", "--cert-dir", "/etc/segment-webhook/certs"]
    assert config["ExposedPorts"] == {"8443/tcp": {}}
    assert config["WorkingDir"] == "/"
    assert "PROMETHEUS_MULTIPROC_DIR=/var/run/segment-webhook/metrics" in config["Env"]
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    # the virtual environment's console scripts first (segment-webhook)
    assert "PATH=/opt/segment-webhook/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in config["Env"]
    # the Dockerfile's useradd: no home, no login shell
    assert contents["passwd"] == "webhook:x:65532:65532::/nonexistent:/usr/sbin/nologin"
    with capsys.disabled():
        base = "reused from the cache" if built["base_seconds"] is None else f"made in {built['base_seconds']} s"
        print(f"\nimage: {built['image']} {built['id']} {built['size_bytes'] / 1e6:.0f} MB on {built['base']}; "
              f"base {base}, Dockerfile built in "
              f"{built['dockerfile_seconds']} s; podman flags {' '.join(built['podman_flags'])}")
        for attempt, refusal in built["refused"].items():
            print(f"image: refused ({attempt}): {refusal}")


@pytest.mark.image
def test_the_installed_python_packages_are_the_lock(built):
    installed = {canonicalize_name(name): version for name, version in run_image_sh("contents")["packages"].items()}
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    expected = {name: version for name, (version, _hashes) in _lock_entries().items() if name not in LEFT_OUT}
    expected |= {"segment-webhook": config["metadata"]["version"]}
    assert installed == expected
    assert LEFT_OUT <= set(_lock_entries())  # each left-out name is a real entry of the lock


@pytest.mark.image
def test_the_image_is_at_most_200_mb(built, capsys):
    with capsys.disabled():
        print(f"\nimage: {built['size_bytes'] / 1e6:.1f} MB; layers (oldest first):")
        for layer in built["layers"]:
            print(f"  {layer['bytes'] / 1e6:7.1f} MB  {layer['created_by'][:110]}")
    assert built["size_bytes"] <= MAX_BYTES


@pytest.mark.image
def test_no_pip_compiler_or_package_manager_and_the_commands_the_pod_runs(built):
    commands = run_image_sh("contents")["commands"]
    assert commands == {
        "segment-webhook": "/opt/segment-webhook/bin/segment-webhook",
        "python3": "/opt/segment-webhook/bin/python3",
        "sleep": "/bin/sleep",  # the Deployment's preStop pause
        "sh": "/bin/sh",
        "pip": None, "pip3": None, "apt-get": None, "gcc": None, "cc": None, "perl": None,
    }


@pytest.mark.image
def test_every_module_has_bytecode_the_read_only_root_needs_none_written(built):
    contents = run_image_sh("contents")
    bytecode = contents["bytecode"]
    assert bytecode["python"] == "cpython-311"
    assert bytecode["stale"] == []
    assert bytecode["checked"] > 1000  # kubernetes' generated client alone has more than 900 modules
    # the pure-Python dependencies are in the zip; ours, certifi, the extension packages and flask
    # (flask.sansio is a namespace package, which zipimport cannot import) on disk
    assert {"kubernetes", "gunicorn", "urllib3", "pydantic", "werkzeug"} <= set(contents["zipped"])
    assert not {"webhook", "certifi", "numpy", "gevent", "cryptography", "flask"} & set(contents["zipped"])


@pytest.mark.image
def test_controller_once_runs_the_placement_engine_in_the_image(built, tmp_path):
    """`segment-webhook controller --once` in the image as the pod runs (read-only root, no
    network): the placement engine (numpy) releases every pod of a complete 17-pod gang."""
    from tests.unit.controller.test_controller_cli import TOPOLOGY_OBJECT, dump
    from tests.unit.gating.test_controller_decision import cluster, gang_pods, pytorchjob

    pods = gang_pods(pytorchjob("job-a"))
    path = dump(tmp_path, cluster() + pods + [TOPOLOGY_OBJECT])
    tmp_path.chmod(0o755)
    ran = run_image_sh("controller-once", path, timeout=600)
    assert ran["exit_code"] == 0, ran["stderr"]
    docs = list(yaml.safe_load_all(ran["stdout"]))
    assert sorted(d["name"] for d in docs) == sorted(p["metadata"]["name"] for p in pods)
    assert len(docs) == 17


@pytest.mark.image
def test_smoke_ready_review_read_only_non_root_and_sigterm(built, capsys):
    figures = run_image_sh("smoke", timeout=600)
    # DESIGN.md §2/§7: Worker replica 5 of segment size 4 is in segment 1, subgroup worker-1
    assert figures["review"] == {
        "status": 200, "uid": "b6c1f7a2-0d51-4c7e-9f1b-5f0e6d7c8a90", "allowed": True, "patchType": "JSONPatch",
        "patch": [{"op": "add", "path": "/metadata/labels/kai.scheduler~1segment-index", "value": "1"},
                  {"op": "add", "path": "/metadata/labels/kai.scheduler~1subgroup-name", "value": "worker-1"}],
    }
    assert figures["reviews_total"] == [
        'segment_webhook_reviews_total{decision="allowed",kind="Pod",operation="CREATE"} 1.0']
    pod = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    assert (figures["uid"], figures["gid"]) == (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])
    assert figures["root_write_refused"] is True
    assert figures["root_write_error"] == "touch: cannot touch '/probe': Read-only file system"
    assert figures["sigterm"]["exit_code"] == 0
    assert figures["sigterm"]["traceback"] is False
    assert figures["sigterm"]["log_tail"][-1].endswith("[INFO] Shutting down: Master")
    with capsys.disabled():
        print(f"\nimage smoke: {figures['network']} network, /readyz after {figures['ready_seconds']} s, "
              f"SIGTERM -> exit {figures['sigterm']['exit_code']} in {figures['sigterm']['seconds']} s")
