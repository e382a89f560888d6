"""pt2c: compile a torch.export program into portable C99 source + build files.

`pt2c.compile(...)` needs torch; `pt2c.load(...)` (the runner) needs only numpy.
"""

from __future__ import annotations

from pt2c.version import __version__  # noqa: F401 (re-exported)

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pt2c.codegen.cwriter import Artifact
    from pt2c.runtime.runner import Model


def compile(model: Any, out_dir: Any, *, example_inputs: tuple | None = None, example_kwargs: dict | None = None,
            target: str = "generic",
            name: str | None = None, embed_weights: bool = False, openmp: bool = True, opt_level: int = 1,
            command: str = "", freestanding: bool = False, winograd: bool | None = None,
            force: bool = False, kernels: Any = None, decompose: Any = (),
            progress: Any = None, static: bool = False, max_sizes: Any = None) -> Artifact:
    """Compile an ExportedProgram, a .pt2 path, or an nn.Module (+ example_inputs, and example_kwargs: keyword
    arguments such as ``use_cache=False``; Python values are fixed at export) to C in out_dir.

    out_dir: a folder that does not exist yet, an empty one, or one pt2c wrote before (it keeps the list
    of files it wrote in ``.pt2c-files``); anything else raises ``pt2c.errors.OutputError`` before the
    compile starts. There, pt2c replaces its own files, removes those it no longer writes and leaves
    every other file alone. force=True writes pt2c's files into any folder, replacing only files of the
    names pt2c writes. The files are written into a staging folder and moved into place at the end, so a
    failed compile leaves out_dir as it was (a new folder is not created).
    name: the C symbol prefix and file name stem (a C identifier of at most 64 characters); default:
    from the file's stem or the module's class, cut to 64 characters.

    freestanding=True (implied by a bare-metal target such as ``"cortex-m"``): output for a system without
    an OS -- embedded weights, no OpenMP; the library needs no malloc, stdio, threads or files.
    winograd: 3x3 stride-1 convolutions by Winograd F(4x4, 3x3) (about 2x faster, 4x the weights of those
    layers); None (default): on, except for freestanding output.
    kernels: users' C kernels for custom ops: folders of kernel files and ``pt2c.custom.KernelSpec``
    objects, besides those given to :func:`register_kernel` (see docs/custom-ops.md).
    decompose: custom ops ("ns::op") to compile through their Python implementation (a torch.library.custom_op's
    function, or a torch._decomp registration) traced into ATen ops, instead of a C kernel.
    progress: called with the name of each stage as it starts ("loading", "decomposing", "lowering",
    "optimizing", "planning memory", "writing"; `pt2c compile` shows them).
    static: compile the sizes the export declared dynamic (torch.export.Dim) at the example's sizes.  By
    default they stay dynamic: the C takes them at run time (<name>_set_sizes, docs/dynamic-shapes.md);
    a part of pt2c that cannot handle a size dynamic makes the whole compile static, with a warning.
    max_sizes: upper bounds for dims the export left unbounded: N for every one, or {"input:dim": N}
    (memory is planned for the largest sizes, so an unbounded dim is otherwise refused)."""
    from pt2c.compiler import compile_program

    return compile_program(model, out_dir, example_inputs=example_inputs, example_kwargs=example_kwargs,
                           target=target, name=name,
                           embed_weights=embed_weights, openmp=openmp, opt_level=opt_level, command=command,
                           freestanding=freestanding, winograd=winograd, force=force, kernels=kernels,
                           decompose=decompose, progress=progress, static=static, max_sizes=max_sizes)


def load(out_dir: Any, lib: Any = None, threads: int | None = None) -> Model:
    """Load a built artifact (its shared library) for running on numpy arrays; no torch needed."""
    from pt2c.runtime.runner import Model

    return Model(out_dir, lib=lib, threads=threads)


def build(out_dir: Any, cc: str | None = None, cflags: str | None = None, openmp: bool = True, use: str = "make") -> Any:
    """Build the artifact with the user's compiler and flags; returns the shared library path."""
    from pt2c.runtime.build import build as _build

    return _build(out_dir, cc=cc, cflags=cflags, openmp=openmp, use=use)


def register_kernel(qualname: str, source: str | None = None, *, path: Any = None, scratch: Any = None) -> Any:
    """Give pt2c a C implementation of the custom op ``qualname`` ("ns::op") for every later compile in this
    process: the C source, or path= a file; scratch: bytes, a function of (inputs, outputs, args) or an
    expression (see docs/custom-ops.md).  The prototype is checked at once."""
    from pt2c.custom import register_kernel as _register

    return _register(qualname, source, path=path, scratch=scratch)
