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
}


def make_checkpoint(name, layers, out_dir, device="cuda"):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, GPTNeoXConfig, LlamaConfig
    family, dtype_name, kw, _ = SHAPES[name]
    dtype = getattr(torch, dtype_name)
    kw = dict(kw, num_hidden_layers=layers, max_position_embeddings=2048, tie_word_embeddings=False)
    if family == "neox":
        cfg = GPTNeoXConfig(hidden_act="gelu", partial_rotary_factor=kw["rotary_pct"], **kw)
    else:
        cfg = LlamaConfig(rms_norm_eps=1e-5, **kw)
    cfg.architectures = [type(cfg).__name__.replace("Config", "ForCausalLM")]
    for attr in ("dtype", "torch_dtype"):
        try:
            setattr(cfg, attr, dtype)
        except Exception:
            pass
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


def run_ours(bin_dir, model_dir, tp, batch, prompt_len, new_tokens):
    cmd = [os.path.join(bin_dir, "bench_generate"), model_dir, "--tp", str(tp), "--batch", str(batch),
           "--prompt-len", str(prompt_len), "--new-tokens", str(new_tokens)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")][-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory holding tpshard and bench_generate")
    ap.add_argument("--work", default="/tmp/tpshard_bench_gen")
    ap.add_argument("--llama-layers", type=int, default=8, help="layers of the Llama-7B shape (real: 32)")
    ap.add_argument("--neox20b-layers", type=int, default=8, help="layers of the GPT-NeoX-20B shape (real: 44)")
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers timings")
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
    print("| model shape | layers | dtype | tp | batch | prompt | new | ours prefill tok/s | ours decode tok/s | "
          "ours ms/step | eff. GB/s | % of copy BW | peak GiB/GPU | HF prefill tok/s | HF decode tok/s | HF ms/step | "
          "decode speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    made = set()
    copy_bw = 0
    for shape, layers, tps, batch, plen, new in rows:  # each row printed as soon as it is measured
        hf_dir = os.path.join(args.work, f"{shape}-{layers}L-hf")
        tps_dir = os.path.join(args.work, f"{shape}-{layers}L-tps")
        if shape not in made:
            for d in (hf_dir, tps_dir):
                shutil.rmtree(d, ignore_errors=True)
            t0 = time.perf_counter()
            make_checkpoint(shape, layers, hf_dir)
            subprocess.run([os.path.join(args.bin, "tpshard"), "convert", hf_dir, "-o", tps_dir, "--tp", "1,2", "-q"],
                           check=True)
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
            copy_bw = o.get("copy_gbps") or copy_bw
            h = hf if tp == 1 else None
            hf_cols = ["n/a"] * 4 if h is None else [f"{h[0]:.0f}", f"{h[1]:.0f}", f"{h[2]:.2f}",
                                                      f"{o['decode_tok_s'] / h[1]:.1f}x"]
            print(f"| {shape} | {layers}/{SHAPES[shape][3]} | {SHAPES[shape][1]} | {tp} | {batch} | {plen} | {new} | "
                  f"{o['prefill_tok_s']:.0f} | {o['decode_tok_s']:.0f} | {o['ms_per_step']:.2f} | "
                  f"{o['effective_gbps']:.0f} | {100 * o['effective_gbps'] / copy_bw if copy_bw else 0:.0f}% | "
                  f"{o['peak_mem_gib']:.1f} | " + " | ".join(hf_cols) + " |", flush=True)
    print(f"\ncopy bandwidth (device-to-device, read+write): {copy_bw:.0f} GB/s; GPU: {torch.cuda.get_device_name(0)}")

if __name__ == "__main__":
    main()
