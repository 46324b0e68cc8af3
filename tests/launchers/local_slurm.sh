#!/usr/bin/env bash
# local_slurm.sh start DIR OWNER_PID | stop DIR: a throwaway single-node Slurm cluster on this host, for tests.
#
# start: in DIR (created; empty or absent), a munge key and munged on its own socket, a slurm.conf for this
# host (its name and CPU layout from `slurmd -C`; select/cons_tres, proctrack/linuxproc, task/none: no
# cgroups, no systemd), its own state, spool and log directories and free TCP ports, then slurmctld and
# slurmd run in the foreground (-D) in the background. It returns once `sinfo` shows the node idle, with
# DIR/env.sh to source (SLURM_CONF). A watchdog tears the cluster down when OWNER_PID exits or after
# LOCAL_SLURM_MAX_S seconds (default 900), whichever comes first, so nothing outlives a dying test.
# When something cannot start, start prints one line "SKIPPED: <reason>" on stdout, cleans up and exits 2
# (the daemons' logs stay in DIR). Needs root (slurmd runs job steps as their user) and the Debian
# packages slurmctld, slurmd, slurm-client and munge.
#
# stop: cancels every job, stops the daemons (SIGTERM, then SIGKILL after 5 s), including job step
# daemons (slurmstepd) left from this cluster, and the watchdog. Idempotent.
set -uo pipefail

skip() {
  echo "SKIPPED: $*"
  [ -n "${DIR:-}" ] && [ -d "$DIR" ] && stop_cluster >/dev/null 2>&1
  exit 2
}

# pid_of FILE: the pid in FILE when that process is alive.
pid_of() { local p; p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"; }

# stepd_pids: the slurmstepd processes of this cluster (they keep its slurmd.log open).
stepd_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
    if ls -l "$p/fd" 2>/dev/null | grep -qF "$DIR/"; then echo "${p#/proc/}"; fi
  done
}

stop_cluster() {
  local pids="" p
  if [ -f "$DIR/slurm.conf" ] && [ -n "$(pid_of "$DIR/slurmctld.pid.launch")" ]; then
    SLURM_CONF=$DIR/slurm.conf timeout 5 scancel --quiet --user=root 2>/dev/null
    for _ in $(seq 20); do  # let slurmd end the steps it knows of
      [ -z "$(SLURM_CONF=$DIR/slurm.conf timeout 2 squeue -h 2>/dev/null)" ] && break
      sleep 0.25
    done
  fi
  for f in slurmd.pid.launch slurmd.pid slurmctld.pid.launch slurmctld.pid munged.pid; do
    p=$(pid_of "$DIR/$f") && pids="$pids $p"
  done
  pids="$pids $(stepd_pids)"
  p=$(pid_of "$DIR/watchdog.pid") && [ "$p" != "$$" ] && [ "$p" != "${WATCHDOG_SELF:-}" ] && kill "$p" 2>/dev/null
  [ -n "${pids// }" ] || return 0
  kill $pids 2>/dev/null
  for _ in $(seq 50); do
    local alive=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    [ -z "$alive" ] && return 0
    sleep 0.1
  done
  kill -9 $alive 2>/dev/null
  return 0
}

# free_port: a TCP port nobody listens on, from 30000..30999 (below Linux's ephemeral range).
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((30000 + RANDOM % 1000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

cmd=${1:-} DIR=${2:-}
[ -n "$DIR" ] || { echo "usage: local_slurm.sh start DIR OWNER_PID | stop DIR" >&2; exit 64; }
case $cmd in
  stop)
    [ -d "$DIR" ] && DIR=$(cd "$DIR" && pwd) && stop_cluster
    exit 0 ;;
  start) ;;
  *) echo "usage: local_slurm.sh start DIR OWNER_PID | stop DIR" >&2; exit 64 ;;
esac
OWNER=${3:-$PPID}

for b in munged mungekey slurmctld slurmd srun sinfo scancel squeue; do
  command -v "$b" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin
  command -v "$b" >/dev/null 2>&1 || skip "srun: $b is not installed (apt-get install slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" = 0 ] || skip "srun: the local Slurm cluster needs root (slurmd starts job steps as their user)"
mkdir -p "$DIR" && chmod 700 "$DIR" || skip "srun: cannot create $DIR"
DIR=$(cd "$DIR" && pwd)
mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool"
chmod 700 "$DIR/munge"

# munge: its own key, socket, pid, seed and log files; --force because this directory is not /etc/munge.
mungekey --create --keyfile="$DIR/munge/munge.key" --force >/dev/null 2>&1 ||
  { dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 2>/dev/null && chmod 400 "$DIR/munge/munge.key"; } ||
  skip "srun: cannot create a munge key"
SOCK=$DIR/munge/munge.socket
munged --force --socket="$SOCK" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munged.pid" \
  --seed-file="$DIR/munge/munged.seed" --log-file="$DIR/munged.log" </dev/null >>"$DIR/munged.log" 2>&1 ||
  skip "srun: munged did not start: $(tail -1 "$DIR/munged.log")"
for _ in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
if ! echo ok | munge --socket="$SOCK" 2>/dev/null | unmunge --socket="$SOCK" >/dev/null 2>&1; then
  skip "srun: munge does not round-trip a credential on $SOCK ($(tail -1 "$DIR/munged.log"))"
fi

# slurm.conf: this host's name and CPU layout as slurmd sees them (RealMemory left out: a smaller
# measurement later would drain the node).
NODE_LINE=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -1)
[ -n "$NODE_LINE" ] || skip "srun: slurmd -C printed no NodeName line"
NODE=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$NODE_LINE")
NODE_LINE=$(sed -E 's/ RealMemory=[^ ]+//' <<<"$NODE_LINE")
CTLD_PORT=$(free_port) && SLURMD_PORT=$(free_port) || skip "srun: no free TCP port for slurmctld / slurmd"
[ "$CTLD_PORT" != "$SLURMD_PORT" ] || SLURMD_PORT=$((CTLD_PORT + 1))
RESV_LO=$((31000 + RANDOM % 1600))  # reserved step ports (SLURM_STEP_RESV_PORTS): 100, below the ephemeral range
cat >"$DIR/slurm.conf" <<EOF
# A throwaway single-node cluster for tests (tests/launchers/local_slurm.sh).
ClusterName=tpshardci
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SwitchType=switch/none
MpiDefault=none
MpiParams=ports=$RESV_LO-$((RESV_LO + 99))
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
InactiveLimit=0
KillWait=2
MinJobAge=5
$NODE_LINE NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
echo "export SLURM_CONF=$DIR/slurm.conf" >"$DIR/env.sh"
export SLURM_CONF=$DIR/slurm.conf

# The watchdog: detached, no inherited stdout/stderr (a test harness waits for those to close).
WATCHDOG_MAX=${LOCAL_SLURM_MAX_S:-900}
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
setsid bash -c '
  echo $$ >"$1/watchdog.pid"
  end=$((SECONDS + $3))
  while kill -0 "$2" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 1; done
  WATCHDOG_SELF=$$ exec bash "$4" stop "$1"' watchdog "$DIR" "$OWNER" "$WATCHDOG_MAX" "$SELF" \
  </dev/null >>"$DIR/watchdog.log" 2>&1 &

# -D: foreground (no systemd here); -i: ignore state from an earlier run; -c: clear it; both log to files.
slurmctld -D -i -c -f "$DIR/slurm.conf" </dev/null >>"$DIR/slurmctld.out" 2>&1 &
echo $! >"$DIR/slurmctld.pid.launch"
slurmd -D -f "$DIR/slurm.conf" -N "$NODE" </dev/null >>"$DIR/slurmd.out" 2>&1 &
echo $! >"$DIR/slurmd.pid.launch"

# problem FILE...: the daemons' last fatal line, else their last error line (without the PMIx plugin's,
# which Debian's Slurm logs at every start).
problem() {
  local line
  line=$(grep -hi fatal "$@" 2>/dev/null | tail -1)
  [ -n "$line" ] || line=$(grep -hi error "$@" 2>/dev/null | grep -vi pmix | tail -1)
  echo "${line:-see $DIR}"
}

state=""
for _ in $(seq 150); do  # 30 s
  state=$(timeout 3 sinfo -h -N -n "$NODE" -o "%T %E" 2>/dev/null | head -1)
  [ "$state" = "idle none" ] && break
  for d in slurmctld slurmd; do
    if ! kill -0 "$(cat "$DIR/$d.pid.launch")" 2>/dev/null; then
      skip "srun: $d exited at startup: $(problem "$DIR/$d.log" "$DIR/$d.out")"
    fi
  done
  sleep 0.2
done
[ "$state" = "idle none" ] ||
  skip "srun: the local Slurm node is '${state:-not listed}' after 30 s, not idle ($(problem "$DIR"/slurm*.log))"
exit 0
