"""`agent_tasks`: nel's own small set of terminal and repository-fixing tasks for agents.

Each task puts a few files in the sandbox's workdir (a tiny repository with a bug, or data
to process) and is verified by a real test program run in that same sandbox after the
agent is done: the reward is 1 when the test exits 0. The test file is written afresh
before it runs, so an agent cannot pass by editing the test. Run it with a `tool_calling`
solver and `sandbox_tools: true` (the tasks need a shell), in a `local` or `docker`
sandbox with `python3`. The tasks are in this module (no download): CI runs the whole
agentic path on them with a scripted model.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any, ClassVar

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError

#: Where a task's files go in the sandbox (NeMo Evaluator's default workdir).
WORKDIR = "/workspace"

TASKS: list[dict[str, Any]] = [
    {
        "id": "fix_add",
        "kind": "repo-fix",
        "instruction": ("The repository in {workdir} has a bug: `calc.add` in calc.py returns "
                        "the wrong result. Fix calc.py so that `python3 test_calc.py` passes. "
                        "Do not change test_calc.py."),
        "files": {"calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"},
        "test_file": "test_calc.py",
        "test": ("from calc import add, mul\n\nassert add(2, 3) == 5, add(2, 3)\n"
                 "assert add(-1, 1) == 0\nassert mul(4, 5) == 20\nprint('ok')\n"),
    },
    {
        "id": "fix_slugify",
        "kind": "repo-fix",
        "instruction": ("In {workdir}, text_utils.slugify should lower-case the text and join "
                        "its words with single dashes, but it keeps upper case letters. Fix "
                        "text_utils.py so that `python3 test_text_utils.py` passes."),
        "files": {"text_utils.py": ("def slugify(text):\n"
                                    "    return '-'.join(text.split())\n")},
        "test_file": "test_text_utils.py",
        "test": ("from text_utils import slugify\n\n"
                 "assert slugify('Hello World') == 'hello-world', slugify('Hello World')\n"
                 "assert slugify('  Many   Spaces here ') == 'many-spaces-here'\nprint('ok')\n"),
    },
    {
        "id": "count_rows",
        "kind": "terminal",
        "instruction": ("{workdir}/data.csv is a CSV file with a header line. Write the number "
                        "of data rows whose `status` column is `failed` into {workdir}/answer.txt "
                        "(just the number)."),
        "files": {"data.csv": ("id,status\n1,ok\n2,failed\n3,ok\n4,failed\n5,failed\n6,ok\n")},
        "test_file": ".nel_check_answer.py",
        "test": ("import pathlib\n\ngot = pathlib.Path('answer.txt').read_text().strip()\n"
                 "assert got == '3', repr(got)\nprint('ok')\n"),
    },
    {
        "id": "write_fizzbuzz",
        "kind": "terminal",
        "instruction": ("Create {workdir}/fizzbuzz.py: run with `python3 fizzbuzz.py N` it prints "
                        "the numbers 1 to N, one per line, but `Fizz` for multiples of 3, `Buzz` "
                        "for multiples of 5 and `FizzBuzz` for multiples of both."),
        "files": {},
        "test_file": ".nel_check_fizzbuzz.py",
        "test": ("import subprocess\n\nout = subprocess.run(['python3', 'fizzbuzz.py', '15'], "
                 "capture_output=True, text=True, timeout=20).stdout.split()\n"
                 "want = ['1', '2', 'Fizz', '4', 'Buzz', 'Fizz', '7', '8', 'Fizz', 'Buzz', '11', "
                 "'Fizz', '13', '14', 'FizzBuzz']\nassert out == want, out\nprint('ok')\n"),
    },
]


class AgentTasks(EvalEnvironment):
    """Four small tasks; pass = the task's test program exits 0 in the agent's sandbox.

    Args:
        test_timeout: Seconds the test program may run.
    """

    name = "agent_tasks"
    scorer_family = "agent-tests"  # the type `nel list` shows
    version = "1"
    #: The engine gives `verify` the sandbox the agent worked in; a run without one is refused.
    needs_sandbox: ClassVar[bool] = True

    def __init__(self, *, test_timeout: float = 60.0) -> None:
        super().__init__()
        if test_timeout <= 0:
            raise NelError(f"agent_tasks: test_timeout must be > 0 seconds, got {test_timeout}")
        self.test_timeout = float(test_timeout)
        self._dataset = [dict(t) for t in TASKS]

    def fingerprint(self) -> str:
        digest = hashlib.sha256(json.dumps(TASKS, sort_keys=True).encode()).hexdigest()[:16]
        return f"{super().fingerprint()}:tasks={digest}:timeout={self.test_timeout}"

    async def seed(self, idx: int) -> SeedResult:
        task = self._dataset[idx]
        files = {**task["files"]}
        if not task["test_file"].startswith("."):
            files[task["test_file"]] = task["test"]  # visible to the agent, rewritten at verify
        return SeedResult(
            prompt=task["instruction"].format(workdir=WORKDIR)
            + "\n\nUse the tools to inspect and change the files. When you are done, reply "
              "with a short summary and no tool call.",
            expected_answer="tests pass",
            metadata={"task_id": task["id"], "category": task["kind"], "idx": idx},
            sandbox_spec={"workdir": WORKDIR, "files": files},
        )

    async def verify(self, response: str, expected: str, *, sandbox: Any = None,
                     **metadata: Any) -> VerifyResult:
        if sandbox is None:
            raise NelError("agent_tasks runs its tests in the agent's sandbox and needs one: add "
                           "`sandbox: {type: local}` (or docker) to the benchmark")
        task = self._dataset[int(metadata["idx"])]
        name = task["test_file"]
        script = f"cat > {shlex.quote(name)} && python3 {shlex.quote(name)}"
        res = await sandbox.exec(["bash", "-c", script], timeout_sec=self.test_timeout,
                                 cwd=WORKDIR, stdin=task["test"].encode())
        passed = res.stopped is None and res.return_code == 0
        details = {"method": "tests", "test": name, "exit_code": res.return_code,
                   "stopped": res.stopped, "output": (res.stdout + res.stderr)[-2000:]}
        return VerifyResult(1.0 if passed else 0.0, "tests pass" if passed else "tests fail",
                            details)
