"""The C emitter: turns an optimized, planned Graph into the body of `<name>_run`.

Each op's `emit` function (in its family module under pt2c/ops/) writes the node's C through the
primitives here, the `EmitCtx` protocol (pt2c/ops/context.py): em.line, em.ptr, em.strided_loop, ...
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from importlib import resources


from pt2c.codegen.escape import c_comment, c_string
from pt2c.ir import Graph, Node, Value, ctype
from pt2c.ops import OPS
from pt2c.ops.util import lit
from pt2c.passes.memory import MemoryPlan
from pt2c.sym import DynamicSizeError, prod, upper

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


@functools.lru_cache(maxsize=1)
def kernel_params() -> dict[str, list[str]]:
    """Parameter names of every kernel function, read from the kernel sources' prototypes
    (`PT2C_KERNEL <type> pt2c_xxx(...)`): the C is the one place that names them."""
    params: dict[str, list[str]] = {}
    kdir = resources.files("pt2c.kernels")
    for f in sorted(p.name for p in kdir.iterdir() if p.name.endswith((".c", ".h"))):
        text = (kdir / f).read_text()
        for m in re.finditer(r"PT2C_KERNEL\s+[\w\s\*]*?\b(pt2c_\w+)\s*\(([^)]*)\)\s*\{", text):
            names = [re.findall(r"\w+", a)[-1] for a in m.group(2).split(",") if re.findall(r"\w+", a)]
            params.setdefault(m.group(1), names if names != ["void"] else [])
    return params


_CALL = re.compile(r"(?P<pre>if \()?(?P<fn>pt2c_\w+)\((?P<args>.*)\)(?P<post>\) return \w+;|;)(?P<rest>.*)")
_LITERAL = re.compile(r"-?(\d+\.?\d*(e[-+]?\d+)?f?u?|NULL|PT2C_ACT_\w+)")


def _split_args(args: str) -> list[str]:
    """Top-level comma-separated arguments of a C call."""
    out, depth, cur = [], 0, ""
    for ch in args:
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


def named_args(stmt: str, indent: int = 0, width: int = 110) -> str:
    """A kernel call statement (`pt2c_f(...);` or `if (pt2c_f(...)) return STATUS;`) with every literal
    argument named after the kernel's parameter (`pt2c_sgemm(c, /*ldc=*/96, a, ...)`), wrapped at `width`
    columns; other lines unchanged."""
    m = _CALL.fullmatch(stmt)
    names = kernel_params().get(m.group("fn")) if m else None
    if m is None or names is None or bool(m.group("pre")) != (m.group("post") != ";"):
        return stmt
    args = _split_args(m.group("args"))
    if len(args) != len(names):
        return stmt
    args = [f"/*{n}=*/{a}" if _LITERAL.fullmatch(a) else a for n, a in zip(names, args)]
    head, tail = f"{m.group('pre') or ''}{m.group('fn')}(", f"){m.group('post')}{m.group('rest')}"
    lines, cur = [], head
    for i, a in enumerate(args):
        piece = a + (", " if i < len(args) - 1 else "")
        if len(cur) + len(piece.rstrip()) + indent > width and cur.strip() != head:
            lines.append(cur.rstrip())
            cur = " " * len(head) + piece
        else:
            cur += piece
    lines.append(cur.rstrip() + tail)
    return ("\n" + " " * indent).join(lines)


def loop_indices(shape: tuple[int, ...], operands: list[tuple[str, tuple[int, ...], int]]
                 ) -> tuple[list[int], list[str], list[str]]:
    """A strided loop nest over `shape` with dims merged where every operand allows (collapse): its sizes, its
    index names and each operand's C index expression (operands: (pointer, strides, element offset))."""
    sizes, strides = collapse(tuple(shape), [st for _, st, _ in operands])
    names = ["i"] if len(sizes) == 1 else [f"i{d}" for d in range(len(sizes))]
    idx = []
    for (_, _, off), st in zip(operands, strides):
        terms = [f"{names[d]}" if s == 1 else f"{names[d]} * {s}" for d, s in enumerate(st) if s != 0]
        if off:
            terms.append(str(off))
        idx.append(" + ".join(terms) if terms else "0")
    return sizes, names, idx


def node_comment(node: Node) -> list[str]:
    """A node's C comment: module path (and type), what it does, its output, the PyTorch source line; a fused
    node: the comment of each node it runs, with its note."""
    op = OPS[node.op]
    if op.parts is not None:
        lines: list[str] = []
        for part, note in op.parts(node):
            c = node_comment(part)
            c[0] += note
            lines += c
        return lines
    o = node.origin
    what = op.describe(node) if op.describe is not None else node.op
    loc = o.module_path or "<top>"
    if o.module_type:
        loc += f" ({o.module_type.rsplit('.', 1)[-1]})"
    res = node.outputs[0] if node.outputs else node.inputs[-1]  # (state_write: the state it writes)
    lines = [f"/* {c_comment(loc)}: {c_comment(what)} -> {res.dtype}{list(res.shape)}"]
    if o.source:
        lines.append(f" * {c_comment(o.source)}")
    lines[-1] += " */"
    return lines


class Emitter:
    def __init__(self, g: Graph, plan: MemoryPlan, const_offsets: dict[int, int]):
        self.g = g
        self.plan = plan
        self.const_offsets = const_offsets
        self.lines: list[str] = []
        self.indent = 1
        self.declared: dict[int, str] = {}
        self.errors: set[str] = set()
        self.uses_scratch = False

    # ------------------------------------------------------------ primitives
    def line(self, s: str) -> None:
        self.lines.append("    " * self.indent + s if s else "")

    @staticmethod
    def flt(x: float) -> str:
        return lit("float32", x)

    def is_readonly(self, v: Value) -> bool:
        r = self.plan.root(v)
        return r.is_const or self.plan.storage.get(id(r)) is not None and self.plan.storage[id(r)].kind == "input"

    @staticmethod
    def string(text: str) -> str:
        return c_string(text)

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
            elif st.kind == "state":
                expr = f"({t} *)(ws + {st.offset})"
            else:
                expr = f"({t} *)(ws + {st.offset})"
        self.line(f"{q}{t} *{v.name} = {expr};")
        self.declared[id(v)] = v.name

    def scratch(self, node: Node) -> str:
        """The kernels' scratch region (after the tensor arena), declared once at the top of the run."""
        self.uses_scratch = True
        return "scratch"

    # ------------------------------------------------------------ strided loops
    def strided_loop(self, shape: tuple[int, ...], operands: list[tuple[str, tuple[int, ...], int]],
                     body: Callable[[list[str]], str]) -> None:
        """Nested loops over `shape`; operands are (pointer, strides, element offset), the first is written.
        body(list of C index expressions, one per operand) -> C statement."""
        numel = prod(shape)
        if numel == 0:
            return
        sizes, names, idx = loop_indices(shape, operands)
        rank = len(sizes)
        if upper(numel) >= PARALLEL_MIN and upper(sizes[0]) > 1:  # (dynamic sizes: at their largest)
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

    # ------------------------------------------------------------ whole graph
    @staticmethod
    def node_comment(node: Node) -> list[str]:
        return node_comment(node)

    def block(self, g: Graph, results_to: list[Value],
              after: Callable[[list[str]], list[str]] | None = None) -> None:
        """A control-flow block's nodes, one level deeper (the caller writes the braces around them), then
        its results copied into results_to, then the statements after(result pointers).  Pointers declared
        in the block stay in it."""
        saved = dict(self.declared)
        self.indent += 1
        self.emit_nodes(g.nodes)
        ptrs = [self.ptr(v) for v in g.outputs]
        if results_to:
            self.line("")
        for v, p in zip(results_to, ptrs):
            self.line(f"memcpy({self.ptr(v)}, {p}, {v.nbytes});")
        for stmt in after(ptrs) if after is not None else []:
            self.line(stmt)
        self.indent -= 1
        self.declared = saved

    def emit_graph(self) -> list[str]:
        self.emit_nodes(self.g.nodes)
        # kernel calls with named literal arguments, wrapped at their final indentation
        self.lines = [ln[:len(ln) - len(ln.lstrip())] + named_args(ln.lstrip(), len(ln) - len(ln.lstrip()))
                      for ln in self.lines]
        dims = self.g.meta.get("dims")
        if dims:  # the run-time sizes the body uses
            text = "\n".join(self.lines)
            for i, d in reversed(list(enumerate(dims.dims))):
                if re.search(rf"\b{d.cname}\b", text):
                    self.lines.insert(0, f"    const size_t {d.cname} = (size_t)sizes[{i}]; /* {c_comment(d.where)}, "
                                         f"{d.lo}..{d.hi} */")
        if self.uses_scratch:
            self.lines.insert(0, f"    float *scratch = (float *)(ws + {self.plan.arena_bytes}); "
                                 "/* kernel scratch: GEMM packing, im2col, attention tiles */")
        return self.lines

    def emit_nodes(self, nodes: list[Node]) -> None:
        for n in nodes:
            if OPS[n.op].alias or n.op == "state":
                continue  # views and state: a pointer, declared where first used
            self.line("")
            for c in self.node_comment(n):
                self.line(c)
            # declare pointers outside the block so later nodes see them
            for v in n.inputs + n.outputs:
                self.ptr(v)
            self.line("{")
            self.indent += 1
            start = len(self.lines)
            try:
                OPS[n.op].emit(self, n)
            except DynamicSizeError as e:
                raise DynamicSizeError(f"{e}: the C of op {n.op} ({n.origin.describe()}) needs it static") from e
            self.indent -= 1
            if len(self.lines) == start + 1 and not self.lines[start].strip().startswith(("pt2c_epilogue", "for", "PT2C")):
                # a single statement needs no block
                stmt = self.lines.pop().strip()
                self.lines.pop()  # the "{"
                self.line(stmt)
            else:
                self.line("}")
