#!/usr/bin/env bash
# sanitize_tests.sh [BUILD_DIR]: the CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
# Configures BUILD_DIR (default build-asan) with -DTPSHARD_SANITIZE=ON -DTPSHARD_CUDA=OFF (every library,
# tool and test instrumented; the first undefined-behaviour report aborts), builds everything and runs
# ctest. Exit status: ctest's. About 2-3x the time of scripts/test.sh's build and tests on the same cores.
# docs/FUZZING.md "Sanitizers on the test suite" has the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-asan}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPSHARD_CUDA=OFF -DTPSHARD_SANITIZE=ON ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j "$JOBS"
# detect_leaks: the tests fork the tools, and leaks at exit are not what this run looks for.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS")
