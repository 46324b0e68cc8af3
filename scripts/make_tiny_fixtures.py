#!/usr/bin/env python3
"""Make the tiny random-weight Hugging Face checkpoints used as test fixtures, each with a
reference.json of transformers outputs (last-position logits and greedy continuations).

Usage: make_tiny_fixtures.py OUT_ROOT [--only NAME,...]  (the repository uses OUT_ROOT = tests/fixtures)

Writes OUT_ROOT/tiny-gpt-neox-par, tiny-gpt-neox-seq, tiny-llama, tiny-llama-bf16,
tiny-llama-sharded, tiny-llama3-rope, tiny-qwen2, tiny-gpt-neo, tiny-mistral-swa (sliding window 6),
tiny-llama-yarn (yarn rope scaling), tiny-phi3 (fused qkv / gate_up, sliding window 6), tiny-phi3-longrope
(Phi-3 with longrope rope scaling), tiny-qwen3 (q/k norms,
head_dim apart from hidden / heads), tiny-starcoder2 (LayerNorm, biases, sliding window 6),
tiny-gptj (interleaved partial rotary, one LayerNorm for parallel attention + MLP, lm_head bias),
tiny-falcon (Falcon-40B layout: qkv per KV group, ln_attn / ln_mlp, biases) and tiny-falcon-mq (Falcon-7B
layout: multi-query, one shared input_layernorm),
tiny-gemma2 (sandwich RMSNorms x (1 + w), scaled embedding, attention and final logit soft-capping,
local / global layers with sliding window 6, head_dim apart from hidden / heads), tiny-llama-hd64 (head_dim
64 apart from hidden / heads, GQA 4/2, prompts of 1, 23, 70 and 130 tokens: the head_dim and lengths of the GPU's tensor-core prefill
attention, which its f16 / bf16 copies run), and the repacked fixtures tiny-internlm2
(a Llama in InternLM2's trust_remote_code layout) and tiny-nvlm-d (a Qwen2 nested in NVLM-D's
multimodal layout with a dummy vision tower); --only writes just the named ones (tiny-llama also
writes tiny-llama-bf16 and tiny-llama-sharded). Deterministic for a given torch version
(torch.manual_seed per fixture). Every parameter, including norm weights and biases, is
perturbed with normal noise after init, so a wrong tensor mapping cannot pass a test.
reference.json: {"prompts": [[ids] x4, lengths 1, 5, 11, 23 (PROMPT_LENGTHS_OF: other lengths)],
                 "last_logits": [[vocab_size floats] per prompt]  (fp32, each prompt alone),
                 "greedy": [[16 new ids] per prompt]  (argmax decoding, each prompt alone,
                            never stops at EOS), "greedy_min_margin": smallest top1 - top2
                            logit gap seen while decoding (>= MIN_MARGIN), "seed",
                            "transformers_version", "torch_version"}
"""
import argparse
import json
import os
import shutil

import torch

PROMPT_LENGTHS = [1, 5, 11, 23]
PROMPT_LENGTHS_OF = {"tiny-llama-hd64": [1, 23, 70, 130]}  # fixtures with other prompt lengths
GREEDY_NEW_TOKENS = 16
VOCAB = 1000  # not a multiple of 8: exercises vocab padding at tp_size 3 and 8
MIN_MARGIN = 0.02  # smallest accepted top1 - top2 logit gap during greedy decoding
MAX_SEED_TRIES = 50


def neox_config(parallel):
    from transformers import GPTNeoXConfig
    return GPTNeoXConfig(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=256,
        vocab_size=VOCAB, rotary_pct=0.25 if parallel else 1.0,
        use_parallel_residual=parallel, tie_word_embeddings=False,
        hidden_act="gelu" if parallel else "gelu_fast", max_position_embeddings=128)


def llama_config(llama3_rope):
    from transformers import LlamaConfig
    kw = dict(hidden_size=64, num_attention_heads=8, num_hidden_layers=2, intermediate_size=160,
              vocab_size=VOCAB, rms_norm_eps=1e-5, max_position_embeddings=128)
    if llama3_rope:
        return LlamaConfig(**kw, num_key_value_heads=4, tie_word_embeddings=False,
                           rope_theta=500000.0,
                           rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 32})
    return LlamaConfig(**kw, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=10000.0)


def llama_hd64_config():
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                       num_hidden_layers=2, intermediate_size=256, vocab_size=VOCAB, rms_norm_eps=1e-5,
                       max_position_embeddings=256, tie_word_embeddings=False, rope_theta=10000.0)


def qwen2_config():
    from transformers import Qwen2Config
    return Qwen2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                       num_hidden_layers=2, intermediate_size=128, vocab_size=VOCAB,
                       tie_word_embeddings=False, max_position_embeddings=128,
                       rms_norm_eps=1e-6, rope_theta=1000000.0)


def qwen3_config():
    # per-head q_norm / k_norm before rotary; head_dim 16 given apart from hidden / heads (64 / 8 = 8),
    # as Qwen3's 128 over 4096 / 32 = 128 is not implied; GQA 8/2; no biases.
    from transformers import Qwen3Config
    return Qwen3Config(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                       num_hidden_layers=2, intermediate_size=128, vocab_size=VOCAB, tie_word_embeddings=False,
                       max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=1000000.0)


def mistral_swa_config():
    # GQA 8/2; sliding_window 6, shorter than the prompts (lengths up to 23 + 16 new tokens), so the
    # window changes the result on every layer.
    from transformers import MistralConfig
    return MistralConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                         intermediate_size=160, vocab_size=VOCAB, rms_norm_eps=1e-5,
                         max_position_embeddings=128, rope_theta=10000.0, sliding_window=6,
                         tie_word_embeddings=False)


def phi3_config():
    # fused qkv_proj / gate_up_proj, GQA 8/2 (KV groups split at tp 3); sliding_window 6, shorter than
    # the prompts, as Phi-3-mini-4k's 2047 is shorter than its 4096 positions.
    from transformers import Phi3Config
    return Phi3Config(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                      intermediate_size=160, vocab_size=VOCAB, rms_norm_eps=1e-5, max_position_embeddings=128,
                      original_max_position_embeddings=128, rope_theta=10000.0, sliding_window=6,
                      tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def phi3_longrope_config():
    # Phi-3-mini-128k's rope: "longrope" with 4 short and 4 long factors (head_dim 8), max_position_embeddings
    # 128 over original_max_position_embeddings 64 (factor 2, attention factor sqrt(1 + ln 2 / ln 64)); the
    # prompts and their continuations (at most 39 positions) stay within 64, where transformers uses the short
    # factors. No sliding window, so the rotary alone changes every position.
    from transformers import Phi3Config
    return Phi3Config(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                      intermediate_size=160, vocab_size=VOCAB, rms_norm_eps=1e-5, max_position_embeddings=128,
                      original_max_position_embeddings=64, rope_theta=10000.0, sliding_window=None,
                      rope_scaling={"type": "longrope", "short_factor": [1.0, 1.25, 2.5, 4.0],
                                    "long_factor": [1.5, 3.0, 6.0, 12.0]},
                      tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def llama_yarn_config():
    # yarn rope (factor 4 over original_max_position_embeddings 32, max_position_embeddings 128): the
    # ramp between the correction dims and the attention factor 0.1 ln 4 + 1 change every position.
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                       intermediate_size=160, vocab_size=VOCAB, rms_norm_eps=1e-5,
                       max_position_embeddings=128, tie_word_embeddings=False, rope_theta=10000.0,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 32})


def gpt_neo_config():
    # 20 heads (tp 1, 2, 4, 5, 10), head_dim 4; layers global, local, global, local with a window of 4
    # positions, shorter than the prompts, so the local mask changes the result; intermediate_size None
    # (4 * hidden); bos/eos inside the tiny vocabulary.
    from transformers import GPTNeoConfig
    return GPTNeoConfig(hidden_size=80, num_heads=20, num_layers=4,
                        attention_types=[[["global", "local"], 2]], window_size=4,
                        intermediate_size=None, vocab_size=VOCAB, max_position_embeddings=128,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5,
                        bos_token_id=0, eos_token_id=0)


def starcoder2_config():
    # LayerNorm with bias, biases on q/k/v/o and on the non-gated gelu_pytorch_tanh MLP (c_fc / c_proj),
    # GQA 8/2 (KV groups split at tp 3), sliding_window 6 on every layer (shorter than the prompts),
    # tied embeddings (Starcoder2Config's default).
    from transformers import Starcoder2Config
    return Starcoder2Config(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                            intermediate_size=160, vocab_size=VOCAB, norm_epsilon=1e-5, max_position_embeddings=128,
                            rope_theta=10000.0, sliding_window=6, use_bias=True, tie_word_embeddings=True,
                            bos_token_id=0, eos_token_id=0)


def gptj_config():
    # 4 heads of head_dim 16 with rotary_dim 8 (GPT-J-6B: 64 of 256): the interleaved rotary pairs on
    # part of each head; one ln_1 for the parallel attention and MLP; lm_head with a bias; untied.
    from transformers import GPTJConfig
    return GPTJConfig(n_embd=64, n_head=4, n_layer=2, rotary_dim=8, n_inner=None, vocab_size=VOCAB,
                      n_positions=128, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)


def falcon_config(new_decoder):
    # new_decoder: Falcon-40B's layout (query_key_value per KV group, GQA 8/2 split inside a group at tp 3,
    # ln_attn / ln_mlp, biases on every linear layer); otherwise Falcon-7B's (multi-query: one KV head, one
    # input_layernorm for both parallel branches, no bias). Tied embeddings (FalconConfig's default).
    from transformers import FalconConfig
    kw = dict(hidden_size=64, num_attention_heads=8, num_hidden_layers=2, vocab_size=VOCAB,
              layer_norm_epsilon=1e-5, max_position_embeddings=128, ffn_hidden_size=160, bos_token_id=0,
              eos_token_id=0, alibi=False, parallel_attn=True)
    if new_decoder:
        return FalconConfig(**kw, new_decoder_architecture=True, num_kv_heads=2, bias=True)
    return FalconConfig(**kw, new_decoder_architecture=False, multi_query=True, bias=False)


def gemma2_config():
    # 4 layers local (sliding_window 6, shorter than the prompts), global, local, global (Gemma2Config's
    # default layer_types); GQA 4/2 with head_dim 32 (hidden / heads = 16); query_pre_attn_scalar 24, so the
    # score scale is not 1/sqrt(head_dim); soft-caps that bite at this scale: attention scores reach about
    # 5 (cap 4: 5 -> 3.4), last logits about 18 (cap 10); tied embeddings (the default).
    from transformers import Gemma2Config
    return Gemma2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                        num_hidden_layers=4, intermediate_size=160, vocab_size=VOCAB, max_position_embeddings=128,
                        rms_norm_eps=1e-6, rope_theta=10000.0, query_pre_attn_scalar=24, sliding_window=6,
                        attn_logit_softcapping=4.0, final_logit_softcapping=10.0,
                        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)


def olmo2_config():
    # no pre-norms, post_attention_layernorm / post_feedforward_layernorm after each sub-block; q_norm /
    # k_norm over the whole q / k projection (all heads); GQA 8/2 (KV groups split at tp 3, replicated at
    # tp 4); untied.
    from transformers import Olmo2Config
    return Olmo2Config(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                       intermediate_size=160, vocab_size=VOCAB, rms_norm_eps=1e-6, max_position_embeddings=128,
                       rope_theta=500000.0, tie_word_embeddings=False, pad_token_id=0, bos_token_id=None,
                       eos_token_id=0)


def mixtral_config():
    # 8 experts, top-2 per token, each expert's MLP 96 wide (split like a dense MLP); GQA 8/2;
    # sliding_window 6 on every layer (shorter than the prompts); untied.
    from transformers import MixtralConfig
    return MixtralConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                         intermediate_size=96, num_local_experts=8, num_experts_per_tok=2, vocab_size=VOCAB,
                         rms_norm_eps=1e-5, max_position_embeddings=128, rope_theta=1000000.0,
                         sliding_window=6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)


def make_model(config, seed):
    """Random init, then every parameter += normal noise: 1-D (norm weights, biases) std 0.1,
    so norm weights are ~1 +- 0.1 and biases are non-zero; matrices std 1/sqrt(fan_in), so each
    layer changes the residual stream substantially; the embedding / lm_head std 3/sqrt(hidden),
    so logits spread over several units and greedy choices are not near-ties."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                std = 0.1
            elif "embed" in name or "lm_head" in name or name.endswith(".wte.weight"):
                std = 3.0 / p.shape[-1] ** 0.5
            else:
                std = 1.0 / p.shape[-1] ** 0.5  # fan_in: the last dim (also of stacked expert weights)
            p.add_(torch.randn(p.shape, dtype=p.dtype) * std)
    return model.eval()


def greedy(model, ids, n_new):
    """Argmax decoding with full recompute at each step (no EOS stop). Returns (new ids,
    smallest top1-top2 logit margin)."""
    seq = list(ids)
    margin = float("inf")
    with torch.no_grad():
        for _ in range(n_new):
            logits = model(torch.tensor([seq])).logits[0, -1].float()
            top = torch.topk(logits, 2)
            margin = min(margin, float(top.values[0] - top.values[1]))
            seq.append(int(top.indices[0]))
    return seq[len(ids):], margin


def reference(model, vocab_size, seed, lengths=PROMPT_LENGTHS):
    import transformers
    g = torch.Generator().manual_seed(1000 + seed)
    prompts = [torch.randint(0, vocab_size, (n,), generator=g).tolist() for n in lengths]
    ref = {"prompts": prompts, "last_logits": [], "greedy": [], "greedy_min_margin": None,
           "transformers_version": transformers.__version__, "torch_version": torch.__version__}
    margins = []
    with torch.no_grad():
        for p in prompts:
            logits = model(torch.tensor([p])).logits[0, -1].float()
            ref["last_logits"].append([float(x) for x in logits.tolist()])
            new, m = greedy(model, p, GREEDY_NEW_TOKENS)
            # Cross-check against transformers' own greedy generate (kv_cache path).
            out = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 do_sample=False, max_new_tokens=GREEDY_NEW_TOKENS,
                                 eos_token_id=None, pad_token_id=0)
            gen = out[0, len(p):].tolist()
            if gen != new:
                print(f"  warning: generate() {gen} differs from argmax loop {new}")
            ref["greedy"].append(new)
            margins.append(m)
    ref["greedy_min_margin"] = min(margins)
    return ref


def save(model, out_dir, ref=None, **save_kw):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True, **save_kw)
    if ref is not None:
        with open(os.path.join(out_dir, "reference.json"), "w") as f:
            json.dump(ref, f)
    for name in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, name), 0o644)
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}, {size / 1024:.0f} KiB")


def pick_seed(name, config, first_seed):
    """The first seed whose greedy decoding has no near-tie; returns (model, reference)."""
    for seed in range(first_seed, first_seed + MAX_SEED_TRIES):
        model = make_model(config, seed)
        ref = reference(model, config.vocab_size, seed)
        if ref["greedy_min_margin"] >= MIN_MARGIN:
            ref["seed"] = seed
            print(f"{name}: seed {seed}, greedy_min_margin {ref['greedy_min_margin']:.4g}")
            return model, ref
    raise SystemExit(f"{name}: no seed in {MAX_SEED_TRIES} tries gives margin >= {MIN_MARGIN}")


def save_tensors(out_dir, tensors, config, ref):
    """A checkpoint directory written without transformers' classes: config.json, model.safetensors
    and reference.json."""
    from safetensors.torch import save_file
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    for name, obj in (("config.json", config), ("reference.json", ref)):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(obj, f, indent=2 if name == "config.json" else None)
    for name in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, name), 0o644)
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}, {size / 1024:.0f} KiB")


def internlm2_fixture(out_dir):
    """A GQA Llama (8 heads, 2 KV heads, q/k/v/o biases) repacked into InternLM2's layout: the inverse of
    the published InternLM2 -> Llama conversion. wqkv holds, per KV group g, its 4 query heads, then its
    key head, then its value head. The reference is the Llama's (transformers has no InternLM2 class);
    reference.json also holds transformers' dynamic NTK inv_freq past and within max_position_embeddings."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    nh, nkv, hidden, inter, layers, max_pos = 8, 2, 64, 160, 2, 128
    config = LlamaConfig(hidden_size=hidden, num_attention_heads=nh, num_key_value_heads=nkv,
                         num_hidden_layers=layers, intermediate_size=inter, vocab_size=VOCAB,
                         rms_norm_eps=1e-5, max_position_embeddings=max_pos, rope_theta=10000.0,
                         attention_bias=True, mlp_bias=False, tie_word_embeddings=False)
    model, ref = pick_seed("tiny-internlm2", config, 600)
    hd, groups = hidden // nh, nh // nkv
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    t = {"model.tok_embeddings.weight": sd["model.embed_tokens.weight"],
         "model.norm.weight": sd["model.norm.weight"], "output.weight": sd["lm_head.weight"]}
    for l in range(layers):
        s, d = f"model.layers.{l}.", f"model.layers.{l}."
        for kind in ("weight", "bias"):
            q, k, v = (sd[s + f"self_attn.{x}_proj.{kind}"] for x in "qkv")
            rows = []
            for g in range(nkv):
                rows += [q[g * groups * hd:(g + 1) * groups * hd], k[g * hd:(g + 1) * hd], v[g * hd:(g + 1) * hd]]
            t[d + f"attention.wqkv.{kind}"] = torch.cat(rows, dim=0)
            t[d + f"attention.wo.{kind}"] = sd[s + f"self_attn.o_proj.{kind}"]
        t[d + "attention_norm.weight"] = sd[s + "input_layernorm.weight"]
        t[d + "ffn_norm.weight"] = sd[s + "post_attention_layernorm.weight"]
        for ours, theirs in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            t[d + f"feed_forward.{ours}.weight"] = sd[s + f"mlp.{theirs}.weight"]
    cfg = {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "bias": True,
           "hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": nh,
           "num_key_value_heads": nkv, "num_hidden_layers": layers, "vocab_size": VOCAB,
           "max_position_embeddings": max_pos, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "rope_scaling": {"type": "dynamic", "factor": 2.0}, "hidden_act": "silu",
           "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
           "pad_token_id": 2}
    dyn = LlamaConfig(hidden_size=hidden, num_attention_heads=nh, max_position_embeddings=max_pos,
                      rope_theta=10000.0, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    ref["dynamic_ntk"] = []
    for seq_len in (100, 128, 129, 200, 1000):
        inv, _ = ROPE_INIT_FUNCTIONS["dynamic"](dyn, None, seq_len=torch.tensor(seq_len))
        ref["dynamic_ntk"].append({"seq_len": seq_len, "inv_freq": [float(x) for x in inv.tolist()]})
    save_tensors(out_dir, t, cfg, ref)


def nvlm_d_fixture(out_dir):
    """A tiny Qwen2 in NVLM-D's layout: config.json architectures ["NVLM_D"] with the Qwen2 config under
    llm_config (its dtype only at the top level), tensors under language_model.model.* and
    language_model.lm_head.*, plus a dummy vision tower (vision_model.*) and projector (mlp1.*). The
    reference is the plain Qwen2ForCausalLM on the same weights."""
    config = qwen2_config()
    model, ref = pick_seed("tiny-nvlm-d", config, 700)
    t = {"language_model." + k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(7)
    for name, shape in (("vision_model.embeddings.patch_embedding.weight", (32, 3, 4, 4)),
                        ("vision_model.encoder.layers.0.mlp.fc1.weight", (64, 32)),
                        ("vision_model.encoder.layers.0.mlp.fc1.bias", (64,)),
                        ("mlp1.0.weight", (128,)), ("mlp1.1.weight", (64, 128)), ("mlp1.1.bias", (64,))):
        t[name] = torch.randn(shape, generator=g)
    llm = config.to_dict()
    llm["architectures"] = ["Qwen2ForCausalLM"]
    for key in ("dtype", "torch_dtype", "transformers_version"):
        llm.pop(key, None)
    cfg = {"architectures": ["NVLM_D"], "model_type": "NVLM_D", "torch_dtype": "float32",
           "downsample_ratio": 0.5, "select_layer": -1, "template": "chatml",
           "llm_config": llm,
           "vision_config": {"architectures": ["InternVisionModel"], "hidden_size": 32, "num_hidden_layers": 1,
                             "image_size": 16, "patch_size": 4}}
    save_tensors(out_dir, t, cfg, ref)


REPACKED = {"tiny-internlm2": internlm2_fixture, "tiny-nvlm-d": nvlm_d_fixture}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_root")
    ap.add_argument("--only", default="", help="comma-separated fixture names to write (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out_root, exist_ok=True)
    path = lambda name: os.path.join(args.out_root, name)
    only = [n for n in args.only.split(",") if n]

    fixtures = [
        ("tiny-gpt-neox-par", neox_config(parallel=True), 100),
        ("tiny-gpt-neox-seq", neox_config(parallel=False), 200),
        ("tiny-llama", llama_config(llama3_rope=False), 300),
        ("tiny-llama3-rope", llama_config(llama3_rope=True), 400),
        ("tiny-qwen2", qwen2_config(), 500),
        ("tiny-gpt-neo", gpt_neo_config(), 600),
        ("tiny-mistral-swa", mistral_swa_config(), 800),
        ("tiny-llama-yarn", llama_yarn_config(), 900),
        ("tiny-phi3", phi3_config(), 1000),
        ("tiny-phi3-longrope", phi3_longrope_config(), 1800),
        ("tiny-qwen3", qwen3_config(), 1100),
        ("tiny-starcoder2", starcoder2_config(), 1200),
        ("tiny-gptj", gptj_config(), 1300),
        ("tiny-falcon", falcon_config(new_decoder=True), 1400),
        ("tiny-falcon-mq", falcon_config(new_decoder=False), 1500),
        ("tiny-gemma2", gemma2_config(), 1400),
        ("tiny-olmo2", olmo2_config(), 1600),
        ("tiny-mixtral", mixtral_config(), 1700),
        ("tiny-llama-hd64", llama_hd64_config(), 1900),
    ]
    known = [f[0] for f in fixtures] + list(REPACKED)
    for n in only:
        if n not in known:
            raise SystemExit(f"--only: unknown fixture {n!r}; known: {', '.join(known)}")
    for name, config, first_seed in fixtures:
        if only and name not in only:
            continue
        # Take the first seed whose greedy decoding has no near-tie (top1 - top2 logit gap
        # >= MIN_MARGIN at every step), so a correct fp32 runtime reproduces it exactly.
        for seed in range(first_seed, first_seed + MAX_SEED_TRIES):
            model = make_model(config, seed)
            ref = reference(model, config.vocab_size, seed, PROMPT_LENGTHS_OF.get(name, PROMPT_LENGTHS))
            ok = ref["greedy_min_margin"] >= MIN_MARGIN
            if ok and name == "tiny-llama":
                # bf16 copy; its reference is the bf16 weights upcast to fp32, run in fp32.
                model_bf16 = make_model(config, seed).to(torch.bfloat16)
                model_up = make_model(config, seed)
                model_up.load_state_dict({k: v.float() for k, v in model_bf16.state_dict().items()})
                ref_bf16 = reference(model_up, config.vocab_size, seed)
                ok = ref_bf16["greedy_min_margin"] >= MIN_MARGIN
            if ok:
                break
        else:
            raise SystemExit(f"{name}: no seed in {MAX_SEED_TRIES} tries gives margin >= {MIN_MARGIN}")
        ref["seed"] = seed
        print(f"{name}: seed {seed}, greedy_min_margin {ref['greedy_min_margin']:.4g}")
        if name in ("tiny-llama-yarn", "tiny-phi3-longrope"):
            # transformers' inv_freq and attention_scaling, for the rope table tests
            rot = model.model.rotary_emb
            key = "yarn" if name == "tiny-llama-yarn" else "longrope"
            ref[key + "_inv_freq"] = [float(x) for x in rot.inv_freq.tolist()]
            ref[key + "_attention_scaling"] = float(rot.attention_scaling)
        save(model, path(name), ref)

        if name == "tiny-llama":
            # Same weights in 3 safetensors files + model.safetensors.index.json.
            save(model, path("tiny-llama-sharded"), ref, max_shard_size="200KB")
            n_files = len([n for n in os.listdir(path("tiny-llama-sharded")) if n.endswith(".safetensors")])
            if n_files != 3:
                raise SystemExit(f"tiny-llama-sharded: expected 3 shard files, got {n_files}")
            ref_bf16["seed"] = seed
            print(f"tiny-llama-bf16: seed {seed}, greedy_min_margin {ref_bf16['greedy_min_margin']:.4g}")
            save(model_bf16, path("tiny-llama-bf16"), ref_bf16)

    for name, make in REPACKED.items():
        if not only or name in only:
            make(path(name))

if __name__ == "__main__":
    main()
