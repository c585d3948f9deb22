/* float16 / bfloat16 kernels that run the float32 loop: blocks of HALF_BLOCK elements widened to float32
 * (exactly), the float32 loop, each result narrowed once (round to nearest even). GCC 12 does not
 * vectorise _Float16 conversions; with F16C (avx2, avx512 builds) 8 at a time, with the same rounding, so
 * vector body and scalar tail agree and results stay split-invariant (block edges may move with the split).
 * Its loops are checked vectorised through eltwise.c (tests/openmp/test_vectorised.py). */
#ifndef OPC_HALF_BLOCKS_H
#define OPC_HALF_BLOCKS_H

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "call.h"

#define HALF_BLOCK 1024

CLONES static void widen_f16(const uint16_t *restrict h, float *restrict f, int64_t n) {
    int64_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
#endif
    for (; i < n; i++) f[i] = opc_f16_to_f32(h[i]);
}
CLONES static void widen_bf16(const uint16_t *restrict h, float *restrict f, int64_t n) {
    for (int64_t i = 0; i < n; i++) f[i] = opc_bf16_to_f32(h[i]); /* simd: 1 */
}
CLONES static void narrow_f16(const float *restrict f, uint16_t *restrict h, int64_t n) {
    int64_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) h[i] = opc_f32_to_f16(f[i]);
}
CLONES static void narrow_bf16(const float *restrict f, uint16_t *restrict h, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = opc_f32_to_bf16(f[i]); /* simd: 1 */
}

static inline void widen_half(bool bf16, const uint16_t *restrict h, float *restrict f, int64_t n) {
    if (bf16) widen_bf16(h, f, n);
    else widen_f16(h, f, n);
}
static inline void narrow_half(bool bf16, const float *restrict f, uint16_t *restrict h, int64_t n) {
    if (bf16) narrow_bf16(f, h, n);
    else narrow_f16(f, h, n);
}

#endif
