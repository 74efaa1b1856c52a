"""The ``kueue`` target: every error of one object at once (DESIGN.md §5) and Kueue's versions
(DESIGN.md §9b; issue 37 items 3 and 6).

Kueue facts: before v0.20 a PodSet whose count the slice size does not divide is admitted with
``count // size`` slices and its remaining pods stay gated forever (kueue #15277); from v0.20 the
``TASPartialSlices`` feature gate is on by default and Kueue places a partial last slice, made of
the highest ranks, for a single slice layer (kubernetes-sigs/kueue #15640 "TAS: place a partial
PodSet slice": ``tailResidue = total % sliceSize``, "Only the last domain may hold a partial slice").
"""

from __future__ import annotations

import argparse

import jsonpatch
import pytest
import yaml

from tests.conftest import SIZE, make_request
from tests.support import paths
from tests.unit.admission.test_targets import CATALOG, K_SIZE, K_SLICE, RACK, job
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.admission.targets import kueue_podset
from webhook.admission.workload_plan import Plan
from webhook.cli import main
from webhook.cli.flags import kueue_version

MANIFESTS = paths.DATA / "manifests"
KUEUE_17, KUEUE_20 = AdmissionSettings(target="kueue"), AdmissionSettings(target="kueue", kueue_version=(0, 20))


def trainjob(size: str = "4", nodes: int = 10) -> dict:
    obj = yaml.safe_load((MANIFESTS / "trainjob-torch.yaml").read_text())
    obj["metadata"]["annotations"][SIZE] = size
    obj["spec"]["trainer"]["numNodes"] = nodes
    return obj


def test_a_trainjob_with_a_partial_segment_under_kueue_gets_both_denials_in_one_message():
    # before: only the partial segment was denied; its fix led to a second denial
    d = review(make_request(trainjob()), CATALOG, KUEUE_17)
    assert d.message == (
        '2 problems: (1) metadata.annotations["kai.scheduler/segment-size"] = "4": target kueue: Kueue\'s PodSet '
        "has 10 pods and slices of 4 leave 2 pods gated forever on Kueue before v0.20 (kueue #15277; "
        "--kueue-version is 0.17) (rule target-cannot-express); fix: a segment size dividing 10 (2, 5, 10), or "
        "target kai, or --kueue-version 0.20 on Kueue v0.20+. (2) kind = \"TrainJob\": target kueue: TrainJob's "
        "pod template is not one Kueue reads PodSet annotations from (rule target-cannot-express); fix: choose "
        "target kai for this kind.")


def test_the_fix_names_gate_only_when_the_webhook_serves_it():
    d = review(make_request(trainjob(size="5")), CATALOG, AdmissionSettings(target="kueue", gate_pods=True))
    assert d.message == (
        'kind = "TrainJob": target kueue: TrainJob\'s pod template is not one Kueue reads PodSet annotations '
        "from (rule target-cannot-express); fix: choose target kai or gate for this kind.")


def test_a_partial_slice_and_a_slice_broader_than_the_podset_are_denied_together():
    obj = job(completions=10, seg_req="topology.kubernetes.io/zone")
    d = review(make_request(obj), CATALOG, KUEUE_17)
    assert [v.rule for v in d.violations] == ["segment-required-broader-than-workload", "target-cannot-express"]


def test_kueue_0_20_admits_a_partial_last_segment_with_the_gate_named():
    obj = job(completions=10)
    d = review(make_request(obj), CATALOG, KUEUE_20)
    assert d.allowed, d.message
    assert d.warnings == ["10 completions / segment size 4: last segment has 2 pods",
                          "target kueue: last slice of 2 pods placed partial by Kueue v0.20 (gate "
                          "TASPartialSlices, on by default)"]
    template = jsonpatch.apply_patch(obj, d.patch)["spec"]["template"]["metadata"]["annotations"]
    assert template[K_SLICE] == RACK and template[K_SIZE] == "4"


def test_kueue_0_20_partial_slice_holds_our_last_segment():
    # Kueue: slice = rank // size, the partial one last (#15640); our segment-index: index // size (§7)
    d = review(make_request(job(completions=10)), CATALOG, KUEUE_20)
    assert d.allowed
    from webhook.admission.kinds import job as job_kind
    from webhook.admission.verdict import Decision
    plan = job_kind.analyse(job(completions=10), make_request(job(completions=10)), CATALOG, KUEUE_20,
                            Decision(kind="Job"))
    assert isinstance(plan, Plan)
    podset = kueue_podset("Job", job(completions=10), plan, 4)
    assert podset is not None and podset.slices == (0, 0, 0, 0, 1, 1, 1, 1, 2, 2)


def test_a_single_pod_left_over_is_said_in_the_singular():
    d = review(make_request(job(completions=9)), CATALOG, KUEUE_20)
    assert d.warnings == ["9 completions / segment size 4: last segment has 1 pod",
                          "target kueue: last slice of 1 pod placed partial by Kueue v0.20 (gate "
                          "TASPartialSlices, on by default)"]


@pytest.mark.parametrize("text, version", [("0.17", (0, 17)), ("v0.20", (0, 20)), ("0.20.1", (0, 20)),
                                           ("1.0", (1, 0))])
def test_kueue_version_flag_values(text, version):
    assert kueue_version(text) == version


@pytest.mark.parametrize("text", ["0", "x.y", "0.20.1.4", "", "0.-1"])
def test_kueue_version_flag_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        kueue_version(text)


def test_review_kueue_version_flag(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(completions=10)))
    assert main(["review", "--target", "kueue", "-f", str(path)]) == 1
    assert main(["review", "--target", "kueue", "--kueue-version", "0.20", "-f", str(path)]) == 0
    err = capsys.readouterr().err
    assert "Warning: target kueue: last slice of 2 pods placed partial by Kueue v0.20" in err
