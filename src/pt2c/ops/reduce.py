"""Reductions: sum / mean / prod / max / min / any / all / arg*, var / std, vector norms, cdist / pdist, cumsum.

`reduce` works on an [outer, r, inner] view (non-adjacent reduced dims are moved last first);
var / std and vector norms are compositions of it and `ew`; cdist / pdist are p-norm loops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pt2c.ir import Node, Value, ctype, np_dtype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.elementwise import make_ew
from pt2c.ops.registry import arity, broadcast, defop, dtype_in, ints, lowers, need, result
from pt2c.ops.shape import make_strided
from pt2c.ops.util import (FLOATS, broadcast_strides, close_loops, contiguous_strides, empty_output, index_loops, lin,
                           norm_dim, outer_inner, prod)
from pt2c.sym import sint


# ---------------------------------------------------------------- reductions over an [outer, r, inner] view

_REDUCE_NP = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
              "any": np.any, "all": np.all, "argmax": np.argmax, "argmin": np.argmin}


def _ref_reduce(node: Node, x: np.ndarray) -> np.ndarray:
    outer, r, inner = node.attrs["view"]
    kind = node.attrs["kind"]
    x3 = x.reshape(outer, r, inner)
    acc = x3.astype(np.float64) if x.dtype.kind == "f" and kind in ("sum", "mean", "prod") else x3
    y = _REDUCE_NP[kind](acc, axis=1)
    return np.asarray(y).reshape(node.outputs[0].shape)


def _emit_reduce(em: EmitCtx, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = node.attrs["view"]
    kind = node.attrs["kind"]
    if x.dtype == "float32" and out.dtype in ("float32", "int64"):
        em.line(f"pt2c_{'reduce_' if not kind.startswith('arg') else ''}{kind}({em.ptr(out)}, {em.ptr(x)}, {outer}, {r}, {inner});")
        return
    _emit_generic_reduce(em, node)


def _emit_generic_reduce(em: EmitCtx, node: Node) -> None:
    """A generated loop for the dtypes the reduce.c kernels do not take (accumulating in double
    for floats)."""
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = node.attrs["view"]
    kind = node.attrs["kind"]
    t, X, Y = ctype(out.dtype), em.ptr(x), em.ptr(out)
    init = {"sum": "0", "mean": "0", "prod": "1", "any": "0", "all": "1"}
    em.line(f"for (size_t o = 0; o < {outer}; o++) {{")
    em.line(f"    for (size_t i = 0; i < {inner}; i++) {{")
    at = f"(o * {r} + k) * {inner} + i"
    if kind in init:
        acc_t = "double" if out.dtype in ("float32", "float64") else ("int" if kind in ("any", "all") else t)
        em.line(f"        {acc_t} acc = {init[kind]};")
        step = {"sum": "acc += {x};", "mean": "acc += {x};", "prod": "acc *= {x};",
                "any": "acc = acc || ({x} != 0);", "all": "acc = acc && ({x} != 0);"}[kind]
        em.line(f"        for (size_t k = 0; k < {r}; k++) " + step.format(x=f"{X}[{at}]"))
        res = f"acc / {r}" if kind == "mean" else "acc"
    elif kind in ("max", "min", "argmax", "argmin"):
        cmp = ">" if "max" in kind else "<"
        em.line("        size_t best = 0;")
        em.line(f"        for (size_t k = 1; k < {r}; k++) if ({X}[{at}] {cmp} {X}[(o * {r} + best) * {inner} + i]) best = k;")
        res = "(int64_t)best" if kind.startswith("arg") else f"{X}[(o * {r} + best) * {inner} + i]"
    else:
        raise NotImplementedError(kind)
    em.line(f"        {Y}[o * {inner} + i] = ({t})({res});")
    em.line("    }")
    em.line("}")


def _check_reduce(node: Node) -> None:
    """x viewed as [outer, r, inner] reduced over r: outer * inner elements out; arg* give int64,
    any / all bool (uint8 for a uint8 input, as torch), the others x's dtype."""
    arity(node, 1)
    x, out = node.inputs[0], node.outputs[0]
    kind, view = node.attrs["kind"], node.attrs["view"]
    need(kind in _REDUCE_NP, f"kind {kind!r}")
    need(ints(view, 3, 0) and prod(view) == x.numel, f"view {view} of {x.numel} elements")
    need(out.numel == view[0] * view[2], f"{out.numel} elements out of an {list(view)} reduction over r")
    want = ("int64",) if kind.startswith("arg") else ("bool", "uint8") if kind in ("any", "all") else (x.dtype,)
    dtype_in(out, want, "output")


defop("reduce", _ref_reduce, _emit_reduce, kernels=("reduce",), flops=lambda n: n.inputs[0].numel, rule=_check_reduce)


def make_reduce(ctx: LowerCtx, kind: str, x: Value, dims: list[int] | None, out: Value) -> Value:
    rank = len(x.shape)
    dims = sorted({norm_dim(d, rank) for d in dims}) if dims else list(range(rank))
    if not x.shape:
        dims = []
    if dims and dims != list(range(dims[0], dims[-1] + 1)):
        # non-adjacent reduced dims: move them last (one transpose copy), then reduce
        keep = [d for d in range(rank) if d not in dims]
        st = contiguous_strides(x.shape)
        perm = keep + dims
        xt = ctx.new("reduce_in", tuple(x.shape[d] for d in perm), x.dtype)
        make_strided(ctx, x, xt, tuple(st[d] for d in perm), 0)
        x, dims = xt, list(range(len(keep), rank))
    if dims:
        outer = prod(x.shape[:dims[0]])
        r = prod([x.shape[d] for d in dims])
        inner = prod(x.shape[dims[-1] + 1:])
    else:
        outer, r, inner = 1, 1, x.numel
    if x.dtype != out.dtype and kind not in ("argmax", "argmin", "any", "all"):
        x = make_ew(ctx, "copy", [x], compute=out.dtype, out=ctx.new("reduce_cast", x.shape, out.dtype))
    ctx.emit("reduce", [x], {"kind": kind, "view": (outer, r, inner)}, [out])
    return out


def _lower_reduce_kind(kind: str) -> Any:
    def lower(ctx: LowerCtx, a: dict[str, Any]) -> Value:
        x = a["self"]
        dims = a.get("dim")
        if isinstance(dims, int):
            dims = [dims]
        return make_reduce(ctx, kind, x, list(dims) if dims is not None else None, ctx.out())
    return lower


for _k, _ts in {
    "sum": ("aten.sum.dim_IntList", "aten.sum.default"),
    "mean": ("aten.mean.dim", "aten.mean.default"),
    "max": ("aten.amax.default", "aten.max.default"),
    "min": ("aten.amin.default", "aten.min.default"),
    "prod": ("aten.prod.dim_int", "aten.prod.default"),
    "any": ("aten.any.dim", "aten.any.dims", "aten.any.default"),
    "all": ("aten.all.dim", "aten.all.dims", "aten.all.default"),
    "argmax": ("aten.argmax.default",),
    "argmin": ("aten.argmin.default",),
}.items():
    lowers(*_ts)(_lower_reduce_kind(_k))


@lowers("aten.max.dim", "aten.min.dim")
def _lower_max_dim(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x = a["self"]
    outs = ctx.outs()
    kind = "max" if "max" in ctx.target else "min"
    make_reduce(ctx, kind, x, [a["dim"]], outs[0])
    make_reduce(ctx, "arg" + kind, x, [a["dim"]], outs[1])
    return tuple(outs)


# ---------------------------------------------------------------- cumulative sum

def _ref_cumsum(node: Node, x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=node.attrs["dim"]).astype(x.dtype if node.outputs[0].dtype == x.dtype else np.int64)


def _emit_cumsum(em: EmitCtx, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = outer_inner(x.shape, node.attrs["dim"])
    t = ctype(out.dtype)
    em.line(f"for (long o = 0; o < {sint(outer)}; o++) {{")
    em.line(f"    for (long i = 0; i < {sint(inner)}; i++) {{")
    em.line(f"        {t} acc = 0;")
    em.line(f"        for (long k = 0; k < {sint(r)}; k++) {{")
    em.line(f"            size_t at = ((size_t)o * {r} + (size_t)k) * {inner} + (size_t)i;")
    em.line(f"            acc += ({t}){em.ptr(x)}[at];")
    em.line(f"            {em.ptr(out)}[at] = acc;")
    em.line("        }")
    em.line("    }")
    em.line("}")


def _check_cumsum(node: Node) -> None:
    arity(node, 1)
    x, out, dim = node.inputs[0], node.outputs[0], node.attrs["dim"]
    need(type(dim) is int and 0 <= dim < max(len(x.shape), 1), f"dim {dim} of a rank-{len(x.shape)} input")
    result(out, x.shape, out.dtype)  # any dtype (cumsum's dtype=): the C accumulates in it


defop("cumsum", _ref_cumsum, _emit_cumsum, rule=_check_cumsum)


@lowers("aten.cumsum.default")
def _lower_cumsum(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    ctx.emit("cumsum", [x], {"dim": norm_dim(a["dim"], len(x.shape)) if x.shape else 0}, [out])
    return out


# ---------------------------------------------------------------- var / std / vector norm (compositions)

def _dims(a: dict[str, Any], rank: int) -> list[int]:
    dims = a.get("dim")
    if isinstance(dims, int):
        dims = [dims]
    if not dims:
        return list(range(rank))
    return sorted({norm_dim(d, rank) for d in dims})


def _keep_shape(shape: tuple[int, ...], dims: list[int]) -> tuple[int, ...]:
    return tuple(1 if d in dims else n for d, n in enumerate(shape))


def _float_only(ctx: LowerCtx, x: Value, what: str) -> None:
    if x.dtype not in ("float32", "float64"):
        ctx.fail(f"{what} is implemented for floating-point tensors (got {x.dtype})")


@lowers("aten.var.correction", "aten.var.dim", "aten.var_mean.correction")
def _lower_var(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x = a["self"]
    outs = ctx.outs()
    out = outs[0]
    _float_only(ctx, x, "var")
    rank = len(x.shape)
    dims = _dims(a, rank) if rank else []
    if ctx.target == "aten.var.dim":
        corr = 1 if a.get("unbiased", True) else 0
    else:
        corr = a.get("correction")
        corr = 1 if corr is None else corr
    n = prod(x.shape[d] for d in dims)
    dt = x.dtype
    kshape = _keep_shape(x.shape, dims)
    mean = make_reduce(ctx, "mean", x, dims or None, ctx.new("mean", kshape, dt))
    dev = make_ew(ctx, "sub", [x, mean], out=ctx.new("dev", x.shape, dt))
    sq = make_ew(ctx, "mul", [dev, dev], out=ctx.new("sq", x.shape, dt))
    ssum = make_reduce(ctx, "sum", sq, dims or None, ctx.new("ssq", out.shape, dt))
    make_ew(ctx, "div", [ssum, float(max(n - corr, 0))], out=out)
    if len(outs) == 2:
        mo = outs[1]
        return (out, ctx.view(mean, mo.shape, out=mo) if mo.shape != mean.shape else mean)
    return out


@lowers("aten.linalg_vector_norm.default", "aten.norm.ScalarOpt_dim", "aten.norm.Scalar")
def _lower_vector_norm(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"] if "self" in a else a["input"], ctx.out()
    _float_only(ctx, x, "vector norm")
    ordv = a.get("ord", a.get("p", 2))
    ordv = 2.0 if ordv is None else float(ordv)
    rank = len(x.shape)
    dims = _dims(a, rank) if rank else []
    dt = out.dtype
    ax = make_ew(ctx, "abs", [x], out=ctx.new("abs", x.shape, dt))
    if ordv in (float("inf"), float("-inf")):
        if x.numel == 0:
            ctx.fail("inf-norm of an empty tensor")
        make_reduce(ctx, "max" if ordv > 0 else "min", ax, dims or None, out)
    elif ordv == 0:
        nz = make_ew(ctx, "ne", [x, 0.0], out=ctx.new("nz", x.shape, "bool"))
        nzf = make_ew(ctx, "copy", [nz], compute=dt, out=ctx.new("nzf", x.shape, dt))
        make_reduce(ctx, "sum", nzf, dims or None, out)
    elif ordv == 1:
        make_reduce(ctx, "sum", ax, dims or None, out)
    elif ordv == 2:
        sq = make_ew(ctx, "mul", [ax, ax], out=ctx.new("sq", x.shape, dt))
        s = make_reduce(ctx, "sum", sq, dims or None, ctx.new("ssq", out.shape, dt))
        make_ew(ctx, "sqrt", [s], out=out)
    else:
        pw = make_ew(ctx, "pow", [ax, ordv], out=ctx.new("pow", x.shape, dt))
        s = make_reduce(ctx, "sum", pw, dims or None, ctx.new("spow", out.shape, dt))
        make_ew(ctx, "pow", [s, 1.0 / ordv], out=out)
    return out


# ---------------------------------------------------------------- cdist / pdist (direct p-norm loops in double)

def _pnorm_np(d: np.ndarray, p: float) -> np.ndarray:
    d = np.abs(d.astype(np.float64))
    if p == 0:
        return (d != 0).sum(-1).astype(np.float64)
    if p == math.inf:
        return d.max(-1) if d.shape[-1] else np.zeros(d.shape[:-1])
    if p == 1:
        return d.sum(-1)
    if p == 2:
        return np.sqrt((d * d).sum(-1))
    return (d ** p).sum(-1) ** (1.0 / p)


def _pnorm_c(p: float) -> tuple[str, str, str]:
    """(accumulate statement on u_acc with u_d = |difference|, finish expression)"""
    if p == 0:
        return "u_acc += (u_d != 0.0);", "u_acc", "0.0"
    if p == math.inf:
        return "if (u_d > u_acc || u_d != u_d) u_acc = u_d;", "u_acc", "0.0"
    if p == 1:
        return "u_acc += u_d;", "u_acc", "0.0"
    if p == 2:
        return "u_acc += u_d * u_d;", "sqrt(u_acc)", "0.0"
    return f"u_acc += pow(u_d, {float(p)!r});", f"pow(u_acc, {1.0 / float(p)!r})", "0.0"


def _ref_cdist(node: Node, x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    shape = node.outputs[0].shape
    b = shape[:-2]
    a1 = np.broadcast_to(x1, b + x1.shape[-2:])
    a2 = np.broadcast_to(x2, b + x2.shape[-2:])
    d = a1[..., :, None, :] - a2[..., None, :, :]
    return _pnorm_np(d, node.attrs["p"]).astype(np_dtype(node.outputs[0].dtype)).reshape(shape)


def _emit_cdist(em: EmitCtx, node: Node) -> None:
    x1, x2 = node.inputs
    out = node.outputs[0]
    shape = out.shape
    bshape = shape[:-2]
    P, R = shape[-2:]
    M = x1.shape[-1]
    t = ctype(out.dtype)
    s1 = broadcast_strides(x1.shape[:-2], contiguous_strides(x1.shape)[:-2], bshape) if bshape else ()
    s2 = broadcast_strides(x2.shape[:-2], contiguous_strides(x2.shape)[:-2], bshape) if bshape else ()
    X1, X2, Y = em.ptr(x1), em.ptr(x2), em.ptr(out)
    acc, fin, init = _pnorm_c(node.attrs["p"])
    names, k = index_loops(em, tuple(bshape) + (P, R))
    pad = "    " * k
    bn = names[:len(bshape)]
    ip, ir = names[len(bshape)], names[len(bshape) + 1]
    em.line(pad + f"const {t} *u_a = {X1} + {lin(bn, s1)} + {ip} * {M};")
    em.line(pad + f"const {t} *u_b = {X2} + {lin(bn, s2)} + {ir} * {M};")
    em.line(pad + f"double u_acc = {init};")
    em.line(pad + f"for (size_t u_m = 0; u_m < {M}; u_m++) {{ double u_d = fabs((double)u_a[u_m] - (double)u_b[u_m]); {acc} }}")
    em.line(pad + f"{Y}[{lin(names, contiguous_strides(shape))}] = ({t})({fin});")
    close_loops(em, k)


def _check_cdist(node: Node) -> None:
    """x1 [..., P, M], x2 [..., R, M] -> [broadcast(...), P, R]."""
    arity(node, 2)
    x1, x2 = node.inputs
    dtype_in(x1, FLOATS, "x1")
    need(x2.dtype == x1.dtype and len(x1.shape) >= 2 and len(x2.shape) >= 2 and x1.shape[-1] == x2.shape[-1],
         f"x1 {x1.dtype}{list(x1.shape)}, x2 {x2.dtype}{list(x2.shape)}")
    need(type(node.attrs["p"]) is float and node.attrs["p"] >= 0, "p is not a float >= 0")
    result(node.outputs[0], (*broadcast(x1.shape[:-2], x2.shape[:-2]), x1.shape[-2], x2.shape[-2]), x1.dtype)


defop("cdist", _ref_cdist, _emit_cdist, rule=_check_cdist)


@lowers("aten._cdist_forward.default")
def _lower_cdist(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x1, x2, out = a["x1"], a["x2"], ctx.out()
    p = float(a["p"])
    if out.dtype not in FLOATS or x1.dtype != out.dtype or x2.dtype != out.dtype:
        ctx.fail(f"cdist is implemented for float32 / float64 (got {x1.dtype}, {x2.dtype})")
    if p < 0 or math.isnan(p):
        ctx.fail("cdist with p < 0")
    if out.numel == 0:
        return empty_output(ctx, out)
    if x1.shape[-1] == 0:
        return empty_output(ctx, out)
    ctx.emit("cdist", [x1, x2], {"p": p}, [out])
    return out


def _ref_pdist(node: Node, x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    i, j = np.triu_indices(n, 1)
    d = x[i] - x[j]
    return _pnorm_np(d, node.attrs["p"]).astype(np_dtype(node.outputs[0].dtype))


def _emit_pdist(em: EmitCtx, node: Node) -> None:
    x = node.inputs[0]
    out = node.outputs[0]
    N, M = x.shape
    t = ctype(out.dtype)
    X, Y = em.ptr(x), em.ptr(out)
    acc, fin, init = _pnorm_c(node.attrs["p"])
    em.line("size_t u_k = 0;")
    em.line(f"for (size_t u_i = 0; u_i < {N}; u_i++) for (size_t u_j = u_i + 1; u_j < {N}; u_j++) {{")
    em.line(f"    const {t} *u_a = {X} + u_i * {M}, *u_b = {X} + u_j * {M};")
    em.line(f"    double u_acc = {init};")
    em.line(f"    for (size_t u_m = 0; u_m < {M}; u_m++) {{ double u_d = fabs((double)u_a[u_m] - (double)u_b[u_m]); {acc} }}")
    em.line(f"    {Y}[u_k++] = ({t})({fin});")
    em.line("}")


def _check_pdist(node: Node) -> None:
    """x [N, M] -> the N (N - 1) / 2 distances of its row pairs."""
    arity(node, 1)
    x = node.inputs[0]
    dtype_in(x, FLOATS, "input")
    need(len(x.shape) == 2 and type(node.attrs["p"]) is float and node.attrs["p"] >= 0, f"input {list(x.shape)} / p")
    result(node.outputs[0], (x.shape[0] * (x.shape[0] - 1) // 2,), x.dtype)


defop("pdist", _ref_pdist, _emit_pdist, rule=_check_pdist)


@lowers("aten._pdist_forward.default")
def _lower_pdist(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    p = float(a.get("p", 2.0))
    if out.dtype not in FLOATS or x.dtype != out.dtype:
        ctx.fail(f"pdist is implemented for float32 / float64 (got {x.dtype})")
    if p < 0 or math.isnan(p):
        ctx.fail("pdist with p < 0")
    if out.numel == 0 or x.shape[1] == 0:
        return empty_output(ctx, out)
    ctx.emit("pdist", [x], {"p": p}, [out])
    return out
