"""Pooling: max / avg / adaptive pooling in 1-d, 2-d and 3-d, max pooling with indices, its backward.

1-d and 2-d pooling run the kernels of kernels/pool.c; 3-d pooling, max pooling that also returns
the argmax indices and max_pool2d's backward are generated loops."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.registry import BACKWARD, UNSUPPORTED, arity, defop, dtype_in, ints, lowers, need, result
from pt2c.ops.util import empty_output, output_used, prod
from pt2c.sym import sint


# ---------------------------------------------------------------- pooling

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


def _emit_pool(em: EmitCtx, node: Node) -> None:
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


def pool_out_size(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """Output size of a pooling window along one dim (PyTorch's rule, ceil_mode included: a last
    window that starts in the right padding is dropped)."""
    span = n + 2 * p - d * (k - 1) - 1
    if not ceil:
        return span // s + 1
    o = -(-span // s) + 1
    return o - 1 if (o - 1) * s >= n + p else o


def _check_window(node: Node, x_rank: int, nd: int, kind: str) -> tuple[tuple[int, ...], ...]:
    """The window attrs of a `kind` ("max" / "avg") pooling node over the last nd dims; the allowed
    output sizes per dim (floor and ceil mode, when the node does not say which)."""
    at = node.attrs
    need(kind in ("max", "avg"), f"kind {kind!r}")
    x = node.inputs[0]
    dtype_in(x, ("float32",), "input")
    need(len(x.shape) == x_rank, f"input %{x.name} is rank {len(x.shape)}, expected {x_rank}")
    need(ints(at["kernel"], nd, 1) and ints(at["stride"], nd, 1) and ints(at["padding"], nd, 0)
         and ints(at.get("dilation", (1,) * nd), nd, 1), "kernel / stride / padding / dilation")
    if kind == "avg":
        need(type(at["count_include_pad"]) is bool and (at["divisor"] is None or type(at["divisor"]) is int),
             "count_include_pad / divisor")
    modes = (bool(at["ceil_mode"]),) if "ceil_mode" in at else (False, True)
    need(all(type(m) is bool for m in modes), "ceil_mode is not a bool")
    return tuple(tuple({pool_out_size(n, k, s, p, d, m) for m in modes}) for n, k, s, p, d in
                 zip(x.shape[-nd:], at["kernel"], at["stride"], at["padding"], at.get("dilation", (1,) * nd)))


def _sizes_ok(out: Any, lead: tuple[int, ...], sizes: tuple[tuple[int, ...], ...], dtype: str, what: str) -> None:
    need(out.dtype == dtype and out.shape[:len(lead)] == lead and len(out.shape) == len(lead) + len(sizes)
         and all(o in ok for o, ok in zip(out.shape[len(lead):], sizes)),
         f"{what} %{out.name} is {out.dtype}{list(out.shape)}, expected {dtype}{list(lead)} + sizes {list(sizes)}")


def _check_pool(node: Node) -> None:
    arity(node, 1)
    sizes = _check_window(node, 4, 2, node.attrs["kind"])
    _sizes_ok(node.outputs[0], node.inputs[0].shape[:2], sizes, "float32", "output")


defop("pool2d", _ref_pool, _emit_pool, kernels=("pool",), rule=_check_pool)


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


def _emit_adaptive(em: EmitCtx, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    N, C, H, W = x.shape
    fn = "pt2c_adaptive_maxpool2d" if node.attrs["kind"] == "max" else "pt2c_adaptive_avgpool2d"
    em.line(f"{fn}({em.ptr(out)}, {em.ptr(x)}, {N * C}, {H}, {W}, {out.shape[2]}, {out.shape[3]});")


def _check_adaptive(node: Node) -> None:
    arity(node, 1)
    x, out = node.inputs[0], node.outputs[0]
    need(node.attrs["kind"] in ("max", "avg"), f"kind {node.attrs['kind']!r}")
    dtype_in(x, ("float32",), "input")
    need(len(x.shape) == 4 and len(out.shape) == 4, "not [N, C, H, W]")
    result(out, (*x.shape[:2], *out.shape[2:]), "float32")


defop("adaptive_pool2d", _ref_adaptive, _emit_adaptive, kernels=("pool",), rule=_check_adaptive)


def _pool_args(a: dict[str, Any], nd: int = 2) -> tuple[tuple, tuple, tuple, tuple]:
    k = list(a["kernel_size"]) * (nd if len(a["kernel_size"]) == 1 else 1)
    s = list(a.get("stride") or k)
    s = s * (nd if len(s) == 1 else 1)
    p = list(a.get("padding", [0])) or [0]
    p = p * (nd if len(p) == 1 else 1)
    d = list(a.get("dilation", [1])) or [1]
    d = d * (nd if len(d) == 1 else 1)
    return tuple(k), tuple(s), tuple(p), tuple(d)


def _to_4d(ctx: LowerCtx, x: Value) -> tuple[Value, bool]:
    if len(x.shape) == 3:
        return ctx.view(x, (1, *x.shape)), True
    return x, False


@lowers("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default")
def _lower_maxpool(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x, sq = _to_4d(ctx, a["self"])
    outs = ctx.outs()
    k, s, p, d = _pool_args(a)
    out = outs[0]
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
def _lower_avgpool(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, sq = _to_4d(ctx, a["self"])
    out = ctx.out()
    k, s, p, _ = _pool_args(a)
    y = ctx.new("pool", (1, *out.shape), "float32") if sq else out
    ctx.emit("pool2d", [x], {"kind": "avg", "kernel": k, "stride": s, "padding": p,
                             "count_include_pad": bool(a.get("count_include_pad", True)),
                             "divisor": a.get("divisor_override")}, [y])
    return ctx.view(y, out.shape, out=out) if sq else out


@lowers("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default", "aten.adaptive_max_pool2d.default")
def _lower_adaptive(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x, sq = _to_4d(ctx, a["self"])
    outs = ctx.outs()
    out = outs[0]
    y = ctx.new("pool", (1, *out.shape), "float32") if sq else out
    kind = "max" if "max" in ctx.target else "avg"
    ctx.emit("adaptive_pool2d", [x], {"kind": kind}, [y])
    if sq:
        ctx.view(y, out.shape, out=out)
    return (out, None) if len(outs) == 2 else out


def _to_4d_1d(ctx: LowerCtx, x: Value) -> Value:
    """(N, C, L) or (C, L) -> (N, C, 1, L): 1-d pooling as 2-d pooling over a height of 1."""
    shape = x.shape if len(x.shape) == 3 else (1, *x.shape)
    return ctx.view(x, (shape[0], shape[1], 1, shape[2]))


@lowers("aten.avg_pool1d.default")
def _lower_avgpool1d(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x = _to_4d_1d(ctx, a["self"])
    out = ctx.out()
    k, s, p, _ = _pool_args(a, nd=1)
    y = ctx.new("pool", (x.shape[0], x.shape[1], 1, out.shape[-1]), "float32")
    ctx.emit("pool2d", [x], {"kind": "avg", "kernel": (1, k[0]), "stride": (1, s[0]), "padding": (0, p[0]),
                             "count_include_pad": bool(a.get("count_include_pad", True)), "divisor": None}, [y])
    return ctx.view(y, out.shape, out=out)


@lowers("aten.adaptive_avg_pool1d.default")
def _lower_adaptive_avgpool1d(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x = _to_4d_1d(ctx, a["self"])
    out = ctx.out()
    y = ctx.new("pool", (x.shape[0], x.shape[1], 1, out.shape[-1]), "float32")
    ctx.emit("adaptive_pool2d", [x], {"kind": "avg"}, [y])
    return ctx.view(y, out.shape, out=out)


# ---------------------------------------------------------------- max pooling that also returns the argmax indices

def _ref_maxpool_idx(node: Node, x: np.ndarray) -> list[np.ndarray]:
    import torch

    at = node.attrs
    y, i = torch.ops.aten.max_pool2d_with_indices.default(torch.from_numpy(np.array(x)), list(at["kernel"]),
                                                          list(at["stride"]), list(at["padding"]),
                                                          list(at["dilation"]), bool(at["ceil_mode"]))
    return [y.numpy(), i.numpy()]


def _emit_maxpool_idx(em: EmitCtx, node: Node) -> None:
    at = node.attrs
    x = node.inputs[0]
    y, ind = node.outputs
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    (KH, KW), (sh, sw), (ph, pw), (dh, dw) = at["kernel"], at["stride"], at["padding"], at["dilation"]
    X, Y, I = em.ptr(x), em.ptr(y), em.ptr(ind)
    em.line(f"for (size_t u_p = 0; u_p < {N * C}; u_p++) for (long u_oh = 0; u_oh < {sint(OH)}; u_oh++) "
            f"for (long u_ow = 0; u_ow < {sint(OW)}; u_ow++) {{")
    em.line(f"    const float *u_xp = {X} + u_p * {H * W};")
    em.line("    float u_best = -INFINITY; long u_bi = -1;")
    em.line(f"    for (long u_kh = 0; u_kh < {sint(KH)}; u_kh++) for (long u_kw = 0; u_kw < {sint(KW)}; u_kw++) {{")
    em.line(f"        long u_h = u_oh * {sh} - {ph} + u_kh * {dh}, u_w = u_ow * {sw} - {pw} + u_kw * {dw};")
    em.line(f"        if (u_h < 0 || u_h >= {sint(H)} || u_w < 0 || u_w >= {sint(W)}) continue;")
    em.line(f"        float u_v = u_xp[u_h * {W} + u_w];")
    em.line(f"        if (u_bi < 0 || u_v > u_best || u_v != u_v) {{ u_best = u_v; u_bi = u_h * {W} + u_w; }}")
    em.line("        if (u_best != u_best) break;")
    em.line("    }")
    em.line(f"    {Y}[(u_p * {OH} + (size_t)u_oh) * {OW} + (size_t)u_ow] = u_best;")
    em.line(f"    {I}[(u_p * {OH} + (size_t)u_oh) * {OW} + (size_t)u_ow] = (int64_t)u_bi;")
    em.line("}")


def _check_maxpool_idx(node: Node) -> None:
    arity(node, 1, 2)
    sizes = _check_window(node, 4, 2, "max")
    lead = node.inputs[0].shape[:2]
    _sizes_ok(node.outputs[0], lead, sizes, "float32", "output")
    result(node.outputs[1], node.outputs[0].shape, "int64", "indices")


defop("maxpool2d_idx", _ref_maxpool_idx, _emit_maxpool_idx, rule=_check_maxpool_idx)


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


def _emit_pool_nd(em: EmitCtx, node: Node) -> None:
    at = node.attrs
    x = node.inputs[0]
    out = node.outputs[0]
    kind = at["kind"]
    nd = at["nd"]
    isz, osz = x.shape[-nd:], out.shape[-nd:]
    P = x.numel // max(prod(isz), 1)
    IS, OS = prod(isz), prod(osz)
    X, Y = em.ptr(x), em.ptr(out)
    olp = " ".join(f"for (long u_o{d} = 0; u_o{d} < {sint(osz[d])}; u_o{d}++)" for d in range(nd))
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
            em.line(pad + f"for (long u_k{d} = 0; u_k{d} < {sint(k[d])}; u_k{d}++) {{")
            em.line(pad + f"    long u_i{d} = u_o{d} * {s[d]} - {p[d]} + u_k{d} * {dl[d]};")
            em.line(pad + f"    if (u_i{d} < 0 || u_i{d} >= {sint(isz[d])}) continue;")
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


def _check_pool_nd(node: Node) -> None:
    at = node.attrs
    nd, kind = at["nd"], at["kind"]
    need(type(nd) is int and nd >= 1, "nd")
    arity(node, 1, 2 if kind == "max" else 1)
    x, out = node.inputs[0], node.outputs[0]
    need(len(x.shape) >= nd + 1, f"input {list(x.shape)} for {nd}-d pooling")
    lead = x.shape[:-nd]
    if kind == "adaptive":
        dtype_in(x, ("float32",), "input")
        result(out, (*lead, *out.shape[len(lead):]), "float32")
        return
    _sizes_ok(out, lead, _check_window(node, len(x.shape), nd, kind), "float32", "output")
    if kind == "max":
        result(node.outputs[1], out.shape, "int64", "indices")


defop("pool_nd", _ref_pool_nd, _emit_pool_nd, rule=_check_pool_nd)


def _pool3d_args(ctx: LowerCtx, a: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    def per_dim(v: Any, dflt: Any) -> tuple[int, ...]:
        v = list(v) if v else list(dflt)
        return tuple(int(t) for t in (v * 3 if len(v) == 1 else v))

    k = per_dim(a["kernel_size"], [1])
    s = per_dim(a.get("stride"), k)
    p = per_dim(a.get("padding"), [0])
    d = per_dim(a.get("dilation"), [1])
    return k, s, p, d


@lowers("aten.max_pool3d_with_indices.default")
def _lower_maxpool3d(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x = a["self"]
    outs = ctx.outs()
    out, ind = outs
    if x.dtype != "float32":
        ctx.fail(f"pooling is implemented for float32 only (got {x.dtype})")
    k, s, p, d = _pool3d_args(ctx, a)
    if out.numel == 0:
        ind.data = np.zeros(ind.shape, np.int64)
        return (empty_output(ctx, out), ind)
    ctx.emit("pool_nd", [x], {"kind": "max", "nd": 3, "kernel": k, "stride": s, "padding": p, "dilation": d,
                              "ceil_mode": bool(a.get("ceil_mode", False))}, [out, ind])
    return (out, ind)


@lowers("aten.avg_pool3d.default")
def _lower_avgpool3d(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    if x.dtype != "float32":
        ctx.fail(f"pooling is implemented for float32 only (got {x.dtype})")
    k, s, p, _ = _pool3d_args(ctx, a)
    if out.numel == 0:
        return empty_output(ctx, out)
    ctx.emit("pool_nd", [x], {"kind": "avg", "nd": 3, "kernel": k, "stride": s, "padding": p,
                              "ceil_mode": bool(a.get("ceil_mode", False)),
                              "count_include_pad": bool(a.get("count_include_pad", True)),
                              "divisor": a.get("divisor_override")}, [out])
    return out


@lowers("aten._adaptive_avg_pool3d.default")
def _lower_adaptive3d(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    if x.dtype != "float32":
        ctx.fail(f"pooling is implemented for float32 only (got {x.dtype})")
    if out.numel == 0:
        return empty_output(ctx, out)
    if x.numel == 0:
        ctx.fail("adaptive pooling of an empty input")
    ctx.emit("pool_nd", [x], {"kind": "adaptive", "nd": 3}, [out])
    return out


# ---------------------------------------------------------------- max_pool2d backward: scatter-add through the saved indices

def _ref_maxpool_bwd(node: Node, go: np.ndarray, ind: np.ndarray) -> np.ndarray:
    shape = node.outputs[0].shape
    plane = prod(shape[-2:])
    P = go.size // max(prod(go.shape[-2:]), 1)
    gi = np.zeros((P, plane), go.dtype)
    g2, i2 = go.reshape(P, -1), ind.reshape(P, -1)
    for q in range(P):
        np.add.at(gi[q], i2[q], g2[q])
    return gi.reshape(shape)


def _emit_maxpool_bwd(em: EmitCtx, node: Node) -> None:
    go, ind = node.inputs
    out = node.outputs[0]
    plane = prod(out.shape[-2:])
    oplane = prod(go.shape[-2:])
    P = go.numel // max(oplane, 1)
    G, I, Y = em.ptr(go), em.ptr(ind), em.ptr(out)
    em.errors.add("INDEX")
    em.line(f"memset({Y}, 0, {out.numel} * sizeof(float));")
    em.line(f"for (size_t u_p = 0; u_p < {P}; u_p++) for (size_t u_o = 0; u_o < {oplane}; u_o++) {{")
    em.line(f"    int64_t u_j = {I}[u_p * {oplane} + u_o];")
    em.line(f"    if (u_j < 0 || u_j >= {sint(plane)}) return PT2C_ERR_INDEX;")
    em.line(f"    {Y}[u_p * {plane} + (size_t)u_j] += {G}[u_p * {oplane} + u_o];")
    em.line("}")


def _check_maxpool_bwd(node: Node) -> None:
    """The gradient of the pooled [..., OH, OW] scattered through its indices into [..., H, W]."""
    arity(node, 2)
    go, ind = node.inputs
    out = node.outputs[0]
    dtype_in(go, ("float32",), "grad_output")
    dtype_in(ind, ("int64",), "indices")
    need(ind.shape == go.shape and len(go.shape) >= 2 and len(out.shape) == len(go.shape)
         and out.shape[:-2] == go.shape[:-2], f"grad {list(go.shape)}, indices {list(ind.shape)}, out {list(out.shape)}")
    result(out, out.shape, "float32")


defop("maxpool2d_bwd", _ref_maxpool_bwd, _emit_maxpool_bwd, rule=_check_maxpool_bwd)


@lowers("aten.max_pool2d_with_indices_backward.default")
def _lower_maxpool_bwd(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    go, ind, out = a["grad_output"], a["indices"], ctx.out()
    if go.dtype != "float32":
        ctx.fail(f"max_pool2d backward is implemented for float32 only (got {go.dtype})")
    if out.numel == 0 or go.numel == 0:
        return empty_output(ctx, out)
    ctx.emit("maxpool2d_bwd", [go, ind], {}, [out])
    return out


# core ATen ops of this family that pt2c does not lower, and why (docs/ops.md)
UNSUPPORTED["aten._adaptive_avg_pool2d_backward.default"] = BACKWARD
UNSUPPORTED["aten.avg_pool2d_backward.default"] = BACKWARD
