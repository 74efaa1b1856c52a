"""House rules (docs/concepts/ARCHITECTURE.md) that the standard checkers do not state (docs/tasks/checks.md).

The layers by capability (kube/text, topology, admission, placement, gating, planning, the
adapters), the pure capability packages and the confinement of gunicorn and gevent to ``webhook/http/server.py`` and ``webhook/http/worker.py`` are import-linter
contracts (setup.cfg, ``lint-imports``); what stays here: the controller's pure modules (checked
on the source with ``ast``), the server's environ keys, one description per kind, typed seams,
one home per warning, one exception base, no import circle, one module per file name outside
``cli/``, and the size limits of functions (80 lines) and classes (250)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import paths

PACKAGE = paths.REPO / "webhook"
#: pure modules checked here too (the packages are import-linter's): the controller's decision and reconcile (webhook/gating/), its work queue and settings (DESIGN.md §9)
PURE_FILES = ("gating/decision.py", "gating/reconcile.py", "controller/workqueue.py", "controller/settings.py")
FORBIDDEN = {"flask", "kubernetes", "werkzeug"}


def forbidden_imports(source: str) -> list[str]:
    """Top-level package names in FORBIDDEN that ``source`` imports: ``import x``, ``from x
    import y`` (absolute), and ``importlib.import_module("x")`` / ``__import__("x")`` with a
    literal name."""
    found: list[str] = []
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
    return sorted(PACKAGE / f for f in PURE_FILES)


def test_pure_packages_exist():
    assert (PACKAGE / "admission" / "review.py").is_file()
    assert all((PACKAGE / f).is_file() for f in PURE_FILES)


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_module_imports_no_transport_or_cluster_client(path):
    assert forbidden_imports(path.read_text(encoding="utf-8")) == []


def test_only_the_controllers_adapter_module_touches_the_cluster_client():
    """The controller's shape (controller-runtime's three parts): the cache (informers), the
    runner and the Lease's and the patches' adapters (the library's election, a delete's options)
    touch the client; the Events, owners and Workload API objects send through the one client
    module (webhook/cluster/api_server.py, ``JsonClient``; issue 38 item 3); the per-gang decision
    and reconcile, the queue and the settings are pure; main.py reaches the client through them."""
    touching = sorted(p.name for p in (PACKAGE / "controller").glob("*.py")
                      if forbidden_imports(p.read_text(encoding="utf-8")))
    assert touching == ["cache.py", "election.py", "patches.py", "runner.py"]
    # the library's leader election with its own LeaseLock, not a subclass of it (issue 17 item 2)
    runner = ast.parse((PACKAGE / "controller" / "election.py").read_text(encoding="utf-8"))
    bases = {getattr(b, "id", getattr(b, "attr", "")) for node in ast.walk(runner)
             if isinstance(node, ast.ClassDef) for b in node.bases}
    assert "LeaseLock" not in bases


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


#: A server's own WSGI environ keys (``gunicorn.socket``, ...): read by the server modules only;
#: the app gets what it needs from the server as callables (webhook/http/wsgi_extensions.py).
SERVER_ENVIRON_PREFIXES = ("gunicorn.", "gevent.", "werkzeug.server.")


def server_environ_keys(source: str) -> list[str]:
    """The code strings of ``source`` (docstrings skipped) that name a server's environ key."""
    return [s for s in code_strings(source) if s.startswith(SERVER_ENVIRON_PREFIXES)]


def test_server_environ_keys_are_read_only_in_the_server_modules():
    readers = {str(p.relative_to(PACKAGE)): server_environ_keys(p.read_text(encoding="utf-8"))
               for p in PACKAGE.rglob("*.py")}
    assert sorted(m for m, keys in readers.items() if keys) == ["http/worker.py"]
    assert readers["http/worker.py"] == ["gunicorn.socket"]


@pytest.mark.parametrize("source, expected", [
    ('sock = environ.get("gunicorn.socket")', ["gunicorn.socket"]),
    ('def f(environ):\n    """reads environ["gunicorn.socket"]"""\n    return 1', []),
    ('key = "segment_webhook.drain"', []),
])
def test_environ_key_checker(source, expected):
    assert server_environ_keys(source) == expected


# ----------------------------------------------------------------------------- one description per kind
#: The spec fields that hold a kind's pod templates and replica counts (issue 18 item 2): only the
#: kind descriptions (webhook/admission/kinds/<kind>.py) may read them; everything else asks the
#: description (webhook/admission/kinds/registry.py).
KIND_SHAPE = ("pytorchReplicaSpecs", "leaderWorkerTemplate", "replicatedJobs", "workerGroupSpecs", "mpiReplicaSpecs")
KIND_MODULES = {"admission/kinds/pytorchjob.py", "admission/kinds/leaderworkerset.py", "admission/kinds/distributedworkload.py",
                "admission/kinds/mpijob.py", "admission/kinds/jobset.py", "admission/kinds/ray.py", "admission/kinds/trainjob.py",
                "admission/kinds/trainingruntime.py"}  # the JobSet the Trainer builds for a TrainJob (place)


def code_strings(source: str) -> list[str]:
    """Every string constant of ``source`` that is not a docstring (f-string parts included)."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def shape_readers() -> dict[str, list[str]]:
    """Module (relative to webhook/) → the kind-shape field names its code strings mention."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        names = sorted({k for s in code_strings(path.read_text(encoding="utf-8")) for k in KIND_SHAPE if k in s})
        if names:
            found[str(path.relative_to(PACKAGE))] = names
    return found


def test_a_kinds_shape_is_read_only_in_its_description():
    readers = shape_readers()
    assert set(readers) <= KIND_MODULES, {m: n for m, n in readers.items() if m not in KIND_MODULES}
    assert readers["admission/kinds/pytorchjob.py"] == ["pytorchReplicaSpecs"]
    assert readers["admission/kinds/leaderworkerset.py"] == ["leaderWorkerTemplate"]


@pytest.mark.parametrize("source, expected", [
    ('"""spec.pytorchReplicaSpecs in a docstring"""\nx = 1', []),
    ('x = spec.get("pytorchReplicaSpecs")', ["pytorchReplicaSpecs"]),
    ('x = f"spec.leaderWorkerTemplate.{k}"', ["spec.leaderWorkerTemplate."]),
    ('def f():\n    "doc replicatedJobs"\n    return "workerGroupSpecs"', ["workerGroupSpecs"]),
])
def test_code_strings_skip_docstrings_only(source, expected):
    assert [s for s in code_strings(source) if any(k in s for k in KIND_SHAPE)] == expected


def test_every_kind_is_described_once():
    from webhook.admission.kinds import HANDLERS
    from webhook.admission.kinds.registry import DESCRIPTIONS
    from webhook.planning.expand import SUPPORTED

    kinds = [d.kind for d in DESCRIPTIONS]
    assert len(set(kinds)) == len(kinds)
    assert set(HANDLERS) == {(d.group, d.kind) for d in DESCRIPTIONS} | {("", "Pod")}
    assert SUPPORTED == {d.kind: (d.group, d.version) for d in DESCRIPTIONS}


# ---------------------------------------------------------------- typed seams, one home per warning
#: Untyped seams (issue 20 item 3): a handler typed as any callable, a catalog or settings typed
#: ``Any``, an optional catalog member read with getattr. Each seam has a Protocol instead
#: (webhook.admission.types.AdmissionHandler, webhook.admission.kinds._workload.Analyse,
#: webhook.topology.objects.TopologyCatalog).
UNTYPED_SEAMS = re.compile(r"Callable\[\.\.\., *(Any|Decision|\"?Plan)\]|\b(catalog|settings): Any\b")
#: In the core, a catalog member read with getattr (the TopologyCatalog Protocol names every member).
CORE_ONLY = re.compile(r"getattr\(catalog")


def untyped_seams(source: str, core: bool = True) -> list[str]:
    """The lines of ``source`` that type a seam loosely (:data:`UNTYPED_SEAMS`; in the ``core``,
    :data:`CORE_ONLY` too)."""
    return [line.strip() for line in source.splitlines()
            if UNTYPED_SEAMS.search(line) or (core and CORE_ONLY.search(line))]


@pytest.mark.parametrize("source, expected", [
    ("Handler = Callable[..., Decision]\n", ["Handler = Callable[..., Decision]"]),
    ("def handle(raw, catalog: Any, settings: Any):\n", ["def handle(raw, catalog: Any, settings: Any):"]),
    ("x = getattr(catalog, 'crd_missing', False)\n", ["x = getattr(catalog, 'crd_missing', False)"]),
    ("def handle(raw, catalog: TopologyCatalog):\n", []),
])
def test_seam_checker_finds_loose_types(source, expected):
    assert untyped_seams(source) == expected


@pytest.mark.parametrize("relative", ["admission", "topology", "http/envelope.py", "http/app.py", "http/bounds.py"])
def test_the_admission_seams_are_typed(relative):
    target = PACKAGE / relative
    paths = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    loose = {str(p.relative_to(PACKAGE)): untyped_seams(p.read_text(encoding="utf-8"), core=relative in ("admission", "topology"))
             for p in paths}
    assert {path: lines for path, lines in loose.items() if lines} == {}


def test_warnings_are_given_only_through_the_registry():
    # every warning text of the core comes from webhook/admission/warning_rules.py (issue 20 item 2):
    # no Decision.warn of a literal text and no hand-written "no segment label" / "not gated" text
    # elsewhere (docstrings may name them)
    offenders = []
    for path in sorted((PACKAGE / "admission").rglob("*.py")):
        if path.name in ("warning_rules.py", "verdict.py"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\.warn\(f?[\"']", code) or re.search(r"f?\"[^\"]*(; no segment label\"|\"not gated: )", code):
                offenders.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_old_home_of_decision_is_gone():
    # core/decision.py was split into core/admission_decision.py (Decision, Violation) and
    # core/admission_settings.py (AdmissionSettings): the old name must not come back, nor be imported
    assert not (PACKAGE / "core" / "decision.py").exists()
    users = [str(p.relative_to(PACKAGE.parent)) for p in sorted(PACKAGE.parent.rglob("*.py"))
             if ".git" not in p.parts and re.search(r"webhook\.core\.decision\b|from webhook\.core import decision",
                                                     p.read_text(encoding="utf-8", errors="replace"))]
    assert users == []


# ---------------------------------------------------------------- one exception base
#: Builtin (or library) exception classes a project exception may also derive from.
EXCEPTION_BASES = {"BaseException", "Exception", "ValueError", "RuntimeError", "TypeError", "KeyError", "OSError",
                   "StopIteration", "YAMLError"}
#: Control-flow signals, not errors: they never leave their module (a connection closed, the
#: controller's work queue shut down, leadership given up on stop), so no exit code applies.
NOT_ERRORS = {"_CloseConnection", "ShutDown", "_Stopping"}


def exception_classes() -> dict[str, list[str]]:
    """``module:Class`` → its base names, for every class of the package that is an exception
    (derives, through classes of the package, from a name in :data:`EXCEPTION_BASES`)."""
    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                bases[node.name] = names
                where[node.name] = str(path.relative_to(PACKAGE))

    def is_exception(name: str, seen: frozenset = frozenset()) -> bool:
        if name in EXCEPTION_BASES:
            return True
        return name in bases and name not in seen and any(is_exception(b, seen | {name}) for b in bases[name])

    return {f"{where[n]}:{n}": b for n, b in bases.items() if n != "SegmentWebhookError" and is_exception(n)}


def test_every_exception_derives_from_the_one_base():
    classes = exception_classes()
    assert len(classes) >= 19  # issue 20: 19 classes in 16 modules had no common base
    loose = [name for name, base_names in classes.items()
             if name.rsplit(":", 1)[1] not in NOT_ERRORS and not _derives_from_base(base_names, classes)]
    assert loose == []


def _derives_from_base(base_names: list[str], classes: dict[str, list[str]]) -> bool:
    by_name = {key.rsplit(":", 1)[1]: value for key, value in classes.items()}
    return any(b == "SegmentWebhookError" or (b in by_name and _derives_from_base(by_name[b], classes))
               for b in base_names)


# ---------------------------------------------------------------- import circles (issue 30 item 3)
def module_name(path: Path) -> str:
    """``webhook/admission/kinds/ray.py`` -> ``webhook.admission.kinds.ray``; a package's ``__init__.py`` is
    the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (the module ``module``) imports: every ``import``
    statement, at the top or inside a function (a lazy import is an arrow too). ``from webhook.x
    import y`` names ``webhook.x.y`` when that is a module, else ``webhook.x``; relative imports
    are resolved against ``module`` (``is_package``: it is a package's ``__init__``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")
                elif base in known:
                    found.add(base)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``webhook`` modules it imports, for every module of the package."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", set(paths))
            for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as its path (``[a, b, a]``), the first a depth-first walk
    in name order meets; ``None`` when there is none."""
    state: dict[str, str] = {}  # "open" on the walk's path, "done" when every arrow from it was followed
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
    ({"x": {"y"}, "y": {"z"}, "z": {"y"}}, ["y", "z", "y"]),
])
def test_cycle_finder_reports_the_path(graph, expected):
    assert find_cycle(graph) == expected


def test_import_reader_resolves_names_to_modules():
    known = {"webhook.kube", "webhook.kube.core", "webhook.admission.kinds", "webhook.admission.kinds.ray",
             "webhook.admission.kinds.pod", "webhook.errors"}
    source = ("from webhook.kube import core\n"              # a module: webhook.kube.core
              "from webhook.admission.kinds.ray import DESCRIPTION\n"
              "import webhook.errors\n"
              "from . import pod\n"                          # relative, resolved to the sibling module
              "def later():\n    from webhook.kube import GATE\n")  # a name of webhook.kube: the package
    assert imported_modules(source, "webhook.admission.kinds.jobset", False, known) == {
        "webhook.kube.core", "webhook.admission.kinds.ray", "webhook.errors", "webhook.admission.kinds.pod", "webhook.kube"}


def test_no_import_circle_in_webhook():
    graph = import_graph()
    assert len(graph) >= 100  # every module of the package was read
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


# ---------------------------------------------------------------- module names (issue 30 item 3)
def test_no_two_modules_share_a_file_name_outside_cli():
    """A module's name says what it holds, once: two modules of one name are allowed only when
    one is a ``cli/`` sub-command in front of the domain module it runs (``cli/review.py`` and
    ``admission/review.py``), so ``cli/`` is left out of the count."""
    by_name: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if path.name != "__init__.py" and relative.parts[0] != "cli":
            by_name.setdefault(path.name, []).append(str(relative))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


# ---------------------------------------------------------------- sizes (issue 30 items 2 and 4)
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 250


def definitions(source: str, module: str) -> list[tuple[str, str, int]]:
    """``(qualified name, "def" or "class", lines)`` of every function, method and class of
    ``source``, nested ones included; lines from the ``def``/``class`` line to the body's last
    (docstring and comments counted, decorators not)."""
    found: list[tuple[str, str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                kind = "class" if isinstance(child, ast.ClassDef) else "def"
                found.append((name, kind, (child.end_lineno or child.lineno) - child.lineno + 1))
                walk(child, name)
            else:
                walk(child, prefix)

    walk(ast.parse(source), module)
    return found


def test_definitions_are_measured_from_their_first_line_to_their_last():
    source = ("@decorated\n"
              "def f(x):\n"
              "    '''doc'''\n"
              "    # comment\n"
              "    return x\n"
              "class C:\n"
              "    def m(self):\n"
              "        def inner():\n"
              "            pass\n"
              "        return inner\n")
    assert definitions(source, "m") == [("m.f", "def", 4), ("m.C", "class", 5), ("m.C.m", "def", 4),
                                        ("m.C.m.inner", "def", 2)]


def all_definitions() -> list[tuple[str, str, int]]:
    return [d for path in sorted(PACKAGE.rglob("*.py"))
            for d in definitions(path.read_text(encoding="utf-8"), module_name(path))]


def test_no_function_over_80_lines():
    long = {name: lines for name, kind, lines in all_definitions() if kind == "def" and lines > MAX_FUNCTION_LINES}
    assert long == {}


def test_no_class_over_250_lines():
    long = {name: lines for name, kind, lines in all_definitions() if kind == "class" and lines > MAX_CLASS_LINES}
    assert long == {}
