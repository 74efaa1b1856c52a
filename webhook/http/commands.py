"""The ``serve`` and ``certs`` sub-commands of ``segment-webhook``.

Every flag of these commands can also be set with an environment variable
``SEGMENT_WEBHOOK_<FLAG>`` (upper case, ``-`` → ``_``; e.g. ``--cert-dir`` →
``SEGMENT_WEBHOOK_CERT_DIR``); repeatable flags take a comma-separated list. A flag given on the
command line wins over its variable. Bad values exit with status 2 and a message naming the flag
or variable, before any worker is forked.

Topology source of ``serve`` (first that applies):

1. ``--topology-file`` (repeatable; YAML stream or ``kind: List``) → a static catalog;
2. ``--kubeconfig`` given, or running in a pod (``KUBERNETES_SERVICE_HOST`` set) → a live catalog
   (list + watch of ``kai.scheduler/v1alpha1`` Topologies; each worker runs its own watch);
3. the embedded default topology ``cluster-topology`` (zone > block > rack > hostname).

Default topology (automatic mode, DESIGN.md §6): ``--default-topology`` when given (with a static
catalog it must be one of the loaded names); else, when exactly one topology was loaded from files
or the embedded default, that one; else none (a live catalog's content is unknown at start).
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable

ENV_PREFIX = "SEGMENT_WEBHOOK_"
DEFAULT_BIND = "0.0.0.0:8443"
DEFAULT_CERT_DIR = "certs"
DEFAULT_WORKERS = 2
#: Threads per worker: a thread is held by a connection while its request is read, reviewed and
#: answered, so a slow client occupies one for up to --read-timeout; reviews take about a
#: millisecond of CPU, so more threads cost little (GIL-bound either way) and absorb slow clients.
DEFAULT_THREADS = 8
#: Seconds one blocking socket operation (TLS handshake, a read of the request, a write of the
#: answer) may wait: kube-apiserver gives a webhook call at most 30 s (timeoutSeconds, ours 5).
DEFAULT_READ_TIMEOUT = 10.0
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class UsageError(ValueError):
    """A bad flag or input file; the message names the flag (exit status 2)."""


def env_name(flag: str) -> str:
    """``--cert-dir`` → ``SEGMENT_WEBHOOK_CERT_DIR``."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


@dataclass(frozen=True)
class _EnvFlag:
    dest: str
    flag: str
    repeatable: bool
    convert: Callable[[str], Any]
    default: Any


def add_env_flag(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    help: str,
    default: Any = None,
    repeatable: bool = False,
    type: Callable[[str], Any] = str,
    metavar: str | None = None,
) -> None:
    """Add ``flag`` to ``parser`` with a ``SEGMENT_WEBHOOK_<FLAG>`` environment fallback.

    The value is resolved by :func:`apply_env` after parsing: command line, else the variable
    (comma-separated for ``repeatable``), else ``default``. ``type`` converts one value and raises
    ``argparse.ArgumentTypeError``/``ValueError`` with a message for a bad one.
    """
    env = env_name(flag)
    shown = f"; default {default}" if default not in (None, [], ()) else ""
    extra = f" [env {env}{', comma-separated' if repeatable else ''}{shown}]"
    dest = flag.lstrip("-").replace("-", "_")
    parser.add_argument(
        flag, dest=dest, action="append" if repeatable else "store", default=None,
        type=type, metavar=metavar, help=help + extra,
    )
    specs = parser.get_default("_env_flags") or []
    parser.set_defaults(_env_flags=specs + [_EnvFlag(dest, flag, repeatable, type, default)])


def apply_env(args: argparse.Namespace, environ: dict | None = None) -> argparse.Namespace:
    """Fill flags not given on the command line from their environment variables or defaults.

    Raises :class:`UsageError` naming the variable when its value does not convert.
    """
    environ = os.environ if environ is None else environ
    for spec in getattr(args, "_env_flags", None) or []:
        if getattr(args, spec.dest) is not None:
            continue
        env = env_name(spec.flag)
        raw = environ.get(env)
        if raw is None or raw == "":
            value = list(spec.default) if spec.repeatable and spec.default is not None else spec.default
            if spec.repeatable and value is None:
                value = []
        else:
            parts = [p.strip() for p in raw.split(",") if p.strip()] if spec.repeatable else [raw]
            try:
                converted = [spec.convert(p) for p in parts]
            except (argparse.ArgumentTypeError, ValueError) as exc:
                raise UsageError(f"{env}={raw!r}: {exc}") from None
            value = converted if spec.repeatable else converted[0]
        setattr(args, spec.dest, value)
    return args


def positive_int(limit: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from 1 to ``limit``."""

    def convert(text: str) -> int:
        try:
            value = int(str(text).strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not 1 <= value <= limit:
            raise argparse.ArgumentTypeError(f"{value} is out of range 1..{limit}")
        return value

    return convert


def seconds(low: float, high: float) -> Callable[[str], float]:
    """An argparse ``type``: a number of seconds from ``low`` to ``high`` (fractions allowed)."""

    def convert(text: str) -> float:
        try:
            value = float(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not low <= value <= high:  # also rejects nan
            raise argparse.ArgumentTypeError(f"{text} is out of range {low:g}..{high:g} seconds")
        return value

    return convert


def topology_name(text: str) -> str:
    """An argparse ``type``: a Topology name (a Kubernetes object name: lowercase DNS subdomain,
    at most 253 characters)."""
    if not (len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Topology name (a lowercase DNS subdomain, e.g. cluster-topology)")
    return text


def check_bindable(bind: str) -> None:
    """Raise :class:`UsageError` naming ``--bind`` when ``HOST:PORT`` cannot be bound now (in use,
    not a local address, a privileged port, a host that does not resolve). The check binds with
    ``SO_REUSEADDR`` like gunicorn, so a port left in TIME_WAIT is not reported."""
    host, _, port = bind.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--bind {bind}: cannot resolve {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc)).lower()
            raise UsageError(f"--bind {bind}: {reason}") from None


def bind_address(text: str) -> str:
    """An argparse ``type``: ``HOST:PORT`` with a port 1..65535 (IPv6 as ``[::]:8443``)."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. 0.0.0.0:8443, 127.0.0.1:9443, [::]:8443)")
    return text


def add_topology_flags(parser: argparse.ArgumentParser, *, env: bool) -> None:
    """The topology flags shared by ``serve`` and ``review``."""
    add = (lambda flag, **kw: add_env_flag(parser, flag, **kw)) if env else (
        lambda flag, **kw: parser.add_argument(
            flag, action="append" if kw.pop("repeatable", False) else "store",
            **{k: v for k, v in kw.items() if k != "default"}))
    add("--topology-file", repeatable=True, metavar="FILE",
        help="Topology objects (kai.scheduler/v1alpha1; YAML stream or List); repeatable")
    add("--default-topology", metavar="NAME", type=topology_name,
        help="topology used by automatic segment placement when a manifest names none "
             "(default: the only loaded topology, if exactly one)")
    add("--platform-user", repeatable=True, metavar="USER",
        help="request.userInfo.username of the platform; its PyTorchJobs get automatic segment placement; repeatable")
    add("--platform-group", repeatable=True, metavar="GROUP",
        help="request.userInfo group of the platform (as --platform-user); repeatable")


def static_topologies(files: list[str] | None, default_topology: str | None) -> tuple[Any, str | None]:
    """Load ``files`` (or the embedded default when none) into a static catalog and pick the
    default topology: ``default_topology`` if given (must be loaded), else the only loaded one.

    Returns ``(StaticTopologyCatalog, default name or None)``. Raises :class:`UsageError`
    naming the file or flag.
    """
    from webhook.core.topology import TopologyError, default_catalog, load_topology_files

    try:
        catalog = load_topology_files(files) if files else default_catalog()
    except TopologyError as exc:
        raise UsageError(f"--topology-file: {exc}") from None
    names = catalog.names()
    if files and not names:
        raise UsageError(f"--topology-file: no kai.scheduler/v1alpha1 Topology object in {', '.join(files)}")
    if default_topology:
        if default_topology not in names:
            raise UsageError(f"--default-topology {default_topology!r} is not a loaded topology; loaded: {', '.join(names)}")
        return catalog, default_topology
    return catalog, names[0] if len(names) == 1 else None


def admission_settings(users: list[str] | None, groups: list[str] | None, default_topology: str | None) -> Any:
    """``AdmissionSettings`` from the flag values (empty strings dropped)."""
    from webhook.core.decision import AdmissionSettings

    return AdmissionSettings(
        platform_users=frozenset(u for u in users or () if u),
        platform_groups=frozenset(g for g in groups or () if g),
        default_topology=default_topology or None,
    )


# --------------------------------------------------------------------------------------- certs

def _certs(args: argparse.Namespace) -> int:
    from webhook.http import certs

    try:
        apply_env(args)
        bundle = certs.generate(args.service, args.namespace, args.days)
        paths = certs.write_certificates(bundle, args.out)
    except (UsageError, certs.CertificateError) as exc:
        print(f"segment-webhook certs: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {paths['ca']}, {paths['cert']}, {paths['key']} (subjectAltNames: "
          f"{', '.join(bundle.dns_names + bundle.ip_addresses)}; valid {args.days} days)")
    return 0


# --------------------------------------------------------------------------------------- serve

def _live_catalog_class() -> Any:
    try:
        from webhook.cluster.topology_cache import LiveTopologyCatalog
    except ImportError as exc:
        raise UsageError(f"the live Topology cache is not available ({exc}); use --topology-file") from None
    return LiveTopologyCatalog


def _prepare_serve(args: argparse.Namespace) -> tuple[Callable[[], Any], Any]:
    """Check every input of ``serve`` and build (app factory, ServeOptions). Raises UsageError."""
    from webhook.http import certs
    from webhook.http.server import CertificateLoadError, CertificateReloader, ServeOptions

    apply_env(args)
    live_config: tuple[str | None] | None = None
    if args.topology_file:
        catalog, default = static_topologies(args.topology_file, args.default_topology)
    elif args.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"):
        live_cls = _live_catalog_class()
        try:  # fail before forking: bad kubeconfig / no service account
            live_cls.from_kubeconfig(args.kubeconfig)
        except Exception as exc:  # noqa: BLE001 - any config error is a usage error here
            where = f"--kubeconfig {args.kubeconfig}" if args.kubeconfig else "in-cluster configuration"
            raise UsageError(f"{where}: cannot configure the Kubernetes client: {exc}") from None
        catalog, default = None, args.default_topology or None
        live_config = (args.kubeconfig,)
    else:
        catalog, default = static_topologies(None, args.default_topology)
    settings = admission_settings(args.platform_user, args.platform_group, default)
    if live_config is not None:
        source = f"live from {'--kubeconfig ' + args.kubeconfig if args.kubeconfig else 'the in-cluster API server'}"
    else:
        source = f"{'--topology-file' if args.topology_file else 'embedded default'} ({', '.join(catalog.names())})"
    print(f"segment-webhook serve: topologies {source}; default topology {default or 'none'}; platform users "
          f"{sorted(settings.platform_users) or 'none'}, groups {sorted(settings.platform_groups) or 'none'}",
          file=sys.stderr)

    cert_dir = args.cert_dir
    present = [n for n in (certs.CERT_FILE, certs.KEY_FILE) if os.path.isfile(os.path.join(cert_dir, n))]
    if not present:
        try:
            paths = certs.write_certificates(certs.generate(), cert_dir)
        except certs.CertificateError as exc:
            raise UsageError(f"--cert-dir: {exc}") from None
        print(f"segment-webhook serve: no certificate in {cert_dir}; generated a CA and serving certificate "
              f"(caBundle: {paths['ca']})", file=sys.stderr)
    elif len(present) == 1:
        raise UsageError(f"--cert-dir {cert_dir}: has {present[0]} but not its pair; provide both tls.crt and tls.key "
                         "or neither (then they are generated)")
    reloader = CertificateReloader(os.path.join(cert_dir, certs.CERT_FILE), os.path.join(cert_dir, certs.KEY_FILE))
    try:
        reloader.load()
    except CertificateLoadError as exc:
        raise UsageError(f"--cert-dir: {exc}") from None

    def app_factory() -> Any:
        from webhook.http.app import create_app

        worker_catalog = catalog
        if live_config is not None:
            worker_catalog = _live_catalog_class().from_kubeconfig(live_config[0])
            worker_catalog.start()
        return create_app(worker_catalog, settings, tls_ready=reloader.ready, read_timeout=args.read_timeout)

    options = ServeOptions(bind=args.bind, reloader=reloader, certfile=reloader.certfile, keyfile=reloader.keyfile,
                           workers=args.workers, threads=args.threads, read_timeout=args.read_timeout)
    return app_factory, options


def _serve(args: argparse.Namespace) -> int:
    from webhook.http import metrics, server

    try:
        app_factory, options = _prepare_serve(args)
        check_bindable(options.bind)
        metrics_dir, created = metrics.prepare_multiprocess_dir()
    except (UsageError, ValueError) as exc:
        print(f"segment-webhook serve: error: {exc}", file=sys.stderr)
        return 2
    metrics.configure_review_log()

    def on_exit(arbiter: Any) -> None:
        if created:
            shutil.rmtree(metrics_dir, ignore_errors=True)

    options.extra["on_exit"] = on_exit
    server.run(app_factory, options)
    return 0


def register(subparsers: Any) -> None:
    """Add ``serve`` and ``certs`` to the ``segment-webhook`` command line."""
    def env_note(example: str) -> str:
        return (f"Every flag can also be set with SEGMENT_WEBHOOK_<FLAG> (e.g. {example}); "
                "repeatable flags take a comma-separated list; the command line wins.")

    serve = subparsers.add_parser(
        "serve",
        help="run the admission webhook (HTTPS, gunicorn)",
        description="Serve POST /mutate and /validate (AdmissionReview v1), GET /healthz, /readyz, /metrics over "
                    "TLS 1.2+. Topologies come from --topology-file, else from the cluster (--kubeconfig or "
                    "in-cluster), else the embedded default 'cluster-topology'. " + env_note("SEGMENT_WEBHOOK_CERT_DIR"),
    )
    add_env_flag(serve, "--bind", default=DEFAULT_BIND, type=bind_address, metavar="HOST:PORT",
                 help="address to listen on")
    add_env_flag(serve, "--cert-dir", default=DEFAULT_CERT_DIR, metavar="DIR",
                 help="directory with tls.crt and tls.key (generated with a CA when both are missing); "
                      "reloaded when the files change")
    add_topology_flags(serve, env=True)
    add_env_flag(serve, "--kubeconfig", metavar="PATH",
                 help="watch Topology objects of this cluster (in a pod: the in-cluster config is used without it)")
    add_env_flag(serve, "--workers", default=DEFAULT_WORKERS, type=positive_int(64), metavar="N",
                 help="gunicorn worker processes, 1..64")
    add_env_flag(serve, "--threads", default=DEFAULT_THREADS, type=positive_int(256), metavar="N",
                 help="threads per worker (gthread), 1..256; a slow client holds one for up to --read-timeout")
    add_env_flag(serve, "--read-timeout", default=DEFAULT_READ_TIMEOUT, type=seconds(0.1, 300), metavar="SECONDS",
                 help="longest wait of one TLS handshake, request read or answer write on a connection, "
                      "0.1..300; a client stalled longer is answered 408 (or dropped) and disconnected")
    serve.set_defaults(func=_serve)

    from webhook.http.certs import DEFAULT_DAYS, DEFAULT_NAMESPACE, DEFAULT_SERVICE

    certs_parser = subparsers.add_parser(
        "certs",
        help="generate a CA and the webhook's serving certificate",
        description="Write ca.crt (for the webhook configuration's caBundle), tls.crt and tls.key (0600) into "
                    "--out. The serving certificate covers NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local, "
                    "localhost and 127.0.0.1. " + env_note("SEGMENT_WEBHOOK_OUT"),
    )
    add_env_flag(certs_parser, "--out", default=DEFAULT_CERT_DIR, metavar="DIR", help="output directory")
    add_env_flag(certs_parser, "--service", default=DEFAULT_SERVICE, metavar="NAME", help="Service name")
    add_env_flag(certs_parser, "--namespace", default=DEFAULT_NAMESPACE, metavar="NS", help="Service namespace")
    add_env_flag(certs_parser, "--days", default=DEFAULT_DAYS, type=positive_int(3650), metavar="N",
                 help="validity of the CA and serving certificate in days, 1..3650")
    certs_parser.set_defaults(func=_certs)
