"""Every `nel eval run` a page shows in a shell block is safe to paste: it carries a small
`-m N` / `--max-problems N` and the page says how to run the full set (issue 35: an example
against a paid endpoint must not send 14k requests)."""

from __future__ import annotations

import re

from tests.docs.doc_examples import Command, shell_commands

COMMANDS = shell_commands()
EVAL_RUNS = [c for c in COMMANDS if re.search(r"\bnel eval run\b", c.text)]
# the flag `nel eval run --help` lists (-m / --max-problems), with its value
_LIMIT = re.compile(r"(?:^|\s)(?:-m|--max-problems)(?:\s+|=)(\d+)(?=\s|$)")
_NO_RUN = re.compile(r"(?:^|\s)(?:--dry-run|-h|--help)(?=\s|$)")
MAX_LIMIT = 200  # as the YAML examples' max_problems (tests/docs/test_examples.py)


def unbounded(cmd: Command) -> str | None:
    """Why the command is not safe to paste, or None."""
    at = cmd.text.index("nel eval run")
    text = cmd.text[at:]
    if "#" not in cmd.text[:at]:  # a command, not one quoted in a comment: drop its comment
        text = re.split(r"\s#", text, maxsplit=1)[0]
    if _NO_RUN.search(text):
        return None  # plans or prints help: nothing is evaluated
    limit = _LIMIT.search(text)
    if limit is None:
        return "no -m N / --max-problems N"
    if not 0 < int(limit.group(1)) <= MAX_LIMIT:
        return f"-m {limit.group(1)} is not a small limit (1..{MAX_LIMIT})"
    if "full set" not in cmd.context and "whole set" not in cmd.context:
        return "the block or the paragraph after it does not say how to run the full set"
    return None


def test_the_docs_show_eval_commands() -> None:
    # A parser that found nothing would pass the check below vacuously.
    assert len(COMMANDS) >= 50, len(COMMANDS)
    assert len(EVAL_RUNS) >= 8, [c.where for c in EVAL_RUNS]


def test_every_eval_run_command_has_a_small_limit() -> None:
    bad = {c.where: (why, c.text) for c in EVAL_RUNS if (why := unbounded(c))}
    assert not bad, bad


def test_the_check_catches_an_unbounded_command() -> None:
    def cmd(text: str, context: str = "drop -m for the full set") -> Command:
        return Command(EVAL_RUNS[0].path, 1, text, context)

    assert unbounded(cmd("nel eval run config.yaml")) == "no -m N / --max-problems N"
    assert unbounded(cmd("nel eval run -b mmlu --model-url http://h/v1 -m 14042")) is not None
    assert unbounded(cmd("nel eval run -b mmlu -m 20", context="")) is not None
    assert unbounded(cmd("nel eval run -b mmlu --max-problems=20")) is None
    assert unbounded(cmd("nel eval run cfg.yaml --dry-run")) is None
    assert unbounded(cmd("nel eval run cfg.yaml  # -m 20, or --dry-run first")) is not None
    assert unbounded(cmd("ng_collect_rollouts # or: nel eval run -b gym://h:1 -m 5")) is None
    # a repeats flag or a model named m is not a limit
    assert unbounded(cmd("nel eval run -b mmlu -n 20 --model-id m")) is not None
