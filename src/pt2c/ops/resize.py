"""Resampling: upsampling (nearest, bilinear; 1-d and 2-d) and grid_sampler_2d.

Upsampling reads index / weight tables computed at compile time by torch itself; grid_sampler_2d
runs kernels/grid.c."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.registry import INTS, arity, defop, dtype_in, lowers, need, result
from pt2c.ops.util import empty_output, prod


# ---------------------------------------------------------------- upsampling (index / weight tables from torch itself)

def _ref_upsample(node: Node, x: np.ndarray, *tabs: np.ndarray) -> np.ndarray:
    P = prod(x.shape[:-2])
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


def _emit_upsample(em: EmitCtx, node: Node) -> None:
    x = node.inputs[0]
    out = node.outputs[0]
    P = prod(x.shape[:-2])
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


def _check_upsample(node: Node) -> None:
    """x [..., H, W] -> [..., OH, OW] through its tables: nearest, the source row / column of each
    output one (int, [OH], [OW]); bilinear, two source rows and their weights per output row, the
    same for columns (h0, h1, hl0, hl1, w0, w1, wl0, wl1)."""
    mode = node.attrs["mode"]
    need(mode in ("nearest", "bilinear"), f"mode {mode!r}")
    arity(node, 3 if mode == "nearest" else 9)
    x, out = node.inputs[0], node.outputs[0]
    dtype_in(x, ("float32",), "input")
    need(len(x.shape) >= 2 and len(out.shape) == len(x.shape), f"input {list(x.shape)}, output {list(out.shape)}")
    (H, W), (OH, OW) = x.shape[-2:], out.shape[-2:]
    tabs = node.inputs[1:]
    kinds = ("i", "i") if mode == "nearest" else ("i", "i", "f", "f") * 2
    for i, (t, kind) in enumerate(zip(tabs, kinds)):
        n, size = (OH, H) if i < len(tabs) // 2 else (OW, W)
        dtype_in(t, INTS if kind == "i" else ("float32",), f"table {i}")
        need(t.shape == (n,), f"table {i} %{t.name} {list(t.shape)}, expected [{n}]")
        if kind == "i" and t.is_const and n:
            need(0 <= int(t.data.min()) and int(t.data.max()) < size, f"table {i} indexes outside [0, {size})")
    result(out, (*x.shape[:-2], OH, OW), "float32")


defop("upsample2d", _ref_upsample, _emit_upsample, rule=_check_upsample)


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
def _lower_upsample(ctx: LowerCtx, a: dict[str, Any]) -> Value:
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


# ---------------------------------------------------------------- grid_sampler_2d (kernel grid.c)

def _ref_grid_sampler(node: Node, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    import torch

    at = node.attrs
    return torch.ops.aten.grid_sampler_2d.default(torch.from_numpy(np.array(x)), torch.from_numpy(np.array(grid)),
                                                  at["interp"], at["padding"], at["align"]).numpy()


def _emit_grid_sampler(em: EmitCtx, node: Node) -> None:
    x, grid = node.inputs
    out = node.outputs[0]
    at = node.attrs
    N, C, H, W = x.shape
    OH, OW = out.shape[2:]
    em.line(f"pt2c_grid_sampler_2d({em.ptr(out)}, {em.ptr(x)}, {em.ptr(grid)}, {N}, {C}, {H}, {W}, {OH}, {OW}, "
            f"{at['interp']}, {at['padding']}, {int(at['align'])});")


def _check_grid_sampler(node: Node) -> None:
    """x [N, C, H, W] sampled at grid [N, OH, OW, 2] -> [N, C, OH, OW]."""
    arity(node, 2)
    x, grid = node.inputs
    at = node.attrs
    dtype_in(x, ("float32",), "input")
    dtype_in(grid, ("float32",), "grid")
    need(len(x.shape) == 4 and len(grid.shape) == 4 and grid.shape[0] == x.shape[0] and grid.shape[3] == 2,
         f"input {list(x.shape)}, grid {list(grid.shape)}")
    need(at["interp"] in (0, 1, 2) and at["padding"] in (0, 1, 2) and type(at["interp"]) is int
         and type(at["padding"]) is int and type(at["align"]) is bool, "interp / padding / align")
    result(node.outputs[0], (*x.shape[:2], *grid.shape[1:3]), "float32")


defop("grid_sampler_2d", _ref_grid_sampler, _emit_grid_sampler, kernels=("grid",), rule=_check_grid_sampler,
      flops=lambda n: 8 * n.outputs[0].numel)


@lowers("aten.grid_sampler_2d.default")
def _lower_grid_sampler(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, grid, out = a["input"], a["grid"], ctx.out()
    if x.dtype != "float32" or grid.dtype != "float32":
        ctx.fail(f"grid_sampler_2d is implemented for float32 only (got {x.dtype}, {grid.dtype})")
    interp, padding = int(a["interpolation_mode"]), int(a["padding_mode"])
    if interp not in (0, 1, 2) or padding not in (0, 1, 2):
        ctx.fail(f"grid_sampler_2d with interpolation_mode={interp}, padding_mode={padding}")
    if out.numel == 0:
        return empty_output(ctx, out)
    if x.numel == 0:
        ctx.fail("grid_sampler_2d of an empty input")
    ctx.emit("grid_sampler_2d", [x, grid], {"interp": interp, "padding": padding,
                                            "align": bool(a["align_corners"])}, [out])
    return out
