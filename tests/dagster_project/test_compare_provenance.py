"""`nel compare` and `nel gate` say so, in one line (and in their JSON), when the baseline
and the candidate were evaluated with different chat templates: a verdict is never silently
about a different evaluation. Real runs against the reference server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_nel, summary_json
from tests.support.realcomponents import REPO_ROOT

POLICY = REPO_ROOT / "deploy" / "policies" / "example.yaml"
_LINE = ("warning: gsm8k: baseline and candidate differ in chat template; the verdict compares "
         "different evaluations, not only different models")


def _run(url: str, out: Path, template: str, data_dir: Path) -> Path:
    summary_json(run_nel(
        "eval", "run", "--bench", "gsm8k", "-m", "8", "--model-url", url, "--model-id", "ref-model",
        "-o", str(out), "--json", "--no-progress",
        "-O", f"services.ref-model.generation.extra_body.chat_template={template}",
        env={"NEL_DATA_DIR": str(data_dir)}))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Path]:
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    tmp = tmp_path_factory.mktemp("prov")
    try:
        return {"base": _run(url, tmp / "base", "{{ messages }}", data_dir),
                "same": _run(url, tmp / "same", "{{ messages }}", data_dir),
                "other": _run(url, tmp / "other", "{% for m in messages %}{{ m.content }}{% endfor %}", data_dir)}
    finally:
        proc.stop()


def _warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "differ in" in ln]


def test_compare_says_the_templates_differ(runs: dict[str, Path]) -> None:
    r = run_nel("compare", str(runs["base"]), str(runs["other"]), "--no-report")
    assert r.returncode in (0, 1, 2), r.stderr
    assert _warnings(r.stderr) == [_LINE]
    r = run_nel("compare", str(runs["base"]), str(runs["other"]), "--format", "json", "--no-report")
    doc = json.loads(r.stdout)
    assert doc["provenance_warnings"] == [_LINE]
    (diff,) = doc["benchmarks"]["gsm8k"]["provenance_differences"]
    assert diff["field"] == "chat template" and diff["baseline"] != diff["candidate"]
    # the same evaluation: nothing said
    r = run_nel("compare", str(runs["base"]), str(runs["same"]), "--format", "json", "--no-report")
    assert json.loads(r.stdout)["provenance_warnings"] == [] and not _warnings(r.stderr)


def test_gate_says_the_templates_differ(runs: dict[str, Path]) -> None:
    r = run_nel("gate", str(runs["base"]), str(runs["other"]), "--policy", str(POLICY), "--no-report")
    assert _warnings(r.stderr) == [_LINE], r.stderr
    r = run_nel("gate", str(runs["base"]), str(runs["other"]), "--policy", str(POLICY), "--format", "json")
    assert json.loads(r.stdout)["provenance_warnings"] == [_LINE]
    r = run_nel("gate", str(runs["base"]), str(runs["same"]), "--policy", str(POLICY), "--format", "json")
    assert json.loads(r.stdout)["provenance_warnings"] == [] and not _warnings(r.stderr)


def test_the_bundle_records_the_template_sent(runs: dict[str, Path]) -> None:
    from nel_resources.services.provenance import text_sha256

    (ev,) = (runs["base"] / "gsm8k").glob("eval-*.json")
    p = json.loads(ev.read_text())["bundle"]["provenance"]
    assert p["served"]["chat_template"] == {"sha256": text_sha256("{{ messages }}"),
                                            "source": "sent with each request"}
    assert p["served"]["model"]["reported_id"] == "nel-reference"
    assert p["served"]["server"] == {"name": "nel-reference-server", "version": "1"}
    assert p["dataset"]["sha256"].startswith("sha256:") and p["prompt"]["template_sha256"].startswith("sha256:")
    assert p["generation"]["extra_body"] == {"chat_template": "{{ messages }}"}
