"""Mixture-of-experts layers: a batched matmul whose weight operand is a gather of constant weights by a
run-time index (``W[expert_ids]`` then ``bmm``, as transformers' batched experts write it) becomes one
``gathered_matmul``, whose kernel groups the rows by weight and runs one GEMM per weight used: each
weight is read once per run instead of copied once per row."""

from __future__ import annotations

from pt2c.ir import Graph, Node


def fuse_gathered_matmul(g: Graph) -> Graph:
    """matmul(gather(W, ids, dim 0), x) with W a constant [E, N, K] and x [S, K, 1] -> y [S, N, 1] (y = W x);
    or matmul(x, gather(W, ids)) with W [E, K, N] and x [S, 1, K] -> [S, 1, N] (y = x W).  S rows, one index
    each, no epilogue or strided operand yet (this runs before those fusions)."""
    for i, n in enumerate(g.nodes):
        if n.op != "matmul" or len(n.inputs) != 2 or len(n.outputs[0].shape) != 3 or set(n.attrs) - {"has_bias", "k"}:
            continue
        a, b = n.inputs
        out = n.outputs[0]
        S = out.shape[0]
        for form, gv, x in (("wx", a, b), ("xw", b, a)):
            p = gv.producer
            if p is None or p.op != "gather" or p.attrs.get("dim") != 0 or not p.attrs.get("wrap"):
                continue
            w, ids = p.inputs
            if not w.is_const or w.dtype != "float32" or len(w.shape) != 3 or ids.shape != (S,) or ids.dtype != "int64":
                continue
            N, K = (w.shape[1], w.shape[2]) if form == "wx" else (w.shape[2], w.shape[1])
            if x.shape != ((S, K, 1) if form == "wx" else (S, 1, K)) or x.dtype != "float32":
                continue
            g.nodes[i] = Node("gathered_matmul", [x, ids, w], {"form": form, "N": N, "K": K}, [out], n.origin)
            break
    return g
