"""Creation: full / zeros / ones / empty / fill / scalar_tensor / arange, as compile-time constants.

A created tensor of static shape is a constant; large uniform fills become a `fill` node instead of
bytes in the weights blob.  One of a dynamic size is made at run time (`fill`, `iota`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, Value, ctype, np_dtype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.registry import arity, defop, is_size, lowers, need
from pt2c.ops.util import lit
from pt2c.sym import dynamic, is_sym

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


def _ref_iota(node: Node) -> np.ndarray:
    out = node.outputs[0]
    return (node.attrs["start"] + np.arange(out.shape[0]) * node.attrs["step"]).astype(np_dtype(out.dtype))


def _emit_iota(em: EmitCtx, node: Node) -> None:
    out = node.outputs[0]
    t = ctype(out.dtype)
    start, step = node.attrs["start"], node.attrs["step"]
    first = f"({t})({start})" if not isinstance(start, float) else lit(out.dtype, start)
    em.line(f"for (size_t i = 0; i < {out.shape[0]}; i++) {em.ptr(out)}[i] = {first} + ({t})i * {lit(out.dtype, step)};")


def _check_iota(node: Node) -> None:
    arity(node, 0)
    out, at = node.outputs[0], node.attrs
    need(len(out.shape) == 1 and out.dtype in ("int64", "int32", "float32", "float64"), "a 1-D int / float output")
    need((is_size(at["start"]) or type(at["start"]) is float) and type(at["step"]) in (int, float), "start / step")


# arange of a run-time length or start: out[i] = start + i * step
defop("iota", _ref_iota, _emit_iota, rule=_check_iota)


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
    if dynamic(out.shape) or is_sym(start) or is_sym(end):  # a run-time length or start
        if is_sym(step) or not (is_size(start) or isinstance(start, float)):
            ctx.fail("arange with a run-time step is not supported")
        ctx.emit("iota", [], {"start": start, "step": step}, [out])
        return out
    data = torch.arange(start, end, step, dtype=getattr(torch, out.dtype)).numpy()
    return ctx.const(data, out.name)



# ---------------------------------------------------------------- state: a buffer the program mutates
# (torch.export's BUFFER_MUTATION: a KV cache updated in place, a running counter).  `state` is the value the
# buffer holds when a run starts: it lives in the workspace's state region, not the arena, and is set to its
# initial value (input 0, a constant) by <name>_init / <name>_reset_state.  `state_write` copies the
# buffer's new value (input 0) into that region at the end of the run (input 1: the state value).


def _ref_state(node: Node, init: np.ndarray) -> np.ndarray:
    return np.array(init)


def _check_state(node: Node) -> None:
    arity(node, 1)
    init, out = node.inputs[0], node.outputs[0]
    need(init.is_const and init.shape == out.shape and init.dtype == out.dtype and not dynamic(out.shape),
         "the initial value is a constant of the state's (static) shape and dtype")
    need(type(node.attrs["index"]) is int and node.attrs["index"] >= 0, "index")


def _emit_nothing(em: EmitCtx, node: Node) -> None:
    pass


defop("state", _ref_state, _emit_nothing, rule=_check_state)


def _ref_state_write(node: Node, new: np.ndarray, state: np.ndarray) -> list:
    return []


def _emit_state_write(em: EmitCtx, node: Node) -> None:
    new, state = node.inputs
    em.line(f"memcpy({em.ptr(state)}, {em.ptr(new)}, {state.nbytes});")


def _check_state_write(node: Node) -> None:
    arity(node, 2, 0)
    new, state = node.inputs
    need(state.producer is not None and state.producer.op == "state", "input 1 is not a state value")
    need(new.shape == state.shape and new.dtype == state.dtype, "the new value has the state's shape and dtype")


defop("state_write", _ref_state_write, _emit_state_write, rule=_check_state_write)
