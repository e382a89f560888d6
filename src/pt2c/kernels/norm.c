/* pt2c kernels: normalisation and softmax.
 *
 * All kernels here work row by row and read each input element before the
 * matching output element is written, so out == in (in place) is allowed;
 * partial overlap is not.  Rows are independent and split across threads.
 */
#ifndef PT2C_NORM_C
#define PT2C_NORM_C

#include "common.h"
#include "reduce.c" /* pt2c_sum_f32, pt2c_sum_sqdev_f32 */

/* Parallelise only when there is enough work to pay for waking the team. */
#define PT2C_NORM_PAR_MIN 32768L

/* LayerNorm over the last `cols` elements: two passes (mean, then centred sum
 * of squares) in blocked float sums, biased variance as in PyTorch.
 * gamma and beta are optional (NULL). */
PT2C_KERNEL void pt2c_layer_norm(float *out, const float *in, const float *gamma, const float *beta,
                                 int rows, int cols, float eps)
{
    PT2C_OMP(parallel for schedule(static) if ((long)rows * cols > PT2C_NORM_PAR_MIN))
    for (int r = 0; r < rows; r++) {
        const float *x = in + (size_t)r * cols;
        float *y = out + (size_t)r * cols;
        float mean = pt2c_sum_f32(x, cols) / (float)cols;
        float var = pt2c_sum_sqdev_f32(x, cols, mean) / (float)cols;
        float rstd = 1.0f / sqrtf(var + eps);
        if (gamma && beta) {
            for (int j = 0; j < cols; j++)
                y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
        } else if (gamma) {
            for (int j = 0; j < cols; j++)
                y[j] = (x[j] - mean) * rstd * gamma[j];
        } else if (beta) {
            for (int j = 0; j < cols; j++)
                y[j] = (x[j] - mean) * rstd + beta[j];
        } else {
            for (int j = 0; j < cols; j++)
                y[j] = (x[j] - mean) * rstd;
        }
    }
}

/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma (gamma optional). */
PT2C_KERNEL void pt2c_rms_norm(float *out, const float *in, const float *gamma, int rows, int cols, float eps)
{
    PT2C_OMP(parallel for schedule(static) if ((long)rows * cols > PT2C_NORM_PAR_MIN))
    for (int r = 0; r < rows; r++) {
        const float *x = in + (size_t)r * cols;
        float *y = out + (size_t)r * cols;
        float rstd = 1.0f / sqrtf(pt2c_sum_sqdev_f32(x, cols, 0.0f) / (float)cols + eps);
        if (gamma) {
            for (int j = 0; j < cols; j++)
                y[j] = x[j] * rstd * gamma[j];
        } else {
            for (int j = 0; j < cols; j++)
                y[j] = x[j] * rstd;
        }
    }
}

/* Per-channel affine on [N, C, inner]: inference BatchNorm with mean/var
 * already folded into scale = gamma/sqrt(var+eps), shift = beta - mean*scale. */
PT2C_KERNEL void pt2c_channel_affine(float *out, const float *in, const float *scale, const float *shift,
                                     int N, int C, int inner)
{
    int planes = N * C;
    PT2C_OMP(parallel for schedule(static) if ((long)planes * inner > PT2C_NORM_PAR_MIN))
    for (int p = 0; p < planes; p++) {
        const float *x = in + (size_t)p * inner;
        float *y = out + (size_t)p * inner;
        float s = scale[p % C], b = shift[p % C];
        for (int i = 0; i < inner; i++)
            y[i] = x[i] * s + b;
    }
}

/* ---- softmax / log_softmax over the middle axis of [outer, dim, inner] ----
 * Max subtraction for stability.  A row that is entirely -inf gives NaN
 * (-inf - -inf), which is what torch.softmax/log_softmax return as well.
 * NaN anywhere in a row makes the whole row NaN, also like torch. */

#define PT2C_SM_TILE 128 /* inner columns per tile when inner > 1 */

/* Max of a contiguous row; NaN is ignored here, it resurfaces through exp. */
PT2C_KERNEL float pt2c_row_max(const float *x, int n)
{
    float acc[8];
    for (int k = 0; k < 8; k++)
        acc[k] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    for (; i < n; i++)
        acc[0] = x[i] > acc[0] ? x[i] : acc[0];
    for (int k = 1; k < 8; k++)
        acc[0] = acc[k] > acc[0] ? acc[k] : acc[0];
    return acc[0];
}

/* Shared driver: `log` selects log_softmax.  Kept as one function so the two
 * public kernels cannot drift apart. */
PT2C_KERNEL void pt2c_softmax_impl(float *out, const float *in, int outer, int dim, int inner, int log)
{
    if (dim <= 0)
        return;
    if (inner == 1) {
        PT2C_OMP(parallel for schedule(static) if ((long)outer * dim > PT2C_NORM_PAR_MIN))
        for (int o = 0; o < outer; o++) {
            const float *x = in + (size_t)o * dim;
            float *y = out + (size_t)o * dim;
            float m = pt2c_row_max(x, dim);
            if (log) {
                /* sum of exp without storing it, so in-place still works */
                float acc[8] = {0};
                int i = 0;
                for (; i + 8 <= dim; i += 8)
                    for (int k = 0; k < 8; k++)
                        acc[k] += pt2c_exp_ftz(x[i + k] - m);
                float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
                for (; i < dim; i++)
                    s += pt2c_exp_ftz(x[i] - m);
                /* (x - m) - log(s), not x - (m + log(s)): m + log(s) rounds away
                 * log(s) when |m| is large (1e4: off by ~3e-4; 3e38: log 2 lost). */
                float ls = logf(s);
                for (int j = 0; j < dim; j++)
                    y[j] = (x[j] - m) - ls;
            } else {
                for (int j = 0; j < dim; j++)
                    y[j] = pt2c_exp_ftz(x[j] - m);
                float inv = 1.0f / pt2c_sum_f32(y, dim);
                for (int j = 0; j < dim; j++)
                    y[j] *= inv;
            }
        }
        return;
    }

    /* inner > 1: the reduced axis is strided; work on a tile of columns so
     * every pass is a contiguous, vectorisable loop over the tile. */
    int ntiles = (inner + PT2C_SM_TILE - 1) / PT2C_SM_TILE;
    long ntasks = (long)outer * ntiles;
    PT2C_OMP(parallel for schedule(static) if ((long)outer * dim * inner > PT2C_NORM_PAR_MIN))
    for (long t = 0; t < ntasks; t++) {
        int o = (int)(t / ntiles);
        int c0 = (int)(t % ntiles) * PT2C_SM_TILE;
        int nc = PT2C_MIN(PT2C_SM_TILE, inner - c0);
        const float *x = in + (size_t)o * dim * inner + c0;
        float *y = out + (size_t)o * dim * inner + c0;
        float mx[PT2C_SM_TILE], sum[PT2C_SM_TILE];
        for (int c = 0; c < nc; c++) {
            mx[c] = x[c];
            sum[c] = 0.0f;
        }
        for (int j = 1; j < dim; j++) {
            const float *row = x + (size_t)j * inner;
            for (int c = 0; c < nc; c++)
                mx[c] = row[c] > mx[c] ? row[c] : mx[c];
        }
        if (log) {
            for (int j = 0; j < dim; j++) {
                const float *row = x + (size_t)j * inner;
                for (int c = 0; c < nc; c++)
                    sum[c] += pt2c_exp_ftz(row[c] - mx[c]);
            }
            for (int c = 0; c < nc; c++)
                sum[c] = logf(sum[c]); /* now log(sum exp(x - max)); see the inner == 1 path */
            for (int j = 0; j < dim; j++) {
                const float *row = x + (size_t)j * inner;
                float *yrow = y + (size_t)j * inner;
                for (int c = 0; c < nc; c++)
                    yrow[c] = (row[c] - mx[c]) - sum[c];
            }
        } else {
            for (int j = 0; j < dim; j++) {
                const float *row = x + (size_t)j * inner;
                float *yrow = y + (size_t)j * inner;
                for (int c = 0; c < nc; c++) {
                    yrow[c] = pt2c_exp_ftz(row[c] - mx[c]);
                    sum[c] += yrow[c];
                }
            }
            for (int c = 0; c < nc; c++)
                sum[c] = 1.0f / sum[c];
            for (int j = 0; j < dim; j++) {
                float *yrow = y + (size_t)j * inner;
                for (int c = 0; c < nc; c++)
                    yrow[c] *= sum[c];
            }
        }
    }
}

PT2C_KERNEL void pt2c_softmax(float *out, const float *in, int outer, int dim, int inner)
{
    pt2c_softmax_impl(out, in, outer, dim, inner, 0);
}

PT2C_KERNEL void pt2c_log_softmax(float *out, const float *in, int outer, int dim, int inner)
{
    pt2c_softmax_impl(out, in, outer, dim, inner, 1);
}

#endif /* PT2C_NORM_C */
