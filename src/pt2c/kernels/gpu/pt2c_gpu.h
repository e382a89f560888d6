/* pt2c GPU kernels: the portability layer.  Every GPU kernel is written once against these macros and
 * compiled as OpenCL C (the driver builds the program from source at init) or as CUDA C++ (nvcc).
 *
 *   PT2C_KERNEL        a kernel entry point                 __kernel void / extern "C" __global__ void
 *   PT2C_FN            a device helper function             static inline / static __device__ __forceinline__
 *   PT2C_GLOBAL        a pointer into device memory         __global / (nothing)
 *   PT2C_LOCAL         work-group (shared) memory           __local / __shared__
 *   PT2C_LOCAL_PTR     a pointer parameter into it          __local / (nothing)
 *   PT2C_SYNC()        work-group barrier                   barrier(CLK_LOCAL_MEM_FENCE) / __syncthreads()
 *   PT2C_TID(d), PT2C_BID(d), PT2C_BDIM(d), PT2C_GID0      thread, group, group size; global linear id (dim 0)
 *   PT2C_T(type, x)    a tensor parameter: the buffer and an element offset into it (OpenCL buffers are
 *                      handles, not pointers; the host passes (buffer, offset) pairs in both dialects)
 */
#ifndef PT2C_GPU_H
#define PT2C_GPU_H

#if defined(__OPENCL_VERSION__)
#define PT2C_KERNEL __kernel void
#define PT2C_FN static inline
#define PT2C_GLOBAL __global
#define PT2C_LOCAL __local
#define PT2C_LOCAL_PTR __local
#define PT2C_SYNC() barrier(CLK_LOCAL_MEM_FENCE)
#define PT2C_TID(d) ((int)get_local_id(d))
#define PT2C_BID(d) ((int)get_group_id(d))
#define PT2C_BDIM(d) ((int)get_local_size(d))
#define PT2C_GID0 ((pt2c_long)get_global_id(0))
typedef long pt2c_long;
typedef long int64_t;
typedef int int32_t;
typedef short int16_t;
typedef char int8_t;
typedef uchar uint8_t;
#define INT64_C(v) v##L
/* the C99 float names generated code uses, on OpenCL C's overloaded builtins */
#define expf(x) exp(x)
#define exp2f(x) exp2(x)
#define expm1f(x) expm1(x)
#define logf(x) log(x)
#define log2f(x) log2(x)
#define log10f(x) log10(x)
#define log1pf(x) log1p(x)
#define sqrtf(x) sqrt(x)
#define sinf(x) sin(x)
#define cosf(x) cos(x)
#define tanf(x) tan(x)
#define asinf(x) asin(x)
#define acosf(x) acos(x)
#define atanf(x) atan(x)
#define sinhf(x) sinh(x)
#define coshf(x) cosh(x)
#define tanhf(x) tanh(x)
#define asinhf(x) asinh(x)
#define acoshf(x) acosh(x)
#define atanhf(x) atanh(x)
#define atan2f(y, x) atan2(y, x)
#define erff(x) erf(x)
#define floorf(x) floor(x)
#define ceilf(x) ceil(x)
#define truncf(x) trunc(x)
#define nearbyintf(x) rint(x)
#define powf(x, y) pow(x, y)
#define fmodf(x, y) fmod(x, y)
#define fabsf(x) fabs(x)
#else /* CUDA */
#include <math.h>
#include <stdint.h>
#define PT2C_KERNEL static __global__ void /* internal linkage: several models link into one program */
#define PT2C_FN static __device__ __forceinline__
#define PT2C_GLOBAL
#define PT2C_LOCAL __shared__
#define PT2C_LOCAL_PTR
#define PT2C_SYNC() __syncthreads()
#define PT2C_TID(d) ((int)((d) == 0 ? threadIdx.x : (d) == 1 ? threadIdx.y : threadIdx.z))
#define PT2C_BID(d) ((int)((d) == 0 ? blockIdx.x : (d) == 1 ? blockIdx.y : blockIdx.z))
#define PT2C_BDIM(d) ((int)((d) == 0 ? blockDim.x : (d) == 1 ? blockDim.y : blockDim.z))
#define PT2C_GID0 ((pt2c_long)blockIdx.x * blockDim.x + threadIdx.x)
typedef long long pt2c_long;
#endif

#define PT2C_T(type, x) PT2C_GLOBAL type *x, pt2c_long x##_off
#define PT2C_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PT2C_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PT2C_ERR_INDEX_FLAG 1 /* written to the error word by a kernel that met an index out of range */

/* ---- scalar helpers of generated elementwise code (the same names and PyTorch semantics as the CPU's
 * ewise.h / epilogue.h; float32 and the integer types: GPU targets have no float64) ---- */
#define pt2c_exp(x) expf(x)
#define pt2c_tanh(x) tanhf(x)
#define pt2c_erf(x) erff(x)
PT2C_FN float pt2c_gelu_float(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
PT2C_FN float pt2c_gelu_tanh_float(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
PT2C_FN float pt2c_hardsigmoid_float(float x) { return x <= -3.0f ? 0.0f : x >= 3.0f ? 1.0f : x / 6.0f + 0.5f; }
PT2C_FN float pt2c_hardswish_float(float x) { return x <= -3.0f ? 0.0f : x >= 3.0f ? x : x * (x + 3.0f) / 6.0f; }
PT2C_FN float pt2c_max_float(float a, float b) { return (a != a || b != b) ? (a + b) : (a > b ? a : b); }
PT2C_FN float pt2c_min_float(float a, float b) { return (a != a || b != b) ? (a + b) : (a < b ? a : b); }
PT2C_FN float pt2c_remainder_float(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
#define PT2C_GPU_INT(T)                                                                              \
    PT2C_FN T pt2c_max_##T(T a, T b) { return a > b ? a : b; }                                     \
    PT2C_FN T pt2c_min_##T(T a, T b) { return a < b ? a : b; }                                     \
    PT2C_FN T pt2c_floordiv_##T(T a, T b) {                                                          \
        T q = (T)(a / b);                                                                            \
        return (q * b != a && ((a < 0) != (b < 0))) ? (T)(q - 1) : q;                               \
    }                                                                                                \
    PT2C_FN T pt2c_remainder_##T(T a, T b) {                                                         \
        T r = (T)(a % b);                                                                            \
        return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                                   \
    }
PT2C_GPU_INT(int64_t)
PT2C_GPU_INT(int32_t)
PT2C_GPU_INT(int16_t)
PT2C_GPU_INT(int8_t)
PT2C_FN uint8_t pt2c_max_uint8_t(uint8_t a, uint8_t b) { return a > b ? a : b; }
PT2C_FN uint8_t pt2c_min_uint8_t(uint8_t a, uint8_t b) { return a < b ? a : b; }
PT2C_FN uint8_t pt2c_floordiv_uint8_t(uint8_t a, uint8_t b) { return (uint8_t)(a / b); }
PT2C_FN uint8_t pt2c_remainder_uint8_t(uint8_t a, uint8_t b) { return (uint8_t)(a % b); }
PT2C_FN int64_t pt2c_ipow(int64_t base, int64_t e) {
    int64_t r = 1;
    if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
    while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}
/* float -> integer without UB on NaN / out of range (the result is then unspecified, as in torch) */
#define PT2C_GPU_F2I(T, LO, HI) \
    PT2C_FN T pt2c_f2i_##T(float x) { return (x == x && x > (float)(LO) - 1.0f && x < (float)(HI) + 1.0f) ? (T)x : (T)0; }
PT2C_GPU_F2I(int64_t, -9.2233715e18f, 9.2233715e18f)
PT2C_GPU_F2I(int32_t, -2147483520.0f, 2147483520.0f)
PT2C_GPU_F2I(int16_t, -32768, 32767)
PT2C_GPU_F2I(int8_t, -128, 127)
PT2C_GPU_F2I(uint8_t, 0, 255)

/* ---- the epilogue of GEMM and convolution: codes as passed by the host (pt2c/codegen/gpu.py ACT_CODES) ---- */
#define PT2C_ACT_NONE 0
#define PT2C_ACT_RELU 1
#define PT2C_ACT_CLAMP 2
#define PT2C_ACT_HARDSWISH 3
#define PT2C_ACT_SILU 4
#define PT2C_ACT_GELU 5
#define PT2C_ACT_GELU_TANH 6
#define PT2C_ACT_SIGMOID 7
#define PT2C_ACT_TANH 8

PT2C_FN float pt2c_act(float y, int act, float lo, float hi)
{
    switch (act) {
    case PT2C_ACT_RELU: return y > 0.0f ? y : 0.0f;
    case PT2C_ACT_CLAMP: y = y < lo ? lo : y; return y > hi ? hi : y;
    case PT2C_ACT_HARDSWISH: return y * PT2C_MIN(PT2C_MAX(y + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
    case PT2C_ACT_SILU: return y / (1.0f + expf(-y));
    case PT2C_ACT_GELU: return pt2c_gelu_float(y);
    case PT2C_ACT_GELU_TANH: return pt2c_gelu_tanh_float(y);
    case PT2C_ACT_SIGMOID: return 1.0f / (1.0f + expf(-y));
    case PT2C_ACT_TANH: return tanhf(y);
    default: return y;
    }
}

/* ---- work-group reductions (every thread of the group calls them; the group size a power of two <= 256) ---- */
PT2C_FN float pt2c_wg_sum(PT2C_LOCAL_PTR float *buf, float v)
{
    const int t = PT2C_TID(0);
    buf[t] = v;
    PT2C_SYNC();
    for (int s = PT2C_BDIM(0) / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        PT2C_SYNC();
    }
    v = buf[0];
    PT2C_SYNC();
    return v;
}

PT2C_FN float pt2c_wg_max(PT2C_LOCAL_PTR float *buf, float v) /* NaN wins, as in torch.max */
{
    const int t = PT2C_TID(0);
    buf[t] = v;
    PT2C_SYNC();
    for (int s = PT2C_BDIM(0) / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] = pt2c_max_float(buf[t], buf[t + s]);
        PT2C_SYNC();
    }
    v = buf[0];
    PT2C_SYNC();
    return v;
}

#endif /* PT2C_GPU_H */
