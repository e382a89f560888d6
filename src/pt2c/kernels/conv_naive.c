/* pt2c kernel library: plain references of the convolutions, for tests.
 *
 * Loops as the definition reads, sums in double, weights unpacked.  No kernel file includes this
 * one, so it is never copied into an artifact; tests/test_kernels_naive.py compares every fast
 * convolution with these (the Winograd and few-pixel kernels against pt2c_conv2d_naive too).
 * Epilogue as in conv.c: ep->bias per output channel, ep->residual of the output's NCHW shape
 * (ep->ldr ignored), then ep->act.
 */
#ifndef PT2C_CONV_NAIVE_C
#define PT2C_CONV_NAIVE_C

#include "common.h"
#include "epilogue.h"

/* out = ep(conv2d(in, w)): in [N][C][H][W], w [OC][C/groups][KH][KW], out [N][OC][OH][OW].  The
 * contract of pt2c_conv2d, pt2c_conv2d_smallp and pt2c_conv2d_wino (which take packed weights). */
PT2C_KERNEL void pt2c_conv2d_naive(float *out, const float *in, const float *w, const pt2c_epilogue *ep, int N, int C,
                                   int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                                   int groups, int OH, int OW)
{
    const int Cg = C / groups, OCg = OC / groups;
    const ptrdiff_t OHW = (ptrdiff_t)OH * OW;
    int n, oc, oh, ow, c, kh, kw;
    ptrdiff_t p;
    for (n = 0; n < N; n++)
        for (oc = 0; oc < OC; oc++) {
            const int g = oc / OCg;
            float *o = out + ((ptrdiff_t)n * OC + oc) * OHW;
            for (oh = 0; oh < OH; oh++)
                for (ow = 0; ow < OW; ow++) {
                    double s = 0.0;
                    for (c = 0; c < Cg; c++)
                        for (kh = 0; kh < KH; kh++)
                            for (kw = 0; kw < KW; kw++) {
                                const int ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue; /* zero padding */
                                s += (double)in[(((ptrdiff_t)n * C + g * Cg + c) * H + ih) * W + iw] *
                                     (double)w[(((ptrdiff_t)oc * Cg + c) * KH + kh) * KW + kw];
                            }
                    o[oh * OW + ow] = (float)s;
                }
            if (!ep) continue;
            for (p = 0; p < OHW; p++) {
                if (ep->bias) o[p] += ep->bias[oc];
                if (ep->residual) o[p] += ep->residual[((ptrdiff_t)n * OC + oc) * OHW + p];
            }
            pt2c_epilogue_act(o, (int)OHW, ep->act, ep->lo, ep->hi);
        }
}

/* pt2c_conv2d_depthwise's contract: groups = C, OC = a multiple of C, w [OC][KH][KW]. */
PT2C_KERNEL void pt2c_conv2d_depthwise_naive(float *out, const float *in, const float *w, const pt2c_epilogue *ep,
                                             int N, int C, int H, int W, int OC, int KH, int KW, int sh, int sw,
                                             int ph, int pw, int dh, int dw, int OH, int OW)
{
    pt2c_conv2d_naive(out, in, w, ep, N, C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, C, OH, OW);
}

/* pt2c_conv2d_pw_dw's contract: out = ep2(depthwise(ep1(w1 x in), w_dw)), w1 [M][C] (unpacked),
 * w_dw [M][KH][KW].  scratch: N * M * H * W floats (the expanded tensor). */
PT2C_KERNEL void pt2c_conv2d_pw_dw_naive(float *out, const float *in, const float *w1, const pt2c_epilogue *ep1,
                                         const float *w_dw, const pt2c_epilogue *ep2, int N, int C, int H, int W,
                                         int M, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OH,
                                         int OW, float *scratch)
{
    pt2c_conv2d_naive(scratch, in, w1, ep1, N, C, H, W, M, 1, 1, 1, 1, 0, 0, 1, 1, 1, H, W);
    pt2c_conv2d_depthwise_naive(out, scratch, w_dw, ep2, N, M, H, W, M, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW);
}

#endif /* PT2C_CONV_NAIVE_C */
