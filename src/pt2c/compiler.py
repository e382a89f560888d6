"""The compile driver: load -> decompose -> lower -> optimize -> plan -> write."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pt2c.codegen.cwriter import Artifact, write_artifact
from pt2c.frontend.load import decompose, load_program
from pt2c.frontend.lower import lower
from pt2c.ir import Graph
from pt2c.passes import optimize
from pt2c.targets import get_targets


def default_name(model: Any) -> str:
    if isinstance(model, (str, Path)):
        base = Path(model).stem
    elif hasattr(model, "module") and not hasattr(model, "forward"):
        base = "model"
    else:
        base = type(model).__name__
    base = re.sub(r"[^A-Za-z0-9_]", "_", base).lower().strip("_") or "model"
    return base if not base[0].isdigit() else "m_" + base


def to_graph(model: Any, example_inputs: tuple | None = None, name: str = "model", opt_level: int = 1,
             winograd: bool = True) -> tuple[Graph, dict]:
    ep, prov = load_program(model, example_inputs)
    ep = decompose(ep)
    g = lower(ep, name)
    g.meta["winograd"] = winograd and opt_level > 0  # read by passes/prepack.py
    return optimize(g, level=opt_level), prov


def compile_program(model: Any, out_dir: Any, *, example_inputs: tuple | None = None, target: str = "generic",
                    name: str | None = None, embed_weights: bool = False, openmp: bool = True, opt_level: int = 1,
                    command: str = "", freestanding: bool = False, winograd: bool | None = None) -> Artifact:
    tgts = get_targets(target)  # several x86-64 levels: one code path each, chosen at init
    # freestanding (bare metal; implied by a freestanding preset such as cortex-m): the library must need no
    # malloc, stdio, threads or files, so the weights are embedded as a const array and OpenMP is off.
    freestanding = bool(freestanding or tgts[0].freestanding)
    if freestanding:
        embed_weights, openmp = True, False
    name = name or default_name(model)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"model name {name!r} must be a C identifier (it prefixes every symbol)")
    # Winograd 3x3 convolutions hold 4x the weights of those layers: off by default where flash is scarce
    g, prov = to_graph(model, example_inputs, name, opt_level, winograd=not freestanding if winograd is None else winograd)
    return write_artifact(g, Path(out_dir), tgts[0], embed_weights=embed_weights, openmp=openmp, provenance=prov,
                          command=command, variants=tgts[1:], freestanding=freestanding)
