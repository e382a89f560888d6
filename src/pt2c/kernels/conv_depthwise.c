/* pt2c kernel library: depthwise convolution (pt2c_conv2d_depthwise), direct.  See conv.c. */
#ifndef PT2C_CONV_DEPTHWISE_C
#define PT2C_CONV_DEPTHWISE_C

#include "common.h"
#include "gemm.c"

/* ---- depthwise (groups == C, OC = mult * C; w is [OC][KH*KW], unpacked) ----
 *
 * 3x3, stride 1, padding 1 with vectors (simd.h's pt2c_vf: AVX2, AVX-512, NEON) and rows of up to PT2C_DW_ROWS_MAX_W (MobileNet's 112x112 down
 * to 7x7) goes one plane per task in vertical strips of one vector: each input row is loaded once as
 * three shifted, masked vectors and feeds the three output rows around it (pt2c_dw_plane_rows).
 * Stride 2 likewise for input planes of up to PT2C_DW_ROWS_S2_MAX_HW (AVX2: 4096; AVX-512: any), the
 * even and odd input columns of a strip taken from two loads by permutes, the strips going down
 * bands of output rows whose input rows stay in L1 (pt2c_dw_plane_rows_s2).
 *
 * Other stride-1 "same" convolutions (OH = H, OW = W: EfficientNet's 5x5, wider rows, other
 * instruction sets) on planes larger than PT2C_DW_DIRECT_MIN_HW read the input directly, one plane
 * per task: output p = oh*W + ow of the
 * plane flattened needs input p + (kh - ph)*W + (kw - pw), so every row whose vertical taps are all
 * inside is one unit-stride vector loop over the flattened rows; the few columns whose taps wrap
 * into the neighbouring row, and the top / bottom rows, are computed again by an exact edge loop.
 *
 * Larger stride-2 planes with a 3x3 kernel and padding 1 (MobileNet's downsampling), output rows of
 * at least PT2C_DW_S2_MIN_OW, are direct too: each input row is split once into its even and odd columns,
 * e[j] = x[2j] and o[j] = x[2j - 1] (o[0] = 0, the left padding), so output column ow reads
 * o[ow], e[ow] and o[ow + 1] of three rows: nine unit-stride streams, as at stride 1. The odd
 * rows serve two output rows each; four split rows per thread are the scratch.
 *
 * Everything else (strides, dilation, other padding, small planes on other instruction sets, whose
 * rows are short and mostly edge) goes eight channels at a time, in bands of output rows: the band's input rows of
 * the 8 planes are interleaved, zero-padded, into x8[r][s][8] (r, s: padded input row and
 * column; 8x8 transposes), so every output pixel is KH*KW FMAs of 8 channels whatever the stride,
 * padding and dilation; the results o8[q][8] are then transposed back into the 8 output planes.
 * A band (x8, o8, the interleaved weights) is sized to PT2C_DW_CB_FLOATS per thread. */
#ifndef PT2C_DW_DIRECT_MIN_HW
#define PT2C_DW_DIRECT_MIN_HW 1024
#endif
#ifndef PT2C_DW_CB_FLOATS
#define PT2C_DW_CB_FLOATS 16384
#endif

static int pt2c_dw_direct(int H, int W, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw)
{
    return sh == 1 && sw == 1 && dh == 1 && dw == 1 && OH == H && OW == W && 2 * ph == KH - 1 && 2 * pw == KW - 1 &&
           (long)OH * OW > PT2C_DW_DIRECT_MIN_HW;
}

#ifndef PT2C_DW_S2_MIN_OW
#define PT2C_DW_S2_MIN_OW 16
#endif

static int pt2c_dw_s2(int H, int W, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw)
{
    return KH == 3 && KW == 3 && sh == 2 && sw == 2 && ph == 1 && pw == 1 && dh == 1 && dw == 1 &&
           OH == (H + 1) / 2 && OW == (W + 1) / 2 && OW >= PT2C_DW_S2_MIN_OW;
}

/* one split row of the stride-2 path: e[0, OWV), then o[0, OWV + 1), OWV <= OW rounded up to 16
 * (the same on every code path: a multi-versioned model sizes its scratch once) */
static size_t pt2c_dw_s2_row_floats(int OW)
{
    return (size_t)2 * ((OW + 15) & ~15) + 16;
}

typedef struct {
    int WP, B; /* padded input row length, output rows per band */
} pt2c_dw_band;

static pt2c_dw_band pt2c_dw_plan(int OH, int OW, int KH, int KW, int sh, int sw, int dh, int dw)
{
    pt2c_dw_band g;
    /* in 8-float units: weights + bias + the band's (B-1)*sh + (KH-1)*dh + 1 input rows + B output rows */
    const long fixed = (long)KH * KW + 1 + ((long)(KH - 1) * dh + 1) * ((long)(OW - 1) * sw + (long)(KW - 1) * dw + 1);
    g.WP = (OW - 1) * sw + (KW - 1) * dw + 1;
    g.B = (int)PT2C_MAX(1, PT2C_MIN((PT2C_DW_CB_FLOATS / 8 - fixed) / ((long)sh * g.WP + OW), (long)OH));
    return g;
}

/* x8 + o8 + weights + bias of one band, and 64 floats for the transposed lanes past cg */
static size_t pt2c_dw_thread_floats(int OW, int KH, int KW, int sh, int dh, pt2c_dw_band g)
{
    const size_t HB = (size_t)(g.B - 1) * sh + (size_t)(KH - 1) * dh + 1;
    return (8 * (HB * g.WP + (size_t)g.B * OW + (size_t)KH * KW + 1) + 64 + 15) & ~(size_t)15;
}

PT2C_KERNEL size_t pt2c_conv2d_depthwise_scratch_floats(int H, int W, int OH, int OW, int KH, int KW, int sh, int sw,
                                                        int ph, int pw, int dh, int dw)
{
    if (OH <= 0 || OW <= 0 || pt2c_dw_direct(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw)) return 0;
    if (pt2c_dw_s2(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw)) return (size_t)PT2C_MAX_THREADS * 4 * pt2c_dw_s2_row_floats(OW);
    return (size_t)PT2C_MAX_THREADS * pt2c_dw_thread_floats(OW, KH, KW, sh, dh, pt2c_dw_plan(OH, OW, KH, KW, sh, sw, dh, dw));
}

#if defined(PT2C_SIMD_AVX512)
/* bias + sum_k w[k] * x[k] over a vector, in two FMA chains */
PT2C_GEMM_INLINE pt2c_vf pt2c_dw_sum9(const pt2c_vf *w, pt2c_vf bv, const pt2c_vf *x)
{
    pt2c_vf a0 = PT2C_VF_FMA(bv, w[0], x[0]), a1 = PT2C_VF_MUL(w[1], x[1]);
    a0 = PT2C_VF_FMA(a0, w[2], x[2]), a1 = PT2C_VF_FMA(a1, w[3], x[3]);
    a0 = PT2C_VF_FMA(a0, w[4], x[4]), a1 = PT2C_VF_FMA(a1, w[5], x[5]);
    a0 = PT2C_VF_FMA(a0, w[6], x[6]), a1 = PT2C_VF_FMA(a1, w[7], x[7]);
    return PT2C_VF_ADD(PT2C_VF_FMA(a0, w[8], x[8]), a1);
}
#endif

/* o[p] = bias + sum_k w[k] * t_k[p] for p in [0, n): the nine taps of a 3x3 depthwise conv in
 * registers */
PT2C_GEMM_INLINE void pt2c_dw_taps9(float *PT2C_RESTRICT o, const float *const *t, const float *wk, float bias,
                                    ptrdiff_t n)
{
    ptrdiff_t p = 0;
#if defined(PT2C_SIMD_AVX512)
    { /* 16 at a time (loads folded into the FMAs), the last n - p < 16 with masked loads and store
       * (cheap with AVX-512's mask registers; the other ISAs finish in scalar code) */
        pt2c_vf w[9], x[9];
        const pt2c_vf bv = PT2C_VF_SET1(bias);
        int k;
        for (k = 0; k < 9; k++) w[k] = PT2C_VF_SET1(wk[k]);
        for (; p + 16 <= n; p += 16) {
            x[0] = PT2C_VF_LOAD(t[0] + p), x[1] = PT2C_VF_LOAD(t[1] + p), x[2] = PT2C_VF_LOAD(t[2] + p);
            x[3] = PT2C_VF_LOAD(t[3] + p), x[4] = PT2C_VF_LOAD(t[4] + p), x[5] = PT2C_VF_LOAD(t[5] + p);
            x[6] = PT2C_VF_LOAD(t[6] + p), x[7] = PT2C_VF_LOAD(t[7] + p), x[8] = PT2C_VF_LOAD(t[8] + p);
            PT2C_VF_STORE(o + p, pt2c_dw_sum9(w, bv, x));
        }
        if (p < n) {
            const pt2c_vfm m = (pt2c_vfm)((1u << (n - p)) - 1);
            for (k = 0; k < 9; k++) x[k] = PT2C_VF_MASKZ_LOAD(m, t[k] + p);
            PT2C_VF_MASK_STORE(o + p, m, pt2c_dw_sum9(w, bv, x));
        }
    }
#else
#if defined(PT2C_V8)
    const pt2c_v8 b8 = PT2C_V8_SET1(bias), w0 = PT2C_V8_SET1(wk[0]), w1 = PT2C_V8_SET1(wk[1]),
                  w2 = PT2C_V8_SET1(wk[2]), w3 = PT2C_V8_SET1(wk[3]), w4 = PT2C_V8_SET1(wk[4]),
                  w5 = PT2C_V8_SET1(wk[5]), w6 = PT2C_V8_SET1(wk[6]), w7 = PT2C_V8_SET1(wk[7]),
                  w8 = PT2C_V8_SET1(wk[8]);
    for (; p + 8 <= n; p += 8) {
        pt2c_v8 acc = PT2C_V8_FMA(b8, w0, PT2C_V8_LOAD(t[0] + p));
        acc = PT2C_V8_FMA(acc, w1, PT2C_V8_LOAD(t[1] + p));
        acc = PT2C_V8_FMA(acc, w2, PT2C_V8_LOAD(t[2] + p));
        acc = PT2C_V8_FMA(acc, w3, PT2C_V8_LOAD(t[3] + p));
        acc = PT2C_V8_FMA(acc, w4, PT2C_V8_LOAD(t[4] + p));
        acc = PT2C_V8_FMA(acc, w5, PT2C_V8_LOAD(t[5] + p));
        acc = PT2C_V8_FMA(acc, w6, PT2C_V8_LOAD(t[6] + p));
        acc = PT2C_V8_FMA(acc, w7, PT2C_V8_LOAD(t[7] + p));
        acc = PT2C_V8_FMA(acc, w8, PT2C_V8_LOAD(t[8] + p));
        PT2C_V8_STORE(o + p, acc);
    }
#endif
    for (; p < n; p++)
        o[p] = bias + wk[0] * t[0][p] + wk[1] * t[1][p] + wk[2] * t[2][p] + wk[3] * t[3][p] + wk[4] * t[4][p] +
               wk[5] * t[5][p] + wk[6] * t[6][p] + wk[7] * t[7][p] + wk[8] * t[8][p];
#endif
}

/* The direct path for one plane (see above): op = bias + taps, before residual / activation. */
static void pt2c_dw_plane_same(float *PT2C_RESTRICT op, const float *PT2C_RESTRICT ip, const float *PT2C_RESTRICT wk,
                               float bias, int H, int W, int KH, int KW)
{
    const int ph = (KH - 1) / 2, pw = (KW - 1) / 2;
    /* rows whose vertical taps are all inside: [r0, r1); columns whose horizontal ones are: [pw, W - pw) */
    const int r0 = PT2C_MIN(ph, H), r1 = PT2C_MAX(r0, H - ph);
    const ptrdiff_t p0 = (ptrdiff_t)r0 * W + pw, p1 = (ptrdiff_t)r1 * W - pw;
    ptrdiff_t p;
    int oh, ow, kh, kw;
    if (p1 > p0 && KH == 3 && KW == 3) {
        const float *t[9];
        for (kh = 0; kh < 3; kh++)
            for (kw = 0; kw < 3; kw++) t[kh * 3 + kw] = ip + p0 + (ptrdiff_t)(kh - 1) * W + (kw - 1);
        pt2c_dw_taps9(op + p0, t, wk, bias, p1 - p0);
    } else if (p1 > p0) {
        for (p = p0; p < p1; p++) op[p] = bias;
        for (kh = 0; kh < KH; kh++)
            for (kw = 0; kw < KW; kw++) {
                const float *PT2C_RESTRICT t = ip + (ptrdiff_t)(kh - ph) * W + (kw - pw);
                const float wv = wk[kh * KW + kw];
                for (p = p0; p < p1; p++) op[p] += wv * t[p];
            }
    }
    /* rows with a tap above / below the plane: the taps that are inside, column range by column range */
    for (oh = 0; oh < H; oh++) {
        float *PT2C_RESTRICT orow;
        if (oh == r0 && r1 > r0) oh = r1; /* skip the inside rows */
        if (oh >= H) break;
        orow = op + (ptrdiff_t)oh * W;
        for (ow = 0; ow < W; ow++) orow[ow] = bias;
        for (kh = 0; kh < KH; kh++) {
            const int ih = oh + kh - ph;
            if (ih < 0 || ih >= H) continue;
            for (kw = 0; kw < KW; kw++) {
                const float *PT2C_RESTRICT xrow = ip + (ptrdiff_t)ih * W;
                const float wv = wk[kh * KW + kw];
                const int lo = PT2C_MAX(0, pw - kw), hi = PT2C_MIN(W, W + pw - kw); /* 0 <= ow + kw - pw < W */
                for (ow = lo; ow < hi; ow++) orow[ow] += wv * xrow[ow + kw - pw];
            }
        }
    }
    /* the columns whose taps wrap into the neighbouring row, in the inside rows */
    if (KH == 3 && KW == 3 && W >= 2) {
        for (oh = r0; oh < r1; oh++) {
            const float *x0 = ip + (ptrdiff_t)(oh - 1) * W, *x1 = x0 + W, *x2 = x1 + W;
            op[(ptrdiff_t)oh * W] = bias + wk[1] * x0[0] + wk[2] * x0[1] + wk[4] * x1[0] + wk[5] * x1[1] + wk[7] * x2[0] +
                                    wk[8] * x2[1];
            op[(ptrdiff_t)oh * W + W - 1] = bias + wk[0] * x0[W - 2] + wk[1] * x0[W - 1] + wk[3] * x1[W - 2] +
                                            wk[4] * x1[W - 1] + wk[6] * x2[W - 2] + wk[7] * x2[W - 1];
        }
        return;
    }
    for (oh = r0; oh < r1; oh++)
        for (ow = 0; ow < W; ow++) {
            float acc = bias;
            if (ow == pw) ow = PT2C_MAX(pw, W - pw); /* skip the inside columns */
            if (ow >= W) break;
            for (kh = 0; kh < KH; kh++)
                for (kw = 0; kw < KW; kw++) {
                    const int iw = ow + kw - pw;
                    if (iw >= 0 && iw < W) acc += wk[kh * KW + kw] * ip[(ptrdiff_t)(oh + kh - ph) * W + iw];
                }
            op[(ptrdiff_t)oh * W + ow] = acc;
        }
}

/* 3x3, pad 1, on simd.h's native vectors (see above): in strips of V output columns; at stride 1, tap kw of the strip at
 * column c0 reads the input row at c0 + kw - 1 with a mask of the lanes whose output and input
 * columns are inside the row, so the padding costs no edge loops and nothing outside the plane is
 * read. */
#if defined(PT2C_VF)
#define PT2C_DW_ROW_V PT2C_VF_LANES
#endif
#if defined(PT2C_DW_ROW_V)
#ifndef PT2C_DW_ROWS_MAX_W
#define PT2C_DW_ROWS_MAX_W 128 /* wider rows: the flattened plane (224 x 224: 11-21 % faster) */
#endif
#ifndef PT2C_DW_ROWS_S2_MAX_HW
#if defined(PT2C_SIMD_AVX512)
#define PT2C_DW_ROWS_S2_MAX_HW (1L << 30) /* any plane, in bands (112 x 112: 1.25x the split rows) */
#else
#define PT2C_DW_ROWS_S2_MAX_HW 4096L /* larger input planes: split rows (AVX2, 112 x 112: 0.95x in bands) */
#endif
#endif
#ifndef PT2C_DW_ROWS_S2_BAND_FLOATS
#define PT2C_DW_ROWS_S2_BAND_FLOATS 4096 /* input rows of a band of output rows, which all strips go down */
#endif
static int pt2c_dw_rows(int H, int W, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw)
{
    return KH == 3 && KW == 3 && sh == 1 && sw == 1 && ph == 1 && pw == 1 && dh == 1 && dw == 1 && OH == H &&
           OW == W && W <= PT2C_DW_ROWS_MAX_W;
}

static int pt2c_dw_rows_s2(int H, int W, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh,
                           int dw)
{
    return KH == 3 && KW == 3 && sh == 2 && sw == 2 && ph == 1 && pw == 1 && dh == 1 && dw == 1 &&
           OH == (H + 1) / 2 && OW == (W + 1) / 2 && (long)H * W <= PT2C_DW_ROWS_S2_MAX_HW;
}

/* the nine weights of a plane, broadcast */
PT2C_GEMM_INLINE void pt2c_dw_rv_taps(pt2c_vf *w, const float *wk)
{
    int k;
    for (k = 0; k < 9; k++) w[k] = PT2C_VF_SET1(wk[k]);
}

/* relu / clamp as in the GEMM epilogue (max returns its 2nd operand on NaN: x > 0 ? x : 0) */
PT2C_GEMM_INLINE pt2c_vf pt2c_dw_rv_act(pt2c_vf r, int act, float lo, float hi)
{
    if (act == PT2C_ACT_RELU) return PT2C_VF_MAX(r, PT2C_VF_SET1(0.0f));
    if (act == PT2C_ACT_CLAMP) return PT2C_VF_MIN(PT2C_VF_SET1(hi), PT2C_VF_MAX(PT2C_VF_SET1(lo), r));
    return r;
}

/* op = act(bias + taps) (act: none, relu or clamp, as in the GEMM epilogue).  A strip of V columns
 * at a time, down the plane: each input row is loaded once (three shifted vectors) and feeds the
 * output rows above, at and below it, whose sums are carried in registers; a row is stored once
 * the row below it is in. */
static void pt2c_dw_plane_rows(float *PT2C_RESTRICT op, const float *PT2C_RESTRICT ip, const float *PT2C_RESTRICT wk,
                               float bias, int H, int W, int act, float lo, float hi)
{
    const int V = PT2C_DW_ROW_V;
    const pt2c_vf bv = PT2C_VF_SET1(bias);
    pt2c_vf w[9];
    int c0, ih;
    pt2c_dw_rv_taps(w, wk);
    for (c0 = 0; c0 < W; c0 += V) {
        /* lane j: output column c0 + j, input column c0 + j + k - 1 for tap k */
        const pt2c_vfm m0 = pt2c_vf_range(1 - c0, W - c0), m1 = pt2c_vf_range(-c0, W - c0),
                         m2 = pt2c_vf_range(-c0, W - 1 - c0);
        const float *x = ip + c0 - 1;
        float *o = op + c0;
        pt2c_vf up = bv, mid = bv; /* the sums of output rows ih - 1 and ih */
        for (ih = 0; ih < H; ih++, x += W) {
            pt2c_vf down;
            const pt2c_vf x0 = PT2C_VF_MASKZ_LOAD(m0, x), x1 = PT2C_VF_MASKZ_LOAD(m1, x + 1),
                          x2 = PT2C_VF_MASKZ_LOAD(m2, x + 2);
            down = PT2C_VF_FMA(bv, w[0], x0), down = PT2C_VF_FMA(down, w[1], x1), down = PT2C_VF_FMA(down, w[2], x2);
            mid = PT2C_VF_FMA(mid, w[3], x0), mid = PT2C_VF_FMA(mid, w[4], x1), mid = PT2C_VF_FMA(mid, w[5], x2);
            if (ih > 0) {
                up = PT2C_VF_FMA(up, w[6], x0), up = PT2C_VF_FMA(up, w[7], x1), up = PT2C_VF_FMA(up, w[8], x2);
                PT2C_VF_MASK_STORE(o + (ptrdiff_t)(ih - 1) * W, m1, pt2c_dw_rv_act(up, act, lo, hi));
            }
            up = mid, mid = down;
        }
        PT2C_VF_MASK_STORE(o + (ptrdiff_t)(H - 1) * W, m1, pt2c_dw_rv_act(up, act, lo, hi));
    }
}

/* Stride 2, pad 1: output column c0 + j reads input columns 2(c0 + j) - 1 + kw.  Per input row and strip
 * the masked vectors a = x[2c0 - 1 ..] and b = x[2c0 - 1 + V ..] hold them: om (kw = 0) is their even
 * elements, e (kw = 1) the odd ones, and op (kw = 2) om one lane on, its last lane loaded alone. */
typedef struct {
    pt2c_vfm a, b, c;
} pt2c_dw_s2m;

static pt2c_dw_s2m pt2c_dw_s2_masks(int c0, int W)
{
    const int V = PT2C_DW_ROW_V, base = 2 * c0 - 1; /* input column of a's lane 0 */
    pt2c_dw_s2m m;
    m.a = pt2c_vf_range(-base, W - base), m.b = pt2c_vf_range(-base - V, W - base - V);
    m.c = pt2c_vf_range(-base - 2 * V, PT2C_MIN(1, W - base - 2 * V));
    return m;
}

PT2C_GEMM_INLINE void pt2c_dw_s2_cols(const float *x, const pt2c_dw_s2m *m, pt2c_vf *om, pt2c_vf *e,
                                      pt2c_vf *op)
{
    const pt2c_vf a = PT2C_VF_MASKZ_LOAD(m->a, x), b = PT2C_VF_MASKZ_LOAD(m->b, x + PT2C_DW_ROW_V);
    const pt2c_vf c = PT2C_VF_MASKZ_LOAD(m->c, x + 2 * PT2C_DW_ROW_V);
    *om = PT2C_VF_EVENS(a, b);
    *e = PT2C_VF_ODDS(a, b);
    *op = PT2C_VF_NEXT1(*om, c); /* om one lane on, c's lane 0 (x[2V]) into the last lane */
}

/* op = act(bias + taps) of a 3x3, stride 2, pad 1 plane (OH = (H + 1) / 2, OW = (W + 1) / 2): strips of
 * V output columns down a band of output rows, then the next band; an odd input row feeds the output
 * rows above and below it */
static void pt2c_dw_plane_rows_s2(float *PT2C_RESTRICT op, const float *PT2C_RESTRICT ip,
                                  const float *PT2C_RESTRICT wk, float bias, int H, int W, int OW, int act, float lo,
                                  float hi)
{
    const int V = PT2C_DW_ROW_V, OH = (H + 1) / 2, band = PT2C_MAX(1, PT2C_DW_ROWS_S2_BAND_FLOATS / (2 * W));
    const int nstrip = (OW + V - 1) / V, ntask = (OH + band - 1) / band * nstrip;
    const pt2c_vf bv = PT2C_VF_SET1(bias);
    pt2c_vf w[9];
    int task, oh;
    pt2c_dw_rv_taps(w, wk);
    for (task = 0; task < ntask; task++) { /* band by band, strip by strip */
        const int oh0 = task / nstrip * band, c0 = task % nstrip * V;
        const pt2c_dw_s2m m = pt2c_dw_s2_masks(c0, W);
        const pt2c_vfm mo = pt2c_vf_range(0, OW - c0);
        const int oh1 = PT2C_MIN(OH, oh0 + band);
        const float *x = ip + (ptrdiff_t)2 * oh0 * W + 2 * c0 - 1;
        float *o = op + (ptrdiff_t)oh0 * OW + c0;
        pt2c_vf xm, xe, xp;
        pt2c_vf acc = bv; /* output row oh; its input row 2 oh - 1 was added with the row above */
        if (oh0 > 0) { /* (the band's first: input row 2 oh0 - 1 from here) */
            pt2c_dw_s2_cols(x - W, &m, &xm, &xe, &xp);
            acc = PT2C_VF_FMA(acc, w[0], xm), acc = PT2C_VF_FMA(acc, w[1], xe);
            acc = PT2C_VF_FMA(acc, w[2], xp);
        }
        for (oh = oh0; oh < oh1; oh++, x += 2 * W, o += OW) {
            pt2c_vf next = bv;
            pt2c_dw_s2_cols(x, &m, &xm, &xe, &xp);
            acc = PT2C_VF_FMA(acc, w[3], xm), acc = PT2C_VF_FMA(acc, w[4], xe), acc = PT2C_VF_FMA(acc, w[5], xp);
            if (2 * oh + 1 < H) {
                pt2c_dw_s2_cols(x + W, &m, &xm, &xe, &xp);
                acc = PT2C_VF_FMA(acc, w[6], xm), acc = PT2C_VF_FMA(acc, w[7], xe), acc = PT2C_VF_FMA(acc, w[8], xp);
                next = PT2C_VF_FMA(next, w[0], xm), next = PT2C_VF_FMA(next, w[1], xe);
                next = PT2C_VF_FMA(next, w[2], xp);
            }
            PT2C_VF_MASK_STORE(o, mo, pt2c_dw_rv_act(acc, act, lo, hi));
            acc = next;
        }
    }
}
#endif

/* The stride-2 path's split of one input row x[0, W) (see above): e[j] = x[2j] for j < (W + 1) / 2,
 * o[j + 1] = x[2j + 1] for j < W / 2, o[0] = 0, and zeros up to e[OWV) and o[OWV + 1). OWV is a
 * multiple of PT2C_DW_S2_V; the vector paths read the row's end with masked loads. */
#if defined(PT2C_VF)
#define PT2C_DW_S2_V PT2C_VF_LANES
#else
#define PT2C_DW_S2_V 8
#endif
static void pt2c_dw_split(float *PT2C_RESTRICT e, float *PT2C_RESTRICT o, const float *PT2C_RESTRICT x, int W,
                          int OWV)
{
    int j;
    o[0] = 0.0f;
#if defined(PT2C_VF)
    for (j = 0; j < OWV; j += PT2C_VF_LANES) {
        const int rem = W - 2 * j; /* input columns left from 2j */
        pt2c_vf a, b;
        if (rem >= 2 * PT2C_VF_LANES) {
            a = PT2C_VF_LOAD(x + 2 * j), b = PT2C_VF_LOAD(x + 2 * j + PT2C_VF_LANES);
        } else { /* lanes i < rem of x + 2j, zero past the row */
            a = PT2C_VF_MASKZ_LOAD(pt2c_vf_range(0, rem), x + 2 * j);
            b = PT2C_VF_MASKZ_LOAD(pt2c_vf_range(0, rem - PT2C_VF_LANES), x + 2 * j + PT2C_VF_LANES);
        }
        PT2C_VF_STORE(e + j, PT2C_VF_EVENS(a, b));
        PT2C_VF_STORE(o + 1 + j, PT2C_VF_ODDS(a, b));
    }
#else
    for (j = 0; j < OWV; j++) {
        e[j] = 2 * j < W ? x[2 * j] : 0.0f;
        o[j + 1] = 2 * j + 1 < W ? x[2 * j + 1] : 0.0f;
    }
#endif
}

/* The stride-2 path for one plane: op = bias + taps, before residual / activation. rows: four
 * split rows (pt2c_dw_s2_row_floats each). */
static void pt2c_dw_plane_s2(float *PT2C_RESTRICT op, const float *PT2C_RESTRICT ip, const float *PT2C_RESTRICT wk,
                             float bias, int H, int W, int OH, int OW, float *PT2C_RESTRICT rows)
{
    const int OWV = (OW + PT2C_DW_S2_V - 1) / PT2C_DW_S2_V * PT2C_DW_S2_V;
    const size_t RB = pt2c_dw_s2_row_floats(OW);
    float *const zero = rows + 3 * RB, *even = rows + 2 * RB;
    const float *prev = zero; /* input row 2*oh - 1: the top padding for oh = 0 */
    size_t k;
    int oh;
    for (k = 0; k < RB; k++) zero[k] = 0.0f;
    for (oh = 0; oh < OH; oh++) {
        const float *t[9];
        float *next = zero;
        int r;
        pt2c_dw_split(even, even + OWV, ip + (ptrdiff_t)2 * oh * W, W, OWV);
        if (2 * oh + 1 < H) { /* else the bottom padding */
            next = prev == rows ? rows + RB : rows;
            pt2c_dw_split(next, next + OWV, ip + ((ptrdiff_t)2 * oh + 1) * W, W, OWV);
        }
        for (r = 0; r < 3; r++) {
            const float *sr = r == 0 ? prev : r == 1 ? even : next;
            t[3 * r] = sr + OWV, t[3 * r + 1] = sr, t[3 * r + 2] = sr + OWV + 1;
        }
        /* whole vectors run into the next row, which is written after; the last row stops at OW */
        pt2c_dw_taps9(op + (ptrdiff_t)oh * OW, t, wk, bias, oh + 1 < OH ? OWV : OW);
        prev = next;
    }
}

PT2C_GEMM_INLINE void pt2c_dw_zero(float *PT2C_RESTRICT d, int n)
{
    int j = 0;
#if defined(PT2C_V8)
    for (; j + 8 <= n; j += 8) PT2C_V8_STORE(d + j, PT2C_V8_ZERO());
#endif
    for (; j < n; j++) d[j] = 0.0f;
}


/* Output channels [c0, c0 + cg) (cg <= 8) of one image; in and out are the image's, channel
 * oc reads input channel oc / mult. */
static void pt2c_dw_cblock(float *out, const float *in, const float *w, const pt2c_epilogue *ep, int c0, int cg,
                           int mult, int H, int W, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OH,
                           int OW, pt2c_dw_band g, float *PT2C_RESTRICT ws)
{
    const int WP = g.WP, KK = KH * KW;
    const ptrdiff_t HW = (ptrdiff_t)H * W, OHW = (ptrdiff_t)OH * OW;
    float *PT2C_RESTRICT w8 = ws + 64; /* after 64 floats where the lanes past cg are transposed to */
    float *PT2C_RESTRICT b8 = w8 + 8 * KK;
    float *PT2C_RESTRICT o8 = b8 + 8;
    float *PT2C_RESTRICT x8 = o8 + (ptrdiff_t)8 * g.B * OW;
    /* the padded input columns that are inside: [slo, shi) */
    const int slo = PT2C_MIN(pw, WP), shi = PT2C_MAX(slo, PT2C_MIN(WP, W + pw));
    const float *src[8];
    int c, r, s, t, oh, ow, oh0;
    for (c = 0; c < 8; c++) {
        for (t = 0; t < KK; t++) w8[t * 8 + c] = c < cg ? w[(ptrdiff_t)(c0 + c) * KK + t] : 0.0f;
        b8[c] = c < cg && ep && ep->bias ? ep->bias[c0 + c] : 0.0f;
        /* lanes past cg repeat the last channel (finite values; their weights are zero) */
        src[c] = in + (ptrdiff_t)((c0 + PT2C_MIN(c, cg - 1)) / mult) * HW;
    }
    for (oh0 = 0; oh0 < OH; oh0 += g.B) {
        const int nb = PT2C_MIN(g.B, OH - oh0), hb = (nb - 1) * sh + (KH - 1) * dh + 1;
        const ptrdiff_t q0 = (ptrdiff_t)oh0 * OW, nq = (ptrdiff_t)nb * OW;
        ptrdiff_t q;
        /* interleave: x8[r][s][c] = x_c[oh0*sh + r - ph][s - pw], zero outside */
        for (r = 0; r < hb; r++) {
            const int ih = oh0 * sh + r - ph;
            float *PT2C_RESTRICT d = x8 + (ptrdiff_t)r * WP * 8;
            const ptrdiff_t row = (ptrdiff_t)ih * W - pw; /* + s: >= 0 for s >= slo */
            if (ih < 0 || ih >= H) {
                pt2c_dw_zero(d, WP * 8);
                continue;
            }
            pt2c_dw_zero(d, slo * 8);
            pt2c_dw_zero(d + shi * 8, (WP - shi) * 8);
            s = slo;
#if defined(PT2C_SIMD_X86)
            for (; s + 8 <= shi; s += 8) {
                const float *sp[8];
                float *dp[8];
                for (c = 0; c < 8; c++) sp[c] = src[c] + (row + s), dp[c] = d + (s + c) * 8;
                pt2c_tr8x8(dp, sp);
            }
#endif
            for (; s < shi; s++)
                for (c = 0; c < 8; c++) d[s * 8 + c] = src[c][row + s];
        }
        for (oh = 0; oh < nb; oh++) {
            const float *xr = x8 + (ptrdiff_t)oh * sh * WP * 8;
            float *PT2C_RESTRICT orow = o8 + (ptrdiff_t)oh * OW * 8;
#if defined(PT2C_V8)
            if (KH == 3 && KW == 3) {
                const pt2c_v8 w0 = PT2C_V8_LOAD(w8), w1 = PT2C_V8_LOAD(w8 + 8), w2 = PT2C_V8_LOAD(w8 + 16),
                              w3 = PT2C_V8_LOAD(w8 + 24), w4 = PT2C_V8_LOAD(w8 + 32), w5 = PT2C_V8_LOAD(w8 + 40),
                              w6 = PT2C_V8_LOAD(w8 + 48), w7 = PT2C_V8_LOAD(w8 + 56), wv8 = PT2C_V8_LOAD(w8 + 64);
                const pt2c_v8 bv = PT2C_V8_LOAD(b8);
                const ptrdiff_t k1 = (ptrdiff_t)dw * 8, k2 = 2 * k1, step = (ptrdiff_t)sw * 8;
                const float *x0 = xr, *x1 = xr + (ptrdiff_t)dh * WP * 8, *x2 = xr + (ptrdiff_t)2 * dh * WP * 8;
                for (ow = 0; ow < OW; ow++, x0 += step, x1 += step, x2 += step) {
                    /* two chains: nine dependent FMAs would leave the FMA pipes waiting */
                    pt2c_v8 a0 = PT2C_V8_FMA(bv, w0, PT2C_V8_LOAD(x0));
                    pt2c_v8 a1 = PT2C_V8_MUL(w1, PT2C_V8_LOAD(x0 + k1));
                    a0 = PT2C_V8_FMA(a0, w2, PT2C_V8_LOAD(x0 + k2));
                    a1 = PT2C_V8_FMA(a1, w3, PT2C_V8_LOAD(x1));
                    a0 = PT2C_V8_FMA(a0, w4, PT2C_V8_LOAD(x1 + k1));
                    a1 = PT2C_V8_FMA(a1, w5, PT2C_V8_LOAD(x1 + k2));
                    a0 = PT2C_V8_FMA(a0, w6, PT2C_V8_LOAD(x2));
                    a1 = PT2C_V8_FMA(a1, w7, PT2C_V8_LOAD(x2 + k1));
                    a0 = PT2C_V8_FMA(a0, wv8, PT2C_V8_LOAD(x2 + k2));
                    PT2C_V8_STORE(orow + ow * 8, PT2C_V8_ADD(a0, a1));
                }
                continue;
            }
#endif
            for (ow = 0; ow < OW; ow++) {
                float acc[8];
                const float *x = xr + (ptrdiff_t)ow * sw * 8;
                int kh, kw;
                for (c = 0; c < 8; c++) acc[c] = b8[c];
                for (kh = 0; kh < KH; kh++)
                    for (kw = 0; kw < KW; kw++) {
                        const float *xt = x + ((ptrdiff_t)kh * dh * WP + (ptrdiff_t)kw * dw) * 8;
                        const float *wt = w8 + (kh * KW + kw) * 8;
                        for (c = 0; c < 8; c++) acc[c] += wt[c] * xt[c];
                    }
                for (c = 0; c < 8; c++) orow[ow * 8 + c] = acc[c];
            }
        }
        if (ep && !ep->residual) pt2c_epilogue_act(o8, (int)(8 * nq), ep->act, ep->lo, ep->hi);
        /* de-interleave: out_c[q0 + q] = o8[q][c] */
        q = 0;
#if defined(PT2C_SIMD_X86)
        for (; q + 8 <= nq; q += 8) {
            const float *sp[8];
            float *dp[8];
            for (c = 0; c < 8; c++) sp[c] = o8 + (q + c) * 8, dp[c] = c < cg ? out + (c0 + c) * OHW + q0 + q : ws;
            pt2c_tr8x8(dp, sp);
        }
#endif
        for (c = 0; c < cg; c++) {
            float *PT2C_RESTRICT op = out + (ptrdiff_t)(c0 + c) * OHW + q0;
            ptrdiff_t p;
            for (p = q; p < nq; p++) op[p] = o8[p * 8 + c];
            if (ep && ep->residual) {
                const float *PT2C_RESTRICT res = ep->residual + (ptrdiff_t)(c0 + c) * OHW + q0;
                for (p = 0; p < nq; p++) op[p] += res[p];
                pt2c_epilogue_act(op, (int)nq, ep->act, ep->lo, ep->hi);
            }
        }
    }
}

PT2C_KERNEL void pt2c_conv2d_depthwise(float *out, const float *in, const float *w, const pt2c_epilogue *ep, int N,
                                       int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw,
                                       int dh, int dw, int OH, int OW, float *scratch)
{
    const int mult = OC / C, ng = (OC + 7) / 8;
    const ptrdiff_t OHW = (ptrdiff_t)OH * OW;
    const pt2c_dw_band g = pt2c_dw_plan(OH, OW, KH, KW, sh, sw, dh, dw);
    const size_t per_thread = pt2c_dw_thread_floats(OW, KH, KW, sh, dh, g);
    int task;
#if defined(_OPENMP)
    /* scratch is sized for PT2C_MAX_THREADS, so never run more threads than that (one inside a
     * parallel region: pt2c_conv2d_pw_dw gives each of its threads a share) */
    int nthr = omp_in_parallel() ? 1 : PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif
#if defined(PT2C_DW_ROW_V)
    const int rows = pt2c_dw_rows(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw) ? 1
                     : pt2c_dw_rows_s2(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw) ? 2 : 0;
#else
    const int rows = 0;
#endif
    if (OHW <= 0 || mult <= 0) return;
    if (rows || pt2c_dw_direct(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw) ||
        pt2c_dw_s2(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw)) {
        const int s2 = sh == 2;
        PT2C_OMP(parallel for schedule(static) num_threads(nthr) if ((long)N * OC * OHW * KH * KW > 65536L))
        for (task = 0; task < N * OC; task++) {
            const int oc = task % OC;
            float *op = out + (ptrdiff_t)task * OHW;
            const float *ip = in + ((ptrdiff_t)(task / OC) * C + oc / mult) * H * W;
            const float bias = ep && ep->bias ? ep->bias[oc] : 0.0f;
            ptrdiff_t p;
#if defined(PT2C_DW_ROW_V)
            if (rows) { /* with a relu / clamp unless there is a residual to add first */
                const int fuse = ep && !ep->residual && (ep->act == PT2C_ACT_RELU || ep->act == PT2C_ACT_CLAMP);
                if (rows == 1)
                    pt2c_dw_plane_rows(op, ip, w + (ptrdiff_t)oc * 9, bias, H, W, fuse ? ep->act : PT2C_ACT_NONE,
                                       ep ? ep->lo : 0.0f, ep ? ep->hi : 0.0f);
                else
                    pt2c_dw_plane_rows_s2(op, ip, w + (ptrdiff_t)oc * 9, bias, H, W, OW,
                                          fuse ? ep->act : PT2C_ACT_NONE, ep ? ep->lo : 0.0f, ep ? ep->hi : 0.0f);
                if (fuse) continue;
            } else
#endif
            if (s2)
                pt2c_dw_plane_s2(op, ip, w + (ptrdiff_t)oc * 9, bias, H, W, OH, OW,
                                 scratch + (size_t)PT2C_THREAD_ID() * 4 * pt2c_dw_s2_row_floats(OW));
            else
                pt2c_dw_plane_same(op, ip, w + (ptrdiff_t)oc * KH * KW, bias, H, W, KH, KW);
            if (ep && ep->residual) {
                const float *PT2C_RESTRICT res = ep->residual + (ptrdiff_t)task * OHW;
                for (p = 0; p < OHW; p++) op[p] += res[p];
            }
            if (ep) pt2c_epilogue_act(op, (int)OHW, ep->act, ep->lo, ep->hi);
        }
        return;
    }
    PT2C_OMP(parallel for schedule(static) num_threads(nthr) if ((long)N * OC * OHW * KH * KW > 65536L))
    for (task = 0; task < N * ng; task++) {
        const int n = task / ng, c0 = task % ng * 8;
        pt2c_epilogue e;
        if (ep) {
            e = *ep;
            if (e.residual) e.residual += (ptrdiff_t)n * OC * OHW;
        }
        pt2c_dw_cblock(out + (ptrdiff_t)n * OC * OHW, in + (ptrdiff_t)n * C * H * W, w, ep ? &e : NULL, c0,
                       PT2C_MIN(8, OC - c0), mult, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, g,
                       scratch + (size_t)PT2C_THREAD_ID() * per_thread);
    }
}

#endif /* PT2C_CONV_DEPTHWISE_C */
