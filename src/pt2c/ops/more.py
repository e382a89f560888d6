"""Still more core ATen ops, as generated loops (no kernel file unless noted): slice_scatter /
select_scatter, as_strided, scatter_reduce, masked_scatter, cdist / pdist, 3-d convolution
(direct and transposed) and 3-d pooling, max-pool backward, grid_sampler_2d (kernel `grid.c`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pt2c.ir import Node, Value, ctype, np_dtype
from pt2c.ops import UNSUPPORTED, defop, lowers
from pt2c.ops.elementwise import _lit, make_ew
from pt2c.ops.extra import _close, _index_loops, _lin, _prod
from pt2c.ops.shape import _as_strided, _norm_dim, check_const_index, check_index, contiguous_strides, make_strided, slice_view

FLOATS = ("float32", "float64")


def _cast_to(ctx: Any, v: Value, dtype: str, hint: str) -> Value:
    if v.dtype == dtype:
        return v
    return make_ew(ctx, "copy", [v], compute=dtype, out=ctx.new(hint, v.shape, dtype))


# ---------------------------------------------------------------- strided write: slice_scatter, select_scatter

def _ref_strided_scatter(node: Node, x: np.ndarray, src: np.ndarray) -> np.ndarray:
    y = np.array(x, copy=True).reshape(-1)
    pos = _as_strided(np.arange(x.size, dtype=np.int64), src.shape, node.attrs["strides"], node.attrs["offset"])
    y[pos.reshape(-1)] = np.asarray(src).reshape(-1)
    return y.reshape(x.shape)


def _emit_strided_scatter(em: Any, node: Node) -> None:
    x, src = node.inputs
    out = node.outputs[0]
    X, S, Y = em.ptr(x), em.ptr(src), em.ptr(out)
    t = ctype(out.dtype)
    em.line(f"memcpy({Y}, {X}, {x.numel} * sizeof({t}));")
    names, k = _index_loops(em, src.shape)
    pad = "    " * k
    dst = _lin(names, node.attrs["strides"])
    off = node.attrs["offset"]
    em.line(pad + f"{Y}[{off} + {dst}] = {S}[{_lin(names, contiguous_strides(src.shape))}];")
    _close(em, k)


defop("strided_scatter", _ref_strided_scatter, _emit_strided_scatter)


def _strided_scatter(ctx: Any, x: Value, src: Value, strides: tuple[int, ...], offset: int) -> Value:
    out = ctx.out()
    if src.numel == 0 or x.numel == 0:
        return x
    src = _cast_to(ctx, src, out.dtype, "src")
    ctx.emit("strided_scatter", [x, src], {"strides": tuple(strides), "offset": int(offset)}, [out])
    return out


@lowers("aten.slice_scatter.default")
def _lower_slice_scatter(ctx: Any, a: dict[str, Any]) -> Value:
    x, src = a["self"], a["src"]
    strides, offset = slice_view(x, a)
    return _strided_scatter(ctx, x, src, strides, offset)


@lowers("aten.select_scatter.default")
def _lower_select_scatter(ctx: Any, a: dict[str, Any]) -> Value:
    x, src = a["self"], a["src"]
    r = len(x.shape)
    dim = _norm_dim(a["dim"], r)
    idx = a["index"]
    idx = idx + x.shape[dim] if idx < 0 else idx
    st = contiguous_strides(x.shape)
    strides = tuple(s for d, s in enumerate(st) if d != dim)
    return _strided_scatter(ctx, x, src, strides, idx * st[dim])


# ---------------------------------------------------------------- as_strided (a strided read of a dense input)

@lowers("aten.as_strided.default", "aten.as_strided_copy.default")
def _lower_as_strided(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    size, stride = list(a["size"]), list(a["stride"])
    offset = a.get("storage_offset")
    src = ctx.node.args[0].meta.get("val")
    if offset is None:
        offset = int(src.storage_offset()) if src is not None else 0
    # pt2c values are dense row-major: the result matches PyTorch when the input's storage is exactly that
    if src is not None and (not src.is_contiguous() or int(src.storage_offset()) != 0
                            or src.untyped_storage().nbytes() != src.numel() * src.element_size()):
        ctx.fail("as_strided of a tensor that is not a dense, contiguous tensor owning its storage")
    if any(s < 0 for s in stride) or offset < 0:
        ctx.fail("as_strided with negative strides or storage offset")
    if out.numel == 0:
        return make_strided(ctx, x, out, tuple(stride), 0)
    reach = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if reach >= x.numel:
        ctx.fail(f"as_strided reads element {reach} of a {x.numel}-element storage")
    return make_strided(ctx, x, out, tuple(stride), int(offset))


# ---------------------------------------------------------------- scatter_reduce (sum, prod, mean, amax, amin)

def _reduce_init(red: str, dtype: str) -> Any:
    if red in ("sum", "mean"):
        return 0
    if red == "prod":
        return 1
    if dtype in FLOATS:
        return -math.inf if red == "amax" else math.inf
    if dtype == "bool":
        return red == "amin"
    info = np.iinfo(np_dtype(dtype))
    return int(info.min) if red == "amax" else int(info.max)


def _ref_scatter_reduce(node: Node, x: np.ndarray, idx: np.ndarray, src: np.ndarray) -> list[np.ndarray]:
    dim, red, incl = node.attrs["dim"], node.attrs["reduce"], node.attrs["include_self"]
    y = np.array(x, copy=True)
    cnt = np.ones(x.shape, np.int64) if incl else np.zeros(x.shape, np.int64)
    tg = []
    idx = check_index(idx, x.shape[dim], False, "scatter_reduce")  # torch raises for -1
    for pos in np.ndindex(*idx.shape):
        j = int(idx[pos])
        t = list(pos)
        t[dim] = j
        tg.append((tuple(t), pos))
    if not incl:
        for t, _ in tg:
            y[t] = _reduce_init(red, node.outputs[0].dtype)
    for t, pos in tg:
        v = src[pos]
        if red in ("sum", "mean"):
            y[t] = y[t] + v
        elif red == "prod":
            y[t] = y[t] * v
        elif red == "amax":
            y[t] = v if (v != v or v > y[t]) else y[t]
        else:
            y[t] = v if (v != v or v < y[t]) else y[t]
        cnt[t] += 1
    if red == "mean":
        c = np.maximum(cnt, 1)
        y = (y / c).astype(y.dtype) if y.dtype.kind == "f" else np.floor_divide(y, c).astype(y.dtype)
        return [y, cnt]
    return [y]


def _emit_scatter_reduce(em: Any, node: Node) -> None:
    x, idx, src = node.inputs
    out = node.outputs[0]
    dim, red, incl = node.attrs["dim"], node.attrs["reduce"], node.attrs["include_self"]
    X, I, S, Y = em.ptr(x), em.ptr(idx), em.ptr(src), em.ptr(out)
    t = ctype(out.dtype)
    em.errors.add("INDEX")
    em.line(f"memcpy({Y}, {X}, {x.numel} * sizeof({t}));")
    ys, ist, sst = contiguous_strides(x.shape), contiguous_strides(idx.shape), contiguous_strides(src.shape)
    n = x.shape[dim]
    C = None
    if red == "mean":
        C = em.ptr(node.outputs[1])
        em.line(f"for (size_t u_c = 0; u_c < {x.numel}; u_c++) {C}[u_c] = {1 if incl else 0};")

    def target(pad: str, names: list[str]) -> str:
        em.line(pad + f"int64_t u_j = (int64_t){I}[{_lin(names, ist)}];")
        em.line(pad + f"if (u_j < 0 || u_j >= {n}) return PT2C_ERR_INDEX;")  # no wrap: torch raises for -1
        return _lin(names, ys, dim, "(size_t)u_j")

    if not incl:
        names, k = _index_loops(em, idx.shape)
        at = target("    " * k, names)
        em.line("    " * k + f"{Y}[{at}] = {_lit(out.dtype, _reduce_init(red, out.dtype))};")
        _close(em, k)
    names, k = _index_loops(em, idx.shape)
    pad = "    " * k
    at = target(pad, names)
    em.line(pad + f"{t} u_v = {S}[{_lin(names, sst)}];")
    step = {"sum": f"{Y}[{at}] += u_v;", "mean": f"{Y}[{at}] += u_v; {C}[{at}] += 1;",
            "prod": f"{Y}[{at}] *= u_v;",
            "amax": f"if (u_v != u_v || u_v > {Y}[{at}]) {Y}[{at}] = u_v;",
            "amin": f"if (u_v != u_v || u_v < {Y}[{at}]) {Y}[{at}] = u_v;"}[red]
    em.line(pad + step)
    _close(em, k)
    if red == "mean":
        em.line(f"for (size_t u_c = 0; u_c < {x.numel}; u_c++) {{")
        em.line(f"    int64_t u_d = {C}[u_c] == 0 ? 1 : {C}[u_c];")
        if out.dtype in FLOATS:
            em.line(f"    {Y}[u_c] = ({t})({Y}[u_c] / ({t})u_d);")
        else:
            em.line(f"    int64_t u_q = (int64_t){Y}[u_c] / u_d, u_r = (int64_t){Y}[u_c] % u_d;")
            em.line(f"    {Y}[u_c] = ({t})((u_r != 0 && ((u_r < 0) != (u_d < 0))) ? u_q - 1 : u_q);")
        em.line("}")


defop("scatter_reduce", _ref_scatter_reduce, _emit_scatter_reduce)


@lowers("aten.scatter_reduce.two")
def _lower_scatter_reduce(ctx: Any, a: dict[str, Any]) -> Value:
    x, idx, src, out = a["self"], a["index"], a["src"], ctx.out()
    red = a["reduce"]
    if red not in ("sum", "prod", "mean", "amax", "amin"):
        ctx.fail(f"scatter_reduce with reduce={red!r}")
    if out.dtype == "bool":
        ctx.fail("scatter_reduce of bool tensors")
    if idx.numel == 0 or x.numel == 0:
        return x
    if not x.shape:
        x1 = ctx.view(x, (1,))
        i1 = ctx.view(idx, (1,)) if not idx.shape else idx
        s1 = ctx.view(src, (1,)) if not src.shape else src
        y = ctx.new("sr", (1,), out.dtype)
        _scatter_reduce_node(ctx, x1, i1, s1, 0, red, bool(a.get("include_self", True)), y)
        return ctx.view(y, (), out=out)
    dim = _norm_dim(a["dim"], len(x.shape))
    _scatter_reduce_node(ctx, x, idx, src, dim, red, bool(a.get("include_self", True)), out)
    return out


def _scatter_reduce_node(ctx: Any, x: Value, idx: Value, src: Value, dim: int, red: str, incl: bool, out: Value) -> None:
    check_const_index(ctx, idx, x.shape[dim], False, "scatter_reduce")
    src = _cast_to(ctx, src, out.dtype, "src")
    outs = [out] + ([ctx.new("count", x.shape, "int64")] if red == "mean" else [])
    ctx.emit("scatter_reduce", [x, idx, src], {"dim": dim, "reduce": red, "include_self": incl}, outs)


# ---------------------------------------------------------------- masked_scatter

def _ref_masked_scatter(node: Node, x: np.ndarray, mask: np.ndarray, src: np.ndarray) -> np.ndarray:
    shape = node.outputs[0].shape
    y = np.array(np.broadcast_to(x, shape), copy=True).reshape(-1)
    m = np.broadcast_to(mask, shape).reshape(-1).astype(bool)
    k = int(m.sum())
    y[m] = np.asarray(src).reshape(-1)[:k]
    return y.reshape(shape)


def _emit_masked_scatter(em: Any, node: Node) -> None:
    from pt2c.codegen.emitter import broadcast_strides

    x, mask, src = node.inputs
    out = node.outputs[0]
    X, M, S, Y = em.ptr(x), em.ptr(mask), em.ptr(src), em.ptr(out)
    em.errors.add("INDEX")
    shape = out.shape
    xs = broadcast_strides(x.shape, contiguous_strides(x.shape), shape)
    ms = broadcast_strides(mask.shape, contiguous_strides(mask.shape), shape)
    em.line("size_t u_k = 0;")
    names, k = _index_loops(em, shape)
    pad = "    " * k
    em.line(pad + f"size_t u_at = {_lin(names, contiguous_strides(shape))};")
    em.line(pad + f"if ({M}[{_lin(names, ms)}]) {{")
    em.line(pad + f"    if (u_k >= {src.numel}) return PT2C_ERR_INDEX;")
    em.line(pad + f"    {Y}[u_at] = {S}[u_k++];")
    em.line(pad + f"}} else {Y}[u_at] = {X}[{_lin(names, xs)}];")
    _close(em, k)
    em.line("(void)u_k;")


defop("masked_scatter", _ref_masked_scatter, _emit_masked_scatter)


@lowers("aten.masked_scatter.default")
def _lower_masked_scatter(ctx: Any, a: dict[str, Any]) -> Value:
    x, mask, src, out = a["self"], a["mask"], a["source"], ctx.out()
    if out.numel == 0:
        return _empty(ctx, out)
    src = _cast_to(ctx, src, out.dtype, "src")
    mask = _cast_to(ctx, mask, "bool", "mask")
    ctx.emit("masked_scatter", [x, mask, src], {}, [out])
    return out


def _empty(ctx: Any, out: Value) -> Value:
    out.data = np.zeros(out.shape, np_dtype(out.dtype))
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


def _emit_cdist(em: Any, node: Node) -> None:
    from pt2c.codegen.emitter import broadcast_strides

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
    names, k = _index_loops(em, tuple(bshape) + (P, R))
    pad = "    " * k
    bn = names[:len(bshape)]
    ip, ir = names[len(bshape)], names[len(bshape) + 1]
    em.line(pad + f"const {t} *u_a = {X1} + {_lin(bn, s1)} + {ip} * {M};")
    em.line(pad + f"const {t} *u_b = {X2} + {_lin(bn, s2)} + {ir} * {M};")
    em.line(pad + f"double u_acc = {init};")
    em.line(pad + f"for (size_t u_m = 0; u_m < {M}; u_m++) {{ double u_d = fabs((double)u_a[u_m] - (double)u_b[u_m]); {acc} }}")
    em.line(pad + f"{Y}[{_lin(names, contiguous_strides(shape))}] = ({t})({fin});")
    _close(em, k)


defop("cdist", _ref_cdist, _emit_cdist)


@lowers("aten._cdist_forward.default")
def _lower_cdist(ctx: Any, a: dict[str, Any]) -> Value:
    x1, x2, out = a["x1"], a["x2"], ctx.out()
    p = float(a["p"])
    if out.dtype not in FLOATS or x1.dtype != out.dtype or x2.dtype != out.dtype:
        ctx.fail(f"cdist is implemented for float32 / float64 (got {x1.dtype}, {x2.dtype})")
    if p < 0 or math.isnan(p):
        ctx.fail("cdist with p < 0")
    if out.numel == 0:
        return _empty(ctx, out)
    if x1.shape[-1] == 0:
        return _empty(ctx, out)
    ctx.emit("cdist", [x1, x2], {"p": p}, [out])
    return out


def _ref_pdist(node: Node, x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    i, j = np.triu_indices(n, 1)
    d = x[i] - x[j]
    return _pnorm_np(d, node.attrs["p"]).astype(np_dtype(node.outputs[0].dtype))


def _emit_pdist(em: Any, node: Node) -> None:
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


defop("pdist", _ref_pdist, _emit_pdist)


@lowers("aten._pdist_forward.default")
def _lower_pdist(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    p = float(a.get("p", 2.0))
    if out.dtype not in FLOATS or x.dtype != out.dtype:
        ctx.fail(f"pdist is implemented for float32 / float64 (got {x.dtype})")
    if p < 0 or math.isnan(p):
        ctx.fail("pdist with p < 0")
    if out.numel == 0 or x.shape[1] == 0:
        return _empty(ctx, out)
    ctx.emit("pdist", [x], {"p": p}, [out])
    return out


# ---------------------------------------------------------------- N-d convolution (3-d): direct loops, gather form for transposed

def _ref_conv_nd(node: Node, x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    import torch

    at = node.attrs
    X = torch.from_numpy(np.array(x, np.float64))
    W = torch.from_numpy(np.array(w, np.float64))
    B = torch.from_numpy(np.array(bias[0], np.float64)) if bias else None
    y = torch.ops.aten.convolution.default(X, W, B, list(at["stride"]), list(at["padding"]), list(at["dilation"]),
                                           bool(at["transposed"]), list(at["output_padding"]), int(at["groups"]))
    return y.numpy().astype(np.float32)


def _emit_conv_nd(em: Any, node: Node) -> None:
    at = node.attrs
    x, w = node.inputs[:2]
    out = node.outputs[0]
    N, C = x.shape[:2]
    OC = out.shape[1]
    isz, osz, ksz = x.shape[2:], out.shape[2:], w.shape[2:]
    nd = len(isz)
    G = at["groups"]
    Cg, OCg = C // G, OC // G
    st, pd, dl, tr = at["stride"], at["padding"], at["dilation"], at["transposed"]
    X, Wt, Y = em.ptr(x), em.ptr(w), em.ptr(out)
    B = em.ptr(node.inputs[2]) if len(node.inputs) > 2 else None
    olp = " ".join(f"for (long u_o{d} = 0; u_o{d} < {osz[d]}; u_o{d}++)" for d in range(nd))
    em.line(f"for (size_t u_n = 0; u_n < {N}; u_n++) for (size_t u_oc = 0; u_oc < {OC}; u_oc++) {olp} {{")
    em.line(f"    double u_acc = {('(double)' + B + '[u_oc]') if B else '0.0'};")
    em.line(f"    size_t u_g = u_oc / {OCg}, u_ocg = u_oc % {OCg}; (void)u_ocg;")
    em.line(f"    for (size_t u_icg = 0; u_icg < {Cg}; u_icg++) {{")
    em.line(f"        size_t u_ic = u_g * {Cg} + u_icg;")
    depth = 2
    for d in range(nd):
        pad = "    " * depth
        em.line(pad + f"for (long u_k{d} = 0; u_k{d} < {ksz[d]}; u_k{d}++) {{")
        if tr:
            em.line(pad + f"    long u_t{d} = u_o{d} + {pd[d]} - u_k{d} * {dl[d]};")
            em.line(pad + f"    if (u_t{d} < 0 || u_t{d} % {st[d]} != 0) continue;")
            em.line(pad + f"    long u_i{d} = u_t{d} / {st[d]};")
            em.line(pad + f"    if (u_i{d} >= {isz[d]}) continue;")
        else:
            em.line(pad + f"    long u_i{d} = u_o{d} * {st[d]} - {pd[d]} + u_k{d} * {dl[d]};")
            em.line(pad + f"    if (u_i{d} < 0 || u_i{d} >= {isz[d]}) continue;")
        depth += 1
    xi = f"(u_n * {C} + u_ic)"
    for d in range(nd):
        xi = f"({xi} * {isz[d]} + (size_t)u_i{d})"
    wi = f"(u_ic * {OCg} + u_ocg)" if tr else f"(u_oc * {Cg} + u_icg)"
    for d in range(nd):
        wi = f"({wi} * {ksz[d]} + (size_t)u_k{d})"
    em.line("    " * depth + f"u_acc += (double){X}[{xi}] * (double){Wt}[{wi}];")
    for d in reversed(range(nd)):
        em.line("    " * (2 + d) + "}")
    em.line("    }")
    yi = "(u_n * %d + u_oc)" % OC
    for d in range(nd):
        yi = f"({yi} * {osz[d]} + (size_t)u_o{d})"
    em.line(f"    {Y}[{yi}] = (float)u_acc;")
    em.line("}")


defop("conv_nd", _ref_conv_nd, _emit_conv_nd,
      flops=lambda n: 2 * max(n.outputs[0].numel, n.inputs[0].numel) * int(np.prod(n.inputs[1].shape[1:])))


def lower_conv_nd(ctx: Any, a: dict[str, Any]) -> Value:
    """Convolution (plain or transposed) of any spatial rank with a direct loop; used for 3-d."""
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if x.dtype != "float32" or w.dtype != "float32" or (bias is not None and bias.dtype != "float32"):
        ctx.fail(f"convolution is implemented for float32 only (got {x.dtype})")
    nd = len(w.shape) - 2
    tr = bool(a.get("transposed", False))
    if isinstance(a["padding"], str):
        ctx.fail("convolution with string padding")

    def per_dim(v: Any, dflt: int) -> tuple[int, ...]:
        v = list(v) if v is not None else [dflt]
        v = v or [dflt]
        return tuple(int(t) for t in (v * nd if len(v) == 1 else v))

    stride, padding, dilation = per_dim(a["stride"], 1), per_dim(a["padding"], 0), per_dim(a["dilation"], 1)
    opad = per_dim(a.get("output_padding"), 0)
    xs = ctx.view(x, (1, *x.shape)) if len(x.shape) == nd + 1 else x
    oshape = (xs.shape[0], *out.shape[-nd - 1:])
    if out.numel == 0:
        return _empty(ctx, out)
    y = out if oshape == out.shape else ctx.new("conv", oshape, "float32")
    ctx.emit("conv_nd", [xs, w] + ([bias] if bias is not None else []),
             {"stride": stride, "padding": padding, "dilation": dilation, "output_padding": opad,
              "transposed": tr, "groups": int(a.get("groups", 1))}, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)


# ---------------------------------------------------------------- N-d pooling (3-d): max with indices, avg, adaptive avg

def _ref_pool_nd(node: Node, x: np.ndarray) -> Any:
    import torch

    at = node.attrs
    X = torch.from_numpy(np.array(x))
    if at["kind"] == "max":
        y, i = torch.ops.aten.max_pool3d_with_indices.default(X, list(at["kernel"]), list(at["stride"]),
                                                              list(at["padding"]), list(at["dilation"]),
                                                              bool(at["ceil_mode"]))
        return [y.numpy(), i.numpy()]
    if at["kind"] == "avg":
        return torch.ops.aten.avg_pool3d.default(X, list(at["kernel"]), list(at["stride"]), list(at["padding"]),
                                                 bool(at["ceil_mode"]), bool(at["count_include_pad"]),
                                                 at["divisor"]).numpy()
    return torch.ops.aten._adaptive_avg_pool3d.default(X, list(node.outputs[0].shape[-3:])).numpy()


def _emit_pool_nd(em: Any, node: Node) -> None:
    at = node.attrs
    x = node.inputs[0]
    out = node.outputs[0]
    kind = at["kind"]
    nd = at["nd"]
    isz, osz = x.shape[-nd:], out.shape[-nd:]
    P = x.numel // max(_prod(isz), 1)
    IS, OS = _prod(isz), _prod(osz)
    X, Y = em.ptr(x), em.ptr(out)
    olp = " ".join(f"for (long u_o{d} = 0; u_o{d} < {osz[d]}; u_o{d}++)" for d in range(nd))
    em.line(f"for (size_t u_p = 0; u_p < {P}; u_p++) {olp} {{")
    em.line(f"    const float *u_x = {X} + u_p * {IS};")
    lin_o = "0"
    for d in range(nd):
        lin_o = f"({lin_o}) * {osz[d]} + (size_t)u_o{d}"
    em.line(f"    size_t u_at = u_p * {OS} + {lin_o};")
    if kind == "adaptive":
        for d in range(nd):
            em.line(f"    long u_s{d} = (u_o{d} * {isz[d]}) / {osz[d]}, u_e{d} = ((u_o{d} + 1) * {isz[d]} + {osz[d] - 1}) / {osz[d]};")
        em.line("    double u_acc = 0.0;")
        loops = " ".join(f"for (long u_i{d} = u_s{d}; u_i{d} < u_e{d}; u_i{d}++)" for d in range(nd))
        lin_i = "0"
        for d in range(nd):
            lin_i = f"({lin_i}) * {isz[d]} + (size_t)u_i{d}"
        em.line(f"    {loops} u_acc += (double)u_x[{lin_i}];")
        cnt = " * ".join(f"(u_e{d} - u_s{d})" for d in range(nd))
        em.line(f"    {Y}[u_at] = (float)(u_acc / (double)({cnt}));")
        em.line("}")
        return
    k, s, p = at["kernel"], at["stride"], at["padding"]
    lin_i = "0"
    for d in range(nd):
        lin_i = f"({lin_i}) * {isz[d]} + (size_t)u_i{d}"
    if kind == "max":
        dl = at["dilation"]
        I = em.ptr(node.outputs[1])
        em.line("    float u_best = -INFINITY; long u_bi = -1;")
        depth = 1
        for d in range(nd):
            pad = "    " * depth
            em.line(pad + f"for (long u_k{d} = 0; u_k{d} < {k[d]}; u_k{d}++) {{")
            em.line(pad + f"    long u_i{d} = u_o{d} * {s[d]} - {p[d]} + u_k{d} * {dl[d]};")
            em.line(pad + f"    if (u_i{d} < 0 || u_i{d} >= {isz[d]}) continue;")
            depth += 1
        pad = "    " * depth
        em.line(pad + f"long u_li = (long)({lin_i}); float u_v = u_x[u_li];")
        em.line(pad + "if (u_bi < 0 || u_v > u_best || u_v != u_v) { u_best = u_v; u_bi = u_li; }")
        for d in reversed(range(nd)):
            em.line("    " * (1 + d) + "}")
        em.line(f"    {Y}[u_at] = u_best; {I}[u_at] = (int64_t)u_bi;")
        em.line("}")
        return
    for d in range(nd):
        em.line(f"    long u_s{d} = u_o{d} * {s[d]} - {p[d]}, u_e{d} = u_s{d} + {k[d]};")
        em.line(f"    if (u_e{d} > {isz[d] + p[d]}) u_e{d} = {isz[d] + p[d]};")
    em.line("    long u_pool = " + " * ".join(f"(u_e{d} - u_s{d})" for d in range(nd)) + "; (void)u_pool;")
    for d in range(nd):
        em.line(f"    if (u_s{d} < 0) u_s{d} = 0;")
        em.line(f"    if (u_e{d} > {isz[d]}) u_e{d} = {isz[d]};")
    em.line("    if (" + " || ".join(f"u_s{d} >= u_e{d}" for d in range(nd)) + f") {{ {Y}[u_at] = 0.0f; continue; }}")
    em.line("    double u_acc = 0.0;")
    loops = " ".join(f"for (long u_i{d} = u_s{d}; u_i{d} < u_e{d}; u_i{d}++)" for d in range(nd))
    em.line(f"    {loops} u_acc += (double)u_x[{lin_i}];")
    if at["divisor"]:
        div = str(int(at["divisor"]))
    elif at["count_include_pad"]:
        div = "u_pool"
    else:
        div = " * ".join(f"(u_e{d} - u_s{d})" for d in range(nd))
    em.line(f"    {Y}[u_at] = (float)(u_acc / (double)({div}));")
    em.line("}")


defop("pool_nd", _ref_pool_nd, _emit_pool_nd)


def _pool3d_args(ctx: Any, a: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    def per_dim(v: Any, dflt: Any) -> tuple[int, ...]:
        v = list(v) if v else list(dflt)
        return tuple(int(t) for t in (v * 3 if len(v) == 1 else v))

    k = per_dim(a["kernel_size"], [1])
    s = per_dim(a.get("stride"), k)
    p = per_dim(a.get("padding"), [0])
    d = per_dim(a.get("dilation"), [1])
    return k, s, p, d


@lowers("aten.max_pool3d_with_indices.default")
def _lower_maxpool3d(ctx: Any, a: dict[str, Any]) -> Any:
    x = a["self"]
    outs = ctx.outs()
    out, ind = outs
    if x.dtype != "float32":
        ctx.fail(f"pooling is implemented for float32 only (got {x.dtype})")
    k, s, p, d = _pool3d_args(ctx, a)
    if out.numel == 0:
        ind.data = np.zeros(ind.shape, np.int64)
        return (_empty(ctx, out), ind)
    ctx.emit("pool_nd", [x], {"kind": "max", "nd": 3, "kernel": k, "stride": s, "padding": p, "dilation": d,
                              "ceil_mode": bool(a.get("ceil_mode", False))}, [out, ind])
    return (out, ind)


@lowers("aten.avg_pool3d.default")
def _lower_avgpool3d(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    if x.dtype != "float32":
        ctx.fail(f"pooling is implemented for float32 only (got {x.dtype})")
    k, s, p, _ = _pool3d_args(ctx, a)
    if out.numel == 0:
        return _empty(ctx, out)
    ctx.emit("pool_nd", [x], {"kind": "avg", "nd": 3, "kernel": k, "stride": s, "padding": p,
                              "ceil_mode": bool(a.get("ceil_mode", False)),
                              "count_include_pad": bool(a.get("count_include_pad", True)),
                              "divisor": a.get("divisor_override")}, [out])
    return out


@lowers("aten._adaptive_avg_pool3d.default")
def _lower_adaptive3d(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    if x.dtype != "float32":
        ctx.fail(f"pooling is implemented for float32 only (got {x.dtype})")
    if out.numel == 0:
        return _empty(ctx, out)
    if x.numel == 0:
        ctx.fail("adaptive pooling of an empty input")
    ctx.emit("pool_nd", [x], {"kind": "adaptive", "nd": 3}, [out])
    return out


# ---------------------------------------------------------------- max_pool2d backward: scatter-add through the saved indices

def _ref_maxpool_bwd(node: Node, go: np.ndarray, ind: np.ndarray) -> np.ndarray:
    shape = node.outputs[0].shape
    plane = _prod(shape[-2:])
    P = go.size // max(_prod(go.shape[-2:]), 1)
    gi = np.zeros((P, plane), go.dtype)
    g2, i2 = go.reshape(P, -1), ind.reshape(P, -1)
    for q in range(P):
        np.add.at(gi[q], i2[q], g2[q])
    return gi.reshape(shape)


def _emit_maxpool_bwd(em: Any, node: Node) -> None:
    go, ind = node.inputs
    out = node.outputs[0]
    plane = _prod(out.shape[-2:])
    oplane = _prod(go.shape[-2:])
    P = go.numel // max(oplane, 1)
    G, I, Y = em.ptr(go), em.ptr(ind), em.ptr(out)
    em.errors.add("INDEX")
    em.line(f"memset({Y}, 0, {out.numel} * sizeof(float));")
    em.line(f"for (size_t u_p = 0; u_p < {P}; u_p++) for (size_t u_o = 0; u_o < {oplane}; u_o++) {{")
    em.line(f"    int64_t u_j = {I}[u_p * {oplane} + u_o];")
    em.line(f"    if (u_j < 0 || u_j >= {plane}) return PT2C_ERR_INDEX;")
    em.line(f"    {Y}[u_p * {plane} + (size_t)u_j] += {G}[u_p * {oplane} + u_o];")
    em.line("}")


defop("maxpool2d_bwd", _ref_maxpool_bwd, _emit_maxpool_bwd)


@lowers("aten.max_pool2d_with_indices_backward.default")
def _lower_maxpool_bwd(ctx: Any, a: dict[str, Any]) -> Value:
    go, ind, out = a["grad_output"], a["indices"], ctx.out()
    if go.dtype != "float32":
        ctx.fail(f"max_pool2d backward is implemented for float32 only (got {go.dtype})")
    if out.numel == 0 or go.numel == 0:
        return _empty(ctx, out)
    ctx.emit("maxpool2d_bwd", [go, ind], {}, [out])
    return out


# ---------------------------------------------------------------- grid_sampler_2d (kernel grid.c)

def _ref_grid_sampler(node: Node, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    import torch

    at = node.attrs
    return torch.ops.aten.grid_sampler_2d.default(torch.from_numpy(np.array(x)), torch.from_numpy(np.array(grid)),
                                                  at["interp"], at["padding"], at["align"]).numpy()


def _emit_grid_sampler(em: Any, node: Node) -> None:
    x, grid = node.inputs
    out = node.outputs[0]
    at = node.attrs
    N, C, H, W = x.shape
    OH, OW = out.shape[2:]
    em.line(f"pt2c_grid_sampler_2d({em.ptr(out)}, {em.ptr(x)}, {em.ptr(grid)}, {N}, {C}, {H}, {W}, {OH}, {OW}, "
            f"{at['interp']}, {at['padding']}, {int(at['align'])});")


defop("grid_sampler_2d", _ref_grid_sampler, _emit_grid_sampler, kernels=("grid",),
      flops=lambda n: 8 * n.outputs[0].numel)


@lowers("aten.grid_sampler_2d.default")
def _lower_grid_sampler(ctx: Any, a: dict[str, Any]) -> Value:
    x, grid, out = a["input"], a["grid"], ctx.out()
    if x.dtype != "float32" or grid.dtype != "float32":
        ctx.fail(f"grid_sampler_2d is implemented for float32 only (got {x.dtype}, {grid.dtype})")
    interp, padding = int(a["interpolation_mode"]), int(a["padding_mode"])
    if interp not in (0, 1, 2) or padding not in (0, 1, 2):
        ctx.fail(f"grid_sampler_2d with interpolation_mode={interp}, padding_mode={padding}")
    if out.numel == 0:
        return _empty(ctx, out)
    if x.numel == 0:
        ctx.fail("grid_sampler_2d of an empty input")
    ctx.emit("grid_sampler_2d", [x, grid], {"interp": interp, "padding": padding,
                                            "align": bool(a["align_corners"])}, [out])
    return out


# ---------------------------------------------------------------- fill, reflection / replication padding (constant offset tables)

@lowers("aten.fill.Scalar")
def _lower_fill(ctx: Any, a: dict[str, Any]) -> Value:
    from pt2c.ops.creation import _full

    return _full(ctx, a["value"])


def _pad_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    src = np.arange(n + lo + hi, dtype=np.int64) - lo
    if mode == "replicate":
        return np.clip(src, 0, n - 1)
    src = np.abs(src)
    return np.where(src >= n, 2 * (n - 1) - src, src)


@lowers("aten.reflection_pad1d.default", "aten.reflection_pad2d.default", "aten.reflection_pad3d.default",
        "aten.replication_pad1d.default", "aten.replication_pad2d.default", "aten.replication_pad3d.default")
def _lower_pad_mode(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    mode = "reflect" if "reflection" in ctx.target else "replicate"
    flat = [int(p) for p in a["padding"]]
    k = len(flat) // 2
    pads = [(0, 0)] * (len(x.shape) - k) + [(flat[2 * i], flat[2 * i + 1]) for i in reversed(range(k))]
    for n, (lo, hi), m in zip(x.shape, pads, out.shape):
        if m != n + lo + hi or (n == 0 and m):
            ctx.fail(f"{mode} padding of a dim of size {n} by ({lo}, {hi})")
        if mode == "reflect" and (max(lo, hi) >= n and (lo or hi)):
            ctx.fail(f"reflection padding ({lo}, {hi}) must be smaller than the dim size {n}")
    if out.numel == 0:
        return _empty(ctx, out)
    flat_idx = np.arange(x.numel, dtype=np.int64).reshape(x.shape)
    axes = [_pad_index(n, lo, hi, mode) for n, (lo, hi) in zip(x.shape, pads)]
    offs = flat_idx[np.ix_(*axes)] if axes else flat_idx
    dt = np.int32 if x.numel < 2**31 else np.int64
    ctx.emit("take", [x, ctx.const(np.ascontiguousarray(offs).astype(dt), out.name + "_offsets")], {}, [out])
    return out


# ---------------------------------------------------------------- col2im (nn.Fold): sum the columns back into the image

def _ref_col2im(node: Node, col: np.ndarray) -> np.ndarray:
    import torch

    at = node.attrs
    return torch.ops.aten.col2im.default(torch.from_numpy(np.array(col, np.float64)), list(at["size"]),
                                         list(at["kernel"]), list(at["dilation"]), list(at["padding"]),
                                         list(at["stride"])).numpy().astype(np.float32)


def _emit_col2im(em: Any, node: Node) -> None:
    at = node.attrs
    col = node.inputs[0]
    out = node.outputs[0]
    N, CK, L = col.shape
    C, H, W = out.shape[1:]
    (KH, KW), (dh, dw), (ph, pw), (sh, sw) = at["kernel"], at["dilation"], at["padding"], at["stride"]
    BH = (H + 2 * ph - (dh * (KH - 1) + 1)) // sh + 1
    BW = (W + 2 * pw - (dw * (KW - 1) + 1)) // sw + 1
    X, Y = em.ptr(col), em.ptr(out)
    em.line(f"memset({Y}, 0, {out.numel} * sizeof(float));")
    em.line(f"for (size_t u_n = 0; u_n < {N}; u_n++) for (size_t u_c = 0; u_c < {C}; u_c++)"
            f" for (long u_ki = 0; u_ki < {KH}; u_ki++) for (long u_kj = 0; u_kj < {KW}; u_kj++) {{")
    em.line(f"    const float *u_x = {X} + (u_n * {CK} + (u_c * {KH} + (size_t)u_ki) * {KW} + (size_t)u_kj) * {L};")
    em.line(f"    float *u_y = {Y} + (u_n * {C} + u_c) * {H * W};")
    em.line(f"    for (long u_bh = 0; u_bh < {BH}; u_bh++) {{")
    em.line(f"        long u_h = u_bh * {sh} - {ph} + u_ki * {dh};")
    em.line(f"        if (u_h < 0 || u_h >= {H}) continue;")
    em.line(f"        for (long u_bw = 0; u_bw < {BW}; u_bw++) {{")
    em.line(f"            long u_w = u_bw * {sw} - {pw} + u_kj * {dw};")
    em.line(f"            if (u_w >= 0 && u_w < {W}) u_y[u_h * {W} + u_w] += u_x[u_bh * {BW} + u_bw];")
    em.line("        }")
    em.line("    }")
    em.line("}")


defop("col2im", _ref_col2im, _emit_col2im)


@lowers("aten.col2im.default")
def _lower_col2im(ctx: Any, a: dict[str, Any]) -> Value:
    col, out = a["self"], ctx.out()
    if col.dtype != "float32":
        ctx.fail(f"col2im is implemented for float32 only (got {col.dtype})")

    def two(v: Any) -> tuple[int, int]:
        v = [int(t) for t in v]
        return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])

    attrs = {"size": two(a["output_size"]), "kernel": two(a["kernel_size"]), "dilation": two(a["dilation"]),
             "padding": two(a["padding"]), "stride": two(a["stride"])}
    if out.numel == 0:
        return _empty(ctx, out)
    x = ctx.view(col, (1, *col.shape)) if len(col.shape) == 2 else col
    y = out if len(out.shape) == 4 else ctx.new("fold", (1, *out.shape), "float32")
    if x.numel == 0:
        return _empty(ctx, out)
    ctx.emit("col2im", [x], attrs, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)


# ---------------------------------------------------------------- core ATen ops pt2c does not lower, and why
# (the compile-time error for such a node quotes the reason; scripts/gen_ops_doc.py lists them in docs/ops.md)

_BACKWARD = "backward (training) op: pt2c compiles inference programs; export the forward pass only"
_SYMBOLIC = ("symbolic-shape query, only present with dynamic shapes: pt2c compiles static shapes "
             "(export without dynamic_shapes)")
UNSUPPORTED.update({
    "aten._adaptive_avg_pool2d_backward.default": _BACKWARD,
    "aten.avg_pool2d_backward.default": _BACKWARD,
    "aten.convolution_backward.default": _BACKWARD,
    "aten.embedding_dense_backward.default": _BACKWARD,
    "aten.native_group_norm_backward.default": _BACKWARD,
    "aten.native_layer_norm_backward.default": _BACKWARD,
    "aten._embedding_bag.default": "EmbeddingBag (bags with offsets and per-sample weights) is not implemented; "
                                   "use nn.Embedding and a sum / mean over the bag dimension",
    "aten._fft_r2c.default": "FFTs produce complex tensors; pt2c has no complex dtypes",
    "aten._fft_c2r.default": "FFTs consume complex tensors; pt2c has no complex dtypes",
    "aten._local_scalar_dense.default": "reads a tensor element into a Python number (.item()): data-dependent "
                                        "values and shapes are not supported (shapes are static)",
    "aten._native_batch_norm_legit.default": "training-mode batch norm that updates running_mean / running_var in "
                                             "place: call model.eval() before torch.export",
    "aten.atan2.out": "out= variant (writes its `out` argument); export graphs use aten.atan2.default, "
                      "which is supported",
    "aten.nonzero.default": "the output shape depends on the data (dynamic shape); pt2c compiles static shapes",
    "aten.sym_numel.default": _SYMBOLIC,
    "aten.sym_size.int": _SYMBOLIC,
    "aten.sym_storage_offset.default": _SYMBOLIC,
    "aten.sym_stride.int": _SYMBOLIC,
    "aten.sym_is_contiguous.default": _SYMBOLIC,
    "aten.resize_.default": "in-place resize of a tensor's storage: buffers are planned at compile time with "
                            "static shapes; create a new tensor (torch.empty / reshape) instead",
})
