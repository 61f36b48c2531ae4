#!/usr/bin/env bash
# Start (installing it first if needed) a SLURM cluster on this machine:
# munged + slurmctld + two slurmd (two nodes on this one machine, see 5.) from Debian's packages (Slurm 22.05), no systemd, no cgroups.
# Used by the `slurm` sandbox tests and by the SLURM launcher; idempotent: when the cluster
# already answers it only re-checks and returns (well under a second).
#
# Prints `export SLURM_CONF=...` on stdout (eval it); /etc/slurm/slurm.conf also points at it
# so plain `srun`/`sbatch` find the cluster.
# Env:
#   NEL_SLURM_DIR        config, state and logs (default /var/lib/nel-slurm)
#   NEL_SLURM_NO_INSTALL=1  never run apt-get (the packages must be there)
#   NEL_SLURM_ACCOUNTING=1  also run a private MariaDB (127.0.0.1:3307) and slurmdbd
#                        (127.0.0.1:6819) so that `sacct` answers
# A second, separate cluster (a test that needs settings the shared one must not get, e.g. a
# small MaxArraySize) runs beside the first with its own NEL_SLURM_DIR and:
#   NEL_SLURM_PORT       slurmctld's port; the node's slurmd takes the next one and the `het`
#                        node's slurmd the third after it (default 6817: 6818, 6820)
#   NEL_SLURM_MAX_ARRAY_SIZE  MaxArraySize (default: SLURM's, 1001)
#   NEL_SLURM_CPUS       CPUs each node declares (default: the machine's), so more tasks run
#                        at once than there are cores
#   NEL_SLURM_GPUS       fake GPUs each node declares (GresTypes=gpu, Gres=gpu:N), backed by
#                        character devices with /dev/null's numbers under $D/dev, so jobs
#                        asking `--gres=gpu:N` are scheduled and get CUDA_VISIBLE_DEVICES
# Only the default cluster (6817) links /etc/slurm/slurm.conf and may have accounting.
# Needs root.
set -euo pipefail

D=${NEL_SLURM_DIR:-/var/lib/nel-slurm}
ACCT=${NEL_SLURM_ACCOUNTING:-0}
PORT=${NEL_SLURM_PORT:-6817}
export SLURM_CONF="$D/slurm.conf"
say() { echo "[nel slurm] $*" >&2; }
alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
apt_install() {
  # Another checkout's set-up may hold the dpkg lock: wait for it rather than fail.
  local apt=(apt-get -o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$@" >/dev/null 2>&1 \
    || { apt-get -o DPkg::Lock::Timeout=600 -q update >/dev/null \
         && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$@" >/dev/null; }
}
# Both nodes (this machine's and its `het` twin, see 5.) answer.
node_ready() { [[ $(sinfo -h -N -o '%N %t' 2>/dev/null | grep -E ' (idle|mix|alloc)' | sort -u | wc -l) -ge 2 ]]; }
if [[ "$PORT" != 6817 && "$ACCT" == 1 ]]; then
  say "NEL_SLURM_ACCOUNTING=1 is for the default cluster only (its MariaDB/slurmdbd ports are fixed)"; exit 2
fi

# One start at a time: pytest's xdist workers each start the cluster from their own fixture,
# and on a fresh machine two starts at once would race on the config file and the daemons.
# The daemons get `9>&-`: one that inherited the lock's descriptor would hold it forever.
mkdir -p "$D"
exec 9>"$D/.start.lock"
flock -w 1500 9 || { say "another start_slurm.sh held $D/.start.lock for 25 minutes"; exit 1; }

# 1. packages
if [[ "${NEL_SLURM_NO_INSTALL:-0}" != 1 ]]; then
  if ! { command -v slurmctld && command -v slurmd && command -v srun && command -v munged; } >/dev/null 2>&1; then
    say "installing slurmctld slurmd slurm-client munge"
    apt_install slurmctld slurmd slurm-client munge
  fi
  if [[ "$ACCT" == 1 ]] && ! { command -v slurmdbd && command -v mariadbd; } >/dev/null 2>&1; then
    say "installing slurmdbd mariadb-server"
    apt_install slurmdbd mariadb-server
  fi
fi

# 2. the fast path: already up with the wanted accounting setting (and MaxArraySize)
if [[ -f "$SLURM_CONF" ]] && scontrol ping 2>/dev/null | grep -q UP && node_ready \
   && grep -q '^PartitionName=multi ' "$SLURM_CONF" \
   && { [[ "$ACCT" != 1 ]] || grep -q accounting_storage/slurmdbd "$SLURM_CONF"; } \
   && { [[ -z "${NEL_SLURM_GPUS:-}" ]] || grep -q "Gres=gpu:${NEL_SLURM_GPUS} " "$SLURM_CONF"; } \
   && { [[ -z "${NEL_SLURM_MAX_ARRAY_SIZE:-}" ]] \
        || scontrol show config 2>/dev/null | grep -E "^MaxArraySize += +${NEL_SLURM_MAX_ARRAY_SIZE}\$" >/dev/null; }; then  # no -q: pipefail + SIGPIPE
  say "already up"; echo "export SLURM_CONF=$SLURM_CONF"; exit 0
fi

# 3. munge (authentication between the daemons and the client commands)
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
    || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  say "starting munged"
  setsid runuser -u munge -- /usr/sbin/munged --force </dev/null 9>&-
  for _ in $(seq 100); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null

# 4. accounting (optional): a private MariaDB and slurmdbd, bound to 127.0.0.1 only
mkdir -p "$D"/{ctld,spool,log,run}
ACCT_LINES="AccountingStorageType=accounting_storage/none"
if [[ "$ACCT" == 1 ]]; then
  ACCT_LINES=$'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\nAccountingStoragePort=6819'
  SOCK="$D/run/mysqld.sock"
  if ! alive "$D/run/mysqld.pid"; then
    [[ -d "$D/mysql/mysql" ]] || mariadb-install-db --no-defaults --user=root --datadir="$D/mysql" \
      --skip-test-db >"$D/log/mysql-install.log" 2>&1
    say "starting MariaDB on 127.0.0.1:3307"
    setsid nohup mariadbd --no-defaults --user=root --datadir="$D/mysql" --bind-address=127.0.0.1 \
      --port=3307 --socket="$SOCK" --pid-file="$D/run/mysqld.pid" --log-error="$D/log/mysqld.log" \
      --innodb-buffer-pool-size=128M >/dev/null 2>&1 </dev/null 9>&- &
    for _ in $(seq 150); do mariadb --no-defaults -S "$SOCK" -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  mariadb --no-defaults -S "$SOCK" -uroot -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    CREATE DATABASE IF NOT EXISTS slurm_acct_db; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  (umask 077; cat > "$D/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3307
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=$D/run/slurmdbd.pid
LogFile=$D/log/slurmdbd.log
CONF
  )
  if ! alive "$D/run/slurmdbd.pid"; then
    say "starting slurmdbd"
    setsid slurmdbd </dev/null 9>&-   # reads slurmdbd.conf next to $SLURM_CONF; daemonizes
    for _ in $(seq 150); do (exec 3<>/dev/tcp/127.0.0.1/6819) 2>/dev/null && break; sleep 0.1; done
  fi
fi

# 5. slurm.conf: this machine (127.0.0.1) as node $HOST (slurmd on port $PORT+1) in the
# default partition `debug`, and again as node $HOST-het (a second slurmd on $PORT+3, 6820 for
# the default cluster, whose slurmdbd has 6819) in partition `het`; a second cluster
# (NEL_SLURM_PORT) gets its own pair the same way, so heterogeneous jobs run on either. The
# second node is for heterogeneous jobs: the backfill scheduler (the only one that starts
# them) reserves whole nodes for a component it plans, so on one node a component always
# waits for the previous one to end and the job never starts; with two nodes, a job with one
# component in `debug` and one in `het` starts. Jobs that name no partition still run on
# $HOST only (MaxArraySize and NEL_SLURM_CPUS apply to both nodes). Partition `multi` holds
# both nodes, so a 2-node job (a multi-node model server, launchers.slurm_multinode) runs.
# bf_interval=2: heterogeneous jobs wait for a backfill pass (every 30 s by default).
HOST=$(hostname -s)
HET="${HOST}-het"
read -r CPUS MEM < <(slurmd -C | awk '/NodeName/{for(i=1;i<=NF;i++){split($i,a,"=");v[a[1]]=a[2]}; print v["CPUs"], v["RealMemory"]}')
MEM=$(( MEM > 1024 ? MEM - 512 : MEM ))
EXTRA_LINES=""
[[ -n "${NEL_SLURM_MAX_ARRAY_SIZE:-}" ]] && EXTRA_LINES+="MaxArraySize=$NEL_SLURM_MAX_ARRAY_SIZE"$'\n'
if [[ -n "${NEL_SLURM_CPUS:-}" ]]; then
  CPUS=$NEL_SLURM_CPUS
  EXTRA_LINES+="SlurmdParameters=config_overrides"$'\n'  # declare more CPUs than the cores
fi
GRES_NODE=""
if [[ -n "${NEL_SLURM_GPUS:-}" ]]; then
  # Fake GPUs: one /dev/null-like device file each (slurmd only needs the files to exist;
  # with TaskPlugin=task/none nothing is constrained), listed in gres.conf next to slurm.conf.
  mkdir -p "$D/dev"
  for ((g = 0; g < NEL_SLURM_GPUS; g++)); do
    [[ -c "$D/dev/nvidia$g" ]] || mknod "$D/dev/nvidia$g" c 1 3
  done
  EXTRA_LINES+="GresTypes=gpu"$'\n'
  GRES_NODE=" Gres=gpu:${NEL_SLURM_GPUS}"
  printf 'AutoDetect=off\nNodeName=%s,%s Name=gpu File=%s/dev/nvidia[0-%d]\n' \
    "$HOST" "$HET" "$D" "$((NEL_SLURM_GPUS - 1))" > "$D/gres.conf.new.$$"
  cmp -s "$D/gres.conf.new.$$" "$D/gres.conf" && rm -f "$D/gres.conf.new.$$" || mv "$D/gres.conf.new.$$" "$D/gres.conf"
fi
NAME=nelcluster; [[ "$PORT" == 6817 ]] || NAME="nelcluster$PORT"
NEW="$SLURM_CONF.new.$$"
cat > "$NEW" <<CONF
ClusterName=${NAME}
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
${ACCT_LINES}
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=300
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
SlurmctldPort=${PORT}
SlurmdPort=$((PORT + 1))
${EXTRA_LINES}StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=${HOST} NodeAddr=127.0.0.1 Port=$((PORT + 1)) CPUs=${CPUS} RealMemory=${MEM}${GRES_NODE} State=UNKNOWN
NodeName=${HET} NodeHostname=${HOST} NodeAddr=127.0.0.1 Port=$((PORT + 3)) CPUs=${CPUS} RealMemory=${MEM}${GRES_NODE} State=UNKNOWN
PartitionName=debug Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=het Nodes=${HET} MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=multi Nodes=${HOST},${HET} MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
CHANGED=0; cmp -s "$NEW" "$SLURM_CONF" || CHANGED=1
mv "$NEW" "$SLURM_CONF"
mkdir -p /etc/slurm
if [[ "$PORT" == 6817 ]] && [[ ! -e /etc/slurm/slurm.conf || -L /etc/slurm/slurm.conf ]]; then
  ln -sfn "$SLURM_CONF" /etc/slurm/slurm.conf
fi
if [[ "$ACCT" == 1 ]] && [[ ! -e /etc/slurm/slurmdbd.conf || -L /etc/slurm/slurmdbd.conf ]]; then
  ln -sfn "$D/slurmdbd.conf" /etc/slurm/slurmdbd.conf
fi

# 6. daemons (a changed config, e.g. accounting switched on, restarts them)
if [[ "$CHANGED" == 1 ]]; then
  # slurmd.pid: the name before the second node (per-node pid files) existed
  for p in slurmd "slurmd-$HOST" "slurmd-$HET" slurmctld; do
    if alive "$D/run/$p.pid"; then pid=$(cat "$D/run/$p.pid"); kill "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done; fi
  done
fi
if ! alive "$D/run/slurmctld.pid"; then
  say "starting slurmctld"
  setsid slurmctld -f "$SLURM_CONF" </dev/null 9>&-      # daemonizes, writes its pid file
fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
for n in "$HOST" "$HET"; do
  mkdir -p "$D/spool/$n"
  if ! alive "$D/run/slurmd-$n.pid"; then
    say "starting slurmd for node $n"
    setsid slurmd -f "$SLURM_CONF" -N "$n" </dev/null 9>&-
  fi
done
for _ in $(seq 150); do
  node_ready && break
  for n in "$HOST" "$HET"; do
    st=$(sinfo -h -n "$n" -N -o '%t' 2>/dev/null | head -1)
    [[ "$st" =~ ^(down|drain) ]] && scontrol update nodename="$n" state=resume 2>/dev/null || true
  done
  sleep 0.2
done
node_ready || { say "nodes not ready:"; sinfo -N -l >&2; tail -20 "$D/log/slurmd-$HOST.log" "$D/log/slurmd-$HET.log" "$D/log/slurmctld.log" >&2; exit 1; }
say "up: $(sinfo -h -N -o '%N %t %c CPUs %m MB')"
echo "export SLURM_CONF=$SLURM_CONF"
