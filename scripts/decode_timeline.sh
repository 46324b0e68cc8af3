#!/usr/bin/env bash
# decode_timeline.sh BUILD_DIR MODEL_DIR TP [prefill]: record the kernels of batch-1 decode steps of
# BUILD_DIR/bin/bench_generate on MODEL_DIR (a converted model) at tp TP with Nsight Systems, and print
# scripts/decode_timeline.py's breakdown (exposed time per kernel, one step kernel by kernel).
# With `prefill`: the prefill of PREFILL_BATCH (default 48) prompts of PREFILL_LEN (default 230) tokens
# instead, in the runner's default 1,024-token steps (decode_timeline.py --prefill).
# Runs on the GPU machine; builds nothing. Environment:
#   NSYS            the nsys binary (default: nsys on PATH, else the one bundled with Nsight Compute)
#   QDSTRM_IMPORTER Nsight's QdstrmImporter, when nsys leaves a .qdstrm (default: next to Nsight Compute's)
#   LIBDW_DIR       a directory with libdw.so.1 / libelf.so.1 for the importer when the machine lacks them
#   OUT             where the sqlite export and the report go (default ./decode_timeline_out)
set -euo pipefail
BUILD=${1:?usage: decode_timeline.sh BUILD_DIR MODEL_DIR TP}
MODEL=${2:?usage: decode_timeline.sh BUILD_DIR MODEL_DIR TP}
TP=${3:?usage: decode_timeline.sh BUILD_DIR MODEL_DIR TP}
MODE=${4:-decode}
OUT=${OUT:-$PWD/decode_timeline_out}
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/.." && pwd)
NSYS=${NSYS:-$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1 || true)}
[ -x "$NSYS" ] || { echo "error: no nsys found; set NSYS" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0
source "$REPO/scripts/gpu_libs.sh" "$BUILD"
[ -d "$BUILD/lib" ] && export LD_LIBRARY_PATH=$BUILD/lib:${LD_LIBRARY_PATH:-}
REP=$OUT/${MODE}_tp$TP
rm -f "$REP".*
ARGS=(--batch 1 --prompt-len 32 --new-tokens 12)
[ "$MODE" = prefill ] && ARGS=(--batch "${PREFILL_BATCH:-48}" --prompt-len "${PREFILL_LEN:-230}" --new-tokens 1)
"$NSYS" profile -o "$REP" --cuda-graph-trace=node -t cuda "$BUILD/bin/bench_generate" "$MODEL" --tp "$TP" \
  "${ARGS[@]}" --no-copy-bw > "$OUT/nsys_tp$TP.log" 2>&1
if [ ! -e "$REP.nsys-rep" ]; then  # the nsys of Nsight Compute leaves the raw stream for the importer
  IMP=${QDSTRM_IMPORTER:-$(ls "$(dirname "$(dirname "$NSYS")")"/*/QdstrmImporter 2>/dev/null | head -1 || true)}
  [ -x "$IMP" ] || { echo "error: nsys wrote $REP.qdstrm and no QdstrmImporter was found; set QDSTRM_IMPORTER" >&2; exit 1; }
  LD_LIBRARY_PATH=${LIBDW_DIR:+$LIBDW_DIR:}${LD_LIBRARY_PATH:-} "$IMP" -i "$REP.qdstrm" >> "$OUT/nsys_tp$TP.log" 2>&1
  rm -f "$REP.qdstrm"
fi
LD_LIBRARY_PATH=${LIBDW_DIR:+$LIBDW_DIR:}${LD_LIBRARY_PATH:-} "$NSYS" export --type sqlite -o "$REP.sqlite" "$REP.nsys-rep" \
  >> "$OUT/nsys_tp$TP.log" 2>&1
cat "$OUT/nsys_tp$TP.log" | grep '^{' || true
python3 "$REPO/scripts/decode_timeline.py" $([ "$MODE" = prefill ] && echo --prefill) "$REP.sqlite" | tee "$OUT/${MODE}_timeline_tp$TP.md"
