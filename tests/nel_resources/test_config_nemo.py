"""NeMo Evaluator 0.3.0 configs in nel: our own copies of every example config of its sdist,
every walkthrough config and deployment pattern §7 of its docs (tests/fixtures/nemo_configs/)
load; the ones whose features nel has run end to end against the reference server; the
others are refused in one line naming the key. The real peer accepts the same copies."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from nel_resources.checks import check_supported, load_checked_config
from nel_resources.config import ConfigError, apply_override, load_config
from tests.support.cli import run_nel, summary_json
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.peers import peer_nemo_bin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"
COPIES = (sorted(FIXTURES.glob("examples/*.yaml")) + sorted(FIXTURES.glob("walkthrough/*.yaml"))
          + sorted(FIXTURES.glob("deployment/*.yaml")))

# The key each copy is refused on (None: nel runs it as it is).
REFUSED_KEY = {
    "01_gsm8k_chat": None, "02_mmlu_completions": None, "05_simpleqa_judge": None,
    "03_mmlu_lmeval": None, "04_mmlu_pro_skills": "benchmarks.0.name",
    "06_humaneval_docker": None,
    "07_swebench_harbor": "benchmarks.0.name",
    "07_swebench_harbor_prod": "benchmarks.0.name",
    # the harbor solver runs here (Harbor 0.24.0, `make peers`): these are refused on what
    # they run it in
    "07_swebench_multilingual_harbor": "benchmarks.0.sandbox.type",  # no AWS credentials here
    "07_swebench_pro_harbor": "benchmarks.0.name",
    "07a_swebench_harbor_docker": "benchmarks.0.name",
    "08_terminalbench_harbor": "benchmarks.0.name",
    "08a_terminalbench_harbor_docker": "benchmarks.0.name",
    "08b_terminalbench_v1_harbor": "benchmarks.0.sandbox.type",  # no AWS credentials here
    "09_gym_runtime": None,
    "09f_skills_eval_caveman_local_ecs": "benchmarks.0.name",
    "10_gym_full": None, "10_nmp_harbor": None,
    "11_gym_env_harbor": None,
    # its interceptors (turn_counter, reasoning_replay), the OpenClaw web search its playbook
    # sets and OpenClaw in its ECS sandbox (0.3.0's image) are built: a run here stops for
    # want of the search key, else of AWS credentials
    "12_pinchbench_openclaw": ("benchmarks.0.solver.web_search_provider",
                               "benchmarks.0.sandbox.type"),
    "13_vlmevalkit_mmbench": "benchmarks.0.name", "14_container_nemo_skills": "benchmarks.0.name",
    # vLLM on a SLURM node pool: run end to end on the test cluster's fake GPUs by
    # tests/dagster_project/test_slurm_gpu_servers.py (SLURM_GPU below). Container mounts
    # run through Pyxis (test_slurm_containers.py). Dynamo (aggregated and disaggregated) runs
    # end to end on the same cluster: tests/dagster_project/test_slurm_dynamo.py.
    # A slurm or apptainer sandbox goes on its node pool (test_apptainer_pool.py); Apptainer
    # is not installed here (Debian bookworm has no package): the run checks it, a dry run lists it.
    "15_slurm_gsm8k_vllm": None, "15a_slurm_gsm8k_vllm_sharded": None,
    "15c_slurm_gsm8k_dynamo": None,
    "15d_slurm_gsm8k_dynamo_disagg": None,
    "16_slurm_swebench_harbor": None,
    "16a_slurm_swebench_harbor_apptainer": "sandboxes.swebench.type",
    # ecs_fargate finds its cluster in SSM (as 0.3.0), given AWS credentials: none here
    "17_suite_release": None, "18_humaneval_ecs": "benchmarks.0.sandbox.type",
    "19_gym_runtime_ecs": "benchmarks.0.sandbox.type", "20_slurm_gym_runtime": None,
    "20a_slurm_gym_runtime_apptainer": "sandboxes.verify.type",
    "21_tool_calling_gym": None,
    "22_tool_calling_sandbox": None,
    "23_tool_calling_combined": None,
    "wt01_gsm8k_chat": None, "wt02_mmlu_completions": None, "wt04_simpleqa_judge": None,
    # lm-eval:// plans; skills:// is refused without its prepared data
    "wt03_harness_uris": "benchmarks.1.name", "wt05_humaneval_sandbox": None,
    "wt06_swebench_harbor_ecs": "benchmarks.0.name",
    "wt07_gym_delegation": None,
    "wt08_tool_calling_gym": None,
    "wt09_tool_calling_sandbox": None,
    "wt10_tool_calling_combined": None,
    "wt11_vlm_image_detail": "benchmarks.0.name", "wt12_multi_benchmark_suite": None,
    "wt13_slurm_vllm": None, "wt14_slurm_sandbox_harbor": None,
    "wt15_slurm_shards": None, "wt16_container_uri": "benchmarks.0.name",
    # mlflow is built, per-sample traces too: both run (their export to a tracking server that
    # does not answer fails in one line; the results stay)
    "wt17_mlflow_traces": None, "wt18_mlflow_artifacts": None,
    # deployment pattern §7: vLLM on a SLURM node pool, 16 shards (test_slurm_gpu_servers.py)
    "dp07_slurm_eval": None,
}
# Copies whose keys nel has, refused by a run's own checks (one line, before any request).
RUN_REFUSED = {
    # lm-eval:// runs lm-eval's mmlu_generative on local data; without a local copy of
    # cais/mmlu the plan says where to put it (tests/benchmarks/test_lm_eval_*.py run it)
    "03_mmlu_lmeval": "has no local copy and nel downloads nothing: put its splits at ",
    # tool_calling with sandbox tools runs the walkthrough's SWE-bench tasks (verified by
    # their tests/test.sh in the agent's sandbox) from local task files, which are not here
    "22_tool_calling_sandbox": "swebench-verified: no local task files in ",
    "wt09_tool_calling_sandbox": "swebench-verified: no local task files in ",
    "10_nmp_harbor": "no local task files in ",  # terminal-bench's tasks are not here either
    # gym_delegation and tool_calling on Gym tools run these agent benchmarks (their patch is
    # verified by the task's tests in nel's docker sandbox: test_gym_harbor_e2e.py); the
    # SWE-bench task files are not here
    "09_gym_runtime": "swebench-multilingual: no local task files in ",
    "10_gym_full": "swebench-multilingual: no local task files in ",
    "21_tool_calling_gym": "swebench-multilingual: no local task files in ",
    "23_tool_calling_combined": "unknown benchmark 'research-bench'",
    "wt07_gym_delegation": "swebench-multilingual: no local task files in ",
    "wt08_tool_calling_gym": "swebench-multilingual: no local task files in ",
    "wt10_tool_calling_combined": "unknown benchmark 'research-bench'",
    # its problems are the Gym server's at localhost:8000 (none runs here); against a real
    # `nel serve` and NeMo Gym: tests/benchmarks/test_gym_native_served.py, test_gym_rollouts.py
    "11_gym_env_harbor": "has no /dataset_size",
    # Harbor tasks run in a slurm sandbox on its node pool (test_harbor_cluster_sandboxes_e2e.py),
    # and gym_delegation's patch is verified there; the SWE-bench task files are not here
    "16_slurm_swebench_harbor": "swebench-verified: no local task files in ",
    "wt14_slurm_sandbox_harbor": "swebench-verified: no local task files in ",
    "20_slurm_gym_runtime": "swebench-multilingual: no local task files in ",
}
# What the dry run plans although the run refuses it: a check that needs what only the run
# has (the task files, a Docker engine and its images, AWS) is listed, not made
# (nel_resources.checks.deferred); the run refuses with that check's line.
DRY_RUN_DEFERS = {
    "07a_swebench_harbor_docker": "needs the data here", "08a_terminalbench_harbor_docker": "needs the data here",
    "10_nmp_harbor": "needs the data here", "22_tool_calling_sandbox": "needs the data here",
    "wt09_tool_calling_sandbox": "needs the data here", "09_gym_runtime": "needs the data here",
    "10_gym_full": "needs the data here", "21_tool_calling_gym": "needs the data here",
    "wt07_gym_delegation": "needs the data here", "wt08_tool_calling_gym": "needs the data here",
    "14_container_nemo_skills": "needs the Docker engine", "wt16_container_uri": "needs the Docker engine",
    "18_humaneval_ecs": "needs AWS",
    # gym:// without data=: the server's problems, asked when the run starts (as 0.3.0 does)
    "11_gym_env_harbor": "needs the server up",
    # Harbor tasks in ecs_fargate: AWS credentials, and the task images CodeBuild builds
    "07_swebench_harbor": "needs AWS", "07_swebench_harbor_prod": "needs AWS",
    "07_swebench_multilingual_harbor": "needs AWS", "07_swebench_pro_harbor": "needs AWS",
    "08_terminalbench_harbor": "needs AWS", "08b_terminalbench_v1_harbor": "needs AWS",
    "09f_skills_eval_caveman_local_ecs": "needs AWS", "19_gym_runtime_ecs": "needs AWS",
    "wt06_swebench_harbor_ecs": "needs AWS",
    # OpenClaw in the playbook's ecs_fargate sandbox (0.3.0's OpenClaw image)
    "12_pinchbench_openclaw": "needs AWS",
    # lm-eval's task data, NeMo Skills' prepared data and VLMEvalKit's TSV are not on this machine
    "03_mmlu_lmeval": "needs the data here", "wt03_harness_uris": "needs the data here",
    "04_mmlu_pro_skills": "needs the data here", "13_vlmevalkit_mmbench": "needs the data here",
    "wt11_vlm_image_detail": "needs the data here",
    "16_slurm_swebench_harbor": "needs the data here", "wt14_slurm_sandbox_harbor": "needs the data here",
    "20_slurm_gym_runtime": "needs the data here",
    # an apptainer sandbox (on a node pool) needs `apptainer` where nel runs (it builds the SIFs)
    "16a_slurm_swebench_harbor_apptainer": "needs the program installed",
    "20a_slurm_gym_runtime_apptainer": "needs the program installed",
}
# ... and where it goes on past such a check to a key the run did not reach: refused there.
DRY_RUN_KEY: dict[str, str] = {}
# Suites with a benchmark that cannot run as written (simpleqa is graded by an LLM judge and
# these suites give it none): it fails alone, the others run (test_suite_failures.py runs one).
SUITE_PARTIAL = {
    "17_suite_release": ("simpleqa", "simpleqa is graded by an LLM judge"),
    "wt12_multi_benchmark_suite": ("simpleqa", "simpleqa is graded by an LLM judge"),
}
# Launched GPU servers on a SLURM node pool: they plan here and run end to end on the test
# SLURM cluster with fake GPUs (tests/dagster_project/test_slurm_gpu_servers.py), not against
# the reference server below.
SLURM_GPU = {"15_slurm_gsm8k_vllm", "15a_slurm_gsm8k_vllm_sharded", "wt13_slurm_vllm", "wt15_slurm_shards",
             "dp07_slurm_eval",
             "15c_slurm_gsm8k_dynamo", "15d_slurm_gsm8k_dynamo_disagg"}  # test_slurm_dynamo.py
# SLURM configs whose dry run writes the sbatch scripts (as NeMo Evaluator's does).
SLURM_SCRIPTS = SLURM_GPU | {"16_slurm_swebench_harbor", "16a_slurm_swebench_harbor_apptainer",
                             "20_slurm_gym_runtime", "20a_slurm_gym_runtime_apptainer",
                             "wt14_slurm_sandbox_harbor"}
# The docs write `interceptors:` on a service; NeMo Evaluator 0.3.0's own schema rejects it
# (only `proxy.interceptors` exists there). nel accepts both spellings.
PEER_REJECTS = {"wt06_swebench_harbor_ecs"}


def test_every_copy_is_listed() -> None:
    assert len(list(FIXTURES.glob("examples/*.yaml"))) == 36
    assert {p.stem for p in COPIES} == set(REFUSED_KEY)


def _yaml_line(path: Path, line: int) -> str:
    return path.read_text().splitlines()[line - 1]


@pytest.mark.parametrize("path", COPIES, ids=lambda p: p.stem)
def test_copy_loads_and_is_run_or_refused_on_the_right_key(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.benchmarks and cfg.services
    key = REFUSED_KEY[path.stem]
    if key is None:
        check_supported(cfg)
        return
    keys = key if isinstance(key, tuple) else (key,)  # several: it depends on what is installed
    with pytest.raises(ConfigError) as err:
        check_supported(cfg)
    msg = str(err.value)
    m = re.fullmatch(rf"{re.escape(str(path))}:(\d+): key ({'|'.join(map(re.escape, keys))}): (.+)", msg)
    # not built yet, or built but unable to run on this machine (Harbor, a harbor:// cache,
    # a container:// image not in the local Docker engine): each says so
    assert m and re.search(r".+ is not supported yet in nel; .+|cannot (run|be had) here|Docker engine"
                           r"|needs \w+ set in the environment",
                           m.group(3)), msg
    assert "\n" not in msg
    # the line named is where that key is written (or the entry whose playbook implies it)
    last = m.group(2).split(".")[-1]
    written = _yaml_line(path, int(m.group(1)))
    assert (f"{last}:" in written) or last.isdigit() or "playbook:" in written, (msg, written)


def test_the_peer_accepts_our_copies() -> None:
    """NeMo Evaluator's own config entry points (compose + parse) accept every copy."""
    peer_python = peer_nemo_bin().parent / "python"
    script = ("import sys, warnings\nwarnings.simplefilter('ignore')\n"
              "from nemo_evaluator.config import compose_config, parse_eval_config\n"
              "for f in sys.argv[1:]:\n"
              "    try:\n        parse_eval_config(compose_config(f)); print('ACCEPT', f)\n"
              "    except Exception as e:\n        print('REJECT', f, type(e).__name__)\n")
    proc = subprocess.run([str(peer_python), "-c", script, *map(str, COPIES)], capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
                          start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    verdicts = {Path(line.split()[1]).stem: line.split()[0] for line in proc.stdout.splitlines()}
    assert len(verdicts) == len(COPIES)
    assert {n for n, v in verdicts.items() if v == "REJECT"} == PEER_REJECTS




def _distinct(paths: list[Path]) -> list[Path]:
    """The first of copies whose keys and values are the same (a walkthrough config that
    repeats an example config runs once: each end-to-end run costs seconds)."""
    seen: set[str] = set()
    out = []
    for p in paths:
        body = "\n".join(ln for ln in p.read_text().splitlines() if not ln.startswith("#"))
        if body not in seen:
            seen.add(body)
            out.append(p)
    return out


RUNNABLE = _distinct([p for p in COPIES if REFUSED_KEY[p.stem] is None and p.stem not in RUN_REFUSED
                      and p.stem not in SUITE_PARTIAL and p.stem not in SLURM_GPU])



@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.stem)
def test_runnable_copy_runs_end_to_end(path: Path, tmp_path: Path, reference_server,
                                       server_stats, data_dir: Path) -> None:
    # The judge configs point solver and judge at the same server: it gives the top grade to
    # the judge's prompt and answers the benchmark's questions with its default reply.
    url = reference_server()
    n = 3
    cfg = load_config(path)
    args = ["eval", "run", str(path), "-O", f"benchmarks.0.max_problems={n}",
            "-o", str(tmp_path / "out"), "--json", "--no-progress"]
    judge_url = None
    if "judge" in cfg.services:
        # The judge gets its own server, which answers the grader's prompt (the solver's
        # server gives the benchmark's answers); on one server the run would also warn that
        # the model grades itself.
        # (0.3.0's rubric, which a NeMo-spelled judge metric grades on: the top score.)
        judge_url = reference_server(answers=[{"match": "Gold target", "content": "A"},
                                              {"match": "Score the following response",
                                               "content": '{"score": 5, "reasoning": "right"}'}])
        args += ["-O", f"services.judge.url={judge_url}/chat/completions"]
    env = {"NEL_DATA_DIR": str(data_dir), "NEL_TEST_URL": f"{url}/chat/completions",
           "NEL_TEST_URL_COMPLETIONS": f"{url}/completions"}
    sandbox = cfg.benchmarks[0].sandbox
    if sandbox is not None and sandbox.type == "docker":
        # Nothing can be pulled here: the locally built Python image stands in for the
        # config's `python:3.12-slim`; the run uses the real Docker engine.
        env["DOCKER_HOST"] = start_docker_engine()
        args += ["-O", f"benchmarks.0.sandbox.image={BASE_IMAGE}"]
    s = summary_json(run_nel(*args, env=env))
    bench = cfg.benchmarks[0]
    res = [r for r in s["results"] if r["benchmark"] == bench.name]
    assert len(res) == 1 and res[0]["n_items"] == n, s
    st = server_stats(url)
    protocol = cfg.services[bench.service].protocol
    endpoint = "/v1/completions" if protocol == "completions" else "/v1/chat/completions"
    assert st["by_endpoint"].get(endpoint, 0) == n, st
    if judge_url:
        assert server_stats(judge_url)["by_endpoint"].get("/v1/chat/completions", 0) == n
        assert res[0]["score"] == 1.0  # every answer graded A (CORRECT) by the judge


# --------------------------------------------------------------------------- errors

BASE = """\
services:
  model:
    type: api
    url: http://127.0.0.1:9/v1/chat/completions
    protocol: chat_completions
    model: m
benchmarks:
  - name: gsm8k
    solver:
      type: simple
      service: model
"""


def _load(tmp_path: Path, text: str, overrides: list[str] | None = None):
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p, load_config(p, overrides=overrides)


def _error(tmp_path: Path, text: str, overrides: list[str] | None = None) -> tuple[Path, str]:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_checked_config(p, overrides=overrides)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    return p, msg


def _refusal(tmp_path: Path, text: str) -> str:
    _, cfg = _load(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        check_supported(cfg)
    msg = str(err.value)
    assert "is not supported yet in nel; " in msg and "\n" not in msg
    return msg


def test_solver_service_and_benchmark_service_are_one_field(tmp_path: Path) -> None:
    _, cfg = _load(tmp_path, BASE)
    assert cfg.benchmarks[0].service == "model"
    assert cfg.benchmarks[0].service_names(cfg.services) == ["model"]
    _, old = _load(tmp_path, BASE.replace("    solver:\n      type: simple\n      service: model\n",
                                          "    service: model\n"))
    assert old.benchmarks[0].service == "model" and old.benchmarks[0].solver.type == "simple"
    # the dump reads back the same (the CLI round-trips configs this way)
    again = load_config(data=cfg.model_dump(mode="json"))
    assert again.model_dump() == cfg.model_dump()


def test_service_and_solver_service_disagreeing_is_an_error(tmp_path: Path) -> None:
    text = BASE.replace("  - name: gsm8k\n", "  - name: gsm8k\n    service: other\n")
    p, msg = _error(tmp_path, text)
    assert msg.startswith(f"{p}:10: benchmarks.0.solver: ")
    assert "`service: other` and `solver.service: model` disagree" in msg
    assert "write it once, as `solver.service`" in msg


@pytest.mark.parametrize(("key", "value", "why"), [
    ("temperature", 2.5, "less than or equal to 2"), ("top_p", 1.5, "less than or equal to 1"),
    ("max_tokens", 0, "greater than 0"), ("frequency_penalty", -3, "greater than or equal to -2"),
    ("presence_penalty", 2.1, "less than or equal to 2"),
])
def test_generation_ranges_are_checked(tmp_path: Path, key: str, value: float, why: str) -> None:
    text = BASE.replace("    model: m\n", f"    model: m\n    generation:\n      {key}: {value}\n")
    p, msg = _error(tmp_path, text)
    assert msg.startswith(f"{p}:8: services.model.generation.{key}: ") and why in msg


def test_unknown_sandbox_name_and_type(tmp_path: Path) -> None:
    named = BASE + "    sandbox: pyhton\nsandboxes:\n  python:\n    type: docker\n    image: python:3.12\n"
    p, msg = _error(tmp_path, named)
    assert msg.startswith(f"{p}:12: benchmarks.0.sandbox: sandbox 'pyhton' is not defined under "
                          "`sandboxes:` (defined: python)")
    typed = BASE + "    sandbox:\n      type: dokcer\n"
    p, msg = _error(tmp_path, typed)
    assert msg.startswith(f"{p}:13: benchmarks.0.sandbox.type: ") and "'docker'" in msg


def test_unused_sandboxes_load_and_run(tmp_path: Path) -> None:
    _, cfg = _load(tmp_path, BASE + "sandboxes:\n  box:\n    type: ecs_fargate\n    region: x\n")
    check_supported(cfg)
    assert cfg.sandboxes["box"].type == "ecs_fargate"


def test_bogus_exporter_is_an_error_and_known_ones_are_built(tmp_path: Path) -> None:
    p, msg = _error(tmp_path, BASE + "output:\n  export: [bogus]\n")
    assert msg.startswith(f"{p}:13: output.export.0: unknown exporter 'bogus'; the exporters are "
                          "every_eval_ever, inspect, mlflow, wandb")
    _, msg = _error(tmp_path, BASE + "output:\n  exports: [bogus]\n")  # nel's old spelling
    assert "unknown exporter 'bogus'" in msg
    _, cfg = _load(tmp_path, BASE + "output:\n  export: [inspect, mlflow, wandb, every_eval_ever]\n")  # all built
    check_supported(cfg)
    assert cfg.output.exporter_names() == ["inspect", "mlflow", "wandb", "every_eval_ever"]


def test_typo_suggests_the_valid_key(tmp_path: Path) -> None:
    p, msg = _error(tmp_path, BASE.replace("    solver:", "    max_problem: 3\n    solver:"))
    assert msg == f"{p}:9: unknown key 'benchmarks.0.max_problem'; did you mean 'max_problems'?"
    p, msg = _error(tmp_path, BASE.replace("      service: model", "      service: model\n"
                                           "      gym_service: model"))
    assert msg.startswith(f"{p}:12: benchmarks.0.solver.gym_service: a solver of type 'simple' "
                          "has no key 'gym_service'")


def test_override_into_an_undefined_service_is_an_error(tmp_path: Path) -> None:
    _, msg = _error(tmp_path, BASE, ["services.modle.url=http://127.0.0.1:1/v1"])
    assert msg == ("override 'services.modle.url=http://127.0.0.1:1/v1': there is no service "
                   "'modle' in the config (defined: model); did you mean 'model'? define it in "
                   "the config, or set the whole block with -O services.modle={...}")
    _, msg = _error(tmp_path, BASE, ["sandboxes.box.type=docker"])
    assert "there is no sandbox 'box' in the config (defined: none)" in msg
    # a whole new block, and keys of a defined service, still work
    _, cfg = _load(tmp_path, BASE, ["services.model.url=http://127.0.0.1:2/v1",
                                    "services.judge={type: api, url: 'http://127.0.0.1:3/v1'}"])
    assert cfg.services["model"].url == "http://127.0.0.1:2/v1" and "judge" in cfg.services
    data: dict = {"services": {}}
    with pytest.raises(ConfigError):
        apply_override(data, "services.x.model=m")
    assert data == {"services": {}}


@pytest.mark.parametrize(("yaml_tail", "key", "feature"), [
    ("cluster:\n  type: slurm\n  hostname: login1\n  node_pools:\n    gpu: {partition: batch}\n",
     "cluster.hostname", "submitting over SSH"),
    ("cluster:\n  type: docker\n  docker:\n    privileged: true\n", "cluster.docker.privileged",
     "the docker setting 'privileged'"),
    ("cluster:\n  type: ray\n  ray:\n    runtime_env: {}\n", "cluster.ray.runtime_env",
     "the Ray setting 'runtime_env'"),
    ("cluster:\n  type: ray\n  docker:\n    network: host\n", "cluster.docker",
     "a `docker:` block in a ray cluster"),
    ("cluster:\n  type: local\n  gpus: [0]\n", "cluster.gpus", "cluster.gpus"),
    ("    sandbox:\n      type: ecs_fargate\n      region: us-east-1\n      efs_filesystem_id: fs-1\n",
     "benchmarks.0.sandbox.efs_filesystem_id", "EFS volumes"),
    ("    scoring:\n      metrics:\n        - {type: sandbox, name: run}\n",
     "benchmarks.0.scoring.metrics.0.type", "'sandbox' metrics"),
    ("    verifier: model\n", "benchmarks.0.verifier", "separate verifier services"),
    ("    context_window: 4096\n", "benchmarks.0.context_window", "context-window limits"),
    ("output:\n  timestamped: true\n", "output.timestamped", "timestamped output"),
])
def test_unbuilt_features_are_refused_on_their_key(tmp_path: Path, yaml_tail: str, key: str,
                                                   feature: str) -> None:
    msg = _refusal(tmp_path, BASE + yaml_tail)
    assert f": key {key}: " in msg and feature in msg, msg
    line = int(msg.split(":")[1])
    assert key.split(".")[-1].rstrip("0123456789") in (tmp_path / "cfg.yaml").read_text().splitlines()[
        line - 1] or key.split(".")[-1].isdigit()


@pytest.mark.parametrize(("block", "why"), [
    ("    bogus: 1\n", "cluster.k8s.bogus: unknown key; known keys: "),
    ("    cpu: lots\n", "cluster.k8s.cpu: 'lots' is not a Kubernetes quantity"),
])
def test_a_bad_k8s_block_is_refused_before_any_run(tmp_path: Path, block: str, why: str) -> None:
    """The k8s launcher's own key check runs in check_supported, so `--dry-run` and a run
    refuse the same key (the dry run used to plan past it)."""
    _, cfg = _load(tmp_path, BASE + "cluster:\n  type: k8s\n  k8s:\n" + block)
    with pytest.raises(ConfigError) as err:
        check_supported(cfg)
    msg = str(err.value)
    assert why in msg and "\n" not in msg, msg
    line = int(msg.split(":")[1])
    assert block.split(":")[0].strip() in (tmp_path / "cfg.yaml").read_text().splitlines()[line - 1]


@pytest.mark.parametrize(("service_yaml", "key", "feature"), [
    ("    node_pool: gpu\n", "services.model.node_pool", "node pools (placing services on SLURM nodes)"),
    ("    max_output_tokens: 10\n", "services.model.max_output_tokens", "output token limits"),
    # built for the servers nel launches, refused where nothing would honour them
    ("    health_path: /ready\n", "services.model.health_path",
     "health checks of a server nel does not start"),
])
def test_service_features_are_refused(tmp_path: Path, service_yaml: str, key: str,
                                      feature: str) -> None:
    msg = _refusal(tmp_path, BASE.replace("    model: m\n", "    model: m\n" + service_yaml))
    assert f": key {key}: {feature} is not supported yet in nel" in msg


def test_launched_server_keys_are_honoured_where_nel_starts_the_server(tmp_path: Path) -> None:
    """`pipeline_parallel_size`, `data_parallel_size` and `health_path` of a vllm service are
    built (nel_resources.services.launch); on a llama.cpp server the parallel sizes mean
    nothing and are refused."""
    vllm = "  gpu:\n    type: vllm\n    model_path: org/m\n    pipeline_parallel_size: 2\n" \
           "    data_parallel_size: 2\n    health_path: /ready\n"
    _, cfg = _load(tmp_path, BASE.replace("benchmarks:\n", vllm + "benchmarks:\n"))
    check_supported(cfg)
    # served_model_name: the server loads `model` and answers to (and is asked for) the name
    named = "  gpu:\n    type: sglang\n    model: org/big-model\n    served_model_name: big\n"
    _, cfg = _load(tmp_path, BASE.replace("benchmarks:\n", named + "benchmarks:\n"))
    check_supported(cfg)
    assert (cfg.services["gpu"].model_path, cfg.services["gpu"].model) == ("org/big-model", "big")
    llama = "  gguf:\n    type: llama_cpp\n    model_path: m.gguf\n    pipeline_parallel_size: 2\n"
    msg = _refusal(tmp_path, BASE.replace("benchmarks:\n", llama + "benchmarks:\n"))
    assert ": key services.gguf.pipeline_parallel_size: `pipeline_parallel_size` for a llama_cpp server" in msg


@pytest.mark.parametrize("service_yaml", [
    "    proxy:\n      interceptors:\n        - name: endpoint\n        - name: streaming\n",
    "    interceptors:\n      - name: http_pairs_dump\n        config:\n          dump_path: pairs.json\n",
    "    interceptors:\n      - name: consolidate_system\n      - name: reasoning_replay\n"
    "        config:\n          mode: both\n",
])
def test_nemo_evaluator_interceptors_are_accepted(tmp_path: Path, service_yaml: str) -> None:
    """All of NeMo Evaluator 0.3.0's interceptors are built (`nel_resources/proxy/`)."""
    _, cfg = _load(tmp_path, BASE.replace("    model: m\n", "    model: m\n" + service_yaml))
    check_supported(cfg)


@pytest.mark.parametrize("typ", ["nim", "nat_agent", "nat"])
def test_service_types_nel_cannot_start_are_refused(tmp_path: Path, typ: str) -> None:
    p, cfg = _load(tmp_path, BASE.replace("benchmarks:\n", f"  other:\n    type: {typ}\nbenchmarks:\n"))
    with pytest.raises(ConfigError) as err:
        check_supported(cfg)
    canonical = "nat" if typ == "nat_agent" else typ
    assert str(err.value).startswith(f"{p}:8: key services.other.type: service type '{canonical}'")


def test_other_solvers_are_refused_and_checked(tmp_path: Path) -> None:
    gym = BASE.replace("benchmarks:", "  tools:\n    type: gym\n    url: http://127.0.0.1:5\nbenchmarks:")
    _, cfg = _load(tmp_path, gym.replace("type: simple", "type: tool_calling\n      resource_service: tools"))
    check_supported(cfg)  # Gym resource-server tools are built
    _, cfg = _load(tmp_path, gym.replace("type: simple", "type: gym_delegation\n      gym_service: tools"))
    check_supported(cfg)  # so is gym_delegation
    msg = _refusal(tmp_path, BASE.replace("type: simple", "type: nat"))
    assert "key benchmarks.0.solver.type: the 'nat' solver is not supported yet" in msg
    _, err = _error(tmp_path, gym.replace("type: simple", "type: gym_delegation\n      gym_service: model"))
    assert "benchmarks.0.solver.gym_service: service 'model' must be a `type: gym` service" in err
    _, err = _error(tmp_path, BASE.replace("type: simple", "type: harbor"))
    assert "benchmarks.0.solver.agent: a `harbor` solver needs `agent`" in err


def test_harness_uris_name_what_nel_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_SKILLS_DIR", str(tmp_path / "skills"))  # Skills' data is not there
    _, cfg = _load(tmp_path, BASE.replace("name: gsm8k", "name: skills://mmlu-pro"))
    with pytest.raises(ConfigError) as err:
        check_supported(cfg)  # skills:// runs from a local Skills data directory: not there
    msg = str(err.value)
    assert "\n" not in msg and "key benchmarks.0.name: " in msg
    assert "benchmark 'skills://mmlu-pro' cannot run here without NeMo Skills' prepared data" in msg
    assert f"put {tmp_path / 'skills'}/mmlu-pro/test.jsonl in place" in msg
    assert msg.endswith("nel's own `mmlu_pro` needs none of this")
    # lm-eval:// runs through the installed lm-eval package (its data is checked when the
    # run loads the task: tests/benchmarks/test_lm_eval_local.py)
    _, cfg = _load(tmp_path, BASE.replace("name: gsm8k", "name: lm-eval://gsm8k"))
    check_supported(cfg)
    _, cfg = _load(tmp_path, BASE.replace("name: gsm8k", "name: gym://127.0.0.1:7"))
    check_supported(cfg)  # gym:// environments are built


def test_composition_defaults_base_self_refs_and_nulls(tmp_path: Path) -> None:
    conf = tmp_path / "conf" / "clusters"
    conf.mkdir(parents=True)
    (conf / "small.yaml").write_text("type: local\nshards: 2\n")
    (tmp_path / "conf" / "services.yaml").write_text(
        "services:\n  model:\n    type: api\n    url: http://127.0.0.1:9/v1\n    model: base\n"
        "    generation: {temperature: 0.5, top_p: 0.9}\n")
    (tmp_path / "base.yaml").write_text(
        "defaults:\n  - services\n  - clusters/small\n  - _self_\n"
        "_bench: gsm8k\nbenchmarks:\n  - name: ${._bench}\n    repeats: 2\n")
    p = tmp_path / "child.yaml"
    p.write_text("defaults:\n  - _base_: base.yaml\n  - _self_\n"
                 "services:\n  model:\n    model: child\n    generation: {top_p: null}\n")
    cfg = load_config(p)
    assert cfg.cluster.shards == 2 and cfg.benchmarks[0].name == "gsm8k"
    assert cfg.benchmarks[0].repeats == 2
    svc = cfg.services["model"]
    assert svc.model == "child" and svc.generation.temperature == 0.5
    assert svc.generation.top_p is None  # `null` removed the inherited value
    p.write_text("defaults:\n  - clusters/huge\nbenchmarks: []\n")
    with pytest.raises(ConfigError, match=r"fragment 'clusters/huge' not found"):
        load_config(p)


def test_playbooks_load_built_in_and_from_files(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("name: gsm8k\nrepeats: 3\nsolver: {type: simple}\n")
    _, cfg = _load(tmp_path, BASE.replace("  - name: gsm8k\n    solver:\n      type: simple\n"
                                          "      service: model\n",
                                          "  - playbook: mine.yaml\n    max_problems: 2\n"))
    assert (cfg.benchmarks[0].name, cfg.benchmarks[0].repeats, cfg.benchmarks[0].max_problems) == (
        "gsm8k", 3, 2)
    _, msg = _error(tmp_path, BASE.replace("  - name: gsm8k", "  - playbook: nope\n    name: x"))
    assert "benchmarks.0.playbook: no playbook 'nope' (built in: pinchbench," in msg


def test_refusal_keeps_file_and_line_through_the_cli(tmp_path: Path) -> None:
    p = tmp_path / "cfg.yaml"
    p.write_text(BASE + "cluster:\n  type: slurm\n  hostname: login1\n  node_pools:\n    gpu: {partition: batch}\n")
    proc = run_nel("eval", "run", str(p), "-o", str(tmp_path / "out"), "--no-progress")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {p}:14: key cluster.hostname: cluster.hostname (submitting over SSH to a login "
        "node) is not supported yet in nel; run nel on the submit host itself")
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("path", COPIES, ids=lambda p: p.stem)
def test_dry_run_plans_or_refuses_each_copy(path: Path, tmp_path: Path, data_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`nel eval run COPY --dry-run` (in this process: 54 interpreters would cost minutes)
    prints a plan for the copies nel runs and refuses the others in one line on the key
    `check_supported` names; it never writes the output directory."""
    from dagster_project.cli.main import main

    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    out = tmp_path / "out"
    rc = main(["eval", "run", str(path), "--dry-run", "--json", "-o", str(out)])
    captured = capsys.readouterr()
    key = DRY_RUN_KEY.get(path.stem, REFUSED_KEY[path.stem])
    # nothing but a SLURM config's sbatch scripts (as NeMo Evaluator's dry run writes them)
    assert not out.exists() or (path.stem in SLURM_SCRIPTS and [q.name for q in out.iterdir()] == ["slurm"]), \
        "a dry run wrote its output directory"
    if path.stem in DRY_RUN_DEFERS:
        plan = json.loads(captured.out)
        assert rc == 0 and plan["would_run"] >= 1 and not plan["errors"], plan
        assert any(DRY_RUN_DEFERS[path.stem] in c for c in plan["deferred_checks"]), plan
        return
    if path.stem in RUN_REFUSED:
        lines = [ln for ln in captured.err.splitlines() if ln.strip()]
        assert rc == 2 and len(lines) == 1 and RUN_REFUSED[path.stem] in lines[0], captured.err
        return
    if path.stem in SUITE_PARTIAL:  # planned; the benchmark that cannot run fails alone
        failing, why = SUITE_PARTIAL[path.stem]
        plan = json.loads(captured.out)
        assert rc == 4 and plan["would_run"] >= 1, plan
        assert [e for e in plan["errors"] if e.startswith(f"{failing}: cannot run: ") and why in e], plan
        assert failing not in {s["benchmark"] for s in plan["shards"]}
        assert {s["benchmark"] for s in plan["shards"]} >= {"gsm8k", "mmlu"}, plan
        return
    if key is None:
        assert rc == 0, captured.err
        plan = json.loads(captured.out)
        bench = load_config(path).benchmarks[0].name
        assert plan["dry_run"] and plan["would_run"] >= 1 and not plan["errors"], plan
        assert {s["benchmark"] for s in plan["shards"]} >= {bench}, plan
        return
    assert rc == 2, (captured.out, captured.err)
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert any(f"key {k}:" in lines[0] for k in (key if isinstance(key, tuple) else (key,))), lines[0]
    assert re.search(r"is not supported yet in nel|cannot (run|be had) here|Docker engine", lines[0]), lines[0]


def test_a_shard_process_refuses_with_the_file_and_line(tmp_path: Path) -> None:
    """One shard of a distributed run re-reads the config with its shard count: the refusal
    still names the file and the key's line (it read `<config>:?` before). The copy of
    walkthrough 15 (SLURM, 4 shards) with a service type nel does not start (`nim`)."""
    text = (FIXTURES / "walkthrough" / "wt15_slurm_shards.yaml").read_text()
    assert "    type: vllm\n" in text
    path = tmp_path / "wt15_nim.yaml"
    path.write_text(text.replace("    type: vllm\n", "    type: nim\n", 1))
    p = run_nel("eval", "run", str(path), "--dry-run", "-o", str(tmp_path / "out"),
                env={"NEL_SHARD_IDX": "1", "NEL_TOTAL_SHARDS": "2"})
    assert p.returncode == 2, p.stdout + p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.strip()]
    m = re.match(rf"error: {re.escape(str(path))}:(\d+): key services\.model\.type: ", line)
    assert m and "type: nim" in _yaml_line(path, int(m.group(1))), line
