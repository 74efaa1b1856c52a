"""``segment-webhook review``: offline dry run of the admission webhook on a manifest file.

Builds the AdmissionReview v1 that kube-apiserver would send for ``kubectl create -f MANIFEST``
(or a replace, with ``--operation UPDATE --old OLD``) and answers it through
``webhook.http.envelope.handle``, the code path of ``POST /mutate``.

The request is built by :func:`webhook.admission.request.build_review`, the project's one request
builder (its docstring lists the fields). ``userInfo.username`` = ``--user`` (default
``kubectl-user``, not a platform identity, so automatic segment placement does not apply unless
it matches ``--platform-user``); ``userInfo.groups`` = ``--group`` values plus
``system:authenticated``. Denials name the webhook as deploy/ registers it
(``workloads.segment-webhook.segments.dev`` for workloads, ``pods.segment-webhook.segments.dev``
for pods); a kind the webhook does not handle gets a note on stderr (the deployed webhook never
sees it).

Output: ``-o json`` (default) prints the AdmissionReview v1 response (a ``kind: List`` of them
for a multi-document manifest); ``-o yaml`` prints the object(s) with the patch applied
(``jsonpatch``). Warnings go to stderr as ``Warning: ...`` (like kubectl). Exit status: 0 all
allowed, 1 any denied (stderr carries kubectl's denial line), 2 bad usage or unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from webhook.admission.request import DEFAULT_USER, build_review, group_version_kind, manifest_problem
from webhook.cli.flags import (
    UsageError,
    add_target_flag,
    add_topology_flags,
    admission_settings,
    error,
    static_topologies,
)
from webhook.cli.output import write_output
from webhook.planning.manifests import NESTED_TOO_DEEPLY, ManifestError, deeper_than, load_objects, object_source
from webhook.text.messages import closest

#: The webhook names of deploy/base/webhooks.yaml (tests/unit/cli/test_review_cli.py checks them).
WORKLOADS_WEBHOOK = "workloads.segment-webhook.segments.dev"
PODS_WEBHOOK = "pods.segment-webhook.segments.dev"

#: Deepest nesting of a reviewed object: PyYAML's pure-Python loader, which ``review`` used
#: before the libyaml reader, stopped at about 450 levels; real objects nest about 20.
MAX_NESTING = 400

_VERBS = {"CREATE": "creating", "UPDATE": "replacing"}


#: The message for a manifest file without any object (empty, only comments or ``---``).
NO_OBJECT = ("no Kubernetes object found; fix: give a file with at least one object (apiVersion, kind, metadata); "
             "is it empty, or only comments and ---?")


def read_objects(path: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The Kubernetes objects of a YAML/JSON file (``-`` = stdin) to review, read by
    :mod:`webhook.planning.manifests` (``kind: List`` items expanded, empty documents skipped), each with
    where it was read (:func:`webhook.planning.manifests.object_source`: ``multi.yaml: document 2`` when
    the file holds more than one object, else the file name); each needs ``apiVersion`` and
    ``kind`` and may nest at most :data:`MAX_NESTING` levels. Raises :class:`ManifestError` naming
    the file and document."""
    located = load_objects(path)
    objects: list[tuple[str, Mapping[str, Any]]] = []
    for here, obj in located:
        if deeper_than(obj, MAX_NESTING):
            raise ManifestError(path, NESTED_TOO_DEEPLY)
        problem = manifest_problem(obj)
        if problem is not None:
            raise ManifestError(path, f"{here}: {problem}")
        objects.append((object_source(path, here, len(located)), obj))
    if not objects:
        raise ManifestError(path, NO_OBJECT)
    return objects


def webhook_name(kind: str) -> str:
    """The deployed webhook that reviews ``kind``: pods, or workloads."""
    return PODS_WEBHOOK if kind == "Pod" else WORKLOADS_WEBHOOK


def denial_line(path: str, operation: str, reason: str, message: str, kind: str = "") -> str:
    """kubectl's rendering of a webhook denial whose status has ``reason`` (e.g. ``Forbidden``):
    ``Error from server (Forbidden): error when creating "job.yaml": admission webhook
    "workloads.segment-webhook.segments.dev" denied the request: ...``."""
    verb = _VERBS.get(operation, "creating")
    return (f'Error from server ({reason}): error when {verb} "{path}": admission webhook '
            f'"{webhook_name(kind)}" denied the request: {message}')


def close_kind(kind: str) -> str | None:
    """The handled kind ``kind`` is close to (:func:`webhook.text.messages.closest`), named as
    :func:`handled_kinds` names it (``PyTorchJob (kubeflow.org)``), or ``None``."""
    from webhook.admission.kinds import handled_kinds

    by_name = {entry.partition(" (")[0]: entry for entry in handled_kinds()}
    match = closest(kind, by_name)
    return by_name[match] if match is not None else None


def unhandled_kind_note(obj: Mapping[str, Any]) -> str | None:
    """A note for an object whose kind the webhook does not handle (``None`` when it does), with a
    "did you mean" for a kind close to a handled one (:func:`close_kind`)."""
    from webhook.admission.kinds import handled_kinds, handles

    gvk = group_version_kind(obj)
    if handles(gvk["group"], gvk["kind"]):
        return None
    suggestion = close_kind(gvk["kind"])
    hint = f"; did you mean {suggestion}?" if suggestion is not None else ""
    return (f"{obj.get('apiVersion')} {gvk['kind']} is not a kind the webhook handles ({', '.join(handled_kinds())}); "
            f"the deployed webhook never sees it, so it is allowed unchanged{hint}")


def topology_problem(obj: Mapping[str, Any]) -> str | None:
    """Why a KAI ``Topology`` in the manifest would be refused (its CRD's rules, KAI's alias rules:
    :meth:`webhook.topology.objects.Topology.from_object`), or ``None`` (also for every other kind)."""
    from webhook.topology.objects import TOPOLOGY_KIND, Topology, TopologyError

    if obj.get("kind") != TOPOLOGY_KIND or not str(obj.get("apiVersion", "")).startswith("kai.scheduler/"):
        return None
    try:
        Topology.from_object(obj)
    except TopologyError as exc:
        return str(exc)
    return None


def run(args: argparse.Namespace) -> int:
    """The ``review`` command: exit 0 all allowed, 1 any denied, 2 bad usage or unreadable input."""
    import jsonpatch

    from webhook.admission.review import review as core_review
    from webhook.http import envelope
    from webhook.http.bounds import bounded_review

    def fail(message: str) -> int:
        return error("review", message)

    catalog, default = static_topologies(args.topology_file, args.default_topology)  # UsageError: exit 2 (main)
    located = read_objects(args.filename)  # ManifestError: exit 2 (main)
    objects = [obj for _, obj in located]
    try:
        old_objects = [obj for _, obj in read_objects(args.old)] if args.old else None
    except ManifestError as exc:  # named as --topology-file names its file: the flag, then -f's wording
        raise UsageError(f"--old: {exc}") from None
    if args.operation == "UPDATE":
        if old_objects is None:
            return fail("--operation UPDATE needs --old OLD_MANIFEST (the object as stored before the update)")
        if len(old_objects) != len(objects):
            return fail(f"--old has {len(old_objects)} objects but -f has {len(objects)}; they must pair up in order")
        for new_obj, old_obj in zip(objects, old_objects):
            if (new_obj.get("apiVersion"), new_obj.get("kind")) != (old_obj.get("apiVersion"), old_obj.get("kind")):
                return fail(f"--old object is {old_obj.get('apiVersion')}/{old_obj.get('kind')}, "
                            f"-f object is {new_obj.get('apiVersion')}/{new_obj.get('kind')}: an UPDATE keeps the kind")
    elif old_objects is not None:
        return fail("--old is only used with --operation UPDATE")
    settings = admission_settings(args.platform_user, args.platform_group, default, args.gate_pods, args.segment_env, args.target,
                                  args.kueue_version)

    responses, results, status = [], [], 0
    for i, (source, obj) in enumerate(located):
        old = old_objects[i] if old_objects else None
        refused = topology_problem(obj)
        note = unhandled_kind_note(obj) if refused is None else None
        if note is not None:
            print(f"segment-webhook review: note: {note}", file=sys.stderr)
        if refused is not None:  # not the webhook's, but the levels every review reads: checked
            print(f"segment-webhook review: error: {source}: {refused}", file=sys.stderr)
            status = 1
        review = build_review(obj, operation=args.operation, old=old, user=args.user, groups=args.group)
        # behind the size bound, as POST /mutate reviews a body that could carry that much
        outcome = envelope.handle(review, catalog, settings, mutate=True, review_fn=bounded_review(core_review))
        answered = outcome.body.get("response")  # not a mapping only for an answer that is not a review
        response: Mapping[str, Any] = answered if isinstance(answered, Mapping) else {}
        for warning in response.get("warnings", []):
            print(f"Warning: {warning}", file=sys.stderr)
        responses.append(outcome.body)
        if not outcome.allowed:
            status = 1
            reason = str(response.get("status", {}).get("reason", "Forbidden"))
            print(denial_line(source, args.operation, reason, outcome.message, str(obj.get("kind"))),
                  file=sys.stderr)
            continue
        try:
            results.append(jsonpatch.apply_patch(obj, envelope.decode_patch(outcome.body)))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, ValueError, RecursionError) as exc:
            # The webhook produced a patch kube-apiserver could not apply either: report it.
            print(f"segment-webhook review: internal error: the patch does not apply to {source}: {exc}",
                  file=sys.stderr)
            status = 1

    if args.output == "json":
        document = responses[0] if len(responses) == 1 else {"apiVersion": "v1", "kind": "List", "items": responses}
        written = write_output(json.dumps(document, indent=2) + "\n", "review")
    elif results:
        written = write_output(yaml.safe_dump_all(results, sort_keys=False, default_flow_style=False, allow_unicode=True), "review")
    else:
        written = 0
    return written or status


def register(subparsers: Any) -> None:
    """Add ``review`` to the ``segment-webhook`` command line."""
    parser = subparsers.add_parser(
        "review",
        help="dry-run the webhook on a manifest (offline, same code path as /mutate)",
        description="Send MANIFEST through the webhook as kube-apiserver would on kubectl create (or replace "
                    "with --operation UPDATE --old OLD) and print the answer. Exit 0 allowed, 1 denied, "
                    "2 bad usage or unreadable input. Topologies: --topology-file, else the embedded default "
                    "'cluster-topology'. Unlike serve, review reads no SEGMENT_WEBHOOK_* variables.",
    )
    parser.add_argument("-f", "--filename", required=True, metavar="MANIFEST",
                        help="YAML/JSON manifest (several documents or a List are reviewed one by one; - = stdin)")
    parser.add_argument("--operation", choices=("CREATE", "UPDATE"), default="CREATE",
                        help="admission operation (default CREATE)")
    parser.add_argument("--old", metavar="OLD_MANIFEST", help="the stored object before an UPDATE")
    parser.add_argument("--user", default=DEFAULT_USER, metavar="NAME",
                        help=f"request.userInfo.username (default {DEFAULT_USER})")
    parser.add_argument("--group", action="append", default=[], metavar="NAME",
                        help="request.userInfo group; repeatable (system:authenticated is always added)")
    add_topology_flags(parser, env=False)
    parser.add_argument("--gate-pods", action="store_true",
                        help="review as `serve --gate-pods` does: gang facts on templates, the scheduling gate on pods")
    add_target_flag(parser)
    parser.add_argument("--segment-env", action="store_true",
                        help="review as `serve --segment-env` does: KAI_SEGMENT_INDEX / KAI_SEGMENT_SIZE in the "
                             "containers of a segmented pod")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), default="json",
                        help="json: the AdmissionReview response (default); yaml: the object with the patch applied")
    parser.set_defaults(func=run)
