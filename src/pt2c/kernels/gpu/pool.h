/* pt2c GPU kernels: 2-d max / average pooling and adaptive pooling, NCHW, one output element per thread. */
#ifndef PT2C_GPU_POOL_H
#define PT2C_GPU_POOL_H

#include "pt2c_gpu.h"

/* is_max: max over the window (NaN propagates, padding ignored); else the average: the divisor is
 * `divisor` when non-zero, else the window clipped to the padded input (count_include_pad) or to the
 * input.  Grid: ceil(NC OH OW / 256). */
PT2C_KERNEL pt2c_pool2d(PT2C_T(float, y), PT2C_T(const float, x), int NC, int H, int W, int KH, int KW, int sh,
                        int sw, int ph, int pw, int dh, int dw, int OH, int OW, int is_max, int count_include_pad,
                        int divisor)
{
    const pt2c_long e = PT2C_GID0;
    if (e >= (pt2c_long)NC * OH * OW) return;
    const int ow = (int)(e % OW), oh = (int)((e / OW) % OH);
    const pt2c_long nc = e / ((pt2c_long)OW * OH);
    x += x_off + nc * H * W;
    const int h0 = oh * sh - ph, w0 = ow * sw - pw;
    float acc = is_max ? -INFINITY : 0.0f;
    int cnt = 0;
    for (int kh = 0; kh < KH; kh++) {
        const int ih = h0 + kh * dh;
        if (ih < 0 || ih >= H) continue;
        for (int kw = 0; kw < KW; kw++) {
            const int iw = w0 + kw * dw;
            if (iw < 0 || iw >= W) continue;
            const float v = x[(pt2c_long)ih * W + iw];
            acc = is_max ? ((v > acc || v != v) && acc == acc ? v : acc) : acc + v;
            cnt++;
        }
    }
    if (!is_max) {
        int div = divisor;
        if (!div && count_include_pad)
            div = (PT2C_MIN(h0 + KH, H + ph) - h0) * (PT2C_MIN(w0 + KW, W + pw) - w0);
        if (!div) div = cnt;
        acc /= (float)div;
    }
    y[y_off + e] = acc;
}

/* adaptive pooling to OH x OW: window rows [i H / OH, ceil((i + 1) H / OH)) (columns alike). */
PT2C_KERNEL pt2c_adaptive_pool2d(PT2C_T(float, y), PT2C_T(const float, x), int NC, int H, int W, int OH, int OW,
                                 int is_max)
{
    const pt2c_long e = PT2C_GID0;
    if (e >= (pt2c_long)NC * OH * OW) return;
    const int j = (int)(e % OW), i = (int)((e / OW) % OH);
    const pt2c_long nc = e / ((pt2c_long)OW * OH);
    x += x_off + nc * H * W;
    const int h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH, w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
    float acc = is_max ? -INFINITY : 0.0f;
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
            const float v = x[(pt2c_long)h * W + w];
            acc = is_max ? ((v > acc || v != v) && acc == acc ? v : acc) : acc + v;
        }
    y[y_off + e] = is_max ? acc : acc / (float)((h1 - h0) * (w1 - w0));
}

#endif /* PT2C_GPU_POOL_H */
