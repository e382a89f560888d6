"""The C emitter: turns an optimized, planned Graph into the body of `<name>_run`.

Ops call back into it (em.ptr, em.line, em.elementwise, ...) from their `emit` functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.codegen.escape import c_comment
from pt2c.ir import Graph, Node, Value, ctype
from pt2c.ops import OPS
from pt2c.ops.elementwise import _lit, expr_str, expr_to_c
from pt2c.ops.shape import contiguous_strides
from pt2c.passes.memory import MemoryPlan

PARALLEL_MIN = 1 << 16  # elements: below this an elementwise loop stays single-threaded


def collapse(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge adjacent dims that are contiguous for every operand."""
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1]
    out: list[tuple[int, list[int]]] = []
    for n, st in dims:
        if out:
            pn, pst = out[-1]
            if all(p == s * n for p, s in zip(pst, st)):
                out[-1] = (pn * n, st)
                continue
        out.append((n, st))
    if not out:
        return [1], [[0] for _ in strides]
    return [n for n, _ in out], [[st[k] for _, st in out] for k in range(len(strides))]


def broadcast_strides(in_shape: tuple[int, ...], in_strides: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, ...]:
    lead = len(out_shape) - len(in_shape)
    return (0,) * lead + tuple(0 if in_shape[i] == 1 and out_shape[lead + i] != 1 else in_strides[i] for i in range(len(in_shape)))


class Emitter:
    def __init__(self, g: Graph, plan: MemoryPlan, const_offsets: dict[int, int]):
        self.g = g
        self.plan = plan
        self.const_offsets = const_offsets
        self.lines: list[str] = []
        self.indent = 1
        self.declared: dict[int, str] = {}
        self.errors: set[str] = set()

    # ------------------------------------------------------------ primitives
    def line(self, s: str) -> None:
        self.lines.append("    " * self.indent + s if s else "")

    @staticmethod
    def flt(x: float) -> str:
        return _lit("float32", x)

    def is_readonly(self, v: Value) -> bool:
        r = self.plan.root(v)
        return r.is_const or self.plan.storage.get(id(r)) is not None and self.plan.storage[id(r)].kind == "input"

    def ptr(self, v: Value) -> str:
        if id(v) not in self.declared:
            self.declare(v)
        return self.declared[id(v)]

    def declare(self, v: Value) -> None:
        """Define the C pointer for v (typed, const when read-only) at the current position."""
        t = ctype(v.dtype)
        q = "const " if self.is_readonly(v) else ""
        r = self.plan.root(v)
        if r is not v:
            base = self.ptr(r)
            off = self.plan.elem_offset.get(id(v), 0)
            expr = base if off == 0 else f"{base} + {off}"
            if r.dtype != v.dtype:
                expr = f"({q}{t} *)({expr})"
        else:
            st = self.plan.storage.get(id(v))
            if v.is_const:
                expr = f"({q}{t} *)(wb + {self.const_offsets[id(v)]})"
            elif st.kind == "input":
                expr = f"({q}{t} *)inputs[{st.index}]"
            elif st.kind == "output":
                expr = f"({t} *)outputs[{st.index}]"
            else:
                expr = f"({t} *)(ws + {st.offset})"
        self.line(f"{q}{t} *{v.name} = {expr};")
        self.declared[id(v)] = v.name

    def scratch(self, node: Node) -> str:
        return f"(float *)(ws + {self.plan.arena_bytes})"

    # ------------------------------------------------------------ strided loops
    def strided_loop(self, shape: tuple[int, ...], operands: list[tuple[str, tuple[int, ...], int]], body: Any) -> None:
        """Nested loops over `shape`; operands are (pointer, strides, element offset), the first is written.
        body(list of C index expressions, one per operand) -> C statement."""
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if numel == 0:
            return
        sizes, strides = collapse(tuple(shape), [st for _, st, _ in operands])
        rank = len(sizes)
        names = ["i"] if rank == 1 else [f"i{d}" for d in range(rank)]
        idx = []
        for (_, _, off), st in zip(operands, strides):
            terms = [f"{names[d]}" if s == 1 else f"{names[d]} * {s}" for d, s in enumerate(st) if s != 0]
            if off:
                terms.append(str(off))
            idx.append(" + ".join(terms) if terms else "0")
        if numel >= PARALLEL_MIN and sizes[0] > 1:
            self.line("PT2C_OMP(parallel for)")
        for d in range(rank):
            brace = " {" if d < rank - 1 else ""
            self.line(f"for (size_t {names[d]} = 0; {names[d]} < {sizes[d]}; {names[d]}++){brace}")
            self.indent += 1
        self.line(body(idx))
        self.indent -= 1
        for _ in range(rank - 1):
            self.indent -= 1
            self.line("}")

    def elementwise(self, node: Node) -> None:
        out = node.outputs[0]
        ostr = contiguous_strides(out.shape)
        operands = [(self.ptr(out), ostr, 0)]
        if node.op == "strided":
            x = node.inputs[0]
            operands.append((self.ptr(x), tuple(node.attrs["strides"]), node.attrs["offset"]))
            self.strided_loop(out.shape, operands, lambda ix: f"{operands[0][0]}[{ix[0]}] = {operands[1][0]}[{ix[1]}];")
            return
        views = node.attrs.get("views") or [None] * len(node.inputs)
        for v, view in zip(node.inputs, views):
            if view is None:
                shape, st, off = v.shape, contiguous_strides(v.shape), 0
            else:
                shape, st, off = view
            operands.append((self.ptr(v), broadcast_strides(tuple(shape), tuple(st), out.shape), off))
        expr = node.attrs["expr"]

        def body(ix: list[str]) -> str:
            leaves = [f"{p}[{i}]" for (p, _, _), i in zip(operands[1:], ix[1:])]
            return f"{operands[0][0]}[{ix[0]}] = {expr_to_c(expr, leaves)};"

        self.strided_loop(out.shape, operands, body)

    def cat(self, node: Node) -> None:
        out = node.outputs[0]
        dim = node.attrs["dim"]
        ost = contiguous_strides(out.shape)
        at = 0
        for v in node.inputs:
            operands = [(self.ptr(out), ost, at * ost[dim]), (self.ptr(v), contiguous_strides(v.shape), 0)]
            self.strided_loop(v.shape, operands, lambda ix, o=operands: f"{o[0][0]}[{ix[0]}] = {o[1][0]}[{ix[1]}];")
            at += v.shape[dim]

    def gather(self, node: Node) -> None:
        x, idx = node.inputs
        out = node.outputs[0]
        dim = node.attrs["dim"]
        outer = int(np.prod(x.shape[:dim], dtype=np.int64))
        inner = int(np.prod(x.shape[dim + 1:], dtype=np.int64))
        D, J = x.shape[dim], idx.numel
        X, I, Y = self.ptr(x), self.ptr(idx), self.ptr(out)
        self.errors.add("INDEX")
        self.line(f"for (size_t o = 0; o < {outer}; o++) {{")
        self.line(f"    for (size_t j = 0; j < {J}; j++) {{")
        self.line(f"        int64_t k = (int64_t){I}[j];")
        if node.attrs.get("wrap", False):  # x[idx] counts -1 from the end; embedding / index_select raise
            self.line(f"        if (k < 0) k += {D};")
        self.line(f"        if (k < 0 || k >= {D}) return PT2C_ERR_INDEX;")
        if inner == 1:
            self.line(f"        {Y}[o * {J} + j] = {X}[o * {D} + (size_t)k];")
        else:
            self.line(f"        memcpy({Y} + (o * {J} + j) * {inner}, {X} + (o * {D} + (size_t)k) * {inner}, "
                      f"{inner} * sizeof({ctype(x.dtype)}));")
        self.line("    }")
        self.line("}")

    def pad(self, node: Node) -> None:
        x, out = node.inputs[0], node.outputs[0]
        pads = node.attrs["pads"]
        Y = self.ptr(out)
        if any(lo > 0 or hi > 0 for lo, hi in pads):
            self.line(f"for (size_t i = 0; i < {out.numel}; i++) {Y}[i] = {_lit(out.dtype, node.attrs['value'])};")
        ost, ist = contiguous_strides(out.shape), contiguous_strides(x.shape)
        shape, ooff, ioff = [], 0, 0
        for d, (lo, hi) in enumerate(pads):
            src0 = max(0, -lo)
            n = x.shape[d] - src0 - max(0, -hi)
            shape.append(max(n, 0))
            ooff += max(lo, 0) * ost[d]
            ioff += src0 * ist[d]
        operands = [(Y, ost, ooff), (self.ptr(x), ist, ioff)]
        self.strided_loop(tuple(shape), operands, lambda ix: f"{Y}[{ix[0]}] = {operands[1][0]}[{ix[1]}];")

    def generic_reduce(self, node: Node) -> None:
        x, out = node.inputs[0], node.outputs[0]
        outer, r, inner = node.attrs["view"]
        kind = node.attrs["kind"]
        t, X, Y = ctype(out.dtype), self.ptr(x), self.ptr(out)
        init = {"sum": "0", "mean": "0", "prod": "1", "any": "0", "all": "1"}
        self.line(f"for (size_t o = 0; o < {outer}; o++) {{")
        self.line(f"    for (size_t i = 0; i < {inner}; i++) {{")
        at = f"(o * {r} + k) * {inner} + i"
        if kind in init:
            acc_t = "double" if out.dtype in ("float32", "float64") else ("int" if kind in ("any", "all") else t)
            self.line(f"        {acc_t} acc = {init[kind]};")
            step = {"sum": "acc += {x};", "mean": "acc += {x};", "prod": "acc *= {x};",
                    "any": "acc = acc || ({x} != 0);", "all": "acc = acc && ({x} != 0);"}[kind]
            self.line(f"        for (size_t k = 0; k < {r}; k++) " + step.format(x=f"{X}[{at}]"))
            res = f"acc / {r}" if kind == "mean" else "acc"
        elif kind in ("max", "min", "argmax", "argmin"):
            cmp = ">" if "max" in kind else "<"
            self.line("        size_t best = 0;")
            self.line(f"        for (size_t k = 1; k < {r}; k++) if ({X}[{at}] {cmp} {X}[(o * {r} + best) * {inner} + i]) best = k;")
            res = "(int64_t)best" if kind.startswith("arg") else f"{X}[(o * {r} + best) * {inner} + i]"
        else:
            raise NotImplementedError(kind)
        self.line(f"        {Y}[o * {inner} + i] = ({t})({res});")
        self.line("    }")
        self.line("}")

    # ------------------------------------------------------------ whole graph
    def node_comment(self, node: Node) -> list[str]:
        if node.op == "conv2d_pw_dw":  # both convs, the first's output made and used by groups of channels
            first = self.node_comment(node.attrs["_pw"])
            first[0] += " (by groups of channels, not stored)"
            return first + self.node_comment(node.attrs["_dw"])
        o = node.origin
        out = node.outputs[0]
        what = node.op
        if node.op == "ew":
            what = f"ew: {expr_str(node.attrs['expr'])}"
            if len(what) > 90:
                what = what[:87] + "..."
        elif node.op == "conv2d":
            a = node.attrs
            what = (f"conv2d {a['kernel'][0]}x{a['kernel'][1]} s{a['stride'][0]} p{a['padding'][0]}"
                    + (f" g{a['groups']}" if a["groups"] > 1 else "") + (" +bias" if a.get("has_bias") else "")
                    + (" +residual" if a.get("has_residual") else "") + (f" +{a['act']}" if a.get("act") else ""))
        elif node.op == "matmul":
            a = node.attrs
            what = ("matmul" + (" +bias" if a.get("has_bias") else "") + (" +residual" if a.get("has_residual") else "")
                    + (f" +{a['act']}" if a.get("act") else "") + (" (packed weights)" if a.get("b_packed") else ""))
        loc = o.module_path or "<top>"
        if o.module_type:
            loc += f" ({o.module_type.rsplit('.', 1)[-1]})"
        lines = [f"/* {c_comment(loc)}: {c_comment(what)} -> {out.dtype}{list(out.shape)}"]
        if o.source:
            lines.append(f" * {c_comment(o.source)}")
        lines[-1] += " */"
        return lines

    def emit_graph(self) -> list[str]:
        for n in self.g.nodes:
            if OPS[n.op].alias:
                continue  # views: a pointer, declared where first used
            self.line("")
            for c in self.node_comment(n):
                self.line(c)
            # declare pointers outside the block so later nodes see them
            for v in n.inputs + n.outputs:
                self.ptr(v)
            self.line("{")
            self.indent += 1
            start = len(self.lines)
            OPS[n.op].emit(self, n)
            self.indent -= 1
            if len(self.lines) == start + 1 and not self.lines[start].strip().startswith(("pt2c_epilogue", "for", "PT2C")):
                # a single statement needs no block
                stmt = self.lines.pop().strip()
                self.lines.pop()  # the "{"
                self.line(stmt)
            else:
                self.line("}")
        return self.lines
