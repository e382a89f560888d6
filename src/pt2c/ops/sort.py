"""Sorting: sort and topk, a selection loop per line (stable, NaN ordered as in torch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, ctype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.registry import arity, defop, lowers, need, result
from pt2c.ops.util import norm_dim, prod


# ---------------------------------------------------------------- sort / topk (selection, no scratch)

def _np_order(line: np.ndarray, descending: bool) -> np.ndarray:
    idx = np.arange(len(line))
    key = np.where(np.isnan(line), np.inf, line) if line.dtype.kind == "f" else line
    nan = np.isnan(line) if line.dtype.kind == "f" else np.zeros(len(line), bool)
    if descending:
        return np.array(sorted(idx, key=lambda j: (not nan[j], -key[j] if not nan[j] else 0, j)))
    return np.array(sorted(idx, key=lambda j: (nan[j], key[j] if not nan[j] else 0, j)))


def _ref_select_sort(node: Node, x: np.ndarray) -> list[np.ndarray]:
    dim, k, desc = node.attrs["dim"], node.attrs["k"], node.attrs["descending"]
    xm = np.moveaxis(x, dim, -1)
    flat = xm.reshape(-1, xm.shape[-1]) if xm.size else xm.reshape(0, max(xm.shape[-1], 1))
    vals = np.empty((flat.shape[0], k), x.dtype)
    inds = np.empty((flat.shape[0], k), np.int64)
    for r in range(flat.shape[0]):
        o = _np_order(flat[r], desc)[:k]
        vals[r], inds[r] = flat[r][o], o
    shp = xm.shape[:-1] + (k,)
    return [np.moveaxis(vals.reshape(shp), -1, dim), np.moveaxis(inds.reshape(shp), -1, dim)]


def _emit_select_sort(em: EmitCtx, node: Node) -> None:
    x = node.inputs[0]
    vals, inds = node.outputs
    dim, k, desc = node.attrs["dim"], node.attrs["k"], node.attrs["descending"]
    shape = x.shape or (1,)
    outer = prod(shape[:dim])
    n = shape[dim]
    inner = prod(shape[dim + 1:])
    X, V, I = em.ptr(x), em.ptr(vals), em.ptr(inds)
    t = ctype(x.dtype)
    isf = x.dtype in ("float32", "float64")
    # before(a, ia, b, ib): element a (index ia) comes before b in the output order
    if isf:
        nan_a, nan_b = "(u_va != u_va)", "(u_vb != u_vb)"
    else:
        nan_a = nan_b = "0"
    if desc:
        before = (f"({nan_a} ? (!{nan_b} || u_ia < u_ib) : (!{nan_b} && (u_va > u_vb || (u_va == u_vb && u_ia < u_ib))))")
    else:
        before = (f"({nan_b} ? (!{nan_a} || u_ia < u_ib) : (!{nan_a} && (u_va < u_vb || (u_va == u_vb && u_ia < u_ib))))")
    em.line(f"for (size_t u_o = 0; u_o < {outer}; u_o++) for (size_t u_in = 0; u_in < {inner}; u_in++) {{")
    em.line(f"    const {t} *u_xl = {X} + u_o * {n * inner} + u_in;")
    em.line("    size_t u_prev = 0; int u_have = 0;")
    em.line(f"    for (size_t u_r = 0; u_r < {k}; u_r++) {{")
    em.line("        size_t u_best = 0; int u_found = 0;")
    em.line(f"        for (size_t u_j = 0; u_j < {n}; u_j++) {{")
    em.line(f"            {t} u_va, u_vb; size_t u_ia, u_ib;")
    em.line("            if (u_have) {")
    em.line(f"                /* u_j must come after u_prev */ u_va = u_xl[u_prev * {inner}]; u_ia = u_prev; u_vb = u_xl[u_j * {inner}]; u_ib = u_j;")
    em.line(f"                if (!{before}) continue;")
    em.line("            }")
    em.line("            if (u_found) {")
    em.line(f"                u_va = u_xl[u_j * {inner}]; u_ia = u_j; u_vb = u_xl[u_best * {inner}]; u_ib = u_best;")
    em.line(f"                if (!{before}) continue;")
    em.line("            }")
    em.line("            u_best = u_j; u_found = 1;")
    em.line("        }")
    em.line(f"        {V}[(u_o * {k} + u_r) * {inner} + u_in] = u_xl[u_best * {inner}];")
    em.line(f"        {I}[(u_o * {k} + u_r) * {inner} + u_in] = (int64_t)u_best;")
    em.line("        u_prev = u_best; u_have = 1;")
    em.line("    }")
    em.line("}")


def _check_select_sort(node: Node) -> None:
    """The first k of each line along dim, in order: values (x's dtype) and int64 indices, x's shape
    with dim of size k."""
    arity(node, 1, 2)
    x = node.inputs[0]
    dim, k, desc = node.attrs["dim"], node.attrs["k"], node.attrs["descending"]
    need(x.dtype != "bool" and type(desc) is bool, f"a {x.dtype} input / descending")
    need(type(dim) is int and 0 <= dim < len(x.shape), f"dim {dim} of a rank-{len(x.shape)} input")
    need(type(k) is int and 0 < k <= x.shape[dim], f"k {k} of {x.shape[dim]}")
    shape = (*x.shape[:dim], k, *x.shape[dim + 1:])
    result(node.outputs[0], shape, x.dtype, "values")
    result(node.outputs[1], shape, "int64", "indices")


defop("select_sort", _ref_select_sort, _emit_select_sort, rule=_check_select_sort)


@lowers("aten.sort.default", "aten.sort.stable", "aten.topk.default")
def _lower_sort(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    x = a["self"]
    outs = ctx.outs()
    if x.dtype == "bool":
        ctx.fail("sort / topk of bool tensors")
    r = len(x.shape)
    dim = norm_dim(a.get("dim", -1), r) if r else 0
    n = x.shape[dim] if r else 1
    if ctx.target == "aten.topk.default":
        k = a["k"]
        desc = bool(a.get("largest", True))
    else:
        k = n
        desc = bool(a.get("descending", False))
    vals, inds = outs
    if x.numel == 0 or k == 0:
        ctx.fail("sort / topk of an empty tensor")
    xin = x if r else ctx.view(x, (1,))
    vo = vals if r else ctx.new("vals", (1,), x.dtype)
    io = inds if r else ctx.new("inds", (1,), "int64")
    ctx.emit("select_sort", [xin], {"dim": dim, "k": k, "descending": desc}, [vo, io])
    if not r:
        ctx.view(vo, (), out=vals)
        ctx.view(io, (), out=inds)
    return (vals, inds)
