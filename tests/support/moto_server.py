"""moto's server as a real process on 127.0.0.1 (AWS emulated: ECS, EC2, Secrets Manager,
SSM, S3, ECR, CodeBuild), with fake credentials and boto3 pointed at it."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nel_resources.runtime.processes import ManagedProcess
from tests.support.realcomponents import require_real_component
from tests.support.waiting import PROCESS_START_S, wait_for

REGION = "us-east-1"


def port_from_log(proc: ManagedProcess, pattern: str) -> int:
    """The port a starting process prints (the first group of `pattern` in its log)."""
    found = wait_for(lambda: re.search(pattern, proc.log_tail(4000)), timeout=PROCESS_START_S,
                     what=f"{proc.name} to print its port", interval=0.05, alive=proc)
    return int(found.group(1))


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """moto's server on a port of its choosing, with fake credentials pointed at it."""
    binary = Path(sys.executable).parent / "moto_server"
    if not binary.exists():
        require_real_component("moto_server is not installed (pip install 'moto[server]')")
    proc = ManagedProcess([str(binary), "-H", "127.0.0.1", "-p", "0"], name="moto").start()
    mp = pytest.MonkeyPatch()
    try:
        port = port_from_log(proc, r"Running on http://127\.0\.0\.1:(\d+)")
        url = f"http://127.0.0.1:{port}"
        for k, v in {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing",
                     "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        # moto moves a task one lifecycle step per describe-tasks by default (RUNNING ->
        # DEACTIVATING -> ... at once); as on AWS, a task keeps running until it is stopped
        req = urllib.request.Request(
            f"{url}/moto-api/state-manager/set-transition", method="POST",
            data=json.dumps({"model_name": "ecs::task", "transition": {
                "progression": "manual", "times": 1_000_000}}).encode())
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30)
        yield url
    finally:
        mp.undo()
        proc.stop()
