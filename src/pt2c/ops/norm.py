"""Normalisation and softmax: layer / rms / batch / group / instance norm, softmax / log_softmax.

Batch norm in inference is a per-channel affine (folded into a preceding conv by passes/fold.py);
with the batch's own statistics (instance norm) and group norm it is `moments_norm`."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.elementwise import make_ew
from pt2c.ops.registry import BACKWARD, UNSUPPORTED, arity, defop, dtype_in, ints, lowers, need, result
from pt2c.ops.util import norm_dim, outer_inner, output_used, prod


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


def _emit_layer_norm(em: EmitCtx, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    cols = prod(x.shape[len(x.shape) - node.attrs["normalized"]:])
    rows = x.numel // max(cols, 1)
    i = 1
    w = b = "NULL"
    if node.attrs["has_weight"]:
        w = em.ptr(node.inputs[i])
        i += 1
    if node.attrs["has_bias"]:
        b = em.ptr(node.inputs[i])
    em.line(f"pt2c_layer_norm({em.ptr(out)}, {em.ptr(x)}, {w}, {b}, {rows}, {cols}, {em.flt(node.attrs['eps'])});")


def _check_layer_norm(node: Node) -> None:
    """Same shape out; weight and bias (when present) shaped like the normalized trailing dims."""
    at = node.attrs
    need(type(at["has_weight"]) is bool and type(at["has_bias"]) is bool and type(at["eps"]) is float,
         "has_weight / has_bias / eps")
    arity(node, 1 + at["has_weight"] + at["has_bias"])
    x, k = node.inputs[0], at["normalized"]
    dtype_in(x, ("float32",), "input")
    need(type(k) is int and 0 <= k <= len(x.shape), f"normalized {k} of a rank-{len(x.shape)} input")
    for v in node.inputs[1:]:
        dtype_in(v, ("float32",), "weight / bias")
        need(v.shape == x.shape[len(x.shape) - k:], f"weight / bias {list(v.shape)} for input {list(x.shape)}")
    result(node.outputs[0], x.shape, "float32")


defop("layer_norm", _ref_layer_norm, _emit_layer_norm, kernels=("norm",), flops=lambda n: 8 * n.outputs[0].numel,
      rule=_check_layer_norm)


@lowers("aten.native_layer_norm.default", "aten.layer_norm.default")
def _lower_layer_norm(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x, w, b = a["input"], a.get("weight"), a.get("bias")
    if x.dtype != "float32":
        ctx.fail(f"layer_norm is implemented for float32 only (got {x.dtype})")
    outs = ctx.outs()
    out = outs[0]
    ins = [x] + [t for t in (w, b) if t is not None]
    ctx.emit("layer_norm", ins, {"normalized": len(a["normalized_shape"]), "eps": float(a.get("eps", 1e-5)),
                                 "has_weight": w is not None, "has_bias": b is not None}, [out])
    if len(outs) == 3:
        if output_used(ctx, 1) or output_used(ctx, 2):
            # the saved mean / rstd are read: compute them with the moments loop
            cols = prod(x.shape[len(x.shape) - len(a["normalized_shape"]):])
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


def _emit_rms_norm(em: EmitCtx, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    cols = x.shape[-1]
    w = em.ptr(node.inputs[1]) if len(node.inputs) > 1 else "NULL"
    em.line(f"pt2c_rms_norm({em.ptr(out)}, {em.ptr(x)}, {w}, {x.numel // cols}, {cols}, {em.flt(node.attrs['eps'])});")


def _check_rms_norm(node: Node) -> None:
    arity(node, (1, 2))
    x = node.inputs[0]
    dtype_in(x, ("float32",), "input")
    need(len(x.shape) >= 1 and type(node.attrs["eps"]) is float, "a 0-d input / eps")
    if len(node.inputs) == 2:
        dtype_in(node.inputs[1], ("float32",), "weight")
        need(node.inputs[1].shape == x.shape[-1:], f"weight {list(node.inputs[1].shape)} for input {list(x.shape)}")
    result(node.outputs[0], x.shape, "float32")


defop("rms_norm", _ref_rms_norm, _emit_rms_norm, kernels=("norm",), flops=lambda n: 4 * n.outputs[0].numel,
      rule=_check_rms_norm)


@lowers("aten.rms_norm.default")
def _lower_rms_norm(ctx: LowerCtx, a: dict[str, Any]) -> Value:
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
        cols = prod(x.shape[len(x.shape) - nd:])
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


def _emit_channel_affine(em: EmitCtx, node: Node) -> None:
    x, s, b = node.inputs
    N, C = x.shape[0], x.shape[1]
    inner = x.numel // max(N * C, 1)
    em.line(f"pt2c_channel_affine({em.ptr(node.outputs[0])}, {em.ptr(x)}, {em.ptr(s)}, {em.ptr(b)}, {N}, {C}, {inner});")


def _check_channel_affine(node: Node) -> None:
    """x [N, C, ...] * scale[C] + shift[C]."""
    arity(node, 3)
    x, s, b = node.inputs
    need(len(x.shape) >= 2, f"input {list(x.shape)} has no channel dim")
    for v, what in ((x, "input"), (s, "scale"), (b, "shift")):
        dtype_in(v, ("float32",), what)
    need(s.shape == b.shape == (x.shape[1],), f"scale {list(s.shape)} / shift {list(b.shape)} for {x.shape[1]} channels")
    result(node.outputs[0], x.shape, "float32")


defop("channel_affine", _ref_channel_affine, _emit_channel_affine, kernels=("norm",), flops=lambda n: 2 * n.outputs[0].numel,
      rule=_check_channel_affine)


@lowers("aten._native_batch_norm_legit_no_training.default", "aten.batch_norm.default",
        "aten._native_batch_norm_legit.no_stats", "aten.native_batch_norm.default")
def _lower_batch_norm(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x = a["input"]
    w, b, mean, var = a.get("weight"), a.get("bias"), a.get("running_mean"), a.get("running_var")
    eps = float(a.get("eps", 1e-5))
    if ctx.target == "aten._native_batch_norm_legit.no_stats" or (mean is None and var is None):
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


def _emit_softmax(em: EmitCtx, node: Node) -> None:
    x = node.inputs[0]
    outer, dim, inner = outer_inner(x.shape, node.attrs["dim"])
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


def _check_softmax(node: Node) -> None:
    arity(node, 1)
    x, dim = node.inputs[0], node.attrs["dim"]
    dtype_in(x, ("float32", "float64"), "input")
    need(type(dim) is int and 0 <= dim < len(x.shape) and type(node.attrs["log"]) is bool,
         f"dim {dim} of a rank-{len(x.shape)} input / log")
    out = node.outputs[0]
    result(out, () if (x.shape, out.shape) == ((1,), ()) else x.shape, x.dtype)  # a 0-d input is viewed as [1]


defop("softmax", _ref_softmax, _emit_softmax, kernels=("norm",), flops=lambda n: 5 * n.outputs[0].numel,
      rule=_check_softmax)


@lowers("aten._softmax.default", "aten.softmax.int", "aten._log_softmax.default", "aten.log_softmax.int")
def _lower_softmax(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x = a["self"]
    out = ctx.out()
    if x.dtype not in ("float32", "float64") or out.dtype != x.dtype:
        ctx.fail(f"softmax is implemented for float32 and float64 (got {x.dtype} -> {out.dtype})")
    dim = norm_dim(a["dim"], len(x.shape)) if x.shape else 0
    if not x.shape:
        x = ctx.view(x, (1,))
    ctx.emit("softmax", [x], {"dim": dim, "log": "log_softmax" in ctx.target}, [out])
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


def _emit_moments_norm(em: EmitCtx, node: Node) -> None:
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


def _check_moments_norm(node: Node) -> None:
    """x normalised per m of its [O, M, I] view: y like x, mean and rstd [M]."""
    arity(node, 1, 3)
    x, view = node.inputs[0], node.attrs["view"]
    dtype_in(x, ("float32",), "input")
    need(ints(view, 3, 0) and prod(view) == x.numel and type(node.attrs["eps"]) is float,
         f"view {view} of {x.numel} elements / eps")
    result(node.outputs[0], x.shape, "float32")
    result(node.outputs[1], (view[1],), "float32", "mean")
    result(node.outputs[2], (view[1],), "float32", "rstd")


defop("moments_norm", _ref_moments_norm, _emit_moments_norm, flops=lambda n: 8 * n.inputs[0].numel,
      rule=_check_moments_norm)


def _affine(ctx: LowerCtx, y: Value, w: Value | None, b: Value | None, C: int, out: Value) -> Value:
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
def _lower_group_norm(ctx: LowerCtx, a: dict[str, Any]) -> Any:
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


def lower_bn_no_stats(ctx: LowerCtx, a: dict[str, Any]) -> Any:
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


# core ATen ops of this family that pt2c does not lower, and why (docs/ops.md)
UNSUPPORTED["aten.native_group_norm_backward.default"] = BACKWARD
UNSUPPORTED["aten.native_layer_norm_backward.default"] = BACKWARD
UNSUPPORTED["aten._native_batch_norm_legit.default"] = ("training-mode batch norm that updates running_mean / "
                                                        "running_var in place: call model.eval() before torch.export")
