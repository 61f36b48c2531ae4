"""`nel daemon start|stop|status`: the process that keeps nel and Dagster imported so that
`nel eval run` starts warm (see `dagster_project.daemon_server`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    """Add `nel daemon`."""
    d = sub.add_parser(
        "daemon", help="keep nel and Dagster loaded so `nel eval run` starts warm",
        description="A background process that keeps nel, Dagster and their storage modules "
                    "imported; while it runs, `nel eval run` hands each run to a fork of it "
                    "(same arguments, environment, directory and terminal) instead of importing "
                    "them again. Runs of other code (an edited source, another interpreter) are "
                    "not handed over. NEL_DAEMON=off keeps a run in-process.")
    dsub = d.add_subparsers(dest="daemon_command", metavar="ACTION")
    start = dsub.add_parser("start", help="start the daemon for this code (if not running)")
    start.add_argument("--idle-timeout", type=float, default=30.0, metavar="MIN",
                       help="stop after this many minutes without a run (default 30)")
    start.set_defaults(func=_start)
    stop = dsub.add_parser("stop", help="stop the daemon (running runs finish)")
    stop.add_argument("--all", action="store_true", help="every daemon, of any code version")
    stop.set_defaults(func=_stop)
    status = dsub.add_parser("status", help="the running daemons")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=_status)
    d.set_defaults(func=lambda a: (d.print_help(), 2)[1])


def _start(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `benchmarks` costs ~17 ms that `nel --help` would pay.
    from benchmarks.errors import NelError
    from dagster_project import daemon_client, daemon_paths

    if not args.idle_timeout > 0:
        raise NelError(f"--idle-timeout must be a positive number of minutes, got {args.idle_timeout}")
    path = daemon_paths.socket_path()
    if path.exists():
        try:
            st = daemon_client.request(str(path), {"cmd": "status"})
        except OSError:
            path.unlink(missing_ok=True)  # left by a daemon that was killed
        else:
            print(f"nel daemon already running (pid {st['pid']}, {path})")
            return 0
    log = path.with_suffix(".log")
    proc = daemon_client.spawn(path, args.idle_timeout)
    deadline = time.monotonic() + 120
    while not path.exists():
        # Status 0 before the socket exists: another daemon for this code is starting.
        if proc.poll() not in (None, 0) and not path.exists():
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise NelError(f"the nel daemon exited at start (status {proc.returncode}); "
                           f"last lines of {log}: " + " | ".join(tail))
        if time.monotonic() > deadline:
            proc.terminate()
            raise NelError(f"the nel daemon did not get ready in 120 s; see {log}")
        time.sleep(0.05)
    pid = daemon_client.request(str(path), {"cmd": "status"})["pid"]
    print(f"nel daemon started (pid {pid}, {path}); it stops after "
          f"{args.idle_timeout:g} min without a run, or with `nel daemon stop`")
    return 0


def _daemons() -> list[tuple[Path, dict[str, Any] | None]]:
    """Every daemon socket, with its status (None: not answering)."""
    from dagster_project import daemon_client, daemon_paths

    try:
        socks = sorted(daemon_paths.daemon_dir().glob("*.sock"))
    except OSError:
        return []
    out: list[tuple[Path, dict[str, Any] | None]] = []
    for p in socks:
        try:
            out.append((p, daemon_client.request(str(p), {"cmd": "status"})))
        except OSError:
            out.append((p, None))
    return out


def _stop(args: argparse.Namespace) -> int:
    from dagster_project import daemon_client, daemon_paths

    current = daemon_paths.socket_path()
    found = 0
    for path, st in _daemons():
        if not args.all and path != current:
            continue
        if st is None:
            path.unlink(missing_ok=True)
            continue
        answer = daemon_client.request(str(path), {"cmd": "stop"})
        found += 1
        running = int(answer.get("running") or 0)
        print(f"nel daemon (pid {st['pid']}) stopping" + (f"; {running} run(s) finish first" if running else ""))
    if not found:
        print("no nel daemon running" + ("" if args.all else " for this code"))
    return 0


def _status(args: argparse.Namespace) -> int:
    from dagster_project import daemon_paths

    current = daemon_paths.socket_path()
    rows = []
    for path, st in _daemons():
        if st is not None:
            rows.append({**st, "current_code": path == current})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no nel daemon running")
        return 0
    for r in rows:
        which = "this code" if r["current_code"] else "other code (not used by this nel)"
        up = time.time() - r["started"]
        print(f"pid {r['pid']}  {which}  up {up / 60:.1f} min  runs served {r['served']}  "
              f"running {len(r['running'])}  {r['socket']}")
    return 0
