"""The YAML config examples of the docs and the README, as the docs tests check them.

A fenced ```yaml block is a whole nel config unless an HTML comment `<!-- fragment -->`
stands before it (a partial block, shown to explain some keys). `<!-- needs: TEXT -->` marks
an example that plans only where something outside nel is present (a Docker image, task
files, an agent's CLI): without it, its dry run must fail in one line naming TEXT (or one
of `A | B`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FRAGMENT = "<!-- fragment -->"
_NEEDS = re.compile(r"^<!-- needs: (.+?) -->$")
_FENCE = re.compile(r"^```yaml\s*$")


@dataclass(frozen=True)
class Example:
    """One YAML block: where it is and its text."""

    path: Path
    line: int
    text: str
    fragment: bool
    needs: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    """The README and every page of the site."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def yaml_examples() -> list[Example]:
    """Every ```yaml block of the docs, in page order."""
    out = []
    for path in doc_files():
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            if _FENCE.match(lines[i]):
                j = i + 1
                while j < len(lines) and lines[j].strip() != "```":
                    j += 1
                prev = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
                needs = _NEEDS.match(prev)
                out.append(Example(path, i + 1, "\n".join(lines[i + 1:j]) + "\n", prev == FRAGMENT,
                                   needs.group(1) if needs else None))
                i = j
            i += 1
    return out


_SHELL_FENCE = re.compile(r"^```(bash|sh|shell|console)\s*$")


@dataclass(frozen=True)
class Command:
    """One shell command of a ```bash block (backslash continuations joined), with the
    block's text and the prose right after it (where a page says how to scale it)."""

    path: Path
    line: int
    text: str
    context: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def shell_commands() -> list[Command]:
    """Every command line of the docs' shell blocks, in page order."""
    out = []
    for path in doc_files():
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            if _SHELL_FENCE.match(lines[i]):
                j = i + 1
                while j < len(lines) and lines[j].strip() != "```":
                    j += 1
                block = lines[i + 1:j]
                after = "\n".join(lines[j + 1:j + 5])  # the paragraph that follows
                k = 0
                while k < len(block):
                    start, text = k, block[k]
                    while text.endswith("\\") and k + 1 < len(block):
                        k += 1
                        text = text[:-1] + " " + block[k].strip()
                    out.append(Command(path, i + 2 + start, text, "\n".join(block) + "\n" + after))
                    k += 1
                i = j
            i += 1
    return out
