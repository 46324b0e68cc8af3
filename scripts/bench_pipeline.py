#!/usr/bin/env python3
# bench_pipeline.py: pipeline stages and data-parallel replicas measured on one batch job, one table.
# Owns: making a random-weight checkpoint of a seed shape (scripts/seed_scenario.py's maker), converting it
# at every (pp, tp) the layouts need, reading each pipeline layout's stage bytes from `tpshard inspect`,
# running `tprun generate --input` (TriviaQA-shaped 5-shot prompts) per layout, and printing wall time,
# throughput against the first layout, each stage's measured wait (the pipeline bubble: tprun's
# "pp_stage S ... waiting for other stages" lines) and whether the outputs equal the first layout's.
# Does not own: any C++ (it only calls the tpshard and tprun binaries). See docs/PARALLEL.md.
"""Example (CPU, scaled GPT-NeoX-20B):
  python3 scripts/bench_pipeline.py --shape neox20b --scale-layers 8 --scale-width 12 \
      --layouts 1x1x1,1x2x1:1,1x2x1,1x4x1,1x1x2 --prompts 48 --new-tokens 10 \
      --workdir /tmp/bench-pp --tpshard build/bin/tpshard --tprun build/bin/tprun
A layout is TPxPPxDP, optionally :M for --micro-batches M (default: tprun's, 2 x pp).
Exit status 0 when every layout ran, gave the first layout's outputs, and every pipeline layout's
stages are within 2% of total/pp in bytes; 1 otherwise.
"""
import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import seed_scenario as ss  # noqa: E402  (the shapes and the checkpoint maker)


def parse_layout(text):
    spec, _, mb = text.partition(":")
    tp, pp, dp = (int(x) for x in spec.split("x"))
    return {"tp": tp, "pp": pp, "dp": dp, "mb": int(mb) if mb else 0, "name": text}


def stage_bytes(args, model):
    """{(pp, tp): (list of stage byte strings, heaviest-over-mean %)} from tpshard inspect."""
    out = subprocess.run([args.tpshard, "inspect", str(model)], check=True, capture_output=True, text=True).stdout
    res = {}
    for m in re.finditer(r"pp (\d+) x tp (\d+) stage bytes: (.*); heaviest stage (\d+) ([+-][\d.]+)% over total/pp", out):
        res[(int(m.group(1)), int(m.group(2)))] = (m.group(3), float(m.group(5)), int(m.group(4)))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="neox20b", choices=sorted(ss.SHAPES))
    ap.add_argument("--scale-layers", type=int, default=8)
    ap.add_argument("--scale-width", type=float, default=12)
    for key in ("hidden", "heads", "kv_heads", "intermediate", "vocab"):
        ap.add_argument("--" + key.replace("_", "-"), type=int, default=0)
    ap.add_argument("--layouts", default="1x1x1,1x2x1:1,1x2x1,1x1x2")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench-pp"))
    ap.add_argument("--tpshard", default="build/bin/tpshard")
    ap.add_argument("--tprun", default="build/bin/tprun")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--bytes-only", action="store_true", help="convert and report stage bytes; run nothing")
    args = ap.parse_args()
    layouts = [parse_layout(x) for x in args.layouts.split(",")]
    s = ss.scaled_shape(args)
    args.workdir.mkdir(parents=True, exist_ok=True)
    hf, model = args.workdir / "hf", args.workdir / "converted"
    ss.make_checkpoint(s, hf, args.seed)
    tps = sorted({l["tp"] for l in layouts})
    pps = sorted({l["pp"] for l in layouts} | {1})
    cmd = [args.tpshard, "convert", str(hf), "-o", str(model), "--tp", ",".join(map(str, tps)),
           "--pp", ",".join(map(str, pps)), "--force", "-q"]
    ss.log(" ".join(cmd))
    subprocess.run(cmd, check=True)
    stages = stage_bytes(args, model)
    prompts = ss.build_prompts(args.prompts)
    inp = args.workdir / "prompts.jsonl"
    with inp.open("w") as f:
        for i, p in enumerate(prompts):
            f.write(json.dumps({"id": i, "prompt": p, "max_new_tokens": args.new_tokens}) + "\n")
    rows, checks, first = [], [], None
    base_tps = None
    for l in layouts:
        if args.bytes_only:
            st = stages.get((l["pp"], l["tp"]))
            if st:
                rows.append([l["name"], "-", "-", "-", "-", "-", f"{st[0]} ({st[1]:+.2f}%)", "-"])
                checks.append((f"{l['name']}: heaviest stage {st[2]} within 2% of total/pp ({st[1]:+.3f}%)",
                               st[1] <= 2.0))
            continue
        out = args.workdir / f"out_{l['name'].replace(':', '_')}.jsonl"
        out.unlink(missing_ok=True)
        cmd = [args.tprun, str(model), "--device", "cpu", "--tp", str(l["tp"]), "--pp", str(l["pp"]), "--dp", str(l["dp"]),
               "--max-batch", str(args.prompts), "--max-seq-len", "1024"]
        if l["mb"]:
            cmd += ["--micro-batches", str(l["mb"])]
        cmd += ["generate", "--input", str(inp), "--output", str(out), "--batch-size", str(args.prompts)]
        ss.log(" ".join(cmd))
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if r.returncode != 0:
            rows.append([l["name"], "FAILED", "-", "-", "-", "-", "-"])
            checks.append((f"{l['name']}: tprun ran ({r.stderr.strip().splitlines()[-1:]})", False))
            continue
        m = re.search(r"(\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
        tok_s = float(m.group(3)) if m else 0.0
        waits = re.findall(r"pp_stage (\d+) \(layers [\d-]+\): forward ([\d.]+) s, of which waiting for other stages "
                           r"([\d.]+) s \(([\d.]+)%\)", r.stderr)
        bubble = " / ".join(f"{float(w[3]):.0f}%" for w in sorted(waits, key=lambda w: int(w[0]))) or "-"
        text = out.read_text()
        same = "-"
        if first is None:
            first, base_tps = text, tok_s
        else:
            same = "yes" if text == first else "NO"
            checks.append((f"{l['name']}: outputs identical to {layouts[0]['name']}", text == first))
        st = stages.get((l["pp"], l["tp"]))
        sb = f"{st[0]} ({st[1]:+.2f}%)" if st else "-"
        if st:
            checks.append((f"{l['name']}: heaviest stage {st[2]} within 2% of total/pp ({st[1]:+.3f}%)", st[1] <= 2.0))
        rows.append([l["name"], str(l["mb"] or (2 * l["pp"] if l["pp"] > 1 else "-")), f"{wall:.1f}", f"{tok_s:.1f}",
                     f"{tok_s / base_tps:.2f}" if base_tps else "-", bubble, sb, same])
    print(f"\nshape: {args.shape} L{s['layers']} h{s['hidden']} H{s['heads']} KV{s['kv_heads']} I{s['intermediate']} "
          f"V{s['vocab']} ({s['dtype']}), device cpu, {args.prompts} prompts x {args.new_tokens} new tokens, "
          f"one batch of {args.prompts}")
    cols = ["tp x pp x dp", "micro-batches", "wall s", "tok/s", "vs first", "stage wait (bubble)", "stage bytes",
            "same output"]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(v.rjust(w) for v, w in zip(r, widths)) + " |")
    print("\nchecks:")
    for t, ok in checks:
        print(f"  [{'PASS' if ok else 'FAIL'}] {t}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
