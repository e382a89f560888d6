"""Latency of pt2c-built models vs PyTorch eager, single process, interleaved runs.

    python bench/latency.py [--threads 1] [--runs 20] [--models resnet18,bert,...] [--md docs/BENCHMARKS.md]

Each model (bench size from pt2c.zoo) is exported, compiled for x86_64-v3, built with
-O3, then pt2c and eager are timed alternately (so machine drift hits both alike); the
median of --runs runs after warm-up is reported, with the max error relative to eager.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--models", default="mlp,resnet18,mobilenetv2,bert,gpt2,llama,lstm")
    ap.add_argument("--target", default="x86_64-v3")
    ap.add_argument("--cflags", default="-O3 -std=c99")
    ap.add_argument("--md", help="append a markdown table to this file")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before any OpenMP runtime loads

    import numpy as np
    import torch

    import pt2c
    from pt2c import zoo

    torch.set_num_threads(args.threads)
    rows = []
    for fam in args.models.split(","):
        model, inputs = zoo.FAMILIES[fam]("bench")
        ep = torch.export.export(model, inputs, strict=False)
        out = tempfile.mkdtemp(prefix=f"pt2c_bench_{fam}_")
        t0 = time.perf_counter()
        pt2c.compile(ep, out, name=fam, target=args.target)
        t_compile = time.perf_counter() - t0
        pt2c.build(out, cflags=args.cflags)
        m = pt2c.load(out)
        xs = [x.numpy() for x in inputs]
        with torch.no_grad():
            ref = model(*inputs)
            ref = (ref if isinstance(ref, torch.Tensor) else ref[0]).numpy()
            got = m.run(xs)[0]
            err = float(np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max())))
            for _ in range(3):
                model(*inputs)
                m.run(xs)
            te, tp = [], []
            for _ in range(args.runs):
                t = time.perf_counter()
                model(*inputs)
                te.append(time.perf_counter() - t)
                t = time.perf_counter()
                m.run(xs)
                tp.append(time.perf_counter() - t)
        e, p = float(np.median(te)) * 1e3, float(np.median(tp)) * 1e3
        rows.append((fam, e, p, p / e, err, t_compile, m.manifest["memory"]["workspace_bytes"]))
        print(f"{fam:12s} eager {e:8.2f} ms   pt2c {p:8.2f} ms   ratio {p / e:5.2f}   rel err {err:.1e}   "
              f"compile {t_compile:.1f} s", flush=True)

    if args.md:
        cpu = platform.processor() or platform.machine()
        try:
            cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
        except (OSError, StopIteration):
            pass
        with open(args.md, "a") as f:
            f.write(f"\n### {time.strftime('%Y-%m-%d')}: {args.threads} thread(s), {cpu}, torch {torch.__version__}\n\n")
            f.write(f"Command: `python bench/latency.py {' '.join(sys.argv[1:])}`\n\n")
            f.write("| model (bench size) | eager ms | pt2c ms | pt2c / eager | max err / scale | compile s | workspace |\n")
            f.write("|---|---:|---:|---:|---:|---:|---:|\n")
            for fam, e, p, r, err, tc, ws in rows:
                f.write(f"| {fam} | {e:.2f} | {p:.2f} | {r:.2f} | {err:.1e} | {tc:.1f} | {ws / 2**20:.1f} MiB |\n")


if __name__ == "__main__":
    main()
