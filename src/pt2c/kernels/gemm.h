/* pt2c kernel library: the GEMM's definitions shared by its parts and by the kernels built on it.
 *
 * Micro-tile (MR x NR, the packed layouts' panel sizes: layout.py mirrors them), cache blocking
 * and threading thresholds, inlining / prefetch macros, and the 8-lane vector layer (AVX2 and
 * AVX-512: __m256; NEON: two float32x4_t; PT2C_GEMM_VEC undefined: plain C) that the
 * micro-kernels and the depthwise convolution are written against.  See gemm.c.
 */
#ifndef PT2C_GEMM_H
#define PT2C_GEMM_H

#include "common.h"
#include "epilogue.h"

#define PT2C_GEMM_MR 6
#define PT2C_GEMM_NR 16

/* Cache blocking.  KC*NR*4 = 16 KiB: a B micro-panel stays in L1 (32 KiB) while
 * it is reused by every MR-row tile; MC*KC*4 = 144 KiB: the packed A block
 * lives in L2; KC*NC*4 = 2 MiB: the packed B block lives in L2/L3. */
#ifndef PT2C_GEMM_MC
#define PT2C_GEMM_MC 144 /* multiple of MR */
#endif
#ifndef PT2C_GEMM_KC
#define PT2C_GEMM_KC 256
#endif
#ifndef PT2C_GEMM_NC
#define PT2C_GEMM_NC 2048 /* multiple of NR */
#endif
/* At most this many rows of an unpacked A are read in place (GEMV-like). */
#define PT2C_GEMM_SKINNY_M 16
/* At most this many rows of A (packed, or more than SKINNY_M) make an unpacked B with contiguous
 * rows be read in place: one row block, so each B panel comes from its source once per k block
 * (1x1 convs, 16-192 output channels: 0-37 % faster than packing B first). */
#ifndef PT2C_GEMM_B_DIRECT_M
#define PT2C_GEMM_B_DIRECT_M PT2C_GEMM_MC
#endif
/* At most this many columns (of one thread's chunk) for the A-panel-outer order of pre-packed A
 * and in-place B (pt2c_gemm_serial: a_outer).  With B's columns outer, the first pass over B
 * meets every weights panel, so all of A streams in from memory during 1/13 of the work (196
 * pixels): 384 -> 64 at 14x14 with its weights flushed from the caches 127 -> 98 us (93 with them
 * in cache), 576 -> 96 233 -> 216 us.  At 28x28 (784 columns) A-outer lost as much when the input
 * came from memory (122 -> 152 us); below 8 panels the next panel's prefetch came in bursts.  Not
 * on AVX-512, where the 6 x 32 kernel's own prefetches did better (72 vs 90 us). */
#ifndef PT2C_GEMM_A_OUTER_N
#define PT2C_GEMM_A_OUTER_N 256
#endif
/* Minimum multiply-adds per thread before a call is split across threads. */
#define PT2C_GEMM_MIN_MACS_PER_THREAD (1L << 19)
/* Work chunks per thread (pt2c_chunks: its own share first, then others' leftovers): a thread
 * that the OS deschedules (a shared or oversubscribed machine) then delays the call by about
 * one chunk instead of by its whole share. */
#ifndef PT2C_GEMM_CHUNKS_PER_THREAD
#define PT2C_GEMM_CHUNKS_PER_THREAD 4
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PT2C_GEMM_INLINE static inline __attribute__((always_inline))
#define PT2C_GEMM_PREFETCH_W(p) __builtin_prefetch((p), 1)
#define PT2C_GEMM_PREFETCH_R(p) __builtin_prefetch((p), 0, 1)
#else
#define PT2C_GEMM_INLINE static inline
#define PT2C_GEMM_PREFETCH_W(p) ((void)(p))
#define PT2C_GEMM_PREFETCH_R(p) ((void)(p))
#endif

/* ---- 8-lane vector layer (ggml simd-mappings style) ---- */
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
#include <immintrin.h>
#define PT2C_GEMM_VEC 1
typedef __m256 pt2c_v8;
#define PT2C_V8_ZERO() _mm256_setzero_ps()
#define PT2C_V8_LOAD(p) _mm256_loadu_ps(p)
#define PT2C_V8_STORE(p, v) _mm256_storeu_ps((p), (v))
#define PT2C_V8_SET1(x) _mm256_set1_ps(x)
#define PT2C_V8_ADD(a, b) _mm256_add_ps((a), (b))
#define PT2C_V8_MUL(a, b) _mm256_mul_ps((a), (b))
#define PT2C_V8_FMA(acc, a, b) _mm256_fmadd_ps((a), (b), (acc)) /* acc + a*b */
/* Same results as the scalar epilogue, NaN and signed zeros included:
 * relu x > 0 ? x : 0 (max returns its 2nd operand on NaN/equal), clamp
 * v = x < lo ? lo : x; v > hi ? hi : v. */
#define PT2C_V8_RELU(x) _mm256_max_ps((x), _mm256_setzero_ps())
#define PT2C_V8_CLAMP(x, lo, hi) _mm256_min_ps((hi), _mm256_max_ps((lo), (x)))
#elif defined(PT2C_SIMD_NEON)
#include <arm_neon.h>
#define PT2C_GEMM_VEC 1
typedef struct { float32x4_t lo, hi; } pt2c_v8;
static inline pt2c_v8 pt2c_v8_zero(void) { pt2c_v8 r; r.lo = vdupq_n_f32(0.0f); r.hi = r.lo; return r; }
static inline pt2c_v8 pt2c_v8_load(const float *p) { pt2c_v8 r; r.lo = vld1q_f32(p); r.hi = vld1q_f32(p + 4); return r; }
static inline void pt2c_v8_store(float *p, pt2c_v8 v) { vst1q_f32(p, v.lo); vst1q_f32(p + 4, v.hi); }
static inline pt2c_v8 pt2c_v8_set1(float x) { pt2c_v8 r; r.lo = vdupq_n_f32(x); r.hi = r.lo; return r; }
static inline pt2c_v8 pt2c_v8_add(pt2c_v8 a, pt2c_v8 b) { a.lo = vaddq_f32(a.lo, b.lo); a.hi = vaddq_f32(a.hi, b.hi); return a; }
static inline pt2c_v8 pt2c_v8_mul(pt2c_v8 a, pt2c_v8 b) { a.lo = vmulq_f32(a.lo, b.lo); a.hi = vmulq_f32(a.hi, b.hi); return a; }
static inline pt2c_v8 pt2c_v8_fma(pt2c_v8 acc, pt2c_v8 a, pt2c_v8 b)
{
    acc.lo = vfmaq_f32(acc.lo, a.lo, b.lo);
    acc.hi = vfmaq_f32(acc.hi, a.hi, b.hi);
    return acc;
}
static inline pt2c_v8 pt2c_v8_relu(pt2c_v8 x)
{
    float32x4_t z = vdupq_n_f32(0.0f);
    x.lo = vbslq_f32(vcgtq_f32(x.lo, z), x.lo, z);
    x.hi = vbslq_f32(vcgtq_f32(x.hi, z), x.hi, z);
    return x;
}
static inline pt2c_v8 pt2c_v8_clamp(pt2c_v8 x, pt2c_v8 lo, pt2c_v8 hi)
{
    x.lo = vbslq_f32(vcltq_f32(x.lo, lo.lo), lo.lo, x.lo);
    x.hi = vbslq_f32(vcltq_f32(x.hi, lo.hi), lo.hi, x.hi);
    x.lo = vbslq_f32(vcgtq_f32(x.lo, hi.lo), hi.lo, x.lo);
    x.hi = vbslq_f32(vcgtq_f32(x.hi, hi.hi), hi.hi, x.hi);
    return x;
}
#define PT2C_V8_RELU(x) pt2c_v8_relu(x)
#define PT2C_V8_CLAMP(x, lo, hi) pt2c_v8_clamp((x), (lo), (hi))
#define PT2C_V8_ZERO() pt2c_v8_zero()
#define PT2C_V8_LOAD(p) pt2c_v8_load(p)
#define PT2C_V8_STORE(p, v) pt2c_v8_store((p), (v))
#define PT2C_V8_SET1(x) pt2c_v8_set1(x)
#define PT2C_V8_ADD(a, b) pt2c_v8_add((a), (b))
#define PT2C_V8_MUL(a, b) pt2c_v8_mul((a), (b))
#define PT2C_V8_FMA(acc, a, b) pt2c_v8_fma((acc), (a), (b))
#endif

#endif /* PT2C_GEMM_H */
