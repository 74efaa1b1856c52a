"""`segment-webhook review` (webhook.cli.review): offline dry run through the /mutate code path.

Expected values are DESIGN.md §2-§7 and the seed, on the shared sample manifests.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support import paths
from webhook.cli import main

#: the fix of a file that cannot be read (webhook/planning/manifests.py read_text)
READ_FIX = "; fix: give the path of a readable YAML or JSON file, or - to read standard input"

EXAMPLES = paths.SHARED / "examples"
TOPO = "kai.scheduler/topology"
SEG = "kai.scheduler/segment-size"
SEG_REQ = "kai.scheduler/segment-topology-required-placement"
SEG_PREF = "kai.scheduler/segment-topology-preferred-placement"
WL_PREF = "kai.scheduler/topology-preferred-placement"
POLICY = "kai.scheduler/segment-leader-policy"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
DENIAL_PREFIX = 'admission webhook "workloads.segment-webhook.segments.dev" denied the request: '


def run(capsys, *argv):
    code = main(["review", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def example(name):
    path = EXAMPLES / name
    assert path.is_file(), f"missing shared example {path} (tests expect ../shared beside the repository)"
    return str(path)


def write(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj) if not isinstance(obj, str) else obj)
    return str(path)


def load_example(name):
    return yaml.safe_load(Path(example(name)).read_text())


# ------------------------------------------------------------------ sample manifests, -o yaml

def test_pytorchjob_tp4_keeps_its_explicit_worker_keys(capsys):
    code, out, err = run(capsys, "-f", example("pytorchjob-tp4.yaml"), "-o", "yaml")
    assert code == 0, err
    job = yaml.safe_load(out)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Worker"]["template"]["metadata"]["annotations"] == {
        TOPO: "cluster-topology", SEG: "4", SEG_REQ: RACK}
    # kubectl user: no automatic placement, the Master is never segmented (DESIGN.md §3, §6)
    assert SEG not in (specs["Master"]["template"].get("metadata") or {}).get("annotations", {})
    assert WL_PREF not in (job["metadata"].get("annotations") or {})


def test_zone_and_rack_worker_inherits_root_topology(capsys):
    code, out, err = run(capsys, "-f", example("pytorchjob-zone-and-rack.yaml"), "-o", "yaml")
    assert code == 0, err
    job = yaml.safe_load(out)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert worker[TOPO] == "cluster-topology"
    assert worker[SEG] == "4"
    assert worker[SEG_REQ] == RACK
    assert job["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] == "topology.kubernetes.io/zone"


def test_lws_segment_size_from_subgroupsize_and_leader_in_segment_0(capsys):
    code, out, err = run(capsys, "-f", example("lws-segmented.yaml"), "-o", "yaml")
    assert code == 0, err
    lwt = yaml.safe_load(out)["spec"]["leaderWorkerTemplate"]
    expected = {TOPO: "cluster-topology", SEG: "2", SEG_REQ: RACK, POLICY: "LeaderWorker"}
    assert lwt["workerTemplate"]["metadata"]["annotations"] == expected
    # LeaderWorker: the leader belongs to segment 0 and gets the same keys (DESIGN.md §2)
    assert lwt["leaderTemplate"]["metadata"]["annotations"] == expected
    # never automatic for LWS (DESIGN.md §6)
    assert SEG_PREF not in lwt["workerTemplate"]["metadata"]["annotations"]


def test_native_workload_gets_automatic_segment_placement(capsys):
    code, out, err = run(capsys, "-f", example("distributedworkload-native.yaml"), "-o", "yaml")
    assert code == 0, err
    wl = yaml.safe_load(out)
    worker = wl["spec"]["worker"]["template"]["metadata"]["annotations"]
    assert worker[SEG] == "8"
    assert worker[TOPO] == "cluster-topology"     # the only loaded topology is the default
    assert worker[SEG_PREF] == HOST               # lowest level, DESIGN.md §6
    assert wl["metadata"]["annotations"][WL_PREF] == HOST


def test_json_output_is_an_admission_review_response(capsys):
    code, out, err = run(capsys, "-f", example("pytorchjob-zone-and-rack.yaml"))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    assert doc["kind"] == "AdmissionReview"
    assert doc["response"]["allowed"] is True
    uuid.UUID(doc["response"]["uid"])
    assert doc["response"]["patchType"] == "JSONPatch"


# ------------------------------------------------------------------ automatic mode by identity

def _job_with_only_size(tmp_path):
    job = load_example("pytorchjob-tp4.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] = {SEG: "4"}
    return write(tmp_path, "job.yaml", job)


def test_platform_user_gets_automatic_placement_kubectl_user_does_not(tmp_path, capsys):
    path = _job_with_only_size(tmp_path)
    code, out, err = run(capsys, "-f", path, "-o", "yaml", "--user", "runai-platform",
                         "--platform-user", "runai-platform")
    assert code == 0, err
    worker = yaml.safe_load(out)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert worker == {SEG: "4", TOPO: "cluster-topology", SEG_PREF: HOST}

    code, out, err = run(capsys, "-f", path, "-o", "yaml", "--platform-user", "runai-platform")
    assert code == 0, err
    worker = yaml.safe_load(out)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert SEG_PREF not in worker


def test_platform_group_matches_request_groups(tmp_path, capsys):
    path = _job_with_only_size(tmp_path)
    code, out, err = run(capsys, "-f", path, "-o", "yaml", "--user", "svc", "--group", "platform",
                         "--platform-group", "platform")
    assert code == 0, err
    worker = yaml.safe_load(out)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert worker[SEG_PREF] == HOST


# ------------------------------------------------------------------ denials: exit 1, kubectl line

def test_segment_size_4x_is_denied_like_kubectl_shows_it(tmp_path, capsys):
    job = load_example("pytorchjob-tp4.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SEG] = "4x"
    path = write(tmp_path, "job.yaml", job)
    code, out, err = run(capsys, "-f", path, "-o", "yaml")
    assert code == 1
    assert out == ""
    line = err.strip().splitlines()[-1]
    assert line.startswith(f'Error from server (Forbidden): error when creating "{path}": {DENIAL_PREFIX}')
    assert SEG in line and '"4x"' in line


def test_update_changing_segment_size_is_denied(tmp_path, capsys):
    old = load_example("pytorchjob-tp4.yaml")
    new = load_example("pytorchjob-tp4.yaml")
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SEG] = "8"
    code, out, err = run(capsys, "-f", write(tmp_path, "new.yaml", new), "--operation", "UPDATE",
                         "--old", write(tmp_path, "old.yaml", old))
    assert code == 1
    assert "error when replacing" in err
    assert json.loads(out)["response"]["status"]["code"] == 403

    code, out, err = run(capsys, "-f", write(tmp_path, "same.yaml", old), "--operation", "UPDATE",
                         "--old", write(tmp_path, "old2.yaml", old))
    assert code == 0, err


def test_pod_review_stamps_segment_index(tmp_path, capsys):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "pytorch-tp4-worker-9",
                        "labels": {"training.kubeflow.org/replica-type": "worker",
                                   "training.kubeflow.org/replica-index": "9"},
                        "annotations": {SEG: "4", "kai.scheduler/topology": "cluster-topology"}},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    code, out, err = run(capsys, "-f", write(tmp_path, "pod.yaml", pod), "-o", "yaml")
    assert code == 0, err
    labels = yaml.safe_load(out)["metadata"]["labels"]
    assert labels["kai.scheduler/segment-index"] == "2"   # 9 // 4, DESIGN.md §7
    assert labels["kai.scheduler/subgroup-name"] == "worker-2"


# ------------------------------------------------------------------ usage errors: exit 2

@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "cannot read"),
        ("a: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", 'expected a Kubernetes object, got an array ["just", "a list"]'),
        ("kind: PyTorchJob\nmetadata: {name: x}\n", "apiVersion is missing"),
        ("apiVersion: 1\nkind: PyTorchJob\nmetadata: {name: x}\n",
         "document 1: apiVersion is 1, must be a string group/version (e.g. kubeflow.org/v1)"),
        ('apiVersion: "/"\nkind: PyTorchJob\nmetadata: {name: x}\n',
         'document 1: apiVersion is "/", must be group/version (e.g. kubeflow.org/v1) or a version (v1)'),
        ("apiVersion: kubeflow.org/v1\nkind: [PyTorchJob]\nmetadata: {name: x}\n",
         'document 1: kind is ["PyTorchJob"], must be a string kind name (e.g. PyTorchJob)'),
        ("", "no Kubernetes object found"),
        ("kind: Pod\napiVersion: v1\nspec: " + "[" * 5000 + "1" + "]" * 5000 + "\n",
         "m.yaml: nested too deeply to be a Kubernetes object"),
    ],
)
def test_unreadable_input_exits_2(tmp_path, capsys, content, needle):
    path = tmp_path / "m.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "-f", str(path))
    assert code == 2
    assert needle in err
    assert str(path) in err


def test_update_without_old_exits_2(capsys):
    code, _, err = run(capsys, "-f", example("pytorchjob-tp4.yaml"), "--operation", "UPDATE")
    assert code == 2
    assert "--operation UPDATE needs --old" in err


def test_unknown_default_topology_exits_2(capsys):
    code, _, err = run(capsys, "-f", example("pytorchjob-tp4.yaml"), "--default-topology", "nope")
    assert code == 2
    assert "--default-topology 'nope' is not a loaded topology; loaded: cluster-topology" in err


@pytest.mark.parametrize("name", ["", "Bad Name", "UPPER", "x-", "x" * 254])
def test_empty_or_invalid_default_topology_exits_2_naming_the_flag(capsys, name):
    with pytest.raises(SystemExit) as exc:  # argparse rejects it
        main(["review", "-f", example("pytorchjob-tp4.yaml"), "--default-topology", name])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --default-topology:" in err and "is not a Topology name" in err


def test_bad_topology_file_exits_2(tmp_path, capsys):
    topo = write(tmp_path, "t.yaml", "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: t}\nspec: {levels: []}\n")
    code, _, err = run(capsys, "-f", example("pytorchjob-tp4.yaml"), "--topology-file", topo)
    assert code == 2
    assert "--topology-file" in err and "spec.levels" in err


def test_topology_file_replaces_embedded_default(tmp_path, capsys):
    topo = write(tmp_path, "t.yaml", {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                                      "metadata": {"name": "other"},
                                      "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"},
                                                          {"nodeLabel": HOST}]}})
    code, _, err = run(capsys, "-f", example("pytorchjob-tp4.yaml"), "--topology-file", topo)
    assert code == 1  # cluster-topology is unknown now
    assert "cluster-topology" in err and "other" in err


def test_console_script_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "webhook.cli", "review", "-f", example("lws-segmented.yaml")],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run([sys.executable, "-m", "webhook.cli", "review", "-f", "/nonexistent.yaml"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2


def test_number_over_4300_digits_is_unreadable_input_exit_2(tmp_path, capsys):
    # Python refuses to convert integers of more than 4,300 digits; that is bad input (exit 2), not a denial
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: j}\n"
                    "spec: {pytorchReplicaSpecs: {Worker: {replicas: " + "9" * 5000 + "}}}\n")
    assert main(["review", "-f", str(path)]) == 2
    assert capsys.readouterr().err == f"segment-webhook review: error: {path}: a number has more than 4300 digits\n"


def test_topology_file_number_over_4300_digits_exit_2(tmp_path, capsys):
    topo = tmp_path / "topo.yaml"
    topo.write_text("kind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: a.io/b}]}\nextra: " + "9" * 5000 + "\n")
    assert main(["review", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--topology-file", str(topo)]) == 2
    assert capsys.readouterr().err == (
        f"segment-webhook review: error: --topology-file: {topo}: a number has more than 4300 digits\n")


# ------------------------------------------------------------------ issue 7, item 7: CLI papercuts

def test_review_piped_into_head_stops_quietly(tmp_path):
    items = [load_example("pytorchjob-tp4.yaml") for _ in range(200)]
    path = write(tmp_path, "list.yaml", {"apiVersion": "v1", "kind": "List", "items": items})
    proc = subprocess.Popen([sys.executable, "-m", "webhook.cli", "review", "-f", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None  # both are pipes
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert first == b"{\n"
    assert proc.wait(timeout=120) == 141  # 128 + SIGPIPE, as a shell reports a Unix tool killed by it
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_denials_name_the_webhooks_deploy_registers(tmp_path, capsys):
    deployed = [w["name"] for doc in yaml.safe_load_all((paths.REPO / "deploy" / "base" /
                                                         "webhooks.yaml").read_text())
                if doc and doc.get("kind") == "MutatingWebhookConfiguration" for w in doc["webhooks"]]
    assert deployed == ["workloads.segment-webhook.segments.dev", "pods.segment-webhook.segments.dev"]
    job = load_example("pytorchjob-tp4.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SEG] = "4x"
    _, _, err = run(capsys, "-f", write(tmp_path, "job.yaml", job))
    assert 'admission webhook "workloads.segment-webhook.segments.dev" denied the request: ' in err
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {SEG: 4}}}
    _, _, err = run(capsys, "-f", write(tmp_path, "pod.yaml", pod))
    assert 'Error from server (BadRequest): error when creating' in err
    assert 'admission webhook "pods.segment-webhook.segments.dev" denied the request: ' in err


def test_a_kind_the_webhook_does_not_handle_gets_a_note(tmp_path, capsys):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}
    code, _, err = run(capsys, "-f", write(tmp_path, "d.yaml", deployment))
    assert code == 0
    assert err == ("segment-webhook review: note: apps/v1 Deployment is not a kind the webhook handles "
                   "(PyTorchJob (kubeflow.org), LeaderWorkerSet (leaderworkerset.x-k8s.io), DistributedWorkload "
                   "(segments.dev), MPIJob (kubeflow.org), JobSet (jobset.x-k8s.io), RayCluster (ray.io), RayJob (ray.io), "
                   "RayService (ray.io), TrainJob (trainer.kubeflow.org), Job (batch), Pod); the deployed webhook never sees it, so it is allowed unchanged\n")


@pytest.mark.parametrize("api_version, kind, hint", [
    # new-user trial: `kind: PyTorchJobb` got the list of kinds and no hint
    ("kubeflow.org/v1", "PyTorchJobb", "; did you mean PyTorchJob (kubeflow.org)?"),
    ("kubeflow.org/v1", "pytorchjob", "; did you mean PyTorchJob (kubeflow.org)?"),  # compared case-insensitively
    ("v1", "ConfigMap", ""),  # far from every handled kind: no suggestion
])
def test_an_unhandled_kind_close_to_a_handled_one_gets_a_suggestion(tmp_path, capsys, api_version, kind, hint):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": {}}
    code, _, err = run(capsys, "-f", write(tmp_path, "x.yaml", obj))
    assert code == 0
    assert err == (f"segment-webhook review: note: {api_version} {kind} is not a kind the webhook handles "
                   "(PyTorchJob (kubeflow.org), LeaderWorkerSet (leaderworkerset.x-k8s.io), DistributedWorkload "
                   "(segments.dev), MPIJob (kubeflow.org), JobSet (jobset.x-k8s.io), RayCluster (ray.io), RayJob (ray.io), "
                   "RayService (ray.io), TrainJob (trainer.kubeflow.org), Job (batch), Pod); the deployed webhook never "
                   f"sees it, so it is allowed unchanged{hint}\n")


@pytest.mark.parametrize("name, text, message", [
    # new-user trial: the message quoted PyYAML's `in "<unicode string>", line 3, column 1` marks
    ("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata\n  name: x\n",
     "line 4, column 7: not valid YAML: could not find expected ':' (for the key that starts at line 3, column 1)\n"
     "fix: line 3 is read as a key but has no ':' after it: add ': ' after the key, or, when the line continues the "
     "value above it, indent it under that value or quote the value"),
    ("pod.json", '{"apiVersion": "v1", "kind": "Pod",\n "metadata": {"name": "p"\n}\n',
     "line 4, column 1: not valid JSON: Expecting ',' delimiter\n"
     "fix: check the JSON at line 4: a comma between items and none after the last, every key and string in double "
     "quotes, every { and [ closed"),
])
def test_a_syntax_error_names_file_line_column_and_fix(tmp_path, capsys, name, text, message):
    path = write(tmp_path, name, text)
    code, out, err = run(capsys, "-f", path)
    assert (code, out) == (2, "")
    assert err == f"segment-webhook review: error: {path}: {message}\n"


def test_a_topology_file_that_is_a_bare_list_is_named_with_its_document_and_fix(tmp_path, capsys):
    topologies = write(tmp_path, "t.yaml", "- 1\n")
    code, _, err = run(capsys, "-f", example("pytorchjob-tp4.yaml"), "--topology-file", topologies)
    assert code == 2
    assert err == (f"segment-webhook review: error: --topology-file: {topologies}: document 1: expected a Kubernetes "
                   'object, got an array [1] (objects in a bare array? put them in a List: {"apiVersion": "v1", '
                   '"kind": "List", "items": [...]})\n')


def test_yaml_with_a_tab_gets_a_fix(tmp_path, capsys):
    code, _, err = run(capsys, "-f", write(tmp_path, "tab.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n\tname: x\n"))
    assert code == 2
    assert err.endswith("fix: line 4 has a tab character; YAML indentation must use spaces, "
                        "so replace the tab with spaces\n")


def test_bind_outside_the_port_range_says_the_range(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--bind", "127.0.0.1:99999"])
    assert exit_info.value.code == 2
    assert ("argument --bind: '127.0.0.1:99999': port 99999 is outside the TCP port range 1-65535"
            in capsys.readouterr().err)


def test_admission_review_without_api_version_says_missing_not_none():
    from webhook.admission.config import AdmissionSettings
    from webhook.http import envelope
    from webhook.topology.objects import default_catalog

    outcome = envelope.handle({"kind": "AdmissionReview", "request": {"uid": "u"}}, default_catalog(), AdmissionSettings())
    assert outcome.message.startswith("malformed AdmissionReview: apiVersion is missing; this webhook speaks")
    outcome = envelope.handle({"apiVersion": None, "kind": "AdmissionReview", "request": {"uid": "u"}},
                              default_catalog(), AdmissionSettings())
    assert outcome.message.startswith("malformed AdmissionReview: apiVersion is null; ")


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_review_yaml_piped_into_head_exits_141(tmp_path, unbuffered):
    # -o yaml as -o json: with PYTHONUNBUFFERED=1 the text layer took one short write and dropped
    # the rest silently (exit 0); the shared writer (webhook/cli/output.py) writes every byte.
    items = [load_example("pytorchjob-tp4.yaml") for _ in range(300)]
    path = write(tmp_path, "list.yaml", {"apiVersion": "v1", "kind": "List", "items": items})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    proc = subprocess.Popen([sys.executable, "-m", "webhook.cli", "review", "-f", path, "-o", "yaml"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None  # both are pipes
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert first == b"apiVersion: kubeflow.org/v1\n"
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory) -> Path:
    """One gen-cluster file (1 zone, 2 blocks, 2 racks of 4 nodes) for the module's commands to read."""
    cluster = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    assert main(["gen-cluster", "--zones", "1", "--blocks", "2", "--racks", "2", "--nodes", "4", "-o", str(cluster)]) == 0
    return cluster


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux /dev/full")
@pytest.mark.parametrize("command", [
    ["review", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "-o", "yaml"],
    ["review", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml")],
    ["gen-cluster", "--zones", "1", "--blocks", "1", "--racks", "2", "--nodes", "2"],
    ["place", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml"), "--cluster", "CLUSTER", "-o", "json"],
    ["controller", "--once", "--snapshot", "CLUSTER", "-f", str(EXAMPLES / "pytorchjob-tp4.yaml")],
])
def test_output_to_a_full_device_is_one_line_exit_2(small_cluster, command):
    argv = [str(small_cluster) if part == "CLUSTER" else part for part in command]
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "webhook.cli", *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("Warning: ")]
    assert (proc.returncode, lines) == (
        2, [f"segment-webhook {command[0]}: error: cannot write output: No space left on device"])


def test_write_output_keeps_writing_after_a_short_write():
    from webhook.cli.output import write_output

    class ShortWrites(io.RawIOBase):
        name = "short-writes"  # what a text layer reads of the file it wraps

        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, chunk):
            taken = bytes(chunk[:3])  # a raw file may take fewer bytes than offered
            self.data += taken
            return len(taken)

    raw = ShortWrites()
    # what sys.stdout is under PYTHONUNBUFFERED=1: a text layer written through to a raw file
    text_over_raw = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    assert write_output("kind: Pod\nname: é\n", "review", text_over_raw) == 0
    assert raw.data.decode() == "kind: Pod\nname: é\n"


def test_duplicate_annotation_key_exits_2_instead_of_last_value_wins(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    text = Path(EXAMPLES / "pytorchjob-tp4.yaml").read_text()
    assert 'kai.scheduler/segment-size: "4"\n' in text
    path.write_text(text.replace('kai.scheduler/segment-size: "4"\n',
                                 'kai.scheduler/segment-size: "4x"\n            kai.scheduler/segment-size: "4"\n'))
    code, out, err = run(capsys, "-f", str(path))
    assert (code, out) == (2, "")
    assert 'mapping key "kai.scheduler/segment-size" already defined at line' in err and str(path) in err


def test_unquoted_yaml_timestamp_in_an_annotation_is_the_string_kubectl_sends(tmp_path, capsys):
    # kubectl's YAML (go-yaml v2) keeps a timestamp-like scalar as its text when decoding into an
    # untyped value, so the API server receives the string "2024-01-01T10:00:00Z": allowed.
    path = write(tmp_path, "d.yaml", (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n"
        "metadata: {name: x, annotations: {created: 2024-01-01T10:00:00Z, kai.scheduler/topology: cluster-topology}}\n"
        "spec: {pytorchReplicaSpecs: {Worker: {replicas: 4, template: {metadata: {annotations: "
        "{kai.scheduler/segment-size: \"2\", built: 2024-01-01}}}}}}\n"))
    code, out, err = run(capsys, "-f", path, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["response"]["allowed"] is True


def test_yaml_output_keeps_non_ascii_text_readable(tmp_path, capsys):
    path = write(tmp_path, "u.yaml", 'apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n'
                 'metadata: {name: jöb, annotations: {note: "загрузка 🚀"}}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: 2}}}\n')
    code, out, err = run(capsys, "-f", path, "-o", "yaml")
    assert code == 0, err
    assert "  name: jöb\n" in out and "    note: загрузка 🚀\n" in out


# ---------------------------------------------------------------- exit statuses come from the error class

def test_an_error_escaping_a_command_exits_with_its_own_exit_code(monkeypatch, capsys):
    # webhook.cli.main prints any SegmentWebhookError a command raises and exits with the class's
    # exit_code (webhook/errors.py): 1 denied, 2 bad input, 70 a bug; no per-command table
    from webhook.cli import review as review_command
    from webhook.controller.main import WorkloadDenied
    from webhook.placement.verify import PlacementBug
    from webhook.planning.manifests import ManifestError

    for raised, code in ((WorkloadDenied("w.yaml: denied by the webhook: no"), 1),
                         (ManifestError("m.yaml", "no Kubernetes object found"), 2),
                         (PlacementBug("placement engine broke the workload required level (bug)"), 70)):
        def command(args, raised=raised):
            raise raised

        monkeypatch.setattr(review_command, "run", command)
        assert main(["review", "-f", "-"]) == code
        assert capsys.readouterr().err == f"segment-webhook review: error: {raised}\n"


def test_a_missing_manifest_exits_2_naming_the_file(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    assert main(["review", "-f", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"segment-webhook review: error: {missing}: ")


# ------------------------------------------------------------------ new-user trial (s3-cli2)

def test_an_unreadable_old_manifest_names_the_old_flag(tmp_path, capsys):
    # new-user trial: "segment-webhook review: error: /nonexistent: cannot read" did not say --old
    missing = tmp_path / "missing.yaml"
    code, out, err = run(capsys, "-f", example("pytorchjob-tp4.yaml"), "--operation", "UPDATE", "--old", str(missing))
    assert (code, out) == (2, "")
    assert err == f"segment-webhook review: error: --old: {missing}: cannot read: No such file or directory" + READ_FIX + "\n"


def test_a_denial_in_a_multi_document_file_names_the_document(tmp_path, capsys):
    # new-user trial: a good object then a bad one was denied without saying which document
    good = load_example("pytorchjob-tp4.yaml")
    bad = load_example("pytorchjob-tp4.yaml")
    bad["metadata"]["name"] = "bad"
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][SEG] = "4x"
    path = tmp_path / "multi.yaml"
    path.write_text(yaml.safe_dump_all([good, bad]))
    code, _, err = run(capsys, "-f", str(path))
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith(f'Error from server (Forbidden): error when creating "{path}: document 2": {DENIAL_PREFIX}')
    # one object: the file name alone, as kubectl prints it
    code, _, err = run(capsys, "-f", write(tmp_path, "one.yaml", bad))
    assert code == 1
    assert f'error when creating "{tmp_path / "one.yaml"}": {DENIAL_PREFIX}' in err


@pytest.mark.parametrize("content, message", [
    ("", "no Kubernetes object found; fix: give a file with at least one object (apiVersion, kind, metadata); "
         "is it empty, or only comments and ---?"),
    ("# only a comment\n---\n", "no Kubernetes object found; fix: give a file with at least one object (apiVersion, "
                                "kind, metadata); is it empty, or only comments and ---?"),
    ("hello\n", 'document 1: expected a Kubernetes object, got a string "hello"; fix: give Kubernetes objects, each a '
                "mapping with apiVersion, kind and metadata (is this the right file?)"),
])
def test_an_empty_or_scalar_manifest_gets_a_fix(tmp_path, capsys, content, message):
    path = write(tmp_path, "m.yaml", content)
    code, out, err = run(capsys, "-f", path)
    assert (code, out) == (2, "")
    assert err == f"segment-webhook review: error: {path}: {message}\n"


@pytest.mark.parametrize("argv, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--bogus", "review", "-f", "x.yaml"], "unrecognized arguments: --bogus"),
    ([], "the following arguments are required: COMMAND"),
])
def test_an_unknown_top_level_flag_is_named(capsys, argv, message):
    # new-user trial: `segment-webhook --bogus` said only "the following arguments are required: COMMAND"
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("usage: segment-webhook [-h] [--version] COMMAND ...\n")
    assert err.endswith(f"segment-webhook: error: {message}\n")


def test_review_refuses_a_topology_with_hostname_above_the_lowest_level(capsys, tmp_path):
    # issue 37 "review accepts a Topology whose first level is kubernetes.io/hostname" (KAI's CRD:
    # "the kubernetes.io/hostname label can only be used at the lowest level of topology")
    path = write(tmp_path, "topology.yaml", {
        "apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "cluster-topology"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "cloud.provider.com/topology-rack"}]}})
    code, _, err = run(capsys, "-f", path)
    assert code == 1
    assert err == (f'segment-webhook review: error: {path}: Topology "cluster-topology": spec.levels[0].nodeLabel '
                   "kubernetes.io/hostname is not the lowest level, and Kubernetes refuses the Topology (its CRD: "
                   "kubernetes.io/hostname can only be the lowest level); fix: move kubernetes.io/hostname to the "
                   "end of spec.levels\n")
