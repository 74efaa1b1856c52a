"""House rule (docs/ARCHITECTURE.md): ``webhook/core``, ``webhook/placement`` and
``webhook/controller/decision.py`` are pure — no
module there imports flask, kubernetes or werkzeug (checked on the source with ``ast``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "webhook"
PURE_DIRS = ("core", "placement")
#: pure modules outside those packages (the controller's decision, DESIGN.md §9)
PURE_FILES = ("controller/decision.py",)
FORBIDDEN = {"flask", "kubernetes", "werkzeug"}


def forbidden_imports(source: str) -> list[str]:
    """Top-level package names in FORBIDDEN that ``source`` imports: ``import x``, ``from x
    import y`` (absolute), and ``importlib.import_module("x")`` / ``__import__("x")`` with a
    literal name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if fname in ("import_module", "__import__"):
                names = [node.args[0].value]
        found.extend(n for n in names if n.split(".")[0] in FORBIDDEN)
    return found


def pure_modules() -> list[Path]:
    found = [p for d in PURE_DIRS if (PACKAGE / d).is_dir() for p in (PACKAGE / d).rglob("*.py")]
    return sorted(found + [PACKAGE / f for f in PURE_FILES])


def test_pure_packages_exist():
    assert (PACKAGE / "core" / "review.py").is_file()
    assert all((PACKAGE / f).is_file() for f in PURE_FILES)
    assert len(pure_modules()) >= 8


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_module_imports_no_transport_or_cluster_client(path):
    assert forbidden_imports(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source, expected", [
    ("import flask", ["flask"]),
    ("from kubernetes import client", ["kubernetes"]),
    ("import werkzeug.exceptions as we", ["werkzeug.exceptions"]),
    ("def f():\n    from flask import Flask", ["flask"]),
    ("import importlib\nimportlib.import_module('kubernetes.client')", ["kubernetes.client"]),
    ("__import__('flask')", ["flask"]),
    ("import flasky\nfrom .kubernetes import x\nimport json", []),
])
def test_checker_detects_forbidden_imports(source, expected):
    assert forbidden_imports(source) == expected


#: The server's framework internals (gunicorn's worker classes, gevent) live in one module
#: (issue 9 item 7): nothing else in the package imports them.
SERVER_FRAMEWORKS = {"gunicorn", "gevent", "greenlet"}
SERVER_MODULE = PACKAGE / "http" / "server.py"


def imported_packages(source: str) -> set[str]:
    """Top-level package names ``source`` imports (absolute imports and literal import_module)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if fname in ("import_module", "__import__"):
                found.add(node.args[0].value.split(".")[0])
    return found


def test_server_framework_internals_are_confined_to_the_server_module():
    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if imported_packages(p.read_text(encoding="utf-8")) & SERVER_FRAMEWORKS)
    assert users == ["http/server.py"]
    assert {"gunicorn", "gevent"} <= imported_packages(SERVER_MODULE.read_text(encoding="utf-8"))
