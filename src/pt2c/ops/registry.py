"""The op registry: `OpDef` (an IR op), `defop`, `@lowers` and the tables they fill, and `eval_graph` (a
graph run with the ops' numpy references; control-flow ops run their blocks with it).

A leaf module: the family modules register into these tables; `pt2c.ops` re-exports them and
imports every family, so `from pt2c.ops import OPS` always sees the whole op set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pt2c.ir import Graph, VerifyError, np_dtype
from pt2c.sym import Sym

if TYPE_CHECKING:
    from pt2c.ir import Node, Value


@dataclass
class OpDef:
    name: str
    ref: Callable[..., Any]  # ref(node, *input_arrays) -> array | list[array]
    emit: Callable[..., None]  # emit(em: EmitCtx, node) -> None: writes C statements
    kernels: tuple[str, ...] = ()  # kernel files (pt2c/kernels/<f>.c) the emission calls into
    alias: bool = False  # output 0 is a view of input 0's storage (no copy, no code)
    scratch: Callable[[Node], int] | None = None  # scratch bytes needed while it runs
    scratch_c: Callable[[Node], str] | None = None  # the same as a C expression (checked at init)
    flops: Callable[[Node], int] | None = None
    describe: Callable[[Node], str] | None = None  # what the node's C comment says it does (default: the op name)
    # a fused node: the nodes it runs, each commented as itself followed by a note
    parts: Callable[[Node], list[tuple[Node, str]]] | None = None
    # the op's shape / dtype / attribute rule: raises VerifyError (through `need`) for a node it rejects
    rule: Callable[[Node], None] | None = None

    def check(self, node: Node) -> None:
        """The node against this op's rule: attrs plain data, input / output counts, dtypes, shapes.
        Raises VerifyError naming the op, what is wrong and the node (ops.verify runs it on every node)."""
        try:
            bad = non_plain(node.attrs)
            need(bad is None, f"attr {bad} is not plain data (None, bool, int, float, str, tuple / list / dict of those)")
            need(self.rule is not None, "the op has no check rule")
            self.rule(node)  # type: ignore[misc]
        except VerifyError as e:
            raise VerifyError(f"op {self.name}: {e} in {node!r}") from None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:  # a missing or malformed attr
            raise VerifyError(f"op {self.name}: malformed node ({type(e).__name__}: {e}) in {node!r}") from None


OPS: dict[str, OpDef] = {}
LOWERINGS: dict[str, Callable[..., Any]] = {}  # str(aten overload) -> lowering function
UNSUPPORTED: dict[str, str] = {}  # str(aten overload) pt2c does not lower -> why (error text, docs/ops.md)
# the reason given for a training-only op (each family lists its own backward ops in UNSUPPORTED)
BACKWARD = "backward (training) op: pt2c compiles inference programs; export the forward pass only"


def core_aten_ops() -> list[str]:
    """Every ATen overload the installed torch tags `core` (str form, e.g. "aten.add.Tensor"),
    from the dispatcher's full op list (torch.ops.aten only lists the packets touched so far)."""
    import torch

    core = set()
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        name, _, overload = full[len("aten::"):].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, name), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in op.tags:
            core.add(str(op))
    return sorted(core)


def defop(name: str, ref: Callable[..., Any], emit: Callable[..., None], **kw: Any) -> OpDef:
    if name in OPS:
        raise ValueError(f"op {name!r} defined twice")
    OPS[name] = OpDef(name, ref, emit, **kw)
    return OPS[name]


# ---------------------------------------------------------------- what check rules are written with

PLAIN_SCALARS = (type(None), bool, int, float, str)


def non_plain(x: Any, path: str = "") -> str | None:
    """Where x holds something other than plain data (None, bool, int, float, str, and tuples, lists
    and str-keyed dicts of those): a path and type name such as "_pw: Node", or None.  Exact types, so
    numpy scalars (np.float64 is a float subclass), arrays, Values and Nodes are all refused."""
    t = type(x)
    if t in PLAIN_SCALARS or t is Sym:  # (a Sym: an immutable size expression)
        return None
    if t in (tuple, list):
        for i, v in enumerate(x):
            if (bad := non_plain(v, f"{path}[{i}]")) is not None:
                return bad
        return None
    if t is dict:
        for k, v in x.items():
            if type(k) is not str:
                return f"{path}: dict key {k!r} ({type(k).__name__})"
            if (bad := non_plain(v, f"{path}.{k}" if path else k)) is not None:
                return bad
        return None
    return f"{path or 'attrs'}: {t.__name__}"


def need(cond: Any, what: str) -> None:
    """A check rule's assertion: VerifyError(what) unless cond."""
    if not cond:
        raise VerifyError(what)


INTS = ("int64", "int32", "int16", "int8", "uint8")


def arity(node: Node, n_in: int | Iterable[int], n_out: int = 1) -> None:
    """The node has n_in inputs (an int or the allowed counts) and n_out outputs."""
    allowed = (n_in,) if isinstance(n_in, int) else tuple(n_in)
    need(len(node.inputs) in allowed, f"{len(node.inputs)} inputs, expected {' or '.join(map(str, allowed))}")
    need(len(node.outputs) == n_out, f"{len(node.outputs)} outputs, expected {n_out}")


def dtype_in(v: Value, allowed: Iterable[str], what: str) -> None:
    allowed = tuple(allowed)
    need(v.dtype in allowed, f"{what} %{v.name} is {v.dtype}, expected {' / '.join(allowed)}")


def result(v: Value, shape: Iterable[int], dtype: str, what: str = "output") -> None:
    """v has the shape and dtype the rule computed from the inputs and attrs."""
    shape = tuple(s if isinstance(s, Sym) else int(s) for s in shape)
    need(v.shape == shape and v.dtype == dtype,
         f"{what} %{v.name} is {v.dtype}{list(v.shape)}, the inputs and attrs give {dtype}{list(shape)}")


def is_size(x: Any) -> bool:
    """x is a size: an int or a Sym (a dynamic size)."""
    return type(x) is int or type(x) is Sym


def ints(x: Any, n: int | None = None, lo: int | None = None) -> bool:
    """x is a tuple / list of n ints (any length for None), each >= lo when given."""
    return (type(x) in (tuple, list) and (n is None or len(x) == n)
            and all(type(i) in (int, Sym) and (lo is None or i >= lo) for i in x))


def broadcast(*shapes: Iterable[int]) -> tuple[int, ...]:
    """NumPy / PyTorch broadcasting of shapes; VerifyError if they do not broadcast."""
    shapes = [tuple(s) for s in shapes]
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, n in enumerate(s):
            d = rank - len(s) + i
            need(n == out[d] or n == 1 or out[d] == 1, f"shapes {[list(x) for x in shapes]} do not broadcast")
            out[d] = n if out[d] == 1 else out[d]
    return tuple(out)


def within(shape: Iterable[int], strides: Iterable[int], offset: int, numel: int, what: str) -> None:
    """A strided read (shape, element strides, element offset) stays inside a dense tensor of numel elements."""
    shape, strides = tuple(shape), tuple(strides)
    need(len(shape) == len(strides), f"{what}: {len(strides)} strides for a rank-{len(shape)} shape")
    if any(n == 0 for n in shape):
        return
    lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    need(0 <= lo and hi < numel, f"{what}: reads elements {lo}..{hi} of {numel}")


def lowers(*targets: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a lowering for ATen targets given as strings like 'aten.add.Tensor'."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for t in targets:
            if t in LOWERINGS:
                raise ValueError(f"two lowerings for {t}")
            LOWERINGS[t] = fn
        return fn

    return deco


def eval_graph(graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run the graph with each op's numpy reference; checks every result's shape and dtype."""
    env: dict[int, np.ndarray] = {}
    for v, x in zip(graph.inputs, inputs, strict=True):
        env[id(v)] = np.asarray(x)
    for n in graph.nodes:
        args = [v.data if v.is_const else env[id(v)] for v in n.inputs]
        results = OPS[n.op].ref(n, *args)
        if not isinstance(results, (list, tuple)):
            results = [results]
        for v, r in zip(n.outputs, results, strict=True):
            r = np.asarray(r)
            if tuple(r.shape) != v.shape:
                raise VerifyError(f"{n!r}: reference gives shape {r.shape} for %{v.name}, IR says {v.shape}")
            env[id(v)] = r.astype(np_dtype(v.dtype), copy=False)
    return [v.data if v.is_const else env[id(v)] for v in graph.outputs]
