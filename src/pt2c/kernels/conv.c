/* pt2c kernel library: NCHW float32 2-D convolution.
 *
 * pt2c_conv2d lowers each (image, group) to one GEMM
 *     out_g[OCg, OH*OW] = W_g[OCg, Cg*KH*KW] x col[Cg*KH*KW, OH*OW]
 * with W_g pre-packed as the GEMM's A operand (layout.py: pack_conv_weight).
 * 1x1 / stride 1 / no padding reads the input directly as B.  Otherwise the
 * columns are gathered (im2col) straight into the GEMM's packed-B layout,
 * in tiles of at most PT2C_CONV_COL_FLOATS floats, so scratch stays bounded
 * and the GEMM needs no scratch of its own.
 *
 * pt2c_conv2d_depthwise is a direct loop (one output plane per task),
 * vectorised over the output row.
 *
 * Epilogue: ep->bias is per output channel, ep->residual is a tensor of the
 * output's NCHW shape (ep->ldr is ignored), then ep->act.
 */
#ifndef PT2C_CONV_C
#define PT2C_CONV_C

#include "common.h"
#include "gemm.c"

/* Upper bound on one im2col tile (2 MiB): big enough to amortise the GEMM
 * call, small enough to sit in L2/L3 next to the weights. */
#ifndef PT2C_CONV_COL_FLOATS
#define PT2C_CONV_COL_FLOATS (1 << 19)
#endif

static int pt2c_conv_is_pointwise(int KH, int KW, int sh, int sw, int ph, int pw)
{
    return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
}

/* Output pixels per im2col tile: a multiple of NR, at least one panel. */
static int pt2c_conv_tile_cols(int Kg, int OHW)
{
    long t = PT2C_CONV_COL_FLOATS / PT2C_MAX(Kg, 1) / PT2C_GEMM_NR * PT2C_GEMM_NR;
    long full = ((long)OHW + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR * PT2C_GEMM_NR;
    return (int)PT2C_MAX(PT2C_GEMM_NR, PT2C_MIN(t, full));
}

PT2C_KERNEL size_t pt2c_conv2d_scratch_floats(int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph,
                                              int pw, int dh, int dw, int groups, int OH, int OW)
{
    int Cg = C / groups, OCg = OC / groups, Kg = Cg * KH * KW, OHW = OH * OW;
    (void)H, (void)W, (void)dh, (void)dw;
    if (OHW <= 0 || OCg <= 0) return 0;
    if (pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw)) return pt2c_sgemm_scratch_floats_ex(OCg, OHW, Cg, 1, 0);
    return (size_t)Kg * (size_t)pt2c_conv_tile_cols(Kg, OHW);
}

/* im2col of one NR-wide panel: output pixels [p0, p0+np) of one image/group
 * into dst[k*NR + jj] (k = c*KH*KW + kh*KW + kw), zero where the window falls
 * into the padding or past the last pixel.  The panel is first split into
 * runs of pixels sharing an output row, so each (k, run) is one strided copy. */
static void pt2c_im2col_panel(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int p0, int np, int Cg, int H,
                              int W, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OW)
{
    int run_oh[PT2C_GEMM_NR], run_ow[PT2C_GEMM_NR], run_j[PT2C_GEMM_NR], run_len[PT2C_GEMM_NR];
    int nrun = 0, j = 0, c, kh, kw, r, t;
    while (j < np) {
        int p = p0 + j, oh = p / OW, ow = p % OW, len = PT2C_MIN(np - j, OW - ow);
        run_oh[nrun] = oh, run_ow[nrun] = ow, run_j[nrun] = j, run_len[nrun] = len;
        nrun++;
        j += len;
    }
    for (c = 0; c < Cg; c++) {
        const float *plane = in + (ptrdiff_t)c * H * W;
        for (kh = 0; kh < KH; kh++) {
            for (kw = 0; kw < KW; kw++, dst += PT2C_GEMM_NR) {
                for (t = 0; t < PT2C_GEMM_NR; t++) dst[t] = 0.0f;
                for (r = 0; r < nrun; r++) {
                    int ih = run_oh[r] * sh - ph + kh * dh;
                    int iw0 = run_ow[r] * sw - pw + kw * dw; /* input column of the run's first pixel */
                    int lo, hi;
                    const float *src;
                    float *d;
                    if (ih < 0 || ih >= H) continue;
                    /* pixels t of the run with 0 <= iw0 + t*sw < W */
                    lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
                    hi = iw0 > W - 1 ? 0 : PT2C_MIN(run_len[r], (W - 1 - iw0) / sw + 1);
                    src = plane + (ptrdiff_t)ih * W;
                    d = dst + run_j[r];
                    if (sw == 1)
                        for (t = lo; t < hi; t++) d[t] = src[iw0 + t];
                    else
                        for (t = lo; t < hi; t++) d[t] = src[iw0 + t * sw];
                }
            }
        }
    }
}

PT2C_KERNEL void pt2c_conv2d(float *out, const float *in, const float *w_packed, const pt2c_epilogue *ep, int N, int C,
                             int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                             int groups, int OH, int OW, float *scratch)
{
    const int Cg = C / groups, OCg = OC / groups, Kg = Cg * KH * KW, OHW = OH * OW;
    const ptrdiff_t wg_size = (ptrdiff_t)(OCg + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * Kg;
    const int pointwise = pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw);
    const int T = pt2c_conv_tile_cols(Kg, OHW);
    int n, g, t0;
    if (OHW <= 0 || OCg <= 0) return;
    for (n = 0; n < N; n++) {
        for (g = 0; g < groups; g++) {
            const float *in_g = in + ((ptrdiff_t)n * C + (ptrdiff_t)g * Cg) * H * W;
            const float *w_g = w_packed + g * wg_size;
            const ptrdiff_t out_off = ((ptrdiff_t)n * OC + (ptrdiff_t)g * OCg) * OHW;
            for (t0 = 0; t0 < OHW; t0 += pointwise ? OHW : T) {
                int nt = pointwise ? OHW : PT2C_MIN(T, OHW - t0);
                pt2c_epilogue e, *et = NULL;
                if (ep) {
                    e = *ep;
                    e.bias = ep->bias ? ep->bias + g * OCg : NULL;
                    e.bias_per_row = 1;
                    e.residual = ep->residual ? ep->residual + out_off + t0 : NULL;
                    e.ldr = OHW;
                    et = &e;
                }
                if (pointwise) {
                    pt2c_sgemm(out + out_off, OHW, w_g, 0, 0, 1, in_g, H * W, 1, 0, OCg, OHW, Kg, et, scratch);
                } else {
                    int npan = (nt + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR, p;
                    PT2C_OMP(parallel for schedule(dynamic, 4) if ((long)npan * Kg > 65536L))
                    for (p = 0; p < npan; p++)
                        pt2c_im2col_panel(scratch + (ptrdiff_t)p * PT2C_GEMM_NR * Kg, in_g, t0 + p * PT2C_GEMM_NR,
                                          PT2C_MIN(PT2C_GEMM_NR, nt - p * PT2C_GEMM_NR), Cg, H, W, KH, KW, sh, sw,
                                          ph, pw, dh, dw, OW);
                    pt2c_sgemm(out + out_off + t0, OHW, w_g, 0, 0, 1, scratch, 0, 0, 1, OCg, nt, Kg, et, NULL);
                }
            }
        }
    }
}

/* Depthwise (groups == C, OC = C * multiplier): w is [OC][KH*KW], unpacked. */
PT2C_KERNEL void pt2c_conv2d_depthwise(float *out, const float *in, const float *w, const pt2c_epilogue *ep, int N,
                                       int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw,
                                       int dh, int dw, int OH, int OW)
{
    const int mult = OC / C, OHW = OH * OW;
    int plane;
    if (OHW <= 0 || mult <= 0) return;
    PT2C_OMP(parallel for schedule(static) if ((long)N * OC * OHW * KH * KW > 65536L))
    for (plane = 0; plane < N * OC; plane++) {
        const int n = plane / OC, oc = plane % OC;
        const float *ip = in + ((ptrdiff_t)n * C + oc / mult) * H * W;
        const float *wk = w + (ptrdiff_t)oc * KH * KW;
        float *op = out + (ptrdiff_t)plane * OHW;
        const float bias = ep && ep->bias ? ep->bias[oc] : 0.0f;
        int oh, ow, kh, kw;
        for (oh = 0; oh < OH; oh++) {
            float *PT2C_RESTRICT orow = op + (ptrdiff_t)oh * OW;
            for (ow = 0; ow < OW; ow++) orow[ow] = bias;
            for (kh = 0; kh < KH; kh++) {
                const int ih = oh * sh - ph + kh * dh;
                const float *PT2C_RESTRICT irow;
                if (ih < 0 || ih >= H) continue;
                irow = ip + (ptrdiff_t)ih * W;
                for (kw = 0; kw < KW; kw++) {
                    const float wv = wk[kh * KW + kw];
                    const int iw0 = kw * dw - pw; /* input column of output column 0 */
                    /* output columns whose tap lands inside the row: 0 <= ow*sw + iw0 < W */
                    const int lo = PT2C_MIN(OW, iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw);
                    const int hi = PT2C_MIN(OW, iw0 > W - 1 ? 0 : (W - 1 - iw0) / sw + 1);
                    if (sw == 1) /* contiguous: vectorises */
                        for (ow = lo; ow < hi; ow++) orow[ow] += wv * irow[ow + iw0];
                    else
                        for (ow = lo; ow < hi; ow++) orow[ow] += wv * irow[ow * sw + iw0];
                }
            }
            if (ep && ep->residual) {
                const float *r = ep->residual + (ptrdiff_t)plane * OHW + (ptrdiff_t)oh * OW;
                for (ow = 0; ow < OW; ow++) orow[ow] += r[ow];
            }
            if (ep) pt2c_epilogue_act(orow, OW, ep->act, ep->lo, ep->hi);
        }
    }
}

#endif /* PT2C_CONV_C */
