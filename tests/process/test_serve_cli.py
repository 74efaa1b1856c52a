"""`segment-webhook serve` flags, environment variables, topology sources and start-up errors.

Start-up checks run in-process (they happen before gunicorn starts); one module-scoped real server
watches Topologies from a loopback fake API server through --kubeconfig (live catalog wiring).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
import yaml

from tests.support.serving import free_port, running_serve
from webhook.cli import build_parser, main
from webhook.cli import serve as serve_command

TOPOLOGY = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t-one"},
            "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"}, {"nodeLabel": "kubernetes.io/hostname"}]}}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("SEGMENT_WEBHOOK_"):
            monkeypatch.delenv(key)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def prepare(*argv):
    args = build_parser().parse_args(["serve", *argv])
    return serve_command._prepare_serve(args)


def settings_of(factory):
    return factory().extensions["segment_webhook"]["settings"]


def write_topologies(path, *docs):
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


# ------------------------------------------------------------------ flags and environment

def test_defaults(tmp_path):
    factory, options = prepare("--cert-dir", str(tmp_path / "c"))
    assert options.bind == "0.0.0.0:8443"
    assert (options.workers, options.read_timeout) == (2, 10.0)
    s = settings_of(factory)
    assert s.default_topology == "cluster-topology"     # the embedded default is the only topology
    assert s.platform_users == frozenset() and s.platform_groups == frozenset()
    assert sorted(os.listdir(tmp_path / "c")) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]  # CA key kept for `certs`


def test_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("SEGMENT_WEBHOOK_BIND", "127.0.0.1:9443")
    monkeypatch.setenv("SEGMENT_WEBHOOK_CERT_DIR", str(tmp_path / "env-certs"))
    monkeypatch.setenv("SEGMENT_WEBHOOK_PLATFORM_USER", "runai, system:serviceaccount:runai:workload-controller")
    monkeypatch.setenv("SEGMENT_WEBHOOK_PLATFORM_GROUP", "platform")
    monkeypatch.setenv("SEGMENT_WEBHOOK_WORKERS", "3")
    monkeypatch.setenv("SEGMENT_WEBHOOK_READ_TIMEOUT", "2.5")
    factory, options = prepare()
    assert options.bind == "127.0.0.1:9443"
    assert (options.workers, options.read_timeout) == (3, 2.5)
    assert os.path.isfile(tmp_path / "env-certs" / "tls.crt")
    s = settings_of(factory)
    assert s.platform_users == frozenset({"runai", "system:serviceaccount:runai:workload-controller"})
    assert s.platform_groups == frozenset({"platform"})


def test_command_line_wins_over_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SEGMENT_WEBHOOK_WORKERS", "3")
    monkeypatch.setenv("SEGMENT_WEBHOOK_PLATFORM_USER", "from-env")
    factory, options = prepare("--cert-dir", str(tmp_path), "--workers", "1", "--platform-user", "a",
                               "--platform-user", "b")
    assert options.workers == 1
    assert settings_of(factory).platform_users == frozenset({"a", "b"})


def test_topology_files_and_default_topology(tmp_path):
    two = write_topologies(tmp_path / "two.yaml", TOPOLOGY, dict(TOPOLOGY, metadata={"name": "t-two"}))
    factory, _ = prepare("--cert-dir", str(tmp_path / "c"), "--topology-file", two)
    assert settings_of(factory).default_topology is None           # two loaded: no implicit default
    factory, _ = prepare("--cert-dir", str(tmp_path / "c"), "--topology-file", two, "--default-topology", "t-two")
    assert settings_of(factory).default_topology == "t-two"
    one = write_topologies(tmp_path / "one.yaml", {"apiVersion": "v1", "kind": "List", "items": [TOPOLOGY]})
    factory, _ = prepare("--cert-dir", str(tmp_path / "c"), "--topology-file", one)
    assert settings_of(factory).default_topology == "t-one"
    catalog = factory().extensions["segment_webhook"]["catalog"]
    assert catalog.names() == ["t-one"]


# ------------------------------------------------------------------ bad input: exit 2, named

@pytest.mark.parametrize(
    "argv, env, needle",
    [
        (["--workers", "0"], {}, "argument --workers: 0 is out of range 1..64"),
        (["--threads", "4"], {}, "--threads was removed: serve runs gunicorn's gevent worker, one greenlet per "
                                 "connection, so no thread count applies; remove it (--workers sets the processes)"),
        (["--bind", "8443"], {}, "argument --bind: '8443' is not HOST:PORT"),
        ([], {"SEGMENT_WEBHOOK_WORKERS": "x"}, "SEGMENT_WEBHOOK_WORKERS='x': 'x' is not a whole number"),
        ([], {"SEGMENT_WEBHOOK_BIND": "localhost:99999"}, "SEGMENT_WEBHOOK_BIND='localhost:99999'"),
        (["--topology-file", "/nonexistent/t.yaml"], {}, "--topology-file: /nonexistent/t.yaml: cannot read"),
        (["--default-topology", "nope"], {}, "--default-topology 'nope' is not a loaded topology; loaded: cluster-topology"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], {}, "--kubeconfig /nonexistent/kubeconfig: cannot configure"),
        ([], {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "in-cluster configuration: cannot configure"),
        (["--read-timeout", "0"], {}, "argument --read-timeout: 0 is out of range 0.1..300 seconds"),
        (["--read-timeout", "soon"], {}, "argument --read-timeout: 'soon' is not a number of seconds"),
        ([], {"SEGMENT_WEBHOOK_READ_TIMEOUT": "nan"}, "SEGMENT_WEBHOOK_READ_TIMEOUT='nan': nan is out of range"),
        (["--default-topology", ""], {}, "argument --default-topology: '' is not a Topology name"),
        (["--default-topology", "Bad Name"], {}, "argument --default-topology: 'Bad Name' is not a Topology name"),
        ([], {"SEGMENT_WEBHOOK_DEFAULT_TOPOLOGY": "Bad_Name"},
         "SEGMENT_WEBHOOK_DEFAULT_TOPOLOGY='Bad_Name': 'Bad_Name' is not a Topology name"),
        (["--kubeconfig", "/nonexistent/kubeconfig", "--default-topology", ""], {},
         "argument --default-topology: '' is not a Topology name"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(tmp_path, monkeypatch, capsys, argv, env, needle):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        code: int | str | None = main(["serve", "--cert-dir", str(tmp_path / "c"), *argv])
    except SystemExit as exc:  # argparse rejects a bad command-line value itself
        code = exc.code
    assert code == 2
    assert needle in capsys.readouterr().err


def test_port_in_use_exits_2_before_starting_gunicorn(tmp_path, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["serve", "--bind", f"127.0.0.1:{port}", "--cert-dir", str(tmp_path / "c")])
    assert code == 2
    assert f"segment-webhook serve: error: --bind 127.0.0.1:{port}: address already in use" in capsys.readouterr().err


def test_unbindable_address_exits_2(tmp_path, capsys):
    code = main(["serve", "--bind", "192.0.2.1:9443", "--cert-dir", str(tmp_path / "c")])  # not a local address
    assert code == 2
    assert "segment-webhook serve: error: --bind 192.0.2.1:9443: cannot assign requested address" in capsys.readouterr().err


def test_certs_help_names_its_own_variables_and_the_days_range(capsys):
    with pytest.raises(SystemExit):
        main(["certs", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "SEGMENT_WEBHOOK_CERT_DIR" not in out  # certs has no --cert-dir
    assert "(e.g. SEGMENT_WEBHOOK_OUT)" in out
    assert "1..3650" in out


def test_topology_file_without_topologies_exits_2(tmp_path, capsys):
    path = tmp_path / "empty.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["serve", "--cert-dir", str(tmp_path / "c"), "--topology-file", str(path)]) == 2
    assert f"no kai.scheduler/v1alpha1 Topology object in {path}" in capsys.readouterr().err


def test_half_a_certificate_pair_exits_2(tmp_path, capsys):
    (tmp_path / "tls.crt").write_text("x")
    assert main(["serve", "--cert-dir", str(tmp_path)]) == 2
    assert "has tls.crt but not its pair" in capsys.readouterr().err
    assert not (tmp_path / "tls.key").exists()  # never overwrites a mounted Secret


PAIR_FIX = ("fix: give a PEM certificate and the unencrypted private key it was issued for (as `segment-webhook "
            "certs --out DIR` writes them), or remove both and serve generates a pair")


def _pair(directory, cert, key):
    directory.mkdir(exist_ok=True)
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)
    return directory / "tls.crt", directory / "tls.key"


def _encrypted(key_pem):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(b"secret"))


@pytest.mark.parametrize("make, problem", [
    (lambda one, other: (b"not a certificate", one.key_pem), "{crt} is not a PEM certificate (-----BEGIN CERTIFICATE-----)"),
    (lambda one, other: (one.cert_pem, b"not a key"), "{key} is not a PEM private key (-----BEGIN PRIVATE KEY-----)"),
    (lambda one, other: (one.cert_pem, other.key_pem), "{key} is not the private key of {crt}"),
    (lambda one, other: (one.cert_pem, _encrypted(one.key_pem)),
     "{key} is an encrypted private key, and serve reads only unencrypted ones"),
])
def test_a_pair_that_does_not_load_says_which_file_is_wrong_and_the_fix(tmp_path, capsys, make, problem):
    # new-user trial: the message ended in the TLS library's "[SSL] PEM lib (_ssl.c:3905)"
    from webhook.http import certs

    crt, key = _pair(tmp_path / "c", *make(certs.generate(), certs.generate()))
    assert main(["serve", "--cert-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (f"segment-webhook serve: error: --cert-dir: cannot load the serving certificate {crt} with key {key}: "
                   f"{problem.format(crt=crt, key=key)}; {PAIR_FIX}")


def test_an_unreadable_key_is_named_with_the_systems_reason(tmp_path, monkeypatch, capsys):
    # tests run as root here, where a mode of 000 does not stop a read: the reads fail instead
    import builtins
    import ssl

    from webhook.http import certs

    crt, key = _pair(tmp_path / "c", certs.generate().cert_pem, certs.generate().key_pem)

    def refused(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    def open_refusing_the_key(path, *args, **kwargs):
        if str(path) == str(key):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", refused)
    monkeypatch.setattr(serve_command, "open", open_refusing_the_key, raising=False)
    assert main(["serve", "--cert-dir", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"segment-webhook serve: error: --cert-dir: cannot load the serving certificate {crt} with key {key}: "
        f"cannot read {key}: Permission denied; fix: make it readable by the user serve runs as")


SERVE_WRITES = "it would hold the tls.crt, tls.key and ca.crt serve generates when both are missing"
SERVE_DIR_FIX = ("fix: set --cert-dir (SEGMENT_WEBHOOK_CERT_DIR) to a directory serve can write, or to one that holds "
                 "tls.crt and tls.key")
CERTS_WRITES = "it would hold tls.crt, tls.key, ca.crt, ca.key and ca-bundle.crt"
CERTS_DIR_FIX = "fix: set --out (SEGMENT_WEBHOOK_OUT) to a directory you can write"


@pytest.mark.skipif(not os.path.isdir("/proc/1"), reason="needs /proc")
@pytest.mark.parametrize("argv, writes, fix", [
    (["serve", "--cert-dir", "/proc/1"], SERVE_WRITES, SERVE_DIR_FIX),
    (["certs", "--out", "/proc/1"], CERTS_WRITES, CERTS_DIR_FIX),
])
def test_a_directory_that_takes_no_files_is_named_with_what_was_tried_and_the_fix(capsys, argv, writes, fix):
    # new-user trial: "cannot write certificates to '/proc/1': No such file or directory"
    command, flag = argv[0], argv[1]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"segment-webhook {command}: error: {flag} /proc/1: cannot create a file in the directory "
                          f"({writes}): ")
    assert err.endswith(f"; {fix}")  # the reason between is the system's: as root "No such file or directory ..."


@pytest.mark.parametrize("argv, writes, fix", [
    (["serve", "--cert-dir"], SERVE_WRITES, SERVE_DIR_FIX),
    (["certs", "--out"], CERTS_WRITES, CERTS_DIR_FIX),
])
def test_a_file_given_as_the_certificate_directory_is_named(tmp_path, capsys, argv, writes, fix):
    path = tmp_path / "certs.yaml"
    path.write_text("x")
    assert main([*argv, str(path)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"segment-webhook {argv[0]}: error: {argv[1]} {path}: is a file, not a directory ({writes}); {fix}")
    assert path.read_text() == "x"  # untouched


def test_help_lists_every_environment_variable(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for var in ("SEGMENT_WEBHOOK_BIND", "SEGMENT_WEBHOOK_CERT_DIR", "SEGMENT_WEBHOOK_TOPOLOGY_FILE",
                "SEGMENT_WEBHOOK_DEFAULT_TOPOLOGY", "SEGMENT_WEBHOOK_PLATFORM_USER", "SEGMENT_WEBHOOK_PLATFORM_GROUP",
                "SEGMENT_WEBHOOK_KUBECONFIG", "SEGMENT_WEBHOOK_WORKERS", "SEGMENT_WEBHOOK_READ_TIMEOUT"):
        assert var in out.replace("\n", "").replace(" ", "")
    assert "--threads" not in out  # removed: refused with a fix, never listed


def test_a_leftover_threads_variable_is_ignored_with_a_notice(tmp_path, monkeypatch, capsys):
    # a rollout that still sets SEGMENT_WEBHOOK_THREADS starts, and is told to drop it
    monkeypatch.setenv("SEGMENT_WEBHOOK_THREADS", "16")
    _, options = prepare("--cert-dir", str(tmp_path / "c"))
    assert options.workers == 2
    assert ("segment-webhook serve: SEGMENT_WEBHOOK_THREADS is ignored: serve runs gunicorn's gevent worker, one "
            "greenlet per connection, so no thread count applies; remove it (--workers sets the processes)"
            ) in capsys.readouterr().err


# ------------------------------------------------------------------ live catalog (--kubeconfig)

def write_kubeconfig(path, server_url):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
    }))
    return str(path)


def test_live_catalog_not_synced_means_not_ready(tmp_path):
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{free_port()}")  # nobody listens
    factory, _ = prepare("--cert-dir", str(tmp_path / "c"), "--kubeconfig", kubeconfig)
    app = factory()
    catalog = app.extensions["segment_webhook"]["catalog"]
    try:
        resp = app.test_client().get("/readyz")
        assert resp.status_code == 503
        assert resp.get_json()["topologiesSynced"] is False
        assert app.extensions["segment_webhook"]["settings"].default_topology is None
    finally:
        catalog.stop()


def test_the_master_never_imports_the_kubernetes_client(tmp_path):
    """gunicorn's master checks --kubeconfig in a child process: urllib3 imported before the fork
    keeps the ssl classes gevent replaces in the workers, and the workers' Topology watch then
    failed every TLS request to the real kube-apiserver with RecursionError (issue 16)."""
    import subprocess
    import sys

    kubeconfig = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443")
    code = ("import sys; from webhook.cli import build_parser; from webhook.cli import serve; "
            f"serve._prepare_serve(build_parser().parse_args(['serve', '--cert-dir', {str(tmp_path / 'c')!r}, "
            f"'--kubeconfig', {kubeconfig!r}])); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'urllib3', 'kubernetes'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


class FakeApiServer:
    """Serves a TopologyList with one Topology ``live-topology``; watches stay open, silent."""

    def __init__(self):
        self.stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if not self.path.startswith("/apis/kai.scheduler/v1alpha1/topologies"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if "watch=true" in self.path or "watch=1" in self.path:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    fake.stop.wait(60)
                    return
                body = json.dumps({
                    "apiVersion": "kai.scheduler/v1alpha1", "kind": "TopologyList",
                    "metadata": {"resourceVersion": "7"},
                    "items": [{"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                               "metadata": {"name": "live-topology", "resourceVersion": "7"},
                               "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"},
                                                   {"nodeLabel": "kubernetes.io/hostname"}]}}],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("live")
    api = FakeApiServer()
    kubeconfig = write_kubeconfig(base / "kubeconfig", api.url)
    try:
        # both workers answered /readyz 200 (each names itself): every worker has synced its own catalog
        with running_serve(base, "--kubeconfig", kubeconfig, ready_path="/readyz",
                           ready_workers=2) as srv:
            yield srv["url"], srv["ca"]
    finally:
        api.close()


def _job(topology):
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 8, "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": topology, "kai.scheduler/segment-size": "4",
                                             "kai.scheduler/segment-topology-required-placement": "kubernetes.io/hostname"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}}}


def _review(url, ca, obj):
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "operation": "CREATE", "namespace": "default", "object": obj,
        "userInfo": {"username": "kubectl-user", "groups": ["system:authenticated"]}}}
    # Connection: close → a new connection each time, so both workers answer
    resp = requests.post(url + "/mutate", json=doc, verify=ca, timeout=10, headers={"Connection": "close"})
    return resp.json()["response"]


def test_every_worker_uses_the_live_topologies(live_server):
    url, ca = live_server
    for _ in range(6):
        assert _review(url, ca, _job("live-topology"))["allowed"] is True
        denied = _review(url, ca, _job("cluster-topology"))   # not in the cluster, catalog synced
        assert denied["allowed"] is False
        assert denied["status"]["code"] == 403
        assert "live-topology" in denied["status"]["message"]
