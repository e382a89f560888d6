"""Control flow: ``torch.cond`` as if / else, ``torch._higher_order_ops.while_loop`` as a loop.

Lowered by the frontend from ``torch.ops.higher_order.cond``, ``while_loop``, ``scan`` and ``map_impl``
(a cond whose predicate is a constant keeps only the branch taken); see docs/custom-ops.md.

A control node holds its graphs in ``node.blocks`` (ir.Node): each block reads outer values directly
(its ``inputs`` list them; they are also the node's inputs, so passes and the memory plan see the
uses) and returns the values the node copies out (frontend/lower.py makes them values of the
block's own).  The memory plan covers every block (ir.schedule: blocks in line, a loop's outer values
and state live until the loop ends).

- ``cond``: inputs [pred (bool, one element), captured...], blocks [then, else], outputs: the taken
  branch's results.
- ``while_loop``: inputs [initial state (n_carried)..., captured...], blocks [cond, body]; the outputs
  are the loop's state: set from the initial values, then while cond(state) is true, body(state)
  computes the next state.  Both blocks read the state as the node's outputs.
- ``scan`` (``torch._higher_order_ops.scan``, and ``map`` as a scan without a carry): inputs [initial
  carry (n_carry)..., xs (n_xs)..., captured...], block [body]; outputs [carry..., ys (n_ys)..., one
  slice per xs].  For each step i along the xs' first dim: xs[i] is copied into its slice, the body
  reads (carry, slices) and returns (next carry, y_i), and y_i is copied into ys[i].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ir import Node, np_dtype
from pt2c.ops.context import EmitCtx
from pt2c.ops.registry import defop, eval_graph, need
from pt2c.sym import sint


def _run_block(node: Node, b: Any, env: dict[int, np.ndarray]) -> list[np.ndarray]:
    return eval_graph(b, [env[id(v)] for v in b.inputs])


def _ref_cond(node: Node, *arrays: np.ndarray) -> list[np.ndarray]:
    env = {id(v): a for v, a in zip(node.inputs, arrays)}
    return _run_block(node, node.blocks[0 if bool(np.asarray(arrays[0]).reshape(-1)[0]) else 1], env)


def _ref_while(node: Node, *arrays: np.ndarray) -> list[np.ndarray]:
    k = node.attrs["n_carried"]
    env = {id(v): a for v, a in zip(node.inputs, arrays)}
    state = [np.array(a) for a in arrays[:k]]
    cond, body = node.blocks
    while True:
        env.update({id(v): s for v, s in zip(node.outputs, state)})
        if not bool(np.asarray(_run_block(node, cond, env)[0]).reshape(-1)[0]):
            return state
        state = [np.array(r) for r in _run_block(node, body, env)]


def _ref_scan(node: Node, *arrays: np.ndarray) -> list[np.ndarray]:
    c, m, r = node.attrs["n_carry"], node.attrs["n_xs"], node.attrs["n_ys"]
    env = {id(v): a for v, a in zip(node.inputs, arrays)}
    carry = [np.array(a) for a in arrays[:c]]
    xs = arrays[c:c + m]
    ys = [np.zeros(v.shape, dtype=np_dtype(v.dtype)) for v in node.outputs[c:c + r]]
    slices = node.outputs[c + r:]
    for i in range(node.attrs["length"]):
        env.update({id(v): s for v, s in zip(node.outputs, carry)})
        env.update({id(v): np.array(x[i]) for v, x in zip(slices, xs)})
        res = _run_block(node, node.blocks[0], env)
        carry = [np.array(a) for a in res[:c]]
        for y, a in zip(ys, res[c:]):
            y[i] = a
    return carry + ys + [np.array(x[-1]) if len(x) else np.zeros(v.shape, np_dtype(v.dtype))
                         for v, x in zip(slices, xs)]  # the slices hold the last step's


def _emit_cond(em: EmitCtx, node: Node) -> None:
    then, other = node.blocks
    em.line(f"if ({em.ptr(node.inputs[0])}[0]) {{")
    em.block(then, node.outputs)
    em.line("} else {")
    em.block(other, node.outputs)
    em.line("}")


def _emit_while(em: EmitCtx, node: Node) -> None:
    cond, body = node.blocks
    for v, init in zip(node.outputs, node.inputs):
        em.line(f"memcpy({em.ptr(v)}, {em.ptr(init)}, {v.nbytes});")
    em.line("for (;;) {")
    em.block(cond, [], after=lambda ptrs: [f"if (!{ptrs[0]}[0]) break;"])
    em.block(body, node.outputs)
    em.line("}")


def _emit_scan(em: EmitCtx, node: Node) -> None:
    c, m, r = node.attrs["n_carry"], node.attrs["n_xs"], node.attrs["n_ys"]
    carry, ys, slices = node.outputs[:c], node.outputs[c:c + r], node.outputs[c + r:]
    xs = node.inputs[c:c + m]
    step = f"{node.outputs[0].name}__step"  # (generated value names never contain "__": nothing shadowed)
    for v, init in zip(carry, node.inputs):
        em.line(f"memcpy({em.ptr(v)}, {em.ptr(init)}, {v.nbytes});")
    em.line(f"for (int64_t {step} = 0; {step} < {sint(node.attrs['length'])}; {step}++) {{")
    em.line(" " * 4 + "/* this step's slice of each scanned input */")
    for s, x in zip(slices, xs):
        em.line(f"    memcpy({em.ptr(s)}, (const char *){em.ptr(x)} + {step} * {s.nbytes}, {s.nbytes});")

    def store(ptrs: list[str]) -> list[str]:
        n = node.attrs["length"]
        return ([f"memcpy({em.ptr(v)}, {p}, {v.nbytes});" for v, p in zip(carry, ptrs)]
                + [f"memcpy((char *){em.ptr(y)} + {step} * {y.nbytes // n}, {p}, {y.nbytes // n});"
                   for y, p in zip(ys, ptrs[c:])])

    em.block(node.blocks[0], [], after=store)
    em.line("}")


def own_inputs(node: Node) -> int:
    """How many of a control node's inputs are its own operands (the rest: values its blocks capture)."""
    at = node.attrs
    return {"cond": 1, "while_loop": at.get("n_carried", 0), "scan": at.get("n_carry", 0) + at.get("n_xs", 0)}[node.op]


def _same(a: Any, b: Any) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def _check_cond(node: Node) -> None:
    need(len(node.blocks) == 2, "a cond has two blocks (then, else)")
    p = node.inputs[0] if node.inputs else None
    need(p is not None and p.dtype == "bool" and p.numel == 1, "the predicate is one bool")
    for b in node.blocks:
        need(len(b.outputs) == len(node.outputs) and all(_same(r, o) for r, o in zip(b.outputs, node.outputs)),
             f"block {b.name} returns {[repr(v) for v in b.outputs]}, the node has {[repr(v) for v in node.outputs]}")


def _check_while(node: Node) -> None:
    k = node.attrs.get("n_carried")
    need(type(k) is int and 0 < k == len(node.outputs) <= len(node.inputs), "n_carried: the state's size")
    need(len(node.blocks) == 2, "a while_loop has two blocks (cond, body)")
    need(all(_same(i, o) for i, o in zip(node.inputs, node.outputs)), "initial values and state differ")
    cond, body = node.blocks
    need(len(cond.outputs) == 1 and cond.outputs[0].dtype == "bool" and cond.outputs[0].numel == 1,
         "the cond block returns one bool")
    need(len(body.outputs) == k and all(_same(r, o) for r, o in zip(body.outputs, node.outputs)),
         "the body returns the state")


def _check_scan(node: Node) -> None:
    at = node.attrs
    c, m, r, n = at.get("n_carry"), at.get("n_xs"), at.get("n_ys"), at.get("length")
    need(all(type(k) is int and k >= 0 for k in (c, m, r, n)) and m >= 1, "n_carry, n_xs, n_ys, length")
    need(len(node.outputs) == c + r + m and len(node.inputs) >= c + m, "outputs: carry, ys, slices")
    need(len(node.blocks) == 1, "a scan has one block (its body)")
    need(all(_same(i, o) for i, o in zip(node.inputs[:c], node.outputs[:c])), "initial carry and carry differ")
    for x, s in zip(node.inputs[c:c + m], node.outputs[c + r:]):
        need(x.shape[:1] == (n,) and x.shape[1:] == s.shape and x.dtype == s.dtype, f"%{x.name}: not scanned in {n} steps")
    body = node.blocks[0]
    need(len(body.outputs) == c + r, "the body returns the carry and one y")
    need(all(_same(a, b) for a, b in zip(body.outputs[:c], node.outputs[:c])), "the body's carry differs")
    for y, b in zip(node.outputs[c:c + r], body.outputs[c:]):
        need(y.shape == (n, *b.shape) and y.dtype == b.dtype, f"%{y.name}: not {n} stacked {b!r}")


def _describe_cond(node: Node) -> str:
    return f"if / else (torch.cond): {len(node.blocks[0].nodes)} and {len(node.blocks[1].nodes)} ops"


def _describe_while(node: Node) -> str:
    return f"loop (while_loop) over {node.attrs['n_carried']} state tensor(s): {len(node.blocks[1].nodes)} ops per step"


defop("cond", _ref_cond, _emit_cond, rule=_check_cond, describe=_describe_cond)
defop("while_loop", _ref_while, _emit_while, rule=_check_while, describe=_describe_while)
defop("scan", _ref_scan, _emit_scan, rule=_check_scan,
      describe=lambda n: f"loop (scan / map) over {n.attrs['length']} steps: {len(n.blocks[0].nodes)} ops per step")
