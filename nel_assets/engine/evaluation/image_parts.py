"""Images in requests: a seed's images as OpenAI content parts, and the stored form of them.

On the wire an image is a `data:` URL inside the last user message, as an `image_url` part
(Chat Completions) or an `input_image` part (Responses), with the configured `detail`. In
the store the same part names the image by content hash (`nel-image:<sha256>`): the bytes
live once per dataset in its image folder (`save_images`), not once per sample row.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from benchmarks.images import DETAILS, REF_PREFIX, Image, load_image


def seed_images(refs: list[str] | None) -> list[Image]:
    """The images a seed lists, read and checked (raises NelError naming a bad one)."""
    return [load_image(r) for r in refs or ()]


def attach_images(messages: list[dict[str, Any]], images: list[Image], protocol: str,
                  detail: str) -> list[dict[str, Any]]:
    """`messages` with `images` put, as content parts, into the last user message.

    Raises:
        NelError: `detail` is not auto/low/high, the protocol has no image input
            (completions), or there is no user message to carry them.
    """
    if not images:
        return messages
    if detail not in DETAILS:
        raise NelError(f"image_detail {detail!r}: write one of {', '.join(DETAILS)}")
    if protocol == "completions":
        raise NelError("this benchmark's prompts carry images: use a service with protocol "
                       "chat_completions or responses (a completions endpoint takes text only)")
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise NelError("a seed with images needs a user message to carry them")
    i = users[-1]
    text = messages[i].get("content")
    text_part = "input_text" if protocol == "responses" else "text"
    # Images first, then the text: the order NeMo Evaluator's `vlm_chat` and VLMEvalKit send.
    parts: list[dict[str, Any]] = [
        {"type": "input_image", "image_url": img.data_url(), "detail": detail}
        if protocol == "responses" else
        {"type": "image_url", "image_url": {"url": img.data_url(), "detail": detail}}
        for img in images]
    parts += ([dict(p) for p in text] if isinstance(text, list)
              else [{"type": text_part, "text": str(text or "")}])
    out = list(messages)
    out[i] = {**messages[i], "content": parts}
    return out


def _ref_of(url: str) -> str:
    head, sep, payload = url.partition(",")
    if not url.startswith("data:") or not sep or not head.endswith(";base64"):
        return url  # an http(s) URL or a ref already: kept as it is
    try:
        return REF_PREFIX + hashlib.sha256(base64.b64decode(payload, validate=True)).hexdigest()
    except (binascii.Error, ValueError):
        return url


def stored_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with every image part's `data:` URL replaced by its `nel-image:<sha256>`
    name (what the store and the trajectories keep); messages without images are returned
    as they are."""
    out = messages
    for i, m in enumerate(messages):
        content = m.get("content")
        if not isinstance(content, list):
            continue
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "image_url" and isinstance(p.get("image_url"), dict):
                p = {**p, "image_url": {**p["image_url"], "url": _ref_of(str(p["image_url"].get("url", "")))}}
            elif isinstance(p, dict) and p.get("type") == "input_image":
                p = {**p, "image_url": _ref_of(str(p.get("image_url", "")))}
            parts.append(p)
        if out is messages:
            out = list(messages)
        out[i] = {**m, "content": parts}
    return out


def save_images(folder: Path, images: list[Image]) -> None:
    """Write each image once into the dataset's content-addressed folder (`<sha256>.<ext>`);
    an image already there is not written again."""
    for img in images:
        path = folder / img.filename
        if path.exists():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(img.data)
        tmp.replace(path)
