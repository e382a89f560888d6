"""Zero padding folded into the convolutions that read it.

A `pad` of zeros on the two spatial dims of an NCHW tensor, read only as the input of 2-d convolutions, is
the convolutions' own padding: each conv reads the unpadded tensor with its padding grown by the pad's,
and no padded copy is made (TF-style "same" models pad explicitly before each conv, asymmetrically where
a stride-2 conv meets an even size).  An asymmetric result is the conv's `padding` (before: top, left)
and `padding_end` (after: bottom, right); the kernels take the padding before and the output size, which
implies the padding after (kernels/conv_gemm.c: pt2c_conv_extent).
"""

from __future__ import annotations

import math

from pt2c.ir import Graph
from pt2c.ops.conv import padding_end

CONVS = ("conv2d",)


def _zero(value: object) -> bool:
    """the pad value is +0 (a -0.0 border would give the sums of an all-border window the other sign)"""
    return isinstance(value, (bool, int, float)) and value == 0 and math.copysign(1.0, float(value)) > 0


def fold_pads(g: Graph) -> Graph:
    users = g.users()
    outputs = {id(v) for v in g.outputs}
    drop: set[int] = set()
    for n in g.nodes:
        if n.op != "pad" or not _zero(n.attrs["value"]) or n.outputs[0].dtype != "float32":
            continue
        x, y, pads = n.inputs[0], n.outputs[0], n.attrs["pads"]
        if len(pads) != 4 or any(pads[0]) or any(pads[1]) or id(y) in outputs:
            continue
        (top, bottom), (left, right) = pads[2], pads[3]
        if min(top, bottom, left, right) < 0:
            continue
        readers = users.get(id(y), [])
        if not readers or any(u.op not in CONVS or u.inputs[0] is not y or any(v is y for v in u.inputs[1:])
                              for u in readers):
            continue
        for u in readers:
            (ph, pw), (eh, ew) = u.attrs["padding"], padding_end(u.attrs)
            u.attrs["padding"], end = (ph + top, pw + left), (eh + bottom, ew + right)
            u.attrs.pop("padding_end", None)
            if end != u.attrs["padding"]:
                u.attrs["padding_end"] = end
            u.inputs[0] = x
        drop.add(id(n))
    g.nodes = [n for n in g.nodes if id(n) not in drop]
    return g
