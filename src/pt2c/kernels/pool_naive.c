/* pt2c kernel library: plain references of 2-D pooling, for tests.
 *
 * Every tap of every window checked against the input's bounds, sums in double.  No kernel file
 * includes this one, so it is never copied into an artifact; tests/test_kernels_naive.py compares
 * pool.c's kernels with these.
 */
#ifndef PT2C_POOL_NAIVE_C
#define PT2C_POOL_NAIVE_C

#include "common.h"

/* pt2c_maxpool2d's contract: NC planes of H x W; padding is -inf (never taken); NaN wins; a window
 * with no input element gives -inf. */
PT2C_KERNEL void pt2c_maxpool2d_naive(float *out, const float *in, int NC, int H, int W, int KH, int KW, int sh,
                                      int sw, int ph, int pw, int dh, int dw, int OH, int OW)
{
    int p, oh, ow, kh, kw;
    for (p = 0; p < NC; p++)
        for (oh = 0; oh < OH; oh++)
            for (ow = 0; ow < OW; ow++) {
                float m = -INFINITY;
                for (kh = 0; kh < KH; kh++)
                    for (kw = 0; kw < KW; kw++) {
                        const int ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                        float x;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        x = in[((ptrdiff_t)p * H + ih) * W + iw];
                        if (x > m || x != x) m = x;
                    }
                out[((ptrdiff_t)p * OH + oh) * OW + ow] = m;
            }
}

/* pt2c_avgpool2d's contract (torch's): the window clipped to the padded input [-ph, H + ph) x
 * [-pw, W + pw) is the divisor when count_include_pad, else the number of input elements in it;
 * divisor_override != 0 replaces both; a window with no input element gives 0. */
PT2C_KERNEL void pt2c_avgpool2d_naive(float *out, const float *in, int NC, int H, int W, int KH, int KW, int sh,
                                      int sw, int ph, int pw, int OH, int OW, int count_include_pad,
                                      int divisor_override)
{
    int p, oh, ow, kh, kw;
    for (p = 0; p < NC; p++)
        for (oh = 0; oh < OH; oh++)
            for (ow = 0; ow < OW; ow++) {
                double s = 0.0;
                int inside = 0, padded = 0;
                for (kh = 0; kh < KH; kh++)
                    for (kw = 0; kw < KW; kw++) {
                        const int ih = oh * sh - ph + kh, iw = ow * sw - pw + kw;
                        if (ih >= -ph && ih < H + ph && iw >= -pw && iw < W + pw) padded++;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        s += in[((ptrdiff_t)p * H + ih) * W + iw];
                        inside++;
                    }
                out[((ptrdiff_t)p * OH + oh) * OW + ow] =
                    inside == 0 ? 0.0f
                                : (float)(s / (divisor_override ? divisor_override
                                                                : count_include_pad ? padded : inside));
            }
}

#endif /* PT2C_POOL_NAIVE_C */
