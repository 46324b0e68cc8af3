#!/usr/bin/env bash
# unpack_gpu_bins.sh SRC BUILD_DIR: on the GPU machine, unpack what pack_gpu_bins.sh made into
# BUILD_DIR/bin (binaries) and BUILD_DIR/lib (shared libraries; scripts/gpu_libs.sh finds them there).
set -euo pipefail
SRC=${1:?usage: unpack_gpu_bins.sh SRC BUILD_DIR}
BUILD=${2:?usage: unpack_gpu_bins.sh SRC BUILD_DIR}
mkdir -p "$BUILD/bin" "$BUILD/lib"
for f in "$SRC"/*.zst; do
  name=$(basename "$f" .zst)
  case "$name" in
    lib*) zstd -q -d -f "$f" -o "$BUILD/lib/$name" ;;
    *) zstd -q -d -f "$f" -o "$BUILD/bin/$name"; chmod +x "$BUILD/bin/$name" ;;
  esac
done
