"""The model, seeds, build and run of the libFuzzer harness tests/fuzz/fuzz_capi.c.

Used by tests/test_fuzz_capi.py (CI: a fixed short budget) and from the command line for longer
campaigns (clang with the libFuzzer runtime needed; scripts/setup.sh installs it):

    python3 tests/fuzz/capi_model.py --seconds 300              # compile, build, fuzz 5 min, report
    python3 tests/fuzz/capi_model.py --seconds 3600 --jobs 4     # 4 workers for an hour
    python3 tests/fuzz/capi_model.py --write-corpus              # regenerate the gen-* seeds of tests/fuzz/corpus/capi/
    python3 tests/fuzz/capi_model.py --build-only                # build only; prints the libFuzzer command line

The work folder (default /tmp/pt2c-fuzz-capi) keeps the compiled model (out/), the harness binary
and the corpus libFuzzer grows (corpus/); crashes are written there as crash-* / leak-* / timeout-*.
Replay one with `<work>/fuzz_capi <work>/crash-...`; keep it as a regression seed by copying it
into tests/fuzz/corpus/capi/ once fixed.

Fuzz input layout (see fuzz_capi.c): [1 byte param][x, ids, pos, g: 440 bytes][weights blob]; with
param bit 7 set the blob is the model's own .weights file (FUZZ_CAPI_WEIGHTS), not the tail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "fuzz_capi.c"
CORPUS = HERE / "corpus" / "capi"
NAME = "fz"
SANITIZE = ["-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined"]
CFLAGS = ["-g", "-O1", "-std=c99", "-DPT2C_NO_SIMD", "-Wno-unknown-pragmas"]
MAX_LEN = 8192
REF_BLOB = 0x80
# exit status + no report: what a clean run looks like
REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "ERROR: libFuzzer",
           "==ERROR", "SUMMARY: ", "deadly signal", "fuzz_capi: ")
ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:allocator_may_return_null=0:handle_abort=1",
       "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def model_and_inputs():
    """A tiny deterministic model that runs many kernel kinds, with three int64 index inputs:
    ids (embedding: 0 <= v < 16), pos (x[:, pos]: -4 <= v < 4, negatives wrap), g (gather: 0 <= v < 8)."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(16, 8)
            self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)
            self.lin = torch.nn.Linear(8, 8)
            self.ln = torch.nn.LayerNorm(8)

        def forward(self, x, ids, pos, g):
            h = self.emb(ids) + x                                # [2, 4, 8]
            h = self.conv(h.transpose(1, 2)).transpose(1, 2)
            h = self.ln(torch.relu(self.lin(h)))
            h = h[:, pos]                                        # [2, 3, 8]
            return torch.softmax(h, dim=-1), torch.gather(h, 2, g)

    torch.manual_seed(0)
    model = Model().eval()
    with torch.no_grad():  # the layer norm's affine parameters: not the trivial 1 / 0
        model.ln.weight.copy_(torch.linspace(0.5, 1.5, 8))
        model.ln.bias.copy_(torch.linspace(-0.25, 0.25, 8))
    inputs = (torch.randn(2, 4, 8), torch.tensor([[1, 2, 3, 4], [5, 6, 7, 15]]), torch.tensor([0, -1, 2]),
              torch.tensor([[[0, 7], [1, 6], [2, 5]], [[3, 4], [4, 3], [5, 2]]]))
    return model, inputs


def compile_model(out_dir: Path) -> Path:
    """Export + compile the model (target generic: the portable scalar kernels); returns out_dir."""
    import torch

    import pt2c

    model, inputs = model_and_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, inputs, strict=False)
    pt2c.compile(ep, out_dir, target="generic", name=NAME, force=True)
    return out_dir


def seeds(out_dir: Path) -> dict[str, bytes]:
    """Deterministic seeds for the compiled model: the real blob with valid and out-of-range inputs,
    and damaged blobs."""
    import numpy as np

    _, inputs = model_and_inputs()
    x, ids, pos, g = (t.numpy().copy() for t in inputs)
    blob = (out_dir / f"{NAME}.weights").read_bytes()

    def pack(param: int = 0, x=x, ids=ids, pos=pos, g=g, w: bytes = blob) -> bytes:
        return bytes([param]) + b"".join(np.ascontiguousarray(a).tobytes() for a in (
            x.astype(np.float32), ids.astype(np.int64), pos.astype(np.int64), g.astype(np.int64))) + w

    def with_(a, i, v):
        a = a.copy()
        a.flat[i] = v
        return a

    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    weird = x.copy()
    weird.flat[:6] = [np.nan, np.inf, -np.inf, 3e38, -1e-45, 0.0]
    flipped = bytearray(blob)
    flipped[64 + len(blob) // 2 % (len(blob) - 64)] ^= 0x10
    ref = REF_BLOB  # param bit 7: the harness uses the model's own .weights file (FUZZ_CAPI_WEIGHTS)
    return {
        # the kernels: the real blob, valid / out-of-range / non-finite inputs (independent of the weights)
        "ref-valid": pack(ref | 0, w=b""),
        "ref-wrap-pos": pack(ref | 7, pos=np.array([-4, -1, 3]), w=b""),
        "ref-nonfinite-x": pack(ref | 100, x=weird, w=b""),
        "ref-index-ids-16": pack(ref | 3, ids=with_(ids, 7, 16), w=b""),
        "ref-index-ids-neg": pack(ref | 4, ids=with_(ids, 0, -1), w=b""),
        "ref-index-ids-max": pack(ref | 10, ids=with_(ids, 3, hi), w=b""),
        "ref-index-pos-5": pack(ref | 5, pos=np.array([0, -5, 1]), w=b""),
        "ref-index-pos-4": pack(ref | 6, pos=np.array([4, 0, 1]), w=b""),
        "ref-index-g-8": pack(ref | 8, g=with_(g, 11, 8), w=b""),
        "ref-index-g-min": pack(ref | 9, g=with_(g, 0, lo), w=b""),
        # the blob loader: the blob in the input (these depend on the compiled weights)
        "blob-valid": pack(1),
        "blob-trailing": pack(2, w=blob + b"\0" * 64),
        "blob-truncated": pack(11, w=blob[:-1]),
        "blob-header": pack(12, w=blob[:64]),
        "blob-flipped": pack(13, w=bytes(flipped)),
        "blob-size-huge": pack(14, w=blob[:16] + struct.pack("<Q", 2**64 - 1) + blob[24:]),
        "blob-empty": pack(15, w=b""),
    }


def write_seeds(out_dir: Path, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in seeds(out_dir).items():
        p = dest / f"gen-{name}"
        p.write_bytes(data)
        paths.append(p)
    return paths


def fuzzer_available(cc: str = "clang") -> str | None:
    """None when cc can build a libFuzzer + ASan + UBSan binary, else why not."""
    if shutil.which(cc) is None:
        return f"{cc} not found (bash scripts/setup.sh installs it)"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.c"
        src.write_text("#include <stddef.h>\n#include <stdint.h>\n"
                       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
        r = subprocess.run([cc, *SANITIZE, str(src), "-o", str(Path(d) / "t")], capture_output=True, text=True)
        if r.returncode:
            return (f"{cc} cannot link -fsanitize=fuzzer,address,undefined (the libFuzzer / sanitizer runtime is "
                    f"missing: apt-get install libclang-rt-<N>-dev; bash scripts/setup.sh installs it): "
                    f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return None


def build_harness(out_dir: Path, exe: Path, cc: str = "clang") -> Path:
    cmd = [cc, *CFLAGS, *SANITIZE, f"-I{out_dir}", str(HARNESS), str(out_dir / f"{NAME}.c"), "-lm", "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"building the harness failed:\n$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return exe


def run_fuzzer(exe: Path, corpora: list[Path], weights: Path, *, runs: int = -1, seconds: int = 0, seed: int = 1,
               jobs: int = 0, timeout: int | None = None, artifacts: Path | None = None) -> subprocess.CompletedProcess:
    """libFuzzer over corpora (the first one grows). runs / seconds: the budget (-runs / -max_total_time);
    weights: the compiled model's .weights (the blob of the inputs with param bit 7 set)."""
    args = [str(exe), f"-seed={seed}", f"-max_len={MAX_LEN}", "-timeout=10", "-rss_limit_mb=2048",
            "-print_final_stats=1", "-detect_leaks=1"]
    if runs >= 0:
        args.append(f"-runs={runs}")
    if seconds:
        args.append(f"-max_total_time={seconds}")
    if jobs:
        args += [f"-jobs={jobs}", f"-workers={jobs}"]
    if artifacts is not None:
        args.append(f"-artifact_prefix={artifacts}/")
    args += [str(c) for c in corpora]
    env = {**os.environ, **ENV, "FUZZ_CAPI_WEIGHTS": str(weights)}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=artifacts or exe.parent)


def sanitizer_reports(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(r in line for r in REPORTS)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "pt2c-fuzz-capi")
    ap.add_argument("--seconds", type=int, default=300, help="-max_total_time (default 300)")
    ap.add_argument("--runs", type=int, default=-1, help="-runs (default: unlimited)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=0, help="parallel workers (libFuzzer -jobs / -workers)")
    ap.add_argument("--cc", default="clang")
    ap.add_argument("--write-corpus", action="store_true", help="regenerate the committed seeds and exit")
    ap.add_argument("--build-only", action="store_true", help="compile the model, build the harness, write the seeds")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent.parent / "src"))
    out = compile_model(a.work / "out")
    if a.write_corpus:
        for p in write_seeds(out, CORPUS):
            print(f"wrote {p.relative_to(HERE.parent.parent)} ({p.stat().st_size} bytes)")
        return 0
    why = fuzzer_available(a.cc)
    if why:
        print(why, file=sys.stderr)
        return 2
    exe = build_harness(out, a.work / "fuzz_capi", a.cc)
    corpus = a.work / "corpus"
    write_seeds(out, corpus)
    if a.build_only:
        print(f"built {exe}; run: FUZZ_CAPI_WEIGHTS={out / (NAME + '.weights')} {exe} -seed=1 -max_len={MAX_LEN} "
              f"-max_total_time=300 {corpus} {CORPUS}")
        return 0
    print(f"fuzzing {a.seconds}s: {exe} {corpus} {CORPUS}", flush=True)
    r = run_fuzzer(exe, [corpus, CORPUS], out / f"{NAME}.weights", runs=a.runs, seconds=a.seconds, seed=a.seed, jobs=a.jobs,
                   artifacts=a.work)
    log = r.stdout + r.stderr
    if a.jobs:  # workers log to fuzz-<n>.log in the work folder
        log += "".join(p.read_text(errors="replace") for p in sorted(a.work.glob("fuzz-*.log")))
    (a.work / "last.log").write_text(log)
    print("\n".join([line for line in log.splitlines() if line.startswith(("stat::", "Done", "#"))][-12:]))
    reports = sanitizer_reports(log)
    print(f"exit {r.returncode}; {len(reports)} report line(s); full log: {a.work / 'last.log'}")
    for line in reports[:20]:
        print("  " + line)
    return 0 if r.returncode == 0 and not reports else 1


if __name__ == "__main__":
    sys.exit(main())
