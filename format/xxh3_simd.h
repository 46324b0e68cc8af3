// xxh3_simd.h: XXH3-64 (seed 0) compiled for one x86 vector extension each (xxh3_avx2.cpp with -mavx2,
// xxh3_avx512.cpp with -mavx512f), from the xxHash header itself (XXH_INLINE_ALL). Debian's libxxhash
// is built for baseline x86-64 (SSE2); the wider kernels hash the same bytes to the same values 2.5-5x
// faster. format/hash.cpp picks one at run time (CPUID); nothing else includes this header.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tpshard::xxh3 {

/// One implementation: one-shot hash and a streaming state (opaque, created / freed by it).
struct Impl {
  const char* name;  ///< "sse2" (the library), "avx2", "avx512"
  uint64_t (*oneshot)(const void* data, size_t n);
  void* (*create)();  ///< a reset state, nullptr when out of memory
  void (*destroy)(void* state);
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t n);
  uint64_t (*digest)(const void* state);
};

/// Defined only where the compiler builds them (x86-64); callers check the CPU first.
const Impl& avx2_impl();
const Impl& avx512_impl();

}  // namespace tpshard::xxh3
