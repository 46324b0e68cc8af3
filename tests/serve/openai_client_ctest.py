#!/usr/bin/env python3
"""openai_client_ctest.py: the official `openai` Python client against `tprun serve` (ctest openai_client).

Converts tests/fixtures/stories260K at tp 2, gives it a ChatML chat template (the model has none), starts
`tprun serve` on the CPU backend on a free port and runs scripts/check_openai_client.py against it (models,
completion == its stream (logprobs too), echo + logprobs as lm-evaluation-harness scores, chat and streamed
chat (with logprobs), n = 2 as two seeds, n = 17 refused). Exit 0 when every check passes; 77 (ctest: skipped) when the `openai`
package is not installed.

    python3 tests/serve/openai_client_ctest.py --bin-dir build/bin --work-dir /tmp/openai_client
"""
import argparse
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    args = ap.parse_args()
    if importlib.util.find_spec("openai") is None:
        print("SKIPPED: the openai package is not installed (scripts/install_deps.sh installs it)")
        return 77
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    model = os.path.join(args.work_dir, "model")
    subprocess.run([os.path.join(args.bin_dir, "tpshard"), "convert", os.path.join(REPO, "tests/fixtures/stories260K"),
                    "-o", model, "--tp", "2", "-q"], check=True)
    template = os.path.join(args.work_dir, "chatml.jinja")
    with open(template, "w") as f:
        f.write(CHATML)
    port = free_port()
    log = open(os.path.join(args.work_dir, "serve.log"), "w")
    server = subprocess.Popen([os.path.join(args.bin_dir, "tprun"), model, "--tp", "2", "--device", "cpu", "--threads", "1",
                               "serve", "--port", str(port), "--chat-template", template, "--idle-exit", "120"],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    print(f"FAIL: tprun serve did not start (see {log.name})")
                    return 1
                time.sleep(0.2)
        r = subprocess.run([sys.executable, os.path.join(REPO, "scripts/check_openai_client.py"),
                            "--base-url", f"http://127.0.0.1:{port}/v1"], timeout=120)
        return r.returncode
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
