"""Freestanding output (``--freestanding``) and the bare-metal ``cortex-m`` target.

A small CNN (conv - BatchNorm - ReLU - max-pool - linear, ~5.6 KB of weights) is compiled
with ``pt2c compile --target cortex-m --freestanding``, then:

* the library (``<name>.c`` + ``pt2c_kernels/``) is cross-compiled with ``arm-none-eabi-gcc``
  (the preset's flags + ``-std=c99 -Wall -Wextra -Werror -pedantic -O2 -ffreestanding``),
  linked with a minimal ``main`` (static workspace array, embedded weights) against newlib
  (``--specs=nosys.specs``, ``-lm``), and ``arm-none-eabi-nm -u`` on the model object shows no
  malloc/free/stdio/file/thread/OpenMP symbol: only memcpy/memset/memcmp, libm and libgcc;
  ``arm-none-eabi-size`` gives code / weights / workspace (docs/targets.md);
* the same C source, built natively with the host gcc (``-ffreestanding`` for the library,
  the hosted driver next to it), matches PyTorch eager; so does ``--freestanding`` with the
  ``generic`` target, through the Python API.

The ARM tests skip when the toolchain is missing:
  apt-get install -y --no-install-recommends gcc-arm-none-eabi libnewlib-arm-none-eabi
(scripts/setup.sh installs it).  Nothing runs on a Cortex-M here: compile + link only.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import pt2c
from pt2c.runtime.verify import build_driver, run_driver
from pt2c.targets import TARGETS, get_target

from conftest import STRICT_CFLAGS, assert_outputs_close, eager, export, to_numpy_inputs

NAME = "tinycnn"
ARM_CC = "arm-none-eabi-gcc"
APT_ARM = "apt-get install -y --no-install-recommends gcc-arm-none-eabi libnewlib-arm-none-eabi"
CFLAGS = "-O2 " + STRICT_CFLAGS

# Headers a freestanding library must not include (stdio, heap, threads, files, clocks).
HOSTED_HEADERS = {"stdio.h", "stdlib.h", "pthread.h", "threads.h", "omp.h", "unistd.h", "time.h", "fcntl.h",
                  "malloc.h"}
# Symbols it must not reference.
FORBIDDEN_SYMBOL = re.compile(
    r"^_*(malloc|calloc|realloc|free|aligned_alloc|posix_memalign|memalign|\w*printf|puts|putchar|fputs|"
    r"fopen|fclose|fread|fwrite|fflush|fseek|open|close|read|write|sbrk|exit|abort|time|clock\w*|"
    r"pthread_\w*|omp_\w*|GOMP_\w*)$")
# The C library functions GCC requires even of a freestanding environment.
MEM_FUNCS = {"memcpy", "memmove", "memset", "memcmp"}


class TinyCNN(nn.Module):
    """conv 3x3 (1 -> 8) - BatchNorm - ReLU - max-pool 4 - linear (128 -> 10) on a 1x16x16 image."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(4)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The model, its export, eager outputs, and the CLI compile for --target cortex-m --freestanding."""
    from typer.testing import CliRunner

    from pt2c.cli import app

    root = tmp_path_factory.mktemp("freestanding")
    torch.manual_seed(0)
    model = TinyCNN()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.2, 0.2)
    model.eval()
    inputs = (torch.randn(1, 1, 16, 16),)
    ep = export(model, inputs)
    pt2 = root / f"{NAME}.pt2"
    torch.export.save(ep, str(pt2))
    out = root / "cortex_m"
    r = CliRunner().invoke(app, ["compile", str(pt2), "-o", str(out), "--target", "cortex-m", "--freestanding",
                                 "--name", NAME])
    assert r.exit_code == 0, r.output
    return {"root": root, "ep": ep, "out": out, "cli_output": r.output,
            "np_inputs": to_numpy_inputs(inputs), "refs": eager(model, inputs)}


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"{what} failed (exit {p.returncode}): {shlex.join(cmd)}\n{p.stderr or p.stdout}"
    return p


def _arm_tools() -> None:
    for tool in (ARM_CC, "arm-none-eabi-nm", "arm-none-eabi-size"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not found; install with: {APT_ARM}")


def _defined_symbols(archive: str) -> set[str]:
    p = subprocess.run(["arm-none-eabi-nm", "--defined-only", "-g", archive], capture_output=True, text=True)
    return {ln.split()[-1] for ln in p.stdout.splitlines() if len(ln.split()) == 3}


# --------------------------------------------------------------------------- the preset and the option


def test_cortex_m_preset_and_manifest(cnn: dict) -> None:
    from typer.testing import CliRunner

    from pt2c.cli import app

    t = get_target("cortex-m")
    assert t is TARGETS["cortex-m"] and get_target("cortex-m7") is t
    assert t.arch == "arm" and t.simd == "none" and t.freestanding and t.cross_cc == ARM_CC and t.launcher == ""
    assert "-mcpu=cortex-m7" in t.cflags and "-mthumb" in t.cflags
    assert not any(tg.freestanding for tg in TARGETS.values() if tg.name != "cortex-m")
    r = CliRunner().invoke(app, ["targets"])
    assert r.exit_code == 0 and "cortex-m" in r.output and ARM_CC in r.output, r.output

    out = cnn["out"]
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"] == "cortex-m" and m["target_cflags"] == list(t.cflags)
    assert m["freestanding"] is True and m["openmp"] is False
    assert m["weights"]["embedded"] is True and m["weights"]["file"] is None
    assert not (out / f"{NAME}.weights").exists()
    assert "--freestanding" in (out / f"{NAME}.c").read_text().split("*/", 1)[0]  # the command line, recorded
    assert "freestanding" in cnn["cli_output"]
    # no hosted header anywhere in the library's sources (the driver is a hosted test program, not the library);
    # <omp.h> is only under `#if defined(_OPENMP)` (common.h), which a freestanding build never defines
    # (the preprocessor check in the arm test covers it)
    for f in [out / f"{NAME}.c", out / f"{NAME}.h", *sorted((out / "pt2c_kernels").iterdir())]:
        included = set(re.findall(r"#\s*include\s*<([^>]+)>", f.read_text())) & (HOSTED_HEADERS - {"omp.h"})
        assert not included, f"{f.name} includes {sorted(included)}"
    # the library build files build without OpenMP
    assert "OPENMP    ?= 0" in (out / "Makefile").read_text()


def test_freestanding_python_api_and_default(cnn: dict) -> None:
    root = cnn["root"]
    art = pt2c.compile(cnn["ep"], root / "generic_fs", target="generic", name=NAME, freestanding=True)
    assert art.manifest["freestanding"] is True and art.manifest["openmp"] is False
    assert art.manifest["weights"]["embedded"] is True
    assert json.loads((root / "generic_fs" / "manifest.json").read_text()) == art.manifest
    hosted = pt2c.compile(cnn["ep"], root / "generic_hosted", target="generic", name=NAME)
    assert hosted.manifest["freestanding"] is False and hosted.manifest["weights"]["embedded"] is False
    assert json.loads((root / "generic_hosted" / "manifest.json").read_text())["freestanding"] is False


# --------------------------------------------------------------------------- numerics (host gcc)


def _native_build(out: Path, exe: Path) -> Path:
    """Library object compiled -ffreestanding with the host gcc, the hosted driver next to it."""
    lo, do = exe.with_suffix(".lib.o"), exe.with_suffix(".drv.o")
    base = shlex.split(CFLAGS)
    _run(["gcc", *base, "-ffreestanding", "-DPT2C_NO_SIMD", "-I", str(out), "-c", str(out / f"{NAME}.c"),
          "-o", str(lo)], "host gcc -ffreestanding (library)")
    _run(["gcc", *base, "-I", str(out), "-c", str(out / f"{NAME}_driver.c"), "-o", str(do)], "host gcc (driver)")
    _run(["gcc", str(lo), str(do), "-o", str(exe), "-lm"], "host link")
    return exe


def test_freestanding_numerics_native(cnn: dict) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not found")
    # the very C source compiled for the Cortex-M, built for the host
    out = cnn["out"]
    exe = _native_build(out, cnn["root"] / "cortex_m_native")
    res = run_driver(exe, out, cnn["np_inputs"])
    assert res.cmd[1] == "-"  # embedded weights
    assert_outputs_close(res.outputs, cnn["refs"], "cortex-m --freestanding source, host gcc")
    # --freestanding with the generic target (Python API), built with the preset's flags
    gen = cnn["root"] / "generic_fs"
    if not (gen / "manifest.json").is_file():
        pt2c.compile(cnn["ep"], gen, target="generic", name=NAME, freestanding=True)
    exe2 = build_driver(gen, cc="gcc", cflags=CFLAGS + " -ffreestanding", exe=cnn["root"] / "generic_fs_drv")
    res2 = run_driver(exe2, gen, cnn["np_inputs"])
    assert_outputs_close(res2.outputs, cnn["refs"], "generic --freestanding, host gcc")
    np.testing.assert_allclose(res2.outputs[0], res.outputs[0], rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- arm-none-eabi: compile + link


MAIN_C = """/* Minimal bare-metal program: static workspace, embedded weights, no heap, no stdio. */
#include "{name}.h"

static unsigned char workspace[{N}_WORKSPACE_BYTES] __attribute__((aligned({N}_WORKSPACE_ALIGN)));
static float input[{n_in}];
static float output[{n_out}];

int main(void)
{{
    {name}_ctx ctx;
    int rc = {name}_init(&ctx, NULL, 0, workspace, sizeof(workspace)); /* NULL: the embedded weights */
    if (rc != {N}_OK) return rc;
    return {name}_run(&ctx, input, output);
}}
"""


def test_cortex_m_cross_compile_link_and_size(cnn: dict) -> None:
    _arm_tools()
    out, root = cnn["out"], cnn["root"]
    m = json.loads((out / "manifest.json").read_text())
    flags = list(get_target("cortex-m").cflags) + shlex.split(CFLAGS)
    build = root / "arm"
    build.mkdir(exist_ok=True)
    obj, main_o, elf = build / f"{NAME}.o", build / "main.o", build / "firmware.elf"

    # headers actually pulled in by the library (preprocessor), not just the #include lines
    deps = _run([ARM_CC, *flags, "-ffreestanding", "-M", "-I", str(out), str(out / f"{NAME}.c")], "dependency list")
    headers = {Path(w).name for w in deps.stdout.replace("\\\n", " ").split() if w.endswith(".h")}
    assert not headers & HOSTED_HEADERS, sorted(headers & HOSTED_HEADERS)

    _run([ARM_CC, *flags, "-ffreestanding", "-ffunction-sections", "-fdata-sections", "-fstack-usage",
          "-I", str(out), "-c", str(out / f"{NAME}.c"), "-o", str(obj)], "arm-none-eabi-gcc (model library)")
    n_in = int(np.prod(m["inputs"][0]["shape"]))
    n_out = int(np.prod(m["outputs"][0]["shape"]))
    (build / "main.c").write_text(MAIN_C.format(name=NAME, N=NAME.upper(), n_in=n_in, n_out=n_out))
    _run([ARM_CC, *flags, "-I", str(out), "-c", str(build / "main.c"), "-o", str(main_o)], "arm-none-eabi-gcc (main)")
    _run([ARM_CC, *flags, "--specs=nosys.specs", "-Wl,--gc-sections", str(main_o), str(obj), "-o", str(elf), "-lm"],
         "arm-none-eabi-gcc link (nosys.specs)")
    assert elf.is_file()

    # what the model object needs from outside: mem* (GCC requires them even freestanding), libm, libgcc
    undef = set(_run(["arm-none-eabi-nm", "-u", str(obj)], "nm -u").stdout.split()) - {"U"}
    bad = sorted(s for s in undef if FORBIDDEN_SYMBOL.match(s))
    assert not bad, f"the freestanding library references {bad}"
    libm = _run([ARM_CC, *flags, "-print-file-name=libm.a"], "libm path").stdout.strip()
    libgcc = _run([ARM_CC, *flags, "-print-libgcc-file-name"], "libgcc path").stdout.strip()
    provided = MEM_FUNCS | _defined_symbols(libm) | _defined_symbols(libgcc)
    assert undef <= provided, f"unresolved by mem*/libm/libgcc: {sorted(undef - provided)}"

    # sizes: code (.text*), weights (the embedded const array), other const data; workspace from the header
    secs: dict[str, int] = {}
    for ln in _run(["arm-none-eabi-size", "-A", str(obj)], "size -A").stdout.splitlines():
        parts = ln.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            secs[parts[0]] = int(parts[1])
    code = sum(v for k, v in secs.items() if k.startswith(".text"))
    weights = secs.get(".rodata.embedded_weights", 0)
    rodata = sum(v for k, v in secs.items() if k.startswith(".rodata")) - weights
    data = sum(v for k, v in secs.items() if k.startswith(".data"))
    bss = sum(v for k, v in secs.items() if k.startswith(".bss"))
    hdr = (out / f"{NAME}.h").read_text()
    ws = int(re.search(rf"#define {NAME.upper()}_WORKSPACE_BYTES (\d+)u", hdr).group(1))
    stack = [(int(ln.split("\t")[1]), ln.split("\t")[0].rsplit(":", 1)[-1])
             for ln in (build / f"{NAME}.su").read_text().splitlines() if ln.count("\t") >= 2]
    max_frame, max_fn = max(stack)
    elf_size = _run(["arm-none-eabi-size", str(elf)], "size").stdout.rstrip()
    print(f"\ncortex-m ({' '.join(get_target('cortex-m').cflags)}, -O2), model {NAME}:\n"
          f"  code (.text)          {code} bytes\n"
          f"  weights (embedded)    {weights} bytes (.rodata.embedded_weights)\n"
          f"  other const data      {rodata} bytes\n"
          f"  data / bss            {data} / {bss} bytes\n"
          f"  workspace             {ws} bytes ({NAME.upper()}_WORKSPACE_BYTES, caller's static array)\n"
          f"  largest stack frame   {max_frame} bytes ({max_fn})\n"
          f"firmware.elf (main + model + newlib, --specs=nosys.specs --gc-sections):\n{elf_size}")
    assert weights == m["weights"]["bytes"] and weights < 16 * 1024
    assert ws == max(m["memory"]["workspace_bytes"], 64)
    assert code > 0 and data == 0 and bss == 0  # no mutable global state in the library
