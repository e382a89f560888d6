/* pt2c GPU kernels: scaled dot-product attention, flash-style (online softmax over tiles of 64 keys: no
 * Lq x Lk matrix is stored).  One work-group of 64 threads per (query row, head, batch): each thread scores
 * one key of the tile against the query (held in work-group memory), the group takes the tile's max and
 * sum, and each thread accumulates its own output features (d = t, t + 64, ...) over the tile's keys.
 * Layout: q[b sqb + h sqh + i sqr + d] and alike for k, v (kv head h / (H / Hkv): grouped-query
 * attention) and out; the optional mask (bool or additive) at b ms0 + h ms1 + i ms2 + j ms3 (stride 0:
 * broadcast).  D, Dv <= 256. */
#ifndef PT2C_GPU_ATTENTION_H
#define PT2C_GPU_ATTENTION_H

#include "pt2c_gpu.h"

#define PT2C_ATT_T 64 /* keys per tile = threads per group */

PT2C_KERNEL pt2c_sdpa(PT2C_T(float, o), PT2C_T(const float, q), PT2C_T(const float, k), PT2C_T(const float, v),
                      PT2C_T(const float, madd), PT2C_T(const uint8_t, mbool), int mask_kind, pt2c_long ms0,
                      pt2c_long ms1, pt2c_long ms2, pt2c_long ms3, int H, int Hkv, int Lk, int D, int Dv, float scale,
                      int causal, pt2c_long sqb, pt2c_long sqh, pt2c_long sqr, pt2c_long skb, pt2c_long skh,
                      pt2c_long skr, pt2c_long svb, pt2c_long svh, pt2c_long svr, pt2c_long sob, pt2c_long soh,
                      pt2c_long sor)
{
    PT2C_LOCAL float qs[256];
    PT2C_LOCAL float p[PT2C_ATT_T];
    PT2C_LOCAL float buf[PT2C_ATT_T];
    const int t = PT2C_TID(0), i = PT2C_BID(0), h = PT2C_BID(1), b = PT2C_BID(2);
    const int hk = h / (H / Hkv);
    q += q_off + b * sqb + h * sqh + i * sqr;
    k += k_off + b * skb + hk * skh;
    v += v_off + b * svb + hk * svh;
    o += o_off + b * sob + h * soh + i * sor;
    madd += madd_off + b * ms0 + h * ms1 + i * ms2;
    mbool += mbool_off + b * ms0 + h * ms1 + i * ms2;
    for (int d = t; d < D; d += PT2C_ATT_T) qs[d] = q[d] * scale;
    PT2C_SYNC();
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float m = -INFINITY, l = 0.0f;
    const int kend = causal ? PT2C_MIN(Lk, i + 1) : Lk;
    for (int j0 = 0; j0 < kend; j0 += PT2C_ATT_T) {
        const int j = j0 + t;
        float s = -INFINITY;
        if (j < kend) {
            PT2C_GLOBAL const float *kj = k + (pt2c_long)j * skr;
            s = 0.0f;
            for (int d = 0; d < D; d++) s += qs[d] * kj[d];
            if (mask_kind == 1 && !mbool[j * ms3]) s = -INFINITY;
            if (mask_kind == 2) s += madd[j * ms3];
        }
        const float mt = pt2c_wg_max(buf, s);
        const float mn = PT2C_MAX(m, mt);
        const float pj = mn == -INFINITY ? 0.0f : expf(s - mn);
        p[t] = pj;
        const float lt = pt2c_wg_sum(buf, pj); /* (its barriers also publish p) */
        const float alpha = m == -INFINITY ? 0.0f : expf(m - mn);
        l = l * alpha + lt;
        const int nk = PT2C_MIN(PT2C_ATT_T, kend - j0);
        for (int u = 0; u < 4; u++) {
            const int d = t + PT2C_ATT_T * u;
            if (d >= Dv) break;
            float a = acc[u] * alpha;
            for (int jj = 0; jj < nk; jj++) a += p[jj] * v[(pt2c_long)(j0 + jj) * svr + d];
            acc[u] = a;
        }
        m = mn;
        PT2C_SYNC();
    }
    for (int u = 0; u < 4; u++) {
        const int d = t + PT2C_ATT_T * u;
        if (d < Dv) o[d] = acc[u] / l; /* a row with every key masked: 0 / 0 = NaN, as torch */
    }
}

#endif /* PT2C_GPU_ATTENTION_H */
