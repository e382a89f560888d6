"""Numerical tests of the C kernels in norm.c, attention.c, pool.c and reduce.c.

One harness translation unit #includes the kernel files (as a generated model
does) and exports extern wrappers; it is built as a shared library and driven
through ctypes, and every kernel is compared with torch over a table of shapes.
"""

import ctypes
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

KDIR = Path(__file__).resolve().parents[1] / "src" / "pt2c" / "kernels"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]

HARNESS = r"""
#include "norm.c"
#include "attention.c"
#include "pool.c"
#include "reduce.c"

void t_layer_norm(float *o, const float *x, const float *g, const float *b, int rows, int cols, float eps)
{ pt2c_layer_norm(o, x, g, b, rows, cols, eps); }
void t_rms_norm(float *o, const float *x, const float *g, int rows, int cols, float eps)
{ pt2c_rms_norm(o, x, g, rows, cols, eps); }
void t_channel_affine(float *o, const float *x, const float *s, const float *b, int N, int C, int inner)
{ pt2c_channel_affine(o, x, s, b, N, C, inner); }
void t_softmax(float *o, const float *x, int outer, int dim, int inner)
{ pt2c_softmax(o, x, outer, dim, inner); }
void t_log_softmax(float *o, const float *x, int outer, int dim, int inner)
{ pt2c_log_softmax(o, x, outer, dim, inner); }

size_t t_sdpa_scratch_floats(int Lq, int Lk, int D, int Dv)
{ return pt2c_sdpa_scratch_floats(Lq, Lk, D, Dv); }
void t_sdpa(float *o, const float *q, const float *k, const float *v, const float *ma, const unsigned char *mb,
            long msb, long msh, long msq, long msk, int B, int H, int Hkv, int Lq, int Lk, int D, int Dv,
            float scale, int causal, float *scratch)
{ pt2c_sdpa(o, q, k, v, ma, mb, msb, msh, msq, msk, B, H, Hkv, Lq, Lk, D, Dv, scale, causal, NULL, scratch); }

void t_maxpool2d(float *o, const float *x, int NC, int H, int W, int KH, int KW, int sh, int sw,
                 int ph, int pw, int dh, int dw, int OH, int OW)
{ pt2c_maxpool2d(o, x, NC, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW); }
void t_avgpool2d(float *o, const float *x, int NC, int H, int W, int KH, int KW, int sh, int sw,
                 int ph, int pw, int OH, int OW, int cip, int div)
{ pt2c_avgpool2d(o, x, NC, H, W, KH, KW, sh, sw, ph, pw, OH, OW, cip, div); }
void t_adaptive_avgpool2d(float *o, const float *x, int NC, int H, int W, int OH, int OW)
{ pt2c_adaptive_avgpool2d(o, x, NC, H, W, OH, OW); }
void t_adaptive_maxpool2d(float *o, const float *x, int NC, int H, int W, int OH, int OW)
{ pt2c_adaptive_maxpool2d(o, x, NC, H, W, OH, OW); }

void t_reduce_sum(float *o, const float *x, int a, int r, int b) { pt2c_reduce_sum(o, x, a, r, b); }
void t_reduce_mean(float *o, const float *x, int a, int r, int b) { pt2c_reduce_mean(o, x, a, r, b); }
void t_reduce_max(float *o, const float *x, int a, int r, int b) { pt2c_reduce_max(o, x, a, r, b); }
void t_reduce_min(float *o, const float *x, int a, int r, int b) { pt2c_reduce_min(o, x, a, r, b); }
void t_reduce_prod(float *o, const float *x, int a, int r, int b) { pt2c_reduce_prod(o, x, a, r, b); }
void t_argmax(int64_t *o, const float *x, int a, int r, int b) { pt2c_argmax(o, x, a, r, b); }
void t_argmin(int64_t *o, const float *x, int a, int r, int b) { pt2c_argmin(o, x, a, r, b); }
void t_erf(float *o, const float *x, int n) { int i; for (i = 0; i < n; i++) o[i] = pt2c_erf(x[i]); }
void t_tanh(float *o, const float *x, int n) { int i; for (i = 0; i < n; i++) o[i] = pt2c_tanh(x[i]); }
void t_exp(float *o, const float *x, int n) { int i; for (i = 0; i < n; i++) o[i] = pt2c_exp(x[i]); }
void t_exp_ftz(float *o, const float *x, int n) { int i; for (i = 0; i < n; i++) o[i] = pt2c_exp_ftz(x[i]); }
/* pt2c_erf8 (n: a multiple of 8); returns 0 on a build without it */
int t_erf_vec(float *o, const float *x, int n)
{
    int i;
#if defined(PT2C_SIMD_AVX2) || defined(PT2C_SIMD_AVX512)
    for (i = 0; i < n; i += 8) _mm256_storeu_ps(o + i, pt2c_erf8(_mm256_loadu_ps(x + i)));
    return 8;
#else
    for (i = 0; i < n; i++) o[i] = x[i];
    return 0;
#endif
}
/* the vector exp of the build's widest vectors (n: a multiple of 16); returns their lanes, 0 if none */
int t_exp_ftz_vec(float *o, const float *x, int n)
{
    int i;
#if defined(PT2C_SIMD_AVX512)
    for (i = 0; i < n; i += 16) _mm512_storeu_ps(o + i, pt2c_exp_ftz16(_mm512_loadu_ps(x + i)));
    return 16;
#elif defined(PT2C_SIMD_AVX2)
    for (i = 0; i < n; i += 8) _mm256_storeu_ps(o + i, pt2c_exp_ftz8(_mm256_loadu_ps(x + i)));
    return 8;
#else
    for (i = 0; i < n; i++) o[i] = x[i];
    return 0;
#endif
}
"""

P, I, L, FL = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float
SIGS = {
    "t_layer_norm": [P, P, P, P, I, I, FL],
    "t_rms_norm": [P, P, P, I, I, FL],
    "t_channel_affine": [P, P, P, P, I, I, I],
    "t_softmax": [P, P, I, I, I],
    "t_log_softmax": [P, P, I, I, I],
    "t_sdpa_scratch_floats": [I, I, I, I],
    "t_sdpa": [P, P, P, P, P, P, L, L, L, L] + [I] * 7 + [FL, I, P],
    "t_maxpool2d": [P, P] + [I] * 13,
    "t_avgpool2d": [P, P] + [I] * 13,
    "t_adaptive_avgpool2d": [P, P] + [I] * 5,
    "t_adaptive_maxpool2d": [P, P] + [I] * 5,
}
for _name in ["sum", "mean", "max", "min", "prod"]:
    SIGS["t_reduce_" + _name] = [P, P, I, I, I]
SIGS["t_argmax"] = SIGS["t_argmin"] = [P, P, I, I, I]
SIGS["t_erf"] = SIGS["t_tanh"] = SIGS["t_exp"] = SIGS["t_exp_ftz"] = [P, P, I]


def _build(tmp: Path, cc: str, flags, name: str) -> Path:
    src = tmp / "harness.c"
    src.write_text(HARNESS)
    lib = tmp / name
    cmd = [cc, *STRICT, *flags, "-shared", "-fPIC", "-I", str(KDIR), str(src), "-o", str(lib), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    return lib


def _load(path: Path):
    lib = ctypes.CDLL(str(path))
    for name, argtypes in SIGS.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_size_t if name == "t_sdpa_scratch_floats" else None
    lib.t_exp_ftz_vec.argtypes, lib.t_exp_ftz_vec.restype = [P, P, I], ctypes.c_int
    lib.t_erf_vec.argtypes, lib.t_erf_vec.restype = [P, P, I], ctypes.c_int
    return lib


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    # PT2C_KTEST_CC / PT2C_KTEST_CFLAGS override the build, e.g. for a sanitizer run:
    #   PT2C_KTEST_CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
    #   LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 pytest ...
    tmp = tmp_path_factory.mktemp("kmisc")
    cc = os.environ.get("PT2C_KTEST_CC", "gcc")
    flags = os.environ.get("PT2C_KTEST_CFLAGS", "-O2 -mavx2 -mfma -fopenmp").split()
    return _load(_build(tmp, cc, flags, "libk.so"))


@pytest.mark.parametrize(
    "cc,flags",
    [
        ("clang", ["-O2", "-mavx2", "-mfma"]),
        ("gcc", ["-O2"]),  # no AVX2, no OpenMP
        ("gcc", ["-O3", "-fopenmp"]),
    ],
)
def test_builds_strict(tmp_path, cc, flags):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    lib = _load(_build(tmp_path, cc, flags, "libk.so"))
    # quick smoke run so the build is not only compiled but exercised
    x = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
    out = np.empty_like(x)
    lib.t_softmax(_p(out), _p(x), 3, 50, 1)
    check(out, torch.softmax(torch.from_numpy(x), 1).numpy())


# ---------------------------------------------------------------- helpers


def _p(a):
    return None if a is None else a.ctypes.data


def _f32(t):
    return np.ascontiguousarray(t.detach().numpy(), dtype=np.float32)


def check(out, ref, tol=1e-5):
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape
    nan_o, nan_r = np.isnan(out), np.isnan(ref)
    assert np.array_equal(nan_o, nan_r), f"NaN mismatch at {np.argwhere(nan_o != nan_r)[:5]}"
    inf_r = np.isinf(ref)
    assert np.array_equal(out[inf_r], ref[inf_r]), "inf mismatch"
    ok = ~(nan_r | inf_r)
    if not ok.any():
        return
    err = np.abs(out[ok] - ref[ok]).max()
    bound = tol * max(1.0, np.abs(ref[ok]).max())
    assert err <= bound, f"max abs err {err:.3g} > {bound:.3g}"


def rng_t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


# ---------------------------------------------------------------- norm.c

NORM_SHAPES = [(1, 1), (3, 7), (5, 768), (2, 4097), (1, 50000), (64, 33)]


@pytest.mark.parametrize("rows,cols", NORM_SHAPES)
@pytest.mark.parametrize("affine", ["both", "gamma", "beta", "none"])
def test_layer_norm(lib, rows, cols, affine):
    x = rng_t(rows, cols) * 3 + 5  # offset mean stresses the variance
    g = rng_t(cols, seed=1) if affine in ("both", "gamma") else None
    b = rng_t(cols, seed=2) if affine in ("both", "beta") else None
    ref = F.layer_norm(x, (cols,), g, b, 1e-5)
    xn = _f32(x)
    out = np.empty_like(xn)
    gn, bn = (None if t is None else _f32(t) for t in (g, b))
    lib.t_layer_norm(_p(out), _p(xn), _p(gn), _p(bn), rows, cols, 1e-5)
    check(out, ref.numpy())
    lib.t_layer_norm(_p(xn), _p(xn), _p(gn), _p(bn), rows, cols, 1e-5)  # in place
    check(xn, ref.numpy())


@pytest.mark.parametrize("rows,cols", NORM_SHAPES)
@pytest.mark.parametrize("with_gamma", [True, False])
def test_rms_norm(lib, rows, cols, with_gamma):
    x = rng_t(rows, cols) * 2
    g = rng_t(cols, seed=1) if with_gamma else None
    ref = F.rms_norm(x, (cols,), g, 1e-6)
    xn = _f32(x)
    out = np.empty_like(xn)
    lib.t_rms_norm(_p(out), _p(xn), _p(None if g is None else _f32(g)), rows, cols, 1e-6)
    check(out, ref.numpy())


@pytest.mark.parametrize("N,C,inner", [(1, 1, 1), (2, 3, 5), (4, 16, 49), (1, 64, 1), (3, 5, 1000)])
def test_channel_affine(lib, N, C, inner):
    x = rng_t(N, C, inner)
    s, b = rng_t(C, seed=1), rng_t(C, seed=2)
    ref = x * s[None, :, None] + b[None, :, None]
    xn = _f32(x)
    out = np.empty_like(xn)
    lib.t_channel_affine(_p(out), _p(xn), _p(_f32(s)), _p(_f32(b)), N, C, inner)
    check(out, ref.numpy())


SOFTMAX_SHAPES = [(1, 1, 1), (3, 7, 1), (2, 1000, 1), (1, 50000, 1), (4, 5, 3), (2, 17, 300), (3, 1, 4), (1, 9, 129)]


@pytest.mark.parametrize("outer,dim,inner", SOFTMAX_SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax(lib, outer, dim, inner, log):
    x = rng_t(outer, dim, inner) * 5
    if dim > 2:
        x[0, 1, :] = -math.inf  # partly masked row
        if outer > 1:
            x[1, :, 0] = -math.inf  # fully masked row: torch gives NaN
    # float64 reference: torch's own float32 softmax loses ~3e-5 on a 50k row
    ref = (torch.log_softmax if log else torch.softmax)(x.double(), 1)
    xn = _f32(x)
    out = np.empty_like(xn)
    (lib.t_log_softmax if log else lib.t_softmax)(_p(out), _p(xn), outer, dim, inner)
    check(out, ref.numpy())
    (lib.t_log_softmax if log else lib.t_softmax)(_p(xn), _p(xn), outer, dim, inner)  # in place
    check(xn, ref.numpy())


# ---------------------------------------------------------------- reduce.c

RED_SHAPES = [(1, 1, 1), (3, 7, 1), (2, 50000, 1), (5, 33, 17), (2, 600, 300), (4, 1, 9), (1, 3, 1000), (7, 257, 2)]


def _reduce_ref(kind, x):
    if kind == "sum":
        return x.double().sum(1).float()
    if kind == "mean":
        return x.double().mean(1).float()
    if kind == "prod":
        return x.double().prod(1).float()
    return getattr(torch, "a" + kind)(x, 1)


@pytest.mark.parametrize("shape", RED_SHAPES)
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min", "prod"])
def test_reduce(lib, shape, kind):
    outer, r, inner = shape
    x = rng_t(*shape)
    if kind == "prod":
        x = 1 + 0.002 * x  # keep long products finite
    if kind in ("max", "min") and r > 2:
        x[0, r // 2, 0] = math.nan  # NaN propagates
    ref = _reduce_ref(kind, x)
    xn = _f32(x)
    out = np.empty((outer, inner), np.float32)
    getattr(lib, "t_reduce_" + kind)(_p(out), _p(xn), outer, r, inner)
    check(out, ref.numpy(), 1e-5 if kind != "prod" else 1e-4)


@pytest.mark.parametrize("outer,r,inner", [(1, 50000, 1), (1, 50000, 3), (3, 65537, 1)])
def test_sum_accuracy(lib, outer, r, inner):
    x = torch.rand(outer, r, inner, generator=torch.Generator().manual_seed(3))
    ref = x.double().sum(1).numpy()
    out = np.empty((outer, inner), np.float32)
    lib.t_reduce_sum(_p(out), _p(_f32(x)), outer, r, inner)
    assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-6


@pytest.mark.parametrize("shape", RED_SHAPES)
@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("nan", [False, True])
def test_argreduce(lib, shape, kind, nan):
    outer, r, inner = shape
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 3, shape, generator=g).float()  # many ties: first index wins
    if nan and r > 3:
        x[:, r // 3, :] = math.nan
        x[:, r // 2, :] = math.nan  # first NaN wins
    ref = getattr(torch, kind)(x, 1)
    out = np.empty((outer, inner), np.int64)
    getattr(lib, "t_" + kind)(_p(out), _p(_f32(x)), outer, r, inner)
    np.testing.assert_array_equal(out, ref.numpy())


# ---------------------------------------------------------------- pool.c

# (N, C, H, W, kernel, stride, padding, dilation, ceil_mode)
MAXPOOL_CASES = [
    (1, 1, 1, 1, (1, 1), (1, 1), (0, 0), (1, 1), False),
    (2, 3, 7, 9, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (2, 3, 7, 9, (3, 3), (2, 2), (1, 1), (1, 1), True),
    (1, 2, 8, 8, (2, 2), (2, 2), (0, 0), (1, 1), False),
    (1, 2, 10, 11, (3, 3), (3, 3), (1, 1), (2, 2), True),
    (2, 2, 9, 6, (3, 2), (2, 1), (1, 0), (1, 1), True),
    (1, 1, 5, 5, (2, 2), (2, 2), (1, 1), (1, 1), True),
    (1, 3, 6, 6, (4, 4), (3, 3), (0, 0), (1, 1), True),
    (1, 4, 32, 32, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (1, 2, 9, 41, (3, 3), (2, 2), (1, 1), (1, 1), True),  # 8-wide vector blocks + a scalar tail
    (1, 1, 12, 50, (3, 3), (2, 2), (1, 1), (2, 2), False),  # dilated taps in the vector path
    (1, 1, 3, 2100, (3, 3), (2, 2), (1, 1), (1, 1), True),  # an output row in several column blocks
    (1, 1, 2, 1100, (1, 1030), (1, 50), (0, 0), (1, 1), False),  # a window wider than the row buffer
    # 3x3 / 2 / pad 1 on x86: strips of 8 or 16 columns; 56 outputs, 17 (a strip of one), 1x1
    (1, 3, 112, 112, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (2, 2, 6, 34, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (2, 1, 1, 1, (3, 3), (2, 2), (1, 1), (1, 1), False),
]


@pytest.mark.parametrize("case", MAXPOOL_CASES)
def test_maxpool2d(lib, case, negative=False):
    N, C, H, W, k, s, p, d, ceil = case
    x = rng_t(N, C, H, W)
    if negative:  # the padding must act as -inf, not 0
        x = -x.abs() - 1
    if H * W > 4:
        x[0, 0, H // 2, W // 2] = math.nan
        x[-1, -1, 0, W - 1] = math.nan  # a NaN on the edge, maybe in the last column block
    ref = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
    OH, OW = ref.shape[2:]
    out = np.empty(ref.shape, np.float32)
    lib.t_maxpool2d(_p(out), _p(_f32(x)), N * C, H, W, *k, *s, *p, *d, OH, OW)
    check(out, ref.numpy())


# (N, C, H, W, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVGPOOL_CASES = [
    (1, 1, 1, 1, (1, 1), (1, 1), (0, 0), False, True, None),
    (2, 3, 7, 9, (3, 3), (2, 2), (1, 1), False, True, None),
    (2, 3, 7, 9, (3, 3), (2, 2), (1, 1), False, False, None),
    (2, 3, 7, 9, (3, 3), (2, 2), (1, 1), True, True, None),
    (2, 3, 7, 9, (3, 3), (2, 2), (1, 1), True, False, None),
    (1, 2, 6, 6, (4, 4), (3, 3), (0, 0), True, True, None),
    (1, 2, 5, 8, (2, 3), (2, 2), (1, 1), True, True, None),
    (1, 2, 5, 8, (2, 3), (2, 2), (1, 1), True, False, None),
    (1, 2, 5, 8, (3, 3), (2, 2), (1, 1), True, True, 5),
    (1, 4, 32, 32, (2, 2), (2, 2), (0, 0), False, True, None),
]


@pytest.mark.parametrize("case", AVGPOOL_CASES)
def test_avgpool2d(lib, case):
    N, C, H, W, k, s, p, ceil, cip, div = case
    x = rng_t(N, C, H, W)
    ref = F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div)
    OH, OW = ref.shape[2:]
    out = np.empty(ref.shape, np.float32)
    lib.t_avgpool2d(_p(out), _p(_f32(x)), N * C, H, W, *k, *s, *p, OH, OW, int(cip), div or 0)
    check(out, ref.numpy())


ADAPTIVE_CASES = [(7, 7, 3, 3), (10, 9, 4, 5), (5, 5, 5, 5), (4, 6, 1, 1), (3, 3, 5, 7), (13, 1, 4, 1), (14, 14, 7, 7)]


@pytest.mark.parametrize("H,W,OH,OW", ADAPTIVE_CASES)
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool(lib, H, W, OH, OW, kind):
    N, C = 2, 3
    x = rng_t(N, C, H, W)
    if kind == "max" and H * W > 1:
        x[1, 2, H - 1, W - 1] = math.nan
    fn = F.adaptive_avg_pool2d if kind == "avg" else F.adaptive_max_pool2d
    ref = fn(x, (OH, OW))
    out = np.empty(ref.shape, np.float32)
    getattr(lib, f"t_adaptive_{kind}pool2d")(_p(out), _p(_f32(x)), N * C, H, W, OH, OW)
    check(out, ref.numpy())


# ---------------------------------------------------------------- attention.c

# (B, H, Hkv, Lq, Lk, D, Dv, mask, causal)
#   mask: None | "add_bh" [B,1,Lq,Lk] | "add_b1" [B,1,1,Lk] | "bool" [B,H,Lq,Lk] | "bool_bc" [Lq,Lk]
#         | "add_ninf" additive with a fully -inf row
SDPA_CASES = [
    (1, 1, 1, 1, 1, 8, 8, None, False),
    (2, 3, 3, 5, 5, 16, 16, None, True),
    (1, 2, 2, 7, 11, 8, 12, None, True),  # causal, Lq < Lk
    (1, 2, 2, 11, 7, 8, 8, None, True),  # causal, Lq > Lk
    (2, 4, 4, 33, 70, 32, 32, "add_bh", False),
    (2, 4, 4, 9, 70, 16, 16, "add_b1", False),
    (2, 2, 2, 10, 13, 8, 8, "bool", False),
    (1, 3, 3, 40, 67, 24, 8, "bool_bc", False),
    (1, 2, 2, 6, 9, 8, 8, "add_ninf", False),
    (2, 4, 2, 37, 50, 16, 16, None, True),  # GQA
    (1, 4, 2, 3, 50, 16, 16, "add_b1", False),  # GQA, small query block (dot path)
    (1, 2, 2, 6, 1, 8, 8, None, False),  # Lk = 1
    (1, 2, 2, 300, 300, 64, 64, None, True),  # long sequence
    (1, 2, 1, 1, 300, 64, 64, None, False),  # decode
    (1, 1, 1, 129, 200, 7, 5, "bool", False),  # odd head dims
]


@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa(lib, case):
    B, H, Hkv, Lq, Lk, D, Dv, mkind, causal = case
    q, k, v = rng_t(B, H, Lq, D, seed=1), rng_t(B, Hkv, Lk, D, seed=2), rng_t(B, Hkv, Lk, Dv, seed=3)
    g = torch.Generator().manual_seed(5)
    mask = None
    if mkind == "add_bh":
        mask = torch.randn(B, 1, Lq, Lk, generator=g)
    elif mkind == "add_b1":
        mask = torch.randn(B, 1, 1, Lk, generator=g)
    elif mkind == "add_ninf":
        mask = torch.where(torch.rand(B, H, Lq, Lk, generator=g) < 0.5, 0.0, -math.inf)
        mask[:, :, 2, :] = -math.inf
    elif mkind == "bool":
        mask = torch.rand(B, H, Lq, Lk, generator=g) < 0.7
        mask[0, 0, 1, :] = False  # fully masked row
    elif mkind == "bool_bc":
        mask = torch.rand(Lq, Lk, generator=g) < 0.5
    scale = 0.3 if D == 7 else None
    ref = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=H != Hkv
    )

    ma = mb = None
    strides = (0, 0, 0, 0)
    if mask is not None:
        strides = mask.expand(B, H, Lq, Lk).stride()
        if mask.dtype == torch.bool:
            mb = np.ascontiguousarray(mask.numpy().astype(np.uint8))
        else:
            ma = _f32(mask)
    out = np.full((B, H, Lq, Dv), np.nan, np.float32)
    scratch = np.full(lib.t_sdpa_scratch_floats(Lq, Lk, D, Dv), np.nan, np.float32)
    lib.t_sdpa(
        _p(out), _p(_f32(q)), _p(_f32(k)), _p(_f32(v)), _p(ma), _p(mb), *strides,
        B, H, Hkv, Lq, Lk, D, Dv, scale if scale is not None else 1 / math.sqrt(D), int(causal), _p(scratch),
    )
    check(out, ref.numpy(), 1e-4)


@pytest.fixture(scope="module")
def libs(lib, tmp_path_factory):
    """The default build and one whose loops over erf / tanh / exp are vectorised (-O3, AVX2)."""
    return [lib, _load(_build(tmp_path_factory.mktemp("kvec"), "gcc", ["-O3", "-march=x86-64-v3"], "libv.so"))]


def test_exp_approximation(libs):
    """pt2c_exp (softmax, attention, SiLU, sigmoid; no libm call): within 2 ulp of exp over the whole
    float range, gradual underflow included; exact limits."""
    x = np.concatenate([np.linspace(-110, 95, 400001, dtype=np.float32), np.linspace(-1, 1, 20001, dtype=np.float32),
                        np.array([0.0, -0.0, 88.72283, 88.7229, -87.4, -103.9, np.inf, -np.inf, np.nan], np.float32)])
    ref = np.exp(x.astype(np.float64))
    with np.errstate(over="ignore"):
        ref32 = ref.astype(np.float32)
    fin = np.isfinite(ref32)
    ulp = np.spacing(np.abs(ref32[fin]))
    for lb in libs:
        out = np.empty_like(x)
        lb.t_exp(out.ctypes.data, x.ctypes.data, x.size)
        assert (np.abs(out[fin] - ref[fin]) / ulp).max() <= 2.0
        assert np.isnan(out[-1]) and out[-3] == np.inf and out[-2] == 0.0 and out[-4] > 0.0
        assert np.array_equal(np.isinf(out), np.isinf(ref32))  # overflows exactly where float does
        # the softmax / attention variant: the same, except 0 where exp is below FLT_MIN (no subnormals)
        ftz = np.empty_like(x)
        lb.t_exp_ftz(ftz.ctypes.data, x.ctypes.data, x.size)
        keep = ~(x < -87.3)
        assert np.array_equal(ftz[keep], out[keep], equal_nan=True)
        assert (ftz[~keep] == 0.0).all() and not (np.abs(ftz[ftz != 0]) < np.finfo(np.float32).tiny).any()


@pytest.fixture(scope="module")
def lib512(tmp_path_factory):
    """An x86-64-v4 build: the 16-lane vector exp and AVX-512 attention micro-kernels."""
    from test_kernels_gemm import _host_has_avx512

    if not _host_has_avx512():
        pytest.skip("this CPU has no AVX-512")
    return _load(_build(tmp_path_factory.mktemp("k512"), "gcc", ["-O2", "-march=x86-64-v4", "-fopenmp"], "lib512.so"))


def _check_vector_exp(lb) -> int:
    x = np.concatenate([np.linspace(-100, 88, 400000, dtype=np.float32), np.linspace(-1, 1, 20000, dtype=np.float32),
                        np.array([-5.0] * 8 + [0.0, -0.0, -87.29, -87.31, 88.0, -1e30, -np.inf, np.nan], np.float32)])
    assert x.size % 16 == 0
    out = np.empty_like(x)
    lanes = lb.t_exp_ftz_vec(out.ctypes.data, x.ctypes.data, x.size)
    if lanes == 0:
        pytest.skip("a build without vector exp")
    keep = ~(x < np.float32(-87.3))
    fin = keep & np.isfinite(x)
    ref = np.exp(x[fin].astype(np.float64))
    assert (np.abs(out[fin] - ref) / np.spacing(ref.astype(np.float32))).max() <= 2.0
    assert (out[~keep] == 0.0).all() and np.isnan(out[-1])
    return lanes


def test_vector_exp(lib):
    """pt2c_exp_ftz8 (softmax, attention; FMAs): within 2 ulp of exp on [-87.3, 88], 0 below, NaN stays."""
    assert _check_vector_exp(lib) == 8


@pytest.mark.parametrize("case", MAXPOOL_CASES)
def test_maxpool2d_avx512(lib512, case):
    test_maxpool2d(lib512, case)
    test_maxpool2d(lib512, case, negative=True)


def test_maxpool2d_negative(lib):
    for case in MAXPOOL_CASES:
        test_maxpool2d(lib, case, negative=True)


def test_vector_exp_avx512(lib512):
    assert _check_vector_exp(lib512) == 16


@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa_avx512(lib512, case):
    """The attention kernel with its AVX-512 micro-kernels and 16-lane exp."""
    test_sdpa(lib512, case)


def test_erf_tanh_vectorised_match(libs):
    """The vectorised loops give the scalar build's results."""
    x = np.linspace(-9, 9, 30001, dtype=np.float32)
    for name in ("t_erf", "t_tanh", "t_exp", "t_exp_ftz"):
        a, b = np.empty_like(x), np.empty_like(x)
        getattr(libs[0], name)(a.ctypes.data, x.ctypes.data, x.size)
        getattr(libs[1], name)(b.ctypes.data, x.ctypes.data, x.size)
        assert np.abs(a - b).max() <= 1e-6 * np.abs(a).max(), name


def test_erf_approximation(lib):
    """pt2c_erf (GELU's erf, no libm call): within 5e-7 of math.erf everywhere, exact limits."""
    import math

    x = np.concatenate([np.linspace(-8, 8, 200006, dtype=np.float32),
                        np.array([1.5, 0.0, -0.0, 1e-30, -1e-30, 4.0, -4.0, np.inf, -np.inf, np.nan], np.float32)])
    assert x.size % 8 == 0
    ref = np.array([math.erf(float(v)) if not math.isnan(v) else math.nan for v in x])
    fin = ~np.isnan(ref)
    # the scalar form, and the 8-lane FMA form of GELU's epilogue (where the build has it)
    for fn in (lib.t_erf, lib.t_erf_vec):
        out = np.empty_like(x)
        if fn(out.ctypes.data, x.ctypes.data, x.size) == 0 and fn is lib.t_erf_vec:
            continue
        assert np.abs(out[fin] - ref[fin]).max() <= 5e-7
        assert np.isnan(out[-1]) and out[-3] == 1.0 and out[-2] == -1.0
        assert np.all(out[fin] >= -1.0) and np.all(out[fin] <= 1.0)


def test_tanh_approximation(lib):
    """pt2c_tanh (GELU-tanh and fused tanh, no libm call): within 5e-7 (absolute and relative) of tanh."""
    x = np.concatenate([np.linspace(-12, 12, 200001, dtype=np.float32),
                        np.array([0.0, -0.0, 3e-4, -3e-4, 1e-30, np.inf, -np.inf, np.nan], np.float32)])
    out = np.empty_like(x)
    lib.t_tanh(out.ctypes.data, x.ctypes.data, x.size)
    ref = np.tanh(x.astype(np.float64))
    fin = ~np.isnan(ref)
    err = np.abs(out[fin] - ref[fin])
    assert err.max() <= 5e-7 and (err / np.maximum(np.abs(ref[fin]), 1e-30)).max() <= 5e-7
    assert np.isnan(out[-1]) and out[-3] == 1.0 and out[-2] == -1.0 and out[-4] == np.float32(1e-30)
    assert np.all(np.abs(out[fin]) <= 1.0)
