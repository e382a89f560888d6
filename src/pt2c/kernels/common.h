/* pt2c kernel library: common definitions.
 *
 * Every kernel is a plain C99 function, `static` so that several models can be
 * linked into one program without symbol clashes: the generated model source
 * #includes the kernel files it uses (a single translation unit).
 * Argument order follows llm.c: outputs first, then inputs, then sizes.
 */
#ifndef PT2C_COMMON_H
#define PT2C_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__GNUC__) || defined(__clang__)
#define PT2C_UNUSED __attribute__((unused))
#define PT2C_ALIGNED(n) __attribute__((aligned(n)))
#define PT2C_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define PT2C_UNUSED
#define PT2C_ALIGNED(n)
#define PT2C_LIKELY(x) (x)
#endif

/* Kernel linkage: static (one translation unit per model), no warning when unused. */
#define PT2C_KERNEL static PT2C_UNUSED

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define PT2C_RESTRICT restrict
#else
#define PT2C_RESTRICT
#endif

/* OpenMP is optional: without it these pragmas vanish (no -Wunknown-pragmas). */
#if defined(_OPENMP)
#include <omp.h>
#define PT2C_PRAGMA(x) _Pragma(#x)
#define PT2C_OMP(x) PT2C_PRAGMA(omp x)
#define PT2C_THREAD_ID() omp_get_thread_num()
#define PT2C_TEAM_SIZE() omp_get_num_threads()
#else
#define PT2C_OMP(x)
#define PT2C_THREAD_ID() 0
#define PT2C_TEAM_SIZE() 1
#endif

#ifndef PT2C_MAX_THREADS
#define PT2C_MAX_THREADS 8
#endif

/* Chunks [0, n) of a parallel loop over nt threads (PT2C_MAX_THREADS at most; a smaller team is
 * fine).  Each thread first takes its own contiguous share, in order, so consecutive kernels
 * split alike and a thread mostly reads what it wrote into its own core's cache before
 * (dynamic chunks interleaved the threads: MobileNetV2 at 2 threads 6-8 % slower); once its
 * share is done it takes the others' remaining chunks from their ends, so a thread the OS
 * deschedules delays the loop by about a chunk, not by its whole share.  The lock is the
 * instance's own (a named critical section would export a symbol shared by every model of a
 * program).  Use:
 *   pt2c_chunks ch; pt2c_chunks_init(&ch, n, nt);
 *   PT2C_OMP(parallel num_threads(nt) if (nt > 1)) { int c; while ((c = pt2c_chunks_next(&ch)) >= 0) ... }
 *   pt2c_chunks_done(&ch); */
typedef struct {
    int lo[PT2C_MAX_THREADS], hi[PT2C_MAX_THREADS], nt;
#if defined(_OPENMP)
    omp_lock_t lock;
#endif
} pt2c_chunks;

static inline PT2C_UNUSED void pt2c_chunks_init(pt2c_chunks *s, int n, int nt)
{
    int t;
    s->nt = nt < 1 ? 1 : nt > PT2C_MAX_THREADS ? PT2C_MAX_THREADS : nt;
    for (t = 0; t < s->nt; t++) s->lo[t] = (int)((long)n * t / s->nt), s->hi[t] = (int)((long)n * (t + 1) / s->nt);
#if defined(_OPENMP)
    omp_init_lock(&s->lock);
#endif
}

static inline PT2C_UNUSED void pt2c_chunks_done(pt2c_chunks *s)
{
#if defined(_OPENMP)
    omp_destroy_lock(&s->lock);
#endif
    (void)s;
}

static inline PT2C_UNUSED int pt2c_chunks_next(pt2c_chunks *s)
{
    const int self = PT2C_THREAD_ID() % s->nt;
    int c = -1, v;
#if defined(_OPENMP)
    omp_set_lock(&s->lock);
#endif
    if (s->lo[self] < s->hi[self])
        c = s->lo[self]++;
    else
        for (v = 1; v < s->nt && c < 0; v++) {
            const int o = (self + v) % s->nt;
            if (s->lo[o] < s->hi[o]) c = --s->hi[o];
        }
#if defined(_OPENMP)
    omp_unset_lock(&s->lock);
#endif
    return c;
}

/* ---- SIMD selection (by the compiler's target macros: the target spec sets -m flags) ---- */
#if !defined(PT2C_NO_SIMD) && defined(__AVX512F__)
#define PT2C_SIMD_AVX512 1
#elif !defined(PT2C_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#define PT2C_SIMD_AVX2 1
#elif !defined(PT2C_NO_SIMD) && (defined(__ARM_NEON) || defined(__ARM_NEON__)) && defined(__aarch64__)
#define PT2C_SIMD_NEON 1
#endif

#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
#include <immintrin.h>
/* p[0], p[2], .., p[14] (evens) / p[1], p[3], .., p[15] (odds) as one vector: stride-2 gathers
 * of im2col and max pooling. */
static inline PT2C_UNUSED __m256 pt2c_evens8(const float *p)
{
    const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x88);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
}
static inline PT2C_UNUSED __m256 pt2c_odds8(const float *p)
{
    const __m256 o = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0xDD);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8));
}
/* r[i][j] <- r[j][i] for i, j < 8: eight 8-float rows transposed in registers */
static inline PT2C_UNUSED void pt2c_tr8x8_v(__m256 *r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]),
                 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]),
                 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]),
                 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
/* d_i[j] = s_j[i] for i, j < 8: eight 8-float rows, transposed */
static inline PT2C_UNUSED void pt2c_tr8x8(float *const *d, const float *const *s)
{
    __m256 r[8];
    int i;
    for (i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s[i]);
    pt2c_tr8x8_v(r);
    for (i = 0; i < 8; i++) _mm256_storeu_ps(d[i], r[i]);
}
#endif

/* m ? a : b for floats, as bit operations: GCC (with the default -ftrapping-math) will not
 * if-convert a float ?: whose result feeds more float arithmetic, so a loop over the functions
 * below would not vectorise; this select always does (GCC and Clang). */
static inline PT2C_UNUSED float pt2c_select(int m, float a, float b)
{
    union {
        float f;
        uint32_t u;
    } ua, ub, r;
    const uint32_t k = (uint32_t)0 - (uint32_t)(m != 0);
    ua.f = a, ub.f = b;
    r.u = (ua.u & k) | (ub.u & ~k);
    return r.f;
}

/* erf for float without a libm call, so that loops over it vectorise (GELU): the rational
 * approximation of Eigen / TensorFlow (odd degree-13 / even degree-8 polynomials on x clamped to
 * [-4, 4]).  Max absolute error 4.2e-7 against erf() over [-6, 6] (near +-1 for |x| > 3; tested in
 * tests/test_kernels_misc.py); NaN gives NaN, +-inf gives +-1. */
static inline PT2C_UNUSED float pt2c_erf(float x)
{
    float x2, p, q, r;
    x = pt2c_select(x < -4.0f, -4.0f, x); /* NaN passes through */
    x = pt2c_select(x > 4.0f, 4.0f, x);
    x2 = x * x;
    p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    q = -1.45660718464996e-05f;
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    r = x * p / q;
    r = pt2c_select(r < -1.0f, -1.0f, r); /* the rounding may step just past +-1 */
    return pt2c_select(r > 1.0f, 1.0f, r);
}

/* tanh for float without a libm call (GELU's tanh form, tanh activations): Eigen's rational
 * approximation (odd degree-13 / even degree-6 on x clamped to +-7.905), x itself for |x| < 4e-4.
 * Max absolute and relative error 4e-7 against tanh() (tests/test_kernels_misc.py); NaN gives NaN. */
static inline PT2C_UNUSED float pt2c_tanh(float x)
{
    float c, x2, p, q, r;
    c = pt2c_select(x < -7.90531110763549805f, -7.90531110763549805f, x);
    c = pt2c_select(c > 7.90531110763549805f, 7.90531110763549805f, c);
    x2 = c * c;
    p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 - 8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    r = c * p / q;
    r = pt2c_select(r < -1.0f, -1.0f, r);
    r = pt2c_select(r > 1.0f, 1.0f, r);
    return pt2c_select((x < 4e-4f) & (x > -4e-4f), x, r);
}

/* exp for float without a libm call, so that softmax / attention / SiLU / sigmoid loops
 * vectorise: Cephes' expf (x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial for e^r), 2^n applied
 * as two exact power-of-two factors so that the whole float range is right, gradual underflow
 * included.  Max relative error 2 ulp against exp() (tests/test_kernels_misc.py); -inf gives 0,
 * +inf gives +inf, NaN gives NaN. */
static inline PT2C_UNUSED float pt2c_exp(float x)
{
    union {
        float f;
        uint32_t u;
    } t, s1, s2;
    float c, r, p;
    int32_t n, n1;
    c = pt2c_select(x < -104.0f, -104.0f, x); /* NaN passes through */
    c = pt2c_select(c > 88.7228394f, 88.7228394f, c);
    t.f = c * 1.44269504088896341f + 12582912.0f;                     /* 1.5 * 2^23: round to nearest */
    n = (int32_t)(t.u - 0x4b400000u);                                 /* that integer, from the bits */
    p = t.f - 12582912.0f;
    r = c - p * 0.693359375f;
    r = r + p * 2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    n1 = n / 2; /* 2^n = 2^n1 * 2^(n - n1), each a normal float for n in [-150, 128] */
    s1.u = (uint32_t)(n1 + 127) << 23;
    s2.u = (uint32_t)(n - n1 + 127) << 23;
    p = p * s1.f * s2.f;
    return pt2c_select(x > 88.7228394f, (float)HUGE_VAL, p);
}

/* pt2c_exp, except that results below FLT_MIN (x < -87.3) are 0, so that no subnormal is ever
 * produced: x86 cores make one in microcode, ~100 cycles for the whole vector instruction.
 * Softmax and attention (masked scores are -inf) use it: BERT's padding mask, 4 % masked keys,
 * cost 22 us of a 380 us attention call with pt2c_exp. */
static inline PT2C_UNUSED float pt2c_exp_ftz(float x)
{
    return pt2c_select(x < -87.3f, 0.0f, pt2c_exp(pt2c_select(x < -87.3f, -87.3f, x)));
}

#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
/* pt2c_erf of 8 floats with FMAs (GELU's epilogue): the same rational approximation. */
static inline PT2C_UNUSED __m256 pt2c_erf8(__m256 x)
{
    __m256 x2, p, q;
    x = _mm256_min_ps(_mm256_set1_ps(4.0f), _mm256_max_ps(_mm256_set1_ps(-4.0f), x)); /* (NaN: 2nd operand) */
    x2 = _mm256_mul_ps(x, x);
    p = _mm256_fmadd_ps(_mm256_set1_ps(-2.72614225801306e-10f), x2, _mm256_set1_ps(2.77068142495902e-08f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
    q = _mm256_fmadd_ps(_mm256_set1_ps(-1.45660718464996e-05f), x2, _mm256_set1_ps(-2.13374055278905e-04f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
    p = _mm256_div_ps(_mm256_mul_ps(x, p), q);
    return _mm256_min_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(_mm256_set1_ps(-1.0f), p));
}

/* pt2c_exp_ftz of 8 floats, with FMAs, for softmax arguments (x - max <= 0; right up to x = 88):
 * the same reduction and polynomial, within 2 ulp; 0 below -87.3; NaN stays NaN.  About 4x the
 * throughput of the loop over pt2c_exp_ftz, whose multiply-adds GCC does not contract in ISO C
 * mode and whose selects are integer blends. */
static inline PT2C_UNUSED __m256 pt2c_exp_ftz8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 c = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x)); /* (NaN: 2nd operand) */
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), c), p, e;
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    e = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), _mm256_mul_ps(p, e)); /* 2^n: n in [-126, 127] */
}
#endif
#if defined(PT2C_SIMD_AVX512)
/* pt2c_exp_ftz8 of 16 floats */
static inline PT2C_UNUSED __m512 pt2c_exp_ftz16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __m512 c = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c), p, e;
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    e = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), p, e);
}
#endif

#define PT2C_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PT2C_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif /* PT2C_COMMON_H */
