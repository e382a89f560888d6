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

#endif /* PT2C_EWISE_H */
