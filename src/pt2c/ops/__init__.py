"""The op set.  Each op is defined in ONE place, the module of its family: its ATen target(s) and
how they lower to the IR, its numpy reference, its C emission and the kernel files it needs.

An `OpDef` describes an IR op; `@lowers(*aten_targets)` registers the function that turns an FX
node calling those ATen targets into IR nodes (both in registry.py).  Lowering functions see a
`LowerCtx`, emit functions an `EmitCtx` (context.py); helpers shared by families are in util.py.

Importing this package registers every family, so `OPS` / `LOWERINGS` are complete; `verify`
checks a graph against them (structure, then each node against its op's rule: `OpDef.check`, and a
memory plan when given one), `eval_graph` runs one with the numpy references.
"""

from __future__ import annotations

import re
from typing import Any

from pt2c.ir import LOOPS, Graph, MemoryPlan, Node, VerifyError, reads, schedule, walk
from pt2c.ops import control, conv, creation, custom, elementwise, index, matmul, norm, pool, random, reduce, resize, shape, sort
from pt2c.ops.registry import LOWERINGS, OPS, UNSUPPORTED, OpDef, core_aten_ops, defop, eval_graph, lowers
from pt2c.sym import Dims, at, concrete_value, dynamic, samples

__all__ = ["FAMILIES", "LOWERINGS", "OPS", "UNSUPPORTED", "OpDef", "core_aten_ops", "defop", "eval_graph", "lowers",
           "verify", "verify_plan"]

# the op families, in the order docs/ops.md lists them (each module's docstring says what it holds)
FAMILIES = (elementwise, creation, shape, index, matmul, conv, pool, resize, norm, reduce, sort, random, control,
            custom)


# ---------------------------------------------------------------- core ATen ops pt2c does not lower, and why
# (the compile-time error for such a node quotes the reason; scripts/gen_ops_doc.py lists them in docs/ops.md).
# Ops of a family (its backward ops, variants not implemented) are listed in the family's module; here
# the ones no family owns.

UNSUPPORTED.update({
    "aten._fft_r2c.default": "FFTs produce complex tensors; pt2c has no complex dtypes",
    "aten._fft_c2r.default": "FFTs consume complex tensors; pt2c has no complex dtypes",
    "aten._local_scalar_dense.default": "reads a tensor element into a Python number (.item()): data-dependent "
                                        "values and sizes are not supported (sizes come from the inputs' shapes)",
    "aten.atan2.out": "out= variant (writes its `out` argument); export graphs use aten.atan2.default, "
                      "which is supported",
    "aten.nonzero.default": "the output shape depends on the data; pt2c's dynamic sizes come from the inputs' "
                            "shapes (torch.export.Dim), not from values",
    "aten.sym_is_contiguous.default": "a symbolic contiguity query; pt2c's tensors are dense (export without it)",
    "aten.resize_.default": "in-place resize of a tensor's storage: buffers are planned at compile time; "
                            "create a new tensor (torch.empty / reshape) instead",
})


# ---------------------------------------------------------------- a graph against the op set

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def verify(graph: Graph, plan: MemoryPlan | None = None) -> None:
    """The checks run between passes: SSA, def-before-use, known ops, unique C-identifier names, every
    node against its op's rule (shapes, dtypes, attrs: `OpDef.check`); with a plan, the plan too."""
    defined: set[int] = {id(v) for v in graph.inputs}
    names: dict[str, int] = {}  # value name -> id(Value): one name, one value (constants included)

    def name(v: Any, where: str) -> None:
        if names.setdefault(v.name, id(v)) != id(v):
            raise VerifyError(f"{where}: two different values are named {v.name!r}")

    for v in graph.inputs:
        if v.is_const:
            raise VerifyError(f"graph input {v.name} is a constant")
    for v in graph.inputs:
        if not _IDENT.match(v.name) or v.name in names:
            raise VerifyError(f"graph input: bad or duplicate value name {v.name!r}")
        name(v, "graph input")
    _verify_nodes(graph.nodes, defined, names, name)
    for v in graph.outputs:
        if not v.is_const and id(v) not in defined:
            raise VerifyError(f"output %{v.name} is never defined")
        if v.is_const:
            name(v, "graph output")
    if plan is not None:
        verify_plan(graph, plan)


def _verify_nodes(nodes: list[Any], defined: set[int], names: dict[str, int], name: Any) -> None:
    """SSA and def-before-use over nodes (defined: ids of the values visible so far, updated); a control-flow
    node's blocks see what is defined before it (a loop's blocks also its state, the node's outputs), and
    what they define stays inside them."""
    for n in nodes:
        if n.op not in OPS:
            raise VerifyError(f"unknown op {n.op!r} in {n!r}")
        for v in n.inputs:
            if not v.is_const and id(v) not in defined:
                raise VerifyError(f"{n!r}: input %{v.name} used before it is defined")
            if v.is_const:
                if not _IDENT.match(v.name):
                    raise VerifyError(f"{n!r}: bad constant name {v.name!r}")
                name(v, repr(n))
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
            name(v, repr(n))
            if not n.blocks:
                defined.add(id(v))
        if n.blocks:
            if n.op in LOOPS:
                defined.update(id(v) for v in n.outputs)
            for b in n.blocks:
                inner = set(defined)
                for v in b.inputs:
                    if id(v) not in defined or not any(v is u for u in n.inputs + n.outputs):
                        raise VerifyError(f"{n!r}: block {b.name} reads %{v.name}, which is not one of the node's "
                                          "inputs defined before it")
                _verify_nodes(b.nodes, inner, names, name)
                for v in b.outputs:
                    if not v.is_const and id(v) not in inner:
                        raise VerifyError(f"{n!r}: block {b.name} returns %{v.name}, which it never defines")
            defined.update(id(v) for v in n.outputs)
        OPS[n.op].check(n)


def concrete(n: Node, sizes: dict[str, int]) -> Node:
    """A copy of the node at given sizes (its values and attrs with plain ints)."""
    return Node(n.op, [concrete_value(v, sizes) for v in n.inputs], at(n.attrs, sizes),
                [concrete_value(v, sizes) for v in n.outputs], n.origin)


def scratch_bytes(n: Node, dims: Dims | None) -> int:
    """The scratch a node needs; with dynamic sizes, the most it needs at any size (sizes sampled across the
    ranges: a kernel's blocking need not grow with every size)."""
    if dims is None or not any(dynamic(v.shape) for v in n.inputs + n.outputs):
        return OPS[n.op].scratch(n)
    return max(OPS[n.op].scratch(concrete(n, sizes)) for sizes in samples(dims))


def verify_plan(graph: Graph, plan: MemoryPlan) -> None:
    """A memory plan against its graph: graph inputs in the caller's input buffers and outputs in its
    output buffers; every view rooted where its input is; every other computed value in a buffer;
    arena buffers aligned, large enough, inside the arena, and no two live at the same node
    (inclusive [first write, last read] intervals, recomputed here) sharing a byte; scratch enough for
    every kernel."""
    bufs, aliases = plan.buffers, plan.aliases

    def root(name: str) -> str:
        return aliases.get(name, (name, 0))[0]

    for i, v in enumerate(graph.inputs):
        b = bufs.get(v.name)
        if b is None or b.kind != "input" or b.index != i:
            raise VerifyError(f"plan: graph input {i} %{v.name} is not in input buffer {i} ({b})")
    n_alias = 0
    for n in walk(graph):
        if OPS[n.op].alias or n.attrs.get("inplace"):  # (inplace: an index_put into a state, where it lives)
            src, out = n.inputs[0], n.outputs[0]
            base, off = aliases.get(src.name, (src.name, 0))
            want = (base, off + n.attrs.get("offset", 0))
            if aliases.get(out.name) != want or out.name in bufs:
                raise VerifyError(f"plan: view %{out.name} should alias {want}, the plan says {aliases.get(out.name)}")
            n_alias += 1
            continue
        for v in n.outputs:
            b = bufs.get(v.name)
            if n.op == "state":
                if b is None or b.kind != "state" or b.offset < plan.arena_bytes + plan.scratch_bytes \
                        or b.offset + b.nbytes > plan.workspace_bytes or b.nbytes < v.nbytes:
                    raise VerifyError(f"plan: state %{v.name} is not in the state region ({b})")
                continue
            if b is None or b.kind not in ("arena", "output"):
                raise VerifyError(f"plan: %{v.name} ({n.op}) has no buffer to be written to ({b})")
    if n_alias != len(aliases):
        raise VerifyError(f"plan: {len(aliases)} views planned, the graph has {n_alias}")
    for j, v in enumerate(graph.outputs):
        b = bufs.get(root(v.name))
        if v.is_const or b is None or b.kind != "output" or b.index != j or aliases.get(v.name, ("", 0))[1] != 0:
            raise VerifyError(f"plan: graph output {j} %{v.name} is not written into output buffer {j} ({b})")
    # arena buffers: the intervals recomputed from the graph, then a sweep by first write
    life: dict[str, list[int]] = {}
    for t, (n, when) in enumerate(schedule(graph)):
        for v in n.outputs if when != "end" else ():
            r = root(v.name)
            if r in bufs and bufs[r].kind == "arena":
                life.setdefault(r, [t, t])
        for v in reads(n, when):
            r = root(v.name)
            if r in life:
                life[r][1] = t
    values = {v.name: v for n in walk(graph) for v in n.outputs}
    for k, b in bufs.items():
        if b.kind != "arena":
            continue
        if k not in life:
            raise VerifyError(f"plan: arena buffer {k!r} belongs to no computed value")
        if b.offset % plan.align or b.nbytes < values[k].max_nbytes or b.offset < 0 or b.offset + b.nbytes > plan.arena_bytes:
            raise VerifyError(f"plan: arena buffer of %{k} {b} is misaligned, too small or outside the "
                              f"{plan.arena_bytes}-byte arena (the value has {values[k].nbytes} bytes)")
        if not (b.first <= life[k][0] and life[k][1] <= b.last):
            raise VerifyError(f"plan: %{k} is live over nodes {life[k]}, its buffer over [{b.first}, {b.last}]")
    live: list[tuple[int, str]] = []  # (last read, name) of the buffers still live
    for k in sorted(life, key=lambda k: life[k][0]):
        s, e = life[k]
        live = [(e2, k2) for e2, k2 in live if e2 >= s]
        b = bufs[k]
        for _, k2 in live:
            b2 = bufs[k2]
            if b.offset < b2.offset + b2.nbytes and b2.offset < b.offset + b.nbytes:
                raise VerifyError(f"plan: %{k} (nodes {life[k]}) and %{k2} (nodes {life[k2]}) are live together "
                                  f"and overlap in the arena ({b}, {b2})")
        live.append((e, k))
    for n in walk(graph):
        scratch = scratch_bytes(n, graph.meta.get("dims")) if OPS[n.op].scratch else 0
        if scratch > plan.scratch_bytes:
            raise VerifyError(f"plan: {n!r} needs {scratch} bytes of scratch, the plan has {plan.scratch_bytes}")
