"""The shard journal: rows reach the OS when appended, grouped fsync, replay, torn tails,
and a full disk that stops the journal loudly."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from nel_assets.engine.evaluation.journal import Journal, JournalWriteError
from tests.support.tmpfs import fill, small_tmpfs


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_journal_roundtrip_and_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "j" / "journal.jsonl"

    async def go() -> None:
        j = Journal(path, interval=0.01)
        j.start()
        for i in range(250):
            j.append({"sample_id": f"{i}:0", "reward": i % 2})
        await j.close()

    asyncio.run(go())
    rows = Journal.replay(path)
    assert [r["sample_id"] for r in rows] == [f"{i}:0" for i in range(250)]
    # a crash mid-write leaves a torn last line: replay ignores it, open() truncates it
    with open(path, "ab") as f:
        f.write(b'{"sample_id": "250:0", "rew')
    assert len(Journal.replay(path)) == 250
    j = Journal(path)
    j.open()
    assert j.n_lines == 250
    asyncio.run(j.close())
    assert path.read_bytes().endswith(b"}\n")
    assert Journal.replay(tmp_path / "missing.jsonl") == []


def test_rows_reach_the_os_when_appended_not_at_the_next_fsync(tmp_path: Path) -> None:
    """A SIGKILL loses only user-space buffers: a finished row must be in the file (page
    cache) as soon as `append` returns, before its worker can send another request, even with
    fsync an hour away."""
    path = tmp_path / "journal.jsonl"

    async def go() -> list[int]:
        j = Journal(path, interval=3600.0)
        j.start()
        seen = []
        for k in range(5):
            j.append({"sample_id": f"0:{k}"})
            seen.append(_lines(path))  # no loop turn in between
        await j.close()
        return seen

    assert asyncio.run(go()) == [1, 2, 3, 4, 5]


def test_full_disk_sets_the_error_and_keeps_complete_lines(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", size="256k") as mnt:
        path = mnt / "journal.jsonl"

        async def go() -> Journal:
            j = Journal(path, interval=0.01)
            j.start()
            for i in range(20):
                j.append({"sample_id": f"{i}:0", "response": "x" * 200})
            await asyncio.sleep(0)
            fill(mnt / "filler")
            i = 20
            while j.error is None and i < 100_000:  # the next turn's write hits ENOSPC
                j.append({"sample_id": f"{i}:0", "response": "x" * 200})
                i += 1
                await asyncio.sleep(0)
            await j.close()
            return j

        j = asyncio.run(go())
        assert j.error is not None, "writing to a full filesystem never failed"
        with pytest.raises(JournalWriteError) as info:
            j.raise_if_failed()
        msg = str(info.value)
        assert msg.startswith(f"cannot write the journal {path}: No space left on device (28);")
        assert f"{j.n_lines} samples kept" in msg and "\n" not in msg
        # what was journaled before the disk filled is kept and replays intact
        rows = Journal.replay(path)
        assert len(rows) == j.n_lines >= 20
        assert [r["sample_id"] for r in rows] == [f"{i}:0" for i in range(len(rows))]
        os.unlink(mnt / "filler")
