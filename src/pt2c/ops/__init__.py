"""The op set.  Each op is defined in ONE place: its ATen target(s) and how they lower to
the IR, its numpy reference, its C emission and the kernel files it needs.

An `OpDef` describes an IR op; `@lowers(*aten_targets)` registers the function that turns
an FX node calling those ATen targets into IR nodes.
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
    emit: Callable[..., None]  # emit(emitter, node) -> None: writes C statements
    kernels: tuple[str, ...] = ()  # kernel files (pt2c/kernels/<f>.c) the emission calls into
    alias: bool = False  # output 0 is a view of input 0's storage (no copy, no code)
    scratch: Callable[[Node], int] | None = None  # scratch bytes needed while it runs
    scratch_c: Callable[[Node], str] | None = None  # the same as a C expression (checked at init)
    flops: Callable[[Node], int] | None = None


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


# Import the op modules for their registrations.
from pt2c.ops import creation, elementwise, linalg, nn, shape  # noqa: F401
from pt2c.ops import extra  # noqa: F401,E402
from pt2c.ops import more  # noqa: F401,E402
