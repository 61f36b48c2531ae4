"""One path from config to graph: `nel eval run --dry-run` and the Dagster definitions
(`dagster dev` / the daemon: `build_definitions` of `load_definitions_config`) accept and
refuse exactly the same configs, with the same one-line message. Every config fixture in the
tree goes through both: tests/fixtures/**.yaml (NeMo Evaluator's example and walkthrough
configs included; the `conf/` fragments they compose are not configs) and the configs the
package ships (dagster_project/configs/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.datasets import hub_local_only
from benchmarks.errors import NelError
from dagster_project.cli.main import main
from dagster_project.config_loading import load_definitions_config
from dagster_project.definitions import build_definitions
from nel_resources.checks.deferred import deferring_external_checks

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p for p in (ROOT / "tests" / "fixtures").rglob("*.yaml") if "conf" not in p.parts) \
    + sorted((ROOT / "dagster_project" / "configs").glob("*.yaml"))
PER_MODEL = ROOT / "tests" / "fixtures" / "configs" / "nemo_one_entry_per_model.yaml"


def _cli(path: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, list[str]]:
    """('ok' or the CLI's one `error:` line, the checks the plan left to the run: what
    `nel eval run --dry-run` prints)."""
    capsys.readouterr()
    code = main(["eval", "run", str(path), "--dry-run", "--json", "-o", str(out)])
    captured = capsys.readouterr()
    if code == 2:
        lines = [ln for ln in captured.err.splitlines() if ln.startswith("error: ")]
        assert len(lines) == 1, captured.err
        return lines[0].removeprefix("error: "), []
    # 1 or 4: planned, and a benchmark cannot be (data missing; a suite's benchmark that
    # cannot run as configured fails alone)
    assert code in (0, 1, 4), captured.err
    plan = json.loads(captured.out)
    assert plan["dry_run"] is True
    return "ok", [c.split("): ", 1)[1] for c in plan["deferred_checks"]]


def _definitions(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """'ok' or the one line the Dagster definitions refuse the config with."""
    try:
        with hub_local_only():
            cfg, _ = load_definitions_config(str(path))
            monkeypatch.setattr(cfg.output, "dir", str(out))
            build_definitions(cfg, str(out))
    except NelError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return "ok"


def test_every_fixture_is_seen() -> None:
    names = {p.name for p in CONFIGS}
    assert "default.yaml" in names and "01_gsm8k_chat.yaml" in names and PER_MODEL in CONFIGS
    assert len(CONFIGS) > 50


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(ROOT)) for p in CONFIGS])
def test_cli_and_definitions_accept_and_refuse_the_same(
        path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_DAEMON", "off")
    cli, _ = _cli(path, tmp_path / "cli", capsys)
    with deferring_external_checks() as found:  # what the dry run does, through the definitions
        planned = _definitions(path, tmp_path / "dag", monkeypatch)
    assert cli == planned
    dag = _definitions(path, tmp_path / "dag2", monkeypatch)
    if dag != cli:
        # The dry run left to the run the checks that need what only it has (data, Docker,
        # AWS, an agent CLI): the definitions, as the run, refuse with one of them (word for
        # word, or about the same image when the dry run did not ask the engine).
        asked = [c.message for c in found]
        subjects = [c.message.split("'")[1] for c in found if c.message.count("'") >= 2]
        assert dag in asked or any(f"'{s}'" in dag for s in subjects), (dag, asked)


def test_one_entry_per_model_runs_as_partitions_in_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """NeMo Evaluator's form (the benchmark listed once per model) is accepted by the dry run
    and the definitions alike, as one benchmark whose models are its partitions."""
    monkeypatch.setenv("NEL_DAEMON", "off")
    data = tmp_path / "data" / "gsm8k"
    data.mkdir(parents=True)
    data.joinpath("test.jsonl").write_text("".join(
        json.dumps({"question": f"{i}+{i}?", "answer": f"so #### {2 * i}"}) + "\n" for i in range(4)))
    monkeypatch.setenv("NEL_DATA_DIR", str(tmp_path / "data"))
    assert _cli(PER_MODEL, tmp_path / "cli", capsys) == ("ok", [])
    assert _definitions(PER_MODEL, tmp_path / "dag", monkeypatch) == "ok"
    capsys.readouterr()
    code = main(["eval", "run", str(PER_MODEL), "--dry-run", "--json", "-o", str(tmp_path / "j")])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0, plan["errors"]
    assert [(b["name"], b["models"]) for b in plan["benchmarks"]] == [("gsm8k", ["base", "cand"])]
    assert sorted((s["model"], s["action"]) for s in plan["shards"]) == [("base", "run"), ("cand", "run")]


def test_per_model_entries_with_other_differences_are_refused_alike(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_DAEMON", "off")
    path = tmp_path / "differ.yaml"
    path.write_text(PER_MODEL.read_text().replace("service: cand, max_problems: 2",
                                                  "service: cand, max_problems: 3"))
    cli, _ = _cli(path, tmp_path / "cli", capsys)
    assert cli == _definitions(path, tmp_path / "dag", monkeypatch)
    assert "appears twice in the config (benchmarks[0] and benchmarks[1]) with different max_problems" in cli
