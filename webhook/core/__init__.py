"""Pure domain core: no Flask, no Kubernetes client imports (enforced by tests/test_layout.py)."""
