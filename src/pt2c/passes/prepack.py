"""Weight pre-packing: constant GEMM/conv operands are stored in the blob already in the
layout the micro-kernel streams (see kernels/layout.py), so no packing happens at run time.
A conv2d's layout is its algorithm's (attrs["algo"], set by passes/algorithms.py); the packed
weight replaces the plain one as the node's input (the references unpack it: ops/matmul.py,
ops/conv.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pt2c.ir import Graph, Node, Value
from pt2c.kernels import layout


def bf16_weights(n: Node) -> bool:
    """A matmul of bfloat16 operands (lowering: attrs["operands"]) with constant 2-D weights and a read by rows: it
    becomes a matmul_bf16 (ops/matmul.py)."""
    b, st = n.inputs[1], n.attrs.get("a_strides")
    return (n.attrs.get("operands") == "bfloat16" and b.is_const and len(b.shape) == 2 and "b_strides" not in n.attrs
            and not n.attrs.get("b_packed")
            and (st is None or (st[2] == 1 and len(n.outputs[0].shape) == 2)))


def prepack(g: Graph) -> Graph:
    # one packed copy per (weight, layout): a weight shared by several nodes (ALBERT's one layer run 12
    # times, tied embeddings) is packed and stored once
    done: dict[tuple, Value] = {}

    def packed_value(w: Value, key: tuple, pack: Callable[[], np.ndarray], dtype: str = "float32") -> Value:
        if (id(w), *key) not in done:
            data = pack()
            done[(id(w), *key)] = Value(w.name + "_packed", data.shape, dtype, data)
        return done[(id(w), *key)]

    for n in g.nodes:
        if n.op == "matmul" and bf16_weights(n):  # a bfloat16 model's linear layer: its weights as bfloat16
            b = n.inputs[1]
            n.inputs[1] = packed_value(b, ("bf16",), lambda b=b: layout.pack_b_bf16(b.data), "bfloat16")
            n.op = "matmul_bf16"
        elif n.op == "matmul" and not n.attrs.get("b_packed"):
            b = n.inputs[1]
            if b.is_const and len(b.shape) == 2 and "b_strides" not in n.attrs:
                n.inputs[1] = packed_value(b, ("b",), lambda b=b: layout.pack_b(b.data))
                n.attrs["b_packed"] = True
        elif (n.op == "conv2d" and not n.attrs.get("w_packed") and n.attrs.get("algo") != "depthwise"
              and n.inputs[1].is_const):  # (weights computed at run time: packed by pt2c_conv2d_rt at every run)
            w = n.inputs[1]
            algo = n.attrs.get("algo")
            if algo is None:
                raise ValueError(f"prepack: {n!r} has no algorithm (passes/algorithms.py runs first)")
            if algo == "winograd":  # 36 transformed filters, each a GEMM A operand
                pack = lambda w=w, gr=n.attrs["groups"]: layout.pack_winograd_weight(w.data, gr)  # noqa: E731
            elif algo == "smallp":  # few output pixels: W^T as the GEMM's B operand
                pack = lambda w=w: layout.pack_conv_weight_t(w.data)  # noqa: E731
            else:
                pack = lambda w=w, gr=n.attrs["groups"]: layout.pack_conv_weight(w.data, gr)  # noqa: E731
            n.inputs[1] = packed_value(w, (algo, n.attrs["groups"]), pack)
            n.attrs["w_packed"] = True
    return g
