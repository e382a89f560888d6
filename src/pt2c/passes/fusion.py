"""Elementwise fusion and view folding.

- fuse_views: a `strided` copy (permute, expand, slice, ...) read only by `ew` nodes is
  folded into their input views, and a transpose feeding a matmul becomes operand strides:
  no copy at all.
- fuse_elementwise: an `ew` node whose result feeds exactly one `ew` node of the same
  output shape is inlined into it: one loop, no intermediate buffer.
"""

from __future__ import annotations

from pt2c.ir import Graph, Node
from pt2c.ops.elementwise import e_in, expr_size, expr_substitute
from pt2c.ops.util import contiguous_strides

MAX_FUSED_EXPR = 64  # keep generated expressions readable and compile times sane


def _views(n: Node) -> list:
    return list(n.attrs.get("views") or [None] * len(n.inputs))


def fuse_views(g: Graph) -> Graph:
    users = g.users()
    outputs = {id(v) for v in g.outputs}
    drop: set[int] = set()
    for s in g.nodes:
        if s.op != "strided" or id(s.outputs[0]) in outputs:
            continue
        y = s.outputs[0]
        us = users.get(id(y), [])
        if not us or not all(u.op == "ew" or _matmul_operand(u, y) for u in us):
            continue
        for u in us:
            if u.op == "matmul":
                _fold_into_matmul(u, s)
                continue
            views = _views(u)
            for i, v in enumerate(u.inputs):
                if v is y:
                    views[i] = (y.shape, s.attrs["strides"], s.attrs["offset"])
                    u.inputs[i] = s.inputs[0]
            u.attrs["views"] = views
        drop.add(id(s))
    g.nodes = [n for n in g.nodes if id(n) not in drop]
    return g


def _matmul_operand(u: Node, y) -> bool:
    """y feeds u (a matmul) as a or b, and y is a transposed-last-two-dims view we can stride."""
    if u.op != "matmul" or y not in u.inputs[:2] or u.inputs[0] is u.inputs[1]:
        return False
    if any(v is y for v in u.inputs[2:]):
        return False
    s = y.producer
    st = s.attrs["strides"]
    if s.attrs["offset"] != 0 or len(y.shape) < 2:
        return False
    # batch dims must be dense over the matrix: stride of the last batch dim = M*K
    if len(y.shape) > 3:
        return False
    if len(y.shape) == 3 and st[0] != y.shape[1] * y.shape[2]:
        return False
    return st[-1] != 1 or st[-2] != y.shape[-1]


def _fold_into_matmul(u: Node, s: Node) -> None:
    y = s.outputs[0]
    st = s.attrs["strides"]
    strides = (st[0] if len(st) == 3 else 0, st[-2], st[-1])
    key = "a_strides" if u.inputs[0] is y else "b_strides"
    u.attrs[key] = strides
    u.inputs[0 if key == "a_strides" else 1] = s.inputs[0]


def fuse_elementwise(g: Graph) -> Graph:
    changed = True
    while changed:
        changed = False
        users = g.users()
        outputs = {id(v) for v in g.outputs}
        for p in g.nodes:
            if p.op != "ew" or id(p.outputs[0]) in outputs:
                continue
            y = p.outputs[0]
            us = users.get(id(y), [])
            if len(us) != 1 or us[0].op != "ew":
                continue
            c = us[0]
            if c.outputs[0].shape != y.shape or expr_size(c.attrs["expr"]) + expr_size(p.attrs["expr"]) > MAX_FUSED_EXPR:
                continue
            cviews = _views(c)
            if any(v is y and cviews[i] is not None and not _is_identity_view(cviews[i], y.shape)
                   for i, v in enumerate(c.inputs)):
                continue
            _inline(c, p)
            g.nodes = [n for n in g.nodes if n is not p]
            changed = True
            break
    return g


def _is_identity_view(view: tuple, shape: tuple[int, ...]) -> bool:
    vshape, strides, offset = view
    return offset == 0 and tuple(vshape) == tuple(shape) and tuple(strides) == contiguous_strides(tuple(shape))


def _inline(c: Node, p: Node) -> None:
    """Replace c's reads of p's output by p's expression over p's inputs."""
    y = p.outputs[0]
    new_inputs: list = []
    new_views: list = []
    index: dict[tuple, int] = {}

    def add(v, view) -> int:
        key = (id(v), repr(view))
        if key not in index:
            index[key] = len(new_inputs)
            new_inputs.append(v)
            new_views.append(view)
        return index[key]

    cviews, pviews = _views(c), _views(p)
    p_map = {i: add(v, pviews[i]) for i, v in enumerate(p.inputs)}
    p_expr = expr_substitute(p.attrs["expr"], lambda i: e_in(p.inputs[i].dtype, p_map[i]))
    c_map = {}
    for i, v in enumerate(c.inputs):
        if v is not y:
            c_map[i] = add(v, cviews[i])
    c.attrs["expr"] = expr_substitute(c.attrs["expr"], lambda i: p_expr if c.inputs[i] is y else e_in(c.inputs[i].dtype, c_map[i]))
    c.inputs = new_inputs
    c.attrs["views"] = new_views if any(v is not None for v in new_views) else None
    if c.attrs["views"] is None:
        c.attrs.pop("views")
