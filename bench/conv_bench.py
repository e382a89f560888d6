"""Single-thread conv2d throughput: pt2c_conv2d / pt2c_conv2d_depthwise vs torch.conv2d on ResNet-18 /
MobileNetV2 shapes.

    python bench/conv_bench.py [--reps N] [--cc gcc] [--threads 1] [--only NAME] [--cold] [--pwdw]

Builds src/pt2c/kernels/conv.c (-O3 -march=x86-64-v3, OpenMP) into a temporary shared library,
checks each shape against torch (max abs error / scale), reports GFLOP/s (median of --reps).
--cold: pt2c's operands are evicted from L2 before every call (a sweep over 16 MiB, not timed),
as in a whole model; torch's figure stays hot.
--pwdw: MobileNetV2's 1x1 expansions and the depthwise convs after them, as two calls against
one pt2c_conv2d_pw_dw call (milliseconds per pair, alternating).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "src" / "pt2c" / "kernels"
sys.path.insert(0, str(ROOT / "src"))

WRAPPER = r"""
#define _POSIX_C_SOURCE 199309L
#include <time.h>
#include "conv.c"
/* --cold: a sweep over `flush` floats before each call evicts the operands from L2 (as in a model,
 * where a layer's weights come from L3/DRAM and its output lines are not in L2); only the call is timed */
static volatile float b_sink;
static double b_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void b_flush(float *flush, long nf)
{
    float acc = 0.0f;
    long i;
    for (i = 0; i < nf; i += 16) flush[i] += 1.0f, acc += flush[i];
    b_sink = acc;
}
size_t b_scratch(const int *s)
{
    return pt2c_conv2d_scratch_floats(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                                      s[13], s[14], s[15]);
}
double b_conv(float *out, const float *in, const float *w, const float *bias, const int *s, float *scratch, int reps,
              float *flush, long nf)
{
    pt2c_epilogue ep;
    int r;
    double t = 0.0, t0;
    ep.bias = bias, ep.bias_per_row = 1, ep.residual = NULL, ep.ldr = 0, ep.act = PT2C_ACT_RELU, ep.lo = 0, ep.hi = 0;
    for (r = 0; r < reps; r++) {
        if (nf) b_flush(flush, nf);
        t0 = b_now();
        pt2c_conv2d(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                    s[12], s[13], s[14], s[15], scratch);
        t += b_now() - t0;
    }
    return t;
}
size_t b_dw_scratch(const int *s)
{
    return pt2c_conv2d_depthwise_scratch_floats(s[2], s[3], s[14], s[15], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                                s[12]);
}
double b_dw(float *out, const float *in, const float *w, const float *bias, const int *s, float *scratch, int reps,
            float *flush, long nf)
{
    pt2c_epilogue ep;
    int r;
    double t = 0.0, t0;
    ep.bias = bias, ep.bias_per_row = 1, ep.residual = NULL, ep.ldr = 0, ep.act = PT2C_ACT_CLAMP, ep.lo = 0, ep.hi = 6;
    for (r = 0; r < reps; r++) {
        if (nf) b_flush(flush, nf);
        t0 = b_now();
        pt2c_conv2d_depthwise(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
                              s[11], s[12], s[14], s[15], scratch);
        t += b_now() - t0;
    }
    return t;
}
/* --pwdw: a 1x1 conv to M channels then a 3x3 depthwise conv of them (ReLU6 both), as two calls
 * (fused == 0: the M x H x W tensor in between) or as pt2c_conv2d_pw_dw (fused == 1) */
size_t b_pwdw_scratch(const int *s)
{
    size_t a = pt2c_conv2d_scratch_floats(s[1], s[2], s[3], s[4], 1, 1, 1, 1, 0, 0, 1, 1, 1, s[2], s[3]);
    size_t d = pt2c_conv2d_depthwise_scratch_floats(s[2], s[3], s[6], s[7], 3, 3, s[5], s[5], 1, 1, 1, 1);
    size_t f = pt2c_conv2d_pw_dw_scratch_floats(s[1], s[2], s[3], s[4], 3, 3, s[5], s[5], 1, 1, 1, 1, s[6], s[7]);
    return PT2C_MAX(PT2C_MAX(a, d), f);
}
double b_pwdw(int fused, float *out, float *mid, const float *in, const float *w1, const float *b1, const float *wd,
              const float *b2, const int *s, float *scratch, int reps, float *flush, long nf)
{
    pt2c_epilogue e1, e2;
    int r;
    double t = 0.0, t0;
    e1.bias = b1, e1.bias_per_row = 1, e1.residual = NULL, e1.ldr = 0, e1.act = PT2C_ACT_CLAMP, e1.lo = 0, e1.hi = 6;
    e2 = e1, e2.bias = b2;
    for (r = 0; r < reps; r++) {
        if (nf) b_flush(flush, nf);
        t0 = b_now();
        if (fused) {
            pt2c_conv2d_pw_dw(out, in, w1, &e1, wd, &e2, 1, s[1], s[2], s[3], s[4], 3, 3, s[5], s[5], 1, 1, 1, 1, s[6],
                              s[7], scratch);
        } else {
            pt2c_conv2d(mid, in, w1, &e1, 1, s[1], s[2], s[3], s[4], 1, 1, 1, 1, 0, 0, 1, 1, 1, s[2], s[3], scratch);
            pt2c_conv2d_depthwise(out, mid, wd, &e2, 1, s[4], s[2], s[3], s[4], 3, 3, s[5], s[5], 1, 1, 1, 1, s[6],
                                  s[7], scratch);
        }
        t += b_now() - t0;
    }
    return t;
}
"""

# MobileNetV2's expansions and the depthwise convs after them: (name, C, H, M, stride)
PWDW_SHAPES = [
    ("mbv2 112 16->96 /2", 16, 112, 96, 2),
    ("mbv2 56 24->144", 24, 56, 144, 1),
    ("mbv2 56 24->144 /2", 24, 56, 144, 2),
    ("mbv2 28 32->192", 32, 28, 192, 1),
    ("mbv2 14 64->384", 64, 14, 384, 1),
    # EfficientNet-B7 at 600 x 600 (3x3 stand-ins for its 5x5): large planes, few channels per group
    ("b7 300 32->192 /2", 32, 300, 192, 2),
    ("b7 150 48->288", 48, 150, 288, 1),
    ("b7 75 80->480", 80, 75, 480, 1),
]

# (name, C, H, OC, k, stride, pad); OC == 0: depthwise (OC = C, groups = C, ReLU6 like MobileNetV2)
SHAPES = [
    ("r18 stem 7x7/2", 3, 224, 64, 7, 2, 3),
    ("r18 l1 3x3", 64, 56, 64, 3, 1, 1),
    ("r18 l2 3x3/2", 64, 56, 128, 3, 2, 1),
    ("r18 l2 3x3", 128, 28, 128, 3, 1, 1),
    ("r18 l3 3x3", 256, 14, 256, 3, 1, 1),
    ("r18 l4 3x3", 512, 7, 512, 3, 1, 1),
    ("r18 ds 1x1/2", 128, 28, 256, 1, 2, 0),
    ("mbv2 stem 3x3/2", 3, 224, 32, 3, 2, 1),
    ("mbv2 1x1 112 proj", 32, 112, 16, 1, 1, 0),
    ("mbv2 1x1 112 exp", 16, 112, 96, 1, 1, 0),
    ("mbv2 1x1 expand", 24, 56, 144, 1, 1, 0),
    ("mbv2 1x1 14 exp", 64, 14, 384, 1, 1, 0),
    ("mbv2 1x1 14 proj", 384, 14, 64, 1, 1, 0),
    ("mbv2 1x1 14 exp96", 96, 14, 576, 1, 1, 0),
    ("mbv2 1x1 14 proj96", 576, 14, 96, 1, 1, 0),
    ("b7 1x1 300 32->192", 32, 300, 192, 1, 1, 0),
    ("b7 1x1 150 48->288", 48, 150, 288, 1, 1, 0),
    ("b7 1x1 150 288->48", 288, 150, 48, 1, 1, 0),
    ("b7 1x1 75 80->480", 80, 75, 480, 1, 1, 0),
    ("mbv2 dw 112", 32, 112, 0, 3, 1, 1),
    ("mbv2 dw 112/2", 96, 112, 0, 3, 2, 1),
    ("mbv2 dw 56", 144, 56, 0, 3, 1, 1),
    ("mbv2 dw 56/2", 144, 56, 0, 3, 2, 1),
    ("mbv2 dw 28", 192, 28, 0, 3, 1, 1),
    ("mbv2 dw 28/2", 192, 28, 0, 3, 2, 1),
    ("mbv2 dw 14", 576, 14, 0, 3, 1, 1),
    ("mbv2 dw 14/2", 576, 14, 0, 3, 2, 1),
    ("mbv2 dw 7", 960, 7, 0, 3, 1, 1),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--cc", default="gcc")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cflags", default="")
    ap.add_argument("--only", default="", help="run only the shapes whose name contains this")
    ap.add_argument("--cold", action="store_true", help="evict pt2c's operands from L2 before every call")
    ap.add_argument("--pwdw", action="store_true",
                    help="time MobileNetV2's expansion + depthwise pairs as two calls and as pt2c_conv2d_pw_dw")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import torch
    from pt2c.kernels.layout import pack_conv_weight
    from pt2c.runtime.runner import aligned_copy  # 64-byte aligned, as in a model

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="pt2c_convbench_"))
    (tmp / "w.c").write_text(WRAPPER)
    so = tmp / "libw.so"
    subprocess.run([args.cc, "-O3", "-march=x86-64-v3", "-fopenmp", "-std=c99", "-fPIC", "-shared",
                    *args.cflags.split(), f"-I{KDIR}", str(tmp / "w.c"), "-o", str(so), "-lm"], check=True)
    lib = ctypes.CDLL(str(so))
    P = ctypes.c_void_p
    lib.b_scratch.restype = ctypes.c_size_t
    lib.b_scratch.argtypes = [P]
    lib.b_conv.argtypes = [P, P, P, P, P, P, ctypes.c_int, P, ctypes.c_long]
    lib.b_conv.restype = ctypes.c_double
    lib.b_dw_scratch.restype = ctypes.c_size_t
    lib.b_dw_scratch.argtypes = [P]
    lib.b_dw.argtypes = [P, P, P, P, P, P, ctypes.c_int, P, ctypes.c_long]
    lib.b_dw.restype = ctypes.c_double
    flush = np.zeros(4 << 20 if args.cold else 1, np.float32)
    fl = (flush.ctypes.data, flush.size if args.cold else 0)
    rng = np.random.default_rng(0)
    if args.pwdw:
        pwdw(lib, args, fl, rng)
        return
    print(f"{'shape':18s} {'torch GF/s':>10s} {'pt2c GF/s':>10s} {'ratio':>6s} {'err':>8s} {'scratch KiB':>11s}")
    for name, C, H, OC, k, st, pd in SHAPES:
        if args.only not in name:
            continue
        dw = OC == 0
        OC, g = (C, C) if dw else (OC, 1)
        x = rng.standard_normal((1, C, H, H), dtype=np.float32)
        w = rng.standard_normal((OC, C // g, k, k), dtype=np.float32) / np.float32(np.sqrt(C // g * k * k))
        b = rng.standard_normal(OC, dtype=np.float32)
        xt, wt, bt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        conv = lambda: torch.nn.functional.conv2d(xt, wt, bt, st, pd, 1, g)  # noqa: E731
        ref = (torch.clamp(conv(), 0, 6) if dw else torch.relu(conv())).numpy()
        OH = ref.shape[2]
        s = np.array([1, C, H, H, OC, k, k, st, st, pd, pd, 1, 1, g, OH, OH], np.int32)
        wp = aligned_copy(np.ascontiguousarray(w.reshape(OC, k * k)) if dw else pack_conv_weight(w, 1))
        sc = aligned_copy(np.zeros(max(1, (lib.b_dw_scratch if dw else lib.b_scratch)(s.ctypes.data)) + 64, np.float32))
        run = lib.b_dw if dw else lib.b_conv
        out = aligned_copy(np.zeros_like(ref))
        x = aligned_copy(x)
        args_c = (out.ctypes.data, x.ctypes.data, wp.ctypes.data, b.ctypes.data, s.ctypes.data, sc.ctypes.data)
        run(*args_c, 1, *fl)
        err = float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max()))
        flops = 2.0 * OC * (C // g) * k * k * OH * OH
        reps = max(1, int(2e8 / flops))
        tt, tp = [], []
        for _ in range(args.reps):
            t = time.perf_counter()
            for _ in range(reps):
                conv()
            tt.append((time.perf_counter() - t) / reps)
            tp.append(run(*args_c, reps, *fl) / reps)
        gt, gp = flops / np.median(tt) / 1e9, flops / np.median(tp) / 1e9
        print(f"{name:18s} {gt:10.1f} {gp:10.1f} {gp / gt:6.2f} {err:8.1e} {sc.size * 4 / 1024:11.0f}", flush=True)


def pwdw(lib, args, fl, rng) -> None:
    """The pairs as two calls and fused, alternating per rep (same drift for both); ms per pair."""
    import numpy as np
    from pt2c.kernels.layout import pack_conv_weight
    from pt2c.runtime.runner import aligned_copy

    P = ctypes.c_void_p
    lib.b_pwdw_scratch.restype = ctypes.c_size_t
    lib.b_pwdw_scratch.argtypes = [P]
    lib.b_pwdw.argtypes = [ctypes.c_int] + [P] * 9 + [ctypes.c_int, P, ctypes.c_long]
    lib.b_pwdw.restype = ctypes.c_double
    print(f"{'pair':20s} {'two calls ms':>12s} {'fused ms':>9s} {'ratio':>6s} {'max diff':>8s}")
    for name, C, H, M, st in PWDW_SHAPES:
        if args.only not in name:
            continue
        OH = (H - 1) // st + 1
        s = np.array([1, C, H, H, M, st, OH, OH], np.int32)
        x = aligned_copy(rng.standard_normal((1, C, H, H), dtype=np.float32))
        w1 = aligned_copy(pack_conv_weight(rng.standard_normal((M, C, 1, 1), dtype=np.float32) / np.float32(np.sqrt(C))))
        wd = aligned_copy(rng.standard_normal((M, 9), dtype=np.float32) / np.float32(3.0))
        b1, b2 = rng.standard_normal(M, dtype=np.float32), rng.standard_normal(M, dtype=np.float32)
        mid = aligned_copy(np.zeros((M, H, H), np.float32))
        outs = [aligned_copy(np.zeros((M, OH, OH), np.float32)) for _ in range(2)]
        sc = aligned_copy(np.zeros(lib.b_pwdw_scratch(s.ctypes.data) + 64, np.float32))
        ptrs = [a.ctypes.data for a in (mid, x, w1, b1, wd, b2, s, sc)]
        times: list[list[float]] = [[], []]
        for f in (0, 1):
            lib.b_pwdw(f, outs[f].ctypes.data, *ptrs, 1, *fl)
        for _ in range(args.reps):
            for f in (0, 1):
                times[f].append(lib.b_pwdw(f, outs[f].ctypes.data, *ptrs, 5, *fl) / 5)
        t0, t1 = (float(np.median(t)) * 1e3 for t in times)
        diff = float(np.abs(outs[0] - outs[1]).max())
        print(f"{name:20s} {t0:12.3f} {t1:9.3f} {t1 / t0:6.2f} {diff:8.1e}", flush=True)


if __name__ == "__main__":
    main()
