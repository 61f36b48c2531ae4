"""The sandbox interface, per type that runs here: exec, timeout, output cap, files,
environment isolation, teardown, the concurrency bound, stateless volumes, errors."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nel_resources.config import SandboxConfig
from nel_resources.sandboxes import SandboxError, SandboxFactory, SandboxSpec, VolumeMount, running
from nel_resources.sandboxes.factory import make_factory
from nel_resources.sandboxes.limits import parse_size
from tests.nel_resources.sandboxes.conftest import run
from tests.support import require_bwrap

Make = Callable[..., SandboxFactory]


def test_exec_shell_argv_stdin_env_and_files(make_sandboxes: Make) -> None:
    async def go() -> None:
        f = make_sandboxes(container_env={"FROM_CONFIG": "c"})
        spec = SandboxSpec(env={"FROM_SPEC": "s"}, files={"pkg/mod.py": "X = 41\n"})
        try:
            async with running(f.create(spec)) as sb:
                r = await sb.exec("cd pkg && python3 -c 'import mod; print(mod.X + 1)'; exit 3")
                assert (r.stdout, r.return_code, r.stopped, r.ok) == ("42\n", 3, None, False)
                # argv runs without a shell: the `;` is an argument, not a separator
                r = await sb.exec(["echo", "a;", "echo", "b"])
                assert r.stdout == "a; echo b\n" and r.ok
                r = await sb.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"],
                                  stdin=b"from stdin")
                assert r.stdout.strip() == "FROM STDIN"
                r = await sb.exec(["sh", "-c", "echo $FROM_CONFIG $FROM_SPEC $FROM_EXEC; pwd"],
                                  env={"FROM_EXEC": "e"})
                assert r.stdout.split() == ["c", "s", "e", spec.workdir]
                r = await sb.exec("pwd", cwd="pkg")
                assert r.stdout.strip() == f"{spec.workdir}/pkg"
                r = await sb.exec("echo oops >&2; exit 1")
                assert (r.stderr, r.return_code, r.stopped) == ("oops\n", 1, None)
        finally:
            await f.aclose()
    run(go())


def test_timeout_and_output_cap(make_sandboxes: Make) -> None:
    async def go() -> None:
        f = make_sandboxes()
        try:
            async with running(f.create(SandboxSpec())) as sb:
                r = await sb.exec("echo started; exec sleep 60", timeout_sec=1)
                assert r.stopped == "timeout" and r.stdout == "started\n" and not r.ok
                r = await sb.exec(["python3", "-c", "print('x' * 5000)"], output_limit=1000)
                assert (r.stopped, r.truncated, len(r.stdout)) == ("output_limit", True, 1000)
                r = await sb.exec("echo still usable")
                assert r.ok and r.stdout == "still usable\n"
        finally:
            await f.aclose()
    run(go())


def test_upload_download_and_paths_outside_refused(make_sandboxes: Make, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    payload = bytes(range(256)) * 64 + b"'; rm -rf / #\n$(reboot)"
    src.write_bytes(payload)

    async def go() -> None:
        f = make_sandboxes()
        try:
            async with running(f.create(SandboxSpec())) as sb:
                await sb.upload(src, "sub/dir/in.bin")
                r = await sb.exec(["python3", "-c", "import hashlib,sys; "
                                   "print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())",
                                   "sub/dir/in.bin"])
                import hashlib
                assert r.stdout.strip() == hashlib.sha256(payload).hexdigest()
                await sb.exec("python3 -c \"open('out.txt','w').write('made inside')\"")
                await sb.download(f"{sb.spec.workdir}/out.txt", tmp_path / "o" / "out.txt")
                assert (tmp_path / "o" / "out.txt").read_text() == "made inside"
                await sb.download("sub/dir/in.bin", tmp_path / "back.bin")
                assert (tmp_path / "back.bin").read_bytes() == payload
                # a link planted inside that leads out is never followed on the host
                await sb.exec("ln -s /etc/hostname escape")
                with pytest.raises(SandboxError):
                    await sb.download("escape", tmp_path / "stolen")
                assert not (tmp_path / "stolen").exists()
                for bad in ("../../etc/passwd", "/etc/passwd"):
                    with pytest.raises(SandboxError):
                        await sb.upload(src, bad)
                with pytest.raises(SandboxError):
                    await sb.download("no-such-file", tmp_path / "missing")
        finally:
            await f.aclose()
    run(go())


def test_environment_is_not_nel_s(make_sandboxes: Make, fake_secret: str) -> None:
    async def go() -> None:
        f = make_sandboxes()
        try:
            async with running(f.create(SandboxSpec())) as sb:
                r = await sb.exec("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
                assert r.return_code == 0 and "PATH=" in r.stdout
                assert fake_secret not in r.stdout + r.stderr
                assert "NEL_FAKE_API_KEY" not in r.stdout
        finally:
            await f.aclose()
    run(go())


def test_stop_is_idempotent_and_cleans_up(make_sandboxes: Make) -> None:
    async def go() -> None:
        f = make_sandboxes()
        try:
            sb = f.create(SandboxSpec())
            await sb.stop()  # before start: harmless
            await sb.start()
            assert (await sb.exec("echo hi > f.txt")).ok
            await sb.stop()
            await sb.stop()
            with pytest.raises(SandboxError):
                await sb.exec("true")
            # a fresh sandbox starts from an empty workdir
            async with running(f.create(SandboxSpec())) as sb2:
                r = await sb2.exec("ls -A")
                assert r.ok and r.stdout == ""
        finally:
            await f.aclose()
    run(go())


def test_concurrency_bounds_live_sandboxes(make_sandboxes: Make) -> None:
    async def go() -> None:
        f = make_sandboxes(concurrency=2)
        assert f.concurrency == 2
        live = peak = 0
        gate = asyncio.Event()
        entered = 0

        async def one(i: int) -> str:
            nonlocal live, peak, entered
            async with running(f.create(SandboxSpec())) as sb:
                live += 1
                entered += 1
                peak = max(peak, live)
                if entered == 2:
                    gate.set()
                await gate.wait()  # the first two hold their slots until both are in
                r = await sb.exec(["echo", str(i)])
                live -= 1
                return r.stdout.strip()
        try:
            outs = await asyncio.gather(*(one(i) for i in range(5)))
        finally:
            await f.aclose()
        assert outs == [str(i) for i in range(5)]
        assert peak == 2
    run(go())


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A volume both sandboxes' users can reach and write (pytest's tmp_path is private to
    root here, and the local sandbox's users are not root)."""
    path = Path(tempfile.mkdtemp(prefix="nel-test-volume-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_stateless_solve_and_verify_share_a_volume(make_sandboxes: Make, shared_dir: Path) -> None:
    shared = shared_dir

    async def go() -> None:
        f = make_sandboxes()
        vol = [VolumeMount(host_path=str(shared), container_path="/shared")]
        try:
            async with running(f.create(SandboxSpec(volumes=vol))) as solve:
                r = await solve.exec("echo 'def f(): return 7' > /shared/answer.py")
                assert r.ok, r.stderr
            async with running(f.create(SandboxSpec(volumes=vol))) as verify:
                r = await verify.exec(["python3", "-c", "import sys; sys.path.insert(0, '/shared');"
                                       " import answer; assert answer.f() == 7; print('pass')"])
                assert r.ok and r.stdout == "pass\n", r.stderr
        finally:
            await f.aclose()
        assert (shared / "answer.py").read_text() == "def f(): return 7\n"
    run(go())


def test_factory_errors_are_one_line() -> None:
    with pytest.raises(SandboxError, match=r"needs a sandbox.*`none`"):
        make_factory(SandboxConfig(type="none"))
    with pytest.raises(SandboxError, match=r"local.*no image"):
        make_factory(SandboxConfig(type="local", image="python:3.11"))
    with pytest.raises(SandboxError, match="not a size"):
        parse_size("lots")
    assert (parse_size("512m"), parse_size("1.5g"), parse_size(1000)) == (512 << 20, 3 << 29, 1000)


def test_local_sandbox_failures_are_sandbox_errors(tmp_path: Path) -> None:
    """What bubblewrap itself cannot do (here: bind a volume that does not exist) is the
    sandbox's error, never a failed program."""
    require_bwrap()
    from nel_resources.sandboxes.local import LocalSandboxFactory

    async def go() -> None:
        f = LocalSandboxFactory()
        missing = [VolumeMount(host_path=str(tmp_path / "absent"), container_path="/v")]
        with pytest.raises(SandboxError, match="absent"):
            async with running(f.create(SandboxSpec(volumes=missing))) as sb:
                await sb.exec("true")
        assert f.in_use == 0
    run(go())
