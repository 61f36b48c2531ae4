"""Runs inside a PinchBench sample's sandbox (uploaded and run with `python3`, never imported
by nel): the task's automated `grade(transcript, workspace)` and the judge prompt, built by
PinchBench's own `scripts/lib_grading.py:_build_judge_prompt` from a summary of the
transcript and the files the agent left in the workspace (NeMo Evaluator 0.3.0's rules:
dot files, OpenClaw's own files and dirs skipped; 3,000 characters a file, 64,000 in all).

Both run code of the dataset; NeMo Evaluator 0.3.0 runs it in its own process, nel in the
sandbox the agent worked in. Input: the JSON file named by argv[1]. Output: one line, the
marker then a JSON object (`scores` or `grade_error`; `judge_prompt` or `judge_error`).
"""

import importlib.util
import json
import sys
import types
from pathlib import Path

MARK = "__NEL_PINCHBENCH__="
SKIP_NAMES = {"BOOTSTRAP.md", "SOUL.md", "USER.md", "IDENTITY.md", "HEARTBEAT.md", "TOOLS.md",
              "AGENTS.md", ".nel_transcript.jsonl"}
SKIP_DIRS = {".git", ".openclaw", "__pycache__", "node_modules", "skills"}
FILE_MAX, BLOB_MAX, SUMMARY_MAX = 3000, 64000, 64000


def summarize(transcript):
    parts = []
    for event in transcript:
        if not isinstance(event, dict) or event.get("type") != "message":
            continue
        msg = event.get("message") or {}
        role, content = msg.get("role"), msg.get("content") or []
        if role == "assistant" and isinstance(content, list):
            for item in content:
                if isinstance(item, dict) and item.get("type") == "text":
                    text = (item.get("text") or "").strip()
                    if text:
                        parts.append("Assistant: " + text[:2000])
                elif isinstance(item, dict) and item.get("type") in ("toolCall", "tool_use"):
                    args = item.get("arguments") or item.get("input") or item.get("params") or {}
                    cut = {k: (v[:200] + "...[truncated]" if isinstance(v, str) and len(v) > 200 else v)
                           for k, v in args.items()}
                    parts.append("Tool: {}({})".format(item.get("name", ""), json.dumps(cut)))
        elif role == "user":
            first = content[0] if isinstance(content, list) and content else content
            text = first.get("text") or first.get("content") if isinstance(first, dict) else first
            if text:
                parts.append(f"User: {text}")
    joined = "\n".join(parts)
    if len(joined) > SUMMARY_MAX:
        half = SUMMARY_MAX // 2
        joined = joined[:half] + "\n...[transcript truncated]...\n" + joined[-half:]
    return joined


def workspace_blob(root):
    blocks, total = [], 0
    for path in sorted(Path(root).rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root)
        if any(p.startswith(".") or p in SKIP_DIRS for p in rel.parts) or path.name in SKIP_NAMES:
            continue
        try:
            block = "### File: {}\n{}".format(rel, path.read_text(encoding="utf-8")[:FILE_MAX])
        except (OSError, UnicodeDecodeError):
            block = f"### File: {rel} (binary or unreadable, {path.stat().st_size} bytes)"
        blocks.append(block)
        total += len(block) + 2
        if total >= BLOB_MAX:
            blocks.append("...[workspace listing truncated]")
            break
    return "\n\n".join(blocks)


def main():
    inp = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    out = {}
    if inp.get("grading_code"):
        try:
            namespace = {}
            exec(inp["grading_code"], namespace)  # the task's own check, in the sandbox
            grade = namespace.get("grade")
            scores = grade(inp["transcript"], inp["workspace"]) if grade else {"error": 0.0}
            out["scores"] = {str(k): float(v) for k, v in scores.items()}
        except Exception as exc:  # recorded: the automated score is then 0, as 0.3.0 has it
            out["grade_error"] = f"{type(exc).__name__}: {exc}"
    if inp.get("judge"):
        try:
            lib = Path(inp["lib_grading"])
            sys.path.insert(0, str(lib.parent))
            spec = importlib.util.spec_from_file_location("lib_grading", lib)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            task = types.SimpleNamespace(prompt=inp["prompt"], expected_behavior=inp["expected_behavior"])
            out["judge_prompt"] = module._build_judge_prompt(
                task, summarize(inp["transcript"]), inp["rubric"], workspace_blob(inp["workspace"]))
        except Exception as exc:
            out["judge_error"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.write("\n" + MARK + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
