"""The compile driver: load -> decompose -> lower -> optimize -> materialise outputs -> plan memory -> write,
with one CompileOptions built here and passed to every stage that needs it."""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

from pt2c.codegen.cwriter import Artifact, write_artifact
from pt2c.codegen.gpu_host import write_gpu_artifact
from pt2c.codegen.outdir import MAX_NAME_LEN, OutputFolder, check_name
from pt2c.errors import OutputError, Pt2cError
from pt2c.frontend.load import decompose, load_program
from pt2c.frontend.lower import lower
from pt2c.ir import Graph
from pt2c.options import CompileOptions
from pt2c.passes import finish, optimize
from pt2c.sym import DynamicSizeError


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


def load(model: Any, example_inputs: tuple | None = None, options: CompileOptions | None = None,
         example_kwargs: dict | None = None, progress: Callable[[str], None] | None = None) -> tuple[Any, dict]:
    """The decomposed ExportedProgram of a model and its provenance."""
    step = progress or (lambda s: None)
    step("loading")
    ep, prov = load_program(model, example_inputs, example_kwargs=example_kwargs)
    step("decomposing")
    return decompose(ep, (options or CompileOptions()).decompose), prov


def lower_program(ep: Any, options: CompileOptions, progress: Callable[[str], None] | None = None,
                  dynamic: bool = True) -> Graph:
    """The IR of a decomposed program.  dynamic: the export's dynamic dims stay symbolic (else they are
    compiled at the example's sizes)."""
    if progress:
        progress("lowering")
    return lower(ep, options.name, {k.function: k for k in options.kernels}, dynamic=dynamic,
                 max_sizes=options.max_sizes)


def optimized(g: Graph, options: CompileOptions, progress: Callable[[str], None] | None = None) -> Graph:
    if progress:
        progress("optimizing")
    return optimize(g, options)


def dynamic_failure(e: Exception) -> str:
    """Why a dynamic compile fell back to the example's sizes: a size it needed static (DynamicSizeError), or a
    bug of pt2c's dynamic path, reported in the warning.  An error of the program itself (an unsupported op,
    a bad input) is raised: the example's sizes would meet it too."""
    if isinstance(e, DynamicSizeError):
        return str(e)
    if isinstance(e, Pt2cError) or not isinstance(e, Exception):
        raise e
    return (f"pt2c's dynamic-size path failed ({type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            "; please report it)")


def warn_specialized(prov: dict, why: str, asked: bool = False) -> None:
    """The warning of a program compiled at the example's sizes though it declares dynamic ones."""
    if os.environ.get("PT2C_REQUIRE_DYNAMIC") and not asked:
        raise DynamicSizeError(why)  # tests: a dynamic compile that fell back is a failure
    dims = "; ".join(f"input '{d['input']}' dim {d['dim']} ({d['symbol']} in [{d['min']}, {d['max']}]) -> {d['size']}"
                     for d in prov["specialized"][:8])
    warnings.warn(f"the program declares dynamic sizes, and pt2c compiles them at the example's sizes ({dims}) "
                  f"because {why}; the artifact takes exactly those sizes (manifest.json: \"specialized\").\n"
                  "What to try: compile once per size you need, or report the op that needs a static size.",
                  UserWarning, stacklevel=3)


def to_graph(model: Any, example_inputs: tuple | None = None, options: CompileOptions | None = None,
             example_kwargs: dict | None = None, progress: Callable[[str], None] | None = None,
             dynamic: bool = True) -> tuple[Graph, dict]:
    """The optimized graph of a model (load, decompose, lower, optimize) and its provenance; progress is called
    with each stage's name as it starts.  A dynamic dim that some part of the graph needs static: the whole
    program compiled at the example's sizes, with a warning."""
    options = options or CompileOptions()
    ep, prov = load(model, example_inputs, options, example_kwargs, progress)
    if dynamic and prov["specialized"]:
        try:  # (ep is kept for a fallback to the example's sizes)
            return optimized(lower_program(ep, options, progress), options, progress), {**prov, "specialized": []}
        except Exception as e:
            warn_specialized(prov, dynamic_failure(e))
    elif prov["specialized"]:
        warn_specialized(prov, "static shapes were asked for", asked=True)
    g = lower_program(ep, options, progress, dynamic=False)
    # the program's own tensors are no longer needed: those the graph uses are its constants now, and a weight
    # lowered to a new array (transposed, folded) frees its original here instead of staying resident
    del ep
    return optimized(g, options, progress), prov


def compile_program(model: Any, out_dir: Any, *, example_inputs: tuple | None = None,
                    example_kwargs: dict | None = None, target: str = "generic",
                    name: str | None = None, embed_weights: bool = False, openmp: bool = True, opt_level: int = 1,
                    command: str = "", freestanding: bool = False, winograd: bool | None = None,
                    force: bool = False, kernels: Any = None, decompose: Any = (),
                    progress: Callable[[str], None] | None = None, static: bool = False,
                    max_sizes: Any = None) -> Artifact:
    """out_dir: a new folder, an empty one, or one pt2c wrote before (else OutputError, checked before the
    compile starts; force=True writes into any folder, replacing only files of the names pt2c writes).
    The artifact is written into a staging folder and moved into place at the end: whatever fails,
    out_dir is left as it was (see codegen/outdir.py)."""
    # the options, once: the target spec first (several x86-64 levels: one code path each, chosen at init),
    # then the name (ModelNameError, a ValueError)
    opts = CompileOptions.resolve(target=target, embed_weights=embed_weights, openmp=openmp, opt_level=opt_level,
                                  command=command, freestanding=freestanding, winograd=winograd, force=force,
                                  kernels=kernels, decompose=decompose, max_sizes=max_sizes)
    opts = replace(opts, name=check_name(name) if name else default_name(model))
    with OutputFolder(out_dir, force=opts.force) as out:  # OutputError now, before the slow part
        ep, prov = load(model, example_inputs, opts, example_kwargs, progress)
        art = None
        if prov["specialized"] and not static:
            try:  # (ep is kept for a fallback to the example's sizes)
                g = optimized(lower_program(ep, opts, progress), opts, progress)
                art = _write(g, out, opts, {**prov, "specialized": []}, progress)
            except Exception as e:
                warn_specialized(prov, dynamic_failure(e))
                for f in sorted(out.staging.rglob("*"), reverse=True):  # anything the dynamic attempt wrote
                    f.rmdir() if f.is_dir() else f.unlink()
        elif prov["specialized"]:
            warn_specialized(prov, "static shapes were asked for (--static)", asked=True)
        if art is None:
            g = lower_program(ep, opts, progress, dynamic=False)
            del ep  # (see to_graph)
            art = _write(optimized(g, opts, progress), out, opts, prov, progress)
        out.commit()
    art.out_dir = Path(out_dir)
    return art


def _write(g: Graph, out: OutputFolder, opts: CompileOptions, prov: dict,
           progress: Callable[[str], None] | None) -> Artifact:
    if progress:
        progress("planning memory")
    g, plan = finish(g)  # outputs materialised, memory planned: each verified
    if progress:
        progress("writing")
    try:
        write = write_gpu_artifact if opts.target.is_gpu else write_artifact
        return write(g, plan, out.staging, opts, provenance=prov)
    except OSError as e:  # the staging folder: disk full, quota, ...
        raise OutputError(f"writing the artifact for {out.path} failed: {e}; nothing was written") from e
