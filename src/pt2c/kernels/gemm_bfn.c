/* pt2c kernel library: a GEMM whose B operand is produced one micro-panel at a time by a callback
 * (convolutions' im2col: conv_gemm.c), on one thread, with gemm.c's micro-kernels and epilogue.
 */
#ifndef PT2C_GEMM_BFN_C
#define PT2C_GEMM_BFN_C

#include "gemm.c"

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

#endif /* PT2C_GEMM_BFN_C */
