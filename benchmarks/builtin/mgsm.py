"""MGSM (Shi et al., 2022): the first 250 GSM8K test problems translated into 10 languages,
plus the English originals: 11 x 250 = 2,750 items.

Source: github google-research/url-nlp `mgsm/mgsm_<lang>.tsv` (no header: question TAB
answer number, thousands may be comma-separated), the same files as the hub's
`juletxara/mgsm`. nel reads `mgsm/mgsm_<lang>.tsv`. The prompt is written in the item's own
language and asks for the answer on a last line introduced by the language's word for
"Answer" (the convention of simple-evals); `numeric_match` recognises all of those words.

Every translation of problem k shares cluster `mgsm-k`, so standard errors are clustered
over the 250 underlying problems rather than treating translations as independent.
"""

from __future__ import annotations

from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import resolve_file
from benchmarks.errors import NelError
from benchmarks.sources import GH_RAW, Source, SourceFile

LANGUAGES = ("bn", "de", "en", "es", "fr", "ja", "ru", "sw", "te", "th", "zh")

# The word each language uses to introduce the final answer.
ANSWER_PREFIX: dict[str, str] = {
    "bn": "উত্তর", "de": "Antwort", "en": "Answer", "es": "Respuesta", "fr": "Réponse",
    "ja": "答え", "ru": "Ответ", "sw": "Jibu", "te": "సమాధానం", "th": "คำตอบ", "zh": "答案",
}

# Our own wording of one instruction: solve, show steps, last line "<Answer>: <number>".
INSTRUCTIONS: dict[str, str] = {
    "en": 'Solve this math problem. Explain your steps, then write the final answer on the '
          'last line as "Answer: <number>", with nothing but the number after "Answer:".',
    "de": 'Löse diese Mathematikaufgabe. Erkläre deine Schritte und schreibe dann das '
          'Endergebnis in die letzte Zeile als "Antwort: <Zahl>", nach "Antwort:" nur die Zahl.',
    "es": 'Resuelve este problema de matemáticas. Explica tus pasos y escribe la respuesta '
          'final en la última línea como "Respuesta: <número>", sin nada más que el número '
          'después de "Respuesta:".',
    "fr": 'Résous ce problème de mathématiques. Explique tes étapes, puis écris la réponse '
          'finale sur la dernière ligne sous la forme "Réponse : <nombre>", avec seulement le '
          'nombre après "Réponse :".',
    "ru": 'Решите эту математическую задачу. Объясните ход решения, а затем запишите '
          'окончательный ответ в последней строке в виде "Ответ: <число>", указав после '
          '"Ответ:" только число.',
    "zh": '请解答这道数学题。先写出解题步骤，然后在最后一行按"答案：<数字>"的格式给出最终答案，'
          '"答案："后面只写数字。',
    "ja": 'この算数の問題を解いてください。解き方を説明してから、最後の行に「答え：<数字>」の形式で'
          '最終的な答えを書いてください。「答え：」の後には数字だけを書いてください。',
    "th": 'จงแก้โจทย์คณิตศาสตร์ข้อนี้ อธิบายขั้นตอนการคิด แล้วเขียนคำตอบสุดท้ายในบรรทัดสุดท้าย'
          'ในรูปแบบ "คำตอบ: <ตัวเลข>" โดยหลัง "คำตอบ:" ให้มีเพียงตัวเลขเท่านั้น',
    "sw": 'Tatua tatizo hili la hesabu. Eleza hatua zako, kisha andika jibu la mwisho kwenye '
          'mstari wa mwisho kwa muundo "Jibu: <namba>", bila kitu kingine isipokuwa namba '
          'baada ya "Jibu:".',
    "bn": 'এই গণিত সমস্যাটি সমাধান করো। তোমার ধাপগুলো ব্যাখ্যা করো, তারপর শেষ লাইনে '
          '"উত্তর: <সংখ্যা>" আকারে চূড়ান্ত উত্তর লেখো; "উত্তর:"-এর পরে শুধু সংখ্যাটি লিখবে।',
    "te": 'ఈ గణిత సమస్యను పరిష్కరించండి. మీ దశలను వివరించి, చివరి పంక్తిలో "సమాధానం: <సంఖ్య>" '
          'రూపంలో తుది సమాధానాన్ని రాయండి; "సమాధానం:" తర్వాత సంఖ్య మాత్రమే ఉండాలి.',
}

CHAT_TEMPLATE = "{instruction}\n\n{question}"
# NeMo Evaluator 0.3.0's instructions (`nemo_evaluator/benchmarks/mgsm.py`), verbatim, the
# default `prompt_set: nemo` (both endpoints); its items come language by language in
# NEMO_ORDER. `numeric_match` reads these answers (the last number when the answer word is
# 0.3.0's transliteration, `Otvet:` or `Reponse:`).
NEMO_ORDER = ("en", "de", "fr", "es", "ru", "zh", "ja", "th", "te", "bn", "sw")
_NEMO_SHORT = "Solve this math problem step by step. Final answer as 'Answer:'.\n\n{input}"
NEMO_INSTRUCTIONS: dict[str, str] = {
    "en": "Solve this math problem. Give reasoning steps then the final answer on the last line "
          "as 'Answer:'.\n\n{input}",
    "de": "Lose dieses Problem. Gib Schritte an, dann die Antwort als 'Antwort:'.\n\n{input}",
    "fr": "Resolvez ce probleme. Donnez les etapes puis la reponse comme 'Reponse:'.\n\n{input}",
    "es": "Resuelve este problema. Da los pasos y la respuesta como 'Respuesta:'.\n\n{input}",
    "ru": "Reshite etu zadachu. Privedite shagi, zatem otvet kak 'Otvet:'.\n\n{input}",
    **{lang: _NEMO_SHORT for lang in ("zh", "ja", "th", "te", "bn", "sw")},
}
COMPLETION_TEMPLATE = "{instruction}\n\n{question}\n\n"


def _read_tsv(path: Any, lang: str) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        # Plain split, not csv: questions contain quote characters that csv would eat.
        for i, line in enumerate(f):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            q, sep, a = line.rpartition("\t")
            if not sep:
                raise NelError(f"{path}:{i + 1}: expected question<TAB>answer")
            rows.append({"lang": lang, "item": len(rows), "question": q.strip(),
                         "answer": a.strip()})
    return rows


_SHA256 = {
    "bn": "6b00bc7cc635547e866989284afa924d789b5affa2eb8de623c385dd943ad977",
    "de": "4dfea30fede44b813e2e496f5f0534049e83c7cc8aed6e00600b30ec62053626",
    "en": "50021d0f28cc957edcb44e7806425b1c7fbd648ddcb9e0a8ec689d10e57d40fa",
    "es": "5bd27ebdf00140cec845c5298dc17715f5cd57d8edda6df1976db40bf3f0750a",
    "fr": "36207c1c03fd7cd3ea491441eb755408199f94e4a647851df531bbaedc99d606",
    "ja": "59a2b50debe77981fd784cb3b2bef1505e3abf2a37116dc9d7a366ab029b4637",
    "ru": "6bd30fd2e80c5bac23f566fb4ae0e6a55a19578401fbf9a01fb21beb3645fef8",
    "sw": "2bac828d77229e65d7c7197b1ad4a2cb5b1fe99b163f2cbdd66501de6a2115c4",
    "te": "dd6b1452c244bb2e4ba254c01ea84137f80c1cefc57d69c23b0ed88b9c0f36b7",
    "th": "f3932dc5ad8e9d0ea82b017adc1e1461dd647af861e7166d6741986602a0cfd6",
    "zh": "b2fa63151022370a0de1f4211c8c284eae74b0f5a3b003b1d5982c0d4a73f661",
}

# Where the data comes from (`nel data`, `nel list`).
SOURCE = Source(
    "mgsm",
    tuple(
        SourceFile(f"mgsm_{lang}.tsv", _SHA256[lang],
                   f"{GH_RAW}/google-research/url-nlp/452a21ad/mgsm/mgsm_{lang}.tsv")
        for lang in LANGUAGES
    ),
    2750, "github google-research/url-nlp @ 452a21ad mgsm/ (Shi et al., 2022)",
    "juletxara/mgsm", "main", "CC-BY-4.0", notes="250 items x 11 languages",
)


class MGSM(DatasetEnvironment):
    """MGSM, all languages by default; category is the language code."""

    name = "mgsm"
    scorer_family = "numeric"  # the type `nel list` shows
    source = SOURCE
    version = "1"

    def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None,
                 languages: list[str] | None = None, prompt_set: str | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot, prompt_set=prompt_set)
        langs = list(languages or LANGUAGES)
        bad = [lg for lg in langs if lg not in LANGUAGES]
        if bad:
            raise NelError(f"mgsm: unknown language(s) {bad}; choose from {', '.join(LANGUAGES)}")
        if self.nemo_prompts:
            langs = [lg for lg in NEMO_ORDER if lg in langs]
        rows: list[dict[str, Any]] = []
        for lang in langs:
            rows.extend(_read_tsv(resolve_file("mgsm", f"mgsm_{lang}.tsv"), lang))
        self.rows = rows
        self._finish_init()

    def fingerprint(self) -> str:
        if self.nemo_prompts:
            return f"{super().fingerprint()}:{sorted(NEMO_INSTRUCTIONS.items())}:{NEMO_ORDER}"
        return (f"{super().fingerprint()}:{CHAT_TEMPLATE}:{COMPLETION_TEMPLATE}:"
                f"{sorted(INSTRUCTIONS.items())}:{sorted(ANSWER_PREFIX.items())}")

    def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
        lang = row["lang"]
        meta = {"idx": idx, "category": lang, "language": lang, "item": row["item"],
                "cluster": f"mgsm-{row['item']}", "answer_prefix": ANSWER_PREFIX[lang]}
        if self.nemo_prompts:
            return SeedResult(NEMO_INSTRUCTIONS[lang].format(input=row["question"]), row["answer"], meta)
        tpl = CHAT_TEMPLATE if self.protocol == "chat" else COMPLETION_TEMPLATE
        prompt = tpl.format(instruction=INSTRUCTIONS[lang], question=row["question"])
        return SeedResult(prompt, row["answer"], meta)

    def gold_response(self, seed: SeedResult) -> str:
        prefix = ANSWER_PREFIX[seed.metadata["language"]]
        sep = " : " if seed.metadata["language"] == "fr" else ": "
        return f"{seed.prompt.splitlines()[-1][:40]} ...\n{prefix}{sep}{_plain(seed.expected_answer)}"

    def golds_equivalent(self, a: SeedResult, b: SeedResult) -> bool:
        """Whether two items' golds are the same number (`2,125` == `2125`)."""
        from benchmarks.scoring.numeric import parse_gold_number

        return parse_gold_number(a.expected_answer) == parse_gold_number(b.expected_answer)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        from benchmarks.scoring import numeric_match

        return numeric_match(response, expected, reasoning=metadata.get("reasoning"),
                             language=metadata.get("language"))


def _plain(gold: str) -> str:
    """The gold number as every language reads it: digits without grouping. The data writes
    `2,125` for 2125, which a German or French reader (and so the scorer, for those
    languages) reads as 2.125."""
    from benchmarks.scoring.numeric import parse_gold_number

    value = parse_gold_number(gold)
    return str(value.numerator) if value.denominator == 1 else str(float(value))
