"""Agent benchmarks: NeMo Evaluator 0.3.0's agentic built-ins read from local task files
(Harbor task directories, PinchBench task files) and `harbor://name@version` caches.

`benchmarks._registry.BUILTINS` names `terminal-bench-v1`, `terminal-bench-hard`, `nmp_harbor`,
`swebench-verified`, `swebench-multilingual` and `pinchbench` here.
"""

from benchmarks.agentic.builtins import (
    AGENT_BENCHMARKS,
    AgentBenchmark,
    candidate_dirs,
    harbor_cache_dir,
    harbor_uri_factory,
    harbor_uri_tasks,
    locate,
)
from benchmarks.agentic.harbor_tasks import HarborTask, HarborTaskSet, read_task

__all__ = ["AGENT_BENCHMARKS", "AgentBenchmark", "HarborTask", "HarborTaskSet", "candidate_dirs",
           "harbor_cache_dir", "harbor_uri_factory", "harbor_uri_tasks", "locate", "read_task"]
