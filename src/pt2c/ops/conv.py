"""Convolution, every form: 1-d, 2-d and 3-d, grouped and depthwise, transposed, runtime weights, col2im.

conv1d / conv2d with constant weights are `conv2d` (im2col + GEMM, Winograd F(4x4, 3x3), few-pixel
"smallp" or depthwise kernels, chosen per layer by passes/algorithms.py with conv_algorithm and
recorded as attrs["algo"]; weights prepacked by passes/prepack.py, or packed at every run when they
are computed at run time: pt2c_conv2d_rt); a 1x1 conv fused with the depthwise conv reading it is
`conv2d_pw_dw` (passes/pwdw.py); transposed 1-d / 2-d `conv_transpose2d`; 3-d and transposed 3-d
`conv_nd`; col2im (nn.Fold).  One argument normalisation for all: `conv_params`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pt2c.ir import DTYPES, Node, Origin, Value, VerifyError
from pt2c.kernels import layout, scratch
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.epilogue import check_epilogue, epilogue_c, epilogue_ref
from pt2c.ops.matmul import unpack_a, unpack_b
from pt2c.ops.registry import BACKWARD, UNSUPPORTED, arity, defop, dtype_in, ints, lowers, need, result
from pt2c.ops.util import empty_output, prod
from pt2c.sym import dynamic, sint


# ---------------------------------------------------------------- conv2d

def padding_end(at: dict[str, Any]) -> tuple[int, int]:
    """A conv2d's padding after the input (bottom, right): attrs["padding_end"] where a folded pad made it
    differ from the padding before (attrs["padding"]: top, left; passes/pads.py), else the same."""
    return tuple(at.get("padding_end", at["padding"]))  # type: ignore[return-value]


def conv2d_ref(x: np.ndarray, w: np.ndarray, stride: tuple, padding: tuple, dilation: tuple, groups: int,
               pad_end: tuple | None = None) -> np.ndarray:
    N, C, H, W = x.shape
    OC, Cg, KH, KW = w.shape
    sh, sw = stride
    ph, pw = padding
    pe_h, pe_w = pad_end if pad_end is not None else padding
    dh, dw = dilation
    OH = (H + ph + pe_h - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pw + pe_w - dw * (KW - 1) - 1) // sw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, pe_h), (pw, pe_w)))
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
    if at.get("w_packed"):  # prepacked (passes/prepack.py): the reference reads it unpacked
        w = unpack_conv_weight(node, w)
    y = conv2d_ref(x, w, at["stride"], at["padding"], at["dilation"], at["groups"], padding_end(at))
    return epilogue_ref(node, y, list(extra), 1)


def is_depthwise(node: Node) -> bool:
    C = node.inputs[0].shape[1]
    return node.attrs["groups"] == C and C > 1


def use_winograd(node: Node) -> bool:
    """Winograd F(4x4, 3x3) (pt2c_conv2d_wino) instead of im2col + GEMM: 3x3, stride 1,
    dilation 1, and enough output pixels and channels (per group: a grouped conv runs the kernel
    once per group, RegNet's group width 64) for the 4x fewer multiplications to pay for the
    transforms (bench/conv_bench.py)."""
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    G = at["groups"]
    C, OC, OH, OW = x.shape[1] // G, out.shape[1] // G, out.shape[2], out.shape[3]
    return (tuple(at["kernel"]) == (3, 3) and tuple(at["stride"]) == (1, 1) and tuple(at["dilation"]) == (1, 1)
            and not is_depthwise(node) and C >= 16 and OC >= 16 and ((OH + 3) // 4) * ((OW + 3) // 4) >= 16)


def use_smallp(node: Node) -> bool:
    """pt2c_conv2d_smallp (pixels as the GEMM's 6-row side) instead of pt2c_conv2d: ungrouped, and so
    few output pixels that 16-wide pixel panels would waste >= 15% (7x7 maps: 49 of 64).  Measured
    1.1-1.35x on 7x7 3x3 and 1x1 convs, but 0.86x on strided 1x1 ones, which keep pt2c_conv2d."""
    at = node.attrs
    out = node.outputs[0]
    P = out.shape[2] * out.shape[3]
    one_by_one = tuple(at["kernel"]) == (1, 1)
    strided_1x1 = one_by_one and (tuple(at["stride"]) != (1, 1) or tuple(at["padding"]) != (0, 0)
                                  or padding_end(at) != (0, 0))
    waste = ((P + 15) // 16 * 16 - P) / max(1, (P + 15) // 16 * 16)
    return at["groups"] == 1 and not strided_1x1 and 0 < P <= 64 and waste >= 0.15


ALGOS = ("im2col", "winograd", "smallp", "depthwise")  # conv2d's attrs["algo"]: which kernel runs it


def conv_algorithm(node: Node, winograd: bool) -> str:
    """The kernel a conv2d runs (passes/algorithms.py records it as attrs["algo"]): depthwise convs
    their direct kernel; Winograd where allowed and it pays (use_winograd); few output pixels
    "smallp" (use_smallp); everything else im2col + GEMM (pt2c_conv2d, 1x1 without im2col)."""
    if is_depthwise(node):
        return "depthwise"
    if not node.inputs[1].is_const and not node.attrs.get("w_packed"):  # packed at run time by pt2c_conv2d_rt
        return "im2col"
    if dynamic(node.outputs[0].shape[2:]):  # a run-time spatial size: the kernel for every size
        return "im2col"
    if winograd and use_winograd(node):
        return "winograd"
    if use_smallp(node):
        return "smallp"
    return "im2col"


def packed_conv_weight_size(node: Node) -> int:
    """Floats of the weight prepacked for the node's algorithm (kernels/layout.py): 36 Winograd A
    operands, W^T as one B operand (smallp), or one A operand per group (im2col)."""
    at = node.attrs
    C, OC, G = node.inputs[0].shape[1], node.outputs[0].shape[1], at["groups"]
    KH, KW = at["kernel"]
    if at["algo"] == "winograd":
        return G * 36 * layout.packed_a_size(OC // G, C // G)
    if at["algo"] == "smallp":
        return layout.packed_b_size(C * KH * KW, OC)
    return G * layout.packed_a_size(OC // G, C // G * KH * KW)


def unpack_conv_weight(node: Node, p: np.ndarray) -> np.ndarray:
    """The OIHW weight a prepacked conv2d weight came from (the inverse of passes/prepack.py; Winograd's
    filter transform inverted by least squares, in float64: within float32 rounding of the original)."""
    at = node.attrs
    C, OC, G = node.inputs[0].shape[1], node.outputs[0].shape[1], at["groups"]
    KH, KW = at["kernel"]
    p = np.asarray(p).reshape(-1)
    if at["algo"] == "winograd":  # per group: 36 packed A operands of OC/G x C/G
        O, I = OC // G, C // G
        sz = layout.packed_a_size(O, I)
        g_inv = np.linalg.pinv(layout.WINO_G)  # 3 x 6: G^+ (G w G^T) G^+T = w
        parts = []
        for g in range(G):
            pg = p[g * 36 * sz:(g + 1) * 36 * sz]
            u = np.stack([unpack_a(pg[i * sz:(i + 1) * sz], O, I) for i in range(36)]).reshape(6, 6, O, I)
            parts.append(np.einsum("kr,rtoc,st->ocks", g_inv, u.astype(np.float64), g_inv))
        return np.concatenate(parts)
    if at["algo"] == "smallp":
        return unpack_b(p, C * KH * KW, OC).T.reshape(OC, C, KH, KW)
    sz, k = layout.packed_a_size(OC // G, C // G * KH * KW), C // G * KH * KW
    return np.concatenate([unpack_a(p[g * sz:(g + 1) * sz], OC // G, k) for g in range(G)]).reshape(OC, C // G, KH, KW)


def _check_conv2d(node: Node) -> None:
    """[N, C, H, W] -> [N, OC, OH, OW] (conv_out_size); the weight [OC, C / groups, KH, KW], or 1-d when
    prepacked (its size for the algorithm); bias [OC] and residual by the epilogue; an algorithm the
    shape allows (Winograd: 3x3, stride and dilation 1, ungrouped; smallp: ungrouped; depthwise iff
    groups == C > 1)."""
    need(len(node.outputs) == 1, f"{len(node.outputs)} outputs, expected 1")
    at = node.attrs
    x, w, out = node.inputs[0], node.inputs[1], node.outputs[0]
    need(ints(at["kernel"], 2, 1) and ints(at["stride"], 2, 1) and ints(at["padding"], 2, 0)
         and ints(padding_end(at), 2, 0) and ints(at["dilation"], 2, 1) and type(at["groups"]) is int
         and at["groups"] >= 1, "kernel / stride / padding / padding_end / dilation / groups")
    for v, what in ((x, "input"), (w, "weight")):
        dtype_in(v, ("float32",), what)
    need(len(x.shape) == 4, f"input %{x.name} is rank {len(x.shape)}, expected 4")
    N, C, H, W = x.shape
    OC, G, (KH, KW) = out.shape[1] if len(out.shape) == 4 else -1, at["groups"], at["kernel"]
    need(C % G == 0 and OC % G == 0, f"{C} -> {OC} channels in {G} groups")
    pe = padding_end(at)
    result(out, (N, OC, conv_out_size(H, KH, at["stride"][0], at["padding"][0], at["dilation"][0], pe[0]),
                 conv_out_size(W, KW, at["stride"][1], at["padding"][1], at["dilation"][1], pe[1])), "float32")
    check_epilogue(node, 2, (OC,))
    algo = at.get("algo")
    need(algo is None or algo in ALGOS, f"unknown algorithm {algo!r}")
    if algo is not None:
        need((algo == "depthwise") == is_depthwise(node), f"algorithm {algo} for groups {G} of {C} channels")
        need(algo != "winograd" or (tuple(at["kernel"]) == (3, 3) and tuple(at["stride"]) == (1, 1)
                                    and tuple(at["dilation"]) == (1, 1)), "Winograd on a conv that is not 3x3/1")
        need(algo != "smallp" or G == 1, "smallp on a grouped conv")
    if at.get("w_packed"):
        need(at["w_packed"] is True and algo not in (None, "depthwise"), f"packed weights for algorithm {algo}")
        need(w.shape == (packed_conv_weight_size(node),),
             f"packed weight %{w.name} {list(w.shape)} is not the {packed_conv_weight_size(node)} floats of {algo}")
    else:
        need(w.shape == (OC, C // G, KH, KW), f"weight %{w.name} {list(w.shape)}, expected {[OC, C // G, KH, KW]}")


def _emit_conv2d(em: EmitCtx, node: Node) -> None:
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
    elif at.get("algo") == "winograd" and at["groups"] == 1:
        em.line(f"pt2c_conv2d_wino({Y}, {X}, {Wt}, {ep}, {N}, {C}, {H}, {W}, {OC}, {ph}, {pw}, {OH}, {OW}, "
                f"{em.scratch(node)}); /* Winograd F(4x4, 3x3) */")
    elif at.get("algo") == "winograd":  # one call per image and group, its epilogue offset to the group
        # (loop variables with "__": generated value names never contain it, so none is shadowed)
        G = at["groups"]
        Cg, OCg = C // G, OC // G
        wsz = 36 * layout.packed_a_size(OCg, Cg)
        em.line(f"for (int n__ = 0; n__ < {sint(N)}; n__++) {{")
        em.line(f"    for (int g__ = 0; g__ < {sint(G)}; g__++) {{")
        em.line(f"        const size_t o__ = ((size_t)n__ * {OC} + (size_t)g__ * {OCg}) * {OH * OW};")
        egp = "NULL"
        if ep != "NULL":
            em.line("        pt2c_epilogue ep__ = ep;")
            if at.get("has_bias"):
                em.line(f"        ep__.bias += g__ * {OCg};")
            if at.get("has_residual"):
                em.line("        ep__.residual += o__;")
            egp = "&ep__"
        em.line(f"        pt2c_conv2d_wino({Y} + o__, {X} + ((size_t)n__ * {C} + (size_t)g__ * {Cg}) * {H * W}, "
                f"{Wt} + (size_t)g__ * {wsz}, {egp}, 1, {Cg}, {H}, {W}, {OCg}, {ph}, {pw}, {OH}, {OW}, "
                f"{em.scratch(node)}); /* Winograd F(4x4, 3x3), group g__ */")
        em.line("    }")
        em.line("}")
    elif at.get("algo") == "smallp":
        em.line(f"pt2c_conv2d_smallp({Y}, {X}, {Wt}, {ep}, {N}, {C}, {H}, {W}, {OC}, {KH}, {KW}, "
                f"{sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {OH}, {OW}, {em.scratch(node)});")
    else:
        fn = "pt2c_conv2d" if at.get("w_packed") else "pt2c_conv2d_rt"  # (rt: weights packed at every run)
        em.line(f"{fn}({Y}, {X}, {Wt}, {ep}, {N}, {C}, {H}, {W}, {OC}, {KH}, {KW}, "
                f"{sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {at['groups']}, {OH}, {OW}, {em.scratch(node)});")


def _dw_args(node: Node) -> list[int]:
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    return [x.shape[2], x.shape[3], out.shape[2], out.shape[3], *at["kernel"], *at["stride"], *at["padding"],
            *at["dilation"]]


def _conv_scratch_call(node: Node) -> tuple[Callable[..., int], list[int]]:
    """The kernel's scratch-size function (its Python mirror in kernels/scratch.py; the C one is
    named pt2c_<the same>) and its arguments."""
    if is_depthwise(node):
        return scratch.conv2d_depthwise_scratch_floats, _dw_args(node)
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    if at.get("algo") == "winograd":
        G = at["groups"]
        return scratch.conv2d_wino_scratch_floats, [x.shape[1] // G, out.shape[1] // G, out.shape[2], out.shape[3]]
    if at.get("algo") == "smallp":
        return scratch.conv2d_smallp_scratch_floats, [x.shape[1], x.shape[2], x.shape[3], out.shape[1], *at["kernel"],
                                                      *at["stride"], *at["padding"], *at["dilation"], out.shape[2],
                                                      out.shape[3]]
    fn = scratch.conv2d_scratch_floats if at.get("w_packed") else scratch.conv2d_rt_scratch_floats
    return fn, [x.shape[1], x.shape[2], x.shape[3], out.shape[1], *at["kernel"], *at["stride"], *at["padding"],
                *at["dilation"], at["groups"], out.shape[2], out.shape[3]]


def _scratch_bytes(call: tuple[Callable[..., int], list[int]]) -> int:
    fn, args = call
    return 4 * fn(*args)


def _scratch_c(call: tuple[Callable[..., int], list[int]]) -> str:
    """The same size as a C expression, checked against the Python mirror at init."""
    fn, args = call
    return f"4 * pt2c_{fn.__name__}({', '.join(map(str, args))})"


def _conv_flops(n: Node) -> int:
    return 2 * n.outputs[0].numel * prod(n.attrs["kernel"]) * n.inputs[0].shape[1] // n.attrs["groups"]


def _describe_conv2d(node: Node) -> str:
    a = node.attrs
    return (f"conv2d {a['kernel'][0]}x{a['kernel'][1]} s{a['stride'][0]} p{a['padding'][0]}"
            + (f" g{a['groups']}" if a["groups"] > 1 else "") + (" +bias" if a.get("has_bias") else "")
            + (" +residual" if a.get("has_residual") else "") + (f" +{a['act']}" if a.get("act") else ""))


defop("conv2d", _ref_conv2d, _emit_conv2d, kernels=("conv",), scratch=lambda n: _scratch_bytes(_conv_scratch_call(n)),
      scratch_c=lambda n: _scratch_c(_conv_scratch_call(n)), flops=_conv_flops, describe=_describe_conv2d,
      rule=_check_conv2d)


# ---------------------------------------------------------------- conv2d_pw_dw
# A 1x1 conv and the depthwise conv that alone reads its output, as one kernel call by groups of
# channels (passes/pwdw.py).  Its inputs are the 1x1 conv's (the first pw_inputs), then the depthwise
# conv's past its first (the intermediate, never stored).  attrs, plain data: pw and dw, the two
# conv2d nodes' attrs; mid, the intermediate's (name, shape, dtype); pw_origin, the 1x1 conv's Origin
# fields (its C comment names its own layer).  pw_dw_parts rebuilds the two nodes from them.

def pw_dw_parts(node: Node) -> tuple[Node, Node]:
    """The 1x1 conv and the depthwise conv a conv2d_pw_dw node runs, as conv2d nodes (for the
    reference, the C comments and the checks; the fused node stays the producer of its output)."""
    at = node.attrs
    k = at["pw_inputs"]
    name, shape, dtype = at["mid"]
    mid = Value(name, tuple(shape), dtype)
    pw = Node("conv2d", list(node.inputs[:k]), dict(at["pw"]), [mid], Origin(*at["pw_origin"]))
    dw = Node("conv2d", [mid, *node.inputs[k:]], dict(at["dw"]), [], node.origin)
    dw.outputs = list(node.outputs)  # not through Node(), which would make dw their producer
    return pw, dw


def _ref_conv2d_pw_dw(node: Node, *arrays: np.ndarray) -> np.ndarray:
    pw, dw = pw_dw_parts(node)
    k = len(pw.inputs)
    return _ref_conv2d(dw, _ref_conv2d(pw, *arrays[:k]), *arrays[k:])


def _pw_dw_args(node: Node) -> list[int]:
    _, dw = pw_dw_parts(node)
    x, mid = node.inputs[0], dw.inputs[0]
    return [x.shape[1], x.shape[2], x.shape[3], mid.shape[1], *_dw_args(dw)[4:], *node.outputs[0].shape[2:]]


def _check_conv2d_pw_dw(node: Node) -> None:
    """Its two parts are valid conv2d nodes: a prepacked im2col 1x1 conv, stride 1, no padding, no
    residual, and the depthwise conv over its output (same channels)."""
    at = node.attrs
    need(set(at) == {"pw", "dw", "pw_inputs", "mid", "pw_origin"}, f"attrs {sorted(at)}")
    need(type(at["pw_inputs"]) is int and 2 <= at["pw_inputs"] < len(node.inputs), "pw_inputs")
    mid = at["mid"]
    need(type(mid) is tuple and len(mid) == 3 and type(mid[0]) is str and ints(mid[1], 4, 0) and mid[2] in DTYPES,
         "mid is not (name, shape, dtype)")
    need(type(at["pw_origin"]) is tuple and len(at["pw_origin"]) == 4 and all(type(s) is str for s in at["pw_origin"]),
         "pw_origin is not the four Origin strings")
    pw, dw = pw_dw_parts(node)
    for part, what in ((pw, "the 1x1 conv"), (dw, "the depthwise conv")):
        try:
            _check_conv2d(part)
        except VerifyError as e:
            raise VerifyError(f"{what}: {e}") from None
    p = pw.attrs
    need(tuple(p["kernel"]) == (1, 1) and tuple(p["stride"]) == (1, 1) and tuple(p["padding"]) == (0, 0)
         and p["groups"] == 1 and p.get("w_packed") and p.get("algo") == "im2col" and not p.get("has_residual"),
         "the first part is not a prepacked 1x1 stride-1 im2col conv without residual")
    need(dw.attrs.get("algo") == "depthwise" and dw.outputs[0].shape[1] == mid[1][1],
         "the second part is not a depthwise conv over the first's channels")


def _emit_conv2d_pw_dw(em: EmitCtx, node: Node) -> None:
    pw, dw = pw_dw_parts(node)
    x, out = node.inputs[0], node.outputs[0]
    ep1 = epilogue_c(em, pw, 2, 1, var="ep_pw")
    ep2 = epilogue_c(em, dw, 2, 1, str(out.shape[2] * out.shape[3]), var="ep_dw")
    C, H, W, M, KH, KW, sh, sw, ph, pw_, dh, dw_, OH, OW = _pw_dw_args(node)
    em.line(f"pt2c_conv2d_pw_dw({em.ptr(out)}, {em.ptr(x)}, {em.ptr(pw.inputs[1])}, {ep1}, {em.ptr(dw.inputs[1])}, "
            f"{ep2}, {x.shape[0]}, {C}, {H}, {W}, {M}, {KH}, {KW}, {sh}, {sw}, {ph}, {pw_}, {dh}, {dw_}, {OH}, {OW}, "
            f"{em.scratch(node)});")


def _pw_dw_scratch_call(node: Node) -> tuple[Callable[..., int], list[int]]:
    return scratch.conv2d_pw_dw_scratch_floats, _pw_dw_args(node)


defop("conv2d_pw_dw", _ref_conv2d_pw_dw, _emit_conv2d_pw_dw, kernels=("conv",),
      scratch=lambda n: _scratch_bytes(_pw_dw_scratch_call(n)), scratch_c=lambda n: _scratch_c(_pw_dw_scratch_call(n)),
      flops=lambda n: sum(_conv_flops(p) for p in pw_dw_parts(n)), rule=_check_conv2d_pw_dw,
      parts=lambda n: list(zip(pw_dw_parts(n), (" (by groups of channels, not stored)", ""))))


# ---------------------------------------------------------------- lowering: one argument normalisation for every form

def conv_params(a: dict[str, Any], nd: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """stride, padding, dilation, output_padding and groups of a convolution's (normalised ATen)
    arguments: one value per spatial dim (a single value is repeated, a missing one is the default)."""

    def per_dim(v: Any, dflt: int) -> tuple[int, ...]:
        v = list(v) if v is not None else [dflt]
        v = v or [dflt]
        return tuple(int(t) for t in (v * nd if len(v) == 1 else v))

    return (per_dim(a["stride"], 1), per_dim(a["padding"], 0), per_dim(a["dilation"], 1),
            per_dim(a.get("output_padding"), 0), int(a.get("groups", 1)))


def params_2d(stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...],
              opad: tuple[int, ...]) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    """A 1-d convolution's params for the same convolution in 2-d over a height of 1."""
    return (1, stride[0]), (0, padding[0]), (1, dilation[0]), (0, opad[0])


def input_nchw(ctx: LowerCtx, x: Value, nd: int) -> Value:
    """x as [N, C, H, W] (views): a batch of 1 for an unbatched input, a height of 1 for a 1-d one."""
    if len(x.shape) == nd + 1:
        x = ctx.view(x, (1, *x.shape))
    if nd == 1:
        x = ctx.view(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    return x


def conv_out_size(n: int, k: int, s: int, p: int, d: int, p_end: int | None = None) -> int:
    """Output size along one dim: input n, kernel k, stride s, padding p (and p_end after, if it differs),
    dilation d."""
    return (n + p + (p if p_end is None else p_end) - d * (k - 1) - 1) // s + 1


@lowers("aten.convolution.default", "aten.conv2d.default", "aten.conv1d.default")
def _lower_conv(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if a.get("transposed"):
        return lower_conv_transpose(ctx, a)
    if x.dtype != "float32":
        ctx.fail(f"convolution is implemented for float32 only (got {x.dtype})")
    if not w.is_const or len(w.shape) == 5:  # runtime weights (packed at run time), or 3-d: a direct loop
        return lower_conv_runtime(ctx, a)
    nd = len(w.shape) - 2
    if nd not in (1, 2):
        ctx.fail(f"only 1-d and 2-d convolutions with explicit padding are supported (got {nd}-d)")
    stride, padding, dilation, _, groups = conv_params(a, nd)
    squeeze_batch = len(x.shape) == nd + 1
    x = input_nchw(ctx, x, nd)
    if nd == 1:  # conv1d as conv2d with H = 1
        w = ctx.const(w.data.reshape(w.shape[0], w.shape[1], 1, w.shape[2]), w.name)
        stride, padding, dilation, _ = params_2d(stride, padding, dilation, (0,))
    N = x.shape[0]
    OC = w.shape[0]
    OH = conv_out_size(x.shape[2], w.shape[2], stride[0], padding[0], dilation[0])
    OW = conv_out_size(x.shape[3], w.shape[3], stride[1], padding[1], dilation[1])
    y = ctx.new("conv", (N, OC, OH, OW), "float32") if (nd == 1 or squeeze_batch) else out
    ins = [x, w] + ([bias] if bias is not None else [])
    ctx.emit("conv2d", ins, {"kernel": tuple(w.shape[2:]), "stride": stride, "padding": padding,
                             "dilation": dilation, "groups": groups, "has_bias": bias is not None}, [y])
    if y is not out:
        return ctx.view(y, out.shape, out=out)
    return out


# ---------------------------------------------------------------- direct-loop convolutions (3-d, transposed): shared checks

def _check_direct_params(node: Node, nd: int, transposed: bool) -> None:
    """A direct-loop convolution of nd spatial dims: x [N, C, *in], w [OC, C / g, *k] ([C, OC / g, *k]
    transposed), an optional bias [OC]; the output [N, OC, *out] from the attrs."""
    at = node.attrs
    arity(node, (2, 3))
    x, w = node.inputs[:2]
    for key, lo in (("stride", 1), ("padding", 0), ("dilation", 1)):
        need(ints(at[key], nd, lo), f"{key} is not {nd} ints >= {lo}")
    if transposed:
        need(ints(at["output_padding"], nd, 0), f"output_padding is not {nd} ints >= 0")
    G = at["groups"]
    need(type(G) is int and G >= 1, "groups")
    for v, what in ((x, "input"), (w, "weight")):
        dtype_in(v, ("float32",), what)
        need(len(v.shape) == nd + 2, f"{what} %{v.name} is rank {len(v.shape)}, expected {nd + 2}")
    C, ks = x.shape[1], w.shape[2:]
    if transposed:
        OC = w.shape[1] * G
        need(w.shape[0] == C and C % G == 0, f"weight {list(w.shape)} for {C} input channels in {G} groups")
        size = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, k, s, p, d, op in
                zip(x.shape[2:], ks, at["stride"], at["padding"], at["dilation"], at["output_padding"])]
    else:
        OC = w.shape[0]
        need(w.shape[1] * G == C and OC % G == 0, f"weight {list(w.shape)} for {C} input channels in {G} groups")
        size = [conv_out_size(i, k, s, p, d) for i, k, s, p, d in
                zip(x.shape[2:], ks, at["stride"], at["padding"], at["dilation"])]
    if len(node.inputs) == 3:
        dtype_in(node.inputs[2], ("float32",), "bias")
        need(node.inputs[2].shape == (OC,), f"bias {list(node.inputs[2].shape)}, expected [{OC}]")
    result(node.outputs[0], (x.shape[0], OC, *size), "float32")


def lower_conv_runtime(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    """A convolution whose weights are computed at run time: a conv2d all the same, whose kernel packs the
    weights into scratch at every run (pt2c_conv2d_rt; depthwise convs read them as they are); 3-d ones
    a direct loop (conv_nd)."""
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if x.dtype != "float32" or w.dtype != "float32":
        ctx.fail(f"convolution is implemented for float32 only (got {x.dtype})")
    nd = len(w.shape) - 2
    if nd == 3:
        return lower_conv_nd(ctx, a)
    if nd not in (1, 2):
        ctx.fail(f"only 1-d, 2-d and 3-d convolutions are supported (got {nd}-d)")
    stride, padding, dilation, _, groups = conv_params(a, nd)
    xs = input_nchw(ctx, x, nd)
    ws = w
    if nd == 1:
        ws = ctx.view(w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        stride, padding, dilation, _ = params_2d(stride, padding, dilation, (0,))
    OH = conv_out_size(xs.shape[2], ws.shape[2], stride[0], padding[0], dilation[0])
    OW = conv_out_size(xs.shape[3], ws.shape[3], stride[1], padding[1], dilation[1])
    oshape = (xs.shape[0], ws.shape[0], OH, OW)
    y = out if oshape == out.shape else ctx.new("conv", oshape, "float32")
    ctx.emit("conv2d", [xs, ws] + ([bias] if bias is not None else []),
             {"kernel": tuple(ws.shape[2:]), "stride": stride, "padding": padding, "dilation": dilation,
              "groups": groups, "has_bias": bias is not None}, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)


# ---------------------------------------------------------------- transposed convolution (direct scatter loop)

def _ref_conv_t(node: Node, x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    import torch

    at = node.attrs
    y = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(np.array(x, np.float64)), torch.from_numpy(np.array(w, np.float64)),
        torch.from_numpy(np.array(bias[0], np.float64)) if bias else None, at["stride"], at["padding"],
        at["output_padding"], at["groups"], at["dilation"])
    return y.numpy().astype(np.float32)


def _emit_conv_t(em: EmitCtx, node: Node) -> None:
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
    em.line(f"        for (long u_ih = 0; u_ih < {sint(H)}; u_ih++) for (long u_kh = 0; u_kh < {sint(KH)}; u_kh++) {{")
    em.line(f"            long u_oh = u_ih * {sh} - {ph} + u_kh * {dh};")
    em.line(f"            if (u_oh < 0 || u_oh >= {sint(OH)}) continue;")
    em.line(f"            for (long u_iw = 0; u_iw < {sint(W)}; u_iw++) for (long u_kw = 0; u_kw < {sint(KW)}; u_kw++) {{")
    em.line(f"                long u_ow = u_iw * {sw} - {pw} + u_kw * {dw};")
    em.line(f"                if (u_ow < 0 || u_ow >= {sint(OW)}) continue;")
    em.line(f"                u_y[u_oh * {OW} + u_ow] += u_x[u_ih * {W} + u_iw] * u_w[u_kh * {KW} + u_kw];")
    em.line("            }")
    em.line("        }")
    em.line("    }")
    em.line("}")


defop("conv_transpose2d", _ref_conv_t, _emit_conv_t, rule=lambda n: _check_direct_params(n, 2, True),
      flops=lambda n: 2 * n.inputs[0].numel * prod(n.inputs[1].shape[1:]))


def lower_conv_transpose(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if x.dtype != "float32" or w.dtype != "float32":
        ctx.fail(f"transposed convolution is implemented for float32 only (got {x.dtype})")
    nd = len(w.shape) - 2
    if nd == 3:
        return lower_conv_nd(ctx, a)
    if nd not in (1, 2):
        ctx.fail(f"only 1-d, 2-d and 3-d transposed convolutions are supported (got {nd}-d)")
    stride, padding, dilation, opad, groups = conv_params(a, nd)
    xs = input_nchw(ctx, x, nd)
    ws = w
    if nd == 1:
        ws = ctx.view(w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        stride, padding, dilation, opad = params_2d(stride, padding, dilation, opad)
    oshape = (xs.shape[0], out.shape[-3] if nd == 2 else out.shape[-2], *(out.shape[-2:] if nd == 2 else (1, out.shape[-1])))
    y = out if oshape == out.shape else ctx.new("convt", oshape, "float32")
    ins = [xs, ws] + ([bias] if bias is not None else [])
    ctx.emit("conv_transpose2d", ins, {"stride": stride, "padding": padding, "dilation": dilation,
                                       "output_padding": opad, "groups": groups}, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)


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


def _emit_conv_nd(em: EmitCtx, node: Node) -> None:
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
    olp = " ".join(f"for (long u_o{d} = 0; u_o{d} < {sint(osz[d])}; u_o{d}++)" for d in range(nd))
    em.line(f"for (size_t u_n = 0; u_n < {N}; u_n++) for (size_t u_oc = 0; u_oc < {OC}; u_oc++) {olp} {{")
    em.line(f"    double u_acc = {('(double)' + B + '[u_oc]') if B else '0.0'};")
    em.line(f"    size_t u_g = u_oc / {OCg}, u_ocg = u_oc % {OCg}; (void)u_ocg;")
    em.line(f"    for (size_t u_icg = 0; u_icg < {Cg}; u_icg++) {{")
    em.line(f"        size_t u_ic = u_g * {Cg} + u_icg;")
    depth = 2
    for d in range(nd):
        pad = "    " * depth
        em.line(pad + f"for (long u_k{d} = 0; u_k{d} < {sint(ksz[d])}; u_k{d}++) {{")
        if tr:
            em.line(pad + f"    long u_t{d} = u_o{d} + {pd[d]} - u_k{d} * {dl[d]};")
            em.line(pad + f"    if (u_t{d} < 0 || u_t{d} % {st[d]} != 0) continue;")
            em.line(pad + f"    long u_i{d} = u_t{d} / {st[d]};")
            em.line(pad + f"    if (u_i{d} >= {isz[d]}) continue;")
        else:
            em.line(pad + f"    long u_i{d} = u_o{d} * {st[d]} - {pd[d]} + u_k{d} * {dl[d]};")
            em.line(pad + f"    if (u_i{d} < 0 || u_i{d} >= {sint(isz[d])}) continue;")
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


def _check_conv_nd(node: Node) -> None:
    need(type(node.attrs["transposed"]) is bool and len(node.inputs) >= 2, "transposed / inputs")
    _check_direct_params(node, len(node.inputs[1].shape) - 2, node.attrs["transposed"])


defop("conv_nd", _ref_conv_nd, _emit_conv_nd, rule=_check_conv_nd,
      flops=lambda n: 2 * max(n.outputs[0].numel, n.inputs[0].numel) * prod(n.inputs[1].shape[1:]))


def lower_conv_nd(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    """Convolution (plain or transposed) of any spatial rank with a direct loop; used for 3-d."""
    x, w, bias = a["input"], a["weight"], a.get("bias")
    out = ctx.out()
    if x.dtype != "float32" or w.dtype != "float32" or (bias is not None and bias.dtype != "float32"):
        ctx.fail(f"convolution is implemented for float32 only (got {x.dtype})")
    nd = len(w.shape) - 2
    tr = bool(a.get("transposed", False))
    if isinstance(a["padding"], str):
        ctx.fail("convolution with string padding")
    stride, padding, dilation, opad, groups = conv_params(a, nd)
    xs = ctx.view(x, (1, *x.shape)) if len(x.shape) == nd + 1 else x
    oshape = (xs.shape[0], *out.shape[-nd - 1:])
    if out.numel == 0:
        return empty_output(ctx, out)
    y = out if oshape == out.shape else ctx.new("conv", oshape, "float32")
    ctx.emit("conv_nd", [xs, w] + ([bias] if bias is not None else []),
             {"stride": stride, "padding": padding, "dilation": dilation, "output_padding": opad,
              "transposed": tr, "groups": groups}, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)


# ---------------------------------------------------------------- col2im (nn.Fold): sum the columns back into the image

def _ref_col2im(node: Node, col: np.ndarray) -> np.ndarray:
    import torch

    at = node.attrs
    return torch.ops.aten.col2im.default(torch.from_numpy(np.array(col, np.float64)), list(at["size"]),
                                         list(at["kernel"]), list(at["dilation"]), list(at["padding"]),
                                         list(at["stride"])).numpy().astype(np.float32)


def _emit_col2im(em: EmitCtx, node: Node) -> None:
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
            f" for (long u_ki = 0; u_ki < {sint(KH)}; u_ki++) for (long u_kj = 0; u_kj < {sint(KW)}; u_kj++) {{")
    em.line(f"    const float *u_x = {X} + (u_n * {CK} + (u_c * {KH} + (size_t)u_ki) * {KW} + (size_t)u_kj) * {L};")
    em.line(f"    float *u_y = {Y} + (u_n * {C} + u_c) * {H * W};")
    em.line(f"    for (long u_bh = 0; u_bh < {sint(BH)}; u_bh++) {{")
    em.line(f"        long u_h = u_bh * {sh} - {ph} + u_ki * {dh};")
    em.line(f"        if (u_h < 0 || u_h >= {sint(H)}) continue;")
    em.line(f"        for (long u_bw = 0; u_bw < {sint(BW)}; u_bw++) {{")
    em.line(f"            long u_w = u_bw * {sw} - {pw} + u_kj * {dw};")
    em.line(f"            if (u_w >= 0 && u_w < {W}) u_y[u_h * {W} + u_w] += u_x[u_bh * {BW} + u_bw];")
    em.line("        }")
    em.line("    }")
    em.line("}")


def _check_col2im(node: Node) -> None:
    """[N, C * KH * KW, L] -> [N, C, *size], L the number of sliding blocks."""
    arity(node, 1)
    at = node.attrs
    need(ints(at["size"], 2, 0) and ints(at["kernel"], 2, 1) and ints(at["dilation"], 2, 1)
         and ints(at["padding"], 2, 0) and ints(at["stride"], 2, 1), "size / kernel / dilation / padding / stride")
    col = node.inputs[0]
    dtype_in(col, ("float32",), "input")
    need(len(col.shape) == 3 and col.shape[1] % prod(at["kernel"]) == 0, f"input {list(col.shape)}")
    blocks = prod(conv_out_size(n, k, s, p, d) for n, k, s, p, d in
                  zip(at["size"], at["kernel"], at["stride"], at["padding"], at["dilation"]))
    need(col.shape[2] == blocks, f"{col.shape[2]} columns for {blocks} blocks")
    result(node.outputs[0], (col.shape[0], col.shape[1] // prod(at["kernel"]), *at["size"]), "float32")


defop("col2im", _ref_col2im, _emit_col2im, rule=_check_col2im)


@lowers("aten.col2im.default")
def _lower_col2im(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    col, out = a["self"], ctx.out()
    if col.dtype != "float32":
        ctx.fail(f"col2im is implemented for float32 only (got {col.dtype})")

    def two(v: Any) -> tuple[int, int]:
        v = [int(t) for t in v]
        return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])

    attrs = {"size": two(a["output_size"]), "kernel": two(a["kernel_size"]), "dilation": two(a["dilation"]),
             "padding": two(a["padding"]), "stride": two(a["stride"])}
    if out.numel == 0:
        return empty_output(ctx, out)
    x = ctx.view(col, (1, *col.shape)) if len(col.shape) == 2 else col
    y = out if len(out.shape) == 4 else ctx.new("fold", (1, *out.shape), "float32")
    if x.numel == 0:
        return empty_output(ctx, out)
    ctx.emit("col2im", [x], attrs, [y])
    return out if y is out else ctx.view(y, out.shape, out=out)


# core ATen ops of this family that pt2c does not lower, and why (docs/ops.md)
UNSUPPORTED["aten.convolution_backward.default"] = BACKWARD
