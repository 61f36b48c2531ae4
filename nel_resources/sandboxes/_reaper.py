"""The wrapper a bare-node `slurm` step runs the program under (as `python3 -c REAPER_SOURCE`).

Without cgroups a SLURM step loses track of processes that daemonize (`setsid`, double fork):
they are re-parented to init and outlive the step. The wrapper makes itself a child subreaper
(`PR_SET_CHILD_SUBREAPER`), so every orphan of the program is re-parented to it instead, stays
in the step's process tree (SLURM's `scancel` finds it), and is killed by the wrapper when the
program ends. The wrapper exits with the program's status (128 + signal if it was killed).
"""

from __future__ import annotations

#: kept as source text: it runs on the node under a cleared environment, not as nel code
REAPER_SOURCE = r"""
import ctypes, os, signal, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
me = os.getpid()
child = os.fork()
if child == 0:
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as e:
        sys.stderr.write(f"{sys.argv[1]}: {e.strerror}\n")
        os._exit(127)
def descendants():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [me]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k); todo.append(k)
    return out
def sweep():
    for _ in range(100):
        pids = descendants()
        if not pids:
            return
        for p in pids:
            try: os.kill(p, signal.SIGKILL)
            except OSError: pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0: break
            except ChildProcessError: break
        time.sleep(0.01)
def on_signal(signum, frame):
    sweep(); os._exit(128 + signum)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, on_signal)
status = 0
while True:
    try:
        pid, st = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    if pid == child:
        status = os.waitstatus_to_exitcode(st)
        break
sweep()
sys.exit(status if status >= 0 else 128 - status)
"""
