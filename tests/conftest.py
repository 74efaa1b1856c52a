"""Shared, generic test helpers.

Plain functions (import with ``from conftest import load_example, make_request``) and fixtures
of the same names:

* ``load_example(name)``: parse ``<repo>/../shared/examples/<name>`` (one YAML document); a fresh
  object on every call, so tests may mutate it.
* ``make_request(obj, operation="CREATE", old=None, user=..., groups=...)``: an AdmissionReview v1
  ``request`` dict for ``obj`` (uid, kind, resource, namespace, name, operation, userInfo, object,
  oldObject).
* ``example_catalog``: a StaticTopologyCatalog with ``shared/examples/topology.yaml``.
* ``UnsyncedCatalog``: a catalog whose topology cache has not synced yet.
* ``TOPO``, ``SIZE``, ``SEG_REQ``, ``SEG_PREF``, ``WL_REQ``, ``WL_PREF``, ``POLICY``: the keys of DESIGN.md §2.

Hypothesis (issue 38): the default run loads the profile ``seeded`` (``derandomize=True``, no
example database), so every run of the default suite draws the same inputs and a failure in CI
reproduces anywhere; a run that selects slow tests (``-m slow``, .ci/run's second run) loads
``full`` (random inputs, the example database on), the full search; ``HYPOTHESIS_PROFILE=full``
(or ``seeded``) chooses either explicitly. Neither has a deadline per example (Hypothesis's
default is 200 ms): on a loaded machine one slow first call failed a default run as
``DeadlineExceeded`` / "Unreliable test timings"; speed is the benchmarks' to measure.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Any, Literal, NoReturn

import pytest
import yaml
from hypothesis import settings as hypothesis_settings

from tests.support import paths
from webhook.admission.request import build_request
from webhook.planning.manifests import load_topology_files
from webhook.topology.objects import StaticTopologyCatalog, Topology

REPO = paths.REPO
SHARED = paths.SHARED
EXAMPLES = SHARED / "examples"
CRDS = SHARED / "crds"

#: The user-facing keys, written out literally (DESIGN.md §2) so tests do not read them from the
#: code under test.
TOPO = "kai.scheduler/topology"
SIZE = "kai.scheduler/segment-size"
SEG_REQ = "kai.scheduler/segment-topology-required-placement"
SEG_PREF = "kai.scheduler/segment-topology-preferred-placement"
WL_REQ = "kai.scheduler/topology-required-placement"
WL_PREF = "kai.scheduler/topology-preferred-placement"
POLICY = "kai.scheduler/segment-leader-policy"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The environment variable that names the Hypothesis profile (module docstring).
HYPOTHESIS_PROFILE = "HYPOTHESIS_PROFILE"
hypothesis_settings.register_profile("seeded", derandomize=True, database=None, deadline=None)
hypothesis_settings.register_profile("full", derandomize=False, deadline=None)
hypothesis_settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE, "seeded"))


def selects_slow(markexpr: str) -> bool:
    """Whether the ``-m`` expression runs the slow tests: it names ``slow`` other than as ``not slow``."""
    return "slow" in markexpr.replace("not slow", "")


#: Worker processes of the default run (docs/decisions/default-suite-time.md).
DEFAULT_WORKERS = 2


def runs_in_workers(config: Any) -> bool:
    """Whether ``config`` (a pytest.Config after parsing) is the default run: no test named (the
    ``testpaths``), setup.cfg's ``-m``, no ``-n``/``--dist``, not ``--collect-only``, pytest-xdist
    present, and not already inside a worker."""
    if not config.pluginmanager.hasplugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER"):
        return False
    return (config.args_source == pytest.Config.ArgsSource.TESTPATHS and config.option.numprocesses is None
            and config.option.dist == "no" and not config.option.collectonly
            and f'-m "{config.option.markexpr}"' in str(config.inicfg.get("addopts", "")))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The default run, ``python3 -m pytest -q`` (:func:`runs_in_workers`), in
    :data:`DEFAULT_WORKERS` pytest-xdist processes, each test file whole in one of them
    (``--dist loadfile``: a file's module fixtures, servers and ports stay in one process). A run
    that names tests or files, another ``-m`` (the cluster, image, node and slow runs, whose
    control planes and timed proofs want the machine to themselves), ``-n`` or ``-p no:xdist``
    stays as asked. Runs before pytest-xdist reads ``-n``."""
    if runs_in_workers(config):
        config.option.numprocesses = DEFAULT_WORKERS
        config.option.dist = "loadfile"


def pytest_configure(config: pytest.Config) -> None:
    """The full search (profile ``full``) when the run selects slow tests, unless
    ``HYPOTHESIS_PROFILE`` names a profile (module docstring). Runs before any test module is
    imported, so every ``@settings`` of a test inherits the profile."""
    if HYPOTHESIS_PROFILE not in os.environ and selects_slow(config.getoption("markexpr") or ""):
        hypothesis_settings.load_profile("full")
    if not (SHARED / "examples").is_dir():  # one clear stop, not dozens of FileNotFoundErrors
        raise pytest.UsageError(missing_shared_message(SHARED))


def missing_shared_message(shared: Any) -> str:
    """The error of a run without the project's shared inputs (``paths.SHARED``)."""
    return (f"the tests read the project's shared inputs (DESIGN.md, examples/, crds/) from {shared}, which "
            f"has no examples/ folder; fix: put the shared folder beside the repository (../shared) or set "
            f"{paths.SHARED_ENV}=DIR to where it is")


@functools.cache
def _parsed(name: str) -> Any:
    with open(EXAMPLES / name, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_Loader)


def load_example(name: str) -> Any:
    """A fresh copy of the example manifest ``shared/examples/<name>``."""
    return copy.deepcopy(_parsed(name))


def make_request(obj: Any, operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"] = "CREATE", old: Any = None,
                 user: str = "kubectl-user", groups: list[str] | tuple[str, ...] = ("system:authenticated",),
                 namespace: str | None = None, sub_resource: str | None = None) -> dict:
    """An AdmissionReview v1 ``request`` for ``obj`` (``oldObject`` = ``old``): the project's one
    request builder, :func:`webhook.admission.request.build_request`."""
    return dict(build_request(obj, operation=operation, old=old, user=user, groups=groups, namespace=namespace,
                              sub_resource=sub_resource))


class UnsyncedCatalog:
    """A TopologyCatalog whose cache has not synced: knows ``topologies`` but ``synced`` is False."""

    def __init__(self, topologies: tuple[Topology, ...] = ()):
        self._inner = StaticTopologyCatalog(topologies)

    @property
    def synced(self) -> bool:
        return False

    @property
    def crd_missing(self) -> bool:
        return False

    def get(self, name: str) -> Topology | None:
        return self._inner.get(name)

    def names(self) -> list[str]:
        return self._inner.names()


@pytest.fixture(name="load_example")
def _load_example_fixture():
    return load_example


@pytest.fixture(name="make_request")
def _make_request_fixture():
    return make_request


@pytest.fixture(scope="session")
def example_catalog() -> StaticTopologyCatalog:
    """``shared/examples/topology.yaml``: cluster-topology = zone > block > rack > hostname."""
    return load_topology_files([str(EXAMPLES / "topology.yaml")])


def no_kubectl() -> NoReturn:
    """Without kubectl the deploy/ renders cannot be checked: a skip on a developer's machine, a
    failure in CI (``CI=true``; .ci/run puts the kubectl it builds on PATH)."""
    message = "kubectl is not installed: cannot render kustomize"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI must have it: .ci/run builds it)", pytrace=False)
    pytest.skip(message)


# ----------------------------------------------------------------- the local control plane (marker cluster)

@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """ONE local control plane per pytest run (tests/support/cluster_support.py), stopped at the end."""
    from tests.support import cluster_support

    started = cluster_support.start_cluster(tmp_path_factory.mktemp("cluster"))
    yield started
    started.stop_all()


@pytest.fixture(scope="session")
def kubectl(cluster):
    """The real kubectl against :func:`cluster` (admin kubeconfig)."""
    from tests.support import cluster_support

    return cluster_support.Kubectl(cluster)
