"""hack/image_prune.py, the builder stage's cut of the image's environment, on a made-up
site-packages (the real one is checked in the image by tests/process/test_image.py, marker ``image``)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import paths

REPO = paths.REPO
SPEC = importlib.util.spec_from_file_location("image_prune", REPO / "hack" / "image_prune.py")
assert SPEC and SPEC.loader
prune = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(prune)

#: What the image leaves out of requirements.lock (docs/decisions/image-size.md): the build
#: backend, and what only kubernetes' asyncio client imports.
LEFT_OUT = {"setuptools", "wheel", "aiohttp", "aiohttp-retry", "aiohappyeyeballs", "aiosignal", "attrs",
            "frozenlist", "multidict", "propcache", "yarl"}


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages with one of each kind of entry the cut treats differently."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    write(site / "purepkg" / "__init__.py", "from .inner import fail\n")
    write(site / "purepkg" / "inner.py", "def fail():\n    raise ValueError('from inside the zip')  # marker\n")
    write(site / "purepkg" / "data" / "table.txt", "a table\n")
    write(site / "purepkg" / "tests" / "test_inner.py", "")
    write(site / "purepkg" / "inner.pyi", "def fail() -> None: ...\n")
    write(site / "single.py", "VALUE = 7\n")
    write(site / "withext" / "__init__.py", "")
    write(site / "withext" / "_speed.cpython-311-x86_64-linux-gnu.so", "not really ELF")
    write(site / "withext" / "include" / "api.h", "")
    write(site / "certifi" / "__init__.py", "")
    write(site / "certifi" / "cacert.pem", "")
    write(site / "webhook" / "__init__.py", "")
    write(site / "nsonly" / "part" / "__init__.py", "")  # a namespace package: no nsonly/__init__.py
    write(site / "nssub" / "__init__.py", "")
    write(site / "nssub" / "sansio" / "app.py", "")  # a namespace subpackage (as flask.sansio)
    write(site / "kubernetes" / "__init__.py", "")
    write(site / "kubernetes" / "watch" / "watch_test.py", "")
    write(site / "kubernetes" / "aio" / "__init__.py", "")
    write(site / "numpy" / "__init__.py", "")
    write(site / "numpy" / "_core" / "_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "")
    write(site / "numpy" / "f2py" / "__init__.py", "")
    write(site / "numpy" / "_core" / "lib" / "libnpymath.a", "")
    write(site / "purepkg-1.0.dist-info" / "METADATA", "Name: purepkg\nVersion: 1.0\n")
    write(tmp_path / "bin" / "f2py", "")
    return site


def test_build_test_and_stub_files_go_and_runtime_files_stay(site: Path):
    prefix = site.parents[2]
    prune.delete_build_only(site, prefix)
    gone = ["purepkg/tests", "purepkg/inner.pyi", "withext/include/api.h", "kubernetes/aio",
            "kubernetes/watch/watch_test.py", "numpy/f2py", "numpy/_core/lib/libnpymath.a"]
    assert [path for path in gone if (site / path).exists()] == []
    assert not (prefix / "bin" / "f2py").exists()
    kept = ["purepkg/inner.py", "purepkg/data/table.txt", "withext/_speed.cpython-311-x86_64-linux-gnu.so",
            "numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "kubernetes/__init__.py"]
    assert [path for path in kept if not (site / path).exists()] == []


def test_pure_packages_and_modules_go_into_the_zip_the_rest_stays_on_disk(site: Path):
    prune.delete_build_only(site, site.parents[2])
    zipped = prune.write_zip(site)
    # withext and numpy hold extension modules, certifi and webhook are kept on disk by name,
    # nsonly is a namespace package and nssub has one inside (zipimport imports neither);
    # dist-info stays where importlib.metadata looks
    assert zipped == ["kubernetes", "purepkg", "single.py"]
    assert sorted(p.name for p in site.iterdir()) == [
        "certifi", "nsonly", "nssub", "numpy", "purepkg-1.0.dist-info", "segment-webhook-deps.pth",
        "segment-webhook-deps.zip", "webhook", "withext"]
    assert (site / "segment-webhook-deps.pth").read_text() == "segment-webhook-deps.zip\n"
    with zipfile.ZipFile(site / "segment-webhook-deps.zip") as bundle:
        names = bundle.namelist()
        infos = bundle.infolist()
    assert names == ["kubernetes/__init__.py", "kubernetes/__init__.pyc", "purepkg/__init__.py", "purepkg/__init__.pyc",
                     "purepkg/data/table.txt", "purepkg/inner.py", "purepkg/inner.pyc", "single.py", "single.pyc"]
    assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}


def test_the_zip_is_the_same_bytes_when_made_twice(tmp_path: Path):
    site = tmp_path / "site-packages"
    made = []
    for _ in range(2):
        write(site / "purepkg" / "__init__.py", "X = 1\n")
        prune.write_zip(site)
        made.append((site / "segment-webhook-deps.zip").read_bytes())
        (site / "segment-webhook-deps.zip").unlink()
    assert made[0] == made[1]


def test_modules_import_from_the_zip_with_bytecode_and_tracebacks_show_the_source(site: Path):
    prune.delete_build_only(site, site.parents[2])
    prune.write_zip(site)
    assert prune.compile_on_disk(site) == 0
    script = (
        "import site, sys, traceback\n"
        f"site.addsitedir({str(site)!r})\n"
        "import purepkg, purepkg.inner, single\n"
        "print(purepkg.inner.__spec__.loader.__class__.__name__, single.VALUE)\n"
        "print(purepkg.inner.__file__)\n"
        "try:\n    purepkg.fail()\nexcept ValueError:\n    traceback.print_exc(file=sys.stdout)\n")
    done = subprocess.run([sys.executable, "-B", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "zipimporter 7"
    # zipimport names a module loaded from bytecode by its .pyc
    assert lines[1] == f"{site}/segment-webhook-deps.zip/purepkg/inner.pyc"
    # the code object's file is the module's path in the zip, and the line's source is shown
    assert f'  File "{site}/segment-webhook-deps.zip/purepkg/inner.py", line 2, in fail' in lines
    assert "    raise ValueError('from inside the zip')  # marker" in lines


def test_bytecode_on_disk_is_checked_hash(site: Path):
    prune.delete_build_only(site, site.parents[2])
    prune.write_zip(site)
    prune.compile_on_disk(site)
    cached = site / "webhook" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    header = cached.read_bytes()[:16]
    source = (site / "webhook" / "__init__.py").read_bytes()
    # PEP 552: flags 0b11 = hash-based and checked against the source on import
    assert header == importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little") + importlib.util.source_hash(source)


def test_the_left_out_distributions_are_the_documented_ones():
    assert set(prune.OMIT) == LEFT_OUT


def test_no_module_of_the_package_imports_what_the_image_leaves_out():
    """The image has neither kubernetes.aio nor the packages only it imports; ``serve`` and
    ``controller`` (and every other module of webhook/) must not import them."""
    left_out_modules = {"kubernetes.aio", "aiohttp", "aiohttp_retry", "aiohappyeyeballs", "aiosignal", "attr", "attrs",
                        "frozenlist", "multidict", "propcache", "yarl", "setuptools", "wheel", "pip"}
    found = []
    for path in sorted((REPO / "webhook").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "kubernetes":
                names += [f"kubernetes.{alias.name}" for alias in node.names]
            found += [f"{path.relative_to(REPO)}: {name}" for name in names
                      if any(name == m or name.startswith(m + ".") for m in left_out_modules)]
    assert found == []
