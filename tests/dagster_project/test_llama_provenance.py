"""A launched llama.cpp server (as checkpoint runs use) records what it served: the weights
file's sha256, the chat template it applied (the GGUF file's own), the tokenizer, the server
and its version, in the bundle and its report."""

from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from nel_resources.services.provenance import text_sha256
from tests.support.cli import run_nel, summary_json
from tests.support.realcomponents import llama_model_path, require_real_component

pytestmark = pytest.mark.llama

_SHA256 = "9651322d22993875b772bfb391628f93ce1c1b4a51dbf1297bb20e23e3a0421f"  # shared/models/README.md
_TEMPLATE = ("{% for message in messages %}{{ message['content'] }}{% if not loop.last %}\n"
             "{% endif %}{% endfor %}")


def test_launched_llama_server_provenance_in_the_bundle(tmp_path: Path, data_dir: Path) -> None:
    src = llama_model_path()
    if not src.is_file():
        require_real_component(f"model file {src} is missing")
    model = tmp_path / "ckpt" / "step-2000.gguf"
    model.parent.mkdir()
    shutil.copy(src, model)
    out = tmp_path / "out"
    s = summary_json(run_nel(
        "eval", "run", "dagster_project/configs/default.yaml", "--json", "--no-progress",
        env={"NEL_DATA_DIR": str(data_dir), "NEL_MODEL_PATH": str(model), "NEL_MAX_PROBLEMS": "2",
             "NEL_OUTPUT_DIR": str(out), "NEL_CACHE_DIR": str(tmp_path / "cache")}, timeout=600))
    (res,) = s["results"]
    assert res["n_samples"] == 2
    (ev,) = (out / "gsm8k").glob("eval-*.json")
    p = json.loads(ev.read_text())["bundle"]["provenance"]
    served = p["served"]
    assert served["model"]["weights_sha256"] == f"sha256:{_SHA256}"
    assert served["model"]["weights_file"] == "step-2000.gguf"
    assert served["chat_template"] == {"sha256": text_sha256(_TEMPLATE),
                                       "source": "GGUF metadata (tokenizer.chat_template)"}
    assert served["tokenizer"] == "embedded in the GGUF file (tokenizer.ggml.model=llama)"
    assert served["server"] == {"name": "llama-cpp-python", "version": metadata.version("llama_cpp_python")}
    assert p["service"]["type"] == "llama_cpp" and p["generation"]["protocol"]
    # the hash was cached by (path, size, mtime)
    cache = json.loads((tmp_path / "cache" / "weights-sha256.json").read_text())
    assert list(cache.values()) == [_SHA256]
    report = (out / "gsm8k" / "report" / "model=stories260k" / "report.md").read_text()
    assert f"Provenance: weights sha256:{_SHA256[:12]}…" in report
