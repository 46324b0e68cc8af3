#!/usr/bin/env bash
# unpack_gpu_bins.sh SRC BUILD_DIR: on the GPU machine, unpack what pack_gpu_bins.sh made into
# BUILD_DIR/bin (binaries) and BUILD_DIR/lib (shared libraries; scripts/gpu_libs.sh finds them there).
set -euo pipefail
SRC=${1:?usage: unpack_gpu_bins.sh SRC BUILD_DIR}
BUILD=${2:?usage: unpack_gpu_bins.sh SRC BUILD_DIR}
mkdir -p "$BUILD/bin" "$BUILD/lib"
for f in "$SRC"/*.xz; do
  name=$(basename "$f" .xz)
  case "$name" in
    lib*) xz -d -c "$f" > "$BUILD/lib/$name" ;;
    *) xz -d -c "$f" > "$BUILD/bin/$name"; chmod +x "$BUILD/bin/$name" ;;
  esac
done
