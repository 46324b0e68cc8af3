#!/usr/bin/env python3
"""bench_generate.py: generation speed of the CUDA runner vs Hugging Face transformers, one table.

Runs ON the GPU machine (torch + transformers there; tpshard and bench_generate built elsewhere with
-DTPSHARD_CUDA=ON, see tools/bench_generate/). For each model shape:
  1. writes a random-weight checkpoint (normal * 0.02, norms 1, biases 0) of the real per-layer shapes,
     possibly with fewer layers (the table says how many of how many);
  2. times transformers (same GPU, same weights, model.generate greedy, eager attention off: sdpa,
     dynamic cache): prefill = one forward of the prompts, decode = generate time minus prefill;
  3. converts with `tpshard convert --tp 1,2` and runs `bench_generate MODEL --tp T --batch B
     --prompt-len P --new-tokens N` (one JSON line: prefill/decode tokens/s, ms per decode step,
     weight bytes per rank, effective GB/s = weight bytes per rank x decode steps/s, the device-to-device
     copy bandwidth used as the HBM roofline, peak device memory).
Prints ONE markdown table. Usage:
  python3 scripts/bench_generate.py --bin BUILD/bin [--work /tmp/tpshard_bench_gen] [--quick]
  python3 scripts/bench_generate.py --bin BUILD/bin --shapes mixtral-8x7b,dense-2x14336 --moe-layers 4
    (mixture of experts: Mixtral-8x7B's shape against the dense model of the same active size)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


SHAPES = {
    # name: (family, dtype, config kwargs, layers of the real model)
    "pythia-1.4b": ("neox", "float16", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                                             intermediate_size=8192, vocab_size=50304, rotary_pct=0.25,
                                             use_parallel_residual=True), 24),
    "llama-7b": ("llama", "bfloat16", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                            num_key_value_heads=32, intermediate_size=11008, vocab_size=32000), 32),
    "gpt-neox-20b": ("neox", "float16", dict(hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                                              intermediate_size=24576, vocab_size=50432, rotary_pct=0.25,
                                              use_parallel_residual=True), 44),
    # Mixtral-8x7B's shape (8 experts of intermediate 14336, top 2) and the dense model of the same active
    # size: Mistral-7B's attention with one MLP of intermediate 2 x 14336 (--moe; layers: --moe-layers)
    "mixtral-8x7b": ("mixtral", "bfloat16", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                                 num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
                                                 num_local_experts=8, num_experts_per_tok=2), 32),
    "dense-2x14336": ("llama", "bfloat16", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                                num_key_value_heads=8, intermediate_size=2 * 14336,
                                                vocab_size=32000), 32),
}
MOE_SHAPES = ("mixtral-8x7b", "dense-2x14336")


def mixtral_tensors(cfg, dtype, gen, device):
    """The Mixtral checkpoint layout (block_sparse_moe.gate, experts.E.w1 / w2 / w3), named directly:
    transformers 5 keeps the experts fused in memory and renames them only in save_pretrained."""
    import torch
    H, I, V, E = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_local_experts
    hd = H // cfg.num_attention_heads
    kv = cfg.num_key_value_heads * hd

    def rnd(*shape):
        return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * 0.02).to(dtype).cpu()

    t = {"model.embed_tokens.weight": rnd(V, H), "model.norm.weight": torch.ones(H, dtype=dtype),
         "lm_head.weight": rnd(V, H)}
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = torch.ones(H, dtype=dtype)
        t[p + "post_attention_layernorm.weight"] = torch.ones(H, dtype=dtype)
        t[p + "self_attn.q_proj.weight"] = rnd(H, H)
        t[p + "self_attn.k_proj.weight"] = rnd(kv, H)
        t[p + "self_attn.v_proj.weight"] = rnd(kv, H)
        t[p + "self_attn.o_proj.weight"] = rnd(H, H)
        t[p + "block_sparse_moe.gate.weight"] = rnd(E, H)
        for e in range(E):
            x = f"{p}block_sparse_moe.experts.{e}."
            t[x + "w1.weight"] = rnd(I, H)
            t[x + "w3.weight"] = rnd(I, H)
            t[x + "w2.weight"] = rnd(H, I)
    return t


def make_checkpoint(name, layers, out_dir, device="cuda"):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, GPTNeoXConfig, LlamaConfig, MixtralConfig
    family, dtype_name, kw, _ = SHAPES[name]
    dtype = getattr(torch, dtype_name)
    kw = dict(kw, num_hidden_layers=layers, max_position_embeddings=2048, tie_word_embeddings=False)
    if family == "neox":
        cfg = GPTNeoXConfig(hidden_act="gelu", partial_rotary_factor=kw["rotary_pct"], **kw)
    elif family == "mixtral":
        cfg = MixtralConfig(rms_norm_eps=1e-5, **kw)
    else:
        cfg = LlamaConfig(rms_norm_eps=1e-5, **kw)
    cfg.architectures = [type(cfg).__name__.replace("Config", "ForCausalLM")]
    for attr in ("dtype", "torch_dtype"):
        try:
            setattr(cfg, attr, dtype)
        except Exception:
            pass
    if family == "mixtral":
        gen = torch.Generator(device=device).manual_seed(0)
        os.makedirs(out_dir, exist_ok=True)
        save_file(mixtral_tensors(cfg, dtype, gen, device), os.path.join(out_dir, "model.safetensors"),
                  metadata={"format": "pt"})
        cfg.save_pretrained(out_dir)
        return
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator(device=device).manual_seed(0)
    tensors = {}
    # remove_duplicate=False: every name the checkpoint needs, also when the model class ties weights
    for pname, p in model.named_parameters(remove_duplicate=False):
        if "norm" in pname and pname.endswith("weight") or "layernorm" in pname and pname.endswith("weight"):
            t = torch.ones(p.shape, dtype=dtype, device=device)
        elif pname.endswith(".bias"):
            t = torch.zeros(p.shape, dtype=dtype, device=device)
        else:
            t = (torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32) * 0.02).to(dtype)
        # GPT-NeoX checkpoints (Pythia, 20B) name the output projection embed_out; transformers 5 calls it lm_head
        if family == "neox" and pname == "lm_head.weight":
            pname = "embed_out.weight"
        tensors[pname] = t.cpu().contiguous()
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(out_dir)
    del tensors, model


def time_hf(model_dir, batch, prompt_len, new_tokens):
    """(prefill tok/s, decode tok/s, ms per decode step, peak GiB) of transformers on cuda:0."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto", device_map="cuda:0").eval()
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, prompt_len), device="cuda:0", generator=torch.Generator("cuda:0").manual_seed(1))
    mask = torch.ones_like(ids)
    kw = dict(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, attention_mask=mask, **dict(kw, max_new_tokens=2, min_new_tokens=2))  # warm-up
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(ids, attention_mask=mask)
        torch.cuda.synchronize()
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        model.generate(ids, attention_mask=mask, **kw)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30
    del model
    torch.cuda.empty_cache()
    steps = max(1, new_tokens - 1)
    decode = max(1e-9, total - prefill)
    return batch * prompt_len / prefill, batch * steps / decode, 1e3 * decode / steps, peak


def gpu_uuids():
    """{uuid: index} of the GPUs, from nvidia-smi."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout
    return {u.strip(): int(i) for i, u in (l.split(",") for l in out.splitlines() if "," in l)}


def process_mem_mib(pid, uuids):
    """{gpu index: MiB} that process `pid` holds right now (nvidia-smi --query-compute-apps: its CUDA
    context, libraries' modules and allocations; not other processes on the same GPU)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 3 and f[0] == str(pid) and f[2].isdigit():
            got[uuids.get(f[1], -1)] = int(f[2])
    return got


def run_ours(bin_dir, model_dir, tp, batch, prompt_len, new_tokens, env=None):
    """bench_generate's JSON, plus peak_proc_mib: the largest per-GPU memory of the process seen by
    polling nvidia-smi every 0.1 s while it ran."""
    cmd = [os.path.join(bin_dir, "bench_generate"), model_dir, "--tp", str(tp), "--batch", str(batch),
           "--prompt-len", str(prompt_len), "--new-tokens", str(new_tokens), "--no-copy-bw"]
    uuids = gpu_uuids()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})))
    peak = {}
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < 300:
        for g, mib in process_mem_mib(p.pid, uuids).items():
            peak[g] = max(peak.get(g, 0), mib)
        time.sleep(0.1)
    if p.poll() is None:
        p.kill()
    out, err = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-3000:]}")
    o = [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]
    o["peak_proc_mib"] = max(peak.values()) if peak else 0
    return o


def copy_gbps_torch():
    """Device-to-device copy bandwidth on cuda:0 (read + write bytes / s over a 1 GiB copy, best of 10),
    measured here rather than in bench_generate so that its 2 GiB of buffers never show in the peak."""
    import torch
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
    b = torch.empty_like(a)
    b.copy_(a)
    best = 0.0
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        best = max(best, 2.0 * a.numel() / (e0.elapsed_time(e1) / 1e3) / 1e9)
    del a, b
    torch.cuda.empty_cache()
    return best


def memory_row(shape, layers, tp, batch, plen, new, o, label=""):
    """One line of the memory table: the process peak on its busiest GPU against weights + kv_cache + 1 GiB."""
    mib = o.get("mem_mib_gpu0", {})
    w = o["weight_bytes_per_rank"] / 2**30
    kv = o.get("kv_cache_bytes", 0) / 2**30
    peak = o["peak_proc_mib"] / 1024
    if "after_comm" not in mib and "after_nccl" in mib:  # bench_generate before the communicator choice
        mib = dict(mib, after_comm=mib["after_nccl"])
    d = lambda a, b: (mib.get(a, 0) - mib.get(b, 0)) / 1024
    runner = d("after_runner", "after_comm") - kv
    ctx = peak - d("end", "after_context")  # what the process held before its first allocation: context + modules
    bound = w + kv + 1.0
    print(f"| {shape} | {layers}/{SHAPES[shape][3]} | {tp} | {batch} | {plen}+{new} | {label or 'default'} | {peak:.2f} | "
          f"{w:.2f} | {kv:.2f} | {runner:.2f} | {o.get('comm', 'nccl')} {d('after_comm', 'after_weights'):.2f} | {d('end', 'after_runner'):.2f} | "
          f"{ctx:.2f} | {peak - w - kv:.2f} | {'yes' if peak <= bound else 'NO'} |", flush=True)


MEMORY_VARIANTS = [
    ("NCCL (TPSHARD_COMM=nccl), 8 channels x 1 MiB", {"TPSHARD_COMM": "nccl", "NCCL_MAX_NCHANNELS": "8",
                                                     "NCCL_BUFFSIZE": "1048576"}),
    ("NCCL (TPSHARD_COMM=nccl), 4 channels x 1 MiB", {"TPSHARD_COMM": "nccl", "NCCL_MAX_NCHANNELS": "4",
                                                     "NCCL_BUFFSIZE": "1048576"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory holding tpshard and bench_generate")
    ap.add_argument("--work", default="/tmp/tpshard_bench_gen")
    ap.add_argument("--llama-layers", type=int, default=32, help="layers of the Llama-7B shape (real: 32)")
    ap.add_argument("--neox20b-layers", type=int, default=8, help="layers of the GPT-NeoX-20B shape (real: 44)")
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers timings")
    ap.add_argument("--shapes", default="", help="comma-separated subset of " + ",".join(SHAPES) + " (default: all)")
    ap.add_argument("--memory-variants", action="store_true",
                    help="also run the GPT-NeoX-20B rows with smaller NCCL buffer settings (memory table)")
    ap.add_argument("--ablations", action="store_true",
                    help="also time batch-1 rows with each decode optimization switched off (second table)")
    ap.add_argument("--only-ablations", default="",
                    help="comma-separated environment variables: run only the ablations that set one of them")
    ap.add_argument("--batches", default="", help="comma-separated subset of the batch sizes 1,48 (default: all)")
    ap.add_argument("--moe", action="store_true",
                    help="also time the Mixtral-8x7B shape and the dense model of the same active size "
                         "(" + ", ".join(MOE_SHAPES) + "; also selected by naming them in --shapes)")
    ap.add_argument("--moe-layers", type=int, default=4,
                    help="layers of the Mixtral-8x7B and dense-2x14336 shapes (real: 32)")
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    ngpu = torch.cuda.device_count()
    # (shape, layers, tp list, batch, prompt, new)
    rows = [
        ("pythia-1.4b", 24, [1], 1, 32, 128),
        ("pythia-1.4b", 24, [1], 48, 32, 10),
        ("pythia-1.4b", 24, [1], 48, 128, 128),
        ("llama-7b", args.llama_layers, [1, 2], 1, 32, 128),
        ("llama-7b", args.llama_layers, [1, 2], 48, 128, 128),
        ("gpt-neox-20b", args.neox20b_layers, [2], 48, 128, 128),
    ]
    if args.moe or any(m in args.shapes.split(",") for m in MOE_SHAPES):
        for shape in MOE_SHAPES:
            rows += [(shape, args.moe_layers, [1, 2], 1, 32, 128), (shape, args.moe_layers, [1, 2], 48, 128, 128)]
    if args.shapes:
        keep = set(args.shapes.split(","))
        rows = [r for r in rows if r[0] in keep]
    if args.batches:
        keep_b = {int(b) for b in args.batches.split(",")}
        rows = [r for r in rows if r[3] in keep_b]
    print("| model shape | layers | dtype | tp | batch | prompt | new | ours prefill tok/s | ours decode tok/s | "
          "ours ms/step | eff. GB/s | % of copy BW | peak GiB/GPU | weights+kv GiB/GPU | HF prefill tok/s | "
          "HF decode tok/s | HF ms/step | decode speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    made = set()
    copy_bw = copy_gbps_torch()
    results = {}
    for shape, layers, tps, batch, plen, new in rows:  # each row printed as soon as it is measured
        hf_dir = os.path.join(args.work, f"{shape}-{layers}L-hf")
        tps_dir = os.path.join(args.work, f"{shape}-{layers}L-tps")
        if shape not in made:
            for d in (hf_dir, tps_dir):
                shutil.rmtree(d, ignore_errors=True)
            t0 = time.perf_counter()
            make_checkpoint(shape, layers, hf_dir)
            tp_list = sorted({t for r in rows if r[0] == shape for t in r[2]})
            subprocess.run([os.path.join(args.bin, "tpshard"), "convert", hf_dir, "-o", tps_dir, "--tp",
                            ",".join(map(str, tp_list)), "-q"], check=True)
            log(f"{shape}: checkpoint + convert in {time.perf_counter() - t0:.1f} s")
            made.add(shape)
        hf = None
        if not args.no_hf and 1 in tps:
            try:
                hf = time_hf(hf_dir, batch, plen, new)
            except Exception as e:  # report, keep going
                log(f"transformers failed on {shape}: {e}")
        for tp in tps:
            if tp > ngpu:
                continue
            try:
                o = run_ours(args.bin, tps_dir, tp, batch, plen, new)
            except Exception as e:
                log(str(e))
                continue
            log(json.dumps(o))
            h = hf if tp == 1 else None
            hf_cols = ["n/a"] * 4 if h is None else [f"{h[0]:.0f}", f"{h[1]:.0f}", f"{h[2]:.2f}",
                                                      f"{o['decode_tok_s'] / h[1]:.1f}x"]
            print(f"| {shape} | {layers}/{SHAPES[shape][3]} | {SHAPES[shape][1]} | {tp} | {batch} | {plen} | {new} | "
                  f"{o['prefill_tok_s']:.0f} | {o['decode_tok_s']:.0f} | {o['ms_per_step']:.2f} | "
                  f"{o['effective_gbps']:.0f} | {100 * o['effective_gbps'] / copy_bw if copy_bw else 0:.0f}% | "
                  f"{o['peak_proc_mib'] / 1024:.2f} | "
                  f"{(o['weight_bytes_per_rank'] + o.get('kv_cache_bytes', 0)) / 2**30:.2f} | " + " | ".join(hf_cols) +
                  " |", flush=True)
            results[(shape, layers, tp, batch, plen, new)] = o
    print(f"\ncopy bandwidth (device-to-device, read+write): {copy_bw:.0f} GB/s; GPU: {torch.cuda.get_device_name(0)}")
    print("peak GiB/GPU: the largest memory of the bench_generate process on one GPU, polled with nvidia-smi "
          "(CUDA context and library modules included, other processes excluded)")
    print("\nMemory per GPU (GiB; GPU 0 of the process; peak = nvidia-smi per-process maximum; runner = activations "
          "+ cuBLASLt workspace + custom all_reduce staging (NCCL path); comm = the communicator's kind (local / peer / "
          "nccl) and its memory after the first collective; "
          "steps = allocated while running (graphs, lazily loaded kernels); context = CUDA context and library "
          "modules; target: peak <= weights + kv_cache + 1 GiB)\n")
    print("| model shape | layers | tp | batch | tokens | configuration | peak | weights | kv_cache | runner | comm | steps | "
          "context | peak - weights - kv | met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for key, o in results.items():
        memory_row(*key, o)
    if args.memory_variants:
        for shape, layers, tps, batch, plen, new in rows:
            if shape != "gpt-neox-20b":
                continue
            tps_dir = os.path.join(args.work, f"{shape}-{layers}L-tps")
            for tp in tps:
                if tp > ngpu:
                    continue
                for label, env in MEMORY_VARIANTS:
                    try:
                        o = run_ours(args.bin, tps_dir, tp, batch, plen, new, env)
                    except Exception as e:
                        log(str(e))
                        continue
                    memory_row(shape, layers, tp, batch, plen, new, o, label)
                    log(f"{label}: prefill {o['prefill_tok_s']:.0f} tok/s, decode {o['decode_tok_s']:.0f} tok/s")
                    print(f"|  |  |  |  |  | (speed with {label}: prefill {o['prefill_tok_s']:.0f} tok/s, decode "
                          f"{o['decode_tok_s']:.0f} tok/s) |  |  |  |  |  |  |  |  |  |", flush=True)
    if args.ablations:
        ablations(args, rows, results, copy_bw, ngpu)


# (label, environment, smallest tp it applies to): the runtime switches of docs/TUNING.md. Variants
# whose verdict is final (GEMV tunings, the tiled decode attention) are timed by bench_kernels instead.
# Each entry here costs a full model run on the GPU machine.
ABLATIONS = [
    ("all on", {}, 1),
    ("no decode lookahead (host round trip between steps)", {"TPSHARD_NO_LOOKAHEAD": "1"}, 1),
    ("no programmatic dependent launch", {"TPSHARD_NO_PDL": "1"}, 1),
    ("no CUDA graphs (eager decode steps)", {"TPSHARD_NO_CUDA_GRAPHS": "1"}, 1),
    ("NCCL communicator (custom all_reduce for decode only)", {"TPSHARD_COMM": "nccl"}, 2),
    ("NCCL for every all_reduce (no custom all_reduce)", {"TPSHARD_NO_CUSTOM_ALL_REDUCE": "1"}, 2),
]


def ablations(args, rows, results, copy_bw, ngpu):
    """Batch-1 rows again with one optimization off at a time: what each is worth, measured."""
    print("\n| model shape | layers | tp | batch | configuration | ms/step | decode tok/s | % of copy BW |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for shape, layers, tps, batch, plen, new in rows:
        if batch != 1:
            continue
        tps_dir = os.path.join(args.work, f"{shape}-{layers}L-tps")
        for tp in tps:
            if tp > ngpu:
                continue
            only = set(filter(None, args.only_ablations.split(",")))
            for name, env, min_tp in ABLATIONS:
                if tp < min_tp or (only and env and not only & set(env)):
                    continue
                try:
                    o = results.get((shape, layers, tp, batch, plen, new)) if not env else \
                        run_ours(args.bin, tps_dir, tp, batch, plen, new, env)
                except Exception as e:
                    log(str(e))
                    continue
                if o is None:
                    continue
                print(f"| {shape} | {layers}/{SHAPES[shape][3]} | {tp} | {batch} | {name} | {o['ms_per_step']:.3f} | "
                      f"{o['decode_tok_s']:.0f} | {100 * o['effective_gbps'] / copy_bw if copy_bw else 0:.0f}% |",
                      flush=True)

if __name__ == "__main__":
    main()
