// xxh3_avx512.cpp: XXH3 built with -mavx512f (see xxh3_simd.h).
#define TPS_XXH3_IMPL_FN avx512_impl
#define TPS_XXH3_IMPL_NAME "avx512"
#include "format/xxh3_simd.inc"
