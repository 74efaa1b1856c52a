"""The one base of every exception this project raises on purpose, and the exit status it means.

Every exception class of the ``webhook`` package derives from :class:`SegmentWebhookError` (next
to the builtin it always derived from, so ``except ValueError`` callers still catch it;
``tests/unit/project/test_layout.py`` checks there is no other). The command line (:func:`webhook.cli.main`)
ends a command that raises one with ``segment-webhook <command>: error: <message>`` and the class's
:attr:`~SegmentWebhookError.exit_code`: the exit status is a property of the error, never of a
per-command table. Exit statuses (docs/reference/flags.md "Command-line flags"): 0 success, 1 denied / not placed,
2 bad usage or unreadable input, 70 a bug of this project (``EX_SOFTWARE`` of sysexits.h).
"""

from __future__ import annotations

#: Exit status of a command that succeeded.
EXIT_OK = 0
#: Exit status when the webhook denies a workload or the engine cannot place it.
EXIT_DENIED = 1
#: Exit status of a bad flag, an unreadable or malformed input file.
EXIT_USAGE = 2
#: Exit status of a bug of this project detected at run time (sysexits.h ``EX_SOFTWARE``).
EXIT_BUG = 70


class SegmentWebhookError(Exception):
    """Base of every exception of the ``webhook`` package.

    ``exit_code``: the exit status of ``segment-webhook`` when this error ends a command
    (:data:`EXIT_USAGE` unless a subclass says otherwise). The message (``str(exc)``) names the
    field, file or flag, the value and the fix, as every message of the project does.
    """

    exit_code: int = EXIT_USAGE
