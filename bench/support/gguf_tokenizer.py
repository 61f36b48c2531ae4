"""A Hugging Face tokenizer directory made from a GGUF model's own vocabulary.

lm-eval's API models count a context's tokens with a local Hugging Face tokenizer before a
log-likelihood request; stories260K ships only as GGUF. This rebuilds its SentencePiece
(llama) vocabulary as a `tokenizers` BPE with byte fallback, merges ranked by the vocabulary
scores as SentencePiece ranks them, so lm-eval can score against the llama.cpp server.
The agreement test checks it tokenizes as the server does (`/extras/tokenize`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _fields(gguf_path: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    out: dict[str, Any] = {}
    for name, f in reader.fields.items():
        if not name.startswith("tokenizer.ggml."):
            continue
        key = name.removeprefix("tokenizer.ggml.")
        if f.types and f.types[0].name == "ARRAY":
            parts = [f.parts[i] for i in f.data]
            out[key] = ([bytes(p).decode("utf-8", "replace") for p in parts]
                        if f.types[-1].name == "STRING" else [p.tolist()[0] for p in parts])
        else:
            p = f.parts[f.data[0]]
            out[key] = bytes(p).decode() if f.types[0].name == "STRING" else p.tolist()[0]
    return out


def write_hf_tokenizer(gguf_path: Path, out_dir: Path) -> Path:
    """Write `out_dir` (tokenizer.json + config) for the GGUF's llama vocabulary."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    f = _fields(gguf_path)
    tokens: list[str] = f["tokens"]
    scores: list[float] = f["scores"]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges: list[tuple[str, str, float]] = []
    for t, i in vocab.items():
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in vocab and b in vocab:
                merges.append((a, b, scores[i]))
    merges.sort(key=lambda m: (-m[2], vocab[m[0] + m[1]]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for a, b, _ in merges],
                               unk_token=tokens[f.get("unknown_token_id", 0)],
                               byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=tokens[f["bos_token_id"]],
                                 eos_token=tokens[f["eos_token_id"]],
                                 unk_token=tokens[f.get("unknown_token_id", 0)])
    out_dir.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out_dir))
    return out_dir
