"""Negative / out-of-range indices follow PyTorch, and log_softmax stays exact at extreme logits.

Indices: every op takes its index tensor as a *runtime input* (nothing is folded at compile
time), in one compiled model.  Each op is run with valid indices (equal to eager), with -1
(PyTorch raises for embedding, index_select, gather, scatter*, index_add, index_copy: pt2c
must return <NAME>_ERR_INDEX, which the runner raises as RunError mentioning "index"; it
wraps for x[idx], index_put, index_fill, torch.take: pt2c must give the same result), and
with an index equal to the size (always an error; for wrapping ops -(size + 1) as well).

log_softmax: rows such as [1e4, 1e4-1, ...], [3e38, 3e38], [-3e38, 3e38], [3e38, -inf] and
NaN / inf mixes, over the last dim (contiguous kernel path) and over a middle dim (inner > 1,
the tiled path), against torch.log_softmax: NaN / inf where torch has them, and otherwise
|out - ref| <= 1e-6 * max(1, |x - max|) (the rounding of x - max itself); [3e38, 3e38] gives
-log(2) = -0.6931472 exactly.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pt2c
from pt2c.ir import Graph, Node, Value
from pt2c.ops import OPS
from pt2c.runtime.runner import RunError

from conftest import GCC_CFLAGS, TARGET, export, private_lib_copy


def _compile_load(model: torch.nn.Module, inputs: list[torch.Tensor], out_dir: Path, name: str) -> Any:
    ep = export(model, inputs)
    pt2c.compile(ep, out_dir, target=TARGET, name=name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "no OpenMP" fallback warning
        lib = pt2c.build(out_dir, cc="gcc", cflags=GCC_CFLAGS, openmp=False)  # -Wall -Wextra -Werror -pedantic
    return pt2c.load(out_dir, lib=private_lib_copy(Path(lib)))


# --------------------------------------------------------------------------- indices

N, M = 4, 6  # x: [N, M]
W = torch.arange(15, dtype=torch.float32).reshape(5, 3)  # embedding table
SRC = torch.arange(12, dtype=torch.float32).reshape(2, 6) + 100.0
ROW = torch.arange(6, dtype=torch.float32) - 50.0


def _t(v: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.tensor(v, dtype=dtype)


def _setitem(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[i] = ROW
    return y


# name -> (fn(x, index), wraps like torch, {case: index tensor}); "valid" is what the others get
# while one op is given a bad index.  Duplicate targets only where the op accumulates.
IndexCase = tuple[Callable[..., torch.Tensor], bool, dict[str, torch.Tensor]]
CASES: dict[str, IndexCase] = {
    "embedding": (lambda x, i: F.embedding(i, W), False,
                  {"valid": _t([[1, 4], [0, 2]]), "neg": _t([[1, -1], [0, 2]]), "size": _t([[1, 5], [0, 2]])}),
    "index_select": (lambda x, i: torch.index_select(x, 1, i), False,
                     {"valid": _t([5, 0, 2]), "neg": _t([5, -1, 2]), "size": _t([6, 0, 2])}),
    "index_select_i32": (lambda x, i: torch.index_select(x, 0, i), False,
                         {"valid": _t([3, 1], torch.int32), "neg": _t([-1, 1], torch.int32),
                          "size": _t([4, 1], torch.int32)}),
    "gather": (lambda x, i: torch.gather(x, 1, i), False,
               {"valid": _t([[0, 5], [1, 1], [2, 3], [4, 0]]), "neg": _t([[0, 5], [1, 1], [2, -1], [4, 0]]),
                "size": _t([[0, 5], [1, 6], [2, 3], [4, 0]])}),
    "scatter": (lambda x, i: x.scatter(0, i, SRC), False,
                {"valid": _t([[0, 1, 2, 3, 0, 1], [3, 2, 1, 0, 2, 3]]),
                 "neg": _t([[-1, 1, 2, 3, 0, 1], [3, 2, 1, 0, 2, 3]]),
                 "size": _t([[0, 1, 2, 3, 0, 1], [3, 2, 1, 0, 2, 4]])}),
    "scatter_value": (lambda x, i: x.scatter(1, i, 2.5), False,
                      {"valid": _t([[5], [0], [3], [1]]), "neg": _t([[5], [-1], [3], [1]]),
                       "size": _t([[5], [0], [6], [1]])}),
    "scatter_add": (lambda x, i: x.scatter_add(1, i, SRC[:, :3].repeat(2, 1)), False,
                    {"valid": _t([[0, 0, 5], [1, 2, 1], [3, 4, 5], [5, 5, 5]]),
                     "neg": _t([[0, 0, 5], [1, 2, 1], [3, 4, -1], [5, 5, 5]]),
                     "size": _t([[6, 0, 5], [1, 2, 1], [3, 4, 5], [5, 5, 5]])}),
    "scatter_reduce_amax": (lambda x, i: x.scatter_reduce(0, i, SRC, "amax", include_self=False), False,
                            {"valid": _t([[0, 1, 2, 3, 0, 0], [3, 1, 1, 0, 2, 0]]),
                             "neg": _t([[0, 1, 2, 3, 0, 0], [3, 1, 1, 0, 2, -1]]),
                             "size": _t([[0, 1, 2, 4, 0, 0], [3, 1, 1, 0, 2, 0]])}),
    "scatter_reduce_mean": (lambda x, i: x.scatter_reduce(1, i, SRC[:, :4].repeat(2, 1), "mean"), False,
                            {"valid": _t([[0, 0, 5, 1]] * 4), "neg": _t([[0, 0, 5, 1]] * 3 + [[0, -1, 5, 1]]),
                             "size": _t([[0, 0, 5, 1]] * 3 + [[0, 6, 5, 1]])}),
    "index_add": (lambda x, i: x.index_add(0, i, SRC), False,
                  {"valid": _t([3, 3]), "neg": _t([3, -1]), "size": _t([4, 3])}),
    "index_copy": (lambda x, i: x.index_copy(0, i, SRC), False,
                   {"valid": _t([3, 1]), "neg": _t([-1, 1]), "size": _t([3, 4])}),
    "index_fill": (lambda x, i: x.index_fill(0, i, -7.0), True,
                   {"valid": _t([2, 0]), "neg": _t([-1, 0]), "size": _t([4, 0]), "too_neg": _t([-5, 0])}),
    "index_put": (lambda x, i: x.index_put((i,), ROW), True,
                  {"valid": _t([3, 1]), "neg": _t([-1, 1]), "size": _t([4, 1]), "too_neg": _t([-5, 1])}),
    "index_put_acc": (lambda x, i: x.index_put((i,), ROW, accumulate=True), True,
                      {"valid": _t([3, 3, 1]), "neg": _t([-1, 3, -4]), "size": _t([1, 3, 4]),
                       "too_neg": _t([-5, 3, 1])}),
    "index_put_2idx": (lambda x, i: x.index_put((i[0], i[1]), ROW[:3]), True,
                       {"valid": _t([[0, 3, 1], [5, 0, 2]]), "neg": _t([[-1, 2, 1], [5, -2, 2]]),
                        "size": _t([[4, 3, 1], [5, 0, 2]]), "too_neg": _t([[0, 3, 1], [5, -7, 2]])}),
    "setitem": (_setitem, True,
                {"valid": _t([2, 0]), "neg": _t([-1, 0]), "size": _t([4, 0]), "too_neg": _t([-5, 0])}),
    "index": (lambda x, i: x[i], True,
              {"valid": _t([3, 0, 2]), "neg": _t([-1, -4, 2]), "size": _t([4, 0, 2]), "too_neg": _t([-5, 0, 2])}),
    "index_dim1": (lambda x, i: x[:, i], True,
                   {"valid": _t([5, 0]), "neg": _t([-1, -6]), "size": _t([6, 0]), "too_neg": _t([-7, 0])}),
    "index_2idx": (lambda x, i: x[i[0], i[1]], True,
                   {"valid": _t([[0, 3], [5, 1]]), "neg": _t([[-1, -4], [-1, 1]]), "size": _t([[0, 4], [5, 1]]),
                    "too_neg": _t([[0, 3], [5, -7]])}),
    "take": (lambda x, i: torch.take(x, i), True,
             {"valid": _t([0, 23, 7]), "neg": _t([-1, -24, 7]), "size": _t([24, 0, 7]), "too_neg": _t([-25, 0, 7])}),
}
NAMES = list(CASES)


class IndexOps(torch.nn.Module):
    def forward(self, x: torch.Tensor, *idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(CASES[n][0](x, i) for n, i in zip(NAMES, idx))


X = torch.arange(N * M, dtype=torch.float32).reshape(N, M) * 0.5 - 3.0


def _inputs(name: str | None = None, case: str = "valid") -> list[torch.Tensor]:
    return [X] + [CASES[n][2][case if n == name else "valid"] for n in NAMES]


@pytest.fixture(scope="module")
def index_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _compile_load(IndexOps(), _inputs(), tmp_path_factory.mktemp("idx") / "out", "idxops")


def _eager(inputs: list[torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        return [o.numpy() for o in IndexOps()(*inputs)]


def _run(model: Any, inputs: list[torch.Tensor]) -> list[np.ndarray]:
    return model.run([np.ascontiguousarray(t.numpy()) for t in inputs])


def _assert_equal(outs: list[np.ndarray], refs: list[np.ndarray]) -> None:
    assert len(outs) == len(refs)
    for n, o, r in zip(NAMES, outs, refs):
        assert o.shape == r.shape and o.dtype == r.dtype, n
        np.testing.assert_array_equal(o, r, err_msg=n)


def test_valid_indices(index_model: Any) -> None:
    _assert_equal(_run(index_model, _inputs()), _eager(_inputs()))


@pytest.mark.parametrize("name", NAMES)
def test_negative_index(index_model: Any, name: str) -> None:
    """-1 raises in pt2c exactly where it raises in torch; elsewhere it counts from the end."""
    inputs = _inputs(name, "neg")
    wraps = CASES[name][1]
    try:
        refs = _eager(inputs)
    except (IndexError, RuntimeError):
        assert not wraps, f"torch now raises for {name}[-1]; update the table"
        with pytest.raises(RunError, match="index"):
            _run(index_model, inputs)
        return
    assert wraps, f"torch now wraps {name}[-1]; pt2c returns ERR_INDEX"
    _assert_equal(_run(index_model, inputs), refs)


@pytest.mark.parametrize("name,case", [(n, c) for n in NAMES for c in ("size", "too_neg") if c in CASES[n][2]])
def test_out_of_range_index(index_model: Any, name: str, case: str) -> None:
    inputs = _inputs(name, case)
    with pytest.raises((IndexError, RuntimeError)):
        _eager(inputs)
    with pytest.raises(RunError, match="index"):
        _run(index_model, inputs)
    # the model still works after an error
    _assert_equal(_run(index_model, _inputs()), _eager(_inputs()))


def test_reference_interpreter_raises_like_torch() -> None:
    """The numpy references (eval_graph, compile-time folding) raise IndexError where torch does."""
    x = Value("x", (3, 4), "float32")
    i = Value("i", (1,), "int64")
    i2 = Value("i2", (1, 4), "int64")
    xd = np.arange(12, dtype=np.float32).reshape(3, 4)
    neg, neg2 = np.array([-1]), np.full((1, 4), -1)

    def ref(op: str, ins: list[Value], attrs: dict[str, Any], *args: np.ndarray) -> np.ndarray:
        outs = [Value("y", (1, 4) if op == "gather" else (3, 4), "float32")]
        if op == "scatter_reduce" and attrs["reduce"] == "mean":
            outs.append(Value("c", (3, 4), "int64"))
        return OPS[op].ref(Node(op, ins, attrs, outs), *args)

    np.testing.assert_array_equal(ref("gather", [x, i], {"dim": 0, "wrap": True}, xd, neg), xd[-1:])
    with pytest.raises(IndexError):
        ref("gather", [x, i], {"dim": 0, "wrap": False}, xd, neg)
    with pytest.raises(IndexError):
        ref("gather", [x, i], {"dim": 0, "wrap": True}, xd, np.array([3]))
    with pytest.raises(IndexError):
        ref("gather_dim", [x, i2], {"dim": 0}, xd, neg2)
    with pytest.raises(IndexError):
        ref("scatter", [x, i2], {"dim": 0, "reduce": "set", "value": 1.0}, xd, neg2)
    with pytest.raises(IndexError):
        ref("scatter_reduce", [x, i2, x], {"dim": 0, "reduce": "sum", "include_self": True}, xd, neg2, xd)
    row = np.ones(4, np.float32)
    put = {"nidx": 1, "bshape": (1,), "accumulate": False}
    np.testing.assert_array_equal(ref("index_put", [x, i, x], {**put, "wrap": True}, xd, neg, row)[2], row)
    with pytest.raises(IndexError):
        ref("index_put", [x, i, x], {**put, "wrap": False}, xd, neg, row)
    # and the graph interpreter goes through them
    g = Graph("g", [x, i], [Node("gather", [x, i], {"dim": 0, "wrap": False}, [Value("y", (1, 4), "float32")])], [])
    from pt2c.ops import eval_graph

    with pytest.raises(IndexError):
        eval_graph(g, [xd, neg])


# --------------------------------------------------------------------------- log_softmax at extreme logits

INF, NAN = float("inf"), float("nan")
PAIRS = [[3e38, 3e38], [-3e38, 3e38], [3e38, -INF], [-3e38, -3e38], [3e38, 3e38 - 1e32], [1e4, 1e4 - 1],
         [-1e4, -1e4 + 1], [1e30, -1e30], [0.0, -100.0], [NAN, 1.0], [INF, 1.0], [-INF, 1.0], [-INF, -INF],
         [INF, INF], [1.0, 2.0]]
# 11 wide: the 8-lane partial sums and the scalar tail of the contiguous path
LONG = [[1e4 - k for k in range(11)], [-1e4 + 0.5 * k for k in range(11)], [3e38] * 11,
        [3e38] * 5 + [-3e38] * 6, [2e4 * (k % 3) - 1e4 for k in range(11)], [1e4] * 10 + [NAN],
        [-INF] * 10 + [7.0], [float(k) for k in range(11)]]


class LogSoftmax(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.log_softmax(a, -1), torch.log_softmax(b, 1), torch.log_softmax(c, -1), torch.log_softmax(d, 1))


def _mid(rows: torch.Tensor) -> torch.Tensor:
    """[R, D] -> [2, D, R]: each row along the middle dim (inner = R > 1); the second outer slice
    holds the rows in reverse order."""
    t = rows.t().contiguous()
    return torch.stack([t, t.flip(1)])


def _check_log_softmax(out: np.ndarray, ref: np.ndarray, x: np.ndarray, dim: int) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(out[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])  # +-inf exactly
    with np.errstate(invalid="ignore", over="ignore"):
        dev = np.abs(x.astype(np.float64) - np.nanmax(np.where(np.isnan(x), -np.inf, x), axis=dim, keepdims=True))
        tol = 1e-6 * np.maximum(1.0, np.where(np.isfinite(dev), dev, 0.0))
        err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    bad = fin & ~(err <= tol)
    assert not bad.any(), f"out {out[bad]} ref {ref[bad]} x {np.broadcast_to(x, out.shape)[bad]}"


def test_log_softmax_extreme_logits(tmp_path: Path) -> None:
    a = torch.tensor(PAIRS, dtype=torch.float32)
    c = torch.tensor(LONG, dtype=torch.float32)
    inputs = [a, _mid(a), c, _mid(c)]
    model = _compile_load(LogSoftmax(), inputs, tmp_path / "out", "lsm")
    outs = model.run([t.numpy() for t in inputs])
    with torch.no_grad():
        refs = [r.numpy() for r in LogSoftmax()(*inputs)]
    for o, r, x, dim in zip(outs, refs, inputs, (1, 1, 1, 1)):
        _check_log_softmax(o, r, x.numpy(), dim)
    log2 = np.float32(-0.6931472)
    assert outs[0][0, 0] == log2 and outs[0][0, 1] == log2, outs[0][0]  # was 0: log(2) absorbed by 3e38
    assert (outs[1][0, :, 0] == log2).all() and (outs[1][1, :, -1] == log2).all()  # the tiled path too
    np.testing.assert_array_equal(outs[0][1], [-np.inf, 0.0])
    np.testing.assert_array_equal(outs[0][2], [0.0, -np.inf])
    assert np.isnan(outs[0][9]).all() and np.isnan(outs[0][10]).all() and np.isnan(outs[0][12]).all()
    # a row of equal huge logits: -log(11), not 0 (nor -inf)
    np.testing.assert_allclose(outs[2][2], np.full(11, -np.log(11.0)), rtol=1e-6)


class _Bags(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(10, 4, mode="sum")

    def forward(self, idx: torch.Tensor, offsets: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.bag(idx, offsets, per_sample_weights=w)


def test_embedding_bag_checks_indices_and_offsets_at_run_time(tmp_path: Path) -> None:
    """Indices and offsets as run-time inputs: valid ones give eager's bags; where eager raises (an index
    outside [0, N), offsets not starting at 0, going down or past the indices) run returns ERR_INDEX."""
    torch.manual_seed(0)
    model = _Bags().eval()
    idx, offs, w = _t([1, 2, 4, 5, 4, 3, 2, 9]), _t([0, 4, 4]), torch.rand(8)
    m = _compile_load(model, [idx, offs, w], tmp_path / "bags", "bags")
    with torch.no_grad():
        ref = model(idx, offs, w).numpy()
    np.testing.assert_allclose(m.run([idx.numpy(), offs.numpy(), w.numpy()])[0], ref, rtol=1e-6, atol=1e-6)
    for bad_idx, bad_offs in (([1, 2, 4, 5, 4, 3, 2, -1], [0, 4, 4]), ([1, 2, 4, 5, 4, 3, 2, 10], [0, 4, 4]),
                              ([1] * 8, [1, 4, 4]), ([1] * 8, [0, 5, 4]), ([1] * 8, [0, 4, 9])):
        with pytest.raises(Exception):
            model(_t(bad_idx), _t(bad_offs), w)  # eager raises for each of these
        with pytest.raises(RunError, match="index"):
            m.run([np.array(bad_idx, np.int64), np.array(bad_offs, np.int64), w.numpy()])
