"""Reduced precision in the lowering (docs/reduced-precision.md).

A bfloat16 / float16 model computes in float32: every op's result is rounded to the model's dtype (an elementwise
round, fused into its producer or consumers by the passes), as PyTorch's CPU kernels compute a reduced-precision
op in float32 and store its result rounded.  Inputs and outputs keep the reduced dtype; weights become float32
(exact).  Ops that only move or select values (VALUE_PRESERVING) need no rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pt2c.ir import DTYPES, Node, Origin, Value
from pt2c.ops.elementwise import e_fn, e_in

REDUCED_ROUND = {"bfloat16": "round_bf16", "float16": "round_f16"}
VALUE_PRESERVING = {
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "slice", "select", "squeeze", "unsqueeze",
    "clone", "contiguous", "alias", "detach", "lift_fresh_copy", "_to_copy", "cat", "stack", "split", "split_with_sizes",
    "chunk", "unbind", "narrow", "flatten", "unflatten", "as_strided", "movedim", "diagonal", "unfold", "repeat", "roll",
    "flip", "index", "index_select", "gather", "embedding", "max_pool2d_with_indices", "max_pool2d", "max_pool1d",
    "relu", "neg", "abs", "max", "min", "amax", "amin", "maximum", "minimum", "topk", "sort", "pixel_shuffle",
    "pixel_unshuffle", "channel_shuffle", "zeros_like", "empty_like", "copy", "sign",
}
BF16_PRODUCTS = {"linear", "mm", "addmm", "matmul", "bmm"}


def storage_dtype(t: Any) -> str:
    """The pt2c dtype a tensor of torch dtype ``t`` is stored in (KeyError: none)."""
    name = str(t).replace("torch.", "")
    if name not in DTYPES:
        raise KeyError(name)
    return name


def torch_dtype(t: Any) -> str:
    """The pt2c dtype a tensor of torch dtype ``t`` is computed in: a bfloat16 / float16 tensor is a float32 Value
    holding values of the reduced dtype (REDUCED_ROUND)."""
    name = storage_dtype(t)
    return "float32" if name in REDUCED_ROUND else name


def to_numpy(t: Any) -> np.ndarray:
    """A (detached) torch tensor's data as the numpy array pt2c computes with (reduced dtypes: float32, exact)."""
    t = t.detach().contiguous()
    return (t.float() if str(t.dtype).replace("torch.", "") in REDUCED_ROUND else t).numpy()


def tensor_dtype(a: Any) -> str | None:
    """The storage dtype of an FX node's tensor value, None for anything else."""
    import torch

    v = a.meta.get("val") if hasattr(a, "meta") else None
    return str(v.dtype).replace("torch.", "") if isinstance(v, torch.Tensor) else None


def round_results(node: Any, res: Any, origin: Origin, new_value: Callable[[str, tuple, str], Value],
                  append: Callable[[Node], None]) -> Any:
    """The results of a bfloat16 / float16 op (res: a Value or a tuple, as its FX node's) rounded to its dtype, by
    ew nodes made with new_value and added with append."""
    import torch

    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (list, tuple)) else [val]
    dts = [str(v.dtype).replace("torch.", "") if isinstance(v, torch.Tensor) else None for v in vals]
    if not any(d in REDUCED_ROUND for d in dts):
        return res
    floats = {d for a in node.all_input_nodes if (d := tensor_dtype(a)) is not None
              and getattr(torch, d).is_floating_point}
    if getattr(node.target, "_opname", None) in VALUE_PRESERVING and floats == {d for d in dts if d in REDUCED_ROUND}:
        return res  # selects or moves values already rounded to the same dtype

    def rnd(v: Any, dt: str | None) -> Any:
        if not isinstance(v, Value) or dt not in REDUCED_ROUND or v.dtype != "float32":
            return v
        r = new_value(f"{v.name}_{REDUCED_ROUND[dt].removeprefix('round_')}", v.shape, "float32")
        append(Node("ew", [v], {"expr": e_fn(REDUCED_ROUND[dt], "float32", e_in("float32", 0))}, [r], origin))
        return r

    if isinstance(val, (list, tuple)) and isinstance(res, (list, tuple)):
        return type(res)(rnd(v, d) for v, d in zip(res, dts))
    return rnd(res, dts[0])


def mark_bf16_products(node: Any, made: list[Node]) -> None:
    """A matrix product of bfloat16 operands: its matmul nodes (made) marked, so that passes/prepack.py may keep
    their weights in bfloat16 (matmul_bf16)."""
    if getattr(node.target, "_opname", None) in BF16_PRODUCTS and \
            {tensor_dtype(a) for a in node.all_input_nodes} - {None} == {"bfloat16"}:
        for n in made:
            if n.op == "matmul":
                n.attrs["operands"] = "bfloat16"
