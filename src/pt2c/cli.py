"""The ``pt2c`` command line: compile, build, run, verify, inspect, targets, demo.

User-facing errors (:class:`pt2c.errors.Pt2cError`, :class:`BuildError`,
``RunError``, a bad target or model name) are printed as one red message with
exit code 2.  Anything else is a bug in pt2c (or torch): one message naming the
exception, exit code 3, and the traceback only with ``PT2C_DEBUG=1`` (a hostile
input must never get the user a screenful of someone else's stack).

``pt2c run`` (and ``build``, ``targets``) never import torch.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import tempfile
import time
import warnings
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional

import click
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="pt2c",
    help="Compile torch.export programs (.pt2) to standalone C99 source + build files.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
console = Console(highlight=False)
say = functools.partial(console.print, soft_wrap=True)  # plain lines: never re-wrapped
err_console = Console(stderr=True, highlight=False)

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3


class CliError(Exception):
    """A user-facing error raised by the CLI itself (bad argument values, unreadable .npy...)."""


def _user_errors() -> tuple[type[BaseException], ...]:
    from pt2c.errors import Pt2cError
    from pt2c.runtime.build import BuildError

    return (Pt2cError, BuildError, CliError)


def _handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print user-facing errors as a clean red message (exit 2), without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _user_errors() as e:
            err_console.print(f"[bold red]error:[/bold red] [red]{_escape(str(e))}[/red]", soft_wrap=True)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except (typer.Exit, typer.Abort, click.exceptions.ClickException):
            raise
        except KeyboardInterrupt:
            err_console.print("[red]interrupted[/red]")
            raise typer.Exit(130) from None
        except Exception as e:
            import os

            if os.environ.get("PT2C_DEBUG"):
                raise
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            err_console.print(f"[bold red]internal error:[/bold red] [red]{_escape(type(e).__name__)}: {_escape(first)}"
                              "\nThis is a bug in pt2c; please report it with the input that caused it "
                              "(PT2C_DEBUG=1 shows the traceback).[/red]", soft_wrap=True)
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None

    return wrapper


def _escape(s: str) -> str:
    from rich.markup import escape

    return escape(s)


def _quiet_torch_warnings() -> None:
    # torch's own deprecation chatter when (de)serialising programs; not the user's concern
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")


def _check_target(target: str) -> str:
    from pt2c.targets import get_targets, target_spec

    try:
        return target_spec(get_targets(target))  # "x86_64,x86_64-v3": one code path per level
    except ValueError as e:
        raise CliError(str(e)) from None


def _check_name(name: Optional[str]) -> None:
    from pt2c.codegen.outdir import check_name

    if name is not None:
        check_name(name)  # a C identifier of at most 64 characters (ModelNameError: a Pt2cError)


def _recorded_command(model: Path, *args: str) -> str:
    """The command written into <name>.c: the model file's base name and the options, no output folder
    and no directory, so the same .pt2 compiled into any folder from any directory gives the same bytes."""
    return shlex.join(["pt2c", "compile", model.name, *args])


def _import_file(path: Path) -> None:
    """Run the user's own Python file (--import), e.g. the library that registers the program's custom ops."""
    import importlib.util
    import sys

    if not path.is_file() or path.suffix != ".py":
        raise CliError(f"--import {path}: not a Python file")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules.setdefault(path.stem, module)
    spec.loader.exec_module(module)  # type: ignore[union-attr]


def _check_input_path(path: Path) -> None:
    from pt2c.errors import InputError

    if not path.exists():
        raise InputError(f"{path}: no such file.")
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a .pt2 file.")


def _fmt_bytes(n: int) -> str:
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if v < 1024 or unit == "GiB":
            return f"{int(v)} B" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{n} B"


def _fmt_flops(n: int) -> str:
    for unit, s in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= s:
            return f"{n / s:.2f} {unit}FLOP"
    return f"{n} FLOP"


def _memory_line(mem: dict) -> str:
    ws, lb = mem.get("workspace_bytes", 0), mem.get("lower_bound_bytes", 0)
    arena, scratch = mem.get("arena_bytes", 0), mem.get("scratch_bytes", 0)
    ratio = f", {arena / lb:.2f}x the bound" if lb else ""
    if "device_bytes" in mem:  # a GPU artifact: one device allocation, no host workspace
        dev = mem["device_bytes"]
        return (f"device {_fmt_bytes(dev)} ({dev} bytes, one allocation: weights, activations, I/O staging); "
                f"activations {arena} bytes (lower bound {lb} bytes{ratio})")
    state = f" + state {mem['state_bytes']} bytes" if mem.get("state_bytes") else ""
    return (f"workspace {_fmt_bytes(ws)} ({ws} bytes) = tensor arena {arena} bytes (lower bound {lb} bytes{ratio}) "
            f"+ kernel scratch {scratch} bytes{state}")


def _io_str(specs: list[dict]) -> str:
    return ", ".join(_escape(f"{d['name']}: {d['dtype']}[{', '.join(map(str, d['shape']))}]") for d in specs)


# ---------------------------------------------------------------------------- compile


@app.command("compile")
@_handled
def compile_cmd(
    model: Annotated[Path, typer.Argument(help="the .pt2 file written by torch.export.save")],
    out: Annotated[Path, typer.Option("-o", "--out", help="output folder for the C source and build files")],
    target: Annotated[str, typer.Option("--target", "-t", help="target preset (see `pt2c targets`), x86-64 levels to multi-version: x86_64,x86_64-v3,x86_64-v4, or a GPU: cuda[:sm_80,sm_90], opencl")] = "generic",
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="C symbol prefix (default: the file's stem)")] = None,
    embed_weights: Annotated[bool, typer.Option("--embed-weights", help="compile the weights into the C source")] = False,
    no_openmp: Annotated[bool, typer.Option("--no-openmp", help="generate build files without OpenMP")] = False,
    opt_level: Annotated[int, typer.Option("-O", "--opt-level", min=0, max=1, help="graph optimisation level (0 or 1)")] = 1,
    freestanding: Annotated[bool, typer.Option("--freestanding", help="bare metal: the library needs no malloc, stdio, "
                                               "threads or files; implies --embed-weights and --no-openmp "
                                               "(implied by --target cortex-m)")] = False,
    no_winograd: Annotated[bool, typer.Option("--no-winograd", help="3x3 convolutions by im2col + GEMM only "
                                              "(Winograd is ~2x faster but stores 4x those layers' weights)")] = False,
    force: Annotated[bool, typer.Option("--force", help="write into OUT even if pt2c did not write it: replaces only "
                                        "files of the names pt2c writes, leaves every other file alone")] = False,
    kernels: Annotated[Optional[List[Path]], typer.Option("--kernels", help="a folder of C kernels for the program's "
                                                          "custom ops, one file per op (docs/custom-ops.md); "
                                                          "repeatable")] = None,
    decompose: Annotated[Optional[List[str]], typer.Option("--decompose", help="compile this custom op (ns::op) "
                                                           "through its Python implementation instead of a C "
                                                           "kernel (needs --import); repeatable")] = None,
    import_: Annotated[Optional[List[Path]], typer.Option("--import", help="a Python file to run first, e.g. the one "
                                                          "defining the custom ops; repeatable")] = None,
    static: Annotated[bool, typer.Option("--static", help="compile the sizes the export declared dynamic at the "
                                         "example's sizes (default: sizes given at run time, within the "
                                         "export's ranges; docs/dynamic-shapes.md)")] = False,
    max_: Annotated[Optional[List[str]], typer.Option("--max", help="upper bound for a dynamic dim the export left "
                                                      "unbounded: INPUT:DIM=N (ids:1=512), or N for every such "
                                                      "dim; repeatable")] = None,
) -> None:
    """Compile a .pt2 program to C99 source + build files in OUT.

    OUT must be a new or empty folder, or one pt2c wrote before (then its stale files are removed and every
    other file is left alone); --force writes into any folder. A failed compile leaves OUT as it was."""
    tname = _check_target(target)
    _check_name(name)
    _check_input_path(model)
    from pt2c.codegen.outdir import check_output_dir

    check_output_dir(out, force)  # at once, before torch is even imported
    _quiet_torch_warnings()
    import pt2c

    for f in import_ or ():
        _import_file(f)
    cmd = ["--target", tname]
    if name:
        cmd += ["--name", name]
    if embed_weights:
        cmd.append("--embed-weights")
    if no_openmp:
        cmd.append("--no-openmp")
    if freestanding:
        cmd.append("--freestanding")
    if no_winograd:
        cmd.append("--no-winograd")
    for k in kernels or ():
        cmd += ["--kernels", k.name]
    for d in decompose or ():
        cmd += ["--decompose", d]
    if static:
        cmd.append("--static")
    for m_ in max_ or ():
        cmd += ["--max", m_]
    cmd += ["-O", str(opt_level)]
    with warnings.catch_warnings(record=True) as caught, console.status(f"compiling {model} ...") as status:
        warnings.simplefilter("always", UserWarning)
        t0 = time.perf_counter()
        art = pt2c.compile(str(model), out, target=tname, name=name, embed_weights=embed_weights,
                           openmp=not no_openmp, opt_level=opt_level, command=_recorded_command(model, *cmd),
                           freestanding=freestanding, winograd=False if no_winograd else None, force=force,
                           kernels=[str(k) for k in kernels or ()], decompose=list(decompose or ()), static=static,
                           max_sizes=list(max_) if max_ else None,
                           progress=lambda s: status.update(f"compiling {model}: {s} ... "
                                                            f"({time.perf_counter() - t0:.0f} s)"))
    for w in caught:
        if "dynamic sizes" in str(w.message):  # (pt2c's own; torch's export chatter stays out)
            err_console.print(f"[yellow]warning:[/yellow] {_escape(str(w.message))}")
    m = art.manifest
    say(f"[green]compiled[/green] {model} -> {out}/ (model [bold]{art.name}[/bold], target {m['target']})")
    ncustom = sum(1 for f in art.files if f.startswith("custom_ops/") and f.endswith(".c"))
    say(f"  files:   {len(art.files)} ({', '.join(f for f in art.files if '/' not in f)}, "
                  f"{sum(1 for f in art.files if f.startswith('pt2c_kernels/'))} kernel file(s)"
                  + (f", {ncustom} custom op kernel(s) in custom_ops/" if ncustom else "") + ")")
    say(f"  inputs:  {_io_str(m['inputs'])}")
    if m.get("sizes"):
        say("  sizes:   " + ", ".join(f"{z['name']} ({z['input']} dim {z['dim']}) {z['min']}..{z['max']}"
                                      for z in m["sizes"]) + " (set at run time; memory planned for the largest)")
    say(f"  outputs: {_io_str(m['outputs'])}")
    w = m["weights"]
    say(f"  weights: {_fmt_bytes(w['bytes'])} ({w['bytes']} bytes, "
                  f"{'embedded' if w['embedded'] else w['file']})")
    say(f"  memory:  {_memory_line(m['memory'])}")
    say(f"  compute: {_fmt_flops(m['flops'])} per run, {sum(m['op_counts'].values())} op(s)")
    if m.get("freestanding"):
        say(f"  freestanding: {art.name}.c + pt2c_kernels/ need no malloc, stdio, threads or files "
            f"(libm + memcpy/memset/memcmp only); {art.name}_driver.c is a hosted test program")
        say(f"next: cross-compile {out}/{art.name}.c (see docs/targets.md, cortex-m / freestanding)")
        return
    say(f"next: pt2c build {out}")


# ---------------------------------------------------------------------------- build


@app.command("build")
@_handled
def build_cmd(
    out: Annotated[Path, typer.Argument(help="the folder written by `pt2c compile`")],
    cc: Annotated[Optional[str], typer.Option("--cc", help="C compiler command (default: $CC, else cc)")] = None,
    cflags: Annotated[Optional[str], typer.Option("--cflags", help='flags replacing the defaults, e.g. "-O3 -std=c99"')] = None,
    cmake: Annotated[bool, typer.Option("--cmake", help="build with the generated CMakeLists.txt instead of make")] = False,
    no_openmp: Annotated[bool, typer.Option("--no-openmp", help="build without OpenMP")] = False,
) -> None:
    """Build the artifact in OUT into a shared library; prints its path."""
    from pt2c.runtime.build import build

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        with err_console.status(f"building {out} ..."):
            lib = build(out, cc=cc, cflags=cflags, openmp=not no_openmp, use="cmake" if cmake else "make")
    for w in caught:
        err_console.print(f"[yellow]warning:[/yellow] {_escape(str(w.message))}")
    print(lib)


# ---------------------------------------------------------------------------- wheel


@app.command("wheel")
@_handled
def wheel_cmd(
    out: Annotated[Path, typer.Argument(help="the folder written by `pt2c compile` (built, or built here with make)")],
    dist: Annotated[Path, typer.Option("--dist", "-o", help="folder for the .whl")] = Path("dist"),
    version: Annotated[Optional[str], typer.Option("--version", help="wheel version (default 1.0.0+pt2c.<weights crc>)")] = None,
) -> None:
    """Package OUT as a Python wheel (library, weights, numpy-only loader: import <name>; <name>.load()(x)); prints its path."""
    from pt2c.packaging.wheel import build_wheel

    print(build_wheel(out, dist, version=version))


# ---------------------------------------------------------------------------- run


def _load_npy(path: Path) -> Any:
    import numpy as np

    if not path.is_file():
        raise CliError(f"{path}: no such .npy file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise CliError(f"{path}: cannot read as a .npy array ({e})") from None


def _parse_inputs(specs: list[str], names: list[str]) -> list[Any]:
    """`-i` values: `name=file.npy` or positional files, in the model's input order."""
    named: dict[str, Any] = {}
    positional: list[Any] = []
    for s in specs:
        key, sep, rest = s.partition("=")
        if sep and key in names and not Path(s).exists():
            if key in named:
                raise CliError(f"input {key!r} given twice")
            named[key] = _load_npy(Path(rest))
        elif sep and not Path(s).exists() and re.fullmatch(r"\w+", key):
            raise CliError(f"unknown input name {key!r}; the model takes {', '.join(names)}")
        else:
            positional.append(_load_npy(Path(s)))
    free = [n for n in names if n not in named]
    if len(positional) > len(free):
        raise CliError(f"too many inputs: the model takes {len(names)} ({', '.join(names)}), got {len(specs)}")
    named.update(zip(free, positional))
    missing = [n for n in names if n not in named]
    if missing:
        raise CliError(f"missing input(s) {', '.join(missing)}; the model takes {', '.join(names)} "
                       "(pass -i NAME=FILE.npy or the files in order)")
    return [named[n] for n in names]


@app.command("run")
@_handled
def run_cmd(
    out: Annotated[Path, typer.Argument(help="a built artifact folder")],
    inputs: Annotated[Optional[List[str]], typer.Option("-i", "--input",
                                                        help="NAME=FILE.npy, or FILE.npy in input order; repeatable")] = None,
    outdir: Annotated[Path, typer.Option("-o", "--out-dir", help="where to write <output>.npy files")] = Path("."),
    lib: Annotated[Optional[Path], typer.Option("--lib", help="the shared library (default: OUT/build/lib<name>.so)")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="OpenMP threads (sets OMP_NUM_THREADS)")] = None,
) -> None:
    """Run a built model on .npy inputs and write its outputs as .npy files (no torch needed)."""
    import numpy as np

    import pt2c

    model = pt2c.load(out, lib=lib, threads=threads)
    arrays = _parse_inputs(list(inputs or []), [d["name"] for d in model.inputs])
    outs = model.run(arrays)
    outdir.mkdir(parents=True, exist_ok=True)
    for d, arr in zip(model.outputs, outs):
        path = outdir / f"{d['name']}.npy"
        np.save(path, arr)
        say(f"{d['name']}: {arr.dtype}{list(arr.shape)} -> {path}")


# ---------------------------------------------------------------------------- verify


def _report_table(report: Any) -> Table:
    isa = f", code path {report.isa}" if report.isa else ""
    t = Table(title=f"{report.name}: pt2c vs PyTorch eager ({report.input_source} inputs; target {report.target}{isa})")
    for col in ("output", "shape", "max abs err", "max rel err", "tolerance", "result"):
        t.add_column(col, justify="right" if "err" in col or col == "tolerance" else "left")
    for o in report.outputs:
        tol = "exact" if o.tol_abs == 0 else f"{o.tol_abs:.1e}"
        res = "[green]PASS[/green]" if o.passed else "[bold red]FAIL[/bold red]"
        if o.note:
            res += f" ({_escape(o.note)})"
        t.add_row(o.name, f"{o.dtype}{list(o.shape)}", f"{o.max_abs_err:.3e}", f"{o.max_rel_err:.3e}", tol, res)
    return t


def _timing_table(report: Any) -> Table:
    import os

    runs = report.timings[0].runs if report.timings else 0
    t = Table(title=f"median latency of {runs} runs ({os.cpu_count()} CPUs visible; other load skews multi-thread numbers)")
    for col in ("threads", "pt2c", "PyTorch eager", "speedup"):
        t.add_column(col, justify="right")
    for tm in report.timings:
        t.add_row(str(tm.threads), f"{tm.pt2c_ms:.3f} ms", f"{tm.eager_ms:.3f} ms", f"{tm.speedup:.2f}x")
    return t


@app.command("verify")
@_handled
def verify_cmd(
    model: Annotated[Path, typer.Argument(help="the .pt2 file")],
    target: Annotated[str, typer.Option("--target", "-t", help="target preset")] = "native",
    inputs: Annotated[Optional[List[str]], typer.Option("-i", "--input", help="NAME=FILE.npy or FILE.npy in order "
                                                        "(default: the program's example inputs, else seeded random)")] = None,
    cc: Annotated[Optional[str], typer.Option("--cc", help="C compiler command")] = None,
    cflags: Annotated[Optional[str], typer.Option("--cflags", help="compiler flags replacing the defaults")] = None,
    tol: Annotated[Optional[float], typer.Option("--tol", min=0.0, help="float outputs pass when max|err| <= tol * max(1, max|ref|) [default: 1e-4; bfloat16 5e-2, float16 1e-2]")] = None,
    out: Annotated[Optional[Path], typer.Option("-o", "--out", help="keep the artifact in this folder")] = None,
    no_openmp: Annotated[bool, typer.Option("--no-openmp", help="build without OpenMP")] = False,
    seed: Annotated[int, typer.Option("--seed", help="seed for random inputs")] = 0,
    time_it: Annotated[bool, typer.Option("--time", help="also time pt2c vs eager at 1 thread")] = False,
    runs: Annotated[int, typer.Option("--runs", help="timed runs (median) with --time")] = 20,
    exec_: Annotated[Optional[str], typer.Option("--exec", help="run on the target: build <name>.c + the standalone "
                                                 "driver with --cc into an executable and run it through this "
                                                 "launcher, e.g. 'qemu-aarch64 -L /usr/aarch64-linux-gnu', 'wine', "
                                                 "'python -m pt2c.runtime.wasirun' (also used for a cross --cc, "
                                                 "run directly)")] = None,
    force: Annotated[bool, typer.Option("--force", help="with -o: write into OUT even if pt2c did not write it "
                                        "(replaces only files of the names pt2c writes)")] = False,
    kernels: Annotated[Optional[List[Path]], typer.Option("--kernels", help="a folder of C kernels for the program's "
                                                          "custom ops (docs/custom-ops.md); repeatable")] = None,
    decompose: Annotated[Optional[List[str]], typer.Option("--decompose", help="compile this custom op (ns::op) "
                                                           "through its Python implementation; repeatable")] = None,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="build and run the standalone driver with ASan + "
                                           "UBSan (custom op kernels get exact-size buffers): out-of-bounds "
                                           "accesses fail the run")] = False,
    import_: Annotated[Optional[List[Path]], typer.Option("--import", help="a Python file to run first, e.g. the one "
                                                          "defining the custom ops (their PyTorch implementation is "
                                                          "the reference); repeatable")] = None,
) -> None:
    """Compile, build and run MODEL and compare every output with PyTorch eager (exit 1 on mismatch).

    With --exec LAUNCHER (or a cross-compiler --cc) the model runs on the target: see docs/targets.md."""
    tname = _check_target(target)
    _check_input_path(model)
    if out is not None:
        from pt2c.codegen.outdir import check_output_dir

        check_output_dir(out, force)  # a new or empty folder, or one pt2c wrote before (a rerun)
    _quiet_torch_warnings()
    from pt2c.runtime.verify import verify

    for f in import_ or ():
        _import_file(f)
    arrays = None
    if inputs:
        from pt2c.frontend.load import load_program
        from pt2c.runtime.verify import _user_input_specs

        ep, _ = load_program(str(model))
        arrays = _parse_inputs(list(inputs), [s["name"] for s in _user_input_specs(ep)])
    with warnings.catch_warnings(record=True) as caught, console.status("verifying ...") as status:
        warnings.simplefilter("always", RuntimeWarning)
        report = verify(str(model), out, inputs=arrays, target=tname, cc=cc, cflags=cflags, openmp=not no_openmp,
                        seed=seed, tol=tol, time_it=time_it, runs=runs, launcher=exec_, force=force,
                        kernels=[str(k) for k in kernels or ()], decompose=list(decompose or ()), sanitize=sanitize,
                        progress=lambda s: status.update(f"verifying: {s} ..."))
    for w in caught:
        if issubclass(w.category, RuntimeWarning) or "dynamic sizes" in str(w.message):
            err_console.print(f"[yellow]warning:[/yellow] {_escape(str(w.message))}")
    console.print(_report_table(report))
    if report.timings:
        console.print(_timing_table(report))
    if report.out_dir is not None:
        say(f"artifact kept in {report.out_dir}")
    if report.passed:
        say("[bold green]PASS[/bold green]")
    else:
        say("[bold red]FAIL[/bold red]: outputs differ beyond the tolerance")
        raise typer.Exit(1)


# ---------------------------------------------------------------------------- inspect


@app.command("inspect")
@_handled
def inspect_cmd(
    path: Annotated[Path, typer.Argument(help="an artifact folder, or a .pt2 file (compiled to a temporary folder)")],
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Show ops, inputs/outputs, weights, workspace vs lower bound and FLOPs."""
    if path.is_dir():
        mpath = path / "manifest.json"
        if not mpath.is_file():
            raise CliError(f"{path}: no manifest.json; is this a pt2c output folder?")
        try:
            m = json.loads(mpath.read_text())
        except ValueError as e:
            raise CliError(f"{mpath}: not valid JSON ({e})") from None
    else:
        _check_input_path(path)
        _quiet_torch_warnings()
        import pt2c

        with tempfile.TemporaryDirectory(prefix="pt2c-inspect-") as tmp, console.status(f"compiling {path} ..."):
            m = pt2c.compile(str(path), tmp).manifest
    keys = ("name", "source", "target", "inputs", "outputs", "weights", "memory", "op_counts", "flops")
    if as_json:
        print(json.dumps({k: m.get(k) for k in keys}, indent=2))
        return
    say(f"[bold]{m['name']}[/bold]  (source {m.get('source') or '?'}, target {m.get('target')}, "
                  f"torch {m.get('exported_with_torch') or '?'})")
    io = Table(title="inputs / outputs")
    for col in ("", "name", "dtype", "shape"):
        io.add_column(col)
    for kind in ("inputs", "outputs"):
        for d in m[kind]:
            io.add_row(kind[:-1], d["name"], d["dtype"], _escape(f"[{', '.join(map(str, d['shape']))}]"))
    console.print(io)
    if m.get("sizes"):
        say("sizes:   " + ", ".join(f"{z['name']} ({z['input']} dim {z['dim']}) {z['min']}..{z['max']}"
                                    for z in m["sizes"]) + " (set at run time; memory planned for the largest)")
    if m.get("state"):
        say(f"state:   {len(m['state'])} buffer(s) the model updates from run to run, "
            f"{_fmt_bytes(m['memory'].get('state_bytes', 0))} of the workspace")
    ops = Table(title="ops")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, n in sorted(m["op_counts"].items(), key=lambda kv: (-kv[1], kv[0])):
        ops.add_row(op, str(n))
    console.print(ops)
    w = m["weights"]
    say(f"weights: {_fmt_bytes(w['bytes'])} ({w['bytes']} bytes, {'embedded' if w['embedded'] else w['file']})")
    say(f"memory:  {_memory_line(m['memory'])}")
    say(f"FLOPs:   {m['flops']} ({_fmt_flops(m['flops'])}) per run")


# ---------------------------------------------------------------------------- targets


@app.command("targets")
def targets_cmd() -> None:
    """List the target presets."""
    from pt2c.targets import OPENCL, TARGETS, cuda_target

    t = Table(title="target presets")
    for col in ("name", "arch", "simd", "flags", "description"):
        t.add_column(col, overflow="fold")
    for tg in TARGETS.values():
        t.add_row(tg.name, tg.arch, tg.simd, tg.flags_str or "(none)", tg.description)
    for tg in (cuda_target("cuda"), OPENCL):
        t.add_row(tg.name, tg.arch, tg.simd, tg.flags_str or "(none)", tg.description)
    console.print(t)
    say("multi-versioning: list x86-64 levels, e.g. --target x86_64,x86_64-v3,x86_64-v4 (one code path each; "
        "init picks the best the CPU has)")
    say("GPUs (docs/gpu.md): --target cuda:sm_80,sm_90 (machine code per listed architecture + the last one's PTX), "
        "--target opencl (kernels compiled by the device's driver at init)")
    say("cross builds tested from x86-64 Linux (docs/targets.md; pt2c verify MODEL --target T --cc CC --exec RUN):")
    for tg in TARGETS.values():
        if tg.cross_cc:
            say(f"  {tg.name:<8} CC: {tg.cross_cc}   RUN: {tg.launcher or '(bare metal: compile + link only)'}")


# ---------------------------------------------------------------------------- demo


@app.command("demo")
@_handled
def demo_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for demo.pt2 and the C artifact")] = Path("pt2c-demo"),
    size: Annotated[str, typer.Option("--size", help="zoo size: bench (ResNet-18, 224x224) or tiny")] = "bench",
    runs: Annotated[int, typer.Option("--runs", help="timed runs per measurement (median)")] = 10,
    two_threads: Annotated[bool, typer.Option("--two-threads/--one-thread", help="also time at 2 threads")] = True,
) -> None:
    """Export a ResNet-18 CNN, compile it to C, build, verify against eager and time both."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    _quiet_torch_warnings()
    if size not in ("bench", "tiny"):
        raise CliError(f"--size must be 'bench' or 'tiny', not {size!r}")
    steps = {"load": "load program", "eager": "run PyTorch eager", "compile": "compile to C (target native)",
             "build": "build (-O3)", "run": "run the library", "compare": "compare outputs",
             "time": "time pt2c vs eager"}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as prog:
        current: list[Any] = []

        def start(desc: str) -> None:
            if current:
                prog.update(current[-1], completed=1)
                prog.stop_task(current[-1])
            current.append(prog.add_task(desc, total=1))

        start("import torch + build the model")
        import torch

        from pt2c import zoo
        from pt2c.runtime.verify import verify

        model, example = zoo.resnet18(size)
        start(f"torch.export + save {out / 'demo.pt2'}")
        ep = torch.export.export(model, example)
        out.mkdir(parents=True, exist_ok=True)
        pt2 = out / "demo.pt2"
        torch.export.save(ep, pt2)
        threads = [1, 2] if two_threads else [1]
        report = verify(str(pt2), out / "demo_c", target="native", cflags="-O3 -std=c99", name="demo",
                        time_it=True, runs=runs, threads=threads,
                        command=_recorded_command(pt2, "--target", "native", "--name", "demo"),
                        progress=lambda s: start(steps.get(s, s)))
        start("done")
        prog.update(current[-1], completed=1)
    x = example[0]
    say(f"model: zoo.resnet18({size!r}), input {list(x.shape)}; artifact in {out / 'demo_c'}/ "
                  f"(compile {report.compile_s:.1f} s, build {report.build_s:.1f} s)")
    console.print(_report_table(report))
    console.print(_timing_table(report))
    if not report.passed:
        console.print("[bold red]FAIL[/bold red]: outputs differ from eager")
        raise typer.Exit(1)
    say(f"[bold green]PASS[/bold green]  try: pt2c inspect {out / 'demo_c'}")


def main() -> None:
    app()


if __name__ == "__main__":  # python -m pt2c.cli
    main()
