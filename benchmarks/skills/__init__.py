"""NeMo Skills' benchmarks (`skills://NAME`) from Skills' own prepared data and prompt configs,
graded with Skills' rules. See benchmarks.skills.layout for where the files go."""

from __future__ import annotations

from benchmarks.skills.environment import EVAL_TYPES, SkillsEnvironment, skills_uri_factory
from benchmarks.skills.layout import ENV_VAR, local_benchmarks, require_data, skills_dir

__all__ = ["ENV_VAR", "EVAL_TYPES", "SkillsEnvironment", "local_benchmarks", "require_data",
           "skills_dir", "skills_uri_factory"]
