"""More core ATen ops: flip, diagonal, var/std, vector norms, group / instance norm,
sort / topk, gather / scatter / index_put, upsampling (nearest, bilinear), and the policy
for random ops (a clear compile-time error naming the op).

Most of these are written as compositions of existing IR ops (views, strided reads,
reductions, `ew`); the rest emit a plain generated loop (no kernel file).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value, ctype
from pt2c.ops import defop, lowers
from pt2c.ops.elementwise import _lit, make_ew
from pt2c.ops.nn import make_reduce
from pt2c.ops.shape import _norm_dim, check_const_index, check_index, contiguous_strides, make_strided, make_view


def _prod(xs: Any) -> int:
    xs = list(xs)
    return int(np.prod(xs, dtype=np.int64)) if xs else 1


# ---------------------------------------------------------------- flip, diagonal (strided reads)

@lowers("aten.flip.default")
def _lower_flip(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    r = len(x.shape)
    dims = {_norm_dim(d, r) for d in a["dims"]} if r else set()
    st = contiguous_strides(x.shape)
    strides = tuple(-s if d in dims and x.shape[d] > 1 else s for d, s in enumerate(st))
    off = sum((x.shape[d] - 1) * st[d] for d in dims)
    if x.numel == 0 or not dims:
        return x if not dims else make_view(ctx, x, out)
    return make_strided(ctx, x, out, strides, off)


@lowers("aten.diagonal.default", "aten.diagonal_copy.default")
def _lower_diagonal(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["input"] if "input" in a else a["self"], ctx.out()
    r = len(x.shape)
    d1, d2 = _norm_dim(a.get("dim1", 0), r), _norm_dim(a.get("dim2", 1), r)
    off = a.get("offset", 0)
    st = contiguous_strides(x.shape)
    strides = tuple(st[d] for d in range(r) if d not in (d1, d2)) + (st[d1] + st[d2],)
    start = off * st[d2] if off >= 0 else -off * st[d1]
    if out.numel == 0:
        start = 0
    return make_strided(ctx, x, out, strides, start)


# ---------------------------------------------------------------- var / std / vector norm (compositions)

def _dims(a: dict[str, Any], rank: int) -> list[int]:
    dims = a.get("dim")
    if isinstance(dims, int):
        dims = [dims]
    if not dims:
        return list(range(rank))
    return sorted({_norm_dim(d, rank) for d in dims})


def _keep_shape(shape: tuple[int, ...], dims: list[int]) -> tuple[int, ...]:
    return tuple(1 if d in dims else n for d, n in enumerate(shape))


def _float_only(ctx: Any, x: Value, what: str) -> None:
    if x.dtype not in ("float32", "float64"):
        ctx.fail(f"{what} is implemented for floating-point tensors (got {x.dtype})")


@lowers("aten.var.correction", "aten.var.dim", "aten.var_mean.correction")
def _lower_var(ctx: Any, a: dict[str, Any]) -> Any:
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
    n = _prod(x.shape[d] for d in dims)
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
def _lower_vector_norm(ctx: Any, a: dict[str, Any]) -> Value:
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


# ---------------------------------------------------------------- moments normalisation (group norm, instance norm)

def _ref_moments_norm(node: Node, x: np.ndarray) -> list[np.ndarray]:
    O, M, I = node.attrs["view"]
    x3 = x.reshape(O, M, I).astype(np.float64)
    mu = x3.mean(axis=(0, 2), keepdims=True)
    var = x3.var(axis=(0, 2), keepdims=True)
    rstd = 1.0 / np.sqrt(var + node.attrs["eps"])
    y = ((x3 - mu) * rstd).reshape(x.shape).astype(np.float32)
    return [y, mu.reshape(-1).astype(np.float32), rstd.reshape(-1).astype(np.float32)]


def _emit_moments_norm(em: Any, node: Node) -> None:
    O, M, I = node.attrs["view"]
    x = node.inputs[0]
    y, mean, rstd = node.outputs
    X, Y, MU, RS = em.ptr(x), em.ptr(y), em.ptr(mean), em.ptr(rstd)
    n = O * I
    em.line(f"for (size_t u_m = 0; u_m < {M}; u_m++) {{")
    em.line("    double u_s = 0.0, u_ss = 0.0;")
    em.line(f"    for (size_t u_o = 0; u_o < {O}; u_o++) for (size_t i = 0; i < {I}; i++) {{")
    em.line(f"        double u_v = (double){X}[(u_o * {M} + u_m) * {I} + i]; u_s += u_v;")
    em.line("    }")
    em.line(f"    double u_mu = u_s / {n}.0;")
    em.line(f"    for (size_t u_o = 0; u_o < {O}; u_o++) for (size_t i = 0; i < {I}; i++) {{")
    em.line(f"        double u_d = (double){X}[(u_o * {M} + u_m) * {I} + i] - u_mu; u_ss += u_d * u_d;")
    em.line("    }")
    em.line(f"    double u_r = 1.0 / sqrt(u_ss / {n}.0 + {float(node.attrs['eps'])!r});")
    em.line(f"    for (size_t u_o = 0; u_o < {O}; u_o++) for (size_t i = 0; i < {I}; i++) {{")
    em.line(f"        size_t u_at = (u_o * {M} + u_m) * {I} + i;")
    em.line(f"        {Y}[u_at] = (float)(((double){X}[u_at] - u_mu) * u_r);")
    em.line("    }")
    em.line(f"    {MU}[u_m] = (float)u_mu; {RS}[u_m] = (float)u_r;")
    em.line("}")


defop("moments_norm", _ref_moments_norm, _emit_moments_norm, flops=lambda n: 8 * n.inputs[0].numel)


def _affine(ctx: Any, y: Value, w: Value | None, b: Value | None, C: int, out: Value) -> Value:
    """out = y * w[c] + b[c] over channel dim 1 of y."""
    bshape = (C,) + (1,) * (len(y.shape) - 2)
    cur = y
    if w is not None:
        wv = ctx.view(w, bshape)
        cur = make_ew(ctx, "mul", [cur, wv], out=out if b is None else ctx.new("scaled", y.shape, "float32"))
    if b is not None:
        bv = ctx.view(b, bshape)
        cur = make_ew(ctx, "add", [cur, bv], out=out)
    if cur is y:
        make_ew(ctx, "copy", [y], compute="float32", out=out)
    return out


@lowers("aten.native_group_norm.default")
def _lower_group_norm(ctx: Any, a: dict[str, Any]) -> Any:
    x, w, b = a["input"], a.get("weight"), a.get("bias")
    if x.dtype != "float32":
        ctx.fail(f"group_norm is implemented for float32 only (got {x.dtype})")
    N, C, G = a["N"], a["C"], a["group"]
    outs = ctx.outs()
    out, mean, rstd = outs
    HW = x.numel // max(N * C, 1)
    y = ctx.new("norm", x.shape, "float32") if (w is not None or b is not None) else out
    mo = ctx.new("mean", (N * G,), "float32")
    ro = ctx.new("rstd", (N * G,), "float32")
    ctx.emit("moments_norm", [x], {"view": (1, N * G, (C // G) * HW), "eps": float(a["eps"])}, [y, mo, ro])
    if y is not out:
        _affine(ctx, y, w, b, C, out)
    ctx.view(mo, mean.shape, out=mean)
    ctx.view(ro, rstd.shape, out=rstd)
    return (out, mean, rstd)


def lower_bn_no_stats(ctx: Any, a: dict[str, Any]) -> Any:
    """batch norm that normalises with the batch's own statistics (instance norm exports this)."""
    x, w, b = a["input"], a.get("weight"), a.get("bias")
    if x.dtype != "float32":
        ctx.fail(f"batch_norm is implemented for float32 only (got {x.dtype})")
    outs = ctx.outs()
    out = outs[0]
    N, C = x.shape[0], x.shape[1]
    inner = x.numel // max(N * C, 1)
    y = ctx.new("norm", x.shape, "float32") if (w is not None or b is not None) else out
    mo = ctx.new("mean", (C,), "float32")
    ro = ctx.new("rstd", (C,), "float32")
    ctx.emit("moments_norm", [x], {"view": (N, C, inner), "eps": float(a.get("eps", 1e-5))}, [y, mo, ro])
    if y is not out:
        _affine(ctx, y, w, b, C, out)
    if len(outs) == 3:
        res = [out]
        for v, o in zip((mo, ro), outs[1:]):
            res.append(ctx.view(v, o.shape, out=o) if o is not None else None)
        return tuple(res)
    return out


# ---------------------------------------------------------------- sort / topk (selection, no scratch)

def _np_order(line: np.ndarray, descending: bool) -> np.ndarray:
    idx = np.arange(len(line))
    key = np.where(np.isnan(line), np.inf, line) if line.dtype.kind == "f" else line
    nan = np.isnan(line) if line.dtype.kind == "f" else np.zeros(len(line), bool)
    if descending:
        return np.array(sorted(idx, key=lambda j: (not nan[j], -key[j] if not nan[j] else 0, j)))
    return np.array(sorted(idx, key=lambda j: (nan[j], key[j] if not nan[j] else 0, j)))


def _ref_select_sort(node: Node, x: np.ndarray) -> list[np.ndarray]:
    dim, k, desc = node.attrs["dim"], node.attrs["k"], node.attrs["descending"]
    xm = np.moveaxis(x, dim, -1)
    flat = xm.reshape(-1, xm.shape[-1]) if xm.size else xm.reshape(0, max(xm.shape[-1], 1))
    vals = np.empty((flat.shape[0], k), x.dtype)
    inds = np.empty((flat.shape[0], k), np.int64)
    for r in range(flat.shape[0]):
        o = _np_order(flat[r], desc)[:k]
        vals[r], inds[r] = flat[r][o], o
    shp = xm.shape[:-1] + (k,)
    return [np.moveaxis(vals.reshape(shp), -1, dim), np.moveaxis(inds.reshape(shp), -1, dim)]


def _emit_select_sort(em: Any, node: Node) -> None:
    x = node.inputs[0]
    vals, inds = node.outputs
    dim, k, desc = node.attrs["dim"], node.attrs["k"], node.attrs["descending"]
    shape = x.shape or (1,)
    outer = _prod(shape[:dim])
    n = shape[dim]
    inner = _prod(shape[dim + 1:])
    X, V, I = em.ptr(x), em.ptr(vals), em.ptr(inds)
    t = ctype(x.dtype)
    isf = x.dtype in ("float32", "float64")
    # before(a, ia, b, ib): element a (index ia) comes before b in the output order
    if isf:
        nan_a, nan_b = "(u_va != u_va)", "(u_vb != u_vb)"
    else:
        nan_a = nan_b = "0"
    if desc:
        before = (f"({nan_a} ? (!{nan_b} || u_ia < u_ib) : (!{nan_b} && (u_va > u_vb || (u_va == u_vb && u_ia < u_ib))))")
    else:
        before = (f"({nan_b} ? (!{nan_a} || u_ia < u_ib) : (!{nan_a} && (u_va < u_vb || (u_va == u_vb && u_ia < u_ib))))")
    em.line(f"for (size_t u_o = 0; u_o < {outer}; u_o++) for (size_t u_in = 0; u_in < {inner}; u_in++) {{")
    em.line(f"    const {t} *u_xl = {X} + u_o * {n * inner} + u_in;")
    em.line("    size_t u_prev = 0; int u_have = 0;")
    em.line(f"    for (size_t u_r = 0; u_r < {k}; u_r++) {{")
    em.line("        size_t u_best = 0; int u_found = 0;")
    em.line(f"        for (size_t u_j = 0; u_j < {n}; u_j++) {{")
    em.line(f"            {t} u_va, u_vb; size_t u_ia, u_ib;")
    em.line("            if (u_have) {")
    em.line(f"                /* u_j must come after u_prev */ u_va = u_xl[u_prev * {inner}]; u_ia = u_prev; u_vb = u_xl[u_j * {inner}]; u_ib = u_j;")
    em.line(f"                if (!{before}) continue;")
    em.line("            }")
    em.line("            if (u_found) {")
    em.line(f"                u_va = u_xl[u_j * {inner}]; u_ia = u_j; u_vb = u_xl[u_best * {inner}]; u_ib = u_best;")
    em.line(f"                if (!{before}) continue;")
    em.line("            }")
    em.line("            u_best = u_j; u_found = 1;")
    em.line("        }")
    em.line(f"        {V}[(u_o * {k} + u_r) * {inner} + u_in] = u_xl[u_best * {inner}];")
    em.line(f"        {I}[(u_o * {k} + u_r) * {inner} + u_in] = (int64_t)u_best;")
    em.line("        u_prev = u_best; u_have = 1;")
    em.line("    }")
    em.line("}")


defop("select_sort", _ref_select_sort, _emit_select_sort)


@lowers("aten.sort.default", "aten.sort.stable", "aten.topk.default")
def _lower_sort(ctx: Any, a: dict[str, Any]) -> Any:
    x = a["self"]
    outs = ctx.outs()
    if x.dtype == "bool":
        ctx.fail("sort / topk of bool tensors")
    r = len(x.shape)
    dim = _norm_dim(a.get("dim", -1), r) if r else 0
    n = x.shape[dim] if r else 1
    if ctx.target == "aten.topk.default":
        k = a["k"]
        desc = bool(a.get("largest", True))
    else:
        k = n
        desc = bool(a.get("descending", False))
    vals, inds = outs
    if x.numel == 0 or k == 0:
        ctx.fail("sort / topk of an empty tensor")
    xin = x if r else ctx.view(x, (1,))
    vo = vals if r else ctx.new("vals", (1,), x.dtype)
    io = inds if r else ctx.new("inds", (1,), "int64")
    ctx.emit("select_sort", [xin], {"dim": dim, "k": k, "descending": desc}, [vo, io])
    if not r:
        ctx.view(vo, (), out=vals)
        ctx.view(io, (), out=inds)
    return (vals, inds)


# ---------------------------------------------------------------- gather along a dim with a runtime index

def _ref_gather_dim(node: Node, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    dim = node.attrs["dim"]
    i = check_index(idx, x.shape[dim], False, "gather")  # torch.gather raises for -1
    sl = tuple(slice(0, n) for n in idx.shape)
    return np.take_along_axis(x[tuple(s if d != dim else slice(None) for d, s in enumerate(sl))], i, axis=dim)


def _index_loops(em: Any, shape: tuple[int, ...]) -> tuple[list[str], int]:
    """Open one loop per dim of shape; returns the index names and the number opened."""
    names = [f"u_i{d}" for d in range(len(shape))]
    for d, n in enumerate(shape):
        em.line("    " * d + f"for (size_t {names[d]} = 0; {names[d]} < {n}; {names[d]}++) {{")
    return names, len(shape)


def _close(em: Any, k: int) -> None:
    for d in reversed(range(k)):
        em.line("    " * d + "}")


def _lin(names: list[str], strides: tuple[int, ...], skip: int = -1, sub: str = "") -> str:
    terms = [(sub if d == skip else names[d]) + (f" * {s}" if s != 1 else "")
             for d, s in enumerate(strides) if s != 0 and (d != skip or sub)]
    return " + ".join(terms) or "0"


def _emit_gather_dim(em: Any, node: Node) -> None:
    x, idx = node.inputs
    out = node.outputs[0]
    dim = node.attrs["dim"]
    X, I, Y = em.ptr(x), em.ptr(idx), em.ptr(out)
    em.errors.add("INDEX")
    xs, ist = contiguous_strides(x.shape), contiguous_strides(idx.shape)
    names, k = _index_loops(em, idx.shape)
    pad = "    " * k
    em.line(pad + f"int64_t u_j = (int64_t){I}[{_lin(names, ist)}];")
    em.line(pad + f"if (u_j < 0 || u_j >= {x.shape[dim]}) return PT2C_ERR_INDEX;")  # no wrap: torch raises for -1
    em.line(pad + f"{Y}[{_lin(names, ist)}] = {X}[{_lin(names, xs, dim, '(size_t)u_j')}];")
    _close(em, k)


defop("gather_dim", _ref_gather_dim, _emit_gather_dim)


@lowers("aten.gather.default")
def _lower_gather(ctx: Any, a: dict[str, Any]) -> Value:
    x, idx, out = a["self"], a["index"], ctx.out()
    if not x.shape or not idx.shape:
        ctx.fail("gather of 0-d tensors")
    if idx.numel == 0:
        ctx.fail("gather with an empty index")
    dim = _norm_dim(a["dim"], len(x.shape))
    check_const_index(ctx, idx, x.shape[dim], False, "gather")
    ctx.emit("gather_dim", [x, idx], {"dim": dim}, [out])
    return out


# ---------------------------------------------------------------- scatter / scatter_add (copy, then a loop)

def _ref_scatter(node: Node, x: np.ndarray, idx: np.ndarray, *src: np.ndarray) -> np.ndarray:
    dim, mode = node.attrs["dim"], node.attrs["reduce"]
    y = np.array(x, copy=True)
    s = src[0] if src else None
    idx = check_index(idx, x.shape[dim], False, "scatter")  # torch raises for -1
    for pos in np.ndindex(*idx.shape):
        j = int(idx[pos])
        tgt = list(pos)
        tgt[dim] = j
        v = s[pos] if s is not None else node.attrs["value"]
        if mode == "add":
            y[tuple(tgt)] += v
        else:
            y[tuple(tgt)] = v
    return y


def _emit_scatter(em: Any, node: Node) -> None:
    x, idx = node.inputs[:2]
    src = node.inputs[2] if len(node.inputs) > 2 else None
    out = node.outputs[0]
    dim, mode = node.attrs["dim"], node.attrs["reduce"]
    X, I, Y = em.ptr(x), em.ptr(idx), em.ptr(out)
    em.errors.add("INDEX")
    t = ctype(out.dtype)
    em.line(f"if ({Y} != {X}) memcpy({Y}, {X}, {x.numel} * sizeof({t}));")
    ys, ist = contiguous_strides(x.shape), contiguous_strides(idx.shape)
    names, k = _index_loops(em, idx.shape)
    pad = "    " * k
    em.line(pad + f"int64_t u_j = (int64_t){I}[{_lin(names, ist)}];")
    em.line(pad + f"if (u_j < 0 || u_j >= {x.shape[dim]}) return PT2C_ERR_INDEX;")  # no wrap: torch raises for -1
    if src is not None:
        val = f"{em.ptr(src)}[{_lin(names, contiguous_strides(src.shape))}]"
    else:
        val = _lit(out.dtype, node.attrs["value"])
    op = "+=" if mode == "add" else "="
    em.line(pad + f"{Y}[{_lin(names, ys, dim, '(size_t)u_j')}] {op} ({t})({val});")
    _close(em, k)


defop("scatter", _ref_scatter, _emit_scatter)


@lowers("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default", "aten.scatter.reduce",
        "aten.scatter.value_reduce")
def _lower_scatter(ctx: Any, a: dict[str, Any]) -> Value:
    x, idx, out = a["self"], a["index"], ctx.out()
    red = a.get("reduce")
    if red not in (None, "add"):
        ctx.fail(f"scatter with reduce={red!r}")
    mode = "add" if (ctx.target == "aten.scatter_add.default" or red == "add") else "set"
    if not x.shape or not idx.shape or idx.numel == 0:
        ctx.fail("scatter of 0-d or empty tensors")
    src = a.get("src")
    ins = [x, idx] + ([src] if isinstance(src, Value) else [])
    if mode == "set":
        # duplicate indices make the result order-dependent in PyTorch; a compile-time check is not possible
        pass
    dim = _norm_dim(a["dim"], len(x.shape))
    check_const_index(ctx, idx, x.shape[dim], False, "scatter")
    ctx.emit("scatter", ins, {"dim": dim, "reduce": mode, "value": a.get("value", 0)}, [out])
    return out


# ---------------------------------------------------------------- index_put with leading index tensors

def _ref_index_put(node: Node, x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    nidx = node.attrs["nidx"]
    idx, vals = rest[:nidx], rest[nidx]
    y = np.array(x, copy=True)
    wrap = node.attrs.get("wrap", True)
    b = np.broadcast_arrays(*[check_index(i, x.shape[q], wrap, "index_put") for q, i in enumerate(idx)])
    tgt_shape = b[0].shape + x.shape[nidx:]
    v = np.broadcast_to(vals, tgt_shape)
    for pos in np.ndindex(*b[0].shape):
        key = tuple(int(i[pos]) for i in b)
        if node.attrs["accumulate"]:
            y[key] += v[pos]
        else:
            y[key] = v[pos]
    return y


def _emit_index_put(em: Any, node: Node) -> None:
    nidx = node.attrs["nidx"]
    x = node.inputs[0]
    idx = node.inputs[1:1 + nidx]
    vals = node.inputs[1 + nidx]
    out = node.outputs[0]
    X, Y, VV = em.ptr(x), em.ptr(out), em.ptr(vals)
    t = ctype(out.dtype)
    em.errors.add("INDEX")
    em.line(f"if ({Y} != {X}) memcpy({Y}, {X}, {x.numel} * sizeof({t}));")
    bshape = node.attrs["bshape"]
    rest = x.shape[nidx:]
    inner = _prod(rest)
    names, k = _index_loops(em, bshape)
    pad = "    " * k
    xs = contiguous_strides(x.shape)
    from pt2c.codegen.emitter import broadcast_strides

    terms = []
    for q, iv in enumerate(idx):
        st = broadcast_strides(iv.shape, contiguous_strides(iv.shape), bshape)
        em.line(pad + f"int64_t u_j{q} = (int64_t){em.ptr(iv)}[{_lin(names, st)}];")
        if node.attrs.get("wrap", True):  # x[i] = v counts -1 from the end; index_add / index_copy raise
            em.line(pad + f"if (u_j{q} < 0) u_j{q} += {x.shape[q]};")
        em.line(pad + f"if (u_j{q} < 0 || u_j{q} >= {x.shape[q]}) return PT2C_ERR_INDEX;")
        terms.append(f"(size_t)u_j{q} * {xs[q]}")
    full = tuple(bshape) + tuple(rest)
    vst = broadcast_strides(vals.shape, contiguous_strides(vals.shape), full)
    vlin = _lin(names, vst[:len(bshape)])
    em.line(pad + f"size_t u_base = {' + '.join(terms)};")
    em.line(pad + f"for (size_t u_r = 0; u_r < {inner}; u_r++) {{")
    rest_st = contiguous_strides(tuple(rest))
    # values index for the trailing dims: unravel r against `rest` with vals' broadcast strides
    vr = []
    for d, n in enumerate(rest):
        s = vst[len(bshape) + d]
        if s and n > 1:
            vr.append(f"((u_r / {rest_st[d]}) % {n}) * {s}")
    vidx = " + ".join([vlin] + vr) if vr else vlin
    op = "+=" if node.attrs["accumulate"] else "="
    em.line(pad + f"    {Y}[u_base + u_r] {op} ({t}){VV}[{vidx}];")
    em.line(pad + "}")
    _close(em, k)


defop("index_put", _ref_index_put, _emit_index_put)


@lowers("aten.index_put.default", "aten._unsafe_index_put.default")
def _lower_index_put(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    idx = list(a["indices"])
    vals = a["values"]
    if not idx or any(t is None for t in idx) or any(t.dtype == "bool" for t in idx):
        ctx.fail("index_put is supported with leading integer index tensors (no None / bool masks)")
    if not isinstance(vals, Value):
        ctx.fail("index_put with non-tensor values")
    import torch

    bshape = tuple(torch.broadcast_shapes(*[tuple(t.shape) for t in idx]))
    if _prod(bshape) == 0:
        ctx.fail("index_put with an empty index")
    # index_put / x[i] = v / index_fill wrap -1 like torch; index_add and index_copy, which the
    # default decompositions turn into index_put, raise in torch: their nodes remember the op
    orig = str(ctx.node.meta.get("original_aten", ""))
    what = orig.split(".")[1] if orig.startswith(("aten.index_add", "aten.index_copy")) else "index_put"
    wrap = what == "index_put"
    for q, t in enumerate(idx):
        check_const_index(ctx, t, x.shape[q], wrap, what)
    if vals.dtype != x.dtype:
        vals = make_ew(ctx, "copy", [vals], compute=x.dtype, out=ctx.new("vals", vals.shape, x.dtype))
    ctx.emit("index_put", [x, *idx, vals], {"nidx": len(idx), "bshape": bshape, "wrap": wrap,
                                             "accumulate": bool(a.get("accumulate", False))}, [out])
    return out


# ---------------------------------------------------------------- upsampling (index / weight tables from torch itself)

def _ref_upsample(node: Node, x: np.ndarray, *tabs: np.ndarray) -> np.ndarray:
    P = _prod(x.shape[:-2])
    H, W = x.shape[-2:]
    OH, OW = node.outputs[0].shape[-2:]
    x3 = x.reshape(P, H, W).astype(np.float64)
    if node.attrs["mode"] == "nearest":
        hi, wi = tabs
        y = x3[:, hi][:, :, wi]
    else:
        h0, h1, hl0, hl1, w0, w1, wl0, wl1 = tabs
        def rows(r: np.ndarray) -> np.ndarray:
            return r[:, :, w0] * wl0 + r[:, :, w1] * wl1
        y = hl0[None, :, None] * rows(x3[:, h0]) + hl1[None, :, None] * rows(x3[:, h1])
    return y.reshape(node.outputs[0].shape).astype(np.float32)


def _emit_upsample(em: Any, node: Node) -> None:
    x = node.inputs[0]
    out = node.outputs[0]
    P = _prod(x.shape[:-2])
    H, W = x.shape[-2:]
    OH, OW = out.shape[-2:]
    X, Y = em.ptr(x), em.ptr(out)
    T = [em.ptr(v) for v in node.inputs[1:]]
    em.line(f"for (size_t u_p = 0; u_p < {P}; u_p++) for (size_t u_oh = 0; u_oh < {OH}; u_oh++) for (size_t u_ow = 0; u_ow < {OW}; u_ow++) {{")
    em.line(f"    const float *u_xp = {X} + u_p * {H * W};")
    if node.attrs["mode"] == "nearest":
        em.line(f"    {Y}[(u_p * {OH} + u_oh) * {OW} + u_ow] = u_xp[{T[0]}[u_oh] * {W} + {T[1]}[u_ow]];")
    else:
        h0, h1, hl0, hl1, w0, w1, wl0, wl1 = T
        em.line(f"    const float *u_r0 = u_xp + {h0}[u_oh] * {W}, *u_r1 = u_xp + {h1}[u_oh] * {W};")
        em.line(f"    {Y}[(u_p * {OH} + u_oh) * {OW} + u_ow] = {hl0}[u_oh] * ({wl0}[u_ow] * u_r0[{w0}[u_ow]] + {wl1}[u_ow] * u_r0[{w1}[u_ow]])"
                f" + {hl1}[u_oh] * ({wl0}[u_ow] * u_r1[{w0}[u_ow]] + {wl1}[u_ow] * u_r1[{w1}[u_ow]]);")
    em.line("}")


defop("upsample2d", _ref_upsample, _emit_upsample)


def _interp_matrix(mode: str, n: int, on: int, align: Any, scale: Any) -> np.ndarray:
    """[on, n] interpolation matrix along one axis, computed by torch's own kernel on one-hot inputs."""
    import torch

    eye = torch.eye(n, dtype=torch.float64).reshape(1, n, n, 1)  # channels = one-hot rows
    if mode == "nearest":
        y = torch.ops.aten.upsample_nearest2d.default(eye, [on, 1], scale, None)
    else:
        y = torch.ops.aten.upsample_bilinear2d.default(eye, [on, 1], bool(align), scale, None)
    return y[0, :, :, 0].T.numpy()  # [on, n]


def _taps(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    on = m.shape[0]
    i0 = np.zeros(on, np.int32)
    i1 = np.zeros(on, np.int32)
    l0 = np.zeros(on, np.float32)
    l1 = np.zeros(on, np.float32)
    for r in range(on):
        nz = np.nonzero(m[r])[0]
        if len(nz) == 0:
            continue
        if len(nz) > 2:
            raise ValueError("more than two taps")
        i0[r], i1[r] = nz[0], nz[-1]
        l0[r] = m[r, nz[0]]
        l1[r] = m[r, nz[-1]] if len(nz) == 2 else 0.0
    return i0, i1, l0, l1


@lowers("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default",
        "aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default",
        "aten.upsample_nearest1d.vec", "aten.upsample_nearest1d.default",
        "aten.upsample_linear1d.vec", "aten.upsample_linear1d.default")
def _lower_upsample(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["input"] if "input" in a else a["self"], ctx.out()
    if x.dtype != "float32":
        ctx.fail(f"upsampling is implemented for float32 only (got {x.dtype})")
    one_d = "1d" in ctx.target
    mode = "nearest" if "nearest" in ctx.target else "bilinear"
    align = a.get("align_corners", False)
    if ctx.target.endswith(".vec"):
        sf = a.get("scale_factors")
        sf = list(sf) if sf else None
        sh = sw = None
        if sf:
            sh, sw = (None, sf[0]) if one_d else (sf[0], sf[1])
    else:
        if one_d:
            sh, sw = None, a.get("scales")
        else:
            sh, sw = a.get("scales_h"), a.get("scales_w")
    if one_d:
        H, W = 1, x.shape[-1]
        OH, OW = 1, out.shape[-1]
    else:
        H, W = x.shape[-2:]
        OH, OW = out.shape[-2:]
    tabs: list[Value] = []
    try:
        mh = _interp_matrix(mode, H, OH, align, sh)
        mw = _interp_matrix(mode, W, OW, align, sw)
    except Exception as e:  # noqa: BLE001
        ctx.fail(f"cannot compute interpolation tables: {e}")
    if mode == "nearest":
        for m, nm in ((mh, "h"), (mw, "w")):
            tabs.append(ctx.const(m.argmax(1).astype(np.int32), f"{out.name}_{nm}idx"))
    else:
        for m, nm in ((mh, "h"), (mw, "w")):
            i0, i1, l0, l1 = _taps(m)
            tabs += [ctx.const(i0, f"{out.name}_{nm}0"), ctx.const(i1, f"{out.name}_{nm}1"),
                     ctx.const(l0, f"{out.name}_{nm}l0"), ctx.const(l1, f"{out.name}_{nm}l1")]
    x4 = ctx.view(x, (*x.shape[:-1][:len(x.shape) - 1], 1, x.shape[-1])) if one_d else x
    y = ctx.new("up", (*out.shape[:-1], 1, out.shape[-1]), "float32") if one_d else out
    ctx.emit("upsample2d", [x4, *tabs], {"mode": mode}, [y])
    return ctx.view(y, out.shape, out=out) if one_d else out


# ---------------------------------------------------------------- random ops: a documented compile-time error

RANDOM_OPS = ("aten.rand.default", "aten.rand_like.default", "aten.randn.default", "aten.randn_like.default",
              "aten.randint.default", "aten.randint.low", "aten.randint_like.default", "aten.randint_like.low_dtype",
              "aten.randperm.default", "aten.bernoulli.default", "aten.bernoulli.p", "aten.normal.Tensor_Tensor",
              "aten.normal.float_Tensor", "aten.normal.Tensor_float", "aten.normal.float_float",
              "aten.uniform.default", "aten.multinomial.default", "aten.native_dropout.default",
              "aten.exponential.default", "aten.poisson.default")


@lowers(*RANDOM_OPS)
def _lower_random(ctx: Any, a: dict[str, Any]) -> Any:
    if ctx.target == "aten.native_dropout.default" and not a.get("train", True):
        x = a["input"]
        outs = ctx.outs()
        mask = outs[1]
        if mask is not None:
            mask.data = np.ones(mask.shape, bool)
        return (x, mask)
    ctx.fail(f"random op {ctx.target}: pt2c compiles deterministic inference programs and has no RNG "
             "(dropout: call model.eval() before torch.export; noise: pass it in as an input)")


# ---------------------------------------------------------------- transposed convolution (direct scatter loop)

def _ref_conv_t(node: Node, x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    import torch

    at = node.attrs
    y = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(np.array(x, np.float64)), torch.from_numpy(np.array(w, np.float64)),
        torch.from_numpy(np.array(bias[0], np.float64)) if bias else None, at["stride"], at["padding"],
        at["output_padding"], at["groups"], at["dilation"])
    return y.numpy().astype(np.float32)


def _emit_conv_t(em: Any, node: Node) -> None:
    at = node.attrs
    x, w = node.inputs[:2]
    out = node.outputs[0]
    N, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    G = at["groups"]
    Cg, OCg = C // G, OC // G
    KH, KW = w.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    X, Wt, Y = em.ptr(x), em.ptr(w), em.ptr(out)
    B = em.ptr(node.inputs[2]) if len(node.inputs) > 2 else None
    em.line(f"for (size_t u_n = 0; u_n < {N}; u_n++) for (size_t u_oc = 0; u_oc < {OC}; u_oc++) {{")
    em.line(f"    float *u_y = {Y} + (u_n * {OC} + u_oc) * {OH * OW};")
    em.line(f"    size_t u_g = u_oc / {OCg}, u_ocg = u_oc % {OCg};")
    em.line(f"    for (size_t u_p = 0; u_p < {OH * OW}; u_p++) u_y[u_p] = {B + '[u_oc]' if B else '0.0f'};")
    em.line(f"    for (size_t u_icg = 0; u_icg < {Cg}; u_icg++) {{")
    em.line(f"        size_t u_ic = u_g * {Cg} + u_icg;")
    em.line(f"        const float *u_x = {X} + (u_n * {C} + u_ic) * {H * W};")
    em.line(f"        const float *u_w = {Wt} + (u_ic * {OCg} + u_ocg) * {KH * KW};")
    em.line(f"        for (long u_ih = 0; u_ih < {H}; u_ih++) for (long u_kh = 0; u_kh < {KH}; u_kh++) {{")
    em.line(f"            long u_oh = u_ih * {sh} - {ph} + u_kh * {dh};")
    em.line(f"            if (u_oh < 0 || u_oh >= {OH}) continue;")
    em.line(f"            for (long u_iw = 0; u_iw < {W}; u_iw++) for (long u_kw = 0; u_kw < {KW}; u_kw++) {{")
    em.line(f"                long u_ow = u_iw * {sw} - {pw} + u_kw * {dw};")
    em.line(f"                if (u_ow < 0 || u_ow >= {OW}) continue;")
    em.line(f"                u_y[u_oh * {OW} + u_ow] += u_x[u_ih * {W} + u_iw] * u_w[u_kh * {KW} + u_kw];")
    em.line("            }")
    em.line("        }")
    em.line("    }")
    em.line("}")


defop("conv_transpose2d", _ref_conv_t, _emit_conv_t,
      flops=lambda n: 2 * n.inputs[0].numel * int(np.prod(n.inputs[1].shape[1:])))


def lower_conv_transpose(ctx: Any, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if x.dtype != "float32" or w.dtype != "float32":
        ctx.fail(f"transposed convolution is implemented for float32 only (got {x.dtype})")
    nd = len(w.shape) - 2
    if nd == 3:
        from pt2c.ops.more import lower_conv_nd

        return lower_conv_nd(ctx, a)
    if nd not in (1, 2):
        ctx.fail(f"only 1-d, 2-d and 3-d transposed convolutions are supported (got {nd}-d)")
    stride, padding, dilation = list(a["stride"]), list(a["padding"]), list(a["dilation"])
    opad = list(a.get("output_padding") or [0])
    stride, padding, dilation, opad = [(v * nd)[:nd] if len(v) == 1 else v for v in (stride, padding, dilation, opad)]
    xs = x
    if len(x.shape) == nd + 1:
        xs = ctx.view(xs, (1, *x.shape))
    ws = w
    if nd == 1:
        xs = ctx.view(xs, (xs.shape[0], xs.shape[1], 1, xs.shape[2]))
        ws = ctx.view(w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        stride, padding, dilation, opad = [1, stride[0]], [0, padding[0]], [1, dilation[0]], [0, opad[0]]
    oshape = (xs.shape[0], out.shape[-3] if nd == 2 else out.shape[-2], *(out.shape[-2:] if nd == 2 else (1, out.shape[-1])))
    y = out if oshape == out.shape else ctx.new("convt", oshape, "float32")
    ins = [xs, ws] + ([bias] if bias is not None else [])
    ctx.emit("conv_transpose2d", ins, {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
                                       "output_padding": tuple(opad), "groups": int(a.get("groups", 1))}, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)


# ---------------------------------------------------------------- advanced indexing with several runtime index tensors

def _ref_index_multi(node: Node, x: np.ndarray, *idx: np.ndarray) -> np.ndarray:
    pre = node.attrs["pre"]  # x[..., i0, i1] wraps -1 like torch (numpy does too; checked for the message)
    key = (slice(None),) * pre + tuple(check_index(i, x.shape[pre + q], True, "index") for q, i in enumerate(idx))
    return np.asarray(x[key]).reshape(node.outputs[0].shape)


def _emit_index_multi(em: Any, node: Node) -> None:
    x, idx = node.inputs[0], node.inputs[1:]
    out = node.outputs[0]
    pre, bshape = node.attrs["pre"], node.attrs["bshape"]
    nidx = len(idx)
    X, Y = em.ptr(x), em.ptr(out)
    t = ctype(out.dtype)
    em.errors.add("INDEX")
    xs = contiguous_strides(x.shape)
    lead = x.shape[:pre]
    rest = x.shape[pre + nidx:]
    inner = _prod(rest)
    loop_shape = tuple(lead) + tuple(bshape)
    names, k = _index_loops(em, loop_shape)
    pad = "    " * k
    from pt2c.codegen.emitter import broadcast_strides

    terms = [f"{names[d]} * {xs[d]}" for d in range(pre)]
    for q, iv in enumerate(idx):
        st = broadcast_strides(iv.shape, contiguous_strides(iv.shape), tuple(bshape))
        em.line(pad + f"int64_t u_j{q} = (int64_t){em.ptr(iv)}[{_lin(names[pre:], st)}];")
        n = x.shape[pre + q]
        em.line(pad + f"if (u_j{q} < 0) u_j{q} += {n};")
        em.line(pad + f"if (u_j{q} < 0 || u_j{q} >= {n}) return PT2C_ERR_INDEX;")
        terms.append(f"(size_t)u_j{q} * {xs[pre + q]}")
    ost = contiguous_strides(loop_shape)
    em.line(pad + f"memcpy({Y} + ({_lin(names, ost)}) * {inner}, {X} + {' + '.join(terms)}, {inner} * sizeof({t}));")
    _close(em, k)


defop("index_multi", _ref_index_multi, _emit_index_multi)


def lower_index_multi(ctx: Any, x: Value, idx: list[Any], out: Value) -> Value:
    """x[:, ..., i0, i1, ...] with adjacent runtime integer index tensors (PyTorch's advanced indexing)."""
    import torch

    used = [i for i, t in enumerate(idx) if t is not None]
    pre = used[0]
    if used != list(range(pre, pre + len(used))) or any(idx[i].dtype == "bool" for i in used):
        ctx.fail("aten.index.Tensor is supported with adjacent integer index tensors (no bool masks)")
    tens = [idx[i] for i in used]
    bshape = tuple(torch.broadcast_shapes(*[tuple(t.shape) for t in tens]))
    if _prod(bshape) == 0 or x.numel == 0:
        ctx.fail("aten.index.Tensor with an empty index")
    ctx.emit("index_multi", [x, *tens], {"pre": pre, "bshape": bshape}, [out])
    return out


# ---------------------------------------------------------------- max pooling that also returns the argmax indices

def _ref_maxpool_idx(node: Node, x: np.ndarray) -> list[np.ndarray]:
    import torch

    at = node.attrs
    y, i = torch.ops.aten.max_pool2d_with_indices.default(torch.from_numpy(np.array(x)), list(at["kernel"]),
                                                          list(at["stride"]), list(at["padding"]),
                                                          list(at["dilation"]), bool(at["ceil_mode"]))
    return [y.numpy(), i.numpy()]


def _emit_maxpool_idx(em: Any, node: Node) -> None:
    at = node.attrs
    x = node.inputs[0]
    y, ind = node.outputs
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    (KH, KW), (sh, sw), (ph, pw), (dh, dw) = at["kernel"], at["stride"], at["padding"], at["dilation"]
    X, Y, I = em.ptr(x), em.ptr(y), em.ptr(ind)
    em.line(f"for (size_t u_p = 0; u_p < {N * C}; u_p++) for (long u_oh = 0; u_oh < {OH}; u_oh++) "
            f"for (long u_ow = 0; u_ow < {OW}; u_ow++) {{")
    em.line(f"    const float *u_xp = {X} + u_p * {H * W};")
    em.line("    float u_best = -INFINITY; long u_bi = -1;")
    em.line(f"    for (long u_kh = 0; u_kh < {KH}; u_kh++) for (long u_kw = 0; u_kw < {KW}; u_kw++) {{")
    em.line(f"        long u_h = u_oh * {sh} - {ph} + u_kh * {dh}, u_w = u_ow * {sw} - {pw} + u_kw * {dw};")
    em.line(f"        if (u_h < 0 || u_h >= {H} || u_w < 0 || u_w >= {W}) continue;")
    em.line(f"        float u_v = u_xp[u_h * {W} + u_w];")
    em.line(f"        if (u_bi < 0 || u_v > u_best || u_v != u_v) {{ u_best = u_v; u_bi = u_h * {W} + u_w; }}")
    em.line("        if (u_best != u_best) break;")
    em.line("    }")
    em.line(f"    {Y}[(u_p * {OH} + (size_t)u_oh) * {OW} + (size_t)u_ow] = u_best;")
    em.line(f"    {I}[(u_p * {OH} + (size_t)u_oh) * {OW} + (size_t)u_ow] = (int64_t)u_bi;")
    em.line("}")


defop("maxpool2d_idx", _ref_maxpool_idx, _emit_maxpool_idx)


def output_used(ctx: Any, i: int) -> bool:
    """Whether output i of a multi-output FX node is read by anything."""
    import operator

    return any(u.target is operator.getitem and u.args[1] == i and len(u.users) > 0 for u in ctx.node.users)


# ---------------------------------------------------------------- convolution with runtime weights (direct loop)

def _ref_conv_direct(node: Node, x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    from pt2c.ops.linalg import conv2d_ref

    at = node.attrs
    y = conv2d_ref(x, w, at["stride"], at["padding"], at["dilation"], at["groups"])
    if bias:
        y = y + bias[0].reshape(1, -1, 1, 1)
    return y.astype(np.float32)


def _emit_conv_direct(em: Any, node: Node) -> None:
    at = node.attrs
    x, w = node.inputs[:2]
    out = node.outputs[0]
    N, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    G = at["groups"]
    Cg, OCg = C // G, OC // G
    KH, KW = w.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    X, Wt, Y = em.ptr(x), em.ptr(w), em.ptr(out)
    B = em.ptr(node.inputs[2]) if len(node.inputs) > 2 else None
    em.line(f"for (size_t u_n = 0; u_n < {N}; u_n++) for (size_t u_oc = 0; u_oc < {OC}; u_oc++) "
            f"for (long u_oh = 0; u_oh < {OH}; u_oh++) for (long u_ow = 0; u_ow < {OW}; u_ow++) {{")
    em.line(f"    double u_acc = {('(double)' + B + '[u_oc]') if B else '0.0'};")
    em.line(f"    size_t u_g = u_oc / {OCg};")
    em.line(f"    for (size_t u_icg = 0; u_icg < {Cg}; u_icg++) for (long u_kh = 0; u_kh < {KH}; u_kh++) {{")
    em.line(f"        long u_h = u_oh * {sh} - {ph} + u_kh * {dh};")
    em.line(f"        if (u_h < 0 || u_h >= {H}) continue;")
    em.line(f"        for (long u_kw = 0; u_kw < {KW}; u_kw++) {{")
    em.line(f"            long u_w = u_ow * {sw} - {pw} + u_kw * {dw};")
    em.line(f"            if (u_w < 0 || u_w >= {W}) continue;")
    em.line(f"            u_acc += (double){X}[((u_n * {C} + u_g * {Cg} + u_icg) * {H} + (size_t)u_h) * {W} + (size_t)u_w]"
            f" * (double){Wt}[((u_oc * {Cg} + u_icg) * {KH} + (size_t)u_kh) * {KW} + (size_t)u_kw];")
    em.line("        }")
    em.line("    }")
    em.line(f"    {Y}[((u_n * {OC} + u_oc) * {OH} + (size_t)u_oh) * {OW} + (size_t)u_ow] = (float)u_acc;")
    em.line("}")


defop("conv_direct", _ref_conv_direct, _emit_conv_direct,
      flops=lambda n: 2 * n.outputs[0].numel * int(np.prod(n.inputs[1].shape[1:])))


def lower_conv_direct(ctx: Any, a: dict[str, Any]) -> Value:
    """A convolution whose weights are computed at run time (no pre-packing): a direct loop."""
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if x.dtype != "float32" or w.dtype != "float32":
        ctx.fail(f"convolution is implemented for float32 only (got {x.dtype})")
    nd = len(w.shape) - 2
    if nd == 3:
        from pt2c.ops.more import lower_conv_nd

        return lower_conv_nd(ctx, a)
    if nd not in (1, 2):
        ctx.fail(f"only 1-d, 2-d and 3-d convolutions are supported (got {nd}-d)")
    stride, padding, dilation = list(a["stride"]), list(a["padding"]), list(a["dilation"])
    stride, padding, dilation = [(v * nd)[:nd] if len(v) == 1 else v for v in (stride, padding, dilation)]
    xs = ctx.view(x, (1, *x.shape)) if len(x.shape) == nd + 1 else x
    ws = w
    if nd == 1:
        xs = ctx.view(xs, (xs.shape[0], xs.shape[1], 1, xs.shape[2]))
        ws = ctx.view(w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        stride, padding, dilation = [1, stride[0]], [0, padding[0]], [1, dilation[0]]
    OH = (xs.shape[2] + 2 * padding[0] - dilation[0] * (ws.shape[2] - 1) - 1) // stride[0] + 1
    OW = (xs.shape[3] + 2 * padding[1] - dilation[1] * (ws.shape[3] - 1) - 1) // stride[1] + 1
    oshape = (xs.shape[0], ws.shape[0], OH, OW)
    y = out if oshape == out.shape else ctx.new("conv", oshape, "float32")
    ctx.emit("conv_direct", [xs, ws] + ([bias] if bias is not None else []),
             {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
              "groups": int(a.get("groups", 1))}, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)
