"""The ``segment-webhook`` command line (console script ``segment-webhook = webhook.cli:main``).

One module per sub-command in this package, listed in :data:`COMMAND_MODULES`; each has a
``register(subparsers)`` function that adds its parser and sets ``func`` (a callable taking
the parsed ``argparse.Namespace`` and returning the exit code). Exit codes (:mod:`webhook.errors`):
0 success, 1 denied / not placed, 2 bad usage or unreadable input, 70 a bug of this project. A
command may let any :class:`~webhook.errors.SegmentWebhookError` escape: :func:`main` prints it as
``segment-webhook <command>: error: <message>`` and exits with the error's own ``exit_code``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterable
from typing import Any, TypeVar, overload

from webhook import __version__
from webhook.cli.flags import error
from webhook.cli.output import BROKEN_PIPE_EXIT, silence_stdout  # 141 = 128 + SIGPIPE; one output helper
from webhook.errors import SegmentWebhookError

#: Modules that provide ``register(subparsers)``; order is the order in ``--help``. Shared flags,
#: converters and ``SEGMENT_WEBHOOK_*`` handling: :mod:`webhook.cli.flags`.
COMMAND_MODULES = (
    "webhook.cli.serve",        # serve
    "webhook.cli.certs",        # certs
    "webhook.cli.review",       # review (offline dry run)
    "webhook.cli.place",        # place
    "webhook.cli.gen_cluster",  # gen-cluster
    "webhook.cli.controller",   # controller (gang ungater, DESIGN.md §9)
    "webhook.cli.topology",     # topology infer | check | export (DESIGN.md §12, §13)
    "webhook.cli.capacity",     # capacity (DESIGN.md §13)
)


_N = TypeVar("_N")  # the namespace class a caller passes to parse_known_args


class CommandParser(argparse.ArgumentParser):
    """The ``segment-webhook`` parser and the parser of each sub-command (``place``, ``topology
    infer``): an argument it does not know is its own error, printed with its own usage
    (``segment-webhook place: error: unrecognized arguments: --bogus``, exit 2). argparse parses a
    sub-command with ``parse_known_args`` and leaves what it did not recognise to the top-level
    parser, which printed the top-level usage and ``segment-webhook: error: ...`` instead. An
    unknown argument is named before a missing sub-command (``segment-webhook --bogus``:
    ``unrecognized arguments: --bogus``; argparse checked the required COMMAND first and said only
    ``the following arguments are required: COMMAND``); no sub-command at all is still that error."""

    # argparse's three call shapes (typeshed's overloads): a new Namespace, or the given one filled in
    @overload
    def parse_known_args(self, args: Iterable[str] | None = None,
                         namespace: None = None) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: _N) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        """``argparse.ArgumentParser.parse_known_args``, then :meth:`error` (usage, message, exit 2)
        when an argument is left over, then when a required sub-command is missing."""
        commands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction) and a.required]
        for action in commands:
            action.required = False
        try:
            parsed, extras = super().parse_known_args(args, namespace)
        finally:
            for action in commands:
                action.required = True
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        for action in commands:
            if getattr(parsed, action.dest, None) is None:
                self.error(f"the following arguments are required: {argparse._get_action_name(action)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every sub-command registered (each a :class:`CommandParser`,
    nested ones too: ``add_subparsers`` makes its parsers of the class of the parser it is called on)."""
    parser = CommandParser(
        prog="segment-webhook",
        description="Segment-based topology-aware placement: admission webhook and placement engine.",
    )
    parser.add_argument("--version", action="version", version=f"segment-webhook {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except SegmentWebhookError as exc:
        return error(args.command, exc)
    except BrokenPipeError:
        # The reader went away (``review -f list.yaml | head -5``): stop quietly, as Unix tools do
        # on SIGPIPE, and point stdout at /dev/null so the interpreter's final flush is silent.
        silence_stdout()
        return BROKEN_PIPE_EXIT
