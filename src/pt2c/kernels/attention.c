/* pt2c kernels: scaled dot-product attention, flash style.
 *
 * Each task takes one (batch, head, block of up to PT2C_SDPA_BQ queries) and
 * walks the keys in tiles of PT2C_SDPA_BK, keeping a running max m, running
 * denominator l and an unnormalised output accumulator per query row (online
 * softmax).  Only one tile of scores per row is ever materialised, never the
 * Lq x Lk matrix.
 *
 * Scores for a block are computed against a transposed copy of the key tile,
 * so the innermost loop runs over keys (contiguous, vectorises) instead of
 * being a horizontal dot-product reduction; both matrix products (Q.K^T and
 * P.V) use small register-blocked loops written in plain C.  For tiny query
 * blocks (decode, Lq < 4) the transpose would not pay off and plain dot
 * products are used.
 *
 * Semantics follow torch.nn.functional.scaled_dot_product_attention:
 *   scores = q.k^T * scale (+ mask_add | -inf where mask_bool == 0)
 *   causal: key j is masked for query i when j > i (tril with diagonal 0 on
 *           the Lq x Lk matrix, i.e. top-left aligned, also when Lq != Lk).
 *   A query row whose keys are all masked produces zeros: torch 2.x on CPU
 *   (fused kernel and the decomposition seen by torch.export alike) returns 0
 *   for such rows rather than NaN.
 */
#ifndef PT2C_ATTENTION_C
#define PT2C_ATTENTION_C

#include "common.h"
/* 256-bit FMA micro-kernels on any x86 target that has them (AVX-512 ones too) */
#if !defined(PT2C_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PT2C_SDPA_AVX2 1
#endif

#define PT2C_SDPA_BQ 64 /* query rows per task (amortises the key transpose) */
#define PT2C_SDPA_BK 64 /* keys per tile (multiple of PT2C_SDPA_NR) */
/* Register block: MR query rows by NR keys (scores) or value columns (P.V).
 * The AVX2 micro-kernels below are written out for exactly 4 x 16. */
#define PT2C_SDPA_MR 4
#define PT2C_SDPA_NR 16

/* Tile sizes actually used (shrunk for short sequences to save scratch). */
PT2C_KERNEL void pt2c_sdpa_tiles(int *bq, int *bk, int Lq, int Lk)
{
    int lk = (PT2C_MAX(Lk, 1) + PT2C_SDPA_NR - 1) / PT2C_SDPA_NR * PT2C_SDPA_NR;
    *bq = PT2C_MAX(1, PT2C_MIN(PT2C_SDPA_BQ, Lq));
    *bk = PT2C_MIN(PT2C_SDPA_BK, lk);
}

PT2C_KERNEL size_t pt2c_sdpa_thread_floats(int Lq, int Lk, int D, int Dv)
{
    int bq, bk;
    pt2c_sdpa_tiles(&bq, &bk, Lq, Lk);
    /* transposed key tile + score/probability tile + accumulators + (m, l) */
    return (size_t)D * bk + (size_t)bq * bk + (size_t)bq * Dv + 2 * (size_t)bq;
}

/* Scratch (in floats) that pt2c_sdpa needs, for up to PT2C_MAX_THREADS threads. */
PT2C_KERNEL size_t pt2c_sdpa_scratch_floats(int Lq, int Lk, int D, int Dv)
{
    return (size_t)PT2C_MAX_THREADS * pt2c_sdpa_thread_floats(Lq, Lk, D, Dv);
}

/* Dot product with 8 independent partial sums (vectorisable without -ffast-math). */
PT2C_KERNEL float pt2c_sdpa_dot(const float *PT2C_RESTRICT a, const float *PT2C_RESTRICT b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += a[i + k] * b[i + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* S[i][j] = q_i . k_j for nq rows and nk16 keys (a multiple of NR), from the
 * transposed key tile kt[D][bk].  MR x NR accumulators stay in registers
 * across the whole D loop (fixed-size arrays the compiler fully unrolls). */
PT2C_KERNEL void pt2c_sdpa_scores(float *PT2C_RESTRICT S, const float *PT2C_RESTRICT q,
                                  const float *PT2C_RESTRICT kt, int nq, int nk16, int D, int bk)
{
    int i = 0;
    for (; i + PT2C_SDPA_MR <= nq; i += PT2C_SDPA_MR)
        for (int j = 0; j < nk16; j += PT2C_SDPA_NR) {
#if defined(PT2C_SDPA_AVX2)
            /* compilers do not keep this block in registers on their own */
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
            __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
            const float *q0 = q + (size_t)i * D;
            for (int d = 0; d < D; d++) {
                const float *kd = kt + (size_t)d * bk + j;
                __m256 k0 = _mm256_loadu_ps(kd), k1 = _mm256_loadu_ps(kd + 8);
                __m256 qv = _mm256_broadcast_ss(q0 + d);
                a00 = _mm256_fmadd_ps(qv, k0, a00);
                a01 = _mm256_fmadd_ps(qv, k1, a01);
                qv = _mm256_broadcast_ss(q0 + D + d);
                a10 = _mm256_fmadd_ps(qv, k0, a10);
                a11 = _mm256_fmadd_ps(qv, k1, a11);
                qv = _mm256_broadcast_ss(q0 + 2 * (size_t)D + d);
                a20 = _mm256_fmadd_ps(qv, k0, a20);
                a21 = _mm256_fmadd_ps(qv, k1, a21);
                qv = _mm256_broadcast_ss(q0 + 3 * (size_t)D + d);
                a30 = _mm256_fmadd_ps(qv, k0, a30);
                a31 = _mm256_fmadd_ps(qv, k1, a31);
            }
            float *s0 = S + (size_t)i * bk + j;
            _mm256_storeu_ps(s0, a00);
            _mm256_storeu_ps(s0 + 8, a01);
            _mm256_storeu_ps(s0 + bk, a10);
            _mm256_storeu_ps(s0 + bk + 8, a11);
            _mm256_storeu_ps(s0 + 2 * (size_t)bk, a20);
            _mm256_storeu_ps(s0 + 2 * (size_t)bk + 8, a21);
            _mm256_storeu_ps(s0 + 3 * (size_t)bk, a30);
            _mm256_storeu_ps(s0 + 3 * (size_t)bk + 8, a31);
#else
            float acc[PT2C_SDPA_MR][PT2C_SDPA_NR] = {{0}};
            for (int d = 0; d < D; d++) {
                const float *kd = kt + (size_t)d * bk + j;
                for (int r = 0; r < PT2C_SDPA_MR; r++) {
                    float qv = q[(size_t)(i + r) * D + d];
                    for (int c = 0; c < PT2C_SDPA_NR; c++)
                        acc[r][c] += qv * kd[c];
                }
            }
            for (int r = 0; r < PT2C_SDPA_MR; r++)
                memcpy(S + (size_t)(i + r) * bk + j, acc[r], sizeof acc[r]);
#endif
        }
    for (; i < nq; i++)
        for (int j = 0; j < nk16; j += PT2C_SDPA_NR) {
            float acc[PT2C_SDPA_NR] = {0};
            for (int d = 0; d < D; d++) {
                const float *kd = kt + (size_t)d * bk + j;
                float qv = q[(size_t)i * D + d];
                for (int c = 0; c < PT2C_SDPA_NR; c++)
                    acc[c] += qv * kd[c];
            }
            memcpy(S + (size_t)i * bk + j, acc, sizeof acc);
        }
}

/* A[i][:] += sum_j P[i][j] * V[j][:] for nq rows, nk keys, Dv columns; MR rows
 * by NR columns of A are kept in registers over the key loop. */
PT2C_KERNEL void pt2c_sdpa_pv(float *PT2C_RESTRICT A, const float *PT2C_RESTRICT P,
                              const float *PT2C_RESTRICT V, int nq, int nk, int Dv, int bk)
{
    int i = 0, cfull = Dv / PT2C_SDPA_NR * PT2C_SDPA_NR;
    for (; i + PT2C_SDPA_MR <= nq; i += PT2C_SDPA_MR)
        for (int c0 = 0; c0 < cfull; c0 += PT2C_SDPA_NR) {
#if defined(PT2C_SDPA_AVX2)
            float *r0 = A + (size_t)i * Dv + c0;
            const float *p0 = P + (size_t)i * bk;
            __m256 a00 = _mm256_loadu_ps(r0), a01 = _mm256_loadu_ps(r0 + 8);
            __m256 a10 = _mm256_loadu_ps(r0 + Dv), a11 = _mm256_loadu_ps(r0 + Dv + 8);
            __m256 a20 = _mm256_loadu_ps(r0 + 2 * (size_t)Dv), a21 = _mm256_loadu_ps(r0 + 2 * (size_t)Dv + 8);
            __m256 a30 = _mm256_loadu_ps(r0 + 3 * (size_t)Dv), a31 = _mm256_loadu_ps(r0 + 3 * (size_t)Dv + 8);
            for (int j = 0; j < nk; j++) {
                const float *vj = V + (size_t)j * Dv + c0;
                __m256 v0 = _mm256_loadu_ps(vj), v1 = _mm256_loadu_ps(vj + 8);
                __m256 p = _mm256_broadcast_ss(p0 + j);
                a00 = _mm256_fmadd_ps(p, v0, a00);
                a01 = _mm256_fmadd_ps(p, v1, a01);
                p = _mm256_broadcast_ss(p0 + bk + j);
                a10 = _mm256_fmadd_ps(p, v0, a10);
                a11 = _mm256_fmadd_ps(p, v1, a11);
                p = _mm256_broadcast_ss(p0 + 2 * (size_t)bk + j);
                a20 = _mm256_fmadd_ps(p, v0, a20);
                a21 = _mm256_fmadd_ps(p, v1, a21);
                p = _mm256_broadcast_ss(p0 + 3 * (size_t)bk + j);
                a30 = _mm256_fmadd_ps(p, v0, a30);
                a31 = _mm256_fmadd_ps(p, v1, a31);
            }
            _mm256_storeu_ps(r0, a00);
            _mm256_storeu_ps(r0 + 8, a01);
            _mm256_storeu_ps(r0 + Dv, a10);
            _mm256_storeu_ps(r0 + Dv + 8, a11);
            _mm256_storeu_ps(r0 + 2 * (size_t)Dv, a20);
            _mm256_storeu_ps(r0 + 2 * (size_t)Dv + 8, a21);
            _mm256_storeu_ps(r0 + 3 * (size_t)Dv, a30);
            _mm256_storeu_ps(r0 + 3 * (size_t)Dv + 8, a31);
#else
            float acc[PT2C_SDPA_MR][PT2C_SDPA_NR];
            for (int r = 0; r < PT2C_SDPA_MR; r++)
                memcpy(acc[r], A + (size_t)(i + r) * Dv + c0, sizeof acc[r]);
            for (int j = 0; j < nk; j++) {
                const float *vj = V + (size_t)j * Dv + c0;
                for (int r = 0; r < PT2C_SDPA_MR; r++) {
                    float p = P[(size_t)(i + r) * bk + j];
                    for (int c = 0; c < PT2C_SDPA_NR; c++)
                        acc[r][c] += p * vj[c];
                }
            }
            for (int r = 0; r < PT2C_SDPA_MR; r++)
                memcpy(A + (size_t)(i + r) * Dv + c0, acc[r], sizeof acc[r]);
#endif
        }
    /* leftover rows (all columns) and leftover columns of the blocked rows */
    for (int r = 0; r < nq; r++) {
        int c0 = r < i ? cfull : 0;
        if (c0 >= Dv)
            continue;
        float *a = A + (size_t)r * Dv;
        for (int j = 0; j < nk; j++) {
            float p = P[(size_t)r * bk + j];
            const float *vj = V + (size_t)j * Dv;
            for (int c = c0; c < Dv; c++)
                a[c] += p * vj[c];
        }
    }
}

PT2C_KERNEL void pt2c_sdpa(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT q, const float *PT2C_RESTRICT k,
                           const float *PT2C_RESTRICT v, const float *mask_add, const unsigned char *mask_bool,
                           long msb, long msh, long msq, long msk, int B, int H, int Hkv, int Lq, int Lk, int D,
                           int Dv, float scale, int causal, float *scratch)
{
    int bq, bk;
    pt2c_sdpa_tiles(&bq, &bk, Lq, Lk);
    size_t per_thread = pt2c_sdpa_thread_floats(Lq, Lk, D, Dv);
    int group = H / Hkv; /* query heads per kv head (GQA) */
    int nqb = (Lq + bq - 1) / bq;
    long ntasks = (long)B * H * nqb;
#if defined(_OPENMP)
    /* scratch is sized for PT2C_MAX_THREADS, so never run more threads than that */
    int nthr = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif

    PT2C_OMP(parallel for schedule(dynamic) num_threads(nthr) if (ntasks > 1 && (long)Lq * Lk * D * B * H > 65536))
    for (long t = 0; t < ntasks; t++) {
        int qb = (int)(t % nqb);
        int h = (int)((t / nqb) % H);
        int b = (int)(t / ((long)nqb * H));
        int hk = h / group;
        int i0 = qb * bq;
        int nq = PT2C_MIN(bq, Lq - i0);
        const float *qp = q + ((size_t)(b * H + h) * Lq + i0) * D;
        const float *kp = k + (size_t)(b * Hkv + hk) * Lk * D;
        const float *vp = v + (size_t)(b * Hkv + hk) * Lk * Dv;
        float *op = out + ((size_t)(b * H + h) * Lq + i0) * Dv;
        long moff = (long)b * msb + (long)h * msh;

        float *ws = scratch + (size_t)PT2C_THREAD_ID() * per_thread;
        float *PT2C_RESTRICT kt = ws;                  /* [D][bk]  transposed key tile */
        float *PT2C_RESTRICT S = kt + (size_t)D * bk;  /* [bq][bk] scores, then probabilities */
        float *PT2C_RESTRICT acc = S + (size_t)bq * bk; /* [bq][Dv] unnormalised output */
        float *PT2C_RESTRICT m = acc + (size_t)bq * Dv; /* running max per row */
        float *PT2C_RESTRICT l = m + bq;               /* running denominator per row */
        /* the transpose only pays off when several query rows share it */
        int transposed = nq >= PT2C_SDPA_MR;

        for (int ii = 0; ii < nq; ii++) {
            m[ii] = -INFINITY;
            l[ii] = 0.0f;
        }
        memset(acc, 0, (size_t)nq * Dv * sizeof(float));

        /* with causal masking no key beyond the block's last query is needed */
        int kend = causal ? PT2C_MIN(Lk, i0 + nq) : Lk;
        for (int j0 = 0; j0 < kend; j0 += bk) {
            int nk = PT2C_MIN(bk, kend - j0);
            const float *ktile = kp + (size_t)j0 * D;

            if (transposed) {
                int nk16 = (nk + PT2C_SDPA_NR - 1) / PT2C_SDPA_NR * PT2C_SDPA_NR;
                for (int jj = 0; jj < nk16; jj++) {
                    const float *kr = ktile + (size_t)jj * D;
                    if (jj < nk)
                        for (int d = 0; d < D; d++)
                            kt[(size_t)d * bk + jj] = kr[d];
                    else
                        for (int d = 0; d < D; d++)
                            kt[(size_t)d * bk + jj] = 0.0f; /* padding keys, ignored below */
                }
                pt2c_sdpa_scores(S, qp, kt, nq, nk16, D, bk);
            } else {
                for (int ii = 0; ii < nq; ii++)
                    for (int jj = 0; jj < nk; jj++)
                        S[(size_t)ii * bk + jj] = pt2c_sdpa_dot(qp + (size_t)ii * D, ktile + (size_t)jj * D, D);
            }

            /* scale, mask and online-softmax each row; S becomes probabilities */
            for (int ii = 0; ii < nq; ii++) {
                int i = i0 + ii;
                int n = causal ? PT2C_MAX(0, PT2C_MIN(nk, i - j0 + 1)) : nk;
                float *s = S + (size_t)ii * bk;
                for (int jj = 0; jj < n; jj++)
                    s[jj] *= scale;
                if (mask_add) {
                    const float *mr = mask_add + moff + (long)i * msq + (long)j0 * msk;
                    for (int jj = 0; jj < n; jj++)
                        s[jj] += mr[(long)jj * msk];
                } else if (mask_bool && msk == 1) { /* (a select: this form vectorises) */
                    const unsigned char *mr = mask_bool + moff + (long)i * msq + j0;
                    for (int jj = 0; jj < n; jj++)
                        s[jj] = pt2c_select(mr[jj] != 0, s[jj], -INFINITY);
                } else if (mask_bool) {
                    const unsigned char *mr = mask_bool + moff + (long)i * msq + (long)j0 * msk;
                    for (int jj = 0; jj < n; jj++)
                        if (!mr[(long)jj * msk])
                            s[jj] = -INFINITY;
                }
                float mnew = m[ii], mx8[8];
                int jj = 0;
                for (int t = 0; t < 8; t++)
                    mx8[t] = mnew;
#if defined(PT2C_SDPA_AVX2)
                { /* (compilers leave the loop below scalar) max returns its 2nd operand on NaN, as the select */
                    __m256 mv = _mm256_loadu_ps(mx8);
                    for (; jj + 8 <= n; jj += 8)
                        mv = _mm256_max_ps(_mm256_loadu_ps(s + jj), mv);
                    _mm256_storeu_ps(mx8, mv);
                }
#endif
                for (; jj + 8 <= n; jj += 8) /* 8 running maxima (one vector), then their max */
                    for (int t = 0; t < 8; t++)
                        mx8[t] = pt2c_select(s[jj + t] > mx8[t], s[jj + t], mx8[t]);
                for (int t = 0; t < 8; t++)
                    mnew = mx8[t] > mnew ? mx8[t] : mnew;
                for (; jj < n; jj++)
                    mnew = s[jj] > mnew ? s[jj] : mnew;
                if (mnew == -INFINITY) {
                    /* everything masked so far: contributes nothing */
                    memset(s, 0, (size_t)nk * sizeof(float));
                    continue;
                }
                float corr = pt2c_exp_ftz(m[ii] - mnew); /* 0 on the first unmasked tile */
                float psum = 0.0f, ps8[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
                /* a loop of its own: only then do compilers vectorise pt2c_exp (with the sum in the
                 * same loop it ran scalar, ~25 % of the kernel's time) */
                for (jj = 0; jj < n; jj++)
                    s[jj] = pt2c_exp_ftz(s[jj] - mnew);
                /* 8 partial sums (one vector): a single running sum is a chain of dependent adds,
                 * which held the whole softmax to the add latency (~20 % of BERT's time) */
                for (jj = 0; jj + 8 <= n; jj += 8)
                    for (int t = 0; t < 8; t++)
                        ps8[t] += s[jj + t];
                for (; jj < n; jj++)
                    psum += s[jj];
                psum += ((ps8[0] + ps8[1]) + (ps8[2] + ps8[3])) + ((ps8[4] + ps8[5]) + (ps8[6] + ps8[7]));
                for (jj = n; jj < nk; jj++)
                    s[jj] = 0.0f; /* causally masked tail of the tile */
                l[ii] = l[ii] * corr + psum;
                m[ii] = mnew;
                if (corr != 1.0f) {
                    float *a = acc + (size_t)ii * Dv;
                    for (int c = 0; c < Dv; c++)
                        a[c] *= corr;
                }
            }
            pt2c_sdpa_pv(acc, S, vp + (size_t)j0 * Dv, nq, nk, Dv, bk);
        }

        for (int ii = 0; ii < nq; ii++) {
            /* fully masked rows have l == 0 and acc == 0: output zeros (torch) */
            float inv = l[ii] > 0.0f ? 1.0f / l[ii] : 0.0f;
            const float *a = acc + (size_t)ii * Dv;
            float *o = op + (size_t)ii * Dv;
            for (int c = 0; c < Dv; c++)
                o[c] = a[c] * inv;
        }
    }
}

#endif /* PT2C_ATTENTION_C */
