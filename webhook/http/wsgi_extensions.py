"""What the server gives the app besides plain WSGI: two callables in the request's ``environ``,
under this project's own keys (WSGI's place for server extensions, as ``wsgi.file_wrapper``).

The app (``webhook.http.app``) never reads a server's own environ keys (``gunicorn.socket``, ...);
``tests/unit/project/test_layout.py`` fences those, and the framework imports, to the server modules. Under
another server (Flask's test client, a benchmark's in-process call) both keys are absent and the
app does the plain WSGI thing instead, as documented for each key.

* :data:`DRAIN` → ``drain(max_bytes: int, seconds: float) -> None``: read and drop what the client
  still sends on this request's connection, at most ``max_bytes`` bytes and ``seconds`` seconds in
  all, each read waiting only for the time left (so a client sending a byte now and then cannot
  stretch it). Never raises. Called after an answer with ``Connection: close`` has been written
  ("lingering close"). Without it, the app reads ``wsgi.input`` instead.
* :data:`RUN_APART` → ``run_apart(function, *args) -> result``: call ``function(*args)`` where its
  CPU time does not hold up the other connections of the worker (the server's review thread), and
  return its result or raise its exception. Without it, the app calls ``function(*args)`` itself.

And one promise about ``wsgi.input``: a read of a chunked body raises :class:`BodyTooLarge` as soon
as its chunk-size lines declare more than :data:`MAX_BODY_BYTES` in all, before the data of that
chunk arrives (the app answers 413 at once, as for a ``Content-Length`` over the limit). Under
another server the app finds out as the bytes arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from webhook.errors import SegmentWebhookError

#: Largest request body, in bytes: 3 MiB, kube-apiserver's own request body limit
#: (``MaxRequestBodyBytes``), so every object the apiserver can store fits in a review.
MAX_BODY_BYTES = 3 * 1024 * 1024

#: ``environ`` key of the connection's drain (see the module docstring).
DRAIN = "segment_webhook.drain"
#: ``environ`` key of the worker's way to run CPU-heavy work apart (see the module docstring).
RUN_APART = "segment_webhook.run_apart"


class Drain(Protocol):
    """``drain(max_bytes, seconds)``: read and drop the rest of a request body (module docstring)."""

    def __call__(self, max_bytes: int, seconds: float) -> None: ...


class RunApart(Protocol):
    """``run_apart(function, *args)``: run CPU-heavy work off the connections' thread (module docstring)."""

    def __call__(self, function: Callable[..., Any], *args: Any) -> Any: ...


class BodyTooLarge(SegmentWebhookError):
    """A request body passed the limit: raised by the app's reading of a chunked body after
    ``limit`` bytes, and by the server's ``wsgi.input`` when a chunk-size line declares more
    (module docstring). The app answers 413."""
