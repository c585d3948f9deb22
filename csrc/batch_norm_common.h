/* What the batch norm kernels share (csrc/batch_norm.c: BatchNormalizationGrad, csrc/batch_norm_internal.c:
 * BatchNormInternal): the per-channel sums' LANES interleaved partials held in native-width vectors, and the
 * loads per storage type. X is [N, C, S] with S the spatial dims' product; a channel's sums add element s of
 * each plane into partial s % LANES, planes in n order, and combine the partials in lane order. LANES is the
 * same at every ISA level, so are the sums; only the register width differs. */
#ifndef OPC_BATCH_NORM_COMMON_H
#define OPC_BATCH_NORM_COMMON_H

#include "half_blocks.h"
#include "call.h"

#define LANES 16

#define LD_ID(p, i) (p)[i]
#define ST_ID(v) (v)
#define LD_F16(p, i) opc_f16_to_f32((p)[i])
#define ST_F16(v) opc_f32_to_f16(v)

#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
typedef float vf32 __attribute__((vector_size(VBYTES)));
typedef double vf64 __attribute__((vector_size(VBYTES)));
#define VT_f32 vf32
#define VT_f64 vf64
#define LDV_f32(p) ({ vf32 v_; memcpy(&v_, (p), sizeof v_); v_; })
#define LDV_f64(p) ({ vf64 v_; memcpy(&v_, (p), sizeof v_); v_; })
#if defined(__F16C__)
/* float16 loaded a vector at a time with F16C (GCC 12 converts a _Float16 vector a lane at a time, which
 * made the sums 9x slower than float32's) */
#define VT_f16 vf32
#if defined(__AVX512F__)
#define LDV_f16(p) ((vf32)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p))))
#else
#define LDV_f16(p) ((vf32)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))))
#endif
#endif

#endif
