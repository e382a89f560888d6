/* pt2c kernel library: the activations, each defined once, and the epilogue fused into kernels.
 *
 * The scalar activations are what generated elementwise loops call (ops/elementwise.py names
 * pt2c_<act>_<ctype>) and what pt2c_epilogue_act applies after a GEMM, a convolution, ...; the
 * float forms call no libm function (pt2c_erf / pt2c_tanh / pt2c_exp of common.h), so loops over
 * them vectorise.  Vector forms elsewhere: ReLU and clamp in registers (simd.h's PT2C_V8_RELU /
 * CLAMP, the depthwise and AVX-512 tile stores: the same bits as here), GELU 8 lanes at a time with
 * FMAs in pt2c_epilogue_act (pt2c_erf8: within rounding of the scalar form).
 *
 * pt2c_epilogue: C = act(A*B + bias + residual), the last step of every kernel that takes one.
 */
#ifndef PT2C_EPILOGUE_H
#define PT2C_EPILOGUE_H

#include "common.h"
#include "simd.h"

#define PT2C_INLINE static PT2C_UNUSED inline

/* ---- activations ---- */

/* The float activations as expressions, each once: the functions generated code calls and the
 * loops of pt2c_epilogue_act expand the same one.  (Loops calling the functions instead compiled
 * to the same arithmetic, but GCC then inlined and allocated registers differently elsewhere in a
 * model's translation unit.) */
#define PT2C_RELU_F(x) ((x) > 0.0f ? (x) : 0.0f) /* NaN gives 0, as the vector forms */
#define PT2C_GELU_F(x) (0.5f * (x) * (1.0f + pt2c_erf((x) * 0.70710678118654752f))) /* erf form */
#define PT2C_GELU_TANH_F(x) \
    (0.5f * (x) * (1.0f + pt2c_tanh(0.79788456080286536f * ((x) + 0.044715f * (x) * (x) * (x)))))
#define PT2C_SILU_F(x) ((x) / (1.0f + pt2c_exp(-(x))))      /* generated code writes it out inline */
#define PT2C_SIGMOID_F(x) (1.0f / (1.0f + pt2c_exp(-(x)))) /* generated code writes it out inline */
/* hardswish has two forms, which differ in the last bit (x * (1 / 6) against x / 6) and in the sign
 * of the zero below -3: the epilogue's (in pt2c_epilogue_act) and pt2c_hardswish_float below, the
 * elementwise one (torch: x * clamp(x + 3, 0, 6) / 6).  Kept apart until one is chosen, which
 * changes results. */
/* tanh: pt2c_tanh (common.h) */

PT2C_INLINE float pt2c_clamp_float(float x, float lo, float hi) /* relu6, hardtanh; NaN gives lo */
{
    float v = x < lo ? lo : x;
    return v > hi ? hi : v;
}
/* GELU, erf form (torch.nn.functional.gelu default) */
PT2C_INLINE float pt2c_gelu_float(float x) { return PT2C_GELU_F(x); }
PT2C_INLINE double pt2c_gelu_double(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752)); }
/* GELU, tanh approximation (approximate="tanh") */
PT2C_INLINE float pt2c_gelu_tanh_float(float x) { return PT2C_GELU_TANH_F(x); }
PT2C_INLINE double pt2c_gelu_tanh_double(double x) {
    return 0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
}
PT2C_INLINE float pt2c_hardsigmoid_float(float x) { return x <= -3.0f ? 0.0f : x >= 3.0f ? 1.0f : x / 6.0f + 0.5f; }
PT2C_INLINE double pt2c_hardsigmoid_double(double x) { return x <= -3.0 ? 0.0 : x >= 3.0 ? 1.0 : x / 6.0 + 0.5; }
PT2C_INLINE float pt2c_hardswish_float(float x) { return x <= -3.0f ? 0.0f : x >= 3.0f ? x : x * (x + 3.0f) / 6.0f; }
PT2C_INLINE double pt2c_hardswish_double(double x) { return x <= -3.0 ? 0.0 : x >= 3.0 ? x : x * (x + 3.0) / 6.0; }

/* bfloat16 and float16 (IEEE binary16) storage: the bits in a uint16_t.  Conversions from float round
 * to nearest, ties to even, as torch's do; NaN becomes torch's quiet NaN (0x7fc0 / 0x7e00).  Integer
 * arithmetic only, so no compiler flag (-ffast-math, x87) changes the result. */
PT2C_INLINE float pt2c_bits_f32(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
PT2C_INLINE uint32_t pt2c_f32_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
PT2C_INLINE float pt2c_bf16_to_f32(uint16_t h) { return pt2c_bits_f32((uint32_t)h << 16); }
PT2C_INLINE uint16_t pt2c_f32_to_bf16(float f) {
    uint32_t u = pt2c_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* f rounded to the nearest bfloat16, as a float (an op's result in a bfloat16 model) */
PT2C_INLINE float pt2c_round_bf16(float f) {
    uint32_t u = pt2c_f32_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? f : pt2c_bits_f32(r);
}
PT2C_INLINE float pt2c_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (uint32_t)(h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
    float sub;
    if (e == 0x1fu) return pt2c_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e != 0) return pt2c_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    sub = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return sign ? -sub : sub;
}
PT2C_INLINE uint16_t pt2c_f32_to_f16(float f) {
    uint32_t u = pt2c_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu, m, r, rem, half;
    unsigned s;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);      /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* >= 65520 (or inf): inf */
    if (a >= 0x38800000u) {                                       /* a normal half (>= 2^-14) */
        r = a - 0x38000000u;                                      /* exponent bias 127 -> 15 */
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    if (a <= 0x33000000u) return (uint16_t)sign;                  /* <= 2^-25: rounds to zero */
    m = (a & 0x7fffffu) | 0x800000u;                               /* a subnormal half: m >> (126 - exp) */
    s = 126u - (a >> 23);
    r = m >> s;
    rem = m & ((1u << s) - 1u);
    half = 1u << (s - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}
/* f rounded to the nearest float16, as a float, without branches (so that loops of it vectorise): 11
 * significant bits like pt2c_round_bf16 above the subnormal halves, multiples of 2^-24 below them (the
 * addition rounds to nearest even), inf past 65504; equal to pt2c_f16_to_f32(pt2c_f32_to_f16(f)). */
PT2C_INLINE float pt2c_round_f16(float f) {
    const uint32_t u = pt2c_f32_bits(f);
    const float n = pt2c_bits_f32((u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u);
    const float sub = copysignf((f + 0.75f) - 0.75f, f);
    const float r = fabsf(f) < 6.103515625e-05f ? sub : (fabsf(n) > 65504.0f ? copysignf(INFINITY, f) : n);
    return f != f ? f : r;
}

/* ---- epilogue ---- */

enum {
    PT2C_ACT_NONE,
    PT2C_ACT_RELU,
    PT2C_ACT_CLAMP, /* min(max(x,lo),hi): relu6, hardtanh */
    PT2C_ACT_HARDSWISH,
    PT2C_ACT_SILU,
    PT2C_ACT_GELU, /* erf form */
    PT2C_ACT_GELU_TANH,
    PT2C_ACT_SIGMOID,
    PT2C_ACT_TANH
};

/* or'ed into act: the result of each step (the product with bias and residual, then the activation) rounded
 * to bfloat16 / float16, as a reduced-precision model stores every op's result */
#define PT2C_ROUND_BF16 (1 << 8)
#define PT2C_ROUND_F16 (2 << 8)

PT2C_KERNEL void pt2c_round_n(float *x, int n, int rnd)
{
    int j = 0;
    if (rnd == 1) {
        for (; j < n; j++) x[j] = pt2c_round_bf16(x[j]);
        return;
    }
#if defined(PT2C_SIMD_X86) && defined(__F16C__)
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + j), 0)));
#endif
    for (; j < n; j++) x[j] = pt2c_round_f16(x[j]);
}

typedef struct {
    const float *bias; /* NULL, or bias[i] per row (bias_per_row=1, length M) / bias[j] per column (length N) */
    int bias_per_row;
    const float *residual; /* NULL, or C[i][j] += residual[i*ldr + j] (after bias, before act); */
    int ldr;               /* must not alias C */
    int act;
    float lo, hi; /* C = act(A*B + bias + residual) */
} pt2c_epilogue;

/* Applies the activation in place to n contiguous values.  The switch is
 * outside the loops so the simple cases auto-vectorise. */
PT2C_KERNEL void pt2c_epilogue_act(float *x, int n, int act, float lo, float hi)
{
    int j;
    const int rnd = act >> 8;
    act &= 0xff;
    if (rnd) pt2c_round_n(x, n, rnd);
    switch (act) {
    case PT2C_ACT_RELU:
        for (j = 0; j < n; j++) x[j] = PT2C_RELU_F(x[j]);
        break;
    case PT2C_ACT_CLAMP:
        for (j = 0; j < n; j++) x[j] = pt2c_clamp_float(x[j], lo, hi);
        break;
    case PT2C_ACT_HARDSWISH:
        for (j = 0; j < n; j++) {
            float t = x[j] + 3.0f;
            t = t < 0.0f ? 0.0f : (t > 6.0f ? 6.0f : t);
            x[j] = x[j] * t * (1.0f / 6.0f);
        }
        break;
    case PT2C_ACT_SILU:
        for (j = 0; j < n; j++) x[j] = PT2C_SILU_F(x[j]);
        break;
    case PT2C_ACT_GELU:
        j = 0;
#if defined(PT2C_SIMD_X86)
        for (; j + 8 <= n; j += 8) { /* (with FMAs: GCC does not contract the loop below under -std=c99) */
            const __m256 v = _mm256_loadu_ps(x + j);
            const __m256 e = pt2c_erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
            _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                                                  _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
        }
#endif
        for (; j < n; j++) x[j] = PT2C_GELU_F(x[j]);
        break;
    case PT2C_ACT_GELU_TANH:
        for (j = 0; j < n; j++) {
            float v = x[j];
            x[j] = PT2C_GELU_TANH_F(v);
        }
        break;
    case PT2C_ACT_SIGMOID:
        for (j = 0; j < n; j++) x[j] = PT2C_SIGMOID_F(x[j]);
        break;
    case PT2C_ACT_TANH:
        for (j = 0; j < n; j++) x[j] = pt2c_tanh(x[j]);
        break;
    default:
        break;
    }
    if (rnd && act != PT2C_ACT_NONE) pt2c_round_n(x, n, rnd);
}

#endif /* PT2C_EPILOGUE_H */
