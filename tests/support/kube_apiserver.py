"""A loopback Kubernetes API server for the few resources the controller uses (DESIGN.md §9).

Why not ``kmock`` (PyPI, the kopf author's emulator): its lists answer ``resourceVersion: "..."``,
its watches replay every object and ignore ``resourceVersion``, its PATCH and PUT are dict
merges and it has no optimistic concurrency, while the controller needs JSON patch (RFC 6902,
with ``test``), resourceVersions that a watch resumes from, and Lease updates that conflict (409)
when the resourceVersion is stale. This server speaks that part of the real protocol:

* ``GET`` list (``/api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``, ``/api/v1/nodes``,
  ``/apis/kai.scheduler/v1alpha1/topologies``, leases) with ``metadata.resourceVersion``; ``GET``
  one object; ``?watch=true&resourceVersion=N`` streams, over a chunked response, the
  newline-delimited events after N (every object as ADDED when N is absent or "0") and ends
  after ``timeoutSeconds``.
* ``POST`` create (409 AlreadyExists; ``generateName``), ``PUT`` replace (409 Conflict on a stale
  ``metadata.resourceVersion``), ``PATCH`` ``application/json-patch+json`` (422 when an operation
  fails, as ``test``), ``DELETE``.
* **Pod validation of KEP-3838** (kube-apiserver ``ValidatePodUpdate`` for gated pods): while a
  pod has scheduling gates, an update may only remove gates and add ``nodeSelector`` entries;
  once ungated, neither gates nor the node selector may change. Violations answer 422 and are
  recorded in ``violations``.
* Faults: ``fail_patches`` (HTTP statuses answered to the next pod PATCH requests, e.g. ``[409]``);
  ``missing`` (resources answered 404, as a CRD that is not installed).
* A stand-in for kube-scheduler (``bind_after`` seconds, or ``None`` for none): an ungated pod
  pinned to an existing node by ``nodeSelector[kubernetes.io/hostname]`` gets ``spec.nodeName``
  and ``status.phase: Running``.

Every request is recorded (``requests``: method, path, User-Agent) so tests can tell which client
acted. Objects are plain dicts; ``create``/``delete`` are also callable from the test directly.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import jsonpatch

GATE_FIELD = "schedulingGates"
HOSTNAME = "kubernetes.io/hostname"

#: path pattern → (resource, namespaced)
_ROUTES = [
    (re.compile(r"^/api/v1/pods$"), "pods", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+))?$"), "pods", True),
    (re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+))?$"), "nodes", False),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events(?:/(?P<name>[^/]+))?$"), "events", True),
    (re.compile(r"^/apis/kai\.scheduler/v1alpha1/topologies(?:/(?P<name>[^/]+))?$"), "topologies", False),
    (re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$"), "leases", True),
    (re.compile(r"^/apis/kubeflow\.org/v1/namespaces/(?P<ns>[^/]+)/pytorchjobs(?:/(?P<name>[^/]+))?$"), "pytorchjobs", True),
    # target workload-api (k8s.io/api v0.37.2 scheduling.k8s.io)
    (re.compile(r"^/apis/scheduling\.k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/workloads(?:/(?P<name>[^/]+))?$"),
     "workloads", True),
    (re.compile(r"^/apis/scheduling\.k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/podgroups(?:/(?P<name>[^/]+))?$"),
     "podgroups", True),
    (re.compile(r"^/apis/scheduling\.k8s\.io/v1alpha3/namespaces/(?P<ns>[^/]+)/compositepodgroups(?:/(?P<name>[^/]+))?$"),
     "compositepodgroups", True),
]
_KINDS = {"pods": ("v1", "Pod"), "nodes": ("v1", "Node"), "events": ("v1", "Event"),
          "topologies": ("kai.scheduler/v1alpha1", "Topology"), "leases": ("coordination.k8s.io/v1", "Lease"),
          "pytorchjobs": ("kubeflow.org/v1", "PyTorchJob"), "workloads": ("scheduling.k8s.io/v1beta1", "Workload"),
          "podgroups": ("scheduling.k8s.io/v1beta1", "PodGroup"),
          "compositepodgroups": ("scheduling.k8s.io/v1alpha3", "CompositePodGroup")}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def kep3838_update_problem(old: dict, new: dict) -> str | None:
    """kube-apiserver's rule for pod updates around scheduling gates (KEP-3838), or ``None``."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_gates, new_gates = old_spec.get(GATE_FIELD) or [], new_spec.get(GATE_FIELD) or []
    if not old_gates:
        if new_gates:
            return "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate"
        if (old_spec.get("nodeSelector") or {}) != (new_spec.get("nodeSelector") or {}):
            return "spec: Forbidden: pod updates may not change fields other than ... (nodeSelector of an ungated pod)"
    else:
        names = [g.get("name") for g in old_gates]
        if any(g.get("name") not in names for g in new_gates):
            return "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate"
        old_sel, new_sel = old_spec.get("nodeSelector") or {}, new_spec.get("nodeSelector") or {}
        if any(new_sel.get(k) != v for k, v in old_sel.items()):
            return "spec.nodeSelector: Invalid value: only additions to spec.nodeSelector are allowed"
    rest_old = {k: v for k, v in old_spec.items() if k not in (GATE_FIELD, "nodeSelector", "nodeName")}
    rest_new = {k: v for k, v in new_spec.items() if k not in (GATE_FIELD, "nodeSelector", "nodeName")}
    if rest_old != rest_new:
        return "spec: Forbidden: pod updates may not change fields other than the mutable ones"
    return None


class KubeApiServer:
    """The server; ``start()`` / ``close()``; ``url`` for a client ``Configuration.host``.
    ``port``: the loopback port to listen on (0: a free one; a given one lets a test start the
    server where a client already tries to connect)."""

    def __init__(self, *, bind_after: float | None = None, port: int = 0):
        self.objects: dict[tuple[str, str, str], dict] = {}  # (resource, namespace, name) → object
        self.log: list[tuple[int, str, str, dict]] = []      # (rv, resource, type, object)
        self.rv = 100
        self.cond = threading.Condition()
        self.requests: list[tuple[str, str, str]] = []
        self.violations: list[str] = []
        self.fail_patches: list[int] = []
        #: resources whose API is not installed (404 on every request), e.g. {"topologies"}
        self.missing: set[str] = set()
        self.patch_log: list[tuple[float, str, str, list, str]] = []  # (time, ns, name, ops, user agent)
        self.merge_log: list[tuple[str, str, str, dict]] = []  # merge patches: (resource, ns, name, patch)
        self.created_at: dict[tuple[str, str], float] = {}
        self.ungated_at: dict[tuple[str, str], float] = {}
        self.bind_after = bind_after
        self.unbound = 0
        self._closed = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as Go's net/http (kube-apiserver) sets it: without it, headers and body
            # in two writes meet the client's delayed ACK and every request takes 40 ms
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _dispatch(self, method: str) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                with server.cond:
                    server.requests.append((method, url.path, self.headers.get("User-Agent", "")))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    resource, namespace, name = server.route(url.path)
                    if resource in server.missing:
                        raise ApiError(404, "NotFound", "the server could not find the requested resource")
                    if method == "GET" and query.get("watch") in ("true", "1"):
                        server.serve_watch(self, resource, namespace, query)
                        return
                    code, payload = server.handle(method, resource, namespace, name, query, body,
                                                  self.headers.get("Content-Type", ""), self.headers.get("User-Agent", ""))
                except ApiError as exc:
                    code, payload = exc.code, _status(exc.code, exc.reason, exc.message)
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._dispatch("GET")

            def do_POST(self):
                self._dispatch("POST")

            def do_PUT(self):
                self._dispatch("PUT")

            def do_PATCH(self):
                self._dispatch("PATCH")

            def do_DELETE(self):
                self._dispatch("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._threads = [threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)]
        if bind_after is not None:
            self._threads.append(threading.Thread(target=self._scheduler, daemon=True))

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KubeApiServer:
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with self.cond:
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # ------------------------------------------------------------------ store
    @staticmethod
    def route(path: str) -> tuple[str, str | None, str | None]:
        for pattern, resource, _namespaced in _ROUTES:
            m = pattern.match(path)
            if m:
                groups = m.groupdict()
                return resource, groups.get("ns"), groups.get("name")
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")

    def _record(self, resource: str, event: str, obj: dict) -> None:
        """Bump the resourceVersion, store and log (caller holds ``cond``)."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = (resource, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        if event == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.log.append((self.rv, resource, event, copy.deepcopy(obj)))
        self.cond.notify_all()

    def create(self, resource: str, obj: dict, namespace: str | None = None) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        api_version, kind = _KINDS[resource]
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        if namespace:
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        with self.cond:
            key = (resource, meta.get("namespace") or "", meta.get("name"))
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{resource} "{meta.get("name")}" already exists')
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            if resource == "pods":
                obj.setdefault("status", {"phase": "Pending"})
                self.created_at[(meta.get("namespace") or "", meta["name"])] = time.monotonic()
            self._record(resource, "ADDED", obj)
            return copy.deepcopy(obj)

    def delete(self, resource: str, namespace: str | None, name: str) -> dict:
        with self.cond:
            obj = self.objects.get((resource, namespace or "", name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            self._record(resource, "DELETED", copy.deepcopy(obj))
            return obj

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None:
        with self.cond:
            obj = self.objects.get((resource, namespace or "", name))
            return copy.deepcopy(obj) if obj else None

    def list(self, resource: str) -> list[dict]:
        with self.cond:
            return [copy.deepcopy(o) for (r, _, _), o in sorted(self.objects.items()) if r == resource]

    def update(self, resource: str, new: dict, *, check_rv: bool, user_agent: str = "") -> dict:
        with self.cond:
            meta = new["metadata"]
            key = (resource, meta.get("namespace") or "", meta["name"])
            old = self.objects.get(key)
            if old is None:
                raise ApiError(404, "NotFound", f'{resource} "{meta["name"]}" not found')
            if check_rv and meta.get("resourceVersion") != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{meta["name"]}": '
                                                "the object has been modified; please apply your changes to the latest version")
            if resource == "pods":
                problem = kep3838_update_problem(old, new)
                if problem:
                    self.violations.append(f"{meta['name']}: {problem}")
                    raise ApiError(422, "Invalid", f'Pod "{meta["name"]}" is invalid: {problem}')
                if (old["spec"].get(GATE_FIELD) or []) and not (new["spec"].get(GATE_FIELD) or []):
                    self.ungated_at[(meta.get("namespace") or "", meta["name"])] = time.monotonic()
            new = copy.deepcopy(new)
            new["metadata"]["uid"] = old["metadata"]["uid"]
            new["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            self._record(resource, "MODIFIED", new)
            return copy.deepcopy(new)

    # ------------------------------------------------------------------ HTTP
    def handle(self, method, resource, namespace, name, query, body, content_type, user_agent):
        if method == "GET" and name is None:
            with self.cond:
                # a real kube-apiserver's list items carry no apiVersion and no kind (the List's do)
                items = [{k: copy.deepcopy(v) for k, v in o.items() if k not in ("apiVersion", "kind")}
                         for (r, ns, _), o in sorted(self.objects.items())
                         if r == resource and (namespace is None or ns == namespace)]
                rv = str(self.rv)
            api_version, kind = _KINDS[resource]
            return 200, {"apiVersion": api_version, "kind": kind + "List", "metadata": {"resourceVersion": rv},
                         "items": items}
        if method == "GET":
            obj = self.get(resource, namespace, name)
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            return 200, obj
        if method == "POST":
            return 201, self.create(resource, json.loads(body), namespace)
        if method == "DELETE":
            return 200, self.delete(resource, namespace, name)
        if method == "PUT":
            new = json.loads(body)
            new.setdefault("metadata", {})["namespace"] = namespace or ""
            new["metadata"]["name"] = name
            return 200, self.update(resource, new, check_rv=True, user_agent=user_agent)
        if method == "PATCH":
            if content_type.startswith("application/merge-patch+json") and resource != "pods":
                return 200, self.merge_patch(resource, namespace, name, json.loads(body), user_agent)
            if not content_type.startswith("application/json-patch+json"):
                raise ApiError(415, "UnsupportedMediaType", f"only application/json-patch+json here, not {content_type}")
            ops = json.loads(body)
            with self.cond:
                if resource == "pods" and self.fail_patches:
                    code = self.fail_patches.pop(0)
                    raise ApiError(code, "Conflict" if code == 409 else "InternalError", f"injected {code}")
                old = self.objects.get((resource, namespace or "", name))
                if old is None:
                    raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
                try:
                    new = jsonpatch.apply_patch(copy.deepcopy(old), ops)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise ApiError(422, "Invalid",
                                   f"the server rejected our request due to an error in our request: {exc}") from exc
                self.patch_log.append((time.monotonic(), namespace, name, ops, user_agent))
                return 200, self.update(resource, new, check_rv=False, user_agent=user_agent)
        raise ApiError(405, "MethodNotAllowed", method)

    def merge_patch(self, resource, namespace, name, patch, user_agent):
        """RFC 7386 JSON merge patch (objects merged, ``null`` deletes), as kube-apiserver applies
        ``application/merge-patch+json``."""
        def merge(target, change):
            if not isinstance(change, dict):
                return copy.deepcopy(change)
            out = dict(target) if isinstance(target, dict) else {}
            for key, value in change.items():
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = merge(out.get(key), value)
            return out

        with self.cond:
            old = self.objects.get((resource, namespace or "", name))
            if old is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            self.merge_log.append((resource, namespace, name, patch))
            return self.update(resource, merge(copy.deepcopy(old), patch), check_rv=False, user_agent=user_agent)

    def serve_watch(self, handler, resource, namespace, query) -> None:
        since = query.get("resourceVersion")
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def matches(res, obj):
            return res == resource and (namespace is None or obj["metadata"].get("namespace") == namespace)

        with self.cond:
            if since in (None, "", "0"):
                pending = [("ADDED", copy.deepcopy(o)) for (r, _, _), o in sorted(self.objects.items()) if matches(r, o)]
                cursor = len(self.log)
            else:
                pending = []
                cursor = next((i for i, entry in enumerate(self.log) if entry[0] > int(since)), len(self.log))
        try:
            while not self._closed.is_set():
                for event, obj in pending:
                    line = (json.dumps({"type": event, "object": obj}) + "\n").encode()
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                handler.wfile.flush()
                pending = []
                with self.cond:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    if cursor >= len(self.log):
                        self.cond.wait(min(remaining, 0.5))
                    new = self.log[cursor:]
                    cursor = len(self.log)
                pending = [(event, obj) for _, res, event, obj in new if matches(res, obj)]
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except OSError:
            pass
        handler.close_connection = True

    # ------------------------------------------------------------------ kube-scheduler stand-in
    def _scheduler(self) -> None:
        bind_after = self.bind_after
        assert bind_after is not None  # the stand-in runs only with a delay
        while not self._closed.is_set():
            time.sleep(bind_after)
            with self.cond:
                nodes = {n for (r, _, n) in self.objects if r == "nodes"}
                todo = [copy.deepcopy(o) for (r, _, _), o in self.objects.items()
                        if r == "pods" and not o["spec"].get("nodeName") and not o["spec"].get(GATE_FIELD)
                        and (o["spec"].get("nodeSelector") or {}).get(HOSTNAME) in nodes]
                self.unbound = sum(1 for (r, _, _), o in self.objects.items() if r == "pods" and not o["spec"].get("nodeName"))
                for pod in todo:
                    pod["spec"]["nodeName"] = pod["spec"]["nodeSelector"][HOSTNAME]
                    pod["status"] = {"phase": "Running"}
                    self._record("pods", "MODIFIED", pod)
