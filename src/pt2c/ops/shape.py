"""Shapes and data movement: views, strided reads and writes, cat / stack, padding.

Views (reshape, squeeze, flatten: aliases, no code), strided reads (permute, transpose, expand,
slice, select, split, repeat, flip, diagonal, as_strided), strided writes (slice_scatter,
select_scatter), cat / stack, constant / reflection / replication padding.

Every IR Value is a dense row-major tensor, so:
- `view`: output 0 aliases input 0's storage at an element offset (reshape, squeeze,
  unsqueeze, flatten, contiguous slices/selects). No code, no copy.
- `strided`: out[i0..ik] = in[offset + sum(i_d * strides[d])] (permute, transpose,
  expand, strided slice, select). A copy loop unless fusion folds it into its consumer.
- `strided_scatter`: x with src written at those positions.
- `cat`, `pad`: data movement with their own loops; reflection / replication padding is a `take`
  (ops/index.py) through a constant offset table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value, ctype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.elementwise import cast_to
from pt2c.ops.registry import arity, defop, ints, lowers, need, result, within, is_size
from pt2c.ops.util import as_strided, close_loops, contiguous_strides, empty_output, index_loops, lin, lit, norm_dim


# ---------------------------------------------------------------- view (alias)

def _ref_view(node: Node, x: np.ndarray) -> np.ndarray:
    out = node.outputs[0]
    off = node.attrs.get("offset", 0)
    return np.ascontiguousarray(x).reshape(-1)[off:off + out.numel].reshape(out.shape)


def _emit_view(em: EmitCtx, node: Node) -> None:
    pass  # storage is shared; the emitter defines the pointer


def _check_view(node: Node) -> None:
    """The same elements (or a contiguous run of them, at `offset`) under another shape."""
    arity(node, 1)
    x, out = node.inputs[0], node.outputs[0]
    off = node.attrs.get("offset", 0)
    need(out.dtype == x.dtype, f"a view of a {x.dtype} tensor as {out.dtype}")
    need(is_size(off) and off >= 0 and off + out.numel <= max(x.numel, off),
         f"{out.numel} elements at offset {off} of a {x.numel}-element tensor")


defop("view", _ref_view, _emit_view, alias=True, rule=_check_view)


def make_view(ctx: LowerCtx, x: Value, out: Value, offset: int = 0) -> Value:
    ctx.emit("view", [x], {"offset": offset}, [out])
    return out


@lowers("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.squeeze.dims",
        "aten.squeeze.dim", "aten.squeeze.default", "aten.unsqueeze.default", "aten.flatten.using_ints",
        "aten.view_copy.default", "aten.unflatten.int")
def _lower_view(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x = a["self"]
    out = ctx.out()
    if out.shape == x.shape:
        return x
    return make_view(ctx, x, out)


# ---------------------------------------------------------------- strided read

def _ref_strided(node: Node, x: np.ndarray) -> np.ndarray:
    out = node.outputs[0]
    return as_strided(x, out.shape, node.attrs["strides"], node.attrs["offset"])


def _emit_strided(em: EmitCtx, node: Node) -> None:
    out, x = node.outputs[0], node.inputs[0]
    operands = [(em.ptr(out), contiguous_strides(out.shape), 0),
                (em.ptr(x), tuple(node.attrs["strides"]), node.attrs["offset"])]
    em.strided_loop(out.shape, operands, lambda ix: f"{operands[0][0]}[{ix[0]}] = {operands[1][0]}[{ix[1]}];")


def _check_strided(node: Node) -> None:
    arity(node, 1)
    x, out = node.inputs[0], node.outputs[0]
    st, off = node.attrs["strides"], node.attrs["offset"]
    need(ints(st, len(out.shape)) and is_size(off), "strides / offset: one int per output dim / an int")
    need(out.dtype == x.dtype, f"a strided read of a {x.dtype} tensor as {out.dtype}")
    within(out.shape, st, off, x.numel, "the strided read")


defop("strided", _ref_strided, _emit_strided, rule=_check_strided)


def make_strided(ctx: LowerCtx, x: Value, out: Value, strides: tuple[int, ...], offset: int) -> Value:
    """Strided read of x; a plain alias when the result is contiguous in x's storage."""
    live = [(n, s) for n, s in zip(out.shape, strides) if n != 1]
    want = [s for s in contiguous_strides(tuple(n for n, _ in live))]
    if all(s == w for (_, s), w in zip(live, want)) or out.numel == 0:
        return make_view(ctx, x, out, offset)
    ctx.emit("strided", [x], {"strides": tuple(strides), "offset": offset}, [out])
    return out


@lowers("aten.permute.default", "aten.permute_copy.default")
def _lower_permute(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x = a["self"]
    dims = [norm_dim(d, len(x.shape)) for d in a["dims"]]
    st = contiguous_strides(x.shape)
    return make_strided(ctx, x, ctx.out(), tuple(st[d] for d in dims), 0)


@lowers("aten.transpose.int", "aten.t.default", "aten.numpy_T.default")
def _lower_transpose(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x = a["self"]
    r = len(x.shape)
    d0, d1 = (norm_dim(a.get("dim0", 0), r), norm_dim(a.get("dim1", 1), r)) if r >= 2 else (0, 0)
    perm = list(range(r))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    st = contiguous_strides(x.shape)
    return make_strided(ctx, x, ctx.out(), tuple(st[d] for d in perm), 0)


@lowers("aten.expand.default", "aten.expand_copy.default")
def _lower_expand(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    lead = len(out.shape) - len(x.shape)
    st = contiguous_strides(x.shape)
    strides = [0] * lead + [0 if (x.shape[i] == 1 and out.shape[lead + i] != 1) else st[i] for i in range(len(x.shape))]
    if out.shape == x.shape:
        return x
    return make_strided(ctx, x, out, tuple(strides), 0)


def slice_view(x: Value, a: dict[str, Any]) -> tuple[tuple[int, ...], int]:
    """(strides, element offset) of x[..., start::step, ...] along a["dim"] (aten.slice's and
    aten.slice_scatter's arguments; start clamped like torch, the length comes from the output)."""
    dim = norm_dim(a.get("dim", 0), len(x.shape))
    n = x.shape[dim]
    start = a.get("start") or 0
    start = start + n if start < 0 else start
    start = min(max(start, 0), n)
    step = a.get("step", 1) or 1
    st = contiguous_strides(x.shape)
    return tuple(s * step if d == dim else s for d, s in enumerate(st)), start * st[dim]


@lowers("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _lower_slice(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    strides, offset = slice_view(x, a)
    return make_strided(ctx, x, out, strides, offset)


@lowers("aten.select.int", "aten.select_copy.int")
def _lower_select(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    dim = norm_dim(a["dim"], len(x.shape))
    idx = a["index"]
    idx = idx + x.shape[dim] if idx < 0 else idx
    st = contiguous_strides(x.shape)
    strides = tuple(s for d, s in enumerate(st) if d != dim)
    return make_strided(ctx, x, out, strides, idx * st[dim])


@lowers("aten.split_with_sizes.default", "aten.split.Tensor", "aten.split_with_sizes_copy.default",
        "aten.unbind.int", "aten.chunk.default")
def _lower_split(ctx: LowerCtx, a: dict[str, Any]) -> list[Value]:
    x = a["self"]
    outs = ctx.outs()
    dim = norm_dim(a.get("dim", 0), len(x.shape))
    st = contiguous_strides(x.shape)
    res = []
    start = 0
    unbind = ctx.target == "aten.unbind.int"
    for o in outs:
        if unbind:
            strides = tuple(s for d, s in enumerate(st) if d != dim)
            res.append(make_strided(ctx, x, o, strides, start * st[dim]))
            start += 1
        else:
            res.append(make_strided(ctx, x, o, st, start * st[dim]))
            start += o.shape[dim]
    return res


@lowers("aten.repeat.default")
def _lower_repeat(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    # repeat = view as [1, s0, 1, s1, ...], expand to [r0, s0, r1, s1, ...], reshape
    x, out = a["self"], ctx.out()
    reps = list(a["repeats"])
    shape = [1] * (len(reps) - len(x.shape)) + list(x.shape)
    st = contiguous_strides(tuple(shape))
    big_shape, big_strides = [], []
    for r, s, t in zip(reps, shape, st):
        big_shape += [r, s]
        big_strides += [0, t if s != 1 else 0]
    tmp = ctx.new("repeat", tuple(big_shape), x.dtype)
    make_strided(ctx, x, tmp, tuple(big_strides), 0)
    return make_view(ctx, tmp, out)


# ---------------------------------------------------------------- cat

def _ref_cat(node: Node, *xs: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(x) for x in xs], axis=node.attrs["dim"])


def _emit_cat(em: EmitCtx, node: Node) -> None:
    out = node.outputs[0]
    dim = node.attrs["dim"]
    ost = contiguous_strides(out.shape)
    at = 0
    for v in node.inputs:
        if v.numel == 0:
            em.line(f"(void){em.ptr(v)}; /* empty */")
            continue
        operands = [(em.ptr(out), ost, at * ost[dim]), (em.ptr(v), contiguous_strides(v.shape), 0)]
        em.strided_loop(v.shape, operands, lambda ix, o=operands: f"{o[0][0]}[{ix[0]}] = {o[1][0]}[{ix[1]}];")
        at += v.shape[dim]


def _check_cat(node: Node) -> None:
    need(len(node.inputs) >= 1, "no inputs")
    arity(node, len(node.inputs))
    out, dim = node.outputs[0], node.attrs["dim"]
    need(type(dim) is int and 0 <= dim < len(out.shape), f"dim {dim} of a rank-{len(out.shape)} output")
    for v in node.inputs:
        need(v.dtype == out.dtype and len(v.shape) == len(out.shape)
             and all(a == b for d, (a, b) in enumerate(zip(v.shape, out.shape)) if d != dim),
             f"input %{v.name} {v.dtype}{list(v.shape)} does not fit along dim {dim}")
    shape = list(out.shape)
    shape[dim] = sum(v.shape[dim] for v in node.inputs)
    result(out, shape, out.dtype)


defop("cat", _ref_cat, _emit_cat, rule=_check_cat)


@lowers("aten.cat.default", "aten.concat.default")
def _lower_cat(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    out = ctx.out()
    xs = [t for t in a["tensors"] if t.numel > 0 or len(t.shape) == len(out.shape)]
    xs = [t for t in xs if len(t.shape) == len(out.shape)]
    dim = norm_dim(a.get("dim", 0), len(out.shape))
    if len(xs) == 1:
        return xs[0]
    ctx.emit("cat", xs, {"dim": dim}, [out])
    return out


@lowers("aten.stack.default")
def _lower_stack(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    out = ctx.out()
    dim = norm_dim(a.get("dim", 0), len(out.shape))
    views = []
    for t in a["tensors"]:
        shape = list(t.shape)
        shape.insert(dim, 1)
        views.append(make_view(ctx, t, ctx.new("unsq", tuple(shape), t.dtype)))
    ctx.emit("cat", views, {"dim": dim}, [out])
    return out


# ---------------------------------------------------------------- flip, diagonal (strided reads)

@lowers("aten.flip.default")
def _lower_flip(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    r = len(x.shape)
    dims = {norm_dim(d, r) for d in a["dims"]} if r else set()
    st = contiguous_strides(x.shape)
    strides = tuple(-s if d in dims and x.shape[d] > 1 else s for d, s in enumerate(st))
    off = sum((x.shape[d] - 1) * st[d] for d in dims)
    if x.numel == 0 or not dims:
        return x if not dims else make_view(ctx, x, out)
    return make_strided(ctx, x, out, strides, off)


@lowers("aten.diagonal.default", "aten.diagonal_copy.default")
def _lower_diagonal(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["input"] if "input" in a else a["self"], ctx.out()
    r = len(x.shape)
    d1, d2 = norm_dim(a.get("dim1", 0), r), norm_dim(a.get("dim2", 1), r)
    off = a.get("offset", 0)
    st = contiguous_strides(x.shape)
    strides = tuple(st[d] for d in range(r) if d not in (d1, d2)) + (st[d1] + st[d2],)
    start = off * st[d2] if off >= 0 else -off * st[d1]
    if out.numel == 0:
        start = 0
    return make_strided(ctx, x, out, strides, start)


# ---------------------------------------------------------------- as_strided (a strided read of a dense input)

@lowers("aten.as_strided.default", "aten.as_strided_copy.default")
def _lower_as_strided(ctx: LowerCtx, a: dict[str, Any]) -> Value:
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


# ---------------------------------------------------------------- constant padding

def _ref_pad(node: Node, x: np.ndarray) -> np.ndarray:
    pads = node.attrs["pads"]  # per dim (before, after), may be negative
    value = node.attrs["value"]
    y = x
    for d, (lo, hi) in enumerate(pads):
        if lo < 0:
            y = np.take(y, range(-lo, y.shape[d]), axis=d)
            lo = 0
        if hi < 0:
            y = np.take(y, range(y.shape[d] + hi), axis=d)
            hi = 0
        width = [(0, 0)] * y.ndim
        width[d] = (lo, hi)
        y = np.pad(y, width, constant_values=value)
    return y


def _emit_pad(em: EmitCtx, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    pads = node.attrs["pads"]
    Y = em.ptr(out)
    if any(lo > 0 or hi > 0 for lo, hi in pads):
        em.line(f"for (size_t i = 0; i < {out.numel}; i++) {Y}[i] = {lit(out.dtype, node.attrs['value'])};")
    ost, ist = contiguous_strides(out.shape), contiguous_strides(x.shape)
    shape, ooff, ioff = [], 0, 0
    for d, (lo, hi) in enumerate(pads):
        src0 = max(0, -lo)
        n = x.shape[d] - src0 - max(0, -hi)
        shape.append(max(n, 0))
        ooff += max(lo, 0) * ost[d]
        ioff += src0 * ist[d]
    operands = [(Y, ost, ooff), (em.ptr(x), ist, ioff)]
    em.strided_loop(tuple(shape), operands, lambda ix: f"{Y}[{ix[0]}] = {operands[1][0]}[{ix[1]}];")


def _check_pad(node: Node) -> None:
    arity(node, 1)
    x, pads = node.inputs[0], node.attrs["pads"]
    need(type(pads) is tuple and len(pads) == len(x.shape) and all(ints(p, 2) for p in pads),
         "pads: one (before, after) pair per dim")
    need(type(node.attrs["value"]) in (bool, int, float), "value is not a Python bool / int / float")
    result(node.outputs[0], [n + lo + hi for n, (lo, hi) in zip(x.shape, pads)], x.dtype)


defop("pad", _ref_pad, _emit_pad, rule=_check_pad)


@lowers("aten.constant_pad_nd.default")
def _lower_pad(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    flat = list(a["pad"])
    pads = [(0, 0)] * len(x.shape)
    for i in range(len(flat) // 2):
        d = len(x.shape) - 1 - i
        pads[d] = (flat[2 * i], flat[2 * i + 1])
    if not any(flat):  # padding by nothing: the same tensor
        return ctx.view(x, out.shape, out=out)
    ctx.emit("pad", [x], {"pads": tuple(pads), "value": a.get("value", 0)}, [out])
    return out


# ---------------------------------------------------------------- reflection / replication padding (constant offset tables)

def _pad_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    src = np.arange(n + lo + hi, dtype=np.int64) - lo
    if mode == "replicate":
        return np.clip(src, 0, n - 1)
    src = np.abs(src)
    return np.where(src >= n, 2 * (n - 1) - src, src)


@lowers("aten.reflection_pad1d.default", "aten.reflection_pad2d.default", "aten.reflection_pad3d.default",
        "aten.replication_pad1d.default", "aten.replication_pad2d.default", "aten.replication_pad3d.default")
def _lower_pad_mode(ctx: LowerCtx, a: dict[str, Any]) -> Value:
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
        return empty_output(ctx, out)
    flat_idx = np.arange(x.numel, dtype=np.int64).reshape(x.shape)
    axes = [_pad_index(n, lo, hi, mode) for n, (lo, hi) in zip(x.shape, pads)]
    offs = flat_idx[np.ix_(*axes)] if axes else flat_idx
    dt = np.int32 if x.numel < 2**31 else np.int64
    ctx.emit("take", [x, ctx.const(np.ascontiguousarray(offs).astype(dt), out.name + "_offsets")], {}, [out])
    return out


# ---------------------------------------------------------------- strided write: slice_scatter, select_scatter

def _ref_strided_scatter(node: Node, x: np.ndarray, src: np.ndarray) -> np.ndarray:
    y = np.array(x, copy=True).reshape(-1)
    pos = as_strided(np.arange(x.size, dtype=np.int64), src.shape, node.attrs["strides"], node.attrs["offset"])
    y[pos.reshape(-1)] = np.asarray(src).reshape(-1)
    return y.reshape(x.shape)


def _emit_strided_scatter(em: EmitCtx, node: Node) -> None:
    x, src = node.inputs
    out = node.outputs[0]
    X, S, Y = em.ptr(x), em.ptr(src), em.ptr(out)
    t = ctype(out.dtype)
    em.line(f"memcpy({Y}, {X}, {x.numel} * sizeof({t}));")
    names, k = index_loops(em, src.shape)
    pad = "    " * k
    dst = lin(names, node.attrs["strides"])
    off = node.attrs["offset"]
    em.line(pad + f"{Y}[{off} + {dst}] = {S}[{lin(names, contiguous_strides(src.shape))}];")
    close_loops(em, k)


def _check_strided_scatter(node: Node) -> None:
    arity(node, 2)
    x, src = node.inputs
    st, off = node.attrs["strides"], node.attrs["offset"]
    need(ints(st, len(src.shape)) and is_size(off), "strides / offset: one int per src dim / an int")
    need(src.dtype == x.dtype, f"src is {src.dtype}, x {x.dtype}")
    within(src.shape, st, off, x.numel, "the strided write")
    result(node.outputs[0], x.shape, x.dtype)


defop("strided_scatter", _ref_strided_scatter, _emit_strided_scatter, rule=_check_strided_scatter)


def _strided_scatter(ctx: LowerCtx, x: Value, src: Value, strides: tuple[int, ...], offset: int) -> Value:
    out = ctx.out()
    if src.numel == 0 or x.numel == 0:
        return x
    src = cast_to(ctx, src, out.dtype, "src")
    ctx.emit("strided_scatter", [x, src], {"strides": tuple(strides), "offset": int(offset)}, [out])
    return out


@lowers("aten.slice_scatter.default")
def _lower_slice_scatter(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, src = a["self"], a["src"]
    strides, offset = slice_view(x, a)
    return _strided_scatter(ctx, x, src, strides, offset)


@lowers("aten.select_scatter.default")
def _lower_select_scatter(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, src = a["self"], a["src"]
    r = len(x.shape)
    dim = norm_dim(a["dim"], r)
    idx = a["index"]
    idx = idx + x.shape[dim] if idx < 0 else idx
    st = contiguous_strides(x.shape)
    strides = tuple(s for d, s in enumerate(st) if d != dim)
    return _strided_scatter(ctx, x, src, strides, idx * st[dim])


# ---------------------------------------------------------------- size queries (dynamic shapes)

@lowers("aten.sym_size.int", "aten.sym_numel.default", "aten.sym_stride.int", "aten.sym_storage_offset.default")
def _lower_size_query(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    """A size of a tensor (with dynamic shapes): the export's own expression for it, as a size (pt2c.sym)."""
    return ctx.size(ctx.node.meta["val"])
