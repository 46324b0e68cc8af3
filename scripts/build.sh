#!/usr/bin/env bash
# build.sh [BUILD_DIR [TARGET...]]: configure, then build the given targets (e.g. tpshard tprun) or, with
# none given, everything: tests, benchmarks (CUDA backend when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
shift $(( $# > 0 ? 1 : 0 ))
TARGETS=()
for t in "$@"; do TARGETS+=(--target "$t"); done
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" ${TARGETS[@]+"${TARGETS[@]}"}
