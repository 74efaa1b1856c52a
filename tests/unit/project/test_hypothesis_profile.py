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


class _Plugins:
    def __init__(self, names):
        self.names = names

    def hasplugin(self, name):
        return name in self.names


def _config(args_source=pytest.Config.ArgsSource.TESTPATHS, numprocesses=None, dist="no", collectonly=False,
            markexpr="not slow and not cluster and not image and not node", plugins=("xdist",)):
    from types import SimpleNamespace

    # setup.cfg's [tool:pytest] addopts, as pytest reads it
    addopts = '-ra -m "not slow and not cluster and not image and not node"'
    return SimpleNamespace(pluginmanager=_Plugins(plugins), args_source=args_source, inicfg={"addopts": addopts},
                           option=SimpleNamespace(numprocesses=numprocesses, dist=dist, collectonly=collectonly,
                                                  markexpr=markexpr))


def test_only_the_plain_default_run_goes_to_two_workers(monkeypatch):
    from tests.conftest import DEFAULT_WORKERS, runs_in_workers

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert DEFAULT_WORKERS == 2
    assert runs_in_workers(_config()) is True  # python3 -m pytest -q (README)
    assert runs_in_workers(_config(args_source=pytest.Config.ArgsSource.ARGS)) is False  # files named
    for markexpr in ("slow", "cluster", "image", "node", "slow or cluster"):  # .ci/run's other runs
        assert runs_in_workers(_config(markexpr=markexpr)) is False
    assert runs_in_workers(_config(numprocesses=0)) is False  # -n 0
    assert runs_in_workers(_config(dist="load")) is False
    assert runs_in_workers(_config(collectonly=True)) is False
    assert runs_in_workers(_config(plugins=())) is False  # -p no:xdist, or not installed
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert runs_in_workers(_config()) is False
