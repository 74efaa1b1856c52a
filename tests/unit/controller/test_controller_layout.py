"""The controller's shape (docs/concepts/controller.md): controller-runtime's three parts in modules of
their own, no class over 250 lines and no function over 80 (the house rules), and no import of the
command line (``cli/`` sits above ``controller/``: an arrow may not run up)."""

from __future__ import annotations

import ast

import pytest

from tests.support import paths

CONTROLLER = paths.REPO / "webhook" / "controller"
#: the controller's pure decision and reconcile (docs/decisions/package-layout-by-capability.md)
GATING = paths.REPO / "webhook" / "gating"
MODULES = sorted(CONTROLLER.glob("*.py")) + sorted(GATING.glob("*.py"))


def test_the_three_parts_have_their_modules():
    names = {p.stem for p in CONTROLLER.glob("*.py")}
    assert {"cache", "runner", "election", "events", "patches", "owners", "workqueue"} <= names
    assert {"decision", "reconcile", "release"} <= {p.stem for p in GATING.glob("*.py")}


def cli_imports(source: str) -> list[str]:
    """The ``webhook.cli`` modules ``source`` imports."""
    tree = ast.parse(source)
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    return [name for name in imported if name == "webhook.cli" or name.startswith("webhook.cli.")]


def oversized(source: str) -> list[str]:
    """Classes over 250 lines and functions over 80 in ``source``."""
    too_long = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            limit = 250
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            limit = 80
        else:
            continue
        assert node.end_lineno is not None  # ast.parse sets every statement's end
        if node.end_lineno - node.lineno + 1 > limit:
            too_long.append(f"{node.name}: {node.end_lineno - node.lineno + 1} lines (at most {limit})")
    return too_long


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_module_of_the_controller_imports_the_command_line(path):
    assert cli_imports(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_classes_and_functions_are_small(path):
    assert oversized(path.read_text(encoding="utf-8")) == []


def test_the_checks_catch_what_they_look_for():
    source = "import webhook.cli\nfrom webhook.cli.output import write_output\nimport webhook.client\n" \
             "def f():\n" + "    x = 1\n" * 80 + "class C:\n" + "    y = 1\n" * 250
    assert cli_imports(source) == ["webhook.cli", "webhook.cli.output"]
    assert oversized(source) == ["f: 81 lines (at most 80)", "C: 251 lines (at most 250)"]
