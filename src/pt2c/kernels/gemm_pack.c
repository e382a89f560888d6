/* pt2c kernel library: packing of the GEMM's operands into the micro-kernels' panel layouts
 * (gemm.c's comment; layout.py packs weights the same way at compile time).
 */
#ifndef PT2C_GEMM_PACK_C
#define PT2C_GEMM_PACK_C

#include "gemm.h"

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


#endif /* PT2C_GEMM_PACK_C */
