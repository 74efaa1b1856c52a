"""docs/reference/*.md are generated from the code's registries (hack/gen_reference.py): the
committed files must equal what the generator writes now, so a new rule, warning, metric, flag or
key reaches the docs in the same commit. No test parses prose."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO

REGENERATE = "python3 hack/gen_reference.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "hack" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATED = _generator().render_all()


def test_the_generator_writes_the_five_references():
    assert sorted(GENERATED) == ["annotations.md", "flags.md", "metrics.md", "rules.md", "warnings.md"]


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_committed_reference_equals_the_generated_one(name):
    path = REPO / "docs" / "reference" / name
    committed = path.read_text(encoding="utf-8") if path.is_file() else ""
    assert committed == GENERATED[name], f"docs/reference/{name} is stale; regenerate it with: {REGENERATE}"


def test_the_references_name_what_the_registries_hold():
    from webhook.admission.rules import RULES
    from webhook.admission.warning_rules import WARNINGS

    # each id in its own table row; the kind label lists the registry's kinds
    assert all(f"| `{rule_id}` |" in GENERATED["rules.md"] for rule_id in RULES)
    assert all(f"| `{warning_id}` |" in GENERATED["warnings.md"] for warning_id in WARNINGS)
    assert "`TrainJob`" in GENERATED["metrics.md"] and "`segment_webhook_denials_total`" in GENERATED["metrics.md"]
    assert "## `segment-webhook topology check`" in GENERATED["flags.md"] and "`--selector`" in GENERATED["flags.md"]
    assert "| `kai.scheduler/segment-size` |" in GENERATED["annotations.md"]
    assert "| `segments.dev/placement` |" in GENERATED["annotations.md"]


def test_check_mode_names_the_stale_file_and_the_command(tmp_path, monkeypatch, capsys):
    generator = _generator()
    monkeypatch.setattr(generator, "REFERENCE", tmp_path)
    (tmp_path / "rules.md").write_text("stale\n")
    assert generator.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert f"docs/reference/rules.md is stale; regenerate with: {REGENERATE}" in err
    assert generator.main([]) == 0 and generator.main(["--check"]) == 0
    sys.modules.pop("gen_reference", None)


def test_the_readme_stays_a_short_users_page():
    # everything else lives in docs/ (issue: a user's README of at most 300 lines)
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 300
