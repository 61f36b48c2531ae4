"""Harbor-format agent task directories, read into seeds a tool-calling solver can run.

One task is one directory (the layout Harbor, Terminal-Bench 2 and NeMo Evaluator 0.3.0 use):

    <task>/instruction.md        what the agent is asked to do
    <task>/task.toml             timeouts and the environment (`[environment] docker_image`)
    <task>/environment/Dockerfile  the container the agent works in (FROM + WORKDIR)
    <task>/tests/test.sh         the verifier; it writes the reward to /logs/verifier/reward.txt
    <task>/solution/solve.sh     optional reference solution

Every subdirectory of a dataset directory holding an `instruction.md` is a task, in name
order. Nothing is downloaded here: a dataset directory that is missing or holds no task is
refused in one line naming the directory.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.agentic.harbor_verifier import REWARD_FILE, SCRATCH_DIRS, TESTS_DIR, run_verifier
from benchmarks.errors import DataMissingError, NelError

DEFAULT_WORKDIR = "/app"
#: Dockerfile instructions that leave the base image as it is (no build needed)
_NO_BUILD = frozenset({"FROM", "WORKDIR", "ARG", "LABEL", "MAINTAINER"})
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE | re.MULTILINE)
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class HarborTask:
    """One task directory, parsed.

    Attributes:
        name: The directory name (the task id).
        path: The task directory.
        instruction: `instruction.md`'s text (the agent's prompt).
        config: `task.toml`, parsed (empty when absent).
        docker_image: `[environment] docker_image`, else the Dockerfile's `FROM` image.
        dockerfile: `environment/Dockerfile`'s text ('' when absent).
        workdir: The Dockerfile's last `WORKDIR` (default `/app`).
        tests: `tests/` files, relative path -> text (copied to `/tests` to verify).
    """

    name: str
    path: Path
    instruction: str
    config: dict[str, Any] = field(default_factory=dict)
    docker_image: str | None = None
    dockerfile: str = ""
    workdir: str = DEFAULT_WORKDIR
    tests: dict[str, str] = field(default_factory=dict)

    @property
    def needs_build(self) -> bool:
        """Its image must be built: the Dockerfile changes its base (RUN, COPY, ENV, ...)
        and task.toml names no prebuilt `[environment] docker_image`."""
        if (self.config.get("environment") or {}).get("docker_image"):
            return False
        continued = False
        for raw in self.dockerfile.splitlines():
            line = raw.strip()
            was_continued, continued = continued, line.endswith("\\")
            if was_continued or not line or line.startswith("#"):
                continue
            if line.split(maxsplit=1)[0].upper() not in _NO_BUILD:
                return True
        return False

    def timeout(self, section: str) -> float | None:
        """`[<section>] timeout_sec` of task.toml (`agent` or `verifier`), if set."""
        v = (self.config.get(section) or {}).get("timeout_sec")
        return float(v) if isinstance(v, int | float) else None


def read_task(path: Path) -> HarborTask:
    """Parse one task directory.

    Raises:
        NelError: one line when task.toml does not parse or tests/test.sh is missing.
    """
    cfg: dict[str, Any] = {}
    toml = path / "task.toml"
    if toml.is_file():
        try:
            cfg = tomllib.loads(toml.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise NelError(f"{toml}: does not parse as TOML: {exc}") from None
    tests_dir = path / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise NelError(f"task {path.name}: no tests/test.sh in {path} (every Harbor task needs "
                       "its verifier)")
    tests = {str(p.relative_to(tests_dir)): p.read_text(encoding="utf-8", errors="replace")
             for p in sorted(tests_dir.rglob("*")) if p.is_file()}
    dockerfile_path = path / "environment" / "Dockerfile"
    dockerfile = dockerfile_path.read_text(encoding="utf-8") if dockerfile_path.is_file() else ""
    image = (cfg.get("environment") or {}).get("docker_image")
    if not image and dockerfile:
        m = _FROM.search(dockerfile)
        image = m.group(1) if m else None
    workdirs = _WORKDIR.findall(dockerfile)
    return HarborTask(name=path.name, path=path,
                      instruction=(path / "instruction.md").read_text(encoding="utf-8"),
                      config=cfg, docker_image=image, dockerfile=dockerfile,
                      workdir=workdirs[-1] if workdirs else DEFAULT_WORKDIR, tests=tests)


def task_dirs(root: Path) -> list[Path]:
    """The task directories of a dataset directory, in name order."""
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "instruction.md").is_file())


class HarborTaskSet(EvalEnvironment):
    """A directory of Harbor-format tasks as a benchmark.

    Each seed carries what a tool-calling solver needs to run the task in a sandbox:
    `prompt` is the instruction; `sandbox_spec` names the task's image and working
    directory; `metadata` holds the task id, the verifier command (`bash /tests/test.sh`),
    the tests to copy to `/tests` before it runs, where the reward is written, the
    Dockerfile, and the agent and verifier timeouts of task.toml. `verify` runs the task's
    tests in the sandbox the agent worked in (`harbor_verifier`).
    """

    version = "1"
    #: Seeds need a sandbox (their task runs in the task's container).
    needs_sandbox = True
    #: What is scored is the state the agent left in the sandbox, not its last message (an
    #: agent that ends without a word may still have done the task).
    answer_is_sandbox_state = True

    def __init__(self, root: Path, *, label: str, only: frozenset[str] | None = None,
                 num_examples: int | None = None) -> None:
        super().__init__()
        self.label = label
        self.root = root
        if not root.is_dir():
            raise DataMissingError(f"{label}: no local task files at {root}")
        dirs = [p for p in task_dirs(root) if only is None or p.name in only]
        if not dirs:
            raise DataMissingError(f"{label}: {root} holds no task directory (a folder with "
                                   "instruction.md, task.toml, environment/, tests/test.sh)")
        self.tasks = [read_task(p) for p in dirs[:num_examples]]
        h = hashlib.sha256()
        for t in self.tasks:
            h.update(t.name.encode())
            h.update(t.instruction.encode())
            h.update(t.dockerfile.encode())
            for rel, text in sorted(t.tests.items()):
                h.update(rel.encode() + b"\0" + text.encode())
        self._data_hash = h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.tasks)

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}:{self.label}:{self._data_hash}"

    async def seed(self, idx: int) -> SeedResult:
        t = self.tasks[idx]
        # task.toml's [metadata] (a SWE task's instance_id, repo, ...) comes first, as NeMo
        # Evaluator 0.3.0 merges it: a Gym agent's /run and a resources server read it;
        # nel's own keys win over a name they share.
        own = t.config.get("metadata")
        meta = {
            **(own if isinstance(own, dict) else {}),
            "task_id": t.name, "category": (t.config.get("metadata") or {}).get("category"),
            "verifier_command": f"bash {TESTS_DIR}/test.sh", "tests_dir": TESTS_DIR,
            "tests": t.tests, "reward_file": REWARD_FILE, "docker_image": t.docker_image,
            "dockerfile": t.dockerfile, "workdir": t.workdir,
            "agent_timeout_s": t.timeout("agent"), "verifier_timeout_s": t.timeout("verifier"),
        }
        # /tests and /logs must be writable for the verifier: per-sample scratch mounts
        spec = {"image": t.docker_image or "", "workdir": t.workdir,
                "scratch_dirs": list(SCRATCH_DIRS)}
        if t.needs_build:  # its build context: an ecs_fargate block builds it into ECR
            spec["environment_dir"] = str(t.path / "environment")
        return SeedResult(t.instruction, "", meta, sandbox_spec=spec)

    async def verify(self, response: str, expected: str, *, sandbox: Any = None,
                     **metadata: Any) -> VerifyResult:
        """Run the task's tests/test.sh in the agent's sandbox; the reward is what it writes
        to /logs/verifier/reward.txt (else its exit status), with its output in the details."""
        if sandbox is None:
            raise NelError(f"{self.label}: a task is verified by running its tests/test.sh in the "
                           "sandbox the agent worked in: give the benchmark a `sandbox:`")
        idx = {t.name: t for t in self.tasks}
        task = idx.get(str(metadata.get("task_id")))
        if task is None:
            raise NelError(f"{self.label}: no task {metadata.get('task_id')!r} in {self.root}")
        return await run_verifier(sandbox, tests=task.tests, task_id=task.name,
                                  timeout_s=task.timeout("verifier"))
