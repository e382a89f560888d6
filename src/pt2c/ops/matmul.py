"""Matrix products and attention: mm / bmm / addmm / linear on the GEMM kernel, scaled_dot_product_attention.

`matmul`: out[..., M, N] = act(a[..., M, K] @ b[..., K, N] + bias[N] + residual) (mm, bmm, addmm,
  linear).  When b is a 2-D constant, the prepack pass stores it in the GEMM's packed-B layout.
`sdpa`: scaled dot-product attention with an optional mask (flash-style kernel).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pt2c.ir import Node, Value
from pt2c.kernels import layout
from pt2c.kernels.scratch import gemm_bf16_scratch_bytes, sdpa_scratch_floats, sgemm_scratch_floats
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.elementwise import make_ew
from pt2c.ops.epilogue import check_epilogue, epilogue_c, epilogue_ref
from pt2c.ops.index import check_index
from pt2c.ops.registry import arity, broadcast, defop, dtype_in, ints, lowers, need, result, within, is_size
from pt2c.ops.shape import make_strided
from pt2c.ops.util import as_strided, contiguous_strides, prod
from pt2c.sym import sint


# ---------------------------------------------------------------- matmul

def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def unpack_a(p: np.ndarray, m: int, k: int) -> np.ndarray:
    """The M x K matrix kernels/layout.py's pack_a packed into p (its inverse)."""
    mp = _round_up(m, layout.MR)
    return np.ascontiguousarray(np.asarray(p).reshape(mp // layout.MR, k, layout.MR).transpose(0, 2, 1).reshape(mp, k)[:m])


def unpack_b(p: np.ndarray, k: int, n: int) -> np.ndarray:
    """The K x N matrix kernels/layout.py's pack_b packed into p (its inverse)."""
    np_ = _round_up(n, layout.NR)
    return np.ascontiguousarray(np.asarray(p).reshape(np_ // layout.NR, k, layout.NR).transpose(1, 0, 2).reshape(k, np_)[:, :n])


def _strided_operand(node: Node, x: np.ndarray, key: str, rows: int, cols: int) -> np.ndarray:
    """An operand read in place through (batch, row, col) strides (fuse_views), as the dense matrix."""
    st = node.attrs.get(key)
    if st is None:
        return x
    batch = node.outputs[0].shape[:-2]
    v = as_strided(x, (prod(batch), rows, cols), tuple(st), 0)
    return v.reshape(*batch, rows, cols) if batch else v[0]


def _ref_matmul(node: Node, a: np.ndarray, b: np.ndarray, *extra: np.ndarray) -> np.ndarray:
    if any(k in node.attrs for k in ("a_strides", "b_strides", "b_packed")):  # (never at lowering: no outputs yet)
        M, N, K = node.outputs[0].shape[-2], node.outputs[0].shape[-1], matmul_k(node)
        a, b = _strided_operand(node, a, "a_strides", M, K), _strided_operand(node, b, "b_strides", K, N)
        if node.attrs.get("b_packed"):  # prepacked (passes/prepack.py): the reference reads it unpacked
            b = unpack_b(b, K, N)
    y = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    return epilogue_ref(node, y, list(extra), -1)


def _emit_matmul(em: EmitCtx, node: Node) -> None:
    a_v, b_v = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    M, N = out.shape[-2], out.shape[-1]
    K = matmul_k(node)
    batch = prod(out.shape[:-2]) if len(out.shape) > 2 else 1
    a_view = node.attrs.get("a_strides")  # (batch stride, row stride, col stride) when a is a strided view
    b_view = node.attrs.get("b_strides")
    sa = a_view or ((M * K if len(a_v.shape) > 2 else 0), K, 1)
    if node.attrs.get("b_packed"):
        sb = (0, 0, 0)
    else:
        sb = b_view or ((K * N if len(b_v.shape) > 2 else 0), N, 1)
    if len(a_v.shape) > 2 and a_view is None and batch != 1 and len(b_v.shape) == 2:
        # [..., M, K] @ [K, N] with a contiguous: one GEMM with M*batch rows
        M, batch, sa = M * batch, 1, (0, K, 1)
    ep = epilogue_c(em, node, 2, 0, str(N))
    bp = 1 if node.attrs.get("b_packed") else 0
    scratch = em.scratch(node)
    A, B, C = em.ptr(a_v), em.ptr(b_v), em.ptr(out)
    if batch == 1:
        em.line(f"pt2c_sgemm({C}, {N}, {A}, {sa[1]}, {sa[2]}, 0, {B}, {sb[1]}, {sb[2]}, {bp}, {M}, {N}, {K}, {ep}, {scratch});")
        return
    em.line(f"for (int b = 0; b < {sint(batch)}; b++) {{")
    if ep != "NULL" and node.attrs.get("has_residual"):
        em.line(f"    ep.residual = {em.ptr(node.inputs[-1])} + (size_t)b * {M * N};")
    em.line(f"    pt2c_sgemm({C} + (size_t)b * {M * N}, {N}, {A} + (size_t)b * {sa[0]}, {sa[1]}, {sa[2]}, 0, "
            f"{B} + (size_t)b * {sb[0]}, {sb[1]}, {sb[2]}, {bp}, {M}, {N}, {K}, {ep}, {scratch});")
    em.line("}")


def matmul_k(node: Node) -> int:
    """The contraction size K.  Recorded at lowering ("k"): fuse_views may replace a strided
    operand by its source (a_strides / b_strides), whose shape is not the logical [.., M, K]."""
    if "k" in node.attrs:
        return node.attrs["k"]
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
    return sgemm_scratch_floats(M, N, K, b_packed=b_packed)


def _matmul_dims(node: Node) -> tuple[int, int, int]:
    out = node.outputs[0]
    M, N, K = out.shape[-2], out.shape[-1], matmul_k(node)
    if len(out.shape) > 2:
        M *= prod(out.shape[:-2])  # covers the batch-folded single GEMM (an upper bound otherwise)
    return M, N, K


def _describe_matmul(node: Node) -> str:
    a = node.attrs
    return ("matmul" + (" +bias" if a.get("has_bias") else "") + (" +residual" if a.get("has_residual") else "")
            + (f" +{a['act']}" if a.get("act") else "") + (" (packed weights)" if a.get("b_packed") else ""))


def _check_matmul(node: Node) -> None:
    """out[..., M, N] = a[..., M, K] @ b[..., K, N] (+ epilogue); a / b either dense with those
    shapes (or 2-D, shared by the batch), or read in place by (batch, row, col) strides
    (a_strides / b_strides, from fuse_views), or b prepacked (b_packed: the packed-B layout)."""
    need(len(node.outputs) == 1, f"{len(node.outputs)} outputs, expected 1")
    a_v, b_v, out = node.inputs[0], node.inputs[1], node.outputs[0]
    need(len(out.shape) >= 2, f"a rank-{len(out.shape)} output")
    check_epilogue(node, 2, (out.shape[-1],))
    for v, what in ((a_v, "a"), (b_v, "b"), (out, "output")):
        dtype_in(v, ("float32",), what)
    M, N, K = out.shape[-2], out.shape[-1], matmul_k(node)
    need(is_size(node.attrs.get("k", 0)), "k is not a size")
    batch, B = out.shape[:-2], prod(out.shape[:-2])
    for v, rows, cols, key in ((a_v, M, K, "a_strides"), (b_v, K, N, "b_strides")):
        if key in node.attrs:
            st = node.attrs[key]
            need(ints(st, 3), f"{key} is not (batch, row, col) strides")
            within((B, rows, cols), st, 0, v.numel, f"{key} {st}")
        elif v is b_v and node.attrs.get("b_packed"):
            need(type(node.attrs["b_packed"]) is bool and v.shape == (layout.packed_b_size(K, N),),
                 f"packed b %{v.name} {list(v.shape)} is not the packed [{K}, {N}] (of {layout.packed_b_size(K, N)})")
        else:
            need(v.shape[-2:] == (rows, cols) and v.shape[:-2] in ((), batch),
                 f"%{v.name} {list(v.shape)} is not [{', '.join(map(str, batch))}{', ' if batch else ''}{rows}, {cols}]")


defop("matmul", _ref_matmul, _emit_matmul, kernels=("gemm",), scratch=_matmul_scratch, rule=_check_matmul,
      scratch_c=lambda n: "4 * pt2c_sgemm_scratch_floats_ex(%d, %d, %d, 0, %d)" % (
          *_matmul_dims(n), 1 if n.attrs.get("b_packed") else 0),
      flops=lambda n: 2 * n.outputs[0].numel * matmul_k(n), describe=_describe_matmul)


# ---------------------------------------------------------------- matmul_bf16 (a bfloat16 model's linear layers)
# out[..., M, N] = ep(a[..., M, K] @ B): a matmul of a bfloat16 model (its operands bfloat16 values) whose weights
# B are constant, stored as bfloat16 in kernels/layout.py's pack_b_bf16 layout (passes/prepack.py); a read by rows
# (lda apart: dense, or a_strides (1, lda, 1) from fuse_views).  kernels/gemm_bf16.c: AVX512-BF16 where the CPU
# has it, else the float32 GEMM on converted weights.

def _bf16_rows(node: Node) -> tuple[int, int, int, int]:
    """(M, N, K, lda) of the one product the kernel makes (a batch of a dense a folds into M)."""
    out = node.outputs[0]
    M, N, K = prod(out.shape[:-1]), out.shape[-1], matmul_k(node)
    st = node.attrs.get("a_strides")
    return (out.shape[-2], N, K, st[1]) if st is not None else (M, N, K, K)


def _ref_matmul_bf16(node: Node, a: np.ndarray, b: np.ndarray, *extra: np.ndarray) -> np.ndarray:
    M, N, K, lda = _bf16_rows(node)
    a = as_strided(a, (M, K), (lda, 1), 0) if "a_strides" in node.attrs else a.reshape(M, K)
    y = np.matmul(a.astype(np.float64), layout.unpack_b_bf16(b, K, N).astype(np.float64)).astype(np.float32)
    return epilogue_ref(node, y, list(extra), -1).reshape(node.outputs[0].shape)


def _emit_matmul_bf16(em: EmitCtx, node: Node) -> None:
    M, N, K, lda = _bf16_rows(node)
    ep = epilogue_c(em, node, 2, 0, str(N))
    em.line(f"pt2c_gemm_bf16({em.ptr(node.outputs[0])}, {N}, {em.ptr(node.inputs[0])}, {lda}, {em.ptr(node.inputs[1])}, "
            f"{M}, {N}, {K}, {ep}, {em.scratch(node)});")


def _check_matmul_bf16(node: Node) -> None:
    need(len(node.outputs) == 1 and len(node.inputs) >= 2, "expected inputs (a, packed b, ...) and one output")
    a_v, b_v, out = node.inputs[0], node.inputs[1], node.outputs[0]
    need(len(out.shape) >= 2, f"a rank-{len(out.shape)} output")
    check_epilogue(node, 2, (out.shape[-1],))
    dtype_in(a_v, ("float32",), "a")
    dtype_in(out, ("float32",), "output")
    dtype_in(b_v, ("bfloat16",), "packed b")
    M, N, K, lda = _bf16_rows(node)
    need(is_size(K) and b_v.shape == (layout.packed_b_bf16_size(K, N),),
         f"packed b %{b_v.name} {list(b_v.shape)} is not the bfloat16-packed [{K}, {N}]")
    st = node.attrs.get("a_strides")
    if st is not None:
        need(ints(st, 3) and st[2] == 1 and len(out.shape) == 2, f"a_strides {st}: rows of unit stride, one product")
        within((1, M, K), st, 0, a_v.numel, f"a_strides {st}")
    else:
        need(a_v.numel == M * K, f"a %{a_v.name} {list(a_v.shape)} is not {M} rows of {K}")


defop("matmul_bf16", _ref_matmul_bf16, _emit_matmul_bf16, kernels=("gemm_bf16",), rule=_check_matmul_bf16,
      scratch=lambda n: gemm_bf16_scratch_bytes(*_bf16_rows(n)[:3]),
      scratch_c=lambda n: "pt2c_gemm_bf16_scratch_bytes(%s, %s, %s)" % _bf16_rows(n)[:3],
      flops=lambda n: 2 * n.outputs[0].numel * matmul_k(n),
      describe=lambda n: _describe_matmul(n).replace("matmul", "matmul_bf16", 1).replace("packed weights", "bfloat16"))


# ---------------------------------------------------------------- gathered_matmul (mixture-of-experts layers)
# y[s] = W[ids[s]] x[s] (form "wx", W: [E, N, K]) or x[s] W[ids[s]] (form "xw", W: [E, K, N]), for the rows s of x
# ([S, K, 1] or [S, 1, K]) and y ([S, N, 1] / [S, 1, N]): what passes/gathered.py makes of a batched matmul whose
# weight operand is a gather of a constant by a run-time index.  The kernel groups the rows by weight.

def _ref_gathered_matmul(node: Node, x: np.ndarray, ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    E = w.shape[0]
    i = check_index(ids, E, True, "gather")
    xs = x.reshape(x.shape[0], -1).astype(np.float64)
    ws = w.astype(np.float64)[i.reshape(-1)]
    y = (np.einsum("snk,sk->sn", ws, xs) if node.attrs["form"] == "wx" else np.einsum("sk,skn->sn", xs, ws))
    return y.astype(np.float32).reshape(node.outputs[0].shape)


def _gathered_dims(node: Node) -> tuple[int, int, int, int]:
    at = node.attrs
    return node.inputs[1].numel, node.inputs[2].shape[0], at["N"], at["K"]


def _emit_gathered_matmul(em: EmitCtx, node: Node) -> None:
    x, ids, w = node.inputs
    S, E, N, K = _gathered_dims(node)
    rsb, csb = (1, K) if node.attrs["form"] == "wx" else (N, 1)
    em.errors.add("INDEX")
    em.line(f"if (pt2c_gathered_gemm({em.ptr(node.outputs[0])}, {em.ptr(x)}, {em.ptr(ids)}, {em.ptr(w)}, {S}, {E}, "
            f"{N}, {K}, {rsb}, {csb}, {em.scratch(node)})) return PT2C_ERR_INDEX;")


def _gathered_scratch(node: Node) -> int:
    S, E, N, K = _gathered_dims(node)
    r16 = lambda n: (n + 15) // 16 * 16  # noqa: E731
    return 4 * (r16(2 * (S + E + 1)) + r16(S * K) + r16(S * N) + sgemm_scratch_floats(S, N, K))


def _check_gathered_matmul(node: Node) -> None:
    arity(node, 3)
    x, ids, w = node.inputs
    at = node.attrs
    need(at.get("form") in ("wx", "xw") and type(at.get("N")) is int and type(at.get("K")) is int, f"attrs {at}")
    need(w.is_const and len(w.shape) == 3, "the weights are a constant [E, ., .]")
    dtype_in(ids, ("int64",), "ids")
    dtype_in(x, ("float32",), "x")
    S, E, N, K = _gathered_dims(node)
    wx = at["form"] == "wx"
    need(w.shape[1:] == ((N, K) if wx else (K, N)), f"weights {list(w.shape)} for N={N}, K={K}")
    need(len(ids.shape) == 1 and x.shape == ((S, K, 1) if wx else (S, 1, K)), f"x {list(x.shape)}, ids {list(ids.shape)}")
    result(node.outputs[0], (S, N, 1) if wx else (S, 1, N), "float32")


defop("gathered_matmul", _ref_gathered_matmul, _emit_gathered_matmul, kernels=("gathered_gemm",),
      scratch=_gathered_scratch, rule=_check_gathered_matmul,
      scratch_c=lambda n: "4 * pt2c_gathered_gemm_scratch_floats(%d, %d, %d, %d)" % _gathered_dims(n),
      flops=lambda n: 2 * n.outputs[0].numel * n.attrs["K"],
      describe=lambda n: f"matmul with weights chosen per row by an index ({n.inputs[2].shape[0]} weights, "
                         "rows grouped by weight)")


def make_matmul(ctx: LowerCtx, a: Value, b: Value, bias: Value | None, out: Value) -> Value:
    ins = [a, b] + ([bias] if bias is not None else [])
    ctx.emit("matmul", ins, {"has_bias": bias is not None, "k": a.shape[-1]}, [out])
    return out


def _as_float(ctx: LowerCtx, v: Value) -> None:
    if v.dtype != "float32":
        ctx.fail(f"matrix products are implemented for float32 only (got {v.dtype})")


@lowers("aten.mm.default", "aten.bmm.default")
def _lower_mm(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, y = a["self"], a["mat2"]
    _as_float(ctx, x)
    return make_matmul(ctx, x, y, None, ctx.out())


@lowers("aten.addmm.default")
def _lower_addmm(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    bias, x, w = a["self"], a["mat1"], a["mat2"]
    _as_float(ctx, x)
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    out = ctx.out()
    if beta == 1 and alpha == 1 and bias.shape in ((out.shape[-1],), (1, out.shape[-1])):
        if bias.shape != (out.shape[-1],):
            bias = ctx.view(bias, (out.shape[-1],))
        return make_matmul(ctx, x, w, bias, out)
    mm = make_matmul(ctx, x, w, None, ctx.new("mm", out.shape, out.dtype))
    if alpha != 1:
        mm = make_ew(ctx, "mul", [mm, alpha], out=ctx.new("mm_scaled", out.shape, out.dtype))
    if beta != 1:
        bias = make_ew(ctx, "mul", [bias, beta], out=ctx.new("bias_scaled", bias.shape, bias.dtype))
    return make_ew(ctx, "add", [mm, bias], out=out)


@lowers("aten.linear.default")
def _lower_linear(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a.get("bias")
    _as_float(ctx, x)
    out = ctx.out()
    wt = ctx.transpose(w)
    if len(x.shape) > 2:
        # fold leading dims into M: x is dense, so this is a view
        M = prod(x.shape[:-1])
        x2 = ctx.view(x, (M, x.shape[-1]))
        o2 = make_matmul(ctx, x2, wt, bias, ctx.new("linear", (M, out.shape[-1]), "float32"))
        return ctx.view(o2, out.shape, out=out)
    if len(x.shape) == 1:
        x2 = ctx.view(x, (1, x.shape[0]))
        o2 = make_matmul(ctx, x2, wt, bias, ctx.new("linear", (1, out.shape[-1]), "float32"))
        return ctx.view(o2, out.shape, out=out)
    return make_matmul(ctx, x, wt, bias, out)


# ---------------------------------------------------------------- attention

def sdpa_dims(node: Node) -> tuple[int, int, int, int, int, int, int]:
    """B, H, Hkv, Lq, Lk, D, Dv: from the operands' shapes, or from attrs["dims"] once
    passes/attention_views.py has pointed the operands at the buffers their views read."""
    if "dims" in node.attrs:
        return tuple(node.attrs["dims"])  # type: ignore[return-value]
    q, k, v = node.inputs[:3]
    return q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]


def _sdpa_shapes(node: Node) -> dict[str, tuple[int, int, int, int]]:
    B, H, Hkv, Lq, Lk, D, Dv = sdpa_dims(node)
    return {"q": (B, H, Lq, D), "k": (B, Hkv, Lk, D), "v": (B, Hkv, Lk, Dv), "out": (B, H, Lq, Dv)}


def _strided(a: np.ndarray, shape: tuple[int, ...], lay: tuple[int, ...]) -> np.ndarray:
    """The [B, H, L, D] tensor at lay = (batch, head, row stride, offset) in a's elements."""
    flat = np.ascontiguousarray(a).reshape(-1)
    it = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[lay[3]:], shape, (lay[0] * it, lay[1] * it, lay[2] * it, it))


def _ref_sdpa(node: Node, q: np.ndarray, k: np.ndarray, v: np.ndarray, *mask: np.ndarray) -> np.ndarray:
    at = node.attrs
    lay, shapes = at.get("layout"), _sdpa_shapes(node)
    if lay:
        q, k, v = (_strided(a, shapes[t], lay[t]) for a, t in ((q, "q"), (k, "k"), (v, "v")))
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
    o = np.matmul(p, v.astype(np.float64)).astype(np.float32)
    if not lay:
        return o
    out = np.zeros(node.outputs[0].shape, np.float32)  # the output written at its own strides
    flat = out.reshape(-1)
    it = flat.itemsize
    np.lib.stride_tricks.as_strided(flat, shapes["out"], tuple(x * it for x in lay["out"][:3]) + (it,))[...] = o
    return out


def _emit_sdpa(em: EmitCtx, node: Node) -> None:
    q, k, v = node.inputs[:3]
    out = node.outputs[0]
    B, H, Hkv, Lq, Lk, D, Dv = sdpa_dims(node)
    madd, mbool, strides = "NULL", "NULL", ["0"] * 4
    if len(node.inputs) > 3:
        m = node.inputs[3]
        ms = m.shape
        full = (1,) * (4 - len(ms)) + tuple(ms)
        cs = contiguous_strides(full)
        strides = [str(0 if full[i] == 1 else cs[i]) for i in range(4)]
        if m.dtype == "bool":
            mbool = em.ptr(m)
        else:
            madd = em.ptr(m)
    lay = node.attrs.get("layout")
    ptrs = [em.ptr(t) for t in (q, k, v)]
    layout = "NULL"
    if lay:  # q, k, v and out read / written in place at their strides (passes/attention_views.py)
        ptrs = [p + (f" + {lay[t][3]}" if lay[t][3] else "") for p, t in zip(ptrs, ("q", "k", "v"))]
        em.line("pt2c_sdpa_layout layout = { " + ", ".join(
            f".{t} = {{ {lay[t][0]}, {lay[t][1]}, {lay[t][2]} }}" for t in ("q", "k", "v", "out")) + " };")
        layout = "&layout"
    em.line(f"pt2c_sdpa({em.ptr(out)}, {ptrs[0]}, {ptrs[1]}, {ptrs[2]}, {madd}, {mbool}, {', '.join(strides)}, "
            f"{B}, {H}, {Hkv}, {Lq}, {Lk}, {D}, {Dv}, {em.flt(node.attrs['scale'])}, {int(node.attrs['causal'])}, "
            f"{layout}, {em.scratch(node)});")


def _sdpa_scratch(node: Node) -> int:
    _, _, _, Lq, Lk, D, Dv = sdpa_dims(node)
    return 4 * sdpa_scratch_floats(Lq, Lk, D, Dv)


def _check_sdpa(node: Node) -> None:
    """q [B, H, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv] (H a multiple of Hkv), an optional bool or
    additive mask broadcasting to [B, H, Lq, Lk] -> [B, H, Lq, Dv]. With attrs "layout" (and "dims"),
    q, k, v are the buffers the views read and out the buffer written, each a [B, H, L, D] tensor at
    (batch, head, row stride, offset) that must lie inside it."""
    arity(node, (3, 4))
    q, k, v = node.inputs[:3]
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        dtype_in(t, ("float32",), what)
    B, H, Hkv, Lq, Lk, D, Dv = sdpa_dims(node)
    lay = node.attrs.get("layout")
    need(Hkv > 0 and H % Hkv == 0, f"{H} query heads, {Hkv} kv heads")
    if lay:
        need(isinstance(node.attrs.get("dims"), tuple) and len(node.attrs["dims"]) == 7, "layout without dims")
        shapes = _sdpa_shapes(node)
        for t, x in (("q", q), ("k", k), ("v", v), ("out", node.outputs[0])):
            need(len(lay[t]) == 4 and all(is_size(s) and s >= 0 for s in lay[t]), f"layout of {t}: {lay[t]}")
            b, h, r, off = lay[t]
            n, hh, ll, d = shapes[t]
            need(off + (n - 1) * b + (hh - 1) * h + (ll - 1) * r + d <= x.numel, f"{t} at {lay[t]} overruns %{x.name}")
        need(node.outputs[0].numel == B * H * Lq * Dv and node.outputs[0].dtype == "float32", "output size")
    else:
        for t, what in ((q, "q"), (k, "k"), (v, "v")):
            need(len(t.shape) == 4, f"{what} %{t.name} is rank {len(t.shape)}, expected 4")
        need(k.shape[0] == v.shape[0] == B and k.shape[1] == v.shape[1] and k.shape[2] == v.shape[2]
             and k.shape[3] == D, f"q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}")
        result(node.outputs[0], (B, H, Lq, Dv), "float32")
    need(type(node.attrs["scale"]) is float and type(node.attrs["causal"]) is bool, "scale / causal")
    full = (B, H, Lq, Lk)
    if len(node.inputs) == 4:
        m = node.inputs[3]
        dtype_in(m, ("bool", "float32"), "mask")
        need(len(m.shape) <= 4 and broadcast(m.shape, full) == full, f"mask {list(m.shape)} does not broadcast to {list(full)}")


defop("sdpa", _ref_sdpa, _emit_sdpa, kernels=("attention",), scratch=_sdpa_scratch, rule=_check_sdpa,
      scratch_c=lambda n: "4 * pt2c_sdpa_scratch_floats(%d, %d, %d, %d)" % sdpa_dims(n)[3:],
      flops=lambda n: (lambda B, H, Hkv, Lq, Lk, D, Dv: 4 * B * H * Lq * D * Lk)(*sdpa_dims(n)))


def _sdpa_bcast_kv(ctx: LowerCtx, q: Value, k: Value, v: Value) -> list[Value]:
    """Broadcast size-1 batch (and head) dims of 4-d key/value to the query's, as torch does.

    One head shared by both key and value (multi-query attention) stays as is: the kernel's GQA
    indexing (kv head = h / (H / Hkv)) reads that head for every query head."""
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
def _lower_sdpa(ctx: LowerCtx, a: dict[str, Any]) -> Value:
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
