"""Images in prompts end to end: `nel eval run` sends a benchmark's images as content parts to
the reference server, which reads them (counts the shapes, names the colour) and answers from
them; the store keeps each image once, the trajectories name them by hash, and the HTML report
shows them. NeMo Evaluator's VLM configs (13, walkthrough 11) run on VLMEvalKit TSV files this
test writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import run_nel, summary_json
from tests.support.vlmevalkit_tsv import write_mcq, write_yes_no

NEMO = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"
_PATHS = {"responses": "responses", "chat_completions": "chat/completions", "completions": "completions"}


@pytest.fixture(scope="module")
def lmu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("LMUData")
    write_mcq(d, "MMBench_DEV_EN")
    write_yes_no(d, "MME")
    return d


@pytest.fixture(scope="module")
def ref_url() -> Any:
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    try:
        yield url
    finally:
        proc.stop()


def _trajectories(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (Path(result["exports"]) / "trajectories.jsonl").read_text().splitlines()]


def _config(path: Path, url: str, protocol: str, bench: dict[str, Any], out: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "services": {"vlm": {"type": "api", "url": f"{url}/{_PATHS[protocol]}",
                             "protocol": protocol, "model": "ref"}},
        "benchmarks": [{**bench, "solver": {"type": "simple", "service": "vlm", "image_detail": "low"}}],
        "output": {"dir": str(out)}}))
    return path


def test_builtin_vlm_benchmark_sends_images_the_server_reads(tmp_path: Path, ref_url: str,
                                                             server_stats: Any) -> None:
    from tests.support import reset_server_stats

    reset_server_stats(ref_url)
    n = 6
    cfg = _config(tmp_path / "c.yaml", ref_url, "chat_completions",
                  {"name": "vlm_shapes", "max_problems": n}, tmp_path / "out")
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress"))
    (r,) = s["results"]
    # every answer is right only because the server decoded each image it was sent
    assert r["n_items"] == n and r["failed"] == 0 and r["score"] == 1.0, r
    assert server_stats(ref_url)["images"] == {"low": n}
    # the store keeps each image once, by content hash; rows and trajectories name them
    images = sorted((tmp_path / "out" / "vlm_shapes" / "dataset" / "images").iterdir())
    assert len(images) == n and all(p.suffix == ".png" and len(p.stem) == 64 for p in images)
    text = (Path(r["exports"]) / "trajectories.jsonl").read_text()
    assert "base64" not in text and all(f"nel-image:{p.stem}" in text for p in images)
    # the HTML report shows them (embedded: one self-contained file)
    html = tmp_path / "report.html"
    p = run_nel("eval", "report", str(tmp_path / "out"), "-f", "html", "-o", str(html))
    assert p.returncode == 0, p.stderr
    page = html.read_text()
    assert page.count('class="seed-img"') == n and "data:image/png;base64," in page


@pytest.mark.parametrize("config", ["examples/13_vlmevalkit_mmbench.yaml",
                                    "walkthrough/wt11_vlm_image_detail.yaml"])
def test_nemo_evaluator_vlm_configs_run_on_local_vlmevalkit_data(
        config: str, tmp_path: Path, lmu: Path, ref_url: str, server_stats: Any) -> None:
    from tests.support import reset_server_stats

    reset_server_stats(ref_url)
    path = tmp_path / Path(config).name
    shutil.copy(NEMO / config, path)
    env = {"NEL_TEST_URL": f"{ref_url}/chat/completions", "NEL_VLMEVALKIT_DIR": str(lmu)}
    s = summary_json(run_nel("eval", "run", str(path), "-o", str(tmp_path / "out"), "--json",
                             "--no-progress", env=env))
    (r,) = s["results"]
    assert r["benchmark"] == "vlmevalkit://MMBench_DEV_EN"
    assert r["n_items"] == 5 and r["failed"] == 0 and r["score"] == 1.0, r  # max_problems: 5
    assert server_stats(ref_url)["images"] == {"high": 5}  # the configs' image_detail: high
    first = _trajectories(r)[0]
    assert first["scoring_details"]["method"] == "vlmevalkit_can_infer"


def test_yes_no_dataset_on_the_responses_protocol(tmp_path: Path, lmu: Path, ref_url: str,
                                                  server_stats: Any) -> None:
    from tests.support import reset_server_stats

    reset_server_stats(ref_url)
    cfg = _config(tmp_path / "c.yaml", ref_url, "responses", {"name": "vlmevalkit://MME"},
                  tmp_path / "out")
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                             env={"NEL_VLMEVALKIT_DIR": str(lmu)}))
    (r,) = s["results"]
    assert r["n_items"] == 4 and r["score"] == 1.0, r
    st = server_stats(ref_url)
    assert st["images"] == {"low": 4} and st["by_endpoint"].get("/v1/responses") == 4
    assert {t["scoring_details"]["method"] for t in _trajectories(r)} == {"vlmevalkit_yes_no"}


def test_missing_tsv_is_refused_in_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "13.yaml"
    shutil.copy(NEMO / "examples/13_vlmevalkit_mmbench.yaml", path)
    p = run_nel("eval", "run", str(path), "-o", str(tmp_path / "out"),
                env={"NEL_VLMEVALKIT_DIR": str(tmp_path / "empty")})
    assert p.returncode == 2, p.stderr
    line = p.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"{tmp_path / 'empty' / 'MMBench_DEV_EN.tsv'}" in line and "NEL_VLMEVALKIT_DIR" in line


def test_nel_list_shows_the_local_vlmevalkit_datasets(lmu: Path) -> None:
    p = run_nel("list", "-s", "vlmevalkit", env={"NEL_VLMEVALKIT_DIR": str(lmu)})
    assert p.returncode == 0, p.stderr
    assert "vlmevalkit://MMBench_DEV_EN" in p.stdout and "vlmevalkit://MME " in p.stdout
    assert "nel eval run --bench vlmevalkit://MME" in p.stdout
    # `--data-dir` names the folder instead; an empty one says what to put there
    p = run_nel("list", "-s", "vlmevalkit", "--data-dir", str(lmu / "nothing"))
    assert p.returncode == 0 and f"(none in {lmu / 'nothing'}: put VLMEvalKit's <NAME>.tsv" in p.stdout


def test_a_completions_service_is_refused_before_any_request(tmp_path: Path, lmu: Path,
                                                             ref_url: str, server_stats: Any) -> None:
    from tests.support import reset_server_stats

    reset_server_stats(ref_url)
    for name in ("vlm_shapes", "vlmevalkit://MME"):
        cfg = _config(tmp_path / "c.yaml", ref_url, "completions", {"name": name}, tmp_path / "out")
        p = run_nel("eval", "run", str(cfg), "--no-progress", env={"NEL_VLMEVALKIT_DIR": str(lmu)})
        assert p.returncode == 2 and "protocol chat_completions or responses" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    assert server_stats(ref_url)["total_requests"] == 0
