"""The repository's folders, for tests wherever they sit under tests/."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder holding webhook/ and tests/).
REPO = Path(__file__).resolve().parents[2]
#: The manifests and CRDs the tests read: ``crds/`` (upstream CRDs, tests/data/crds/SOURCES.md),
#: ``manifests/`` (the test suite's own), ``upstream_samples/`` (upstream projects' samples).
DATA = REPO / "tests" / "data"
