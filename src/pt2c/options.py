"""Compile options: everything a compile was asked for, in one explicit object.

`compiler.compile_program` builds a `CompileOptions` once from `pt2c.compile`'s keyword arguments
(the implications resolved: a freestanding target embeds the weights and turns OpenMP and, by
default, Winograd off) and passes it to what needs it: `to_graph` / `passes.optimize` (opt_level,
winograd) and `codegen.cwriter.write_artifact` (targets, name, embed_weights, openmp,
freestanding, command).  Nothing travels in `Graph.meta`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pt2c.errors import InputError

from pt2c.targets import Target, get_targets


def _generic() -> tuple[Target, ...]:
    return tuple(get_targets("generic"))


@dataclass(frozen=True)
class CompileOptions:
    # the baseline preset (what <name>.c is built for) first, then the extra x86-64 levels, each its own
    # <name>_<level>.c chosen at init when the CPU has it (multi-versioning)
    targets: tuple[Target, ...] = field(default_factory=_generic)
    name: str = "model"  # C symbol prefix and file name stem (a checked C identifier)
    opt_level: int = 1  # 0: only the passes codegen needs (dce, algorithm choice, prepacking)
    winograd: bool = True  # 3x3 stride-1 convolutions by Winograd F(4x4, 3x3) (at opt_level >= 1)
    embed_weights: bool = False  # weights as a C array in <name>.c instead of <name>.weights
    openmp: bool = True
    freestanding: bool = False  # bare metal: no malloc, stdio, threads or files in the library
    force: bool = False  # write into any folder (codegen/outdir.py)
    command: str = ""  # the command line recorded in <name>.c's header
    kernels: tuple[Any, ...] = ()  # users' C kernels for custom ops (custom.KernelSpec), later ones win
    decompose: tuple[str, ...] = ()  # custom ops to replace by their Python implementation ("ns::op")
    # upper bounds for dims the export left unbounded: (("ids:1", 512), ("*", 64)): "input:dim", or "*" for all
    max_sizes: tuple[tuple[str, int], ...] = ()

    @property
    def target(self) -> Target:
        """The baseline target."""
        return self.targets[0]

    @property
    def variants(self) -> tuple[Target, ...]:
        """The extra x86-64 levels (multi-versioning)."""
        return self.targets[1:]

    @property
    def use_winograd(self) -> bool:
        """Whether the algorithm pass may choose Winograd (it is an optimisation: off at opt_level 0)."""
        return self.winograd and self.opt_level > 0

    @classmethod
    def resolve(cls, *, target: str | Target = "generic", name: str = "model", embed_weights: bool = False,
                openmp: bool = True, opt_level: int = 1, command: str = "", freestanding: bool = False,
                winograd: bool | None = None, force: bool = False, kernels: Any = None,
                decompose: Any = (), max_sizes: Any = None) -> CompileOptions:
        """The options of a `pt2c.compile(...)` call: the target spec parsed (several x86-64 levels: one
        code path each, chosen at init), and what freestanding implies."""
        targets = tuple(get_targets(target))
        # freestanding (bare metal; implied by a freestanding preset such as cortex-m): the library must need no
        # malloc, stdio, threads or files, so the weights are embedded as a const array and OpenMP is off.
        if targets[0].is_gpu and (embed_weights or freestanding):
            raise ValueError(f"target {targets[0].name}: GPU artifacts load their weights from <name>.weights "
                             "(embed_weights / freestanding are CPU options)")
        freestanding = bool(freestanding or targets[0].freestanding)
        if freestanding:
            embed_weights, openmp = True, False
        # Winograd 3x3 convolutions hold 4x the weights of those layers: off by default where flash is scarce
        winograd = not freestanding if winograd is None else bool(winograd)
        from pt2c.custom import resolve_kernels

        return cls(targets, name, opt_level, winograd, embed_weights, openmp, freestanding, force, command,
                   tuple(resolve_kernels(kernels).values()), tuple(decompose), parse_max_sizes(max_sizes))


def parse_max_sizes(spec: Any) -> tuple[tuple[str, int], ...]:
    """Upper bounds for unbounded dynamic dims: an int (every one), a dict {"input:dim" or "*": int}, or CLI
    strings ["ids:1=512", "64"].  InputError for anything else."""
    if spec is None:
        return ()
    items = [("*", spec)] if isinstance(spec, int) else list(spec.items()) if isinstance(spec, dict) else [
        tuple(x.split("=", 1)) if "=" in str(x) else ("*", x) for x in spec]
    out = []
    for key, n in items:
        try:
            n = int(n)
        except (TypeError, ValueError):
            n = 0
        if n < 1 or not (key == "*" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*:[0-9]+", str(key))):
            raise InputError(f"max size {key!r}={n!r}: give INPUT:DIM=N (e.g. ids:1=512) or N for every unbounded "
                             "dim, N >= 1")
        out.append((str(key), n))
    return tuple(out)
