"""The `apptainer` sandbox: the contained command lines it runs, and its refusal where the
binary is missing (this machine: Debian bookworm does not package Apptainer)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from nel_resources.checks import check_supported
from nel_resources.config import ConfigError, load_config
from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.sandboxes.apptainer import (
    ApptainerSandbox,
    ApptainerSandboxFactory,
    ApptainerSettings,
    image_ref,
    unavailable_reason,
)
from nel_resources.sandboxes.base import SandboxError, SandboxSpec, VolumeMount


def test_exec_command_line_carries_every_limit(tmp_path: Path) -> None:
    settings = ApptainerSettings.from_config(SandboxConfig(
        type="apptainer", image="/images/py.sif", memory="2g", cpus=1.5,
        container_env={"FROM_CONFIG": "c"}))
    spec = SandboxSpec(workdir="/workspace", env={"FROM_SPEC": "two words"},
                       volumes=[VolumeMount("/data/ref", "/ref", readonly=True),
                                VolumeMount("/scratch", "/scratch")])
    sb = ApptainerSandbox(spec, settings)
    argv = sb.exec_argv("python3 t.py", host_dir=tmp_path, cwd="sub")
    assert argv == [
        "apptainer", "exec", "--containall", "--cleanenv", "--net", "--network", "none",
        "--writable-tmpfs", "--pwd", "/workspace/sub", "--bind", f"{tmp_path}:/workspace",
        "--bind", "/data/ref:/ref:ro", "--bind", "/scratch:/scratch",
        "--memory", "2048M", "--cpus", "1.5",
        "--env", "HOME=/workspace", "--env", "FROM_CONFIG=c", "--env", "FROM_SPEC=two words",
        "/images/py.sif", "/bin/bash", "-c", "python3 t.py"]
    # an argv command runs without a shell
    assert sb.exec_argv(["python3", "-c", "print(1)"], host_dir=tmp_path)[-3:] == \
        ["python3", "-c", "print(1)"]


def test_images_resolve_to_the_sif_cache_as_nemo_evaluator_names_them(tmp_path: Path) -> None:
    assert image_ref("/x/y.sif", None) == "/x/y.sif"
    assert image_ref("python:3.12", str(tmp_path)) == "docker://python:3.12"
    (tmp_path / "nvcr.io_nvidia_pytorch__24.01.sif").write_bytes(b"")
    assert image_ref("nvcr.io/nvidia/pytorch:24.01", str(tmp_path)) == \
        str(tmp_path / "nvcr.io_nvidia_pytorch__24.01.sif")


def test_files_stay_in_the_bound_workdir(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("payload")
    sb = ApptainerSandbox(SandboxSpec(image="a.sif", files={"t/a.py": "print(1)"}),
                          ApptainerSettings())

    async def go() -> None:
        await sb.start()
        try:
            await sb.upload(src, "/workspace/data/in.txt")
            await sb.download("data/in.txt", tmp_path / "back.txt")
            await sb.download("t/a.py", tmp_path / "a.py")
            with pytest.raises(SandboxError, match="outside the sandbox's workdir"):
                await sb.upload(src, "/etc/x")
        finally:
            await sb.stop()

    asyncio.run(go())
    assert (tmp_path / "back.txt").read_text() == "payload"
    assert (tmp_path / "a.py").read_text() == "print(1)"
    with pytest.raises(SandboxError, match="needs an image"):
        ApptainerSandbox(SandboxSpec(), ApptainerSettings())


@pytest.mark.skipif(shutil.which("apptainer") is not None, reason="apptainer is installed here")
def test_without_the_binary_the_factory_refuses_in_one_line() -> None:
    reason = unavailable_reason()
    assert reason == "apptainer is not installed on this machine (no `apptainer` on PATH)"
    with pytest.raises(SandboxError) as err:
        ApptainerSandboxFactory(SandboxConfig(type="apptainer", image="a.sif"))
    assert str(err.value) == f"apptainer sandbox: {reason}"


@pytest.mark.skipif(shutil.which("apptainer") is not None, reason="apptainer is installed here")
def test_a_config_with_an_apptainer_sandbox_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("services:\n  model: {type: api, url: 'http://127.0.0.1:9/v1/chat/completions', "
                    "model: m}\nbenchmarks:\n  - name: gsm8k\n    sandbox:\n"
                    "      type: apptainer\n      image: /images/py.sif\n")
    with pytest.raises(ConfigError) as err:
        check_supported(load_config(path))
    assert str(err.value) == (
        f"{path}:6: key benchmarks.0.sandbox.type: apptainer sandbox cannot run here: "
        "apptainer is not installed on this machine (no `apptainer` on PATH)")
