#!/usr/bin/env bash
# Check that the cluster from start_slurm.sh schedules what nel uses: a batch job, an array,
# afterok dependencies (met and failed), scancel, an allocation with overlapping srun steps
# (the `slurm` sandbox), and `squeue --json`. Prints one line per check; exits non-zero on
# the first failure.
set -euo pipefail
export SLURM_CONF=${SLURM_CONF:-${NEL_SLURM_DIR:-/var/lib/nel-slurm}/slurm.conf}
W=$(mktemp -d -t nel_slurm_smoke.XXXXXX); cd "$W"; trap 'rm -rf "$W"' EXIT
t0=$(date +%s.%N)
state() { scontrol -o show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 | sort -u | tr '\n' ' '; }
gone() { for _ in $(seq 600); do squeue -h -j "$1" 2>/dev/null | grep -q . || return 0; sleep 0.1; done; echo "job $1 still queued"; return 1; }

J1=$(sbatch --parsable -o j1.out --wrap 'hostname')
JA=$(sbatch --parsable --array=0-3 -o 'arr_%a.out' --wrap 'echo task=$SLURM_ARRAY_TASK_ID')
JD=$(sbatch --parsable -o dep.out --dependency=afterok:$J1 --wrap 'echo dependent ran')
JF=$(sbatch --parsable --wrap 'exit 3')
JX=$(sbatch --parsable --dependency=afterok:$JF --kill-on-invalid-dep=yes --wrap 'echo must-not-run')
JC=$(sbatch --parsable --wrap 'sleep 600')
scancel "$JC"
for j in $J1 $JA $JD $JF $JX $JC; do gone "$j"; done
[[ "$(state $J1)" == "COMPLETED " && "$(state $JA)" == "COMPLETED " && "$(state $JD)" == "COMPLETED " ]]
[[ "$(state $JF)" == "FAILED " && "$(state $JX)" == "CANCELLED " && "$(state $JC)" == "CANCELLED " ]]
[[ "$(cat dep.out)" == "dependent ran" && $(cat arr_*.out | wc -l) == 4 ]]
echo "batch, array, dependencies, scancel: ok"

JS=$(salloc --no-shell --job-name=nel-smoke --time=2 2>&1 | grep -o 'allocation [0-9]*' | cut -d' ' -f2)
out=$(srun --jobid="$JS" --overlap --quiet bash -c 'echo step=$SLURM_STEP_ID' ; srun --jobid="$JS" --overlap --quiet bash -c 'echo step=$SLURM_STEP_ID')
scancel "$JS"; gone "$JS"
[[ "$out" == $'step=0\nstep=1' ]]
echo "allocation with overlapping steps: ok"
squeue --json | python3 -c 'import json,sys; json.load(sys.stdin)["jobs"]'
echo "squeue --json: ok"
echo "smoke ok in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
