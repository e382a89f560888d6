/* pt2c kernel library: a 1x1 expansion fused with the depthwise conv that reads it
 * (pt2c_conv2d_pw_dw).  See conv.c.
 */
#ifndef PT2C_CONV_PWDW_C
#define PT2C_CONV_PWDW_C

#include "common.h"
#include "gemm.c"
#include "conv_depthwise.c"

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

#endif /* PT2C_CONV_PWDW_C */
