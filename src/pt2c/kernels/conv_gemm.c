/* pt2c kernel library: convolution as one GEMM per (image, group), and with few output pixels as
 * the transposed product (pt2c_conv2d_smallp).  Weights pre-packed (layout.py).  See conv.c.
 */
#ifndef PT2C_CONV_GEMM_C
#define PT2C_CONV_GEMM_C

#include "common.h"
#include "gemm.c"
#include "gemm_bfn.c"

/* Padding.  The kernels take the padding before the input (ph rows above, pw columns left); the padding
 * after it follows from the output size, so an asymmetric padding (a pad folded into the conv,
 * passes/pads.py) is OH or OW larger or smaller than the symmetric formula gives.  The zero-padded input
 * a conv reads along one dim: n + 2p, or more where the output asks for more padding after than before. */
static int pt2c_conv_extent(int n, int p, int o, int s, int k, int d)
{
    return PT2C_MAX(n + 2 * p, (o - 1) * s + d * (k - 1) + 1);
}

/* 1x1, stride 1, no padding: the input is the GEMM's operand itself */
static int pt2c_conv_is_pointwise(int KH, int KW, int sh, int sw, int ph, int pw, int H, int W, int OH, int OW)
{
    return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W;
}

/* d[0..16) = src[0], src[sw], .., src[15 * sw] as vector copies, for stride 1 (and 2 on x86:
 * the evens of [0, 16), then the odds of [15, 31), so no read past src[30]); returns 0, having
 * done nothing, for other strides. */
PT2C_GEMM_INLINE int pt2c_im2col_copy16(float *PT2C_RESTRICT d, const float *PT2C_RESTRICT src, int sw)
{
#if defined(PT2C_V8)
    if (sw == 1) {
        PT2C_V8_STORE(d, PT2C_V8_LOAD(src));
        PT2C_V8_STORE(d + 8, PT2C_V8_LOAD(src + 8));
        return 1;
    }
#endif
#if defined(PT2C_SIMD_X86)
    if (sw == 2) {
        _mm256_storeu_ps(d, pt2c_evens8(src));
        _mm256_storeu_ps(d + 8, pt2c_odds8(src + 15));
        return 1;
    }
#endif
    (void)d, (void)src, (void)sw;
    return 0;
}

/* im2col of one PW-wide panel (PW <= NR): rows k0 .. k0+kc-1 (k = c*KH*KW + kh*KW + kw) for
 * output pixels [p0, p0+np) of one image/group into dst[(k-k0)*PW + jj], zero where the window
 * falls into the padding or past the last pixel.  The panel is first split into runs of pixels
 * sharing an output row, so each (k, run) is one strided copy. */
static void pt2c_im2col_panel_w(float *PT2C_RESTRICT dst, int PW, const float *PT2C_RESTRICT in, int p0, int np,
                                int k0, int kc, int H, int W, int KH, int KW, int sh, int sw, int ph, int pw, int dh,
                                int dw, int OW)
{
    int run_oh[PT2C_GEMM_NR], run_ow[PT2C_GEMM_NR], run_j[PT2C_GEMM_NR], run_len[PT2C_GEMM_NR];
    int nrun = 0, j = 0, c = k0 / (KH * KW), kh = k0 % (KH * KW) / KW, kw = k0 % KW, k, r, t;
    const float *plane = in + (ptrdiff_t)c * H * W;
    while (j < np) {
        int p = p0 + j, oh = p / OW, ow = p % OW, len = PT2C_MIN(np - j, OW - ow);
        run_oh[nrun] = oh, run_ow[nrun] = ow, run_j[nrun] = j, run_len[nrun] = len;
        nrun++;
        j += len;
    }
    for (k = 0; k < kc; k++, dst += PW) {
        if (k > 0 && ++kw == KW) { /* the next tap */
            kw = 0;
            if (++kh == KH) kh = 0, plane += (ptrdiff_t)H * W;
        }
        /* the common case: one run of a whole 16-wide panel, every tap inside the plane */
        if (nrun == 1 && PW == 16 && run_len[0] == 16 && (sw == 1 || sw == 2)) {
            const int ih = run_oh[0] * sh - ph + kh * dh, iw0 = run_ow[0] * sw - pw + kw * dw;
            if (ih >= 0 && ih < H && iw0 >= 0 && iw0 + 15 * sw < W &&
                pt2c_im2col_copy16(dst, plane + (ptrdiff_t)ih * W + iw0, sw))
                continue;
        }
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

/* The same for an NR-wide panel from a zero-padded copy of the input (planes of Hp x Wp, so every
 * tap is inside; readable PT2C_CONV_PAD_SLACK floats past the last plane): each run of pixels is
 * copied as one whole 16-wide vector copy, the next run overwriting the excess.  dst must have NR
 * floats of room past its last row. */
#define PT2C_CONV_PAD_SLACK 32

static void pt2c_im2col_panel_padded(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int p0, int np, int k0,
                                     int kc, int Hp, int Wp, int KH, int KW, int sh, int sw, int dh, int dw, int OW)
{
    ptrdiff_t run_off[PT2C_GEMM_NR];
    int run_j[PT2C_GEMM_NR], run_len[PT2C_GEMM_NR];
    int nrun = 0, j = 0, kh = k0 % (KH * KW) / KW, kw = k0 % KW, k, r, t;
    const float *plane = in + (ptrdiff_t)(k0 / (KH * KW)) * Hp * Wp;
    while (j < np) {
        int p = p0 + j, oh = p / OW, ow = p % OW, len = PT2C_MIN(np - j, OW - ow);
        run_off[nrun] = (ptrdiff_t)oh * sh * Wp + (ptrdiff_t)ow * sw, run_j[nrun] = j, run_len[nrun] = len;
        nrun++;
        j += len;
    }
    for (k = 0; k < kc; k++, dst += PT2C_GEMM_NR) {
        const float *tap;
        if (k > 0 && ++kw == KW) { /* the next tap */
            kw = 0;
            if (++kh == KH) kh = 0, plane += (ptrdiff_t)Hp * Wp;
        }
        tap = plane + (ptrdiff_t)kh * dh * Wp + kw * dw;
        for (r = 0; r < nrun; r++) {
            const float *src = tap + run_off[r];
            float *d = dst + run_j[r];
            if (pt2c_im2col_copy16(d, src, sw)) continue;
            for (t = 0; t < run_len[r]; t++) d[t] = src[(ptrdiff_t)t * sw];
        }
        for (t = np; t < PT2C_GEMM_NR; t++) dst[t] = 0.0f; /* the last panel's columns past the last pixel */
    }
}

/* Zero-padded copy of C planes (H x W -> Hp x Wp, the input at row ph, column pw). */
static void pt2c_conv_pad_planes(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int C, int H, int W, int ph,
                                 int pw, int Hp, int Wp)
{
    int c;
    PT2C_OMP(parallel for schedule(static) if ((long)C * Hp * Wp > 65536L))
    for (c = 0; c < C; c++) {
        float *d = dst + (ptrdiff_t)c * Hp * Wp;
        const float *s = in + (ptrdiff_t)c * H * W;
        int h;
        memset(d, 0, (size_t)ph * Wp * sizeof(float));
        for (h = 0; h < H; h++) {
            float *row = d + (ptrdiff_t)(ph + h) * Wp;
            memset(row, 0, (size_t)pw * sizeof(float));
            memcpy(row + pw, s + (ptrdiff_t)h * W, (size_t)W * sizeof(float));
            memset(row + pw + W, 0, (size_t)(Wp - pw - W) * sizeof(float));
        }
        memset(d + (ptrdiff_t)(ph + H) * Wp, 0, (size_t)(Hp - ph - H) * Wp * sizeof(float));
    }
}

/* The same, then PT2C_CONV_PAD_SLACK zeros. */
static void pt2c_conv_pad(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int C, int H, int W, int ph, int pw,
                          int Hp, int Wp)
{
    int t;
    pt2c_conv_pad_planes(dst, in, C, H, W, ph, pw, Hp, Wp);
    for (t = 0; t < PT2C_CONV_PAD_SLACK; t++) dst[(ptrdiff_t)C * Hp * Wp + t] = 0.0f;
}

/* The B operand of pt2c_conv2d's GEMM, one NR-wide micro-panel at a time (pt2c_gemm_bfn): from
 * the input itself (no padding), or from its zero-padded copy (H, W, then the padded sizes). */
typedef struct {
    const float *in;
    int padded, p0, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OW;
} pt2c_im2col_ctx;

static void pt2c_im2col_bfn(const void *ctx, float *dst, int k0, int kc, int j0, int nr)
{
    const pt2c_im2col_ctx *x = (const pt2c_im2col_ctx *)ctx;
    if (x->padded)
        pt2c_im2col_panel_padded(dst, x->in, x->p0 + j0, nr, k0, kc, x->H, x->W, x->KH, x->KW, x->sh, x->sw, x->dh,
                                 x->dw, x->OW);
    else
        pt2c_im2col_panel_w(dst, PT2C_GEMM_NR, x->in, x->p0 + j0, nr, k0, kc, x->H, x->W, x->KH, x->KW, x->sh,
                            x->sw, x->ph, x->pw, x->dh, x->dw, x->OW);
}

/* Scratch of pt2c_conv2d's gathered GEMM: the padded input (if the conv has padding and the copy
 * takes at most PT2C_CONV_PAD_FLOATS; else the taps are bounds-checked), then two B micro-panels
 * per thread (NR floats of room past them), whatever the instruction set. */
#ifndef PT2C_CONV_PAD_FLOATS
#define PT2C_CONV_PAD_FLOATS (1L << 20)
#endif

static size_t pt2c_conv_pad_floats(int Cg, int H, int W, int Hp, int Wp)
{
    size_t n = (size_t)Cg * Hp * Wp + PT2C_CONV_PAD_SLACK;
    return (Hp > H || Wp > W) && n <= (size_t)PT2C_CONV_PAD_FLOATS ? (n + 15) & ~(size_t)15 : 0;
}
#define PT2C_CONV_PANEL_FLOATS (2 * PT2C_GEMM_KC * PT2C_GEMM_NR + PT2C_GEMM_NR)

/* 1x1 convs with a stride and no padding (ResNet's downsampling): the input is subsampled once
 * into scratch (at most PT2C_CONV_PAD_FLOATS), then read in place as by a stride-1 1x1 conv.  As
 * im2col, the 16-pixel panels crossed output rows, and such panels were gathered one pixel at a
 * time: a quarter of the conv's time. */
static int pt2c_conv_is_strided_pointwise(int Cg, int KH, int KW, int sh, int sw, int ph, int pw, int H, int W, int OH,
                                          int OW)
{
    return KH == 1 && KW == 1 && ph == 0 && pw == 0 && (sh > 1 || sw > 1) && (OH - 1) * sh < H && (OW - 1) * sw < W &&
           (size_t)Cg * OH * OW <= (size_t)PT2C_CONV_PAD_FLOATS;
}

/* xs[c][oh][ow] = x[c][oh*sh][ow*sw] for Cg planes of H x W */
static void pt2c_conv_subsample(float *PT2C_RESTRICT xs, const float *PT2C_RESTRICT x, int Cg, int H, int W, int sh,
                                int sw, int OH, int OW)
{
    int c;
    PT2C_OMP(parallel for schedule(static) if ((long)Cg * OH * OW > 65536L))
    for (c = 0; c < Cg; c++) {
        int oh, ow;
        for (oh = 0; oh < OH; oh++) {
            const float *PT2C_RESTRICT row = x + ((ptrdiff_t)c * H + (ptrdiff_t)oh * sh) * W;
            float *PT2C_RESTRICT d = xs + ((ptrdiff_t)c * OH + oh) * OW;
            ow = 0;
#if defined(PT2C_SIMD_X86)
            if (sw == 2)
                for (; 2 * ow + 16 <= W; ow += 8) _mm256_storeu_ps(d + ow, pt2c_evens8(row + 2 * ow));
#endif
            for (; ow < OW; ow++) d[ow] = row[(ptrdiff_t)ow * sw];
        }
    }
}

PT2C_KERNEL size_t pt2c_conv2d_scratch_floats(int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph,
                                              int pw, int dh, int dw, int groups, int OH, int OW)
{
    int Cg = C / groups, OCg = OC / groups, OHW = OH * OW;
    if (OHW <= 0 || OCg <= 0) return 0;
    if (pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw, H, W, OH, OW)) return pt2c_sgemm_scratch_floats_ex(OCg, OHW, Cg, 1, 0);
    if (pt2c_conv_is_strided_pointwise(Cg, KH, KW, sh, sw, ph, pw, H, W, OH, OW))
        return pt2c_gemm_round16((size_t)Cg * OHW) + pt2c_sgemm_scratch_floats_ex(OCg, OHW, Cg, 1, 0);
    return pt2c_conv_pad_floats(Cg, H, W, pt2c_conv_extent(H, ph, OH, sh, KH, dh), pt2c_conv_extent(W, pw, OW, sw, KW, dw)) +
           (size_t)PT2C_MAX_THREADS * PT2C_CONV_PANEL_FLOATS;
}

PT2C_KERNEL void pt2c_conv2d(float *out, const float *in, const float *w_packed, const pt2c_epilogue *ep, int N, int C,
                             int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                             int groups, int OH, int OW, float *scratch)
{
    const int Cg = C / groups, OCg = OC / groups, Kg = Cg * KH * KW, OHW = OH * OW;
    const ptrdiff_t wg_size = (ptrdiff_t)(OCg + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * Kg;
    const int pointwise = pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw, H, W, OH, OW);
    const int spw = pt2c_conv_is_strided_pointwise(Cg, KH, KW, sh, sw, ph, pw, H, W, OH, OW);
    const int Hp = pt2c_conv_extent(H, ph, OH, sh, KH, dh), Wp = pt2c_conv_extent(W, pw, OW, sw, KW, dw);
    int n, g;
    if (OHW <= 0 || OCg <= 0) return;
    for (n = 0; n < N; n++) {
        for (g = 0; g < groups; g++) {
            const float *in_g = in + ((ptrdiff_t)n * C + (ptrdiff_t)g * Cg) * H * W;
            const float *w_g = w_packed + g * wg_size;
            const ptrdiff_t out_off = ((ptrdiff_t)n * OC + (ptrdiff_t)g * OCg) * OHW;
            pt2c_epilogue e, *et = NULL;
            if (ep) {
                e = *ep;
                e.bias = ep->bias ? ep->bias + g * OCg : NULL;
                e.bias_per_row = 1;
                e.residual = ep->residual ? ep->residual + out_off : NULL;
                e.ldr = OHW;
                et = &e;
            }
            if (pointwise) {
                pt2c_sgemm(out + out_off, OHW, w_g, 0, 0, 1, in_g, H * W, 1, 0, OCg, OHW, Kg, et, scratch);
            } else if (spw) {
                pt2c_conv_subsample(scratch, in_g, Cg, H, W, sh, sw, OH, OW);
                pt2c_sgemm(out + out_off, OHW, w_g, 0, 0, 1, scratch, OHW, 1, 0, OCg, OHW, Kg, et,
                           scratch + pt2c_gemm_round16((size_t)Cg * OHW));
            } else {
                /* chunks of the output pixels' panels, a few per thread (pt2c_chunks);
                 * each thread gathers its micro-panels of columns as its GEMM needs them */
                const size_t pad_floats = pt2c_conv_pad_floats(Cg, H, W, Hp, Wp);
                const int npan = (OHW + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR, pad = pad_floats > 0;
                float *panels = scratch + pad_floats;
                int nch = 1, nth = 1, c;
                pt2c_chunks chunks;
                if (pad) pt2c_conv_pad(scratch, in_g, Cg, H, W, ph, pw, Hp, Wp);
#if defined(_OPENMP)
                if (!omp_in_parallel() && (long)OCg * OHW * Kg >= 2 * PT2C_GEMM_MIN_MACS_PER_THREAD) {
                    nth = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
                    nch = PT2C_MIN(npan, nth * PT2C_GEMM_CHUNKS_PER_THREAD);
                }
#endif
                pt2c_chunks_init(&chunks, nch, nth);
                PT2C_OMP(parallel num_threads(nth) private(c) if (nch > 1))
                while ((c = pt2c_chunks_next(&chunks)) >= 0) {
                    const int q0 = (int)((long)npan * c / nch), q1 = (int)((long)npan * (c + 1) / nch);
                    const int j0 = q0 * PT2C_GEMM_NR, ncol = PT2C_MIN(OHW, q1 * PT2C_GEMM_NR) - j0;
                    pt2c_im2col_ctx x;
                    pt2c_epilogue ec;
                    if (q1 <= q0) continue;
                    x.in = pad ? scratch : in_g, x.padded = pad, x.p0 = j0, x.KH = KH, x.KW = KW, x.sh = sh;
                    x.sw = sw, x.ph = ph, x.pw = pw, x.dh = dh, x.dw = dw, x.OW = OW;
                    x.H = pad ? Hp : H, x.W = pad ? Wp : W;
                    if (et) {
                        ec = *et;
                        if (ec.residual) ec.residual += j0;
                    }
                    pt2c_gemm_bfn_serial(out + out_off + j0, OHW, w_g, pt2c_im2col_bfn, &x, OCg, ncol, Kg,
                                         et ? &ec : NULL, panels + (ptrdiff_t)PT2C_THREAD_ID() * PT2C_CONV_PANEL_FLOATS);
                }
                pt2c_chunks_done(&chunks);
            }
        }
    }
}

/* ---- weights computed at run time (from the inputs, in forward): packed into scratch at every run as
 * layout.py's pack_conv_weight packs constant ones (an A operand of MR-row panels per group), then
 * pt2c_conv2d.  The packing reads the weights once: OC x C/groups x KH x KW floats. ---- */
static size_t pt2c_conv2d_rt_packed_floats(int C, int OC, int KH, int KW, int groups)
{
    const int Kg = C / groups * KH * KW, OCg = OC / groups;
    return pt2c_gemm_round16((size_t)groups * ((OCg + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR) * Kg);
}

PT2C_KERNEL size_t pt2c_conv2d_rt_scratch_floats(int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph,
                                                 int pw, int dh, int dw, int groups, int OH, int OW)
{
    if (OH * OW <= 0 || OC / groups <= 0) return 0;
    return pt2c_conv2d_rt_packed_floats(C, OC, KH, KW, groups) +
           pt2c_conv2d_scratch_floats(C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, groups, OH, OW);
}

PT2C_KERNEL void pt2c_conv2d_rt(float *out, const float *in, const float *w, const pt2c_epilogue *ep, int N, int C,
                                int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                                int groups, int OH, int OW, float *scratch)
{
    const int Kg = C / groups * KH * KW, OCg = OC / groups;
    const ptrdiff_t wg_size = (ptrdiff_t)(OCg + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * Kg;
    int g;
    if (OH * OW <= 0 || OCg <= 0) return;
    for (g = 0; g < groups; g++) pt2c_gemm_pack_a(scratch + g * wg_size, w + (ptrdiff_t)g * OCg * Kg, Kg, 1, OCg, Kg);
    pt2c_conv2d(out, in, scratch, ep, N, C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, groups, OH, OW,
                scratch + pt2c_conv2d_rt_packed_floats(C, OC, KH, KW, groups));
}

/* ---- few output pixels (7x7 maps deep in a CNN): pixels as the GEMM's rows ----
 *
 * pt2c_conv2d puts the pixels on the GEMM's NR = 16 side: 49 pixels fill 4
 * panels (64 columns, 77% useful) and every weight is streamed for that.  Here
 * the product is transposed, outT[P, OC] = col^T[P, K] x W^T[K, OC]: the
 * pixels are cut into MR = 6 row panels (49 -> 54, 91% useful), the output
 * channels fill whole 16-wide panels, and W^T is pre-packed as the B operand
 * (layout.py: pack_conv_weight_t).  outT lands in scratch and is transposed
 * into NCHW with the epilogue.  Ungrouped convolutions only.
 *
 * With 2 .. PT2C_SMALLP_KSPLIT threads and a sum longer than the output channels (a 3x3 conv, a
 * projection after a depthwise conv), the threads split the input channels instead of the
 * output: each pads, im2cols and multiplies its slice of channels (largely the ones it wrote
 * itself: the layer before splits by channel too) into its own outT, and the NCHW store adds
 * them up.  What crosses between cores is then P x OC partial sums, not the P x K im2col or
 * input, read strided by both.  At 2 threads (AVX-512): ResNet-18's 512 -> 512 3x3 at 7x7
 * 0.78 -> 0.67 ms, MobileNetV2's 576 -> 160 54 -> 39 us, 960 -> 160 (+ residual) 82 -> 58 us. */
#ifndef PT2C_SMALLP_KSPLIT
#define PT2C_SMALLP_KSPLIT 4
#endif
static int pt2c_smallp_ksplit_ok(int P, int K, int OC)
{
    return K >= OC && K >= 2 * 64 && (long)P * OC * K >= 2 * PT2C_GEMM_MIN_MACS_PER_THREAD;
}

PT2C_KERNEL size_t pt2c_conv2d_smallp_scratch_floats(int C, int H, int W, int OC, int KH, int KW, int sh, int sw,
                                                     int ph, int pw, int dh, int dw, int OH, int OW)
{
    size_t P = (size_t)OH * OW, K = (size_t)C * KH * KW;
    size_t outT = (P * (size_t)OC + 15) & ~(size_t)15;
    if (P == 0 || OC <= 0) return 0;
    if (pt2c_smallp_ksplit_ok((int)P, (int)K, OC)) outT *= PT2C_SMALLP_KSPLIT; /* each thread's outT */
    if (pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw, H, W, OH, OW)) { /* A = the input itself, packed by the GEMM */
        size_t one = pt2c_sgemm_scratch_floats_ex((int)P, OC, (int)K, 0, 1), split = 0;
        if (pt2c_smallp_ksplit_ok((int)P, (int)K, OC)) /* a GEMM scratch per thread */
            split = PT2C_SMALLP_KSPLIT * pt2c_sgemm_scratch_floats_ex((int)P, OC, (int)(K + 1) / 2, 0, 1);
        return outT + PT2C_MAX(one, split);
    }
    /* the packed im2col, then the zero-padded input (none when unpadded or over its limit) */
    return outT + (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * K +
           pt2c_conv_pad_floats(C, H, W, pt2c_conv_extent(H, ph, OH, sh, KH, dh), pt2c_conv_extent(W, pw, OW, sw, KW, dw));
}

/* im2col of one MR-wide panel of pixels [p0, p0+np) (all rows k) for pt2c_conv2d_smallp: each
 * pixel's window position is worked out once, then every tap is MR bounds-checked loads (panels
 * of 6 pixels of 7-wide maps mostly span two rows, which the run-by-run copies handle slowly). */
static void pt2c_im2col_panel_px(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int p0, int np, int C,
                                 int H, int W, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OW)
{
    int ih0[PT2C_GEMM_MR], iw0[PT2C_GEMM_MR], c, kh, kw, t;
    for (t = 0; t < PT2C_GEMM_MR; t++) { /* past the last pixel: a window that is never inside */
        const int p = p0 + t;
        ih0[t] = t < np ? p / OW * sh - ph : -KH * dh;
        iw0[t] = t < np ? p % OW * sw - pw : 0;
    }
    for (c = 0; c < C; c++) {
        const float *plane = in + (ptrdiff_t)c * H * W;
        for (kh = 0; kh < KH; kh++) {
            for (kw = 0; kw < KW; kw++, dst += PT2C_GEMM_MR) {
                for (t = 0; t < PT2C_GEMM_MR; t++) {
                    const int ih = ih0[t] + kh * dh, iw = iw0[t] + kw * dw;
                    dst[t] = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W ? plane[(ptrdiff_t)ih * W + iw]
                                                                                    : 0.0f;
                }
            }
        }
    }
}

/* The same from planes of Hp x Wp where every tap is inside (the zero-padded copy, or an input
 * without padding): each pixel's offset is worked out once, then every tap is MR plain loads
 * (pixels past the last repeat the panel's first). */
static void pt2c_im2col_panel_px_in(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT x, int p0, int np, int C,
                                    int Hp, int Wp, int KH, int KW, int sh, int sw, int dh, int dw, int OW)
{
    ptrdiff_t off[PT2C_GEMM_MR];
    int c, kh, kw, t;
    for (t = 0; t < PT2C_GEMM_MR; t++) {
        const int p = p0 + (t < np ? t : 0);
        off[t] = (ptrdiff_t)(p / OW) * sh * Wp + (ptrdiff_t)(p % OW) * sw;
    }
    for (c = 0; c < C; c++)
        for (kh = 0; kh < KH; kh++) {
            const float *row = x + ((ptrdiff_t)c * Hp + (ptrdiff_t)kh * dh) * Wp;
            for (kw = 0; kw < KW; kw++, dst += PT2C_GEMM_MR) {
                const float *tap = row + (ptrdiff_t)kw * dw;
                for (t = 0; t < PT2C_GEMM_MR; t++) dst[t] = tap[off[t]];
            }
        }
}

PT2C_KERNEL void pt2c_conv2d_smallp(float *out, const float *in, const float *wt_packed, const pt2c_epilogue *ep, int N,
                                    int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh,
                                    int dw, int OH, int OW, float *scratch)
{
    const int P = OH * OW, K = C * KH * KW;
    const int pointwise = pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw, H, W, OH, OW);
    const int Hp = pt2c_conv_extent(H, ph, OH, sh, KH, dh), Wp = pt2c_conv_extent(W, pw, OW, sw, KW, dw);
    const int padded = Hp > H || Wp > W;
    const size_t pad_floats = pt2c_conv_pad_floats(C, H, W, Hp, Wp);
    const size_t outT_floats = ((size_t)P * OC + 15) & ~(size_t)15;
    const int ksplit = pt2c_smallp_ksplit_ok(P, K, OC);
    float *outT = scratch, *col = scratch + outT_floats * (ksplit ? PT2C_SMALLP_KSPLIT : 1);
    int n, nk = 1; /* threads splitting the sum over input channels (outT of thread t: outT + t * outT_floats) */
    if (P <= 0 || OC <= 0) return;
#if defined(_OPENMP)
    if (ksplit && !omp_in_parallel() && omp_get_max_threads() >= 2 && omp_get_max_threads() <= PT2C_SMALLP_KSPLIT)
        nk = omp_get_max_threads();
#endif
    for (n = 0; n < N; n++) {
        const float *in_n = in + (ptrdiff_t)n * C * H * W;
        float *out_n = out + (ptrdiff_t)n * OC * P;
        const float *res_n = ep && ep->residual ? ep->residual + (ptrdiff_t)n * OC * P : NULL;
        int oc;
        if (pointwise && nk > 1) {
            const size_t per = pt2c_sgemm_scratch_floats_ex(P, OC, (K + 1) / 2, 0, 1);
            PT2C_OMP(parallel num_threads(nk))
            { /* A(p, c) = in[c*P + p], channels k0 .. k1 (panels of the packed W^T: K rows deep) */
                const int t = PT2C_THREAD_ID(), nt = PT2C_TEAM_SIZE();
                const int k0 = (int)((long)K * t / nt), k1 = (int)((long)K * (t + 1) / nt);
                if (t == 0) nk = nt; /* (a team smaller than asked for: the store adds the partials there are) */
                pt2c_sgemm(outT + (size_t)t * outT_floats, OC, in_n + (ptrdiff_t)k0 * P, 1, P, 0,
                           wt_packed + (ptrdiff_t)k0 * PT2C_GEMM_NR, K, 0, 1, P, OC, k1 - k0, NULL,
                           col + (size_t)t * per);
            }
        } else if (nk > 1) { /* the same by input channels c0 .. c1: each thread pads, im2cols and multiplies its own */
            const int npan = (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR;
            const int inside = !padded || pad_floats > 0;
            float *xp = col + (ptrdiff_t)npan * PT2C_GEMM_MR * K;
            PT2C_OMP(parallel num_threads(nk))
            {
                const int t = PT2C_THREAD_ID(), nt = PT2C_TEAM_SIZE();
                const int c0 = (int)((long)C * t / nt), c1 = (int)((long)C * (t + 1) / nt);
                const int k0 = c0 * KH * KW, kt = (c1 - c0) * KH * KW;
                if (t == 0) nk = nt; /* (as above) */
                float *colt = col + (ptrdiff_t)npan * PT2C_GEMM_MR * k0; /* npan panels kt deep */
                const float *x = padded && inside ? xp + (ptrdiff_t)c0 * Hp * Wp : in_n + (ptrdiff_t)c0 * H * W;
                int p;
                if (padded && inside) /* (its planes only: these taps never read the slack past the last) */
                    pt2c_conv_pad_planes(xp + (ptrdiff_t)c0 * Hp * Wp, in_n + (ptrdiff_t)c0 * H * W, c1 - c0, H, W, ph,
                                         pw, Hp, Wp);
                for (p = 0; p < npan; p++) {
                    float *dst = colt + (ptrdiff_t)p * PT2C_GEMM_MR * kt;
                    const int np = PT2C_MIN(PT2C_GEMM_MR, P - p * PT2C_GEMM_MR);
                    if (inside)
                        pt2c_im2col_panel_px_in(dst, x, p * PT2C_GEMM_MR, np, c1 - c0, padded ? Hp : H,
                                                padded ? Wp : W, KH, KW, sh, sw, dh, dw, OW);
                    else
                        pt2c_im2col_panel_px(dst, x, p * PT2C_GEMM_MR, np, c1 - c0, H, W, KH, KW, sh, sw, ph, pw, dh,
                                             dw, OW);
                }
                pt2c_sgemm(outT + (size_t)t * outT_floats, OC, colt, 0, 0, 1, wt_packed + (ptrdiff_t)k0 * PT2C_GEMM_NR,
                           K, 0, 1, P, OC, kt, NULL, NULL);
            }
        } else if (pointwise) {
            /* A(p, c) = in[c*P + p]: the GEMM packs it */
            pt2c_sgemm(outT, OC, in_n, 1, P, 0, wt_packed, 0, 0, 1, P, OC, K, NULL, col);
        } else {
            const int npan = (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR;
            const int inside = !padded || pad_floats > 0; /* every tap inside a plane of the input or its copy */
            float *xp = col + (ptrdiff_t)npan * PT2C_GEMM_MR * K;
            int p, nth = 1;
            pt2c_chunks chunks;
#if defined(_OPENMP)
            if (!omp_in_parallel() && (long)npan * K > 65536L) nth = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif
            if (padded && inside) pt2c_conv_pad(xp, in_n, C, H, W, ph, pw, Hp, Wp);
            pt2c_chunks_init(&chunks, npan, nth);
            PT2C_OMP(parallel num_threads(nth) private(p) if (nth > 1))
            while ((p = pt2c_chunks_next(&chunks)) >= 0) {
                float *dst = col + (ptrdiff_t)p * PT2C_GEMM_MR * K;
                const int np = PT2C_MIN(PT2C_GEMM_MR, P - p * PT2C_GEMM_MR);
                if (inside)
                    pt2c_im2col_panel_px_in(dst, padded ? xp : in_n, p * PT2C_GEMM_MR, np, C, padded ? Hp : H,
                                            padded ? Wp : W, KH, KW, sh, sw, dh, dw, OW);
                else
                    pt2c_im2col_panel_px(dst, in_n, p * PT2C_GEMM_MR, np, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw,
                                         OW);
            }
            pt2c_chunks_done(&chunks);
            pt2c_sgemm(outT, OC, col, 0, 0, 1, wt_packed, 0, 0, 1, P, OC, K, NULL, NULL);
        }
        /* NCHW, with bias, residual and activation (same order as the GEMM epilogue), 8 channels and
         * 16 pixels at a time: two 8x8 blocks of outT transposed in registers, then the GEMM's row
         * epilogue, channel oc + j being row oc + j of the output (a channel at a time, the strided
         * reads and the activation's 49-long rows were ~20 % of a 160 -> 960 conv at 7x7) */
        PT2C_OMP(parallel for schedule(static) if ((long)OC * P > 8192L))
        for (oc = 0; oc < (OC + 7) / 8 * 8; oc += 8) {
            const int nc = PT2C_MIN(8, OC - oc);
            int p = 0, j;
#if defined(PT2C_SIMD_X86)
            pt2c_epilogue e = {0};
            if (ep) e = *ep, e.bias_per_row = 1, e.residual = res_n, e.ldr = P;
            if (nc == 8)
                for (; p + 16 <= P; p += 16) {
                    __m256 r[8], s[8];
                    for (j = 0; j < 8; j++) {
                        const float *o0 = outT + (ptrdiff_t)(p + j) * OC + oc, *o1 = o0 + 8 * (ptrdiff_t)OC;
                        int t;
                        r[j] = _mm256_loadu_ps(o0), s[j] = _mm256_loadu_ps(o1);
                        for (t = 1; t < nk; t++)
                            r[j] = _mm256_add_ps(r[j], _mm256_loadu_ps(o0 + (size_t)t * outT_floats)),
                            s[j] = _mm256_add_ps(s[j], _mm256_loadu_ps(o1 + (size_t)t * outT_floats));
                    }
                    pt2c_tr8x8_v(r);
                    pt2c_tr8x8_v(s);
                    for (j = 0; j < 8; j++) {
                        float *o = out_n + (ptrdiff_t)(oc + j) * P + p;
                        if (ep) pt2c_gemm_ep_row(&e, &r[j], &s[j], oc + j, p);
                        _mm256_storeu_ps(o, r[j]), _mm256_storeu_ps(o + 8, s[j]);
                    }
                }
#endif
            for (j = 0; j < nc; j++) { /* the pixels left, then the activation where not yet applied */
                float *o = out_n + (ptrdiff_t)(oc + j) * P;
                const float b = ep && ep->bias ? ep->bias[oc + j] : 0.0f;
                const int done = ep && (ep->act == PT2C_ACT_RELU || ep->act == PT2C_ACT_CLAMP) ? p : 0;
                int q, t;
                for (q = p; q < P; q++) {
                    float v = outT[(ptrdiff_t)q * OC + oc + j];
                    for (t = 1; t < nk; t++) v += outT[(size_t)t * outT_floats + (ptrdiff_t)q * OC + oc + j];
                    o[q] = v + b;
                }
                if (res_n)
                    for (q = p; q < P; q++) o[q] += res_n[(ptrdiff_t)(oc + j) * P + q];
                if (ep) pt2c_epilogue_act(o + done, P - done, ep->act, ep->lo, ep->hi);
            }
        }
    }
}

#endif /* PT2C_CONV_GEMM_C */
