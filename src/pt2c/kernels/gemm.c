/* pt2c kernel library: single-precision GEMM with fused epilogue.
 *
 *   C[i*ldc + j] = act(sum_k A(i,k) B(k,j) + bias + residual)
 *
 * Structure follows BLIS/GotoBLAS: three cache-blocking loops (jc over NC
 * columns, pc over KC depth, ic over MC rows) around a 6x16 register-tiled
 * micro-kernel.  The operand that is not already packed is copied into
 * contiguous micro-panels in `scratch`, so the micro-kernel always streams
 * B as NR-wide rows and reads A either from a packed panel or (skinny M, where
 * packing A is pure overhead) straight from the strided source.
 *
 * Packed layouts (independent of KC/MC/NC, produced at compile time by
 * pt2c/kernels/layout.py for weights):
 *   A: element (i,k) at A[(i/MR)*MR*K + k*MR + i%MR], rows past M are zero
 *   B: element (k,j) at B[(j/NR)*NR*K + k*NR + j%NR], columns past N are zero
 * so the k-range [k0,k0+kc) of a panel is simply an offset of k0*MR / k0*NR.
 *
 * The micro-kernel is written once against a tiny 8-lane vector layer
 * (AVX2/AVX-512: __m256, NEON: two float32x4_t) with a plain C fallback.
 */
#ifndef PT2C_GEMM_C
#define PT2C_GEMM_C

#include "common.h"

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

enum {
    PT2C_ACT_NONE,
    PT2C_ACT_RELU,
    PT2C_ACT_CLAMP, /* min(max(x,lo),hi): relu6, hardtanh */
    PT2C_ACT_HARDSWISH,
    PT2C_ACT_SILU,
    PT2C_ACT_GELU, /* erf form */
    PT2C_ACT_GELU_TANH,
    PT2C_ACT_SIGMOID,
    PT2C_ACT_TANH
};

typedef struct {
    const float *bias; /* NULL, or bias[i] per row (bias_per_row=1, length M) / bias[j] per column (length N) */
    int bias_per_row;
    const float *residual; /* NULL, or C[i][j] += residual[i*ldr + j] (after bias, before act); */
    int ldr;               /* must not alias C */
    int act;
    float lo, hi; /* C = act(A*B + bias + residual) */
} pt2c_epilogue;

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

/* ---- epilogue ---- */

/* Applies the activation in place to n contiguous values.  The switch is
 * outside the loops so the simple cases auto-vectorise. */
PT2C_KERNEL void pt2c_epilogue_act(float *x, int n, int act, float lo, float hi)
{
    int j;
    switch (act) {
    case PT2C_ACT_RELU:
        for (j = 0; j < n; j++) x[j] = x[j] > 0.0f ? x[j] : 0.0f;
        break;
    case PT2C_ACT_CLAMP:
        for (j = 0; j < n; j++) {
            float v = x[j] < lo ? lo : x[j];
            x[j] = v > hi ? hi : v;
        }
        break;
    case PT2C_ACT_HARDSWISH:
        for (j = 0; j < n; j++) {
            float t = x[j] + 3.0f;
            t = t < 0.0f ? 0.0f : (t > 6.0f ? 6.0f : t);
            x[j] = x[j] * t * (1.0f / 6.0f);
        }
        break;
    case PT2C_ACT_SILU:
        for (j = 0; j < n; j++) x[j] = x[j] / (1.0f + pt2c_exp(-x[j]));
        break;
    case PT2C_ACT_GELU:
        j = 0;
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
        for (; j + 8 <= n; j += 8) { /* (with FMAs: GCC does not contract the loop below under -std=c99) */
            const __m256 v = _mm256_loadu_ps(x + j);
            const __m256 e = pt2c_erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
            _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                                                  _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
        }
#endif
        for (; j < n; j++) x[j] = 0.5f * x[j] * (1.0f + pt2c_erf(x[j] * 0.70710678118654752f));
        break;
    case PT2C_ACT_GELU_TANH:
        for (j = 0; j < n; j++) {
            float v = x[j];
            x[j] = 0.5f * v * (1.0f + pt2c_tanh(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
    case PT2C_ACT_SIGMOID:
        for (j = 0; j < n; j++) x[j] = 1.0f / (1.0f + pt2c_exp(-x[j]));
        break;
    case PT2C_ACT_TANH:
        for (j = 0; j < n; j++) x[j] = pt2c_tanh(x[j]);
        break;
    default:
        break;
    }
}

/* Writes an mr x nr corner of an MR x NR accumulator tile to C: optionally
 * adding the previous C (k blocks after the first), then the epilogue (only
 * passed for the last k block).  (i0, j0) locate the tile for bias/residual. */
static void pt2c_gemm_store_tile(float *c, int ldc, const float *t, int mr, int nr, int accumulate,
                                 const pt2c_epilogue *ep, int i0, int j0)
{
    int i, j;
    for (i = 0; i < mr; i++) {
        float row[PT2C_GEMM_NR];
        float *ci = c + (ptrdiff_t)i * ldc;
        const float *ti = t + i * PT2C_GEMM_NR;
        for (j = 0; j < nr; j++) row[j] = accumulate ? ti[j] + ci[j] : ti[j];
        if (ep) {
            if (ep->bias && ep->bias_per_row) {
                float b = ep->bias[i0 + i];
                for (j = 0; j < nr; j++) row[j] += b;
            } else if (ep->bias) {
                for (j = 0; j < nr; j++) row[j] += ep->bias[j0 + j];
            }
            if (ep->residual) {
                const float *r = ep->residual + (ptrdiff_t)(i0 + i) * ep->ldr + j0;
                for (j = 0; j < nr; j++) row[j] += r[j];
            }
            pt2c_epilogue_act(row, nr, ep->act, ep->lo, ep->hi);
        }
        memcpy(ci, row, (size_t)nr * sizeof(float));
    }
}

/* The micro-kernels prefetch (into L2) the next micro-panel of a pre-packed A (pfa, or NULL), 8 of
 * its k rows (3 cache lines) every 8 k steps, while they work on this one: on the first pass over
 * the A block (the weights of convolutions and Winograd's transformed ones: streamed from memory
 * once per run, as each A panel meets few B panels).  Spread over the k loop: a burst of a whole
 * panel's prefetches before the call stalled on full fill buffers (~12 % of ResNet-18's time).
 * Not for an A packed just now into scratch (a_packed == 2 in pt2c_gemm_serial: in cache; the
 * prefetches only cost there).  0 turns it off. */
#ifndef PT2C_GEMM_PREFETCH_A
#define PT2C_GEMM_PREFETCH_A 1
#endif
#define PT2C_GEMM_PREFETCH_PANEL8(p) \
    (PT2C_GEMM_PREFETCH_R(p), PT2C_GEMM_PREFETCH_R((p) + 16), PT2C_GEMM_PREFETCH_R((p) + 32))

/* ---- micro-kernel ---- */

/* Epilogues the micro-kernel applies in registers on full-width tiles (same
 * operation order as pt2c_gemm_store_tile, so the same bits); the drivers run the
 * other activations over whole rows afterwards. */
#define PT2C_GEMM_EP_IN_REGS(ep) \
    (!(ep) || (ep)->act == PT2C_ACT_NONE || (ep)->act == PT2C_ACT_RELU || (ep)->act == PT2C_ACT_CLAMP)

#if defined(PT2C_GEMM_VEC)

PT2C_GEMM_INLINE void pt2c_gemm_ep_row(const pt2c_epilogue *ep, pt2c_v8 *v0, pt2c_v8 *v1, int i, int j)
{
    if (ep->bias) {
        if (ep->bias_per_row) {
            pt2c_v8 b = PT2C_V8_SET1(ep->bias[i]);
            *v0 = PT2C_V8_ADD(*v0, b), *v1 = PT2C_V8_ADD(*v1, b);
        } else {
            *v0 = PT2C_V8_ADD(*v0, PT2C_V8_LOAD(ep->bias + j)), *v1 = PT2C_V8_ADD(*v1, PT2C_V8_LOAD(ep->bias + j + 8));
        }
    }
    if (ep->residual) {
        const float *r = ep->residual + (ptrdiff_t)i * ep->ldr + j;
        *v0 = PT2C_V8_ADD(*v0, PT2C_V8_LOAD(r)), *v1 = PT2C_V8_ADD(*v1, PT2C_V8_LOAD(r + 8));
    }
    if (ep->act == PT2C_ACT_RELU) {
        *v0 = PT2C_V8_RELU(*v0), *v1 = PT2C_V8_RELU(*v1);
    } else if (ep->act == PT2C_ACT_CLAMP) {
        pt2c_v8 lo = PT2C_V8_SET1(ep->lo), hi = PT2C_V8_SET1(ep->hi);
        *v0 = PT2C_V8_CLAMP(*v0, lo, hi), *v1 = PT2C_V8_CLAMP(*v1, lo, hi);
    }
}
#endif

#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
/* pt2c_gemm_ep_row on the columns that masks m0 (j..j+7) and m1 (j+8..j+15) select; the others
 * are not read: bias and residual here, the activation by pt2c_gemm_ep_row */
PT2C_GEMM_INLINE void pt2c_gemm_ep_row_m(const pt2c_epilogue *ep, __m256 *v0, __m256 *v1, int i, int j, __m256i m0,
                                         __m256i m1)
{
    pt2c_epilogue act = *ep;
    if (ep->bias && ep->bias_per_row) {
        __m256 b = _mm256_set1_ps(ep->bias[i]);
        *v0 = _mm256_add_ps(*v0, b), *v1 = _mm256_add_ps(*v1, b);
    } else if (ep->bias) {
        *v0 = _mm256_add_ps(*v0, _mm256_maskload_ps(ep->bias + j, m0));
        *v1 = _mm256_add_ps(*v1, _mm256_maskload_ps(ep->bias + j + 8, m1));
    }
    if (ep->residual) {
        const float *r = ep->residual + (ptrdiff_t)i * ep->ldr + j;
        *v0 = _mm256_add_ps(*v0, _mm256_maskload_ps(r, m0)), *v1 = _mm256_add_ps(*v1, _mm256_maskload_ps(r + 8, m1));
    }
    act.bias = NULL, act.residual = NULL;
    pt2c_gemm_ep_row(&act, v0, v1, i, j);
}
#endif

/* ROWS x 16 tile over kc steps.  A(i,k) = a[i*ars + k*acs] (packed panel:
 * ars=1, acs=MR), b is a packed NR-wide panel.  ROWS is a compile-time
 * constant after inlining, so the unused rows vanish.  Tiles (any number of
 * rows) without an epilogue or with a bias/residual/relu/clamp epilogue are
 * stored straight from registers (partial panels on x86 through masked loads
 * and stores); everything else goes through pt2c_gemm_store_tile. */
PT2C_GEMM_INLINE void pt2c_gemm_ukernel_body(int kc, const float *PT2C_RESTRICT a, ptrdiff_t ars, ptrdiff_t acs,
                                             const float *PT2C_RESTRICT b, ptrdiff_t bs, float *c, int ldc, int mr, int nr,
                                             int accumulate, const pt2c_epilogue *ep, int i0, int j0, const int ROWS,
                                             const float *pfa, const float *pfb, int pfn)
{
#if defined(PT2C_GEMM_VEC)
    /* 12 accumulators + 2 B vectors + 1 broadcast = 15 of 16 ymm registers. */
    pt2c_v8 c00 = PT2C_V8_ZERO(), c01 = PT2C_V8_ZERO(), c10 = PT2C_V8_ZERO(), c11 = PT2C_V8_ZERO();
    pt2c_v8 c20 = PT2C_V8_ZERO(), c21 = PT2C_V8_ZERO(), c30 = PT2C_V8_ZERO(), c31 = PT2C_V8_ZERO();
    pt2c_v8 c40 = PT2C_V8_ZERO(), c41 = PT2C_V8_ZERO(), c50 = PT2C_V8_ZERO(), c51 = PT2C_V8_ZERO();
    int k = 0;
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
    /* A last panel of at most 8 columns (196 pixels = 12 panels + 4): the first 8 columns of its
     * zero-padded B panel only, half the FMAs.  Even k steps sum into cX0, odd ones into cX1 (12
     * chains, as the full tile); cX1 is added into cX0 and the masked store below takes cX0 (its
     * second mask selects nothing).  The loops after this one then have no k left. */
    if (nr <= 8 && PT2C_GEMM_EP_IN_REGS(ep)) {
        for (; k + 2 <= kc; k += 2) {
            const float *a1 = a + acs;
            const pt2c_v8 b0 = PT2C_V8_LOAD(b), b1 = PT2C_V8_LOAD(b + bs);
            if (pfa && !(k & 7)) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * PT2C_GEMM_MR);
            c00 = PT2C_V8_FMA(c00, PT2C_V8_SET1(a[0]), b0), c01 = PT2C_V8_FMA(c01, PT2C_V8_SET1(a1[0]), b1);
            if (ROWS > 1) c10 = PT2C_V8_FMA(c10, PT2C_V8_SET1(a[ars]), b0), c11 = PT2C_V8_FMA(c11, PT2C_V8_SET1(a1[ars]), b1);
            if (ROWS > 2) c20 = PT2C_V8_FMA(c20, PT2C_V8_SET1(a[2 * ars]), b0), c21 = PT2C_V8_FMA(c21, PT2C_V8_SET1(a1[2 * ars]), b1);
            if (ROWS > 3) c30 = PT2C_V8_FMA(c30, PT2C_V8_SET1(a[3 * ars]), b0), c31 = PT2C_V8_FMA(c31, PT2C_V8_SET1(a1[3 * ars]), b1);
            if (ROWS > 4) c40 = PT2C_V8_FMA(c40, PT2C_V8_SET1(a[4 * ars]), b0), c41 = PT2C_V8_FMA(c41, PT2C_V8_SET1(a1[4 * ars]), b1);
            if (ROWS > 5) c50 = PT2C_V8_FMA(c50, PT2C_V8_SET1(a[5 * ars]), b0), c51 = PT2C_V8_FMA(c51, PT2C_V8_SET1(a1[5 * ars]), b1);
            a += 2 * acs, b += 2 * bs;
        }
        if (k < kc) {
            const pt2c_v8 b0 = PT2C_V8_LOAD(b);
            c00 = PT2C_V8_FMA(c00, PT2C_V8_SET1(a[0]), b0);
            if (ROWS > 1) c10 = PT2C_V8_FMA(c10, PT2C_V8_SET1(a[ars]), b0);
            if (ROWS > 2) c20 = PT2C_V8_FMA(c20, PT2C_V8_SET1(a[2 * ars]), b0);
            if (ROWS > 3) c30 = PT2C_V8_FMA(c30, PT2C_V8_SET1(a[3 * ars]), b0);
            if (ROWS > 4) c40 = PT2C_V8_FMA(c40, PT2C_V8_SET1(a[4 * ars]), b0);
            if (ROWS > 5) c50 = PT2C_V8_FMA(c50, PT2C_V8_SET1(a[5 * ars]), b0);
            k = kc;
        }
        c00 = PT2C_V8_ADD(c00, c01), c10 = PT2C_V8_ADD(c10, c11), c20 = PT2C_V8_ADD(c20, c21);
        c30 = PT2C_V8_ADD(c30, c31), c40 = PT2C_V8_ADD(c40, c41), c50 = PT2C_V8_ADD(c50, c51);
    }
#endif
    /* Start pulling the C tile in now (rows are ldc apart, often on different
     * pages); it is needed only after the k loop.  Worth ~10% on large C. */
    if (nr == PT2C_GEMM_NR) {
        int i;
        for (i = 0; i < ROWS && i < mr; i++) {
            PT2C_GEMM_PREFETCH_W(c + (ptrdiff_t)i * ldc);
            PT2C_GEMM_PREFETCH_W(c + (ptrdiff_t)i * ldc + 15);
            if (ep && ep->residual) { /* the same for the residual rows */
                PT2C_GEMM_PREFETCH_R(ep->residual + (ptrdiff_t)(i0 + i) * ep->ldr + j0);
                PT2C_GEMM_PREFETCH_R(ep->residual + (ptrdiff_t)(i0 + i) * ep->ldr + j0 + 15);
            }
        }
    }
    /* With few rows the FMA chains are too few to hide FMA latency (4 cycles,
     * 2 per cycle wants >= 8 independent sums), so split k into phases with
     * their own accumulators (the spare registers) and add them up after. */
    if (ROWS == 1) {
        for (; k + 4 <= kc; k += 4) {
            pt2c_v8 a0 = PT2C_V8_SET1(a[0]), a1 = PT2C_V8_SET1(a[acs]);
            pt2c_v8 a2 = PT2C_V8_SET1(a[2 * acs]), a3 = PT2C_V8_SET1(a[3 * acs]);
            c00 = PT2C_V8_FMA(c00, a0, PT2C_V8_LOAD(b)), c01 = PT2C_V8_FMA(c01, a0, PT2C_V8_LOAD(b + 8));
            c10 = PT2C_V8_FMA(c10, a1, PT2C_V8_LOAD(b + bs)), c11 = PT2C_V8_FMA(c11, a1, PT2C_V8_LOAD(b + bs + 8));
            c20 = PT2C_V8_FMA(c20, a2, PT2C_V8_LOAD(b + 2 * bs)), c21 = PT2C_V8_FMA(c21, a2, PT2C_V8_LOAD(b + 2 * bs + 8));
            c30 = PT2C_V8_FMA(c30, a3, PT2C_V8_LOAD(b + 3 * bs)), c31 = PT2C_V8_FMA(c31, a3, PT2C_V8_LOAD(b + 3 * bs + 8));
            a += 4 * acs;
            b += 4 * bs;
        }
        c00 = PT2C_V8_ADD(PT2C_V8_ADD(c00, c10), PT2C_V8_ADD(c20, c30));
        c01 = PT2C_V8_ADD(PT2C_V8_ADD(c01, c11), PT2C_V8_ADD(c21, c31));
    } else if (ROWS <= 3) { /* rows 0..2 in c00..c21 (even k) and c30..c51 (odd k) */
        for (; k + 2 <= kc; k += 2) {
            const float *a1 = a + acs;
            pt2c_v8 b0 = PT2C_V8_LOAD(b), b1 = PT2C_V8_LOAD(b + 8), b2 = PT2C_V8_LOAD(b + bs),
                    b3 = PT2C_V8_LOAD(b + bs + 8), av;
            av = PT2C_V8_SET1(a[0]), c00 = PT2C_V8_FMA(c00, av, b0), c01 = PT2C_V8_FMA(c01, av, b1);
            av = PT2C_V8_SET1(a1[0]), c30 = PT2C_V8_FMA(c30, av, b2), c31 = PT2C_V8_FMA(c31, av, b3);
            av = PT2C_V8_SET1(a[ars]), c10 = PT2C_V8_FMA(c10, av, b0), c11 = PT2C_V8_FMA(c11, av, b1);
            av = PT2C_V8_SET1(a1[ars]), c40 = PT2C_V8_FMA(c40, av, b2), c41 = PT2C_V8_FMA(c41, av, b3);
            if (ROWS > 2) {
                av = PT2C_V8_SET1(a[2 * ars]), c20 = PT2C_V8_FMA(c20, av, b0), c21 = PT2C_V8_FMA(c21, av, b1);
                av = PT2C_V8_SET1(a1[2 * ars]), c50 = PT2C_V8_FMA(c50, av, b2), c51 = PT2C_V8_FMA(c51, av, b3);
            }
            a += 2 * acs;
            b += 2 * bs;
        }
        c00 = PT2C_V8_ADD(c00, c30), c01 = PT2C_V8_ADD(c01, c31);
        c10 = PT2C_V8_ADD(c10, c40), c11 = PT2C_V8_ADD(c11, c41);
        c20 = PT2C_V8_ADD(c20, c50), c21 = PT2C_V8_ADD(c21, c51);
    }
#define PT2C_GEMM_V8_STEP                                                                                   \
    do {                                                                                                    \
        const pt2c_v8 b0 = PT2C_V8_LOAD(b), b1 = PT2C_V8_LOAD(b + 8);                                        \
        pt2c_v8 av;                                                                                         \
        av = PT2C_V8_SET1(a[0]), c00 = PT2C_V8_FMA(c00, av, b0), c01 = PT2C_V8_FMA(c01, av, b1);             \
        av = PT2C_V8_SET1(a[ars]), c10 = PT2C_V8_FMA(c10, av, b0), c11 = PT2C_V8_FMA(c11, av, b1);           \
        av = PT2C_V8_SET1(a[2 * ars]), c20 = PT2C_V8_FMA(c20, av, b0), c21 = PT2C_V8_FMA(c21, av, b1);       \
        av = PT2C_V8_SET1(a[3 * ars]), c30 = PT2C_V8_FMA(c30, av, b0), c31 = PT2C_V8_FMA(c31, av, b1);       \
        av = PT2C_V8_SET1(a[4 * ars]), c40 = PT2C_V8_FMA(c40, av, b0), c41 = PT2C_V8_FMA(c41, av, b1);       \
        av = PT2C_V8_SET1(a[5 * ars]), c50 = PT2C_V8_FMA(c50, av, b0), c51 = PT2C_V8_FMA(c51, av, b1);       \
        a += acs, b += bs;                                                                                  \
    } while (0)
    if (ROWS == PT2C_GEMM_MR) /* 8 k steps written out per prefetch test, as the AVX-512 kernel */
        for (; k + 8 <= kc; k += 8) {
            if (pfa) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * PT2C_GEMM_MR);
            if (pfn > 0) PT2C_GEMM_PREFETCH_R(pfb), pfb += bs, pfn--; /* a row per 8 k (pt2c_gemm_pf_share) */
            PT2C_GEMM_V8_STEP;
            PT2C_GEMM_V8_STEP;
            PT2C_GEMM_V8_STEP;
            PT2C_GEMM_V8_STEP;
            PT2C_GEMM_V8_STEP;
            PT2C_GEMM_V8_STEP;
            PT2C_GEMM_V8_STEP;
            PT2C_GEMM_V8_STEP;
        }
#undef PT2C_GEMM_V8_STEP
    for (; pfn > 0; pfn--, pfb += bs) PT2C_GEMM_PREFETCH_R(pfb); /* what the loop did not take */
    for (; k < kc; k++) {
        pt2c_v8 b0 = PT2C_V8_LOAD(b), b1 = PT2C_V8_LOAD(b + 8), av;
        if (pfa && !(k & 7)) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * PT2C_GEMM_MR); /* see PT2C_GEMM_PREFETCH_A */
        av = PT2C_V8_SET1(a[0]);
        c00 = PT2C_V8_FMA(c00, av, b0), c01 = PT2C_V8_FMA(c01, av, b1);
        if (ROWS > 1) av = PT2C_V8_SET1(a[ars]), c10 = PT2C_V8_FMA(c10, av, b0), c11 = PT2C_V8_FMA(c11, av, b1);
        if (ROWS > 2) av = PT2C_V8_SET1(a[2 * ars]), c20 = PT2C_V8_FMA(c20, av, b0), c21 = PT2C_V8_FMA(c21, av, b1);
        if (ROWS > 3) av = PT2C_V8_SET1(a[3 * ars]), c30 = PT2C_V8_FMA(c30, av, b0), c31 = PT2C_V8_FMA(c31, av, b1);
        if (ROWS > 4) av = PT2C_V8_SET1(a[4 * ars]), c40 = PT2C_V8_FMA(c40, av, b0), c41 = PT2C_V8_FMA(c41, av, b1);
        if (ROWS > 5) av = PT2C_V8_SET1(a[5 * ars]), c50 = PT2C_V8_FMA(c50, av, b0), c51 = PT2C_V8_FMA(c51, av, b1);
        a += acs;
        b += bs;
    }
    if (nr == PT2C_GEMM_NR && PT2C_GEMM_EP_IN_REGS(ep)) { /* whole rows: from registers (the first mr) */
        float *r;
#define PT2C_GEMM_PUT(ROW, V0, V1)                                                  \
        r = c + (ptrdiff_t)(ROW) * ldc;                                             \
        if (accumulate) V0 = PT2C_V8_ADD(V0, PT2C_V8_LOAD(r)), V1 = PT2C_V8_ADD(V1, PT2C_V8_LOAD(r + 8)); \
        if (ep) pt2c_gemm_ep_row(ep, &V0, &V1, i0 + (ROW), j0);                     \
        PT2C_V8_STORE(r, V0), PT2C_V8_STORE(r + 8, V1)
        PT2C_GEMM_PUT(0, c00, c01);
        if (ROWS > 1 && mr > 1) { PT2C_GEMM_PUT(1, c10, c11); }
        if (ROWS > 2 && mr > 2) { PT2C_GEMM_PUT(2, c20, c21); }
        if (ROWS > 3 && mr > 3) { PT2C_GEMM_PUT(3, c30, c31); }
        if (ROWS > 4 && mr > 4) { PT2C_GEMM_PUT(4, c40, c41); }
        if (ROWS > 5 && mr > 5) { PT2C_GEMM_PUT(5, c50, c51); }
#undef PT2C_GEMM_PUT
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
    } else if (PT2C_GEMM_EP_IN_REGS(ep)) { /* a partial panel: masked loads and stores */
        const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), iota);
        const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), iota);
        float *r;
#define PT2C_GEMM_PUT(ROW, V0, V1)                                                  \
        r = c + (ptrdiff_t)(ROW) * ldc;                                             \
        if (accumulate) V0 = PT2C_V8_ADD(V0, _mm256_maskload_ps(r, m0)), V1 = PT2C_V8_ADD(V1, _mm256_maskload_ps(r + 8, m1)); \
        if (ep) pt2c_gemm_ep_row_m(ep, &V0, &V1, i0 + (ROW), j0, m0, m1);           \
        _mm256_maskstore_ps(r, m0, V0), _mm256_maskstore_ps(r + 8, m1, V1)
        PT2C_GEMM_PUT(0, c00, c01);
        if (ROWS > 1 && mr > 1) { PT2C_GEMM_PUT(1, c10, c11); }
        if (ROWS > 2 && mr > 2) { PT2C_GEMM_PUT(2, c20, c21); }
        if (ROWS > 3 && mr > 3) { PT2C_GEMM_PUT(3, c30, c31); }
        if (ROWS > 4 && mr > 4) { PT2C_GEMM_PUT(4, c40, c41); }
        if (ROWS > 5 && mr > 5) { PT2C_GEMM_PUT(5, c50, c51); }
#undef PT2C_GEMM_PUT
#endif
    } else {
        float t[PT2C_GEMM_MR * PT2C_GEMM_NR];
        PT2C_V8_STORE(t + 0, c00), PT2C_V8_STORE(t + 8, c01);
        if (ROWS > 1) PT2C_V8_STORE(t + 16, c10), PT2C_V8_STORE(t + 24, c11);
        if (ROWS > 2) PT2C_V8_STORE(t + 32, c20), PT2C_V8_STORE(t + 40, c21);
        if (ROWS > 3) PT2C_V8_STORE(t + 48, c30), PT2C_V8_STORE(t + 56, c31);
        if (ROWS > 4) PT2C_V8_STORE(t + 64, c40), PT2C_V8_STORE(t + 72, c41);
        if (ROWS > 5) PT2C_V8_STORE(t + 80, c50), PT2C_V8_STORE(t + 88, c51);
        pt2c_gemm_store_tile(c, ldc, t, PT2C_MIN(mr, ROWS), nr, accumulate, ep, i0, j0);
    }
#else
    /* Portable fallback: fixed-size loops over a 16-wide row that compilers
     * turn into vector FMAs on their own. */
    float t[PT2C_GEMM_MR * PT2C_GEMM_NR];
    int i, j, k;
    (void)pfa, (void)pfb, (void)pfn;
    for (i = 0; i < ROWS * PT2C_GEMM_NR; i++) t[i] = 0.0f;
    for (k = 0; k < kc; k++) {
        for (i = 0; i < ROWS; i++) {
            float av = a[i * ars];
            float *ti = t + i * PT2C_GEMM_NR;
            for (j = 0; j < PT2C_GEMM_NR; j++) ti[j] += av * b[j];
        }
        a += acs;
        b += bs;
    }
    pt2c_gemm_store_tile(c, ldc, t, PT2C_MIN(mr, ROWS), nr, accumulate, ep, i0, j0);
#endif
}

/* Calls CALL(R) with R = mr for a last row panel of 1-5 rows, else R = MR: each a compile-time
 * constant, so every row count gets its own specialised copy of an inlined micro-kernel body. */
#define PT2C_GEMM_BY_ROWS(mr, CALL)     \
    switch (mr) {                       \
    case 1: CALL(1); break;             \
    case 2: CALL(2); break;             \
    case 3: CALL(3); break;             \
    case 4: CALL(4); break;             \
    case 5: CALL(5); break;             \
    default: CALL(PT2C_GEMM_MR); break; \
    }

/* Packed-A micro-kernel.  The panel is zero-padded to MR rows, but a last panel with fewer rows
 * (M not a multiple of 6: 64 channels, 49 pixels) multiplies only its mr real ones. */
static void pt2c_gemm_ukernel_packed(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr,
                                     int accumulate, const pt2c_epilogue *ep, int i0, int j0, const float *pfa,
                                     const float *pfb, int pfn)
{
#define PT2C_GEMM_ROWS_CALL(R) \
    pt2c_gemm_ukernel_body(kc, a, 1, PT2C_GEMM_MR, b, PT2C_GEMM_NR, c, ldc, mr, nr, accumulate, ep, i0, \
        j0, R, pfa, pfb, pfn)
    PT2C_GEMM_BY_ROWS(mr, PT2C_GEMM_ROWS_CALL);
#undef PT2C_GEMM_ROWS_CALL
}

/* Packed-A micro-kernel on 16 columns of a B read in place, rows bs floats apart. */
static void pt2c_gemm_ukernel_bdirect(int kc, const float *a, const float *b, ptrdiff_t bs, float *c, int ldc, int mr,
                                      int accumulate, const pt2c_epilogue *ep, int i0, int j0, const float *pfb, int pfn)
{
#define PT2C_GEMM_ROWS_CALL(R) \
    pt2c_gemm_ukernel_body(kc, a, 1, PT2C_GEMM_MR, b, bs, c, ldc, mr, PT2C_GEMM_NR, accumulate, ep, i0, \
        j0, R, NULL, pfb, pfn)
    PT2C_GEMM_BY_ROWS(mr, PT2C_GEMM_ROWS_CALL);
#undef PT2C_GEMM_ROWS_CALL
}

/* Strided-A micro-kernel: reads exactly mr rows, so nothing past M is touched. */
static void pt2c_gemm_ukernel_strided(int kc, const float *a, ptrdiff_t ars, ptrdiff_t acs, const float *b, float *c,
                                      int ldc, int mr, int nr, int accumulate, const pt2c_epilogue *ep, int i0, int j0)
{
#define PT2C_GEMM_ROWS_CALL(R) \
    pt2c_gemm_ukernel_body(kc, a, ars, acs, b, PT2C_GEMM_NR, c, ldc, mr, nr, accumulate, ep, i0, j0, R, \
        NULL, NULL, 0)
    PT2C_GEMM_BY_ROWS(mr, PT2C_GEMM_ROWS_CALL);
#undef PT2C_GEMM_ROWS_CALL
}

#if defined(PT2C_SIMD_AVX512)
/* bias, residual and relu / clamp on the columns j.. of row i that mask m selects (the others are
 * not read), in the order of pt2c_gemm_store_tile */
PT2C_GEMM_INLINE __m512 pt2c_gemm_ep_zmm_m(const pt2c_epilogue *ep, __m512 v, int i, int j, __mmask16 m)
{
    if (ep->bias && ep->bias_per_row)
        v = _mm512_add_ps(v, _mm512_set1_ps(ep->bias[i]));
    else if (ep->bias)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, ep->bias + j));
    if (ep->residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, ep->residual + (ptrdiff_t)i * ep->ldr + j));
    if (ep->act == PT2C_ACT_RELU) /* max returns its 2nd operand on NaN: x > 0 ? x : 0 */
        v = _mm512_max_ps(v, _mm512_setzero_ps());
    else if (ep->act == PT2C_ACT_CLAMP)
        v = _mm512_min_ps(_mm512_set1_ps(ep->hi), _mm512_max_ps(_mm512_set1_ps(ep->lo), v));
    return v;
}

PT2C_GEMM_INLINE __m512 pt2c_gemm_ep_zmm(const pt2c_epilogue *ep, __m512 v, int i, int j)
{
    return pt2c_gemm_ep_zmm_m(ep, v, i, j, (__mmask16)0xFFFF);
}

/* AVX-512: a 6 x 32 tile over two B panels (b0: columns j0..j0+15, b1: the next 16; rows bs
 * floats apart: NR when packed), one zmm per row and panel: 12 accumulators, 2 B loads + 6
 * broadcasts per 12 FMAs.  The packed layouts are the same as for the 8-lane kernel (MR = 6,
 * NR = 16), so one weights blob serves every instruction set.  A(i,k) = a[i*ars + k*acs]: a
 * packed panel (ars = 1, acs = MR) or rows read in place; ROWS (= mr, or 6: a compile-time
 * constant after inlining) of them are multiplied.  The first mr rows are stored from registers
 * with a bias/residual/relu/clamp epilogue (same operation order as pt2c_gemm_store_tile); other
 * epilogues spill to pt2c_gemm_store_tile. */
PT2C_GEMM_INLINE void pt2c_gemm_ukernel_x2_body(int kc, const float *PT2C_RESTRICT a, ptrdiff_t ars, ptrdiff_t acs,
                                                const float *PT2C_RESTRICT b0,
                                                const float *PT2C_RESTRICT b1, ptrdiff_t bs, float *c, int ldc, int mr,
                                                int accumulate, const pt2c_epilogue *ep, int i0, int j0,
                                                const float *pfa, const float *pfb, ptrdiff_t pfb1, int pfn,
                                                const int ROWS)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    int k = 0, i;
    for (i = 0; i < mr; i++) {
        PT2C_GEMM_PREFETCH_W(c + (ptrdiff_t)i * ldc);
        PT2C_GEMM_PREFETCH_W(c + (ptrdiff_t)i * ldc + 31);
    }
    if (ep && ep->residual) /* (as the C tile: a cold residual row missed after the k loop, ~1/5 of a 1x1 conv) */
        for (i = 0; i < mr; i++) {
            PT2C_GEMM_PREFETCH_R(ep->residual + (ptrdiff_t)(i0 + i) * ep->ldr + j0);
            PT2C_GEMM_PREFETCH_R(ep->residual + (ptrdiff_t)(i0 + i) * ep->ldr + j0 + 31);
        }
    /* A last panel of fewer rows (M = 49 pixels, 64 or 128 channels) multiplies only its ROWS
     * real ones; with one or two, k is split into phases with their own accumulators (the spare
     * registers) so that 8 FMA chains hide the FMA latency, as in pt2c_gemm_ukernel_body. */
    if (ROWS == 1) {
        for (; k + 4 <= kc; k += 4) {
            if (pfa && !(k & 7)) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * PT2C_GEMM_MR);
            c00 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), _mm512_loadu_ps(b0), c00);
            c01 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), _mm512_loadu_ps(b1), c01);
            c10 = _mm512_fmadd_ps(_mm512_set1_ps(a[acs]), _mm512_loadu_ps(b0 + bs), c10);
            c11 = _mm512_fmadd_ps(_mm512_set1_ps(a[acs]), _mm512_loadu_ps(b1 + bs), c11);
            c20 = _mm512_fmadd_ps(_mm512_set1_ps(a[2 * acs]), _mm512_loadu_ps(b0 + 2 * bs), c20);
            c21 = _mm512_fmadd_ps(_mm512_set1_ps(a[2 * acs]), _mm512_loadu_ps(b1 + 2 * bs), c21);
            c30 = _mm512_fmadd_ps(_mm512_set1_ps(a[3 * acs]), _mm512_loadu_ps(b0 + 3 * bs), c30);
            c31 = _mm512_fmadd_ps(_mm512_set1_ps(a[3 * acs]), _mm512_loadu_ps(b1 + 3 * bs), c31);
            a += 4 * acs;
            b0 += 4 * bs;
            b1 += 4 * bs;
        }
        c00 = _mm512_add_ps(_mm512_add_ps(c00, c10), _mm512_add_ps(c20, c30));
        c01 = _mm512_add_ps(_mm512_add_ps(c01, c11), _mm512_add_ps(c21, c31));
        c10 = c11 = c20 = c21 = c30 = c31 = _mm512_setzero_ps();
    } else if (ROWS == 2) { /* rows 0, 1 in c00..c11 (even k) and c30..c41 (odd k) */
        for (; k + 2 <= kc; k += 2) {
            const __m512 u0 = _mm512_loadu_ps(b0), u1 = _mm512_loadu_ps(b1), v0 = _mm512_loadu_ps(b0 + bs),
                         v1 = _mm512_loadu_ps(b1 + bs);
            __m512 av;
            if (pfa && !(k & 7)) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * PT2C_GEMM_MR);
            av = _mm512_set1_ps(a[0]), c00 = _mm512_fmadd_ps(av, u0, c00), c01 = _mm512_fmadd_ps(av, u1, c01);
            av = _mm512_set1_ps(a[ars]), c10 = _mm512_fmadd_ps(av, u0, c10), c11 = _mm512_fmadd_ps(av, u1, c11);
            av = _mm512_set1_ps(a[acs]), c30 = _mm512_fmadd_ps(av, v0, c30), c31 = _mm512_fmadd_ps(av, v1, c31);
            av = _mm512_set1_ps(a[acs + ars]), c40 = _mm512_fmadd_ps(av, v0, c40), c41 = _mm512_fmadd_ps(av, v1, c41);
            a += 2 * acs;
            b0 += 2 * bs;
            b1 += 2 * bs;
        }
        c00 = _mm512_add_ps(c00, c30), c01 = _mm512_add_ps(c01, c31);
        c10 = _mm512_add_ps(c10, c40), c11 = _mm512_add_ps(c11, c41);
        c30 = c31 = c40 = c41 = _mm512_setzero_ps();
    }
#define PT2C_GEMM_X2_STEP                                                                                          \
    do {                                                                                                           \
        const __m512 bv0 = _mm512_loadu_ps(b0), bv1 = _mm512_loadu_ps(b1);                                         \
        __m512 av;                                                                                                 \
        av = _mm512_set1_ps(a[0]), c00 = _mm512_fmadd_ps(av, bv0, c00), c01 = _mm512_fmadd_ps(av, bv1, c01);       \
        av = _mm512_set1_ps(a[ars]), c10 = _mm512_fmadd_ps(av, bv0, c10), c11 = _mm512_fmadd_ps(av, bv1, c11);     \
        av = _mm512_set1_ps(a[2 * ars]), c20 = _mm512_fmadd_ps(av, bv0, c20), c21 = _mm512_fmadd_ps(av, bv1, c21); \
        av = _mm512_set1_ps(a[3 * ars]), c30 = _mm512_fmadd_ps(av, bv0, c30), c31 = _mm512_fmadd_ps(av, bv1, c31); \
        av = _mm512_set1_ps(a[4 * ars]), c40 = _mm512_fmadd_ps(av, bv0, c40), c41 = _mm512_fmadd_ps(av, bv1, c41); \
        av = _mm512_set1_ps(a[5 * ars]), c50 = _mm512_fmadd_ps(av, bv0, c50), c51 = _mm512_fmadd_ps(av, bv1, c51); \
        a += acs, b0 += bs, b1 += bs;                                                                              \
    } while (0)
    if (ROWS == PT2C_GEMM_MR) /* 8 k steps written out per prefetch test: 3-7 % faster (squares, M = 64) */
        for (; k + 8 <= kc; k += 8) {
            if (pfa) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * PT2C_GEMM_MR);
            if (pfn > 0) /* a row of the two panels pfb, pfb + pfb1 per 8 k (pt2c_gemm_pf_share) */
                PT2C_GEMM_PREFETCH_R(pfb), PT2C_GEMM_PREFETCH_R(pfb + pfb1), pfb += bs, pfn--;
            PT2C_GEMM_X2_STEP;
            PT2C_GEMM_X2_STEP;
            PT2C_GEMM_X2_STEP;
            PT2C_GEMM_X2_STEP;
            PT2C_GEMM_X2_STEP;
            PT2C_GEMM_X2_STEP;
            PT2C_GEMM_X2_STEP;
            PT2C_GEMM_X2_STEP;
        }
#undef PT2C_GEMM_X2_STEP
    for (; pfn > 0; pfn--, pfb += bs) PT2C_GEMM_PREFETCH_R(pfb), PT2C_GEMM_PREFETCH_R(pfb + pfb1); /* the rest */
    for (; k < kc; k++) {
        __m512 bv0 = _mm512_loadu_ps(b0), bv1 = _mm512_loadu_ps(b1), av;
        if (pfa && !(k & 7)) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * PT2C_GEMM_MR); /* see PT2C_GEMM_PREFETCH_A */
        av = _mm512_set1_ps(a[0]), c00 = _mm512_fmadd_ps(av, bv0, c00), c01 = _mm512_fmadd_ps(av, bv1, c01);
        if (ROWS > 1) av = _mm512_set1_ps(a[ars]), c10 = _mm512_fmadd_ps(av, bv0, c10), c11 = _mm512_fmadd_ps(av, bv1, c11);
        if (ROWS > 2) av = _mm512_set1_ps(a[2 * ars]), c20 = _mm512_fmadd_ps(av, bv0, c20), c21 = _mm512_fmadd_ps(av, bv1, c21);
        if (ROWS > 3) av = _mm512_set1_ps(a[3 * ars]), c30 = _mm512_fmadd_ps(av, bv0, c30), c31 = _mm512_fmadd_ps(av, bv1, c31);
        if (ROWS > 4) av = _mm512_set1_ps(a[4 * ars]), c40 = _mm512_fmadd_ps(av, bv0, c40), c41 = _mm512_fmadd_ps(av, bv1, c41);
        if (ROWS > 5) av = _mm512_set1_ps(a[5 * ars]), c50 = _mm512_fmadd_ps(av, bv0, c50), c51 = _mm512_fmadd_ps(av, bv1, c51);
        a += acs;
        b0 += bs;
        b1 += bs;
    }
    if (PT2C_GEMM_EP_IN_REGS(ep)) { /* the first mr rows from registers */
        __m512 acc[12];
        acc[0] = c00, acc[1] = c01, acc[2] = c10, acc[3] = c11, acc[4] = c20, acc[5] = c21;
        acc[6] = c30, acc[7] = c31, acc[8] = c40, acc[9] = c41, acc[10] = c50, acc[11] = c51;
        for (i = 0; i < mr; i++) {
            float *r = c + (ptrdiff_t)i * ldc;
            __m512 v0 = acc[2 * i], v1 = acc[2 * i + 1];
            if (accumulate) v0 = _mm512_add_ps(v0, _mm512_loadu_ps(r)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(r + 16));
            if (ep) v0 = pt2c_gemm_ep_zmm(ep, v0, i0 + i, j0), v1 = pt2c_gemm_ep_zmm(ep, v1, i0 + i, j0 + 16);
            _mm512_storeu_ps(r, v0), _mm512_storeu_ps(r + 16, v1);
        }
    } else {
        float t0[PT2C_GEMM_MR * PT2C_GEMM_NR], t1[PT2C_GEMM_MR * PT2C_GEMM_NR];
        _mm512_storeu_ps(t0, c00), _mm512_storeu_ps(t1, c01), _mm512_storeu_ps(t0 + 16, c10);
        _mm512_storeu_ps(t1 + 16, c11), _mm512_storeu_ps(t0 + 32, c20), _mm512_storeu_ps(t1 + 32, c21);
        _mm512_storeu_ps(t0 + 48, c30), _mm512_storeu_ps(t1 + 48, c31), _mm512_storeu_ps(t0 + 64, c40);
        _mm512_storeu_ps(t1 + 64, c41), _mm512_storeu_ps(t0 + 80, c50), _mm512_storeu_ps(t1 + 80, c51);
        pt2c_gemm_store_tile(c, ldc, t0, mr, PT2C_GEMM_NR, accumulate, ep, i0, j0);
        pt2c_gemm_store_tile(c + PT2C_GEMM_NR, ldc, t1, mr, PT2C_GEMM_NR, accumulate, ep, i0, j0 + PT2C_GEMM_NR);
    }
}

/* AVX-512: a 6 x 16 tile over one B panel (rows bs floats apart), for the last, odd panel of
 * a block (16 or fewer columns: Winograd's GEMMs on 14x14 maps have one, 16 tiles; 196 pixels
 * end in a panel of 4).  One zmm per row where the 8-lane kernel takes two ymm; k is split
 * into even and odd steps with their own accumulators so that 12 FMA chains hide the latency.
 * Tiles with a bias/residual/relu/clamp epilogue are stored from registers, a partial panel's
 * through masked loads and stores (same operation order as pt2c_gemm_store_tile); other
 * epilogues go through pt2c_gemm_store_tile. */
PT2C_GEMM_INLINE void pt2c_gemm_ukernel_x1_body(int kc, const float *PT2C_RESTRICT a, const float *PT2C_RESTRICT b,
                                                ptrdiff_t bs, float *c, int ldc, int mr, int nr, int accumulate,
                                                const pt2c_epilogue *ep, int i0, int j0, const float *pfa,
                                                const int ROWS)
{
    const int MR = PT2C_GEMM_MR;
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    __m512 d0 = c0, d1 = c0, d2 = c0, d3 = c0, d4 = c0, d5 = c0;
    int k = 0, i;
    if (nr == PT2C_GEMM_NR)
        for (i = 0; i < mr; i++) {
            PT2C_GEMM_PREFETCH_W(c + (ptrdiff_t)i * ldc);
            if (ep && ep->residual) PT2C_GEMM_PREFETCH_R(ep->residual + (ptrdiff_t)(i0 + i) * ep->ldr + j0);
        }
#define PT2C_GEMM_X1_STEP2                                                                                                      \
    do {                                                                                                                        \
        const __m512 u = _mm512_loadu_ps(b), v = _mm512_loadu_ps(b + bs);                                                        \
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), u, c0), d0 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR]), v, d0);                   \
        if (ROWS > 1) c1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), u, c1), d1 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 1]), v, d1); \
        if (ROWS > 2) c2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), u, c2), d2 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 2]), v, d2); \
        if (ROWS > 3) c3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), u, c3), d3 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 3]), v, d3); \
        if (ROWS > 4) c4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4]), u, c4), d4 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 4]), v, d4); \
        if (ROWS > 5) c5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5]), u, c5), d5 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 5]), v, d5); \
        a += 2 * MR;                                                                                                            \
        b += 2 * bs;                                                                                                            \
    } while (0)
    for (; k + 8 <= kc; k += 8) { /* 8 k steps per prefetch test, as the 6 x 32 kernel */
        if (pfa) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * MR); /* see PT2C_GEMM_PREFETCH_A */
        PT2C_GEMM_X1_STEP2;
        PT2C_GEMM_X1_STEP2;
        PT2C_GEMM_X1_STEP2;
        PT2C_GEMM_X1_STEP2;
    }
    for (; k + 2 <= kc; k += 2) {
        if (pfa && !(k & 7)) PT2C_GEMM_PREFETCH_PANEL8(pfa + k * MR);
        PT2C_GEMM_X1_STEP2;
    }
#undef PT2C_GEMM_X1_STEP2
    if (k < kc) {
        const __m512 u = _mm512_loadu_ps(b);
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), u, c0);
        if (ROWS > 1) c1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), u, c1);
        if (ROWS > 2) c2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), u, c2);
        if (ROWS > 3) c3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), u, c3);
        if (ROWS > 4) c4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4]), u, c4);
        if (ROWS > 5) c5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5]), u, c5);
    }
    {
        __m512 acc[6];
        acc[0] = _mm512_add_ps(c0, d0), acc[1] = _mm512_add_ps(c1, d1), acc[2] = _mm512_add_ps(c2, d2);
        acc[3] = _mm512_add_ps(c3, d3), acc[4] = _mm512_add_ps(c4, d4), acc[5] = _mm512_add_ps(c5, d5);
        if (PT2C_GEMM_EP_IN_REGS(ep)) { /* a partial panel through masked loads and stores */
            const __mmask16 m = (__mmask16)((1u << nr) - 1u);
            for (i = 0; i < mr; i++) {
                float *r = c + (ptrdiff_t)i * ldc;
                __m512 v = acc[i];
                if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r));
                if (ep) v = pt2c_gemm_ep_zmm_m(ep, v, i0 + i, j0, m);
                _mm512_mask_storeu_ps(r, m, v);
            }
        } else {
            float t[PT2C_GEMM_MR * PT2C_GEMM_NR];
            for (i = 0; i < PT2C_GEMM_MR; i++) _mm512_storeu_ps(t + i * PT2C_GEMM_NR, acc[i]);
            pt2c_gemm_store_tile(c, ldc, t, mr, nr, accumulate, ep, i0, j0);
        }
    }
}

static void pt2c_gemm_ukernel_x1_avx512(int kc, const float *a, const float *b, ptrdiff_t bs, float *c, int ldc, int mr,
                                        int nr, int accumulate, const pt2c_epilogue *ep, int i0, int j0,
                                        const float *pfa)
{
#define PT2C_GEMM_ROWS_CALL(R) pt2c_gemm_ukernel_x1_body(kc, a, b, bs, c, ldc, mr, nr, accumulate, ep, i0, j0, pfa, R)
    PT2C_GEMM_BY_ROWS(mr, PT2C_GEMM_ROWS_CALL);
#undef PT2C_GEMM_ROWS_CALL
}

static void pt2c_gemm_ukernel_x2_avx512(int kc, const float *a, const float *b0, const float *b1, ptrdiff_t bs, float *c,
                                        int ldc, int mr, int accumulate, const pt2c_epilogue *ep, int i0, int j0,
                                        const float *pfa, const float *pfb, ptrdiff_t pfb1, int pfn)
{
#define PT2C_GEMM_ROWS_CALL(R)                                                                                  \
    pt2c_gemm_ukernel_x2_body(kc, a, 1, PT2C_GEMM_MR, b0, b1, bs, c, ldc, mr, accumulate, ep, i0, j0, pfa, pfb, \
                              pfb1, pfn, R)
    PT2C_GEMM_BY_ROWS(mr, PT2C_GEMM_ROWS_CALL);
#undef PT2C_GEMM_ROWS_CALL
}

/* The same on mr rows of an A read in place, A(i,k) = a[i*ars + k*acs] (up to 16 rows of a GEMM:
 * small batches), so the AVX-512 tile serves them too; nothing past row mr is read. */
static void pt2c_gemm_ukernel_x2s_avx512(int kc, const float *a, ptrdiff_t ars, ptrdiff_t acs, const float *b0,
                                         const float *b1, float *c, int ldc, int mr, int accumulate,
                                         const pt2c_epilogue *ep, int i0, int j0)
{
#define PT2C_GEMM_ROWS_CALL(R) \
    pt2c_gemm_ukernel_x2_body(kc, a, ars, acs, b0, b1, PT2C_GEMM_NR, c, ldc, mr, accumulate, ep, i0, j0, NULL, NULL, \
                              0, 0, R)
    PT2C_GEMM_BY_ROWS(mr, PT2C_GEMM_ROWS_CALL);
#undef PT2C_GEMM_ROWS_CALL
}
#endif

/* ---- packing ---- */

/* Whole panels packed together from rows of B (csb == 1): row by row, so each row of B is read
 * 512 contiguous bytes at a time.  Panel by panel (64 bytes from each of kc rows, kc streams at
 * once) left the hardware prefetcher behind: 1x1 convs with 144 input channels (B = the input's
 * 144 planes) packed 25 % slower; all the rows of a 2048-column block at once, 12-15 % slower with
 * 32 input channels. */
#ifndef PT2C_GEMM_PACK_B_GROUP
#define PT2C_GEMM_PACK_B_GROUP 8
#endif

/* B(k,j) = b[k*rsb + j*csb], kc x nc  ->  NR-wide panels, zero-padded. */
static void pt2c_gemm_pack_b(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT b, ptrdiff_t rsb, ptrdiff_t csb,
                             int kc, int nc)
{
    int jp, j, k;
    if (csb == 1) { /* rows contiguous: whole panels, PT2C_GEMM_PACK_B_GROUP at a time, row by row */
        const int nfull = nc / PT2C_GEMM_NR * PT2C_GEMM_NR, G = PT2C_GEMM_PACK_B_GROUP * PT2C_GEMM_NR;
        int j0;
        for (j0 = 0; j0 < nfull; j0 += G) {
            const int j1 = PT2C_MIN(nfull, j0 + G);
            for (k = 0; k < kc; k++)
                for (jp = j0; jp < j1; jp += PT2C_GEMM_NR)
                    memcpy(dst + (ptrdiff_t)jp * kc + k * PT2C_GEMM_NR, b + k * rsb + jp,
                           PT2C_GEMM_NR * sizeof(float));
        }
        dst += (ptrdiff_t)nfull * kc, b += nfull, nc -= nfull;
    }
    for (jp = 0; jp < nc; jp += PT2C_GEMM_NR) {
        int nr = PT2C_MIN(PT2C_GEMM_NR, nc - jp);
        float *d = dst + (ptrdiff_t)jp * kc;
        const float *s = b + jp * csb;
        if (csb == 1) { /* the last, partial panel of contiguous rows: plain copies */
            for (k = 0; k < kc; k++) {
                memcpy(d + k * PT2C_GEMM_NR, s + k * rsb, (size_t)nr * sizeof(float));
                for (j = nr; j < PT2C_GEMM_NR; j++) d[k * PT2C_GEMM_NR + j] = 0.0f;
            }
        } else { /* transposed or general: walk each source column along k */
            for (j = 0; j < nr; j++)
                for (k = 0; k < kc; k++) d[k * PT2C_GEMM_NR + j] = s[j * csb + k * rsb];
            for (k = 0; k < kc; k++)
                for (j = nr; j < PT2C_GEMM_NR; j++) d[k * PT2C_GEMM_NR + j] = 0.0f;
        }
    }
}

/* One full panel of 6 rows with contiguous k (csa == 1): d[k*6 + i] = s[i*rsa + k] for k < kc0, a
 * multiple of the vector width, by in-register transposes (the scalar loop below moved a float per
 * load and store: 4-6 % of a GEMM with a row-major A, which every linear has). */
#if defined(PT2C_SIMD_AVX512)
#define PT2C_GEMM_PACK_A_VK 16
static void pt2c_gemm_pack_a6_vec(float *PT2C_RESTRICT d, const float *PT2C_RESTRICT s, ptrdiff_t rsa, int kc0)
{
    /* 16 k of 6 rows are 96 floats, 6 vectors; lane l of vector j is p = 16j + l: row p % 6, k p / 6.
     * Rows are taken in pairs by two-source permutes (index p / 6, +16 for the odd row of the pair)
     * and the pairs merged under the masks of their lanes, which repeat every 3 vectors. */
    const __m512i i0 = _mm512_setr_epi32(0, 16, 0, 16, 0, 16, 1, 17, 1, 17, 1, 17, 2, 18, 2, 18),
                  i1 = _mm512_setr_epi32(2, 18, 3, 19, 3, 19, 3, 19, 4, 20, 4, 20, 4, 20, 5, 21),
                  i2 = _mm512_setr_epi32(5, 21, 5, 21, 6, 22, 6, 22, 6, 22, 7, 23, 7, 23, 7, 23),
                  eight = _mm512_set1_epi32(8);
    const __m512i idx[6] = {i0, i1, i2, _mm512_add_epi32(i0, eight), _mm512_add_epi32(i1, eight),
                            _mm512_add_epi32(i2, eight)};
    const __mmask16 m23[3] = {0xC30C, 0x0C30, 0x30C3}, m45[3] = {0x0C30, 0x30C3, 0xC30C};
    int j, k;
    for (k = 0; k < kc0; k += 16, d += 96) {
        const __m512 r0 = _mm512_loadu_ps(s + k), r1 = _mm512_loadu_ps(s + rsa + k),
                     r2 = _mm512_loadu_ps(s + 2 * rsa + k), r3 = _mm512_loadu_ps(s + 3 * rsa + k),
                     r4 = _mm512_loadu_ps(s + 4 * rsa + k), r5 = _mm512_loadu_ps(s + 5 * rsa + k);
        for (j = 0; j < 6; j++) {
            __m512 o = _mm512_permutex2var_ps(r0, idx[j], r1);
            o = _mm512_mask_mov_ps(o, m23[j % 3], _mm512_permutex2var_ps(r2, idx[j], r3));
            o = _mm512_mask_mov_ps(o, m45[j % 3], _mm512_permutex2var_ps(r4, idx[j], r5));
            _mm512_storeu_ps(d + 16 * j, o);
        }
    }
}
#elif defined(PT2C_SIMD_AVX2)
#define PT2C_GEMM_PACK_A_VK 8
static void pt2c_gemm_pack_a6_vec(float *PT2C_RESTRICT d, const float *PT2C_RESTRICT s, ptrdiff_t rsa, int kc0)
{
    /* 8 k of 6 rows: an 8x8 transpose with two zero rows, each k's 8 floats stored 6 apart in
     * order (the next store overwrites the two zeros), the last one masked to its 6 */
    const __m256i m6 = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    int k, i;
    for (k = 0; k < kc0; k += 8, d += 48) {
        __m256 r[8];
        for (i = 0; i < 6; i++) r[i] = _mm256_loadu_ps(s + i * rsa + k);
        r[6] = r[7] = _mm256_setzero_ps();
        pt2c_tr8x8_v(r);
        for (i = 0; i < 7; i++) _mm256_storeu_ps(d + 6 * i, r[i]);
        _mm256_maskstore_ps(d + 42, m6, r[7]);
    }
}
#endif

/* A(i,k) = a[i*rsa + k*csa], mc x kc  ->  MR-row panels, zero-padded. */
static void pt2c_gemm_pack_a(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT a, ptrdiff_t rsa, ptrdiff_t csa,
                             int mc, int kc)
{
    int ip, i, k;
    for (ip = 0; ip < mc; ip += PT2C_GEMM_MR) {
        int mr = PT2C_MIN(PT2C_GEMM_MR, mc - ip);
        float *d = dst + (ptrdiff_t)ip * kc;
        const float *s = a + ip * rsa;
        if (mr == PT2C_GEMM_MR) {
            k = 0;
#if defined(PT2C_GEMM_PACK_A_VK) && PT2C_GEMM_MR == 6
            if (csa == 1) {
                k = kc / PT2C_GEMM_PACK_A_VK * PT2C_GEMM_PACK_A_VK;
                pt2c_gemm_pack_a6_vec(d, s, rsa, k);
                d += (ptrdiff_t)k * PT2C_GEMM_MR;
            }
#endif
            if (rsa == 1) /* A transposed (a conv's pixels as rows): 6 contiguous floats per k */
                for (; k < kc; k++, d += PT2C_GEMM_MR) memcpy(d, s + k * csa, PT2C_GEMM_MR * sizeof(float));
            for (; k < kc; k++, d += PT2C_GEMM_MR)
                for (i = 0; i < PT2C_GEMM_MR; i++) d[i] = s[i * rsa + k * csa];
        } else {
            for (k = 0; k < kc; k++, d += PT2C_GEMM_MR)
                for (i = 0; i < PT2C_GEMM_MR; i++) d[i] = i < mr ? s[i * rsa + k * csa] : 0.0f;
        }
    }
}

/* ---- drivers ---- */

static size_t pt2c_gemm_round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Scratch of one thread: a packed A block (unless A is pre-packed or skinny
 * enough to be read in place) followed by a packed B block (unless B is
 * pre-packed). */
static size_t pt2c_gemm_thread_floats(int M, int N, int K, int a_packed, int b_packed)
{
    size_t mc = (size_t)PT2C_MIN(PT2C_GEMM_MC, (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR);
    size_t nc = (size_t)PT2C_MIN(PT2C_GEMM_NC, (N + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR * PT2C_GEMM_NR);
    size_t kc = (size_t)PT2C_MIN(PT2C_GEMM_KC, K);
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    return (!a_packed && M > PT2C_GEMM_SKINNY_M ? pt2c_gemm_round16(mc * kc) : 0) +
           (!b_packed ? pt2c_gemm_round16(kc * nc) : 0);
}

/* How pt2c_sgemm splits an M x N x K product when nt_avail threads are
 * available: returns the threads it runs; *split_n: chunks are column
 * (else row) slabs; *nchunk: chunks (pt2c_chunks); *cm x *cn: the
 * largest chunk (what one thread's scratch must hold). */
static int pt2c_gemm_plan(int M, int N, int K, int a_packed, int nt_avail, int *split_n, int *nchunk, int *cm,
                          int *cn)
{
    /* work in multiply-adds; a skinny product (M <= 16) streams B from memory for few of them, so
     * it counts as 16 rows: a GEMV over a 784 x 1024 weight (0.8 M MACs, 3.2 MB) then takes both
     * threads (122 -> 72 us) */
    long macs = (long)PT2C_MAX(M, PT2C_GEMM_SKINNY_M) * N * K;
    int mt = (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR, npan = (N + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR;
    int nt = (int)PT2C_MIN((long)nt_avail, macs / PT2C_GEMM_MIN_MACS_PER_THREAD), units, nc, cu;
    /* Column slabs when N is the longer side, except for a pre-packed A (conv weights) with more
     * rows than depth (expanding 1x1 convs): there each thread writes whole output channels, as
     * the depthwise conv that follows reads them, and only the smaller input is read by both
     * (columns: MobileNetV2 at 2 threads 3 % slower) */
    *split_n = npan >= nt && (N >= M || mt < nt) && !(a_packed && M > K && mt >= 2 * nt);
    nt = PT2C_MIN(nt, *split_n ? npan : mt);
    if (nt < 1) nt = 1;
    units = *split_n ? npan : mt;
    /* at least half the per-thread minimum work per chunk */
    nc = nt > 1 ? (int)PT2C_MIN((long)PT2C_MIN(units, nt * PT2C_GEMM_CHUNKS_PER_THREAD),
                                macs / (PT2C_GEMM_MIN_MACS_PER_THREAD / 2))
                : 1;
    if (nc < nt) nc = nt;
    cu = (units + nc - 1) / nc;
    *nchunk = nc;
    *cm = nc == 1 || *split_n ? M : PT2C_MIN(M, cu * PT2C_GEMM_MR);
    *cn = nc == 1 || !*split_n ? N : PT2C_MIN(N, cu * PT2C_GEMM_NR);
    return nt;
}

/* Column chunks would each pack the same A again (every chunk has all M rows): pack it once,
 * shared, first (up to PT2C_GEMM_SHARED_A_FLOATS; the chunks then use it as pre-packed A). */
#ifndef PT2C_GEMM_SHARED_A_FLOATS
#define PT2C_GEMM_SHARED_A_FLOATS (1L << 20)
#endif

static size_t pt2c_gemm_apack_floats(int M, int K)
{
    return (size_t)(M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * (size_t)K;
}

static int pt2c_gemm_share_a(int M, int K, int a_packed, int split_n, int nchunk)
{
    return !a_packed && M > PT2C_GEMM_SKINNY_M && split_n && nchunk > 1 &&
           pt2c_gemm_apack_floats(M, K) <= (size_t)PT2C_GEMM_SHARED_A_FLOATS;
}

/* Scratch (floats) of pt2c_sgemm for operands packed as given, whatever the
 * number of threads available (1 .. PT2C_MAX_THREADS): one region per thread,
 * each as large as the packing of the largest chunk needs. */
PT2C_KERNEL size_t pt2c_sgemm_scratch_floats_ex(int M, int N, int K, int a_packed, int b_packed)
{
    size_t best = 0;
    int avail, split_n, nchunk, cm, cn;
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    for (avail = 1; avail <= PT2C_MAX_THREADS; avail++) {
        int nt = pt2c_gemm_plan(M, N, K, a_packed, avail, &split_n, &nchunk, &cm, &cn);
        size_t need = pt2c_gemm_share_a(M, K, a_packed, split_n, nchunk)
                          ? pt2c_gemm_round16(pt2c_gemm_apack_floats(M, K)) +
                                (size_t)nt * pt2c_gemm_thread_floats(cm, cn, K, 1, b_packed)
                          : (size_t)nt * pt2c_gemm_thread_floats(cm, cn, K, a_packed, b_packed);
        best = PT2C_MAX(best, need);
    }
    return best;
}

/* Scratch (floats) of pt2c_sgemm whatever the packing (both operands unpacked). */
PT2C_KERNEL size_t pt2c_sgemm_scratch_floats(int M, int N, int K)
{
    return pt2c_sgemm_scratch_floats_ex(M, N, K, 0, 0);
}

/* Share i of n of the kc rows (bs floats apart) of the next B micro-panel(s), pre-packed or
 * read in place: what micro-kernel call i of the n that use the current one prefetches (into
 * L2), a row per 8 k steps and the rest after its k loop (pfb, pfn: the first row, the count).
 * Pre-packed weights too large to stay cached between runs come from memory once per run, at
 * the first of the n calls that use a panel; prefetched this way, the next panel's first use
 * does not wait: 8-25 % on linears with 24-128 rows and 7x7 convs whose weights are not in
 * cache.  Spread over the k loop instead of issued in a burst before each call: GPT-2 (its LM
 * head streams 51 MB of weights) 0.86-0.89x, the batch-64 MLP 0.94-0.98x, ResNet-18 0.95-0.96x.
 * Not for one row panel or in-place A (GEMV and up to 16 rows, all of K at once): there the
 * hardware prefetcher keeps up with the plain stream and the prefetches only got in its way. */
PT2C_GEMM_INLINE const float *pt2c_gemm_pf_share(const float *b, ptrdiff_t bs, int kc, int i, int n, int *pfn)
{
    const int l0 = (int)((long)kc * i / n);
    *pfn = (int)((long)kc * (i + 1) / n) - l0;
    return b + (ptrdiff_t)l0 * bs;
}

/* One thread's share: the full blocked algorithm on an M x N block of C.
 * Packed operands start at a panel boundary (the caller splits on MR/NR).  a_packed: 0 no,
 * 1 pre-packed (weights: prefetched), 2 packed into scratch just before (in cache). */
static void pt2c_gemm_serial(float *C, int ldc, const float *A, int rsa, int csa, int a_packed, const float *B,
                             int rsb, int csb, int b_packed, int M, int N, int K, const pt2c_epilogue *ep,
                             float *scratch)
{
    const int MR = PT2C_GEMM_MR, NR = PT2C_GEMM_NR;
    /* A few rows of an unpacked A are used in place: packing would cost as much
     * as the (memory-bound) product itself. */
    int a_direct = !a_packed && M <= PT2C_GEMM_SKINNY_M;
    int pack_a = !a_packed && !a_direct;
    /* An unpacked B with contiguous rows is read in place when few rows of A reuse each panel
     * (1x1 convs): packing it costs more than the reads it saves. */
    const int b_direct = !b_packed && csb == 1 && !a_direct && M <= PT2C_GEMM_B_DIRECT_M;
    /* Pre-packed weights times a B of 128-256 columns read in place (1x1 convs on 14x14 maps): A
     * panel outer, so each weights panel is streamed in while the one before meets every B panel,
     * instead of all of them in the first pass over B.  See PT2C_GEMM_A_OUTER_N. */
#if defined(PT2C_SIMD_AVX512)
    const int a_outer = 0;
#else
    const int a_outer = a_packed == 1 && b_direct && N >= 8 * PT2C_GEMM_NR && N <= PT2C_GEMM_A_OUTER_N &&
                        PT2C_GEMM_EP_IN_REGS(ep);
#endif
    /* With packed B and in-place A nothing needs a buffer, so take all of K at
     * once: C is then written exactly once. */
    int kmax = (a_direct && b_packed) ? K : PT2C_GEMM_KC;
    int nkb = (K + kmax - 1) / kmax;
    int kcb = (K + nkb - 1) / nkb; /* balanced k blocks */
    /* Activations dearer than a compare (GELU, SiLU, ...) run over whole rows of C once a block's
     * last k block is stored: per tile row of 16 (pt2c_gemm_store_tile) their loops hardly
     * vectorise, and the micro-kernels then keep the rest of the epilogue in registers. */
    const int late_act = PT2C_GEMM_EP_IN_REGS(ep) ? PT2C_ACT_NONE : ep->act;
    const int kb = b_packed && rsb > 0 ? rsb : K; /* the depth of pre-packed B's panels (pt2c_sgemm) */
    pt2c_epilogue ep_early;
    float *abuf = scratch;
    float *bbuf = scratch && pack_a ? scratch + pt2c_gemm_round16((size_t)PT2C_MIN(PT2C_GEMM_MC, (M + MR - 1) / MR * MR) *
                                                                  (size_t)PT2C_MIN(PT2C_GEMM_KC, K))
                                    : scratch;
    int jc, pc, ic, jr, ir;

    if (late_act) {
        ep_early = *ep;
        ep_early.act = PT2C_ACT_NONE;
        ep = ep_early.bias || ep_early.residual ? &ep_early : NULL;
    }
    for (jc = 0; jc < N; jc += PT2C_GEMM_NC) {
        int nc = PT2C_MIN(PT2C_GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += kcb) {
            int kc = PT2C_MIN(kcb, K - pc);
            int acc = pc > 0;
            const pt2c_epilogue *epk = pc + kc == K ? ep : NULL;
            const float *bp;
            ptrdiff_t bps, bs = NR; /* distance between B micro-panels, between their rows */
            if (b_packed) {
                bp = B + (ptrdiff_t)jc * kb + (ptrdiff_t)pc * NR;
                bps = (ptrdiff_t)NR * kb;
            } else if (b_direct) { /* in place; a last partial panel packed (zero-padded) into bbuf */
                bp = B + (ptrdiff_t)pc * rsb + jc;
                bps = NR;
                bs = rsb;
                if (nc % NR) pt2c_gemm_pack_b(bbuf, bp + nc / NR * NR, rsb, 1, kc, nc % NR);
            } else {
                pt2c_gemm_pack_b(bbuf, B + (ptrdiff_t)pc * rsb + (ptrdiff_t)jc * csb, rsb, csb, kc, nc);
                bp = bbuf;
                bps = (ptrdiff_t)NR * kc;
            }
            for (ic = 0; ic < M; ic += PT2C_GEMM_MC) {
                int mc = PT2C_MIN(PT2C_GEMM_MC, M - ic);
                const float *ap;
                ptrdiff_t aps; /* distance between A micro-panels */
                if (a_packed) {
                    ap = A + (ptrdiff_t)ic * K + (ptrdiff_t)pc * MR;
                    aps = (ptrdiff_t)MR * K;
                } else if (pack_a) {
                    pt2c_gemm_pack_a(abuf, A + (ptrdiff_t)ic * rsa + (ptrdiff_t)pc * csa, rsa, csa, mc, kc);
                    ap = abuf;
                    aps = (ptrdiff_t)MR * kc;
                } else {
                    ap = A + (ptrdiff_t)ic * rsa + (ptrdiff_t)pc * csa;
                    aps = (ptrdiff_t)MR * rsa;
                }
                if (a_outer) { /* A panel outer (see PT2C_GEMM_A_OUTER_N) */
                    const int njr = (nc + NR - 1) / NR;
                    const size_t abytes = (size_t)kc * MR * sizeof(float);
                    for (ir = 0; ir < mc; ir += MR) {
                        const int mr = PT2C_MIN(MR, mc - ir);
                        const float *ai = ap + (ir / MR) * aps, *an = ir + MR < mc ? ai + aps : NULL;
                        for (jr = 0; jr < nc; jr += NR) {
                            const int nr = PT2C_MIN(NR, nc - jr), q = jr / NR;
                            float *c = C + (ptrdiff_t)(ic + ir) * ldc + jc + jr;
                            if (an) { /* share q of njr of the next A panel */
                                size_t o = (abytes * q / njr) & ~(size_t)63;
                                for (; o < abytes * (q + 1) / njr; o += 64) PT2C_GEMM_PREFETCH_R((const char *)an + o);
                            }
                            if (nr == NR)
                                pt2c_gemm_ukernel_bdirect(kc, ai, bp + q * bps, bs, c, ldc, mr, acc, epk, ic + ir,
                                                          jc + jr, NULL, 0);
                            else
                                pt2c_gemm_ukernel_packed(kc, ai, bbuf, c, ldc, mr, nr, acc, epk, ic + ir, jc + jr, NULL,
                                                         NULL, 0);
                        }
                    }
                    continue;
                }
                /* jr outer: one B micro-panel (L1) meets every A micro-panel (L2). */
                for (jr = 0; jr < nc; jr += NR) {
                    int nr = PT2C_MIN(NR, nc - jr);
                    const float *bj = bp + (jr / NR) * bps;
                    const int pf_a = PT2C_GEMM_PREFETCH_A && a_packed == 1 && jr == 0; /* the first pass over A */
#if defined(PT2C_SIMD_AVX512)
                    if (a_direct && jr + 2 * NR <= nc) { /* the same on rows of A read in place */
                        for (ir = 0; ir < mc; ir += MR)
                            pt2c_gemm_ukernel_x2s_avx512(kc, ap + (ir / MR) * aps, rsa, csa, bj, bj + bps,
                                                         C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc,
                                                         PT2C_MIN(MR, mc - ir), acc, epk, ic + ir, jc + jr);
                        jr += NR;
                        continue;
                    }
                    if (!a_direct && jr + 2 * NR <= nc) { /* two full panels at once, 6 x 32 */
                        for (ir = 0; ir < mc; ir += MR) {
                            const float *pfb = NULL; /* the next pair's share (pt2c_gemm_pf_share) */
                            int pfn = 0;
                            if ((b_packed || b_direct) && mc > MR && jr + 4 * NR <= nc)
                                pfb = pt2c_gemm_pf_share(bj + 2 * bps, bs, kc, ir / MR, (mc + MR - 1) / MR, &pfn);
                            pt2c_gemm_ukernel_x2_avx512(kc, ap + (ir / MR) * aps, bj, bj + bps, bs,
                                                        C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc,
                                                        PT2C_MIN(MR, mc - ir), acc, epk, ic + ir, jc + jr,
                                                        pf_a && ir + MR < mc ? ap + (ir / MR + 1) * aps : NULL, pfb,
                                                        bps, pfn);
                        }
                        jr += NR;
                        continue;
                    }
                    if (!a_direct) { /* the last, odd panel: 6 x 16 in zmm */
                        const float *bq = b_direct && nr < NR ? bbuf : bj;
                        const ptrdiff_t bsq = b_direct && nr < NR ? NR : bs;
                        for (ir = 0; ir < mc; ir += MR)
                            pt2c_gemm_ukernel_x1_avx512(kc, ap + (ir / MR) * aps, bq, bsq,
                                                        C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc,
                                                        PT2C_MIN(MR, mc - ir), nr, acc, epk, ic + ir, jc + jr,
                                                        pf_a && ir + MR < mc ? ap + (ir / MR + 1) * aps : NULL);
                        continue;
                    }
#endif
                    for (ir = 0; ir < mc; ir += MR) {
                        int mr = PT2C_MIN(MR, mc - ir);
                        float *c = C + (ptrdiff_t)(ic + ir) * ldc + jc + jr;
                        const float *ai = ap + (ir / MR) * aps, *pfb = NULL; /* the next panel's share */
                        int pfn = 0;
                        if ((b_packed || b_direct) && !a_direct && mc > MR && jr + NR < nc)
                            pfb = pt2c_gemm_pf_share(bj + bps, bs, kc, ir / MR, (mc + MR - 1) / MR, &pfn);
                        if (a_direct)
                            pt2c_gemm_ukernel_strided(kc, ai, rsa, csa, bj, c, ldc, mr, nr, acc, epk, ic + ir,
                                                      jc + jr);
                        else if (b_direct && nr == NR)
                            pt2c_gemm_ukernel_bdirect(kc, ai, bj, bs, c, ldc, mr, acc, epk, ic + ir, jc + jr, pfb, pfn);
                        else if (b_direct)
                            pt2c_gemm_ukernel_packed(kc, ai, bbuf, c, ldc, mr, nr, acc, epk, ic + ir, jc + jr, NULL,
                                                     NULL, 0);
                        else
                            pt2c_gemm_ukernel_packed(kc, ai, bj, c, ldc, mr, nr, acc, epk, ic + ir, jc + jr,
                                                     pf_a && ir + MR < mc ? ai + aps : NULL, pfb, pfn);
                    }
                }
                if (late_act && pc + kc == K)
                    for (ir = 0; ir < mc; ir++)
                        pt2c_epilogue_act(C + (ptrdiff_t)(ic + ir) * ldc + jc, nc, late_act, ep_early.lo,
                                          ep_early.hi);
            }
        }
    }
}

/* C = act(A*B + bias + residual).  scratch: pt2c_sgemm_scratch_floats_ex(M,
 * N, K, a_packed, b_packed) floats (0, so NULL is fine, when both operands are
 * packed, or when A is unpacked with M <= 16 and B packed).  A pre-packed B
 * (b_packed) has panels of K rows, or of rsb rows when rsb > 0, of which the
 * first K take part: a slice of the reduction, B = panels + k0 * NR. */
PT2C_KERNEL void pt2c_sgemm(float *C, int ldc, const float *A, int rsa, int csa, int a_packed, const float *B,
                            int rsb, int csb, int b_packed, int M, int N, int K, const pt2c_epilogue *ep,
                            float *scratch)
{
    int nt = 1, split_n = 1, units, nchunk, share_a;
    pt2c_chunks chunks;
    size_t per_thread;
    float *apack = NULL;
    if (M <= 0 || N <= 0) return;
    if (ep && !ep->bias && !ep->residual && ep->act == PT2C_ACT_NONE) ep = NULL;
    if (K <= 0) { /* empty sum: C = epilogue(0) */
        float zero[PT2C_GEMM_MR * PT2C_GEMM_NR] = {0.0f};
        int i, j;
        for (i = 0; i < M; i += PT2C_GEMM_MR)
            for (j = 0; j < N; j += PT2C_GEMM_NR)
                pt2c_gemm_store_tile(C + (ptrdiff_t)i * ldc + j, ldc, zero, PT2C_MIN(PT2C_GEMM_MR, M - i),
                                     PT2C_MIN(PT2C_GEMM_NR, N - j), 0, ep, i, j);
        return;
    }

    /* Threads: C is cut into chunks (column slabs if there are enough NR
     * panels and N is the longer side, else row slabs), a few per thread,
     * each thread's own share first (pt2c_chunks); each runs the whole blocked
     * algorithm on its chunk with its thread's scratch region. */
    {
        int avail = 1, cm, cn;
#if defined(_OPENMP)
        if (!omp_in_parallel()) avail = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif
        nt = pt2c_gemm_plan(M, N, K, a_packed, avail, &split_n, &nchunk, &cm, &cn);
        share_a = pt2c_gemm_share_a(M, K, a_packed, split_n, nchunk);
        per_thread = pt2c_gemm_thread_floats(cm, cn, K, share_a || a_packed, b_packed);
        (void)nt; /* only used by OpenMP */
    }
    units = split_n ? (N + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR : (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR;
    if (share_a) {
        apack = scratch;
        scratch += pt2c_gemm_round16(pt2c_gemm_apack_floats(M, K));
    }

    pt2c_chunks_init(&chunks, nchunk, nt);
    PT2C_OMP(parallel num_threads(nt) if (nt > 1))
    {
        int t;
        if (share_a) { /* (the loop's closing barrier: every chunk needs all of A) */
            int p;
            PT2C_OMP(for schedule(static))
            for (p = 0; p < (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR; p++)
                pt2c_gemm_pack_a(apack + (ptrdiff_t)p * PT2C_GEMM_MR * K, A + (ptrdiff_t)p * PT2C_GEMM_MR * rsa, rsa,
                                 csa, PT2C_MIN(PT2C_GEMM_MR, M - p * PT2C_GEMM_MR), K);
        }
        while ((t = pt2c_chunks_next(&chunks)) >= 0) {
            int u0 = (int)((long)units * t / nchunk), u1 = (int)((long)units * (t + 1) / nchunk);
            float *sc = scratch ? scratch + (size_t)PT2C_THREAD_ID() * per_thread : NULL;
            pt2c_epilogue e;
            const pt2c_epilogue *et = NULL;
            if (u0 >= u1) continue;
            if (split_n) {
                int j0 = u0 * PT2C_GEMM_NR, n = PT2C_MIN(N, u1 * PT2C_GEMM_NR) - j0;
                if (ep) {
                    e = *ep;
                    if (e.bias && !e.bias_per_row) e.bias += j0;
                    if (e.residual) e.residual += j0;
                    et = &e;
                }
                pt2c_gemm_serial(C + j0, ldc, share_a ? apack : A, rsa, csa, share_a ? 2 : a_packed,
                                 b_packed ? B + (ptrdiff_t)j0 * (rsb > 0 ? rsb : K) : B + (ptrdiff_t)j0 * csb, rsb, csb,
                                 b_packed, M, n, K, et, sc);
            } else {
                int i0 = u0 * PT2C_GEMM_MR, m = PT2C_MIN(M, u1 * PT2C_GEMM_MR) - i0;
                if (ep) {
                    e = *ep;
                    if (e.bias && e.bias_per_row) e.bias += i0;
                    if (e.residual) e.residual += (ptrdiff_t)i0 * e.ldr;
                    et = &e;
                }
                pt2c_gemm_serial(C + (ptrdiff_t)i0 * ldc, ldc,
                                 a_packed ? A + (ptrdiff_t)i0 * K : A + (ptrdiff_t)i0 * rsa, rsa, csa, a_packed, B, rsb,
                                 csb, b_packed, m, N, K, et, sc);
            }
        }
    }
    pt2c_chunks_done(&chunks);
}

/* Reference implementation (tests): same semantics, no blocking, no threads. */
PT2C_KERNEL void pt2c_sgemm_naive(float *C, int ldc, const float *A, int rsa, int csa, int a_packed, const float *B,
                                  int rsb, int csb, int b_packed, int M, int N, int K, const pt2c_epilogue *ep,
                                  float *scratch)
{
    int i, j, k;
    (void)scratch;
    for (i = 0; i < M; i++) {
        float *ci = C + (ptrdiff_t)i * ldc;
        for (j = 0; j < N; j++) {
            double s = 0.0;
            for (k = 0; k < K; k++) {
                float a = a_packed ? A[(ptrdiff_t)(i / PT2C_GEMM_MR) * PT2C_GEMM_MR * K + (ptrdiff_t)k * PT2C_GEMM_MR +
                                       i % PT2C_GEMM_MR]
                                   : A[(ptrdiff_t)i * rsa + (ptrdiff_t)k * csa];
                float b = b_packed ? B[(ptrdiff_t)(j / PT2C_GEMM_NR) * PT2C_GEMM_NR * (rsb > 0 ? rsb : K) +
                                       (ptrdiff_t)k * PT2C_GEMM_NR + j % PT2C_GEMM_NR]
                                   : B[(ptrdiff_t)k * rsb + (ptrdiff_t)j * csb];
                s += (double)a * b;
            }
            ci[j] = (float)s;
        }
        if (ep) {
            for (j = 0; j < N; j++) {
                if (ep->bias) ci[j] += ep->bias_per_row ? ep->bias[i] : ep->bias[j];
                if (ep->residual) ci[j] += ep->residual[(ptrdiff_t)i * ep->ldr + j];
            }
            pt2c_epilogue_act(ci, N, ep->act, ep->lo, ep->hi);
        }
    }
}

#endif /* PT2C_GEMM_C */
