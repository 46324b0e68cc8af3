#!/usr/bin/env bash
# quickstart.sh: set up a fresh machine and run the main job on the built-in default model
# (stories260K, a real tiny Llama trained by llama2.c, shipped in assets/stories260K):
#   1. install dependencies and build tpshard and tprun (not the tests and benchmarks);
#   2. convert the llama2.c checkpoint to a Hugging Face checkpoint (scripts/llama2c_to_hf.py);
#   3. tpshard convert --tp 1,2[,TP] (per-rank shard files + manifest);
#   4. tprun: tell a story, streamed, on the GPU when one is present, else on the CPU.
# Environment: TP (default 1), PROMPT, MAX_NEW_TOKENS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh build tpshard tprun  # only the two tools (scripts/test.sh builds the tests)
mkdir -p models
python3 scripts/llama2c_to_hf.py assets/stories260K models/stories260K-hf
TP=${TP:-1}
PROMPT=${PROMPT:-Once upon a time}
# shards for tp 1 and 2, and for $TP when it is another size (sizes that do not divide the heads are split
# unevenly; tpshard convert refuses a size above the model's head count, naming the sizes that work)
TPS=$(printf '1\n2\n%s\n' "$TP" | sort -un | paste -sd, -)
build/bin/tpshard convert models/stories260K-hf -o models/stories260K --tp "$TPS" --force
# The story is the prompt followed by the streamed continuation on stdout; tprun's status lines (stderr:
# backend, speed, or an error) are shown after it, so that they do not land in the middle of the story.
ERR=$(mktemp)
trap 'rm -f "$ERR"' EXIT
printf '%s' "$PROMPT"
status=0
build/bin/tprun models/stories260K --tp "$TP" --device auto \
  generate --prompt "$PROMPT" --max-new-tokens "${MAX_NEW_TOKENS:-200}" 2> "$ERR" || status=$?
[ "$status" -eq 0 ] || echo  # the prompt was printed without a newline; keep the error on its own line
cat "$ERR" >&2
exit "$status"
