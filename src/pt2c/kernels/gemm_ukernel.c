/* pt2c kernel library: the GEMM's micro-kernels, written once against the 8-lane vector layer.
 *
 * One ROWS x 16 body (pt2c_gemm_ukernel_body: AVX2 / AVX-512 ymm, NEON, or plain C), inlined into
 * three entry points by how A and B are read (packed A; packed A with B in place; A strided), each
 * specialised per row count of a last row panel.  The tile is stored through the epilogue: bias,
 * residual, ReLU and clamp in registers, the rest by pt2c_gemm_store_tile.  See gemm.c.
 */
#ifndef PT2C_GEMM_UKERNEL_C
#define PT2C_GEMM_UKERNEL_C

#include "gemm.h"

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

#if defined(PT2C_V8)

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

#if defined(PT2C_SIMD_X86)
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
#if defined(PT2C_V8)
    /* 12 accumulators + 2 B vectors + 1 broadcast = 15 of 16 ymm registers. */
    pt2c_v8 c00 = PT2C_V8_ZERO(), c01 = PT2C_V8_ZERO(), c10 = PT2C_V8_ZERO(), c11 = PT2C_V8_ZERO();
    pt2c_v8 c20 = PT2C_V8_ZERO(), c21 = PT2C_V8_ZERO(), c30 = PT2C_V8_ZERO(), c31 = PT2C_V8_ZERO();
    pt2c_v8 c40 = PT2C_V8_ZERO(), c41 = PT2C_V8_ZERO(), c50 = PT2C_V8_ZERO(), c51 = PT2C_V8_ZERO();
    int k = 0;
#if defined(PT2C_SIMD_X86)
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
#if defined(PT2C_SIMD_X86)
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

#endif /* PT2C_GEMM_UKERNEL_C */
