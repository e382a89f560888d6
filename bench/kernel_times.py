"""Per-kernel time of a zoo model: the generated C with a timer around each kernel call.

    python bench/kernel_times.py MODEL [--target x86_64-v3] [--threads 1] [--runs 30] [--top 25 | --order] [--cold]
                                  [--ftz] [--cflags "-DNAME=VALUE ..."]

Compiles the zoo model (resnet18, mobilenetv2, bert, gpt2, mlp, mlp_b64: the MLP at batch 64) at its bench size (or a
bench/models.py:function model, as bench/ab.py takes), puts a
clock_gettime pair around every pt2c_* kernel call of the generated C (model.c, and the code
path files model_<isa>.c of a multi-versioned --target such as x86_64-v3,x86_64-v4), builds it
with gcc -O3 and OpenMP, runs it --runs times after a warm-up and prints the mean time per call
site (named after the node's output, as in the C) and per kernel, for the code path the CPU
took.  The timers cost well under a microsecond per call; compare sites, not the total with an
untimed build.  --cold: a sweep over 256 MiB before every run (not timed) evicts the weights
and the workspace from the caches, as when other programs run between inferences (the engine
comparison interleaves engines).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

CALL = re.compile(r"^(\s+)(pt2c_[a-z0-9_]+)\((\w+)")
STATEMENT_END = re.compile(r";\s*(/\*.*\*/)?\s*$")  # a whole call on one line, maybe a comment after it
HEADER = """#define _POSIX_C_SOURCE 199309L
#include <time.h>
static double prof_t[{n}];
static double prof_now(void) {{ struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }}
double *prof_{stem}(void) {{ return prof_t; }}
#if defined(__SSE__)
#include <xmmintrin.h>
void prof_ftz_{stem}(void) {{ _mm_setcsr(_mm_getcsr() | 0x8040); }} /* flush-to-zero + denormals-are-zero */
#endif
"""


def instrument(path: Path) -> list[str]:
    """Wraps each kernel call statement of one generated C file; returns the call sites in order."""
    out, sites = [], []
    lines = iter(path.read_text().split("\n"))
    for line in lines:
        m = CALL.match(line)
        if not m:
            out.append(line)
            continue
        stmt = [line]  # a call wrapped over several lines (named arguments) runs to the line ending in ';'
        while not STATEMENT_END.search(stmt[-1]):
            stmt.append(next(lines))
        body = "\n".join(stmt).strip()
        out.append(f"{m.group(1)}{{ double t0_ = prof_now(); {body} prof_t[{len(sites)}] += prof_now() - t0_; }}")
        sites.append(f"{m.group(2)}:{m.group(3)}")
    path.write_text(HEADER.format(n=max(1, len(sites)), stem=path.stem) + "\n".join(out))
    return sites


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--target", default="x86_64-v3")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--order", action="store_true", help="every call site in program order, not the top ones")
    ap.add_argument("--cold", action="store_true", help="evict the caches before every run")
    ap.add_argument("--ftz", action="store_true", help="flush denormals to zero in the calling thread (x86; "
                    "1 thread: OpenMP workers keep their own mode) to see what denormal arithmetic costs")
    ap.add_argument("--cflags", default="", help="extra C compiler flags (e.g. -DPT2C_GEMM_KC=192 to try a setting)")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch loads its OpenMP runtime

    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import pt2c
    from pt2c import zoo

    if ":" in args.model:  # path/to/file.py:function -> (model, inputs), as bench/ab.py takes
        import importlib.util

        path, fn = args.model.rsplit(":", 1)
        spec = importlib.util.spec_from_file_location("kt_models", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        model, inputs = getattr(mod, fn)()
    else:
        model, inputs = zoo.bench_model(args.model)
    ep = torch.export.export(model.eval(), inputs)
    out = Path(tempfile.mkdtemp(prefix=f"pt2c_kernel_times_{Path(args.model).stem.replace(':', '_')}_"))
    pt2c.compile(ep, out, target=args.target, name="model")
    sites = {f.stem: instrument(f) for f in sorted(out.glob("model*.c")) if f.name != "model_driver.c"}
    lib = pt2c.build(out, cflags=f"-O3 -std=c99 {args.cflags}".strip())
    m = pt2c.load(out, lib=lib, threads=args.threads)
    stem = "model_" + m.isa.replace("-", "_")
    stem = stem if stem in sites else "model"  # the base target's path is model.c
    names = sites[stem]
    xs = [t.numpy() for t in inputs]
    if args.ftz:
        getattr(ctypes.CDLL(str(lib)), f"prof_ftz_{stem}")()
    for _ in range(5):
        m(*xs)
    cdll = ctypes.CDLL(str(lib))
    acc = getattr(cdll, f"prof_{stem}")
    acc.restype = ctypes.POINTER(ctypes.c_double)
    t = acc()
    for i in range(len(names)):
        t[i] = 0.0
    lat = []
    sweep = np.zeros((256 << 20) // 4, np.float32) if args.cold else None
    for _ in range(args.runs):
        if sweep is not None:
            sweep += 1.0
        t0 = time.perf_counter()
        m(*xs)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    per = [t[i] / args.runs * 1e3 for i in range(len(names))]
    cold = (", caches evicted before every run" if args.cold else "") + (", denormals flushed" if args.ftz else "")
    print(f"{args.model}: code path {m.isa}, {args.threads} thread(s){cold}; median {lat[len(lat) // 2] * 1e3:.3f} ms "
          f"per run, kernel calls {sum(per):.3f} ms ({out})")
    rows = list(zip(per, names)) if args.order else sorted(zip(per, names), reverse=True)[: args.top]
    for ms, name in rows:
        print(f"{ms:9.3f} ms  {name}")
    by_kernel: dict[str, float] = defaultdict(float)
    for ms, name in zip(per, names):
        by_kernel[name.split(":")[0]] += ms
    print("per kernel: " + ", ".join(f"{k} {v:.3f} ms" for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
