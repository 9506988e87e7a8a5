"""The README is a front page: short, the two commands on its first screen, no commit hashes
(history lives in commit messages), and every relative link in it and in docs/ resolves."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS = ("bash tools/setup.sh && .venv/bin/python tools/suite.py && "
            ".venv/bin/python tools/attribute.py --html results/attribution.html",
            "bash tools/setup.sh && .venv/bin/python -m pytest -q")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_a_front_page_with_both_commands_on_its_first_screen():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    first_screen = "\n".join(lines[:25])
    assert all(c in first_screen for c in COMMANDS)


def test_ci_runs_the_readmes_test_command():
    assert "pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_readme_names_no_commit_of_this_repository():
    words = set(re.findall(r"\b[0-9a-f]{7,40}\b", README.read_text()))
    found = []
    for word in words:
        kind = subprocess.run(["git", "cat-file", "-t", word], cwd=ROOT, capture_output=True,
                              text=True)
        if kind.returncode == 0 and kind.stdout.strip() == "commit":
            found.append(word)
    assert found == []


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in md.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return out


def test_every_relative_link_in_the_readme_and_docs_resolves():
    bad = []
    for md in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(md.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # an address outside the repository
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists() or (anchor and dest.suffix == ".md"
                                     and anchor not in _anchors(dest)):
                bad.append(f"{md.relative_to(ROOT)}: {target}")
    assert bad == []
