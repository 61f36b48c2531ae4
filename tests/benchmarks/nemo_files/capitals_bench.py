"""A decorator benchmark in NeMo Evaluator style: dataset, prompt template, scorer, helpers."""

from nemo_evaluator import ScorerInput, answer_line, benchmark, exact_match, scorer


@benchmark(
    name="nemo_style_capitals",
    dataset="capitals.jsonl",
    prompt="What is the capital of {nation}? Finish with a line 'Answer: <city>'.",
    target_field="capital",
    system_prompt="You are a geography quiz.",
    field_mapping={"country": "nation"},
    extra={"strict": False},
)
@scorer
def capital_scorer(sample: ScorerInput) -> dict:
    by_line = answer_line(sample, pattern=r"(?i)Answer\s*:\s*([^\n]+)")
    if by_line["correct"] or sample.config.get("strict"):
        return by_line
    # A bare city name (no Answer: line) still counts when it is exactly right.
    return exact_match(sample)
