#!/usr/bin/env python3
"""bench_shared_prefix.py: few-shot eval throughput with the shared-prefix prefill on and off.

Runs `tprun MODEL eval triviaqa --shots K` twice per round on the same machine and build: once as is
(the few-shot examples, common to every prompt, are prefilled once and read by all sequences of a
batch) and once with TPSHARD_NO_SHARED_PREFIX=1 (every prompt prefilled whole, each in its own slot),
same --max-batch and threads. Prints one markdown table (median of the rounds) and checks that both
modes wrote byte-identical predictions.

    python3 scripts/bench_shared_prefix.py --tprun build/bin/tprun --model MODEL_DIR --device cpu \\
        --data tests/fixtures/triviaqa/validation_sample.hf_layout.jsonl --shots 5 --max-batch 48
"""
import argparse
import filecmp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def run(args, shared, out_path):
    env = dict(os.environ)
    env["TPSHARD_NO_SHARED_PREFIX"] = "0" if shared else "1"
    cmd = [args.tprun, args.model, "--tp", str(args.tp), "--device", args.device, "--max-batch", str(args.max_batch)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += ["eval", "triviaqa", "--data", args.data, "--shots", str(args.shots), "--output", out_path]
    if os.path.exists(out_path):
        os.remove(out_path)
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench_shared_prefix: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    m = re.search(r"triviaqa: (\d+) tokens in ([0-9.]+) s: [0-9.]+ tok/s, ([0-9.]+) prompts/s", p.stdout)
    n = re.search(r"triviaqa: n=(\d+)", p.stdout)
    if not m or not n:
        sys.exit(f"bench_shared_prefix: no summary line in the output of {' '.join(cmd)}:\n{p.stdout[-2000:]}")
    return {"generate_s": float(m.group(2)), "prompts_per_s": float(m.group(3)), "wall_s": wall, "n": int(n.group(1))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tprun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads per rank (0: tprun's default)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--max-batch", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_shared_prefix_")
    rows = {True: [], False: []}
    for _ in range(args.rounds):
        for shared in (True, False):
            rows[shared].append(run(args, shared, os.path.join(tmp, f"preds_{int(shared)}.jsonl")))
    same = filecmp.cmp(os.path.join(tmp, "preds_1.jsonl"), os.path.join(tmp, "preds_0.jsonl"), shallow=False)
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("generate_s", "prompts_per_s", "wall_s")} for k, v in rows.items()}
    print(f"model {args.model}, device {args.device}, tp {args.tp}, {rows[True][0]['n']} questions, "
          f"{args.shots}-shot, --max-batch {args.max_batch}, {args.rounds} round(s), median")
    print("| prefill | generate s | prompts/s | wall s | speedup |")
    print("|---|---|---|---|---|")
    base = med[False]["generate_s"]
    for shared in (False, True):
        r = med[shared]
        label = "shared prefix once (default)" if shared else "each prompt whole (TPSHARD_NO_SHARED_PREFIX=1)"
        print(f"| {label} | {r['generate_s']:.2f} | {r['prompts_per_s']:.2f} | {r['wall_s']:.2f} | {base / r['generate_s']:.2f}x |")
    print(f"predictions byte-identical: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
