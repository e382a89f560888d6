"""Target presets: which compiler flags the generated build files use.

A target is pure data: a name, an architecture, a tuple of compiler flags and
the SIMD level the kernels may assume.  The flags end up, verbatim, in the
generated ``CMakeLists.txt`` / ``Makefile`` / ``build.sh`` (where the user can
override them), so the artifact is the same whichever machine runs ``pt2c``.

Nothing here ever looks at the host.  The single exception is the ``native``
preset, the one explicit opt-in to ``-march=native``: it is still just a flag,
the probing is done by the compiler on the machine that builds the artifact.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A compilation target preset.

    name:        the spec accepted by :func:`get_target` (``"x86_64-v3"``).
    arch:        the CPU architecture (``"x86_64"``, ``"aarch64"``, ``"any"``...).
    cflags:      compiler flags selecting the instruction set (gcc/clang syntax).
    description: one human-readable line.
    simd:        the SIMD level the kernels may use (``"none"``, ``"sse2"``,
                 ``"avx2+fma"``, ``"avx512"``, ``"neon"``, ``"simd128"``,
                 ``"host"``).  Informational: kernels select their code paths
                 from the compiler's predefined macros (``__AVX2__``...), which
                 these flags set.
    cross_cc:    a cross compiler known to build this target from x86-64 Linux
                 (what the tests use; informational, ``""`` for the host's cc).
    launcher:    how the tests run the result on an x86-64 Linux host (emulator
                 or runtime), for ``pt2c verify --exec``; ``""``: runs natively
                 (or, for a freestanding target, is only compiled and linked).
    freestanding: the target has no OS (bare-metal microcontroller): compiling
                 for it implies ``freestanding=True`` (embedded weights, no
                 OpenMP; the library needs no malloc, stdio, threads or files).
    backend:     ``"c"`` (C99 for a CPU), ``"cuda"`` (CUDA C++ built by nvcc) or
                 ``"opencl"`` (C99 host code + OpenCL C kernels the driver
                 compiles at init).
    gpu_archs:   CUDA: the compute capabilities to build machine code for
                 (``(80, 90)`` for sm_80 and sm_90); the last one's PTX is
                 embedded too, for newer GPUs.
    """

    name: str
    arch: str
    cflags: tuple[str, ...]
    description: str
    simd: str
    cross_cc: str = ""
    launcher: str = ""
    freestanding: bool = False
    backend: str = "c"
    gpu_archs: tuple[int, ...] = ()

    @property
    def is_gpu(self) -> bool:
        return self.backend != "c"

    def describe(self) -> str:
        """One line: ``name  (arch, simd)  flags  - description``."""
        flags = " ".join(self.cflags) if self.cflags else "(no flags)"
        return f"{self.name:<10} [{self.arch}, simd: {self.simd}] {flags} - {self.description}"

    @property
    def flags_str(self) -> str:
        """The flags as one space-separated string (for build files)."""
        return " ".join(self.cflags)


def _t(
    name: str,
    arch: str,
    cflags: tuple[str, ...],
    simd: str,
    description: str,
    cross_cc: str = "",
    launcher: str = "",
    freestanding: bool = False,
) -> Target:
    return Target(
        name=name,
        arch=arch,
        cflags=cflags,
        description=description,
        simd=simd,
        cross_cc=cross_cc,
        launcher=launcher,
        freestanding=freestanding,
    )


# Cross toolchains the tests prove (tests/test_targets.py, docs/targets.md).
_WASM_CC = "python -m ziglang cc --target=wasm32-wasi"
_WASM_RUN = "python -m pt2c.runtime.wasirun"


# Ordered: this is the order help texts list them in.
TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        _t(
            "generic",
            "any",
            ("-DPT2C_NO_SIMD",),
            "none",
            "portable C99, no instruction-set flags, SIMD code paths disabled",
        ),
        _t(
            "x86_64",
            "x86_64",
            ("-march=x86-64",),
            "sse2",
            "x86-64 baseline (SSE2), runs on every 64-bit x86 CPU",
            "x86_64-w64-mingw32-gcc",
            "wine",
        ),
        _t(
            "x86_64-v2",
            "x86_64",
            ("-march=x86-64-v2",),
            "sse4.2",
            "x86-64-v2 (SSE4.2, POPCNT; ~2009+ CPUs)",
        ),
        _t(
            "x86_64-v3",
            "x86_64",
            ("-march=x86-64-v3",),
            "avx2+fma",
            "x86-64-v3 (AVX2, FMA, BMI2; Haswell / Zen 1 and later)",
        ),
        _t(
            "x86_64-v4",
            "x86_64",
            ("-march=x86-64-v4",),
            "avx512",
            "x86-64-v4 (AVX-512 F/BW/CD/DQ/VL; Skylake-X / Zen 4 and later)",
        ),
        _t(
            "aarch64",
            "aarch64",
            ("-march=armv8-a",),
            "neon",
            "64-bit Arm baseline (ARMv8-A, NEON)",
            "aarch64-linux-gnu-gcc",
            "qemu-aarch64 -L /usr/aarch64-linux-gnu",
        ),
        _t(
            "aarch64+dotprod",
            "aarch64",
            ("-march=armv8.2-a+dotprod",),
            "neon",
            "ARMv8.2-A + dot product (Cortex-A55/A75, Neoverse, Apple M and later): the compiler may use "
            "v8.2 instructions; the fp32 kernels use the NEON path; init checks the CPU (Linux: getauxval)",
            "aarch64-linux-gnu-gcc",
            "qemu-aarch64 -L /usr/aarch64-linux-gnu",
        ),
        _t(
            "riscv64",
            "riscv64",
            ("-march=rv64gc",),
            "none",
            "64-bit RISC-V (RV64GC, scalar code)",
            "riscv64-linux-gnu-gcc",
            "qemu-riscv64 -L /usr/riscv64-linux-gnu",
        ),
        _t(
            "wasm32",
            "wasm32",
            ("-msimd128",),
            "simd128",
            "WebAssembly with 128-bit SIMD (compile with emcc or clang --target=wasm32)",
            _WASM_CC,
            _WASM_RUN,
        ),
        _t(
            "cortex-m",
            "arm",
            ("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"),
            "none",
            "Arm Cortex-M7 microcontroller, bare metal (Thumb-2, single-precision FPU, scalar code; "
            "implies --freestanding)",
            "arm-none-eabi-gcc",
            "",
            freestanding=True,
        ),
        _t(
            "native",
            "host",
            ("-march=native",),
            "host",
            "whatever the building machine supports (-march=native); not portable",
        ),
    )
}

# Common alternative spellings.
_ALIASES: dict[str, str] = {
    "x86-64": "x86_64",
    "amd64": "x86_64",
    "x86-64-v2": "x86_64-v2",
    "x86-64-v3": "x86_64-v3",
    "x86-64-v4": "x86_64-v4",
    "avx2": "x86_64-v3",
    "avx512": "x86_64-v4",
    "arm64": "aarch64",
    "rv64gc": "riscv64",
    "wasm": "wasm32",
    "portable": "generic",
    "cortex-m7": "cortex-m",
    "cortexm": "cortex-m",
    "arm-none-eabi": "cortex-m",
}


# CUDA architectures built when `--target cuda` names none: Turing, Ampere, Hopper (+ Hopper's PTX)
CUDA_DEFAULT_ARCHS = (75, 80, 90)
OPENCL = Target("opencl", "opencl", (), "C99 host code + OpenCL C kernels compiled by the GPU driver at init: "
                "NVIDIA, AMD, Intel, mobile GPUs and CPU drivers such as pocl", "opencl", backend="opencl")


def cuda_target(spec: str) -> Target:
    """``cuda`` or ``cuda:sm_80,sm_90``: machine code for each listed architecture, and the last one's PTX,
    which the driver compiles for any newer GPU.  Raises ValueError for a malformed or too old architecture."""
    _, _, archs = spec.partition(":")
    nums: list[int] = []
    for a in [x.strip() for x in archs.split(",") if x.strip()] if archs else []:
        digits = a.lower().removeprefix("sm_").removeprefix("compute_")
        if not digits.isdigit() or len(digits) > 3:
            raise ValueError(f"target {spec!r}: {a!r} is not a CUDA architecture (write sm_75, sm_80, sm_90, ...)")
        n = int(digits)
        if n < 75:
            raise ValueError(f"target {spec!r}: sm_{n} is older than CUDA 13 builds for (sm_75 and newer)")
        if n in nums:
            raise ValueError(f"target {spec!r} lists sm_{n} more than once")
        nums.append(n)
    nums = nums or list(CUDA_DEFAULT_ARCHS)
    flags = tuple(f"-gencode=arch=compute_{n},code=sm_{n}" for n in nums) + (
        f"-gencode=arch=compute_{nums[-1]},code=compute_{nums[-1]}",)
    name = "cuda:" + ",".join(f"sm_{n}" for n in nums)
    return Target(name, "cuda", flags, f"CUDA C++ for {', '.join(f'sm_{n}' for n in nums)} (+ PTX of sm_{nums[-1]} "
                  "for newer GPUs), built by nvcc", "cuda", backend="cuda", gpu_archs=tuple(nums))


def get_target(spec: str | Target) -> Target:
    """Return the preset named ``spec`` (case-insensitive; a few aliases such
    as ``arm64`` or ``amd64`` are accepted).  A :class:`Target` is returned as
    is.  Raises ``ValueError`` listing the valid names for an unknown spec."""
    if isinstance(spec, Target):
        return spec
    key = str(spec).strip().lower().replace(" ", "")
    if key == "cuda" or key.startswith("cuda:"):
        return cuda_target(key)
    if key == "opencl":
        return OPENCL
    key = _ALIASES.get(key, key)
    try:
        return TARGETS[key]
    except KeyError:
        valid = ", ".join(TARGETS) + ", cuda[:sm_XX,...], opencl"
        raise ValueError(
            f"unknown target {spec!r}; valid targets: {valid} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        ) from None


# The x86-64 micro-architecture levels, in order: the presets a multi-version target combines.
X86_LEVELS = ("x86_64", "x86_64-v2", "x86_64-v3", "x86_64-v4")


def get_targets(spec: str | Target) -> list[Target]:
    """Parse a target spec that may list several x86-64 levels (``"x86_64,x86_64-v3,x86_64-v4"``):
    the artifact then carries one code path per level and picks the best at init by asking the
    CPU (multi-versioning).  Returns the presets lowest level first: the first is the baseline
    the library is built for, the others are the extra code paths.  A single name gives a
    one-element list.  Raises ``ValueError`` for unknown names, duplicates, or a list that mixes
    in presets other than the x86-64 levels."""
    if isinstance(spec, Target):
        return [spec]
    key = str(spec).strip().lower().replace(" ", "")
    if key == "cuda" or key.startswith("cuda:"):
        return [cuda_target(key)]
    if key == "opencl":
        return [OPENCL]
    parts = [p for p in str(spec).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"empty target spec {spec!r}; valid targets: {', '.join(TARGETS)}")
    tgts = [get_target(p) for p in parts]
    if len(tgts) == 1:
        return tgts
    others = [t.name for t in tgts if t.name not in X86_LEVELS]
    if others:
        raise ValueError(
            f"target {spec!r}: multi-versioning combines the x86-64 levels ({', '.join(X86_LEVELS)}), "
            f"not {', '.join(others)}; on aarch64 NEON is the baseline and the kernels use no later "
            "extension, so compile for one target there")
    names = [t.name for t in tgts]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"target {spec!r} lists {', '.join(dups)} more than once")
    return sorted(tgts, key=lambda t: X86_LEVELS.index(t.name))


def target_spec(tgts: list[Target]) -> str:
    """The canonical spelling of a target list (what manifest.json records)."""
    return ",".join(t.name for t in tgts)


__all__ = ["CUDA_DEFAULT_ARCHS", "OPENCL", "cuda_target", "TARGETS", "X86_LEVELS", "Target", "get_target", "get_targets", "target_spec"]
