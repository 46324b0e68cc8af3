#!/usr/bin/env python3
"""bench_ab.py: decode speed of two builds of bench_generate on the same converted weights, in one run.

Runs ON the GPU machine (torch + transformers there). For each shape (scripts/bench_generate.py SHAPES)
it writes one random-weight checkpoint, converts it once with the B build's tpshard, then runs the A and
B builds' bench_generate alternately, `--rounds` times each, and prints ONE markdown table: median ms per
decode step of each build, B / A, and each build's min..max. Used to show that a change is speed-neutral.
Usage:
  python3 scripts/bench_ab.py --a OLD_BUILD/bin --b NEW_BUILD/bin [--shapes pythia-1.4b,llama-7b]
                              [--tp 1] [--batches 1,48] [--rounds 3] [--work /tmp/tpshard_ab]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_generate as bg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="bin directory of build A (the reference)")
    ap.add_argument("--b", required=True, help="bin directory of build B (the change)")
    ap.add_argument("--shapes", default="pythia-1.4b,llama-7b")
    ap.add_argument("--tp", default="1")
    ap.add_argument("--batches", default="1,48")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/tpshard_ab")
    args = ap.parse_args()
    tps = [int(t) for t in args.tp.split(",")]
    print("| shape | layers | tp | batch | A ms/step (median) | B ms/step (median) | B / A | A min..max | B min..max |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        layers = bg.SHAPES[shape][3]
        hf_dir = os.path.join(args.work, shape + "-hf")
        tps_dir = os.path.join(args.work, shape + "-tps")
        shutil.rmtree(args.work, ignore_errors=True)
        t0 = time.perf_counter()
        bg.make_checkpoint(shape, layers, hf_dir)
        subprocess.run([os.path.join(args.b, "tpshard"), "convert", hf_dir, "-o", tps_dir, "--tp",
                        ",".join(map(str, tps)), "-q"], check=True)
        shutil.rmtree(hf_dir)
        bg.log(f"{shape}: checkpoint + convert in {time.perf_counter() - t0:.1f} s")
        for tp in tps:
            for batch in [int(b) for b in args.batches.split(",")]:
                ms = {"A": [], "B": []}
                for _ in range(args.rounds):
                    for name, bindir in (("A", args.a), ("B", args.b)):
                        o = bg.run_ours(bindir, tps_dir, tp, batch, args.prompt_len, args.new_tokens)
                        ms[name].append(o["ms_per_step"])
                a, b = statistics.median(ms["A"]), statistics.median(ms["B"])
                print(f"| {shape} | {layers} | {tp} | {batch} | {a:.3f} | {b:.3f} | {b / a:.3f} | "
                      f"{min(ms['A']):.3f}..{max(ms['A']):.3f} | {min(ms['B']):.3f}..{max(ms['B']):.3f} |", flush=True)
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
