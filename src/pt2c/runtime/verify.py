"""Check a compiled model against PyTorch eager on the same inputs.

:func:`verify` compiles a model (a ``.pt2`` path, an ``ExportedProgram`` or an
``nn.Module`` + example inputs), builds it with the user's compiler, runs it
through :func:`pt2c.load`, runs PyTorch eager on the same inputs and compares
every output.

Tolerance rule
--------------
* float outputs pass when ``max|out - ref| <= tol * max(1, max|ref|)``
  (an absolute tolerance of ``tol`` for outputs of magnitude up to 1, relative
  to the output's largest magnitude above that).  NaN/inf must appear at the
  same positions in both (same sign for inf).
* integer and bool outputs must match exactly.
* ``tol`` defaults to the output's dtype: 1e-4 for float32 / float64, and for a reduced-precision model
  (eager in the same dtype as reference) REDUCED_TOL: each op's result is rounded to the dtype on both sides,
  and an ulp rounded differently early in the model (operations summed in another order) carries on.

``max_rel_err`` in the report is ``max|out - ref| / max|ref|`` (the error
relative to the output's scale, not an element-wise ratio, which is meaningless
near zero).

Inputs, in order of preference: the arrays passed as ``inputs``; else the
example inputs saved in the ExportedProgram (``ep.example_inputs``, written by
``torch.export.save`` since torch 2.x) or passed as ``example_inputs``; else
seeded random arrays (float: standard normal; integer: zeros; bool: ones).

On the target (``launcher=`` / ``pt2c verify --exec``, or a cross ``cc``): instead of loading
a shared library into this process, ``<name>.c`` and the standalone ``<name>_driver.c`` are
compiled with ``cc`` (plus the target's flags, no OpenMP) into an executable
(:func:`build_driver`), the inputs are written as raw little-endian ``.bin`` files and
``LAUNCHER EXE WEIGHTS IN.bin... OUT_DIR`` is run (:func:`run_driver`): e.g.
``qemu-aarch64 -L /usr/aarch64-linux-gnu``, ``wine``, ``python -m pt2c.runtime.wasirun``.
The outputs are read back and compared the same way; ``time_it`` then reports the
driver's own median latency (``--repeat``).

Timing (``time_it=True``): the median of ``runs`` calls of the built library
and of eager PyTorch, each after warm-up, at ``threads`` threads (default 1;
``torch.set_num_threads`` for eager, ``OMP_NUM_THREADS`` before the library is
loaded plus ``omp_set_num_threads`` through the library's OpenMP runtime, as
torch may already have initialised the shared ``libgomp``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pt2c.errors import InputError

__all__ = ["OutputCheck", "Timing", "VerifyReport", "verify", "compare", "time_runner", "time_eager",
           "set_runner_threads", "build_driver", "run_driver", "is_cross_compiler", "DriverRun"]


@dataclass
class OutputCheck:
    """One output's comparison.  ``tol_abs`` is the allowed max abs error (0 for exact)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float
    max_rel_err: float
    ref_scale: float  # max |ref| (finite values)
    tol_abs: float
    passed: bool
    note: str = ""  # why it failed beyond the numbers (shape mismatch, NaN placement...)


@dataclass
class Timing:
    threads: int
    runs: int
    pt2c_ms: float  # median
    eager_ms: float  # median

    @property
    def speedup(self) -> float:
        return self.eager_ms / self.pt2c_ms if self.pt2c_ms > 0 else float("inf")


@dataclass
class VerifyReport:
    name: str
    target: str
    tol: float | None  # None: each output's dtype default (REDUCED_TOL, DEFAULT_TOL)
    input_source: str  # "given" | "example" | "random"
    outputs: list[OutputCheck] = field(default_factory=list)
    out_dir: Path | None = None  # None when compiled into a temporary folder (removed)
    lib_path: Path | None = None
    compile_s: float = 0.0
    build_s: float = 0.0
    timings: list[Timing] = field(default_factory=list)  # filled by time_it=True, one per thread count
    isa: str | None = None  # the code path the library chose on the machine that ran it ("x86_64-v3", ...)

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(o.passed for o in self.outputs)

    # convenience: the first timing (1 thread by default)
    @property
    def pt2c_ms(self) -> float | None:
        return self.timings[0].pt2c_ms if self.timings else None

    @property
    def eager_ms(self) -> float | None:
        return self.timings[0].eager_ms if self.timings else None


# --------------------------------------------------------------------------- comparison


# float outputs' default tolerance by dtype (the module docstring's rule)
REDUCED_TOL = {"bfloat16": 5e-2, "float16": 1e-2}
DEFAULT_TOL = 1e-4


def as_float(a: np.ndarray) -> np.ndarray:
    """A reduced-precision array as float32 (uint16: bfloat16 bits); any other array unchanged."""
    from pt2c.ops.elementwise import bf16_float

    a = np.asarray(a)
    return bf16_float(a) if a.dtype == np.uint16 else a.astype(np.float32) if a.dtype == np.float16 else a


def dtype_name(a: np.ndarray) -> str:
    return "bfloat16" if a.dtype == np.uint16 else str(a.dtype)


def compare(name: str, out: np.ndarray, ref: np.ndarray, tol: float | None = None) -> OutputCheck:
    """Compare one output with its reference under the module's tolerance rule."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    if tol is None:
        tol = REDUCED_TOL.get(dtype_name(ref), DEFAULT_TOL)
    out_dtype = dtype_name(out)
    out, ref = as_float(out), as_float(ref)
    shape = tuple(int(s) for s in out.shape)
    if out.shape != ref.shape:
        return OutputCheck(name, shape, out_dtype, float("inf"), float("inf"), float("nan"), 0.0, False,
                           f"shape {shape} != reference shape {tuple(ref.shape)}")
    exact = not (np.issubdtype(ref.dtype, np.floating) or np.issubdtype(ref.dtype, np.complexfloating))
    if exact:
        if out.size == 0:
            return OutputCheck(name, shape, out_dtype, 0.0, 0.0, 0.0, 0.0, True)
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        err = float(diff.max())
        scale = float(np.abs(ref.astype(np.float64)).max())
        rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
        ok = bool(np.array_equal(out.astype(ref.dtype) if out.dtype != ref.dtype else out, ref))
        return OutputCheck(name, shape, out_dtype, err, rel, scale, 0.0, ok)

    o = out.astype(np.float64)
    r = ref.astype(np.float64)
    note = ""
    ok_special = True
    fin_r = np.isfinite(r)
    special = ~fin_r | ~np.isfinite(o)
    if special.any():
        same = (np.isnan(o) & np.isnan(r)) | (np.isinf(o) & np.isinf(r) & (np.sign(o) == np.sign(r)))
        if not np.all(same[special]):
            ok_special = False
            note = f"{int((special & ~same).sum())} NaN/inf value(s) differ from the reference"
    mask = ~special
    diff = np.abs(o[mask] - r[mask])
    err = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(r[fin_r]).max()) if fin_r.any() else 0.0
    tol_abs = tol * max(1.0, scale)
    rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
    if not ok_special:
        err = float("inf") if err == 0 else err
    passed = ok_special and err <= tol_abs
    return OutputCheck(name, shape, out_dtype, err, rel, scale, tol_abs, passed, note)


# --------------------------------------------------------------------------- threads and timing


def set_runner_threads(model: Any, threads: int) -> bool:
    """Set the OpenMP thread count used by a loaded model's calls from this thread.

    Calls ``omp_set_num_threads`` resolved through the model's library (so its own
    OpenMP runtime).  Returns False when the library has no OpenMP."""
    fn = getattr(getattr(model, "lib", None), "omp_set_num_threads", None) if model is not None else None
    if fn is None:
        return False
    fn(int(threads))
    return True


def _median_ms(fn: Callable[[], Any], runs: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, runs)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def time_runner(model: Any, arrays: Sequence[np.ndarray], runs: int = 20, threads: int = 1, warmup: int = 3) -> float:
    """Median milliseconds of ``model.run(arrays)`` at ``threads`` OpenMP threads."""
    set_runner_threads(model, threads)
    arrays = list(arrays)
    return _median_ms(lambda: model.run(arrays), runs, warmup)


def time_eager(fn: Callable[..., Any], args: tuple, kwargs: dict | None = None, runs: int = 20, threads: int = 1,
               warmup: int = 3) -> float:
    """Median milliseconds of ``fn(*args, **kwargs)`` under torch.inference_mode at ``threads`` threads."""
    import torch

    kwargs = kwargs or {}
    old = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        with torch.inference_mode():
            return _median_ms(lambda: fn(*args, **kwargs), runs, warmup)
    finally:
        torch.set_num_threads(old)


# --------------------------------------------------------------------------- inputs


def _np_dtype(dtype: str) -> np.dtype:
    from pt2c.runtime.runner import DTYPES

    return np.dtype(DTYPES[dtype])


def random_inputs(specs: Sequence[dict], seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs for manifest-style specs: float standard normal, ints zeros, bool ones."""
    rng = np.random.default_rng(seed)
    arrays = []
    for d in specs:
        dt = _np_dtype(d["dtype"])
        shape = tuple(d["shape"])
        if d["dtype"] == "bfloat16":
            from pt2c.ops.elementwise import bf16_bits

            arrays.append(bf16_bits(rng.standard_normal(shape).astype(np.float32)))
        elif np.issubdtype(dt, np.floating):
            arrays.append(rng.standard_normal(shape).astype(dt))
        elif dt == np.bool_:
            arrays.append(np.ones(shape, dt))
        else:
            arrays.append(np.zeros(shape, dt))
    return arrays


SANITIZE_FLAGS = "-g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -DPT2C_CHECKED_CALLS"


def _user_input_specs(ep: Any) -> list[dict]:
    """(name, shape, dtype) of an ExportedProgram's user inputs, from placeholder metadata."""
    import torch

    from pt2c.runtime.runner import DTYPES

    names = set(ep.graph_signature.user_inputs)
    specs = []
    for n in ep.graph.nodes:
        if n.op != "placeholder" or n.name not in names:
            continue
        val = n.meta.get("val")
        if val is None or type(val) in (bool, int, float, str):
            continue  # a Python value fixed at export (use_cache=False): not an input of the artifact
        if not isinstance(val, torch.Tensor):
            raise InputError(f"input {n.name!r} is not a tensor; pass inputs explicitly")
        try:
            shape = [int(s) for s in val.shape]
        except TypeError:
            raise InputError(f"input {n.name!r} has a dynamic shape; pass inputs explicitly") from None
        name = str(val.dtype).replace("torch.", "")
        if name not in DTYPES:
            raise InputError(f"input {n.name!r} has dtype {val.dtype}, which pt2c does not support")
        specs.append({"name": n.name, "shape": shape, "dtype": name})
    return specs


def _tensor_leaves(obj: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    return [x for x in pytree.tree_leaves(obj) if isinstance(x, torch.Tensor)]


def _to_numpy(t: Any) -> np.ndarray:
    """A torch tensor's data; bfloat16 (which numpy lacks) as its bits in a uint16 array."""
    import torch

    t = t.detach().cpu().contiguous()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def _to_torch(a: np.ndarray) -> Any:
    """_to_numpy's inverse (a copy): a uint16 array is bfloat16 bits."""
    import torch

    a = np.array(a)
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16 else torch.from_numpy(a)


# --------------------------------------------------------------------------- the standalone driver (on the target)


def _norm_arch(a: str) -> str:
    a = a.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "i686": "i386", "i586": "i386"}.get(a, a)


def is_cross_compiler(cc: str | None) -> bool:
    """True when ``cc`` (a command line) targets another architecture or OS than this host,
    judged from ``cc -dumpmachine`` (mingw/windows, wasi/wasm, emscripten count as another OS
    unless the host is that).  False when ``cc`` is None or cannot be asked."""
    if not cc:
        return False
    try:
        proc = subprocess.run(shlex.split(cc) + ["-dumpmachine"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError, ValueError):
        return False
    triple = proc.stdout.strip().lower()
    if proc.returncode != 0 or not triple:
        return False
    if _norm_arch(triple.split("-")[0]) != _norm_arch(platform.machine()):
        return True
    host_os = platform.system().lower()
    for marker, os_name in (("mingw", "windows"), ("windows", "windows"), ("wasi", "wasi"), ("emscripten", "wasi"),
                            ("darwin", "darwin"), ("apple", "darwin"), ("linux", "linux")):
        if marker in triple:
            return os_name != host_os
    return False


def _exe_suffix(cc: str, cflags: str) -> str:
    text = f"{cc} {cflags}".lower()
    if "mingw" in text or "windows" in text:
        return ".exe"
    if "wasm" in text or "wasi" in text or "emcc" in text:
        return ".wasm"
    return ""


def build_driver(out_dir: Any, *, cc: str = "cc", cflags: str | None = None, arch_flags: str | None = None,
                 exe: Any = None, timeout: float = 600) -> Path:
    """Compile ``<name>.c`` + ``<name>_driver.c`` of an artifact into one executable with ``cc``.

    cc:         the compiler command line (shlex-split: ``"python -m ziglang cc --target=wasm32-wasi"``).
    cflags:     optimisation/language flags (default ``-O2 -std=c99``).
    arch_flags: instruction-set flags (default: the target preset's, from manifest.json).
    exe:        the executable's path (default ``OUT_DIR/<name>_driver`` + ``.exe``/``.wasm`` as the
                compiler's target suggests).
    The command is ``CC CFLAGS ARCH_FLAGS -I OUT_DIR <name>.c <name>_driver.c -o EXE -lm`` (no
    OpenMP); a multi-versioned artifact's extra code paths are compiled first, each to an object
    with its own instruction-set flags, and linked in.  Returns the executable's path.  Raises
    BuildError with the compiler's output."""
    from pt2c.runtime.build import BuildError

    out = Path(out_dir)
    mpath = out / "manifest.json"
    if not mpath.is_file():
        raise BuildError(f"{out}: no manifest.json; is this a pt2c output folder?")
    m = json.loads(mpath.read_text())
    name = m["name"]
    if not (out / f"{name}_driver.c").is_file():
        raise BuildError(f"{out}: no {name}_driver.c (artifact written by an older pt2c? recompile it)")
    flags = cflags if cflags is not None else "-O2 -std=c99"
    arch = arch_flags if arch_flags is not None else " ".join(m.get("target_cflags", []))
    exe_path = Path(exe) if exe is not None else out / f"{name}_driver{_exe_suffix(cc, flags + ' ' + arch)}"
    base = shlex.split(cc) + shlex.split(flags) + shlex.split(arch) + ["-I", str(out)]
    if shutil.which(base[0]) is None:
        raise BuildError(f"C compiler {base[0]!r} was not found on PATH", cmd=base)
    objs = []
    for v in m.get("variants", []):  # multi-versioning: each code path with its own -march
        objs.append(str(exe_path.parent / f"{Path(v['file']).stem}.o"))
        _run_cc(base + v["cflags"] + ["-c", str(out / v["file"]), "-o", objs[-1]], timeout)
    _run_cc(base + [str(out / f"{name}.c"), str(out / f"{name}_driver.c"), *objs, "-o", str(exe_path), "-lm"], timeout)
    return exe_path


def _run_cc(cmd: list[str], timeout: float) -> None:
    from pt2c.runtime.build import BuildError

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(f"building the driver timed out after {timeout:.0f} s: {shlex.join(cmd)}", cmd=cmd) from None
    if proc.returncode != 0:
        raise BuildError(f"building the driver failed (exit {proc.returncode}): {shlex.join(cmd)}\n"
                         f"{(proc.stderr or proc.stdout).strip()[-20000:]}", cmd=cmd, returncode=proc.returncode,
                         stdout=proc.stdout, stderr=proc.stderr)


@dataclass
class DriverRun:
    """What :func:`run_driver` got back: the outputs, the driver's median latency (ms, None if
    not printed), its stdout/stderr, and the code path init chose (``isa``, e.g. "x86_64-v3")."""

    outputs: list[np.ndarray]
    median_ms: float | None
    stdout: str
    stderr: str
    cmd: list[str]
    isa: str | None = None


def run_driver(exe: Any, out_dir: Any, arrays: Sequence[np.ndarray], *, launcher: str | None = None,
               repeat: int = 1, timeout: float = 600, env: dict[str, str] | None = None) -> DriverRun:
    """Run a driver executable (through ``launcher``, shlex-split) on numpy inputs.

    Writes the inputs as raw little-endian ``.bin`` files in a temporary folder, runs
    ``LAUNCHER EXE WEIGHTS IN.bin... OUTS [--repeat N]`` and reads the ``.bin`` outputs back
    with the manifest's shapes and dtypes.  Raises RunError with the program's stderr on
    failure (non-zero exit, timeout, missing output)."""
    from pt2c.runtime.runner import DTYPES, RunError

    out = Path(out_dir)
    m = json.loads((out / "manifest.json").read_text())
    ins, outs = m["inputs"], m["outputs"]
    if len(arrays) != len(ins):
        raise RunError(f"{m['name']} takes {len(ins)} input(s), got {len(arrays)}")
    wfile = m.get("weights", {}).get("file")
    weights = str(out / wfile) if wfile else "-"
    with tempfile.TemporaryDirectory(prefix="pt2c-driver-") as tmp:
        tdir = Path(tmp)
        odir = tdir / "out"
        odir.mkdir()
        paths = []
        for k, (d, a) in enumerate(zip(ins, arrays)):
            want = np.dtype(DTYPES[d["dtype"]]).newbyteorder("<")
            a = np.asarray(a)
            if tuple(a.shape) != tuple(d["shape"]):
                raise RunError(f"input {d['name']!r}: shape {tuple(a.shape)}, expected {tuple(d['shape'])}")
            p = tdir / f"in{k}_{d['name']}.bin"
            np.ascontiguousarray(a.astype(want, copy=False)).tofile(p)
            paths.append(str(p))
        cmd = (shlex.split(launcher) if launcher else []) + [str(exe), weights, *paths, str(odir)]
        if repeat > 1:
            cmd += ["--repeat", str(int(repeat))]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=None if env is None else {**os.environ, **env})
        except FileNotFoundError as e:
            raise RunError(f"cannot run {cmd[0]!r}: {e}") from None
        except subprocess.TimeoutExpired:
            raise RunError(f"the driver timed out after {timeout:.0f} s: {shlex.join(cmd)}") from None
        if proc.returncode != 0:
            raise RunError(f"the driver failed (exit {proc.returncode}): {shlex.join(cmd)}\n"
                           f"{(proc.stderr or proc.stdout).strip()[-4000:]}")
        results = []
        for d in outs:
            p = odir / f"{d['name']}.bin"
            if not p.is_file():
                raise RunError(f"the driver did not write {p.name}: {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")
            dt = np.dtype(DTYPES[d["dtype"]]).newbyteorder("<")
            arr = np.fromfile(p, dtype=dt)
            if arr.size != int(np.prod(d["shape"], dtype=np.int64)):
                raise RunError(f"{p.name}: {arr.size} elements, expected {d['dtype']}{d['shape']}")
            results.append(arr.reshape(d["shape"]).astype(dt.newbyteorder("="), copy=False))
    mt = re.search(r"median latency: ([0-9.eE+-]+) ms", proc.stdout)
    mi = re.search(r"^isa: (\S+)", proc.stdout, re.M)
    return DriverRun(results, float(mt.group(1)) if mt else None, proc.stdout, proc.stderr, cmd,
                     mi.group(1) if mi else None)


# --------------------------------------------------------------------------- verify


def _compare_all(report: VerifyReport, onames: list[str], outs: list[np.ndarray], refs: list[np.ndarray],
                 tol: float | None) -> None:
    for i, name_i in enumerate(onames):
        if i >= len(refs):
            report.outputs.append(OutputCheck(name_i, tuple(outs[i].shape), str(outs[i].dtype), float("inf"),
                                              float("inf"), float("nan"), 0.0, False, "no matching eager output"))
            continue
        report.outputs.append(compare(name_i, outs[i], refs[i], tol))
    for j in range(len(onames), len(refs)):
        report.outputs.append(OutputCheck(f"<eager output {j}>", tuple(refs[j].shape), str(refs[j].dtype),
                                          float("inf"), float("inf"), float("nan"), 0.0, False,
                                          "eager output missing from the compiled model"))


def size_cases(sizes: list[dict]) -> list[dict[str, int]]:
    """The sizes a dynamic model is checked at besides the example's: each size at its minimum, an odd size
    inside its range and its maximum, the others at the example's."""
    base = {z["name"]: int(z["example"]) for z in sizes}
    cases = []
    for z in sizes:
        lo, hi = int(z["min"]), int(z["max"])
        odd = next((v for v in range((lo + hi) // 2 | 1, hi + 1, 2) if v not in (lo, hi)), None)
        for v in dict.fromkeys([lo, odd, hi]):
            if v is not None and v != base[z["name"]]:
                cases.append({**base, z["name"]: v})
    return cases


def size_value(expr: Any, sizes: dict[str, int]) -> int:
    """A manifest shape entry (an int, or a dynamic size's C expression: names, integers, + - * / % and
    parentheses) at given sizes."""
    import ast

    if isinstance(expr, int):
        return expr
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name) and n.id in sizes:
            return sizes[n.id]
        raise InputError(f"manifest.json: {expr!r} is not a size expression pt2c writes")

    return ev(ast.parse(str(expr), mode="eval").body)


def resized(arrays: list[np.ndarray], shapes: list[list], case: dict[str, int]) -> list[np.ndarray]:
    """The inputs at other sizes (shapes: the manifest's, with dynamic entries): each dim cut, or repeated
    cyclically, to its size there (token ids and masks keep their values)."""
    out = []
    for a, shape in zip(arrays, shapes):
        a = np.asarray(a)
        for d, e in enumerate(shape):
            n = size_value(e, case)
            if a.shape[d] != n:
                a = np.take(a, np.arange(n) % a.shape[d], axis=d)
        out.append(np.ascontiguousarray(a))
    return out


def _check_sizes(report: VerifyReport, model: Any, eager: Any, arrays: list[np.ndarray], tol: float | None) -> None:
    """A dynamic model checked against eager at other sizes (size_cases): one OutputCheck per output and case,
    named output@size=value."""
    import torch

    for case in size_cases(model.sizes):
        xs = resized(arrays, [d["shape"] for d in model.manifest["inputs"]], case)
        with torch.inference_mode():
            refs = [_to_numpy(t) for t in _tensor_leaves(eager(*[_to_torch(x) for x in xs]))]
        outs = model.run(xs)
        tag = ",".join(f"{k}={v}" for k, v in case.items())
        _compare_all(report, [f"{d['name']}@{tag}" for d in model.outputs], outs, refs, tol)


def _verify_on_target(work: Path, art: Any, target: str, refs: list[np.ndarray], arrays: list[np.ndarray],
                      source: str, tol: float | None, temporary: bool, compile_s: float, cc: str, cflags: str | None,
                      launcher: str | None, time_it: bool, runs: int, step: Callable[[str], None], eager: Any,
                      args: tuple, kwargs: dict) -> VerifyReport:
    step("build")
    t0 = time.perf_counter()
    exe = build_driver(work, cc=cc, cflags=cflags)
    build_s = time.perf_counter() - t0
    step("run")
    res = run_driver(exe, work, arrays, launcher=launcher, repeat=max(1, runs) if time_it else 1)
    step("compare")
    report = VerifyReport(name=art.name, target=target, tol=tol, input_source=source,
                          out_dir=None if temporary else work, lib_path=None if temporary else Path(exe),
                          compile_s=compile_s, build_s=build_s, isa=res.isa)
    _compare_all(report, [d["name"] for d in art.manifest["outputs"]], res.outputs, refs, tol)
    if time_it and res.median_ms is not None:
        step("time")
        report.timings.append(Timing(1, runs, res.median_ms, time_eager(eager, args, kwargs, runs=runs, threads=1)))
    return report


def verify(src: Any, out_dir: Any = None, *, example_inputs: tuple | None = None, example_kwargs: dict | None = None,
           inputs: Sequence[Any] | None = None,
           target: str = "native", cc: str | None = None, cflags: str | None = None, openmp: bool = True, seed: int = 0,
           tol: float | None = None, name: str | None = None, opt_level: int = 1, time_it: bool = False, runs: int = 20,
           threads: int | Sequence[int] = 1, command: str = "",
           progress: Callable[[str], None] | None = None, launcher: str | None = None,
           on_target: bool | None = None, force: bool = False, kernels: Any = None,
           decompose: Any = (), sanitize: bool = False) -> VerifyReport:
    """Compile, build and run ``src`` and compare every output with PyTorch eager.

    src:     a ``.pt2`` path, an ``ExportedProgram``, or an ``nn.Module`` (with
             ``example_inputs`` or ``inputs``, and ``example_kwargs``: keyword arguments such as
             ``use_cache=False``, fixed at export).
    out_dir: where the artifact goes; None: a temporary folder, removed afterwards. A new or empty
             folder, or one pt2c wrote before (checked first: OutputError); ``force``: any folder
             (see ``pt2c.compile``).
    inputs:  numpy arrays in the model's input order (or a dict by input name);
             default: the program's example inputs, else seeded random arrays.
    tol:     float outputs pass when max|out-ref| <= tol * max(1, max|ref|); default: by the output's
             dtype (1e-4; bfloat16 5e-2, float16 1e-2).  Integer/bool outputs must match exactly.
    time_it: also time the library and eager (median of ``runs`` runs) at each
             thread count in ``threads`` (default 1), filling ``report.timings``.
    progress: called with a step name ("load", "compile", "build", "run",
             "eager", "compare", "time") as each step starts.
    launcher: run on the target: build ``<name>.c`` + ``<name>_driver.c`` with ``cc``
             (default ``cc``) into an executable and run it as ``LAUNCHER EXE ...``
             (shlex-split; e.g. ``"qemu-aarch64 -L /usr/aarch64-linux-gnu"``).
    on_target: force (True) or forbid (False) the driver path; None (default): used when
             ``launcher`` is given or ``cc`` is a cross compiler (:func:`is_cross_compiler`;
             then the executable runs directly, e.g. through binfmt_misc).
    sanitize: build the driver with AddressSanitizer + UndefinedBehaviorSanitizer (and
             ``-DPT2C_CHECKED_CALLS``: every custom op kernel gets its tensors and scratch in
             buffers of exactly their size), so an out-of-bounds access fails the run.
    """
    import torch

    import pt2c
    from pt2c.frontend.load import load_program
    from pt2c.targets import get_targets, target_spec

    step = progress or (lambda s: None)
    tspec = target_spec(get_targets(target))  # ValueError early for a bad target
    if sanitize:
        on_target = True
        cflags = SANITIZE_FLAGS + (" " + cflags if cflags else " -O1 -std=c99")
    if on_target is None:
        on_target = bool(launcher) or is_cross_compiler(cc)
    thread_list = [int(threads)] if isinstance(threads, int) else [int(t) for t in threads]
    if out_dir is not None:  # a folder pt2c may not write: say so before the slow steps
        from pt2c.codegen.outdir import check_output_dir

        check_output_dir(out_dir, force)

    # -- the eager side: an ExportedProgram's module, or the nn.Module itself
    step("load")
    if isinstance(src, torch.nn.Module):
        eager = src.eval()
        ep = None
    else:
        ep, _ = load_program(src, sample_inputs=True)
        eager = ep.module()

    # -- inputs
    kwargs: dict = dict(example_kwargs or {})  # an nn.Module's keyword arguments (use_cache=False ...)
    if inputs is not None:
        if isinstance(inputs, dict):
            specs = _user_input_specs(ep) if ep is not None else None
            if specs is None:
                raise InputError("inputs given by name need an ExportedProgram or .pt2 (names come from its signature)")
            missing = [s["name"] for s in specs if s["name"] not in inputs]
            if missing:
                raise InputError(f"missing input(s) {missing}; the model takes {[s['name'] for s in specs]}")
            inputs = [inputs[s["name"]] for s in specs]
        arrays = [np.ascontiguousarray(np.asarray(a)) for a in inputs]
        args: tuple = tuple(_to_torch(a) for a in arrays)
        source = "given"
    else:
        ex = example_inputs
        if ex is None and ep is not None:
            ex = getattr(ep, "example_inputs", None)
        if ex is not None:
            if ep is not None and isinstance(ex, tuple) and len(ex) == 2 and isinstance(ex[1], dict) \
                    and isinstance(ex[0], tuple):
                args, kwargs = ex  # ep.example_inputs is (args, kwargs)
            else:
                args = tuple(ex)
            arrays = [_to_numpy(t) for t in _tensor_leaves((args, kwargs))]
            source = "example"
        else:
            if ep is None:
                raise InputError("an nn.Module needs example_inputs (or inputs) to be exported and verified")
            arrays = random_inputs(_user_input_specs(ep), seed)
            args = tuple(_to_torch(a) for a in arrays)
            source = "random"

    # -- reference first (compiling decomposes the program; keep eager independent of that)
    step("eager")
    with torch.inference_mode():
        try:
            ref_out = eager(*args, **kwargs)
        except (NotImplementedError, RuntimeError) as e:
            from pt2c.frontend.customops import declared_ops

            missing = [q for q in declared_ops() if q.split(".")[0] in str(e)]
            if not missing:
                raise
            raise InputError(f"PyTorch cannot run the program for reference: custom op {missing[0]} has no "
                             "implementation in this process (pt2c declared it from the .pt2 to compile it).\n"
                             "What to try: import the library that defines it first (pt2c verify --import "
                             "FILE.py).") from None
    refs = [_to_numpy(t) for t in _tensor_leaves(ref_out)]

    # -- compile, build, load, run
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="pt2c-verify-")
        work = Path(tmp.name)
    else:
        work = Path(out_dir)
    old_omp = os.environ.get("OMP_NUM_THREADS")
    try:
        step("compile")
        t0 = time.perf_counter()
        if isinstance(src, torch.nn.Module):
            art = pt2c.compile(src, work, example_inputs=tuple(args), example_kwargs=kwargs, target=tspec, name=name,
                               openmp=openmp, opt_level=opt_level, command=command, force=force, kernels=kernels, decompose=decompose)
        else:
            art = pt2c.compile(src, work, target=tspec, name=name, openmp=openmp, opt_level=opt_level,
                               command=command, force=force, kernels=kernels, decompose=decompose)
        compile_s = time.perf_counter() - t0

        if on_target:
            try:
                return _verify_on_target(work, art, tspec, refs, arrays, source, tol, tmp is not None, compile_s,
                                         cc or "cc", cflags, launcher, time_it, runs, step, eager, args, kwargs)
            except Exception as e:
                found = re.findall(r"^(?:==\d+==ERROR: .*|SUMMARY: .*|.*runtime error: .*)$", str(e), re.M)
                if not (sanitize and found):
                    raise
                from pt2c.runtime.runner import RunError

                raise RunError("the sanitizers caught a memory or undefined-behaviour error:\n  "
                               + "\n  ".join(dict.fromkeys(found)) + "\n(the full report: rerun with -o DIR and "
                               "run DIR's driver; a custom op kernel is named by its file in custom_ops/)") from None

        step("build")
        t0 = time.perf_counter()
        lib = pt2c.build(work, cc=cc, cflags=cflags, openmp=openmp)
        build_s = time.perf_counter() - t0

        step("run")
        if time_it:
            # libgomp reads OMP_NUM_THREADS when it initialises; set it before loading
            os.environ["OMP_NUM_THREADS"] = str(thread_list[0])
        model = pt2c.load(work, lib=lib)
        outs = model.run(arrays)

        step("compare")
        report = VerifyReport(name=art.name, target=tspec, tol=tol, input_source=source,
                              out_dir=None if tmp else work, lib_path=None if tmp else Path(lib),
                              compile_s=compile_s, build_s=build_s, isa=model.isa)
        _compare_all(report, [d["name"] for d in model.outputs], outs, refs, tol)
        if model.sizes and not kwargs:
            step("sizes")
            _check_sizes(report, model, eager, arrays, tol)

        if time_it:
            step("time")
            for th in thread_list:
                p = time_runner(model, arrays, runs=runs, threads=th)
                e = time_eager(eager, args, kwargs, runs=runs, threads=th)
                report.timings.append(Timing(th, runs, p, e))
        return report
    finally:
        if time_it:
            if old_omp is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = old_omp
        if tmp is not None:
            tmp.cleanup()
