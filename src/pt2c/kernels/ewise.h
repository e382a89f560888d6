/* pt2c: scalar helpers used by generated elementwise loops (PyTorch semantics). */
#ifndef PT2C_EWISE_H
#define PT2C_EWISE_H

#include "common.h"
#include "epilogue.h"

/* (activations: epilogue.h) */

/* max/min propagate NaN like torch.maximum/minimum */
#define PT2C_MINMAX_F(T, SUF)                                                               \
    PT2C_INLINE T pt2c_max_##T(T a, T b) { return (a != a || b != b) ? (a + b) : (a > b ? a : b); } \
    PT2C_INLINE T pt2c_min_##T(T a, T b) { return (a != a || b != b) ? (a + b) : (a < b ? a : b); } \
    PT2C_INLINE T pt2c_remainder_##T(T a, T b) {                                              \
        T r = fmod##SUF(a, b);                                                              \
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;                                \
    }
PT2C_MINMAX_F(float, f)
PT2C_MINMAX_F(double, )

#define PT2C_MINMAX_I(T)                                                                    \
    PT2C_INLINE T pt2c_max_##T(T a, T b) { return a > b ? a : b; }                           \
    PT2C_INLINE T pt2c_min_##T(T a, T b) { return a < b ? a : b; }                           \
    PT2C_DIV_I(T)
/* integer division rounding toward -inf, remainder with the divisor's sign (Python/torch) */
#define PT2C_DIV_I(T)                                                                       \
    PT2C_INLINE T pt2c_floordiv_##T(T a, T b) {                                              \
        T q = (T)(a / b);                                                                   \
        return (q * b != a && ((a < 0) != (b < 0))) ? (T)(q - 1) : q;                      \
    }                                                                                       \
    PT2C_INLINE T pt2c_remainder_##T(T a, T b) {                                              \
        T r = (T)(a % b);                                                                   \
        return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                          \
    }
PT2C_MINMAX_I(int64_t)
PT2C_MINMAX_I(int32_t)
PT2C_MINMAX_I(int16_t)
PT2C_MINMAX_I(int8_t)
PT2C_INLINE uint8_t pt2c_max_uint8_t(uint8_t a, uint8_t b) { return a > b ? a : b; }
PT2C_INLINE uint8_t pt2c_min_uint8_t(uint8_t a, uint8_t b) { return a < b ? a : b; }
PT2C_INLINE uint8_t pt2c_floordiv_uint8_t(uint8_t a, uint8_t b) { return (uint8_t)(a / b); }
PT2C_INLINE uint8_t pt2c_remainder_uint8_t(uint8_t a, uint8_t b) { return (uint8_t)(a % b); }

PT2C_INLINE int64_t pt2c_ipow(int64_t base, int64_t e) {
    int64_t r = 1;
    if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
    while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}

/* float -> integer conversion without UB on NaN / out of range (result then unspecified, like torch) */
#define PT2C_F2I(T, LO, HI)                                                                 \
    PT2C_INLINE T pt2c_f2i_##T(double x) { return (x == x && x > (double)(LO) - 1.0 && x < (double)(HI) + 1.0) ? (T)x : (T)0; }
PT2C_F2I(int64_t, -9.2233720368547748e18, 9.2233720368547748e18 - 2048.0)
PT2C_F2I(int32_t, INT32_MIN, INT32_MAX)
PT2C_F2I(int16_t, INT16_MIN, INT16_MAX)
PT2C_F2I(int8_t, INT8_MIN, INT8_MAX)
PT2C_F2I(uint8_t, 0, UINT8_MAX)

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
PT2C_INLINE float pt2c_round_f16(float f) { return pt2c_f16_to_f32(pt2c_f32_to_f16(f)); }

#endif /* PT2C_EWISE_H */
