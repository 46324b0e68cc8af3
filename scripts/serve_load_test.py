#!/usr/bin/env python3
"""serve_load_test.py: `tprun serve` under concurrent load, client disconnects and SIGTERM (standard library only).

Converts a fixture (default tests/fixtures/stories260K) with `tpshard convert`, computes the reference text of
every distinct request once with `tprun generate` / `tprun chat` (greedy), starts `tprun serve` on 127.0.0.1
(CPU backend unless --device cuda) and checks, with its own HTTP/1.1 client on asyncio streams:

  1. limits: a prompt longer than the context gets 400 naming both lengths; a body above 64 MiB gets 413;
  2. load: N concurrent requests (default 200: completions and chat, streamed and not) all complete with
     the reference text; streams end with [DONE]; then /health says ok with nothing in flight and no
     kv_cache slot in use; prints requests/s and p50 / p99 latency;
  3. disconnects: D streaming clients (default 20) that close after their first event are cancelled:
     /health returns to no request in flight and no slot in use, requests_cancelled grows by D (each was
     cancelled while it ran or waited, not run to its end), and the server still answers correctly;
  4. SIGTERM during load: the requests in flight complete with the reference text (streams end with [DONE]),
     new ones and /health get 503 with an OpenAI error object, and the server exits 0 saying it drained;
  5. a second server with one slot, --max-queued 4 and --drain-timeout 0.1: 2 of 6 requests get 429; after
     SIGTERM the accepted ones still running at the timeout end with finish_reason "abort" (streams with
     [DONE]) and the server exits 0.

Prints PASS / FAIL lines and a summary; exit status 1 on any FAIL. Run from ctest (serve_load_test) or:

    python3 scripts/serve_load_test.py --bin-dir build/bin --work-dir /tmp/serve_load
"""
import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMPLETION_PROMPTS = ["Once upon a time", "The cat", "Lily and Ben went", "One day", "A big dog", "Tom had a red ball"]
CHAT_MESSAGES = ["Tell me a story.", "What is a cat?", "Hello!"]


class Failures:
    def __init__(self):
        self.count = 0

    def check(self, ok, what):
        print(("PASS " if ok else "FAIL ") + what, flush=True)
        self.count += 0 if ok else 1
        return ok


# ---------------------------------------------------------------- HTTP/1.1 client on asyncio streams


async def read_head(reader):
    """Status code and lower-cased headers of a response."""
    line = await reader.readline()
    if not line:
        raise ConnectionError("the server closed the connection before answering")
    status = int(line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def read_chunks(reader):
    """Yields the chunks of a chunked body."""
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        if size == 0:
            await reader.readline()
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


async def send_request(port, method, path, body=None, raw_headers=None):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    if raw_headers is not None:
        head += raw_headers
    elif body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    writer.write(head.encode() + b"\r\n" + data)
    await writer.drain()
    return reader, writer


async def http(port, method, path, body=None, raw_headers=None):
    """(status, parsed JSON body or the text when not JSON)."""
    reader, writer = await send_request(port, method, path, body, raw_headers)
    try:
        status, headers = await read_head(reader)
        if headers.get("transfer-encoding") == "chunked":
            payload = b"".join([c async for c in read_chunks(reader)])
        elif "content-length" in headers:
            payload = await reader.readexactly(int(headers["content-length"]))
        else:
            payload = await reader.read()
    finally:
        writer.close()
    text = payload.decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


async def stream(port, path, body, stop_after=None):
    """A streamed request: (status, text pieces, finish_reason, ended with [DONE]). stop_after=k: close the
    connection after k events (a client that goes away) and return what came."""
    reader, writer = await send_request(port, "POST", path, body)
    pieces, finish, done, events = [], None, False, 0
    try:
        status, headers = await read_head(reader)
        if status != 200:  # the error object as the only piece
            n = int(headers.get("content-length", "0"))
            return status, [(await reader.readexactly(n)).decode(errors="replace")], None, False
        buf = b""
        async for chunk in read_chunks(reader):
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                data = event.decode()[len("data: "):]
                if data == "[DONE]":
                    done = True
                    continue
                c = json.loads(data)["choices"][0]
                pieces.append(c["delta"].get("content", "") if "delta" in c else c["text"])
                finish = c.get("finish_reason") or finish
                events += 1
                if stop_after is not None and events >= stop_after:
                    return status, pieces, finish, False
    finally:
        writer.close()
    return status, pieces, finish, done


async def generate_request(port, kind, prompt, max_tokens, stream_it, extra=None):
    """One completion (kind "cmpl") or chat request: (ok, text, finish_reason, ended properly, seconds)."""
    t0 = time.monotonic()
    body = dict(max_tokens=max_tokens, temperature=0, **(extra or {}))
    if kind == "cmpl":
        path, body["prompt"] = "/v1/completions", prompt
    else:
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": prompt}]
    if stream_it:
        body["stream"] = True
        status, pieces, finish, done = await stream(port, path, body)
        return status == 200, "".join(pieces), finish, done, time.monotonic() - t0
    status, r = await http(port, "POST", path, body)
    if status != 200:
        return False, str(r), None, False, time.monotonic() - t0
    c = r["choices"][0]
    text = c["message"]["content"] if kind == "chat" else c["text"]
    return True, text, c["finish_reason"], True, time.monotonic() - t0


# ---------------------------------------------------------------- references, server process


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def references(tprun, model, tp, device, max_tokens, ignore_eos=False):
    """{(kind, prompt): greedy text} from tprun generate / chat, once per distinct prompt."""
    base = [tprun, model, "--tp", str(tp), "--device", device] + (["--threads", "1"] if device == "cpu" else [])
    opts = ["--max-new-tokens", str(max_tokens), "--temperature", "0"] + (["--ignore-eos"] if ignore_eos else [])
    refs = {}
    for p in COMPLETION_PROMPTS:
        refs[("cmpl", p)] = run(base + ["generate", "--prompt", p] + opts)[:-1]  # its last newline is tprun's
    for m in CHAT_MESSAGES:
        refs[("chat", m)] = run(base + ["chat", "--prompt", m] + opts)[:-1]
    return refs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_health(port, proc, timeout=60):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise RuntimeError(f"tprun serve exited with {proc.returncode} before answering /health")
        try:
            status, h = await http(port, "GET", "/health")
            if status == 200:
                return h
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"tprun serve did not answer /health within {timeout} s")


async def wait_idle(port, timeout):
    """Polls /health until nothing is in flight and no slot is used; returns the last /health and the seconds."""
    t0 = time.monotonic()
    while True:
        _, h = await http(port, "GET", "/health")
        idle = h["requests_in_flight"] == 0 and h["slots_in_use"] == 0 and h["streams_open"] == 0
        if idle or time.monotonic() - t0 > timeout:
            return h, time.monotonic() - t0
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- the checks


async def main_async(args, f):
    tprun = os.path.join(args.bin_dir, "tprun")
    model = os.path.join(args.work_dir, "model")
    os.makedirs(args.work_dir, exist_ok=True)
    run([os.path.join(args.bin_dir, "tpshard"), "convert", args.fixture, "-o", model, "--tp", str(args.tp),
         "--force", "-q"])
    with open(os.path.join(REPO, "tests/fixtures/smollm2/tokenizer_config.json")) as cfg:  # a ChatML template
        with open(os.path.join(model, "chat_template.jinja"), "w") as out:
            out.write(json.load(cfg)["chat_template"])
    t0 = time.monotonic()
    refs = references(tprun, model, args.tp, args.device, args.max_tokens)
    long_refs = references(tprun, model, args.tp, args.device, args.drain_tokens, ignore_eos=True)
    print(f"references: {len(refs) + len(long_refs)} tprun generate / chat runs in {time.monotonic() - t0:.1f} s",
          flush=True)

    port = free_port()
    log_path = os.path.join(args.work_dir, "serve.log")
    log = open(log_path, "w")
    cmd = [tprun, model, "--tp", str(args.tp), "--device", args.device] + \
          (["--threads", "1"] if args.device == "cpu" else []) + \
          ["--max-batch", str(args.max_batch), "serve", "--port", str(port), "--max-queued", str(args.requests + 56)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        h = await wait_health(port, proc)
        f.check(h.get("status") == "ok" and h.get("slots_total") == args.max_batch, f"/health at start: {h}")

        # 1. limits
        _, tk = await http(port, "POST", "/tokenize", {"prompt": "Once upon a time " * 200})
        status, r = await http(port, "POST", "/v1/completions", {"prompt": "Once upon a time " * 200, "max_tokens": 4})
        msg = r["error"]["message"] if isinstance(r, dict) and "error" in r else str(r)
        f.check(status == 400 and str(tk["count"]) in msg and str(tk["max_model_len"]) in msg,
                f"prompt of {tk['count']} tokens > context {tk['max_model_len']}: 400 naming both: {msg!r}")
        big = 64 * 1024 * 1024 + 1
        status, _ = await http(port, "POST", "/v1/completions",
                               raw_headers=f"Content-Type: application/json\r\nContent-Length: {big}\r\n")
        f.check(status == 413, f"a body of {big} bytes: {status} (413 expected)")

        # 2. load
        kinds = [("cmpl", False), ("cmpl", True), ("chat", False), ("chat", True)]
        jobs = []
        for i in range(args.requests):
            kind, streamed = kinds[i % 4]
            prompt = COMPLETION_PROMPTS[i % len(COMPLETION_PROMPTS)] if kind == "cmpl" else CHAT_MESSAGES[i % len(CHAT_MESSAGES)]
            jobs.append((kind, prompt, streamed))
        t0 = time.monotonic()
        results = await asyncio.gather(*[generate_request(port, k, p, args.max_tokens, s) for k, p, s in jobs],
                                       return_exceptions=True)
        wall = time.monotonic() - t0
        wrong = []
        latencies = []
        for (kind, prompt, streamed), res in zip(jobs, results):
            if isinstance(res, BaseException):
                wrong.append(f"{kind} {prompt!r} stream={streamed}: {res!r}")
                continue
            ok, text, finish, ended, secs = res
            latencies.append(secs)
            if not (ok and text == refs[(kind, prompt)] and finish in ("length", "stop") and ended):
                wrong.append(f"{kind} {prompt!r} stream={streamed}: ok={ok} finish={finish} ended={ended} "
                             f"text={text!r} want {refs[(kind, prompt)]!r}")
        f.check(not wrong, f"{args.requests} concurrent requests (completions / chat, streamed or not) all equal "
                           f"tprun generate / chat" + ("" if not wrong else f": {len(wrong)} wrong, e.g. {wrong[0]}"))
        latencies.sort()
        p50 = statistics.median(latencies) if latencies else float("nan")
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan")
        print(f"load: {args.requests} requests (max_tokens {args.max_tokens}, --max-batch {args.max_batch}, tp {args.tp}) "
              f"in {wall:.2f} s: {args.requests / wall:.1f} requests/s, latency p50 {p50 * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms", flush=True)
        h, _ = await wait_idle(port, 10)
        f.check(h["status"] == "ok" and h["requests_in_flight"] == 0 and h["slots_in_use"] == 0 and h["streams_open"] == 0,
                f"/health after the load: {h}")

        # 3. clients that go away mid-stream
        before = h["requests_cancelled"]
        t0 = time.monotonic()
        gone = await asyncio.gather(*[stream(port, "/v1/completions", {"prompt": COMPLETION_PROMPTS[i % 6],
                                                                        "max_tokens": args.disconnect_tokens,
                                                                        "ignore_eos": True, "temperature": 0,
                                                                        "stream": True}, stop_after=1)
                                      for i in range(args.disconnects)])
        h, secs = await wait_idle(port, 60)
        took = time.monotonic() - t0
        f.check(all(g[0] == 200 for g in gone), f"{args.disconnects} streams opened, each closed after its first event")
        f.check(h["requests_in_flight"] == 0 and h["slots_in_use"] == 0 and h["streams_open"] == 0,
                f"after {args.disconnects} disconnects: nothing in flight, no slot in use ({took:.2f} s): {h}")
        # The server counts a job as cancelled only when the generator still ran it (not run to its end).
        f.check(h["requests_cancelled"] - before == args.disconnects,
                f"requests_cancelled grew by {h['requests_cancelled'] - before} (want {args.disconnects})")
        ok, text, *_ = await generate_request(port, "cmpl", COMPLETION_PROMPTS[1], args.max_tokens, True)
        f.check(ok and text == refs[("cmpl", COMPLETION_PROMPTS[1])], "serves correctly after the disconnects")

        # 4. SIGTERM while requests run
        drain_jobs = [(kinds[i % 4][0], (COMPLETION_PROMPTS if kinds[i % 4][0] == "cmpl" else CHAT_MESSAGES)[i % 3],
                       kinds[i % 4][1]) for i in range(args.drain_requests)]
        tasks = [asyncio.ensure_future(generate_request(port, k, p, args.drain_tokens, s, {"ignore_eos": True}))
                 for k, p, s in drain_jobs]
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end:  # every request accepted before the signal
            _, h = await http(port, "GET", "/health")
            if h["requests_in_flight"] + sum(t.done() for t in tasks) >= args.drain_requests:
                break
            await asyncio.sleep(0.01)
        in_flight = h["requests_in_flight"]
        proc.send_signal(signal.SIGTERM)
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end:
            status, h = await http(port, "GET", "/health")
            if status == 503:
                break
            await asyncio.sleep(0.01)
        f.check(status == 503 and h.get("status") == "draining", f"/health while draining: {status} {h}")
        late = await asyncio.gather(*[http(port, "POST", "/v1/completions", {"prompt": "The cat", "max_tokens": 4})
                                      for _ in range(5)])
        f.check(all(s == 503 and isinstance(r, dict) and r.get("error", {}).get("code") == 503 for s, r in late),
                f"5 new requests while draining: 503 with an error object: {late[0]}")
        done = await asyncio.gather(*tasks, return_exceptions=True)
        wrong = []
        for (kind, prompt, streamed), res in zip(drain_jobs, done):
            if isinstance(res, BaseException) or not (res[0] and res[1] == long_refs[(kind, prompt)] and res[3]
                                                      and res[2] == "length"):
                wrong.append(f"{kind} {prompt!r} stream={streamed}: {res!r}")
        f.check(not wrong and in_flight > 0,
                f"{args.drain_requests} requests ({in_flight} in flight at SIGTERM) completed with the reference text"
                + ("" if not wrong else f": {len(wrong)} wrong, e.g. {wrong[0]}"))
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
        log.flush()
        with open(log_path) as lf:
            text = lf.read()
        drained = re.search(r"tprun: drained .*", text)
        f.check(rc == 0 and drained is not None,
                f"the server exited {rc} (0 expected): {drained.group(0) if drained else 'no drained line in ' + log_path}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    await queue_and_drain_timeout(args, f, tprun, model)


async def queue_and_drain_timeout(args, f, tprun, model):
    """5. One slot, --max-queued 4, --drain-timeout 0.1: of 6 long requests sent at once, 2 get 429; at SIGTERM
    the 4 accepted ones (4 x 400 tokens through one slot: far more than 0.1 s on any machine) run 0.1 s, then
    the rest are cancelled (finish_reason "abort", streams still end
    with [DONE]) and the server exits 0."""
    port = free_port()
    log_path = os.path.join(args.work_dir, "serve_drain_timeout.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([tprun, model, "--tp", str(args.tp), "--device", args.device] +
                                (["--threads", "1"] if args.device == "cpu" else []) +
                                ["--max-batch", "1", "serve", "--port", str(port), "--max-queued", "4", "--drain-timeout", "0.1"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            await wait_health(port, proc)
            tasks = [asyncio.ensure_future(generate_request(port, "cmpl", COMPLETION_PROMPTS[i], args.disconnect_tokens,
                                                            i % 2 == 0, {"ignore_eos": True})) for i in range(6)]
            while not any(t.done() for t in tasks):  # the refused ones answer at once
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            res = await asyncio.gather(*tasks)
            refused = [r for r in res if not r[0]]
            f.check(len(refused) == 2 and all(re.search(r"code['\"]: ?429", r[1]) for r in refused),
                    f"--max-queued 4: 2 of 6 requests refused with 429: {[r[1][:80] for r in refused]}")
            served = [r for r in res if r[0]]
            aborted = [r for r in served if r[2] == "abort"]
            f.check(len(served) == 4 and aborted and all(r[3] for r in served),
                    f"--drain-timeout 0.1: {len(aborted)} of the 4 accepted requests ended with finish_reason abort, "
                    f"the rest length; every stream ended with [DONE]: {[(r[2], len(r[1])) for r in served]}")
            rc = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with open(log_path) as lf:
        text = lf.read()
    f.check(rc == 0 and "drain timeout (0.1 s)" in text and re.search(r"drained \(4 requests in flight at the signal, [1-4] cancelled\)", text),
            f"exit {rc} after the drain timeout: {re.findall(r'tprun: dr.*', text)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", required=True, help="where tpshard and tprun are")
    ap.add_argument("--work-dir", required=True, help="for the converted model and the server's log")
    ap.add_argument("--fixture", default=os.path.join(REPO, "tests/fixtures/stories260K"), help="a Hugging Face checkpoint")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: one worker process per rank under tprun's launcher, which gets the SIGTERM")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--disconnects", type=int, default=20)
    ap.add_argument("--disconnect-tokens", type=int, default=400)
    ap.add_argument("--drain-requests", type=int, default=24)
    ap.add_argument("--drain-tokens", type=int, default=64)
    args = ap.parse_args()
    f = Failures()
    t0 = time.monotonic()
    asyncio.run(main_async(args, f))
    print(f"{'FAIL' if f.count else 'PASS'}: {f.count} failed checks, {time.monotonic() - t0:.1f} s")
    return 1 if f.count else 0


if __name__ == "__main__":
    sys.exit(main())
