bash scripts/unpack_gpu_bins.sh .gpu build-dev >/dev/null
source scripts/gpu_libs.sh build-dev >/dev/null 2>&1
nproc > $OUT/nproc.txt
timeout 420 python3 scripts/bench_load.py --bin build-dev/bin --repeat 3 --llama-layers 32 --models llama-7b > $OUT/bench_load.log 2> $OUT/bench_load.err
M=/tmp/tpshard_bench/llama-7b-tps
for r in 1 2 4 8 16 32; do
  echo "== readers $r" >> $OUT/ablation.log
  timeout 60 build-dev/bin/tprun $M --tp 1 --device cuda bench-load --no-runner --repeat 3 --readers $r >> $OUT/ablation.log 2>&1
done
for mib in 2 4 16; do
  echo "== ring-mib $mib" >> $OUT/ablation.log
  timeout 60 build-dev/bin/tprun $M --tp 1 --device cuda bench-load --no-runner --repeat 3 --ring-mib $mib >> $OUT/ablation.log 2>&1
done
echo "== no verify" >> $OUT/ablation.log
timeout 60 build-dev/bin/tprun $M --tp 1 --device cuda bench-load --no-runner --repeat 3 --no-verify >> $OUT/ablation.log 2>&1
tail -30 $OUT/bench_load.log
grep -A2 "^==\|rank " $OUT/ablation.log | grep -v "^--" | head -60
