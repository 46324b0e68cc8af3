#!/usr/bin/env python3
"""bench_serve.py: the same few-shot prompts answered by a batch job and by `tprun serve` under concurrent clients.

For one converted model, in one run on one machine:
  1. batch job: `tprun MODEL generate --input prompts.jsonl --output out.jsonl` (--max-batch B, greedy,
     --max-new-tokens T, --ignore-eos): the reference texts and the batch job's requests/s;
  2. server: `tprun MODEL serve --max-batch B` on 127.0.0.1 and C client threads (default 48), each sending
     its next prompt to /v1/completions (temperature 0, max_tokens T, ignore_eos) as soon as the last one
     is answered, until every prompt has been answered once: requests/s, completion tokens/s, latency p50
     / p99, and how many answers equal the batch job's text.
Prints ONE markdown table (batch job vs server) and exits 1 when an answer differs or a request failed.
Prompts: TriviaQA 5-shot with fixed shots (tests/fixtures/triviaqa samples, the first 5 as shots, the 32
questions repeated --repeat times). Standard library only, except --gpu-model (on the GPU machine: a
random-weight checkpoint of that shape made and converted by scripts/bench_shared_prefix.py's helpers).

    python3 scripts/bench_serve.py --bin build/bin --model MODEL_DIR [--device cpu] [--clients 48] [--repeat 30]
    python3 scripts/bench_serve.py --bin build/bin --gpu-model llama-7b --device cuda --work /tmp/bserve
"""
import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "tests", "fixtures", "triviaqa", "validation_sample.hf_layout.jsonl")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def prompts(repeat, shots=5):
    """The 5-shot prompts of bench_shared_prefix.py: fixed shots (the first records), every sample question."""
    with open(SAMPLE) as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    prefix = "".join(f"Question: {r['question']}\nAnswer: {r['answer']['value']}\n\n" for r in recs[:shots])
    return [prefix + f"Question: {r['question']}\nAnswer:" for _ in range(repeat) for r in recs]


def batch_job(args, texts):
    """`tprun generate --input`: (wall seconds of generation from its summary, texts in input order)."""
    inp, out = os.path.join(args.work, "prompts.jsonl"), os.path.join(args.work, "batch_out.jsonl")
    with open(inp, "w") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": i, "prompt": t}) + "\n")
    if os.path.exists(out):
        os.remove(out)
    cmd = base_cmd(args) + ["generate", "--input", inp, "--output", out, "--max-new-tokens", str(args.max_tokens),
                            "--ignore-eos", "--batch-size", str(args.max_batch)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench_serve: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    m = re.search(r"(\d+) tokens in ([0-9.]+) s", p.stdout + p.stderr)
    gen_s = float(m.group(2)) if m else wall
    with open(out) as fh:
        rows = {json.loads(line)["id"]: json.loads(line)["text"] for line in fh if line.strip()}
    return gen_s, wall, [rows[i] for i in range(len(texts))]


def base_cmd(args):
    cmd = [os.path.join(args.bin, "tprun"), args.model, "--tp", str(args.tp), "--device", args.device,
           "--max-batch", str(args.max_batch), "--max-seq-len", str(args.max_seq_len)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    return cmd


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else {}
    finally:
        c.close()


def wait_ready(port, proc, timeout):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            sys.exit(f"bench_serve: tprun serve exited ({proc.returncode}) before it was ready; see {proc.args}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"bench_serve: tprun serve not ready after {timeout} s")


def serve(args, texts):
    """C clients against `tprun serve`: (wall s, latencies s, answers, completion tokens, failures)."""
    port = free_port()
    err = open(os.path.join(args.work, "serve.stderr.txt"), "w")
    proc = subprocess.Popen(base_cmd(args) + ["serve", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_ready(port, proc, args.ready_timeout)
        answers, lat = [None] * len(texts), [None] * len(texts)
        tokens, failures, lock, next_i = [0], [], threading.Lock(), [0]

        def client():
            while True:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= len(texts):
                    return
                body = {"prompt": texts[i], "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True}
                t0 = time.monotonic()
                try:
                    status, res = post(port, body, args.request_timeout)
                except OSError as e:
                    status, res = 0, {"error": str(e)}
                lat[i] = time.monotonic() - t0
                with lock:
                    if status != 200:
                        failures.append((i, status, res))
                        continue
                    answers[i] = res["choices"][0]["text"]
                    tokens[0] += res["usage"]["completion_tokens"]

        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        err.close()
    return wall, [x for x in lat if x is not None], answers, tokens[0], failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory with tprun (and tpshard for --gpu-model)")
    ap.add_argument("--model", help="converted model directory")
    ap.add_argument("--gpu-model", choices=["pythia-1.4b", "llama-7b"], help="make a random-weight model of this shape")
    ap.add_argument("--llama-layers", type=int, default=32, help="--gpu-model llama-7b: layers (default 32)")
    ap.add_argument("--work", default="/tmp/tpshard_bench_serve")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="CPU: tprun --threads")
    ap.add_argument("--clients", type=int, default=48)
    ap.add_argument("--max-batch", type=int, default=48)
    ap.add_argument("--max-seq-len", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=30, help="the 32 sample questions repeated this many times")
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--request-timeout", type=float, default=600)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.gpu_model:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bench_shared_prefix import prepare_model
        _, args.model = prepare_model(args, args.gpu_model)
    if not args.model:
        sys.exit("bench_serve: give --model MODEL_DIR or --gpu-model SHAPE")
    texts = prompts(args.repeat)
    log(f"bench_serve: {len(texts)} prompts, {args.clients} clients, max_batch {args.max_batch}, {args.max_tokens} tokens")
    gen_s, batch_wall, ref = batch_job(args, texts)
    wall, lat, answers, tokens, failures = serve(args, texts)
    same = sum(a == r for a, r in zip(answers, ref))
    n = len(texts)
    print(f"\nmodel {args.model}, device {args.device}, tp {args.tp}, {n} prompts (TriviaQA 5-shot, fixed shots), "
          f"{args.max_tokens} new tokens, greedy, max_batch {args.max_batch}\n")
    print("| run | requests | seconds | requests/s | completion tok/s | latency p50 s | latency p99 s | same text as batch |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| batch job (generate --input) | {n} | {gen_s:.2f} (process {batch_wall:.2f}) | {n / gen_s:.1f} | "
          f"{n * args.max_tokens / gen_s:.0f} | - | - | - |")
    q = sorted(lat)
    p99 = q[min(len(q) - 1, int(0.99 * len(q)))] if q else 0
    print(f"| serve, {args.clients} clients | {n - len(failures)} | {wall:.2f} | {(n - len(failures)) / wall:.1f} | "
          f"{tokens / wall:.0f} | {statistics.median(q) if q else 0:.3f} | {p99:.3f} | {same}/{n} |")
    print(f"\nserve / batch job requests/s: {(n - len(failures)) / wall / (n / gen_s):.2f}")
    for i, status, res in failures[:5]:
        log(f"request {i}: status {status}: {json.dumps(res)[:300]}")
    return 0 if not failures and same == n else 1


if __name__ == "__main__":
    sys.exit(main())
