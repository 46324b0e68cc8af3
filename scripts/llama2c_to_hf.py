#!/usr/bin/env python3
"""Convert a llama2.c checkpoint (model .bin + tokenizer .bin) into a Hugging Face
LlamaForCausalLM directory (config.json, model.safetensors fp32, generation_config.json,
tokenizer.json, tokenizer_config.json) with numpy and safetensors only. With --check (needs torch,
transformers and tokenizers) it then checks the result against the greedy reference shipped with the
model and writes reference.json (how tests/fixtures/stories260K was made).

Usage: llama2c_to_hf.py IN_DIR OUT_DIR [--check]
  IN_DIR holds stories260K.bin (or any *.bin model), its tok*.bin tokenizer and,
  optionally, expected_greedy200_ids.txt / expected_greedy200.txt / LICENSE, which are
  checked against and copied to OUT_DIR.

llama2.c formats (karpathy/llama2.c, run.c and export.py "legacy" version 0):
  model: 7 x int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
         seq_len; vocab_size < 0 means an unshared classifier), then fp32 tensors, each
         stacked over layers, PyTorch [out, in] row-major: token_embedding_table, rms_att,
         wq, wk, wv, wo, rms_ffn, w1 (gate), w2 (down), w3 (up), rms_final,
         freq_cis_real, freq_cis_imag (unused here), wcls (only if unshared).
  tokenizer: int32 max_token_length, then per token: float32 score, int32 length, bytes.
         Pieces store SentencePiece's U+2581 as a plain space; <s>/</s> are "\\n<s>\\n".
llama2.c applies rotary to ADJACENT pairs (x[2i], x[2i+1]) while HF Llama rotates the two
halves of each head, so the rows of wq and wk are permuted per head to "even rows, then odd
rows" (the same permute as transformers' convert_llama_weights_to_hf.py).
"""
import argparse
import glob
import json
import os
import shutil
import struct
import sys

import numpy as np

SPM_SPACE = "\u2581"
N_SPECIAL = 3  # <unk>, <s>, </s>
N_BYTES = 256  # <0x00>..<0xFF>, ids 3..258



def readable_like_open(path):
    """safetensors' save_file creates files with mode 0600; give them the mode open() would (0666 & ~umask),
    so that the checkpoint is readable by the other users of a shared model directory."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)

def read_model(path):
    """Returns (header dict, dict of name -> np.float32 array) for a llama2.c .bin."""
    with open(path, "rb") as f:
        raw = f.read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    head_size = dim // n_heads
    kv_dim = n_kv_heads * head_size
    data = np.frombuffer(raw, dtype="<f4", offset=28)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        if pos + n > data.size:
            sys.exit(f"{path}: truncated while reading a tensor of shape {shape}")
        out = data[pos:pos + n].reshape(shape).copy()
        pos += n
        return out

    w = {}
    w["tok_emb"] = take(vocab, dim)
    w["rms_att"] = take(n_layers, dim)
    w["wq"] = take(n_layers, dim, dim)
    w["wk"] = take(n_layers, kv_dim, dim)
    w["wv"] = take(n_layers, kv_dim, dim)
    w["wo"] = take(n_layers, dim, dim)
    w["rms_ffn"] = take(n_layers, dim)
    w["w1"] = take(n_layers, hidden, dim)
    w["w2"] = take(n_layers, dim, hidden)
    w["w3"] = take(n_layers, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq_len, head_size // 2)  # freq_cis_real (recomputed by the runtime)
    take(seq_len, head_size // 2)  # freq_cis_imag
    if not shared:
        w["wcls"] = take(vocab, dim)
    if pos != data.size:
        sys.exit(f"{path}: {data.size - pos} trailing floats; header does not match the file")
    hdr = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads,
               n_kv_heads=n_kv_heads, vocab_size=vocab, seq_len=seq_len, shared=shared)
    return hdr, w


def interleaved_to_halves(w, n_heads):
    """Rows of a q/k projection [n_heads*head_size, in]: per head, reorder rows from the
    adjacent-pair rotary layout to the HF half-split layout (even rows, then odd rows)."""
    out_dim, in_dim = w.shape
    head_size = out_dim // n_heads
    return (w.reshape(n_heads, head_size // 2, 2, in_dim)
             .transpose(0, 2, 1, 3).reshape(out_dim, in_dim))


def read_tokenizer(path, vocab_size):
    """Returns a list of (piece str in SentencePiece form, score float)."""
    with open(path, "rb") as f:
        raw = f.read()
    pos = 4  # max_token_length, not needed
    pieces = []
    while pos < len(raw):
        score, n = struct.unpack("<fi", raw[pos:pos + 8])
        pos += 8
        text = raw[pos:pos + n].decode("utf-8")
        pos += n
        pieces.append((text, score))
    if len(pieces) != vocab_size:
        sys.exit(f"{path}: {len(pieces)} pieces but the model has vocab_size {vocab_size}")
    out = []
    for i, (text, score) in enumerate(pieces):
        if i < N_SPECIAL:
            text = ["<unk>", "<s>", "</s>"][i]
        elif i < N_SPECIAL + N_BYTES:
            expect = "<0x%02X>" % (i - N_SPECIAL)
            if text != expect:
                sys.exit(f"{path}: piece {i} is {text!r}, expected byte piece {expect}")
        else:
            text = text.replace(" ", SPM_SPACE)
        out.append((text, score))
    return out


def bpe_merges(pieces):
    """SentencePiece BPE -> HF merges: every split of a normal piece into two pieces that
    both exist is a merge; merges are ordered by the merged piece's score, highest first
    (ties: by ids of left, right). Same rule as tokenizers' SentencePieceExtractor."""
    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    merges = []
    for i, (piece, score) in enumerate(pieces):
        if i < N_SPECIAL + N_BYTES:
            continue
        local = []
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if vocab.get(left, -1) >= N_SPECIAL + N_BYTES and vocab.get(right, -1) >= N_SPECIAL + N_BYTES:
                local.append((vocab[left], vocab[right], left, right, score))
        local.sort()
        merges.extend(local)
    merges.sort(key=lambda m: -m[4])  # stable
    return [f"{l} {r}" for _, _, l, r, _ in merges]


def tokenizer_json(pieces):
    """Llama 2-style tokenizer.json (SentencePiece BPE with byte_fallback)."""
    special = [{"id": i, "content": pieces[i][0], "single_word": False, "lstrip": False,
                "rstrip": False, "normalized": False, "special": True} for i in range(N_SPECIAL)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPM_SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPM_SPACE}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPM_SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": {p: i for i, (p, _) in enumerate(pieces)},
            "merges": bpe_merges(pieces)},
    }


def tokenizer_config():
    def tok(content):
        return {"__type": "AddedToken", "content": content, "lstrip": False,
                "normalized": False, "rstrip": False, "single_word": False, "special": True}
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {str(i): {k: v for k, v in tok(c).items() if k != "__type"}
                                 for i, c in enumerate(["<unk>", "<s>", "</s>"])},
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": True,
        "model_max_length": 512,
        "pad_token": None,
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
    }


def hf_state_dict(hdr, w):
    """The LlamaForCausalLM tensors (HF names, fp32 numpy); no lm_head when the classifier is shared."""
    a = np.ascontiguousarray
    sd = {"model.embed_tokens.weight": a(w["tok_emb"]), "model.norm.weight": a(w["rms_final"])}
    for i in range(hdr["n_layers"]):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = a(w["rms_att"][i])
        sd[p + "self_attn.q_proj.weight"] = a(interleaved_to_halves(w["wq"][i], hdr["n_heads"]))
        sd[p + "self_attn.k_proj.weight"] = a(interleaved_to_halves(w["wk"][i], hdr["n_kv_heads"]))
        sd[p + "self_attn.v_proj.weight"] = a(w["wv"][i])
        sd[p + "self_attn.o_proj.weight"] = a(w["wo"][i])
        sd[p + "post_attention_layernorm.weight"] = a(w["rms_ffn"][i])
        sd[p + "mlp.gate_proj.weight"] = a(w["w1"][i])
        sd[p + "mlp.down_proj.weight"] = a(w["w2"][i])
        sd[p + "mlp.up_proj.weight"] = a(w["w3"][i])
    if not hdr["shared"]:
        sd["lm_head.weight"] = a(w["wcls"])
    return sd


def hf_config(hdr):
    """config.json as transformers 5 writes it for LlamaForCausalLM."""
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "dtype": "float32", "eos_token_id": 2,
        "head_dim": hdr["dim"] // hdr["n_heads"], "hidden_act": "silu", "hidden_size": hdr["dim"],
        "initializer_range": 0.02, "intermediate_size": hdr["hidden_dim"],
        "max_position_embeddings": hdr["seq_len"], "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": hdr["n_heads"], "num_hidden_layers": hdr["n_layers"],
        "num_key_value_heads": hdr["n_kv_heads"], "pad_token_id": None, "pretraining_tp": 1,
        "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": bool(hdr["shared"]), "use_cache": True, "vocab_size": hdr["vocab_size"],
    }


def write_checkpoint(hdr, w, out_dir):
    from safetensors.numpy import save_file
    path = os.path.join(out_dir, "model.safetensors")
    save_file(hf_state_dict(hdr, w), path, metadata={"format": "pt"})
    readable_like_open(path)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(hdr), f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "do_sample": False, "eos_token_id": 2}, f, indent=2)


def greedy(model, ids, new_tokens):
    """Argmax decoding (llama2.c -t 0): full recompute at each step, never stops at EOS.
    Returns the new ids only."""
    import torch
    seq = list(ids)
    with torch.no_grad():
        for _ in range(new_tokens):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(ids):]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("in_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--check", action="store_true",
                    help="check the result with transformers (needs torch) and write reference.json")
    args = ap.parse_args()

    tok_paths = sorted(glob.glob(os.path.join(args.in_dir, "*tok*.bin")))
    model_paths = sorted(p for p in glob.glob(os.path.join(args.in_dir, "*.bin")) if p not in tok_paths)
    if len(tok_paths) != 1 or len(model_paths) != 1:
        sys.exit(f"{args.in_dir}: need exactly one model .bin and one tok*.bin, got {model_paths} {tok_paths}")
    hdr, w = read_model(model_paths[0])
    pieces = read_tokenizer(tok_paths[0], hdr["vocab_size"])
    print("llama2.c header:", hdr)

    os.makedirs(args.out_dir, exist_ok=True)
    write_checkpoint(hdr, w, args.out_dir)
    with open(os.path.join(args.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(pieces), f, ensure_ascii=False, indent=2)
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, indent=2)
    for name in ("LICENSE", "expected_greedy200_ids.txt", "expected_greedy200.txt"):
        src = os.path.join(args.in_dir, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(args.out_dir, name))

    if not args.check:
        print("wrote", args.out_dir)
        return

    # Reload what was written and check it with transformers.
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(args.out_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tk = Tokenizer.from_file(os.path.join(args.out_dir, "tokenizer.json"))
    ok = True
    ids_path = os.path.join(args.in_dir, "expected_greedy200_ids.txt")
    greedy_new = None
    if os.path.exists(ids_path):
        expected = json.load(open(ids_path))
        # Conventions (llama2.c run.c with -t 0 -n 200): expected_greedy200_ids.txt lists the
        # 200 tokens at positions 0..199, i.e. BOS (1) followed by the first 199 generated
        # ids; expected_greedy200.txt is the text of all 200 generated ids (one more than
        # the ids file) plus the final newline run.c prints.
        greedy_new = greedy(model, [1], len(expected))
        got = [1] + greedy_new[:-1]
        same = sum(a == b for a, b in zip(got, expected))
        print(f"greedy ids: {same}/{len(expected)} match expected_greedy200_ids.txt")
        ok &= got == expected
        text_path = os.path.join(args.in_dir, "expected_greedy200.txt")
        if os.path.exists(text_path):
            text = tk.decode(greedy_new, skip_special_tokens=True) + "\n"
            want = open(text_path, encoding="utf-8").read()
            print("decoded text matches expected_greedy200.txt:", text == want)
            if text != want:
                print(repr(text[-80:]), "\n", repr(want[-80:]))
            ok &= text == want

    prompts_text = ["Once upon a time", "Lily saw a big red ball.", "The cat"]
    prompts = [tk.encode(s).ids for s in prompts_text]
    for s, p in zip(prompts_text, prompts):
        print(f"{s!r} -> {tk.encode(s).tokens}")
    ref = {"prompts_text": prompts_text, "prompts": prompts, "last_logits": [], "greedy": [],
           "transformers_version": transformers.__version__}
    if greedy_new is not None:
        ref["greedy200_from_bos"] = greedy_new  # 200 generated ids after [BOS]
    with torch.no_grad():
        for p in prompts:
            logits = model(torch.tensor([p])).logits[0, -1].tolist()
            ref["last_logits"].append([float(x) for x in logits])
            ref["greedy"].append(greedy(model, p, 16))
    with open(os.path.join(args.out_dir, "reference.json"), "w") as f:
        json.dump(ref, f)
    print("wrote", args.out_dir)
    if not ok:
        sys.exit("CHECK FAILED: converted model does not reproduce the llama2.c reference")


if __name__ == "__main__":
    main()
