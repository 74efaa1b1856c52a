"""README "A five-minute tour": what its console blocks show is what the commands print.

New-user trial F5/F6: step 1 showed only the denial although `review` also prints the
AdmissionReview JSON on stdout, step 2 left out the `kai-flat-gang` warning `place` prints on
stderr under the default target kai, and step 3's comment on `gen-cluster --labels eks` was
garbled. Each command is run here (``webhook.cli.main``, from a temporary directory, as the README
runs them with ``../shared`` beside the repository) and compared with the README's lines.
"""

from __future__ import annotations

import yaml

from tests.conftest import EXAMPLES, REPO
from webhook.cli import main

README = (REPO / "README.md").read_text(encoding="utf-8")
DW = str(EXAMPLES / "distributedworkload-native.yaml")


def block_after(command: str) -> list[str]:
    """The README console lines printed by ``$ command`` (up to the next command or the block's end)."""
    lines = README.splitlines()
    start = lines.index(f"$ {command}") + 1
    out = []
    for line in lines[start:]:
        if line.startswith(("$ ", "```")):
            break
        out.append(line)
    return out


def test_step_1_sends_the_json_to_dev_null_and_shows_the_denial(tmp_path, capsys, monkeypatch):
    shown = block_after('segment-webhook review -f bad.yaml >/dev/null; echo "exit $?"   # stdout: the AdmissionReview JSON')
    text = (EXAMPLES / "pytorchjob-tp4.yaml").read_text(encoding="utf-8").replace('segment-size: "4"', 'segment-size: "4x"')
    (tmp_path / "bad.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code = main(["review", "-f", "bad.yaml"])
    out, err = capsys.readouterr()
    assert '"kind": "AdmissionReview"' in out  # what the README sends to /dev/null
    assert shown == [err.rstrip("\n"), f"exit {code}"]
    assert shown[1] == "exit 1"
    assert shown[0].startswith('Error from server (Forbidden): error when creating "bad.yaml": admission webhook ')


def test_step_2_shows_the_kai_flat_gang_warning_and_the_placement(tmp_path, capsys):
    cluster = str(tmp_path / "cluster.yaml")
    assert main(["gen-cluster", "--zones", "2", "--blocks", "2", "--racks", "4", "--nodes", "8", "--gpus", "8",
                 "--fill", "0.1", "--seed", "1", "-o", cluster]) == 0
    capsys.readouterr()
    assert main(["place", "-f", DW, "--cluster", cluster]) == 0
    out, err = capsys.readouterr()
    shown = block_after("segment-webhook place -f ../shared/examples/distributedworkload-native.yaml --cluster cluster.yaml")
    assert shown[0] == ("Warning: DistributedWorkload llama-tp8: KAI flattens pods DistributedWorkload owns: segments "
                        "(size 8, preferred level) not enforced; --gate-pods does")
    assert shown == err.splitlines() + out.splitlines()
    # the README's sentence under the block names the target that enforces it
    assert "The warning is for the default target `kai`" in README and "`--target gate`" in README
    # under target gate the same placement and no warning
    assert main(["place", "-f", DW, "--cluster", cluster, "--target", "gate"]) == 0
    gate_out, gate_err = capsys.readouterr()
    assert gate_err == "" and gate_out == out


def test_step_3_eks_comment_says_what_gen_cluster_writes(tmp_path):
    assert "$ segment-webhook gen-cluster --labels eks -o eks.yaml      # 64 p5.48xlarge nodes, labelled as EKS " \
           "labels them" in README
    path = tmp_path / "eks.yaml"
    assert main(["gen-cluster", "--labels", "eks", "-o", str(path)]) == 0
    nodes = [item for item in yaml.safe_load(path.read_text(encoding="utf-8"))["items"] if item["kind"] == "Node"]
    assert len(nodes) == 64
    assert {node["metadata"]["labels"]["node.kubernetes.io/instance-type"] for node in nodes} == {"p5.48xlarge"}
