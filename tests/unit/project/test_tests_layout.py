"""The tests' own layout (docs/tasks/development.md "Tests";
docs/decisions/tests-split-unit-process-cluster.md): every test module sits in
``tests/unit/<package>``, ``tests/process`` or ``tests/cluster``, every folder is a package, the
modules whose tests all need a control plane or a node are in ``tests/cluster``, and every import
of a test or helper module names it in full (a bare ``from conftest import ...`` found the module
only while tests/ itself was on ``sys.path``, before the split)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import paths

TESTS = paths.REPO / "tests"
#: ``tests/unit/<name>`` for what is no package of webhook/: deploy/, hack/, benchmarks/ and the
#: repository-wide checks.
OTHER_UNITS = {"deploy", "hack", "benchmarks", "project"}
#: Module-level markers that put a whole module in tests/cluster.
CLUSTER_MARKERS = {"cluster", "node"}


def webhook_packages() -> set[str]:
    """The packages of webhook/ (folders with an ``__init__.py``): admission, cli, cluster, ..."""
    return {p.parent.name for p in (paths.REPO / "webhook").glob("*/__init__.py")}


def misplaced(relative: str, units: set[str]) -> bool:
    """Whether a test module at ``relative`` (to tests/, e.g. ``unit/http/test_http_app.py``) is
    outside ``unit/<one of units>``, ``process`` and ``cluster``."""
    parts = Path(relative).parts
    if parts[:-1] in (("process",), ("cluster",)):
        return False
    return not (len(parts) == 3 and parts[0] == "unit" and parts[1] in units)


def module_markers(source: str) -> set[str]:
    """The marker names of a module's ``pytestmark = pytest.mark.X`` (or a list of them): the
    markers of every test of the module."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            for value in values:
                if isinstance(value, ast.Attribute):
                    names.add(value.attr)
    return names


def per_test_markers(source: str) -> set[str]:
    """The marker names of ``@pytest.mark.X`` on a module's top-level tests (one test each)."""
    return {decorator.attr for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)
            for decorator in node.decorator_list if isinstance(decorator, ast.Attribute)}


def bare_imports(source: str, local: set[str]) -> list[str]:
    """The imports of ``source`` that name one of the test suite's modules (``local``: conftest, the
    support modules, the test modules) by its bare name, as ``line: module``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in local:
            found.append(f"{node.lineno}: {node.module}")
        elif isinstance(node, ast.Import):
            found.extend(f"{node.lineno}: {alias.name}" for alias in node.names if alias.name in local)
    return found


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)


def _local_names() -> set[str]:
    return {p.stem for p in TESTS.rglob("*.py")
            if "data" not in p.relative_to(TESTS).parts and p.name != "__init__.py"} | {"support"}


def test_every_test_module_sits_in_unit_package_process_or_cluster():
    units = webhook_packages() | OTHER_UNITS
    assert {"admission", "topology", "gating", "placement", "planning", "kube", "http", "controller"} <= units
    wrong = [p.relative_to(TESTS).as_posix() for p in _test_modules() if misplaced(p.relative_to(TESTS).as_posix(), units)]
    assert wrong == []


@pytest.mark.parametrize("relative, expected", [
    ("unit/http/test_http_app.py", False),
    ("process/test_serve_cli.py", False),
    ("cluster/test_node.py", False),
    ("test_new.py", True),                       # the flat folder of before the split
    ("unit/test_new.py", True),                  # no package named
    ("unit/nowhere/test_new.py", True),          # no such package
    ("process/serving/test_new.py", True),
])
def test_a_planted_place_is_judged(relative, expected):
    assert misplaced(relative, {"http"} | OTHER_UNITS) is expected


def test_every_folder_of_tests_is_a_package():
    folders = [TESTS, *(p for p in TESTS.rglob("*") if p.is_dir())]
    missing = [p.relative_to(paths.REPO).as_posix() for p in folders
               if "data" not in p.relative_to(TESTS).parts and p.name != "__pycache__"
               and not (p / "__init__.py").is_file()]
    assert missing == []


def test_modules_that_need_a_control_plane_or_a_node_are_in_tests_cluster():
    # a module whose every test is marked cluster or node sits in tests/cluster; a module there has
    # at least one such test (tests/cluster/test_cluster_benchmark.py also checks its helper alone)
    sources = {p.relative_to(TESTS).as_posix(): p.read_text(encoding="utf-8") for p in _test_modules()}
    outside = sorted(name for name, source in sources.items()
                     if module_markers(source) & CLUSTER_MARKERS and not name.startswith("cluster/"))
    unmarked = sorted(name for name, source in sources.items() if name.startswith("cluster/")
                      and not (module_markers(source) | per_test_markers(source)) & CLUSTER_MARKERS)
    assert (outside, unmarked) == ([], [])


@pytest.mark.parametrize("source, expected", [
    ("import pytest\npytestmark = pytest.mark.cluster\n", {"cluster"}),
    ("import pytest\npytestmark = [pytest.mark.node, pytest.mark.slow]\n", {"node", "slow"}),
    ("import pytest\n@pytest.mark.cluster\ndef test_x():\n    pass\n", set()),   # one test, not the module
])
def test_module_markers_reads_pytestmark(source, expected):
    assert module_markers(source) == expected


def test_per_test_markers_reads_each_test():
    source = "import pytest\n@pytest.mark.cluster\ndef test_x():\n    pass\n\ndef test_y():\n    pass\n"
    assert (per_test_markers(source), module_markers(source)) == ({"cluster"}, set())


def test_every_test_import_names_the_module_in_full():
    local = _local_names()
    assert {"conftest", "serving", "cluster_support", "test_controller_decision"} <= local
    found = {p.relative_to(TESTS).as_posix(): bare_imports(p.read_text(encoding="utf-8"), local)
             for p in TESTS.rglob("*.py") if "data" not in p.relative_to(TESTS).parts}
    assert {name: lines for name, lines in found.items() if lines} == {}


@pytest.mark.parametrize("source, expected", [
    ("from conftest import make_request\n", ["1: conftest"]),
    ("import serving\n", ["1: serving"]),
    ("def f():\n    from test_kinds_ray import raycluster\n", ["2: test_kinds_ray"]),
    ("from tests.conftest import make_request\nfrom tests.support import serving\n", []),
    ("import local_cluster\nfrom webhook.cli import main\n", []),  # hack/'s script, the product
])
def test_a_planted_bare_import_is_found(source, expected):
    assert bare_imports(source, {"conftest", "serving", "test_kinds_ray"}) == expected
