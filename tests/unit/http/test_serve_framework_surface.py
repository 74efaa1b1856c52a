"""Every gunicorn and gevent attribute, hook and behaviour the serving modules rely on, in one list
(issue 20 item 5): when a release of either moves or changes one, this test names it.

The serving modules are ``webhook/http/worker.py`` and ``webhook/http/server.py`` (the only ones
importing gunicorn or gevent: an import-linter contract in setup.cfg). :data:`SURFACE` names what they use;
:func:`test_the_list_is_complete` reads both modules and fails when they use a framework name
that is missing here, so the list cannot fall behind the code. CI runs this on the newest allowed
releases and on the oldest (``.ci/server-oldest.txt``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tests.support import paths

HTTP = paths.REPO / "webhook" / "http"

#: Dotted names resolved on the installed gunicorn / gevent (module, then attribute chain).
SURFACE = [
    # the worker's base class and the methods WebhookWorker overrides or calls through super()
    "gunicorn.workers.ggevent.GeventWorker",
    "gunicorn.workers.ggevent.GeventWorker.init_process",
    "gunicorn.workers.ggevent.GeventWorker.load_wsgi",
    "gunicorn.workers.ggevent.GeventWorker.handle",
    "gunicorn.workers.ggevent.GeventWorker.handle_exit",
    "gunicorn.workers.ggevent.GeventWorker.timeout_ctx",
    "gunicorn.workers.ggevent.GeventWorker.handle_error",
    "gunicorn.workers.ggevent.GeventWorker.run",
    "gunicorn.workers.base_async.AsyncWorker.handle",
    "gunicorn.workers.base_async.AsyncWorker.handle_request",
    "gunicorn.workers.base.Worker.handle_exit",
    # helpers and parse errors
    "gunicorn.util.close",
    "gunicorn.util.write",
    "gunicorn.http.errors.LimitRequestLine",
    "gunicorn.http.errors.LimitRequestHeaders",
    "gunicorn.http.errors.InvalidRequestMethod",
    "gunicorn.http.errors.InvalidHTTPVersion",
    "gunicorn.http.errors.InvalidRequestLine",
    "gunicorn.http.errors.InvalidHeaderName",
    "gunicorn.http.errors.InvalidHeader",
    "gunicorn.http.errors.InvalidChunkSize",
    "gunicorn.http.errors.ChunkMissingTerminator",
    # the chunked body reader the worker bounds (BoundedChunkedReader, bounded_chunked_input)
    "gunicorn.http.body.ChunkedReader",
    "gunicorn.http.body.ChunkedReader.parse_chunk_size",
    "gunicorn.http.body.Body",
    # the response object behind start_response (closing after an answer with Connection: close)
    "gunicorn.http.wsgi.Response.start_response",
    "gunicorn.http.wsgi.Response.force_close",
    "gunicorn.http.wsgi.Response.should_close",
    # the runner
    "gunicorn.app.base.BaseApplication",
    "gunicorn.app.base.BaseApplication.load_config",
    "gunicorn.app.base.BaseApplication.load",
    "gunicorn.app.base.BaseApplication.run",
    "gunicorn.config.Config.set",
    # gevent
    "gevent.Timeout",
    "gevent.getcurrent",
    "gevent.get_hub",
    "gevent.sleep",
    "gevent.hub.Waiter",
    "gevent.hub.Waiter.get",
    "gevent.hub.Waiter.switch",
    "gevent.threadpool.ThreadPool",
    "gevent.threadpool.ThreadPool.apply",
    "gevent.server.StreamServer",
]

#: gunicorn settings the runner sets (webhook.http.server.gunicorn_settings); control_socket_disable
#: is optional (skipped by releases without it).
SETTINGS = ["bind", "workers", "worker_class", "graceful_timeout", "keepalive", "timeout", "worker_connections",
            "loglevel", "accesslog", "errorlog", "proc_name", "preload_app", "child_exit", "worker_exit", "on_exit",
            "ssl_context", "certfile", "keyfile"]

#: Behaviours read from the frameworks' source: (object, text its source must contain, why).
BEHAVIOURS = [
    ("gunicorn.workers.base_async.AsyncWorker.handle", "with self.timeout_ctx():",
     "the head deadline and idle wait are timeout_ctx around reading each request"),
    ("gunicorn.workers.base_async.AsyncWorker.handle", "except StopIteration",
     "_CloseConnection (a StopIteration) ends a keep-alive connection quietly"),
    ("gunicorn.workers.base_async.AsyncWorker.handle", "listener.getsockname()",
     "the only use of the listener, replaced by _ListenerName (read at the accept)"),
    ("gunicorn.workers.base_async.AsyncWorker.handle", "self.handle_error(",
     "parse errors are answered by handle_error (JSON answers)"),
    ("gunicorn.workers.base_async.AsyncWorker.handle_request", "if not self.alive",
     "after SIGTERM an answered request closes its connection"),
    ("gunicorn.workers.base_async.AsyncWorker.handle_request", "resp.should_close()",
     "force_close() from the middleware makes gunicorn close after the answer"),
    ("gunicorn.workers.base.Worker.handle_exit", "self.alive = False",
     "SIGTERM's handler: WebhookWorker.handle_exit calls it, then wakes idle connections"),
    ("gunicorn.workers.base.Worker.init_signals", "signal.SIGTERM, self.handle_exit",
     "SIGTERM reaches handle_exit"),
    ("gunicorn.workers.ggevent.GeventWorker.run", "server.close()",
     "the listeners close after SIGTERM, accepted connections are still served"),
    ("gunicorn.workers.ggevent.GeventWorker.run", "ssl_context(self.cfg)",
     "the ssl_context hook builds the context gevent's server wraps accepted sockets with"),
    ("gunicorn.workers.ggevent.GeventWorker.run", "Pool(self.worker_connections)",
     "worker_connections bounds the connections of a worker (the idle limit counts against it)"),
    ("gunicorn.workers.ggevent.GeventWorker.handle", "super().handle(listener, client, addr)",
     "the gevent worker's handle passes the connection on to AsyncWorker.handle"),
    ("gunicorn.http.wsgi.default_environ", '"gunicorn.socket": sock',
     "the connection's socket in environ (the worker's middleware reads it; the app never does)"),
    ("gunicorn.http.wsgi.Response.start_response", "return self.write",
     "start_response is a bound method of the Response (its __self__ is the response)"),
    ("gunicorn.glogging.Logger.setup", "self.error_log",
     "the worker's log has error_log, a logging.Logger, where SocketTimeoutAsInfo is added"),
    ("gunicorn.http.message.Message.set_body_reader", "Body(ChunkedReader(self, self.unreader))",
     "a chunked body is a Body around a ChunkedReader of the request's unreader (the worker replaces it)"),
    ("gunicorn.http.body.Body.__init__", "self.reader = reader",
     "wsgi.input (a Body) reads through its reader attribute, which the worker replaces"),
    ("gunicorn.http.body.ChunkedReader.__init__", "self.parser = self.parse_chunked(unreader)",
     "the reader parses lazily (a generator): replaced before the first read, nothing is lost"),
    ("gunicorn.http.body.ChunkedReader.parse_chunked", "self.parse_chunk_size(unreader",
     "every chunk-size line goes through parse_chunk_size, which BoundedChunkedReader extends"),
    ("gunicorn.http.wsgi.default_environ", '"wsgi.input": req.body',
     "wsgi.input is the request's Body"),
    ("gevent.server.StreamServer", "wrap_socket",
     "gevent wraps accepted sockets with the context's wrap_socket (deferred handshake)"),
]


def resolve(dotted: str):
    """The object named ``dotted``: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("dotted", SURFACE)
def test_every_framework_name_used_exists(dotted):
    assert resolve(dotted) is not None


def test_every_gunicorn_setting_used_exists():
    from gunicorn.config import Config

    assert sorted(set(SETTINGS) - set(Config().settings)) == []


@pytest.mark.parametrize("dotted, text, why", BEHAVIOURS, ids=[f"{b[0].rsplit('.', 1)[-1]}:{b[1]}" for b in BEHAVIOURS])
def test_every_framework_behaviour_relied_on_holds(dotted, text, why):
    source = inspect.getsource(resolve(dotted))
    assert text in source, f"{dotted} no longer contains {text!r}: {why}"


def test_the_worker_is_a_gevent_worker_instance_attributes_included():
    """Instance attributes of gunicorn's Worker that WebhookWorker reads: alive, cfg, log, wsgi, pid."""
    from gunicorn.workers.base import Worker

    init = inspect.getsource(Worker.__init__)
    for attribute in ("self.alive", "self.cfg", "self.log", "self.pid"):
        assert attribute in init, attribute
    assert "self.wsgi = self.app.wsgi()" in inspect.getsource(Worker.load_wsgi)


def _framework_references(path: Path) -> set[str]:
    """Dotted framework names ``path`` uses: attribute chains on names imported from gunicorn or
    gevent (``gevent.hub.Waiter``, ``gunicorn_util.close`` → ``gunicorn.util.close``), the
    imported names themselves, and the methods of its classes that call ``super()``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("gunicorn", "gevent"):
                    aliases[(alias.asname or alias.name).split(".")[0]] = (alias.asname and alias.name) or alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("gunicorn", "gevent"):
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain: list[str] = []
            base: ast.expr = node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                found.add(".".join([aliases[base.id], *reversed(chain)]))
        elif isinstance(node, ast.Name) and node.id in aliases and aliases[node.id].count("."):
            found.add(aliases[node.id])
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and "super()" in ast.unparse(item):
                    found.add(f"super:{item.name}")
    return found


def test_the_list_is_complete():
    used = _framework_references(HTTP / "worker.py") | _framework_references(HTTP / "server.py")
    listed = set(SURFACE) | {f"super:{d.rsplit('.', 1)[-1]}" for d in SURFACE if d.startswith("gunicorn.workers.")}
    listed |= {f"super:{name}" for name in ("load_config", "load", "__init__", "parse_chunk_size")}
    # the module objects themselves, and their members reached through a listed class
    prefixes = ("gevent.hub", "gevent.threadpool", "gunicorn.http.errors", "gunicorn.util")
    unlisted = sorted(u for u in used if u not in listed and u not in prefixes
                      and not (u.startswith("gunicorn.http.errors.") and u.split(".")[-1] in ("__name__",)))
    assert unlisted == [], f"framework names used but not in SURFACE: {unlisted}"


def test_the_hub_loop_has_what_the_idle_wait_uses():
    """WebhookWorker._idle_wait / _make_room / handle_exit: the hub loop's io and timer watchers
    (start, stop, close), run_callback, and run_callback_threadsafe (from the SIGTERM handler)."""
    import gevent

    loop = gevent.get_hub().loop
    for name in ("io", "timer", "run_callback", "run_callback_threadsafe"):
        assert callable(getattr(loop, name)), name
    for watcher in (loop.io(0, 1), loop.timer(1.0)):
        for name in ("start", "stop", "close"):
            assert callable(getattr(watcher, name)), (watcher, name)
        watcher.close()
