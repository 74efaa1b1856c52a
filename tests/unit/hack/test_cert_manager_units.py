"""``up --with cert-manager`` without a cluster (hack/cert_manager.py, hack/go/cert-manager;
docs/decisions/cert-manager-from-its-packages.md)."""

from __future__ import annotations

import shutil
import sys

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import cert_manager  # noqa: E402
import local_cluster  # noqa: E402


def test_cert_manager_is_pinned_to_v1_21_2_and_built_from_our_main():
    # `go list -m -versions github.com/cert-manager/cert-manager` of 2026-12-07: v1.21.0 v1.21.1 v1.21.2
    program = local_cluster.UPSTREAM["cert-manager"]
    assert local_cluster.module_version(program.module_dir, program.module) == "v1.21.2"
    module_line = (local_cluster.GO_MODULES / "cert-manager" / "go.mod").read_text().splitlines()[0]
    assert module_line == f"module {program.package}"
    assert (local_cluster.GO_MODULES / "cert-manager" / "main.go").is_file()


def test_the_cache_key_follows_main_go_and_leaves_go_mod_only_modules_alone(tmp_path, monkeypatch):
    for name in ("cert-manager", "lws"):
        shutil.copytree(local_cluster.GO_MODULES / name, tmp_path / name)
    monkeypatch.setattr(local_cluster, "GO_MODULES", tmp_path)
    before = {name: local_cluster.pins_digest((name,)) for name in ("cert-manager", "lws")}
    main = tmp_path / "cert-manager" / "main.go"
    main.write_text(main.read_text() + "\n// changed\n")
    (tmp_path / "lws" / "notes.txt").write_text("not a Go file\n")
    after = {name: local_cluster.pins_digest((name,)) for name in ("cert-manager", "lws")}
    assert after["cert-manager"] != before["cert-manager"]
    assert after["lws"] == before["lws"]


def test_the_probe_is_a_self_signed_certificate_in_cert_managers_namespace():
    issuer, certificate = cert_manager.probe_objects()
    assert issuer == {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                      "metadata": {"name": "local-cluster-probe", "namespace": "cert-manager"},
                      "spec": {"selfSigned": {}}}
    assert certificate["spec"] == {"secretName": "local-cluster-probe", "commonName": "local-cluster-probe",
                                   "issuerRef": {"name": "local-cluster-probe", "kind": "Issuer"}}
