"""Stand-ins for vLLM, SGLang and TRT-LLM servers (see stand_in.py) and how a test puts
them on PATH / PYTHONPATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def stand_in_env(record: Path, *, delay: str = "0", answers: Path | None = None,
                 base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (os.environ by default) with the stand-ins first on PATH (`vllm`,
    `trtllm-serve`, `trtllm-llmapi-launch`, `ray`) and PYTHONPATH (`sglang.launch_server`), recording into `record`."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{HERE / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    py = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = f"{py}{os.pathsep}{HERE / 'py'}" if py else str(HERE / "py")
    env["NEL_STANDIN_PYTHON"] = sys.executable
    env["NEL_STANDIN_RECORD"] = str(record)
    env["NEL_STANDIN_HEALTH_DELAY"] = delay
    if answers is not None:
        env["NEL_STANDIN_ANSWERS"] = str(answers)
    return env


#: The image launched-server tests run on `cluster.type: docker`: nel's image plus the
#: stand-ins at /usr/local/bin (`vllm`, `trtllm-serve`) and on PYTHONPATH (SGLang's module).
STANDIN_IMAGE = "nel-gpu-standins:local"


def build_standin_image(base: str, docker: str = "docker", tag: str = STANDIN_IMAGE) -> str:
    """Build `tag` FROM `base` (nel's image: the stand-ins become nel's reference server,
    which needs nel's packages) with this folder copied where its REPO path resolves."""
    import shutil
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as ctx:
        shutil.copytree(HERE, Path(ctx) / "gpu_servers", ignore=shutil.ignore_patterns("__pycache__"))
        dest = "/opt/nel/src/tests/support/gpu_servers"
        (Path(ctx) / "Dockerfile").write_text(
            f"FROM {base}\nCOPY gpu_servers {dest}\n"
            f"RUN ln -s {dest}/bin/vllm /usr/local/bin/vllm"
            f" && ln -s {dest}/bin/trtllm-serve /usr/local/bin/trtllm-serve\n"
            f"ENV NEL_STANDIN_PYTHON=/opt/nel/venv/bin/python PYTHONPATH=/opt/nel/src:{dest}/py\n")
        proc = subprocess.run([docker, "build", "-q", "-t", tag, ctx], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building {tag} failed: {proc.stderr[-2000:]}")
    return tag
