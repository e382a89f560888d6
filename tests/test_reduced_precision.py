"""bfloat16 and float16 models (issue #31): computed in float32 with every op's result rounded to the model's
dtype, as PyTorch's CPU kernels compute them; inputs and outputs in the reduced dtype at the C API.

Tolerances, against eager in the same dtype:
* conversions (float32 <-> bfloat16 / float16): bit for bit, NaN as NaN;
* elementwise chains: within one ulp of the dtype (libm's and torch's float32 exp may differ by one float32 ulp,
  which can move a result across a rounding boundary), and exact where the ops are exact;
* whole models (every family in bfloat16, three in float16; bench/reduced_precision.py --hf checks all the
  transformers architectures in both): pt2c verify's default, max|out - ref| <= tol * max(1, max|ref|), tol 5e-2 (bfloat16) / 1e-2
  (float16); and pt2c no further from the float32 model than 2x eager's own reduced-precision error (plus one ulp
  at the output's scale): the reduced dtype is computed, not just tolerated.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import pt2c
from pt2c import zoo
from pt2c.errors import InputError, UnsupportedError
from pt2c.runtime.runner import RunError
from pt2c.runtime.verify import REDUCED_TOL, _to_numpy, _to_torch, as_float, verify

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
ULP = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}  # at magnitude 1..2
CFLAGS = "-O1 -std=c99"


def _build(m: torch.nn.Module, xs: tuple, out, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(m, xs, **kw)
    pt2c.compile(ep, out, target="x86_64-v3")
    pt2c.build(out, cflags=CFLAGS)
    return pt2c.load(out)


class _To(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.bfloat16), x.to(torch.float16)


class _From(torch.nn.Module):
    def forward(self, b, h):
        return b.float(), h.float()


def test_conversions_bit_exact(tmp_path):
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    # ties and near-ties of both dtypes, overflow to inf, subnormal halves, signed zeros, inf, NaN
    special = [0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F800FFF, 0x3F801000, 0x3F803000, 0x477FEFFF, 0x477FF000,
               0x7F7FFFFF, 0x7F7F8000, 0x33000000, 0x33000001, 0x33800000, 0x387FE000, 0x387FF000, 0x38800000,
               0x00000001, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF]
    x = np.concatenate([bits, np.array(special, np.uint32)]).view(np.float32)
    m = _build(_To(), (torch.from_numpy(x),), tmp_path / "to")
    b, h = m.run([x])
    tb, th = _To()(torch.from_numpy(x))
    assert b.dtype == np.uint16 and h.dtype == np.float16
    nan = np.isnan(x)
    assert np.array_equal(b[~nan], _to_numpy(tb)[~nan])
    assert np.array_equal(h.view(np.uint16)[~nan], th.numpy().view(np.uint16)[~nan])
    assert np.isnan(as_float(b)[nan]).all() and np.isnan(h[nan]).all()

    allbits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    m = _build(_From(), (_to_torch(allbits), torch.from_numpy(allbits.view(np.float16))), tmp_path / "from")
    fb, fh = m.run([allbits, allbits.view(np.float16)])
    rb, rh = _From()(_to_torch(allbits), torch.from_numpy(allbits.view(np.float16).copy()))
    for got, want in ((fb, rb.numpy()), (fh, rh.numpy())):
        assert got.dtype == np.float32
        assert np.array_equal(got, want, equal_nan=True)
        assert np.array_equal(np.signbit(got), np.signbit(want))


class _Chain(torch.nn.Module):
    def forward(self, x, y):
        a = (x + 1000.0) - 1000.0  # exact only with the intermediate rounding
        return a, torch.exp(x * 0.37) * y + a, torch.sigmoid(y).sum(-1, keepdim=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_op_rounds_like_eager(tmp_path, dtype):
    td = DTYPES[dtype]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 96, generator=g).to(td), torch.randn(64, 96, generator=g).to(td)
    m = _build(_Chain(), (x, y), tmp_path / "chain")
    outs = m.run([_to_numpy(x), _to_numpy(y)])
    refs = _Chain()(x, y)
    a, b, c = (as_float(o).astype(np.float64) for o in outs)
    ra, rb, rc = (r.double().numpy() for r in refs)
    assert np.array_equal(a, ra)  # (x + 1000) - 1000: the rounding of x + 1000 shows
    assert not np.array_equal(ra, x.double().numpy())
    # one ulp of the dtype at each element's magnitude
    assert np.all(np.abs(b - rb) <= ULP[dtype] * np.maximum(np.abs(rb), 2.0 ** -14))
    assert np.mean(b == rb) > 0.95
    assert np.all(np.abs(c - rc) <= ULP[dtype] * np.abs(rc))


MODELS = ["mlp", "resnet18", "mobilenetv2", "bert", "llama"]


@pytest.mark.parametrize("model, dtype", [(m, d) for m in MODELS for d in DTYPES
                                          if d == "bfloat16" or m in ("mlp", "resnet18", "llama")])
def test_model_verifies_in_reduced_precision(tmp_path, model, dtype):
    td = DTYPES[dtype]
    m32, xs32 = getattr(zoo, model)("tiny")
    m = __import__("copy").deepcopy(m32).to(td)
    xs = tuple(x.to(td) if x.is_floating_point() else x for x in xs32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(m, xs)
    report = verify(ep, tmp_path / "out", target="x86_64-v3", cflags=CFLAGS)
    o = report.outputs[0]
    assert report.passed, report.outputs
    assert o.dtype == dtype and o.tol_abs == REDUCED_TOL[dtype] * max(1.0, o.ref_scale)
    # no further from the float32 model than eager's own reduced-precision result
    lib = pt2c.load(tmp_path / "out")
    got = as_float(lib.run([_to_numpy(x) for x in xs])[0]).astype(np.float64)
    with torch.no_grad():
        ref32 = m32(*xs32).double().numpy()
        eager = m(*xs).double().numpy()
    scale = max(1.0, np.abs(ref32).max())
    assert np.abs(got - ref32).max() <= 2 * np.abs(eager - ref32).max() + ULP[dtype] * scale


def test_dynamic_batch_bfloat16(tmp_path, monkeypatch):
    monkeypatch.setenv("PT2C_REQUIRE_DYNAMIC", "1")
    m32, (x,) = zoo.mlp("tiny")
    m = m32.to(torch.bfloat16)
    x = x.to(torch.bfloat16)
    lib = _build(m, (x,), tmp_path / "dyn", dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=16)},))
    for n in (1, 3, 16):
        xn = torch.randn(n, x.shape[1]).to(torch.bfloat16)
        got = as_float(lib.run([_to_numpy(xn)])[0])
        with torch.no_grad():
            want = m(xn).float().numpy()
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= REDUCED_TOL["bfloat16"] * max(1.0, np.abs(want).max())


def test_c_api_and_runner_speak_the_reduced_dtypes(tmp_path):
    m32, (x,) = zoo.mlp("tiny")
    lib = _build(m32.to(torch.float16), (x.to(torch.float16),), tmp_path / "h")
    assert lib.inputs[0]["dtype"] == "float16" and lib.outputs[0]["dtype"] == "float16"
    header = (tmp_path / "h" / "model.h").read_text()
    assert "const uint16_t *x" in header and "MODEL_DTYPE_FLOAT16 = 9" in header and "MODEL_DTYPE_BFLOAT16 = 8" in header
    with pytest.raises(RunError, match="expected dtype float16, got float32"):
        lib.run([x.numpy()])
    lib = _build(m32.to(torch.bfloat16), (x.to(torch.bfloat16),), tmp_path / "b")
    with pytest.raises(RunError, match="bits as uint16"):
        lib.run([x.to(torch.bfloat16)])
    with pytest.raises(RunError, match="bits as uint16"):
        lib.run([x.numpy()])


def test_reduced_precision_refusals(tmp_path):
    m32, (x,) = zoo.mlp("tiny")
    ep = torch.export.export(m32.to(torch.bfloat16), (x.to(torch.bfloat16),))
    with pytest.raises(InputError, match="bfloat16, which the cuda backend does not implement"):
        pt2c.compile(ep, tmp_path / "gpu", target="cuda")

    class Inner(torch.nn.Module):  # float32 at the boundary, bfloat16 inside
        def forward(self, x):
            return torch.relu(x.to(torch.bfloat16) * 3).float()

    with pytest.raises(InputError, match="bfloat16, which the opencl backend does not implement"):
        pt2c.compile(torch.export.export(Inner(), (x,)), tmp_path / "gpu2", target="opencl")

    lib = torch.library.Library("pt2c_rp_test", "DEF")  # noqa: F841 (kept alive for the export)
    lib.define("scale(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: x * 2, "CompositeExplicitAutograd")
    lib.impl("scale", lambda x: torch.empty_like(x), "Meta")

    class Custom(torch.nn.Module):
        def forward(self, x):
            return torch.ops.pt2c_rp_test.scale(x) + 1

    ep = torch.export.export(Custom(), (x.to(torch.bfloat16),))
    pt2c.register_kernel("pt2c_rp_test::scale", source=(
        '#include "pt2c_custom_op.h"\n'
        "int pt2c_rp_test_scale(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args, void *scratch,\n"
        "                       size_t scratch_bytes)\n"
        "{ (void)out; (void)in; (void)args; (void)scratch; (void)scratch_bytes; return 0; }\n"))
    with pytest.raises(UnsupportedError, match="custom op kernels take float32, not bfloat16"):
        pt2c.compile(ep, tmp_path / "custom", target="x86_64-v3")


class _Linears(torch.nn.Module):
    """Two bfloat16 linear layers of odd sizes (M, N, K not multiples of the kernels' 32), GELU, a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(77, 45)
        self.b = torch.nn.Linear(45, 45, bias=False)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x))
        return self.b(h) + h


@pytest.mark.parametrize("rows", [37, 2])
@pytest.mark.parametrize("cflags", ["-O2 -std=c99 -Wall -Wextra -Werror -pedantic", "-O1 -std=c99 -DPT2C_NO_SIMD"],
                         ids=["native", "portable"])
def test_bfloat16_linear_layers_store_bfloat16_weights(tmp_path, cflags, rows):
    """matmul_bf16: the weights in the blob as bfloat16; AMX where the CPU has it (the first build, on such a host),
    else the float32 GEMM on converted weights (the second build: no SIMD, so no AMX either), or for a few rows
    (a GEMV) the weights converted in registers."""
    torch.manual_seed(0)
    m = _Linears().to(torch.bfloat16)
    x = torch.randn(rows, 77).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(m, (x,))
    art = pt2c.compile(ep, tmp_path / "lin", target="x86_64-v3")
    source = (tmp_path / "lin" / "model.c").read_text()
    assert source.count("pt2c_gemm_bf16(") == 2 and "pt2c_sgemm(" not in source
    assert art.manifest["weights"]["bytes"] < 4 * (77 * 45 + 45 * 45)  # bfloat16 panels, not float32
    pt2c.build(tmp_path / "lin", cflags=cflags)
    got = as_float(pt2c.load(tmp_path / "lin").run([_to_numpy(x)])[0]).astype(np.float64)
    with torch.no_grad():
        want = m(x).double().numpy()
        ref32 = m.float()(x.float()).double().numpy()
    scale = max(1.0, np.abs(want).max())
    assert np.abs(got - want).max() <= 2 * ULP["bfloat16"] * scale
    assert np.abs(got - ref32).max() <= 2 * np.abs(want - ref32).max() + ULP["bfloat16"] * scale
