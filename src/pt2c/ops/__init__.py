"""The op set.  Each op is defined in ONE place, the module of its family: its ATen target(s) and
how they lower to the IR, its numpy reference, its C emission and the kernel files it needs.

An `OpDef` describes an IR op; `@lowers(*aten_targets)` registers the function that turns an FX
node calling those ATen targets into IR nodes (both in registry.py).  Lowering functions see a
`LowerCtx`, emit functions an `EmitCtx` (context.py); helpers shared by families are in util.py.

Importing this package registers every family, so `OPS` / `LOWERINGS` are complete; `verify`
checks a graph against them, `eval_graph` runs one with the numpy references.
"""

from __future__ import annotations

import re

import numpy as np

from pt2c.ir import Graph, VerifyError, np_dtype
from pt2c.ops import conv, creation, elementwise, index, matmul, norm, pool, random, reduce, resize, shape, sort
from pt2c.ops.registry import LOWERINGS, OPS, UNSUPPORTED, OpDef, core_aten_ops, defop, lowers

__all__ = ["FAMILIES", "LOWERINGS", "OPS", "UNSUPPORTED", "OpDef", "core_aten_ops", "defop", "eval_graph", "lowers",
           "verify"]

# the op families, in the order docs/ops.md lists them (each module's docstring says what it holds)
FAMILIES = (elementwise, creation, shape, index, matmul, conv, pool, resize, norm, reduce, sort, random)


# ---------------------------------------------------------------- core ATen ops pt2c does not lower, and why
# (the compile-time error for such a node quotes the reason; scripts/gen_ops_doc.py lists them in docs/ops.md)

_BACKWARD = "backward (training) op: pt2c compiles inference programs; export the forward pass only"
_SYMBOLIC = ("symbolic-shape query, only present with dynamic shapes: pt2c compiles static shapes "
             "(export without dynamic_shapes)")
UNSUPPORTED.update({
    "aten._adaptive_avg_pool2d_backward.default": _BACKWARD,
    "aten.avg_pool2d_backward.default": _BACKWARD,
    "aten.convolution_backward.default": _BACKWARD,
    "aten.embedding_dense_backward.default": _BACKWARD,
    "aten.native_group_norm_backward.default": _BACKWARD,
    "aten.native_layer_norm_backward.default": _BACKWARD,
    "aten._embedding_bag.default": "EmbeddingBag (bags with offsets and per-sample weights) is not implemented; "
                                   "use nn.Embedding and a sum / mean over the bag dimension",
    "aten._fft_r2c.default": "FFTs produce complex tensors; pt2c has no complex dtypes",
    "aten._fft_c2r.default": "FFTs consume complex tensors; pt2c has no complex dtypes",
    "aten._local_scalar_dense.default": "reads a tensor element into a Python number (.item()): data-dependent "
                                        "values and shapes are not supported (shapes are static)",
    "aten._native_batch_norm_legit.default": "training-mode batch norm that updates running_mean / running_var in "
                                             "place: call model.eval() before torch.export",
    "aten.atan2.out": "out= variant (writes its `out` argument); export graphs use aten.atan2.default, "
                      "which is supported",
    "aten.nonzero.default": "the output shape depends on the data (dynamic shape); pt2c compiles static shapes",
    "aten.sym_numel.default": _SYMBOLIC,
    "aten.sym_size.int": _SYMBOLIC,
    "aten.sym_storage_offset.default": _SYMBOLIC,
    "aten.sym_stride.int": _SYMBOLIC,
    "aten.sym_is_contiguous.default": _SYMBOLIC,
    "aten.resize_.default": "in-place resize of a tensor's storage: buffers are planned at compile time with "
                            "static shapes; create a new tensor (torch.empty / reshape) instead",
})


# ---------------------------------------------------------------- a graph against the op set

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def verify(graph: Graph) -> None:
    """Structural checks run between passes: SSA, def-before-use, known ops, sane shapes."""
    defined: set[int] = {id(v) for v in graph.inputs}
    names: set[str] = set()
    for v in graph.inputs:
        if v.is_const:
            raise VerifyError(f"graph input {v.name} is a constant")
    for v in graph.inputs:
        names.add(v.name)
    for n in graph.nodes:
        if n.op not in OPS:
            raise VerifyError(f"unknown op {n.op!r} in {n!r}")
        for v in n.inputs:
            if not v.is_const and id(v) not in defined:
                raise VerifyError(f"{n!r}: input %{v.name} used before it is defined")
        for v in n.outputs:
            if id(v) in defined:
                raise VerifyError(f"{n!r}: %{v.name} defined twice")
            if v.is_const:
                raise VerifyError(f"{n!r}: output %{v.name} is a constant")
            if v.producer is not n:
                raise VerifyError(f"{n!r}: %{v.name} has the wrong producer")
            if not _IDENT.match(v.name) or v.name in names:
                raise VerifyError(f"{n!r}: bad or duplicate value name {v.name!r}")
            if any(s < 0 for s in v.shape):
                raise VerifyError(f"{n!r}: negative dimension in %{v.name}")
            names.add(v.name)
            defined.add(id(v))
    for v in graph.outputs:
        if not v.is_const and id(v) not in defined:
            raise VerifyError(f"output %{v.name} is never defined")


def eval_graph(graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run the graph with each op's numpy reference; checks every result's shape and dtype."""
    env: dict[int, np.ndarray] = {}
    for v, x in zip(graph.inputs, inputs, strict=True):
        env[id(v)] = np.asarray(x)
    for n in graph.nodes:
        args = [v.data if v.is_const else env[id(v)] for v in n.inputs]
        results = OPS[n.op].ref(n, *args)
        if not isinstance(results, (list, tuple)):
            results = [results]
        for v, r in zip(n.outputs, results, strict=True):
            r = np.asarray(r)
            if tuple(r.shape) != v.shape:
                raise VerifyError(f"{n!r}: reference gives shape {r.shape} for %{v.name}, IR says {v.shape}")
            env[id(v)] = r.astype(np_dtype(v.dtype), copy=False)
    return [v.data if v.is_const else env[id(v)] for v in graph.outputs]
