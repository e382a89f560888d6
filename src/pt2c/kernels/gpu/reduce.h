/* pt2c GPU kernels: reductions of x viewed as [outer, r, inner] over r, one work-group per output. */
#ifndef PT2C_GPU_REDUCE_H
#define PT2C_GPU_REDUCE_H

#include "pt2c_gpu.h"

#define PT2C_RED_SUM 0
#define PT2C_RED_MEAN 1
#define PT2C_RED_MAX 2
#define PT2C_RED_MIN 3
#define PT2C_RED_PROD 4

/* sum / mean / max / min / prod (kind: PT2C_RED_*).  Grid: outer * inner groups of 256. */
PT2C_KERNEL pt2c_reduce(PT2C_T(float, y), PT2C_T(const float, x), int r, int inner, int kind)
{
    PT2C_LOCAL float buf[256];
    const int t = PT2C_TID(0), nt = PT2C_BDIM(0);
    const pt2c_long g = PT2C_BID(0), o = g / inner, i = g % inner;
    x += x_off + o * r * inner + i;
    float acc = kind == PT2C_RED_PROD ? 1.0f : kind == PT2C_RED_MAX ? -INFINITY : kind == PT2C_RED_MIN ? INFINITY : 0.0f;
    for (int k = t; k < r; k += nt) {
        const float v = x[(pt2c_long)k * inner];
        acc = kind == PT2C_RED_MAX ? pt2c_max_float(acc, v) : kind == PT2C_RED_MIN ? pt2c_min_float(acc, v)
            : kind == PT2C_RED_PROD ? acc * v : acc + v;
    }
    buf[t] = acc;
    PT2C_SYNC();
    for (int s = nt / 2; s > 0; s >>= 1) {
        if (t < s) {
            const float a = buf[t], b = buf[t + s];
            buf[t] = kind == PT2C_RED_MAX ? pt2c_max_float(a, b) : kind == PT2C_RED_MIN ? pt2c_min_float(a, b)
                   : kind == PT2C_RED_PROD ? a * b : a + b;
        }
        PT2C_SYNC();
    }
    if (t == 0) y[y_off + g] = kind == PT2C_RED_MEAN ? buf[0] / (float)r : buf[0];
}

/* argmax / argmin (is_max): the first index of the extreme value; a NaN counts as the extreme (torch).
 * Grid: outer * inner groups of 256. */
PT2C_KERNEL pt2c_argreduce(PT2C_T(int64_t, y), PT2C_T(const float, x), int r, int inner, int is_max)
{
    PT2C_LOCAL float val[256];
    PT2C_LOCAL int idx[256];
    const int t = PT2C_TID(0), nt = PT2C_BDIM(0);
    const pt2c_long g = PT2C_BID(0), o = g / inner, i = g % inner;
    x += x_off + o * r * inner + i;
    float best = 0.0f;
    int bi = -1;
    for (int k = t; k < r; k += nt) {
        const float v = x[(pt2c_long)k * inner];
        if (bi < 0 || (best == best && (v != v || (is_max ? v > best : v < best)))) {
            best = v;
            bi = k;
        }
    }
    val[t] = best;
    idx[t] = bi;
    PT2C_SYNC();
    for (int s = nt / 2; s > 0; s >>= 1) {
        if (t < s && idx[t + s] >= 0) {
            const float a = val[t], b = val[t + s];
            const int ia = idx[t], ib = idx[t + s];
            int take_b = ia < 0;
            if (!take_b && a == a) /* a NaN stays */
                take_b = b != b || (is_max ? b > a : b < a) || (b == a && ib < ia);
            else if (!take_b && b != b)
                take_b = ib < ia;
            if (take_b) {
                val[t] = b;
                idx[t] = ib;
            }
        }
        PT2C_SYNC();
    }
    if (t == 0) y[y_off + g] = idx[0];
}

#endif /* PT2C_GPU_REDUCE_H */
