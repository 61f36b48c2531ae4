"""The images of a report's samples: found by the `nel-image:<sha256>` names their rows'
`images` column holds, read once from the dataset's image folder and embedded as `data:` URLs
(the HTML report is one self-contained file; nothing is fetched)."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from benchmarks.images import REF_PREFIX, sniff_mime

_REF = re.compile(re.escape(REF_PREFIX) + r"([0-9a-f]{64})")


def image_refs(images_json: Any) -> list[str]:
    """The image hashes a stored row's `images` column names, in order, each once."""
    if not isinstance(images_json, str) or REF_PREFIX not in images_json:
        return []
    return list(dict.fromkeys(_REF.findall(images_json)))


def embedded_images(samples: Sequence[Mapping[str, Any]], folder: Path) -> dict[str, str]:
    """sha256 -> `data:` URL for every image the samples name that the folder holds."""
    out: dict[str, str] = {}
    for s in samples:
        for sha in image_refs(s.get("images")):
            if sha in out:
                continue
            hit = next(iter(sorted(folder.glob(f"{sha}.*"))), None) if folder.is_dir() else None
            if hit is None:
                continue
            data = hit.read_bytes()
            out[sha] = f"data:{sniff_mime(data) or 'application/octet-stream'};base64,{base64.b64encode(data).decode()}"
    return out


def images_cell(sample: Mapping[str, Any], images: Mapping[str, str]) -> str:
    """The HTML of a sample's images (a missing one is named by its hash)."""
    parts = []
    for sha in image_refs(sample.get("images")):
        url = images.get(sha)
        parts.append(f'<img class="seed-img" alt="image {sha[:12]}" title="{REF_PREFIX}{sha}" src="{escape(url)}">'
                     if url else f'<span class="muted">image {sha[:12]}… (not in the store)</span>')
    return "".join(parts)
