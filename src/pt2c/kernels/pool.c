/* pt2c kernels: 2-D pooling on NCHW float32, with N*C collapsed into NC planes.
 *
 * Output sizes come from the caller (that is where ceil_mode is decided); the
 * kernels clip each window to the input exactly as PyTorch's CPU kernels do.
 * Work is split over (plane, output row) pairs so that small batches with
 * large images still use all threads.
 */
#ifndef PT2C_POOL_C
#define PT2C_POOL_C

#include "common.h"
#include "simd.h"

#define PT2C_POOL_PAR_MIN 16384L

/* Index range [*lo, *hi) of kernel taps k with 0 <= start + k*dil < size. */
PT2C_KERNEL void pt2c_pool_taps(int *lo, int *hi, int start, int size, int k, int dil)
{
    int a = start < 0 ? (-start + dil - 1) / dil : 0;
    int b = start < size ? (size - start + dil - 1) / dil : 0;
    *lo = a;
    *hi = PT2C_MAX(a, PT2C_MIN(k, b));
}

/* Max pooling.  Padding acts as -inf; a window with no input element (only
 * possible with an unusual caller geometry) yields -inf like torch.  NaN
 * propagates, as in torch: v replaces the running max m when v > m or v is
 * NaN, so a NaN anywhere in a window wins whatever the order of the taps.
 *
 * Per output row, in blocks of output columns: first the max over the window's
 * rows, column by column, into a row buffer with -inf where the window leaves
 * the input (contiguous, vectorises), then the max over the window's columns
 * from that buffer.  The selects are bit operations (pt2c_select) so that both
 * loops vectorise. */
#define PT2C_POOL_ROW 1024

static inline float pt2c_pool_max(float m, float v)
{
    return pt2c_select(v > m || v != v, v, m);
}

#if defined(PT2C_VF)
/* 3x3, stride 2, padding 1 (ResNet's stem pool) on simd.h's native vectors: per output row, strips of
 * V columns; the window rows' max (vertical, on the two vectors a, b that hold input columns
 * 2 c0 - 1 ..) and then that of its even (om), odd (e) and next even (op) columns, by permutes, as
 * the stride-2 depthwise strips; masked loads fill the padding with -inf.  NaN-aware as
 * pt2c_pool_max (pt2c_vf_maxnan). */
#define PT2C_POOL_V PT2C_VF_LANES
static void pt2c_maxpool_3x3s2(float *PT2C_RESTRICT y, const float *PT2C_RESTRICT x, int H, int W, int oh, int OW)
{
    const int V = PT2C_POOL_V, r0 = PT2C_MAX(0, 2 * oh - 1), r1 = PT2C_MIN(H, 2 * oh + 2);
    int c0, r;
    for (c0 = 0; c0 < OW; c0 += V) {
        const int base = 2 * c0 - 1; /* input column of a's lane 0 */
        const pt2c_vfm ma = pt2c_vf_range(-base, W - base), mb = pt2c_vf_range(-base - V, W - base - V);
        const pt2c_vfm mc = pt2c_vf_range(-base - 2 * V, PT2C_MIN(1, W - base - 2 * V));
        const float *p = x + (ptrdiff_t)r0 * W + base;
        pt2c_vf a, b, c, om, e, op;
        if (base >= 0 && base + 2 * V < W) { /* every lane inside the row (c: lane 0) */
            a = PT2C_VF_LOAD(p), b = PT2C_VF_LOAD(p + V), c = PT2C_VF_SET1(p[2 * V]);
            for (r = r0 + 1; r < r1; r++) {
                p += W;
                a = pt2c_vf_maxnan(a, PT2C_VF_LOAD(p));
                b = pt2c_vf_maxnan(b, PT2C_VF_LOAD(p + V));
                c = pt2c_vf_maxnan(c, PT2C_VF_SET1(p[2 * V]));
            }
        } else {
            const pt2c_vf ninf = PT2C_VF_SET1(-INFINITY);
            a = PT2C_VF_MASK_LOAD(ninf, ma, p), b = PT2C_VF_MASK_LOAD(ninf, mb, p + V);
            c = PT2C_VF_MASK_LOAD(ninf, mc, p + 2 * V);
            for (r = r0 + 1; r < r1; r++) {
                p += W;
                a = pt2c_vf_maxnan(a, PT2C_VF_MASK_LOAD(ninf, ma, p));
                b = pt2c_vf_maxnan(b, PT2C_VF_MASK_LOAD(ninf, mb, p + V));
                c = pt2c_vf_maxnan(c, PT2C_VF_MASK_LOAD(ninf, mc, p + 2 * V));
            }
        }
        om = PT2C_VF_EVENS(a, b), e = PT2C_VF_ODDS(a, b), op = PT2C_VF_NEXT1(om, c);
        PT2C_VF_MASK_STORE(y + c0, pt2c_vf_range(0, OW - c0), pt2c_vf_maxnan(pt2c_vf_maxnan(om, e), op));
    }
}
#endif

PT2C_KERNEL void pt2c_maxpool2d(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in, int NC, int H, int W,
                                int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OH, int OW)
{
    long nrows = (long)NC * OH;
#if defined(PT2C_VF)
    if (KH == 3 && KW == 3 && sh == 2 && sw == 2 && ph == 1 && pw == 1 && dh == 1 && dw == 1 && OH == (H + 1) / 2 &&
        OW == (W + 1) / 2) {
        PT2C_OMP(parallel for schedule(static) if (nrows * OW * 9 > PT2C_POOL_PAR_MIN))
        for (long t = 0; t < nrows; t++)
            pt2c_maxpool_3x3s2(out + (size_t)t * OW, in + (size_t)(t / OH) * H * W, H, W, (int)(t % OH), OW);
        return;
    }
#endif
    /* output columns per block: their windows span at most PT2C_POOL_ROW input columns */
    const int span = (KW - 1) * dw + 1, nb = span <= PT2C_POOL_ROW ? (PT2C_POOL_ROW - span) / sw + 1 : 0;
    PT2C_OMP(parallel for schedule(static) if (nrows * OW * KH * KW > PT2C_POOL_PAR_MIN))
    for (long t = 0; t < nrows; t++) {
        long p = t / OH;
        int oh = (int)(t % OH);
        const float *x = in + (size_t)p * H * W;
        float *y = out + (size_t)t * OW;
        int ih0 = oh * sh - ph, kh0, kh1;
        float buf[PT2C_POOL_ROW + 16];
        pt2c_pool_taps(&kh0, &kh1, ih0, H, KH, dh);
        if (nb == 0) { /* a window wider than the buffer: tap by tap, straight from the input */
            for (int ow = 0; ow < OW; ow++) {
                float m = -INFINITY;
                int kw0, kw1;
                pt2c_pool_taps(&kw0, &kw1, ow * sw - pw, W, KW, dw);
                for (int kh = kh0; kh < kh1; kh++)
                    for (int kw = kw0; kw < kw1; kw++)
                        m = pt2c_pool_max(m, x[(size_t)(ih0 + kh * dh) * W + ow * sw - pw + kw * dw]);
                y[ow] = m;
            }
            continue;
        }
        for (int ow0 = 0; ow0 < OW; ow0 += nb) {
            const int n = PT2C_MIN(nb, OW - ow0), c0 = ow0 * sw - pw; /* buf[i]: input column c0 + i */
            const int len = (n - 1) * sw + span;
            const int i0 = PT2C_MIN(len, PT2C_MAX(0, -c0)), i1 = PT2C_MAX(i0, PT2C_MIN(len, W - c0));
            float *yb = y + ow0;
            for (int i = 0; i < len; i++)
                buf[i] = -INFINITY;
            for (int kh = kh0; kh < kh1; kh++) {
                const float *row = x + (size_t)(ih0 + kh * dh) * W; /* (no pointer before the plane) */
                for (int i = i0; i < i1; i++)
                    buf[i] = pt2c_pool_max(buf[i], row[c0 + i]);
            }
            for (int i = len; i < len + 16; i++) /* (read, unused, by the vector loop below) */
                buf[i] = -INFINITY;
#if defined(PT2C_SIMD_X86)
            if (sw == 2) { /* the evens of 16 columns per tap, 8 outputs at a time */
                int j = 0;
                for (; j + 8 <= n; j += 8) {
                    __m256 m = _mm256_set1_ps(-INFINITY);
                    for (int kw = 0; kw < KW; kw++) {
                        const float *b = buf + 2 * j + kw * dw;
                        const __m256 v = pt2c_evens8(b);
                        __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                        m = _mm256_blendv_ps(m, v, take);
                    }
                    _mm256_storeu_ps(yb + j, m);
                }
                for (; j < n; j++) {
                    float m = -INFINITY;
                    for (int kw = 0; kw < KW; kw++) m = pt2c_pool_max(m, buf[2 * j + kw * dw]);
                    yb[j] = m;
                }
                continue;
            }
#endif
            for (int j = 0; j < n; j++)
                yb[j] = buf[j * sw];
            for (int kw = 1; kw < KW; kw++) {
                const float *b = buf + kw * dw;
                if (sw == 1)
                    for (int j = 0; j < n; j++) yb[j] = pt2c_pool_max(yb[j], b[j]);
                else if (sw == 2)
                    for (int j = 0; j < n; j++) yb[j] = pt2c_pool_max(yb[j], b[2 * j]);
                else
                    for (int j = 0; j < n; j++) yb[j] = pt2c_pool_max(yb[j], b[j * sw]);
            }
        }
    }
}

/* Average pooling with torch semantics: the window is first clipped to the
 * padded input (this is what ceil_mode's extra windows hit), and that size is
 * the divisor when count_include_pad; otherwise the divisor is the number of
 * real input elements.  divisor_override != 0 replaces both.  A window lying
 * completely outside the input gives 0. */
PT2C_KERNEL void pt2c_avgpool2d(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in, int NC, int H, int W,
                                int KH, int KW, int sh, int sw, int ph, int pw, int OH, int OW,
                                int count_include_pad, int divisor_override)
{
    long nrows = (long)NC * OH;
    PT2C_OMP(parallel for schedule(static) if (nrows * OW * KH * KW > PT2C_POOL_PAR_MIN))
    for (long t = 0; t < nrows; t++) {
        long p = t / OH;
        int oh = (int)(t % OH);
        const float *x = in + (size_t)p * H * W;
        float *y = out + (size_t)t * OW;
        int h0 = oh * sh - ph;
        int h1 = PT2C_MIN(h0 + KH, H + ph);
        int padded_h = h1 - h0;
        h0 = PT2C_MAX(h0, 0);
        h1 = PT2C_MIN(h1, H);
        for (int ow = 0; ow < OW; ow++) {
            int w0 = ow * sw - pw;
            int w1 = PT2C_MIN(w0 + KW, W + pw);
            int pool_size = padded_h * (w1 - w0);
            w0 = PT2C_MAX(w0, 0);
            w1 = PT2C_MIN(w1, W);
            if (h0 >= h1 || w0 >= w1) {
                y[ow] = 0.0f;
                continue;
            }
            float s = 0.0f;
            for (int ih = h0; ih < h1; ih++) {
                const float *row = x + (size_t)ih * W;
                for (int iw = w0; iw < w1; iw++)
                    s += row[iw];
            }
            int div = divisor_override ? divisor_override
                    : count_include_pad ? pool_size
                    : (h1 - h0) * (w1 - w0);
            y[ow] = s / (float)div;
        }
    }
}

/* Adaptive pooling windows, as in torch: [floor(i*n/on), ceil((i+1)*n/on)). */
#define PT2C_ADAPT_START(i, n, on) (int)(((long)(i) * (n)) / (on))
#define PT2C_ADAPT_END(i, n, on) (int)((((long)(i) + 1) * (n) + (on) - 1) / (on))

PT2C_KERNEL void pt2c_adaptive_avgpool2d(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                         int NC, int H, int W, int OH, int OW)
{
    long nrows = (long)NC * OH;
    PT2C_OMP(parallel for schedule(static) if (nrows * W * (H / (OH > 0 ? OH : 1) + 1) > PT2C_POOL_PAR_MIN))
    for (long t = 0; t < nrows; t++) {
        long p = t / OH;
        int oh = (int)(t % OH);
        const float *x = in + (size_t)p * H * W;
        float *y = out + (size_t)t * OW;
        int h0 = PT2C_ADAPT_START(oh, H, OH), h1 = PT2C_ADAPT_END(oh, H, OH);
        for (int ow = 0; ow < OW; ow++) {
            int w0 = PT2C_ADAPT_START(ow, W, OW), w1 = PT2C_ADAPT_END(ow, W, OW);
            float s = 0.0f;
            for (int ih = h0; ih < h1; ih++) {
                const float *row = x + (size_t)ih * W;
                for (int iw = w0; iw < w1; iw++)
                    s += row[iw];
            }
            y[ow] = s / (float)((h1 - h0) * (w1 - w0));
        }
    }
}

/* Adaptive max pooling; NaN propagates like torch. */
PT2C_KERNEL void pt2c_adaptive_maxpool2d(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in,
                                         int NC, int H, int W, int OH, int OW)
{
    long nrows = (long)NC * OH;
    PT2C_OMP(parallel for schedule(static) if (nrows * W * (H / (OH > 0 ? OH : 1) + 1) > PT2C_POOL_PAR_MIN))
    for (long t = 0; t < nrows; t++) {
        long p = t / OH;
        int oh = (int)(t % OH);
        const float *x = in + (size_t)p * H * W;
        float *y = out + (size_t)t * OW;
        int h0 = PT2C_ADAPT_START(oh, H, OH), h1 = PT2C_ADAPT_END(oh, H, OH);
        for (int ow = 0; ow < OW; ow++) {
            int w0 = PT2C_ADAPT_START(ow, W, OW), w1 = PT2C_ADAPT_END(ow, W, OW);
            float m = -INFINITY;
            for (int ih = h0; ih < h1; ih++) {
                const float *row = x + (size_t)ih * W;
                for (int iw = w0; iw < w1; iw++)
                    if (row[iw] > m || isnan(row[iw]))
                        m = row[iw];
            }
            y[ow] = m;
        }
    }
}

#endif /* PT2C_POOL_C */
