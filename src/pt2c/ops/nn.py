"""Normalisation, softmax, pooling and reductions."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value, ctype
from pt2c.ops import defop, lowers
from pt2c.ops.shape import _norm_dim


def _outer_inner(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    outer = int(np.prod(shape[:dim], dtype=np.int64))
    inner = int(np.prod(shape[dim + 1:], dtype=np.int64))
    return outer, shape[dim] if shape else 1, inner


# ---------------------------------------------------------------- layer norm / rms norm

def _ref_layer_norm(node: Node, x: np.ndarray, *wb: np.ndarray) -> np.ndarray:
    n = node.attrs["normalized"]
    axes = tuple(range(x.ndim - n, x.ndim))
    x64 = x.astype(np.float64)
    mu = x64.mean(axes, keepdims=True)
    var = x64.var(axes, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + node.attrs["eps"])
    i = 0
    if node.attrs["has_weight"]:
        y = y * wb[i]
        i += 1
    if node.attrs["has_bias"]:
        y = y + wb[i]
    return y.astype(np.float32)


def _emit_layer_norm(em: Any, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    cols = int(np.prod(x.shape[len(x.shape) - node.attrs["normalized"]:]))
    rows = x.numel // max(cols, 1)
    i = 1
    w = b = "NULL"
    if node.attrs["has_weight"]:
        w = em.ptr(node.inputs[i])
        i += 1
    if node.attrs["has_bias"]:
        b = em.ptr(node.inputs[i])
    em.line(f"pt2c_layer_norm({em.ptr(out)}, {em.ptr(x)}, {w}, {b}, {rows}, {cols}, {em.flt(node.attrs['eps'])});")


defop("layer_norm", _ref_layer_norm, _emit_layer_norm, kernels=("norm",), flops=lambda n: 8 * n.outputs[0].numel)


@lowers("aten.native_layer_norm.default", "aten.layer_norm.default")
def _lower_layer_norm(ctx: Any, a: dict[str, Any]) -> Any:
    x, w, b = a["input"], a.get("weight"), a.get("bias")
    if x.dtype != "float32":
        ctx.fail(f"layer_norm is implemented for float32 only (got {x.dtype})")
    outs = ctx.outs()
    out = outs[0]
    ins = [x] + [t for t in (w, b) if t is not None]
    ctx.emit("layer_norm", ins, {"normalized": len(a["normalized_shape"]), "eps": float(a.get("eps", 1e-5)),
                                 "has_weight": w is not None, "has_bias": b is not None}, [out])
    if len(outs) == 3:
        from pt2c.ops.extra import output_used

        if output_used(ctx, 1) or output_used(ctx, 2):
            # the saved mean / rstd are read: compute them with the moments loop
            cols = int(np.prod(x.shape[len(x.shape) - len(a["normalized_shape"]):], dtype=np.int64))
            rows = x.numel // max(cols, 1)
            mo, ro = ctx.new("mean", (rows,), "float32"), ctx.new("rstd", (rows,), "float32")
            ctx.emit("moments_norm", [x], {"view": (1, rows, cols), "eps": float(a.get("eps", 1e-5))},
                     [ctx.new("norm", x.shape, "float32"), mo, ro])
            return (out, ctx.view(mo, outs[1].shape, out=outs[1]), ctx.view(ro, outs[2].shape, out=outs[2]))
        return (out, None, None)
    return out


def _ref_rms_norm(node: Node, x: np.ndarray, *w: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + node.attrs["eps"])
    if w:
        y = y * w[0]
    return y.astype(np.float32)


def _emit_rms_norm(em: Any, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    cols = x.shape[-1]
    w = em.ptr(node.inputs[1]) if len(node.inputs) > 1 else "NULL"
    em.line(f"pt2c_rms_norm({em.ptr(out)}, {em.ptr(x)}, {w}, {x.numel // cols}, {cols}, {em.flt(node.attrs['eps'])});")


defop("rms_norm", _ref_rms_norm, _emit_rms_norm, kernels=("norm",), flops=lambda n: 4 * n.outputs[0].numel)


@lowers("aten.rms_norm.default")
def _lower_rms_norm(ctx: Any, a: dict[str, Any]) -> Value:
    x, w = a["input"], a.get("weight")
    if x.dtype != "float32":
        ctx.fail("rms_norm is implemented for float32 tensors")
    eps = a.get("eps")
    if eps is None:
        eps = float(np.finfo(np.float32).eps)
    nd = len(a["normalized_shape"])
    out = ctx.out()
    if nd != 1:
        # normalise over the trailing nd dims: view them as one
        cols = int(np.prod(x.shape[len(x.shape) - nd:], dtype=np.int64))
        x2 = ctx.view(x, (x.numel // max(cols, 1), cols))
        w2 = ctx.view(w, (cols,)) if w is not None else None
        y = ctx.new("rms", x2.shape, "float32")
        ctx.emit("rms_norm", [x2] + ([w2] if w2 is not None else []), {"eps": float(eps)}, [y])
        return ctx.view(y, out.shape, out=out)
    ctx.emit("rms_norm", [x] + ([w] if w is not None else []), {"eps": float(eps)}, [out])
    return out


# ---------------------------------------------------------------- batch norm (inference) = per-channel affine

def _ref_channel_affine(node: Node, x: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    shape = [1] * x.ndim
    shape[1] = -1
    return (x * scale.reshape(shape) + shift.reshape(shape)).astype(np.float32)


def _emit_channel_affine(em: Any, node: Node) -> None:
    x, s, b = node.inputs
    N, C = x.shape[0], x.shape[1]
    inner = x.numel // max(N * C, 1)
    em.line(f"pt2c_channel_affine({em.ptr(node.outputs[0])}, {em.ptr(x)}, {em.ptr(s)}, {em.ptr(b)}, {N}, {C}, {inner});")


defop("channel_affine", _ref_channel_affine, _emit_channel_affine, kernels=("norm",), flops=lambda n: 2 * n.outputs[0].numel)


@lowers("aten._native_batch_norm_legit_no_training.default", "aten.batch_norm.default",
        "aten._native_batch_norm_legit.no_stats", "aten.native_batch_norm.default")
def _lower_batch_norm(ctx: Any, a: dict[str, Any]) -> Any:
    x = a["input"]
    w, b, mean, var = a.get("weight"), a.get("bias"), a.get("running_mean"), a.get("running_var")
    eps = float(a.get("eps", 1e-5))
    if ctx.target == "aten._native_batch_norm_legit.no_stats" or (mean is None and var is None):
        from pt2c.ops.extra import lower_bn_no_stats

        return lower_bn_no_stats(ctx, a)
    if a.get("training") and ctx.target != "aten._native_batch_norm_legit_no_training.default":
        ctx.fail("batch_norm in training mode (call model.eval() before torch.export)")
    for t in (w, b, mean, var):
        if t is not None and not t.is_const:
            ctx.fail("batch_norm parameters must be constants")
    if mean is None or var is None:
        ctx.fail("batch_norm without running statistics")
    C = x.shape[1]
    inv = 1.0 / np.sqrt(var.data.astype(np.float64) + eps)
    scale = inv * (w.data if w is not None else 1.0)
    shift = (b.data if b is not None else 0.0) - mean.data * scale
    outs = ctx.outs()
    sv = ctx.const(scale.astype(np.float32).reshape(C), (w or mean).name + "_scale")
    bv = ctx.const(shift.astype(np.float32).reshape(C), (b or mean).name + "_shift")
    ctx.emit("channel_affine", [x, sv, bv], {}, [outs[0]])
    return (outs[0], None, None) if len(outs) == 3 else outs[0]


# ---------------------------------------------------------------- softmax

def _ref_softmax(node: Node, x: np.ndarray) -> np.ndarray:
    d = node.attrs["dim"]
    x64 = x.astype(np.float64)
    m = x64.max(d, keepdims=True)
    e = np.exp(x64 - m)
    s = e.sum(d, keepdims=True)
    y = (x64 - m) - np.log(s) if node.attrs["log"] else e / s
    return y.astype(np.float64 if node.outputs and node.outputs[0].dtype == "float64" else np.float32)


def _emit_softmax(em: Any, node: Node) -> None:
    x = node.inputs[0]
    outer, dim, inner = _outer_inner(x.shape, node.attrs["dim"])
    if x.dtype == "float64":  # a generated loop in double (the kernels are float32)
        X, Y = em.ptr(x), em.ptr(node.outputs[0])
        em.line(f"for (size_t u_o = 0; u_o < {outer}; u_o++) for (size_t u_i = 0; u_i < {inner}; u_i++) {{")
        em.line(f"    const double *u_x = {X} + u_o * {dim * inner} + u_i; double *u_y = {Y} + u_o * {dim * inner} + u_i;")
        em.line("    double u_m = -INFINITY, u_s = 0.0;")
        em.line(f"    for (size_t u_k = 0; u_k < {dim}; u_k++) if (u_x[u_k * {inner}] > u_m || u_x[u_k * {inner}] != u_x[u_k * {inner}]) u_m = u_x[u_k * {inner}];")
        em.line(f"    for (size_t u_k = 0; u_k < {dim}; u_k++) u_s += exp(u_x[u_k * {inner}] - u_m);")
        if node.attrs["log"]:
            em.line(f"    for (size_t u_k = 0; u_k < {dim}; u_k++) u_y[u_k * {inner}] = u_x[u_k * {inner}] - u_m - log(u_s);")
        else:
            em.line(f"    for (size_t u_k = 0; u_k < {dim}; u_k++) u_y[u_k * {inner}] = exp(u_x[u_k * {inner}] - u_m) / u_s;")
        em.line("}")
        return
    fn = "pt2c_log_softmax" if node.attrs["log"] else "pt2c_softmax"
    em.line(f"{fn}({em.ptr(node.outputs[0])}, {em.ptr(x)}, {outer}, {dim}, {inner});")


defop("softmax", _ref_softmax, _emit_softmax, kernels=("norm",), flops=lambda n: 5 * n.outputs[0].numel)


@lowers("aten._softmax.default", "aten.softmax.int", "aten._log_softmax.default", "aten.log_softmax.int")
def _lower_softmax(ctx: Any, a: dict[str, Any]) -> Value:
    x = a["self"]
    out = ctx.out()
    if x.dtype not in ("float32", "float64") or out.dtype != x.dtype:
        ctx.fail(f"softmax is implemented for float32 and float64 (got {x.dtype} -> {out.dtype})")
    dim = _norm_dim(a["dim"], len(x.shape)) if x.shape else 0
    if not x.shape:
        x = ctx.view(x, (1,))
    ctx.emit("softmax", [x], {"dim": dim, "log": "log_softmax" in ctx.target}, [out])
    return out


# ---------------------------------------------------------------- pooling

def _pool_windows(n: int, k: int, s: int, p: int, d: int, on: int) -> list[list[int]]:
    return [[i * s - p + j * d for j in range(k)] for i in range(on)]


def _ref_pool(node: Node, x: np.ndarray) -> np.ndarray:
    at = node.attrs
    N, C, H, W = x.shape
    OH, OW = node.outputs[0].shape[2:]
    (KH, KW), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["padding"]
    dh, dw = at.get("dilation", (1, 1))
    out = np.zeros((N, C, OH, OW), np.float32)
    for oh in range(OH):
        for ow in range(OW):
            hs = [h for h in range(oh * sh - ph, oh * sh - ph + (KH - 1) * dh + 1, dh)]
            ws = [w for w in range(ow * sw - pw, ow * sw - pw + (KW - 1) * dw + 1, dw)]
            hv = [h for h in hs if 0 <= h < H]
            wv = [w for w in ws if 0 <= w < W]
            win = x[:, :, hv][:, :, :, wv]
            if at["kind"] == "max":
                out[:, :, oh, ow] = win.max(axis=(2, 3))
            else:
                if at.get("divisor"):
                    div = at["divisor"]
                elif at["count_include_pad"]:
                    h_end = min(oh * sh - ph + KH, H + ph)
                    w_end = min(ow * sw - pw + KW, W + pw)
                    div = (h_end - (oh * sh - ph)) * (w_end - (ow * sw - pw))
                else:
                    div = len(hv) * len(wv)
                out[:, :, oh, ow] = win.sum(axis=(2, 3)) / div
    return out


def _emit_pool(em: Any, node: Node) -> None:
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    N, C, H, W = x.shape
    OH, OW = out.shape[2:]
    (KH, KW), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["padding"]
    args = f"{em.ptr(out)}, {em.ptr(x)}, {N * C}, {H}, {W}, {KH}, {KW}, {sh}, {sw}, {ph}, {pw}"
    if at["kind"] == "max":
        dh, dw = at["dilation"]
        em.line(f"pt2c_maxpool2d({args}, {dh}, {dw}, {OH}, {OW});")
    else:
        em.line(f"pt2c_avgpool2d({args}, {OH}, {OW}, {int(at['count_include_pad'])}, {at.get('divisor') or 0});")


defop("pool2d", _ref_pool, _emit_pool, kernels=("pool",))


def _ref_adaptive(node: Node, x: np.ndarray) -> np.ndarray:
    N, C, H, W = x.shape
    OH, OW = node.outputs[0].shape[2:]
    out = np.zeros((N, C, OH, OW), np.float32)
    for i in range(OH):
        h0, h1 = (i * H) // OH, -((-(i + 1) * H) // OH)
        for j in range(OW):
            w0, w1 = (j * W) // OW, -((-(j + 1) * W) // OW)
            win = x[:, :, h0:h1, w0:w1]
            out[:, :, i, j] = win.max(axis=(2, 3)) if node.attrs["kind"] == "max" else win.mean(axis=(2, 3))
    return out


def _emit_adaptive(em: Any, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    N, C, H, W = x.shape
    fn = "pt2c_adaptive_maxpool2d" if node.attrs["kind"] == "max" else "pt2c_adaptive_avgpool2d"
    em.line(f"{fn}({em.ptr(out)}, {em.ptr(x)}, {N * C}, {H}, {W}, {out.shape[2]}, {out.shape[3]});")


defop("adaptive_pool2d", _ref_adaptive, _emit_adaptive, kernels=("pool",))


def _pool_args(a: dict[str, Any], nd: int = 2) -> tuple[tuple, tuple, tuple, tuple]:
    k = list(a["kernel_size"]) * (nd if len(a["kernel_size"]) == 1 else 1)
    s = list(a.get("stride") or k)
    s = s * (nd if len(s) == 1 else 1)
    p = list(a.get("padding", [0])) or [0]
    p = p * (nd if len(p) == 1 else 1)
    d = list(a.get("dilation", [1])) or [1]
    d = d * (nd if len(d) == 1 else 1)
    return tuple(k), tuple(s), tuple(p), tuple(d)


def _to_4d(ctx: Any, x: Value) -> tuple[Value, bool]:
    if len(x.shape) == 3:
        return ctx.view(x, (1, *x.shape)), True
    return x, False


@lowers("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default")
def _lower_maxpool(ctx: Any, a: dict[str, Any]) -> Any:
    x, sq = _to_4d(ctx, a["self"])
    outs = ctx.outs()
    k, s, p, d = _pool_args(a)
    out = outs[0]
    from pt2c.ops.extra import output_used

    if len(outs) == 2 and outs[1] is not None and output_used(ctx, 1):
        # the argmax indices are read too: a generated loop that produces both
        ind = outs[1]
        y = ctx.new("pool", (1, *out.shape), "float32") if sq else out
        yi = ctx.new("pool_idx", (1, *ind.shape), "int64") if sq else ind
        ctx.emit("maxpool2d_idx", [x], {"kernel": k, "stride": s, "padding": p, "dilation": d,
                                        "ceil_mode": bool(a.get("ceil_mode", False))}, [y, yi])
        if sq:
            ctx.view(y, out.shape, out=out)
            ctx.view(yi, ind.shape, out=ind)
        return (out, ind)
    y = ctx.new("pool", (1, *out.shape), "float32") if sq else out
    ctx.emit("pool2d", [x], {"kind": "max", "kernel": k, "stride": s, "padding": p, "dilation": d}, [y])
    if sq:
        ctx.view(y, out.shape, out=out)
    return (out, None) if len(outs) == 2 else out


@lowers("aten.avg_pool2d.default")
def _lower_avgpool(ctx: Any, a: dict[str, Any]) -> Value:
    x, sq = _to_4d(ctx, a["self"])
    out = ctx.out()
    k, s, p, _ = _pool_args(a)
    y = ctx.new("pool", (1, *out.shape), "float32") if sq else out
    ctx.emit("pool2d", [x], {"kind": "avg", "kernel": k, "stride": s, "padding": p,
                             "count_include_pad": bool(a.get("count_include_pad", True)),
                             "divisor": a.get("divisor_override")}, [y])
    return ctx.view(y, out.shape, out=out) if sq else out


@lowers("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default", "aten.adaptive_max_pool2d.default")
def _lower_adaptive(ctx: Any, a: dict[str, Any]) -> Any:
    x, sq = _to_4d(ctx, a["self"])
    outs = ctx.outs()
    out = outs[0]
    y = ctx.new("pool", (1, *out.shape), "float32") if sq else out
    kind = "max" if "max" in ctx.target else "avg"
    ctx.emit("adaptive_pool2d", [x], {"kind": kind}, [y])
    if sq:
        ctx.view(y, out.shape, out=out)
    return (out, None) if len(outs) == 2 else out


def _to_4d_1d(ctx: Any, x: Value) -> Value:
    """(N, C, L) or (C, L) -> (N, C, 1, L): 1-d pooling as 2-d pooling over a height of 1."""
    shape = x.shape if len(x.shape) == 3 else (1, *x.shape)
    return ctx.view(x, (shape[0], shape[1], 1, shape[2]))


@lowers("aten.avg_pool1d.default")
def _lower_avgpool1d(ctx: Any, a: dict[str, Any]) -> Value:
    x = _to_4d_1d(ctx, a["self"])
    out = ctx.out()
    k, s, p, _ = _pool_args(a, nd=1)
    y = ctx.new("pool", (x.shape[0], x.shape[1], 1, out.shape[-1]), "float32")
    ctx.emit("pool2d", [x], {"kind": "avg", "kernel": (1, k[0]), "stride": (1, s[0]), "padding": (0, p[0]),
                             "count_include_pad": bool(a.get("count_include_pad", True)), "divisor": None}, [y])
    return ctx.view(y, out.shape, out=out)


@lowers("aten.adaptive_avg_pool1d.default")
def _lower_adaptive_avgpool1d(ctx: Any, a: dict[str, Any]) -> Value:
    x = _to_4d_1d(ctx, a["self"])
    out = ctx.out()
    y = ctx.new("pool", (x.shape[0], x.shape[1], 1, out.shape[-1]), "float32")
    ctx.emit("adaptive_pool2d", [x], {"kind": "avg"}, [y])
    return ctx.view(y, out.shape, out=out)


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


def _emit_reduce(em: Any, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = node.attrs["view"]
    kind = node.attrs["kind"]
    if x.dtype == "float32" and out.dtype in ("float32", "int64"):
        em.line(f"pt2c_{'reduce_' if not kind.startswith('arg') else ''}{kind}({em.ptr(out)}, {em.ptr(x)}, {outer}, {r}, {inner});")
        return
    em.generic_reduce(node)


defop("reduce", _ref_reduce, _emit_reduce, kernels=("reduce",), flops=lambda n: n.inputs[0].numel)


def make_reduce(ctx: Any, kind: str, x: Value, dims: list[int] | None, out: Value) -> Value:
    rank = len(x.shape)
    dims = sorted({_norm_dim(d, rank) for d in dims}) if dims else list(range(rank))
    if not x.shape:
        dims = []
    if dims and dims != list(range(dims[0], dims[-1] + 1)):
        # non-adjacent reduced dims: move them last (one transpose copy), then reduce
        keep = [d for d in range(rank) if d not in dims]
        from pt2c.ops.shape import contiguous_strides, make_strided

        st = contiguous_strides(x.shape)
        perm = keep + dims
        xt = ctx.new("reduce_in", tuple(x.shape[d] for d in perm), x.dtype)
        make_strided(ctx, x, xt, tuple(st[d] for d in perm), 0)
        x, dims = xt, list(range(len(keep), rank))
    if dims:
        outer = int(np.prod(x.shape[:dims[0]], dtype=np.int64))
        r = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
        inner = int(np.prod(x.shape[dims[-1] + 1:], dtype=np.int64))
    else:
        outer, r, inner = 1, 1, x.numel
    if x.dtype != out.dtype and kind not in ("argmax", "argmin", "any", "all"):
        from pt2c.ops.elementwise import make_ew

        x = make_ew(ctx, "copy", [x], compute=out.dtype, out=ctx.new("reduce_cast", x.shape, out.dtype))
    ctx.emit("reduce", [x], {"kind": kind, "view": (outer, r, inner)}, [out])
    return out


def _lower_reduce_kind(kind: str) -> Any:
    def lower(ctx: Any, a: dict[str, Any]) -> Value:
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
def _lower_max_dim(ctx: Any, a: dict[str, Any]) -> Any:
    x = a["self"]
    outs = ctx.outs()
    kind = "max" if "max" in ctx.target else "min"
    make_reduce(ctx, kind, x, [a["dim"]], outs[0])
    make_reduce(ctx, "arg" + kind, x, [a["dim"]], outs[1])
    return tuple(outs)


# ---------------------------------------------------------------- cumulative sum

def _ref_cumsum(node: Node, x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=node.attrs["dim"]).astype(x.dtype if node.outputs[0].dtype == x.dtype else np.int64)


def _emit_cumsum(em: Any, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = _outer_inner(x.shape, node.attrs["dim"])
    t = ctype(out.dtype)
    em.line(f"for (long o = 0; o < {outer}; o++) {{")
    em.line(f"    for (long i = 0; i < {inner}; i++) {{")
    em.line(f"        {t} acc = 0;")
    em.line(f"        for (long k = 0; k < {r}; k++) {{")
    em.line(f"            size_t at = ((size_t)o * {r} + (size_t)k) * {inner} + (size_t)i;")
    em.line(f"            acc += ({t}){em.ptr(x)}[at];")
    em.line(f"            {em.ptr(out)}[at] = acc;")
    em.line("        }")
    em.line("    }")
    em.line("}")


defop("cumsum", _ref_cumsum, _emit_cumsum)


@lowers("aten.cumsum.default")
def _lower_cumsum(ctx: Any, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    ctx.emit("cumsum", [x], {"dim": _norm_dim(a["dim"], len(x.shape)) if x.shape else 0}, [out])
    return out
