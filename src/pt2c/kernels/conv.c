/* pt2c kernel library: NCHW float32 2-D convolution.
 *
 * pt2c_conv2d lowers each (image, group) to one GEMM
 *     out_g[OCg, OH*OW] = W_g[OCg, Cg*KH*KW] x col[Cg*KH*KW, OH*OW]
 * with W_g pre-packed as the GEMM's A operand (layout.py: pack_conv_weight).
 * 1x1 / stride 1 / no padding reads the input directly as B.  Otherwise the
 * columns are gathered (im2col) one packed-B micro-panel (KC x NR) at a time,
 * right before the micro-kernels use it, so they never leave L1 and the
 * scratch is one micro-panel per thread; each thread multiplies its own chunks
 * of the output pixels.
 *
 * pt2c_conv2d_depthwise is direct: one plane per task over the input itself for
 * stride-1 "same" convs on large planes, else 8 channels at a time over
 * interleaved, zero-padded bands of input rows (see there).
 *
 * Epilogue: ep->bias is per output channel, ep->residual is a tensor of the
 * output's NCHW shape (ep->ldr is ignored), then ep->act.
 */
#ifndef PT2C_CONV_C
#define PT2C_CONV_C

#include "common.h"
#include "gemm.c"

static int pt2c_conv_is_pointwise(int KH, int KW, int sh, int sw, int ph, int pw)
{
    return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
}

/* ---- the GEMM of pt2c_conv2d, its B operand gathered as it goes ----
 *
 * B made one NR-wide micro-panel at a time: bfn(ctx, dst, k0, kc, j0, nr) writes B's rows
 * k0 .. k0+kc-1, columns j0 .. j0+nr-1, to dst[k*NR + j], zero past nr (the packed-B layout). */
typedef void (*pt2c_gemm_bfn)(const void *ctx, float *dst, int k0, int kc, int j0, int nr);

/* At most this many rows of A per block of pt2c_gemm_bfn_serial (M x KC floats in L2). */
#ifndef PT2C_GEMM_BFN_MC
#define PT2C_GEMM_BFN_MC 504 /* multiple of MR */
#endif

/* The next weights panel (row i + MR of A), for the micro-kernel to prefetch on the first pass
 * (see PT2C_GEMM_PREFETCH_A); NULL past the last row m1 or after the first pass. */
#define PT2C_BFN_NEXT_A(A, i, m1, K, pc, jr)                                                               \
    (PT2C_GEMM_PREFETCH_A && (jr) == 0 && (i) + PT2C_GEMM_MR < (m1)                                         \
         ? (A) + (ptrdiff_t)((i) + PT2C_GEMM_MR) * (K) + (ptrdiff_t)(pc) * PT2C_GEMM_MR                       \
         : NULL)

/* C = epilogue(A*B) on one thread, A pre-packed, each micro-panel of B made by bfn into buf
 * right before the micro-kernels use it: written and read in L1, where a B block made ahead would
 * go out to L2/L3 and back (convolutions' im2col).  buf: 2 * PT2C_GEMM_KC * NR floats (AVX-512
 * makes two panels at a time for its 6 x 32 micro-kernel). */
static void pt2c_gemm_bfn_serial(float *C, int ldc, const float *A, pt2c_gemm_bfn bfn, const void *ctx, int M, int N,
                                 int K, const pt2c_epilogue *ep, float *buf)
{
    const int MR = PT2C_GEMM_MR, NR = PT2C_GEMM_NR;
    const int nkb = (K + PT2C_GEMM_KC - 1) / PT2C_GEMM_KC, kcb = (K + nkb - 1) / nkb; /* balanced k blocks */
    const int late_act = PT2C_GEMM_EP_IN_REGS(ep) ? PT2C_ACT_NONE : ep->act; /* as in pt2c_gemm_serial */
    pt2c_epilogue ep_early;
    int ic, pc, jr, ir;
    if (late_act) {
        ep_early = *ep;
        ep_early.act = PT2C_ACT_NONE;
        ep = ep_early.bias || ep_early.residual ? &ep_early : NULL;
    }
    for (ic = 0; ic < M; ic += PT2C_GEMM_BFN_MC) {
        const int mc = PT2C_MIN(PT2C_GEMM_BFN_MC, M - ic);
        for (pc = 0; pc < K; pc += kcb) {
            const int kc = PT2C_MIN(kcb, K - pc);
            const pt2c_epilogue *epk = pc + kc == K ? ep : NULL;
            for (jr = 0; jr < N; jr += NR) {
                const int nr = PT2C_MIN(NR, N - jr);
#if defined(PT2C_SIMD_AVX512)
                if (jr + 2 * NR <= N) { /* two panels at once: the 6 x 32 micro-kernel */
                    float *buf2 = buf + PT2C_GEMM_KC * NR;
                    bfn(ctx, buf, pc, kc, jr, NR);
                    bfn(ctx, buf2, pc, kc, jr + NR, NR);
                    for (ir = 0; ir < mc; ir += MR)
                        pt2c_gemm_ukernel_x2_avx512(kc, A + (ptrdiff_t)(ic + ir) * K + (ptrdiff_t)pc * MR, buf, buf2,
                                                    NR, C + (ptrdiff_t)(ic + ir) * ldc + jr, ldc, PT2C_MIN(MR, mc - ir),
                                                    pc > 0, epk, ic + ir, jr,
                                                    PT2C_BFN_NEXT_A(A, ic + ir, mc + ic, K, pc, jr), NULL, 0, 0);
                    jr += NR;
                    continue;
                }
                bfn(ctx, buf, pc, kc, jr, nr); /* the last, odd panel: 6 x 16 in zmm */
                for (ir = 0; ir < mc; ir += MR)
                    pt2c_gemm_ukernel_x1_avx512(kc, A + (ptrdiff_t)(ic + ir) * K + (ptrdiff_t)pc * MR, buf, NR,
                                                C + (ptrdiff_t)(ic + ir) * ldc + jr, ldc, PT2C_MIN(MR, mc - ir), nr,
                                                pc > 0, epk, ic + ir, jr, PT2C_BFN_NEXT_A(A, ic + ir, mc + ic, K, pc, jr));
                continue;
#endif
                bfn(ctx, buf, pc, kc, jr, nr);
                for (ir = 0; ir < mc; ir += MR)
                    pt2c_gemm_ukernel_packed(kc, A + (ptrdiff_t)(ic + ir) * K + (ptrdiff_t)pc * MR, buf,
                                             C + (ptrdiff_t)(ic + ir) * ldc + jr, ldc, PT2C_MIN(MR, mc - ir), nr,
                                             pc > 0, epk, ic + ir, jr, PT2C_BFN_NEXT_A(A, ic + ir, mc + ic, K, pc, jr),
                                             NULL, 0);
            }
        }
        if (late_act)
            for (ir = 0; ir < mc; ir++)
                pt2c_epilogue_act(C + (ptrdiff_t)(ic + ir) * ldc, N, late_act, ep_early.lo, ep_early.hi);
    }
}

/* d[0..16) = src[0], src[sw], .., src[15 * sw] as vector copies, for stride 1 (and 2 on x86:
 * the evens of [0, 16), then the odds of [15, 31), so no read past src[30]); returns 0, having
 * done nothing, for other strides. */
PT2C_GEMM_INLINE int pt2c_im2col_copy16(float *PT2C_RESTRICT d, const float *PT2C_RESTRICT src, int sw)
{
#if defined(PT2C_GEMM_VEC)
    if (sw == 1) {
        PT2C_V8_STORE(d, PT2C_V8_LOAD(src));
        PT2C_V8_STORE(d + 8, PT2C_V8_LOAD(src + 8));
        return 1;
    }
#endif
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
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

/* Zero-padded copy of C planes (H x W -> (H + 2ph) x (W + 2pw)). */
static void pt2c_conv_pad_planes(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int C, int H, int W, int ph,
                                 int pw)
{
    const int Wp = W + 2 * pw, Hp = H + 2 * ph;
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
            memset(row + pw + W, 0, (size_t)pw * sizeof(float));
        }
        memset(d + (ptrdiff_t)(ph + H) * Wp, 0, (size_t)ph * Wp * sizeof(float));
    }
}

/* The same, then PT2C_CONV_PAD_SLACK zeros. */
static void pt2c_conv_pad(float *PT2C_RESTRICT dst, const float *PT2C_RESTRICT in, int C, int H, int W, int ph, int pw)
{
    int t;
    pt2c_conv_pad_planes(dst, in, C, H, W, ph, pw);
    for (t = 0; t < PT2C_CONV_PAD_SLACK; t++) dst[(ptrdiff_t)C * (H + 2 * ph) * (W + 2 * pw) + t] = 0.0f;
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

static size_t pt2c_conv_pad_floats(int Cg, int H, int W, int ph, int pw)
{
    size_t n = (size_t)Cg * (H + 2 * ph) * (W + 2 * pw) + PT2C_CONV_PAD_SLACK;
    return (ph > 0 || pw > 0) && n <= (size_t)PT2C_CONV_PAD_FLOATS ? (n + 15) & ~(size_t)15 : 0;
}
#define PT2C_CONV_PANEL_FLOATS (2 * PT2C_GEMM_KC * PT2C_GEMM_NR + PT2C_GEMM_NR)

/* 1x1 convs with a stride and no padding (ResNet's downsampling): the input is subsampled once
 * into scratch (at most PT2C_CONV_PAD_FLOATS), then read in place as by a stride-1 1x1 conv.  As
 * im2col, the 16-pixel panels crossed output rows, and such panels were gathered one pixel at a
 * time: a quarter of the conv's time. */
static int pt2c_conv_is_strided_pointwise(int Cg, int KH, int KW, int sh, int sw, int ph, int pw, int OH, int OW)
{
    return KH == 1 && KW == 1 && ph == 0 && pw == 0 && (sh > 1 || sw > 1) &&
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
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
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
    (void)dh, (void)dw;
    if (OHW <= 0 || OCg <= 0) return 0;
    if (pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw)) return pt2c_sgemm_scratch_floats_ex(OCg, OHW, Cg, 1, 0);
    if (pt2c_conv_is_strided_pointwise(Cg, KH, KW, sh, sw, ph, pw, OH, OW))
        return pt2c_gemm_round16((size_t)Cg * OHW) + pt2c_sgemm_scratch_floats_ex(OCg, OHW, Cg, 1, 0);
    return pt2c_conv_pad_floats(Cg, H, W, ph, pw) + (size_t)PT2C_MAX_THREADS * PT2C_CONV_PANEL_FLOATS;
}

PT2C_KERNEL void pt2c_conv2d(float *out, const float *in, const float *w_packed, const pt2c_epilogue *ep, int N, int C,
                             int H, int W, int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                             int groups, int OH, int OW, float *scratch)
{
    const int Cg = C / groups, OCg = OC / groups, Kg = Cg * KH * KW, OHW = OH * OW;
    const ptrdiff_t wg_size = (ptrdiff_t)(OCg + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * Kg;
    const int pointwise = pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw);
    const int spw = pt2c_conv_is_strided_pointwise(Cg, KH, KW, sh, sw, ph, pw, OH, OW);
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
                const size_t pad_floats = pt2c_conv_pad_floats(Cg, H, W, ph, pw);
                const int npan = (OHW + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR, pad = pad_floats > 0;
                float *panels = scratch + pad_floats;
                int nch = 1, nth = 1, c;
                pt2c_chunks chunks;
                if (pad) pt2c_conv_pad(scratch, in_g, Cg, H, W, ph, pw);
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
                    x.H = pad ? H + 2 * ph : H, x.W = pad ? W + 2 * pw : W;
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
                                                     int ph, int pw, int OH, int OW)
{
    size_t P = (size_t)OH * OW, K = (size_t)C * KH * KW;
    size_t outT = (P * (size_t)OC + 15) & ~(size_t)15;
    if (P == 0 || OC <= 0) return 0;
    if (pt2c_smallp_ksplit_ok((int)P, (int)K, OC)) outT *= PT2C_SMALLP_KSPLIT; /* each thread's outT */
    if (pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw)) { /* A = the input itself, packed by the GEMM */
        size_t one = pt2c_sgemm_scratch_floats_ex((int)P, OC, (int)K, 0, 1), split = 0;
        if (pt2c_smallp_ksplit_ok((int)P, (int)K, OC)) /* a GEMM scratch per thread */
            split = PT2C_SMALLP_KSPLIT * pt2c_sgemm_scratch_floats_ex((int)P, OC, (int)(K + 1) / 2, 0, 1);
        return outT + PT2C_MAX(one, split);
    }
    /* the packed im2col, then the zero-padded input (none when unpadded or over its limit) */
    return outT + (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * K + pt2c_conv_pad_floats(C, H, W, ph, pw);
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
    const int pointwise = pt2c_conv_is_pointwise(KH, KW, sh, sw, ph, pw);
    const size_t pad_floats = pt2c_conv_pad_floats(C, H, W, ph, pw);
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
            const int npan = (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR, padded = ph > 0 || pw > 0;
            const int inside = !padded || pad_floats > 0, Hp = H + 2 * ph, Wp = W + 2 * pw;
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
                                         pw);
                for (p = 0; p < npan; p++) {
                    float *dst = colt + (ptrdiff_t)p * PT2C_GEMM_MR * kt;
                    const int np = PT2C_MIN(PT2C_GEMM_MR, P - p * PT2C_GEMM_MR);
                    if (inside)
                        pt2c_im2col_panel_px_in(dst, x, p * PT2C_GEMM_MR, np, c1 - c0, Hp, Wp, KH, KW, sh, sw, dh, dw,
                                                OW);
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
            const int npan = (P + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR, padded = ph > 0 || pw > 0;
            const int inside = !padded || pad_floats > 0; /* every tap inside a plane of the input or its copy */
            float *xp = col + (ptrdiff_t)npan * PT2C_GEMM_MR * K;
            int p, nth = 1;
            pt2c_chunks chunks;
#if defined(_OPENMP)
            if (!omp_in_parallel() && (long)npan * K > 65536L) nth = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif
            if (padded && inside) pt2c_conv_pad(xp, in_n, C, H, W, ph, pw);
            pt2c_chunks_init(&chunks, npan, nth);
            PT2C_OMP(parallel num_threads(nth) private(p) if (nth > 1))
            while ((p = pt2c_chunks_next(&chunks)) >= 0) {
                float *dst = col + (ptrdiff_t)p * PT2C_GEMM_MR * K;
                const int np = PT2C_MIN(PT2C_GEMM_MR, P - p * PT2C_GEMM_MR);
                if (inside)
                    pt2c_im2col_panel_px_in(dst, padded ? xp : in_n, p * PT2C_GEMM_MR, np, C, H + 2 * ph, W + 2 * pw,
                                            KH, KW, sh, sw, dh, dw, OW);
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
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
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
PT2C_GEMM_INLINE void pt2c_wino_at(float *PT2C_RESTRICT y, int ys, const float *PT2C_RESTRICT m, ptrdiff_t ms)
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
 * into v[xi * vs + t] (vs: distance between the V_xi matrices).  Each tile's 6x6 patch is read
 * in place when 8-float rows from it stay inside the plane, else from a zero-padded copy; the
 * patches are transposed so the tiles become the vector lanes, 8 tiles at a time. */
static void pt2c_wino_input(float *PT2C_RESTRICT v, ptrdiff_t vs, const float *PT2C_RESTRICT plane, int p0, int P,
                            int TW, int H, int W, int ph, int pw)
{
    float d[36 * 16], tmp[36 * 16], edge[16 * 48]; /* edge: a tile's patch, 6 rows of 8 */
    const float *src[16];
    int ss[16], t, i, j;
    for (t = 0; t < 16; t++) {
        const int p = p0 + t, y0 = (p / TW) * 4 - ph, x0 = (p % TW) * 4 - pw;
        float *e = edge + t * 48;
        src[t] = e, ss[t] = 8;
        if (p < P && y0 >= 0 && x0 >= 0 && y0 + 6 <= H && x0 + 6 <= W && (y0 + 6 < H || x0 + 8 <= W)) {
            src[t] = plane + (ptrdiff_t)y0 * W + x0, ss[t] = W;
        } else { /* columns [j0, j1) of the patch are inside the plane */
            const int j0 = PT2C_MAX(0, -x0), j1 = PT2C_MIN(6, W - x0);
            for (i = 0; i < 48; i++) e[i] = 0.0f;
            for (i = 0; i < 6; i++) {
                const int ih = y0 + i;
                if (p < P && ih >= 0 && ih < H)
                    for (j = j0; j < j1; j++) e[i * 8 + j] = plane[(ptrdiff_t)ih * W + x0 + j];
            }
        }
    }
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
    for (i = 0; i < 6; i++) {
        int g;
        for (g = 0; g < 16; g += 8) {
            const float *s[8];
            float *dd[8], spare[16]; /* columns 6 and 7 of the 8-float rows: not used */
            for (t = 0; t < 8; t++) s[t] = src[g + t] + (ptrdiff_t)i * ss[g + t];
            for (j = 0; j < 6; j++) dd[j] = d + (i * 6 + j) * 16 + g;
            dd[6] = spare, dd[7] = spare + 8;
            pt2c_tr8x8(dd, s);
        }
    }
#else
    for (t = 0; t < 16; t++)
        for (i = 0; i < 6; i++)
            for (j = 0; j < 6; j++) d[(i * 6 + j) * 16 + t] = src[t][(ptrdiff_t)i * ss[t] + j];
#endif
    for (j = 0; j < 6; j++) pt2c_wino_bt(tmp + j * 16, 6 * 16, d + j * 16, 6 * 16); /* columns: B^T d */
    for (i = 0; i < 6; i++) pt2c_wino_bt(d + i * 6 * 16, 16, tmp + i * 6 * 16, 16);  /* rows: (B^T d) B */
    for (i = 0; i < 36; i++) memcpy(v + i * vs, d + i * 16, 16 * sizeof(float));
}

/* Output transform of 16 tiles [p0, p0+16) of output channel oc: m[xi * ms + t] -> out plane,
 * with bias, residual and activation. */
static void pt2c_wino_output(float *PT2C_RESTRICT plane, const float *PT2C_RESTRICT m, ptrdiff_t ms, int p0, int P,
                             int TW, int OH, int OW, const pt2c_epilogue *ep, int oc, const float *res_plane)
{
    float tmp[24 * 16], y[16 * 16], yt[16 * 16];
    const float bias = ep && ep->bias ? ep->bias[oc] : 0.0f;
    int t, i, j, nt = PT2C_MIN(16, P - p0);
    for (j = 0; j < 6; j++) pt2c_wino_at(tmp + j * 16, 6 * 16, m + j * ms, 6 * ms); /* columns: A^T m */
    for (i = 0; i < 4; i++) pt2c_wino_at(y + i * 4 * 16, 16, tmp + i * 6 * 16, 16);  /* rows: (A^T m) A */
    /* y[(r*4+q)*16 + t]: pixel (r, q) of tile t, + bias; then tile by tile, yt[t*16 + r*4 + q]
     * (8x8 transposes): + residual, the activation on all of yt at once (tiles past the last are
     * computed and dropped), and the store, row by row. */
    for (i = 0; i < 256; i++) y[i] += bias;
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
    for (i = 0; i < 16; i += 8) {
        for (t = 0; t < 16; t += 8) {
            const float *s[8];
            float *d[8];
            for (j = 0; j < 8; j++) s[j] = y + (i + j) * 16 + t, d[j] = yt + (t + j) * 16 + i;
            pt2c_tr8x8(d, s);
        }
    }
#else
    for (t = 0; t < 16; t++)
        for (i = 0; i < 16; i++) yt[t * 16 + i] = y[i * 16 + t];
#endif
    if (res_plane) {
        for (t = 0; t < nt; t++) {
            const int p = p0 + t, oh0 = (p / TW) * 4, ow0 = (p % TW) * 4, nq = PT2C_MIN(4, OW - ow0);
            for (i = 0; i < 4 && oh0 + i < OH; i++) {
                const float *r = res_plane + (ptrdiff_t)(oh0 + i) * OW + ow0;
                for (j = 0; j < nq; j++) yt[t * 16 + i * 4 + j] += r[j];
            }
        }
    }
    if (ep) pt2c_epilogue_act(yt, 256, ep->act, ep->lo, ep->hi);
    for (t = 0; t < nt; t++) {
        const int p = p0 + t, oh0 = (p / TW) * 4, ow0 = (p % TW) * 4, nq = PT2C_MIN(4, OW - ow0);
        for (i = 0; i < 4 && oh0 + i < OH; i++) {
            float *o = plane + (ptrdiff_t)(oh0 + i) * OW + ow0;
            if (nq == 4) /* (a fixed-size copy: one vector move) */
                memcpy(o, yt + t * 16 + i * 4, 4 * sizeof(float));
            else
                memcpy(o, yt + t * 16 + i * 4, (size_t)nq * sizeof(float));
        }
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
            /* V_xi (packed B, panels of 16 tiles): element (c, t) at (t/16)*16*C + c*16 + t%16.  Threads
             * take contiguous ranges (static), so each writes its own panels: interleaved chunks of 4
             * channels (dynamic) wrote neighbouring cache lines from both threads, and 2 threads were
             * no faster than 1. */
            PT2C_OMP(parallel for schedule(static) if ((long)C * npan * 16 * 36 > 65536L))
            for (task = 0; task < C * npan; task++) {
                int c = task % C, pan = task / C;
                pt2c_wino_input(V + (ptrdiff_t)pan * 16 * C + (ptrdiff_t)c * 16, vsz, in_n + (ptrdiff_t)c * H * W,
                                b0 + pan * 16, P, TW, H, W, ph, pw);
            }
            /* the 36 GEMMs, one per thread at a time (each single-threaded: too small to split), over
             * whole panels: the lanes past the last tile are zeros in V, so M is defined there too */
            PT2C_OMP(parallel for schedule(dynamic, 1) if ((long)OC * C * nb * 36 > 1048576L))
            for (xi = 0; xi < 36; xi++)
                pt2c_sgemm(Mb + xi * msz, nt, u + xi * usz, 0, 0, 1, V + xi * vsz, 0, 0, 1, OC, npan * 16, C, NULL,
                           NULL);
            /* whole output channels per thread (static, channel-major): panel-major tasks had both
             * threads writing the same rows of a plane (a panel of 16 tiles ends mid-row) */
            PT2C_OMP(parallel for schedule(static) if ((long)OC * npan * 16 * 36 > 65536L))
            for (task = 0; task < OC * npan; task++) {
                int oc = task / npan, pan = task % npan;
                pt2c_wino_output(out_n + (ptrdiff_t)oc * OH * OW, Mb + (ptrdiff_t)oc * nt + pan * 16, msz,
                                 b0 + pan * 16, P, TW, OH, OW, ep, oc,
                                 res_n ? res_n + (ptrdiff_t)oc * OH * OW : NULL);
            }
        }
    }
}

/* ---- depthwise (groups == C, OC = mult * C; w is [OC][KH*KW], unpacked) ----
 *
 * 3x3, stride 1, padding 1 on x86 with rows of up to PT2C_DW_ROWS_MAX_W (MobileNet's 112x112 down
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
/* bias + sum_k w[k] * x[k] over 16 lanes, in two FMA chains */
PT2C_GEMM_INLINE __m512 pt2c_dw_sum9_16(const __m512 *w, __m512 bv, const __m512 *x)
{
    __m512 a0 = _mm512_fmadd_ps(w[0], x[0], bv), a1 = _mm512_mul_ps(w[1], x[1]);
    a0 = _mm512_fmadd_ps(w[2], x[2], a0), a1 = _mm512_fmadd_ps(w[3], x[3], a1);
    a0 = _mm512_fmadd_ps(w[4], x[4], a0), a1 = _mm512_fmadd_ps(w[5], x[5], a1);
    a0 = _mm512_fmadd_ps(w[6], x[6], a0), a1 = _mm512_fmadd_ps(w[7], x[7], a1);
    return _mm512_add_ps(_mm512_fmadd_ps(w[8], x[8], a0), a1);
}
#endif

/* o[p] = bias + sum_k w[k] * t_k[p] for p in [0, n): the nine taps of a 3x3 depthwise conv in
 * registers */
PT2C_GEMM_INLINE void pt2c_dw_taps9(float *PT2C_RESTRICT o, const float *const *t, const float *wk, float bias,
                                    ptrdiff_t n)
{
    ptrdiff_t p = 0;
#if defined(PT2C_SIMD_AVX512)
    { /* 16 at a time (loads folded into the FMAs), the last n - p < 16 with masked loads and store */
        __m512 w[9], x[9];
        const __m512 bv = _mm512_set1_ps(bias);
        int k;
        for (k = 0; k < 9; k++) w[k] = _mm512_set1_ps(wk[k]);
        for (; p + 16 <= n; p += 16) {
            x[0] = _mm512_loadu_ps(t[0] + p), x[1] = _mm512_loadu_ps(t[1] + p), x[2] = _mm512_loadu_ps(t[2] + p);
            x[3] = _mm512_loadu_ps(t[3] + p), x[4] = _mm512_loadu_ps(t[4] + p), x[5] = _mm512_loadu_ps(t[5] + p);
            x[6] = _mm512_loadu_ps(t[6] + p), x[7] = _mm512_loadu_ps(t[7] + p), x[8] = _mm512_loadu_ps(t[8] + p);
            _mm512_storeu_ps(o + p, pt2c_dw_sum9_16(w, bv, x));
        }
        if (p < n) {
            const __mmask16 m = (__mmask16)((1u << (n - p)) - 1);
            for (k = 0; k < 9; k++) x[k] = _mm512_maskz_loadu_ps(m, t[k] + p);
            _mm512_mask_storeu_ps(o + p, m, pt2c_dw_sum9_16(w, bv, x));
        }
    }
#else
#if defined(PT2C_GEMM_VEC)
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

/* 3x3, pad 1, on x86 (see above): in strips of V output columns; at stride 1, tap kw of the strip at
 * column c0 reads the input row at c0 + kw - 1 with a mask of the lanes whose output and input
 * columns are inside the row, so the padding costs no edge loops and nothing outside the plane is
 * read. */
#if defined(PT2C_SIMD_AVX512)
#define PT2C_DW_ROW_V 16
#elif defined(PT2C_SIMD_AVX2)
#define PT2C_DW_ROW_V 8
#endif
#if defined(PT2C_DW_ROW_V)
#ifndef PT2C_DW_ROWS_MAX_W
#define PT2C_DW_ROWS_MAX_W 128 /* wider rows: the flattened plane (224 x 224: 11-21 % faster) */
#endif
#ifndef PT2C_DW_ROWS_S2_MAX_HW
#if defined(PT2C_SIMD_AVX512)
#define PT2C_DW_ROWS_S2_MAX_HW (1L << 30) /* any plane, in bands (112 x 112: 1.25x the split rows) */
#else
#define PT2C_DW_ROWS_S2_MAX_HW 4096L /* larger input planes: split rows (112 x 112: 0.95x in bands) */
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

#if defined(PT2C_SIMD_AVX512)
typedef __m512 pt2c_dw_rv;
typedef __mmask16 pt2c_dw_rm;
#define PT2C_DW_RV_SET1(x) _mm512_set1_ps(x)
#define PT2C_DW_RV_LOAD(m, p) _mm512_maskz_loadu_ps((m), (p))
#define PT2C_DW_RV_FMA(w, x, acc) _mm512_fmadd_ps((w), (x), (acc))
#define PT2C_DW_RV_STORE(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define PT2C_DW_RV_MAX _mm512_max_ps
#define PT2C_DW_RV_MIN _mm512_min_ps
static pt2c_dw_rm pt2c_dw_rmask(int lo, int hi) /* lanes [lo, hi) of 16, clipped */
{
    lo = PT2C_MAX(lo, 0), hi = PT2C_MIN(hi, 16);
    return (pt2c_dw_rm)(hi > lo ? ((1u << hi) - 1u) & ~((1u << lo) - 1u) : 0u);
}
#else
typedef __m256 pt2c_dw_rv;
typedef __m256i pt2c_dw_rm;
#define PT2C_DW_RV_SET1(x) _mm256_set1_ps(x)
#define PT2C_DW_RV_LOAD(m, p) _mm256_maskload_ps((p), (m))
#define PT2C_DW_RV_FMA(w, x, acc) _mm256_fmadd_ps((w), (x), (acc))
#define PT2C_DW_RV_STORE(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define PT2C_DW_RV_MAX _mm256_max_ps
#define PT2C_DW_RV_MIN _mm256_min_ps
static pt2c_dw_rm pt2c_dw_rmask(int lo, int hi) /* lanes [lo, hi) of 8 */
{
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(hi), iota),
                            _mm256_cmpgt_epi32(iota, _mm256_set1_epi32(lo - 1)));
}
#endif

/* the nine weights of a plane, broadcast */
PT2C_GEMM_INLINE void pt2c_dw_rv_taps(pt2c_dw_rv *w, const float *wk)
{
    int k;
    for (k = 0; k < 9; k++) w[k] = PT2C_DW_RV_SET1(wk[k]);
}

/* relu / clamp as in the GEMM epilogue (max returns its 2nd operand on NaN: x > 0 ? x : 0) */
PT2C_GEMM_INLINE pt2c_dw_rv pt2c_dw_rv_act(pt2c_dw_rv r, int act, float lo, float hi)
{
    if (act == PT2C_ACT_RELU) return PT2C_DW_RV_MAX(r, PT2C_DW_RV_SET1(0.0f));
    if (act == PT2C_ACT_CLAMP) return PT2C_DW_RV_MIN(PT2C_DW_RV_SET1(hi), PT2C_DW_RV_MAX(PT2C_DW_RV_SET1(lo), r));
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
    const pt2c_dw_rv bv = PT2C_DW_RV_SET1(bias);
    pt2c_dw_rv w[9];
    int c0, ih;
    pt2c_dw_rv_taps(w, wk);
    for (c0 = 0; c0 < W; c0 += V) {
        /* lane j: output column c0 + j, input column c0 + j + k - 1 for tap k */
        const pt2c_dw_rm m0 = pt2c_dw_rmask(1 - c0, W - c0), m1 = pt2c_dw_rmask(-c0, W - c0),
                         m2 = pt2c_dw_rmask(-c0, W - 1 - c0);
        const float *x = ip + c0 - 1;
        float *o = op + c0;
        pt2c_dw_rv up = bv, mid = bv; /* the sums of output rows ih - 1 and ih */
        for (ih = 0; ih < H; ih++, x += W) {
            pt2c_dw_rv down;
            const pt2c_dw_rv x0 = PT2C_DW_RV_LOAD(m0, x), x1 = PT2C_DW_RV_LOAD(m1, x + 1), x2 = PT2C_DW_RV_LOAD(m2, x + 2);
            down = PT2C_DW_RV_FMA(w[0], x0, bv), down = PT2C_DW_RV_FMA(w[1], x1, down), down = PT2C_DW_RV_FMA(w[2], x2, down);
            mid = PT2C_DW_RV_FMA(w[3], x0, mid), mid = PT2C_DW_RV_FMA(w[4], x1, mid), mid = PT2C_DW_RV_FMA(w[5], x2, mid);
            if (ih > 0) {
                up = PT2C_DW_RV_FMA(w[6], x0, up), up = PT2C_DW_RV_FMA(w[7], x1, up), up = PT2C_DW_RV_FMA(w[8], x2, up);
                PT2C_DW_RV_STORE(o + (ptrdiff_t)(ih - 1) * W, m1, pt2c_dw_rv_act(up, act, lo, hi));
            }
            up = mid, mid = down;
        }
        PT2C_DW_RV_STORE(o + (ptrdiff_t)(H - 1) * W, m1, pt2c_dw_rv_act(up, act, lo, hi));
    }
}

/* Stride 2, pad 1: output column c0 + j reads input columns 2(c0 + j) - 1 + kw.  Per input row and strip
 * the masked vectors a = x[2c0 - 1 ..] and b = x[2c0 - 1 + V ..] hold them: om (kw = 0) is their even
 * elements, e (kw = 1) the odd ones, and op (kw = 2) om one lane on, its last lane loaded alone. */
typedef struct {
    pt2c_dw_rm a, b, c;
} pt2c_dw_s2m;

static pt2c_dw_s2m pt2c_dw_s2_masks(int c0, int W)
{
    const int V = PT2C_DW_ROW_V, base = 2 * c0 - 1; /* input column of a's lane 0 */
    pt2c_dw_s2m m;
    m.a = pt2c_dw_rmask(-base, W - base), m.b = pt2c_dw_rmask(-base - V, W - base - V);
    m.c = pt2c_dw_rmask(-base - 2 * V, PT2C_MIN(1, W - base - 2 * V));
    return m;
}

PT2C_GEMM_INLINE void pt2c_dw_s2_cols(const float *x, const pt2c_dw_s2m *m, pt2c_dw_rv *om, pt2c_dw_rv *e,
                                      pt2c_dw_rv *op)
{
#if defined(PT2C_SIMD_AVX512)
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 a = _mm512_maskz_loadu_ps(m->a, x), b = _mm512_maskz_loadu_ps(m->b, x + 16);
    *om = _mm512_permutex2var_ps(a, ie, b);
    *e = _mm512_permutex2var_ps(a, io, b);
    *op = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_maskz_loadu_ps(m->c, x + 32)),
                                                  _mm512_castps_si512(*om), 1));
#else
    const __m256 a = _mm256_maskload_ps(x, m->a), b = _mm256_maskload_ps(x + 8, m->b);
    const __m256 c = _mm256_maskload_ps(x + 16, m->c);
    const __m256i ix = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
    __m256 t;
    t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    *om = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
    t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
    /* om one lane on, c's lane 0 (x[16]) into the last lane */
    *op = _mm256_blend_ps(_mm256_permutevar8x32_ps(*om, ix), _mm256_permutevar8x32_ps(c, ix), 0x80);
#endif
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
    const pt2c_dw_rv bv = PT2C_DW_RV_SET1(bias);
    pt2c_dw_rv w[9];
    int task, oh;
    pt2c_dw_rv_taps(w, wk);
    for (task = 0; task < ntask; task++) { /* band by band, strip by strip */
        const int oh0 = task / nstrip * band, c0 = task % nstrip * V;
        const pt2c_dw_s2m m = pt2c_dw_s2_masks(c0, W);
        const pt2c_dw_rm mo = pt2c_dw_rmask(0, OW - c0);
        const int oh1 = PT2C_MIN(OH, oh0 + band);
        const float *x = ip + (ptrdiff_t)2 * oh0 * W + 2 * c0 - 1;
        float *o = op + (ptrdiff_t)oh0 * OW + c0;
        pt2c_dw_rv xm, xe, xp;
        pt2c_dw_rv acc = bv; /* output row oh; its input row 2 oh - 1 was added with the row above */
        if (oh0 > 0) { /* (the band's first: input row 2 oh0 - 1 from here) */
            pt2c_dw_s2_cols(x - W, &m, &xm, &xe, &xp);
            acc = PT2C_DW_RV_FMA(w[0], xm, acc), acc = PT2C_DW_RV_FMA(w[1], xe, acc);
            acc = PT2C_DW_RV_FMA(w[2], xp, acc);
        }
        for (oh = oh0; oh < oh1; oh++, x += 2 * W, o += OW) {
            pt2c_dw_rv next = bv;
            pt2c_dw_s2_cols(x, &m, &xm, &xe, &xp);
            acc = PT2C_DW_RV_FMA(w[3], xm, acc), acc = PT2C_DW_RV_FMA(w[4], xe, acc), acc = PT2C_DW_RV_FMA(w[5], xp, acc);
            if (2 * oh + 1 < H) {
                pt2c_dw_s2_cols(x + W, &m, &xm, &xe, &xp);
                acc = PT2C_DW_RV_FMA(w[6], xm, acc), acc = PT2C_DW_RV_FMA(w[7], xe, acc), acc = PT2C_DW_RV_FMA(w[8], xp, acc);
                next = PT2C_DW_RV_FMA(w[0], xm, next), next = PT2C_DW_RV_FMA(w[1], xe, next);
                next = PT2C_DW_RV_FMA(w[2], xp, next);
            }
            PT2C_DW_RV_STORE(o, mo, pt2c_dw_rv_act(acc, act, lo, hi));
            acc = next;
        }
    }
}
#endif

/* The stride-2 path's split of one input row x[0, W) (see above): e[j] = x[2j] for j < (W + 1) / 2,
 * o[j + 1] = x[2j + 1] for j < W / 2, o[0] = 0, and zeros up to e[OWV) and o[OWV + 1). OWV is a
 * multiple of PT2C_DW_S2_V; the vector paths read the row's end with masked loads. */
#if defined(PT2C_SIMD_AVX512)
#define PT2C_DW_S2_V 16
#else
#define PT2C_DW_S2_V 8
#endif
static void pt2c_dw_split(float *PT2C_RESTRICT e, float *PT2C_RESTRICT o, const float *PT2C_RESTRICT x, int W,
                          int OWV)
{
    int j;
    o[0] = 0.0f;
#if defined(PT2C_SIMD_AVX512)
    {
        const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        for (j = 0; j < OWV; j += 16) {
            const int rem = W - 2 * j; /* input columns left from 2j */
            __m512 a, b;
            if (rem >= 32) {
                a = _mm512_loadu_ps(x + 2 * j), b = _mm512_loadu_ps(x + 2 * j + 16);
            } else {
                const __mmask16 ma = rem <= 0 ? 0 : rem >= 16 ? 0xFFFF : (__mmask16)((1u << rem) - 1);
                const __mmask16 mb = rem <= 16 ? 0 : (__mmask16)((1u << (rem - 16)) - 1);
                a = _mm512_maskz_loadu_ps(ma, x + 2 * j), b = _mm512_maskz_loadu_ps(mb, x + 2 * j + 16);
            }
            _mm512_storeu_ps(e + j, _mm512_permutex2var_ps(a, ie, b));
            _mm512_storeu_ps(o + 1 + j, _mm512_permutex2var_ps(a, io, b));
        }
    }
#elif defined(PT2C_SIMD_AVX2)
    for (j = 0; j < OWV; j += 8) {
        const int rem = W - 2 * j;
        if (rem >= 16) {
            _mm256_storeu_ps(e + j, pt2c_evens8(x + 2 * j));
            _mm256_storeu_ps(o + 1 + j, pt2c_odds8(x + 2 * j));
        } else { /* lanes i < rem of x + 2j, zero past the row */
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i ma = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), lane);
            const __m256i mb = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem - 8), lane);
            const __m256 a = _mm256_maskload_ps(x + 2 * j, ma), b = _mm256_maskload_ps(x + 2 * j + 8, mb);
            const __m256 ev = _mm256_shuffle_ps(a, b, 0x88), od = _mm256_shuffle_ps(a, b, 0xDD);
            _mm256_storeu_ps(e + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
            _mm256_storeu_ps(o + 1 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
        }
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
#if defined(PT2C_GEMM_VEC)
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
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
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
#if defined(PT2C_GEMM_VEC)
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
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
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

/* ---- a pointwise expansion and the depthwise conv that reads it (MobileNet's inverted residual) ----
 *
 * mid = ep1(W1 x) (1x1, stride 1, ungrouped: M channels), out = ep2(depthwise(mid)).  A depthwise
 * conv reads each channel on its own, so the pair runs by groups of G channels: the 1x1 conv makes
 * G planes of mid in a per-thread buffer, the depthwise conv turns them into G planes of out while
 * they are still in L2.  The M x H x W tensor between them never exists; it was written to and
 * read back from L3 or DRAM when larger than L2 (MobileNetV2's 96 x 112 x 112: 4.8 MB).
 * Threads take whole groups.  Against the two calls (x86-64-v3, bench/conv_bench.py --pwdw): 16 -> 96
 * at 112x112, then 3x3 stride 2, 0.87x at 1 thread and 0.89x at 2; 24 -> 144 at 56x56 0.86-0.89x
 * and 0.95x; at 28x28 (a mid of 0.6 MB) and 14x14 0.98-1.05x, so the compiler fuses only pairs
 * whose mid is over 1 MiB (passes/pwdw.py). */
#ifndef PT2C_PWDW_GROUP_FLOATS
#define PT2C_PWDW_GROUP_FLOATS 163840L /* a group's planes of mid: 640 KiB */
#endif
#define PT2C_PWDW_GROUP_MAX 24 /* at most this many channels per group (>= 6 groups of 144) */

static int pt2c_pwdw_group(int M, int H, int W)
{
    long g = PT2C_PWDW_GROUP_FLOATS / ((long)H * W) / PT2C_GEMM_MR * PT2C_GEMM_MR;
    g = PT2C_MAX(PT2C_GEMM_MR, PT2C_MIN(PT2C_PWDW_GROUP_MAX, g));
    return (int)PT2C_MIN((long)M, g);
}

/* Scratch: per thread (at most one per group) a group's planes of mid and its GEMM's packing
 * buffer (each thread runs its GEMM alone), then the depthwise conv's scratch for all threads:
 * thread t passes the depthwise kernel its t-th share, or all of it when this call runs on one
 * thread (the depthwise kernel then threads itself). */
static size_t pt2c_pwdw_thread_floats(int C, int H, int W, int M)
{
    const int G = pt2c_pwdw_group(M, H, W);
    return pt2c_gemm_round16((size_t)G * H * W) + pt2c_gemm_round16(pt2c_gemm_thread_floats(G, H * W, C, 1, 0));
}

PT2C_KERNEL size_t pt2c_conv2d_pw_dw_scratch_floats(int C, int H, int W, int M, int KH, int KW, int sh, int sw,
                                                    int ph, int pw, int dh, int dw, int OH, int OW)
{
    int G;
    if (M <= 0 || OH <= 0 || OW <= 0 || H <= 0 || W <= 0) return 0;
    G = pt2c_pwdw_group(M, H, W);
    return (size_t)PT2C_MIN(PT2C_MAX_THREADS, (M + G - 1) / G) * pt2c_pwdw_thread_floats(C, H, W, M) +
           pt2c_conv2d_depthwise_scratch_floats(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw);
}

/* w1: pt2c_conv2d's packed 1x1 weights (M x C); w_dw: [M][KH*KW]; ep1 without a residual. */
PT2C_KERNEL void pt2c_conv2d_pw_dw(float *out, const float *in, const float *w1, const pt2c_epilogue *ep1,
                                   const float *w_dw, const pt2c_epilogue *ep2, int N, int C, int H, int W, int M,
                                   int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OH, int OW,
                                   float *scratch)
{
    const int G = M > 0 && H > 0 && W > 0 ? pt2c_pwdw_group(M, H, W) : 1, ng = M > 0 ? (M + G - 1) / G : 0;
    const ptrdiff_t HW = (ptrdiff_t)H * W, OHW = (ptrdiff_t)OH * OW;
    const size_t per = pt2c_pwdw_thread_floats(C, H, W, M);
    float *dws = scratch + (size_t)PT2C_MIN(PT2C_MAX_THREADS, ng) * per;
    const size_t dw_share = pt2c_conv2d_depthwise_scratch_floats(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw) /
                            PT2C_MAX_THREADS;
    int task, nthr = 1;
    (void)nthr; /* (without OpenMP) */
    if (ng == 0 || OHW <= 0 || HW <= 0) return;
#if defined(_OPENMP)
    if (!omp_in_parallel()) nthr = PT2C_MIN(PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS), ng);
#endif
    PT2C_OMP(parallel for schedule(static) num_threads(nthr) if (nthr > 1))
    for (task = 0; task < N * ng; task++) {
        const int n = task / ng, g0 = task % ng * G, gg = PT2C_MIN(G, M - g0), t = PT2C_THREAD_ID();
        float *mid = scratch + (size_t)t * per;
        pt2c_epilogue e1, e2;
        if (ep1) e1 = *ep1, e1.bias = ep1->bias ? ep1->bias + g0 : NULL, e1.bias_per_row = 1, e1.residual = NULL;
        if (ep2) {
            e2 = *ep2, e2.bias = ep2->bias ? ep2->bias + g0 : NULL;
            e2.residual = ep2->residual ? ep2->residual + ((ptrdiff_t)n * M + g0) * OHW : NULL;
        }
        pt2c_gemm_serial(mid, (int)HW, w1 + (ptrdiff_t)g0 * C, 0, 0, 1, in + (ptrdiff_t)n * C * HW, (int)HW, 1, 0, gg,
                         (int)HW, C, ep1 ? &e1 : NULL, mid + pt2c_gemm_round16((size_t)G * HW));
        pt2c_conv2d_depthwise(out + ((ptrdiff_t)n * M + g0) * OHW, mid, w_dw + (ptrdiff_t)g0 * KH * KW,
                              ep2 ? &e2 : NULL, 1, gg, H, W, gg, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW,
                              dws + (nthr > 1 ? (size_t)t * dw_share : 0));
    }
}

#endif /* PT2C_CONV_C */
