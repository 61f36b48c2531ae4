"""VLMEvalKit-format TSV files for tests: a few rows with images drawn by Pillow, written as
VLMEvalKit writes them (tab-separated, every cell quoted, `image` as base64 PNG)."""

from __future__ import annotations

import base64
import csv
import io
from pathlib import Path

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 70), "blue": (40, 80, 220), "yellow": (240, 210, 40)}


def draw(n: int, colour: str) -> str:
    """A 64x64 PNG, base64: `n` squares of `colour` on white, in a row-major 3x3 grid."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (64, 64), (255, 255, 255))
    pen = ImageDraw.Draw(img)
    for cell in range(n):
        x, y = (cell % 3) * 21 + 4, (cell // 3) * 21 + 4
        pen.rectangle((x, y, x + 12, y + 12), fill=COLOURS[colour])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_ALL)
        w.writerow(header)
        w.writerows(rows)
    return path


def write_mcq(folder: Path, name: str, n_rows: int = 6) -> Path:
    """An MMBench-like TSV: counting questions with four numeric options. Row 2 shares row
    1's image by index (as VLMEvalKit's files do) and row 0 carries a hint."""
    header = ["index", "question", "hint", "A", "B", "C", "D", "answer", "category", "image"]
    rows = []
    for i in range(n_rows):
        n = 1 + i % 6
        opts = [str(k) for k in range(max(1, n - 1), max(1, n - 1) + 4)]
        image = "1" if i == 2 else draw(n, "blue")
        if i == 2:
            n = 2  # the shared image (row 1's) holds two shapes
            opts = ["1", "2", "3", "4"]
        rows.append([str(i), "How many shapes are in the image?", "Count them." if i == 0 else "",
                     *opts, "ABCD"[opts.index(str(n))], "counting", image])
    return _write(folder / f"{name}.tsv", header, rows)


def write_yes_no(folder: Path, name: str) -> Path:
    """A MME-like yes/no TSV: is the shape of a given colour?"""
    header = ["index", "question", "answer", "category", "image"]
    rows = [[str(i), f"Is the shape {asked}? Please answer yes or no.", "Yes" if asked == real else "No",
             "colour", draw(1, real)]
            for i, (real, asked) in enumerate([("red", "red"), ("green", "blue"), ("yellow", "yellow"),
                                               ("blue", "red")])]
    return _write(folder / f"{name}.tsv", header, rows)
