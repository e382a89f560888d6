/* pt2c kernel library: single-precision GEMM with fused epilogue.
 *
 *   C[i*ldc + j] = act(sum_k A(i,k) B(k,j) + bias + residual)
 *
 * Structure follows BLIS/GotoBLAS: three cache-blocking loops (jc over NC
 * columns, pc over KC depth, ic over MC rows) around a 6x16 register-tiled
 * micro-kernel.  The operand that is not already packed is copied into
 * contiguous micro-panels in `scratch`, so the micro-kernel always streams
 * B as NR-wide rows and reads A either from a packed panel or (skinny M, where
 * packing A is pure overhead) straight from the strided source.
 *
 * Packed layouts (independent of KC/MC/NC, produced at compile time by
 * pt2c/kernels/layout.py for weights):
 *   A: element (i,k) at A[(i/MR)*MR*K + k*MR + i%MR], rows past M are zero
 *   B: element (k,j) at B[(j/NR)*NR*K + k*NR + j%NR], columns past N are zero
 * so the k-range [k0,k0+kc) of a panel is simply an offset of k0*MR / k0*NR.
 *
 * The micro-kernel is written once against a tiny 8-lane vector layer
 * (AVX2/AVX-512: __m256, NEON: two float32x4_t) with a plain C fallback.
 *
 * Files (gemm.c includes the ones above it; conv_gemm.c includes gemm_bfn.c):
 *   epilogue.h             activations and the pt2c_epilogue applied to every tile
 *   gemm.h                 micro-tile and blocking constants, the 8-lane vector layer
 *   gemm_ukernel.c         the micro-kernels (8-lane layer or plain C)
 *   gemm_ukernel_zmm.c     the AVX-512 micro-kernels
 *   gemm_pack.c            packing of A and B
 *   gemm.c                 the drivers (blocking, threads, prefetch shares), pt2c_sgemm and
 *                          its plain reference pt2c_sgemm_naive
 *   gemm_bfn.c             a GEMM whose B is made panel by panel by a callback (conv's im2col)
 */
#ifndef PT2C_GEMM_C
#define PT2C_GEMM_C

#include "common.h"
#include "gemm.h"
#include "gemm_ukernel.c"
#include "gemm_ukernel_zmm.c"
#include "gemm_pack.c"

/* ---- drivers ---- */

static size_t pt2c_gemm_round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Scratch of one thread: a packed A block (unless A is pre-packed or skinny
 * enough to be read in place) followed by a packed B block (unless B is
 * pre-packed). */
static size_t pt2c_gemm_thread_floats(int M, int N, int K, int a_packed, int b_packed)
{
    size_t mc = (size_t)PT2C_MIN(PT2C_GEMM_MC, (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR);
    size_t nc = (size_t)PT2C_MIN(PT2C_GEMM_NC, (N + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR * PT2C_GEMM_NR);
    size_t kc = (size_t)PT2C_MIN(PT2C_GEMM_KC, K);
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    return (!a_packed && M > PT2C_GEMM_SKINNY_M ? pt2c_gemm_round16(mc * kc) : 0) +
           (!b_packed ? pt2c_gemm_round16(kc * nc) : 0);
}

/* How pt2c_sgemm splits an M x N x K product when nt_avail threads are
 * available: returns the threads it runs; *split_n: chunks are column
 * (else row) slabs; *nchunk: chunks (pt2c_chunks); *cm x *cn: the
 * largest chunk (what one thread's scratch must hold). */
static int pt2c_gemm_plan(int M, int N, int K, int a_packed, int nt_avail, int *split_n, int *nchunk, int *cm,
                          int *cn)
{
    /* work in multiply-adds; a skinny product (M <= 16) streams B from memory for few of them, so
     * it counts as 16 rows: a GEMV over a 784 x 1024 weight (0.8 M MACs, 3.2 MB) then takes both
     * threads (122 -> 72 us) */
    long macs = (long)PT2C_MAX(M, PT2C_GEMM_SKINNY_M) * N * K;
    int mt = (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR, npan = (N + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR;
    int nt = (int)PT2C_MIN((long)nt_avail, macs / PT2C_GEMM_MIN_MACS_PER_THREAD), units, nc, cu;
    /* Column slabs when N is the longer side, except for a pre-packed A (conv weights) with more
     * rows than depth (expanding 1x1 convs): there each thread writes whole output channels, as
     * the depthwise conv that follows reads them, and only the smaller input is read by both
     * (columns: MobileNetV2 at 2 threads 3 % slower) */
    *split_n = npan >= nt && (N >= M || mt < nt) && !(a_packed && M > K && mt >= 2 * nt);
    nt = PT2C_MIN(nt, *split_n ? npan : mt);
    if (nt < 1) nt = 1;
    units = *split_n ? npan : mt;
    /* at least half the per-thread minimum work per chunk */
    nc = nt > 1 ? (int)PT2C_MIN((long)PT2C_MIN(units, nt * PT2C_GEMM_CHUNKS_PER_THREAD),
                                macs / (PT2C_GEMM_MIN_MACS_PER_THREAD / 2))
                : 1;
    if (nc < nt) nc = nt;
    cu = (units + nc - 1) / nc;
    *nchunk = nc;
    *cm = nc == 1 || *split_n ? M : PT2C_MIN(M, cu * PT2C_GEMM_MR);
    *cn = nc == 1 || !*split_n ? N : PT2C_MIN(N, cu * PT2C_GEMM_NR);
    return nt;
}

/* Column chunks would each pack the same A again (every chunk has all M rows): pack it once,
 * shared, first (up to PT2C_GEMM_SHARED_A_FLOATS; the chunks then use it as pre-packed A). */
#ifndef PT2C_GEMM_SHARED_A_FLOATS
#define PT2C_GEMM_SHARED_A_FLOATS (1L << 20)
#endif

static size_t pt2c_gemm_apack_floats(int M, int K)
{
    return (size_t)(M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR * PT2C_GEMM_MR * (size_t)K;
}

static int pt2c_gemm_share_a(int M, int K, int a_packed, int split_n, int nchunk)
{
    return !a_packed && M > PT2C_GEMM_SKINNY_M && split_n && nchunk > 1 &&
           pt2c_gemm_apack_floats(M, K) <= (size_t)PT2C_GEMM_SHARED_A_FLOATS;
}

/* Scratch (floats) of pt2c_sgemm for operands packed as given, whatever the
 * number of threads available (1 .. PT2C_MAX_THREADS): one region per thread,
 * each as large as the packing of the largest chunk needs. */
PT2C_KERNEL size_t pt2c_sgemm_scratch_floats_ex(int M, int N, int K, int a_packed, int b_packed)
{
    size_t best = 0;
    int avail, split_n, nchunk, cm, cn;
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    for (avail = 1; avail <= PT2C_MAX_THREADS; avail++) {
        int nt = pt2c_gemm_plan(M, N, K, a_packed, avail, &split_n, &nchunk, &cm, &cn);
        size_t need = pt2c_gemm_share_a(M, K, a_packed, split_n, nchunk)
                          ? pt2c_gemm_round16(pt2c_gemm_apack_floats(M, K)) +
                                (size_t)nt * pt2c_gemm_thread_floats(cm, cn, K, 1, b_packed)
                          : (size_t)nt * pt2c_gemm_thread_floats(cm, cn, K, a_packed, b_packed);
        best = PT2C_MAX(best, need);
    }
    return best;
}

/* Scratch (floats) of pt2c_sgemm whatever the packing (both operands unpacked). */
PT2C_KERNEL size_t pt2c_sgemm_scratch_floats(int M, int N, int K)
{
    return pt2c_sgemm_scratch_floats_ex(M, N, K, 0, 0);
}

/* Share i of n of the kc rows (bs floats apart) of the next B micro-panel(s), pre-packed or
 * read in place: what micro-kernel call i of the n that use the current one prefetches (into
 * L2), a row per 8 k steps and the rest after its k loop (pfb, pfn: the first row, the count).
 * Pre-packed weights too large to stay cached between runs come from memory once per run, at
 * the first of the n calls that use a panel; prefetched this way, the next panel's first use
 * does not wait: 8-25 % on linears with 24-128 rows and 7x7 convs whose weights are not in
 * cache.  Spread over the k loop instead of issued in a burst before each call: GPT-2 (its LM
 * head streams 51 MB of weights) 0.86-0.89x, the batch-64 MLP 0.94-0.98x, ResNet-18 0.95-0.96x.
 * Not for one row panel or in-place A (GEMV and up to 16 rows, all of K at once): there the
 * hardware prefetcher keeps up with the plain stream and the prefetches only got in its way. */
PT2C_GEMM_INLINE const float *pt2c_gemm_pf_share(const float *b, ptrdiff_t bs, int kc, int i, int n, int *pfn)
{
    const int l0 = (int)((long)kc * i / n);
    *pfn = (int)((long)kc * (i + 1) / n) - l0;
    return b + (ptrdiff_t)l0 * bs;
}

/* One thread's share: the full blocked algorithm on an M x N block of C.
 * Packed operands start at a panel boundary (the caller splits on MR/NR).  a_packed: 0 no,
 * 1 pre-packed (weights: prefetched), 2 packed into scratch just before (in cache). */
static void pt2c_gemm_serial(float *C, int ldc, const float *A, int rsa, int csa, int a_packed, const float *B,
                             int rsb, int csb, int b_packed, int M, int N, int K, const pt2c_epilogue *ep,
                             float *scratch)
{
    const int MR = PT2C_GEMM_MR, NR = PT2C_GEMM_NR;
    /* A few rows of an unpacked A are used in place: packing would cost as much
     * as the (memory-bound) product itself. */
    int a_direct = !a_packed && M <= PT2C_GEMM_SKINNY_M;
    int pack_a = !a_packed && !a_direct;
    /* An unpacked B with contiguous rows is read in place when few rows of A reuse each panel
     * (1x1 convs): packing it costs more than the reads it saves. */
    const int b_direct = !b_packed && csb == 1 && !a_direct && M <= PT2C_GEMM_B_DIRECT_M;
    /* Pre-packed weights times a B of 128-256 columns read in place (1x1 convs on 14x14 maps): A
     * panel outer, so each weights panel is streamed in while the one before meets every B panel,
     * instead of all of them in the first pass over B.  See PT2C_GEMM_A_OUTER_N. */
#if defined(PT2C_SIMD_AVX512)
    const int a_outer = 0;
#else
    const int a_outer = a_packed == 1 && b_direct && N >= 8 * PT2C_GEMM_NR && N <= PT2C_GEMM_A_OUTER_N &&
                        PT2C_GEMM_EP_IN_REGS(ep);
#endif
    /* With packed B and in-place A nothing needs a buffer, so take all of K at
     * once: C is then written exactly once. */
    int kmax = (a_direct && b_packed) ? K : PT2C_GEMM_KC;
    int nkb = (K + kmax - 1) / kmax;
    int kcb = (K + nkb - 1) / nkb; /* balanced k blocks */
    /* Activations dearer than a compare (GELU, SiLU, ...) run over whole rows of C once a block's
     * last k block is stored: per tile row of 16 (pt2c_gemm_store_tile) their loops hardly
     * vectorise, and the micro-kernels then keep the rest of the epilogue in registers. */
    const int late_act = PT2C_GEMM_EP_IN_REGS(ep) ? PT2C_ACT_NONE : ep->act;
    const int kb = b_packed && rsb > 0 ? rsb : K; /* the depth of pre-packed B's panels (pt2c_sgemm) */
    pt2c_epilogue ep_early;
    float *abuf = scratch;
    float *bbuf = scratch && pack_a ? scratch + pt2c_gemm_round16((size_t)PT2C_MIN(PT2C_GEMM_MC, (M + MR - 1) / MR * MR) *
                                                                  (size_t)PT2C_MIN(PT2C_GEMM_KC, K))
                                    : scratch;
    int jc, pc, ic, jr, ir;

    if (late_act) {
        ep_early = *ep;
        ep_early.act = PT2C_ACT_NONE;
        ep = ep_early.bias || ep_early.residual ? &ep_early : NULL;
    }
    for (jc = 0; jc < N; jc += PT2C_GEMM_NC) {
        int nc = PT2C_MIN(PT2C_GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += kcb) {
            int kc = PT2C_MIN(kcb, K - pc);
            int acc = pc > 0;
            const pt2c_epilogue *epk = pc + kc == K ? ep : NULL;
            const float *bp;
            ptrdiff_t bps, bs = NR; /* distance between B micro-panels, between their rows */
            if (b_packed) {
                bp = B + (ptrdiff_t)jc * kb + (ptrdiff_t)pc * NR;
                bps = (ptrdiff_t)NR * kb;
            } else if (b_direct) { /* in place; a last partial panel packed (zero-padded) into bbuf */
                bp = B + (ptrdiff_t)pc * rsb + jc;
                bps = NR;
                bs = rsb;
                if (nc % NR) pt2c_gemm_pack_b(bbuf, bp + nc / NR * NR, rsb, 1, kc, nc % NR);
            } else {
                pt2c_gemm_pack_b(bbuf, B + (ptrdiff_t)pc * rsb + (ptrdiff_t)jc * csb, rsb, csb, kc, nc);
                bp = bbuf;
                bps = (ptrdiff_t)NR * kc;
            }
            for (ic = 0; ic < M; ic += PT2C_GEMM_MC) {
                int mc = PT2C_MIN(PT2C_GEMM_MC, M - ic);
                const float *ap;
                ptrdiff_t aps; /* distance between A micro-panels */
                if (a_packed) {
                    ap = A + (ptrdiff_t)ic * K + (ptrdiff_t)pc * MR;
                    aps = (ptrdiff_t)MR * K;
                } else if (pack_a) {
                    pt2c_gemm_pack_a(abuf, A + (ptrdiff_t)ic * rsa + (ptrdiff_t)pc * csa, rsa, csa, mc, kc);
                    ap = abuf;
                    aps = (ptrdiff_t)MR * kc;
                } else {
                    ap = A + (ptrdiff_t)ic * rsa + (ptrdiff_t)pc * csa;
                    aps = (ptrdiff_t)MR * rsa;
                }
                if (a_outer) { /* A panel outer (see PT2C_GEMM_A_OUTER_N) */
                    const int njr = (nc + NR - 1) / NR;
                    const size_t abytes = (size_t)kc * MR * sizeof(float);
                    for (ir = 0; ir < mc; ir += MR) {
                        const int mr = PT2C_MIN(MR, mc - ir);
                        const float *ai = ap + (ir / MR) * aps, *an = ir + MR < mc ? ai + aps : NULL;
                        for (jr = 0; jr < nc; jr += NR) {
                            const int nr = PT2C_MIN(NR, nc - jr), q = jr / NR;
                            float *c = C + (ptrdiff_t)(ic + ir) * ldc + jc + jr;
                            if (an) { /* share q of njr of the next A panel */
                                size_t o = (abytes * q / njr) & ~(size_t)63;
                                for (; o < abytes * (q + 1) / njr; o += 64) PT2C_GEMM_PREFETCH_R((const char *)an + o);
                            }
                            if (nr == NR)
                                pt2c_gemm_ukernel_bdirect(kc, ai, bp + q * bps, bs, c, ldc, mr, acc, epk, ic + ir,
                                                          jc + jr, NULL, 0);
                            else
                                pt2c_gemm_ukernel_packed(kc, ai, bbuf, c, ldc, mr, nr, acc, epk, ic + ir, jc + jr, NULL,
                                                         NULL, 0);
                        }
                    }
                    continue;
                }
                /* jr outer: one B micro-panel (L1) meets every A micro-panel (L2). */
                for (jr = 0; jr < nc; jr += NR) {
                    int nr = PT2C_MIN(NR, nc - jr);
                    const float *bj = bp + (jr / NR) * bps;
                    const int pf_a = PT2C_GEMM_PREFETCH_A && a_packed == 1 && jr == 0; /* the first pass over A */
#if defined(PT2C_SIMD_AVX512)
                    if (a_direct && jr + 2 * NR <= nc) { /* the same on rows of A read in place */
                        for (ir = 0; ir < mc; ir += MR)
                            pt2c_gemm_ukernel_x2s_avx512(kc, ap + (ir / MR) * aps, rsa, csa, bj, bj + bps,
                                                         C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc,
                                                         PT2C_MIN(MR, mc - ir), acc, epk, ic + ir, jc + jr);
                        jr += NR;
                        continue;
                    }
                    if (!a_direct && jr + 2 * NR <= nc) { /* two full panels at once, 6 x 32 */
                        for (ir = 0; ir < mc; ir += MR) {
                            const float *pfb = NULL; /* the next pair's share (pt2c_gemm_pf_share) */
                            int pfn = 0;
                            if ((b_packed || b_direct) && mc > MR && jr + 4 * NR <= nc)
                                pfb = pt2c_gemm_pf_share(bj + 2 * bps, bs, kc, ir / MR, (mc + MR - 1) / MR, &pfn);
                            pt2c_gemm_ukernel_x2_avx512(kc, ap + (ir / MR) * aps, bj, bj + bps, bs,
                                                        C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc,
                                                        PT2C_MIN(MR, mc - ir), acc, epk, ic + ir, jc + jr,
                                                        pf_a && ir + MR < mc ? ap + (ir / MR + 1) * aps : NULL, pfb,
                                                        bps, pfn);
                        }
                        jr += NR;
                        continue;
                    }
                    if (!a_direct) { /* the last, odd panel: 6 x 16 in zmm */
                        const float *bq = b_direct && nr < NR ? bbuf : bj;
                        const ptrdiff_t bsq = b_direct && nr < NR ? NR : bs;
                        for (ir = 0; ir < mc; ir += MR)
                            pt2c_gemm_ukernel_x1_avx512(kc, ap + (ir / MR) * aps, bq, bsq,
                                                        C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc,
                                                        PT2C_MIN(MR, mc - ir), nr, acc, epk, ic + ir, jc + jr,
                                                        pf_a && ir + MR < mc ? ap + (ir / MR + 1) * aps : NULL);
                        continue;
                    }
#endif
                    for (ir = 0; ir < mc; ir += MR) {
                        int mr = PT2C_MIN(MR, mc - ir);
                        float *c = C + (ptrdiff_t)(ic + ir) * ldc + jc + jr;
                        const float *ai = ap + (ir / MR) * aps, *pfb = NULL; /* the next panel's share */
                        int pfn = 0;
                        if ((b_packed || b_direct) && !a_direct && mc > MR && jr + NR < nc)
                            pfb = pt2c_gemm_pf_share(bj + bps, bs, kc, ir / MR, (mc + MR - 1) / MR, &pfn);
                        if (a_direct)
                            pt2c_gemm_ukernel_strided(kc, ai, rsa, csa, bj, c, ldc, mr, nr, acc, epk, ic + ir,
                                                      jc + jr);
                        else if (b_direct && nr == NR)
                            pt2c_gemm_ukernel_bdirect(kc, ai, bj, bs, c, ldc, mr, acc, epk, ic + ir, jc + jr, pfb, pfn);
                        else if (b_direct)
                            pt2c_gemm_ukernel_packed(kc, ai, bbuf, c, ldc, mr, nr, acc, epk, ic + ir, jc + jr, NULL,
                                                     NULL, 0);
                        else
                            pt2c_gemm_ukernel_packed(kc, ai, bj, c, ldc, mr, nr, acc, epk, ic + ir, jc + jr,
                                                     pf_a && ir + MR < mc ? ai + aps : NULL, pfb, pfn);
                    }
                }
                if (late_act && pc + kc == K)
                    for (ir = 0; ir < mc; ir++)
                        pt2c_epilogue_act(C + (ptrdiff_t)(ic + ir) * ldc + jc, nc, late_act, ep_early.lo,
                                          ep_early.hi);
            }
        }
    }
}

/* C = act(A*B + bias + residual).  scratch: pt2c_sgemm_scratch_floats_ex(M,
 * N, K, a_packed, b_packed) floats (0, so NULL is fine, when both operands are
 * packed, or when A is unpacked with M <= 16 and B packed).  A pre-packed B
 * (b_packed) has panels of K rows, or of rsb rows when rsb > 0, of which the
 * first K take part: a slice of the reduction, B = panels + k0 * NR. */
PT2C_KERNEL void pt2c_sgemm(float *C, int ldc, const float *A, int rsa, int csa, int a_packed, const float *B,
                            int rsb, int csb, int b_packed, int M, int N, int K, const pt2c_epilogue *ep,
                            float *scratch)
{
    int nt = 1, split_n = 1, units, nchunk, share_a;
    pt2c_chunks chunks;
    size_t per_thread;
    float *apack = NULL;
    if (M <= 0 || N <= 0) return;
    if (ep && !ep->bias && !ep->residual && ep->act == PT2C_ACT_NONE) ep = NULL;
    if (K <= 0) { /* empty sum: C = epilogue(0) */
        float zero[PT2C_GEMM_MR * PT2C_GEMM_NR] = {0.0f};
        int i, j;
        for (i = 0; i < M; i += PT2C_GEMM_MR)
            for (j = 0; j < N; j += PT2C_GEMM_NR)
                pt2c_gemm_store_tile(C + (ptrdiff_t)i * ldc + j, ldc, zero, PT2C_MIN(PT2C_GEMM_MR, M - i),
                                     PT2C_MIN(PT2C_GEMM_NR, N - j), 0, ep, i, j);
        return;
    }

    /* Threads: C is cut into chunks (column slabs if there are enough NR
     * panels and N is the longer side, else row slabs), a few per thread,
     * each thread's own share first (pt2c_chunks); each runs the whole blocked
     * algorithm on its chunk with its thread's scratch region. */
    {
        int avail = 1, cm, cn;
#if defined(_OPENMP)
        if (!omp_in_parallel()) avail = PT2C_MIN(omp_get_max_threads(), PT2C_MAX_THREADS);
#endif
        nt = pt2c_gemm_plan(M, N, K, a_packed, avail, &split_n, &nchunk, &cm, &cn);
        share_a = pt2c_gemm_share_a(M, K, a_packed, split_n, nchunk);
        per_thread = pt2c_gemm_thread_floats(cm, cn, K, share_a || a_packed, b_packed);
        (void)nt; /* only used by OpenMP */
    }
    units = split_n ? (N + PT2C_GEMM_NR - 1) / PT2C_GEMM_NR : (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR;
    if (share_a) {
        apack = scratch;
        scratch += pt2c_gemm_round16(pt2c_gemm_apack_floats(M, K));
    }

    pt2c_chunks_init(&chunks, nchunk, nt);
    PT2C_OMP(parallel num_threads(nt) if (nt > 1))
    {
        int t;
        if (share_a) { /* (the loop's closing barrier: every chunk needs all of A) */
            int p;
            PT2C_OMP(for schedule(static))
            for (p = 0; p < (M + PT2C_GEMM_MR - 1) / PT2C_GEMM_MR; p++)
                pt2c_gemm_pack_a(apack + (ptrdiff_t)p * PT2C_GEMM_MR * K, A + (ptrdiff_t)p * PT2C_GEMM_MR * rsa, rsa,
                                 csa, PT2C_MIN(PT2C_GEMM_MR, M - p * PT2C_GEMM_MR), K);
        }
        while ((t = pt2c_chunks_next(&chunks)) >= 0) {
            int u0 = (int)((long)units * t / nchunk), u1 = (int)((long)units * (t + 1) / nchunk);
            float *sc = scratch ? scratch + (size_t)PT2C_THREAD_ID() * per_thread : NULL;
            pt2c_epilogue e;
            const pt2c_epilogue *et = NULL;
            if (u0 >= u1) continue;
            if (split_n) {
                int j0 = u0 * PT2C_GEMM_NR, n = PT2C_MIN(N, u1 * PT2C_GEMM_NR) - j0;
                if (ep) {
                    e = *ep;
                    if (e.bias && !e.bias_per_row) e.bias += j0;
                    if (e.residual) e.residual += j0;
                    et = &e;
                }
                pt2c_gemm_serial(C + j0, ldc, share_a ? apack : A, rsa, csa, share_a ? 2 : a_packed,
                                 b_packed ? B + (ptrdiff_t)j0 * (rsb > 0 ? rsb : K) : B + (ptrdiff_t)j0 * csb, rsb, csb,
                                 b_packed, M, n, K, et, sc);
            } else {
                int i0 = u0 * PT2C_GEMM_MR, m = PT2C_MIN(M, u1 * PT2C_GEMM_MR) - i0;
                if (ep) {
                    e = *ep;
                    if (e.bias && e.bias_per_row) e.bias += i0;
                    if (e.residual) e.residual += (ptrdiff_t)i0 * e.ldr;
                    et = &e;
                }
                pt2c_gemm_serial(C + (ptrdiff_t)i0 * ldc, ldc,
                                 a_packed ? A + (ptrdiff_t)i0 * K : A + (ptrdiff_t)i0 * rsa, rsa, csa, a_packed, B, rsb,
                                 csb, b_packed, m, N, K, et, sc);
            }
        }
    }
    pt2c_chunks_done(&chunks);
}

/* Reference implementation (tests): same semantics, no blocking, no threads. */
PT2C_KERNEL void pt2c_sgemm_naive(float *C, int ldc, const float *A, int rsa, int csa, int a_packed, const float *B,
                                  int rsb, int csb, int b_packed, int M, int N, int K, const pt2c_epilogue *ep,
                                  float *scratch)
{
    int i, j, k;
    (void)scratch;
    for (i = 0; i < M; i++) {
        float *ci = C + (ptrdiff_t)i * ldc;
        for (j = 0; j < N; j++) {
            double s = 0.0;
            for (k = 0; k < K; k++) {
                float a = a_packed ? A[(ptrdiff_t)(i / PT2C_GEMM_MR) * PT2C_GEMM_MR * K + (ptrdiff_t)k * PT2C_GEMM_MR +
                                       i % PT2C_GEMM_MR]
                                   : A[(ptrdiff_t)i * rsa + (ptrdiff_t)k * csa];
                float b = b_packed ? B[(ptrdiff_t)(j / PT2C_GEMM_NR) * PT2C_GEMM_NR * (rsb > 0 ? rsb : K) +
                                       (ptrdiff_t)k * PT2C_GEMM_NR + j % PT2C_GEMM_NR]
                                   : B[(ptrdiff_t)k * rsb + (ptrdiff_t)j * csb];
                s += (double)a * b;
            }
            ci[j] = (float)s;
        }
        if (ep) {
            for (j = 0; j < N; j++) {
                if (ep->bias) ci[j] += ep->bias_per_row ? ep->bias[i] : ep->bias[j];
                if (ep->residual) ci[j] += ep->residual[(ptrdiff_t)i * ep->ldr + j];
            }
            pt2c_epilogue_act(ci, N, ep->act, ep->lo, ep->hi);
        }
    }
}

#endif /* PT2C_GEMM_C */
