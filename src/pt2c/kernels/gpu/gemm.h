/* pt2c GPU kernels: matrix product and convolution as implicit GEMM, on one tiled loop.
 *
 * A work-group of 16 x 16 threads computes a 64 x 64 tile of C, each thread a 4 x 4 block of it
 * (rows ty + 16 i, columns tx + 16 j: neighbouring threads store neighbouring columns).  K is walked
 * 16 at a time through work-group memory: 64 x 16 of A and 16 x 64 of B, each loaded by all 256
 * threads, zero outside the matrices.  The epilogue (bias per column or per row, residual,
 * activation) is applied to the registers before the one store.  float32 throughout, float32
 * accumulation (no tensor cores: tf32 would change the numbers).
 */
#ifndef PT2C_GPU_GEMM_H
#define PT2C_GPU_GEMM_H

#include "pt2c_gpu.h"

#define PT2C_TM 64
#define PT2C_TK 16

/* the tiled loop: acc[i][j] += A(m0 + ty + 16 i, k) * B(k, n0 + tx + 16 j); LOAD_A(m, k) and LOAD_B(k, n) are
 * expressions valid for in-range indices */
#define PT2C_GEMM_TILES(LOAD_A, LOAD_B)                                                              \
    for (int k0 = 0; k0 < K; k0 += PT2C_TK) {                                                        \
        for (int l = 0; l < 4; l++) {                                                                \
            const int e = tid + 256 * l;                                                             \
            const int am = e / PT2C_TK, ak = e % PT2C_TK, gm = m0 + am, gk = k0 + ak;                \
            As[ak][am] = (gm < M && gk < K) ? (LOAD_A(gm, gk)) : 0.0f;                               \
            const int bk = e / PT2C_TM, bn = e % PT2C_TM, gk2 = k0 + bk, gn = n0 + bn;               \
            Bs[bk][bn] = (gk2 < K && gn < N) ? (LOAD_B(gk2, gn)) : 0.0f;                             \
        }                                                                                            \
        PT2C_SYNC();                                                                                 \
        for (int kk = 0; kk < PT2C_TK; kk++) {                                                       \
            float av[4], bv[4];                                                                      \
            for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];                                 \
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];                                 \
            for (int i = 0; i < 4; i++)                                                              \
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];                              \
        }                                                                                            \
        PT2C_SYNC();                                                                                 \
    }

/* the tile's store through the epilogue: OUT[m][n] = act(acc + bias[m or n] + res[m][n]) for the rows and columns
 * inside M x N (bias per row when PER_ROW) */
#define PT2C_GEMM_STORE(OUT, PER_ROW)                                                                \
    for (int i = 0; i < 4; i++) {                                                                    \
        const int m = m0 + ty + 16 * i;                                                              \
        if (m >= M) continue;                                                                        \
        for (int j = 0; j < 4; j++) {                                                                \
            const int n = n0 + tx + 16 * j;                                                          \
            if (n >= N) continue;                                                                    \
            float v_ = acc[i][j];                                                                    \
            if (has_bias) v_ += bias[(PER_ROW) ? m : n];                                             \
            if (has_res) v_ += res[(pt2c_long)m * N + n];                                            \
            OUT[(pt2c_long)m * N + n] = pt2c_act(v_, act, lo, hi);                                   \
        }                                                                                            \
    }

/* C[z] (M x N, dense) = act(A[z] @ B[z] + bias + residual[z]); A(m, k) at a[z sab + m sam + k sak], B(k, n) at
 * b[z sbb + k sbk + n sbn] (transposed and batch-broadcast operands read in place).  bias: length N, or M with
 * bias_per_row; has_bias / has_res say whether they are used.  Grid: (ceil(N / 64), ceil(M / 64), batch). */
PT2C_KERNEL pt2c_gemm(PT2C_T(float, c), PT2C_T(const float, a), PT2C_T(const float, b), PT2C_T(const float, bias),
                      PT2C_T(const float, res), int M, int N, int K, pt2c_long sab, int sam, int sak, pt2c_long sbb,
                      int sbk, int sbn, int has_bias, int bias_per_row, int has_res, int act, float lo, float hi)
{
    PT2C_LOCAL float As[PT2C_TK][PT2C_TM + 1];
    PT2C_LOCAL float Bs[PT2C_TK][PT2C_TM];
    const int tx = PT2C_TID(0), ty = PT2C_TID(1), tid = ty * 16 + tx;
    const int n0 = PT2C_BID(0) * PT2C_TM, m0 = PT2C_BID(1) * PT2C_TM, z = PT2C_BID(2);
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    a += a_off + z * sab;
    b += b_off + z * sbb;
    c += c_off + (pt2c_long)z * M * N;
    bias += bias_off;
    res += res_off + (pt2c_long)z * M * N;
#define PT2C_LA(m, k) a[(pt2c_long)(m) * sam + (pt2c_long)(k) * sak]
#define PT2C_LB(k, n) b[(pt2c_long)(k) * sbk + (pt2c_long)(n) * sbn]
    PT2C_GEMM_TILES(PT2C_LA, PT2C_LB)
#undef PT2C_LA
#undef PT2C_LB
    PT2C_GEMM_STORE(c, bias_per_row)
}

/* The same product for few rows (M <= 4) when B's columns are contiguous along k (sbk == 1: a linear layer's
 * weight [N, K] read as its transpose), as in batch-1 inference: a tile of 64 rows would do 16-64x the work
 * of a row.  8 outputs per group of 256 threads: 32 threads walk k of one column (reading it coalesced),
 * their partial sums meet in work-group memory.  Grid: (ceil(N / 8), 1, batch). */
PT2C_KERNEL pt2c_gemv(PT2C_T(float, c), PT2C_T(const float, a), PT2C_T(const float, b), PT2C_T(const float, bias),
                      PT2C_T(const float, res), int M, int N, int K, pt2c_long sab, int sam, int sak, pt2c_long sbb,
                      int sbk, int sbn, int has_bias, int bias_per_row, int has_res, int act, float lo, float hi)
{
    PT2C_LOCAL float part[4][256];
    const int t = PT2C_TID(0), lane = t % 32, n = PT2C_BID(0) * 8 + t / 32, z = PT2C_BID(2);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    a += a_off + z * sab;
    b += b_off + z * sbb;
    c += c_off + (pt2c_long)z * M * N;
    bias += bias_off;
    res += res_off + (pt2c_long)z * M * N;
    if (n < N) {
        PT2C_GLOBAL const float *bn = b + (pt2c_long)n * sbn;
        for (int k = lane; k < K; k += 32) {
            const float bv = bn[(pt2c_long)k * sbk];
            for (int m = 0; m < M && m < 4; m++) acc[m] += a[(pt2c_long)m * sam + (pt2c_long)k * sak] * bv;
        }
    }
    for (int m = 0; m < 4; m++) part[m][t] = acc[m];
    PT2C_SYNC();
    for (int s = 16; s > 0; s >>= 1) {
        if (lane < s)
            for (int m = 0; m < 4; m++) part[m][t] += part[m][t + s];
        PT2C_SYNC();
    }
    if (lane == 0 && n < N)
        for (int m = 0; m < M && m < 4; m++) {
            float y = part[m][t];
            if (has_bias) y += bias[bias_per_row ? m : n];
            if (has_res) y += res[(pt2c_long)m * N + n];
            c[(pt2c_long)m * N + n] = pt2c_act(y, act, lo, hi);
        }
}

/* x[c][ih][iw] of one image and group, 0 outside the plane (the convolution's padding) */
PT2C_FN float pt2c_conv_tap(PT2C_GLOBAL const float *x, int c, int ih, int iw, int H, int W)
{
    return (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[((pt2c_long)c * H + ih) * W + iw] : 0.0f;
}

/* 2-d convolution, NCHW, as implicit GEMM per image and group: rows = the group's output channels,
 * columns = output pixels, k = (input channel of the group, kh, kw); the input patch is read in place
 * (zeros outside: the padding before is (ph, pw), after it what OH / OW imply).  w: [OC, C / G, KH, KW].
 * Grid: (ceil(OH OW / 64), ceil(OC / G / 64), N G). */
PT2C_KERNEL pt2c_conv2d(PT2C_T(float, y), PT2C_T(const float, x), PT2C_T(const float, w), PT2C_T(const float, bias),
                        PT2C_T(const float, res), int C, int H, int W, int OC, int KH, int KW, int sh, int sw, int ph,
                        int pw, int dh, int dw, int G, int OH, int OW, int has_bias, int has_res, int act, float lo,
                        float hi)
{
    PT2C_LOCAL float As[PT2C_TK][PT2C_TM + 1];
    PT2C_LOCAL float Bs[PT2C_TK][PT2C_TM];
    const int tx = PT2C_TID(0), ty = PT2C_TID(1), tid = ty * 16 + tx;
    const int Cg = C / G, OCg = OC / G, KK = KH * KW;
    const int M = OCg, N = OH * OW, K = Cg * KK;
    const int n0 = PT2C_BID(0) * PT2C_TM, m0 = PT2C_BID(1) * PT2C_TM, img = PT2C_BID(2) / G, g = PT2C_BID(2) % G;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    x += x_off + ((pt2c_long)img * C + (pt2c_long)g * Cg) * H * W;
    w += w_off + (pt2c_long)g * OCg * K;
    y += y_off + ((pt2c_long)img * OC + (pt2c_long)g * OCg) * N;
    bias += bias_off + g * OCg;
    res += res_off + ((pt2c_long)img * OC + (pt2c_long)g * OCg) * N;
#define PT2C_LW(m, k) w[(pt2c_long)(m) * K + (k)]
#define PT2C_LX(k, p) pt2c_conv_tap(x, (k) / KK, ((k) % KK) / KW * dh + ((p) / OW) * sh - ph, \
                                    ((k) % KK) % KW * dw + ((p) % OW) * sw - pw, H, W)
    PT2C_GEMM_TILES(PT2C_LW, PT2C_LX)
#undef PT2C_LW
#undef PT2C_LX
    PT2C_GEMM_STORE(y, 1)
}

/* Direct convolution, one output element per thread: grouped convolutions with few output channels per
 * group (depthwise), where a GEMM tile would be mostly empty.  Grid: ceil(N OC OH OW / 256). */
PT2C_KERNEL pt2c_conv2d_direct(PT2C_T(float, y), PT2C_T(const float, x), PT2C_T(const float, w),
                               PT2C_T(const float, bias), PT2C_T(const float, res), int NB, int C, int H, int W,
                               int OC, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int G, int OH,
                               int OW, int has_bias, int has_res, int act, float lo, float hi)
{
    const pt2c_long e = PT2C_GID0;
    if (e >= (pt2c_long)NB * OC * OH * OW) return;
    const int ow = (int)(e % OW), oh = (int)((e / OW) % OH), oc = (int)((e / ((pt2c_long)OW * OH)) % OC);
    const int img = (int)(e / ((pt2c_long)OW * OH * OC));
    const int Cg = C / G, g = oc / (OC / G);
    x += x_off + ((pt2c_long)img * C + (pt2c_long)g * Cg) * H * W;
    w += w_off + (pt2c_long)oc * Cg * KH * KW;
    float s = 0.0f;
    for (int c = 0; c < Cg; c++)
        for (int kh = 0; kh < KH; kh++) {
            const int ih = oh * sh - ph + kh * dh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; kw++) {
                const int iw = ow * sw - pw + kw * dw;
                if (iw < 0 || iw >= W) continue;
                s += x[((pt2c_long)c * H + ih) * W + iw] * w[(c * KH + kh) * KW + kw];
            }
        }
    if (has_bias) s += bias[bias_off + oc];
    if (has_res) s += res[res_off + e];
    y[y_off + e] = pt2c_act(s, act, lo, hi);
}

#endif /* PT2C_GPU_GEMM_H */
