"""The op registry: `OpDef` (an IR op), `defop`, `@lowers` and the tables they fill.

A leaf module: the family modules register into these tables; `pt2c.ops` re-exports them and
imports every family, so `from pt2c.ops import OPS` always sees the whole op set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pt2c.ir import Node


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


OPS: dict[str, OpDef] = {}
LOWERINGS: dict[str, Callable[..., Any]] = {}  # str(aten overload) -> lowering function
UNSUPPORTED: dict[str, str] = {}  # str(aten overload) pt2c does not lower -> why (error text, docs/ops.md)


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


def lowers(*targets: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a lowering for ATen targets given as strings like 'aten.add.Tensor'."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for t in targets:
            if t in LOWERINGS:
                raise ValueError(f"two lowerings for {t}")
            LOWERINGS[t] = fn
        return fn

    return deco
