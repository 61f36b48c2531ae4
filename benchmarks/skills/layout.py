"""Where NeMo Skills' prepared benchmarks live on disk, and what each one defaults to.

The layout is Skills' own data directory (what `ns prepare_data <name> --data_dir=DIR`
writes, or `nemo_skills/dataset/` in a Skills checkout):

    DIR/<name>/<split>.jsonl     the prepared rows (`EVAL_SPLIT`, `test` unless it says)
    DIR/<name>/__init__.py       optional: the benchmark's defaults (METRICS_TYPE, EVAL_SPLIT,
                                 EVAL_ARGS `++eval_type=`, GENERATION_ARGS `++prompt_config=`),
                                 read as literals and never executed

DIR is the benchmark's `params: {data_dir: ...}`, else `NEL_SKILLS_DIR`, else
`$NEL_DATA_DIR/skills`. nel downloads nothing: an absent file is refused in one line saying
which file to put where and how Skills makes it.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path

from benchmarks.errors import DataMissingError, NelError

ENV_VAR = "NEL_SKILLS_DIR"
SCHEME = "skills://"


@dataclass(frozen=True, slots=True)
class SkillsDefaults:
    """A benchmark's defaults, as its `nemo_skills/dataset/<name>/__init__.py` sets them."""

    eval_type: str  # math, multichoice, evalplus
    split: str = "test"
    prompt_config: str | None = None


# Skills' own defaults for the benchmarks nel grades, used when the data directory has no
# `__init__.py` next to the prepared file (`ns prepare_data` copies only the data).
KNOWN: dict[str, SkillsDefaults] = {
    "mmlu-pro": SkillsDefaults("multichoice", "test", "eval/aai/mcq-10choices"),
    "gpqa": SkillsDefaults("multichoice", "diamond", "eval/aai/mcq-4choices"),
    "math-500": SkillsDefaults("math", "test", "generic/math"),
    "gsm8k": SkillsDefaults("math", "test", "generic/math"),
    "human-eval": SkillsDefaults("evalplus", "test", "generic/codegen"),
}
# nel's own benchmark of the same name, offered when Skills' data is absent.
BUILTIN_TWIN: dict[str, str] = {"mmlu-pro": "mmlu_pro", "gsm8k": "gsm8k", "math-500": "math500",
                                "gpqa": "gpqa", "human-eval": "humaneval"}
_ARG = re.compile(r"\+\+(\w+)=(\S+)")


def benchmark_of(uri: str) -> str:
    """`skills://mmlu-pro` -> `mmlu-pro`; a one-line NelError for an empty or unsafe name."""
    name = uri.removeprefix(SCHEME).strip()
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        raise NelError(f"benchmark {uri!r}: write `skills://<name>` with the name of a Skills "
                       "benchmark (e.g. skills://mmlu-pro); see `nel list -s skills`")
    return name


def skills_dir(data_dir: str | None = None) -> Path:
    """The prepared-data directory: `data_dir`, else NEL_SKILLS_DIR, else $NEL_DATA_DIR/skills."""
    from benchmarks.datasets import cache_root, data_root

    if data_dir:
        return Path(data_dir).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return (data_root() or cache_root()) / "skills"


def _module_constants(path: Path) -> dict[str, str]:
    """The top-level `NAME = "string"` assignments of a Skills dataset `__init__.py`."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, str] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            out[node.targets[0].id] = node.value.value
    return out


def defaults_for(name: str, root: Path) -> SkillsDefaults | None:
    """The benchmark's defaults: its `__init__.py` in `root` where there is one, else nel's
    table of Skills' defaults; None for a benchmark neither knows."""
    base = KNOWN.get(name)
    consts = _module_constants(root / name / "__init__.py")
    if not consts:
        return base
    args = dict(_ARG.findall(consts.get("EVAL_ARGS", "")))
    gen = dict(_ARG.findall(consts.get("GENERATION_ARGS", "")))
    eval_type = args.get("eval_type") or consts.get("METRICS_TYPE") or (base.eval_type if base else None)
    if eval_type is None:
        return None
    return SkillsDefaults(eval_type, consts.get("EVAL_SPLIT", base.split if base else "test"),
                           gen.get("prompt_config") or consts.get("PROMPT_CONFIG")
                           or (base.prompt_config if base else None))


def data_file(name: str, root: Path, split: str) -> Path:
    """Where the prepared split of `name` must be."""
    return root / name / f"{split}.jsonl"


def missing_data_message(uri: str, path: Path) -> str:
    """The one line that refuses a benchmark whose prepared file is absent."""
    name = benchmark_of(uri)
    root = path.parent.parent
    return (f"benchmark {uri!r} cannot run here without NeMo Skills' prepared data: put {path} "
            f"in place "
            f"(Skills makes it with `ns prepare_data {name} --data_dir={root}`; nel downloads "
            f"nothing), or point {ENV_VAR} (or the benchmark's `params: {{data_dir: ...}}`) at "
            f"the folder that holds `{name}/`"
            + (f"; nel's own `{BUILTIN_TWIN[name]}` needs none of this" if name in BUILTIN_TWIN else ""))


def require_data(uri: str, data_dir: str | None = None, split: str | None = None) -> Path:
    """The prepared file of `uri`, or DataMissingError with the one line above."""
    name = benchmark_of(uri)
    root = skills_dir(data_dir)
    d = defaults_for(name, root)
    path = data_file(name, root, split or (d.split if d else "test"))
    if not path.is_file():
        raise DataMissingError(missing_data_message(uri, path))
    return path


def local_benchmarks(data_dir: str | None = None) -> list[tuple[str, str, list[str]]]:
    """(name, eval type, splits) of every prepared benchmark in the data directory."""
    root = skills_dir(data_dir)
    if not root.is_dir():
        return []
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        splits = sorted(f.stem for f in d.glob("*.jsonl"))
        if splits:
            dflt = defaults_for(d.name, root)
            out.append((d.name, dflt.eval_type if dflt else "unknown", splits))
    return out
