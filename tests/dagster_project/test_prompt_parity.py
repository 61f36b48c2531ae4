"""Same prompts by default: for every built-in nel shares with NeMo Evaluator 0.3.0, both
tools send the same request for the same item, on the wire.

One config file per protocol (chat and completions) lists the shared built-ins, with
generation settings (temperature, top_p, max_tokens, seed, stop), and a system prompt and
`fewshot: 5` on gsm8k and mmlu (which 0.3.0 drops for its built-ins); the real peer
(`tests/support/peers.py`, driven by `nemo_peer_driver.py` with the rows of nel's local
data: `tests/support/peer_rows.py`) and `nel eval run` each run it against one recording
server (`tests/support/recording_server.py --echo-digest`), which answers every request
with the digest of its body. Each tool's `results.jsonl` then names, per item
(`problem_idx`), the request it sent; the two must be the same request, item by item: the
whole JSON body (model, messages or prompt, stop, every generation setting).

Not compared: request headers (transport: user agent, encoding, content length) and
nel's body-less GET probes before the run (`/v1/models`, the server's identity: no item's
request).
Not on the wire here: `simpleqa` (nel grades it only with a judge, which cannot read this
server's digests; its request is the bare question in both tools:
tests/benchmarks/test_prompt_sets.py), `drop` (0.3.0's prompt draws passages from DROP's
train split, which nel does not load: nel keeps its prompt, docs/explanation/differences.md)
and `healthbench` (no local data).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.runtime.processes import ManagedProcess
from tests.support.cli import run_nel
from tests.support.peer_rows import write_peer_rows
from tests.support.peers import peer_nemo_bin
from tests.support.realcomponents import REPO_ROOT
from tests.support.waiting import wait_for

DRIVER = REPO_ROOT / "tests" / "support" / "nemo_peer_driver.py"
# Built-in -> max_problems (None: all); the same shuffle picks the same items in both tools.
BENCHES = {"gsm8k": 200, "mmlu": 200, "math500": 200, "humaneval": None, "mmlu_pro": 200,
           "gpqa": None, "mgsm": 200, "xstest": 200, "triviaqa": 200}
ITEMS = {**{n: k for n, k in BENCHES.items() if k}, "humaneval": 164, "gpqa": 198}
PROTOCOLS = {"chat_completions": "/v1/chat/completions", "completions": "/v1/completions"}
GENERATION = {"temperature": 0.6, "top_p": 0.95, "max_tokens": 512, "seed": 1234,
              "stop": ["<|eot|>", "\n\nQuestion:"]}
# The real default: no NEL_SHUFFLE_SEED (the suite sets it for older first-N tests).
UNSET = ("NEL_SHUFFLE_SEED", "NEL_SHARD_IDX", "NEL_TOTAL_SHARDS")


@dataclass
class Wire:
    """Both tools' runs of one protocol: output dirs and the server's request log."""

    peer: Path
    nel: Path
    bodies: dict[str, Any]  # body digest -> request body
    probes: list[tuple[str, str]]  # (method, target) of requests that carry no body


def _config(url: str, protocol: str, out: Path) -> dict[str, Any]:
    benches = []
    for name, n in BENCHES.items():
        entry: dict[str, Any] = {"name": name, "solver": {"type": "simple", "service": "model"}}
        if n is not None:
            entry["max_problems"] = n
        if name in ("gsm8k", "mmlu"):  # 0.3.0 never sends these to its built-ins; nor does nel
            entry["solver"]["system_prompt"] = "Be brief."
            entry["fewshot"] = 5
        benches.append(entry)
    return {"services": {"model": {"type": "api", "url": url + PROTOCOLS[protocol], "protocol": protocol,
                                   "model": "ref", "generation": GENERATION}},
            "benchmarks": benches, "output": {"dir": str(out)}}


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[dict[str, Wire]]:
    root = tmp_path_factory.mktemp("prompt-parity")
    # 0.3.0 fsyncs its step log every few requests (3,500 of them here): on tmpfs that costs
    # nothing, and where its results lie changes nothing it sends.
    shm = Path("/dev/shm")
    peer_root = Path(tempfile.mkdtemp(prefix="nel-prompt-parity-", dir=shm)) if shm.is_dir() else root
    port_file, log = root / "port", root / "requests.jsonl"
    server = ManagedProcess([sys.executable, "-m", "tests.support.recording_server", "--port-file",
                             str(port_file), "--log", str(log), "--echo-digest"],
                            name="recording-server", cwd=str(REPO_ROOT),
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}).start()
    try:
        port = wait_for(lambda: int(port_file.read_text()) if port_file.exists() else None,
                        timeout=30, what="the recording server's port file", interval=0.05)
        url = f"http://127.0.0.1:{port}"
        server.wait_healthy(f"{url}/health", timeout=30)
        datasets = {n: str(write_peer_rows(n, data_dir, root / f"{n}.rows.jsonl")) for n in BENCHES}
        runs, out = [], {}
        for proto in PROTOCOLS:
            cfg = root / f"{proto}.yaml"
            cfg.write_text(yaml.safe_dump(_config(url, proto, root / "unused")))
            out[proto] = Wire(peer_root / f"peer-{proto}", root / f"nel-{proto}", {}, [])
            runs.append({"id": proto, "args": ["eval", "run", str(cfg), "-o", str(out[proto].peer)]})
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME", *UNSET)}
        # 0.3.0 scores humaneval with one `docker run` per item, after the item's request: on
        # the wire nothing changes without it, and 328 containers took most of this fixture's
        # time. A Docker socket that does not exist makes each `docker run` fail at once (the
        # peer then scores the item 0, which nothing here reads).
        env["DOCKER_HOST"] = f"unix://{root / 'no-docker.sock'}"
        # Nor are its CIs read: 100 bootstrap resamples instead of 10,000 per category.
        t0 = time.monotonic()
        job = {"datasets": datasets, "run": runs, "bootstrap_resamples": 100}
        p = subprocess.run([str(peer_nemo_bin().parent / "python"), str(DRIVER)], input=json.dumps(job),
                           capture_output=True, text=True, env=env, timeout=900, cwd=root)
        assert p.returncode == 0, p.stderr[-3000:]
        for proto, res in json.loads(p.stdout)["run"].items():
            assert res["exit_code"] == 0, f"{proto}: " + res["output"][-3000:]
        print(f"\nNeMo Evaluator 0.3.0, both protocols: {time.monotonic() - t0:.1f}s")
        # nel runs model code only in a sandbox; 0.3.0 has no `local` one (its scorer fails
        # without Docker, after the request): the one setting only nel's run gets.
        local = f"benchmarks.{list(BENCHES).index('humaneval')}.sandbox.type=local"
        for proto, w in out.items():
            t0 = time.monotonic()
            r = run_nel("eval", "run", str(root / f"{proto}.yaml"), "-o", str(w.nel), "--no-progress", "-O", local,
                        env={"NEL_DATA_DIR": str(data_dir)}, unset=UNSET, timeout=900)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            # nel says what it does not send, where 0.3.0 is silent
            for name in ("gsm8k", "mmlu"):
                assert (f"note: {name}: prompt_set nemo sends NeMo Evaluator 0.3.0's request, which has "
                        "no system prompt and no few-shot turns (fewshot: 5)") in r.stderr
            print(f"nel, {proto}: {time.monotonic() - t0:.1f}s")
        from tests.support.recording_server import body_digest

        entries = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
        for w in out.values():
            w.bodies = {body_digest(e["body"]): e["body"] for e in entries if e["body"] is not None}
            w.probes = [(e["method"], e["target"]) for e in entries if e["body"] is None]
        yield out
    finally:
        server.stop()
        if peer_root != root:
            shutil.rmtree(peer_root, ignore_errors=True)


def _sent(out: Path, bench: str) -> dict[int, str]:
    """problem_idx -> digest of the request the tool sent for it (from its results.jsonl)."""
    found = {}
    # split on newlines only: a prompt may hold U+2028, which `splitlines` also breaks at
    for line in (out / bench / "results.jsonl").read_text(encoding="utf-8").split("\n"):
        if line.strip():
            row = json.loads(line)
            text = str(row.get("model_response") or "")
            assert text.startswith("request "), row
            found[int(row["problem_idx"])] = text.split()[1]
    return found


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("bench", list(BENCHES))
def test_both_tools_send_the_same_request_for_each_item(wire: dict[str, Wire], bench: str,
                                                       protocol: str) -> None:
    w = wire[protocol]
    peer, nel = _sent(w.peer, bench), _sent(w.nel, bench)
    assert set(nel) == set(peer)  # the same items (the same shuffle and max_problems)
    assert len(peer) == ITEMS[bench]
    same = [i for i in peer if peer[i] == nel[i]]
    diff = sorted(set(peer) - set(same))
    if diff:
        i = diff[0]
        pytest.fail(f"{bench}/{protocol}: {len(same)} of {len(peer)} items send the same request; "
                    f"item {i}:\npeer: {json.dumps(w.bodies[peer[i]])[:1500]}\n"
                    f"nel:  {json.dumps(w.bodies[nel[i]])[:1500]}")
    body = w.bodies[peer[min(peer)]]
    # Not vacuous: every generation setting is on the wire, and no system message.
    assert {k: body.get(k) for k in GENERATION} == GENERATION
    if protocol == "chat_completions":
        assert [m["role"] for m in body["messages"]] == ["user"]
    else:
        assert isinstance(body["prompt"], str) and "messages" not in body
    print(f"\n{bench}/{protocol}: {len(same)} of {len(peer)} items send identical requests")


def test_nel_sends_no_other_request(wire: dict[str, Wire]) -> None:
    """Besides the items' requests, only body-less GET probes (`/v1/models`, the server's
    identity): no other request reaches the model."""
    for w in wire.values():
        assert all(method == "GET" for method, _ in w.probes), w.probes
