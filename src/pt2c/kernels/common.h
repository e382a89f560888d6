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

#define PT2C_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PT2C_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif /* PT2C_COMMON_H */
