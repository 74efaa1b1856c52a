"""The container image, built and run on this machine (``hack/image.sh``, docs/image-and-helm.md).

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
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

from test_deploy_docker import _lock_entries

REPO = Path(__file__).resolve().parent.parent
IMAGE_SH = REPO / "hack" / "image.sh"
DEPLOYMENT = REPO / "deploy" / "base" / "deployment.yaml"
#: The pip bookworm's python3-pip-whl ships (23.0.1+dfsg-1), which the base installs under
#: /usr/local; the Dockerfile installs nothing else beyond the lock and the package.
BOOKWORM_PIP = "23.0.1"


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
    expected = {name: version for name, (version, _hashes) in _lock_entries().items()}
    expected |= {"pip": BOOKWORM_PIP, "segment-webhook": config["metadata"]["version"]}
    assert installed == expected


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
