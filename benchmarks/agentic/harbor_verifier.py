"""Running a Harbor task's verifier in the sandbox the agent worked in.

After the agent's loop, the task's `tests/` files are written to `/tests` in the same
sandbox, `bash /tests/test.sh` runs with the task's verifier timeout, and the reward is read
from `/logs/verifier/reward.txt`. The rules are NeMo Evaluator 0.3.0's (its Harbor
environment's `verify`):

- the verifier timeout is task.toml's `[verifier] timeout_sec`, else 600 s (Harbor's default);
- the reward is the float in `/logs/verifier/reward.txt`, else in `/reward.txt`; when neither
  file exists or holds a number, it is 1.0 if test.sh exited 0, else 0.0 (`reward_source:
  exit_code_fallback`);
- `/logs/verifier/report.json`, when the tests write one, is kept in the details.

Where the files go: nel's sandboxes run as an unprivileged user on a read-only root, so
`/tests` and `/logs` are per-sample scratch directories mounted into the sandbox (the seed
asks for them with `sandbox_spec["scratch_dirs"]`; `nel_assets.engine.evaluation.sandboxing` makes and
mounts them). The agent can see and write them during its loop, so before the verifier runs
every process the agent left behind is killed, both directories are emptied and the tests
are written afresh: an agent that edited the tests, or wrote a reward file itself, gains
nothing.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.errors import NelError

TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
REWARD_FILE = "/logs/verifier/reward.txt"
#: NeMo Evaluator 0.3.0 also looks for the reward at the root of the filesystem.
ROOT_REWARD_FILE = "/reward.txt"
REPORT_FILE = "/logs/verifier/report.json"
#: Harbor's default `[verifier] timeout_sec` (NeMo Evaluator 0.3.0 applies the same).
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
#: The directories a Harbor task's sandbox needs writable (see the module docstring).
SCRATCH_DIRS = (TESTS_DIR, LOGS_DIR)
#: How much of the verifier's stdout and stderr the details keep (the tail: the summary).
OUTPUT_TAIL = 4000
_REPORT_MAX = 64 * 1024
# Tool directories test scripts expect on PATH (as NeMo Evaluator puts them there).
_PATH = ('export PATH="$HOME/.local/bin:$HOME/.cargo/bin:/usr/local/go/bin:/usr/local/cargo/bin'
         ':$HOME/go/bin:$PATH"; ')
# Empty the scratch directories (and make sure they are writable).
_EMPTY = (f"find {TESTS_DIR} {LOGS_DIR} -mindepth 1 -delete 2>/dev/null; "
          f"mkdir -p {TESTS_DIR} {LOGS_DIR}/verifier && test -w {TESTS_DIR} && test -w {LOGS_DIR}/verifier")
# First kill what the agent left running (`kill -1` spares PID 1 and the caller) where the
# sandbox has a PID namespace of its own. Where it shares the node's (a Pyxis/enroot
# container: `shares_host_pids`), `kill -1` would reach every process of the job's user on
# the node; there SLURM ends each step's processes with the step instead.
_RESET = f"kill -9 -1 2>/dev/null; {_EMPTY}"


async def _read(sandbox: Any, path: str, limit: int) -> str | None:
    """A file's text from the sandbox, or None when it is absent, unreadable or too big."""
    with tempfile.TemporaryDirectory(prefix="nel-verifier-") as d:
        local = Path(d) / "f"
        try:
            await sandbox.download(path, local)
            if local.stat().st_size > limit:
                return None
            return local.read_text(encoding="utf-8", errors="replace")
        except Exception:  # absent, a planted symlink, outside the sandbox: no file
            return None


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


async def run_verifier(sandbox: Any, *, tests: dict[str, str], task_id: str,
                       timeout_s: float | None = None) -> VerifyResult:
    """Write the task's tests into `sandbox`, run `bash /tests/test.sh`, read the reward.

    Args:
        sandbox: The started sandbox the agent worked in (`nel_resources.sandboxes.base.Sandbox`).
        tests: The task's `tests/` files, relative path -> text.
        task_id: The task's name (for messages).
        timeout_s: The verifier's timeout (None: Harbor's default, 600 s).

    Raises:
        NelError: the sandbox has no writable `/tests` and `/logs` (one line).
    """
    reset = _EMPTY if getattr(sandbox, "shares_host_pids", False) else _RESET
    prep = await sandbox.exec(["sh", "-c", reset], timeout_sec=60)
    if prep.stopped is not None or prep.return_code != 0:
        raise NelError(f"task {task_id}: its sandbox has no writable {TESTS_DIR} and {LOGS_DIR} "
                       f"for the verifier ({(prep.stderr or prep.stdout).strip()[-200:]})")
    with tempfile.TemporaryDirectory(prefix="nel-verifier-") as d:
        for i, (rel, text) in enumerate(sorted(tests.items())):
            local = Path(d) / str(i)
            local.write_text(text, encoding="utf-8")
            await sandbox.upload(local, f"{TESTS_DIR}/{rel}")
    timeout = float(timeout_s) if timeout_s else DEFAULT_VERIFIER_TIMEOUT_S
    res = await sandbox.exec(["bash", "-c", f"find {TESTS_DIR} -mindepth 1 -exec chmod u+x {{}} + 2>/dev/null; {_PATH}bash {TESTS_DIR}/test.sh"],
                             timeout_sec=timeout)
    details: dict[str, Any] = {
        "method": "harbor", "task_id": task_id, "test_exit_code": res.return_code,
        "stopped": res.stopped, "verifier_timeout_s": timeout,
        "test_stdout": res.stdout[-OUTPUT_TAIL:], "test_stderr": res.stderr[-OUTPUT_TAIL:],
    }
    report = await _read(sandbox, REPORT_FILE, _REPORT_MAX)
    if report is not None:
        with contextlib.suppress(ValueError):  # not JSON: the reward does not depend on it
            details["report"] = json.loads(report)
    raw = await _read(sandbox, REWARD_FILE, 1024)
    if _float(raw) is None:
        raw = await _read(sandbox, ROOT_REWARD_FILE, 1024)
    reward = _float(raw)
    if reward is not None:
        details.update(reward_source="reward_file", reward_raw=(raw or "").strip())
    else:
        passed = res.stopped is None and res.return_code == 0
        reward = 1.0 if passed else 0.0
        details["reward_source"] = "exit_code_fallback"
    return VerifyResult(reward, f"test_exit={res.return_code} reward={reward:g}", details)
