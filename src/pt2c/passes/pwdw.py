"""A 1x1 conv whose output only a depthwise conv reads (MobileNet's expansion) becomes one
`conv2d_pw_dw` node: the kernel runs the pair by groups of channels, so the expanded tensor
is never stored whole (kernels/conv.c: pt2c_conv2d_pw_dw).  The fused node keeps the two convs
as plain data (ops/conv.py: conv2d_pw_dw, pw_dw_parts)."""

from __future__ import annotations

from dataclasses import astuple

from pt2c.ir import Graph, Node
from pt2c.kernels.layout import MR
from pt2c.ops.conv import is_depthwise

# Only where the expanded tensor would not fit in L2: at 1 thread (x86-64-v3, bench/conv_bench.py
# --pwdw) the pair took 0.86-0.89x of the two calls with 1.8 and 4.8 MB between them, 0.98-1.05x
# with 0.6 MB or less.
PWDW_MIN_BYTES = 1 << 20
# The fused kernel reads the input once per group of channels (kernels/conv_pwdw.c: pt2c_pwdw_group); the
# two calls write and read the expanded tensor once.  Fused only where the first costs no more than the
# second: EfficientNet-B7's large planes (75 x 75 to 300 x 300, groups of 6-24 channels) ran 1.05-1.32x
# slower fused, MobileNetV2's 56 x 56 and 112 x 112 pairs 0.93-0.94x (bench/conv_bench.py --pwdw, Xeon
# family 6 model 167, 1 thread).
PWDW_GROUP_FLOATS, PWDW_GROUP_MAX = 163840, 24  # PT2C_PWDW_GROUP_FLOATS, PT2C_PWDW_GROUP_MAX


def pwdw_group(M: int, H: int, W: int) -> int:
    """pt2c_pwdw_group: the channels of the expanded tensor the fused kernel makes at a time."""
    g = PWDW_GROUP_FLOATS // (H * W) // MR * MR
    return min(M, max(MR, min(PWDW_GROUP_MAX, g)))


def fusion_pays(C: int, H: int, W: int, M: int) -> bool:
    """The input re-read once per group costs no more than storing and loading the expanded tensor."""
    groups = -(-M // pwdw_group(M, H, W))
    return groups * C <= 2 * M


def _pointwise(n: Node) -> bool:
    at = n.attrs
    return (n.op == "conv2d" and tuple(at["kernel"]) == (1, 1) and tuple(at["stride"]) == (1, 1)
            and tuple(at["padding"]) == (0, 0) and at["groups"] == 1 and bool(at.get("w_packed"))
            and at.get("algo") == "im2col" and not at.get("has_residual"))


def fuse_pw_dw(g: Graph) -> Graph:
    users = g.users()
    outputs = {id(v) for v in g.outputs}
    fused: dict[int, Node] = {}  # id(depthwise node) -> the fused node
    drop: set[int] = set()
    for p in g.nodes:
        y = p.outputs[0]
        if not _pointwise(p) or y.dtype != "float32" or id(y) in outputs or y.nbytes <= PWDW_MIN_BYTES:
            continue
        us = users.get(id(y), [])
        if len(us) != 1:
            continue
        d = us[0]
        if (d.op != "conv2d" or not is_depthwise(d) or d.inputs[0] is not y or any(v is y for v in d.inputs[1:])
                or d.outputs[0].shape[1] != y.shape[1] or not d.inputs[1].is_const):
            continue
        _, C, H, W = p.inputs[0].shape
        if not fusion_pays(C, H, W, y.shape[1]):
            continue
        attrs = {"pw": dict(p.attrs), "dw": dict(d.attrs), "pw_inputs": len(p.inputs),
                 "mid": (y.name, y.shape, y.dtype), "pw_origin": astuple(p.origin)}
        n = Node("conv2d_pw_dw", p.inputs + d.inputs[1:], attrs, d.outputs, d.origin)
        fused[id(d)] = n
        drop.add(id(p))
    g.nodes = [fused.get(id(n), n) for n in g.nodes if id(n) not in drop]
    return g
