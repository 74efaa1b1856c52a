"""Every reference to a README or docs section, in code and docs, names a section that exists.

Two spellings are checked (issue 38 item 5; 25 such references once pointed at README sections
that had moved to docs/, one of them in a user-facing error):

* a Markdown link with an anchor, ``[text](path.md#anchor)``: the file exists relative to the
  file holding the link (or to the repository root, for paths written from the root in code), and
  the anchor is the GitHub slug of one of its headings (lower case, punctuation other than ``-``
  and ``_`` dropped, spaces to ``-``, ``-1``, ``-2`` for repeats);
* prose, ``README "Title"`` or ``docs/file.md "Title"`` (optionally ``README's``, ``section``): the
  title is a heading of that file, or the start of one followed by ``:`` or `` (``.

Every link to a file of the repository (anchor or not) and every path written out as
``docs/...`` or ``tests/...`` names a file that exists (issue 38 item 5: the tests and the docs
moved into folders; a reference left at an old path fails here).

Files quoting other repositories' paths (the upstream sample corpus, upstream CRDs) are not read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import paths

ROOT = paths.REPO

#: Where references are looked for, relative to the root.
SCANNED = ("README.md", "CHANGELOG.md", "certs", "docs", "webhook", "hack", "deploy", "tests", "benchmarks", "setup.cfg")
#: Files that quote upstream repositories' own docs paths, not ours.
NOT_OURS = ("tests/data/upstream_samples", "tests/data/crds", "tests/unit/admission/test_upstream_samples.py", "tests/unit/project/test_doc_references.py")
#: Generators whose links are written into files of another folder, resolved from there.
WRITTEN_INTO = {"hack/gen_reference.py": "docs/reference"}
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".tpl", ".txt", ".cfg", ".json"}

LINK = re.compile(r"\]\(([\w./-]*\.md)?#([\w-]+)\)")
PROSE = re.compile(r"\b(README(?:\.md)?|docs/[\w/-]+\.md)(?:'s)?[,:]? (?:section )?\"([^\"\n]{2,100})\"")
HEADING = re.compile(r"#{1,6}\s+(.*?)\s*#*\s*$")
#: A link to a file, anchor or not: ``[text](path)`` or ``[text](path#anchor)``.
FILE_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
#: A path of the repository written out in code or prose: ``docs/tasks/operations.md``, ``tests/support/serving.py``.
NAMED_PATH = re.compile(r"(?<![\w/.-])((?:docs|tests)/[\w./-]*\.(?:md|py|yaml|svg))")


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-``/``_`` dropped, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def headings(path: Path) -> tuple[set[str], list[str]]:
    """(anchors, titles) of a Markdown file's headings, fenced code blocks skipped."""
    anchors: set[str] = set()
    titles: list[str] = []
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            title = match.group(1)
            titles.append(title)
            base = slug(title)
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors, titles


def title_matches(wanted: str, titles: list[str]) -> bool:
    """``wanted`` is a heading, or the start of one followed by ``:`` or `` (`` (case-insensitive)."""
    wanted = wanted.strip().lower()
    for title in titles:
        title = title.lower().replace("`", "")
        if title == wanted.replace("`", "") or title.startswith((wanted + ":", wanted + " (")):
            return True
    return False


def broken_references(path: Path, text: str, root: Path = ROOT) -> list[str]:
    """Each reference in ``text`` (read from ``path``) that names no existing section, as a line."""
    problems: list[str] = []
    for match in LINK.finditer(text):
        target, anchor = match.groups()
        if target is None:  # a same-page anchor: a heading of this Markdown file
            if path.suffix != ".md":
                continue
            target = path.name
        candidates = [path.parent / target, root / target]
        if path.is_relative_to(root) and path.relative_to(root).as_posix() in WRITTEN_INTO:
            candidates.append(root / WRITTEN_INTO[path.relative_to(root).as_posix()] / target)
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            problems.append(f"{path}: link to {target}#{anchor}: no such file")
        elif anchor not in headings(found)[0]:
            problems.append(f"{path}: link to {target}#{anchor}: no heading has that anchor")
    for match in PROSE.finditer(text):
        target, title = match.groups()
        file = root / ("README.md" if target.startswith("README") else target)
        if not file.is_file():
            problems.append(f'{path}: {target} "{title}": no such file')
        elif not title_matches(title, headings(file)[1]):
            problems.append(f'{path}: {target} "{title}": no such heading')
    return problems


def missing_files(path: Path, text: str, root: Path = ROOT) -> list[str]:
    """Each link of a Markdown file (or of a generator writing one) to a file that does not exist,
    and each ``docs/...`` or ``tests/...`` path written out that does not exist, as a line. Web
    addresses (``https:``) and links built at run time (``{...}``) are not files of the repository."""
    problems: list[str] = []
    relative = path.relative_to(root).as_posix() if path.is_relative_to(root) else ""
    links = FILE_LINK.finditer(text) if path.suffix == ".md" or relative in WRITTEN_INTO else ()
    for match in links:
        target = match.group(1)
        if re.match(r"[a-z]+:", target) or "{" in target:
            continue
        candidates = [path.parent / target, root / target]
        if relative in WRITTEN_INTO:
            candidates.append(root / WRITTEN_INTO[relative] / target)
        if not any(c.exists() for c in candidates):
            problems.append(f"{path}: link to {target}: no such file")
    for match in NAMED_PATH.finditer(text):
        if not (root / match.group(1)).exists():
            problems.append(f"{path}: {match.group(1)}: no such file")
    return problems


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for entry in SCANNED:
        top = ROOT / entry
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in candidates:
            relative = path.relative_to(ROOT).as_posix()
            if (path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts
                    and not relative.startswith(NOT_OURS)):
                files.append(path)
    return files


def test_every_section_reference_resolves() -> None:
    problems = [line for path in _scanned_files()
                for line in broken_references(path, path.read_text(encoding="utf-8", errors="replace"))]
    assert problems == []


def test_every_linked_or_named_file_exists() -> None:
    problems = [line for path in _scanned_files()
                for line in missing_files(path, path.read_text(encoding="utf-8", errors="replace"))]
    assert problems == []


@pytest.mark.parametrize("text, expected", [
    ("[x](../concepts/admission.md)", None),                       # written from docs/reference/
    ("[x](../admission.md)", "link to ../admission.md: no such file"),  # where it was before docs/concepts/
    ("[x](docs/tasks/operations.md#failure-policy)", None),
    ("[x](https://github.com/kubernetes/kubernetes)", None),
    ("see tests/unit/http/test_http_app.py", None),
    ("see tests/test_http_app.py", "tests/test_http_app.py: no such file"),  # before tests/unit/http/
    ("docs/operations.md says", "docs/operations.md: no such file"),
])
def test_a_planted_path_is_judged(text: str, expected: str | None) -> None:
    problems = missing_files(ROOT / "docs" / "reference" / "planted.md", text)
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].endswith(expected)


def test_the_scan_reads_the_files_that_hold_references() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in _scanned_files()}
    assert {"README.md", "webhook/errors.py", "deploy/base/webhooks.yaml", "docs/reference/rules.md"} <= names


@pytest.mark.parametrize("text, expected", [
    ('see README "No such section here"', 'README "No such section here": no such heading'),
    ('see docs/tasks/operations.md "Failure policy"', None),
    ('see docs/tasks/operations.md "Serving"', None),                  # "Serving: connections, ..."
    ('see docs/tasks/operations.md "Rollouts"', None),                 # "Rollouts (DESIGN.md §10: ...)"
    ('see docs/tasks/operations.md "Roll"', 'docs/tasks/operations.md "Roll": no such heading'),
    ('see docs/nowhere.md "Failure policy"', 'docs/nowhere.md "Failure policy": no such file'),
    ("[x](docs/tasks/operations.md#failure-policy)", None),
    ("[x](docs/tasks/operations.md#failure-policies)", "link to docs/tasks/operations.md#failure-policies: no heading has that anchor"),
    ("[x](../concepts/admission.md#every-rejection-a-user-can-meet)", None),  # written from docs/reference/
    ('(README: "Changing the CA")', 'README "Changing the CA": no such heading'),
])
def test_a_planted_reference_is_judged(text: str, expected: str | None) -> None:
    problems = broken_references(ROOT / "docs" / "reference" / "planted.md", text)
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].endswith(expected)


def test_slug_follows_github() -> None:
    assert slug("Rollouts (DESIGN.md §10: a rollout loses no review)") == "rollouts-designmd-10-a-rollout-loses-no-review"
    assert slug("Running the webhook: `segment-webhook serve`") == "running-the-webhook-segment-webhook-serve"


def test_the_architecture_map_names_every_module():
    # docs/concepts/ARCHITECTURE.md's package map is what a new contributor reads first (new-user trial,
    # issue 38: six modules were missing from it): every module of webhook/ is named in it
    text = (ROOT / "docs" / "concepts" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text[text.index("```\nwebhook/"):]
    block = block[:block.index("\n```", 4)]
    names = {word for line in block.splitlines() for word in line.split()}
    missing = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "webhook").rglob("*.py")
                     if path.name not in ("__init__.py", "__main__.py") and "__pycache__" not in path.parts
                     and path.name not in names)
    assert missing == []
