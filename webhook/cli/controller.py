"""``segment-webhook controller``: the gang ungater (DESIGN.md §9), live or as a dry run.

* ``--once --snapshot DUMP [--snapshot ...] [--topology-file F] [--workload W] -o yaml|json``:
  one pass of the controller's decision on ``kubectl get nodes,pods -A -o yaml`` dumps; prints
  one document per released pod ``{namespace, name, node, patch}`` and one per gang left gated
  ``{gang, waiting}``. Exit 0 when it ran, 1 when the webhook denies a ``--workload``, 2 on bad
  input.
* ``--advise`` (DESIGN.md §13): the advisory controller: no gate, no binding, no pod patch; for
  each gang another scheduler leaves pending, what ``place --what-if`` says, as an Event and
  ``segments.dev/gang-state`` on its top owner (:mod:`webhook.controller.advisor`); with ``--once``
  one document per pending gang of the dumps (their owners: the dumps' workloads and ``-f``).
* Without ``--once``: the live controller (informers, Lease, patches, Events, metrics on
  ``--metrics-port``) until SIGTERM. Its flags can also be set with ``SEGMENT_WEBHOOK_<FLAG>``.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from webhook.cli.flags import UsageError, add_env_flag, apply_env, env_note, error, positive_int, topology_name
from webhook.controller.settings import (
    DEFAULT_ADVISOR_LEASE_NAME,
    DEFAULT_LEASE_NAME,
    DEFAULT_LEASE_NAMESPACE,
    ControllerSettings,
    default_lease_namespace,
)

_DEFAULTS = ControllerSettings(identity="")  # the one home of the defaults (webhook/controller/settings.py)


def _port(text: str) -> int:
    try:
        value = int(str(text).strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range 0..65535 (0 = no metrics server)")
    return value


def _log_level(text: str) -> str:
    value = str(text).strip().lower()
    if value not in ("debug", "info", "warning", "error"):
        raise argparse.ArgumentTypeError(f"{text!r} is not one of debug, info, warning, error")
    return value


#: The variable that puts prometheus_client in multiprocess mode (values in files of that directory).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def single_process_metrics() -> None:
    """Drop ``PROMETHEUS_MULTIPROC_DIR`` from this process's environment, before prometheus_client
    is first imported. The image sets it for ``serve`` (gunicorn's workers share their metrics
    through files there, an emptyDir of the webhook's pod); the controller is one process with a
    registry of its own, and its pod mounts nothing there: with the variable set, prometheus_client
    (which checks only that the variable exists) wrote its values under the read-only root
    filesystem and the controller exited with ``OSError: [Errno 30] Read-only file system:
    '/var/run/segment-webhook/metrics/counter_1.db'`` (the chart on a real kubelet, issue 35)."""
    os.environ.pop(MULTIPROC_ENV, None)


def run(args: argparse.Namespace) -> int:
    """The ``controller`` command (see the module docstring for exit codes)."""
    single_process_metrics()
    try:
        apply_env(args)
    except UsageError as exc:
        return error("controller", str(exc))
    if args.once:
        from webhook.controller.main import run_once

        if not args.snapshot:
            return error("controller", "--once needs --snapshot DUMP (kubectl get nodes,pods -A -o yaml)")
        return run_once(args.snapshot, args.topology_file or [], args.default_topology, args.output,
                        workload_paths=args.workload or [], advise=args.advise)
    if args.snapshot or args.workload:
        return error("controller", "--snapshot and --workload are only used with --once")
    from webhook.controller.main import default_identity, run_live

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ControllerSettings(
        identity=args.identity or default_identity(),
        lease_name=DEFAULT_ADVISOR_LEASE_NAME if args.advise and args.lease_name == DEFAULT_LEASE_NAME else args.lease_name,
        lease_namespace=args.lease_namespace or default_lease_namespace(),
        lease_duration=args.lease_duration, renew_deadline=args.renew_deadline, retry_period=args.retry_period,
        default_topology=args.default_topology, advise=args.advise,
    )
    return run_live(kubeconfig=args.kubeconfig, settings=settings, metrics_port=args.metrics_port)


def register(subparsers: Any) -> None:
    """Add ``controller`` to the ``segment-webhook`` command line."""
    p = subparsers.add_parser(
        "controller",
        help="place gated gangs with the engine and release them to kube-scheduler (DESIGN.md §9)",
        description="Watch pods, nodes and Topologies; when every pod of a gang exists and carries the "
                    "segments.dev/placement scheduling gate, place the gang with the placement engine and send, "
                    "per pod, one JSON patch that removes the gate and adds nodeSelector[kubernetes.io/hostname]. "
                    "One active replica (a coordination.k8s.io Lease). With --once --snapshot: the same decision on "
                    "a kubectl dump, printed as YAML, no cluster needed. " + env_note("SEGMENT_WEBHOOK_METRICS_PORT"),
    )
    p.add_argument("--once", action="store_true", help="one pass on --snapshot files; print the patches and exit")
    p.add_argument("--advise", action="store_true",
                   help="advisory mode (DESIGN.md §13): no gate, no binding, no pod patch; for each gang another "
                        "scheduler (Kueue, the Workload API, KAI) leaves pending, write what place --what-if says on "
                        "the same snapshot as an Event and segments.dev/gang-state on its top owner (with --once: "
                        "print them)")
    p.add_argument("--snapshot", action="append", default=[], metavar="DUMP",
                   help="with --once: kubectl get nodes,pods -A -o yaml|json output (repeatable)")
    p.add_argument("--topology-file", action="append", default=[], metavar="FILE",
                   help="with --once: extra Topology objects (repeatable; default: the dump's, else the embedded one)")
    p.add_argument("-f", "--workload", action="append", default=[], metavar="FILE",
                   help="with --once: add the pods this workload would create, admitted with --gate-pods (repeatable); "
                        "with --once --advise: a pending gang's owner workload")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="with --once: output format")
    add_env_flag(p, "--default-topology", metavar="NAME", type=topology_name,
                 help="topology of gangs whose pods name none (with --once: default the only one loaded)")
    add_env_flag(p, "--kubeconfig", metavar="PATH", help="kubeconfig (default: the in-cluster service account)")
    add_env_flag(p, "--identity", metavar="NAME", help="this replica's name in the Lease (default $POD_NAME, else the host name)")
    add_env_flag(p, "--lease-name", default=_DEFAULTS.lease_name, metavar="NAME",
                 help=f"coordination.k8s.io Lease name (with --advise: {DEFAULT_ADVISOR_LEASE_NAME} unless set)")
    add_env_flag(p, "--lease-namespace", metavar="NS",
                 help=f"namespace of the Lease (default $POD_NAMESPACE, else {DEFAULT_LEASE_NAMESPACE})")
    add_env_flag(p, "--lease-duration", default=_DEFAULTS.lease_duration, type=positive_int(3600), metavar="SECONDS",
                 help="seconds a Lease holds without renewal (> --renew-deadline)")
    add_env_flag(p, "--renew-deadline", default=_DEFAULTS.renew_deadline, type=positive_int(3600), metavar="SECONDS",
                 help="seconds the leader keeps trying to renew (> 1.2 x --retry-period)")
    add_env_flag(p, "--retry-period", default=_DEFAULTS.retry_period, type=positive_int(600), metavar="SECONDS",
                 help="seconds between Lease attempts")
    add_env_flag(p, "--metrics-port", default=9090, type=_port, metavar="PORT",
                 help="Prometheus /metrics over HTTP on this port, 0 = off")
    add_env_flag(p, "--log-level", default="info", type=_log_level, metavar="LEVEL",
                 help="debug, info, warning or error")
    p.set_defaults(func=run)

