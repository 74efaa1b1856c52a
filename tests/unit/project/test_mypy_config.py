"""The mypy configuration (pyproject.toml ``[tool.mypy]``, docs/tasks/checks.md): one ``mypy`` run checks
webhook/ with every flag of ``--strict`` and tests/ with the flags that need no annotations.
``strict = true`` cannot be set per module (mypy applies it to every module), so the flags are
written out; this test keeps the two lists equal to what ``mypy --strict`` enables."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support import paths

REPO = paths.REPO

#: strict's flags tests do without: each needs annotations, or a library with types, in every test
NEED_ANNOTATIONS = {"disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                    "disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_decorators",
                    "warn_return_any", "no_implicit_reexport"}


def strict_flags() -> set[str]:
    """The options ``mypy --strict`` turns on, as config keys (``--warn-return-any`` → ``warn_return_any``)."""
    shown = subprocess.run([sys.executable, "-m", "mypy", "--help"], capture_output=True, text=True, check=True,
                           timeout=60, env={**os.environ, "COLUMNS": "10000"}).stdout
    found = re.search(r"--strict\s+Strict mode; enables the following flags: (.+)", shown)
    assert found, "mypy --help no longer lists the flags of --strict"
    return {flag.strip().removeprefix("--").replace("-", "_") for flag in found.group(1).split(",")}


def test_webhook_is_checked_with_every_strict_flag_and_tests_with_those_that_need_no_annotations():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on; setup.cfg allows 3.10
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    [webhook] = [o for o in config["overrides"] if o["module"] == ["webhook.*"]]
    strict = strict_flags()
    assert "check_untyped_defs" in strict and "strict" not in config
    everywhere = {key for key in strict if config.get(key) is True}
    only_webhook = {key for key in strict if webhook.get(key) is True}
    assert everywhere | only_webhook == strict, f"not set: {sorted(strict - everywhere - only_webhook)}"
    assert only_webhook == NEED_ANNOTATIONS and not everywhere & only_webhook
    assert config["files"] == ["webhook", "tests"]
