"""Stand-in for Ray's CLI as a multi-node vLLM launch uses it (tests only): `ray start --head
--port=P [--num-gpus=G] --block`, `ray start --address=HOST:P [--num-gpus=G] --block`, `ray
status [--address=HOST:P]` (else RAY_ADDRESS). Flags are parsed strictly (an unknown one
exits 2, as Ray's click CLI does); each `ray start` appends what it was given to
NEL_STANDIN_RECORD. The head listens on 127.0.0.1 (the test cluster's nodes are this host);
`ray status` prints Ray's own `Active:` / ` 1 node_<id>` lines and the GPU total.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from multinode import Head, join, status
from stand_in import record_start


class _ClickParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"Usage: {self.prog} [OPTIONS]\nTry '{self.prog} --help' for help.\n\n"
                         f"Error: No such option: {message.split(': ', 1)[-1]}\n")
        raise SystemExit(2)


def _start(argv: list[str]) -> None:
    p = _ClickParser(prog="ray start", allow_abbrev=False)
    p.add_argument("--head", action="store_true")
    p.add_argument("--address")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--num-gpus", type=int)
    p.add_argument("--block", action="store_true")
    p.add_argument("--node-ip-address")
    ns = p.parse_args(argv)
    if ns.head == bool(ns.address):
        sys.stderr.write("ValueError: give exactly one of --head and --address\n")
        raise SystemExit(2)
    gpus = ns.num_gpus if ns.num_gpus is not None else len(
        [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()])
    record_start("ray", ["start", *argv])
    rank = int(os.environ.get("SLURM_NODEID", "0"))
    if ns.head:
        Head("127.0.0.1", ns.port, own_gpus=gpus).start()
        print(f"INFO Ray runtime started (head, port {ns.port}, {gpus} GPU(s))", flush=True)
        while ns.block:
            time.sleep(3600)
        return
    join(ns.address, rank, gpus)


def _status(argv: list[str]) -> None:
    p = _ClickParser(prog="ray status", allow_abbrev=False)
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"))
    ns = p.parse_args(argv)
    nodes = status(ns.address or "127.0.0.1:6379")
    if nodes is None:
        sys.stderr.write(f"ConnectionError: Could not find any running Ray instance at {ns.address}\n")
        raise SystemExit(1)
    print("======== Autoscaler status ========\nNode status\n" + "-" * 40 + "\nActive:")
    for rank in sorted(nodes):
        print(f" 1 node_{rank:040x}")
    print("Pending:\n (no pending nodes)\n\nResources\n" + "-" * 40 + "\nUsage:\n"
          f" 0.0/{float(sum(nodes.values()))} GPU")


def main(argv: list[str]) -> None:
    """`ray start ...` / `ray status ...`."""
    if argv[:1] == ["start"]:
        _start(argv[1:])
    elif argv[:1] == ["status"]:
        _status(argv[1:])
    else:
        sys.stderr.write("Usage: ray [OPTIONS] COMMAND [ARGS]...\n\nError: No such command "
                         f"'{argv[0] if argv else ''}'.\n")
        raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
