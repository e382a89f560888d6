"""The pt2c IR: three small types (Value, Node, Graph).  The verifier and the reference interpreter,
which need the op set, are `pt2c.ops.verify` and `pt2c.ops.eval_graph`.

Shapes are static (tuples of ints).  Constants (weights, folded tensors) are Values that
carry their numpy data.  Every Node names the PyTorch code it came from (`Origin`), so
errors and generated comments can point back at the user's model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.data = data
        self.producer: Node | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * itemsize(self.dtype)

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
        """Constant Values used by nodes or outputs, in first-use order."""
        seen: dict[int, Value] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v.is_const and id(v) not in seen:
                    seen[id(v)] = v
        for v in self.outputs:
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


class VerifyError(Exception):
    """A graph that breaks the IR's rules (pt2c.ops.verify, pt2c.ops.eval_graph)."""
