#!/usr/bin/env python3
"""make_random_checkpoint.py: write a random-weight Hugging Face checkpoint of a real model's shape
(config.json + model-0000i-of-0000n.safetensors + index), streamed so that it needs little memory.

Used to measure `tpshard convert` peak RSS and zstd ratios on multi-GB inputs (docs/CONVERT.md).
Values: normal(0, 0.02) in bf16 (fp16/fp32 with --dtype), roughly the statistics of trained weights;
norm weights are 1 + normal(0, 0.02). Random mantissas compress poorly, real checkpoints a bit better.

  python3 make_random_checkpoint.py CONFIG.json OUT_DIR [--layers N] [--shard-gb 2] [--dtype bf16]
"""
import argparse, json, os, struct, sys
import numpy as np


def tensor_list(c):
    H, I, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    nh = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", nh)
    hd = c.get("head_dim", H // nh)
    arch = c["architectures"][0]
    t = []
    if arch == "GPTNeoXForCausalLM":
        t.append(("gpt_neox.embed_in.weight", (V, H)))
        for l in range(L):
            p = f"gpt_neox.layers.{l}."
            t += [(p + "input_layernorm.weight", (H,)), (p + "input_layernorm.bias", (H,)),
                  (p + "attention.query_key_value.weight", (3 * H, H)), (p + "attention.query_key_value.bias", (3 * H,)),
                  (p + "attention.dense.weight", (H, H)), (p + "attention.dense.bias", (H,)),
                  (p + "post_attention_layernorm.weight", (H,)), (p + "post_attention_layernorm.bias", (H,)),
                  (p + "mlp.dense_h_to_4h.weight", (I, H)), (p + "mlp.dense_h_to_4h.bias", (I,)),
                  (p + "mlp.dense_4h_to_h.weight", (H, I)), (p + "mlp.dense_4h_to_h.bias", (H,))]
        t += [("gpt_neox.final_layer_norm.weight", (H,)), ("gpt_neox.final_layer_norm.bias", (H,))]
        if not c.get("tie_word_embeddings", False):
            t.append(("embed_out.weight", (V, H)))
        return t
    qwen = arch == "Qwen2ForCausalLM"
    t.append(("model.embed_tokens.weight", (V, H)))
    for l in range(L):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", (H,)), (p + "self_attn.q_proj.weight", (nh * hd, H)),
              (p + "self_attn.k_proj.weight", (kv * hd, H)), (p + "self_attn.v_proj.weight", (kv * hd, H))]
        if qwen:
            t += [(p + "self_attn.q_proj.bias", (nh * hd,)), (p + "self_attn.k_proj.bias", (kv * hd,)),
                  (p + "self_attn.v_proj.bias", (kv * hd,))]
        t += [(p + "self_attn.o_proj.weight", (H, nh * hd)), (p + "post_attention_layernorm.weight", (H,)),
              (p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)), (p + "mlp.down_proj.weight", (H, I))]
    t.append(("model.norm.weight", (H,)))
    if not c.get("tie_word_embeddings", False):
        t.append(("lm_head.weight", (V, H)))
    return t


def random_bytes(rng, shape, dtype, norm):
    n = int(np.prod(shape))
    out = bytearray()
    step = 1 << 24
    for s in range(0, n, step):
        k = min(step, n - s)
        x = rng.standard_normal(k, dtype=np.float32) * np.float32(0.02)
        if norm:
            x += np.float32(1.0)
        if dtype == "bf16":
            u = x.view(np.uint32)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
            out += u.astype("<u2").tobytes()
        elif dtype == "fp16":
            out += x.astype("<f2").tobytes()
        else:
            out += x.astype("<f4").tobytes()
    return bytes(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=None, help="override num_hidden_layers")
    ap.add_argument("--shard-gb", type=float, default=2.0)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    a = ap.parse_args()
    c = json.load(open(a.config))
    if a.layers:
        c["num_hidden_layers"] = a.layers
    c["torch_dtype"] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[a.dtype]
    c.pop("dtype", None)
    os.makedirs(a.out, exist_ok=True)
    json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    esize = {"bf16": 2, "fp16": 2, "fp32": 4}[a.dtype]
    st_dtype = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}[a.dtype]
    tensors = tensor_list(c)
    # Group tensors into shards of about shard-gb.
    shards, cur, size = [], [], 0
    limit = int(a.shard_gb * (1 << 30))
    for name, shape in tensors:
        b = int(np.prod(shape)) * esize
        if cur and size + b > limit:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape))
        size += b
    shards.append(cur)
    rng = np.random.default_rng(0)
    weight_map, total = {}, 0
    for i, group in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {}, 0
        for name, shape in group:
            b = int(np.prod(shape)) * esize
            header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [off, off + b]}
            off += b
            weight_map[name] = fname
        header["__metadata__"] = {"format": "pt"}
        hs = json.dumps(header).encode()
        hs += b" " * ((8 - len(hs) % 8) % 8)
        with open(os.path.join(a.out, fname), "wb") as f:
            f.write(struct.pack("<Q", len(hs)))
            f.write(hs)
            for name, shape in group:
                f.write(random_bytes(rng, shape, a.dtype, name.endswith("norm.weight") or "layernorm" in name))
        total += off
        print(f"wrote {fname} ({off / 2**30:.2f} GiB)", file=sys.stderr)
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
