"""The import-linter contracts of setup.cfg (docs/decisions/package-layout-by-capability.md) fail
on a planted violation: each case copies ``webhook/`` and the contracts into a temporary folder,
adds one import that breaks a rule, and runs ``lint-imports`` on the copy. The unchanged copy
passes, so each failure is the planted import's."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths

REPO = paths.REPO


def contracts_only(tmp: Path) -> Path:
    """A config holding only the ``importlinter`` sections of setup.cfg, written in ``tmp``."""
    source = configparser.ConfigParser(interpolation=None)
    source.read(REPO / "setup.cfg", encoding="utf-8")
    out = configparser.ConfigParser(interpolation=None)
    for section in source.sections():
        if section.startswith("importlinter"):
            out[section] = dict(source[section])
    path = tmp / "contracts.ini"
    with path.open("w", encoding="utf-8") as handle:
        out.write(handle)
    return path


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layout")
    shutil.copytree(REPO / "webhook", root / "webhook", ignore=shutil.ignore_patterns("__pycache__"))
    contracts_only(root)
    return root


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()", "--config", str(root / "contracts.ini"),
                           "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def planted(tree: Path, module: str, line: str) -> Path:
    """A copy of ``tree`` whose ``module`` (``kube/pods.py``) ends with ``line``."""
    copy = tree.parent / f"{tree.name}-{module.replace('/', '-')}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(tree, copy)
    path = copy / "webhook" / module
    path.write_text(path.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")
    return copy


def test_the_unchanged_copy_keeps_every_contract(tree):
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("module, line, broken", [
    # kube (the lowest capability) reaching up into admission: an upward import
    ("kube/pods.py", "from webhook.admission import review  # noqa", "Layers by capability"),
    # the engine knowing admission: siblings of one layer are independent
    ("placement/model.py", "from webhook.admission import verdict  # noqa", "Layers by capability"),
    # a capability package importing a web framework
    ("topology/infer.py", "import flask  # noqa", "import no web framework"),
    # the model of the engine importing its engine: a layer inside placement
    ("placement/model.py", "from webhook.placement import engine  # noqa", "placement: the engine above"),
    # gating and planning knowing each other
    ("gating/decision.py", "from webhook.planning import snapshot  # noqa", "Layers by capability"),
])
def test_a_planted_violation_breaks_its_contract(tree, module, line, broken):
    result = lint(planted(tree, module, line))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Broken contracts" in result.stdout, result.stdout
    assert broken in result.stdout.split("Broken contracts", 1)[1], result.stdout  # the section of the broken ones
    assert "0 broken" not in result.stdout
