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
    `trtllm-serve`) and PYTHONPATH (`sglang.launch_server`), recording into `record`."""
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
