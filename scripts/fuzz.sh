#!/usr/bin/env bash
# fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]: build the libFuzzer targets (clang, ASan + UBSan,
# -DTPSHARD_FUZZ=ON) into BUILD_DIR (default build-fuzz), seed each target's corpus from the test
# fixtures (and a freshly converted stories260K for the manifest and shard targets), and run every
# target for SECONDS_PER_TARGET (default 10) with its dictionary (fuzz/NAME.dict for fuzz_NAME, else fuzz/json.dict). Prints one table: target,
# executions, coverage (libFuzzer's cov: edges), corpus size, findings (crash-*/leak-*/timeout-*/oom-*
# files written), slow units (slow-unit-* files: inputs that took more than 10 s without timing out;
# reported, not counted as findings: a machine starved by other jobs writes them). Exit 1 when any target
# found something. CI runs it with a few seconds per target;
# docs/FUZZING.md has the long run's table. Environment: FUZZ_PARALLEL (targets run at once, default 1),
# FUZZ_RUNS (stop a target after this many executions as well, default: time only), FUZZ_TARGETS (a
# space-separated subset of the targets, default all).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
BUILD=${2:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPSHARD_CUDA=OFF -DTPSHARD_FUZZ=ON \
  -DTPSHARD_BUILD_TESTS=OFF ${CMAKE_ARGS:-} > /dev/null
TARGETS=(fuzz_tokenizer_json fuzz_tokenizer_encode fuzz_safetensors fuzz_config fuzz_manifest fuzz_shard fuzz_jsonl fuzz_openai_api
  fuzz_torch_bin fuzz_chat_template)
[ -n "${FUZZ_TARGETS:-}" ] && read -r -a TARGETS <<< "$FUZZ_TARGETS"
T=(); for t in "${TARGETS[@]}"; do T+=(--target "$t"); done
cmake --build "$BUILD" -j "$JOBS" "${T[@]}" --target tpshard > "$BUILD/fuzz_build.log" 2>&1 ||
  { tail -30 "$BUILD/fuzz_build.log"; exit 1; }
FIX=tests/fixtures
W=$BUILD/fuzz_work
mkdir -p "$W"
seed() {  # seed TARGET FILE...: copy the seeds into the target's corpus
  local c=$W/corpus_$1; shift
  mkdir -p "$c"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$c/$(echo "$f" | tr '/' '_')"; done
  return 0
}
seed fuzz_tokenizer_json $FIX/tokenizers/*/tokenizer.json $FIX/smollm2/tokenizer.json
seed fuzz_tokenizer_encode $FIX/tokenizers/vectors/* $FIX/triviaqa/*.jsonl
seed fuzz_safetensors $FIX/tiny-llama/model.safetensors $FIX/tiny-gpt-neo/model.safetensors
seed fuzz_config $FIX/*/config.json $FIX/configs/*.json
seed fuzz_jsonl $FIX/triviaqa/*.jsonl
seed fuzz_openai_api $FIX/serve/*.json
seed fuzz_torch_bin $FIX/fuzz/torch_bin/*.bin
seed fuzz_chat_template $FIX/chat_templates/*.jinja
if [ ! -f "$W/model/manifest.json" ]; then
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/bin/tpshard" convert $FIX/tiny-llama -o "$W/model" --tp 1,3 --pp 1,2 --force -q 2>/dev/null
fi
seed fuzz_manifest "$W/model/manifest.json"
if [ ! -f "$W/model_bf16/tp3/rank2.tps" ]; then  # a bf16 shard small enough to stay whole under max_len
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/bin/tpshard" convert $FIX/tiny-llama-bf16 -o "$W/model_bf16" --tp 3 --force -q 2>/dev/null
fi
seed fuzz_shard "$W/model/tp1/rank0.tps" "$W/model/tp3/rank2.tps" "$W/model_bf16/tp3/rank2.tps"
PAR=${FUZZ_PARALLEL:-1}
RUNS=()
[ -n "${FUZZ_RUNS:-}" ] && RUNS=(-runs="$FUZZ_RUNS")
run_target() {  # run_target TARGET: one libFuzzer run into findings_TARGET, log TARGET.log
  local t=$1 dict=fuzz/json.dict max_len=65536
  [ -f "fuzz/${t#fuzz_}.dict" ] && dict=fuzz/${t#fuzz_}.dict
  [ "$t" = fuzz_chat_template ] && dict=fuzz/jinja.dict  # fuzz/NAME.dict for fuzz_NAME, jinja.dict for templates
  [ "$t" = fuzz_shard ] && max_len=262144  # a whole shard file (header, table, 4096-aligned data)
  rm -rf "$W/findings_$t"; mkdir -p "$W/findings_$t"
  (cd "$W/findings_$t" && "../../fuzz/$t" -max_total_time="$SECS" "${RUNS[@]}" -dict="../../../$dict" -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -timeout=10 -max_len="$max_len" -print_final_stats=1 "../corpus_$t" > "../$t.log" 2>&1) || true
}
for t in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$PAR" ]; do wait -n || true; done
  run_target "$t" &
done
wait
printf '| target | executions | coverage (edges) | corpus | findings | slow units |\n|---|---|---|---|---|---|\n'
found=0
for t in "${TARGETS[@]}"; do
  log=$W/$t.log
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  corpus=$(ls "$W/corpus_$t" | wc -l)
  n=$(ls "$W/findings_$t" | grep -cE '^(crash|leak|timeout|oom)-' || true)
  slow=$(ls "$W/findings_$t" | grep -c '^slow-unit-' || true)
  [ "$n" -gt 0 ] && found=$((found + n))
  printf '| %s | %s | %s | %s | %s | %s |\n' "$t" "${execs:-0}" "${cov:-0}" "$corpus" "$n" "$slow"
done
[ "$found" -eq 0 ] || { echo "fuzz.sh: $found finding(s); inputs under $W/findings_*, logs $W/*.log"; exit 1; }
