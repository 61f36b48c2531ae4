"""vlm_shapes: a small vision benchmark drawn locally, so a VLM run works out of the box.

Each item is a 96x96 PNG with one to six shapes (circles, squares, triangles) of one colour on
white, drawn with Pillow from a fixed seed when the dataset is built (no download), and a
multiple-choice question in VLMEvalKit's prompt format: how many shapes there are, or what
colour they are. Scored as VLMEvalKit scores multiple choice without a judge (`can_infer`).
"""

from __future__ import annotations

import base64
import io
import random
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.errors import BenchmarkConfigError
from benchmarks.vlm_scoring import verify_mcq

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (40, 170, 70), "blue": (40, 80, 220),
    "yellow": (240, 210, 40), "purple": (140, 60, 170), "orange": (245, 140, 30),
}
KINDS = ("circle", "square", "triangle")
SIZE, CELL = 96, 32  # a 3x3 grid of cells: shapes never touch
_SEED = 20_260_301
QUESTIONS = {"count": "How many shapes are in the image?",
             "colour": "What colour are the shapes in the image?"}


def _draw(n: int, colour: tuple[int, int, int], rng: random.Random) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    pen = ImageDraw.Draw(img)
    for cell in rng.sample(range(9), n):
        x0, y0 = (cell % 3) * CELL + 6, (cell // 3) * CELL + 6
        x1, y1 = x0 + CELL - 12, y0 + CELL - 12
        kind = rng.choice(KINDS)
        if kind == "circle":
            pen.ellipse((x0, y0, x1, y1), fill=colour)
        elif kind == "square":
            pen.rectangle((x0, y0, x1, y1), fill=colour)
        else:
            pen.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=colour)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def generate(n_items: int) -> list[dict[str, Any]]:
    """The items, the same on every call: alternately a counting and a colour question."""
    rng = random.Random(_SEED)
    rows = []
    for i in range(n_items):
        count, colour = rng.randint(1, 6), rng.choice(sorted(COLOURS))
        task = "count" if i % 2 == 0 else "colour"
        if task == "count":
            truth = str(count)
            pool = [str(k) for k in range(1, 8) if k != count]
        else:
            truth = colour
            pool = [c for c in sorted(COLOURS) if c != colour]
        options = [truth, *rng.sample(pool, 3)]
        rng.shuffle(options)
        png = _draw(count, COLOURS[colour], rng)
        rows.append({"task": task, "options": options, "answer": "ABCD"[options.index(truth)],
                     "truth": truth, "image": base64.b64encode(png).decode()})
    return rows


class VLMShapes(DatasetEnvironment):
    """Counting and colour questions on shapes drawn with Pillow; images sent with the prompt."""

    name = "vlm_shapes"
    scorer_family = "vlm-mcq"  # the type `nel list` shows
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 n_items: int = 40) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        if self.protocol != "chat":
            raise BenchmarkConfigError("vlm_shapes sends images: use a service with protocol "
                                       "chat_completions or responses")
        if not isinstance(n_items, int) or not 1 <= n_items <= 10_000:
            raise BenchmarkConfigError(f"vlm_shapes: n_items must be an integer from 1 to 10000, "
                                       f"got {n_items!r}")
        self.rows = generate(n_items)
        self._finish_init()

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        choices = dict(zip("ABCD", row["options"], strict=True))
        # VLMEvalKit's multiple-choice prompt (ImageMCQDataset.build_prompt)
        prompt = (f"Question: {QUESTIONS[row['task']]}\nOptions:\n"
                  + "".join(f"{k}. {v}\n" for k, v in choices.items())
                  + "Please select the correct answer from the options above. \n")
        return SeedResult(prompt, row["answer"],
                          {"idx": idx, "category": row["task"], "choices": choices},
                          images=[f"data:image/png;base64,{row['image']}"])

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        return verify_mcq(response, expected, metadata.get("choices") or {})

    def gold_response(self, seed: SeedResult) -> str:
        return f"Answer: {seed.expected_answer}"
