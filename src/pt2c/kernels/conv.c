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

/* im2col of one PW-wide panel (PW <= NR): output pixels [p0, p0+np) of one image/group
 * into dst[k*PW + jj] (k = c*KH*KW + kh*KW + kw), zero where the window falls
 * into the padding or past the last pixel.  The panel is first split into
 * runs of pixels sharing an output row, so each (k, run) is one strided copy. */
static void pt2c_im2col_panel_w(float *PT2C_RESTRICT dst, int PW, const float *PT2C_RESTRICT in, int p0, int np,
                                int Cg, int H, int W, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                                int OW)
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
            for (kw = 0; kw < KW; kw++, dst += PW) {
                for (t = 0; t < PW; t++) dst[t] = 0.0f;
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

/* The NR-wide panels of pt2c_conv2d's B operand. */
static void pt2c_im2col_panel(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int p0, int np, int Cg, int H,
                              int W, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OW)
{
    pt2c_im2col_panel_w(dst, PT2C_GEMM_NR, in, p0, np, Cg, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OW);
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

/* ---- few output pixels (7x7 maps deep in a CNN): pixels as the GEMM's rows ----
 *
 * pt2c_conv2d puts the pixels on the GEMM's NR = 16 side: 49 pixels fill 4
 * panels (64 columns, 77% useful) and every weight is streamed for that.  Here
 * the product is transposed, outT[P, OC] = col^T[P, K] x W^T[K, OC]: the
 * pixels are cut into MR = 6 row panels (49 -> 54, 91% useful), the output
 * channels fill whole 16-wide panels, and W^T is pre-packed as the B operand
 * (layout.py: pack_conv_weight_t).  outT lands in scratch and is transposed
 * into NCHW with the epilogue.  Ungrouped convolutions only. */
PT2C_KERNEL size_t pt2c_conv2d_smallp_scratch_floats(int C, int OC, int KH, int KW, int sh, int sw, int ph, int pw,
                                                     int OH, int OW)
{
    size_t P = (size_t)OH * OW, K = (size_t)C * KH * KW;
    size_t outT = (P * (size_t)OC + 15) & ~(size_t)15;
    if (P == 0 || OC <= 0) return 0;
    if (pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw)) /* A = the input itself, packed by the GEMM */
        return outT + pt2c_sgemm_scratch_floats_ex((int)P, OC, (int)K, 0, 1);
    return outT + (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * K;
}

PT2C_KERNEL void pt2c_conv2d_smallp(float *out, const float *in, const float *wt_packed, const pt2c_epilogue *ep, int N,
                                    int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh,
                                    int dw, int OH, int OW, float *scratch)
{
    const int P = OH * OW, K = C * KH * KW;
    const int pointwise = pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw);
    float *outT = scratch, *col = scratch + (((size_t)P * OC + 15) & ~(size_t)15);
    int n;
    if (P <= 0 || OC <= 0) return;
    for (n = 0; n < N; n++) {
        const float *in_n = in + (ptrdiff_t)n * C * H * W;
        float *out_n = out + (ptrdiff_t)n * OC * P;
        const float *res_n = ep && ep->residual ? ep->residual + (ptrdiff_t)n * OC * P : NULL;
        int oc;
        if (pointwise) {
            /* A(p, c) = in[c*P + p]: the GEMM packs it */
            pt2c_sgemm(outT, OC, in_n, 1, P, 0, wt_packed, 0, 0, 1, P, OC, K, NULL, col);
        } else {
            int npan = (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR, p;
            PT2C_OMP(parallel for schedule(dynamic, 1) if ((long)npan * K > 65536L))
            for (p = 0; p < npan; p++)
                pt2c_im2col_panel_w(col + (ptrdiff_t)p * PT2C_GEMM_MR * K, PT2C_GEMM_MR, in_n, p * PT2C_GEMM_MR,
                                    PT2C_MIN(PT2C_GEMM_MR, P - p * PT2C_GEMM_MR), C, H, W, KH, KW, sh, sw, ph, pw,
                                    dh, dw, OW);
            pt2c_sgemm(outT, OC, col, 0, 0, 1, wt_packed, 0, 0, 1, P, OC, K, NULL, NULL);
        }
        /* NCHW, with bias, residual and activation (same order as the GEMM epilogue) */
        PT2C_OMP(parallel for schedule(static) if ((long)OC * P > 65536L))
        for (oc = 0; oc < OC; oc++) {
            float *o = out_n + (ptrdiff_t)oc * P;
            const float b = ep && ep->bias ? ep->bias[oc] : 0.0f;
            int p;
            for (p = 0; p < P; p++) o[p] = outT[(ptrdiff_t)p * OC + oc] + b;
            if (res_n)
                for (p = 0; p < P; p++) o[p] += res_n[(ptrdiff_t)oc * P + p];
            if (ep) pt2c_epilogue_act(o, P, ep->act, ep->lo, ep->hi);
        }
    }
}

/* ---- Winograd F(4x4, 3x3): 3x3, stride 1, dilation 1, ungrouped convolutions ----
 *
 * Lavin & Gray's minimal filtering: each 4x4 block of output pixels (a tile)
 * is A^T [ U (.) (B^T d B) ] A, with d the 6x6 input patch and U = G g G^T the
 * 6x6 transformed 3x3 filter (computed at compile time, layout.py:
 * pack_winograd_weight).  Summed over input channels, the elementwise product
 * becomes 36 independent GEMMs, one per position xi of the 6x6 transform:
 *     M_xi[OC, tiles] = U_xi[OC, C] x V_xi[C, tiles]
 * 36 x C x OC multiply-adds per 16 output pixels instead of 9 x 16 x C x OC:
 * 4x fewer.  Tiles are processed in blocks of nt (a multiple of 16) so the
 * scratch (V and M for one block) stays bounded; V_xi is written straight in
 * the GEMM's packed-B layout (16 tiles per panel) and U_xi is pre-packed as A.
 * The transforms work on 16 tiles at once (fixed-length loops that compilers
 * vectorise).  Rounding differs from the direct sum (the transforms scale by
 * up to 8 and 1/24): about 1e-6 relative error on typical activations. */
#define PT2C_WINO_TILES 16 /* tiles per transform group = the GEMM's NR */
#ifndef PT2C_WINO_FLOATS
#define PT2C_WINO_FLOATS (1 << 19) /* scratch budget of one tile block, floats */
#endif

/* Tiles per block: a multiple of 16, balanced so the last block is not a sliver. */
static int pt2c_wino_block_tiles(int C, int OC, int P)
{
    long per = 36L * (C + OC);
    long nmax = PT2C_MAX(16L, PT2C_WINO_FLOATS / per / 16 * 16);
    long ppad = ((long)P + 15) / 16 * 16;
    long nb = (ppad + nmax - 1) / nmax;
    return (int)((((long)P + nb - 1) / nb + 15) / 16 * 16);
}

PT2C_KERNEL size_t pt2c_conv2d_wino_scratch_floats(int C, int OC, int OH, int OW)
{
    int P = ((OH + 3) / 4) * ((OW + 3) / 4);
    if (P <= 0 || C <= 0 || OC <= 0) return 0;
    return (size_t)36 * (size_t)(C + OC) * (size_t)pt2c_wino_block_tiles(C, OC, P);
}

/* B^T x for 6 rows of 16 lanes: r = B^T d, d and r [6][16] with row stride ds / rs. */
PT2C_GEMM_INLINE void pt2c_wino_bt(float *PT2C_RESTRICT r, int rs, const float *PT2C_RESTRICT d, int ds)
{
    int t;
    for (t = 0; t < 16; t++) {
        float d0 = d[t], d1 = d[ds + t], d2 = d[2 * ds + t], d3 = d[3 * ds + t], d4 = d[4 * ds + t],
              d5 = d[5 * ds + t];
        r[t] = 4.0f * d0 - 5.0f * d2 + d4;
        r[rs + t] = -4.0f * (d1 + d2) + d3 + d4;
        r[2 * rs + t] = 4.0f * (d1 - d2) - d3 + d4;
        r[3 * rs + t] = 2.0f * (d3 - d1) - d2 + d4;
        r[4 * rs + t] = 2.0f * (d1 - d3) - d2 + d4;
        r[5 * rs + t] = 4.0f * d1 - 5.0f * d3 + d5;
    }
}

/* A^T m for 6 rows of 16 lanes -> 4 rows. */
PT2C_GEMM_INLINE void pt2c_wino_at(float *PT2C_RESTRICT y, int ys, const float *PT2C_RESTRICT m, int ms)
{
    int t;
    for (t = 0; t < 16; t++) {
        float m0 = m[t], m1 = m[ms + t], m2 = m[2 * ms + t], m3 = m[3 * ms + t], m4 = m[4 * ms + t],
              m5 = m[5 * ms + t];
        float a = m1 + m2, b = m1 - m2, c = m3 + m4, e = m3 - m4;
        y[t] = m0 + a + c;
        y[ys + t] = b + 2.0f * e;
        y[2 * ys + t] = a + 4.0f * c;
        y[3 * ys + t] = b + 8.0f * e + m5;
    }
}

/* Input transform of 16 tiles [p0, p0+16) (tiles past P are zero) of one channel plane
 * into v[xi * vs + t] (vs: distance between the V_xi matrices). */
static void pt2c_wino_input(float *PT2C_RESTRICT v, ptrdiff_t vs, const float *PT2C_RESTRICT plane, int p0, int P,
                            int TW, int H, int W, int ph, int pw)
{
    float d[36 * 16], tmp[36 * 16];
    int t, i, j;
    for (t = 0; t < 16; t++) {
        int p = p0 + t, y0, x0;
        if (p >= P) {
            for (i = 0; i < 36; i++) d[i * 16 + t] = 0.0f;
            continue;
        }
        y0 = (p / TW) * 4 - ph, x0 = (p % TW) * 4 - pw;
        if (y0 >= 0 && x0 >= 0 && y0 + 6 <= H && x0 + 6 <= W) {
            for (i = 0; i < 6; i++) {
                const float *row = plane + (ptrdiff_t)(y0 + i) * W + x0;
                for (j = 0; j < 6; j++) d[(i * 6 + j) * 16 + t] = row[j];
            }
        } else {
            for (i = 0; i < 6; i++) {
                int ih = y0 + i;
                for (j = 0; j < 6; j++) {
                    int iw = x0 + j;
                    d[(i * 6 + j) * 16 + t] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? plane[(ptrdiff_t)ih * W + iw] : 0.0f;
                }
            }
        }
    }
    for (j = 0; j < 6; j++) pt2c_wino_bt(tmp + j * 16, 6 * 16, d + j * 16, 6 * 16); /* columns: B^T d */
    for (i = 0; i < 6; i++) pt2c_wino_bt(d + i * 6 * 16, 16, tmp + i * 6 * 16, 16);  /* rows: (B^T d) B */
    for (i = 0; i < 36; i++) memcpy(v + i * vs, d + i * 16, 16 * sizeof(float));
}

/* Output transform of 16 tiles [p0, p0+16) of output channel oc: m[xi * ms + t] -> out plane,
 * with bias, residual and activation. */
static void pt2c_wino_output(float *PT2C_RESTRICT plane, const float *PT2C_RESTRICT m, ptrdiff_t ms, int p0, int P,
                             int TW, int OH, int OW, const pt2c_epilogue *ep, int oc, const float *res_plane)
{
    float mm[36 * 16], tmp[24 * 16], y[16 * 16];
    const float bias = ep && ep->bias ? ep->bias[oc] : 0.0f;
    int t, i, j, nt = PT2C_MIN(16, P - p0);
    for (i = 0; i < 36; i++) {
        memcpy(mm + i * 16, m + i * ms, (size_t)nt * sizeof(float));
        for (t = nt; t < 16; t++) mm[i * 16 + t] = 0.0f; /* past the last tile: the GEMM wrote nothing there */
    }
    for (j = 0; j < 6; j++) pt2c_wino_at(tmp + j * 16, 6 * 16, mm + j * 16, 6 * 16); /* columns: A^T m */
    for (i = 0; i < 4; i++) pt2c_wino_at(y + i * 4 * 16, 16, tmp + i * 6 * 16, 16);  /* rows: (A^T m) A */
    /* y[(r*4+q)*16 + t]: pixel (r, q) of tile t.  Bias, residual, then the activation on all of y at
     * once (lanes past the last tile are zeros, computed and dropped), then the store. */
    for (i = 0; i < 256; i++) y[i] += bias;
    if (res_plane) {
        for (t = 0; t < nt; t++) {
            int p = p0 + t, oh0 = (p / TW) * 4, ow0 = (p % TW) * 4;
            for (i = 0; i < 4 && oh0 + i < OH; i++)
                for (j = 0; j < 4 && ow0 + j < OW; j++) y[(i * 4 + j) * 16 + t] += res_plane[(ptrdiff_t)(oh0 + i) * OW + ow0 + j];
        }
    }
    if (ep) pt2c_epilogue_act(y, 256, ep->act, ep->lo, ep->hi);
    for (t = 0; t < nt; t++) {
        int p = p0 + t, oh0 = (p / TW) * 4, ow0 = (p % TW) * 4;
        for (i = 0; i < 4 && oh0 + i < OH; i++)
            for (j = 0; j < 4 && ow0 + j < OW; j++) plane[(ptrdiff_t)(oh0 + i) * OW + ow0 + j] = y[(i * 4 + j) * 16 + t];
    }
}

/* out = act(conv3x3(in, w) + bias + residual), stride 1, dilation 1, groups 1, any padding.
 * u: the weights transformed and packed by layout.py pack_winograd_weight (36 packed-A
 * matrices of OC x C).  scratch: pt2c_conv2d_wino_scratch_floats(C, OC, OH, OW) floats. */
PT2C_KERNEL void pt2c_conv2d_wino(float *out, const float *in, const float *u, const pt2c_epilogue *ep, int N, int C,
                                  int H, int W, int OC, int ph, int pw, int OH, int OW, float *scratch)
{
    const int TH = (OH + 3) / 4, TW = (OW + 3) / 4, P = TH * TW;
    const int nt = pt2c_wino_block_tiles(C, OC, P);
    const ptrdiff_t usz = (ptrdiff_t)(OC + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * C;
    const ptrdiff_t vsz = (ptrdiff_t)C * nt, msz = (ptrdiff_t)OC * nt;
    float *V = scratch, *Mb = scratch + 36 * vsz;
    int n, b0;
    if (P <= 0 || OC <= 0) return;
    for (n = 0; n < N; n++) {
        const float *in_n = in + (ptrdiff_t)n * C * H * W;
        float *out_n = out + (ptrdiff_t)n * OC * OH * OW;
        const float *res_n = ep && ep->residual ? ep->residual + (ptrdiff_t)n * OC * OH * OW : NULL;
        for (b0 = 0; b0 < P; b0 += nt) {
            const int nb = PT2C_MIN(nt, P - b0), npan = (nb + 15) / 16;
            int task, xi;
            /* V_xi (packed B, panels of 16 tiles): element (c, t) at (t/16)*16*C + c*16 + t%16 */
            PT2C_OMP(parallel for schedule(dynamic, 4) if ((long)C * npan * 16 * 36 > 65536L))
            for (task = 0; task < C * npan; task++) {
                int c = task % C, pan = task / C;
                pt2c_wino_input(V + (ptrdiff_t)pan * 16 * C + (ptrdiff_t)c * 16, vsz, in_n + (ptrdiff_t)c * H * W,
                                b0 + pan * 16, P, TW, H, W, ph, pw);
            }
            /* the 36 GEMMs, one per thread at a time (each single-threaded: too small to split) */
            PT2C_OMP(parallel for schedule(dynamic, 1) if ((long)OC * C * nb * 36 > 1048576L))
            for (xi = 0; xi < 36; xi++)
                pt2c_sgemm(Mb + xi * msz, nt, u + xi * usz, 0, 0, 1, V + xi * vsz, 0, 0, 1, OC, nb, C, NULL, NULL);
            PT2C_OMP(parallel for schedule(dynamic, 4) if ((long)OC * npan * 16 * 36 > 65536L))
            for (task = 0; task < OC * npan; task++) {
                int oc = task % OC, pan = task / OC;
                pt2c_wino_output(out_n + (ptrdiff_t)oc * OH * OW, Mb + (ptrdiff_t)oc * nt + pan * 16, msz,
                                 b0 + pan * 16, P, TW, OH, OW, ep, oc,
                                 res_n ? res_n + (ptrdiff_t)oc * OH * OW : NULL);
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
        /* 3x3, dilation 1: output columns whose 3 taps all land inside the row */
        const int fast = KH == 3 && KW == 3 && dh == 1 && dw == 1;
        const int lo3 = PT2C_MIN(OW, (pw + sw - 1) / sw);
        const int hi3 = W - 3 + pw < 0 ? lo3 : PT2C_MAX(lo3, PT2C_MIN(OW, (W - 3 + pw) / sw + 1));
        for (oh = 0; oh < OH; oh++) {
            float *PT2C_RESTRICT orow = op + (ptrdiff_t)oh * OW;
            const int ih0 = oh * sh - ph;
            if (fast && ih0 >= 0 && ih0 + 2 < H && hi3 > lo3) {
                /* interior row: all nine taps summed in registers per output (in the order of the
                 * tap-by-tap loop below), edge columns by the general loop */
                const float *r0 = ip + (ptrdiff_t)ih0 * W, *r1 = r0 + W, *r2 = r1 + W;
                const float w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3], w4 = wk[4], w5 = wk[5], w6 = wk[6],
                            w7 = wk[7], w8 = wk[8];
                if (sw == 1) {
                    for (ow = lo3; ow < hi3; ow++) {
                        const int x = ow - pw;
                        orow[ow] = bias + w0 * r0[x] + w1 * r0[x + 1] + w2 * r0[x + 2] + w3 * r1[x] + w4 * r1[x + 1] +
                                   w5 * r1[x + 2] + w6 * r2[x] + w7 * r2[x + 1] + w8 * r2[x + 2];
                    }
                } else {
                    for (ow = lo3; ow < hi3; ow++) {
                        const int x = ow * sw - pw;
                        orow[ow] = bias + w0 * r0[x] + w1 * r0[x + 1] + w2 * r0[x + 2] + w3 * r1[x] + w4 * r1[x + 1] +
                                   w5 * r1[x + 2] + w6 * r2[x] + w7 * r2[x + 1] + w8 * r2[x + 2];
                    }
                }
                for (ow = 0; ow < OW; ow++) {
                    float acc = bias;
                    if (ow == lo3) ow = hi3; /* skip the interior */
                    if (ow >= OW) break;
                    for (kh = 0; kh < 3; kh++)
                        for (kw = 0; kw < 3; kw++) {
                            const int iw = ow * sw - pw + kw;
                            if (iw >= 0 && iw < W) acc += wk[kh * 3 + kw] * ip[(ptrdiff_t)(ih0 + kh) * W + iw];
                        }
                    orow[ow] = acc;
                }
            } else {
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
