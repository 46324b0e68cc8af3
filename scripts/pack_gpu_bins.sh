#!/usr/bin/env bash
# pack_gpu_bins.sh BUILD_DIR DEST [BINARY...]: the binaries a GPU run needs, stripped and zstd-compressed,
# with the shared libraries the GPU machine lacks (libsentencepiece), into DEST (a folder ignored by git that
# the device call carries). unpack_gpu_bins.sh reverses it there. Default binaries: tpshard tprun
# test_gpu_runtime test_kernels.
set -euo pipefail
BUILD=${1:?usage: pack_gpu_bins.sh BUILD_DIR DEST [BINARY...]}
DEST=${2:?usage: pack_gpu_bins.sh BUILD_DIR DEST [BINARY...]}
shift 2
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=(tpshard tprun test_gpu_runtime test_kernels)
rm -rf "$DEST"; mkdir -p "$DEST"
for b in "${BINS[@]}"; do
  strip -o "$DEST/$b" "$BUILD/bin/$b"
  zstd -q -19 -T0 --rm "$DEST/$b" -o "$DEST/$b.zst"
done
for lib in libsentencepiece.so.0; do
  src=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  [ -n "$src" ] && zstd -q -19 "$(readlink -f "$src")" -o "$DEST/$lib.zst"
done
du -sh "$DEST"
