# gpu_libs.sh BUILD_DIR (sourced): add to LD_LIBRARY_PATH the directories holding the shared libraries that
# the programs in BUILD_DIR/bin need and the loader does not find (e.g. libnccl.so.2 / libcublasLt.so.13 only inside
# the Python wheels, libsentencepiece.so.0 shipped in BUILD_DIR/lib). Used by scripts/gpu_check.sh and by
# one-off GPU runs (docs/BENCHMARKS.md commands).
_gpu_libs_build=$(cd "${1:?usage: source scripts/gpu_libs.sh BUILD_DIR}" && pwd)
for lib in $(for b in "$_gpu_libs_build"/bin/*; do ldd "$b" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u); do
  for d in "$_gpu_libs_build/lib" /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import sys, glob; print(" ".join(sorted({d for p in sys.path for d in glob.glob(p + "/nvidia/*/lib")})))' 2>/dev/null); do
    if [ -e "$d/$lib" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
  done
done
unset _gpu_libs_build
