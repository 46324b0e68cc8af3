#!/usr/bin/env bash
# diag_rss.sh BUILD_DIR: on the GPU machine, measure tprun bench-load's host peak RSS at tp 1 in several
# modes, to find why the single-process tp 1 run keeps about the shard's size in host memory (see
# docs/WORKLOADS.md). Builds nothing; writes $OUT/diag_rss.log.
set -uo pipefail
BUILD=$(cd "$1" && pwd); REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD}; export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH="$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
W=/tmp/diag; mkdir -p $W
python3 "$REPO/tools/tpshard/make_random_checkpoint.py" "$REPO/tests/fixtures/configs/redpajama-incite-7b-base.config.json" $W/hf --layers 4 --dtype fp16 >/dev/null
"$BUILD/bin/tpshard" convert $W/hf -o $W/m --tp 1,2 -q --force
B="$BUILD/bin/tprun $W/m --max-batch 8 --max-seq-len 512"
run() { echo "== $1"; shift; "$@" 2>&1 | grep -E "rss|error" | head -4; }
run "tp1 default" $B --tp 1 --device cuda bench-load --json
run "tp1 no-runner" $B --tp 1 --device cuda bench-load --json --no-runner
run "tp1 no-verify" $B --tp 1 --device cuda bench-load --json --no-verify --no-runner
run "tp1 direct-io" $B --tp 1 --device cuda bench-load --json --direct-io --no-runner
run "tp1 as worker (TPRUN env, world 1)" env TPRUN_RANK=0 TPRUN_LOCAL_RANK=0 TPRUN_WORLD_SIZE=1 TPRUN_LOCAL_WORLD_SIZE=1 TPRUN_MASTER=127.0.0.1:29533 $B --tp 1 --device cuda bench-load --json --no-runner
run "tp1 one visible GPU" env CUDA_VISIBLE_DEVICES=0 $B --tp 1 --device cuda bench-load --json --no-runner
run "tp2" $B --tp 2 --device cuda bench-load --json --no-runner
