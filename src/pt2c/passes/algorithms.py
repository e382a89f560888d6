"""Algorithm choice: which kernel runs each conv2d, recorded as attrs["algo"] (ops/conv.py:
conv_algorithm) before prepacking, which lays the weights out for it.

- "depthwise": groups == channels (direct kernels, weights unpacked);
- "winograd": 3x3 stride 1, wide enough to pay for the transforms (ops/conv.py: use_winograd; grouped convs
  by their per-group width, one kernel call per group), when
  the options allow it (CompileOptions.use_winograd: --no-winograd, freestanding, opt_level 0 turn it off);
- "smallp": few output pixels (use_smallp);
- "im2col": everything else (1x1 convs read the input in place).

A convolution with weights computed at run time is im2col (or depthwise): its kernel packs them at every run.
"""

from __future__ import annotations

from pt2c.ir import Graph
from pt2c.ops.conv import conv_algorithm


def choose_algorithms(g: Graph, winograd: bool = True) -> Graph:
    """Set attrs["algo"] on every conv2d that has none."""
    for n in g.nodes:
        if n.op == "conv2d" and "algo" not in n.attrs:
            n.attrs["algo"] = conv_algorithm(n, winograd)
    return g
