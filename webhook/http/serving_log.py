"""The server's own log lines (certificate reloads, the live Topology catalog and the API
server's outage lines, envelope errors, closed connections): ``[time] [pid] [LEVEL] logger:
message``, as gunicorn's error log writes its own.

The review log (one JSON line per review, ``segment_webhook.review``) is not here: it has its own
handler and format (``webhook.http.metrics``). No server framework here: the worker installs
:class:`SocketTimeoutAsInfo` on gunicorn's error log (``webhook.http.worker``).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

#: Format of the ``segment_webhook.*`` log lines (the review log has its own, bare JSON): time,
#: process, level, logger, message, as gunicorn's own error log.
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S %z"


#: The loggers of the server's log: its own (``segment_webhook.*``: certificate reloads, envelope
#: errors) and the cluster adapters' (``webhook.cluster.*``: the live Topology catalog, the API
#: server's outage lines, among them the INFO line when it answers again).
SERVER_LOGGERS = ("segment_webhook", "webhook.cluster")


#: the name of the server loggers' handler: :func:`configure_logging` adds it once
SERVER_HANDLER = "segment_webhook.server"


def configure_logging(stream: Any = None, level: int = logging.INFO) -> None:
    """Send the :data:`SERVER_LOGGERS` to ``stream`` (default stderr) as ``[time] [pid] [LEVEL]
    logger: message`` lines from ``level`` up; once per process (a second call does nothing).
    The review log (``segment_webhook.review``) keeps its own handler and format."""
    if any(h.name == SERVER_HANDLER for h in logging.getLogger(SERVER_LOGGERS[0]).handlers):
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
    handler.name = SERVER_HANDLER
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)


class SocketTimeoutAsInfo(logging.Filter):
    """Turns a server's traceback for a socket timeout (gunicorn: "Socket error processing
    request.", e.g. a client that stopped reading its answer) into one INFO line naming the
    timeout: a stalled client is expected, not a server error. ``seconds``: the read timeout."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, TimeoutError):
            record.msg = "closed a connection: the client sent or read nothing for %s s (read timeout)"
            record.args = (self.seconds,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True
