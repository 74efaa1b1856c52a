"""In-process tests, one folder per package of ``webhook/`` (or per folder of the repository:
``deploy``, ``hack``, ``benchmarks``, ``project`` for the repository-wide checks)."""
