#!/usr/bin/env python3
# seed_scenario.py: the reported workloads' shapes (GPT-NeoX-20B, a Llama-70B-class shape, GPT-Neo-2.7B,
# the Qwen2-72B language model of NVLM-D-72B), optionally scaled down in layers and width so they run on
# CPUs or a small GPU box.
# Owns: making a random-weight HF checkpoint of the shape, converting it, building 48 TriviaQA-shaped
# 5-shot prompts, running `tprun generate` per tp size, and printing ONE table with the checks.
# Does not own: any C++ (it only calls the `tpshard` and `tprun` binaries). See docs/WORKLOADS.md (scripts/workloads.sh runs its rows).
"""Run a seed scenario and print one table.

Example (CPU, scaled):
  python3 scripts/seed_scenario.py --shape neox20b --scale-layers 2 --scale-width 12
      --tp 1,2,4,8 --device cpu --batch 48 --new-tokens 10 --workdir /tmp/seed-neox
      --tpshard build-rt/bin/tpshard --tprun build-rt/bin/tprun
(one command line; docs/WORKLOADS.md has the runs and their tables)

Measures per tp size: weight bytes per rank (manifest), kv_cache bytes per rank and prefill/decode
rates (tprun's summary line), peak RSS (tprun's summary line, VmHWM; on the CPU backend ranks are threads of one
process, so this is the whole process), and on --device cuda the per-GPU peak memory (nvidia-smi
sampling). Checks: every rank's weight bytes within 2% of total/tp (uneven tp included), weight bytes
per rank halving from tp N to 2N,
greedy outputs identical across tp sizes, and (cuda) peak <= weights/N + kv_cache + 1 GiB.
Exit status 0 when every check passes, 1 otherwise.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Full shapes. neox20b: EleutherAI/gpt-neox-20b config.json. llama70b: Llama-3-70B class (80 layers,
# hidden 8192, 64 heads, 8 KV heads, intermediate 28672, vocab 128256, bf16). gptneo27b: GPT-Neo-2.7B
# (32 layers alternating global / local attention with window 256, hidden 2560, 20 heads, fp32 as
# reported). qwen2-72b: NVLM-D-72B's language model (80 layers, hidden 8192, 64 heads, 8 KV heads,
# intermediate 29568, vocab 152064, bf16; the Llama 2 tokenizer stands in for its own). internlm2-20b:
# internlm2-chat-20b (48 layers, hidden 6144, 48 heads, 8 KV heads, intermediate 16384, vocab 92544, bf16,
# dynamic rope factor 2; the Llama 2 tokenizer stands in), made as a Llama and repacked into InternLM2's
# trust_remote_code layout (wqkv per KV group), as tests/fixtures/tiny-internlm2 is.
SHAPES = {
    "neox20b": dict(arch="gpt_neox", layers=44, hidden=6144, heads=64, kv_heads=64, intermediate=24576,
                    vocab=50432, dtype="float16", tokenizer="tests/fixtures/tokenizers/gpt-neox-20b"),
    "llama70b": dict(arch="llama", layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=28672,
                     vocab=128256, dtype="bfloat16", tokenizer="tests/fixtures/tokenizers/llama2"),
    "gptneo27b": dict(arch="gpt_neo", layers=32, hidden=2560, heads=20, kv_heads=20, intermediate=10240,
                      vocab=50257, dtype="float32", tokenizer="tests/fixtures/tokenizers/gpt2"),
    "qwen2-72b": dict(arch="qwen2", layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=29568,
                      vocab=152064, dtype="bfloat16", tokenizer="tests/fixtures/tokenizers/llama2"),
    "internlm2-20b": dict(arch="internlm2", layers=48, hidden=6144, heads=48, kv_heads=8, intermediate=16384,
                          vocab=92544, dtype="bfloat16", tokenizer="tests/fixtures/tokenizers/llama2"),
}
TRIVIAQA = REPO / "tests/fixtures/triviaqa/validation_sample.hf_layout.jsonl"
MIN_HEAD_DIM = 16
GIB = 1024 ** 3
MIB = 1024 ** 2


def log(msg):
    print(f"[seed] {msg}", file=sys.stderr, flush=True)


def scaled_shape(args):
    """The shape to run: the full one, divided by --scale-width, with explicit overrides last."""
    s = dict(SHAPES[args.shape])
    notes = []
    f = args.scale_width
    if f != 1:
        s["hidden"] = int(s["hidden"] / f)
        s["intermediate"] = int(s["intermediate"] / f)
        ratio = s["heads"] // s["kv_heads"]
        if s["hidden"] // s["heads"] < MIN_HEAD_DIM:
            heads = s["hidden"] // MIN_HEAD_DIM
            notes.append(f"heads scaled {s['heads']} -> {heads} to keep head_dim >= {MIN_HEAD_DIM}")
            s["heads"] = heads
        s["kv_heads"] = max(1, s["heads"] // ratio)
    if args.scale_layers:
        s["layers"] = args.scale_layers
    for key in ("hidden", "heads", "kv_heads", "intermediate", "vocab"):
        v = getattr(args, key)
        if v:
            s[key] = v
    if s["hidden"] % s["heads"] or s["heads"] % s["kv_heads"]:
        sys.exit(f"shape: hidden {s['hidden']} / heads {s['heads']} / kv_heads {s['kv_heads']} do not divide")
    if s["arch"] in ("gpt_neox", "gpt_neo"):
        s["kv_heads"] = s["heads"]
    s["notes"] = notes
    return s


def hf_config(s):
    if s["arch"] == "gpt_neox":
        from transformers import GPTNeoXConfig
        return GPTNeoXConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                             num_attention_heads=s["heads"], intermediate_size=s["intermediate"],
                             rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=2048,
                             use_parallel_residual=True, tie_word_embeddings=False, layer_norm_eps=1e-5,
                             bos_token_id=0, eos_token_id=0, dtype=s["dtype"])
    if s["arch"] == "gpt_neo":
        from transformers import GPTNeoConfig
        return GPTNeoConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], num_layers=s["layers"],
                            num_heads=s["heads"], intermediate_size=s["intermediate"],
                            attention_types=[[["global", "local"], s["layers"] // 2]], window_size=256,
                            max_position_embeddings=2048, bos_token_id=50256 % s["vocab"],
                            eos_token_id=50256 % s["vocab"], dtype=s["dtype"])
    if s["arch"] == "qwen2":
        from transformers import Qwen2Config
        return Qwen2Config(vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                           num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                           intermediate_size=s["intermediate"], max_position_embeddings=8192,
                           rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1,
                           eos_token_id=2, dtype=s["dtype"])
    from transformers import LlamaConfig
    if s["arch"] == "internlm2":  # made as this Llama, then repacked (repack_internlm2)
        return LlamaConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                           num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                           intermediate_size=s["intermediate"], max_position_embeddings=32768, rope_theta=1000000.0,
                           rms_norm_eps=1e-5, attention_bias=False, tie_word_embeddings=False, bos_token_id=1,
                           eos_token_id=2, dtype=s["dtype"])
    return LlamaConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                       num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                       intermediate_size=s["intermediate"], max_position_embeddings=8192, rope_theta=500000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                       dtype=s["dtype"])


def repack_internlm2(model, s, out: Path):
    """Writes `model` (the Llama of hf_config) into `out` in InternLM2's trust_remote_code layout:
    tok_embeddings, per layer attention.wqkv (for each KV group: its query heads, its key head, its value
    head), attention.wo, feed_forward.w1 / w3 / w2, attention_norm / ffn_norm, norm, output; safetensors
    files of at most 4 GB with model.safetensors.index.json, and an InternLM2 config.json."""
    import torch
    from safetensors.torch import save_file
    hd, group = s["hidden"] // s["heads"], s["heads"] // s["kv_heads"]
    sd = model.state_dict()

    def tensors():
        yield "model.tok_embeddings.weight", sd["model.embed_tokens.weight"]
        for l in range(s["layers"]):
            p = f"model.layers.{l}."
            q, k, v = (sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv")
            rows = []
            for g in range(s["kv_heads"]):
                rows += [q[g * group * hd:(g + 1) * group * hd], k[g * hd:(g + 1) * hd], v[g * hd:(g + 1) * hd]]
            yield p + "attention.wqkv.weight", torch.cat(rows, dim=0)
            yield p + "attention.wo.weight", sd[p + "self_attn.o_proj.weight"]
            yield p + "attention_norm.weight", sd[p + "input_layernorm.weight"]
            yield p + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"]
            for ours, theirs in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                yield p + f"feed_forward.{ours}.weight", sd[p + f"mlp.{theirs}.weight"]
        yield "model.norm.weight", sd["model.norm.weight"]
        yield "output.weight", sd["lm_head.weight"]

    out.mkdir(parents=True)
    shard, shard_bytes, files, weight_map = {}, 0, [], {}

    def flush():
        nonlocal shard, shard_bytes
        name = f"model-{len(files) + 1:05d}.safetensors"
        save_file({k: v.contiguous() for k, v in shard.items()}, out / name, metadata={"format": "pt"})
        files.append(name)
        weight_map.update({k: name for k in shard})
        shard, shard_bytes = {}, 0

    for name, t in tensors():
        if shard and shard_bytes + t.numel() * t.element_size() > 4 * 10**9:
            flush()
        shard[name] = t
        shard_bytes += t.numel() * t.element_size()
    flush()
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg = {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "bias": False,
           "hidden_size": s["hidden"], "intermediate_size": s["intermediate"], "num_attention_heads": s["heads"],
           "num_key_value_heads": s["kv_heads"], "num_hidden_layers": s["layers"], "vocab_size": s["vocab"],
           "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
           "rope_scaling": {"type": "dynamic", "factor": 2.0}, "hidden_act": "silu", "tie_word_embeddings": False,
           "torch_dtype": s["dtype"], "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))


def make_checkpoint(s, out: Path, seed: int, make_on_gpu: bool = False):
    """Random-weight HF checkpoint: meta-device init, to_empty, normal_(0, 0.02) per tensor, norms ~1."""
    import torch
    from transformers import AutoModelForCausalLM
    stamp = out / "seed_shape.json"
    key = {k: s[k] for k in ("arch", "layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "dtype")}
    key["seed"] = seed
    key["made_on"] = "cuda" if make_on_gpu else "cpu"
    if stamp.exists() and json.loads(stamp.read_text()) == key:
        log(f"checkpoint {out} already made for this shape; reusing it")
        return
    if out.exists():
        shutil.rmtree(out)
    t0 = time.time()
    dtype = getattr(torch, s["dtype"])
    cfg = hf_config(s)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    # On a GPU machine the random numbers are drawn there (minutes less for a 20B shape); the values differ
    # from a CPU-made checkpoint of the same seed, which is why the stamp records where it was made.
    dev = "cuda" if make_on_gpu else "cpu"
    model = model.to_empty(device=dev)
    model.tie_weights()  # to_empty unties: re-tie so a tied head is saved as the embedding (GPT-Neo)
    gen = torch.Generator(device=dev).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("layernorm.weight") or ".ln_" in name:
                if name.endswith("bias"):
                    p.zero_()
                else:  # norm weights near 1 so activations keep their scale
                    p.normal_(1.0, 0.05, generator=gen)
            else:
                flat = p.view(-1)
                for i in range(0, flat.numel(), 1 << 24):  # 16M-element chunks keep fp32 temporaries small
                    chunk = flat[i:i + (1 << 24)]
                    chunk.copy_(torch.empty(chunk.numel(), dtype=torch.float32, device=dev).normal_(0.0, 0.02, generator=gen))
    if s["arch"] == "internlm2":
        repack_internlm2(model, s, out)
    else:
        model.save_pretrained(out, safe_serialization=True, max_shard_size="4GB")
    tok_dir = REPO / s["tokenizer"]
    for f in ("tokenizer.json", "tokenizer.model"):
        if (tok_dir / f).exists():
            shutil.copy(tok_dir / f, out / f)
    stamp.write_text(json.dumps(key))
    n = sum(p.numel() for p in model.parameters())
    log(f"checkpoint: {n / 1e6:.1f} M parameters ({s['dtype']}, made on {dev}) in {time.time() - t0:.1f} s -> {out}")
    del model
    if make_on_gpu:
        torch.cuda.empty_cache()  # tprun and the peer run next in their own processes


def convert(args, hf: Path, out: Path, tps):
    stamp = out / "seed_convert.json"
    key = {"tp": tps, "pp": args.pp, "hf": (hf / "seed_shape.json").read_text()}
    if stamp.exists() and json.loads(stamp.read_text()) == key:
        log(f"converted model {out} is up to date; reusing it")
        return
    cmd = [args.tpshard, "convert", str(hf), "-o", str(out), "--tp", ",".join(map(str, tps)), "--force", "-q"]
    if args.pp > 1:
        cmd += ["--pp", str(args.pp)]
    log(" ".join(cmd))
    t0 = time.time()
    subprocess.run(cmd, check=True)
    stamp.write_text(json.dumps(key))
    log(f"convert: {time.time() - t0:.1f} s")


def build_prompts(n):
    """n TriviaQA-shaped prompts: 5 shots + one question, same text layout as eval/fewshot_prompt.cpp."""
    items = [json.loads(l) for l in TRIVIAQA.read_text().splitlines() if l.strip()]
    prompts = []
    for i in range(n):
        q = items[i % len(items)]
        shots = [items[(i + 1 + 3 * k) % len(items)] for k in range(5)]
        p = "".join(f"Question: {s['question']}\nAnswer: {s['answer']['value']}\n\n" for s in shots)
        prompts.append(p + f"Question: {q['question']}\nAnswer:")
    return prompts


def max_prompt_tokens(tok_dir: Path, prompts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    return max(len(e.ids) for e in tok.encode_batch(prompts)) + 1  # + BOS


class GpuMemSampler:
    """Samples nvidia-smi memory.used per GPU every 0.2 s; peak minus the idle baseline per GPU."""

    def __init__(self):
        self.base = self._read()
        self.peak = list(self.base)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def _read():
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True).stdout
        return [int(x) * MIB for x in out.split()]

    def _loop(self):
        while not self._stop.wait(0.2):
            for i, v in enumerate(self._read()):
                self.peak[i] = max(self.peak[i], v)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def peaks(self, n):
        return [p - b for p, b in zip(self.peak[:n], self.base[:n])]


SUMMARY_RE = re.compile(
    r"prefill (\d+) tok ([\d.]+) s \(([\d.]+) tok/s\) \| decode (\d+) tok ([\d.]+) s \(([\d.]+) tok/s\) \| per rank "
    r"\(tp (\d+), (\w+)\): weights ([\d.]+|n/a) ?(?:MiB)?, kv_cache ([\d.]+|n/a) ?(?:MiB)? \| peak RSS ([\d.]+) MiB")


def split_texts(stdout, n):
    """tprun generate, for several prompts, writes each text to stdout followed by a newline (the labels
    go to stderr). The n texts when that splits into exactly n lines; None when a text holds a newline
    (then only the whole stdout is compared)."""
    lines = stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines if len(lines) == n else None


def count_same(a, b, n, a_stdout=None, b_stdout=None):
    """Prompts whose texts are equal in two runs; with a run's texts unknown, n or 0 by whole-stdout equality."""
    if a is not None and b is not None:
        return sum(x == y for x, y in zip(a, b))
    return n if a_stdout is not None and a_stdout == b_stdout else 0


def run_tp(args, model: Path, tp, prompts, max_seq):
    # Peak RSS comes from tprun's summary line (VmHWM of its own image; on the CPU backend ranks are
    # threads, so it is the whole process). Not /usr/bin/time: ru_maxrss is inherited over fork/exec, so
    # a tprun started from this script (which may have just held the checkpoint in memory) would show
    # this script's peak.
    cmd = [args.tprun, str(model), "--tp", str(tp), "--pp", str(args.pp), "--device", args.device,
           "--max-batch", str(args.batch), "--max-seq-len", str(max_seq)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += ["generate", "--max-new-tokens", str(args.new_tokens), "--ignore-eos"]
    for p in prompts:
        cmd += ["--prompt", p]
    log(f"tp {tp}: {' '.join(cmd[:cmd.index('generate') + 5])} ... ({len(prompts)} prompts)")
    sampler = GpuMemSampler() if args.device == "cuda" and shutil.which("nvidia-smi") else None
    t0 = time.time()
    # stdout (the texts, each followed by a newline) and stderr (labels, summary) apart: with worker
    # processes (CUDA, tp > 1) the launcher forwards the two streams separately, so their order in one pipe
    # is not the order they were written in
    if sampler:
        with sampler:
            r = subprocess.run(cmd, capture_output=True, text=True)
    else:
        r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    (args.workdir / f"tp{tp}.out.txt").write_text(r.stdout)
    (args.workdir / f"tp{tp}.err.txt").write_text(r.stderr)
    if r.returncode != 0:
        log(f"tp {tp}: tprun failed (exit {r.returncode}); last output lines:\n" + "\n".join(r.stderr.splitlines()[-8:]))
        return {"tp": tp, "failed": True, "wall_s": wall}
    m = SUMMARY_RE.search(r.stderr)
    res = {"tp": tp, "failed": m is None, "wall_s": wall, "texts": split_texts(r.stdout, len(prompts)),
           "stdout": r.stdout}
    res["peak_rss"] = float(m.group(11)) * MIB if m else None
    if m:
        g = m.groups()
        res.update(prefill_tokens=int(g[0]), prefill_s=float(g[1]), prefill_tps=float(g[2]),
                   decode_tokens=int(g[3]), decode_s=float(g[4]), decode_tps=float(g[5]),
                   kv_cache=None if g[9] == "n/a" else float(g[9]) * MIB)
        # Everything that is not prefill or decode: manifest, tokenizer, shard loading, thread start.
        res["load_s"] = wall - res["prefill_s"] - res["decode_s"]
        res["decode_step_ms"] = 1000 * res["decode_s"] / max(1, args.new_tokens - 1)
    else:
        log(f"tp {tp}: no summary line in tprun's output (see {args.workdir}/tp{tp}.out.txt)")
    if sampler:
        res["gpu_peak"] = sampler.peaks(min(tp * args.pp, len(sampler.base)))
    return res


def run_bench_load(args, model: Path, tp, max_seq):
    """CUDA: `tprun bench-load --json`, one JSON object per rank (load_s, rss_peak_mib, weights_mib, ...)."""
    cmd = [args.tprun, str(model), "--tp", str(tp), "--pp", str(args.pp), "--device", "cuda", "--max-batch", str(args.batch),
           "--max-seq-len", str(max_seq), "bench-load", "--json"]
    log(f"tp {tp}: {' '.join(cmd)}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    (args.workdir / f"tp{tp}.bench_load.txt").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        log(f"tp {tp}: bench-load failed (exit {r.returncode}):\n" + "\n".join(r.stderr.splitlines()[-8:]))
        return None
    ranks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    return sorted(ranks, key=lambda x: x["rank"]) or None


def run_hf_peer(args, hf: Path, s, prompts):
    """The reported baseline on the same prompts: scripts/hf_peer.py in its own process (from_pretrained with
    device_map="auto" + one batched greedy generate), GPU memory sampled as for tprun."""
    pfile = args.workdir / "prompts.json"
    pfile.write_text(json.dumps(prompts))
    cmd = [sys.executable, str(REPO / "scripts/hf_peer.py"), "--model", str(hf), "--prompts", str(pfile),
           "--new-tokens", str(args.new_tokens), "--device", args.device, "--arch", s["arch"]]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    log("peer: " + " ".join(cmd))
    sampler = GpuMemSampler() if args.device == "cuda" and shutil.which("nvidia-smi") else None
    t0 = time.time()
    if sampler:
        with sampler:
            r = subprocess.run(cmd, capture_output=True, text=True)
    else:
        r = subprocess.run(cmd, capture_output=True, text=True)
    (args.workdir / "hf_peer.txt").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        log(f"peer failed (exit {r.returncode}):\n" + "\n".join(r.stderr.splitlines()[-8:]))
        return None
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["wall_s"] = time.time() - t0
    if sampler:
        res["gpu_peak"] = sampler.peaks(len(sampler.base))
    return res


def logits_of(args, model: Path, tp, prompt, max_seq):
    """`tprun logits --text PROMPT` at this tp size: the last position's logits (a list of floats)."""
    cmd = [args.tprun, str(model), "--tp", str(tp), "--pp", str(args.pp), "--device", args.device,
           "--max-batch", "1", "--max-seq-len", str(max_seq), "logits", "--text", prompt]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        log(f"tp {tp}: tprun logits failed (exit {r.returncode}):\n" + "\n".join(r.stderr.splitlines()[-5:]))
        return None
    return json.loads(r.stdout)["logits"]


def compare_logits(args, model: Path, tps, prompts, max_seq):
    """Per tp size after the first: the largest |logit difference| from the first tp size over the first
    --logits-check prompts, that size's spread (max - min) and the reference's top-1 - top-2 gaps, and how
    many top-1 tokens agree. Lines for the checks section: (text, ok); ok when every top-1 agrees wherever
    the reference's gap exceeds twice the largest difference seen."""
    ref = [logits_of(args, model, tps[0], p, max_seq) for p in prompts[:args.logits_check]]
    out = []
    for tp in tps[1:]:
        worst, spread, gaps, same, decided, decided_same = 0.0, 0.0, [], 0, 0, 0
        for p, a in zip(prompts[:args.logits_check], ref):
            b = logits_of(args, model, tp, p, max_seq)
            if a is None or b is None:
                out.append((f"tp {tp}: logits vs tp {tps[0]}: tprun logits failed", False))
                break
            diff = max(abs(x - y) for x, y in zip(a, b))
            worst = max(worst, diff)
            spread = max(spread, max(a) - min(a))
            top = sorted(range(len(a)), key=lambda i: a[i], reverse=True)[:2]
            gap = a[top[0]] - a[top[1]]
            gaps.append(gap)
            agree = top[0] == max(range(len(b)), key=lambda i: b[i])
            same += agree
            if gap > 2 * diff:
                decided += 1
                decided_same += agree
        else:
            n = len(gaps)
            out.append((f"tp {tp} vs tp {tps[0]}, last-position logits of {n} prompts: max |diff| {worst:.4g} "
                        f"(logit spread {spread:.4g}; top-1 - top-2 gaps {', '.join(f'{g:.3g}' for g in gaps)}); "
                        f"top-1 equal {same}/{n}, {decided_same}/{decided} where the gap exceeds 2 x |diff|",
                        decided_same == decided))
    return out


def fmt_mib(b):
    return "-" if b is None else f"{b / MIB:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--scale-layers", type=int, default=0, help="number of layers (default: the full shape's)")
    ap.add_argument("--scale-width", type=float, default=1.0,
                    help="divide hidden and intermediate by F; heads shrink only to keep head_dim >= 16")
    ap.add_argument("--hidden", type=int, default=0, help="override hidden_size")
    ap.add_argument("--heads", type=int, default=0, help="override num_attention_heads")
    ap.add_argument("--kv-heads", type=int, default=0, help="override num_key_value_heads (llama)")
    ap.add_argument("--intermediate", type=int, default=0, help="override intermediate_size")
    ap.add_argument("--vocab", type=int, default=0, help="override vocab_size")
    ap.add_argument("--tp", default="1,2,4,8", help="comma-separated tp sizes")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="CPU: tprun --threads (threads per rank)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--tpshard", default=str(REPO / "build-rt/bin/tpshard"))
    ap.add_argument("--tprun", default=str(REPO / "build-rt/bin/tprun"))
    ap.add_argument("--converted", type=Path, default=None,
                    help="where the converted model goes (default WORKDIR/converted; e.g. /dev/shm when the disk "
                         "cannot hold the checkpoint and its shards)")
    ap.add_argument("--pp", type=int, default=1, help="pipeline stages of every run (tp x pp ranks; on one GPU "
                    "the ranks share it and bench-load's per-rank device totals show the balance)")
    ap.add_argument("--logits-check", type=int, default=0, metavar="N",
                    help="also compare `tprun logits` of the first N prompts at every tp size with the first one "
                         "(max |difference|, top-1 agreement where the top-1 - top-2 gap is clear)")
    ap.add_argument("--peer", choices=["none", "hf"], default="none",
                    help="hf: also run Hugging Face transformers (device_map=auto, batched greedy generate) on the "
                         "same prompts and add its row (scripts/hf_peer.py)")
    args = ap.parse_args()
    tps = sorted({int(x) for x in args.tp.split(",")})
    args.workdir.mkdir(parents=True, exist_ok=True)

    s = scaled_shape(args)
    for n in s["notes"]:
        log(n)
    hf, model = args.workdir / "hf", args.converted or args.workdir / "converted"
    make_checkpoint(s, hf, args.seed, make_on_gpu=args.device == "cuda")
    convert(args, hf, model, tps)
    manifest = json.loads((model / "manifest.json").read_text())

    prompts = build_prompts(args.batch)
    max_seq = max_prompt_tokens(REPO / s["tokenizer"], prompts) + args.new_tokens
    max_seq = (max_seq + 63) // 64 * 64
    log(f"{len(prompts)} prompts, longest {max_seq - args.new_tokens} tokens or fewer; max_seq_len {max_seq}")

    results = [run_tp(args, model, tp, prompts, max_seq) for tp in tps]
    if args.device == "cuda":
        for r in results:
            r["bench"] = run_bench_load(args, model, r["tp"], max_seq)
    logit_checks = compare_logits(args, model, tps, prompts, max_seq) if args.logits_check and len(tps) > 1 else []
    peer = run_hf_peer(args, hf, s, prompts) if args.peer == "hf" else None

    # ---- the table ----
    shape = f"{args.shape} L{s['layers']} h{s['hidden']} H{s['heads']} KV{s['kv_heads']} I{s['intermediate']} V{s['vocab']}"
    print(f"\nshape: {shape} ({s['dtype']}), device {args.device}, batch {args.batch}, "
          f"new tokens {args.new_tokens} (greedy, --ignore-eos), max_seq_len {max_seq}")
    cols = ["tp", "weights/rank MiB", "rank deviation %", "kv_cache/rank MiB", "peak RSS MiB", "gpu peak MiB",
            "load s", "prefill tok/s", "decode tok/s", "ms/decode step"]
    rows, checks = [], []
    ref = next((r for r in results if not r["failed"]), None)
    cols.append(f"same as tp{ref['tp']}" if ref else "same")
    per_rank = {}

    def label(tp):
        return str(tp) if args.pp == 1 else f"{tp} x pp {args.pp}"

    for r in results:
        tp = r["tp"]
        layout = manifest["tp"][str(tp)] if args.pp == 1 else manifest["pp"][str(args.pp)][str(tp)]
        wb = [sh["weight_bytes"] for sh in layout]
        per_rank[tp] = max(wb)
        even = sum(wb) / len(wb)
        spread = 100.0 * max(abs(max(wb) - even), abs(min(wb) - even)) / even
        heaviest = wb.index(max(wb))
        if args.pp == 1:
            checks.append((f"tp {tp}: every rank's weight bytes within 2% of total/tp ({spread:.3f}%; heaviest "
                           f"tp_rank {heaviest} {100.0 * (max(wb) - even) / even:+.3f}%, lightest "
                           f"{100.0 * (min(wb) - even) / even:+.3f}%)", spread <= 2.0))
        else:  # stages hold whole layers: balanced means no rank more than one layer's bytes above the lightest
            layer = sum(wb) / tp / s["layers"]
            h = layout[heaviest]
            checks.append((f"tp {tp} x pp {args.pp}: heaviest rank (pp_stage {h['pp_stage']}, tp_rank {h['tp_rank']}, "
                           f"layers {h['layers']}) {fmt_mib(max(wb))} MiB, lightest {fmt_mib(min(wb))} MiB: "
                           f"within one layer's bytes ({fmt_mib(layer)} MiB)", max(wb) - min(wb) <= layer))
        if r["failed"]:
            rows.append([label(tp), fmt_mib(max(wb)), f"{spread:.3f}"] + ["FAILED"] + ["-"] * 7)
            checks.append((f"tp {tp}: tprun ran and printed its summary", False))
            continue
        same = "-"
        if ref is not None and r is not ref:
            # A prompt whose output block is missing (None) never counts as the same.
            n_same = count_same(r["texts"], ref["texts"], len(prompts), r["stdout"], ref["stdout"])
            same = f"{n_same}/{len(prompts)}"
            checks.append((f"tp {tp}: greedy outputs identical to tp {ref['tp']} ({same})", n_same == len(prompts)))
        gpu = "-"
        if r.get("gpu_peak") and len(r["gpu_peak"]) >= tp * args.pp:
            gpu = "/".join(f"{p / MIB:.0f}" for p in r["gpu_peak"])
            bound = max(wb) + (r["kv_cache"] or 0) + GIB
            checks.append((f"tp {tp}: per-GPU peak <= weights + kv_cache + 1 GiB ({bound / MIB:.0f} MiB)",
                           max(r["gpu_peak"]) <= bound))
            pk = r["gpu_peak"]
            checks.append((f"tp {tp}: GPUs' peaks within 1%", (max(pk) - min(pk)) <= 0.01 * max(pk)))
        load = f"{r.get('load_s', 0):.2f}"
        rss = fmt_mib(r["peak_rss"])
        bench = r.get("bench")
        if bench:  # CUDA: per-rank numbers from bench-load replace the process-level estimates
            load = "/".join(f"{b['load_s']:.2f}" for b in bench)
            rss = "/".join(f"{b['rss_peak_mib']:.0f}" for b in bench)
            ring_mib = 4 * 64  # bench-load's default ring: 4 x 64 MiB pinned buffers
            checks.append((f"tp {tp}: host peak RSS per rank <= 256 MiB + ring {ring_mib} MiB "
                           f"(max {max(b['rss_peak_mib'] for b in bench):.0f})",
                           max(b["rss_peak_mib"] for b in bench) <= 256 + ring_mib))
            tot = [b["device_total_mib"] for b in bench]
            if args.pp == 1:
                    checks.append((f"tp {tp}: bench-load device totals within 1% across ranks "
                               f"({min(tot):.0f}..{max(tot):.0f} MiB)", max(tot) - min(tot) <= 0.01 * max(tot)))
            else:  # per-rank device totals (MiB), in (pp_stage, tp_rank) order: the balance GPU 0 is compared by
                rss += " | dev " + "/".join(f"{t:.0f}" for t in tot)
        rows.append([label(tp), fmt_mib(max(wb)), f"{spread:.3f}", fmt_mib(r.get("kv_cache")), rss,
                     gpu, load, f"{r.get('prefill_tps', 0):.1f}",
                     f"{r.get('decode_tps', 0):.1f}", f"{r.get('decode_step_ms', 0):.1f}", same])
    for a, b in zip(tps, tps[1:]):
        if b == 2 * a and a >= 2:
            ratio = per_rank[b] / per_rank[a]
            # Norms, biases (and GPT-Neo's position table) are replicated, so the ratio is a little above 0.5;
            # 0.52 allows for them at the real widths. Scaled shapes make those parts a larger share: reported only.
            if s["notes"] or args.scale_width != 1 or any(getattr(args, k) for k in
                                                            ("hidden", "heads", "kv_heads", "intermediate", "vocab")):
                print(f"[info] weights/rank tp {a} -> tp {b}: ratio {ratio:.4f} (scaled shape: replicated parts weigh more)",
                      file=sys.stderr)
            else:
                checks.append((f"weights/rank tp {a} -> tp {b}: ratio {ratio:.4f} (<= 0.52)", ratio <= 0.52))
    if args.peer == "hf":
        if peer is None:
            rows.append(["HF"] + ["FAILED"] + ["-"] * (len(cols) - 2))
            checks.append(("peer: HF transformers ran", False))
        else:
            steps = max(1, args.new_tokens - 1)  # decode steps after the first token (which prefill gives)
            same = "-"
            if ref is not None:  # informative: 16-bit kernels of the two may round differently
                peer_stdout = "".join(t + "\n" for t in peer["texts"])
                same = f"{count_same(peer['texts'], ref['texts'], len(prompts), peer_stdout, ref['stdout'])}/{len(prompts)}"
            gpu = "/".join(f"{p / MIB:.0f}" for p in peer.get("gpu_peak", [])) or "-"
            rows.append(["HF", "-", "-", "-", fmt_mib(peer["host_peak_rss_bytes"]), gpu, f"{peer['load_s']:.2f}",
                         f"{peer['prompt_tokens'] / peer['prefill_s']:.1f}",
                         f"{len(prompts) * steps / peer['decode_s']:.1f}" if peer["decode_s"] > 0 else "-",
                         f"{1000 * peer['decode_s'] / steps:.1f}", same])
    checks += logit_checks
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(v.rjust(w) for v, w in zip(row, widths)) + " |")
    print("\nchecks:")
    for text, ok in checks:
        print(f"  [{'PASS' if ok else 'FAIL'}] {text}")
    if ref is not None:
        print(f"\nsample output (tp {ref['tp']}): {ref['stdout'].splitlines()[0] if ref['stdout'] else ''!r}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
