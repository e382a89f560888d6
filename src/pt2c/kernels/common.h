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
#else
#define PT2C_OMP(x)
#define PT2C_THREAD_ID() 0
#endif

#ifndef PT2C_MAX_THREADS
#define PT2C_MAX_THREADS 8
#endif

/* ---- SIMD selection (by the compiler's target macros: the target spec sets -m flags) ---- */
#if !defined(PT2C_NO_SIMD) && defined(__AVX512F__)
#define PT2C_SIMD_AVX512 1
#elif !defined(PT2C_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#define PT2C_SIMD_AVX2 1
#elif !defined(PT2C_NO_SIMD) && (defined(__ARM_NEON) || defined(__ARM_NEON__)) && defined(__aarch64__)
#define PT2C_SIMD_NEON 1
#endif

#define PT2C_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PT2C_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif /* PT2C_COMMON_H */
