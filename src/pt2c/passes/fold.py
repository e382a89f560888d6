"""Dead code elimination, BatchNorm folding and GEMM/conv epilogue fusion."""

from __future__ import annotations

import numpy as np

from pt2c.ir import Graph, Node, Value
from pt2c.ops.epilogue import EPILOGUE_ACTS, ROUNDS


def dce(g: Graph) -> Graph:
    live = {id(v) for v in g.outputs}
    kept: list[Node] = []
    for n in reversed(g.nodes):
        if any(id(v) in live for v in n.outputs):
            kept.append(n)
            live.update(id(v) for v in n.inputs)
    g.nodes = kept[::-1]
    return g


def _single_user(g: Graph, v: Value, users: dict[int, list[Node]]) -> Node | None:
    us = users.get(id(v), [])
    if len(us) != 1 or any(o is v for o in g.outputs):
        return None
    return us[0]


def fold_batchnorm(g: Graph) -> Graph:
    """conv2d -> channel_affine(scale, shift) becomes one conv2d with scaled weights and bias."""
    users = g.users()
    drop: set[int] = set()
    for n in g.nodes:
        if n.op != "conv2d" or n.attrs.get("has_residual") or n.attrs.get("act"):
            continue
        u = _single_user(g, n.outputs[0], users)
        r = None  # a reduced-precision model rounds the conv's result before the affine: folded with it
        if u is not None and u.op == "ew" and len(u.inputs) == 1 and _round_of(u.attrs["expr"]):
            r, u = u, _single_user(g, u.outputs[0], users)
        if u is None or u.op != "channel_affine" or u.inputs[0] is not (r or n).outputs[0]:
            continue
        scale, shift = u.inputs[1].data, u.inputs[2].data
        w = n.inputs[1]
        if scale is None or shift is None or not w.is_const:
            continue
        new_w = Value(w.name, w.shape, w.dtype, (w.data * scale.reshape(-1, 1, 1, 1)).astype(np.float32))
        old_b = n.inputs[2].data if n.attrs.get("has_bias") else np.zeros(w.shape[0], np.float32)
        new_b = Value(w.name.rsplit("_weight", 1)[0] + "_bias_folded", (w.shape[0],), "float32",
                      (old_b * scale + shift).astype(np.float32))
        n.inputs = [n.inputs[0], new_w, new_b]
        n.attrs["has_bias"] = True
        # the conv now produces the affine's output value, under the conv's name
        out = u.outputs[0]
        out.name = n.outputs[0].name
        n.outputs = [out]
        out.producer = n
        drop.add(id(u))
        if r is not None:
            drop.add(id(r))
    g.nodes = [n for n in g.nodes if id(n) not in drop]
    return g


def _act_of(expr: tuple) -> tuple[str, float, float] | None:
    """Recognise act(in0) (and clamps of in0) in an `ew` expression."""
    kind = expr[0]
    if kind in EPILOGUE_ACTS and expr[2] == ("in", "float32", 0):
        return kind, 0.0, 0.0
    if kind == "clamp_max" and expr[3][0] == "lit":
        inner = expr[2]
        if inner[0] == "clamp_min" and inner[2] == ("in", "float32", 0) and inner[3][0] == "lit":
            return "clamp", float(inner[3][2]), float(expr[3][2])
    return None


def _round_of(expr: tuple) -> str | None:
    """Recognise round_<r>(in0) (a reduced-precision model's rounding of a result): r."""
    r = expr[0].removeprefix("round_")
    return r if r in ROUNDS and expr[2] == ("in", "float32", 0) else None


def fuse_epilogues(g: Graph) -> Graph:
    """Fold a residual add and then an activation into the producing conv2d / matmul (also through
    a reshape in between); in a reduced-precision model also the roundings of their results (the epilogue
    then rounds after each step: the product with bias and residual, the activation)."""
    changed = True
    while changed:
        changed = False
        users = g.users()
        pos = {id(m): i for i, m in enumerate(g.nodes)}
        for n in g.nodes:
            if n.op not in ("conv2d", "matmul") or n.outputs[0].dtype != "float32":
                continue
            if n.op == "matmul" and len(n.outputs[0].shape) > 2 and len(n.inputs[1].shape) > 2:
                continue  # batched products keep a plain epilogue
            y = n.outputs[0]
            u = _single_user(g, y, users)
            view = None  # a reshape between the product and the ew ([M, N] -> [1, M, N] after a linear)
            if u is not None and u.op == "view" and u.attrs.get("offset", 0) == 0:
                view, u = u, _single_user(g, u.outputs[0], users)
            yv = view.outputs[0] if view is not None else y  # what the ew reads
            if u is None or u.op != "ew" or u.outputs[0].shape != yv.shape or u.attrs.get("views"):
                continue
            e = u.attrs["expr"]
            rnd = _round_of(e) if len(u.inputs) == 1 else None
            act = _act_of(e) if len(u.inputs) == 1 else None
            r = n.attrs.get("round")
            # with a rounding, the step after it must be rounded too (that rounding is fused with it)
            tail = _single_user(g, u.outputs[0], users) if r and rnd is None else None
            if r and rnd is None and (tail is None or tail.op != "ew" or len(tail.inputs) != 1
                                      or _round_of(tail.attrs["expr"]) != r):
                continue
            if rnd is not None:
                if r not in (None, rnd) or (r is None and n.attrs.get("act")):
                    continue
                n.attrs["round"] = rnd  # (again: a no-op)
            elif n.attrs.get("act"):
                continue
            elif act is not None:
                n.attrs["act"], n.attrs["lo"], n.attrs["hi"] = act
            elif (not n.attrs.get("has_residual") and e[0] == "add" and len(u.inputs) == 2
                  and {e[2], e[3]} == {("in", "float32", 0), ("in", "float32", 1)}):
                other = u.inputs[1] if u.inputs[0] is yv else u.inputs[0]
                if other.shape != yv.shape or other is yv or other.is_const:
                    continue  # (dense row-major: through a reshape, the same elements in the same order)
                if other.producer is not None and pos[id(other.producer)] > pos[id(n)]:
                    continue  # the residual is computed later: fuse into its producer instead
                # (after a rounding, the kernel adds the residual to the unrounded product + bias: one rounding
                # fewer than the graph, the result within an ulp of the reduced dtype)
                n.inputs = n.inputs + [other]
                n.attrs["has_residual"] = True
            else:
                continue
            drop = {id(u), id(tail)}
            if tail is not None:
                u = tail
            out = u.outputs[0]
            if view is not None:  # product -> y -> view -> out: the view now yields the ew's value
                view.outputs = [out]
                out.producer = view
            else:
                n.outputs = [out]
                out.producer = n
                out.name = y.name  # the buffer is the product's (conv1, not the relu fused into it)
            g.nodes = [m for m in g.nodes if id(m) not in drop]
            changed = True
            break
    return g
