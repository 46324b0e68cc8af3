#!/usr/bin/env bash
# pack_gpu_bins.sh BUILD_DIR DEST [BINARY...]: the binaries a GPU run needs, stripped and xz-compressed (xz is on the GPU machines, zstd is not),
# with the shared libraries the GPU machine lacks (libsentencepiece, libcpp-httplib and its brotli, libgloo and its
# hiredis / ibverbs / libnl), into DEST (a folder ignored by git that
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
  xz -6 -T0 "$DEST/$b"
done
for lib in libsentencepiece.so.0 libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1 \
           libgloo.so.0 libhiredis.so.0.14 libibverbs.so.1 libnl-route-3.so.200 libnl-3.so.200; do
  src=$(ldconfig -p | awk -v l="$lib" '$1 == l && !done {print $NF; done = 1}')
  [ -n "$src" ] && xz -6 -c "$(readlink -f "$src")" > "$DEST/$lib.xz"
done
du -sh "$DEST"
