"""The repository's folders, for tests wherever they sit under tests/."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository's root (the folder holding webhook/ and tests/).
REPO = Path(__file__).resolve().parents[2]
#: The manifests and CRDs the tests read: ``crds/`` (upstream CRDs, tests/data/crds/SOURCES.md),
#: ``manifests/`` (the test suite's own), ``upstream_samples/`` (upstream projects' samples).
DATA = REPO / "tests" / "data"
#: The project's shared inputs (DESIGN.md, seed/, crds/, examples/): ``../shared`` beside the
#: repository, or the folder ``SEGMENT_WEBHOOK_SHARED`` names (a clone elsewhere). tests/conftest.py
#: stops the run with this fix when the folder is missing.
SHARED_ENV = "SEGMENT_WEBHOOK_SHARED"
SHARED = Path(os.environ.get(SHARED_ENV) or REPO.parent / "shared")
