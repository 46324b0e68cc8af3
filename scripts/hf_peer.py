#!/usr/bin/env python3
# hf_peer.py: the reported baseline, Hugging Face transformers, on the same prompts as a tprun run:
# from_pretrained (device_map="auto" on CUDA, so several GPUs hold consecutive layers as in the reports)
# + one batched, left-padded, greedy generate. Prints ONE JSON line on stdout.
# Owns: loading a checkpoint the way the reports did and timing it. Does not own: the table (seed_scenario.py).
"""Run HF transformers generate on a prompts file and print one JSON object.

  python3 scripts/hf_peer.py --model HF_DIR --prompts prompts.json --new-tokens 10 --device cuda [--arch internlm2]

Fields: load_s (from_pretrained, weights on the device), prefill_s (generate of one token: the padded batch's
prefill and its first token), generate_s (generate with max_new_tokens = min_new_tokens = N, greedy, after a
warm-up), decode_s = generate_s - prefill_s (the N - 1 decode steps),
gpu_peak_bytes (torch.cuda.max_memory_allocated per visible GPU; the allocator's reserve is in
gpu_reserved_bytes), host_peak_rss_bytes (VmHWM of this process), texts (the new tokens of each prompt,
decoded without skipping special tokens, as `tprun generate` prints them).
InternLM2 (trust_remote_code, whose code is not on an offline machine): the checkpoint is read into
transformers' Llama, whose maths it is (wqkv split per KV group into q / k / v); dynamic rope scaling
changes nothing below max_position_embeddings, which these prompts never reach.
"""
import argparse
import json
import time
from pathlib import Path


def vm_hwm_bytes():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def load_internlm2_as_llama(hf: Path, dtype, device):
    """InternLM2's trust_remote_code layout -> LlamaForCausalLM with the same weights."""
    import torch
    from safetensors import safe_open
    from transformers import LlamaConfig, LlamaForCausalLM
    c = json.loads((hf / "config.json").read_text())
    cfg = LlamaConfig(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                      num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                      num_key_value_heads=c["num_key_value_heads"], intermediate_size=c["intermediate_size"],
                      max_position_embeddings=c["max_position_embeddings"], rope_theta=c["rope_theta"],
                      rms_norm_eps=c["rms_norm_eps"], attention_bias=bool(c.get("bias", False)),
                      tie_word_embeddings=c.get("tie_word_embeddings", False), dtype=dtype)
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd, group = c["hidden_size"] // heads, heads // kv
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).to(dtype)
    names = {"model.tok_embeddings.weight": "model.embed_tokens.weight", "model.norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    sd = {}
    for f in sorted(hf.glob("*.safetensors")):
        with safe_open(str(f), framework="pt", device=device) as st:
            for k in st.keys():
                t = st.get_tensor(k)
                if k in names:
                    sd[names[k]] = t
                    continue
                p, rest = k.split(".", 3)[:3], k.split(".", 3)[3]
                pre = ".".join(p) + "."
                module, kind = rest.rsplit(".", 1)  # kind: weight or bias
                if module == "attention.wqkv":
                    w = t.view(kv, group + 2, hd, *t.shape[1:])
                    sd[pre + f"self_attn.q_proj.{kind}"] = w[:, :group].reshape(heads * hd, *t.shape[1:])
                    sd[pre + f"self_attn.k_proj.{kind}"] = w[:, group].reshape(kv * hd, *t.shape[1:])
                    sd[pre + f"self_attn.v_proj.{kind}"] = w[:, group + 1].reshape(kv * hd, *t.shape[1:])
                else:
                    rename = {"attention.wo": "self_attn.o_proj", "attention_norm": "input_layernorm",
                              "ffn_norm": "post_attention_layernorm", "feed_forward.w1": "mlp.gate_proj",
                              "feed_forward.w3": "mlp.up_proj", "feed_forward.w2": "mlp.down_proj"}
                    sd[pre + f"{rename[module]}.{kind}"] = t
    model.load_state_dict(sd, assign=True, strict=True)
    model.model.rotary_emb = type(model.model.rotary_emb)(cfg)  # buffers off the meta device
    return model.to(device).eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True, help="JSON list of prompt strings")
    ap.add_argument("--new-tokens", type=int, default=10)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--arch", default="", help="internlm2: read the trust_remote_code layout into Llama")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = json.loads(args.prompts.read_text())
    cfg = json.loads((args.model / "config.json").read_text())
    dtype = getattr(torch, cfg.get("torch_dtype") or cfg.get("dtype") or "float32")

    t0 = time.time()
    if args.arch == "internlm2":
        model = load_internlm2_as_llama(args.model, dtype, args.device)
    else:
        model = AutoModelForCausalLM.from_pretrained(
            args.model, dtype=dtype, device_map="auto" if args.device == "cuda" else None).eval()
    if args.device == "cuda":
        torch.cuda.synchronize()
    load_s = time.time() - t0

    tok = PreTrainedTokenizerFast(tokenizer_file=str(args.model / "tokenizer.json"))
    tok.padding_side = "left"
    eos = cfg.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if tok.pad_token is None:
        tok.pad_token = tok.convert_ids_to_tokens(eos if eos is not None else 0)
    # the tokenizer's own post-processor adds BOS where the model has one, as tprun's encoder does
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=True)
    first = next(model.parameters()).device
    enc = {k: v.to(first) for k, v in enc.items()}

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    def generate(n, batch=enc):
        return model.generate(**batch, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              pad_token_id=tok.pad_token_id)

    with torch.no_grad():
        generate(2)  # warm-up at the batch's shapes (kernels, allocator, oneDNN primitives) outside the timings
        if args.device == "cuda":
            for i in range(torch.cuda.device_count()):
                torch.cuda.reset_peak_memory_stats(i)
        sync(); t0 = time.time()
        generate(1)  # prefill and the first token
        sync(); prefill_s = time.time() - t0
        t0 = time.time()
        out = generate(args.new_tokens)
        sync(); generate_s = time.time() - t0
    new = out[:, enc["input_ids"].shape[1]:]
    texts = [tok.decode(row, skip_special_tokens=False) for row in new.tolist()]
    res = {"load_s": load_s, "prefill_s": prefill_s, "generate_s": generate_s,
           "decode_s": max(0.0, generate_s - prefill_s), "prompt_tokens": int(enc["attention_mask"].sum()),
           "padded_batch_tokens": int(enc["input_ids"].numel()), "host_peak_rss_bytes": vm_hwm_bytes(),
           "texts": texts}
    if args.device == "cuda":
        n = torch.cuda.device_count()
        res["gpu_peak_bytes"] = [torch.cuda.max_memory_allocated(i) for i in range(n)]
        res["gpu_reserved_bytes"] = [torch.cuda.max_memory_reserved(i) for i in range(n)]
        res["devices"] = sorted({str(p.device) for p in model.parameters()})
    print(json.dumps(res))


if __name__ == "__main__":
    main()
