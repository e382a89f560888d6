"""The epilogue of the GEMM-based kernels (matmul, conv2d): bias, residual and activation applied
to the product's tile before it is stored (the kernels' `pt2c_epilogue`); its numpy reference and
the C struct an emitter passes.  passes/fold.py fuses into it the activations EPILOGUE_ACTS lists."""

from __future__ import annotations

import numpy as np

from pt2c.ir import Node
from pt2c.ops.context import EmitCtx
from pt2c.ops.elementwise import FUNCS
from pt2c.ops.registry import dtype_in, need

# epilogue activations: name -> C enum of the kernels (PT2C_ACT_*)
ACTS = {
    None: "PT2C_ACT_NONE", "relu": "PT2C_ACT_RELU", "clamp": "PT2C_ACT_CLAMP", "hardswish": "PT2C_ACT_HARDSWISH",
    "silu": "PT2C_ACT_SILU", "gelu": "PT2C_ACT_GELU", "gelu_tanh": "PT2C_ACT_GELU_TANH", "sigmoid": "PT2C_ACT_SIGMOID",
    "tanh": "PT2C_ACT_TANH",
}
# the activations passes/fold.py fuses from an `ew` act(x); "clamp" comes from a clamp_min / clamp_max pair
EPILOGUE_ACTS = frozenset(k for k in ACTS if k not in (None, "clamp"))
# attr "round": each step's result (the product with bias and residual, then the activation) rounded to the
# reduced dtype of a bfloat16 / float16 model: the `ew` round_<r> passes/fold.py fuses -> C flag or'ed into act
ROUNDS = {"bf16": "PT2C_ROUND_BF16", "f16": "PT2C_ROUND_F16"}


def apply_act(y: np.ndarray, act: str | None, lo: float = 0.0, hi: float = 0.0) -> np.ndarray:
    if act is None:
        return y
    if act == "clamp":
        return np.clip(y, lo, hi)
    return FUNCS[act][1](y).astype(y.dtype)


def epilogue_ref(node: Node, y: np.ndarray, extra: list[np.ndarray], bias_axis: int) -> np.ndarray:
    i = 0
    if node.attrs.get("has_bias"):
        b = extra[i]
        i += 1
        shape = [1] * y.ndim
        shape[bias_axis] = -1
        y = y + b.reshape(shape)
    if node.attrs.get("has_residual"):
        y = y + extra[i].reshape(y.shape)  # (fused through a reshape: same elements, same order)
    rnd = FUNCS[f"round_{node.attrs['round']}"][1] if node.attrs.get("round") else None
    y = rnd(y.astype(np.float32)) if rnd else y
    y = apply_act(y.astype(np.float32), node.attrs.get("act"), node.attrs.get("lo", 0.0), node.attrs.get("hi", 0.0))
    return rnd(y) if rnd and node.attrs.get("act") else y


def check_epilogue(node: Node, first_extra: int, bias_shape: tuple[int, ...]) -> None:
    """The epilogue's part of a node's rule: its inputs past first_extra are the bias (bias_shape) and
    the residual (the output's elements, through a reshape) its flags announce; a known activation."""
    a = node.attrs
    has_bias, has_res = a.get("has_bias", False), a.get("has_residual", False)
    need(type(has_bias) is bool and type(has_res) is bool, "has_bias / has_residual are not bools")
    n = first_extra + has_bias + has_res
    need(len(node.inputs) == n, f"{len(node.inputs)} inputs, expected {n} (bias {has_bias}, residual {has_res})")
    need(a.get("act") in ACTS, f"unknown epilogue activation {a.get('act')!r}")
    need(a.get("round") in (None, *ROUNDS), f"unknown epilogue rounding {a.get('round')!r}")
    need(type(a.get("lo", 0.0)) is float and type(a.get("hi", 0.0)) is float, "lo / hi are not floats")
    out = node.outputs[0]
    if has_bias:
        b = node.inputs[first_extra]
        dtype_in(b, ("float32",), "bias")
        need(b.shape == tuple(bias_shape), f"bias %{b.name} has shape {list(b.shape)}, expected {list(bias_shape)}")
    if has_res:
        r = node.inputs[-1]
        dtype_in(r, ("float32",), "residual")
        need(r.numel == out.numel, f"residual %{r.name} {list(r.shape)} is not the output's {out.numel} elements")


def epilogue_c(em: EmitCtx, node: Node, first_extra: int, bias_per_row: int, ldr: str = "0", var: str = "ep") -> str:
    """Declare a pt2c_epilogue `var` for the node; returns the C expression of its address (or NULL)."""
    a = node.attrs
    if not (a.get("has_bias") or a.get("has_residual") or a.get("act") or a.get("round")):
        return "NULL"
    i = first_extra
    bias = "NULL"
    if a.get("has_bias"):
        bias = em.ptr(node.inputs[i])
        i += 1
    res = em.ptr(node.inputs[i]) if a.get("has_residual") else "NULL"
    act = ACTS[a.get("act")]
    lo, hi = em.flt(a.get("lo", 0.0)), em.flt(a.get("hi", 0.0))
    fields = [f".bias = {bias}"] if bias != "NULL" else []
    fields += [".bias_per_row = 1"] if bias != "NULL" and bias_per_row else []
    fields += [f".residual = {res}", f".ldr = {ldr}"] if res != "NULL" else []
    if a.get("round"):
        fields += [f".act = {act} | {ROUNDS[a['round']]}" if a.get("act") else f".act = {ROUNDS[a['round']]}"]
    elif a.get("act"):
        fields += [f".act = {act}"]
    fields += [f".lo = {lo}", f".hi = {hi}"] if a.get("act") == "clamp" else []
    em.line(f"pt2c_epilogue {var} = {{ {', '.join(fields)} }};")  # the fields not named are 0 / NULL
    return "&" + var
