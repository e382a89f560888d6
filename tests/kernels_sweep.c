/* A self-checking sweep of the vector kernels that take plain (unpacked) operands -- depthwise
 * convolution, attention, max and average pooling -- against the naive references beside them,
 * over pseudo-random shapes.  A stand-alone program, so that it runs where Python does not: under
 * qemu-aarch64 for the NEON paths (tests/test_kernels_sweep.py), and natively for x86 builds.
 *
 *   cc -O2 -std=c99 [-march=...] -I src/pt2c/kernels -I tests tests/kernels_sweep.c -lm
 *   ./a.out [cases per kernel]      prints one line per failure, then a summary; exit 1 on failure
 *
 * Tolerances as tests/test_kernels_naive.py: max abs err <= 1e-5 * max(1, max|ref|); max pooling exact
 * (NaN included).  The harness functions (t_conv, t_sdpa, ...) are those of test_kernels_naive.py,
 * which writes them to kernels_harness.h beside this file before building it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_harness.h"

static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;

static unsigned rnd(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (unsigned)((rng_state * 2685821657736338717ull) >> 32);
}
static int pick(int lo, int hi) { return lo + (int)(rnd() % (unsigned)(hi - lo + 1)); } /* [lo, hi] */
static float unit(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }          /* [-1, 1) */

static float *floats(size_t n, float fill)
{
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    size_t i;
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (i = 0; i < n; i++) p[i] = fill;
    return p;
}
static float *randoms(size_t n)
{
    float *p = floats(n, 0.0f);
    size_t i;
    for (i = 0; i < n; i++) p[i] = unit() + unit();
    return p;
}

/* torch's output size (ceil_mode included) */
static int out_size(int n, int k, int s, int p, int d, int ceil)
{
    const int span = d * (k - 1) + 1;
    int o = (n + 2 * p - span + (ceil ? s - 1 : 0)) / s + 1;
    if (ceil && (o - 1) * s >= n + p) o--;
    return o;
}

static int failures, cases;

static void check(const float *got, const float *ref, size_t n, int exact, const char *what, const int *s, int ns)
{
    double err = 0.0, mx = 1.0;
    size_t i, bad = n;
    int j;
    for (i = 0; i < n; i++) {
        const int gn = got[i] != got[i], rn = ref[i] != ref[i];
        if (gn != rn || (exact && !gn && got[i] != ref[i])) {
            bad = i;
            break;
        }
        if (!gn) {
            if (fabs((double)ref[i]) > mx) mx = fabs((double)ref[i]);
            if (fabs((double)got[i] - (double)ref[i]) > err) err = fabs((double)got[i] - (double)ref[i]);
        }
    }
    cases++;
    if (bad == n && err <= 1e-5 * mx) return;
    failures++;
    printf("FAIL %s", what);
    for (j = 0; j < ns; j++) printf(" %d", s[j]);
    if (bad < n)
        printf(": element %lu is %g, the reference %g\n", (unsigned long)bad, got[bad], ref[bad]);
    else
        printf(": max abs err %.3g > %.3g\n", err, 1e-5 * mx);
}

static void sweep_depthwise(void)
{
    static const int ks[][2] = {{3, 3}, {5, 5}, {3, 5}, {1, 3}, {7, 7}};
    const int k = pick(0, 4), mult = pick(0, 3) ? 1 : 2, N = pick(1, 2), C = pick(1, 12), OC = C * mult;
    const int act = pick(0, 1) ? pick(0, 2) : pick(0, 8), res_on = pick(0, 1); /* none, relu, clamp: in registers */
    int KH = ks[k][0], KW = ks[k][1], sh = pick(1, 2), sw = pick(0, 3) ? sh : 3 - sh, dh = pick(0, 4) ? 1 : 2;
    int dw = pick(0, 4) ? dh : 3 - dh, ph = pick(0, (dh * (KH - 1)) / 2), pw = pick(0, (dw * (KW - 1)) / 2);
    int H = pick(dh * (KH - 1) + 1, pick(0, 3) ? 40 : 120), W = pick(dw * (KW - 1) + 1, pick(0, 3) ? 40 : 150);
    int OH, OW;
    if (pick(0, 1)) /* half the draws: the 3x3 shapes with their own paths (stride 1 or 2, padding 1) */
        KH = KW = 3, sw = sh, dh = dw = 1, ph = pw = 1, H = pick(3, 72), W = pick(3, 90);
    OH = out_size(H, KH, sh, ph, dh, 0), OW = out_size(W, KW, sw, pw, dw, 0);
    int s[16];
    const size_t no = (size_t)N * OC * OH * OW;
    float *x = randoms((size_t)N * C * H * W), *w = randoms((size_t)OC * KH * KW), *b = randoms((size_t)OC);
    float *res = res_on ? randoms(no) : NULL, *ref = floats(no, NAN), *got = floats(no, NAN), *scratch;
    s[0] = N, s[1] = C, s[2] = H, s[3] = W, s[4] = OC, s[5] = KH, s[6] = KW, s[7] = sh, s[8] = sw, s[9] = ph;
    s[10] = pw, s[11] = dh, s[12] = dw, s[13] = C, s[14] = OH, s[15] = OW;
    scratch = floats(t_dw_scratch(s), NAN); /* NaN: a read of unwritten scratch shows */
    t_conv(5, ref, x, w, b, res, act, -0.5f, 0.5f, s, NULL);
    t_conv(4, got, x, w, b, res, act, -0.5f, 0.5f, s, scratch);
    check(got, ref, no, 0, "depthwise N C H W OC KH KW sh sw ph pw dh dw groups OH OW:", s, 16);
    free(x), free(w), free(b), free(res), free(ref), free(got), free(scratch);
}

static void sweep_sdpa(void)
{
    const int B = pick(1, 2), Hkv = pick(1, 3), H = Hkv * pick(1, 2), Lq = pick(1, pick(0, 1) ? 8 : 140);
    const int Lk = pick(1, pick(0, 1) ? 20 : 300), D = pick(1, 9) * 8 - pick(0, 1) * pick(0, 7);
    const int Dv = pick(0, 1) ? D : pick(1, 80), causal = pick(0, 2) == 0, masked = pick(0, 2) == 0;
    int s[8];
    long ms[4] = {0, 0, 0, 0};
    const size_t no = (size_t)B * H * Lq * Dv;
    float *q = randoms((size_t)B * H * Lq * D), *k = randoms((size_t)B * Hkv * Lk * D);
    float *v = randoms((size_t)B * Hkv * Lk * Dv), *ma = NULL, *ref = floats(no, NAN), *got = floats(no, NAN);
    float *scratch, *nscratch = floats((size_t)Lk, 0.0f);
    size_t i;
    s[0] = B, s[1] = H, s[2] = Hkv, s[3] = Lq, s[4] = Lk, s[5] = D, s[6] = Dv, s[7] = causal;
    if (masked) { /* an additive [B, 1, 1, Lk] padding mask with -inf on some keys (never all of them) */
        ma = randoms((size_t)B * Lk);
        for (i = 0; i < (size_t)B * Lk; i++)
            if (i % (size_t)Lk && pick(0, 4) == 0) ma[i] = -INFINITY;
        ms[0] = Lk, ms[3] = 1;
    }
    scratch = floats(t_sdpa_scratch(Lq, Lk, D, Dv), NAN);
    t_sdpa(1, ref, q, k, v, ma, NULL, ms, s, 1.0f / sqrtf((float)D), NULL, nscratch);
    t_sdpa(0, got, q, k, v, ma, NULL, ms, s, 1.0f / sqrtf((float)D), NULL, scratch);
    check(got, ref, no, 0, "sdpa B H Hkv Lq Lk D Dv causal:", s, 8);
    free(q), free(k), free(v), free(ma), free(ref), free(got), free(scratch), free(nscratch);
}

static void sweep_pool(int max)
{
    const int NC = pick(1, 6), KH = pick(1, 5), KW = pick(0, 2) ? KH : pick(1, 5), sh = pick(1, 3);
    const int sw = pick(0, 2) ? sh : pick(1, 3), dh = max && pick(0, 4) == 0 ? 2 : 1, dw = dh;
    const int ph = pick(0, KH / 2), pw = pick(0, KW / 2), ceil = pick(0, 3) == 0;
    const int H = pick(dh * (KH - 1) + 1, 40), W = pick(dw * (KW - 1) + 1, pick(0, 3) ? 40 : 200);
    const int OH = out_size(H, KH, sh, ph, dh, ceil), OW = out_size(W, KW, sw, pw, dw, ceil);
    int s[15];
    const size_t n = (size_t)NC * H * W, no = (size_t)NC * OH * OW;
    float *x = randoms(n), *ref = floats(no, 7.0f), *got = floats(no, 7.0f);
    if (max && n > 8) x[rnd() % n] = NAN; /* NaN wins its windows */
    s[0] = NC, s[1] = H, s[2] = W, s[3] = KH, s[4] = KW, s[5] = sh, s[6] = sw, s[7] = ph, s[8] = pw, s[9] = dh;
    s[10] = dw, s[11] = OH, s[12] = OW, s[13] = pick(0, 1), s[14] = pick(0, 4) ? 0 : pick(1, 9);
    if (max) {
        t_maxpool(1, ref, x, s), t_maxpool(0, got, x, s);
        check(got, ref, no, 1, "maxpool NC H W KH KW sh sw ph pw dh dw OH OW:", s, 13);
    } else {
        t_avgpool(1, ref, x, s), t_avgpool(0, got, x, s);
        check(got, ref, no, 0, "avgpool NC H W KH KW sh sw ph pw dh dw OH OW cip div:", s, 15);
    }
    free(x), free(ref), free(got);
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 200;
    int i;
    for (i = 0; i < n; i++) sweep_depthwise(), sweep_sdpa(), sweep_pool(1), sweep_pool(0);
    printf("sweep: %d cases, %d failed\n", cases, failures);
    return failures ? 1 : 0;
}
