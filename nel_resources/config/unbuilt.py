"""The "not built" tables: NeMo Evaluator 0.3.0 keys and names nel accepts in a config but
cannot honour yet, each with what the feature is. The schema loads them (so `--dry-run` can
show the plan); `nel_resources.checks` refuses them, one line each, before any request.
Later issues remove entries as the features land. Tables only: no implementation here.
"""

from __future__ import annotations

#: Benchmark URI schemes of external harnesses NeMo Evaluator runs that nel does not run
#: (`lm-eval://` it runs: benchmarks/lm_eval).
HARNESS_SCHEMES: dict[str, str] = {
    "harbor": "Harbor agent datasets", "container": "legacy eval-factory containers",
    "vlmevalkit": "VLMEvalKit benchmarks",
}
#: The same benchmark built into nel, for names a NeMo Evaluator config may use.
NEL_EQUIVALENT: dict[str, str] = {}
#: Service types nel does not start (the user starts the server and gives its url).
UNSTARTED_SERVICE_TYPES: tuple[str, ...] = ("nim", "docker_model", "nat", "custom")
#: `services.<name>.<key>` -> the feature it asks for. (`image` and `container_mounts` of a
#: launched service on `cluster.type: slurm` run through Pyxis: PYXIS_SERVICE_KEYS; `image`,
#: `gpus` and `container_mounts` on docker, `image` and `gpus` on k8s: checks/supported.py.)
SERVICE_UNBUILT: dict[str, str] = {
    "num_nodes": "multi-node model servers", "gpus": "GPU pinning of a service outside Docker and Kubernetes",
    "image": "running a service in a container image on a local cluster",
    "setup_commands": "service setup commands",
    "container_mounts": "container mounts of a service on a local or Kubernetes cluster",
    "pre_cmd": "a service pre-command", "ray_binary": "Ray-launched servers",
    "reasoning_pattern": "reasoning-trace extraction patterns",
    "max_input_tokens": "input token limits", "max_output_tokens": "output token limits",
    "benchmark": "gym servers nel starts", "server_cmd": "gym servers nel starts",
    "nat_config_file": "NAT agent services", "class_path": "plugin services",
    "config": "plugin services",
}
#: Service keys a slurm cluster honours for the servers nel launches (nel_resources.launchers.pyxis).
PYXIS_SERVICE_KEYS: tuple[str, ...] = ("image", "container_mounts")
#: `benchmarks[i].<key>` -> the feature it asks for.
BENCH_UNBUILT: dict[str, str] = {
    "context_window": "context-window limits", "skip_failed": "skip_failed",
    "max_system_retries": "max_system_retries (nel retries per request: services.<n>.max_retries)",
    "instruction_template": "instruction templates", "verifier": "separate verifier services",
}
#: NeMo Evaluator 0.3.0's solver types nel runs; nel's own solvers are the names of
#: nel_assets.engine.solvers.factory.SOLVERS (checked by dagster_project.run_validation).
SOLVER_TYPES_BUILT: tuple[str, ...] = ("simple", "tool_calling", "gym_delegation", "container",
                                       "openclaw", "harbor")
#: NeMo Evaluator 0.3.0's solver types nel does not run: refused by name, never ignored.
SOLVER_TYPES_UNBUILT: tuple[str, ...] = ("agent", "nat", "oracle", "custom")
#: Judge metric options nel does not take (all of 0.3.0's are honoured: the rubric options
#: by the `rubric` judge kind, benchmarks.judge_rubric; `timeout` and `max_retries` by the
#: judge's client).
JUDGE_UNBUILT: tuple[str, ...] = ()
#: `openclaw` solver keys nel does not honour -> (what, fix). (It honours openclaw_bin,
#: thinking, max_concurrent, context_window, idle_timeout_seconds, web_search_provider,
#: config_path and skip_preflight.)
OPENCLAW_UNBUILT: dict[str, tuple[str, str]] = {}
