"""The README is the first five minutes: short, with a table of contents, the two commands,
and links into docs/ that resolve."""

from __future__ import annotations

import re

from tests.docs.doc_examples import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def _anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_readme_is_short() -> None:
    assert len(README.split()) < 2500, len(README.split())


def test_readme_has_a_table_of_contents_that_resolves() -> None:
    toc = README.split("## Contents", 1)[1].split("\n## ", 1)[0]
    targets = re.findall(r"\]\(#([^)]+)\)", toc)
    headings = {_anchor(h) for h in re.findall(r"^## (.+)$", README, flags=re.M)}
    assert len(targets) >= 4
    assert set(targets) <= headings, set(targets) - headings


def test_readme_keeps_the_two_commands() -> None:
    # .ci/run calls `make test`; this is the block newcomers copy.
    assert "make run    # installs nel once" in README
    assert "make test   # installs nel + test deps" in README


def test_readme_links_into_docs_resolve() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert len(links) >= 20
    missing = [link for link in links if not (REPO_ROOT / link).is_file()]
    assert not missing, missing
