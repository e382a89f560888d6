/* pt2c kernel library: a plain reference of scaled dot-product attention, for tests.
 *
 * The whole softmax of one query row at a time, in double.  No kernel file includes this one, so
 * it is never copied into an artifact; tests/test_kernels_naive.py compares pt2c_sdpa with it.
 */
#ifndef PT2C_ATTENTION_NAIVE_C
#define PT2C_ATTENTION_NAIVE_C

#include "attention.c" /* pt2c_sdpa_layout */

/* pt2c_sdpa's contract (attention.c): out [B][H][Lq][Dv] = softmax(q.k^T * scale + mask) v, with
 * q [B][H][Lq][D], k [B][Hkv][Lk][D], v [B][Hkv][Lk][Dv] (query head h reads kv head
 * h / (H / Hkv)); mask_add (added) or mask_bool (0: masked) at b*msb + h*msh + i*msq + j*msk;
 * causal: key j masked for query i when j > i; a row with every key masked gives zeros.
 * layout: the tensors' batch / head / row strides (NULL: dense). scratch: Lk floats. */
PT2C_KERNEL void pt2c_sdpa_naive(float *out, const float *q, const float *k, const float *v, const float *mask_add,
                                 const unsigned char *mask_bool, long msb, long msh, long msq, long msk, int B, int H,
                                 int Hkv, int Lq, int Lk, int D, int Dv, float scale, int causal,
                                 const pt2c_sdpa_layout *layout, float *scratch)
{
    int b, h, i, j, d;
    long qb = (long)H * Lq * D, qh = (long)Lq * D, qr = D, kb_ = (long)Hkv * Lk * D, kh = (long)Lk * D, kr = D;
    long vb_ = (long)Hkv * Lk * Dv, vh = (long)Lk * Dv, vr = Dv, ob = (long)H * Lq * Dv, oh = (long)Lq * Dv, or_ = Dv;
    if (layout) {
        qb = layout->q.b, qh = layout->q.h, qr = layout->q.r, kb_ = layout->k.b, kh = layout->k.h, kr = layout->k.r;
        vb_ = layout->v.b, vh = layout->v.h, vr = layout->v.r, ob = layout->out.b, oh = layout->out.h;
        or_ = layout->out.r;
    }
    for (b = 0; b < B; b++)
        for (h = 0; h < H; h++)
            for (i = 0; i < Lq; i++) {
                const int hk = h / (H / Hkv);
                const float *qi = q + b * qb + h * qh + i * qr;
                const float *kb = k + b * kb_ + hk * kh;
                const float *vb = v + b * vb_ + hk * vh;
                float *oi = out + b * ob + h * oh + i * or_;
                const long m0 = (long)b * msb + (long)h * msh + (long)i * msq;
                double mx = -INFINITY, l = 0.0;
                for (j = 0; j < Lk; j++) { /* scores, and their max */
                    double s = 0.0;
                    for (d = 0; d < D; d++) s += (double)qi[d] * kb[(ptrdiff_t)j * kr + d];
                    s *= scale;
                    if (mask_add) s += mask_add[m0 + (long)j * msk];
                    if (mask_bool && !mask_bool[m0 + (long)j * msk]) s = -INFINITY;
                    if (causal && j > i) s = -INFINITY;
                    scratch[j] = (float)s;
                    if (s > mx) mx = s;
                }
                for (d = 0; d < Dv; d++) oi[d] = 0.0f;
                if (mx == -INFINITY) continue; /* every key masked: zeros, as torch */
                for (j = 0; j < Lk; j++) { /* unnormalised probabilities */
                    scratch[j] = (float)exp((double)scratch[j] - mx);
                    l += scratch[j];
                }
                for (d = 0; d < Dv; d++) {
                    double o = 0.0;
                    for (j = 0; j < Lk; j++) o += (double)scratch[j] * vb[(ptrdiff_t)j * vr + d];
                    oi[d] = (float)(o / l);
                }
            }
}

#endif /* PT2C_ATTENTION_NAIVE_C */
