"""Placement engine (DESIGN.md §8): pure, no flask and no kubernetes imports.

Modules: ``quantity`` (Kubernetes quantities), ``snapshot`` (cluster dumps → free capacity),
``expand`` (workload → pods through the admission core), ``engine`` (the algorithm). The drawing
(``svg``) and synthetic snapshots (``gencluster``) are :mod:`webhook.tooling`'s.
"""
