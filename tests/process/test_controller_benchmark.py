"""benchmarks/controller.py runs (``--quick``) and prints its figures; no speed assertion (house rule:
speed goals live in benchmarks, not in unit tests)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import paths

ROOT = paths.REPO


def test_controller_benchmark_quick_run_prints_the_512_node_line():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "controller.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    [line] = out.stdout.splitlines()
    assert line.startswith("  512 nodes,") and "(450 released)" in line
    for figure in ("idle pass", "with the live ParseCache", "full pass", "engine only", "full / engine",
                   "reconcile per gang", "engine per gang"):
        assert figure in line
