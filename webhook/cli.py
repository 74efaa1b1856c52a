"""The ``segment-webhook`` command line.

Each adapter contributes its sub-commands through a ``register(subparsers)`` function that adds
a parser and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning the
exit code). Exit codes: 0 success, 1 denied / not placed, 2 bad usage or unreadable input.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from webhook import __version__

#: Modules that provide ``register(subparsers)``; order is the order in ``--help``.
COMMAND_MODULES = (
    "webhook.http.commands",        # serve, certs
    "webhook.review_cli",           # review (offline dry run)
    "webhook.placement.commands",   # place, gen-cluster
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="segment-webhook",
        description="Segment-based topology-aware placement: admission webhook and placement engine.",
    )
    parser.add_argument("--version", action="version", version=f"segment-webhook {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
