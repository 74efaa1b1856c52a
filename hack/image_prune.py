"""Cut the image's virtual environment to what ``serve`` and ``controller`` run (the Dockerfile's
builder stage; docs/tasks/image-and-helm.md, docs/decisions/image-size.md).

Usage (run by the environment's own interpreter, with ``pip`` of the builder on PATH)::

    /opt/segment-webhook/bin/python image_prune.py

Steps, each on ``sys.prefix`` (the virtual environment):

1. ``pip uninstall`` of :data:`OMIT`: the build backend (setuptools, wheel: the package is built by
   then) and the packages only ``kubernetes.aio`` imports (the client's asyncio copy, never used
   here; the synchronous client does not import them);
2. delete what only builds, tests or type-checks: :data:`DELETE_PATHS` (``kubernetes/aio``,
   numpy's f2py and distutils), directories named ``tests``, kubernetes' ``*_test.py`` modules and
   files with a suffix in :data:`BUILD_ONLY_SUFFIXES` (C sources and headers, Cython
   declarations, static libraries, type stubs);
3. put every pure-Python top-level package or module (no extension module inside, a regular
   package, not in :data:`KEEP_ON_DISK`) into one deflated zip, ``ZIP_NAME``, each ``.py`` with
   its bytecode beside it (``x.pyc``, where zipimport looks; ``unchecked-hash``: the zip never
   changes), and a ``.pth`` file that puts the zip on ``sys.path``; sources stay, so tracebacks
   still show the line;
4. compile what stays on disk (``checked-hash`` bytecode in ``__pycache__``: valid whatever the
   copied files' timestamps; the root filesystem is read-only at run time, so nothing compiled
   then could be kept).

Prints one JSON line: bytes of the environment before and after, what was zipped, and the
number of files compileall could not compile (0 expected). Exit status 1 when pip fails.
"""

from __future__ import annotations

import json
import py_compile
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

#: Distributions of requirements.lock the image does not hold: the build backend, and what only
#: ``kubernetes.aio`` (kubernetes' asyncio client, removed in step 2) imports.
OMIT = ("setuptools", "wheel", "aiohttp", "aiohttp-retry", "aiohappyeyeballs", "aiosignal", "attrs",
        "frozenlist", "multidict", "propcache", "yarl")
#: Paths under site-packages deleted whole: the asyncio client, numpy's Fortran wrapper generator
#: and its build system (build tools, never imported by ``import numpy``).
DELETE_PATHS = ("kubernetes/aio", "numpy/f2py", "numpy/distutils")
#: Console scripts of what step 2 deletes.
DELETE_SCRIPTS = ("f2py",)
#: File suffixes used only to build extensions or check types.
BUILD_ONLY_SUFFIXES = (".c", ".cpp", ".h", ".hpp", ".pxd", ".pyx", ".pyi", ".a")
#: Top-level packages kept as files on disk although pure Python: ours (its source readable in
#: place), and certifi (``certifi.where()`` returns a file path; from a zip it would extract one).
KEEP_ON_DISK = ("webhook", "certifi")
ZIP_NAME = "segment-webhook-deps.zip"
#: A fixed timestamp for every zip entry (the zip's bytes depend only on the files).
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def site_packages() -> Path:
    """The running environment's ``site-packages`` (sysconfig's ``purelib``)."""
    return Path(sysconfig.get_paths()["purelib"])


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (symlinks not followed)."""
    return sum(entry.stat().st_size for entry in root.rglob("*") if entry.is_file() and not entry.is_symlink())


def delete_build_only(site: Path, prefix: Path) -> None:
    """Step 2 (see the module docstring)."""
    for relative in DELETE_PATHS:
        shutil.rmtree(site / relative, ignore_errors=True)
    for script in DELETE_SCRIPTS:
        (prefix / "bin" / script).unlink(missing_ok=True)
    for directory in sorted(site.rglob("tests"), reverse=True):
        if directory.is_dir():
            shutil.rmtree(directory)
    for path in list(site.rglob("*")):
        if path.is_file() and (path.suffix in BUILD_ONLY_SUFFIXES
                               or (path.name.endswith("_test.py") and path.relative_to(site).parts[0] == "kubernetes")):
            path.unlink()


def zippable(entry: Path) -> bool:
    """True for a pure-Python top-level module or regular package not in :data:`KEEP_ON_DISK`:
    extension modules load only from files; zipimport does not import namespace packages, so a
    package with a directory of modules but no ``__init__.py`` (flask.sansio) stays on disk, as
    do top-level namespace packages (zope); dist-info, .pth and data directories stay where tools
    look."""
    if entry.name in KEEP_ON_DISK or entry.name == "__pycache__":
        return False
    if entry.is_file():
        return entry.suffix == ".py"
    if not (entry / "__init__.py").is_file():
        return False
    paths = list(entry.rglob("*"))
    if any(".so" in path.suffixes for path in paths):
        return False
    return all((path.parent / "__init__.py").is_file() for path in paths
               if path.suffix == ".py" and "__pycache__" not in path.parts)


def write_zip(site: Path) -> list[str]:
    """Step 3: move the zippable entries of ``site`` into ``site/ZIP_NAME``; return their names."""
    archive = site / ZIP_NAME
    chosen = sorted(entry for entry in site.iterdir() if zippable(entry))
    files: list[Path] = []
    for entry in chosen:
        files += [entry] if entry.is_file() else sorted(
            path for path in entry.rglob("*") if path.is_file() and "__pycache__" not in path.parts
            and path.suffix != ".pyc")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bundle:
        for path in files:
            name = path.relative_to(site).as_posix()
            data = path.read_bytes()
            add(bundle, name, data)
            if path.suffix == ".py":
                add(bundle, name + "c", bytecode(path, f"{archive}/{name}"))
    for entry in chosen:
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (site / ZIP_NAME.replace(".zip", ".pth")).write_text(ZIP_NAME + "\n")
    return [entry.name for entry in chosen]


def add(bundle: zipfile.ZipFile, name: str, data: bytes) -> None:
    """One deflated entry with :data:`ZIP_TIME` and mode 0644."""
    info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    bundle.writestr(info, data)


def bytecode(source: Path, shown_as: str) -> bytes:
    """The ``unchecked-hash`` .pyc bytes of ``source``, its code's file name ``shown_as`` (the path
    zipimport gives the module, so tracebacks find the source in the zip)."""
    target = source.with_name(source.name + ".tmp-pyc")
    try:
        py_compile.compile(str(source), cfile=str(target), dfile=shown_as, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        return target.read_bytes()
    finally:
        target.unlink(missing_ok=True)


def compile_on_disk(site: Path) -> int:
    """Step 4: ``checked-hash`` bytecode for every .py left on disk; return how many failed."""
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache)
    failed = 0
    for path in sorted(site.rglob("*.py")):
        try:
            py_compile.compile(str(path), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        except py_compile.PyCompileError as error:
            failed += 1
            print(f"image_prune: cannot compile {path}: {error.msg.strip()}", file=sys.stderr)
    return failed


def main() -> int:
    """Run the four steps on ``sys.prefix``; print the JSON summary."""
    prefix = Path(sys.prefix)
    if prefix == Path(sys.base_prefix):
        print("image_prune: run me with the virtual environment's python", file=sys.stderr)
        return 2
    site = site_packages()
    before = tree_bytes(prefix)
    done = subprocess.run(["pip", "--python", sys.executable, "uninstall", "--yes", *OMIT],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        print(f"image_prune: pip uninstall exited {done.returncode}:\n{done.stdout}", file=sys.stderr)
        return 1
    delete_build_only(site, prefix)
    zipped = write_zip(site)
    failed = compile_on_disk(site)
    print(json.dumps({"bytes_before": before, "bytes_after": tree_bytes(prefix), "zip": ZIP_NAME,
                      "zip_bytes": (site / ZIP_NAME).stat().st_size, "zipped": zipped, "compile_failed": failed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
