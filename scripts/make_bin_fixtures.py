#!/usr/bin/env python3
"""Make the PyTorch .bin twins of a few committed safetensors fixtures: the same tensors written by
torch.save in its zip format, laid out as transformers 4's save_pretrained(safe_serialization=False)
wrote them (pytorch_model.bin, or pytorch_model-0000K-of-0000N.bin shards + pytorch_model.bin.index.json;
transformers 5 no longer writes .bin, so the files are written with torch.save directly). The fixtures
themselves are only read. Converting a twin must give the same shard files as converting its original
(tests/format/test_torch_bin.cpp).

Usage: make_bin_fixtures.py [FIXTURES_ROOT]   (default tests/fixtures; about 15 s on 2 busy cores)

Writes, next to the originals:
  tiny-llama-bf16-bin/          pytorch_model.bin: a plain dict of BFloat16 tensors (tiny-llama-bf16)
  tiny-llama-bf16-sharded-bin/  the same tensors in 3 shards + pytorch_model.bin.index.json
  tiny-gpt-neox-par-bin/        tiny-gpt-neox-par plus the buffers Pythia's .bin files hold: per layer
                                attention.bias (bool causal mask), attention.masked_bias (f32 scalar),
                                attention.rotary_emb.inv_freq (f32)
  tiny-gpt-neo-bin/             tiny-gpt-neo as an OrderedDict with state_dict()'s _metadata attribute,
                                plus per layer attn.attention.bias (bool causal / local mask) and
                                attn.attention.masked_bias (f32 scalar), and lm_head.weight sharing the
                                storage of transformer.wte.weight (tied weights, as model.state_dict() gives)
Each directory also gets the original's config.json and generation_config.json (and tokenizer files when
present). Afterwards every twin is loaded back with torch.load(weights_only=True) and compared with its
original, tensor by tensor.

Also writes the fuzz seeds of fuzz_torch_bin, FIXTURES_ROOT/fuzz/torch_bin/*.bin (a few KB each, under
the fuzzer's 64 KiB input limit): each twin's state dict with every dimension cut to at most 2 (same
names, dtypes, dict type, buffers and tied storage), saved with torch.save's default pickle protocol 2,
and the GPT-Neo one also with protocol 4 (FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE).
Reruns with the same torch version write the same bytes (checked with torch 2.15).
"""
import argparse
import collections
import json
import os
import shutil

import torch
from safetensors.torch import load_file

COPIED = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json",
          "special_tokens_map.json"]


def original(root, name):
    return load_file(os.path.join(root, name, "model.safetensors"))


def fresh_dir(root, src, dst):
    d = os.path.join(root, dst)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in COPIED:
        if os.path.exists(os.path.join(root, src, f)):
            shutil.copyfile(os.path.join(root, src, f), os.path.join(d, f))
    return d


def causal_mask(n, window=None):
    """GPT-Neo / GPT-NeoX's bool mask buffer [1, 1, n, n]; with a window, the local layers' band."""
    m = torch.tril(torch.ones((n, n), dtype=torch.bool))
    if window is not None:
        m = torch.bitwise_xor(m, torch.tril(m, -window))
    return m.view(1, 1, n, n)


def save_sharded(sd, d, groups):
    """torch.save each group of names as pytorch_model-0000K-of-0000N.bin, and the index."""
    weight_map, total = {}, 0
    for k, names in enumerate(groups):
        fn = "pytorch_model-%05d-of-%05d.bin" % (k + 1, len(groups))
        torch.save({n: sd[n] for n in names}, os.path.join(d, fn))
        for n in names:
            weight_map[n] = fn
            total += sd[n].numel() * sd[n].element_size()
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")


def check(d, expect):
    """Load the twin back (weights only) and compare every tensor with `expect`."""
    got = {}
    index = os.path.join(d, "pytorch_model.bin.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["pytorch_model.bin"]
    for fn in files:
        got.update(torch.load(os.path.join(d, fn), weights_only=True))
    assert sorted(got) == sorted(expect), (d, sorted(set(got) ^ set(expect)))
    for n, t in expect.items():
        assert got[n].dtype == t.dtype and got[n].shape == t.shape and torch.equal(got[n], t), (d, n)
    print("%s: %d tensors, %d bytes" % (d, len(got), sum(os.path.getsize(os.path.join(d, f)) for f in files)))


def shrunk(sd):
    """The same state dict with every dimension cut to at most 2; tensors that shared a storage still do."""
    out = collections.OrderedDict() if isinstance(sd, collections.OrderedDict) else {}
    by_storage = {}
    for n, t in sd.items():
        key = (t.untyped_storage().data_ptr(), t.shape)
        if key not in by_storage:
            by_storage[key] = t[tuple(slice(0, 2) for _ in t.shape)].contiguous().clone()
        out[n] = by_storage[key].detach()
    if hasattr(sd, "_metadata"):
        out._metadata = sd._metadata
    return out


def write_seeds(root, dicts):
    d = os.path.join(root, "fuzz", "torch_bin")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, sd in dicts.items():
        torch.save(shrunk(sd), os.path.join(d, name + ".bin"))
    torch.save(shrunk(dicts["tiny-gpt-neo"]), os.path.join(d, "tiny-gpt-neo-protocol4.bin"), pickle_protocol=4)
    for f in sorted(os.listdir(d)):
        print("%s: %d bytes" % (os.path.join(d, f), os.path.getsize(os.path.join(d, f))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default="tests/fixtures")
    root = ap.parse_args().root

    seeds = {}
    # Llama, bf16: one file, then three shards (embedding / layer 0 / the rest).
    sd = seeds["tiny-llama-bf16"] = original(root, "tiny-llama-bf16")
    d = fresh_dir(root, "tiny-llama-bf16", "tiny-llama-bf16-bin")
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))
    check(d, sd)
    d = fresh_dir(root, "tiny-llama-bf16", "tiny-llama-bf16-sharded-bin")
    names = sorted(sd)
    groups = [[n for n in names if n == "model.embed_tokens.weight"],
              [n for n in names if n.startswith("model.layers.0.")]]
    groups.append([n for n in names if not any(n in g for g in groups)])
    save_sharded(sd, d, groups)
    check(d, sd)

    # GPT-NeoX with Pythia's buffers.
    sd = original(root, "tiny-gpt-neox-par")
    cfg = json.load(open(os.path.join(root, "tiny-gpt-neox-par", "config.json")))
    n_pos = cfg["max_position_embeddings"]
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    rot = int(head_dim * cfg.get("rotary_pct", cfg.get("partial_rotary_factor", 1.0)))
    base = cfg.get("rotary_emb_base", cfg.get("rope_theta", 10000))
    for layer in range(cfg["num_hidden_layers"]):
        p = "gpt_neox.layers.%d.attention." % layer
        sd[p + "bias"] = causal_mask(n_pos)
        sd[p + "masked_bias"] = torch.tensor(-1e9)
        sd[p + "rotary_emb.inv_freq"] = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    d = fresh_dir(root, "tiny-gpt-neox-par", "tiny-gpt-neox-par-bin")
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))
    check(d, sd)
    seeds["tiny-gpt-neox-par"] = sd

    # GPT-Neo: an OrderedDict with _metadata (a BUILD in the pickle), mask buffers, tied lm_head.
    st = original(root, "tiny-gpt-neo")
    cfg = json.load(open(os.path.join(root, "tiny-gpt-neo", "config.json")))
    sd = collections.OrderedDict(sorted(st.items()))
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("transformer", {"version": 1})])
    for layer, kind in enumerate(cfg["attention_layers"]):
        p = "transformer.h.%d.attn.attention." % layer
        sd[p + "bias"] = causal_mask(cfg["max_position_embeddings"], cfg["window_size"] if kind == "local" else None)
        sd[p + "masked_bias"] = torch.tensor(-1e9)
    sd["lm_head.weight"] = sd["transformer.wte.weight"].detach()  # another tensor, the same storage
    assert sd["lm_head.weight"].untyped_storage().data_ptr() == sd["transformer.wte.weight"].untyped_storage().data_ptr()
    d = fresh_dir(root, "tiny-gpt-neo", "tiny-gpt-neo-bin")
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))
    check(d, sd)
    seeds["tiny-gpt-neo"] = sd
    write_seeds(root, seeds)


if __name__ == "__main__":
    main()
