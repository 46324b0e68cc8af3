#!/usr/bin/env bash
# install_deps.sh: the Debian packages and Python packages tpshard needs to build, test and run
# the quickstart. Idempotent. Run as root (or with sudo) on Debian/Ubuntu.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS="build-essential cmake pkg-config python3 python3-pip libcli11-dev libzstd-dev libxxhash-dev \
doctest-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev libcpp-httplib-dev \
libgloo-dev liburing-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq $missing
fi
# Optional: clang with libFuzzer for the fuzz smoke run of scripts/test.sh (skipped when absent).
if ! command -v clang++ >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -qq clang >/dev/null 2>&1 || echo "install_deps: clang not installed; the fuzz smoke run will be skipped" >&2
fi
# Test-only: Open MPI's mpirun for the launchers test (ctest launchers; it reports mpirun as skipped without).
if ! command -v mpirun >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -qq openmpi-bin >/dev/null 2>&1 || echo "install_deps: openmpi-bin not installed; the mpirun runs of ctest launchers will be skipped" >&2
fi
# Test-only: Slurm and munge for the srun runs of the launchers test, on a single-node cluster the test
# starts itself with its own daemons (tests/launchers/local_slurm.sh; reported as skipped without).
if ! dpkg -s slurmctld slurmd slurm-client munge >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null 2>&1 ||
    echo "install_deps: slurmctld slurmd slurm-client munge not installed; the srun runs of ctest launchers will be skipped" >&2
fi
# Python: only what the scripts used by the quickstart and the tests need (no torch). gguf and ml_dtypes are
# for scripts/smollm2_to_hf.py (GGUF dequantization, bf16 safetensors from numpy). Skipped when importable;
# ReaderField.contents is the gguf API that script uses (older gguf lacks it).
PY_PKGS="numpy safetensors gguf ml_dtypes"
python3 -c "import numpy, safetensors, ml_dtypes, gguf; gguf.ReaderField.contents" 2>/dev/null || \
  python3 -m pip install -q -U $PY_PKGS 2>/dev/null || \
  python3 -m pip install -q -U --break-system-packages $PY_PKGS
# Test-only: the openai client for ctest openai_client (skipped when it cannot be installed).
python3 -c "import openai" 2>/dev/null || python3 -m pip install -q openai 2>/dev/null || \
  python3 -m pip install -q --break-system-packages openai 2>/dev/null || \
  echo "install_deps: the openai package is not installed; ctest openai_client will be skipped" >&2
# Test-only: lm-evaluation-harness for ctest lm_eval, in its own venv (the system Python stays untouched);
# transformers gives lm_eval the model's Hugging Face tokenizer (no torch needed). Skipped when present at
# these versions; when it cannot be installed, ctest lm_eval reports SKIPPED.
LM_EVAL_VENV="${LM_EVAL_VENV:-$HOME/.cache/tpshard/lm-eval-venv}"
LM_EVAL_PKGS="lm-eval[api]==0.4.13 transformers==5.25.0"
if ! "$LM_EVAL_VENV/bin/python" -c "import importlib.metadata as m, sys; \
sys.exit(m.version('lm-eval') != '0.4.13' or m.version('transformers') != '5.25.0')" 2>/dev/null; then
  { python3 -m venv "$LM_EVAL_VENV" 2>/dev/null || \
    { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null 2>&1 && \
      python3 -m venv --clear "$LM_EVAL_VENV"; }; } && \
  "$LM_EVAL_VENV/bin/pip" install -q $LM_EVAL_PKGS || \
  echo "install_deps: lm-evaluation-harness is not installed in $LM_EVAL_VENV; ctest lm_eval will be skipped" >&2
fi
