#!/usr/bin/env bash
# gpu_check.sh BUILD_DIR: THE GPU check of tpshard, run on the GPU machine (>= 1 GPU; 2 for the multi-rank
# checks). Builds NOTHING: it uses BUILD_DIR/bin/{tpshard,tprun,test_gpu_runtime,test_kernels,...} built
# elsewhere with -DTPSHARD_CUDA=ON. Writes logs under $OUT (default ./gpu_check_out); prints one
# PASS/FAIL/SKIP line per check and exits non-zero when any check failed.
#   Section "loader, NCCL, launcher": test_gpu_runtime, comm-test (launcher, two "nodes"),
#   per-process GPU placement, killed / failing rank, corrupted shard, bench-load, scripts/bench_load.py.
#   Section "kernels and model": kernel tests, the CUDA runner against the HF fixtures, generation.
# Options (environment): SKIP_BENCH=1 skips the benchmarks; ONLY_RUNTIME=1 stops after the runtime section (launcher, communicators, loader);
# ONLY_MODEL=1 skips it (kernels and model, and the tprun checks when tprun is there: a run that carries only
# tpshard and bench_generate).
set -u
BUILD=${1:?usage: scripts/gpu_check.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/bin
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
LOG=$OUT/runtime_checks.log     # every command of the runtime checks and its output
WORK=$(mktemp -d /tmp/tpshard_gpu_check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
: > "$LOG"

result() {  # result PASS|FAIL|SKIP name [detail]
  local line="$1 $2${3:+: $3}"
  echo "$line" | tee -a "$LOG"
  [ "$1" = FAIL ] && FAILED=$((FAILED + 1))
  return 0
}
run_logged() {  # run_logged NAME CMD...: runs, appends output to the log, returns the exit code
  local name=$1; shift
  echo "=== $name: $*" >> "$LOG"
  "$@" > "$WORK/out.txt" 2> "$WORK/err.txt"
  local rc=$?
  cat "$WORK/out.txt" >> "$LOG"; sed 's/^/[stderr] /' "$WORK/err.txt" >> "$LOG"
  echo "--- exit $rc" >> "$LOG"
  return $rc
}

# Shared libraries the binaries need that the loader does not find: add their directories.
source "$REPO/scripts/gpu_libs.sh" "$BUILD"

NGPU=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
{
  echo "# gpu_check $(date -u +%FT%TZ) on $(hostname), $NGPU GPU(s), build $BUILD"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>&1
  echo "# runtime libraries of tprun:"; ldd "$BIN/tprun" 2>&1
} >> "$LOG"
if ldd "$BIN/tprun" 2>&1 | grep -q "not found"; then
  result FAIL "binaries: shared libraries" "$(ldd "$BIN/tprun" | grep 'not found' | tr '\n' ' ')"
else
  result PASS "binaries: every shared library of tprun resolves"
fi

# ============================ loader, NCCL, launcher ============================
if [ "${ONLY_MODEL:-0}" != 1 ]; then  # ONLY_MODEL=1: the kernels and model section alone
# --- unit tests on the GPU
if run_logged test_gpu_runtime "$BIN/test_gpu_runtime"; then
  result PASS "test_gpu_runtime" "$(grep -E 'test cases' "$WORK/out.txt" | tail -1)"
else
  result FAIL "test_gpu_runtime" "see $LOG"
fi

# --- a small real model (stories260K, Llama family) converted at tp 1 and 2
MODEL=$WORK/stories260K
if run_logged convert "$BIN/tpshard" convert "$REPO/tests/fixtures/stories260K" -o "$MODEL" --tp 1,2; then
  result PASS "tpshard convert stories260K --tp 1,2"
else
  result FAIL "tpshard convert stories260K --tp 1,2" "the checks below need it"
fi

if [ "$NGPU" -ge 2 ]; then
  # --- launcher: tp 2 on this node, NCCL all_reduce / all_gather / broadcast with rank-dependent data
  if run_logged comm-test-tp2 "$BIN/tprun" "$MODEL" --tp 2 --device cuda comm-test &&
     grep -q "comm-test ok: world 2" "$WORK/out.txt"; then
    result PASS "comm-test tp 2 (launcher)" "$(grep 'comm-test ok' "$WORK/out.txt")"
  else
    result FAIL "comm-test tp 2 (launcher)" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
  fi
  # only rank 0 writes to stdout; the other rank's stderr is prefixed
  if [ "$(grep -c 'comm-test ok' "$WORK/out.txt")" = 1 ] && grep -q '^\[rank 1\] comm-test rank 1' "$WORK/err.txt"; then
    result PASS "stdout only from rank 0, stderr of rank 1 prefixed [rank 1]"
  else
    result FAIL "stdout only from rank 0, stderr of rank 1 prefixed [rank 1]"
  fi

  # --- two "nodes" on one machine: two tprun processes, one GPU each, loopback master
  PORT=$((20000 + RANDOM % 20000))
  echo "=== two-node comm-test on 127.0.0.1:$PORT" >> "$LOG"
  CUDA_VISIBLE_DEVICES=1 "$BIN/tprun" "$MODEL" --tp 2 --device cuda --nnodes 2 --node-rank 1 \
      --master-addr 127.0.0.1:$PORT comm-test > "$WORK/n1.out" 2> "$WORK/n1.err" &
  N1=$!
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN/tprun" "$MODEL" --tp 2 --device cuda --nnodes 2 --node-rank 0 \
      --master-addr 127.0.0.1:$PORT comm-test > "$WORK/n0.out" 2> "$WORK/n0.err"
  RC0=$?; wait $N1; RC1=$?
  cat "$WORK/n0.out" "$WORK/n0.err" "$WORK/n1.out" "$WORK/n1.err" >> "$LOG"
  if [ $RC0 = 0 ] && [ $RC1 = 0 ] && grep -q "comm-test ok: world 2" "$WORK/n0.out" && [ ! -s "$WORK/n1.out" ]; then
    result PASS "two-node comm-test (2 tprun, 1 GPU each, 127.0.0.1 master)" "$(grep 'comm-test ok' "$WORK/n0.out")"
  else
    result FAIL "two-node comm-test" "exit codes $RC0/$RC1; $(tail -1 "$WORK/n0.err")"
  fi

  # --- every worker's memory appears only on its own GPU
  echo "=== placement: nvidia-smi --query-compute-apps while comm-test holds" >> "$LOG"
  "$BIN/tprun" "$MODEL" --tp 2 --device cuda comm-test --hold-seconds 8 > "$WORK/p.out" 2> "$WORK/p.err" &
  L=$!
  sleep 5
  nvidia-smi --query-gpu=index,uuid --format=csv,noheader > "$WORK/gpus.csv"
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader > "$WORK/apps.csv"
  KIDS=$(pgrep -P $L | tr '\n' ' ')
  declare -A LRANK=()
  for k in $KIDS; do LRANK[$k]=$(tr '\0' '\n' < /proc/$k/environ 2>/dev/null | sed -n 's/^TPRUN_LOCAL_RANK=//p'); done
  cat "$WORK/gpus.csv" "$WORK/apps.csv" >> "$LOG"; echo "workers: $KIDS" >> "$LOG"
  wait $L
  if [ ! -s "$WORK/apps.csv" ]; then
    result SKIP "per-process GPU placement" "nvidia-smi lists no compute processes here (container PID namespace)"
  else
    OK=1; SEEN=""
    for k in $KIDS; do
      r=${LRANK[$k]}
      n=$(grep -c "^$k," "$WORK/apps.csv")
      [ "$n" = 1 ] || OK=0
      u=$(grep "^$k," "$WORK/apps.csv" | cut -d, -f2 | tr -d ' ')
      idx=$(grep "$u" "$WORK/gpus.csv" | cut -d, -f1)
      [ "$idx" = "$r" ] || OK=0
      SEEN="$SEEN pid $k local_rank $r -> GPU ${idx:-none} ($n entries);"
    done
    [ -n "$KIDS" ] || OK=0
    if grep -q "^$L," "$WORK/apps.csv"; then OK=0; SEEN="$SEEN the launcher itself holds GPU memory;"; fi
    if [ $OK = 1 ]; then result PASS "per-process GPU placement" "$SEEN"; else result FAIL "per-process GPU placement" "$SEEN"; fi
  fi

  # --- a killed rank brings the job down, and the launcher names it
  echo "=== kill -9 of rank 1 during comm-test --hold-seconds 60" >> "$LOG"
  "$BIN/tprun" "$MODEL" --tp 2 --device cuda comm-test --hold-seconds 60 > "$WORK/k.out" 2> "$WORK/k.err" &
  L=$!
  sleep 6
  VICTIM=""; KIDS=$(pgrep -P $L | tr '\n' ' ')
  for k in $KIDS; do
    if tr '\0' '\n' < /proc/$k/environ | grep -qx 'TPRUN_RANK=1'; then VICTIM=$k; fi
  done
  T0=$(date +%s%N)
  [ -n "$VICTIM" ] && kill -9 "$VICTIM"
  wait $L; RC=$?
  DT_MS=$(( ($(date +%s%N) - T0) / 1000000 ))
  cat "$WORK/k.err" >> "$LOG"
  LEFT=0
  for k in $KIDS; do kill -0 "$k" 2>/dev/null && LEFT=$((LEFT + 1)); done
  if [ -n "$VICTIM" ] && [ $RC != 0 ] && grep -q "error: rank 1 of 2.*signal 9" "$WORK/k.err" && \
     [ "$DT_MS" -lt 15000 ] && [ "$LEFT" = 0 ]; then
    result PASS "killed rank 1 brings the job down" "exit $RC after ${DT_MS} ms: $(grep 'error: rank 1 of 2' "$WORK/k.err")"
  else
    result FAIL "killed rank 1 brings the job down" "victim '$VICTIM' exit $RC after ${DT_MS} ms, $LEFT worker(s) left; $(tail -2 "$WORK/k.err" | tr '\n' ' ')"
  fi

  # --- a failing rank (an Error thrown on rank 1) stops rank 0 and is named with its message
  if run_logged fail-rank timeout 60 "$BIN/tprun" "$MODEL" --tp 2 --device cuda comm-test --fail-rank 1 ; then
    result FAIL "failing rank 1 is reported" "exit 0"
  elif grep -q "error: rank 1 of 2.*injected failure" "$WORK/err.txt"; then
    result PASS "failing rank 1 is reported" "$(grep 'error: rank 1 of 2' "$WORK/err.txt")"
  else
    result FAIL "failing rank 1 is reported" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
  fi
  # same when rank 0 fails: rank 1 must not hang
  if run_logged fail-rank0 timeout 60 "$BIN/tprun" "$MODEL" --tp 2 --device cuda comm-test --fail-rank 0 ; then
    result FAIL "failing rank 0 is reported" "exit 0"
  elif grep -q "error: rank 0 of 2.*injected failure" "$WORK/err.txt"; then
    result PASS "failing rank 0 is reported" "$(grep 'error: rank 0 of 2' "$WORK/err.txt")"
  else
    result FAIL "failing rank 0 is reported" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
  fi
else
  result SKIP "multi-GPU checks (comm-test tp 2, two nodes, placement, kill, failure)" "$NGPU GPU(s)"
fi

# --- torchrun (needs torch, present on the GPU machine): tprun under `torchrun --no-python`, one node and
# two agents on loopback (--nnodes 2); the CPU backend (one process per rank, gloo) and CUDA. Each greedy
# output must equal tprun's own launch. MASTER_PORT is torchrun's store: tprun must take the next port.
if command -v torchrun >/dev/null 2>&1 && [ -d "$MODEL" ]; then
  TGEN=(generate --prompt 'Once upon a time' --max-new-tokens 40)
  "$BIN/tprun" "$MODEL" --tp 2 --device cpu -q "${TGEN[@]}" > "$WORK/tr_ref_cpu.txt" 2>/dev/null
  if run_logged "torchrun cpu 1 node" timeout 120 torchrun --no-python --nnodes 1 --nproc-per-node 2 \
       --master-port 29611 "$BIN/tprun" "$MODEL" --tp 2 --device cpu -q "${TGEN[@]}" &&
     cmp -s "$WORK/out.txt" "$WORK/tr_ref_cpu.txt"; then
    result PASS "torchrun --no-python --nproc-per-node 2 tprun --device cpu: output identical to threads"
  elif grep -q "built without" "$WORK/err.txt"; then
    result SKIP "torchrun --device cpu" "this build has no gloo (apt-get install libgloo-dev, reconfigure)"
  else
    result FAIL "torchrun --device cpu (1 node)" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
  fi
  if [ -s "$WORK/tr_ref_cpu.txt" ] && ! grep -q "built without" "$WORK/err.txt"; then
    TR=(torchrun --no-python --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29621)
    timeout 120 "${TR[@]}" --node-rank 1 "$BIN/tprun" "$MODEL" --tp 2 --device cpu -q "${TGEN[@]}" \
      > "$WORK/tr_n1.out" 2> "$WORK/tr_n1.err" &
    TRN1=$!
    if run_logged "torchrun cpu 2 nodes" timeout 120 "${TR[@]}" --node-rank 0 "$BIN/tprun" "$MODEL" --tp 2 \
         --device cpu -q "${TGEN[@]}" && wait $TRN1 && cmp -s "$WORK/out.txt" "$WORK/tr_ref_cpu.txt"; then
      result PASS "torchrun --nnodes 2 (two agents on loopback) tprun --device cpu: output identical to threads"
    else
      result FAIL "torchrun --nnodes 2 --device cpu" "$(tail -2 "$WORK/err.txt" "$WORK/tr_n1.err" | tr '\n' ' ')"
    fi
  fi
  if [ "$NGPU" -ge 2 ]; then
    "$BIN/tprun" "$MODEL" --tp 2 --device cuda -q "${TGEN[@]}" > "$WORK/tr_ref_cuda.txt" 2>/dev/null
    if run_logged "torchrun cuda 1 node" timeout 180 torchrun --no-python --nproc-per-node 2 --master-port 29631 \
         "$BIN/tprun" "$MODEL" --tp 2 --device cuda -q "${TGEN[@]}" && cmp -s "$WORK/out.txt" "$WORK/tr_ref_cuda.txt"; then
      result PASS "torchrun --no-python --nproc-per-node 2 tprun --device cuda: output identical to tprun's launch"
    else
      result FAIL "torchrun --device cuda (1 node)" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
    fi
    # two agents, one GPU each through CUDA_VISIBLE_DEVICES (as srun --gpus-per-task=1 gives): both are
    # local rank 0 of their node and must use their own only visible GPU.
    TR=(torchrun --no-python --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29641)
    CUDA_VISIBLE_DEVICES=1 timeout 180 "${TR[@]}" --node-rank 1 "$BIN/tprun" "$MODEL" --tp 2 --device cuda -q \
      "${TGEN[@]}" > "$WORK/tr_n1.out" 2> "$WORK/tr_n1.err" &
    TRN1=$!
    if CUDA_VISIBLE_DEVICES=0 run_logged "torchrun cuda 2 nodes" timeout 180 "${TR[@]}" --node-rank 0 "$BIN/tprun" \
         "$MODEL" --tp 2 --device cuda -q "${TGEN[@]}" && wait $TRN1 && cmp -s "$WORK/out.txt" "$WORK/tr_ref_cuda.txt"; then
      result PASS "torchrun --nnodes 2, one visible GPU per agent, tprun --device cuda: output identical"
    else
      result FAIL "torchrun --nnodes 2 --device cuda (one GPU per agent)" "$(tail -2 "$WORK/err.txt" "$WORK/tr_n1.err" | tr '\n' ' ')"
    fi
  fi
else
  result SKIP "torchrun checks" "torchrun not found (pip install torch) or no converted model"
fi

# --- a corrupted shard is refused (tp 1), naming the tensor
BAD=$WORK/bad_model
cp -r "$MODEL" "$BAD"
SHARD=$(python3 -c "
import json, sys
m = json.load(open(sys.argv[1] + '/manifest.json'))
sh = m['shards']
if isinstance(sh, dict): print(sh['1'][0]['file'])
else: print([s for s in sh if s.get('tp_size') == 1][0]['shards'][0]['file'])
" "$BAD" 2>/dev/null)
[ -n "$SHARD" ] || SHARD=tp1/rank0.tps
echo "=== corrupting $BAD/$SHARD" >> "$LOG"
python3 - "$BAD/$SHARD" <<'EOF'
import sys
p = sys.argv[1]
with open(p, 'r+b') as f:
    data = f.read()
    for frac in (0.35, 0.5, 0.65, 0.8):  # several places: at least one lies inside a tensor, not padding
        at = int(len(data) * frac)
        f.seek(at); f.write(bytes([data[at] ^ 0x5a]))
EOF
if run_logged corrupt "$BIN/tprun" "$BAD" --tp 1 --device cuda bench-load --no-runner; then
  result FAIL "corrupted shard is refused" "loaded without error"
elif grep -qi "corrupt" "$WORK/err.txt"; then
  result PASS "corrupted shard is refused" "$(grep -m1 'error:' "$WORK/err.txt")"
else
  result FAIL "corrupted shard is refused" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
fi

# --- bench-load on the small model, with the runner (kv_cache / workspace numbers)
for TP in 1 2; do
  [ "$TP" -le "$NGPU" ] || continue
  if run_logged "bench-load tp $TP" "$BIN/tprun" "$MODEL" --tp $TP --device cuda bench-load; then
    result PASS "bench-load stories260K tp $TP" "$(grep -A1 '^rank' "$WORK/out.txt" | tail -1 | tr -s ' ')"
  else
    result FAIL "bench-load stories260K tp $TP" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
  fi
done

# --- load benchmark: tprun bench-load vs safetensors vs transformers (random-weight, real shapes)
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  if PYTHONUNBUFFERED=1 timeout "${BENCH_LOAD_TIMEOUT:-420}" python3 "$REPO/scripts/bench_load.py" --bin "$BIN" \
       --work "$WORK/bench" ${BENCH_LOAD_ARGS:-} > "$OUT/bench_load.log" 2>&1; then
    result PASS "scripts/bench_load.py" "table in $OUT/bench_load.log"
    sed -n '/^| model/,$p' "$OUT/bench_load.log"
  else
    result FAIL "scripts/bench_load.py" "$(tail -3 "$OUT/bench_load.log" | tr '\n' ' ')"
  fi
  rm -rf "$WORK/bench"
fi

if [ "${ONLY_RUNTIME:-0}" = 1 ]; then  # runtime checks only (ONLY_RUNTIME=1)
  echo "gpu_check (runtime only): $FAILED check(s) failed; log: $LOG" | tee -a "$LOG"
  [ "$FAILED" = 0 ]; exit
fi

fi  # ONLY_MODEL

# ============================ kernels and model ============================
# --- kernels and model ---
# Kernel tests, then the CUDA runner end to end (bench_generate: one process, a thread per rank) on the
# committed fixtures: last-position logits vs the Hugging Face references and greedy tokens, at tp 1 and 2;
# stories260K's published 200 greedy ids; tprun --device cuda vs --device cpu logits; the generation
# benchmark (scripts/bench_generate.py; SKIP_BENCH=1 skips it). Logs: $OUT/kernels_model.log.
KLOG=$OUT/kernels_model.log
: > "$KLOG"
k_result() {  # like result, and keep the command output in $KLOG
  cat "$WORK/out.txt" "$WORK/err.txt" >> "$KLOG" 2>/dev/null
  result "$@"
}
if [ -x "$BIN/test_kernels" ]; then
  if run_logged test_kernels "$BIN/test_kernels"; then
    k_result PASS "test_kernels" "$(grep -E 'test cases' "$WORK/out.txt" | tail -1)"
  else
    k_result FAIL "test_kernels" "$(grep -E 'ERROR|test cases' "$WORK/out.txt" | head -3 | tr '\n' ' ')"
  fi
else
  result FAIL "test_kernels" "$BIN/test_kernels missing"
fi
BG=$BIN/bench_generate
if [ ! -x "$BG" ]; then
  result FAIL "bench_generate" "$BG missing (tools/CMakeLists.txt needs add_subdirectory(bench_generate) when TPSHARD_HAVE_CUDA)"
else
  FIX=$REPO/tests/fixtures
  for m in tiny-llama tiny-gpt-neox-par tiny-gpt-neox-seq tiny-qwen2 tiny-internlm2 tiny-nvlm-d tiny-llama3-rope tiny-llama-bf16 tiny-gpt-neo tiny-mistral-swa tiny-llama-yarn tiny-phi3 tiny-phi3-longrope tiny-qwen3 tiny-starcoder2 tiny-gptj tiny-falcon tiny-falcon-mq tiny-gemma2 tiny-olmo2 tiny-mixtral tiny-llama-hd64 stories260K; do
    MD=$WORK/k_$m
    if ! run_logged "convert $m" "$BIN/tpshard" convert "$FIX/$m" -o "$MD" --tp 1,2 -q; then
      k_result FAIL "convert $m"; continue
    fi
    TOL=""; [ "$m" = tiny-llama-bf16 ] && TOL="--atol 0.05 --rtol 0.02"
    for TP in 1 2; do
      [ "$TP" -le "$NGPU" ] || continue
      # shellcheck disable=SC2086
      if run_logged "cuda runner $m tp $TP" timeout 120 "$BG" "$MD" --tp $TP --check-reference "$FIX/$m/reference.json" $TOL &&
         ! grep -q FAIL "$WORK/out.txt"; then
        k_result PASS "cuda runner $m tp $TP: logits + greedy vs HF" "$(grep -c PASS "$WORK/out.txt") checks"
      else
        k_result FAIL "cuda runner $m tp $TP: logits + greedy vs HF" "$(grep -m2 FAIL "$WORK/out.txt" | tr '\n' ' ')$(tail -1 "$WORK/err.txt")"
      fi
    done
  done
  # prompts split across several GPU steps of at most 4 tokens (prefill continuing a slot's kv_cache;
  # tiny-gpt-neo / tiny-mistral-swa: the local window of 4 / sliding window of 6 spans the steps)
  for m in tiny-llama3-rope tiny-gpt-neo tiny-mistral-swa tiny-starcoder2 tiny-gemma2 tiny-olmo2 tiny-mixtral; do
    for TP in 1 2; do
      [ "$TP" -le "$NGPU" ] || continue
      if run_logged "cuda runner steps $m tp $TP" timeout 120 "$BG" "$WORK/k_$m" --tp $TP --max-step-tokens 3 \
           --check-reference "$FIX/$m/reference.json" && ! grep -q FAIL "$WORK/out.txt"; then
        k_result PASS "cuda runner $m tp $TP, prompts in 4-token steps: logits + greedy vs HF"
      else
        k_result FAIL "cuda runner $m tp $TP, 4-token steps" "$(grep -m2 FAIL "$WORK/out.txt" | tr '\n' ' ')$(tail -1 "$WORK/err.txt")"
      fi
    done
  done
  # reduced-precision copies of f32 fixtures: logits within fp16 / bf16 tolerance (greedy may differ by design);
  # tiny-llama-hd64's copies run the tensor-core prefill attention (head_dim 64, prompts up to 130 tokens)
  for spec in "tiny-llama f16 0.03 0.01" "tiny-gpt-neox-par bf16 0.1 0.02" "tiny-qwen2 bf16 0.1 0.02" "tiny-gpt-neo bf16 0.1 0.02" "tiny-qwen3 bf16 0.1 0.02" "tiny-gptj bf16 0.1 0.02" "tiny-falcon bf16 0.1 0.02" "tiny-gemma2 bf16 0.1 0.02" "tiny-olmo2 bf16 0.1 0.02" "tiny-mixtral bf16 0.1 0.02" "tiny-llama-hd64 f16 0.03 0.01" "tiny-llama-hd64 bf16 0.1 0.02"; do
    set -- $spec
    MD=$WORK/k_$1_$2
    run_logged "convert $1 $2" "$BIN/tpshard" convert "$FIX/$1" -o "$MD" --tp 1,2 --dtype $2 -q || { k_result FAIL "convert $1 --dtype $2"; continue; }
    for TP in 1 2; do
      [ "$TP" -le "$NGPU" ] || continue
      if run_logged "cuda runner $1 $2 tp $TP" timeout 120 "$BG" "$MD" --tp $TP --no-greedy --atol $3 --rtol $4 \
           --check-reference "$FIX/$1/reference.json" && ! grep -q FAIL "$WORK/out.txt"; then
        k_result PASS "cuda runner $1 as $2 tp $TP: logits vs f32 HF within atol $3 + rtol $4 x max|ref|"
      else
        k_result FAIL "cuda runner $1 as $2 tp $TP" "$(grep -m2 FAIL "$WORK/out.txt" | tr '\n' ' ')$(tail -1 "$WORK/err.txt")"
      fi
    done
  done
  # stories260K: the 200 greedy ids published with the model, identical at tp 1, tp 2 and without CUDA graphs
  for opt in "--tp 1" "--tp 2" "--tp 1 --no-graphs"; do
    set -- $opt
    [ "$2" -le "$NGPU" ] || continue
    # shellcheck disable=SC2086
    if run_logged "greedy200 $opt" timeout 120 "$BG" "$WORK/k_stories260K" $opt --check-greedy "$FIX/stories260K/expected_greedy200_ids.txt" &&
       grep -q "^PASS" "$WORK/out.txt"; then
      k_result PASS "stories260K greedy 200 ids ($opt)" "$(cat "$WORK/out.txt")"
    else
      k_result FAIL "stories260K greedy 200 ids ($opt)" "$(cat "$WORK/out.txt") $(tail -1 "$WORK/err.txt")"
    fi
  done
  # decode lookahead: identical ids and logits with and without it over a script that drops rows, feeds a
  # non-argmax token, prefills between decode steps and asks for logits (check_lookahead.h); parallel and
  # sequential residual models, tp 1 and 2
  for m in tiny-gpt-neox-par tiny-llama3-rope; do
    for TP in 1 2; do
      [ "$TP" -le "$NGPU" ] || continue
      if run_logged "lookahead $m tp $TP" timeout 120 "$BG" "$WORK/k_$m" --tp $TP --check-lookahead &&
         ! grep -q FAIL "$WORK/out.txt" && [ "$(grep -c '^PASS' "$WORK/out.txt")" -eq 3 ]; then
        k_result PASS "decode lookahead $m tp $TP: same ids and logits as without it" "$(grep 'computed ahead' "$WORK/out.txt")"
      else
        k_result FAIL "decode lookahead $m tp $TP" "$(grep -m2 FAIL "$WORK/out.txt" | tr '\n' ' ')$(tail -1 "$WORK/err.txt")"
      fi
    done
  done
  # shared prompt prefix read from another kv_cache slot: logits and greedy ids of the unshared prompts
  # (tiny-gpt-neo / tiny-mistral-swa / tiny-gemma2: local windows shorter than the prefix; tiny-llama-hd64_bf16:
  # the tensor-core prefill kernel reading the prefix slot); f32 and bf16; and every
  # token's logits of one chunk (all_logits) vs the last-position logits of each prefix
  for m in tiny-llama3-rope tiny-gpt-neo tiny-mistral-swa tiny-gpt-neo_bf16 tiny-gemma2 tiny-llama-hd64_bf16; do
    for TP in 1 2; do
      [ "$TP" -le "$NGPU" ] || continue
      [ -d "$WORK/k_$m" ] || continue
      if run_logged "shared prefix $m tp $TP" timeout 120 "$BG" "$WORK/k_$m" --tp $TP --check-shared-prefix --atol 1e-5 &&
         [ "$(grep -c '^PASS' "$WORK/out.txt")" -eq 3 ]; then
        k_result PASS "shared prefix and all_logits $m tp $TP: logits and greedy ids of the unshared / last-position path" "$(grep -m1 'max |diff|' "$WORK/out.txt" | sed 's/.*max |diff|/max |diff|/')"
      else
        k_result FAIL "shared prefix $m tp $TP" "$(grep -m2 FAIL "$WORK/out.txt" | tr '\n' ' ')$(tail -1 "$WORK/err.txt")"
      fi
    done
  done
  # the same with cascade decode attention on (3 members per prefix read it once in the cascade prefix pass)
  for m in tiny-llama3-rope tiny-gpt-neo_bf16; do
    [ -d "$WORK/k_$m" ] || continue
    if run_logged "shared prefix $m cascade" env TPSHARD_CASCADE_ATTENTION=1 timeout 120 "$BG" "$WORK/k_$m" --tp 1 --check-shared-prefix --atol 1e-5 &&
       [ "$(grep -c '^PASS' "$WORK/out.txt")" -eq 3 ]; then
      k_result PASS "shared prefix $m tp 1, TPSHARD_CASCADE_ATTENTION=1: logits and greedy ids of the unshared path" "$(grep -m1 'max |diff|' "$WORK/out.txt" | sed 's/.*max |diff|/max |diff|/')"
    else
      k_result FAIL "shared prefix $m cascade" "$(grep -m2 FAIL "$WORK/out.txt" | tr '\n' ' ')$(tail -1 "$WORK/err.txt")"
    fi
  done
fi
# tprun: the CUDA backend's logits vs the CPU backend's (same binary, same shard files)
if [ -x "$BIN/tprun" ] && [ -d "$WORK/k_tiny-gpt-neox-par" ]; then
  IDS=193,411,293,143,817,13,369,802,915,936,517
  for TP in 1 2; do
    [ "$TP" -le "$NGPU" ] || continue
    "$BIN/tprun" "$WORK/k_tiny-gpt-neox-par" --tp $TP --device cpu logits --ids $IDS > "$WORK/cpu.json" 2>> "$KLOG"
    "$BIN/tprun" "$WORK/k_tiny-gpt-neox-par" --tp $TP --device cuda logits --ids $IDS > "$WORK/cuda.json" 2>> "$KLOG"
    D=$(python3 -c "
import json, sys
a = json.load(open(sys.argv[1]))['logits']; b = json.load(open(sys.argv[2]))['logits']
assert len(a) == len(b), (len(a), len(b))
print(max(abs(x - y) for x, y in zip(a, b)))" "$WORK/cpu.json" "$WORK/cuda.json" 2>&1)
    if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$D" 2>/dev/null; then
      result PASS "tprun logits --device cuda vs cpu (tiny-gpt-neox-par f32, tp $TP)" "max abs diff $D"
    else
      result FAIL "tprun logits --device cuda vs cpu (tiny-gpt-neox-par f32, tp $TP)" "$D"
    fi
  done
fi
# Several ranks on one GPU (TPSHARD_TEST_SHARE_GPUS=1: the peer communicator over CUDA IPC within one
# device): tensor parallelism, even and uneven, checked for correctness where one GPU is all there is.
# The CUDA backend's last logits at tp T vs the CPU backend's at tp 1 (same shard directory, f32).
if [ -x "$BIN/tprun" ] && [ "${SHARE_GPU_CHECKS:-1}" = 1 ]; then
  FIX=$REPO/tests/fixtures
  for spec in "tiny-llama 2" "tiny-llama 3" "tiny-gpt-neox-par 3" "tiny-qwen2 3" "tiny-gpt-neo 3" "tiny-mixtral 2" "tiny-mixtral 3" "stories260K 3"; do
    set -- $spec
    MD=$WORK/s_$1
    [ -d "$MD" ] || run_logged "convert $1 --tp 1,2,3" "$BIN/tpshard" convert "$FIX/$1" -o "$MD" --tp 1,2,3 -q ||
      { result FAIL "convert $1 --tp 1,2,3"; continue; }
    IDS=193,411,293,143,317,13,369,302,415,36,17
    "$BIN/tprun" "$MD" --tp 1 --device cpu logits --ids $IDS > "$WORK/cpu.json" 2>> "$KLOG"
    if run_logged "shared gpu $1 tp $2" env TPSHARD_TEST_SHARE_GPUS=1 timeout 120 "$BIN/tprun" "$MD" --tp $2 --device cuda logits --ids $IDS; then
      D=$(python3 -c "
import json, sys
a = json.load(open(sys.argv[1]))['logits']; b = json.load(open(sys.argv[2]))['logits']
assert len(a) == len(b), (len(a), len(b))
print(max(abs(x - y) for x, y in zip(a, b)))" "$WORK/cpu.json" "$WORK/out.txt" 2>&1)
    else
      D="tprun failed: $(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
    fi
    if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$D" 2>/dev/null; then
      result PASS "tp $2 ranks on one GPU: $1 cuda logits vs cpu tp 1" "max abs diff $D"
    else
      result FAIL "tp $2 ranks on one GPU: $1 cuda logits vs cpu tp 1" "$D"
    fi
  done
fi

# Pipeline stages and replicas with their ranks on one GPU (TPSHARD_TEST_SHARE_GPUS=1; stage pairs and
# tp groups over the peer communicator): logits of every layout vs the CPU backend at tp 1; a batch job's
# file at each layout vs the same job at tp 1 on the GPU (greedy ids, byte-identical); a corrupted stage
# shard ends the job naming the file.
if [ -x "$BIN/tprun" ] && [ "${SHARE_GPU_CHECKS:-1}" = 1 ]; then
  FIX=$REPO/tests/fixtures
  PROMPTS=$WORK/pp_prompts.jsonl
  python3 -c "
import json
for i in range(13):
    print(json.dumps({'id': 'p%d' % i, 'prompt': 'Once upon a time ' + 'a' * (i % 5 * 6), 'max_new_tokens': 6 + i % 7}))" > "$PROMPTS"
  for fx in tiny-llama tiny-gpt-neox-par tiny-gemma2 stories260K; do
    MD=$WORK/pp_$fx
    run_logged "convert $fx --tp 1,2 --pp 1,2" "$BIN/tpshard" convert "$FIX/$fx" -o "$MD" --tp 1,2 --pp 1,2 -q ||
      { result FAIL "convert $fx --tp 1,2 --pp 1,2" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"; continue; }
    IDS=193,411,293,143,317,13,369,302,415,36,17
    "$BIN/tprun" "$MD" --tp 1 --device cpu logits --ids $IDS > "$WORK/cpu.json" 2>> "$KLOG"
    for layout in "--tp 1 --pp 2" "--tp 2 --pp 2"; do
      if run_logged "shared gpu $fx $layout logits" env TPSHARD_TEST_SHARE_GPUS=1 timeout 120 "$BIN/tprun" "$MD" $layout --device cuda logits --ids $IDS; then
        D=$(python3 -c "
import json, sys
a = json.load(open(sys.argv[1]))['logits']; b = json.load(open(sys.argv[2]))['logits']
assert len(a) == len(b), (len(a), len(b))
print(max(abs(x - y) for x, y in zip(a, b)))" "$WORK/cpu.json" "$WORK/out.txt" 2>&1)
      else
        D="tprun failed: $(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
      fi
      if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$D" 2>/dev/null; then
        result PASS "$layout on one GPU: $fx cuda logits vs cpu tp 1" "max abs diff $D"
      else
        result FAIL "$layout on one GPU: $fx cuda logits vs cpu tp 1" "$D"
      fi
    done
    [ -f "$MD/tokenizer.json" ] || continue  # the batch job needs a tokenizer (stories260K has one)
    REF=$WORK/pp_ref_$fx.jsonl
    run_logged "$fx batch job tp 1 (cuda)" timeout 120 "$BIN/tprun" "$MD" --tp 1 --device cuda --max-batch 4 generate \
      --input "$PROMPTS" --output "$REF" --batch-size 4 || { result FAIL "$fx batch job tp 1 (cuda)"; continue; }
    for layout in "--tp 1 --pp 2" "--tp 1 --dp 2" "--tp 2 --dp 2" "--tp 1 --pp 2 --dp 2"; do
      OUTF=$WORK/pp_out.jsonl
      rm -f "$OUTF"
      T0=$(date +%s.%N)
      if run_logged "$fx batch job $layout" env TPSHARD_TEST_SHARE_GPUS=1 timeout 180 "$BIN/tprun" "$MD" $layout --device cuda \
           --max-batch 4 generate --input "$PROMPTS" --output "$OUTF" --batch-size 4 && cmp -s "$REF" "$OUTF"; then
        result PASS "$layout on one GPU: $fx batch job file identical to tp 1" \
          "$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f s", b-a}'); $(grep -o 'pp_stage 0[^;]*' "$WORK/err.txt" | head -1)"
      else
        result FAIL "$layout on one GPU: $fx batch job file identical to tp 1" \
          "$(tail -2 "$WORK/err.txt" | tr '\n' ' ') $(diff <(head -c 400 "$REF") <(head -c 400 "$OUTF" 2>/dev/null) | head -4 | tr '\n' ' ')"
      fi
    done
  done
  # more ranks than GPUs (without TPSHARD_TEST_SHARE_GPUS): refused before any worker starts
  MD=$WORK/pp_stories260K
  if [ -d "$MD" ] && [ "$NGPU" -lt 4 ]; then
    run_logged "too many ranks" timeout 60 "$BIN/tprun" "$MD" --tp 2 --pp 2 --device cuda logits --ids 1,2,3
    RC=$?
    if [ $RC -ne 0 ] && grep -q "4 ranks need 4 GPUs per node, but this node has $NGPU" "$WORK/err.txt" && ! grep -q "^\[rank" "$WORK/err.txt"; then
      result PASS "tp 2 x pp 2 on $NGPU GPU(s): refused before any worker starts" "$(grep -m1 'ranks need' "$WORK/err.txt" | cut -c1-160)"
    else
      result FAIL "tp 2 x pp 2 on $NGPU GPU(s): refused before any worker starts" "exit $RC: $(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
    fi
    # the per-rank GPU memory lines of a pp 2 x dp 2 job (stage 0 holds the embedding, the last stage the head)
    run_logged "memory lines" env TPSHARD_TEST_SHARE_GPUS=1 timeout 120 "$BIN/tprun" "$MD" --tp 1 --pp 2 --dp 2 --device cuda \
      --max-batch 4 generate --input "$PROMPTS" --output "$WORK/mem.jsonl" --batch-size 4
    if [ "$(grep -c 'GPU [0-9]* memory of dp_rank' "$WORK/err.txt")" = 4 ]; then
      result PASS "pp 2 x dp 2: one GPU memory line per rank" "$(grep -m1 'memory of dp_rank 0, pp_stage 1' "$WORK/err.txt" | cut -c1-200)"
    else
      result FAIL "pp 2 x dp 2: one GPU memory line per rank" "$(grep -c 'memory of' "$WORK/err.txt") lines"
    fi
  fi
  # a stage whose shard is corrupted: the job ends with its error, naming the file, within seconds
  MD=$WORK/pp_tiny-llama
  if [ -d "$MD" ]; then
    BAD=$WORK/pp_bad
    rm -rf "$BAD"; cp -r "$MD" "$BAD"
    python3 -c "
import json, struct, sys
p = sys.argv[1]
data = bytearray(open(p, 'rb').read())
at = len(data.rstrip(b'\\0')) - 1  # the last non-zero byte: inside the last tensor (padding is zeros)
data[at] ^= 0x5a
open(p, 'wb').write(data)" "$BAD/pp2-tp1/stage1-rank0.tps"
    T0=$(date +%s)
    run_logged "corrupt stage 1" env TPSHARD_TEST_SHARE_GPUS=1 timeout 60 "$BIN/tprun" "$BAD" --tp 1 --pp 2 --device cuda logits --ids 1,2,3
    RC=$?
    DT=$(( $(date +%s) - T0 ))
    if [ $RC -ne 0 ] && [ $RC -ne 124 ] && grep -q "stage1-rank0.tps" "$WORK/err.txt"; then
      result PASS "corrupt stage 1 shard: job ends naming it" "exit $RC after ${DT} s: $(grep -m1 'stage1-rank0' "$WORK/err.txt" | cut -c1-160)"
    else
      result FAIL "corrupt stage 1 shard: job ends naming it" "exit $RC after ${DT} s: $(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
    fi
  fi
fi

# decode building blocks: GEMV vs cuBLASLt per linear layer, custom all_reduce vs NCCL (tables)
if [ "${SKIP_BENCH:-0}" != 1 ] || [ "${KERNEL_BENCH:-0}" = 1 ]; then
  if [ -x "$BIN/bench_kernels" ] && timeout 300 "$BIN/bench_kernels" > "$OUT/bench_kernels.log" 2>&1; then
    result PASS "bench_kernels" "tables in $OUT/bench_kernels.log"
    grep '^|' "$OUT/bench_kernels.log"
  else
    result FAIL "bench_kernels" "$(tail -3 "$OUT/bench_kernels.log" 2>/dev/null | tr '\n' ' ')"
  fi
fi

# generation benchmark: ours vs transformers, one table, plus the batch-1 ablations (several minutes)
if [ "${SKIP_BENCH:-0}" != 1 ] && [ -x "$BG" ]; then
  if PYTHONUNBUFFERED=1 timeout "${BENCH_GEN_TIMEOUT:-560}" python3 "$REPO/scripts/bench_generate.py" --bin "$BIN" \
       --work "$WORK/bench_gen" --ablations --memory-variants ${BENCH_GEN_ARGS:-} > "$OUT/bench_generate.log" 2>&1; then
    result PASS "scripts/bench_generate.py" "table in $OUT/bench_generate.log"
    grep '^|' "$OUT/bench_generate.log"
  else
    result FAIL "scripts/bench_generate.py" "$(tail -3 "$OUT/bench_generate.log" | tr '\n' ' ')"
  fi
  rm -rf "$WORK/bench_gen"
fi

# ============================ tprun end to end ============================
# The main job through the launcher: stories260K from BOS on the CUDA backend must print the same text as
# the CPU backend (tp 1 and 2); a TriviaQA eval at tp 2 scores all 32 questions; a killed eval resumes to
# a byte-identical predictions file (tests/eval/resume_check.sh).
if [ -x "$BIN/tprun" ] && [ -d "$MODEL" ]; then
  "$BIN/tprun" "$MODEL" --tp 1 --device cpu generate --prompt "" --max-new-tokens 150 > "$WORK/gen_cpu.txt" 2>> "$LOG"
  for TP in 1 2; do
    [ "$TP" -le "$NGPU" ] || continue
    if run_logged "generate cuda tp $TP" "$BIN/tprun" "$MODEL" --tp $TP --device cuda generate --prompt "" --max-new-tokens 150 &&
       cmp -s "$WORK/out.txt" "$WORK/gen_cpu.txt" && [ -s "$WORK/gen_cpu.txt" ]; then
      result PASS "tprun generate stories260K --device cuda --tp $TP: text identical to the CPU backend" "$(grep -m1 'tok/s' "$WORK/err.txt")"
    else
      result FAIL "tprun generate stories260K --device cuda --tp $TP" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
    fi
  done
  # kv_cache slots chosen from GPU memory when --max-batch is not given (stories260K: the cap of 256)
  if run_logged "auto max-batch" "$BIN/tprun" "$MODEL" --tp 1 --device cuda generate --prompt "" --max-new-tokens 4 &&
     grep -q "tprun: --max-batch 256 (chosen" "$WORK/err.txt"; then
    result PASS "tprun --device cuda without --max-batch: kv_cache slots chosen from GPU memory" "$(grep -m1 'chosen' "$WORK/err.txt" | cut -c1-160)"
  else
    result FAIL "tprun --device cuda without --max-batch" "$(grep -m1 'max-batch' "$WORK/err.txt") $(tail -1 "$WORK/err.txt")"
  fi
  # tprun serve on the CUDA backend (tp 1, and tp 2 as ranks sharing one GPU when there is one GPU):
  # concurrent greedy completions equal tprun generate's text, streaming, echo + logprobs
  for P in "Once upon a time" "The little dog"; do
    "$BIN/tprun" "$MODEL" --tp 1 --device cuda generate --prompt "$P" --max-new-tokens 24 --temperature 0 \
      > "$WORK/serve_expect_${#P}.txt" 2>> "$LOG"
  done
  for TP in 1 2; do
    SHARE=""; [ "$TP" -le "$NGPU" ] || SHARE="TPSHARD_TEST_SHARE_GPUS=1"
    SPORT=$((20000 + RANDOM % 20000))
    env $SHARE "$BIN/tprun" "$MODEL" --tp $TP --device cuda --max-batch 4 serve --port $SPORT --idle-exit 60 \
      > "$WORK/serve_$TP.out" 2> "$WORK/serve_$TP.err" &
    SPID=$!
    for _ in $(seq 1 100); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$SPORT/health')" 2>/dev/null && break; sleep 0.3; done
    if run_logged "serve cuda tp $TP" timeout 120 python3 "$REPO/scripts/serve_check.py" --url "http://127.0.0.1:$SPORT" --max-tokens 24 \
         --expect "Once upon a time=$WORK/serve_expect_16.txt" --expect "The little dog=$WORK/serve_expect_14.txt"; then
      result PASS "tprun serve --device cuda --tp $TP: concurrent completions == generate, stream, echo + logprobs" "$(grep -c PASS "$WORK/out.txt") checks"
    else
      result FAIL "tprun serve --device cuda --tp $TP" "$(grep -m2 FAIL "$WORK/out.txt" | tr '\n' ' ') $(tail -2 "$WORK/serve_$TP.err" | tr '\n' ' ')"
    fi
    kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
  done
  # 5-shot eval: the shots are a prefix shared by every prompt; with one kv_cache slot nothing is shared
  SP=$REPO/tests/fixtures/triviaqa/validation_sample.hf_layout.jsonl
  if run_logged "eval shared cuda" "$BIN/tprun" "$MODEL" --tp 1 --device cuda --max-batch 8 eval triviaqa --data "$SP" --shots 5 --output "$WORK/preds_shared.jsonl" &&
     run_logged "eval unshared cuda" "$BIN/tprun" "$MODEL" --tp 1 --device cuda --max-batch 1 eval triviaqa --data "$SP" --shots 5 --output "$WORK/preds_unshared.jsonl" &&
     cmp -s "$WORK/preds_shared.jsonl" "$WORK/preds_unshared.jsonl" && [ -s "$WORK/preds_shared.jsonl" ]; then
    result PASS "tprun eval --shots 5 --device cuda: shared-prefix predictions byte-identical to one slot's" "$(wc -l < "$WORK/preds_shared.jsonl") predictions"
  else
    result FAIL "tprun eval --shots 5 --device cuda, shared vs one slot" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
  fi
  if [ "$NGPU" -ge 2 ]; then
    if run_logged "eval cuda tp 2" "$BIN/tprun" "$MODEL" --tp 2 --device cuda eval triviaqa \
         --data "$REPO/tests/fixtures/triviaqa/validation_sample.hf_layout.jsonl" --shots 5 --output "$WORK/preds.jsonl" &&
       [ "$(wc -l < "$WORK/preds.jsonl")" = 27 ]; then  # 32 records, the first 5 are the shots
      result PASS "tprun eval triviaqa --device cuda --tp 2" "$(wc -l < "$WORK/preds.jsonl") predictions; $(grep -m1 -i 'EM' "$WORK/out.txt" "$WORK/err.txt" | head -1)"
    else
      result FAIL "tprun eval triviaqa --device cuda --tp 2" "$(tail -2 "$WORK/err.txt" | tr '\n' ' ')"
    fi
    if run_logged "eval resume cuda tp 2" timeout 240 bash "$REPO/tests/eval/resume_check.sh" "$BIN/tprun" "$MODEL" cuda 2 32 10; then
      result PASS "eval killed and resumed on CUDA tp 2: predictions byte-identical" "$(tail -1 "$WORK/out.txt")"
    else
      result FAIL "eval killed and resumed on CUDA tp 2" "$(tail -2 "$WORK/out.txt" "$WORK/err.txt" | tr '\n' ' ')"
    fi
  fi
fi

# ============================ summary ============================
echo "gpu_check: $FAILED check(s) failed; log: $LOG" | tee -a "$LOG"
[ "$FAILED" = 0 ]
