"""Custom ops: a call of a user's C kernel (pt2c/custom.py) for an operator outside ATen.

Any operator outside ATen (a ``torch.library.custom_op``, an op of another package) for which the
compile was given a C kernel (``--kernels DIR``, ``pt2c.register_kernel``) becomes a ``custom_call``;
see docs/custom-ops.md.

The op ``custom_call`` runs one kernel with the fixed prototype of pt2c_custom_op.h.  Its attrs:
``qualname`` ("ns::op.overload"), ``function`` (the C name), ``schema`` (for the comment),
``call`` (the op's arguments in schema order: how to rebuild the PyTorch call for the reference),
``inputs`` (one entry per ``in[]`` element: an index into node.inputs, or None for an absent
``Tensor?``), ``args`` ((kind, value) per ``args[]`` element), ``scratch`` (bytes), ``_source`` (the
kernel's C text).  The numpy reference runs the op's own PyTorch
implementation (when this process has one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node
from pt2c.ops.context import EmitCtx
from pt2c.ops.registry import defop, need

ARG_KINDS = ("none", "int", "float", "bool", "str", "ints", "floats")


def arg_entry(value: Any) -> tuple[str, Any] | None:
    """(kind, value) of a non-tensor argument for args[]; None if pt2c cannot pass it to C."""
    if value is None:
        return ("none", None)
    if type(value) is bool:
        return ("bool", value)
    if type(value) is int:
        return ("int", value)
    if type(value) is float:
        return ("float", value)
    if type(value) is str:
        return ("str", value)
    if isinstance(value, (list, tuple)):
        if all(type(x) in (int, bool) for x in value):
            return ("ints", [int(x) for x in value])
        if all(type(x) in (int, float) for x in value):
            return ("floats", [float(x) for x in value])
    return None


def _ref_custom(node: Node, *arrays: np.ndarray) -> list[np.ndarray]:
    import torch

    from pt2c.custom import split_qualname

    ns, op, overload = split_qualname(node.attrs["qualname"])
    fn = getattr(getattr(getattr(torch.ops, ns), op), overload)
    tensors = [torch.from_numpy(np.array(a)) for a in arrays]
    kwargs = {}
    for name, how, v in node.attrs["call"]:
        kwargs[name] = (tensors[v] if how == "tensor" else [tensors[i] for i in v] if how == "tensors"
                        else None if how == "tensor?" and v is None else v)
    try:
        with torch.no_grad():
            res = fn(**kwargs)
    except NotImplementedError:
        raise RuntimeError(f"{node.attrs['qualname']} has no PyTorch implementation in this process") from None
    res = list(res) if isinstance(res, (list, tuple)) else [res]
    flat = [t for r in res for t in (r if isinstance(r, (list, tuple)) else [r])]
    return [t.detach().contiguous().numpy() for t in flat]


def _c_double(x: float) -> str:
    r = repr(float(x))
    return {"inf": "HUGE_VAL", "-inf": "-HUGE_VAL", "nan": "NAN"}.get(r, r if any(c in r for c in ".e") else r + ".0")


def _emit_custom(em: EmitCtx, node: Node) -> None:
    at = node.attrs
    ins = [(em.ptr(node.inputs[i]), node.inputs[i]) if i is not None else None for i in at["inputs"]]
    outs = [(em.ptr(v), v) for v in node.outputs]  # pointers declared before the block opens
    em.errors.add("CUSTOM_OP")
    decls: list[str] = []

    def tensors(kind: str, items: list[Any]) -> str:
        rows = []
        for j, it in enumerate(items):
            if it is None:
                rows.append("{NULL, NULL, -1, -1, 0}")
                continue
            p, v = it
            decls.append(f"static const int64_t {kind}{j}__sizes[] = {{{', '.join(map(str, v.shape)) or '1'}}};")
            rows.append(f"{{(void *){p}, {kind}{j}__sizes, {len(v.shape)}, PT2C_DTYPE_{v.dtype.upper()}, {v.numel}}}")
        return ", ".join(rows)

    in_rows, out_rows = tensors("in", ins), tensors("out", outs)
    arg_rows = []
    for j, (kind, v) in enumerate(at["args"]):
        i, f, n, ints, floats, s = "0", "0.0", "0", "NULL", "NULL", "NULL"
        if kind in ("int", "bool"):
            i, f = str(int(v)), _c_double(float(v))
        elif kind == "float":
            f = _c_double(v)
            i = str(int(v)) if np.isfinite(v) and abs(v) < 2 ** 63 else "0"
        elif kind == "str":
            s = em.string(v)
        elif kind == "ints" and v:
            decls.append(f"static const int64_t arg{j}__ints[] = {{{', '.join(map(str, v))}}};")
            n, ints = str(len(v)), f"arg{j}__ints"
        elif kind == "floats" and v:
            decls.append(f"static const double arg{j}__floats[] = {{{', '.join(_c_double(x) for x in v)}}};")
            n, floats = str(len(v)), f"arg{j}__floats"
        arg_rows.append(f"{{PT2C_ARG_{kind.upper()}, {i}, {f}, {n}, {ints}, {floats}, {s}}}")
    for d in decls:
        em.line(d)
    if arg_rows:
        em.line(f"static const pt2c_arg args__[] = {{{', '.join(arg_rows)}}};")
    em.line(f"const pt2c_tensor in__[] = {{{in_rows}}};" if ins else "const pt2c_tensor *in__ = NULL;")
    em.line(f"const pt2c_tensor out__[] = {{{out_rows}}};")
    args = "args__" if arg_rows else "NULL"
    scratch = (f"{em.scratch(node)}, {at['scratch']}u") if at["scratch"] else "NULL, 0u"
    em.line("#if defined(PT2C_CHECKED_CALLS)")
    em.line(f"if (pt2c_checked_call({at['function']}, out__, {len(outs)}, in__, {len(ins)}, {args}, {at['scratch']}u) "
            "!= 0) return PT2C_ERR_CUSTOM_OP;")
    em.line("#else")
    em.line(f"if ({at['function']}(out__, in__, {args}, {scratch}) != 0) return PT2C_ERR_CUSTOM_OP;")
    em.line("#endif")


def _check_custom(node: Node) -> None:
    at = node.attrs
    need(type(at.get("function")) is str and at["function"].isidentifier(), "function is not a C identifier")
    need(type(at.get("_source")) is str, "no kernel source")
    need(type(at.get("scratch")) is int and at["scratch"] >= 0, "scratch is not a byte count")
    need(len(node.outputs) >= 1, "no outputs")
    idx = at.get("inputs")
    need(isinstance(idx, list) and all(i is None or (type(i) is int and 0 <= i < len(node.inputs)) for i in idx),
         "inputs: indices into the node's inputs")
    need(all(k in ARG_KINDS for k, _ in at.get("args", [])), "args: unknown kinds")


def _describe(node: Node) -> str:
    return f"{node.attrs['schema']} (user kernel: custom_ops/{node.attrs['function']}.c)"


defop("custom_call", _ref_custom, _emit_custom, kernels=("custom_call",), rule=_check_custom, scratch=lambda n: n.attrs["scratch"],
      describe=_describe)

