/* pt2c kernel library: a bfloat16 model's matrix product with constant weights.
 *
 *   C[i*ldc + j] = ep(sum_k A[i*lda + k] B(k,j))
 *
 * A: float32 rows holding bfloat16 values (a bfloat16 model's activations, rounded by the op that made
 * them); B: the weights as bfloat16, pre-packed (kernels/layout.py: pack_b_bf16) in panels of 32 columns
 * whose rows are taken two at a time: element (k, j) at
 *   B[(j/32)*32*Kp + (k/2)*64 + (j%32)*2 + k%2],  Kp = K rounded up to a multiple of 32, padding zero,
 * so a 128-byte row of a panel holds the pairs (k, k+1) of 32 columns: each half, 16 rows at a time, is an
 * AMX B tile (the "VNNI" layout of pairs).  Products of bfloat16 values are exact in float32; the sums are
 * float32 (as PyTorch's bfloat16 GEMM: float32 accumulation, one rounding of the result, which the epilogue
 * does).
 *
 * Code paths: up to PT2C_GEMM_BF16_ROWS_DIRECT rows (decoding a token), each weights panel is read once and
 * converted in registers; more rows, on x86-64 Linux with GCC / Clang and CPUs with AMX-BF16 (checked at run
 * time, whatever the build's instruction-set level; the tile state asked of Linux once): 32 x 32 blocks in
 * AMX tiles, A converted to bfloat16 rows; on every other CPU the weights are converted slab by slab
 * (PT2C_GEMM_BF16_SLAB columns) to the float32 packed layout and pt2c_sgemm runs on them.  (AVX512-BF16's
 * vdpbf16ps was tried first: on this Xeon it runs 32 products a cycle, the rate of two float32 FMAs, and
 * the GEMM reached 86 GFLOP/s against the float32 GEMM's 138.)  Scratch: pt2c_gemm_bf16_scratch_bytes().
 */
#ifndef PT2C_GEMM_BF16_C
#define PT2C_GEMM_BF16_C

#include "common.h"
#include "gemm.c"

#define PT2C_BF16_NR 32
#define PT2C_GEMM_BF16_SLAB 256 /* fallback: columns converted at a time (a multiple of 32 and of NR) */
#define PT2C_GEMM_BF16_ROWS_DIRECT 4 /* at most this many rows (a GEMV): the weights converted in registers */
#define PT2C_GEMM_BF16_ROWS 256 /* AMX: rows of A converted at a time (a multiple of 32) */

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && defined(__linux__) && __STDC_HOSTED__ && \
    !defined(PT2C_NO_SIMD)
#define PT2C_BF16_AMX 1
#endif

/* ---- the fallback: weights converted to the float32 packed layout, pt2c_sgemm ---- */

/* columns [j0, j0 + n) (j0 a multiple of 32) of the bfloat16 panels as float32 packed-B panels (NR = 16
 * wide, K rows); the columns past n of the last panels are zero (as the packing's).  A 32-bit word of a
 * panel row holds rows k and k + 1 of one column: (w << 16) and (w & 0xffff0000) are their float bits. */
static void pt2c_bf16_slab_to_f32(float *dst, const uint16_t *B, int K, int j0, int n)
{
    const int Kp = (K + 31) & ~31, NR = PT2C_GEMM_NR;
    int p, k, j;
    for (p = 0; p < (n + PT2C_BF16_NR - 1) / PT2C_BF16_NR; p++) {
        const uint16_t *src = B + (ptrdiff_t)(j0 / PT2C_BF16_NR + p) * PT2C_BF16_NR * Kp;
        float *d0 = dst + (ptrdiff_t)2 * p * NR * K, *d1 = d0 + (ptrdiff_t)NR * K; /* columns 0-15, 16-31 */
        const int halves = 2 * p * NR + NR < (n + NR - 1) / NR * NR ? 2 : 1; /* the second half a panel of dst? */
        for (k = 0; k < K; k += 2) {
            uint32_t w[32], lo[32], hi[32];
            memcpy(w, src + (ptrdiff_t)k * 32, sizeof w);
            for (j = 0; j < 32; j++) lo[j] = w[j] << 16, hi[j] = w[j] & 0xffff0000u;
            memcpy(d0 + (ptrdiff_t)k * NR, lo, 64);
            if (k + 1 < K) memcpy(d0 + (ptrdiff_t)(k + 1) * NR, hi, 64);
            if (halves == 2) {
                memcpy(d1 + (ptrdiff_t)k * NR, lo + 16, 64);
                if (k + 1 < K) memcpy(d1 + (ptrdiff_t)(k + 1) * NR, hi + 16, 64);
            }
        }
    }
}

/* A few rows (a GEMV: decoding a token): each weights panel read once, converted in registers */
static void pt2c_gemm_bf16_rows(float *C, int ldc, const float *A, int lda, const uint16_t *B, int M, int N, int K,
                                const pt2c_epilogue *ep)
{
    const int Kp = (K + 31) & ~31, NR = PT2C_BF16_NR, npan = (N + NR - 1) / NR;
    int nt = 1, p;
#if defined(_OPENMP)
    if (!omp_in_parallel()) nt = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif
    nt = (int)PT2C_MIN((long)nt, PT2C_MAX(1L, (long)PT2C_GEMM_SKINNY_M * N * K / PT2C_GEMM_MIN_MACS_PER_THREAD));
    (void)nt; /* only used by OpenMP */
    PT2C_OMP(parallel for num_threads(nt) schedule(static) if (nt > 1))
    for (p = 0; p < npan; p++) {
        const uint16_t *src = B + (ptrdiff_t)p * NR * Kp;
        const int j0 = p * NR, nr = PT2C_MIN(NR, N - j0);
        int i, k, j;
#if defined(PT2C_SIMD_X86)
#if defined(PT2C_SIMD_AVX512)
        if (M > 1) /* (one row: the loop below, which GCC vectorises in zmm registers, is faster) */
#endif
        { /* half a panel (16 columns, two vectors) for all the rows at a time: each weight converted once */
            const __m256i himask = _mm256_set1_epi32((int)0xffff0000u);
            int h;
            for (h = 0; h < 2 && 16 * h < nr; h++) {
                __m256 acc[PT2C_GEMM_BF16_ROWS_DIRECT][2];
                for (i = 0; i < M; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
                for (k = 0; k < K; k += 2) {
                    const uint16_t *s = src + (ptrdiff_t)k * 32 + 32 * h;
                    const __m256i w0 = _mm256_loadu_si256((const __m256i *)s);
                    const __m256i w1 = _mm256_loadu_si256((const __m256i *)(s + 16));
                    const __m256 l0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
                    const __m256 h0 = _mm256_castsi256_ps(_mm256_and_si256(w0, himask));
                    const __m256 l1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
                    const __m256 h1 = _mm256_castsi256_ps(_mm256_and_si256(w1, himask));
                    for (i = 0; i < M; i++) {
                        const float *a = A + (ptrdiff_t)i * lda;
                        const __m256 x0 = _mm256_set1_ps(a[k]), x1 = _mm256_set1_ps(k + 1 < K ? a[k + 1] : 0.0f);
                        acc[i][0] = _mm256_fmadd_ps(x1, h0, _mm256_fmadd_ps(x0, l0, acc[i][0]));
                        acc[i][1] = _mm256_fmadd_ps(x1, h1, _mm256_fmadd_ps(x0, l1, acc[i][1]));
                    }
                }
                for (i = 0; i < M; i++) {
                    float t[16], *c = C + (ptrdiff_t)i * ldc + j0 + 16 * h;
                    const int n16 = PT2C_MIN(16, nr - 16 * h), jb = j0 + 16 * h;
                    _mm256_storeu_ps(t, acc[i][0]);
                    _mm256_storeu_ps(t + 8, acc[i][1]);
                    for (j = 0; j < n16; j++)
                        c[j] = t[j] + (ep && ep->bias ? ep->bias[ep->bias_per_row ? i : jb + j] : 0.0f) +
                               (ep && ep->residual ? ep->residual[(ptrdiff_t)i * ep->ldr + jb + j] : 0.0f);
                }
            }
            if (ep && ep->act)
                for (i = 0; i < M; i++) pt2c_epilogue_act(C + (ptrdiff_t)i * ldc + j0, nr, ep->act, ep->lo, ep->hi);
            continue;
        }
#endif
        for (i = 0; i < M; i++) {
            const float *a = A + (ptrdiff_t)i * lda;
            float acc[32], flo[32], fhi[32], *c = C + (ptrdiff_t)i * ldc + j0;
            for (j = 0; j < 32; j++) acc[j] = 0.0f;
            for (k = 0; k < K; k += 2) {
                const float a0 = a[k], a1 = k + 1 < K ? a[k + 1] : 0.0f;
                uint32_t w[32], lo[32], hi[32];
                memcpy(w, src + (ptrdiff_t)k * 32, sizeof w);
                for (j = 0; j < 32; j++) lo[j] = w[j] << 16, hi[j] = w[j] & 0xffff0000u;
                memcpy(flo, lo, sizeof flo);
                memcpy(fhi, hi, sizeof fhi);
                for (j = 0; j < 32; j++) acc[j] += a0 * flo[j] + a1 * fhi[j];
            }
            for (j = 0; j < nr; j++)
                c[j] = acc[j] + (ep && ep->bias ? ep->bias[ep->bias_per_row ? i : j0 + j] : 0.0f) +
                       (ep && ep->residual ? ep->residual[(ptrdiff_t)i * ep->ldr + j0 + j] : 0.0f);
            if (ep && ep->act) pt2c_epilogue_act(c, nr, ep->act, ep->lo, ep->hi);
        }
    }
}

static void pt2c_gemm_bf16_fallback(float *C, int ldc, const float *A, int lda, const uint16_t *B, int M, int N,
                                    int K, const pt2c_epilogue *ep, float *scratch)
{
    const int S = PT2C_GEMM_BF16_SLAB;
    float *bf = scratch, *rest = scratch + (size_t)K * S;
    int j0;
    for (j0 = 0; j0 < N; j0 += S) {
        const int n = PT2C_MIN(S, N - j0);
        pt2c_epilogue e;
        const pt2c_epilogue *et = NULL;
        if (ep) {
            e = *ep;
            if (e.bias && !e.bias_per_row) e.bias += j0;
            if (e.residual) e.residual += j0;
            et = &e;
        }
        pt2c_bf16_slab_to_f32(bf, B, K, j0, n);
        pt2c_sgemm(C + j0, ldc, A, lda, 1, 0, bf, 0, 0, 1, M, n, K, et, rest);
    }
}

/* ---- AMX (Intel Advanced Matrix Extensions: tiles of bfloat16 products) ---- */

#if defined(PT2C_BF16_AMX)
#include <immintrin.h>
#include <cpuid.h>

long syscall(long number, ...); /* (glibc, musl: the process asks Linux for the tile state once) */

#define PT2C_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))

/* rows [0, m) of A (lda apart) as bfloat16, rows Kp long, rows past m and columns past K zero (mp rows) */
static void pt2c_bf16_rows(uint16_t *P, const float *A, int lda, int m, int mp, int K, int Kp)
{
    int i, k;
    PT2C_OMP(for schedule(static))
    for (i = 0; i < mp; i++) {
        uint16_t *p = P + (ptrdiff_t)i * Kp;
        if (i < m) {
            const float *a = A + (ptrdiff_t)i * lda;
            for (k = 0; k < K; k++) p[k] = pt2c_f32_to_bf16(a[k]);
        } else {
            k = 0;
        }
        for (; k < Kp; k++) p[k] = 0;
    }
}

/* The tile configuration: tiles 0-3 the 32 x 32 float result (2 x 2 tiles of 16 x 16), 4-5 two 16-row
 * slices of A (32 bfloat16 each), 6-7 the two 16-column halves of a weights panel (16 pairs of rows). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} pt2c_amx_config;

/* the 32 x 32 tile t (32 floats a row) = A rows (Kp apart) x one weights panel, over Kp (a multiple of 32) */
PT2C_AMX_TARGET static void pt2c_amx_tile(const uint16_t *a, int Kp, const uint16_t *bp, float *t)
{
    int k;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (k = 0; k < Kp; k += 32) {
        _tile_loadd(4, a + k, Kp * 2);
        _tile_loadd(5, a + (ptrdiff_t)16 * Kp + k, Kp * 2);
        _tile_loadd(6, bp + (ptrdiff_t)k * 32, 128);
        _tile_loadd(7, bp + (ptrdiff_t)k * 32 + 32, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, t, 128);
    _tile_stored(1, t + 16, 128);
    _tile_stored(2, t + 16 * 32, 128);
    _tile_stored(3, t + 16 * 32 + 16, 128);
}

/* (a constant: a local struct's stores were dropped as dead, ldtilecfg's read of them being invisible to GCC) */
static const pt2c_amx_config pt2c_amx_cfg = {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64},
                                             {16, 16, 16, 16, 16, 16, 16, 16}};

PT2C_AMX_TARGET static void pt2c_amx_begin(void) { _tile_loadconfig(&pt2c_amx_cfg); }

PT2C_AMX_TARGET static void pt2c_amx_end(void) { _tile_release(); }

static void pt2c_gemm_bf16_amx(float *C, int ldc, const float *A, int lda, const uint16_t *B, int M, int N, int K,
                               const pt2c_epilogue *ep, uint16_t *arows)
{
    const int Kp = (K + 31) & ~31, R = 32, NR = PT2C_BF16_NR, npan = (N + NR - 1) / NR;
    int i0;
    for (i0 = 0; i0 < M; i0 += PT2C_GEMM_BF16_ROWS) {
        const int m = PT2C_MIN(PT2C_GEMM_BF16_ROWS, M - i0), nrb = (m + R - 1) / R, ntile = nrb * npan;
        int nt = 1, t;
        const long macs = (long)m * N * K;
#if defined(_OPENMP)
        if (!omp_in_parallel()) nt = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif
        nt = (int)PT2C_MIN((long)nt, PT2C_MAX(1L, macs / (8 * PT2C_GEMM_MIN_MACS_PER_THREAD)));
        nt = PT2C_MIN(nt, ntile);
        (void)nt; /* only used by OpenMP */
        PT2C_OMP(parallel num_threads(nt) if (nt > 1))
        {
            float tile[32 * 32];
            pt2c_bf16_rows(arows, A + (ptrdiff_t)i0 * lda, lda, m, nrb * R, K, Kp); /* (a barrier after) */
            pt2c_amx_begin();
            /* tiles panel-major: a thread's run of tiles reuses each weights panel over the row blocks */
            PT2C_OMP(for schedule(static))
            for (t = 0; t < ntile; t++) {
                const int rb = t % nrb, pn = t / nrb, mr = PT2C_MIN(R, m - rb * R), j0 = pn * NR;
                const int nr = PT2C_MIN(NR, N - j0);
                int r, j;
                pt2c_amx_tile(arows + (ptrdiff_t)rb * R * Kp, Kp, B + (ptrdiff_t)pn * NR * Kp, tile);
                for (r = 0; r < mr; r++) {
                    const int i = i0 + rb * R + r;
                    float *c = C + (ptrdiff_t)i * ldc + j0;
                    const float *s = tile + r * 32;
                    if (ep && ep->bias && ep->bias_per_row)
                        for (j = 0; j < nr; j++) c[j] = s[j] + ep->bias[i];
                    else if (ep && ep->bias)
                        for (j = 0; j < nr; j++) c[j] = s[j] + ep->bias[j0 + j];
                    else
                        for (j = 0; j < nr; j++) c[j] = s[j];
                    if (ep && ep->residual)
                        for (j = 0; j < nr; j++) c[j] += ep->residual[(ptrdiff_t)i * ep->ldr + j0 + j];
                    if (ep && ep->act) pt2c_epilogue_act(c, nr, ep->act, ep->lo, ep->hi);
                }
            }
            pt2c_amx_end();
        }
    }
}
#endif

/* ---- the entry points ---- */

PT2C_KERNEL size_t pt2c_gemm_bf16_scratch_bytes(int M, int N, int K)
{
    const size_t fallback = 4 * ((size_t)K * PT2C_GEMM_BF16_SLAB +
                                 pt2c_sgemm_scratch_floats_ex(M, PT2C_MIN(N, PT2C_GEMM_BF16_SLAB), K, 0, 1));
    const size_t amx = (size_t)(PT2C_MIN(M, PT2C_GEMM_BF16_ROWS) + 31) / 32 * 32 * (size_t)((K + 31) / 32 * 32) * 2;
    return PT2C_MAX(fallback, amx);
}

/* 1 when this CPU and OS run the AMX path (asked once: CPUID, then Linux's permission for the tile state) */
PT2C_KERNEL int pt2c_gemm_bf16_native(void)
{
#if defined(PT2C_BF16_AMX)
    static int has = -1;
    if (has < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        has = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) &&
              syscall(158 /* SYS_arch_prctl */, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
    }
    return has;
#else
    return 0;
#endif
}

PT2C_KERNEL void pt2c_gemm_bf16(float *C, int ldc, const float *A, int lda, const uint16_t *B, int M, int N, int K,
                                const pt2c_epilogue *ep, void *scratch)
{
    if (M <= 0 || N <= 0) return;
    if (ep && !ep->bias && !ep->residual && ep->act == PT2C_ACT_NONE) ep = NULL;
    if (M <= PT2C_GEMM_BF16_ROWS_DIRECT) { /* (AMX's tiles would be mostly padding) */
        pt2c_gemm_bf16_rows(C, ldc, A, lda, B, M, N, K, ep);
        return;
    }
#if defined(PT2C_BF16_AMX)
    if (K > 0 && pt2c_gemm_bf16_native()) {
        pt2c_gemm_bf16_amx(C, ldc, A, lda, B, M, N, K, ep, (uint16_t *)scratch);
        return;
    }
#endif
    pt2c_gemm_bf16_fallback(C, ldc, A, lda, B, M, N, K, ep, (float *)scratch);
}

#endif /* PT2C_GEMM_BF16_C */
