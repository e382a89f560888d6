"""Build files around an artifact folder: make, build.sh, CMake (install +
find_package, add_subdirectory), runtime.build(), targets, determinism.

A tiny hand-written artifact stands in for generated code: tiny.c includes a
"kernel" from pt2c_kernels/ that uses sqrtf (so libm matters) and an OpenMP
loop guarded by #ifdef _OPENMP.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import warnings

import pytest

try:
    import pt2c  # noqa: F401
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

from pt2c.codegen.buildfiles import write_build_files
from pt2c.runtime.build import BuildError, build, openmp_supported
from pt2c.targets import TARGETS, Target, get_target

HAVE_CC = shutil.which("cc") is not None or shutil.which("gcc") is not None
HAVE_MAKE = shutil.which("make") is not None
HAVE_CMAKE = shutil.which("cmake") is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
needs_make = pytest.mark.skipif(
    not (HAVE_CC and HAVE_MAKE), reason="no make / C compiler"
)
needs_cmake = pytest.mark.skipif(
    not (HAVE_CC and HAVE_CMAKE), reason="no cmake / C compiler"
)
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ELF/Linux check"
)

TINY_H = """\
#ifndef TINY_H
#define TINY_H
/* out[i] += sqrt(x[i]) */
void tiny_add(float *out, const float *x, int n);
int tiny_threads(void);
#endif
"""

KERNEL_C = """\
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
static void k_sqrt_add(float *out, const float *x, int n) {
    int i;
#ifdef _OPENMP
#pragma omp parallel for if (n > 4096)
#endif
    for (i = 0; i < n; i++) out[i] += sqrtf(x[i]);
}
"""

TINY_C = """\
#include "tiny.h"
#include "pt2c_kernels/sqrt_add.c"
void tiny_add(float *out, const float *x, int n) { k_sqrt_add(out, x, n); }
int tiny_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
"""

MAIN_C = """\
#include <stdio.h>
#include "tiny.h"
int main(void) {
    float out[4] = {1, 1, 1, 1};
    const float x[4] = {0, 1, 4, 9};
    tiny_add(out, x, 4);
    if (out[0] != 1.0f || out[3] != 4.0f) return 1;
    printf("tiny ok %d\\n", tiny_threads() > 0);
    return 0;
}
"""

CONSUMER_FIND = """\
cmake_minimum_required(VERSION 3.13)
project(consumer C)
find_package(tiny CONFIG REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE tiny::tiny)
if(EXPECT_WEIGHTS AND NOT EXISTS "${tiny_WEIGHTS_FILE}")
  message(FATAL_ERROR "tiny_WEIGHTS_FILE not found: '${tiny_WEIGHTS_FILE}'")
endif()
if(TARGET tiny::tiny_static)
  add_executable(app_static main.c)
  target_link_libraries(app_static PRIVATE tiny::tiny_static)
endif()
"""

CONSUMER_SUBDIR = """\
cmake_minimum_required(VERSION 3.13)
project(consumer C)
add_subdirectory("{model}" tiny_build)
if(NOT DEFINED tiny_WEIGHTS_FILE OR NOT tiny_WEIGHTS_FILE STREQUAL "")
  message(FATAL_ERROR "expected embedded weights, got '${{tiny_WEIGHTS_FILE}}'")
endif()
add_executable(app main.c)
target_link_libraries(app PRIVATE tiny::tiny)
"""


def make_artifact(
    root: pathlib.Path,
    weights: bool = True,
    target: str = "generic",
    openmp: bool = True,
) -> pathlib.Path:
    out = root / "out"
    (out / "pt2c_kernels").mkdir(parents=True)
    (out / "tiny.h").write_text(TINY_H)
    (out / "tiny.c").write_text(TINY_C)
    (out / "pt2c_kernels" / "sqrt_add.c").write_text(KERNEL_C)
    if weights:
        (out / "tiny.weights").write_bytes(b"\x00" * 16)
    written = write_build_files(out, "tiny", get_target(target), openmp=openmp)
    assert "CMakeLists.txt" in written and "Makefile" in written
    return out


def run(cmd, cwd=None, env=None):
    proc = subprocess.run(
        cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def check_tiny_so(lib: pathlib.Path) -> None:
    so = ctypes.CDLL(str(lib))
    out = (ctypes.c_float * 3)(1, 1, 1)
    x = (ctypes.c_float * 3)(0, 4, 16)
    so.tiny_add(out, x, 3)
    assert list(out) == [1.0, 3.0, 5.0]


ALLOWED_LIBS = (
    "libc.so",
    "libm.so",
    "libgomp.so",
    "ld-linux",
    "libdl.so",
    "libpthread.so",
)
ALLOWED_VERSIONS = ("GLIBC_", "GOMP_", "OMP_")


def check_only_libc_libm(lib: pathlib.Path, openmp: bool) -> None:
    if shutil.which("nm") is None or shutil.which("objdump") is None:
        pytest.skip("binutils missing")
    needed = [
        ln.split()[-1]
        for ln in run(["objdump", "-p", str(lib)]).splitlines()
        if ln.strip().startswith("NEEDED")
    ]
    assert needed, "no NEEDED entries?"
    for n in needed:
        assert n.startswith(ALLOWED_LIBS), f"unexpected dependency {n} in {needed}"
    if not openmp:
        assert not any(n.startswith("libgomp") for n in needed)
    for ln in run(["nm", "-D", "--undefined-only", str(lib)]).splitlines():
        kind, sym = ln.split()[-2:]
        if kind == "w":  # weak crt hooks (__gmon_start__, __cxa_finalize...)
            continue
        _, _, version = sym.partition("@")
        assert version.startswith(ALLOWED_VERSIONS), f"unexpected import {sym}"
        if version.startswith(("GOMP_", "OMP_")):
            assert openmp, f"OpenMP import {sym} in a non-OpenMP build"


# ---------------------------------------------------------------------------
# targets


def test_targets_presets():
    for name in (
        "generic",
        "x86_64",
        "x86_64-v2",
        "x86_64-v3",
        "x86_64-v4",
        "aarch64",
        "riscv64",
        "wasm32",
        "native",
    ):
        t = get_target(name)
        assert isinstance(t, Target) and t.name == name
        assert name in t.describe()
    assert get_target("generic").cflags == ("-DPT2C_NO_SIMD",)
    assert get_target("x86_64").cflags == ("-march=x86-64",)
    assert "-march=x86-64-v3" in get_target("x86_64-v3").cflags
    assert "-msimd128" in get_target("wasm32").cflags
    # only the native preset probes the host
    for t in TARGETS.values():
        assert ("-march=native" in t.cflags) == (t.name == "native")
    assert get_target("ARM64").name == "aarch64"
    with pytest.raises(ValueError) as e:
        get_target("pdp11")
    assert "pdp11" in str(e.value) and "x86_64-v3" in str(e.value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_target("generic").name = "x"


# ---------------------------------------------------------------------------
# determinism / content


def test_output_is_deterministic(tmp_path):
    a = make_artifact(tmp_path / "a", target="x86_64-v3")
    b = make_artifact(tmp_path / "some" / "other" / "dir", target="x86_64-v3")
    names = write_build_files(a, "tiny", get_target("x86_64-v3"))
    assert names == write_build_files(b, "tiny", get_target("x86_64-v3"))
    for n in names:
        ta, tb = (a / n).read_bytes(), (b / n).read_bytes()
        assert ta == tb, n
        assert str(tmp_path).encode() not in ta, f"absolute path in {n}"
    mk = (a / "Makefile").read_text()
    assert "-march=x86-64-v3" in mk and "-O3 -std=c99" in mk
    assert "TINY_ARCH_FLAGS" in (a / "CMakeLists.txt").read_text()


def test_bad_name(tmp_path):
    with pytest.raises(ValueError):
        write_build_files(tmp_path, "my-model", get_target("generic"))


# ---------------------------------------------------------------------------
# make / build.sh


@needs_make
@linux_only
@pytest.mark.parametrize("openmp", [1, 0])
def test_make(tmp_path, openmp):
    out = make_artifact(tmp_path, target="generic")
    run(
        [
            "make",
            "-C",
            str(out),
            f"OPENMP={openmp}",
            "CFLAGS=-O2 -std=c99 -Wall -Werror",
        ]
    )
    assert (out / "build" / "libtiny.a").is_file()
    lib = out / "build" / "libtiny.so"
    check_only_libc_libm(lib, openmp=bool(openmp))
    check_tiny_so(lib)
    # a static consumer links the archive with -lm only
    run(
        [
            "cc",
            "-I",
            str(out),
            str(_write(tmp_path / "main.c", MAIN_C)),
            str(out / "build" / "libtiny.a"),
            "-lm",
        ]
        + (["-fopenmp"] if openmp else [])
        + ["-o", str(tmp_path / "app")]
    )
    assert "tiny ok" in run([str(tmp_path / "app")])
    run(["make", "-C", str(out), "clean"])
    assert not (out / "build").exists()


@needs_cc
@linux_only
def test_build_sh(tmp_path):
    out = make_artifact(tmp_path, target="generic")
    log = run(["sh", str(out / "build.sh")], env={"PATH": _path(), "BUILDDIR": "b2"})
    assert "-DPT2C_NO_SIMD" in log and "-shared" in log  # commands are echoed
    assert (out / "b2" / "libtiny.a").is_file()
    check_tiny_so(out / "b2" / "libtiny.so")


# ---------------------------------------------------------------------------
# CMake


def _cmake(src, build_dir, *defs):
    run(["cmake", "-S", str(src), "-B", str(build_dir), *defs])
    run(["cmake", "--build", str(build_dir)])


@needs_cmake
@pytest.mark.parametrize("mode", ["static", "both"])
def test_cmake_install_find_package(tmp_path, mode):
    out = make_artifact(tmp_path, weights=True, target="generic")
    prefix = tmp_path / "prefix"
    defs = (
        ["-DBUILD_SHARED_LIBS=OFF"]
        if mode == "static"
        else ["-DBUILD_SHARED_LIBS=ON", "-DTINY_BUILD_BOTH=ON"]
    )
    _cmake(out, tmp_path / "b", *defs)
    run(["cmake", "--install", str(tmp_path / "b"), "--prefix", str(prefix)])
    assert (prefix / "include" / "tiny.h").is_file()
    assert (prefix / "share" / "tiny" / "tiny.weights").is_file()
    libdirs = [p.parent for p in prefix.rglob("tinyConfig.cmake")]
    assert libdirs, "no package config installed"

    cons = tmp_path / "consumer"
    cons.mkdir()
    _write(cons / "CMakeLists.txt", CONSUMER_FIND)
    _write(cons / "main.c", MAIN_C)
    _cmake(cons, cons / "b", f"-DCMAKE_PREFIX_PATH={prefix}", "-DEXPECT_WEIGHTS=ON")
    assert "tiny ok" in run([str(cons / "b" / "app")])
    if mode == "both":
        assert "tiny ok" in run([str(cons / "b" / "app_static")])
        libs = sorted(p.name for p in prefix.rglob("libtiny*"))
        assert any(n.endswith(".a") for n in libs) and any(".so" in n for n in libs)


@needs_cmake
def test_cmake_add_subdirectory_embedded_weights(tmp_path):
    out = make_artifact(tmp_path, weights=False, target="generic")
    cons = tmp_path / "consumer"
    cons.mkdir()
    _write(cons / "CMakeLists.txt", CONSUMER_SUBDIR.format(model=out.as_posix()))
    _write(cons / "main.c", MAIN_C)
    _cmake(cons, cons / "b", "-DPT2C_OPENMP=OFF", "-DTINY_ARCH_FLAGS=")
    assert "tiny ok" in run([str(cons / "b" / "app")])


# ---------------------------------------------------------------------------
# runtime.build


@needs_make
@linux_only
def test_runtime_build_make(tmp_path):
    out = make_artifact(tmp_path, target="generic")
    lib = build(out)
    assert lib == out.resolve() / "build" / "libtiny.so"
    check_tiny_so(lib)
    if openmp_supported():
        check_only_libc_libm(lib, openmp=True)
    lib = build(out, cflags="-O1 -std=c99", openmp=False)  # settings changed: rebuilt
    check_only_libc_libm(lib, openmp=False)


@needs_cmake
@linux_only
def test_runtime_build_cmake(tmp_path):
    out = make_artifact(tmp_path, target="generic")
    lib = build(out, use="cmake", openmp=False)
    check_tiny_so(lib)
    check_only_libc_libm(lib, openmp=False)


@needs_make
def test_runtime_build_errors(tmp_path):
    out = make_artifact(tmp_path, target="generic")
    with pytest.raises(BuildError, match="not found"):
        build(out, cc="no-such-compiler-pt2c")
    (out / "tiny.c").write_text(TINY_C + "\nthis is not C;\n")
    with pytest.raises(BuildError) as e:
        build(out, openmp=False)
    assert "error" in str(e.value).lower() and "tiny.c" in e.value.stderr


@needs_make
@linux_only
def test_runtime_build_openmp_fallback(tmp_path):
    # A compiler without a usable -fopenmp: a wrapper that rejects it.
    fake = _write(
        tmp_path / "nomp-cc",
        '#!/bin/sh\nfor a in "$@"; do\n'
        '  [ "$a" = -fopenmp ] && { echo "no openmp" >&2; exit 1; }\ndone\n'
        'exec cc "$@"\n',
    )
    fake.chmod(0o755)
    out = make_artifact(tmp_path, target="generic")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lib = build(out, cc=str(fake), openmp=True)
    assert any("OpenMP" in str(x.message) for x in w)
    check_only_libc_libm(lib, openmp=False)


# ---------------------------------------------------------------------------


def _write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.write_text(text)
    return path


def _path() -> str:
    return os.environ.get("PATH", "/usr/bin:/bin")
