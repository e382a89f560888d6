"""Dynamic sizes (torch.export.Dim): symbolic sizes through lowering, passes, memory plan, C and runner.

Every numeric check is against PyTorch eager at the same sizes: float32 outputs within 1e-4 of the
output's largest magnitude (the same kernels as a static compile, summing in the same order per row).
"""

from __future__ import annotations

import ctypes
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.export import Dim, export

import pt2c
from pt2c import zoo
from pt2c.errors import InputError
from pt2c.runtime.runner import RunError
from pt2c.sym import Dim as SymDim
from pt2c.sym import Dims, DynamicSizeError, Sym, prod

TOL = 1e-4


@pytest.fixture(autouse=True)
def _require_dynamic(monkeypatch):
    # a dynamic compile that falls back to the example's sizes fails these tests instead of passing quietly
    monkeypatch.setenv("PT2C_REQUIRE_DYNAMIC", "1")


def _dims() -> tuple[Dims, Sym, Sym]:
    import sympy

    a, b = sympy.symbols("s0 s1", integer=True, positive=True)
    dims = Dims([SymDim(a, "batch", 1, 8, 2, "x", 0), SymDim(b, "seq", 2, 64, 16, "x", 1)])
    return dims, dims.sym(a), dims.sym(b)


def test_sym_arithmetic_printing_and_decisions():
    dims, b, s = _dims()
    assert str(b * s * 64) == "64 * batch * seq"
    assert str((s + 1) // 2) == "(seq + 1) / 2" and str(s % 4) == "seq % 4"
    assert (b * s - b * s) == 0 and type(b * s - b * s) is int
    assert prod((b, 3, s)) == 3 * b * s and prod(()) == 1
    assert (b * s).bounds() == (2, 512) and (b * s).upper == 512 and (b * s).hint == 32
    assert (b * s).at({"batch": 3, "seq": 5}) == 15
    # decided by the ranges
    assert s >= 2 and s > 1 and b >= 1 and not (s < 2) and s <= 64 and b * s <= 512
    # == is structural (torch.export's guards unify the sizes that must be equal; a dynamic size is never 0 / 1)
    assert b * s == s * b and b != s and s != 1 and s != 0 and s * 2 != 16
    # a decision that depends on the run-time size is an error, never a guess
    for undecided in (lambda: s > 16, lambda: b * s <= 64, lambda: int(s), lambda: range(s), lambda: s / 2):
        with pytest.raises(DynamicSizeError, match="run-time size"):
            undecided()


class _Sum(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(1) + y


def _sum_program():
    b = Dim("batch", min=1, max=64)
    return export(_Sum(), (torch.randn(3, 4), torch.randn(3)), dynamic_shapes=({0: b}, {0: b}))


def test_dynamic_artifact_c_api_and_runner(tmp_path):
    """Two inputs sharing a dynamic batch, from an ExportedProgram and from a .pt2: the manifest names the size
    and its range, the runner runs at every size in the range, and refuses one outside it (before the C runs)
    or inputs that disagree on it; the C API's set_sizes refuses it too and leaves the context as it was."""
    ep = _sum_program()
    torch.export.save(ep, tmp_path / "dyn.pt2")
    for src in (ep, tmp_path / "dyn.pt2"):
        art = pt2c.compile(src, tmp_path / "out", force=True)
        assert art.manifest["specialized"] == []
        assert art.manifest["sizes"] == [{"name": "x_size0", "input": "x", "dim": 0, "scale": 1, "offset": 0, "min": 1,
                                          "max": 64, "example": 3}]
        assert [d["shape"] for d in art.manifest["inputs"]] == [["x_size0", 4], ["x_size0"]]
    pt2c.build(tmp_path / "out")
    m = pt2c.load(tmp_path / "out")
    for n in (1, 3, 17, 64, 2):
        x, y = np.random.randn(n, 4).astype(np.float32), np.random.randn(n).astype(np.float32)
        np.testing.assert_allclose(m.run([x, y])[0], x.sum(1) + y, rtol=1e-5, atol=1e-5)
    # threads running different sizes through one Model take turns: each call's sizes, shapes and run together
    from concurrent.futures import ThreadPoolExecutor

    def call(n: int) -> bool:
        x, y = np.full((n, 4), 1.0, np.float32), np.full(n, float(n), np.float32)
        return bool(np.array_equal(m.run([x, y])[0], x.sum(1) + y))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(call, [1 + (7 * i) % 64 for i in range(64)]))
    with pytest.raises(RunError, match=r"x dim 0 is 65, the model takes 1..64"):
        m.run([np.zeros((65, 4), np.float32), np.zeros(65, np.float32)])
    with pytest.raises(RunError, match=r"input 'y': expected shape \(5,\), got \(4,\)"):
        m.run([np.zeros((5, 4), np.float32), np.zeros(4, np.float32)])

    lib = m.lib
    N = "dyn"
    ctx = m._ctx
    lib.dyn_set_sizes.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.dyn_output_shape.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    shape = (ctypes.c_int64 * 1)()
    assert lib.dyn_set_sizes(ctx, (ctypes.c_int64 * 1)(7)) == 0
    assert lib.dyn_output_shape(ctx, 0, shape) == 0 and shape[0] == 7
    for bad in (0, 65, -1):
        assert lib.dyn_set_sizes(ctx, (ctypes.c_int64 * 1)(bad)) == 20  # <N>_ERR_SIZE
    assert lib.dyn_output_shape(ctx, 0, shape) == 0 and shape[0] == 7  # unchanged
    assert lib.dyn_output_shape(ctx, 1, shape) != 0  # no output 1
    m._sizes_now = None  # (the test changed the context's sizes behind the runner's back)
    header = (tmp_path / "out" / f"{N}.h").read_text()
    assert "int dyn_set_sizes(dyn_ctx *ctx, const int64_t *sizes);" in header and "#define DYN_NUM_SIZES 1" in header
    # a manifest whose sizes are not the library's (edited, or from another compile) is refused
    mpath = tmp_path / "out" / "manifest.json"
    good = mpath.read_text()
    for edit in ({"max": 1000}, {"input": "nope"}, {"dim": 7}):
        man = json.loads(good)
        man["sizes"][0].update(edit)
        mpath.write_text(json.dumps(man))
        with pytest.raises(RunError, match="sizes"):
            pt2c.load(tmp_path / "out")
    man = json.loads(good)
    man["sizes"].append(dict(man["sizes"][0], name="extra"))
    mpath.write_text(json.dumps(man))
    with pytest.raises(RunError, match="sizes"):
        pt2c.load(tmp_path / "out")


def test_static_and_fallback_compile_the_example_sizes(tmp_path, monkeypatch):
    """--static, and a part of pt2c that needs a size static (here the GPU backend): the example's sizes, with
    one warning naming each dynamic dim, its range and the size compiled (manifest.json: "specialized")."""
    monkeypatch.delenv("PT2C_REQUIRE_DYNAMIC")
    for kw, why in (({"static": True}, "static shapes were asked for"), ({"target": "opencl"}, "backend compiles static")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            art = pt2c.compile(_sum_program(), tmp_path / "out", force=True, **kw)
        msgs = [str(w.message) for w in caught if "dynamic sizes" in str(w.message)]
        assert len(msgs) == 1 and "input 'x' dim 0" in msgs[0] and "in [1, 64]) -> 3" in msgs[0] and why in msgs[0], msgs
        assert [(d["input"], d["dim"], d["min"], d["max"], d["size"]) for d in art.manifest["specialized"]] == [
            ("x", 0, "1", "64", 3), ("y", 0, "1", "64", 3)]
        assert art.manifest["sizes"] == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        art = pt2c.compile(_Sum(), tmp_path / "static", example_inputs=(torch.randn(3, 4), torch.randn(3)))
    assert art.manifest["specialized"] == [] and not [w for w in caught if "dynamic sizes" in str(w.message)]
    # a bug of the dynamic path (here a TypeError planted in it) costs the dynamic sizes, not the compile
    import pt2c.frontend.lower as lower

    def bug(*a, **k):
        raise TypeError("planted")

    monkeypatch.setattr(lower.Lowering, "declare_dims", bug)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        art = pt2c.compile(_sum_program(), tmp_path / "out", force=True)
    assert [str(w.message) for w in caught if "dynamic-size path failed (TypeError: planted" in str(w.message)]
    assert len(art.manifest["specialized"]) == 2 and art.manifest["sizes"] == []


def test_unbounded_dim_is_refused_with_what_to_try(tmp_path):
    """An unbounded dim: refused (memory is planned for the largest sizes) unless pt2c is given a bound."""
    ep = export(_Sum(), (torch.randn(3, 4), torch.randn(3)), dynamic_shapes=({0: Dim("b")}, {0: Dim("b")}))
    with pytest.raises(InputError, match=r"(?s)input .x. dim 0 is dynamic .* no upper bound.*max=N.*--max x:0=N"):
        pt2c.compile(ep, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    for bound, want in (({"x:0": 100}, 100), (50, 50)):
        art = pt2c.compile(ep, tmp_path / "out", force=True, max_sizes=bound)
        assert [(z["min"], z["max"]) for z in art.manifest["sizes"]] == [(1, want)]
    for bad in ({"x": 100}, {"x:0": 0}, ["x:0=big"], {"x:0": 2}):  # (2: below the example's 3)
        with pytest.raises(InputError):
            pt2c.compile(ep, tmp_path / "bad", max_sizes=bad)


# family -> per input {dim: (name, min, max)}, the sizes checked per name (min, an odd one, max)
FAMILIES = {
    "mlp": ([{0: ("batch", 1, 32)}], {"batch": (1, 5, 32)}),
    "resnet18": ([{0: ("batch", 1, 8)}], {"batch": (1, 3, 8)}),
    "mobilenetv2": ([{0: ("batch", 1, 8)}], {"batch": (1, 3, 8)}),
    "bert": ([{0: ("batch", 1, 4), 1: ("seq", 2, 64)}] * 2, {"batch": (1, 3, 4), "seq": (2, 17, 64)}),
    "gpt2": ([{0: ("batch", 1, 4), 1: ("seq", 1, 64)}], {"batch": (1, 3, 4), "seq": (1, 17, 64)}),
    "llama": ([{0: ("batch", 1, 4), 1: ("seq", 1, 64)}], {"batch": (1, 3, 4), "seq": (1, 17, 64)}),
    # (torch.export unrolls an RNN over its sequence: only the batch is dynamic)
    "lstm": ([{0: ("batch", 1, 8)}], {"batch": (1, 3, 8)}),
    "gru": ([{0: ("batch", 1, 8)}], {"batch": (1, 3, 8)}),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_dynamic_matches_eager_at_each_size(family, tmp_path):
    """Every model family with a dynamic batch (and sequence length where it has one) from one artifact,
    checked against eager at each size's minimum, an odd size and its maximum."""
    model, ex = zoo.FAMILIES[family]("tiny")
    spec, checks = FAMILIES[family]
    made: dict[str, Dim] = {}
    dyn = tuple({d: made.setdefault(n, Dim(n, min=lo, max=hi)) for d, (n, lo, hi) in s.items()} for s in spec)
    art = pt2c.compile(export(model, ex, dynamic_shapes=dyn, strict=False), tmp_path / "out")
    assert len(art.manifest["sizes"]) == len(checks) and art.manifest["skipped_passes"] == {}
    pt2c.build(tmp_path / "out")
    m = pt2c.load(tmp_path / "out")
    g = torch.Generator().manual_seed(3)
    mid = {n: v[1] for n, v in checks.items()}
    for case in [dict(mid, **{n: v}) for n in checks for v in checks[n]]:
        xs = []
        for t, s in zip(ex, spec):
            shape = list(t.shape)
            for d, (n, _, _) in s.items():
                shape[d] = case[n]
            if t.dtype == torch.int64 and xs and family == "bert":  # the attention mask: padding at the end
                x = torch.ones(shape, dtype=torch.int64)
                x[-1, shape[1] - max(1, shape[1] // 4):] = 0
            elif t.dtype == torch.int64:
                x = torch.randint(0, int(t.max()) + 1, shape, generator=g)
            else:
                x = torch.randn(shape, generator=g)
            xs.append(x)
        with torch.no_grad():
            ref = model(*xs)
        out = m.run([x.numpy() for x in xs])[0]
        ref = (ref[0] if isinstance(ref, (tuple, list)) else ref).numpy()
        assert out.shape == ref.shape, case
        err = float(np.abs(out - ref).max()) / max(1.0, float(np.abs(ref).max()))
        assert err < TOL, (case, err)


def test_derived_dim_dynamic_image_size(tmp_path):
    """An image size the export derives (h = 32 * k, no input holding k itself) and a dynamic batch: k is read
    from the input's dim; a CNN checked against eager at several sizes, a size that is no multiple refused."""
    model, _ = zoo.resnet18("tiny")
    k = Dim("k", min=1, max=4)
    ep = export(model, (torch.randn(2, 3, 64, 64),), dynamic_shapes=({0: Dim("b", min=1, max=4), 2: 32 * k, 3: 32 * k},))
    art = pt2c.compile(ep, tmp_path / "out")
    z = art.manifest["sizes"][1]
    assert (z["input"], z["dim"], z["scale"], z["offset"], z["max"]) == ("x", 2, 32, 0, 4)
    assert art.manifest["inputs"][0]["shape"][2] == f"32 * {z['name']}"
    pt2c.build(tmp_path / "out")
    m = pt2c.load(tmp_path / "out")
    for b, n in ((1, z["min"]), (3, 3), (2, 4)):
        x = torch.randn(b, 3, 32 * n, 32 * n)
        with torch.no_grad():
            ref = model(x).numpy()
        np.testing.assert_allclose(m.run([x.numpy()])[0], ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(RunError, match=r"dim 2 is 72; the model takes 32 \* n for n in"):
        m.run([np.zeros((1, 3, 72, 72), np.float32)])


def test_verify_checks_each_size(tmp_path):
    """pt2c.verify on a dynamic program also runs each size at its minimum, an odd size and its maximum."""
    from pt2c.runtime.verify import verify

    ep = _sum_program()
    torch.export.save(ep, tmp_path / "dyn.pt2")
    report = verify(tmp_path / "dyn.pt2")
    assert report.passed
    assert [(o.name, o.shape) for o in report.outputs] == [
        ("output", (3,)), ("output@x_size0=1", (1,)), ("output@x_size0=33", (33,)), ("output@x_size0=64", (64,))]


def test_generated_c_for_dynamic_sizes_is_strict_c99(tmp_path):
    """The dynamic GPT-2's C builds with -std=c99 -Wall -Wextra -Werror -pedantic (sizes are size_t)."""
    import shutil
    import subprocess

    model, ex = zoo.gpt2("tiny")
    ep = export(model, ex, dynamic_shapes=({0: Dim("b", min=1, max=4), 1: Dim("s", min=1, max=64)},), strict=False)
    art = pt2c.compile(ep, tmp_path / "out", target="x86_64-v3,x86_64-v4")
    units = [("model.c", [])] + [(v["file"], v["cflags"]) for v in art.manifest["variants"]]
    for cc in [c for c in ("gcc", "clang") if shutil.which(c)]:
        for f, flags in units:
            r = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", *flags, "-c", f,
                                "-o", "/dev/null"], cwd=tmp_path / "out", capture_output=True, text=True)
            assert r.returncode == 0, (cc, f, r.stderr[-2000:])
    assert json.loads((Path(tmp_path) / "out" / "manifest.json").read_text())["sizes"][1]["max"] == 64


class _Cache(torch.nn.Module):
    """A cache updated in place at given positions, and a step counter: buffers torch.export records as mutated."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.randn(1, 2, 16, 4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.lin = torch.nn.Linear(4, 8)

    def forward(self, x, pos):
        self.k.index_copy_(2, pos, x)
        self.steps.add_(1)
        return self.lin(self.k).sum(2) * self.steps


def test_mutated_buffers_are_state_kept_between_runs(tmp_path, monkeypatch):
    """Buffers the program mutates are state: kept in the workspace from run to run (the cache updated where it
    lives), set to their export-time values by init and reset_state; checked against eager over a sequence of
    calls of different lengths, twice (after a reset)."""
    import copy

    m = _Cache()
    ref = copy.deepcopy(m)
    n = Dim("n", min=1, max=16)
    ep = export(m, (torch.randn(1, 2, 3, 4), torch.arange(3)), dynamic_shapes=({2: n}, {0: n}), strict=False)
    art = pt2c.compile(ep, tmp_path / "out")
    assert [(s["name"], s["shape"]) for s in art.manifest["state"]] == [("k", [1, 2, 16, 4]), ("steps", [])]
    assert art.manifest["memory"]["state_bytes"] >= 16 * 8 * 4 + 8
    assert f"int {art.name}_reset_state(const {art.name}_ctx *ctx);" in (tmp_path / "out" / f"{art.name}.h").read_text()
    pt2c.build(tmp_path / "out")
    lib = pt2c.load(tmp_path / "out")
    start = copy.deepcopy(ref.state_dict())
    for _ in range(2):
        ref.load_state_dict(start)
        lib.reset_state()
        p = 0
        for k in (3, 1, 1, 5, 2):
            x, pos = torch.randn(1, 2, k, 4), torch.arange(p, p + k)
            p += k
            with torch.no_grad():
                want = ref(x, pos).numpy()
            np.testing.assert_allclose(lib.run([x.numpy(), pos.numpy()])[0], want, rtol=1e-5, atol=1e-5)
    code = (tmp_path / "out" / f"{art.name}.c").read_text()
    assert code.count("memcpy(k, ") == 0  # the cache is updated in place: never copied whole at the end
    monkeypatch.delenv("PT2C_REQUIRE_DYNAMIC")  # (the GPU backends compile static shapes: the fallback first)
    with pytest.raises(InputError, match="updates buffers in place"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt2c.compile(ep, tmp_path / "gpu", target="opencl")


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_kv_cache_generation_matches_transformers(arch, tmp_path):
    """examples/generate: a transformers LM with its static KV cache, the prompt in one call and one call per new
    token, from Python and from C (generate.c), token for token as transformers' greedy generate()."""
    import importlib.util
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    path = Path(__file__).resolve().parents[1] / "examples" / "generate" / "generate.py"
    spec = importlib.util.spec_from_file_location("generate_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--arch", arch, "--new", "16", "--cache", "32", "--out", str(tmp_path / "out")]) == 0
