/* pt2c kernel library: Winograd F(4x4, 3x3) convolution (pt2c_conv2d_wino).  See conv.c. */
#ifndef PT2C_CONV_WINOGRAD_C
#define PT2C_CONV_WINOGRAD_C

#include "common.h"
#include "gemm.c"

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
#if defined(PT2C_SIMD_X86)
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
#if defined(PT2C_SIMD_X86)
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

#endif /* PT2C_CONV_WINOGRAD_C */
