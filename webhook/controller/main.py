"""``segment-webhook controller``: the dry run (``--once --snapshot``) and the live controller.

The sub-command's flags are declared by the CLI module; this module does the work:

* :func:`run_once` reads ``kubectl get nodes,pods -A -o yaml|json`` dumps (and Topologies: from
  the dump, ``--topology-file``, else the embedded default, as ``place`` does), calls the same
  :func:`webhook.gating.decision.decide` as the live controller, and prints one YAML document
  per released pod ``{namespace, name, node, patch}`` and one per gang left gated
  ``{gang, waiting}``. Exit 0 when it ran, 2 on bad input: an unreadable file, or a malformed
  object in a dump (the live controller skips and logs those; the dry run names every one).
* :func:`run_live` builds the API client (kubeconfig, else in-cluster), serves the metrics, runs
  a :class:`webhook.controller.runner.Controller` until SIGTERM/SIGINT and gives the Lease up.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import yaml

from webhook.errors import EXIT_DENIED, SegmentWebhookError
from webhook.gating.decision import ParseCache, PassResult, decide
from webhook.kube.nodes import SnapshotError
from webhook.kube.pods import is_pod
from webhook.kube.segments_dev import GATE
from webhook.output import write_output
from webhook.planning.manifests import ManifestError, load_objects
from webhook.planning.snapshot import (
    build_snapshot,
    no_nodes_message,
    read_located,
    snapshot_problems,
    topologies_or_default,
)
from webhook.topology.objects import StaticTopologyCatalog, Topology, catalog_topologies

log = logging.getLogger(__name__)


def read_workloads(path: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``(location, object)`` pairs of the workload file ``path`` (``List`` items flattened;
    ``location`` is ``document N``), read by :mod:`webhook.planning.manifests` like every other command.
    Raises :class:`SnapshotError` naming the file when it cannot be read or parsed."""
    try:
        return load_objects(path)
    except ManifestError as exc:
        raise SnapshotError(str(exc)) from None


class WorkloadDenied(SegmentWebhookError):
    """A ``--workload`` the webhook denies (the message is the webhook's)."""

    exit_code = EXIT_DENIED


def dry_run(snapshot_paths: Sequence[str], topology_paths: Sequence[str] = (),
            default_topology: str | None = None, workload_paths: Sequence[str] = (),
            notes: list[str] | None = None) -> PassResult:
    """One pass of the controller on files (the same :func:`decide` as the live controller).

    Topologies: the dumps' and ``topology_paths``' Topology objects, else the embedded default
    (``cluster-topology``). ``default_topology``: for gangs whose pods name none (default: the
    only topology, when exactly one is known). ``workload_paths``: workload manifests whose pods
    are added as just created: expanded as their operator names them and admitted by the webhook
    with ``--gate-pods`` (the expansion of ``place``), so they arrive gated. Raises
    :class:`SnapshotError` on bad input (unreadable file, malformed Topology, a topology file
    without a Topology, no Node at all, an empty workload file, a workload that cannot be
    expanded) and :class:`WorkloadDenied` when the webhook denies one. ``notes``: when given, each
    name made from a workload's ``metadata.generateName`` is said there (one line each,
    :attr:`webhook.planning.expand.Expansion.name_note`).

    Unlike the live controller, which leaves a malformed object out of its pass and logs it (one
    bad object must not stop the placement of every gang), the dry run reads the dump as
    ``place --cluster`` does (:func:`webhook.planning.snapshot.build_snapshot`): a malformed
    Node, bound Pod or Topology, a node listed twice or two different Topologies of one name is
    bad input, every one named with its file, and nothing is planned on the rest of the cluster.
    """
    # the files as ``place`` reads them; each --topology-file must hold a Topology
    located = read_located(snapshot_paths, topology_paths)
    cache = ParseCache()  # the check's parses, so that decide() parses no object a second time
    checked = build_snapshot(located, parsed=cache)  # raises naming every malformed object
    objects = [obj for _, _, obj in located]
    topologies: dict[str, Topology] = {t.name: t for t in topologies_or_default(checked)}
    nodes = [o for o in objects if o.get("kind") == "Node"]
    if not nodes:
        raise SnapshotError(no_nodes_message(snapshot_paths))
    pods = [o for o in objects if is_pod(o)]
    if default_topology is None and len(topologies) == 1:
        default_topology = next(iter(topologies))
    catalog = StaticTopologyCatalog(list(topologies.values()))
    if workload_paths:
        from webhook.admission.config import AdmissionSettings
        from webhook.planning.expand import ExpandError, expand

        settings = AdmissionSettings(default_topology=default_topology, gate_pods=True)
        from webhook.admission.kinds.trainingruntime import split_runtimes

        workload_files = [(path, read_workloads(path)) for path in workload_paths]
        # as ``place -f``: a TrainJob's runtime may be in any -f file
        runtimes = split_runtimes([obj for _, located in workload_files for obj in located])[1]
        # as ``place -f``: an error names the document too when the files hold more than one object
        several = sum(len(workloads) for _, workloads in workload_files) > 1
        for path, workloads in workload_files:
            if not workloads:  # an empty file is bad input, as for ``place -f``
                raise SnapshotError(f"{path}: expected at least one workload object, found none")
            for location, workload in split_runtimes(workloads)[0]:
                source = f"{path}: {location}" if several else path
                try:
                    exp = expand(workload, catalog, settings, runtimes=runtimes)
                except ExpandError as exc:
                    raise SnapshotError(f"{source}: {exc}") from None
                if exp.name_note and notes is not None:
                    notes.append(exp.name_note)
                if exp.denied:
                    raise WorkloadDenied(f"{source}: denied by the webhook: {exp.message}")
                pods.extend(filter(is_pod, exp.pods))  # each of kind Pod (planning/expand.py)
    result = decide(nodes, pods, catalog_topologies(catalog), default_topology=default_topology,
                    cache=cache)
    if result.skipped:  # e.g. a pinned pod (released, not bound yet) with a bad request
        raise snapshot_problems(sorted(set(result.skipped)))
    return result


def advise_dry_run(snapshot_paths: Sequence[str], topology_paths: Sequence[str] = (),
                   default_topology: str | None = None, workload_paths: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``controller --once --advise``: the advisory controller's pass on files
    (:func:`webhook.controller.advisory.advice_documents`, the step the live advisory controller
    runs per gang). The dumps are read as ``place --cluster`` reads them (bound and pinned pods
    charged); the gangs' owners are the dumps' workload objects and the ``workload_paths``' ones.
    Raises :class:`SnapshotError` on bad input, as :func:`dry_run`: also a ``workload_paths``
    object ``place -f`` could not expand (another kind, a bad quantity); one the webhook denies is
    advised (its gangs get the ``denied`` verdict, as live)."""
    from webhook.admission.kinds.trainingruntime import split_runtimes
    from webhook.controller.advisory import admission_target, advice_documents
    from webhook.placement.model import PlacementError
    from webhook.planning.expand import ExpandError
    from webhook.planning.freeing import read_occupants
    from webhook.planning.whatif import planner_for

    located = read_located(snapshot_paths, topology_paths)
    snapshot = build_snapshot(located)
    if not snapshot.nodes:
        raise SnapshotError(no_nodes_message(snapshot_paths))
    objects = [obj for _, _, obj in located]
    given = [(path, location, obj) for path in workload_paths for location, obj in read_workloads(path)]
    objects += [obj for _, _, obj in given]
    workloads, runtimes = split_runtimes(objects)
    given_runtimes = split_runtimes([obj for _, _, obj in given])[1]
    for path, location, obj in given:
        if is_pod(obj) or any(obj is runtime for runtime in given_runtimes):
            continue
        try:  # a -f file is bad input when place -f could not expand it either (a denial is advised)
            planner_for(snapshot, default_topology=default_topology, runtimes=runtimes,
                        target=admission_target(obj)).expand_all(dict(obj))
        except (ExpandError, PlacementError) as exc:
            source = f"{path}: {location}" if len(given) > 1 else path
            raise SnapshotError(f"{source}: {exc}") from None
    pods = [o for o in objects if is_pod(o)]
    return advice_documents(pods, workloads, snapshot,
                            read_occupants(objects), default_topology, runtimes)


def documents(result: PassResult) -> list[dict[str, Any]]:
    """The dry run's output documents: released pods, then gangs left gated."""
    docs: list[dict[str, Any]] = [{"namespace": r.namespace, "name": r.name, "node": r.node, "patch": r.patch}
                        for r in result.releases]
    docs.extend({"gang": w.gang, "waiting": w.reason} for w in result.waiting)
    return docs


def once_summary(result: PassResult) -> str:
    """The one line ``controller --once`` says on stderr after its documents, so a pass that
    releases nothing is not silent: ``controller --once: released 8 pods of 1 gang; 1 gang left
    gated`` or ``controller --once: no gated gang in the snapshot, nothing to release``."""
    def count(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    if not result.releases and not result.waiting:
        return ("controller --once: no gated gang in the snapshot, nothing to release (pods the webhook gated carry "
                f"spec.schedulingGates[{GATE}])")
    gangs = len({p.gang for p in result.placed})
    return (f"controller --once: released {count(len(result.releases), 'pod')} of {count(gangs, 'gang')}; "
            f"{count(len(result.waiting), 'gang')} left gated")


def run_once(snapshot_paths: Sequence[str], topology_paths: Sequence[str], default_topology: str | None,
             output: str, workload_paths: Sequence[str] = (), out: TextIO | None = None,
             err: TextIO | None = None, advise: bool = False) -> int:
    """The ``--once`` command: print the documents (``output``: ``yaml`` or ``json``); exit 0 when
    it ran, 1 when the webhook denies a ``--workload``, 2 on bad input (message on ``err`` with
    the ``segment-webhook controller: error:`` prefix the other sub-commands use). ``advise``: the
    advisory controller's pass instead (:func:`advise_dry_run`), one document per pending gang."""
    out = out or sys.stdout  # looked up at call time, so a caller's redirection of sys.stdout holds
    err = err or sys.stderr
    notes: list[str] = []
    if advise:
        try:
            docs = advise_dry_run(snapshot_paths, topology_paths, default_topology, workload_paths)
        except SnapshotError as exc:
            print(f"segment-webhook controller: error: {exc}", file=err)
            return 2
        text = json.dumps(docs, indent=2) + "\n" if output == "json" else \
            (yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True) if docs else "")
        written = write_output(text, "controller", out)
        if not written:
            print(f"controller --once --advise: {len(docs)} pending gang{'' if len(docs) == 1 else 's'} "
                  "(pods held by a Kueue gate or PodScheduled=False)", file=err)
        return written
    try:
        result = dry_run(snapshot_paths, topology_paths, default_topology, workload_paths, notes)
    except SnapshotError as exc:
        print(f"segment-webhook controller: error: {exc}", file=err)
        return 2
    except WorkloadDenied as exc:
        print(f"segment-webhook controller: {exc}", file=err)
        return 1
    finally:
        for note in notes:
            print(f"Warning: {note}", file=err)
    docs = documents(result)
    if output == "json":
        text = json.dumps(docs, indent=2) + "\n"
    else:
        text = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True) if docs else ""
    written = write_output(text, "controller", out)
    if not written:  # after the documents, on stderr: stdout holds only the documents
        print(once_summary(result), file=err)
    return written


def default_identity() -> str:
    """This process's Lease identity: ``$POD_NAME`` (downward API), else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()


def run_live(*, kubeconfig: str | None, settings: Any, metrics_port: int, metrics_address: str = "0.0.0.0") -> int:
    """Run the controller until SIGTERM/SIGINT; exit 0 after a clean stop, 2 when the
    configuration cannot be loaded."""
    from prometheus_client import start_http_server

    from webhook.cluster.kubeconfig import api_client_from_kubeconfig
    from webhook.controller.runner import Controller

    try:
        settings.check()
        api_client = api_client_from_kubeconfig(kubeconfig)
    except ValueError as exc:
        print(f"segment-webhook controller: error: {exc}", file=sys.stderr)
        return 2
    api_client.user_agent = f"segment-webhook-controller/{settings.identity}"
    if settings.advise:
        from webhook.controller.advisor import AdvisoryController

        controller: Controller = AdvisoryController(api_client, settings)
    else:
        controller = Controller(api_client, settings)
    if metrics_port:
        start_http_server(metrics_port, addr=metrics_address, registry=controller.metrics.registry)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    controller.start()
    log.info("controller %s started (Lease %s/%s)", settings.identity, settings.lease_namespace, settings.lease_name)
    done.wait()
    controller.stop()
    return 0
