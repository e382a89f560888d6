"""Helpers shared by the op families (and by codegen/emitter.py): dims and strides of dense
row-major tensors, C literals, the index loops of generated code, small lowering helpers.

A leaf: imports nothing from the op families nor from codegen, so every family can use it.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from pt2c.ir import Value, ctype, np_dtype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.sym import Sym, prod

FLOATS = ("float32", "float64")


# ---------------------------------------------------------------- dims and strides

def norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def outer_inner(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """(outer, size, inner) of a dense tensor viewed as [outer, shape[dim], inner]."""
    outer = prod(shape[:dim])
    inner = prod(shape[dim + 1:])
    return outer, shape[dim] if shape else 1, inner


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def broadcast_strides(in_shape: tuple[int, ...], in_strides: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, ...]:
    lead = len(out_shape) - len(in_shape)
    return (0,) * lead + tuple(0 if in_shape[i] == 1 and out_shape[lead + i] != 1 else in_strides[i] for i in range(len(in_shape)))


def as_strided(x: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> np.ndarray:
    """numpy reference of a strided read of x's dense storage (element strides and offset)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    if not shape or 0 in shape:
        return flat[offset:offset + 1].reshape(()) if not shape else np.empty(shape, x.dtype)
    base = flat[offset:]
    return np.lib.stride_tricks.as_strided(base, shape, [s * x.itemsize for s in strides]).copy()


# ---------------------------------------------------------------- C text

def lit(dtype: str, value: Any) -> str:
    """A C literal of `value` in `dtype` (NaN, infinities, INT64_C, bools as 0 / 1); a dynamic size as its
    expression converted to dtype."""
    if isinstance(value, Sym):
        return f"(({ctype(dtype)})({value}))" if dtype != "bool" else f"(({value}) != 0)"
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in FLOATS:
        v = float(value)
        if math.isnan(v):
            return "NAN" if dtype == "float32" else "(double)NAN"
        if math.isinf(v):
            s = "INFINITY" if dtype == "float32" else "(double)INFINITY"
            return s if v > 0 else f"(-{s})"
        r = repr(v)
        if "e" not in r and "." not in r:
            r += ".0"
        return f"{r}f" if dtype == "float32" else r
    v = int(value)
    if dtype == "int64":
        return f"INT64_C({v})" if v >= 0 else f"(-INT64_C({-v}))"
    return str(v) if v >= 0 else f"({v})"


def index_loops(em: EmitCtx, shape: tuple[int, ...]) -> tuple[list[str], int]:
    """Open one loop per dim of shape; returns the index names and the number opened."""
    names = [f"u_i{d}" for d in range(len(shape))]
    for d, n in enumerate(shape):
        em.line("    " * d + f"for (size_t {names[d]} = 0; {names[d]} < {n}; {names[d]}++) {{")
    return names, len(shape)


def close_loops(em: EmitCtx, k: int) -> None:
    """Close the k loops index_loops opened."""
    for d in reversed(range(k)):
        em.line("    " * d + "}")


def lin(names: list[str], strides: tuple[int, ...], skip: int = -1, sub: str = "") -> str:
    """C expression sum(names[d] * strides[d]); dim `skip` uses the expression `sub` instead."""
    terms = [(sub if d == skip else names[d]) + (f" * {s}" if s != 1 else "")
             for d, s in enumerate(strides) if s != 0 and (d != skip or sub)]
    return " + ".join(terms) or "0"


# ---------------------------------------------------------------- lowering

def output_used(ctx: LowerCtx, i: int) -> bool:
    """Whether output i of a multi-output FX node is read by anything."""
    return any(u.target is operator.getitem and u.args[1] == i and len(u.users) > 0 for u in ctx.node.users)


def empty_output(ctx: LowerCtx, out: Value) -> Value:
    """An output without elements: a constant, no code."""
    out.data = np.zeros(out.shape, np_dtype(out.dtype))
    return out
