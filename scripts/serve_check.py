#!/usr/bin/env python3
"""serve_check.py: compare a running `tprun serve` with `tprun generate` and with itself (standard library only).

Sends, concurrently, greedy completions of a few prompts and checks each text equals the text that
`tprun MODEL generate --prompt P --max-new-tokens N --temperature 0` printed (given as --expect
PROMPT=FILE pairs), that a streamed completion adds up to the same text, and that echo + logprobs with
max_tokens 0 returns one null and then finite non-positive log-probabilities. Prints PASS/FAIL lines;
exit 1 on any FAIL. Used by scripts/gpu_check.sh on the CUDA backend.

    python3 scripts/serve_check.py --url http://127.0.0.1:8000 --max-tokens 24 --expect "Once upon a time=out1.txt" ...
"""
import argparse
import concurrent.futures
import json
import math
import sys
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--expect", action="append", default=[], help="PROMPT=FILE with tprun generate's stdout")
    args = ap.parse_args()
    pairs = [e.split("=", 1) for e in args.expect]
    fails = 0

    def check(ok, what):
        nonlocal fails
        print(("PASS " if ok else "FAIL ") + what)
        fails += 0 if ok else 1

    body = lambda p, **kw: dict(prompt=p, max_tokens=args.max_tokens, temperature=0, **kw)
    with concurrent.futures.ThreadPoolExecutor(len(pairs) * 2) as ex:
        futs = [ex.submit(post, args.url + "/v1/completions", body(p)) for p, _ in pairs * 2]
        got = [json.loads(f.result())["choices"][0]["text"] for f in futs]
    for i, (p, f) in enumerate(pairs * 2):
        want = open(f).read().rstrip("\n")
        check(got[i] == want, f"serve == generate for {p!r} (concurrent request {i}): {got[i]!r}")
    p = pairs[0][0]
    stream = post(args.url + "/v1/completions", body(p, stream=True))
    pieces = [json.loads(l[6:])["choices"][0]["text"] for l in stream.split("\n\n") if l.startswith("data: {")]
    check("".join(pieces) == got[0] and stream.rstrip().endswith("data: [DONE]"), f"stream adds up ({len(pieces)} events)")
    e = json.loads(post(args.url + "/v1/completions", dict(prompt=p, max_tokens=0, echo=True, logprobs=1)))
    lp = e["choices"][0]["logprobs"]["token_logprobs"]
    check(lp[0] is None and all(math.isfinite(x) and x <= 0 for x in lp[1:]), f"echo + logprobs: {lp}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
