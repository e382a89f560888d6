"""Weight pre-packing: constant GEMM/conv operands are stored in the blob already in the
layout the micro-kernel streams (see kernels/layout.py), so no packing happens at run time."""

from __future__ import annotations

from pt2c.ir import Graph, Value
from pt2c.kernels import layout
from pt2c.ops.conv import is_depthwise, use_smallp, use_winograd


def prepack(g: Graph) -> Graph:
    for n in g.nodes:
        if n.op == "matmul" and not n.attrs.get("b_packed"):
            b = n.inputs[1]
            if b.is_const and len(b.shape) == 2 and "b_strides" not in n.attrs:
                packed = layout.pack_b(b.data)
                n.attrs["_b_unpacked"] = b.data
                n.inputs[1] = Value(b.name + "_packed", packed.shape, "float32", packed)
                n.attrs["b_packed"] = True
        elif n.op == "conv2d" and not n.attrs.get("w_packed") and not is_depthwise(n):
            w = n.inputs[1]
            if g.meta.get("winograd", True) and use_winograd(n):  # 36 transformed filters, each a GEMM A operand
                n.attrs["winograd"] = True
                packed = layout.pack_winograd_weight(w.data)
            elif use_smallp(n):  # few output pixels: W^T as the GEMM's B operand
                n.attrs["smallp"] = True
                packed = layout.pack_conv_weight_t(w.data)
            else:
                packed = layout.pack_conv_weight(w.data, n.attrs["groups"])
            n.attrs["_w_unpacked"] = w.data
            n.inputs[1] = Value(w.name + "_packed", packed.shape, "float32", packed)
            n.attrs["w_packed"] = True
    return g
