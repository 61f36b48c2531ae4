"""The agent's patch (`unified_diff`, `agent_patch`): found in an answer, parsed, applied with
an offset, refused whole when a hunk does not match or a path leaves the workdir, and
written into a real `local` sandbox's workdir (file read and written through the sandbox)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nel_assets.engine.solvers.agent_patch import apply_agent_patch, patch_of
from nel_assets.engine.solvers.gym_tools import gym_run_body
from nel_assets.engine.solvers.unified_diff import PatchError, apply_hunks, find_patch, parse_patch
from tests.support.gym_harbor import diff_creating

OLD = "".join(f"line {i}\n" for i in range(1, 21))
# Changes line 3 and line 15, written against a file with two fewer lines at the top (the
# hunks are found 2 lines further down, as `git apply` would).
EDIT = """diff --git a/src/m.txt b/src/m.txt
--- a/src/m.txt
+++ b/src/m.txt
@@ -1,3 +1,3 @@
 line 3
-line 4
+line four
 line 5
@@ -12,2 +12,3 @@
 line 14
+inserted
 line 15
"""


def test_find_patch_takes_the_last_fenced_diff_else_a_bare_one() -> None:
    two = f"first\n```diff\n{diff_creating('a', 'x')}```\nthen\n```diff\n{diff_creating('b', 'y')}```"
    assert find_patch(two) == diff_creating("b", "y")
    assert find_patch(f"Here:\n{EDIT}") == EDIT
    assert find_patch("no change --- here\nreally") is None
    assert patch_of("nothing", {"model_patch": EDIT}) == (EDIT, "model_patch")
    assert patch_of("nothing", {"model_patch": "  "}) == (None, "none")


def test_hunks_apply_with_an_offset_and_new_and_deleted_files() -> None:
    (fp,) = parse_patch(EDIT)
    assert fp.path == "src/m.txt" and len(fp.hunks) == 2
    new = apply_hunks(OLD, fp)
    assert new == OLD.replace("line 4\n", "line four\n").replace("line 15\n", "inserted\nline 15\n")
    created, gone = parse_patch(diff_creating("n.txt", "a\nb") + (
        "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"))
    assert created.created and apply_hunks("", created) == "a\nb\n"
    assert gone.deleted and gone.path == "old.txt"
    no_eol = parse_patch("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-x\n+y\n\\ No newline at end of file\n")[0]
    assert apply_hunks("x\n", no_eol) == "y"


@pytest.mark.parametrize(("patch", "says"), [
    ("--- a/src/m.txt\n+++ b/src/m.txt\n@@ -3 +3 @@\n-line 99\n+x\n", "does not match the file"),
    ("--- a/src/m.txt\n+++ b/src/m.txt\n@@ -3,2 +3,2 @@\n-line 3\n+x\n", "is cut short"),
    ("just words", "holds no file change"),
], ids=["mismatch", "cut-short", "no-diff"])
def test_a_patch_that_does_not_apply_is_an_error(patch: str, says: str) -> None:
    with pytest.raises(PatchError, match=says):
        for fp in parse_patch(patch):
            apply_hunks(OLD, fp)


def test_a_harbor_tasks_tests_never_reach_gym() -> None:
    from benchmarks._types import SeedResult

    meta = {"task_id": "t", "instance_id": "repo__1", "verifier_command": "bash /tests/test.sh",
            "tests": {"test.sh": "secret"}, "tests_dir": "/tests", "dockerfile": "FROM x",
            "reward_file": "/logs/verifier/reward.txt", "workdir": "/app"}
    body = gym_run_body(SeedResult("do it", "", meta))
    assert body == {"responses_create_params": {"input": [{"role": "user", "content": "do it"}]},
                    "task_id": "t", "instance_id": "repo__1", "workdir": "/app"}


def test_the_patch_is_written_into_a_real_sandbox_and_refused_whole_when_it_fails() -> None:
    from nel_resources.config import SandboxConfig
    from nel_resources.sandboxes.base import SandboxSpec, running
    from nel_resources.sandboxes.factory import make_factory
    from tests.support.realcomponents import require_bwrap

    require_bwrap()

    async def go() -> tuple[Any, ...]:
        factory = make_factory(SandboxConfig(type="local", concurrency=1))
        try:
            async with running(factory.create(SandboxSpec(files={"src/m.txt": OLD}))) as sb:
                wd = sb.spec.workdir
                bad = EDIT + "--- a/src/m.txt\n+++ b/src/m.txt\n@@ -19 +19 @@\n-nope\n+x\n"
                refused = await apply_agent_patch(sb, wd, bad, "answer")
                escaped = await apply_agent_patch(sb, wd, diff_creating("../out.txt", "x"), "answer")
                unchanged = (await sb.exec(["cat", "src/m.txt"])).stdout
                done = await apply_agent_patch(sb, wd, EDIT + diff_creating("new/n.txt", "hi"),
                                               "model_patch")
                after = (await sb.exec(["cat", "src/m.txt", "new/n.txt"])).stdout
                return refused, escaped, unchanged, done, after
        finally:
            await factory.aclose()

    refused, escaped, unchanged, done, after = asyncio.run(go())
    assert not refused["applied"] and "does not match" in refused["error"] and refused["files"] == []
    assert not escaped["applied"] and "leaves the working directory" in escaped["error"]
    assert unchanged == OLD  # the first hunks matched, but nothing was written
    assert done == {"source": "model_patch", "applied": True, "files": ["src/m.txt", "new/n.txt"]}
    assert after.endswith("line 20\nhi\n") and "line four\n" in after and "inserted\nline 15" in after
