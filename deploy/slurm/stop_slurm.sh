#!/usr/bin/env bash
# Stop the SLURM cluster that start_slurm.sh started (its slurmctld and both slurmd), by its PID
# files only.
# Env: NEL_SLURM_DIR (as for start_slurm.sh); STOP_MUNGE=1 also stops munged;
# PURGE=1 also removes the cluster's state, logs and the /etc/slurm links to them.
set -uo pipefail
D=${NEL_SLURM_DIR:-/var/lib/nel-slurm}
export SLURM_CONF="$D/slurm.conf"

stop_pidfile() {  # <pid file> <name>: TERM, then KILL after 10 s
  local f=$1 pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "[nel slurm] stopped $2 ($pid)" >&2
  fi
  rm -f "$f"
}

# Cancel what is still queued or running, so no slurmstepd child outlives its daemon.
if [[ -f "$SLURM_CONF" ]] && scontrol ping 2>/dev/null | grep -q UP; then
  scancel --full --user="$(id -un)" 2>/dev/null || true
  for _ in $(seq 100); do squeue -h 2>/dev/null | grep -q . || break; sleep 0.1; done
fi
# slurmd-<node>.pid per node; slurmd.pid from before the `het` node existed
for f in "$D"/run/slurmd*.pid; do stop_pidfile "$f" "$(basename "$f" .pid)"; done
stop_pidfile "$D/run/slurmctld.pid" slurmctld
stop_pidfile "$D/run/slurmdbd.pid" slurmdbd      # only with NEL_SLURM_ACCOUNTING=1
stop_pidfile "$D/run/mysqld.pid" mariadbd        # its private MariaDB
[[ "${STOP_MUNGE:-0}" == 1 ]] && stop_pidfile /run/munge/munged.pid munged
if [[ "${PURGE:-0}" == 1 ]]; then
  for f in /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf; do
    [[ -L $f && $(readlink "$f") == "$D"/* ]] && rm -f "$f"
  done
  rm -rf "$D"
fi
exit 0
