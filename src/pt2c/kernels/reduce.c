/* pt2c kernels: reductions over the middle axis of an [outer, r, inner] view.
 *
 * out has outer*inner elements.  Two layouts matter:
 *   inner == 1: each output is a contiguous row of r floats; reduced with
 *               several independent accumulators so the compiler can keep them
 *               in vector registers.
 *   inner  > 1: rows of `inner` floats are accumulated into a column tile, an
 *               elementwise (vectorisable) loop.
 * Sums are blocked (pairwise over blocks of 256) so that long rows keep float
 * accuracy close to a float64 sum.  max/min/argmax/argmin propagate NaN like
 * torch (NaN compares as the extreme value; the first NaN wins for arg*).
 * They require r >= 1.
 */
#ifndef PT2C_REDUCE_C
#define PT2C_REDUCE_C

#include "common.h"

#define PT2C_SUM_BLOCK 256   /* elements per leaf of the pairwise sum */
#define PT2C_RED_TILE 256    /* inner columns handled per tile when inner > 1 */

/* Sum of n contiguous floats: 16 partial sums per leaf block, leaves combined
 * pairwise, so the rounding error grows like 16 + log2(n / 256) additions. */
PT2C_KERNEL float pt2c_sum_f32(const float *PT2C_RESTRICT x, int n)
{
    if (n > PT2C_SUM_BLOCK) {
        int half = (n / 2 + PT2C_SUM_BLOCK - 1) / PT2C_SUM_BLOCK * PT2C_SUM_BLOCK;
        return pt2c_sum_f32(x, half) + pt2c_sum_f32(x + half, n - half);
    }
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            acc[k] += x[i + k];
    float tail = 0.0f;
    for (; i < n; i++)
        tail += x[i];
    for (int k = 0; k < 8; k++)
        acc[k] += acc[k + 8];
    return tail + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Sum of (x[i] - c)^2, same blocking as pt2c_sum_f32 (variance, mean square). */
PT2C_KERNEL float pt2c_sum_sqdev_f32(const float *PT2C_RESTRICT x, int n, float c)
{
    if (n > PT2C_SUM_BLOCK) {
        int half = (n / 2 + PT2C_SUM_BLOCK - 1) / PT2C_SUM_BLOCK * PT2C_SUM_BLOCK;
        return pt2c_sum_sqdev_f32(x, half, c) + pt2c_sum_sqdev_f32(x + half, n - half, c);
    }
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) {
            float d = x[i + k] - c;
            acc[k] += d * d;
        }
    float tail = 0.0f;
    for (; i < n; i++) {
        float d = x[i] - c;
        tail += d * d;
    }
    for (int k = 0; k < 8; k++)
        acc[k] += acc[k + 8];
    return tail + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Column sums of an [r, inner] slab into out[0..inner): rows are added into a
 * block accumulator of PT2C_SUM_BLOCK rows, blocks into the total, which keeps
 * the error small for large r without a scratch buffer beyond two tiles. */
PT2C_KERNEL void pt2c_sum_cols(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in, int r, int inner)
{
    float tot[PT2C_RED_TILE], blk[PT2C_RED_TILE];
    for (int c0 = 0; c0 < inner; c0 += PT2C_RED_TILE) {
        int nc = PT2C_MIN(PT2C_RED_TILE, inner - c0);
        for (int c = 0; c < nc; c++)
            tot[c] = 0.0f;
        for (int r0 = 0; r0 < r; r0 += PT2C_SUM_BLOCK) {
            int r1 = PT2C_MIN(r, r0 + PT2C_SUM_BLOCK);
            for (int c = 0; c < nc; c++)
                blk[c] = 0.0f;
            for (int j = r0; j < r1; j++) {
                const float *PT2C_RESTRICT row = in + (size_t)j * inner + c0;
                for (int c = 0; c < nc; c++)
                    blk[c] += row[c];
            }
            for (int c = 0; c < nc; c++)
                tot[c] += blk[c];
        }
        memcpy(out + c0, tot, (size_t)nc * sizeof(float));
    }
}

PT2C_KERNEL void pt2c_reduce_sum(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                 int outer, int r, int inner)
{
    if (inner == 1) {
        PT2C_OMP(parallel for schedule(static) if (outer > 1 && (long)outer * r > 32768))
        for (int o = 0; o < outer; o++)
            out[o] = pt2c_sum_f32(in + (size_t)o * r, r);
    } else {
        PT2C_OMP(parallel for schedule(static) if (outer > 1 && (long)outer * r * inner > 32768))
        for (int o = 0; o < outer; o++)
            pt2c_sum_cols(out + (size_t)o * inner, in + (size_t)o * r * inner, r, inner);
    }
}

PT2C_KERNEL void pt2c_reduce_mean(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                  int outer, int r, int inner)
{
    pt2c_reduce_sum(out, in, outer, r, inner);
    /* divide (not multiply by 1/r) to round like torch; r == 0 gives NaN like torch */
    float n = (float)r;
    for (size_t i = 0; i < (size_t)outer * inner; i++)
        out[i] /= n;
}

PT2C_KERNEL void pt2c_reduce_prod(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                  int outer, int r, int inner)
{
    PT2C_OMP(parallel for schedule(static) if (outer > 1 && (long)outer * r * inner > 32768))
    for (int o = 0; o < outer; o++) {
        const float *x = in + (size_t)o * r * inner;
        if (inner == 1) {
            float acc[8] = {1, 1, 1, 1, 1, 1, 1, 1};
            int i = 0;
            for (; i + 8 <= r; i += 8)
                for (int k = 0; k < 8; k++)
                    acc[k] *= x[i + k];
            float p = ((acc[0] * acc[4]) * (acc[1] * acc[5])) * ((acc[2] * acc[6]) * (acc[3] * acc[7]));
            for (; i < r; i++)
                p *= x[i];
            out[o] = p;
        } else {
            float *PT2C_RESTRICT y = out + (size_t)o * inner;
            for (int c = 0; c < inner; c++)
                y[c] = 1.0f;
            for (int j = 0; j < r; j++) {
                const float *PT2C_RESTRICT row = x + (size_t)j * inner;
                for (int c = 0; c < inner; c++)
                    y[c] *= row[c];
            }
        }
    }
}

/* NaN-propagating max/min step: once an accumulator is NaN it stays NaN. */
#define PT2C_RED_MAX_STEP(a, v) ((v) > (a) || (v) != (v) ? (v) : (a))
#define PT2C_RED_MIN_STEP(a, v) ((v) < (a) || (v) != (v) ? (v) : (a))

/* Shared body of max/min (STEP is one of the macros above). */
#define PT2C_REDUCE_EXTREME_BODY(STEP)                                                   \
    PT2C_OMP(parallel for schedule(static) if (outer > 1 && (long)outer * r * inner > 32768)) \
    for (int o = 0; o < outer; o++) {                                                    \
        const float *x = in + (size_t)o * r * inner;                                     \
        if (inner == 1) {                                                                \
            float acc[8];                                                                \
            for (int k = 0; k < 8; k++)                                                  \
                acc[k] = x[0];                                                           \
            int i = 0;                                                                   \
            for (; i + 8 <= r; i += 8)                                                   \
                for (int k = 0; k < 8; k++)                                              \
                    acc[k] = STEP(acc[k], x[i + k]);                                     \
            for (; i < r; i++)                                                           \
                acc[0] = STEP(acc[0], x[i]);                                             \
            for (int k = 1; k < 8; k++)                                                  \
                acc[0] = STEP(acc[0], acc[k]);                                           \
            out[o] = acc[0];                                                             \
        } else {                                                                         \
            float *PT2C_RESTRICT y = out + (size_t)o * inner;                            \
            memcpy(y, x, (size_t)inner * sizeof(float));                                 \
            for (int j = 1; j < r; j++) {                                                \
                const float *PT2C_RESTRICT row = x + (size_t)j * inner;                  \
                for (int c = 0; c < inner; c++)                                          \
                    y[c] = STEP(y[c], row[c]);                                           \
            }                                                                            \
        }                                                                                \
    }

PT2C_KERNEL void pt2c_reduce_max(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                 int outer, int r, int inner)
{
    PT2C_REDUCE_EXTREME_BODY(PT2C_RED_MAX_STEP)
}

PT2C_KERNEL void pt2c_reduce_min(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                 int outer, int r, int inner)
{
    PT2C_REDUCE_EXTREME_BODY(PT2C_RED_MIN_STEP)
}

/* argmax/argmin: strict comparison keeps the first index on ties; a NaN beats
 * everything and, once taken, is never replaced (so the first NaN wins). */
#define PT2C_ARG_BODY(BETTER)                                                            \
    PT2C_OMP(parallel for schedule(static) if (outer > 1 && (long)outer * r * inner > 32768)) \
    for (int o = 0; o < outer; o++) {                                                    \
        const float *x = in + (size_t)o * r * inner;                                     \
        if (inner == 1) {                                                                \
            float best = x[0];                                                           \
            int64_t idx = 0;                                                             \
            for (int i = 1; i < r && best == best; i++)                                  \
                if (BETTER(x[i], best) || x[i] != x[i]) {                                \
                    best = x[i];                                                         \
                    idx = i;                                                             \
                }                                                                        \
            out[o] = idx;                                                                \
        } else {                                                                         \
            float best[PT2C_RED_TILE];                                                   \
            for (int c0 = 0; c0 < inner; c0 += PT2C_RED_TILE) {                          \
                int nc = PT2C_MIN(PT2C_RED_TILE, inner - c0);                            \
                int64_t *PT2C_RESTRICT y = out + (size_t)o * inner + c0;                 \
                memcpy(best, x + c0, (size_t)nc * sizeof(float));                        \
                for (int c = 0; c < nc; c++)                                             \
                    y[c] = 0;                                                            \
                for (int j = 1; j < r; j++) {                                            \
                    const float *PT2C_RESTRICT row = x + (size_t)j * inner + c0;         \
                    for (int c = 0; c < nc; c++) {                                       \
                        float v = row[c];                                                \
                        int take = (BETTER(v, best[c]) || v != v) && best[c] == best[c]; \
                        best[c] = take ? v : best[c];                                    \
                        y[c] = take ? j : y[c];                                          \
                    }                                                                    \
                }                                                                        \
            }                                                                            \
        }                                                                                \
    }

#define PT2C_RED_GT(a, b) ((a) > (b))
#define PT2C_RED_LT(a, b) ((a) < (b))

PT2C_KERNEL void pt2c_argmax(int64_t *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                             int outer, int r, int inner)
{
    PT2C_ARG_BODY(PT2C_RED_GT)
}

PT2C_KERNEL void pt2c_argmin(int64_t *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                             int outer, int r, int inner)
{
    PT2C_ARG_BODY(PT2C_RED_LT)
}

#endif /* PT2C_REDUCE_C */
