"""The Hypothesis profiles of tests/conftest.py (issue 38): the default run is seeded, the run
that selects slow tests searches at random."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests.conftest import selects_slow


@pytest.mark.skipif("HYPOTHESIS_PROFILE" in os.environ, reason="a profile named by HYPOTHESIS_PROFILE")
def test_the_default_run_draws_the_same_inputs_every_time():
    assert settings.default is not None
    assert settings.default.derandomize is True
    assert settings.default.database is None


@pytest.mark.parametrize("profile", ["seeded", "full"])
def test_no_profile_times_an_example(profile):
    # a 200 ms deadline (Hypothesis's default) failed a default run on a loaded machine
    assert settings.get_profile(profile).deadline is None


@pytest.mark.parametrize("markexpr, slow", [
    ("not slow and not cluster and not image", False),  # setup.cfg's addopts: the default run
    ("", False),
    ("slow", True),  # .ci/run: pytest -q -m slow
    ("cluster", False),
    ("slow or cluster", True),
])
def test_the_full_search_is_for_runs_that_select_slow_tests(markexpr, slow):
    assert selects_slow(markexpr) is slow
