"""``segment-webhook review``: offline dry run of the admission webhook on a manifest file.

Builds the AdmissionReview v1 that kube-apiserver would send for ``kubectl create -f MANIFEST``
(or a replace, with ``--operation UPDATE --old OLD``) and answers it through
``webhook.http.envelope.handle``, the code path of ``POST /mutate``.

Request fields (decisions where kube-apiserver's exact values do not matter to the webhook):
``uid`` a random UUID; ``kind``/``resource`` from ``apiVersion``/``kind`` (resource = lower-case
kind + ``s``, right for Pod, PyTorchJob, LeaderWorkerSet, DistributedWorkload);
``namespace`` = ``metadata.namespace`` or ``default``; ``userInfo.username`` = ``--user``
(default ``kubectl-user``, not a platform identity, so automatic segment placement does not
apply unless it matches ``--platform-user``); ``userInfo.groups`` = ``--group`` values plus
``system:authenticated`` (kube-apiserver adds it to every authenticated user).

Output: ``-o json`` (default) prints the AdmissionReview v1 response (a ``kind: List`` of them
for a multi-document manifest); ``-o yaml`` prints the object(s) with the patch applied
(``jsonpatch``). Warnings go to stderr as ``Warning: ...`` (like kubectl). Exit status: 0 all
allowed, 1 any denied (stderr carries kubectl's denial line), 2 bad usage or unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Mapping
from typing import Any

import yaml

from webhook.cli.flags import UsageError, add_topology_flags, admission_settings, error, static_topologies
from webhook.manifests import ManifestError, deeper_than, load_objects

WEBHOOK_NAME = "segment-webhook.segments.dev"
DEFAULT_USER = "kubectl-user"
AUTHENTICATED_GROUP = "system:authenticated"

#: Deepest nesting of a reviewed object: PyYAML's pure-Python loader, which ``review`` used
#: before the libyaml reader, stopped at about 450 levels; real objects nest about 20.
MAX_NESTING = 400

_REASONS = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}
_VERBS = {"CREATE": "creating", "UPDATE": "replacing"}


def read_objects(path: str) -> list[dict]:
    """The Kubernetes objects of a YAML/JSON file (``-`` = stdin) to review, read by
    :mod:`webhook.manifests` (``kind: List`` items expanded, empty documents skipped); each needs
    ``apiVersion`` and ``kind`` and may nest at most :data:`MAX_NESTING` levels. Raises :class:`ManifestError` naming the file and document."""
    objects: list[dict] = []
    for here, obj in load_objects(path):
        if deeper_than(obj, MAX_NESTING):
            raise ManifestError(path, "nested too deeply to be a Kubernetes object")
        for key in ("apiVersion", "kind"):
            if not isinstance(obj.get(key), str) or not obj.get(key):
                raise ManifestError(path, f"{here}: {key} is missing")
        objects.append(obj)
    if not objects:
        raise ManifestError(path, "no Kubernetes object found")
    return objects


def build_review(
    obj: Mapping,
    *,
    operation: str = "CREATE",
    old: Mapping | None = None,
    user: str = DEFAULT_USER,
    groups: list[str] | None = None,
) -> dict:
    """The AdmissionReview v1 request kube-apiserver would send for ``obj`` (see module doc).

    ``operation``: ``CREATE`` or ``UPDATE`` (``old`` is then ``request.oldObject``).
    Returns the whole AdmissionReview document (a dict).
    """
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind", ""))
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    namespace = meta.get("namespace") or "default"
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": user, "groups": list(groups or []) + [AUTHENTICATED_GROUP]},
        "object": dict(obj),
        "oldObject": dict(old) if old is not None else None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions" if operation == "CREATE" else "UpdateOptions"},
    }
    if isinstance(meta.get("name"), str):
        request["name"] = meta["name"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def denial_line(path: str, operation: str, code: int, message: str) -> str:
    """kubectl's rendering of a webhook denial, e.g. ``Error from server (Forbidden): error when
    creating "job.yaml": admission webhook "segment-webhook.segments.dev" denied the request: ...``."""
    reason = _REASONS.get(code, "Forbidden")
    verb = _VERBS.get(operation, "creating")
    return (f'Error from server ({reason}): error when {verb} "{path}": admission webhook '
            f'"{WEBHOOK_NAME}" denied the request: {message}')


def run(args: argparse.Namespace) -> int:
    """The ``review`` command: exit 0 all allowed, 1 any denied, 2 bad usage or unreadable input."""
    import jsonpatch

    from webhook.http import envelope

    def fail(message: str) -> int:
        return error("review", message)

    try:
        catalog, default = static_topologies(args.topology_file, args.default_topology)
        objects = read_objects(args.filename)
        old_objects = read_objects(args.old) if args.old else None
    except (UsageError, ManifestError) as exc:
        return fail(str(exc))
    if args.operation == "UPDATE":
        if old_objects is None:
            return fail("--operation UPDATE needs --old OLD_MANIFEST (the object as stored before the update)")
        if len(old_objects) != len(objects):
            return fail(f"--old has {len(old_objects)} objects but -f has {len(objects)}; they must pair up in order")
        for new, old in zip(objects, old_objects):
            if (new.get("apiVersion"), new.get("kind")) != (old.get("apiVersion"), old.get("kind")):
                return fail(f"--old object is {old.get('apiVersion')}/{old.get('kind')}, "
                            f"-f object is {new.get('apiVersion')}/{new.get('kind')}: an UPDATE keeps the kind")
    elif old_objects is not None:
        return fail("--old is only used with --operation UPDATE")
    settings = admission_settings(args.platform_user, args.platform_group, default)

    responses, results, status = [], [], 0
    for i, obj in enumerate(objects):
        old = old_objects[i] if old_objects else None
        review = build_review(obj, operation=args.operation, old=old, user=args.user, groups=args.group)
        outcome = envelope.handle(review, catalog, settings, mutate=True)
        response = outcome.body.get("response", {})
        for warning in response.get("warnings", []):
            print(f"Warning: {warning}", file=sys.stderr)
        responses.append(outcome.body)
        if not outcome.allowed:
            status = 1
            code = int(response.get("status", {}).get("code", 403))
            print(denial_line(args.filename, args.operation, code, outcome.message), file=sys.stderr)
            continue
        try:
            results.append(jsonpatch.apply_patch(obj, envelope.decode_patch(outcome.body)))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, ValueError, RecursionError) as exc:
            # The webhook produced a patch kube-apiserver could not apply either: report it.
            print(f"segment-webhook review: internal error: the patch does not apply to {args.filename}: {exc}",
                  file=sys.stderr)
            status = 1

    if args.output == "json":
        document = responses[0] if len(responses) == 1 else {"apiVersion": "v1", "kind": "List", "items": responses}
        print(json.dumps(document, indent=2))
    elif results:
        sys.stdout.write(yaml.safe_dump_all(results, sort_keys=False, default_flow_style=False))
    return status


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
    parser.add_argument("-o", "--output", choices=("json", "yaml"), default="json",
                        help="json: the AdmissionReview response (default); yaml: the object with the patch applied")
    parser.set_defaults(func=run)
