"""Smoke test of benchmarks/admission.py: it starts both servers over HTTPS, gets correct answers,
runs every phase and stops by itself. No figure is asserted (speed belongs to the benchmark's own
printout, not to a unit test); only that every phase ran without a failed review.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jsonpatch
import pytest

from tests.support import paths

ROOT = paths.REPO
BENCH = ROOT / "benchmarks" / "admission.py"


def test_percentile_is_nearest_rank():
    sys.path.insert(0, str(BENCH.parent))
    try:
        import admission
    finally:
        sys.path.pop(0)
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert admission.percentile(values, 50) == 50.0
    assert admission.percentile(values, 95) == 95.0
    assert admission.percentile(values, 99) == 99.0
    assert admission.percentile(values, 100) == 100.0
    assert admission.percentile([7.0], 99) == 7.0


@pytest.mark.slow  # two servers and 16 phases: run by .ci/run's -m slow (docs/decisions/default-suite-time.md)
@pytest.mark.skipif(shutil.which("hey") is None and not os.environ.get("CI"),
                    reason="needs hey (apt-get install hey); .ci/run installs it, so CI never skips this")
def test_benchmark_runs_and_stops_by_itself(tmp_path):
    out_json = tmp_path / "result.json"
    scratch = tmp_path / "tmp"  # the benchmark's TMPDIR: its certificates and logs go here
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--duration", "0.5", "--concurrency", "1,8", "--dribblers", "2", "--idle", "2",
         "--rate", "50", "--rate-duration", "0.4", "--procs", "1", "--conns", "2",
         "--json", str(out_json)],
        capture_output=True, text=True, timeout=240, cwd=ROOT, env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # It made a segment-webhook-bench-* directory with a CA and a private key there, and removed it.
    assert sorted(p.name for p in scratch.iterdir()) == []
    result = json.loads(out_json.read_text())
    assert sorted(result["phases"]) == sorted(
        [f"{server}/{payload}/{mode}" for server in ("webhook", "noop") for payload in ("pytorchjob", "pod")
         for mode in ("go-c1", "go-c8", "rate")]
        + [f"{server}/pytorchjob/go-c{level}-slow" for server in ("webhook", "noop") for level in (1, 8)])
    for name, phase in result["phases"].items():
        assert phase["errors"] == 0, f"{name}: {phase['first_error']}"
        assert phase["requests"] > 0, name
    assert set(result["probes"]) == {"webhook", "noop"}
    assert all(g["figure"] for g in result["goals"])
    # The pod review of worker 5 with segment size 4 is answered with a JSONPatch (DESIGN.md §7).
    pod_answer = result["webhook_answers"]["pod"]
    assert pod_answer["patchType"] == "JSONPatch"
    sys.path.insert(0, str(BENCH.parent))
    try:
        import admission
    finally:
        sys.path.pop(0)
    patched = jsonpatch.apply_patch(admission.WORKER_POD, pod_answer["patch"])
    assert patched["metadata"]["labels"]["kai.scheduler/segment-index"] == "1"  # worker 5 // 4
    assert patched["metadata"]["labels"]["kai.scheduler/subgroup-name"] == "worker-1"
    assert "webhook / noop" in proc.stdout and "goal " in proc.stdout
