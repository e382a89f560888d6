/* pt2c kernel library: the GEMM's AVX-512 micro-kernels (zmm): 6 x 32 over two packed B panels
 * (A packed, or up to 16 rows of A read in place), and 6 x 16 for a block's last, odd panel.
 * Empty unless AVX-512.  See gemm.c.
 */
#ifndef PT2C_GEMM_UKERNEL_ZMM_C
#define PT2C_GEMM_UKERNEL_ZMM_C

#include "gemm_ukernel.c"

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

#endif /* PT2C_GEMM_UKERNEL_ZMM_C */
