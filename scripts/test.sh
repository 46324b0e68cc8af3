#!/usr/bin/env bash
# test.sh: install dependencies, build, and run every test suite (CPU; GPU suites skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh build
cd build
ctest --output-on-failure -j "${JOBS:-$(nproc)}"
