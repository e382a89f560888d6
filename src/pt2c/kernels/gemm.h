/* pt2c kernel library: the GEMM's definitions shared by its parts and by the kernels built on it.
 *
 * Micro-tile (MR x NR, the packed layouts' panel sizes: layout.py mirrors them), cache blocking
 * and threading thresholds, inlining / prefetch macros.  The micro-kernels are written against
 * simd.h's 8-lane type pt2c_v8 (AVX2 and AVX-512: __m256; NEON: two float32x4_t; PT2C_V8
 * undefined: plain C).  See gemm.c.
 */
#ifndef PT2C_GEMM_H
#define PT2C_GEMM_H

#include "common.h"
#include "simd.h"
#include "epilogue.h"

#define PT2C_GEMM_MR 6
#define PT2C_GEMM_NR 16

/* Cache blocking.  KC*NR*4 = 16 KiB: a B micro-panel stays in L1 (32 KiB) while
 * it is reused by every MR-row tile; MC*KC*4 = 144 KiB: the packed A block
 * lives in L2; KC*NC*4 = 2 MiB: the packed B block lives in L2/L3. */
#ifndef PT2C_GEMM_MC
#define PT2C_GEMM_MC 144 /* multiple of MR */
#endif
#ifndef PT2C_GEMM_KC
#define PT2C_GEMM_KC 256
#endif
#ifndef PT2C_GEMM_NC
#define PT2C_GEMM_NC 2048 /* multiple of NR */
#endif
/* At most this many rows of an unpacked A are read in place (GEMV-like). */
#define PT2C_GEMM_SKINNY_M 16
/* At most this many rows of A (packed, or more than SKINNY_M) make an unpacked B with contiguous
 * rows be read in place: one row block, so each B panel comes from its source once per k block
 * (1x1 convs, 16-192 output channels: 0-37 % faster than packing B first). */
#ifndef PT2C_GEMM_B_DIRECT_M
#define PT2C_GEMM_B_DIRECT_M PT2C_GEMM_MC
#endif
/* At most this many columns (of one thread's chunk) for the A-panel-outer order of pre-packed A
 * and in-place B (pt2c_gemm_serial: a_outer).  With B's columns outer, the first pass over B
 * meets every weights panel, so all of A streams in from memory during 1/13 of the work (196
 * pixels): 384 -> 64 at 14x14 with its weights flushed from the caches 127 -> 98 us (93 with them
 * in cache), 576 -> 96 233 -> 216 us.  At 28x28 (784 columns) A-outer lost as much when the input
 * came from memory (122 -> 152 us); below 8 panels the next panel's prefetch came in bursts.  Not
 * on AVX-512, where the 6 x 32 kernel's own prefetches did better (72 vs 90 us). */
#ifndef PT2C_GEMM_A_OUTER_N
#define PT2C_GEMM_A_OUTER_N 256
#endif
/* Minimum multiply-adds per thread before a call is split across threads. */
#define PT2C_GEMM_MIN_MACS_PER_THREAD (1L << 19)
/* Work chunks per thread (pt2c_chunks: its own share first, then others' leftovers): a thread
 * that the OS deschedules (a shared or oversubscribed machine) then delays the call by about
 * one chunk instead of by its whole share. */
#ifndef PT2C_GEMM_CHUNKS_PER_THREAD
#define PT2C_GEMM_CHUNKS_PER_THREAD 4
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PT2C_GEMM_INLINE static inline __attribute__((always_inline))
#define PT2C_GEMM_PREFETCH_W(p) __builtin_prefetch((p), 1)
#define PT2C_GEMM_PREFETCH_R(p) __builtin_prefetch((p), 0, 1)
#else
#define PT2C_GEMM_INLINE static inline
#define PT2C_GEMM_PREFETCH_W(p) ((void)(p))
#define PT2C_GEMM_PREFETCH_R(p) ((void)(p))
#endif

#endif /* PT2C_GEMM_H */
