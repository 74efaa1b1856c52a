"""Print the package -> package import edges of ``webhook`` (docs/concepts/ARCHITECTURE.md, "Import graph").

Usage: ``python3 hack/import_graph.py`` from the repository root. One line per package with the
packages it imports directly (top-level modules such as ``webhook.errors`` count as packages).
Reads the source with grimp (import-linter's graph builder), so it shows what ``lint-imports``
checks.
"""

from __future__ import annotations

import grimp


def package_of(module: str) -> str:
    """``webhook.admission.kinds.pod`` -> ``admission``; ``webhook.errors`` -> ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def edges() -> dict[str, set[str]]:
    graph = grimp.build_graph("webhook")
    out: dict[str, set[str]] = {}
    for module in graph.modules:
        src = package_of(module)
        out.setdefault(src, set())
        for imported in graph.find_modules_directly_imported_by(module):
            dst = package_of(imported)
            if imported.startswith("webhook.") and dst != src:
                out[src].add(dst)
    return out


def main() -> None:
    for src, dsts in sorted(edges().items()):
        if src != "webhook":
            print(f"{src:<10} -> {', '.join(sorted(dsts)) or '(nothing)'}")


if __name__ == "__main__":
    main()
