/* pt2c kernels: grid_sampler_2d on NCHW float32 (torch.nn.functional.grid_sample).
 *
 * interp: 0 bilinear, 1 nearest, 2 bicubic; padding: 0 zeros, 1 border, 2 reflection.
 * Source coordinates follow PyTorch's GridSampler.h: unnormalize, then clip or reflect;
 * bicubic applies the padding per tap (get_value_bounded).
 */
#ifndef PT2C_GRID_C
#define PT2C_GRID_C

#include "common.h"

PT2C_KERNEL float pt2c_grid_unnormalize(float c, int size, int align)
{
    return align ? ((c + 1.0f) / 2.0f) * (float)(size - 1) : ((c + 1.0f) * (float)size - 1.0f) / 2.0f;
}

PT2C_KERNEL float pt2c_grid_clip(float c, int size)
{
    /* min(size - 1, max(c, 0)); NaN becomes 0, as in PyTorch's vectorized CPU kernel */
    if (c != c) return 0.0f;
    c = c > 0.0f ? c : 0.0f;
    return c < (float)(size - 1) ? c : (float)(size - 1);
}

PT2C_KERNEL float pt2c_grid_reflect(float c, int twice_low, int twice_high)
{
    float mn, span, extra;
    double flips;
    if (twice_low == twice_high) return 0.0f;
    mn = (float)twice_low / 2.0f;
    span = (float)(twice_high - twice_low) / 2.0f;
    c = fabsf(c - mn);
    extra = fmodf(c, span);
    flips = floor((double)(c / span));
    return fmod(flips, 2.0) == 0.0 ? extra + mn : span - extra + mn;
}

PT2C_KERNEL float pt2c_grid_pad(float c, int size, int padding, int align)
{
    if (padding == 1) {
        c = pt2c_grid_clip(c, size);
    } else if (padding == 2) {
        c = align ? pt2c_grid_reflect(c, 0, 2 * (size - 1)) : pt2c_grid_reflect(c, -1, 2 * size - 1);
        c = pt2c_grid_clip(c, size);
    }
    return c;
}

/* input value at (y, x) of one plane, 0 outside */
PT2C_KERNEL float pt2c_grid_at(const float *p, long y, long x, int H, int W)
{
    return (y >= 0 && y < H && x >= 0 && x < W) ? p[y * W + x] : 0.0f;
}

PT2C_KERNEL float pt2c_grid_cubic1(float x, float A) { return ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f; }
PT2C_KERNEL float pt2c_grid_cubic2(float x, float A) { return ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A; }

PT2C_KERNEL void pt2c_grid_cubic_coeffs(float *w, float t)
{
    const float A = -0.75f;
    w[0] = pt2c_grid_cubic2(t + 1.0f, A);
    w[1] = pt2c_grid_cubic1(t, A);
    w[2] = pt2c_grid_cubic1(1.0f - t, A);
    w[3] = pt2c_grid_cubic2(2.0f - t, A);
}

/* bicubic tap: padding applied to the tap's own coordinate */
PT2C_KERNEL float pt2c_grid_bounded(const float *p, float y, float x, int H, int W, int padding, int align)
{
    float xx = pt2c_grid_pad(x, W, padding, align), yy = pt2c_grid_pad(y, H, padding, align);
    if (!(xx == xx) || !(yy == yy) || xx < -1e9f || xx > 1e9f || yy < -1e9f || yy > 1e9f) return 0.0f;
    return pt2c_grid_at(p, (long)yy, (long)xx, H, W);
}

PT2C_KERNEL void pt2c_grid_sampler_2d(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                      const float *PT2C_RESTRICT grid, int N, int C, int H, int W,
                                      int OH, int OW, int interp, int padding, int align)
{
    long n, c, q;
    for (n = 0; n < N; n++) {
        for (q = 0; q < (long)OH * OW; q++) {
            const float *g = grid + ((size_t)n * OH * OW + (size_t)q) * 2;
            float gx = g[0], gy = g[1];
            float *o = out + (size_t)n * C * OH * OW + (size_t)q;
            const float *src = in + (size_t)n * C * H * W;
            size_t plane = (size_t)H * W, oplane = (size_t)OH * OW;
            if (interp == 2) {
                float ix = pt2c_grid_unnormalize(gx, W, align), iy = pt2c_grid_unnormalize(gy, H, align);
                float fx = floorf(ix), fy = floorf(iy), wx[4], wy[4];
                int i, j;
                pt2c_grid_cubic_coeffs(wx, ix - fx);
                pt2c_grid_cubic_coeffs(wy, iy - fy);
                for (c = 0; c < C; c++) {
                    const float *p = src + (size_t)c * plane;
                    float acc = 0.0f;
                    for (j = 0; j < 4; j++) {
                        float row = 0.0f;
                        for (i = 0; i < 4; i++)
                            row += wx[i] * pt2c_grid_bounded(p, fy - 1.0f + (float)j, fx - 1.0f + (float)i, H, W, padding, align);
                        acc += wy[j] * row;
                    }
                    o[(size_t)c * oplane] = acc;
                }
                continue;
            }
            {
                float ix = pt2c_grid_pad(pt2c_grid_unnormalize(gx, W, align), W, padding, align);
                float iy = pt2c_grid_pad(pt2c_grid_unnormalize(gy, H, align), H, padding, align);
                int ok = (ix == ix) && (iy == iy) && ix > -1e9f && ix < 1e9f && iy > -1e9f && iy < 1e9f;
                if (interp == 1) {
                    long x0 = ok ? (long)nearbyintf(ix) : -1, y0 = ok ? (long)nearbyintf(iy) : -1;
                    for (c = 0; c < C; c++) o[(size_t)c * oplane] = pt2c_grid_at(src + (size_t)c * plane, y0, x0, H, W);
                } else {
                    float fx = ok ? floorf(ix) : 0.0f, fy = ok ? floorf(iy) : 0.0f;
                    long x0 = (long)fx, y0 = (long)fy;
                    float tx = ix - fx, ty = iy - fy;
                    float w_nw = (1.0f - tx) * (1.0f - ty), w_ne = tx * (1.0f - ty);
                    float w_sw = (1.0f - tx) * ty, w_se = tx * ty;
                    /* a non-finite coordinate gives NaN weights (NaN output), a huge finite one zeros */
                    int fin = (ix - ix == 0.0f) && (iy - iy == 0.0f);
                    for (c = 0; c < C; c++) {
                        const float *p = src + (size_t)c * plane;
                        float v;
                        if (!ok) { o[(size_t)c * oplane] = fin ? 0.0f : NAN; continue; }
                        v = pt2c_grid_at(p, y0, x0, H, W) * w_nw + pt2c_grid_at(p, y0, x0 + 1, H, W) * w_ne
                          + pt2c_grid_at(p, y0 + 1, x0, H, W) * w_sw + pt2c_grid_at(p, y0 + 1, x0 + 1, H, W) * w_se;
                        o[(size_t)c * oplane] = v;
                    }
                }
            }
        }
    }
}

#endif /* PT2C_GRID_C */
