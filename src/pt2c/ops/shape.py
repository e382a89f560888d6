"""Views and data movement.

Every IR Value is a dense row-major tensor, so:
- `view`: output 0 aliases input 0's storage at an element offset (reshape, squeeze,
  unsqueeze, flatten, contiguous slices/selects). No code, no copy.
- `strided`: out[i0..ik] = in[offset + sum(i_d * strides[d])] (permute, transpose,
  expand, strided slice, select). A copy loop unless fusion folds it into its consumer.
- `cat`, `gather` (index_select / embedding / x[idx]), `pad`: data movement with their own loops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value
from pt2c.ops import defop, lowers


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def _norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _as_strided(x: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> np.ndarray:
    flat = np.ascontiguousarray(x).reshape(-1)
    if not shape or 0 in shape:
        return flat[offset:offset + 1].reshape(()) if not shape else np.empty(shape, x.dtype)
    base = flat[offset:]
    return np.lib.stride_tricks.as_strided(base, shape, [s * x.itemsize for s in strides]).copy()


# ---------------------------------------------------------------- view (alias)

def _ref_view(node: Node, x: np.ndarray) -> np.ndarray:
    out = node.outputs[0]
    off = node.attrs.get("offset", 0)
    return np.ascontiguousarray(x).reshape(-1)[off:off + out.numel].reshape(out.shape)


def _emit_view(em: Any, node: Node) -> None:
    pass  # storage is shared; the emitter defines the pointer


defop("view", _ref_view, _emit_view, alias=True)


def make_view(ctx: Any, x: Value, out: Value, offset: int = 0) -> Value:
    ctx.emit("view", [x], {"offset": offset}, [out])
    return out


@lowers("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.squeeze.dims",
        "aten.squeeze.dim", "aten.squeeze.default", "aten.unsqueeze.default", "aten.flatten.using_ints",
        "aten.view_copy.default", "aten.unflatten.int")
def _lower_view(ctx: Any, a: dict[str, Any]) -> Value:
    x = a["self"]
    out = ctx.out()
    if out.shape == x.shape:
        return x
    return make_view(ctx, x, out)


# ---------------------------------------------------------------- strided read

def _ref_strided(node: Node, x: np.ndarray) -> np.ndarray:
    out = node.outputs[0]
    return _as_strided(x, out.shape, node.attrs["strides"], node.attrs["offset"])


def _emit_strided(em: Any, node: Node) -> None:
    em.elementwise(node)


defop("strided", _ref_strided, _emit_strided)


def make_strided(ctx: Any, x: Value, out: Value, strides: tuple[int, ...], offset: int) -> Value:
    """Strided read of x; a plain alias when the result is contiguous in x's storage."""
    live = [(n, s) for n, s in zip(out.shape, strides) if n != 1]
    want = [s for s in contiguous_strides(tuple(n for n, _ in live))]
    if all(s == w for (_, s), w in zip(live, want)) or out.numel == 0:
        return make_view(ctx, x, out, offset)
    ctx.emit("strided", [x], {"strides": tuple(strides), "offset": offset}, [out])
    return out


@lowers("aten.permute.default", "aten.permute_copy.default")
def _lower_permute(ctx: Any, a: dict[str, Any]) -> Value:
    x = a["self"]
    dims = [_norm_dim(d, len(x.shape)) for d in a["dims"]]
    st = contiguous_strides(x.shape)
    return make_strided(ctx, x, ctx.out(), tuple(st[d] for d in dims), 0)


@lowers("aten.transpose.int", "aten.t.default", "aten.numpy_T.default")
def _lower_transpose(ctx: Any, a: dict[str, Any]) -> Value:
    x = a["self"]
    r = len(x.shape)
    d0, d1 = (_norm_dim(a.get("dim0", 0), r), _norm_dim(a.get("dim1", 1), r)) if r >= 2 else (0, 0)
    perm = list(range(r))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    st = contiguous_strides(x.shape)
    return make_strided(ctx, x, ctx.out(), tuple(st[d] for d in perm), 0)


@lowers("aten.expand.default", "aten.expand_copy.default")
def _lower_expand(ctx: Any, a: dict[str, Any]) -> Value:
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
    dim = _norm_dim(a.get("dim", 0), len(x.shape))
    n = x.shape[dim]
    start = a.get("start") or 0
    start = start + n if start < 0 else start
    start = min(max(start, 0), n)
    step = a.get("step", 1) or 1
    st = contiguous_strides(x.shape)
    return tuple(s * step if d == dim else s for d, s in enumerate(st)), start * st[dim]


@lowers("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _lower_slice(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    strides, offset = slice_view(x, a)
    return make_strided(ctx, x, out, strides, offset)


@lowers("aten.select.int", "aten.select_copy.int")
def _lower_select(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    dim = _norm_dim(a["dim"], len(x.shape))
    idx = a["index"]
    idx = idx + x.shape[dim] if idx < 0 else idx
    st = contiguous_strides(x.shape)
    strides = tuple(s for d, s in enumerate(st) if d != dim)
    return make_strided(ctx, x, out, strides, idx * st[dim])


@lowers("aten.split_with_sizes.default", "aten.split.Tensor", "aten.split_with_sizes_copy.default",
        "aten.unbind.int", "aten.chunk.default")
def _lower_split(ctx: Any, a: dict[str, Any]) -> list[Value]:
    x = a["self"]
    outs = ctx.outs()
    dim = _norm_dim(a.get("dim", 0), len(x.shape))
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
def _lower_repeat(ctx: Any, a: dict[str, Any]) -> Value:
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


def _emit_cat(em: Any, node: Node) -> None:
    em.cat(node)


defop("cat", _ref_cat, _emit_cat)


@lowers("aten.cat.default", "aten.concat.default")
def _lower_cat(ctx: Any, a: dict[str, Any]) -> Value:
    out = ctx.out()
    xs = [t for t in a["tensors"] if t.numel > 0 or len(t.shape) == len(out.shape)]
    xs = [t for t in xs if len(t.shape) == len(out.shape)]
    dim = _norm_dim(a.get("dim", 0), len(out.shape))
    if len(xs) == 1:
        return xs[0]
    ctx.emit("cat", xs, {"dim": dim}, [out])
    return out


@lowers("aten.stack.default")
def _lower_stack(ctx: Any, a: dict[str, Any]) -> Value:
    out = ctx.out()
    dim = _norm_dim(a.get("dim", 0), len(out.shape))
    views = []
    for t in a["tensors"]:
        shape = list(t.shape)
        shape.insert(dim, 1)
        views.append(make_view(ctx, t, ctx.new("unsq", tuple(shape), t.dtype)))
    ctx.emit("cat", views, {"dim": dim}, [out])
    return out


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


def check_const_index(ctx: Any, idx: Value, n: int, wrap: bool, what: str) -> None:
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


def _emit_gather(em: Any, node: Node) -> None:
    em.gather(node)


defop("gather", _ref_gather, _emit_gather)


@lowers("aten.embedding.default")
def _lower_embedding(ctx: Any, a: dict[str, Any]) -> Value:
    w, idx = a["weight"], a["indices"]
    check_const_index(ctx, idx, w.shape[0], False, "embedding")
    ctx.emit("gather", [w, idx], {"dim": 0, "wrap": False}, [ctx.out()])  # torch raises for -1
    return ctx.out()


@lowers("aten.index_select.default")
def _lower_index_select(ctx: Any, a: dict[str, Any]) -> Value:
    x, idx, out = a["self"], a["index"], ctx.out()
    dim = _norm_dim(a["dim"], max(len(x.shape), 1))
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
def _lower_index(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    idx = list(a["indices"])
    used = [i for i, t in enumerate(idx) if t is not None]
    if used and all(idx[i].is_const for i in used):
        return lower_index_const(ctx, x, idx, out)
    if len(used) != 1 or idx[used[0]].dtype == "bool":
        from pt2c.ops.extra import lower_index_multi

        return lower_index_multi(ctx, x, idx, out)
    d = used[0]
    ctx.emit("gather", [x, idx[d]], {"dim": d, "wrap": True}, [out])  # x[-1] is the last row, as in torch
    return out


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


def _emit_pad(em: Any, node: Node) -> None:
    em.pad(node)


defop("pad", _ref_pad, _emit_pad)


@lowers("aten.constant_pad_nd.default")
def _lower_pad(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    flat = list(a["pad"])
    pads = [(0, 0)] * len(x.shape)
    for i in range(len(flat) // 2):
        d = len(x.shape) - 1 - i
        pads[d] = (flat[2 * i], flat[2 * i + 1])
    ctx.emit("pad", [x], {"pads": tuple(pads), "value": a.get("value", 0)}, [out])
    return out


# ---------------------------------------------------------------- take: gather by constant flat offsets

def _ref_take(node: Node, x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1)[offsets.reshape(-1)].reshape(node.outputs[0].shape)


def _emit_take(em: Any, node: Node) -> None:
    x, offs = node.inputs
    out = node.outputs[0]
    em.line(f"for (size_t i = 0; i < {out.numel}; i++) {em.ptr(out)}[i] = {em.ptr(x)}[{em.ptr(offs)}[i]];")


defop("take", _ref_take, _emit_take)


def lower_index_const(ctx: Any, x: Value, indices: list[Any], out: Value) -> Value:
    """Advanced indexing with constant index tensors: offsets computed by torch itself."""
    import torch

    flat = torch.arange(x.numel, dtype=torch.int64).reshape(x.shape)
    # a None entry of aten.index means "all of this dim" (a full slice), not a new axis
    idx = [slice(None) if t is None else torch.from_numpy(np.array(t.data)) for t in indices]
    offs = flat[tuple(idx)].contiguous().numpy()
    dt = np.int32 if x.numel < 2**31 else np.int64
    ctx.emit("take", [x, ctx.const(offs.astype(dt), out.name + "_offsets")], {}, [out])
    return out
