"""The reference server's eyes: it decodes the images a request carries and answers from them.

Tests prove images arrived by asking about them: the server counts the shapes drawn on a
plain background and names their colour, then answers the question deterministically (an
option letter when the prompt lists options, `Yes`/`No` for a yes/no question, else the
count or the colour). A malformed image part is a 400 naming what is wrong, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from typing import Any, NamedTuple

from nel_resources.reference_server.replies import BadRequest

DETAILS = ("auto", "low", "high")
#: Named colours the server tells apart (what the built-in VLM benchmark draws with).
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (40, 170, 70), "blue": (40, 80, 220),
    "yellow": (240, 210, 40), "purple": (140, 60, 170), "orange": (245, 140, 30),
    "black": (20, 20, 20),
}
_NUMBER_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_OPTION = re.compile(r"^\s*\(?([A-J])[.):]\s*(.+?)\s*$", re.M)
# A shape smaller than this many pixels is antialiasing noise or a JPEG artefact.
_MIN_PIXELS = 12


class Sight(NamedTuple):
    """What the server saw in one image."""

    count: int  # shapes (connected regions unlike the background)
    colour: str | None  # the most common named colour among them


def image_parts(content: Any) -> list[tuple[str, str]]:
    """(url, detail) of each image part of a message `content` (chat `image_url` or
    Responses `input_image`); raises BadRequest on a malformed part."""
    if not isinstance(content, list):
        return []
    out = []
    for p in content:
        if not isinstance(p, dict) or p.get("type") not in ("image_url", "input_image"):
            continue
        if p["type"] == "image_url":
            inner = p.get("image_url")
            if not isinstance(inner, dict) or not isinstance(inner.get("url"), str):
                raise BadRequest("an image_url part needs {'image_url': {'url': ...}}")
            url, detail = inner["url"], inner.get("detail", "auto")
        else:
            url, detail = p.get("image_url"), p.get("detail", "auto")
            if not isinstance(url, str):
                raise BadRequest("an input_image part needs a string 'image_url'")
        if detail not in DETAILS:
            raise BadRequest(f"image detail must be one of {', '.join(DETAILS)}, not {detail!r}")
        out.append((url, str(detail)))
    return out


def look(url: str) -> Sight:
    """Decode a `data:` URL image and count its shapes and name their colour."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError
    from scipy import ndimage

    head, sep, payload = url.partition(",")
    if not url.startswith("data:image/") or not sep or not head.endswith(";base64"):
        raise BadRequest("the reference server takes images as base64 data URLs "
                         "(data:image/png;base64,...)")
    try:
        img = Image.open(io.BytesIO(base64.b64decode(payload, validate=True)))
        rgb = np.asarray(img.convert("RGB"), dtype=np.int32)
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError):
        raise BadRequest("an image part's data URL is not a decodable image") from None
    background = rgb[0, 0]
    mask = np.abs(rgb - background).sum(axis=2) > 60
    labels, n = ndimage.label(mask)
    sizes = np.bincount(labels.ravel())[1:] if n else np.zeros(0, dtype=np.int64)
    count = int((sizes >= _MIN_PIXELS).sum())
    if not mask.any():
        return Sight(count, None)
    names = list(PALETTE)
    ref = np.array([PALETTE[k] for k in names], dtype=np.int32)
    pixels = rgb[mask]
    nearest = np.abs(pixels[:, None, :] - ref[None, :, :]).sum(axis=2).argmin(axis=1)
    return Sight(count, names[int(np.bincount(nearest, minlength=len(names)).argmax())])


def _as_number(text: str) -> int | None:
    t = text.strip().lower().rstrip(".")
    if t.isdigit():
        return int(t)
    return _NUMBER_WORDS.get(t)


def _asked(question: str, sights: list[Sight]) -> tuple[str, str | int | None]:
    """(what is asked: count | colour | other, the true value)."""
    q = question.lower()
    if "how many" in q or "number of" in q:
        return "count", sum(s.count for s in sights)
    if "colour" in q or "color" in q:
        return "colour", sights[0].colour if sights else None
    return "other", None


def answer_from(question: str, sights: list[Sight]) -> str:
    """The deterministic answer to `question` about the images seen."""
    options = {m.group(1): m.group(2) for m in _OPTION.finditer(question)}
    kind, value = _asked(question, sights)
    if options and value is not None:
        for letter, text in options.items():
            if (kind == "count" and _as_number(text) == value) or (
                    kind == "colour" and text.strip().lower().rstrip(".") == value):
                return f"Answer: {letter}"
    words = set(re.findall(r"[a-z]+|\d+", question.lower()))
    if words & {"is", "are", "does", "do"} and not options:
        # a yes/no question: "Is the shape red?", "Are there 3 shapes?"
        colour = sights[0].colour if sights else None
        named = [c for c in PALETTE if c in words]
        if named:
            return "Yes" if colour in named else "No"
        numbers = [n for w in words if (n := _as_number(w)) is not None]
        if numbers:
            return "Yes" if sum(s.count for s in sights) in numbers else "No"
    if value is not None:
        return str(value)
    seen = "; ".join(f"{s.count} {s.colour or 'no'} shape(s)" for s in sights)
    return f"I see {seen}."
