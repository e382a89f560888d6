"""Tests of kernels/gemm.c and kernels/conv.c against numpy / torch references.

A small C harness that #includes the kernel files is built into a shared
library (gcc -O2 -mavx2 -mfma, warnings as errors) and driven through ctypes.
Extra builds cover the scalar path (clang, no -mavx2), OpenMP threading, and a
self-checking C program under ASan/UBSan.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "src" / "pt2c" / "kernels"
sys.path.insert(0, str(ROOT / "src"))

from pt2c.kernels.layout import (MR, NR, pack_a, pack_b, pack_conv_weight, pack_conv_weight_t,  # noqa: E402
                                 pack_winograd_weight)

WARN = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
ACTS = ["none", "relu", "clamp", "hardswish", "silu", "gelu", "gelu_tanh", "sigmoid", "tanh"]

HARNESS = r"""
#include "conv.c"
#if defined(_OPENMP)
void t_set_threads(int n) { omp_set_num_threads(n); }
#else
void t_set_threads(int n) { (void)n; }
#endif
size_t t_sgemm_scratch(int M, int N, int K) { return pt2c_sgemm_scratch_floats(M, N, K); }
size_t t_sgemm_scratch_ex(int M, int N, int K, int ap, int bp) { return pt2c_sgemm_scratch_floats_ex(M, N, K, ap, bp); }
void t_sgemm(int naive, float *C, int ldc, const float *A, int rsa, int csa, int ap, const float *B, int rsb, int csb,
             int bp, int M, int N, int K, int use_ep, const float *bias, int bias_per_row, const float *res, int ldr,
             int act, float lo, float hi, float *scratch)
{
    pt2c_epilogue ep;
    ep.bias = bias, ep.bias_per_row = bias_per_row, ep.residual = res, ep.ldr = ldr;
    ep.act = act, ep.lo = lo, ep.hi = hi;
    (naive ? pt2c_sgemm_naive : pt2c_sgemm)(C, ldc, A, rsa, csa, ap, B, rsb, csb, bp, M, N, K,
                                            use_ep ? &ep : NULL, scratch);
}
size_t t_wino_scratch(int C, int OC, int OH, int OW) { return pt2c_conv2d_wino_scratch_floats(C, OC, OH, OW); }
void t_wino(float *out, const float *in, const float *u, const float *bias, const float *res, int act, float lo,
            float hi, int N, int C, int H, int W, int OC, int ph, int pw, int OH, int OW, float *scratch)
{
    pt2c_epilogue ep;
    ep.bias = bias, ep.bias_per_row = 1, ep.residual = res, ep.ldr = 0, ep.act = act, ep.lo = lo, ep.hi = hi;
    pt2c_conv2d_wino(out, in, u, &ep, N, C, H, W, OC, ph, pw, OH, OW, scratch);
}
size_t t_smallp_scratch(const int *s)
{
    return pt2c_conv2d_smallp_scratch_floats(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                                             s[14], s[15]);
}
void t_smallp(float *out, const float *in, const float *wt, const float *bias, const float *res, int act, float lo,
              float hi, const int *s, float *scratch)
{
    pt2c_epilogue ep;
    ep.bias = bias, ep.bias_per_row = 1, ep.residual = res, ep.ldr = 0, ep.act = act, ep.lo = lo, ep.hi = hi;
    pt2c_conv2d_smallp(out, in, wt, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                       s[12], s[14], s[15], scratch);
}
size_t t_conv_scratch(const int *s)
{
    return pt2c_conv2d_scratch_floats(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                                      s[13], s[14], s[15]);
}
size_t t_dw_scratch(const int *s)
{
    return pt2c_conv2d_depthwise_scratch_floats(s[2], s[3], s[14], s[15], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                                s[12]);
}
/* s = N C H W OC KH KW sh sw ph pw dh dw groups OH OW */
void t_conv(int depthwise, float *out, const float *in, const float *w, const float *bias, const float *res, int act,
            float lo, float hi, const int *s, float *scratch)
{
    pt2c_epilogue ep;
    ep.bias = bias, ep.bias_per_row = 1, ep.residual = res, ep.ldr = 0, ep.act = act, ep.lo = lo, ep.hi = hi;
    if (depthwise)
        pt2c_conv2d_depthwise(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
                              s[11], s[12], s[14], s[15], scratch);
    else
        pt2c_conv2d(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                    s[12], s[13], s[14], s[15], scratch);
}
/* s = N C H W M KH KW sh sw ph pw dh dw OH OW; a1, a2: the two activations (clamp: lo1/hi1, lo2/hi2) */
size_t t_pwdw_scratch(const int *s)
{
    return pt2c_conv2d_pw_dw_scratch_floats(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                            s[12], s[13], s[14]);
}
void t_pwdw(float *out, const float *in, const float *w1, const float *b1, int a1, const float *wd, const float *b2,
            const float *res, int a2, const int *s, float *scratch)
{
    pt2c_epilogue e1 = {0}, e2 = {0};
    e1.bias = b1, e1.bias_per_row = 1, e1.act = a1, e1.lo = 0.0f, e1.hi = 6.0f;
    e2.bias = b2, e2.bias_per_row = 1, e2.residual = res, e2.act = a2, e2.lo = -1.0f, e2.hi = 1.0f;
    pt2c_conv2d_pw_dw(out, in, w1, &e1, wd, &e2, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
                      s[11], s[12], s[13], s[14], scratch);
}
"""


def _build(tmp: Path, name: str, cc: str, flags: list[str]) -> ctypes.CDLL:
    src = tmp / f"{name}.c"
    src.write_text(HARNESS)
    lib = tmp / f"lib{name}.so"
    subprocess.run([cc, *WARN, *flags, "-fPIC", "-shared", f"-I{KDIR}", str(src), "-o", str(lib), "-lm"],
                   check=True, capture_output=False)
    dll = ctypes.CDLL(str(lib))
    p, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    dll.t_sgemm_scratch.restype = ctypes.c_size_t
    dll.t_sgemm_scratch.argtypes = [i, i, i]
    dll.t_sgemm_scratch_ex.restype = ctypes.c_size_t
    dll.t_sgemm_scratch_ex.argtypes = [i, i, i, i, i]
    dll.t_sgemm.argtypes = [i, p, i, p, i, i, i, p, i, i, i, i, i, i, i, p, i, p, i, i, f, f, p]
    dll.t_conv_scratch.restype = ctypes.c_size_t
    dll.t_conv_scratch.argtypes = [p]
    dll.t_conv.argtypes = [i, p, p, p, p, p, i, f, f, p, p]
    dll.t_dw_scratch.restype = ctypes.c_size_t
    dll.t_dw_scratch.argtypes = [p]
    dll.t_set_threads.argtypes = [i]
    dll.t_smallp_scratch.restype = ctypes.c_size_t
    dll.t_smallp_scratch.argtypes = [p]
    dll.t_smallp.argtypes = [p, p, p, p, p, i, f, f, p, p]
    dll.t_wino_scratch.restype = ctypes.c_size_t
    dll.t_wino_scratch.argtypes = [i, i, i, i]
    dll.t_wino.argtypes = [p, p, p, p, p, i, f, f] + [i] * 9 + [p]
    dll.t_pwdw_scratch.restype = ctypes.c_size_t
    dll.t_pwdw_scratch.argtypes = [p]
    dll.t_pwdw.argtypes = [p, p, p, p, i, p, p, p, i, p, p]
    return dll


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> ctypes.CDLL:
    return _build(tmp_path_factory.mktemp("gemm"), "avx2", "gcc", ["-O2", "-mavx2", "-mfma"])


def _ptr(x):
    return None if x is None else x.ctypes.data


def _act_ref(x: np.ndarray, act: str, lo: float, hi: float) -> np.ndarray:
    from math import erf
    if act == "none":
        return x
    if act == "relu":
        return np.maximum(x, 0)
    if act == "clamp":
        return np.minimum(np.maximum(x, lo), hi)
    if act == "hardswish":
        return x * np.clip(x + 3, 0, 6) / 6
    if act == "silu":
        return x / (1 + np.exp(-x))
    if act == "gelu":
        return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
    if act == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    if act == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if act == "tanh":
        return np.tanh(x)
    raise ValueError(act)


def _check(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    tol = 1e-4 * max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(got.astype(np.float64) - ref).max(initial=0.0))
    assert err <= tol, f"{what}: max abs err {err:.3g} > {tol:.3g}"


def run_gemm(lib, M, N, K, *, a_mode="row", b_mode="row", bias=None, residual=False, act="none", lo=0.0,
             hi=6.0, naive=False, rng=None, ldc_pad=3):
    """Runs one GEMM through the harness and checks it against float64 numpy.

    a_mode/b_mode: row (row-major), trans (column-major, i.e. a transposed
    tensor), strided (row-major with padding and a column stride of 2), packed;
    b_mode slice: rows 3 .. 3+K of pre-packed panels K+8 rows deep (rsb = their depth).
    """
    rng = rng or np.random.default_rng(M * 10007 + N * 101 + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)

    def operand(x, mode, pack):
        r, c = x.shape
        if mode == "row":
            return x.copy(), c, 1, 0
        if mode == "trans":
            buf = np.ascontiguousarray(x.T)
            return buf, 1, r, 0
        if mode == "strided":
            buf = np.zeros((r, 2 * c + 5), np.float32)
            buf[:, : 2 * c : 2] = x
            return buf, 2 * c + 5, 2, 0
        if mode == "packed":
            return pack(x), 0, 0, 1
        if mode == "slice":  # a slice of a deeper reduction, as a K-split thread multiplies
            deep = np.full((r + 8, c), 1e3, np.float32)
            deep[3:3 + r] = x
            return pack(deep)[3 * NR:], r + 8, 0, 1
        raise ValueError(mode)

    abuf, rsa, csa, ap = operand(a, a_mode, pack_a)
    bbuf, rsb, csb, bp = operand(b, b_mode, pack_b)
    ldc = N + ldc_pad
    c = np.full((M, ldc), 7.0, np.float32)  # the padding must survive
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bias_arr = res_arr = None
    ldr = 0
    if bias == "row":
        bias_arr = rng.standard_normal(M).astype(np.float32)
        ref += bias_arr[:, None]
    elif bias == "col":
        bias_arr = rng.standard_normal(N).astype(np.float32)
        ref += bias_arr[None, :]
    if residual:
        ldr = N + 1
        res_arr = rng.standard_normal((M, ldr)).astype(np.float32)
        ref += res_arr[:, :N]
    ref = _act_ref(ref, act, lo, hi)
    use_ep = int(bias is not None or residual or act != "none")
    # exactly the scratch the packing needs, then a canary that must survive
    n_scr = lib.t_sgemm_scratch_ex(M, N, K, ap, bp)
    assert n_scr <= lib.t_sgemm_scratch(M, N, K)
    scratch = np.full(n_scr + 64, 3.0, np.float32)
    lib.t_sgemm(int(naive), _ptr(c), ldc, _ptr(abuf), rsa, csa, ap, _ptr(bbuf), rsb, csb, bp, M, N, K, use_ep,
                _ptr(bias_arr), int(bias == "row"), _ptr(res_arr), ldr, ACTS.index(act), lo, hi,
                _ptr(scratch) if n_scr else None)
    what = f"M={M} N={N} K={K} a={a_mode} b={b_mode} bias={bias} res={residual} act={act}"
    _check(c[:, :N], ref, what)
    assert np.all(c[:, N:] == 7.0), f"{what}: wrote outside C"
    assert np.all(scratch[n_scr:] == 3.0), f"{what}: wrote past its scratch"


SIZES = [1, 5, 6, 7, 16, 17, 33, 100]


@pytest.mark.parametrize("a_mode,b_mode", [("row", "row"), ("row", "packed"), ("packed", "row"),
                                           ("packed", "packed"), ("trans", "trans"), ("strided", "strided"),
                                           ("trans", "slice")])
def test_gemm_shapes(lib, a_mode, b_mode):
    for M, N in itertools.product(SIZES, SIZES):
        for K in (1, 7, 33, 100):
            run_gemm(lib, M, N, K, a_mode=a_mode, b_mode=b_mode)


@pytest.mark.parametrize("a_mode,b_mode", [("row", "row"), ("row", "packed"), ("packed", "row"), ("trans", "row"),
                                           ("row", "slice")])
def test_gemm_large(lib, a_mode, b_mode):
    # K=300 > KC: several k blocks (C accumulation); 300 rows/cols: several MC panels and edges
    for M, N, K in [(300, 300, 300), (17, 300, 300), (300, 17, 300), (16, 100, 300), (3, 33, 600), (300, 5, 7)]:
        run_gemm(lib, M, N, K, a_mode=a_mode, b_mode=b_mode)


def test_gemm_weights_panel_outer(lib):
    # pre-packed A, B of 128-256 columns read in place (1x1 convs on 14x14 maps): A panels outer,
    # with a ragged last panel of rows and of columns, 1-2 k blocks, the epilogue in registers
    for (M, N, K), bias, residual, act in [((64, 196, 384), "row", False, "clamp"), ((17, 128, 33), None, True, "relu"),
                                           ((150, 256, 300), "row", True, "none"), ((7, 200, 20), "col", False, "gelu")]:
        run_gemm(lib, M, N, K, a_mode="packed", b_mode="row", bias=bias, residual=residual, act=act)


@pytest.mark.parametrize("act", ACTS)
def test_gemm_epilogue(lib, act):
    lo, hi = (-0.5, 1.5) if act == "clamp" else (0.0, 6.0)
    for (M, N, K), a_mode, b_mode in [((7, 33, 300), "row", "packed"),    # skinny, in-place A
                                      ((40, 35, 300), "row", "row"),      # packed A, 2 k blocks, edges
                                      ((33, 17, 20), "packed", "row")]:
        for bias, residual in [(None, False), ("row", False), ("col", True)]:
            run_gemm(lib, M, N, K, a_mode=a_mode, b_mode=b_mode, bias=bias, residual=residual, act=act, lo=lo,
                     hi=hi)


@pytest.mark.parametrize("act", ["relu", "clamp", "none"])
def test_gemm_register_epilogue_matches_scalar(lib, act):
    # full tiles, and last panels of up to 8 columns (52 = 3 x 16 + 4), apply bias/residual/relu/clamp
    # in registers: same bits as the scalar epilogue (pt2c_sgemm_naive), NaN, infinities and signed zeros
    M, N, K = 12, 52, 8
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = np.zeros((K, N), np.float32)  # so C = bias + residual exactly, specials survive
    bias = rng.standard_normal(N).astype(np.float32)
    bias[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 6.0]
    res = rng.standard_normal((M, N)).astype(np.float32)
    res[0, :8] = [np.nan, -np.inf, np.inf, -0.0, -0.0, 0.0, -6.0, 1e30]
    outs = []
    for naive in (1, 0):
        for bp in (0, 1):
            bb = pack_b(b) if bp else b
            c = np.full((M, N), 7.0, np.float32)
            scr = np.zeros(max(1, lib.t_sgemm_scratch(M, N, K)), np.float32)
            lib.t_sgemm(naive, _ptr(c), N, _ptr(a), K, 1, 0, _ptr(bb), 0 if bp else N, 0 if bp else 1, bp, M, N, K,
                        1, _ptr(bias), 0, _ptr(res), N, ACTS.index(act), 0.0, 6.0, _ptr(scr))
            outs.append(c.view(np.uint32).copy())
    for o in outs[1:]:
        assert np.array_equal(outs[0], o)


def test_gemm_k_zero(lib):
    run_gemm(lib, 5, 20, 0, bias="col", act="relu")


def test_gemm_naive(lib):
    for a_mode, b_mode in [("row", "row"), ("packed", "packed"), ("trans", "strided"), ("packed", "slice")]:
        run_gemm(lib, 17, 33, 40, a_mode=a_mode, b_mode=b_mode, bias="row", residual=True, act="silu", naive=True)


# ---- conv ----

# N, C, H, W, OC, KH, KW, stride, pad, dilation, groups, depthwise, residual+act
CONV_CASES = [
    (2, 8, 9, 11, 16, 1, 1, 1, 0, 1, 1, False, False),     # pointwise: input used directly as B
    (1, 16, 7, 7, 33, 1, 1, 2, 0, 1, 1, False, True),      # strided 1x1: the input subsampled first
    (2, 5, 12, 10, 13, 3, 3, 1, 1, 1, 1, False, False),
    (1, 6, 15, 17, 7, 3, 3, 2, 1, 1, 1, False, True),
    (1, 3, 32, 30, 8, 7, 7, 2, 3, 1, 1, False, False),
    (1, 4, 16, 16, 6, 3, 3, 1, 2, 2, 1, False, True),      # dilation 2
    (2, 8, 10, 10, 12, 3, 3, 1, 1, 1, 2, False, True),     # groups 2
    (1, 8, 6, 6, 16, 1, 1, 1, 0, 1, 4, False, True),       # grouped pointwise
    (1, 64, 40, 40, 20, 3, 3, 1, 1, 1, 1, False, False),   # several im2col tiles
    (1, 3, 70, 66, 8, 7, 7, 2, 3, 1, 1, False, True),      # stride 2, whole 16-pixel panels in one row (deinterleave)
    (1, 3, 70, 66, 64, 7, 7, 2, 3, 1, 1, False, True),     # the same from a padded copy of the input
    (1, 4, 20, 19, 160, 3, 3, 3, 1, 1, 1, False, True),    # stride 3 from the padded copy (per-pixel copies)
    (1, 4, 16, 16, 48, 3, 3, 1, 2, 2, 1, False, False),    # dilation 2 from the padded copy
    (2, 8, 10, 10, 192, 3, 3, 1, 1, 1, 2, False, True),    # groups 2, each padded in turn
    (1, 260, 62, 62, 6, 3, 3, 2, 1, 1, 1, False, True),    # padded copy over its limit: bounds-checked taps
    (1, 4, 6, 6, 520, 3, 3, 1, 1, 1, 1, False, False),     # more output channels than one block of A rows
    (2, 8, 13, 11, 8, 3, 3, 1, 1, 1, 8, True, True),       # depthwise (small plane: strips on x86, else 8 channels at a time)
    (1, 6, 14, 15, 12, 3, 3, 2, 1, 1, 6, True, False),     # depthwise, multiplier 2, stride 2
    (1, 4, 20, 21, 4, 5, 5, 1, 4, 2, 4, True, True),       # depthwise, dilation 2
    (1, 3, 9, 9, 6, 3, 3, 2, 0, 1, 3, True, True),         # depthwise, no padding, multiplier 2
    (1, 5, 8, 8, 5, 3, 3, 1, 1, 1, 5, False, True),        # depthwise shape through the GEMM path
    (1, 7, 2, 2, 7, 3, 3, 1, 1, 1, 7, True, True),         # depthwise, a plane smaller than the kernel
    (1, 13, 20, 17, 13, 3, 3, 1, 1, 1, 13, True, True),    # depthwise, 8 + 5 channels
    (1, 3, 2, 600, 3, 3, 3, 1, 1, 1, 3, True, True),       # depthwise direct path, no inside row
    (2, 3, 1, 1100, 6, 3, 3, 1, 1, 1, 3, True, False),     # depthwise direct path, one row, multiplier 2
    (1, 5, 40, 33, 5, 5, 5, 1, 2, 1, 5, True, True),       # depthwise direct path, 5x5
    (1, 4, 36, 33, 4, 7, 7, 1, 3, 1, 4, True, False),      # depthwise direct path, 7x7
    (1, 2, 12, 140, 2, 3, 3, 1, 1, 1, 2, True, True),      # depthwise direct path, 3x3 (rows over 128)
    (1, 6, 23, 19, 6, 5, 5, 2, 2, 1, 6, True, True),       # depthwise 5x5 stride 2 (EfficientNet)
    (1, 2, 400, 30, 2, 3, 3, 2, 1, 1, 2, True, True),      # depthwise stride 2, several bands
    (1, 3, 11, 12, 3, 3, 3, 3, 1, 1, 3, True, False),      # depthwise stride 3
    (2, 6, 29, 61, 20, 1, 1, 2, 0, 1, 2, False, True),     # strided 1x1 subsampled: W odd (vector and scalar columns), groups 2
    (1, 4, 20, 19, 9, 1, 1, 3, 0, 1, 1, False, False),     # strided 1x1 subsampled: stride 3
]
# depthwise 3x3 stride 2 pad 1 with OW >= 16, planes over 4096: on AVX2 rows split into even and odd
# columns, on AVX-512 strips down bands of rows
DW_S2_CASES = [
    (1, 3, 120, 37, 3, 3, 3, 2, 1, 1, 3, True, True),      # W odd
    (2, 2, 65, 64, 4, 3, 3, 2, 1, 1, 2, True, False),      # H odd (bottom padding), multiplier 2
    (1, 4, 42, 100, 4, 3, 3, 2, 1, 1, 4, True, True),      # OW = 50: a partial last vector
]
# depthwise 3x3 stride 1 pad 1 on x86 (rows of up to 128): strips of 16 (AVX-512) or 8 columns down the plane
DW_ROWS_CASES = [
    (1, 5, 14, 14, 5, 3, 3, 1, 1, 1, 5, True, True),       # one partial vector (AVX-512), two (AVX2)
    (2, 3, 7, 7, 6, 3, 3, 1, 1, 1, 3, True, False),        # batch 2, multiplier 2
    (1, 4, 1, 20, 4, 3, 3, 1, 1, 1, 4, True, True),        # one row
    (1, 3, 6, 1, 3, 3, 3, 1, 1, 1, 3, True, False),        # one column
    (1, 2, 9, 37, 2, 3, 3, 1, 1, 1, 2, True, True),        # three strips, the last of 5 columns
    (1, 2, 30, 128, 2, 3, 3, 1, 1, 1, 2, True, False),     # the widest rows
    # stride 2 (planes up to 4096): even / odd input columns by permutes
    (1, 3, 40, 37, 3, 3, 3, 2, 1, 1, 3, True, True),       # W odd: the last strip's last input column
    (2, 2, 33, 64, 4, 3, 3, 2, 1, 1, 2, True, False),      # H odd (bottom padding), multiplier 2, two strips
    (1, 4, 14, 14, 4, 3, 3, 2, 1, 1, 4, True, True),       # 14 -> 7
    (1, 2, 5, 1, 2, 3, 3, 2, 1, 1, 2, True, False),        # one column
    (1, 2, 64, 64, 2, 3, 3, 2, 1, 1, 2, True, True),       # the largest plane
]
CONV_CASES += DW_S2_CASES + DW_ROWS_CASES


def run_conv(lib, case, smallp=False, act=None):
    """act: (name, lo, hi), an activation without a residual (default: residual + relu when the case is fused)"""
    import torch
    import torch.nn.functional as F

    n, c, h, w, oc, kh, kw, s, p, d, g, depthwise, fused = case
    rng = np.random.default_rng(abs(hash(case)) % (2**32))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c // g, kh, kw)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(), torch.from_numpy(bias).double(),
                   stride=s, padding=p, dilation=d, groups=g).numpy()
    oh, ow = ref.shape[2:]
    res = None
    if act:
        ref = _act_ref(ref, *act)
    elif fused:
        res = rng.standard_normal(ref.shape).astype(np.float32)
        ref = np.maximum(ref + res, 0)
    act_id, lo, hi = (ACTS.index(act[0]), act[1], act[2]) if act else (1 if fused else 0, 0.0, 0.0)
    sizes = np.array([n, c, h, w, oc, kh, kw, s, s, p, p, d, d, g, oh, ow], np.int32)
    out = np.full(ref.shape, np.nan, np.float32)
    if smallp:  # pixels as the GEMM's rows, W^T as B
        wbuf = pack_conv_weight_t(wt)
        scratch = np.full(max(1, lib.t_smallp_scratch(_ptr(sizes))), np.nan, np.float32)
        from pt2c.kernels import scratch as S

        assert S.conv2d_smallp_scratch_floats(c, h, w, oc, kh, kw, s, s, p, p, d, d, oh, ow) == lib.t_smallp_scratch(_ptr(sizes))
        lib.t_smallp(_ptr(out), _ptr(x), _ptr(wbuf), _ptr(bias), _ptr(res), act_id, lo, hi, _ptr(sizes),
                     _ptr(scratch))
        _check(out, ref, f"conv smallp {case}")
        return
    if depthwise:
        wbuf = np.ascontiguousarray(wt.reshape(oc, kh * kw))
        from pt2c.kernels import scratch as S

        floats = lib.t_dw_scratch(_ptr(sizes))
        assert S.conv2d_depthwise_scratch_floats(h, w, oh, ow, kh, kw, s, s, p, p, d, d) == floats
        scratch = np.full(max(1, floats), np.nan, np.float32)
    else:
        wbuf = pack_conv_weight(wt, g)
        scratch = np.zeros(max(1, lib.t_conv_scratch(_ptr(sizes))), np.float32)
    lib.t_conv(int(depthwise), _ptr(out), _ptr(x), _ptr(wbuf), _ptr(bias), _ptr(res), act_id, lo, hi, _ptr(sizes),
               _ptr(scratch))
    _check(out, ref, f"conv {case}")


@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}" for i in range(len(CONV_CASES))])
def test_conv(lib, case):
    run_conv(lib, case)


DW_ACTS = [("relu", 0.0, 0.0), ("clamp", -0.3, 0.4), ("silu", 0.0, 0.0), ("none", 0.0, 0.0)]


def test_depthwise_activation(lib):
    """Depthwise without a residual: relu / clamp applied in registers on the strip path, the others after
    it; and on the 8-channel band path (stride 2, short rows) and the split-row one"""
    band = (1, 6, 14, 15, 12, 3, 3, 2, 1, 1, 6, True, False)
    for case in DW_ROWS_CASES + [band, DW_S2_CASES[0]]:
        for act in DW_ACTS:
            run_conv(lib, case, act=act)


# Winograd F(4x4, 3x3): N, C, H, W, OC, pad, residual, act
WINO_CASES = [
    (1, 16, 16, 16, 16, 1, False, "none"),     # exact multiple of the 4x4 tiles
    (2, 19, 13, 15, 21, 1, True, "relu"),      # ragged tiles, odd channels, batch 2, residual
    (1, 32, 30, 29, 24, 0, False, "clamp"),    # no padding
    (1, 16, 11, 12, 40, 2, True, "silu"),      # padding 2, an activation outside the fast path
    (1, 64, 56, 56, 64, 1, True, "relu"),      # ResNet layer1: several tile blocks
    (1, 160, 14, 14, 200, 1, False, "hardswish"),
    (1, 8, 26, 30, 8, 0, True, "relu"),        # last tile at the plane's end: its patch rows are copied
]


def run_wino(lib, case):
    """pt2c_conv2d_wino vs float64 torch: within 1e-4 of max|ref| (the transforms round differently from a
    direct sum; the model-level tolerance is the same 1e-4 * max(1, max|ref|))."""
    import torch
    import torch.nn.functional as F

    n, c, h, w, oc, p, fused, act = case
    rng = np.random.default_rng(len(WINO_CASES) + sum(case[:6]))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((oc, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(), torch.from_numpy(bias).double(),
                   padding=p).numpy()
    oh, ow = ref.shape[2:]
    res = rng.standard_normal(ref.shape).astype(np.float32) if fused else None
    if fused:
        ref = ref + res
    ref = _act_ref(ref, act, -1.0, 1.0)
    scratch = np.full(lib.t_wino_scratch(c, oc, oh, ow), np.nan, np.float32)  # NaN: unwritten scratch would show
    from pt2c.kernels import scratch as S

    assert S.conv2d_wino_scratch_floats(c, oc, oh, ow) == scratch.size
    out = np.full(ref.shape, np.nan, np.float32)
    u = pack_winograd_weight(wt)  # kept alive across the call
    lib.t_wino(_ptr(out), _ptr(x), _ptr(u), _ptr(bias), _ptr(res), ACTS.index(act), -1.0,
               1.0, n, c, h, w, oc, p, p, oh, ow, _ptr(scratch))
    err = np.abs(out - ref).max()
    assert err <= 1e-4 * max(1.0, np.abs(ref).max()), f"winograd {case}: max err {err:.2e}"


@pytest.mark.parametrize("case", WINO_CASES, ids=[f"wino{i}" for i in range(len(WINO_CASES))])
def test_conv_winograd(lib, case):
    run_wino(lib, case)


# ungrouped cases for pt2c_conv2d_smallp: N, C, H, W, OC, KH, KW, stride, pad, dilation, groups, dw, fused
SMALLP_CASES = [
    (1, 64, 7, 7, 40, 3, 3, 1, 1, 1, 1, False, True),      # ResNet layer4 shape (smaller)
    (2, 24, 14, 13, 33, 3, 3, 2, 1, 1, 1, False, False),   # stride 2 -> 7x7, batch 2, ragged OC
    (1, 16, 6, 6, 20, 1, 1, 1, 0, 1, 1, False, True),      # pointwise: the input is A, packed by the GEMM
    (1, 8, 9, 11, 16, 1, 1, 2, 0, 1, 1, False, False),     # strided 1x1: im2col in 6-row panels
    (1, 5, 4, 3, 7, 3, 3, 1, 2, 2, 1, False, True),        # dilation 2, padding 2
    (1, 3, 7, 7, 5, 3, 3, 2, 0, 1, 1, False, True),        # no padding: taps straight from the input
    (1, 120000, 1, 1, 3, 3, 3, 1, 1, 1, 1, False, False),  # padded copy over its limit: bounds-checked taps
    (1, 600, 7, 7, 40, 1, 1, 1, 0, 1, 1, False, True),     # pointwise, more input than output channels: with
]                                                           # 2-4 threads (test_openmp_build) split over channels


@pytest.mark.parametrize("case", SMALLP_CASES, ids=[f"smallp{i}" for i in range(len(SMALLP_CASES))])
def test_conv_smallp(lib, case):
    run_conv(lib, case, smallp=True)


@pytest.mark.parametrize("act", [("relu", 0.0, 0.0), ("clamp", 0.0, 6.0), ("gelu", 0.0, 0.0)])
def test_conv_smallp_activation(lib, act):
    # the NCHW store transposes 8x8 blocks of 8 channels and applies relu / clamp in registers;
    # ragged channels, the pixels past the last block and dearer activations go the scalar way
    for case in SMALLP_CASES[:4]:
        run_conv(lib, case, smallp=True, act=act)


# N, C, H, W, M (expanded channels), k, stride, pad, dilation, act1, act2, residual: a 1x1 conv to M
# channels, then a depthwise conv of those, by groups of channels (pt2c_conv2d_pw_dw)
PWDW_CASES = [
    (1, 16, 112, 112, 96, 3, 2, 1, 1, "clamp", "clamp", False),  # MobileNetV2's first expansion: 8 groups of 12
    (1, 24, 56, 56, 144, 3, 1, 1, 1, "clamp", "clamp", False),   # 6 groups of 24
    (2, 5, 30, 22, 40, 3, 1, 1, 1, "relu", "none", True),        # batch 2, a last group of 16, a residual
    (1, 3, 9, 13, 4, 5, 2, 2, 2, "hardswish", "relu", False),    # fewer channels than a panel, 5x5 dilated
    (1, 7, 40, 40, 150, 3, 2, 1, 1, "none", "clamp", False),     # 150 = 24 x 6 + 6
]


def run_pwdw(lib, case):
    import torch
    import torch.nn.functional as F

    from pt2c.kernels import scratch as S

    n, c, h, w, m, k, s, p, d, act1, act2, residual = case
    rng = np.random.default_rng(abs(hash(case)) % (2**32))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    w1 = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    b1 = rng.standard_normal(m).astype(np.float32)
    wd = rng.standard_normal((m, 1, k, k)).astype(np.float32)
    b2 = rng.standard_normal(m).astype(np.float32)
    mid = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w1).double(), torch.from_numpy(b1).double()).numpy()
    mid = _act_ref(mid, act1, 0.0, 6.0)
    ref = F.conv2d(torch.from_numpy(mid), torch.from_numpy(wd).double(), torch.from_numpy(b2).double(), stride=s,
                   padding=p, dilation=d, groups=m).numpy()
    res = rng.standard_normal(ref.shape).astype(np.float32) if residual else None
    if residual:
        ref = ref + res
    ref = _act_ref(ref, act2, -1.0, 1.0)
    oh, ow = ref.shape[2:]
    sizes = np.array([n, c, h, w, m, k, k, s, s, p, p, d, d, oh, ow], np.int32)
    floats = lib.t_pwdw_scratch(_ptr(sizes))
    assert S.conv2d_pw_dw_scratch_floats(c, h, w, m, k, k, s, s, p, p, d, d, oh, ow) == floats
    scratch = np.full(floats + 64, 3.0, np.float32)  # exactly sized, then a canary
    out = np.full(ref.shape, np.nan, np.float32)
    w1p, wdk = pack_conv_weight(w1, 1), np.ascontiguousarray(wd.reshape(m, k * k))  # (alive during the call)
    lib.t_pwdw(_ptr(out), _ptr(x), _ptr(w1p), _ptr(b1), ACTS.index(act1), _ptr(wdk), _ptr(b2), _ptr(res),
               ACTS.index(act2), _ptr(sizes), _ptr(scratch))
    _check(out, ref, f"conv pw+dw {case}")
    assert np.all(scratch[floats:] == 3.0), f"{case}: wrote past its scratch"


@pytest.mark.parametrize("case", PWDW_CASES, ids=[f"pwdw{i}" for i in range(len(PWDW_CASES))])
def test_conv_pw_dw(lib, case):
    run_pwdw(lib, case)


def test_conv_scratch_bounded(lib):
    # a large 3x3 conv: no padded copy of the input this large, scratch stays at a few MB
    sizes = np.array([1, 256, 112, 112, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 112, 112], np.int32)
    assert lib.t_conv_scratch(_ptr(sizes)) * 4 <= 4 << 20


def test_scratch_mirror_matches_c(lib):
    # kernels/scratch.py must give exactly the C sizes (the workspace plan is built from it)
    from pt2c.kernels import scratch as S
    dims = [1, 5, 16, 17, 64, 100, 145, 300, 1000, 3000]
    for M, N, K in itertools.product(dims, dims, [1, 24, 256, 257, 2000]):
        for ap, bp in itertools.product((0, 1), (0, 1)):
            assert S.sgemm_scratch_floats(M, N, K, bool(ap), bool(bp)) == lib.t_sgemm_scratch_ex(M, N, K, ap, bp), \
                (M, N, K, ap, bp)
        assert S.sgemm_scratch_floats(M, N, K) == lib.t_sgemm_scratch(M, N, K)
    for n, c, h, w, oc, kh, kw, st, p, d, g, depthwise, _ in CONV_CASES + [(1, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1,
                                                                            False, False)]:
        if depthwise:
            continue
        oh, ow = (h + 2 * p - d * (kh - 1) - 1) // st + 1, (w + 2 * p - d * (kw - 1) - 1) // st + 1
        sizes = np.array([n, c, h, w, oc, kh, kw, st, st, p, p, d, d, g, oh, ow], np.int32)
        assert S.conv2d_scratch_floats(*map(int, sizes[1:])) == lib.t_conv_scratch(_ptr(sizes))
    for c, oc, oh, ow in itertools.product([16, 64, 512], [16, 100, 512], [1, 7, 14, 56, 113], [5, 56, 224]):
        assert S.conv2d_wino_scratch_floats(c, oc, oh, ow) == lib.t_wino_scratch(c, oc, oh, ow), (c, oc, oh, ow)


def test_gemm_scratch_small_for_packed_weights(lib):
    # a linear layer (B = pre-packed weight, few rows of activations) needs no scratch at all;
    # a big unpacked product gets one region per thread it can actually use, not PT2C_MAX_THREADS
    assert lib.t_sgemm_scratch_ex(1, 1000, 512, 0, 1) == 0
    assert lib.t_sgemm_scratch_ex(64, 64, 64, 0, 0) * 4 <= 256 << 10


# ---- other builds ----

def test_layout_matches_formula():
    a = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    pa = pack_a(a)
    assert pa.size == 12 * 5
    for i, k in itertools.product(range(7), range(5)):
        assert pa[(i // MR) * MR * 5 + k * MR + i % MR] == a[i, k]
    b = np.arange(5 * 17, dtype=np.float32).reshape(5, 17)
    pb = pack_b(b)
    assert pb.size == 5 * 32
    for k, j in itertools.product(range(5), range(17)):
        assert pb[(j // NR) * NR * 5 + k * NR + j % NR] == b[k, j]


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")
def test_scalar_build_clang(tmp_path):
    dll = _build(tmp_path, "scalar", "clang", ["-O2"])
    for M, N, K in [(1, 33, 100), (7, 17, 300), (33, 5, 7), (100, 100, 33)]:
        run_gemm(dll, M, N, K, b_mode="packed" if M < 8 else "row", bias="col", residual=True, act="gelu")
    for case in (CONV_CASES[0], CONV_CASES[3], CONV_CASES[10], *DW_S2_CASES, *DW_ROWS_CASES):
        run_conv(dll, case)
    for case in WINO_CASES[1:4]:
        run_wino(dll, case)
    for case in PWDW_CASES[2:]:
        run_pwdw(dll, case)


def test_openmp_build(tmp_path):
    dll = _build(tmp_path, "omp", "gcc", ["-O2", "-mavx2", "-mfma", "-fopenmp"])
    dll.t_set_threads(2)
    # split over N (A packed once, shared), over M, skinny, and a threaded conv
    for (M, N, K), a_mode, b_mode in [((100, 300, 300), "row", "row"), ((300, 100, 300), "packed", "row"),
                                      ((4, 1000, 300), "row", "packed"), ((301, 37, 200), "trans", "packed"),
                                      ((100, 500, 200), "trans", "packed")]:
        run_gemm(dll, M, N, K, a_mode=a_mode, b_mode=b_mode, bias="row", residual=True, act="relu")
    for case in (CONV_CASES[8], CONV_CASES[9], *DW_S2_CASES, *DW_ROWS_CASES):
        run_conv(dll, case)
    for case in SMALLP_CASES:
        run_conv(dll, case, smallp=True)
    for case in WINO_CASES[1:]:  # threaded transforms and the 36 GEMMs spread over threads
        run_wino(dll, case)
    for case in PWDW_CASES:  # groups over threads, each with its share of the scratch
        run_pwdw(dll, case)
    # more threads than the machine has: each gets its own slice of the (exactly sized) scratch
    for nt in (3, 8, 16):
        dll.t_set_threads(nt)
        for (M, N, K), a_mode, b_mode in [((200, 700, 300), "row", "row"), ((700, 40, 300), "trans", "row"),
                                          ((64, 3000, 100), "row", "packed")]:
            run_gemm(dll, M, N, K, a_mode=a_mode, b_mode=b_mode, bias="col", act="clamp")
        for case in (SMALLP_CASES[0], SMALLP_CASES[6], SMALLP_CASES[7]):  # split over channels by 3, not by 8
            run_conv(dll, case, smallp=True)
        for case in (PWDW_CASES[2], PWDW_CASES[4]):
            run_pwdw(dll, case)
    dll.t_set_threads(2)


SANITIZE_MAIN = r"""
#include "conv.c"
#include <stdio.h>
#include <stdlib.h>
static unsigned rng_state = 12345u;
static float frand(void) { rng_state = rng_state * 1664525u + 1013904223u; return (float)(rng_state >> 8) / 16777216.0f - 0.5f; }
static float *rnd(size_t n) { float *p = malloc((n ? n : 1) * sizeof(float)); size_t i; for (i = 0; i < n; i++) p[i] = frand(); return p; }
static int check(const float *x, const float *y, int M, int N, int ld, const char *what)
{
    int i, j;
    for (i = 0; i < M; i++)
        for (j = 0; j < N; j++)
            if (fabsf(x[i * ld + j] - y[i * ld + j]) > 1e-3f * (1.0f + fabsf(y[i * ld + j]))) {
                printf("%s mismatch at %d,%d: %g vs %g\n", what, i, j, x[i * ld + j], y[i * ld + j]);
                return 1;
            }
    return 0;
}
static void pack(float *dst, const float *src, int rows, int cols, int R, int a)
{   /* a: pack rows of src (M x K) in panels of R rows; else columns of src (K x N) in panels of R columns */
    int i, k, P = (a ? rows : cols) + R - 1;
    P = P / R * R;
    memset(dst, 0, (size_t)P * (a ? cols : rows) * sizeof(float));
    for (i = 0; i < rows; i++)
        for (k = 0; k < cols; k++) {
            if (a) dst[(i / R) * R * cols + k * R + i % R] = src[i * cols + k];
            else dst[(k / R) * R * rows + i * R + k % R] = src[i * cols + k];
        }
}
int main(void)
{
    static const int sz[][3] = {{1, 1, 1}, {5, 17, 7}, {6, 16, 300}, {7, 33, 257}, {17, 5, 33}, {100, 40, 300}, {3, 300, 20}};
    int s, ap, bp, act, bad = 0;
    for (s = 0; s < (int)(sizeof sz / sizeof sz[0]); s++)
        for (ap = 0; ap < 2; ap++)
            for (bp = 0; bp < 2; bp++)
                for (act = 0; act <= PT2C_ACT_TANH; act += 4) {
                    int M = sz[s][0], N = sz[s][1], K = sz[s][2], ldc = N + 1;
                    float *A = rnd((size_t)M * K), *B = rnd((size_t)K * N), *bias = rnd((size_t)M);
                    float *res = rnd((size_t)M * ldc);
                    float *Ap = malloc(sizeof(float) * (size_t)(M + 6) * K), *Bp = malloc(sizeof(float) * (size_t)(N + 16) * K);
                    float *C1 = rnd((size_t)M * ldc), *C2 = malloc(sizeof(float) * (size_t)M * ldc);
                    float *scr = malloc(sizeof(float) * (pt2c_sgemm_scratch_floats(M, N, K) + 1));
                    pt2c_epilogue ep = {0};
                    ep.bias = bias, ep.bias_per_row = 1, ep.residual = res, ep.ldr = ldc, ep.act = act, ep.lo = -0.1f, ep.hi = 0.1f;
                    memcpy(C2, C1, sizeof(float) * (size_t)M * ldc);
                    pack(Ap, A, M, K, PT2C_GEMM_MR, 1);
                    pack(Bp, B, K, N, PT2C_GEMM_NR, 0);
                    pt2c_sgemm(C1, ldc, ap ? Ap : A, K, 1, ap, bp ? Bp : B, bp ? 0 : N, 1, bp, M, N, K, &ep, scr);
                    pt2c_sgemm_naive(C2, ldc, A, K, 1, 0, B, N, 1, 0, M, N, K, &ep, NULL);
                    bad |= check(C1, C2, M, ldc, ldc, "gemm");
                    free(A), free(B), free(bias), free(res), free(Ap), free(Bp), free(C1), free(C2), free(scr);
                }
    {   /* conv: 3x3 stride 2 and 1, pad 1 (im2col) and depthwise, checked against a direct loop; W = 8
         * and 33: the depthwise strips (x86) */
        int C = 4, H = 9, W, OC = 8, KH = 3, KW = 3, st, pd = 1, OH, OW, oc, oh, ow, c, kh, kw, dwc;
        static const int Ws[] = {8, 33, 461}; /* 461: the split-row (stride 2) and flattened (stride 1) paths */
        int wi;
        for (st = 2; st >= 1; st--)
        for (wi = 0; wi < 3; wi++) {
            W = Ws[wi];
            float *in = rnd((size_t)C * H * W), *w = rnd((size_t)OC * C * KH * KW), *wp = malloc(sizeof(float) * 12 * C * KH * KW);
            float *o1, *o2, *scr, *dws;
            OH = (H - 1) / st + 1, OW = (W - 1) / st + 1;
            o1 = malloc(sizeof(float) * OC * OH * OW), o2 = malloc(sizeof(float) * OC * OH * OW);
            scr = malloc(sizeof(float) * pt2c_conv2d_scratch_floats(C, H, W, OC, KH, KW, st, st, pd, pd, 1, 1, 1, OH, OW));
            dws = malloc(sizeof(float) * pt2c_conv2d_depthwise_scratch_floats(H, W, OH, OW, KH, KW, st, st, pd, pd, 1, 1));
            pack(wp, w, OC, C * KH * KW, PT2C_GEMM_MR, 1);
            for (dwc = 0; dwc < 2; dwc++) {
                int Cg = dwc ? 1 : C;
                if (dwc) pt2c_conv2d_depthwise(o1, in, w, NULL, 1, C, H, W, OC, KH, KW, st, st, pd, pd, 1, 1, OH, OW, dws);
                else pt2c_conv2d(o1, in, wp, NULL, 1, C, H, W, OC, KH, KW, st, st, pd, pd, 1, 1, 1, OH, OW, scr);
                for (oc = 0; oc < OC; oc++)
                    for (oh = 0; oh < OH; oh++)
                        for (ow = 0; ow < OW; ow++) {
                            float acc = 0.0f;
                            for (c = 0; c < Cg; c++)
                                for (kh = 0; kh < KH; kh++)
                                    for (kw = 0; kw < KW; kw++) {
                                        int ih = oh * st - pd + kh, iw = ow * st - pd + kw, ic = dwc ? oc / 2 : c;
                                        if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                            acc += in[(ic * H + ih) * W + iw] * w[((oc * Cg + c) * KH + kh) * KW + kw];
                                    }
                            o2[(oc * OH + oh) * OW + ow] = acc;
                        }
                bad |= check(o1, o2, OC, OH * OW, OH * OW, dwc ? "depthwise" : "conv");
            }
            free(in), free(w), free(wp), free(o1), free(o2), free(scr), free(dws);
        }
    }
    {   /* Winograd F(4x4, 3x3), ragged tiles, bias + relu, against a direct loop: pad 1, and pad 0 with
         * the last tile's patch at the plane's end (its rows are copied, not read 8 wide in place) */
        static const float G[6][3] = {{0.25f, 0, 0}, {-1.0f / 6, -1.0f / 6, -1.0f / 6}, {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                                      {1.0f / 24, 1.0f / 12, 1.0f / 6}, {1.0f / 24, -1.0f / 12, 1.0f / 6}, {0, 0, 1}};
        int pd;
        for (pd = 1; pd >= 0; pd--) {
            int C = 17, H = pd ? 13 : 14, W = 10, OC = 20, OH = H + 2 * pd - 2, OW = W + 2 * pd - 2;
            int oc, oh, ow, c, kh, kw, r, t, xi;
            float *in = rnd((size_t)C * H * W), *w = rnd((size_t)OC * C * 9), *bias = rnd((size_t)OC);
            float *u = malloc(sizeof(float) * 36 * OC * C), *up = malloc(sizeof(float) * 36 * 24 * C);
            float *o1 = malloc(sizeof(float) * OC * OH * OW), *o2 = malloc(sizeof(float) * OC * OH * OW);
            float *scr = malloc(sizeof(float) * pt2c_conv2d_wino_scratch_floats(C, OC, OH, OW));
            pt2c_epilogue ep = {0};
            ep.bias = bias, ep.bias_per_row = 1, ep.act = PT2C_ACT_RELU;
            for (oc = 0; oc < OC; oc++)
                for (c = 0; c < C; c++)
                    for (r = 0; r < 6; r++)
                        for (t = 0; t < 6; t++) {
                            float acc = 0.0f;
                            for (kh = 0; kh < 3; kh++)
                                for (kw = 0; kw < 3; kw++) acc += G[r][kh] * w[((oc * C + c) * 3 + kh) * 3 + kw] * G[t][kw];
                            u[((r * 6 + t) * OC + oc) * C + c] = acc;
                        }
            for (xi = 0; xi < 36; xi++) pack(up + (size_t)xi * 24 * C, u + (size_t)xi * OC * C, OC, C, PT2C_GEMM_MR, 1);
            pt2c_conv2d_wino(o1, in, up, &ep, 1, C, H, W, OC, pd, pd, OH, OW, scr);
            for (oc = 0; oc < OC; oc++)
                for (oh = 0; oh < OH; oh++)
                    for (ow = 0; ow < OW; ow++) {
                        float acc = bias[oc];
                        for (c = 0; c < C; c++)
                            for (kh = 0; kh < 3; kh++)
                                for (kw = 0; kw < 3; kw++) {
                                    int ih = oh - pd + kh, iw = ow - pd + kw;
                                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                        acc += in[(c * H + ih) * W + iw] * w[((oc * C + c) * 3 + kh) * 3 + kw];
                                }
                        o2[(oc * OH + oh) * OW + ow] = acc > 0.0f ? acc : 0.0f;
                    }
            bad |= check(o1, o2, OC, OH * OW, OH * OW, "winograd");
            free(in), free(w), free(bias), free(u), free(up), free(o1), free(o2), free(scr);
        }
    }
    {   /* a 1x1 conv to M channels then a depthwise 3x3 (stride 2 and 1), by groups of 24 + 16, with
         * exactly sized scratch, against the two calls */
        int C = 3, H = 20, W = 21, M = 40, st;
        for (st = 2; st >= 1; st--) {
            const int OH = (H - 1) / st + 1, OW = (W - 1) / st + 1;
            float *in = rnd((size_t)C * H * W), *w1 = rnd((size_t)M * C), *wd = rnd((size_t)M * 9);
            float *b1 = rnd((size_t)M), *b2 = rnd((size_t)M), *w1p = malloc(sizeof(float) * 42 * C);
            float *mid = malloc(sizeof(float) * M * H * W), *o1 = malloc(sizeof(float) * M * OH * OW);
            float *o2 = malloc(sizeof(float) * M * OH * OW);
            float *s1 = malloc(sizeof(float) * pt2c_conv2d_pw_dw_scratch_floats(C, H, W, M, 3, 3, st, st, 1, 1, 1, 1, OH, OW));
            float *s2 = malloc(sizeof(float) * (pt2c_conv2d_scratch_floats(C, H, W, M, 1, 1, 1, 1, 0, 0, 1, 1, 1, H, W) +
                                                pt2c_conv2d_depthwise_scratch_floats(H, W, OH, OW, 3, 3, st, st, 1, 1, 1, 1) + 1));
            pt2c_epilogue e1 = {0}, e2 = {0};
            e1.bias = b1, e1.bias_per_row = 1, e1.act = PT2C_ACT_CLAMP, e1.lo = -0.2f, e1.hi = 0.2f;
            e2.bias = b2, e2.bias_per_row = 1, e2.act = PT2C_ACT_RELU;
            pack(w1p, w1, M, C, PT2C_GEMM_MR, 1);
            pt2c_conv2d_pw_dw(o1, in, w1p, &e1, wd, &e2, 1, C, H, W, M, 3, 3, st, st, 1, 1, 1, 1, OH, OW, s1);
            pt2c_conv2d(mid, in, w1p, &e1, 1, C, H, W, M, 1, 1, 1, 1, 0, 0, 1, 1, 1, H, W, s2);
            pt2c_conv2d_depthwise(o2, mid, wd, &e2, 1, M, H, W, M, 3, 3, st, st, 1, 1, 1, 1, OH, OW, s2);
            bad |= check(o1, o2, M, OH * OW, OH * OW, "pw_dw");
            free(in), free(w1), free(wd), free(b1), free(b2), free(w1p), free(mid), free(o1), free(o2), free(s1), free(s2);
        }
    }
    printf(bad ? "FAIL\n" : "OK\n");
    return bad;
}
"""


@pytest.mark.parametrize("flags", [["-mavx2", "-mfma"], []], ids=["avx2", "scalar"])
def test_sanitizers(tmp_path, flags):
    src = tmp_path / "san.c"
    src.write_text(SANITIZE_MAIN)
    exe = tmp_path / "san"
    cmd = ["gcc", *WARN, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", *flags,
           f"-I{KDIR}", str(src), "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


SMALL_TEAM_MAIN = r"""
#include "conv.c"
#include <stdio.h>
#include <stdlib.h>
/* smallp convs asked for 2 threads: the same output as with 1, whatever team OpenMP gives */
static int run(int C, int OC, int H, int KK, int pad)
{
    const int P = H * H, K = C * KK * KK, np = (OC + 15) / 16;
    float *in = malloc(sizeof(float) * C * P), *w = malloc(sizeof(float) * K * np * 16);
    float *o1 = malloc(sizeof(float) * OC * P), *o2 = malloc(sizeof(float) * OC * P);
    float *s = malloc(sizeof(float) * pt2c_conv2d_smallp_scratch_floats(C, H, H, OC, KK, KK, 1, 1, pad, pad, 1, 1, H, H));
    int i, bad = 0;
    for (i = 0; i < C * P; i++) in[i] = (float)(i % 7 - 3); /* small integers: every sum exact */
    for (i = 0; i < K * np * 16; i++) w[i] = (float)(i % 5 - 2);
    omp_set_num_threads(1);
    pt2c_conv2d_smallp(o1, in, w, NULL, 1, C, H, H, OC, KK, KK, 1, 1, pad, pad, 1, 1, H, H, s);
    omp_set_num_threads(2);
    pt2c_conv2d_smallp(o2, in, w, NULL, 1, C, H, H, OC, KK, KK, 1, 1, pad, pad, 1, 1, H, H, s);
    for (i = 0; i < OC * P; i++) bad |= o1[i] != o2[i];
    free(in), free(w), free(o1), free(o2), free(s);
    return bad;
}
int main(void)
{
    int bad = run(576, 160, 7, 1, 0) | run(256, 64, 7, 3, 1);
    printf(bad ? "MISMATCH\n" : "OK\n");
    return bad;
}
"""


def test_smaller_team_than_asked(tmp_path):
    """OMP_THREAD_LIMIT=1 under 2 requested threads: a kernel that splits work by the number of
    threads it asked for must split by the team it got (the smallp channel split did not)."""
    src = tmp_path / "team.c"
    src.write_text(SMALL_TEAM_MAIN)
    exe = tmp_path / "team"
    subprocess.run(["gcc", *WARN, "-O2", "-mavx2", "-mfma", "-fopenmp", f"-I{KDIR}", str(src), "-o", str(exe), "-lm"],
                   check=True)
    for limit in ("1", "2"):
        r = subprocess.run([str(exe)], capture_output=True, text=True, env=dict(os.environ, OMP_THREAD_LIMIT=limit))
        assert r.returncode == 0 and "OK" in r.stdout, f"OMP_THREAD_LIMIT={limit}: {r.stdout}{r.stderr}"


def _host_has_avx512() -> bool:
    try:
        flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"))


def test_avx512_build(tmp_path):
    """x86-64-v4: the 6x32 AVX-512 micro-kernel (two B panels at once), every epilogue, partial
    tiles, k blocks and the kernels built on the GEMM.  Run where the CPU has AVX-512; elsewhere
    compiled only (the init-time CPU check keeps such a library from running there)."""
    dll = _build(tmp_path, "avx512", "gcc", ["-O2", "-march=x86-64-v4"])
    if not _host_has_avx512():
        pytest.skip("compiled; this CPU has no AVX-512 to run it")
    for (M, N, K), a_mode, b_mode in [((6, 32, 40), "packed", "packed"), ((100, 300, 300), "row", "row"),
                                      ((13, 70, 513), "packed", "packed"), ((301, 37, 200), "trans", "packed"),
                                      ((4, 1000, 300), "row", "packed"), ((64, 48, 1), "row", "row"),
                                      # last row panels of 2, 3 and 5 rows (phased k loops for 1 and 2)
                                      ((8, 64, 51), "packed", "packed"), ((9, 64, 33), "packed", "packed"),
                                      ((35, 96, 70), "row", "packed"), ((49, 64, 300), "packed", "packed"),
                                      # up to 16 rows of A read in place (6 x 32 tiles; last of 4 / 5 rows)
                                      ((16, 96, 300), "row", "packed"), ((11, 40, 37), "strided", "row"),
                                      ((1, 64, 300), "row", "packed")]:
        for act in ("none", "relu", "clamp", "gelu"):
            run_gemm(dll, M, N, K, a_mode=a_mode, b_mode=b_mode, bias="row", residual=True, act=act)
            run_gemm(dll, M, N, K, a_mode=a_mode, b_mode=b_mode, bias="col", act=act)
    for case in CONV_CASES:
        run_conv(dll, case)
    for case in DW_ROWS_CASES:
        for act in DW_ACTS:
            run_conv(dll, case, act=act)
    for case in SMALLP_CASES:
        run_conv(dll, case, smallp=True)
    for case in WINO_CASES:
        run_wino(dll, case)
