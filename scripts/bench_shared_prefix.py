#!/usr/bin/env python3
"""bench_shared_prefix.py: few-shot eval throughput with the shared-prefix prefill on and off.

CPU mode (--model): runs `tprun MODEL eval triviaqa --shots K` twice per round on the same machine and
build: once as is (the few-shot examples, common to every prompt, are prefilled once and read by all
sequences of a batch) and once with TPSHARD_NO_SHARED_PREFIX=1 (every prompt prefilled whole, each in
its own slot), same --max-batch and threads. Prints one markdown table (median of the rounds) and
checks that both modes wrote byte-identical predictions.

    python3 scripts/bench_shared_prefix.py --tprun build/bin/tprun --model MODEL_DIR --device cpu \\
        --data tests/fixtures/triviaqa/validation_sample.hf_layout.jsonl --shots 5 --max-batch 48

GPU mode (--gpu-models, on the GPU machine: torch + transformers, no network needed): for each model
shape (pythia-1.4b: GPT-NeoX fp16, the gpt-neox-20b tokenizer; llama-7b: Llama-2-7B bf16, the llama2
tokenizer; random weights drawn with scripts/bench_load.py's make_checkpoint), converts at tp 1 and
runs TriviaQA 5-shot with fixed shots: the 32 sample questions repeated to --repeat x 32 (960), the
shots from a separate file (the first 5 records), --batch-size 48, 10 new tokens, in one run:
  tprun --device cuda eval (default: shared prefill, each row reads the prefix in decode);
  the same with TPSHARD_CASCADE_ATTENTION=1 (the prefix read once per block of rows in decode);
  the same with TPSHARD_NO_SHARED_PREFIX=1 (every prompt prefilled whole);
  transformers generate on the same token ids (batches of 48 in tprun's order, left-padded, greedy,
  max_new_tokens 10, no stop string), prefill time = until the first token.
Prints one markdown table per run (questions/s, prefill and decode seconds, speedups).

    python3 scripts/bench_shared_prefix.py --gpu-models pythia-1.4b,llama-7b --bin build/bin --work /tmp/bsp
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
    ap.add_argument("--tprun", help="CPU mode: the tprun binary")
    ap.add_argument("--model", help="CPU mode: the converted model")
    ap.add_argument("--gpu-models", help="GPU mode: comma-separated shapes (pythia-1.4b, llama-7b)")
    ap.add_argument("--bin", default="build/bin", help="GPU mode: directory of tpshard and tprun")
    ap.add_argument("--work", default="/tmp/tpshard_bench_shared_prefix", help="GPU mode: scratch directory")
    ap.add_argument("--repeat", type=int, default=30, help="GPU mode: copies of the 32 sample questions")
    ap.add_argument("--llama-layers", type=int, default=32, help="GPU mode: layers of the llama-7b shape")
    ap.add_argument("--no-hf", action="store_true", help="GPU mode: skip the transformers peer")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads per rank (0: tprun's default)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--max-batch", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if args.gpu_models:
        return gpu_main(args)
    if not args.tprun or not args.model:
        ap.error("CPU mode needs --tprun and --model (or --gpu-models for the GPU mode)")
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


# ---- GPU mode ------------------------------------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "tests", "fixtures", "triviaqa", "validation_sample.hf_layout.jsonl")
TOKENIZERS = {"pythia-1.4b": ["gpt-neox-20b/tokenizer.json"],
              "llama-7b": ["llama2/tokenizer.json", "llama2/tokenizer.model"]}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def prepare_model(args, kind):
    """Random-weight HF checkpoint (with the real tokenizer) converted at tp 1; returns (hf_dir, model_dir)."""
    import shutil
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_load import make_checkpoint
    hf = os.path.join(args.work, kind + "-hf")
    out = os.path.join(args.work, kind)
    if not os.path.exists(os.path.join(out, "manifest.json")):
        t0 = time.monotonic()
        shutil.rmtree(hf, ignore_errors=True)
        make_checkpoint(kind, hf, args.llama_layers)
        for f in TOKENIZERS[kind]:
            shutil.copy(os.path.join(REPO, "tests", "fixtures", "tokenizers", f), hf)
        log(f"{kind}: random checkpoint in {time.monotonic() - t0:.0f} s")
        t0 = time.monotonic()
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([os.path.join(args.bin, "tpshard"), "convert", hf, "-o", out, "--tp", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        log(f"{kind}: converted in {time.monotonic() - t0:.0f} s")
    return hf, out


def write_data(args):
    """The sample questions repeated (ids made unique) and a separate shots file (the first 5 records)."""
    import json
    with open(SAMPLE) as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    data = os.path.join(args.work, f"questions_{args.repeat}x.jsonl")
    shots = os.path.join(args.work, "shots.jsonl")
    with open(data, "w") as fh:
        for k in range(args.repeat):
            for r in recs:
                fh.write(json.dumps(dict(r, question_id=f"{r['question_id']}-{k}")) + "\n")
    with open(shots, "w") as fh:
        for r in recs[:args.shots]:
            fh.write(json.dumps(r) + "\n")
    prefix = "".join(f"Question: {r['question']}\nAnswer: {r['answer']['value']}\n\n" for r in recs[:args.shots])
    prompts = [prefix + f"Question: {r['question']}\nAnswer:" for _ in range(args.repeat) for r in recs]
    return data, shots, prompts


def tprun_eval(args, model, data, shots, env_extra, tag):
    import json
    env = dict(os.environ, **env_extra)
    out = os.path.join(args.work, f"preds_{tag}.jsonl")
    summary = os.path.join(args.work, f"summary_{tag}.json")
    for f in (out, summary):
        if os.path.exists(f):
            os.remove(f)
    # one slot more than the batch: a group's shared prefix occupies a kv_cache slot while it runs
    cmd = [os.path.join(args.bin, "tprun"), model, "--tp", "1", "--device", "cuda", "--max-batch",
           str(args.max_batch + 1), "--max-seq-len", "512", "eval", "triviaqa", "--data", data, "--shots-from", shots,
           "--shots", str(args.shots), "--batch-size", str(args.max_batch), "--max-new-tokens", "10",
           "--output", out, "--summary", summary]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_shared_prefix: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    log(p.stdout.strip())
    with open(summary) as fh:
        s = json.load(fh)
    with open(out) as fh:
        preds = [json.loads(line) for line in fh if line.strip()]
    s["wall_process_s"] = time.monotonic() - t0
    s["preds"] = {p["id"]: p for p in preds}
    return s


def hf_generate(args, hf_dir, prompts, kind):
    """transformers generate, batched (tprun's order: sorted by token ids), left-padded, greedy, 10 new tokens."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, StoppingCriteria, StoppingCriteriaList
    tok = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    ids = [tok.encode(p).ids for p in prompts]
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    dtype = torch.float16 if kind == "pythia-1.4b" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype, device_map="cuda")
    model.eval()
    pad = 0

    class FirstToken(StoppingCriteria):  # called once per generated token: the first call ends prefill
        def __init__(self):
            self.t = None

        def __call__(self, input_ids, scores, **kw):
            if self.t is None:
                torch.cuda.synchronize()
                self.t = time.monotonic()
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def batches():
        for b in range(0, len(order), args.max_batch):
            rows = [ids[i] for i in order[b:b + args.max_batch]]
            width = max(len(r) for r in rows)
            x = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device="cuda")
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device="cuda")
            yield x, mask

    def run(x, mask):
        first = FirstToken()
        torch.cuda.synchronize()
        t0 = time.monotonic()
        out = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=pad,
                             stopping_criteria=StoppingCriteriaList([first]))
        torch.cuda.synchronize()
        t1 = time.monotonic()
        return first.t - t0, t1 - first.t, out.shape[1] - x.shape[1]

    with torch.inference_mode():
        x, mask = next(batches())
        run(x, mask)  # warm-up (kernels, allocator)
        prefill = decode = 0.0
        new_tokens = 0
        t0 = time.monotonic()
        for x, mask in batches():
            p, d, n = run(x, mask)
            prefill += p
            decode += d
            new_tokens += n * x.shape[0]
        total = time.monotonic() - t0
    del model
    torch.cuda.empty_cache()
    return {"generate_s": total, "prefill_s": prefill, "decode_s": decode, "prompt_tokens": sum(len(i) for i in ids),
            "new_tokens": new_tokens, "prompts_per_s": len(ids) / total}


def gpu_main(args):
    import torch
    os.makedirs(args.work, exist_ok=True)
    data, shots, prompts = write_data(args)
    dev = torch.cuda.get_device_name(0)
    ok = True
    for kind in args.gpu_models.split(","):
        if kind not in TOKENIZERS:
            sys.exit(f"bench_shared_prefix: unknown model shape {kind} (pythia-1.4b, llama-7b)")
        hf, model = prepare_model(args, kind)
        runs = [("shared prefix (default)", {}, "nocascade"),
                ("shared prefix + cascade decode attention, TPSHARD_CASCADE_ATTENTION=1", {"TPSHARD_CASCADE_ATTENTION": "1"},
                 "cascade"),
                ("each prompt whole, TPSHARD_NO_SHARED_PREFIX=1", {"TPSHARD_NO_SHARED_PREFIX": "1"}, "unshared")]
        res = [(label, tprun_eval(args, model, data, shots, env, tag)) for label, env, tag in runs]
        hf_res = None if args.no_hf else hf_generate(args, hf, prompts, kind)
        n = res[0][1]["generated"]
        base = {tag: r for (_, env, tag), (_, r) in zip(runs, res)}
        layers = 24 if kind == "pythia-1.4b" else args.llama_layers
        print(f"\n{kind} (random weights, {layers} layers), tp 1, {dev}: TriviaQA {args.shots}-shot, fixed shots (--shots-from), {n} questions, "
              f"batch {args.max_batch}, 10 new tokens")
        print("| run | questions/s | generate s | prefill s | decode s | prefill tokens | decode tokens | "
              "vs unshared | vs HF |")
        print("|---|---|---|---|---|---|---|---|---|")
        hf_qps = hf_res["prompts_per_s"] if hf_res else 0
        for label, r in res:
            qps = r["prompts_per_s"]
            print(f"| tprun: {label} | {qps:.1f} | {r['generate_s']:.2f} | {r['prefill_s']:.2f} | {r['decode_s']:.2f} | "
                  f"{r['prefill_tokens']} | {r['decode_tokens']} | {qps / base['unshared']['prompts_per_s']:.2f}x | "
                  + (f"{qps / hf_qps:.2f}x |" if hf_qps else "- |"))
        if hf_res:
            print(f"| transformers generate (batched, left-padded, greedy) | {hf_qps:.1f} | {hf_res['generate_s']:.2f} | "
                  f"{hf_res['prefill_s']:.2f} | {hf_res['decode_s']:.2f} | {hf_res['prompt_tokens']} (+ padding) | "
                  f"{hf_res['new_tokens']} | {hf_qps / base['unshared']['prompts_per_s']:.2f}x | 1.00x |")
        ref = base["unshared"]["preds"]
        for tag in ("cascade", "nocascade"):
            same = sum(1 for k, p in base[tag]["preds"].items() if ref.get(k, {}).get("output") == p["output"])
            print(f"{tag}: {same}/{len(ref)} outputs identical to the unshared run's (random weights: near-ties "
                  f"may flip under another rounding)")
        prompt_tokens = {p["id"]: p["prompt_tokens"] for p in ref.values()}
        if hf_res and sum(prompt_tokens.values()) != hf_res["prompt_tokens"]:
            print(f"WARNING: transformers tokenized {hf_res['prompt_tokens']} prompt tokens, tprun "
                  f"{sum(prompt_tokens.values())}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
