"""A seed's images as request content parts (chat and responses), their stored form by hash,
and the refusals for bad input (a completions endpoint, a bad detail, a file that is no image)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from benchmarks._types import SeedResult
from benchmarks.errors import NelError
from benchmarks.images import load_image
from nel_assets.engine.evaluation.image_parts import save_images, stored_messages
from nel_assets.engine.evaluation.loop import build_request
from tests.support.vlmevalkit_tsv import draw

PNG = draw(2, "red")
URL = f"data:image/png;base64,{PNG}"


def test_chat_and_responses_parts_images_first_then_text(tmp_path: Path) -> None:
    f = tmp_path / "x.png"
    f.write_bytes(base64.b64decode(PNG))
    seed = SeedResult("How many?", "2", images=[URL, str(f)])
    msgs, _, system = build_request(seed, "chat_completions", "Be brief.", "high")
    assert msgs is not None and msgs[0] == {"role": "system", "content": "Be brief."} and system
    parts = msgs[1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[0]["image_url"] == {"url": URL, "detail": "high"} == parts[1]["image_url"]
    resp, _, _ = build_request(seed, "responses", None, "low")
    assert resp is not None
    assert [p["type"] for p in resp[0]["content"]] == ["input_image", "input_image", "input_text"]
    assert resp[0]["content"][0] == {"type": "input_image", "image_url": URL, "detail": "low"}
    # stored: named by content hash, the bytes never repeated per row
    ref = load_image(URL).ref
    kept = stored_messages(msgs)
    assert kept[1]["content"][0]["image_url"]["url"] == ref and "base64" not in str(kept)
    assert stored_messages(resp)[0]["content"][1]["image_url"] == ref
    # the same image twice is one file in the dataset's folder
    save_images(tmp_path / "images", [load_image(URL), load_image(str(f))])
    assert [p.name for p in (tmp_path / "images").iterdir()] == [load_image(URL).filename]


def test_text_seeds_are_unchanged() -> None:
    msgs, _, _ = build_request(SeedResult("2+2?", "4"), "chat_completions", None, "high")
    assert msgs == [{"role": "user", "content": "2+2?"}]


@pytest.mark.parametrize(("images", "protocol", "detail", "msg"), [
    ([URL], "completions", "auto", "protocol chat_completions or responses"),
    ([URL], "chat_completions", "ultra", "image_detail 'ultra': write one of auto, low, high"),
    (["data:image/png;base64,@@@"], "chat_completions", "auto", "not valid base64"),
    (["data:image/png;base64," + base64.b64encode(b"hello").decode()], "chat_completions", "auto",
     "not a PNG, JPEG, GIF or WebP image"),
    (["/nonexistent/x.png"], "chat_completions", "auto", "'/nonexistent/x.png' cannot be read"),
])
def test_bad_images_are_refused_in_one_line(images: list[str], protocol: str, detail: str, msg: str) -> None:
    with pytest.raises(NelError, match=msg) as err:
        build_request(SeedResult("q", "a", images=images), protocol, None, detail)
    assert "\n" not in str(err.value)
