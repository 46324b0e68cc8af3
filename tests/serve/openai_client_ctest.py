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
import subprocess
import sys

from serve_ctest_util import Server, write_chatml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
    template = write_chatml(args.work_dir)
    try:
        server = Server(os.path.join(args.bin_dir, "tprun"), model, args.work_dir,
                        ["--tp", "2", "--device", "cpu", "--threads", "1"], ["--chat-template", template])
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    with server:
        r = subprocess.run([sys.executable, os.path.join(REPO, "scripts/check_openai_client.py"),
                            "--base-url", f"{server.url}/v1"], timeout=120)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
