"""The test suite (docs/tasks/development.md "Tests"): ``unit/<package>`` (in-process, by the package or
folder a test is about), ``process`` (tests that start real processes: ``serve``, gunicorn, the
benchmarks' servers, the container image), ``cluster`` (the local control plane and the real node:
markers ``cluster`` and ``node``); ``support`` holds the shared helpers, ``data`` the manifests and
CRDs they read. A package, so tests import each other by their full name
(``from tests.support.serving import running_serve``)."""
