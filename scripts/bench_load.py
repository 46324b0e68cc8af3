#!/usr/bin/env python3
"""bench_load.py: how fast weights reach the GPU: tprun bench-load vs the safetensors loaders.

Runs ON the GPU machine (torch, transformers, safetensors installed; tpshard/tprun built elsewhere;
the peer loaders instanttensor, fastsafetensors and runai-model-streamer when importable, e.g. from
wheels carried to the machine).
  1. Writes random-weight Hugging Face checkpoints of real shapes: Pythia-1.4B (GPT-NeoX, fp16),
     Llama-2-7B (bf16) with --llama-layers layers (default 8 of 32; the per-layer tensors have the real
     7B shapes) and GPT-NeoX-20B (fp16, all 44 layers, 41 GB: in files of at most 4 GB with an index,
     as published checkpoints are; put its shards on another file system with --shards-work when the
     disk cannot hold both copies, e.g. --work /tmp/bl --shards-work /dev/shm/bl).
  2. Converts each with `tpshard convert --tp` the sizes of --tp (default 1,2 where two GPUs exist, else 1).
  3. Warm page cache (every file read once first), best of --repeat loads, all in this one run:
       tprun MODEL --tp N bench-load --no-runner   (per-rank load into one arena; tp > 1: slowest rank)
       tprun ... --no-verify                        (the cost of the XXH3 check)
       safetensors.torch.load_file(f, device="cuda"), instanttensor.safe_open, fastsafetensors
       (fastsafe_open, nogds), runai_model_streamer.SafetensorsStreamer (device="cuda"), transformers
       AutoModelForCausalLM.from_pretrained(dir, device_map="cuda")
     tp sizes above the GPU count run their ranks on the GPUs in turn (TPSHARD_TEST_SHARE_GPUS=1): the
     host side (page cache reads, hashing, pinned copies) is then what is measured.
     Cold cache (drop_caches) only when /proc/sys/vm/drop_caches is writable; the table says which. The
     disk reference of the cold rows: dd of the shard file with O_DIRECT (8 MiB blocks) after drop_caches.
  4. Prints ONE markdown table, with the ratio of tprun's best verified load to the best peer of the
     same model and cache state. Times are of the load itself (CUDA context already up, as in
     bench-load, which starts its clock after the context and the communicator exist); "wall" columns
     include process start, context creation and (tp > 1) communicator init.
Usage: python3 scripts/bench_load.py --bin BUILD/bin [--work /tmp/tpshard_bench] [--repeat 3] [--tp 1,2,4]
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


GEN_DEVICE = os.environ.get("BENCH_GEN_DEVICE", "cuda")  # where random weights are drawn ("cpu" to test the script)
FILE_BYTES = 4 << 30  # the largest safetensors file written (published checkpoints split at 2-10 GB)


def make_checkpoint(kind, out_dir, llama_layers):
    """Random weights (normal * 0.02, norms = 1) with the parameter names and shapes transformers uses."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, GPTNeoXConfig, LlamaConfig

    if kind == "pythia-1.4b":
        dtype = torch.float16
        cfg = GPTNeoXConfig(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192,
                            vocab_size=50304, rotary_pct=0.25, max_position_embeddings=2048,
                            use_parallel_residual=True, tie_word_embeddings=False, hidden_act="gelu")
    elif kind == "gpt-neox-20b":
        dtype = torch.float16
        cfg = GPTNeoXConfig(hidden_size=6144, num_hidden_layers=44, num_attention_heads=64, intermediate_size=24576,
                            vocab_size=50432, rotary_pct=0.25, max_position_embeddings=2048,
                            use_parallel_residual=True, tie_word_embeddings=False, hidden_act="gelu")
    elif kind == "llama-7b":
        dtype = torch.bfloat16
        cfg = LlamaConfig(hidden_size=4096, num_hidden_layers=llama_layers, num_attention_heads=32,
                          num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                          max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False)
    else:
        raise SystemExit(f"unknown model {kind}: use pythia-1.4b, llama-7b or gpt-neox-20b")
    for attr in ("dtype", "torch_dtype"):  # transformers 5 spells it dtype; 4.x torch_dtype
        try:
            setattr(cfg, attr, dtype)
            break
        except Exception:
            pass
    cfg.architectures = [type(cfg).__name__.replace("Config", "ForCausalLM")]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator(device=GEN_DEVICE).manual_seed(0)
    os.makedirs(out_dir, exist_ok=True)
    tensors, files, weight_map, nbytes, file_bytes = {}, [], {}, 0, 0

    def flush():  # one file of at most FILE_BYTES (renamed to the -0000k-of-0000n form at the end)
        nonlocal tensors, file_bytes
        if tensors:
            files.append(f"part{len(files)}.safetensors")
            save_file(tensors, os.path.join(out_dir, files[-1]), metadata={"format": "pt"})
            weight_map.update({n: files[-1] for n in tensors})
        tensors, file_bytes = {}, 0
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name or name.endswith("ln_f.weight"):
            t = torch.ones(p.shape, dtype=dtype, device=GEN_DEVICE)
        elif name.endswith(".bias"):
            t = torch.zeros(p.shape, dtype=dtype, device=GEN_DEVICE)
        else:
            t = (torch.randn(p.shape, generator=gen, device=GEN_DEVICE, dtype=torch.float32) * 0.02).to(dtype)
        if kind in ("pythia-1.4b", "gpt-neox-20b") and name == "lm_head.weight":
            name = "embed_out.weight"  # the name in every published Pythia checkpoint (transformers 5 maps it back)
        size = t.numel() * t.element_size()
        if file_bytes + size > FILE_BYTES:
            flush()
        tensors[name] = t.cpu().contiguous()
        file_bytes += size
        nbytes += size
    flush()
    if len(files) == 1:
        os.rename(os.path.join(out_dir, files[0]), os.path.join(out_dir, "model.safetensors"))
    else:
        names = {f: f"model-{i + 1:05d}-of-{len(files):05d}.safetensors" for i, f in enumerate(files)}
        for f, n in names.items():
            os.rename(os.path.join(out_dir, f), os.path.join(out_dir, n))
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": nbytes}, "weight_map": {k: names[v] for k, v in weight_map.items()}}, f)
    cfg.save_pretrained(out_dir)
    del tensors, model
    return dtype, nbytes


def safetensors_files(hf_dir):
    return sorted(os.path.join(hf_dir, f) for f in os.listdir(hf_dir) if f.endswith(".safetensors"))


def read_all(path):
    """Bring a directory's files into the page cache."""
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(64 << 20):
                    pass


def try_drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def tprun_bench(bin_dir, model_dir, tp, repeat, extra=()):
    cmd = [os.path.join(bin_dir, "tprun"), model_dir, "--tp", str(tp), "--device", "cuda", "bench-load",
           "--no-runner", "--json", "--repeat", str(repeat), *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    log(p.stdout)
    return rows, wall


def time_safetensors(paths, repeat):
    """Best time of safetensors' load_file(device="cuda") of every file in paths, all kept until the end."""
    import torch
    from safetensors.torch import load_file
    best = 1e30
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        sd = [load_file(path, device="cuda") for path in paths]
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
        del sd
        torch.cuda.empty_cache()
    return best


def time_peer(kind, paths, repeat):
    """Best load time of a peer safetensors loader onto cuda:0 of every file in paths (tensors kept until
    the clock stops), or raises ImportError when the package is missing."""
    import torch
    best = 1e30
    for _ in range(repeat):
        out = {}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for path in paths:
            peer_load(kind, path, out)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
        del out
        torch.cuda.empty_cache()
    return best


def peer_load(kind, path, out):
    """One file into out (name -> cuda tensor) by a peer loader."""
    if kind == "instanttensor":
        from instanttensor import safe_open
        with safe_open(path, framework="pt", device=0) as f:  # copy=True (default): owned tensors
            for name, t in f.tensors():
                out[name] = t
    elif kind == "fastsafetensors":
        from fastsafetensors import fastsafe_open
        with fastsafe_open(filenames=[path], framework="pt", device="cuda:0", nogds=True) as f:
            for name in f.keys():
                out[name] = f.get_tensor(name)
    elif kind == "runai":
        from runai_model_streamer import SafetensorsStreamer
        with SafetensorsStreamer() as st:
            st.stream_file(path, device="cuda")
            for name, t in st.get_tensors():
                out[name] = t
    else:
        raise ValueError(kind)


PEERS = (("instanttensor", "instanttensor.safe_open(device=0)"),
         ("fastsafetensors", "fastsafetensors fastsafe_open(nogds)"),
         ("runai", "runai_model_streamer SafetensorsStreamer(device=cuda)"))


def disk_read_gbps(path):
    """The disk's sequential O_DIRECT read rate of one file (dd, 8 MiB blocks), after drop_caches."""
    try_drop_caches()
    t0 = time.perf_counter()
    p = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=8M", "iflag=direct"], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        return None
    return os.path.getsize(path) / dt / 1e9


def time_transformers(hf_dir, dtype, repeat):
    import torch
    from transformers import AutoModelForCausalLM
    best = 1e30
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            m = AutoModelForCausalLM.from_pretrained(hf_dir, device_map="cuda", dtype=dtype)
        except TypeError:
            m = AutoModelForCausalLM.from_pretrained(hf_dir, device_map="cuda", torch_dtype=dtype)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
        del m
        torch.cuda.empty_cache()
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory with tpshard and tprun")
    ap.add_argument("--work", default="/tmp/tpshard_bench")
    ap.add_argument("--shards-work", default=None, help="where converted shards go (default: --work)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--llama-layers", type=int, default=8)
    ap.add_argument("--models", default="pythia-1.4b,llama-7b")
    ap.add_argument("--tp", default=None, help="tp sizes to convert and load, e.g. 1,2,4 (default: 1,2 with two GPUs, else 1)")
    ap.add_argument("--no-peers", action="store_true", help="skip instanttensor / fastsafetensors / runai")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache rows")
    ap.add_argument("--variant", action="append", default=[],
                    help="extra bench-load options measured as one more tp 1 row each, hashes verified "
                         "(repeatable), e.g. --variant='--hash-impl sse2' --variant='--ring-mib 1'")
    args = ap.parse_args()
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # context up before timing, as for bench-load
    ngpu = torch.cuda.device_count()
    tps = [int(x) for x in args.tp.split(",")] if args.tp else ([1, 2] if ngpu >= 2 else [1])
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if max(tps) > ngpu:
        os.environ["TPSHARD_TEST_SHARE_GPUS"] = "1"  # ranks take the GPUs in turn: the host side is measured

    shutil.rmtree(args.work, ignore_errors=True)
    if args.shards_work:
        shutil.rmtree(args.shards_work, ignore_errors=True)
    rows = []  # (model, method, tp, seconds, gbps, wall, note)

    class Rows(list):
        def append(self, r):  # also log each row as it is measured (survives a timeout)
            log("row:", r)
            super().append(r)
    rows = Rows()
    cold_ok = None
    for kind in args.models.split(","):
        t0 = time.perf_counter()
        hf = os.path.join(args.work, kind + "-hf")
        out = os.path.join(args.shards_work or args.work, kind + "-tps")
        dtype, nbytes = make_checkpoint(kind, hf, args.llama_layers)
        log(f"{kind}: wrote {nbytes / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s")
        t1 = time.perf_counter()
        conv = subprocess.run([os.path.join(args.bin, "tpshard"), "convert", hf, "-o", out, "--tp",
                               ",".join(map(str, tps))], capture_output=True, text=True, timeout=600)
        if conv.returncode != 0:
            raise RuntimeError(f"tpshard convert failed:\n{conv.stderr[-3000:]}")
        log(f"{kind}: converted in {time.perf_counter() - t1:.1f} s")
        label = kind if kind != "llama-7b" else f"llama-7b ({args.llama_layers} of 32 layers)"
        read_all(hf)
        read_all(out)
        for tp in tps:
            for verify in (True, False):
                extra = () if verify else ("--no-verify",)
                rr, wall = tprun_bench(args.bin, out, tp, args.repeat, extra)
                slow = max(r["load_s"] for r in rr)
                total = sum(r["file_mib"] for r in rr) * (1 << 20)
                rss = max(r["rss_peak_mib"] for r in rr)
                note = ("hashes verified" if verify else "no hash check") + f"; peak RSS {rss:.0f} MiB/rank"
                note += f"; summed over readers: read {rr[0]['read_s']:.2f} s, hash {rr[0]['hash_s']:.2f} s; setup {rr[0]['setup_s']:.3f} s"
                if tp > 1:
                    note += (f"; ranks {min(r['load_s'] for r in rr):.3f}-{slow:.3f} s "
                             f"(spread {100 * (slow / min(r['load_s'] for r in rr) - 1):.0f}%), per rank "
                             f"{min(r['gbps'] for r in rr):.1f}-{max(r['gbps'] for r in rr):.1f} GB/s"
                             + (f", {tp} ranks on {ngpu} GPU(s)" if tp > ngpu else ""))
                rows.append((label, "tprun bench-load", tp, slow, total / slow / 1e9, wall, note))
        for variant in args.variant:
            rr, wall = tprun_bench(args.bin, out, 1, args.repeat, tuple(variant.split()))
            r = rr[0]
            rows.append((label, f"tprun bench-load {variant}", 1, r["load_s"], r["file_mib"] * (1 << 20) / r["load_s"] / 1e9,
                         wall, f"hashes verified; summed over {r['readers']} readers: read {r['read_s']:.2f} s, "
                               f"hash {r['hash_s']:.2f} s; setup {r['setup_s']:.3f} s"))
        st = time_safetensors(safetensors_files(hf), args.repeat)
        rows.append((label, "safetensors load_file(device=cuda)", 1, st, nbytes / st / 1e9, None, "one process; peer"))
        if not args.no_peers:
            for peer, name in PEERS:
                try:
                    pt = time_peer(peer, safetensors_files(hf), args.repeat)
                    rows.append((label, name, 1, pt, nbytes / pt / 1e9, None, "one process; peer"))
                except Exception as e:  # a missing or failing peer is a row that says so
                    log(f"{peer}: {type(e).__name__}: {e}")
                    rows.append((label, name, 1, float("nan"), float("nan"), None,
                                 f"not measured: {type(e).__name__}: {str(e)[:120]}"))
        tf = time_transformers(hf, dtype, max(1, min(2, args.repeat)))
        rows.append((label, "transformers from_pretrained(device_map=cuda)", 1, tf, nbytes / tf / 1e9, None,
                     "one process; peer"))
        if not args.no_cold and try_drop_caches():
            cold_ok = True
            shards = [os.path.join(r, f) for r, _, fs in os.walk(out) for f in fs if f.endswith(".tps")]
            shard = max(shards, key=os.path.getsize) if shards else None
            if shard:
                g = disk_read_gbps(shard)
                if g:
                    rows.append((label, "dd iflag=direct bs=8M (the disk)", 1, os.path.getsize(shard) / g / 1e9, g, None,
                                 "COLD: disk reference, one shard file"))
            for extra, what in (((), "page-cache reads (pread)"), (("--direct-io", "--io", "pread"), "O_DIRECT pread"),
                                (("--direct-io",), "O_DIRECT io_uring depth 4"),
                                (("--direct-io", "--queue-depth", "8", "--ring-mib", "8", "--ring-buffers", "64"),
                                 "O_DIRECT io_uring depth 8, 8 MiB reads")):
                try_drop_caches()
                rr, wall = tprun_bench(args.bin, out, 1, 1, extra)
                rows.append((label, f"tprun bench-load {' '.join(extra)}".strip(), 1, rr[0]["load_s"],
                             rr[0]["file_mib"] * (1 << 20) / rr[0]["load_s"] / 1e9, wall,
                             f"COLD: {what}; hashes verified; read by {rr[0].get('io', '?')}"))
            try_drop_caches()
            st = time_safetensors(safetensors_files(hf), 1)
            rows.append((label, "safetensors load_file(device=cuda)", 1, st, nbytes / st / 1e9, None, "COLD; peer"))
            if not args.no_peers:
                for peer, name in PEERS:
                    try_drop_caches()
                    try:
                        pt = time_peer(peer, safetensors_files(hf), 1)
                        rows.append((label, name, 1, pt, nbytes / pt / 1e9, None, "COLD; peer"))
                    except Exception as e:
                        rows.append((label, name, 1, float("nan"), float("nan"), None,
                                     f"COLD; not measured: {type(e).__name__}: {str(e)[:120]}"))
        else:
            cold_ok = False
        shutil.rmtree(hf, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)

    print()
    print(f"GPU: {torch.cuda.get_device_name(0)} x {ngpu}; warm page cache; best of {args.repeat} "
          f"(transformers: best of {max(1, min(2, args.repeat))}); cold cache: "
          + ("measured (drop_caches worked)" if cold_ok else "NOT measured (drop_caches not permitted here)"))
    # tprun vs the best peer of the same model and cache state (peers: rows whose note says "peer").
    def state(note):
        return "cold" if note.startswith("COLD") else "warm"
    best_peer = {}
    for m, meth, tp, sec, gbps, wall, note in rows:
        if "peer" in note and gbps == gbps:
            k = (m, state(note))
            best_peer[k] = max(best_peer.get(k, 0.0), gbps)
    print("| model | method | tp | load s | GB/s | vs best peer | wall s (process) | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for m, meth, tp, sec, gbps, wall, note in rows:
        ratio = ""
        if meth.startswith("tprun") and gbps == gbps and best_peer.get((m, state(note))):
            ratio = f"{gbps / best_peer[(m, state(note))]:.2f}x"
        print(f"| {m} | {meth} | {tp} | {sec:.3f} | {gbps:.2f} | {ratio} | {'' if wall is None else f'{wall:.2f}'} | {note} |")


if __name__ == "__main__":
    main()
