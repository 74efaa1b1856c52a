"""The command line's output writer: :mod:`webhook.output` (its one home), named here for the
sub-commands."""

from __future__ import annotations

from webhook.output import BROKEN_PIPE_EXIT, silence_stdout, write_output

__all__ = ["BROKEN_PIPE_EXIT", "silence_stdout", "write_output"]
