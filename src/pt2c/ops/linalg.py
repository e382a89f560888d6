"""Matrix products, convolution and attention: the ops that call the GEMM-based kernels.

`matmul`: out[..., M, N] = act(a[..., M, K] @ b[..., K, N] + bias[N] + residual).
  When b is a 2-D constant, the prepack pass stores it in the GEMM's packed-B layout.
`conv2d`: NCHW, constant weights pre-packed for the im2col/implicit GEMM; depthwise
  convolutions keep plain weights for the direct kernel.
`sdpa`: scaled dot-product attention with an optional mask (flash-style kernel).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pt2c.ir import Node, Value
from pt2c.ops import defop, lowers
from pt2c.ops.elementwise import FUNCS

# epilogue activations: name -> C enum (kernels/gemm.c)
ACTS = {
    None: "PT2C_ACT_NONE", "relu": "PT2C_ACT_RELU", "clamp": "PT2C_ACT_CLAMP", "hardswish": "PT2C_ACT_HARDSWISH",
    "silu": "PT2C_ACT_SILU", "gelu": "PT2C_ACT_GELU", "gelu_tanh": "PT2C_ACT_GELU_TANH", "sigmoid": "PT2C_ACT_SIGMOID",
    "tanh": "PT2C_ACT_TANH",
}


def apply_act(y: np.ndarray, act: str | None, lo: float = 0.0, hi: float = 0.0) -> np.ndarray:
    if act is None:
        return y
    if act == "clamp":
        return np.clip(y, lo, hi)
    return FUNCS[act][1](y).astype(y.dtype)


def _epilogue_ref(node: Node, y: np.ndarray, extra: list[np.ndarray], bias_axis: int) -> np.ndarray:
    i = 0
    if node.attrs.get("has_bias"):
        b = extra[i]
        i += 1
        shape = [1] * y.ndim
        shape[bias_axis] = -1
        y = y + b.reshape(shape)
    if node.attrs.get("has_residual"):
        y = y + extra[i].reshape(y.shape)  # (fused through a reshape: same elements, same order)
    return apply_act(y.astype(np.float32), node.attrs.get("act"), node.attrs.get("lo", 0.0), node.attrs.get("hi", 0.0))


def epilogue_c(em: Any, node: Node, first_extra: int, bias_per_row: int, ldr: str = "0", var: str = "ep") -> str:
    """Declare a pt2c_epilogue `var` for the node; returns the C expression of its address (or NULL)."""
    a = node.attrs
    if not (a.get("has_bias") or a.get("has_residual") or a.get("act")):
        return "NULL"
    i = first_extra
    bias = "NULL"
    if a.get("has_bias"):
        bias = em.ptr(node.inputs[i])
        i += 1
    res = em.ptr(node.inputs[i]) if a.get("has_residual") else "NULL"
    act = ACTS[a.get("act")]
    lo, hi = em.flt(a.get("lo", 0.0)), em.flt(a.get("hi", 0.0))
    em.line(f"pt2c_epilogue {var} = {{ {bias}, {bias_per_row}, {res}, {ldr if res != 'NULL' else '0'}, {act}, {lo}, {hi} }};")
    return "&" + var


# ---------------------------------------------------------------- matmul

def _ref_matmul(node: Node, a: np.ndarray, b: np.ndarray, *extra: np.ndarray) -> np.ndarray:
    if node.attrs.get("b_packed"):
        b = node.attrs["_b_unpacked"]
    y = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    return _epilogue_ref(node, y, list(extra), -1)


def _emit_matmul(em: Any, node: Node) -> None:
    a_v, b_v = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    M, N = out.shape[-2], out.shape[-1]
    K = matmul_k(node)
    batch = int(np.prod(out.shape[:-2], dtype=np.int64)) if len(out.shape) > 2 else 1
    a_view = node.attrs.get("a_strides")  # (batch stride, row stride, col stride) when a is a strided view
    b_view = node.attrs.get("b_strides")
    sa = a_view or ((M * K if len(a_v.shape) > 2 else 0), K, 1)
    if node.attrs.get("b_packed"):
        sb = (0, 0, 0)
    else:
        sb = b_view or ((K * N if len(b_v.shape) > 2 else 0), N, 1)
    if len(a_v.shape) > 2 and a_view is None and batch > 1 and len(b_v.shape) == 2:
        # [..., M, K] @ [K, N] with a contiguous: one GEMM with M*batch rows
        M, batch, sa = M * batch, 1, (0, K, 1)
    ep = epilogue_c(em, node, 2, 0, str(N))
    bp = 1 if node.attrs.get("b_packed") else 0
    scratch = em.scratch(node)
    A, B, C = em.ptr(a_v), em.ptr(b_v), em.ptr(out)
    if batch == 1:
        em.line(f"pt2c_sgemm({C}, {N}, {A}, {sa[1]}, {sa[2]}, 0, {B}, {sb[1]}, {sb[2]}, {bp}, {M}, {N}, {K}, {ep}, {scratch});")
        return
    em.line(f"for (int b = 0; b < {batch}; b++) {{")
    if ep != "NULL" and node.attrs.get("has_residual"):
        em.line(f"    ep.residual = {em.ptr(node.inputs[-1])} + (size_t)b * {M * N};")
    em.line(f"    pt2c_sgemm({C} + (size_t)b * {M * N}, {N}, {A} + (size_t)b * {sa[0]}, {sa[1]}, {sa[2]}, 0, "
            f"{B} + (size_t)b * {sb[0]}, {sb[1]}, {sb[2]}, {bp}, {M}, {N}, {K}, {ep}, {scratch});")
    em.line("}")


def matmul_k(node: Node) -> int:
    """The contraction size K.  Recorded at lowering ("k"): fuse_views may replace a strided
    operand by its source (a_strides / b_strides), whose shape is not the logical [.., M, K]."""
    if "k" in node.attrs:
        return int(node.attrs["k"])
    return node.inputs[0].shape[-1]


def _matmul_scratch(node: Node) -> int:
    # the emitted calls are either one GEMM with the batch folded into M, or one per batch
    # element with M rows; the scratch is not monotone in M, so plan for both
    M, N, K = _matmul_dims(node)
    bp = bool(node.attrs.get("b_packed"))
    return 4 * max(gemm_scratch_floats(M, N, K, b_packed=bp),
                   gemm_scratch_floats(node.outputs[0].shape[-2], N, K, b_packed=bp))


def gemm_scratch_floats(M: int, N: int, K: int, b_packed: bool = False) -> int:
    """Mirror of pt2c_sgemm_scratch_floats_ex (kernels/gemm.c; A unpacked): computed here so the
    workspace plan is known at compile time.  Upper bound; the C side asserts it fits."""
    from pt2c.kernels import scratch

    return scratch.sgemm_scratch_floats(M, N, K, b_packed=b_packed)


def _matmul_dims(node: Node) -> tuple[int, int, int]:
    out = node.outputs[0]
    M, N, K = out.shape[-2], out.shape[-1], matmul_k(node)
    if len(out.shape) > 2:
        M *= int(np.prod(out.shape[:-2]))  # covers the batch-folded single GEMM (an upper bound otherwise)
    return M, N, K


defop("matmul", _ref_matmul, _emit_matmul, kernels=("gemm",), scratch=_matmul_scratch,
      scratch_c=lambda n: "4 * pt2c_sgemm_scratch_floats_ex(%d, %d, %d, 0, %d)" % (
          *_matmul_dims(n), 1 if n.attrs.get("b_packed") else 0),
      flops=lambda n: 2 * n.outputs[0].numel * matmul_k(n))


def make_matmul(ctx: Any, a: Value, b: Value, bias: Value | None, out: Value) -> Value:
    ins = [a, b] + ([bias] if bias is not None else [])
    ctx.emit("matmul", ins, {"has_bias": bias is not None, "k": int(a.shape[-1])}, [out])
    return out


def _as_float(ctx: Any, v: Value) -> None:
    if v.dtype != "float32":
        ctx.fail(f"matrix products are implemented for float32 only (got {v.dtype})")


@lowers("aten.mm.default", "aten.bmm.default")
def _lower_mm(ctx: Any, a: dict[str, Any]) -> Value:
    x, y = a["self"], a["mat2"]
    _as_float(ctx, x)
    return make_matmul(ctx, x, y, None, ctx.out())


@lowers("aten.addmm.default")
def _lower_addmm(ctx: Any, a: dict[str, Any]) -> Value:
    bias, x, w = a["self"], a["mat1"], a["mat2"]
    _as_float(ctx, x)
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    out = ctx.out()
    if beta == 1 and alpha == 1 and bias.shape in ((out.shape[-1],), (1, out.shape[-1])):
        if bias.shape != (out.shape[-1],):
            bias = ctx.view(bias, (out.shape[-1],))
        return make_matmul(ctx, x, w, bias, out)
    from pt2c.ops.elementwise import make_ew

    mm = make_matmul(ctx, x, w, None, ctx.new("mm", out.shape, out.dtype))
    if alpha != 1:
        mm = make_ew(ctx, "mul", [mm, alpha], out=ctx.new("mm_scaled", out.shape, out.dtype))
    if beta != 1:
        bias = make_ew(ctx, "mul", [bias, beta], out=ctx.new("bias_scaled", bias.shape, bias.dtype))
    return make_ew(ctx, "add", [mm, bias], out=out)


@lowers("aten.linear.default")
def _lower_linear(ctx: Any, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a.get("bias")
    _as_float(ctx, x)
    out = ctx.out()
    wt = ctx.transpose(w)
    if len(x.shape) > 2:
        # fold leading dims into M: x is dense, so this is a view
        M = int(np.prod(x.shape[:-1]))
        x2 = ctx.view(x, (M, x.shape[-1]))
        o2 = make_matmul(ctx, x2, wt, bias, ctx.new("linear", (M, out.shape[-1]), "float32"))
        return ctx.view(o2, out.shape, out=out)
    if len(x.shape) == 1:
        x2 = ctx.view(x, (1, x.shape[0]))
        o2 = make_matmul(ctx, x2, wt, bias, ctx.new("linear", (1, out.shape[-1]), "float32"))
        return ctx.view(o2, out.shape, out=out)
    return make_matmul(ctx, x, wt, bias, out)


# ---------------------------------------------------------------- conv2d

def conv2d_ref(x: np.ndarray, w: np.ndarray, stride: tuple, padding: tuple, dilation: tuple, groups: int) -> np.ndarray:
    N, C, H, W = x.shape
    OC, Cg, KH, KW = w.shape
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((N, OC, OH, OW))
    OCg = OC // groups
    for g in range(groups):
        xs = xp[:, g * Cg:(g + 1) * Cg]
        ws = w[g * OCg:(g + 1) * OCg].astype(np.float64)
        for i in range(KH):
            for j in range(KW):
                patch = xs[:, :, i * dh:i * dh + sh * (OH - 1) + 1:sh, j * dw:j * dw + sw * (OW - 1) + 1:sw]
                out[:, g * OCg:(g + 1) * OCg] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out.astype(np.float32)


def _ref_conv2d(node: Node, x: np.ndarray, w: np.ndarray, *extra: np.ndarray) -> np.ndarray:
    at = node.attrs
    if at.get("w_packed"):
        w = at["_w_unpacked"]
    y = conv2d_ref(x, w, at["stride"], at["padding"], at["dilation"], at["groups"])
    return _epilogue_ref(node, y, list(extra), 1)


def is_depthwise(node: Node) -> bool:
    C = node.inputs[0].shape[1]
    return node.attrs["groups"] == C and C > 1


def use_winograd(node: Node) -> bool:
    """Winograd F(4x4, 3x3) (pt2c_conv2d_wino) instead of im2col + GEMM: 3x3, stride 1,
    dilation 1, ungrouped, and enough output pixels and channels for the 4x fewer
    multiplications to pay for the transforms (bench/conv_bench.py)."""
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    C, OC, OH, OW = x.shape[1], out.shape[1], out.shape[2], out.shape[3]
    return (tuple(at["kernel"]) == (3, 3) and tuple(at["stride"]) == (1, 1) and tuple(at["dilation"]) == (1, 1)
            and at["groups"] == 1 and C >= 16 and OC >= 16 and ((OH + 3) // 4) * ((OW + 3) // 4) >= 16)


def use_smallp(node: Node) -> bool:
    """pt2c_conv2d_smallp (pixels as the GEMM's 6-row side) instead of pt2c_conv2d: ungrouped, and so
    few output pixels that 16-wide pixel panels would waste >= 15% (7x7 maps: 49 of 64).  Measured
    1.1-1.35x on 7x7 3x3 and 1x1 convs, but 0.86x on strided 1x1 ones, which keep pt2c_conv2d."""
    at = node.attrs
    out = node.outputs[0]
    P = out.shape[2] * out.shape[3]
    one_by_one = tuple(at["kernel"]) == (1, 1)
    strided_1x1 = one_by_one and (tuple(at["stride"]) != (1, 1) or tuple(at["padding"]) != (0, 0))
    waste = ((P + 15) // 16 * 16 - P) / max(1, (P + 15) // 16 * 16)
    return at["groups"] == 1 and not strided_1x1 and 0 < P <= 64 and waste >= 0.15


def _emit_conv2d(em: Any, node: Node) -> None:
    at = node.attrs
    x, w, out = node.inputs[0], node.inputs[1], node.outputs[0]
    N, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    KH, KW = at["kernel"]
    (sh, sw), (ph, pw), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    ep = epilogue_c(em, node, 2, 1, str(OH * OW))
    X, Wt, Y = em.ptr(x), em.ptr(w), em.ptr(out)
    if is_depthwise(node):
        em.line(f"pt2c_conv2d_depthwise({Y}, {X}, {Wt}, {ep}, {N}, {C}, {H}, {W}, {OC}, {KH}, {KW}, "
                f"{sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {OH}, {OW}, {em.scratch(node)});")
    elif at.get("winograd"):
        em.line(f"pt2c_conv2d_wino({Y}, {X}, {Wt}, {ep}, {N}, {C}, {H}, {W}, {OC}, {ph}, {pw}, {OH}, {OW}, "
                f"{em.scratch(node)}); /* Winograd F(4x4, 3x3) */")
    elif at.get("smallp"):
        em.line(f"pt2c_conv2d_smallp({Y}, {X}, {Wt}, {ep}, {N}, {C}, {H}, {W}, {OC}, {KH}, {KW}, "
                f"{sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {OH}, {OW}, {em.scratch(node)});")
    else:
        em.line(f"pt2c_conv2d({Y}, {X}, {Wt}, {ep}, {N}, {C}, {H}, {W}, {OC}, {KH}, {KW}, "
                f"{sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {at['groups']}, {OH}, {OW}, {em.scratch(node)});")


def _dw_args(node: Node) -> list[int]:
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    return [x.shape[2], x.shape[3], out.shape[2], out.shape[3], *at["kernel"], *at["stride"], *at["padding"],
            *at["dilation"]]


def _conv_scratch(node: Node) -> int:
    from pt2c.kernels import scratch

    if is_depthwise(node):
        return 4 * scratch.conv2d_depthwise_scratch_floats(*_dw_args(node))
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    if at.get("winograd"):
        return 4 * scratch.conv2d_wino_scratch_floats(x.shape[1], out.shape[1], out.shape[2], out.shape[3])
    if at.get("smallp"):
        return 4 * scratch.conv2d_smallp_scratch_floats(x.shape[1], x.shape[2], x.shape[3], out.shape[1], *at["kernel"],
                                                        *at["stride"], *at["padding"], out.shape[2], out.shape[3])
    return 4 * scratch.conv2d_scratch_floats(x.shape[1], x.shape[2], x.shape[3], out.shape[1], *at["kernel"], *at["stride"],
                                            *at["padding"], *at["dilation"], at["groups"], out.shape[2], out.shape[3])


def _conv_scratch_c(node: Node) -> str:
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    if is_depthwise(node):
        return f"4 * pt2c_conv2d_depthwise_scratch_floats({', '.join(map(str, _dw_args(node)))})"
    if at.get("winograd"):
        return f"4 * pt2c_conv2d_wino_scratch_floats({x.shape[1]}, {out.shape[1]}, {out.shape[2]}, {out.shape[3]})"
    if at.get("smallp"):
        args = [x.shape[1], x.shape[2], x.shape[3], out.shape[1], *at["kernel"], *at["stride"], *at["padding"],
                out.shape[2], out.shape[3]]
        return f"4 * pt2c_conv2d_smallp_scratch_floats({', '.join(map(str, args))})"
    args = [x.shape[1], x.shape[2], x.shape[3], out.shape[1], *at["kernel"], *at["stride"], *at["padding"],
            *at["dilation"], at["groups"], out.shape[2], out.shape[3]]
    return f"4 * pt2c_conv2d_scratch_floats({', '.join(map(str, args))})"


def _conv_flops(n: Node) -> int:
    return 2 * n.outputs[0].numel * int(np.prod(n.attrs["kernel"])) * n.inputs[0].shape[1] // n.attrs["groups"]


defop("conv2d", _ref_conv2d, _emit_conv2d, kernels=("conv",), scratch=_conv_scratch, scratch_c=_conv_scratch_c,
      flops=_conv_flops)


# ---------------------------------------------------------------- conv2d_pw_dw
# A 1x1 conv and the depthwise conv that alone reads its output, as one kernel call by groups of
# channels (passes/pwdw.py).  attrs: _pw and _dw, the two conv2d nodes as they were (their inputs
# are this node's: _pw's, then _dw's past its first, the intermediate that is never stored).

def _ref_conv2d_pw_dw(node: Node, *arrays: np.ndarray) -> np.ndarray:
    pw, dw = node.attrs["_pw"], node.attrs["_dw"]
    k = len(pw.inputs)
    return _ref_conv2d(dw, _ref_conv2d(pw, *arrays[:k]), *arrays[k:])


def _pw_dw_args(node: Node) -> list[int]:
    x, mid = node.inputs[0], node.attrs["_pw"].outputs[0]
    return [x.shape[1], x.shape[2], x.shape[3], mid.shape[1], *_dw_args(node.attrs["_dw"])[4:],
            *node.outputs[0].shape[2:]]


def _emit_conv2d_pw_dw(em: Any, node: Node) -> None:
    pw, dw = node.attrs["_pw"], node.attrs["_dw"]
    x, out = node.inputs[0], node.outputs[0]
    ep1 = epilogue_c(em, pw, 2, 1, var="ep_pw")
    ep2 = epilogue_c(em, dw, 2, 1, str(out.shape[2] * out.shape[3]), var="ep_dw")
    C, H, W, M, KH, KW, sh, sw, ph, pw_, dh, dw_, OH, OW = _pw_dw_args(node)
    em.line(f"pt2c_conv2d_pw_dw({em.ptr(out)}, {em.ptr(x)}, {em.ptr(pw.inputs[1])}, {ep1}, {em.ptr(dw.inputs[1])}, "
            f"{ep2}, {x.shape[0]}, {C}, {H}, {W}, {M}, {KH}, {KW}, {sh}, {sw}, {ph}, {pw_}, {dh}, {dw_}, {OH}, {OW}, "
            f"{em.scratch(node)});")


def _pw_dw_scratch(node: Node) -> int:
    from pt2c.kernels import scratch

    return 4 * scratch.conv2d_pw_dw_scratch_floats(*_pw_dw_args(node))


defop("conv2d_pw_dw", _ref_conv2d_pw_dw, _emit_conv2d_pw_dw, kernels=("conv",), scratch=_pw_dw_scratch,
      scratch_c=lambda n: f"4 * pt2c_conv2d_pw_dw_scratch_floats({', '.join(map(str, _pw_dw_args(n)))})",
      flops=lambda n: _conv_flops(n.attrs["_pw"]) + _conv_flops(n.attrs["_dw"]))


@lowers("aten.convolution.default", "aten.conv2d.default", "aten.conv1d.default")
def _lower_conv(ctx: Any, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if a.get("transposed"):
        from pt2c.ops.extra import lower_conv_transpose

        return lower_conv_transpose(ctx, a)
    if x.dtype != "float32":
        ctx.fail(f"convolution is implemented for float32 only (got {x.dtype})")
    if not w.is_const or len(w.shape) == 5:  # runtime weights, or 3-d: a direct loop
        from pt2c.ops.extra import lower_conv_direct

        return lower_conv_direct(ctx, a)
    nd = len(w.shape) - 2
    stride, padding, dilation = list(a["stride"]), list(a["padding"]), list(a["dilation"])
    if isinstance(padding, str) or nd not in (1, 2):
        ctx.fail(f"only 1-d and 2-d convolutions with explicit padding are supported (got {nd}-d)")
    if len(padding) == 1 and nd == 2:
        padding = padding * 2
    stride, dilation = (stride * nd)[:nd], (dilation * nd)[:nd]
    squeeze_batch = len(x.shape) == nd + 1
    if squeeze_batch:
        x = ctx.view(x, (1, *x.shape))
    if nd == 1:
        # conv1d as conv2d with H = 1
        x = ctx.view(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
        w = ctx.const(w.data.reshape(w.shape[0], w.shape[1], 1, w.shape[2]), w.name)
        stride, padding, dilation = [1, stride[0]], [0, padding[0]], [1, dilation[0]]
    N = x.shape[0]
    OC = w.shape[0]
    OH = (x.shape[2] + 2 * padding[0] - dilation[0] * (w.shape[2] - 1) - 1) // stride[0] + 1
    OW = (x.shape[3] + 2 * padding[1] - dilation[1] * (w.shape[3] - 1) - 1) // stride[1] + 1
    y = ctx.new("conv", (N, OC, OH, OW), "float32") if (nd == 1 or squeeze_batch) else out
    ins = [x, w] + ([bias] if bias is not None else [])
    ctx.emit("conv2d", ins, {"kernel": tuple(w.shape[2:]), "stride": tuple(stride), "padding": tuple(padding),
                             "dilation": tuple(dilation), "groups": int(a.get("groups", 1)), "has_bias": bias is not None}, [y])
    if y is not out:
        return ctx.view(y, out.shape, out=out)
    return out


# ---------------------------------------------------------------- attention

def _ref_sdpa(node: Node, q: np.ndarray, k: np.ndarray, v: np.ndarray, *mask: np.ndarray) -> np.ndarray:
    at = node.attrs
    H, Hkv = q.shape[-3], k.shape[-3]
    if Hkv != H:
        k = np.repeat(k, H // Hkv, axis=-3)
        v = np.repeat(v, H // Hkv, axis=-3)
    s = np.matmul(q.astype(np.float64), np.swapaxes(k.astype(np.float64), -1, -2)) * at["scale"]
    if at["causal"]:
        Lq, Lk = s.shape[-2:]
        s = np.where(np.tril(np.ones((Lq, Lk), bool)), s, -np.inf)
    if mask:
        m = mask[0]
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.matmul(p, v.astype(np.float64)).astype(np.float32)


def _emit_sdpa(em: Any, node: Node) -> None:
    q, k, v = node.inputs[:3]
    out = node.outputs[0]
    B, H, Lq, D = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    madd, mbool, strides = "NULL", "NULL", ["0"] * 4
    if len(node.inputs) > 3:
        m = node.inputs[3]
        ms = m.shape
        full = (1,) * (4 - len(ms)) + tuple(ms)
        from pt2c.ops.shape import contiguous_strides

        cs = contiguous_strides(full)
        strides = [str(0 if full[i] == 1 else cs[i]) for i in range(4)]
        if m.dtype == "bool":
            mbool = em.ptr(m)
        else:
            madd = em.ptr(m)
    em.line(f"pt2c_sdpa({em.ptr(out)}, {em.ptr(q)}, {em.ptr(k)}, {em.ptr(v)}, {madd}, {mbool}, {', '.join(strides)}, "
            f"{B}, {H}, {Hkv}, {Lq}, {Lk}, {D}, {Dv}, {em.flt(node.attrs['scale'])}, {int(node.attrs['causal'])}, {em.scratch(node)});")


def _sdpa_scratch(node: Node) -> int:
    from pt2c.kernels import scratch

    q, k, v = node.inputs[:3]
    return 4 * scratch.sdpa_scratch_floats(q.shape[2], k.shape[2], q.shape[3], v.shape[3])


defop("sdpa", _ref_sdpa, _emit_sdpa, kernels=("attention",), scratch=_sdpa_scratch,
      scratch_c=lambda n: "4 * pt2c_sdpa_scratch_floats(%d, %d, %d, %d)" % (
          n.inputs[0].shape[2], n.inputs[1].shape[2], n.inputs[0].shape[3], n.inputs[2].shape[3]),
      flops=lambda n: 4 * n.inputs[0].numel * n.inputs[1].shape[-2])


def _sdpa_bcast_kv(ctx: Any, q: Value, k: Value, v: Value) -> list[Value]:
    """Broadcast size-1 batch (and head) dims of 4-d key/value to the query's, as torch does.

    One head shared by both key and value (multi-query attention) stays as is: the kernel's GQA
    indexing (kv head = h / (H / Hkv)) reads that head for every query head."""
    from pt2c.ops.shape import contiguous_strides, make_strided

    mqa = k.shape[1] == 1 and v.shape[1] == 1
    res = []
    for hint, t in (("kb", k), ("vb", v)):
        shape = list(t.shape)
        if shape[0] == 1:
            shape[0] = q.shape[0]
        if shape[1] == 1 and not mqa:
            shape[1] = q.shape[1]
        if tuple(shape) != t.shape:
            st = contiguous_strides(t.shape)
            strides = tuple(0 if t.shape[i] != shape[i] else st[i] for i in range(4))
            t = make_strided(ctx, t, ctx.new(hint, tuple(shape), t.dtype), strides, 0)
        res.append(t)
    return res


@lowers("aten.scaled_dot_product_attention.default")
def _lower_sdpa(ctx: Any, a: dict[str, Any]) -> Value:
    q, k, v, mask = a["query"], a["key"], a["value"], a.get("attn_mask")
    out = ctx.out()
    if a.get("dropout_p", 0.0) not in (0, 0.0):
        ctx.fail("scaled_dot_product_attention with dropout_p > 0 (inference only: call model.eval())")
    if len(q.shape) == 3 and len(k.shape) == 3 and len(v.shape) == 3 and q.dtype == "float32":
        # [B, L, D]: one head
        q, k, v = (ctx.view(t, (1, *t.shape)) for t in (q, k, v))
        k, v = _sdpa_bcast_kv(ctx, q, k, v)
        if mask is not None and len(mask.shape) == 3:
            mask = ctx.view(mask, (1, *mask.shape))
        y = ctx.new("attn4", (1, *out.shape), "float32")
        ins = [q, k, v] + ([mask] if mask is not None else [])
        if mask is not None and mask.dtype not in ("bool", "float32"):
            ctx.fail(f"attention mask dtype {mask.dtype} (expected bool or float32)")
        scale = a.get("scale") or 1.0 / math.sqrt(q.shape[-1])
        ctx.emit("sdpa", ins, {"scale": float(scale), "causal": bool(a.get("is_causal", False))}, [y])
        return ctx.view(y, out.shape, out=out)
    if len(q.shape) != 4 or q.dtype != "float32":
        ctx.fail("scaled_dot_product_attention is supported for 4-d float32 [B, H, L, D] inputs")
    if len(k.shape) == 4 and len(v.shape) == 4:
        k, v = _sdpa_bcast_kv(ctx, q, k, v)
    if len(k.shape) != 4 or len(v.shape) != 4 or k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0] \
            or k.shape[1] != v.shape[1]:
        ctx.fail("scaled_dot_product_attention: key/value batch or head dims do not match the query's")
    if k.shape[1] != q.shape[1] and not a.get("enable_gqa") and k.shape[1] != 1:
        ctx.fail("key/value heads differ from query heads without enable_gqa")
    scale = a.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    ins = [q, k, v]
    if mask is not None:
        if mask.dtype not in ("bool", "float32"):
            ctx.fail(f"attention mask dtype {mask.dtype} (expected bool or float32)")
        ins.append(mask)
    ctx.emit("sdpa", ins, {"scale": float(scale), "causal": bool(a.get("is_causal", False))}, [out])
    return out
