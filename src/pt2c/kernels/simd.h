/* pt2c kernel library: the one vector layer every kernel's SIMD code is written against.
 *
 * The instruction set comes from the compiler's target macros (the target spec's -m flags set them;
 * -DPT2C_NO_SIMD turns every vector path off): PT2C_SIMD_AVX512, PT2C_SIMD_AVX2 (+ FMA) or
 * PT2C_SIMD_NEON (AArch64, where NEON is baseline); PT2C_SIMD_X86 for either x86 level.
 *
 * Two vector types, each with the same operations under the same names on every instruction set:
 *
 *   pt2c_vf, PT2C_VF_*   the native width: PT2C_VF_LANES floats (AVX-512 16, AVX2 8, NEON 4), with
 *                        lane masks pt2c_vfm (a __mmask16, a __m256i, a uint32x4_t) for the ragged
 *                        ends of rows: attention, pooling and the depthwise strips
 *   pt2c_v8, PT2C_V8_*   8 floats whatever the ISA (AVX2 and AVX-512: one __m256; NEON: two
 *                        float32x4_t): what a layout fixes at 8 (the GEMM's 16-wide panels, the
 *                        depthwise conv's 8 interleaved channels, the GELU epilogue)
 *
 * PT2C_VF / PT2C_V8 are defined where the type exists.  There is no emulated scalar form: without a
 * vector ISA (generic, riscv64, wasm32, cortex-m) each kernel runs its own plain C loop, written so
 * that compilers vectorise it where they can, and a vector path is guarded by #if defined(PT2C_VF)
 * (or PT2C_V8).
 *
 * Semantics shared by every mapping (what the kernels rely on):
 *   MAX(a, b) = a > b ? a : b and MIN(a, b) = a < b ? a : b, so a NaN in either gives b (x86's
 *   max / min; NEON selects, as FMAX / FMIN would return the NaN): relu = MAX(x, 0) gives 0 for NaN
 *   as the scalar x > 0 ? x : 0;
 *   pt2c_vf_maxnan(m, v): the max, a NaN in either operand wins (max pooling);
 *   masked loads do not touch the lanes outside the mask (they may lie outside the buffer) and
 *   give 0 there (MASKZ_LOAD) or the lanes of src (MASK_LOAD); masked stores write only the mask;
 *   pt2c_vf_range(lo, hi): lanes [lo, hi), clipped to [0, LANES);
 *   EVENS(a, b) / ODDS(a, b): the even / odd lanes of the 2 * LANES floats a:b (a stride-2 row);
 *   NEXT1(a, c): lanes 1 .. LANES - 1 of a, then lane 0 of c (a row one column on);
 *   EXP_FTZ(x): pt2c_exp_ftz's vector form (within 2 ulp; 0 below -87.3; NaN stays NaN).
 * The x86 mappings are the intrinsics the kernels used before the layer existed, so their machine
 * code did not change.
 */
#ifndef PT2C_SIMD_H
#define PT2C_SIMD_H

#include "common.h"

/* ---- instruction set (by the compiler's target macros: the target spec sets the -m flags) ---- */
#if !defined(PT2C_NO_SIMD) && defined(__AVX512F__)
#define PT2C_SIMD_AVX512 1
#elif !defined(PT2C_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#define PT2C_SIMD_AVX2 1
#elif !defined(PT2C_NO_SIMD) && (defined(__ARM_NEON) || defined(__ARM_NEON__)) && defined(__aarch64__)
#define PT2C_SIMD_NEON 1
#endif
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
#define PT2C_SIMD_X86 1
#include <immintrin.h>
#elif defined(PT2C_SIMD_NEON)
#include <arm_neon.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PT2C_SIMD_INLINE static inline __attribute__((always_inline)) PT2C_UNUSED
#else
#define PT2C_SIMD_INLINE static inline
#endif

/* ---- x86: shuffles and vector math of 8 and 16 floats ---- */
#if defined(PT2C_SIMD_X86)
/* p[0], p[2], .., p[14] (evens) / p[1], p[3], .., p[15] (odds) as one vector: stride-2 gathers
 * of im2col and max pooling. */
static inline PT2C_UNUSED __m256 pt2c_evens8(const float *p)
{
    const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x88);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
}
static inline PT2C_UNUSED __m256 pt2c_odds8(const float *p)
{
    const __m256 o = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0xDD);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8));
}
/* r[i][j] <- r[j][i] for i, j < 8: eight 8-float rows transposed in registers */
static inline PT2C_UNUSED void pt2c_tr8x8_v(__m256 *r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]),
                 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]),
                 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]),
                 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
/* d_i[j] = s_j[i] for i, j < 8: eight 8-float rows, transposed */
static inline PT2C_UNUSED void pt2c_tr8x8(float *const *d, const float *const *s)
{
    __m256 r[8];
    int i;
    for (i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s[i]);
    pt2c_tr8x8_v(r);
    for (i = 0; i < 8; i++) _mm256_storeu_ps(d[i], r[i]);
}

/* pt2c_erf of 8 floats with FMAs (GELU's epilogue): the same rational approximation. */
static inline PT2C_UNUSED __m256 pt2c_erf8(__m256 x)
{
    __m256 x2, p, q;
    x = _mm256_min_ps(_mm256_set1_ps(4.0f), _mm256_max_ps(_mm256_set1_ps(-4.0f), x)); /* (NaN: 2nd operand) */
    x2 = _mm256_mul_ps(x, x);
    p = _mm256_fmadd_ps(_mm256_set1_ps(-2.72614225801306e-10f), x2, _mm256_set1_ps(2.77068142495902e-08f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
    q = _mm256_fmadd_ps(_mm256_set1_ps(-1.45660718464996e-05f), x2, _mm256_set1_ps(-2.13374055278905e-04f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
    p = _mm256_div_ps(_mm256_mul_ps(x, p), q);
    return _mm256_min_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(_mm256_set1_ps(-1.0f), p));
}

/* pt2c_exp_ftz of 8 floats, with FMAs, for softmax arguments (x - max <= 0; right up to x = 88):
 * the same reduction and polynomial, within 2 ulp; 0 below -87.3; NaN stays NaN.  About 4x the
 * throughput of the loop over pt2c_exp_ftz, whose multiply-adds GCC does not contract in ISO C
 * mode and whose selects are integer blends. */
static inline PT2C_UNUSED __m256 pt2c_exp_ftz8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 c = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x)); /* (NaN: 2nd operand) */
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), c), p, e;
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    e = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), _mm256_mul_ps(p, e)); /* 2^n: n in [-126, 127] */
}
#endif
#if defined(PT2C_SIMD_AVX512)
/* pt2c_exp_ftz8 of 16 floats */
static inline PT2C_UNUSED __m512 pt2c_exp_ftz16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __m512 c = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c), p, e;
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    e = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), p, e);
}
#endif

#if defined(PT2C_SIMD_NEON)
/* pt2c_exp_ftz8 of 4 floats (the same steps; FMAX / FMIN pass a NaN on as x86's max / min do here) */
static inline PT2C_UNUSED float32x4_t pt2c_exp_ftz4(float32x4_t x)
{
    const float32x4_t lo = vdupq_n_f32(-87.3f);
    const float32x4_t c = vminq_f32(vdupq_n_f32(88.0f), vmaxq_f32(lo, x));
    const float32x4_t n = vrndnq_f32(vmulq_f32(c, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(c, n, vdupq_n_f32(0.693359375f)), p, e;
    r = vfmaq_f32(r, n, vdupq_n_f32(2.12194440e-4f));
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), vdupq_n_f32(1.9875691500e-4f), r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
    e = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(vmulq_f32(p, e)), vcltq_f32(x, lo)));
}
#endif

/* ---- 8 lanes: pt2c_v8 ---- */
#if defined(PT2C_SIMD_X86)
#define PT2C_V8 1
typedef __m256 pt2c_v8;
#define PT2C_V8_ZERO() _mm256_setzero_ps()
#define PT2C_V8_LOAD(p) _mm256_loadu_ps(p)
#define PT2C_V8_STORE(p, v) _mm256_storeu_ps((p), (v))
#define PT2C_V8_SET1(x) _mm256_set1_ps(x)
#define PT2C_V8_ADD(a, b) _mm256_add_ps((a), (b))
#define PT2C_V8_SUB(a, b) _mm256_sub_ps((a), (b))
#define PT2C_V8_MUL(a, b) _mm256_mul_ps((a), (b))
#define PT2C_V8_FMA(acc, a, b) _mm256_fmadd_ps((a), (b), (acc)) /* acc + a*b */
#define PT2C_V8_MAX(a, b) _mm256_max_ps((a), (b))
#define PT2C_V8_MIN(a, b) _mm256_min_ps((a), (b))
#elif defined(PT2C_SIMD_NEON)
#define PT2C_V8 1
typedef struct {
    float32x4_t lo, hi;
} pt2c_v8;
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_zero(void) { pt2c_v8 r; r.lo = vdupq_n_f32(0.0f); r.hi = r.lo; return r; }
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_load(const float *p) { pt2c_v8 r; r.lo = vld1q_f32(p); r.hi = vld1q_f32(p + 4); return r; }
PT2C_SIMD_INLINE void pt2c_v8_store(float *p, pt2c_v8 v) { vst1q_f32(p, v.lo); vst1q_f32(p + 4, v.hi); }
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_set1(float x) { pt2c_v8 r; r.lo = vdupq_n_f32(x); r.hi = r.lo; return r; }
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_add(pt2c_v8 a, pt2c_v8 b) { a.lo = vaddq_f32(a.lo, b.lo); a.hi = vaddq_f32(a.hi, b.hi); return a; }
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_sub(pt2c_v8 a, pt2c_v8 b) { a.lo = vsubq_f32(a.lo, b.lo); a.hi = vsubq_f32(a.hi, b.hi); return a; }
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_mul(pt2c_v8 a, pt2c_v8 b) { a.lo = vmulq_f32(a.lo, b.lo); a.hi = vmulq_f32(a.hi, b.hi); return a; }
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_fma(pt2c_v8 acc, pt2c_v8 a, pt2c_v8 b)
{
    acc.lo = vfmaq_f32(acc.lo, a.lo, b.lo);
    acc.hi = vfmaq_f32(acc.hi, a.hi, b.hi);
    return acc;
}
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_max(pt2c_v8 a, pt2c_v8 b) /* a > b ? a : b, as x86 */
{
    a.lo = vbslq_f32(vcgtq_f32(a.lo, b.lo), a.lo, b.lo);
    a.hi = vbslq_f32(vcgtq_f32(a.hi, b.hi), a.hi, b.hi);
    return a;
}
PT2C_SIMD_INLINE pt2c_v8 pt2c_v8_min(pt2c_v8 a, pt2c_v8 b) /* a < b ? a : b, as x86 */
{
    a.lo = vbslq_f32(vcltq_f32(a.lo, b.lo), a.lo, b.lo);
    a.hi = vbslq_f32(vcltq_f32(a.hi, b.hi), a.hi, b.hi);
    return a;
}
#define PT2C_V8_ZERO() pt2c_v8_zero()
#define PT2C_V8_LOAD(p) pt2c_v8_load(p)
#define PT2C_V8_STORE(p, v) pt2c_v8_store((p), (v))
#define PT2C_V8_SET1(x) pt2c_v8_set1(x)
#define PT2C_V8_ADD(a, b) pt2c_v8_add((a), (b))
#define PT2C_V8_SUB(a, b) pt2c_v8_sub((a), (b))
#define PT2C_V8_MUL(a, b) pt2c_v8_mul((a), (b))
#define PT2C_V8_FMA(acc, a, b) pt2c_v8_fma((acc), (a), (b))
#define PT2C_V8_MAX(a, b) pt2c_v8_max((a), (b))
#define PT2C_V8_MIN(a, b) pt2c_v8_min((a), (b))
#endif
/* The epilogue's activations, the same bits as the scalar forms (NaN included): relu x > 0 ? x : 0,
 * clamp v = x < lo ? lo : x; v > hi ? hi : v. */
#if defined(PT2C_V8)
#define PT2C_V8_RELU(x) PT2C_V8_MAX((x), PT2C_V8_ZERO())
#define PT2C_V8_CLAMP(x, lo, hi) PT2C_V8_MIN((hi), PT2C_V8_MAX((lo), (x)))
#endif

/* ---- the native width: pt2c_vf, masks pt2c_vfm ---- */
#if defined(PT2C_SIMD_AVX512)
#define PT2C_VF 1
#define PT2C_VF_LANES 16
typedef __m512 pt2c_vf;
typedef __mmask16 pt2c_vfm;
#define PT2C_VF_ZERO() _mm512_setzero_ps()
#define PT2C_VF_LOAD(p) _mm512_loadu_ps(p)
#define PT2C_VF_STORE(p, v) _mm512_storeu_ps((p), (v))
#define PT2C_VF_SET1(x) _mm512_set1_ps(x)
#define PT2C_VF_ADD(a, b) _mm512_add_ps((a), (b))
#define PT2C_VF_SUB(a, b) _mm512_sub_ps((a), (b))
#define PT2C_VF_MUL(a, b) _mm512_mul_ps((a), (b))
#define PT2C_VF_FMA(acc, a, b) _mm512_fmadd_ps((a), (b), (acc))
#define PT2C_VF_MAX(a, b) _mm512_max_ps((a), (b))
#define PT2C_VF_MIN(a, b) _mm512_min_ps((a), (b))
#define PT2C_VF_EXP_FTZ(x) pt2c_exp_ftz16(x)
#define PT2C_VF_MASKZ_LOAD(m, p) _mm512_maskz_loadu_ps((m), (p))
#define PT2C_VF_MASK_LOAD(src, m, p) _mm512_mask_loadu_ps((src), (m), (p))
#define PT2C_VF_MASK_STORE(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define PT2C_VF_EVENS(a, b) \
    _mm512_permutex2var_ps((a), _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), (b))
#define PT2C_VF_ODDS(a, b) \
    _mm512_permutex2var_ps((a), _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), (b))
#define PT2C_VF_NEXT1(a, c) \
    _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(c), _mm512_castps_si512(a), 1))
static inline PT2C_UNUSED pt2c_vfm pt2c_vf_range(int lo, int hi)
{
    lo = PT2C_MAX(lo, 0), hi = PT2C_MIN(hi, 16);
    return (pt2c_vfm)(hi > lo ? ((1u << hi) - 1u) & ~((1u << lo) - 1u) : 0u);
}
static inline PT2C_UNUSED pt2c_vf pt2c_vf_maxnan(pt2c_vf m, pt2c_vf v)
{
    return _mm512_mask_mov_ps(_mm512_max_ps(m, v), _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q), m);
}
#elif defined(PT2C_SIMD_AVX2)
#define PT2C_VF 1
#define PT2C_VF_LANES 8
typedef __m256 pt2c_vf;
typedef __m256i pt2c_vfm;
#define PT2C_VF_ZERO() _mm256_setzero_ps()
#define PT2C_VF_LOAD(p) _mm256_loadu_ps(p)
#define PT2C_VF_STORE(p, v) _mm256_storeu_ps((p), (v))
#define PT2C_VF_SET1(x) _mm256_set1_ps(x)
#define PT2C_VF_ADD(a, b) _mm256_add_ps((a), (b))
#define PT2C_VF_SUB(a, b) _mm256_sub_ps((a), (b))
#define PT2C_VF_MUL(a, b) _mm256_mul_ps((a), (b))
#define PT2C_VF_FMA(acc, a, b) _mm256_fmadd_ps((a), (b), (acc))
#define PT2C_VF_MAX(a, b) _mm256_max_ps((a), (b))
#define PT2C_VF_MIN(a, b) _mm256_min_ps((a), (b))
#define PT2C_VF_EXP_FTZ(x) pt2c_exp_ftz8(x)
#define PT2C_VF_MASKZ_LOAD(m, p) _mm256_maskload_ps((p), (m))
#define PT2C_VF_MASK_LOAD(src, m, p) _mm256_blendv_ps((src), _mm256_maskload_ps((p), (m)), _mm256_castsi256_ps(m))
#define PT2C_VF_MASK_STORE(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define PT2C_VF_EVENS(a, b) \
    _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps((a), (b), 0x88)), 0xD8))
#define PT2C_VF_ODDS(a, b) \
    _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps((a), (b), 0xDD)), 0xD8))
#define PT2C_VF_NEXT1(a, c)                                                                   \
    _mm256_blend_ps(_mm256_permutevar8x32_ps((a), _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0)), \
                    _mm256_permutevar8x32_ps((c), _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0)), 0x80)
static inline PT2C_UNUSED pt2c_vfm pt2c_vf_range(int lo, int hi)
{
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(hi), iota),
                            _mm256_cmpgt_epi32(iota, _mm256_set1_epi32(lo - 1)));
}
static inline PT2C_UNUSED pt2c_vf pt2c_vf_maxnan(pt2c_vf m, pt2c_vf v)
{
    return _mm256_blendv_ps(_mm256_max_ps(m, v), m, _mm256_cmp_ps(m, m, _CMP_UNORD_Q));
}
#elif defined(PT2C_SIMD_NEON)
#define PT2C_VF 1
#define PT2C_VF_LANES 4
typedef float32x4_t pt2c_vf;
typedef uint32x4_t pt2c_vfm;
#define PT2C_VF_ZERO() vdupq_n_f32(0.0f)
#define PT2C_VF_LOAD(p) vld1q_f32(p)
#define PT2C_VF_STORE(p, v) vst1q_f32((p), (v))
#define PT2C_VF_SET1(x) vdupq_n_f32(x)
#define PT2C_VF_ADD(a, b) vaddq_f32((a), (b))
#define PT2C_VF_SUB(a, b) vsubq_f32((a), (b))
#define PT2C_VF_MUL(a, b) vmulq_f32((a), (b))
#define PT2C_VF_FMA(acc, a, b) vfmaq_f32((acc), (a), (b))
#define PT2C_VF_MAX(a, b) pt2c_vf_max_neon((a), (b))
#define PT2C_VF_MIN(a, b) pt2c_vf_min_neon((a), (b))
#define PT2C_VF_EXP_FTZ(x) pt2c_exp_ftz4(x)
#define PT2C_VF_MASKZ_LOAD(m, p) pt2c_vf_maskz_load_neon((m), (p))
#define PT2C_VF_MASK_LOAD(src, m, p) vbslq_f32((m), pt2c_vf_maskz_load_neon((m), (p)), (src))
#define PT2C_VF_MASK_STORE(p, m, v) pt2c_vf_mask_store_neon((p), (m), (v))
#define PT2C_VF_EVENS(a, b) vuzp1q_f32((a), (b))
#define PT2C_VF_ODDS(a, b) vuzp2q_f32((a), (b))
#define PT2C_VF_NEXT1(a, c) vextq_f32((a), (c), 1)
PT2C_SIMD_INLINE float32x4_t pt2c_vf_max_neon(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
PT2C_SIMD_INLINE float32x4_t pt2c_vf_min_neon(float32x4_t a, float32x4_t b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
PT2C_SIMD_INLINE uint32x4_t pt2c_vf_range(int lo, int hi)
{
    static const int32_t iota[4] = {0, 1, 2, 3};
    const int32x4_t i = vld1q_s32(iota);
    return vandq_u32(vcltq_s32(i, vdupq_n_s32(hi)), vcgeq_s32(i, vdupq_n_s32(lo)));
}
/* No masked memory access on NEON: a whole vector where every lane is on (the inside of a row),
 * else lane by lane. */
PT2C_SIMD_INLINE float32x4_t pt2c_vf_maskz_load_neon(uint32x4_t m, const float *p)
{
    float t[4];
    if (vminvq_u32(m)) return vld1q_f32(p);
    t[0] = vgetq_lane_u32(m, 0) ? p[0] : 0.0f;
    t[1] = vgetq_lane_u32(m, 1) ? p[1] : 0.0f;
    t[2] = vgetq_lane_u32(m, 2) ? p[2] : 0.0f;
    t[3] = vgetq_lane_u32(m, 3) ? p[3] : 0.0f;
    return vld1q_f32(t);
}
PT2C_SIMD_INLINE void pt2c_vf_mask_store_neon(float *p, uint32x4_t m, float32x4_t v)
{
    float t[4];
    if (vminvq_u32(m)) {
        vst1q_f32(p, v);
        return;
    }
    vst1q_f32(t, v);
    if (vgetq_lane_u32(m, 0)) p[0] = t[0];
    if (vgetq_lane_u32(m, 1)) p[1] = t[1];
    if (vgetq_lane_u32(m, 2)) p[2] = t[2];
    if (vgetq_lane_u32(m, 3)) p[3] = t[3];
}
PT2C_SIMD_INLINE float32x4_t pt2c_vf_maxnan(float32x4_t m, float32x4_t v) { return vmaxq_f32(m, v); } /* FMAX */
#endif

#endif /* PT2C_SIMD_H */
