"""The raw HTTP client's connection limit (`_Slots`), its pool on a real server, and where
its socket-read buffers are allocated."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

from nel_resources.wire.http_raw import RawHTTPPool, _Slots


def test_slots_bound_and_serve_waiters_in_order() -> None:
    async def go() -> list[str]:
        slots = _Slots(2)
        order: list[str] = []

        async def user(name: str, hold: asyncio.Event) -> None:
            await slots.acquire()
            order.append(name)
            await hold.wait()
            slots.release()

        holds = {n: asyncio.Event() for n in "abcd"}
        tasks = [asyncio.ensure_future(user(n, holds[n])) for n in "abcd"]
        await asyncio.sleep(0.01)
        assert order == ["a", "b"]  # two slots: c and d wait
        assert not slots.take()
        holds["a"].set()
        await asyncio.sleep(0.01)
        assert order == ["a", "b", "c"]  # the freed slot went to the first waiter
        for h in holds.values():
            h.set()
        await asyncio.gather(*tasks)
        assert slots.take() and slots.take() and not slots.take()  # both slots are back
        return order

    assert asyncio.run(go()) == ["a", "b", "c", "d"]


def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    async def go() -> None:
        slots = _Slots(1)
        await slots.acquire()
        waiting = asyncio.ensure_future(slots.acquire())
        behind = asyncio.ensure_future(slots.acquire())
        await asyncio.sleep(0)
        slots.release()  # handed to `waiting`...
        waiting.cancel()  # ...which is cancelled before it runs: `behind` must get it
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(behind, 1.0)
        assert not slots.take()  # `behind` holds the only slot
        slots.release()
        assert slots.take()

    asyncio.run(go())


def test_pool_keeps_to_its_limit_on_a_real_server(reference_server, server_stats) -> None:
    url = reference_server(default_content="#### 7", delay_ms=20)
    parts = urlsplit(url)

    async def go() -> list[int]:
        pool = RawHTTPPool(parts.hostname, parts.port, limit=3)
        body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]})
        try:
            res = await asyncio.gather(*(
                pool.request("POST", parts.path + "/chat/completions",
                             b"Content-Type: application/json\r\n", body) for _ in range(12)))
            assert len(pool._idle) <= 3  # never more connections than slots
            return [r.status for r in res]
        finally:
            await pool.close()

    assert asyncio.run(go()) == [200] * 12
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == 12


# In a fresh interpreter: does a live 300 KB bytes object (the size of asyncio's 256 KiB
# socket-read buffer) take a new anonymous mapping? With argument "pool", a pool exists
# first. (One block per interpreter: freeing a mapped block raises glibc's threshold itself.)
_MAPS_PROBE = """
import sys
if sys.argv[1] == "pool":
    from nel_resources.wire.http_raw import RawHTTPPool
    RawHTTPPool("127.0.0.1", 1)
def anon_maps():
    return sum(1 for line in open("/proc/self/maps") if len(line.split()) < 6)
before = anon_maps()
blob = bytes(300_000) + b"x"
print(anon_maps() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
def test_pool_keeps_read_buffers_off_fresh_mmaps() -> None:
    # glibc serves blocks above its mmap threshold (128 KiB at start) with a fresh mmap,
    # which every 256 KiB read of asyncio's transports paid three syscalls for; the pool
    # sets the threshold above that size.
    repo = Path(__file__).resolve().parents[3]

    def new_mappings(case: str) -> int:
        p = subprocess.run([sys.executable, "-c", _MAPS_PROBE, case], capture_output=True, text=True,
                           cwd=repo, env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}, timeout=60)
        assert p.returncode == 0, p.stderr
        return int(p.stdout)

    assert new_mappings("control") == 1, "a fresh interpreter should mmap a 300 KB block"
    assert new_mappings("pool") == 0


async def _serve_answers(answers: list[bytes], *, byte_by_byte: bool):
    """A server that answers its n-th request (over all connections) with `answers[n]`,
    written whole or one byte at a time; b"" closes the connection without answering."""
    count = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            answer = answers[count]
            count += 1
            if not answer:
                break
            for i in range(len(answer)) if byte_by_byte else [None]:
                writer.write(answer if i is None else answer[i:i + 1])
                await writer.drain()
                await asyncio.sleep(0)
            if b"Connection: close" in answer or answer.endswith(b"CUT"):
                break
        writer.close()

    return await asyncio.start_server(handler, "127.0.0.1", 0)


_CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
_LENGTH = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A:  b \r\n\r\nabcde"
_CLOSE = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"
_NO_BODY = b"HTTP/1.1 204 No Content\r\n\r\n"


@pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "byte-by-byte"])
def test_pool_reads_every_framing_however_the_answer_is_split(byte_by_byte: bool) -> None:
    # Content-Length, chunked (with an extension and a trailer), no body, close-delimited:
    # the same answers whether they arrive in one read or in one read per byte.
    async def go() -> list[tuple[int, bytes, str | None]]:
        server = await _serve_answers([_LENGTH, _CHUNKED, _NO_BODY, _CHUNKED, _CLOSE],
                                      byte_by_byte=byte_by_byte)
        pool = RawHTTPPool("127.0.0.1", server.sockets[0].getsockname()[1], limit=1)
        try:
            out = []
            for _ in range(5):
                r = await pool.request("POST", "/x", b"", b"{}")
                out.append((r.status, r.body, r.headers.get("x-a")))
            assert not pool._idle  # the close-delimited answer's connection is not kept
            return out
        finally:
            await pool.close()
            server.close()

    assert asyncio.run(go()) == [(201, b"abcde", "b"), (200, b"hello world", None),
                                 (204, b"", None), (200, b"hello world", None),
                                 (200, b"until the end", None)]


def test_pool_tells_a_stale_connection_from_a_cut_answer() -> None:
    from nel_resources.wire.http_raw import RawHTTPError, StaleConnectionError

    async def go() -> None:
        # 1: answered; 2: closed without a byte (on a reused connection: stale);
        # 3 (new connection): half a body, then closed; 4: closed without a byte on a
        # fresh connection.
        server = await _serve_answers(
            [_LENGTH, b"", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabCUT", b""],
            byte_by_byte=False)
        pool = RawHTTPPool("127.0.0.1", server.sockets[0].getsockname()[1], limit=1)
        try:
            assert (await pool.request("POST", "/x", b"", b"{}")).body == b"abcde"
            with pytest.raises(StaleConnectionError):
                await pool.request("POST", "/x", b"", b"{}")
            with pytest.raises(RawHTTPError, match="mid-response"):
                await pool.request("POST", "/x", b"", b"{}")
            with pytest.raises(RawHTTPError, match="without answering") as err:
                await pool.request("POST", "/x", b"", b"{}")
            assert not isinstance(err.value, StaleConnectionError)
        finally:
            await pool.close()
            server.close()

    asyncio.run(go())
