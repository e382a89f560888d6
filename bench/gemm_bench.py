"""Single-thread SGEMM throughput: pt2c_sgemm vs numpy (np.matmul) vs torch.mm.

    python bench/gemm_bench.py [--reps N] [--march x86-64-v3|x86-64-v4] [--hide-avx512]

Builds src/pt2c/kernels/gemm.c with gcc -O3 -march=x86-64-v3 (AVX2+FMA; x86-64-v4: the AVX-512
micro-kernel; no OpenMP, so one thread) into a temporary shared library.  Two peaks: the
nominal one, 2 FMA pipes x the build's vector lanes x 2 flop x the clock that /proc/cpuinfo
reports as "cpu MHz" (turbo can push measured figures above it; a CPU whose 512-bit FMAs run
at half rate has half that), and the rate of a loop of 12 independent FMA chains of the
build's widest vectors, measured in the same run.  --hide-avx512 (see bench/hide_avx512.py):
numpy's and torch's BLAS see an AVX2+FMA CPU, as on the machine the benchmark was specified for.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse
import ctypes
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "src" / "pt2c" / "kernels"
sys.path.insert(0, str(ROOT / "src"))
from pt2c.kernels.layout import pack_b
from pt2c.runtime.runner import aligned_copy

import hide_avx512

WRAPPER = r"""
#include "gemm.c"
/* FMA throughput probe: 12 independent FMA chains of the widest vectors built for, n iterations. */
#include <immintrin.h>
#if defined(__AVX512F__)
#define BV __m512
#define BV_SET1 _mm512_set1_ps
#define BV_FMA _mm512_fmadd_ps
#define BV_ADD _mm512_add_ps
#define BV_STORE _mm512_storeu_ps
#define BV_LANES 16
#else
#define BV __m256
#define BV_SET1 _mm256_set1_ps
#define BV_FMA _mm256_fmadd_ps
#define BV_ADD _mm256_add_ps
#define BV_STORE _mm256_storeu_ps
#define BV_LANES 8
#endif
int bench_fma_lanes(void) { return BV_LANES; }
float bench_fma_peak(long n)
{
    BV x[12], m = BV_SET1(0.999f), d = BV_SET1(1e-3f);
    long i;
    int j;
    float r[BV_LANES], s = 0.0f;
    for (j = 0; j < 12; j++) x[j] = BV_SET1((float)j);
    for (i = 0; i < n; i++)
        for (j = 0; j < 12; j++) x[j] = BV_FMA(x[j], m, d);
    for (j = 1; j < 12; j++) x[0] = BV_ADD(x[0], x[j]);
    BV_STORE(r, x[0]);
    for (j = 0; j < BV_LANES; j++) s += r[j];
    return s;
}
size_t bench_scratch(int M, int N, int K) { return pt2c_sgemm_scratch_floats(M, N, K); }
void bench_sgemm(float *C, const float *A, const float *B, int b_packed, int M, int N, int K, float *scratch)
{
    pt2c_sgemm(C, N, A, K, 1, 0, B, N, 1, b_packed, M, N, K, NULL, scratch);
}
"""


def build(tmp: Path, march: str) -> ctypes.CDLL:
    src = tmp / "bench.c"
    src.write_text(WRAPPER)
    lib = tmp / "libbench.so"
    extra = os.environ.get("PT2C_BENCH_CFLAGS", "").split()  # e.g. -DPT2C_GEMM_KC=384 for tuning
    subprocess.run(["gcc", "-std=c99", "-O3", f"-march={march}", "-fPIC", "-shared", f"-I{KDIR}", *extra,
                    str(src), "-o", str(lib), "-lm"], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.bench_scratch.restype = ctypes.c_size_t
    dll.bench_scratch.argtypes = [ctypes.c_int] * 3
    p = ctypes.c_void_p
    dll.bench_fma_peak.restype = ctypes.c_float
    dll.bench_fma_peak.argtypes = [ctypes.c_long]
    dll.bench_fma_lanes.restype = ctypes.c_int
    dll.bench_sgemm.argtypes = [p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, p]
    return dll


def cpu_mhz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1])
    except OSError:
        pass
    return float("nan")


def best_time(fn, reps: int, min_time: float = 0.2) -> float:
    fn()  # warm up
    best = float("inf")
    t_end = time.perf_counter() + min_time
    n = 0
    while n < reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        n += 1
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--march", default="x86-64-v3", help="gcc -march of the build (x86-64-v4: AVX-512)")
    ap.add_argument("--hide-avx512", action="store_true",
                    help="numpy and torch see an AVX2+FMA CPU (cpuid hides AVX-512/AMX, bench/avx2_only.c)")
    args = ap.parse_args()
    if args.hide_avx512:
        if args.march != "x86-64-v3":
            ap.error("--hide-avx512 needs --march x86-64-v3")
        hide_avx512.reexec()
        print(hide_avx512.LABEL)
    torch.set_num_threads(1)
    mhz = cpu_mhz()
    shapes = [(n, n, n, False) for n in (256, 512, 1024, 2048)] + [(m, 1024, 1024, True) for m in (1, 4, 16)]
    with tempfile.TemporaryDirectory() as td:
        dll = build(Path(td), args.march)
        lanes = dll.bench_fma_lanes()
        peak = 2 * lanes * 2 * mhz * 1e-3  # GFLOP/s
        print(f"-march={args.march}; clock {mhz:.0f} MHz (from /proc/cpuinfo 'cpu MHz'); nominal peak = 2 FMA pipes x "
              f"{lanes} lanes x 2 flop x clock = {peak:.1f} GFLOP/s, 1 thread")
        print("cells: GFLOP/s (% of nominal peak / % of the measured FMA-loop peak)")
        iters = 20_000_000
        t_fma = best_time(lambda: dll.bench_fma_peak(iters), 10, min_time=0.5)
        mpeak = 12 * 2 * lanes * iters / t_fma * 1e-9
        print(f"measured FMA-loop peak: {mpeak:.1f} GFLOP/s "
              "(above the nominal figure when the core turbos)")
        print(f"{'shape':>24} {'pt2c':>20} {'numpy':>20} {'torch.mm':>20}")
        rng = np.random.default_rng(0)
        for m, n, k, packed in shapes:
            # 64-byte aligned operands and scratch, as in a model (numpy's are 16-byte aligned: with
            # the AVX-512 kernel every 64-byte load would then straddle two cache lines, -8 %)
            a = aligned_copy(rng.standard_normal((m, k), dtype=np.float32))
            b = aligned_copy(rng.standard_normal((k, n), dtype=np.float32))
            bp = aligned_copy(pack_b(b)) if packed else b
            c = aligned_copy(np.zeros((m, n), np.float32))
            scratch = aligned_copy(np.zeros(max(1, dll.bench_scratch(m, n, k)), np.float32))
            ptr = lambda x: x.ctypes.data
            fn = lambda: dll.bench_sgemm(ptr(c), ptr(a), ptr(bp), int(packed), m, n, k, ptr(scratch))
            flop = 2.0 * m * n * k
            t_pt = best_time(fn, args.reps)
            err = np.abs(c - a.astype(np.float64) @ b).max() / max(1.0, np.abs(a.astype(np.float64) @ b).max())
            t_np = best_time(lambda: np.matmul(a, b), args.reps)
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            t_th = best_time(lambda: torch.mm(ta, tb), args.reps)
            label = f"{m}x{n}x{k}" + (" (packed B)" if packed else "")
            cells = []
            for t in (t_pt, t_np, t_th):
                g = flop / t * 1e-9
                cells.append(f"{g:6.1f} ({g / peak:4.0%}/{g / mpeak:4.0%})")
            print(f"{label:>24} {cells[0]:>20} {cells[1]:>20} {cells[2]:>20}" + ("" if err < 1e-4 else f"  ERR {err:.1e}"))


if __name__ == "__main__":
    main()
