"""NeMo Evaluator's extension hooks: a callable dataset, `prepare_row` and `seed_fn`."""

from nemo_evaluator import (
    ScorerInput,
    SeedResult,
    benchmark,
    multichoice_regex,
    numeric_match,
    scorer,
)

PLANETS = [
    {"q": "Which planet is the largest?", "right": "Jupiter", "wrong": ["Mars", "Venus", "Mercury"]},
    {"q": "Which planet has the most famous rings?", "right": "Saturn", "wrong": ["Earth", "Mars", "Venus"]},
    {"q": "Which planet is closest to the Sun?", "right": "Mercury", "wrong": ["Neptune", "Earth", "Uranus"]},
    {"q": "Which planet is called the red planet?", "right": "Mars", "wrong": ["Jupiter", "Venus", "Saturn"]},
]


def shuffle_choices(row, idx, rng):
    choices = [row["right"], *row["wrong"]]
    rng.shuffle(choices)
    return {**row, "A": choices[0], "B": choices[1], "C": choices[2], "D": choices[3],
            "answer": "ABCD"[choices.index(row["right"])]}


@benchmark(
    name="nemo_style_planets",
    dataset=lambda: [dict(r) for r in PLANETS],
    prompt="{q}\nA) {A}\nB) {B}\nC) {C}\nD) {D}\nReply with 'Answer: <letter>'.",
    target_field="answer",
    prepare_row=shuffle_choices,
)
@scorer
def planets_scorer(sample: ScorerInput) -> dict:
    return multichoice_regex(sample, pattern=r"(?i)Answer\s*:\s*([A-D])")


SUMS = [{"problem": f"Add {a} and {b}.", "answer": str(a + b)} for a, b in [(3, 4), (12, 9), (25, 17)]]
TUTOR = "You are a math tutor."


def tutor_seed(row, idx):
    return SeedResult(
        prompt=row["problem"],
        expected_answer=row["answer"],
        messages=[{"role": "system", "content": TUTOR}, {"role": "user", "content": row["problem"]}],
        system=TUTOR,
    )


@benchmark(name="nemo_style_sums", dataset=lambda: SUMS, prompt="", seed_fn=tutor_seed)
@scorer
def sums_scorer(sample: ScorerInput) -> dict:
    return numeric_match(sample)
