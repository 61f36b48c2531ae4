"""The reference server reads the images it is sent (a real server process): it counts the
shapes and names their colour, answers from them on chat and responses, and answers 400 (never
500) to a malformed image part."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.reference import http_json
from tests.support.vlmevalkit_tsv import draw

Q = "How many shapes are in the image?\nA. 2\nB. 3\nC. 4\nD. 5"


@pytest.fixture(scope="module")
def url() -> Any:
    from nel_resources.reference_server import start_reference_server

    proc, base = start_reference_server()
    try:
        yield base
    finally:
        proc.stop()


def _chat(url: str, parts: list[dict[str, Any]]) -> tuple[int, Any]:
    status, _, body = http_json("POST", f"{url}/chat/completions",
                                {"model": "m", "messages": [{"role": "user", "content": parts}]})
    return status, body


def _img(png: str, detail: str = "auto") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}", "detail": detail}}


@pytest.mark.parametrize(("n", "letter"), [(2, "A"), (4, "C"), (5, "D")])
def test_chat_answers_from_the_image(url: str, n: int, letter: str) -> None:
    status, body = _chat(url, [_img(draw(n, "green")), {"type": "text", "text": Q}])
    assert status == 200 and body["choices"][0]["message"]["content"] == f"Answer: {letter}"


def test_colour_yes_no_and_responses(url: str) -> None:
    _, body = _chat(url, [_img(draw(1, "yellow")), {"type": "text", "text": "What colour is it?"}])
    assert body["choices"][0]["message"]["content"] == "yellow"
    _, body = _chat(url, [_img(draw(1, "blue")), {"type": "text", "text": "Is the shape red?"}])
    assert body["choices"][0]["message"]["content"] == "No"
    status, _, body = http_json("POST", f"{url}/responses", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": f"data:image/png;base64,{draw(3, 'red')}", "detail": "low"},
        {"type": "input_text", "text": Q}]}]})
    assert status == 200 and body["output"][-1]["content"][0]["text"] == "Answer: B"


@pytest.mark.parametrize(("part", "msg"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}, "not a decodable image"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}, "not a decodable image"),
    ({"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}}, "base64 data URLs"),
    ({"type": "image_url", "image_url": "nope"}, "needs {'image_url': {'url'"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "max"}},
     "detail must be one of auto, low, high"),
])
def test_malformed_image_parts_are_400(url: str, part: dict[str, Any], msg: str) -> None:
    status, body = _chat(url, [part, {"type": "text", "text": Q}])
    assert status == 400 and msg in body["error"]["message"], body
