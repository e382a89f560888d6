"""The pt2c IR: three small types (Value, Node, Graph), and the memory plan of a graph (Buffer,
MemoryPlan).  The verifier and the reference interpreter, which need the op set, are
`pt2c.ops.verify` and `pt2c.ops.eval_graph`.

Shapes are tuples of sizes: ints, or `pt2c.sym.Sym` for a dim the export declared dynamic.  Constants (weights, folded tensors) are Values that
carry their numpy data.  Every Node names the PyTorch code it came from (`Origin`), so
errors and generated comments can point back at the user's model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from pt2c.sym import Sym, prod, upper

# dtype name -> (C type, numpy dtype)
DTYPES: dict[str, tuple[str, Any]] = {
    "float32": ("float", np.float32),
    "float64": ("double", np.float64),
    "int64": ("int64_t", np.int64),
    "int32": ("int32_t", np.int32),
    "int16": ("int16_t", np.int16),
    "int8": ("int8_t", np.int8),
    "uint8": ("uint8_t", np.uint8),
    "bool": ("uint8_t", np.bool_),
    # reduced precision: storage only (the model's inputs and outputs); compute is float32 (see
    # frontend/lower.py: REDUCED).  C has no 16-bit float type: the bits travel as uint16_t.  numpy
    # has no bfloat16: its arrays hold the bits as uint16.
    "bfloat16": ("uint16_t", np.uint16),
    "float16": ("uint16_t", np.float16),
}

# dtype codes shared with the C API descriptor table and the Python runner
DTYPE_CODES = {name: i for i, name in enumerate(DTYPES)}


def ctype(dtype: str) -> str:
    return DTYPES[dtype][0]


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(DTYPES[dtype][1])


def itemsize(dtype: str) -> int:
    return np_dtype(dtype).itemsize


@dataclass(frozen=True)
class Origin:
    """Where a node came from in the user's PyTorch code."""

    fx_name: str = ""
    module_path: str = ""  # e.g. "layer1.0.conv1"
    module_type: str = ""  # e.g. "torch.nn.modules.conv.Conv2d"
    source: str = ""  # e.g. "model.py:42: return self.conv1(x)"

    def describe(self) -> str:
        parts = [f"node '{self.fx_name}'"] if self.fx_name else []
        if self.module_path:
            parts.append(f"module '{self.module_path}'" + (f" ({self.module_type.rsplit('.', 1)[-1]})" if self.module_type else ""))
        if self.source:
            parts.append(f"at {self.source}")
        return ", ".join(parts) or "<unknown location>"


class Value:
    """A tensor: a name (a C identifier), a static shape and a dtype; constants carry data."""

    __slots__ = ("data", "dtype", "name", "producer", "shape")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, data: np.ndarray | None = None):
        if dtype not in DTYPES:
            raise ValueError(f"unsupported dtype {dtype!r} for value {name!r}")
        self.name = name
        self.shape = tuple(s if isinstance(s, Sym) else int(s) for s in shape)
        self.dtype = dtype
        self.data = data
        self.producer: Node | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def numel(self) -> int | Sym:
        return prod(self.shape)

    @property
    def nbytes(self) -> int | Sym:
        return self.numel * itemsize(self.dtype)

    @property
    def max_nbytes(self) -> int:
        """nbytes at the dims' upper bounds (what the memory plan reserves)."""
        return upper(self.nbytes)

    def __repr__(self) -> str:
        kind = "const " if self.is_const else ""
        return f"%{self.name}: {kind}{self.dtype}{list(self.shape)}"


@dataclass(eq=False)
class Node:
    """One operation: op name (see pt2c.ops), input Values, attributes, output Values."""

    op: str
    inputs: list[Value]
    attrs: dict[str, Any]
    outputs: list[Value]
    origin: Origin = field(default_factory=Origin)
    # control flow (ops cond, while_loop): the graphs the node runs.  A block's inputs are the outer
    # values it reads (captured, also in the node's inputs), its outputs the results the node copies out.
    blocks: list[Graph] = field(default_factory=list)

    def __post_init__(self) -> None:
        for v in self.outputs:
            v.producer = self

    def __repr__(self) -> str:
        outs = ", ".join(repr(v) for v in self.outputs)
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items() if not k.startswith("_"))
        return f"{outs} = {self.op}({ins}{', ' if attrs and ins else ''}{attrs})"


@dataclass(eq=False)
class Graph:
    name: str
    inputs: list[Value]
    nodes: list[Node]
    outputs: list[Value]
    meta: dict[str, Any] = field(default_factory=dict)

    def constants(self) -> list[Value]:
        """Constant Values used by nodes (those of control-flow blocks too) or outputs, in first-use order."""
        seen: dict[int, Value] = {}
        for g in [self, *(b for n in walk(self) for b in n.blocks)]:
            for n in g.nodes:
                for v in n.inputs:
                    if v.is_const and id(v) not in seen:
                        seen[id(v)] = v
            for v in g.outputs:
                if v.is_const and id(v) not in seen:
                    seen[id(v)] = v
        return list(seen.values())

    def users(self) -> dict[int, list[Node]]:
        """id(Value) -> nodes that read it."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(id(v), []).append(n)
        return out

    def __str__(self) -> str:
        lines = [f"graph {self.name}(" + ", ".join(repr(v) for v in self.inputs) + ") {"]
        lines += [f"  {n!r}" for n in self.nodes]
        lines.append("  return " + ", ".join(f"%{v.name}" for v in self.outputs))
        lines.append("}")
        return "\n".join(lines)


def walk(g: Graph) -> list[Node]:
    """Every node of the graph in program order, the nodes of control-flow blocks after their node."""
    out: list[Node] = []
    for n in g.nodes:
        out.append(n)
        for b in n.blocks:
            out += walk(b)
    return out


# control-flow ops whose blocks read the node's own outputs (the loop state)
LOOPS = ("while_loop", "scan")


def captured(nodes: list[Node]) -> list[Value]:
    """The outer values a node list reads: non-constant inputs it does not define (through nested blocks
    too), in first-use order."""
    defined: set[int] = set()
    out: dict[int, Value] = {}
    for n in nodes:
        if n.op in LOOPS:
            defined.update(id(v) for v in n.outputs)
        for v in n.inputs + [u for b in n.blocks for u in b.inputs]:
            if not v.is_const and id(v) not in defined:
                out.setdefault(id(v), v)
        defined.update(id(v) for v in n.outputs)
    return list(out.values())


def schedule(g: Graph) -> list[tuple[Node, str]]:
    """The graph's nodes as the C runs them, for lifetimes: (node, "run") for a plain node; a control-flow
    node is (node, "begin") (its inputs read, its outputs' first write: a loop's state), its blocks'
    schedules, then (node, "end") (its inputs read again: a loop re-reads them; the blocks' results)."""
    out: list[tuple[Node, str]] = []
    for n in g.nodes:
        if not n.blocks:
            out.append((n, "run"))
            continue
        out.append((n, "begin"))
        for b in n.blocks:
            out += schedule(b)
        out.append((n, "end"))
    return out


def reads(n: Node, when: str) -> list[Value]:
    """The values a schedule entry reads: a node's inputs; at a control node's end also its blocks' results
    and its own outputs (a loop's state is read and written until the loop ends)."""
    return n.inputs + [v for b in n.blocks for v in b.outputs] + n.outputs if when == "end" else n.inputs


@dataclass(frozen=True)
class Buffer:
    """Where a root value (one that is not a view) lives: the caller's input or output buffer `index`, or
    `nbytes` (aligned) at byte `offset` of the workspace arena, live from node `first` (its write) to
    node `last` (its last read, through any view), both included."""

    kind: str  # "input" | "output" | "arena" | "state" (a mutated buffer: after the arena and scratch)
    index: int = 0
    offset: int = 0
    nbytes: int = 0
    first: int = 0
    last: int = 0


@dataclass
class MemoryPlan:
    """A graph's memory plan (passes/memory.py: plan_memory), in plain data keyed by value name, which
    `pt2c.ops.verify(graph, plan)` checks: every value that is not a view or a constant has a buffer,
    every view its root, and no two arena buffers live at the same node share a byte."""

    buffers: dict[str, Buffer]  # root value name -> where it lives
    aliases: dict[str, tuple[str, int]]  # view value name -> (root value name, element offset in the root)
    arena_bytes: int = 0
    scratch_bytes: int = 0  # kernel scratch, one region after the arena
    state_bytes: int = 0  # the program's mutated buffers, after the scratch (kept from run to run)
    lower_bound: int = 0  # peak of simultaneously live (aligned) arena bytes
    align: int = 64
    # the Values the names stand for (the emitter asks by Value); not part of the plan's data
    values: dict[str, Value] = field(default_factory=dict, repr=False, compare=False)

    def root(self, v: Value) -> Value:
        """The value whose storage v uses (v itself unless v is a view)."""
        a = self.aliases.get(v.name)
        return v if a is None else self.values[a[0]]

    @cached_property
    def storage(self) -> dict[int, Buffer]:
        """id(root Value) -> its buffer."""
        return {id(self.values[k]): b for k, b in self.buffers.items()}

    @cached_property
    def elem_offset(self) -> dict[int, int]:
        """id(view Value) -> its element offset in its root."""
        return {id(self.values[k]): off for k, (_, off) in self.aliases.items()}

    @property
    def workspace_bytes(self) -> int:
        return self.arena_bytes + self.scratch_bytes + self.state_bytes


class VerifyError(Exception):
    """A graph that breaks the IR's rules (pt2c.ops.verify, pt2c.ops.eval_graph)."""


def clone(g: Graph) -> Graph:
    """A copy of the graph with new Values and Nodes (constants' data and attrs' contents shared): what a pass
    that may give up part-way (a dynamic size it cannot decide on) runs on the original of."""
    vals: dict[int, Value] = {}

    def val(v: Value) -> Value:
        if id(v) not in vals:
            vals[id(v)] = Value(v.name, v.shape, v.dtype, v.data)
        return vals[id(v)]

    def graph(b: Graph) -> Graph:
        ins = [val(v) for v in b.inputs]
        nodes = [Node(n.op, [val(v) for v in n.inputs], dict(n.attrs), [val(v) for v in n.outputs], n.origin,
                      [graph(x) for x in n.blocks]) for n in b.nodes]
        return Graph(b.name, ins, nodes, [val(v) for v in b.outputs], dict(b.meta))

    return graph(g)
