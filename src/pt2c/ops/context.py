"""What an op sees of the stages around it: `LowerCtx` (frontend/lower.py's LowerCtx, given to
every lowering function) and `EmitCtx` (codegen/emitter.py's Emitter, given to every emit
function).  Protocols only, for type checkers and readers: ops depend on these, not on the
frontend or codegen modules (tests/test_imports.py checks that the real classes have every
member)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import numpy as np

from pt2c.ir import Graph, Node, Value


class LowerCtx(Protocol):
    """One FX node being lowered: its outputs, and ways to add IR."""

    target: str  # the ATen overload, e.g. "aten.add.Tensor"
    node: Any  # the torch.fx.Node (for its users and metadata)

    def outs(self) -> list[Value]:
        """The node's outputs as declared by its FX metadata (None for a non-tensor output)."""
        ...

    def out(self) -> Value:
        """outs()[0]."""
        ...

    def new(self, hint: str, shape: tuple[int, ...], dtype: str) -> Value:
        """A fresh intermediate value, named after the node and `hint`."""
        ...

    def size(self, x: Any) -> Any:
        """A size from the export (an int, or a torch SymInt of a dynamic shape) as an int or a pt2c.sym.Sym."""
        ...

    def const(self, data: np.ndarray, hint: str) -> Value:
        """A compile-time constant (stored in the weights blob unless folded away)."""
        ...

    def emit(self, op: str, inputs: list[Value], attrs: dict[str, Any], outputs: list[Value]) -> Node | None:
        """Add an IR node (evaluated at compile time instead when every input is a constant)."""
        ...

    def fail(self, why: str) -> NoReturn:
        """Give up on this node: reported with every other unsupported node, `why` quoted."""
        ...

    def view(self, x: Value, shape: tuple[int, ...], out: Value | None = None) -> Value:
        """x reshaped (an alias: no copy)."""
        ...

    def transpose(self, w: Value) -> Value:
        """2-D transpose (a strided view; folded when w is a constant)."""
        ...


class EmitCtx(Protocol):
    """The C writer for the graph body."""

    errors: set[str]  # error codes the generated code may return ("INDEX": PT2C_ERR_INDEX)

    def line(self, s: str) -> None:
        """Append one C line at the current indentation."""
        ...

    def flt(self, x: float) -> str:
        """A float32 C literal."""
        ...

    def string(self, text: str) -> str:
        """text as a C string literal (codegen/escape.py: c_string, the one escaping function)."""
        ...

    def ptr(self, v: Value) -> str:
        """The C pointer naming v's storage (declared on first use)."""
        ...

    def block(self, g: Graph, results_to: list[Value], after: Callable[[list[str]], list[str]] | None = None) -> None:
        """A control-flow block's nodes one level deeper (the caller writes the braces), its results copied
        into results_to, then the statements after(result pointers)."""
        ...

    def scratch(self, node: Node) -> str:
        """The C expression of the kernel scratch region (sized by the op's `scratch`)."""
        ...

    def strided_loop(self, shape: tuple[int, ...], operands: list[tuple[str, tuple[int, ...], int]],
                     body: Callable[[list[str]], str]) -> None:
        """Nested loops over `shape`; operands are (pointer, strides, element offset), the first is
        written; body(one C index expression per operand) -> the C statement of the innermost loop."""
        ...
