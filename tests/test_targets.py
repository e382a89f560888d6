"""Targets: cross builds proven by running them, the standalone driver, the init-time ISA check.

For a CNN (resnet18 tiny) and a transformer (gpt2 tiny), the artifact is compiled with
``--target T``, ``<name>.c`` + ``<name>_driver.c`` are built with the target's compiler and
the driver runs under the target's emulator / runtime; its outputs are compared with
PyTorch eager (max|out - ref| <= 1e-4 * max(1, max|ref|)).

Toolchains (each test skips, naming the install line, when its tool is missing):

  aarch64  aarch64-linux-gnu-gcc + qemu-aarch64 -L /usr/aarch64-linux-gnu
           apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
  riscv64  riscv64-linux-gnu-gcc + qemu-riscv64 -L /usr/riscv64-linux-gnu
           apt-get install -y --no-install-recommends gcc-riscv64-linux-gnu libc6-dev-riscv64-cross qemu-user
  windows  x86_64-w64-mingw32-gcc + wine (64-bit)
           apt-get install -y --no-install-recommends gcc-mingw-w64-x86-64 wine wine64
  wasm32   python -m ziglang cc --target=wasm32-wasi + wasmtime (python -m pt2c.runtime.wasirun)
           pip install ziglang wasmtime
  x86 ISA  qemu-x86_64 -cpu qemu64 / Haswell (no AVX2 / no AVX-512) for the init-time ISA check
           apt-get install -y --no-install-recommends qemu-user

All builds use -O2 -std=c99 -Wall -Wextra -Werror -pedantic and no OpenMP.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pt2c
from pt2c.runtime.runner import RunError
from pt2c.runtime.verify import build_driver, is_cross_compiler, run_driver, verify

from conftest import GCC_CFLAGS, STRICT_CFLAGS, assert_outputs_close, copy_artifact, private_lib_copy

CFLAGS = "-O2 " + STRICT_CFLAGS
APT_AARCH64 = "apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
APT_RISCV64 = "apt-get install -y --no-install-recommends gcc-riscv64-linux-gnu libc6-dev-riscv64-cross qemu-user"
APT_MINGW = "apt-get install -y --no-install-recommends gcc-mingw-w64-x86-64 wine wine64"
PIP_WASM = "pip install ziglang wasmtime"
APT_QEMU = "apt-get install -y --no-install-recommends qemu-user"

FAMILIES = ["resnet18", "gpt2"]


def _have_module(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def _wine() -> str | None:
    for c in ("wine64", "wine"):
        if shutil.which(c):
            return shutil.which(c)
    for p in ("/usr/lib/wine/wine64", "/usr/lib/wine/wine"):
        if os.access(p, os.X_OK):
            return p
    return None


def _toolchain(name: str, tmp_root: Path) -> dict:
    """target, cc, launcher, env for a toolchain; pytest.skip with the install line if missing."""
    if name == "aarch64":
        for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64"):
            if not shutil.which(tool):
                pytest.skip(f"{tool} not found; install with: {APT_AARCH64}")
        return {"target": "aarch64", "cc": "aarch64-linux-gnu-gcc",
                "launcher": "qemu-aarch64 -L /usr/aarch64-linux-gnu", "env": None}
    if name == "riscv64":
        for tool in ("riscv64-linux-gnu-gcc", "qemu-riscv64"):
            if not shutil.which(tool):
                pytest.skip(f"{tool} not found; install with: {APT_RISCV64}")
        return {"target": "riscv64", "cc": "riscv64-linux-gnu-gcc",
                "launcher": "qemu-riscv64 -L /usr/riscv64-linux-gnu", "env": None}
    if name == "windows":
        if not shutil.which("x86_64-w64-mingw32-gcc"):
            pytest.skip(f"x86_64-w64-mingw32-gcc not found; install with: {APT_MINGW}")
        wine = _wine()
        if wine is None:
            pytest.skip(f"wine not found; install with: {APT_MINGW}")
        prefix = tmp_root / "wineprefix"
        return {"target": "x86_64", "cc": "x86_64-w64-mingw32-gcc", "launcher": shlex.quote(wine),
                "env": {"WINEPREFIX": str(prefix), "WINEDEBUG": "-all"}}
    if name == "wasm32":
        for mod in ("ziglang", "wasmtime"):
            if not _have_module(mod):
                pytest.skip(f"python package {mod} not found; install with: {PIP_WASM}")
        py = shlex.quote(sys.executable)
        return {"target": "wasm32", "cc": f"{py} -m ziglang cc --target=wasm32-wasi",
                "launcher": f"{py} -m pt2c.runtime.wasirun", "env": None}
    raise AssertionError(name)


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("targets")


def _compile(zoo_cache, family: str, target: str, root: Path):
    c = zoo_cache.get(family)
    out = root / f"{family}_{target}"
    if not (out / "manifest.json").is_file():
        pt2c.compile(c.ep, out, target=target, name=family)
    return c, out


# --------------------------------------------------------------------------- cross builds, run


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("toolchain", ["aarch64", "riscv64", "windows", "wasm32"])
def test_cross_build_runs_on_target(zoo_cache, tmp_root: Path, toolchain: str, family: str) -> None:
    tc = _toolchain(toolchain, tmp_root)
    c, out = _compile(zoo_cache, family, tc["target"], tmp_root)
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"] == tc["target"]
    exe = build_driver(out, cc=tc["cc"], cflags=CFLAGS)
    res = run_driver(exe, out, c.np_inputs, launcher=tc["launcher"], env=tc["env"], repeat=2, timeout=300)
    assert_outputs_close(res.outputs, c.refs, f"{family} on {toolchain}")
    assert res.median_ms is not None and res.median_ms >= 0


# --------------------------------------------------------------------------- x86: SIMD path vs scalar fallback


@pytest.mark.parametrize("family", FAMILIES)
def test_x86_simd_and_scalar_paths_agree(zoo_cache, tmp_root: Path, family: str) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not found")
    c, out = _compile(zoo_cache, family, "x86_64-v3", tmp_root)
    simd = build_driver(out, cc="gcc", cflags=CFLAGS, exe=out / "drv_simd")
    scalar = build_driver(out, cc="gcc", cflags=CFLAGS + " -DPT2C_NO_SIMD", exe=out / "drv_scalar")
    a = run_driver(simd, out, c.np_inputs).outputs
    b = run_driver(scalar, out, c.np_inputs).outputs
    assert_outputs_close(a, c.refs, f"{family} x86_64-v3")
    assert_outputs_close(b, c.refs, f"{family} x86_64-v3 -DPT2C_NO_SIMD")
    assert_outputs_close(a, [x.astype(x.dtype) for x in b], f"{family} SIMD vs scalar")


# --------------------------------------------------------------------------- the driver itself


def test_driver_strict_compilers_and_errors(zoo_cache, tmp_root: Path) -> None:
    c = zoo_cache.get("mlp")
    out = c.out_dir
    drv = out / "mlp_driver.c"
    assert drv.is_file() and "mlp_driver.c" in c.artifact.files
    # not part of the library build
    for f in ("Makefile", "CMakeLists.txt", "build.sh", "compile_commands.json"):
        if (out / f).is_file():
            assert "mlp_driver" not in (out / f).read_text(), f
    ccs = [cc for cc in ("gcc", "clang") if shutil.which(cc)]
    if not ccs:
        pytest.skip("no gcc/clang")
    for cc in ccs:
        exe = build_driver(out, cc=cc, cflags=CFLAGS, exe=tmp_root / f"mlp_driver_{cc}")
        res = run_driver(exe, out, c.np_inputs, repeat=5)
        assert_outputs_close(res.outputs, c.refs, f"mlp driver ({cc})")
        assert "median latency" in res.stdout and "5 run(s)" in res.stdout
    exe = tmp_root / f"mlp_driver_{ccs[0]}"
    # usage error: exit 2 with the usage text
    p = subprocess.run([str(exe)], capture_output=True, text=True)
    assert p.returncode == 2 and "usage:" in p.stderr and "OUT_DIR" in p.stderr
    # wrong input size: exit 1, names the input, its spec and both sizes
    bad = tmp_root / "bad.bin"
    bad.write_bytes(b"\0" * 12)
    p = subprocess.run([str(exe), str(out / "mlp.weights"), str(bad), str(tmp_root)], capture_output=True, text=True)
    assert p.returncode == 1 and "input 'x'" in p.stderr and "12 bytes" in p.stderr, p.stderr
    # not a weights file: the library's own message (mlp_strerror)
    good = tmp_root / "x.bin"
    c.np_inputs[0].astype("<f4").tofile(good)
    p = subprocess.run([str(exe), str(out / "mlp.h"), str(good), str(tmp_root)], capture_output=True, text=True)
    assert p.returncode == 1 and "not a pt2c weights file" in p.stderr, p.stderr
    # missing output folder
    p = subprocess.run([str(exe), str(out / "mlp.weights"), str(good), str(tmp_root / "nope")],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "does the folder" in p.stderr, p.stderr
    with pytest.raises(RunError, match="exit 1"):
        run_driver(exe, out, c.np_inputs, launcher="false")


def test_driver_embedded_weights(tmp_root: Path, zoo_cache) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not found")
    c = zoo_cache.get("mlp")
    out = tmp_root / "mlp_embedded"
    pt2c.compile(c.ep, out, target="generic", name="mlp", embed_weights=True)
    exe = build_driver(out, cc="gcc", cflags=CFLAGS)
    res = run_driver(exe, out, c.np_inputs)  # weights argument "-"
    assert res.cmd[1] == "-"
    assert_outputs_close(res.outputs, c.refs, "mlp embedded weights")


# --------------------------------------------------------------------------- init-time ISA check


def _status_code(out: Path, name: str, code: str) -> int:
    m = re.search(rf"{name.upper()}_{code} = (\d+),", (out / f"{name}.h").read_text())
    assert m, code
    return int(m.group(1))


def test_cpu_check_fake_features(zoo_cache, tmp_root: Path) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not found")
    c = zoo_cache.get("mlp")  # x86_64-v3
    out = c.out_dir
    code = _status_code(out, "mlp", "ERR_CPU_UNSUPPORTED")
    assert code == _status_code(out, "mlp", "ERR_WORKSPACE_PLAN") + 1  # appended: older codes keep their numbers
    exe = build_driver(out, cc="gcc", cflags=CFLAGS + " -DPT2C_FAKE_CPU_FEATURES=0", exe=tmp_root / "mlp_fakecpu")
    with pytest.raises(RunError) as ei:
        run_driver(exe, out, c.np_inputs)
    msg = str(ei.value)
    assert f"status {code}" in msg and "AVX2+FMA" in msg and "x86_64-v3" in msg and "lower --target" in msg, msg
    # through the library API as well (ctypes runner), on a private copy of the shared artifact
    copy = copy_artifact(out, tmp_root / "mlp_fakecpu_lib")
    lib = pt2c.build(copy, cc="gcc", cflags=GCC_CFLAGS + " -DPT2C_FAKE_CPU_FEATURES=0", openmp=False)
    with pytest.raises(Exception, match="CPU lacks"):
        pt2c.load(copy, lib=private_lib_copy(Path(lib))).run(c.np_inputs)
    # a baseline build has nothing to check: the hook does not fail it
    base = build_driver(out, cc="gcc", cflags=CFLAGS + " -DPT2C_FAKE_CPU_FEATURES=0", arch_flags="-march=x86-64",
                        exe=tmp_root / "mlp_fakecpu_base")
    assert_outputs_close(run_driver(base, out, c.np_inputs).outputs, c.refs, "baseline build, fake CPU")


def _split_build(out: Path, name: str, lib_flags: str, exe: Path) -> Path:
    """Library object with lib_flags, driver at the x86-64 baseline (so only the library's code needs the ISA)."""
    lo, do = exe.with_suffix(".lib.o"), exe.with_suffix(".drv.o")
    base = shlex.split(CFLAGS)
    subprocess.run(["gcc", *base, *shlex.split(lib_flags), "-I", str(out), "-c", str(out / f"{name}.c"), "-o", str(lo)],
                   check=True)
    subprocess.run(["gcc", *base, "-march=x86-64", "-I", str(out), "-c", str(out / f"{name}_driver.c"), "-o", str(do)],
                   check=True)
    subprocess.run(["gcc", str(lo), str(do), "-o", str(exe), "-lm"], check=True)
    return exe


@pytest.mark.parametrize("lib_flags,cpu,ok", [
    ("-march=x86-64-v3", "qemu64", False),   # no AVX at all
    ("-march=x86-64-v4", "Haswell", False),  # AVX2 but no AVX-512
    ("-march=x86-64-v3", "Haswell", True),   # a real x86-64-v3 CPU passes the check
])
def test_cpu_check_under_emulated_cpu(zoo_cache, tmp_root: Path, lib_flags: str, cpu: str, ok: bool) -> None:
    import platform

    if platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"):
        pytest.skip("needs an x86-64 host with gcc")
    if not shutil.which("qemu-x86_64"):
        pytest.skip(f"qemu-x86_64 not found; install with: {APT_QEMU}")
    c = zoo_cache.get("mlp")
    exe = _split_build(c.out_dir, "mlp", lib_flags, tmp_root / f"mlp_{cpu}_{lib_flags[-2:]}")
    launcher = f"qemu-x86_64 -cpu {cpu}"
    if ok:
        assert_outputs_close(run_driver(exe, c.out_dir, c.np_inputs, launcher=launcher).outputs, c.refs,
                             f"{lib_flags} on {cpu}")
    else:
        with pytest.raises(RunError) as ei:  # a clean error from init, not SIGILL (exit 132)
            run_driver(exe, c.out_dir, c.np_inputs, launcher=launcher)
        assert "exit 1)" in str(ei.value) and "the CPU lacks it" in str(ei.value), str(ei.value)


# --------------------------------------------------------------------------- verify on the target


def test_is_cross_compiler() -> None:
    assert not is_cross_compiler(None)
    if shutil.which("gcc"):
        assert not is_cross_compiler("gcc")
    if shutil.which("aarch64-linux-gnu-gcc"):
        assert is_cross_compiler("aarch64-linux-gnu-gcc")
    if shutil.which("x86_64-w64-mingw32-gcc"):
        assert is_cross_compiler("x86_64-w64-mingw32-gcc")
    assert not is_cross_compiler("no-such-compiler-xyz")


def test_verify_cli_on_target(zoo_cache, tmp_root: Path) -> None:
    _toolchain("aarch64", tmp_root)
    import torch
    from typer.testing import CliRunner

    from pt2c.cli import app

    c = zoo_cache.get("mlp")
    pt2 = tmp_root / "mlp.pt2"
    torch.export.save(c.ep, str(pt2))
    r = CliRunner().invoke(app, ["verify", str(pt2), "--target", "aarch64", "--cc", "aarch64-linux-gnu-gcc",
                                 "--exec", "qemu-aarch64 -L /usr/aarch64-linux-gnu", "-o", str(tmp_root / "v_a64")])
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output
    assert (tmp_root / "v_a64" / "mlp_driver").is_file()
    # the Python API, with a failing launcher: a clean RunError
    with pytest.raises(RunError, match="the driver failed"):
        verify(str(pt2), target="aarch64", cc="aarch64-linux-gnu-gcc", launcher="false")


# --------------------------------------------------------------------------- multi-versioning

MULTI = "x86_64,x86_64-v2,x86_64-v3,x86_64-v4"
LEVELS = ["x86_64", "x86_64-v2", "x86_64-v3", "x86_64-v4"]
# /proc/cpuinfo flags of each x86-64 level above the baseline (the psABI's lists)
_LEVEL_FLAGS = [
    {"pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm"},
    {"avx", "avx2", "fma", "f16c", "movbe", "bmi1", "bmi2", "abm"},
    {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
]


def _host_level() -> str | None:
    """The x86-64 level of this machine from /proc/cpuinfo (an independent check of the C probe)."""
    try:
        line = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags"))
    except (OSError, StopIteration):
        return None
    flags = set(line.split(":", 1)[1].split())
    level = 0
    for need in _LEVEL_FLAGS:
        if not need <= flags:
            break
        level += 1
    return LEVELS[level]


def _needs_x86_gcc() -> None:
    import platform

    if platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"):
        pytest.skip("needs an x86-64 host with gcc")


@pytest.mark.parametrize("family", FAMILIES)
def test_multiversion_dispatch_and_fallback(zoo_cache, tmp_root: Path, family: str) -> None:
    """One artifact with four code paths: init picks the best the CPU has (natively, and under
    qemu-x86_64 emulating older CPUs), PT2C_MAX_ISA caps it, and every path matches eager."""
    _needs_x86_gcc()
    c = zoo_cache.get(family)
    out = tmp_root / f"{family}_multi"
    pt2c.compile(c.ep, out, target=MULTI, name=family)
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"] == MULTI and m["target_cflags"] == ["-march=x86-64"]
    assert [v["target"] for v in m["variants"]] == LEVELS[1:]
    for v in m["variants"]:
        assert (out / v["file"]).is_file() and v["file"] in (out / "Makefile").read_text()
    exe = build_driver(out, cc="gcc", cflags=CFLAGS)
    native = run_driver(exe, out, c.np_inputs)
    assert_outputs_close(native.outputs, c.refs, f"{family} multi-version, native")
    if _host_level() is not None:
        assert native.isa == _host_level(), native.stdout
    best = LEVELS.index(native.isa)
    for cap in LEVELS[:best]:  # every lower path, forced by the environment cap
        r = run_driver(exe, out, c.np_inputs, env={"PT2C_MAX_ISA": cap})
        assert r.isa == cap, r.stdout
        assert_outputs_close(r.outputs, c.refs, f"{family} multi-version, PT2C_MAX_ISA={cap}")
    if native.isa == "x86_64-v4" and "cpuid_fault" in Path("/proc/cpuinfo").read_text():
        # on this very CPU, with cpuid telling it there is no AVX-512 (bench/avx2_only.c, the
        # shim behind the benchmarks' --hide-avx512): init picks the AVX2 path by itself
        shim = tmp_root / "avx2_only.so"
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(shim),
                        str(Path(__file__).resolve().parents[1] / "bench" / "avx2_only.c"), "-ldl"], check=True)
        r = run_driver(exe, out, c.np_inputs, env={"LD_PRELOAD": str(shim), "AVX2_ONLY_STRICT": "1"})
        assert r.isa == "x86_64-v3", r.stdout
        assert_outputs_close(r.outputs, c.refs, f"{family} multi-version, AVX-512 hidden by cpuid")
    if not shutil.which("qemu-x86_64"):
        pytest.skip(f"qemu-x86_64 not found; install with: {APT_QEMU}")
    for cpu, level in (("Haswell", "x86_64-v3"), ("Nehalem", "x86_64-v2"), ("qemu64", "x86_64")):
        r = run_driver(exe, out, c.np_inputs, launcher=f"qemu-x86_64 -cpu {cpu}", timeout=300)
        assert r.isa == level, f"{cpu}: {r.stdout}"  # the CPU's own answer to cpuid, no SIGILL
        assert_outputs_close(r.outputs, c.refs, f"{family} multi-version on an emulated {cpu}")


def test_multiversion_build_files_with_clang(zoo_cache, tmp_root: Path) -> None:
    """clang does not switch the ISA by #pragma (gcc does): the generated Makefile and CMake
    project compile each code path with its own -march, and the library reports its choice."""
    _needs_x86_gcc()
    if not shutil.which("clang"):
        pytest.skip("clang not found")
    c = zoo_cache.get("mlp")
    out = tmp_root / "mlp_multi"
    pt2c.compile(c.ep, out, target="x86_64-v3,x86_64", name="mlp")  # any order: lowest is the baseline
    assert json.loads((out / "manifest.json").read_text())["target"] == "x86_64,x86_64-v3"
    lib = pt2c.build(out, cc="clang", cflags="-O2 " + STRICT_CFLAGS, openmp=False)
    model = pt2c.load(out, lib=private_lib_copy(Path(lib)))
    assert model.isa in ("x86_64", "x86_64-v3")
    if _host_level() in ("x86_64-v3", "x86_64-v4"):
        assert model.isa == "x86_64-v3"
    assert_outputs_close(model.run(c.np_inputs), c.refs, "mlp multi-version, clang + Makefile")
    # without its -march the code path refuses to compile (rather than silently losing the ISA)
    proc = subprocess.run(["clang", *shlex.split(STRICT_CFLAGS), "-I", str(out), "-c", str(out / "mlp_x86_64_v3.c"),
                           "-o", str(tmp_root / "bad.o")], capture_output=True, text=True)
    assert proc.returncode != 0 and "compile it with -march=x86-64-v3" in proc.stderr, proc.stderr
    if shutil.which("cmake"):
        b = tmp_root / "mlp_multi_cmake"
        subprocess.run(["cmake", "-S", str(out), "-B", str(b), "-DCMAKE_C_COMPILER=clang", "-DPT2C_OPENMP=OFF",
                        f"-DCMAKE_C_FLAGS={STRICT_CFLAGS}"], check=True, capture_output=True)
        subprocess.run(["cmake", "--build", str(b)], check=True, capture_output=True)
        syms = subprocess.run(["nm", str(b / "libmlp.a")], check=True, capture_output=True, text=True).stdout
        assert "T mlp__forward_x86_64_v3" in syms and "T mlp_isa" in syms


def test_multiversion_target_spec_errors() -> None:
    from pt2c.targets import get_targets

    assert [t.name for t in get_targets("avx512, x86-64")] == ["x86_64", "x86_64-v4"]
    with pytest.raises(ValueError, match="multi-versioning combines the x86-64 levels.*not aarch64"):
        get_targets("x86_64,aarch64")
    with pytest.raises(ValueError, match="lists x86_64-v3 more than once"):
        get_targets("x86_64-v3,avx2")
    with pytest.raises(ValueError, match="unknown target 'x86_64-v9'"):
        get_targets("x86_64,x86_64-v9")


def test_aarch64_dotprod_check_under_emulated_cpu(zoo_cache, tmp_root: Path) -> None:
    """aarch64+dotprod: runs on a CPU with the extension, a clean init error (getauxval) on one without."""
    tc = _toolchain("aarch64", tmp_root)
    c, out = _compile(zoo_cache, "mlp", "aarch64+dotprod", tmp_root)
    exe = build_driver(out, cc=tc["cc"], cflags=CFLAGS)
    ok = run_driver(exe, out, c.np_inputs, launcher=tc["launcher"].replace("qemu-aarch64", "qemu-aarch64 -cpu max"))
    assert_outputs_close(ok.outputs, c.refs, "mlp aarch64+dotprod on -cpu max")
    with pytest.raises(RunError) as ei:
        run_driver(exe, out, c.np_inputs, launcher=tc["launcher"].replace("qemu-aarch64", "qemu-aarch64 -cpu cortex-a53"))
    assert "the CPU lacks it; rebuild for --target aarch64" in str(ei.value), str(ei.value)
