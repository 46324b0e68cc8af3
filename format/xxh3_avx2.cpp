// xxh3_avx2.cpp: XXH3 built with -mavx2 (see xxh3_simd.h).
#define TPS_XXH3_IMPL_FN avx2_impl
#define TPS_XXH3_IMPL_NAME "avx2"
#include "format/xxh3_simd.inc"
