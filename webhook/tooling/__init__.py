"""Tooling beside the placement engine: synthetic cluster snapshots (``gencluster``) and the SVG
drawing of a placement (``svg``). Outside :mod:`webhook.placement`, which holds the pure engine
(DESIGN.md §8); used by the ``gen-cluster`` and ``place --svg`` commands, the tests and the
benchmarks."""
