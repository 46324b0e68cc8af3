#!/usr/bin/env bash
# launchers_check.sh BIN_DIR FIXTURES_DIR OUT_DIR: the CPU backend with one process per rank under every
# launcher this machine can start, on stories260K: tprun's own (--cpu-processes: tp 2, pp 3), two tprun
# "nodes" on loopback (--nnodes 2), mpirun -np 2 (tp 2) and -np 3 (pp 3), one tprun per "node" under
# mpirun (--nnodes 2, pp 3 x tp 2), and srun on a single-node Slurm cluster this test starts on localhost
# and tears down after (local_slurm.sh): srun -n 2 (tp 2), -n 3 (pp 3), one tprun per node (-N 1
# --ntasks-per-node=1 ... --nnodes 1; and two tprun "nodes" as two tasks, --nnodes 2), three job steps
# running at the same time in one allocation (rendezvous ports from job id + step id, and from the
# step's reserved ports), and a killed rank. Each greedy output must equal the threaded backend's byte for
# byte; a rank killed with SIGKILL must end the job within 10 s, exit non-zero, and be named on stderr. A
# launcher that is not installed or cannot start is reported as SKIPPED with the reason (never silently).
# Exit 0 when every run that could start passed.
set -uo pipefail
BIN=$1 FIX=$2 OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
MODEL=$OUT/stories260K
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
"$BIN/tpshard" convert "$FIX/stories260K" -o "$MODEL" --tp 1,2 --pp 1,3 --force -q >/dev/null || { echo "convert failed"; exit 1; }
GEN=(generate --prompt 'Once upon a time' --max-new-tokens 40)
"$BIN/tprun" "$MODEL" --tp 2 --device cpu -q "${GEN[@]}" >"$OUT/threads.txt" || { echo "threaded run failed"; exit 1; }
[ -s "$OUT/threads.txt" ] || { echo "threaded run printed nothing"; exit 1; }

# same NAME CMD...: run CMD (60 s at most), compare its stdout to the threaded output.
same() {
  local name=$1; shift
  if timeout 60 "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err"; then
    if cmp -s "$OUT/threads.txt" "$OUT/$name.txt"; then pass "$name: greedy output identical to the threaded backend"
    else fail "$name: output differs from the threaded backend"; diff "$OUT/threads.txt" "$OUT/$name.txt" | head -5; fi
  else
    fail "$name: exit $? (stderr below)"; tail -5 "$OUT/$name.err"
  fi
}

# rank1_of PID: the process of rank 1. By default the launcher PID's second child; with RANKS_UNDER_SLURM
# set, the tprun task whose SLURM_PROCID is 1 on this test's cluster (srun's tasks are slurmstepd's).
RANKS_UNDER_SLURM=""
rank1_of() {
  if [ -z "$RANKS_UNDER_SLURM" ]; then pgrep -P "$1" | sort -n | sed -n 2p; return; fi
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = tprun ] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_PROCID=1" && { echo "${p#/proc/}"; return; }
  done
}

# killed NAME PATTERN CMD...: start CMD, SIGKILL its process of rank 1 (rank1_of) once decoding, expect
# the job to end within 10 s with a non-zero exit and PATTERN (a grep -E) on stderr.
killed() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err" &
  local pid=$! victim="" t0 t1 rc
  for _ in $(seq 100); do
    victim=$(rank1_of "$pid")
    [ -n "$victim" ] && grep -q "backend cpu" "$OUT/$name.err" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
  if [ -z "$victim" ]; then fail "$name: no rank process found"; kill -9 "$pid" 2>/dev/null; wait "$pid"; return; fi
  t0=$(date +%s.%N)
  kill -9 "$victim"
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then fail "$name: still running 15 s after rank 1 was killed"; kill -9 "$pid"; fi
  wait "$pid"; rc=$?
  t1=$(date +%s.%N)
  local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -ne 0 ] && grep -qE "$pattern" "$OUT/$name.err" && awk -v s="$secs" 'BEGIN { exit !(s < 10) }'; then
    pass "$name: killed rank ended the job in ${secs}s, exit $rc, named on stderr"
  else
    fail "$name: exit $rc after ${secs}s; stderr:"; tail -5 "$OUT/$name.err"
  fi
}

LONG=(generate --max-new-tokens 480)  # 16 prompts of 480 tokens: tens of seconds at 2 ranks
for i in $(seq 16); do LONG+=(--prompt "Story $i"); done
same tprun_tp2 "$BIN/tprun" "$MODEL" --tp 2 --device cpu --cpu-processes -q "${GEN[@]}"
same tprun_pp3 "$BIN/tprun" "$MODEL" --pp 3 --device cpu --cpu-processes -q "${GEN[@]}"
killed tprun_killed "rank 1 of 2 .* failed with signal 9" "$BIN/tprun" "$MODEL" --tp 2 --device cpu --cpu-processes "${LONG[@]}"

# Two tprun "nodes" on loopback, one rank of tp 2 each.
PORT=$((20000 + RANDOM % 20000))
"$BIN/tprun" "$MODEL" --tp 2 --device cpu --nnodes 2 --node-rank 1 --master-addr 127.0.0.1:$PORT -q "${GEN[@]}" \
  >"$OUT/nodes_1.txt" 2>"$OUT/nodes_1.err" &
node1=$!
same nodes_2x1 "$BIN/tprun" "$MODEL" --tp 2 --device cpu --nnodes 2 --node-rank 0 --master-addr 127.0.0.1:$PORT -q "${GEN[@]}"
wait "$node1" || fail "nodes_2x1: node 1 exited $?"

if command -v mpirun >/dev/null 2>&1; then
  MPI=(mpirun --oversubscribe)
  [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
  same mpirun_np2 "${MPI[@]}" -np 2 "$BIN/tprun" "$MODEL" --tp 2 --device cpu -q "${GEN[@]}"
  same mpirun_np3 "${MPI[@]}" -np 3 "$BIN/tprun" "$MODEL" --pp 3 --device cpu -q "${GEN[@]}"
  # one tprun per "node": mpirun starts 2 launchers, each starts the 3 ranks of its node (pp 3 x tp 2)
  same mpirun_node_launchers "${MPI[@]}" -np 2 "$BIN/tprun" "$MODEL" --tp 2 --pp 3 --device cpu --nnodes 2 -q "${GEN[@]}"
  killed mpirun_killed "process rank [01] .*signal 9|stopping: rank [01] .*disconnected" "${MPI[@]}" -np 2 "$BIN/tprun" "$MODEL" --tp 2 --device cpu "${LONG[@]}"
else
  echo "SKIPPED: mpirun not installed (apt-get install openmpi-bin): the mpirun runs did not run"
fi

# srun on a throwaway single-node Slurm cluster (munge, slurmctld, slurmd on localhost). Its directory is
# short (unix socket paths) and under /tmp; its logs are copied to $OUT/slurm_logs.
SLURM_DIR=$(mktemp -d /tmp/tpshard-slurm.XXXXXX)
stop_slurm() {
  [ -n "$SLURM_DIR" ] || return 0
  bash "$HERE/local_slurm.sh" stop "$SLURM_DIR"
  mkdir -p "$OUT/slurm_logs" && cp "$SLURM_DIR"/*.log "$SLURM_DIR"/*.out "$SLURM_DIR/slurm.conf" "$OUT/slurm_logs/" 2>/dev/null
  rm -rf "$SLURM_DIR"
  SLURM_DIR=""
}
trap stop_slurm EXIT
t_slurm=$SECONDS
if why=$(bash "$HERE/local_slurm.sh" start "$SLURM_DIR" $$); then
  . "$SLURM_DIR/env.sh"
  echo "local Slurm cluster up in $((SECONDS - t_slurm)) s ($(srun --version))"
  TPRUN=("$BIN/tprun" "$MODEL" --device cpu -q)
  same srun_n2 srun -n 2 "${TPRUN[@]}" --tp 2 "${GEN[@]}"
  # 3 tasks on a node of 2 CPUs: --overcommit
  same srun_n3 srun --overcommit -n 3 "${TPRUN[@]}" --pp 3 "${GEN[@]}"
  # one tprun per node starting its node's 6 ranks (pp 3 x tp 2; on CPU one node's ranks are threads
  # unless --cpu-processes), and two such launchers as two tasks of one node (--nnodes 2)
  same srun_node_launcher srun -N 1 --ntasks-per-node=1 "${TPRUN[@]}" --tp 2 --pp 3 --nnodes 1 --cpu-processes "${GEN[@]}"
  same srun_node_launchers srun -n 2 "${TPRUN[@]}" --tp 2 --pp 3 --nnodes 2 "${GEN[@]}"
  # Three steps of one allocation at the same time (--overlap: they share its CPUs): two without reserved
  # ports (rendezvous port from job id + step id) and one with them (SLURM_STEP_RESV_PORTS).
  if timeout 60 salloc -n 2 bash -c '
      out=$1; shift
      srun --overlap --resv-ports=0 -n 2 "$@" >"$out/srun_step_a.txt" 2>"$out/srun_step_a.err" & a=$!
      srun --overlap --resv-ports=0 -n 2 "$@" >"$out/srun_step_b.txt" 2>"$out/srun_step_b.err" & b=$!
      srun --overlap -n 2 "$@" >"$out/srun_step_c.txt" 2>"$out/srun_step_c.err" & c=$!
      wait $a && wait $b && wait $c' steps "$OUT" "${TPRUN[@]}" --tp 2 "${GEN[@]}" >"$OUT/srun_steps.err" 2>&1; then
    if cmp -s "$OUT/threads.txt" "$OUT/srun_step_a.txt" && cmp -s "$OUT/threads.txt" "$OUT/srun_step_b.txt" &&
       cmp -s "$OUT/threads.txt" "$OUT/srun_step_c.txt"; then
      pass "srun_steps: 3 concurrent steps of one allocation, each greedy output identical to the threaded backend"
    else fail "srun_steps: an output differs from the threaded backend"; fi
  else
    fail "srun_steps: exit $? (stderr below)"; tail -3 "$OUT/srun_steps.err" "$OUT"/srun_step_?.err
  fi
  RANKS_UNDER_SLURM=1
  killed srun_killed "task 1: Killed|stopping: rank 1 .*disconnected" srun -n 2 "$BIN/tprun" "$MODEL" --tp 2 --device cpu "${LONG[@]}"
  RANKS_UNDER_SLURM=""
  stop_slurm
else
  echo "$why" | grep SKIPPED || echo "SKIPPED: srun: the local Slurm cluster did not start ($why)"
  echo "         (the srun environment, hostlists and port rule are still unit-tested in test_runtime: test_launch_env.cpp)"
fi
echo "launchers_check: $fails failure(s)"
[ "$fails" -eq 0 ]
