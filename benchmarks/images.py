"""Images a benchmark's seed carries: local files or `data:` URLs, read once, named by hash.

A seed lists its images in `SeedResult.images` (a path, or a `data:image/...;base64,...` URL).
Here they become bytes with a MIME type, a content hash (the name the store and the
trajectories use: `nel-image:<sha256>`) and the data URL sent to the model. Pure Python:
no Pillow (only the built-in VLM benchmark draws images).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from pathlib import Path

from benchmarks.errors import NelError

#: How a stored row names an image instead of carrying its bytes.
REF_PREFIX = "nel-image:"
DETAILS = ("auto", "low", "high")
# The formats OpenAI-compatible vision endpoints take, by their magic bytes.
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
          (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))
_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


@dataclass(frozen=True, slots=True)
class Image:
    """One image of a seed: its bytes, MIME type and content hash."""

    data: bytes
    mime: str
    sha256: str

    @property
    def ref(self) -> str:
        """The name stored rows use for this image (`nel-image:<sha256>`)."""
        return REF_PREFIX + self.sha256

    @property
    def filename(self) -> str:
        """The file name of this image in a dataset's content-addressed image folder."""
        return f"{self.sha256}.{_EXT.get(self.mime, 'bin')}"

    def data_url(self) -> str:
        """The `data:` URL sent to the model in an `image_url` content part."""
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"


def sniff_mime(data: bytes) -> str | None:
    """The image type of `data` from its first bytes, or None when it is no image we know."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_from_bytes(data: bytes, where: str) -> Image:
    """An `Image` of raw bytes; `where` names the source in the error when they are no image."""
    mime = sniff_mime(data)
    if mime is None:
        raise NelError(f"{where}: not a PNG, JPEG, GIF or WebP image")
    return Image(data, mime, hashlib.sha256(data).hexdigest())


def load_image(ref: str, base_dir: Path | None = None) -> Image:
    """Read one seed image: a `data:` URL (base64) or a file path (relative to `base_dir`).

    Raises:
        NelError: the URL is not base64 image data, or the file is missing or no image.
    """
    if ref.startswith("data:"):
        head, sep, payload = ref.partition(",")
        if not sep or not head.endswith(";base64"):
            raise NelError(f"image {ref[:40]!r}...: write a base64 data URL "
                           "(data:image/png;base64,...)")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise NelError(f"image {ref[:40]!r}...: the data URL is not valid base64") from None
        return image_from_bytes(data, f"image {ref[:40]!r}...")
    path = Path(ref).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NelError(f"image {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    return image_from_bytes(data, f"image {str(path)!r}")
