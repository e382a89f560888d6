"""Weight pre-packing: constant GEMM/conv operands are stored in the blob already in the
layout the micro-kernel streams (see kernels/layout.py), so no packing happens at run time.
A conv2d's layout is its algorithm's (attrs["algo"], set by passes/algorithms.py); the packed
weight replaces the plain one as the node's input (the references unpack it: ops/matmul.py,
ops/conv.py)."""

from __future__ import annotations

from pt2c.ir import Graph, Value
from pt2c.kernels import layout


def prepack(g: Graph) -> Graph:
    for n in g.nodes:
        if n.op == "matmul" and not n.attrs.get("b_packed"):
            b = n.inputs[1]
            if b.is_const and len(b.shape) == 2 and "b_strides" not in n.attrs:
                packed = layout.pack_b(b.data)
                n.inputs[1] = Value(b.name + "_packed", packed.shape, "float32", packed)
                n.attrs["b_packed"] = True
        elif (n.op == "conv2d" and not n.attrs.get("w_packed") and n.attrs.get("algo") != "depthwise"
              and n.inputs[1].is_const):  # (weights computed at run time: packed by pt2c_conv2d_rt at every run)
            w = n.inputs[1]
            algo = n.attrs.get("algo")
            if algo is None:
                raise ValueError(f"prepack: {n!r} has no algorithm (passes/algorithms.py runs first)")
            if algo == "winograd":  # 36 transformed filters, each a GEMM A operand
                packed = layout.pack_winograd_weight(w.data)
            elif algo == "smallp":  # few output pixels: W^T as the GEMM's B operand
                packed = layout.pack_conv_weight_t(w.data)
            else:
                packed = layout.pack_conv_weight(w.data, n.attrs["groups"])
            n.inputs[1] = Value(w.name + "_packed", packed.shape, "float32", packed)
            n.attrs["w_packed"] = True
    return g
