"""What only the docker sandbox does: warm containers reused after a wipe, locked-down
container settings, nel's `network: none` default, and no container left behind."""

from __future__ import annotations

import ast
import json
import subprocess
import uuid

import pytest

from nel_resources.config import SandboxConfig
from nel_resources.sandboxes import SandboxSpec, running
from nel_resources.sandboxes.docker import LABEL, DockerSandbox, DockerSandboxFactory, build
from tests.nel_resources.sandboxes.conftest import DRILL_LIMITS, run
from tests.support.docker_engine import BASE_IMAGE


def _docker(*args: str) -> str:
    return subprocess.run(["/usr/bin/docker", *args], capture_output=True, text=True,
                          check=True, timeout=120).stdout


def test_network_defaults_to_none_unless_configured() -> None:
    assert build(SandboxConfig(type="docker", image="x")).network == "none"
    assert build(SandboxConfig(type="docker", image="x", network="bridge")).network == "bridge"
    f = build(SandboxConfig(type="docker", image="x", memory="300m", cpus=0.5, concurrency=3))
    assert (f.limits.memory_bytes, f.cpus, f.concurrency) == (300 << 20, 0.5, 3)


def test_warm_container_is_reused_wiped_and_locked_down(docker_host: str) -> None:
    async def go() -> None:
        f = DockerSandboxFactory(image=BASE_IMAGE, limits=DRILL_LIMITS, concurrency_=1)
        try:
            sb = f.create(SandboxSpec())
            assert isinstance(sb, DockerSandbox)
            async with running(sb):
                first = sb.container_id
                assert first
                r = await sb.exec("echo secret > left.txt; echo t > /tmp/t; "
                                  "(setsid sleep 300 &) ; id -u")
                assert r.ok and r.stdout.strip() == "65534"
                cfg = json.loads(_docker("inspect", first))[0]["HostConfig"]
                assert cfg["ReadonlyRootfs"] and cfg["CapDrop"] == ["ALL"]
                assert cfg["NetworkMode"] == "none" and "no-new-privileges" in cfg["SecurityOpt"]
                assert cfg["PidsLimit"] == DRILL_LIMITS.max_processes
                assert cfg["Memory"] == DRILL_LIMITS.memory_bytes
            sb2 = f.create(SandboxSpec())
            async with running(sb2):
                assert sb2.container_id == first  # the warm container, wiped
                r = await sb2.exec("ls -A . /tmp; ps -eo args 2>/dev/null || "
                                   "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
                assert "left.txt" not in r.stdout and "sleep 300" not in r.stdout, r.stdout
        finally:
            await f.aclose()
        assert not _docker("ps", "-aq", "--filter", f"id={first}").strip()
    run(go())


def test_unknown_image_is_a_sandbox_error(docker_host: str) -> None:
    from nel_resources.sandboxes import SandboxError

    async def go() -> None:
        f = DockerSandboxFactory(image="nel-no-such-image:never", limits=DRILL_LIMITS)
        try:
            with pytest.raises(SandboxError, match="nel-no-such-image"):
                async with running(f.create(SandboxSpec())):
                    pass
            assert f.in_use == 0
        finally:
            await f.aclose()
    run(go())
    mine = _docker("ps", "-aq", "--filter", f"label={LABEL}", "--filter",
                   "ancestor=nel-no-such-image:never")
    assert not mine.strip()


#: Sample A: every directory the sandbox user can write to (found by walking the whole
#: filesystem, so a writable place nobody thought of is found too) gets a marker file, and
#: System V shared memory / message queues and a POSIX message queue are made if they can be.
_LEAVE_TRACES = r'''
import ctypes, ctypes.util, os, sys
marker = sys.argv[1]
skip = ("/proc", "/sys")
wrote = []
for root, dirs, _ in os.walk("/", onerror=lambda e: None):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
    if os.access(root, os.W_OK):
        try:
            with open(os.path.join(root, marker), "w") as f:
                f.write("left by sample A")
            wrote.append(root)
        except OSError:
            pass
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
ipc = {"shm": libc.shmget(0x4E454C, 4096, 0o1666), "msg": libc.msgget(0x4E454C, 0o1666)}
try:
    rt = ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)
    ipc["mq"] = rt.mq_open(b"/nelmq", os.O_CREAT | os.O_RDWR, 0o666, None)
except (OSError, AttributeError):
    ipc["mq"] = -1
print("WROTE", " ".join(wrote))
print("IPC", ipc)
'''
#: Sample B: any marker anywhere, and whether the IPC objects of sample A exist.
_FIND_TRACES = r'''
import ctypes, ctypes.util, os, sys
marker = sys.argv[1]
found = []
for root, dirs, files in os.walk("/", onerror=lambda e: None):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys")]
    found += [os.path.join(root, f) for f in files if marker in f]
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
ipc = {"shm": libc.shmget(0x4E454C, 0, 0), "msg": libc.msgget(0x4E454C, 0)}
print("FOUND", found)
print("IPC", ipc)
print("MQ", os.listdir("/dev/mqueue") if os.path.isdir("/dev/mqueue") else [])
'''


def test_nothing_passes_from_one_sample_to_the_next_in_a_warm_container(docker_host: str) -> None:
    """Workdir, /tmp, /dev/shm and any other writable place, and IPC objects: sample B,
    in the same warm container, finds nothing sample A left."""
    marker = "nel-trace-" + uuid.uuid4().hex[:8]

    async def go() -> None:
        f = DockerSandboxFactory(image=BASE_IMAGE, limits=DRILL_LIMITS, concurrency_=1)
        try:
            a = f.create(SandboxSpec())
            async with running(a):
                first = a.container_id
                r = await a.exec(["python3", "-c", _LEAVE_TRACES, marker])
                assert r.ok, r
                wrote = r.stdout.split("WROTE", 1)[1].splitlines()[0].split()
                # the places a sample can write to, all of them found by the walk
                assert {"/workspace", "/tmp", "/dev/shm"} <= set(wrote), wrote
                made = ast.literal_eval(r.stdout.split("IPC", 1)[1].strip())
            b = f.create(SandboxSpec())
            async with running(b):
                assert b.container_id == first  # the same warm container
                r = await b.exec(["python3", "-c", _FIND_TRACES, marker])
                assert r.ok, r
                assert "FOUND []" in r.stdout, r.stdout
                assert "IPC {'shm': -1, 'msg': -1}" in r.stdout and "MQ []" in r.stdout, r.stdout
            # and none could even be made (they live in the container, not in a directory)
            assert made == {"shm": -1, "msg": -1, "mq": -1}, made
        finally:
            await f.aclose()
    run(go())


def test_no_network_by_default_a_listener_on_the_host_sees_nothing(docker_host: str) -> None:
    """The default container cannot reach a listener on this host (a docker network's
    gateway address); the same code in a `network: bridge` container can, so the drill
    would see a networked sandbox."""
    from tests.support.gateway_listener import gateway_listener

    async def attempt(cfg: SandboxConfig, code: str) -> tuple[str, str]:
        f = build(cfg, DRILL_LIMITS)
        try:
            async with running(f.create(SandboxSpec())) as sb:
                r = await sb.exec(["python3", "-c", code])
                mode = json.loads(_docker("inspect", str(sb.container_id)))[0]["HostConfig"]["NetworkMode"]
                return mode, r.stdout
        finally:
            await f.aclose()

    with gateway_listener() as lis:
        mode, out = run(attempt(SandboxConfig(type="docker", image=BASE_IMAGE), lis.connect_code()))
        assert mode == "none" and "BLOCKED" in out and not lis.seen, (mode, out, lis.seen)
        mode, out = run(attempt(SandboxConfig(type="docker", image=BASE_IMAGE, network="bridge"),
                                lis.connect_code()))
        assert mode == "bridge" and "CONNECTED" in out and lis.seen, (mode, out, lis.seen)
