"""Repository-wide checks: layout, contracts, mypy configuration, doc references, generated references."""
