"""hack/local_cluster.py's pieces that need no control plane (the cluster suite runs the rest)."""

from __future__ import annotations

import os
import pathlib
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402


def test_the_control_plane_cache_key_ignores_the_upstream_programs_modules(tmp_path, monkeypatch):
    """Adding or bumping hack/go/lws must not rebuild kube-apiserver and friends (a 762 s build)."""
    before = local_cluster.pins_digest()
    copy = tmp_path / "go"
    for module in ("etcd", "kubernetes", "lws"):
        (copy / module).mkdir(parents=True)
        for name in ("go.mod", "go.sum"):
            (copy / module / name).write_bytes((local_cluster.GO_MODULES / module / name).read_bytes())
    monkeypatch.setattr(local_cluster, "GO_MODULES", copy)
    assert local_cluster.pins_digest() == before
    (copy / "lws" / "go.mod").write_text((copy / "lws" / "go.mod").read_text() + "// bumped\n")
    assert local_cluster.pins_digest() == before
    assert local_cluster.pins_digest(("lws",)) != local_cluster.pins_digest(("etcd",))


def test_lws_is_pinned_to_a_version_the_proxy_serves():
    # hack/go/lws/go.mod: v0.8.0 (the proxy refused v0.10.0's source, 2026-12-02)
    assert local_cluster.module_version("lws", "sigs.k8s.io/lws") == "v0.8.0"
    assert local_cluster.UPSTREAM["lws"].package == "sigs.k8s.io/lws/cmd"


def test_kai_podgrouper_is_refused_with_the_reason():
    with pytest.raises(local_cluster.ClusterError, match=r"kai-podgrouper: the Go module proxy refuses "
                                                         r"github.com/NVIDIA/KAI-scheduler \(403"):
        local_cluster.build_upstream("kai-podgrouper")
    with pytest.raises(local_cluster.ClusterError, match="unknown upstream program 'volcano'"):
        local_cluster.build_upstream("volcano")


def test_replace_flags_sets_the_controller_metrics_port():
    # deploy/overlays/with-controller/controller-deployment.yaml's args
    deployment = yaml.safe_load((REPO / "deploy" / "overlays" / "with-controller" / "controller-deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["controller", "--metrics-port", "9090", "--default-topology", "cluster-topology"]
    assert local_cluster.replace_flags(args, {"--metrics-port": "40001"}) == \
        ["controller", "--metrics-port", "40001", "--default-topology", "cluster-topology"]
    assert local_cluster.replace_flags(["controller", "--metrics-port=9090"], {"--metrics-port": "1"}) == \
        ["controller", "--metrics-port", "1"]
    assert local_cluster.replace_flags(["controller"], {"--metrics-port": "1"}) == ["controller", "--metrics-port", "1"]


def test_read_objects_flattens_a_kubectl_list(tmp_path):
    dump = tmp_path / "nodes.yaml"
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "a"}}, {"kind": "Pod", "metadata": {"name": "p"}}]})
        + "---\n" + yaml.safe_dump({"kind": "Node", "metadata": {"name": "b"}}))
    assert [(o["kind"], o["metadata"]["name"]) for o in local_cluster.read_objects(dump)] == \
        [("Node", "a"), ("Pod", "p"), ("Node", "b")]


def test_rfc3339_times_as_the_api_writes_them():
    # metav1.Time: seconds; metav1.MicroTime (Lease renewTime): 6 decimals
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", local_cluster.rfc3339_now())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", local_cluster.rfc3339_now(micro=True))


def test_help_hides_the_internal_heartbeat_command(capsys):
    """`local-cluster.sh --help` lists the user's commands only: the internal `heartbeat` must not
    show, and never as argparse's `==SUPPRESS==` placeholder (Python 3.11 prints it for a
    subcommand added with help=SUPPRESS)."""
    with pytest.raises(SystemExit) as exit_info:
        local_cluster.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "SUPPRESS" not in out
    assert "heartbeat" not in out
    for command in ("build", "up", "nodes", "stop-apiserver", "start-apiserver", "down"):
        assert command in out


def test_a_component_whose_port_was_taken_is_started_again_on_another(tmp_path, monkeypatch):
    """CI, 2026-12-05: kube-controller-manager's port was taken between free_port() and its bind;
    /healthz answered from the other process and the component exited ("bind: address already in
    use"). The component must still run a second after it answered, else it starts on a new port."""
    cluster = local_cluster.LocalCluster(tmp_path)
    monkeypatch.setattr(cluster, "https_ok", lambda port, path, token=None: True)  # the other process answers
    started: list[int] = []

    def argv(port: int) -> list[str]:
        started.append(port)
        if len(started) == 1:  # the first start finds its port taken, as kube-controller-manager did
            script = "import sys, time; print('bind: address already in use', flush=True); time.sleep(0.3); sys.exit(1)"
        else:
            script = "import time; time.sleep(30)"
        return [sys.executable, "-c", script]

    process = cluster.start_on_free_port("kube-controller-manager", argv)
    try:
        assert len(started) == 2
        assert process.poll() is None
        assert cluster.state["ports"]["kube-controller-manager"] == started[1]
        assert cluster.state["components"] == ["kube-controller-manager"]
    finally:
        process.kill()
        process.wait()


def test_a_component_that_exits_for_another_reason_is_not_started_again(tmp_path, monkeypatch):
    cluster = local_cluster.LocalCluster(tmp_path)
    monkeypatch.setattr(cluster, "https_ok", lambda port, path, token=None: True)
    started: list[int] = []

    def argv(port: int) -> list[str]:
        started.append(port)
        return [sys.executable, "-c", "import sys, time; print('bad flag', flush=True); time.sleep(0.3); sys.exit(2)"]

    with pytest.raises(local_cluster.ClusterError, match=r"kube-scheduler exited with status 2 after it answered /healthz"):
        cluster.start_on_free_port("kube-scheduler", argv)
    assert len(started) == 1


def test_up_says_build_reusing_once_per_program(tmp_path, monkeypatch):
    """Issue 37: `up --with lws` printed `build: reusing .../manager` three times (the check before
    starting, the starter, its helper). Once per binary and process now."""
    import io

    target = tmp_path / "lws-v0"
    target.mkdir()
    binary = target / local_cluster.UPSTREAM["lws"].binary
    binary.write_text("")
    monkeypatch.setattr(local_cluster.shutil, "which", lambda name: "/usr/bin/go")
    monkeypatch.setattr(local_cluster, "upstream_target", lambda name: target)
    monkeypatch.setattr(local_cluster, "_REUSE_SAID", set())
    log = io.StringIO()
    assert [local_cluster.build_upstream("lws", log=log) for _ in range(3)] == [binary] * 3
    assert log.getvalue() == f"build: reusing {binary}\n"


def test_kube_apiserver_always_routes_a_service_to_its_endpoints(tmp_path, monkeypatch):
    """Issue 35: a webhook configuration naming a Service must make kube-apiserver dial one of the
    Service's endpoints (pod addresses in the run's own network namespaces), never its cluster IP
    in 10.0.0.0/24, an address no process here owns. The flag is on in every `up`, whatever was asked."""
    for workload_api in (False, True):
        (tmp_path / str(workload_api)).mkdir()
        cluster = local_cluster.LocalCluster(tmp_path / str(workload_api))
        cluster.state = {"ports": {}, "components": [], "bin": "/nonexistent", "workload_api": workload_api}
        started: dict[str, list[str]] = {}

        class Stop(Exception):
            pass

        def start(component, argv, env=None, started=started):
            started[component] = argv
            if component == "kube-apiserver":
                raise Stop
            return None

        monkeypatch.setattr(cluster, "start", start)
        monkeypatch.setattr(cluster, "wait_until", lambda *args, **kwargs: None)
        with pytest.raises(Stop):
            cluster.start_control_plane()
        argv = started["kube-apiserver"]
        assert "--enable-aggregator-routing=true" in argv
        assert not any(word.startswith("--enable-aggregator-routing=false") for word in argv)
        assert argv[argv.index("--service-cluster-ip-range") + 1] == "10.0.0.0/24"
        # issue 35: every pod patch and delete is audited (the node faults count releases from it)
        assert argv[argv.index("--audit-log-path") + 1] == str(cluster.dir / "logs" / "audit.log")
        policy = yaml.safe_load(Path(argv[argv.index("--audit-policy-file") + 1]).read_text())
        assert policy["rules"][0] == {"level": "Metadata", "verbs": ["patch", "update", "delete"],
                                      "resources": [{"group": "", "resources": ["pods"]}]}
        # issue 36: the writes the trace benchmark times the advisor from, with their bodies
        assert policy["rules"][1:] == [
            {"level": "Request", "verbs": ["patch", "update"],
             "resources": [{"group": "kueue.x-k8s.io", "resources": ["workloads/status"]}]},
            {"level": "Request", "verbs": ["patch", "update"],
             "users": ["system:serviceaccount:kube-system:kwok-controller", "system:kube-scheduler"],
             "resources": [{"group": "", "resources": ["pods/status"]}]},
            {"level": "RequestResponse", "verbs": ["create", "patch", "update"],
             "users": ["system:serviceaccount:segment-webhook-system:segment-webhook-controller"],
             "resources": [{"group": "", "resources": ["events"]}]},
            {"level": "None"}]
        assert argv[argv.index("--audit-log-maxsize") + 1] == "200"


def test_a_zombie_counts_as_exited(tmp_path):
    """`down` and `stop-apiserver` run in another process than `up`: the stopped component is not
    their child, and until its parent reaps it the exited process is a zombie (kube-apiserver, seen
    2026-12-07: `stop-apiserver` waited its whole 60 s grace for a process that exited at once)."""
    import subprocess
    import time

    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.05)
    assert local_cluster.process_alive(child.pid) is False  # exited, not reaped yet
    child.wait()
    assert local_cluster.process_alive(child.pid) is False  # gone
    import os

    assert local_cluster.process_alive(os.getpid()) is True


def test_start_apiserver_reuses_the_recorded_command_line(tmp_path, monkeypatch):
    """`start-apiserver` starts kube-apiserver with the argv `up` recorded (same flags, port, etcd);
    it refuses a running one and a directory that recorded none, naming the fix."""
    cluster = local_cluster.LocalCluster(tmp_path)
    cluster.state = {"ports": {"kube-apiserver": 6443}, "components": ["etcd", "kube-apiserver"], "admin_token": "t"}
    with pytest.raises(local_cluster.ClusterError, match=r"records no kube-apiserver command line \(`up` it first\)"):
        local_cluster.start_apiserver(cluster)
    (tmp_path / "pids").mkdir()
    (tmp_path / "pids" / "kube-apiserver.pid").write_text("4242\n")
    cluster.state["argv"] = {"kube-apiserver": ["/bin/kube-apiserver", "--secure-port", "6443", "--etcd-servers", "e"]}
    with pytest.raises(local_cluster.ClusterError, match=r"kube-apiserver is running in .* \(pid 4242\)"):
        local_cluster.start_apiserver(cluster)
    (tmp_path / "pids" / "kube-apiserver.pid").unlink()
    started: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(cluster, "start", lambda component, argv, env=None: started.append((component, argv)))
    monkeypatch.setattr(cluster, "wait_until", lambda *args, **kwargs: None)
    local_cluster.start_apiserver(cluster)
    assert started == [("kube-apiserver", ["/bin/kube-apiserver", "--secure-port", "6443", "--etcd-servers", "e"])]
    assert cluster.state["components"] == ["etcd", "kube-apiserver"]


def test_stop_apiserver_needs_a_running_one(tmp_path, capsys):
    assert local_cluster.main(["stop-apiserver", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (f"local-cluster: stop-apiserver: {tmp_path} holds no cluster that `up` started "
                                       "(no cluster.json)\n")
    cluster = local_cluster.LocalCluster(tmp_path)
    cluster.state = {"ports": {}, "components": ["etcd"]}
    cluster.save()
    assert local_cluster.main(["stop-apiserver", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"local-cluster: stop-apiserver: no running kube-apiserver in {tmp_path}\n"


FAKE_GO = r"""#!/usr/bin/env bash
# a stand-in for `go build`: records its directory, argv, start and end, then writes what -o names
started=$(date +%s.%N)
sleep 0.2
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[i]}" = -o ] && break; done
out=${args[i+1]}
packages=("${args[@]:i+2}")
if [[ $out == */ ]]; then
    for package in "${packages[@]}"; do
        name=${package##*/}
        [[ $name =~ ^v[0-9]+$ ]] && { name=${package%/*}; name=${name##*/}; }
        printf %s "$package" > "$out$name"
    done
else
    printf %s "${packages[0]}" > "$out"
fi
printf '%s\t%s\t%s\t%s\n' "$PWD" "$started" "$(date +%s.%N)" "$*" >> "$FAKE_GO_LOG"
"""


@pytest.fixture
def fake_go(tmp_path, monkeypatch):
    """A `go` on PATH that records each build (FAKE_GO), and an empty build cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(FAKE_GO)
    (bin_dir / "go").chmod(0o755)
    log = tmp_path / "go.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    monkeypatch.setenv("SEGMENT_WEBHOOK_CLUSTER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(local_cluster, "_REUSE_SAID", set())
    def builds() -> list[dict]:
        rows = [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
        return [{"cwd": cwd, "start": float(start), "end": float(end), "argv": argv.split(" ")}
                for cwd, start, end, argv in rows]

    return builds


def test_executable_names_are_the_go_command_s():
    # cmd/go's DefaultExecName: the last import path element, the one before a major version
    assert local_cluster._executable_name("k8s.io/kubernetes/cmd/kube-apiserver") == "kube-apiserver"
    assert local_cluster._executable_name("go.etcd.io/etcd/server/v3") == "server"
    assert local_cluster._executable_name("github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager") \
        == "trainer-controller-manager"
    assert local_cluster._executable_name("sigs.k8s.io/jobset") == "jobset"


def test_the_control_plane_is_one_go_build_per_module(fake_go):
    """Issue 35: the four k8s.io/kubernetes binaries in one `go build -o DIR/` (the Go command links
    one while it compiles the next), etcd in another; each lands under the name `up` starts."""
    import io

    target = local_cluster.build(log=io.StringIO())
    builds = fake_go()
    assert [(pathlib.Path(b["cwd"]).name, b["argv"][b["argv"].index("-o") + 2:]) for b in builds] == [
        ("etcd", ["go.etcd.io/etcd/server/v3"]),
        ("kubernetes", ["k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
                        "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kubectl"]),
    ]
    assert all(b["argv"][b["argv"].index("-o") + 1].endswith(os.sep) for b in builds)
    assert sorted(p.name for p in target.iterdir()) == [
        "BUILD_SECONDS", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
    assert (target / "etcd").read_text() == "go.etcd.io/etcd/server/v3"
    assert (target / "kubectl").read_text() == "k8s.io/kubernetes/cmd/kubectl"
    assert local_cluster.built() is True


def test_build_runs_two_lanes_at_once_and_each_program_once(fake_go, monkeypatch):
    """Issue 35: with SEGMENT_WEBHOOK_BUILD_LANES=2 `build` runs BUILD_LANES side by side; the
    kubelet waits for the control plane (they compile the same k8s.io/kubernetes packages) and
    Trainer for JobSet; a second `build` builds nothing."""
    import io

    monkeypatch.setenv("SEGMENT_WEBHOOK_BUILD_LANES", "2")

    log = io.StringIO()
    assert local_cluster.build_everything(log=log) == local_cluster.build_target()
    builds = fake_go()
    order = [pathlib.Path(b["cwd"]).name for b in builds]
    assert sorted(order) == sorted(["etcd", "kubernetes", *(p.module_dir for p in local_cluster.UPSTREAM.values()),
                                    *(p.module_dir for p in local_cluster.TOOLS.values())])
    assert order.index("kubelet") > order.index("kubernetes") and order.index("trainer") > order.index("jobset")
    spans = {pathlib.Path(b["cwd"]).name: (b["start"], b["end"]) for b in builds}
    # the first build of each lane started before the other lane's first build ended
    assert spans["etcd"][0] < spans["kueue"][1] and spans["kueue"][0] < spans["etcd"][1]
    assert "build: everything done in " in log.getvalue() and "(2 lanes)" in log.getvalue()
    log = io.StringIO()
    local_cluster.build_everything(log=log)
    assert len(fake_go()) == len(builds)
    assert "everything done" not in log.getvalue()


def test_build_runs_one_program_after_the_other_by_default(fake_go, monkeypatch):
    """Issue 35: two lanes were no faster on two CPUs (2,108 s against 1,839 s from nothing), so
    by default no build starts before the one before it ended."""
    import io

    monkeypatch.delenv("SEGMENT_WEBHOOK_BUILD_LANES", raising=False)
    log = io.StringIO()
    local_cluster.build_everything(log=log)
    builds = sorted(fake_go(), key=lambda b: b["start"])
    assert len(builds) == 12  # etcd, the four k8s.io/kubernetes binaries in one, ten programs
    assert all(later["start"] >= earlier["end"] for earlier, later in zip(builds, builds[1:]))
    assert "(1 lane)" in log.getvalue()


def test_build_lanes_name_every_program_once():
    listed = [name for lane in local_cluster.BUILD_LANES for name in lane]
    assert sorted(listed) == sorted(["control-plane", *local_cluster.UPSTREAM, *local_cluster.TOOLS])


def test_down_gives_kube_apiserver_three_seconds_not_thirty(tmp_path, capsys):
    """A kube-apiserver that ignores SIGTERM (as the real one does for up to its 60 s request
    timeout while long-running requests are open: "down: kube-apiserver took 30.0 s to stop" in
    tests/cluster/test_cluster_kwok.py's teardown) is killed after 3 s in ``down``; another
    component keeps its 30 s (here it ends at once on SIGTERM)."""
    cluster = local_cluster.LocalCluster(tmp_path)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    for component, script in (("etcd", "import time; print('up', flush=True); time.sleep(60)"),
                              ("kube-apiserver", stubborn)):
        cluster.start(component, [sys.executable, "-c", script])
    time.sleep(1.0)  # both scripts have set their signal handling
    started = time.monotonic()
    assert cluster.stop_all() == []
    elapsed = time.monotonic() - started
    assert 3.0 <= elapsed < 8.0, elapsed
    assert cluster.state["components"] == []
    assert "down: kube-apiserver took" not in capsys.readouterr().err  # under 5 s: not said
