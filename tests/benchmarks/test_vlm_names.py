"""NeMo Evaluator's VLM names import from nel (`VLMSolver`, `VLMEvalKitEnvironment`) and work
as there: a VLMEvalKit dataset from a local TSV seeds its images; the solver sends them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.vlmevalkit_tsv import write_mcq

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, sys
from benchmarks.nemo_imports import install_nemo_imports
install_nemo_imports()
from nemo_evaluator import VLMSolver, ModelClient
from nemo_evaluator.solvers.vlm import VLMSolver as V2
from nemo_evaluator.environments.vlmevalkit import VLMEvalKitEnvironment
from nemo_evaluator.environments import get_environment

env = VLMEvalKitEnvironment("MMBench_DEV_EN", limit=3)
same = get_environment("vlmevalkit://MMBench_DEV_EN")
seed = asyncio.run(env.seed(0))
assert V2 is VLMSolver and len(env) == 3 and len(same) == 6
client = ModelClient(base_url=sys.argv[1], model="ref")
solver = VLMSolver(client, image_detail="high")
out = asyncio.run(solver.solve(seed))
v = asyncio.run(env.verify(out.response, seed.expected_answer, **seed.metadata))
print(out.response, v.reward, out.trajectory[0]["content"][0]["image_url"]["url"][:10])
try:
    VLMSolver(client, image_detail="huge")
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_nemo_names_run_a_vlmevalkit_item(tmp_path: Path, reference_server, server_stats) -> None:
    write_mcq(tmp_path, "MMBench_DEV_EN")
    url = reference_server()
    proc = subprocess.run([sys.executable, "-c", SCRIPT, url], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "NEL_VLMEVALKIT_DIR": str(tmp_path),
                                         "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()
    # the reference server counted the shapes in the image it got: row 0 has one (option A)
    assert first == "Answer: A 1.0 nel-image:"  # the trajectory names the image by hash
    assert second == "NelError VLMSolver: image_detail 'huge': write one of auto, low, high"
    assert server_stats(url)["images"] == {"high": 1}
