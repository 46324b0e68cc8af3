#!/usr/bin/env bash
# workloads.sh BUILD_DIR [ROW...]: the five reported workloads (docs/WORKLOADS.md), one
# scripts/seed_scenario.py command per row, tprun and Hugging Face transformers (--peer hf) in the same run.
# DEVICE=cuda (default when nvidia-smi sees a GPU) runs the shapes below; DEVICE=cpu runs them scaled down
# (2-4 layers, narrower; the CPU lines of the case below). Builds NOTHING (BUILD_DIR/bin/{tpshard,tprun}
# built elsewhere). Writes one log per row under $OUT/workloads (default ./workloads_out) and prints each
# row's table. Rows (default: all), at their GPU sizes:
#   neo27b      GPT-Neo-2.7B, fp32, full size, tp 1, 2, 5, 10
#   neox20b     GPT-NeoX-20B, fp16, NEOX_LAYERS of 44 layers (default 44), tp NEOX_TP (default 1,4)
#   internlm2   InternLM2-chat-20B shape, bf16, IL_LAYERS of 48 layers (default 48), tp IL_TP (default 1,2,4)
#   qwen72b     NVLM-D-72B's language model (Qwen2-72B shape), bf16, Q_LAYERS of 80 layers (default 10), tp 1, 2, 4, 6
#   pp          GPT-NeoX-20B shape at NEOX_LAYERS, tp 1 x pp 2
# GPU rows also compare the last-position logits of 4 prompts across tp sizes (seed_scenario.py --logits-check):
# in 16-bit, greedy texts of random weights can part at near-ties while the logits agree.
# With one GPU, tp > 1 runs its ranks on that GPU (TPSHARD_TEST_SHARE_GPUS=1, the peer communicator): memory
# per rank (bench-load) and identical outputs are meaningful there, speed is not. Checkpoints are random
# weights drawn on the GPU; converted models go to $CONVERTED_ROOT (default /dev/shm, the disk of the lent
# machines holds a 41 GB checkpoint but not its shards too); each row removes its files when done.
set -u
BUILD=$(cd "${1:?usage: scripts/workloads_gpu.sh BUILD_DIR [ROW...]}" && pwd)
shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/workloads_out}
mkdir -p "$OUT/workloads"
WORK=${WORK:-/tmp/tpshard_workloads}
CONVERTED_ROOT=${CONVERTED_ROOT:-/dev/shm}
export NCCL_NVLS_ENABLE=0
[ -x "$(command -v nvidia-smi)" ] && source "$REPO/scripts/gpu_libs.sh" "$BUILD"
NGPU=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
DEVICE=${DEVICE:-$([ "$NGPU" -gt 0 ] && echo cuda || echo cpu)}
[ "$DEVICE" = cuda ] && [ "$NGPU" -lt 10 ] && export TPSHARD_TEST_SHARE_GPUS=1
# CPU: threads per rank (the machine's cores are shared by the ranks: tprun divides them itself when 0)
CPU_ARGS=()
[ "$DEVICE" = cpu ] && [ -n "${THREADS:-}" ] && CPU_ARGS=(--threads "$THREADS")
ROWS=("$@")
[ ${#ROWS[@]} -gt 0 ] || ROWS=(neo27b neox20b internlm2 qwen72b pp)

row() {  # row NAME SEED_SCENARIO_ARGS...
  local name=$1; shift
  local dir=$WORK/$name conv=$CONVERTED_ROOT/tpshard_$name
  echo "=== $name: seed_scenario.py $* ($(date -u +%FT%TZ), $DEVICE, $NGPU GPU(s), share=${TPSHARD_TEST_SHARE_GPUS:-0})" | tee "$OUT/workloads/$name.txt"
  python3 "$REPO/scripts/seed_scenario.py" "$@" ${CPU_ARGS[@]+"${CPU_ARGS[@]}"} --device "$DEVICE" --batch 48 --new-tokens 10 --peer hf \
    --workdir "$dir" --converted "$conv" --tpshard "$BUILD/bin/tpshard" --tprun "$BUILD/bin/tprun" \
    >> "$OUT/workloads/$name.txt" 2>&1
  echo "--- exit $? ($(date -u +%FT%TZ))" >> "$OUT/workloads/$name.txt"
  sed -n '/^shape:/,$p' "$OUT/workloads/$name.txt"
  rm -rf "$dir" "$conv"
}

for r in "${ROWS[@]}"; do
  if [ "$DEVICE" = cpu ]; then
    case $r in
      neo27b) row neo27b --shape gptneo27b --scale-layers 4 --hidden 320 --intermediate 1280 --tp 1,2,4,5,10 ;;
      neox20b) row neox20b --shape neox20b --scale-layers 2 --scale-width 12 --tp 1,2,4 ;;
      internlm2) row internlm2 --shape internlm2-20b --scale-layers 2 --hidden 512 --heads 16 --kv-heads 4 --intermediate 1344 --vocab 32000 --tp 1,2,4 ;;
      qwen72b) row qwen72b --shape qwen2-72b --scale-layers 2 --hidden 1024 --heads 64 --kv-heads 8 --intermediate 3696 --vocab 32000 --tp 1,2,4,6 ;;
      pp) row pp --shape neox20b --scale-layers 4 --scale-width 12 --tp 1 --pp 2 ;;
      *) echo "unknown row $r (neo27b neox20b internlm2 qwen72b pp)" >&2; exit 2 ;;
    esac
    continue
  fi
  case $r in
    neo27b) row neo27b --shape gptneo27b --tp 1,2,5,10 --logits-check 4 ;;
    neox20b) row neox20b --shape neox20b --scale-layers "${NEOX_LAYERS:-44}" --tp "${NEOX_TP:-1,4}" --logits-check 4 ;;
    internlm2) row internlm2 --shape internlm2-20b --scale-layers "${IL_LAYERS:-48}" --tp "${IL_TP:-1,2,4}" --logits-check 4 ;;
    qwen72b) row qwen72b --shape qwen2-72b --scale-layers "${Q_LAYERS:-10}" --tp 1,2,4,6 --logits-check 4 ;;
    pp) row pp --shape neox20b --scale-layers "${NEOX_LAYERS:-44}" --tp 1 --pp 2 ;;
    *) echo "unknown row $r (neo27b neox20b internlm2 qwen72b pp)" >&2; exit 2 ;;
  esac
done
