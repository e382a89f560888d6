/* pt2c kernels: a matrix product per row with a weight chosen by an index (mixture-of-experts layers).
 *
 * y[s] = W[ids[s]] applied to x[s] for s < S: W holds E weights, each a K x N operand B (element (k, n)
 * at w + e*N*K + k*rsb + n*csb: rsb = 1, csb = K for an [N, K] weight (y = W x), rsb = N, csb = 1 for a
 * [K, N] one (y = x W)).  Instead of S products with gathered copies of the weights (what the graph
 * says: index the weights, then a batched product), the rows are grouped by weight: one GEMM per weight
 * used, over the rows that chose it, so each weight is read once per run.
 *
 * scratch: pt2c_gathered_gemm_scratch_floats(S, E, N, K) floats.
 */
#ifndef PT2C_GATHERED_GEMM_C
#define PT2C_GATHERED_GEMM_C

#include "common.h"
#include "gemm.c"

static size_t pt2c_gg_r16(size_t n) { return (n + 15) / 16 * 16; }

PT2C_KERNEL size_t pt2c_gathered_gemm_scratch_floats(int S, int E, int N, int K)
{
    /* row order + bucket starts (int64, 2 floats each), the gathered rows, their results, the GEMM's */
    return pt2c_gg_r16(2 * ((size_t)S + (size_t)E + 1)) + pt2c_gg_r16((size_t)S * K) + pt2c_gg_r16((size_t)S * N)
           + pt2c_sgemm_scratch_floats_ex(S, N, K, 0, 0);
}

/* 0, or 1 when an index is outside [-E, E) (negative ones count from the end, as in PyTorch); nothing is
 * written then. */
PT2C_KERNEL int pt2c_gathered_gemm(float *y, const float *x, const int64_t *ids, const float *w, int S, int E,
                                   int N, int K, int rsb, int csb, float *scratch)
{
    int64_t *order = (int64_t *)scratch, *start = order + S;
    float *a = scratch + pt2c_gg_r16(2 * ((size_t)S + (size_t)E + 1));
    float *c = a + pt2c_gg_r16((size_t)S * K), *gemm = c + pt2c_gg_r16((size_t)S * N);
    int s, e;
    for (s = 0; s < S; s++)
        if (ids[s] < -E || ids[s] >= E) return 1;
    /* counting sort of the rows by weight */
    for (e = 0; e <= E; e++) start[e] = 0;
    for (s = 0; s < S; s++) start[(ids[s] + E) % E + 1]++;
    for (e = 0; e < E; e++) start[e + 1] += start[e];
    for (s = 0; s < S; s++) {
        const int64_t k = (ids[s] + E) % E;
        order[start[k]++] = s;
    }
    for (e = E; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
    for (e = 0; e < E; e++) {
        const int rows = (int)(start[e + 1] - start[e]);
        int j;
        if (rows == 0) continue;
        for (j = 0; j < rows; j++)
            memcpy(a + (size_t)j * K, x + (size_t)order[start[e] + j] * K, (size_t)K * sizeof(float));
        pt2c_sgemm(c, N, a, K, 1, 0, w + (size_t)e * N * K, rsb, csb, 0, rows, N, K, NULL, gemm);
        for (j = 0; j < rows; j++)
            memcpy(y + (size_t)order[start[e] + j] * N, c + (size_t)j * N, (size_t)N * sizeof(float));
    }
    return 0;
}

#endif
