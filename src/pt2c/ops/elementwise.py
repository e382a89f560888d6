"""Elementwise: arithmetic, comparisons, math functions, activations, where, casts; all one IR op, `ew`.

Every elementwise ATen op lowers to one IR op, `ew`, whose `expr` attribute is a small expression
tree over its inputs; fusion merges chains of `ew` nodes into one loop.  Each scalar function is
defined once in FUNCS: its C form and numpy form.

Expression trees are tuples: ("in", dtype, i) | ("lit", dtype, value) | (fn, dtype, *args).
Operands are cast to the compute dtype at lowering time, following PyTorch's promotion.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pt2c.ir import DTYPES, Node, Value, ctype, np_dtype
from pt2c.ops.context import EmitCtx, LowerCtx
from pt2c.ops.registry import broadcast, defop, ints, lowers, need, within, is_size
from pt2c.ops.util import FLOATS, as_strided, broadcast_strides, contiguous_strides, lit
from pt2c.sym import Sym

Expr = tuple


def _fsuf(dtype: str) -> str:
    return "f" if dtype == "float32" else ""


def _m(name: str) -> Callable[[str, list[str]], str]:
    """libm function, float or double variant."""
    return lambda dt, a: f"{name}{_fsuf(dt)}({a[0]})"


def _sigmoid_np(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _erf_np(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _gelu_np(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf_np(x / math.sqrt(2.0)))).astype(x.dtype)


def _gelu_tanh_np(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))).astype(x.dtype)


def _c_div(dt: str, a: list[str]) -> str:
    return f"({a[0]} / {a[1]})"


def _c_floordiv(dt: str, a: list[str]) -> str:
    if dt in FLOATS:
        return f"floor{_fsuf(dt)}({a[0]} / {a[1]})"
    return f"pt2c_floordiv_{ctype(dt)}({a[0]}, {a[1]})"


def _c_rem(dt: str, a: list[str]) -> str:
    if dt in FLOATS:
        return f"pt2c_remainder_{ctype(dt)}({a[0]}, {a[1]})"
    return f"pt2c_remainder_{ctype(dt)}({a[0]}, {a[1]})"


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN -> 0x7fc0 (torch's conversion)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(np.asarray(x, np.float32)), np.uint16(0x7FC0), r)


def bf16_float(h: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32."""
    return (np.asarray(h, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _np_round_bf16(x: np.ndarray) -> np.ndarray:
    return bf16_float(bf16_bits(x))


def _np_round_f16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def _np_floordiv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.floor_divide(x, y)


# fn name -> (C builder(dtype, [arg exprs]) -> str, numpy(*arrays) -> array)
FUNCS: dict[str, tuple[Callable[[str, list[str]], str], Callable[..., Any]]] = {
    "add": (lambda dt, a: f"({a[0]} + {a[1]})", np.add),
    "sub": (lambda dt, a: f"({a[0]} - {a[1]})", np.subtract),
    "mul": (lambda dt, a: f"({a[0]} * {a[1]})", np.multiply),
    "div": (_c_div, np.divide),
    "floordiv": (_c_floordiv, _np_floordiv),
    "truncdiv": (lambda dt, a: f"({a[0]} / {a[1]})" if dt not in FLOATS else f"trunc{_fsuf(dt)}({a[0]} / {a[1]})",
                 lambda x, y: np.trunc(x / y).astype(x.dtype) if x.dtype.kind == "f" else (np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))).astype(x.dtype)),
    "remainder": (_c_rem, np.remainder),
    "fmod": (lambda dt, a: f"fmod{_fsuf(dt)}({a[0]}, {a[1]})" if dt in FLOATS else f"({a[0]} % {a[1]})", np.fmod),
    "neg": (lambda dt, a: f"(-{a[0]})", np.negative),
    "abs": (lambda dt, a: f"fabs{_fsuf(dt)}({a[0]})" if dt in FLOATS else f"({a[0]} < 0 ? -{a[0]} : {a[0]})", np.abs),
    # float32 exp (and sigmoid, silu): pt2c_exp (kernels/common.h), within 2 ulp, no libm call, vectorises
    "exp": (lambda dt, a: f"pt2c_exp({a[0]})" if dt == "float32" else f"exp({a[0]})", np.exp),
    "exp2": (_m("exp2"), np.exp2),
    "expm1": (_m("expm1"), np.expm1),
    "log": (_m("log"), np.log),
    "log2": (_m("log2"), np.log2),
    "log10": (_m("log10"), np.log10),
    "log1p": (_m("log1p"), np.log1p),
    "sqrt": (_m("sqrt"), np.sqrt),
    "rsqrt": (lambda dt, a: f"(1{'.0f' if dt == 'float32' else '.0'} / sqrt{_fsuf(dt)}({a[0]}))", lambda x: 1 / np.sqrt(x)),
    "reciprocal": (lambda dt, a: f"(1{'.0f' if dt == 'float32' else '.0'} / {a[0]})", np.reciprocal),
    "sin": (_m("sin"), np.sin),
    "cos": (_m("cos"), np.cos),
    "tan": (_m("tan"), np.tan),
    "asin": (_m("asin"), np.arcsin),
    "acos": (_m("acos"), np.arccos),
    "atan": (_m("atan"), np.arctan),
    "sinh": (_m("sinh"), np.sinh),
    "cosh": (_m("cosh"), np.cosh),
    # float32: pt2c_tanh (kernels/common.h), a rational approximation within 4e-7 that vectorises,
    # where a libm tanhf call per element dominated GPT-2's GELU; float64 keeps libm
    "tanh": (lambda dt, a: f"pt2c_tanh({a[0]})" if dt == "float32" else f"tanh({a[0]})", np.tanh),
    "asinh": (_m("asinh"), np.arcsinh),
    "acosh": (_m("acosh"), np.arccosh),
    "atanh": (_m("atanh"), np.arctanh),
    "atan2": (lambda dt, a: f"atan2{_fsuf(dt)}({a[0]}, {a[1]})", np.arctan2),
    "erf": (_m("erf"), _erf_np),
    "floor": (lambda dt, a: f"floor{_fsuf(dt)}({a[0]})" if dt in FLOATS else a[0], np.floor),
    "ceil": (lambda dt, a: f"ceil{_fsuf(dt)}({a[0]})" if dt in FLOATS else a[0], np.ceil),
    "trunc": (lambda dt, a: f"trunc{_fsuf(dt)}({a[0]})" if dt in FLOATS else a[0], np.trunc),
    "round": (lambda dt, a: f"nearbyint{_fsuf(dt)}({a[0]})" if dt in FLOATS else a[0], np.round),
    "sign": (lambda dt, a: f"(({a[0]} > 0) - ({a[0]} < 0))", np.sign),
    "pow": (lambda dt, a: f"pow{_fsuf(dt)}({a[0]}, {a[1]})" if dt in FLOATS else f"pt2c_ipow({a[0]}, {a[1]})", np.power),
    "square": (lambda dt, a: f"({a[0]} * {a[0]})", np.square),
    "cube": (lambda dt, a: f"({a[0]} * {a[0]} * {a[0]})", lambda x: x * x * x),
    "sigmoid": (lambda dt, a: f"(1.0f / (1.0f + pt2c_exp(-{a[0]})))" if dt == "float32" else f"(1.0 / (1.0 + exp(-{a[0]})))",
                _sigmoid_np),
    # relu keeps NaN like torch (a comparison with NaN is false)
    "relu": (lambda dt, a: f"({a[0]} < 0 ? 0 : {a[0]})", lambda x: np.maximum(x, 0).astype(x.dtype)),
    "silu": (lambda dt, a: f"({a[0]} / (1.0f + pt2c_exp(-{a[0]})))" if dt == "float32" else f"({a[0]} / (1.0 + exp(-{a[0]})))",
             lambda x: x * _sigmoid_np(x)),
    "gelu": (lambda dt, a: f"pt2c_gelu_{ctype(dt)}({a[0]})", _gelu_np),
    "gelu_tanh": (lambda dt, a: f"pt2c_gelu_tanh_{ctype(dt)}({a[0]})", _gelu_tanh_np),
    "hardswish": (lambda dt, a: f"pt2c_hardswish_{ctype(dt)}({a[0]})", lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardsigmoid": (lambda dt, a: f"pt2c_hardsigmoid_{ctype(dt)}({a[0]})", lambda x: np.clip(x + 3, 0, 6) / 6),
    "maximum": (lambda dt, a: f"pt2c_max_{ctype(dt)}({a[0]}, {a[1]})", np.maximum),
    "minimum": (lambda dt, a: f"pt2c_min_{ctype(dt)}({a[0]}, {a[1]})", np.minimum),
    # clamp keeps NaN like torch: lower bound then upper bound, comparisons false on NaN
    "clamp_min": (lambda dt, a: f"({a[0]} < {a[1]} ? {a[1]} : {a[0]})", lambda x, lo: np.where(x < lo, lo, x)),
    "clamp_max": (lambda dt, a: f"({a[0]} > {a[1]} ? {a[1]} : {a[0]})", lambda x, hi: np.where(x > hi, hi, x)),
    "where": (lambda dt, a: f"({a[0]} ? {a[1]} : {a[2]})", lambda c, x, y: np.where(c, x, y)),
    "eq": (lambda dt, a: f"({a[0]} == {a[1]})", np.equal),
    "ne": (lambda dt, a: f"({a[0]} != {a[1]})", np.not_equal),
    "lt": (lambda dt, a: f"({a[0]} < {a[1]})", np.less),
    "le": (lambda dt, a: f"({a[0]} <= {a[1]})", np.less_equal),
    "gt": (lambda dt, a: f"({a[0]} > {a[1]})", np.greater),
    "ge": (lambda dt, a: f"({a[0]} >= {a[1]})", np.greater_equal),
    "isnan": (lambda dt, a: f"({a[0]} != {a[0]})", np.isnan),
    "isinf": (lambda dt, a: f"(fabs{_fsuf(dt)}({a[0]}) == INFINITY)" if dt in FLOATS else "0", np.isinf),
    "logical_and": (lambda dt, a: f"({a[0]} && {a[1]})", np.logical_and),
    "logical_or": (lambda dt, a: f"({a[0]} || {a[1]})", np.logical_or),
    "logical_xor": (lambda dt, a: f"(!{a[0]} != !{a[1]})", np.logical_xor),
    "logical_not": (lambda dt, a: f"(!{a[0]})", np.logical_not),
    "bitwise_and": (lambda dt, a: f"({a[0]} & {a[1]})", np.bitwise_and),
    "bitwise_or": (lambda dt, a: f"({a[0]} | {a[1]})", np.bitwise_or),
    "bitwise_xor": (lambda dt, a: f"({a[0]} ^ {a[1]})", np.bitwise_xor),
    "bitwise_not": (lambda dt, a: f"(!{a[0]})" if dt == "bool" else f"(~{a[0]})", lambda x: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)),
    "copy": (lambda dt, a: a[0], lambda x: x),
    # a float32 result rounded to the reduced dtype a bfloat16 / float16 model stores it in
    "round_bf16": (lambda dt, a: f"pt2c_round_bf16({a[0]})", _np_round_bf16),
    "round_f16": (lambda dt, a: f"pt2c_round_f16({a[0]})", _np_round_f16),
}

# ops whose result dtype is bool whatever the operand (compute) dtype
PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "logical_and", "logical_or", "logical_xor", "logical_not"}


# ---------------------------------------------------------------- expression helpers

# the reduced-precision storage dtypes -> the name in their C conversion helpers (kernels/ewise.h)
REDUCED = {"bfloat16": "bf16", "float16": "f16"}


def e_in(v_dtype: str, i: int) -> Expr:
    return ("in", v_dtype, i)


def e_lit(dtype: str, value: Any) -> Expr:
    return ("lit", dtype, value)


def e_cast(x: Expr, dtype: str) -> Expr:
    if x[1] == dtype:
        return x
    if x[0] == "lit":
        return e_lit(dtype, x[2])
    return ("cast", dtype, x)


def e_fn(fn: str, dtype: str, *args: Expr) -> Expr:
    return (fn, dtype, *args)


def expr_to_c(e: Expr, leaves: list[str]) -> str:
    kind, dt = e[0], e[1]
    if kind == "in":
        return leaves[e[2]]
    if kind == "lit":
        return lit(dt, e[2])
    if kind == "cast":
        inner = expr_to_c(e[2], leaves)
        src = e[2][1]
        if dt in REDUCED:  # the model's bfloat16 / float16 storage (its outputs)
            return f"pt2c_f32_to_{REDUCED[dt]}((float)({inner}))"
        if src in REDUCED:
            inner, src = f"pt2c_{REDUCED[src]}_to_f32({inner})", "float32"
        if dt == "bool":
            return f"({inner} != 0)"
        if src in FLOATS and dt not in FLOATS:
            # float -> int conversion of NaN/out-of-range values is UB in C; PyTorch gives
            # an unspecified value too, but we must not trap under UBSan.
            return f"pt2c_f2i_{ctype(dt)}({inner})"
        return f"({ctype(dt)}){inner}"
    args = [expr_to_c(a, leaves) for a in e[2:]]
    # the C builder sees the operand (compute) dtype: float vs double libm, comparisons of floats
    opdt = e[3][1] if kind == "where" else e[2][1]
    return FUNCS[kind][0](opdt, args)


def expr_eval(e: Expr, arrays: list[np.ndarray]) -> np.ndarray:
    kind, dt = e[0], e[1]
    if kind == "in":
        return np.asarray(arrays[e[2]])
    if kind == "lit":
        return np.asarray(e[2], dtype=np_dtype(dt))
    if kind == "cast":
        x = np.asarray(expr_eval(e[2], arrays))
        if e[2][1] == "bfloat16":
            x = bf16_float(x)
        if dt == "bfloat16":
            return bf16_bits(x.astype(np.float32))
        return x.astype(np.float32).astype(np_dtype(dt)) if dt == "float16" else x.astype(np_dtype(dt))
    args = [expr_eval(a, arrays) for a in e[2:]]
    with np.errstate(all="ignore"):
        r = FUNCS[kind][1](*args)
    return np.asarray(r).astype(np_dtype(dt), copy=False)


def expr_inputs(e: Expr) -> set[int]:
    if e[0] == "in":
        return {e[2]}
    if e[0] == "lit":
        return set()
    out: set[int] = set()
    for a in e[2:]:
        out |= expr_inputs(a)
    return out


def expr_substitute(e: Expr, mapping: Callable[[int], Expr]) -> Expr:
    """Replace each ("in", _, i) leaf by mapping(i)."""
    if e[0] == "in":
        return mapping(e[2])
    if e[0] == "lit":
        return e
    return (e[0], e[1], *[expr_substitute(a, mapping) for a in e[2:]])


def expr_size(e: Expr) -> int:
    if e[0] in ("in", "lit"):
        return 1
    return 1 + sum(expr_size(a) for a in e[2:])


def expr_str(e: Expr) -> str:
    """Short human form for comments: add(mul(in0, 2.0), in1)."""
    if e[0] == "in":
        return f"in{e[2]}"
    if e[0] == "lit":
        return repr(e[2])
    if e[0] == "cast":
        return f"({e[1]}){expr_str(e[2])}"
    return f"{e[0]}(" + ", ".join(expr_str(a) for a in e[2:]) + ")"


# ---------------------------------------------------------------- the `ew` op

def _ref_ew(node: Node, *arrays: np.ndarray) -> np.ndarray:
    out = node.outputs[0]
    views = node.attrs.get("views") or [None] * len(arrays)
    arrays = tuple(x if v is None else as_strided(x, tuple(v[0]), tuple(v[1]), v[2]) for x, v in zip(arrays, views))
    r = expr_eval(node.attrs["expr"], list(arrays))
    return np.broadcast_to(r, out.shape).astype(np_dtype(out.dtype))


def _emit_ew(em: EmitCtx, node: Node) -> None:
    """One loop nest over the output; each input read through its view (broadcast, strided)."""
    out = node.outputs[0]
    ostr = contiguous_strides(out.shape)
    operands = [(em.ptr(out), ostr, 0)]
    views = node.attrs.get("views") or [None] * len(node.inputs)
    for v, view in zip(node.inputs, views):
        if view is None:
            shape, st, off = v.shape, contiguous_strides(v.shape), 0
        else:
            shape, st, off = view
        operands.append((em.ptr(v), broadcast_strides(tuple(shape), tuple(st), out.shape), off))
    expr = node.attrs["expr"]

    def body(ix: list[str]) -> str:
        leaves = [f"{p}[{i}]" for (p, _, _), i in zip(operands[1:], ix[1:])]
        return f"{operands[0][0]}[{ix[0]}] = {expr_to_c(expr, leaves)};"

    em.strided_loop(out.shape, operands, body)


def _describe_ew(node: Node) -> str:
    what = f"ew: {expr_str(node.attrs['expr'])}"
    if len(what) > 90:
        what = what[:87] + "..."
    return what


# number of operands of each FUNCS entry that takes more than one
_NARGS = {**{f: 2 for f in ("add", "sub", "mul", "div", "floordiv", "truncdiv", "remainder", "fmod", "atan2", "pow",
                            "maximum", "minimum", "clamp_min", "clamp_max", "eq", "ne", "lt", "le", "gt", "ge",
                            "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor")},
          "where": 3}


def check_expr(e: Any, in_dtypes: list[str]) -> str:
    """Type-check an expression tree over inputs of in_dtypes (VerifyError); returns its dtype.
    Leaves carry their input's dtype; a function's operands share one dtype, its result's (bool for
    PREDICATES); `where` takes a bool condition and two operands of its result dtype."""
    need(type(e) is tuple and len(e) >= 2 and e[1] in DTYPES, f"malformed expression {e!r}")
    kind, dt = e[0], e[1]
    if kind == "in":
        need(len(e) == 3 and type(e[2]) is int and 0 <= e[2] < len(in_dtypes), f"expression leaf {e!r}: no such input")
        need(in_dtypes[e[2]] == dt, f"expression leaf {e!r}: input {e[2]} is {in_dtypes[e[2]]}")
        return dt
    if kind == "lit":
        need(len(e) == 3 and type(e[2]) in (bool, int, float, Sym),
             f"literal {e!r} is not a Python bool / int / float or a size")
        return dt
    if kind == "cast":
        need(len(e) == 3, f"malformed cast {e!r}")
        check_expr(e[2], in_dtypes)
        return dt
    need(kind in FUNCS, f"unknown function {kind!r} in the expression")
    args = [check_expr(a, in_dtypes) for a in e[2:]]
    need(len(args) == _NARGS.get(kind, 1), f"{kind} takes {_NARGS.get(kind, 1)} operands, got {len(args)}")
    if kind == "where":
        need(args[0] == "bool" and args[1] == dt and args[2] == dt, f"where({', '.join(args)}) -> {dt}")
    else:
        need(len(set(args)) == 1, f"{kind} of operands of different dtypes {args}")
        need(dt == ("bool" if kind in PREDICATES else args[0]), f"{kind}({', '.join(args)}) -> {dt}")
    return dt


def _check_ew(node: Node) -> None:
    """The expression types against the inputs and the output; every operand (through its view)
    broadcasts to the output, which is the broadcast of them all."""
    need(len(node.outputs) == 1, f"{len(node.outputs)} outputs, expected 1")
    out = node.outputs[0]
    need(check_expr(node.attrs["expr"], [v.dtype for v in node.inputs]) == out.dtype,
         f"the expression's dtype is not the output's {out.dtype}")
    views = node.attrs.get("views")
    need(views is None or (type(views) is list and len(views) == len(node.inputs)), "views: one per input")
    shapes = []
    for i, v in enumerate(node.inputs):
        view = views[i] if views else None
        if view is None:
            shapes.append(v.shape)
            continue
        need(type(view) is tuple and len(view) == 3 and ints(view[0], lo=0) and ints(view[1], len(view[0]))
             and is_size(view[2]), f"view {i} is not (shape, strides, offset)")
        within(view[0], view[1], view[2], v.numel, f"view of input {i}")
        shapes.append(tuple(view[0]))
    if shapes:
        b = broadcast(*shapes, out.shape)
        need(b == out.shape and broadcast(*shapes) == out.shape,
             f"operand shapes {[list(s) for s in shapes]} do not broadcast to the output's {list(out.shape)}")


defop("ew", _ref_ew, _emit_ew, describe=_describe_ew, rule=_check_ew,
      flops=lambda n: n.outputs[0].numel * max(1, expr_size(n.attrs["expr"]) - len(n.inputs)))


# ---------------------------------------------------------------- lowering

def _torch_dtype_name(t: Any) -> str:
    return str(t).replace("torch.", "")


def _result_dtype(ctx: LowerCtx, operands: list[Any]) -> str:
    """PyTorch type promotion over tensors (Values) and Python scalars."""
    import torch

    probe: Any = None
    for o in operands:
        if isinstance(o, Value):
            o = torch.empty([1] * len(o.shape), dtype=getattr(torch, o.dtype))
        elif o is None:
            continue
        elif isinstance(o, Sym):  # a size: a Python int to PyTorch's promotion
            o = torch.empty([], dtype=torch.int64) if probe is None else 0
        elif probe is None:
            o = torch.tensor(o)  # a lone scalar: its default dtype
        probe = o if probe is None else torch.empty([1], dtype=torch.result_type(probe, o))
    return _torch_dtype_name(probe.dtype)


def make_ew(ctx: LowerCtx, fn: str, operands: list[Any], compute: str | None = None, out: Value | None = None,
            extra_lits: tuple = ()) -> Value:
    """Emit one `ew` node computing fn(*operands) (Values or scalars) with PyTorch promotion."""
    out = out if out is not None else ctx.out()
    if compute is None:
        compute = _result_dtype(ctx, operands) if fn not in ("where",) else out.dtype
        if fn in PREDICATES or fn == "copy":
            pass
        elif compute not in FLOATS and out.dtype in FLOATS:
            compute = out.dtype  # true division, sqrt of ints, ...: PyTorch computes in the float result type
        elif fn not in PREDICATES and out.dtype != compute and out.dtype != "bool":
            compute = out.dtype
    ins: list[Value] = []
    args: list[Expr] = []
    for o in operands:
        if isinstance(o, Value):
            ins.append(o)
            leaf = e_in(o.dtype, len(ins) - 1)
            args.append(leaf if fn == "where" and len(args) == 0 else e_cast(leaf, compute))
        else:
            args.append(e_lit(compute, o))
    for x in extra_lits:
        args.append(e_lit(compute, x))
    res_dt = "bool" if fn in PREDICATES else compute
    if fn == "where":
        args[0] = e_cast(args[0], "bool")
    expr = e_cast(e_fn(fn, res_dt, *args), out.dtype)
    ctx.emit("ew", ins, {"expr": expr}, [out])
    return out


def cast_to(ctx: LowerCtx, v: Value, dtype: str, hint: str) -> Value:
    """v converted to dtype (v itself when it has that dtype already)."""
    if v.dtype == dtype:
        return v
    return make_ew(ctx, "copy", [v], compute=dtype, out=ctx.new(hint, v.shape, dtype))


def _scaled(ctx: LowerCtx, v: Any, alpha: Any) -> Any:
    """v * alpha for add/sub's `alpha` argument (a scalar is scaled at compile time)."""
    if alpha in (None, 1):
        return v
    if not isinstance(v, Value):
        return v * alpha
    return make_ew(ctx, "mul", [v, alpha], out=ctx.new("scaled", v.shape, v.dtype))


def _binary(fn: str) -> Callable[..., Value]:
    def lower(ctx: LowerCtx, a: dict[str, Any]) -> Value:
        return make_ew(ctx, fn, [a["self"], _scaled(ctx, a["other"], a.get("alpha", 1))])
    return lower


for _fn, _targets in {
    "add": ("aten.add.Tensor", "aten.add.Scalar"),
    "sub": ("aten.sub.Tensor", "aten.sub.Scalar"),
    "mul": ("aten.mul.Tensor", "aten.mul.Scalar"),
    "maximum": ("aten.maximum.default",),
    "minimum": ("aten.minimum.default",),
    "eq": ("aten.eq.Tensor", "aten.eq.Scalar"),
    "ne": ("aten.ne.Tensor", "aten.ne.Scalar"),
    "lt": ("aten.lt.Tensor", "aten.lt.Scalar"),
    "le": ("aten.le.Tensor", "aten.le.Scalar"),
    "gt": ("aten.gt.Tensor", "aten.gt.Scalar"),
    "ge": ("aten.ge.Tensor", "aten.ge.Scalar"),
    "logical_and": ("aten.logical_and.default",),
    "logical_or": ("aten.logical_or.default",),
    "logical_xor": ("aten.logical_xor.default",),
    "bitwise_and": ("aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar"),
    "bitwise_or": ("aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar"),
    "bitwise_xor": ("aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar"),
    "remainder": ("aten.remainder.Tensor", "aten.remainder.Scalar"),
    "fmod": ("aten.fmod.Tensor", "aten.fmod.Scalar"),
    "atan2": ("aten.atan2.default",),
}.items():
    lowers(*_targets)(_binary(_fn))


@lowers("aten.rsub.Scalar", "aten.rsub.Tensor")
def _lower_rsub(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return make_ew(ctx, "sub", [a["other"], _scaled(ctx, a["self"], a.get("alpha", 1))])


@lowers("aten.pow.Scalar", "aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor")
def _lower_pow(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, e = a["self"], a["exponent"]
    if e == 2 and isinstance(x, Value) and not isinstance(e, Value):
        return make_ew(ctx, "square", [x], compute=ctx.out().dtype)
    if e == 3 and isinstance(x, Value) and not isinstance(e, Value) and ctx.out().dtype in FLOATS:
        return make_ew(ctx, "cube", [x], compute=ctx.out().dtype)  # GELU-tanh's x**3: no powf call
    if e == 0.5 and isinstance(x, Value) and ctx.out().dtype in FLOATS:
        return make_ew(ctx, "sqrt", [x], compute=ctx.out().dtype)
    return make_ew(ctx, "pow", [x, e])


@lowers("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _lower_div(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    mode = a.get("rounding_mode")
    fn = {"trunc": "truncdiv", "floor": "floordiv", None: "div"}[mode]
    return make_ew(ctx, fn, [a["self"], a["other"]])


@lowers("aten.floor_divide.default", "aten.floor_divide.Scalar")
def _lower_floordiv(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return make_ew(ctx, "floordiv", [a["self"], a["other"]])


_UNARY = {
    "neg": "aten.neg.default", "abs": "aten.abs.default", "exp": "aten.exp.default", "exp2": "aten.exp2.default",
    "expm1": "aten.expm1.default", "log": "aten.log.default", "log2": "aten.log2.default", "log10": "aten.log10.default",
    "log1p": "aten.log1p.default", "sqrt": "aten.sqrt.default", "rsqrt": "aten.rsqrt.default",
    "reciprocal": "aten.reciprocal.default", "sin": "aten.sin.default", "cos": "aten.cos.default", "tan": "aten.tan.default",
    "asin": "aten.asin.default", "acos": "aten.acos.default", "atan": "aten.atan.default", "sinh": "aten.sinh.default",
    "cosh": "aten.cosh.default", "tanh": "aten.tanh.default", "asinh": "aten.asinh.default", "acosh": "aten.acosh.default",
    "atanh": "aten.atanh.default", "erf": "aten.erf.default", "floor": "aten.floor.default", "ceil": "aten.ceil.default",
    "trunc": "aten.trunc.default", "round": "aten.round.default", "sign": "aten.sign.default",
    "sigmoid": "aten.sigmoid.default", "relu": "aten.relu.default", "silu": "aten.silu.default",
    "hardswish": "aten.hardswish.default", "hardsigmoid": "aten.hardsigmoid.default", "isnan": "aten.isnan.default",
    "isinf": "aten.isinf.default", "logical_not": "aten.logical_not.default", "bitwise_not": "aten.bitwise_not.default",
    "square": "aten.square.default",
}


def _unary(fn: str) -> Callable[..., Value]:
    def lower(ctx: LowerCtx, a: dict[str, Any]) -> Value:
        x = a["self"]
        out = ctx.out()
        compute = out.dtype if fn not in PREDICATES else x.dtype
        if fn in ("logical_not",):
            compute = "bool"
        return make_ew(ctx, fn, [x], compute=compute)
    return lower


for _fn, _t in _UNARY.items():
    lowers(_t)(_unary(_fn))


@lowers("aten.gelu.default")
def _lower_gelu(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    fn = "gelu_tanh" if a.get("approximate", "none") == "tanh" else "gelu"
    return make_ew(ctx, fn, [a["self"]], compute=ctx.out().dtype)


def _clamp_expr(ctx: LowerCtx, x: Value, lo: Any, hi: Any, out: Value) -> Value:
    compute = out.dtype
    e: Expr = e_cast(e_in(x.dtype, 0), compute)
    ins = [x]
    for bound, fn in ((lo, "clamp_min"), (hi, "clamp_max")):
        if bound is None:
            continue
        if isinstance(bound, Value):
            ins.append(bound)
            b = e_cast(e_in(bound.dtype, len(ins) - 1), compute)
        else:
            b = e_lit(compute, bound)
        e = e_fn(fn, compute, e, b)
    ctx.emit("ew", ins, {"expr": e}, [out])
    return out


@lowers("aten.clamp.default", "aten.clamp.Tensor")
def _lower_clamp(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _clamp_expr(ctx, a["self"], a.get("min"), a.get("max"), ctx.out())


@lowers("aten.clamp_min.default")
def _lower_clamp_min(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _clamp_expr(ctx, a["self"], a["min"], None, ctx.out())


@lowers("aten.clamp_max.default")
def _lower_clamp_max(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _clamp_expr(ctx, a["self"], None, a["max"], ctx.out())


@lowers("aten.hardtanh.default")
def _lower_hardtanh(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _clamp_expr(ctx, a["self"], a.get("min_val", -1.0), a.get("max_val", 1.0), ctx.out())


@lowers("aten.leaky_relu.default")
def _lower_leaky_relu(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    slope = a.get("negative_slope", 0.01)
    xi = e_cast(e_in(x.dtype, 0), out.dtype)
    e = e_fn("where", out.dtype, e_fn("gt", "bool", xi, e_lit(out.dtype, 0)), xi, e_fn("mul", out.dtype, xi, e_lit(out.dtype, slope)))
    ctx.emit("ew", [x], {"expr": e}, [out])
    return out


@lowers("aten.elu.default")
def _lower_elu(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    x, out = a["self"], ctx.out()
    alpha, scale, iscale = a.get("alpha", 1.0), a.get("scale", 1.0), a.get("input_scale", 1.0)
    dt = out.dtype
    xi = e_cast(e_in(x.dtype, 0), dt)
    neg = e_fn("mul", dt, e_lit(dt, alpha * scale), e_fn("expm1", dt, e_fn("mul", dt, xi, e_lit(dt, iscale))))
    e = e_fn("where", dt, e_fn("gt", "bool", xi, e_lit(dt, 0)), e_fn("mul", dt, xi, e_lit(dt, scale)), neg)
    ctx.emit("ew", [x], {"expr": e}, [out])
    return out


@lowers("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar")
def _lower_where(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    out = ctx.out()
    cond, x, y = a["condition"], a["self"], a["other"]
    ins: list[Value] = [cond]
    args: list[Expr] = [e_cast(e_in(cond.dtype, 0), "bool")]
    for o in (x, y):
        if isinstance(o, Value):
            ins.append(o)
            args.append(e_cast(e_in(o.dtype, len(ins) - 1), out.dtype))
        else:
            args.append(e_lit(out.dtype, o))
    ctx.emit("ew", ins, {"expr": e_fn("where", out.dtype, *args)}, [out])
    return out


@lowers("aten._to_copy.default", "aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default",
        "aten.copy.default", "aten.detach.default", "aten.contiguous.default", "aten._assert_tensor_metadata.default")
def _lower_copy(ctx: LowerCtx, a: dict[str, Any]) -> Value | None:
    if ctx.target == "aten._assert_tensor_metadata.default":
        return None
    src = a.get("src", a.get("self"))
    out = ctx.out()
    if src.dtype == out.dtype and src.shape == out.shape:
        return src  # a copy of an immutable value is the value itself
    return make_ew(ctx, "copy", [src], compute=out.dtype)


@lowers("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _lower_masked_fill(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    out = ctx.out()
    x, mask, val = a["self"], a["mask"], a["value"]
    ins = [mask, x]
    vexpr = e_lit(out.dtype, val) if not isinstance(val, Value) else None
    if vexpr is None:
        ins.append(val)
        vexpr = e_cast(e_in(val.dtype, 2), out.dtype)
    e = e_fn("where", out.dtype, e_cast(e_in(mask.dtype, 0), "bool"), vexpr, e_cast(e_in(x.dtype, 1), out.dtype))
    ctx.emit("ew", ins, {"expr": e}, [out])
    return out


# ---------------------------------------------------------------- PT2E quantize / dequantize (torch.ao / torchao)
# The ops convert_pt2e leaves around each quantized op: a float tensor quantized to int8 / uint8 and back, as
# torch.ao.quantization.fx._decomposed defines them.  Both are elementwise: q = clamp(round(x * (1 / scale)) + zp,
# quant_min, quant_max) in float32 (round half to even), dq = (q - zp) * scale.  The weights' dequantize folds at
# compile time; the activations' pairs run as elementwise code (no int8 kernels yet: the float ops in between
# compute in float32, as eager's reference graph does).

def _qparams(ctx: LowerCtx, a: dict[str, Any], x: Value, per_channel: bool) -> tuple[Expr, Expr, list[Value]]:
    """(scale, zero point) as float32 expressions, and the extra ew inputs (per channel: the constants shaped to
    broadcast along `axis`)."""
    if not per_channel:
        return e_lit("float32", float(np.float32(a["scale"]))), e_lit("float32", float(a["zero_point"])), []
    s, z, axis = a["scales"], a["zero_points"], a["axis"]
    if not (isinstance(s, Value) and isinstance(z, Value)):
        ctx.fail("per-channel scales and zero points must be tensors")
    axis = axis % len(x.shape)
    shape = tuple(x.shape[axis] if i == axis else 1 for i in range(len(x.shape)))
    return e_cast(e_in(s.dtype, 1), "float32"), e_cast(e_in(z.dtype, 2), "float32"), [ctx.view(s, shape), ctx.view(z, shape)]


def _lower_quantize(ctx: LowerCtx, a: dict[str, Any], per_channel: bool) -> Value:
    x, out = a["input"], ctx.out()
    if x.dtype != "float32":
        ctx.fail(f"quantizing a {x.dtype} tensor (pt2c quantizes float32)")
    scale, zp, extra = _qparams(ctx, a, x, per_channel)
    inv = e_fn("div", "float32", e_lit("float32", 1.0), scale) if per_channel else \
        e_lit("float32", float(np.float32(1.0 / a["scale"])))
    q = e_fn("add", "float32", e_fn("round", "float32", e_fn("mul", "float32", e_in("float32", 0), inv)), zp)
    q = e_fn("clamp_max", "float32", e_fn("clamp_min", "float32", q, e_lit("float32", a["quant_min"])),
             e_lit("float32", a["quant_max"]))
    ctx.emit("ew", [x, *extra], {"expr": e_cast(q, out.dtype)}, [out])
    return out


def _lower_dequantize(ctx: LowerCtx, a: dict[str, Any], per_channel: bool) -> Value:
    x, out = a["input"], ctx.out()
    scale, zp, extra = _qparams(ctx, a, x, per_channel)
    e = e_fn("mul", "float32", e_fn("sub", "float32", e_cast(e_in(x.dtype, 0), "float32"), zp), scale)
    ctx.emit("ew", [x, *extra], {"expr": e_cast(e, out.dtype)}, [out])
    return out


@lowers("quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.quantize_per_channel.default")
def _lower_quantize_op(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _lower_quantize(ctx, a, "scales" in a)


@lowers("quantized_decomposed.dequantize_per_tensor.default", "quantized_decomposed.dequantize_per_channel.default")
def _lower_dequantize_op(ctx: LowerCtx, a: dict[str, Any]) -> Value:
    return _lower_dequantize(ctx, a, "scales" in a)
