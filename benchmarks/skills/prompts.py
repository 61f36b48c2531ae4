"""NeMo Skills' prompt configs: a `system` and a `user` template filled from a prepared row.

Skills keeps them as YAML under `nemo_skills/prompt/config/<name>.yaml`; the user template
names row fields in braces (`{problem}`, `{question}`), doubles literal braces (`\\boxed{{}}`),
and has an `{examples}` slot that stays empty unless few-shot examples are asked for. nel
reads a config from the data directory when one is there (`DIR/prompt/config/<name>.yaml`,
or `DIR/../prompt/config/<name>.yaml` when DIR is `nemo_skills/dataset` in a checkout), and
otherwise uses its own copy of the few configs the benchmarks it knows default to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError

# The user templates of Skills' configs (nemo_skills/prompt/config/...yaml at 8b18f39): the
# text of the request, kept verbatim so nel sends what Skills sends.
_MCQ = ("Answer the following multiple choice question. The last line of your response should "
        "be in the following format: 'Answer: {letters}' (e.g. 'Answer: A').\n\n{{problem}}")
BUILTIN_USER: dict[str, str] = {
    "eval/aai/mcq-10choices": _MCQ.format(letters="A/B/C/D/E/F/G/H/I/J"),
    "eval/aai/mcq-4choices": _MCQ.format(letters="A/B/C/D"),
    "generic/math": ("Solve the following math problem. Make sure to put the answer (and only "
                     "answer) inside \\boxed{{}}.\n\n{examples}{problem}"),
    "generic/codegen": (
        "Here is a problem for which you need to generate/complete code:\n{question}\n\n"
        "Please continue to complete the function with python programming language. You are "
        "not allowed to modify the given code and do the completion only.\n\n"
        "The solution should be in the following format:\n```python\n# Your code here\n```"),
    "generic/default": "{question}",
}


@dataclass(frozen=True, slots=True)
class PromptConfig:
    """One Skills prompt config: its name, where it came from, its templates."""

    name: str
    origin: str  # the YAML file read, or "nel" for nel's copy
    user: str
    system: str = ""

    def render(self, row: dict[str, Any], label: str) -> tuple[str, str | None]:
        """(user text, system text or None) for `row`; a one-line NelError naming a field
        the template asks for and the row lacks."""
        fields = {**row, "examples": ""}  # no few-shot examples, as Skills' default
        try:
            user = self.user.format(**fields)
            system = self.system.format(**fields) if self.system else None
        except KeyError as exc:
            raise NelError(f"{label}: prompt config {self.name!r} ({self.origin}) fills "
                           f"{{{exc.args[0]}}}, which the prepared rows do not have (their "
                           f"fields: {', '.join(sorted(row))}); choose another with "
                           "`params: {prompt_config: ...}`") from None
        return user, system


def load_prompt_config(name: str, data_root: Path, label: str) -> PromptConfig:
    """The prompt config `name` (e.g. `generic/math`) from the data directory, else nel's copy.

    Raises:
        NelError: one line when neither has it, or the YAML has no `user` template.
    """
    if name.endswith(".yaml"):
        name = name[:-5]
    for base in (data_root / "prompt" / "config", data_root.parent / "prompt" / "config"):
        path = base / f"{name}.yaml"
        if path.is_file():
            return _from_yaml(name, path, label)
    if name in BUILTIN_USER:
        return PromptConfig(name, "nel", BUILTIN_USER[name])
    raise NelError(f"{label}: no prompt config {name!r}: put Skills' "
                   f"nemo_skills/prompt/config/{name}.yaml at {data_root}/prompt/config/{name}.yaml "
                   f"(nel has its own copy of {', '.join(sorted(BUILTIN_USER))})")


def _from_yaml(name: str, path: Path, label: str) -> PromptConfig:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise NelError(f"{label}: prompt config {path} does not read as YAML: "
                       f"{str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("user"), str):
        raise NelError(f"{label}: prompt config {path} has no `user:` template")
    system = doc.get("system") or ""
    return PromptConfig(name, str(path), doc["user"], system if isinstance(system, str) else "")
