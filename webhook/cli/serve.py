"""``segment-webhook serve``: run the admission webhook (HTTPS, gunicorn).

Every flag can also be set with ``SEGMENT_WEBHOOK_<FLAG>`` (:mod:`webhook.cli.flags`).

Topology source (first that applies):

1. ``--topology-file`` (repeatable; YAML stream or ``kind: List``) → a static catalog;
2. ``--kubeconfig`` given, or running in a pod (``KUBERNETES_SERVICE_HOST`` set) → a live catalog
   (list + watch of ``kai.scheduler/v1alpha1`` Topologies; each worker runs its own watch);
3. the embedded default topology ``cluster-topology`` (zone > block > rack > hostname).

Default topology: as :func:`webhook.cli.flags.static_topologies`; with a live catalog only
``--default-topology`` (its content is unknown at start).
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from webhook.cli.flags import (
    DEFAULT_CERT_DIR,
    UsageError,
    add_env_flag,
    add_target_flag,
    add_topology_flags,
    admission_settings,
    apply_env,
    bind_address,
    check_writable_directory,
    env_name,
    env_note,
    error,
    positive_int,
    seconds,
    static_topologies,
)

#: Why ``--threads`` is gone (it was accepted and ignored): serve runs gunicorn's gevent worker,
#: one greenlet per connection (:mod:`webhook.http.server`), so no thread count applies. The flag
#: is refused with this fix (exit 2); a leftover ``SEGMENT_WEBHOOK_THREADS`` only gets a notice, so
#: a rollout that still sets it starts.
THREADS_REMOVED = ("--threads was removed: serve runs gunicorn's gevent worker, one greenlet per connection, so "
                   "no thread count applies; remove it (--workers sets the processes)")


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


#: The fix of a serving pair that does not load (:func:`certificate_pair_problem`).
PAIR_FIX = ("fix: give a PEM certificate and the unencrypted private key it was issued for (as `segment-webhook "
            "certs --out DIR` writes them), or remove both and serve generates a pair")


def certificate_pair_problem(certfile: str, keyfile: str) -> str | None:
    """Why ``certfile`` and ``keyfile`` are not a serving pair, in words, with the fix: a file that
    cannot be read (the system's reason), a certificate that is not PEM, a key that is not PEM or is
    encrypted, a key that is not the certificate's. ``None`` when they read as a pair (then the TLS
    library's own message is all there is). The TLS library's words for most of these were its
    internals (``[SSL] PEM lib (_ssl.c:3905)``, ``[Errno 13] Permission denied``)."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    contents = {}
    for path in (certfile, keyfile):
        try:
            with open(path, "rb") as fh:
                contents[path] = fh.read()
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror or exc}; fix: make it readable by the user serve runs as"
    try:
        certificate = x509.load_pem_x509_certificates(contents[certfile])[0]
    except ValueError:
        return f"{certfile} is not a PEM certificate (-----BEGIN CERTIFICATE-----); {PAIR_FIX}"
    try:
        key = serialization.load_pem_private_key(contents[keyfile], password=None)
    except TypeError:  # the library's word for a key that needs a password
        return f"{keyfile} is an encrypted private key, and serve reads only unencrypted ones; {PAIR_FIX}"
    except (ValueError, UnsupportedAlgorithm):  # not PEM, or a key type the library does not know
        return f"{keyfile} is not a PEM private key (-----BEGIN PRIVATE KEY-----); {PAIR_FIX}"
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, public) != \
            certificate.public_key().public_bytes(serialization.Encoding.DER, public):
        return f"{keyfile} is not the private key of {certfile}; {PAIR_FIX}"
    return None


def _live_catalog_class() -> Any:
    try:
        from webhook.cluster.topology_cache import LiveTopologyCatalog
    except ImportError as exc:
        raise UsageError(f"the live Topology cache is not available ({exc}); use --topology-file") from None
    return LiveTopologyCatalog


def _check_cluster_configuration(kubeconfig: str | None) -> None:
    """Raise UsageError unless an API client can be built from ``kubeconfig`` (None: in-cluster).

    Checked in a child process (``python -m webhook.cluster.kubeconfig``) so that gunicorn's
    master never imports the kubernetes client: urllib3 imported before the fork keeps the ``ssl``
    classes gevent replaces in the workers, and the workers' Topology watch then failed every TLS
    request with RecursionError (webhook.cluster.kubeconfig.main; tests/process/test_serve_cli.py).
    """
    checked = subprocess.run([sys.executable, "-m", "webhook.cluster.kubeconfig", kubeconfig or ""],
                             capture_output=True, text=True, timeout=120)
    if checked.returncode != 0:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "in-cluster configuration"
        why = checked.stderr.strip().splitlines()[-1] if checked.stderr.strip() else f"exit {checked.returncode}"
        raise UsageError(f"{where}: cannot configure the Kubernetes client: {why}")


def _prepare_serve(args: argparse.Namespace) -> tuple[Callable[[], Any], Any]:
    """Check every input of ``serve`` and build (app factory, ServeOptions). Raises UsageError."""
    from webhook.http import certs
    from webhook.http.options import ServeOptions
    from webhook.http.tls import CertificateLoadError, CertificateReloader

    if args.threads is not None:
        raise UsageError(THREADS_REMOVED)
    if os.environ.get(env_name("--threads")):
        print(f"segment-webhook serve: {env_name('--threads')} is ignored: {THREADS_REMOVED.split(': ', 1)[1]}",
              file=sys.stderr)
    apply_env(args)
    live_config: tuple[str | None] | None = None
    if args.topology_file:
        catalog, default = static_topologies(args.topology_file, args.default_topology)
    elif args.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"):
        _check_cluster_configuration(args.kubeconfig)  # fail before forking: bad kubeconfig / no service account
        catalog, default = None, args.default_topology or None
        live_config = (args.kubeconfig,)
    else:
        catalog, default = static_topologies(None, args.default_topology)
    settings = admission_settings(args.platform_user, args.platform_group, default, args.gate_pods, args.segment_env,
                                  args.target, args.kueue_version)
    if live_config is not None:
        source = f"live from {'--kubeconfig ' + args.kubeconfig if args.kubeconfig else 'the in-cluster API server'}"
    else:
        source = f"{'--topology-file' if args.topology_file else 'embedded default'} ({', '.join(catalog.names())})"
    print(f"segment-webhook serve: topologies {source}; default topology {default or 'none'}; platform users "
          f"{sorted(settings.platform_users) or 'none'}, groups {sorted(settings.platform_groups) or 'none'}"
          f"{'; gang pods gated (--gate-pods)' if settings.gate_pods else ''}; target {settings.target}"
          f"{'; segment facts in the pod (--segment-env)' if settings.segment_env else ''}",
          file=sys.stderr)

    cert_dir = args.cert_dir
    present = [n for n in (certs.CERT_FILE, certs.KEY_FILE) if os.path.isfile(os.path.join(cert_dir, n))]
    if not present:
        check_writable_directory(
            cert_dir, "--cert-dir",
            f"the {certs.CERT_FILE}, {certs.KEY_FILE} and {certs.CA_FILE} serve generates when both are missing",
            f"set --cert-dir ({env_name('--cert-dir')}) to a directory serve can write, or to one that holds "
            f"{certs.CERT_FILE} and {certs.KEY_FILE}")
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
        problem = certificate_pair_problem(reloader.certfile, reloader.keyfile)
        if problem is None:  # the files read as a pair, yet the TLS library refused them: its words
            raise UsageError(f"--cert-dir: {exc}") from None
        raise UsageError(f"--cert-dir: cannot load the serving certificate {reloader.certfile} with key "
                         f"{reloader.keyfile}: {problem}") from None

    def app_factory() -> Any:
        from webhook.http.app import create_app

        worker_catalog = catalog
        if live_config is not None:
            worker_catalog = _live_catalog_class().from_kubeconfig(live_config[0])
            worker_catalog.start()
        return create_app(worker_catalog, settings, tls_ready=reloader.ready, read_timeout=args.read_timeout)

    options = ServeOptions(bind=args.bind, reloader=reloader, certfile=reloader.certfile, keyfile=reloader.keyfile,
                           workers=args.workers, read_timeout=args.read_timeout)
    return app_factory, options


def run(args: argparse.Namespace) -> int:
    """The ``serve`` command: serves until SIGTERM/SIGINT (exit 0); 2 for a bad flag or input."""
    from webhook.http import metrics, server

    try:
        app_factory, options = _prepare_serve(args)
        check_bindable(options.bind)
        metrics_dir, created = metrics.prepare_multiprocess_dir()
    except (UsageError, ValueError) as exc:
        return error("serve", exc)
    metrics.configure_review_log()

    def on_exit(arbiter: Any) -> None:
        if created:
            shutil.rmtree(metrics_dir, ignore_errors=True)

    options.extra["on_exit"] = on_exit
    server.run(app_factory, options)
    return 0


def register(subparsers: Any) -> None:
    """Add ``serve`` to the ``segment-webhook`` command line. The defaults of ``--bind``, ``--workers``
    and ``--read-timeout`` are :class:`webhook.http.server.ServeOptions`' own (their one home)."""
    from webhook.http.options import ServeOptions

    defaults = ServeOptions()
    serve = subparsers.add_parser(
        "serve",
        help="run the admission webhook (HTTPS, gunicorn)",
        description="Serve POST /mutate and /validate (AdmissionReview v1), GET /healthz, /readyz, /metrics over "
                    "TLS 1.2+. Topologies come from --topology-file, else from the cluster (--kubeconfig or "
                    "in-cluster), else the embedded default 'cluster-topology'. " + env_note("SEGMENT_WEBHOOK_CERT_DIR"),
    )
    add_env_flag(serve, "--bind", default=defaults.bind, type=bind_address, metavar="HOST:PORT",
                 help="address to listen on")
    add_env_flag(serve, "--cert-dir", default=DEFAULT_CERT_DIR, metavar="DIR",
                 help="directory with tls.crt and tls.key (generated with a CA when both are missing); "
                      "reloaded when the files change")
    add_topology_flags(serve, env=True)
    add_env_flag(serve, "--kubeconfig", metavar="PATH",
                 help="watch Topology objects of this cluster (in a pod: the in-cluster config is used without it)")
    add_env_flag(serve, "--gate-pods", default=False, switch=True,
                 help="hold gang pods back at CREATE with the scheduling gate segments.dev/placement and write "
                      "the gang size on workload templates, for `segment-webhook controller` (DESIGN.md §9)")
    add_target_flag(serve, env=True)
    add_env_flag(serve, "--segment-env", default=False, switch=True,
                 help="give every container of a segmented pod KAI_SEGMENT_INDEX (downward API on the "
                      "kai.scheduler/segment-index label) and KAI_SEGMENT_SIZE; names a container sets are "
                      "left alone (DESIGN.md §3b)")
    add_env_flag(serve, "--workers", default=defaults.workers, type=positive_int(64), metavar="N",
                 help="gunicorn worker processes, 1..64")
    serve.add_argument("--threads", dest="threads", default=None, help=argparse.SUPPRESS)  # THREADS_REMOVED
    add_env_flag(serve, "--read-timeout", default=defaults.read_timeout, type=seconds(0.1, 300), metavar="SECONDS",
                 help="deadline of a TLS handshake, of a request's line and headers once they started, and "
                      "of its body, and the longest wait of one write of an answer, 0.1..300; a body that "
                      "misses it is answered 408, a handshake or head is dropped; the connection is closed")
    serve.set_defaults(func=run)
