"""End-to-end: every zoo family compiles, builds warning-free with gcc and clang, runs
through the built library and matches eager PyTorch; sanitizer runs through a standalone
C driver; compile determinism; the built library's external dependencies; embedded weights."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import pt2c
from conftest import (CLANG_CFLAGS, FAMILIES, TARGET, assert_outputs_close, build_and_run, copy_artifact, eager, export,
                      private_lib_copy)

needs_clang = pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")
needs_nm = pytest.mark.skipif(shutil.which("nm") is None or shutil.which("ldd") is None, reason="nm/ldd missing")


# --------------------------------------------------------------------------- gcc, every family


@pytest.mark.parametrize("family", FAMILIES)
def test_family_gcc_matches_eager(zoo_cache, family):
    c = zoo_cache.get(family)
    assert c.artifact.manifest["target"] == TARGET
    outs = c.gcc_outputs()
    assert_outputs_close(outs, c.refs, f"{family} (gcc -O2 strict)")


# --------------------------------------------------------------------------- clang, every family


@needs_clang
@pytest.mark.parametrize("family", FAMILIES)
def test_family_clang_matches_gcc(zoo_cache, tmp_path, family):
    c = zoo_cache.get(family)
    gcc_outs = c.gcc_outputs()
    # a private copy: the gcc build of the cached artifact stays untouched
    d = copy_artifact(c.out_dir, tmp_path / family)
    outs = build_and_run(d, c.np_inputs, cc="clang", cflags=CLANG_CFLAGS, openmp=False)
    assert_outputs_close(outs, gcc_outs, f"{family} clang vs gcc")
    assert_outputs_close(outs, c.refs, f"{family} clang vs eager")


# --------------------------------------------------------------------------- ASan + UBSan

DRIVER_C = r"""
/* Standalone driver: weights file + raw input file -> raw output file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include MODEL_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(MODEL, x)

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    long n;
    unsigned char *buf;
    size_t cap;
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    cap = ((size_t)n + 63) / 64 * 64;
    buf = aligned_alloc(64, cap ? cap : 64);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "read %s failed\n", path); exit(2); }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

int main(int argc, char **argv)
{
    size_t wsize, isize, off, ws_bytes, i;
    unsigned char *weights, *in, *ws;
    const void *inputs[64];
    void *outputs[64];
    const FN(_tensor_desc) *ind = FN(_inputs)();
    const FN(_tensor_desc) *outd = FN(_outputs)();
    int n_in = 0, n_out = 0, rc, rep;
    FN(_ctx) ctx;
    FILE *fo;
    if (argc != 4) { fprintf(stderr, "usage: %s weights inputs outputs\n", argv[0]); return 2; }
    weights = read_file(argv[1], &wsize);
    in = read_file(argv[2], &isize);
    ws_bytes = (FN(_workspace_size)() + 63) / 64 * 64;
    ws = aligned_alloc(64, ws_bytes ? ws_bytes : 64);
    if (!ws) return 2;
    /* poison the workspace: the model must not read what it did not write */
    memset(ws, 0xA5, ws_bytes ? ws_bytes : 64);
    rc = FN(_init)(&ctx, weights, wsize, ws, ws_bytes ? ws_bytes : 64);
    if (rc != 0) { fprintf(stderr, "init: %s\n", FN(_strerror)(rc)); return 3; }
    for (off = 0; n_in < NUM_INPUTS; n_in++) {
        inputs[n_in] = in + off;
        off += ind[n_in].nbytes;
    }
    if (off != isize) { fprintf(stderr, "input file has %zu bytes, model takes %zu\n", isize, off); return 2; }
    for (; n_out < NUM_OUTPUTS; n_out++) {
        outputs[n_out] = malloc(outd[n_out].nbytes ? outd[n_out].nbytes : 1);
        memset(outputs[n_out], 0x5A, outd[n_out].nbytes);
    }
    for (rep = 0; rep < 2; rep++) { /* twice: a second run must not depend on leftovers */
        rc = FN(_run_v)(&ctx, inputs, outputs);
        if (rc != 0) { fprintf(stderr, "run: %s\n", FN(_strerror)(rc)); return 4; }
    }
    fo = fopen(argv[3], "wb");
    if (!fo) { perror(argv[3]); return 2; }
    for (i = 0; i < (size_t)n_out; i++) {
        fwrite(outputs[i], 1, outd[i].nbytes, fo);
        free(outputs[i]);
    }
    fclose(fo);
    free(ws);
    free(in);
    free(weights);
    printf("ok %d inputs %d outputs\n", n_in, n_out);
    return 0;
}
"""

SAN_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g", "-O1", "-fno-omit-frame-pointer"]


def _has_sanitizers(tmp: Path) -> bool:
    src = tmp / "probe.c"
    src.write_text("int main(void){return 0;}\n")
    r = subprocess.run(["gcc", *SAN_FLAGS, str(src), "-o", str(tmp / "probe")], capture_output=True)
    return r.returncode == 0 and subprocess.run([str(tmp / "probe")], capture_output=True).returncode == 0


@pytest.mark.parametrize("family,simd", [("resnet18", True), ("gpt2", True), ("bert", False), ("lstm", False)],
                         ids=["resnet18-simd", "gpt2-simd", "bert-scalar", "lstm-scalar"])
def test_sanitizers(zoo_cache, tmp_path, family, simd):
    """ASan+UBSan through a standalone C driver (the SIMD kernels with the target's -march flags, or the
    portable scalar fallback with -DPT2C_NO_SIMD)."""
    if shutil.which("gcc") is None or not _has_sanitizers(tmp_path):
        pytest.skip("gcc with ASan/UBSan not available")
    c = zoo_cache.get(family)
    d, name = c.out_dir, c.name
    (tmp_path / "driver.c").write_text(DRIVER_C)
    arch = list(c.artifact.manifest.get("target_cflags", [])) if simd else ["-DPT2C_NO_SIMD"]
    exe = tmp_path / "driver"
    # model in C99 (as shipped), driver in C11 (aligned_alloc); no OpenMP
    subprocess.run(["gcc", *SAN_FLAGS, *arch, "-std=c99", "-I", str(d), "-c", str(d / f"{name}.c"),
                    "-o", str(tmp_path / "model.o")], check=True, capture_output=True, text=True)
    subprocess.run(["gcc", *SAN_FLAGS, "-std=c11", "-I", str(d), f"-DMODEL={name}",
                    f'-DMODEL_HEADER="{name}.h"',
                    f"-DNUM_INPUTS={name.upper()}_NUM_INPUTS", f"-DNUM_OUTPUTS={name.upper()}_NUM_OUTPUTS", "-c", str(tmp_path / "driver.c"), "-o", str(tmp_path / "driver.o")],
                   check=True, capture_output=True, text=True)
    subprocess.run(["gcc", *SAN_FLAGS, str(tmp_path / "driver.o"), str(tmp_path / "model.o"), "-o", str(exe), "-lm"],
                   check=True, capture_output=True, text=True)
    (tmp_path / "in.bin").write_bytes(b"".join(x.tobytes() for x in c.np_inputs))
    env = dict(os.environ, ASAN_OPTIONS="abort_on_error=0:detect_leaks=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    r = subprocess.run([str(exe), str(d / c.artifact.manifest["weights"]["file"]), str(tmp_path / "in.bin"),
                        str(tmp_path / "out.bin")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"sanitized driver failed (rc {r.returncode}):\n{r.stdout}\n{r.stderr[-6000:]}"
    assert "runtime error" not in r.stderr, r.stderr[-6000:]
    raw = (tmp_path / "out.bin").read_bytes()
    outs, off = [], 0
    for ref in c.refs:
        n = ref.size * ref.dtype.itemsize
        outs.append(np.frombuffer(raw[off:off + n], dtype=ref.dtype).reshape(ref.shape))
        off += n
    assert off == len(raw)
    assert_outputs_close(outs, c.refs, f"{family} (ASan/UBSan driver)")


# --------------------------------------------------------------------------- determinism


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _assert_same_tree(a: Path, b: Path) -> None:
    ta, tb = _tree(a), _tree(b)
    assert sorted(ta) == sorted(tb)
    differ = [k for k in ta if ta[k] != tb[k]]
    assert not differ, f"files differ between {a} and {b}: {differ}"


@pytest.mark.parametrize("family", ["resnet18", "bert"])
def test_compile_deterministic(zoo_cache, tmp_path, family):
    c = zoo_cache.get(family)
    a = pt2c.compile(c.ep, tmp_path / "one", target=TARGET, name=family)
    b = pt2c.compile(c.ep, tmp_path / "deeper" / "two", target=TARGET, name=family)
    assert len(_tree(Path(a.out_dir))) >= 8
    _assert_same_tree(Path(a.out_dir), Path(b.out_dir))
    assert sorted(a.files) == sorted(b.files)


_SUBPROC_COMPILE = """
import sys, warnings
warnings.simplefilter("ignore")
import pt2c
pt2c.compile(sys.argv[1], sys.argv[2], target=sys.argv[3], name="m")
"""


@pytest.mark.parametrize("target", [TARGET, "x86_64,x86_64-v3,x86_64-v4"])
def test_compile_deterministic_across_processes(zoo_cache, tmp_path, target):
    """Same .pt2, two fresh interpreters with different hash seeds: identical output."""
    import torch

    c = zoo_cache.get("gpt2")
    pt2 = tmp_path / "gpt2.pt2"
    torch.export.save(c.ep, pt2)
    procs = []
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        procs.append(subprocess.Popen([sys.executable, "-c", _SUBPROC_COMPILE, str(pt2), str(tmp_path / f"s{seed}"),
                                       target], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
    _assert_same_tree(tmp_path / "s1", tmp_path / "s12345")


# --------------------------------------------------------------------------- symbols / ldd


def _dyn_symbols(path: str, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, path], check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if parts:
            syms.add(parts[-1].split("@")[0])
    return syms


def _ldd(lib: str) -> dict[str, str]:
    """soname (or path) -> resolved path, from ldd."""
    out = subprocess.run(["ldd", lib], check=True, capture_output=True, text=True).stdout
    deps = {}
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        deps[parts[0]] = parts[2] if len(parts) > 2 and parts[1] == "=>" else parts[0]
    return deps


# weak references every gcc/clang shared object carries (crt files), resolved or not at all
TOOLCHAIN_WEAK = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__gmon_start__", "__cxa_finalize"}
LDD_OK = re.compile(r"^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libgomp\.so\.1|/lib(64|/x86_64-linux-gnu)?/ld-linux[-\w.]*\.so\.\d)$")


@needs_nm
@pytest.mark.parametrize("family", ["resnet18", "gpt2", "lstm"])
def test_library_dependencies(zoo_cache, family):
    c = zoo_cache.get(family)
    lib = str(c.gcc_lib())
    deps = _ldd(lib)
    assert deps
    unexpected = [d for d in deps if not LDD_OK.match(d)]
    assert not unexpected, f"{family}: unexpected shared-library dependencies {unexpected}: {deps}"

    allowed = set(TOOLCHAIN_WEAK)
    libs = {}
    for soname in ("libc.so.6", "libm.so.6", "libgomp.so.1"):
        if soname == "libm.so.6" and soname not in deps:  # no libm call left (exp/erf/tanh are inline): not linked
            libs[soname] = set()
            continue
        assert soname in deps, f"{soname} not in ldd output {deps}"
        libs[soname] = _dyn_symbols(deps[soname], defined=True)
        allowed |= libs[soname]
    undefined = _dyn_symbols(lib, defined=False)
    bad = sorted(undefined - allowed)
    assert not bad, f"{family}: undefined symbols outside libc/libm/libgomp: {bad}"
    # the OpenMP ones are only GOMP_* / omp_*
    gomp_only = undefined & libs["libgomp.so.1"] - libs["libc.so.6"] - libs["libm.so.6"]
    assert all(s.startswith(("GOMP_", "omp_")) for s in gomp_only), gomp_only


@needs_nm
def test_library_dependencies_no_openmp(zoo_cache, tmp_path):
    c = zoo_cache.get("mlp")
    d = copy_artifact(c.out_dir, tmp_path / "mlp")
    lib = str(pt2c.build(d, cc="gcc", cflags="-O1 -std=c99", openmp=False))
    undefined = _dyn_symbols(lib, defined=False)
    assert not [s for s in undefined if s.startswith(("GOMP_", "omp_"))], undefined
    deps = _ldd(lib)
    assert not [d for d in deps if "gomp" in d], deps
    assert all(LDD_OK.match(d) for d in deps), deps


# --------------------------------------------------------------------------- embedded weights


def test_embedded_weights_mlp(zoo_cache, tmp_path):
    c = zoo_cache.get("mlp")
    art = pt2c.compile(c.ep, tmp_path / "emb", target=TARGET, name="mlp_emb", embed_weights=True)
    assert art.manifest["weights"]["embedded"] is True
    lib = pt2c.build(art.out_dir, cc="gcc", cflags="-O2 " + "-std=c99 -Wall -Wextra -Werror -pedantic")
    # no weights file is needed at run time: remove it
    for p in Path(art.out_dir).glob("*.weights"):
        p.unlink()
    model = pt2c.load(art.out_dir, lib=private_lib_copy(Path(lib)))
    assert model._weights is None  # the runner passes weights=NULL
    outs = model.run(c.np_inputs)
    assert_outputs_close(outs, c.refs, "mlp embedded weights")
    # and a second, different input
    x = np.random.default_rng(1).standard_normal(c.np_inputs[0].shape).astype(np.float32)
    import torch

    assert_outputs_close(model.run([x]), eager(c.model, (torch.from_numpy(x),)), "mlp embedded weights, new input")


def test_model_without_inputs_builds_pedantic_and_runs(tmp_path):
    """A program with no user inputs still gives valid C99 (no empty descriptor array)."""
    import torch

    torch.manual_seed(0)

    class Const(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self) -> torch.Tensor:
            return self.w * 2

    m = Const()
    pt2c.compile(torch.export.export(m, ()), tmp_path / "noin", name="noin")
    cc = "clang" if shutil.which("clang") else "gcc"
    pt2c.build(tmp_path / "noin", cc=cc, cflags="-O1 -std=c99 -Wall -Wextra -Werror -pedantic", openmp=False)
    (got,) = pt2c.load(tmp_path / "noin").run([])
    np.testing.assert_allclose(got, (m.w * 2).detach().numpy(), rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- Winograd 3x3 convolutions


class _WinoNet(torch.nn.Module):
    """3x3 stride-1 convs wide enough for Winograd (>= 16 channels, >= 16 4x4 tiles): BN + residual + ReLU
    folded into them, padding 1 and 0, ragged tile edges, a stride-2 conv (im2col) in between, and a
    stride-2 conv to 7x7 at the end (pixels as the GEMM's rows: pt2c_conv2d_smallp)."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.c3 = nn.Conv2d(16, 24, 3, padding=0)
        self.down = nn.Conv2d(24, 32, 3, stride=2, padding=1)
        self.c4 = nn.Conv2d(32, 32, 3, padding=1)
        self.tail = nn.Conv2d(32, 20, 3, stride=2, padding=1)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.bn2(self.c2(y)) + y)
        y = torch.nn.functional.hardswish(self.c3(y))
        y = self.down(y)
        y = torch.relu(self.c4(y) + y)
        return torch.relu(self.tail(y))


def test_winograd_convs_match_eager_and_im2col(tmp_path):
    torch.manual_seed(0)
    model = _WinoNet().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 27, 28)
    ref = eager(model, (x,))
    ep = export(model, (x,))
    outs = {}
    for wino in (True, False):
        out = tmp_path / f"w{int(wino)}"
        art = pt2c.compile(ep, out, target=TARGET, name="wino", winograd=wino)
        src = (out / "wino.c").read_text()
        n_wino = src.count("pt2c_conv2d_wino(")
        assert n_wino == (3 if wino else 0), n_wino  # c2, c3 (27x28 -> 25x26), c4 (13x13); c1 has 3 channels
        assert src.count("pt2c_conv2d_smallp(") == 1  # tail: 13x13 -> 7x7
        outs[wino] = build_and_run(out, [x.numpy()])
        assert_outputs_close(outs[wino], ref, f"winograd={wino}")
        if wino:
            w_bytes = art.manifest["weights"]["bytes"]
        else:
            assert art.manifest["weights"]["bytes"] < w_bytes  # the transformed filters are 4x larger


class _InvertedResidual(torch.nn.Module):
    """MobileNetV2's block: 1x1 expansion + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 projection."""

    def __init__(self, c: int, m: int, stride: int) -> None:
        super().__init__()
        nn = torch.nn
        self.expand = nn.Sequential(nn.Conv2d(c, m, 1, bias=False), nn.BatchNorm2d(m), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(m, m, 3, stride, 1, groups=m, bias=False), nn.BatchNorm2d(m), nn.ReLU6())
        self.project = nn.Conv2d(m, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.dw(self.expand(x)))


@pytest.mark.parametrize("hw,fused", [(64, 1), (32, 0)])
def test_expansion_and_depthwise_conv_run_as_one_kernel(tmp_path, hw, fused):
    # an expansion over 1 MiB (96 channels of 64 x 64, two images) and its depthwise conv: one
    # pt2c_conv2d_pw_dw call, by groups of channels; the second block's expansion (32 x 32) and a
    # 32 x 32 input keep two calls
    torch.manual_seed(0)
    model = torch.nn.Sequential(_InvertedResidual(16, 96, 2), _InvertedResidual(16, 96, 1)).eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 16, hw, hw)
    ref = eager(model, (x,))
    out = tmp_path / "ir"
    pt2c.compile(export(model, (x,)), out, target=TARGET, name="ir")
    src = (out / "ir.c").read_text()
    assert src.count("pt2c_conv2d_pw_dw(") == fused
    assert src.count("(by groups of channels, not stored)") == fused  # both convs' comments, the first marked
    assert ("float *t0_expand_0 =" in src) != bool(fused)  # the expanded tensor: a workspace buffer or none
    assert_outputs_close(build_and_run(out, [x.numpy()]), ref, f"{hw}x{hw}")
    assert_outputs_close(build_and_run(out, [x.numpy()], cc="clang", cflags=CLANG_CFLAGS, openmp=False), ref,
                         f"{hw}x{hw}, clang without OpenMP")
