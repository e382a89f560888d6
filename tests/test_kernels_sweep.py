"""The vector kernels with plain operands (depthwise conv, attention, max / avg pooling) against their
naive references over pseudo-random shapes (tests/kernels_sweep.c), on every vector layer simd.h maps:
AVX2 and AVX-512 natively, NEON under qemu-aarch64, and the plain-C build.  Tolerances as
tests/test_kernels_naive.py (1e-5 relative to max(1, max|ref|); max pooling exact, NaN included)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from test_kernels_naive import HARNESS, KDIR, STRICT, _host_has_avx512

SWEEP = Path(__file__).with_name("kernels_sweep.c")
APT_AARCH64 = "apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"

# build id: compiler, flags, launcher, cases per kernel (qemu is about 20x slower)
BUILDS = {
    "generic": ("gcc", ["-DPT2C_NO_SIMD"], [], 300),
    "x86_64_v3": ("gcc", ["-march=x86-64-v3"], [], 300),
    "x86_64_v4": ("gcc", ["-march=x86-64-v4"], [], 300),
    "aarch64_neon": ("aarch64-linux-gnu-gcc", [], ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"], 150),
}


@pytest.mark.parametrize("build", list(BUILDS))
def test_kernel_sweep(tmp_path: Path, build: str) -> None:
    cc, flags, launcher, n = BUILDS[build]
    if build == "x86_64_v4" and not _host_has_avx512():
        pytest.skip("the host has no AVX-512")
    for tool in [cc] + launcher[:1]:
        if not shutil.which(tool):
            pytest.skip(f"{tool} not found; install with: {APT_AARCH64}")
    (tmp_path / "kernels_harness.h").write_text(HARNESS)
    exe = tmp_path / "sweep"
    subprocess.run([cc, *STRICT, *flags, f"-I{KDIR}", f"-I{tmp_path}", str(SWEEP), "-o", str(exe), "-lm"],
                   check=True)
    r = subprocess.run([*launcher, str(exe), str(n)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and f"sweep: {4 * n} cases, 0 failed" in r.stdout, r.stdout[-3000:] + r.stderr
