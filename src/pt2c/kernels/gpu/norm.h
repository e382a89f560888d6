/* pt2c GPU kernels: layer norm, RMS norm and softmax, one work-group per row (sums over the group). */
#ifndef PT2C_GPU_NORM_H
#define PT2C_GPU_NORM_H

#include "pt2c_gpu.h"

/* y = (x - mean) / sqrt(var + eps) * w + b over rows of `cols` (two passes: mean, then the squared
 * deviations).  Grid: rows groups of 256. */
PT2C_KERNEL pt2c_layer_norm(PT2C_T(float, y), PT2C_T(const float, x), PT2C_T(const float, w), PT2C_T(const float, b),
                            int cols, int has_w, int has_b, float eps)
{
    PT2C_LOCAL float buf[256];
    const int t = PT2C_TID(0), nt = PT2C_BDIM(0);
    const pt2c_long row = PT2C_BID(0);
    x += x_off + row * cols;
    y += y_off + row * cols;
    w += w_off;
    b += b_off;
    float s = 0.0f;
    for (int j = t; j < cols; j += nt) s += x[j];
    const float mean = pt2c_wg_sum(buf, s) / (float)cols;
    s = 0.0f;
    for (int j = t; j < cols; j += nt) s += (x[j] - mean) * (x[j] - mean);
    const float rstd = 1.0f / sqrtf(pt2c_wg_sum(buf, s) / (float)cols + eps);
    for (int j = t; j < cols; j += nt) {
        float v = (x[j] - mean) * rstd;
        if (has_w) v *= w[j];
        if (has_b) v += b[j];
        y[j] = v;
    }
}

/* y = x / sqrt(mean(x^2) + eps) * w.  Grid: rows groups of 256. */
PT2C_KERNEL pt2c_rms_norm(PT2C_T(float, y), PT2C_T(const float, x), PT2C_T(const float, w), int cols, int has_w,
                          float eps)
{
    PT2C_LOCAL float buf[256];
    const int t = PT2C_TID(0), nt = PT2C_BDIM(0);
    const pt2c_long row = PT2C_BID(0);
    x += x_off + row * cols;
    y += y_off + row * cols;
    w += w_off;
    float s = 0.0f;
    for (int j = t; j < cols; j += nt) s += x[j] * x[j];
    const float r = 1.0f / sqrtf(pt2c_wg_sum(buf, s) / (float)cols + eps);
    for (int j = t; j < cols; j += nt) y[j] = has_w ? x[j] * r * w[j] : x[j] * r;
}

/* softmax (or log-softmax) of x viewed as [outer, n, inner] over n.  Grid: outer * inner groups of 256. */
PT2C_KERNEL pt2c_softmax(PT2C_T(float, y), PT2C_T(const float, x), int n, int inner, int log_softmax)
{
    PT2C_LOCAL float buf[256];
    const int t = PT2C_TID(0), nt = PT2C_BDIM(0);
    const pt2c_long g = PT2C_BID(0), o = g / inner, i = g % inner;
    x += x_off + o * n * inner + i;
    y += y_off + o * n * inner + i;
    float m = -INFINITY;
    for (int j = t; j < n; j += nt) m = pt2c_max_float(m, x[(pt2c_long)j * inner]);
    m = pt2c_wg_max(buf, m);
    float s = 0.0f;
    for (int j = t; j < n; j += nt) s += expf(x[(pt2c_long)j * inner] - m);
    s = pt2c_wg_sum(buf, s);
    const float ls = logf(s), rs = 1.0f / s;
    for (int j = t; j < n; j += nt) {
        const float d = x[(pt2c_long)j * inner] - m;
        y[(pt2c_long)j * inner] = log_softmax ? d - ls : expf(d) * rs;
    }
}

/* group / instance norm's statistics: x viewed as [O, M, I] normalised per m over (O, I); mean and rstd [M]
 * out too.  Grid: M groups of 256. */
PT2C_KERNEL pt2c_moments_norm(PT2C_T(float, y), PT2C_T(float, mean), PT2C_T(float, rstd), PT2C_T(const float, x),
                              int O, int M, int I, float eps)
{
    PT2C_LOCAL float buf[256];
    const int t = PT2C_TID(0), nt = PT2C_BDIM(0), m = PT2C_BID(0);
    const pt2c_long n = (pt2c_long)O * I;
    x += x_off;
    y += y_off;
    float s = 0.0f;
    for (pt2c_long j = t; j < n; j += nt) s += x[((j / I) * M + m) * I + j % I];
    const float mu = pt2c_wg_sum(buf, s) / (float)n;
    s = 0.0f;
    for (pt2c_long j = t; j < n; j += nt) {
        const float d = x[((j / I) * M + m) * I + j % I] - mu;
        s += d * d;
    }
    const float r = 1.0f / sqrtf(pt2c_wg_sum(buf, s) / (float)n + eps);
    for (pt2c_long j = t; j < n; j += nt) {
        const pt2c_long at = ((j / I) * M + m) * I + j % I;
        y[at] = (x[at] - mu) * r;
    }
    if (t == 0) {
        mean[mean_off + m] = mu;
        rstd[rstd_off + m] = r;
    }
}

#endif /* PT2C_GPU_NORM_H */
