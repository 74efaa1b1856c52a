"""Flags, converters and environment handling shared by the ``segment-webhook`` sub-commands.

Flags added with :func:`add_env_flag` (``serve``, ``certs``) can also be set with an environment
variable ``SEGMENT_WEBHOOK_<FLAG>`` (upper case, ``-`` → ``_``; e.g. ``--cert-dir`` →
``SEGMENT_WEBHOOK_CERT_DIR``); repeatable flags take a comma-separated list. A flag given on the
command line wins over its variable. Bad values exit with status 2 and a message naming the flag
or variable, before any worker is forked.

Default topology (automatic mode, DESIGN.md §6), :func:`static_topologies`: ``--default-topology``
when given (with a static catalog it must be one of the loaded names); else, when exactly one
topology was loaded from files or the embedded default, that one; else none.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.errors import EXIT_USAGE, SegmentWebhookError
from webhook.kube.core import is_dns_subdomain

ENV_PREFIX = "SEGMENT_WEBHOOK_"
DEFAULT_CERT_DIR = "certs"


class UsageError(SegmentWebhookError, ValueError):
    """A bad flag or input file; the message names the flag (exit status 2)."""


def error(command: str, problem: str | Exception) -> int:
    """Print ``segment-webhook <command>: error: <problem>`` to stderr and return the exit status:
    the error's own :attr:`~webhook.errors.SegmentWebhookError.exit_code`, or
    :data:`~webhook.errors.EXIT_USAGE` (2) for a message."""
    print(f"segment-webhook {command}: error: {problem}", file=sys.stderr)
    return problem.exit_code if isinstance(problem, SegmentWebhookError) else EXIT_USAGE


def env_note(example: str) -> str:
    """The sentence on ``SEGMENT_WEBHOOK_*`` variables that ends a sub-command's description."""
    return (f"Every flag can also be set with SEGMENT_WEBHOOK_<FLAG> (e.g. {example}); "
            "repeatable flags take a comma-separated list; the command line wins.")


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
    switch: bool = False,
) -> None:
    """Add ``flag`` to ``parser`` with a ``SEGMENT_WEBHOOK_<FLAG>`` environment fallback.

    The value is resolved by :func:`apply_env` after parsing: command line, else the variable
    (comma-separated for ``repeatable``), else ``default``. ``type`` converts one value and raises
    ``argparse.ArgumentTypeError``/``ValueError`` with a message for a bad one. ``switch``: a flag
    without a value (``--gate-pods``) whose variable is read with :func:`boolean`.
    """
    env = env_name(flag)
    shown = f"; default {default}" if default not in (None, [], ()) else ""
    extra = f" [env {env}{', comma-separated' if repeatable else ''}{shown}]"
    dest = flag.lstrip("-").replace("-", "_")
    if switch:
        type = boolean
        parser.add_argument(flag, dest=dest, action="store_const", const=True, default=None, help=help + extra)
    else:
        parser.add_argument(
            flag, dest=dest, action="append" if repeatable else "store", default=None,
            type=type, metavar=metavar, help=help + extra,
        )
    specs = parser.get_default("_env_flags") or []
    parser.set_defaults(_env_flags=specs + [_EnvFlag(dest, flag, repeatable, type, default)])


def apply_env(args: argparse.Namespace, environ: Mapping[str, Any] | None = None) -> argparse.Namespace:
    """Fill flags not given on the command line from their environment variables or defaults.

    Raises :class:`UsageError` naming the variable when its value does not convert.
    """
    variables = os.environ if environ is None else environ
    for spec in getattr(args, "_env_flags", None) or []:
        if getattr(args, spec.dest) is not None:
            continue
        env = env_name(spec.flag)
        raw = variables.get(env)
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


def boolean(text: str) -> bool:
    """A ``SEGMENT_WEBHOOK_*`` value of a switch: ``true``/``1``/``yes``/``on`` or
    ``false``/``0``/``no``/``off`` (any case)."""
    value = str(text).strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


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
    if not is_dns_subdomain(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Topology name (a lowercase DNS subdomain, e.g. cluster-topology)")
    return text


def bind_address(text: str) -> str:
    """An argparse ``type``: ``HOST:PORT`` with a port 1..65535 (IPv6 as ``[::]:8443``)."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. 0.0.0.0:8443, 127.0.0.1:9443, [::]:8443)")
    if not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: port {int(port)} is outside the TCP port range 1-65535 "
                                         "(e.g. 0.0.0.0:8443)")
    return text


def check_not_a_file(directory: str, flag: str, writes: str, fix: str) -> None:
    """Raise :class:`UsageError` (``<flag> <directory>: is a file, not a directory (it would hold
    <writes>); fix: <fix>``) when ``directory`` exists and is not a directory. Changes nothing: the
    check a command makes before it reads the directory (``certs`` reads the CA kept there)."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"{flag} {directory}: is a file, not a directory (it would hold {writes}); fix: {fix}")


def check_writable_directory(directory: str, flag: str, writes: str, fix: str) -> None:
    """Check, before anything is written, that files can be created in ``directory`` (the value
    of ``flag``): it is created when missing (mode 0700, as :func:`webhook.http.certs.write_certificates`
    does), then a temporary file is created in it and removed. ``writes`` says what the command
    writes there (``tls.crt, tls.key and ca.crt``), ``fix`` what to do instead.

    Raises :class:`UsageError` naming the flag and directory, what was tried, the system's reason
    and the fix: ``--cert-dir /proc/1: cannot create a file in /proc/1 (serve writes tls.crt ...
    there): No such file or directory (...); fix: ...``. Without this check the writer's own error
    said only ``cannot write certificates to '/proc/1': No such file or directory``."""
    check_not_a_file(directory, flag, writes, fix)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {directory}: cannot create the directory (it would hold {writes}): "
                         f"{exc.strerror or exc}; fix: {fix}") from None
    try:
        handle, probe = tempfile.mkstemp(prefix=".segment-webhook-write-check.", dir=directory)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        # /proc and /sys answer "No such file or directory" for a directory that exists
        why = (" (the directory exists, but its file system takes no new files, as /proc and /sys)"
               if exc.errno == errno.ENOENT else "")
        raise UsageError(f"{flag} {directory}: cannot create a file in the directory (it would hold {writes}): "
                         f"{exc.strerror or exc}{why}; fix: {fix}") from None


def check_writable_file(path: str, flag: str, fix: str) -> None:
    """Check, before the work whose result goes to ``path`` (the value of ``flag``), that the file
    can be written: an existing file is opened for appending (its content unchanged), a missing
    one is created and removed again. Raises :class:`UsageError` naming the flag and file, the
    system's reason and ``fix``: ``--svg /no/dir/x.svg: cannot write: No such file or directory;
    fix: ...``. Without this check ``place`` printed the whole placement, then the error."""
    try:
        if os.path.exists(path):
            if os.path.isdir(path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            with open(path, "ab"):
                pass
        else:
            with open(path, "xb"):
                pass
            os.unlink(path)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write: {exc.strerror or exc}; fix: {fix}") from None


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
    from webhook.planning.manifests import ManifestError, load_topology_files
    from webhook.topology.objects import TopologyError, default_catalog

    try:
        catalog = load_topology_files(files) if files else default_catalog()
    except (ManifestError, TopologyError) as exc:
        raise UsageError(f"--topology-file: {exc}") from None
    names = catalog.names()
    if files and not names:
        from webhook.planning.snapshot import no_topology_message

        raise UsageError(no_topology_message(", ".join(files)))
    if default_topology:
        if default_topology not in names:
            raise UsageError(f"--default-topology {default_topology!r} is not a loaded topology; loaded: {', '.join(names)}")
        return catalog, default_topology
    return catalog, names[0] if len(names) == 1 else None


def admission_settings(users: list[str] | None, groups: list[str] | None, default_topology: str | None,
                       gate_pods: bool = False, segment_env: bool = False, target: str = "kai",
                       kueue: tuple[int, int] | str = (0, 17)) -> Any:
    """``AdmissionSettings`` from the flag values (empty strings dropped); ``gate_pods``:
    ``--gate-pods`` (DESIGN.md §9); ``segment_env``: ``--segment-env`` (DESIGN.md §3b); ``target``:
    ``--target`` (DESIGN.md §9b; ``gate`` turns ``--gate-pods`` on); ``kueue``: ``--kueue-version``."""
    from webhook.admission.config import AdmissionSettings

    return AdmissionSettings(
        target=target,
        platform_users=frozenset(u for u in users or () if u),
        platform_groups=frozenset(g for g in groups or () if g),
        default_topology=default_topology or None,
        gate_pods=bool(gate_pods) or target == "gate",
        segment_env=bool(segment_env),
        kueue_version=kueue_version(kueue),
    )


def add_target_flag(parser: argparse.ArgumentParser, env: bool = False) -> None:
    """``--target`` (DESIGN.md §9b): the scheduler the segments are compiled for, unless a workload's
    ``segments.dev/target`` label names another (docs/concepts/targets.md)."""
    from webhook.admission.targets import TARGETS

    text = ("the scheduler segments are compiled for when a workload has no segments.dev/target label: kai "
            "(kai.scheduler/* keys), kueue (Kueue TAS podset annotations), workload-api (Kubernetes 1.37 "
            "Workload/PodGroup objects), gate (segments.dev/placement gate + controller; = --gate-pods)")

    def target_name(value: str) -> str:
        if value not in TARGETS:
            raise argparse.ArgumentTypeError(f"{value!r} is not a target; choose one of {', '.join(TARGETS)}")
        return value

    if env:
        add_env_flag(parser, "--target", default="kai", type=target_name, metavar="TARGET", help=text)
    else:
        parser.add_argument("--target", default="kai", type=target_name, metavar="TARGET", help=text + " (default kai)")
    version_text = ("the Kueue version that reads the kueue target's annotations, MAJOR.MINOR (e.g. 0.20): before "
                    "0.20 a partial last segment is denied (its pods would stay gated), from 0.20 Kueue places it "
                    "(TASPartialSlices)")
    if env:
        add_env_flag(parser, "--kueue-version", default="0.17", type=kueue_version, metavar="VERSION", help=version_text)
    else:
        parser.add_argument("--kueue-version", default=kueue_version("0.17"), type=kueue_version, metavar="VERSION",
                            help=version_text + " (default 0.17)")


def kueue_version(value: str | tuple[int, int]) -> tuple[int, int]:
    """``--kueue-version``: ``0.20``, ``v0.20`` or ``0.20.1`` as ``(0, 20)`` (the patch is ignored:
    Kueue changes defaults in minor releases). Raises ``argparse.ArgumentTypeError`` otherwise."""
    if isinstance(value, tuple):
        return value
    parts = value.strip().removeprefix("v").split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and p.isascii() and len(p) <= 6 for p in parts):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Kueue version; write MAJOR.MINOR, e.g. 0.17 or 0.20")
    return int(parts[0]), int(parts[1])
