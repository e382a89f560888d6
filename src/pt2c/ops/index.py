"""Indexing: gathers (embedding, index_select, x[idx], gather, take), scatters (scatter*, index_put, masked_scatter),
EmbeddingBag.

Gathers: embedding, index_select, x[idx] (aten.index.Tensor), torch.gather, take.  Scatters:
scatter, scatter_add, scatter_reduce, index_put (also index_add / index_copy / index_fill, which
decompose to it), masked_scatter.

Every index is checked at run time (`<NAME>_ERR_INDEX`) and, when it is a constant, at compile time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pt2c.ir import Node, Value, ctype, np_dtype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.elementwise import cast_to, make_ew
from pt2c.ops.registry import BACKWARD, INTS, UNSUPPORTED, arity, broadcast, defop, dtype_in, ints, lowers, need, result
from pt2c.ops.util import (FLOATS, broadcast_strides, close_loops, contiguous_strides, empty_output, index_loops, lin, lit,
                           norm_dim, output_used, prod)
from pt2c.sym import dynamic, sint


# ---------------------------------------------------------------- gather along one axis

# Negative indices, as PyTorch takes them: advanced indexing (x[idx] = aten.index.Tensor,
# index_put, index_fill, torch.take) counts -1 from the end; embedding, index_select, gather,
# scatter*, index_add and index_copy raise.  The IR ops carry this as attrs["wrap"]; the C
# code returns ERR_INDEX for any index outside [-n, n) (wrap) or [0, n) (no wrap).

def check_index(idx: Any, n: int, wrap: bool, what: str = "index") -> np.ndarray:
    """Indices into a dimension of size n, negative ones wrapped when `wrap`; IndexError, as
    PyTorch raises, for one outside [-n, n) (wrap) or [0, n) (no wrap)."""
    i = np.asarray(idx).astype(np.int64)
    bad = (i < (-n if wrap else 0)) | (i >= n)
    if bad.any():
        raise IndexError(f"{what}: index {int(i[bad].flat[0])} is out of range for a dimension of size {n}")
    return np.where(i < 0, i + n, i)


def check_const_index(ctx: LowerCtx, idx: Value, n: int, wrap: bool, what: str) -> None:
    """A compile-time error (not a C status at run time) for a constant index that PyTorch rejects."""
    if idx.is_const and idx.data is not None:
        try:
            check_index(idx.data, n, wrap, what)
        except IndexError as e:
            ctx.fail(str(e))


def _ref_gather(node: Node, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    dim = node.attrs["dim"]
    i = check_index(idx, x.shape[dim], node.attrs.get("wrap", False), "gather")
    return np.take(x, i.reshape(-1), axis=dim).reshape(node.outputs[0].shape)


def _emit_gather(em: EmitCtx, node: Node) -> None:
    x, idx = node.inputs
    out = node.outputs[0]
    dim = node.attrs["dim"]
    outer = prod(x.shape[:dim])
    inner = prod(x.shape[dim + 1:])
    D, J = x.shape[dim], idx.numel
    X, I, Y = em.ptr(x), em.ptr(idx), em.ptr(out)
    em.errors.add("INDEX")
    em.line(f"for (size_t o = 0; o < {outer}; o++) {{")
    em.line(f"    for (size_t j = 0; j < {J}; j++) {{")
    em.line(f"        int64_t k = (int64_t){I}[j];")
    if node.attrs.get("wrap", False):  # x[idx] counts -1 from the end; embedding / index_select raise
        em.line(f"        if (k < 0) k += {D};")
    em.line(f"        if (k < 0 || k >= {sint(D)}) return PT2C_ERR_INDEX;")
    if inner == 1:
        em.line(f"        {Y}[o * {J} + j] = {X}[o * {D} + (size_t)k];")
    else:
        em.line(f"        memcpy({Y} + (o * {J} + j) * {inner}, {X} + (o * {D} + (size_t)k) * {inner}, "
                f"{inner} * sizeof({ctype(x.dtype)}));")
    em.line("    }")
    em.line("}")


def _dim(node: Node, rank: int) -> int:
    dim = node.attrs["dim"]
    need(type(dim) is int and 0 <= dim < rank, f"dim {dim} of a rank-{rank} tensor")
    return dim


def _check_gather(node: Node) -> None:
    """out = x with dim `dim` replaced by the index's shape."""
    arity(node, 2)
    x, idx = node.inputs
    dim = _dim(node, len(x.shape))
    dtype_in(idx, INTS, "index")
    need(type(node.attrs.get("wrap", False)) is bool, "wrap is not a bool")
    result(node.outputs[0], (*x.shape[:dim], *idx.shape, *x.shape[dim + 1:]), x.dtype)


defop("gather", _ref_gather, _emit_gather, rule=_check_gather)


@lowers("aten.embedding.default")
def _lower_embedding(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    w, idx = a["weight"], a["indices"]
    check_const_index(ctx, idx, w.shape[0], False, "embedding")
    ctx.emit("gather", [w, idx], {"dim": 0, "wrap": False}, [ctx.out()])  # torch raises for -1
    return ctx.out()


@lowers("aten.index_select.default")
def _lower_index_select(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, idx, out = a["self"], a["index"], ctx.out()
    dim = norm_dim(a["dim"], max(len(x.shape), 1))
    check_const_index(ctx, idx, x.shape[dim] if x.shape else 1, False, "index_select")
    if not x.shape or not idx.shape:  # 0-d self and/or index: gather on 1-element views
        x1 = ctx.view(x, (1,)) if not x.shape else x
        i1 = ctx.view(idx, (1,)) if not idx.shape else idx
        y = ctx.new("sel", (*x1.shape[:dim], 1, *x1.shape[dim + 1:]), x.dtype)
        ctx.emit("gather", [x1, i1], {"dim": dim, "wrap": False}, [y])  # torch raises for -1
        return ctx.view(y, out.shape, out=out)
    ctx.emit("gather", [x, idx], {"dim": dim, "wrap": False}, [out])
    return out


@lowers("aten.index.Tensor")
def _lower_index(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    idx = list(a["indices"])
    used = [i for i, t in enumerate(idx) if t is not None]
    if used and all(idx[i].is_const for i in used) and not dynamic(x.shape):
        return lower_index_const(ctx, x, idx, out)
    if len(used) != 1 or idx[used[0]].dtype == "bool":
        return lower_index_multi(ctx, x, idx, out)
    d = used[0]
    ctx.emit("gather", [x, idx[d]], {"dim": d, "wrap": True}, [out])  # x[-1] is the last row, as in torch
    return out


# ---------------------------------------------------------------- take: gather by constant flat offsets

def _ref_take(node: Node, x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1)[offsets.reshape(-1)].reshape(node.outputs[0].shape)


def _emit_take(em: EmitCtx, node: Node) -> None:
    x, offs = node.inputs
    out = node.outputs[0]
    em.line(f"for (size_t i = 0; i < {out.numel}; i++) {em.ptr(out)}[i] = {em.ptr(x)}[{em.ptr(offs)}[i]];")


def _check_take(node: Node) -> None:
    """out[i] = x.flat[offsets.flat[i]]: as many elements as offsets, each inside x."""
    arity(node, 2)
    x, offs = node.inputs
    out = node.outputs[0]
    dtype_in(offs, INTS, "offsets")
    need(out.dtype == x.dtype and out.numel == offs.numel,
         f"{out.dtype}[{out.numel}] taken from {x.dtype} by {offs.numel} offsets")
    if offs.is_const and offs.numel:
        need(0 <= int(offs.data.min()) and int(offs.data.max()) < x.numel, f"offsets outside the {x.numel} elements")


defop("take", _ref_take, _emit_take, rule=_check_take)


def lower_index_const(ctx: LowerCtx, x: Value, indices: list[Any], out: Value) -> Value:
    """Advanced indexing with constant index tensors: offsets computed by torch itself."""
    import torch

    flat = torch.arange(x.numel, dtype=torch.int64).reshape(x.shape)
    # a None entry of aten.index means "all of this dim" (a full slice), not a new axis
    idx = [slice(None) if t is None else torch.from_numpy(np.array(t.data)) for t in indices]
    offs = flat[tuple(idx)].contiguous().numpy()
    dt = np.int32 if x.numel < 2**31 else np.int64
    ctx.emit("take", [x, ctx.const(offs.astype(dt), out.name + "_offsets")], {}, [out])
    return out


# ---------------------------------------------------------------- advanced indexing with several runtime index tensors

def _ref_index_multi(node: Node, x: np.ndarray, *idx: np.ndarray) -> np.ndarray:
    pre = node.attrs["pre"]  # x[..., i0, i1] wraps -1 like torch (numpy does too; checked for the message)
    key = (slice(None),) * pre + tuple(check_index(i, x.shape[pre + q], True, "index") for q, i in enumerate(idx))
    return np.asarray(x[key]).reshape(node.outputs[0].shape)


def _emit_index_multi(em: EmitCtx, node: Node) -> None:
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
    inner = prod(rest)
    loop_shape = tuple(lead) + tuple(bshape)
    names, k = index_loops(em, loop_shape)
    pad = "    " * k
    terms = [f"{names[d]} * {xs[d]}" for d in range(pre)]
    for q, iv in enumerate(idx):
        st = broadcast_strides(iv.shape, contiguous_strides(iv.shape), tuple(bshape))
        em.line(pad + f"int64_t u_j{q} = (int64_t){em.ptr(iv)}[{lin(names[pre:], st)}];")
        n = x.shape[pre + q]
        em.line(pad + f"if (u_j{q} < 0) u_j{q} += {n};")
        em.line(pad + f"if (u_j{q} < 0 || u_j{q} >= {sint(n)}) return PT2C_ERR_INDEX;")
        terms.append(f"(size_t)u_j{q} * {xs[pre + q]}")
    ost = contiguous_strides(loop_shape)
    em.line(pad + f"memcpy({Y} + ({lin(names, ost)}) * {inner}, {X} + {' + '.join(terms)}, {inner} * sizeof({t}));")
    close_loops(em, k)


def _check_index_multi(node: Node) -> None:
    """x[:, ..., i0, i1, ...]: dims pre..pre+k replaced by the indices' broadcast shape."""
    need(len(node.inputs) >= 2, "no index")
    arity(node, len(node.inputs))
    x, idx = node.inputs[0], node.inputs[1:]
    pre, bshape = node.attrs["pre"], node.attrs["bshape"]
    need(type(pre) is int and ints(bshape, lo=0) and 0 <= pre and pre + len(idx) <= len(x.shape),
         f"pre {pre} and {len(idx)} indices into a rank-{len(x.shape)} tensor")
    for i in idx:
        dtype_in(i, INTS, "index")
    need(broadcast(*[i.shape for i in idx]) == tuple(bshape), f"the indices do not broadcast to {list(bshape)}")
    result(node.outputs[0], (*x.shape[:pre], *bshape, *x.shape[pre + len(idx):]), x.dtype)


defop("index_multi", _ref_index_multi, _emit_index_multi, rule=_check_index_multi)


def lower_index_multi(ctx: LowerCtx, x: Value, idx: list[Any], out: Value) -> Value:
    """x[:, ..., i0, i1, ...] with adjacent runtime integer index tensors (PyTorch's advanced indexing)."""

    used = [i for i, t in enumerate(idx) if t is not None]
    pre = used[0]
    if used != list(range(pre, pre + len(used))) or any(idx[i].dtype == "bool" for i in used):
        ctx.fail("aten.index.Tensor is supported with adjacent integer index tensors (no bool masks)")
    tens = [idx[i] for i in used]
    bshape = broadcast(*[t.shape for t in tens])
    if prod(bshape) == 0 or x.numel == 0:
        ctx.fail("aten.index.Tensor with an empty index")
    ctx.emit("index_multi", [x, *tens], {"pre": pre, "bshape": bshape}, [out])
    return out


# ---------------------------------------------------------------- gather along a dim with a runtime index

def _ref_gather_dim(node: Node, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    dim = node.attrs["dim"]
    i = check_index(idx, x.shape[dim], False, "gather")  # torch.gather raises for -1
    sl = tuple(slice(0, n) for n in idx.shape)
    return np.take_along_axis(x[tuple(s if d != dim else slice(None) for d, s in enumerate(sl))], i, axis=dim)


def _emit_gather_dim(em: EmitCtx, node: Node) -> None:
    x, idx = node.inputs
    out = node.outputs[0]
    dim = node.attrs["dim"]
    X, I, Y = em.ptr(x), em.ptr(idx), em.ptr(out)
    em.errors.add("INDEX")
    xs, ist = contiguous_strides(x.shape), contiguous_strides(idx.shape)
    names, k = index_loops(em, idx.shape)
    pad = "    " * k
    em.line(pad + f"int64_t u_j = (int64_t){I}[{lin(names, ist)}];")
    em.line(pad + f"if (u_j < 0 || u_j >= {sint(x.shape[dim])}) return PT2C_ERR_INDEX;")  # no wrap: torch raises for -1
    em.line(pad + f"{Y}[{lin(names, ist)}] = {X}[{lin(names, xs, dim, '(size_t)u_j')}];")
    close_loops(em, k)


def _check_gather_dim(node: Node) -> None:
    """torch.gather: out has the index's shape, which fits in x off `dim`."""
    arity(node, 2)
    x, idx = node.inputs
    dim = _dim(node, len(x.shape))
    dtype_in(idx, INTS, "index")
    need(len(idx.shape) == len(x.shape) and all(i <= n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != dim),
         f"index shape {list(idx.shape)} does not fit x's {list(x.shape)} off dim {dim}")
    result(node.outputs[0], idx.shape, x.dtype)


defop("gather_dim", _ref_gather_dim, _emit_gather_dim, rule=_check_gather_dim)


@lowers("aten.gather.default")
def _lower_gather(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, idx, out = a["self"], a["index"], ctx.out()
    if not x.shape or not idx.shape:
        ctx.fail("gather of 0-d tensors")
    if idx.numel == 0:
        ctx.fail("gather with an empty index")
    dim = norm_dim(a["dim"], len(x.shape))
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


def _emit_scatter(em: EmitCtx, node: Node) -> None:
    x, idx = node.inputs[:2]
    src = node.inputs[2] if len(node.inputs) > 2 else None
    out = node.outputs[0]
    dim, mode = node.attrs["dim"], node.attrs["reduce"]
    X, I, Y = em.ptr(x), em.ptr(idx), em.ptr(out)
    em.errors.add("INDEX")
    t = ctype(out.dtype)
    em.line(f"if ({Y} != {X}) memcpy({Y}, {X}, {x.numel} * sizeof({t}));")
    ys, ist = contiguous_strides(x.shape), contiguous_strides(idx.shape)
    names, k = index_loops(em, idx.shape)
    pad = "    " * k
    em.line(pad + f"int64_t u_j = (int64_t){I}[{lin(names, ist)}];")
    em.line(pad + f"if (u_j < 0 || u_j >= {sint(x.shape[dim])}) return PT2C_ERR_INDEX;")  # no wrap: torch raises for -1
    if src is not None:
        val = f"{em.ptr(src)}[{lin(names, contiguous_strides(src.shape))}]"
    else:
        val = lit(out.dtype, node.attrs["value"])
    op = "+=" if mode == "add" else "="
    em.line(pad + f"{Y}[{lin(names, ys, dim, '(size_t)u_j')}] {op} ({t})({val});")
    close_loops(em, k)


def _check_scatter(node: Node) -> None:
    arity(node, (2, 3))
    x, idx = node.inputs[:2]
    dim = _dim(node, len(x.shape))
    dtype_in(idx, INTS, "index")
    need(node.attrs["reduce"] in ("set", "add"), f"reduce {node.attrs['reduce']!r}")
    need(type(node.attrs.get("value", 0)) in (bool, int, float), "value is not a Python bool / int / float")
    need(len(idx.shape) == len(x.shape) and all(i <= n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != dim),
         f"index shape {list(idx.shape)} does not fit x's {list(x.shape)} off dim {dim}")
    if len(node.inputs) == 3:
        src = node.inputs[2]
        need(len(src.shape) == len(idx.shape) and all(i <= s for i, s in zip(idx.shape, src.shape)),
             f"src shape {list(src.shape)} smaller than the index's {list(idx.shape)}")
    result(node.outputs[0], x.shape, x.dtype)


defop("scatter", _ref_scatter, _emit_scatter, rule=_check_scatter)


@lowers("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default", "aten.scatter.reduce",
        "aten.scatter.value_reduce")
def _lower_scatter(ctx: LowerCtx, a: dict[str, Any]) -> Value:
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
    dim = norm_dim(a["dim"], len(x.shape))
    check_const_index(ctx, idx, x.shape[dim], False, "scatter")
    ctx.emit("scatter", ins, {"dim": dim, "reduce": mode, "value": a.get("value", 0)}, [out])
    return out


# ---------------------------------------------------------------- index_put: x[:, .., i0, i1, ...] = v

def _ref_index_put(node: Node, x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    nidx, lead = node.attrs["nidx"], node.attrs.get("lead", 0)
    idx, vals = rest[:nidx], rest[nidx]
    y = np.array(x, copy=True)
    wrap = node.attrs.get("wrap", True)
    b = np.broadcast_arrays(*[check_index(i, x.shape[lead + q], wrap, "index_put") for q, i in enumerate(idx)])
    v = np.broadcast_to(vals, x.shape[:lead] + b[0].shape + x.shape[lead + nidx:])
    full = (slice(None),) * lead
    for pos in np.ndindex(*b[0].shape):
        key = full + tuple(int(i[pos]) for i in b)
        if node.attrs["accumulate"]:
            y[key] += v[full + pos]
        else:
            y[key] = v[full + pos]
    return y


def _emit_index_put(em: EmitCtx, node: Node) -> None:
    nidx, lead = node.attrs["nidx"], node.attrs.get("lead", 0)
    x = node.inputs[0]
    idx = node.inputs[1:1 + nidx]
    vals = node.inputs[1 + nidx]
    out = node.outputs[0]
    X, Y, VV = em.ptr(x), em.ptr(out), em.ptr(vals)
    t = ctype(out.dtype)
    em.errors.add("INDEX")
    em.line(f"if ({Y} != {X}) memcpy({Y}, {X}, {x.numel} * sizeof({t}));")
    bshape = tuple(node.attrs["bshape"])
    rest = x.shape[lead + nidx:]
    inner = prod(rest)
    names, k = index_loops(em, tuple(x.shape[:lead]) + bshape)  # the leading full dims, then the indices'
    pad = "    " * k
    xs = contiguous_strides(x.shape)
    terms = [f"{names[d]} * {xs[d]}" for d in range(lead)]
    for q, iv in enumerate(idx):
        st = broadcast_strides(iv.shape, contiguous_strides(iv.shape), bshape)
        em.line(pad + f"int64_t u_j{q} = (int64_t){em.ptr(iv)}[{lin(names[lead:], st)}];")
        if node.attrs.get("wrap", True):  # x[i] = v counts -1 from the end; index_add / index_copy raise
            em.line(pad + f"if (u_j{q} < 0) u_j{q} += {sint(x.shape[lead + q])};")
        em.line(pad + f"if (u_j{q} < 0 || u_j{q} >= {sint(x.shape[lead + q])}) return PT2C_ERR_INDEX;")
        terms.append(f"(size_t)u_j{q} * {xs[lead + q]}")
    full = tuple(x.shape[:lead]) + bshape + tuple(rest)
    vst = broadcast_strides(vals.shape, contiguous_strides(vals.shape), full)
    vlin = lin(names, vst[:lead + len(bshape)])
    em.line(pad + f"size_t u_base = {' + '.join(terms)};")
    em.line(pad + f"for (size_t u_r = 0; u_r < {inner}; u_r++) {{")
    rest_st = contiguous_strides(tuple(rest))
    # values index for the trailing dims: unravel r against `rest` with vals' broadcast strides
    vr = []
    for d, n in enumerate(rest):
        s = vst[lead + len(bshape) + d]
        if s and n != 1:
            vr.append(f"((u_r / {rest_st[d]}) % {n}) * {s}")
    vidx = " + ".join([vlin] + vr) if vr else vlin
    op = "+=" if node.attrs["accumulate"] else "="
    em.line(pad + f"    {Y}[u_base + u_r] {op} ({t}){VV}[{vidx}];")
    em.line(pad + "}")
    close_loops(em, k)


def _check_index_put(node: Node) -> None:
    """x with x[:, .. (lead full dims), i0, i1, ...] = vals (or +=): vals broadcast to x's leading dims + the
    indices' shape + x's trailing dims."""
    nidx, bshape, lead = node.attrs["nidx"], node.attrs["bshape"], node.attrs.get("lead", 0)
    need(type(nidx) is int and nidx >= 1 and ints(bshape, lo=0) and type(lead) is int and lead >= 0,
         "nidx / bshape / lead")
    arity(node, nidx + 2)
    x, idx, vals = node.inputs[0], node.inputs[1:1 + nidx], node.inputs[1 + nidx]
    need(lead + nidx <= len(x.shape), f"{lead} full dims and {nidx} indices into a rank-{len(x.shape)} tensor")
    for i in idx:
        dtype_in(i, INTS, "index")
    need(broadcast(*[i.shape for i in idx]) == tuple(bshape), f"the indices do not broadcast to {list(bshape)}")
    full = (*x.shape[:lead], *bshape, *x.shape[lead + nidx:])
    need(broadcast(vals.shape, full) == full, f"values {list(vals.shape)} do not broadcast to {list(full)}")
    need(vals.dtype == x.dtype, f"values are {vals.dtype}, x {x.dtype}")
    need(type(node.attrs["accumulate"]) is bool and type(node.attrs.get("wrap", True)) is bool, "accumulate / wrap")
    need(not node.attrs.get("inplace") or (x.producer is not None and x.producer.op == "state"),
         "inplace: only into a state (where the output is its storage)")
    result(node.outputs[0], x.shape, x.dtype)


defop("index_put", _ref_index_put, _emit_index_put, rule=_check_index_put)


@lowers("aten.index_put.default", "aten._unsafe_index_put.default")
def _lower_index_put(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    idx = list(a["indices"])
    vals = a["values"]
    lead = next((q for q, t in enumerate(idx) if t is not None), len(idx))  # x[:, :, i] = v: full leading dims
    idx = idx[lead:]
    if not idx or any(t is None for t in idx) or any(t.dtype == "bool" for t in idx):
        ctx.fail("index_put is supported with integer index tensors after any full leading dims "
                 "(x[i] = v, x[:, i, j] = v; no None between index tensors, no bool masks)")
    if not isinstance(vals, Value):
        ctx.fail("index_put with non-tensor values")

    bshape = broadcast(*[t.shape for t in idx])
    if prod(bshape) == 0:
        ctx.fail("index_put with an empty index")
    # index_put / x[i] = v / index_fill wrap -1 like torch; index_add and index_copy, which the
    # default decompositions turn into index_put, raise in torch: their nodes remember the op
    orig = str(ctx.node.meta.get("original_aten", ""))
    what = orig.split(".")[1] if orig.startswith(("aten.index_add", "aten.index_copy")) else "index_put"
    wrap = what == "index_put"
    for q, t in enumerate(idx):
        check_const_index(ctx, t, x.shape[lead + q], wrap, what)
    if vals.dtype != x.dtype:
        vals = make_ew(ctx, "copy", [vals], compute=x.dtype, out=ctx.new("vals", vals.shape, x.dtype))
    attrs = {"nidx": len(idx), "bshape": bshape, "wrap": wrap, "accumulate": bool(a.get("accumulate", False))}
    if lead:
        attrs["lead"] = lead
    ctx.emit("index_put", [x, *idx, vals], attrs, [out])
    return out


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


def _emit_scatter_reduce(em: EmitCtx, node: Node) -> None:
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
        em.line(pad + f"int64_t u_j = (int64_t){I}[{lin(names, ist)}];")
        em.line(pad + f"if (u_j < 0 || u_j >= {sint(n)}) return PT2C_ERR_INDEX;")  # no wrap: torch raises for -1
        return lin(names, ys, dim, "(size_t)u_j")

    if not incl:
        names, k = index_loops(em, idx.shape)
        at = target("    " * k, names)
        em.line("    " * k + f"{Y}[{at}] = {lit(out.dtype, _reduce_init(red, out.dtype))};")
        close_loops(em, k)
    names, k = index_loops(em, idx.shape)
    pad = "    " * k
    at = target(pad, names)
    em.line(pad + f"{t} u_v = {S}[{lin(names, sst)}];")
    step = {"sum": f"{Y}[{at}] += u_v;", "mean": f"{Y}[{at}] += u_v; {C}[{at}] += 1;",
            "prod": f"{Y}[{at}] *= u_v;",
            "amax": f"if (u_v != u_v || u_v > {Y}[{at}]) {Y}[{at}] = u_v;",
            "amin": f"if (u_v != u_v || u_v < {Y}[{at}]) {Y}[{at}] = u_v;"}[red]
    em.line(pad + step)
    close_loops(em, k)
    if red == "mean":
        em.line(f"for (size_t u_c = 0; u_c < {x.numel}; u_c++) {{")
        em.line(f"    int64_t u_d = {C}[u_c] == 0 ? 1 : {C}[u_c];")
        if out.dtype in FLOATS:
            em.line(f"    {Y}[u_c] = ({t})({Y}[u_c] / ({t})u_d);")
        else:
            em.line(f"    int64_t u_q = (int64_t){Y}[u_c] / u_d, u_r = (int64_t){Y}[u_c] % u_d;")
            em.line(f"    {Y}[u_c] = ({t})((u_r != 0 && ((u_r < 0) != (u_d < 0))) ? u_q - 1 : u_q);")
        em.line("}")


def _check_scatter_reduce(node: Node) -> None:
    red = node.attrs["reduce"]
    need(red in ("sum", "prod", "mean", "amax", "amin"), f"reduce {red!r}")
    arity(node, 3, 2 if red == "mean" else 1)
    x, idx, src = node.inputs
    dim = _dim(node, len(x.shape))
    dtype_in(idx, INTS, "index")
    need(type(node.attrs["include_self"]) is bool, "include_self is not a bool")
    need(len(idx.shape) == len(x.shape) == len(src.shape) and all(i <= s for i, s in zip(idx.shape, src.shape))
         and all(i <= n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != dim),
         f"index {list(idx.shape)} does not fit src {list(src.shape)} and x {list(x.shape)}")
    need(src.dtype == x.dtype, f"src is {src.dtype}, x {x.dtype}")
    result(node.outputs[0], x.shape, x.dtype)
    if red == "mean":
        result(node.outputs[1], x.shape, "int64", "count")


defop("scatter_reduce", _ref_scatter_reduce, _emit_scatter_reduce, rule=_check_scatter_reduce)


@lowers("aten.scatter_reduce.two")
def _lower_scatter_reduce(ctx: LowerCtx, a: dict[str, Any]) -> Value:
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
    dim = norm_dim(a["dim"], len(x.shape))
    _scatter_reduce_node(ctx, x, idx, src, dim, red, bool(a.get("include_self", True)), out)
    return out


def _scatter_reduce_node(ctx: LowerCtx, x: Value, idx: Value, src: Value, dim: int, red: str, incl: bool, out: Value) -> None:
    check_const_index(ctx, idx, x.shape[dim], False, "scatter_reduce")
    src = cast_to(ctx, src, out.dtype, "src")
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


def _emit_masked_scatter(em: EmitCtx, node: Node) -> None:
    x, mask, src = node.inputs
    out = node.outputs[0]
    X, M, S, Y = em.ptr(x), em.ptr(mask), em.ptr(src), em.ptr(out)
    em.errors.add("INDEX")
    shape = out.shape
    xs = broadcast_strides(x.shape, contiguous_strides(x.shape), shape)
    ms = broadcast_strides(mask.shape, contiguous_strides(mask.shape), shape)
    em.line("size_t u_k = 0;")
    names, k = index_loops(em, shape)
    pad = "    " * k
    em.line(pad + f"size_t u_at = {lin(names, contiguous_strides(shape))};")
    em.line(pad + f"if ({M}[{lin(names, ms)}]) {{")
    em.line(pad + f"    if (u_k >= {src.numel}) return PT2C_ERR_INDEX;")
    em.line(pad + f"    {Y}[u_at] = {S}[u_k++];")
    em.line(pad + f"}} else {Y}[u_at] = {X}[{lin(names, xs)}];")
    close_loops(em, k)
    em.line("(void)u_k;")


def _check_masked_scatter(node: Node) -> None:
    arity(node, 3)
    x, mask, src = node.inputs
    dtype_in(mask, ("bool",), "mask")
    need(src.dtype == x.dtype, f"src is {src.dtype}, x {x.dtype}")
    result(node.outputs[0], broadcast(x.shape, mask.shape), x.dtype)


defop("masked_scatter", _ref_masked_scatter, _emit_masked_scatter, rule=_check_masked_scatter)


@lowers("aten.masked_scatter.default")
def _lower_masked_scatter(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, mask, src, out = a["self"], a["mask"], a["source"], ctx.out()
    if out.numel == 0:
        return empty_output(ctx, out)
    src = cast_to(ctx, src, out.dtype, "src")
    mask = cast_to(ctx, mask, "bool", "mask")
    ctx.emit("masked_scatter", [x, mask, src], {}, [out])
    return out


# ---------------------------------------------------------------- EmbeddingBag

_BAG_MODES = ("sum", "mean", "max")


def _ref_embedding_bag(node: Node, w: np.ndarray, idx: np.ndarray, offs: np.ndarray, *psw: np.ndarray) -> np.ndarray:
    at = node.attrs
    n_bags, last = node.outputs[0].shape[0], at["include_last_offset"]
    offs, idx = offs.astype(np.int64), idx.astype(np.int64)
    if n_bags and (offs[0] != 0 or (np.diff(offs) < 0).any() or (offs > len(idx)).any()):
        raise IndexError("embedding_bag: offsets must start at 0, not decrease and stay within the indices")
    check_index(idx, w.shape[0], False, "embedding_bag")
    out = np.zeros((n_bags, w.shape[1]), np.float64)
    for b in range(n_bags):
        j = np.arange(offs[b], offs[b + 1] if b + 1 < n_bags or last else len(idx))
        j = j[idx[j] != at["padding_idx"]]
        rows = w[idx[j]].astype(np.float64) * (psw[0][j, None] if psw else 1.0)
        if len(j):
            out[b] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[at["mode"]]
    return out.astype(np.float32)


def _emit_embedding_bag(em: EmitCtx, node: Node) -> None:
    at = node.attrs
    w, idx, offs = node.inputs[:3]
    psw = em.ptr(node.inputs[3]) if len(node.inputs) > 3 else "NULL"
    em.errors.add("INDEX")
    em.line(f"if (pt2c_embedding_bag({em.ptr(node.outputs[0])}, {em.ptr(w)}, {em.ptr(idx)}, {em.ptr(offs)}, {psw}, "
            f"{idx.numel}, {node.outputs[0].shape[0]}, {w.shape[0]}, {w.shape[1]}, {_BAG_MODES.index(at['mode'])}, "
            f"{int(at['include_last_offset'])}, {at['padding_idx']})) return PT2C_ERR_INDEX;")


def _check_embedding_bag(node: Node) -> None:
    """weight [N, D] float32, indices [n] int64, offsets [bags (+1 with include_last_offset)] int64, optional
    per-sample weights [n] (sum mode) -> [bags, D] float32."""
    arity(node, (3, 4))
    w, idx, offs = node.inputs[:3]
    at = node.attrs
    need(at.get("mode") in _BAG_MODES and type(at.get("include_last_offset")) is bool
         and type(at.get("padding_idx")) is int, f"attrs {at}")
    dtype_in(w, ("float32",), "weight")
    dtype_in(idx, ("int64",), "indices")
    dtype_in(offs, ("int64",), "offsets")
    need(len(w.shape) == 2 and len(idx.shape) == 1 and len(offs.shape) == 1, "weight [N, D], 1-d indices and offsets")
    if len(node.inputs) == 4:
        need(at["mode"] == "sum" and node.inputs[3].shape == idx.shape and node.inputs[3].dtype == "float32",
             "per-sample weights: float32 like the indices, sum mode only")
    result(node.outputs[0], (offs.shape[0] - int(at["include_last_offset"]), w.shape[1]), "float32")


defop("embedding_bag", _ref_embedding_bag, _emit_embedding_bag, kernels=("embedding_bag",),
      rule=_check_embedding_bag, flops=lambda n: n.inputs[1].numel * n.inputs[0].shape[1])


@lowers("aten._embedding_bag.default", "aten._embedding_bag_forward_only.default")
def _lower_embedding_bag(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    w, idx, offs, psw = a["weight"], a["indices"], a["offsets"], a.get("per_sample_weights")
    if any(output_used(ctx, i) for i in (1, 2, 3)):
        ctx.fail("only the bags' values (output 0) are supported; offset2bag, bag_size and max_indices are not")
    if w.dtype != "float32" or idx.dtype != "int64" or offs.dtype != "int64" or len(idx.shape) != 1:
        ctx.fail("float32 weights with 1-d int64 indices and offsets (a 2-d input: flatten it and pass offsets)")
    attrs = {"mode": _BAG_MODES[a.get("mode", 0)], "include_last_offset": bool(a.get("include_last_offset", False)),
             "padding_idx": int(-1 if a.get("padding_idx") is None else a["padding_idx"])}
    out = ctx.outs()[0]
    ctx.emit("embedding_bag", [w, idx, offs] + ([psw] if psw is not None else []), attrs, [out])
    return (out, None, None, None)


# core ATen ops of this family that pt2c does not lower, and why (docs/ops.md)
UNSUPPORTED["aten.embedding_dense_backward.default"] = BACKWARD
