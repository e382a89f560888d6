"""Creation: full / zeros / ones / empty / fill / scalar_tensor / arange, as compile-time constants.

Shapes are static, so a created tensor is a constant; large uniform fills become a `fill` node
instead of bytes in the weights blob."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value, np_dtype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.sym import dynamic, upper
from pt2c.ops.registry import arity, defop, lowers, need
from pt2c.ops.util import lit

FILL_AS_CONST_MAX_BYTES = 1 << 16


def _ref_fill(node: Node) -> np.ndarray:
    out = node.outputs[0]
    return np.full(out.shape, node.attrs["value"], dtype=np_dtype(out.dtype))


def _emit_fill(em: EmitCtx, node: Node) -> None:
    out = node.outputs[0]
    em.line(f"for (size_t i = 0; i < {out.numel}; i++) {em.ptr(out)}[i] = {lit(out.dtype, node.attrs['value'])};")


def _check_fill(node: Node) -> None:
    arity(node, 0)
    need(type(node.attrs["value"]) in (bool, int, float), "value is not a Python bool / int / float")


defop("fill", _ref_fill, _emit_fill, rule=_check_fill)


def _full(ctx: LowerCtx, value: Any) -> Value:
    out = ctx.out()
    if not dynamic(out.shape) and out.nbytes <= FILL_AS_CONST_MAX_BYTES:
        return ctx.const(np.full(out.shape, value, dtype=np_dtype(out.dtype)), out.name)
    ctx.emit("fill", [], {"value": value}, [out])
    return out


@lowers("aten.full.default", "aten.full_like.default", "aten.new_full.default")
def _lower_full(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _full(ctx, a["fill_value"])


@lowers("aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default", "aten.empty.memory_format",
        "aten.empty_like.default", "aten.new_empty.default", "aten.empty_strided.default", "aten.new_empty_strided.default")
def _lower_zeros(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _full(ctx, 0)


@lowers("aten.ones.default", "aten.ones_like.default", "aten.new_ones.default")
def _lower_ones(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _full(ctx, 1)


@lowers("aten.fill.Scalar")
def _lower_fill(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _full(ctx, a["value"])


@lowers("aten.scalar_tensor.default")
def _lower_scalar_tensor(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    out = ctx.out()
    return ctx.const(np.asarray(a["s"], dtype=np_dtype(out.dtype)), out.name)


@lowers("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _lower_arange(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    import torch

    out = ctx.out()
    start, end, step = a.get("start", 0), a["end"], a.get("step", 1)
    if dynamic(out.shape):  # a run-time length: the first out.shape[0] values of the longest arange
        n = upper(out.shape[0])
        data = torch.arange(start, start + n * step, step, dtype=getattr(torch, out.dtype)).numpy()[:n]
        ctx.emit("strided", [ctx.const(data, out.name + "_max")], {"strides": (1,), "offset": 0}, [out])
        return out
    data = torch.arange(start, end, step, dtype=getattr(torch, out.dtype)).numpy()
    return ctx.const(data, out.name)

