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
#include "simd.h"
/* FMA micro-kernels on simd.h's native vectors (AVX-512: 16 lanes, AVX2: 8, NEON: 4): blocks of up
 * to 6 query rows by PT2C_SDPA_NV vectors (x86: 2, 12 accumulators of 16 registers; NEON: 4, 24 of
 * 32), so that enough independent FMAs fill the pipes */
#if defined(PT2C_VF)
#if defined(PT2C_SIMD_NEON)
#define PT2C_SDPA_NV 4
#else
#define PT2C_SDPA_NV 2
#endif
#if defined(__GNUC__) || defined(__clang__)
#define PT2C_SDPA_INLINE static inline __attribute__((always_inline))
#else
#define PT2C_SDPA_INLINE static inline
#endif
#endif

#define PT2C_SDPA_BQ 64 /* query rows per task (amortises the key transpose) */
#define PT2C_SDPA_BK 64 /* keys per tile (multiple of PT2C_SDPA_NR) */
/* Keys are padded to a multiple of NR (the score tile's width).  The vector micro-kernels take
 * blocks of up to 6 query rows by PT2C_SDPA_NV vectors; the plain C ones 4 rows by NR. */
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
    /* transposed key tile + score/probability tile + accumulators + (m, l) + a value tile (copied
     * when v's rows are not contiguous: strided rows in the P.V loop cost BERT 4 %) */
    return (size_t)D * bk + (size_t)bq * bk + (size_t)bq * Dv + 2 * (size_t)bq + (size_t)bk * Dv;
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

#if defined(PT2C_VF)
/* S[r][c] = q_r . kt[:][c] for R rows and NV vectors of keys, from the transposed key tile
 * kt[D][bk]: R x NV accumulators in registers over the whole D loop (R, NV are constants at
 * every call, so the loops unroll and the arrays live in registers). */
PT2C_SDPA_INLINE void pt2c_sdpa_scores_tile(float *PT2C_RESTRICT S, const float *PT2C_RESTRICT q, long qs,
                                            const float *PT2C_RESTRICT kt, int D, int bk, const int R, const int NV)
{
    pt2c_vf acc[6][PT2C_SDPA_NV], kv[PT2C_SDPA_NV];
    int r, v, d;
    for (r = 0; r < R; r++)
        for (v = 0; v < NV; v++) acc[r][v] = PT2C_VF_ZERO();
    for (d = 0; d < D; d++) {
        for (v = 0; v < NV; v++) kv[v] = PT2C_VF_LOAD(kt + (size_t)d * bk + v * PT2C_VF_LANES);
        for (r = 0; r < R; r++) {
            const pt2c_vf qv = PT2C_VF_SET1(q[(size_t)r * qs + d]);
            for (v = 0; v < NV; v++) acc[r][v] = PT2C_VF_FMA(acc[r][v], qv, kv[v]);
        }
    }
    for (r = 0; r < R; r++)
        for (v = 0; v < NV; v++) PT2C_VF_STORE(S + (size_t)r * bk + v * PT2C_VF_LANES, acc[r][v]);
}

/* A[r][c] += sum_j P[r][j] V[j][c] for R rows and NV vectors of columns (as above). */
PT2C_SDPA_INLINE void pt2c_sdpa_pv_tile(float *PT2C_RESTRICT A, const float *PT2C_RESTRICT P,
                                        const float *PT2C_RESTRICT V, long vs, int nk, int Dv, int bk, const int R,
                                        const int NV)
{
    pt2c_vf acc[6][PT2C_SDPA_NV], vv[PT2C_SDPA_NV];
    int r, v, j;
    for (r = 0; r < R; r++)
        for (v = 0; v < NV; v++) acc[r][v] = PT2C_VF_LOAD(A + (size_t)r * Dv + v * PT2C_VF_LANES);
    for (j = 0; j < nk; j++) {
        for (v = 0; v < NV; v++) vv[v] = PT2C_VF_LOAD(V + (size_t)j * vs + v * PT2C_VF_LANES);
        for (r = 0; r < R; r++) {
            const pt2c_vf pv = PT2C_VF_SET1(P[(size_t)r * bk + j]);
            for (v = 0; v < NV; v++) acc[r][v] = PT2C_VF_FMA(acc[r][v], pv, vv[v]);
        }
    }
    for (r = 0; r < R; r++)
        for (v = 0; v < NV; v++) PT2C_VF_STORE(A + (size_t)r * Dv + v * PT2C_VF_LANES, acc[r][v]);
}

/* One block of R rows (6, 4 or 1) over all nk16 keys: PT2C_SDPA_NV vectors at a time, then 1. */
PT2C_SDPA_INLINE void pt2c_sdpa_scores_rows(float *S, const float *q, long qs, const float *kt, int nk16, int D,
                                            int bk, const int R)
{
    int j = 0;
    for (; j + PT2C_SDPA_NV * PT2C_VF_LANES <= nk16; j += PT2C_SDPA_NV * PT2C_VF_LANES)
        pt2c_sdpa_scores_tile(S + j, q, qs, kt + j, D, bk, R, PT2C_SDPA_NV);
    for (; j < nk16; j += PT2C_VF_LANES) pt2c_sdpa_scores_tile(S + j, q, qs, kt + j, D, bk, R, 1);
}

PT2C_SDPA_INLINE void pt2c_sdpa_pv_rows(float *A, const float *P, const float *V, long vs, int nk, int cvec, int Dv,
                                        int bk, const int R)
{
    int c = 0;
    for (; c + PT2C_SDPA_NV * PT2C_VF_LANES <= cvec; c += PT2C_SDPA_NV * PT2C_VF_LANES)
        pt2c_sdpa_pv_tile(A + c, P, V + c, vs, nk, Dv, bk, R, PT2C_SDPA_NV);
    for (; c < cvec; c += PT2C_VF_LANES) pt2c_sdpa_pv_tile(A + c, P, V + c, vs, nk, Dv, bk, R, 1);
}
#endif

/* S[i][j] = q_i . k_j for nq rows (q_i at q + i * qs) and nk16 keys (a multiple of NR), from the
 * transposed key tile kt[D][bk]. */
PT2C_KERNEL void pt2c_sdpa_scores(float *PT2C_RESTRICT S, const float *PT2C_RESTRICT q, long qs,
                                  const float *PT2C_RESTRICT kt, int nq, int nk16, int D, int bk)
{
    int i = 0;
#if defined(PT2C_VF)
    for (; i + 6 <= nq; i += 6) pt2c_sdpa_scores_rows(S + (size_t)i * bk, q + (size_t)i * qs, qs, kt, nk16, D, bk, 6);
    for (; i + 4 <= nq; i += 4) pt2c_sdpa_scores_rows(S + (size_t)i * bk, q + (size_t)i * qs, qs, kt, nk16, D, bk, 4);
    for (; i < nq; i++) pt2c_sdpa_scores_rows(S + (size_t)i * bk, q + (size_t)i * qs, qs, kt, nk16, D, bk, 1);
#else
    /* MR x NR accumulators (fixed-size arrays the compiler fully unrolls) */
    for (; i + PT2C_SDPA_MR <= nq; i += PT2C_SDPA_MR)
        for (int j = 0; j < nk16; j += PT2C_SDPA_NR) {
            float acc[PT2C_SDPA_MR][PT2C_SDPA_NR] = {{0}};
            for (int d = 0; d < D; d++) {
                const float *kd = kt + (size_t)d * bk + j;
                for (int r = 0; r < PT2C_SDPA_MR; r++) {
                    float qv = q[(size_t)(i + r) * qs + d];
                    for (int c = 0; c < PT2C_SDPA_NR; c++)
                        acc[r][c] += qv * kd[c];
                }
            }
            for (int r = 0; r < PT2C_SDPA_MR; r++)
                memcpy(S + (size_t)(i + r) * bk + j, acc[r], sizeof acc[r]);
        }
    for (; i < nq; i++)
        for (int j = 0; j < nk16; j += PT2C_SDPA_NR) {
            float acc[PT2C_SDPA_NR] = {0};
            for (int d = 0; d < D; d++) {
                const float *kd = kt + (size_t)d * bk + j;
                float qv = q[(size_t)i * qs + d];
                for (int c = 0; c < PT2C_SDPA_NR; c++)
                    acc[c] += qv * kd[c];
            }
            memcpy(S + (size_t)i * bk + j, acc, sizeof acc);
        }
#endif
}

/* A[i][:] += sum_j P[i][j] * V[j][:] for nq rows, nk keys (V[j] at V + j * vs), Dv columns; blocks
 * of rows by columns of A are kept in registers over the key loop. */
PT2C_KERNEL void pt2c_sdpa_pv(float *PT2C_RESTRICT A, const float *PT2C_RESTRICT P,
                              const float *PT2C_RESTRICT V, long vs, int nq, int nk, int Dv, int bk)
{
    int i = 0, cfull;
#if defined(PT2C_VF)
    cfull = Dv / PT2C_VF_LANES * PT2C_VF_LANES;
    for (; i + 6 <= nq; i += 6) pt2c_sdpa_pv_rows(A + (size_t)i * Dv, P + (size_t)i * bk, V, vs, nk, cfull, Dv, bk, 6);
    for (; i + 4 <= nq; i += 4) pt2c_sdpa_pv_rows(A + (size_t)i * Dv, P + (size_t)i * bk, V, vs, nk, cfull, Dv, bk, 4);
    for (; i < nq; i++) pt2c_sdpa_pv_rows(A + (size_t)i * Dv, P + (size_t)i * bk, V, vs, nk, cfull, Dv, bk, 1);
#else
    cfull = Dv / PT2C_SDPA_NR * PT2C_SDPA_NR;
    for (; i + PT2C_SDPA_MR <= nq; i += PT2C_SDPA_MR)
        for (int c0 = 0; c0 < cfull; c0 += PT2C_SDPA_NR) {
            float acc[PT2C_SDPA_MR][PT2C_SDPA_NR];
            for (int r = 0; r < PT2C_SDPA_MR; r++)
                memcpy(acc[r], A + (size_t)(i + r) * Dv + c0, sizeof acc[r]);
            for (int j = 0; j < nk; j++) {
                const float *vj = V + (size_t)j * vs + c0;
                for (int r = 0; r < PT2C_SDPA_MR; r++) {
                    float p = P[(size_t)(i + r) * bk + j];
                    for (int c = 0; c < PT2C_SDPA_NR; c++)
                        acc[r][c] += p * vj[c];
                }
            }
            for (int r = 0; r < PT2C_SDPA_MR; r++)
                memcpy(A + (size_t)(i + r) * Dv + c0, acc[r], sizeof acc[r]);
        }
#endif
    /* leftover rows (all columns) and leftover columns of the blocked rows */
    for (int r = 0; r < nq; r++) {
        int c0 = r < i ? cfull : 0;
        if (c0 >= Dv)
            continue;
        float *a = A + (size_t)r * Dv;
        for (int j = 0; j < nk; j++) {
            float p = P[(size_t)r * bk + j];
            const float *vj = V + (size_t)j * vs;
            for (int c = c0; c < Dv; c++)
                a[c] += p * vj[c];
        }
    }
}

/* Where q, k, v and out live: element strides of batch, head and row (a row's D or Dv elements are
 * contiguous), so permuted and sliced views (a fused QKV projection split into heads) are read and
 * written in place.  NULL: dense [B][H][L][D]. */
typedef struct {
    long b, h, r;
} pt2c_sdpa_stride;
typedef struct {
    pt2c_sdpa_stride q, k, v, out;
} pt2c_sdpa_layout;

PT2C_KERNEL void pt2c_sdpa(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT q, const float *PT2C_RESTRICT k,
                           const float *PT2C_RESTRICT v, const float *mask_add, const unsigned char *mask_bool,
                           long msb, long msh, long msq, long msk, int B, int H, int Hkv, int Lq, int Lk, int D,
                           int Dv, float scale, int causal, const pt2c_sdpa_layout *layout, float *scratch)
{
    pt2c_sdpa_layout dense;
    if (!layout) {
        dense.q.b = (long)H * Lq * D, dense.q.h = (long)Lq * D, dense.q.r = D;
        dense.k.b = (long)Hkv * Lk * D, dense.k.h = (long)Lk * D, dense.k.r = D;
        dense.v.b = (long)Hkv * Lk * Dv, dense.v.h = (long)Lk * Dv, dense.v.r = Dv;
        dense.out.b = (long)H * Lq * Dv, dense.out.h = (long)Lq * Dv, dense.out.r = Dv;
        layout = &dense;
    }
    const pt2c_sdpa_stride qs = layout->q, ks = layout->k, vs = layout->v, os = layout->out;
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
        const float *qp = q + b * qs.b + h * qs.h + i0 * qs.r;
        const float *kp = k + b * ks.b + hk * ks.h;
        const float *vp = v + b * vs.b + hk * vs.h;
        float *op = out + b * os.b + h * os.h + i0 * os.r;
        long moff = (long)b * msb + (long)h * msh;

        float *ws = scratch + (size_t)PT2C_THREAD_ID() * per_thread;
        float *PT2C_RESTRICT kt = ws;                  /* [D][bk]  transposed key tile */
        float *PT2C_RESTRICT S = kt + (size_t)D * bk;  /* [bq][bk] scores, then probabilities */
        float *PT2C_RESTRICT acc = S + (size_t)bq * bk; /* [bq][Dv] unnormalised output */
        float *PT2C_RESTRICT m = acc + (size_t)bq * Dv; /* running max per row */
        float *PT2C_RESTRICT l = m + bq;               /* running denominator per row */
        float *PT2C_RESTRICT vt = l + bq;              /* [bk][Dv] value tile, if v's rows are strided */
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
            const float *ktile = kp + j0 * ks.r;

            if (transposed) {
                int nk16 = (nk + PT2C_SDPA_NR - 1) / PT2C_SDPA_NR * PT2C_SDPA_NR, jj = 0;
#if defined(PT2C_SIMD_X86)
                if (D % 8 == 0) /* 8 x 8 blocks (one element at a time: ~10 % of the kernel's time) */
                    for (; jj + 8 <= nk; jj += 8)
                        for (int d = 0; d < D; d += 8) {
                            const float *sp[8];
                            float *dp[8];
                            for (int t = 0; t < 8; t++) {
                                sp[t] = ktile + (jj + t) * ks.r + d;
                                dp[t] = kt + (size_t)(d + t) * bk + jj;
                            }
                            pt2c_tr8x8(dp, sp);
                        }
#endif
                for (; jj < nk16; jj++) {
                    const float *kr = ktile + jj * ks.r;
                    if (jj < nk)
                        for (int d = 0; d < D; d++)
                            kt[(size_t)d * bk + jj] = kr[d];
                    else
                        for (int d = 0; d < D; d++)
                            kt[(size_t)d * bk + jj] = 0.0f; /* padding keys, ignored below */
                }
                pt2c_sdpa_scores(S, qp, qs.r, kt, nq, nk16, D, bk);
            } else {
                for (int ii = 0; ii < nq; ii++)
                    for (int jj = 0; jj < nk; jj++)
                        S[(size_t)ii * bk + jj] = pt2c_sdpa_dot(qp + ii * qs.r, ktile + jj * ks.r, D);
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
#if defined(PT2C_V8)
                { /* (compilers leave the loop below scalar) max returns its 2nd operand on NaN, as the select */
                    pt2c_v8 mv = PT2C_V8_LOAD(mx8);
                    for (; jj + 8 <= n; jj += 8)
                        mv = PT2C_V8_MAX(PT2C_V8_LOAD(s + jj), mv);
                    PT2C_V8_STORE(mx8, mv);
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
                jj = 0;
#if defined(PT2C_VF)
                { /* e = exp(s - max) and its partial sums, PT2C_VF_LANES at a time */
                    const pt2c_vf mv = PT2C_VF_SET1(mnew);
                    pt2c_vf sv = PT2C_VF_ZERO();
                    float part[PT2C_VF_LANES];
                    for (; jj + PT2C_VF_LANES <= n; jj += PT2C_VF_LANES) {
                        const pt2c_vf e = PT2C_VF_EXP_FTZ(PT2C_VF_SUB(PT2C_VF_LOAD(s + jj), mv));
                        PT2C_VF_STORE(s + jj, e);
                        sv = PT2C_VF_ADD(sv, e);
                    }
                    PT2C_VF_STORE(part, sv);
                    for (int t = 0; t < PT2C_VF_LANES; t++) ps8[t % 8] += part[t];
                }
#endif
                /* a loop of its own: only then do compilers vectorise pt2c_exp (with the sum in the
                 * same loop it ran scalar, ~25 % of the kernel's time) */
                for (int j = jj; j < n; j++)
                    s[j] = pt2c_exp_ftz(s[j] - mnew);
                /* 8 partial sums (one vector): a single running sum is a chain of dependent adds,
                 * which held the whole softmax to the add latency (~20 % of BERT's time) */
                for (; jj + 8 <= n; jj += 8)
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
            if (vs.r != Dv) { /* gather the tile's value rows: the P.V loop then streams one block */
                for (int jj = 0; jj < nk; jj++)
                    memcpy(vt + (size_t)jj * Dv, vp + (j0 + jj) * vs.r, (size_t)Dv * sizeof(float));
                pt2c_sdpa_pv(acc, S, vt, Dv, nq, nk, Dv, bk);
            } else {
                pt2c_sdpa_pv(acc, S, vp + j0 * vs.r, vs.r, nq, nk, Dv, bk);
            }
        }

        for (int ii = 0; ii < nq; ii++) {
            /* fully masked rows have l == 0 and acc == 0: output zeros (torch) */
            float inv = l[ii] > 0.0f ? 1.0f / l[ii] : 0.0f;
            const float *a = acc + (size_t)ii * Dv;
            float *o = op + ii * os.r;
            for (int c = 0; c < Dv; c++)
                o[c] = a[c] * inv;
        }
    }
}

#endif /* PT2C_ATTENTION_C */
