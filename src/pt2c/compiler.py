"""The compile driver: load -> decompose -> lower -> optimize -> plan -> write."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pt2c.codegen.cwriter import Artifact, write_artifact
from pt2c.codegen.outdir import MAX_NAME_LEN, OutputFolder, check_name
from pt2c.errors import OutputError
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
    base = base if not base[0].isdigit() else "m_" + base
    return base[:MAX_NAME_LEN].rstrip("_")  # a long file stem is cut, not refused (an explicit name is checked)


def to_graph(model: Any, example_inputs: tuple | None = None, name: str = "model", opt_level: int = 1,
             winograd: bool = True) -> tuple[Graph, dict]:
    ep, prov = load_program(model, example_inputs)
    ep = decompose(ep)
    g = lower(ep, name)
    g.meta["winograd"] = winograd and opt_level > 0  # read by passes/prepack.py
    return optimize(g, level=opt_level), prov


def compile_program(model: Any, out_dir: Any, *, example_inputs: tuple | None = None, target: str = "generic",
                    name: str | None = None, embed_weights: bool = False, openmp: bool = True, opt_level: int = 1,
                    command: str = "", freestanding: bool = False, winograd: bool | None = None,
                    force: bool = False) -> Artifact:
    """out_dir: a new folder, an empty one, or one pt2c wrote before (else OutputError, checked before the
    compile starts; force=True writes into any folder, replacing only files of the names pt2c writes).
    The artifact is written into a staging folder and moved into place at the end: whatever fails,
    out_dir is left as it was (see codegen/outdir.py)."""
    tgts = get_targets(target)  # several x86-64 levels: one code path each, chosen at init
    # freestanding (bare metal; implied by a freestanding preset such as cortex-m): the library must need no
    # malloc, stdio, threads or files, so the weights are embedded as a const array and OpenMP is off.
    freestanding = bool(freestanding or tgts[0].freestanding)
    if freestanding:
        embed_weights, openmp = True, False
    name = check_name(name) if name else default_name(model)  # ModelNameError (a ValueError)
    with OutputFolder(out_dir, force=force) as out:  # OutputError now, before the slow part
        # Winograd 3x3 convolutions hold 4x the weights of those layers: off by default where flash is scarce
        g, prov = to_graph(model, example_inputs, name, opt_level,
                           winograd=not freestanding if winograd is None else winograd)
        try:
            art = write_artifact(g, out.staging, tgts[0], embed_weights=embed_weights, openmp=openmp,
                                 provenance=prov, command=command, variants=tgts[1:], freestanding=freestanding)
        except OSError as e:  # the staging folder: disk full, quota, ...
            raise OutputError(f"writing the artifact for {out.path} failed: {e}; nothing was written") from e
        out.commit()
    art.out_dir = Path(out_dir)
    return art
