#!/usr/bin/env bash
# bench_readers.sh BUILD_DIR: warm-cache load speed of tprun bench-load against the number of reader
# threads and ring buffers (tp 1, a 2.3 GiB GPT-NeoX shard), with and without the hash check.
# On the GPU machine; builds nothing; prints one line per setting.
set -uo pipefail
BUILD=$(cd "$1" && pwd); REPO=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH="$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
W=/tmp/readers; mkdir -p $W
[ -f $W/m/manifest.json ] || {
  python3 "$REPO/tools/tpshard/make_random_checkpoint.py" "$REPO/tests/fixtures/configs/redpajama-incite-7b-base.config.json" $W/hf --layers 4 --dtype fp16 >/dev/null
  "$BUILD/bin/tpshard" convert $W/hf -o $W/m --tp 1 -q --force; }
cat $W/m/tp1/*.tps > /dev/null  # warm the page cache
echo "readers ring verify load_s GB/s rss_peak_mib"
for r in 2 4 8; do for ring in 4 8; do for v in "" --no-verify; do
  line=$("$BUILD/bin/tprun" $W/m --tp 1 --device cuda bench-load --json --no-runner --repeat 2 --readers $r --ring-buffers $ring $v 2>/dev/null | grep '^{')
  python3 -c "import json,sys; j=json.loads(sys.argv[1]); print($r, '${ring}x64MiB', j['verify'], j['load_s'], j['gbps'], j['rss_peak_mib'])" "$line"
done; done; done
