"""`--hide-avx512` for the bench scripts: re-run this script with bench/avx2_only.c preloaded.

The benchmark issue's machine is an AVX2+FMA x86-64 without AVX-512.  On a host that has
AVX-512, every engine (ONNX Runtime's MLAS, PyTorch/oneDNN/MKL, Inductor's -march=native,
numpy) picks its AVX-512 kernels by `cpuid`; with the shim preloaded into this process and
every child, `cpuid` reports no AVX-512 / AMX, so all of them run their AVX2 code as they
would on that machine.  glibc's string functions are told the same through GLIBC_TUNABLES.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV_FLAG = "PT2C_BENCH_AVX512_HIDDEN"
GLIBC_HWCAPS = ("glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX512_FP16,"
                "-AVX512_BF16,-AVX512_VNNI,-AMX_TILE,-AMX_BF16,-AMX_INT8")


def active() -> bool:
    return os.environ.get(ENV_FLAG) == "1"


def reexec() -> None:
    """Build the shim (once per run, with the system cc) and exec this script again under it.
    Returns only when already re-executed; exits with a message where the CPU cannot fault on cpuid."""
    if active():
        _check()
        return
    if "cpuid_fault" not in Path("/proc/cpuinfo").read_text():
        sys.exit("--hide-avx512: this CPU/kernel has no CPUID faulting (cpuid_fault in /proc/cpuinfo); "
                 "run without it, or on an AVX2 machine")
    tmp = Path(tempfile.mkdtemp(prefix="pt2c_avx2_only_"))
    so = tmp / "avx2_only.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(HERE / "avx2_only.c"), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=f"{so}:{os.environ['LD_PRELOAD']}" if os.environ.get("LD_PRELOAD") else str(so),
               AVX2_ONLY_STRICT="1", **{ENV_FLAG: "1"},
               # Inductor's kernel cache is not keyed by the ISA it compiled for: kernels cached
               # by an earlier run that saw AVX-512 give garbage (and the reverse crashes)
               TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"))
    env["GLIBC_TUNABLES"] = ":".join(t for t in (os.environ.get("GLIBC_TUNABLES"), GLIBC_HWCAPS) if t)
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _check() -> None:
    """The shim must actually hide AVX-512 from PyTorch, or the numbers would be mislabelled."""
    import torch

    cap = torch.backends.cpu.get_cpu_capability()
    if "AVX512" in cap:
        sys.exit(f"--hide-avx512: PyTorch still sees {cap} with the shim preloaded")


LABEL = "AVX-512/AMX hidden from every engine by `--hide-avx512` (bench/avx2_only.c: cpuid reports an AVX2+FMA CPU)"
