"""Writing a sub-command's result to standard output, the one place that handles output errors
(below ``cli/`` so that the controller's dry run, :mod:`webhook.controller.main`, writes through it
without importing the command line).

``review``, ``place``, ``gen-cluster`` and ``controller --once`` print their result with
:func:`write_output`. A reader that goes away early (``… -o yaml | head -1``) ends the command
quietly with exit 141 (128 + SIGPIPE, what a shell reports for a Unix tool killed by SIGPIPE); any
other write error (``> /dev/full``) prints one line ``segment-webhook <command>: error: cannot
write output: <reason>`` and exits 2 (bad usage or environment), never a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

#: Exit status when stdout's reader closes early: 128 + SIGPIPE.
BROKEN_PIPE_EXIT = 141


def _write_all(text: str, stream: TextIO) -> None:
    """Write ``text`` to ``stream`` completely and flush it. With ``PYTHONUNBUFFERED=1`` the
    text layer sits on a raw file that may take a short write (a pipe whose reader left takes
    one chunk, then fails); writing the encoded bytes in a loop keeps every byte and surfaces
    the error instead of dropping the rest silently."""
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # io.StringIO and other text-only streams
        stream.write(text)
        stream.flush()
        return
    stream.flush()
    view = memoryview(text.encode(stream.encoding or "utf-8", errors="backslashreplace"))
    while view:
        written = buffer.write(view)
        if not written:  # a non-blocking stream that took nothing: let flush raise or block
            buffer.flush()
            continue
        view = view[written:]
    buffer.flush()


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's final flush of what is left in
    ``sys.stdout`` after a write error is silent."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no real descriptor (a test's capture): nothing to silence
        pass


def write_output(text: str, command: str, stream: TextIO | None = None) -> int:
    """Write ``text`` (a command's whole result) to ``stream`` (default ``sys.stdout``).

    Returns 0 when written, :data:`BROKEN_PIPE_EXIT` (141) when the reader closed the pipe, 2 after
    printing ``segment-webhook <command>: error: cannot write output: <strerror>`` to stderr on any
    other :class:`OSError` (e.g. ``No space left on device`` for ``> /dev/full``).
    """
    out = sys.stdout if stream is None else stream
    try:
        _write_all(text, out)
    except BrokenPipeError:
        if out is sys.stdout:
            silence_stdout()
        return BROKEN_PIPE_EXIT
    except OSError as exc:
        if out is sys.stdout:
            silence_stdout()
        reason = exc.strerror or str(exc)
        print(f"segment-webhook {command}: error: cannot write output: {reason}", file=sys.stderr)
        return 2
    return 0
