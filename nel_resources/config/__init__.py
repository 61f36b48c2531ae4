"""The `nel` YAML config: NeMo Evaluator 0.3.0's schema, read with precise errors.

The schema follows NeMo Evaluator's configs (`services`, `sandboxes`, `benchmarks`,
`cluster`, `output`, `defaults:` composition) plus nel's own blocks (`comparison`,
`checkpoints`, `data_dir`). `load_config` reads any such config; `unbuilt` holds the tables
of keys nel does not have yet. The schema, loading and those tables only: the checks that
need an implementation (nel_resources.checks) run after it, so this package imports none.
No Dagster import here: the CLI validates configs without paying for it.
"""

from nel_resources.config._base import ConfigError
from nel_resources.config.benchmarks import (
    BenchmarkConfig,
    SandboxConfig,
    ScoringConfig,
    ScoringMetric,
    SolverConfig,
)
from nel_resources.config.deployment import ClusterConfig, NodePool, OutputConfig
from nel_resources.config.loading import (
    MAX_CONFIG_BYTES,
    MAX_YAML_NODES,
    apply_override,
    check_yaml_size,
    expand_env,
    load_config,
    parse_override,
    read_config_text,
)
from nel_resources.config.model import CheckpointsConfig, ComparisonConfig, NelConfig
from nel_resources.config.services import (
    DynamoWorkerConfig,
    GenerationParams,
    InterceptorConfig,
    ProxyConfig,
    ServiceConfig,
)

__all__ = [
    "MAX_CONFIG_BYTES", "MAX_YAML_NODES", "BenchmarkConfig",
    "CheckpointsConfig", "ClusterConfig", "ComparisonConfig", "ConfigError",
    "DynamoWorkerConfig", "GenerationParams", "InterceptorConfig", "NelConfig", "NodePool",
    "OutputConfig", "ProxyConfig", "SandboxConfig", "ScoringConfig", "ScoringMetric",
    "ServiceConfig", "SolverConfig", "apply_override", "check_yaml_size",
    "expand_env", "load_config", "parse_override", "read_config_text",
]
