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
 * propagates, as in torch. */
PT2C_KERNEL void pt2c_maxpool2d(float *PT2C_RESTRICT out, const float *PT2C_RESTRICT in, int NC, int H, int W,
                                int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int OH, int OW)
{
    long nrows = (long)NC * OH;
    PT2C_OMP(parallel for schedule(static) if (nrows * OW * KH * KW > PT2C_POOL_PAR_MIN))
    for (long t = 0; t < nrows; t++) {
        long p = t / OH;
        int oh = (int)(t % OH);
        const float *x = in + (size_t)p * H * W;
        float *y = out + (size_t)t * OW;
        int ih0 = oh * sh - ph, kh0, kh1;
        pt2c_pool_taps(&kh0, &kh1, ih0, H, KH, dh);
        for (int ow = 0; ow < OW; ow++)
            y[ow] = -INFINITY;
        /* tap by tap over the whole output row (vectorises): y = v if v > y or v is NaN, so a NaN
         * anywhere in the window wins, as in torch */
        for (int kh = kh0; kh < kh1; kh++) {
            const float *row = x + (size_t)(ih0 + kh * dh) * W;
            for (int kw = 0; kw < KW; kw++) {
                const int off = kw * dw - pw; /* input column of output column 0 */
                /* output columns whose tap lands inside the row: 0 <= ow*sw + off < W */
                const int lo = PT2C_MIN(OW, off >= 0 ? 0 : (-off + sw - 1) / sw);
                const int hi = PT2C_MIN(OW, off > W - 1 ? 0 : (W - 1 - off) / sw + 1);
                if (sw == 1) {
                    for (int ow = lo; ow < hi; ow++) {
                        float v = row[ow + off], cur = y[ow];
                        y[ow] = (v > cur || v != v) ? v : cur;
                    }
                } else if (sw == 2) {
                    for (int ow = lo; ow < hi; ow++) {
                        float v = row[2 * ow + off], cur = y[ow];
                        y[ow] = (v > cur || v != v) ? v : cur;
                    }
                } else {
                    for (int ow = lo; ow < hi; ow++) {
                        float v = row[ow * sw + off], cur = y[ow];
                        y[ow] = (v > cur || v != v) ? v : cur;
                    }
                }
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
