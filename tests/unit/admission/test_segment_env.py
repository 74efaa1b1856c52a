"""``serve --segment-env`` / ``review --segment-env`` (DESIGN.md §3b "Segment facts in the pod"):
every container of a segmented pod gets ``KAI_SEGMENT_INDEX`` (downward API ``fieldRef`` on the
``kai.scheduler/segment-index`` label, so a label written at release works too) and
``KAI_SEGMENT_SIZE``; a name the container already sets is never changed; off by default."""

from __future__ import annotations

import jsonpatch
import pytest
import yaml

from tests.conftest import SEG_REQ, SIZE, TOPO, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.topology.objects import default_catalog

CATALOG = default_catalog()
ENV = AdmissionSettings(segment_env=True)
INDEX_VAR = {"name": "KAI_SEGMENT_INDEX",
             "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kai.scheduler/segment-index']"}}}
KEYS = {TOPO: "cluster-topology", SIZE: "4", SEG_REQ: "cloud.provider.com/topology-rack"}


def pod(labels, annotations=KEYS, containers=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team-a", "labels": dict(labels), "annotations": dict(annotations)},
            "spec": {"containers": containers if containers is not None else
                     [{"name": "a", "image": "i"}, {"name": "b", "image": "i", "env": [{"name": "X", "value": "1"}]}]}}


WORKER = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "5"}


def admitted(obj, settings=ENV):
    d = review(make_request(obj), CATALOG, settings)
    assert d.allowed
    return d, jsonpatch.apply_patch(obj, d.patch)


def test_off_by_default():
    _, out = admitted(pod(WORKER), AdmissionSettings())
    assert "env" not in out["spec"]["containers"][0]


def test_every_container_of_a_segmented_pod_gets_index_and_size():
    _, out = admitted(pod(WORKER))
    a, b = out["spec"]["containers"]
    assert a["env"] == [INDEX_VAR, {"name": "KAI_SEGMENT_SIZE", "value": "4"}]
    assert b["env"] == [{"name": "X", "value": "1"}, INDEX_VAR, {"name": "KAI_SEGMENT_SIZE", "value": "4"}]
    assert out["metadata"]["labels"]["kai.scheduler/segment-index"] == "1"  # what the fieldRef reads


def test_a_name_the_container_sets_is_never_changed():
    mine = {"name": "KAI_SEGMENT_SIZE", "value": "mine"}
    _, out = admitted(pod(WORKER, containers=[{"name": "a", "image": "i", "env": [mine]}]))
    assert out["spec"]["containers"][0]["env"] == [mine, INDEX_VAR]


@pytest.mark.parametrize("labels, annotations", [
    ({"training.kubeflow.org/replica-type": "master"}, KEYS),  # the Master is never segmented
    (WORKER, {SIZE: "4"}),  # no topology: no segments (DESIGN.md §5)
    ({"app": "web"}, {}),
])
def test_pods_that_are_not_segment_members_get_nothing(labels, annotations):
    _, out = admitted(pod(labels, annotations))
    assert all("KAI_SEGMENT_INDEX" not in str(c.get("env")) for c in out["spec"]["containers"])


def test_a_ray_worker_without_index_labels_gets_the_variables_for_the_label_written_at_release():
    labels = {"ray.io/cluster": "c", "ray.io/node-type": "worker", "ray.io/group": "gpu"}
    d, out = admitted(pod(labels, {**KEYS, "segments.dev/num-of-hosts": "1"}))
    assert "kai.scheduler/segment-index" not in out["metadata"]["labels"]
    assert out["spec"]["containers"][0]["env"] == [INDEX_VAR, {"name": "KAI_SEGMENT_SIZE", "value": "4"}]


def test_with_gate_pods_both_are_written():
    ann = {**KEYS, "segments.dev/gang-size": "8"}
    labels = {**WORKER, "training.kubeflow.org/job-name": "job"}
    _, out = admitted(pod(labels, ann), AdmissionSettings(segment_env=True, gate_pods=True))
    assert out["spec"]["schedulingGates"] == [{"name": "segments.dev/placement"}]
    assert out["spec"]["containers"][0]["env"][0] == INDEX_VAR


@pytest.mark.parametrize("value, expected", [("true", True), ("0", False), ("", False)])
def test_serve_segment_env_flag_and_variable(value, expected):
    from webhook.cli import build_parser, flags

    args = flags.apply_env(build_parser().parse_args(["serve"]), {"SEGMENT_WEBHOOK_SEGMENT_ENV": value})
    assert args.segment_env is expected
    assert flags.apply_env(build_parser().parse_args(["serve", "--segment-env"]), {}).segment_env is True


def test_review_segment_env(tmp_path, capsys):
    from webhook.cli import main

    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod(WORKER)))
    assert main(["review", "-f", str(path), "--segment-env", "-o", "yaml"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["spec"]["containers"][0]["env"][0] == INDEX_VAR
