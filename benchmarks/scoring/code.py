"""Code scoring: pull a program out of a model's answer, run it with its tests in a sandbox.

The pure part (extraction, assembling the program, reading a run's outcome) needs no
sandbox and is tested on its own. `code_sandbox` runs the assembled program through any
object with a NeMo Evaluator-style `exec` coroutine (`ExecSandbox`): the engine hands the
benchmark's `verify` a started sandbox of the configured type (`local`, `docker`, ...), so
this package never imports the sandboxes themselves.

Extraction follows how models really answer: fenced blocks with or without a language tag,
several blocks (the one defining the entry point wins, else the last), prose around the
code, a whole function or only its body (re-indented under the prompt's signature), and
`<think>` blocks (stripped; the reasoning is searched only when the answer holds no code).
Every scan is line by line, so the work is linear in the length of the answer.
"""

from __future__ import annotations

import re
import secrets
import textwrap
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from benchmarks._types import VerifyResult
from benchmarks.errors import NelError
from benchmarks.scoring.code_harness import HARNESS_CMD, harness_input

__all__ = [
    "PYTHON_CMD",
    "CodeExtraction",
    "ExecSandbox",
    "RunVerdict",
    "answer_module",
    "code_sandbox",
    "code_sandbox_async",
    "extract_code",
    "harness_input",
    "judge_run",
    "new_sentinel",
    "program_for",
    "run_code_tests",
]

# Fence tags taken as Python; a block tagged with another language (bash, text, output) is
# skipped when a Python one exists.
_PY_TAGS = frozenset({"", "python", "python3", "py", "py3", "pycon", "ipython"})
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)")
#: The command a code answer's tests run with inside a sandbox (see `code_harness`: the
#: tests and the answer in two processes, the sentinel only in the tests' one).
PYTHON_CMD = HARNESS_CMD
# Exceptions a failed run is classified by (the last traceback line names the exception).
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)|AssertionError)\b")


@dataclass(frozen=True, slots=True)
class CodeExtraction:
    """The code taken from an answer.

    Attributes:
        code: The code as the model wrote it (None when the answer held none).
        method: How it was found: `fence_entry_point` (the fenced block defining the entry
            point), `fence_last` (the last fenced block), `function` (an unfenced function
            definition inside prose), `body` (the whole answer taken as code), or `none`.
        source: `content`, or `reasoning` when the code was only in the reasoning.
        n_blocks: Fenced code blocks seen in the searched text.
    """

    code: str | None
    method: str
    source: str = "content"
    n_blocks: int = 0


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block, in order; an unclosed last fence runs to
    the end (a reply cut at the token limit)."""
    blocks: list[tuple[str, str]] = []
    open_fence: str | None = None
    tag = ""
    body: list[str] = []
    for line in text.splitlines():
        m = _FENCE.match(line)
        if open_fence is None:
            if m:
                open_fence, tag, body = m.group(1), m.group(2).lower(), []
            continue
        if m and m.group(1)[0] == open_fence[0] and len(m.group(1)) >= len(open_fence) and not m.group(2):
            blocks.append((tag, "\n".join(body)))
            open_fence = None
            continue
        body.append(line)
    if open_fence is not None and body:
        blocks.append((tag, "\n".join(body)))
    return blocks


def _defines(code: str, entry_point: str) -> bool:
    """The code defines `entry_point` at its top level (a `def` at column 0)."""
    if not entry_point:
        return False
    head = (f"def {entry_point}(", f"async def {entry_point}(")
    return any(line.startswith(head) for line in code.splitlines())


def _function_in_prose(text: str, entry_point: str) -> str | None:
    """An unfenced `def entry_point(...)` with its body, plus the imports and decorators just
    above it: prose before and after is dropped."""
    lines = text.splitlines()
    head = (f"def {entry_point}(", f"async def {entry_point}(")
    start = next((i for i, ln in enumerate(lines) if ln.startswith(head)), None)
    if start is None:
        return None
    first = start
    i = start
    # Walk up over the imports and decorators that belong to it (blank lines between them).
    while i > 0 and (not lines[i - 1].strip() or lines[i - 1].startswith(("import ", "from ", "@"))):
        i -= 1
        if lines[i].strip():
            first = i
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t")):
        end += 1
    return "\n".join(lines[first:end]).rstrip()


def _looks_like_code(text: str) -> bool:
    """Cheap test that an unfenced answer is code rather than prose."""
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        return (line[:1] in (" ", "\t") or s.startswith(("return", "def ", "import ", "from ", "for ",
                                                          "if ", "while ", "#", "try:", "with ", "@"))
                or "=" in s or s.endswith(":"))
    return False


def _extract_from(text: str, entry_point: str) -> tuple[str | None, str, int]:
    blocks = _fenced_blocks(text)
    if blocks:
        py = [b for t, b in blocks if t in _PY_TAGS] or [b for _, b in blocks]
        defining = [b for b in py if _defines(textwrap.dedent(b), entry_point)]
        if defining:
            return defining[-1], "fence_entry_point", len(blocks)
        code = next((b for b in reversed(py) if b.strip()), None)
        return code, ("fence_last" if code is not None else "none"), len(blocks)
    fn = _function_in_prose(text, entry_point)
    if fn is not None:
        return fn, "function", 0
    if text.strip() and _looks_like_code(text):
        return text, "body", 0
    return None, "none", 0


def extract_code(response: str | None, entry_point: str, *,
                 reasoning: str | None = None) -> CodeExtraction:
    """The code of an answer (see the module docstring for the shapes it handles).

    Args:
        response: The model's answer (`<think>` blocks in it are stripped first).
        entry_point: The function the tests call; a block defining it wins over others.
        reasoning: Separate reasoning text; searched only when the answer has no code.
    """
    # Imported here: every run imports this module (humaneval registers at import) and the
    # reasoning module pulls in the answer-marker regexes, which most runs never use.
    from benchmarks.scoring.reasoning import split_reasoning

    answer, thought = split_reasoning(response, reasoning)
    code, method, n = _extract_from(answer, entry_point)
    if code is not None:
        return CodeExtraction(code, method, "content", n)
    if thought:
        code, method, n = _extract_from(thought, entry_point)
        if code is not None:
            return CodeExtraction(code, method, "reasoning", n)
    return CodeExtraction(None, "none", "content", n)


def _strip_main_guard(code: str) -> str:
    """Drop top-level `if __name__ == "__main__":` blocks: example runs and `input()` calls a
    model adds would run (or block) with the tests."""
    out: list[str] = []
    skipping = False
    for line in code.splitlines():
        if skipping:
            if not line.strip() or line[:1] in (" ", "\t"):
                continue
            skipping = False
        if line.startswith("if __name__") and "__main__" in line:
            skipping = True
            continue
        out.append(line)
    return "\n".join(out)


def _as_body(code: str) -> str:
    """A function body indented under the prompt's signature.

    Models write a body at any indentation (tabs count as four spaces). Two slips are
    common: the first line left at column 0 with the rest indented (the answer was
    stripped), and, from a completions endpoint, code after the body (a new `def`, example
    calls): a body that starts indented ends at the first line back at column 0.
    """
    lines = code.expandtabs(4).splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    nxt = next((ln for ln in lines[1:] if ln.strip()), "")
    nxt_indent = len(nxt) - len(nxt.lstrip())
    if lines[0][:1] != " " and nxt_indent > 0 and not lines[0].rstrip().endswith(":"):
        lines[0] = " " * nxt_indent + lines[0]  # `x = 1` at column 0, then `    return x`
    if lines[0][:1] == " ":
        end = next((i for i, ln in enumerate(lines) if ln.strip() and ln[:1] != " "), len(lines))
        lines = lines[:end]
    return textwrap.indent(textwrap.dedent("\n".join(lines)), "    ")


def answer_module(prompt: str, code: str, entry_point: str) -> str:
    """The answer as a module: the prompt and the model's code.

    A whole function (a top-level `def entry_point`) follows the prompt and replaces the
    prompt's stub, keeping the prompt's imports and helpers; a body is indented under the
    prompt's signature.
    """
    flat = _strip_main_guard(textwrap.dedent(code))
    completion = flat if _defines(flat, entry_point) else _as_body(code)
    return f"{prompt.rstrip()}\n{completion}\n"


def program_for(prompt: str, code: str, test: str, entry_point: str) -> str:
    """NeMo Evaluator's one-file program: the answer module, the tests, and the call
    `check(entry_point)`. nel's own harness runs the same parts in two processes."""
    return f"{answer_module(prompt, code, entry_point)}\n{test}\n\ncheck({entry_point})\n"


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """What one run of a program says about the answer.

    Attributes:
        passed: The tests passed (exit 0, not stopped by a limit, the sentinel printed).
        reason: `passed`, `timeout`, `memory`, `assertion`, `syntax_error`, `exception`,
            `exit_status`, `tests_not_finished` (exit 0 before the tests ended),
            `output_limit`, or the sandbox's own stop reason.
        exception: The exception type on the last traceback line, when there was one.
    """

    passed: bool
    reason: str
    exception: str | None = None


def _last_exception(stderr: str) -> str | None:
    for line in reversed(stderr[-8192:].splitlines()):
        m = _EXC_LINE.match(line.strip())
        if m:
            return m.group(1).rsplit(".", 1)[-1]
    return None


def new_sentinel() -> str:
    """A fresh, unguessable sentinel for one run (`harness_input`, `judge_run`)."""
    return f"nel-tests-done-{secrets.token_hex(16)}"


def judge_run(return_code: int, stopped: str | None, stderr: str, *,
              stdout: str | None = None, sentinel: str | None = None) -> RunVerdict:
    """Classify a finished run: pass only on exit 0 within every limit and, when a
    `sentinel` is given, with it alone on a line of `stdout` (the tests ran to their end)."""
    exc = _last_exception(stderr) if (return_code != 0 or stopped) else None
    if stopped is not None:
        return RunVerdict(False, "memory" if stopped == "memory" else str(stopped), exc)
    if exc == "AnswerExit":
        # The answer's process ended (an exit, a kill) before the tests could finish.
        return RunVerdict(False, "tests_not_finished", exc)
    if return_code == 0 and sentinel is not None and sentinel not in (stdout or "").splitlines():
        # Exit 0 without the harness's tail: the program ended before its tests did.
        return RunVerdict(False, "tests_not_finished")
    if return_code == 0:
        return RunVerdict(True, "passed")
    if exc == "AssertionError":
        return RunVerdict(False, "assertion", exc)
    if exc in _SYNTAX:
        return RunVerdict(False, "syntax_error", exc)
    if exc == "MemoryError":
        return RunVerdict(False, "memory", exc)
    if exc is not None:
        return RunVerdict(False, "exception", exc)
    if return_code in (-9, 137):
        return RunVerdict(False, "killed")
    return RunVerdict(False, "exit_status")


class ExecResultLike(Protocol):
    """What `ExecSandbox.exec` returns (nel's `ExecResult`, NeMo Evaluator's too)."""

    @property
    def return_code(self) -> int: ...

    @property
    def stderr(self) -> str: ...

    @property
    def stdout(self) -> str: ...


class ExecSandbox(Protocol):
    """The part of a sandbox the scorer uses: run a command, with stdin, under a time limit."""

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   stdin: bytes | None = None) -> Any: ...


async def run_code_tests(response: str | None, *, prompt: str, test: str, entry_point: str,
                         sandbox: ExecSandbox, timeout: float = 30.0,
                         reasoning: str | None = None) -> VerifyResult:
    """Score a code answer: extract it, run prompt + code + tests + `check(entry_point)` in
    `sandbox`, pass = the tests ran to their end and passed (exit 0 and the run's sentinel,
    which only the harness's tail prints, on stdout).

    The program goes in on stdin (never on a command line). `scoring_details` records the
    extraction (`method`, `source`), the run's `reason` (`passed`, `timeout`, `memory`,
    `assertion`, `syntax_error`, ...), its return code, duration and a tail of its stderr.
    An answer without code scores 0 without running anything.
    """
    ext = extract_code(response, entry_point, reasoning=reasoning)
    details: dict[str, Any] = {"method": ext.method, "source": ext.source, "n_blocks": ext.n_blocks}
    if ext.code is None or not ext.code.strip():
        return VerifyResult(0.0, None, {**details, "reason": "no_code"})
    sentinel = new_sentinel()  # per run; it never reaches the answer's process (code_harness)
    stdin = harness_input(prompt=prompt, answer=answer_module(prompt, ext.code, entry_point),
                          tests=test, entry_point=entry_point, sentinel=sentinel)
    res = await sandbox.exec(PYTHON_CMD, timeout_sec=timeout, stdin=stdin)
    stopped = getattr(res, "stopped", None)
    verdict = judge_run(res.return_code, stopped, res.stderr or "",
                        stdout=res.stdout or "", sentinel=sentinel)
    details.update(reason=verdict.reason, return_code=res.return_code,
                   duration_s=round(float(getattr(res, "duration_s", 0.0) or 0.0), 4))
    if verdict.exception:
        details["exception"] = verdict.exception
    if stopped:
        details["stopped"] = stopped
    if not verdict.passed:
        details["stderr_tail"] = (res.stderr or "")[-1000:]
    return VerifyResult(1.0 if verdict.passed else 0.0, ext.code, details)


# --------------------------------------------------------------------------- NeMo Evaluator's API
# A BYOB scorer written for NeMo Evaluator calls `code_sandbox(sample)` (or
# `code_sandbox_async(sample, sandbox)`) on a sample whose metadata carries `_prompt`,
# `_test` and `_entry_point`. In nel the sandbox is the benchmark's configured one, handed
# to the scorer as `sample.sandbox`; NeMo Evaluator's fallback of one `docker run` per
# sample when there is none is not kept (a run without a sandbox is told to configure one).


def _sample_parts(sample: Any) -> tuple[str, str, str]:
    meta = sample.metadata or {}
    entry = meta.get("_entry_point") or meta.get("entry_point") or "solution"
    return str(meta.get("_prompt", "")), str(meta.get("_test", "")), str(entry)


async def code_sandbox_async(sample: Any, sandbox: ExecSandbox, timeout: float = 30.0) -> dict[str, Any]:
    """NeMo Evaluator's `code_sandbox_async`: run the sample's code and tests in `sandbox`.

    Returns:
        `{"correct": bool, "extracted": code[:500], ...}` plus nel's details (`method`,
        `reason`, `return_code`, ...).
    """
    prompt, test, entry = _sample_parts(sample)
    v = await run_code_tests(sample.response, prompt=prompt, test=test, entry_point=entry,
                             sandbox=sandbox, timeout=timeout,
                             reasoning=getattr(sample, "reasoning", None))
    return {**v.scoring_details, "correct": v.reward >= 1.0, "extracted": (v.extracted_answer or "")[:500]}


def code_sandbox(sample: Any) -> Awaitable[dict[str, Any]]:
    """NeMo Evaluator's `code_sandbox`, run in the benchmark's sandbox (`sample.sandbox`).

    Returns an awaitable, which nel's BYOB `verify` awaits like any async scorer's result.

    Raises:
        NelError: the benchmark has no sandbox (one line saying how to add one).
    """
    sandbox = getattr(sample, "sandbox", None)
    if sandbox is None:
        raise NelError("code_sandbox runs model code and needs a sandbox: add "
                       "`sandbox: {type: local}` (or docker) to the benchmark")
    return code_sandbox_async(sample, sandbox)
