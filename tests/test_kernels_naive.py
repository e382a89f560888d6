"""Fast kernels against the plain C references beside them (kernels/*_naive.c).

One harness translation unit #includes the fast kernels (as a generated model does) and the naive
references (which no kernel includes, so no artifact gets them), built with gcc and clang for the
generic target (no SIMD), x86_64-v3 (AVX2) and, where the host has AVX-512, x86_64-v4; every fast
path is run over a table of shapes and compared with its reference on the same inputs.

Tolerances (float32, references summed in double), as max abs err <= tol * max(1, max|ref|): the
direct algorithms (im2col + GEMM, few-pixel, depthwise, the fused 1x1 + depthwise, attention,
average pooling) 1e-5 (worst seen 4.8e-7); Winograd 2e-5 (worst seen 2.6e-6: its transforms scale
by up to 8 and 1/24, so it rounds differently from a direct sum); max pooling exact, NaN included.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
KDIR = ROOT / "src" / "pt2c" / "kernels"
sys.path.insert(0, str(ROOT / "src"))

from pt2c.kernels.layout import pack_conv_weight, pack_conv_weight_t, pack_winograd_weight  # noqa: E402

STRICT = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
ACTS = ["none", "relu", "clamp", "hardswish", "silu", "gelu", "gelu_tanh", "sigmoid", "tanh"]
DIRECT_TOL, WINO_TOL = 1e-5, 2e-5

HARNESS = r"""
#include "conv.c"
#include "attention.c"
#include "pool.c"
#include "conv_naive.c"
#include "attention_naive.c"
#include "pool_naive.c"

/* s: N C H W OC KH KW sh sw ph pw dh dw groups OH OW; e: bias, residual (NULL: none), act, lo, hi */
static pt2c_epilogue t_ep(const float *bias, const float *res, int act, float lo, float hi)
{
    pt2c_epilogue ep;
    ep.bias = bias, ep.bias_per_row = 1, ep.residual = res, ep.ldr = 0, ep.act = act, ep.lo = lo, ep.hi = hi;
    return ep;
}
size_t t_conv_scratch(const int *s)
{
    return pt2c_conv2d_scratch_floats(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                                      s[13], s[14], s[15]);
}
size_t t_smallp_scratch(const int *s)
{
    return pt2c_conv2d_smallp_scratch_floats(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                                             s[14], s[15]);
}
size_t t_wino_scratch(const int *s) { return pt2c_conv2d_wino_scratch_floats(s[1], s[4], s[14], s[15]); }
size_t t_dw_scratch(const int *s)
{
    return pt2c_conv2d_depthwise_scratch_floats(s[2], s[3], s[14], s[15], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                                s[12]);
}
/* which: 0 naive, 1 im2col / GEMM, 2 few pixels, 3 Winograd, 4 depthwise, 5 depthwise naive */
void t_conv(int which, float *out, const float *in, const float *w, const float *bias, const float *res, int act,
            float lo, float hi, const int *s, float *scratch)
{
    pt2c_epilogue ep = t_ep(bias, res, act, lo, hi);
    switch (which) {
    case 0:
        pt2c_conv2d_naive(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                          s[12], s[13], s[14], s[15]);
        break;
    case 1:
        pt2c_conv2d(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                    s[13], s[14], s[15], scratch);
        break;
    case 2:
        pt2c_conv2d_smallp(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                           s[12], s[14], s[15], scratch);
        break;
    case 3:
        pt2c_conv2d_wino(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[9], s[10], s[14], s[15], scratch);
        break;
    case 4:
        pt2c_conv2d_depthwise(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
                              s[11], s[12], s[14], s[15], scratch);
        break;
    default:
        pt2c_conv2d_depthwise_naive(out, in, w, &ep, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9],
                                    s[10], s[11], s[12], s[14], s[15]);
    }
}
/* s: N C H W M KH KW sh sw ph pw dh dw OH OW */
size_t t_pwdw_scratch(const int *s)
{
    return pt2c_conv2d_pw_dw_scratch_floats(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                            s[12], s[13], s[14]);
}
void t_pwdw(int naive, float *out, const float *in, const float *w1, const float *b1, int a1, const float *wd,
            const float *b2, const float *res, int a2, const int *s, float *scratch)
{
    pt2c_epilogue e1 = t_ep(b1, NULL, a1, 0.0f, 6.0f), e2 = t_ep(b2, res, a2, -1.0f, 1.0f);
    (naive ? pt2c_conv2d_pw_dw_naive : pt2c_conv2d_pw_dw)(out, in, w1, &e1, wd, &e2, s[0], s[1], s[2], s[3], s[4],
                                                          s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13],
                                                          s[14], scratch);
}
size_t t_sdpa_scratch(int Lq, int Lk, int D, int Dv) { return pt2c_sdpa_scratch_floats(Lq, Lk, D, Dv); }
/* s: B H Hkv Lq Lk D Dv causal; ms: the mask's 4 strides; lay: 12 strides (q, k, v, out: batch, head,
   row) or NULL (dense) */
void t_sdpa(int naive, float *o, const float *q, const float *k, const float *v, const float *ma,
            const unsigned char *mb, const long *ms, const int *s, float scale, const long *lay, float *scratch)
{
    pt2c_sdpa_layout l;
    if (lay) {
        l.q.b = lay[0], l.q.h = lay[1], l.q.r = lay[2], l.k.b = lay[3], l.k.h = lay[4], l.k.r = lay[5];
        l.v.b = lay[6], l.v.h = lay[7], l.v.r = lay[8], l.out.b = lay[9], l.out.h = lay[10], l.out.r = lay[11];
    }
    (naive ? pt2c_sdpa_naive : pt2c_sdpa)(o, q, k, v, ma, mb, ms[0], ms[1], ms[2], ms[3], s[0], s[1], s[2], s[3],
                                          s[4], s[5], s[6], scale, s[7], lay ? &l : NULL, scratch);
}
/* s: NC H W KH KW sh sw ph pw dh dw OH OW cip div */
void t_maxpool(int naive, float *o, const float *x, const int *s)
{
    (naive ? pt2c_maxpool2d_naive : pt2c_maxpool2d)(o, x, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9],
                                                    s[10], s[11], s[12]);
}
void t_avgpool(int naive, float *o, const float *x, const int *s)
{
    (naive ? pt2c_avgpool2d_naive : pt2c_avgpool2d)(o, x, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[11],
                                                    s[12], s[13], s[14]);
}
"""


def _host_has_avx512() -> bool:
    try:
        return " avx512f " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


# (compiler, target name, flags): the generic target's flags and x86-64 levels, as pt2c's targets
BUILDS = [(cc, name, flags) for cc in ("gcc", "clang") for name, flags in
          (("generic", ["-DPT2C_NO_SIMD"]), ("x86_64_v3", ["-march=x86-64-v3"]))]
if _host_has_avx512():
    BUILDS.append(("gcc", "x86_64_v4", ["-march=x86-64-v4"]))
BUILD_IDS = [f"{cc}-{name}" for cc, name, _ in BUILDS]


def _build(tmp: Path, cc: str, name: str, flags: list[str]) -> ctypes.CDLL:
    src = tmp / "harness.c"
    lib = tmp / f"lib_{cc}_{name}.so"
    subprocess.run([cc, *STRICT, *flags, "-fPIC", "-shared", f"-I{KDIR}", str(src), "-o", str(lib), "-lm"],
                   check=True)
    dll = ctypes.CDLL(str(lib))
    p, i, f, z = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_size_t
    for fn in ("t_conv_scratch", "t_smallp_scratch", "t_wino_scratch", "t_dw_scratch", "t_pwdw_scratch"):
        getattr(dll, fn).restype, getattr(dll, fn).argtypes = z, [p]
    dll.t_sdpa_scratch.restype, dll.t_sdpa_scratch.argtypes = z, [i, i, i, i]
    dll.t_conv.argtypes = [i, p, p, p, p, p, i, f, f, p, p]
    dll.t_pwdw.argtypes = [i, p, p, p, p, i, p, p, p, i, p, p]
    dll.t_sdpa.argtypes = [i, p, p, p, p, p, p, p, p, f, p, p]
    dll.t_maxpool.argtypes = dll.t_avgpool.argtypes = [i, p, p, p]
    return dll


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, ctypes.CDLL]:
    tmp = tmp_path_factory.mktemp("naive")
    (tmp / "harness.c").write_text(HARNESS)
    todo = [(bid, b) for bid, b in zip(BUILD_IDS, BUILDS) if shutil.which(b[0])]
    with ThreadPoolExecutor(4) as ex:
        built = list(ex.map(lambda t: _build(tmp, *t[1]), todo))
    return {bid: lib for (bid, _), lib in zip(todo, built)}


def _lib(libs, build):
    if build not in libs:
        pytest.skip(f"{build.split('-')[0]} not installed")
    return libs[build]


def _ptr(a):
    return None if a is None else a.ctypes.data_as(ctypes.c_void_p)


def _close(got: np.ndarray, ref: np.ndarray, tol: float, what: str) -> None:
    assert got.shape == ref.shape and np.isfinite(ref).all(), what
    err = float(np.abs(got - ref).max()) if ref.size else 0.0
    bound = tol * max(1.0, float(np.abs(ref).max()) if ref.size else 0.0)
    assert err <= bound, f"{what}: max abs err {err:.3g} > {bound:.3g}"


def _out_size(n: int, k: int, s: int, p: int, d: int = 1, ceil: bool = False) -> int:
    """torch's pooling / conv output size, ceil_mode included"""
    span = d * (k - 1) + 1
    o = (n + 2 * p - span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


# ---------------------------------------------------------------- convolutions

# N, C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, groups, act: what each exercises in the comment
CONV_CASES = [
    (1, 16, 9, 11, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, "none"),       # 1x1: the input is the GEMM's B
    (2, 8, 13, 10, 12, 1, 1, 2, 2, 0, 0, 1, 1, 1, "relu"),       # strided 1x1: subsampled once
    (1, 5, 6, 7, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, "clamp"),         # 1x1 with padding: im2col
    (1, 16, 20, 18, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, "relu"),      # 3x3 same: Winograd-eligible
    (2, 3, 11, 13, 5, 3, 3, 1, 1, 0, 0, 1, 1, 1, "gelu"),        # odd sizes, no padding
    (1, 8, 15, 17, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, "silu"),       # 3x3 stride 2 (stride-2 im2col copies)
    (1, 4, 12, 14, 6, 5, 3, 2, 1, 2, 1, 1, 2, 1, "hardswish"),   # 5x3, strides 2x1, dilation 1x2
    (1, 8, 10, 10, 12, 3, 3, 1, 1, 1, 1, 1, 1, 2, "clamp"),      # 2 groups
    (2, 8, 9, 9, 8, 3, 3, 1, 1, 2, 2, 2, 2, 4, "tanh"),          # 4 groups, dilation 2
    (1, 3, 32, 32, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1, "relu"),       # ResNet's stem
    (1, 64, 7, 7, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, "gelu_tanh"),   # 7x7 output: the few-pixel kernel's case
    (1, 19, 13, 15, 21, 3, 3, 1, 1, 2, 2, 1, 1, 1, "sigmoid"),   # ragged tiles, padding 2 (Winograd too)
    (1, 24, 5, 3, 33, 3, 3, 2, 2, 1, 1, 1, 1, 1, "none"),        # tiny plane, ragged output channels
]
# depthwise (groups = C): N, C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, act
DW_CASES = [
    (1, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, "relu"),         # 3x3 s1 p1: vertical strips (x86)
    (1, 8, 56, 56, 8, 3, 3, 1, 1, 1, 1, 1, 1, "clamp"),          # the same, rows of 56
    (1, 12, 7, 5, 12, 3, 3, 1, 1, 1, 1, 1, 1, "none"),           # a 7x5 plane: one strip, masked lanes
    (1, 4, 40, 140, 4, 3, 3, 1, 1, 1, 1, 1, 1, "silu"),          # rows over 128: the flattened plane
    (1, 8, 40, 40, 8, 5, 5, 1, 1, 2, 2, 1, 1, "relu"),           # 5x5 same on a large plane: flattened
    (1, 16, 28, 28, 16, 3, 3, 2, 2, 1, 1, 1, 1, "clamp"),        # 3x3 s2 p1: strips with even / odd permutes
    (1, 8, 112, 112, 8, 3, 3, 2, 2, 1, 1, 1, 1, "relu"),         # large s2 plane: split rows (AVX2) / bands
    (1, 6, 15, 17, 6, 3, 3, 2, 2, 1, 1, 1, 1, "hardswish"),      # odd s2 plane
    (1, 4, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, "gelu"),           # channel multiplier 2: 8-channel bands
    (2, 8, 17, 15, 8, 3, 3, 2, 2, 2, 2, 2, 2, "none"),           # stride 2, dilation 2, batch 2
    (1, 10, 9, 12, 10, 3, 5, 1, 2, 0, 1, 1, 1, "tanh"),          # 3x5, mixed strides and padding
]


def _conv_data(case, groups):
    n, c, h, w, oc, kh, kw = case[:7]
    rng = np.random.default_rng(sum(case[:13]) * 7919 + len(case))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((oc, c // groups, kh, kw)) / np.sqrt(c // groups * kh * kw)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    return rng, x, wt, bias


def _sizes(case, groups):
    n, c, h, w, oc, kh, kw, sh, sw, ph, pw, dh, dw = case[:13]
    oh, ow = _out_size(h, kh, sh, ph, dh), _out_size(w, kw, sw, pw, dw)
    return np.array([n, c, h, w, oc, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow], np.int32), (n, oc, oh, ow)


def _run_conv(lib, which, s, oshape, x, wbuf, bias, res, act, scratch_floats=0):
    out = np.full(oshape, np.nan, np.float32)
    scratch = np.full(max(1, scratch_floats), np.nan, np.float32)  # NaN: a read of unwritten scratch shows
    lo, hi = (-0.5, 0.5) if act == "clamp" else (0.0, 0.0)
    lib.t_conv(which, _ptr(out), _ptr(x), _ptr(wbuf), _ptr(bias), _ptr(res), ACTS.index(act), lo, hi, _ptr(s),
               _ptr(scratch))
    return out


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}" for i in range(len(CONV_CASES))])
def test_conv_vs_naive(libs, build, case):
    """pt2c_conv2d, and where they apply the few-pixel and Winograd kernels, against pt2c_conv2d_naive"""
    lib = _lib(libs, build)
    g, act = case[13], case[14]
    rng, x, wt, bias = _conv_data(case, g)
    s, oshape = _sizes(case, g)
    res = rng.standard_normal(oshape).astype(np.float32) if sum(case[:4]) % 2 else None
    ref = _run_conv(lib, 0, s, oshape, x, wt, bias, res, act)
    got = _run_conv(lib, 1, s, oshape, x, pack_conv_weight(wt, g), bias, res, act, lib.t_conv_scratch(_ptr(s)))
    _close(got, ref, DIRECT_TOL, f"conv2d {case}")
    if g == 1:
        got = _run_conv(lib, 2, s, oshape, x, pack_conv_weight_t(wt), bias, res, act, lib.t_smallp_scratch(_ptr(s)))
        _close(got, ref, DIRECT_TOL, f"conv2d_smallp {case}")
    kh, kw, sh, sw, _, _, dh, dw = case[5:13]
    if g == 1 and (kh, kw, sh, sw, dh, dw) == (3, 3, 1, 1, 1, 1):  # Winograd's convs (any padding)
        got = _run_conv(lib, 3, s, oshape, x, pack_winograd_weight(wt), bias, res, act, lib.t_wino_scratch(_ptr(s)))
        _close(got, ref, WINO_TOL, f"conv2d_wino {case}")


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("case", DW_CASES, ids=[f"dw{i}" for i in range(len(DW_CASES))])
def test_depthwise_vs_naive(libs, build, case):
    """pt2c_conv2d_depthwise (and the grouped GEMM on the same conv) against pt2c_conv2d_depthwise_naive,
    which is pt2c_conv2d_naive with groups = C: checked against it too"""
    lib = _lib(libs, build)
    c, act = case[1], case[13]
    rng, x, wt, bias = _conv_data(case, c)
    s, oshape = _sizes(case, c)
    res = rng.standard_normal(oshape).astype(np.float32) if case[2] % 2 else None
    ref = _run_conv(lib, 5, s, oshape, x, wt, bias, res, act)
    np.testing.assert_array_equal(ref, _run_conv(lib, 0, s, oshape, x, wt, bias, res, act))
    got = _run_conv(lib, 4, s, oshape, x, wt, bias, res, act, lib.t_dw_scratch(_ptr(s)))
    _close(got, ref, DIRECT_TOL, f"depthwise {case}")
    got = _run_conv(lib, 1, s, oshape, x, pack_conv_weight(wt, c), bias, res, act, lib.t_conv_scratch(_ptr(s)))
    _close(got, ref, DIRECT_TOL, f"conv2d groups=C {case}")


# More (or less) padding after the input than before, as a folded asymmetric pad gives (passes/pads.py):
# the kernels take the padding before and the output size, which implies the padding after.
# (N, C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, groups), output rows and columns past the symmetric size
ASYM_CASES = [
    ((1, 16, 28, 28, 24, 3, 3, 2, 2, 0, 0, 1, 1, 1), 1, 1),      # TF "same" at stride 2, even size: pads (0, 1)
    ((1, 16, 56, 56, 24, 5, 5, 2, 2, 1, 1, 1, 1, 1), 1, 1),      # 5x5 stride 2, (1, 2): the padded copy grows
    ((1, 16, 9, 9, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1), 1, 2),        # 1x1 padded after only: not read in place
    ((1, 16, 13, 13, 24, 1, 1, 2, 2, 0, 0, 1, 1, 1), 1, 0),      # strided 1x1, a row past the input
    ((1, 16, 20, 18, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1), 1, 2),      # Winograd's shape, more padding after
    ((1, 16, 20, 18, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1), -1, 0),     # less after than before: (1, 0)
    ((1, 8, 7, 7, 24, 3, 3, 1, 1, 0, 0, 1, 1, 1), 2, 1),         # few pixels (smallp), no padding before
    ((1, 16, 32, 32, 16, 7, 7, 2, 2, 2, 2, 1, 1, 1), 1, 1),      # the stem's shape
    ((1, 16, 112, 112, 16, 3, 3, 2, 2, 0, 0, 1, 1, 16), 1, 1),   # depthwise: MobileNet's stride-2 layers, TF pads
    ((1, 16, 15, 15, 16, 3, 3, 2, 2, 1, 1, 1, 1, 16), 0, 1),     # depthwise, odd plane
    ((1, 8, 14, 14, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8), 1, 1),        # depthwise stride 1 (the strips' shape)
]


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("case", ASYM_CASES, ids=[f"asym{i}" for i in range(len(ASYM_CASES))])
def test_asymmetric_padding_vs_naive(libs, build, case):
    """every conv path that applies, at an output size that implies a different padding after the input"""
    lib = _lib(libs, build)
    (n, c, h, w, oc, kh, kw, sh, sw, ph, pw, dh, dw, g), eh, ew = case
    rng, x, wt, bias = _conv_data(case[0] + ("relu",), g)
    s, (_, _, oh, ow) = _sizes(case[0], g)
    s[14], s[15] = oh + eh, ow + ew
    oshape = (n, oc, oh + eh, ow + ew)
    ref = _run_conv(lib, 5 if g == c else 0, s, oshape, x, wt, bias, None, "relu")
    paths = [("conv2d", 1, pack_conv_weight(wt, g), lib.t_conv_scratch)]
    if g == c:
        paths.append(("depthwise", 4, wt, lib.t_dw_scratch))
    if g == 1:
        paths.append(("smallp", 2, pack_conv_weight_t(wt), lib.t_smallp_scratch))
    if g == 1 and (kh, kw, sh, sw, dh, dw) == (3, 3, 1, 1, 1, 1):
        paths.append(("wino", 3, pack_winograd_weight(wt), lib.t_wino_scratch))
    for what, which, wbuf, floats in paths:
        got = _run_conv(lib, which, s, oshape, x, wbuf, bias, None, "relu", floats(_ptr(s)))
        _close(got, ref, WINO_TOL if what == "wino" else DIRECT_TOL, f"{what} {case}")


# N, C, H, W, M, KH, KW, sh, sw, ph, pw, dh, dw, act1, act2, residual
PWDW_CASES = [
    (1, 8, 20, 20, 24, 3, 3, 1, 1, 1, 1, 1, 1, "clamp", "clamp", True),    # MobileNet's block, stride 1
    (1, 16, 30, 30, 48, 3, 3, 2, 2, 1, 1, 1, 1, "clamp", "none", False),   # stride 2
    (2, 4, 9, 11, 10, 5, 5, 1, 1, 2, 2, 1, 1, "silu", "relu", True),       # 5x5, ragged group, batch 2
    (1, 6, 64, 64, 40, 3, 3, 1, 1, 1, 1, 1, 1, "relu", "gelu", False),     # several groups of channels
    (1, 8, 112, 112, 24, 3, 3, 2, 2, 0, 0, 1, 1, "clamp", "none", False),  # TF pads (0, 1): an output row and
]                                                                          # column past the symmetric size
PWDW_ASYM = 4  # the cases from here on have one more output row and column


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("case", PWDW_CASES, ids=[f"pwdw{i}" for i in range(len(PWDW_CASES))])
def test_pw_dw_vs_naive(libs, build, case):
    lib = _lib(libs, build)
    n, c, h, w, m, kh, kw, sh, sw, ph, pw, dh, dw, a1, a2, fused = case
    rng = np.random.default_rng(sum(case[:13]))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    w1 = (rng.standard_normal((m, c)) / np.sqrt(c)).astype(np.float32)
    wd = (rng.standard_normal((m, kh, kw)) / np.sqrt(kh * kw)).astype(np.float32)
    b1, b2 = rng.standard_normal(m).astype(np.float32), rng.standard_normal(m).astype(np.float32)
    oh, ow = _out_size(h, kh, sh, ph, dh), _out_size(w, kw, sw, pw, dw)
    if PWDW_CASES.index(case) >= PWDW_ASYM:
        oh, ow = oh + 1, ow + 1
    s = np.array([n, c, h, w, m, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow], np.int32)
    res = rng.standard_normal((n, m, oh, ow)).astype(np.float32) if fused else None

    def run(naive, wbuf, floats):
        out = np.full((n, m, oh, ow), np.nan, np.float32)
        scratch = np.full(max(1, floats), np.nan, np.float32)
        lib.t_pwdw(naive, _ptr(out), _ptr(x), _ptr(wbuf), _ptr(b1), ACTS.index(a1), _ptr(wd), _ptr(b2), _ptr(res),
                   ACTS.index(a2), _ptr(s), _ptr(scratch))
        return out

    ref = run(1, w1, n * m * h * w)
    _close(run(0, pack_conv_weight(w1.reshape(m, c, 1, 1)), lib.t_pwdw_scratch(_ptr(s))), ref, DIRECT_TOL,
           f"pw_dw {case}")


# ---------------------------------------------------------------- attention

# B, H, Hkv, Lq, Lk, D, Dv, mask ("", "add": [B,1,1,Lk]-broadcast or full, "bool", "bool_t": bool stored
# key-major), causal
SDPA_CASES = [
    (1, 2, 2, 8, 8, 16, 16, "", 0),            # plain
    (2, 4, 4, 33, 33, 32, 32, "", 1),          # causal, ragged key tiles
    (1, 4, 2, 17, 40, 24, 16, "add", 0),       # grouped-query heads, D != Dv, additive mask with -inf
    (2, 2, 1, 5, 70, 64, 64, "bool", 0),       # boolean mask, some rows all masked (zeros)
    (1, 2, 2, 3, 3, 8, 8, "", 1),              # under 4 queries: dot products, no transpose
    (1, 1, 1, 1, 50, 16, 16, "bool_t", 0),     # one query; a mask with key stride != 1
    (1, 2, 2, 40, 20, 16, 16, "", 1),          # causal with Lq > Lk (top-left aligned)
    (1, 3, 3, 64, 64, 64, 64, "add", 1),       # mask and causal together
    (1, 2, 2, 130, 300, 8, 24, "", 0),         # several key and query tiles, small D
]


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("case", SDPA_CASES, ids=[f"sdpa{i}" for i in range(len(SDPA_CASES))])
def test_sdpa_vs_naive(libs, build, case):
    lib = _lib(libs, build)
    b, h, hkv, lq, lk, d, dv, mask, causal = case
    rng = np.random.default_rng(sum(case[:7]))
    q = rng.standard_normal((b, h, lq, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, lk, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, lk, dv)).astype(np.float32)
    ma = mb = None
    ms = np.zeros(4, np.int64)
    if mask == "add":
        if causal:  # full [B, H, Lq, Lk]
            ma = (rng.standard_normal((b, h, lq, lk)) * 2).astype(np.float32)
            ms[:] = [h * lq * lk, lq * lk, lk, 1]
        else:  # [B, 1, 1, Lk], a padding mask: -inf on some keys
            ma = np.where(rng.random((b, lk)) < 0.2, -np.inf, rng.standard_normal((b, lk))).astype(np.float32)
            ms[:] = [lk, 0, 0, 1]
    elif mask == "bool":
        mb = (rng.random((b, h, lq, lk)) < 0.7).astype(np.uint8)
        mb[:, :, 1, :] = 0  # a row with every key masked
        ms[:] = [h * lq * lk, lq * lk, lk, 1]
    elif mask == "bool_t":  # stored [B][H][Lk][Lq]
        mb = (rng.random((b, h, lk, lq)) < 0.5).astype(np.uint8)
        ms[:] = [h * lq * lk, lq * lk, 1, lq]
    s = np.array([b, h, hkv, lq, lk, d, dv, causal], np.int32)
    scale = float(1 / np.sqrt(d))

    def run(naive, floats):
        out = np.full((b, h, lq, dv), np.nan, np.float32)
        scratch = np.full(max(1, floats), np.nan, np.float32)
        lib.t_sdpa(naive, _ptr(out), _ptr(q), _ptr(k), _ptr(v), _ptr(ma), _ptr(mb), _ptr(ms), _ptr(s), scale, None,
                   _ptr(scratch))
        return out

    ref = run(1, lk)
    _close(run(0, lib.t_sdpa_scratch(lq, lk, d, dv)), ref, DIRECT_TOL, f"sdpa {case}")
    if mask == "bool":
        assert not ref[:, :, 1, :].any()


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("lq", [40, 2])  # the transposed-key path and the dot-product path
def test_sdpa_strided_layout(libs, build, lq):
    """q, k, v read in place from one fused [B, L, 3, H, D] projection (GPT-2's c_attn split into heads)
    and the output written as [B, L, H, Dv] (the permute back): the same numbers as dense copies."""
    lib = _lib(libs, build)
    b, h, lk, d = 2, 3, 40, 16
    rng = np.random.default_rng(lq)
    qkv = rng.standard_normal((b, lk, 3, h, d)).astype(np.float32)
    qkv_q = rng.standard_normal((b, lq, h, d)).astype(np.float32)  # queries: [B, Lq, H, D]
    s = np.array([b, h, h, lq, lk, d, d, 1], np.int32)
    ms = np.zeros(4, np.int64)
    # strides in floats: q from qkv_q, k and v from qkv (k at +H*D, v at +2*H*D... here k = qkv[:, :, 1])
    lay = np.array([lq * h * d, d, h * d,                 # q [B, Lq, H, D] read as [B, H, Lq, D]
                    lk * 3 * h * d, d, 3 * h * d,         # k = qkv[:, :, 1] as [B, H, Lk, D]
                    lk * 3 * h * d, d, 3 * h * d,         # v = qkv[:, :, 2]
                    lq * h * d, d, h * d], np.int64)      # out [B, Lq, H, D]
    dense = [np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (qkv_q, qkv[:, :, 1], qkv[:, :, 2])]
    ref = np.zeros((b, h, lq, d), np.float32)
    lib.t_sdpa(1, _ptr(ref), *(_ptr(a) for a in dense), None, None, _ptr(ms), _ptr(s), 0.25, None,
               _ptr(np.zeros(lk, np.float32)))
    flat = qkv.reshape(-1)
    for naive, floats in ((1, lk), (0, lib.t_sdpa_scratch(lq, lk, d, d))):
        out = np.full((b, lq, h, d), np.nan, np.float32)
        kp, vp = flat[h * d:], flat[2 * h * d:]
        lib.t_sdpa(naive, _ptr(out), _ptr(qkv_q), _ptr(kp), _ptr(vp), None, None, _ptr(ms), _ptr(s), 0.25, _ptr(lay),
                   _ptr(np.full(max(1, floats), np.nan, np.float32)))
        _close(out.transpose(0, 2, 1, 3), ref, DIRECT_TOL, f"sdpa strided naive={naive} lq={lq}")


# ---------------------------------------------------------------- pooling

# NC, H, W, KH, KW, sh, sw, ph, pw, dh, dw, ceil_mode
MAXPOOL_CASES = [
    (6, 16, 16, 3, 3, 2, 2, 1, 1, 1, 1, False),   # ResNet's: the 3x3 stride-2 kernel (x86)
    (4, 15, 17, 3, 3, 2, 2, 1, 1, 1, 1, False),   # the same, odd planes
    (3, 8, 9, 2, 2, 2, 2, 0, 0, 1, 1, False),     # 2x2 stride 2: evens of the row buffer
    (2, 10, 10, 3, 3, 1, 1, 1, 1, 1, 1, False),   # stride 1
    (3, 8, 8, 3, 3, 2, 2, 0, 0, 1, 1, True),      # ceil_mode: a last window past the input
    (2, 11, 12, 3, 3, 1, 2, 2, 2, 2, 2, False),   # dilation 2
    (2, 9, 13, 5, 4, 3, 3, 2, 1, 1, 1, True),     # 5x4 stride 3, ceil_mode
    (1, 3, 1100, 2, 1030, 1, 7, 0, 0, 1, 1, False),  # a window wider than the row buffer: tap by tap
]
# NC, H, W, KH, KW, sh, sw, ph, pw, ceil_mode, count_include_pad, divisor_override
AVGPOOL_CASES = [
    (4, 14, 14, 3, 3, 2, 2, 1, 1, False, True, 0),
    (4, 14, 14, 3, 3, 2, 2, 1, 1, False, False, 0),
    (3, 9, 10, 3, 3, 2, 2, 0, 0, True, True, 0),     # ceil_mode: windows clipped to the input
    (2, 13, 11, 5, 5, 3, 3, 2, 2, True, False, 0),
    (2, 8, 8, 2, 2, 2, 2, 0, 0, False, True, 5),      # divisor_override
    (2, 7, 7, 7, 7, 1, 1, 0, 0, False, True, 0),      # global
]


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("case", MAXPOOL_CASES, ids=[f"max{i}" for i in range(len(MAXPOOL_CASES))])
def test_maxpool_vs_naive(libs, build, case):
    """max pooling is exact: the same bits, NaN included"""
    lib = _lib(libs, build)
    nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, ceil = case
    rng = np.random.default_rng(sum(case[:11]))
    x = rng.standard_normal((nc, h, w)).astype(np.float32)
    x.flat[rng.integers(0, x.size, 3)] = np.nan  # NaN wins its windows
    oh, ow = _out_size(h, kh, sh, ph, dh, ceil), _out_size(w, kw, sw, pw, dw, ceil)
    s = np.array([nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, 0, 0], np.int32)
    ref, got = (np.full((nc, oh, ow), 7.0, np.float32) for _ in range(2))
    lib.t_maxpool(1, _ptr(ref), _ptr(x), _ptr(s))
    lib.t_maxpool(0, _ptr(got), _ptr(x), _ptr(s))
    np.testing.assert_array_equal(got, ref)
    assert np.isnan(ref).any() and np.isfinite(ref).any()


@pytest.mark.parametrize("build", BUILD_IDS)
@pytest.mark.parametrize("case", AVGPOOL_CASES, ids=[f"avg{i}" for i in range(len(AVGPOOL_CASES))])
def test_avgpool_vs_naive(libs, build, case):
    lib = _lib(libs, build)
    nc, h, w, kh, kw, sh, sw, ph, pw, ceil, cip, div = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((nc, h, w)).astype(np.float32)
    oh, ow = _out_size(h, kh, sh, ph, 1, ceil), _out_size(w, kw, sw, pw, 1, ceil)
    s = np.array([nc, h, w, kh, kw, sh, sw, ph, pw, 1, 1, oh, ow, int(cip), div], np.int32)
    ref, got = (np.full((nc, oh, ow), np.nan, np.float32) for _ in range(2))
    lib.t_avgpool(1, _ptr(ref), _ptr(x), _ptr(s))
    lib.t_avgpool(0, _ptr(got), _ptr(x), _ptr(s))
    _close(got, ref, DIRECT_TOL, f"avgpool {case}")


def test_naive_references_match_torch(libs):
    """the references themselves against torch (float64) on a few cases, one build"""
    import torch
    import torch.nn.functional as F

    lib = next(iter(libs.values()))
    for case in (CONV_CASES[6], CONV_CASES[8]):
        g, act = case[13], "none"
        _, x, wt, bias = _conv_data(case, g)
        s, oshape = _sizes(case, g)
        ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(), torch.from_numpy(bias).double(),
                       stride=case[7:9], padding=case[9:11], dilation=case[11:13], groups=g).numpy()
        _close(_run_conv(lib, 0, s, oshape, x, wt, bias, None, act), ref, 1e-6, f"conv2d_naive {case}")
    b, h, hkv, lq, lk, d, dv = 1, 4, 2, 9, 13, 8, 8
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in ((b, h, lq, d), (b, hkv, lk, d), (b, hkv, lk, dv)))
    out = np.zeros((b, h, lq, dv), np.float32)
    lib.t_sdpa(1, _ptr(out), _ptr(q), _ptr(k), _ptr(v), None, None, _ptr(np.zeros(4, np.int64)),
               _ptr(np.array([b, h, hkv, lq, lk, d, dv, 1], np.int32)), float(d**-0.5), None,
               _ptr(np.zeros(lk, np.float32)))
    t = [torch.from_numpy(a).double() for a in (q, k, v)]
    ref = F.scaled_dot_product_attention(t[0], t[1].repeat_interleave(2, 1), t[2].repeat_interleave(2, 1),
                                         is_causal=True).numpy()
    _close(out, ref, 1e-6, "sdpa_naive")
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    for ceil, cip in ((True, False), (False, True)):
        oh, ow = _out_size(9, 3, 2, 1, 1, ceil), _out_size(10, 3, 2, 1, 1, ceil)
        s = np.array([6, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1, oh, ow, int(cip), 0], np.int32)
        got = np.zeros((6, oh, ow), np.float32)
        lib.t_avgpool(1, _ptr(got), _ptr(x), _ptr(s))
        ref = F.avg_pool2d(torch.from_numpy(x).double(), 3, 2, 1, ceil_mode=ceil, count_include_pad=cip).numpy()
        _close(got.reshape(ref.shape), ref, 1e-6, f"avgpool_naive ceil={ceil} cip={cip}")
        lib.t_maxpool(1, _ptr(got), _ptr(x), _ptr(s))
        ref = F.max_pool2d(torch.from_numpy(x), 3, 2, 1, ceil_mode=ceil).numpy()
        np.testing.assert_array_equal(got.reshape(ref.shape), ref)


def test_naive_files_stay_out_of_artifacts():
    """No kernel file includes a *_naive.c, so cwriter._kernel_deps (which follows `#include "x.[ch]"` from
    the kernels a model names) never copies one into an artifact; and every kernel-local include has a name
    that its pattern matches (`[a-z_]+`: a digit, as in gemm_ukernel_avx512.c, and the file would not be
    copied while the #include stays)."""
    names = {f.name for f in KDIR.iterdir() if f.suffix in (".c", ".h")}
    naive = {n for n in names if n.endswith("_naive.c")}
    assert {"conv_naive.c", "attention_naive.c", "pool_naive.c"} <= naive
    for f in sorted(names):
        for inc in re.findall(r'#include "([^"]+)"', (KDIR / f).read_text()):
            assert inc in names, f"{f} includes {inc}, which is not a kernel file"
            assert re.fullmatch(r"[a-z_]+\.[ch]", inc), f"{f}: _kernel_deps would not follow #include \"{inc}\""
            assert inc not in naive or f in naive, f"{f} includes the test-only {inc}"
