#!/usr/bin/env bash
# resume_check.sh: kill a real `tprun eval triviaqa` job (SIGKILL to its whole process group, workers
# included) part-way, resume it, and check the final predictions file is byte-identical to an
# uninterrupted run's. Manual check for the CUDA backend (one process per GPU); the CPU path is covered
# by test_eval. Usage: resume_check.sh TPRUN MODEL_DIR DEVICE TP [KILL_AT_LINES] [COPIES]
# The job is killed as soon as its output holds KILL_AT_LINES lines (default 32).
set -euo pipefail
tprun=$1 model=$2 device=$3 tp=$4 kill_at=${5:-32} copies=${6:-40}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A larger question set: COPIES copies of the 32 sample questions, ids made unique.
for c in $(seq 1 "$copies"); do
  sed "s/\"question_id\": \"lf_\([0-9]*\)\"/\"question_id\": \"c${c}_\1\"/" \
    "$here/../fixtures/triviaqa/validation_sample.hf_layout.jsonl"
done > "$work/data.jsonl"
run() {
  "$tprun" "$model" --tp "$tp" --device "$device" --max-batch 16 --max-seq-len 512 eval triviaqa \
    --data "$work/data.jsonl" --shots 5 --batch-size 16 --progress-interval 1 --output "$1"
}
run "$work/full.jsonl" > "$work/full.log" 2>&1
setsid bash -c "$(declare -f run); tprun='$tprun' model='$model' tp='$tp' device='$device' work='$work' run '$work/killed.jsonl'" \
  > "$work/killed.log" 2>&1 &
pid=$!
touch "$work/killed.jsonl"
while kill -0 "$pid" 2>/dev/null && [ "$(wc -l < "$work/killed.jsonl")" -lt "$kill_at" ]; do sleep 0.02; done
kill -9 -- "-$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
before=$(wc -l < "$work/killed.jsonl" || echo 0)
printf '{"id": "c1_00' >> "$work/killed.jsonl"  # and a torn line, as a write cut short would leave
run "$work/killed.jsonl" > "$work/resumed.log" 2>&1
echo "lines before resume: $before of $(wc -l < "$work/full.jsonl")"
tail -n 3 "$work/resumed.log"
if cmp "$work/full.jsonl" "$work/killed.jsonl"; then echo "resume_check: IDENTICAL"; else echo "resume_check: DIFFERENT"; exit 1; fi
