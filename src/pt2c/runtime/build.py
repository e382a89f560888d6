"""Build a generated artifact folder into a shared library.

:func:`build` drives the artifact's own build files (the generated
``Makefile``, or ``CMakeLists.txt`` with ``use="cmake"``) with the user's
compiler and flags and nothing else, and returns the path of the shared
library.  Failures raise :class:`BuildError` carrying the tool's stderr.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings

__all__ = ["BuildError", "build", "find_nvcc", "openmp_supported"]

_MAX_LOG = 20000  # characters of stderr kept in a BuildError message


class BuildError(RuntimeError):
    """Building the artifact failed (or a tool it needs is missing).

    Attributes: ``cmd`` (the argv that failed, or None), ``returncode``,
    ``stdout`` and ``stderr`` (the tool's output, possibly empty).
    """

    def __init__(
        self,
        message: str,
        cmd: list[str] | None = None,
        returncode: int | None = None,
        stdout: str = "",
        stderr: str = "",
    ):
        super().__init__(message)
        self.cmd = cmd
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


# ---------------------------------------------------------------------------
# helpers


def _require_tool(tool: str, what: str, hint: str = "") -> str:
    path = shutil.which(tool)
    if path is None:
        msg = f"{what} {tool!r} was not found on PATH"
        raise BuildError(msg + (f"; {hint}" if hint else ""))
    return path


def _tail(text: str) -> str:
    return text if len(text) <= _MAX_LOG else "...\n" + text[-_MAX_LOG:]


def _run(
    cmd: list[str], cwd: pathlib.Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(
            cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True
        )
    except FileNotFoundError as e:  # raced with which(), or a bad CC word
        raise BuildError(f"cannot run {cmd[0]!r}: {e}", cmd=cmd) from None
    if proc.returncode != 0:
        out = proc.stderr.strip() or proc.stdout.strip()
        raise BuildError(
            f"build command failed (exit {proc.returncode}): {shlex.join(cmd)}\n{_tail(out)}",
            cmd=cmd,
            returncode=proc.returncode,
            stdout=proc.stdout,
            stderr=proc.stderr,
        )
    return proc


def _compiler_argv(cc: str | None) -> list[str]:
    """The compiler command as argv (CC may be e.g. ``ccache gcc``)."""
    spec = cc if cc is not None else os.environ.get("CC") or "cc"
    argv = shlex.split(spec)
    if not argv:
        raise BuildError("empty compiler command")
    return argv


_OMP_PROBE = """\
#include <omp.h>
int main(void) {
    int n = 0;
#pragma omp parallel reduction(+:n)
    n += 1;
    return (n > 0 && omp_get_max_threads() > 0) ? 0 : 1;
}
"""


@functools.cache
def _openmp_probe(cc: tuple[str, ...], cflags: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="pt2c-omp-") as tmp:
        src = pathlib.Path(tmp, "probe.c")
        src.write_text(_OMP_PROBE)
        cmd = [
            *cc,
            *shlex.split(cflags),
            "-fopenmp",
            str(src),
            "-o",
            str(pathlib.Path(tmp, "probe")),
        ]
        try:
            proc = subprocess.run(
                cmd, check=False, capture_output=True, text=True, cwd=tmp
            )
        except OSError:
            return False
        return proc.returncode == 0


def openmp_supported(cc: str | None = None, cflags: str | None = None) -> bool:
    """Whether ``cc -fopenmp`` compiles and links a trivial OpenMP program
    (checked once per compiler/flags and cached)."""
    return _openmp_probe(tuple(_compiler_argv(cc)), cflags or "")


def _model_name(out_dir: pathlib.Path) -> str:
    """The model name: from the generated Makefile, else manifest.json, else
    the only ``<name>.c`` with a matching ``<name>.h``."""
    mk = out_dir / "Makefile"
    if mk.is_file():
        m = re.search(r"^NAME\s*=\s*(\w+)\s*$", mk.read_text(), re.MULTILINE)
        if m:
            return m.group(1)
    manifest = out_dir / "manifest.json"
    if manifest.is_file():
        try:
            name = json.loads(manifest.read_text()).get("name")
        except (ValueError, AttributeError):
            name = None
        if isinstance(name, str) and name:
            return name
    cands = sorted(p.stem for p in out_dir.glob("*.c") if p.with_suffix(".h").is_file())
    if len(cands) == 1:
        return cands[0]
    raise BuildError(
        f"cannot tell the model name of {out_dir} "
        "(no generated Makefile, manifest.json or single <name>.c/<name>.h)"
    )


def _shared_lib_names(name: str) -> list[str]:
    if sys.platform == "darwin":
        return [f"lib{name}.dylib", f"lib{name}.so"]
    if os.name == "nt":
        return [f"{name}.dll", f"lib{name}.dll"]
    return [f"lib{name}.so"]


def _flags_changed(build_dir: pathlib.Path, state: dict) -> bool:
    """Record the build settings; True when they differ from the last build
    in ``build_dir`` (so make must rebuild even though no source changed)."""
    stamp = build_dir / ".pt2c-build-settings.json"
    new = json.dumps(state, sort_keys=True)
    old = stamp.read_text() if stamp.is_file() else None
    build_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(new)
    return old != new


# ---------------------------------------------------------------------------


# flags that change NaN / Inf semantics or IEEE rounding (gcc and clang spellings)
UNSAFE_MATH = ("-ffast-math", "-Ofast", "-ffinite-math-only", "-fno-honor-nans", "-fno-honor-infinities",
               "-funsafe-math-optimizations", "-fassociative-math", "-fno-signed-zeros")


def unsafe_math_flags(cflags: str | None) -> list[str]:
    """The flags in `cflags` that break IEEE NaN/Inf semantics (pt2c warns about them)."""
    try:
        words = shlex.split(cflags or "")
    except ValueError:
        words = (cflags or "").split()
    return [w for w in words if w in UNSAFE_MATH or w.startswith("-ffast-math")]


def build(
    out_dir: str | os.PathLike,
    cc: str | None = None,
    cflags: str | None = None,
    openmp: bool = True,
    use: str = "make",
) -> pathlib.Path:
    """Build the artifact in ``out_dir`` and return the shared library's path.

    cc:     compiler command (default: $CC, else ``cc``).
    cflags: compiler flags replacing the build files' defaults (``-O3
            -std=c99`` for make; CMake's build-type flags for cmake, where
            given cflags become CMAKE_C_FLAGS with no build-type flags added).
            The target preset's instruction-set flags are kept either way.
    openmp: build with OpenMP; if the compiler cannot do ``-fopenmp`` the
            build falls back to no OpenMP with a warning.
    use:    ``"make"`` (``out_dir/build/``) or ``"cmake"``
            (``out_dir/build-cmake/``).
    """
    out_dir = pathlib.Path(out_dir).resolve()
    if not out_dir.is_dir():
        raise BuildError(f"artifact folder {out_dir} does not exist")
    if use not in ("make", "cmake"):
        raise ValueError(f"use must be 'make' or 'cmake', not {use!r}")
    name = _model_name(out_dir)
    backend = _backend(out_dir)
    if backend == "cuda":
        if use == "cmake":
            return _build_cmake(out_dir, name, None, None, False)
        return _build_make(out_dir, name, None, None, False, [f"NVCC={find_nvcc()}"])
    if backend == "opencl":
        openmp = False  # (the host code has no loops to spread)

    cc_argv = _compiler_argv(cc)
    _require_tool(
        cc_argv[0], "C compiler", "install gcc or clang, or pass cc=... / set $CC"
    )

    unsafe = unsafe_math_flags(cflags)
    if unsafe:
        warnings.warn(
            f"cflags {' '.join(unsafe)} let the compiler assume there are no NaNs or infinities (and reorder "
            "float math): NaN/Inf inputs, masked attention scores (-inf) and overflow checks may give wrong "
            "results; the outputs are no longer checked against PyTorch's semantics",
            RuntimeWarning,
            stacklevel=2,
        )

    if openmp and backend == "c" and not openmp_supported(cc, cflags):
        warnings.warn(
            f"compiler {shlex.join(cc_argv)!r} cannot build OpenMP programs "
            "(-fopenmp failed); building without OpenMP (single-threaded)",
            RuntimeWarning,
            stacklevel=2,
        )
        openmp = False

    if use == "make":
        return _build_make(out_dir, name, cc, cflags, openmp)
    return _build_cmake(out_dir, name, cc, cflags, openmp)


def _backend(out_dir: pathlib.Path) -> str:
    """The artifact's backend (manifest.json): "c", "cuda" or "opencl"."""
    try:
        return str(json.loads((out_dir / "manifest.json").read_text()).get("backend", "c"))
    except (OSError, ValueError, AttributeError):
        return "c"


def find_nvcc() -> str:
    """nvcc: $NVCC, else on PATH, else under $CUDA_PATH / $CUDA_HOME / /usr/local/cuda."""
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"),
                 *(os.path.join(d, "bin", "nvcc") for d in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"),
                                                           "/usr/local/cuda") if d)):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise BuildError("the CUDA compiler nvcc was not found ($NVCC, PATH, $CUDA_PATH, /usr/local/cuda); "
                     "install the CUDA toolkit or set NVCC=/path/to/nvcc")


def _build_make(
    out_dir: pathlib.Path, name: str, cc: str | None, cflags: str | None, openmp: bool, extra: list[str] | None = None
) -> pathlib.Path:
    make = _require_tool("make", "build tool", "install GNU make or use use='cmake'")
    if not (out_dir / "Makefile").is_file():
        raise BuildError(f"{out_dir} has no Makefile (was it generated by pt2c?)")
    build_dir = out_dir / "build"
    cmd = [make, "-C", str(out_dir), f"OPENMP={1 if openmp else 0}", "BUILDDIR=build"]
    if cc is not None:
        cmd.append(f"CC={cc}")
    if cflags is not None:
        cmd.append(f"CFLAGS={cflags}")
    state = {
        "cc": cc if cc is not None else os.environ.get("CC"),
        "cflags": cflags if cflags is not None else os.environ.get("CFLAGS"),
        "openmp": openmp,
    }
    cmd += extra or []
    if _flags_changed(build_dir, state):
        cmd.append("-B")  # settings changed: rebuild everything
    cmd.append("shared")
    _run(cmd)
    lib = build_dir / f"lib{name}.so"
    if not lib.is_file():
        raise BuildError(f"make succeeded but {lib} is missing")
    return lib


def _build_cmake(
    out_dir: pathlib.Path, name: str, cc: str | None, cflags: str | None, openmp: bool
) -> pathlib.Path:
    cmake = _require_tool(
        "cmake", "build tool", "install CMake (>= 3.13) or use use='make'"
    )
    if not (out_dir / "CMakeLists.txt").is_file():
        raise BuildError(f"{out_dir} has no CMakeLists.txt (was it generated by pt2c?)")
    build_dir = out_dir / "build-cmake"
    state = {
        "cc": cc if cc is not None else os.environ.get("CC"),
        "cflags": cflags if cflags is not None else os.environ.get("CFLAGS"),
        "openmp": openmp,
    }
    stamp = build_dir / ".pt2c-build-settings.json"
    if stamp.is_file() and stamp.read_text() != json.dumps(state, sort_keys=True):
        shutil.rmtree(build_dir)  # settings changed: configure afresh (no stale cache)
    cfg = [
        cmake,
        "-S",
        str(out_dir),
        "-B",
        str(build_dir),
        "-DBUILD_SHARED_LIBS=ON",
        f"-DPT2C_OPENMP={'ON' if openmp else 'OFF'}",
    ]
    if cc is not None:
        cc_argv = shlex.split(cc)
        if len(cc_argv) > 1:  # e.g. "ccache gcc"
            cfg.append(f"-DCMAKE_C_COMPILER_LAUNCHER={';'.join(cc_argv[:-1])}")
        cfg.append(f"-DCMAKE_C_COMPILER={cc_argv[-1]}")
    if cflags is not None:
        # A build type without flags of its own: only CMAKE_C_FLAGS apply.
        cfg += ["-DCMAKE_BUILD_TYPE=None", f"-DCMAKE_C_FLAGS={cflags}"]
    _run(cfg)
    _flags_changed(build_dir, state)
    _run([cmake, "--build", str(build_dir), "--config", "Release", "--target", name])
    for sub in ("", "Release"):
        for fname in _shared_lib_names(name):
            lib = build_dir / sub / fname if sub else build_dir / fname
            if lib.is_file():
                return lib
    raise BuildError(f"cmake succeeded but no shared library for {name} in {build_dir}")
