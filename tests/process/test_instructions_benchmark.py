"""Smoke test of benchmarks/instructions.py without valgrind: the three subjects it counts (the
webhook's WSGI app, the no-op app, the domain core) answer reviews in its child mode, and the
webhook answers 200 (a review the child mode's ``start_response`` would stop on otherwise), so
the counts it prints under valgrind are of working code. No figure is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import paths

ROOT = paths.REPO
BENCH = ROOT / "benchmarks" / "instructions.py"


@pytest.mark.parametrize("subject", ["webhook", "noop", "core"])
@pytest.mark.parametrize("payload", ["pytorchjob", "pod"])
def test_child_mode_answers_reviews(tmp_path, subject, payload):
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, str(BENCH), "--child", subject, payload, "3"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    if subject == "webhook":
        lines = (tmp_path / "review.log").read_text().splitlines()
        assert len(lines) == 53  # 50 warm-up reviews and 3 counted ones, one log line each
        assert all('"decision":"allowed"' in line for line in lines)


def test_calls_must_grow():
    out = subprocess.run([sys.executable, str(BENCH), "--calls", "300", "100"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "0 < N1 < N2" in out.stderr
