"""What only the docker sandbox does: warm containers reused after a wipe, locked-down
container settings, nel's `network: none` default, and no container left behind."""

from __future__ import annotations

import json
import subprocess

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
