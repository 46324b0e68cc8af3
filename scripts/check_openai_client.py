#!/usr/bin/env python3
"""check_openai_client.py: drive a running `tprun serve` with the official `openai` Python client.

Checks what clients rely on: /v1/models lists the served name, models.retrieve returns it (another name:
404); a greedy completion equals its streamed form, log-probabilities included; echo + logprobs with
max_tokens 0 (how lm-evaluation-harness scores a continuation) gives one null then one log-probability per
prompt token; chat completions (plain and
streamed) agree, and so do their logprobs (logprobs=True, top_logprobs=2: parsed token, bytes and
alternatives); top_logprobs without logprobs is refused; n = 2 with a seed gives choices 0 and 1 equal to
n = 1 with that seed and the next; n = 17 is refused with a 400. Prints one line per check and exits 1
when any fails.

    tprun MODEL_DIR --tp 2 serve --port 8000 &
    python3 scripts/check_openai_client.py --base-url http://127.0.0.1:8000/v1 [--no-chat]
"""
import argparse
import sys

import openai


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--no-chat", action="store_true", help="skip chat checks (a model without a chat template)")
    args = ap.parse_args()
    c = openai.OpenAI(base_url=args.base_url, api_key="unused")
    fails = 0

    def check(ok, what):
        nonlocal fails
        print(("PASS " if ok else "FAIL ") + what)
        fails += 0 if ok else 1

    models = [m.id for m in c.models.list()]
    check(len(models) == 1, f"/v1/models lists one model: {models}")
    model = models[0]
    m = c.models.retrieve(model)
    check(m.id == model and m.object == "model", f"models.retrieve({model!r}): {m.id}")
    try:
        c.models.retrieve("no-such-model")
        check(False, "models.retrieve of another name: no error")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "models.retrieve of another name: 404")
    r = c.completions.create(model=model, prompt="Once upon a time", max_tokens=16, temperature=0, logprobs=2)
    text = r.choices[0].text
    lp = r.choices[0].logprobs
    check(r.usage.completion_tokens == len(lp.tokens) == len(lp.token_logprobs),
          f"completion: {r.usage.completion_tokens} tokens with log-probabilities, finish {r.choices[0].finish_reason}")
    check(all(len(t) <= 2 for t in lp.top_logprobs), "completion: at most 2 top_logprobs per token")
    chunks = list(c.completions.create(model=model, prompt="Once upon a time", max_tokens=16, temperature=0,
                                       logprobs=2, stream=True))
    streamed = "".join(x.choices[0].text for x in chunks)
    check(streamed == text, f"stream == non-stream: {text!r}")
    slp = [x.choices[0].logprobs for x in chunks if x.choices[0].logprobs is not None]
    check([t for p in slp for t in p.tokens] == lp.tokens and
          all(abs(a - b) <= 1e-6 for a, b in zip([v for p in slp for v in p.token_logprobs], lp.token_logprobs)),
          f"streamed logprobs == non-streamed: {len(lp.tokens)} tokens in {len(slp)} chunks")
    uc = list(c.completions.create(model=model, prompt="Once upon a time", max_tokens=16, temperature=0, stream=True,
                                   stream_options={"include_usage": True}))
    check(all(x.usage is None for x in uc[:-1]) and not uc[-1].choices and uc[-1].usage is not None and
          uc[-1].usage.completion_tokens == r.usage.completion_tokens and
          uc[-1].usage.prompt_tokens == r.usage.prompt_tokens and "".join(x.choices[0].text for x in uc[:-1]) == text,
          f"stream_options include_usage: a last chunk with usage {uc[-1].usage}")
    e = c.completions.create(model=model, prompt="Once upon a time, there was", max_tokens=0, echo=True, logprobs=1)
    elp = e.choices[0].logprobs.token_logprobs
    check(elp[0] is None and all(isinstance(x, float) and x <= 0 for x in elp[1:]),
          f"echo + logprobs, max_tokens 0: {len(elp)} prompt tokens, first null, sum {sum(elp[1:]):.4f}")
    if not args.no_chat:
        msgs = [{"role": "user", "content": "Tell me a story."}]
        ch = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
        cchunks = list(c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
        cs = "".join((x.choices[0].delta.content or "") for x in cchunks if x.choices)
        check(not cchunks[-1].choices and cchunks[-1].usage.completion_tokens == ch.usage.completion_tokens,
              f"streamed chat, include_usage: usage {cchunks[-1].usage}")
        check(ch.choices[0].message.role == "assistant" and cs == ch.choices[0].message.content,
              f"chat == streamed chat: {cs!r}")
        lc = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, logprobs=True,
                                       top_logprobs=2)
        content = lc.choices[0].logprobs.content
        check(lc.choices[0].message.content == ch.choices[0].message.content and
              len(content) == lc.usage.completion_tokens and
              all(isinstance(t.logprob, float) and t.logprob <= 0 and bytes(t.bytes) == t.token.encode() and
                  len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob and
                  t.top_logprobs[0].logprob >= t.logprob - 1e-6 for t in content),
              f"chat logprobs, top_logprobs 2: {len(content)} tokens, sum {sum(t.logprob for t in content):.4f}")
        sc = [t for x in c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                                   logprobs=True, top_logprobs=2, stream=True)
              if x.choices[0].logprobs is not None for t in x.choices[0].logprobs.content]
        check([(t.token, t.bytes) for t in sc] == [(t.token, t.bytes) for t in content] and
              all(abs(a.logprob - b.logprob) <= 1e-6 for a, b in zip(sc, content)),
              "streamed chat logprobs == non-streamed")
        try:
            c.chat.completions.create(model=model, messages=msgs, top_logprobs=2)
            check(False, "top_logprobs without logprobs refused")
        except openai.BadRequestError as err:
            check(err.status_code == 400 and "top_logprobs" in err.message, f"top_logprobs without logprobs: {err.message}")
    kw = dict(model=model, prompt="Once upon a time", max_tokens=12, temperature=0.9)
    two = c.completions.create(n=2, seed=7, **kw)
    seeds = [c.completions.create(seed=s, **kw).choices[0].text for s in (7, 8)]
    check([x.index for x in two.choices] == [0, 1] and [x.text for x in two.choices] == seeds,
          f"n=2, seed 7 == n=1 with seeds 7 and 8: {seeds}")
    try:
        c.completions.create(model=model, prompt="x", n=17)
        check(False, "n=17 refused")
    except openai.BadRequestError as err:
        check(err.status_code == 400, f"n=17 refused: {err.message}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
